//! Events (spec 10.2; DESIGN 3.3): the durable event log, ephemeral events and
//! the log tail.
//!
//! - **Durable events** ([`DurableEvent`]: `host.updated`, `terminal_session.changed`)
//!   are rows of the table `events`, written by [`crate::db::UnitOfWork::commit`]
//!   in the transaction of the change they describe. Each gets a *position*;
//!   clients resume `GET /api/v1/events` after the last position they saw.
//! - **Ephemeral events** ([`EphemeralEvent`]: `host.presence_changed`) are never
//!   stored; they go live to the subscribers of this process (a tokio broadcast).
//!   The two are different types, so an ephemeral event cannot reach the table.
//! - **The log tail** ([`LogTail`]): one task per server process reads the
//!   committed events after the last position it read and hands them to the
//!   in-process subscribers. A [`Subscription`] first replays from the table,
//!   then goes live, without gaps or duplicates.
//!
//! # Positions become visible in commit order
//! A reader that has seen position N and asks for "after N" must never miss an
//! event that commits later with a position below N. On **PostgreSQL** an
//! identity value is taken at insert time but becomes visible at commit, so two
//! concurrent transactions could commit in the other order than their positions.
//! The committing unit of work therefore takes a transaction-scoped advisory
//! lock ([`EVENTS_LOCK_KEY`]) right before it inserts its events, and holds it
//! until its commit: positions are allocated by one transaction at a time, and
//! PostgreSQL makes a commit visible before it releases the transaction's locks,
//! so the next writer's positions become visible only after this one's. The
//! lock is taken last in the unit of work (after its own row locks and audit
//! rows), and under it only the event inserts, the NOTIFY and the commit run, so
//! the serialised section is short and cannot wait for another lock. Every event
//! insert goes through this path. An alternative, reading only up to the oldest
//! running transaction's snapshot (`pg_snapshot_xmin`), needs no lock but delays
//! every reader by the longest running transaction; we chose the short lock.
//! **SQLite** admits one writer at a time (`BEGIN IMMEDIATE`, see `db`), so
//! positions are allocated and committed in the same order without a lock.
//!
//! # Wake-ups of the tail
//! After each local commit that wrote events (an in-process watch), on
//! PostgreSQL a `NOTIFY` on [`NOTIFY_CHANNEL`] sent inside the committing
//! transaction (delivered only after the commit, never after a rollback; this
//! reaches the tails of other processes and nodes), and a poll every
//! [`TailConfig::poll_interval`] as the fallback for a lost listener connection.
//! A wake-up only causes a read; the table is the truth.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::{Map, Value};
use sqlx::Row;
use sqlx::any::AnyRow;
use sqlx::postgres::PgListener;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{Notify, broadcast, watch};
use tokio::task::JoinHandle;

use crate::clock::UnixMillis;
use crate::db::{self, Db, DbError, Engine};
pub use crate::db::{EVENTS_LOCK_KEY, NOTIFY_CHANNEL};
pub use crate::event_types::{
    Audience, DurableEvent, EphemeralEvent, EphemeralKind, EventKind, EventPosition,
};

/// A committed durable event.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredEvent {
    /// Its position.
    pub position: EventPosition,
    /// The kind.
    pub kind: EventKind,
    /// The audience.
    pub audience: Audience,
    /// The payload.
    pub payload: Map<String, Value>,
    /// When (the committing unit of work's clock).
    pub at: UnixMillis,
}

/// What a subscription delivers.
#[derive(Debug, Clone, PartialEq)]
pub enum Delivery {
    /// The next durable event, in position order.
    Durable(Arc<StoredEvent>),
    /// A live ephemeral event.
    Ephemeral(Arc<EphemeralEvent>),
}

