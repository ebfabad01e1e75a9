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
//! - the edge as shipped (`deploy/nginx/bothy.conf`, Debian's nginx) in
//!   front of two nodes: both stream paths of a session go to one node,
//!   everything else round-robin, WebSockets pass; behind it the failed
//!   logins of two client addresses land in two `rl.public_auth` buckets on
//!   every node, a forwarded address a client writes itself chooses no
//!   bucket, and a forged `X-Forwarded-For` straight to a node is ignored;
//! - a node that dies (a real `bothy-server` process, SIGKILL) while it
//!   holds the host's control connection: its presence entry counts on the
//!   other node for the window of section 9 and no longer, an opening let
//!   through in it ends `open_failed`/`open_timeout` (the sweep's check 3,
//!   D-507), the next gets 409
//!   `host_unavailable`, and its session that no node relays any more is
//!   ended by the sweep rather than left `active`.
//!
//! The end to end path through nginx with the real host service is
//! `crates/host/tests/e2e_cluster.rs`.

#![allow(clippy::unwrap_used)] // test bodies

use bothy_testkit as support;
use bothy_testkit::hosts as hosts_common;
use bothy_testkit::identity as identity_common;
use bothy_testkit::terminal as terminal_common;

use std::collections::HashSet;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use bothy_proto::b64;
use bothy_proto::control::{HostMessage, ServerMessage};
use bothy_proto::stream::{self, DeviceMessage, Identify};
use bothy_server::clock::Clock;
use bothy_server::db::{Engine, SIGNAL_CHANNEL};
use bothy_server::terminal::sweep;
use bothy_testkit::scenario::cluster::{Access, Edge, ServerProcess};
use hosts_common::*;
use identity_common::{audit_of, post};
use serde_json::json;
use support::server::TestServer;
use terminal_common::host_control::{HostControl, Received, report};
use tokio_tungstenite::tungstenite::Message;
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
    let (owner, host, host_id) = owner_and_host(&a).await;
    let b = second_node(&a, YAML).await;
    Cluster {
        a,
        b,
        owner,
        host,
        host_id,
    }
}

/// An owner and an active host (`alice_os` assigned to the owner) on `a`.
async fn owner_and_host(a: &TestServer) -> (Person, ActiveHost, Uuid) {
    let owner = owner_person(a, "olivia").await;
    let host = active_host(
        a,
        &owner,
        "build box",
        None,
        7,
        &["alice_os", "spare"],
        &[(owner.id(), "alice_os")],
    )
    .await;
    let host_id = Uuid::parse_str(&host.host_id).unwrap();
    (owner, host, host_id)
}

/// A second node in this process on `a`'s database with `yaml` and A's
/// token pepper and CA, its clock starting at A's time.
async fn second_node(a: &TestServer, yaml: &str) -> TestServer {
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
    TestServer::start_on_at(a.db().share().await, dir, yaml, a.clock.now_ms()).await
}

