//! The bodies of the host routes (spec 3.1–3.3, 2.2, 7.2): create, pairing
//! code, host.pair, confirm, the changes (`PATCH`, `llm-credentials`) and the
//! reads.
//!
//! The states, `disabled_reason` and `llm_credentials` are closed lists of the
//! server's enums; the members here are strings (where the document lists the
//! values, the server supplies that list). The parts of a host's last report
//! (`reported_session_users`, `reported_profiles`, `reported_doctor`) and the
//! JWK and report lists of host.pair stay JSON values: the host service's
//! report is their one source, and the server keeps them as reported.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `POST /api/v1/hosts` (doc-only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CreateHostRequest {
    /// The display name (1..=100 characters, no control characters; trimmed).
    pub name: String,
    /// The person the host is assigned to (SR10): a person who is not deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = "uuid"))]
    pub assigned_user_id: Option<String>,
    /// Why (1..=500 characters; kept in the audit).
    pub reason: String,
    /// A fresh step-up of this login session, consumed by the request.
    #[cfg_attr(feature = "openapi", schema(format = "uuid"))]
    pub step_up_id: String,
}

/// `POST /api/v1/hosts/{host_id}/pairing-code` (doc-only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct IssuePairingCodeRequest {
    /// Why (1..=500 characters; kept in the audit).
    pub reason: String,
    /// A fresh step-up of this login session, consumed by the request.
    #[cfg_attr(feature = "openapi", schema(format = "uuid"))]
    pub step_up_id: String,
}

/// A host with its pairing code (doc-only).
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HostWithCode {
    /// The host as a reader sees it.
    pub host: Host,
    /// `bothy_hpc_<random>_<checksum>`: shown only in this answer.
    #[cfg_attr(
        feature = "openapi",
        schema(example = "bothy_hpc_00000000000000000000000000000000_3bj6nby")
    )]
    pub pairing_code: String,
}

/// The pairing code stays out of `Debug` (never in a log).
impl std::fmt::Debug for HostWithCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostWithCode")
            .field("host", &self.host)
            .field("pairing_code", &"<redacted>")
            .finish()
    }
}

/// `POST /api/v1/hosts/pair` (doc-only).
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PairHostRequest {
    /// The pairing code.
    pub code: String,
    /// The static X25519 key: base64url without padding, 32 bytes.
    pub noise_public_key: String,
    /// The Ed25519 login key: exactly `kty` (`OKP`), `crv` (`Ed25519`), `x`.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub auth_public_jwk: Value,
    /// The version of the host service: SemVer without `v`.
    #[cfg_attr(feature = "openapi", schema(example = "1.4.0"))]
    pub host_version: String,
    /// The platform (display text, e.g. `linux`).
    pub platform: String,
    /// The operating system's version (display text).
    pub os_version: String,
    /// The offered profiles `{name, display_name, kind}`.
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<Object>))]
    pub profiles: Vec<Value>,
    /// At least one session user `{name, workdirs[] {display_name}}`.
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<Object>))]
    pub session_users: Vec<Value>,
    /// `host_service.require_local_confirm`.
    pub require_local_confirm: bool,
    /// Whether the host service detected the server on its host.
    pub is_server_host: bool,
}

/// The pairing code stays out of `Debug` (never in a log).
impl std::fmt::Debug for PairHostRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PairHostRequest")
            .field("code", &"<redacted>")
            .field("host_version", &self.host_version)
            .field("platform", &self.platform)
            .finish_non_exhaustive()
    }
}

/// The answer of host.pair (doc-only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PairedHost {
    /// The host.
    #[cfg_attr(feature = "openapi", schema(format = "uuid"))]
    pub host_id: String,
    /// This server instance.
    #[cfg_attr(feature = "openapi", schema(format = "uuid"))]
    pub instance_id: String,
    /// The fingerprint of both keys, 13 groups of four (4.3).
    #[cfg_attr(
        feature = "openapi",
        schema(example = "F0CC-6QS6-RF5D-3BSH-CAZQ-PXMR-J8RA-AHK5-1HF0-9S02-1GW6-BW3J-HK90")
    )]
    pub key_fingerprint: String,
}

