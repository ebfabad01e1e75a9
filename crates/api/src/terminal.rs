//! The bodies of the terminal session routes (spec 6.1–6.3, 6.6; DESIGN 3.4):
//! `POST /api/v1/hosts/{host_id}/terminal/sessions`,
//! `POST /api/v1/terminal/sessions/{id}/attach-challenge`,
//! `POST /api/v1/terminal/sessions/{id}/attach`,
//! `POST /api/v1/terminal/sessions/{id}/close`,
//! `GET /api/v1/terminal/sessions[/{id}]`.

use serde::{Deserialize, Serialize};

/// `POST /api/v1/hosts/{host_id}/terminal/sessions`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct OpenTerminalSessionRequest {
    /// The name of a profile the host reported.
    pub profile: String,
    /// The terminal width in cells (1..=10000).
    pub columns: u32,
    /// The terminal height in cells (1..=10000).
    pub rows: u32,
    /// base64url without padding of SHA-256 of the device's ephemeral Noise key.
    pub client_ephemeral_key_hash: String,
    /// With a profile of kind claude (and only then): the index of the working
    /// directory in the reported list of the person's own session user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = u32))]
    pub workdir_index: Option<u32>,
    /// A fresh step-up of this login session, consumed by the request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = "uuid"))]
    pub step_up_id: Option<String>,
    /// The client showed a changed host key (audit `pin_changed`; default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = bool))]
    pub pin_changed: Option<bool>,
}

/// The device's proof of a quick reattach.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(as = DeviceProofBody))]
pub struct DeviceProof {
    /// The nonce of `attach-challenge`.
    pub nonce: String,
    /// base64url of the Ed25519 signature of the device key over the UTF-8 text
    /// `bothy.v1.quick_reattach\n<session_id>\n<nonce>\n<client_ephemeral_key_hash>`.
    pub signature: String,
}

/// `POST /api/v1/terminal/sessions/{session_id}/attach`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AttachTerminalSessionRequest {
    /// base64url without padding of SHA-256 of the new ephemeral Noise key.
    pub client_ephemeral_key_hash: String,
    /// A fresh step-up; without one the request must be a quick reattach.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = "uuid"))]
    pub step_up_id: Option<String>,
    /// The proof of a quick reattach.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = DeviceProof))]
    pub device_proof: Option<DeviceProof>,
    /// The client showed a changed host key (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = bool))]
    pub pin_changed: Option<bool>,
}

/// The answer of open (201) and attach (200).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TerminalSessionGrant {
    /// The session.
    #[cfg_attr(feature = "openapi", schema(format = "uuid"))]
    pub session_id: String,
    /// The terminal session token (`terminal-session+jwt`); the device puts it
    /// into message 1 of the handshake.
    pub token: String,
    /// The device stream: `/api/v1/terminal/sessions/{session_id}/stream`.
    pub stream_path: String,
    /// The host's static Noise key (base64url).
    pub noise_public_key: String,
    /// The fingerprint of the host's keys (4.3).
    pub key_fingerprint: String,
    /// The generation of the host's keys (pinned with the key).
    pub key_generation: i64,
    /// The token's expiry (Unix ms).
    pub expires_at: i64,
}

/// The token stays out of `Debug` (10.4: never in a log).
impl std::fmt::Debug for TerminalSessionGrant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TerminalSessionGrant")
            .field("session_id", &self.session_id)
            .field("token", &"<redacted>")
            .field("stream_path", &self.stream_path)
            .field("key_fingerprint", &self.key_fingerprint)
            .field("key_generation", &self.key_generation)
            .field("expires_at", &self.expires_at)
            .finish_non_exhaustive()
    }
}

/// The answer of `attach-challenge`: `{nonce, expires_at}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AttachChallenge {
    /// The nonce (base64url, opaque).
    pub nonce: String,
    /// Until when it is accepted (Unix ms).
    pub expires_at: i64,
}

/// The answer of close: `{session_id, state, close_reason}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ClosedTerminalSession {
    /// The session.
    #[cfg_attr(feature = "openapi", schema(format = "uuid"))]
    pub session_id: String,
    /// `closed`.
    pub state: String,
    /// `client_closed` or `closed_by_owner`.
    pub close_reason: String,
}

/// A session as the reads show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TerminalSession {
    /// The session.
    #[cfg_attr(feature = "openapi", schema(format = "uuid"))]
    pub session_id: String,
    /// Its host.
    #[cfg_attr(feature = "openapi", schema(format = "uuid"))]
    pub host_id: String,
    /// Its person.
    #[cfg_attr(feature = "openapi", schema(format = "uuid"))]
    pub person_id: String,
    /// The profile.
    pub profile: String,
    /// `opening`, `active`, `detached` or `closed`.
    pub state: String,
    /// Why it ended (closed only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub close_reason: Option<String>,
    /// The detail of `open_failed` and `host_policy_violation`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub close_detail: Option<String>,
    /// When it was opened (Unix ms).
    pub created_at: i64,
    /// When its PTY started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = i64))]
    pub started_at: Option<i64>,
    /// When its device went away.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = i64))]
    pub detached_at: Option<i64>,
    /// When it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = i64))]
    pub ended_at: Option<i64>,
    /// The working directory's index (claude).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = u32))]
    pub workdir_index: Option<u32>,
    /// An owner opened it on a host assigned to another person (8.4).
    pub foreign_assignee: bool,
    /// When `terminal.max_session_duration` ends it (Unix ms).
    pub max_ends_at: i64,
    /// Milliseconds left until then (0 when closed).
    pub remaining_ms: i64,
    /// The row's version.
    pub version: i64,
}

impl TerminalSession {
    /// Whether the session is closed.
    pub fn is_closed(&self) -> bool {
        self.state == "closed"
    }
}

/// The answer of the list: a page of sessions, newest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TerminalSessionList {
    /// The sessions, newest first.
    pub sessions: Vec<TerminalSession>,
    /// The cursor of the next page (pass it as `after`); absent on the last
    /// page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = "uuid"))]
    pub next: Option<String>,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn an_absent_member_is_left_out_never_null() {
        let list = TerminalSessionList {
            sessions: Vec::new(),
            next: None,
        };
        assert_eq!(serde_json::to_string(&list).unwrap(), r#"{"sessions":[]}"#);
        let request = AttachTerminalSessionRequest {
            client_ephemeral_key_hash: "h".into(),
            step_up_id: None,
            device_proof: Some(DeviceProof {
                nonce: "n".into(),
                signature: "s".into(),
            }),
            pin_changed: None,
        };
        assert_eq!(
            serde_json::to_string(&request).unwrap(),
            r#"{"client_ephemeral_key_hash":"h","device_proof":{"nonce":"n","signature":"s"}}"#
        );
    }

    #[test]
    fn a_grant_never_shows_its_token_in_debug() {
        let grant = TerminalSessionGrant {
            session_id: "s".into(),
            token: "canary-token-7f3a".into(),
            stream_path: "/p".into(),
            noise_public_key: "k".into(),
            key_fingerprint: "f".into(),
            key_generation: 1,
            expires_at: 2,
        };
        assert!(!format!("{grant:?}").contains("canary-token-7f3a"));
    }
}
