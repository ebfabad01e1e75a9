//! Several server nodes (issue 18, spec 24 section 9, 3.4 "Several nodes",
//! TM-T15, TM-T23): three real server nodes with `cluster.mode: multi` on one
//! fresh PostgreSQL database (dropped after the test), Debian's nginx in
//! front with the shape of `deploy/nginx/bothy.conf`, the real `bothy-host`
//! paired and connected through the edge, and a test device. Node A serves
//! the openings, the edge puts the host's control connection on node B and
//! both stream paths on node C (`e2e_common::cluster`).

use bothy_testkit as support;
use bothy_testkit::terminal as terminal_common;

use bothy_testkit::scenario as e2e_common;
use bothy_testkit::wait::try_eventually;

use std::time::Duration;

use bothy_proto::frame::TerminalSize;
use bothy_server::db::Engine;
use bothy_server::terminal::links::ControlLinks;
use e2e_common::{Options, Scenario, WAIT, revoked};
use serde_json::json;

/// A short open timeout for TM-T15 and a short probe timeout, so the
/// probation of 3.4 (twice the probe timeout) is short too.
const TERMINAL_YAML: &str = "  open_timeout: 4s\n  host_duplicate_probe_timeout: 1s\n";

async fn cluster() -> Scenario {
    Scenario::start(
        Engine::Postgres,
        Options {
            cluster: true,
            extra_terminal_yaml: TERMINAL_YAML.to_owned(),
            ..Options::default()
        },
    )
    .await
}

/// The host's control connection is on node B (the edge put it there), not
/// on A or C; A and C count the host as connected through B's announcement
/// (which reaches each node's listener in its own time: waited for).
async fn assert_control_on_b(scenario: &Scenario) {
    let host = scenario.host_uuid();
    let cluster = scenario.cluster.as_ref().expect("cluster");
    assert!(
        cluster
            .b()
            .state
            .local_control_links()
            .conn_id(host)
            .is_some()
    );
    assert!(
        scenario
            .server
            .state
            .local_control_links()
            .conn_id(host)
            .is_none()
    );
    assert!(
        cluster
            .c()
            .state
            .local_control_links()
            .conn_id(host)
            .is_none()
    );
    for node in [&scenario.server, cluster.c()] {
        support::wait::eventually("the announcement of B's connection", WAIT, || {
            std::future::ready(node.state.control_links().is_connected(host).then_some(()))
        })
        .await;
    }
}

/// Spec 9 end to end: the opening served by node A, the control connection
/// on node B (which sends `session.open` after the probation), both streams
/// hashed by nginx to node C, where the relay pairs them; the shell works,
/// its exit code arrives, and the session ends `process_exited`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_opening_on_node_a_reaches_the_host_on_node_b_and_pairs_on_node_c() {
    let scenario = cluster().await;
    assert_control_on_b(&scenario).await;
    let mut device = scenario.open_shell().await;
    let cluster = scenario.cluster.as_ref().expect("cluster");
    let sides = cluster.c().state.relay().sides(device.session_id);
    assert!(
        sides.device && sides.host,
        "both sides on node C: {sides:?}"
    );
    for node in [&scenario.server, cluster.b()] {
        let sides = node.state.relay().sides(device.session_id);
        assert!(!sides.device && !sides.host, "no side elsewhere: {sides:?}");
    }
    device.type_text("echo MULTI$((40+2))\n").await;
    device.expect_output("MULTI42").await;
    // session.started arrived on B, which holds no side: active, not detached.
    scenario.wait_state(device.session_id, "active").await;
    device.type_text("exit 3\n").await;
    assert_eq!(device.expect_exit().await, 3);
    let (code, reason) = device.expect_close().await;
    assert_eq!((code, reason.as_str()), (4100, "process_exited"));
    assert_eq!(scenario.closed(device.session_id).await.0, "process_exited");
}

/// A host disabled through node A: its session relayed on node C ends
/// `host_disabled` (with its processes), and its control connection on node
/// B closes with 4111 (`terminal.host_close` over NOTIFY).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_disabled_on_node_a_is_closed_4111_on_node_b_and_its_sessions_end_on_node_c() {
    let scenario = cluster().await;
    assert_control_on_b(&scenario).await;
    revoked(&scenario, &scenario.owner, 0, "host_disabled", |_| async {
        let reply = scenario
            .host_change(reqwest::Method::PATCH, "", json!({"state": "disabled"}))
            .await;
        assert_eq!(reply.status, 200, "{:?}", reply.body);
    })
    .await;
    scenario.wait_log("close_code=4111").await;
    let host = scenario.host_uuid();
    let cluster = scenario.cluster.as_ref().expect("cluster");
    let dropped = try_eventually(WAIT, || async {
        cluster
            .b()
            .state
            .local_control_links()
            .conn_id(host)
            .is_none()
            .then_some(())
    })
    .await;
    assert!(dropped.is_some(), "B still holds it");
    assert!(!scenario.server.state.control_links().is_connected(host));
}

