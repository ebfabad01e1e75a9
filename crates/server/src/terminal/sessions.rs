//! Terminal sessions (spec 6.1 steps 1–4, 6.2 attach and quick reattach, 6.3
//! limits, 6.6, 8.4, 10.1, 13; DESIGN 3.4): openTerminalSession,
//! attachTerminalSession with its quick-reattach challenge, closeTerminalSession
//! and the reads.
//!
//! # Opening ([`open`])
//! The decision comes first, outside any transaction, in this order (the first
//! that fails answers): a person (`403 forbidden subject_kind_not_allowed`,
//! audited); `rl.terminal` of the person (`429`); the host exists (`404`); the
//! one [`authorize_audited`] (permission, SR11 = I6, SR10, SR12, host active);
//! the host service is connected with an applied report (`409
//! host_unavailable`); the profile is one the host reported (`403
//! terminal_denied profile_unknown`); with a profile of kind claude the
//! `workdir_index` is an index into the reported working directories of the
//! person's own session user (`profile_unknown`); the counts of the sessions
//! that are not closed stay below `terminal.max_sessions_per_person` and
//! `terminal.max_sessions_per_host` (`403 terminal_denied session_limit`).
//! Every refusal writes a deny entry of `terminal.open` with its `reason_code`.
//!
//! Then one unit of work (M2-46): on PostgreSQL the person's row is locked
//! first (`FOR UPDATE`; SQLite's `BEGIN IMMEDIATE` already runs one writer at a
//! time), the step-up is consumed ([`step_up::consume`], `401
//! step_up_required`), the host row is locked and re-read, and the decision is
//! taken again on the locked rows: when the host changed, `authorize` answers
//! differently, or a locked count reached its limit, the unit of work rolls
//! back (the step-up stays unconsumed) and the opening starts again with a new
//! decision, at most `database.tx_retry_max` times, then `503 unavailable`
//! (docs/decisions.md D-70). Otherwise the row is inserted (`opening`), the
//! token issued ([`token::issue`], `att = open`), `terminal.open` audited and
//! `terminal_session.changed` staged. Only after the commit, `session.open`
//! goes to the host's control connection; a failed send fails nothing, the
//! open deadline ends the opening later (6.1 step 4).
//!
//! # Attaching ([`attach`])
//! Only the session's person; a session that is not closed (`409
//! invalid_state_transition` for a closed one, D-72); the same authorize,
//! connection and profile checks. A step-up is consumed unless the request is
//! a quick reattach (6.2): a CLI login (never the console), the same device and
//! login session as the session's current ones, the session detached for at
//! most `terminal.quick_reattach_window`, and `device_proof` — the device key's
//! Ed25519 signature over a nonce of [`attach_challenge`] (D-71). A new token
//! replaces the stored jti; an attach to a session in `opening` restarts the
//! opening (`att = open` with the stored `workdir_index`, a new open
//! deadline). The session's `device_id` and `login_session_id` become the
//! attaching ones.
//!
//! # Closing ([`close`])
//! The person (`client_closed`) or an owner (`closed_by_owner`), through the
//! one end function; audit `terminal.close` with `session_id`, `close_reason`
//! and `closed_by`; the control connection tells the host (D-62).
//!
//! # Privacy
//! Nothing here logs or audits a token, a key, a nonce or a name of another
//! person; audit details are IDs, codes, flags and the profile name (10.1).

use std::fmt;

use bothy_proto::b64;
use bothy_proto::codes::CloseReason;
use bothy_proto::control::SessionOpen;
use bothy_proto::jws::Att;
use bothy_proto::report::ProfileKind;
use serde_json::{Map, Value, json};
use sqlx::any::AnyRow;
use sqlx::{AnyConnection, Row};
use uuid::Uuid;

use super::keys::{self, KeyError, TerminalSigner};
use super::links::ControlSignal;
use super::token::{self, IssuedToken, TokenError, TokenRequest};
use super::{EndScope, end};
use crate::audit::{
    AuditAction, AuditCode, AuditDetails, AuditEntry, ProfileName, TargetKind, code_enum,
};
use crate::clock::{UnixMillis, millis};
use crate::db::{self, Db, DbError, Engine, UnitOfWork};
use crate::events::{Audience, DurableEvent, EventKind};
use crate::hosts::{self, DenyReason, Host, HostError, pairing};
use crate::http::{ApiError, ProblemCode};
use crate::identity::login_sessions::ClientComponent;
use crate::identity::principal::{PersonPrincipal, Principal};
use crate::identity::step_up::{self, StepUpMethod, StepUpRefusal};
use crate::identity::{ForbiddenReason, IdentityError};
use crate::pepper::PepperPurpose;
use crate::permissions::authorize::{self, Action, Authorized, Denial, authorize_audited};
use crate::ratelimit::RetryAfter;
use crate::state::AppState;

/// The largest `columns` and `rows` of an opening (a terminal size in cells).
pub const SIZE_MAX: u32 = 10_000;

/// The page size of [`list`] without a `limit`.
pub const LIST_DEFAULT: u32 = 200;

/// The largest page of [`list`].
pub const LIST_MAX: u32 = 500;

/// Which sessions [`list`] returns, and which page.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ListQuery {
    /// Only sessions on this host (for an owner: every person's there).
    pub host_id: Option<Uuid>,
    /// Only open (not `closed`: `Some(true)`) or only closed sessions.
    pub open: Option<bool>,
    /// The cursor: the last session of the previous page; the page holds the
    /// sessions after it in the order of the list.
    pub after: Option<Uuid>,
    /// The page size, 1..=[`LIST_MAX`].
    pub limit: u32,
}

/// A page of [`list`].
#[derive(Debug)]
pub struct SessionPage {
    /// The sessions, newest first.
    pub rows: Vec<SessionRow>,
    /// The cursor of the next page (the last row's ID) when there may be more.
    pub next: Option<Uuid>,
}

code_enum! {
    /// `terminal_sessions.state` (6.6).
    pub enum SessionState {
        /// Created, handshake running.
        Opening => "opening",
        /// PTY running, device connected.
        Active => "active",
        /// PTY running, no device connected; reattach possible.
        Detached => "detached",
        /// Ended; `close_reason` set.
        Closed => "closed",
    }
}

code_enum! {
    /// The `reason_code` of a deny entry of this module that is not a
    /// [`Denial`] of authorize, a [`DenyReason`] or a [`StepUpRefusal`].
    pub enum Refusal {
        /// The host service has no control connection with an applied report.
        HostNotConnected => "host_unavailable",
        /// The session is closed.
        SessionClosed => "session_closed",
        /// Not the session's person (nor an owner, for close).
        NotSessionPerson => "not_found",
        /// Quick reattach from the console (never, 6.2).
        QuickReattachConsole => "quick_reattach_console",
        /// Quick reattach from another device or login session.
        QuickReattachOtherDevice => "quick_reattach_other_device",
        /// Quick reattach of a session that is not detached.
        QuickReattachNotDetached => "quick_reattach_not_detached",
        /// Quick reattach after `terminal.quick_reattach_window`.
        QuickReattachWindowPassed => "quick_reattach_window_passed",
        /// The device proof does not verify (nonce or signature).
        DeviceProofInvalid => "device_proof_invalid",
    }
}

