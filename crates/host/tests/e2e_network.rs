//! The host service on a machine of its own (issue 15 items 13 and 15): the
//! real server, `bothy-host pair` and `supervise` inside their own network
//! namespace (`Options::own_network`), so the server is another machine for
//! the host — not the server host of 2.3 — and a member who is the host's
//! assignee may open (SR10). Here run the revocations of 8.3 that only reach
//! a non-owner (TM-T10: a revoked grant, leaving a group, an expired grant),
//! each with background processes that left the shell's session, and the
//! host's network loss of TM-T16 (the link cut without a reset: the PTY
//! survives, a reattach replays).

use bothy_testkit::hosts as hosts_common;
use bothy_testkit::identity as identity_common;
use bothy_testkit::scenario as e2e_common;
use bothy_testkit::wait::try_eventually;

use bothy_proto::frame::TerminalSize;
use bothy_server::clock::Clock;
use bothy_server::db::Engine;
use e2e_common::{Options, Scenario, revoked, start_background};
use hosts_common::{Person, invited_person};
use identity_common::{post, post_empty};
use serde_json::json;

fn size() -> TerminalSize {
    TerminalSize::new(100, 30).expect("size")
}

/// A scenario whose host service has a network of its own, with a second
/// session user for the member.
async fn remote(extra_server_yaml: &str) -> Scenario {
    Scenario::start(
        Engine::Sqlite,
        Options {
            own_network: true,
            session_users: 2,
            extra_server_yaml: extra_server_yaml.to_owned(),
            ..Options::default()
        },
    )
    .await
}

/// The member bob: the host's assignee (SR10) with the second session user.
async fn member(scenario: &Scenario) -> Person {
    let bob = invited_person(&scenario.server, &scenario.owner, "bob", "member", 2).await;
    let reply = scenario
        .host_change(
            reqwest::Method::PATCH,
            "",
            json!({"assigned_user_id": bob.id()}),
        )
        .await;
    assert_eq!(reply.status, 200, "assign the host: {:?}", reply.body);
    scenario.assign_user(&bob, 1).await;
    bob
}

/// A grant of terminal on the scenario's host (`expires_at` optional); its ID.
async fn grant(
    scenario: &Scenario,
    kind: &str,
    recipient_id: &str,
    expires_at: Option<i64>,
) -> String {
    let mut body = json!({"host_id": scenario.host_id, "recipient_kind": kind,
                          "recipient_id": recipient_id});
    if let Some(at) = expires_at {
        body["expires_at"] = json!(at);
    }
    let reply = post(
        &scenario.server,
        "/api/v1/grants",
        Some(scenario.owner.token()),
        body,
    )
    .await;
    assert_eq!(reply.status, 201, "grant: {:?}", reply.body);
    reply.body["grant"]["id"]
        .as_str()
        .expect("grant id")
        .to_owned()
}

/// TM-T10 for a member on a host that is not the server host: a revoked
/// grant, leaving the group whose grant gave the terminal, and a grant that
/// expired (ended by the job terminal.sweep) each end the running session
/// with access_revoked (4100 to the device), and its PTY with the
/// background processes that left the shell's session (setsid, nohup).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tm_t10_a_member_loses_the_terminal_by_grant_group_and_expiry() {
    let scenario = remote("").await;
    let server = &scenario.server;
    let owner = scenario.owner.token().to_owned();
    let bob = member(&scenario).await;
    // A revoked grant.
    let own = grant(&scenario, "person", bob.id(), None).await;
    revoked(&scenario, &bob, 1, "access_revoked", |_| async {
        let reply = post_empty(server, &format!("/api/v1/grants/{own}/revoke"), &owner).await;
        assert_eq!(reply.status, 200, "{:?}", reply.body);
    })
    .await;
    // Leaving the group whose grant gave the terminal.
    let reply = post(
        server,
        "/api/v1/groups",
        Some(&owner),
        json!({"name": "night-shift"}),
    )
    .await;
    assert_eq!(reply.status, 201, "{:?}", reply.body);
    let group = reply.body["group"]["id"]
        .as_str()
        .expect("group id")
        .to_owned();
    let reply = post(
        server,
        &format!("/api/v1/groups/{group}/members"),
        Some(&owner),
        json!({"person_id": bob.id()}),
    )
    .await;
    assert!(reply.status.is_success(), "{:?}", reply.body);
    grant(&scenario, "group", &group, None).await;
    revoked(&scenario, &bob, 1, "access_revoked", |_| async {
        let path = format!("/api/v1/groups/{group}/members/{}/remove", bob.id());
        let reply = post_empty(server, &path, &owner).await;
        assert_eq!(reply.status, 200, "{:?}", reply.body);
    })
    .await;
    // A grant that expires: the first sweep pass at its expiry ends it.
    let expires_at = server.clock.now_ms() + 10 * 60_000;
    grant(&scenario, "person", bob.id(), Some(expires_at)).await;
    revoked(&scenario, &bob, 1, "access_revoked", |_| async {
        let state = &server.state;
        bothy_server::terminal::sweep::run_once(state.db(), state.config(), expires_at)
            .await
            .expect("a sweep pass");
    })
    .await;
}

