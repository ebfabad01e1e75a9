//! The migrations, embedded in the binary: numbered files per engine under
//! `crates/server/migrations/{sqlite,postgres}/NNNN_description.sql`, compiled in
//! with `include_str!` (the sqlx `migrate!` macro needs the `macros` feature, which
//! we leave out for compile time). Nothing is read from the file system at run
//! time. The files are append-only: sqlx stores a checksum of each applied one and
//! refuses to start when an applied file changed.
//!
//! A test (`tests/db_core.rs`) checks that these lists and the files on disk are
//! the same, so a new file cannot be forgotten here.

use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;

use sqlx::AnyPool;
use sqlx::error::BoxDynError;
use sqlx::migrate::{Migration, MigrationSource, MigrationType, Migrator};

use super::{DbError, Engine};

/// One migration file, as compiled in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MigrationFile {
    /// The number of the file (`0001` is 1).
    pub version: i64,
    /// The rest of the file name, underscores as spaces (what sqlx records).
    pub description: &'static str,
    /// The SQL text.
    pub sql: &'static str,
}

const SQLITE: &[MigrationFile] = &[
    MigrationFile {
        version: 1,
        description: "audit events idempotency keys",
        sql: include_str!("../../migrations/sqlite/0001_audit_events_idempotency_keys.sql"),
    },
    MigrationFile {
        version: 2,
        description: "identity",
        sql: include_str!("../../migrations/sqlite/0002_identity.sql"),
    },
    MigrationFile {
        version: 3,
        description: "webauthn",
        sql: include_str!("../../migrations/sqlite/0003_webauthn.sql"),
    },
    MigrationFile {
        version: 4,
        description: "hosts permissions",
        sql: include_str!("../../migrations/sqlite/0004_hosts_permissions.sql"),
    },
    MigrationFile {
        version: 5,
        description: "server signing keys",
        sql: include_str!("../../migrations/sqlite/0005_server_signing_keys.sql"),
    },
    MigrationFile {
        version: 6,
        description: "terminal sessions",
        sql: include_str!("../../migrations/sqlite/0006_terminal_sessions.sql"),
    },
    MigrationFile {
        version: 7,
        description: "grant expiry",
        sql: include_str!("../../migrations/sqlite/0007_grant_expiry.sql"),
    },
    MigrationFile {
        version: 8,
        description: "readiness",
        sql: include_str!("../../migrations/sqlite/0008_readiness.sql"),
    },
];

const POSTGRES: &[MigrationFile] = &[
    MigrationFile {
        version: 1,
        description: "audit events idempotency keys",
        sql: include_str!("../../migrations/postgres/0001_audit_events_idempotency_keys.sql"),
    },
    MigrationFile {
        version: 2,
        description: "identity",
        sql: include_str!("../../migrations/postgres/0002_identity.sql"),
    },
    MigrationFile {
        version: 3,
        description: "webauthn",
        sql: include_str!("../../migrations/postgres/0003_webauthn.sql"),
    },
    MigrationFile {
        version: 4,
        description: "hosts permissions",
        sql: include_str!("../../migrations/postgres/0004_hosts_permissions.sql"),
    },
    MigrationFile {
        version: 5,
        description: "server signing keys",
        sql: include_str!("../../migrations/postgres/0005_server_signing_keys.sql"),
    },
    MigrationFile {
        version: 6,
        description: "terminal sessions",
        sql: include_str!("../../migrations/postgres/0006_terminal_sessions.sql"),
    },
    MigrationFile {
        version: 7,
        description: "grant expiry",
        sql: include_str!("../../migrations/postgres/0007_grant_expiry.sql"),
    },
    MigrationFile {
        version: 8,
        description: "readiness",
        sql: include_str!("../../migrations/postgres/0008_readiness.sql"),
    },
];

/// The embedded migrations of an engine, in version order.
pub fn embedded_migrations(engine: Engine) -> &'static [MigrationFile] {
    match engine {
        Engine::Sqlite => SQLITE,
        Engine::Postgres => POSTGRES,
    }
}

/// Hands our list to sqlx's `Migrator` through its public source trait.
#[derive(Debug)]
struct Embedded(Vec<Migration>);

impl MigrationSource<'static> for Embedded {
    fn resolve(
        self,
    ) -> Pin<Box<dyn Future<Output = Result<Vec<Migration>, BoxDynError>> + Send + 'static>> {
        Box::pin(async move { Ok(self.0) })
    }
}

pub(super) async fn run(pool: &AnyPool, files: &[MigrationFile]) -> Result<(), DbError> {
    let mut migrations: Vec<Migration> = files
        .iter()
        .map(|file| {
            Migration::new(
                file.version,
                Cow::Borrowed(file.description),
                MigrationType::Simple,
                Cow::Borrowed(file.sql),
                // Each migration runs in a transaction together with its row in
                // `_sqlx_migrations`: all or nothing (both engines have
                // transactional DDL).
                false,
            )
        })
        .collect();
    migrations.sort_by_key(|m| m.version);
    let migrator = Migrator::new(Embedded(migrations))
        .await
        .map_err(DbError::Migrate)?;

    let mut conn = pool.acquire().await?;
    match migrator.run(&mut *conn).await {
        Ok(()) => Ok(()),
        Err(error) => {
            // On failure sqlx returns before releasing its session-level advisory
            // lock (PostgreSQL); closing this connection releases it instead of
            // handing a connection holding the lock back to the pool.
            let _ = conn.close().await;
            Err(DbError::Migrate(error))
        }
    }
}
