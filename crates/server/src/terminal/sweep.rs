//! The job `terminal.sweep` (6.3, M2-46, D-M2-46-8): every
//! `terminal.sweep_interval` it checks the limits of every session that is not
//! closed against the stored rows, so a session ends also when no relay holds
//! it — a tampered host service that never reports idle, a process or node that
//! died, a login session that only expired.
//!
//! # Order of the checks
//! For each session the first match ends it, security reasons before limits
//! ([`check`], exactly the order of 6.3):
//! 1. host not active: `pairing`/`confirming` → `host_rekeyed`, `disabled` →
//!    `host_disabled`, `retired` → `host_retired`;
//! 2. login session ended or passed `expires_at` → `session_revoked` (07 4.1
//!    "session revoked or expired": no event marks an expiry, so the sweep
//!    finds it);
//! 3. `opening` at or past the last grant plus `terminal.open_timeout` →
//!    `open_failed` with `open_timeout`, except on a host whose last report says
//!    `require_local_confirm = true` (the pairing meets that deadline and the
//!    host service bounds start and consent). The last grant is the UUIDv7 time
//!    of `token_jti` (every grant renews it, on the server's clock); a row
//!    without one counts from `created_at`;
//! 4. `created_at` (the opening, `opened_at` of 6.3, unchanged by reattaching)
//!    plus `terminal.max_session_duration` → `max_duration`;
//! 5. `detached` and `detached_at` plus `terminal.detach_grace` →
//!    `detach_expired`;
//! 6. the latest of the stored `last_input_at`, `started_at` and `created_at`
//!    plus `terminal.idle_timeout` plus `terminal.idle_grace` → `idle_timeout`.
//!
//! Every deadline is inclusive: the instant itself ends a session, one
//! millisecond before keeps it (6.3).
//!
//! # Ends
//! A pass reads the candidates without a transaction; each match is then read
//! again in its own unit of work (on PostgreSQL with the row locked) and, if it
//! still matches, ended through [`crate::revocation::end`] — audit `terminal.terminate`,
//! event `terminal_session.changed`; the relay and the control connection close
//! what they hold from the log tail. The first committed end wins: a session
//! another end closed in between is left alone.
//!
//! # A process that died (one node)
//! The limits above catch a session of a dead process from its row. On one node
//! ([`release_at_start`], `cluster.mode = single`) every session still `active`
//! when the process starts lost its connections with the previous run: it
//! becomes `detached` with `detached_at` = the start (6.2: a broken connection
//! detaches), so the detach grace runs for it and the device may reattach. An
//! `opening` keeps its grant time, so check 3 ends it. With several nodes
//! another node may hold the session, so nothing is released.
//!
//! The pass also ends the sessions that expired grants took away (8.3,
//! [`crate::permissions::grants::end_expired`]: the expiry is a revocation,
//! `access_revoked`) and records due key statuses
//! ([`super::keys::promote_due`]).

use std::time::Duration;

use bothy_proto::codes::{CloseDetail, CloseReason};
use serde_json::{Map, json};
use sqlx::Row;
use sqlx::any::AnyRow;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use uuid::Uuid;

use super::keys::{self, KeyPolicy};
use crate::clock::{SharedClock, UnixMillis, millis};
use crate::config::{ClusterMode, Config, TerminalConfig};
use crate::db::{self, Db, DbError, Engine};
use crate::events::{Audience, DurableEvent, EventKind};
use crate::revocation::{EndError, EndScope};

/// Why a sweep pass failed (the task logs it and tries again next interval).
#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    /// The database failed.
    #[error(transparent)]
    Db(#[from] DbError),
    /// The end function refused (an internal error: the pairs here are fixed).
    #[error(transparent)]
    End(#[from] EndError),
    /// A stored value does not decode.
    #[error("stored terminal session data is unusable: {0}")]
    Stored(&'static str),
}

/// The limits of the checks, from `terminal.*`, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// `terminal.open_timeout`.
    pub open_timeout: i64,
    /// `terminal.max_session_duration`.
    pub max_session_duration: i64,
    /// `terminal.detach_grace`.
    pub detach_grace: i64,
    /// `terminal.idle_timeout` plus `terminal.idle_grace`.
    pub idle_limit: i64,
}

impl Limits {
    /// The limits of `terminal`.
    pub fn from_config(terminal: &TerminalConfig) -> Limits {
        Limits {
            open_timeout: millis(terminal.open_timeout),
            max_session_duration: millis(terminal.max_session_duration),
            detach_grace: millis(terminal.detach_grace),
            idle_limit: millis(terminal.idle_timeout).saturating_add(millis(terminal.idle_grace)),
        }
    }
}

/// What the checks read of one session that is not closed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// The session.
    pub session_id: Uuid,
    /// `terminal_sessions.state` (`opening`, `active`, `detached`).
    pub state: String,
    /// `hosts.state` of its host.
    pub host_state: String,
    /// `hosts.reported_require_local_confirm` (NULL: false).
    pub require_local_confirm: bool,
    /// `login_sessions.ended_at` of its login session.
    pub login_ended_at: Option<UnixMillis>,
    /// `login_sessions.expires_at`.
    pub login_expires_at: UnixMillis,
    /// `created_at` (the opening).
    pub created_at: UnixMillis,
    /// `started_at`.
    pub started_at: Option<UnixMillis>,
    /// `last_input_at` as stored.
    pub last_input_at: Option<UnixMillis>,
    /// `detached_at`.
    pub detached_at: Option<UnixMillis>,
    /// The UUIDv7 time of `token_jti`: the last grant.
    pub last_grant_at: Option<UnixMillis>,
}

