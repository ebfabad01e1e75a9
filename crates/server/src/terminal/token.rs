//! The terminal session token (spec 5.3): a compact JWS `terminal-session+jwt`
//! (header exactly `alg` EdDSA, `kid`, `typ`), signed with the server key of
//! purpose terminal that signs now ([`super::keys::signer`]), issued after
//! terminal.open and terminal.attach.
//!
//! [`issue`] builds every claim of the 5.3 table from a [`TokenRequest`]:
//!
//! | Claim | From |
//! |---|---|
//! | `iss` | `instance.instance_id` (the caller reads it) |
//! | `aud` | the host ID |
//! | `sub` | the person's principal ID |
//! | `sid` | the session ID (the Noise prologue's) |
//! | `jti` | a new UUIDv7 at `now` (the injected clock) |
//! | `iat` | `now` in whole Unix seconds, rounded down |
//! | `exp` | `iat` + `terminal.session_token_ttl`, rounded up to whole seconds ([`lifetime_secs`]) |
//! | `dev` | the device ID |
//! | `prf` | the profile name |
//! | `cek` | the request's `client_ephemeral_key_hash`: strict base64url without padding of exactly 32 bytes, else [`TokenError::InvalidClientEphemeralKeyHash`] (400 `invalid_format`) |
//! | `own` | whether the person is an active owner now |
//! | `osu` | the person's session user on the host |
//! | `wdi` | exactly for a profile of kind claude with `att = open` (host step 12): present otherwise is [`TokenError::WorkdirNotAllowed`], absent then is [`TokenError::WorkdirRequired`] |
//! | `att` | `open` or `attach` |
//!
//! The encoding and the signature are bothy-proto's (`jws`), the same code the
//! host-side decoder is tested against. The token is a credential for its short
//! life: [`IssuedToken`]'s `Debug` leaves it out, as [`TokenRequest`]'s leaves
//! out the names and IDs of people (10.4).

use std::fmt;
use std::time::Duration;

use bothy_proto::b64;
use bothy_proto::ids;
use bothy_proto::jws::{Att, TerminalSessionClaims};
use bothy_proto::report::ProfileKind;
use uuid::Uuid;

use super::keys::TerminalSigner;
use crate::audit::{OsUserName, ProfileName};
use crate::clock::UnixMillis;

/// The pointer of `client_ephemeral_key_hash` in the open and attach bodies.
pub const CEK_POINTER: &str = "/client_ephemeral_key_hash";
/// The pointer of `workdir_index` in the open body.
pub const WORKDIR_INDEX_POINTER: &str = "/workdir_index";

/// Why no token was issued. The first three come from the request (the route
/// answers `400 validation_failed`, see [`TokenError::field_error`]); the
/// others are faults of the caller (500). No variant carries a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// `client_ephemeral_key_hash` is not strict base64url without padding of
    /// exactly 32 bytes.
    #[error("client_ephemeral_key_hash is not base64url without padding of 32 bytes")]
    InvalidClientEphemeralKeyHash,
    /// A working-directory index for a profile other than claude, or for an attach.
    #[error("a working-directory index belongs only to a profile of kind claude with att = open")]
    WorkdirNotAllowed,
    /// A profile of kind claude with `att = open` without a working-directory index.
    #[error("a profile of kind claude with att = open needs a working-directory index")]
    WorkdirRequired,
    /// `iss`: the instance ID is empty.
    #[error("the instance ID is empty")]
    EmptyIssuer,
    /// `prf`: empty, a control character, or too long.
    #[error("the profile name is not a profile name")]
    InvalidProfileName,
    /// `osu`: not a session user name.
    #[error("the session user is not a session user name")]
    InvalidSessionUser,
    /// `now` or `exp` outside the range of the claims.
    #[error("the issuance time is out of range")]
    TimeOutOfRange,
    /// The OS random source failed (the jti).
    #[error("the operating system's random source failed")]
    Random,
}

