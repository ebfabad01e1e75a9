//! The database: SQLite (the embedded default) or PostgreSQL through one sqlx
//! [`AnyPool`], numbered migrations per engine embedded in the binary, and the
//! [`UnitOfWork`] that commits data, audit entries and events together (DESIGN 3.3).
//!
//! # One query text for both engines
//! The schema is portable: IDs are `TEXT` (hyphenated UUIDv7, lower case), times
//! are 64-bit Unix milliseconds, JSON is `TEXT`, booleans are `BOOLEAN` on
//! PostgreSQL and `INTEGER` 0/1 on SQLite (the Any driver cannot read a column
//! declared `BOOLEAN` on SQLite; read them with [`get_bool`]). Queries use `$1,
//! $2, ...`, which SQLite accepts too. Where an engine needs its own SQL, the branch
//! is a method of [`Engine`] or one `match` next to the statement, never scattered.
//!
//! # SQLite
//! The file is created if missing (`mode=rwc`), put into WAL mode once, and every
//! connection gets `busy_timeout` and `foreign_keys = ON`. A unit of work starts
//! with `BEGIN IMMEDIATE`: a deferred transaction that reads and then writes
//! fails with `SQLITE_BUSY` (`SQLITE_BUSY_SNAPSHOT` in WAL mode) when another
//! writer committed after its read, and `busy_timeout` does not help there, because
//! waiting cannot make its snapshot current. `BEGIN IMMEDIATE` takes the write lock
//! up front, where `busy_timeout` does wait. Inside one process the units of work
//! also queue on an async gate (a semaphore of one) before they take a connection:
//! SQLite admits one writer anyway, and waiting on the gate costs no pool
//! connection and no blocked worker thread spinning in SQLite's busy handler. The
//! gate does not replace `BEGIN IMMEDIATE`, which still serialises against other
//! processes on the same file (`bothy-server admin ...` while `serve` runs).
//!
//! # Layout
//! - `migrate`: the embedded migrations and their runner.
//! - `uow`: [`UnitOfWork`].

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::error::DatabaseError;
use sqlx::{AnyConnection, AnyPool, Connection, Executor, Row};
use tokio::sync::{Semaphore, broadcast, watch};
use uuid::Uuid;

use crate::clock::{UnixMillis, millis};
use crate::events::EphemeralEvent;

mod migrate;
mod uow;

pub use migrate::{MigrationFile, embedded_migrations};
pub use uow::{AfterCommit, Committed, UnitOfWork};

/// The database engine, chosen from the URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Engine {
    /// `sqlite://path` (the embedded default, `cluster.mode = single`).
    Sqlite,
    /// `postgres://...` or `postgresql://...`.
    Postgres,
}

impl Engine {
    /// The engine of a database URL; the scheme decides, case-insensitively.
    /// The error never repeats the URL, which may hold a password.
    pub fn from_url(url: &str) -> Result<Engine, DbError> {
        let scheme = url.split_once("://").map(|(scheme, _)| scheme);
        match scheme.map(str::to_ascii_lowercase).as_deref() {
            Some("sqlite") => Ok(Engine::Sqlite),
            Some("postgres" | "postgresql") => Ok(Engine::Postgres),
            _ => Err(DbError::UnsupportedUrl),
        }
    }

    /// `sqlite` or `postgres`, for logs and metrics.
    pub const fn as_str(self) -> &'static str {
        match self {
            Engine::Sqlite => "sqlite",
            Engine::Postgres => "postgres",
        }
    }

    /// The statement that opens a unit of work; `None` is the driver's `BEGIN`
    /// (PostgreSQL, read committed). SQLite: see the module documentation.
    const fn begin_statement(self) -> Option<&'static str> {
        match self {
            Engine::Sqlite => Some("BEGIN IMMEDIATE"),
            Engine::Postgres => None,
        }
    }
}