/// `POST /api/v1/hosts/{host_id}/confirm` (doc-only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ConfirmHostRequest {
    /// The first `terminal.fingerprint_confirm_chars` characters of the
    /// fingerprint without hyphens (case does not matter).
    pub fingerprint_prefix: String,
    /// `none`, `personal` or `organization`.
    pub llm_credentials: String,
    /// The holder of a personal login: exactly with `personal`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = "uuid"))]
    pub credential_holder_id: Option<String>,
    /// The owner's answer: is this the server's own host?
    pub declared_server_host: bool,
    /// Assignments of persons to session users the host reported.
    pub session_users: Vec<ConfirmAssignment>,
    /// Why (1..=500 characters; kept in the audit).
    pub reason: String,
    /// A fresh step-up of this login session, consumed by the request.
    #[cfg_attr(feature = "openapi", schema(format = "uuid"))]
    pub step_up_id: String,
}

/// One assignment of confirmHost (doc-only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ConfirmAssignment {
    /// The person.
    #[cfg_attr(feature = "openapi", schema(format = "uuid"))]
    pub user_id: String,
    /// The session user's name, exactly as the host reported it.
    pub os_user: String,
}

/// `PATCH /api/v1/hosts/{host_id}` (doc-only).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct UpdateHostRequest {
    /// A new display name (1..=100 characters, no control characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub name: Option<String>,
    /// A new assignee: a person who is not deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = "uuid"))]
    pub assigned_user_id: Option<String>,
    /// `true`: no assignee afterwards (not together with `assigned_user_id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = bool))]
    pub clear_assigned_user: Option<bool>,
    /// The state to go to: `disabled`, `active` (enable) or `retired`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub state: Option<String>,
    /// New assignments: each a name the host reports, exactly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<SessionUserAssignment>))]
    pub assign_session_users: Option<Vec<SessionUserAssignment>>,
    /// Persons whose valid assignment on this host ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<String>))]
    pub end_session_users: Option<Vec<String>>,
    /// Why (1..=500 characters; kept in the audit).
    pub reason: String,
    /// A fresh step-up of this login session, consumed by the request.
    #[cfg_attr(feature = "openapi", schema(format = "uuid"))]
    pub step_up_id: String,
}

/// One assignment of a session user (doc-only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SessionUserAssignment {
    /// The person.
    #[cfg_attr(feature = "openapi", schema(format = "uuid"))]
    pub user_id: String,
    /// The session user's name, exactly as the host reported it.
    pub os_user: String,
}

/// `PUT /api/v1/hosts/{host_id}/llm-credentials` (doc-only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SetHostLlmCredentialsRequest {
    /// `none`, `personal` or `organization`.
    pub llm_credentials: String,
    /// The holder of a personal login: exactly with `personal`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = "uuid"))]
    pub credential_holder_id: Option<String>,
    /// Why (1..=500 characters; kept in the audit).
    pub reason: String,
    /// A fresh step-up of this login session, consumed by the request.
    #[cfg_attr(feature = "openapi", schema(format = "uuid"))]
    pub step_up_id: String,
}

/// The answer of a host.manage change (doc-only).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ManagedHostReply {
    /// The host as a reader sees it, with `session_users[]` {`user_id`,
    /// `os_user`} (the valid assignments).
    pub host: Host,
}

/// `{host}` (doc-only).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HostReply {
    /// The host as a reader sees it, with `session_users[]`.
    pub host: Host,
}

/// `{hosts[]}` (doc-only).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HostList {
    /// The hosts.
    pub hosts: Vec<Host>,
}

