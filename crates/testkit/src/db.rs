//! Real databases of both engines, and a macro that runs a test once per
//! engine.
//!
//! ```ignore
//! use bothy_testkit::{TestDb, both_engines};
//!
//! async fn commit_works(engine: Engine) {
//!     let t = TestDb::new(engine).await; // migrated
//!     let mut uow = t.db.begin(1_000).await.unwrap();
//!     // ...
//! }
//! both_engines!(commit_works); // -> sqlite::commit_works, postgres::commit_works
//! ```
//!
//! - [`TestDb::sqlite`]: a database file in a fresh temporary directory, removed
//!   with it.
//! - [`TestDb::postgres`]: a fresh database `bothy_test_<uuid-simple>` on
//!   `postgres://postgres@127.0.0.1:5432/postgres` (override the server with
//!   `TEST_POSTGRES_URL`), dropped `WITH (FORCE)` when the value is dropped,
//!   also when the test panics. PostgreSQL unreachable is a failure, never a skip.

use std::time::Duration;

use bothy_server::db::{Db, DbOptions, Engine};
use sqlx::Connection;

/// The server the PostgreSQL tests create their databases on.
pub const DEFAULT_POSTGRES_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// A database of one engine that lives as long as this value.
#[derive(Debug)]
pub struct TestDb {
    /// The handle (migrated unless made with [`TestDb::fresh`]).
    pub db: Db,
    /// Its engine.
    pub engine: Engine,
    url: String,
    // Dropped after `db` (fields drop in order): the pool lets go first.
    _guard: Guard,
}

#[derive(Debug)]
enum Guard {
    Sqlite {
        _dir: tempfile::TempDir,
    },
    Postgres {
        _database: DropDatabase,
    },
    /// A handle of [`TestDb::share`]: the owner drops the database.
    Shared,
}

impl TestDb {
    /// A migrated SQLite database in a temporary file.
    pub async fn sqlite() -> TestDb {
        TestDb::new(Engine::Sqlite).await
    }

    /// A migrated, fresh PostgreSQL database.
    pub async fn postgres() -> TestDb {
        TestDb::new(Engine::Postgres).await
    }

    /// A migrated database of `engine`.
    pub async fn new(engine: Engine) -> TestDb {
        let t = TestDb::fresh(engine).await;
        t.db.migrate().await.expect("migrate the test database");
        t
    }

    /// An empty database of `engine`, not migrated.
    pub async fn fresh(engine: Engine) -> TestDb {
        TestDb::fresh_with(engine, &DbOptions::default()).await
    }

    /// An empty database of `engine` with these pool options, not migrated.
    pub async fn fresh_with(engine: Engine, options: &DbOptions) -> TestDb {
        let (url, guard) = match engine {
            Engine::Sqlite => {
                let dir = tempfile::tempdir().expect("temporary directory");
                let url = format!("sqlite://{}", dir.path().join("bothy.db").display());
                (url, Guard::Sqlite { _dir: dir })
            }
            Engine::Postgres => {
                let guard = DropDatabase::create().await;
                (guard.url.clone(), Guard::Postgres { _database: guard })
            }
        };
        let db = Db::connect_with(&url, options)
            .await
            .unwrap_or_else(|e| panic!("connect to the {engine} test database: {e:?}"));
        TestDb {
            db,
            engine,
            url,
            _guard: guard,
        }
    }

    /// The URL of the database.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A second, independent handle on the same database: another pool, as
    /// another process (or node) would have.
    pub async fn connect_again(&self) -> Db {
        Db::connect(&self.url)
            .await
            .expect("connect a second handle")
    }

    /// Another [`TestDb`] on the same database that does not drop it (a
    /// second server node of a cluster test); the owner must outlive it.
    pub async fn share(&self) -> TestDb {
        TestDb {
            db: self.connect_again().await,
            engine: self.engine,
            url: self.url.clone(),
            _guard: Guard::Shared,
        }
    }

