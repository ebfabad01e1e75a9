//! The one `authorize(principal, action, host)` (DESIGN 3.2, spec 8.2, 13):
//! every entry point that reads a host or opens or attaches a terminal calls
//! [`authorize`] (or [`authorize_audited`], which also writes the deny entry).
//!
//! # The order of the checks (docs/decisions.md D-41)
//! For `terminal.open` and `terminal.attach`, the first that fails decides:
//!
//! | # | Check | Refusal |
//! |---|---|---|
//! | 1 | a person (agents and apps never open a terminal, 8.2) | `403 forbidden` `subject_kind_not_allowed` |
//! | 2 | host.read ([`may_read_host`]) | `404 not_found` |
//! | 3 | the capability terminal: an owner, or a valid grant directly or through a group | `403 forbidden` `no_permission` |
//! | 4 | SR11 = I6: on a personal host only the holder, owners too | `403 terminal_denied` `i6_holder_only` |
//! | 5 | SR10: a non-owner never on the server host (declared or reported) | `403 terminal_denied` `server_host_owner_only` |
//! | 6 | SR10: a non-owner only on a host assigned to them | `403 terminal_denied` `not_host_assignee` |
//! | 7 | SR12: a valid assignment whose name the host reports, owners too | `403 terminal_denied` `no_session_user` |
//! | 8 | the host is `active` | `409 host_unavailable` |
//!
//! Rules before state: what a person may do comes first, so a refusal that no
//! waiting can lift is never hidden behind `host_unavailable`, which invites a
//! retry. The server-host rule comes before the assignee rule because no
//! assignment ever lifts it. Whether the host service is connected is checked
//! by the terminal module after this (the next issue), still as
//! `host_unavailable`.
//!
//! For host.read ([`Action::HostRead`]) only checks 1 and 2 apply.
//!
//! # host.read (D-43)
//! Owners read every host; a member reads the hosts assigned to them and the
//! hosts on which they hold a valid grant (directly or through a group) —
//! also a grant that SR10 keeps from taking effect: the owner made it on
//! purpose, and the member sees on the host why it gives no terminal.
//!
//! # A lost owner role (8.3, M2-46 `authorize.AccessChanged`)
//! [`end_after_owner_role_removed`] ends, in the unit of work of the role
//! change, every open session of the person that a member may not have: on
//! the server host, on a host not assigned to them (SR10), or without a valid
//! grant terminal; `access_revoked` through the one end function.
//!
//! # Purity
//! [`authorize`] only reads. [`authorize_audited`] wraps it and writes one deny
//! entry (`terminal.open`, `terminal.attach` or `host.read`, with `reason_code`
//! and the host as target) in a fresh unit of work; an entry point that decides
//! inside its own unit of work calls [`authorize`] there and [`audit_denial`]
//! after dropping it.

use sqlx::AnyConnection;
use uuid::Uuid;

use bothy_proto::codes::CloseReason;

use super::grants;
use crate::audit::{AuditAction, AuditDetails, AuditEntry, TargetKind};
use crate::clock::UnixMillis;
use crate::codes::code_enum;
use crate::db::{self, Db, DbError, UnitOfWork};
use crate::hosts::session_users::{self, ValidAssignment};
use crate::hosts::{DenyReason, Host, HostError, HostState, LlmCredentials};
use crate::identity::principal::{PersonPrincipal, Principal};
use crate::identity::{ForbiddenReason, IdentityError};
use crate::revocation::{self, EndScope, EndedSession};

/// What the principal wants to do with the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Read the host (host.read).
    HostRead,
    /// `openTerminalSession`.
    TerminalOpen,
    /// `attachTerminalSession`.
    TerminalAttach,
}

impl Action {
    /// The audit action of a denial.
    pub fn audit_action(self) -> AuditAction {
        match self {
            Action::HostRead => AuditAction::HostRead,
            Action::TerminalOpen => AuditAction::TerminalOpen,
            Action::TerminalAttach => AuditAction::TerminalAttach,
        }
    }

    fn is_terminal(self) -> bool {
        !matches!(self, Action::HostRead)
    }
}

code_enum! {
    /// Why [`authorize`] refused: the `reason_code` of the deny entry. Each maps
    /// to exactly one problem (see the module docs).
    pub enum Denial {
        /// An agent or app.
        SubjectKindNotAllowed => "subject_kind_not_allowed",
        /// No host.read on the host.
        NotFound => "not_found",
        /// Not an owner and no valid grant terminal.
        NoPermission => "no_permission",
        /// SR11 (I6).
        I6HolderOnly => "i6_holder_only",
        /// SR10: the server host.
        ServerHostOwnerOnly => "server_host_owner_only",
        /// SR10: not the assignee.
        NotHostAssignee => "not_host_assignee",
        /// SR12.
        NoSessionUser => "no_session_user",
        /// The host is not active.
        HostUnavailable => "host_unavailable",
    }
}

