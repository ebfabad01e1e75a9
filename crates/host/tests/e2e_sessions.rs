//! The host service end to end (issue 6): the real server, `bothy-host pair`,
//! `bothy-host supervise` with real OS users, and a test device speaking the
//! real protocol. See `e2e_common` for the harness.

use bothy_testkit::hosts as hosts_common;
use bothy_testkit::identity as identity_common;
use bothy_testkit::scenario as e2e_common;
use bothy_testkit::terminal as terminal_common;

use std::process::Command;

use futures_util::StreamExt;
use tokio_tungstenite::tungstenite::Message;

use bothy_noise::EphemeralKey;
use bothy_proto::frame::{Frame, TerminalSize};
use bothy_proto::jws::{Att, Ed25519SigningKey, TerminalSessionClaims, ephemeral_key_hash};
use bothy_server::db::Engine;
use bothy_server::metrics::TlsHandshakeKind;
use bothy_testkit::eventually;
use bothy_testkit::wait::try_eventually;
use e2e_common::{DeviceSession, Options, Scenario, refused, revoked, start_background};
use hosts_common::{Person, invited_person};
use identity_common::post_empty;
use serde_json::json;

/// A shell runs as the session user of the person; `exit 3` gives the exit
/// frame 3 and the session ends process_exited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shell_runs_as_the_session_user_and_its_exit_code_arrives() {
    let scenario = Scenario::start(Engine::Sqlite, Options::default()).await;
    let mut device = scenario.open_shell().await;
    // The echo of the typed line shows `$(id -un)` literally; only the
    // shell's output has the name between the brackets.
    device.type_text("echo \"USER=[$(id -un)]\"\n").await;
    device
        .expect_output(&format!("USER=[{}]", scenario.users[0].name))
        .await;
    // TM-T06, host part: a canary through the session appears in no log line
    // of supervise, the helper or the service (debug level), and in no file
    // of the state directory.
    device.type_text("echo CANARY-7f3a9$((1+1))\n").await;
    device.expect_output("CANARY-7f3a92").await;
    device.type_text("exit 3\n").await;
    assert_eq!(device.expect_exit().await, 3);
    let (code, reason) = device.expect_close().await;
    assert_eq!((code, reason.as_str()), (4100, "process_exited"));
    assert_eq!(scenario.closed(device.session_id).await.0, "process_exited");
    assert!(
        !scenario.log().contains("CANARY-7f3a9"),
        "the canary is in the host log"
    );
    for entry in std::fs::read_dir(&scenario.state_dir)
        .expect("state dir")
        .flatten()
    {
        if entry.path().is_file() {
            let bytes = std::fs::read(entry.path()).expect("state file");
            assert!(
                !String::from_utf8_lossy(&bytes).contains("CANARY-7f3a9"),
                "the canary is in the state directory"
            );
        }
    }
}

/// Each data connection of the host service resumes the TLS session of an
/// earlier connection (issue 20: the opening does not pay for a full
/// handshake, certificate and its check, on the host's way): the service
/// keeps one TLS client configuration with its session store for its life,
/// and the server keeps sessions. The test's own clients never resume
/// (`ws::client_tls_config`), so every resumed handshake is the host's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_data_connection_of_the_host_resumes_its_tls_session() {
    let scenario = Scenario::start(Engine::Sqlite, Options::default()).await;
    let handshakes = scenario.server.state.metrics().tls_handshakes();
    let before = handshakes.get(TlsHandshakeKind::Resumed);
    for round in 1..=2 {
        let mut device = scenario.open_shell().await;
        device.type_text("echo RESUMED-$((20+1))\n").await;
        device.expect_output("RESUMED-21").await;
        assert_eq!(
            handshakes.get(TlsHandshakeKind::Resumed),
            before + round,
            "the data connection of opening {round} resumed"
        );
        device.type_text("exit 0\n").await;
        assert_eq!(device.expect_exit().await, 0);
    }
}

fn size() -> TerminalSize {
    TerminalSize::new(100, 30).expect("size")
}

/// Reattach replays the scrollback between replay_begin and replay_end, then
/// goes live; a wrapped buffer replays from after its first line feed (6.2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reattach_replays_the_scrollback_even_after_it_wrapped() {
    let scenario = Scenario::start(
        Engine::Sqlite,
        Options {
            extra_host_yaml: "  scrollback_bytes: 4096\n".into(),
            ..Options::default()
        },
    )
    .await;
    let mut device = scenario.open_shell().await;
    device
        .type_text("for i in $(seq 1 1000); do echo line-$i; done; echo DO\"\"NE\n")
        .await;
    device.expect_output("DONE").await;
    let session_id = device.session_id;
    // The device goes away: the session is detached, the PTY keeps running.
    drop(device);
    scenario.wait_state(session_id, "detached").await;
    let mut again = scenario.attach(&scenario.owner, session_id, size()).await;
    let replay = again.expect_replay().await;
    let text = String::from_utf8_lossy(&replay);
    assert!(replay.len() <= 4096, "at most the buffer: {}", replay.len());
    assert!(
        text.starts_with("line-"),
        "a wrapped buffer starts after a line feed: {text:?}"
    );
    assert!(
        text.contains("line-1000\r\n") && text.contains("DONE"),
        "{text:?}"
    );
    again.output.clear();
    again.type_text("echo LI\"\"VE\n").await;
    again.expect_output("LIVE").await;
}

