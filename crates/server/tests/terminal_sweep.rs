//! The job `terminal.sweep` (6.3, "Order of the checks of terminal.sweep"),
//! on both engines against the real server's database, with time injected:
//! `sweep::run_once(db, config, now)` is called with chosen instants instead
//! of waiting for the job's interval. Every check and its exact boundary (the
//! instant ends the session, one millisecond before keeps it): host not active
//! (`host_disabled`, `host_retired`, `host_rekeyed` for pairing and
//! confirming), login session expired (`session_revoked`), opening past the
//! last grant (the UUIDv7 time of `token_jti`) plus `terminal.open_timeout`
//! (`open_failed` / `open_timeout`, not on a host that reports
//! `require_local_confirm`), `max_duration` from `created_at`,
//! `detach_expired` from `detached_at`, `idle_timeout` from the latest of
//! `last_input_at`, `started_at` and `created_at` — a tampered host service that
//! never reports idle changes nothing (TM-T11, server side). A session that
//! matches several checks gets the first in the order; closed sessions stay as
//! they were. At start on one node the sessions a previous run left `active`
//! become `detached` (their connections died with it), and the running job ends
//! a due session on its own.
//!
//! The sessions are rows inserted as the terminal module writes them (the open
//! route is built at the same time in issue 5).

#![allow(clippy::unwrap_used)] // test bodies are plain fns called by the generated #[test]s

use bothy_testkit as support;
use bothy_testkit::hosts as hosts_common;
use bothy_testkit::identity as identity_common;

use std::time::Duration;

use bothy_server::clock::Clock;
use bothy_server::db::Engine;
use bothy_server::terminal::sweep::{self, Swept};
use bothy_testkit::eventually;
use hosts_common::*;
use identity_common::{Session, audit_rows};
use serde_json::{Value, json};
use sqlx::Row;
use support::both_engines;
use support::server::{TEST_START_MS, TestServer};

const SECOND: i64 = 1_000;
const MINUTE: i64 = 60 * SECOND;
const HOUR: i64 = 60 * MINUTE;
/// The defaults: terminal.open_timeout 20 s, detach_grace 15 min,
/// idle_timeout 30 min + idle_grace 2 min, max_session_duration 12 h.
const OPEN: i64 = 20 * SECOND;
const DETACH: i64 = 15 * MINUTE;
const IDLE: i64 = 32 * MINUTE;
const MAX: i64 = 12 * HOUR;

/// Far beyond every instant of these tests.
const FAR: i64 = TEST_START_MS + 1_000 * HOUR;

/// The job's own passes stay out of the way; the tests call run_once.
const QUIET: &str = "terminal:\n  sweep_interval: 1h\n";

struct Fixture {
    server: TestServer,
    alice: Person,
    /// Active, reports require_local_confirm = false.
    host_a: String,
    /// Active, a second host (made to report require_local_confirm = true
    /// where a test needs it).
    host_b: String,
    /// After the setup.
    t0: i64,
}

async fn fixture_with(engine: Engine, yaml: &str) -> Fixture {
    let server = TestServer::start_with(engine, yaml).await;
    let alice = owner_person(&server, "alice").await;
    let a = active_host(
        &server,
        &alice,
        "box-a",
        None,
        7,
        &["alice_os"],
        &[(alice.id(), "alice_os")],
    )
    .await;
    let b = active_host(
        &server,
        &alice,
        "box-b",
        None,
        8,
        &["alice_os"],
        &[(alice.id(), "alice_os")],
    )
    .await;
    // The login session outlives every instant here unless a test says so.
    set_login_expiry(&server, &alice.session, FAR).await;
    let t0 = server.clock.now_ms();
    Fixture {
        server,
        alice,
        host_a: a.host_id,
        host_b: b.host_id,
        t0,
    }
}

async fn fixture(engine: Engine) -> Fixture {
    fixture_with(engine, QUIET).await
}

async fn set_login_expiry(server: &TestServer, session: &Session, expires_at: i64) {
    sqlx::query("UPDATE login_sessions SET expires_at = $1 WHERE id = $2")
        .bind(expires_at)
        .bind(session.login_session_id.clone())
        .execute(server.state.db().pool())
        .await
        .unwrap();
}

