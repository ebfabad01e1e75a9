//! Messages of the host data connection `/api/v1/hosts/sessions/{session_id}/stream`
//! (spec 24, sections 6.1 step 4, 6.2, 2.2 item 5 "Server values"; DESIGN 3.4
//! "Host data connection login"; asyncapi `hostData`).
//!
//! The login is two JSON text frames `{"op": ..., "d": {...}}`, decoded strictly
//! like the control connection ([`crate::control`]); after it only binary frames
//! flow, each one Noise message (not this module's concern). All times are Unix
//! time in milliseconds as JSON integers; durations carry `_ms`.
//!
//! | Direction | op | d |
//! |-----------|----|---|
//! | server to host | `hello` | `challenge`: base64url of 32 bytes; `jwks`: JWKS; `clock_leeway_ms`, `idle_timeout_ms`, `detach_grace_ms`: integers (signed); `server_time` |
//! | host to server | `identify` | as on the control connection ([`Identify`]), checked with [`Identify::check_data_shape`]: `session_id` of the path, no `live_sessions` |
//!
//! Decoding keeps the three server values signed, as they came; whether they are
//! usable is the separate [`Hello::server_values`]: a negative leeway or an idle
//! or detach value that is not positive makes the host service close the data
//! connection with 4002 (2.2 item 5, 13). Every decoding refusal is a
//! [`MessageError`] (4002), shared with the control connection.

use std::time::Duration;

use serde_json::{Map, Value};

use crate::b64;
use crate::codes::CloseCode;
use crate::control::{self, Identify, MessageError};
use crate::json::{self, Member};
use crate::jwk::Jwks;

/// The path of the data connection of a session (defined beside
/// `session.open`, which carries it).
pub use crate::control::data_stream_path as stream_path;

/// Why the server values of a data `hello` are not usable (2.2 item 5). The host
/// service closes the data connection with 4002 ([`DataError::close_code`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DataError {
    /// `clock_leeway_ms` below 0.
    #[error("clock_leeway_ms is negative")]
    NegativeClockLeeway,
    /// `idle_timeout_ms` of 0 or below.
    #[error("idle_timeout_ms is not positive")]
    IdleTimeoutNotPositive,
    /// `detach_grace_ms` of 0 or below.
    #[error("detach_grace_ms is not positive")]
    DetachGraceNotPositive,
}

impl DataError {
    /// 4002 (invalid message), for every refusal.
    pub const fn close_code(self) -> CloseCode {
        CloseCode::InvalidMessage
    }
}

/// The server values of a data connection, checked: what the host service applies
/// to the session whose handshake runs on this connection (2.2 item 5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerValues {
    /// `auth.clock_leeway`, for the checks of `exp` and `jti` (5.3); may be 0.
    pub clock_leeway: Duration,
    /// `terminal.idle_timeout` (6.3), above 0.
    pub idle_timeout: Duration,
    /// `terminal.detach_grace` (6.2), above 0.
    pub detach_grace: Duration,
}

/// `hello` of a data connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// 32 random bytes the proof signs.
    pub challenge: [u8; 32],
    /// The keys of purpose terminal.
    pub jwks: Jwks,
    /// `auth.clock_leeway` in milliseconds, as sent.
    pub clock_leeway_ms: i64,
    /// `terminal.idle_timeout` in milliseconds, as sent.
    pub idle_timeout_ms: i64,
    /// `terminal.detach_grace` in milliseconds, as sent.
    pub detach_grace_ms: i64,
    /// Unix milliseconds.
    pub server_time: u64,
}

