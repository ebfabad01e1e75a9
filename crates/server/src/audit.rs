//! The audit log (spec 10.1; DESIGN 3.3): who did what to which target, allowed
//! or denied, with details.
//!
//! An [`AuditEntry`] is typed so that nothing secret or content-bearing *can* be
//! written: the action, decision, actor and target are enums and IDs, and
//! [`AuditDetails`] takes only codes (enums implementing [`AuditCode`]), IDs,
//! counts, flags, key fingerprints, session user and profile names checked
//! against their patterns, and exactly one free text: the owner's stated reason
//! ([`AuditDetails::reason`], bounded). Keys are `&'static str`, so they are
//! written in the source, never taken from input. Never in the audit: terminal
//! content, commands, environment variables, paths, profile command lines (10.1).
//!
//! Entries are written by [`crate::db::UnitOfWork::commit`] in the transaction of
//! the use case, and read by [`list`] (for `GET /api/v1/audit`).

use std::collections::BTreeMap;
use std::fmt;

use serde_json::{Map, Value};
use sqlx::Row;
use sqlx::any::AnyRow;
use uuid::Uuid;

use crate::clock::UnixMillis;
use crate::codes::code_enum;
use crate::db::{self, AuditRow, Db, DbError};

pub use crate::codes::AuditCode;

code_enum! {
    /// What was done: the actions of 10.1 and of the identity work. Add new ones
    /// here; the stored string is the dotted name.
    pub enum AuditAction {
        /// Every change of a host (create, update, pairing code, confirm, ...).
        HostManage => "host.manage",
        /// A host service pairs (allow and deny; refusals aggregated).
        HostPair => "host.pair",
        /// Control connection denials, report changes, second connection (3.4).
        HostConnect => "host.connect",
        /// `openTerminalSession`.
        TerminalOpen => "terminal.open",
        /// `attachTerminalSession`.
        TerminalAttach => "terminal.attach",
        /// `closeTerminalSession` (or frame close) by the person.
        TerminalClose => "terminal.close",
        /// Denials on a stream (e.g. identify from the wrong device).
        TerminalStream => "terminal.stream",
        /// Every end of a session by the server or the host (actor system).
        TerminalTerminate => "terminal.terminate",
        /// A server signing key of purpose terminal created, scheduled,
        /// activated, withdrawn or retired (5.3); details carry kids only.
        TerminalKeyRotate => "terminal.key_rotate",
        /// Login (password + second factor).
        AuthLogin => "auth.login",
        /// Logout.
        AuthLogout => "auth.logout",
        /// Step-up.
        AuthStepUp => "auth.step_up",
        /// Enrollment (password, TOTP, passkey).
        AuthEnroll => "auth.enroll",
        /// Invitation of a person.
        PersonInvite => "person.invite",
        /// A person disabled.
        PersonDisable => "person.disable",
        /// A person's second factor reset.
        PersonResetSecondFactor => "person.reset_second_factor",
        /// A device revoked.
        DeviceRevoke => "device.revoke",
        /// A login session revoked.
        SessionRevoke => "session.revoke",
        /// An API token created.
        ApiTokenCreate => "api_token.create",
        /// An API token revoked.
        ApiTokenRevoke => "api_token.revoke",
        /// A group created, or a person added to or removed from one.
        GroupManage => "group.manage",
        /// A grant on a host created (owners; I6 checked).
        GrantCreate => "grant.create",
        /// A grant on a host revoked.
        GrantRevoke => "grant.revoke",
        /// A disabled person enabled again (I6 checked).
        PersonEnable => "person.enable",
        /// A person's role changed (owner or member; 8.3 "removal of the
        /// owner role").
        PersonSetRole => "person.set_role",
        /// A read of hosts or grants; audited only when denied.
        HostRead => "host.read",
        /// A read of identity lists (persons, sessions, devices, tokens); audited
        /// only when denied.
        IdentityRead => "identity.read",
        /// A subscription to the event stream (`GET /api/v1/events`); audited
        /// only when denied.
        EventsRead => "events.read",
        /// A read of the audit log (`GET /api/v1/audit`); audited only when denied.
        AuditRead => "audit.read",
    }
}

code_enum! {
    /// The outcome.
    pub enum Decision {
        /// Allowed (and done).
        Allow => "allow",
        /// Denied.
        Deny => "deny",
    }
}

code_enum! {
    /// The kind of an actor, as stored in `audit.actor_kind`.
    pub enum ActorKind {
        /// A person (owner or member).
        Person => "person",
        /// An agent principal (API token).
        Agent => "agent",
        /// An app principal (API token).
        App => "app",
        /// A host service.
        Host => "host",
        /// The server itself (sweep, ends of sessions, ...).
        System => "system",
    }
}

