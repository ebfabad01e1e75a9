//! What `bothy-server admin ...` does, as library functions (the CLI only
//! prints), plus the owner's invitation, which issues codes the same way.
//! Operator actions are audited with actor `system`.
//!
//! - [`bootstrap`] (`admin bootstrap --username NAME`): the first owner and a
//!   one-time enrollment code. Refused once any owner exists (not deleted): an
//!   operator who lost access uses [`reset_second_factor`] instead, so bootstrap
//!   can never mint a second way in.
//! - [`reset_second_factor`] (`admin reset-second-factor --username NAME`):
//!   removes the person's TOTP credentials, ends their login sessions and with
//!   them their terminal sessions (`session_revoked`) and issues a new
//!   enrollment code; enrolling with it sets a password and a TOTP secret again.
//! - [`disable`] (`admin disable --username NAME`; `POST
//!   /api/v1/persons/{id}/disable`, owners, with a step-up and a reason):
//!   status `disabled`, login sessions and every terminal session of the
//!   person ended (`user_disabled`, 8.3), in one unit of work; disabled
//!   already changes nothing (`no_change`, still audited). The last active
//!   owner is never disabled, by an owner nor by the operator (`409 conflict`
//!   `last_owner`; active owners locked and counted first as for
//!   [`set_role`], D-86, docs/decisions.md D-301).
//! - [`enable`] (`admin enable --username NAME`; `POST
//!   /api/v1/persons/{id}/enable`, owners): status `active` again. A rights
//!   change: dormant grants become valid again, so it raises the permission
//!   version and checks I6 for the person in the same unit of work
//!   ([`crate::permissions::i6::check_person`], chapter D-M2-40-5); a violation
//!   rolls it back and is audited as a `person.enable` deny (`409 i6_violation`).
//! - [`invite`] (`POST /api/v1/persons`, owners): a person and their code.
//! - [`set_role`] (`admin set-role --username NAME --role owner|member`;
//!   `POST /api/v1/persons/{id}/role`, owners, with a step-up and a reason):
//!   the person's role. A rights change: it raises the permission version, and
//!   removing the owner role ends, in the same unit of work, every session
//!   that SR10 no longer allows them (`access_revoked`, 8.3,
//!   [`permissions::authorize::end_after_owner_role_removed`]). The last
//!   active owner is never demoted (`409 conflict` `last_owner`): the
//!   active owners are locked and counted first, so two owners demoting each
//!   other at once cannot both succeed (docs/decisions.md D-86).

use bothy_proto::codes::CloseReason;
use uuid::Uuid;

use super::enrollment::{self, EnrollmentPurpose, IssuedCode};
use super::login_sessions::{self, EndReason, Ending};
use super::persons::{self, Person, Username};
use super::principal::PersonPrincipal;
use super::step_up;
use super::{ConflictReason, IdentityError, PersonStatus, Role, count, deny};
use crate::audit::{Actor, AuditAction, AuditDetails, AuditEntry, TargetKind};
use crate::clock::UnixMillis;
use crate::config::AuthConfig;
use crate::db::{Db, Engine, UnitOfWork};
use crate::hosts::HostError;
use crate::pepper::Pepper;
use crate::permissions::{self, i6};
use crate::revocation::{self, EndScope};

/// The key of the PostgreSQL advisory lock that serialises bootstraps (ASCII
/// `bothyboo`); SQLite serialises every unit of work anyway.
const BOOTSTRAP_LOCK_KEY: i64 = 0x626f_7468_7962_6f6f;

/// A person and their new enrollment code.
#[derive(Debug)]
pub struct Enrollable {
    /// The person.
    pub person: Person,
    /// The code; show it once.
    pub issued: IssuedCode,
    /// Login sessions this ended (reset only).
    pub sessions_ended: Vec<Uuid>,
}

fn username(text: &str) -> Result<Username, IdentityError> {
    Username::parse(text).ok_or_else(|| IdentityError::invalid("/username", "invalid_username"))
}

