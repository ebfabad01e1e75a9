//! `GET /api/v1/events` against the real server on port 0 over TLS, on both
//! engines (spec 24 section 10.2; DESIGN 3.3): each delivery reaches only its
//! audience; resuming with `after=` replays exactly the later events, then live
//! ones, without duplicates; ephemeral events are live only; an ended login
//! session closes with 4012, a slow reader with 4014, the server's shutdown
//! with 4013, a client data frame with 4002; refusals before the upgrade are
//! problem+json.
//!
//! Nothing sleeps: every wait is on a socket (or on the events gauge), with a
//! timeout only as the safety net.

#![allow(clippy::unwrap_used)] // test bodies are plain fns called by the generated #[test]s

use bothy_testkit as support;
use bothy_testkit::identity as identity_common;

use std::time::Duration;

use bothy_server::clock::Clock;
use bothy_server::db::Engine;
use bothy_server::events::{Audience, DurableEvent, EphemeralEvent, EphemeralKind, EventKind};
use identity_common::*;
use serde_json::{Map, Value, json};
use support::both_engines;
use support::server::TestServer;
use support::ws::{self, Next, Options, WAIT};
use tokio_tungstenite::tungstenite::Message;
use uuid::Uuid;

const EVENTS: &str = "/api/v1/events";
const PROBLEM_JSON: &str = "application/problem+json";

fn uuid(text: &str) -> Uuid {
    bothy_proto::ids::parse_uuid(text).unwrap()
}

fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => panic!("not an object"),
    }
}

fn personal(person: Uuid, n: i64) -> DurableEvent {
    DurableEvent::new(
        EventKind::TerminalSessionChanged,
        Audience::Person(person),
        object(json!({"n": n})),
    )
}

/// Commits `events` in one unit of work at the server's time; their positions.
async fn commit(server: &TestServer, events: Vec<DurableEvent>) -> Vec<i64> {
    let mut uow = server
        .state
        .db()
        .begin(server.clock.now_ms())
        .await
        .unwrap();
    for event in events {
        uow.event(event);
    }
    uow.commit().await.unwrap().event_positions
}

/// The frame of a durable event committed now.
fn durable(server: &TestServer, position: i64, kind: &str, payload: Value) -> Value {
    json!({"op": "event", "d": {
        "position": position,
        "kind": kind,
        "at": server.clock.now_ms(),
        "payload": payload,
    }})
}

/// Opens the stream and reads `ready`; returns the socket and its position.
async fn subscribe(server: &TestServer, path: &str, token: &str) -> (ws::Ws, i64) {
    let mut socket = ws::open(server, path, token).await;
    let ready = ws::next_json(&mut socket).await;
    assert_eq!(ready["op"], "ready", "{ready}");
    let position = ready["d"]["position"].as_i64().unwrap();
    assert_eq!(ready, json!({"op": "ready", "d": {"position": position}}));
    (socket, position)
}

/// An owner (alice) and a member (bob), each logged in once.
struct People {
    alice: Enrolled,
    alice_token: String,
    bob: Enrolled,
    bob_token: String,
}

async fn people(server: &TestServer) -> People {
    let alice = owner(server, "alice").await;
    let alice_token = alice.login(server, 1).await.token;
    let bob = invite(server, &alice_token, "bob", "member").await;
    let bob_token = bob.login(server, 2).await.token;
    People {
        alice,
        alice_token,
        bob,
        bob_token,
    }
}

