//! Messages of the device stream `/api/v1/terminal/sessions/{session_id}/stream`
//! (spec 24, sections 6.1 step 5 and 12; DESIGN 3.4 "Device stream login";
//! asyncapi `terminalStream`).
//!
//! The login is two JSON text frames `{"op": ..., "d": {...}}`, decoded strictly
//! like the control connection ([`crate::control`]); after `ready` only binary
//! frames flow, each one Noise message.
//!
//! | Direction | op | d |
//! |-----------|----|---|
//! | device to server | `identify` | `access_token`?: string. The CLI sends its token; the console authenticated with its cookie at the upgrade and sends none |
//! | server to device | `ready` | `session_id`: UUID |
//!
//! The server answers an identify whose credential does not verify with 4004 and
//! one that was revoked with 4012; that is the server's decision, not a decoding
//! refusal. Every decoding refusal is a [`MessageError`] (4002), shared with the
//! control connection.

use std::fmt;

use serde_json::{Map, Value};
use uuid::Uuid;

use crate::control::MessageError;
use crate::json::{self, Member};

/// The path of the device stream of a session:
/// `/api/v1/terminal/sessions/<session_id>/stream`, the ID hyphenated in lower case.
pub fn stream_path(session_id: &Uuid) -> String {
    format!(
        "/api/v1/terminal/sessions/{}/stream",
        session_id.hyphenated()
    )
}

/// The text a device key signs for a quick reattach (6.2, D-71): a fixed
/// label, the session (hyphenated, lower case), the nonce of the server's
/// attach challenge and the new `client_ephemeral_key_hash`, one per line. The
/// server verifies exactly these bytes; the CLI and the console sign them.
pub fn quick_reattach_proof_message(
    session_id: Uuid,
    nonce: &str,
    client_ephemeral_key_hash: &str,
) -> Vec<u8> {
    format!(
        "bothy.v1.quick_reattach\n{}\n{nonce}\n{client_ephemeral_key_hash}",
        session_id.hyphenated()
    )
    .into_bytes()
}

/// `identify` of the device. `Debug` does not show the token.
#[derive(Clone, PartialEq, Eq)]
pub struct Identify {
    /// The access token of the CLI's login session; absent from the console.
    pub access_token: Option<String>,
}

impl fmt::Debug for Identify {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Identify")
            .field(
                "access_token",
                &self.access_token.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

impl Identify {
    /// The members of `d`.
    pub const MEMBERS: &'static [&'static str] = &["access_token"];

    /// Decodes `d` strictly.
    pub fn decode(d: Member<'_>) -> Result<Self, MessageError> {
        let d = d.into_object(Self::MEMBERS)?;
        Ok(Self {
            access_token: d.opt_str("access_token")?.map(str::to_owned),
        })
    }

    /// `d` as a JSON value.
    pub fn to_value(&self) -> Value {
        let mut map = Map::new();
        if let Some(token) = &self.access_token {
            map.insert("access_token".into(), token.as_str().into());
        }
        Value::Object(map)
    }
}

/// `ready`: the device is logged in on the stream of this session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ready {
    /// The session.
    pub session_id: Uuid,
}

impl Ready {
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
        map.insert(
            "session_id".into(),
            crate::envelope::uuid_value(&self.session_id),
        );
        Value::Object(map)
    }
}

/// A message from the device to the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceMessage {
    /// `identify`.
    Identify(Identify),
}

