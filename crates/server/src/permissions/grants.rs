//! Grants on hosts (8.1) and the memberships of groups as rights changes.
//!
//! A grant has target kind `host`, capability `terminal` and a recipient: a
//! person or a group (never an agent or app, 8.1). Only owners create and revoke
//! them (the routes check the role). Every change here raises the permission
//! version ([`super::bump_version`]) in its unit of work, and a change that
//! takes terminal away from someone ends their sessions on the host in the same
//! unit of work through the one end function ([`crate::revocation::end`],
//! `access_revoked`, 8.3).
//!
//! # Validity (docs/decisions.md D-40)
//! A grant is valid while it is not revoked and not expired (`expires_at` is
//! exclusive: at `expires_at` it has expired). It gives terminal to its person
//! while that person is active, and to every active member of its group.
//! Owners have terminal implicitly (8.1) and need no grant.
//!
//! # The preview (8.2 SR10, D-42)
//! [`create`] answers whether the grant takes effect: SR10 lets a non-owner have
//! a terminal only on a host assigned to them and never on the server host, so
//! a grant to anyone else is stored but useless (`effective: false`, hint
//! `terminal_not_effective`). A group grant is judged per current member and
//! overall (effective when it is effective for at least one member). The
//! preview speaks only of SR10: I6 refuses such a grant outright, and a missing
//! session user (SR12) is the owner's next step, not a property of the grant.
//!
//! # Concurrency (D-44)
//! On PostgreSQL (read committed) every rights change here locks the rows of
//! the hosts it judges (`FOR UPDATE`, the lock host.manage takes too) before it
//! reads who still holds terminal there: grant.create and grant.revoke the
//! grant's host, leaving a group the hosts of the group's grants, joining a
//! group and person enable every host the person holds a grant on
//! ([`i6::check_person`]). Two changes that judge the same host therefore run
//! one after the other, and the second reads the first's result — no write
//! skew between, say, two revocations that each still see the other grant.
//! SQLite runs one writing unit of work at a time anyway.
//!
//! # Layout
//! - [`create`], [`revoke`], [`list`], [`get`]: the grants themselves.
//! - [`add_member`], [`remove_member`]: joining and leaving a group (I6 on
//!   joining, sessions ended on leaving).
//! - [`has_valid_grant`]: whether a person holds terminal on a host through a
//!   grant (what [`super::authorize`] and the ends of sessions read).

use sqlx::any::AnyRow;
use sqlx::{AnyConnection, Row};
use uuid::Uuid;

use super::i6;
use crate::audit::{AuditAction, AuditDetails, AuditEntry, Target, TargetKind};
use crate::clock::UnixMillis;
use crate::codes::code_enum;
use crate::db::{self, Db, DbError, UnitOfWork};
use crate::hosts::{self, Host, HostConflict, HostError, HostState, LlmCredentials};
use crate::identity::groups::{self, GroupOperation};
use crate::identity::persons::{self, Person};
use crate::identity::principal::PersonPrincipal;
use crate::identity::{PersonStatus, Role};
use crate::revocation::EndError;
use crate::revocation::{self, EndScope};
use bothy_proto::codes::CloseReason;

code_enum! {
    /// `grants.recipient_kind` (8.1: persons and groups only).
    pub enum RecipientKind {
        /// One person.
        Person => "person",
        /// Every member of a group.
        Group => "group",
    }
}

code_enum! {
    /// The `hint` of a grant preview that does not take effect (8.2 SR10).
    pub enum PreviewHint {
        /// SR10 keeps the recipient from a terminal on this host.
        TerminalNotEffective => "terminal_not_effective",
    }
}

/// The only target kind and capability of this version (8.1).
pub const TARGET_KIND: &str = "host";
/// See [`TARGET_KIND`].
pub const CAPABILITY: &str = "terminal";

