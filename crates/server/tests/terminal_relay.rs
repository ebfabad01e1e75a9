//! The relay (spec 24 sections 6.1 steps 5–7, 6.2, 6.3, 9, 13): the host's
//! data connection and the device stream, on both engines, against a real
//! server over real WebSockets, with test peers that speak the real protocol
//! (bothy-proto messages, a bothy-noise Initiator on the device and Responder
//! on the host).
//!
//! Sessions are set up by inserting `terminal_sessions` rows directly (state
//! `opening` or as the case needs, with the owner's session user on the host),
//! because openTerminalSession is written at the same time as this relay; the
//! relay does not care how the row came to be.
//!
//! Time: every deadline of the relay is on the server's manual clock, which
//! its ticker reads every `TICK` (100 ms); a test moves the clock and waits
//! on the socket for the close, or — to see that nothing happens — for two
//! more looks of the ticker (`Relay::ticks`). The job terminal.sweep stays out
//! of the way (`TestServer`'s default), so every end these tests see is the
//! relay's own (docs/decisions.md D-88).

use bothy_testkit as support;
use bothy_testkit::console as console_common;
use bothy_testkit::hosts as hosts_common;
use bothy_testkit::identity as identity_common;
use bothy_testkit::terminal as terminal_common;

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bothy_proto::codes::{CloseDetail, CloseReason};
use bothy_server::clock::Clock;
use bothy_server::db::{self, Engine};
use bothy_server::revocation::{EndScope, end};
use futures_util::SinkExt;
use sqlx::Row;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use uuid::Uuid;

use bothy_testkit::eventually;
use console_common::{ORIGIN, add_passkey, console_login};
use hosts_common::{
    ActiveHost, HostKeys, Person, active_host, etag_of, get_host, owner_person, send, step_up,
};
use identity_common::{audit_and_event_text, audit_of, post_empty};
use reqwest::Method;
use serde_json::json;
use support::both_engines;
use support::server::TestServer;
use support::ws::{self, Options, WAIT};
use terminal_common::device::{self, DevicePeer};
use terminal_common::host_control::HostControl;
use terminal_common::host_data::{self, Frame, HostPeer, closed, next_binary, next_frame};

// ---- fixture ----------------------------------------------------------------

struct Fixture {
    server: TestServer,
    owner: Person,
    host: ActiveHost,
    host_id: Uuid,
    session_user_id: String,
}

async fn fixture(engine: Engine) -> Fixture {
    fixture_with(engine, "").await
}

async fn fixture_with(engine: Engine, yaml: &str) -> Fixture {
    capture_logs();
    let server = TestServer::start_with(engine, yaml).await;
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
    let host_id = Uuid::parse_str(&host.host_id).expect("host ID");
    let session_user_id: String = sqlx::query(
        "SELECT id FROM host_session_users WHERE host_id = $1 AND person_id = $2 AND ended_at IS NULL",
    )
    .bind(&host.host_id)
    .bind(&owner_id)
    .fetch_one(server.state.db().pool())
    .await
    .expect("the owner's session user")
    .get("id");
    Fixture {
        server,
        owner,
        host,
        host_id,
        session_user_id,
    }
}

fn new_id() -> Uuid {
    bothy_proto::ids::uuid_v7(1_796_083_200_000).expect("random ID")
}

impl Fixture {
    fn now(&self) -> i64 {
        self.server.clock.now_ms()
    }

    /// A session row of the owner on the host, in `state`.
    async fn session(&self, state: &str) -> Uuid {
        self.session_of(
            state,
            &self.owner.session.login_session_id,
            Some(&self.owner.session.device_id),
        )
        .await
    }

    /// A session row of the owner's login session `login_session_id` with
    /// device `device_id` (none: the console's, D-73), in `state`.
    async fn session_of(
        &self,
        state: &str,
        login_session_id: &str,
        device_id: Option<&str>,
    ) -> Uuid {
        let id = new_id();
        let now = self.now();
        let started = (state != "opening").then_some(now);
        let detached = (state == "detached").then_some(now);
        let (reason, ended) = if state == "closed" {
            (Some("client_closed"), Some(now))
        } else {
            (None, None)
        };
        sqlx::query(
            "INSERT INTO terminal_sessions (id, host_id, person_id, login_session_id, device_id, \
                 host_session_user_id, profile, state, close_reason, created_at, started_at, \
                 ended_at, detached_at, version) \
             VALUES ($1, $2, $3, $4, $5, $6, 'shell', $7, $8, $9, $10, $11, $12, 1)",
        )
        .bind(db::id_text(&id))
        .bind(&self.host.host_id)
        .bind(self.owner.id())
        .bind(login_session_id)
        .bind(device_id)
        .bind(&self.session_user_id)
        .bind(state)
        .bind(reason)
        .bind(now)
        .bind(started)
        .bind(ended)
        .bind(detached)
        .execute(self.server.state.db().pool())
        .await
        .expect("insert a session");
        id
    }

    async fn row(
        &self,
        id: Uuid,
    ) -> (
        String,
        Option<String>,
        Option<String>,
        i64,
        i64,
        Option<i64>,
    ) {
        let row = sqlx::query(
            "SELECT state, close_reason, close_detail, bytes_in, bytes_out, last_input_at \
             FROM terminal_sessions WHERE id = $1",
        )
        .bind(db::id_text(&id))
        .fetch_one(self.server.state.db().pool())
        .await
        .expect("session row");
        (
            row.get("state"),
            row.get("close_reason"),
            row.get("close_detail"),
            row.get("bytes_in"),
            row.get("bytes_out"),
            row.get("last_input_at"),
        )
    }

    async fn state_of(&self, id: Uuid) -> String {
        self.row(id).await.0
    }

    /// Waits until the relay holds `sides` for the session.
    async fn sides(&self, id: Uuid, device: bool, host: bool) {
        let relay = self.server.state.relay();
        wait_until(|| {
            let sides = relay.sides(id);
            sides.device == device && sides.host == host
        })
        .await;
    }

    async fn host_peer(&self, id: Uuid) -> HostPeer {
        HostPeer::login(&self.server, id, self.host_id, &self.host.keys).await
    }

    async fn device_peer(&self, id: Uuid) -> DevicePeer {
        DevicePeer::login(
            &self.server,
            id,
            self.host_id,
            &self.host.keys.noise_public,
            self.owner.token(),
        )
        .await
    }

    /// Waits until the relay's ticker looked at the clock twice more: what
    /// was due at the clock's time now has been acted on (or nothing was).
    async fn relay_looked(&self) {
        let relay = self.server.state.relay();
        let seen = relay.ticks();
        wait_until(|| relay.ticks() >= seen + 2).await;
    }

    /// The host's control connection, logged in with a report naming the
    /// owner's session user.
    async fn control(&self) -> HostControl {
        HostControl::connected(&self.server, &self.host.keys, self.host_id, &["olivia"]).await
    }

    fn unpaired(&self, side: &str) -> u64 {
        self.server
            .state
            .metrics()
            .terminal_relay_unpaired(side)
            .get()
    }
}

/// Polls a condition of the server's memory (not a timer): every few
/// milliseconds, with [`WAIT`] as the safety net.
async fn wait_until(mut ready: impl FnMut() -> bool) {
    let ready = &mut ready;
    eventually("the condition", WAIT, || {
        std::future::ready(ready().then_some(()))
    })
    .await;
}

