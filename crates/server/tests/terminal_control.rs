//! The control connection `GET /api/v1/hosts/connect` (spec 24 sections 3.4,
//! 3.5, 6.2, 10.1, 10.2, 13) against the real server on port 0 over TLS with a
//! real WebSocket, on both engines, with the test host peer of
//! `terminal_common::host_control`.
//!
//! Time: the proof's `iat` bounds and the connection's deadlines
//! (host_auth_timeout, the heartbeat deadline) use the server's manual clock,
//! which a test moves (docs/decisions.md D-87); only the duplicate probe, a
//! network answer, is a short real timeout where a test waits for it. Nothing
//! sleeps, every test waits on the socket.
//!
//! Terminal sessions are written directly into the test database (as
//! `hosts_manage.rs` does): the rows look as the terminal module writes them.

#![allow(clippy::unwrap_used)] // test bodies are plain fns called by the generated #[test]s

use bothy_testkit as support;
use bothy_testkit::hosts as hosts_common;
use bothy_testkit::identity as identity_common;
use bothy_testkit::terminal as terminal_common;

use bothy_proto::codes::{CloseDetail, CloseReason};
use bothy_proto::control::{
    ErrorCode, Heartbeat, HostMessage, HostOp, HostState, LlmCredentials, ServerMessage,
};
use std::time::Duration;

use bothy_server::clock::Clock;
use bothy_server::db::Engine;
use bothy_server::events::{Delivery, EphemeralKind};
use bothy_server::terminal::keys;
use hosts_common::*;
use identity_common::audit_of;
use serde_json::{Value, json};
use sqlx::Row;
use support::both_engines;
use support::server::TestServer;
use terminal_common::host_control::{HostControl, report};
use terminal_common::host_data;
use tokio_tungstenite::tungstenite::Message;
use uuid::Uuid;

fn uuid(text: &str) -> Uuid {
    Uuid::parse_str(text).unwrap()
}

struct World {
    server: TestServer,
    owner: Person,
    host: ActiveHost,
    host_id: Uuid,
}

/// An owner and an active host with the session users `alice_os` and `spare`,
/// `alice_os` assigned to the owner.
async fn world_with(engine: Engine, extra_yaml: &str) -> World {
    let server = TestServer::start_with(engine, extra_yaml).await;
    let owner = owner_person(&server, "olivia").await;
    let host = active_host(
        &server,
        &owner,
        "build box",
        None,
        7,
        &["alice_os", "spare"],
        &[(owner.id(), "alice_os")],
    )
    .await;
    let host_id = uuid(&host.host_id);
    World {
        server,
        owner,
        host,
        host_id,
    }
}

async fn world(engine: Engine) -> World {
    world_with(engine, "").await
}

/// Inserts a session of `person` on the host in `state`; its ID.
async fn insert_session(server: &TestServer, host_id: Uuid, person: &Person, state: &str) -> Uuid {
    let now = server.clock.now_ms();
    let id = bothy_proto::ids::uuid_v7(u64::try_from(now).unwrap()).unwrap();
    let pool = server.state.db().pool();
    let assignment: String = sqlx::query_scalar(
        "SELECT id FROM host_session_users WHERE host_id = $1 AND person_id = $2 \
         AND ended_at IS NULL",
    )
    .bind(host_id.to_string())
    .bind(person.id().to_owned())
    .fetch_one(pool)
    .await
    .unwrap();
    let started = if state == "opening" { None } else { Some(now) };
    sqlx::query(
        "INSERT INTO terminal_sessions (id, host_id, person_id, login_session_id, device_id, \
         host_session_user_id, profile, state, close_reason, close_detail, created_at, \
         started_at, ended_at, last_input_at, bytes_in, bytes_out, version) \
         VALUES ($1, $2, $3, $4, $5, $6, 'shell', $7, NULL, NULL, $8, $9, NULL, $8, 0, 0, 1)",
    )
    .bind(id.to_string())
    .bind(host_id.to_string())
    .bind(person.id().to_owned())
    .bind(person.session.login_session_id.clone())
    .bind(person.session.device_id.clone())
    .bind(assignment)
    .bind(state.to_owned())
    .bind(now)
    .bind(started)
    .execute(pool)
    .await
    .unwrap();
    id
}

/// `(state, close_reason, close_detail)` of a session.
async fn session_row(server: &TestServer, id: Uuid) -> (String, Option<String>, Option<String>) {
    let row = sqlx::query(
        "SELECT state, close_reason, close_detail FROM terminal_sessions WHERE id = $1",
    )
    .bind(id.to_string())
    .fetch_one(server.state.db().pool())
    .await
    .unwrap();
    (
        row.get("state"),
        row.get("close_reason"),
        row.get("close_detail"),
    )
}

async fn session_times(server: &TestServer, id: Uuid) -> (Option<i64>, Option<i64>) {
    let row = sqlx::query("SELECT started_at, detached_at FROM terminal_sessions WHERE id = $1")
        .bind(id.to_string())
        .fetch_one(server.state.db().pool())
        .await
        .unwrap();
    (row.get("started_at"), row.get("detached_at"))
}

async fn set_host_state(server: &TestServer, host_id: Uuid, state: &str) {
    let now = server.clock.now_ms();
    let reason = (state == "disabled").then_some("owner");
    let at = (state == "disabled").then_some(now);
    sqlx::query(
        "UPDATE hosts SET state = $1, disabled_reason = $2, disabled_at = $3 WHERE id = $4",
    )
    .bind(state.to_owned())
    .bind(reason)
    .bind(at)
    .bind(host_id.to_string())
    .execute(server.state.db().pool())
    .await
    .unwrap();
}

/// Sends `text` as the first frame after hello and returns the close.
async fn refused_with_text(server: &TestServer, text: &str) -> (u16, String) {
    let mut control = HostControl::connect(server).await;
    control.send_text(text).await;
    control.closed().await
}

async fn refused_with(server: &TestServer, build: impl FnOnce(&HostControl) -> HostMessage) -> u16 {
    let mut control = HostControl::connect(server).await;
    let message = build(&control);
    control.send(&message).await;
    control.closed().await.0
}

