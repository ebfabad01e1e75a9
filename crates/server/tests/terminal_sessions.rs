//! The terminal session routes (spec 24 sections 5.3, 6.1 steps 1–4, 6.2
//! attach and quick reattach, 6.3 limits, 8.4, 10.1, 13; DESIGN 3.4) on both
//! engines, against the real server on port 0 over TLS: openTerminalSession,
//! attachTerminalSession with its quick-reattach challenge,
//! closeTerminalSession and the reads.
//!
//! Everything is set up through the real HTTP API (persons, step-ups, hosts,
//! pairing with the report of profiles and session users, confirmation,
//! grants). A host counts as connected when its control connection is
//! registered and its report applied. These tests do not run a control
//! connection: they register a fake link with
//! `server.state.local_control_links().register(host_id, conn_id, tx)` and
//! `mark_report_applied`, exactly what the control connection does after its
//! first report, and read the `session.open` / `session.close` signals from the
//! receiving side. The real control connection is tested in
//! tests/terminal_control.rs.
//!
//! The host service's reports (`session.started`, a lost device) are not part
//! of these routes; where a test needs a started or detached session it sets
//! the row's state as those reports will (`UPDATE terminal_sessions`).
//!
//! Time moves only through the server's manual clock; nothing sleeps.

#![allow(clippy::unwrap_used)] // test bodies are plain fns called by the generated #[test]s

use bothy_testkit as support;
use bothy_testkit::assert_problem_reason as assert_problem;
use bothy_testkit::console as console_common;
use bothy_testkit::hosts as hosts_common;
use bothy_testkit::identity as identity_common;

use std::time::Duration;

use bothy_proto::b64;
use bothy_proto::jws::{Att, decode_terminal_session};
use bothy_server::clock::Clock;
use bothy_server::db::Engine;
use bothy_server::terminal::keys;
use bothy_server::terminal::links::ControlSignal;
use hosts_common::*;
use identity_common::*;
use serde_json::{Value, json};
use sqlx::Row;
use support::both_engines;
use support::server::TestServer;
use tokio::sync::mpsc;
use uuid::Uuid;

/// The configuration of these tests: step-ups live long enough for several
/// fresh TOTP codes (each moves the clock 30 s), small session limits.
const CONFIG: &str = "terminal:\n  step_up_max_age: 10m\n  max_sessions_per_person: 2\n  \
                      max_sessions_per_host: 3\n";

fn uuid(text: &str) -> Uuid {
    bothy_proto::ids::parse_uuid(text).unwrap()
}

/// A `client_ephemeral_key_hash`: base64url of 32 bytes.
fn cek(n: u8) -> String {
    b64::encode(&[n; 32])
}

/// alice (first owner, device 1), bob (member, device 2), carol (member,
/// device 3); bob's host (assigned to bob, bob has a grant) with the session
/// users `alice-su` (two working directories), `bob-su` (one), `carol-su`
/// (none), all three assigned; connected.
struct World {
    server: TestServer,
    alice: Person,
    bob: Person,
    carol: Person,
    host: String,
    link: Link,
}

/// A fake control connection (see the module docs).
struct Link {
    rx: mpsc::Receiver<ControlSignal>,
}

impl Link {
    fn next(&mut self) -> ControlSignal {
        self.rx
            .try_recv()
            .expect("a control signal was handed over")
    }

    fn none(&mut self) {
        assert!(self.rx.try_recv().is_err(), "no control signal expected");
    }
}

fn connect(server: &TestServer, host_id: &str) -> Link {
    let (tx, rx) = mpsc::channel(64);
    let conn_id = Uuid::from_u128(0x5e55);
    let links = server.state.local_control_links();
    links.register(uuid(host_id), conn_id, tx);
    links.mark_report_applied(uuid(host_id), conn_id, server.clock.now_ms());
    Link { rx }
}

const USERS: &[(&str, &[&str])] = &[
    ("alice-su", &["proj-a", "proj-b"]),
    ("bob-su", &["bob-proj"]),
    ("carol-su", &[]),
];

