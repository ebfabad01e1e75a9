//! The messages of the host service on the control connection (3.5).

use super::*;

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
