//! Server signing keys of purpose terminal and the terminal session token
//! (spec 5.3; `terminal::keys`, `terminal::token`), on both engines with an
//! injected clock (no sleeps): the first key is created once even with
//! concurrent callers on two pools; a scheduled rotation publishes the next key
//! `agent.jwks_max_age` before it signs, a retiring key stays in the JWKS until
//! every token it signed has expired and then leaves it; an emergency rotation
//! signs at once; a token decodes and verifies with bothy-proto's decoder
//! against the published JWKS, every claim literal; wdi and cek refusals; the
//! private key is sealed at rest and appears in no log, audit entry, error or
//! `Debug` output. Last, `bothy-server admin rotate-terminal-key` as a process
//! on a SQLite data directory.

#![allow(clippy::unwrap_used)] // test bodies are plain fns called by the generated #[test]s

// Only the databases and the both_engines! macro are used here.
use bothy_testkit as support;

use std::collections::BTreeSet;
use std::io::Write;
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bothy_proto::b64;
use bothy_proto::ids;
use bothy_proto::jwk::{JWKS_MAX_KEYS, Jwks};
use bothy_proto::jws::{self, Att, JwsError, decode_terminal_session, ephemeral_key_hash};
use bothy_proto::report::ProfileKind;
use bothy_server::audit::{self, AuditAction, AuditFilter, PageRequest};
use bothy_server::config::Config;
use bothy_server::db::{Db, Engine};
use bothy_server::pepper::{Pepper, PepperPurpose};
use bothy_server::terminal::keys::{
    self, EnsuredKey, KeyError, KeyPolicy, KeyRecord, KeyStatus, Promotion, Rotation, RotationMode,
};
use bothy_server::terminal::token::{self, TokenError, TokenRequest};
use ring::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, Nonce, UnboundKey};
use serde_json::Value;
use sqlx::Row;
use support::{TestDb, both_engines};
use uuid::Uuid;

/// 2026-12-01T00:00:00Z.
const T0: i64 = 1_796_083_200_000;
const HOUR: i64 = 3_600_000;

fn pepper() -> Pepper {
    Pepper::from_bytes([42; 32])
}

fn config() -> Config {
    Config::default()
}

/// Defaults: publish 24 h ahead; retire 30 s + 30 s + 5 min after the switch.
fn policy() -> KeyPolicy {
    KeyPolicy::from_config(&config())
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap()
}

async fn jwks_at(db: &Db, now: i64) -> Jwks {
    let mut conn = db.pool().acquire().await.unwrap();
    keys::jwks(&mut conn, now).await.unwrap()
}

fn kids(jwks: &Jwks) -> Vec<String> {
    jwks.keys().iter().map(|k| k.kid().to_owned()).collect()
}

async fn records(db: &Db) -> Vec<KeyRecord> {
    let mut conn = db.pool().acquire().await.unwrap();
    keys::list(&mut conn).await.unwrap()
}

async fn record(db: &Db, kid: &str) -> KeyRecord {
    records(db)
        .await
        .into_iter()
        .find(|r| r.kid == kid)
        .unwrap()
}

async fn sealed_of(db: &Db, kid: &str) -> Option<String> {
    sqlx::query("SELECT private_sealed FROM server_signing_keys WHERE kid = $1")
        .bind(kid)
        .fetch_one(db.pool())
        .await
        .unwrap()
        .try_get("private_sealed")
        .unwrap()
}

/// The audit entries `terminal.key_rotate`, oldest first.
async fn rotation_audit(db: &Db) -> Vec<Value> {
    let filter = AuditFilter {
        action: Some(AuditAction::TerminalKeyRotate),
        ..AuditFilter::default()
    };
    let page = audit::list(
        db,
        &filter,
        PageRequest {
            before: None,
            limit: 500,
        },
    )
    .await
    .unwrap();
    page.entries
        .into_iter()
        .rev()
        .map(|entry| {
            assert_eq!(entry.actor, audit::Actor::System);
            assert_eq!(entry.decision, audit::Decision::Allow);
            entry.details
        })
        .collect()
}

fn id(n: u8) -> Uuid {
    Uuid::from_bytes([n; 16])
}

/// A claude open request with cek of the ephemeral key `[9; 32]`.
fn claude_open(cek: &str) -> TokenRequest<'_> {
    TokenRequest {
        instance_id: "0192f5c4-7d3a-7b2e-9f00-1234567890ab",
        host_id: id(1),
        person_id: id(2),
        session_id: id(3),
        device_id: id(4),
        profile: "claude",
        profile_kind: ProfileKind::Claude,
        client_ephemeral_key_hash: cek,
        own: true,
        os_user: "alice",
        workdir_index: Some(2),
        att: Att::Open,
    }
}

