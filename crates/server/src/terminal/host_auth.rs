//! The host proof of identify (3.5 step 4) and the host-self check of
//! `authorize(host, host.connect)` (3.5 step 5), shared by the control
//! connection and the data connection (6.1, 6.3).
//!
//! The order inside step 4 is fixed here once, so both connections refuse a
//! proof with the same code:
//! 1. no host with `identify.host_id`, or a host without keys (pairing): 4110;
//! 2. the proof is not a compact JWS of the profile (three parts, header with
//!    exactly `alg` = `EdDSA`, `kid`, `typ`): 4113;
//! 3. `kid` other than `hosts.auth_jkt`: 4110;
//! 4. the signature does not verify with `hosts.auth_public_jwk`, the claims
//!    are not exactly `challenge`, `host_id`, `iat`, `typ` is not
//!    `host-auth+jwt`: 4113;
//! 5. a different challenge, a `host_id` claim other than `identify.host_id`,
//!    or `iat` outside `[hello.server_time - leeway, now + leeway]`: 4113.
//!
//! `iat` counts whole seconds, the bounds are milliseconds: the lower bound is
//! compared in whole seconds (a proof signed in the second of hello is never
//! "before" it), the upper bound exactly (docs/decisions.md D-60).
//!
//! Nothing here logs or returns the proof, a claim value or a key.

use std::time::Duration;

use bothy_proto::codes::CloseCode;
use bothy_proto::jwk::Ed25519PublicJwk;
use bothy_proto::jws::{CompactJws, TYP_HOST_AUTH};
use sqlx::AnyConnection;
use subtle::ConstantTimeEq;
use uuid::Uuid;

use crate::clock::UnixMillis;
use crate::hosts::{self, Host, HostError, HostState};

/// The protocol versions this server speaks on the control and data
/// connections (`hello.protocol_versions`); an identify with another version is
/// refused with 4114 (3.5 step 2).
pub const PROTOCOL_VERSIONS: &[u32] = &[1];

/// Whether `version` is one of [`PROTOCOL_VERSIONS`].
pub fn protocol_version_supported(version: u32) -> bool {
    PROTOCOL_VERSIONS.contains(&version)
}

