//! Hosts and their lifecycle (spec 3.1–3.3, 2.2 items 1–5, 7.2): the `hosts`
//! row, its state machine, pairing, confirmation, re-pairing, the assignments of
//! session users and the LLM declaration.
//!
//! # Layout
//! - this file: the model — [`Host`] as stored, [`HostState`] with the one
//!   transition check [`check_transition`], [`DisabledReason`],
//!   [`LlmCredentials`], [`load`] / [`load_for_update`], [`bump_version`] and the
//!   `host.updated` event ([`host_updated`]), and [`HostError`] with its one
//!   mapping to `application/problem+json`.
//! - [`pairing`]: createHost, issueHostPairingCode (re-pairing), host.pair,
//!   confirmHost with the fingerprint attempts and the fallback to pairing.
//! - [`manage`]: updateHost (name, assignee, disable / enable / retire).
//! - [`session_users`]: the assignments of persons to session users (T12).
//! - [`llm`]: setHostLlmCredentials (7.2).
//!
//! Every change that takes a host out of `active`, or changes who may have a
//! terminal on it, raises the permission version
//! ([`crate::permissions::bump_version`]) and ends the sessions concerned
//! through the one end function [`crate::revocation::end`], in the same unit of
//! work.

pub mod llm;
pub mod manage;
pub mod pairing;
pub mod session_users;

use bothy_api::hosts::HostSessionUser;
use serde_json::{Map, Value, json};
use sqlx::any::AnyRow;
use sqlx::{AnyConnection, Row};
use uuid::Uuid;

use crate::clock::UnixMillis;
use crate::codes::code_enum;
use crate::db::idempotency::IdempotencyError;
use crate::db::{self, DbError, UnitOfWork};
use crate::events::{Audience, DurableEvent, EventKind};
use crate::identity::{IdentityError, Invalid};

/// `hosts.state` (3.1) and `hosts.llm_credentials` (7.2): the wire enums of
/// bothy-proto, so `ready` and the row cannot disagree.
pub use bothy_proto::control::{HostState, LlmCredentials};

code_enum! {
    /// `hosts.disabled_reason`.
    pub enum DisabledReason {
        /// An owner disabled the host; it can be enabled again.
        Owner => "owner",
        /// A live second control connection with the same keys (3.4); only a
        /// re-pairing continues from here.
        DuplicateConnection => "duplicate_connection",
    }
}

code_enum! {
    /// The operations of a host.manage audit entry (10.1, `operation`).
    pub enum ManageOperation {
        /// createHost.
        Create => "create",
        /// updateHost: name or assignee.
        Update => "update",
        /// issueHostPairingCode.
        PairingCode => "pairing_code",
        /// confirmHost.
        Confirm => "confirm",
        /// setHostLlmCredentials.
        LlmCredentials => "llm_credentials",
        /// updateHost: disable, enable, retire.
        State => "state",
        /// An assignment of a session user made or ended.
        SessionUser => "session_user",
    }
}

/// The state machine of 3.1, as one table: `Ok` if `from → to` is an edge of
/// the diagram (owner actions, host.pair, and the second control connection of
/// 3.4 take the same pairs); otherwise `409 invalid_state_transition`.
///
/// Re-enabling a host disabled with `duplicate_connection` is refused by
/// [`check_enable`], which knows the reason.
pub fn check_transition(from: HostState, to: HostState) -> Result<(), HostError> {
    use HostState::*;
    let allowed = matches!(
        (from, to),
        (Pairing, Confirming)
            | (Pairing, Pairing)
            | (Confirming, Active)
            | (Confirming, Pairing)
            | (Active, Pairing)
            | (Active, Disabled)
            | (Disabled, Active)
            | (Disabled, Pairing)
            | (Active, Retired)
            | (Disabled, Retired)
    );
    if allowed {
        Ok(())
    } else {
        Err(HostError::InvalidStateTransition)
    }
}

/// Whether a disabled host may become active again: not after a live second
/// control connection (3.1: only a re-pairing continues).
pub fn check_enable(host: &Host) -> Result<(), HostError> {
    check_transition(host.state, HostState::Active)?;
    if host.state != HostState::Disabled
        || host.disabled_reason == Some(DisabledReason::DuplicateConnection)
    {
        return Err(HostError::InvalidStateTransition);
    }
    Ok(())
}