/// createHost, host.pair with profiles shell and claude and the session users
/// `users` (with working directories), confirmHost with `declaration` and
/// `assignments`.
#[allow(clippy::too_many_arguments)]
async fn host_with(
    server: &TestServer,
    by: &Person,
    name: &str,
    assignee: Option<&str>,
    seed: u8,
    users: &[(&str, &[&str])],
    declaration: (&str, Option<&str>),
    declared_server_host: bool,
    assignments: &[Assignment<'_>],
) -> String {
    let (host_id, code) = create_host(server, by, name, assignee).await;
    let keys = HostKeys::generate(seed);
    let mut body = pair_body(&code, &keys, &[]);
    body["session_users"] = Value::Array(
        users
            .iter()
            .map(|(name, workdirs)| session_user(name, workdirs))
            .collect(),
    );
    let paired = pair_with(server, body).await;
    assert_eq!(paired.status, 200, "host.pair: {:?}", paired.body);
    let confirmed = confirm(
        server,
        by,
        &host_id,
        &reply_prefix(&paired),
        declaration.0,
        declaration.1,
        declared_server_host,
        assignments,
    )
    .await;
    assert_eq!(confirmed.status, 200, "confirmHost: {:?}", confirmed.body);
    host_id
}

async fn grant(server: &TestServer, by: &Person, host_id: &str, person: &Person) {
    let reply = post(
        server,
        "/api/v1/grants",
        Some(by.token()),
        json!({"host_id": host_id, "recipient_kind": "person", "recipient_id": person.id()}),
    )
    .await;
    assert_eq!(reply.status, 201, "grant: {:?}", reply.body);
}

async fn world_with(engine: Engine, config: &str) -> World {
    let server = TestServer::start_with(engine, config).await;
    let alice = owner_person(&server, "alice").await;
    let bob = invited_person(&server, &alice, "bob", "member", 2).await;
    let carol = invited_person(&server, &alice, "carol", "member", 3).await;
    let host = host_with(
        &server,
        &alice,
        "bobs-box",
        Some(bob.id()),
        21,
        USERS,
        ("none", None),
        false,
        &[
            (alice.id(), "alice-su"),
            (bob.id(), "bob-su"),
            (carol.id(), "carol-su"),
        ],
    )
    .await;
    grant(&server, &alice, &host, &bob).await;
    let link = connect(&server, &host);
    World {
        server,
        alice,
        bob,
        carol,
        host,
        link,
    }
}

async fn world(engine: Engine) -> World {
    world_with(engine, CONFIG).await
}

fn open_body(profile: &str, step_up_id: Option<&str>, workdir_index: Option<u32>) -> Value {
    let mut body = json!({
        "profile": profile,
        "columns": 120,
        "rows": 40,
        "client_ephemeral_key_hash": cek(7),
    });
    if let Some(step_up_id) = step_up_id {
        body["step_up_id"] = json!(step_up_id);
    }
    if let Some(index) = workdir_index {
        body["workdir_index"] = json!(index);
    }
    body
}

async fn open_with(server: &TestServer, token: &str, host_id: &str, body: Value) -> Reply {
    post(
        server,
        &format!("/api/v1/hosts/{host_id}/terminal/sessions"),
        Some(token),
        body,
    )
    .await
}

/// An opening with a fresh step-up.
async fn open(
    server: &TestServer,
    person: &Person,
    host_id: &str,
    profile: &str,
    workdir_index: Option<u32>,
) -> Reply {
    let step_up_id = step_up(server, person).await;
    open_with(
        server,
        person.token(),
        host_id,
        open_body(profile, Some(&step_up_id), workdir_index),
    )
    .await
}

/// An opening that must succeed; the session ID.
async fn opened(server: &TestServer, person: &Person, host_id: &str) -> String {
    let reply = open(server, person, host_id, "shell", None).await;
    assert_eq!(reply.status, 201, "open: {:?}", reply.body);
    reply.body["session_id"].as_str().unwrap().to_owned()
}

async fn denials(server: &TestServer, action: &str, reason_code: &str) -> Vec<AuditRow> {
    audit_of(server, action, "deny")
        .await
        .into_iter()
        .filter(|row| row.details["reason_code"] == reason_code)
        .collect()
}

async fn session_count(server: &TestServer) -> i64 {
    server.db().count("terminal_sessions").await
}

async fn claims(server: &TestServer, token: &str) -> bothy_proto::jws::TerminalSessionClaims {
    let mut conn = server.state.db().pool().acquire().await.unwrap();
    let jwks = keys::jwks(&mut conn, server.clock.now_ms()).await.unwrap();
    decode_terminal_session(token, &jwks).expect("the token verifies with the JWKS")
}

async fn set_state(server: &TestServer, session_id: &str, state: &str, detached_at: Option<i64>) {
    let now = server.clock.now_ms();
    sqlx::query(
        "UPDATE terminal_sessions SET state = $1, started_at = $2, detached_at = $3 WHERE id = $4",
    )
    .bind(state)
    .bind(now)
    .bind(detached_at)
    .bind(session_id)
    .execute(server.state.db().pool())
    .await
    .unwrap();
}

async fn row(server: &TestServer, session_id: &str) -> sqlx::any::AnyRow {
    sqlx::query("SELECT * FROM terminal_sessions WHERE id = $1")
        .bind(session_id)
        .fetch_one(server.state.db().pool())
        .await
        .unwrap()
}

fn session_open_of(signal: ControlSignal) -> bothy_proto::control::SessionOpen {
    match signal {
        ControlSignal::SessionOpen(open) => open,
        other => panic!("not session.open: {other:?}"),
    }
}

// ---------------------------------------------------------------------------
// Opening
// ---------------------------------------------------------------------------

async fn open_answers_every_member_and_claim(engine: Engine) {
    let World {
        server,
        alice,
        bob,
        host,
        mut link,
        ..
    } = world(engine).await;
    let before = server.clock.now_ms();
    let reply = open(&server, &bob, &host, "shell", None).await;
    assert_eq!(reply.status, 201, "{:?}", reply.body);
    let now = server.clock.now_ms();
    assert!(now > before);
    let body = &reply.body;
    let members: Vec<&str> = body
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let mut sorted = members.clone();
    sorted.sort_unstable();
    assert_eq!(
        sorted,
        [
            "expires_at",
            "key_fingerprint",
            "key_generation",
            "noise_public_key",
            "session_id",
            "stream_path",
            "token"
        ]
    );
    let session_id = body["session_id"].as_str().unwrap();
    assert_eq!(
        body["stream_path"],
        format!("/api/v1/terminal/sessions/{session_id}/stream")
    );
    let host_json = get_host(&server, alice.token(), &host).await.body;
    assert_eq!(body["noise_public_key"], host_json["noise_public_key"]);
    assert_eq!(body["key_fingerprint"], host_json["key_fingerprint"]);
    assert_eq!(body["key_generation"], 1);

    let c = claims(&server, body["token"].as_str().unwrap()).await;
    assert_eq!(c.sub, uuid(bob.id()));
    assert_eq!(c.aud, uuid(&host));
    assert_eq!(c.sid, uuid(session_id));
    assert_eq!(c.dev, uuid(&bob.session.device_id));
    assert_eq!(c.osu, "bob-su");
    assert!(!c.own);
    assert_eq!(c.prf, "shell");
    assert_eq!(c.cek, [7; 32]);
    assert_eq!(c.att, Att::Open);
    assert_eq!(c.wdi, None);
    assert_eq!(c.exp, now / 1000 + 30);
    assert_eq!(body["expires_at"], c.exp * 1000);
    let instance: String = sqlx::query_scalar("SELECT instance_id FROM instance WHERE id = 1")
        .fetch_one(server.state.db().pool())
        .await
        .unwrap();
    assert_eq!(c.iss, instance);

    // The row: opening, bob's session user, device, deadline, the token's jti.
    let stored = row(&server, session_id).await;
    assert_eq!(stored.get::<String, _>("state"), "opening");
    assert_eq!(
        stored.get::<Option<String>, _>("device_id").as_deref(),
        Some(bob.session.device_id.as_str())
    );
    assert_eq!(
        stored.get::<String, _>("login_session_id"),
        bob.session.login_session_id
    );
    let session_user: String = sqlx::query_scalar(
        "SELECT id FROM host_session_users WHERE host_id = $1 AND os_user = 'bob-su'",
    )
    .bind(&host)
    .fetch_one(server.state.db().pool())
    .await
    .unwrap();
    assert_eq!(
        stored.get::<String, _>("host_session_user_id"),
        session_user
    );
    assert_eq!(
        stored.get::<Option<i64>, _>("open_deadline_at"),
        Some(now + 20_000)
    );
    assert_eq!(
        stored.get::<Option<String>, _>("token_jti"),
        Some(c.jti.hyphenated().to_string())
    );
    assert_eq!(
        stored.get::<Option<i64>, _>("token_expires_at"),
        Some(c.exp * 1000)
    );

    // session.open after the commit, with the open deadline.
    let signal = session_open_of(link.next());
    assert_eq!(signal.session_id, uuid(session_id));
    assert_eq!(signal.expires_at, u64::try_from(now + 20_000).unwrap());
    link.none();

    // Audit terminal.open allow, event to bob.
    let entries = audit_of(&server, "terminal.open", "allow").await;
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].actor_id.as_deref(), Some(bob.id()));
    assert_eq!(entries[0].target_kind.as_deref(), Some("terminal_session"));
    assert_eq!(
        entries[0].details,
        json!({
            "host_id": host,
            "session_id": session_id,
            "profile": "shell",
            "device_id": bob.session.device_id,
            "pin_changed": false,
            "foreign_assignee": false,
        })
    );
    let events = sqlx::query(
        "SELECT audience_kind, audience_id, payload FROM events \
         WHERE kind = 'terminal_session.changed' ORDER BY position",
    )
    .fetch_all(server.state.db().pool())
    .await
    .unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].get::<String, _>("audience_kind"), "person");
    assert_eq!(
        events[0].get::<Option<String>, _>("audience_id").as_deref(),
        Some(bob.id())
    );
    let payload: Value = serde_json::from_str(&events[0].get::<String, _>("payload")).unwrap();
    assert_eq!(
        payload,
        json!({"session_id": session_id, "host_id": host, "state": "opening"})
    );

    // The owner on bob's host: own, foreign_assignee, claude with wdi, pin_changed.
    let step_up_id = step_up(&server, &alice).await;
    let mut body = open_body("claude", Some(&step_up_id), Some(1));
    body["pin_changed"] = json!(true);
    let reply = open_with(&server, alice.token(), &host, body).await;
    assert_eq!(reply.status, 201, "{:?}", reply.body);
    let c = claims(&server, reply.body["token"].as_str().unwrap()).await;
    assert!(c.own);
    assert_eq!(c.osu, "alice-su");
    assert_eq!(c.prf, "claude");
    assert_eq!(c.wdi, Some(1));
    assert_eq!(c.att, Att::Open);
    let alice_session = reply.body["session_id"].as_str().unwrap();
    let stored = row(&server, alice_session).await;
    assert_eq!(stored.get::<Option<i64>, _>("workdir_index"), Some(1));
    let entries = audit_of(&server, "terminal.open", "allow").await;
    assert_eq!(entries[1].details["foreign_assignee"], true);
    assert_eq!(entries[1].details["pin_changed"], true);
    assert_eq!(entries[1].details["profile"], "claude");
    assert_eq!(session_open_of(link.next()).session_id, uuid(alice_session));
}