impl fmt::Display for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What can go wrong in the database layer. Messages never carry parameter
/// values or the URL; the sqlx error stays the `source` for the log.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// The URL is neither `sqlite://` nor `postgres://`/`postgresql://`.
    #[error("database URL must start with sqlite://, postgres:// or postgresql://")]
    UnsupportedUrl,
    /// Connecting (or setting up a new connection) failed.
    #[error("cannot connect to the {engine} database")]
    Connect {
        /// The engine of the URL.
        engine: Engine,
        /// The driver's error.
        #[source]
        source: sqlx::Error,
    },
    /// SQLite refused WAL mode (an in-memory database, or a file system without
    /// shared memory); bothy needs a database file in WAL mode.
    #[error("the SQLite database cannot use WAL mode (journal_mode is {mode})")]
    NotWal {
        /// What `PRAGMA journal_mode` reported.
        mode: String,
    },
    /// A migration failed or the applied migrations do not match the binary
    /// (changed, or newer than this binary). A failed migration is rolled back.
    #[error("database migration failed")]
    Migrate(#[source] sqlx::migrate::MigrateError),
    /// A statement failed.
    #[error("database query failed")]
    Query(#[source] sqlx::Error),
    /// A unique (or primary key) constraint was violated, on either engine.
    #[error("a unique constraint of the database was violated")]
    Conflict(#[source] sqlx::Error),
    /// The database could not take the work now: SQLite busy or locked after
    /// `busy_timeout`, a PostgreSQL serialization failure, deadlock or lock
    /// timeout, or no pooled connection within the acquire timeout. Trying the
    /// whole unit of work again may succeed.
    #[error("the database is busy; the unit of work may be tried again")]
    Busy(#[source] sqlx::Error),
    /// The pool was closed ([`Db::close`]).
    #[error("the database pool is closed")]
    Closed,
    /// A stored value has the wrong type or form.
    #[error("the stored value of column {column} cannot be read")]
    Decode {
        /// The column.
        column: &'static str,
    },
    /// The OS random source failed while creating an ID.
    #[error(transparent)]
    Random(#[from] bothy_proto::ids::RandomError),
}

impl From<sqlx::Error> for DbError {
    /// Classifies a driver error portably: unique violations become
    /// [`DbError::Conflict`], lock contention [`DbError::Busy`].
    fn from(error: sqlx::Error) -> Self {
        match &error {
            sqlx::Error::Database(db) if db.is_unique_violation() => DbError::Conflict(error),
            sqlx::Error::Database(db) if is_busy(db.as_ref()) => DbError::Busy(error),
            sqlx::Error::PoolTimedOut => DbError::Busy(error),
            sqlx::Error::PoolClosed => DbError::Closed,
            _ => DbError::Query(error),
        }
    }
}

/// Lock contention, by engine: the Any driver hands through the backend's error.
fn is_busy(error: &dyn DatabaseError) -> bool {
    let Some(code) = error.code() else {
        return false;
    };
    if error
        .try_downcast_ref::<sqlx::sqlite::SqliteError>()
        .is_some()
    {
        // Extended result codes keep the primary code in the low byte:
        // SQLITE_BUSY (5: BUSY, BUSY_SNAPSHOT, BUSY_RECOVERY, ...) and SQLITE_LOCKED (6).
        return code
            .parse::<i32>()
            .is_ok_and(|code| matches!(code & 0xff, 5 | 6));
    }
    // SQLSTATE serialization_failure, deadlock_detected, lock_not_available.
    matches!(code.as_ref(), "40001" | "40P01" | "55P03")
}

/// Pool and engine settings (the configuration module fills them in).
#[derive(Debug, Clone)]
pub struct DbOptions {
    /// Largest number of pooled connections.
    pub max_connections: u32,
    /// How long a caller waits for a pooled connection before [`DbError::Busy`].
    pub acquire_timeout: Duration,
    /// SQLite `busy_timeout`: how long a statement waits for a lock held by
    /// another connection (another process, or the log tail's reads during a
    /// checkpoint) before `SQLITE_BUSY`.
    pub sqlite_busy_timeout: Duration,
    /// Buffer of the in-process channel of ephemeral events; a subscriber that
    /// falls further behind loses the oldest ones (they are live-only by nature).
    pub ephemeral_capacity: usize,
}

impl Default for DbOptions {
    fn default() -> Self {
        DbOptions {
            max_connections: 8,
            acquire_timeout: Duration::from_secs(10),
            sqlite_busy_timeout: Duration::from_secs(5),
            ephemeral_capacity: 1024,
        }
    }
}

/// The database handle: cheap to clone, shared by every part of the server.
#[derive(Clone)]
pub struct Db {
    inner: Arc<Inner>,
}

struct Inner {
    pool: AnyPool,
    engine: Engine,
    /// The URL as given; the log tail opens its PostgreSQL LISTEN connection with
    /// it. Never logged, never in `Debug` (it may hold a password).
    url: String,
    /// SQLite only: one unit of work at a time per process (module docs).
    writer_gate: Arc<Semaphore>,
    /// Bumped after every commit that wrote events: the in-process wake-up of
    /// the log tail. A watch, not a `Notify`, so that every tail sees it and a
    /// wake-up between two reads of the tail is never lost.
    commits: watch::Sender<u64>,
    /// Ephemeral events: live in this process only, never stored.
    ephemeral: broadcast::Sender<Arc<EphemeralEvent>>,
}

impl fmt::Debug for Db {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Db")
            .field("engine", &self.inner.engine)
            .finish_non_exhaustive()
    }
}

impl Db {
    /// Connects with [`DbOptions::default`].
    pub async fn connect(url: &str) -> Result<Db, DbError> {
        Db::connect_with(url, &DbOptions::default()).await
    }

    /// Connects to the database of `url` (engine from the scheme). SQLite: the
    /// file is created if missing and put into WAL mode. Does not migrate.
    pub async fn connect_with(url: &str, options: &DbOptions) -> Result<Db, DbError> {
        // Idempotent (a `Once` inside sqlx).
        sqlx::any::install_default_drivers();
        let engine = Engine::from_url(url)?;
        let url = match engine {
            Engine::Sqlite => sqlite_url(url),
            Engine::Postgres => url.to_owned(),
        };
        let connect_error = |source| DbError::Connect { engine, source };
        if engine == Engine::Sqlite {
            ensure_wal(&url).await?;
        }

        let busy_timeout_ms = millis(options.sqlite_busy_timeout);
        let pool = AnyPoolOptions::new()
            .max_connections(options.max_connections.max(1))
            .acquire_timeout(options.acquire_timeout)
            .after_connect(move |conn, _meta| {
                Box::pin(async move {
                    if engine == Engine::Sqlite {
                        // Per connection: neither setting is stored in the file.
                        conn.execute(format!("PRAGMA busy_timeout = {busy_timeout_ms}").as_str())
                            .await?;
                        conn.execute("PRAGMA foreign_keys = ON").await?;
                    }
                    Ok(())
                })
            })
            .connect(&url)
            .await
            .map_err(connect_error)?;

        let (commits, _) = watch::channel(0);
        let (ephemeral, _) = broadcast::channel(options.ephemeral_capacity.max(1));
        Ok(Db {
            inner: Arc::new(Inner {
                pool,
                engine,
                url,
                writer_gate: Arc::new(Semaphore::new(1)),
                commits,
                ephemeral,
            }),
        })
    }

    /// The engine.
    pub fn engine(&self) -> Engine {
        self.inner.engine
    }

    /// The pool, for reads outside a unit of work. Writes go through
    /// [`Db::begin`], so that audit, events and after-commit actions come with them.
    pub fn pool(&self) -> &AnyPool {
        &self.inner.pool
    }

    /// Applies the embedded migrations of the engine that are not applied yet
    /// (at start and by `bothy-server migrate`). See [`Db::migrate_with`].
    pub async fn migrate(&self) -> Result<(), DbError> {
        self.migrate_with(embedded_migrations(self.engine())).await
    }

    /// Applies `migrations` in version order, each in its own transaction with
    /// its bookkeeping row, so a failing one leaves the database as it was before
    /// it. Refuses when an applied migration's text changed (append-only) or the
    /// database has a migration this list lacks (a newer binary migrated it).
    /// PostgreSQL: an advisory lock keeps several nodes from migrating at once.
    pub async fn migrate_with(&self, migrations: &[MigrationFile]) -> Result<(), DbError> {
        migrate::run(&self.inner.pool, migrations).await
    }

    /// Checks that a connection answers (for `/readyz`).
    pub async fn ping(&self) -> Result<(), DbError> {
        let mut conn = self.inner.pool.acquire().await?;
        conn.ping().await?;
        Ok(())
    }

    /// Closes the pool: waits for connections in use to come back, then closes
    /// them. Later calls fail with [`DbError::Closed`].
    pub async fn close(&self) {
        self.inner.pool.close().await;
    }

    /// Starts a unit of work at `now_ms` (the injected clock): the time of its
    /// audit and event rows and of their IDs. One unit of work per task at a
    /// time: on SQLite a second `begin` in the same task waits for the first.
    pub async fn begin(&self, now_ms: UnixMillis) -> Result<UnitOfWork, DbError> {
        let gate = match self.engine() {
            Engine::Sqlite => Some(
                Arc::clone(&self.inner.writer_gate)
                    .acquire_owned()
                    .await
                    .map_err(|_| DbError::Closed)?,
            ),
            Engine::Postgres => None,
        };
        let tx = match self.engine().begin_statement() {
            Some(statement) => self.inner.pool.begin_with(statement).await?,
            None => self.inner.pool.begin().await?,
        };
        Ok(UnitOfWork::new(self.clone(), tx, now_ms, gate))
    }

    /// Publishes an ephemeral event to the subscribers of this process now
    /// (outside a unit of work; inside one, use [`UnitOfWork::ephemeral`]).
    /// Never stored; with no subscriber it is dropped.
    pub fn publish_ephemeral(&self, event: EphemeralEvent) {
        // An error only means that nobody listens.
        let _ = self.inner.ephemeral.send(Arc::new(event));
    }

    /// A receiver of the ephemeral events published from now on.
    pub(crate) fn subscribe_ephemeral(&self) -> broadcast::Receiver<Arc<EphemeralEvent>> {
        self.inner.ephemeral.subscribe()
    }

    /// A receiver that changes after each local commit that wrote events.
    pub(crate) fn subscribe_commits(&self) -> watch::Receiver<u64> {
        self.inner.commits.subscribe()
    }

    /// Wakes the log tails of this process (after a commit).
    pub(crate) fn notify_committed(&self) {
        self.inner.commits.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// The URL, for the PostgreSQL listener. Never log it.
    pub(crate) fn url(&self) -> &str {
        &self.inner.url
    }
}

/// Adds `mode=rwc` (create the file if missing) unless the URL chooses a mode.
fn sqlite_url(url: &str) -> String {
    match url.split_once('?') {
        Some((_, query)) if query.split('&').any(|pair| pair.starts_with("mode=")) => {
            url.to_owned()
        }
        Some(_) => format!("{url}&mode=rwc"),
        None => format!("{url}?mode=rwc"),
    }
}

/// Puts the SQLite file into WAL mode, once, before the pool exists: the mode is
/// stored in the file, and changing it needs an exclusive lock that
/// `busy_timeout` does not wait for, so it must not race the pool's connections.
async fn ensure_wal(url: &str) -> Result<(), DbError> {
    let connect_error = |source| DbError::Connect {
        engine: Engine::Sqlite,
        source,
    };
    let mut conn = AnyConnection::connect(url).await.map_err(connect_error)?;
    let mut mode: String = sqlx::query_scalar("PRAGMA journal_mode")
        .fetch_one(&mut conn)
        .await?;
    if !mode.eq_ignore_ascii_case("wal") {
        mode = sqlx::query_scalar("PRAGMA journal_mode = WAL")
            .fetch_one(&mut conn)
            .await?;
    }
    // Closing only flushes; the mode is set either way.
    let _ = conn.close().await;
    if mode.eq_ignore_ascii_case("wal") {
        Ok(())
    } else {
        Err(DbError::NotWal { mode })
    }
}

/// Reads a boolean portably: `BOOLEAN` on PostgreSQL, `INTEGER` 0/1 on SQLite.
pub fn get_bool(row: &AnyRow, column: &'static str) -> Result<bool, DbError> {
    if let Ok(value) = row.try_get::<bool, _>(column) {
        return Ok(value);
    }
    match row.try_get::<i64, _>(column) {
        Ok(0) => Ok(false),
        Ok(1) => Ok(true),
        _ => Err(DbError::Decode { column }),
    }
}

/// Reads a `TEXT` UUID column in the strict hyphenated form.
pub fn get_uuid(row: &AnyRow, column: &'static str) -> Result<Uuid, DbError> {
    let text: String = row
        .try_get(column)
        .map_err(|_| DbError::Decode { column })?;
    bothy_proto::ids::parse_uuid(&text).map_err(|_| DbError::Decode { column })
}

/// Reads a nullable `TEXT` UUID column.
pub fn get_opt_uuid(row: &AnyRow, column: &'static str) -> Result<Option<Uuid>, DbError> {
    let text: Option<String> = row
        .try_get(column)
        .map_err(|_| DbError::Decode { column })?;
    text.map(|text| bothy_proto::ids::parse_uuid(&text).map_err(|_| DbError::Decode { column }))
        .transpose()
}

/// The text form of an ID in the database: hyphenated, lower case.
pub fn id_text(id: &Uuid) -> String {
    id.hyphenated().to_string()
}

/// A new UUIDv7 at `now_ms` (a time before 1970 counts as 1970).
pub fn new_id(now_ms: UnixMillis) -> Result<Uuid, DbError> {
    Ok(bothy_proto::ids::uuid_v7(
        u64::try_from(now_ms).unwrap_or(0),
    )?)
}
