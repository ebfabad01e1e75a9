//! Server signing keys of purpose terminal (spec 5.3 "Terminal session token"
//! and "JWKS refresh", 3.5 hello; DESIGN 3.3 `server_signing_keys`): the Ed25519
//! keys that sign terminal session tokens ([`super::token`]), and their public
//! JWKS, which hello and heartbeat_ack carry to the host services.
//!
//! # Life cycle (docs/decisions.md D-50)
//! `next` → `active` → `retiring` → `retired`, at most one `next` and one
//! `active` key (two unique partial indexes).
//! - [`ensure_active`] creates the first key of a fresh database, `active` at
//!   once: no host service knows any key yet, so there is nothing to publish
//!   ahead of. Race-safe: of two processes or nodes, the second insert hits the
//!   unique index on the active key and reads the winner's key instead.
//! - [`rotate`] with [`RotationMode::Scheduled`] (what `bothy-server admin
//!   rotate-terminal-key` does) publishes a `next` key whose `activates_at` is
//!   `agent.jwks_max_age` after its creation: from its commit it is in the JWKS,
//!   and it signs nothing before `activates_at` (the chapter's "publishes the
//!   next key agent.jwks_max_age before it signs").
//! - [`signer`] returns the key that signs at `now`: the `next` key once its
//!   `activates_at` has passed, else the `active` one. So the switch happens on
//!   time on every node, whether or not [`promote_due`] has run yet.
//! - [`promote_due`] (the sweep's step; [`rotate`] runs it first) records what
//!   time has done: a due `next` key becomes `active`, the previous `active`
//!   one `retiring`, with `published_until = now + retire_after`
//!   ([`KeyPolicy`]: `terminal.session_token_ttl` rounded up to seconds as `exp`
//!   is, plus `auth.clock_leeway`, plus `signing_key.cache_ttl` for a node that
//!   still signs with a cached key). A `retiring` key whose `published_until`
//!   has passed becomes `retired`.
//! - [`jwks`] is every key of purpose terminal that is `next`, `active`, or
//!   `retiring` with `published_until` still ahead (also before [`promote_due`]
//!   marked it `retired`), ordered by creation time and kid. The order depends
//!   only on the set, so two JWKS compare equal exactly when they hold the same
//!   keys (heartbeat_ack sends jwks when the set differs).
//! - [`RotationMode::Emergency`] (`--now`) creates a key that is `active` at
//!   once; the previous active key becomes `retiring` as above (its tokens stay
//!   verifiable until they expire) and a pending `next` key is withdrawn
//!   (`retired` straight away: it never signed). The chapter's limit applies: a
//!   host service may refuse new tokens for one heartbeat interval plus
//!   `signing_key.cache_ttl`, until it has the new JWKS.
//!
//! Every change writes one audit entry `terminal.key_rotate` (actor system)
//! with a `step` code and kids only.
//!
//! # Secrets
//! The private key (the 32-byte Ed25519 seed) is sealed at rest like the TOTP
//! secrets (`identity::totp`): ChaCha20-Poly1305 (ring) under a key derived from
//! the pepper ([`PepperPurpose::TerminalKeySealKey`]), a random 96-bit nonce,
//! and associated data binding the row's ID, the purpose and the kid, so a
//! sealed value copied into another row does not open. It is unsealed only
//! into a [`TerminalSigner`], which has no accessor for it and a redacted
//! `Debug`; only [`super::token`] signs with it. It is dropped from the row
//! (`private_sealed = NULL`) as soon as the key stops signing. Logs, audit
//! entries and errors name keys by kid, the RFC 7638 thumbprint of the public
//! key, never by anything secret.

use std::fmt;
use std::time::Duration;

use bothy_proto::b64;
use bothy_proto::ids::RandomError;
use bothy_proto::jwk::{Ed25519PublicJwk, JWKS_MAX_KEYS, Jwks, JwksKey};
use bothy_proto::jws::{self, Ed25519SigningKey, TYP_TERMINAL_SESSION, TerminalSessionClaims};
use ring::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use sqlx::any::AnyRow;
use sqlx::{AnyConnection, Row};
use uuid::Uuid;
use zeroize::Zeroizing;

use crate::audit::{Actor, AuditAction, AuditDetails, AuditEntry};
use crate::clock::{UnixMillis, millis};
use crate::codes::code_enum;
use crate::config::Config;
use crate::db::{self, Db, DbError, UnitOfWork};
use crate::pepper::{Pepper, PepperPurpose};

/// `server_signing_keys.purpose` of the keys that sign terminal session tokens.
pub const PURPOSE_TERMINAL: &str = "terminal";

/// Attempts of a change that lost a race (a unique index, a conditional update,
/// a busy database) before [`KeyError::Contended`].
const MAX_ATTEMPTS: u32 = 5;

/// Bytes of an Ed25519 private key (the seed).
const SEED_LEN: usize = 32;