code_enum! {
    /// The kind of a target, as stored in `audit.target_kind`. Add new ones here.
    pub enum TargetKind {
        /// A host.
        Host => "host",
        /// A terminal session.
        TerminalSession => "terminal_session",
        /// A person.
        Person => "person",
        /// A group.
        Group => "group",
        /// A device.
        Device => "device",
        /// A login session.
        LoginSession => "login_session",
        /// An API token.
        ApiToken => "api_token",
        /// A grant.
        Grant => "grant",
    }
}

/// Who acted. Every principal has an ID; the system has none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Actor {
    /// A person.
    Person(Uuid),
    /// An agent.
    Agent(Uuid),
    /// An app.
    App(Uuid),
    /// A host service.
    Host(Uuid),
    /// The server.
    System,
}

impl Actor {
    /// The kind.
    pub fn kind(&self) -> ActorKind {
        match self {
            Actor::Person(_) => ActorKind::Person,
            Actor::Agent(_) => ActorKind::Agent,
            Actor::App(_) => ActorKind::App,
            Actor::Host(_) => ActorKind::Host,
            Actor::System => ActorKind::System,
        }
    }

    /// The ID (`None` for the system).
    pub fn id(&self) -> Option<Uuid> {
        match *self {
            Actor::Person(id) | Actor::Agent(id) | Actor::App(id) | Actor::Host(id) => Some(id),
            Actor::System => None,
        }
    }

    fn from_parts(kind: ActorKind, id: Option<Uuid>) -> Option<Actor> {
        match (kind, id) {
            (ActorKind::Person, Some(id)) => Some(Actor::Person(id)),
            (ActorKind::Agent, Some(id)) => Some(Actor::Agent(id)),
            (ActorKind::App, Some(id)) => Some(Actor::App(id)),
            (ActorKind::Host, Some(id)) => Some(Actor::Host(id)),
            (ActorKind::System, None) => Some(Actor::System),
            _ => None,
        }
    }
}

/// What was acted on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Target {
    /// The kind.
    pub kind: TargetKind,
    /// The ID.
    pub id: Uuid,
}

/// The longest stated reason, in characters; longer ones are cut (the API
/// validates the length first and refuses with `validation_failed`).
pub const REASON_MAX_CHARS: usize = 500;

/// The longest session user name, in characters: the largest value
/// `host.os_user_max_chars` accepts, so every name the server takes can be
/// audited; the configured limit is checked where the name arrives.
pub const OS_USER_MAX_CHARS: usize = 256;

/// The longest profile name, in characters (`terminal.report_label_max_chars`'s
/// largest sensible value).
pub const PROFILE_NAME_MAX_CHARS: usize = 200;

/// A session user name, as a host reported it: matches
/// [`bothy_proto::report::SESSION_USER_NAME_PATTERN`] (letters, digits, `_.-`),
/// so it cannot carry a path or a sentence. For the reserved field `os_user` and
/// the names the rule for names (2.2) puts into `host.connect`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OsUserName(String);

