//! The rows a unit of work writes at its commit beside the use case's own
//! (DESIGN 3.3): its audit entries, as the plain [`AuditRow`] the `audit`
//! module makes of an entry, and its durable events, with the lock that
//! serialises the writers of the event log and the `NOTIFY` that wakes the
//! tails of other processes (the `events` module documentation says why).
//! Here, in `db`, so that the unit of work imports neither `audit` nor
//! `events`; those two read what is written here.

use serde_json::Value;
use sqlx::AnyConnection;
use uuid::Uuid;

use super::{DbError, Engine, id_text, new_id};
use crate::clock::UnixMillis;
use crate::event_types::{DurableEvent, EventPosition};

/// The key of the transaction-scoped advisory lock that serialises the writers
/// of the event log on PostgreSQL (the ASCII of `bothyevt`).
pub const EVENTS_LOCK_KEY: i64 = 0x626f_7468_7965_7674;

/// The PostgreSQL channel of the tail's wake-ups; the payload is the last
/// position the transaction wrote (informational only).
pub const NOTIFY_CHANNEL: &str = "bothy_events";

/// One audit entry as the columns of the table `audit`: codes and IDs only,
/// made by the `audit` module from its typed entry (which is what keeps
/// content out of the audit; 10.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditRow {
    /// The action's code.
    pub action: &'static str,
    /// The decision's code.
    pub decision: &'static str,
    /// The actor's kind.
    pub actor_kind: &'static str,
    /// The actor's ID, if it has one.
    pub actor_id: Option<Uuid>,
    /// The target, if any: its kind and ID.
    pub target: Option<(&'static str, Uuid)>,
    /// The details, a JSON object as text.
    pub details: String,
}

/// Writes one audit entry in the unit of work's transaction.
pub(crate) async fn insert_audit(
    conn: &mut AnyConnection,
    row: &AuditRow,
    at: UnixMillis,
) -> Result<(), DbError> {
    let id = new_id(at)?;
    sqlx::query(
        "INSERT INTO audit \
         (id, at, action, decision, actor_kind, actor_id, target_kind, target_id, details) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
    )
    .bind(id_text(&id))
    .bind(at)
    .bind(row.action)
    .bind(row.decision)
    .bind(row.actor_kind)
    .bind(row.actor_id.map(|id| id_text(&id)))
    .bind(row.target.map(|(kind, _)| kind))
    .bind(row.target.map(|(_, id)| id_text(&id)))
    .bind(row.details.as_str())
    .execute(conn)
    .await?;
    Ok(())
}

/// Takes the advisory lock of the event log writers (PostgreSQL; held until
/// the transaction ends). See the module documentation.
pub(crate) async fn lock_for_append(
    conn: &mut AnyConnection,
    engine: Engine,
) -> Result<(), DbError> {
    match engine {
        Engine::Postgres => {
            sqlx::query("SELECT pg_advisory_xact_lock($1)")
                .bind(EVENTS_LOCK_KEY)
                .execute(conn)
                .await?;
        }
        // One writer at a time anyway (BEGIN IMMEDIATE).
        Engine::Sqlite => {}
    }
    Ok(())
}

/// Wakes the tails of every process once the transaction commits (PostgreSQL).
pub(crate) async fn notify_appended(
    conn: &mut AnyConnection,
    engine: Engine,
    last: EventPosition,
) -> Result<(), DbError> {
    match engine {
        Engine::Postgres => {
            sqlx::query("SELECT pg_notify($1, $2)")
                .bind(NOTIFY_CHANNEL)
                .bind(last.to_string())
                .execute(conn)
                .await?;
        }
        // No other process can be told; its tail polls.
        Engine::Sqlite => {}
    }
    Ok(())
}

/// Writes one event in the unit of work's transaction; returns its position.
pub(crate) async fn insert_event(
    conn: &mut AnyConnection,
    event: &DurableEvent,
    at: UnixMillis,
) -> Result<EventPosition, DbError> {
    let payload = Value::Object(event.payload.clone()).to_string();
    let position: i64 = sqlx::query_scalar(
        "INSERT INTO events (kind, audience_kind, audience_id, payload, at) \
         VALUES ($1, $2, $3, $4, $5) RETURNING position",
    )
    .bind(event.kind.as_str())
    .bind(event.audience.kind_str())
    .bind(event.audience.id().map(|id| id_text(&id)))
    .bind(payload)
    .bind(at)
    .fetch_one(conn)
    .await?;
    Ok(position)
}