/// The columns of [`KeyRecord`], in the order of the table.
const COLUMNS: &str = "id, kid, public_jwk, status, created_at, activates_at, activated_at, \
                       retiring_at, published_until, retired_at";

code_enum! {
    /// The life-cycle state of a key (`server_signing_keys.status`).
    pub enum KeyStatus {
        /// Published in the JWKS; signs from `activates_at` on.
        Next => "next",
        /// Signs (unless a due `next` key has taken over, see [`signer`]).
        Active => "active",
        /// No longer signs; published until `published_until`.
        Retiring => "retiring",
        /// Neither signs nor is published; kept as history.
        Retired => "retired",
    }
}

code_enum! {
    /// The `step` of a `terminal.key_rotate` audit entry.
    pub enum RotationStep {
        /// The first key of a fresh database, active at once (`kid`).
        First => "first",
        /// A scheduled rotation published a next key (`kid`; `active_kid`, the
        /// key that keeps signing until then).
        Scheduled => "scheduled",
        /// A next key became the active key (`kid`; `previous_kid`, now retiring).
        Activated => "activated",
        /// An emergency rotation: a new key active at once (`kid`;
        /// `previous_kid`, now retiring; `withdrawn_kid`, a withdrawn next key).
        Emergency => "emergency",
        /// A retiring key left the JWKS: every token it signed has expired (`kid`).
        Retired => "retired",
    }
}

/// How a rotation publishes its new key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RotationMode {
    /// Publish a `next` key now; it signs after `agent.jwks_max_age`.
    Scheduled,
    /// A new key signs at once (`--now`): for a suspected compromise.
    Emergency,
}

/// The durations of the life cycle, from the configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyPolicy {
    /// `agent.jwks_max_age`: how long a scheduled `next` key is published
    /// before it signs.
    pub publish_ahead: Duration,
    /// How long a key stays in the JWKS after it stopped signing: the token
    /// lifetime as `exp` rounds it (`terminal.session_token_ttl` up to whole
    /// seconds) plus `auth.clock_leeway` (hosts accept until `exp` plus the
    /// leeway) plus `signing_key.cache_ttl` (a node may sign with a cached
    /// key that long after the switch).
    pub retire_after: Duration,
}

impl KeyPolicy {
    /// The policy of `config`.
    pub fn from_config(config: &Config) -> KeyPolicy {
        let token_lifetime = Duration::from_secs(
            u64::try_from(super::token::lifetime_secs(
                config.terminal.session_token_ttl,
            ))
            .unwrap_or(u64::MAX),
        );
        KeyPolicy {
            publish_ahead: config.agent.jwks_max_age,
            retire_after: token_lifetime
                .saturating_add(config.auth.clock_leeway)
                .saturating_add(config.signing_key.cache_ttl),
        }
    }
}

/// Why a key operation failed. Messages name keys by kid only.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The database failed.
    #[error(transparent)]
    Db(#[from] DbError),
    /// No key signs: [`ensure_active`] has not run on this database.
    #[error("there is no active terminal signing key (ensure_active creates the first one)")]
    NoActiveKey,
    /// A stored value does not decode, or the kid is not the thumbprint of the
    /// stored public key.
    #[error("the stored value of server_signing_keys.{column} cannot be used")]
    Stored {
        /// The column.
        column: &'static str,
    },
    /// The sealed private key does not open: another token pepper than the
    /// one that sealed it, or a changed row.
    #[error(
        "the private key of the terminal signing key {kid} cannot be unsealed (another token \
         pepper, or a changed row)"
    )]
    Unseal {
        /// The key's kid.
        kid: String,
    },
    /// The change would put more than [`JWKS_MAX_KEYS`] keys into the JWKS
    /// (emergency rotations in quick succession); retiring keys leave it when
    /// their tokens have expired.
    #[error(
        "the JWKS of purpose terminal would hold more than {max} keys; try again once retiring \
         keys have left it"
    )]
    TooManyPublishedKeys {
        /// The bound.
        max: usize,
    },
    /// The OS random source failed.
    #[error("the operating system's random source failed")]
    Random,
    /// ring refused to seal (never expected).
    #[error("sealing a terminal signing key failed")]
    Seal,
    /// Concurrent changes won every attempt.
    #[error("the terminal signing keys changed concurrently {attempts} times in a row")]
    Contended {
        /// How often it was tried.
        attempts: u32,
    },
}

impl From<RandomError> for KeyError {
    fn from(_: RandomError) -> Self {
        KeyError::Random
    }
}

/// One stored key, without its private part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRecord {
    /// The row's ID (UUIDv7 of its creation).
    pub id: Uuid,
    /// The RFC 7638 thumbprint of `public_jwk`.
    pub kid: String,
    /// The public key.
    pub public_jwk: Ed25519PublicJwk,
    /// The state.
    pub status: KeyStatus,
    /// Created and published.
    pub created_at: UnixMillis,
    /// The earliest time it signs.
    pub activates_at: UnixMillis,
    /// When it became the signing key (`None` for a next key, also a withdrawn one).
    pub activated_at: Option<UnixMillis>,
    /// From when it no longer signs.
    pub retiring_at: Option<UnixMillis>,
    /// Until when it is published after it stopped signing.
    pub published_until: Option<UnixMillis>,
    /// When it was retired.
    pub retired_at: Option<UnixMillis>,
}

