//! The protocol between the host service and `bothy-host confirm-agent`
//! (6.4 "Protocol"): one line of strict JSON per message, each ending in a
//! line feed.
//!
//! | direction | message |
//! |---|---|
//! | service → agent | `{"op":"confirm","id":N,"kind":"open"\|"attach","profile":P,"session_user":U,"timeout_ms":T}` |
//! | service → agent | `{"op":"cancel","id":N}` |
//! | agent → service | `{"op":"answer","id":N,"allow":B}` |
//!
//! `id` is a non-negative integer the service counts up per request (it is
//! neither the session ID nor anything of the device). Every message has
//! exactly one encoding: the decoder refuses unknown or missing members, a
//! member twice, `null`, the wrong types, an `op` of the other direction, a
//! `kind` other than the two, names that are empty, longer than
//! [`MAX_NAME`] bytes or hold a control character, a `timeout_ms` of 0 or
//! above [`MAX_TIMEOUT_MS`], and lines longer than [`MAX_LINE`] bytes
//! (D-202). An accepted message encodes back to exactly its bytes when those
//! were in the canonical member order (the fuzz property checks that the
//! re-encoding decodes to the same message).

use bothy_proto::json::{self, JsonError, Object};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

/// The longest line either side reads (without its line feed).
pub const MAX_LINE: usize = 4096;

/// The longest profile or session user name a request carries.
pub const MAX_NAME: usize = 256;

/// The longest `timeout_ms` (a day; `host_service.local_confirm_timeout`
/// beyond that is no consent window any person waits for).
pub const MAX_TIMEOUT_MS: u64 = 86_400_000;

/// What is confirmed (6.4 "What is confirmed").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The start of a new PTY.
    Open,
    /// The replay and live stream of a running session to an attaching device.
    Attach,
}

impl Kind {
    /// The word on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Open => "open",
            Kind::Attach => "attach",
        }
    }

    fn parse(text: &str) -> Option<Kind> {
        match text {
            "open" => Some(Kind::Open),
            "attach" => Some(Kind::Attach),
            _ => None,
        }
    }
}

/// A message of the service to an agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToAgent {
    /// Ask the person at the desk.
    Confirm {
        /// The request.
        id: u64,
        /// Open or attach.
        kind: Kind,
        /// The profile (its name).
        profile: String,
        /// The session user the PTY runs as.
        session_user: String,
        /// How long the service waits for the answer.
        timeout_ms: u64,
    },
    /// Another agent answered, or the time ran out: close the dialog.
    Cancel {
        /// The request.
        id: u64,
    },
}

/// A message of an agent to the service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FromAgent {
    /// The person's answer (or the agent's own denial).
    Answer {
        /// The request.
        id: u64,
        /// Consent.
        allow: bool,
    },
}