/// A grant as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// `grants.id`.
    pub id: Uuid,
    /// The host (`target_id`).
    pub host_id: Uuid,
    /// Person or group.
    pub recipient_kind: RecipientKind,
    /// The person's or the group's ID.
    pub recipient_id: Uuid,
    /// The owner who created it.
    pub created_by: Uuid,
    /// When.
    pub created_at: UnixMillis,
    /// When it expires (exclusive), if ever.
    pub expires_at: Option<UnixMillis>,
    /// The owner who revoked it.
    pub revoked_by: Option<Uuid>,
    /// When it was revoked.
    pub revoked_at: Option<UnixMillis>,
}

impl Grant {
    /// Whether it is valid at `now`: not revoked, not expired.
    pub fn is_valid_at(&self, now: UnixMillis) -> bool {
        self.revoked_at.is_none() && self.expires_at.is_none_or(|at| at > now)
    }

    /// The grant as the API shows it; `valid` is judged at `now`.
    pub fn to_api(&self, now: UnixMillis) -> bothy_api::grants::Grant {
        bothy_api::grants::Grant {
            id: db::id_text(&self.id),
            target_kind: TARGET_KIND.to_owned(),
            host_id: db::id_text(&self.host_id),
            capability: CAPABILITY.to_owned(),
            recipient_kind: self.recipient_kind.as_str().to_owned(),
            recipient_id: db::id_text(&self.recipient_id),
            created_by: db::id_text(&self.created_by),
            created_at: self.created_at,
            expires_at: self.expires_at,
            revoked_by: self.revoked_by.as_ref().map(db::id_text),
            revoked_at: self.revoked_at,
            valid: self.is_valid_at(now),
        }
    }
}

const COLUMNS: &str = "id, target_id, recipient_kind, recipient_id, created_by, created_at, \
     expires_at, revoked_by, revoked_at";

fn from_row(row: &AnyRow) -> Result<Grant, HostError> {
    let stored = |column: &'static str| HostError::Stored(column);
    let kind: String = row
        .try_get("recipient_kind")
        .map_err(|_| stored("grants.recipient_kind"))?;
    Ok(Grant {
        id: db::get_uuid(row, "id")?,
        host_id: db::get_uuid(row, "target_id")?,
        recipient_kind: RecipientKind::parse(&kind).ok_or(stored("grants.recipient_kind"))?,
        recipient_id: db::get_uuid(row, "recipient_id")?,
        created_by: db::get_uuid(row, "created_by")?,
        created_at: row
            .try_get("created_at")
            .map_err(|_| stored("grants.created_at"))?,
        expires_at: row
            .try_get("expires_at")
            .map_err(|_| stored("grants.expires_at"))?,
        revoked_by: db::get_opt_uuid(row, "revoked_by")?,
        revoked_at: row
            .try_get("revoked_at")
            .map_err(|_| stored("grants.revoked_at"))?,
    })
}

/// The grant with this ID.
pub async fn get(conn: &mut AnyConnection, id: Uuid) -> Result<Option<Grant>, HostError> {
    let row = sqlx::query(&format!("SELECT {COLUMNS} FROM grants WHERE id = $1"))
        .bind(db::id_text(&id))
        .fetch_optional(conn)
        .await
        .map_err(DbError::from)?;
    row.as_ref().map(from_row).transpose()
}

/// Every grant (of one host, if given), oldest first; revoked and expired
/// ones included (the JSON says `valid`).
pub async fn list(
    conn: &mut AnyConnection,
    host_id: Option<Uuid>,
) -> Result<Vec<Grant>, HostError> {
    let rows = match host_id {
        Some(host_id) => {
            sqlx::query(&format!(
                "SELECT {COLUMNS} FROM grants WHERE target_id = $1 ORDER BY id"
            ))
            .bind(db::id_text(&host_id))
            .fetch_all(conn)
            .await
        }
        None => {
            sqlx::query(&format!("SELECT {COLUMNS} FROM grants ORDER BY id"))
                .fetch_all(conn)
                .await
        }
    }
    .map_err(DbError::from)?;
    rows.iter().map(from_row).collect()
}