/// Errors of the events module.
#[derive(Debug, thiserror::Error)]
pub enum EventsError {
    /// The database failed.
    #[error(transparent)]
    Db(#[from] DbError),
    /// The log tail has stopped (shutdown); the subscription ends.
    #[error("the event log tail has stopped")]
    TailStopped,
}

/// Settings of the log tail.
#[derive(Debug, Clone)]
pub struct TailConfig {
    /// The fallback poll: how long a commit of another process can go unseen
    /// when its NOTIFY was lost (SQLite has no NOTIFY: always the poll).
    pub poll_interval: Duration,
    /// Rows per read.
    pub batch_size: u32,
    /// Events buffered per subscriber. One that falls further behind re-reads
    /// the missed ones from the table, so a small buffer costs reads, not events.
    pub subscriber_capacity: usize,
    /// `database.listen_reconnect_backoff_cap`: after a lost LISTEN connection
    /// the tail tries again at once, then at this interval.
    pub listen_reconnect_backoff_cap: Duration,
}

impl Default for TailConfig {
    fn default() -> Self {
        TailConfig {
            poll_interval: Duration::from_secs(1),
            batch_size: 256,
            subscriber_capacity: 1024,
            listen_reconnect_backoff_cap: Duration::from_secs(30),
        }
    }
}

/// The highest position committed so far (0 for an empty log).
pub async fn last_position(db: &Db) -> Result<EventPosition, DbError> {
    let last: Option<i64> = sqlx::query_scalar("SELECT MAX(position) FROM events")
        .fetch_one(db.pool())
        .await?;
    Ok(last.unwrap_or(0))
}

/// One read of the log.
struct Batch {
    events: Vec<Arc<StoredEvent>>,
    /// The highest position read, including rows that did not decode.
    last: Option<EventPosition>,
    /// Rows read; fewer than the batch size means the end was reached.
    rows: usize,
}

/// Reads the committed events after `after`, in position order.
async fn read_after(db: &Db, after: EventPosition, limit: u32) -> Result<Batch, DbError> {
    let rows = sqlx::query(
        "SELECT position, kind, audience_kind, audience_id, payload, at FROM events \
         WHERE position > $1 ORDER BY position LIMIT $2",
    )
    .bind(after)
    .bind(i64::from(limit.max(1)))
    .fetch_all(db.pool())
    .await?;
    let mut batch = Batch {
        events: Vec::with_capacity(rows.len()),
        last: None,
        rows: rows.len(),
    };
    for row in &rows {
        let position: i64 = row
            .try_get("position")
            .map_err(|_| DbError::Decode { column: "position" })?;
        batch.last = Some(position);
        match decode_event(row, position) {
            Ok(event) => batch.events.push(Arc::new(event)),
            // A kind of a newer binary (rolling upgrade) or a damaged row: skip
            // it, the same way in the tail and in every replay, and say so once
            // per row. The payload is never logged.
            Err(column) => {
                tracing::warn!(position, column, "skipping an event that does not decode")
            }
        }
    }
    Ok(batch)
}

fn decode_event(row: &AnyRow, position: EventPosition) -> Result<StoredEvent, &'static str> {
    let kind: String = row.try_get("kind").map_err(|_| "kind")?;
    let kind = EventKind::parse(&kind).ok_or("kind")?;
    let audience_kind: String = row.try_get("audience_kind").map_err(|_| "audience_kind")?;
    let audience_id = db::get_opt_uuid(row, "audience_id").map_err(|_| "audience_id")?;
    let audience = Audience::from_parts(&audience_kind, audience_id).ok_or("audience_id")?;
    let payload: String = row.try_get("payload").map_err(|_| "payload")?;
    let payload = match serde_json::from_str(&payload) {
        Ok(Value::Object(map)) => map,
        _ => return Err("payload"),
    };
    let at: i64 = row.try_get("at").map_err(|_| "at")?;
    Ok(StoredEvent {
        position,
        kind,
        audience,
        payload,
        at,
    })
}

/// Resolves when shutdown is signalled (`true`) or its sender is gone.
async fn shutdown_signalled(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|stop| *stop).await;
}

/// The log tail of this process: cheap to clone; subscribers come from it.
#[derive(Debug, Clone)]
pub struct LogTail {
    inner: Arc<TailInner>,
}

#[derive(Debug)]
struct TailInner {
    db: Db,
    batch_size: u32,
    /// The live channel. `None` once the tail stopped: dropping the last sender
    /// closes every subscriber's receiver, which ends their subscriptions.
    live: Mutex<Option<broadcast::Sender<Arc<StoredEvent>>>>,
    /// The last position handed to the live channel.
    position: AtomicI64,
}