/// TM-T16, the host's network lost without a reset (its link cut, packets
/// dropped): the relay's ping finds the host's data connection gone, the
/// device gets 4102 and the session is detached, the PTY and its background
/// processes survive on the host; with the network back, an attach replays
/// the scrollback and the shell goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tm_t16_a_host_that_loses_its_network_keeps_the_pty_for_a_reattach() {
    let scenario = remote("gateway:\n  ping_interval: 200ms\n  ping_timeout: 1s\n").await;
    let network = scenario.network.as_ref().expect("own network");
    let mut device = scenario.open_shell().await;
    device.type_text("echo BEF\"\"ORE\n").await;
    device.expect_output("BEFORE").await;
    start_background(&mut device).await;
    let processes = scenario.background_settled(0).await;
    let session_id = device.session_id;
    network.set_up(false);
    assert_eq!(
        device.expect_close().await,
        (4102, "terminal_host_unavailable".to_owned())
    );
    scenario.wait_state(session_id, "detached").await;
    let mut now = scenario.session_processes(0);
    now.sort_unstable();
    assert_eq!(
        now, processes,
        "the PTY and its background processes live on"
    );
    network.set_up(true);
    // The control connection was never reset: it carries the attach's
    // session.open as soon as packets flow again.
    let mut again = scenario.attach(&scenario.owner, session_id, size()).await;
    let replay = again.expect_replay().await;
    assert!(
        String::from_utf8_lossy(&replay).contains("BEFORE"),
        "the replay holds the output before the loss"
    );
    again.output.clear();
    again.type_text("echo AF\"\"TER\n").await;
    again.expect_output("AFTER").await;
    // The relay writes `active` after the pairing, in a task of its own
    // (6.2): the output can come first.
    scenario.wait_state(session_id, "active").await;
}