/// TM-T15: a device stream that bypasses the edge and reaches node B while
/// the host's data connection reaches node C (through the edge): neither
/// finds its counterpart; the device gets 4102 after `terminal.open_timeout`,
/// counted in `bothy.terminal.relay.unpaired` with its side on B, `/readyz`
/// stays ready, and the session ends `open_failed`/`open_timeout` exactly
/// once (one audit entry `terminal.terminate`, one closed event), though
/// both nodes' timers run out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tm_t15_a_side_sent_to_the_wrong_node_closes_4102_and_the_opening_ends_once() {
    let scenario = cluster().await;
    let cluster = scenario.cluster.as_ref().expect("cluster");
    let b = cluster.b();
    let c = cluster.c();
    let client_before = b.state.metrics().terminal_relay_unpaired("client").get();
    let host_before = c.state.metrics().terminal_relay_unpaired("host").get();
    let (grant, _key) = scenario.open_raw(&scenario.owner, "shell").await;
    let session_id = grant.session_id;
    // The device goes straight to node B (not through the edge).
    let mut ws = terminal_common::device::login(b, session_id, scenario.owner.token()).await;
    // The host's data connection reaches node C through the edge.
    let reached = try_eventually(WAIT, || async {
        cluster
            .c()
            .state
            .relay()
            .sides(session_id)
            .host
            .then_some(())
    })
    .await;
    assert!(
        reached.is_some(),
        "the host's data connection never reached node C; host log:\n{}",
        scenario.log()
    );
    assert!(b.state.relay().sides(session_id).device);
    let code = support::ws::close_code(&mut ws).await;
    assert_eq!(code, 4102, "the lone device side");
    let (reason, detail) = scenario.closed(session_id).await;
    assert_eq!(
        (reason.as_str(), detail.as_deref()),
        ("open_failed", Some("open_timeout"))
    );
    assert_eq!(
        b.state.metrics().terminal_relay_unpaired("client").get(),
        client_before + 1
    );
    let ready = b.client.get(b.url("/readyz")).send().await.expect("readyz");
    assert_eq!(ready.status(), 200);
    // Both nodes' timers have run out by now (C's host side joined later than
    // the grant, so wait for its own deadline as well).
    let released = try_eventually(WAIT, || async {
        (!cluster.c().state.relay().sides(session_id).host).then_some(())
    })
    .await;
    assert!(released.is_some(), "C keeps the lone host side");
    // The lone host side on C counts once, with its side, whichever way the
    // end reached it (its own timer or B's end through C's log tail).
    assert_eq!(
        c.state.metrics().terminal_relay_unpaired("host").get(),
        host_before + 1
    );
    // Let a second compare-and-swap of C land if it were to write anything
    // (a negative check: it cannot pass by timing, only miss a late write).
    tokio::time::sleep(Duration::from_secs(1)).await;
    let id = session_id.to_string();
    let pool = scenario.server.state.db().pool();
    let audits: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM audit WHERE action = 'terminal.terminate' AND target_id = $1",
    )
    .bind(&id)
    .fetch_one(pool)
    .await
    .expect("audit");
    assert_eq!(audits, 1, "one terminal.terminate");
    let closed: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM events WHERE kind = 'terminal_session.changed' \
         AND payload::jsonb ->> 'session_id' = $1 AND payload::jsonb ->> 'state' = 'closed'",
    )
    .bind(&id)
    .fetch_one(pool)
    .await
    .expect("events");
    assert_eq!(closed, 1, "one closed event");
}