impl OsUserName {
    /// The name, if it matches the pattern and is at most [`OS_USER_MAX_CHARS`].
    pub fn new(name: &str) -> Result<OsUserName, AuditError> {
        if bothy_proto::report::is_session_user_name(name)
            && name.chars().count() <= OS_USER_MAX_CHARS
        {
            Ok(OsUserName(name.to_owned()))
        } else {
            Err(AuditError::InvalidOsUserName)
        }
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A profile name (the `profile` of terminal.open and terminal.attach): a
/// display text of the host's report — not empty, no control characters, at most
/// [`PROFILE_NAME_MAX_CHARS`]. Never a command line.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ProfileName(String);

impl ProfileName {
    /// The name, if it is a well-formed display text.
    pub fn new(name: &str) -> Result<ProfileName, AuditError> {
        if !name.is_empty()
            && !name.chars().any(char::is_control)
            && name.chars().count() <= PROFILE_NAME_MAX_CHARS
        {
            Ok(ProfileName(name.to_owned()))
        } else {
            Err(AuditError::InvalidProfileName)
        }
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// One typed value of the details.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Detail {
    Code(&'static str),
    Codes(Vec<&'static str>),
    Id(Uuid),
    Count(i64),
    Flag(bool),
    Fingerprint(String),
    Kid(String),
    OsUser(String),
    OsUsers(Vec<String>),
    Profile(String),
    Reason(String),
}

impl Detail {
    fn to_json(&self) -> Value {
        match self {
            Detail::Code(code) => Value::from(*code),
            Detail::Codes(codes) => Value::from(codes.clone()),
            Detail::Id(id) => Value::from(db::id_text(id)),
            Detail::Count(n) => Value::from(*n),
            Detail::Flag(flag) => Value::from(*flag),
            Detail::Fingerprint(text)
            | Detail::Kid(text)
            | Detail::OsUser(text)
            | Detail::Profile(text)
            | Detail::Reason(text) => Value::from(text.as_str()),
            Detail::OsUsers(names) => Value::from(names.clone()),
        }
    }
}

/// The details of an entry (`audit_details.v1`): a flat JSON object of typed
/// values under compiled-in keys. A later value under the same key replaces the
/// earlier one. The key `reason` belongs to [`AuditDetails::reason`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditDetails {
    fields: BTreeMap<&'static str, Detail>,
}

impl AuditDetails {
    /// No details.
    pub fn new() -> AuditDetails {
        AuditDetails::default()
    }

    /// A code: `from_state`, `close_reason`, `operation`, ...
    pub fn code(mut self, key: &'static str, value: impl AuditCode) -> Self {
        self.fields.insert(key, Detail::Code(value.as_str()));
        self
    }

    /// A list of codes (e.g. the check codes of `host.connect`).
    pub fn codes<C: AuditCode>(
        mut self,
        key: &'static str,
        values: impl IntoIterator<Item = C>,
    ) -> Self {
        let codes = values.into_iter().map(|c| c.as_str()).collect();
        self.fields.insert(key, Detail::Codes(codes));
        self
    }

    /// An ID (`host_id`, `session_id`, `device_id`, ...), hyphenated.
    pub fn id(mut self, key: &'static str, value: Uuid) -> Self {
        self.fields.insert(key, Detail::Id(value));
        self
    }

    /// A number (`bytes_in`, `duration_ms`, `key_generation`, ...).
    pub fn count(mut self, key: &'static str, value: i64) -> Self {
        self.fields.insert(key, Detail::Count(value));
        self
    }

    /// A flag (`pin_changed`, `foreign_assignee`, `no_change`, ...).
    pub fn flag(mut self, key: &'static str, value: bool) -> Self {
        self.fields.insert(key, Detail::Flag(value));
        self
    }

    /// A key fingerprint (`fingerprint`, `old_fingerprint`), in the audit form of
    /// 10.1: lower case without hyphens.
    pub fn fingerprint(
        mut self,
        key: &'static str,
        value: &bothy_proto::fingerprint::KeyFingerprint,
    ) -> Self {
        self.fields
            .insert(key, Detail::Fingerprint(value.audit_form()));
        self
    }

    /// The key ID of a public key (`kid`, `previous_kid`, ...): its RFC 7638
    /// thumbprint. Taking the public JWK, not a string, keeps anything but a
    /// public key's name out of this field.
    pub fn kid(mut self, key: &'static str, jwk: &bothy_proto::jwk::Ed25519PublicJwk) -> Self {
        self.fields.insert(key, Detail::Kid(jwk.thumbprint()));
        self
    }

    /// The name of a session user in the reserved field `os_user` (10.1).
    pub fn os_user(mut self, name: &OsUserName) -> Self {
        self.fields
            .insert("os_user", Detail::OsUser(name.0.clone()));
        self
    }

    /// A list of session user names (the rule for names of `host.connect`;
    /// added and removed names).
    pub fn os_users<'a>(
        mut self,
        key: &'static str,
        names: impl IntoIterator<Item = &'a OsUserName>,
    ) -> Self {
        let names = names.into_iter().map(|n| n.0.clone()).collect();
        self.fields.insert(key, Detail::OsUsers(names));
        self
    }

    /// The profile of a session (`profile`).
    pub fn profile(mut self, name: &ProfileName) -> Self {
        self.fields
            .insert("profile", Detail::Profile(name.0.clone()));
        self
    }

    /// The owner's stated reason, under `reason`: the only free text an entry can
    /// hold, cut to [`REASON_MAX_CHARS`] characters.
    pub fn reason(mut self, text: &str) -> Self {
        let text: String = text.chars().take(REASON_MAX_CHARS).collect();
        self.fields.insert("reason", Detail::Reason(text));
        self
    }

    /// Whether nothing was added.
    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    /// The JSON object that is stored (keys in sorted order).
    pub fn to_json(&self) -> Value {
        let map: Map<String, Value> = self
            .fields
            .iter()
            .map(|(key, value)| ((*key).to_owned(), value.to_json()))
            .collect();
        Value::Object(map)
    }
}

/// One audit entry, before it is written. The fields are public: what makes an
/// entry safe is their types (above all [`AuditDetails`], which only its typed
/// methods can fill).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEntry {
    /// What was done.
    pub action: AuditAction,
    /// Allowed or denied.
    pub decision: Decision,
    /// Who did it.
    pub actor: Actor,
    /// To what, if anything.
    pub target: Option<Target>,
    /// The details.
    pub details: AuditDetails,
}

impl AuditEntry {
    /// An entry without target and details.
    pub fn new(action: AuditAction, decision: Decision, actor: Actor) -> AuditEntry {
        AuditEntry {
            action,
            decision,
            actor,
            target: None,
            details: AuditDetails::new(),
        }
    }

    /// An allowed action.
    pub fn allow(action: AuditAction, actor: Actor) -> AuditEntry {
        AuditEntry::new(action, Decision::Allow, actor)
    }

    /// A denied action.
    pub fn deny(action: AuditAction, actor: Actor) -> AuditEntry {
        AuditEntry::new(action, Decision::Deny, actor)
    }

    /// With a target.
    pub fn target(mut self, kind: TargetKind, id: Uuid) -> Self {
        self.target = Some(Target { kind, id });
        self
    }

    /// With details.
    pub fn details(mut self, details: AuditDetails) -> Self {
        self.details = details;
        self
    }
}

/// Errors of the audit module.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// The database failed.
    #[error(transparent)]
    Db(#[from] DbError),
    /// A stored row does not decode (written by a newer binary, or edited).
    #[error("the stored audit row has an invalid {column}")]
    Stored {
        /// The column.
        column: &'static str,
    },
    /// Not a session user name.
    #[error("not a session user name")]
    InvalidOsUserName,
    /// Not a profile name.
    #[error("not a profile name")]
    InvalidProfileName,
}

impl From<AuditEntry> for AuditRow {
    /// The columns of the entry, for the unit of work's commit.
    fn from(entry: AuditEntry) -> AuditRow {
        AuditRow {
            action: entry.action.as_str(),
            decision: entry.decision.as_str(),
            actor_kind: entry.actor.kind().as_str(),
            actor_id: entry.actor.id(),
            target: entry.target.map(|t| (t.kind.as_str(), t.id)),
            details: entry.details.to_json().to_string(),
        }
    }
}

/// A stored entry.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditRecord {
    /// The entry's ID (UUIDv7 of its time).
    pub id: Uuid,
    /// When (the unit of work's clock).
    pub at: UnixMillis,
    /// The action.
    pub action: AuditAction,
    /// The decision.
    pub decision: Decision,
    /// The actor.
    pub actor: Actor,
    /// The target.
    pub target: Option<Target>,
    /// The details object.
    pub details: Value,
}

/// The filters of `GET /api/v1/audit`; every one that is set must match.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditFilter {
    /// Only this action.
    pub action: Option<AuditAction>,
    /// Only this decision.
    pub decision: Option<Decision>,
    /// Only this actor.
    pub actor_id: Option<Uuid>,
    /// Only this target.
    pub target_id: Option<Uuid>,
    /// At or after this time.
    pub from_ms: Option<UnixMillis>,
    /// Before this time.
    pub until_ms: Option<UnixMillis>,
}

