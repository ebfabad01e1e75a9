//! updateHost (`PATCH /api/v1/hosts/{host_id}`, host.manage): name, assignee,
//! state (disable / enable / retire) and the assignments of session users, in
//! one unit of work with one host version, one `host.updated` and at most one
//! new permission version. Also the pieces every host.manage operation shares:
//! the step-up with its deny entry ([`consume_step_up`]) and
//! [`record_change`].
//!
//! # Request members (docs/decisions.md D-30)
//! | Member | Meaning |
//! |---|---|
//! | `name` | new display name (1..=[`HOST_NAME_MAX_CHARS`] characters, no control characters, not only white space) |
//! | `assigned_user_id` | new assignee: a person who is not deleted (`unknown_user`) |
//! | `clear_assigned_user` | `true`: the host has no assignee afterwards; with `assigned_user_id` → `mutually_exclusive` |
//! | `state` | `"disabled"`, `"active"` or `"retired"` |
//! | `assign_session_users` | `[{user_id, os_user}]`: new assignments ([`super::session_users`]) |
//! | `end_session_users` | `[user_id]`: end these persons' valid assignments |
//! | `reason` | mandatory, 1..=500 characters |
//! | `step_up_id` | mandatory, consumed by the request |
//!
//! At least one member besides `reason` and `step_up_id`. `If-Match` is
//! mandatory (`428` / `412`).
//!
//! # Order
//! 1. host under lock (`404`), `If-Match`, the step-up (`401
//!    step_up_required`, with a deny entry);
//! 2. every `400` finding at once: `unknown_user` (assignee, persons of
//!    assignments, `end_session_users/<i>` that is no person at all),
//!    `session_user_not_on_host`;
//! 3. a retired host: `409 invalid_state_transition` if another state is asked
//!    for, else `409 conflict host_retired` (retired is final, D-33);
//! 4. the transition: only active → disabled, disabled → active (not after a
//!    `duplicate_connection`: [`super::check_enable`]), active | disabled →
//!    retired; every other edge is `409 invalid_state_transition`;
//! 5. the writes: ended assignments first, then new ones (so one request can
//!    give a person a fresh session user; `409 conflict session_user_taken`
//!    rolls everything back), name and assignee, the state.
//!
//! # Effects
//! - Leaving active ends every session of the host (`host_disabled`,
//!   `host_retired`); disabling sets `disabled_reason = 'owner'` and
//!   `disabled_at`, enabling and retiring clear them.
//! - An assignee change ends the former assignee's sessions on the host unless
//!   they are an active owner (SR10, `access_revoked`).
//! - The permission version rises once when effective permissions change: an
//!   assignment made or ended, an assignee change, the host entering or leaving
//!   active (D-34).
//! - Members equal to the current values change nothing; a request that changes
//!   nothing answers `200` with the current host, no new version, no event, and
//!   an audit entry with `no_change` (D-32).
//!
//! # Audit (10.1)
//! `update` (`name_changed`, `from_assigned_user_id` / `to_assigned_user_id`),
//! `state` (`from_state`, `to_state`, `disabled_reason` when disabling), one
//! `session_user` entry per assignment made or ended; every entry with the
//! `reason`. Never the name of the host.

use bothy_proto::codes::CloseReason;
use uuid::Uuid;

use super::session_users::{self, Assignment, count, end_error, is_assignable_person};
use super::{
    DisabledReason, Host, HostConflict, HostError, HostState, ManageOperation, check_enable,
    check_transition,
};
use crate::audit::{AuditAction, AuditDetails, AuditEntry, TargetKind};
use crate::clock::UnixMillis;
use crate::db::{self, Db, DbError, UnitOfWork};
use crate::identity::principal::PersonPrincipal;
use crate::identity::{IdentityError, Invalid, PersonStatus, Role, persons, step_up};
use crate::revocation::{self, EndScope};
use crate::terminal::signals::{self, Signal};

/// The longest host name, in characters.
pub const HOST_NAME_MAX_CHARS: usize = 100;

/// Checks a host name (a display text, SEC-IN-4): the finding's code, if any —
/// `required` (empty or only white space), `too_long`, `invalid` (a control
/// character).
pub fn check_host_name(name: &str) -> Result<(), &'static str> {
    if name.trim().is_empty() {
        Err("required")
    } else if name.chars().count() > HOST_NAME_MAX_CHARS {
        Err("too_long")
    } else if name.chars().any(char::is_control) {
        Err("invalid")
    } else {
        Ok(())
    }
}