/// Why a line was refused; never carries the line's content.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    /// Not strict JSON of the right shape.
    #[error("not a message of the confirmation protocol: {0}")]
    Json(#[from] JsonError),
    /// `op` names no message of this direction.
    #[error("unknown op")]
    UnknownOp,
    /// A value of the right type but the wrong form (kind, name, timeout).
    #[error("invalid value at {0:?}")]
    Invalid(&'static str),
}

impl ToAgent {
    /// The line (with its line feed).
    pub fn encode(&self) -> String {
        let value = match self {
            ToAgent::Confirm {
                id,
                kind,
                profile,
                session_user,
                timeout_ms,
            } => json!({
                "op": "confirm",
                "id": id,
                "kind": kind.as_str(),
                "profile": profile,
                "session_user": session_user,
                "timeout_ms": timeout_ms,
            }),
            ToAgent::Cancel { id } => json!({"op": "cancel", "id": id}),
        };
        let mut line = value.to_string();
        line.push('\n');
        line
    }

    /// Decodes one line (without its line feed).
    pub fn decode(line: &[u8]) -> Result<ToAgent, ProtocolError> {
        let value = json::parse(line, MAX_LINE)?;
        match op_of(&value)? {
            "confirm" => {
                let o = Object::root(
                    &value,
                    &["op", "id", "kind", "profile", "session_user", "timeout_ms"],
                )?;
                let kind = Kind::parse(o.str("kind")?).ok_or(ProtocolError::Invalid("/kind"))?;
                let profile = name(o.str("profile")?, "/profile")?;
                let session_user = name(o.str("session_user")?, "/session_user")?;
                let timeout_ms: u64 = o.uint("timeout_ms")?;
                if timeout_ms == 0 || timeout_ms > MAX_TIMEOUT_MS {
                    return Err(ProtocolError::Invalid("/timeout_ms"));
                }
                Ok(ToAgent::Confirm {
                    id: o.uint("id")?,
                    kind,
                    profile,
                    session_user,
                    timeout_ms,
                })
            }
            "cancel" => {
                let o = Object::root(&value, &["op", "id"])?;
                Ok(ToAgent::Cancel { id: o.uint("id")? })
            }
            _ => Err(ProtocolError::UnknownOp),
        }
    }
}

impl FromAgent {
    /// The line (with its line feed).
    pub fn encode(&self) -> String {
        let FromAgent::Answer { id, allow } = self;
        let mut line = json!({"op": "answer", "id": id, "allow": allow}).to_string();
        line.push('\n');
        line
    }

    /// Decodes one line (without its line feed).
    pub fn decode(line: &[u8]) -> Result<FromAgent, ProtocolError> {
        let value = json::parse(line, MAX_LINE)?;
        if op_of(&value)? != "answer" {
            return Err(ProtocolError::UnknownOp);
        }
        let o = Object::root(&value, &["op", "id", "allow"])?;
        Ok(FromAgent::Answer {
            id: o.uint("id")?,
            allow: o.bool("allow")?,
        })
    }
}

/// The `op` of a message, checked as a string member of an object.
fn op_of(value: &Value) -> Result<&str, ProtocolError> {
    // The full member check follows with the schema of the op.
    let Value::Object(members) = value else {
        Object::root(value, &[])?;
        return Err(ProtocolError::UnknownOp);
    };
    match members.get("op") {
        Some(Value::String(op)) => Ok(op),
        _ => {
            let o = Object::root(value, &["op"])?;
            o.str("op")?;
            Err(ProtocolError::UnknownOp)
        }
    }
}

/// A name the dialog shows: not empty, at most [`MAX_NAME`] bytes, no control
/// character (a dialog line must not be forged with line feeds or escapes).
fn name(text: &str, pointer: &'static str) -> Result<String, ProtocolError> {
    if text.is_empty() || text.len() > MAX_NAME || text.chars().any(char::is_control) {
        return Err(ProtocolError::Invalid(pointer));
    }
    Ok(text.to_owned())
}

/// Splits complete lines off `buffer` (a reader appends what arrives): each
/// without its line feed; a rest longer than [`MAX_LINE`] without a line feed
/// is an error, so a peer cannot make the reader buffer without bound.
pub fn take_lines(buffer: &mut Vec<u8>) -> Result<Vec<Vec<u8>>, LineTooLong> {
    let mut lines = Vec::new();
    while let Some(end) = buffer.iter().position(|b| *b == b'\n') {
        let mut line: Vec<u8> = buffer.drain(..=end).collect();
        line.pop();
        if line.len() > MAX_LINE {
            return Err(LineTooLong);
        }
        lines.push(line);
    }
    if buffer.len() > MAX_LINE {
        return Err(LineTooLong);
    }
    Ok(lines)
}

/// One end of a connection of this protocol, for [`converse`]: the service's
/// per agent, and the agent's.
pub(crate) trait Side {
    /// The next message to send, encoded; `None` ends the connection.
    /// Cancel-safe: nothing is taken before it is ready.
    fn next_to_send(&mut self) -> impl Future<Output = Option<String>> + Send;

    /// Takes one line the other end sent; `Err` when it is no message for
    /// this end, which ends the connection.
    fn received(&mut self, line: &[u8]) -> Result<(), ProtocolError>;

    /// Logs that the other end sent a line that is no message for this end
    /// (or one longer than [`MAX_LINE`]); the connection ends.
    fn invalid(&self);
}

/// Writes what `side` sends and hands it the lines that arrive, until either
/// end closes the connection or a line is invalid.
pub(crate) async fn converse(stream: UnixStream, side: &mut impl Side) {
    let (mut read, mut write) = stream.into_split();
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 1024];
    loop {
        tokio::select! {
            message = side.next_to_send() => {
                let Some(message) = message else { return };
                if write.write_all(message.as_bytes()).await.is_err() {
                    return;
                }
            }
            read_bytes = read.read(&mut chunk) => {
                let n = match read_bytes {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                buffer.extend_from_slice(&chunk[..n]);
                let Ok(lines) = take_lines(&mut buffer) else {
                    side.invalid();
                    return;
                };
                for line in lines {
                    if side.received(&line).is_err() {
                        side.invalid();
                        return;
                    }
                }
            }
        }
    }
}

/// A line longer than [`MAX_LINE`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a line is longer than {MAX_LINE} bytes")]
pub struct LineTooLong;

#[cfg(test)]
mod tests {
    use super::*;

    fn confirm() -> ToAgent {
        ToAgent::Confirm {
            id: 7,
            kind: Kind::Attach,
            profile: "shell".into(),
            session_user: "alice".into(),
            timeout_ms: 60_000,
        }
    }

    #[test]
    fn messages_round_trip() {
        for message in [confirm(), ToAgent::Cancel { id: 0 }] {
            let line = message.encode();
            assert!(line.ends_with('\n'));
            assert_eq!(
                ToAgent::decode(line.trim_end().as_bytes()),
                Ok(message.clone())
            );
        }
        for allow in [true, false] {
            let answer = FromAgent::Answer {
                id: u64::MAX,
                allow,
            };
            assert_eq!(
                FromAgent::decode(answer.encode().trim_end().as_bytes()),
                Ok(answer)
            );
        }
        assert_eq!(
            confirm().encode(),
            "{\"id\":7,\"kind\":\"attach\",\"op\":\"confirm\",\"profile\":\"shell\",\"session_user\":\"alice\",\"timeout_ms\":60000}\n"
        );
    }

    #[test]
    fn the_decoders_refuse_everything_else() {
        let refused_answers: &[&[u8]] = &[
            b"",
            b"answer",
            b"[]",
            b"null",
            b"{}",
            b"{\"op\":\"answer\",\"id\":1}",
            b"{\"op\":\"answer\",\"allow\":true}",
            b"{\"op\":\"answer\",\"id\":1,\"allow\":true,\"x\":1}",
            b"{\"op\":\"answer\",\"id\":1,\"allow\":\"true\"}",
            b"{\"op\":\"answer\",\"id\":1,\"allow\":1}",
            b"{\"op\":\"answer\",\"id\":-1,\"allow\":true}",
            b"{\"op\":\"answer\",\"id\":1.5,\"allow\":true}",
            b"{\"op\":\"answer\",\"id\":\"1\",\"allow\":true}",
            b"{\"op\":\"answer\",\"id\":18446744073709551616,\"allow\":true}",
            b"{\"op\":\"answer\",\"id\":1,\"allow\":null}",
            b"{\"op\":\"answer\",\"id\":1,\"allow\":true,\"allow\":false}",
            b"{\"op\":\"answer\",\"id\":1,\"allow\":true} x",
            b"{\"op\":\"confirm\",\"id\":1,\"allow\":true}",
            b"{\"op\":\"ANSWER\",\"id\":1,\"allow\":true}",
            b"{\"op\":1,\"id\":1,\"allow\":true}",
            b"{\"op\":\"answer\",\"id\":1,\"allow\":tru\xffe}",
        ];
        for line in refused_answers {
            assert!(
                FromAgent::decode(line).is_err(),
                "accepted {:?}",
                String::from_utf8_lossy(line)
            );
        }
        let long = format!(
            "{{\"op\":\"answer\",\"id\":1,\"allow\":true,\"p\":\"{}\"}}",
            "x".repeat(MAX_LINE)
        );
        assert!(matches!(
            FromAgent::decode(long.as_bytes()),
            Err(ProtocolError::Json(JsonError::TooLarge { .. }))
        ));

        let base = |kind: &str, profile: &str, user: &str, timeout: &str| {
            format!(
                "{{\"op\":\"confirm\",\"id\":1,\"kind\":{kind},\"profile\":{profile},\"session_user\":{user},\"timeout_ms\":{timeout}}}"
            )
        };
        assert!(ToAgent::decode(base("\"open\"", "\"shell\"", "\"bob\"", "1").as_bytes()).is_ok());
        let long_name = format!("\"{}\"", "n".repeat(MAX_NAME + 1));
        for line in [
            base("\"close\"", "\"shell\"", "\"bob\"", "1"),
            base("\"Open\"", "\"shell\"", "\"bob\"", "1"),
            base("1", "\"shell\"", "\"bob\"", "1"),
            base("\"open\"", "\"\"", "\"bob\"", "1"),
            base("\"open\"", "\"shell\"", "\"\"", "1"),
            base("\"open\"", "\"sh\\nell\"", "\"bob\"", "1"),
            base("\"open\"", "\"shell\"", "\"b\\u001bob\"", "1"),
            base("\"open\"", &long_name, "\"bob\"", "1"),
            base("\"open\"", "\"shell\"", "\"bob\"", "0"),
            base("\"open\"", "\"shell\"", "\"bob\"", "86400001"),
            base("\"open\"", "\"shell\"", "\"bob\"", "-5"),
            base("\"open\"", "\"shell\"", "\"bob\"", "\"5\""),
            "{\"op\":\"cancel\"}".to_owned(),
            "{\"op\":\"cancel\",\"id\":1,\"kind\":\"open\"}".to_owned(),
            "{\"op\":\"answer\",\"id\":1,\"allow\":true}".to_owned(),
            "{\"id\":1}".to_owned(),
        ] {
            assert!(ToAgent::decode(line.as_bytes()).is_err(), "accepted {line}");
        }
    }

    #[test]
    fn lines_are_split_and_bounded() {
        let mut buffer = b"a\nbc\npartial".to_vec();
        assert_eq!(
            take_lines(&mut buffer),
            Ok(vec![b"a".to_vec(), b"bc".to_vec()])
        );
        assert_eq!(buffer, b"partial");
        let mut long = vec![b'x'; MAX_LINE + 1];
        assert_eq!(take_lines(&mut long), Err(LineTooLong));
        let mut long_line = vec![b'x'; MAX_LINE + 1];
        long_line.push(b'\n');
        assert_eq!(take_lines(&mut long_line), Err(LineTooLong));
        let mut exact = vec![b'x'; MAX_LINE];
        assert_eq!(take_lines(&mut exact), Ok(vec![]));
    }
}