/// The `d` of an identify as JSON, for shapes the typed encoder cannot make.
fn identify_json(control: &HostControl, keys: &HostKeys, host_id: Uuid) -> Value {
    control.identify_for(keys, host_id, &[]).to_value()
}

fn frame(op: &str, d: Value) -> String {
    json!({"op": op, "d": d}).to_string()
}

// ---------------------------------------------------------------------------
// Login

async fn hello_and_ready(engine: Engine) {
    let World {
        server,
        host,
        host_id,
        ..
    } = world(engine).await;
    let mut control = HostControl::connect(&server).await;
    let hello = control.hello.clone();
    assert_eq!(hello.protocol_versions, vec![1]);
    assert_eq!(
        hello.server_time,
        u64::try_from(server.clock.now_ms()).unwrap()
    );
    assert_eq!(hello.heartbeat_interval_ms, 20_000);
    assert_eq!(hello.heartbeat_miss_limit, 3);
    assert!(!hello.jwks.is_empty(), "the JWKS of purpose terminal");
    let other = HostControl::connect(&server).await;
    assert_ne!(
        hello.challenge, other.hello.challenge,
        "a fresh challenge per connection"
    );

    let ready = control.identify(&host.keys, host_id, &[]).await;
    assert_eq!(ready.host_id, host_id);
    assert_eq!(ready.state, HostState::Active);
    assert_eq!(ready.llm_credentials, LlmCredentials::None);
    // Registered, but not connected before the first report.
    assert!(
        server
            .state
            .local_control_links()
            .conn_id(host_id)
            .is_some()
    );
    assert!(!server.state.control_links().is_connected(host_id));
    let row = sqlx::query("SELECT last_seen_at FROM hosts WHERE id = $1")
        .bind(host_id.to_string())
        .fetch_one(server.state.db().pool())
        .await
        .unwrap();
    assert_eq!(
        row.get::<Option<i64>, _>("last_seen_at"),
        Some(server.clock.now_ms())
    );

    // A second identify after ready: 4002.
    let again = control.identify_for(&host.keys, host_id, &[]);
    control.send(&HostMessage::Identify(again)).await;
    assert_eq!(control.closed().await.0, 4002);
}

async fn identify_refusals_in_order(engine: Engine) {
    let World {
        server,
        owner,
        host,
        host_id,
    } = world(engine).await;
    let keys = &host.keys;

    // Step 1: a frame that fails decoding, another op first.
    assert_eq!(refused_with_text(&server, "not json").await.0, 4002);
    assert_eq!(
        refused_with_text(&server, &frame("nope", json!({})))
            .await
            .0,
        4002
    );
    assert_eq!(
        refused_with_text(&server, &frame("hello", json!({})))
            .await
            .0,
        4002,
        "a server op"
    );
    assert_eq!(
        refused_with(&server, |_| HostMessage::Heartbeat(
            bothy_proto::control::Heartbeat { active_sessions: 0 }
        ))
        .await,
        4113
    );
    assert_eq!(
        refused_with(&server, |_| HostMessage::Report(report(&["alice_os"]))).await,
        4113
    );
    {
        let mut control = HostControl::connect(&server).await;
        ws_binary(&mut control).await;
        assert_eq!(control.closed().await.0, 4002);
    }

    // Step 2 before the proof: a bad proof with an unknown version is 4114.
    assert_eq!(
        refused_with(&server, |c| {
            let mut identify = c.identify_for(keys, host_id, &[]);
            identify.protocol_version = 2;
            identify.proof = "x".into();
            HostMessage::Identify(identify)
        })
        .await,
        4114
    );

    // Step 3.
    {
        let mut control = HostControl::connect(&server).await;
        let mut d = identify_json(&control, keys, host_id);
        d.as_object_mut().unwrap().remove("live_sessions");
        control.send_text(&frame("identify", d)).await;
        assert_eq!(control.closed().await.0, 4002, "live_sessions absent");
    }
    assert_eq!(
        refused_with(&server, |c| {
            let mut identify = c.identify_for(keys, host_id, &[]);
            identify.session_id = Some(host_id);
            HostMessage::Identify(identify)
        })
        .await,
        4002,
        "session_id present"
    );
    assert_eq!(
        refused_with(&server, |c| {
            let mut identify = c.identify_for(keys, host_id, &[]);
            identify.host_version = "v1.4.0".into();
            HostMessage::Identify(identify)
        })
        .await,
        4002,
        "host_version not SemVer"
    );

    // Step 4: 4110.
    let unknown = Uuid::from_u128(0x0192_0000_0000_7000_8000_0000_0000_0001);
    assert_eq!(
        refused_with(&server, |c| HostMessage::Identify(c.identify_for(
            keys,
            unknown,
            &[]
        )))
        .await,
        4110,
        "no such host"
    );
    let stranger = HostKeys::generate(99);
    assert_eq!(
        refused_with(&server, |c| HostMessage::Identify(c.identify_for(
            &stranger,
            host_id,
            &[]
        )))
        .await,
        4110,
        "a kid other than auth_jkt"
    );
    let (pairing_id, _code) = create_host(&server, &owner, "fresh box", None).await;
    let pairing_id = uuid(&pairing_id);
    assert_eq!(
        refused_with(&server, |c| HostMessage::Identify(c.identify_for(
            keys,
            pairing_id,
            &[]
        )))
        .await,
        4110,
        "a host in pairing"
    );

    // Step 4: 4113.
    assert_eq!(
        refused_with(&server, |c| {
            let mut identify = c.identify_for(keys, host_id, &[]);
            let mut proof = identify.proof.clone();
            let last = proof.pop().unwrap();
            proof.push(if last == 'A' { 'B' } else { 'A' });
            identify.proof = proof;
            HostMessage::Identify(identify)
        })
        .await,
        4113,
        "bad signature"
    );
    assert_eq!(
        refused_with(&server, |c| {
            let mut identify = c.identify_for(keys, host_id, &[]);
            identify.proof = "only.two".into();
            HostMessage::Identify(identify)
        })
        .await,
        4113,
        "a malformed proof"
    );
    assert_eq!(
        refused_with(&server, |c| {
            let mut identify = c.identify_for(keys, host_id, &[]);
            identify.proof = bothy_proto::jws::HostAuthClaims {
                challenge: [7; 32],
                host_id,
                iat: c.hello_iat(),
            }
            .sign(&keys.auth);
            HostMessage::Identify(identify)
        })
        .await,
        4113,
        "another challenge"
    );
    assert_eq!(
        refused_with(&server, |c| {
            let mut identify = c.identify_for(keys, host_id, &[]);
            identify.proof = c.proof(keys, unknown, c.hello_iat());
            HostMessage::Identify(identify)
        })
        .await,
        4113,
        "a host_id claim other than identify.host_id"
    );
    // auth.clock_leeway is 30 s by default.
    assert_eq!(
        refused_with(&server, |c| {
            let mut identify = c.identify_for(keys, host_id, &[]);
            identify.proof = c.proof(keys, host_id, c.hello_iat() - 31);
            HostMessage::Identify(identify)
        })
        .await,
        4113,
        "iat before hello.server_time minus the leeway"
    );
    assert_eq!(
        refused_with(&server, |c| {
            let mut identify = c.identify_for(keys, host_id, &[]);
            identify.proof = c.proof(keys, host_id, c.hello_iat() + 31);
            HostMessage::Identify(identify)
        })
        .await,
        4113,
        "iat after now plus the leeway"
    );
    // The bounds themselves pass.
    let mut control = HostControl::connect(&server).await;
    let mut identify = control.identify_for(keys, host_id, &[]);
    identify.proof = control.proof(keys, host_id, control.hello_iat() - 30);
    control.send(&HostMessage::Identify(identify)).await;
    assert!(matches!(control.message().await, ServerMessage::Ready(_)));
    drop(control);

    // Step 5: 4111.
    set_host_state(&server, host_id, "disabled").await;
    assert_eq!(
        refused_with(&server, |c| HostMessage::Identify(c.identify_for(
            keys,
            host_id,
            &[]
        )))
        .await,
        4111,
        "disabled"
    );
    set_host_state(&server, host_id, "retired").await;
    assert_eq!(
        refused_with(&server, |c| HostMessage::Identify(c.identify_for(
            keys,
            host_id,
            &[]
        )))
        .await,
        4111,
        "retired"
    );

    // Refusals of an existing host are audited as host.connect denials.
    let denials: Vec<Value> = audit_of(&server, "host.connect", "deny")
        .await
        .into_iter()
        .map(|row| row.details)
        .collect();
    let codes: Vec<&str> = denials
        .iter()
        .map(|d| d["reason_code"].as_str().unwrap())
        .collect();
    assert!(codes.contains(&"host_unpaired"));
    assert!(codes.contains(&"host_auth_failed"));
    assert!(codes.contains(&"host_disabled"));
    assert!(
        denials
            .iter()
            .all(|d| d["host_id"] != json!(unknown.to_string())),
        "an unknown host ID writes no entry"
    );
}