/// The end [`check`] decided: reason and detail (only with `open_failed`).
pub type Verdict = (CloseReason, Option<CloseDetail>);

/// The first check of the order of 6.3 that `session` meets at `now`, if any.
pub fn check(session: &Candidate, limits: &Limits, now: UnixMillis) -> Option<Verdict> {
    let due = |deadline: i64| now >= deadline;
    // 1. Host not active.
    match session.host_state.as_str() {
        "pairing" | "confirming" => return Some((CloseReason::HostRekeyed, None)),
        "disabled" => return Some((CloseReason::HostDisabled, None)),
        "retired" => return Some((CloseReason::HostRetired, None)),
        _ => {}
    }
    // 2. Login session ended or expired (valid only while now < expires_at).
    if session.login_ended_at.is_some() || due(session.login_expires_at) {
        return Some((CloseReason::SessionRevoked, None));
    }
    // 3. Opening past the last grant plus the open timeout.
    if session.state == "opening" && !session.require_local_confirm {
        let grant = session.last_grant_at.unwrap_or(session.created_at);
        if due(grant.saturating_add(limits.open_timeout)) {
            return Some((CloseReason::OpenFailed, Some(CloseDetail::OpenTimeout)));
        }
    }
    // 4. Maximum duration from the opening.
    if due(session
        .created_at
        .saturating_add(limits.max_session_duration))
    {
        return Some((CloseReason::MaxDuration, None));
    }
    // 5. Detach grace. A detached row without detached_at (never written so)
    // counts from its latest known instant: fail closed, not never.
    if session.state == "detached" {
        let since = session
            .detached_at
            .or(session.started_at)
            .unwrap_or(session.created_at);
        if due(since.saturating_add(limits.detach_grace)) {
            return Some((CloseReason::DetachExpired, None));
        }
    }
    // 6. Idle with the stored last input.
    let last = [session.last_input_at, session.started_at]
        .into_iter()
        .flatten()
        .fold(session.created_at, i64::max);
    if due(last.saturating_add(limits.idle_limit)) {
        return Some((CloseReason::IdleTimeout, None));
    }
    None
}

/// One session the sweep ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Swept {
    /// The session.
    pub session_id: Uuid,
    /// Its close reason.
    pub reason: CloseReason,
    /// Its close detail.
    pub detail: Option<CloseDetail>,
}

const CANDIDATES: &str = "SELECT ts.id, ts.state, ts.created_at, ts.started_at, \
         ts.last_input_at, ts.detached_at, ts.token_jti, \
         h.state AS host_state, h.reported_require_local_confirm, \
         ls.ended_at AS login_ended_at, ls.expires_at AS login_expires_at \
     FROM terminal_sessions ts \
     JOIN hosts h ON h.id = ts.host_id \
     JOIN login_sessions ls ON ls.id = ts.login_session_id \
     WHERE ts.state <> 'closed'";

fn decode(row: &AnyRow) -> Result<Candidate, SweepError> {
    let get = |column: &'static str| {
        row.try_get::<Option<i64>, _>(column)
            .map_err(|_| SweepError::Stored(column))
    };
    let text = |column: &'static str| {
        row.try_get::<String, _>(column)
            .map_err(|_| SweepError::Stored(column))
    };
    let require_local_confirm =
        match row.try_get::<Option<bool>, _>("reported_require_local_confirm") {
            Ok(value) => value.unwrap_or(false),
            Err(_) => row
                .try_get::<Option<i64>, _>("reported_require_local_confirm")
                .map_err(|_| SweepError::Stored("hosts.reported_require_local_confirm"))?
                .is_some_and(|value| value != 0),
        };
    let last_grant_at = db::get_opt_uuid(row, "token_jti")?
        .and_then(|jti| bothy_proto::ids::v7_unix_millis(&jti))
        .map(|ms| i64::try_from(ms).unwrap_or(i64::MAX));
    Ok(Candidate {
        session_id: db::get_uuid(row, "id")?,
        state: text("state")?,
        host_state: text("host_state")?,
        require_local_confirm,
        login_ended_at: get("login_ended_at")?,
        login_expires_at: get("login_expires_at")?
            .ok_or(SweepError::Stored("login_sessions.expires_at"))?,
        created_at: get("created_at")?.ok_or(SweepError::Stored("terminal_sessions.created_at"))?,
        started_at: get("started_at")?,
        last_input_at: get("last_input_at")?,
        detached_at: get("detached_at")?,
        last_grant_at,
    })
}

