//! The signals between nodes of spec 24 section 9 on the real databases: a
//! signal staged in a unit of work travels with its commit and never after a
//! rollback — as `NOTIFY ephemeral` inside the transaction with several nodes,
//! over the local transport with one (no `NOTIFY`); the one `LISTEN
//! ephemeral` connection of a process (application name `bothy-ephemeral`),
//! its reconnect after `pg_terminate_backend` and the reconciliation after it;
//! forged notifications; and this process's handler on a real server with a
//! real control connection (`terminal.host_close`, the reconciliation).
//!
//! Nothing sleeps: every test waits on a channel or a socket.

#![allow(clippy::unwrap_used)] // test bodies are plain fns called by the generated #[test]s

use bothy_testkit as support;
use bothy_testkit::hosts as hosts_common;
use bothy_testkit::identity as identity_common;
use bothy_testkit::terminal as terminal_common;

use std::sync::Arc;
use std::time::Duration;

use bothy_server::clock::Clock;
use bothy_server::db::{Db, DbOptions, Engine, SIGNAL_CHANNEL};
use bothy_server::terminal::signals::listener::{self, APPLICATION_NAME};
use bothy_server::terminal::signals::node::{Node, run_local};
use bothy_server::terminal::signals::{self, Decoded, Dropped, Signal, SignalHandler};
use hosts_common::*;
use sqlx::postgres::PgListener;
use support::server::TestServer;
use support::{TestDb, both_engines};
use terminal_common::host_control::HostControl;
use tokio::sync::{mpsc, watch};
use uuid::Uuid;

const NOW: i64 = 1_764_000_000_000;
const WAIT: Duration = Duration::from_secs(15);

fn host_close(n: u128) -> Signal {
    Signal::HostClose {
        host_id: Uuid::from_u128(n),
    }
}

fn notify_options() -> DbOptions {
    DbOptions {
        signals_over_notify: true,
        ..DbOptions::default()
    }
}

async fn raw_listener(t: &TestDb) -> PgListener {
    let mut listener = PgListener::connect(t.url()).await.unwrap();
    listener.listen(SIGNAL_CHANNEL).await.unwrap();
    listener
}

async fn next_notification(listener: &mut PgListener) -> String {
    tokio::time::timeout(WAIT, listener.recv())
        .await
        .expect("a notification in time")
        .unwrap()
        .payload()
        .to_owned()
}

/// A `NOTIFY ephemeral` as anyone with the database's login can send it.
async fn forge(db: &Db, payload: &str) {
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(SIGNAL_CHANNEL)
        .bind(payload.to_owned())
        .execute(db.pool())
        .await
        .unwrap();
}

// ---------------------------------------------------------------------------
// Transport

/// One node: the local transport delivers a committed unit's signals after the
/// commit, in order, and never a rolled back one's.
async fn local_transport_follows_the_commit(engine: Engine) {
    let t = TestDb::new(engine).await;
    assert!(!t.db.signals_over_notify());
    let mut received = t.db.subscribe_signals();

    let mut uow = t.db.begin(NOW).await.unwrap();
    signals::stage(&mut uow, &host_close(1));
    assert!(received.try_recv().is_err(), "nothing before the commit");
    uow.rollback().await.unwrap();
    let mut uow = t.db.begin(NOW).await.unwrap();
    signals::stage(&mut uow, &host_close(2));
    drop(uow);

    let mut uow = t.db.begin(NOW).await.unwrap();
    signals::stage(&mut uow, &host_close(3));
    signals::stage(&mut uow, &host_close(4));
    uow.commit().await.unwrap();
    signals::send(&t.db, &host_close(5)).await.unwrap();

    for n in [3, 4, 5] {
        let payload = received.recv().await.unwrap();
        assert_eq!(signals::decode(&payload), Decoded::Signal(host_close(n)));
    }
    assert!(
        received.try_recv().is_err(),
        "nothing of the rolled back units"
    );
}