async fn ws_binary(control: &mut HostControl) {
    support::ws::send(
        &mut control.ws,
        tokio_tungstenite::tungstenite::Message::Binary(vec![1, 2, 3].into()),
    )
    .await;
}

async fn auth_timeout_is_4113(engine: Engine) {
    let World {
        server,
        host,
        host_id,
        ..
    } = world(engine).await;
    // One millisecond before terminal.host_auth_timeout (10 s) the login
    // still goes through.
    let mut control = HostControl::connect(&server).await;
    server.clock.advance(Duration::from_millis(9_999));
    control.identify(&host.keys, host_id, &[]).await;
    drop(control);
    // The host sends nothing; at the deadline the server closes.
    let mut control = HostControl::connect(&server).await;
    server.clock.advance(Duration::from_secs(10));
    assert_eq!(
        control.closed().await,
        (4113, "host_auth_failed".to_owned())
    );
}

async fn malformed_frames_after_ready_are_4002(engine: Engine) {
    let World {
        server,
        host,
        host_id,
        ..
    } = world(engine).await;
    for bad in [
        "{".to_owned(),
        frame("nope", json!({})),
        frame("session.open", json!({})),
        frame("heartbeat", json!({"active_sessions": 0, "extra": 1})),
    ] {
        let mut control = HostControl::login(&server, &host.keys, host_id).await;
        control.send_text(&bad).await;
        assert_eq!(control.closed().await.0, 4002, "{bad}");
    }
    let mut control = HostControl::login(&server, &host.keys, host_id).await;
    ws_binary(&mut control).await;
    assert_eq!(control.closed().await.0, 4002);
    // Over sync.ws_max_frame_bytes (65536): 4002 frame_too_large.
    let mut control = HostControl::login(&server, &host.keys, host_id).await;
    control.send_text(&"x".repeat(70_000)).await;
    assert_eq!(control.closed().await, (4002, "frame_too_large".to_owned()));
}

async fn later_ops_reauthorize(engine: Engine) {
    let World {
        server,
        owner,
        host,
        host_id,
    } = world(engine).await;
    let mut control = HostControl::login(&server, &host.keys, host_id).await;
    // A change written behind the server's back (no host.updated): the next
    // op reads it.
    set_host_state(&server, host_id, "disabled").await;
    control.heartbeat_send().await;
    assert_eq!(control.closed().await.0, 4111);

    set_host_state(&server, host_id, "active").await;
    let mut control = HostControl::login(&server, &host.keys, host_id).await;
    // A re-pairing (new code) drops the keys: its host.updated closes the
    // connection at once with 4110 (9 terminal.host_close), no op needed.
    let _ = new_pairing_code(&server, &owner, &host.host_id).await;
    assert_eq!(control.closed().await, (4110, "host_unpaired".to_owned()));
}

// ---------------------------------------------------------------------------
// Report