async fn exec(server: &TestServer, sql: &str, host_id: &str) {
    sqlx::query(sql)
        .bind(host_id.to_owned())
        .execute(server.state.db().pool())
        .await
        .unwrap();
}

/// A session row as the terminal module writes it.
#[derive(Clone)]
struct Spec<'a> {
    host_id: &'a str,
    session: &'a Session,
    state: &'a str,
    created_at: i64,
    started_at: Option<i64>,
    last_input_at: Option<i64>,
    detached_at: Option<i64>,
    /// The time of the last grant: `token_jti` is a UUIDv7 of it.
    grant_at: Option<i64>,
}

impl<'a> Spec<'a> {
    fn new(f: &'a Fixture, host_id: &'a str, state: &'a str, created_at: i64) -> Spec<'a> {
        let started = state != "opening";
        Spec {
            host_id,
            session: &f.alice.session,
            state,
            created_at,
            started_at: started.then_some(created_at),
            last_input_at: None,
            detached_at: (state == "detached").then_some(created_at),
            grant_at: Some(created_at),
        }
    }
}

fn v7(at: i64) -> String {
    bothy_proto::ids::uuid_v7(u64::try_from(at).unwrap())
        .unwrap()
        .hyphenated()
        .to_string()
}

async fn insert(f: &Fixture, spec: &Spec<'_>) -> String {
    let id = v7(spec.created_at);
    let pool = f.server.state.db().pool();
    let person = f.alice.id().to_owned();
    let assignment: String = sqlx::query_scalar(
        "SELECT id FROM host_session_users WHERE host_id = $1 AND person_id = $2 \
         AND ended_at IS NULL",
    )
    .bind(spec.host_id.to_owned())
    .bind(person.clone())
    .fetch_one(pool)
    .await
    .unwrap();
    let closed = spec.state == "closed";
    sqlx::query(
        "INSERT INTO terminal_sessions (id, host_id, person_id, login_session_id, device_id, \
         host_session_user_id, profile, state, close_reason, close_detail, created_at, \
         started_at, ended_at, last_input_at, bytes_in, bytes_out, version, token_jti, \
         detached_at) \
         VALUES ($1, $2, $3, $4, $5, $6, 'shell', $7, $8, NULL, $9, $10, $11, $12, 5, 6, 1, \
         $13, $14)",
    )
    .bind(id.clone())
    .bind(spec.host_id.to_owned())
    .bind(person)
    .bind(spec.session.login_session_id.clone())
    .bind(spec.session.device_id.clone())
    .bind(assignment)
    .bind(spec.state.to_owned())
    .bind(closed.then(|| "client_closed".to_owned()))
    .bind(spec.created_at)
    .bind(spec.started_at)
    .bind(closed.then_some(spec.created_at))
    .bind(spec.last_input_at)
    .bind(spec.grant_at.map(v7))
    .bind(spec.detached_at)
    .execute(pool)
    .await
    .unwrap();
    id
}

/// One pass at `now`, as `(session_id, close_reason, close_detail)`.
async fn pass(f: &Fixture, now: i64) -> Vec<(String, String, Option<String>)> {
    let state = &f.server.state;
    let swept: Vec<Swept> = sweep::run_once(state.db(), state.config(), now)
        .await
        .unwrap();
    swept
        .iter()
        .map(|s| {
            (
                s.session_id.hyphenated().to_string(),
                s.reason.as_str().to_owned(),
                s.detail.map(|d| d.as_str().to_owned()),
            )
        })
        .collect()
}

fn one(id: &str, reason: &str) -> Vec<(String, String, Option<String>)> {
    vec![(id.to_owned(), reason.to_owned(), None)]
}

/// `(state, close_reason, close_detail, ended_at, version)`.
async fn stored(
    server: &TestServer,
    id: &str,
) -> (String, Option<String>, Option<String>, Option<i64>, i64) {
    let row = sqlx::query(
        "SELECT state, close_reason, close_detail, ended_at, version FROM terminal_sessions \
         WHERE id = $1",
    )
    .bind(id.to_owned())
    .fetch_one(server.state.db().pool())
    .await
    .unwrap();
    (
        row.get("state"),
        row.get("close_reason"),
        row.get("close_detail"),
        row.get("ended_at"),
        row.get("version"),
    )
}

async fn changed_events(server: &TestServer, id: &str) -> Vec<(String, Option<String>, Value)> {
    sqlx::query(
        "SELECT audience_kind, audience_id, payload FROM events \
         WHERE kind = 'terminal_session.changed' ORDER BY position",
    )
    .fetch_all(server.state.db().pool())
    .await
    .unwrap()
    .iter()
    .map(|row| {
        (
            row.get::<String, _>("audience_kind"),
            row.get::<Option<String>, _>("audience_id"),
            serde_json::from_str::<Value>(&row.get::<String, _>("payload")).unwrap(),
        )
    })
    .filter(|(_, _, payload)| payload["session_id"] == id)
    .collect()
}

/// Asserts the row, one terminal.terminate with literal details and one
/// `terminal_session.changed` of an end at `at`.
async fn assert_ended(
    f: &Fixture,
    id: &str,
    host_id: &str,
    reason: &str,
    detail: Option<&str>,
    created_at: i64,
    at: i64,
) {
    let server = &f.server;
    assert_eq!(
        stored(server, id).await,
        (
            "closed".to_owned(),
            Some(reason.to_owned()),
            detail.map(str::to_owned),
            Some(at),
            2
        ),
        "session {id}"
    );
    let terminate: Vec<_> = audit_rows(server)
        .await
        .into_iter()
        .filter(|row| row.action == "terminal.terminate" && row.details["session_id"] == id)
        .collect();
    assert_eq!(terminate.len(), 1, "{:?}", terminate);
    assert_eq!(terminate[0].actor_kind, "system");
    let mut details = json!({
        "session_id": id,
        "close_reason": reason,
        "bytes_in": 5,
        "bytes_out": 6,
        "duration_ms": at - created_at,
    });
    if let Some(detail) = detail {
        details["close_detail"] = json!(detail);
    }
    assert_eq!(terminate[0].details, details);
    let events = changed_events(server, id).await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].0, "person");
    assert_eq!(events[0].1.as_deref(), Some(f.alice.id()));
    let mut payload =
        json!({"session_id": id, "host_id": host_id, "state": "closed", "close_reason": reason});
    if let Some(detail) = detail {
        payload["close_detail"] = json!(detail);
    }
    assert_eq!(events[0].2, payload);
}