impl KeyRecord {
    /// Whether the key is in the JWKS at `now`.
    pub fn is_published(&self, now: UnixMillis) -> bool {
        match self.status {
            KeyStatus::Next | KeyStatus::Active => true,
            KeyStatus::Retiring => self.published_until.is_some_and(|until| until > now),
            KeyStatus::Retired => false,
        }
    }
}

/// What [`ensure_active`] found or did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnsuredKey {
    /// The kid of the active key.
    pub kid: String,
    /// Whether this call created it.
    pub created: bool,
}

/// What [`rotate`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rotation {
    /// There was no key: the first one, active at once.
    First {
        /// Its kid.
        kid: String,
    },
    /// A next key was published.
    Scheduled {
        /// Its kid.
        kid: String,
        /// When it starts to sign.
        activates_at: UnixMillis,
    },
    /// A next key was already published; nothing changed.
    AlreadyScheduled {
        /// Its kid.
        kid: String,
        /// When it starts to sign.
        activates_at: UnixMillis,
    },
    /// A new key signs now.
    Emergency {
        /// Its kid.
        kid: String,
        /// The key that signed until now.
        previous_kid: String,
        /// Until when the previous key stays in the JWKS.
        previous_published_until: UnixMillis,
        /// A pending next key that was withdrawn.
        withdrawn_kid: Option<String>,
    },
}

/// What [`promote_due`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Promotion {
    /// The kid of the next key that became active.
    pub activated: Option<String>,
    /// The kid of the key that stopped signing with it.
    pub retiring: Option<String>,
    /// The kids of the keys that left the JWKS.
    pub retired: Vec<String>,
}

impl Promotion {
    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.activated.is_none() && self.retiring.is_none() && self.retired.is_empty()
    }
}

/// The key that signs terminal session tokens now, unsealed. Its private key
/// has no accessor; `Debug` shows the kid only; it is wiped when dropped.
pub struct TerminalSigner {
    kid: String,
    key: Ed25519SigningKey,
}

impl fmt::Debug for TerminalSigner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TerminalSigner")
            .field("kid", &self.kid)
            .field("private", &"<redacted>")
            .finish()
    }
}

impl TerminalSigner {
    /// The kid the tokens carry.
    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// The public key.
    pub fn public_jwk(&self) -> Ed25519PublicJwk {
        self.key.public_jwk()
    }

    /// Signs `claims` as `terminal-session+jwt` under this key's kid; only
    /// [`super::token::issue`] calls it, after building every claim.
    pub(crate) fn sign(&self, claims: &TerminalSessionClaims) -> String {
        jws::sign(TYP_TERMINAL_SESSION, &self.kid, claims, &self.key)
    }

    /// A signer of a key that is not stored (unit tests of the token module).
    #[cfg(test)]
    pub(crate) fn for_tests(key: Ed25519SigningKey) -> TerminalSigner {
        TerminalSigner {
            kid: key.kid(),
            key,
        }
    }
}

/// Whether a failure may go away when the whole change is tried again.
fn retryable(error: &KeyError) -> bool {
    matches!(error, KeyError::Db(DbError::Conflict(_) | DbError::Busy(_)))
}

/// One attempt of a change: done, or lost a race and to be tried again.
enum Attempt<T> {
    Done(T),
    Again,
}

/// Runs `attempt` until it is done, at most [`MAX_ATTEMPTS`] times.
macro_rules! with_retries {
    ($attempt:expr) => {{
        let mut outcome = Err(KeyError::Contended {
            attempts: MAX_ATTEMPTS,
        });
        for _ in 0..MAX_ATTEMPTS {
            match $attempt.await {
                Ok(Attempt::Done(value)) => {
                    outcome = Ok(value);
                    break;
                }
                Ok(Attempt::Again) => {}
                Err(error) if retryable(&error) => {}
                Err(error) => {
                    outcome = Err(error);
                    break;
                }
            }
        }
        outcome
    }};
}

/// Creates the first key of purpose terminal, active at once, unless an
/// active key exists. Safe to call from every process at start: concurrent
/// callers on one database end up with one key.
pub async fn ensure_active(
    db: &Db,
    pepper: &Pepper,
    now: UnixMillis,
) -> Result<EnsuredKey, KeyError> {
    with_retries!(ensure_active_once(db, pepper, now))
}