/// 6.2: another attach while a device is paired: the older stream gets 4103
/// (never 4102 when the host service then replaces its data connection), the
/// new device pairs, and the session is active again, so the relay's detach
/// clock does not end it after terminal.detach_grace (15 minutes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_attach_replaces_the_paired_device_with_4103_and_the_session_is_active_again() {
    let scenario = Scenario::start(Engine::Sqlite, Options::default()).await;
    let mut first = scenario.open_shell().await;
    first.type_text("echo ON\"\"E\n").await;
    first.expect_output("ONE").await;
    let session_id = first.session_id;
    scenario.wait_state(session_id, "active").await;
    let mut second = scenario.attach(&scenario.owner, session_id, size()).await;
    assert_eq!(
        first.expect_close().await,
        (4103, "terminal_replaced".to_owned())
    );
    second.expect_replay().await;
    second.output.clear();
    second.type_text("echo TW\"\"O\n").await;
    second.expect_output("TWO").await;
    scenario.wait_state(session_id, "active").await;
    // Past the detach grace on the server's clock: the relay looks twice and
    // ends nothing.
    scenario
        .server
        .clock
        .advance(std::time::Duration::from_secs(16 * 60));
    let relay = scenario.server.state.relay();
    let seen = relay.ticks();
    eventually("the relay to look at its clocks", e2e_common::WAIT, || {
        std::future::ready((relay.ticks() >= seen + 2).then_some(()))
    })
    .await;
    second.output.clear();
    second.type_text("echo THR\"\"EE\n").await;
    second.expect_output("THREE").await;
    assert_eq!(scenario.session_row(session_id).await.0, "active");
}

/// TM-T03: a relay that replays message 1 (the same token) on a new data
/// connection gets 4101 token_replayed, no second PTY, and the session stays
/// attachable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tm_t03_a_replayed_message_1_is_token_replayed_and_starts_no_pty() {
    let scenario = Scenario::start(Engine::Sqlite, Options::default()).await;
    let mut device = scenario.open_shell().await;
    device.type_text("echo UP\"\"1\n").await;
    device.expect_output("UP1").await;
    let session_id = device.session_id;
    let old_message1 = device.message1.clone();
    let processes = scenario.session_processes(0).len();
    drop(device);
    scenario.wait_state(session_id, "detached").await;
    // A new grant (attach) makes the host open a new data connection; the
    // "relay" sends the old message 1 on it.
    let (_grant, _key) = scenario.attach_raw(&scenario.owner, session_id).await;
    let mut ws = scenario.device_stream(&scenario.owner, session_id).await;
    assert_eq!(
        refused(&mut ws, old_message1).await,
        (4101, "token_replayed".to_owned())
    );
    assert_eq!(
        scenario.session_processes(0).len(),
        processes,
        "no second PTY"
    );
    // The live PTY stays detached and attachable.
    scenario.wait_state(session_id, "detached").await;
    let mut again = scenario.attach(&scenario.owner, session_id, size()).await;
    again.type_text("echo UP\"\"2\n").await;
    again.expect_output("UP2").await;
}

/// TM-T04 end to end for what a device or relay can forge: a token signed by
/// a foreign key, the token of another session (sid), the right token with
/// another ephemeral key (cek) — each 4104 token_invalid and no PTY; the
/// opening ends open_failed. The remaining claims (aud, typ, exp) are covered
/// by the check-order tests of `data::checks`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tm_t04_forged_tokens_are_token_invalid_and_start_no_pty() {
    let scenario = Scenario::start(Engine::Sqlite, Options::default()).await;
    let host_id = scenario.host_uuid();
    // 1. The right token, message 1 with another ephemeral key.
    let (grant, _key) = scenario.open_raw(&scenario.owner, "shell").await;
    let other = EphemeralKey::generate().expect("key");
    assert_eq!(
        scenario
            .refused_message1(&scenario.owner, &grant, other, &grant.token)
            .await,
        (4104, "token_invalid".to_owned())
    );
    assert_eq!(
        scenario.closed(grant.session_id).await,
        ("open_failed".to_owned(), Some("token_invalid".to_owned()))
    );
    // 2. A token signed by a key the server never published (foreign kid).
    let (grant, key) = scenario.open_raw(&scenario.owner, "shell").await;
    let foreign = Ed25519SigningKey::generate().expect("key");
    let forged = TerminalSessionClaims {
        iss: "forged".into(),
        aud: host_id,
        sub: uuid::Uuid::parse_str(scenario.owner.id()).expect("uuid"),
        sid: grant.session_id,
        jti: uuid::Uuid::from_u128(7),
        iat: e2e_common::real_now_ms() / 1000,
        exp: e2e_common::real_now_ms() / 1000 + 30,
        dev: uuid::Uuid::from_u128(8),
        prf: "shell".into(),
        cek: ephemeral_key_hash(&key.public()),
        own: true,
        osu: scenario.users[0].name.clone(),
        wdi: None,
        att: Att::Open,
    }
    .sign(&foreign);
    assert_eq!(
        scenario
            .refused_message1(&scenario.owner, &grant, key, &forged)
            .await,
        (4104, "token_invalid".to_owned())
    );
    // 3. The token of another session on this session's stream (sid).
    let (first, first_key) = scenario.open_raw(&scenario.owner, "shell").await;
    let (second, _) = scenario.open_raw(&scenario.owner, "shell").await;
    assert_eq!(
        scenario
            .refused_message1(&scenario.owner, &second, first_key, &first.token)
            .await,
        (4104, "token_invalid".to_owned())
    );
    assert!(scenario.session_processes(0).is_empty(), "no PTY started");
}