async fn report_applied_and_connected(engine: Engine) {
    let World {
        server,
        owner,
        host,
        host_id,
    } = world(engine).await;
    let mut presence = server
        .state
        .events()
        .subscribe_from(server.state.events().position());
    let mut control = HostControl::login(&server, &host.keys, host_id).await;
    let versions_before = host_updated_events(&server, &host.host_id).await.len();

    // An invalid report: error validation_failed, nothing stored, still open.
    let mut invalid = report(&["alice_os"]);
    invalid.doctor.pop();
    control.send(&HostMessage::Report(invalid)).await;
    match control.message().await {
        ServerMessage::Error(error) => {
            assert_eq!(error.op, HostOp::Report);
            assert_eq!(error.code, ErrorCode::ValidationFailed);
            assert!(!error.errors.unwrap().is_empty());
        }
        other => panic!("expected error, got {other:?}"),
    }
    assert!(!server.state.control_links().is_connected(host_id));

    let mut changed = report(&["alice_os", "spare"]);
    changed.os_version = "Debian 13".into();
    changed.require_local_confirm = true;
    control.send(&HostMessage::Report(changed.clone())).await;
    control.wait_connected(&server, host_id).await;
    let read = get_host(&server, owner.token(), &host.host_id).await;
    assert_eq!(read.status, 200);
    let body = &read.body;
    assert_eq!(body["connected"], true);
    assert_eq!(body["reported_os_version"], "Debian 13");
    assert_eq!(body["reported_require_local_confirm"], true);
    assert_eq!(body["reported_is_server_host"], false);
    assert_eq!(
        body["reported_session_users"],
        json!([{"name": "alice_os", "workdirs": []}, {"name": "spare", "workdirs": []}])
    );
    assert_eq!(body["reported_doctor"].as_array().unwrap().len(), 11);
    assert_eq!(
        host_updated_events(&server, &host.host_id).await.len(),
        versions_before + 1,
        "one host.updated"
    );
    // The doctor list changed (none stored before): one host.connect allow.
    let allows = audit_of(&server, "host.connect", "allow").await;
    assert_eq!(allows.len(), 1);
    assert_eq!(allows[0].details["failed_checks"], json!([]));

    // The same report again writes nothing.
    let version = get_host(&server, owner.token(), &host.host_id).await.body["version"].clone();
    control.send(&HostMessage::Report(changed)).await;
    control.heartbeat().await;
    assert_eq!(
        get_host(&server, owner.token(), &host.host_id).await.body["version"],
        version
    );
    assert_eq!(audit_of(&server, "host.connect", "allow").await.len(), 1);

    // host.presence_changed connected, then disconnected at the loss.
    let connected = next_presence(&mut presence).await;
    assert_eq!(
        connected,
        json!({"host_id": host.host_id, "connected": true})
    );
    assert_eq!(server.state.metrics().control_hosts_connected().get(), 1);
    drop(control);
    let disconnected = next_presence(&mut presence).await;
    assert_eq!(
        disconnected,
        json!({"host_id": host.host_id, "connected": false})
    );
    server
        .state
        .metrics()
        .control_hosts_connected()
        .wait_for(|n| *n == 0)
        .await;
    assert_eq!(
        get_host(&server, owner.token(), &host.host_id).await.body["connected"],
        false
    );
}

async fn next_presence(subscription: &mut bothy_server::events::Subscription) -> Value {
    loop {
        let delivery = tokio::time::timeout(support::ws::WAIT, subscription.recv())
            .await
            .expect("an event in time")
            .expect("the tail runs");
        if let Delivery::Ephemeral(event) = delivery {
            if event.kind == EphemeralKind::HostPresenceChanged {
                return Value::Object(event.payload.clone());
            }
        }
    }
}

async fn report_without_a_name_ends_its_sessions(engine: Engine) {
    let World {
        server,
        owner,
        host,
        host_id,
    } = world(engine).await;
    let mut control =
        HostControl::connected(&server, &host.keys, host_id, &["alice_os", "spare"]).await;
    let session = insert_session(&server, host_id, &owner, "active").await;
    let rights = permission_version(&server).await;
    assert_eq!(session_row(&server, session).await.0, "active");

    control.send(&HostMessage::Report(report(&["spare"]))).await;
    // The host is told to end the PTY.
    loop {
        if let ServerMessage::SessionClose(close) = control.message().await {
            assert_eq!(close.session_id, session);
            assert_eq!(close.close_reason, CloseReason::AccessRevoked);
            break;
        }
    }
    assert_eq!(
        session_row(&server, session).await,
        ("closed".to_owned(), Some("access_revoked".to_owned()), None)
    );
    assert_eq!(permission_version(&server).await, rights + 1);
    let allows = audit_of(&server, "host.connect", "allow").await;
    // Audit IDs within one millisecond of the manual clock are not ordered.
    let removing: Vec<_> = allows
        .iter()
        .filter(|row| row.details["removed_session_users"] != json!([]))
        .collect();
    assert_eq!(removing.len(), 1);
    let last = &removing[0].details;
    assert_eq!(last["removed_session_users"], json!(["alice_os"]));
    assert_eq!(last["added_session_users"], json!([]));
    assert_eq!(last["host_id"], host.host_id);
}

async fn server_host_report_ends_non_owner_sessions(engine: Engine) {
    let World {
        server,
        owner,
        host,
        host_id,
    } = world(engine).await;
    let member = invited_person(&server, &owner, "mia", "member", 2).await;
    // An assignment for the member, written as host.manage writes it.
    sqlx::query(
        "INSERT INTO host_session_users (id, host_id, person_id, os_user, os_user_folded, \
         assigned_by, assigned_at) VALUES ($1, $2, $3, 'spare', 'spare', $4, $5)",
    )
    .bind(Uuid::from_u128(77).to_string())
    .bind(host_id.to_string())
    .bind(member.id().to_owned())
    .bind(owner.id().to_owned())
    .bind(server.clock.now_ms())
    .execute(server.state.db().pool())
    .await
    .unwrap();
    let mut control =
        HostControl::connected(&server, &host.keys, host_id, &["alice_os", "spare"]).await;
    let theirs = insert_session(&server, host_id, &member, "active").await;
    let mine = insert_session(&server, host_id, &owner, "active").await;
    let rights = permission_version(&server).await;
    let mut server_host = report(&["alice_os", "spare"]);
    server_host.is_server_host = true;
    control.send(&HostMessage::Report(server_host)).await;
    control.heartbeat().await;
    assert_eq!(
        session_row(&server, theirs).await.1.as_deref(),
        Some("access_revoked")
    );
    assert_eq!(session_row(&server, mine).await.0, "active");
    assert_eq!(
        permission_version(&server).await,
        rights,
        "SR10: no new rights version"
    );
    let allows = audit_of(&server, "host.connect", "allow").await;
    assert_eq!(
        allows
            .iter()
            .filter(|row| row.details["is_server_host"] == json!(true))
            .count(),
        1
    );
}