/// A host as stored (every column of `hosts`).
#[derive(Debug, Clone, PartialEq)]
pub struct Host {
    /// `hosts.id`.
    pub id: Uuid,
    /// The display name the owner gave it (never in the audit).
    pub name: String,
    /// The state.
    pub state: HostState,
    /// Set exactly while disabled.
    pub disabled_reason: Option<DisabledReason>,
    /// When it was disabled.
    pub disabled_at: Option<UnixMillis>,
    /// The person the host is assigned to (SR10).
    pub assigned_user_id: Option<Uuid>,
    /// The static X25519 key of the host (base64url, 32 bytes); `None` while pairing.
    pub noise_public_key: Option<String>,
    /// The Ed25519 login key as the server built its JWK (JSON text).
    pub auth_public_jwk: Option<String>,
    /// The RFC 7638 thumbprint of the login key (the `kid` of host-auth+jwt).
    pub auth_jkt: Option<String>,
    /// The fingerprint (4.3) of the last handed-over keys, in display form
    /// (groups of four, upper case); kept when keys are discarded.
    pub key_fingerprint: Option<String>,
    /// Counts the stored key sets (devices pin it with the noise key).
    pub key_generation: i64,
    /// HMAC of the current pairing code.
    pub pairing_code_hash: Option<String>,
    /// When the current pairing code expires.
    pub pairing_expires_at: Option<UnixMillis>,
    /// Failed confirmations since the last host.pair (not part of the version).
    pub fingerprint_failures: i64,
    /// The declared LLM login.
    pub llm_credentials: LlmCredentials,
    /// The holder of a personal login.
    pub credential_holder_id: Option<Uuid>,
    /// The owner's answer to the server-host question; `None` before the confirmation.
    pub declared_server_host: Option<bool>,
    /// The reported session users as JSON (`[{name, workdirs[{display_name}]}]`).
    pub reported_session_users: Option<Value>,
    /// The reported profiles as JSON.
    pub reported_profiles: Option<Value>,
    /// The reported doctor entries as JSON.
    pub reported_doctor: Option<Value>,
    /// Whether the host service detected the server on itself (2.3).
    pub reported_is_server_host: Option<bool>,
    /// Whether every PTY waits for consent on the host (6.4).
    pub reported_require_local_confirm: Option<bool>,
    /// The version of the host service.
    pub reported_host_version: Option<String>,
    /// The platform the host service runs on.
    pub reported_platform: Option<String>,
    /// The operating system version (display text).
    pub reported_os_version: Option<String>,
    /// The last applied report or login of the control connection.
    pub last_seen_at: Option<UnixMillis>,
    /// The resource version (`ETag`).
    pub version: i64,
    /// The owner who created it.
    pub created_by: Uuid,
    /// When.
    pub created_at: UnixMillis,
    /// Last change.
    pub updated_at: UnixMillis,
}

impl Host {
    /// Whether the host counts as the server host (2.3): declared or reported.
    pub fn is_server_host(&self) -> bool {
        self.declared_server_host == Some(true) || self.reported_is_server_host == Some(true)
    }

    /// Whether the host has keys (confirming, active, disabled after a confirmation).
    pub fn has_keys(&self) -> bool {
        self.noise_public_key.is_some()
    }

