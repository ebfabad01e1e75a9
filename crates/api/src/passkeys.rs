//! The bodies of the passkey and web-console routes (DESIGN 3.1, 3.4; spec
//! 24 6.2, 12, 13): `POST /api/v1/auth/enroll/passkey/{start,finish}`,
//! `POST /api/v1/auth/passkeys/{start,finish}`,
//! `POST /api/v1/auth/passkeys/first/{start,finish}` (D-408),
//! `POST /api/v1/auth/console/login/{start,finish}`,
//! `POST /api/v1/auth/step-up/passkey/start`.
//!
//! The WebAuthn structures stay JSON values: `options` is what the browser's
//! `navigator.credentials` takes and `credential` what it gives back; the
//! server hands them to its WebAuthn library, the API does not shape them.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::auth::debug_redacted;

/// A WebAuthn challenge (doc-only): pass `options` to the browser's
/// `navigator.credentials.create()` or `.get()`, and `challenge_id` to the finish.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PasskeyChallenge {
    /// The challenge (5 minutes, single use).
    #[cfg_attr(feature = "openapi", schema(format = "uuid"))]
    pub challenge_id: String,
    /// `CreationChallengeResponse` (registration) or `RequestChallengeResponse`
    /// (assertion) of WebAuthn, as JSON.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub options: Value,
}

/// A registered passkey (doc-only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PasskeyRegistered {
    /// The new passkey's ID.
    #[cfg_attr(feature = "openapi", schema(format = "uuid"))]
    pub passkey_id: String,
}

/// `POST /api/v1/auth/enroll/passkey/start` (doc-only; exactly these members).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PasskeyEnrollStartRequest {
    /// The one-time enrollment code `bothy_ec_...`.
    pub code: String,
}

debug_redacted!(PasskeyEnrollStartRequest {} hide { code });

/// `POST /api/v1/auth/enroll/passkey/finish` (doc-only; exactly these members).
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PasskeyEnrollFinishRequest {
    /// The one-time enrollment code of the start.
    pub code: String,
    /// The challenge of the start.
    #[cfg_attr(feature = "openapi", schema(format = "uuid"))]
    pub challenge_id: String,
    /// The browser's `PublicKeyCredential` (attestation) as JSON, without `null`
    /// members.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub credential: Value,
}

debug_redacted!(PasskeyEnrollFinishRequest { challenge_id } hide { code, credential });

/// `POST /api/v1/auth/passkeys/start` (doc-only; exactly these members).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PasskeyRegisterStartRequest {
    /// A fresh TOTP step-up of this login session; consumed.
    #[cfg_attr(feature = "openapi", schema(format = "uuid"))]
    pub step_up_id: String,
}

/// `POST /api/v1/auth/passkeys/finish` (doc-only; exactly these members).
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PasskeyFinishRequest {
    /// The challenge of the start.
    #[cfg_attr(feature = "openapi", schema(format = "uuid"))]
    pub challenge_id: String,
    /// The browser's `PublicKeyCredential` (attestation) as JSON, without `null`
    /// members.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub credential: Value,
}

debug_redacted!(PasskeyFinishRequest { challenge_id } hide { credential });

/// `POST /api/v1/auth/passkeys/first/start` (doc-only; exactly these members).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FirstPasskeyStartRequest {
    /// The username.
    pub username: String,
    /// The password.
    #[cfg_attr(feature = "openapi", schema(format = Password))]
    pub password: String,
    /// The current TOTP code (its time step is used up).
    pub totp: String,
}

debug_redacted!(FirstPasskeyStartRequest { username } hide { password, totp });

/// `POST /api/v1/auth/passkeys/first/finish` (doc-only; exactly these members).
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FirstPasskeyFinishRequest {
    /// The username of the start.
    pub username: String,
    /// The password again.
    #[cfg_attr(feature = "openapi", schema(format = Password))]
    pub password: String,
    /// The challenge of the start.
    #[cfg_attr(feature = "openapi", schema(format = "uuid"))]
    pub challenge_id: String,
    /// The browser's `PublicKeyCredential` (attestation) as JSON, without `null`
    /// members.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub credential: Value,
}

debug_redacted!(FirstPasskeyFinishRequest { username, challenge_id } hide { password, credential });

/// `POST /api/v1/auth/console/login/start` (doc-only; exactly these members).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ConsoleLoginStartRequest {
    /// The username.
    pub username: String,
}

/// `POST /api/v1/auth/console/login/finish` (doc-only; exactly these members).
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ConsoleLoginFinishRequest {
    /// The username of the start.
    pub username: String,
    /// The password.
    #[cfg_attr(feature = "openapi", schema(format = Password))]
    pub password: String,
    /// The challenge of the start.
    #[cfg_attr(feature = "openapi", schema(format = "uuid"))]
    pub challenge_id: String,
    /// The browser's `PublicKeyCredential` (assertion, user verification
    /// required) as JSON, without `null` members.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub credential: Value,
}

debug_redacted!(ConsoleLoginFinishRequest { username, challenge_id } hide { password, credential });

/// `200` of `POST /api/v1/auth/console/login/finish` (doc-only).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ConsoleLoginResponse {
    /// The new console login session.
    #[cfg_attr(feature = "openapi", schema(format = "uuid"))]
    pub login_session_id: String,
    /// When it expires (Unix ms).
    pub expires_at: i64,
    /// The CSRF token: send it in the CSRF header with every request that is not
    /// GET or HEAD.
    pub csrf_token: String,
}

debug_redacted!(ConsoleLoginResponse { login_session_id, expires_at } hide { csrf_token });

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn options_pass_through_and_secrets_stay_out_of_debug() {
        let text = r#"{"challenge_id":"c","options":{"publicKey":{"challenge":"x"}}}"#;
        let challenge: PasskeyChallenge = serde_json::from_str(text).unwrap();
        assert_eq!(challenge.options["publicKey"]["challenge"], "x");
        let finish = ConsoleLoginFinishRequest {
            username: "alice".into(),
            password: "canary-password-6".into(),
            challenge_id: "c".into(),
            credential: serde_json::json!({"id": "canary-credential-7"}),
        };
        let answer = ConsoleLoginResponse {
            login_session_id: "l".into(),
            expires_at: 1,
            csrf_token: "canary-csrf-8".into(),
        };
        let text = format!("{finish:?} {answer:?}");
        for canary in ["canary-password-6", "canary-credential-7", "canary-csrf-8"] {
            assert!(!text.contains(canary), "{text}");
        }
    }
}
