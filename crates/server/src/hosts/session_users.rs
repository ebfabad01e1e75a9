//! The assignments of persons to session users of a host (2.2 items 1–5,
//! ruling T12; table `host_session_users`).
//!
//! Rules, in the order they are checked:
//! 1. A name must equal a name of the host's last report exactly, case included
//!    ([`Host::reports_session_user`]), else `400 validation_failed` with
//!    `session_user_not_on_host` at `<pointer>/<i>/os_user` — the host service
//!    compares `osu` exactly, so a typo is caught here and not as 4104 (R-TM-23).
//! 2. The person exists as a person and is not deleted, else `unknown_user` at
//!    `<pointer>/<i>/user_id`. Every finding of a request is reported at once.
//! 3. A name that belongs or belonged to anyone on this host — compared without
//!    regard to case, over every row ever written — and a second valid
//!    assignment of the same person (also two in one request) are `409 conflict`
//!    with reason `session_user_taken`. The caller's unit of work then rolls
//!    back, so nothing of the request stays. The schema holds the same two rules
//!    (`UNIQUE (host_id, os_user_folded)` and one valid row per person and host),
//!    so a concurrent writer that slips past the reads still gets the 409.
//!
//! A request that repeats a person's current valid assignment exactly changes
//! nothing and is no conflict (docs/decisions.md D-31): a retried request gets
//! the same answer.
//!
//! Rows are never deleted: ending an assignment sets `ended_at`/`ended_by`, so
//! the name stays taken on this host forever (2.2 item 2). Ending one ends that
//! person's open sessions on the host (`access_revoked`, 8.3) through the one
//! end function, in the same unit of work.
//!
//! Audit: one host.manage entry per assignment made or ended — operation
//! `session_user`, `change` (`assigned` | `revoked`), `user_id`, the name in the
//! reserved field `os_user`, and the owner's `reason`.

use std::collections::HashSet;

use bothy_api::hosts::HostSessionUser;
use bothy_proto::codes::CloseReason;
use sqlx::{AnyConnection, Row};
use uuid::Uuid;

use super::{Host, HostConflict, HostError, ManageOperation};
use crate::audit::{Actor, AuditAction, AuditDetails, AuditEntry, OsUserName, TargetKind};
use crate::codes::code_enum;
use crate::db::{self, DbError, UnitOfWork};
use crate::identity::{Invalid, PersonStatus, persons};
use crate::revocation::{self, EndScope};

code_enum! {
    /// The `change` of a `session_user` audit entry (10.1).
    pub enum AssignmentChange {
        /// An assignment was made.
        Assigned => "assigned",
        /// An assignment was ended.
        Revoked => "revoked",
    }
}

/// One requested assignment: this person gets this session user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    /// The person.
    pub person_id: Uuid,
    /// The session user's name, exactly as the host reported it.
    pub os_user: String,
}

/// A valid assignment as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidAssignment {
    /// `host_session_users.id`.
    pub id: Uuid,
    /// The person.
    pub person_id: Uuid,
    /// The session user's name.
    pub os_user: String,
}

impl ValidAssignment {
    /// The form a reader of the host sees (`session_users[]` of a host):
    /// `{user_id, os_user}` — the member names of the requests that make them.
    pub fn to_api(&self) -> HostSessionUser {
        HostSessionUser {
            user_id: db::id_text(&self.person_id),
            os_user: self.os_user.clone(),
        }
    }
}

/// An assignment ended by [`end_rows`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndedAssignment {
    /// The person.
    pub person_id: Uuid,
    /// The session user's name.
    pub os_user: String,
    /// How many of the person's sessions on the host ended with it.
    pub sessions_ended: usize,
}

/// The folded form that uniqueness compares (`os_user_folded`). Reported names
/// are ASCII (the pattern of 3.2), so ASCII folding is the whole story.
pub fn fold(os_user: &str) -> String {
    os_user.to_ascii_lowercase()
}

/// Makes the assignments in `uow` (confirmHost and updateHost), with the rules
/// of 2.2: only reported names, exact case (`session_user_not_on_host`), the
/// person exists as an active or disabled person (`unknown_user`), a name that
/// belongs or belonged to anyone on this host or a second valid assignment of
/// the person → `409 conflict session_user_taken`. Findings point below
/// `pointer` (e.g. `/session_users/0/os_user`). Writes one host.manage audit
/// entry per assignment (operation session_user, change assigned, user_id,
/// os_user, reason) and raises the permission version once if anything changed.
/// Does not bump the host version; the caller does, once. Returns how many
/// assignments were made (an exact repeat of a valid one makes none).
pub async fn assign(
    uow: &mut UnitOfWork,
    host: &Host,
    actor: Uuid,
    assignments: &[Assignment],
    pointer: &str,
    reason: &str,
) -> Result<usize, HostError> {
    let findings = validate(uow.conn(), host, assignments, pointer).await?;
    if !findings.is_empty() {
        return Err(HostError::Invalid(findings));
    }
    let made = assign_rows(uow, host, actor, assignments, reason).await?;
    if made > 0 {
        crate::permissions::bump_version(uow).await?;
    }
    Ok(made)
}