// ---------------------------------------------------------------------------
// Heartbeat

async fn heartbeat_ack_and_miss(engine: Engine) {
    let World {
        server,
        host,
        host_id,
        ..
    } = world_with(
        engine,
        "terminal:\n  host_heartbeat_interval: 5s\n  host_heartbeat_miss_limit: 1\n",
    )
    .await;
    let mut control = HostControl::login(&server, &host.keys, host_id).await;
    assert_eq!(control.hello.heartbeat_interval_ms, 5_000);
    // 5 s × (1 + 1) after ready, less one millisecond: still open.
    server.clock.advance(Duration::from_millis(9_999));
    let ack = control.heartbeat().await;
    assert_eq!(
        ack.server_time,
        u64::try_from(server.clock.now_ms()).unwrap()
    );
    assert_eq!(ack.jwks, None, "the set did not change since hello");
    // The heartbeat moved the deadline: 10 s after it, 4009.
    server.clock.advance(Duration::from_millis(9_999));
    let ack = control.heartbeat().await;
    assert_eq!(ack.jwks, None);
    server.clock.advance(Duration::from_secs(10));
    assert_eq!(
        control.closed().await,
        (4009, "heartbeat_timeout".to_owned())
    );
}

/// 5.3 "JWKS refresh": heartbeat_ack carries the JWKS when the set of purpose
/// terminal differs from the last one sent on the connection, and only then.
async fn heartbeat_ack_carries_a_changed_jwks_once(engine: Engine) {
    let World {
        server,
        host,
        host_id,
        ..
    } = world(engine).await;
    let mut control = HostControl::login(&server, &host.keys, host_id).await;
    let before: Vec<String> = control
        .hello
        .jwks
        .keys()
        .iter()
        .map(|key| key.kid().to_owned())
        .collect();
    assert_eq!(control.heartbeat().await.jwks, None);
    let state = &server.state;
    let policy = keys::KeyPolicy::from_config(state.config());
    let rotation = keys::rotate(
        state.db(),
        state.pepper(),
        &policy,
        keys::RotationMode::Scheduled,
        server.clock.now_ms(),
    )
    .await
    .unwrap();
    let keys::Rotation::Scheduled { kid: next, .. } = rotation else {
        panic!("not scheduled: {rotation:?}")
    };
    let jwks = control
        .heartbeat()
        .await
        .jwks
        .expect("the changed set comes with the next ack");
    let kids: Vec<String> = jwks.keys().iter().map(|key| key.kid().to_owned()).collect();
    assert!(kids.contains(&next), "{kids:?}");
    for kid in &before {
        assert!(kids.contains(kid), "the active key stays published");
    }
    // Unchanged since it was sent: not again.
    assert_eq!(control.heartbeat().await.jwks, None);
}

/// 2.2 item 5: a committed change of the declaration sends `ready` again on
/// the host's control connection, with the new declaration; a refused change
/// sends nothing.
async fn declaration_change_sends_ready_again(engine: Engine) {
    let World {
        server,
        owner,
        host,
        host_id,
    } = world(engine).await;
    let mut control =
        HostControl::connected(&server, &host.keys, host_id, &["alice_os", "spare"]).await;
    let path = format!("/api/v1/hosts/{}/llm-credentials", host.host_id);
    let put = |llm: &'static str, tag: String, step_up_id: String| {
        let body = json!({
            "llm_credentials": llm,
            "reason": "the login changed",
            "step_up_id": step_up_id,
        });
        let server = &server;
        let path = path.clone();
        let token = owner.token().to_owned();
        async move {
            send(
                server,
                reqwest::Method::PUT,
                &path,
                Some(&token),
                Some(&body),
                &[("If-Match", tag.as_str())],
            )
            .await
        }
    };
    // A refused change (a stale If-Match): no ready.
    let step_up_id = step_up(&server, &owner).await;
    let refused = put("organization", "\"999\"".into(), step_up_id).await;
    assert_eq!(refused.status, 412, "{:?}", refused.body);
    control
        .send(&HostMessage::Heartbeat(Heartbeat { active_sessions: 0 }))
        .await;
    match control.message().await {
        ServerMessage::HeartbeatAck(_) => {}
        other => panic!("nothing before the ack after a refusal, got {other:?}"),
    }
    // The change: ready with the new declaration comes next.
    let tag = etag_of(&get_host(&server, owner.token(), &host.host_id).await);
    let step_up_id = step_up(&server, &owner).await;
    let changed = put("organization", tag, step_up_id).await;
    assert_eq!(changed.status, 200, "{:?}", changed.body);
    match control.message().await {
        ServerMessage::Ready(ready) => {
            assert_eq!(ready.host_id, host_id);
            assert_eq!(ready.state, HostState::Active);
            assert_eq!(ready.llm_credentials, LlmCredentials::Organization);
        }
        other => panic!("expected ready, got {other:?}"),
    }
}

/// 3.5: a full outbound queue (sync.outbound_queue_max) closes with 4014.
async fn full_outbound_queue_is_4014(engine: Engine) {
    let World {
        server,
        host,
        host_id,
        ..
    } = world_with(engine, "sync:\n  outbound_queue_max: 1\n").await;
    // ready and two session.close (unknown sessions) are queued in one go:
    // the second frame finds the queue of one full.
    let unknown = [
        Uuid::from_u128(0x0192_0000_0000_7000_8000_0000_0000_0011),
        Uuid::from_u128(0x0192_0000_0000_7000_8000_0000_0000_0012),
    ];
    let mut control = HostControl::connect(&server).await;
    let identify = control.identify_for(&host.keys, host_id, &unknown);
    control.send(&HostMessage::Identify(identify)).await;
    assert_eq!(control.closed().await, (4014, "slow_consumer".to_owned()));
    assert_eq!(server.state.local_control_links().conn_id(host_id), None);
}