/// Issue 21, TM-T04 (attach), 6.2: an attach whose message 1 the host
/// service refuses with 4104 — random bytes (step 0, handshake_failed), the
/// right token with another ephemeral key (step 7, token_invalid), the token
/// of another session (step 4, token_invalid) — ends the live PTY with its
/// background processes, and the server ends the session open_failed with
/// that detail instead of leaving it detached without a PTY; a correct attach
/// afterwards is refused as closed (409), never as a handshake (4104).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attach_refused_with_4104_ends_the_session_and_every_process() {
    let scenario = Scenario::start(Engine::Sqlite, Options::default()).await;
    let host_id = scenario.host_uuid();
    for case in ["random", "other_key", "other_session"] {
        let mut device = scenario.open_shell().await;
        start_background(&mut device).await;
        scenario.wait_session_processes(0, 3).await;
        let session_id = device.session_id;
        drop(device);
        scenario.wait_state(session_id, "detached").await;
        let (grant, key) = scenario.attach_raw(&scenario.owner, session_id).await;
        let (message1, detail) = match case {
            "random" => (vec![0x5a; 96], "handshake_failed"),
            "other_key" => {
                let other = EphemeralKey::generate().expect("key");
                let message1 = grant
                    .initiator(host_id, other)
                    .write_message1(grant.token.as_bytes())
                    .expect("m1");
                (message1, "token_invalid")
            }
            _ => {
                let (other, _) = scenario.open_raw(&scenario.owner, "shell").await;
                let message1 = grant
                    .initiator(host_id, key)
                    .write_message1(other.token.as_bytes())
                    .expect("m1");
                (message1, "token_invalid")
            }
        };
        let mut ws = scenario.device_stream(&scenario.owner, session_id).await;
        assert_eq!(refused(&mut ws, message1).await, (4104, detail.to_owned()));
        assert_eq!(
            scenario.closed(session_id).await,
            ("open_failed".to_owned(), Some(detail.to_owned())),
            "{case}"
        );
        scenario.wait_no_session_processes(0).await;
        scenario
            .assert_attach_refused_as_closed(&scenario.owner, session_id)
            .await;
    }
}

/// 6.2: an attach whose first transport message is not `start` ends the
/// session open_failed/handshake_failed with its processes; an attach without
/// `start` until `expires_at` leaves the session detached with its PTY, and a
/// correct attach afterwards works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attach_with_a_faulty_or_missing_start_ends_or_keeps_the_session() {
    let scenario = Scenario::start(
        Engine::Sqlite,
        Options {
            extra_terminal_yaml: "  open_timeout: 3s\n".into(),
            ..Options::default()
        },
    )
    .await;
    // No start until expires_at: 1000 from the host, 4102 to the device, the
    // session stays detached and attachable.
    let mut device = scenario.open_shell().await;
    device.type_text("echo KE\"\"PT\n").await;
    device.expect_output("KEPT").await;
    let session_id = device.session_id;
    drop(device);
    scenario.wait_state(session_id, "detached").await;
    let (grant, key) = scenario.attach_raw(&scenario.owner, session_id).await;
    let mut silent = DeviceSession::connect_grant(&scenario, &scenario.owner, &grant, key).await;
    // The host waits until expires_at on its own clock; every TOTP step-up
    // moved the server's clock a step ahead of it (see e2e_common), so the
    // wait is longer than one WAIT of silence.
    let close = tokio::time::timeout(4 * e2e_common::WAIT, async {
        loop {
            match silent.ws.next().await {
                Some(Ok(Message::Close(Some(frame)))) => {
                    return (u16::from(frame.code), frame.reason.to_string());
                }
                Some(Ok(_)) => {}
                other => panic!("the stream ended without a close frame: {other:?}"),
            }
        }
    })
    .await
    .expect("the host gives up on start at expires_at");
    assert_eq!(close, (4102, "terminal_host_unavailable".to_owned()));
    scenario.wait_state(session_id, "detached").await;
    let mut again = scenario.attach(&scenario.owner, session_id, size()).await;
    again.expect_output("KEPT").await;
    start_background(&mut again).await;
    scenario.wait_session_processes(0, 3).await;
    drop(again);
    scenario.wait_state(session_id, "detached").await;
    // A first frame other than start: the session ends with every process.
    let (grant, key) = scenario.attach_raw(&scenario.owner, session_id).await;
    let mut faulty = DeviceSession::connect_grant(&scenario, &scenario.owner, &grant, key).await;
    faulty.type_text("echo no start\n").await;
    assert_eq!(
        faulty.expect_close().await,
        (4104, "handshake_failed".to_owned())
    );
    assert_eq!(
        scenario.closed(session_id).await,
        (
            "open_failed".to_owned(),
            Some("handshake_failed".to_owned())
        )
    );
    scenario.wait_no_session_processes(0).await;
    scenario
        .assert_attach_refused_as_closed(&scenario.owner, session_id)
        .await;
}