    /// The number of rows of `table` (a name written in the test).
    pub async fn count(&self, table: &str) -> i64 {
        sqlx::query_scalar::<_, i64>(&format!("SELECT COUNT(*) FROM {table}"))
            .fetch_one(self.db.pool())
            .await
            .unwrap_or_else(|e| panic!("count {table}: {e:?}"))
    }
}

/// The URL of the PostgreSQL server of the tests.
pub fn postgres_admin_url() -> String {
    std::env::var("TEST_POSTGRES_URL").unwrap_or_else(|_| DEFAULT_POSTGRES_URL.to_owned())
}

/// `url` with its database replaced by `database` (query kept).
pub fn with_database(url: &str, database: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let authority_start = base.find("://").map_or(0, |i| i + 3);
    let server = match base[authority_start..].find('/') {
        Some(slash) => &base[..authority_start + slash],
        None => base,
    };
    match query {
        Some(query) => format!("{server}/{database}?{query}"),
        None => format!("{server}/{database}"),
    }
}

/// The server part of a URL without user and password, for messages.
pub fn redacted(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let host = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
    host.split(['/', '?']).next().unwrap_or_default().to_owned()
}

/// A PostgreSQL test database, dropped with this value.
#[derive(Debug)]
struct DropDatabase {
    admin_url: String,
    name: String,
    url: String,
}

impl DropDatabase {
    async fn create() -> DropDatabase {
        let admin_url = postgres_admin_url();
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let id = bothy_proto::ids::uuid_v7(now_ms).expect("random source");
        let name = format!("bothy_test_{}", id.simple());
        let mut admin = connect_admin(&admin_url).await;
        // The name is ours (hex digits), so quoting it is enough.
        sqlx::query(&format!("CREATE DATABASE \"{name}\""))
            .execute(&mut admin)
            .await
            .unwrap_or_else(|e| panic!("CREATE DATABASE on {}: {e}", redacted(&admin_url)));
        let _ = admin.close().await;
        let url = with_database(&admin_url, &name);
        DropDatabase {
            admin_url,
            name,
            url,
        }
    }
}

async fn connect_admin(admin_url: &str) -> sqlx::PgConnection {
    match tokio::time::timeout(
        Duration::from_secs(10),
        sqlx::PgConnection::connect(admin_url),
    )
    .await
    {
        Ok(Ok(conn)) => conn,
        Ok(Err(e)) => panic!(
            "PostgreSQL is not reachable at {} ({e}); the PostgreSQL tests need a running \
             server (set TEST_POSTGRES_URL to use another one)",
            redacted(admin_url)
        ),
        Err(_) => panic!(
            "PostgreSQL at {} did not answer within 10 s; the PostgreSQL tests need a running \
             server (set TEST_POSTGRES_URL to use another one)",
            redacted(admin_url)
        ),
    }
}

impl Drop for DropDatabase {
    fn drop(&mut self) {
        // Drop runs inside the test's runtime (or while a panic unwinds), where
        // we cannot block on async work: a thread with its own runtime runs the
        // DROP. FORCE ends the connections the test's pools still hold.
        let admin_url = self.admin_url.clone();
        let name = self.name.clone();
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            runtime.block_on(async {
                let mut admin = sqlx::PgConnection::connect(&admin_url)
                    .await
                    .map_err(|e| e.to_string())?;
                sqlx::query(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"))
                    .execute(&mut admin)
                    .await
                    .map_err(|e| e.to_string())?;
                let _ = admin.close().await;
                Ok::<(), String>(())
            })
        })
        .join();
        match dropped {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("could not drop test database {}: {e}", self.name),
            Err(_) => eprintln!(
                "could not drop test database {}: the thread panicked",
                self.name
            ),
        }
    }
}

/// Runs each named `async fn(Engine)` once per engine: `sqlite::<name>` and
/// `postgres::<name>`, each on a multi-threaded runtime with 2 workers.
#[macro_export]
macro_rules! both_engines {
    ($($name:ident),+ $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::Engine::Sqlite).await;
                }
            )+
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::Engine::Postgres).await;
                }
            )+
        }
    };
}