async fn ensure_active_once(
    db: &Db,
    pepper: &Pepper,
    now: UnixMillis,
) -> Result<Attempt<EnsuredKey>, KeyError> {
    // The usual case reads only.
    let mut conn = db.pool().acquire().await.map_err(DbError::from)?;
    if let Some(active) = find(&live(&mut conn).await?, KeyStatus::Active) {
        return Ok(Attempt::Done(EnsuredKey {
            kid: active.kid.clone(),
            created: false,
        }));
    }
    drop(conn);

    let mut uow = db.begin(now).await?;
    // Again inside the unit of work: on SQLite another process may have
    // committed while we waited for the write lock. On PostgreSQL a concurrent
    // insert is not visible yet; the unique index refuses the second one.
    if let Some(active) = find(&live(uow.conn()).await?, KeyStatus::Active) {
        return Ok(Attempt::Done(EnsuredKey {
            kid: active.kid.clone(),
            created: false,
        }));
    }
    let new = NewKey::generate(pepper, now)?;
    new.insert(&mut uow, KeyStatus::Active, now, now).await?;
    uow.audit(rotation_entry(step_details(RotationStep::First, &new.jwk)));
    uow.commit().await?;
    tracing::info!(kid = %new.kid, "created the first terminal signing key; it signs now");
    Ok(Attempt::Done(EnsuredKey {
        kid: new.kid,
        created: true,
    }))
}

/// Rotates the keys of purpose terminal (module docs): first [`promote_due`],
/// then a scheduled rotation publishes a `next` key (or reports the one that
/// is pending), an emergency rotation makes a new key sign at once. On a
/// database without keys either mode creates the first key.
pub async fn rotate(
    db: &Db,
    pepper: &Pepper,
    policy: &KeyPolicy,
    mode: RotationMode,
    now: UnixMillis,
) -> Result<Rotation, KeyError> {
    promote_due(db, policy, now).await?;
    with_retries!(rotate_once(db, pepper, policy, mode, now))
}

async fn rotate_once(
    db: &Db,
    pepper: &Pepper,
    policy: &KeyPolicy,
    mode: RotationMode,
    now: UnixMillis,
) -> Result<Attempt<Rotation>, KeyError> {
    let mut uow = db.begin(now).await?;
    let live = live(uow.conn()).await?;
    let Some(active) = find(&live, KeyStatus::Active) else {
        let new = NewKey::generate(pepper, now)?;
        new.insert(&mut uow, KeyStatus::Active, now, now).await?;
        uow.audit(rotation_entry(step_details(RotationStep::First, &new.jwk)));
        uow.commit().await?;
        tracing::info!(kid = %new.kid, "created the first terminal signing key; it signs now");
        return Ok(Attempt::Done(Rotation::First { kid: new.kid }));
    };
    let next = find(&live, KeyStatus::Next);
    let published = live.iter().filter(|key| key.is_published(now)).count();

    match mode {
        RotationMode::Scheduled => {
            if let Some(next) = next {
                return Ok(Attempt::Done(Rotation::AlreadyScheduled {
                    kid: next.kid.clone(),
                    activates_at: next.activates_at,
                }));
            }
            if published + 1 > JWKS_MAX_KEYS {
                return Err(KeyError::TooManyPublishedKeys { max: JWKS_MAX_KEYS });
            }
            let activates_at = now.saturating_add(millis(policy.publish_ahead));
            let new = NewKey::generate(pepper, now)?;
            new.insert(&mut uow, KeyStatus::Next, activates_at, now)
                .await?;
            uow.audit(rotation_entry(
                step_details(RotationStep::Scheduled, &new.jwk)
                    .kid("active_kid", &active.public_jwk),
            ));
            uow.commit().await?;
            tracing::info!(
                kid = %new.kid,
                activates_at,
                "published the next terminal signing key"
            );
            Ok(Attempt::Done(Rotation::Scheduled {
                kid: new.kid,
                activates_at,
            }))
        }
        RotationMode::Emergency => {
            // The new key adds one to the JWKS, a withdrawn next key takes one out.
            if published + 1 - usize::from(next.is_some()) > JWKS_MAX_KEYS {
                return Err(KeyError::TooManyPublishedKeys { max: JWKS_MAX_KEYS });
            }
            let published_until = now.saturating_add(millis(policy.retire_after));
            if !stop_signing(&mut uow, active, now, published_until).await? {
                return Ok(Attempt::Again);
            }
            if let Some(next) = next {
                if !withdraw(&mut uow, next, now).await? {
                    return Ok(Attempt::Again);
                }
            }
            let new = NewKey::generate(pepper, now)?;
            new.insert(&mut uow, KeyStatus::Active, now, now).await?;
            let mut details = step_details(RotationStep::Emergency, &new.jwk)
                .kid("previous_kid", &active.public_jwk);
            if let Some(next) = next {
                details = details.kid("withdrawn_kid", &next.public_jwk);
            }
            uow.audit(rotation_entry(details));
            uow.commit().await?;
            tracing::warn!(
                kid = %new.kid,
                previous_kid = %active.kid,
                previous_published_until = published_until,
                withdrawn_kid = next.map(|k| k.kid.as_str()),
                "emergency rotation: a new terminal signing key signs now"
            );
            Ok(Attempt::Done(Rotation::Emergency {
                kid: new.kid,
                previous_kid: active.kid.clone(),
                previous_published_until: published_until,
                withdrawn_kid: next.map(|k| k.kid.clone()),
            }))
        }
    }
}