/// TM-T04 end to end for an expired token (issue 15 item 13): a token whose
/// exp lies before the host's clock minus the leeway of the data
/// connection's hello — here signed by a key the server publishes as
/// `retiring` (inserted into its table, so it is in the JWKS of every hello),
/// as a relay that held message 1 back for hours would present it — reaches
/// the host on a real data connection of a real attach: 4101 token_expired,
/// no new PTY, the session stays detached and a correct attach replays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tm_t04_an_expired_token_on_a_real_data_connection_is_4101() {
    let scenario = Scenario::start(Engine::Sqlite, Options::default()).await;
    let mut device = scenario.open_shell().await;
    device.type_text("echo MA\"\"RK\n").await;
    device.expect_output("MARK").await;
    let session_id = device.session_id;
    let processes = scenario.session_processes(0).len();
    drop(device);
    scenario.wait_state(session_id, "detached").await;
    // A published key of the server's whose private half the test holds.
    let key = Ed25519SigningKey::generate().expect("key");
    let now = e2e_common::real_now_ms();
    sqlx::query(
        "INSERT INTO server_signing_keys (id, purpose, kid, public_jwk, private_sealed, status, \
             created_at, activates_at, activated_at, retiring_at, published_until, retired_at) \
         VALUES ($1, 'terminal', $2, $3, NULL, 'retiring', $4, $4, $4, $4, $5, NULL)",
    )
    .bind(
        bothy_proto::ids::uuid_v7(now as u64)
            .expect("id")
            .hyphenated()
            .to_string(),
    )
    .bind(key.kid())
    .bind(key.public_jwk().to_json())
    .bind(now - 4 * 3_600_000)
    .bind(now + 24 * 3_600_000)
    .execute(scenario.server.state.db().pool())
    .await
    .expect("a retiring key");
    let (grant, ephemeral) = scenario.attach_raw(&scenario.owner, session_id).await;
    // Expired by three hours; the scenario's leeway is one hour.
    let then = now / 1000 - 3 * 3600;
    let expired = TerminalSessionClaims {
        iss: "bothy".into(),
        aud: scenario.host_uuid(),
        sub: uuid::Uuid::parse_str(scenario.owner.id()).expect("uuid"),
        sid: session_id,
        jti: bothy_proto::ids::uuid_v7(now as u64).expect("id"),
        iat: then - 30,
        exp: then,
        dev: uuid::Uuid::from_u128(8),
        prf: "shell".into(),
        cek: ephemeral_key_hash(&ephemeral.public()),
        own: true,
        osu: scenario.users[0].name.clone(),
        wdi: None,
        att: Att::Attach,
    }
    .sign(&key);
    assert_eq!(
        scenario
            .refused_message1(&scenario.owner, &grant, ephemeral, &expired)
            .await,
        (4101, "token_expired".to_owned())
    );
    assert_eq!(scenario.session_processes(0).len(), processes, "no new PTY");
    scenario.wait_state(session_id, "detached").await;
    let mut again = scenario.attach(&scenario.owner, session_id, size()).await;
    again.expect_output("MARK").await;
}

/// TM-T05: messages 1 and 2 complete, but no start: no PTY; the opening ends
/// open_failed with open_timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tm_t05_without_start_no_pty_starts() {
    let scenario = Scenario::start(
        Engine::Sqlite,
        Options {
            extra_terminal_yaml: "  open_timeout: 2s\n  sweep_interval: 1s\n".into(),
            ..Options::default()
        },
    )
    .await;
    let (grant, key) = scenario.open_raw(&scenario.owner, "shell").await;
    let mut ws = scenario
        .device_stream(&scenario.owner, grant.session_id)
        .await;
    let mut initiator = grant.initiator(scenario.host_uuid(), key);
    let message1 = initiator
        .write_message1(grant.token.as_bytes())
        .expect("m1");
    use futures_util::SinkExt;
    ws.send(tokio_tungstenite::tungstenite::Message::binary(message1))
        .await
        .expect("sent");
    let message2 = match terminal_common::host_data::next_frame(&mut ws).await {
        terminal_common::host_data::Frame::Binary(bytes) => bytes,
        other => panic!("expected message 2, got {other:?}"),
    };
    initiator.read_message2(&message2).expect("message 2 reads");
    // No start.
    let (reason, detail) = scenario.closed(grant.session_id).await;
    assert_eq!(
        (reason.as_str(), detail.as_deref()),
        ("open_failed", Some("open_timeout"))
    );
    assert!(scenario.session_processes(0).is_empty(), "no PTY started");
}