impl TokenError {
    /// For a refusal the request caused: the `errors[] {pointer, code}` of
    /// `400 validation_failed`. `None` for a fault of the server (500).
    pub fn field_error(&self) -> Option<(&'static str, &'static str)> {
        match self {
            TokenError::InvalidClientEphemeralKeyHash => Some((CEK_POINTER, "invalid_format")),
            TokenError::WorkdirNotAllowed => Some((WORKDIR_INDEX_POINTER, "not_allowed")),
            TokenError::WorkdirRequired => Some((WORKDIR_INDEX_POINTER, "required")),
            TokenError::EmptyIssuer
            | TokenError::InvalidProfileName
            | TokenError::InvalidSessionUser
            | TokenError::TimeOutOfRange
            | TokenError::Random => None,
        }
    }
}

/// What a token is issued for; every claim but `jti`, `iat` and `exp`.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenRequest<'a> {
    /// `iss`: `instance.instance_id`.
    pub instance_id: &'a str,
    /// `aud`: the host.
    pub host_id: Uuid,
    /// `sub`: the person.
    pub person_id: Uuid,
    /// `sid`: the terminal session.
    pub session_id: Uuid,
    /// `dev`: the person's device.
    pub device_id: Uuid,
    /// `prf`: the profile name.
    pub profile: &'a str,
    /// The kind of that profile, as the host reported it (decides `wdi`).
    pub profile_kind: ProfileKind,
    /// `cek`, as the request carries it (base64url of SHA-256 of the device's
    /// ephemeral Noise key).
    pub client_ephemeral_key_hash: &'a str,
    /// `own`: the person is an active owner now.
    pub own: bool,
    /// `osu`: the person's session user on the host.
    pub os_user: &'a str,
    /// `wdi`: the request's `workdir_index`.
    pub workdir_index: Option<u32>,
    /// `att`: open or attach.
    pub att: Att,
}

impl fmt::Debug for TokenRequest<'_> {
    /// Only the kind of profile and `att`: the rest names a person (10.4).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenRequest")
            .field("profile_kind", &self.profile_kind)
            .field("att", &self.att)
            .finish_non_exhaustive()
    }
}

/// An issued token.
#[derive(Clone, PartialEq, Eq)]
pub struct IssuedToken {
    /// The compact JWS, for the response's `token`. Never log it.
    pub token: String,
    /// Its `jti` (`terminal_sessions.token_jti`).
    pub jti: Uuid,
    /// Its `exp`, Unix seconds.
    pub exp: i64,
    /// `exp` in Unix milliseconds (the response's `expires_at`).
    pub expires_at: UnixMillis,
}

impl fmt::Debug for IssuedToken {
    /// The token is a credential: left out.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IssuedToken")
            .field("token", &"<redacted>")
            .field("jti", &self.jti)
            .field("exp", &self.exp)
            .finish_non_exhaustive()
    }
}

/// The token's lifetime in whole seconds: `ttl` rounded up, so that a
/// configured lifetime below a second still gives a token that lives.
pub fn lifetime_secs(ttl: Duration) -> i64 {
    let secs = ttl
        .as_secs()
        .saturating_add(u64::from(ttl.subsec_nanos() > 0));
    i64::try_from(secs).unwrap_or(i64::MAX)
}

/// Decodes the request's `client_ephemeral_key_hash` strictly: base64url
/// without padding, exactly 32 bytes.
pub fn parse_client_ephemeral_key_hash(text: &str) -> Result<[u8; 32], TokenError> {
    b64::decode_array::<32>(text).map_err(|_| TokenError::InvalidClientEphemeralKeyHash)
}

/// Whether `wdi` may be (and must be) present (host step 12).
pub fn check_workdir_index(
    kind: ProfileKind,
    att: Att,
    workdir_index: Option<u32>,
) -> Result<(), TokenError> {
    match (
        kind == ProfileKind::Claude && att == Att::Open,
        workdir_index,
    ) {
        (true, Some(_)) | (false, None) => Ok(()),
        (true, None) => Err(TokenError::WorkdirRequired),
        (false, Some(_)) => Err(TokenError::WorkdirNotAllowed),
    }
}