/// Whether `person_id` holds terminal on `host_id` through a grant valid at
/// `now` — their own or one of a group they belong to — while they are active.
/// Owners' implicit terminal is not a grant: the caller checks the role.
pub async fn has_valid_grant(
    conn: &mut AnyConnection,
    person_id: Uuid,
    host_id: Uuid,
    now: UnixMillis,
) -> Result<bool, HostError> {
    let found: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM grants g \
         WHERE g.target_kind = 'host' AND g.target_id = $1 AND g.capability = 'terminal' \
           AND g.revoked_at IS NULL AND (g.expires_at IS NULL OR g.expires_at > $2) \
           AND ((g.recipient_kind = 'person' AND g.recipient_id = $3) \
                OR (g.recipient_kind = 'group' AND EXISTS (SELECT 1 FROM group_members m \
                    WHERE m.group_id = g.recipient_id AND m.person_id = $3))) \
           AND EXISTS (SELECT 1 FROM persons p WHERE p.principal_id = $3 AND p.status = 'active')",
    )
    .bind(db::id_text(&host_id))
    .bind(now)
    .bind(db::id_text(&person_id))
    .fetch_one(conn)
    .await
    .map_err(DbError::from)?;
    Ok(found > 0)
}

/// A grant as requested (`POST /api/v1/grants`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NewGrant {
    /// The host.
    pub host_id: Uuid,
    /// Person or group.
    pub recipient_kind: RecipientKind,
    /// The person's or the group's ID.
    pub recipient_id: Uuid,
    /// When it expires, if ever; must lie after now.
    pub expires_at: Option<UnixMillis>,
}

/// Whether the grant takes effect under SR10 (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preview {
    /// Effective for the person, or for at least one member of the group.
    pub effective: bool,
    /// For a group grant: each current member and whether it is effective for them.
    pub members: Option<Vec<(Uuid, bool)>>,
}

impl Preview {
    /// `{"effective", "hint"?, "members"?: [{"person_id", "effective"}]}`.
    pub fn to_api(&self) -> bothy_api::grants::GrantPreview {
        bothy_api::grants::GrantPreview {
            effective: self.effective,
            hint: (!self.effective).then(|| PreviewHint::TerminalNotEffective.as_str().to_owned()),
            members: self.members.as_ref().map(|members| {
                members
                    .iter()
                    .map(|(id, effective)| bothy_api::grants::GrantPreviewMember {
                        person_id: db::id_text(id),
                        effective: *effective,
                    })
                    .collect()
            }),
        }
    }
}

/// What [`create`] made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Created {
    /// The grant.
    pub grant: Grant,
    /// Whether it takes effect.
    pub preview: Preview,
}

fn role_allows(host: &Host, person: &Person) -> bool {
    super::authorize::sr10(host, person.id, person.role == Role::Owner).is_ok()
}

async fn preview(
    uow: &mut UnitOfWork,
    host: &Host,
    kind: RecipientKind,
    recipient_id: Uuid,
) -> Result<Preview, HostError> {
    match kind {
        RecipientKind::Person => {
            let person = persons::get(uow.conn(), recipient_id)
                .await?
                .ok_or(HostError::Stored("grants.recipient_id"))?;
            Ok(Preview {
                effective: role_allows(host, &person),
                members: None,
            })
        }
        RecipientKind::Group => {
            let mut members = Vec::new();
            for id in groups::members(uow.conn(), recipient_id).await? {
                let person = persons::get(uow.conn(), id)
                    .await?
                    .ok_or(HostError::Stored("group_members.person_id"))?;
                members.push((id, role_allows(host, &person)));
            }
            Ok(Preview {
                effective: members.iter().any(|(_, effective)| *effective),
                members: Some(members),
            })
        }
    }
}

fn grant_details(host_id: Uuid, kind: RecipientKind, recipient_id: Uuid) -> AuditDetails {
    AuditDetails::new()
        .id("host_id", host_id)
        .code("recipient_kind", kind)
        .id("recipient_id", recipient_id)
}