async fn person_named(uow: &mut UnitOfWork, name: &Username) -> Result<Person, IdentityError> {
    persons::find_by_username(uow.conn(), name)
        .await?
        .ok_or(IdentityError::NotFound)
}

async fn reload(uow: &mut UnitOfWork, id: Uuid) -> Result<Person, IdentityError> {
    persons::get(uow.conn(), id)
        .await?
        .ok_or(IdentityError::Stored("persons row"))
}

/// Creates the first owner; see the module docs.
pub async fn bootstrap(
    db: &Db,
    pepper: &Pepper,
    auth: &AuthConfig,
    now: UnixMillis,
    name: &str,
) -> Result<Enrollable, IdentityError> {
    let name = username(name)?;
    let mut uow = db.begin(now).await?;
    if uow.engine() == Engine::Postgres {
        // Two bootstraps at once must not both see "no owner" (read committed).
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(BOOTSTRAP_LOCK_KEY)
            .execute(uow.conn())
            .await
            .map_err(crate::db::DbError::from)?;
    }
    if persons::owner_exists(uow.conn()).await? {
        let entry = AuditEntry::deny(AuditAction::PersonInvite, Actor::System).details(
            AuditDetails::new()
                .code("operation", EnrollmentPurpose::Bootstrap)
                .code("reason_code", ConflictReason::OwnerExists),
        );
        return Err(deny(
            uow,
            entry,
            IdentityError::Conflict(ConflictReason::OwnerExists),
        )
        .await);
    }
    let id = persons::create(&mut uow, &name, Role::Owner).await?;
    let issued =
        enrollment::issue(&mut uow, pepper, auth, id, EnrollmentPurpose::Bootstrap).await?;
    uow.audit(
        AuditEntry::allow(AuditAction::PersonInvite, Actor::System)
            .target(TargetKind::Person, id)
            .details(
                AuditDetails::new()
                    .code("operation", EnrollmentPurpose::Bootstrap)
                    .code("role", Role::Owner),
            ),
    );
    let person = reload(&mut uow, id).await?;
    uow.commit().await?;
    Ok(Enrollable {
        person,
        issued,
        sessions_ended: Vec::new(),
    })
}

/// `POST /api/v1/persons`: an owner invites a person (the caller checked the
/// role).
pub async fn invite(
    db: &Db,
    pepper: &Pepper,
    auth: &AuthConfig,
    now: UnixMillis,
    actor: &PersonPrincipal,
    name: &Username,
    role: Role,
) -> Result<Enrollable, IdentityError> {
    let mut uow = db.begin(now).await?;
    let id = persons::create(&mut uow, name, role).await?;
    let issued = enrollment::issue(&mut uow, pepper, auth, id, EnrollmentPurpose::Invite).await?;
    uow.audit(
        AuditEntry::allow(AuditAction::PersonInvite, actor.actor())
            .target(TargetKind::Person, id)
            .details(
                AuditDetails::new()
                    .code("operation", EnrollmentPurpose::Invite)
                    .code("role", role),
            ),
    );
    let person = reload(&mut uow, id).await?;
    uow.commit().await?;
    Ok(Enrollable {
        person,
        issued,
        sessions_ended: Vec::new(),
    })
}

