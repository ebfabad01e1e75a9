//! The bodies of the auth routes (DESIGN 3.1, 3.4) and the rules client and
//! server both apply:
//! `POST /api/v1/auth/enroll/check`, `POST /api/v1/auth/enroll`,
//! `POST /api/v1/auth/enroll/confirm`, `POST /api/v1/auth/login`,
//! `GET /api/v1/auth/session` ("whoami"), `GET /api/v1/auth/sessions`,
//! `POST /api/v1/auth/step-up`. Logout and the revocation of a login session
//! answer `204` without a body.
//!
//! The schema descriptions are the doc comments, kept word for word from the
//! doc-only declarations these types replaced, so that `docs/api/openapi.json`
//! did not change when they moved here.
//!
//! Secrets (passwords, codes, tokens) stay out of `Debug` (10.4).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::persons::Role;
use crate::tokens::ServiceKind;

/// The password rule: at least this many characters (Unicode scalar values,
/// not bytes); the server refuses shorter ones with `too_short`, the CLI
/// says the rule before it asks and checks it before it sends.
pub const PASSWORD_MIN_CHARS: usize = 12;

/// The password rule: at most this many characters (`too_long`).
pub const PASSWORD_MAX_CHARS: usize = 256;

/// `Debug` for a body with secrets: the members `hide` are shown as
/// `<redacted>`, never their value.
macro_rules! debug_redacted {
    ($type:ident { $($shown:ident),* } hide { $($hidden:ident),+ }) => {
        impl std::fmt::Debug for $type {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($type))
                    $(.field(stringify!($shown), &self.$shown))*
                    $(.field(stringify!($hidden), &"<redacted>"))+
                    .finish()
            }
        }
    };
}

pub(crate) use debug_redacted;

/// Where a login session was made: the CLI (with a device key) or the web console (cookie, no device key).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum ClientComponent {
    // The CLI, with a device key.
    Cli,
    // The web console.
    Console,
}

impl ClientComponent {
    /// The wire text.
    pub fn as_str(self) -> &'static str {
        match self {
            ClientComponent::Cli => "cli",
            ClientComponent::Console => "console",
        }
    }
}

/// How a step-up is proven: `totp` (CLI) or `webauthn` (console).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum StepUpMethod {
    // A TOTP code.
    Totp,
    // A passkey assertion.
    Webauthn,
}

impl StepUpMethod {
    /// The wire text.
    pub fn as_str(self) -> &'static str {
        match self {
            StepUpMethod::Totp => "totp",
            StepUpMethod::Webauthn => "webauthn",
        }
    }
}

/// `POST /api/v1/auth/enroll/check` (doc-only; the handler reads exactly these members).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CheckEnrollmentCodeRequest {
    /// The one-time enrollment code `bothy_ec_...`.
    pub code: String,
}

debug_redacted!(CheckEnrollmentCodeRequest {} hide { code });

/// `200` of `POST /api/v1/auth/enroll/check` (doc-only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CheckEnrollmentCodeResponse {
    /// The person the code enrolls.
    pub username: String,
    /// When the enrollment code expires (Unix ms).
    pub code_expires_at: i64,
}

/// `POST /api/v1/auth/enroll` (doc-only; the handler reads exactly these members).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EnrollRequest {
    /// The one-time enrollment code `bothy_ec_...`.
    pub code: String,
    /// The new password: 12 to 256 characters.
    #[cfg_attr(
        feature = "openapi",
        schema(format = Password, min_length = 12, max_length = 256)
    )]
    pub password: String,
}

debug_redacted!(EnrollRequest {} hide { code, password });

/// `200` of `POST /api/v1/auth/enroll` (doc-only).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EnrollResponse {
    /// The person's principal ID.
    #[cfg_attr(feature = "openapi", schema(format = "uuid"))]
    pub person_id: String,
    /// The username.
    pub username: String,
    /// The pending TOTP secret as an `otpauth://totp/...` URI.
    pub otpauth_uri: String,
    /// When the enrollment code expires (Unix ms).
    pub code_expires_at: i64,
}

debug_redacted!(EnrollResponse { person_id, username, code_expires_at } hide { otpauth_uri });

/// `POST /api/v1/auth/enroll/confirm` (doc-only).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ConfirmEnrollmentRequest {
    /// The one-time enrollment code of `enroll`.
    pub code: String,
    /// The authenticator app's current 6-digit code.
    #[cfg_attr(feature = "openapi", schema(example = "123456"))]
    pub totp: String,
}

debug_redacted!(ConfirmEnrollmentRequest {} hide { code, totp });

/// `200` of `POST /api/v1/auth/enroll/confirm` (doc-only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ConfirmEnrollmentResponse {
    /// The person's principal ID.
    #[cfg_attr(feature = "openapi", schema(format = "uuid"))]
    pub person_id: String,
    /// The username.
    pub username: String,
}