impl From<Denial> for HostError {
    fn from(denial: Denial) -> Self {
        match denial {
            Denial::SubjectKindNotAllowed => {
                IdentityError::Forbidden(ForbiddenReason::SubjectKindNotAllowed).into()
            }
            Denial::NotFound => HostError::NotFound,
            Denial::NoPermission => IdentityError::Forbidden(ForbiddenReason::NoPermission).into(),
            Denial::I6HolderOnly => HostError::TerminalDenied(DenyReason::I6HolderOnly),
            Denial::ServerHostOwnerOnly => {
                HostError::TerminalDenied(DenyReason::ServerHostOwnerOnly)
            }
            Denial::NotHostAssignee => HostError::TerminalDenied(DenyReason::NotHostAssignee),
            Denial::NoSessionUser => HostError::TerminalDenied(DenyReason::NoSessionUser),
            Denial::HostUnavailable => HostError::HostUnavailable,
        }
    }
}

impl Denial {
    /// The denial an error of [`authorize`] stands for; `None` for a failure
    /// (database, stored data) that is no decision.
    pub fn of(error: &HostError) -> Option<Denial> {
        Some(match error {
            HostError::Identity(IdentityError::Forbidden(
                ForbiddenReason::SubjectKindNotAllowed,
            )) => Denial::SubjectKindNotAllowed,
            HostError::Identity(IdentityError::Forbidden(ForbiddenReason::NoPermission)) => {
                Denial::NoPermission
            }
            HostError::NotFound => Denial::NotFound,
            HostError::TerminalDenied(DenyReason::I6HolderOnly) => Denial::I6HolderOnly,
            HostError::TerminalDenied(DenyReason::ServerHostOwnerOnly) => {
                Denial::ServerHostOwnerOnly
            }
            HostError::TerminalDenied(DenyReason::NotHostAssignee) => Denial::NotHostAssignee,
            HostError::TerminalDenied(DenyReason::NoSessionUser) => Denial::NoSessionUser,
            HostError::HostUnavailable => Denial::HostUnavailable,
            _ => return None,
        })
    }
}

/// What an allowed action may use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authorized {
    /// The person.
    pub person_id: Uuid,
    /// Whether they are an owner.
    pub is_owner: bool,
    /// An owner on a host whose assignee is another person (8.4): the client
    /// warned, the audit entry of the opening says `foreign_assignee = true`.
    pub foreign_assignee: bool,
    /// The person's valid assignment of a session user the host reports
    /// (SR12): always present for terminal actions, `None` for host.read.
    pub session_user: Option<ValidAssignment>,
}

/// SR10 (8.2) for a person who holds terminal on the host: a non-owner never
/// on the server host, and only on a host assigned to them. Also the rule of
/// the grant preview ([`grants::Preview`]).
pub fn sr10(host: &Host, person_id: Uuid, is_owner: bool) -> Result<(), DenyReason> {
    if is_owner {
        return Ok(());
    }
    if host.is_server_host() {
        return Err(DenyReason::ServerHostOwnerOnly);
    }
    if host.assigned_user_id != Some(person_id) {
        return Err(DenyReason::NotHostAssignee);
    }
    Ok(())
}

/// The person `person_id` is no longer an owner (8.3 "removal of the owner
/// role"): ends in `uow`, with `access_revoked`, each open session of theirs
/// on a host where a member needs what they lack — SR10 (not the server host,
/// only their own host) or a valid grant terminal. I6 and SR12 bind owners
/// too, so the lost role changes nothing there. Returns the ended sessions.
pub async fn end_after_owner_role_removed(
    uow: &mut UnitOfWork,
    person_id: Uuid,
    now: UnixMillis,
) -> Result<Vec<EndedSession>, HostError> {
    let rows = sqlx::query(
        "SELECT DISTINCT host_id FROM terminal_sessions \
         WHERE person_id = $1 AND state <> 'closed' ORDER BY host_id",
    )
    .bind(db::id_text(&person_id))
    .fetch_all(uow.conn())
    .await
    .map_err(DbError::from)?;
    let mut ended = Vec::new();
    for row in &rows {
        let host_id = db::get_uuid(row, "host_id")?;
        let allowed = match crate::hosts::load(uow.conn(), host_id).await? {
            Some(host) => {
                sr10(&host, person_id, false).is_ok()
                    && grants::has_valid_grant(uow.conn(), person_id, host_id, now).await?
            }
            None => false,
        };
        if !allowed {
            let scope = EndScope::PersonOnHost { host_id, person_id };
            let mut these = revocation::end(uow, scope, CloseReason::AccessRevoked, None)
                .await
                .map_err(crate::hosts::session_users::end_error)?;
            ended.append(&mut these);
        }
    }
    Ok(ended)
}