/// TM-T10 on the host: every revocation the server offers ends the session,
/// its PTY and every background process that left the shell's session
/// (setsid, nohup), with the right close_reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tm_t10_revocations_end_the_pty_and_its_background_processes() {
    let scenario = Scenario::start(
        Engine::Sqlite,
        Options {
            session_users: 2,
            ..Options::default()
        },
    )
    .await;
    let server = &scenario.server;
    // A second owner with the second session user (the server host admits
    // only owners, SR10).
    let mut alice = invited_person(server, &scenario.owner, "alice", "owner", 2).await;
    scenario.assign_user(&alice, 1).await;
    // logout
    revoked(&scenario, &alice, 1, "logout", |_| async {
        let reply = post_empty(server, "/api/v1/auth/logout", alice.token()).await;
        assert!(reply.status.is_success(), "{:?}", reply.body);
    })
    .await;
    // device revoked
    alice.session = alice.enrolled.login(server, 4).await;
    let device_id = alice.session.device_id.clone();
    revoked(&scenario, &alice, 1, "device_revoked", |_| async {
        let path = format!("/api/v1/devices/{device_id}/revoke");
        let reply = post_empty(server, &path, scenario.owner.token()).await;
        assert!(reply.status.is_success(), "{:?}", reply.body);
    })
    .await;
    // login session revoked (from another login session of the same person)
    let other = alice.enrolled.login(server, 5).await;
    alice.session = alice.enrolled.login(server, 6).await;
    let revoked_login = alice.session.login_session_id.clone();
    revoked(&scenario, &alice, 1, "session_revoked", |_| async {
        let path = format!("/api/v1/auth/sessions/{revoked_login}/revoke");
        let reply = post_empty(server, &path, &other.token).await;
        assert!(reply.status.is_success(), "{:?}", reply.body);
    })
    .await;
    alice.session = other;
    // closed by an owner
    let owner_token = scenario.owner.token().to_owned();
    revoked(
        &scenario,
        &alice,
        1,
        "closed_by_owner",
        |session_id| async move {
            let path = format!("/api/v1/terminal/sessions/{session_id}/close");
            let reply = post_empty(server, &path, &owner_token).await;
            assert!(reply.status.is_success(), "{:?}", reply.body);
        },
    )
    .await;
    // the owner role removed: on the server host only owners (SR10)
    revoked(&scenario, &alice, 1, "access_revoked", |_| async {
        set_role(&scenario, &alice, "member").await;
    })
    .await;
    set_role(&scenario, &alice, "owner").await;
    // I6: the declaration becomes personal with another holder (7.3)
    revoked(&scenario, &alice, 1, "i6_violation", |_| async {
        set_declaration(&scenario, "personal", Some(scenario.owner.id())).await;
    })
    .await;
    set_declaration(&scenario, "none", None).await;
    // the person disabled
    revoked(&scenario, &alice, 1, "user_disabled", |_| async {
        let disabled = bothy_server::identity::admin::disable(
            server.state.db(),
            bothy_server::clock::Clock::now_ms(&*server.clock),
            bothy_server::identity::admin::PersonRef::Username("alice"),
            bothy_server::identity::admin::RoleAuthority::Operator,
        )
        .await
        .expect("disabled");
        assert!(disabled.changed);
    })
    .await;
    // the assignment of the session user ended (SR12)
    revoked(&scenario, &scenario.owner, 0, "access_revoked", |_| async {
        scenario.end_assignment_of(&scenario.owner).await;
    })
    .await;
}

/// TM-T10, host state: the owner disables the host; the host service (4111)
/// ends every PTY and keeps trying with the cap; enabled again, it logs in and
/// sessions open again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tm_t10_disabling_the_host_ends_the_pty_and_its_background_processes() {
    let scenario = Scenario::start(Engine::Sqlite, Options::default()).await;
    revoked(&scenario, &scenario.owner, 0, "host_disabled", |_| async {
        set_state(&scenario, "disabled").await;
    })
    .await;
    // The control connection closes with 4111 right after the ends (bounded wait).
    scenario.wait_log("close_code=4111").await;
    set_state(&scenario, "active").await;
    scenario.wait_connected().await;
    let mut device = scenario.open_shell().await;
    device.type_text("echo BA\"\"CK\n").await;
    device.expect_output("BACK").await;
}

/// TM-T10, re-pairing: the session ends host_rekeyed with its processes, and
/// the host service, refused with 4110, stops with 78 and is not restarted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tm_t10_re_pairing_ends_the_sessions_and_stops_the_service() {
    let scenario = Scenario::start(Engine::Sqlite, Options::default()).await;
    revoked(&scenario, &scenario.owner, 0, "host_rekeyed", |_| async {
        hosts_common::new_pairing_code(&scenario.server, &scenario.owner, &scenario.host_id).await;
    })
    .await;
    scenario.wait_log("status=78").await;
    assert!(
        scenario.log().contains("not restarted"),
        "{}",
        scenario.log()
    );
}

/// setHostLlmCredentials by the first owner.
async fn set_declaration(scenario: &Scenario, llm: &str, holder: Option<&str>) {
    let mut body = json!({"llm_credentials": llm});
    if let Some(holder) = holder {
        body["credential_holder_id"] = json!(holder);
    }
    host_change(scenario, reqwest::Method::PUT, "/llm-credentials", body).await;
}

/// `POST /api/v1/persons/{id}/role` by the first owner.
async fn set_role(scenario: &Scenario, person: &Person, role: &str) {
    let step_up_id = hosts_common::step_up(&scenario.server, &scenario.owner).await;
    let reply = identity_common::post(
        &scenario.server,
        &format!("/api/v1/persons/{}/role", person.id()),
        Some(scenario.owner.token()),
        json!({"role": role, "reason": "test", "step_up_id": step_up_id}),
    )
    .await;
    assert!(reply.status.is_success(), "role {role}: {:?}", reply.body);
}