impl Hello {
    /// The members of `d`.
    pub const MEMBERS: &'static [&'static str] = &[
        "challenge",
        "jwks",
        "clock_leeway_ms",
        "idle_timeout_ms",
        "detach_grace_ms",
        "server_time",
    ];

    /// Decodes `d` strictly; the three values stay signed.
    pub fn decode(d: Member<'_>) -> Result<Self, MessageError> {
        let d = d.into_object(Self::MEMBERS)?;
        Ok(Self {
            challenge: d.member("challenge")?.as_b64_array()?,
            jwks: control::decode_jwks(d.member("jwks")?)?,
            clock_leeway_ms: d.i64("clock_leeway_ms")?,
            idle_timeout_ms: d.i64("idle_timeout_ms")?,
            detach_grace_ms: d.i64("detach_grace_ms")?,
            server_time: d.uint("server_time")?,
        })
    }

    /// The server values if usable: leeway at least 0, idle and detach above 0;
    /// the first broken rule in that order.
    pub fn server_values(&self) -> Result<ServerValues, DataError> {
        let clock_leeway =
            u64::try_from(self.clock_leeway_ms).map_err(|_| DataError::NegativeClockLeeway)?;
        let idle_timeout =
            positive(self.idle_timeout_ms).ok_or(DataError::IdleTimeoutNotPositive)?;
        let detach_grace =
            positive(self.detach_grace_ms).ok_or(DataError::DetachGraceNotPositive)?;
        Ok(ServerValues {
            clock_leeway: Duration::from_millis(clock_leeway),
            idle_timeout: Duration::from_millis(idle_timeout),
            detach_grace: Duration::from_millis(detach_grace),
        })
    }

    /// `d` as a JSON value.
    pub fn to_value(&self) -> Value {
        let mut map = Map::new();
        map.insert("challenge".into(), b64::encode(&self.challenge).into());
        map.insert("jwks".into(), self.jwks.to_value());
        map.insert("clock_leeway_ms".into(), self.clock_leeway_ms.into());
        map.insert("idle_timeout_ms".into(), self.idle_timeout_ms.into());
        map.insert("detach_grace_ms".into(), self.detach_grace_ms.into());
        map.insert("server_time".into(), self.server_time.into());
        Value::Object(map)
    }
}

fn positive(ms: i64) -> Option<u64> {
    u64::try_from(ms).ok().filter(|&ms| ms > 0)
}

const SERVER_OPS: &[&str] = &["hello"];
const HOST_OPS: &[&str] = &["identify"];

/// The op of a data message that is not of this direction: the other direction's
/// op, or one this connection does not have (e.g. a control op).
fn refuse_op(op: &str, other_direction: &[&str]) -> MessageError {
    if other_direction.contains(&op) {
        MessageError::WrongDirection
    } else {
        MessageError::UnknownOp
    }
}

/// A message from the server to the host service on a data connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerMessage {
    /// `hello`.
    Hello(Hello),
}

impl ServerMessage {
    /// Decodes one text frame of at most `max_len` bytes.
    pub fn decode(bytes: &[u8], max_len: usize) -> Result<Self, MessageError> {
        let value = json::parse(bytes, max_len)?;
        let (op, d) = crate::envelope::envelope(&value)?;
        match op {
            "hello" => Ok(Self::Hello(Hello::decode(d)?)),
            other => Err(refuse_op(other, HOST_OPS)),
        }
    }

    /// The op.
    pub const fn op(&self) -> &'static str {
        match self {
            Self::Hello(_) => "hello",
        }
    }

    /// The JSON text `{"op": ..., "d": {...}}` of one text frame.
    pub fn to_json(&self) -> String {
        let d = match self {
            Self::Hello(m) => m.to_value(),
        };
        crate::envelope::envelope_json(self.op(), d)
    }
}

/// A message from the host service to the server on a data connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostMessage {
    /// `identify` (then [`Identify::check_data_shape`]).
    Identify(Identify),
}

impl HostMessage {
    /// Decodes one text frame of at most `max_len` bytes.
    pub fn decode(bytes: &[u8], max_len: usize) -> Result<Self, MessageError> {
        let value = json::parse(bytes, max_len)?;
        let (op, d) = crate::envelope::envelope(&value)?;
        match op {
            "identify" => Ok(Self::Identify(Identify::decode(d)?)),
            other => Err(refuse_op(other, SERVER_OPS)),
        }
    }

