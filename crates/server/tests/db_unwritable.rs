//! A database that cannot write for a while (issue 15, item 6;
//! docs/decisions.md D-352), on both engines against the real server: while
//! it cannot write, writes are `503 unavailable` (never 500) with the cause in
//! the log and `/readyz` is 503 (`/healthz` stays 200); once it writes again,
//! every write succeeds and `/readyz` is 200, without a restart.
//!
//! How the database stops writing, as in the field:
//! - SQLite: the database file becomes immutable (`chattr +i`; root ignores
//!   file modes, not this flag). Connections the pool opens meanwhile get the
//!   file read-only, as after a `chmod` for the service user — and keep it so.
//!   The pool's idle connections are closed first, so the server opens new
//!   ones while the file is immutable.
//! - PostgreSQL: `ALTER DATABASE ... SET default_transaction_read_only = on`
//!   and the database's sessions terminated (what a failover to a replica
//!   does to the pool): new sessions are read-only for their life.
//!
//! Before the fix ~40 % of the writes after the recovery failed with 500 for
//! good (the connections opened meanwhile), and `/readyz` said ready.

#![allow(clippy::unwrap_used)] // test bodies are plain fns called by the generated #[test]s

use bothy_testkit as support;
use bothy_testkit::hosts as hosts_common;
use bothy_testkit::identity as identity_common;
use bothy_testkit::terminal as terminal_common;

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bothy_proto::codes::CloseReason;
use bothy_server::clock::Clock;
use bothy_server::db::{self, Engine};
use bothy_testkit::eventually;
use bothy_testkit::wait::try_eventually;
use hosts_common::{Person, active_host, owner_person};
use identity_common::*;
use serde_json::json;
use sqlx::{Connection, Row};
use support::both_engines;
use support::server::TestServer;
use support::ws::WAIT;
use terminal_common::host_control::HostControl;
use uuid::Uuid;

/// The way a database of the test stops and starts writing again.
enum Fault {
    /// The SQLite file and its write-ahead log, made immutable until
    /// `writable`: a connection opened before the fault (one a background
    /// task held while the idle ones were closed) writes to the log, not to
    /// the file, so the log must refuse too.
    Sqlite(Vec<String>),
    /// The PostgreSQL database's name.
    Postgres(String),
}

impl Fault {
    async fn unwritable(server: &TestServer) -> Fault {
        let url = server.db().url().to_owned();
        match server.db().engine {
            Engine::Sqlite => {
                let file = url.trim_start_matches("sqlite://").to_owned();
                let mut files = vec![file.clone()];
                let wal = format!("{file}-wal");
                if std::path::Path::new(&wal).exists() {
                    files.push(wal);
                }
                // Immutable first: every connection opened from now on opens
                // the file read-only.
                for file in &files {
                    chattr("+i", file);
                }
                // Then none opened before is used again (each could write
                // through the file it holds open): the pool closes every one,
                // idle or still being given back by a request, at its next
                // acquire or release.
                server.state.db().retire_connections();
                Fault::Sqlite(files)
            }
            Engine::Postgres => {
                let name = url.rsplit('/').next().unwrap().to_owned();
                let mut admin = sqlx::PgConnection::connect(&support::postgres_admin_url())
                    .await
                    .unwrap();
                sqlx::query(&format!(
                    "ALTER DATABASE \"{name}\" SET default_transaction_read_only = on"
                ))
                .execute(&mut admin)
                .await
                .unwrap();
                sqlx::query(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                     WHERE datname = $1 AND pid <> pg_backend_pid()",
                )
                .bind(&name)
                .execute(&mut admin)
                .await
                .unwrap();
                admin.close().await.unwrap();
                Fault::Postgres(name)
            }
        }
    }

    async fn writable(self) {
        match &self {
            Fault::Sqlite(files) => {
                for file in files {
                    chattr("-i", file);
                }
            }
            Fault::Postgres(name) => {
                let mut admin = sqlx::PgConnection::connect(&support::postgres_admin_url())
                    .await
                    .unwrap();
                sqlx::query(&format!(
                    "ALTER DATABASE \"{name}\" RESET default_transaction_read_only"
                ))
                .execute(&mut admin)
                .await
                .unwrap();
                admin.close().await.unwrap();
            }
        }
        std::mem::forget(self);
    }
}

impl Drop for Fault {
    /// A failing test leaves no immutable file behind (its directory could
    /// not be removed).
    fn drop(&mut self) {
        if let Fault::Sqlite(files) = self {
            for file in files.iter() {
                chattr("-i", file);
            }
        }
    }
}

fn chattr(flag: &str, file: &str) {
    let status = std::process::Command::new("chattr")
        .args([flag, file])
        .status()
        .expect("chattr runs");
    assert!(status.success(), "chattr {flag} {file}: {status}");
}

async fn create_token(server: &TestServer, token: &str, n: usize) -> Reply {
    post(
        server,
        "/api/v1/tokens",
        Some(token),
        json!({"kind": "agent", "name": format!("bot{n}")}),
    )
    .await
}