async fn assert_open(f: &Fixture, id: &str, state: &str) {
    let (stored_state, reason, _, ended_at, version) = stored(&f.server, id).await;
    assert_eq!(
        (stored_state.as_str(), reason, ended_at, version),
        (state, None, None, 1)
    );
}

async fn opening_ends_at_the_last_grant_plus_open_timeout(engine: Engine) {
    let f = fixture(engine).await;
    let c = f.t0;
    let g = c + 5 * MINUTE;
    // An opening whose grant an attach renewed: the jti counts, not created_at.
    let renewed = insert(
        &f,
        &Spec {
            grant_at: Some(g),
            ..Spec::new(&f, &f.host_a, "opening", c)
        },
    )
    .await;
    // An opening without a stored grant counts from created_at.
    let no_jti = insert(
        &f,
        &Spec {
            grant_at: None,
            ..Spec::new(&f, &f.host_a, "opening", c + 1)
        },
    )
    .await;
    // An active session with an old grant: check 3 is for openings only.
    let active = insert(
        &f,
        &Spec {
            last_input_at: Some(g),
            ..Spec::new(&f, &f.host_a, "active", c + 2)
        },
    )
    .await;
    // An opening on a host that reports require_local_confirm: the pairing
    // meets the deadline there, the sweep does not apply it.
    exec(
        &f.server,
        "UPDATE hosts SET reported_require_local_confirm = TRUE WHERE id = $1",
        &f.host_b,
    )
    .await;
    let consent = insert(&f, &Spec::new(&f, &f.host_b, "opening", c + 3)).await;

    assert_eq!(pass(&f, c + 1 + OPEN - 1).await, []);
    assert_eq!(
        pass(&f, c + 1 + OPEN).await,
        vec![(
            no_jti.clone(),
            "open_failed".into(),
            Some("open_timeout".into())
        )]
    );
    assert_ended(
        &f,
        &no_jti,
        &f.host_a,
        "open_failed",
        Some("open_timeout"),
        c + 1,
        c + 1 + OPEN,
    )
    .await;
    assert_eq!(pass(&f, g + OPEN - 1).await, []);
    assert_eq!(
        pass(&f, g + OPEN).await,
        vec![(
            renewed.clone(),
            "open_failed".into(),
            Some("open_timeout".into())
        )]
    );
    assert_ended(
        &f,
        &renewed,
        &f.host_a,
        "open_failed",
        Some("open_timeout"),
        c,
        g + OPEN,
    )
    .await;
    assert_open(&f, &active, "active").await;
    assert_open(&f, &consent, "opening").await;
    // The opening waiting for consent still has the other limits: idle from
    // created_at (no input, never started).
    assert_eq!(pass(&f, c + 3 + IDLE - 1).await, []);
    assert_eq!(pass(&f, c + 3 + IDLE).await, one(&consent, "idle_timeout"));
    assert_ended(
        &f,
        &consent,
        &f.host_b,
        "idle_timeout",
        None,
        c + 3,
        c + 3 + IDLE,
    )
    .await;
    assert_open(&f, &active, "active").await;
}

