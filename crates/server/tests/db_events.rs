//! The event log on both engines: positions, the log tail and its wake-ups,
//! subscriptions that resume without gaps or duplicates, ephemeral events.

// The bodies run once per engine through `both_engines!`, so clippy does not see
// them as tests (only the generated wrappers are `#[test]`); unwrap is the test
// idiom here as in every `#[test]`.
#![allow(clippy::unwrap_used)]

use bothy_testkit as support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use bothy_server::db::{Db, Engine};
use bothy_server::events::{
    self, Audience, Delivery, DurableEvent, EVENTS_LOCK_KEY, EphemeralEvent, EphemeralKind,
    EventKind, EventPosition, EventsError, LogTail, StoredEvent, Subscription, TailConfig,
};
use bothy_testkit::eventually;
use serde_json::{Map, Value, json};
use support::{TestDb, both_engines};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use uuid::Uuid;

const NOW: i64 = 1_764_000_000_000;
/// Long enough that a test passing within it did not rely on the poll.
const NO_POLL: Duration = Duration::from_secs(3600);
const WAIT: Duration = Duration::from_secs(15);

fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => panic!("not an object"),
    }
}

fn session_event(n: i64) -> DurableEvent {
    DurableEvent::new(
        EventKind::TerminalSessionChanged,
        Audience::Person(Uuid::from_u128(1)),
        object(json!({"n": n})),
    )
}

fn presence(connected: bool) -> EphemeralEvent {
    EphemeralEvent::new(
        EphemeralKind::HostPresenceChanged,
        Audience::HostReaders(Uuid::from_u128(2)),
        object(json!({"host_id": Uuid::from_u128(2).to_string(), "connected": connected})),
    )
}

struct Tail {
    tail: LogTail,
    task: JoinHandle<()>,
    stop: watch::Sender<bool>,
}

async fn start_tail(db: &Db, poll_interval: Duration, subscriber_capacity: usize) -> Tail {
    let (stop, shutdown) = watch::channel(false);
    let config = TailConfig {
        poll_interval,
        subscriber_capacity,
        ..TailConfig::default()
    };
    let (tail, task) = LogTail::start(db.clone(), config, shutdown).await.unwrap();
    Tail { tail, task, stop }
}

/// Commits `count` units of work with one event each; returns the positions.
async fn commit_each(db: &Db, count: i64) -> Vec<EventPosition> {
    let mut positions = Vec::new();
    for n in 0..count {
        let mut uow = db.begin(NOW + n).await.unwrap();
        uow.event(session_event(n));
        positions.extend(uow.commit().await.unwrap().event_positions);
    }
    positions
}

async fn next(subscription: &mut Subscription) -> Delivery {
    tokio::time::timeout(WAIT, subscription.recv())
        .await
        .expect("no delivery in time")
        .expect("subscription failed")
}

async fn next_durable(subscription: &mut Subscription) -> Arc<StoredEvent> {
    match next(subscription).await {
        Delivery::Durable(event) => event,
        other => panic!("expected a durable event, got {other:?}"),
    }
}

async fn assert_quiet(subscription: &mut Subscription) {
    let got = tokio::time::timeout(Duration::from_millis(300), subscription.recv()).await;
    assert!(got.is_err(), "unexpected delivery: {got:?}");
}

async fn positions_strictly_increase(engine: Engine) {
    let t = TestDb::new(engine).await;
    assert_eq!(events::last_position(&t.db).await.unwrap(), 0);
    let mut all = Vec::new();
    for count in 1..=3 {
        let mut uow = t.db.begin(NOW).await.unwrap();
        for n in 0..count {
            uow.event(session_event(n));
        }
        let committed = uow.commit().await.unwrap();
        assert_eq!(committed.event_positions.len(), count as usize);
        all.extend(committed.event_positions);
    }
    assert!(all.windows(2).all(|w| w[0] < w[1]), "{all:?}");
    assert_eq!(
        events::last_position(&t.db).await.unwrap(),
        *all.last().unwrap()
    );
    // A rolled back unit of work leaves no position behind that a later one
    // could reuse below the ones already handed out.
    let mut uow = t.db.begin(NOW).await.unwrap();
    uow.event(session_event(99));
    drop(uow);
    let later = commit_each(&t.db, 1).await;
    assert!(later[0] > *all.last().unwrap());
}