/// Waits until `node` counts the host as connected (its own connection or
/// another node's announcement).
async fn wait_counted(node: &TestServer, host_id: Uuid) {
    let counted = support::wait::try_eventually(WAIT, || async {
        node.state
            .control_links()
            .is_connected(host_id)
            .then_some(())
    })
    .await;
    assert!(counted.is_some(), "never counted");
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

    let session_id = open_on(&a, &owner, host_id).await;
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

/// Node settings behind the shipped edge: the edge (nginx on 127.0.0.1) is
/// the one trusted proxy; a burst of two failed logins per client address.
const EDGE_YAML: &str = "server:\n  trusted_proxies: '127.0.0.1'\ncluster:\n  mode: multi\n\
                         rl:\n  public_auth: {burst: 2, refill_per_minute: 1}\n";

async fn failed_login(
    client: &reqwest::Client,
    url: &str,
    body: &serde_json::Value,
    forwarded_for: Option<&str>,
) -> u16 {
    let mut request = client.post(url).json(body);
    if let Some(value) = forwarded_for {
        request = request.header("x-forwarded-for", value);
    }
    request.send().await.unwrap().status().as_u16()
}

/// The edge's access log once it holds `count` requests (nginx writes a
/// line after the answer has left, so the client can be first).
async fn access_log(edge: &Edge, count: usize) -> Vec<Access> {
    support::wait::eventually("the edge's access log", WAIT, || async {
        let log = edge.access_log();
        (log.len() >= count).then_some(log)
    })
    .await
}

/// `deploy/nginx/bothy.conf` as shipped, with Debian's nginx, in front of
/// nodes A and B (spec 9 "Edge requirement", issue 18): both stream paths
/// of a session reach the same node for every session and the sessions
/// spread over both nodes; everything else is round-robin; a WebSocket
/// upgrade passes both ways. Behind it (`server.trusted_proxies`: the edge)
/// the failed logins of 127.0.0.2 fill its own `rl.public_auth` bucket on
/// each node (the buckets are per process, docs/configuration.md), while
/// 127.0.0.3 keeps its own even when it writes 127.0.0.2 into
/// `X-Forwarded-For` itself (the edge appends the real one, read from the
/// right), and 127.0.0.2 straight to node A, an untrusted peer, cannot
/// escape its bucket with a forged `X-Forwarded-For`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shipped_edge_routes_each_session_to_one_node_and_keeps_client_buckets_apart() {
    let a = TestServer::start_with(Engine::Postgres, EDGE_YAML).await;
    let alice = identity_common::owner(&a, "alice").await;
    let b = second_node(&a, EDGE_YAML).await;
    let edge = Edge::start_shipped(&a.data_dir().join("tls"), &[a.port, b.port]).await;
    let nodes: HashSet<String> = [a.port, b.port]
        .iter()
        .map(|port| format!("127.0.0.1:{port}"))
        .collect();
    let base = edge.base();
    let local = edge.client_from("127.0.0.1".parse().unwrap());
    let mut sent = 0;

    // Round-robin for everything but the streams.
    for _ in 0..4 {
        let ready = local.get(format!("{base}/readyz")).send().await.unwrap();
        assert_eq!(ready.status(), 200);
        sent += 1;
    }
    // Both stream paths of a session: one node, whichever session.
    let ids: Vec<Uuid> = (1..=24u128)
        .map(|n| Uuid::from_u128(0x0190_0000_0000_7000_8000_0000_0000_0000 + n))
        .collect();
    for id in &ids {
        for path in [
            format!("/api/v1/hosts/sessions/{id}/stream"),
            format!("/api/v1/terminal/sessions/{id}/stream"),
        ] {
            let reply = local.get(format!("{base}{path}")).send().await.unwrap();
            assert_ne!(reply.status(), 502, "{path} reached no node");
            sent += 1;
        }
    }
    let log = access_log(&edge, sent).await;
    let ready: HashSet<String> = log
        .iter()
        .filter(|entry| entry.uri == "/readyz")
        .map(|entry| entry.upstream.clone())
        .collect();
    assert_eq!(ready, nodes, "round-robin: {log:?}");
    let mut used = HashSet::new();
    for id in &ids {
        let id = id.to_string();
        let upstreams: Vec<&str> = log
            .iter()
            .filter(|entry| entry.uri.contains(&id))
            .map(|entry| entry.upstream.as_str())
            .collect();
        assert_eq!(upstreams.len(), 2, "{id}: {log:?}");
        assert_eq!(upstreams[0], upstreams[1], "both paths of {id}");
        assert!(nodes.contains(upstreams[0]), "{upstreams:?}");
        used.insert(upstreams[0].to_owned());
    }
    assert_eq!(used, nodes, "24 sessions spread over both nodes");

    // A WebSocket through the shipped locations: upgraded, and the node's
    // refusal of a made-up token comes back as a close code of section 13.
    let mut ws = support::ws::connect_to(
        edge.port,
        &edge.ca_file,
        &stream::stream_path(&ids[0]),
        None,
        support::ws::Options::default(),
        &[],
    )
    .await
    .expect("the upgrade passes the edge");
    let identify = DeviceMessage::Identify(Identify {
        access_token: Some("not-a-token".to_owned()),
    });
    support::ws::send(&mut ws, Message::text(identify.to_json())).await;
    let code = support::ws::close_code(&mut ws).await;
    assert!((4000..5000).contains(&code), "close code {code}");
    sent += 1;

    // Failed logins of 127.0.0.2 through the edge until both nodes refuse it.
    let mut wrong = alice.login_body(&a, 1);
    wrong["password"] = json!("wrong wrong wrong");
    let login = format!("{base}/api/v1/auth/login");
    let second = edge.client_from("127.0.0.2".parse().unwrap());
    let of = |log: &[Access], client: &str, node: &str| -> Vec<u16> {
        log.iter()
            .filter(|entry| entry.client == client && entry.upstream == node)
            .map(|entry| entry.status)
            .collect()
    };
    let log = loop {
        failed_login(&second, &login, &wrong, None).await;
        sent += 1;
        let log = access_log(&edge, sent).await;
        if nodes
            .iter()
            .all(|node| of(&log, "127.0.0.2", node).contains(&429))
        {
            break log;
        }
        assert!(sent < 120, "both nodes never refused 127.0.0.2: {log:?}");
    };
    for node in &nodes {
        // The burst of its own bucket on each node, then 429.
        assert_eq!(
            of(&log, "127.0.0.2", node)[..3],
            [401, 401, 429],
            "{node}: {log:?}"
        );
    }
    // 127.0.0.3 writes 127.0.0.2 itself: the edge appends 127.0.0.3, the
    // rightmost untrusted address, so its own (fresh) bucket counts.
    let third = edge.client_from("127.0.0.3".parse().unwrap());
    for _ in 0..2 {
        assert_eq!(
            failed_login(&third, &login, &wrong, Some("127.0.0.2")).await,
            401
        );
    }
    // 127.0.0.2 straight to node A is no trusted proxy: its header is
    // ignored and its exhausted bucket still counts.
    let direct = a.client_from("127.0.0.2".parse().unwrap());
    assert_eq!(
        failed_login(
            &direct,
            &a.url("/api/v1/auth/login"),
            &wrong,
            Some("203.0.113.9")
        )
        .await,
        429
    );
}