code_enum! {
    /// `closed_by` of a `terminal.close` entry: who closed.
    pub enum ClosedBy {
        /// The session's person (`client_closed`).
        Person => "person",
        /// An owner (`closed_by_owner`).
        Owner => "owner",
    }
}

/// Why a terminal session call did not happen. The one `From` below maps it
/// to the problem codes of section 13.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// A host, identity or permission refusal, or the database.
    #[error(transparent)]
    Host(#[from] HostError),
    /// The request's `client_ephemeral_key_hash` or `workdir_index` (400), or
    /// a fault of the token's parts (500).
    #[error(transparent)]
    Token(#[from] TokenError),
    /// The signing keys.
    #[error(transparent)]
    Keys(#[from] KeyError),
    /// `rl.terminal` of the person is empty.
    #[error("rate limited")]
    RateLimited(RetryAfter),
    /// The opening lost its race `database.tx_retry_max` times (503).
    #[error("the opening was contended too often")]
    Contended,
}

impl From<IdentityError> for SessionError {
    fn from(error: IdentityError) -> Self {
        SessionError::Host(HostError::Identity(error))
    }
}

impl From<DbError> for SessionError {
    fn from(error: DbError) -> Self {
        SessionError::Host(HostError::Db(error))
    }
}

impl From<SessionError> for ApiError {
    fn from(error: SessionError) -> Self {
        match error {
            SessionError::Host(error) => error.into(),
            SessionError::Token(error) => match error.field_error() {
                Some((pointer, code)) => {
                    ApiError::new(ProblemCode::ValidationFailed).with_error(pointer, code)
                }
                None => ApiError::internal(error),
            },
            SessionError::Keys(error) => ApiError::internal(error),
            SessionError::RateLimited(retry) => {
                ApiError::new(ProblemCode::RateLimited).with_retry_after(retry.seconds)
            }
            SessionError::Contended => ApiError::new(ProblemCode::Unavailable),
        }
    }
}

fn denied(reason: DenyReason) -> SessionError {
    SessionError::Host(HostError::TerminalDenied(reason))
}

fn step_up_required(refusal: StepUpRefusal) -> SessionError {
    IdentityError::StepUpRequired(refusal).into()
}

/// openTerminalSession's request (DESIGN 3.4), decoded by the route.
#[derive(Clone, PartialEq, Eq)]
pub struct OpenRequest {
    /// The host.
    pub host_id: Uuid,
    /// The profile's name.
    pub profile: String,
    /// The terminal width in cells (1..=[`SIZE_MAX`]).
    pub columns: u32,
    /// The terminal height in cells (1..=[`SIZE_MAX`]).
    pub rows: u32,
    /// base64url of SHA-256 of the device's ephemeral Noise key (`cek`).
    pub client_ephemeral_key_hash: String,
    /// With a profile of kind claude: the index of the working directory.
    pub workdir_index: Option<u32>,
    /// The step-up to consume.
    pub step_up_id: Option<Uuid>,
    /// The client warned about a changed host key (audit `pin_changed`).
    pub pin_changed: bool,
}

impl fmt::Debug for OpenRequest {
    /// Without the profile name and the key hash.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenRequest")
            .field("host_id", &self.host_id)
            .field("workdir_index", &self.workdir_index)
            .field("pin_changed", &self.pin_changed)
            .finish_non_exhaustive()
    }
}

/// The device's proof of a quick reattach: its key's signature over a nonce
/// of [`attach_challenge`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceProof {
    /// The nonce as [`attach_challenge`] returned it.
    pub nonce: String,
    /// base64url of the 64-byte Ed25519 signature over [`proof_message`].
    pub signature: String,
}

/// attachTerminalSession's request (DESIGN 3.4), decoded by the route.
#[derive(Clone, PartialEq, Eq)]
pub struct AttachRequest {
    /// base64url of SHA-256 of the device's new ephemeral Noise key.
    pub client_ephemeral_key_hash: String,
    /// A step-up to consume; without one the request must be a quick reattach.
    pub step_up_id: Option<Uuid>,
    /// The proof of a quick reattach.
    pub device_proof: Option<DeviceProof>,
    /// The client warned about a changed host key.
    pub pin_changed: bool,
}

impl fmt::Debug for AttachRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AttachRequest")
            .field("step_up", &self.step_up_id.is_some())
            .field("device_proof", &self.device_proof.is_some())
            .field("pin_changed", &self.pin_changed)
            .finish_non_exhaustive()
    }
}

/// What open and attach answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The session.
    pub session_id: Uuid,
    /// Its host.
    pub host_id: Uuid,
    /// The terminal session token (never log it).
    pub token: IssuedToken,
    /// The host's static Noise key (base64url).
    pub noise_public_key: String,
    /// The fingerprint of the host's keys (display form).
    pub key_fingerprint: String,
    /// The host's key generation (devices pin it with the key).
    pub key_generation: i64,
    /// The grant time plus `terminal.open_timeout`.
    pub open_deadline_at: UnixMillis,
}

impl Grant {
    /// The device stream's path.
    pub fn stream_path(&self) -> String {
        bothy_proto::stream::stream_path(&self.session_id)
    }

    /// The response body of open and attach.
    pub fn to_json(&self) -> Value {
        json!({
            "session_id": db::id_text(&self.session_id),
            "token": self.token.token,
            "stream_path": self.stream_path(),
            "noise_public_key": self.noise_public_key,
            "key_fingerprint": self.key_fingerprint,
            "key_generation": self.key_generation,
            "expires_at": self.token.expires_at,
        })
    }
}

/// A nonce for a quick reattach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Challenge {
    /// The nonce the device signs (base64url; opaque to the client).
    pub nonce: String,
    /// Until when it is accepted (Unix ms).
    pub expires_at: UnixMillis,
}

/// A session as stored (the columns the API shows and this module needs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRow {
    /// `id`.
    pub id: Uuid,
    /// The host.
    pub host_id: Uuid,
    /// The person.
    pub person_id: Uuid,
    /// The current login session.
    pub login_session_id: Uuid,
    /// The current device (none for the console).
    pub device_id: Option<Uuid>,
    /// The assignment it runs in.
    pub host_session_user_id: Uuid,
    /// The profile name.
    pub profile: String,
    /// The state.
    pub state: SessionState,
    /// Set exactly when closed.
    pub close_reason: Option<String>,
    /// With open_failed and host_policy_violation.
    pub close_detail: Option<String>,
    /// When it was opened.
    pub created_at: UnixMillis,
    /// When the PTY started.
    pub started_at: Option<UnixMillis>,
    /// When it ended.
    pub ended_at: Option<UnixMillis>,
    /// When the device side went away.
    pub detached_at: Option<UnixMillis>,
    /// The current token's jti.
    pub token_jti: Option<Uuid>,
    /// The index of the working directory (claude).
    pub workdir_index: Option<u32>,
    /// The owner opened on another person's host.
    pub foreign_assignee: bool,
    /// The row version.
    pub version: i64,
}