async fn a_subscriber_resumes_after_a_position(engine: Engine) {
    let t = TestDb::new(engine).await;
    let before = commit_each(&t.db, 5).await;
    let tail = start_tail(&t.db, NO_POLL, 64).await;
    assert_eq!(tail.tail.position(), before[4]);

    // Resume after the second: the other three are replayed from the table...
    let mut subscription = tail.tail.subscribe_from(before[1]);
    for expected in &before[2..] {
        let event = next_durable(&mut subscription).await;
        assert_eq!(event.position, *expected);
        assert_eq!(event.kind, EventKind::TerminalSessionChanged);
        assert_eq!(event.audience, Audience::Person(Uuid::from_u128(1)));
        assert_eq!(event.at, NOW + (event.payload["n"].as_i64().unwrap()));
    }
    assert_eq!(subscription.position(), before[4]);
    // ...then later commits arrive live, woken by the local commit (no poll).
    let live = commit_each(&t.db, 2).await;
    for expected in &live {
        assert_eq!(next_durable(&mut subscription).await.position, *expected);
    }
    assert_quiet(&mut subscription).await;
    // Resuming at the end replays nothing and still gets what comes next.
    let mut at_end = tail.tail.subscribe_from(live[1]);
    let more = commit_each(&t.db, 1).await;
    assert_eq!(next_durable(&mut at_end).await.position, more[0]);
    assert_eq!(next_durable(&mut subscription).await.position, more[0]);
}

/// Writers on two handles (two processes) commit concurrently while
/// subscribers replay and follow: each sees exactly the committed positions
/// after its start, in order, once.
async fn concurrent_commits_reach_subscribers_without_gaps(engine: Engine) {
    const WRITERS: usize = 4;
    const COMMITS: i64 = 25;
    let t = TestDb::new(engine).await;
    let other = t.connect_again().await;
    let seed = commit_each(&t.db, 3).await;
    // SQLite has no NOTIFY: commits of the other handle are found by the poll.
    let poll = match engine {
        Engine::Sqlite => Duration::from_millis(20),
        Engine::Postgres => NO_POLL,
    };
    let tail = start_tail(&t.db, poll, 16).await;
    let mut from_start = tail.tail.subscribe_from(0);

    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let db = if w % 2 == 0 {
            t.db.clone()
        } else {
            other.clone()
        };
        writers.push(tokio::spawn(async move {
            let mut positions = Vec::new();
            for n in 0..COMMITS {
                let mut uow = db.begin(NOW + n).await.unwrap();
                uow.event(session_event(n));
                if n % 3 == 0 {
                    uow.event(session_event(n));
                }
                positions.extend(uow.commit().await.unwrap().event_positions);
                tokio::task::yield_now().await;
            }
            positions
        }));
    }
    // A second subscriber joins in the middle, after a position the first saw.
    let mut seen_first = Vec::new();
    for _ in 0..20 {
        seen_first.push(next_durable(&mut from_start).await.position);
    }
    let join_at = *seen_first.last().unwrap();
    let mut from_middle = tail.tail.subscribe_from(join_at);

    let mut committed: BTreeSet<EventPosition> = seed.iter().copied().collect();
    for writer in writers {
        committed.extend(writer.await.unwrap());
    }
    let total = committed.len();
    while seen_first.len() < total {
        seen_first.push(next_durable(&mut from_start).await.position);
    }
    let expected_middle: Vec<EventPosition> =
        committed.iter().copied().filter(|p| *p > join_at).collect();
    let mut seen_middle = Vec::new();
    while seen_middle.len() < expected_middle.len() {
        seen_middle.push(next_durable(&mut from_middle).await.position);
    }
    assert_eq!(seen_first, committed.iter().copied().collect::<Vec<_>>());
    assert_eq!(seen_middle, expected_middle);
    assert_quiet(&mut from_start).await;
    assert_quiet(&mut from_middle).await;
    other.close().await;
}