/// One pass of `terminal.sweep` at `now` (tests call it with the manual
/// clock's time): ends every session the checks match, in ID order, and
/// records due key statuses. Returns what it ended.
pub async fn run_once(db: &Db, config: &Config, now: UnixMillis) -> Result<Vec<Swept>, SweepError> {
    let limits = Limits::from_config(&config.terminal);
    let due: Vec<Uuid> = {
        let mut conn = db.pool().acquire().await.map_err(DbError::from)?;
        let rows = sqlx::query(&format!("{CANDIDATES} ORDER BY ts.id"))
            .fetch_all(&mut *conn)
            .await
            .map_err(DbError::from)?;
        let mut due = Vec::new();
        for row in &rows {
            let candidate = decode(row)?;
            if check(&candidate, &limits, now).is_some() {
                due.push(candidate.session_id);
            }
        }
        due
    };
    let mut swept = Vec::with_capacity(due.len());
    for session_id in due {
        if let Some(done) = end_if_due(db, &limits, session_id, now).await? {
            swept.push(done);
        }
    }
    // 8.3: an expired grant is a revocation; its sessions end at the first
    // pass after `expires_at` (at most `terminal.sweep_interval` late).
    match crate::permissions::grants::end_expired(db, now).await {
        Ok(0) => {}
        Ok(ended) => tracing::info!(
            sessions = ended,
            "terminal.sweep: expired grants ended sessions"
        ),
        Err(error) => {
            tracing::warn!(%error, "terminal.sweep: ending the sessions of expired grants failed")
        }
    }
    if let Err(error) = keys::promote_due(db, &KeyPolicy::from_config(config), now).await {
        tracing::warn!(%error, "terminal.sweep: recording due signing key statuses failed");
    }
    Ok(swept)
}

/// Reads `session_id` again in a unit of work (locked on PostgreSQL, where
/// read committed would let a concurrent end or input slip in between) and ends
/// it if a check still matches.
async fn end_if_due(
    db: &Db,
    limits: &Limits,
    session_id: Uuid,
    now: UnixMillis,
) -> Result<Option<Swept>, SweepError> {
    let mut uow = db.begin(now).await?;
    let lock = match uow.engine() {
        Engine::Postgres => " FOR UPDATE OF ts",
        Engine::Sqlite => "",
    };
    let row = sqlx::query(&format!("{CANDIDATES} AND ts.id = $1{lock}"))
        .bind(db::id_text(&session_id))
        .fetch_optional(uow.conn())
        .await
        .map_err(DbError::from)?;
    let Some(row) = row else { return Ok(None) };
    let Some((reason, detail)) = check(&decode(&row)?, limits, now) else {
        return Ok(None);
    };
    let ended =
        crate::revocation::end(&mut uow, EndScope::Session(session_id), reason, detail).await?;
    if ended.is_empty() {
        return Ok(None);
    }
    uow.commit().await?;
    Ok(Some(Swept {
        session_id,
        reason,
        detail,
    }))
}

/// At the start of the process on one node (module docs): every `active`
/// session becomes `detached` with `detached_at = now`, with version + 1 and
/// `terminal_session.changed` to its person. Returns the sessions released.
/// Does nothing with `cluster.mode = multi`.
pub async fn release_at_start(
    db: &Db,
    config: &Config,
    now: UnixMillis,
) -> Result<Vec<Uuid>, SweepError> {
    if config.cluster.mode != ClusterMode::Single {
        return Ok(Vec::new());
    }
    let mut uow = db.begin(now).await?;
    let rows = sqlx::query(
        "UPDATE terminal_sessions SET state = 'detached', detached_at = $1, version = version + 1 \
         WHERE state = 'active' RETURNING id, host_id, person_id",
    )
    .bind(now)
    .fetch_all(uow.conn())
    .await
    .map_err(DbError::from)?;
    let mut released = Vec::with_capacity(rows.len());
    for row in &rows {
        let session_id = db::get_uuid(row, "id")?;
        let host_id = db::get_uuid(row, "host_id")?;
        let person_id = db::get_uuid(row, "person_id")?;
        let mut payload = Map::new();
        payload.insert("session_id".into(), json!(db::id_text(&session_id)));
        payload.insert("host_id".into(), json!(db::id_text(&host_id)));
        payload.insert("state".into(), json!("detached"));
        uow.event(DurableEvent::new(
            EventKind::TerminalSessionChanged,
            Audience::Person(person_id),
            payload,
        ));
        released.push(session_id);
    }
    uow.commit().await?;
    released.sort();
    if !released.is_empty() {
        tracing::info!(
            sessions = released.len(),
            "terminal sessions of the previous run detached at start"
        );
    }
    Ok(released)
}