    /// The op.
    pub const fn op(&self) -> &'static str {
        match self {
            Self::Identify(_) => "identify",
        }
    }

    /// The JSON text `{"op": ..., "d": {...}}` of one text frame.
    pub fn to_json(&self) -> String {
        let d = match self {
            Self::Identify(m) => m.to_value(),
        };
        crate::envelope::envelope_json(self.op(), d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::{JsonError, JsonType};
    use crate::jwk::JwkError;
    use uuid::Uuid;

    const MAX: usize = 64 * 1024;
    const SID: &str = "0192f5c4-7d3a-7b2e-9f00-1234567890ab";

    fn sid() -> Uuid {
        Uuid::parse_str(SID).unwrap()
    }

    fn hello() -> Hello {
        Hello {
            challenge: [9; 32],
            jwks: Jwks::default(),
            clock_leeway_ms: 30_000,
            idle_timeout_ms: 1_800_000,
            detach_grace_ms: 900_000,
            server_time: 1_764_000_000_000,
        }
    }

    fn identify() -> Identify {
        Identify {
            protocol_version: 1,
            host_id: Uuid::parse_str("0192f5c4-0000-7000-8000-000000000001").unwrap(),
            proof: "a.b.c".into(),
            host_version: "1.0.0".into(),
            live_sessions: None,
            session_id: Some(sid()),
        }
    }

    fn edit(text: &str, change: impl FnOnce(&mut Map<String, Value>)) -> String {
        let mut value: Value = serde_json::from_str(text).unwrap();
        change(value["d"].as_object_mut().unwrap());
        value.to_string()
    }

    #[test]
    fn messages_round_trip() {
        let hellos = [
            hello(),
            Hello {
                clock_leeway_ms: -1,
                idle_timeout_ms: 0,
                detach_grace_ms: i64::MIN,
                ..hello()
            },
        ];
        for hello in hellos {
            let message = ServerMessage::Hello(hello);
            let text = message.to_json();
            assert!(text.starts_with(r#"{"op":"hello","d":{"#), "{text}");
            assert_eq!(ServerMessage::decode(text.as_bytes(), MAX), Ok(message));
        }
        let message = HostMessage::Identify(identify());
        let text = message.to_json();
        assert_eq!(HostMessage::decode(text.as_bytes(), MAX), Ok(message));
    }

    #[test]
    fn stream_path_is_the_route() {
        assert_eq!(
            stream_path(&sid()),
            format!("/api/v1/hosts/sessions/{SID}/stream")
        );
    }

    #[test]
    fn decode_refusals() {
        let h = ServerMessage::Hello(hello()).to_json();
        let id = HostMessage::Identify(identify()).to_json();
        let invalid = |p: &str| MessageError::Json(JsonError::InvalidValue { pointer: p.into() });
        let server_cases: Vec<(&str, String, MessageError)> = vec![
            (
                "leeway a fraction",
                edit(&h, |d| {
                    d.insert("clock_leeway_ms".into(), 0.5.into());
                }),
                MessageError::Json(JsonError::WrongType {
                    pointer: "/d/clock_leeway_ms".into(),
                    expected: JsonType::Integer,
                }),
            ),
            (
                "idle over i64",
                edit(&h, |d| {
                    d.insert("idle_timeout_ms".into(), u64::MAX.into());
                }),
                invalid("/d/idle_timeout_ms"),
            ),
            (
                "detach a string",
                edit(&h, |d| {
                    d.insert("detach_grace_ms".into(), "900000".into());
                }),
                MessageError::Json(JsonError::WrongType {
                    pointer: "/d/detach_grace_ms".into(),
                    expected: JsonType::Integer,
                }),
            ),
            (
                "no detach",
                edit(&h, |d| {
                    d.remove("detach_grace_ms");
                }),
                MessageError::Json(JsonError::MissingMember {
                    pointer: "/d/detach_grace_ms".into(),
                }),
            ),
            (
                "control member",
                edit(&h, |d| {
                    d.insert("heartbeat_interval_ms".into(), 1.into());
                }),
                MessageError::Json(JsonError::UnknownMember {
                    pointer: "/d/heartbeat_interval_ms".into(),
                }),
            ),
            (
                "challenge too short",
                edit(&h, |d| {
                    d.insert("challenge".into(), "AAAA".into());
                }),
                invalid("/d/challenge"),
            ),
            (
                "server_time negative",
                edit(&h, |d| {
                    d.insert("server_time".into(), (-1).into());
                }),
                invalid("/d/server_time"),
            ),
            (
                "jwks without keys",
                edit(&h, |d| {
                    d.insert("jwks".into(), Value::Object(Map::new()));
                }),
                MessageError::Jwks(JwkError::MissingMember {
                    pointer: "/d/jwks/keys".into(),
                }),
            ),
            (
                "identify from the server",
                id.clone(),
                MessageError::WrongDirection,
            ),
            (
                "a control op",
                r#"{"op":"ready","d":{}}"#.into(),
                MessageError::UnknownOp,
            ),
            (
                "no d",
                r#"{"op":"hello"}"#.into(),
                MessageError::Json(JsonError::MissingMember {
                    pointer: "/d".into(),
                }),
            ),
        ];
        for (name, text, want) in &server_cases {
            assert_eq!(
                ServerMessage::decode(text.as_bytes(), MAX).as_ref(),
                Err(want),
                "{name}"
            );
        }
        let host_cases: Vec<(&str, String, MessageError)> = vec![
            (
                "hello from the host",
                h.clone(),
                MessageError::WrongDirection,
            ),
            (
                "a control op",
                r#"{"op":"report","d":{}}"#.into(),
                MessageError::UnknownOp,
            ),
            (
                "heartbeat",
                r#"{"op":"heartbeat","d":{"active_sessions":1}}"#.into(),
                MessageError::UnknownOp,
            ),
            (
                "session_id bad",
                edit(&id, |d| {
                    d.insert("session_id".into(), "x".into());
                }),
                invalid("/d/session_id"),
            ),
            (
                "too large",
                id.clone(),
                MessageError::Json(JsonError::TooLarge {
                    len: id.len(),
                    max: 10,
                }),
            ),
        ];
        for (name, text, want) in &host_cases {
            let max = if *name == "too large" { 10 } else { MAX };
            assert_eq!(
                HostMessage::decode(text.as_bytes(), max).as_ref(),
                Err(want),
                "{name}"
            );
        }
        let too_large = HostMessage::decode(id.as_bytes(), 10).unwrap_err();
        assert_eq!(too_large.close_reason_text(), Some("frame_too_large"));
        assert_eq!(too_large.close_code().as_u16(), 4002);
    }

    #[test]
    fn server_values() {
        assert_eq!(
            hello().server_values(),
            Ok(ServerValues {
                clock_leeway: Duration::from_secs(30),
                idle_timeout: Duration::from_secs(1800),
                detach_grace: Duration::from_secs(900),
            })
        );
        let zero_leeway = Hello {
            clock_leeway_ms: 0,
            idle_timeout_ms: 1,
            detach_grace_ms: 1,
            ..hello()
        };
        assert_eq!(
            zero_leeway.server_values().map(|v| v.clock_leeway),
            Ok(Duration::ZERO)
        );
        let cases = [
            (-1, 1, 1, DataError::NegativeClockLeeway),
            (i64::MIN, 1, 1, DataError::NegativeClockLeeway),
            (0, 0, 1, DataError::IdleTimeoutNotPositive),
            (0, -5, 1, DataError::IdleTimeoutNotPositive),
            (0, 1, 0, DataError::DetachGraceNotPositive),
            (0, 1, i64::MIN, DataError::DetachGraceNotPositive),
            // The first broken rule in the order leeway, idle, detach.
            (-1, 0, 0, DataError::NegativeClockLeeway),
            (0, 0, 0, DataError::IdleTimeoutNotPositive),
        ];
        for (leeway, idle, detach, want) in cases {
            let hello = Hello {
                clock_leeway_ms: leeway,
                idle_timeout_ms: idle,
                detach_grace_ms: detach,
                ..hello()
            };
            assert_eq!(hello.server_values(), Err(want), "{leeway} {idle} {detach}");
            assert_eq!(want.close_code().as_u16(), 4002);
        }
    }

    #[test]
    fn identify_uses_the_data_shape() {
        let text = HostMessage::Identify(identify()).to_json();
        let HostMessage::Identify(id) = HostMessage::decode(text.as_bytes(), MAX).unwrap();
        assert_eq!(id.check_data_shape(sid()), Ok(()));
        assert_eq!(
            id.check_control_shape(),
            Err(MessageError::LiveSessionsMissing)
        );
    }
}