impl LogTail {
    /// Starts the tail at the current end of the log (subscribers replay what
    /// came before from the table) and returns it with its task, which ends
    /// after `shutdown` becomes `true` (or its sender is dropped); await it to
    /// drain. PostgreSQL: also starts the LISTEN task.
    pub async fn start(
        db: Db,
        config: TailConfig,
        shutdown: watch::Receiver<bool>,
    ) -> Result<(LogTail, JoinHandle<()>), EventsError> {
        let start = last_position(&db).await?;
        let (sender, _) = broadcast::channel(config.subscriber_capacity.max(1));
        let inner = Arc::new(TailInner {
            db: db.clone(),
            batch_size: config.batch_size.max(1),
            live: Mutex::new(Some(sender.clone())),
            position: AtomicI64::new(start),
        });
        // Wake-ups from the listener task; a `Notify` keeps one permit, so a
        // wake-up that arrives while the tail reads is not lost.
        let wake = Arc::new(Notify::new());
        let listener = match db.engine() {
            Engine::Postgres => Some(tokio::spawn(listen(
                db.url().to_owned(),
                Arc::clone(&wake),
                shutdown.clone(),
                config.listen_reconnect_backoff_cap,
            ))),
            Engine::Sqlite => None,
        };
        let task = tokio::spawn(run_tail(
            Arc::clone(&inner),
            sender,
            config,
            shutdown,
            wake,
            listener,
        ));
        Ok((LogTail { inner }, task))
    }

    /// The last position the tail handed out.
    pub fn position(&self) -> EventPosition {
        self.inner.position.load(Ordering::SeqCst)
    }

    /// A subscription to every durable event after `after`, replayed from the
    /// table and then live, and to the ephemeral events published from now on.
    pub fn subscribe_from(&self, after: EventPosition) -> Subscription {
        // The live receiver is taken before the replay reads the table: every
        // event the tail hands out later is in it, and every event it handed out
        // before is committed, so the replay reads it. Between the two nothing
        // is lost; overlaps are dropped by position.
        let live = self
            .inner
            .live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map(broadcast::Sender::subscribe);
        Subscription {
            db: self.inner.db.clone(),
            batch_size: self.inner.batch_size,
            after,
            read_up_to: after,
            replaying: true,
            backlog: VecDeque::new(),
            live,
            ephemeral: Some(self.inner.db.subscribe_ephemeral()),
        }
    }
}

async fn run_tail(
    inner: Arc<TailInner>,
    sender: broadcast::Sender<Arc<StoredEvent>>,
    config: TailConfig,
    mut shutdown: watch::Receiver<bool>,
    wake: Arc<Notify>,
    listener: Option<JoinHandle<()>>,
) {
    let mut commits = inner.db.subscribe_commits();
    let mut poll = tokio::time::interval(config.poll_interval.max(Duration::from_millis(1)));
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        // Read first, then wait: whatever was committed while reading has left
        // its wake-up behind (the watch is marked changed, the Notify has a permit).
        match drain(&inner, &sender).await {
            Ok(()) => failing = false,
            Err(error) => {
                // Once per failure streak; the poll retries.
                if !failing {
                    tracing::warn!(%error, "the event log tail cannot read the log; retrying");
                }
                failing = true;
            }
        }
        tokio::select! {
            () = shutdown_signalled(&mut shutdown) => break,
            changed = commits.changed() => {
                // The sender lives in `Db`, which this task holds: never closed.
                if changed.is_err() {
                    break;
                }
            }
            () = wake.notified() => {}
            _ = poll.tick() => {}
        }
    }
    // Closing the live channel ends the subscriptions with `TailStopped`.
    drop(
        inner
            .live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take(),
    );
    drop(sender);
    if let Some(listener) = listener {
        let _ = listener.await;
    }
}

async fn drain(
    inner: &TailInner,
    sender: &broadcast::Sender<Arc<StoredEvent>>,
) -> Result<(), DbError> {
    loop {
        let after = inner.position.load(Ordering::SeqCst);
        let batch = read_after(&inner.db, after, inner.batch_size).await?;
        for event in batch.events {
            // No receiver is not an error: nobody subscribes yet.
            let _ = sender.send(event);
        }
        if let Some(last) = batch.last {
            inner.position.store(last, Ordering::SeqCst);
        }
        if batch.rows < inner.batch_size as usize {
            return Ok(());
        }
    }
}