/// TM-T07 (route part): without, with a consumed, with an expired step-up.
async fn tm_t07_open_needs_a_fresh_unconsumed_step_up(engine: Engine) {
    let World {
        server,
        bob,
        host,
        mut link,
        ..
    } = world(engine).await;
    let missing = open_with(&server, bob.token(), &host, open_body("shell", None, None)).await;
    assert_problem(&missing, 401, "step_up_required", None);
    let unknown = Uuid::from_u128(42).hyphenated().to_string();
    let unknown = open_with(
        &server,
        bob.token(),
        &host,
        open_body("shell", Some(&unknown), None),
    )
    .await;
    assert_problem(&unknown, 401, "step_up_required", None);

    let step_up_id = step_up(&server, &bob).await;
    let first = open_with(
        &server,
        bob.token(),
        &host,
        open_body("shell", Some(&step_up_id), None),
    )
    .await;
    assert_eq!(first.status, 201, "{:?}", first.body);
    let consumed = open_with(
        &server,
        bob.token(),
        &host,
        open_body("shell", Some(&step_up_id), None),
    )
    .await;
    assert_problem(&consumed, 401, "step_up_required", None);

    let step_up_id = step_up(&server, &bob).await;
    server.clock.advance(Duration::from_secs(10 * 60 + 1));
    let expired = open_with(
        &server,
        bob.token(),
        &host,
        open_body("shell", Some(&step_up_id), None),
    )
    .await;
    assert_problem(&expired, 401, "step_up_required", None);

    assert_eq!(session_count(&server).await, 1);
    for code in ["step_up_missing", "step_up_consumed", "step_up_expired"] {
        let rows = denials(&server, "terminal.open", code).await;
        assert!(!rows.is_empty(), "{code}");
        assert_eq!(rows[0].details["host_id"], host.as_str());
    }
    assert_eq!(
        denials(&server, "terminal.open", "step_up_missing")
            .await
            .len(),
        2
    );
    // Only the one opening reached the host.
    session_open_of(link.next());
    link.none();
}

/// TM-T17 (route part): agent and app tokens on every terminal route.
async fn tm_t17_agents_and_apps_never_open_attach_or_close(engine: Engine) {
    let World {
        server,
        alice,
        bob,
        host,
        link: _link,
        ..
    } = world(engine).await;
    let session_id = opened(&server, &bob, &host).await;
    for kind in ["agent", "app"] {
        let reply = post(
            &server,
            "/api/v1/tokens",
            Some(alice.token()),
            json!({"kind": kind, "name": format!("robot-{kind}")}),
        )
        .await;
        assert_eq!(reply.status, 201, "{:?}", reply.body);
        let token = reply.body["token"].as_str().unwrap().to_owned();
        let principal_id = reply.body["principal_id"].as_str().unwrap().to_owned();
        let opened = open_with(&server, &token, &host, open_body("shell", None, None)).await;
        assert_problem(&opened, 403, "forbidden", Some("subject_kind_not_allowed"));
        let attached = post(
            &server,
            &format!("/api/v1/terminal/sessions/{session_id}/attach"),
            Some(&token),
            json!({"client_ephemeral_key_hash": cek(8)}),
        )
        .await;
        assert_problem(
            &attached,
            403,
            "forbidden",
            Some("subject_kind_not_allowed"),
        );
        let closed = post_empty(
            &server,
            &format!("/api/v1/terminal/sessions/{session_id}/close"),
            &token,
        )
        .await;
        assert_problem(&closed, 403, "forbidden", Some("subject_kind_not_allowed"));
        for action in ["terminal.open", "terminal.attach", "terminal.close"] {
            let rows: Vec<AuditRow> = denials(&server, action, "subject_kind_not_allowed")
                .await
                .into_iter()
                .filter(|row| row.actor_kind == kind)
                .collect();
            assert_eq!(rows.len(), 1, "{kind} {action}");
            assert_eq!(rows[0].actor_id.as_deref(), Some(principal_id.as_str()));
        }
    }
    assert_eq!(session_count(&server).await, 1);
}

/// TM-T08 over the route: someone else's host, their own, the server host.
async fn tm_t08_non_owner_over_the_route(engine: Engine) {
    let World {
        server,
        alice,
        bob,
        host: bobs,
        link: _link,
        ..
    } = world(engine).await;
    let both = [(alice.id(), "alice-su"), (bob.id(), "bob-su")];
    let users: &[(&str, &[&str])] = &[("alice-su", &[]), ("bob-su", &[])];
    let alices = host_with(
        &server,
        &alice,
        "alices-box",
        Some(alice.id()),
        22,
        users,
        ("none", None),
        false,
        &both,
    )
    .await;
    let server_host = host_with(
        &server,
        &alice,
        "server",
        Some(bob.id()),
        23,
        users,
        ("none", None),
        true,
        &both,
    )
    .await;
    grant(&server, &alice, &alices, &bob).await;
    grant(&server, &alice, &server_host, &bob).await;
    let _alices_link = connect(&server, &alices);
    let _server_link = connect(&server, &server_host);

    let reply = open(&server, &bob, &alices, "shell", None).await;
    assert_problem(&reply, 403, "terminal_denied", Some("not_host_assignee"));
    let reply = open(&server, &bob, &bobs, "shell", None).await;
    assert_eq!(reply.status, 201, "{:?}", reply.body);
    let reply = open(&server, &bob, &server_host, "shell", None).await;
    assert_problem(
        &reply,
        403,
        "terminal_denied",
        Some("server_host_owner_only"),
    );
    // The owner opens on the server host.
    let reply = open(&server, &alice, &server_host, "shell", None).await;
    assert_eq!(reply.status, 201, "{:?}", reply.body);

    for (code, host) in [
        ("not_host_assignee", &alices),
        ("server_host_owner_only", &server_host),
    ] {
        let rows = denials(&server, "terminal.open", code).await;
        assert_eq!(rows.len(), 1, "{code}");
        assert_eq!(rows[0].actor_id.as_deref(), Some(bob.id()));
        assert_eq!(rows[0].target_id.as_deref(), Some(host.as_str()));
    }
    // A refusal consumed nothing: the step-up of the refused opening still works.
    let step_up_id = step_up(&server, &bob).await;
    let refused = open_with(
        &server,
        bob.token(),
        &alices,
        open_body("shell", Some(&step_up_id), None),
    )
    .await;
    assert_eq!(refused.status, 403);
    let reply = open_with(
        &server,
        bob.token(),
        &bobs,
        open_body("shell", Some(&step_up_id), None),
    )
    .await;
    assert_eq!(reply.status, 201, "{:?}", reply.body);
}

