//! Invariant I6 (7.3 item 1): on a host with `llm_credentials = personal`, no
//! principal other than `credential_holder_id` has a valid grant terminal — no
//! group grants, no grants to other people. Checked inside the unit of work of
//! every rights change; a violation rolls it back (`409 i6_violation`), and the
//! caller writes the deny audit in a fresh unit of work ([`audit_violation`]).
//!
//! What counts (docs/decisions.md D-40): a grant that is not revoked and not
//! expired at the unit of work's time. A grant to a person who is not active
//! (disabled or deleted) is dormant: it gives nothing and violates nothing
//! until the person is enabled again, which is why enabling runs
//! [`check_person`] (D-M2-40-5 of the chapter). A group grant on a personal host
//! is always a violation, whoever its members are (7.3: "no group grants").
//!
//! Callers:
//! - grant.create ([`super::grants::create`]) and host.manage (confirmation,
//!   change of the declaration or of the holder, `hosts::llm`): [`check_host`];
//! - person enable ([`crate::identity::admin::enable`]) and a person joining a
//!   group ([`super::grants::add_member`]): [`check_person`].

use uuid::Uuid;

use crate::audit::{Actor, AuditAction, AuditDetails, AuditEntry, Target};
use crate::clock::UnixMillis;
use crate::codes::code_enum;
use crate::db::{self, Db, DbError, UnitOfWork};
use crate::hosts::{self, HostError, LlmCredentials};

code_enum! {
    /// The `reason_code` of the deny entry of a rights change that I6 refused
    /// (7.3 item 1: "decision invariant_violation").
    pub enum I6Decision {
        /// The change would leave a valid grant terminal to someone other than
        /// the holder on a personal host.
        InvariantViolation => "invariant_violation",
    }
}

/// Checks I6 for one host, reading the host row and its grants inside `uow`
/// (after the caller's change): `Err(HostError::I6Violation)` if violated.
/// A host that does not exist is `HostError::NotFound` (fail closed).
pub async fn check_host(uow: &mut UnitOfWork, host_id: Uuid) -> Result<(), HostError> {
    let now = uow.now_ms();
    let host = hosts::load(uow.conn(), host_id)
        .await?
        .ok_or(HostError::NotFound)?;
    if host.llm_credentials != LlmCredentials::Personal {
        return Ok(());
    }
    // The schema makes personal imply a holder; without one every grant
    // violates (no ID equals the empty text).
    let holder = host
        .credential_holder_id
        .map(|id| db::id_text(&id))
        .unwrap_or_default();
    let violations: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM grants g \
         WHERE g.target_kind = 'host' AND g.target_id = $1 AND g.capability = 'terminal' \
           AND g.revoked_at IS NULL AND (g.expires_at IS NULL OR g.expires_at > $2) \
           AND (g.recipient_kind = 'group' \
                OR (g.recipient_id <> $3 AND EXISTS (SELECT 1 FROM persons p \
                    WHERE p.principal_id = g.recipient_id AND p.status = 'active')))",
    )
    .bind(db::id_text(&host_id))
    .bind(now)
    .bind(holder)
    .fetch_one(uow.conn())
    .await
    .map_err(DbError::from)?;
    if violations == 0 {
        Ok(())
    } else {
        Err(HostError::I6Violation)
    }
}

/// Checks I6 for every personal host on which this person (directly or
/// through a group) holds a grant: a person re-enabled, or added to a group.
pub async fn check_person(uow: &mut UnitOfWork, person_id: Uuid) -> Result<(), HostError> {
    let now = uow.now_ms();
    // Every host on which the person holds a valid grant, locked (PostgreSQL;
    // SQLite serialises whole units of work): a declaration changing to
    // personal at the same time waits for this unit of work, or this one reads
    // its committed result, so the two cannot both pass on stale rows.
    let lock = match uow.engine() {
        db::Engine::Postgres => " FOR UPDATE",
        db::Engine::Sqlite => "",
    };
    let rows = sqlx::query(&format!(
        "SELECT h.id FROM hosts h WHERE h.id IN (SELECT g.target_id FROM grants g \
         WHERE g.target_kind = 'host' AND g.capability = 'terminal' \
           AND g.revoked_at IS NULL AND (g.expires_at IS NULL OR g.expires_at > $2) \
           AND ((g.recipient_kind = 'person' AND g.recipient_id = $1) \
                OR (g.recipient_kind = 'group' AND g.recipient_id IN \
                    (SELECT m.group_id FROM group_members m WHERE m.person_id = $1)))) \
         ORDER BY h.id{lock}"
    ))
    .bind(db::id_text(&person_id))
    .bind(now)
    .fetch_all(uow.conn())
    .await
    .map_err(DbError::from)?;
    for row in &rows {
        let host_id = db::get_uuid(row, "id")?;
        check_host(uow, host_id).await?;
    }
    Ok(())
}

/// Writes the deny entry of a rights change that I6 refused, in a fresh unit
/// of work (the caller dropped its own, which rolled the change back), and
/// returns `HostError::I6Violation` — or the database error if the entry could
/// not be written. `details` gets `reason_code = invariant_violation`.
pub async fn audit_violation(
    db: &Db,
    now: UnixMillis,
    action: AuditAction,
    actor: Actor,
    target: Option<Target>,
    details: AuditDetails,
) -> HostError {
    let mut entry = AuditEntry::deny(action, actor)
        .details(details.code("reason_code", I6Decision::InvariantViolation));
    entry.target = target;
    let written = async {
        let mut uow = db.begin(now).await?;
        uow.audit(entry);
        uow.commit().await
    };
    match written.await {
        Ok(_) => HostError::I6Violation,
        Err(error) => HostError::Db(error),
    }
}