/// `POST /api/v1/auth/login` (doc-only; DESIGN 3.4 pins these members).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LoginRequest {
    /// The username (case-insensitive).
    pub username: String,
    /// The password.
    #[cfg_attr(feature = "openapi", schema(format = Password))]
    pub password: String,
    /// The current 6-digit TOTP code.
    #[cfg_attr(feature = "openapi", schema(example = "123456"))]
    pub totp: String,
    /// The device's raw Ed25519 public key (32 bytes), base64url without padding.
    pub device_public_key: String,
    /// A name for the device (shown in `GET /api/v1/devices`).
    pub device_name: String,
}

debug_redacted!(LoginRequest { username, device_public_key, device_name } hide { password, totp });

/// `200` of `POST /api/v1/auth/login` (doc-only; DESIGN 3.4 pins these members).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LoginResponse {
    /// The opaque access token `bothy_at_...` (`Authorization: Bearer`).
    pub access_token: String,
    /// The new login session.
    #[cfg_attr(feature = "openapi", schema(format = "uuid"))]
    pub login_session_id: String,
    /// The device of `device_public_key`.
    #[cfg_attr(feature = "openapi", schema(format = "uuid"))]
    pub device_id: String,
    /// When the login session expires (Unix ms).
    pub expires_at: i64,
}

debug_redacted!(LoginResponse { login_session_id, device_id, expires_at } hide { access_token });

/// `200` of `GET /api/v1/auth/session` ("whoami"): a person in a login
/// session, or an agent or app with an API token. On the wire it is the
/// object of either variant (`kind` tells them apart); the schema is a
/// `oneOf` of [`PersonSession`] and [`ServiceSession`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum SessionResponse {
    /// A person in a login session.
    Person(PersonSession),
    /// An agent or app with an API token.
    Service(ServiceSession),
}

#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for SessionResponse {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::ToSchema;
        use utoipa::openapi::schema::{OneOfBuilder, Schema};
        use utoipa::openapi::{Ref, RefOr};
        let one_of = OneOfBuilder::new()
            .item(Ref::from_schema_name(PersonSession::name()))
            .item(Ref::from_schema_name(ServiceSession::name()))
            .description(Some(
                "A person in a login session, or an agent or app with an API token.",
            ))
            .build();
        RefOr::T(Schema::OneOf(one_of))
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for SessionResponse {
    fn schemas(
        schemas: &mut Vec<(
            String,
            utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>,
        )>,
    ) {
        use utoipa::PartialSchema;
        schemas.push((PersonSession::name().into_owned(), PersonSession::schema()));
        PersonSession::schemas(schemas);
        schemas.push((
            ServiceSession::name().into_owned(),
            ServiceSession::schema(),
        ));
        ServiceSession::schemas(schemas);
    }
}

/// The `kind` of a [`PersonSession`]: always `person`.
pub const PERSON_KIND: &str = "person";

/// The schema of [`PersonSession::kind`]: the one value [`PERSON_KIND`].
#[cfg(feature = "openapi")]
fn person_kind() -> utoipa::openapi::schema::Object {
    use utoipa::openapi::schema::{ObjectBuilder, Type};
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some([PERSON_KIND]))
        .build()
}

/// A person in a login session (doc-only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PersonSession {
    /// The person's principal ID.
    #[cfg_attr(feature = "openapi", schema(format = "uuid"))]
    pub principal_id: String,
    /// `person`.
    #[cfg_attr(feature = "openapi", schema(schema_with = person_kind))]
    pub kind: String,
    /// The username.
    pub username: String,
    /// `owner` or `member`.
    pub role: Role,
    /// The login session of the credential.
    #[cfg_attr(feature = "openapi", schema(format = "uuid"))]
    pub login_session_id: String,
    /// The device of a CLI login; `null` for the console.
    #[cfg_attr(feature = "openapi", schema(required = true, format = "uuid"))]
    pub device_id: Option<String>,
    /// `cli` or `console`.
    pub client_component: ClientComponent,
    /// When the login session expires (Unix ms).
    pub expires_at: i64,
}

/// An agent or app with an API token (doc-only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ServiceSession {
    /// The principal's ID.
    #[cfg_attr(feature = "openapi", schema(format = "uuid"))]
    pub principal_id: String,
    /// `agent` or `app`.
    pub kind: ServiceKind,
    /// The name the owner gave it.
    pub name: String,
    /// The API token used.
    #[cfg_attr(feature = "openapi", schema(format = "uuid"))]
    pub token_id: String,
}

/// `200` of `GET /api/v1/auth/sessions` (doc-only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LoginSessionList {
    /// The live login sessions.
    pub sessions: Vec<LoginSession>,
}