/// What `assigned_user_id` / `clear_assigned_user` asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AssigneeChange {
    /// This person becomes the assignee.
    Set(Uuid),
    /// The host has no assignee afterwards.
    Clear,
}

/// What updateHost was asked (the route checked forms and lengths).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpdateRequest {
    /// The host.
    pub host_id: Uuid,
    /// A new name.
    pub name: Option<String>,
    /// A new assignee, or none.
    pub assignee: Option<AssigneeChange>,
    /// A new state.
    pub state: Option<HostState>,
    /// New assignments of session users.
    pub assign_session_users: Vec<Assignment>,
    /// Persons whose valid assignment ends.
    pub end_session_users: Vec<Uuid>,
    /// The owner's reason.
    pub reason: String,
    /// The step-up the request consumes.
    pub step_up_id: Uuid,
}

/// A host after a host.manage operation.
#[derive(Debug, Clone, PartialEq)]
pub struct ManagedHost {
    /// As stored.
    pub host: Host,
    /// As a reader sees it ([`session_users::host_view`]).
    pub view: bothy_api::hosts::Host,
}

impl ManagedHost {
    /// Reads the host (and its valid assignments) inside `uow`.
    pub async fn read(uow: &mut UnitOfWork, host_id: Uuid) -> Result<ManagedHost, HostError> {
        let host = super::load(uow.conn(), host_id)
            .await?
            .ok_or(HostError::NotFound)?;
        let view = session_users::host_view(uow.conn(), &host).await?;
        Ok(ManagedHost { host, view })
    }
}

/// updateHost for an owner `person` (the route checked the role): see the
/// module docs. `if_match` checks the host's version (`428` / `412`).
pub async fn update(
    db: &Db,
    now: UnixMillis,
    person: &PersonPrincipal,
    request: &UpdateRequest,
    if_match: impl FnOnce(i64) -> Result<(), HostError>,
) -> Result<ManagedHost, HostError> {
    let mut uow = db.begin(now).await?;
    let host = super::load_for_update(&mut uow, request.host_id).await?;
    if_match(host.version)?;
    let mut uow = consume_step_up(
        uow,
        person,
        request.step_up_id,
        host.id,
        ManageOperation::Update,
    )
    .await?;

    // 2. Every finding at once.
    check_update_request(&mut uow, &host, request).await?;
    // 3. and 4. The state machine.
    let to_state = state_transition(&host, request.state)?;

    // 5. The writes.
    let mut change = UpdateChange::default();
    change.add(update_session_users(&mut uow, &host, person, request).await?);
    change.add(update_name_and_assignee(&mut uow, &host, person, request).await?);
    let mut state_after = host.state;
    if let Some(to) = to_state {
        change.add(update_state(&mut uow, &host, person, to, &request.reason).await?);
        state_after = to;
    }

    if change.changed {
        record_change(&mut uow, host.id, state_after, change.rights).await?;
    } else {
        uow.audit(manage_entry(
            person,
            host.id,
            AuditDetails::new()
                .code("operation", ManageOperation::Update)
                .flag("no_change", true)
                .reason(&request.reason),
        ));
    }
    let managed = ManagedHost::read(&mut uow, host.id).await?;
    uow.commit().await?;
    Ok(managed)
}

/// The audit entry of a host.manage change of the host by `person`.
fn manage_entry(person: &PersonPrincipal, host_id: Uuid, details: AuditDetails) -> AuditEntry {
    AuditEntry::allow(AuditAction::HostManage, person.actor())
        .target(TargetKind::Host, host_id)
        .details(details)
}

/// What one step of updateHost changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct UpdateChange {
    /// Something of the host changed (else the audit says `no_change`).
    changed: bool,
    /// Who may have a terminal on the host changed (the permission version).
    rights: bool,
}

impl UpdateChange {
    fn add(&mut self, step: UpdateChange) {
        self.changed |= step.changed;
        self.rights |= step.rights;
    }
}

/// Step 2 of updateHost: every finding of the request at once (`400`).
async fn check_update_request(
    uow: &mut UnitOfWork,
    host: &Host,
    request: &UpdateRequest,
) -> Result<(), HostError> {
    let mut findings: Vec<Invalid> = Vec::new();
    if let Some(AssigneeChange::Set(id)) = request.assignee {
        if !is_assignable_person(uow.conn(), id).await? {
            findings.push(Invalid::at("/assigned_user_id", "unknown_user"));
        }
    }
    findings.extend(
        session_users::validate(
            uow.conn(),
            host,
            &request.assign_session_users,
            "/assign_session_users",
        )
        .await?,
    );
    for (i, &id) in request.end_session_users.iter().enumerate() {
        // A deleted person may still hold an assignment; ending it is allowed.
        if persons::get(uow.conn(), id).await?.is_none() {
            findings.push(Invalid::at(
                format!("/end_session_users/{i}"),
                "unknown_user",
            ));
        }
    }
    if !findings.is_empty() {
        return Err(HostError::Invalid(findings));
    }
    Ok(())
}