    /// The reported session user names, in the reported order.
    pub fn reported_session_user_names(&self) -> Vec<&str> {
        self.reported_session_users
            .as_ref()
            .and_then(Value::as_array)
            .map(|users| {
                users
                    .iter()
                    .filter_map(|user| user.get("name").and_then(Value::as_str))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Whether the host's last report names `os_user` exactly (case included).
    pub fn reports_session_user(&self, os_user: &str) -> bool {
        self.reported_session_user_names().contains(&os_user)
    }

    /// The host as the API shows it to a reader (host.read). Without keys,
    /// `key_fingerprint` and `noise_public_key` are absent (3.3); the pairing
    /// code's hash and the failure counter are never shown. `session_users` are
    /// the valid assignments ([`session_users::host_view`]); `connected` is
    /// left to the reads of a node.
    pub fn to_api(&self, session_users: Vec<HostSessionUser>) -> bothy_api::hosts::Host {
        let keys = self.has_keys();
        bothy_api::hosts::Host {
            id: db::id_text(&self.id),
            name: self.name.clone(),
            state: self.state.as_str().to_owned(),
            disabled_reason: self
                .disabled_reason
                .map(|reason| reason.as_str().to_owned()),
            disabled_at: self.disabled_at,
            assigned_user_id: self.assigned_user_id.as_ref().map(db::id_text),
            noise_public_key: self.noise_public_key.clone().filter(|_| keys),
            key_fingerprint: self.key_fingerprint.clone().filter(|_| keys),
            key_generation: self.key_generation,
            pairing_expires_at: self.pairing_expires_at,
            llm_credentials: self.llm_credentials.as_str().to_owned(),
            credential_holder_id: self.credential_holder_id.as_ref().map(db::id_text),
            declared_server_host: self.declared_server_host,
            is_server_host: self.is_server_host(),
            reported_session_users: self.reported_session_users.clone(),
            reported_profiles: self.reported_profiles.clone(),
            reported_doctor: self.reported_doctor.clone(),
            reported_is_server_host: self.reported_is_server_host,
            reported_require_local_confirm: self.reported_require_local_confirm,
            reported_host_version: self.reported_host_version.clone(),
            reported_platform: self.reported_platform.clone(),
            reported_os_version: self.reported_os_version.clone(),
            last_seen_at: self.last_seen_at,
            version: self.version,
            created_at: self.created_at,
            updated_at: self.updated_at,
            session_users,
            connected: None,
        }
    }
}

/// The columns of [`Host`], in the order [`from_row`] reads them.
pub const COLUMNS: &str = "id, name, state, disabled_reason, disabled_at, assigned_user_id, \
     noise_public_key, auth_public_jwk, auth_jkt, key_fingerprint, key_generation, \
     pairing_code_hash, pairing_expires_at, fingerprint_failures, llm_credentials, \
     credential_holder_id, declared_server_host, reported_session_users, reported_profiles, \
     reported_doctor, reported_is_server_host, reported_require_local_confirm, \
     reported_host_version, reported_platform, reported_os_version, last_seen_at, version, \
     created_by, created_at, updated_at";

fn stored(column: &'static str) -> HostError {
    HostError::Stored(column)
}

fn opt_bool(row: &AnyRow, column: &'static str) -> Result<Option<bool>, HostError> {
    let is_null = row
        .try_get_raw(column)
        .map(|raw| sqlx::ValueRef::is_null(&raw))
        .map_err(|_| stored(column))?;
    if is_null {
        Ok(None)
    } else {
        db::get_bool(row, column).map(Some).map_err(HostError::Db)
    }
}

fn opt_json(row: &AnyRow, column: &'static str) -> Result<Option<Value>, HostError> {
    let text: Option<String> = row.try_get(column).map_err(|_| stored(column))?;
    text.map(|text| serde_json::from_str(&text).map_err(|_| stored(column)))
        .transpose()
}

/// A [`Host`] from a row selected with [`COLUMNS`].
pub fn from_row(row: &AnyRow) -> Result<Host, HostError> {
    let text = |column: &'static str| -> Result<String, HostError> {
        row.try_get::<String, _>(column).map_err(|_| stored(column))
    };
    let opt_text = |column: &'static str| -> Result<Option<String>, HostError> {
        row.try_get::<Option<String>, _>(column)
            .map_err(|_| stored(column))
    };
    let int = |column: &'static str| -> Result<i64, HostError> {
        row.try_get::<i64, _>(column).map_err(|_| stored(column))
    };
    let opt_int = |column: &'static str| -> Result<Option<i64>, HostError> {
        row.try_get::<Option<i64>, _>(column)
            .map_err(|_| stored(column))
    };
    Ok(Host {
        id: db::get_uuid(row, "id")?,
        name: text("name")?,
        state: HostState::parse(&text("state")?).ok_or(stored("hosts.state"))?,
        disabled_reason: opt_text("disabled_reason")?
            .map(|text| DisabledReason::parse(&text).ok_or(stored("hosts.disabled_reason")))
            .transpose()?,
        disabled_at: opt_int("disabled_at")?,
        assigned_user_id: db::get_opt_uuid(row, "assigned_user_id")?,
        noise_public_key: opt_text("noise_public_key")?,
        auth_public_jwk: opt_text("auth_public_jwk")?,
        auth_jkt: opt_text("auth_jkt")?,
        key_fingerprint: opt_text("key_fingerprint")?,
        key_generation: int("key_generation")?,
        pairing_code_hash: opt_text("pairing_code_hash")?,
        pairing_expires_at: opt_int("pairing_expires_at")?,
        fingerprint_failures: int("fingerprint_failures")?,
        llm_credentials: LlmCredentials::parse(&text("llm_credentials")?)
            .ok_or(stored("hosts.llm_credentials"))?,
        credential_holder_id: db::get_opt_uuid(row, "credential_holder_id")?,
        declared_server_host: opt_bool(row, "declared_server_host")?,
        reported_session_users: opt_json(row, "reported_session_users")?,
        reported_profiles: opt_json(row, "reported_profiles")?,
        reported_doctor: opt_json(row, "reported_doctor")?,
        reported_is_server_host: opt_bool(row, "reported_is_server_host")?,
        reported_require_local_confirm: opt_bool(row, "reported_require_local_confirm")?,
        reported_host_version: opt_text("reported_host_version")?,
        reported_platform: opt_text("reported_platform")?,
        reported_os_version: opt_text("reported_os_version")?,
        last_seen_at: opt_int("last_seen_at")?,
        version: int("version")?,
        created_by: db::get_uuid(row, "created_by")?,
        created_at: int("created_at")?,
        updated_at: int("updated_at")?,
    })
}

