//! The check order, step by step: each test breaks exactly one step and sees
//! its detail; the order tests break two steps and see the earlier one.

use std::collections::{HashMap, HashSet};

use bothy_noise::{Initiator, StaticKeypair};
use bothy_proto::jwk::{Jwks, JwksKey};
use bothy_proto::jws::{Ed25519SigningKey, ephemeral_key_hash};

use super::*;

const NOW_MS: i64 = 1_800_000_000_000;

struct State {
    jtis: HashSet<Uuid>,
    live: HashMap<Uuid, LivePty>,
    profiles: Vec<(String, ProfileKind)>,
    users: Vec<String>,
    bindings: HashMap<String, Uuid>,
    workdirs: usize,
    bind_fails: bool,
}

impl Default for State {
    fn default() -> Self {
        State {
            jtis: HashSet::new(),
            live: HashMap::new(),
            profiles: vec![
                ("shell".into(), ProfileKind::Shell),
                ("claude".into(), ProfileKind::Claude),
            ],
            users: vec!["alice".into(), "bob".into()],
            bindings: HashMap::new(),
            workdirs: 2,
            bind_fails: false,
        }
    }
}

impl CheckState for State {
    fn remember_jti(&mut self, jti: Uuid, _until_ms: i64) -> bool {
        self.jtis.insert(jti)
    }
    fn live_pty(&self, session_id: Uuid) -> Option<LivePty> {
        self.live.get(&session_id).cloned()
    }
    fn offered_profile(&self, name: &str) -> Option<ProfileKind> {
        self.profiles
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, k)| *k)
    }
    fn is_session_user(&self, osu: &str) -> bool {
        self.users.iter().any(|u| u == osu)
    }
    fn bind(&mut self, osu: &str, sub: Uuid) -> Result<bool, BindFailed> {
        if self.bind_fails {
            return Err(BindFailed);
        }
        Ok(*self.bindings.entry(osu.to_owned()).or_insert(sub) == sub)
    }
    fn workdir_count(&self, _osu: &str) -> usize {
        self.workdirs
    }
}

struct Fixture {
    host_id: Uuid,
    session_id: Uuid,
    host_key: StaticKeypair,
    signer: Ed25519SigningKey,
    jwks: Jwks,
    sub: Uuid,
}

impl Fixture {
    fn new() -> Fixture {
        let signer = Ed25519SigningKey::generate().expect("key");
        let jwks = Jwks::new(vec![JwksKey::from_jwk(signer.public_jwk())]).expect("one key");
        Fixture {
            host_id: Uuid::from_u128(0x1111),
            session_id: Uuid::from_u128(0x2222),
            host_key: StaticKeypair::generate().expect("key"),
            signer,
            jwks,
            sub: Uuid::from_u128(0x3333),
        }
    }

    fn claims(&self, initiator: &Initiator) -> TerminalSessionClaims {
        TerminalSessionClaims {
            iss: "instance".into(),
            aud: self.host_id,
            sub: self.sub,
            sid: self.session_id,
            jti: Uuid::from_u128(0x4444),
            iat: NOW_MS / 1000 - 1,
            exp: NOW_MS / 1000 + 29,
            dev: Uuid::from_u128(0x5555),
            prf: "shell".into(),
            cek: ephemeral_key_hash(&initiator.ephemeral_public()),
            own: true,
            osu: "alice".into(),
            wdi: None,
            att: Att::Open,
        }
    }

    fn initiator(&self) -> Initiator {
        Initiator::new(self.session_id, self.host_id, &self.host_key.public()).expect("initiator")
    }

    fn run(
        &self,
        state: &mut State,
        server_host: bool,
        edit: impl FnOnce(&mut TerminalSessionClaims),
    ) -> Result<TerminalSessionClaims, CloseDetail> {
        let mut initiator = self.initiator();
        let mut claims = self.claims(&initiator);
        edit(&mut claims);
        let token = claims.sign(&self.signer);
        let message = initiator
            .write_message1(token.as_bytes())
            .expect("message 1");
        self.check(state, server_host, &message)
    }

    fn check(
        &self,
        state: &mut State,
        server_host: bool,
        message: &[u8],
    ) -> Result<TerminalSessionClaims, CloseDetail> {
        let responder =
            Responder::new(self.session_id, self.host_id, &self.host_key).expect("responder");
        let ctx = CheckContext {
            host_id: self.host_id,
            session_id: self.session_id,
            jwks: &self.jwks,
            leeway_ms: 5_000,
            now_ms: NOW_MS,
            is_server_host: server_host,
        };
        check_message1(responder, message, &ctx, state).map(|a| a.claims)
    }
}