/// Steps 3 and 4 of updateHost: the state machine. The state the request
/// moves the host to, if it asks for another one than the host's.
fn state_transition(
    host: &Host,
    requested: Option<HostState>,
) -> Result<Option<HostState>, HostError> {
    if host.state == HostState::Retired {
        return Err(match requested {
            Some(state) if state != HostState::Retired => HostError::InvalidStateTransition,
            _ => HostError::Conflict(HostConflict::HostRetired),
        });
    }
    let to_state = requested.filter(|&to| to != host.state);
    if let Some(to) = to_state {
        match to {
            HostState::Active => check_enable(host)?,
            HostState::Disabled | HostState::Retired => check_transition(host.state, to)?,
            HostState::Pairing | HostState::Confirming => {
                return Err(HostError::InvalidStateTransition);
            }
        }
    }
    Ok(to_state)
}

/// The writes of updateHost, first: the assignments of session users that
/// end, then the new ones.
async fn update_session_users(
    uow: &mut UnitOfWork,
    host: &Host,
    person: &PersonPrincipal,
    request: &UpdateRequest,
) -> Result<UpdateChange, HostError> {
    let actor = person.person_id;
    let reason = request.reason.as_str();
    let ended =
        session_users::end_rows(uow, host.id, actor, &request.end_session_users, reason).await?;
    let made =
        session_users::assign_rows(uow, host, actor, &request.assign_session_users, reason).await?;
    let changed = !ended.is_empty() || made > 0;
    Ok(UpdateChange {
        changed,
        rights: changed,
    })
}

/// The writes of updateHost, second: the name and the assignee, with the end
/// of the former assignee's sessions when that person is no active owner.
async fn update_name_and_assignee(
    uow: &mut UnitOfWork,
    host: &Host,
    person: &PersonPrincipal,
    request: &UpdateRequest,
) -> Result<UpdateChange, HostError> {
    let name = request.name.as_deref().unwrap_or(&host.name);
    let name_changed = name != host.name;
    let assignee = match request.assignee {
        Some(AssigneeChange::Set(id)) => Some(id),
        Some(AssigneeChange::Clear) => None,
        None => host.assigned_user_id,
    };
    let assignee_changed = assignee != host.assigned_user_id;
    if !name_changed && !assignee_changed {
        return Ok(UpdateChange::default());
    }
    sqlx::query("UPDATE hosts SET name = $1, assigned_user_id = $2 WHERE id = $3")
        .bind(name)
        .bind(assignee.map(|id| db::id_text(&id)))
        .bind(db::id_text(&host.id))
        .execute(uow.conn())
        .await
        .map_err(DbError::from)?;
    let mut details = AuditDetails::new()
        .code("operation", ManageOperation::Update)
        .flag("name_changed", name_changed)
        .reason(&request.reason);
    if assignee_changed {
        if let Some(from) = host.assigned_user_id {
            details = details.id("from_assigned_user_id", from);
        }
        if let Some(to) = assignee {
            details = details.id("to_assigned_user_id", to);
        }
        let mut sessions_ended = 0;
        if let Some(former) = host.assigned_user_id {
            if !is_active_owner(uow, former).await? {
                sessions_ended = revocation::end(
                    uow,
                    EndScope::PersonOnHost {
                        host_id: host.id,
                        person_id: former,
                    },
                    CloseReason::AccessRevoked,
                    None,
                )
                .await
                .map_err(end_error)?
                .len();
            }
        }
        details = details.count("sessions_ended", count(sessions_ended));
    }
    uow.audit(manage_entry(person, host.id, details));
    Ok(UpdateChange {
        changed: true,
        rights: assignee_changed,
    })
}