/// TM-T09 over the route: a second owner on a personal host.
async fn tm_t09_second_owner_on_a_personal_host(engine: Engine) {
    let World {
        server,
        alice,
        bob,
        link: _link,
        ..
    } = world(engine).await;
    let dora = invited_person(&server, &alice, "dora", "owner", 4).await;
    let personal = host_with(
        &server,
        &alice,
        "alices-laptop",
        Some(alice.id()),
        24,
        &[("alice-su", &[]), ("dora-su", &[])],
        ("personal", Some(alice.id())),
        false,
        &[(alice.id(), "alice-su"), (dora.id(), "dora-su")],
    )
    .await;
    let _link = connect(&server, &personal);
    let reply = open(&server, &dora, &personal, "shell", None).await;
    assert_problem(&reply, 403, "terminal_denied", Some("i6_holder_only"));
    let rows = denials(&server, "terminal.open", "i6_holder_only").await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].actor_id.as_deref(), Some(dora.id()));
    // The holder opens.
    let reply = open(&server, &alice, &personal, "shell", None).await;
    assert_eq!(reply.status, 201, "{:?}", reply.body);
    // bob (no grant, not the holder) gets no terminal at all.
    let reply = open(&server, &bob, &personal, "shell", None).await;
    assert_eq!(reply.status, 404, "{:?}", reply.body);
}

/// TM-T28 (a) over the route: owner and assignee with grant, both without an
/// assignment.
async fn tm_t28a_no_session_user_over_the_route(engine: Engine) {
    let World {
        server,
        alice,
        bob,
        link: _link,
        ..
    } = world(engine).await;
    let unassigned = host_with(
        &server,
        &alice,
        "fresh-box",
        Some(bob.id()),
        25,
        &[("alice-su", &[]), ("bob-su", &[])],
        ("none", None),
        false,
        &[],
    )
    .await;
    grant(&server, &alice, &unassigned, &bob).await;
    let _link = connect(&server, &unassigned);
    for person in [&alice, &bob] {
        let reply = open(&server, person, &unassigned, "shell", None).await;
        assert_problem(&reply, 403, "terminal_denied", Some("no_session_user"));
    }
    let rows = denials(&server, "terminal.open", "no_session_user").await;
    assert_eq!(rows.len(), 2);
    assert_eq!(session_count(&server).await, 0);
}

async fn host_not_connected_is_host_unavailable(engine: Engine) {
    let World {
        server,
        bob,
        host,
        link,
        ..
    } = world(engine).await;
    drop(link);
    let reply = open(&server, &bob, &host, "shell", None).await;
    assert_problem(&reply, 409, "host_unavailable", None);
    // Registered but its report not applied yet: not connected either.
    let (tx, _rx) = mpsc::channel(4);
    server
        .state
        .local_control_links()
        .register(uuid(&host), Uuid::from_u128(7), tx);
    let reply = open(&server, &bob, &host, "shell", None).await;
    assert_problem(&reply, 409, "host_unavailable", None);
    let rows = denials(&server, "terminal.open", "host_unavailable").await;
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0].details["host_id"], host.as_str());
    assert_eq!(session_count(&server).await, 0);
}

async fn profile_and_working_directory_must_be_reported(engine: Engine) {
    let World {
        server,
        bob,
        host,
        link: _link,
        ..
    } = world(engine).await;
    let reply = open(&server, &bob, &host, "zsh", None).await;
    assert_problem(&reply, 403, "terminal_denied", Some("profile_unknown"));
    // bob has one working directory: index 1 is outside his list (alice's
    // list has two, which does not count for bob).
    let reply = open(&server, &bob, &host, "claude", Some(1)).await;
    assert_problem(&reply, 403, "terminal_denied", Some("profile_unknown"));
    let reply = open(&server, &bob, &host, "claude", Some(0)).await;
    assert_eq!(reply.status, 201, "{:?}", reply.body);
    assert_eq!(
        denials(&server, "terminal.open", "profile_unknown")
            .await
            .len(),
        2
    );
    // The forms of wdi are the request's: 400.
    let reply = open(&server, &bob, &host, "claude", None).await;
    assert_problem(&reply, 400, "validation_failed", None);
    assert_eq!(
        reply.body["errors"],
        json!([{"pointer": "/workdir_index", "code": "required"}])
    );
    let reply = open(&server, &bob, &host, "shell", Some(0)).await;
    assert_eq!(
        reply.body["errors"],
        json!([{"pointer": "/workdir_index", "code": "not_allowed"}])
    );
    let step_up_id = step_up(&server, &bob).await;
    let mut body = open_body("shell", Some(&step_up_id), None);
    body["client_ephemeral_key_hash"] = json!("short");
    let reply = open_with(&server, bob.token(), &host, body).await;
    assert_eq!(
        reply.body["errors"],
        json!([{"pointer": "/client_ephemeral_key_hash", "code": "invalid_format"}])
    );
    let mut body = open_body("shell", Some(&step_up_id), None);
    body["columns"] = json!(0);
    let reply = open_with(&server, bob.token(), &host, body).await;
    assert_eq!(
        reply.body["errors"],
        json!([{"pointer": "/columns", "code": "out_of_range"}])
    );
    // The refusals left the step-up unconsumed.
    let reply = open_with(
        &server,
        bob.token(),
        &host,
        open_body("shell", Some(&step_up_id), None),
    )
    .await;
    assert_eq!(reply.status, 201, "{:?}", reply.body);
}