/// Resets a person's second factor; see the module docs. A disabled or
/// deleted person is refused (`PersonInactive` is not theirs to lift here).
pub async fn reset_second_factor(
    db: &Db,
    pepper: &Pepper,
    auth: &AuthConfig,
    now: UnixMillis,
    name: &str,
) -> Result<Enrollable, IdentityError> {
    let name = username(name)?;
    let mut uow = db.begin(now).await?;
    let person = person_named(&mut uow, &name).await?;
    if person.status != PersonStatus::Active {
        return Err(IdentityError::invalid("/username", "person_not_active"));
    }
    let removed = sqlx::query("DELETE FROM totp_credentials WHERE person_id = $1")
        .bind(crate::db::id_text(&person.id))
        .execute(uow.conn())
        .await
        .map_err(crate::db::DbError::from)?
        .rows_affected();
    // Passkeys are a second factor too (DESIGN 3.1): they go with the reset.
    sqlx::query("DELETE FROM passkeys WHERE person_id = $1")
        .bind(crate::db::id_text(&person.id))
        .execute(uow.conn())
        .await
        .map_err(crate::db::DbError::from)?;
    let sessions_ended = login_sessions::end(
        &mut uow,
        Ending::Person(person.id),
        EndReason::SessionRevoked,
    )
    .await?;
    let issued = enrollment::issue(
        &mut uow,
        pepper,
        auth,
        person.id,
        EnrollmentPurpose::ResetSecondFactor,
    )
    .await?;
    uow.audit(
        AuditEntry::allow(AuditAction::PersonResetSecondFactor, Actor::System)
            .target(TargetKind::Person, person.id)
            .details(
                AuditDetails::new()
                    .count(
                        "credentials_removed",
                        i64::try_from(removed).unwrap_or(i64::MAX),
                    )
                    .count("sessions_ended", count(&sessions_ended)),
            ),
    );
    let person = reload(&mut uow, person.id).await?;
    uow.commit().await?;
    Ok(Enrollable {
        person,
        issued,
        sessions_ended,
    })
}

/// The outcome of [`disable`].
#[derive(Debug)]
pub struct Disabled {
    /// The person.
    pub person: Person,
    /// Whether the status changed (false: disabled already).
    pub changed: bool,
    /// Login sessions this ended.
    pub sessions_ended: Vec<Uuid>,
}

/// Disables a person; see the module docs. The step-up of an owner is
/// consumed first (also when they were disabled already); the last active
/// owner is refused (`409 conflict` `last_owner`, nothing changed, audited).
pub async fn disable(
    db: &Db,
    now: UnixMillis,
    who: PersonRef<'_>,
    authority: RoleAuthority<'_>,
) -> Result<Disabled, IdentityError> {
    let uow = db.begin(now).await?;
    let mut uow = consume_step_up(uow, now, AuditAction::PersonDisable, who, authority).await?;
    let actor = authority.actor();
    let person = find(&mut uow, who).await?;
    let mut uow = keep_last_owner(
        uow,
        AuditAction::PersonDisable,
        actor,
        &person,
        &authority.details(),
    )
    .await?;
    let changed = persons::set_status(&mut uow, person.id, PersonStatus::Disabled).await?;
    let sessions_ended =
        login_sessions::end(&mut uow, Ending::Person(person.id), EndReason::UserDisabled).await?;
    // Disabling the person (8.3): also their terminal sessions of a login
    // session that only expired (the sweep had not reached them yet).
    revocation::end(
        &mut uow,
        EndScope::Person(person.id),
        CloseReason::UserDisabled,
        None,
    )
    .await
    .map_err(login_sessions::terminal_end_error)?;
    uow.audit(
        AuditEntry::allow(AuditAction::PersonDisable, actor)
            .target(TargetKind::Person, person.id)
            .details(
                authority
                    .details()
                    .count("sessions_ended", count(&sessions_ended))
                    .flag("no_change", !changed),
            ),
    );
    let person = reload(&mut uow, person.id).await?;
    uow.commit().await?;
    Ok(Disabled {
        person,
        changed,
        sessions_ended,
    })
}

/// Whom [`disable`], [`enable`] and [`set_role`] act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PersonRef<'a> {
    /// By username (the CLI); unknown is `NotFound`, deleted `person_not_active`.
    Username(&'a str),
    /// By ID (the route); unknown or deleted is `NotFound`.
    Id(Uuid),
}

/// The person `who` names, in `uow`.
async fn find(uow: &mut UnitOfWork, who: PersonRef<'_>) -> Result<Person, IdentityError> {
    match who {
        PersonRef::Username(name) => {
            let person = person_named(uow, &username(name)?).await?;
            if person.status == PersonStatus::Deleted {
                return Err(IdentityError::invalid("/username", "person_not_active"));
            }
            Ok(person)
        }
        PersonRef::Id(id) => match persons::get(uow.conn(), id).await? {
            Some(person) if person.status != PersonStatus::Deleted => Ok(person),
            _ => Err(IdentityError::NotFound),
        },
    }
}