fn cek_of_nines() -> String {
    b64::encode(&ephemeral_key_hash(&[9; 32]))
}

/// Opens `private_sealed` the documented way (keys.rs, D-50): base64url of
/// nonce ‖ ciphertext ‖ tag, ChaCha20-Poly1305 under the pepper's terminal key
/// seal key, associated data `bothy.v1.server_signing_key\0<id>\0terminal\0<kid>`.
fn unseal(pepper: &Pepper, id: &str, kid: &str, sealed: &str) -> [u8; 32] {
    let key = pepper.mac(PepperPurpose::TerminalKeySealKey, b"");
    let key = LessSafeKey::new(UnboundKey::new(&CHACHA20_POLY1305, &key).unwrap());
    let bytes = b64::decode(sealed).unwrap();
    assert_eq!(bytes.len(), 12 + 32 + 16);
    let (nonce, ciphertext) = bytes.split_at(12);
    let mut in_out = ciphertext.to_vec();
    let aad = format!("bothy.v1.server_signing_key\0{id}\0terminal\0{kid}");
    let plain = key
        .open_in_place(
            Nonce::try_assume_unique_for_key(nonce).unwrap(),
            Aad::from(aad.as_bytes()),
            &mut in_out,
        )
        .unwrap();
    let seed: [u8; 32] = (&*plain).try_into().unwrap();
    // It is the key of that kid.
    assert_eq!(jws::Ed25519SigningKey::from_seed(&seed).kid(), kid);
    seed
}

/// The seeds of every key that still has a private part, opened from the rows.
async fn seeds(db: &Db, pepper: &Pepper) -> Vec<[u8; 32]> {
    let rows = sqlx::query(
        "SELECT id, kid, private_sealed FROM server_signing_keys WHERE private_sealed IS NOT NULL",
    )
    .fetch_all(db.pool())
    .await
    .unwrap();
    rows.iter()
        .map(|row| {
            let sealed: String = row.try_get("private_sealed").unwrap();
            let id: String = row.try_get("id").unwrap();
            let kid: String = row.try_get("kid").unwrap();
            let seed = unseal(pepper, &id, &kid, &sealed);
            // The stored value is not the raw key.
            assert_ne!(sealed, b64::encode(&seed));
            assert!(!sealed.contains(&b64::encode(&seed)));
            seed
        })
        .collect()
}

/// The texts a private key could leak as.
fn canaries(seed: &[u8; 32]) -> Vec<String> {
    let hex: String = seed.iter().map(|b| format!("{b:02x}")).collect();
    vec![
        b64::encode(seed),
        hex,
        format!("{seed:?}"),
        format!("{seed:x?}"),
    ]
}

/// A log writer shared with the test.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

