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
//! # A database that cannot write (docs/decisions.md D-352)
//! Errors that say the database cannot take the work now — SQLite read-only,
//! full, I/O error or unable to open; PostgreSQL `read_only_sql_transaction`
//! (25006), insufficient resources (53), operator intervention (57P) and
//! connection exceptions (08); a lost connection — are
//! [`DbError::Unavailable`], which the API answers with `503 unavailable`,
//! never 500. A connection that opened while the database could not write
//! keeps that state for its life (SQLite opens the file read-only when it
//! cannot open it for writing; a PostgreSQL session takes
//! `default_transaction_read_only` or recovery at its start), so the pool
//! retires such connections: every connection opened before the moment of
//! [`Retirement::retire_now`] is closed at its next release or acquire.
//! Retired are all connections when a unit of work cannot begin for such a
//! reason (and the begin is tried once more on a fresh connection; on SQLite
//! the begin includes a write that changes no row, because `BEGIN IMMEDIATE`
//! itself succeeds on a read-only connection), and a PostgreSQL session
//! found read-only at its start, after its first use. So
//! once the database writes again, every write does, without a restart.
//! [`Db::probe_write`] is the write probe of `/readyz`. Error messages carry
//! the driver's cause ([`cause`]) without values or the URL.
//!
//! # Signals between nodes (spec 24 section 9)
//! A signal is a short text for the live connections of every api process
//! (the terminal module encodes and decodes it). With
//! [`DbOptions::signals_over_notify`] on PostgreSQL (`cluster.mode: multi`) a
//! signal staged in a unit of work ([`UnitOfWork::signal`]) is a `NOTIFY` on
//! [`SIGNAL_CHANNEL`] inside its transaction, which PostgreSQL delivers to
//! every listener, the sender's included, only after the commit and never
//! after a rollback; one node (`cluster.mode: single`) hands it to the local
//! transport ([`Db::subscribe_signals`]) after the commit instead and sends no
//! `NOTIFY`. [`Db::send_signal`] sends one outside a unit of work.
//!
//! # Layout
//! - `migrate`: the embedded migrations and their runner.
//! - `records`: the audit and event rows a commit writes ([`AuditRow`], the
//!   event log's insert, lock and `NOTIFY`).
//! - `uow`: [`UnitOfWork`].

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::error::DatabaseError;
use sqlx::pool::PoolConnectionMetadata;
use sqlx::{AnyConnection, AnyPool, Connection, Executor, Row};
use tokio::sync::{Semaphore, broadcast, watch};
use uuid::Uuid;

use crate::clock::{UnixMillis, millis};
use crate::event_types::EphemeralEvent;

pub mod idempotency;
mod migrate;
mod records;
mod uow;

pub use migrate::{MigrationFile, embedded_migrations};
pub use records::{AuditRow, EVENTS_LOCK_KEY, NOTIFY_CHANNEL};
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
    #[error("cannot connect to the {engine} database: {}", cause(source))]
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
    #[error("database query failed: {}", cause(.0))]
    Query(#[source] sqlx::Error),
    /// A unique (or primary key) constraint was violated, on either engine.
    #[error("a unique constraint of the database was violated: {}", cause(.0))]
    Conflict(#[source] sqlx::Error),
    /// The database could not take the work now: SQLite busy or locked after
    /// `busy_timeout`, a PostgreSQL serialization failure, deadlock or lock
    /// timeout, or no pooled connection within the acquire timeout. Trying the
    /// whole unit of work again may succeed.
    #[error(
        "the database is busy; the unit of work may be tried again: {}",
        cause(.0)
    )]
    Busy(#[source] sqlx::Error),
    /// The database cannot take the work now for a reason outside the
    /// statement: it cannot write (read-only, full, an I/O error), it is shut
    /// down or out of resources, or the connection was lost (module docs).
    /// `503 unavailable`; the same work may succeed later.
    #[error("the database cannot take the work now: {}", cause(.0))]
    Unavailable(#[source] sqlx::Error),
    /// The pool was closed ([`Db::close`]).
    #[error("the database pool is closed")]
    Closed,
    /// The write probe failed within the last second or did not finish in
    /// time ([`Db::probe_write`]).
    #[error("the database did not take the write probe")]
    NotWritable,
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

impl DbError {
    /// Whether the same work may succeed later without a change of its own
    /// (`503 unavailable`): busy, unavailable, or the pool closed at shutdown.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            DbError::Busy(_) | DbError::Unavailable(_) | DbError::Closed | DbError::NotWritable
        )
    }
}