/// Node A (in this process, its clock moved by the test) beside node P, a
/// real `bothy-server` process, with a heartbeat window of 180 s
/// (`host_heartbeat_interval` 60 s × `host_heartbeat_miss_limit` 3).
const DEAD_YAML: &str = "cluster:\n  mode: multi\nterminal:\n  open_timeout: 10s\n  \
                         host_duplicate_probe_timeout: 1s\n  host_heartbeat_interval: 60s\n";

/// The answer of an opening on `a` of `owner`'s shell on the host, after a
/// fresh step-up.
async fn open_reply(a: &TestServer, owner: &Person, host_id: Uuid) -> identity_common::Reply {
    let step_up_id = step_up(a, owner).await;
    post(
        a,
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
    .await
}

/// An opening on `a` of `owner`'s shell on the host (201): its session.
async fn open_on(a: &TestServer, owner: &Person, host_id: Uuid) -> Uuid {
    let reply = open_reply(a, owner, host_id).await;
    assert_eq!(reply.status, 201, "{:?}", reply.body);
    Uuid::parse_str(reply.body["session_id"].as_str().unwrap()).unwrap()
}

/// The session's state, close reason and close detail.
async fn row_of(a: &TestServer, session_id: Uuid) -> (String, Option<String>, Option<String>) {
    sqlx::query_as("SELECT state, close_reason, close_detail FROM terminal_sessions WHERE id = $1")
        .bind(session_id.to_string())
        .fetch_one(a.state.db().pool())
        .await
        .unwrap()
}

/// Spec 9 "Presence across nodes" and TM-T16 with several nodes: node P
/// holds the host's control connection and dies by SIGKILL without
/// `terminal.host_gone`. On node A its entry keeps counting for the window
/// and no longer; an opening let through in the window ends
/// `open_failed`/`open_timeout` at its deadline (no node sends
/// `session.open`; the sweep's check 3 ends it, D-507); after the
/// window an opening gets 409 `host_unavailable`. The session that was
/// active through P stays `active` (no node detaches it: its control
/// connection's node is gone), and the sweep ends it at its idle limit, so
/// nothing stays `active` for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_node_s_host_counts_for_the_window_and_its_session_is_swept() {
    let start = i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap();
    let a = TestServer::start_at(Engine::Postgres, DEAD_YAML, start).await;
    let (owner, host, host_id) = owner_and_host(&a).await;
    let mut p = ServerProcess::start(&a, DEAD_YAML).await;
    let mut control = HostControl::connect_to(p.port, &a.ca_file).await;
    control.identify(&host.keys, host_id, &[]).await;
    control
        .send(&HostMessage::Report(report(&["alice_os", "spare"])))
        .await;
    // A counts the host through P's announcement (on a heartbeat round trip).
    for _ in 0..100 {
        if a.state.control_links().is_connected(host_id) {
            break;
        }
        control.heartbeat().await;
    }
    assert!(a.state.control_links().is_connected(host_id), "{}", p.log());

    // A session that becomes active through P (P's probation is 2 s of its
    // own clock; session.started arrives on P, which holds no side).
    let active = open_on(&a, &owner, host_id).await;
    let open = loop {
        if let ServerMessage::SessionOpen(open) = control.message().await {
            break open;
        }
    };
    assert_eq!(open.session_id, active);
    control.session_started(active).await;
    support::wait::eventually("the session active", WAIT, || async {
        (row_of(&a, active).await.0 == "active").then_some(())
    })
    .await;

    p.kill();
    assert!(matches!(
        control.recv().await,
        Received::Ended | Received::Close(..)
    ));
    // No terminal.host_gone came: A still counts P's entry, last renewed at
    // or before A's time now (P announced on its heartbeats, well before).
    assert!(a.state.control_links().is_connected(host_id));
    let killed_at = a.clock.now_ms();

    // An opening let through in the window: nobody sends session.open, no
    // side arrives anywhere, and the sweep's check 3 (D-507) ends it at its
    // open deadline (inclusive), through the compare-and-swap on opening.
    let lost = open_on(&a, &owner, host_id).await;
    a.clock.advance(Duration::from_secs(10));
    let now = a.clock.now_ms();
    let swept = sweep::run_once(a.state.db(), a.state.config(), now - 1)
        .await
        .unwrap();
    assert!(swept.iter().all(|s| s.session_id != lost), "{swept:?}");
    let swept = sweep::run_once(a.state.db(), a.state.config(), now)
        .await
        .unwrap();
    assert!(swept.iter().any(|s| s.session_id == lost), "{swept:?}");
    assert_eq!(
        row_of(&a, lost).await,
        (
            "closed".to_owned(),
            Some("open_failed".to_owned()),
            Some("open_timeout".to_owned())
        )
    );

    // Still within the window the entry counts; past it (180 s after the
    // latest moment P can have announced) it does not.
    assert!(a.state.control_links().is_connected(host_id));
    a.clock.set(killed_at + 180_001);
    assert!(!a.state.control_links().is_connected(host_id));
    let reply = open_reply(&a, &owner, host_id).await;
    support::problem::assert_problem(&reply, 409, "host_unavailable");

    // The session P made active: still active, and the sweep ends it at the
    // idle limit (the latest of its opening, start and last input).
    assert_eq!(row_of(&a, active).await.0, "active");
    let (created, started, input): (i64, Option<i64>, Option<i64>) = sqlx::query_as(
        "SELECT created_at, started_at, last_input_at FROM terminal_sessions WHERE id = $1",
    )
    .bind(active.to_string())
    .fetch_one(a.state.db().pool())
    .await
    .unwrap();
    let since = created.max(started.unwrap_or(0)).max(input.unwrap_or(0));
    let limit = sweep::Limits::from_config(&a.state.config().terminal).idle_limit;
    let swept = sweep::run_once(a.state.db(), a.state.config(), since + limit - 1)
        .await
        .unwrap();
    assert!(swept.iter().all(|s| s.session_id != active), "{swept:?}");
    let swept = sweep::run_once(a.state.db(), a.state.config(), since + limit)
        .await
        .unwrap();
    assert!(swept.iter().any(|s| s.session_id == active), "{swept:?}");
    assert_eq!(
        row_of(&a, active).await,
        ("closed".to_owned(), Some("idle_timeout".to_owned()), None)
    );
}