/// Creates a grant (8.1; the caller checked that `actor` is an owner): the
/// recipient exists (`unknown_user` — no person, or deleted — or
/// `unknown_group` at `/recipient_id`), the host exists (`unknown_host` at
/// `/host_id`) and is not retired (`409 conflict host_retired`), no valid grant
/// with the same recipient exists (`409 conflict grant_exists`), `expires_at`
/// lies after now (`not_in_future` at `/expires_at`). I6 in the same unit of
/// work: a refusal is audited as a grant.create deny with `invariant_violation`
/// and answers `409 i6_violation`. Raises the permission version; audit
/// grant.create.
///
/// The schema keeps one non-revoked row per host and recipient, so an expired
/// grant that was never revoked is closed (revoked now, by this owner) when a
/// new one replaces it; its audit entry names it (`replaced_grant_id`).
pub async fn create(
    db: &Db,
    now: UnixMillis,
    actor: &PersonPrincipal,
    new: NewGrant,
) -> Result<Created, HostError> {
    if new.expires_at.is_some_and(|at| at <= now) {
        return Err(HostError::invalid("/expires_at", "not_in_future"));
    }
    let mut uow = db.begin(now).await?;
    let host = match hosts::load_for_update(&mut uow, new.host_id).await {
        Ok(host) => host,
        Err(HostError::NotFound) => return Err(HostError::invalid("/host_id", "unknown_host")),
        Err(other) => return Err(other),
    };
    if host.state == HostState::Retired {
        return Err(HostError::Conflict(HostConflict::HostRetired));
    }
    match new.recipient_kind {
        RecipientKind::Person => {
            let person = persons::get(uow.conn(), new.recipient_id).await?;
            if person.is_none_or(|person| person.status == PersonStatus::Deleted) {
                return Err(HostError::invalid("/recipient_id", "unknown_user"));
            }
        }
        RecipientKind::Group => {
            if groups::get(uow.conn(), new.recipient_id).await?.is_none() {
                return Err(HostError::invalid("/recipient_id", "unknown_group"));
            }
        }
    }

    let existing = sqlx::query(&format!(
        "SELECT {COLUMNS} FROM grants WHERE target_id = $1 AND capability = 'terminal' \
         AND recipient_kind = $2 AND recipient_id = $3 AND revoked_at IS NULL"
    ))
    .bind(db::id_text(&new.host_id))
    .bind(new.recipient_kind.as_str())
    .bind(db::id_text(&new.recipient_id))
    .fetch_optional(uow.conn())
    .await
    .map_err(DbError::from)?;
    let mut replaced = None;
    if let Some(row) = existing {
        let existing = from_row(&row)?;
        if existing.is_valid_at(now) {
            return Err(HostError::Conflict(HostConflict::GrantExists));
        }
        sqlx::query("UPDATE grants SET revoked_at = $1, revoked_by = $2 WHERE id = $3")
            .bind(now)
            .bind(db::id_text(&actor.person_id))
            .bind(db::id_text(&existing.id))
            .execute(uow.conn())
            .await
            .map_err(DbError::from)?;
        replaced = Some(existing.id);
    }

    let details = grant_details(new.host_id, new.recipient_kind, new.recipient_id);
    // I6 (7.3): on a personal host only the holder may hold a grant. Refused
    // here also for a dormant recipient (a disabled person), whom
    // `i6::check_host` would let pass until they are enabled.
    let holder_only = host.llm_credentials != LlmCredentials::Personal
        || (new.recipient_kind == RecipientKind::Person
            && host.credential_holder_id == Some(new.recipient_id));
    let id = db::new_id(now)?;
    sqlx::query(
        "INSERT INTO grants (id, target_kind, target_id, capability, recipient_kind, recipient_id, \
         created_by, created_at, expires_at) VALUES ($1, 'host', $2, 'terminal', $3, $4, $5, $6, $7)",
    )
    .bind(db::id_text(&id))
    .bind(db::id_text(&new.host_id))
    .bind(new.recipient_kind.as_str())
    .bind(db::id_text(&new.recipient_id))
    .bind(db::id_text(&actor.person_id))
    .bind(now)
    .bind(new.expires_at)
    .execute(uow.conn())
    .await
    .map_err(DbError::from)?;
    let checked = if holder_only {
        i6::check_host(&mut uow, new.host_id).await
    } else {
        Err(HostError::I6Violation)
    };
    if let Err(error) = checked {
        return Err(match error {
            HostError::I6Violation => {
                drop(uow);
                i6::audit_violation(
                    db,
                    now,
                    AuditAction::GrantCreate,
                    actor.actor(),
                    Some(Target {
                        kind: TargetKind::Host,
                        id: new.host_id,
                    }),
                    details,
                )
                .await
            }
            other => other,
        });
    }

    super::bump_version(&mut uow).await?;
    let preview = preview(&mut uow, &host, new.recipient_kind, new.recipient_id).await?;
    let mut details = details.flag("effective", preview.effective);
    if let Some(at) = new.expires_at {
        details = details.count("expires_at", at);
    }
    if let Some(replaced) = replaced {
        details = details.id("replaced_grant_id", replaced);
    }
    uow.audit(
        AuditEntry::allow(AuditAction::GrantCreate, actor.actor())
            .target(TargetKind::Grant, id)
            .details(details),
    );
    let grant = get(uow.conn(), id)
        .await?
        .ok_or(HostError::Stored("grants row"))?;
    uow.commit().await?;
    Ok(Created { grant, preview })
}

