//! Session reports of the host (3.5 "Session reports", 6.1 step 7, 6.2) and
//! the detach at the loss of the connection.
//!
//! - `session.started`: an opening session of this host becomes `active` when
//!   the relay has its device side on this process, else `detached` at once
//!   (`detached_at`); `started_at` is set. A device that left between that
//!   check and the commit is noticed after it (the session is detached then,
//!   [`crate::terminal::relay::Relay::detach_if_device_left`]). A closed one gets `session.close`
//!   with its stored reason; an unknown one or one of another host gets
//!   `error {not_found}` and `session.close access_revoked`; an active or
//!   detached one is left as it is (an attach sends none).
//! - `session.ended`: only the reasons and details the host may report
//!   ([`SessionEnded::check_host_may_report`]), else `error {validation_failed}`;
//!   unknown or of another host: `error {not_found}` and `session.close
//!   access_revoked`; closed: not changed; else the one end function. A
//!   report the database could not record is kept in memory and applied at
//!   the host's next login ([`crate::terminal::links::UnrecordedEnd`]).

use bothy_proto::codes::{CloseCode, CloseReason};
use bothy_proto::control::{ErrorCode, HostOp, SessionEnded};
use serde_json::{Map, json};
use sqlx::Row;
use uuid::Uuid;

use super::{ControlConnection, End, LoggedIn, login::end_error};
use crate::config::ClusterMode;
use crate::db::{self, DbError, UnitOfWork};
use crate::events::{Audience, DurableEvent, EventKind};
use crate::hosts::HostError;
use crate::revocation::{EndScope, end};
use crate::terminal::links::UnrecordedEnd;

/// A session row as these reports need it.
struct Row_ {
    host_id: Uuid,
    person_id: Uuid,
    state: String,
    close_reason: Option<String>,
}

async fn load(uow: &mut UnitOfWork, id: Uuid) -> Result<Option<Row_>, HostError> {
    let row = sqlx::query(
        "SELECT host_id, person_id, state, close_reason FROM terminal_sessions WHERE id = $1",
    )
    .bind(db::id_text(&id))
    .fetch_optional(uow.conn())
    .await
    .map_err(DbError::from)?;
    let Some(row) = row else { return Ok(None) };
    Ok(Some(Row_ {
        host_id: db::get_uuid(&row, "host_id")?,
        person_id: db::get_uuid(&row, "person_id")?,
        state: row.try_get("state").map_err(DbError::from)?,
        close_reason: row.try_get("close_reason").map_err(DbError::from)?,
    }))
}

fn internal(error: &dyn std::fmt::Display) -> End {
    tracing::warn!(%error, "the control connection could not apply a session report");
    End::code(CloseCode::UnknownError)
}

/// `terminal_session.changed` to the session's person.
fn changed(uow: &mut UnitOfWork, session_id: Uuid, host_id: Uuid, person_id: Uuid, state: &str) {
    let mut payload = Map::new();
    payload.insert("session_id".into(), json!(db::id_text(&session_id)));
    payload.insert("host_id".into(), json!(db::id_text(&host_id)));
    payload.insert("state".into(), json!(state));
    uow.event(DurableEvent::new(
        EventKind::TerminalSessionChanged,
        Audience::Person(person_id),
        payload,
    ));
}

enum Outcome {
    Done,
    Closed(CloseReason),
    NotFound,
}