const COLUMNS: &str = "id, host_id, person_id, login_session_id, device_id, host_session_user_id, \
     profile, state, close_reason, close_detail, created_at, started_at, ended_at, detached_at, \
     token_jti, workdir_index, foreign_assignee, version";

fn stored(column: &'static str) -> SessionError {
    SessionError::Host(HostError::Stored(column))
}

impl SessionRow {
    fn from_row(row: &AnyRow) -> Result<SessionRow, SessionError> {
        let int = |column: &'static str| row.try_get::<i64, _>(column).map_err(|_| stored(column));
        let opt_int = |column: &'static str| {
            row.try_get::<Option<i64>, _>(column)
                .map_err(|_| stored(column))
        };
        let text =
            |column: &'static str| row.try_get::<String, _>(column).map_err(|_| stored(column));
        let state =
            SessionState::parse(&text("state")?).ok_or(stored("terminal_sessions.state"))?;
        let workdir_index = opt_int("workdir_index")?
            .map(|index| u32::try_from(index).map_err(|_| stored("workdir_index")))
            .transpose()?;
        Ok(SessionRow {
            id: db::get_uuid(row, "id")?,
            host_id: db::get_uuid(row, "host_id")?,
            person_id: db::get_uuid(row, "person_id")?,
            login_session_id: db::get_uuid(row, "login_session_id")?,
            device_id: db::get_opt_uuid(row, "device_id")?,
            host_session_user_id: db::get_uuid(row, "host_session_user_id")?,
            profile: text("profile")?,
            state,
            close_reason: row
                .try_get::<Option<String>, _>("close_reason")
                .map_err(|_| stored("close_reason"))?,
            close_detail: row
                .try_get::<Option<String>, _>("close_detail")
                .map_err(|_| stored("close_detail"))?,
            created_at: int("created_at")?,
            started_at: opt_int("started_at")?,
            ended_at: opt_int("ended_at")?,
            detached_at: opt_int("detached_at")?,
            token_jti: db::get_opt_uuid(row, "token_jti")?,
            workdir_index,
            foreign_assignee: db::get_bool(row, "foreign_assignee")?,
            version: int("version")?,
        })
    }

    /// When `terminal.max_session_duration` ends it (from `created_at`, the
    /// opening; reattaching does not move it).
    pub fn max_ends_at(&self, state: &AppState) -> UnixMillis {
        self.created_at
            .saturating_add(millis(state.config().terminal.max_session_duration))
    }

    /// The form the reads show: state, profile, host, times, and the time
    /// left until the maximum duration (`remaining_ms`, 0 once passed or closed).
    pub fn to_json(&self, state: &AppState, now: UnixMillis) -> Value {
        let max_ends_at = self.max_ends_at(state);
        let remaining = if self.state == SessionState::Closed {
            0
        } else {
            max_ends_at.saturating_sub(now).max(0)
        };
        let mut object = Map::new();
        object.insert("session_id".into(), json!(db::id_text(&self.id)));
        object.insert("host_id".into(), json!(db::id_text(&self.host_id)));
        object.insert("person_id".into(), json!(db::id_text(&self.person_id)));
        object.insert("profile".into(), json!(self.profile));
        object.insert("state".into(), json!(self.state.as_str()));
        for (key, value) in [
            ("close_reason", &self.close_reason),
            ("close_detail", &self.close_detail),
        ] {
            if let Some(value) = value {
                object.insert(key.into(), json!(value));
            }
        }
        object.insert("created_at".into(), json!(self.created_at));
        for (key, value) in [
            ("started_at", self.started_at),
            ("detached_at", self.detached_at),
            ("ended_at", self.ended_at),
        ] {
            if let Some(value) = value {
                object.insert(key.into(), json!(value));
            }
        }
        if let Some(index) = self.workdir_index {
            object.insert("workdir_index".into(), json!(index));
        }
        object.insert("foreign_assignee".into(), json!(self.foreign_assignee));
        object.insert("max_ends_at".into(), json!(max_ends_at));
        object.insert("remaining_ms".into(), json!(remaining));
        object.insert("version".into(), json!(self.version));
        Value::Object(object)
    }
}

/// The session with this ID.
pub async fn load(
    conn: &mut AnyConnection,
    session_id: Uuid,
) -> Result<Option<SessionRow>, SessionError> {
    let row = sqlx::query(&format!(
        "SELECT {COLUMNS} FROM terminal_sessions WHERE id = $1"
    ))
    .bind(db::id_text(&session_id))
    .fetch_optional(conn)
    .await
    .map_err(DbError::from)?;
    row.as_ref().map(SessionRow::from_row).transpose()
}

// ---------------------------------------------------------------------------
// Shared checks
// ---------------------------------------------------------------------------

/// The kind of the profile `name` in the host's last report, if it offers it.
pub fn reported_profile_kind(host: &Host, name: &str) -> Option<ProfileKind> {
    host.reported_profiles
        .as_ref()?
        .as_array()?
        .iter()
        .find(|profile| profile.get("name").and_then(Value::as_str) == Some(name))
        .and_then(|profile| profile.get("kind")?.as_str())
        .and_then(|kind| ProfileKind::parse(kind).ok())
}

/// How many working directories the host reported for the session user
/// `os_user` (0 when it reports none or not the name).
pub fn reported_workdir_count(host: &Host, os_user: &str) -> usize {
    host.reported_session_users
        .as_ref()
        .and_then(Value::as_array)
        .and_then(|users| {
            users
                .iter()
                .find(|user| user.get("name").and_then(Value::as_str) == Some(os_user))
        })
        .and_then(|user| user.get("workdirs")?.as_array().map(Vec::len))
        .unwrap_or(0)
}

fn person_of(principal: &Principal) -> Option<&PersonPrincipal> {
    match principal {
        Principal::Person(person) => Some(person),
        Principal::Service(_) => None,
    }
}

fn take_token(
    state: &AppState,
    person: &PersonPrincipal,
    now: UnixMillis,
) -> Result<(), SessionError> {
    state
        .terminal_limit()
        .try_take(&person.person_id, now)
        .map_err(SessionError::RateLimited)
}

/// A deny entry of `action` with the host as target, `host_id`, the session
/// when there is one, and `reason_code`.
fn deny_entry(
    principal: &Principal,
    action: AuditAction,
    host_id: Option<Uuid>,
    session_id: Option<Uuid>,
    reason: impl AuditCode,
) -> AuditEntry {
    let mut details = AuditDetails::new().code("reason_code", reason);
    let mut entry = AuditEntry::deny(action, principal.actor());
    if let Some(host_id) = host_id {
        details = details.id("host_id", host_id);
        entry = entry.target(TargetKind::Host, host_id);
    }
    if let Some(session_id) = session_id {
        details = details.id("session_id", session_id);
        entry = entry.target(TargetKind::TerminalSession, session_id);
    }
    entry.details(details)
}

/// Writes `entry` in a fresh unit of work, then returns `error` (or the
/// database's error).
async fn refuse(db: &Db, now: UnixMillis, entry: AuditEntry, error: SessionError) -> SessionError {
    let written = async {
        let mut uow = db.begin(now).await?;
        uow.audit(entry);
        uow.commit().await
    };
    match written.await {
        Ok(_) => error,
        Err(db_error) => db_error.into(),
    }
}