/// The outcome of [`enable`].
#[derive(Debug)]
pub struct Enabled {
    /// The person.
    pub person: Person,
    /// Whether the status changed (false: active already).
    pub changed: bool,
}

/// Enables a disabled person; see the module docs. `actor` is `system` for the
/// CLI, the owner for the route (which checked the role).
pub async fn enable(
    db: &Db,
    now: UnixMillis,
    actor: Actor,
    who: PersonRef<'_>,
) -> Result<Enabled, HostError> {
    let mut uow = db.begin(now).await.map_err(IdentityError::from)?;
    let person = find(&mut uow, who).await?;
    let changed = persons::set_status(&mut uow, person.id, PersonStatus::Active).await?;
    if changed {
        permissions::bump_version(&mut uow).await?;
        if let Err(error) = i6::check_person(&mut uow, person.id).await {
            return Err(match error {
                HostError::I6Violation => {
                    drop(uow);
                    i6::audit_violation(
                        db,
                        now,
                        AuditAction::PersonEnable,
                        actor,
                        Some(crate::audit::Target {
                            kind: TargetKind::Person,
                            id: person.id,
                        }),
                        AuditDetails::new(),
                    )
                    .await
                }
                other => other,
            });
        }
    }
    uow.audit(
        AuditEntry::allow(AuditAction::PersonEnable, actor)
            .target(TargetKind::Person, person.id)
            .details(AuditDetails::new().flag("no_change", !changed)),
    );
    let person = reload(&mut uow, person.id).await?;
    uow.commit().await.map_err(IdentityError::from)?;
    Ok(Enabled { person, changed })
}

/// The authority of a role change or a disable: the operator on the command
/// line, or an owner over the API with the step-up the request consumes and a
/// reason.
#[derive(Debug, Clone, Copy)]
pub enum RoleAuthority<'a> {
    /// `bothy-server admin set-role` or `admin disable` (actor `system`).
    Operator,
    /// `POST /api/v1/persons/{id}/role` or `/disable` (the route checked the
    /// role).
    Owner {
        /// The owner.
        person: &'a PersonPrincipal,
        /// The step-up of their login session, consumed by the change.
        step_up_id: Uuid,
        /// The owner's reason (kept in the audit).
        reason: &'a str,
    },
}

impl RoleAuthority<'_> {
    fn actor(&self) -> Actor {
        match self {
            RoleAuthority::Operator => Actor::System,
            RoleAuthority::Owner { person, .. } => person.actor(),
        }
    }

    fn details(&self) -> AuditDetails {
        match self {
            RoleAuthority::Operator => AuditDetails::new(),
            RoleAuthority::Owner { reason, .. } => AuditDetails::new().reason(reason),
        }
    }
}

/// The outcome of [`set_role`].
#[derive(Debug)]
pub struct RoleSet {
    /// The person, with the role asked for.
    pub person: Person,
    /// Whether the role changed (false: it was that role already).
    pub changed: bool,
    /// The terminal sessions the lost owner role ended.
    pub sessions_ended: usize,
}

