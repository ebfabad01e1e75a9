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
use bothy_proto::stream;
use serde_json::{Map, Value, json};
use sqlx::any::AnyRow;
use sqlx::{AnyConnection, Row};
use uuid::Uuid;

use super::keys::{self, KeyError, TerminalSigner};
use super::links::ControlSignal;
use super::signals::{self, Signal};
use super::token::{self, IssuedToken, TokenError, TokenRequest};
use crate::audit::{AuditAction, AuditCode, AuditDetails, AuditEntry, ProfileName, TargetKind};
use crate::clock::{UnixMillis, millis};
use crate::codes::code_enum;
use crate::config::ClusterMode;
use crate::db::{self, Db, DbError, Engine, UnitOfWork};
use crate::events::{Audience, DurableEvent, EventKind};
use crate::hosts::{self, DenyReason, Host, HostError, pairing};
use crate::identity::login_sessions::ClientComponent;
use crate::identity::principal::{PersonPrincipal, Principal};
use crate::identity::step_up::{self, StepUpMethod, StepUpRefusal};
use crate::identity::{ForbiddenReason, IdentityError};
use crate::pepper::PepperPurpose;
use crate::permissions::authorize::{self, Action, Authorized, Denial, authorize_audited};
use crate::ratelimit::RetryAfter;
use crate::revocation::{EndScope, end};
use crate::state::AppState;

mod attach;
mod close;
mod open;
mod read;

pub use attach::{attach, attach_challenge};
pub use close::{Closed, close};
pub use open::open;
pub use read::{list, read};

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
    /// base64url of the 64-byte Ed25519 signature over [`stream::quick_reattach_proof_message`].
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
    if state.config().cluster.mode == ClusterMode::Multi {
        // Several nodes: `terminal.session_open`, staged in the unit of work,
        // reaches every node, this one included, and the node with the
        // host's control connection sends `session.open` after the probation
        // of 3.4 (`terminal::signals::node`, docs/decisions.md D-507).
        return;
    }
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