/// What [`revoke`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revoked {
    /// The grant as it is now.
    pub grant: Grant,
    /// Whether it was revoked now (false: revoked already).
    pub changed: bool,
    /// How many terminal sessions this ended.
    pub sessions_ended: usize,
}

/// Maps an error of the end function: a database error stays one; a wrong
/// close pair is an internal error.
pub(crate) fn end_error(error: EndError) -> HostError {
    match error {
        EndError::Db(error) => HostError::Db(error),
        EndError::InvalidPair { .. } => HostError::Stored("close_reason and close_detail"),
    }
}

/// Ends the sessions on `host_id` of each of `persons` who no longer has
/// terminal there (8.3): not an owner, no other valid grant. Returns how many
/// sessions it ended.
async fn end_lost(
    uow: &mut UnitOfWork,
    host_id: Uuid,
    persons: &[Uuid],
) -> Result<usize, HostError> {
    let now = uow.now_ms();
    let mut ended = 0;
    for &person_id in persons {
        let is_owner = persons::get(uow.conn(), person_id)
            .await?
            .is_some_and(|person| person.role == Role::Owner);
        if is_owner || has_valid_grant(uow.conn(), person_id, host_id, now).await? {
            continue;
        }
        ended += revocation::end(
            uow,
            EndScope::PersonOnHost { host_id, person_id },
            CloseReason::AccessRevoked,
            None,
        )
        .await
        .map_err(end_error)?
        .len();
    }
    Ok(ended)
}