/// 6.3 "Rate limits of the terminal channels" on the host's connections:
/// rl.host after the proof, rl.public_auth for refused proofs, 4008 with
/// `retry_after=<seconds>`.
async fn rate_limits_of_the_host_connections(engine: Engine) {
    let World {
        server,
        host,
        host_id,
        ..
    } = world_with(
        engine,
        "rl:\n  public_auth:\n    burst: 1\n    refill_per_minute: 1\n  host:\n    burst: 1\n    \
         refill_per_minute: 1\n",
    )
    .await;
    let stranger = HostKeys::generate(99);
    // A refused proof (another login key: 4110) takes the address's token.
    let mut control = HostControl::connect(&server).await;
    let identify = control.identify_for(&stranger, host_id, &[]);
    control.send(&HostMessage::Identify(identify)).await;
    assert_eq!(control.closed().await.0, 4110);
    // While the bucket is empty even a good proof is not looked at.
    let mut control = HostControl::connect(&server).await;
    let identify = control.identify_for(&host.keys, host_id, &[]);
    control.send(&HostMessage::Identify(identify)).await;
    assert_eq!(control.closed().await, (4008, "retry_after=60".to_owned()));
    assert!(audit_of(&server, "host.connect", "deny").await.len() == 1);

    // A minute later the login goes through and takes the host's token.
    server.clock.advance(Duration::from_secs(60));
    let mut control = HostControl::login(&server, &host.keys, host_id).await;
    // rl.host is empty now: another control connection and a data
    // connection of the host get 4008 after their proof.
    let mut second = HostControl::connect(&server).await;
    let identify = second.identify_for(&host.keys, host_id, &[]);
    second.send(&HostMessage::Identify(identify)).await;
    assert_eq!(second.closed().await, (4008, "retry_after=60".to_owned()));
    let session = Uuid::from_u128(0x0192_0000_0000_7000_8000_0000_0000_0021);
    let mut data = host_data::login(&server, session, host_id, &host.keys).await;
    assert_eq!(
        host_data::closed(&mut data).await,
        (4008, "retry_after=60".to_owned())
    );
    // A refused proof on a data connection takes the refilled address token.
    let (mut data, _) = host_data::open(&server, session).await;
    let proof = host_data::proof(&host.keys, host_id, [0u8; 32], server.clock.now_ms());
    support::ws::send(
        &mut data,
        Message::text(host_data::identify_text(host_id, proof, Some(session))),
    )
    .await;
    assert_eq!(host_data::closed(&mut data).await.0, 4113);
    let mut data = host_data::login(&server, session, host_id, &host.keys).await;
    assert_eq!(
        host_data::closed(&mut data).await,
        (4008, "retry_after=60".to_owned())
    );
    // The first connection is untouched.
    assert_eq!(control.heartbeat().await.jwks, None);
}

// ---------------------------------------------------------------------------
// Second control connection (3.4)

async fn duplicate_dead_is_replaced(engine: Engine) {
    let World {
        server,
        host,
        host_id,
        ..
    } = world_with(engine, "terminal:\n  host_duplicate_probe_timeout: 300ms\n").await;
    let mut old =
        HostControl::connected(&server, &host.keys, host_id, &["alice_os", "spare"]).await;
    // The old one stops reading: its pong never comes.
    let mut new = HostControl::connect(&server).await;
    let ready = new.identify(&host.keys, host_id, &[]).await;
    assert_eq!(ready.state, HostState::Active);
    assert_eq!(old.closed().await.0, 4009);
    let allows = audit_of(&server, "host.connect", "allow").await;
    let replaced: Vec<_> = allows
        .iter()
        .filter(|row| row.details.get("code") == Some(&json!("stale_connection_replaced")))
        .collect();
    assert_eq!(replaced.len(), 1);
    assert_eq!(
        replaced[0].details,
        json!({"host_id": host.host_id, "code": "stale_connection_replaced"})
    );
    // The new one works.
    new.send(&HostMessage::Report(report(&["alice_os", "spare"])))
        .await;
    new.wait_connected(&server, host_id).await;
}

/// 3.4 "Unconfirmed host": a live duplicate of a host in confirming takes
/// the fallback of 3.2 — back to pairing, keys dropped (key_fingerprint
/// stays), host.updated with key_changed — and both connections close with
/// 4112.
async fn duplicate_of_a_confirming_host_falls_back_to_pairing(engine: Engine) {
    let World { server, owner, .. } = world(engine).await;
    let (host_id, code) = create_host(&server, &owner, "unconfirmed", None).await;
    let keys = HostKeys::generate(31);
    let paired = pair(&server, &code, &keys, &["alice_os"]).await;
    assert_eq!(paired.status, 200, "{:?}", paired.body);
    let id = uuid(&host_id);
    let old = HostControl::login(&server, &keys, id).await;
    let reader = tokio::spawn(async move {
        let mut old = old;
        old.closed().await
    });
    let mut new = HostControl::connect(&server).await;
    let identify = new.identify_for(&keys, id, &[]);
    new.send(&HostMessage::Identify(identify)).await;
    assert_eq!(new.closed().await, (4112, "host_duplicate".to_owned()));
    assert_eq!(reader.await.unwrap(), (4112, "host_duplicate".to_owned()));

    let row = sqlx::query(
        "SELECT state, noise_public_key, auth_public_jwk, auth_jkt, key_fingerprint \
         FROM hosts WHERE id = $1",
    )
    .bind(&host_id)
    .fetch_one(server.state.db().pool())
    .await
    .unwrap();
    assert_eq!(row.get::<String, _>("state"), "pairing");
    assert_eq!(row.get::<Option<String>, _>("noise_public_key"), None);
    assert_eq!(row.get::<Option<String>, _>("auth_public_jwk"), None);
    assert_eq!(row.get::<Option<String>, _>("auth_jkt"), None);
    assert!(row.get::<Option<String>, _>("key_fingerprint").is_some());
    let updates = host_updated_events(&server, &host_id).await;
    let last = updates.last().unwrap();
    assert_eq!(
        (&last["state"], &last["key_changed"]),
        (&json!("pairing"), &json!(true))
    );
    let denials = audit_of(&server, "host.connect", "deny").await;
    let duplicate: Vec<_> = denials
        .iter()
        .filter(|row| row.details.get("code") == Some(&json!("duplicate_connection")))
        .collect();
    assert_eq!(duplicate.len(), 1);
    assert_eq!(duplicate[0].details["from_state"], "confirming");
    assert_eq!(duplicate[0].details["to_state"], "pairing");
    // Keys dropped: the old keys log in no more.
    let mut again = HostControl::connect(&server).await;
    let identify = again.identify_for(&keys, id, &[]);
    again.send(&HostMessage::Identify(identify)).await;
    assert_eq!(again.closed().await.0, 4110);
}