async fn limits_end_at_their_exact_instant(engine: Engine) {
    let f = fixture(engine).await;
    let c = f.t0;
    let a = f.host_a.as_str();
    // Max duration from created_at; input keeps idle away.
    let max = insert(
        &f,
        &Spec {
            last_input_at: Some(c + MAX - MINUTE),
            ..Spec::new(&f, a, "active", c)
        },
    )
    .await;
    // Detach grace from detached_at, input at the detach.
    let detached = insert(
        &f,
        &Spec {
            last_input_at: Some(c + MINUTE),
            detached_at: Some(c + MINUTE),
            ..Spec::new(&f, a, "detached", c + 1)
        },
    )
    .await;
    // Idle from last_input_at ...
    let idle_input = insert(
        &f,
        &Spec {
            last_input_at: Some(c + 2 * MINUTE),
            ..Spec::new(&f, a, "active", c + 2)
        },
    )
    .await;
    // ... from started_at without input ...
    let idle_started = insert(
        &f,
        &Spec {
            started_at: Some(c + 3 * MINUTE),
            ..Spec::new(&f, a, "active", c + 3)
        },
    )
    .await;
    // ... and from the latest of them: input before the start counts from the start.
    let idle_latest = insert(
        &f,
        &Spec {
            started_at: Some(c + 4 * MINUTE),
            last_input_at: Some(c + MINUTE),
            ..Spec::new(&f, a, "active", c + 4)
        },
    )
    .await;
    let due = [
        (&detached, c + MINUTE + DETACH, "detach_expired", c + 1),
        (&idle_input, c + 2 * MINUTE + IDLE, "idle_timeout", c + 2),
        (&idle_started, c + 3 * MINUTE + IDLE, "idle_timeout", c + 3),
        (&idle_latest, c + 4 * MINUTE + IDLE, "idle_timeout", c + 4),
        (&max, c + MAX, "max_duration", c),
    ];
    for (id, at, reason, created) in due {
        assert_eq!(pass(&f, at - 1).await, [], "one ms before {reason}");
        assert_eq!(pass(&f, at).await, one(id, reason), "at {reason}");
        assert_ended(&f, id, a, reason, None, created, at).await;
    }
}

async fn a_host_not_active_ends_its_sessions_first(engine: Engine) {
    let f = fixture(engine).await;
    let a = f.host_a.as_str();
    let cases = [
        (
            "UPDATE hosts SET state = 'disabled', disabled_reason = 'owner', disabled_at = 1 \
             WHERE id = $1",
            "host_disabled",
        ),
        (
            "UPDATE hosts SET state = 'retired' WHERE id = $1",
            "host_retired",
        ),
        (
            "UPDATE hosts SET state = 'pairing' WHERE id = $1",
            "host_rekeyed",
        ),
        (
            "UPDATE hosts SET state = 'confirming' WHERE id = $1",
            "host_rekeyed",
        ),
    ];
    let mut at = f.t0 + MINUTE;
    for (i, (sql, reason)) in cases.into_iter().enumerate() {
        let created = f.t0 + i64::try_from(i).unwrap();
        let id = insert(&f, &Spec::new(&f, a, "active", created)).await;
        let closed = insert(&f, &Spec::new(&f, a, "closed", created + 100)).await;
        // Changed behind the host module's back: only the sweep can see it.
        exec(&f.server, sql, a).await;
        assert_eq!(pass(&f, at).await, one(&id, reason), "{reason}");
        assert_ended(&f, &id, a, reason, None, created, at).await;
        let (state, close_reason, _, _, version) = stored(&f.server, &closed).await;
        assert_eq!(
            (state.as_str(), close_reason.as_deref(), version),
            ("closed", Some("client_closed"), 1)
        );
        exec(
            &f.server,
            "UPDATE hosts SET state = 'active', disabled_reason = NULL, disabled_at = NULL \
             WHERE id = $1",
            a,
        )
        .await;
        at += SECOND;
    }
}

