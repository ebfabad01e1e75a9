//! Several nodes on one PostgreSQL database (issue 18, spec 24 section 9 and
//! 3.4 "Several nodes"): two real servers with `cluster.mode: multi` in this
//! process, each with its own pool, listener, relay, registry and manual
//! clock, on one fresh database (dropped after), and a test host service
//! speaking the control protocol over a real WebSocket.
//!
//! - `terminal.session_open`: an opening served by node A reaches the host's
//!   control connection on node B, only after the probation of 3.4 (B's clock
//!   moved past it), with the row's deadline; a repeated or forged signal for
//!   the same grant and one for an unknown session send nothing;
//! - the duplicate verdict across nodes (TM-T23): the original connected to
//!   A, a copy of its keys connects to B; A probes its older connection, the
//!   original answers, both close with 4112, the host is disabled with
//!   `duplicate_connection`, one deny entry.
//!
//! The end to end path through nginx with the real host service is
//! `crates/host/tests/e2e_cluster.rs`.

#![allow(clippy::unwrap_used)] // test bodies

use bothy_testkit as support;
use bothy_testkit::hosts as hosts_common;
use bothy_testkit::identity as identity_common;
use bothy_testkit::terminal as terminal_common;

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use bothy_proto::b64;
use bothy_proto::control::{HostMessage, ServerMessage};
use bothy_server::clock::Clock;
use bothy_server::db::{Engine, SIGNAL_CHANNEL};
use hosts_common::*;
use identity_common::{audit_of, post};
use serde_json::json;
use support::server::TestServer;
use terminal_common::host_control::{HostControl, Received, report};
use uuid::Uuid;

const WAIT: Duration = Duration::from_secs(30);
const YAML: &str = "cluster:\n  mode: multi\n";

struct Cluster {
    a: TestServer,
    b: TestServer,
    owner: Person,
    host: ActiveHost,
    host_id: Uuid,
}

/// Node A with an owner and an active host (`alice_os` assigned to the
/// owner), node B on the same database with A's token pepper and CA.
async fn cluster() -> Cluster {
    let a = TestServer::start_with(Engine::Postgres, YAML).await;
    let owner = owner_person(&a, "olivia").await;
    let host = active_host(
        &a,
        &owner,
        "build box",
        None,
        7,
        &["alice_os", "spare"],
        &[(owner.id(), "alice_os")],
    )
    .await;
    let host_id = Uuid::parse_str(&host.host_id).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let copy = |from: &str, mode: u32| {
        let to = dir.path().join(from);
        std::fs::copy(a.data_dir().join(from), &to).unwrap();
        std::fs::set_permissions(&to, std::fs::Permissions::from_mode(mode)).unwrap();
    };
    std::fs::create_dir(dir.path().join("tls")).unwrap();
    std::fs::set_permissions(
        dir.path().join("tls"),
        std::fs::Permissions::from_mode(0o700),
    )
    .unwrap();
    copy("token_pepper", 0o600);
    copy("tls/ca.key", 0o600);
    copy("tls/ca.pem", 0o644);
    // Servers run with synchronized clocks (3.4): B's starts at A's time.
    let b = TestServer::start_on_at(a.db().share().await, dir, YAML, a.clock.now_ms()).await;
    Cluster {
        a,
        b,
        owner,
        host,
        host_id,
    }
}