/// Issues a token at `now` with lifetime `ttl` (`terminal.session_token_ttl`),
/// signed by `signer`. Checks the request's parts first (cek, wdi), then the
/// caller's (iss, prf, osu).
pub fn issue(
    signer: &TerminalSigner,
    request: &TokenRequest<'_>,
    ttl: Duration,
    now: UnixMillis,
) -> Result<IssuedToken, TokenError> {
    let cek = parse_client_ephemeral_key_hash(request.client_ephemeral_key_hash)?;
    check_workdir_index(request.profile_kind, request.att, request.workdir_index)?;
    if request.instance_id.is_empty() {
        return Err(TokenError::EmptyIssuer);
    }
    let profile = ProfileName::new(request.profile).map_err(|_| TokenError::InvalidProfileName)?;
    let os_user = OsUserName::new(request.os_user).map_err(|_| TokenError::InvalidSessionUser)?;

    let iat = now.div_euclid(1000);
    let exp = iat
        .checked_add(lifetime_secs(ttl))
        .ok_or(TokenError::TimeOutOfRange)?;
    let expires_at = exp.checked_mul(1000).ok_or(TokenError::TimeOutOfRange)?;
    let jti_time = u64::try_from(now).map_err(|_| TokenError::TimeOutOfRange)?;
    let jti = ids::uuid_v7(jti_time).map_err(|_| TokenError::Random)?;

    let claims = TerminalSessionClaims {
        iss: request.instance_id.to_owned(),
        aud: request.host_id,
        sub: request.person_id,
        sid: request.session_id,
        jti,
        iat,
        exp,
        dev: request.device_id,
        prf: profile.as_str().to_owned(),
        cek,
        own: request.own,
        osu: os_user.as_str().to_owned(),
        wdi: request.workdir_index,
        att: request.att,
    };
    Ok(IssuedToken {
        token: signer.sign(&claims),
        jti,
        exp,
        expires_at,
    })
}

#[cfg(test)]
mod tests {
    use bothy_proto::jwk::{Jwks, JwksKey};
    use bothy_proto::jws::{Ed25519SigningKey, decode_terminal_session};

    use super::*;

    fn id(n: u8) -> Uuid {
        Uuid::from_bytes([n; 16])
    }