async fn deliveries_reach_only_their_audience(engine: Engine) {
    let server = TestServer::start(engine).await;
    let p = people(&server).await;
    let (alice, bob) = (uuid(&p.alice.person_id), uuid(&p.bob.person_id));
    let (mut a, _) = subscribe(&server, EVENTS, &p.alice_token).await;
    let (mut b, _) = subscribe(&server, EVENTS, &p.bob_token).await;

    let host = Uuid::from_u128(7);
    let positions = commit(
        &server,
        vec![
            personal(bob, 1),
            DurableEvent::new(
                EventKind::HostUpdated,
                Audience::Owners,
                object(json!({"n": 2})),
            ),
            DurableEvent::new(
                EventKind::HostUpdated,
                Audience::HostReaders(host),
                object(json!({"n": 3})),
            ),
            personal(alice, 4),
            personal(bob, 5),
        ],
    )
    .await;

    // Deliveries come in position order, so the last one each may see proves
    // that nothing before it was skipped or leaked.
    let session = "terminal_session.changed";
    assert_eq!(
        ws::next_json(&mut a).await,
        durable(&server, positions[1], "host.updated", json!({"n": 2}))
    );
    assert_eq!(
        ws::next_json(&mut a).await,
        durable(&server, positions[2], "host.updated", json!({"n": 3}))
    );
    assert_eq!(
        ws::next_json(&mut a).await,
        durable(&server, positions[3], session, json!({"n": 4}))
    );
    assert_eq!(
        ws::next_json(&mut b).await,
        durable(&server, positions[0], session, json!({"n": 1}))
    );
    assert_eq!(
        ws::next_json(&mut b).await,
        durable(&server, positions[4], session, json!({"n": 5}))
    );

    // The metrics: two sockets; a message counts once written, so every one
    // before the last on each socket has surely been counted.
    let metrics = server.state.metrics();
    assert_eq!(metrics.events_sockets().get(), 2);
    assert!(metrics.events_delivered().get() >= 3);
    drop((a, b));
    server.stop().await;
}

async fn resume_replays_exactly_the_later_events_then_live_ones(engine: Engine) {
    let server = TestServer::start(engine).await;
    let p = people(&server).await;
    let alice = uuid(&p.alice.person_id);
    let mut earlier = Vec::new();
    for n in 1..=3 {
        earlier.extend(commit(&server, vec![personal(alice, n)]).await);
    }

    // From the first: the second and third again, then live.
    let path = format!("{EVENTS}?after={}", earlier[0]);
    let (mut from_first, start) = subscribe(&server, &path, &p.alice_token).await;
    assert_eq!(start, earlier[0]);
    // Without `after`: from the current end.
    let (mut from_now, start) = subscribe(&server, EVENTS, &p.alice_token).await;
    assert_eq!(start, earlier[2]);
    // From 0: everything.
    let (mut from_zero, start) =
        subscribe(&server, &format!("{EVENTS}?after=0"), &p.alice_token).await;
    assert_eq!(start, 0);

    let session = "terminal_session.changed";
    let replayed: Vec<Value> = vec![
        ws::next_json(&mut from_first).await,
        ws::next_json(&mut from_first).await,
    ];
    let positions: Vec<i64> = replayed
        .iter()
        .map(|frame| frame["d"]["position"].as_i64().unwrap())
        .collect();
    assert_eq!(positions, earlier[1..]);
    for n in 1..=3 {
        let frame = ws::next_json(&mut from_zero).await;
        assert_eq!(frame["d"]["position"], earlier[n - 1]);
        assert_eq!(frame["d"]["payload"], json!({"n": n}));
    }

    let live = commit(&server, vec![personal(alice, 4)]).await[0];
    let marker = commit(&server, vec![personal(alice, 5)]).await[0];
    for socket in [&mut from_first, &mut from_now, &mut from_zero] {
        assert_eq!(
            ws::next_json(socket).await,
            durable(&server, live, session, json!({"n": 4}))
        );
        // No duplicate of the live one, no replay again: the marker is next.
        assert_eq!(
            ws::next_json(socket).await,
            durable(&server, marker, session, json!({"n": 5}))
        );
    }
    drop((from_first, from_now, from_zero));
    server.stop().await;
}