async fn session_limits_per_person_and_per_host(engine: Engine) {
    let World {
        server,
        alice,
        bob,
        host,
        link: _link,
        ..
    } = world(engine).await;
    // Per person: 2.
    opened(&server, &bob, &host).await;
    let second = opened(&server, &bob, &host).await;
    let reply = open(&server, &bob, &host, "shell", None).await;
    assert_problem(&reply, 403, "terminal_denied", Some("session_limit"));
    // A closed session no longer counts.
    let closed = post_empty(
        &server,
        &format!("/api/v1/terminal/sessions/{second}/close"),
        bob.token(),
    )
    .await;
    assert_eq!(closed.status, 200, "{:?}", closed.body);
    opened(&server, &bob, &host).await;
    // Per host: 3 (bob has 2 open; alice opens one, the fourth is refused).
    opened(&server, &alice, &host).await;
    let reply = open(&server, &alice, &host, "shell", None).await;
    assert_problem(&reply, 403, "terminal_denied", Some("session_limit"));
    assert_eq!(
        denials(&server, "terminal.open", "session_limit")
            .await
            .len(),
        2
    );
    let open_count: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM terminal_sessions WHERE state <> 'closed'")
            .fetch_one(server.state.db().pool())
            .await
            .unwrap();
    assert_eq!(open_count, 3);
}

/// N parallel openings: exactly the limit succeed, the rest are refused with
/// session_limit (never 503), per person and per host.
async fn session_limits_are_exact_under_concurrency(engine: Engine) {
    let World {
        server,
        alice,
        bob,
        host,
        link: _link,
        ..
    } = world(engine).await;
    // Per person: bob, 6 at once, limit 2.
    let mut bodies = Vec::new();
    for _ in 0..6 {
        let step_up_id = step_up(&server, &bob).await;
        bodies.push(open_body("shell", Some(&step_up_id), None));
    }
    let statuses = parallel_opens(&server, bob.token(), &host, bodies).await;
    assert_eq!(
        statuses.iter().filter(|(s, _)| *s == 201).count(),
        2,
        "{statuses:?}"
    );
    assert!(
        statuses
            .iter()
            .all(|(s, r)| *s == 201 || (*s == 403 && r == "session_limit")),
        "{statuses:?}"
    );
    // Per host: alice, 4 at once; 2 + 1 = the host's limit 3 (alice's own
    // limit is 2, so at most 1 more may succeed).
    let mut bodies = Vec::new();
    for _ in 0..4 {
        let step_up_id = step_up(&server, &alice).await;
        bodies.push(open_body("shell", Some(&step_up_id), None));
    }
    let statuses = parallel_opens(&server, alice.token(), &host, bodies).await;
    assert_eq!(
        statuses.iter().filter(|(s, _)| *s == 201).count(),
        1,
        "{statuses:?}"
    );
    assert!(
        statuses
            .iter()
            .all(|(s, r)| *s == 201 || (*s == 403 && r == "session_limit")),
        "{statuses:?}"
    );
    let open_count: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM terminal_sessions WHERE state <> 'closed'")
            .fetch_one(server.state.db().pool())
            .await
            .unwrap();
    assert_eq!(open_count, 3);
    // The refused openings left their step-ups unconsumed.
    let unconsumed: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM step_ups WHERE consumed_at IS NULL")
            .fetch_one(server.state.db().pool())
            .await
            .unwrap();
    assert_eq!(unconsumed, 7);
}

async fn parallel_opens(
    server: &TestServer,
    token: &str,
    host_id: &str,
    bodies: Vec<Value>,
) -> Vec<(u16, String)> {
    let url = server.url(&format!("/api/v1/hosts/{host_id}/terminal/sessions"));
    let tasks: Vec<_> = bodies
        .into_iter()
        .map(|body| {
            let client = server.client.clone();
            let url = url.clone();
            let token = token.to_owned();
            tokio::spawn(async move {
                let response = client
                    .post(url)
                    .bearer_auth(token)
                    .json(&body)
                    .send()
                    .await
                    .unwrap();
                let status = response.status().as_u16();
                let body: Value = response.json().await.unwrap();
                (
                    status,
                    body["reason"].as_str().unwrap_or_default().to_owned(),
                )
            })
        })
        .collect();
    let mut statuses = Vec::new();
    for task in tasks {
        statuses.push(task.await.unwrap());
    }
    statuses
}

async fn rate_limit_terminal_per_person(engine: Engine) {
    let config = format!("{CONFIG}rl:\n  terminal:\n    burst: 1\n    refill_per_minute: 1\n");
    let World {
        server,
        bob,
        host,
        link: _link,
        ..
    } = world_with(engine, &config).await;
    opened(&server, &bob, &host).await;
    let step_up_id = step_up(&server, &bob).await;
    let reply = open_with(
        &server,
        bob.token(),
        &host,
        open_body("shell", Some(&step_up_id), None),
    )
    .await;
    assert_problem(&reply, 429, "rate_limited", None);
    assert!(
        reply.headers.contains_key("retry-after"),
        "{:?}",
        reply.headers
    );
    server.clock.advance(Duration::from_secs(60));
    let reply = open_with(
        &server,
        bob.token(),
        &host,
        open_body("shell", Some(&step_up_id), None),
    )
    .await;
    assert_eq!(reply.status, 201, "{:?}", reply.body);
    // attachTerminalSession counts against the same bucket.
    let session_id = reply.body["session_id"].as_str().unwrap().to_owned();
    let step_up_id = step_up(&server, &bob).await;
    server.clock.set(server.clock.now_ms() - 30_000);
    let reply = attach_with(
        &server,
        bob.token(),
        &session_id,
        json!({"client_ephemeral_key_hash": cek(9), "step_up_id": step_up_id}),
    )
    .await;
    assert_problem(&reply, 429, "rate_limited", None);
    assert_eq!(reply.headers["retry-after"], "60");
}

// ---------------------------------------------------------------------------
// Attaching
// ---------------------------------------------------------------------------

async fn attach_with(server: &TestServer, token: &str, session_id: &str, body: Value) -> Reply {
    post(
        server,
        &format!("/api/v1/terminal/sessions/{session_id}/attach"),
        Some(token),
        body,
    )
    .await
}

async fn attach_step_up(server: &TestServer, person: &Person, session_id: &str) -> Reply {
    let step_up_id = step_up(server, person).await;
    attach_with(
        server,
        person.token(),
        session_id,
        json!({"client_ephemeral_key_hash": cek(9), "step_up_id": step_up_id}),
    )
    .await
}