/// Polls the database until `ready` holds for the session's state.
async fn wait_state(f: &Fixture, id: Uuid, want: &str) {
    eventually("the session's state", WAIT, || async move {
        (f.state_of(id).await == want).then_some(())
    })
    .await;
}

// ---- log capture (TM-T06) -----------------------------------------------------

fn logs() -> &'static Arc<Mutex<Vec<u8>>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOGS.get_or_init(|| Arc::new(Mutex::new(Vec::new())))
}

struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("log buffer").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Every log line of this test binary at every level goes into [`logs`].
fn capture_logs() {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        let buffer = Arc::clone(logs());
        let _ = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(move || Capture(Arc::clone(&buffer)))
            .try_init();
    });
}

// ---- data connection identify -------------------------------------------------

async fn data_identify_outcomes(engine: Engine) {
    let f = fixture(engine).await;
    let id = f.session("opening").await;
    let server = &f.server;

    // A proof over another challenge: 4113.
    let (mut ws_, _hello) = host_data::open(server, id).await;
    let proof = host_data::proof(&f.host.keys, f.host_id, [0u8; 32], f.now());
    ws::send(
        &mut ws_,
        Message::text(host_data::identify_text(f.host_id, proof, Some(id))),
    )
    .await;
    assert_eq!(closed(&mut ws_).await, (4113, "host_auth_failed".into()));

    // Signed by another login key (kid is not auth_jkt): 4110.
    let (mut ws_, hello) = host_data::open(server, id).await;
    let proof = host_data::proof(&HostKeys::generate(99), f.host_id, hello.challenge, f.now());
    ws::send(
        &mut ws_,
        Message::text(host_data::identify_text(f.host_id, proof, Some(id))),
    )
    .await;
    assert_eq!(closed(&mut ws_).await, (4110, "host_unpaired".into()));

    // An unknown host: 4110.
    let (mut ws_, hello) = host_data::open(server, id).await;
    let other = new_id();
    let proof = host_data::proof(&f.host.keys, other, hello.challenge, f.now());
    ws::send(
        &mut ws_,
        Message::text(host_data::identify_text(other, proof, Some(id))),
    )
    .await;
    assert_eq!(closed(&mut ws_).await, (4110, "host_unpaired".into()));

    // No session_id (the control shape): 4002; a binary frame first: 4002.
    let (mut ws_, hello) = host_data::open(server, id).await;
    let proof = host_data::proof(&f.host.keys, f.host_id, hello.challenge, f.now());
    ws::send(
        &mut ws_,
        Message::text(host_data::identify_text(f.host_id, proof, None)),
    )
    .await;
    assert_eq!(closed(&mut ws_).await.0, 4002);
    let (mut ws_, _) = host_data::open(server, id).await;
    ws::send(&mut ws_, Message::binary(vec![1, 2, 3])).await;
    assert_eq!(closed(&mut ws_).await.0, 4002);

    // Hello carries the server values.
    let (_ws, hello) = host_data::open(server, id).await;
    assert_eq!(hello.clock_leeway_ms, 30_000);
    assert_eq!(hello.idle_timeout_ms, 1_800_000);
    assert_eq!(hello.detach_grace_ms, 900_000);
    assert!(
        !hello.jwks.keys().is_empty(),
        "the JWKS of purpose terminal"
    );

    // A session of another host: 4100 access_revoked.
    let second = active_host(server, &f.owner, "other-box", None, 8, &["olivia2"], &[]).await;
    let second_id = Uuid::parse_str(&second.host_id).expect("ID");
    let mut ws_ = host_data::login(server, id, second_id, &second.keys).await;
    assert_eq!(closed(&mut ws_).await, (4100, "access_revoked".into()));

    // A closed session: 4100 with its close_reason.
    let gone = f.session("closed").await;
    let mut ws_ = host_data::login(server, gone, f.host_id, &f.host.keys).await;
    assert_eq!(closed(&mut ws_).await, (4100, "client_closed".into()));

    // The right host: accepted (no answer; the relay holds the side).
    let _host = host_data::login(server, id, f.host_id, &f.host.keys).await;
    f.sides(id, false, true).await;

    // A disabled host: 4111.
    sqlx::query(
        "UPDATE hosts SET state = 'disabled', disabled_reason = 'owner', disabled_at = $2 WHERE id = $1",
    )
    .bind(&f.host.host_id)
    .bind(f.now())
    .execute(server.state.db().pool())
    .await
    .expect("disable");
    let mut ws_ = host_data::login(server, id, f.host_id, &f.host.keys).await;
    assert_eq!(closed(&mut ws_).await, (4111, "host_disabled".into()));
}

// ---- device identify ------------------------------------------------------------

async fn device_identify_outcomes(engine: Engine) {
    let f = fixture(engine).await;
    let id = f.session("opening").await;
    let server = &f.server;

    // Not a token at all, and no token: 4004.
    let mut d = device::identify(server, id, Some("nonsense")).await;
    assert_eq!(closed(&mut d).await, (4004, "credential_invalid".into()));
    let mut d = device::identify(server, id, None).await;
    assert_eq!(closed(&mut d).await.0, 4004);
    // A binary frame first: 4002.
    let mut d = ws::connect(server, &bothy_proto::stream::stream_path(&id), None)
        .await
        .expect("upgrade");
    ws::send(&mut d, Message::binary(vec![0])).await;
    assert_eq!(closed(&mut d).await.0, 4002);

    // Another device of the same person: 4004 and a terminal.stream denial.
    let other = f.owner.enrolled.login(server, 2).await;
    let mut d = device::identify(server, id, Some(&other.token)).await;
    assert_eq!(closed(&mut d).await, (4004, "credential_invalid".into()));
    let denials = audit_of(server, "terminal.stream", "deny").await;
    assert_eq!(denials.len(), 1);
    assert_eq!(
        denials[0].target_id.as_deref(),
        Some(id.to_string().as_str())
    );
    assert_eq!(denials[0].details["session_id"], id.to_string());
    assert_eq!(denials[0].details["device_id"], other.device_id);
    assert_eq!(denials[0].details["reason"], "device_mismatch");

    // An unknown session: 4004, denial session_unknown.
    let unknown = new_id();
    let mut d = device::identify(server, unknown, Some(f.owner.token())).await;
    assert_eq!(closed(&mut d).await.0, 4004);
    let denials = audit_of(server, "terminal.stream", "deny").await;
    assert_eq!(denials.len(), 2);
    // Audit IDs within one millisecond do not sort by time: find it by reason.
    let unknown_entry = denials
        .iter()
        .find(|row| row.details["reason"] == "session_unknown")
        .expect("the session_unknown denial");
    assert_eq!(unknown_entry.details["session_id"], unknown.to_string());

    // A closed session: 4100 with its close_reason.
    let gone = f.session("closed").await;
    let mut d = device::identify(server, gone, Some(f.owner.token())).await;
    assert_eq!(closed(&mut d).await, (4100, "client_closed".into()));

    // The right device: ready.
    let _d = device::login(server, id, f.owner.token()).await;
    f.sides(id, true, false).await;

    // A logged-out login session: 4012.
    let reply = post_empty(server, "/api/v1/auth/logout", &other.token).await;
    assert_eq!(reply.status, 204, "{:?}", reply.body);
    let mut d = device::identify(server, id, Some(&other.token)).await;
    assert_eq!(closed(&mut d).await, (4012, "credential_revoked".into()));
}

// ---- text frames after the login -------------------------------------------------