/// The host, or 404.
async fn load_host(db: &Db, host_id: Uuid) -> Result<Host, SessionError> {
    let mut conn = db.pool().acquire().await.map_err(DbError::from)?;
    hosts::load(&mut conn, host_id)
        .await?
        .ok_or(SessionError::Host(HostError::NotFound))
}

/// The counts of sessions that are not closed: the person's, the host's.
async fn open_counts(
    conn: &mut AnyConnection,
    person_id: Uuid,
    host_id: Uuid,
) -> Result<(i64, i64), SessionError> {
    let row = sqlx::query(
        "SELECT \
           (SELECT COUNT(*) FROM terminal_sessions WHERE person_id = $1 AND state <> 'closed') \
             AS person_count, \
           (SELECT COUNT(*) FROM terminal_sessions WHERE host_id = $2 AND state <> 'closed') \
             AS host_count",
    )
    .bind(db::id_text(&person_id))
    .bind(db::id_text(&host_id))
    .fetch_one(conn)
    .await
    .map_err(DbError::from)?;
    let person_count: i64 = row.try_get("person_count").map_err(|_| stored("count"))?;
    let host_count: i64 = row.try_get("host_count").map_err(|_| stored("count"))?;
    Ok((person_count, host_count))
}

fn within_limits(state: &AppState, (person_count, host_count): (i64, i64)) -> bool {
    let terminal = &state.config().terminal;
    person_count < i64::from(terminal.max_sessions_per_person)
        && host_count < i64::from(terminal.max_sessions_per_host)
}

/// The signer of now; the first key is created if the database has none.
async fn signer(state: &AppState, now: UnixMillis) -> Result<TerminalSigner, SessionError> {
    keys::ensure_active(state.db(), state.pepper(), now).await?;
    Ok(keys::signer(state.db(), state.pepper(), now).await?)
}

/// Consumes the step-up in `uow`; the console takes only passkey step-ups.
/// On a refusal the caller drops `uow` and audits.
async fn consume_step_up(
    uow: &mut UnitOfWork,
    person: &PersonPrincipal,
    step_up_id: Uuid,
    now: UnixMillis,
) -> Result<Result<(), StepUpRefusal>, SessionError> {
    match step_up::consume(uow, person.login_session_id, step_up_id, now).await {
        Ok(consumed) => {
            if person.client_component == ClientComponent::Console
                && consumed.method != StepUpMethod::Webauthn
            {
                return Ok(Err(StepUpRefusal::PasskeyRequired));
            }
            Ok(Ok(()))
        }
        Err(IdentityError::StepUpRequired(refusal)) => Ok(Err(refusal)),
        Err(other) => Err(other.into()),
    }
}

/// Locks the person's row for the rest of the unit of work (PostgreSQL
/// `FOR UPDATE`; SQLite holds the write lock already): openings of one person
/// queue here, before the step-up and the host row are locked.
async fn lock_person(uow: &mut UnitOfWork, person_id: Uuid) -> Result<(), SessionError> {
    if uow.engine() == Engine::Postgres {
        sqlx::query("SELECT principal_id FROM persons WHERE principal_id = $1 FOR UPDATE")
            .bind(db::id_text(&person_id))
            .fetch_optional(uow.conn())
            .await
            .map_err(DbError::from)?;
    }
    Ok(())
}

fn changed_event(
    uow: &mut UnitOfWork,
    row_person: Uuid,
    session_id: Uuid,
    host_id: Uuid,
    state: SessionState,
) {
    let mut payload = Map::new();
    payload.insert("session_id".into(), json!(db::id_text(&session_id)));
    payload.insert("host_id".into(), json!(db::id_text(&host_id)));
    payload.insert("state".into(), json!(state.as_str()));
    uow.event(DurableEvent::new(
        EventKind::TerminalSessionChanged,
        Audience::Person(row_person),
        payload,
    ));
}

/// The details of terminal.open and terminal.attach (10.1).
fn grant_details(
    host_id: Uuid,
    session_id: Uuid,
    profile: &ProfileName,
    device_id: Option<Uuid>,
    pin_changed: bool,
    foreign_assignee: bool,
) -> AuditDetails {
    let mut details = AuditDetails::new()
        .id("host_id", host_id)
        .id("session_id", session_id)
        .profile(profile)
        .flag("pin_changed", pin_changed)
        .flag("foreign_assignee", foreign_assignee);
    if let Some(device_id) = device_id {
        details = details.id("device_id", device_id);
    }
    details
}

/// The token's `dev`: the device of a CLI login; the console has no device
/// key, so its login session stands in (D-73).
fn token_device(person: &PersonPrincipal) -> Uuid {
    person.device_id.unwrap_or(person.login_session_id)
}

fn host_keys(host: &Host) -> Result<(String, String), SessionError> {
    let noise = host
        .noise_public_key
        .clone()
        .ok_or(stored("hosts.noise_public_key"))?;
    let fingerprint = host
        .key_fingerprint
        .clone()
        .ok_or(stored("hosts.key_fingerprint"))?;
    Ok((noise, fingerprint))
}

fn send_session_open(state: &AppState, host_id: Uuid, session_id: Uuid, deadline: UnixMillis) {
    let signal = ControlSignal::SessionOpen(SessionOpen {
        session_id,
        expires_at: u64::try_from(deadline).unwrap_or(0),
    });
    if state.control_links().send(host_id, signal).is_err() {
        // 6.1 step 4: the request stands; the open deadline ends the opening.
        tracing::info!(%session_id, "session.open not handed to the control connection");
    }
}

/// The checks of the decision that follow authorize, for open and attach:
/// connected, profile known; the profile's kind.
async fn check_host_side(
    state: &AppState,
    principal: &Principal,
    action: AuditAction,
    host: &Host,
    session_id: Option<Uuid>,
    profile: &str,
    now: UnixMillis,
) -> Result<ProfileKind, SessionError> {
    if !state.control_links().is_connected(host.id) {
        let entry = deny_entry(
            principal,
            action,
            Some(host.id),
            session_id,
            Refusal::HostNotConnected,
        );
        return Err(refuse(state.db(), now, entry, HostError::HostUnavailable.into()).await);
    }
    match reported_profile_kind(host, profile) {
        Some(kind) => Ok(kind),
        None => {
            let entry = deny_entry(
                principal,
                action,
                Some(host.id),
                session_id,
                DenyReason::ProfileUnknown,
            );
            Err(refuse(state.db(), now, entry, denied(DenyReason::ProfileUnknown)).await)
        }
    }
}

// ---------------------------------------------------------------------------
// openTerminalSession
// ---------------------------------------------------------------------------

/// What one attempt of the opening's unit of work came to.
enum Attempt<T> {
    Done(T),
    /// The locked rows differ from the decision: decide again.
    Again,
}