/// Records what time has done (module docs): a due `next` key becomes
/// `active` and the previous one `retiring`; `retiring` keys whose
/// `published_until` has passed become `retired`. Reads only when nothing is
/// due; run it from the sweep (and [`rotate`] runs it first).
pub async fn promote_due(
    db: &Db,
    policy: &KeyPolicy,
    now: UnixMillis,
) -> Result<Promotion, KeyError> {
    with_retries!(promote_once(db, policy, now))
}

fn due_next(live: &[KeyRecord], now: UnixMillis) -> Option<&KeyRecord> {
    live.iter()
        .find(|key| key.status == KeyStatus::Next && key.activates_at <= now)
}

fn due_retirements(live: &[KeyRecord], now: UnixMillis) -> impl Iterator<Item = &KeyRecord> {
    live.iter().filter(move |key| {
        key.status == KeyStatus::Retiring && key.published_until.is_some_and(|until| until <= now)
    })
}

async fn promote_once(
    db: &Db,
    policy: &KeyPolicy,
    now: UnixMillis,
) -> Result<Attempt<Promotion>, KeyError> {
    let mut conn = db.pool().acquire().await.map_err(DbError::from)?;
    let live_now = live(&mut conn).await?;
    if due_next(&live_now, now).is_none() && due_retirements(&live_now, now).next().is_none() {
        return Ok(Attempt::Done(Promotion::default()));
    }
    drop(conn);

    let mut uow = db.begin(now).await?;
    let live = live(uow.conn()).await?;
    let mut promotion = Promotion::default();
    if let Some(next) = due_next(&live, now) {
        let previous = find(&live, KeyStatus::Active);
        if let Some(previous) = previous {
            // It stopped signing at the next key's activates_at (signer); its
            // tokens are verifiable for retire_after from now, which is later.
            let published_until = now.saturating_add(millis(policy.retire_after));
            if !stop_signing(&mut uow, previous, next.activates_at, published_until).await? {
                return Ok(Attempt::Again);
            }
            promotion.retiring = Some(previous.kid.clone());
        }
        let done = sqlx::query(
            "UPDATE server_signing_keys SET status = 'active', activated_at = activates_at \
             WHERE id = $1 AND status = 'next'",
        )
        .bind(db::id_text(&next.id))
        .execute(uow.conn())
        .await
        .map_err(DbError::from)?;
        if done.rows_affected() != 1 {
            return Ok(Attempt::Again);
        }
        let mut details = step_details(RotationStep::Activated, &next.public_jwk);
        if let Some(previous) = previous {
            details = details.kid("previous_kid", &previous.public_jwk);
        }
        uow.audit(rotation_entry(details));
        promotion.activated = Some(next.kid.clone());
    }
    for key in due_retirements(&live, now) {
        let done = sqlx::query(
            "UPDATE server_signing_keys SET status = 'retired', retired_at = $1 \
             WHERE id = $2 AND status = 'retiring'",
        )
        .bind(now)
        .bind(db::id_text(&key.id))
        .execute(uow.conn())
        .await
        .map_err(DbError::from)?;
        if done.rows_affected() != 1 {
            return Ok(Attempt::Again);
        }
        uow.audit(rotation_entry(step_details(
            RotationStep::Retired,
            &key.public_jwk,
        )));
        promotion.retired.push(key.kid.clone());
    }
    uow.commit().await?;
    if let Some(kid) = &promotion.activated {
        tracing::info!(
            kid = %kid,
            previous_kid = promotion.retiring.as_deref(),
            "the next terminal signing key is now the active one"
        );
    }
    for kid in &promotion.retired {
        tracing::info!(kid = %kid, "a retired terminal signing key left the JWKS");
    }
    Ok(Attempt::Done(promotion))
}

/// The public JWKS of purpose terminal at `now` (for hello and
/// heartbeat_ack): `next`, `active` and still-published `retiring` keys,
/// ordered by creation time, then kid.
pub async fn jwks(conn: &mut AnyConnection, now: UnixMillis) -> Result<Jwks, KeyError> {
    let keys = live(conn)
        .await?
        .into_iter()
        .filter(|key| key.is_published(now))
        .map(|key| JwksKey::from_jwk(key.public_jwk))
        .collect();
    Jwks::new(keys).map_err(|_| KeyError::TooManyPublishedKeys { max: JWKS_MAX_KEYS })
}