/// Starts the job: a pass at once, then one whenever `terminal.sweep_interval`
/// has passed on `clock` since the last one began (looked at every
/// [`super::relay::TICK`]; a pass that takes longer delays the next), each at
/// the time of `clock`, until `shutdown` turns true (the server's shutdown
/// signal). A failed pass is logged and the next one tries again. The
/// schedule is on the injected clock like every other deadline, so a test's
/// manual clock decides when passes run (docs/decisions.md D-88).
pub fn start(
    db: Db,
    config: Config,
    clock: SharedClock,
    mut shutdown: watch::Receiver<bool>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let period = millis(config.terminal.sweep_interval.max(Duration::from_millis(1)));
        let mut ticks = tokio::time::interval(super::relay::TICK);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut due = clock.now_ms();
        loop {
            if *shutdown.borrow() {
                return;
            }
            tokio::select! {
                _ = ticks.tick() => {}
                changed = shutdown.changed() => {
                    if changed.is_err() || *shutdown.borrow() {
                        return;
                    }
                    continue;
                }
            }
            let now = clock.now_ms();
            if now < due {
                continue;
            }
            due = now.saturating_add(period);
            let pass = run_once(&db, &config, now);
            tokio::select! {
                result = pass => match result {
                    Ok(swept) if !swept.is_empty() => {
                        tracing::info!(sessions = swept.len(), "terminal.sweep ended sessions");
                    }
                    Ok(_) => {}
                    Err(error) => tracing::warn!(%error, "terminal.sweep pass failed"),
                },
                // A pass in flight stops at shutdown; its open unit of work
                // rolls back, the committed ends stay.
                _ = shutdown.changed() => return,
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: i64 = 1_000_000_000;

    fn limits() -> Limits {
        Limits {
            open_timeout: 20_000,
            max_session_duration: 1_000_000,
            detach_grace: 50_000,
            idle_limit: 100_000,
        }
    }

    fn session(state: &str) -> Candidate {
        Candidate {
            session_id: Uuid::from_bytes([1; 16]),
            state: state.into(),
            host_state: "active".into(),
            require_local_confirm: false,
            login_ended_at: None,
            login_expires_at: T + 10_000_000,
            created_at: T,
            started_at: None,
            last_input_at: None,
            detached_at: None,
            last_grant_at: Some(T),
        }
    }

    #[test]
    fn each_deadline_is_inclusive() {
        let l = limits();
        let opening = session("opening");
        assert_eq!(check(&opening, &l, T + 19_999), None);
        assert_eq!(
            check(&opening, &l, T + 20_000),
            Some((CloseReason::OpenFailed, Some(CloseDetail::OpenTimeout)))
        );
        let mut detached = session("detached");
        detached.detached_at = Some(T + 10);
        detached.last_input_at = Some(T + 10);
        assert_eq!(check(&detached, &l, T + 50_009), None);
        assert_eq!(
            check(&detached, &l, T + 50_010),
            Some((CloseReason::DetachExpired, None))
        );
        let mut active = session("active");
        active.started_at = Some(T + 5);
        active.last_input_at = Some(T + 3);
        assert_eq!(check(&active, &l, T + 100_004), None);
        assert_eq!(
            check(&active, &l, T + 100_005),
            Some((CloseReason::IdleTimeout, None))
        );
    }

    #[test]
    fn order_security_before_limits() {
        let l = limits();
        let mut s = session("opening");
        s.host_state = "confirming".into();
        s.login_ended_at = Some(T);
        assert_eq!(
            check(&s, &l, T + 20_000),
            Some((CloseReason::HostRekeyed, None))
        );
        s.host_state = "active".into();
        assert_eq!(
            check(&s, &l, T + 20_000),
            Some((CloseReason::SessionRevoked, None))
        );
        s.require_local_confirm = true;
        s.login_ended_at = None;
        assert_eq!(check(&s, &l, T + 20_000), None);
    }
}
