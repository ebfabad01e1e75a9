//! Messages of the control connection `/api/v1/hosts/connect` (spec 24, section
//! 3.5; asyncapi `hostControl`): JSON text frames `{"op": ..., "d": {...}}` of at
//! most `sync.ws_max_frame_bytes`, decoded strictly through [`crate::json`].
//!
//! All times are Unix time in milliseconds, as JSON integers (`server_time`,
//! `expires_at`); durations carry their unit in the name (`_ms`).
//!
//! # Schemas (`?` = optional member; `d` is an object for every op)
//!
//! Server to host ([`ServerMessage`]):
//!
//! | op | d |
//! |----|---|
//! | `hello` | `protocol_versions`: array of 1 to 16 u32, each ≥ 1; `challenge`: base64url of 32 bytes; `server_time`; `heartbeat_interval_ms`: u64 > 0; `heartbeat_miss_limit`: u32; `jwks`: JWKS ([`Jwks`]) |
//! | `ready` | `host_id`: UUID; `state`: `pairing`, `confirming`, `active`, `disabled` or `retired`; `llm_credentials`: `none`, `personal` or `organization` |
//! | `heartbeat_ack` | `server_time`; `jwks`?: JWKS, only when the set changed (5.3 "JWKS refresh") |
//! | `session.open` | `session_id`: UUID; `stream_path`: exactly `/api/v1/hosts/sessions/<session_id>/stream`; `expires_at` |
//! | `session.close` | `session_id`: UUID; `close_reason`: a `close_reason` of 10.3 |
//! | `error` | `op`: the host op it answers; `code`: `validation_failed` or `not_found`; `session_id`?: UUID; `errors`?: array of `{pointer, code, check?}` ([`FieldError`]) |
//!
//! Host to server ([`HostMessage`]):
//!
//! | op | d |
//! |----|---|
//! | `identify` | `protocol_version`: u32; `host_id`: UUID; `proof`: string (a compact JWS, parsed by the server in step 4); `host_version`: string; `live_sessions`?: array of UUIDs; `session_id`?: UUID |
//! | `report` | the [`Report`] (`platform`, `os_version`, `profiles`, `session_users`, `doctor`, `is_server_host`, `require_local_confirm`) |
//! | `heartbeat` | `active_sessions`: u32 |
//! | `session.started` | `session_id`: UUID |
//! | `session.ended` | `session_id`: UUID; `close_reason`; `close_detail`?; `exit_code`?: i32 |
//!
//! # Refusals
//!
//! Everything [`HostMessage::decode`] and [`ServerMessage::decode`] refuse is a
//! [`MessageError`] and closes the connection with 4002 ([`MessageError::close_code`];
//! a frame over the limit with the close reason `frame_too_large`). A server op
//! sent by the host (or a host op sent by the server) has its own variant,
//! [`MessageError::WrongDirection`], and closes with 4002 as well (3.5 "Frames
//! after the login").
//!
//! Two checks come after decoding, because the server decides them in its own
//! order:
//! - [`Identify::check_control_shape`] is step 3 of the login ("live_sessions
//!   absent, session_id present, or host_version not SemVer 2.0.0: 4002"), after
//!   the protocol version of step 2; [`Identify::check_data_shape`] is its
//!   counterpart on the data connection.
//! - [`SessionEnded::check_host_may_report`]: whether a host may end a session
//!   this way; a refusal is answered with `error {op: session.ended, code:
//!   validation_failed}` and keeps the connection, so its error type is
//!   [`SessionEndedError`], not [`MessageError`].

use serde_json::{Map, Value};
use uuid::Uuid;

use crate::b64;
use crate::codes::{self, CloseCode, CloseDetail, CloseReason, CodeError};
use crate::json::{self, JsonError, Member};
use crate::jwk::{JwkError, Jwks};
use crate::report::{FieldError, Report, is_valid_host_version};

/// Most entries of `hello.protocol_versions`.
pub const MAX_PROTOCOL_VERSIONS: usize = 16;

/// The close reason text of a frame over the size limit (3.5).
pub const FRAME_TOO_LARGE: &str = "frame_too_large";

/// Every refusal of a message of the control connection, the data connection
/// ([`crate::data`]) and the device stream ([`crate::stream`]). Each closes the
/// connection with 4002 ([`MessageError::close_code`]). No variant carries a value
/// the peer sent; JSON errors carry pointers only.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MessageError {
    /// A binary frame where only text frames may come (the whole control
    /// connection; the data connection and the device stream before their login).
    #[error("binary frame where a text frame is required")]
    BinaryFrame,
    /// The frame is not strict JSON of the schema: too large, not UTF-8, not one
    /// JSON value, a duplicate or null member, an unknown or missing member, a
    /// wrong type or an invalid value (see [`JsonError`] for each).
    #[error("invalid message: {0}")]
    Json(#[from] JsonError),
    /// A `jwks` that is not a valid JWKS of Ed25519 keys.
    #[error("invalid jwks: {0}")]
    Jwks(JwkError),
    /// An op this connection does not have.
    #[error("unknown op")]
    UnknownOp,
    /// An op of the other direction: a server op sent by the host, or a host op
    /// sent by the server.
    #[error("op of the other direction")]
    WrongDirection,
    /// Control `identify` without `live_sessions` (3.5 step 3).
    #[error("identify without live_sessions on the control connection")]
    LiveSessionsMissing,
    /// Control `identify` with `session_id` (3.5 step 3).
    #[error("identify with session_id on the control connection")]
    SessionIdNotAllowed,
    /// `host_version` is not SemVer 2.0.0 without a leading `v` (3.5 step 3).
    #[error("host_version is not SemVer 2.0.0")]
    HostVersionInvalid,
    /// Data `identify` with `live_sessions`.
    #[error("identify with live_sessions on a data connection")]
    LiveSessionsNotAllowed,
    /// Data `identify` without `session_id`.
    #[error("identify without session_id on a data connection")]
    SessionIdMissing,
    /// Data `identify` whose `session_id` is not the session of the path.
    #[error("identify session_id differs from the session of the path")]
    SessionIdMismatch,
}

impl MessageError {
    /// The close code of every refusal: 4002 (invalid message).
    pub const fn close_code(&self) -> CloseCode {
        CloseCode::InvalidMessage
    }

    /// The close reason text: `frame_too_large` for a frame over the limit,
    /// `None` (an empty reason) for every other refusal.
    pub fn close_reason_text(&self) -> Option<&'static str> {
        match self {
            MessageError::Json(JsonError::TooLarge { .. }) => Some(FRAME_TOO_LARGE),
            _ => None,
        }
    }
}

/// Why a host may not end a session as its `session.ended` says (3.5 "Session
/// reports", 10.3, M2-46). The server answers `error {op: session.ended, code:
/// validation_failed}` and keeps the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SessionEndedError {
    /// A `close_reason` that only the server sets.
    #[error("close_reason is not one a host may report")]
    ReasonNotFromHost,
    /// A `close_detail` missing, not allowed, or not of the reason
    /// ([`codes::check_close_pair`]).
    #[error("close_detail does not fit close_reason: {0}")]
    Pair(#[from] CodeError),
    /// `exit_code` with a reason other than `process_exited`.
    #[error("exit_code only with process_exited")]
    ExitCodeNotAllowed,
}

impl SessionEndedError {
    /// The code of the `error` the server answers with.
    pub const fn error_code(self) -> ErrorCode {
        ErrorCode::ValidationFailed
    }
}