async fn attach_with_step_up_issues_a_new_token(engine: Engine) {
    let World {
        server,
        alice,
        bob,
        host,
        mut link,
        ..
    } = world(engine).await;
    // An opening: att open again, with the working directory of the opening.
    let reply = open(&server, &bob, &host, "claude", Some(0)).await;
    assert_eq!(reply.status, 201, "{:?}", reply.body);
    let session_id = reply.body["session_id"].as_str().unwrap().to_owned();
    let first = claims(&server, reply.body["token"].as_str().unwrap()).await;
    session_open_of(link.next());
    let reply = attach_step_up(&server, &bob, &session_id).await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    let c = claims(&server, reply.body["token"].as_str().unwrap()).await;
    assert_eq!(
        (c.att, c.wdi, c.sid),
        (Att::Open, Some(0), uuid(&session_id))
    );
    assert_eq!(c.cek, [9; 32]);
    assert_ne!(c.jti, first.jti);
    let now = server.clock.now_ms();
    let stored = row(&server, &session_id).await;
    assert_eq!(
        stored.get::<Option<String>, _>("token_jti"),
        Some(c.jti.hyphenated().to_string())
    );
    assert_eq!(
        stored.get::<Option<i64>, _>("open_deadline_at"),
        Some(now + 20_000)
    );
    let signal = session_open_of(link.next());
    assert_eq!(signal.session_id, uuid(&session_id));
    assert_eq!(signal.expires_at, u64::try_from(now + 20_000).unwrap());

    // A started session: att attach, no wdi.
    set_state(&server, &session_id, "detached", Some(now)).await;
    let reply = attach_step_up(&server, &bob, &session_id).await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    let c = claims(&server, reply.body["token"].as_str().unwrap()).await;
    assert_eq!((c.att, c.wdi), (Att::Attach, None));
    assert_eq!(c.prf, "claude");
    let entries = audit_of(&server, "terminal.attach", "allow").await;
    assert_eq!(entries.len(), 2);
    assert_eq!(entries[1].details["quick_reattach"], false);
    assert_eq!(entries[1].details["session_id"], session_id.as_str());
    assert_eq!(
        entries[1].details["device_id"],
        bob.session.device_id.as_str()
    );

    // Someone else's session: 404, also for an owner.
    let reply = attach_step_up(&server, &alice, &session_id).await;
    assert_eq!(reply.status, 404, "{:?}", reply.body);
    // Without a step-up and without a proof: 401.
    let reply = attach_with(
        &server,
        bob.token(),
        &session_id,
        json!({"client_ephemeral_key_hash": cek(9)}),
    )
    .await;
    assert_problem(&reply, 401, "step_up_required", None);
    // A closed session: 409 invalid_state_transition.
    let closed = post_empty(
        &server,
        &format!("/api/v1/terminal/sessions/{session_id}/close"),
        bob.token(),
    )
    .await;
    assert_eq!(closed.status, 200);
    let reply = attach_step_up(&server, &bob, &session_id).await;
    assert_problem(&reply, 409, "invalid_state_transition", None);
}

/// `device_proof` for `session_id` signed by the device key of `seed`.
fn device_proof(seed: u8, session_id: &str, nonce: &str, cek: &str) -> Value {
    let key = ring::signature::Ed25519KeyPair::from_seed_unchecked(&[seed; 32]).unwrap();
    let message = format!("bothy.v1.quick_reattach\n{session_id}\n{nonce}\n{cek}");
    let signature = key.sign(message.as_bytes());
    json!({"nonce": nonce, "signature": b64::encode(signature.as_ref())})
}

async fn challenge(server: &TestServer, person: &Person, session_id: &str) -> String {
    let reply = post_empty(
        server,
        &format!("/api/v1/terminal/sessions/{session_id}/attach-challenge"),
        person.token(),
    )
    .await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    reply.body["nonce"].as_str().unwrap().to_owned()
}

async fn quick(server: &TestServer, person: &Person, seed: u8, session_id: &str) -> Reply {
    let nonce = challenge(server, person, session_id).await;
    quick_with(server, person, seed, session_id, &nonce).await
}

async fn quick_with(
    server: &TestServer,
    person: &Person,
    seed: u8,
    session_id: &str,
    nonce: &str,
) -> Reply {
    let cek = cek(10);
    attach_with(
        server,
        person.token(),
        session_id,
        json!({
            "client_ephemeral_key_hash": cek,
            "device_proof": device_proof(seed, session_id, nonce, &cek),
        }),
    )
    .await
}

/// TM-T12 (route part): quick reattach from the same device within the window.
async fn quick_reattach_needs_the_device_the_login_session_and_the_window(engine: Engine) {
    let World {
        server,
        bob,
        host,
        link: _link,
        ..
    } = world(engine).await;
    let session_id = opened(&server, &bob, &host).await;
    // Not detached: no quick reattach.
    set_state(&server, &session_id, "active", None).await;
    let reply = quick(&server, &bob, 2, &session_id).await;
    assert_problem(&reply, 401, "step_up_required", None);

    let detached_at = server.clock.now_ms();
    set_state(&server, &session_id, "detached", Some(detached_at)).await;
    // A proof by another key, and none at all.
    let reply = quick(&server, &bob, 99, &session_id).await;
    assert_problem(&reply, 401, "step_up_required", None);
    let reply = attach_with(
        &server,
        bob.token(),
        &session_id,
        json!({"client_ephemeral_key_hash": cek(10)}),
    )
    .await;
    assert_problem(&reply, 401, "step_up_required", None);
    // The same device and login session within the window: no step-up.
    server.clock.advance(Duration::from_secs(59));
    let nonce = challenge(&server, &bob, &session_id).await;
    let reply = quick_with(&server, &bob, 2, &session_id, &nonce).await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    let c = claims(&server, reply.body["token"].as_str().unwrap()).await;
    assert_eq!((c.att, c.cek), (Att::Attach, [10; 32]));
    let entries = audit_of(&server, "terminal.attach", "allow").await;
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].details["quick_reattach"], true);
    // The nonce is single-use: the grant replaced the jti it was bound to.
    let reply = quick_with(&server, &bob, 2, &session_id, &nonce).await;
    assert_problem(&reply, 401, "step_up_required", None);
    // After the window: a step-up again.
    server.clock.advance(Duration::from_secs(2));
    let reply = quick(&server, &bob, 2, &session_id).await;
    assert_problem(&reply, 401, "step_up_required", None);
    // Another device of the same person (a new login) within the window: 401.
    let detached_at = server.clock.now_ms();
    set_state(&server, &session_id, "detached", Some(detached_at)).await;
    let other = Person {
        session: bob.enrolled.login(&server, 5).await,
        enrolled: Enrolled {
            username: bob.enrolled.username.clone(),
            password: bob.enrolled.password.clone(),
            person_id: bob.enrolled.person_id.clone(),
            otpauth_uri: bob.enrolled.otpauth_uri.clone(),
            totp: bob.enrolled.totp.clone(),
        },
    };
    let reply = quick(&server, &other, 5, &session_id).await;
    assert_problem(&reply, 401, "step_up_required", None);
    // With a step-up the other device attaches; the session is now its.
    let reply = attach_step_up(&server, &other, &session_id).await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    let stored = row(&server, &session_id).await;
    assert_eq!(
        stored.get::<Option<String>, _>("device_id").as_deref(),
        Some(other.session.device_id.as_str())
    );

    for code in [
        "quick_reattach_not_detached",
        "device_proof_invalid",
        "step_up_missing",
        "quick_reattach_window_passed",
        "quick_reattach_other_device",
    ] {
        assert!(
            !denials(&server, "terminal.attach", code).await.is_empty(),
            "{code}"
        );
    }
}