/// One node on PostgreSQL sends no `NOTIFY`.
async fn one_node_sends_no_notify(_engine: Engine) {
    let t = TestDb::postgres().await;
    let mut raw = raw_listener(&t).await;
    let mut uow = t.db.begin(NOW).await.unwrap();
    signals::stage(&mut uow, &host_close(1));
    uow.commit().await.unwrap();
    signals::send(&t.db, &host_close(2)).await.unwrap();
    // A marker sent after them arrives first: they were never notified.
    forge(&t.db, "marker").await;
    assert_eq!(next_notification(&mut raw).await, "marker");
}

/// Several nodes: `NOTIFY ephemeral` in the transaction, seen by another
/// connection only after the commit and never after a rollback; nothing on
/// the local transport.
async fn notify_follows_the_commit(_engine: Engine) {
    let t = TestDb::postgres().await;
    let db = Db::connect_with(t.url(), &notify_options()).await.unwrap();
    assert!(db.signals_over_notify());
    let mut local = db.subscribe_signals();
    let mut raw = raw_listener(&t).await;

    let mut uow = db.begin(NOW).await.unwrap();
    signals::stage(&mut uow, &host_close(1));
    uow.rollback().await.unwrap();

    let mut uow = db.begin(NOW).await.unwrap();
    signals::stage(&mut uow, &host_close(2));
    let committed = uow.commit();
    let first = next_notification_after(&mut raw, committed).await;
    assert_eq!(first, host_close(2).encode());
    signals::send(&db, &host_close(3)).await.unwrap();
    assert_eq!(next_notification(&mut raw).await, host_close(3).encode());
    assert!(local.try_recv().is_err(), "no local transport with NOTIFY");
    db.close().await;
}

/// Commits, then reads the next notification (nothing may be there before).
async fn next_notification_after(
    listener: &mut PgListener,
    commit: impl std::future::Future<
        Output = Result<bothy_server::db::Committed, bothy_server::db::DbError>,
    >,
) -> String {
    commit.await.unwrap();
    next_notification(listener).await
}

// ---------------------------------------------------------------------------
// The listener

#[derive(Debug, PartialEq)]
enum Seen {
    Signal(Signal),
    Reconciled,
}

struct Recorder(mpsc::UnboundedSender<Seen>);

impl SignalHandler for Recorder {
    async fn handle(&self, signal: Signal) {
        let _ = self.0.send(Seen::Signal(signal));
    }

    async fn reconcile(&self) {
        let _ = self.0.send(Seen::Reconciled);
    }
}

async fn seen(rx: &mut mpsc::UnboundedReceiver<Seen>) -> Seen {
    tokio::time::timeout(WAIT, rx.recv())
        .await
        .expect("the handler saw something in time")
        .unwrap()
}

/// The one listener backend of the test database other than `not` (one that
/// was terminated may still be listed a moment); called after the handler saw
/// the reconciliation, which comes only after `LISTEN` succeeded.
async fn the_listener_backend(t: &TestDb, not: Option<i32>) -> i32 {
    let pids = sqlx::query_scalar::<_, i32>(
        "SELECT pid FROM pg_stat_activity WHERE application_name = $1 \
         AND datname = current_database() AND pid <> $2",
    )
    .bind(APPLICATION_NAME)
    .bind(not.unwrap_or(0))
    .fetch_all(t.db.pool())
    .await
    .unwrap();
    assert_eq!(pids.len(), 1, "exactly one listener backend: {pids:?}");
    pids[0]
}