/// The decision, without writing anything.
async fn decide(
    conn: &mut AnyConnection,
    principal: &Principal,
    action: Action,
    host: &Host,
    now: UnixMillis,
) -> Result<Result<Authorized, Denial>, HostError> {
    let Principal::Person(person) = principal else {
        return Ok(Err(Denial::SubjectKindNotAllowed));
    };
    if !person_may_read_host(conn, person, host, now).await? {
        return Ok(Err(Denial::NotFound));
    }
    let is_owner = person.is_owner();
    let person_id = person.person_id;
    let foreign_assignee = is_owner && host.assigned_user_id.is_some_and(|id| id != person_id);
    if !action.is_terminal() {
        return Ok(Ok(Authorized {
            person_id,
            is_owner,
            foreign_assignee,
            session_user: None,
        }));
    }
    if !is_owner && !grants::has_valid_grant(conn, person_id, host.id, now).await? {
        return Ok(Err(Denial::NoPermission));
    }
    if host.llm_credentials == LlmCredentials::Personal
        && host.credential_holder_id != Some(person_id)
    {
        return Ok(Err(Denial::I6HolderOnly));
    }
    if let Err(reason) = sr10(host, person_id, is_owner) {
        return Ok(Err(match reason {
            DenyReason::ServerHostOwnerOnly => Denial::ServerHostOwnerOnly,
            _ => Denial::NotHostAssignee,
        }));
    }
    let session_user = session_users::valid_assignment(conn, host.id, person_id)
        .await?
        .filter(|assignment| host.reports_session_user(&assignment.os_user));
    let Some(session_user) = session_user else {
        return Ok(Err(Denial::NoSessionUser));
    };
    if host.state != HostState::Active {
        return Ok(Err(Denial::HostUnavailable));
    }
    Ok(Ok(Authorized {
        person_id,
        is_owner,
        foreign_assignee,
        session_user: Some(session_user),
    }))
}

/// Whether `principal` may do `action` with `host` at `now` (see the module
/// docs for the order and the refusals). Reads only; the caller audits a
/// refusal ([`audit_denial`]) or calls [`authorize_audited`].
pub async fn authorize(
    conn: &mut AnyConnection,
    principal: &Principal,
    action: Action,
    host: &Host,
    now: UnixMillis,
) -> Result<Authorized, HostError> {
    decide(conn, principal, action, host, now)
        .await?
        .map_err(HostError::from)
}

/// The deny entry of a refusal: the action's audit action, the actor, the host
/// as target, `host_id` and `reason_code`.
pub fn deny_entry(
    principal: &Principal,
    action: Action,
    host_id: Uuid,
    denial: Denial,
) -> AuditEntry {
    AuditEntry::deny(action.audit_action(), principal.actor())
        .target(TargetKind::Host, host_id)
        .details(
            AuditDetails::new()
                .id("host_id", host_id)
                .code("reason_code", denial),
        )
}

/// Writes the deny entry for `error` in a fresh unit of work if it is a
/// refusal of [`authorize`] ([`Denial::of`]); returns `error` (or the database
/// error of the write).
pub async fn audit_denial(
    db: &Db,
    now: UnixMillis,
    principal: &Principal,
    action: Action,
    host_id: Uuid,
    error: HostError,
) -> HostError {
    let Some(denial) = Denial::of(&error) else {
        return error;
    };
    let written = async {
        let mut uow = db.begin(now).await?;
        uow.audit(deny_entry(principal, action, host_id, denial));
        uow.commit().await
    };
    match written.await {
        Ok(_) => error,
        Err(db_error) => HostError::Db(db_error),
    }
}

/// [`authorize`] on a pooled connection; a refusal is audited ([`audit_denial`]).
pub async fn authorize_audited(
    db: &Db,
    now: UnixMillis,
    principal: &Principal,
    action: Action,
    host: &Host,
) -> Result<Authorized, HostError> {
    let decided = {
        let mut conn = db.pool().acquire().await.map_err(DbError::from)?;
        authorize(&mut conn, principal, action, host, now).await
    };
    match decided {
        Ok(authorized) => Ok(authorized),
        Err(error) => Err(audit_denial(db, now, principal, action, host.id, error).await),
    }
}