async fn ephemeral_events_are_live_only(engine: Engine) {
    let server = TestServer::start(engine).await;
    let p = people(&server).await;
    let (alice, bob) = (uuid(&p.alice.person_id), uuid(&p.bob.person_id));
    let (mut a, start) = subscribe(&server, EVENTS, &p.alice_token).await;
    let (mut b, _) = subscribe(&server, EVENTS, &p.bob_token).await;

    let host = Uuid::from_u128(9);
    let presence = json!({"host_id": host.to_string(), "connected": true});
    server.state.db().publish_ephemeral(EphemeralEvent::new(
        EphemeralKind::HostPresenceChanged,
        Audience::HostReaders(host),
        object(presence.clone()),
    ));
    // To bob alone, after the first: ephemeral events keep their order, so bob
    // getting this one first proves the host readers' one was held back.
    server.state.db().publish_ephemeral(EphemeralEvent::new(
        EphemeralKind::HostPresenceChanged,
        Audience::Person(bob),
        object(json!({"n": "bob"})),
    ));
    let at = server.clock.now_ms();
    assert_eq!(
        ws::next_json(&mut a).await,
        json!({"op": "event", "d": {"kind": "host.presence_changed", "at": at, "payload": presence}})
    );
    assert_eq!(
        ws::next_json(&mut b).await,
        json!({"op": "event", "d": {"kind": "host.presence_changed", "at": at, "payload": {"n": "bob"}}})
    );

    // A resume replays the durable events only.
    let durable_position = commit(&server, vec![personal(alice, 1)]).await[0];
    assert_eq!(
        ws::next_json(&mut a).await["d"]["position"],
        durable_position
    );
    let (mut again, _) =
        subscribe(&server, &format!("{EVENTS}?after={start}"), &p.alice_token).await;
    assert_eq!(
        ws::next_json(&mut again).await,
        durable(
            &server,
            durable_position,
            "terminal_session.changed",
            json!({"n": 1})
        )
    );
    let marker = commit(&server, vec![personal(alice, 2)]).await[0];
    assert_eq!(ws::next_json(&mut again).await["d"]["position"], marker);
    drop((a, b, again));
    server.stop().await;
}

async fn ended_login_sessions_close_with_4012(engine: Engine) {
    let server = TestServer::start(engine).await;
    let p = people(&server).await;
    let bob = uuid(&p.bob.person_id);
    let second = p.bob.login(&server, 3).await;
    let (mut first_socket, _) = subscribe(&server, EVENTS, &p.bob_token).await;
    let (mut second_socket, _) = subscribe(&server, EVENTS, &second.token).await;

    // Logout ends the first session: its socket closes at the next delivery.
    let reply = post_empty(&server, "/api/v1/auth/logout", &p.bob_token).await;
    assert_eq!(reply.status, 204, "{:?}", reply.body);
    let position = commit(&server, vec![personal(bob, 1)]).await[0];
    assert_eq!(
        ws::next(&mut first_socket).await,
        Next::Close(4012, "credential_revoked".into())
    );
    assert_eq!(
        ws::next_json(&mut second_socket).await["d"]["position"],
        position
    );

    // An owner revokes the second one.
    let reply = post_empty(
        &server,
        &format!("/api/v1/auth/sessions/{}/revoke", second.login_session_id),
        &p.alice_token,
    )
    .await;
    assert_eq!(reply.status, 204, "{:?}", reply.body);
    commit(&server, vec![personal(bob, 2)]).await;
    assert_eq!(
        ws::next(&mut second_socket).await,
        Next::Close(4012, "credential_revoked".into())
    );

    // A session that expires meanwhile (`auth.login_session_ttl`, 12 h).
    let third = p.bob.login(&server, 4).await;
    let (mut third_socket, _) = subscribe(&server, EVENTS, &third.token).await;
    server.clock.advance(Duration::from_secs(13 * 3600));
    commit(&server, vec![personal(bob, 3)]).await;
    assert_eq!(
        ws::next(&mut third_socket).await,
        Next::Close(4012, "credential_revoked".into())
    );
    server.stop().await;
}