/// Defines a closed list of wire strings with `ALL`, `as_str` and `parse`.
macro_rules! wire_enum {
    (
        $(#[$meta:meta])*
        $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident => $text:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )+
        }

        impl $name {
            /// Every value.
            pub const ALL: &'static [$name] = &[ $( Self::$variant, )+ ];

            /// The wire string.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $( Self::$variant => $text, )+
                }
            }

            /// The value with this exact string.
            pub fn parse(text: &str) -> Option<Self> {
                match text {
                    $( $text => Some(Self::$variant), )+
                    _ => None,
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

wire_enum! {
    /// The ops the host service sends on the control connection.
    HostOp {
        /// `identify`: the login.
        Identify => "identify",
        /// `report`: the report after every `ready`.
        Report => "report",
        /// `heartbeat`.
        Heartbeat => "heartbeat",
        /// `session.started`.
        SessionStarted => "session.started",
        /// `session.ended`.
        SessionEnded => "session.ended",
    }
}

wire_enum! {
    /// The ops the server sends on the control connection.
    ServerOp {
        /// `hello`: right after the upgrade.
        Hello => "hello",
        /// `ready`: the login succeeded, or the declaration changed.
        Ready => "ready",
        /// `heartbeat_ack`.
        HeartbeatAck => "heartbeat_ack",
        /// `session.open`.
        SessionOpen => "session.open",
        /// `session.close`.
        SessionClose => "session.close",
        /// `error`: the answer to a host op the server refuses without closing.
        Error => "error",
    }
}

wire_enum! {
    /// The state of a host (3.1), as `ready` carries it.
    HostState {
        /// `pairing`.
        Pairing => "pairing",
        /// `confirming`.
        Confirming => "confirming",
        /// `active`: the only state that allows sessions.
        Active => "active",
        /// `disabled`.
        Disabled => "disabled",
        /// `retired`.
        Retired => "retired",
    }
}

wire_enum! {
    /// The declaration of the LLM login of a host (7.2), `hosts.llm_credentials`.
    LlmCredentials {
        /// `none`.
        None => "none",
        /// `personal`.
        Personal => "personal",
        /// `organization`.
        Organization => "organization",
    }
}

wire_enum! {
    /// The `code` of an `error` (3.5).
    ErrorCode {
        /// `validation_failed`: an invalid report or session end.
        ValidationFailed => "validation_failed",
        /// `not_found`: an unknown session or one of another host.
        NotFound => "not_found",
    }
}

// ---------------------------------------------------------------------------
// Envelope, shared with `data` and `stream`.

/// Opens the envelope `{"op": string, "d": object}` of a decoded frame.
pub(crate) fn envelope(value: &Value) -> Result<(&str, Member<'_>), MessageError> {
    let root = json::Object::root(value, &["op", "d"])?;
    let op = root.str("op")?;
    let d = root.member("d")?;
    Ok((op, d))
}

/// The JSON text `{"op": op, "d": d}` (written by hand so `op` comes first; the
/// members of `d` are in name order).
pub(crate) fn envelope_json(op: &str, d: Value) -> String {
    format!("{{\"op\":{},\"d\":{d}}}", Value::from(op))
}

/// A string member whose value must be one of a closed list.
pub(crate) fn closed<T>(
    member: Member<'_>,
    parse: impl Fn(&str) -> Option<T>,
) -> Result<T, JsonError> {
    parse(member.as_str()?).ok_or_else(|| member.invalid())
}

pub(crate) fn uuid_value(id: &Uuid) -> Value {
    id.hyphenated().to_string().into()
}

pub(crate) fn decode_jwks(member: Member<'_>) -> Result<Jwks, MessageError> {
    Jwks::from_member(member).map_err(MessageError::Jwks)
}

fn close_reason(member: Member<'_>) -> Result<CloseReason, JsonError> {
    closed(member, |t| CloseReason::parse(t).ok())
}

// ---------------------------------------------------------------------------
// Server to host.

/// `hello`: the first frame of the server (3.5 "Login").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// The protocol versions the server speaks, 1 to [`MAX_PROTOCOL_VERSIONS`],
    /// each at least 1.
    pub protocol_versions: Vec<u32>,
    /// 32 random bytes the proof signs.
    pub challenge: [u8; 32],
    /// Unix milliseconds.
    pub server_time: u64,
    /// `terminal.host_heartbeat_interval` in milliseconds, above 0.
    pub heartbeat_interval_ms: u64,
    /// `terminal.host_heartbeat_miss_limit`.
    pub heartbeat_miss_limit: u32,
    /// The keys of purpose terminal (next, active, retiring).
    pub jwks: Jwks,
}

impl Hello {
    /// The members of `d`.
    pub const MEMBERS: &'static [&'static str] = &[
        "protocol_versions",
        "challenge",
        "server_time",
        "heartbeat_interval_ms",
        "heartbeat_miss_limit",
        "jwks",
    ];

    /// Decodes `d` strictly.
    pub fn decode(d: Member<'_>) -> Result<Self, MessageError> {
        let d = d.into_object(Self::MEMBERS)?;
        let versions = d.array("protocol_versions")?;
        if versions.is_empty() || versions.len() > MAX_PROTOCOL_VERSIONS {
            return Err(JsonError::InvalidValue {
                pointer: versions.pointer().to_owned(),
            }
            .into());
        }
        let protocol_versions = versions
            .iter()
            .map(|v| match v.as_uint::<u32>()? {
                0 => Err(v.invalid()),
                n => Ok(n),
            })
            .collect::<Result<_, _>>()?;
        let interval = d.member("heartbeat_interval_ms")?;
        let heartbeat_interval_ms = match interval.as_uint::<u64>()? {
            0 => return Err(interval.invalid().into()),
            n => n,
        };
        Ok(Self {
            protocol_versions,
            challenge: d.member("challenge")?.as_b64_array()?,
            server_time: d.uint("server_time")?,
            heartbeat_interval_ms,
            heartbeat_miss_limit: d.uint("heartbeat_miss_limit")?,
            jwks: decode_jwks(d.member("jwks")?)?,
        })
    }

    /// `d` as a JSON value.
    pub fn to_value(&self) -> Value {
        let mut map = Map::new();
        map.insert(
            "protocol_versions".into(),
            self.protocol_versions
                .iter()
                .copied()
                .map(Value::from)
                .collect(),
        );
        map.insert("challenge".into(), b64::encode(&self.challenge).into());
        map.insert("server_time".into(), self.server_time.into());
        map.insert(
            "heartbeat_interval_ms".into(),
            self.heartbeat_interval_ms.into(),
        );
        map.insert(
            "heartbeat_miss_limit".into(),
            self.heartbeat_miss_limit.into(),
        );
        map.insert("jwks".into(), self.jwks.to_value());
        Value::Object(map)
    }
}

/// `ready`: the login succeeded (3.5 step 7), sent again after every committed
/// change of the declaration (2.2 item 5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ready {
    /// The host.
    pub host_id: Uuid,
    /// Its state.
    pub state: HostState,
    /// Its declaration of the LLM login.
    pub llm_credentials: LlmCredentials,
}

impl Ready {
    /// The members of `d`.
    pub const MEMBERS: &'static [&'static str] = &["host_id", "state", "llm_credentials"];

    /// Decodes `d` strictly.
    pub fn decode(d: Member<'_>) -> Result<Self, MessageError> {
        let d = d.into_object(Self::MEMBERS)?;
        Ok(Self {
            host_id: d.uuid("host_id")?,
            state: closed(d.member("state")?, HostState::parse)?,
            llm_credentials: closed(d.member("llm_credentials")?, LlmCredentials::parse)?,
        })
    }

    /// `d` as a JSON value.
    pub fn to_value(&self) -> Value {
        let mut map = Map::new();
        map.insert("host_id".into(), uuid_value(&self.host_id));
        map.insert("state".into(), self.state.as_str().into());
        map.insert(
            "llm_credentials".into(),
            self.llm_credentials.as_str().into(),
        );
        Value::Object(map)
    }
}

/// `heartbeat_ack`: the answer to `heartbeat`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatAck {
    /// Unix milliseconds.
    pub server_time: u64,
    /// The keys of purpose terminal, only when they differ from the last set sent
    /// on this connection (5.3 "JWKS refresh"); the host replaces its set.
    pub jwks: Option<Jwks>,
}

impl HeartbeatAck {
    /// The members of `d`.
    pub const MEMBERS: &'static [&'static str] = &["server_time", "jwks"];

    /// Decodes `d` strictly.
    pub fn decode(d: Member<'_>) -> Result<Self, MessageError> {
        let d = d.into_object(Self::MEMBERS)?;
        Ok(Self {
            server_time: d.uint("server_time")?,
            jwks: d.opt_member("jwks").map(decode_jwks).transpose()?,
        })
    }

    /// `d` as a JSON value.
    pub fn to_value(&self) -> Value {
        let mut map = Map::new();
        map.insert("server_time".into(), self.server_time.into());
        if let Some(jwks) = &self.jwks {
            map.insert("jwks".into(), jwks.to_value());
        }
        Value::Object(map)
    }
}

/// The path of the data connection of a session:
/// `/api/v1/hosts/sessions/<session_id>/stream`, the ID hyphenated in lower case.
pub fn data_stream_path(session_id: &Uuid) -> String {
    format!("/api/v1/hosts/sessions/{}/stream", session_id.hyphenated())
}

/// `session.open`: open the data connection of a session (6.1 step 4, 6.2).
///
/// `stream_path` is not stored: it is always
/// [`data_stream_path`] of the session, and decoding refuses any other
/// path, so a server cannot send the host service to dial elsewhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionOpen {
    /// The session.
    pub session_id: Uuid,
    /// Unix milliseconds until which the host waits for `start`
    /// (`HostSessionOpen.expires_at`, 6.1 step 7).
    pub expires_at: u64,
}