/// A host change by the first owner ([`Scenario::host_change`]) that must
/// succeed.
async fn host_change(
    scenario: &Scenario,
    method: reqwest::Method,
    path: &str,
    body: serde_json::Value,
) {
    let shown = body.to_string();
    let reply = scenario.host_change(method, path, body).await;
    assert_eq!(
        reply.status.as_u16(),
        200,
        "{path} {shown}: {:?}",
        reply.body
    );
}

/// updateHost `state` by the owner.
async fn set_state(scenario: &Scenario, state: &str) {
    host_change(
        scenario,
        reqwest::Method::PATCH,
        "",
        json!({"state": state}),
    )
    .await;
}

/// TM-T16, host part: `bothy-host restart` during a session with
/// background processes that left the shell's session and process group
/// (`setsid`, `nohup`) ends the session with host_restarted, ends the PTY
/// and every background process, an attach is refused as closed (409), and
/// the service logs in again and opens new sessions (6.2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tm_t16_a_restart_of_the_host_service_ends_its_sessions() {
    let scenario = Scenario::start(Engine::Sqlite, Options::default()).await;
    let mut device = scenario.open_shell().await;
    start_background(&mut device).await;
    // The shell and both background processes run (`setsid` forks once more).
    let before = scenario.background_settled(0).await;
    scenario.restart();
    assert_eq!(scenario.closed(device.session_id).await.0, "host_restarted");
    e2e_common::wait_processes_gone(&before).await;
    scenario.wait_no_session_processes(0).await;
    scenario
        .assert_attach_refused_as_closed(&scenario.owner, device.session_id)
        .await;
    scenario.wait_connected().await;
    let mut again = scenario.open_shell().await;
    again.type_text("echo AG\"\"AIN\n").await;
    again.expect_output("AGAIN").await;
}

/// TM-T16, the service manager killed (3.4, issue 15): `kill -9` of
/// `bothy-host supervise` takes the service and the helpers along (their
/// parent-death signal), so no orphaned service keeps the control
/// connection; the next supervise ends whatever was left of the old tree
/// (the session's background processes) before it starts anything. The host
/// stays `active` (never disabled with duplicate_connection), the old
/// session ends host_restarted, and a new session opens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tm_t16_a_killed_supervise_takes_its_tree_along_and_the_next_one_starts_clean() {
    let mut scenario = Scenario::start(Engine::Sqlite, Options::default()).await;
    let mut device = scenario.open_shell().await;
    start_background(&mut device).await;
    scenario.wait_session_processes(0, 3).await;
    let service = scenario.service_pid();
    let helper = scenario.helper_pid(0);
    let sessions = scenario.session_processes(0);
    scenario.kill_supervise();
    // The service and the helper die with their service manager.
    e2e_common::wait_processes_gone(&[service, helper]).await;
    scenario.wait_disconnected().await;
    scenario.start_service();
    scenario.wait_connected().await;
    // The new supervise ended the rest of the old tree.
    e2e_common::wait_processes_gone(&sessions).await;
    assert_eq!(scenario.closed(device.session_id).await.0, "host_restarted");
    let mut again = scenario.open_shell().await;
    again.type_text("echo AG\"\"AIN\n").await;
    again.expect_output("AGAIN").await;
    assert_eq!(scenario.host_state().await, ("active".to_owned(), None));
    // The close as the service logs it (`close_code=4112
    // close_reason=duplicate_connection`); a bare "4112" also matches a
    // timestamp such as 12:06:13.411267.
    let log = scenario.log();
    assert!(
        !log.contains("close_code=4112") && !log.contains("duplicate_connection"),
        "no duplicate connection: {log}"
    );
}

/// 6.5 (issue 15): the session's cgroup lies in the helper's delegated
/// subtree, which belongs to the session user. A process of the session
/// that moves itself into a new cgroup of that subtree, and one that moves
/// into the helper's own leaf, still end with the session when it is
/// revoked (closed by an owner); the new cgroup is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_that_leave_the_session_cgroup_still_end_with_the_session() {
    let scenario = Scenario::start(
        Engine::Sqlite,
        Options {
            session_users: 2,
            ..Options::default()
        },
    )
    .await;
    // A second owner with the second session user, whose session the first
    // owner closes (closed_by_owner, 8.3).
    let alice = invited_person(&scenario.server, &scenario.owner, "alice", "owner", 2).await;
    scenario.assign_user(&alice, 1).await;
    let mut device = scenario.open_as(&alice, "shell", size()).await;
    let base = helper_subtree(&scenario, 1);
    let b = base.display();
    device
        .type_text(&format!(
            "mkdir {b}/escape && sh -c 'echo $$ > {b}/escape/cgroup.procs && exec sleep 1002' & \
             sh -c 'echo $$ > {b}/helper/cgroup.procs && exec sleep 1003' & echo ES\"\"CAPED\n"
        ))
        .await;
    device.expect_output("ESCAPED").await;
    // Both moved: `sleep 1002` in the new cgroup, `sleep 1003` beside the helper.
    let escaped = wait_escaped(&scenario, 1, &[("1002", "/escape"), ("1003", "/helper")]).await;
    let path = format!("/api/v1/terminal/sessions/{}/close", device.session_id);
    let reply = post_empty(&scenario.server, &path, scenario.owner.token()).await;
    assert!(reply.status.is_success(), "{:?}", reply.body);
    assert_eq!(
        device.expect_close().await,
        (4100, "closed_by_owner".to_owned())
    );
    assert_eq!(
        scenario.closed(device.session_id).await.0,
        "closed_by_owner"
    );
    e2e_common::wait_processes_gone(&escaped).await;
    scenario.wait_no_session_processes(1).await;
    assert!(!base.join("escape").exists(), "the foreign cgroup is gone");
    // The helper itself was spared and serves the next session.
    let mut again = scenario.open_as(&alice, "shell", size()).await;
    again.type_text("echo AG\"\"AIN\n").await;
    again.expect_output("AGAIN").await;
}