#[test]
fn a_valid_open_passes_and_binds() {
    let f = Fixture::new();
    let mut state = State::default();
    let claims = f.run(&mut state, true, |_| {}).expect("accepted");
    assert_eq!(claims.osu, "alice");
    assert_eq!(state.bindings.get("alice"), Some(&f.sub));
}

#[test]
fn step_0_wrong_prologue_or_key_is_handshake_failed() {
    let f = Fixture::new();
    let other = Fixture::new();
    // Encrypted to another host key.
    let mut initiator =
        Initiator::new(f.session_id, f.host_id, &other.host_key.public()).expect("initiator");
    let message = initiator.write_message1(b"token").expect("message 1");
    assert_eq!(
        f.check(&mut State::default(), false, &message).unwrap_err(),
        CloseDetail::HandshakeFailed
    );
    // Another session in the prologue.
    let mut initiator =
        Initiator::new(Uuid::from_u128(9), f.host_id, &f.host_key.public()).expect("initiator");
    let message = initiator.write_message1(b"token").expect("message 1");
    assert_eq!(
        f.check(&mut State::default(), false, &message).unwrap_err(),
        CloseDetail::HandshakeFailed
    );
    assert_eq!(
        f.check(&mut State::default(), false, b"short").unwrap_err(),
        CloseDetail::HandshakeFailed
    );
}

#[test]
fn steps_1_to_4_and_7_are_token_invalid() {
    let f = Fixture::new();
    // Step 1: not a JWS at all.
    let mut initiator = f.initiator();
    let message = initiator.write_message1(b"not.a.jws").expect("message 1");
    assert_eq!(
        f.check(&mut State::default(), false, &message).unwrap_err(),
        CloseDetail::TokenInvalid
    );
    // Step 1: a key not in the JWKS (a foreign kid).
    let foreign = Ed25519SigningKey::generate().expect("key");
    let mut initiator = f.initiator();
    let token = f.claims(&initiator).sign(&foreign);
    let message = initiator
        .write_message1(token.as_bytes())
        .expect("message 1");
    assert_eq!(
        f.check(&mut State::default(), false, &message).unwrap_err(),
        CloseDetail::TokenInvalid
    );
    // Step 3: aud.
    assert_eq!(
        f.run(&mut State::default(), false, |c| c.aud = Uuid::from_u128(7))
            .unwrap_err(),
        CloseDetail::TokenInvalid
    );
    // Step 4: sid.
    assert_eq!(
        f.run(&mut State::default(), false, |c| c.sid = Uuid::from_u128(7))
            .unwrap_err(),
        CloseDetail::TokenInvalid
    );
    // Step 7: cek of another ephemeral key.
    assert_eq!(
        f.run(&mut State::default(), false, |c| c.cek = [7; 32])
            .unwrap_err(),
        CloseDetail::TokenInvalid
    );
}

#[test]
fn step_2_the_typ_of_another_token_is_token_invalid() {
    let f = Fixture::new();
    let mut initiator = f.initiator();
    let claims = f.claims(&initiator);
    let token = bothy_proto::jws::sign(
        bothy_proto::jws::TYP_HOST_AUTH,
        &f.signer.kid(),
        &claims,
        &f.signer,
    );
    let message = initiator
        .write_message1(token.as_bytes())
        .expect("message 1");
    assert_eq!(
        f.check(&mut State::default(), false, &message).unwrap_err(),
        CloseDetail::TokenInvalid
    );
}

#[test]
fn step_5_expiry_honours_the_leeway_exactly() {
    let f = Fixture::new();
    // exp + leeway == now: still valid.
    assert!(
        f.run(&mut State::default(), false, |c| c.exp = NOW_MS / 1000 - 5)
            .is_ok()
    );
    // One second more: expired.
    assert_eq!(
        f.run(&mut State::default(), false, |c| c.exp = NOW_MS / 1000 - 6)
            .unwrap_err(),
        CloseDetail::TokenExpired
    );
}

#[test]
fn step_6_a_replay_is_token_replayed_even_after_a_later_failure() {
    let f = Fixture::new();
    let mut state = State::default();
    // The first use fails at step 10 (unknown user) after the jti was recorded.
    assert_eq!(
        f.run(&mut state, false, |c| c.osu = "mallory".into())
            .unwrap_err(),
        CloseDetail::SessionUserUnknown
    );
    assert_eq!(
        f.run(&mut state, false, |_| {}).unwrap_err(),
        CloseDetail::TokenReplayed
    );
}