async fn duplicate_alive_disables(engine: Engine) {
    let World {
        server,
        owner,
        host,
        host_id,
    } = world(engine).await;
    let old = HostControl::connected(&server, &host.keys, host_id, &["alice_os", "spare"]).await;
    let session = insert_session(&server, host_id, &owner, "active").await;
    // The old one keeps reading (and so answers pings).
    let reader = tokio::spawn(async move {
        let mut old = old;
        old.closed().await
    });
    let mut new = HostControl::connect(&server).await;
    let identify = new.identify_for(&host.keys, host_id, &[session]);
    new.send(&HostMessage::Identify(identify)).await;
    assert_eq!(new.closed().await.0, 4112);
    assert_eq!(reader.await.unwrap().0, 4112);

    let read = get_host(&server, owner.token(), &host.host_id).await.body;
    assert_eq!(read["state"], "disabled");
    assert_eq!(read["disabled_reason"], "duplicate_connection");
    assert_eq!(
        session_row(&server, session).await,
        ("closed".to_owned(), Some("host_disabled".to_owned()), None)
    );
    let denials = audit_of(&server, "host.connect", "deny").await;
    let duplicate: Vec<_> = denials
        .iter()
        .filter(|row| row.details.get("code") == Some(&json!("duplicate_connection")))
        .collect();
    assert_eq!(duplicate.len(), 1);
    assert_eq!(
        duplicate[0].details["reason_code"],
        "host_duplicate_connection"
    );
    // Events are ordered by position.
    let updates = host_updated_events(&server, &host.host_id).await;
    assert_eq!(updates.last().unwrap()["state"], "disabled");
    // Only a re-pairing continues: a new login is 4111.
    let mut again = HostControl::connect(&server).await;
    let identify = again.identify_for(&host.keys, host_id, &[]);
    again.send(&HostMessage::Identify(identify)).await;
    assert_eq!(again.closed().await.0, 4111);
}

// ---------------------------------------------------------------------------
// Sessions

async fn live_sessions_reconciliation(engine: Engine) {
    let World {
        server,
        owner,
        host,
        host_id,
    } = world(engine).await;
    let forgotten = insert_session(&server, host_id, &owner, "active").await;
    let kept = insert_session(&server, host_id, &owner, "detached").await;
    let closed = insert_session(&server, host_id, &owner, "active").await;
    sqlx::query(
        "UPDATE terminal_sessions SET state = 'closed', close_reason = 'idle_timeout', \
         ended_at = created_at WHERE id = $1",
    )
    .bind(closed.to_string())
    .execute(server.state.db().pool())
    .await
    .unwrap();
    let unknown = Uuid::from_u128(0x0192_0000_0000_7000_8000_0000_0000_0002);

    let mut control = HostControl::connect(&server).await;
    control
        .identify(&host.keys, host_id, &[kept, closed, unknown])
        .await;
    let mut closes = Vec::new();
    for _ in 0..2 {
        match control.message().await {
            ServerMessage::SessionClose(close) => {
                closes.push((close.session_id, close.close_reason))
            }
            other => panic!("expected session.close, got {other:?}"),
        }
    }
    closes.sort_by_key(|(id, _)| *id);
    let mut expected = vec![
        (closed, CloseReason::IdleTimeout),
        (unknown, CloseReason::AccessRevoked),
    ];
    expected.sort_by_key(|(id, _)| *id);
    assert_eq!(closes, expected);
    assert_eq!(
        session_row(&server, forgotten).await,
        ("closed".to_owned(), Some("host_restarted".to_owned()), None)
    );
    assert_eq!(session_row(&server, kept).await.0, "detached");
    // No session.close echo for the host_restarted end.
    let ack = control.heartbeat().await;
    assert!(ack.server_time > 0);
}