async fn status_of(server: &TestServer, path: &str) -> u16 {
    server
        .client
        .get(server.url(path))
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

async fn writes_fail_with_503_and_recover_without_restart(engine: Engine) {
    capture_logs();
    let server = TestServer::start(engine).await;
    let alice = owner(&server, "alice").await;
    let session = alice.login(&server, 1).await;
    assert_eq!(create_token(&server, &session.token, 0).await.status, 201);
    assert_eq!(status_of(&server, "/readyz").await, 200);

    let fault = Fault::unwritable(&server).await;
    for n in 1..=6 {
        let reply = create_token(&server, &session.token, n).await;
        assert_eq!(reply.status, 503, "write {n}: {:?}", reply.body);
        assert_eq!(reply.body["code"], "unavailable");
    }
    // The readiness answer of the last second may be reused: wait for the next.
    let running = &server;
    eventually(
        "not ready while the database cannot write",
        WAIT,
        || async move { (status_of(running, "/readyz").await == 503).then_some(()) },
    )
    .await;
    assert_eq!(status_of(&server, "/healthz").await, 200);
    let logged = logs_text();
    let cause = match engine {
        Engine::Sqlite => "readonly database",
        Engine::Postgres => "read-only transaction",
    };
    assert!(
        logged
            .lines()
            .any(|line| line.contains("request failed") && line.contains(cause)),
        "the log names the cause ({cause}):\n{logged}"
    );

    fault.writable().await;
    let ready = try_eventually(WAIT, || async move {
        (status_of(running, "/readyz").await == 200).then_some(())
    })
    .await;
    assert!(
        ready.is_some(),
        "ready again without a restart:\n{}",
        logs_text()
    );
    for n in 100..130 {
        let reply = create_token(&server, &session.token, n).await;
        assert_eq!(
            reply.status, 201,
            "write {n} after the recovery: {:?}",
            reply.body
        );
    }
    server.stop().await;
}

/// An `active` session row of `person` on the host (the relay and the
/// reconciliation do not care how a row came to be).
async fn active_session(server: &TestServer, host_id: &str, person: &Person) -> Uuid {
    let session_user_id: String = sqlx::query(
        "SELECT id FROM host_session_users WHERE host_id = $1 AND person_id = $2 \
         AND ended_at IS NULL",
    )
    .bind(host_id)
    .bind(person.id())
    .fetch_one(server.state.db().pool())
    .await
    .unwrap()
    .get("id");
    let id = bothy_proto::ids::uuid_v7(1_796_083_200_000).unwrap();
    let now = server.clock.now_ms();
    sqlx::query(
        "INSERT INTO terminal_sessions (id, host_id, person_id, login_session_id, device_id, \
             host_session_user_id, profile, state, created_at, started_at, version) \
         VALUES ($1, $2, $3, $4, $5, $6, 'shell', 'active', $7, $7, 1)",
    )
    .bind(db::id_text(&id))
    .bind(host_id)
    .bind(person.id())
    .bind(&person.session.login_session_id)
    .bind(&person.session.device_id)
    .bind(&session_user_id)
    .bind(now)
    .execute(server.state.db().pool())
    .await
    .unwrap();
    id
}

async fn close_reason(server: &TestServer, id: Uuid) -> (String, Option<String>) {
    let row = sqlx::query("SELECT state, close_reason FROM terminal_sessions WHERE id = $1")
        .bind(db::id_text(&id))
        .fetch_one(server.state.db().pool())
        .await
        .unwrap();
    (row.get("state"), row.get("close_reason"))
}

/// The host's side while the database cannot write (issue 15, item 6;
/// D-356): a heartbeat whose `last_seen_at` cannot be written keeps the
/// control connection (no 4000); a `session.ended` the server accepted but
/// could not record ends the connection with 4000, and the session ends as
/// the host reported it (`process_exited`) at the host's next login, not as
/// `host_restarted` — the host counts that end as reported and names the
/// session no more (6.2 live_sessions). A session the host does not name
/// and never reported ends `host_restarted`, as 6.2 says.
async fn a_host_report_during_the_fault_is_recorded_as_reported(engine: Engine) {
    capture_logs();
    let server = TestServer::start(engine).await;
    let owner = owner_person(&server, "olivia").await;
    let owner_id = owner.id().to_owned();
    let host = active_host(
        &server,
        &owner,
        "build-box",
        None,
        7,
        &["olivia"],
        &[(owner_id.as_str(), "olivia")],
    )
    .await;
    let host_id = Uuid::parse_str(&host.host_id).unwrap();
    let mut control = HostControl::connected(&server, &host.keys, host_id, &["olivia"]).await;
    let exited = active_session(&server, &host.host_id, &owner).await;
    let forgotten = active_session(&server, &host.host_id, &owner).await;

    let fault = Fault::unwritable(&server).await;
    // identity.last_active_granularity (60 s) passed: this heartbeat writes
    // last_seen_at, which fails, and is answered all the same.
    server.clock.advance(Duration::from_secs(61));
    control.heartbeat().await;
    control
        .session_ended(exited, CloseReason::ProcessExited, None, Some(0))
        .await;
    assert_eq!(
        control.closed().await.0,
        4000,
        "the report was not recorded"
    );
    fault.writable().await;

    let mut again = HostControl::connect(&server).await;
    again.identify(&host.keys, host_id, &[]).await;
    again.heartbeat().await;
    assert_eq!(
        close_reason(&server, exited).await,
        ("closed".to_owned(), Some("process_exited".to_owned()))
    );
    assert_eq!(
        close_reason(&server, forgotten).await,
        ("closed".to_owned(), Some("host_restarted".to_owned()))
    );
    server.stop().await;
}

both_engines!(
    writes_fail_with_503_and_recover_without_restart,
    a_host_report_during_the_fault_is_recorded_as_reported,
);

// ---- log capture ------------------------------------------------------------

fn logs() -> &'static Arc<Mutex<Vec<u8>>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOGS.get_or_init(|| Arc::new(Mutex::new(Vec::new())))
}

fn logs_text() -> String {
    String::from_utf8_lossy(&logs().lock().unwrap()).into_owned()
}

struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn capture_logs() {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        let buffer = Arc::clone(logs());
        let _ = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::INFO)
            .with_ansi(false)
            .with_writer(move || Capture(Arc::clone(&buffer)))
            .try_init();
    });
}