impl SessionOpen {
    /// The members of `d`.
    pub const MEMBERS: &'static [&'static str] = &["session_id", "stream_path", "expires_at"];

    /// The path of the data connection: `/api/v1/hosts/sessions/<session_id>/stream`.
    pub fn stream_path(&self) -> String {
        data_stream_path(&self.session_id)
    }

    /// Decodes `d` strictly.
    pub fn decode(d: Member<'_>) -> Result<Self, MessageError> {
        let d = d.into_object(Self::MEMBERS)?;
        let session_id = d.uuid("session_id")?;
        let path = d.member("stream_path")?;
        if path.as_str()? != data_stream_path(&session_id) {
            return Err(path.invalid().into());
        }
        Ok(Self {
            session_id,
            expires_at: d.uint("expires_at")?,
        })
    }

    /// `d` as a JSON value.
    pub fn to_value(&self) -> Value {
        let mut map = Map::new();
        map.insert("session_id".into(), uuid_value(&self.session_id));
        map.insert("stream_path".into(), self.stream_path().into());
        map.insert("expires_at".into(), self.expires_at.into());
        Value::Object(map)
    }
}

/// `session.close`: the server ended a session; the host ends its PTY (6.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionClose {
    /// The session.
    pub session_id: Uuid,
    /// Why (10.3).
    pub close_reason: CloseReason,
}

impl SessionClose {
    /// The members of `d`.
    pub const MEMBERS: &'static [&'static str] = &["session_id", "close_reason"];

    /// Decodes `d` strictly.
    pub fn decode(d: Member<'_>) -> Result<Self, MessageError> {
        let d = d.into_object(Self::MEMBERS)?;
        Ok(Self {
            session_id: d.uuid("session_id")?,
            close_reason: close_reason(d.member("close_reason")?)?,
        })
    }

    /// `d` as a JSON value.
    pub fn to_value(&self) -> Value {
        let mut map = Map::new();
        map.insert("session_id".into(), uuid_value(&self.session_id));
        map.insert("close_reason".into(), self.close_reason.as_str().into());
        Value::Object(map)
    }
}

/// `error`: the server refuses a host op and keeps the connection (3.5 "Report",
/// "Session reports").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpError {
    /// The op it answers.
    pub op: HostOp,
    /// What went wrong.
    pub code: ErrorCode,
    /// The session, for an answer to a session op.
    pub session_id: Option<Uuid>,
    /// The findings of an invalid report ([`crate::report::validate`]), pointers
    /// relative to the report's `d`.
    pub errors: Option<Vec<FieldError>>,
}

impl OpError {
    /// The members of `d`.
    pub const MEMBERS: &'static [&'static str] = &["op", "code", "session_id", "errors"];

    /// Decodes `d` strictly.
    pub fn decode(d: Member<'_>) -> Result<Self, MessageError> {
        let d = d.into_object(Self::MEMBERS)?;
        let errors = match d.opt_member("errors") {
            Some(errors) => Some(
                errors
                    .into_array()?
                    .iter()
                    .map(FieldError::decode)
                    .collect::<Result<_, _>>()?,
            ),
            None => None,
        };
        Ok(Self {
            op: closed(d.member("op")?, HostOp::parse)?,
            code: closed(d.member("code")?, ErrorCode::parse)?,
            session_id: d
                .opt_member("session_id")
                .map(|m| m.as_uuid())
                .transpose()?,
            errors,
        })
    }

    /// `d` as a JSON value.
    pub fn to_value(&self) -> Value {
        let mut map = Map::new();
        map.insert("op".into(), self.op.as_str().into());
        map.insert("code".into(), self.code.as_str().into());
        if let Some(id) = &self.session_id {
            map.insert("session_id".into(), uuid_value(id));
        }
        if let Some(errors) = &self.errors {
            map.insert(
                "errors".into(),
                errors.iter().map(FieldError::to_value).collect(),
            );
        }
        Value::Object(map)
    }
}

/// A message from the server to the host service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerMessage {
    /// `hello`.
    Hello(Hello),
    /// `ready`.
    Ready(Ready),
    /// `heartbeat_ack`.
    HeartbeatAck(HeartbeatAck),
    /// `session.open`.
    SessionOpen(SessionOpen),
    /// `session.close`.
    SessionClose(SessionClose),
    /// `error`.
    Error(OpError),
}

impl ServerMessage {
    /// Decodes one text frame of at most `max_len` bytes (`sync.ws_max_frame_bytes`).
    pub fn decode(bytes: &[u8], max_len: usize) -> Result<Self, MessageError> {
        let value = json::parse(bytes, max_len)?;
        let (op, d) = envelope(&value)?;
        let Some(op) = ServerOp::parse(op) else {
            return Err(match HostOp::parse(op) {
                Some(_) => MessageError::WrongDirection,
                None => MessageError::UnknownOp,
            });
        };
        Ok(match op {
            ServerOp::Hello => Self::Hello(Hello::decode(d)?),
            ServerOp::Ready => Self::Ready(Ready::decode(d)?),
            ServerOp::HeartbeatAck => Self::HeartbeatAck(HeartbeatAck::decode(d)?),
            ServerOp::SessionOpen => Self::SessionOpen(SessionOpen::decode(d)?),
            ServerOp::SessionClose => Self::SessionClose(SessionClose::decode(d)?),
            ServerOp::Error => Self::Error(OpError::decode(d)?),
        })
    }

    /// The op.
    pub const fn op(&self) -> ServerOp {
        match self {
            Self::Hello(_) => ServerOp::Hello,
            Self::Ready(_) => ServerOp::Ready,
            Self::HeartbeatAck(_) => ServerOp::HeartbeatAck,
            Self::SessionOpen(_) => ServerOp::SessionOpen,
            Self::SessionClose(_) => ServerOp::SessionClose,
            Self::Error(_) => ServerOp::Error,
        }
    }

    /// The JSON text `{"op": ..., "d": {...}}` of one text frame.
    pub fn to_json(&self) -> String {
        let d = match self {
            Self::Hello(m) => m.to_value(),
            Self::Ready(m) => m.to_value(),
            Self::HeartbeatAck(m) => m.to_value(),
            Self::SessionOpen(m) => m.to_value(),
            Self::SessionClose(m) => m.to_value(),
            Self::Error(m) => m.to_value(),
        };
        envelope_json(self.op().as_str(), d)
    }
}

// ---------------------------------------------------------------------------
// Host to server.

/// `identify`: the login of the host service, on the control connection and
/// (with [`Identify::check_data_shape`]) on a data connection.
///
/// Both optional members are decoded as given; which of them a connection needs
/// is [`Identify::check_control_shape`] or [`Identify::check_data_shape`], step 3
/// of the server's order, after the protocol version (step 2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identify {
    /// The protocol version the host picked from `hello.protocol_versions`.
    pub protocol_version: u32,
    /// The host.
    pub host_id: Uuid,
    /// The compact JWS `host-auth+jwt` over the challenge; parsing it is step 4.
    pub proof: String,
    /// The version of the host service (SemVer 2.0.0, checked in step 3).
    pub host_version: String,
    /// The sessions the host service still knows (6.2); control connection only.
    pub live_sessions: Option<Vec<Uuid>>,
    /// The session of a data connection.
    pub session_id: Option<Uuid>,
}

impl Identify {
    /// The members of `d`.
    pub const MEMBERS: &'static [&'static str] = &[
        "protocol_version",
        "host_id",
        "proof",
        "host_version",
        "live_sessions",
        "session_id",
    ];

    /// Decodes `d` strictly.
    pub fn decode(d: Member<'_>) -> Result<Self, MessageError> {
        let d = d.into_object(Self::MEMBERS)?;
        let live_sessions = match d.opt_member("live_sessions") {
            Some(list) => Some(
                list.into_array()?
                    .iter()
                    .map(|m| m.as_uuid())
                    .collect::<Result<_, _>>()?,
            ),
            None => None,
        };
        Ok(Self {
            protocol_version: d.uint("protocol_version")?,
            host_id: d.uuid("host_id")?,
            proof: d.str("proof")?.to_owned(),
            host_version: d.str("host_version")?.to_owned(),
            live_sessions,
            session_id: d
                .opt_member("session_id")
                .map(|m| m.as_uuid())
                .transpose()?,
        })
    }

    /// Step 3 of the control login (3.5): `live_sessions` present (empty after a
    /// restart), no `session_id`, `host_version` SemVer 2.0.0. The first broken
    /// rule in that order; each closes with 4002.
    pub fn check_control_shape(&self) -> Result<(), MessageError> {
        if self.live_sessions.is_none() {
            return Err(MessageError::LiveSessionsMissing);
        }
        if self.session_id.is_some() {
            return Err(MessageError::SessionIdNotAllowed);
        }
        if !is_valid_host_version(&self.host_version) {
            return Err(MessageError::HostVersionInvalid);
        }
        Ok(())
    }

    /// The same step on the data connection of `path_session_id`: no
    /// `live_sessions`, `session_id` present and equal to the session of the
    /// path, `host_version` SemVer 2.0.0. Each refusal closes with 4002.
    pub fn check_data_shape(&self, path_session_id: Uuid) -> Result<(), MessageError> {
        if self.live_sessions.is_some() {
            return Err(MessageError::LiveSessionsNotAllowed);
        }
        match self.session_id {
            None => return Err(MessageError::SessionIdMissing),
            Some(id) if id != path_session_id => return Err(MessageError::SessionIdMismatch),
            Some(_) => {}
        }
        if !is_valid_host_version(&self.host_version) {
            return Err(MessageError::HostVersionInvalid);
        }
        Ok(())
    }

    /// `d` as a JSON value.
    pub fn to_value(&self) -> Value {
        let mut map = Map::new();
        map.insert("protocol_version".into(), self.protocol_version.into());
        map.insert("host_id".into(), uuid_value(&self.host_id));
        map.insert("proof".into(), self.proof.as_str().into());
        map.insert("host_version".into(), self.host_version.as_str().into());
        if let Some(ids) = &self.live_sessions {
            map.insert("live_sessions".into(), ids.iter().map(uuid_value).collect());
        }
        if let Some(id) = &self.session_id {
            map.insert("session_id".into(), uuid_value(id));
        }
        Value::Object(map)
    }
}