impl DeviceMessage {
    /// Decodes one text frame of at most `max_len` bytes.
    pub fn decode(bytes: &[u8], max_len: usize) -> Result<Self, MessageError> {
        let value = json::parse(bytes, max_len)?;
        let (op, d) = crate::envelope::envelope(&value)?;
        match op {
            "identify" => Ok(Self::Identify(Identify::decode(d)?)),
            "ready" => Err(MessageError::WrongDirection),
            _ => Err(MessageError::UnknownOp),
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

/// A message from the server to the device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerMessage {
    /// `ready`.
    Ready(Ready),
}

impl ServerMessage {
    /// Decodes one text frame of at most `max_len` bytes.
    pub fn decode(bytes: &[u8], max_len: usize) -> Result<Self, MessageError> {
        let value = json::parse(bytes, max_len)?;
        let (op, d) = crate::envelope::envelope(&value)?;
        match op {
            "ready" => Ok(Self::Ready(Ready::decode(d)?)),
            "identify" => Err(MessageError::WrongDirection),
            _ => Err(MessageError::UnknownOp),
        }
    }

    /// The op.
    pub const fn op(&self) -> &'static str {
        match self {
            Self::Ready(_) => "ready",
        }
    }

    /// The JSON text `{"op": ..., "d": {...}}` of one text frame.
    pub fn to_json(&self) -> String {
        let d = match self {
            Self::Ready(m) => m.to_value(),
        };
        crate::envelope::envelope_json(self.op(), d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::{JsonError, JsonType};

    #[test]
    fn the_quick_reattach_proof_binds_session_nonce_and_key_hash() {
        let message = quick_reattach_proof_message(Uuid::from_u128(1), "n", "k");
        assert_eq!(
            String::from_utf8(message).unwrap(),
            "bothy.v1.quick_reattach\n00000000-0000-0000-0000-000000000001\nn\nk"
        );
    }

    const MAX: usize = 4096;
    const SID: &str = "0192f5c4-7d3a-7b2e-9f00-1234567890ab";

    fn sid() -> Uuid {
        Uuid::parse_str(SID).unwrap()
    }

    #[test]
    fn messages_round_trip() {
        for token in [Some("bothy_at_abc".to_owned()), None] {
            let message = DeviceMessage::Identify(Identify {
                access_token: token,
            });
            let text = message.to_json();
            assert_eq!(DeviceMessage::decode(text.as_bytes(), MAX), Ok(message));
        }
        let ready = ServerMessage::Ready(Ready { session_id: sid() });
        let text = ready.to_json();
        assert_eq!(
            text,
            format!(r#"{{"op":"ready","d":{{"session_id":"{SID}"}}}}"#)
        );
        assert_eq!(ServerMessage::decode(text.as_bytes(), MAX), Ok(ready));
        assert_eq!(
            DeviceMessage::Identify(Identify { access_token: None }).to_json(),
            r#"{"op":"identify","d":{}}"#
        );
    }

    #[test]
    fn decode_refusals() {
        let device_cases: Vec<(&str, &str, MessageError)> = vec![
            (
                "token a number",
                r#"{"op":"identify","d":{"access_token":1}}"#,
                MessageError::Json(JsonError::WrongType {
                    pointer: "/d/access_token".into(),
                    expected: JsonType::String,
                }),
            ),
            (
                "token null",
                r#"{"op":"identify","d":{"access_token":null}}"#,
                MessageError::Json(JsonError::NullMember {
                    pointer: "/d/access_token".into(),
                }),
            ),
            (
                "other member",
                r#"{"op":"identify","d":{"cookie":"x"}}"#,
                MessageError::Json(JsonError::UnknownMember {
                    pointer: "/d/cookie".into(),
                }),
            ),
            (
                "d an array",
                r#"{"op":"identify","d":[]}"#,
                MessageError::Json(JsonError::WrongType {
                    pointer: "/d".into(),
                    expected: JsonType::Object,
                }),
            ),
            (
                "ready from the device",
                r#"{"op":"ready","d":{}}"#,
                MessageError::WrongDirection,
            ),
            (
                "a control op",
                r#"{"op":"heartbeat","d":{}}"#,
                MessageError::UnknownOp,
            ),
            (
                "duplicate token",
                r#"{"op":"identify","d":{"access_token":"a","access_token":"b"}}"#,
                MessageError::Json(JsonError::DuplicateMember {
                    pointer: "/d/access_token".into(),
                }),
            ),
        ];
        for (name, text, want) in &device_cases {
            assert_eq!(
                DeviceMessage::decode(text.as_bytes(), MAX).as_ref(),
                Err(want),
                "{name}"
            );
        }
        let server_cases: Vec<(&str, &str, MessageError)> = vec![
            (
                "session_id not a UUID",
                r#"{"op":"ready","d":{"session_id":"x"}}"#,
                MessageError::Json(JsonError::InvalidValue {
                    pointer: "/d/session_id".into(),
                }),
            ),
            (
                "no session_id",
                r#"{"op":"ready","d":{}}"#,
                MessageError::Json(JsonError::MissingMember {
                    pointer: "/d/session_id".into(),
                }),
            ),
            (
                "identify from the server",
                r#"{"op":"identify","d":{}}"#,
                MessageError::WrongDirection,
            ),
            (
                "unknown op",
                r#"{"op":"hello","d":{}}"#,
                MessageError::UnknownOp,
            ),
        ];
        for (name, text, want) in &server_cases {
            assert_eq!(
                ServerMessage::decode(text.as_bytes(), MAX).as_ref(),
                Err(want),
                "{name}"
            );
        }
        let long = format!(
            r#"{{"op":"identify","d":{{"access_token":"{}"}}}}"#,
            "a".repeat(MAX)
        );
        let error = DeviceMessage::decode(long.as_bytes(), MAX).unwrap_err();
        assert_eq!(error.close_reason_text(), Some("frame_too_large"));
        assert_eq!(error.close_code().as_u16(), 4002);
    }

    #[test]
    fn debug_redacts_the_token() {
        let identify = Identify {
            access_token: Some("bothy_at_secret".into()),
        };
        let shown = format!(
            "{identify:?} {:?}",
            DeviceMessage::Identify(identify.clone())
        );
        assert!(!shown.contains("bothy_at_secret"), "{shown}");
        assert!(shown.contains("<redacted>"));
    }

    #[test]
    fn stream_path_is_the_route() {
        assert_eq!(
            stream_path(&sid()),
            format!("/api/v1/terminal/sessions/{SID}/stream")
        );
    }
}