/// openTerminalSession (module docs).
pub async fn open(
    state: &AppState,
    principal: &Principal,
    request: &OpenRequest,
) -> Result<Grant, SessionError> {
    let now = state.clock().now_ms();
    let person = principal
        .require_person(state.db(), now, AuditAction::TerminalOpen)
        .await?;
    take_token(state, person, now)?;
    token::parse_client_ephemeral_key_hash(&request.client_ephemeral_key_hash)?;
    let signer = signer(state, now).await?;
    let retries = state.config().database.tx_retry_max;
    let mut attempt = 0;
    loop {
        let decision = decide_open(state, principal, request, now).await?;
        match open_once(state, principal, person, request, &decision, &signer, now).await {
            Ok(Attempt::Done(grant)) => {
                send_session_open(
                    state,
                    grant.host_id,
                    grant.session_id,
                    grant.open_deadline_at,
                );
                return Ok(grant);
            }
            Ok(Attempt::Again) | Err(SessionError::Host(HostError::Db(DbError::Busy(_)))) => {
                attempt += 1;
                if attempt > retries {
                    tracing::warn!(attempts = attempt, "terminal.open contended; giving up");
                    return Err(SessionError::Contended);
                }
            }
            Err(error) => return Err(error),
        }
    }
}

/// The decision of an opening, taken outside the unit of work.
struct OpenDecision {
    host: Host,
    authorized: Authorized,
    kind: ProfileKind,
}

async fn decide_open(
    state: &AppState,
    principal: &Principal,
    request: &OpenRequest,
    now: UnixMillis,
) -> Result<OpenDecision, SessionError> {
    let db = state.db();
    let action = AuditAction::TerminalOpen;
    let host = load_host(db, request.host_id).await?;
    let authorized = authorize_audited(db, now, principal, Action::TerminalOpen, &host).await?;
    let kind =
        check_host_side(state, principal, action, &host, None, &request.profile, now).await?;
    token::check_workdir_index(kind, Att::Open, request.workdir_index)?;
    let session_user = authorized
        .session_user
        .as_ref()
        .ok_or(stored("session user of a terminal decision"))?;
    if let Some(index) = request.workdir_index {
        let count = reported_workdir_count(&host, &session_user.os_user);
        if usize::try_from(index).map_or(true, |index| index >= count) {
            let entry = deny_entry(
                principal,
                action,
                Some(host.id),
                None,
                DenyReason::ProfileUnknown,
            );
            return Err(refuse(db, now, entry, denied(DenyReason::ProfileUnknown)).await);
        }
    }
    let counts = {
        let mut conn = db.pool().acquire().await.map_err(DbError::from)?;
        open_counts(&mut conn, authorized.person_id, host.id).await?
    };
    if !within_limits(state, counts) {
        let entry = deny_entry(
            principal,
            action,
            Some(host.id),
            None,
            DenyReason::SessionLimit,
        );
        return Err(refuse(db, now, entry, denied(DenyReason::SessionLimit)).await);
    }
    Ok(OpenDecision {
        host,
        authorized,
        kind,
    })
}

async fn open_once(
    state: &AppState,
    principal: &Principal,
    person: &PersonPrincipal,
    request: &OpenRequest,
    decision: &OpenDecision,
    signer: &TerminalSigner,
    now: UnixMillis,
) -> Result<Attempt<Grant>, SessionError> {
    let db = state.db();
    let config = &state.config().terminal;
    let host_id = decision.host.id;
    let mut uow = db.begin(now).await?;
    lock_person(&mut uow, person.person_id).await?;
    let consumed = match request.step_up_id {
        Some(step_up_id) => consume_step_up(&mut uow, person, step_up_id, now).await?,
        None => Err(StepUpRefusal::Missing),
    };
    if let Err(refusal) = consumed {
        drop(uow);
        let entry = deny_entry(
            principal,
            AuditAction::TerminalOpen,
            Some(host_id),
            None,
            refusal,
        );
        return Err(refuse(db, now, entry, step_up_required(refusal)).await);
    }
    // The decision again, on locked rows (M2-46).
    let locked = hosts::load_for_update(&mut uow, host_id).await?;
    if locked != decision.host {
        return Ok(Attempt::Again);
    }
    match authorize::authorize(uow.conn(), principal, Action::TerminalOpen, &locked, now).await {
        Ok(again) if again == decision.authorized => {}
        Ok(_) => return Ok(Attempt::Again),
        Err(error) if Denial::of(&error).is_some() => return Ok(Attempt::Again),
        Err(error) => return Err(error.into()),
    }
    if !within_limits(
        state,
        open_counts(uow.conn(), person.person_id, host_id).await?,
    ) {
        return Ok(Attempt::Again);
    }

    let session_user = decision
        .authorized
        .session_user
        .as_ref()
        .ok_or(stored("session user of a terminal decision"))?;
    let profile = ProfileName::new(&request.profile).map_err(|_| TokenError::InvalidProfileName)?;
    let instance_id = pairing::instance_id(&mut uow).await?;
    let session_id = db::new_id(now)?;
    let issued = token::issue(
        signer,
        &TokenRequest {
            instance_id: &instance_id,
            host_id,
            person_id: person.person_id,
            session_id,
            device_id: token_device(person),
            profile: profile.as_str(),
            profile_kind: decision.kind,
            client_ephemeral_key_hash: &request.client_ephemeral_key_hash,
            own: decision.authorized.is_owner,
            os_user: &session_user.os_user,
            workdir_index: request.workdir_index,
            att: Att::Open,
        },
        config.session_token_ttl,
        now,
    )?;
    let open_deadline_at = now.saturating_add(millis(config.open_timeout));
    sqlx::query(
        "INSERT INTO terminal_sessions (id, host_id, person_id, login_session_id, device_id, \
           host_session_user_id, profile, state, created_at, version, token_jti, \
           token_expires_at, open_deadline_at, workdir_index, foreign_assignee) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, 'opening', $8, 1, $9, $10, $11, $12, $13)",
    )
    .bind(db::id_text(&session_id))
    .bind(db::id_text(&host_id))
    .bind(db::id_text(&person.person_id))
    .bind(db::id_text(&person.login_session_id))
    .bind(person.device_id.map(|id| db::id_text(&id)))
    .bind(db::id_text(&session_user.id))
    .bind(profile.as_str())
    .bind(now)
    .bind(db::id_text(&issued.jti))
    .bind(issued.expires_at)
    .bind(open_deadline_at)
    .bind(request.workdir_index.map(i64::from))
    .bind(decision.authorized.foreign_assignee)
    .execute(uow.conn())
    .await
    .map_err(DbError::from)?;
    uow.audit(
        AuditEntry::allow(AuditAction::TerminalOpen, principal.actor())
            .target(TargetKind::TerminalSession, session_id)
            .details(grant_details(
                host_id,
                session_id,
                &profile,
                person.device_id,
                request.pin_changed,
                decision.authorized.foreign_assignee,
            )),
    );
    changed_event(
        &mut uow,
        person.person_id,
        session_id,
        host_id,
        SessionState::Opening,
    );
    uow.commit().await?;
    let (noise_public_key, key_fingerprint) = host_keys(&locked)?;
    Ok(Attempt::Done(Grant {
        session_id,
        host_id,
        token: issued,
        noise_public_key,
        key_fingerprint,
        key_generation: locked.key_generation,
        open_deadline_at,
    }))
}