async fn a_slow_reader_is_closed_with_4014_and_resumes_without_loss(engine: Engine) {
    // A queue of two messages; writes may take long, so only the full queue
    // decides, and the close frame waits for the reader.
    let server = TestServer::start_with(
        engine,
        "sync:\n  outbound_queue_max: 2\ngateway:\n  write_timeout: 60s\n",
    )
    .await;
    let p = people(&server).await;
    let alice = uuid(&p.alice.person_id);
    let mut socket = ws::connect_with(
        &server,
        EVENTS,
        Some(&p.alice_token),
        Options {
            recv_buffer: Some(4096),
        },
    )
    .await
    .unwrap();
    let ready = ws::next_json(&mut socket).await;
    assert_eq!(ready["op"], "ready");

    // Far more than the socket buffers on both sides and TLS hold: the server's
    // writes stall while this test does not read, and the queue fills.
    let pad = "x".repeat(32 * 1024);
    let events = (0..256)
        .map(|n| {
            DurableEvent::new(
                EventKind::TerminalSessionChanged,
                Audience::Person(alice),
                object(json!({"n": n, "pad": pad})),
            )
        })
        .collect();
    let positions = commit(&server, events).await;
    let metrics = server.state.metrics();
    tokio::time::timeout(WAIT, metrics.events_sockets().wait_for(|open| *open == 0))
        .await
        .expect("the server gave up on the slow socket");
    assert_eq!(metrics.events_dropped_slow().get(), 1);

    // Now read: a prefix of the events, in order, then 4014.
    let mut seen = Vec::new();
    let code = loop {
        match ws::next(&mut socket).await {
            Next::Json(frame) => seen.push(frame["d"]["position"].as_i64().unwrap()),
            Next::Close(code, reason) => {
                assert_eq!(reason, "slow_consumer");
                break code;
            }
            Next::Ended => panic!("no close frame"),
        }
    };
    assert_eq!(code, 4014);
    assert!(seen.len() < positions.len(), "everything arrived: not slow");
    assert_eq!(seen, positions[..seen.len()]);

    // Resuming after the last position seen loses nothing.
    let last = seen
        .last()
        .copied()
        .unwrap_or(ready["d"]["position"].as_i64().unwrap());
    let (mut resumed, start) =
        subscribe(&server, &format!("{EVENTS}?after={last}"), &p.alice_token).await;
    assert_eq!(start, last);
    for &expected in &positions[seen.len()..] {
        assert_eq!(ws::next_json(&mut resumed).await["d"]["position"], expected);
    }
    let marker = commit(&server, vec![personal(alice, -1)]).await[0];
    assert_eq!(ws::next_json(&mut resumed).await["d"]["position"], marker);
    drop(resumed);
    server.stop().await;
}

async fn shutdown_closes_sockets_with_4013(engine: Engine) {
    let server = TestServer::start(engine).await;
    let p = people(&server).await;
    let (mut a, _) = subscribe(&server, EVENTS, &p.alice_token).await;
    let (mut b, _) = subscribe(&server, EVENTS, &p.bob_token).await;

    let stopping = tokio::spawn(server.stop());
    for socket in [&mut a, &mut b] {
        assert_eq!(
            ws::next(socket).await,
            Next::Close(4013, "server_shutdown".into())
        );
    }
    // The server waited for the sockets and its log tail, then stopped.
    tokio::time::timeout(WAIT, stopping)
        .await
        .expect("the server stops in time")
        .unwrap();
}

async fn client_frames_other_than_pings_close_with_4002(engine: Engine) {
    let server = TestServer::start_with(engine, "sync:\n  ws_max_frame_bytes: 1024\n").await;
    let p = people(&server).await;
    let alice = uuid(&p.alice.person_id);

    // Pings and pongs are ignored: the stream goes on.
    let (mut pinged, _) = subscribe(&server, EVENTS, &p.alice_token).await;
    ws::send(&mut pinged, Message::Ping(b"hello".to_vec().into())).await;
    ws::send(&mut pinged, Message::Pong(b"unasked".to_vec().into())).await;
    let position = commit(&server, vec![personal(alice, 1)]).await[0];
    assert_eq!(ws::next_json(&mut pinged).await["d"]["position"], position);
    drop(pinged);

    let frames = [
        Message::text("{\"op\":\"identify\"}"),
        Message::binary(vec![1, 2, 3]),
        // Over `sync.ws_max_frame_bytes`.
        Message::binary(vec![0; 4096]),
    ];
    for frame in frames {
        let (mut socket, _) = subscribe(&server, EVENTS, &p.alice_token).await;
        ws::send(&mut socket, frame).await;
        assert_eq!(
            ws::next(&mut socket).await,
            Next::Close(4002, "invalid_message".into())
        );
    }
    server.stop().await;
}