/// Why a host's identify (or a later op) is refused; each maps to one close code.
#[derive(Debug, thiserror::Error)]
pub enum HostAuthRefusal {
    /// 4110: no such host, no keys (pairing), or a `kid` other than `auth_jkt`.
    #[error("host unpaired")]
    Unpaired,
    /// 4113: the proof is malformed, does not verify, or its claims do not fit.
    #[error("host proof refused")]
    AuthFailed,
    /// 4111: the host is disabled or retired.
    #[error("host disabled or retired")]
    Disabled,
    /// 4000: the database failed or a stored value is unusable.
    #[error(transparent)]
    Internal(#[from] HostError),
}

impl HostAuthRefusal {
    /// The close code of the refusal (13).
    pub fn close_code(&self) -> CloseCode {
        match self {
            HostAuthRefusal::Unpaired => CloseCode::HostUnpaired,
            HostAuthRefusal::AuthFailed => CloseCode::HostAuthFailed,
            HostAuthRefusal::Disabled => CloseCode::HostDisabled,
            HostAuthRefusal::Internal(_) => CloseCode::UnknownError,
        }
    }
}

/// 3.5 identify step 4: checks `proof` against the stored login key of the
/// host `identify_host_id` and returns the host as read. `challenge` and
/// `hello_server_time` are the values of the hello this connection sent; `now`
/// is the time of the check; `leeway` is `auth.clock_leeway`.
///
/// Step 5 is [`check_host_may_connect`], called by the connection after this.
pub async fn verify_host_proof(
    conn: &mut AnyConnection,
    identify_host_id: Uuid,
    proof: &str,
    challenge: &[u8; 32],
    hello_server_time: UnixMillis,
    now: UnixMillis,
    leeway: Duration,
) -> Result<Host, HostAuthRefusal> {
    let host = hosts::load(conn, identify_host_id)
        .await?
        .ok_or(HostAuthRefusal::Unpaired)?;
    let (Some(jwk_text), Some(auth_jkt)) = (&host.auth_public_jwk, &host.auth_jkt) else {
        return Err(HostAuthRefusal::Unpaired);
    };
    if host.state == HostState::Pairing {
        return Err(HostAuthRefusal::Unpaired);
    }
    let jws = CompactJws::parse(proof).map_err(|_| HostAuthRefusal::AuthFailed)?;
    if !bool::from(jws.kid().as_bytes().ct_eq(auth_jkt.as_bytes())) {
        return Err(HostAuthRefusal::Unpaired);
    }
    let login_key = Ed25519PublicJwk::from_json(jwk_text.as_bytes())
        .map_err(|_| HostError::Stored("hosts.auth_public_jwk"))?;
    let verified = jws
        .verify(login_key.verifying_key())
        .map_err(|_| HostAuthRefusal::AuthFailed)?;
    let claims = verified
        .host_auth_claims()
        .map_err(|_| HostAuthRefusal::AuthFailed)?;
    verified
        .expect_typ(TYP_HOST_AUTH)
        .map_err(|_| HostAuthRefusal::AuthFailed)?;
    if !claims.challenge_matches(challenge) || claims.host_id != identify_host_id {
        return Err(HostAuthRefusal::AuthFailed);
    }
    if !iat_within(claims.iat, hello_server_time, now, leeway) {
        return Err(HostAuthRefusal::AuthFailed);
    }
    Ok(host)
}

/// `iat` (Unix seconds) not before `hello_server_time - leeway` (compared in
/// whole seconds) and not after `now + leeway`.
fn iat_within(iat: i64, hello_server_time: UnixMillis, now: UnixMillis, leeway: Duration) -> bool {
    let leeway_ms = i64::try_from(leeway.as_millis()).unwrap_or(i64::MAX);
    let earliest_s = hello_server_time.saturating_sub(leeway_ms).div_euclid(1000);
    let latest_ms = now.saturating_add(leeway_ms);
    let iat_ms = iat.saturating_mul(1000);
    iat >= earliest_s && iat_ms <= latest_ms
}

/// 3.5 identify step 5 and every later op: `authorize(host, host.connect)`
/// for the right host-self (07). A host disabled or retired gives 4111; a host
/// that lost its keys meanwhile (re-paired, fallback to pairing) gives 4110.
pub fn check_host_may_connect(host: &Host) -> Result<(), HostAuthRefusal> {
    match host.state {
        HostState::Disabled | HostState::Retired => Err(HostAuthRefusal::Disabled),
        HostState::Pairing => Err(HostAuthRefusal::Unpaired),
        HostState::Confirming | HostState::Active if !host.has_keys() => {
            Err(HostAuthRefusal::Unpaired)
        }
        HostState::Confirming | HostState::Active => Ok(()),
    }
}

/// [`check_host_may_connect`] plus the key check of a later op: the host as
/// stored now must still carry the login key `auth_jkt` the connection logged
/// in with (a re-pairing committed meanwhile gives 4110).
pub fn check_still_connected(host: &Host, login_jkt: &str) -> Result<(), HostAuthRefusal> {
    if host.auth_jkt.as_deref() != Some(login_jkt) {
        return Err(HostAuthRefusal::Unpaired);
    }
    check_host_may_connect(host)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iat_bounds_are_inclusive_and_the_lower_one_in_whole_seconds() {
        let leeway = Duration::from_secs(30);
        let hello = 1_000_000_500;
        let now = 1_000_010_000;
        // Lower bound: hello - 30 s = 999_970_500 ms → second 999_970.
        assert!(iat_within(999_970, hello, now, leeway));
        assert!(!iat_within(999_969, hello, now, leeway));
        // Upper bound: now + 30 s = 1_000_040_000 ms → second 1_000_040.
        assert!(iat_within(1_000_040, hello, now, leeway));
        assert!(!iat_within(1_000_041, hello, now, leeway));
        // Zero leeway: a proof signed in the second of hello passes.
        assert!(iat_within(1_000_000, hello, hello, Duration::ZERO));
        assert!(!iat_within(i64::MIN, hello, now, leeway));
        assert!(!iat_within(i64::MAX, hello, now, leeway));
    }
}
