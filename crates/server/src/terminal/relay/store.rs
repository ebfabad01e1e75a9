//! What the relay reads and writes in `terminal_sessions`: the row at a
//! side's login, the detach of 6.2, the byte counters and `last_input_at`
//! (6.3), and its own ends (open deadline, idle, maximum duration, detach
//! grace) through the one end function.
//!
//! Every failure is logged without an ID and otherwise swallowed: the relay
//! keeps forwarding, and the sweep catches a limit the relay could not write.

use bothy_proto::codes::{CloseDetail, CloseReason};
use serde_json::{Map, json};
use sqlx::Row;
use uuid::Uuid;

use super::{Limits, Stats};
use crate::clock::UnixMillis;
use crate::db::{self, DbError};
use crate::events::{Audience, DurableEvent, EventKind};
use crate::revocation::{EndScope, end};
use crate::state::AppState;

/// A session row as the relay needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SessionRow {
    pub(crate) host_id: Uuid,
    pub(crate) person_id: Uuid,
    /// The current login session (the console's stream is bound to it).
    pub(crate) login_session_id: Uuid,
    pub(crate) device_id: Option<Uuid>,
    pub(crate) state: String,
    pub(crate) close_reason: Option<String>,
    pub(crate) close_detail: Option<String>,
    pub(crate) created_at: UnixMillis,
    pub(crate) started_at: Option<UnixMillis>,
    pub(crate) last_input_at: Option<UnixMillis>,
    pub(crate) detached_at: Option<UnixMillis>,
}

impl SessionRow {
    /// The limits of the relay's timers.
    pub(crate) fn limits(&self) -> Limits {
        Limits {
            created_at: self.created_at,
            started_at: self.started_at,
            last_input_at: self.last_input_at,
            detached_at: self.detached_at,
        }
    }

    /// Whether the session is closed.
    pub(crate) fn is_closed(&self) -> bool {
        self.state == "closed"
    }
}

/// Reads a session.
pub(crate) async fn load(
    state: &AppState,
    session_id: Uuid,
) -> Result<Option<SessionRow>, DbError> {
    let mut conn = state.db().pool().acquire().await?;
    let row = sqlx::query(
        "SELECT host_id, person_id, login_session_id, device_id, state, close_reason, \
                close_detail, created_at, started_at, last_input_at, detached_at \
         FROM terminal_sessions WHERE id = $1",
    )
    .bind(db::id_text(&session_id))
    .fetch_optional(&mut *conn)
    .await?;
    let Some(row) = row else { return Ok(None) };
    Ok(Some(SessionRow {
        host_id: db::get_uuid(&row, "host_id")?,
        person_id: db::get_uuid(&row, "person_id")?,
        login_session_id: db::get_uuid(&row, "login_session_id")?,
        device_id: db::get_opt_uuid(&row, "device_id")?,
        state: row.try_get("state")?,
        close_reason: row.try_get("close_reason")?,
        close_detail: row.try_get("close_detail")?,
        created_at: row.try_get("created_at")?,
        started_at: row.try_get("started_at")?,
        last_input_at: row.try_get("last_input_at")?,
        detached_at: row.try_get("detached_at")?,
    }))
}

/// The state of a session now (`None`: no such session); `Err` after a logged
/// database failure.
pub(crate) async fn state_of(state: &AppState, session_id: Uuid) -> Result<Option<String>, ()> {
    match load(state, session_id).await {
        Ok(row) => Ok(row.map(|row| row.state)),
        Err(error) => {
            tracing::warn!(%error, %session_id, "the relay cannot read a terminal session");
            Err(())
        }
    }
}

/// The device left an active session: `detached` with `detached_at` and
/// `terminal_session.changed` (6.2). Nothing for a session in another state.
pub(crate) async fn detach(state: &AppState, session_id: Uuid) {
    if let Err(error) = move_attachment(state, session_id, "detached").await {
        tracing::warn!(%error, %session_id, "the relay cannot detach a terminal session");
    }
}

/// A device paired again with the host of a started session that was
/// detached: `active` without `detached_at`, with `terminal_session.changed`
/// (6.2). Nothing for a session in another state.
pub(crate) async fn reactivate(state: &AppState, session_id: Uuid) {
    if let Err(error) = move_attachment(state, session_id, "active").await {
        tracing::warn!(%error, %session_id, "the relay cannot make a terminal session active again");
    }
}

/// One move between `active` and `detached` (`to`), with its
/// `terminal_session.changed` in the same unit of work.
async fn move_attachment(
    state: &AppState,
    session_id: Uuid,
    to: &'static str,
) -> Result<(), DbError> {
    let now = state.clock().now_ms();
    let mut uow = state.db().begin(now).await?;
    let query = if to == "detached" {
        sqlx::query(
            "UPDATE terminal_sessions SET state = 'detached', detached_at = $2, \
                 version = version + 1 \
             WHERE id = $1 AND state = 'active' RETURNING host_id, person_id",
        )
        .bind(db::id_text(&session_id))
        .bind(now)
    } else {
        sqlx::query(
            "UPDATE terminal_sessions SET state = 'active', detached_at = NULL, \
                 version = version + 1 \
             WHERE id = $1 AND state = 'detached' RETURNING host_id, person_id",
        )
        .bind(db::id_text(&session_id))
    };
    let Some(row) = query.fetch_optional(uow.conn()).await? else {
        uow.rollback().await?;
        return Ok(());
    };
    let host_id = db::get_uuid(&row, "host_id")?;
    let person_id = db::get_uuid(&row, "person_id")?;
    let mut payload = Map::new();
    payload.insert("session_id".into(), json!(db::id_text(&session_id)));
    payload.insert("host_id".into(), json!(db::id_text(&host_id)));
    payload.insert("state".into(), json!(to));
    uow.event(DurableEvent::new(
        EventKind::TerminalSessionChanged,
        Audience::Person(person_id),
        payload,
    ));
    uow.commit().await?;
    Ok(())
}