/// The largest page.
pub const PAGE_MAX: u32 = 500;

/// Which page: newest first, keyset by ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageRequest {
    /// Only entries older than this ID (the `next` of the previous page).
    pub before: Option<Uuid>,
    /// At most this many (1..=[`PAGE_MAX`]; other values are clamped).
    pub limit: u32,
}

/// One page of entries.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditPage {
    /// Newest first.
    pub entries: Vec<AuditRecord>,
    /// The cursor of the next page, if there are older entries.
    pub next: Option<Uuid>,
}

/// Reads a page of entries matching `filter`, newest first. IDs are UUIDv7 of the
/// unit of work's start, so an entry committed late by a long unit of work can
/// sort behind a cursor already handed out; the audit view is a list, not a tail.
pub async fn list(
    db: &Db,
    filter: &AuditFilter,
    page: PageRequest,
) -> Result<AuditPage, AuditError> {
    let limit = page.limit.clamp(1, PAGE_MAX);

    // The conditions are fixed text; only their values are bound.
    let mut conditions = Conditions::default();
    if let Some(action) = filter.action {
        conditions.push("action =", Bind::Text(action.as_str().to_owned()));
    }
    if let Some(decision) = filter.decision {
        conditions.push("decision =", Bind::Text(decision.as_str().to_owned()));
    }
    if let Some(actor_id) = filter.actor_id {
        conditions.push("actor_id =", Bind::Text(db::id_text(&actor_id)));
    }
    if let Some(target_id) = filter.target_id {
        conditions.push("target_id =", Bind::Text(db::id_text(&target_id)));
    }
    if let Some(from) = filter.from_ms {
        conditions.push("at >=", Bind::Number(from));
    }
    if let Some(until) = filter.until_ms {
        conditions.push("at <", Bind::Number(until));
    }
    if let Some(before) = page.before {
        conditions.push("id <", Bind::Text(db::id_text(&before)));
    }

    let mut sql = String::from(
        "SELECT id, at, action, decision, actor_kind, actor_id, target_kind, target_id, details \
         FROM audit",
    );
    if !conditions.sql.is_empty() {
        sql.push_str(" WHERE ");
        sql.push_str(&conditions.sql.join(" AND "));
    }
    sql.push_str(&format!(
        " ORDER BY id DESC LIMIT ${}",
        conditions.binds.len() + 1
    ));

    let mut query = sqlx::query(&sql);
    for bind in conditions.binds {
        query = match bind {
            Bind::Text(v) => query.bind(v),
            Bind::Number(v) => query.bind(v),
        };
    }
    // One more than asked tells whether an older page exists.
    let rows = query
        .bind(i64::from(limit) + 1)
        .fetch_all(db.pool())
        .await
        .map_err(DbError::from)?;

    let mut entries = rows
        .iter()
        .map(decode_record)
        .collect::<Result<Vec<_>, _>>()?;
    let more = entries.len() > limit as usize;
    entries.truncate(limit as usize);
    let next = if more {
        entries.last().map(|e| e.id)
    } else {
        None
    };
    Ok(AuditPage { entries, next })
}