/// The key that signs at `now`, unsealed: the `next` key once its
/// `activates_at` has passed, else the `active` one.
pub async fn signer(db: &Db, pepper: &Pepper, now: UnixMillis) -> Result<TerminalSigner, KeyError> {
    let mut conn = db.pool().acquire().await.map_err(DbError::from)?;
    let row = sqlx::query(&format!(
        "SELECT {COLUMNS}, private_sealed FROM server_signing_keys \
         WHERE purpose = $1 AND (status = 'active' OR (status = 'next' AND activates_at <= $2)) \
         ORDER BY activates_at DESC, kid DESC LIMIT 1"
    ))
    .bind(PURPOSE_TERMINAL)
    .bind(now)
    .fetch_optional(&mut *conn)
    .await
    .map_err(DbError::from)?
    .ok_or(KeyError::NoActiveKey)?;
    let record = decode(&row)?;
    let sealed: Option<String> = row
        .try_get("private_sealed")
        .map_err(|_| KeyError::Stored {
            column: "private_sealed",
        })?;
    let sealed = sealed.ok_or(KeyError::Stored {
        column: "private_sealed",
    })?;
    let key = unseal(pepper, &record.id, &record.kid, &sealed)?;
    if key.public_jwk() != record.public_jwk {
        return Err(KeyError::Stored {
            column: "public_jwk",
        });
    }
    Ok(TerminalSigner {
        kid: record.kid,
        key,
    })
}

/// Every key of purpose terminal, retired ones too, ordered by creation time,
/// then kid.
pub async fn list(conn: &mut AnyConnection) -> Result<Vec<KeyRecord>, KeyError> {
    let rows = sqlx::query(&format!(
        "SELECT {COLUMNS} FROM server_signing_keys WHERE purpose = $1 \
         ORDER BY created_at, kid"
    ))
    .bind(PURPOSE_TERMINAL)
    .fetch_all(conn)
    .await
    .map_err(DbError::from)?;
    rows.iter().map(decode).collect()
}

/// The keys that are not retired (a handful), ordered like [`list`].
async fn live(conn: &mut AnyConnection) -> Result<Vec<KeyRecord>, KeyError> {
    let rows = sqlx::query(&format!(
        "SELECT {COLUMNS} FROM server_signing_keys WHERE purpose = $1 AND status <> 'retired' \
         ORDER BY created_at, kid"
    ))
    .bind(PURPOSE_TERMINAL)
    .fetch_all(conn)
    .await
    .map_err(DbError::from)?;
    rows.iter().map(decode).collect()
}

fn find(keys: &[KeyRecord], status: KeyStatus) -> Option<&KeyRecord> {
    keys.iter().find(|key| key.status == status)
}

fn decode(row: &AnyRow) -> Result<KeyRecord, KeyError> {
    let stored = |column| KeyError::Stored { column };
    let time = |column: &'static str| row.try_get::<i64, _>(column).map_err(|_| stored(column));
    let opt_time = |column: &'static str| {
        row.try_get::<Option<i64>, _>(column)
            .map_err(|_| stored(column))
    };
    let text = |column: &'static str| row.try_get::<String, _>(column).map_err(|_| stored(column));
    let id = db::get_uuid(row, "id").map_err(|_| stored("id"))?;
    let kid = text("kid")?;
    let public_jwk = Ed25519PublicJwk::from_json(text("public_jwk")?.as_bytes())
        .map_err(|_| stored("public_jwk"))?;
    if public_jwk.thumbprint() != kid {
        return Err(stored("kid"));
    }
    let status = KeyStatus::parse(&text("status")?).ok_or(stored("status"))?;
    Ok(KeyRecord {
        id,
        kid,
        public_jwk,
        status,
        created_at: time("created_at")?,
        activates_at: time("activates_at")?,
        activated_at: opt_time("activated_at")?,
        retiring_at: opt_time("retiring_at")?,
        published_until: opt_time("published_until")?,
        retired_at: opt_time("retired_at")?,
    })
}

/// `active` → `retiring`: stops signing at `retiring_at`, published until
/// `published_until`; the private key is dropped from the row. Whether the
/// key was still active.
async fn stop_signing(
    uow: &mut UnitOfWork,
    key: &KeyRecord,
    retiring_at: UnixMillis,
    published_until: UnixMillis,
) -> Result<bool, KeyError> {
    let done = sqlx::query(
        "UPDATE server_signing_keys SET status = 'retiring', retiring_at = $1, \
         published_until = $2, private_sealed = NULL WHERE id = $3 AND status = 'active'",
    )
    .bind(retiring_at)
    .bind(published_until)
    .bind(db::id_text(&key.id))
    .execute(uow.conn())
    .await
    .map_err(DbError::from)?;
    Ok(done.rows_affected() == 1)
}

/// `next` → `retired` at once (an emergency rotation): it never signed, so no
/// token needs it. Whether the key was still next.
async fn withdraw(
    uow: &mut UnitOfWork,
    key: &KeyRecord,
    now: UnixMillis,
) -> Result<bool, KeyError> {
    let done = sqlx::query(
        "UPDATE server_signing_keys SET status = 'retired', published_until = $1, \
         retired_at = $1, private_sealed = NULL WHERE id = $2 AND status = 'next'",
    )
    .bind(now)
    .bind(db::id_text(&key.id))
    .execute(uow.conn())
    .await
    .map_err(DbError::from)?;
    Ok(done.rows_affected() == 1)
}