/// Sets a person's role; see the module docs.
pub async fn set_role(
    db: &Db,
    now: UnixMillis,
    who: PersonRef<'_>,
    role: Role,
    authority: RoleAuthority<'_>,
) -> Result<RoleSet, HostError> {
    let uow = db.begin(now).await.map_err(IdentityError::from)?;
    let mut uow = consume_step_up(uow, now, AuditAction::PersonSetRole, who, authority).await?;
    let actor = authority.actor();
    let person = find(&mut uow, who).await?;
    let details = authority
        .details()
        .code("from_role", person.role)
        .code("to_role", role);
    if person.role == role {
        uow.audit(
            AuditEntry::allow(AuditAction::PersonSetRole, actor)
                .target(TargetKind::Person, person.id)
                .details(details.flag("no_change", true)),
        );
        uow.commit().await.map_err(IdentityError::from)?;
        return Ok(RoleSet {
            person,
            changed: false,
            sessions_ended: 0,
        });
    }
    let demotion = person.role == Role::Owner;
    let mut uow =
        keep_last_owner(uow, AuditAction::PersonSetRole, actor, &person, &details).await?;
    sqlx::query("UPDATE persons SET role = $1, updated_at = $2 WHERE principal_id = $3")
        .bind(role.as_str())
        .bind(now)
        .bind(crate::db::id_text(&person.id))
        .execute(uow.conn())
        .await
        .map_err(crate::db::DbError::from)?;
    permissions::bump_version(&mut uow).await?;
    let sessions_ended = if demotion {
        permissions::authorize::end_after_owner_role_removed(&mut uow, person.id, now)
            .await?
            .len()
    } else {
        0
    };
    uow.audit(
        AuditEntry::allow(AuditAction::PersonSetRole, actor)
            .target(TargetKind::Person, person.id)
            .details(details.count(
                "sessions_ended",
                i64::try_from(sessions_ended).unwrap_or(i64::MAX),
            )),
    );
    let person = reload(&mut uow, person.id).await?;
    uow.commit().await.map_err(IdentityError::from)?;
    Ok(RoleSet {
        person,
        changed: true,
        sessions_ended,
    })
}

/// Consumes the step-up of an owner's authority in `uow` (the operator has
/// none); a refusal is audited as a deny of `action` (with the target where
/// `who` is an ID) and committed, so the unit of work is handed back only on
/// success.
async fn consume_step_up(
    mut uow: UnitOfWork,
    now: UnixMillis,
    action: AuditAction,
    who: PersonRef<'_>,
    authority: RoleAuthority<'_>,
) -> Result<UnitOfWork, IdentityError> {
    let RoleAuthority::Owner {
        person, step_up_id, ..
    } = authority
    else {
        return Ok(uow);
    };
    match step_up::consume(&mut uow, person.login_session_id, step_up_id, now).await {
        Ok(_) => Ok(uow),
        Err(IdentityError::StepUpRequired(refusal)) => {
            let mut entry = AuditEntry::deny(action, authority.actor())
                .details(authority.details().code("reason_code", refusal));
            if let PersonRef::Id(id) = who {
                entry = entry.target(TargetKind::Person, id);
            }
            Err(deny(uow, entry, IdentityError::StepUpRequired(refusal)).await)
        }
        Err(other) => Err(other),
    }
}

/// Refuses to take the last active owner away (set_role, disable): where
/// `person` is an active owner, the active owners are locked and counted
/// first (D-86), and the last one is a deny of `action` with `details` and
/// `reason_code` `last_owner`, committed, and `409 conflict` `last_owner`.
/// Otherwise the unit of work is handed back.
async fn keep_last_owner(
    mut uow: UnitOfWork,
    action: AuditAction,
    actor: Actor,
    person: &Person,
    details: &AuditDetails,
) -> Result<UnitOfWork, IdentityError> {
    if person.role != Role::Owner
        || person.status != PersonStatus::Active
        || active_owners_locked(&mut uow).await? > 1
    {
        return Ok(uow);
    }
    let entry = AuditEntry::deny(action, actor)
        .target(TargetKind::Person, person.id)
        .details(
            details
                .clone()
                .code("reason_code", ConflictReason::LastOwner),
        );
    Err(deny(
        uow,
        entry,
        IdentityError::Conflict(ConflictReason::LastOwner),
    )
    .await)
}

/// The number of active owners, their rows locked until the end of `uow`
/// (PostgreSQL `FOR UPDATE`: a concurrent demotion waits and then counts
/// again without the owner it lost; SQLite runs one writer at a time).
async fn active_owners_locked(uow: &mut UnitOfWork) -> Result<usize, IdentityError> {
    let sql = if uow.engine() == Engine::Postgres {
        "SELECT principal_id FROM persons WHERE role = 'owner' AND status = 'active' \
         ORDER BY principal_id FOR UPDATE"
    } else {
        "SELECT principal_id FROM persons WHERE role = 'owner' AND status = 'active'"
    };
    let rows = sqlx::query(sql)
        .fetch_all(uow.conn())
        .await
        .map_err(crate::db::DbError::from)?;
    Ok(rows.len())
}