impl From<sqlx::Error> for DbError {
    /// Classifies a driver error portably: unique violations become
    /// [`DbError::Conflict`], lock contention [`DbError::Busy`], a database
    /// that cannot take the work [`DbError::Unavailable`].
    fn from(error: sqlx::Error) -> Self {
        match &error {
            sqlx::Error::Database(db) if db.is_unique_violation() => DbError::Conflict(error),
            sqlx::Error::Database(db) if is_busy(db.as_ref()) => DbError::Busy(error),
            sqlx::Error::PoolTimedOut => DbError::Busy(error),
            sqlx::Error::PoolClosed => DbError::Closed,
            _ if is_unavailable(&error) => DbError::Unavailable(error),
            _ => DbError::Query(error),
        }
    }
}

/// Whether a driver error says that the database cannot take the work now
/// (module docs), by engine.
fn is_unavailable(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Database(db) => {
            let Some(code) = db.code() else {
                return false;
            };
            if db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some() {
                // Primary result codes: SQLITE_PERM (3), SQLITE_READONLY (8),
                // SQLITE_IOERR (10), SQLITE_FULL (13), SQLITE_CANTOPEN (14).
                return code
                    .parse::<i32>()
                    .is_ok_and(|code| matches!(code & 0xff, 3 | 8 | 10 | 13 | 14));
            }
            code == "25006"
                || code.starts_with("53")
                || code.starts_with("57P")
                || code.starts_with("08")
        }
        sqlx::Error::Io(_) | sqlx::Error::Tls(_) | sqlx::Error::WorkerCrashed => true,
        _ => false,
    }
}

/// Whether `error` or one of its sources is a database error that another
/// try may get past (`503 unavailable` rather than 500): a [`DbError`] that
/// [`DbError::is_transient`], or a driver error of the same kinds (a
/// `#[error(transparent)]` wrapper hands on the driver's error as the source).
pub fn is_transient_in_chain(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(error) = next {
        if let Some(db) = error.downcast_ref::<DbError>() {
            return db.is_transient();
        }
        if let Some(driver) = error.downcast_ref::<sqlx::Error>() {
            return matches!(driver, sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed)
                || matches!(driver, sqlx::Error::Database(db) if is_busy(db.as_ref()))
                || is_unavailable(driver);
        }
        next = error.source();
    }
    false
}

/// A driver error for messages and logs: what happened and the database's
/// code and message, never a parameter value or the URL. PostgreSQL's data
/// exceptions (class 22) can quote the value, so they show their code only;
/// configuration errors (a URL that does not parse) show no detail.
pub fn cause(error: &sqlx::Error) -> Cause<'_> {
    Cause(error)
}

/// See [`cause`].
#[derive(Debug)]
pub struct Cause<'a>(&'a sqlx::Error);

impl fmt::Display for Cause<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            sqlx::Error::Database(db) => {
                let code = db.code().unwrap_or_default();
                if code.starts_with("22")
                    && db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_none()
                {
                    write!(f, "a data exception (code {code})")
                } else {
                    write!(f, "{} (code {code})", db.message())
                }
            }
            sqlx::Error::Configuration(_) => f.write_str("the database URL or options are invalid"),
            sqlx::Error::ColumnDecode { index, .. } => {
                write!(f, "a stored value of column {index} cannot be decoded")
            }
            sqlx::Error::Decode(_) => f.write_str("a stored value cannot be decoded"),
            sqlx::Error::Io(error) => write!(f, "I/O: {error}"),
            sqlx::Error::Tls(error) => write!(f, "TLS: {error}"),
            other => write!(f, "{other}"),
        }
    }
}