/// `heartbeat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Heartbeat {
    /// Sessions with a live PTY; informational, changes nothing on the server.
    pub active_sessions: u32,
}

impl Heartbeat {
    /// The members of `d`.
    pub const MEMBERS: &'static [&'static str] = &["active_sessions"];

    /// Decodes `d` strictly.
    pub fn decode(d: Member<'_>) -> Result<Self, MessageError> {
        let d = d.into_object(Self::MEMBERS)?;
        Ok(Self {
            active_sessions: d.uint("active_sessions")?,
        })
    }

    /// `d` as a JSON value.
    pub fn to_value(&self) -> Value {
        let mut map = Map::new();
        map.insert("active_sessions".into(), self.active_sessions.into());
        Value::Object(map)
    }
}

/// `session.started`: the PTY of an opening runs (6.1 step 7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionStarted {
    /// The session.
    pub session_id: Uuid,
}

impl SessionStarted {
    /// The members of `d`.
    pub const MEMBERS: &'static [&'static str] = &["session_id"];

    /// Decodes `d` strictly.
    pub fn decode(d: Member<'_>) -> Result<Self, MessageError> {
        let d = d.into_object(Self::MEMBERS)?;
        Ok(Self {
            session_id: d.uuid("session_id")?,
        })
    }

    /// `d` as a JSON value.
    pub fn to_value(&self) -> Value {
        let mut map = Map::new();
        map.insert("session_id".into(), uuid_value(&self.session_id));
        Value::Object(map)
    }
}

/// `session.ended`: the host service ended a session.
///
/// Decoding accepts every known `close_reason` and `close_detail` (an unknown
/// string is a [`MessageError`]); whether this host may end a session so is
/// [`SessionEnded::check_host_may_report`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionEnded {
    /// The session.
    pub session_id: Uuid,
    /// Why.
    pub close_reason: CloseReason,
    /// The detail of `open_failed` and `host_policy_violation`.
    pub close_detail: Option<CloseDetail>,
    /// The exit code of the process, only with `process_exited`.
    pub exit_code: Option<i32>,
}

impl SessionEnded {
    /// The members of `d`.
    pub const MEMBERS: &'static [&'static str] =
        &["session_id", "close_reason", "close_detail", "exit_code"];

    /// Decodes `d` strictly.
    pub fn decode(d: Member<'_>) -> Result<Self, MessageError> {
        let d = d.into_object(Self::MEMBERS)?;
        let close_detail = d
            .opt_member("close_detail")
            .map(|m| closed(m, |t| CloseDetail::parse(t).ok()))
            .transpose()?;
        let exit_code = match d.opt_member("exit_code") {
            Some(m) => Some(i32::try_from(m.as_i64()?).map_err(|_| m.invalid())?),
            None => None,
        };
        Ok(Self {
            session_id: d.uuid("session_id")?,
            close_reason: close_reason(d.member("close_reason")?)?,
            close_detail,
            exit_code,
        })
    }

    /// Whether a host may report this end (3.5 "Session reports"): the reason is
    /// one of `client_closed`, `process_exited`, `idle_timeout`, `detach_expired`,
    /// `open_failed`, `host_policy_violation`; the detail follows
    /// [`codes::check_close_pair`]; `exit_code` only with `process_exited` (which
    /// may also come without one, 6.2 "Broken channel to a helper"). The first
    /// broken rule in that order.
    pub fn check_host_may_report(&self) -> Result<(), SessionEndedError> {
        if !self.close_reason.host_may_report() {
            return Err(SessionEndedError::ReasonNotFromHost);
        }
        codes::check_close_pair(self.close_reason, self.close_detail)?;
        if self.exit_code.is_some() && self.close_reason != CloseReason::ProcessExited {
            return Err(SessionEndedError::ExitCodeNotAllowed);
        }
        Ok(())
    }

    /// `d` as a JSON value.
    pub fn to_value(&self) -> Value {
        let mut map = Map::new();
        map.insert("session_id".into(), uuid_value(&self.session_id));
        map.insert("close_reason".into(), self.close_reason.as_str().into());
        if let Some(detail) = self.close_detail {
            map.insert("close_detail".into(), detail.as_str().into());
        }
        if let Some(code) = self.exit_code {
            map.insert("exit_code".into(), code.into());
        }
        Value::Object(map)
    }
}

/// A message from the host service to the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostMessage {
    /// `identify`.
    Identify(Identify),
    /// `report`.
    Report(Report),
    /// `heartbeat`.
    Heartbeat(Heartbeat),
    /// `session.started`.
    SessionStarted(SessionStarted),
    /// `session.ended`.
    SessionEnded(SessionEnded),
}

impl HostMessage {
    /// Decodes one text frame of at most `max_len` bytes (`sync.ws_max_frame_bytes`).
    pub fn decode(bytes: &[u8], max_len: usize) -> Result<Self, MessageError> {
        let value = json::parse(bytes, max_len)?;
        let (op, d) = envelope(&value)?;
        let Some(op) = HostOp::parse(op) else {
            return Err(match ServerOp::parse(op) {
                Some(_) => MessageError::WrongDirection,
                None => MessageError::UnknownOp,
            });
        };
        Ok(match op {
            HostOp::Identify => Self::Identify(Identify::decode(d)?),
            HostOp::Report => Self::Report(Report::decode(d)?),
            HostOp::Heartbeat => Self::Heartbeat(Heartbeat::decode(d)?),
            HostOp::SessionStarted => Self::SessionStarted(SessionStarted::decode(d)?),
            HostOp::SessionEnded => Self::SessionEnded(SessionEnded::decode(d)?),
        })
    }

    /// The op.
    pub const fn op(&self) -> HostOp {
        match self {
            Self::Identify(_) => HostOp::Identify,
            Self::Report(_) => HostOp::Report,
            Self::Heartbeat(_) => HostOp::Heartbeat,
            Self::SessionStarted(_) => HostOp::SessionStarted,
            Self::SessionEnded(_) => HostOp::SessionEnded,
        }
    }