async fn refusals_before_the_upgrade_are_problems(engine: Engine) {
    let server = TestServer::start(engine).await;
    let p = people(&server).await;

    // No token, a wrong one: 401, no upgrade.
    for token in [None, Some("bothy_at_not-a-real-token")] {
        let refused = ws::connect(&server, EVENTS, token).await.unwrap_err();
        assert_eq!(refused.status, 401);
        assert_eq!(refused.content_type, PROBLEM_JSON);
        assert_eq!(refused.body["code"], "unauthenticated");
    }

    // An agent: 403 subject_kind_not_allowed, audited.
    let created = post(
        &server,
        "/api/v1/tokens",
        Some(&p.alice_token),
        json!({"kind": "agent", "name": "ci-bot"}),
    )
    .await;
    assert_eq!(created.status, 201, "{:?}", created.body);
    let agent = created.body["token"].as_str().unwrap();
    let refused = ws::connect(&server, EVENTS, Some(agent)).await.unwrap_err();
    assert_eq!(refused.status, 403);
    assert_eq!(refused.body["code"], "forbidden");
    assert_eq!(refused.body["reason"], "subject_kind_not_allowed");
    let denials = audit_of(&server, "events.read", "deny").await;
    assert_eq!(denials.len(), 1);
    assert_eq!(denials[0].actor_kind, "agent");

    // `after`: digits only, once, not beyond the log's end.
    let end = commit(&server, vec![personal(uuid(&p.alice.person_id), 1)]).await[0];
    let beyond = format!("after={}", end + 1);
    for (query, pointer, code) in [
        ("after=-1", "/query/after", "invalid"),
        ("after=abc", "/query/after", "invalid"),
        ("after=1.5", "/query/after", "invalid"),
        ("after=", "/query/after", "invalid"),
        ("after=99999999999999999999", "/query/after", "out_of_range"),
        (beyond.as_str(), "/query/after", "out_of_range"),
        ("after=1&after=1", "/query/after", "duplicate_parameter"),
        ("position=1", "/query/position", "unknown_parameter"),
    ] {
        let refused = ws::connect(&server, &format!("{EVENTS}?{query}"), Some(&p.bob_token))
            .await
            .unwrap_err();
        assert_eq!(refused.status, 400, "{query}");
        assert_eq!(refused.content_type, PROBLEM_JSON);
        assert_eq!(refused.body["code"], "validation_failed", "{query}");
        assert_eq!(
            refused.body["errors"],
            json!([{"pointer": pointer, "code": code}]),
            "{query}"
        );
    }
    // The end itself is fine.
    let (socket, start) = subscribe(&server, &format!("{EVENTS}?after={end}"), &p.bob_token).await;
    assert_eq!(start, end);
    drop(socket);

    // A plain GET is no upgrade.
    let reply = get(&server, EVENTS, Some(&p.bob_token)).await;
    assert_eq!(reply.status, 400);
    assert_eq!(
        reply.body["errors"],
        json!([{"pointer": "/headers/upgrade", "code": "websocket_upgrade_required"}])
    );
    server.stop().await;
}

both_engines!(
    deliveries_reach_only_their_audience,
    resume_replays_exactly_the_later_events_then_live_ones,
    ephemeral_events_are_live_only,
    ended_login_sessions_close_with_4012,
    a_slow_reader_is_closed_with_4014_and_resumes_without_loss,
    shutdown_closes_sockets_with_4013,
    client_frames_other_than_pings_close_with_4002,
    refusals_before_the_upgrade_are_problems,
);