/// An error and its sources as one line (`a: b: c`) for the log; a source
/// whose text the line holds already is left out, and a driver error is
/// written by [`cause`] and ends the line (its own sources are the
/// database's message again).
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut line = error.to_string();
    let mut next = error.source();
    while let Some(source) = next {
        let text = match source.downcast_ref::<sqlx::Error>() {
            Some(driver) => cause(driver).to_string(),
            None => source.to_string(),
        };
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        if source.downcast_ref::<sqlx::Error>().is_some() {
            break;
        }
        next = source.source();
    }
    line
}

/// See [`Retirement::retire_opening`].
const OPENING_MARGIN_MS: u64 = 5_000;

/// Which pooled connections are to be closed instead of used again: those
/// opened before the last [`Retirement::retire_now`] (module docs).
#[derive(Debug)]
struct Retirement {
    base: Instant,
    /// Milliseconds since `base`; connections opened before are retired.
    before_ms: AtomicU64,
}

impl Retirement {
    fn new() -> Retirement {
        Retirement {
            base: Instant::now(),
            before_ms: AtomicU64::new(0),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Every connection open now is closed at its next release or acquire.
    fn retire_now(&self) {
        // One millisecond ahead: a connection opened in this millisecond
        // (the one that found the fault) goes too.
        self.before_ms
            .fetch_max(self.now_ms().saturating_add(1), Ordering::SeqCst);
    }

    /// [`Retirement::retire_now`] from inside `after_connect`, for the
    /// connection being opened as well: sqlx starts a connection's age only
    /// once that callback has returned, which on a loaded machine can be
    /// later than the millisecond of `retire_now`. Connections opened in the
    /// next [`OPENING_MARGIN_MS`] go too; for a writable one that costs one
    /// reconnect, while a read-only one that escaped would fail every write
    /// for its life.
    fn retire_opening(&self) {
        self.before_ms.fetch_max(
            self.now_ms().saturating_add(OPENING_MARGIN_MS),
            Ordering::SeqCst,
        );
    }

    fn is_retired(&self, meta: &PoolConnectionMetadata) -> bool {
        let age = u64::try_from(meta.age.as_millis()).unwrap_or(u64::MAX);
        let opened = self.now_ms().saturating_sub(age);
        opened < self.before_ms.load(Ordering::SeqCst)
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

/// How long the write probe of `/readyz` may take.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a write probe's answer is reused.
const PROBE_CACHE: Duration = Duration::from_secs(1);

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
    /// `cluster.mode: multi`: signals travel as `NOTIFY` on [`SIGNAL_CHANNEL`]
    /// (PostgreSQL only; ignored on SQLite, which the configuration refuses
    /// with several nodes). Off: the local transport of this process.
    pub signals_over_notify: bool,
}

/// The PostgreSQL channel of the signals between nodes (spec 24 section 9).
pub const SIGNAL_CHANNEL: &str = "ephemeral";

/// The largest payload PostgreSQL accepts for `NOTIFY` is 8000 bytes; a signal
/// is far below (about 120 bytes), anything longer is a programming error.
pub const SIGNAL_MAX_BYTES: usize = 7999;

impl Default for DbOptions {
    fn default() -> Self {
        DbOptions {
            max_connections: 8,
            acquire_timeout: Duration::from_secs(10),
            sqlite_busy_timeout: Duration::from_secs(5),
            ephemeral_capacity: 1024,
            signals_over_notify: false,
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
    /// Connections to close instead of using again (module docs).
    retirement: Arc<Retirement>,
    /// The last readiness answer and when it was found ([`Db::probe_write`]).
    probe: tokio::sync::Mutex<Option<(Instant, bool)>>,
    /// Bumped after every commit that wrote events: the in-process wake-up of
    /// the log tail. A watch, not a `Notify`, so that every tail sees it and a
    /// wake-up between two reads of the tail is never lost.
    commits: watch::Sender<u64>,
    /// Ephemeral events: live in this process only, never stored.
    ephemeral: broadcast::Sender<Arc<EphemeralEvent>>,
    /// Signals go out as `NOTIFY` (module docs).
    signals_over_notify: bool,
    /// The local transport of the signals (one node).
    signals: broadcast::Sender<Arc<str>>,
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
        let retirement = Arc::new(Retirement::new());
        let at_connect = Arc::clone(&retirement);
        let at_acquire = Arc::clone(&retirement);
        let at_release = Arc::clone(&retirement);
        let pool = AnyPoolOptions::new()
            .max_connections(options.max_connections.max(1))
            .acquire_timeout(options.acquire_timeout)
            .after_connect(move |conn, _meta| {
                let retirement = Arc::clone(&at_connect);
                Box::pin(async move {
                    match engine {
                        Engine::Sqlite => {
                            // Per connection: neither setting is stored in the file.
                            conn.execute(
                                format!("PRAGMA busy_timeout = {busy_timeout_ms}").as_str(),
                            )
                            .await?;
                            conn.execute("PRAGMA foreign_keys = ON").await?;
                        }
                        Engine::Postgres => {
                            // A session that starts read-only stays so
                            // (default_transaction_read_only, recovery): it
                            // serves this one use and is closed after it.
                            let read_only: String = sqlx::query_scalar(
                                "SELECT current_setting('transaction_read_only')",
                            )
                            .fetch_one(&mut *conn)
                            .await?;
                            if read_only == "on" {
                                tracing::warn!(
                                    "a new PostgreSQL session is read-only; it is closed after \
                                     its first use"
                                );
                                retirement.retire_opening();
                            }
                        }
                    }
                    Ok(())
                })
            })
            .before_acquire(move |_conn, meta| {
                let retired = at_acquire.is_retired(&meta);
                Box::pin(async move { Ok(!retired) })
            })
            .after_release(move |_conn, meta| {
                let retired = at_release.is_retired(&meta);
                Box::pin(async move { Ok(!retired) })
            })
            .connect(&url)
            .await
            .map_err(connect_error)?;

        let (commits, _) = watch::channel(0);
        let (ephemeral, _) = broadcast::channel(options.ephemeral_capacity.max(1));
        let (signals, _) = broadcast::channel(options.ephemeral_capacity.max(1));
        Ok(Db {
            inner: Arc::new(Inner {
                pool,
                engine,
                url,
                writer_gate: Arc::new(Semaphore::new(1)),
                retirement,
                probe: tokio::sync::Mutex::new(None),
                commits,
                ephemeral,
                signals_over_notify: options.signals_over_notify && engine == Engine::Postgres,
                signals,
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

    /// Checks that a connection answers.
    pub async fn ping(&self) -> Result<(), DbError> {
        let mut conn = self.inner.pool.acquire().await?;
        conn.ping().await?;
        Ok(())
    }

    /// The write probe of `/readyz`: the one row of `readiness` updated in a
    /// unit of work, within [`PROBE_TIMEOUT`]. Answers from the last second
    /// come from memory, so a flood of readiness checks writes once a second
    /// at most; probes run one at a time. A closed pool is never ready.
    pub async fn probe_write(&self, now_ms: UnixMillis) -> Result<(), DbError> {
        if self.inner.pool.is_closed() {
            return Err(DbError::Closed);
        }
        let mut last = self.inner.probe.lock().await;
        if let Some((at, ready)) = *last {
            if at.elapsed() < PROBE_CACHE {
                return if ready {
                    Ok(())
                } else {
                    Err(DbError::NotWritable)
                };
            }
        }
        let probe = async {
            let mut uow = self.begin(now_ms).await?;
            sqlx::query("UPDATE readiness SET checked_at = $1 WHERE id = 1")
                .bind(now_ms)
                .execute(uow.conn())
                .await?;
            uow.commit().await.map(|_| ())
        };
        let result = match tokio::time::timeout(PROBE_TIMEOUT, probe).await {
            Ok(result) => result,
            Err(_) => Err(DbError::NotWritable),
        };
        *last = Some((Instant::now(), result.is_ok()));
        result
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
        let tx = match self.begin_transaction().await {
            Err(DbError::Unavailable(error)) => {
                // The connection may be one that opened while the database
                // could not write (SQLite fails `BEGIN IMMEDIATE` on it): every
                // connection open now is retired, and a fresh one tries once.
                tracing::warn!(
                    error = %cause(&error),
                    "a unit of work cannot begin; retrying once on a fresh connection"
                );
                self.retire_connections();
                let retried = self.begin_transaction().await;
                if matches!(retried, Err(DbError::Unavailable(_))) {
                    self.retire_connections();
                }
                retried?
            }
            other => other?,
        };
        Ok(UnitOfWork::new(self.clone(), tx, now_ms, gate))
    }

    /// Retires every connection open now: each is closed at its next
    /// release or acquire instead of being used again (module docs). A unit
    /// of work that cannot begin does this; so does a test that takes the
    /// database's writes away, so that no connection opened before keeps
    /// writing.
    pub fn retire_connections(&self) {
        self.inner.retirement.retire_now();
    }

    async fn begin_transaction(&self) -> Result<sqlx::Transaction<'static, sqlx::Any>, DbError> {
        let mut tx = match self.engine().begin_statement() {
            Some(statement) => self.inner.pool.begin_with(statement).await?,
            None => self.inner.pool.begin().await?,
        };
        if self.engine() == Engine::Sqlite {
            // `BEGIN IMMEDIATE` succeeds on a connection that has the file
            // read-only; its first write fails. A write that changes no row
            // (and writes nothing to the WAL) finds that out here, where the
            // begin can still be tried on a fresh connection. A database
            // without the table (not migrated yet) skips the check.
            let check = sqlx::query("UPDATE readiness SET checked_at = checked_at WHERE 0")
                .execute(&mut *tx)
                .await;
            if let Err(error) = check {
                let error = DbError::from(error);
                if matches!(error, DbError::Unavailable(_)) {
                    return Err(error);
                }
            }
        }
        Ok(tx)
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

    /// Whether signals travel as `NOTIFY` (several nodes) rather than over
    /// the local transport of this process.
    pub fn signals_over_notify(&self) -> bool {
        self.inner.signals_over_notify
    }

    /// Sends a signal outside a unit of work (module docs): a `NOTIFY` now
    /// with several nodes, else the local transport.
    pub async fn send_signal(&self, payload: String) -> Result<(), DbError> {
        if self.inner.signals_over_notify {
            notify_signal(&mut *self.inner.pool.acquire().await?, &payload).await
        } else {
            self.publish_signal(payload);
            Ok(())
        }
    }

    /// A receiver of the signals of the local transport (one node) from now on.
    pub fn subscribe_signals(&self) -> broadcast::Receiver<Arc<str>> {
        self.inner.signals.subscribe()
    }

    /// Hands a signal to the local transport.
    pub(crate) fn publish_signal(&self, payload: String) {
        // An error only means that nobody listens.
        let _ = self.inner.signals.send(Arc::from(payload));
    }

    /// The URL, for the PostgreSQL listener. Never log it.
    pub(crate) fn url(&self) -> &str {
        &self.inner.url
    }
}

/// `NOTIFY` of one signal on [`SIGNAL_CHANNEL`] (in the caller's transaction,
/// if any).
pub(crate) async fn notify_signal(conn: &mut AnyConnection, payload: &str) -> Result<(), DbError> {
    debug_assert!(payload.len() <= SIGNAL_MAX_BYTES);
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(SIGNAL_CHANNEL)
        .bind(payload)
        .execute(conn)
        .await?;
    Ok(())
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