/// Adds the pending counters to the row in `conn` (taken from `stats`; put
/// back by the caller if the write does not commit).
async fn write_counters(
    conn: &mut sqlx::AnyConnection,
    session_id: Uuid,
    (bytes_in, bytes_out, last_input): (u64, u64, UnixMillis),
) -> Result<(), DbError> {
    if bytes_in == 0 && bytes_out == 0 && last_input == 0 {
        return Ok(());
    }
    let bytes_in = i64::try_from(bytes_in).unwrap_or(i64::MAX);
    let bytes_out = i64::try_from(bytes_out).unwrap_or(i64::MAX);
    let id = db::id_text(&session_id);
    if last_input == 0 {
        sqlx::query(
            "UPDATE terminal_sessions SET bytes_in = bytes_in + $2, bytes_out = bytes_out + $3 \
             WHERE id = $1",
        )
        .bind(id)
        .bind(bytes_in)
        .bind(bytes_out)
        .execute(conn)
        .await?;
    } else {
        sqlx::query(
            "UPDATE terminal_sessions SET bytes_in = bytes_in + $2, bytes_out = bytes_out + $3, \
                 last_input_at = CASE WHEN last_input_at IS NULL OR last_input_at < $4 \
                                      THEN $4 ELSE last_input_at END \
             WHERE id = $1",
        )
        .bind(id)
        .bind(bytes_in)
        .bind(bytes_out)
        .bind(last_input)
        .execute(conn)
        .await?;
    }
    Ok(())
}

/// Writes the pending byte counters and `last_input_at` (each byte once).
pub(crate) async fn flush(state: &AppState, session_id: Uuid, stats: &Stats) {
    let taken = stats.take();
    if taken == (0, 0, 0) {
        return;
    }
    let result: Result<(), DbError> = async {
        let mut conn = state.db().pool().acquire().await?;
        write_counters(&mut conn, session_id, taken).await
    }
    .await;
    if let Err(error) = result {
        stats.put_back(taken.0, taken.1, taken.2);
        tracing::warn!(
            %error,
            %session_id,
            "the relay cannot write the counters of a terminal session"
        );
    }
}

/// Ends a session by the relay itself, with the pending counters written in
/// the same unit of work; with `only_opening` a compare-and-swap on `opening`
/// (the open deadline, and a handshake refused with 4101, which leaves a
/// started session detached). Returns whether the unit of
/// work committed (also when nothing was left to end).
pub(crate) async fn end_by_relay(
    state: &AppState,
    session_id: Uuid,
    stats: &Stats,
    reason: CloseReason,
    detail: Option<CloseDetail>,
    only_opening: bool,
) -> bool {
    let taken = stats.take();
    let result: Result<(), Box<dyn std::error::Error + Send + Sync>> = async {
        let mut uow = state.db().begin(state.clock().now_ms()).await?;
        if only_opening {
            // Locks the row (PostgreSQL) and checks the phase in one statement.
            let row = sqlx::query(
                "UPDATE terminal_sessions SET version = version \
                 WHERE id = $1 AND state = 'opening' RETURNING id",
            )
            .bind(db::id_text(&session_id))
            .fetch_optional(uow.conn())
            .await
            .map_err(DbError::from)?;
            if row.is_none() {
                write_counters(uow.conn(), session_id, taken).await?;
                uow.commit().await?;
                return Ok(());
            }
        }
        write_counters(uow.conn(), session_id, taken).await?;
        end(&mut uow, EndScope::Session(session_id), reason, detail).await?;
        uow.commit().await?;
        Ok(())
    }
    .await;
    match result {
        Ok(()) => true,
        Err(error) => {
            stats.put_back(taken.0, taken.1, taken.2);
            tracing::warn!(
                %error,
                %session_id,
                close_reason = reason.as_str(),
                "the relay cannot end a terminal session"
            );
            false
        }
    }
}

/// Spec 9 `terminal.session_paired` (several nodes, outside any unit of
/// work): this relay paired both sides of a session in opening on a host
/// whose last report says `require_local_confirm = true`. A failure is
/// logged; the receivers only mark their expectation (docs/decisions.md
/// D-509).
pub(crate) async fn announce_paired(state: &AppState, session_id: Uuid) {
    let read = async {
        let mut conn = state.db().pool().acquire().await?;
        let row = sqlx::query(
            "SELECT ts.host_id, ts.state, h.reported_require_local_confirm \
             FROM terminal_sessions ts JOIN hosts h ON h.id = ts.host_id WHERE ts.id = $1",
        )
        .bind(db::id_text(&session_id))
        .fetch_optional(&mut *conn)
        .await?;
        let Some(row) = row else {
            return Ok::<_, DbError>(None);
        };
        let confirm: Option<bool> = row.try_get("reported_require_local_confirm")?;
        let phase: String = row.try_get("state")?;
        (confirm == Some(true) && phase == "opening")
            .then(|| db::get_uuid(&row, "host_id"))
            .transpose()
    }
    .await;
    let host_id = match read {
        Ok(Some(host_id)) => host_id,
        Ok(None) => return,
        Err(error) => {
            tracing::warn!(%error, "the relay cannot read a paired terminal session");
            return;
        }
    };
    let signal = crate::terminal::signals::Signal::SessionPaired {
        host_id,
        session_id,
    };
    if let Err(error) = crate::terminal::signals::send(state.db(), &signal).await {
        tracing::warn!(%error, "terminal.session_paired could not be sent");
    }
}