/// The delegated cgroup of the helper of session user `index` (the parent
/// of its leaf `helper`, 6.5), as a folder of the cgroup v2 hierarchy.
fn helper_subtree(scenario: &Scenario, index: usize) -> std::path::PathBuf {
    let helper = scenario.helper_pid(index);
    let text = std::fs::read_to_string(format!("/proc/{helper}/cgroup")).expect("cgroup");
    let own = bothy_host::helper::cgroup::parse_own_cgroup(&text).expect("cgroup v2");
    let leaf = bothy_host::helper::cgroup::cgroup2_mount()
        .expect("cgroup2")
        .join(own.trim_start_matches('/'));
    leaf.parent().expect("the delegated cgroup").to_owned()
}

/// Waits until, for every (argument, cgroup suffix), a `sleep <argument>` of
/// session user `index` runs in a cgroup ending with the suffix; their PIDs.
async fn wait_escaped(scenario: &Scenario, index: usize, wanted: &[(&str, &str)]) -> Vec<u32> {
    let all = try_eventually(e2e_common::WAIT, || async {
        let found = escaped(scenario, index, wanted);
        (found.len() == wanted.len()).then_some(found)
    })
    .await;
    match all {
        Some(found) => found,
        None => panic!(
            "the processes never left the session's cgroup: {:?}",
            escaped(scenario, index, wanted)
        ),
    }
}

/// The PIDs of the `sleep <argument>` of session user `index` that run in a
/// cgroup ending with the suffix, per (argument, cgroup suffix) of `wanted`.
fn escaped(scenario: &Scenario, index: usize, wanted: &[(&str, &str)]) -> Vec<u32> {
    let mut found = Vec::new();
    for (argument, suffix) in wanted {
        for pid in scenario.session_processes(index) {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
            if cmdline == format!("sleep\0{argument}\0").as_bytes()
                && cgroup
                    .lines()
                    .any(|l| l.starts_with("0::") && l.ends_with(suffix))
            {
                found.push(pid);
            }
        }
    }
    found
}

/// TM-T22: a session cannot read the state directory or the key file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tm_t22_a_session_cannot_read_the_state_directory() {
    let scenario = Scenario::start(Engine::Sqlite, Options::default()).await;
    let keys = std::fs::read_to_string(scenario.state_dir.join("keys")).expect("root reads it");
    let mut device = scenario.open_shell().await;
    let state = scenario.state_dir.display().to_string();
    device
        .type_text(&format!(
            "cat {state}/keys; ls {state}; cat {state}/pairing.json; echo T22\"\"END\n"
        ))
        .await;
    device.expect_output("T22END").await;
    let output = String::from_utf8_lossy(&device.output).into_owned();
    assert_eq!(output.matches("Permission denied").count(), 3, "{output:?}");
    for secret in keys.split('"').filter(|part| part.len() > 40) {
        assert!(!output.contains(secret), "key material reached the session");
    }
}

/// TM-T28 (c): a token whose osu the host already gave to another person
/// (the assignment changed in the database, bypassing the server's rule):
/// 4104 session_user_mismatch, no PTY.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tm_t28_c_a_session_user_bound_to_another_person_is_refused() {
    let scenario = Scenario::start(Engine::Sqlite, Options::default()).await;
    // The owner's first opening binds the session user to the owner.
    let mut device = scenario.open_shell().await;
    device.type_text("exit 0\n").await;
    assert_eq!(device.expect_exit().await, 0);
    scenario.closed(device.session_id).await;
    // Another owner; the database gives them the same session user.
    let other = invited_person(&scenario.server, &scenario.owner, "bob", "owner", 3).await;
    sqlx::query("UPDATE host_session_users SET person_id = $1 WHERE host_id = $2")
        .bind(other.id())
        .bind(&scenario.host_id)
        .execute(scenario.server.db().db.pool())
        .await
        .expect("assignment moved in the database");
    let (grant, key) = scenario.open_raw(&other, "shell").await;
    assert_eq!(
        scenario
            .refused_message1(&other, &grant, key, &grant.token)
            .await,
        (4104, "session_user_mismatch".to_owned())
    );
    assert!(scenario.session_processes(0).is_empty(), "no PTY started");
    let _ = Frame::Close;
}