// ---------------------------------------------------------------------------
// Quick reattach: the nonce and the proof
// ---------------------------------------------------------------------------

/// The version byte of a nonce.
const NONCE_VERSION: u8 = 1;
/// version + session + jti + login session + expires_at + random.
const NONCE_PAYLOAD_LEN: usize = 1 + 16 + 16 + 16 + 8 + 16;
const NONCE_LEN: usize = NONCE_PAYLOAD_LEN + 32;

/// The text the device key signs for a quick reattach: a fixed label, the
/// session, the nonce and the new `client_ephemeral_key_hash`, one per line.
pub fn proof_message(session_id: Uuid, nonce: &str, client_ephemeral_key_hash: &str) -> Vec<u8> {
    format!(
        "bothy.v1.quick_reattach\n{}\n{nonce}\n{client_ephemeral_key_hash}",
        db::id_text(&session_id)
    )
    .into_bytes()
}

fn nonce_payload(
    session_id: Uuid,
    token_jti: Uuid,
    login_session_id: Uuid,
    expires_at: UnixMillis,
    random: &[u8; 16],
) -> Vec<u8> {
    let mut payload = Vec::with_capacity(NONCE_PAYLOAD_LEN);
    payload.push(NONCE_VERSION);
    payload.extend_from_slice(session_id.as_bytes());
    payload.extend_from_slice(token_jti.as_bytes());
    payload.extend_from_slice(login_session_id.as_bytes());
    payload.extend_from_slice(&expires_at.to_be_bytes());
    payload.extend_from_slice(random);
    payload
}

/// A nonce for the session's current grant: stateless (MAC of the pepper),
/// bound to the session, its current `token_jti` (so any later grant makes it
/// worthless: single use), the caller's login session and an expiry of
/// `terminal.step_up_max_age` (D-71).
pub async fn attach_challenge(
    state: &AppState,
    principal: &Principal,
    session_id: Uuid,
) -> Result<Challenge, SessionError> {
    let now = state.clock().now_ms();
    let person = person_of(principal).ok_or(IdentityError::Forbidden(
        ForbiddenReason::SubjectKindNotAllowed,
    ))?;
    let row = {
        let mut conn = state.db().pool().acquire().await.map_err(DbError::from)?;
        load(&mut conn, session_id).await?
    };
    let row = match row {
        Some(row) if row.person_id == person.person_id => row,
        _ => return Err(HostError::NotFound.into()),
    };
    if row.state == SessionState::Closed {
        return Err(HostError::InvalidStateTransition.into());
    }
    let jti = row.token_jti.ok_or(stored("terminal_sessions.token_jti"))?;
    let expires_at = now.saturating_add(millis(state.config().terminal.step_up_max_age));
    let mut random = [0u8; 16];
    getrandom::fill(&mut random).map_err(|_| HostError::Crypto("the random source failed"))?;
    let mut bytes = nonce_payload(
        session_id,
        jti,
        person.login_session_id,
        expires_at,
        &random,
    );
    let mac = state.pepper().mac(PepperPurpose::ReattachNonce, &bytes);
    bytes.extend_from_slice(&mac);
    Ok(Challenge {
        nonce: b64::encode(&bytes),
        expires_at,
    })
}

/// Whether `proof` is a valid quick-reattach proof for `row` by `person` now.
async fn verify_proof(
    state: &AppState,
    person: &PersonPrincipal,
    row: &SessionRow,
    proof: &DeviceProof,
    client_ephemeral_key_hash: &str,
    now: UnixMillis,
) -> Result<bool, SessionError> {
    let Ok(bytes) = b64::decode(&proof.nonce) else {
        return Ok(false);
    };
    if bytes.len() != NONCE_LEN || bytes[0] != NONCE_VERSION {
        return Ok(false);
    }
    let (payload, mac) = bytes.split_at(NONCE_PAYLOAD_LEN);
    let expected = state.pepper().mac(PepperPurpose::ReattachNonce, payload);
    if !bool::from(subtle::ConstantTimeEq::ct_eq(mac, &expected[..])) {
        return Ok(false);
    }
    let id_at = |offset: usize| {
        let mut id = [0u8; 16];
        id.copy_from_slice(&payload[offset..offset + 16]);
        Uuid::from_bytes(id)
    };
    let mut expiry = [0u8; 8];
    expiry.copy_from_slice(&payload[49..57]);
    let expires_at = i64::from_be_bytes(expiry);
    if id_at(1) != row.id
        || Some(id_at(17)) != row.token_jti
        || id_at(33) != person.login_session_id
        || expires_at < now
    {
        return Ok(false);
    }
    let Some(device_id) = person.device_id else {
        return Ok(false);
    };
    let public_key: Option<String> = {
        let mut conn = state.db().pool().acquire().await.map_err(DbError::from)?;
        sqlx::query_scalar(
            "SELECT public_key FROM devices WHERE id = $1 AND person_id = $2 AND revoked_at IS NULL",
        )
        .bind(db::id_text(&device_id))
        .bind(db::id_text(&person.person_id))
        .fetch_optional(&mut *conn)
        .await
        .map_err(DbError::from)?
    };
    let Some(public_key) = public_key else {
        return Ok(false);
    };
    let (Ok(key), Ok(signature)) = (
        b64::decode_array::<32>(&public_key),
        b64::decode_array::<64>(&proof.signature),
    ) else {
        return Ok(false);
    };
    let message = proof_message(row.id, &proof.nonce, client_ephemeral_key_hash);
    Ok(
        ring::signature::UnparsedPublicKey::new(&ring::signature::ED25519, key)
            .verify(&message, &signature)
            .is_ok(),
    )
}

/// Why a request without a step-up is no quick reattach, if it is none: the
/// audit's `reason_code` and the refusal the client sees (the console's says
/// `passkey_required`).
async fn quick_reattach_refusal(
    state: &AppState,
    person: &PersonPrincipal,
    row: &SessionRow,
    request: &AttachRequest,
    now: UnixMillis,
) -> Result<Option<(&'static str, StepUpRefusal)>, SessionError> {
    let refusal = |code: Refusal| Ok(Some((code.as_str(), StepUpRefusal::Missing)));
    if person.client_component == ClientComponent::Console {
        return Ok(Some((
            Refusal::QuickReattachConsole.as_str(),
            StepUpRefusal::PasskeyRequired,
        )));
    }
    if person.device_id.is_none()
        || person.device_id != row.device_id
        || person.login_session_id != row.login_session_id
    {
        return refusal(Refusal::QuickReattachOtherDevice);
    }
    if row.state != SessionState::Detached {
        return refusal(Refusal::QuickReattachNotDetached);
    }
    let window = millis(state.config().terminal.quick_reattach_window);
    match row.detached_at {
        Some(at) if now <= at.saturating_add(window) => {}
        _ => return refusal(Refusal::QuickReattachWindowPassed),
    }
    let Some(proof) = &request.device_proof else {
        return Ok(Some((
            StepUpRefusal::Missing.as_str(),
            StepUpRefusal::Missing,
        )));
    };
    if !verify_proof(
        state,
        person,
        row,
        proof,
        &request.client_ephemeral_key_hash,
        now,
    )
    .await?
    {
        return refusal(Refusal::DeviceProofInvalid);
    }
    Ok(None)
}