/// Whether `principal` may read the host (host.read) at `now`: owners (every
/// host, also one that does not exist, which they would learn anyway); the
/// assignee; persons with a valid grant on it (directly or through a group).
/// Agents and apps: no.
pub async fn may_read_host(
    conn: &mut AnyConnection,
    principal: &Principal,
    host_id: Uuid,
    now: UnixMillis,
) -> Result<bool, HostError> {
    match principal {
        Principal::Service(_) => Ok(false),
        Principal::Person(person) if person.is_owner() => Ok(true),
        Principal::Person(person) => {
            let row = sqlx::query("SELECT assigned_user_id FROM hosts WHERE id = $1")
                .bind(db::id_text(&host_id))
                .fetch_optional(&mut *conn)
                .await
                .map_err(DbError::from)?;
            let Some(row) = row else {
                return Ok(false);
            };
            if db::get_opt_uuid(&row, "assigned_user_id")? == Some(person.person_id) {
                return Ok(true);
            }
            grants::has_valid_grant(conn, person.person_id, host_id, now).await
        }
    }
}

/// [`may_read_host`] for a person and a host already loaded.
async fn person_may_read_host(
    conn: &mut AnyConnection,
    person: &PersonPrincipal,
    host: &Host,
    now: UnixMillis,
) -> Result<bool, HostError> {
    if person.is_owner() || host.assigned_user_id == Some(person.person_id) {
        return Ok(true);
    }
    grants::has_valid_grant(conn, person.person_id, host.id, now).await
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn every_denial_is_its_own_host_error_and_back() {
        for &denial in Denial::ALL {
            assert_eq!(
                Denial::of(&HostError::from(denial)),
                Some(denial),
                "{denial}"
            );
        }
        // Failures and other refusals are no decision of authorize.
        assert_eq!(Denial::of(&HostError::I6Violation), None);
        assert_eq!(Denial::of(&HostError::Stored("x")), None);
        assert_eq!(
            Denial::of(&HostError::TerminalDenied(DenyReason::SessionLimit)),
            None
        );
    }

    fn host(assigned: Option<Uuid>, declared: Option<bool>, reported: Option<bool>) -> Host {
        Host {
            id: Uuid::from_u128(1),
            name: "box".into(),
            state: HostState::Active,
            disabled_reason: None,
            disabled_at: None,
            assigned_user_id: assigned,
            noise_public_key: None,
            auth_public_jwk: None,
            auth_jkt: None,
            key_fingerprint: None,
            key_generation: 1,
            pairing_code_hash: None,
            pairing_expires_at: None,
            fingerprint_failures: 0,
            llm_credentials: LlmCredentials::None,
            credential_holder_id: None,
            declared_server_host: declared,
            reported_session_users: Some(json!([])),
            reported_profiles: None,
            reported_doctor: None,
            reported_is_server_host: reported,
            reported_require_local_confirm: None,
            reported_host_version: None,
            reported_platform: None,
            reported_os_version: None,
            last_seen_at: None,
            version: 1,
            created_by: Uuid::from_u128(2),
            created_at: 0,
            updated_at: 0,
        }
    }

    #[test]
    fn sr10_owners_everywhere_members_on_their_own_host_only() {
        let me = Uuid::from_u128(10);
        let other = Uuid::from_u128(11);
        for (assigned, declared, reported, member) in [
            (Some(me), Some(false), None, Ok(())),
            (Some(me), Some(false), Some(false), Ok(())),
            (
                Some(other),
                Some(false),
                None,
                Err(DenyReason::NotHostAssignee),
            ),
            (None, Some(false), None, Err(DenyReason::NotHostAssignee)),
            // The server host: no assignment lifts it, so it is named first.
            (
                Some(me),
                Some(true),
                None,
                Err(DenyReason::ServerHostOwnerOnly),
            ),
            (
                Some(me),
                Some(false),
                Some(true),
                Err(DenyReason::ServerHostOwnerOnly),
            ),
            (
                Some(other),
                None,
                Some(true),
                Err(DenyReason::ServerHostOwnerOnly),
            ),
        ] {
            let host = host(assigned, declared, reported);
            assert_eq!(
                sr10(&host, me, false),
                member,
                "{assigned:?} {declared:?} {reported:?}"
            );
            assert_eq!(sr10(&host, me, true), Ok(()));
        }
    }
}