/// A live login session (doc-only; `login_sessions::LoginSession::to_json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LoginSession {
    /// The login session's ID.
    #[cfg_attr(feature = "openapi", schema(format = "uuid"))]
    pub id: String,
    /// Whose session it is.
    #[cfg_attr(feature = "openapi", schema(format = "uuid"))]
    pub person_id: String,
    /// Their username.
    pub username: String,
    /// The device of a CLI login; `null` for the console.
    #[cfg_attr(feature = "openapi", schema(required = true, format = "uuid"))]
    pub device_id: Option<String>,
    /// `cli` or `console`.
    pub client_component: ClientComponent,
    /// When it was created (Unix ms).
    pub created_at: i64,
    /// When it expires (Unix ms).
    pub expires_at: i64,
    /// Whether it is the caller's own session.
    pub current: bool,
}

/// `POST /api/v1/auth/step-up` (doc-only; the handler reads exactly these
/// members). `method: "totp"` takes `code`; `method: "webauthn"` takes
/// `challenge_id` and `credential`.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StepUpRequest {
    /// `totp` (CLI) or `webauthn` (console).
    #[cfg_attr(feature = "openapi", schema(value_type = StepUpMethod))]
    pub method: String,
    /// `totp`: the current 6-digit TOTP code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, example = "123456"))]
    pub code: Option<String>,
    /// `webauthn`: the `challenge_id` of `POST /api/v1/auth/step-up/passkey/start`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = "uuid"))]
    pub challenge_id: Option<String>,
    /// `webauthn`: the browser's `PublicKeyCredential` (assertion) as JSON, without
    /// `null` members.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub credential: Option<Value>,
}

debug_redacted!(StepUpRequest { method, challenge_id } hide { code, credential });

impl StepUpRequest {
    /// A TOTP step-up (the CLI's) with `code`.
    pub fn totp(code: impl Into<String>) -> StepUpRequest {
        StepUpRequest {
            method: StepUpMethod::Totp.as_str().to_owned(),
            code: Some(code.into()),
            challenge_id: None,
            credential: None,
        }
    }
}

/// `200` of `POST /api/v1/auth/step-up` (doc-only; DESIGN 3.4 pins these members).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StepUpResponse {
    /// The step-up, to pass as `step_up_id` to the action that requires it.
    #[cfg_attr(feature = "openapi", schema(format = "uuid"))]
    pub step_up_id: String,
    /// The last moment it can be consumed (Unix ms).
    pub expires_at: i64,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_person_and_a_service_are_told_apart_on_the_wire() {
        let person = r#"{"principal_id":"p","kind":"person","username":"alice","role":"owner",
            "login_session_id":"l","device_id":null,"client_component":"console","expires_at":1}"#;
        match serde_json::from_str::<SessionResponse>(person).unwrap() {
            SessionResponse::Person(person) => {
                assert_eq!(person.device_id, None);
                assert_eq!(person.role, Role::Owner);
            }
            other => panic!("{other:?}"),
        }
        let service = r#"{"principal_id":"p","kind":"agent","name":"ci","token_id":"t"}"#;
        assert!(matches!(
            serde_json::from_str::<SessionResponse>(service).unwrap(),
            SessionResponse::Service(ServiceSession {
                kind: ServiceKind::Agent,
                ..
            })
        ));
    }

    #[test]
    fn a_null_device_stays_null_and_a_totp_step_up_has_no_webauthn_members() {
        let session = LoginSession {
            id: "i".into(),
            person_id: "p".into(),
            username: "u".into(),
            device_id: None,
            client_component: ClientComponent::Console,
            created_at: 1,
            expires_at: 2,
            current: true,
        };
        assert!(
            serde_json::to_string(&session)
                .unwrap()
                .contains(r#""device_id":null"#)
        );
        assert_eq!(
            serde_json::to_string(&StepUpRequest::totp("123456")).unwrap(),
            r#"{"method":"totp","code":"123456"}"#
        );
    }

    #[test]
    fn secrets_stay_out_of_debug() {
        let login = LoginRequest {
            username: "alice".into(),
            password: "canary-password-1".into(),
            totp: "canary-totp-2".into(),
            device_public_key: "k".into(),
            device_name: "d".into(),
        };
        let answer = LoginResponse {
            access_token: "canary-token-3".into(),
            login_session_id: "l".into(),
            device_id: "d".into(),
            expires_at: 1,
        };
        let text = format!("{login:?} {answer:?} {:?}", StepUpRequest::totp("canary-4"));
        for canary in [
            "canary-password-1",
            "canary-totp-2",
            "canary-token-3",
            "canary-4",
        ] {
            assert!(!text.contains(canary), "{text}");
        }
        assert!(text.contains("alice"));
    }
}