fn step_details(step: RotationStep, kid: &Ed25519PublicJwk) -> AuditDetails {
    AuditDetails::new().code("step", step).kid("kid", kid)
}

fn rotation_entry(details: AuditDetails) -> AuditEntry {
    AuditEntry::allow(AuditAction::TerminalKeyRotate, Actor::System).details(details)
}

/// A freshly generated key, sealed for its row.
struct NewKey {
    id: Uuid,
    kid: String,
    jwk: Ed25519PublicJwk,
    sealed: String,
}

impl NewKey {
    fn generate(pepper: &Pepper, now: UnixMillis) -> Result<NewKey, KeyError> {
        let id = db::new_id(now)?;
        // Dropped (and wiped) at the end of this function; only the sealed
        // form leaves it.
        let key = Ed25519SigningKey::generate()?;
        let jwk = key.public_jwk();
        let kid = jwk.thumbprint();
        let sealed = seal(pepper, &id, &kid, &key)?;
        Ok(NewKey {
            id,
            kid,
            jwk,
            sealed,
        })
    }

    async fn insert(
        &self,
        uow: &mut UnitOfWork,
        status: KeyStatus,
        activates_at: UnixMillis,
        now: UnixMillis,
    ) -> Result<(), KeyError> {
        let activated_at = (status == KeyStatus::Active).then_some(activates_at);
        sqlx::query(
            "INSERT INTO server_signing_keys \
             (id, purpose, kid, public_jwk, private_sealed, status, created_at, activates_at, \
              activated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        )
        .bind(db::id_text(&self.id))
        .bind(PURPOSE_TERMINAL)
        .bind(&self.kid)
        .bind(self.jwk.to_json())
        .bind(&self.sealed)
        .bind(status.as_str())
        .bind(now)
        .bind(activates_at)
        .bind(activated_at)
        .execute(uow.conn())
        .await
        .map_err(DbError::from)?;
        Ok(())
    }
}

fn seal_key(pepper: &Pepper) -> Result<LessSafeKey, KeyError> {
    let key = Zeroizing::new(pepper.mac(PepperPurpose::TerminalKeySealKey, b""));
    UnboundKey::new(&CHACHA20_POLY1305, key.as_slice())
        .map(LessSafeKey::new)
        .map_err(|_| KeyError::Seal)
}

/// The associated data of a sealed key: version, row ID, purpose and kid.
fn seal_aad(id: &Uuid, kid: &str) -> String {
    format!(
        "bothy.v1.server_signing_key\0{}\0{PURPOSE_TERMINAL}\0{kid}",
        db::id_text(id)
    )
}

/// `private_sealed`: base64url of nonce ‖ ciphertext ‖ tag (12 + 32 + 16 bytes).
fn seal(
    pepper: &Pepper,
    id: &Uuid,
    kid: &str,
    key: &Ed25519SigningKey,
) -> Result<String, KeyError> {
    let mut nonce = [0u8; NONCE_LEN];
    getrandom::fill(&mut nonce).map_err(|_| KeyError::Random)?;
    // Room for the tag up front: growing the vector would leave a copy of the
    // private key in freed memory.
    let mut in_out = Zeroizing::new(Vec::with_capacity(SEED_LEN + CHACHA20_POLY1305.tag_len()));
    in_out.extend_from_slice(key.seed());
    let aad = seal_aad(id, kid);
    seal_key(pepper)?
        .seal_in_place_append_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(aad.as_bytes()),
            &mut *in_out,
        )
        .map_err(|_| KeyError::Seal)?;
    let mut sealed = nonce.to_vec();
    sealed.extend_from_slice(&in_out);
    Ok(b64::encode(&sealed))
}