/// A CONNECT proxy for the test: answers `CONNECT host:port` with 200 and
/// relays the bytes; counts the tunnels it made.
async fn connect_proxy() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    let tunnels = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = std::sync::Arc::clone(&tunnels);
    tokio::spawn(async move {
        loop {
            let Ok((mut client, _)) = listener.accept().await else {
                return;
            };
            let counted = std::sync::Arc::clone(&counted);
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && head.len() < 8192 {
                    if client.read_exact(&mut byte).await.is_err() {
                        return;
                    }
                    head.push(byte[0]);
                }
                let text = String::from_utf8_lossy(&head).into_owned();
                let Some(target) = text
                    .lines()
                    .next()
                    .and_then(|line| line.strip_prefix("CONNECT "))
                    .and_then(|rest| rest.split_whitespace().next())
                    .map(str::to_owned)
                else {
                    let _ = client
                        .write_all(b"HTTP/1.1 405 Method Not Allowed\r\n\r\n")
                        .await;
                    return;
                };
                let Ok(mut upstream) = tokio::net::TcpStream::connect(&target).await else {
                    let _ = client.write_all(b"HTTP/1.1 502 Bad Gateway\r\n\r\n").await;
                    return;
                };
                counted.fetch_add(1, Ordering::SeqCst);
                if client
                    .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    .await
                    .is_err()
                {
                    return;
                }
                let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
            });
        }
    });
    (format!("http://{address}"), tunnels)
}

/// 3.5 "Host service": the proxy from the environment: pair, the control
/// connection and the data connections all go through the CONNECT proxy of
/// `HTTPS_PROXY`, with TLS to the server inside the tunnel.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_connection_goes_through_the_proxy_of_the_environment() {
    let (proxy, tunnels) = connect_proxy().await;
    let scenario = Scenario::start(
        Engine::Sqlite,
        Options {
            https_proxy: Some(proxy),
            ..Options::default()
        },
    )
    .await;
    // pair + the control connection.
    let before = tunnels.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        before >= 2,
        "pair and the control connection were tunnelled: {before}"
    );
    let mut device = scenario.open_shell().await;
    device.type_text("echo PRO\"\"XY\n").await;
    device.expect_output("PROXY").await;
    assert!(
        tunnels.load(std::sync::atomic::Ordering::SeqCst) > before,
        "the data connection was tunnelled"
    );
}

/// `bothy-host doctor` while the service runs (2.2 "Output on the host"): the
/// full run happens in the service over admin.sock. Passing: exit 0, the
/// service keeps running. Then a violation that refuses the start (HD4: the
/// state directory opened to the group; a violation of this scenario only,
/// unlike a listable home, which every concurrent scenario's HD9 would see):
/// the command names it and exits non-zero, the service reports the result to
/// the server, ends its sessions and exits 78, and the service manager does
/// not restart it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_through_the_running_service() {
    let scenario = Scenario::start(Engine::Sqlite, Options::default()).await;
    let doctor = || {
        Command::new(e2e_common::bothy_host())
            .arg("--config")
            .arg(&scenario.config_path)
            .arg("doctor")
            .output()
            .expect("bothy-host doctor runs")
    };
    let passed = doctor();
    let text = String::from_utf8_lossy(&passed.stdout).into_owned();
    assert!(
        passed.status.success(),
        "doctor: {text}{}",
        String::from_utf8_lossy(&passed.stderr)
    );
    assert!(text.contains("hd1_user"), "{text}");
    // It says whose run this is (issue 16 item 10).
    assert!(
        text.starts_with("The host service runs: these are the results of its own run"),
        "{text}"
    );
    let mut device = scenario.open_shell().await;
    start_background(&mut device).await;
    std::fs::set_permissions(
        &scenario.state_dir,
        std::os::unix::fs::PermissionsExt::from_mode(0o750),
    )
    .expect("chmod");
    let refused = doctor();
    let text = String::from_utf8_lossy(&refused.stdout).into_owned();
    assert!(!refused.status.success(), "doctor fails: {text}");
    assert!(text.contains("state_dir_mode"), "{text}");
    assert!(
        text.contains("  hint: the state directory is open to others: chmod 700 it"),
        "{text}"
    );
    scenario.wait_no_session_processes(0).await;
    scenario.wait_log("status=78").await;
    assert!(
        scenario.log().contains("not restarted"),
        "{}",
        scenario.log()
    );
    wait_reported(&scenario, "state_dir_mode").await;
}

/// A refused start (2.2 "Message on a refused start", D-M2-42-14; HD4 here):
/// the
/// service logs in with empty live_sessions, sends exactly one report, closes
/// and exits 78; the service manager does not restart it; the server shows the
/// result while the host stays disconnected. After the fix, `bothy-host
/// restart` starts it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_start_reports_once_exits_78_and_waits_for_restart() {
    let mut scenario = Scenario::start(Engine::Sqlite, Options::default()).await;
    scenario.stop_service();
    // HD4: the state directory open to the group (this scenario's own finding).
    let state_dir = scenario.state_dir.clone();
    std::fs::set_permissions(
        &state_dir,
        std::os::unix::fs::PermissionsExt::from_mode(0o750),
    )
    .expect("chmod");
    scenario.start_service();
    scenario.wait_refused_start().await;
    wait_reported(&scenario, "state_dir_mode").await;
    assert!(!scenario.connected(), "a refused start accepts no session");
    // Fixed, then bothy-host restart: the service runs again.
    std::fs::set_permissions(
        &state_dir,
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .expect("chmod");
    scenario.restart();
    scenario.wait_connected().await;
}

/// Waits (bounded) until the server stored a report whose doctor entries
/// contain `code` ([`Scenario::wait_doctor`]).
async fn wait_reported(scenario: &Scenario, code: &str) {
    scenario
        .wait_doctor(code, |entries| {
            serde_json::to_string(entries).expect("JSON").contains(code)
        })
        .await;
}