async fn text_after_login_is_4002(engine: Engine) {
    let f = fixture(engine).await;
    let id = f.session("opening").await;
    let mut d = device::login(&f.server, id, f.owner.token()).await;
    ws::send(&mut d, Message::text("{}")).await;
    assert_eq!(closed(&mut d).await, (4002, "invalid_message".into()));

    let mut h = host_data::login(&f.server, id, f.host_id, &f.host.keys).await;
    f.sides(id, false, true).await;
    ws::send(&mut h, Message::text("{}")).await;
    assert_eq!(closed(&mut h).await, (4002, "invalid_message".into()));
}

// ---- forwarding, Noise, canary ----------------------------------------------------

const CANARY: &str = "CANARY-7f3e9a51-relay-plaintext";

async fn noise_through_the_relay(engine: Engine) {
    let f = fixture(engine).await;
    let id = f.session("opening").await;
    let mut host = f.host_peer(id).await;
    let mut device = f.device_peer(id).await;
    f.sides(id, true, true).await;

    // Message 1 arrives byte for byte; the host reads the token from it.
    let token = format!("token-{CANARY}");
    let sent = device.send_message1(token.as_bytes()).await;
    let (payload, mut host_transport) = host.handshake().await;
    assert_eq!(payload, token.as_bytes());
    let (host_json, mut device_transport) = device.read_message2().await;
    assert_eq!(
        host_json,
        br#"{"v":1,"host_version":"1.0.0","profile":"shell"}"#
    );
    assert_eq!(
        host_transport.handshake_hash(),
        device_transport.handshake_hash()
    );
    assert!(!sent.windows(CANARY.len()).any(|w| w == CANARY.as_bytes()));

    // Transport messages both ways, unchanged and in order.
    let mut device_bytes = sent.len();
    let mut host_bytes = 0;
    for i in 0..5u8 {
        let mut frame = vec![0x02];
        frame.extend_from_slice(format!("{CANARY} input {i}").as_bytes());
        let message = device_transport.write_message(&frame).expect("encrypt");
        device_bytes += message.len();
        ws::send(&mut device.ws, Message::binary(message.clone())).await;
        let got = next_binary(&mut host.ws).await;
        assert_eq!(got, message, "byte for byte");
        assert_eq!(host_transport.read_message(&got).expect("decrypt"), frame);

        let mut out = vec![0x02];
        out.extend_from_slice(format!("{CANARY} output {i}").as_bytes());
        let message = host_transport.write_message(&out).expect("encrypt");
        host_bytes += message.len();
        ws::send(&mut host.ws, Message::binary(message.clone())).await;
        let got = next_binary(&mut device.ws).await;
        assert_eq!(got, message, "byte for byte");
        assert_eq!(device_transport.read_message(&got).expect("decrypt"), out);
    }
    // Message 2 went host to device too.
    let message2_len = {
        // The responder's message 2: 32 bytes e + payload + tag.
        32 + br#"{"v":1,"host_version":"1.0.0","profile":"shell"}"#.len() + 16
    };
    host_bytes += message2_len;

    // Both sides leave: the counters are written once at release.
    device.ws.close(None).await.expect("close");
    host.ws.close(None).await.expect("close");
    f.sides(id, false, false).await;
    let f = &f;
    eventually("counters written", WAIT, || async move {
        let (_, _, _, bytes_in, bytes_out, _) = f.row(id).await;
        (bytes_in != 0 && bytes_out != 0).then_some(())
    })
    .await;
    let (state, _, _, bytes_in, bytes_out, last_input_at) = f.row(id).await;
    assert_eq!(state, "opening");
    assert_eq!(bytes_in, device_bytes as i64);
    assert_eq!(bytes_out, host_bytes as i64);
    assert_eq!(last_input_at, Some(f.now()));

    // TM-T06 (server part): the canary is in no table, audit row, event,
    // log line or metric.
    let mut everything = audit_and_event_text(&f.server).await;
    let rows = sqlx::query("SELECT * FROM terminal_sessions")
        .fetch_all(f.server.state.db().pool())
        .await
        .expect("rows");
    for row in &rows {
        use sqlx::Column;
        for column in row.columns() {
            if let Ok(Some(text)) = row.try_get::<Option<String>, _>(column.ordinal()) {
                everything.push_str(&text);
            }
        }
    }
    everything.push_str(&f.server.state.metrics().render().expect("metrics"));
    let metrics = f
        .server
        .client
        .get(f.server.url("/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    everything.push_str(&metrics);
    everything.push_str(&String::from_utf8_lossy(&logs().lock().expect("logs")));
    assert!(!everything.is_empty());
    assert!(!everything.contains(CANARY), "the canary leaked");
    assert!(!everything.contains("token-"), "the token leaked");
}

// ---- backpressure ------------------------------------------------------------------

/// A device stream of `id` after `ready` with a tiny receive buffer (a
/// device that can be made slow by not reading), paired with the host side
/// already there.
async fn slow_device(f: &Fixture, id: Uuid) -> support::ws::Ws {
    let mut device = ws::connect_with(
        &f.server,
        &bothy_proto::stream::stream_path(&id),
        None,
        Options {
            recv_buffer: Some(4096),
        },
    )
    .await
    .expect("upgrade");
    let identify = bothy_proto::stream::DeviceMessage::Identify(bothy_proto::stream::Identify {
        access_token: Some(f.owner.token().to_owned()),
    })
    .to_json();
    ws::send(&mut device, Message::text(identify)).await;
    assert!(matches!(next_frame(&mut device).await, Frame::Text(_)));
    f.sides(id, true, true).await;
    device
}

async fn backpressure_slow_device_gets_4014(engine: Engine) {
    let f = fixture_with(engine, "terminal:\n  relay_buffer_max_bytes: 65535\n").await;
    let id = f.session("active").await;
    let mut host = host_data::login(&f.server, id, f.host_id, &f.host.keys).await;
    let mut device = slow_device(&f, id).await;

    // The host sends numbered messages until the transport holds it back.
    let sender = tokio::spawn(async move {
        for i in 0u32..100_000 {
            let mut message = vec![0u8; 16 * 1024];
            message[..4].copy_from_slice(&i.to_be_bytes());
            if host.send(Message::binary(message)).await.is_err() {
                break;
            }
        }
        host
    });
    let relay = f.server.state.relay();
    // No room within terminal.relay_stall_timeout: the device gets 4014 and
    // leaves the relay. Until the transport toward the device is full too, a
    // wait for room may end because the kernel took more bytes, and a new
    // wait counts from a later clock reading: then the clock moves again.
    loop {
        wait_until(|| relay.is_stalled(id)).await;
        let stalls = relay.stalls(id);
        f.server.clock.advance(Duration::from_secs(10));
        wait_until(|| !relay.sides(id).device || relay.stalls(id) != stalls).await;
        if !relay.sides(id).device {
            break;
        }
    }
    // Only now does the device read again.
    let mut expected = 0u32;
    let close = loop {
        match next_frame(&mut device).await {
            Frame::Binary(bytes) => {
                assert_eq!(bytes.len(), 16 * 1024);
                let n = u32::from_be_bytes(bytes[..4].try_into().expect("4 bytes"));
                assert_eq!(n, expected, "no message lost or reordered");
                expected += 1;
            }
            Frame::Close(code, reason) => break (code, reason),
            other => panic!("unexpected {other:?}"),
        }
    };
    assert_eq!(close, (4014, "slow_consumer".into()));
    assert!(expected > 0, "some messages went through before");
    // The session detaches; the host side stays connected.
    wait_state(&f, id, "detached").await;
    f.sides(id, false, true).await;
    sender.abort();
}

// ---- open deadline and the phase rule ------------------------------------------------

async fn lone_device_of_an_opening(engine: Engine) {
    let f = fixture(engine).await;
    let id = f.session("opening").await;
    let mut d = device::login(&f.server, id, f.owner.token()).await;
    f.sides(id, true, false).await;
    f.server.clock.advance(Duration::from_secs(19));
    f.server.clock.advance(Duration::from_millis(999));
    f.relay_looked().await;
    assert_eq!(f.unpaired("client"), 0, "not before the deadline");
    f.server.clock.advance(Duration::from_millis(1));
    assert_eq!(
        closed(&mut d).await,
        (4102, "terminal_host_unavailable".into())
    );
    wait_state(&f, id, "closed").await;
    let (_, reason, detail, ..) = f.row(id).await;
    assert_eq!(reason.as_deref(), Some("open_failed"));
    assert_eq!(detail.as_deref(), Some("open_timeout"));
    assert_eq!(f.unpaired("client"), 1);
    assert_eq!(f.unpaired("host"), 0);
    let ends = audit_of(&f.server, "terminal.terminate", "allow").await;
    assert_eq!(ends.len(), 1);
    assert_eq!(ends[0].details["close_detail"], "open_timeout");
    let metrics = f.server.state.metrics().render().expect("render");
    assert!(
        metrics.contains("bothy_terminal_relay_unpaired_total{side=\"client\"} 1"),
        "{metrics}"
    );
}

async fn lone_host_of_an_opening(engine: Engine) {
    let f = fixture(engine).await;
    let id = f.session("opening").await;
    let mut h = host_data::login(&f.server, id, f.host_id, &f.host.keys).await;
    f.sides(id, false, true).await;
    f.server.clock.advance(Duration::from_secs(20));
    assert_eq!(
        closed(&mut h).await,
        (4102, "terminal_host_unavailable".into())
    );
    wait_state(&f, id, "closed").await;
    let (_, reason, detail, ..) = f.row(id).await;
    assert_eq!(reason.as_deref(), Some("open_failed"));
    assert_eq!(detail.as_deref(), Some("open_timeout"));
    assert_eq!(f.unpaired("host"), 1);
}

async fn lone_sides_of_a_started_session(engine: Engine) {
    let f = fixture(engine).await;
    let id = f.session("detached").await;
    let mut h = host_data::login(&f.server, id, f.host_id, &f.host.keys).await;
    f.sides(id, false, true).await;
    f.server.clock.advance(Duration::from_secs(20));
    // The lone host of a started session waits; not unpaired.
    f.relay_looked().await;
    assert_eq!(f.unpaired("host"), 0);
    assert_eq!(f.state_of(id).await, "detached");
    drop(h.close(None).await);
    f.sides(id, false, false).await;

    // A lone device of a started session: 4102, the session stays detached.
    let mut d = device::login(&f.server, id, f.owner.token()).await;
    f.sides(id, true, false).await;
    f.server.clock.advance(Duration::from_secs(20));
    assert_eq!(
        closed(&mut d).await,
        (4102, "terminal_host_unavailable".into())
    );
    assert_eq!(f.unpaired("client"), 1);
    assert_eq!(f.state_of(id).await, "detached");
}

// ---- codes handed over, replacement, ends ------------------------------------------

async fn host_4104_handed_to_the_device(engine: Engine) {
    let f = fixture(engine).await;
    let id = f.session("opening").await;
    let mut h = host_data::login(&f.server, id, f.host_id, &f.host.keys).await;
    let mut d = device::login(&f.server, id, f.owner.token()).await;
    f.sides(id, true, true).await;
    h.send(Message::Close(Some(CloseFrame {
        code: 4104.into(),
        reason: "token_invalid".into(),
    })))
    .await
    .expect("close");
    assert_eq!(closed(&mut d).await, (4104, "token_invalid".into()));
    wait_state(&f, id, "closed").await;
    let (_, reason, detail, ..) = f.row(id).await;
    assert_eq!(reason.as_deref(), Some("open_failed"));
    assert_eq!(detail.as_deref(), Some("token_invalid"));
    assert_eq!(f.unpaired("client"), 0, "a paired side is never unpaired");
}

/// 6.2, 5.3 (issue 21): the host service's refusal of an attach's handshake,
/// for every row of the table of 5.3. A 4104 ended the session's live PTY
/// on the host, so the session ends open_failed with the refusal's detail
/// (never left `detached` without a PTY) and the device gets that code; a
/// 4101 leaves the started session detached and attachable. A paired device
/// is told the code even when the host's close arrives after the device
/// left; the end needs no device.
async fn host_refusal_of_an_attach_ends_a_started_session_on_4104_only(engine: Engine) {
    let f = fixture(engine).await;
    let refusals = [
        (4104, CloseDetail::HandshakeFailed),
        (4104, CloseDetail::TokenInvalid),
        (4104, CloseDetail::ProfileUnknown),
        (4104, CloseDetail::SessionUserUnknown),
        (4104, CloseDetail::SessionUserMismatch),
        (4104, CloseDetail::ServerHostOwnerOnly),
        (4101, CloseDetail::TokenExpired),
        (4101, CloseDetail::TokenReplayed),
    ];
    for (code, detail) in refusals {
        let id = f.session("detached").await;
        let (mut h, mut d) = paired(&f, id).await;
        wait_state(&f, id, "active").await;
        h.send(Message::Close(Some(CloseFrame {
            code: code.into(),
            reason: detail.as_str().into(),
        })))
        .await
        .expect("close");
        assert_eq!(closed(&mut d).await, (code, detail.as_str().to_owned()));
        if code == 4104 {
            wait_state(&f, id, "closed").await;
            let (_, reason, stored, ..) = f.row(id).await;
            assert_eq!(
                (reason.as_deref(), stored.as_deref()),
                (Some("open_failed"), Some(detail.as_str())),
                "{detail}"
            );
        } else {
            wait_state(&f, id, "detached").await;
            f.relay_looked().await;
            assert_eq!(f.state_of(id).await, "detached", "{detail}");
        }
    }
    // The host closes after the device already left: the end still happens.
    let id = f.session("detached").await;
    let (mut h, mut d) = paired(&f, id).await;
    d.close(None).await.expect("device leaves");
    f.sides(id, false, true).await;
    h.send(Message::Close(Some(CloseFrame {
        code: 4104.into(),
        reason: "handshake_failed".into(),
    })))
    .await
    .expect("close");
    wait_state(&f, id, "closed").await;
    // A close text that is no detail of 4104 counts as handshake_failed.
    let id = f.session("detached").await;
    let (mut h, mut d) = paired(&f, id).await;
    h.send(Message::Close(Some(CloseFrame {
        code: 4104.into(),
        reason: "token_expired".into(),
    })))
    .await
    .expect("close");
    assert_eq!(closed(&mut d).await, (4104, "handshake_failed".into()));
    wait_state(&f, id, "closed").await;
    assert_eq!(f.row(id).await.2.as_deref(), Some("handshake_failed"));
    let ends = audit_of(&f.server, "terminal.terminate", "allow").await;
    assert_eq!(ends.len(), 8, "one terminate per ended session: {ends:?}");
    assert_eq!(f.unpaired("client") + f.unpaired("host"), 0);
}

/// Reads `ws` in a task until it ends (tungstenite answers each ping while
/// reading); the number of pings seen so far.
fn answering(mut ws: support::ws::Ws) -> Arc<std::sync::atomic::AtomicUsize> {
    use futures_util::StreamExt;
    let pings = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = Arc::clone(&pings);
    tokio::spawn(async move {
        while let Some(Ok(message)) = ws.next().await {
            if matches!(message, Message::Ping(_)) {
                seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        }
    });
    pings
}

/// Issue 15 item 9: the relay pings a silent side (gateway.ping_interval) and
/// drops one that sends nothing for gateway.ping_timeout after a ping, as a
/// lost connection. A device that vanished without a reset (it stops
/// reading: no pong) makes its started session detached (6.2) while the host
/// side, answering every ping, stays; a host side that stops answering tells
/// its device 4102 and the session is detached. Pings are not input (no
/// bytes counted).
async fn a_side_that_answers_no_ping_is_dropped_as_lost(engine: Engine) {
    let f = fixture_with(
        engine,
        "gateway:\n  ping_interval: 100ms\n  ping_timeout: 300ms\n",
    )
    .await;
    let id = f.session("detached").await;
    let (h, d) = paired(&f, id).await;
    wait_state(&f, id, "active").await;
    let host_pings = answering(h);
    // `d` is never read again: no pong.
    wait_state(&f, id, "detached").await;
    f.sides(id, false, true).await;
    // The host side answered several pings meanwhile and stays.
    wait_until(|| host_pings.load(std::sync::atomic::Ordering::SeqCst) >= 5).await;
    f.sides(id, false, true).await;
    assert_eq!(f.state_of(id).await, "detached");
    let (.., bytes_in, bytes_out, last_input) = f.row(id).await;
    assert_eq!(
        (bytes_in, bytes_out, last_input),
        (0, 0, None),
        "pings are no input"
    );
    drop(d);

    // A host side that stops answering: the device gets 4102, detached.
    let id = f.session("detached").await;
    let (h, mut d) = paired(&f, id).await;
    wait_state(&f, id, "active").await;
    assert_eq!(
        closed(&mut d).await,
        (4102, "terminal_host_unavailable".into())
    );
    wait_state(&f, id, "detached").await;
    f.sides(id, false, false).await;
    drop(h);
}

/// 5.4, 6.1 step 7: the host's last messages of a session (its exit frame,
/// on the data connection) reach the device before the 4100 of the end
/// (whose `session.ended` travels on the control connection and may be
/// committed first). Here the device is slow, so the host's messages wait in
/// the relay when the end is committed; the device still gets every one of
/// them, in order, then 4100 with the close_reason.
async fn the_last_messages_reach_the_device_before_the_end(engine: Engine) {
    let f = fixture_with(engine, "terminal:\n  relay_buffer_max_bytes: 65535\n").await;
    let id = f.session("active").await;
    let host = host_data::login(&f.server, id, f.host_id, &f.host.keys).await;
    let mut device = slow_device(&f, id).await;
    // The host sends numbered messages until it is told to stop (after the
    // relay held it back), then reads on, answering the close of the end.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stopping = Arc::clone(&stop);
    let host = tokio::spawn(async move {
        let mut host = host;
        let mut sent = 0u32;
        while !stopping.load(std::sync::atomic::Ordering::SeqCst) {
            let mut message = vec![0u8; 8192];
            message[..4].copy_from_slice(&sent.to_be_bytes());
            host.send(Message::binary(message)).await.expect("sent");
            sent += 1;
        }
        (sent, closed(&mut host).await)
    });
    let relay = f.server.state.relay();
    wait_until(|| relay.is_stalled(id)).await;
    // The end is committed while messages wait in the relay and on the way.
    let mut uow = f.server.state.db().begin(f.now()).await.expect("begin");
    end(
        &mut uow,
        EndScope::Session(id),
        CloseReason::ProcessExited,
        None,
    )
    .await
    .expect("end");
    uow.commit().await.expect("commit");
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut received = 0u32;
    let close = loop {
        match next_frame(&mut device).await {
            Frame::Binary(bytes) => {
                let n = u32::from_be_bytes(bytes[..4].try_into().expect("4 bytes"));
                assert_eq!(n, received, "in order");
                received += 1;
            }
            Frame::Close(code, reason) => break (code, reason),
            other => panic!("unexpected {other:?}"),
        }
    };
    let (sent, host_close) = host.await.expect("host");
    assert_eq!(host_close, (4100, "process_exited".into()));
    assert_eq!(
        received, sent,
        "every message before the end reached the device"
    );
    assert_eq!(close, (4100, "process_exited".into()));
}

async fn newer_device_replaces_the_older(engine: Engine) {
    let f = fixture(engine).await;
    let id = f.session("detached").await;
    let mut older = device::login(&f.server, id, f.owner.token()).await;
    f.sides(id, true, false).await;
    let _newer = device::login(&f.server, id, f.owner.token()).await;
    assert_eq!(closed(&mut older).await, (4103, "terminal_replaced".into()));
    f.sides(id, true, false).await;
}

async fn device_leaving_detaches(engine: Engine) {
    let f = fixture(engine).await;
    let id = f.session("active").await;
    let mut h = host_data::login(&f.server, id, f.host_id, &f.host.keys).await;
    let mut d = device::login(&f.server, id, f.owner.token()).await;
    f.sides(id, true, true).await;
    d.close(None).await.expect("close");
    wait_state(&f, id, "detached").await;
    let detached_at: Option<i64> =
        sqlx::query("SELECT detached_at FROM terminal_sessions WHERE id = $1")
            .bind(db::id_text(&id))
            .fetch_one(f.server.state.db().pool())
            .await
            .expect("row")
            .get("detached_at");
    assert_eq!(detached_at, Some(f.now()));
    let events = audit_and_event_text(&f.server).await;
    assert!(
        events.contains("\"state\":\"detached\""),
        "terminal_session.changed"
    );
    // The host stays, waiting for the end; an end closes it with 4100.
    f.sides(id, false, true).await;
    let mut uow = f.server.state.db().begin(f.now()).await.expect("begin");
    end(
        &mut uow,
        EndScope::Session(id),
        CloseReason::ClosedByOwner,
        None,
    )
    .await
    .expect("end");
    uow.commit().await.expect("commit");
    assert_eq!(closed(&mut h).await, (4100, "closed_by_owner".into()));
}

async fn an_end_closes_both_sides_with_4100(engine: Engine) {
    let f = fixture(engine).await;
    let id = f.session("active").await;
    let mut h = host_data::login(&f.server, id, f.host_id, &f.host.keys).await;
    let mut d = device::login(&f.server, id, f.owner.token()).await;
    f.sides(id, true, true).await;
    // The owner logs out: identity ends the session (logout) through the one
    // end function; after its commit the relay closes both sides.
    let reply = post_empty(&f.server, "/api/v1/auth/logout", f.owner.token()).await;
    assert_eq!(reply.status, 204, "{:?}", reply.body);
    assert_eq!(closed(&mut d).await, (4100, "logout".into()));
    assert_eq!(closed(&mut h).await, (4100, "logout".into()));
    let (state, reason, ..) = f.row(id).await;
    assert_eq!(
        (state.as_str(), reason.as_deref()),
        ("closed", Some("logout"))
    );
}

// ---- limits (6.3) --------------------------------------------------------------------

async fn paired(f: &Fixture, id: Uuid) -> (support::ws::Ws, support::ws::Ws) {
    let h = host_data::login(&f.server, id, f.host_id, &f.host.keys).await;
    let d = device::login(&f.server, id, f.owner.token()).await;
    f.sides(id, true, true).await;
    (h, d)
}

async fn idle_end_without_the_host(engine: Engine) {
    let f = fixture(engine).await;
    let id = f.session("active").await;
    let (mut h, mut d) = paired(&f, id).await;
    // Device input moves the idle base.
    f.server.clock.advance(Duration::from_secs(600));
    d.send(Message::binary(vec![9u8; 40])).await.expect("send");
    assert_eq!(next_binary(&mut h).await, vec![9u8; 40]);
    let input_at = f.now();
    // Host output does not.
    f.server.clock.advance(Duration::from_secs(31 * 60));
    // idle_grace passed since the last write: the next look writes the
    // pending counters.
    let f = &f;
    eventually("counters written", WAIT, || async move {
        (f.row(id).await.3 == 40).then_some(())
    })
    .await;
    h.send(Message::binary(vec![7u8; 10])).await.expect("send");
    assert_eq!(next_binary(&mut d).await, vec![7u8; 10]);
    f.relay_looked().await;
    assert_eq!(
        f.state_of(id).await,
        "active",
        "idle_timeout + idle_grace not reached"
    );
    // idle_timeout (30 m) + idle_grace (2 m) after the last device byte.
    f.server.clock.set(input_at + 32 * 60 * 1000);
    assert_eq!(closed(&mut d).await, (4100, "idle_timeout".into()));
    assert_eq!(closed(&mut h).await, (4100, "idle_timeout".into()));
    let (state, reason, _, bytes_in, bytes_out, last_input_at) = f.row(id).await;
    assert_eq!(
        (state.as_str(), reason.as_deref()),
        ("closed", Some("idle_timeout"))
    );
    assert_eq!(
        (bytes_in, bytes_out, last_input_at),
        (40, 10, Some(input_at))
    );
    let ends = audit_of(&f.server, "terminal.terminate", "allow").await;
    assert_eq!(ends.len(), 1);
    assert_eq!(ends[0].details["bytes_in"], 40);
    assert_eq!(ends[0].details["bytes_out"], 10);
}

async fn max_duration_end(engine: Engine) {
    let f = fixture_with(engine, "terminal:\n  max_session_duration: 10m\n").await;
    let id = f.session("active").await;
    let (mut h, mut d) = paired(&f, id).await;
    f.server.clock.advance(Duration::from_secs(10 * 60));
    assert_eq!(closed(&mut d).await, (4100, "max_duration".into()));
    assert_eq!(closed(&mut h).await, (4100, "max_duration".into()));
}

async fn detach_expiry_end(engine: Engine) {
    let f = fixture(engine).await;
    let id = f.session("detached").await;
    let mut h = host_data::login(&f.server, id, f.host_id, &f.host.keys).await;
    f.sides(id, false, true).await;
    f.server.clock.advance(Duration::from_secs(15 * 60));
    assert_eq!(closed(&mut h).await, (4100, "detach_expired".into()));
    let (state, reason, ..) = f.row(id).await;
    assert_eq!(
        (state.as_str(), reason.as_deref()),
        ("closed", Some("detach_expired"))
    );
}

async fn bytes_written_once_per_idle_grace(engine: Engine) {
    let f = fixture(engine).await;
    let id = f.session("active").await;
    let (mut h, mut d) = paired(&f, id).await;
    d.send(Message::binary(vec![1u8; 100])).await.expect("send");
    assert_eq!(next_binary(&mut h).await.len(), 100);
    f.relay_looked().await;
    assert_eq!(f.row(id).await.3, 0, "not before idle_grace");
    f.server.clock.advance(Duration::from_secs(120));
    let f = &f;
    eventually("written", WAIT, || async move {
        (f.row(id).await.3 != 0).then_some(())
    })
    .await;
    assert_eq!(f.row(id).await.3, 100);
    // The release writes only what came since.
    d.send(Message::binary(vec![1u8; 5])).await.expect("send");
    assert_eq!(next_binary(&mut h).await.len(), 5);
    d.close(None).await.expect("close");
    h.close(None).await.expect("close");
    f.sides(id, false, false).await;
    let f = &f;
    eventually("written", WAIT, || async move {
        (f.row(id).await.3 != 100).then_some(())
    })
    .await;
    assert_eq!(f.row(id).await.3, 105, "never counted twice");
}

async fn shutdown_closes_both_with_4013(engine: Engine) {
    let f = fixture(engine).await;
    let id = f.session("active").await;
    let (mut h, mut d) = paired(&f, id).await;
    let Fixture { server, .. } = f;
    let stopping = tokio::spawn(server.stop());
    assert_eq!(closed(&mut d).await, (4013, "server_shutdown".into()));
    assert_eq!(closed(&mut h).await, (4013, "server_shutdown".into()));
    let _ = stopping.await;
}

/// Issue 15 (item 5, D-350): the HTTP header and idle timeouts end HTTP
/// connections only. The WebSockets of a paired relay session (device
/// stream, host data connection), the host's control connection and the
/// events stream, idle longer than both timeouts, stay open and work: an
/// upgrade leaves hyper's connection and its watchdog. The wait is for an
/// event: a plain keep-alive connection opened after them is closed by its
/// idle timeout first.
async fn websockets_outlive_the_http_timeouts(engine: Engine) {
    let f = fixture_with(
        engine,
        "server:\n  header_read_timeout: 700ms\n  idle_timeout: 700ms\n",
    )
    .await;
    // The control connection first: its login ends what it does not name.
    let mut control = f.control().await;
    let id = f.session("active").await;
    let (mut h, mut d) = paired(&f, id).await;
    let mut events = ws::open(&f.server, "/api/v1/events", f.owner.token()).await;
    assert_eq!(ws::next_json(&mut events).await["op"], "ready");

    let started = std::time::Instant::now();
    let mut idle = ws::raw_tls(&f.server, [127, 0, 0, 1].into(), &["http/1.1"])
        .await
        .expect("TLS");
    tokio::time::timeout(WAIT, async {
        let mut buf = [0u8; 64];
        while !matches!(
            tokio::io::AsyncReadExt::read(&mut idle, &mut buf).await,
            Ok(0) | Err(_)
        ) {}
    })
    .await
    .expect("the plain connection is closed by its timeout");
    assert!(started.elapsed() >= Duration::from_millis(700));

    d.send(Message::binary(vec![5u8; 10])).await.expect("send");
    assert_eq!(next_binary(&mut h).await, vec![5u8; 10]);
    h.send(Message::binary(vec![6u8; 20])).await.expect("send");
    assert_eq!(next_binary(&mut d).await, vec![6u8; 20]);
    let relay = f.server.state.relay().sides(id);
    assert!(relay.device && relay.host, "both sides still joined");
    control.heartbeat().await;
    events
        .send(Message::Ping(b"still there".to_vec().into()))
        .await
        .expect("ping");
    let pong = tokio::time::timeout(WAIT, async {
        loop {
            match futures_util::StreamExt::next(&mut events).await {
                Some(Ok(Message::Pong(payload))) => return payload,
                Some(Ok(Message::Text(_) | Message::Ping(_))) => {}
                other => panic!("the events stream ended: {other:?}"),
            }
        }
    })
    .await
    .expect("a pong in time");
    assert_eq!(&pong[..], b"still there");
}

/// Issue 16 (item 14): at shutdown the relay writes the pending byte
/// counters of its sessions before the database pool closes; nothing is lost
/// and nothing logs that the pool was closed. The device left before (the
/// session is detached), so the host side's leave at shutdown releases the
/// session and writes its counters; while that write waits for a pooled
/// connection (the test holds all of them), the server must wait for it
/// instead of closing the pool under it.
async fn shutdown_writes_the_counters_before_the_pool_closes(engine: Engine) {
    let f = fixture(engine).await;
    let id = f.session("active").await;
    let (mut h, mut d) = paired(&f, id).await;
    d.send(Message::binary(vec![1u8; 100])).await.expect("send");
    assert_eq!(next_binary(&mut h).await.len(), 100);
    h.send(Message::binary(vec![2u8; 30])).await.expect("send");
    assert_eq!(next_binary(&mut d).await.len(), 30);
    d.close(None).await.expect("close");
    wait_state(&f, id, "detached").await;
    f.sides(id, false, true).await;
    assert_eq!(
        f.row(id).await.3,
        0,
        "pending until idle_grace or the release"
    );

    // Every pooled connection is taken: the release's write waits for one.
    let pool = f.server.state.db().pool().clone();
    let max = pool.options().get_max_connections();
    let mut held = Vec::new();
    while pool.size() < max || pool.num_idle() > 0 {
        held.push(pool.acquire().await.expect("a pooled connection"));
    }
    let state = f.server.state.clone();
    let Fixture { server, .. } = f;
    let stopping = tokio::spawn(server.stop());
    assert_eq!(closed(&mut h).await, (4013, "server_shutdown".into()));
    // The server's side task dropped its shutdown guard before the socket
    // went away.
    while !matches!(next_frame(&mut h).await, Frame::Ended) {}
    // Either the server closes the pool with the write still waiting (the
    // fault), or it waits for the write, the one task still tracked.
    let (pool, state) = (&pool, &state);
    eventually(
        "the pool closed or the server waits for the relay",
        WAIT,
        || async move { (pool.is_closed() || state.shutdown().tracked() != 0).then_some(()) },
    )
    .await;
    drop(held);
    let (test_db, _data_dir) = stopping.await.expect("server stops");
    let again = test_db.connect_again().await;
    let row = sqlx::query("SELECT bytes_in, bytes_out FROM terminal_sessions WHERE id = $1")
        .bind(db::id_text(&id))
        .fetch_one(again.pool())
        .await
        .expect("session row");
    let counters: (i64, i64) = (row.get("bytes_in"), row.get("bytes_out"));
    assert_eq!(counters, (100, 30), "the counters are in the row");
    let logs = String::from_utf8_lossy(&logs().lock().expect("log buffer")).into_owned();
    let id_text = id.to_string();
    for line in logs.lines().filter(|line| line.contains(&id_text)) {
        assert!(!line.contains("the relay cannot"), "{line}");
    }
    again.close().await;
}

// ---- ends reported through session.ended (5.3 StreamCodeForEnd) ------------------

/// 5.3, 6.1 step 7: a refusal the host service reports through
/// `session.ended` (open_failed with a detail of 5.3) reaches the device with
/// the code it would have closed its data connection with; the host's data
/// connection gets 4100 with the close_reason.
async fn refusal_through_session_ended_reaches_the_device_with_its_code(engine: Engine) {
    let f = fixture(engine).await;
    let mut control = f.control().await;
    for (detail, code) in [
        (CloseDetail::HandshakeFailed, 4104),
        (CloseDetail::TokenExpired, 4101),
        (CloseDetail::ProfileUnknown, 4104),
    ] {
        let id = f.session("opening").await;
        let (mut h, mut d) = paired(&f, id).await;
        control
            .session_ended(id, CloseReason::OpenFailed, Some(detail), None)
            .await;
        assert_eq!(closed(&mut d).await, (code, detail.as_str().to_owned()));
        assert_eq!(closed(&mut h).await, (4100, "open_failed".into()));
        let (state, reason, stored, ..) = f.row(id).await;
        assert_eq!(
            (state.as_str(), reason.as_deref(), stored.as_deref()),
            ("closed", Some("open_failed"), Some(detail.as_str()))
        );
    }
    // Every other end: 4100 with the close_reason, also open_failed with a
    // detail that is no refused handshake.
    let id = f.session("opening").await;
    let (mut h, mut d) = paired(&f, id).await;
    control
        .session_ended(
            id,
            CloseReason::OpenFailed,
            Some(CloseDetail::LocalConfirmDenied),
            None,
        )
        .await;
    assert_eq!(closed(&mut d).await, (4100, "open_failed".into()));
    assert_eq!(closed(&mut h).await, (4100, "open_failed".into()));
    let id = f.session("active").await;
    let (mut h, mut d) = paired(&f, id).await;
    control
        .session_ended(id, CloseReason::ProcessExited, None, Some(0))
        .await;
    assert_eq!(closed(&mut d).await, (4100, "process_exited".into()));
    assert_eq!(closed(&mut h).await, (4100, "process_exited".into()));
    assert_eq!(f.unpaired("client") + f.unpaired("host"), 0);
}

/// 6.1 step 7, M2-44: session.started with the device side present makes
/// the opening active (not detached).
async fn session_started_with_the_device_present_is_active(engine: Engine) {
    let f = fixture(engine).await;
    let mut control = f.control().await;
    let id = f.session("opening").await;
    let (_h, _d) = paired(&f, id).await;
    control.session_started(id).await;
    control.heartbeat().await;
    let row =
        sqlx::query("SELECT state, started_at, detached_at FROM terminal_sessions WHERE id = $1")
            .bind(db::id_text(&id))
            .fetch_one(f.server.state.db().pool())
            .await
            .expect("row");
    assert_eq!(row.get::<String, _>("state"), "active");
    assert_eq!(row.get::<Option<i64>, _>("started_at"), Some(f.now()));
    assert_eq!(row.get::<Option<i64>, _>("detached_at"), None);
    let events = audit_and_event_text(&f.server).await;
    assert!(
        events.contains("\"state\":\"active\""),
        "terminal_session.changed"
    );
}

/// 8.3, 3.1: disabling the host (PATCH state disabled) ends its sessions in
/// the same unit of work; the live relay closes both sides with 4100
/// `host_disabled`, the control connection gets `session.close` and then
/// 4111.
async fn disabling_the_host_closes_a_live_relay(engine: Engine) {
    let f = fixture(engine).await;
    let mut control = f.control().await;
    let id = f.session("active").await;
    let (mut h, mut d) = paired(&f, id).await;
    let tag = etag_of(&get_host(&f.server, f.owner.token(), &f.host.host_id).await);
    let step_up_id = step_up(&f.server, &f.owner).await;
    let reply = send(
        &f.server,
        Method::PATCH,
        &format!("/api/v1/hosts/{}", f.host.host_id),
        Some(f.owner.token()),
        Some(&json!({"state": "disabled", "reason": "stolen laptop", "step_up_id": step_up_id})),
        &[("if-match", tag.as_str())],
    )
    .await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    assert_eq!(closed(&mut d).await, (4100, "host_disabled".into()));
    assert_eq!(closed(&mut h).await, (4100, "host_disabled".into()));
    match control.message().await {
        bothy_proto::control::ServerMessage::SessionClose(close) => {
            assert_eq!(
                (close.session_id, close.close_reason),
                (id, CloseReason::HostDisabled)
            );
        }
        other => panic!("expected session.close, got {other:?}"),
    }
    assert_eq!(control.closed().await, (4111, "host_disabled".into()));
    let (state, reason, ..) = f.row(id).await;
    assert_eq!(
        (state.as_str(), reason.as_deref()),
        ("closed", Some("host_disabled"))
    );
}

// ---- rate limits (6.3) -------------------------------------------------------------

/// 6.3 "Rate limits of the terminal channels" on the device stream: the
/// person's rl.terminal after the credential check; rl.public_auth of the
/// address for 4004 and 4012 of a presented credential, checked before the
/// credential; 4008 with `retry_after=<seconds>`.
async fn rate_limits_of_the_device_stream(engine: Engine) {
    let f = fixture_with(
        engine,
        "rl:\n  terminal:\n    burst: 1\n    refill_per_minute: 1\n  public_auth:\n    burst: 2\n    \
         refill_per_minute: 2\n",
    )
    .await;
    let id = f.session("detached").await;
    let revoked = f.owner.enrolled.login(&f.server, 2).await;
    let reply = post_empty(&f.server, "/api/v1/auth/logout", &revoked.token).await;
    assert_eq!(reply.status, 204, "{:?}", reply.body);
    let server = &f.server;
    // The first stream takes the person's token; the next one finds none.
    let _first = device::login(server, id, f.owner.token()).await;
    let mut d = device::identify(server, id, Some(f.owner.token())).await;
    assert_eq!(closed(&mut d).await, (4008, "retry_after=60".into()));
    // Two failed checks of a presented credential empty the address's bucket.
    let mut d = device::identify(server, id, Some("nonsense")).await;
    assert_eq!(closed(&mut d).await.0, 4004);
    let mut d = device::identify(server, id, Some(&revoked.token)).await;
    assert_eq!(closed(&mut d).await.0, 4012);
    // Now a credential is not even checked.
    let mut d = device::identify(server, id, Some(f.owner.token())).await;
    assert_eq!(closed(&mut d).await, (4008, "retry_after=30".into()));
    let mut d = device::identify(server, id, Some("nonsense")).await;
    assert_eq!(closed(&mut d).await, (4008, "retry_after=30".into()));
    // No credential at all presents nothing: 4004, not limited.
    let mut d = device::identify(server, id, None).await;
    assert_eq!(closed(&mut d).await, (4004, "credential_invalid".into()));
    // 30 s later the address has a token again; the person's needs 30 s more.
    server.clock.advance(Duration::from_secs(30));
    let mut d = device::identify(server, id, Some(f.owner.token())).await;
    assert_eq!(closed(&mut d).await, (4008, "retry_after=30".into()));
    server.clock.advance(Duration::from_secs(30));
    let _second = device::login(server, id, f.owner.token()).await;
}

// ---- the web console's cookie (DESIGN 3.4, spec 12) ---------------------------------

/// The console authenticates the device stream with its cookie at the upgrade
/// and sends identify without a token; the cookie counts only from the origin
/// of `server.public_url`.
async fn console_cookie_identify(engine: Engine) {
    let f = fixture(engine).await;
    let server = &f.server;
    let mut key = add_passkey(server, &f.owner).await;
    let console = console_login(server, &f.owner, &mut key).await;
    let id = f
        .session_of("opening", &console.login_session_id, None)
        .await;
    let cookie = format!("bothy_session={}", console.cookie);
    let with = |origin: &'static str| [("cookie", cookie.clone()), ("origin", origin.to_owned())];
    let identify = |headers: Vec<(String, String)>, token: Option<String>| async move {
        let headers: Vec<(&str, &str)> = headers
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_str()))
            .collect();
        device::identify_with_headers(server, id, token.as_deref(), &headers).await
    };
    let owned = |pairs: [(&str, String); 2]| -> Vec<(String, String)> {
        pairs.into_iter().map(|(n, v)| (n.to_owned(), v)).collect()
    };

    // The cookie from the console's own origin: ready.
    let mut d = identify(owned(with(ORIGIN)), None).await;
    device::expect_ready(&mut d, id).await;
    f.sides(id, true, false).await;
    drop(d);
    // From another origin, or without one, the cookie does not count: no
    // credential, 4004.
    let mut d = identify(owned(with("https://evil.example")), None).await;
    assert_eq!(closed(&mut d).await, (4004, "credential_invalid".into()));
    let mut d = identify(vec![("cookie".to_owned(), cookie.clone())], None).await;
    assert_eq!(closed(&mut d).await, (4004, "credential_invalid".into()));
    // Neither a token nor a cookie: 4004.
    let mut d = identify(vec![("origin".to_owned(), ORIGIN.to_owned())], None).await;
    assert_eq!(closed(&mut d).await, (4004, "credential_invalid".into()));
    // The console's token as access_token, a CLI token as the cookie: 4004.
    let mut d = identify(Vec::new(), Some(console.cookie.clone())).await;
    assert_eq!(closed(&mut d).await, (4004, "credential_invalid".into()));
    let cli_cookie = [
        ("cookie", format!("bothy_session={}", f.owner.token())),
        ("origin", ORIGIN.to_owned()),
    ];
    let mut d = identify(owned(cli_cookie), None).await;
    assert_eq!(closed(&mut d).await, (4004, "credential_invalid".into()));
    // The console's cookie for a session of the CLI's device: 4004 and a
    // terminal.stream denial; the CLI's token for the console's session too.
    let cli_session = f.session("opening").await;
    let headers: Vec<(String, String)> = owned(with(ORIGIN));
    let pairs: Vec<(&str, &str)> = headers
        .iter()
        .map(|(name, value)| (name.as_str(), value.as_str()))
        .collect();
    let mut d = device::identify_with_headers(server, cli_session, None, &pairs).await;
    assert_eq!(closed(&mut d).await, (4004, "credential_invalid".into()));
    let mut d = device::identify(server, id, Some(f.owner.token())).await;
    assert_eq!(closed(&mut d).await, (4004, "credential_invalid".into()));
    let denials = audit_of(server, "terminal.stream", "deny").await;
    assert_eq!(denials.len(), 2, "{denials:?}");
    assert!(
        denials
            .iter()
            .all(|row| row.details["reason"] == "device_mismatch")
    );
    // After the console's logout its cookie is revoked: 4012.
    let logout = console_common::console_post(server, &console, "/api/v1/auth/logout", None).await;
    assert_eq!(logout.status, 204, "{:?}", logout.body);
    let mut d = identify(owned(with(ORIGIN)), None).await;
    assert_eq!(closed(&mut d).await, (4012, "credential_revoked".into()));
}

both_engines!(
    data_identify_outcomes,
    device_identify_outcomes,
    text_after_login_is_4002,
    noise_through_the_relay,
    backpressure_slow_device_gets_4014,
    lone_device_of_an_opening,
    lone_host_of_an_opening,
    lone_sides_of_a_started_session,
    host_4104_handed_to_the_device,
    host_refusal_of_an_attach_ends_a_started_session_on_4104_only,
    a_side_that_answers_no_ping_is_dropped_as_lost,
    the_last_messages_reach_the_device_before_the_end,
    newer_device_replaces_the_older,
    device_leaving_detaches,
    an_end_closes_both_sides_with_4100,
    idle_end_without_the_host,
    max_duration_end,
    detach_expiry_end,
    bytes_written_once_per_idle_grace,
    shutdown_closes_both_with_4013,
    websockets_outlive_the_http_timeouts,
    shutdown_writes_the_counters_before_the_pool_closes,
    refusal_through_session_ended_reaches_the_device_with_its_code,
    session_started_with_the_device_present_is_active,
    disabling_the_host_closes_a_live_relay,
    rate_limits_of_the_device_stream,
    console_cookie_identify,
);