/// Revokes a grant (8.3; the caller checked that `actor` is an owner): sets
/// `revoked_at` and `revoked_by`, raises the permission version and ends, in
/// the same unit of work, the sessions on the host of each person who loses
/// terminal by it (`access_revoked`): its person, or each member of its group
/// — but not owners (implicit terminal) and not someone with another valid
/// grant on the host. Revoking a revoked grant changes nothing (audited with
/// `no_change`). Audit grant.revoke. `404` if there is no such grant.
pub async fn revoke(
    db: &Db,
    now: UnixMillis,
    actor: &PersonPrincipal,
    grant_id: Uuid,
) -> Result<Revoked, HostError> {
    let mut uow = db.begin(now).await?;
    let grant = get(uow.conn(), grant_id)
        .await?
        .ok_or(HostError::NotFound)?;
    // Every rights change on a host locks its row first (PostgreSQL), so two
    // revocations of the same person's grants cannot each see the other grant
    // still valid and both leave the sessions running.
    hosts::load_for_update(&mut uow, grant.host_id).await?;
    let done = sqlx::query(
        "UPDATE grants SET revoked_at = $1, revoked_by = $2 WHERE id = $3 AND revoked_at IS NULL",
    )
    .bind(now)
    .bind(db::id_text(&actor.person_id))
    .bind(db::id_text(&grant_id))
    .execute(uow.conn())
    .await
    .map_err(DbError::from)?;
    let changed = done.rows_affected() == 1;
    let mut sessions_ended = 0;
    if changed {
        super::bump_version(&mut uow).await?;
        let persons = match grant.recipient_kind {
            RecipientKind::Person => vec![grant.recipient_id],
            RecipientKind::Group => groups::members(uow.conn(), grant.recipient_id).await?,
        };
        sessions_ended = end_lost(&mut uow, grant.host_id, &persons).await?;
    }
    uow.audit(
        AuditEntry::allow(AuditAction::GrantRevoke, actor.actor())
            .target(TargetKind::Grant, grant_id)
            .details(
                grant_details(grant.host_id, grant.recipient_kind, grant.recipient_id)
                    .count(
                        "sessions_ended",
                        i64::try_from(sessions_ended).unwrap_or(i64::MAX),
                    )
                    .flag("no_change", !changed),
            ),
    );
    let grant = get(uow.conn(), grant_id)
        .await?
        .ok_or(HostError::Stored("grants row"))?;
    uow.commit().await?;
    Ok(Revoked {
        grant,
        changed,
        sessions_ended,
    })
}

/// The expiry of a grant is a revocation (8.3, "Revocation of the grant,
/// expiry, ..."): for every grant whose `expires_at` has passed at `now` and
/// that no earlier pass handled, in its own unit of work, the sessions on its
/// host of each person who lost terminal by it end with `access_revoked`
/// (its person or each member of its group, but not owners and not someone
/// with another valid grant there, exactly as [`revoke`]), the permission
/// version rises, and the grant is marked (`expiry_swept_at`) so it is never
/// handled twice. Called by every pass of the job `terminal.sweep` (the role
/// of `authz.expiry_sweep` in 07 4.1). Returns how many sessions it ended.
pub async fn end_expired(db: &Db, now: UnixMillis) -> Result<usize, HostError> {
    let due: Vec<Uuid> = {
        let mut conn = db.pool().acquire().await.map_err(DbError::from)?;
        let rows = sqlx::query(
            "SELECT id FROM grants \
             WHERE expiry_swept_at IS NULL AND revoked_at IS NULL \
               AND expires_at IS NOT NULL AND expires_at <= $1 \
             ORDER BY expires_at, id",
        )
        .bind(now)
        .fetch_all(&mut *conn)
        .await
        .map_err(DbError::from)?;
        rows.iter()
            .map(|row| db::get_uuid(row, "id"))
            .collect::<Result<_, _>>()?
    };
    let mut ended = 0;
    for grant_id in due {
        let mut uow = db.begin(now).await?;
        let Some(grant) = get(uow.conn(), grant_id).await? else {
            continue;
        };
        // Locked like every rights change on a host (see `revoke`).
        hosts::load_for_update(&mut uow, grant.host_id).await?;
        let marked = sqlx::query(
            "UPDATE grants SET expiry_swept_at = $1 \
             WHERE id = $2 AND expiry_swept_at IS NULL AND revoked_at IS NULL",
        )
        .bind(now)
        .bind(db::id_text(&grant_id))
        .execute(uow.conn())
        .await
        .map_err(DbError::from)?;
        if marked.rows_affected() != 1 {
            // Revoked or handled by another pass meanwhile.
            continue;
        }
        super::bump_version(&mut uow).await?;
        let persons = match grant.recipient_kind {
            RecipientKind::Person => vec![grant.recipient_id],
            RecipientKind::Group => groups::members(uow.conn(), grant.recipient_id).await?,
        };
        ended += end_lost(&mut uow, grant.host_id, &persons).await?;
        uow.commit().await?;
    }
    Ok(ended)
}