// ---------------------------------------------------------------------------
// attachTerminalSession
// ---------------------------------------------------------------------------

/// attachTerminalSession (module docs).
pub async fn attach(
    state: &AppState,
    principal: &Principal,
    session_id: Uuid,
    request: &AttachRequest,
) -> Result<Grant, SessionError> {
    let now = state.clock().now_ms();
    let db = state.db();
    let action = AuditAction::TerminalAttach;
    let person = principal.require_person(db, now, action).await?;
    take_token(state, person, now)?;
    token::parse_client_ephemeral_key_hash(&request.client_ephemeral_key_hash)?;
    let row = {
        let mut conn = db.pool().acquire().await.map_err(DbError::from)?;
        load(&mut conn, session_id).await?
    };
    let row = match row {
        Some(row) if row.person_id == person.person_id => row,
        Some(row) => {
            let entry = deny_entry(
                principal,
                action,
                Some(row.host_id),
                Some(row.id),
                Refusal::NotSessionPerson,
            );
            return Err(refuse(db, now, entry, HostError::NotFound.into()).await);
        }
        None => return Err(HostError::NotFound.into()),
    };
    if row.state == SessionState::Closed {
        let entry = deny_entry(
            principal,
            action,
            Some(row.host_id),
            Some(row.id),
            Refusal::SessionClosed,
        );
        return Err(refuse(db, now, entry, HostError::InvalidStateTransition.into()).await);
    }
    let host = load_host(db, row.host_id).await?;
    let authorized = authorize_audited(db, now, principal, Action::TerminalAttach, &host).await?;
    let same_user = authorized
        .session_user
        .as_ref()
        .is_some_and(|user| user.id == row.host_session_user_id);
    if !same_user {
        let entry = deny_entry(
            principal,
            action,
            Some(host.id),
            Some(row.id),
            DenyReason::NoSessionUser,
        );
        return Err(refuse(db, now, entry, denied(DenyReason::NoSessionUser)).await);
    }
    let kind = check_host_side(
        state,
        principal,
        action,
        &host,
        Some(row.id),
        &row.profile,
        now,
    )
    .await?;
    if request.step_up_id.is_none() {
        if let Some((code, refusal)) =
            quick_reattach_refusal(state, person, &row, request, now).await?
        {
            let entry = deny_entry(
                principal,
                action,
                Some(host.id),
                Some(row.id),
                CodeRef(code),
            );
            return Err(refuse(db, now, entry, step_up_required(refusal)).await);
        }
    }
    let signer = signer(state, now).await?;
    let grant = attach_once(
        state,
        principal,
        person,
        request,
        &row,
        &host,
        &authorized,
        kind,
        &signer,
        now,
    )
    .await?;
    // The older device stream gets 4103 before the host service replaces its
    // data connection for this grant (6.2).
    state
        .relay()
        .device_replaced_by_grant(state, grant.session_id);
    send_session_open(
        state,
        grant.host_id,
        grant.session_id,
        grant.open_deadline_at,
    );
    Ok(grant)
}

/// A code already checked to be one of this module's closed lists.
struct CodeRef(&'static str);

impl AuditCode for CodeRef {
    fn as_str(&self) -> &'static str {
        self.0
    }
}

#[allow(clippy::too_many_arguments)]
async fn attach_once(
    state: &AppState,
    principal: &Principal,
    person: &PersonPrincipal,
    request: &AttachRequest,
    row: &SessionRow,
    host: &Host,
    authorized: &Authorized,
    kind: ProfileKind,
    signer: &TerminalSigner,
    now: UnixMillis,
) -> Result<Grant, SessionError> {
    let db = state.db();
    let config = &state.config().terminal;
    let action = AuditAction::TerminalAttach;
    let mut uow = db.begin(now).await?;
    if let Some(step_up_id) = request.step_up_id {
        if let Err(refusal) = consume_step_up(&mut uow, person, step_up_id, now).await? {
            drop(uow);
            let entry = deny_entry(principal, action, Some(host.id), Some(row.id), refusal);
            return Err(refuse(db, now, entry, step_up_required(refusal)).await);
        }
    }
    let session_user = authorized
        .session_user
        .as_ref()
        .ok_or(stored("session user of a terminal decision"))?;
    // An opening never started its PTY: the token opens again (6.2, M2-44),
    // with the working directory of the opening.
    let (att, workdir_index) = if row.state == SessionState::Opening {
        (Att::Open, row.workdir_index)
    } else {
        (Att::Attach, None)
    };
    let profile = ProfileName::new(&row.profile).map_err(|_| TokenError::InvalidProfileName)?;
    let instance_id = pairing::instance_id(&mut uow).await?;
    let issued = token::issue(
        signer,
        &TokenRequest {
            instance_id: &instance_id,
            host_id: host.id,
            person_id: person.person_id,
            session_id: row.id,
            device_id: token_device(person),
            profile: profile.as_str(),
            profile_kind: kind,
            client_ephemeral_key_hash: &request.client_ephemeral_key_hash,
            own: authorized.is_owner,
            os_user: &session_user.os_user,
            workdir_index,
            att,
        },
        config.session_token_ttl,
        now,
    )?;
    let open_deadline_at = now.saturating_add(millis(config.open_timeout));
    // Compare-and-swap on the state and the jti the decision saw: a
    // concurrent grant or end wins, and a nonce bound to the old jti is spent.
    let updated = sqlx::query(
        "UPDATE terminal_sessions \
         SET token_jti = $1, token_expires_at = $2, open_deadline_at = $3, device_id = $4, \
             login_session_id = $5, version = version + 1 \
         WHERE id = $6 AND state = $7 AND version = $8",
    )
    .bind(db::id_text(&issued.jti))
    .bind(issued.expires_at)
    .bind(open_deadline_at)
    .bind(person.device_id.map(|id| db::id_text(&id)))
    .bind(db::id_text(&person.login_session_id))
    .bind(db::id_text(&row.id))
    .bind(row.state.as_str())
    .bind(row.version)
    .execute(uow.conn())
    .await
    .map_err(DbError::from)?;
    if updated.rows_affected() != 1 {
        // Another grant or an end committed since the decision.
        return Err(HostError::InvalidStateTransition.into());
    }
    uow.audit(
        AuditEntry::allow(action, principal.actor())
            .target(TargetKind::TerminalSession, row.id)
            .details(
                grant_details(
                    host.id,
                    row.id,
                    &profile,
                    person.device_id,
                    request.pin_changed,
                    authorized.foreign_assignee,
                )
                .flag("quick_reattach", request.step_up_id.is_none()),
            ),
    );
    changed_event(&mut uow, person.person_id, row.id, host.id, row.state);
    uow.commit().await?;
    let (noise_public_key, key_fingerprint) = host_keys(host)?;
    Ok(Grant {
        session_id: row.id,
        host_id: host.id,
        token: issued,
        noise_public_key,
        key_fingerprint,
        key_generation: host.key_generation,
        open_deadline_at,
    })
}

