//! The unit of work: one transaction that carries the data of a use case, its
//! audit entries and its events, and the actions that may run only once all of
//! it is committed (signals, closing connections).

use std::fmt;

use sqlx::AnyConnection;
use sqlx::{Any, Transaction};
use tokio::sync::OwnedSemaphorePermit;

use super::records::{self, AuditRow};
use super::{Db, DbError, Engine};
use crate::clock::UnixMillis;
use crate::event_types::{DurableEvent, EphemeralEvent, EventPosition};

/// An action that runs after a successful commit, never after a rollback.
pub type AfterCommit = Box<dyn FnOnce() + Send + 'static>;

/// What a commit wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    /// The positions of the events written, in the order they were added.
    pub event_positions: Vec<EventPosition>,
}

/// One transaction with its audit entries, events and after-commit actions.
///
/// [`UnitOfWork::commit`] writes the collected audit and event rows (and the
/// `NOTIFY` of its signals with several nodes) in the transaction, commits,
/// and only then publishes ephemeral events (and the signals of one node), runs the
/// after-commit actions and wakes the log tail. Dropped without commit it rolls
/// back and runs nothing.
pub struct UnitOfWork {
    db: Db,
    tx: Transaction<'static, Any>,
    now_ms: UnixMillis,
    audit: Vec<AuditRow>,
    events: Vec<DurableEvent>,
    ephemeral: Vec<EphemeralEvent>,
    signals: Vec<String>,
    after_commit: Vec<AfterCommit>,
    /// SQLite: the in-process writer gate (see `db`), held until commit or drop.
    _writer: Option<OwnedSemaphorePermit>,
}

impl fmt::Debug for UnitOfWork {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UnitOfWork")
            .field("engine", &self.db.engine())
            .field("now_ms", &self.now_ms)
            .field("audit", &self.audit.len())
            .field("events", &self.events.len())
            .field("ephemeral", &self.ephemeral.len())
            .field("signals", &self.signals.len())
            .field("after_commit", &self.after_commit.len())
            .finish()
    }
}

impl UnitOfWork {
    pub(super) fn new(
        db: Db,
        tx: Transaction<'static, Any>,
        now_ms: UnixMillis,
        writer: Option<OwnedSemaphorePermit>,
    ) -> UnitOfWork {
        UnitOfWork {
            db,
            tx,
            now_ms,
            audit: Vec::new(),
            events: Vec::new(),
            ephemeral: Vec::new(),
            signals: Vec::new(),
            after_commit: Vec::new(),
            _writer: writer,
        }
    }

    /// The connection of the transaction, for the use case's queries
    /// (`sqlx::query(..).execute(uow.conn())`). Map errors with `DbError::from`.
    pub fn conn(&mut self) -> &mut AnyConnection {
        &mut self.tx
    }

    /// The engine, for the rare statement that differs.
    pub fn engine(&self) -> Engine {
        self.db.engine()
    }

    /// The time the unit of work was started with.
    pub fn now_ms(&self) -> UnixMillis {
        self.now_ms
    }

    /// Adds an audit entry (an `audit::AuditEntry`), written at commit.
    pub fn audit(&mut self, entry: impl Into<AuditRow>) {
        self.audit.push(entry.into());
    }

    /// Adds a durable event, written to the event log at commit.
    pub fn event(&mut self, event: DurableEvent) {
        self.events.push(event);
    }

    /// Adds an ephemeral event, published in this process after the commit and
    /// never stored.
    pub fn ephemeral(&mut self, event: EphemeralEvent) {
        self.ephemeral.push(event);
    }

    /// Stages a signal between nodes (spec 24 section 9; the `db` module docs):
    /// with several nodes a `NOTIFY` in this transaction, with one node handed
    /// to the local transport after the commit; never after a rollback.
    pub fn signal(&mut self, payload: String) {
        self.signals.push(payload);
    }

    /// Adds an action that runs after the commit, in the order added. Keep it
    /// short and non-blocking (send on a channel, wake a task): it runs on the
    /// committing task.
    pub fn after_commit(&mut self, action: impl FnOnce() + Send + 'static) {
        self.after_commit.push(Box::new(action));
    }

    /// Writes the audit entries and events, commits, then publishes the
    /// ephemeral events, runs the after-commit actions and wakes the log tail.
    /// On an error nothing after the commit runs (and the transaction is rolled
    /// back, unless the error came from the commit itself, whose outcome the
    /// database alone knows).
    pub async fn commit(mut self) -> Result<Committed, DbError> {
        let engine = self.db.engine();
        for entry in &self.audit {
            records::insert_audit(&mut self.tx, entry, self.now_ms).await?;
        }
        let mut event_positions = Vec::with_capacity(self.events.len());
        if !self.events.is_empty() {
            // Serialises the writers of the event log from here to the commit
            // (PostgreSQL), so positions become visible in commit order; see
            // `events`. Nothing after this point waits for another lock.
            records::lock_for_append(&mut self.tx, engine).await?;
            for event in &self.events {
                event_positions
                    .push(records::insert_event(&mut self.tx, event, self.now_ms).await?);
            }
            if let Some(&last) = event_positions.last() {
                records::notify_appended(&mut self.tx, engine, last).await?;
            }
        }
        let over_notify = self.db.signals_over_notify();
        if over_notify {
            for payload in &self.signals {
                super::notify_signal(&mut self.tx, payload).await?;
            }
        }

        let UnitOfWork {
            db,
            tx,
            ephemeral,
            signals,
            after_commit,
            _writer,
            ..
        } = self;
        tx.commit().await?;
        // The next writer may start while we run the actions.
        drop(_writer);

        if !event_positions.is_empty() {
            db.notify_committed();
        }
        for event in ephemeral {
            db.publish_ephemeral(event);
        }
        if !over_notify {
            for payload in signals {
                db.publish_signal(payload);
            }
        }
        for action in after_commit {
            action();
        }
        Ok(Committed { event_positions })
    }

    /// Rolls back explicitly (dropping does the same, without waiting).
    pub async fn rollback(self) -> Result<(), DbError> {
        self.tx.rollback().await?;
        Ok(())
    }
}