async fn person_for_membership(uow: &mut UnitOfWork, person_id: Uuid) -> Result<(), HostError> {
    let person = persons::get(uow.conn(), person_id).await?;
    if person.is_none_or(|person| person.status == PersonStatus::Deleted) {
        return Err(HostError::invalid("/person_id", "unknown_user"));
    }
    Ok(())
}

/// A person joins a group (the caller checked that `actor` is an owner):
/// `404` without the group, `unknown_user` at `/person_id` without the person
/// (or a deleted one). A new membership raises the permission version and runs
/// [`i6::check_person`]: joining a group that holds a grant on a personal host
/// is refused (`409 i6_violation`, audited as a group.manage deny with
/// `invariant_violation`). Returns whether the person was not a member before.
pub async fn add_member(
    db: &Db,
    now: UnixMillis,
    actor: &PersonPrincipal,
    group_id: Uuid,
    person_id: Uuid,
) -> Result<bool, HostError> {
    let mut uow = db.begin(now).await?;
    if groups::get(uow.conn(), group_id).await?.is_none() {
        return Err(HostError::NotFound);
    }
    person_for_membership(&mut uow, person_id).await?;
    let added = groups::add_member(&mut uow, actor.actor(), group_id, person_id).await?;
    if added {
        if let Err(error) = i6::check_person(&mut uow, person_id).await {
            return Err(match error {
                HostError::I6Violation => {
                    drop(uow);
                    i6::audit_violation(
                        db,
                        now,
                        AuditAction::GroupManage,
                        actor.actor(),
                        Some(Target {
                            kind: TargetKind::Group,
                            id: group_id,
                        }),
                        AuditDetails::new()
                            .code("operation", GroupOperation::AddMember)
                            .id("person_id", person_id),
                    )
                    .await
                }
                other => other,
            });
        }
        super::bump_version(&mut uow).await?;
    }
    uow.commit().await?;
    Ok(added)
}

/// What [`remove_member`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Left {
    /// Whether the person was a member.
    pub removed: bool,
    /// How many terminal sessions this ended.
    pub sessions_ended: usize,
}

/// A person leaves a group (the caller checked that `actor` is an owner; `404`
/// without the group): the permission version rises, and on every host where
/// the group holds a valid grant the person's sessions end (`access_revoked`,
/// 8.3 "leaving the group") unless they keep terminal there (owner, or another
/// valid grant).
pub async fn remove_member(
    db: &Db,
    now: UnixMillis,
    actor: &PersonPrincipal,
    group_id: Uuid,
    person_id: Uuid,
) -> Result<Left, HostError> {
    let mut uow = db.begin(now).await?;
    if groups::get(uow.conn(), group_id).await?.is_none() {
        return Err(HostError::NotFound);
    }
    let removed = groups::remove_member(&mut uow, actor.actor(), group_id, person_id).await?;
    let mut sessions_ended = 0;
    if removed {
        super::bump_version(&mut uow).await?;
        let rows = sqlx::query(
            "SELECT DISTINCT target_id FROM grants \
             WHERE recipient_kind = 'group' AND recipient_id = $1 AND target_kind = 'host' \
               AND capability = 'terminal' AND revoked_at IS NULL \
               AND (expires_at IS NULL OR expires_at > $2) \
             ORDER BY target_id",
        )
        .bind(db::id_text(&group_id))
        .bind(now)
        .fetch_all(uow.conn())
        .await
        .map_err(DbError::from)?;
        for row in &rows {
            let host_id = db::get_uuid(row, "target_id")?;
            // Locked like every rights change on a host (see `revoke`).
            hosts::load_for_update(&mut uow, host_id).await?;
            sessions_ended += end_lost(&mut uow, host_id, &[person_id]).await?;
        }
    }
    uow.commit().await?;
    Ok(Left {
        removed,
        sessions_ended,
    })
}