/// Opens `private_sealed` of the row `id` with `kid`; the key's own kid must
/// be `kid`.
fn unseal(
    pepper: &Pepper,
    id: &Uuid,
    kid: &str,
    sealed: &str,
) -> Result<Ed25519SigningKey, KeyError> {
    let refused = || KeyError::Unseal {
        kid: kid.to_owned(),
    };
    let bytes = b64::decode(sealed).map_err(|_| refused())?;
    if bytes.len() != NONCE_LEN + SEED_LEN + CHACHA20_POLY1305.tag_len() {
        return Err(refused());
    }
    let (nonce, ciphertext) = bytes.split_at(NONCE_LEN);
    let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| refused())?;
    let mut in_out = Zeroizing::new(ciphertext.to_vec());
    let aad = seal_aad(id, kid);
    let plain = seal_key(pepper)?
        .open_in_place(nonce, Aad::from(aad.as_bytes()), &mut in_out)
        .map_err(|_| refused())?;
    let seed = Zeroizing::new(<[u8; SEED_LEN]>::try_from(&*plain).map_err(|_| refused())?);
    let key = Ed25519SigningKey::from_seed(&seed);
    if key.kid() != kid {
        return Err(KeyError::Stored { column: "kid" });
    }
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pepper(byte: u8) -> Pepper {
        Pepper::from_bytes([byte; 32])
    }

    #[test]
    fn sealed_key_opens_only_for_its_row_kid_and_pepper() {
        let key = Ed25519SigningKey::from_seed(&[5; 32]);
        let kid = key.kid();
        let id = db::new_id(1_000).unwrap();
        let sealed = seal(&pepper(1), &id, &kid, &key).unwrap();
        assert_eq!(
            b64::decode(&sealed).unwrap().len(),
            NONCE_LEN + SEED_LEN + 16
        );
        assert!(!sealed.contains(&b64::encode(key.seed())));
        // Random nonce: sealing twice gives two texts.
        assert_ne!(sealed, seal(&pepper(1), &id, &kid, &key).unwrap());

        let opened = unseal(&pepper(1), &id, &kid, &sealed).unwrap();
        assert_eq!(opened.seed(), key.seed());

        let other_id = db::new_id(2_000).unwrap();
        let other_kid = Ed25519SigningKey::from_seed(&[6; 32]).kid();
        for (pepper, id, kid) in [
            (pepper(2), id, kid.as_str()),
            (pepper(1), other_id, kid.as_str()),
            (pepper(1), id, other_kid.as_str()),
        ] {
            assert!(matches!(
                unseal(&pepper, &id, kid, &sealed),
                Err(KeyError::Unseal { .. })
            ));
        }
        for bad in ["", "AAAA", &sealed[..sealed.len() - 2], "not base64!"] {
            assert!(matches!(
                unseal(&pepper(1), &id, &kid, bad),
                Err(KeyError::Unseal { .. })
            ));
        }
    }

    #[test]
    fn a_sealed_key_under_another_kid_is_refused() {
        // A row whose kid was changed together with a matching AAD still names
        // the wrong key.
        let key = Ed25519SigningKey::from_seed(&[5; 32]);
        let id = db::new_id(1_000).unwrap();
        let sealed = seal(&pepper(1), &id, "forged", &key).unwrap();
        assert!(matches!(
            unseal(&pepper(1), &id, "forged", &sealed),
            Err(KeyError::Stored { column: "kid" })
        ));
    }

    #[test]
    fn signer_debug_is_redacted() {
        let key = Ed25519SigningKey::from_seed(&[7; 32]);
        let seed = *key.seed();
        let signer = TerminalSigner::for_tests(key);
        let debug = format!("{signer:?} {signer:#?}");
        assert!(debug.contains(signer.kid()));
        assert!(debug.contains("<redacted>"));
        assert!(!debug.contains(&b64::encode(&seed)));
        assert!(!debug.contains(&format!("{seed:?}")));
    }

    #[test]
    fn policy_from_config() {
        let mut config = Config::default();
        let policy = KeyPolicy::from_config(&config);
        assert_eq!(policy.publish_ahead, Duration::from_secs(24 * 3600));
        // 30 s tokens + 30 s leeway + 5 min cache.
        assert_eq!(policy.retire_after, Duration::from_secs(30 + 30 + 300));
        config.terminal.session_token_ttl = Duration::from_millis(1_500);
        config.auth.clock_leeway = Duration::ZERO;
        config.signing_key.cache_ttl = Duration::from_millis(1);
        // exp rounds the lifetime up to whole seconds.
        assert_eq!(
            KeyPolicy::from_config(&config).retire_after,
            Duration::from_millis(2_001)
        );
    }

    #[test]
    fn status_and_step_codes() {
        assert_eq!(
            KeyStatus::ALL
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>(),
            ["next", "active", "retiring", "retired"]
        );
        assert_eq!(KeyStatus::parse("retiring"), Some(KeyStatus::Retiring));
        assert_eq!(KeyStatus::parse("Active"), None);
        assert_eq!(
            RotationStep::ALL
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>(),
            ["first", "scheduled", "activated", "emergency", "retired"]
        );
    }

    #[test]
    fn published_means_next_active_or_retiring_until_its_end() {
        let jwk = Ed25519SigningKey::from_seed(&[1; 32]).public_jwk();
        let record = |status, published_until| KeyRecord {
            id: Uuid::nil(),
            kid: jwk.thumbprint(),
            public_jwk: jwk,
            status,
            created_at: 0,
            activates_at: 0,
            activated_at: None,
            retiring_at: None,
            published_until,
            retired_at: None,
        };
        assert!(record(KeyStatus::Next, None).is_published(5));
        assert!(record(KeyStatus::Active, None).is_published(5));
        assert!(record(KeyStatus::Retiring, Some(6)).is_published(5));
        assert!(!record(KeyStatus::Retiring, Some(5)).is_published(5));
        assert!(!record(KeyStatus::Retired, Some(9)).is_published(5));
    }
}
