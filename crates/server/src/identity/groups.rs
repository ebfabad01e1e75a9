//! Groups of persons (DESIGN 3.1): the recipients of grants besides persons
//! (3.2). Storage functions only — the routes come with grants, because every
//! change of a membership is a rights change there (it raises
//! `permission_version` and, on leaving a group, ends terminal sessions, 8.3),
//! which the authorization module will do in the same unit of work.
//!
//! Group names follow the username rule ([`Username`]): folded to lower case,
//! unique. Members are persons only (agents and apps never get grants, 8.1).
//! Every change is audited (`group.manage`, with an `operation`).

use sqlx::{AnyConnection, Row};
use uuid::Uuid;

use super::persons::Username;
use super::{ConflictReason, IdentityError};
use crate::audit::{Actor, AuditAction, AuditDetails, AuditEntry, TargetKind};
use crate::codes::code_enum;
use crate::db::{self, DbError, UnitOfWork};

code_enum! {
    /// What changed about a group (`operation` of `group.manage`).
    pub enum GroupOperation {
        /// Created.
        Create => "create",
        /// A person joined.
        AddMember => "add_member",
        /// A person left.
        RemoveMember => "remove_member",
    }
}

/// A group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    /// Its ID.
    pub id: Uuid,
    /// Its folded name.
    pub name: Username,
}

/// Creates a group in `uow`; `409 conflict group_name_taken` if the name exists.
pub async fn create(
    uow: &mut UnitOfWork,
    actor: Actor,
    name: &Username,
) -> Result<Uuid, IdentityError> {
    let now = uow.now_ms();
    let id = db::new_id(now)?;
    let inserted = sqlx::query("INSERT INTO groups (id, name, created_at) VALUES ($1, $2, $3)")
        .bind(db::id_text(&id))
        .bind(name.as_str())
        .bind(now)
        .execute(uow.conn())
        .await
        .map_err(DbError::from);
    match inserted {
        Ok(_) => {}
        Err(DbError::Conflict(_)) => {
            return Err(IdentityError::Conflict(ConflictReason::GroupNameTaken));
        }
        Err(other) => return Err(other.into()),
    }
    uow.audit(
        AuditEntry::allow(AuditAction::GroupManage, actor)
            .target(TargetKind::Group, id)
            .details(AuditDetails::new().code("operation", GroupOperation::Create)),
    );
    Ok(id)
}

/// Adds `person_id` to `group_id`; whether it was not a member before.
/// `404` when the group or the person does not exist.
pub async fn add_member(
    uow: &mut UnitOfWork,
    actor: Actor,
    group_id: Uuid,
    person_id: Uuid,
) -> Result<bool, IdentityError> {
    let now = uow.now_ms();
    let exists: i64 = sqlx::query_scalar(
        "SELECT (SELECT COUNT(*) FROM groups WHERE id = $1) + (SELECT COUNT(*) FROM persons WHERE principal_id = $2)",
    )
    .bind(db::id_text(&group_id))
    .bind(db::id_text(&person_id))
    .fetch_one(uow.conn())
    .await
    .map_err(DbError::from)?;
    if exists != 2 {
        return Err(IdentityError::NotFound);
    }
    let done = sqlx::query(
        "INSERT INTO group_members (group_id, person_id, added_at) VALUES ($1, $2, $3) \
         ON CONFLICT (group_id, person_id) DO NOTHING",
    )
    .bind(db::id_text(&group_id))
    .bind(db::id_text(&person_id))
    .bind(now)
    .execute(uow.conn())
    .await
    .map_err(DbError::from)?;
    let added = done.rows_affected() == 1;
    uow.audit(
        AuditEntry::allow(AuditAction::GroupManage, actor)
            .target(TargetKind::Group, group_id)
            .details(
                AuditDetails::new()
                    .code("operation", GroupOperation::AddMember)
                    .id("person_id", person_id)
                    .flag("no_change", !added),
            ),
    );
    Ok(added)
}

/// Removes `person_id` from `group_id`; whether it was a member.
pub async fn remove_member(
    uow: &mut UnitOfWork,
    actor: Actor,
    group_id: Uuid,
    person_id: Uuid,
) -> Result<bool, IdentityError> {
    let done = sqlx::query("DELETE FROM group_members WHERE group_id = $1 AND person_id = $2")
        .bind(db::id_text(&group_id))
        .bind(db::id_text(&person_id))
        .execute(uow.conn())
        .await
        .map_err(DbError::from)?;
    let removed = done.rows_affected() == 1;
    uow.audit(
        AuditEntry::allow(AuditAction::GroupManage, actor)
            .target(TargetKind::Group, group_id)
            .details(
                AuditDetails::new()
                    .code("operation", GroupOperation::RemoveMember)
                    .id("person_id", person_id)
                    .flag("no_change", !removed),
            ),
    );
    Ok(removed)
}

/// The group with this ID.
pub async fn get(conn: &mut AnyConnection, id: Uuid) -> Result<Option<Group>, IdentityError> {
    let row = sqlx::query("SELECT id, name FROM groups WHERE id = $1")
        .bind(db::id_text(&id))
        .fetch_optional(conn)
        .await
        .map_err(DbError::from)?;
    row.map(|row| decode(&row)).transpose()
}

/// Every group, by name.
pub async fn list(conn: &mut AnyConnection) -> Result<Vec<Group>, IdentityError> {
    let rows = sqlx::query("SELECT id, name FROM groups ORDER BY name")
        .fetch_all(conn)
        .await
        .map_err(DbError::from)?;
    rows.iter().map(decode).collect()
}

/// The members of a group, by ID.
pub async fn members(conn: &mut AnyConnection, group_id: Uuid) -> Result<Vec<Uuid>, IdentityError> {
    let rows =
        sqlx::query("SELECT person_id FROM group_members WHERE group_id = $1 ORDER BY person_id")
            .bind(db::id_text(&group_id))
            .fetch_all(conn)
            .await
            .map_err(DbError::from)?;
    rows.iter()
        .map(|row| db::get_uuid(row, "person_id").map_err(IdentityError::from))
        .collect()
}

/// The groups a person belongs to (what grants to groups resolve through).
pub async fn groups_of(
    conn: &mut AnyConnection,
    person_id: Uuid,
) -> Result<Vec<Group>, IdentityError> {
    let rows = sqlx::query(
        "SELECT g.id, g.name FROM groups g JOIN group_members m ON m.group_id = g.id \
         WHERE m.person_id = $1 ORDER BY g.id",
    )
    .bind(db::id_text(&person_id))
    .fetch_all(conn)
    .await
    .map_err(DbError::from)?;
    rows.iter().map(decode).collect()
}

fn decode(row: &sqlx::any::AnyRow) -> Result<Group, IdentityError> {
    let name: String = row
        .try_get("name")
        .map_err(|_| IdentityError::Stored("groups.name"))?;
    Ok(Group {
        id: db::get_uuid(row, "id")?,
        name: Username::parse(&name).ok_or(IdentityError::Stored("groups.name"))?,
    })
}