/// The host with this ID, if any.
pub async fn load(conn: &mut AnyConnection, host_id: Uuid) -> Result<Option<Host>, HostError> {
    let row = sqlx::query(&format!("SELECT {COLUMNS} FROM hosts WHERE id = $1"))
        .bind(db::id_text(&host_id))
        .fetch_optional(conn)
        .await
        .map_err(DbError::from)?;
    row.as_ref().map(from_row).transpose()
}

/// The host with this ID inside a unit of work, or 404. The unit of work holds
/// the write lock (SQLite `BEGIN IMMEDIATE`; PostgreSQL `FOR UPDATE`), so what
/// it reads stays true until it commits.
pub async fn load_for_update(uow: &mut UnitOfWork, host_id: Uuid) -> Result<Host, HostError> {
    let lock = match uow.engine() {
        db::Engine::Postgres => " FOR UPDATE",
        db::Engine::Sqlite => "",
    };
    let row = sqlx::query(&format!("SELECT {COLUMNS} FROM hosts WHERE id = $1{lock}"))
        .bind(db::id_text(&host_id))
        .fetch_optional(uow.conn())
        .await
        .map_err(DbError::from)?;
    match row {
        Some(row) => from_row(&row),
        None => Err(HostError::NotFound),
    }
}

/// Every host, oldest first.
pub async fn list(conn: &mut AnyConnection) -> Result<Vec<Host>, HostError> {
    let rows = sqlx::query(&format!("SELECT {COLUMNS} FROM hosts ORDER BY id"))
        .fetch_all(conn)
        .await
        .map_err(DbError::from)?;
    rows.iter().map(from_row).collect()
}

/// Raises `hosts.version` and `updated_at`; returns the new version. Every
/// change of what [`Host::to_json`] shows calls this once per unit of work.
pub async fn bump_version(uow: &mut UnitOfWork, host_id: Uuid) -> Result<i64, HostError> {
    let now = uow.now_ms();
    let row = sqlx::query(
        "UPDATE hosts SET version = version + 1, updated_at = $1 WHERE id = $2 RETURNING version",
    )
    .bind(now)
    .bind(db::id_text(&host_id))
    .fetch_optional(uow.conn())
    .await
    .map_err(DbError::from)?;
    let row = row.ok_or(HostError::NotFound)?;
    row.try_get::<i64, _>("version")
        .map_err(|_| stored("hosts.version"))
}

/// Stages `host.updated` (10.2) for everyone with host.read on the host:
/// `{host_id, version, state, key_changed}` — states, never names or keys.
pub fn host_updated(
    uow: &mut UnitOfWork,
    host_id: Uuid,
    version: i64,
    state: HostState,
    key_changed: bool,
) {
    let mut payload = Map::new();
    payload.insert("host_id".into(), json!(db::id_text(&host_id)));
    payload.insert("version".into(), json!(version));
    payload.insert("state".into(), json!(state.as_str()));
    payload.insert("key_changed".into(), json!(key_changed));
    uow.event(DurableEvent::new(
        EventKind::HostUpdated,
        Audience::HostReaders(host_id),
        payload,
    ));
}

code_enum! {
    /// The `reason` of a host `409 conflict` (13).
    pub enum HostConflict {
        /// The session user belongs or belonged to a person on this host, or the
        /// person has a valid assignment already (2.2).
        SessionUserTaken => "session_user_taken",
        /// host.pair with the login key of another host.
        HostKeyInUse => "host_key_in_use",
        /// host.pair with the discarded keys of this host (3.3).
        HostKeyReused => "host_key_reused",
        /// The host is retired: final (7.2).
        HostRetired => "host_retired",
        /// A valid grant with the same target, capability and recipient exists
        /// already (grant.create, 8.1).
        GrantExists => "grant_exists",
    }
}