    fn request<'a>(cek: &'a str) -> TokenRequest<'a> {
        TokenRequest {
            instance_id: "instance-1",
            host_id: id(1),
            person_id: id(2),
            session_id: id(3),
            device_id: id(4),
            profile: "shell",
            profile_kind: ProfileKind::Shell,
            client_ephemeral_key_hash: cek,
            own: false,
            os_user: "alice",
            workdir_index: None,
            att: Att::Open,
        }
    }

    #[test]
    fn lifetime_rounds_up_to_seconds() {
        assert_eq!(lifetime_secs(Duration::from_secs(30)), 30);
        assert_eq!(lifetime_secs(Duration::from_millis(30_001)), 31);
        assert_eq!(lifetime_secs(Duration::from_millis(1)), 1);
        assert_eq!(lifetime_secs(Duration::ZERO), 0);
        assert_eq!(lifetime_secs(Duration::MAX), i64::MAX);
    }

    #[test]
    fn cek_is_strict() {
        let good = b64::encode(&[7; 32]);
        assert_eq!(parse_client_ephemeral_key_hash(&good), Ok([7; 32]));
        for bad in [
            String::new(),
            b64::encode(&[7; 31]),
            b64::encode(&[7; 33]),
            format!("{good}="),
            format!(" {good}"),
            b64::encode(&[0xfb; 32]).replace('-', "+").replace('_', "/"),
        ] {
            assert_eq!(
                parse_client_ephemeral_key_hash(&bad),
                Err(TokenError::InvalidClientEphemeralKeyHash),
                "{bad:?}"
            );
        }
        assert_eq!(
            TokenError::InvalidClientEphemeralKeyHash.field_error(),
            Some(("/client_ephemeral_key_hash", "invalid_format"))
        );
    }

    #[test]
    fn wdi_exactly_for_claude_open() {
        use ProfileKind::{Claude, Command, Shell};
        assert_eq!(check_workdir_index(Claude, Att::Open, Some(0)), Ok(()));
        assert_eq!(check_workdir_index(Shell, Att::Open, None), Ok(()));
        assert_eq!(check_workdir_index(Claude, Att::Attach, None), Ok(()));
        assert_eq!(
            check_workdir_index(Claude, Att::Open, None),
            Err(TokenError::WorkdirRequired)
        );
        for (kind, att) in [
            (Shell, Att::Open),
            (Command, Att::Open),
            (Claude, Att::Attach),
            (Shell, Att::Attach),
        ] {
            assert_eq!(
                check_workdir_index(kind, att, Some(1)),
                Err(TokenError::WorkdirNotAllowed),
                "{kind:?} {att:?}"
            );
        }
        assert_eq!(
            TokenError::WorkdirNotAllowed.field_error(),
            Some(("/workdir_index", "not_allowed"))
        );
        assert_eq!(TokenError::Random.field_error(), None);
    }

    #[test]
    fn issued_token_decodes_with_the_key() {
        let key = Ed25519SigningKey::from_seed(&[9; 32]);
        let jwks = Jwks::new(vec![JwksKey::from_jwk(key.public_jwk())]).unwrap();
        let signer = TerminalSigner::for_tests(key);
        let cek = b64::encode(&[7; 32]);
        let now = 1_796_083_200_999;
        let issued = issue(&signer, &request(&cek), Duration::from_secs(30), now).unwrap();
        let claims = decode_terminal_session(&issued.token, &jwks).unwrap();
        assert_eq!(claims.iat, 1_796_083_200);
        assert_eq!(claims.exp, 1_796_083_230);
        assert_eq!(issued.exp, claims.exp);
        assert_eq!(issued.expires_at, 1_796_083_230_000);
        assert_eq!(claims.jti, issued.jti);
        assert_eq!(ids::v7_unix_millis(&issued.jti), Some(now as u64));
        assert_eq!(claims.cek, [7; 32]);
        assert_eq!(claims.wdi, None);
        let debug = format!("{issued:?} {:?}", request(&cek));
        assert!(!debug.contains(&issued.token), "{debug}");
        assert!(!debug.contains("alice"), "{debug}");
        assert!(!debug.contains(&id(2).to_string()), "{debug}");
    }

    #[test]
    fn caller_faults() {
        let signer = TerminalSigner::for_tests(Ed25519SigningKey::from_seed(&[9; 32]));
        let cek = b64::encode(&[7; 32]);
        let ttl = Duration::from_secs(30);
        let cases: [(TokenRequest<'_>, TokenError); 4] = [
            (
                TokenRequest {
                    instance_id: "",
                    ..request(&cek)
                },
                TokenError::EmptyIssuer,
            ),
            (
                TokenRequest {
                    profile: "",
                    ..request(&cek)
                },
                TokenError::InvalidProfileName,
            ),
            (
                TokenRequest {
                    os_user: "../etc",
                    ..request(&cek)
                },
                TokenError::InvalidSessionUser,
            ),
            (
                TokenRequest {
                    client_ephemeral_key_hash: "x",
                    os_user: "../etc",
                    ..request(&cek)
                },
                TokenError::InvalidClientEphemeralKeyHash,
            ),
        ];
        for (request, expected) in cases {
            assert_eq!(issue(&signer, &request, ttl, 1_000), Err(expected));
        }
        assert_eq!(
            issue(&signer, &request(&cek), ttl, -1),
            Err(TokenError::TimeOutOfRange)
        );
        assert_eq!(
            issue(&signer, &request(&cek), Duration::MAX, 1_000),
            Err(TokenError::TimeOutOfRange)
        );
    }
}