#[test]
fn step_8_open_and_attach_must_fit_the_live_pty() {
    let f = Fixture::new();
    let live = LivePty {
        sub: f.sub,
        osu: "alice".into(),
        prf: "shell".into(),
    };
    // open with a live PTY.
    let mut state = State::default();
    state.live.insert(f.session_id, live.clone());
    assert_eq!(
        f.run(&mut state, false, |_| {}).unwrap_err(),
        CloseDetail::TokenInvalid
    );
    // attach without one.
    assert_eq!(
        f.run(&mut State::default(), false, |c| c.att = Att::Attach)
            .unwrap_err(),
        CloseDetail::TokenInvalid
    );
    // attach with another sub / osu / prf.
    for edit in [
        (|c: &mut TerminalSessionClaims| c.sub = Uuid::from_u128(1))
            as fn(&mut TerminalSessionClaims),
        |c| c.osu = "bob".into(),
        |c| c.prf = "claude".into(),
    ] {
        let mut state = State::default();
        state.live.insert(f.session_id, live.clone());
        assert_eq!(
            f.run(&mut state, false, |c| {
                c.att = Att::Attach;
                edit(c);
            })
            .unwrap_err(),
            CloseDetail::TokenInvalid
        );
    }
    // attach that fits.
    let mut state = State::default();
    state.live.insert(f.session_id, live);
    assert!(f.run(&mut state, false, |c| c.att = Att::Attach).is_ok());
}

#[test]
fn steps_9_to_13_name_their_details() {
    let f = Fixture::new();
    assert_eq!(
        f.run(&mut State::default(), false, |c| c.prf = "vim".into())
            .unwrap_err(),
        CloseDetail::ProfileUnknown
    );
    assert_eq!(
        f.run(&mut State::default(), false, |c| c.osu = "mallory".into())
            .unwrap_err(),
        CloseDetail::SessionUserUnknown
    );
    let mut state = State::default();
    state
        .bindings
        .insert("alice".into(), Uuid::from_u128(0xbad));
    assert_eq!(
        f.run(&mut state, false, |_| {}).unwrap_err(),
        CloseDetail::SessionUserMismatch
    );
    let mut state = State {
        bind_fails: true,
        ..State::default()
    };
    assert_eq!(
        f.run(&mut state, false, |_| {}).unwrap_err(),
        CloseDetail::SessionUserMismatch
    );
    // wdi: missing for claude, present for shell, out of range.
    assert_eq!(
        f.run(&mut State::default(), false, |c| c.prf = "claude".into())
            .unwrap_err(),
        CloseDetail::ProfileUnknown
    );
    assert_eq!(
        f.run(&mut State::default(), false, |c| c.wdi = Some(0))
            .unwrap_err(),
        CloseDetail::ProfileUnknown
    );
    assert_eq!(
        f.run(&mut State::default(), false, |c| {
            c.prf = "claude".into();
            c.wdi = Some(2);
        })
        .unwrap_err(),
        CloseDetail::ProfileUnknown
    );
    assert!(
        f.run(&mut State::default(), false, |c| {
            c.prf = "claude".into();
            c.wdi = Some(1);
        })
        .is_ok()
    );
    // own = false on the server host.
    assert_eq!(
        f.run(&mut State::default(), true, |c| c.own = false)
            .unwrap_err(),
        CloseDetail::ServerHostOwnerOnly
    );
    assert!(
        f.run(&mut State::default(), false, |c| c.own = false)
            .is_ok()
    );
}

#[test]
fn the_binding_stays_when_a_later_step_fails() {
    let f = Fixture::new();
    let mut state = State::default();
    assert_eq!(
        f.run(&mut state, true, |c| c.own = false).unwrap_err(),
        CloseDetail::ServerHostOwnerOnly
    );
    assert_eq!(state.bindings.get("alice"), Some(&f.sub));
}

#[test]
fn the_first_failure_wins() {
    let f = Fixture::new();
    // Expired and wrong aud: aud (step 3) first.
    assert_eq!(
        f.run(&mut State::default(), false, |c| {
            c.exp = 0;
            c.aud = Uuid::from_u128(1);
        })
        .unwrap_err(),
        CloseDetail::TokenInvalid
    );
    // Expired and unknown profile: expiry (step 5) first.
    assert_eq!(
        f.run(&mut State::default(), false, |c| {
            c.exp = 0;
            c.prf = "vim".into();
        })
        .unwrap_err(),
        CloseDetail::TokenExpired
    );
    // Unknown user and mismatch impossible together; unknown profile before unknown user.
    assert_eq!(
        f.run(&mut State::default(), false, |c| {
            c.prf = "vim".into();
            c.osu = "mallory".into();
        })
        .unwrap_err(),
        CloseDetail::ProfileUnknown
    );
}