/// A commit of another process reaches the tail: on PostgreSQL through
/// LISTEN/NOTIFY (the poll is off), on SQLite through the poll.
async fn commits_of_another_process_wake_the_tail(engine: Engine) {
    let t = TestDb::new(engine).await;
    let poll = match engine {
        Engine::Sqlite => Duration::from_millis(50),
        Engine::Postgres => NO_POLL,
    };
    let tail = start_tail(&t.db, poll, 64).await;
    let mut subscription = tail.tail.subscribe_from(0);
    let other = t.connect_again().await;
    // The listener connects in the background; commit until one is seen live,
    // then once more to be sure the wake-up path, not a catch-up read, did it.
    let first = commit_each(&other, 1).await;
    assert_eq!(next_durable(&mut subscription).await.position, first[0]);
    for _ in 0..3 {
        let position = commit_each(&other, 1).await[0];
        let started = std::time::Instant::now();
        assert_eq!(next_durable(&mut subscription).await.position, position);
        assert!(started.elapsed() < Duration::from_secs(5));
    }
    other.close().await;
}

async fn ephemeral_events_are_live_and_never_stored(engine: Engine) {
    let t = TestDb::new(engine).await;
    let tail = start_tail(&t.db, NO_POLL, 64).await;
    let mut subscription = tail.tail.subscribe_from(0);

    // Inside a unit of work: published after the commit, not before.
    let mut uow = t.db.begin(NOW).await.unwrap();
    uow.ephemeral(presence(true));
    assert_quiet(&mut subscription).await;
    uow.commit().await.unwrap();
    match next(&mut subscription).await {
        Delivery::Ephemeral(event) => {
            assert_eq!(event.kind, EphemeralKind::HostPresenceChanged);
            assert_eq!(event.payload["connected"], json!(true));
        }
        other => panic!("{other:?}"),
    }
    // Outside a unit of work: at once.
    t.db.publish_ephemeral(presence(false));
    match next(&mut subscription).await {
        Delivery::Ephemeral(event) => assert_eq!(event.payload["connected"], json!(false)),
        other => panic!("{other:?}"),
    }
    // A rolled back unit of work publishes nothing.
    let mut uow = t.db.begin(NOW).await.unwrap();
    uow.ephemeral(presence(true));
    drop(uow);
    assert_quiet(&mut subscription).await;

    assert_eq!(t.count("events").await, 0);
    assert_eq!(events::last_position(&t.db).await.unwrap(), 0);
    // Durable and ephemeral together: only the durable one is in the table.
    let mut uow = t.db.begin(NOW).await.unwrap();
    uow.ephemeral(presence(true));
    uow.event(session_event(1));
    uow.commit().await.unwrap();
    assert_eq!(t.count("events").await, 1);
    let kinds: Vec<String> = sqlx::query_scalar("SELECT kind FROM events")
        .fetch_all(t.db.pool())
        .await
        .unwrap();
    assert_eq!(kinds, ["terminal_session.changed"]);
    let mut got = [next(&mut subscription).await, next(&mut subscription).await];
    got.sort_by_key(|d| matches!(d, Delivery::Ephemeral(_)));
    assert!(matches!(&got[0], Delivery::Durable(e) if e.position == 1));
    assert!(matches!(&got[1], Delivery::Ephemeral(_)));
}

async fn a_lagging_subscriber_rereads_from_the_table(engine: Engine) {
    let t = TestDb::new(engine).await;
    // A live buffer of 2, and 30 commits while the subscriber reads nothing.
    let tail = start_tail(&t.db, NO_POLL, 2).await;
    let mut subscription = tail.tail.subscribe_from(0);
    // First one event, so the subscription has finished its replay and is live.
    let first = commit_each(&t.db, 1).await;
    assert_eq!(next_durable(&mut subscription).await.position, first[0]);
    let positions = commit_each(&t.db, 30).await;
    // Let the tail hand them all out (and overflow the buffer).
    let last = positions[29];
    eventually("the tail to hand out every commit", WAIT, || {
        std::future::ready((tail.tail.position() >= last).then_some(()))
    })
    .await;
    let mut seen = Vec::new();
    for _ in 0..30 {
        seen.push(next_durable(&mut subscription).await.position);
    }
    assert_eq!(seen, positions);
    // And live again afterwards.
    let more = commit_each(&t.db, 1).await;
    assert_eq!(next_durable(&mut subscription).await.position, more[0]);
    assert_quiet(&mut subscription).await;
}