    /// The JSON text `{"op": ..., "d": {...}}` of one text frame.
    pub fn to_json(&self) -> String {
        let d = match self {
            Self::Identify(m) => m.to_value(),
            Self::Report(m) => m.to_value(),
            Self::Heartbeat(m) => m.to_value(),
            Self::SessionStarted(m) => m.to_value(),
            Self::SessionEnded(m) => m.to_value(),
        };
        envelope_json(self.op().as_str(), d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::{Check, DoctorEntry};
    use crate::json::JsonType;
    use crate::jwk::{Ed25519PublicJwk, JwksKey};
    use crate::report::{FieldErrorCode, ProfileKind, ReportedProfile, ReportedSessionUser};

    const MAX: usize = 64 * 1024;
    const SID: &str = "0192f5c4-7d3a-7b2e-9f00-1234567890ab";
    const HID: &str = "0192f5c4-0000-7000-8000-000000000001";

    fn sid() -> Uuid {
        Uuid::parse_str(SID).unwrap()
    }

    fn hid() -> Uuid {
        Uuid::parse_str(HID).unwrap()
    }

    /// The Ed25519 public key of RFC 8032 test 1.
    fn jwks() -> Jwks {
        let raw: [u8; 32] =
            b64::decode_array("11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo").unwrap();
        Jwks::new(vec![JwksKey::from_jwk(
            Ed25519PublicJwk::from_raw(&raw).unwrap(),
        )])
        .unwrap()
    }

    fn hello() -> Hello {
        Hello {
            protocol_versions: vec![1, 2],
            challenge: [7; 32],
            server_time: 1_764_000_000_000,
            heartbeat_interval_ms: 20_000,
            heartbeat_miss_limit: 3,
            jwks: jwks(),
        }
    }

    fn identify() -> Identify {
        Identify {
            protocol_version: 1,
            host_id: hid(),
            proof: "aGVhZGVy.cGF5bG9hZA.c2ln".into(),
            host_version: "1.4.0-rc.1+build.7".into(),
            live_sessions: Some(vec![sid()]),
            session_id: None,
        }
    }

    fn report() -> Report {
        Report {
            platform: "linux".into(),
            os_version: "Debian 12".into(),
            profiles: vec![ReportedProfile {
                name: "shell".into(),
                display_name: "Shell".into(),
                kind: ProfileKind::Shell,
            }],
            session_users: vec![ReportedSessionUser {
                name: "alice".into(),
                workdirs: vec![],
            }],
            doctor: Check::ALL.into_iter().map(DoctorEntry::passed).collect(),
            is_server_host: false,
            require_local_confirm: false,
        }
    }

    fn server_messages() -> Vec<ServerMessage> {
        vec![
            ServerMessage::Hello(hello()),
            ServerMessage::Hello(Hello {
                protocol_versions: (1..=16).collect(),
                jwks: Jwks::default(),
                heartbeat_miss_limit: 0,
                ..hello()
            }),
            ServerMessage::Ready(Ready {
                host_id: hid(),
                state: HostState::Active,
                llm_credentials: LlmCredentials::Organization,
            }),
            ServerMessage::HeartbeatAck(HeartbeatAck {
                server_time: 5,
                jwks: None,
            }),
            ServerMessage::HeartbeatAck(HeartbeatAck {
                server_time: u64::MAX,
                jwks: Some(jwks()),
            }),
            ServerMessage::SessionOpen(SessionOpen {
                session_id: sid(),
                expires_at: 1_764_000_020_000,
            }),
            ServerMessage::SessionClose(SessionClose {
                session_id: sid(),
                close_reason: CloseReason::AccessRevoked,
            }),
            ServerMessage::Error(OpError {
                op: HostOp::SessionEnded,
                code: ErrorCode::NotFound,
                session_id: Some(sid()),
                errors: None,
            }),
            ServerMessage::Error(OpError {
                op: HostOp::Report,
                code: ErrorCode::ValidationFailed,
                session_id: None,
                errors: Some(vec![
                    FieldError::new("/session_users/0/name", FieldErrorCode::InvalidFormat),
                    FieldError {
                        pointer: "/doctor".into(),
                        code: FieldErrorCode::Required,
                        check: Some(Check::Hd4StateDir),
                    },
                ]),
            }),
        ]
    }

    fn host_messages() -> Vec<HostMessage> {
        vec![
            HostMessage::Identify(identify()),
            HostMessage::Identify(Identify {
                live_sessions: None,
                session_id: Some(sid()),
                ..identify()
            }),
            HostMessage::Report(report()),
            HostMessage::Heartbeat(Heartbeat { active_sessions: 3 }),
            HostMessage::SessionStarted(SessionStarted { session_id: sid() }),
            HostMessage::SessionEnded(SessionEnded {
                session_id: sid(),
                close_reason: CloseReason::ProcessExited,
                close_detail: None,
                exit_code: Some(-1),
            }),
            HostMessage::SessionEnded(SessionEnded {
                session_id: sid(),
                close_reason: CloseReason::OpenFailed,
                close_detail: Some(CloseDetail::LocalConfirmDenied),
                exit_code: None,
            }),
        ]
    }

    #[test]
    fn every_message_round_trips() {
        for message in server_messages() {
            let text = message.to_json();
            assert_eq!(
                ServerMessage::decode(text.as_bytes(), MAX),
                Ok(message),
                "{text}"
            );
        }
        for message in host_messages() {
            let text = message.to_json();
            assert_eq!(
                HostMessage::decode(text.as_bytes(), MAX),
                Ok(message),
                "{text}"
            );
        }
    }

    #[test]
    fn wire_forms_are_exact() {
        // The envelope is written by hand, `op` first; `d` is compared as a value,
        // so the test does not depend on serde_json's member order.
        let parse = |text: &str| -> (String, Value) {
            let value: Value = serde_json::from_str(text).unwrap();
            let prefix = format!(r#"{{"op":{},"d":"#, value["op"]);
            assert!(text.starts_with(&prefix), "{text}");
            (value["op"].as_str().unwrap().to_owned(), value["d"].clone())
        };
        let open = ServerMessage::SessionOpen(SessionOpen {
            session_id: sid(),
            expires_at: 9,
        });
        assert_eq!(
            parse(&open.to_json()),
            (
                "session.open".to_owned(),
                serde_json::json!({
                    "session_id": SID,
                    "stream_path": format!("/api/v1/hosts/sessions/{SID}/stream"),
                    "expires_at": 9
                })
            )
        );
        assert_eq!(
            HostMessage::Heartbeat(Heartbeat { active_sessions: 0 }).to_json(),
            r#"{"op":"heartbeat","d":{"active_sessions":0}}"#
        );
        let ready = ServerMessage::Ready(Ready {
            host_id: hid(),
            state: HostState::Confirming,
            llm_credentials: LlmCredentials::None,
        });
        assert_eq!(
            parse(&ready.to_json()),
            (
                "ready".to_owned(),
                serde_json::json!({"host_id": HID, "state": "confirming", "llm_credentials": "none"})
            )
        );
        let (op, d) = parse(&ServerMessage::Hello(hello()).to_json());
        assert_eq!(op, "hello");
        assert_eq!(
            d,
            serde_json::json!({
                "protocol_versions": [1, 2],
                "challenge": "BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc",
                "server_time": 1_764_000_000_000_u64,
                "heartbeat_interval_ms": 20_000,
                "heartbeat_miss_limit": 3,
                "jwks": jwks().to_value()
            })
        );
        let (op, d) = parse(
            &HostMessage::SessionEnded(SessionEnded {
                session_id: sid(),
                close_reason: CloseReason::HostPolicyViolation,
                close_detail: Some(CloseDetail::SharedLocation),
                exit_code: None,
            })
            .to_json(),
        );
        assert_eq!(op, "session.ended");
        assert_eq!(
            d,
            serde_json::json!({
                "session_id": SID,
                "close_reason": "host_policy_violation",
                "close_detail": "shared_location"
            })
        );
    }

    fn server_err(text: &str) -> MessageError {
        ServerMessage::decode(text.as_bytes(), MAX).unwrap_err()
    }

    fn host_err(text: &str) -> MessageError {
        HostMessage::decode(text.as_bytes(), MAX).unwrap_err()
    }

    fn invalid(pointer: &str) -> MessageError {
        MessageError::Json(JsonError::InvalidValue {
            pointer: pointer.into(),
        })
    }

    fn missing(pointer: &str) -> MessageError {
        MessageError::Json(JsonError::MissingMember {
            pointer: pointer.into(),
        })
    }

    fn unknown(pointer: &str) -> MessageError {
        MessageError::Json(JsonError::UnknownMember {
            pointer: pointer.into(),
        })
    }

    fn wrong(pointer: &str, expected: JsonType) -> MessageError {
        MessageError::Json(JsonError::WrongType {
            pointer: pointer.into(),
            expected,
        })
    }

    /// `message` as JSON with `d` changed by `change`.
    fn edit<M>(message: M, change: impl FnOnce(&mut Map<String, Value>)) -> String
    where
        M: Fn() -> String,
    {
        let mut value: Value = serde_json::from_str(&message()).unwrap();
        change(value["d"].as_object_mut().unwrap());
        value.to_string()
    }

    #[test]
    fn envelope_refusals() {
        let cases: Vec<(&str, MessageError)> = vec![
            ("", MessageError::Json(JsonError::Syntax)),
            (
                "{\"op\":\"heartbeat\"",
                MessageError::Json(JsonError::Syntax),
            ),
            (
                r#"{"op":"heartbeat","d":{}} x"#,
                MessageError::Json(JsonError::Syntax),
            ),
            ("[]", wrong("", JsonType::Object)),
            (r#"{"d":{}}"#, missing("/op")),
            (r#"{"op":"heartbeat"}"#, missing("/d")),
            (r#"{"op":7,"d":{}}"#, wrong("/op", JsonType::String)),
            (
                r#"{"op":"heartbeat","d":[]}"#,
                wrong("/d", JsonType::Object),
            ),
            (
                r#"{"op":"heartbeat","d":"x"}"#,
                wrong("/d", JsonType::Object),
            ),
            (
                r#"{"op":"heartbeat","d":{"active_sessions":1},"id":1}"#,
                unknown("/id"),
            ),
            (
                r#"{"op":"heartbeat","op":"heartbeat","d":{}}"#,
                MessageError::Json(JsonError::DuplicateMember {
                    pointer: "/op".into(),
                }),
            ),
            (
                r#"{"op":"heartbeat","d":{"active_sessions":null}}"#,
                MessageError::Json(JsonError::NullMember {
                    pointer: "/d/active_sessions".into(),
                }),
            ),
            (r#"{"op":"Heartbeat","d":{}}"#, MessageError::UnknownOp),
            (r#"{"op":"","d":{}}"#, MessageError::UnknownOp),
            (r#"{"op":"replay","d":{}}"#, MessageError::UnknownOp),
            (r#"{"op":"hello","d":{}}"#, MessageError::WrongDirection),
            (
                r#"{"op":"session.open","d":{}}"#,
                MessageError::WrongDirection,
            ),
            (r#"{"op":"error","d":{}}"#, MessageError::WrongDirection),
        ];
        for (text, want) in &cases {
            assert_eq!(&host_err(text), want, "{text}");
        }
        assert_eq!(
            server_err(r#"{"op":"identify","d":{}}"#),
            MessageError::WrongDirection
        );
        assert_eq!(
            server_err(r#"{"op":"report","d":{}}"#),
            MessageError::WrongDirection
        );
        assert_eq!(
            server_err(r#"{"op":"ping","d":{}}"#),
            MessageError::UnknownOp
        );
        assert_eq!(
            HostMessage::decode(b"{\"op\":\"heartbeat\",\"d\":{\"x\":\"\xff\"}}", MAX),
            Err(MessageError::Json(JsonError::InvalidUtf8))
        );
    }

    #[test]
    fn every_refusal_closes_with_4002_and_too_large_says_so() {
        let text = HostMessage::Heartbeat(Heartbeat { active_sessions: 1 }).to_json();
        let too_large = HostMessage::decode(text.as_bytes(), text.len() - 1).unwrap_err();
        assert!(matches!(
            too_large,
            MessageError::Json(JsonError::TooLarge { .. })
        ));
        assert_eq!(too_large.close_reason_text(), Some("frame_too_large"));
        assert!(HostMessage::decode(text.as_bytes(), text.len()).is_ok());
        let all = [
            too_large,
            MessageError::BinaryFrame,
            MessageError::Json(JsonError::Syntax),
            MessageError::Jwks(JwkError::EmptyKid {
                pointer: "/d/jwks/keys/0/kid".into(),
            }),
            MessageError::UnknownOp,
            MessageError::WrongDirection,
            MessageError::LiveSessionsMissing,
            MessageError::SessionIdNotAllowed,
            MessageError::HostVersionInvalid,
            MessageError::LiveSessionsNotAllowed,
            MessageError::SessionIdMissing,
            MessageError::SessionIdMismatch,
        ];
        for (i, error) in all.iter().enumerate() {
            assert_eq!(error.close_code(), CloseCode::InvalidMessage);
            assert_eq!(error.close_code().as_u16(), 4002);
            if i > 0 {
                assert_eq!(error.close_reason_text(), None, "{error}");
            }
        }
    }

    #[test]
    fn server_message_refusals() {
        let h = || ServerMessage::Hello(hello()).to_json();
        let ack = || {
            ServerMessage::HeartbeatAck(HeartbeatAck {
                server_time: 1,
                jwks: None,
            })
            .to_json()
        };
        let ready = || {
            ServerMessage::Ready(Ready {
                host_id: hid(),
                state: HostState::Active,
                llm_credentials: LlmCredentials::Personal,
            })
            .to_json()
        };
        let open = || {
            ServerMessage::SessionOpen(SessionOpen {
                session_id: sid(),
                expires_at: 1,
            })
            .to_json()
        };
        let close = || {
            ServerMessage::SessionClose(SessionClose {
                session_id: sid(),
                close_reason: CloseReason::Logout,
            })
            .to_json()
        };
        let error = || {
            ServerMessage::Error(OpError {
                op: HostOp::Report,
                code: ErrorCode::ValidationFailed,
                session_id: None,
                errors: None,
            })
            .to_json()
        };
        let other_path = format!("/api/v1/hosts/sessions/{SID}/stream/../x");
        let upper_path = format!("/api/v1/hosts/sessions/{}/stream", SID.to_uppercase());
        let cases: Vec<(&str, String, MessageError)> = vec![
            (
                "hello: extra member",
                edit(h, |d| {
                    d.insert("x".into(), 1.into());
                }),
                unknown("/d/x"),
            ),
            (
                "hello: no jwks",
                edit(h, |d| {
                    d.remove("jwks");
                }),
                missing("/d/jwks"),
            ),
            (
                "hello: no versions",
                edit(h, |d| {
                    d.insert("protocol_versions".into(), Value::Array(vec![]));
                }),
                invalid("/d/protocol_versions"),
            ),
            (
                "hello: 17 versions",
                edit(h, |d| {
                    d.insert("protocol_versions".into(), (1..=17).collect());
                }),
                invalid("/d/protocol_versions"),
            ),
            (
                "hello: version 0",
                edit(h, |d| {
                    d.insert("protocol_versions".into(), vec![1, 0].into());
                }),
                invalid("/d/protocol_versions/1"),
            ),
            (
                "hello: version over u32",
                edit(h, |d| {
                    d.insert("protocol_versions".into(), vec![1u64 << 32].into());
                }),
                invalid("/d/protocol_versions/0"),
            ),
            (
                "hello: version negative",
                edit(h, |d| {
                    d.insert("protocol_versions".into(), vec![-1].into());
                }),
                invalid("/d/protocol_versions/0"),
            ),
            (
                "hello: version a string",
                edit(h, |d| {
                    d.insert("protocol_versions".into(), vec!["1"].into());
                }),
                wrong("/d/protocol_versions/0", JsonType::Integer),
            ),
            (
                "hello: challenge 31 bytes",
                edit(h, |d| {
                    d.insert("challenge".into(), b64::encode(&[1; 31]).into());
                }),
                invalid("/d/challenge"),
            ),
            (
                "hello: challenge padded",
                edit(h, |d| {
                    d.insert(
                        "challenge".into(),
                        format!("{}=", b64::encode(&[1; 32])).into(),
                    );
                }),
                invalid("/d/challenge"),
            ),
            (
                "hello: challenge standard alphabet",
                edit(h, |d| {
                    d.insert(
                        "challenge".into(),
                        "+/+/+/+/+/+/+/+/+/+/+/+/+/+/+/+/+/+/+/+/+/+".into(),
                    );
                }),
                invalid("/d/challenge"),
            ),
            (
                "hello: interval 0",
                edit(h, |d| {
                    d.insert("heartbeat_interval_ms".into(), 0.into());
                }),
                invalid("/d/heartbeat_interval_ms"),
            ),
            (
                "hello: interval negative",
                edit(h, |d| {
                    d.insert("heartbeat_interval_ms".into(), (-5).into());
                }),
                invalid("/d/heartbeat_interval_ms"),
            ),
            (
                "hello: interval fraction",
                edit(h, |d| {
                    d.insert("heartbeat_interval_ms".into(), 1.5.into());
                }),
                wrong("/d/heartbeat_interval_ms", JsonType::Integer),
            ),
            (
                "hello: miss limit over u32",
                edit(h, |d| {
                    d.insert("heartbeat_miss_limit".into(), (1u64 << 32).into());
                }),
                invalid("/d/heartbeat_miss_limit"),
            ),
            (
                "hello: server_time negative",
                edit(h, |d| {
                    d.insert("server_time".into(), (-1).into());
                }),
                invalid("/d/server_time"),
            ),
            (
                "hello: server_time a string",
                edit(h, |d| {
                    d.insert("server_time".into(), "1".into());
                }),
                wrong("/d/server_time", JsonType::Integer),
            ),
            (
                "hello: jwks with a private key",
                edit(h, |d| {
                    d["jwks"]["keys"][0]["d"] = "AAAA".into();
                }),
                MessageError::Jwks(JwkError::UnknownMember {
                    pointer: "/d/jwks/keys/0/d".into(),
                }),
            ),
            (
                "hello: jwks not an object",
                edit(h, |d| {
                    d.insert("jwks".into(), Value::Array(vec![]));
                }),
                MessageError::Jwks(JwkError::WrongType {
                    pointer: "/d/jwks".into(),
                    expected: JsonType::Object,
                }),
            ),
            (
                "ready: unknown state",
                edit(ready, |d| {
                    d.insert("state".into(), "Active".into());
                }),
                invalid("/d/state"),
            ),
            (
                "ready: unknown llm_credentials",
                edit(ready, |d| {
                    d.insert("llm_credentials".into(), "subscription".into());
                }),
                invalid("/d/llm_credentials"),
            ),
            (
                "ready: host_id not a UUID",
                edit(ready, |d| {
                    d.insert("host_id".into(), "host-1".into());
                }),
                invalid("/d/host_id"),
            ),
            (
                "ready: host_id in braces",
                edit(ready, |d| {
                    d.insert("host_id".into(), format!("{{{HID}}}").into());
                }),
                invalid("/d/host_id"),
            ),
            (
                "ready: no state",
                edit(ready, |d| {
                    d.remove("state");
                }),
                missing("/d/state"),
            ),
            (
                "heartbeat_ack: jwks empty kid",
                edit(ack, |d| {
                    d.insert("jwks".into(), serde_json::json!({"keys":[{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo","kid":""}]}));
                }),
                MessageError::Jwks(JwkError::EmptyKid {
                    pointer: "/d/jwks/keys/0/kid".into(),
                }),
            ),
            (
                "heartbeat_ack: extra",
                edit(ack, |d| {
                    d.insert("active_sessions".into(), 1.into());
                }),
                unknown("/d/active_sessions"),
            ),
            (
                "session.open: other path",
                edit(open, |d| {
                    d.insert("stream_path".into(), other_path.clone().into());
                }),
                invalid("/d/stream_path"),
            ),
            (
                "session.open: upper-case path",
                edit(open, |d| {
                    d.insert("stream_path".into(), upper_path.clone().into());
                }),
                invalid("/d/stream_path"),
            ),
            (
                "session.open: absolute URL",
                edit(open, |d| {
                    d.insert(
                        "stream_path".into(),
                        format!("https://evil.example/api/v1/hosts/sessions/{SID}/stream").into(),
                    );
                }),
                invalid("/d/stream_path"),
            ),
            (
                "session.open: path of another session",
                edit(open, |d| {
                    d.insert("session_id".into(), HID.into());
                }),
                invalid("/d/stream_path"),
            ),
            (
                "session.open: no expires_at",
                edit(open, |d| {
                    d.remove("expires_at");
                }),
                missing("/d/expires_at"),
            ),
            (
                "session.close: unknown reason",
                edit(close, |d| {
                    d.insert("close_reason".into(), "LOGOUT".into());
                }),
                invalid("/d/close_reason"),
            ),
            (
                "session.close: a detail",
                edit(close, |d| {
                    d.insert("close_detail".into(), "pty_failed".into());
                }),
                unknown("/d/close_detail"),
            ),
            (
                "error: unknown code",
                edit(error, |d| {
                    d.insert("code".into(), "conflict".into());
                }),
                invalid("/d/code"),
            ),
            (
                "error: op of the server",
                edit(error, |d| {
                    d.insert("op".into(), "hello".into());
                }),
                invalid("/d/op"),
            ),
            (
                "error: errors not an array",
                edit(error, |d| {
                    d.insert("errors".into(), "x".into());
                }),
                wrong("/d/errors", JsonType::Array),
            ),
            (
                "error: finding with a value",
                edit(error, |d| {
                    d.insert(
                        "errors".into(),
                        serde_json::json!([{"pointer":"/a","code":"required","value":"secret"}]),
                    );
                }),
                unknown("/d/errors/0/value"),
            ),
            (
                "error: session_id not a UUID",
                edit(error, |d| {
                    d.insert("session_id".into(), "1".into());
                }),
                invalid("/d/session_id"),
            ),
        ];
        for (name, text, want) in &cases {
            assert_eq!(&server_err(text), want, "{name}: {text}");
        }
    }

    #[test]
    fn host_message_refusals() {
        let id = || HostMessage::Identify(identify()).to_json();
        let hb = || HostMessage::Heartbeat(Heartbeat { active_sessions: 1 }).to_json();
        let started =
            || HostMessage::SessionStarted(SessionStarted { session_id: sid() }).to_json();
        let ended = || {
            HostMessage::SessionEnded(SessionEnded {
                session_id: sid(),
                close_reason: CloseReason::ClientClosed,
                close_detail: None,
                exit_code: None,
            })
            .to_json()
        };
        let rep = || HostMessage::Report(report()).to_json();
        let cases: Vec<(&str, String, MessageError)> = vec![
            (
                "identify: no proof",
                edit(id, |d| {
                    d.remove("proof");
                }),
                missing("/d/proof"),
            ),
            (
                "identify: no host_version",
                edit(id, |d| {
                    d.remove("host_version");
                }),
                missing("/d/host_version"),
            ),
            (
                "identify: proof an object",
                edit(id, |d| {
                    d.insert("proof".into(), Value::Object(Map::new()));
                }),
                wrong("/d/proof", JsonType::String),
            ),
            (
                "identify: protocol_version negative",
                edit(id, |d| {
                    d.insert("protocol_version".into(), (-1).into());
                }),
                invalid("/d/protocol_version"),
            ),
            (
                "identify: protocol_version over u32",
                edit(id, |d| {
                    d.insert("protocol_version".into(), (1u64 << 32).into());
                }),
                invalid("/d/protocol_version"),
            ),
            (
                "identify: live_sessions not an array",
                edit(id, |d| {
                    d.insert("live_sessions".into(), SID.into());
                }),
                wrong("/d/live_sessions", JsonType::Array),
            ),
            (
                "identify: live_sessions bad UUID",
                edit(id, |d| {
                    d.insert("live_sessions".into(), vec![SID, "x"].into());
                }),
                invalid("/d/live_sessions/1"),
            ),
            (
                "identify: session_id bad UUID",
                edit(id, |d| {
                    d.insert(
                        "session_id".into(),
                        "0192f5c47d3a7b2e9f001234567890ab".into(),
                    );
                }),
                invalid("/d/session_id"),
            ),
            (
                "identify: extra member",
                edit(id, |d| {
                    d.insert("iat".into(), 1.into());
                }),
                unknown("/d/iat"),
            ),
            (
                "report: unknown member",
                edit(rep, |d| {
                    d.insert("host_version".into(), "1.0.0".into());
                }),
                unknown("/d/host_version"),
            ),
            (
                "report: doctor entry",
                edit(rep, |d| {
                    d["doctor"][2]["check"] = "hd3".into();
                }),
                invalid("/d/doctor/2/check"),
            ),
            (
                "report: no doctor",
                edit(rep, |d| {
                    d.remove("doctor");
                }),
                missing("/d/doctor"),
            ),
            (
                "heartbeat: negative",
                edit(hb, |d| {
                    d.insert("active_sessions".into(), (-1).into());
                }),
                invalid("/d/active_sessions"),
            ),
            (
                "heartbeat: missing",
                edit(hb, |d| {
                    d.remove("active_sessions");
                }),
                missing("/d/active_sessions"),
            ),
            (
                "heartbeat: bool",
                edit(hb, |d| {
                    d.insert("active_sessions".into(), true.into());
                }),
                wrong("/d/active_sessions", JsonType::Integer),
            ),
            (
                "session.started: missing id",
                edit(started, |d| {
                    d.remove("session_id");
                }),
                missing("/d/session_id"),
            ),
            (
                "session.started: extra",
                edit(started, |d| {
                    d.insert("exit_code".into(), 0.into());
                }),
                unknown("/d/exit_code"),
            ),
            (
                "session.ended: unknown reason",
                edit(ended, |d| {
                    d.insert("close_reason".into(), "crashed".into());
                }),
                invalid("/d/close_reason"),
            ),
            (
                "session.ended: a detail as reason",
                edit(ended, |d| {
                    d.insert("close_reason".into(), "pty_failed".into());
                }),
                invalid("/d/close_reason"),
            ),
            (
                "session.ended: unknown detail",
                edit(ended, |d| {
                    d.insert("close_detail".into(), "oops".into());
                }),
                invalid("/d/close_detail"),
            ),
            (
                "session.ended: exit_code over i32",
                edit(ended, |d| {
                    d.insert("exit_code".into(), (1i64 << 31).into());
                }),
                invalid("/d/exit_code"),
            ),
            (
                "session.ended: exit_code under i32",
                edit(ended, |d| {
                    d.insert("exit_code".into(), (-(1i64 << 31) - 1).into());
                }),
                invalid("/d/exit_code"),
            ),
            (
                "session.ended: exit_code over i64",
                edit(ended, |d| {
                    d.insert("exit_code".into(), u64::MAX.into());
                }),
                invalid("/d/exit_code"),
            ),
            (
                "session.ended: exit_code a string",
                edit(ended, |d| {
                    d.insert("exit_code".into(), "0".into());
                }),
                wrong("/d/exit_code", JsonType::Integer),
            ),
            (
                "session.ended: no reason",
                edit(ended, |d| {
                    d.remove("close_reason");
                }),
                missing("/d/close_reason"),
            ),
        ];
        for (name, text, want) in &cases {
            assert_eq!(&host_err(text), want, "{name}: {text}");
        }
        // The extreme exit codes decode.
        for code in [i32::MIN, i32::MAX] {
            let text = edit(ended, |d| {
                d.insert("exit_code".into(), code.into());
            });
            assert!(HostMessage::decode(text.as_bytes(), MAX).is_ok());
        }
    }

    #[test]
    fn identify_control_shape_is_step_3() {
        let ok = identify();
        assert_eq!(ok.check_control_shape(), Ok(()));
        let empty = Identify {
            live_sessions: Some(vec![]),
            ..identify()
        };
        assert_eq!(empty.check_control_shape(), Ok(()));
        let cases = [
            (
                Identify {
                    live_sessions: None,
                    ..identify()
                },
                MessageError::LiveSessionsMissing,
            ),
            (
                Identify {
                    session_id: Some(sid()),
                    ..identify()
                },
                MessageError::SessionIdNotAllowed,
            ),
            (
                Identify {
                    host_version: "v1.0.0".into(),
                    ..identify()
                },
                MessageError::HostVersionInvalid,
            ),
            (
                Identify {
                    host_version: "1.0".into(),
                    ..identify()
                },
                MessageError::HostVersionInvalid,
            ),
            // The order of step 3: live_sessions first, then session_id, then the version.
            (
                Identify {
                    live_sessions: None,
                    session_id: Some(sid()),
                    host_version: "x".into(),
                    ..identify()
                },
                MessageError::LiveSessionsMissing,
            ),
            (
                Identify {
                    session_id: Some(sid()),
                    host_version: "x".into(),
                    ..identify()
                },
                MessageError::SessionIdNotAllowed,
            ),
        ];
        for (identify, want) in cases {
            assert_eq!(
                identify.check_control_shape(),
                Err(want.clone()),
                "{identify:?}"
            );
            assert_eq!(want.close_code().as_u16(), 4002);
        }
        // The shape is not a decode error: the server checks the protocol version first.
        let text = HostMessage::Identify(Identify {
            protocol_version: 99,
            live_sessions: None,
            host_version: "v9".into(),
            ..identify()
        })
        .to_json();
        assert!(HostMessage::decode(text.as_bytes(), MAX).is_ok());
    }

    #[test]
    fn identify_data_shape() {
        let data = Identify {
            live_sessions: None,
            session_id: Some(sid()),
            ..identify()
        };
        assert_eq!(data.check_data_shape(sid()), Ok(()));
        assert_eq!(
            data.check_data_shape(hid()),
            Err(MessageError::SessionIdMismatch)
        );
        assert_eq!(
            identify().check_data_shape(sid()),
            Err(MessageError::LiveSessionsNotAllowed)
        );
        assert_eq!(
            Identify {
                session_id: None,
                ..data.clone()
            }
            .check_data_shape(sid()),
            Err(MessageError::SessionIdMissing)
        );
        assert_eq!(
            Identify {
                host_version: "1.0.0 ".into(),
                ..data.clone()
            }
            .check_data_shape(sid()),
            Err(MessageError::HostVersionInvalid)
        );
    }

    fn ended(
        reason: CloseReason,
        detail: Option<CloseDetail>,
        exit_code: Option<i32>,
    ) -> SessionEnded {
        SessionEnded {
            session_id: sid(),
            close_reason: reason,
            close_detail: detail,
            exit_code,
        }
    }

    #[test]
    fn session_ended_from_a_host() {
        use CloseDetail as D;
        use CloseReason as R;
        let allowed = [
            ended(R::ClientClosed, None, None),
            ended(R::ProcessExited, None, Some(0)),
            ended(R::ProcessExited, None, Some(-9)),
            ended(R::ProcessExited, None, None),
            ended(R::IdleTimeout, None, None),
            ended(R::DetachExpired, None, None),
            ended(R::OpenFailed, Some(D::OpenTimeout), None),
            ended(R::OpenFailed, Some(D::TokenReplayed), None),
            ended(
                R::HostPolicyViolation,
                Some(D::SubscriptionLoginDetected),
                None,
            ),
            ended(R::HostPolicyViolation, Some(D::HelperUntrusted), None),
            ended(R::HostPolicyViolation, Some(D::SharedLocation), None),
        ];
        for end in allowed {
            assert_eq!(end.check_host_may_report(), Ok(()), "{end:?}");
        }
        let refused = [
            (
                ended(R::ClosedByOwner, None, None),
                SessionEndedError::ReasonNotFromHost,
            ),
            (
                ended(R::AccessRevoked, None, None),
                SessionEndedError::ReasonNotFromHost,
            ),
            (
                ended(R::HostRestarted, None, None),
                SessionEndedError::ReasonNotFromHost,
            ),
            (
                ended(R::MaxDuration, None, None),
                SessionEndedError::ReasonNotFromHost,
            ),
            (
                ended(R::I6Violation, None, Some(1)),
                SessionEndedError::ReasonNotFromHost,
            ),
            (
                ended(R::OpenFailed, None, None),
                SessionEndedError::Pair(CodeError::DetailRequired),
            ),
            (
                ended(R::HostPolicyViolation, None, None),
                SessionEndedError::Pair(CodeError::DetailRequired),
            ),
            (
                ended(R::HostPolicyViolation, Some(D::PtyFailed), None),
                SessionEndedError::Pair(CodeError::DetailNotForReason),
            ),
            (
                ended(R::ClientClosed, Some(D::PtyFailed), None),
                SessionEndedError::Pair(CodeError::DetailNotAllowed),
            ),
            (
                ended(R::ProcessExited, Some(D::PtyFailed), Some(0)),
                SessionEndedError::Pair(CodeError::DetailNotAllowed),
            ),
            (
                ended(R::IdleTimeout, None, Some(0)),
                SessionEndedError::ExitCodeNotAllowed,
            ),
            (
                ended(R::OpenFailed, Some(D::PtyFailed), Some(1)),
                SessionEndedError::ExitCodeNotAllowed,
            ),
        ];
        for (end, want) in refused {
            assert_eq!(end.check_host_may_report(), Err(want), "{end:?}");
            assert_eq!(want.error_code(), ErrorCode::ValidationFailed);
        }
        // Every reason a host may not report is refused, whatever else it carries.
        for &reason in CloseReason::ALL {
            if !reason.host_may_report() {
                assert_eq!(
                    ended(reason, None, None).check_host_may_report(),
                    Err(SessionEndedError::ReasonNotFromHost)
                );
            }
        }
    }

    #[test]
    fn wire_enums() {
        for &op in HostOp::ALL {
            assert_eq!(HostOp::parse(op.as_str()), Some(op));
            assert_eq!(ServerOp::parse(op.as_str()), None);
        }
        for &op in ServerOp::ALL {
            assert_eq!(ServerOp::parse(op.as_str()), Some(op));
            assert_eq!(HostOp::parse(op.as_str()), None);
        }
        let states: Vec<&str> = HostState::ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(
            states,
            ["pairing", "confirming", "active", "disabled", "retired"]
        );
        let llm: Vec<String> = LlmCredentials::ALL.iter().map(|s| s.to_string()).collect();
        assert_eq!(llm, ["none", "personal", "organization"]);
        let codes: Vec<&str> = ErrorCode::ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(codes, ["validation_failed", "not_found"]);
        for message in server_messages() {
            assert!(
                message
                    .to_json()
                    .contains(&format!("\"op\":\"{}\"", message.op()))
            );
        }
        for message in host_messages() {
            assert!(
                message
                    .to_json()
                    .contains(&format!("\"op\":\"{}\"", message.op()))
            );
        }
    }

    #[test]
    fn errors_carry_no_peer_values() {
        let secret = "s3cr3t-value";
        let texts = [
            format!(r#"{{"op":"{secret}","d":{{}}}}"#),
            format!(r#"{{"op":"heartbeat","d":{{"active_sessions":"{secret}"}}}}"#),
            format!(
                r#"{{"op":"session.ended","d":{{"session_id":"{SID}","close_reason":"{secret}"}}}}"#
            ),
            format!(r#"{{"op":"session.started","d":{{"session_id":"{secret}"}}}}"#),
        ];
        for text in texts {
            let error = host_err(&text);
            assert!(!format!("{error} {error:?}").contains(secret), "{error:?}");
        }
        let report_value = edit(
            || HostMessage::Report(report()).to_json(),
            |d| {
                d["doctor"][0]["code"] = secret.into();
            },
        );
        let error = host_err(&report_value);
        assert!(!format!("{error:?}").contains(secret));
    }
}