// ---------------------------------------------------------------------------
// closeTerminalSession and the reads
// ---------------------------------------------------------------------------

/// A session [`close`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Closed {
    /// The session.
    pub session_id: Uuid,
    /// `client_closed` or `closed_by_owner`.
    pub close_reason: CloseReason,
}

/// closeTerminalSession (module docs).
pub async fn close(
    state: &AppState,
    principal: &Principal,
    session_id: Uuid,
) -> Result<Closed, SessionError> {
    let now = state.clock().now_ms();
    let db = state.db();
    let action = AuditAction::TerminalClose;
    let person = principal.require_person(db, now, action).await?;
    let row = {
        let mut conn = db.pool().acquire().await.map_err(DbError::from)?;
        load(&mut conn, session_id).await?
    };
    let Some(row) = row else {
        return Err(HostError::NotFound.into());
    };
    let (close_reason, closed_by) = if row.person_id == person.person_id {
        (CloseReason::ClientClosed, ClosedBy::Person)
    } else if person.is_owner() {
        (CloseReason::ClosedByOwner, ClosedBy::Owner)
    } else {
        let entry = deny_entry(
            principal,
            action,
            None,
            Some(row.id),
            Refusal::NotSessionPerson,
        );
        return Err(refuse(db, now, entry, HostError::NotFound.into()).await);
    };
    let closed_entry = || {
        deny_entry(
            principal,
            action,
            None,
            Some(row.id),
            Refusal::SessionClosed,
        )
    };
    if row.state == SessionState::Closed {
        return Err(refuse(
            db,
            now,
            closed_entry(),
            HostError::InvalidStateTransition.into(),
        )
        .await);
    }
    let mut uow = db.begin(now).await?;
    let ended = end(&mut uow, EndScope::Session(row.id), close_reason, None)
        .await
        .map_err(|error| match error {
            super::end::EndError::Db(db_error) => SessionError::from(db_error),
            other => SessionError::Host(HostError::Stored(match other {
                super::end::EndError::InvalidPair { .. } => "close pair",
                super::end::EndError::Db(_) => "database",
            })),
        })?;
    if ended.is_empty() {
        // Another end committed since the read: the first end wins.
        drop(uow);
        return Err(refuse(
            db,
            now,
            closed_entry(),
            HostError::InvalidStateTransition.into(),
        )
        .await);
    }
    uow.audit(
        AuditEntry::allow(action, principal.actor())
            .target(TargetKind::TerminalSession, row.id)
            .details(
                AuditDetails::new()
                    .id("session_id", row.id)
                    .code("close_reason", close_reason)
                    .code("closed_by", closed_by),
            ),
    );
    // `session.close` reaches the host through the control connection's log
    // tail, like every other end (D-62).
    uow.commit().await?;
    Ok(Closed {
        session_id: row.id,
        close_reason,
    })
}

/// A session the caller may read: their own, or any for an owner.
pub async fn read(
    state: &AppState,
    principal: &Principal,
    session_id: Uuid,
) -> Result<SessionRow, SessionError> {
    let person = person_of(principal).ok_or(IdentityError::Forbidden(
        ForbiddenReason::SubjectKindNotAllowed,
    ))?;
    let mut conn = state.db().pool().acquire().await.map_err(DbError::from)?;
    match load(&mut conn, session_id).await? {
        Some(row) if row.person_id == person.person_id || person.is_owner() => Ok(row),
        _ => Err(HostError::NotFound.into()),
    }
}

/// The caller's own sessions, newest first, a page at a time (keyset paging
/// on `(created_at, id)`, so a page never repeats or skips a row when sessions
/// are added meanwhile); with `host_id` only those on that host, and for an
/// owner every person's there.
pub async fn list(
    state: &AppState,
    principal: &Principal,
    query: ListQuery,
) -> Result<SessionPage, SessionError> {
    let person = person_of(principal).ok_or(IdentityError::Forbidden(
        ForbiddenReason::SubjectKindNotAllowed,
    ))?;
    let limit = query.limit.clamp(1, LIST_MAX);
    // Every condition is one of the fixed texts below, never input; the
    // values are bound in the order of the placeholders.
    let mut conditions: Vec<String> = Vec::new();
    let mut binds: Vec<String> = Vec::new();
    let bind = |binds: &mut Vec<String>, value: String| {
        binds.push(value);
        format!("${}", binds.len())
    };
    match query.host_id {
        Some(host_id) => {
            let host = bind(&mut binds, db::id_text(&host_id));
            conditions.push(format!("host_id = {host}"));
            if !person.is_owner() {
                let me = bind(&mut binds, db::id_text(&person.person_id));
                conditions.push(format!("person_id = {me}"));
            }
        }
        None => {
            let me = bind(&mut binds, db::id_text(&person.person_id));
            conditions.push(format!("person_id = {me}"));
        }
    }
    match query.open {
        Some(true) => conditions.push("state <> 'closed'".to_owned()),
        Some(false) => conditions.push("state = 'closed'".to_owned()),
        None => {}
    }
    if let Some(after) = query.after {
        let cursor = bind(&mut binds, db::id_text(&after));
        // A cursor that names no session gives an empty page.
        conditions.push(format!(
            "(created_at < (SELECT created_at FROM terminal_sessions WHERE id = {cursor}) \
              OR (created_at = (SELECT created_at FROM terminal_sessions WHERE id = {cursor}) \
                  AND id < {cursor}))"
        ));
    }
    let sql = format!(
        "SELECT {COLUMNS} FROM terminal_sessions WHERE {} \
         ORDER BY created_at DESC, id DESC LIMIT {}",
        conditions.join(" AND "),
        i64::from(limit) + 1
    );
    let mut select = sqlx::query(&sql);
    for value in &binds {
        select = select.bind(value.as_str());
    }
    let mut conn = state.db().pool().acquire().await.map_err(DbError::from)?;
    let found = select.fetch_all(&mut *conn).await.map_err(DbError::from)?;
    let mut rows = found
        .iter()
        .map(SessionRow::from_row)
        .collect::<Result<Vec<_>, _>>()?;
    let more = rows.len() > limit as usize;
    rows.truncate(limit as usize);
    let next = more.then(|| rows.last().map(|row| row.id)).flatten();
    Ok(SessionPage { rows, next })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nonce_layout_adds_up() {
        let payload = nonce_payload(
            Uuid::from_u128(1),
            Uuid::from_u128(2),
            Uuid::from_u128(3),
            -1,
            &[9; 16],
        );
        assert_eq!(payload.len(), NONCE_PAYLOAD_LEN);
        assert_eq!(payload[0], NONCE_VERSION);
        assert_eq!(&payload[49..57], &(-1i64).to_be_bytes());
    }

    #[test]
    fn proof_message_binds_session_nonce_and_key_hash() {
        let message = proof_message(Uuid::from_u128(1), "n", "k");
        assert_eq!(
            String::from_utf8(message).unwrap(),
            "bothy.v1.quick_reattach\n00000000-0000-0000-0000-000000000001\nn\nk"
        );
    }
}