/// The web console (12, 13): step-ups only by passkey (TM-T07 "in the console
/// with a password step-up"), and never a quick reattach (TM-T12 "web
/// console within the window without a passkey": 401 with reason
/// `passkey_required`). Its sessions carry the console's login session as
/// `dev` and no device (D-73).
async fn console_open_and_attach_take_only_a_passkey_step_up(engine: Engine) {
    let World {
        server,
        bob,
        host,
        mut link,
        ..
    } = world(engine).await;
    let mut key = console_common::add_passkey(&server, &bob).await;
    let console = console_common::console_login(&server, &bob, &mut key).await;
    let path = format!("/api/v1/hosts/{host}/terminal/sessions");
    let open = |step_up_id: Option<&str>| open_body("shell", step_up_id, None);

    // No step-up: 401 step_up_required.
    let reply = console_common::console_post(&server, &console, &path, Some(open(None))).await;
    assert_problem(&reply, 401, "step_up_required", None);
    // A TOTP step-up of the console's login session (the step-up route never
    // makes one for the console; written here as a stored row would be):
    // 401 with reason passkey_required, and it stays unconsumed.
    let now = server.clock.now_ms();
    let totp_step_up = bothy_proto::ids::uuid_v7(u64::try_from(now).unwrap())
        .unwrap()
        .hyphenated()
        .to_string();
    sqlx::query(
        "INSERT INTO step_ups (id, login_session_id, method, created_at, expires_at, consumed_at) \
         VALUES ($1, $2, 'totp', $3, $4, NULL)",
    )
    .bind(&totp_step_up)
    .bind(&console.login_session_id)
    .bind(now)
    .bind(now + 60_000)
    .execute(server.state.db().pool())
    .await
    .unwrap();
    let reply =
        console_common::console_post(&server, &console, &path, Some(open(Some(&totp_step_up))))
            .await;
    assert_problem(&reply, 401, "step_up_required", Some("passkey_required"));
    let consumed: Option<i64> =
        sqlx::query_scalar("SELECT consumed_at FROM step_ups WHERE id = $1")
            .bind(&totp_step_up)
            .fetch_one(server.state.db().pool())
            .await
            .unwrap();
    assert_eq!(consumed, None, "a refused opening consumes nothing");
    assert_eq!(session_count(&server).await, 0);
    assert_eq!(
        denials(&server, "terminal.open", "passkey_required")
            .await
            .len(),
        1
    );
    link.none();

    // A passkey step-up: 201; dev is the console's login session, no device.
    let step_up_id = console_common::console_step_up(&server, &console, &mut key).await;
    let reply =
        console_common::console_post(&server, &console, &path, Some(open(Some(&step_up_id)))).await;
    assert_eq!(reply.status, 201, "{:?}", reply.body);
    let session_id = reply.body["session_id"].as_str().unwrap().to_owned();
    let c = claims(&server, reply.body["token"].as_str().unwrap()).await;
    assert_eq!(c.dev, uuid(&console.login_session_id));
    let stored = row(&server, &session_id).await;
    assert_eq!(stored.get::<Option<String>, _>("device_id"), None);
    assert_eq!(
        stored.get::<String, _>("login_session_id"),
        console.login_session_id
    );
    session_open_of(link.next());

    // Detached within terminal.quick_reattach_window: no quick reattach for
    // the console, with or without a proof.
    let detached_at = server.clock.now_ms();
    set_state(&server, &session_id, "detached", Some(detached_at)).await;
    let attach = format!("/api/v1/terminal/sessions/{session_id}/attach");
    let reply = console_common::console_post(
        &server,
        &console,
        &attach,
        Some(json!({"client_ephemeral_key_hash": cek(11)})),
    )
    .await;
    assert_problem(&reply, 401, "step_up_required", Some("passkey_required"));
    assert_eq!(
        denials(&server, "terminal.attach", "quick_reattach_console")
            .await
            .len(),
        1
    );
    link.none();
    // With a passkey step-up the console attaches.
    let step_up_id = console_common::console_step_up(&server, &console, &mut key).await;
    let reply = console_common::console_post(
        &server,
        &console,
        &attach,
        Some(json!({"client_ephemeral_key_hash": cek(11), "step_up_id": step_up_id})),
    )
    .await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    let c = claims(&server, reply.body["token"].as_str().unwrap()).await;
    assert_eq!(
        (c.att, c.dev),
        (Att::Attach, uuid(&console.login_session_id))
    );
    session_open_of(link.next());
}

// ---------------------------------------------------------------------------
// Closing and reading
// ---------------------------------------------------------------------------

async fn close_by_person_and_by_owner(engine: Engine) {
    let World {
        server,
        alice,
        bob,
        carol,
        host,
        mut link,
    } = world(engine).await;
    let own = opened(&server, &bob, &host).await;
    let by_owner = opened(&server, &bob, &host).await;
    session_open_of(link.next());
    session_open_of(link.next());
    let path = |id: &str| format!("/api/v1/terminal/sessions/{id}/close");
    // Another member: 404.
    let reply = post_empty(&server, &path(&own), carol.token()).await;
    assert_problem(&reply, 404, "not_found", None);
    let reply = post_empty(&server, &path(&own), bob.token()).await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    assert_eq!(
        reply.body,
        json!({"session_id": own, "state": "closed", "close_reason": "client_closed"})
    );
    // The control connection's log tail tells the host (D-62), not the route.
    link.none();
    let reply = post_empty(&server, &path(&by_owner), alice.token()).await;
    assert_eq!(reply.body["close_reason"], "closed_by_owner");
    let reply = post_empty(&server, &path(&by_owner), alice.token()).await;
    assert_problem(&reply, 409, "invalid_state_transition", None);
    let stored = row(&server, &by_owner).await;
    assert_eq!(stored.get::<String, _>("state"), "closed");
    assert_eq!(
        stored.get::<Option<String>, _>("close_reason").as_deref(),
        Some("closed_by_owner")
    );
    let mut entries = audit_of(&server, "terminal.close", "allow").await;
    assert_eq!(entries.len(), 2);
    // Both entries carry the same manual-clock millisecond, whose audit order
    // is not defined: compare them in the order of the closes.
    entries.sort_by_key(|entry| entry.actor_id.as_deref() != Some(bob.id()));
    assert_eq!(entries[0].actor_id.as_deref(), Some(bob.id()));
    assert_eq!(
        entries[0].details,
        json!({"session_id": own, "close_reason": "client_closed", "closed_by": "person"})
    );
    assert_eq!(entries[1].actor_id.as_deref(), Some(alice.id()));
    assert_eq!(
        entries[1].details,
        json!({"session_id": by_owner, "close_reason": "closed_by_owner", "closed_by": "owner"})
    );
    let terminated = audit_of(&server, "terminal.terminate", "allow").await;
    assert_eq!(terminated.len(), 2);
    assert_eq!(
        denials(&server, "terminal.close", "not_found").await.len(),
        1
    );
    assert_eq!(
        denials(&server, "terminal.close", "session_closed")
            .await
            .len(),
        1
    );
}

