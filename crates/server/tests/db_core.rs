//! The database layer on both engines: connecting, migrations, the unit of work
//! (commit, rollback, after-commit), error mapping and concurrent writers.

// The bodies run once per engine through `both_engines!`, so clippy does not see
// them as tests (only the generated wrappers are `#[test]`); unwrap is the test
// idiom here as in every `#[test]`.
#![allow(clippy::unwrap_used)]

use bothy_testkit as support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bothy_server::audit::{Actor, AuditAction, AuditEntry};
use bothy_server::db::{
    Db, DbError, DbOptions, Engine, MigrationFile, UnitOfWork, embedded_migrations, get_bool,
};
use bothy_server::events::{
    Audience, DurableEvent, EphemeralEvent, EphemeralKind, EventKind, LogTail, TailConfig,
};
use serde_json::{Map, json};
use sqlx::Row;
use sqlx::migrate::MigrateError;
use support::{TestDb, both_engines};
use uuid::Uuid;

const NOW: i64 = 1_764_000_000_000;

fn object(value: serde_json::Value) -> Map<String, serde_json::Value> {
    match value {
        serde_json::Value::Object(map) => map,
        _ => panic!("not an object"),
    }
}

fn host_event() -> DurableEvent {
    DurableEvent::new(
        EventKind::HostUpdated,
        Audience::Owners,
        object(json!({"host_id": "0192f5c4-7d3a-7b2e-9f00-1234567890ab"})),
    )
}