async fn the_first_check_in_the_order_wins(engine: Engine) {
    let f = fixture(engine).await;
    let c = f.t0;
    // Past the maximum of every session created at c .. c + 3.
    let now = c + MAX + 10;
    let a = f.host_a.as_str();
    let b = f.host_b.as_str();
    // A second login session of alice that expired an hour after c.
    let expired = f.alice.enrolled.login(&f.server, 2).await;
    set_login_expiry(&f.server, &expired, c + HOUR).await;

    // 1 before 2: host disabled and login session expired.
    let host_over_login = insert(
        &f,
        &Spec {
            session: &expired,
            ..Spec::new(&f, b, "opening", c)
        },
    )
    .await;
    // 2 before 3: login session expired and opening past its deadline.
    let login_over_open = insert(
        &f,
        &Spec {
            session: &expired,
            ..Spec::new(&f, a, "opening", c + 1)
        },
    )
    .await;
    // 3 before 4 (and 6): opening past its deadline and past the maximum.
    let open_over_max = insert(&f, &Spec::new(&f, a, "opening", c + 2)).await;
    // 4 before 5 (and 6): past the maximum and detached long ago.
    let max_over_detach = insert(&f, &Spec::new(&f, a, "detached", c + 3)).await;
    // 5 before 6: detached past its grace and idle, within the maximum.
    let detach_over_idle = insert(
        &f,
        &Spec {
            last_input_at: Some(now - HOUR),
            detached_at: Some(now - 30 * MINUTE),
            ..Spec::new(&f, a, "detached", now - 2 * HOUR)
        },
    )
    .await;
    // 6 alone.
    let idle = insert(
        &f,
        &Spec {
            last_input_at: Some(now - HOUR),
            ..Spec::new(&f, a, "active", now - 2 * HOUR)
        },
    )
    .await;
    let closed = insert(&f, &Spec::new(&f, a, "closed", c + 4)).await;
    exec(
        &f.server,
        "UPDATE hosts SET state = 'disabled', disabled_reason = 'owner', disabled_at = 1 \
         WHERE id = $1",
        b,
    )
    .await;

    let mut expected = vec![
        (host_over_login.clone(), "host_disabled".to_owned(), None),
        (login_over_open.clone(), "session_revoked".to_owned(), None),
        (
            open_over_max.clone(),
            "open_failed".to_owned(),
            Some("open_timeout".to_owned()),
        ),
        (max_over_detach.clone(), "max_duration".to_owned(), None),
        (detach_over_idle.clone(), "detach_expired".to_owned(), None),
        (idle.clone(), "idle_timeout".to_owned(), None),
    ];
    expected.sort();
    assert_eq!(pass(&f, now).await, expected);
    assert_ended(&f, &host_over_login, b, "host_disabled", None, c, now).await;
    assert_ended(&f, &login_over_open, a, "session_revoked", None, c + 1, now).await;
    assert_ended(
        &f,
        &open_over_max,
        a,
        "open_failed",
        Some("open_timeout"),
        c + 2,
        now,
    )
    .await;
    assert_ended(&f, &max_over_detach, a, "max_duration", None, c + 3, now).await;
    assert_ended(
        &f,
        &detach_over_idle,
        a,
        "detach_expired",
        None,
        now - 2 * HOUR,
        now,
    )
    .await;
    assert_ended(&f, &idle, a, "idle_timeout", None, now - 2 * HOUR, now).await;
    // Closed before: untouched; and a later pass finds nothing to end again.
    let (state, reason, _, _, version) = stored(&f.server, &closed).await;
    assert_eq!(
        (state.as_str(), reason.as_deref(), version),
        ("closed", Some("client_closed"), 1)
    );
    assert_eq!(pass(&f, now + HOUR).await, []);
    assert!(changed_events(&f.server, &closed).await.is_empty());
}