/// Rules 1 and 2 of the module docs for every assignment: the findings, empty
/// if there are none. Reads only.
pub async fn validate(
    conn: &mut AnyConnection,
    host: &Host,
    assignments: &[Assignment],
    pointer: &str,
) -> Result<Vec<Invalid>, HostError> {
    let mut findings = Vec::new();
    for (i, assignment) in assignments.iter().enumerate() {
        if !host.reports_session_user(&assignment.os_user) {
            findings.push(Invalid::at(
                format!("{pointer}/{i}/os_user"),
                "session_user_not_on_host",
            ));
        } else if OsUserName::new(&assignment.os_user).is_err() {
            // A reported name the audit cannot hold (longer than its bound):
            // the assignment could not be audited, so it is not made.
            findings.push(Invalid::at(format!("{pointer}/{i}/os_user"), "too_long"));
        }
        if !is_assignable_person(conn, assignment.person_id).await? {
            findings.push(Invalid::at(
                format!("{pointer}/{i}/user_id"),
                "unknown_user",
            ));
        }
    }
    Ok(findings)
}

/// Whether `id` is a person who is not deleted (assignee, person of an
/// assignment, holder of a personal login: 13 `unknown_user` otherwise).
pub async fn is_assignable_person(conn: &mut AnyConnection, id: Uuid) -> Result<bool, HostError> {
    Ok(persons::get(conn, id)
        .await?
        .is_some_and(|person| person.status != PersonStatus::Deleted))
}

/// Rule 3 and the writes of [`assign`], for assignments that passed
/// [`validate`]; raises no version. Returns how many were made.
pub async fn assign_rows(
    uow: &mut UnitOfWork,
    host: &Host,
    actor: Uuid,
    assignments: &[Assignment],
    reason: &str,
) -> Result<usize, HostError> {
    let taken = || HostError::Conflict(HostConflict::SessionUserTaken);
    // Within the request: one name, one person, at most once each.
    let mut names = HashSet::new();
    let mut people = HashSet::new();
    for assignment in assignments {
        if !names.insert(fold(&assignment.os_user)) || !people.insert(assignment.person_id) {
            return Err(taken());
        }
    }
    let mut made = 0;
    for assignment in assignments {
        let current = valid_assignment(uow.conn(), host.id, assignment.person_id).await?;
        match current {
            Some(current) if current.os_user == assignment.os_user => continue,
            Some(_) => return Err(taken()),
            None => {}
        }
        let folded = fold(&assignment.os_user);
        let used: Option<String> = sqlx::query_scalar(
            "SELECT id FROM host_session_users WHERE host_id = $1 AND os_user_folded = $2",
        )
        .bind(db::id_text(&host.id))
        .bind(&folded)
        .fetch_optional(uow.conn())
        .await
        .map_err(DbError::from)?;
        if used.is_some() {
            return Err(taken());
        }
        let now = uow.now_ms();
        let id = db::new_id(now)?;
        let inserted = sqlx::query(
            "INSERT INTO host_session_users \
             (id, host_id, person_id, os_user, os_user_folded, assigned_by, assigned_at, ended_by, ended_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, NULL, NULL)",
        )
        .bind(db::id_text(&id))
        .bind(db::id_text(&host.id))
        .bind(db::id_text(&assignment.person_id))
        .bind(&assignment.os_user)
        .bind(&folded)
        .bind(db::id_text(&actor))
        .bind(now)
        .execute(uow.conn())
        .await
        .map_err(DbError::from);
        match inserted {
            Ok(_) => {}
            // A concurrent writer took the name or gave the person an assignment.
            Err(DbError::Conflict(_)) => return Err(taken()),
            Err(other) => return Err(other.into()),
        }
        let os_user =
            OsUserName::new(&assignment.os_user).map_err(|_| HostError::invalid("", "too_long"))?;
        uow.audit(
            AuditEntry::allow(AuditAction::HostManage, Actor::Person(actor))
                .target(TargetKind::Host, host.id)
                .details(details(
                    AssignmentChange::Assigned,
                    assignment.person_id,
                    &os_user,
                    reason,
                )),
        );
        made += 1;
    }
    Ok(made)
}