/// The writes of updateHost, last: the move to state `to` (checked by
/// [`state_transition`]), the close of the host's control connections and
/// the end of its sessions where the state allows none.
async fn update_state(
    uow: &mut UnitOfWork,
    host: &Host,
    person: &PersonPrincipal,
    to: HostState,
    reason: &str,
) -> Result<UpdateChange, HostError> {
    let now = uow.now_ms();
    let (disabled_reason, disabled_at) = match to {
        HostState::Disabled => (Some(DisabledReason::Owner), Some(now)),
        _ => (None, None),
    };
    sqlx::query(
        "UPDATE hosts SET state = $1, disabled_reason = $2, disabled_at = $3 WHERE id = $4",
    )
    .bind(to.as_str())
    .bind(disabled_reason.map(DisabledReason::as_str))
    .bind(disabled_at)
    .bind(db::id_text(&host.id))
    .execute(uow.conn())
    .await
    .map_err(DbError::from)?;
    let close_reason = match to {
        HostState::Disabled => Some(CloseReason::HostDisabled),
        HostState::Retired => Some(CloseReason::HostRetired),
        _ => None,
    };
    if to != HostState::Active {
        // Spec 9: every node closes the host's control connections.
        signals::stage(uow, &Signal::HostClose { host_id: host.id });
    }
    let mut sessions_ended = 0;
    if let Some(close_reason) = close_reason {
        sessions_ended = revocation::end(uow, EndScope::Host(host.id), close_reason, None)
            .await
            .map_err(end_error)?
            .len();
    }
    let mut details = AuditDetails::new()
        .code("operation", ManageOperation::State)
        .code("from_state", host.state)
        .code("to_state", to)
        .count("sessions_ended", count(sessions_ended))
        .reason(reason);
    if let Some(disabled_reason) = disabled_reason {
        details = details.code("disabled_reason", disabled_reason);
    }
    uow.audit(manage_entry(person, host.id, details));
    Ok(UpdateChange {
        changed: true,
        // Only active allows sessions: entering or leaving it changes who may
        // have a terminal; disabled → retired does not.
        rights: host.state == HostState::Active || to == HostState::Active,
    })
}

async fn is_active_owner(uow: &mut UnitOfWork, person_id: Uuid) -> Result<bool, HostError> {
    Ok(persons::get(uow.conn(), person_id)
        .await?
        .is_some_and(|p| p.role == Role::Owner && p.status == PersonStatus::Active))
}

/// Records that a host.manage request changed the host: one new host version
/// and one `host.updated` with the state after the change, and — when `rights`
/// (effective permissions changed) — one new permission version. Returns the
/// new host version.
pub async fn record_change(
    uow: &mut UnitOfWork,
    host_id: Uuid,
    state_after: HostState,
    rights: bool,
) -> Result<i64, HostError> {
    if rights {
        crate::permissions::bump_version(uow).await?;
    }
    let version = super::bump_version(uow, host_id).await?;
    super::host_updated(uow, host_id, version, state_after, false);
    Ok(version)
}

/// Consumes the request's step-up in `uow` and hands the unit of work back. A
/// refusal is `401 step_up_required`; its deny entry (host.manage, `operation`,
/// `reason_code` of the refusal) is committed with `uow`, which has changed
/// nothing else yet.
pub async fn consume_step_up(
    mut uow: UnitOfWork,
    person: &PersonPrincipal,
    step_up_id: Uuid,
    host_id: Uuid,
    operation: ManageOperation,
) -> Result<UnitOfWork, HostError> {
    let now = uow.now_ms();
    match step_up::consume(&mut uow, person.login_session_id, step_up_id, now).await {
        Ok(_) => Ok(uow),
        Err(IdentityError::StepUpRequired(refusal)) => {
            uow.audit(
                AuditEntry::deny(AuditAction::HostManage, person.actor())
                    .target(TargetKind::Host, host_id)
                    .details(
                        AuditDetails::new()
                            .code("operation", operation)
                            .code("reason_code", refusal),
                    ),
            );
            uow.commit().await?;
            Err(IdentityError::StepUpRequired(refusal).into())
        }
        Err(other) => Err(other.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_names() {
        assert_eq!(check_host_name("build box"), Ok(()));
        assert_eq!(check_host_name(&"x".repeat(HOST_NAME_MAX_CHARS)), Ok(()));
        assert_eq!(check_host_name("Bäckerei 2"), Ok(()));
        assert_eq!(check_host_name(""), Err("required"));
        assert_eq!(check_host_name(" \t "), Err("required"));
        assert_eq!(
            check_host_name(&"x".repeat(HOST_NAME_MAX_CHARS + 1)),
            Err("too_long")
        );
        assert_eq!(check_host_name("a\nb"), Err("invalid"));
        assert_eq!(check_host_name("a\u{1b}[2J"), Err("invalid"));
    }
}