async fn an_event_that_does_not_decode_is_passed_over(engine: Engine) {
    let t = TestDb::new(engine).await;
    let tail = start_tail(&t.db, Duration::from_millis(20), 64).await;
    let mut subscription = tail.tail.subscribe_from(0);
    // A kind from a newer binary (rolling upgrade), written behind our back.
    sqlx::query(
        "INSERT INTO events (kind, audience_kind, audience_id, payload, at) \
         VALUES ('host.renamed_in_v9', 'owners', NULL, '{}', $1)",
    )
    .bind(NOW)
    .execute(t.db.pool())
    .await
    .unwrap();
    let valid = commit_each(&t.db, 1).await;
    let event = next_durable(&mut subscription).await;
    assert_eq!(event.position, valid[0]);
    assert_eq!(event.position, 2);
    // A replay passes it over the same way.
    let mut replay = tail.tail.subscribe_from(0);
    assert_eq!(next_durable(&mut replay).await.position, 2);
    assert_quiet(&mut replay).await;
}

async fn the_tail_stops_on_shutdown(engine: Engine) {
    let t = TestDb::new(engine).await;
    let tail = start_tail(&t.db, NO_POLL, 64).await;
    let mut subscription = tail.tail.subscribe_from(0);
    let position = commit_each(&t.db, 1).await[0];
    assert_eq!(next_durable(&mut subscription).await.position, position);
    tail.stop.send(true).unwrap();
    tokio::time::timeout(WAIT, tail.task)
        .await
        .expect("the tail did not stop")
        .unwrap();
    let ended = tokio::time::timeout(WAIT, subscription.recv())
        .await
        .unwrap();
    assert!(matches!(ended, Err(EventsError::TailStopped)), "{ended:?}");
    let mut late = tail.tail.subscribe_from(0);
    let ended = tokio::time::timeout(WAIT, late.recv()).await.unwrap();
    // A late subscriber still gets the replay, then learns that the tail ended.
    assert!(matches!(ended, Ok(Delivery::Durable(ref e)) if e.position == position));
    let ended = tokio::time::timeout(WAIT, late.recv()).await.unwrap();
    assert!(matches!(ended, Err(EventsError::TailStopped)), "{ended:?}");
}

both_engines!(
    positions_strictly_increase,
    a_subscriber_resumes_after_a_position,
    concurrent_commits_reach_subscribers_without_gaps,
    commits_of_another_process_wake_the_tail,
    ephemeral_events_are_live_and_never_stored,
    a_lagging_subscriber_rereads_from_the_table,
    an_event_that_does_not_decode_is_passed_over,
    the_tail_stops_on_shutdown,
);

/// PostgreSQL: a unit of work that writes events takes the writers' advisory
/// lock at commit; one without events does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_event_writers_serialise_on_the_advisory_lock() {
    let t = TestDb::postgres().await;
    let mut holder = t.db.pool().begin().await.unwrap();
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(EVENTS_LOCK_KEY)
        .execute(&mut *holder)
        .await
        .unwrap();

    // Without events: not held up.
    let mut plain = t.db.begin(NOW).await.unwrap();
    plain.audit(bothy_server::audit::AuditEntry::allow(
        bothy_server::audit::AuditAction::AuthLogin,
        bothy_server::audit::Actor::System,
    ));
    tokio::time::timeout(Duration::from_secs(5), plain.commit())
        .await
        .expect("a unit without events waited for the event lock")
        .unwrap();

    // With events: waits until the lock is free.
    let db = t.db.clone();
    let writer = tokio::spawn(async move {
        let mut uow = db.begin(NOW).await.unwrap();
        uow.event(session_event(1));
        uow.commit().await.unwrap()
    });
    // Wait for the event itself: a backend waiting on the advisory lock.
    // A writer that did not take the lock commits instead, and the wait fails.
    let waiting = "SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted \
                   AND database = (SELECT oid FROM pg_database WHERE datname = current_database())";
    tokio::time::timeout(WAIT, async {
        loop {
            let waiters: i64 = sqlx::query_scalar(waiting)
                .fetch_one(t.db.pool())
                .await
                .unwrap();
            if waiters > 0 {
                break;
            }
            assert!(
                !writer.is_finished(),
                "the event writer did not take the lock"
            );
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("no writer waits on the event lock");
    assert!(!writer.is_finished());
    assert_eq!(t.count("events").await, 0);
    holder.commit().await.unwrap();
    let committed = tokio::time::timeout(WAIT, writer).await.unwrap().unwrap();
    assert_eq!(committed.event_positions.len(), 1);
}