async fn reads_show_own_sessions_and_owners_all(engine: Engine) {
    let World {
        server,
        alice,
        bob,
        carol,
        host,
        link: _link,
        ..
    } = world(engine).await;
    let bobs = opened(&server, &bob, &host).await;
    let created = server.clock.now_ms();
    let alices = opened(&server, &alice, &host).await;
    server.clock.advance(Duration::from_secs(3600));

    let reply = get(
        &server,
        &format!("/api/v1/terminal/sessions/{bobs}"),
        Some(bob.token()),
    )
    .await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    assert_eq!(reply.body["state"], "opening");
    assert_eq!(reply.body["profile"], "shell");
    assert_eq!(reply.body["host_id"], host.as_str());
    assert_eq!(reply.body["created_at"], created);
    assert_eq!(reply.body["max_ends_at"], created + 12 * 3600 * 1000);
    assert_eq!(
        reply.body["remaining_ms"],
        created + 12 * 3600 * 1000 - server.clock.now_ms()
    );
    assert!(reply.body.get("started_at").is_none());
    // An owner reads it; another member does not see it.
    let reply = get(
        &server,
        &format!("/api/v1/terminal/sessions/{bobs}"),
        Some(alice.token()),
    )
    .await;
    assert_eq!(reply.status, 200);
    let reply = get(
        &server,
        &format!("/api/v1/terminal/sessions/{bobs}"),
        Some(carol.token()),
    )
    .await;
    assert_problem(&reply, 404, "not_found", None);

    let ids = |reply: &Reply| -> Vec<String> {
        reply.body["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["session_id"].as_str().unwrap().to_owned())
            .collect()
    };
    let reply = get(&server, "/api/v1/terminal/sessions", Some(bob.token())).await;
    assert_eq!(ids(&reply), std::slice::from_ref(&bobs));
    let reply = get(&server, "/api/v1/terminal/sessions", Some(carol.token())).await;
    assert!(ids(&reply).is_empty());
    let reply = get(
        &server,
        &format!("/api/v1/terminal/sessions?host_id={host}"),
        Some(bob.token()),
    )
    .await;
    assert_eq!(ids(&reply), std::slice::from_ref(&bobs));
    let reply = get(
        &server,
        &format!("/api/v1/terminal/sessions?host_id={host}"),
        Some(alice.token()),
    )
    .await;
    assert_eq!(ids(&reply), [alices.clone(), bobs.clone()]);
    let reply = get(&server, "/api/v1/terminal/sessions", Some(alice.token())).await;
    assert_eq!(ids(&reply), [alices]);
    let reply = get(
        &server,
        "/api/v1/terminal/sessions?host_id=x",
        Some(alice.token()),
    )
    .await;
    assert_eq!(
        reply.body["errors"],
        json!([{"pointer": "/query/host_id", "code": "invalid"}])
    );
}

/// Issue 15 item 11: the list pages by a cursor (`after` = `next` of the
/// previous page, newest first, no row repeated or skipped when a session is
/// opened between two pages) and filters open or closed sessions; bad
/// parameters are 400 with their pointer.
async fn the_list_pages_by_cursor_and_filters_by_state(engine: Engine) {
    let World {
        server,
        bob,
        host,
        link: _link,
        ..
    } = world(engine).await;
    let mut closed = Vec::new();
    for _ in 0..5 {
        let id = opened(&server, &bob, &host).await;
        let path = format!("/api/v1/terminal/sessions/{id}/close");
        let reply = post_empty(&server, &path, bob.token()).await;
        assert_eq!(reply.status, 200, "{:?}", reply.body);
        closed.push(id);
        server.clock.advance(Duration::from_millis(1));
    }
    let open_one = opened(&server, &bob, &host).await;
    let ids = |reply: &Reply| -> Vec<String> {
        assert_eq!(reply.status, 200, "{:?}", reply.body);
        reply.body["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["session_id"].as_str().unwrap().to_owned())
            .collect()
    };
    let mut newest_first: Vec<String> = closed.iter().rev().cloned().collect();
    newest_first.insert(0, open_one.clone());
    // Pages of two, following `next`; a session opened between two pages
    // lands before the cursor and changes nothing behind it.
    let mut seen = Vec::new();
    let mut path = "/api/v1/terminal/sessions?limit=2".to_owned();
    let mut pages = 0;
    loop {
        let reply = get(&server, &path, Some(bob.token())).await;
        seen.extend(ids(&reply));
        pages += 1;
        if pages == 1 {
            opened(&server, &bob, &host).await;
        }
        match reply.body.get("next").and_then(Value::as_str) {
            Some(next) => path = format!("/api/v1/terminal/sessions?limit=2&after={next}"),
            None => break,
        }
    }
    assert_eq!(seen, newest_first);
    assert_eq!(pages, 3, "a full last page has no next");
    // Open only, closed only, with the host filter.
    let reply = get(
        &server,
        "/api/v1/terminal/sessions?state=open",
        Some(bob.token()),
    )
    .await;
    assert_eq!(ids(&reply).len(), 2);
    assert!(ids(&reply).contains(&open_one));
    let reply = get(
        &server,
        &format!("/api/v1/terminal/sessions?state=closed&host_id={host}&limit=500"),
        Some(bob.token()),
    )
    .await;
    assert_eq!(
        ids(&reply),
        closed.iter().rev().cloned().collect::<Vec<_>>()
    );
    assert!(reply.body.get("next").is_none());
    // An unknown cursor gives an empty page.
    let unknown = uuid::Uuid::from_u128(9);
    let reply = get(
        &server,
        &format!("/api/v1/terminal/sessions?after={unknown}"),
        Some(bob.token()),
    )
    .await;
    assert!(ids(&reply).is_empty());
    for (query, pointer) in [
        ("limit=0", "/query/limit"),
        ("limit=501", "/query/limit"),
        ("state=detached", "/query/state"),
        ("after=x", "/query/after"),
    ] {
        let reply = get(
            &server,
            &format!("/api/v1/terminal/sessions?{query}"),
            Some(bob.token()),
        )
        .await;
        assert_eq!(reply.status, 400, "{query}: {:?}", reply.body);
        assert_eq!(reply.body["errors"][0]["pointer"], pointer, "{query}");
    }
}

both_engines!(
    the_list_pages_by_cursor_and_filters_by_state,
    open_answers_every_member_and_claim,
    tm_t07_open_needs_a_fresh_unconsumed_step_up,
    tm_t17_agents_and_apps_never_open_attach_or_close,
    tm_t08_non_owner_over_the_route,
    tm_t09_second_owner_on_a_personal_host,
    tm_t28a_no_session_user_over_the_route,
    host_not_connected_is_host_unavailable,
    profile_and_working_directory_must_be_reported,
    session_limits_per_person_and_per_host,
    session_limits_are_exact_under_concurrency,
    rate_limit_terminal_per_person,
    attach_with_step_up_issues_a_new_token,
    quick_reattach_needs_the_device_the_login_session_and_the_window,
    console_open_and_attach_take_only_a_passkey_step_up,
    close_by_person_and_by_owner,
    reads_show_own_sessions_and_owners_all,
);
