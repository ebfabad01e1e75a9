//! The one end function (8.3 Revocation, M2-46), beside the domain modules
//! that call it (identity, hosts, permissions, terminal): every kind of
//! revocation — a host leaving `active`, re-pairing, I6, a revoked grant, an
//! ended assignment, SR10, and the identity revocations (logout, a revoked or
//! expired login session, a revoked device, a disabled person) — and the job
//! `terminal.sweep` end the sessions concerned in the transaction that causes
//! it, through [`end`]. The first committed end wins: a session already
//! `closed` is never touched again, so a later report or job changes nothing.
//!
//! Per ended session it writes `terminal.terminate` (actor system; session_id,
//! close_reason, close_detail when set, bytes_in, bytes_out, duration_ms) and
//! `terminal_session.changed` to the session's person (`session_id`,
//! `host_id`, `state: closed`, `close_reason`, `close_detail` when set). Closing the connections
//! (4100) and `session.close` to the host service happen after the commit; the
//! relay registers them with [`crate::db::UnitOfWork::after_commit`] using the
//! returned sessions.

use bothy_proto::codes::{CloseDetail, CloseReason, check_close_pair};
use serde_json::{Map, json};
use sqlx::Row;
use uuid::Uuid;

use crate::audit::{Actor, AuditAction, AuditDetails, AuditEntry, TargetKind};
use crate::db::{self, DbError, UnitOfWork};
use crate::events::{Audience, DurableEvent, EventKind};

/// Which open sessions to end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndScope {
    /// One session.
    Session(Uuid),
    /// Every open session of a host (state changes, re-pairing).
    Host(Uuid),
    /// Every open session of one person on a host (assignment ended, grant
    /// revoked, SR10 no longer allows it).
    PersonOnHost {
        /// The host.
        host_id: Uuid,
        /// The person.
        person_id: Uuid,
    },
    /// Every open session on a host except those of one person (I6: a change
    /// to personal or of the holder, 7.3 item 3).
    HostExceptPerson {
        /// The host.
        host_id: Uuid,
        /// The person who keeps theirs (the holder).
        person_id: Uuid,
    },
    /// Every open session of one login session (`identity.SessionEnded`:
    /// logout, session revoked, device revoked, person disabled; called by
    /// [`crate::identity::login_sessions::end`] for each login session it ends).
    LoginSession(Uuid),
    /// Every open session whose current device is this one
    /// (`identity.DeviceRevoked`).
    Device(Uuid),
    /// Every open session of one person (disabling the person).
    Person(Uuid),
}

/// A session [`end`] closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndedSession {
    /// The session.
    pub session_id: Uuid,
    /// Its host.
    pub host_id: Uuid,
    /// Its person.
    pub person_id: Uuid,
}

/// Why [`end`] failed.
#[derive(Debug, thiserror::Error)]
pub enum EndError {
    /// `close_detail` does not go with `close_reason` (10.3): an internal
    /// error, never stored.
    #[error("close_detail {detail:?} does not go with close_reason {reason}")]
    InvalidPair {
        /// The reason.
        reason: CloseReason,
        /// The detail.
        detail: Option<CloseDetail>,
    },
    /// The database failed.
    #[error(transparent)]
    Db(#[from] DbError),
}

/// Ends every open session of `scope` with `reason` (and `detail`, only where
/// 10.3 allows one) in `uow`; returns the sessions it closed, in ID order.
pub async fn end(
    uow: &mut UnitOfWork,
    scope: EndScope,
    reason: CloseReason,
    detail: Option<CloseDetail>,
) -> Result<Vec<EndedSession>, EndError> {
    check_close_pair(reason, detail).map_err(|_| EndError::InvalidPair { reason, detail })?;
    let now = uow.now_ms();
    // The condition is one of the fixed texts below, never input.
    let (condition, first, second) = match scope {
        EndScope::Session(id) => ("id = $4", id, None),
        EndScope::Host(host_id) => ("host_id = $4", host_id, None),
        EndScope::PersonOnHost { host_id, person_id } => {
            ("host_id = $4 AND person_id = $5", host_id, Some(person_id))
        }
        EndScope::HostExceptPerson { host_id, person_id } => {
            ("host_id = $4 AND person_id <> $5", host_id, Some(person_id))
        }
        EndScope::LoginSession(id) => ("login_session_id = $4", id, None),
        EndScope::Device(id) => ("device_id = $4", id, None),
        EndScope::Person(id) => ("person_id = $4", id, None),
    };
    let sql = format!(
        "UPDATE terminal_sessions \
         SET state = 'closed', close_reason = $1, close_detail = $2, ended_at = $3, \
             version = version + 1 \
         WHERE {condition} AND state <> 'closed' \
         RETURNING id, host_id, person_id, created_at, bytes_in, bytes_out"
    );
    let mut query = sqlx::query(&sql)
        .bind(reason.as_str())
        .bind(detail.map(CloseDetail::as_str))
        .bind(now)
        .bind(db::id_text(&first));
    if let Some(second) = second {
        query = query.bind(db::id_text(&second));
    }
    let rows = query.fetch_all(uow.conn()).await.map_err(DbError::from)?;
    let mut ended = Vec::with_capacity(rows.len());
    for row in &rows {
        let session = EndedSession {
            session_id: db::get_uuid(row, "id")?,
            host_id: db::get_uuid(row, "host_id")?,
            person_id: db::get_uuid(row, "person_id")?,
        };
        let created_at: i64 = row.try_get("created_at").map_err(DbError::from)?;
        let bytes_in: i64 = row.try_get("bytes_in").map_err(DbError::from)?;
        let bytes_out: i64 = row.try_get("bytes_out").map_err(DbError::from)?;
        let mut details = AuditDetails::new()
            .id("session_id", session.session_id)
            .code("close_reason", reason)
            .count("bytes_in", bytes_in)
            .count("bytes_out", bytes_out)
            .count("duration_ms", now.saturating_sub(created_at).max(0));
        if let Some(detail) = detail {
            details = details.code("close_detail", detail);
        }
        uow.audit(
            AuditEntry::allow(AuditAction::TerminalTerminate, Actor::System)
                .target(TargetKind::TerminalSession, session.session_id)
                .details(details),
        );
        let mut payload = Map::new();
        payload.insert("session_id".into(), json!(db::id_text(&session.session_id)));
        payload.insert("host_id".into(), json!(db::id_text(&session.host_id)));
        payload.insert("state".into(), json!("closed"));
        payload.insert("close_reason".into(), json!(reason.as_str()));
        if let Some(detail) = detail {
            // The relay closes the device stream with the code of a refused
            // handshake (5.3 StreamCodeForEnd); clients learn why an opening
            // failed (docs/decisions.md D-85).
            payload.insert("close_detail".into(), json!(detail.as_str()));
        }
        uow.event(DurableEvent::new(
            EventKind::TerminalSessionChanged,
            Audience::Person(session.person_id),
            payload,
        ));
        ended.push(session);
    }
    ended.sort_by_key(|session| session.session_id);
    Ok(ended)
}