async fn listener_delivers_reconnects_and_reconciles(_engine: Engine) {
    let t = TestDb::postgres().await;
    let sender = Db::connect_with(t.url(), &notify_options()).await.unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (stop, stopped) = watch::channel(false);
    let task = tokio::spawn(listener::run(
        t.url().to_owned(),
        Arc::new(Recorder(tx)),
        Duration::from_secs(3600),
        stopped,
    ));
    // The first LISTEN reconciles (announces the node's connections).
    assert_eq!(seen(&mut rx).await, Seen::Reconciled);
    let pid = the_listener_backend(&t, None).await;

    let mut uow = sender.begin(NOW).await.unwrap();
    signals::stage(&mut uow, &host_close(1));
    uow.commit().await.unwrap();
    assert_eq!(seen(&mut rx).await, Seen::Signal(host_close(1)));

    // Forged or foreign notifications: dropped or ignored, never handled.
    let host = Uuid::from_u128(7).to_string();
    for forged in [
        format!(r#"{{"kind":"terminal.host_reboot","host_id":"{host}"}}"#),
        format!(r#"{{"kind":"terminal.host_close","host_id":"{host}","token":"x"}}"#),
        r#"{"kind":"terminal.host_close","host_id":"not-a-uuid"}"#.to_owned(),
        r#"{"kind":"gateway.anything","n":1}"#.to_owned(),
        "not json".to_owned(),
    ] {
        forge(&sender, &forged).await;
    }
    signals::send(&sender, &host_close(2)).await.unwrap();
    assert_eq!(seen(&mut rx).await, Seen::Signal(host_close(2)));

    // The listener's backend is killed: it listens again at once and
    // reconciles only then.
    let killed: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
        .bind(pid)
        .fetch_one(t.db.pool())
        .await
        .unwrap();
    assert!(killed);
    assert_eq!(seen(&mut rx).await, Seen::Reconciled);
    let again = the_listener_backend(&t, Some(pid)).await;
    assert_ne!(again, pid);
    signals::send(&sender, &host_close(3)).await.unwrap();
    assert_eq!(seen(&mut rx).await, Seen::Signal(host_close(3)));

    stop.send(true).unwrap();
    tokio::time::timeout(WAIT, task).await.unwrap().unwrap();
    assert!(rx.try_recv().is_err(), "nothing else was handled");
    sender.close().await;
}

/// The codes of a dropped payload as `deliver` sees them (the log record names
/// them); the decoding itself is unit-tested in the module.
#[tokio::test]
async fn deliver_reports_what_it_dropped() {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let recorder = Recorder(tx);
    assert_eq!(
        signals::deliver(&recorder, r#"{"kind":"terminal.nope","host_id":"x"}"#).await,
        Decoded::Dropped(Dropped::UnknownKind)
    );
    assert_eq!(
        signals::deliver(&recorder, r#"{"kind":"other.kind"}"#).await,
        Decoded::Ignored
    );
    assert!(rx.try_recv().is_err());
    let valid = host_close(9);
    assert_eq!(
        signals::deliver(&recorder, &valid.encode()).await,
        Decoded::Signal(valid)
    );
    assert_eq!(rx.try_recv().unwrap(), Seen::Signal(valid));
}

// ---------------------------------------------------------------------------
// This process's handler on a real server

async fn set_host_state_behind_the_back(server: &TestServer, host_id: Uuid, state: &str) {
    let disabled = state == "disabled";
    sqlx::query(
        "UPDATE hosts SET state = $1, disabled_reason = $2, disabled_at = $3 WHERE id = $4",
    )
    .bind(state.to_owned())
    .bind(disabled.then_some("owner"))
    .bind(disabled.then_some(NOW))
    .bind(host_id.to_string())
    .execute(server.state.db().pool())
    .await
    .unwrap();
}

/// `terminal.host_close` alone (no `host.updated` in the log) closes the
/// control connection with the code of the state read now; a host that may
/// stay connected keeps it.
async fn host_close_signal_closes_with_the_state_code(engine: Engine) {
    let server = TestServer::start(engine).await;
    let owner = owner_person(&server, "olivia").await;
    let host = active_host(&server, &owner, "build box", None, 7, &["alice_os"], &[]).await;
    let host_id = Uuid::parse_str(&host.host_id).unwrap();
    let mut control = HostControl::connected(&server, &host.keys, host_id, &["alice_os"]).await;

    // Still active: the signal changes nothing.
    let mut uow = server.state.db().begin(NOW).await.unwrap();
    signals::stage(&mut uow, &Signal::HostClose { host_id });
    uow.commit().await.unwrap();
    control.heartbeat().await;
    assert!(server.state.control_links().is_connected(host_id));

    // Disabled behind the server's back, then only the signal.
    set_host_state_behind_the_back(&server, host_id, "disabled").await;
    let mut uow = server.state.db().begin(NOW).await.unwrap();
    signals::stage(&mut uow, &Signal::HostClose { host_id });
    uow.commit().await.unwrap();
    assert_eq!(control.closed().await, (4111, "host_disabled".to_owned()));
}

/// The reconciliation after a new LISTEN: the connection of a host no longer
/// active closes with its code, the eligible one is announced with its
/// conn_id and stays.
async fn reconciliation_closes_and_announces(engine: Engine) {
    let server = TestServer::start(engine).await;
    let owner = owner_person(&server, "olivia").await;
    let kept = active_host(&server, &owner, "kept box", None, 7, &["alice_os"], &[]).await;
    let gone = active_host(&server, &owner, "gone box", None, 8, &["bob_os"], &[]).await;
    let kept_id = Uuid::parse_str(&kept.host_id).unwrap();
    let gone_id = Uuid::parse_str(&gone.host_id).unwrap();
    let mut kept_control =
        HostControl::connected(&server, &kept.keys, kept_id, &["alice_os"]).await;
    let mut gone_control = HostControl::connected(&server, &gone.keys, gone_id, &["bob_os"]).await;

    // Re-paired elsewhere while this node missed the signal.
    sqlx::query(
        "UPDATE hosts SET state = 'pairing', noise_public_key = NULL, auth_public_jwk = NULL, \
         auth_jkt = NULL WHERE id = $1",
    )
    .bind(gone_id.to_string())
    .execute(server.state.db().pool())
    .await
    .unwrap();
    let gone_conn = server.state.local_control_links().conn_id(gone_id).unwrap();
    let kept_conn = server.state.local_control_links().conn_id(kept_id).unwrap();
    let mut announced = server.state.db().subscribe_signals();
    Node::new(server.state.clone()).reconcile().await;

    assert_eq!(gone_control.closed().await.0, 4110);
    // The announcement of the eligible connection, and the withdrawal of the
    // closed one when it ends; nothing else.
    let mut seen = vec![
        next_signal(&mut announced).await,
        next_signal(&mut announced).await,
    ];
    seen.sort_by_key(|signal| signal.kind());
    assert_eq!(
        seen,
        vec![
            Signal::HostGone {
                host_id: gone_id,
                conn_id: gone_conn
            },
            Signal::HostPresent {
                host_id: kept_id,
                conn_id: kept_conn
            },
        ]
    );
    assert!(
        announced.try_recv().is_err(),
        "only the eligible connection"
    );
    kept_control.heartbeat().await;
    assert!(server.state.control_links().is_connected(kept_id));
}

/// The local transport feeds the handler in order, and a handler that fell
/// behind reconciles instead.
async fn local_task_delivers_in_order(engine: Engine) {
    let t = TestDb::new(engine).await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (stop, stopped) = watch::channel(false);
    let task = tokio::spawn(run_local(
        t.db.subscribe_signals(),
        Arc::new(Recorder(tx)),
        stopped,
    ));
    for n in 1..=3 {
        signals::send(&t.db, &host_close(n)).await.unwrap();
    }
    for n in 1..=3 {
        assert_eq!(seen(&mut rx).await, Seen::Signal(host_close(n)));
    }
    stop.send(true).unwrap();
    tokio::time::timeout(WAIT, task).await.unwrap().unwrap();
}

// ---------------------------------------------------------------------------
// Presence across nodes

async fn next_signal(received: &mut tokio::sync::broadcast::Receiver<Arc<str>>) -> Signal {
    let payload = tokio::time::timeout(WAIT, received.recv())
        .await
        .expect("a signal in time")
        .unwrap();
    match signals::decode(&payload) {
        Decoded::Signal(signal) => signal,
        other => panic!("not a signal: {other:?}"),
    }
}

/// A control connection announces itself after its first report and after
/// each heartbeat, withdraws itself when it ends, and its own node ignores
/// both (no entry in the view).
async fn own_connection_announces_and_withdraws(engine: Engine) {
    let server = TestServer::start(engine).await;
    let owner = owner_person(&server, "olivia").await;
    let host = active_host(&server, &owner, "build box", None, 7, &["alice_os"], &[]).await;
    let host_id = Uuid::parse_str(&host.host_id).unwrap();
    let mut received = server.state.db().subscribe_signals();
    let mut control = HostControl::login(&server, &host.keys, host_id).await;
    let conn_id = server.state.local_control_links().conn_id(host_id).unwrap();
    let present = Signal::HostPresent { host_id, conn_id };
    control
        .send(&bothy_proto::control::HostMessage::Report(
            terminal_common::host_control::report(&["alice_os"]),
        ))
        .await;
    assert_eq!(
        next_signal(&mut received).await,
        present,
        "after the first report"
    );
    control.heartbeat().await;
    assert_eq!(
        next_signal(&mut received).await,
        present,
        "after a heartbeat"
    );
    assert!(received.try_recv().is_err());

    control.ws.close(None).await.unwrap();
    assert_eq!(
        next_signal(&mut received).await,
        Signal::HostGone { host_id, conn_id }
    );
    let window = presence_window(&server);
    assert!(
        !server
            .state
            .presence()
            .counts(host_id, server.clock.now_ms(), window)
    );
    assert!(!server.state.control_links().is_connected(host_id));
}

fn presence_window(server: &TestServer) -> i64 {
    bothy_server::terminal::signals::presence::window_ms(&server.state.config().terminal)
}

async fn next_presence(subscription: &mut bothy_server::events::Subscription) -> (String, bool) {
    loop {
        let delivery = tokio::time::timeout(WAIT, subscription.recv())
            .await
            .expect("an event in time")
            .expect("the tail runs");
        if let bothy_server::events::Delivery::Ephemeral(event) = delivery {
            if event.kind == bothy_server::events::EphemeralKind::HostPresenceChanged {
                return (
                    event.payload["host_id"].as_str().unwrap().to_owned(),
                    event.payload["connected"].as_bool().unwrap(),
                );
            }
        }
    }
}

/// Another node's announcements: the host counts as connected here (the
/// opening's check and `GET /hosts/{id}`) for the window after the last one,
/// with `host.presence_changed` on this node; `terminal.host_gone` and the
/// end of the window take it back.
async fn presence_of_another_node(engine: Engine) {
    let server = TestServer::start(engine).await;
    let owner = owner_person(&server, "olivia").await;
    let host = active_host(&server, &owner, "build box", None, 7, &["alice_os"], &[]).await;
    let host_id = Uuid::parse_str(&host.host_id).unwrap();
    let elsewhere = Uuid::from_u128(0x0192_f0c1_7a4e_7c3b_9d2e_1f0a_2b3c_4d5e);
    let window = presence_window(&server);
    let events = server.state.events();
    let mut subscription = events.subscribe_from(events.position());
    let connected = |server: &TestServer| server.state.control_links().is_connected(host_id);
    assert!(!connected(&server));

    let present = Signal::HostPresent {
        host_id,
        conn_id: elsewhere,
    };
    signals::send(server.state.db(), &present).await.unwrap();
    assert_eq!(
        next_presence(&mut subscription).await,
        (host.host_id.clone(), true)
    );
    assert!(connected(&server));
    assert_eq!(
        get_host(&server, owner.token(), &host.host_id).await.body["connected"],
        true
    );
    // Renewed within the window: no new event; counting up to the window
    // after the last announcement, inclusive.
    server
        .clock
        .advance(Duration::from_millis(u64::try_from(window).unwrap()));
    signals::send(server.state.db(), &present).await.unwrap();
    // The handler takes the signals in order: once a marker host appeared,
    // the renewal was handled.
    let marker = Uuid::from_u128(0x0192_f0c1_7a4e_7c3b_9d2e_1f0a_2b3c_4d5f);
    let marker_present = Signal::HostPresent {
        host_id: marker,
        conn_id: elsewhere,
    };
    signals::send(server.state.db(), &marker_present)
        .await
        .unwrap();
    assert_eq!(
        next_presence(&mut subscription).await,
        (marker.to_string(), true)
    );
    server
        .clock
        .advance(Duration::from_millis(u64::try_from(window).unwrap()));
    assert!(connected(&server));
    // One past the window: the marker (older) and the host expire.
    server.clock.advance(Duration::from_millis(1));
    let mut expired = vec![
        next_presence(&mut subscription).await,
        next_presence(&mut subscription).await,
    ];
    expired.sort();
    let mut expected = vec![(host.host_id.clone(), false), (marker.to_string(), false)];
    expected.sort();
    assert_eq!(expired, expected);
    assert!(!connected(&server));

    // Announced again, then withdrawn.
    signals::send(server.state.db(), &present).await.unwrap();
    assert_eq!(
        next_presence(&mut subscription).await,
        (host.host_id.clone(), true)
    );
    signals::send(
        server.state.db(),
        &Signal::HostGone {
            host_id,
            conn_id: elsewhere,
        },
    )
    .await
    .unwrap();
    assert_eq!(
        next_presence(&mut subscription).await,
        (host.host_id.clone(), false)
    );
    assert!(!connected(&server));
}

// ---------------------------------------------------------------------------
// 3.4 across nodes: rules b and c (the other node's announcement sent by hand)

fn conn_id_at(ms: i64) -> Uuid {
    bothy_proto::ids::uuid_v7(u64::try_from(ms).unwrap()).unwrap()
}

/// Rule b, the older connection here does not answer the probe: 4009, the
/// allow entry of a replaced connection, and its withdrawal.
async fn rule_b_dead_older_connection_is_replaced(engine: Engine) {
    let server =
        TestServer::start_with(engine, "terminal:\n  host_duplicate_probe_timeout: 300ms\n").await;
    let owner = owner_person(&server, "olivia").await;
    let host = active_host(&server, &owner, "build box", None, 7, &["alice_os"], &[]).await;
    let host_id = Uuid::parse_str(&host.host_id).unwrap();
    let mut older = HostControl::connected(&server, &host.keys, host_id, &["alice_os"]).await;
    let own = server.state.local_control_links().conn_id(host_id).unwrap();
    let mut received = server.state.db().subscribe_signals();
    // Another node accepted a newer connection of the host; the older one
    // here stops reading, so its pong never comes.
    let newer = conn_id_at(server.clock.now_ms() + 60_000);
    signals::send(
        server.state.db(),
        &Signal::HostPresent {
            host_id,
            conn_id: newer,
        },
    )
    .await
    .unwrap();
    assert_eq!(
        next_signal(&mut received).await,
        Signal::HostPresent {
            host_id,
            conn_id: newer
        }
    );
    assert_eq!(
        next_signal(&mut received).await,
        Signal::HostGone {
            host_id,
            conn_id: own
        },
        "the replaced connection withdraws itself"
    );
    assert_eq!(older.closed().await.0, 4009);
    let allows = identity_common::audit_of(&server, "host.connect", "allow").await;
    let replaced: Vec<_> = allows
        .iter()
        .filter(|row| {
            row.details.get("code") == Some(&serde_json::json!("stale_connection_replaced"))
        })
        .collect();
    assert_eq!(replaced.len(), 1);
    // The host stays active and counts through the other node's entry.
    let read = get_host(&server, owner.token(), &host.host_id).await.body;
    assert_eq!(read["state"], "active");
    assert_eq!(read["connected"], true);
}

/// Rule b, the older connection here answers: copied keys. The verdict
/// disables the host with `duplicate_connection`, audits it, and the older
/// connection closes with 4112.
async fn rule_b_live_older_connection_disables(engine: Engine) {
    let server = TestServer::start(engine).await;
    let owner = owner_person(&server, "olivia").await;
    let host = active_host(&server, &owner, "build box", None, 7, &["alice_os"], &[]).await;
    let host_id = Uuid::parse_str(&host.host_id).unwrap();
    let older = HostControl::connected(&server, &host.keys, host_id, &["alice_os"]).await;
    // It keeps reading, so it answers pings.
    let reader = tokio::spawn(async move {
        let mut older = older;
        older.closed().await
    });
    let newer = conn_id_at(server.clock.now_ms() + 60_000);
    signals::send(
        server.state.db(),
        &Signal::HostPresent {
            host_id,
            conn_id: newer,
        },
    )
    .await
    .unwrap();
    assert_eq!(reader.await.unwrap().0, 4112);
    let read = get_host(&server, owner.token(), &host.host_id).await.body;
    assert_eq!(read["state"], "disabled");
    assert_eq!(read["disabled_reason"], "duplicate_connection");
    let denials = identity_common::audit_of(&server, "host.connect", "deny").await;
    assert_eq!(
        denials
            .iter()
            .filter(
                |row| row.details.get("code") == Some(&serde_json::json!("duplicate_connection"))
            )
            .count(),
        1
    );
}

/// Rule c: an announcement of an older connection elsewhere while this node
/// holds a newer one: this node announces its own at once (and probes
/// nothing: its connection stays).
async fn rule_c_newer_connection_announces_itself(engine: Engine) {
    let server = TestServer::start(engine).await;
    let owner = owner_person(&server, "olivia").await;
    let host = active_host(&server, &owner, "build box", None, 7, &["alice_os"], &[]).await;
    let host_id = Uuid::parse_str(&host.host_id).unwrap();
    let mut control = HostControl::connected(&server, &host.keys, host_id, &["alice_os"]).await;
    let own = server.state.local_control_links().conn_id(host_id).unwrap();
    let mut received = server.state.db().subscribe_signals();
    let older = conn_id_at(server.clock.now_ms() - 60_000);
    signals::send(
        server.state.db(),
        &Signal::HostPresent {
            host_id,
            conn_id: older,
        },
    )
    .await
    .unwrap();
    assert_eq!(
        next_signal(&mut received).await,
        Signal::HostPresent {
            host_id,
            conn_id: older
        }
    );
    assert_eq!(
        next_signal(&mut received).await,
        Signal::HostPresent {
            host_id,
            conn_id: own
        },
        "rule c: the newer one answers with its own announcement"
    );
    control.heartbeat().await;
    assert_eq!(
        server.state.local_control_links().conn_id(host_id),
        Some(own)
    );
}

both_engines!(
    local_transport_follows_the_commit,
    local_task_delivers_in_order,
    host_close_signal_closes_with_the_state_code,
    reconciliation_closes_and_announces,
    own_connection_announces_and_withdraws,
    presence_of_another_node,
    rule_b_dead_older_connection_is_replaced,
    rule_b_live_older_connection_disables,
    rule_c_newer_connection_announces_itself,
);

mod postgres_only {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_node_sends_no_notify() {
        super::one_node_sends_no_notify(Engine::Postgres).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn notify_follows_the_commit() {
        super::notify_follows_the_commit(Engine::Postgres).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn listener_delivers_reconnects_and_reconciles() {
        super::listener_delivers_reconnects_and_reconciles(Engine::Postgres).await;
    }
}