/// `column op $n` conditions and their values, numbered in order.
#[derive(Default)]
struct Conditions {
    sql: Vec<String>,
    binds: Vec<Bind>,
}

impl Conditions {
    fn push(&mut self, column_op: &'static str, bind: Bind) {
        self.binds.push(bind);
        self.sql.push(format!("{column_op} ${}", self.binds.len()));
    }
}

enum Bind {
    Text(String),
    Number(i64),
}

fn decode_record(row: &AnyRow) -> Result<AuditRecord, AuditError> {
    let stored = |column| AuditError::Stored { column };
    let text = |column: &'static str| -> Result<String, AuditError> {
        row.try_get::<String, _>(column).map_err(|_| stored(column))
    };
    let id = db::get_uuid(row, "id").map_err(|_| stored("id"))?;
    let at: i64 = row.try_get("at").map_err(|_| stored("at"))?;
    let action = AuditAction::parse(&text("action")?).ok_or(stored("action"))?;
    let decision = Decision::parse(&text("decision")?).ok_or(stored("decision"))?;
    let actor_kind = ActorKind::parse(&text("actor_kind")?).ok_or(stored("actor_kind"))?;
    let actor_id = db::get_opt_uuid(row, "actor_id").map_err(|_| stored("actor_id"))?;
    let actor = Actor::from_parts(actor_kind, actor_id).ok_or(stored("actor_id"))?;
    let target_kind: Option<String> = row
        .try_get("target_kind")
        .map_err(|_| stored("target_kind"))?;
    let target_id = db::get_opt_uuid(row, "target_id").map_err(|_| stored("target_id"))?;
    let target = match (target_kind, target_id) {
        (Some(kind), Some(id)) => Some(Target {
            kind: TargetKind::parse(&kind).ok_or(stored("target_kind"))?,
            id,
        }),
        (None, None) => None,
        _ => return Err(stored("target_id")),
    };
    let details: Value = serde_json::from_str(&text("details")?).map_err(|_| stored("details"))?;
    Ok(AuditRecord {
        id,
        at,
        action,
        decision,
        actor,
        target,
        details,
    })
}

// Codes of bothy-proto that go into details.
macro_rules! proto_codes {
    ($($ty:path),+ $(,)?) => {
        $(
            impl AuditCode for $ty {
                fn as_str(&self) -> &'static str {
                    <$ty>::as_str(*self)
                }
            }
        )+
    };
}

proto_codes!(
    bothy_proto::codes::CloseReason,
    bothy_proto::codes::CloseDetail,
    bothy_proto::control::HostState,
    bothy_proto::control::LlmCredentials,
    bothy_proto::doctor::Check,
    bothy_proto::doctor::DoctorCode,
    bothy_proto::report::ProfileKind,
);

impl fmt::Display for Actor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.id() {
            Some(id) => write!(f, "{}:{}", self.kind(), id),
            None => f.write_str(self.kind().as_str()),
        }
    }
}