/// TM-T06 on the wire (issue 15 item 14): a canary typed into a real shell
/// and printed by it crosses the device's stream, the relay and the host's
/// data connection, and is found neither in a capture of the wire
/// (`tcpdump -i any` of the server's port: the device's leg on the loopback,
/// the host's leg through its own network and the forwarder) nor in the
/// server's database files. The capture must hold the session's traffic (its
/// size is checked), so an empty capture cannot pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tm_t06_the_canary_is_neither_on_the_wire_nor_in_the_database() {
    const MIN_CAPTURE: u64 = 10_000;
    let scenario = remote("").await;
    let pcap = scenario.dir.path.join("wire.pcap");
    let mut tcpdump = std::process::Command::new("tcpdump")
        // A kernel buffer of 32 MiB: on a loaded machine a starved tcpdump
        // must not lose packets of the session.
        .args([
            "-i",
            "any",
            "--immediate-mode",
            "-U",
            "-n",
            "-s",
            "0",
            "-B",
            "32768",
            "-w",
        ])
        .arg(&pcap)
        .arg(format!("tcp port {}", scenario.server.port))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("tcpdump runs (.ci/run installs it)");
    // tcpdump says "listening on ..." once it captures; its stderr is read to
    // the end, so it never writes into a closed pipe.
    let stderr = tcpdump.stderr.take().expect("stderr");
    let (listening_tx, listening) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        let mut listening_tx = Some(listening_tx);
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if line.contains("listening on") {
                if let Some(tx) = listening_tx.take() {
                    let _ = tx.send(());
                }
            }
        }
    });
    tokio::time::timeout(e2e_common::WAIT, listening)
        .await
        .expect("tcpdump starts in time")
        .expect("tcpdump listens");
    let mut device = scenario.open_shell().await;
    device.type_text("echo CANARY-5e1d$((2+3))\n").await;
    device.expect_output("CANARY-5e1d5").await;
    device.type_text("exit 0\n").await;
    assert_eq!(device.expect_exit().await, 0);
    let _ = device.expect_close().await;
    // Every packet is written as it comes (--immediate-mode, -U); wait until
    // the session's traffic is in the file, bounded, then stop the capture.
    // About 26 KB on an idle machine: the TLS handshakes of the device's
    // stream and the host's data connection, the frames, the teardown; at
    // least the two handshakes with the server's certificate must be there.
    // Not there in time: the assertion on the capture below says so.
    let _ = try_eventually(e2e_common::WAIT, || async {
        (std::fs::metadata(&pcap).map_or(0, |m| m.len()) > MIN_CAPTURE).then_some(())
    })
    .await;
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(tcpdump.id()).expect("pid")),
        nix::sys::signal::Signal::SIGINT,
    );
    let _ = tcpdump.wait();
    let wire = std::fs::read(&pcap).expect("the capture");
    assert!(
        wire.len() > MIN_CAPTURE as usize,
        "the capture holds the session's traffic: {} bytes",
        wire.len()
    );
    let found = |haystack: &[u8]| {
        haystack
            .windows("CANARY-5e1d".len())
            .any(|w| w == b"CANARY-5e1d")
    };
    assert!(!found(&wire), "the canary is on the wire in clear");
    let url = scenario
        .server
        .state
        .config()
        .database_url()
        .expose()
        .to_owned();
    let file = url
        .trim_start_matches("sqlite://")
        .split('?')
        .next()
        .expect("path")
        .to_owned();
    let mut checked = 0;
    for suffix in ["", "-wal", "-shm"] {
        if let Ok(bytes) = std::fs::read(format!("{file}{suffix}")) {
            checked += 1;
            assert!(!found(&bytes), "the canary is in the database file{suffix}");
        }
    }
    assert!(checked > 0, "the database file {file} was read");
}

/// TM-T10, the rest of 8.3's list through the real host (issue 15 item 13):
/// the operator takes the member's session user out (`bothy-host
/// session-user remove`), which restarts the host service — the running
/// session ends with host_restarted (6.2: a restart ends every session,
/// before the report without the name arrives) with its background
/// processes, and the next report without the name leaves the member no
/// terminal (403 no_session_user, SR12); then the owner retires the host:
/// host_retired, every process of the owner's session ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tm_t10_a_removed_session_user_and_a_retired_host() {
    let mut scenario = remote("").await;
    let bob = member(&scenario).await;
    grant(&scenario, "person", bob.id(), None).await;
    let removed = scenario.users[1].name.clone();
    let mut device = scenario.open_as(&bob, "shell", size()).await;
    start_background(&mut device).await;
    scenario.wait_session_processes(1, 3).await;
    let output = scenario.session_user(&["remove", &removed]);
    assert!(output.status.success(), "session-user remove: {output:?}");
    // The service stops first: its data connection goes (4102, detached);
    // the new service names no live session at its login: host_restarted.
    assert_eq!(
        device.expect_close().await,
        (4102, "terminal_host_unavailable".to_owned())
    );
    assert_eq!(scenario.closed(device.session_id).await.0, "host_restarted");
    scenario.wait_no_session_processes(1).await;
    scenario.wait_connected().await;
    let reply = scenario.open_reply(&bob, "shell", &[7u8; 32]).await;
    assert_eq!(
        (
            reply.status.as_u16(),
            reply.body["code"].as_str(),
            reply.body["reason"].as_str()
        ),
        (403, Some("terminal_denied"), Some("no_session_user")),
        "{:?}",
        reply.body
    );
    revoked(&scenario, &scenario.owner, 0, "host_retired", |_| async {
        let reply = scenario
            .host_change(reqwest::Method::PATCH, "", json!({"state": "retired"}))
            .await;
        assert_eq!(reply.status, 200, "retire: {:?}", reply.body);
    })
    .await;
    scenario.stop_service();
}