code_enum! {
    /// The `reason` of `403 terminal_denied` (13).
    pub enum DenyReason {
        /// A non-owner on a host they are not assigned to (SR10).
        NotHostAssignee => "not_host_assignee",
        /// The server host, for a non-owner (SR10).
        ServerHostOwnerOnly => "server_host_owner_only",
        /// A personal host, for someone other than the holder (SR11, I6).
        I6HolderOnly => "i6_holder_only",
        /// No valid assignment of a session user the host reports (SR12).
        NoSessionUser => "no_session_user",
        /// terminal.max_sessions_per_person or _per_host reached.
        SessionLimit => "session_limit",
        /// The profile is not offered by the host.
        ProfileUnknown => "profile_unknown",
    }
}

/// Why a host operation did not happen. The one `From` below maps it to the
/// problem codes of section 13.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// An identity refusal (credential, step-up, owner required, ...).
    #[error(transparent)]
    Identity(#[from] IdentityError),
    /// `400 validation_failed` with every finding.
    #[error("validation failed ({} findings)", .0.len())]
    Invalid(Vec<Invalid>),
    /// `401 unauthenticated`: a pairing code that does not work (one body for
    /// every cause).
    #[error("pairing code refused")]
    PairingCodeRefused,
    /// `403 forbidden`: the principal has no terminal on the host at all.
    #[error("forbidden")]
    Forbidden,
    /// `403 terminal_denied` with a reason.
    #[error("terminal denied ({0})")]
    TerminalDenied(DenyReason),
    /// `404`: no such host, or no host.read on it.
    #[error("not found")]
    NotFound,
    /// `409 invalid_state_transition`.
    #[error("invalid state transition")]
    InvalidStateTransition,
    /// `409 conflict` with a reason.
    #[error("conflict ({0})")]
    Conflict(HostConflict),
    /// `409 fingerprint_mismatch` with `attempts_remaining`.
    #[error("fingerprint mismatch")]
    FingerprintMismatch {
        /// Attempts left; 0 means the host fell back to pairing.
        attempts_remaining: u32,
    },
    /// `409 i6_violation`.
    #[error("I6 violation")]
    I6Violation,
    /// `409 host_unavailable`.
    #[error("host unavailable")]
    HostUnavailable,
    /// The request body's strict decoding refused it (an unknown, missing,
    /// duplicate or mistyped member; 400 with its pointer).
    #[error(transparent)]
    Json(#[from] bothy_proto::json::JsonError),
    /// The `If-Match` check of an update refused it (428 / 412).
    #[error(transparent)]
    IfMatch(#[from] IfMatchRefusal),
    /// The idempotency key's storage refused it (422 reused, 409 in flight).
    #[error(transparent)]
    Idempotency(#[from] IdempotencyError),
    /// The database failed.
    #[error(transparent)]
    Db(#[from] DbError),
    /// A stored value does not decode.
    #[error("stored host data is unusable: {0}")]
    Stored(&'static str),
    /// The random source or hashing failed.
    #[error("host cryptography failed: {0}")]
    Crypto(&'static str),
}

/// Why the `If-Match` of an update does not let it through (DESIGN 3.4: an
/// update must name the version it was built on).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum IfMatchRefusal {
    /// No `If-Match` was sent (428 precondition_required).
    #[error("the update names no version")]
    Missing,
    /// Another version, or not one strong entity tag (412 precondition_failed).
    #[error("the update names another version")]
    Stale,
}

impl HostError {
    /// A 400 with one finding.
    pub fn invalid(pointer: impl Into<String>, code: &'static str) -> HostError {
        HostError::Invalid(vec![Invalid::at(pointer, code)])
    }
}

impl From<bothy_proto::ids::RandomError> for HostError {
    fn from(_: bothy_proto::ids::RandomError) -> Self {
        HostError::Crypto("the random source failed")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transitions_are_exactly_the_diagram() {
        use HostState::*;
        let edges = [
            (Pairing, Confirming),
            (Pairing, Pairing),
            (Confirming, Active),
            (Confirming, Pairing),
            (Active, Pairing),
            (Active, Disabled),
            (Disabled, Active),
            (Disabled, Pairing),
            (Active, Retired),
            (Disabled, Retired),
        ];
        for &from in HostState::ALL {
            for &to in HostState::ALL {
                assert_eq!(
                    check_transition(from, to).is_ok(),
                    edges.contains(&(from, to)),
                    "{from} -> {to}"
                );
            }
        }
    }
}