async fn session_started_and_ended(engine: Engine) {
    let World {
        server,
        owner,
        host,
        host_id,
    } = world(engine).await;
    let opening = insert_session(&server, host_id, &owner, "opening").await;
    let mut control =
        HostControl::connected(&server, &host.keys, host_id, &["alice_os", "spare"]).await;

    // No device side on the relay: detached at once, with started_at.
    control.session_started(opening).await;
    control.heartbeat().await;
    assert_eq!(session_row(&server, opening).await.0, "detached");
    let now = server.clock.now_ms();
    assert_eq!(
        session_times(&server, opening).await,
        (Some(now), Some(now))
    );

    // A reason only the server sets: error validation_failed, nothing changes.
    control
        .session_ended(opening, CloseReason::AccessRevoked, None, None)
        .await;
    expect_error(
        &mut control,
        HostOp::SessionEnded,
        ErrorCode::ValidationFailed,
        opening,
    )
    .await;
    control
        .session_ended(opening, CloseReason::OpenFailed, None, None)
        .await;
    expect_error(
        &mut control,
        HostOp::SessionEnded,
        ErrorCode::ValidationFailed,
        opening,
    )
    .await;
    control
        .session_ended(opening, CloseReason::IdleTimeout, None, Some(1))
        .await;
    expect_error(
        &mut control,
        HostOp::SessionEnded,
        ErrorCode::ValidationFailed,
        opening,
    )
    .await;
    assert_eq!(session_row(&server, opening).await.0, "detached");

    // A valid end goes through the end function; no session.close echo.
    control
        .session_ended(opening, CloseReason::ProcessExited, None, Some(0))
        .await;
    control.heartbeat().await;
    assert_eq!(
        session_row(&server, opening).await,
        ("closed".to_owned(), Some("process_exited".to_owned()), None)
    );
    let terminate = audit_of(&server, "terminal.terminate", "allow").await;
    assert!(
        terminate
            .iter()
            .any(|row| row.details["close_reason"] == "process_exited"
                && row.details["session_id"] == json!(opening.to_string()))
    );

    // open_failed with its detail.
    let second = insert_session(&server, host_id, &owner, "opening").await;
    control
        .session_ended(
            second,
            CloseReason::OpenFailed,
            Some(CloseDetail::OpenTimeout),
            None,
        )
        .await;
    control.heartbeat().await;
    assert_eq!(
        session_row(&server, second).await,
        (
            "closed".to_owned(),
            Some("open_failed".to_owned()),
            Some("open_timeout".to_owned())
        )
    );

    // A closed session that is started: session.close with its stored reason.
    control.session_started(second).await;
    match control.message().await {
        ServerMessage::SessionClose(close) => {
            assert_eq!(
                (close.session_id, close.close_reason),
                (second, CloseReason::OpenFailed)
            );
        }
        other => panic!("expected session.close, got {other:?}"),
    }

    // Unknown sessions: error not_found and session.close access_revoked.
    let unknown = Uuid::from_u128(0x0192_0000_0000_7000_8000_0000_0000_0003);
    control
        .session_ended(unknown, CloseReason::ClientClosed, None, None)
        .await;
    expect_error(
        &mut control,
        HostOp::SessionEnded,
        ErrorCode::NotFound,
        unknown,
    )
    .await;
    match control.message().await {
        ServerMessage::SessionClose(close) => {
            assert_eq!(
                (close.session_id, close.close_reason),
                (unknown, CloseReason::AccessRevoked)
            );
        }
        other => panic!("expected session.close, got {other:?}"),
    }

    // A session ended by the server while connected: session.close.
    let third = insert_session(&server, host_id, &owner, "active").await;
    let mut uow = server
        .state
        .db()
        .begin(server.clock.now_ms())
        .await
        .unwrap();
    bothy_server::revocation::end(
        &mut uow,
        bothy_server::revocation::EndScope::Session(third),
        CloseReason::ClosedByOwner,
        None,
    )
    .await
    .unwrap();
    uow.commit().await.unwrap();
    loop {
        match control.message().await {
            ServerMessage::SessionClose(close) => {
                assert_eq!(
                    (close.session_id, close.close_reason),
                    (third, CloseReason::ClosedByOwner)
                );
                break;
            }
            ServerMessage::HeartbeatAck(_) => {}
            other => panic!("expected session.close, got {other:?}"),
        }
    }
}

async fn expect_error(control: &mut HostControl, op: HostOp, code: ErrorCode, session: Uuid) {
    match control.message().await {
        ServerMessage::Error(error) => {
            assert_eq!(
                (error.op, error.code, error.session_id),
                (op, code, Some(session))
            );
        }
        other => panic!("expected error, got {other:?}"),
    }
}

async fn loss_detaches_active_sessions(engine: Engine) {
    let World {
        server,
        owner,
        host,
        host_id,
    } = world(engine).await;
    let control =
        HostControl::connected(&server, &host.keys, host_id, &["alice_os", "spare"]).await;
    let active = insert_session(&server, host_id, &owner, "active").await;
    server.clock.advance(std::time::Duration::from_secs(5));
    drop(control);
    server
        .state
        .metrics()
        .control_hosts_connected()
        .wait_for(|n| *n == 0)
        .await;
    // The loss's unit of work commits right after the gauge drops; wait on
    // the event it writes.
    let mut tail = server.state.events().subscribe_from(0);
    loop {
        let delivery = tokio::time::timeout(support::ws::WAIT, tail.recv())
            .await
            .unwrap()
            .unwrap();
        if let Delivery::Durable(event) = delivery {
            if event.payload.get("state") == Some(&json!("detached"))
                && event.payload.get("session_id") == Some(&json!(active.to_string()))
            {
                break;
            }
        }
    }
    assert_eq!(session_row(&server, active).await.0, "detached");
    assert_eq!(
        session_times(&server, active).await.1,
        Some(server.clock.now_ms())
    );
}

async fn shutdown_closes_with_4013(engine: Engine) {
    let World {
        server,
        host,
        host_id,
        ..
    } = world(engine).await;
    let mut control = HostControl::login(&server, &host.keys, host_id).await;
    let stopping = tokio::spawn(server.stop());
    assert_eq!(control.closed().await.0, 4013);
    drop(stopping.await.unwrap());
}

async fn not_an_upgrade_is_400(engine: Engine) {
    let server = TestServer::start(engine).await;
    let reply = server
        .client
        .get(server.url("/api/v1/hosts/connect"))
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), 400);
    let body: Value = reply.json().await.unwrap();
    assert_eq!(body["errors"][0]["pointer"], "/headers/upgrade");
}

both_engines!(
    hello_and_ready,
    identify_refusals_in_order,
    auth_timeout_is_4113,
    malformed_frames_after_ready_are_4002,
    later_ops_reauthorize,
    report_applied_and_connected,
    report_without_a_name_ends_its_sessions,
    server_host_report_ends_non_owner_sessions,
    heartbeat_ack_and_miss,
    heartbeat_ack_carries_a_changed_jwks_once,
    declaration_change_sends_ready_again,
    full_outbound_queue_is_4014,
    rate_limits_of_the_host_connections,
    duplicate_dead_is_replaced,
    duplicate_of_a_confirming_host_falls_back_to_pairing,
    duplicate_alive_disables,
    live_sessions_reconciliation,
    session_started_and_ended,
    loss_detaches_active_sessions,
    shutdown_closes_with_4013,
    not_an_upgrade_is_400,
);