/// A row of data in the unit of work (the idempotency table stands in for the
/// tables of later migrations).
async fn insert_key(uow: &mut UnitOfWork, principal: &str, key: &str) -> Result<(), DbError> {
    sqlx::query(
        "INSERT INTO idempotency_keys \
         (principal_id, key, route, request_hash, response_status, response_body, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(principal)
    .bind(key)
    .bind("POST /api/v1/hosts")
    .bind("hash")
    .bind(201_i32)
    .bind("{}")
    .bind(NOW)
    .execute(uow.conn())
    .await?;
    Ok(())
}

async fn applied_migrations(db: &Db) -> Vec<(i64, Vec<u8>)> {
    sqlx::query("SELECT version, checksum FROM _sqlx_migrations ORDER BY version")
        .fetch_all(db.pool())
        .await
        .expect("read _sqlx_migrations")
        .iter()
        .map(|row| (row.get("version"), row.get("checksum")))
        .collect()
}

// ---------------------------------------------------------------- connecting

#[test]
fn engine_comes_from_the_url_scheme() {
    assert_eq!(
        Engine::from_url("sqlite:///var/lib/bothy/bothy.db").unwrap(),
        Engine::Sqlite
    );
    assert_eq!(
        Engine::from_url("sqlite://bothy.db?mode=rwc").unwrap(),
        Engine::Sqlite
    );
    assert_eq!(
        Engine::from_url("postgres://u@h/db").unwrap(),
        Engine::Postgres
    );
    assert_eq!(
        Engine::from_url("postgresql://u@h/db").unwrap(),
        Engine::Postgres
    );
    assert_eq!(
        Engine::from_url("POSTGRES://u@h/db").unwrap(),
        Engine::Postgres
    );
    for url in [
        "mysql://root:hunter2@h/db",
        "hunter2",
        "sqlite:bothy.db",
        "",
    ] {
        let error = Engine::from_url(url).unwrap_err();
        assert!(matches!(error, DbError::UnsupportedUrl), "{url}");
        assert!(!error.to_string().contains("hunter2"));
    }
}

#[tokio::test]
async fn unsupported_url_is_refused_by_connect() {
    let error = Db::connect("mysql://root:hunter2@127.0.0.1/bothy")
        .await
        .unwrap_err();
    assert!(matches!(error, DbError::UnsupportedUrl));
    assert!(!format!("{error} {error:?}").contains("hunter2"));
}

#[test]
fn test_support_rewrites_and_redacts_urls() {
    assert_eq!(
        support::with_database("postgres://postgres@127.0.0.1:5432/postgres", "x"),
        "postgres://postgres@127.0.0.1:5432/x"
    );
    assert_eq!(
        support::with_database("postgres://u:pw@h/db?sslmode=disable", "x"),
        "postgres://u:pw@h/x?sslmode=disable"
    );
    assert_eq!(
        support::with_database("postgres://h:5432", "x"),
        "postgres://h:5432/x"
    );
    assert_eq!(support::redacted("postgres://u:pw@h:5432/db?a=b"), "h:5432");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_file_is_created_in_wal_mode_with_busy_timeout_and_foreign_keys() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("new.db");
    assert!(!path.exists());
    let db = Db::connect(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    assert!(path.exists());
    let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
        .fetch_one(db.pool())
        .await
        .unwrap();
    assert_eq!(mode, "wal");
    let busy: i64 = sqlx::query_scalar("PRAGMA busy_timeout")
        .fetch_one(db.pool())
        .await
        .unwrap();
    assert_eq!(busy, 5000);
    let foreign_keys: i64 = sqlx::query_scalar("PRAGMA foreign_keys")
        .fetch_one(db.pool())
        .await
        .unwrap();
    assert_eq!(foreign_keys, 1);
    db.close().await;
}

async fn ping_and_close(engine: Engine) {
    let t = TestDb::new(engine).await;
    assert_eq!(t.db.engine(), engine);
    t.db.ping().await.unwrap();
    t.db.close().await;
    assert!(matches!(t.db.ping().await, Err(DbError::Closed)));
    assert!(matches!(t.db.begin(NOW).await, Err(DbError::Closed)));
}

async fn booleans_read_portably(engine: Engine) {
    let t = TestDb::new(engine).await;
    let column = match engine {
        Engine::Sqlite => "INTEGER",
        Engine::Postgres => "BOOLEAN",
    };
    sqlx::query(&format!(
        "CREATE TABLE flags (n BIGINT NOT NULL, v {column} NOT NULL)"
    ))
    .execute(t.db.pool())
    .await
    .unwrap();
    for (n, v) in [(1_i64, true), (2, false)] {
        sqlx::query("INSERT INTO flags (n, v) VALUES ($1, $2)")
            .bind(n)
            .bind(v)
            .execute(t.db.pool())
            .await
            .unwrap();
    }
    let rows = sqlx::query("SELECT v FROM flags ORDER BY n")
        .fetch_all(t.db.pool())
        .await
        .unwrap();
    let values: Vec<bool> = rows.iter().map(|r| get_bool(r, "v").unwrap()).collect();
    assert_eq!(values, [true, false]);
}

// ---------------------------------------------------------------- migrations

#[test]
fn embedded_migrations_are_the_files_on_disk() {
    // The binary reads no file at run time (include_str!); this pins that what
    // it carries is exactly the directory, so no new file can be left out.
    for (engine, dir) in [(Engine::Sqlite, "sqlite"), (Engine::Postgres, "postgres")] {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("migrations")
            .join(dir);
        let mut on_disk: Vec<(i64, String, String)> = std::fs::read_dir(&path)
            .unwrap()
            .map(|entry| {
                let entry = entry.unwrap();
                let name = entry.file_name().into_string().unwrap();
                let stem = name.strip_suffix(".sql").expect("only .sql files");
                let (number, description) = stem.split_once('_').expect("NNNN_description.sql");
                assert_eq!(number.len(), 4, "{name}: four digits");
                let sql = std::fs::read_to_string(entry.path()).unwrap();
                (number.parse().unwrap(), description.replace('_', " "), sql)
            })
            .collect();
        on_disk.sort();
        let embedded: Vec<(i64, String, String)> = embedded_migrations(engine)
            .iter()
            .map(|m| (m.version, m.description.to_owned(), m.sql.to_owned()))
            .collect();
        assert_eq!(embedded, on_disk, "{dir}");
        // Numbered from 1 without holes.
        for (i, m) in embedded.iter().enumerate() {
            assert_eq!(m.0, i as i64 + 1);
        }
    }
    // The engines stay in step: the same numbers and names.
    let names = |e| {
        embedded_migrations(e)
            .iter()
            .map(|m| (m.version, m.description))
            .collect::<Vec<_>>()
    };
    assert_eq!(names(Engine::Sqlite), names(Engine::Postgres));
}

async fn migrate_twice_is_a_no_op(engine: Engine) {
    let t = TestDb::fresh(engine).await;
    t.db.migrate().await.unwrap();
    let first = applied_migrations(&t.db).await;
    assert_eq!(first.len(), embedded_migrations(engine).len());
    // Data survives the second run untouched.
    let mut uow = t.db.begin(NOW).await.unwrap();
    insert_key(&mut uow, "p", "k").await.unwrap();
    uow.commit().await.unwrap();

    t.db.migrate().await.unwrap();
    assert_eq!(applied_migrations(&t.db).await, first);
    assert_eq!(t.count("idempotency_keys").await, 1);
    assert_eq!(t.count("audit").await, 0);
    assert_eq!(t.count("events").await, 0);
}

static BROKEN_SECOND: MigrationFile = MigrationFile {
    version: 2,
    description: "broken",
    // The first statement succeeds, the second fails: the first must not stay.
    sql: "CREATE TABLE half_done (x BIGINT NOT NULL);\nINSERT INTO no_such_table (x) VALUES (1);",
};

async fn failed_migration_leaves_the_database_as_before(engine: Engine) {
    let t = TestDb::fresh(engine).await;
    let first = embedded_migrations(engine)[0];
    let error =
        t.db.migrate_with(&[first, BROKEN_SECOND])
            .await
            .unwrap_err();
    assert!(
        matches!(
            error,
            DbError::Migrate(MigrateError::ExecuteMigration(_, 2))
        ),
        "{error:?}"
    );
    let applied: Vec<i64> = applied_migrations(&t.db)
        .await
        .iter()
        .map(|m| m.0)
        .collect();
    assert_eq!(applied, [1]);
    let half_done = sqlx::query("SELECT COUNT(*) FROM half_done")
        .fetch_one(t.db.pool())
        .await;
    assert!(
        half_done.is_err(),
        "the table of the failed migration stayed"
    );
    // The database still works, and the embedded list still applies.
    t.db.migrate().await.unwrap();
    t.db.ping().await.unwrap();
}

async fn changed_or_unknown_migrations_are_refused(engine: Engine) {
    let t = TestDb::new(engine).await;
    // Append-only: an applied file whose text changed is refused.
    let mut changed = embedded_migrations(engine).to_vec();
    changed[0].sql = "CREATE TABLE something_else (x BIGINT);";
    let error = t.db.migrate_with(&changed).await.unwrap_err();
    assert!(
        matches!(error, DbError::Migrate(MigrateError::VersionMismatch(1))),
        "{error:?}"
    );
    // A database migrated by a newer binary is refused by an older one.
    let embedded = embedded_migrations(engine);
    let future_version = i64::try_from(embedded.len()).unwrap() + 1;
    let newer = MigrationFile {
        version: future_version,
        description: "from the future",
        sql: "CREATE TABLE future (x BIGINT);",
    };
    let mut all = embedded.to_vec();
    all.push(newer);
    t.db.migrate_with(&all).await.unwrap();
    let error = t.db.migrate().await.unwrap_err();
    assert!(
        matches!(error, DbError::Migrate(MigrateError::VersionMissing(v)) if v == future_version),
        "{error:?}"
    );
}

// ---------------------------------------------------------------- unit of work

async fn commit_writes_data_audit_and_events_together(engine: Engine) {
    let t = TestDb::new(engine).await;
    let person = Uuid::from_u128(7);
    let mut uow = t.db.begin(NOW).await.unwrap();
    assert_eq!(uow.now_ms(), NOW);
    assert_eq!(uow.engine(), engine);
    insert_key(&mut uow, "p", "k").await.unwrap();
    uow.audit(AuditEntry::allow(
        AuditAction::HostManage,
        Actor::Person(person),
    ));
    uow.event(host_event());
    uow.event(host_event());

    // Nothing is visible to another connection before the commit.
    assert_eq!(t.count("idempotency_keys").await, 0);
    let committed = uow.commit().await.unwrap();
    assert_eq!(committed.event_positions.len(), 2);
    assert!(committed.event_positions[0] < committed.event_positions[1]);

    assert_eq!(t.count("idempotency_keys").await, 1);
    assert_eq!(t.count("audit").await, 1);
    assert_eq!(t.count("events").await, 2);
    let row = sqlx::query("SELECT at, action, actor_kind, actor_id FROM audit")
        .fetch_one(t.db.pool())
        .await
        .unwrap();
    assert_eq!(row.get::<i64, _>("at"), NOW);
    assert_eq!(row.get::<String, _>("action"), "host.manage");
    assert_eq!(row.get::<String, _>("actor_kind"), "person");
    assert_eq!(
        row.get::<String, _>("actor_id"),
        person.hyphenated().to_string()
    );
    let at: Vec<i64> = sqlx::query_scalar("SELECT at FROM events")
        .fetch_all(t.db.pool())
        .await
        .unwrap();
    assert_eq!(at, [NOW, NOW]);
}

async fn drop_without_commit_leaves_nothing_and_runs_nothing(engine: Engine) {
    let t = TestDb::new(engine).await;
    let ran = Arc::new(AtomicUsize::new(0));
    let (_stop, shutdown) = tokio::sync::watch::channel(false);
    let (tail, _task) = LogTail::start(t.db.clone(), TailConfig::default(), shutdown)
        .await
        .unwrap();
    let mut subscription = tail.subscribe_from(0);
    {
        let mut uow = t.db.begin(NOW).await.unwrap();
        insert_key(&mut uow, "p", "k").await.unwrap();
        uow.audit(AuditEntry::allow(AuditAction::HostManage, Actor::System));
        uow.event(host_event());
        uow.ephemeral(EphemeralEvent::new(
            EphemeralKind::HostPresenceChanged,
            Audience::Owners,
            Map::new(),
        ));
        let ran = Arc::clone(&ran);
        uow.after_commit(move || {
            ran.fetch_add(1, Ordering::SeqCst);
        });
        // Dropped here: an error path of a use case.
    }
    // Explicit rollback does the same.
    let mut uow = t.db.begin(NOW).await.unwrap();
    insert_key(&mut uow, "p", "k2").await.unwrap();
    let ran2 = Arc::clone(&ran);
    uow.after_commit(move || {
        ran2.fetch_add(1, Ordering::SeqCst);
    });
    uow.rollback().await.unwrap();

    // The next unit of work is not blocked by the dropped one (SQLite gate).
    let uow = tokio::time::timeout(Duration::from_secs(5), t.db.begin(NOW))
        .await
        .expect("begin after a dropped unit of work")
        .unwrap();
    drop(uow);

    assert_eq!(t.count("idempotency_keys").await, 0);
    assert_eq!(t.count("audit").await, 0);
    assert_eq!(t.count("events").await, 0);
    assert_eq!(ran.load(Ordering::SeqCst), 0);
    let nothing = tokio::time::timeout(Duration::from_millis(300), subscription.recv()).await;
    assert!(
        nothing.is_err(),
        "an event of a rolled back unit arrived: {nothing:?}"
    );
}

async fn after_commit_actions_run_only_after_the_commit(engine: Engine) {
    let t = TestDb::new(engine).await;
    let seen = Arc::new(Mutex::new(Vec::<(usize, i64)>::new()));
    let mut uow = t.db.begin(NOW).await.unwrap();
    insert_key(&mut uow, "p", "k").await.unwrap();
    for n in 0..3 {
        let seen = Arc::clone(&seen);
        let pool = t.db.pool().clone();
        uow.after_commit(move || {
            // Look from another connection: the row is there only if the
            // transaction has committed before the action runs.
            let rows = tokio::task::block_in_place(|| {
                tokio::runtime::Handle::current().block_on(async {
                    sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM idempotency_keys")
                        .fetch_one(&pool)
                        .await
                        .unwrap()
                })
            });
            seen.lock().unwrap().push((n, rows));
        });
    }
    assert!(seen.lock().unwrap().is_empty());
    uow.commit().await.unwrap();
    // In the order added, each seeing the committed row.
    assert_eq!(*seen.lock().unwrap(), [(0, 1), (1, 1), (2, 1)]);
}

async fn unique_violation_is_a_conflict(engine: Engine) {
    let t = TestDb::new(engine).await;
    let mut uow = t.db.begin(NOW).await.unwrap();
    insert_key(&mut uow, "p", "k").await.unwrap();
    uow.commit().await.unwrap();

    let ran = Arc::new(AtomicUsize::new(0));
    let mut uow = t.db.begin(NOW).await.unwrap();
    let ran2 = Arc::clone(&ran);
    uow.after_commit(move || {
        ran2.fetch_add(1, Ordering::SeqCst);
    });
    let error = insert_key(&mut uow, "p", "k").await.unwrap_err();
    assert!(matches!(error, DbError::Conflict(_)), "{error:?}");
    // The message names no value.
    assert!(!error.to_string().contains("\"k\""));
    drop(uow);
    assert_eq!(ran.load(Ordering::SeqCst), 0);

    // The same key of another principal is no conflict.
    let mut uow = t.db.begin(NOW).await.unwrap();
    insert_key(&mut uow, "q", "k").await.unwrap();
    uow.commit().await.unwrap();
    assert_eq!(t.count("idempotency_keys").await, 2);
}

/// Many units of work at once, from two independent handles (as two processes
/// would be), each reading before it writes: every one commits.
async fn concurrent_units_of_work_all_commit(engine: Engine) {
    const PER_HANDLE: usize = 40;
    let t = TestDb::new(engine).await;
    let other = t.connect_again().await;
    let mut tasks = Vec::new();
    for (h, db) in [t.db.clone(), other.clone()].into_iter().enumerate() {
        for i in 0..PER_HANDLE {
            let db = db.clone();
            tasks.push(tokio::spawn(async move {
                let mut uow = db.begin(NOW + i as i64).await?;
                // Read, then write: the pattern that fails with SQLITE_BUSY in a
                // deferred transaction.
                let before: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM idempotency_keys")
                    .fetch_one(uow.conn())
                    .await?;
                insert_key(&mut uow, &format!("p{h}"), &format!("k{i}")).await?;
                let after: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM idempotency_keys")
                    .fetch_one(uow.conn())
                    .await?;
                if db.engine() == Engine::Sqlite {
                    // One writer at a time: nobody else wrote in between.
                    assert_eq!(after, before + 1);
                } else {
                    // Read committed: others' commits may show up in between.
                    assert!(after > before);
                }
                uow.audit(AuditEntry::allow(AuditAction::HostManage, Actor::System));
                uow.event(host_event());
                uow.commit().await
            }));
        }
    }
    let mut positions = Vec::new();
    for task in tasks {
        let committed = task.await.unwrap().unwrap_or_else(|e| panic!("{e:?}"));
        positions.extend(committed.event_positions);
    }
    let total = (2 * PER_HANDLE) as i64;
    assert_eq!(t.count("idempotency_keys").await, total);
    assert_eq!(t.count("audit").await, total);
    assert_eq!(t.count("events").await, total);
    positions.sort();
    positions.dedup();
    assert_eq!(positions.len() as i64, total);
    other.close().await;
}

both_engines!(
    ping_and_close,
    booleans_read_portably,
    migrate_twice_is_a_no_op,
    failed_migration_leaves_the_database_as_before,
    changed_or_unknown_migrations_are_refused,
    commit_writes_data_audit_and_events_together,
    drop_without_commit_leaves_nothing_and_runs_nothing,
    after_commit_actions_run_only_after_the_commit,
    unique_violation_is_a_conflict,
    concurrent_units_of_work_all_commit,
);

// ---------------------------------------------------------------- SQLite only

/// Why units of work use `BEGIN IMMEDIATE`: two deferred transactions that
/// read and then write fail with `SQLITE_BUSY_SNAPSHOT` although a busy timeout
/// is set, and that error maps to `DbError::Busy`. The same interleaving with
/// units of work cannot happen: the second one's `BEGIN IMMEDIATE` waits for the
/// first to finish, then both commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_deferred_read_then_write_is_busy_but_units_of_work_wait() {
    let t = TestDb::sqlite().await;
    let a = t.connect_again().await;
    let b = t.connect_again().await;

    let mut first = a.pool().begin().await.unwrap(); // deferred
    let mut second = b.pool().begin().await.unwrap(); // deferred
    let count = "SELECT COUNT(*) FROM idempotency_keys";
    let _: i64 = sqlx::query_scalar(count)
        .fetch_one(&mut *first)
        .await
        .unwrap();
    let _: i64 = sqlx::query_scalar(count)
        .fetch_one(&mut *second)
        .await
        .unwrap();
    let insert = "INSERT INTO idempotency_keys (principal_id, key, route, request_hash, \
                  response_status, response_body, created_at) VALUES ($1, 'k', 'r', 'h', 200, '{}', 0)";
    sqlx::query(insert)
        .bind("a")
        .execute(&mut *first)
        .await
        .unwrap();
    first.commit().await.unwrap();
    let error = sqlx::query(insert)
        .bind("b")
        .execute(&mut *second)
        .await
        .unwrap_err();
    let error = DbError::from(error);
    assert!(matches!(error, DbError::Busy(_)), "{error:?}");
    drop(second);

    // Units of work on two handles (no shared in-process gate): the second waits.
    let mut uow_a = a.begin(NOW).await.unwrap();
    let _: i64 = sqlx::query_scalar(count)
        .fetch_one(uow_a.conn())
        .await
        .unwrap();
    // The second tells when it is about to begin; it counts the rows and names
    // its key after the count. With BEGIN IMMEDIATE its count can only happen
    // after the first unit committed (2 rows: it writes `k2`); a deferred
    // begin would count 1 while the first still holds its write, then fail
    // with busy or write `k1`. No fixed wait: the outcome is the proof.
    let b2 = b.clone();
    let (beginning, begun) = tokio::sync::oneshot::channel();
    let second = tokio::spawn(async move {
        let _ = beginning.send(());
        let mut uow = b2.begin(NOW).await?;
        let n: i64 = sqlx::query_scalar(count).fetch_one(uow.conn()).await?;
        insert_key(&mut uow, "b", &format!("k{n}")).await?;
        uow.commit().await
    });
    begun.await.unwrap();
    insert_key(&mut uow_a, "a", "k2").await.unwrap();
    uow_a.commit().await.unwrap();
    second.await.unwrap().unwrap();
    let seconds: String =
        sqlx::query_scalar("SELECT key FROM idempotency_keys WHERE principal_id = 'b'")
            .fetch_one(t.db.pool())
            .await
            .unwrap();
    assert_eq!(
        seconds, "k2",
        "the second unit of work read before the first committed"
    );
    assert_eq!(t.count("idempotency_keys").await, 3);
    a.close().await;
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_lock_timeout_is_busy() {
    // A writer of another handle holds the lock longer than the busy timeout.
    let options = DbOptions {
        sqlite_busy_timeout: Duration::from_millis(100),
        ..DbOptions::default()
    };
    let t = TestDb::fresh_with(Engine::Sqlite, &options).await;
    t.db.migrate().await.unwrap();
    let other = Db::connect_with(t.url(), &options).await.unwrap();
    let holder = t.db.begin(NOW).await.unwrap();
    let error = other.begin(NOW).await.unwrap_err();
    assert!(matches!(error, DbError::Busy(_)), "{error:?}");
    drop(holder);
    other.begin(NOW).await.unwrap().commit().await.unwrap();
    other.close().await;
}