async fn a_restart_detaches_what_the_previous_run_left_active(engine: Engine) {
    let f = fixture(engine).await;
    let c = f.t0;
    let a = f.host_a.clone();
    let active = insert(
        &f,
        &Spec {
            last_input_at: Some(c),
            ..Spec::new(&f, &a, "active", c)
        },
    )
    .await;
    let opening = insert(&f, &Spec::new(&f, &a, "opening", c + 1)).await;
    let detached = insert(&f, &Spec::new(&f, &a, "detached", c + 2)).await;
    let closed = insert(&f, &Spec::new(&f, &a, "closed", c + 3)).await;
    let Fixture {
        server,
        alice,
        host_a,
        host_b,
        ..
    } = f;
    let (db, dir) = server.stop().await;
    // The new process: its manual clock starts at TEST_START_MS again.
    let server = TestServer::start_on_with(db, dir, QUIET).await;
    let restart = server.clock.now_ms();
    assert_eq!(restart, TEST_START_MS);
    let f = Fixture {
        server,
        alice,
        host_a,
        host_b,
        t0: restart,
    };

    let row =
        sqlx::query("SELECT state, detached_at, version FROM terminal_sessions WHERE id = $1")
            .bind(active.clone())
            .fetch_one(f.server.state.db().pool())
            .await
            .unwrap();
    assert_eq!(row.get::<String, _>("state"), "detached");
    assert_eq!(row.get::<Option<i64>, _>("detached_at"), Some(restart));
    assert_eq!(row.get::<i64, _>("version"), 2);
    let events = changed_events(&f.server, &active).await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].0, "person");
    assert_eq!(events[0].1.as_deref(), Some(f.alice.id()));
    assert_eq!(
        events[0].2,
        json!({"session_id": active, "host_id": a, "state": "detached"})
    );
    assert_open(&f, &opening, "opening").await;
    assert_open(&f, &detached, "detached").await;
    let (state, _, _, _, version) = stored(&f.server, &closed).await;
    assert_eq!((state.as_str(), version), ("closed", 1));

    // Its detach grace runs from the start; the sweep ends it then.
    let before: Vec<_> = pass(&f, restart + DETACH - 1).await;
    assert!(before.iter().all(|(id, _, _)| id != &active), "{before:?}");
    let at = pass(&f, restart + DETACH).await;
    assert!(
        at.contains(&(active.clone(), "detach_expired".into(), None)),
        "{at:?}"
    );
}

async fn the_job_runs_on_its_interval(engine: Engine) {
    let f = fixture_with(engine, "terminal:\n  sweep_interval: 100ms\n").await;
    // The job runs a pass once sweep_interval passed on the server's clock
    // since the last one: with the clock standing still, at most one more pass
    // runs at `c`, which ends nothing; the move to `c + 100` runs one that
    // ends exactly the opening due then.
    let c = f.server.clock.now_ms();
    let at = c + 100;
    let due = insert(&f, &Spec::new(&f, &f.host_a, "opening", at - OPEN)).await;
    let kept = insert(&f, &Spec::new(&f, &f.host_a, "opening", at - OPEN + 1)).await;
    f.server.clock.advance(Duration::from_millis(100));
    // Waiting for the job's commit (polling the row), not for time.
    let (server, due_id) = (&f.server, &due);
    eventually(
        "the job to end the due opening",
        support::ws::WAIT,
        || async move { (stored(server, due_id).await.0 == "closed").then_some(()) },
    )
    .await;
    assert_ended(
        &f,
        &due,
        &f.host_a,
        "open_failed",
        Some("open_timeout"),
        at - OPEN,
        at,
    )
    .await;
    assert_open(&f, &kept, "opening").await;
    // It stops with the server.
    let _ = f.server.stop().await;
}

both_engines!(
    opening_ends_at_the_last_grant_plus_open_timeout,
    limits_end_at_their_exact_instant,
    a_host_not_active_ends_its_sessions_first,
    the_first_check_in_the_order_wins,
    a_restart_detaches_what_the_previous_run_left_active,
    the_job_runs_on_its_interval,
);