/// `session.started`.
pub(super) async fn started(
    connection: &ControlConnection,
    session: &LoggedIn,
    session_id: Uuid,
) -> Result<(), End> {
    let state = &connection.state;
    let now = state.clock().now_ms();
    let outcome = async {
        let mut uow = state.db().begin(now).await?;
        let Some(row) = load(&mut uow, session_id).await? else {
            return Ok::<_, HostError>(Outcome::NotFound);
        };
        if row.host_id != session.host_id {
            return Ok(Outcome::NotFound);
        }
        match row.state.as_str() {
            "opening" => {
                // With several nodes the sides may be relayed on another node
                // (the edge hashes them by session): `session.started`
                // detaches a session only on the node that holds its sides
                // (spec 9, D-508); the relay of that node detaches it when its
                // device leaves.
                let elsewhere = state.config().cluster.mode == ClusterMode::Multi
                    && !state.relay().holds(session_id);
                let device = elsewhere || state.relay().device_present(session_id);
                let sql = if device {
                    "UPDATE terminal_sessions SET state = 'active', started_at = $1, \
                     version = version + 1 WHERE id = $2 AND state = 'opening'"
                } else {
                    "UPDATE terminal_sessions SET state = 'detached', started_at = $1, \
                     detached_at = $1, version = version + 1 WHERE id = $2 AND state = 'opening'"
                };
                sqlx::query(sql)
                    .bind(now)
                    .bind(db::id_text(&session_id))
                    .execute(uow.conn())
                    .await
                    .map_err(DbError::from)?;
                let new_state = if device { "active" } else { "detached" };
                changed(&mut uow, session_id, row.host_id, row.person_id, new_state);
                uow.commit().await?;
                if device && !elsewhere {
                    state.relay().detach_if_device_left(state, session_id).await;
                }
                Ok(Outcome::Done)
            }
            "closed" => Ok(Outcome::Closed(
                row.close_reason
                    .and_then(|r| CloseReason::parse(&r).ok())
                    .unwrap_or(CloseReason::AccessRevoked),
            )),
            _ => Ok(Outcome::Done),
        }
    }
    .await
    .map_err(|e| internal(&e))?;
    answer(connection, HostOp::SessionStarted, session_id, outcome)
}

fn answer(
    connection: &ControlConnection,
    op: HostOp,
    session_id: Uuid,
    outcome: Outcome,
) -> Result<(), End> {
    match outcome {
        Outcome::Done => Ok(()),
        Outcome::Closed(reason) => connection.send_close(session_id, reason),
        Outcome::NotFound => {
            connection.send_error(op, ErrorCode::NotFound, Some(session_id))?;
            connection.send_close(session_id, CloseReason::AccessRevoked)
        }
    }
}

/// `session.ended`.
pub(super) async fn ended(
    connection: &ControlConnection,
    session: &mut LoggedIn,
    report: &SessionEnded,
) -> Result<(), End> {
    if let Err(refusal) = report.check_host_may_report() {
        return connection.send_error(
            HostOp::SessionEnded,
            refusal.error_code(),
            Some(report.session_id),
        );
    }
    let state = &connection.state;
    let now = state.clock().now_ms();
    let session_id = report.session_id;
    // Marked before the commit, so the log tail's delivery of this end is
    // never echoed back.
    session.ended_here.insert(session_id);
    let outcome = async {
        let mut uow = state.db().begin(now).await?;
        let Some(row) = load(&mut uow, session_id).await? else {
            return Ok::<_, HostError>(Outcome::NotFound);
        };
        if row.host_id != session.host_id {
            return Ok(Outcome::NotFound);
        }
        if row.state == "closed" {
            return Ok(Outcome::Done);
        }
        end(
            &mut uow,
            EndScope::Session(session_id),
            report.close_reason,
            report.close_detail,
        )
        .await
        .map_err(end_error)?;
        uow.commit().await?;
        Ok(Outcome::Done)
    }
    .await;
    let links = state.local_control_links();
    let outcome = match outcome {
        Ok(outcome) => {
            links.forget_unrecorded_ends(session.host_id, [session_id]);
            outcome
        }
        Err(error) => {
            // The host counts this end as reported (6.2): it will not name the
            // session at its next login. Kept here, the end is recorded as
            // reported then, not as host_restarted (D-356).
            links.keep_unrecorded_end(
                session.host_id,
                session_id,
                UnrecordedEnd {
                    close_reason: report.close_reason,
                    close_detail: report.close_detail,
                },
            );
            return Err(internal(&error));
        }
    };
    if matches!(outcome, Outcome::NotFound) {
        session.ended_here.remove(&session_id);
    }
    answer(connection, HostOp::SessionEnded, session_id, outcome)
}

/// The loss of the connection: every active session of the host becomes
/// detached (`detached_at`), with `terminal_session.changed`.
pub(super) async fn detach_active(uow: &mut UnitOfWork, host_id: Uuid) -> Result<(), DbError> {
    let now = uow.now_ms();
    let rows = sqlx::query(
        "UPDATE terminal_sessions SET state = 'detached', detached_at = $1, version = version + 1 \
         WHERE host_id = $2 AND state = 'active' RETURNING id, person_id",
    )
    .bind(now)
    .bind(db::id_text(&host_id))
    .fetch_all(uow.conn())
    .await?;
    for row in &rows {
        let id = db::get_uuid(row, "id")?;
        let person = db::get_uuid(row, "person_id")?;
        changed(uow, id, host_id, person, "detached");
    }
    Ok(())
}