/// The LISTEN connection (PostgreSQL): turns notifications into wake-ups.
/// A soft dependency: while it is down the poll keeps the tail going.
async fn listen(
    url: String,
    wake: Arc<Notify>,
    mut shutdown: watch::Receiver<bool>,
    backoff_cap: Duration,
) {
    let mut attempt: u32 = 0;
    loop {
        let connected = tokio::select! {
            () = shutdown_signalled(&mut shutdown) => return,
            listener = connect_listener(&url) => listener,
        };
        match connected {
            Ok(mut listener) => {
                attempt = 0;
                // Catch up on what was committed while nobody listened.
                wake.notify_one();
                loop {
                    // Cancelling `try_recv` only happens at shutdown, when the
                    // listener is dropped anyway.
                    let received = tokio::select! {
                        () = shutdown_signalled(&mut shutdown) => return,
                        received = listener.try_recv() => received,
                    };
                    match received {
                        Ok(Some(_)) => wake.notify_one(),
                        // The connection was lost and made again: notifications
                        // in between are gone, so read.
                        Ok(None) => wake.notify_one(),
                        Err(error) => {
                            tracing::warn!(%error, "the event log listener lost its connection");
                            break;
                        }
                    }
                }
            }
            Err(error) => {
                if attempt == 0 {
                    tracing::warn!(%error, "the event log listener cannot connect; polling meanwhile");
                }
            }
        }
        // Again at once, then every backoff cap.
        let delay = if attempt == 0 {
            Duration::ZERO
        } else {
            backoff_cap
        };
        attempt = attempt.saturating_add(1);
        tokio::select! {
            () = shutdown_signalled(&mut shutdown) => return,
            () = tokio::time::sleep(delay) => {}
        }
    }
}

async fn connect_listener(url: &str) -> Result<PgListener, sqlx::Error> {
    let mut listener = PgListener::connect(url).await?;
    listener.listen(NOTIFY_CHANNEL).await?;
    Ok(listener)
}

/// A subscriber's view of the log: every durable event after a position, in
/// order, exactly once, then live; plus live ephemeral events.
#[derive(Debug)]
pub struct Subscription {
    db: Db,
    batch_size: u32,
    /// The last durable position delivered.
    after: EventPosition,
    /// The highest position read from the table into the backlog.
    read_up_to: EventPosition,
    /// Reading from the table (at the start, and after falling behind the live
    /// channel) until a read comes back short.
    replaying: bool,
    backlog: VecDeque<Arc<StoredEvent>>,
    live: Option<broadcast::Receiver<Arc<StoredEvent>>>,
    ephemeral: Option<broadcast::Receiver<Arc<EphemeralEvent>>>,
}

impl Subscription {
    /// The last durable position delivered (where to resume).
    pub fn position(&self) -> EventPosition {
        self.after
    }

    /// The next delivery. Durable events come in position order without gaps or
    /// duplicates; ephemeral events only while live (one that arrives during a
    /// replay waits in a bounded buffer; beyond it the oldest are lost).
    /// Cancel-safe: dropping the future loses nothing (a replay read is simply
    /// made again).
    pub async fn recv(&mut self) -> Result<Delivery, EventsError> {
        loop {
            if let Some(event) = self.backlog.pop_front() {
                self.after = event.position;
                return Ok(Delivery::Durable(event));
            }
            // Everything read so far is delivered, or passed over because it
            // did not decode (as the tail passes over it).
            self.after = self.after.max(self.read_up_to);
            if self.replaying {
                let batch = read_after(&self.db, self.after, self.batch_size).await?;
                if let Some(last) = batch.last {
                    self.read_up_to = last;
                }
                // A short read reached the end as of this read; what commits
                // later is in the live receiver, taken before the first read.
                if batch.rows < self.batch_size as usize {
                    self.replaying = false;
                }
                self.backlog.extend(batch.events);
                continue;
            }
            let Some(live) = self.live.as_mut() else {
                return Err(EventsError::TailStopped);
            };
            tokio::select! {
                // Durable first: ephemeral events carry no order to keep.
                biased;
                received = live.recv() => match received {
                    Ok(event) if event.position <= self.after => {}
                    Ok(event) => {
                        self.after = event.position;
                        return Ok(Delivery::Durable(event));
                    }
                    // Fell behind the buffer: read the missed events from the table.
                    Err(RecvError::Lagged(_)) => self.replaying = true,
                    Err(RecvError::Closed) => {
                        self.live = None;
                        return Err(EventsError::TailStopped);
                    }
                },
                received = next_ephemeral(&mut self.ephemeral) => match received {
                    Ok(event) => return Ok(Delivery::Ephemeral(event)),
                    Err(RecvError::Lagged(missed)) => {
                        tracing::debug!(missed, "a subscriber missed ephemeral events");
                    }
                    Err(RecvError::Closed) => self.ephemeral = None,
                },
            }
        }
    }
}

async fn next_ephemeral(
    receiver: &mut Option<broadcast::Receiver<Arc<EphemeralEvent>>>,
) -> Result<Arc<EphemeralEvent>, RecvError> {
    match receiver {
        Some(receiver) => receiver.recv().await,
        None => std::future::pending().await,
    }
}