/// A host as a reader sees it (doc-only; `hosts::Host::to_json` with
/// `session_users[]`, and `connected` in the reads of this node). Members
/// without a value are left out, never `null`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Host {
    /// The host's ID.
    #[cfg_attr(feature = "openapi", schema(format = "uuid"))]
    pub id: String,
    /// Its name.
    pub name: String,
    /// `pairing`, `confirming`, `active` (the only state that allows
    /// sessions), `disabled` or `retired` (3.1).
    pub state: String,
    /// For `disabled`: `owner` or `duplicate_connection`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disabled_reason: Option<String>,
    /// When it was disabled (Unix ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disabled_at: Option<i64>,
    /// The person the host is assigned to (8.4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(format = "uuid"))]
    pub assigned_user_id: Option<String>,
    /// The host's Noise static public key (base64url), once paired.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub noise_public_key: Option<String>,
    /// Its fingerprint (5.1), once paired.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_fingerprint: Option<String>,
    /// The key generation: raised by every pairing.
    pub key_generation: i64,
    /// When the pairing code expires (Unix ms), while pairing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pairing_expires_at: Option<i64>,
    /// `none`, `personal` or `organization` (7.2).
    pub llm_credentials: String,
    /// The holder of personal LLM credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(format = "uuid"))]
    pub credential_holder_id: Option<String>,
    /// What the confirming owner declared (server host or not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub declared_server_host: Option<bool>,
    /// Whether the host counts as a server host.
    pub is_server_host: bool,
    /// The host's last report: its session users `{name, workdirs[]}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Vec<Object>>))]
    pub reported_session_users: Option<Value>,
    /// The host's last report: its profiles `{name, display_name, kind}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Vec<Object>>))]
    pub reported_profiles: Option<Value>,
    /// The host's last report: its doctor entries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Vec<Object>>))]
    pub reported_doctor: Option<Value>,
    /// The host's last report: whether it is a server host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reported_is_server_host: Option<bool>,
    /// The host's last report: `host_service.require_local_confirm`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reported_require_local_confirm: Option<bool>,
    /// The host's last report: its version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reported_host_version: Option<String>,
    /// The host's last report: its platform.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reported_platform: Option<String>,
    /// The host's last report: its OS version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reported_os_version: Option<String>,
    /// When the host was last seen (Unix ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_seen_at: Option<i64>,
    /// The host's version (the `ETag`).
    pub version: i64,
    /// Created (Unix ms).
    pub created_at: i64,
    /// Last changed (Unix ms).
    pub updated_at: i64,
    /// The valid session-user assignments.
    pub session_users: Vec<HostSessionUser>,
    /// Whether the host's control connection is up on this node (reads
    /// only; not part of the version).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connected: Option<bool>,
}

/// One session-user assignment of a host (doc-only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HostSessionUser {
    /// The person.
    #[cfg_attr(feature = "openapi", schema(format = "uuid"))]
    pub user_id: String,
    /// The session user's name on the host.
    pub os_user: String,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn host() -> Host {
        Host {
            id: "h".into(),
            name: "n".into(),
            state: "pairing".into(),
            disabled_reason: None,
            disabled_at: None,
            assigned_user_id: None,
            noise_public_key: None,
            key_fingerprint: None,
            key_generation: 0,
            pairing_expires_at: Some(5),
            llm_credentials: "none".into(),
            credential_holder_id: None,
            declared_server_host: None,
            is_server_host: false,
            reported_session_users: None,
            reported_profiles: None,
            reported_doctor: None,
            reported_is_server_host: None,
            reported_require_local_confirm: None,
            reported_host_version: None,
            reported_platform: None,
            reported_os_version: None,
            last_seen_at: None,
            version: 1,
            created_at: 2,
            updated_at: 3,
            session_users: Vec::new(),
            connected: None,
        }
    }

    #[test]
    fn an_absent_member_is_left_out_never_null() {
        let text = serde_json::to_string(&host()).unwrap();
        assert!(!text.contains("null"), "{text}");
        assert!(!text.contains("connected"), "{text}");
        let change = UpdateHostRequest {
            state: Some("disabled".into()),
            reason: "r".into(),
            step_up_id: "s".into(),
            ..UpdateHostRequest::default()
        };
        assert_eq!(
            serde_json::to_string(&change).unwrap(),
            r#"{"state":"disabled","reason":"r","step_up_id":"s"}"#
        );
    }

    #[test]
    fn a_pairing_code_never_shows_in_debug() {
        let issued = HostWithCode {
            host: host(),
            pairing_code: "bothy_hpc_canary7f3a_x".into(),
        };
        assert!(!format!("{issued:?}").contains("canary7f3a"));
    }
}
