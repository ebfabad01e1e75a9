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
//!
//! # Layout
//! - this module: the refusals ([`MessageError`], [`SessionEndedError`]) and the
//!   closed lists of wire strings (ops, host state, declaration, error code);
//! - `server`: the messages of the server ([`ServerMessage`]);
//! - `host`: the messages of the host service ([`HostMessage`]);
//! - the envelope itself is [`crate::envelope`], shared with [`crate::data`]
//!   and [`crate::stream`].

use serde_json::{Map, Value};
use uuid::Uuid;

use crate::b64;
use crate::codes::{self, CloseCode, CloseDetail, CloseReason, CodeError};
use crate::envelope::{closed, envelope, envelope_json, uuid_value};
use crate::json::{self, JsonError, Member};
use crate::jwk::{JwkError, Jwks};
use crate::report::{FieldError, Report, is_valid_host_version};

mod host;
mod server;

pub use host::*;
pub use server::*;

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

pub(crate) fn decode_jwks(member: Member<'_>) -> Result<Jwks, MessageError> {
    Jwks::from_member(member).map_err(MessageError::Jwks)
}

fn close_reason(member: Member<'_>) -> Result<CloseReason, JsonError> {
    closed(member, |t| CloseReason::parse(t).ok())
}

#[cfg(test)]
mod tests;