/// Ends the valid assignment of each person in `person_ids` on the host (a
/// person without one is skipped: there is nothing to end), ends their open
/// sessions there (`access_revoked`) and writes one `revoked` entry per
/// assignment; raises no version. Returns what it ended.
pub async fn end_rows(
    uow: &mut UnitOfWork,
    host_id: Uuid,
    actor: Uuid,
    person_ids: &[Uuid],
    reason: &str,
) -> Result<Vec<EndedAssignment>, HostError> {
    let mut ended = Vec::new();
    for &person_id in person_ids {
        let now = uow.now_ms();
        let row = sqlx::query(
            "UPDATE host_session_users SET ended_at = $1, ended_by = $2 \
             WHERE host_id = $3 AND person_id = $4 AND ended_at IS NULL \
             RETURNING os_user",
        )
        .bind(now)
        .bind(db::id_text(&actor))
        .bind(db::id_text(&host_id))
        .bind(db::id_text(&person_id))
        .fetch_optional(uow.conn())
        .await
        .map_err(DbError::from)?;
        let Some(row) = row else { continue };
        let name: String = row
            .try_get("os_user")
            .map_err(|_| HostError::Stored("host_session_users.os_user"))?;
        let os_user =
            OsUserName::new(&name).map_err(|_| HostError::Stored("host_session_users.os_user"))?;
        let sessions = revocation::end(
            uow,
            EndScope::PersonOnHost { host_id, person_id },
            CloseReason::AccessRevoked,
            None,
        )
        .await
        .map_err(end_error)?;
        uow.audit(
            AuditEntry::allow(AuditAction::HostManage, Actor::Person(actor))
                .target(TargetKind::Host, host_id)
                .details(
                    details(AssignmentChange::Revoked, person_id, &os_user, reason)
                        .count("sessions_ended", count(sessions.len())),
                ),
        );
        ended.push(EndedAssignment {
            person_id,
            os_user: name,
            sessions_ended: sessions.len(),
        });
    }
    Ok(ended)
}

/// The person's valid assignment on the host, if any (valid = not ended; SR12
/// additionally needs the host to report the name, see
/// [`Host::reports_session_user`]).
pub async fn valid_assignment(
    conn: &mut sqlx::AnyConnection,
    host_id: Uuid,
    person_id: Uuid,
) -> Result<Option<ValidAssignment>, HostError> {
    let row = sqlx::query(
        "SELECT id, person_id, os_user FROM host_session_users \
         WHERE host_id = $1 AND person_id = $2 AND ended_at IS NULL",
    )
    .bind(db::id_text(&host_id))
    .bind(db::id_text(&person_id))
    .fetch_optional(conn)
    .await
    .map_err(DbError::from)?;
    row.as_ref().map(decode).transpose()
}

/// Every valid assignment of the host, oldest first and, within one unit of
/// work, by name (what host.read shows).
pub async fn list_valid(
    conn: &mut sqlx::AnyConnection,
    host_id: Uuid,
) -> Result<Vec<ValidAssignment>, HostError> {
    let rows = sqlx::query(
        "SELECT id, person_id, os_user FROM host_session_users \
         WHERE host_id = $1 AND ended_at IS NULL ORDER BY assigned_at, os_user_folded",
    )
    .bind(db::id_text(&host_id))
    .fetch_all(conn)
    .await
    .map_err(DbError::from)?;
    rows.iter().map(decode).collect()
}

/// The host as a reader sees it: [`Host::to_api`] with `session_users[]`
/// (the valid assignments, 2.2 item 1).
pub async fn host_view(
    conn: &mut sqlx::AnyConnection,
    host: &Host,
) -> Result<bothy_api::hosts::Host, HostError> {
    let assignments = list_valid(conn, host.id)
        .await?
        .iter()
        .map(ValidAssignment::to_api)
        .collect();
    Ok(host.to_api(assignments))
}

fn decode(row: &sqlx::any::AnyRow) -> Result<ValidAssignment, HostError> {
    Ok(ValidAssignment {
        id: db::get_uuid(row, "id")?,
        person_id: db::get_uuid(row, "person_id")?,
        os_user: row
            .try_get("os_user")
            .map_err(|_| HostError::Stored("host_session_users.os_user"))?,
    })
}

fn details(
    change: AssignmentChange,
    person_id: Uuid,
    os_user: &OsUserName,
    reason: &str,
) -> AuditDetails {
    AuditDetails::new()
        .code("operation", ManageOperation::SessionUser)
        .code("change", change)
        .id("user_id", person_id)
        .os_user(os_user)
        .reason(reason)
}

/// An error of the end function as a host error.
pub(crate) fn end_error(error: crate::revocation::EndError) -> HostError {
    match error {
        crate::revocation::EndError::Db(db) => HostError::Db(db),
        // A reason/detail pair of our own making that 10.3 does not allow.
        crate::revocation::EndError::InvalidPair { .. } => HostError::Stored("close_reason pair"),
    }
}

/// A length as an audit count.
pub(crate) fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}