/// TM-T16, a node dies: the node holding the host's control connection (a
/// real `bothy-server` process, which the edge prefers for the control
/// connection) is killed with SIGKILL during a session relayed on node C; the
/// host service reconnects through nginx to another node (B, the edge's
/// backup), and a new opening served by node A works through it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tm_t16_the_node_of_the_control_connection_killed_the_host_reconnects_to_another() {
    let mut scenario = Scenario::start(
        Engine::Postgres,
        Options {
            cluster: true,
            control_process: true,
            extra_terminal_yaml: TERMINAL_YAML.to_owned(),
            ..Options::default()
        },
    )
    .await;
    let host = scenario.host_uuid();
    {
        let cluster = scenario.cluster.as_ref().expect("cluster");
        for node in [&scenario.server, cluster.b(), cluster.c()] {
            assert!(
                node.state.local_control_links().conn_id(host).is_none(),
                "the control connection is on the process node"
            );
        }
    }
    let mut device = scenario.open_shell().await;
    device.type_text("echo BEFORE$((1+1))\n").await;
    device.expect_output("BEFORE2").await;

    scenario
        .cluster
        .as_mut()
        .expect("cluster")
        .kill_process_node();
    let cluster = scenario.cluster.as_ref().expect("cluster");
    let reconnected = try_eventually(WAIT, || async {
        cluster
            .b()
            .state
            .local_control_links()
            .is_connected(host)
            .then_some(())
    })
    .await;
    assert!(
        reconnected.is_some(),
        "the host service did not reconnect to node B; its log:\n{}",
        scenario.log()
    );
    // A new opening served by node A reaches the host through node B.
    let mut again = scenario.open_shell().await;
    again.type_text("echo AFTER$((2+2))\n").await;
    again.expect_output("AFTER4").await;
    again.type_text("exit 0\n").await;
    assert_eq!(again.expect_exit().await, 0);
    drop(device);
}

/// TM-T16, the node relaying sessions dies: both sides of two sessions are
/// relayed on node P (a real `bothy-server` process that the edge prefers
/// for the stream paths, node C its backup), killed with SIGKILL. No living
/// node held their sides, so none marks them detached: the rows stay
/// `active` (D-515). The host service detaches them itself (6.2: a lost
/// data connection) and keeps their PTYs. One is attached again (a fresh
/// step-up, a takeover of the `active` row) and lands on node C through
/// the edge: the replay shows what ran before and the shell goes on. The
/// other is left alone: the host service's detach timer
/// (`terminal.detach_grace`, 10 s here) ends its PTY and reports
/// `detach_expired` over the control connection on node B, so neither
/// stays `active` (a node that dies with its host service too is left to
/// the sweep, `crates/server/tests/terminal_cluster.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tm_t16_the_node_relaying_sessions_killed_one_reattaches_through_another_one_expires() {
    let mut scenario = Scenario::start(
        Engine::Postgres,
        Options {
            cluster: true,
            streams_process: true,
            extra_terminal_yaml: format!("{TERMINAL_YAML}  detach_grace: 10s\n"),
            ..Options::default()
        },
    )
    .await;
    let mut kept = scenario.open_shell().await;
    kept.type_text("echo BEFORE$((1+1))\n").await;
    kept.expect_output("BEFORE2").await;
    let mut left = scenario.open_shell().await;
    left.type_text("echo LEFT$((1+2))\n").await;
    left.expect_output("LEFT3").await;
    {
        let cluster = scenario.cluster.as_ref().expect("cluster");
        for node in [&scenario.server, cluster.b(), cluster.c()] {
            for id in [kept.session_id, left.session_id] {
                let sides = node.state.relay().sides(id);
                assert!(!sides.device && !sides.host, "relayed on P only: {sides:?}");
            }
        }
    }

    scenario
        .cluster
        .as_mut()
        .expect("cluster")
        .kill_process_node();
    let (kept_id, left_id) = (kept.session_id, left.session_id);
    drop((kept, left));
    assert_eq!(scenario.session_row(kept_id).await.0, "active");

    let size = TerminalSize::new(100, 30).expect("size");
    let mut again = scenario.attach(&scenario.owner, kept_id, size).await;
    let replay = again.expect_replay().await;
    assert!(
        String::from_utf8_lossy(&replay).contains("BEFORE2"),
        "replay: {:?}",
        String::from_utf8_lossy(&replay)
    );
    again.type_text("echo AFTER$((2+2))\n").await;
    again.expect_output("AFTER4").await;
    let sides = scenario
        .cluster
        .as_ref()
        .expect("cluster")
        .c()
        .state
        .relay()
        .sides(kept_id);
    assert!(sides.device && sides.host, "both sides on C now: {sides:?}");

    let (reason, detail) = scenario.closed(left_id).await;
    assert_eq!((reason.as_str(), detail), ("detach_expired", None));
    again.type_text("exit 0\n").await;
    assert_eq!(again.expect_exit().await, 0);
    assert_eq!(scenario.closed(kept_id).await.0, "process_exited");
}
