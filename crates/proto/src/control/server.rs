//! The messages of the server on the control connection (3.5).

use super::*;

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