/// Waits until `node` counts the host as connected (its own connection or
/// another node's announcement).
async fn wait_counted(node: &TestServer, host_id: Uuid) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !node.state.control_links().is_connected(host_id) {
        assert!(tokio::time::Instant::now() < deadline, "never counted");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Gives `node`'s handler time to act on a signal it must not act on: a
/// few of its looks at the clock ([`bothy_server::terminal::relay::TICK`]).
/// A wrong `session.open` would be sent within them; the check after it
/// cannot pass by timing, only miss a late one.
async fn a_few_ticks() {
    tokio::time::sleep(bothy_server::terminal::relay::TICK * 5).await;
}

/// A heartbeat round trip that must see no `session.open` before its ack.
async fn nothing_but_the_ack(control: &mut HostControl) {
    control
        .send(&HostMessage::Heartbeat(bothy_proto::control::Heartbeat {
            active_sessions: 0,
        }))
        .await;
    loop {
        match control.recv().await {
            Received::Message(ServerMessage::HeartbeatAck(_)) => return,
            Received::Message(ServerMessage::SessionOpen(open)) => {
                panic!("an unexpected session.open {open:?}")
            }
            Received::Message(_) => {}
            other => panic!("the connection ended: {other:?}"),
        }
    }
}

async fn forge(node: &TestServer, payload: String) {
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(SIGNAL_CHANNEL)
        .bind(payload)
        .execute(node.state.db().pool())
        .await
        .unwrap();
}

/// 6.1 step 4 with several nodes and the probation of 3.4.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_opening_on_node_a_reaches_the_control_connection_on_node_b_after_its_probation() {
    let Cluster {
        a,
        b,
        owner,
        host,
        host_id,
    } = cluster().await;
    let mut control = HostControl::connected(&b, &host.keys, host_id, &["alice_os", "spare"]).await;
    // A counts the host through B's announcement; A holds no connection.
    wait_counted(&a, host_id).await;
    assert!(a.state.local_control_links().conn_id(host_id).is_none());

    let step_up_id = step_up(&a, &owner).await;
    let reply = post(
        &a,
        &format!("/api/v1/hosts/{host_id}/terminal/sessions"),
        Some(owner.token()),
        json!({
            "profile": "shell",
            "columns": 80,
            "rows": 24,
            "client_ephemeral_key_hash": b64::encode(&[7u8; 32]),
            "step_up_id": step_up_id,
        }),
    )
    .await;
    assert_eq!(reply.status, 201, "{:?}", reply.body);
    let session_id = Uuid::parse_str(reply.body["session_id"].as_str().unwrap()).unwrap();
    let deadline: i64 =
        sqlx::query_scalar("SELECT open_deadline_at FROM terminal_sessions WHERE id = $1")
            .bind(session_id.to_string())
            .fetch_one(a.state.db().pool())
            .await
            .unwrap();

    // B's clock has not moved since the connection's first report: it is in
    // its probation (2 × host_duplicate_probe_timeout = 10 s), so nothing yet.
    a_few_ticks().await;
    nothing_but_the_ack(&mut control).await;

    b.clock.advance(Duration::from_secs(10));
    let open = loop {
        if let ServerMessage::SessionOpen(open) = control.message().await {
            break open;
        }
    };
    assert_eq!(open.session_id, session_id);
    assert_eq!(open.expires_at, u64::try_from(deadline).unwrap());

    // The same grant again (a repeated or forged signal), and a session that
    // does not exist: nothing reaches the host.
    forge(
        &a,
        format!(
            r#"{{"kind":"terminal.session_open","host_id":"{host_id}","session_id":"{session_id}"}}"#
        ),
    )
    .await;
    forge(
        &a,
        format!(
            r#"{{"kind":"terminal.session_open","host_id":"{host_id}","session_id":"{}"}}"#,
            Uuid::from_u128(0x0190_0000_0000_7000_8000_0000_0000_0001)
        ),
    )
    .await;
    a_few_ticks().await;
    nothing_but_the_ack(&mut control).await;
}

/// TM-T23 across nodes: a copy of the host's keys connects to node B while
/// the original, connected to node A, still answers: both close with 4112,
/// the host is disabled with `duplicate_connection`, one deny entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copied_host_key_on_node_b_while_the_original_answers_on_node_a_disables_the_host() {
    let Cluster {
        a,
        b,
        host,
        host_id,
        ..
    } = cluster().await;
    let original = HostControl::connected(&a, &host.keys, host_id, &["alice_os", "spare"]).await;
    // The original keeps reading, so it answers A's ping.
    let original = tokio::spawn(async move {
        let mut original = original;
        original.closed().await
    });
    let mut copy = HostControl::login(&b, &host.keys, host_id).await;
    copy.send(&HostMessage::Report(report(&["alice_os", "spare"])))
        .await;
    let copy_closed = tokio::time::timeout(WAIT, copy.closed())
        .await
        .expect("the copy is closed in time");
    assert_eq!(copy_closed.0, 4112, "{copy_closed:?}");
    let original_closed = tokio::time::timeout(WAIT, original)
        .await
        .expect("the original is closed in time")
        .unwrap();
    assert_eq!(original_closed.0, 4112, "{original_closed:?}");
    let (state, reason): (String, Option<String>) =
        sqlx::query_as("SELECT state, disabled_reason FROM hosts WHERE id = $1")
            .bind(host_id.to_string())
            .fetch_one(a.state.db().pool())
            .await
            .unwrap();
    assert_eq!(
        (state.as_str(), reason.as_deref()),
        ("disabled", Some("duplicate_connection"))
    );
    let denials = audit_of(&a, "host.connect", "deny").await;
    let duplicate: Vec<_> = denials
        .iter()
        .filter(|row| row.details.get("code") == Some(&json!("duplicate_connection")))
        .collect();
    assert_eq!(duplicate.len(), 1, "{denials:?}");
}