async fn first_key_once_with_concurrent_callers(engine: Engine) {
    let t = TestDb::new(engine).await;
    // A second pool on the same database: another process or node.
    let other = t.connect_again().await;
    assert!(jwks_at(&t.db, T0).await.is_empty());
    assert!(matches!(
        keys::signer(&t.db, &pepper(), T0).await,
        Err(KeyError::NoActiveKey)
    ));

    // All callers start together, so several find no key and race to insert.
    let start = Arc::new(tokio::sync::Barrier::new(8));
    let mut tasks = Vec::new();
    for i in 0..8 {
        let db = if i % 2 == 0 {
            t.db.clone()
        } else {
            other.clone()
        };
        let start = Arc::clone(&start);
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            keys::ensure_active(&db, &pepper(), T0 + i).await.unwrap()
        }));
    }
    let mut results: Vec<EnsuredKey> = Vec::new();
    for task in tasks {
        results.push(task.await.unwrap());
    }
    assert_eq!(
        results.iter().filter(|r| r.created).count(),
        1,
        "{results:?}"
    );
    let kid = results[0].kid.clone();
    assert!(results.iter().all(|r| r.kid == kid), "{results:?}");
    assert_eq!(t.count("server_signing_keys").await, 1);
    let stored = records(&t.db).await;
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].status, KeyStatus::Active);
    assert_eq!(stored[0].kid, stored[0].public_jwk.thumbprint());
    assert_eq!(stored[0].activated_at, Some(stored[0].created_at));
    assert_eq!(kids(&jwks_at(&t.db, T0).await), [kid.as_str()]);
    assert_eq!(
        keys::ensure_active(&other, &pepper(), T0 + HOUR)
            .await
            .unwrap(),
        EnsuredKey {
            kid: kid.clone(),
            created: false
        }
    );
    let audit = rotation_audit(&t.db).await;
    assert_eq!(audit.len(), 1);
    assert_eq!(audit[0], serde_json::json!({"step": "first", "kid": kid}));

    // Concurrent scheduled rotations publish one next key.
    let mut tasks = Vec::new();
    for i in 0..6 {
        let db = if i % 2 == 0 {
            t.db.clone()
        } else {
            other.clone()
        };
        tasks.push(tokio::spawn(async move {
            keys::rotate(
                &db,
                &pepper(),
                &policy(),
                RotationMode::Scheduled,
                T0 + HOUR,
            )
            .await
            .unwrap()
        }));
    }
    let mut scheduled = BTreeSet::new();
    let mut already = 0;
    for task in tasks {
        match task.await.unwrap() {
            Rotation::Scheduled { kid, .. } => {
                scheduled.insert(kid);
            }
            Rotation::AlreadyScheduled { kid, .. } => {
                already += 1;
                scheduled.insert(kid);
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(scheduled.len(), 1);
    assert_eq!(already, 5);
    let next: Vec<KeyRecord> = records(&t.db)
        .await
        .into_iter()
        .filter(|r| r.status == KeyStatus::Next)
        .collect();
    assert_eq!(next.len(), 1);
    other.close().await;
}

async fn scheduled_rotation_lifecycle(engine: Engine) {
    let t = TestDb::new(engine).await;
    let (pepper, policy, config) = (pepper(), policy(), config());
    let ttl = config.terminal.session_token_ttl;
    let leeway = ms(config.auth.clock_leeway);
    let a = keys::ensure_active(&t.db, &pepper, T0).await.unwrap().kid;
    assert_eq!(keys::signer(&t.db, &pepper, T0).await.unwrap().kid(), a);

    // Scheduled: B is published now and signs jwks_max_age later.
    let t1 = T0 + HOUR;
    let Rotation::Scheduled {
        kid: b,
        activates_at,
    } = keys::rotate(&t.db, &pepper, &policy, RotationMode::Scheduled, t1)
        .await
        .unwrap()
    else {
        panic!("not scheduled")
    };
    assert_eq!(activates_at, t1 + ms(config.agent.jwks_max_age));
    assert_eq!(activates_at, t1 + 24 * HOUR);
    assert_eq!(kids(&jwks_at(&t.db, t1).await), [a.clone(), b.clone()]);
    let rec_b = record(&t.db, &b).await;
    assert_eq!(
        (rec_b.status, rec_b.created_at, rec_b.activated_at),
        (KeyStatus::Next, t1, None)
    );
    assert_eq!(
        keys::rotate(&t.db, &pepper, &policy, RotationMode::Scheduled, t1 + 1)
            .await
            .unwrap(),
        Rotation::AlreadyScheduled {
            kid: b.clone(),
            activates_at
        }
    );

    // Until activates_at A signs, from then on B: published jwks_max_age before.
    let just_before = activates_at - 1;
    let signer_a = keys::signer(&t.db, &pepper, just_before).await.unwrap();
    assert_eq!(signer_a.kid(), a);
    let cek = cek_of_nines();
    let last_of_a = token::issue(&signer_a, &claude_open(&cek), ttl, just_before).unwrap();
    let signer_b = keys::signer(&t.db, &pepper, activates_at).await.unwrap();
    assert_eq!(signer_b.kid(), b);
    assert!(activates_at - rec_b.created_at >= ms(config.agent.jwks_max_age));
    // B was in every JWKS from its creation to its first signature.
    for at in [t1, t1 + HOUR, activates_at - 1, activates_at] {
        assert!(jwks_at(&t.db, at).await.get(&b).is_some(), "{at}");
    }

    // Promotion at some later sweep: B active, A retiring.
    let tp = activates_at + 10_000;
    assert_eq!(
        keys::promote_due(&t.db, &policy, tp).await.unwrap(),
        Promotion {
            activated: Some(b.clone()),
            retiring: Some(a.clone()),
            retired: vec![],
        }
    );
    assert!(
        keys::promote_due(&t.db, &policy, tp)
            .await
            .unwrap()
            .is_empty()
    );
    let rec_a = record(&t.db, &a).await;
    let published_until = tp + ms(policy.retire_after);
    assert_eq!(rec_a.status, KeyStatus::Retiring);
    assert_eq!(rec_a.retiring_at, Some(activates_at));
    assert_eq!(rec_a.published_until, Some(published_until));
    assert_eq!(
        sealed_of(&t.db, &a).await,
        None,
        "no private key once it stops signing"
    );
    let rec_b = record(&t.db, &b).await;
    assert_eq!(
        (rec_b.status, rec_b.activated_at),
        (KeyStatus::Active, Some(activates_at))
    );
    assert_eq!(keys::signer(&t.db, &pepper, tp).await.unwrap().kid(), b);

    // Every token A signed expires (exp plus the leeway the host grants) while A
    // is still published, with room for a node's cached signer.
    let expiry_on_host = last_of_a.exp * 1000 + leeway;
    assert!(expiry_on_host + ms(config.signing_key.cache_ttl) <= published_until);
    for at in [tp, expiry_on_host, published_until - 1] {
        let jwks = jwks_at(&t.db, at).await;
        assert_eq!(kids(&jwks), [a.clone(), b.clone()], "{at}");
        assert!(decode_terminal_session(&last_of_a.token, &jwks).is_ok());
    }
    assert!(
        keys::promote_due(&t.db, &policy, published_until - 1)
            .await
            .unwrap()
            .is_empty()
    );

    // Then A leaves the JWKS, even before the sweep marks it retired.
    let gone = jwks_at(&t.db, published_until).await;
    assert_eq!(kids(&gone), [b.as_str()]);
    assert_eq!(
        decode_terminal_session(&last_of_a.token, &gone),
        Err(JwsError::UnknownKid)
    );
    assert_eq!(
        keys::promote_due(&t.db, &policy, published_until)
            .await
            .unwrap(),
        Promotion {
            activated: None,
            retiring: None,
            retired: vec![a.clone()],
        }
    );
    let rec_a = record(&t.db, &a).await;
    assert_eq!(
        (rec_a.status, rec_a.retired_at),
        (KeyStatus::Retired, Some(published_until))
    );
    assert_eq!(
        kids(&jwks_at(&t.db, published_until + HOUR).await),
        [b.as_str()]
    );

    assert_eq!(
        rotation_audit(&t.db).await,
        [
            serde_json::json!({"step": "first", "kid": a}),
            serde_json::json!({"step": "scheduled", "kid": b, "active_kid": a}),
            serde_json::json!({"step": "activated", "kid": b, "previous_kid": a}),
            serde_json::json!({"step": "retired", "kid": a}),
        ]
    );

    // The next scheduled rotation after a matured one promotes first.
    let t2 = published_until + HOUR;
    let Rotation::Scheduled { kid: c, .. } =
        keys::rotate(&t.db, &pepper, &policy, RotationMode::Scheduled, t2)
            .await
            .unwrap()
    else {
        panic!("not scheduled")
    };
    let t3 = t2 + 25 * HOUR;
    let Rotation::Scheduled { kid: d, .. } =
        keys::rotate(&t.db, &pepper, &policy, RotationMode::Scheduled, t3)
            .await
            .unwrap()
    else {
        panic!("not scheduled")
    };
    assert_eq!(record(&t.db, &b).await.status, KeyStatus::Retiring);
    assert_eq!(record(&t.db, &c).await.status, KeyStatus::Active);
    assert_eq!(kids(&jwks_at(&t.db, t3).await), [b, c, d]);
}

async fn emergency_rotation(engine: Engine) {
    let t = TestDb::new(engine).await;
    let (pepper, policy) = (pepper(), policy());
    let a = keys::ensure_active(&t.db, &pepper, T0).await.unwrap().kid;
    let Rotation::Scheduled { kid: b, .. } =
        keys::rotate(&t.db, &pepper, &policy, RotationMode::Scheduled, T0 + 1)
            .await
            .unwrap()
    else {
        panic!("not scheduled")
    };

    let now = T0 + 2;
    let rotation = keys::rotate(&t.db, &pepper, &policy, RotationMode::Emergency, now)
        .await
        .unwrap();
    let Rotation::Emergency { kid: c, .. } = &rotation else {
        panic!("{rotation:?}")
    };
    let c = c.clone();
    let until = now + ms(policy.retire_after);
    assert_eq!(
        rotation,
        Rotation::Emergency {
            kid: c.clone(),
            previous_kid: a.clone(),
            previous_published_until: until,
            withdrawn_kid: Some(b.clone()),
        }
    );
    // C signs at once; A stays published for its tokens; B never signed and is gone.
    assert_eq!(keys::signer(&t.db, &pepper, now).await.unwrap().kid(), c);
    assert_eq!(kids(&jwks_at(&t.db, now).await), [a.clone(), c.clone()]);
    let rec_b = record(&t.db, &b).await;
    assert_eq!(
        (rec_b.status, rec_b.activated_at, rec_b.retired_at),
        (KeyStatus::Retired, None, Some(now))
    );
    assert_eq!(sealed_of(&t.db, &b).await, None);
    assert_eq!(sealed_of(&t.db, &a).await, None);
    let rec_c = record(&t.db, &c).await;
    assert_eq!(
        (rec_c.status, rec_c.activates_at, rec_c.activated_at),
        (KeyStatus::Active, now, Some(now))
    );
    assert_eq!(
        rotation_audit(&t.db).await.last().unwrap(),
        &serde_json::json!({"step": "emergency", "kid": c, "previous_kid": a, "withdrawn_kid": b})
    );
    assert_eq!(kids(&jwks_at(&t.db, until).await), [c.as_str()]);

    // Emergency rotations in quick succession fill the JWKS up to its bound.
    let mut published = jwks_at(&t.db, now).await.len();
    let refused = loop {
        match keys::rotate(&t.db, &pepper, &policy, RotationMode::Emergency, now + 1).await {
            Ok(Rotation::Emergency { withdrawn_kid, .. }) => {
                assert_eq!(withdrawn_kid, None);
                published += 1;
                assert_eq!(jwks_at(&t.db, now + 1).await.len(), published);
            }
            Ok(other) => panic!("{other:?}"),
            Err(error) => break error,
        }
    };
    assert!(
        matches!(refused, KeyError::TooManyPublishedKeys { max } if max == JWKS_MAX_KEYS),
        "{refused:?}"
    );
    assert_eq!(published, JWKS_MAX_KEYS);
    // Once the retiring keys' tokens have expired, rotation works again.
    let later = now + 1 + ms(policy.retire_after);
    assert!(matches!(
        keys::rotate(&t.db, &pepper, &policy, RotationMode::Emergency, later)
            .await
            .unwrap(),
        Rotation::Emergency { .. }
    ));
    assert_eq!(jwks_at(&t.db, later).await.len(), 2);
}

async fn token_issued_and_verified(engine: Engine) {
    let t = TestDb::new(engine).await;
    let (pepper, config) = (pepper(), config());
    let ttl = config.terminal.session_token_ttl;
    let kid = keys::ensure_active(&t.db, &pepper, T0).await.unwrap().kid;
    let now = T0 + 1_234;
    let signer = keys::signer(&t.db, &pepper, now).await.unwrap();
    let jwks = jwks_at(&t.db, now).await;
    let cek = cek_of_nines();

    let issued = token::issue(&signer, &claude_open(&cek), ttl, now).unwrap();
    assert_eq!(issued.exp, 1_796_083_231);
    assert_eq!(issued.expires_at, 1_796_083_231_000);
    assert_eq!(issued.jti.get_version_num(), 7);
    assert_eq!(ids::v7_unix_millis(&issued.jti), Some(now as u64));

    // The parts, literally.
    let parts: Vec<&str> = issued.token.split('.').collect();
    assert_eq!(parts.len(), 3);
    assert_eq!(
        String::from_utf8(b64::decode(parts[0]).unwrap()).unwrap(),
        format!(r#"{{"alg":"EdDSA","kid":"{kid}","typ":"terminal-session+jwt"}}"#)
    );
    assert_eq!(
        String::from_utf8(b64::decode(parts[1]).unwrap()).unwrap(),
        format!(
            concat!(
                r#"{{"iss":"0192f5c4-7d3a-7b2e-9f00-1234567890ab","#,
                r#""aud":"01010101-0101-0101-0101-010101010101","#,
                r#""sub":"02020202-0202-0202-0202-020202020202","#,
                r#""sid":"03030303-0303-0303-0303-030303030303","#,
                r#""jti":"{jti}","iat":1796083201,"exp":1796083231,"#,
                r#""dev":"04040404-0404-0404-0404-040404040404","prf":"claude","#,
                r#""cek":"{cek}","own":true,"osu":"alice","wdi":2,"att":"open"}}"#
            ),
            jti = issued.jti,
            cek = cek
        )
    );

    // bothy-proto's host-side decoder, against the published JWKS.
    let claims = decode_terminal_session(&issued.token, &jwks).unwrap();
    assert_eq!(claims.iss, "0192f5c4-7d3a-7b2e-9f00-1234567890ab");
    assert_eq!(claims.aud, id(1));
    assert_eq!(claims.sub, id(2));
    assert_eq!(claims.sid, id(3));
    assert_eq!(claims.jti, issued.jti);
    assert_eq!(claims.iat, 1_796_083_201);
    assert_eq!(claims.exp, 1_796_083_231);
    assert_eq!(claims.dev, id(4));
    assert_eq!(claims.prf, "claude");
    assert_eq!(claims.cek, ephemeral_key_hash(&[9; 32]));
    assert!(claims.cek_matches(&[9; 32]));
    assert!(!claims.cek_matches(&[8; 32]));
    assert!(claims.own);
    assert_eq!(claims.osu, "alice");
    assert_eq!(claims.wdi, Some(2));
    assert_eq!(claims.att, Att::Open);
    let leeway = ms(config.auth.clock_leeway);
    assert!(!claims.is_expired_ms(issued.expires_at + leeway, leeway as u64));
    assert!(claims.is_expired_ms(issued.expires_at + leeway + 1, leeway as u64));
    // Another key's JWKS does not verify it.
    let other = TestDb::new(engine).await;
    keys::ensure_active(&other.db, &pepper, T0).await.unwrap();
    assert_eq!(
        decode_terminal_session(&issued.token, &jwks_at(&other.db, now).await),
        Err(JwsError::UnknownKid)
    );

    // A shell attach: no wdi claim at all; a new jti each time.
    let attach = TokenRequest {
        profile: "shell",
        profile_kind: ProfileKind::Shell,
        own: false,
        workdir_index: None,
        att: Att::Attach,
        ..claude_open(&cek)
    };
    let second = token::issue(&signer, &attach, ttl, now).unwrap();
    assert_ne!(second.jti, issued.jti);
    let payload =
        String::from_utf8(b64::decode(second.token.split('.').nth(1).unwrap()).unwrap()).unwrap();
    assert!(!payload.contains("wdi"), "{payload}");
    assert!(
        payload.ends_with(r#""own":false,"osu":"alice","att":"attach"}"#),
        "{payload}"
    );
    let claims = decode_terminal_session(&second.token, &jwks).unwrap();
    assert_eq!((claims.wdi, claims.att), (None, Att::Attach));

    // wdi only with claude and att = open.
    for (kind, att) in [
        (ProfileKind::Shell, Att::Open),
        (ProfileKind::Command, Att::Open),
        (ProfileKind::Claude, Att::Attach),
        (ProfileKind::Shell, Att::Attach),
    ] {
        let request = TokenRequest {
            profile_kind: kind,
            att,
            ..claude_open(&cek)
        };
        let refused = token::issue(&signer, &request, ttl, now).unwrap_err();
        assert_eq!(refused, TokenError::WorkdirNotAllowed, "{kind:?} {att:?}");
        assert_eq!(
            refused.field_error(),
            Some(("/workdir_index", "not_allowed"))
        );
    }
    let without = TokenRequest {
        workdir_index: None,
        ..claude_open(&cek)
    };
    assert_eq!(
        token::issue(&signer, &without, ttl, now),
        Err(TokenError::WorkdirRequired)
    );

    // A bad client_ephemeral_key_hash is a typed error for 400 invalid_format.
    let good = cek_of_nines();
    for bad in [
        String::new(),
        b64::encode(&[1; 31]),
        b64::encode(&[1; 33]),
        format!("{good}="),
        format!("{good}\n"),
        good.replace(['-', '_'], "+"),
        b64::encode(&[0xfb; 32]).replace('-', "+").replace('_', "/"),
        "x".repeat(43),
    ] {
        if bad == good {
            continue;
        }
        let request = TokenRequest {
            client_ephemeral_key_hash: &bad,
            ..claude_open(&cek)
        };
        let refused = token::issue(&signer, &request, ttl, now).unwrap_err();
        assert_eq!(
            refused,
            TokenError::InvalidClientEphemeralKeyHash,
            "{bad:?}"
        );
        assert_eq!(
            refused.field_error(),
            Some(("/client_ephemeral_key_hash", "invalid_format"))
        );
        assert!(!refused.to_string().contains(&bad) || bad.is_empty());
    }
}

async fn private_key_sealed_and_never_shown(engine: Engine) {
    let t = TestDb::new(engine).await;
    let (pepper, policy, config) = (pepper(), policy(), config());
    let logs = Captured::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    // The test body runs on this thread (block_on), and so does every call below.
    let _logging = tracing::subscriber::set_default(subscriber);

    let mut all_seeds = BTreeSet::new();
    let mut shown: Vec<String> = Vec::new();
    let first = keys::ensure_active(&t.db, &pepper, T0).await.unwrap();
    shown.push(format!("{first:?}"));
    all_seeds.extend(seeds(&t.db, &pepper).await);
    let scheduled = keys::rotate(&t.db, &pepper, &policy, RotationMode::Scheduled, T0 + 1)
        .await
        .unwrap();
    shown.push(format!("{scheduled:?}"));
    all_seeds.extend(seeds(&t.db, &pepper).await);
    let activates = T0 + 1 + ms(policy.publish_ahead);
    let signer = keys::signer(&t.db, &pepper, activates).await.unwrap();
    shown.push(format!("{signer:?} {signer:#?}"));
    let issued = token::issue(
        &signer,
        &claude_open(&cek_of_nines()),
        config.terminal.session_token_ttl,
        activates,
    )
    .unwrap();
    shown.push(format!("{issued:?}"));
    let promotion = keys::promote_due(&t.db, &policy, activates).await.unwrap();
    shown.push(format!("{promotion:?}"));
    let emergency = keys::rotate(
        &t.db,
        &pepper,
        &policy,
        RotationMode::Emergency,
        activates + 1,
    )
    .await
    .unwrap();
    shown.push(format!("{emergency:?}"));
    all_seeds.extend(seeds(&t.db, &pepper).await);
    shown.push(format!("{:?}", records(&t.db).await));
    shown.push(format!("{:?}", jwks_at(&t.db, activates + 1).await));
    assert_eq!(all_seeds.len(), 3, "three keys were made");
    // Only the active key keeps its private part.
    assert_eq!(seeds(&t.db, &pepper).await.len(), 1);
    assert!(!issued.token.is_empty());

    // Another pepper opens nothing; a sealed key moved to another row neither.
    let wrong = keys::signer(&t.db, &Pepper::from_bytes([1; 32]), activates + 1)
        .await
        .unwrap_err();
    assert!(matches!(&wrong, KeyError::Unseal { .. }), "{wrong:?}");
    shown.push(format!("{wrong} {wrong:?}"));
    keys::rotate(
        &t.db,
        &pepper,
        &policy,
        RotationMode::Scheduled,
        activates + 2,
    )
    .await
    .unwrap();
    all_seeds.extend(seeds(&t.db, &pepper).await);
    sqlx::query(
        "UPDATE server_signing_keys SET private_sealed = \
         (SELECT private_sealed FROM server_signing_keys WHERE status = 'active') \
         WHERE status = 'next'",
    )
    .execute(t.db.pool())
    .await
    .unwrap();
    let moved = keys::signer(&t.db, &pepper, activates + 2 + ms(policy.publish_ahead))
        .await
        .unwrap_err();
    assert!(matches!(&moved, KeyError::Unseal { .. }), "{moved:?}");
    shown.push(format!("{moved} {moved:?}"));

    // Nothing the server wrote or showed holds a private key.
    let rows = sqlx::query(
        "SELECT id, purpose, kid, public_jwk, COALESCE(private_sealed, '') AS sealed, status \
         FROM server_signing_keys",
    )
    .fetch_all(t.db.pool())
    .await
    .unwrap();
    let mut stored = String::new();
    for row in &rows {
        for column in ["id", "purpose", "kid", "public_jwk", "sealed", "status"] {
            stored.push_str(&row.try_get::<String, _>(column).unwrap());
            stored.push('\n');
        }
    }
    let audit_rows = sqlx::query("SELECT action, details FROM audit")
        .fetch_all(t.db.pool())
        .await
        .unwrap();
    for row in &audit_rows {
        stored.push_str(&row.try_get::<String, _>("action").unwrap());
        stored.push_str(&row.try_get::<String, _>("details").unwrap());
        stored.push('\n');
    }
    let logged = logs.text();
    assert!(logged.contains("terminal signing key"), "{logged}");
    assert!(logged.contains(&first.kid), "{logged}");
    assert_eq!(all_seeds.len(), 4);
    for seed in &all_seeds {
        for canary in canaries(seed) {
            assert!(!stored.contains(&canary), "database");
            assert!(!logged.contains(&canary), "log");
            for text in &shown {
                assert!(!text.contains(&canary), "{text}");
            }
            assert!(!issued.token.contains(&canary));
        }
    }
}

both_engines!(
    first_key_once_with_concurrent_callers,
    scheduled_rotation_lifecycle,
    emergency_rotation,
    token_issued_and_verified,
    private_key_sealed_and_never_shown,
);

fn admin(data_dir: &std::path::Path, args: &[&str], envs: &[(&str, &str)]) -> Output {
    let home = tempfile::tempdir().unwrap();
    Command::new(env!("CARGO_BIN_EXE_bothy-server"))
        .arg("admin")
        .args(args)
        .env_clear()
        .env("HOME", home.path())
        .env("BOTHY_SERVER__DATA_DIR", data_dir)
        .envs(envs.iter().copied())
        .output()
        .expect("run bothy-server")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The one 43-character kid after `key ` in `line`.
fn kid_after(line: &str, marker: &str) -> String {
    let rest = &line[line.find(marker).unwrap_or_else(|| panic!("{line}")) + marker.len()..];
    let kid: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
        .collect();
    assert_eq!(kid.len(), 43, "{line}");
    kid
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotate_terminal_key_through_the_binary() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    let rotate = ["rotate-terminal-key"];
    let max_age = [("BOTHY_AGENT__JWKS_MAX_AGE", "48h")];
    let mut outputs = Vec::new();

    // A fresh data directory: the first key, active at once.
    let out = admin(&data_dir, &rotate, &max_age);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.starts_with("Created the first terminal signing key "),
        "{stdout}"
    );
    assert!(stdout.contains("; it is active now."), "{stdout}");
    let first = kid_after(&stdout, "signing key ");
    outputs.push(out);

    // Scheduled: a next key, active agent.jwks_max_age (48h here) from now.
    let before = now_ms();
    let out = admin(&data_dir, &rotate, &max_age);
    let after = now_ms();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.starts_with("Published the next terminal signing key "),
        "{stdout}"
    );
    let next = kid_after(&stdout, "signing key ");
    let at = stdout
        .split("becomes active at ")
        .nth(1)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap();
    let at = humantime::parse_rfc3339(at).unwrap();
    let at = at.duration_since(UNIX_EPOCH).unwrap().as_millis() as i64;
    let expected = 48 * HOUR;
    assert!(
        at >= before + expected - 1_000 && at <= after + expected,
        "{stdout}"
    );
    outputs.push(out);

    // Again: already scheduled, nothing changes, exit 0.
    let out = admin(&data_dir, &rotate, &max_age);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.starts_with("A rotation is already scheduled"),
        "{stdout}"
    );
    assert_eq!(kid_after(&stdout, "signing key "), next);
    outputs.push(out);

    // --now: a new key signs at once; the next key is withdrawn.
    let out = admin(&data_dir, &["rotate-terminal-key", "--now"], &max_age);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.starts_with("Created the terminal signing key "),
        "{stdout}"
    );
    assert!(
        stdout.contains("it is active now (emergency rotation)"),
        "{stdout}"
    );
    let emergency = kid_after(&stdout, "signing key ");
    assert_eq!(kid_after(&stdout, "previous key "), first);
    assert_eq!(kid_after(&stdout, "next key "), next);
    assert!(stdout.contains("stays in the JWKS until "), "{stdout}");
    outputs.push(out);

    // Usage and configuration errors exit like the other sub-commands.
    let out = admin(&data_dir, &["rotate-terminal-key", "--soon"], &[]);
    assert_eq!(out.status.code(), Some(2));
    let out = admin(&data_dir, &rotate, &[("BOTHY_AGENT__JWKS_MAX_AGE", "0s")]);
    assert_eq!(out.status.code(), Some(78), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("agent.jwks_max_age"));

    // The database holds what was printed.
    let url = format!("sqlite://{}", data_dir.join("bothy.sqlite").display());
    let db = Db::connect(&url).await.unwrap();
    let mut conn = db.pool().acquire().await.unwrap();
    let stored: Vec<(String, KeyStatus)> = keys::list(&mut conn)
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.kid, r.status))
        .collect();
    assert_eq!(
        stored,
        [
            (first.clone(), KeyStatus::Retiring),
            (next.clone(), KeyStatus::Retired),
            (emergency.clone(), KeyStatus::Active),
        ]
    );
    let jwks = keys::jwks(&mut conn, now_ms()).await.unwrap();
    assert_eq!(kids(&jwks), [first, emergency]);
    drop(conn);

    // Neither stdout nor stderr (the log) shows the private key.
    let pepper = Pepper::load_or_create(&data_dir.join("token_pepper")).unwrap();
    let seeds = seeds(&db, &pepper).await;
    assert_eq!(seeds.len(), 1);
    for out in &outputs {
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        for canary in canaries(&seeds[0]) {
            assert!(!stdout.contains(&canary) && !stderr.contains(&canary));
        }
    }
    db.close().await;
}
