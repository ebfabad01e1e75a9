//! The identity revocations of 8.3 end terminal sessions in their own unit of
//! work (M2-46: `identity.SessionEnded`, `identity.DeviceRevoked`,
//! `authorize.AccessChanged` for a removed owner role), on both engines,
//! through the real server and its real routes: the removal of the owner role
//! (`access_revoked` where SR10 or a missing grant no longer allows the
//! session; never the last active owner), logout (`logout`),
//! revoking a login session (`session_revoked`), revoking a device
//! (`device_revoked`, also a session whose current device it is under another
//! login session), disabling a person (`user_disabled`), resetting the second
//! factor (`session_revoked`), and a login session that only passed
//! `expires_at`, which the job `terminal.sweep` ends (`session_revoked`, 6.3),
//! with the boundary exact. Each end writes `terminal.terminate` (actor system,
//! every detail literal) and `terminal_session.changed` to the person; sessions
//! of other login sessions and sessions closed before stay as they were.
//!
//! The sessions are rows inserted as the terminal module writes them (the open
//! route is built at the same time in issue 5, and the relay closes the
//! connections from the log tail); no connection is involved here.

#![allow(clippy::unwrap_used)] // test bodies are plain fns called by the generated #[test]s

use bothy_testkit as support;
use bothy_testkit::hosts as hosts_common;
use bothy_testkit::identity as identity_common;

use bothy_server::clock::Clock;
use bothy_server::db::Engine;
use bothy_server::identity::admin;
use bothy_server::terminal::sweep;
use hosts_common::*;
use identity_common::{Session, audit_rows, post, post_empty};
use serde_json::{Value, json};
use sqlx::Row;
use support::both_engines;
use support::server::TestServer;

const MINUTE: i64 = 60_000;

/// A server, the owner alice (device 1) with a second login from device 2,
/// the member bob (device 3), and an active host where both have their own
/// session user.
struct Fixture {
    server: TestServer,
    alice: Person,
    alice_two: Session,
    bob: Person,
    host_id: String,
}

async fn fixture(engine: Engine) -> Fixture {
    // The job's own passes stay out of the way; the tests call run_once.
    let server = TestServer::start_with(engine, "terminal:\n  sweep_interval: 1h\n").await;
    let alice = owner_person(&server, "alice").await;
    let alice_two = alice.enrolled.login(&server, 2).await;
    let bob = invited_person(&server, &alice, "bob", "member", 3).await;
    let host = active_host(
        &server,
        &alice,
        "box",
        None,
        7,
        &["alice_os", "bob_os"],
        &[(alice.id(), "alice_os"), (bob.id(), "bob_os")],
    )
    .await;
    Fixture {
        server,
        alice,
        alice_two,
        bob,
        host_id: host.host_id,
    }
}

/// A session row: its state and whose login session and device it has.
struct NewRow<'a> {
    state: &'a str,
    person_id: &'a str,
    login_session_id: &'a str,
    device_id: &'a str,
}

/// Inserts a session as the terminal module writes it (bytes 11 in, 22 out,
/// created now, closed ones with `client_closed`); its ID.
async fn insert(f: &Fixture, row: NewRow<'_>) -> String {
    insert_at(&f.server, &f.host_id, row).await
}

/// [`insert`] on the host `host_id`.
async fn insert_at(server: &TestServer, host_id: &str, row: NewRow<'_>) -> String {
    let now = server.clock.now_ms();
    let id = bothy_proto::ids::uuid_v7(u64::try_from(now).unwrap())
        .unwrap()
        .hyphenated()
        .to_string();
    let jti = bothy_proto::ids::uuid_v7(u64::try_from(now).unwrap())
        .unwrap()
        .hyphenated()
        .to_string();
    let pool = server.state.db().pool();
    let assignment: String = sqlx::query_scalar(
        "SELECT id FROM host_session_users WHERE host_id = $1 AND person_id = $2 \
         AND ended_at IS NULL",
    )
    .bind(host_id.to_owned())
    .bind(row.person_id.to_owned())
    .fetch_one(pool)
    .await
    .unwrap();
    let closed = row.state == "closed";
    let started = matches!(row.state, "active" | "detached" | "closed").then_some(now);
    sqlx::query(
        "INSERT INTO terminal_sessions (id, host_id, person_id, login_session_id, device_id, \
         host_session_user_id, profile, state, close_reason, close_detail, created_at, \
         started_at, ended_at, last_input_at, bytes_in, bytes_out, version, token_jti, \
         detached_at) \
         VALUES ($1, $2, $3, $4, $5, $6, 'shell', $7, $8, NULL, $9, $10, $11, NULL, 11, 22, 1, \
         $12, $13)",
    )
    .bind(id.clone())
    .bind(host_id.to_owned())
    .bind(row.person_id.to_owned())
    .bind(row.login_session_id.to_owned())
    .bind(row.device_id.to_owned())
    .bind(assignment)
    .bind(row.state.to_owned())
    .bind(closed.then(|| "client_closed".to_owned()))
    .bind(now)
    .bind(started)
    .bind(closed.then_some(now))
    .bind(jti)
    .bind((row.state == "detached").then_some(now))
    .execute(pool)
    .await
    .unwrap();
    id
}

/// Opening, active and detached sessions of one login session and device.
async fn three(f: &Fixture, person_id: &str, session: &Session) -> Vec<String> {
    let mut ids = Vec::new();
    for state in ["opening", "active", "detached"] {
        ids.push(
            insert(
                f,
                NewRow {
                    state,
                    person_id,
                    login_session_id: &session.login_session_id,
                    device_id: &session.device_id,
                },
            )
            .await,
        );
    }
    ids
}

/// `(state, close_reason, close_detail, version)` of a session.
async fn stored(server: &TestServer, id: &str) -> (String, Option<String>, Option<String>, i64) {
    let row = sqlx::query(
        "SELECT state, close_reason, close_detail, version FROM terminal_sessions WHERE id = $1",
    )
    .bind(id.to_owned())
    .fetch_one(server.state.db().pool())
    .await
    .unwrap();
    (
        row.get("state"),
        row.get("close_reason"),
        row.get("close_detail"),
        row.get("version"),
    )
}

/// The `terminal_session.changed` payloads of a session with their audience.
async fn changed_events(server: &TestServer, id: &str) -> Vec<(String, Option<String>, Value)> {
    sqlx::query(
        "SELECT audience_kind, audience_id, payload FROM events \
         WHERE kind = 'terminal_session.changed' ORDER BY position",
    )
    .fetch_all(server.state.db().pool())
    .await
    .unwrap()
    .iter()
    .map(|row| {
        (
            row.get::<String, _>("audience_kind"),
            row.get::<Option<String>, _>("audience_id"),
            serde_json::from_str::<Value>(&row.get::<String, _>("payload")).unwrap(),
        )
    })
    .filter(|(_, _, payload)| payload["session_id"] == id)
    .collect()
}

/// Asserts `id` is closed with `reason` (no detail), with exactly one
/// terminal.terminate (actor system, target the session, every detail
/// literal: created at `created_at`, ended at `ended_at`) and one
/// `terminal_session.changed` to `person_id`.
async fn assert_ended(
    f: &Fixture,
    id: &str,
    person_id: &str,
    reason: &str,
    created_at: i64,
    ended_at: i64,
) {
    let server = &f.server;
    assert_eq!(
        stored(server, id).await,
        ("closed".to_owned(), Some(reason.to_owned()), None, 2),
        "session {id}"
    );
    let terminate: Vec<_> = audit_rows(server)
        .await
        .into_iter()
        .filter(|row| row.action == "terminal.terminate" && row.details["session_id"] == id)
        .collect();
    assert_eq!(terminate.len(), 1, "{:?}", terminate);
    let entry = &terminate[0];
    assert_eq!(entry.decision, "allow");
    assert_eq!(entry.actor_kind, "system");
    assert_eq!(entry.actor_id, None);
    assert_eq!(entry.target_kind.as_deref(), Some("terminal_session"));
    assert_eq!(entry.target_id.as_deref(), Some(id));
    assert_eq!(
        entry.details,
        json!({
            "session_id": id,
            "close_reason": reason,
            "bytes_in": 11,
            "bytes_out": 22,
            "duration_ms": ended_at - created_at,
        })
    );
    let events = changed_events(server, id).await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].0, "person");
    assert_eq!(events[0].1.as_deref(), Some(person_id));
    assert_eq!(
        events[0].2,
        json!({
            "session_id": id,
            "host_id": f.host_id,
            "state": "closed",
            "close_reason": reason,
        })
    );
}

/// Asserts `id` was not touched: `state` as inserted, version 1 (closed:
/// `client_closed`), no terminal.terminate, no event.
async fn assert_untouched(f: &Fixture, id: &str, state: &str) {
    let server = &f.server;
    let reason = (state == "closed").then(|| "client_closed".to_owned());
    assert_eq!(
        stored(server, id).await,
        (state.to_owned(), reason, None, 1),
        "session {id}"
    );
    assert!(
        audit_rows(server)
            .await
            .iter()
            .all(|row| !(row.action == "terminal.terminate" && row.details["session_id"] == id)),
        "no terminal.terminate for {id}"
    );
    assert!(
        changed_events(server, id).await.is_empty(),
        "no event for {id}"
    );
}

fn closed_row<'a>(person_id: &'a str, session: &'a Session) -> NewRow<'a> {
    NewRow {
        state: "closed",
        person_id,
        login_session_id: &session.login_session_id,
        device_id: &session.device_id,
    }
}

async fn logout_ends_the_sessions_of_that_login_session(engine: Engine) {
    let f = fixture(engine).await;
    let created = f.server.clock.now_ms();
    let ended = three(&f, f.alice.id(), &f.alice.session).await;
    let closed = insert(&f, closed_row(f.alice.id(), &f.alice.session)).await;
    let other = three(&f, f.alice.id(), &f.alice_two).await;
    f.server.clock.advance(std::time::Duration::from_secs(5));
    let at = f.server.clock.now_ms();

    let reply = post_empty(&f.server, "/api/v1/auth/logout", f.alice.token()).await;
    assert_eq!(reply.status, 204, "{:?}", reply.body);

    for id in &ended {
        assert_ended(&f, id, f.alice.id(), "logout", created, at).await;
    }
    assert_untouched(&f, &closed, "closed").await;
    for (id, state) in other.iter().zip(["opening", "active", "detached"]) {
        assert_untouched(&f, id, state).await;
    }
    // Logging out again is refused (the token is gone) and changes nothing.
    let again = post_empty(&f.server, "/api/v1/auth/logout", f.alice.token()).await;
    assert_eq!(again.status, 401);
    for id in &ended {
        assert_ended(&f, id, f.alice.id(), "logout", created, at).await;
    }
}

async fn revoking_a_login_session_ends_its_sessions(engine: Engine) {
    let f = fixture(engine).await;
    let created = f.server.clock.now_ms();
    let ended = three(&f, f.alice.id(), &f.alice_two).await;
    let closed = insert(&f, closed_row(f.alice.id(), &f.alice_two)).await;
    let kept = three(&f, f.alice.id(), &f.alice.session).await;
    f.server.clock.advance(std::time::Duration::from_secs(7));
    let at = f.server.clock.now_ms();

    let path = format!(
        "/api/v1/auth/sessions/{}/revoke",
        f.alice_two.login_session_id
    );
    let reply = post_empty(&f.server, &path, f.alice.token()).await;
    assert!(reply.status.is_success(), "{:?}", reply.body);

    for id in &ended {
        assert_ended(&f, id, f.alice.id(), "session_revoked", created, at).await;
    }
    assert_untouched(&f, &closed, "closed").await;
    for (id, state) in kept.iter().zip(["opening", "active", "detached"]) {
        assert_untouched(&f, id, state).await;
    }
}

async fn revoking_a_device_ends_its_sessions(engine: Engine) {
    let f = fixture(engine).await;
    let created = f.server.clock.now_ms();
    // Sessions of the login session on device 2, and one of the login session
    // on device 1 whose current device is device 2 (as after an attach).
    let mut ended = three(&f, f.alice.id(), &f.alice_two).await;
    ended.push(
        insert(
            &f,
            NewRow {
                state: "active",
                person_id: f.alice.id(),
                login_session_id: &f.alice.session.login_session_id,
                device_id: &f.alice_two.device_id,
            },
        )
        .await,
    );
    let closed = insert(&f, closed_row(f.alice.id(), &f.alice_two)).await;
    let kept = three(&f, f.alice.id(), &f.alice.session).await;
    f.server.clock.advance(std::time::Duration::from_secs(9));
    let at = f.server.clock.now_ms();

    let path = format!("/api/v1/devices/{}/revoke", f.alice_two.device_id);
    let reply = post_empty(&f.server, &path, f.alice.token()).await;
    assert!(reply.status.is_success(), "{:?}", reply.body);

    for id in &ended {
        assert_ended(&f, id, f.alice.id(), "device_revoked", created, at).await;
    }
    assert_untouched(&f, &closed, "closed").await;
    for (id, state) in kept.iter().zip(["opening", "active", "detached"]) {
        assert_untouched(&f, id, state).await;
    }
}

async fn disabling_a_person_ends_all_their_sessions(engine: Engine) {
    let f = fixture(engine).await;
    let created = f.server.clock.now_ms();
    let mut ended = three(&f, f.bob.id(), &f.bob.session).await;
    // A second login session of bob, ended before without its sessions (as an
    // older binary left it): disabling bob still ends its session.
    let bob_two = f.bob.enrolled.login(&f.server, 4).await;
    let created_two = f.server.clock.now_ms();
    let late = insert(
        &f,
        NewRow {
            state: "detached",
            person_id: f.bob.id(),
            login_session_id: &bob_two.login_session_id,
            device_id: &bob_two.device_id,
        },
    )
    .await;
    sqlx::query("UPDATE login_sessions SET ended_at = $1, end_reason = 'logout' WHERE id = $2")
        .bind(created_two)
        .bind(bob_two.login_session_id.clone())
        .execute(f.server.state.db().pool())
        .await
        .unwrap();
    let closed = insert(&f, closed_row(f.bob.id(), &f.bob.session)).await;
    let kept = three(&f, f.alice.id(), &f.alice.session).await;
    f.server.clock.advance(std::time::Duration::from_secs(3));
    let at = f.server.clock.now_ms();

    let state = &f.server.state;
    let disabled = admin::disable(
        state.db(),
        at,
        admin::PersonRef::Username("bob"),
        admin::RoleAuthority::Operator,
    )
    .await
    .unwrap();
    assert!(disabled.changed);
    ended.sort();
    for id in &ended {
        assert_ended(&f, id, f.bob.id(), "user_disabled", created, at).await;
    }
    assert_ended(&f, &late, f.bob.id(), "user_disabled", created_two, at).await;
    assert_untouched(&f, &closed, "closed").await;
    for (id, state) in kept.iter().zip(["opening", "active", "detached"]) {
        assert_untouched(&f, id, state).await;
    }
}

/// `POST /api/v1/persons/{id}/disable` with `step_up_id` as the step-up of `by`.
async fn disable_with(
    f: &Fixture,
    by: &Person,
    person_id: &str,
    step_up_id: &str,
) -> identity_common::Reply {
    post(
        &f.server,
        &format!("/api/v1/persons/{person_id}/disable"),
        Some(by.token()),
        json!({"reason": "left the team", "step_up_id": step_up_id}),
    )
    .await
}

/// [`disable_with`] a fresh step-up of `by`.
async fn disable(f: &Fixture, by: &Person, person_id: &str) -> identity_common::Reply {
    let step_up_id = step_up(&f.server, by).await;
    disable_with(f, by, person_id, &step_up_id).await
}

/// The status of a person as stored.
async fn status_of(server: &TestServer, person_id: &str) -> String {
    person_column(server, person_id, "status").await
}

/// An owner disables a person through the route (docs/decisions.md
/// D-300..D-302): a step-up and a reason; the status, the person's login
/// sessions and their terminal sessions (`user_disabled`) in one unit of
/// work, audited with the owner as the actor. Refusals change nothing: a
/// body with an unknown member, no valid step-up (missing or consumed), a
/// member, an unknown person, the last active owner. Disabled already is
/// `changed: false`; a disabled person's enrollment code no longer enrolls.
async fn an_owner_disables_a_person_through_the_route(engine: Engine) {
    let f = fixture(engine).await;
    let server = &f.server;
    let bob_id = f.bob.id().to_owned();
    let alice_id = f.alice.id().to_owned();
    let created = server.clock.now_ms();
    let bobs = three(&f, &bob_id, &f.bob.session).await;
    let alices = three(&f, &alice_id, &f.alice.session).await;
    let invited = post(
        server,
        "/api/v1/persons",
        Some(f.alice.token()),
        json!({"username": "carol", "role": "member"}),
    )
    .await;
    assert_eq!(invited.status, 201, "{:?}", invited.body);
    let carol_code = invited.body["enrollment_code"].as_str().unwrap().to_owned();
    let carol_id = invited.body["person"]["id"].as_str().unwrap().to_owned();

    // Refusals: a member the body does not have, no valid step-up, a member
    // as the caller, an unknown person, the last active owner.
    let step_up_id = step_up(server, &f.alice).await;
    let reply = post(
        server,
        &format!("/api/v1/persons/{bob_id}/disable"),
        Some(f.alice.token()),
        json!({"reason": "r", "step_up_id": step_up_id, "force": true}),
    )
    .await;
    assert_eq!(reply.status, 400, "{:?}", reply.body);
    assert_eq!(reply.body["code"], "validation_failed");
    assert_eq!(
        reply.body["errors"],
        json!([{"pointer": "/force", "code": "unknown_member"}])
    );
    let reply = disable_with(
        &f,
        &f.alice,
        &bob_id,
        "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b",
    )
    .await;
    assert_eq!(reply.status, 401, "{:?}", reply.body);
    assert_eq!(reply.body["code"], "step_up_required");
    let reply = disable(&f, &f.bob, &alice_id).await;
    assert_eq!(reply.status, 403, "{:?}", reply.body);
    assert_eq!(reply.body["reason"], "owner_required");
    let reply = disable(&f, &f.alice, &uuid::Uuid::from_u128(7).to_string()).await;
    assert_eq!(reply.status, 404, "{:?}", reply.body);
    assert_eq!(reply.body["code"], "not_found");
    let reply = disable(&f, &f.alice, &alice_id).await;
    assert_eq!(reply.status, 409, "{:?}", reply.body);
    assert_eq!(
        (&reply.body["code"], &reply.body["reason"]),
        (&json!("conflict"), &json!("last_owner"))
    );
    for person in [&alice_id, &bob_id] {
        assert_eq!(status_of(server, person).await, "active");
    }
    for token in [f.alice.token(), f.bob.token()] {
        let reply = identity_common::get(server, "/api/v1/auth/session", Some(token)).await;
        assert_eq!(reply.status, 200, "{:?}", reply.body);
    }
    for (id, state) in bobs
        .iter()
        .chain(&alices)
        .zip(["opening", "active", "detached"].repeat(2))
    {
        assert_untouched(&f, id, state).await;
    }

    // alice disables bob.
    server.clock.advance(std::time::Duration::from_secs(3));
    let step_up_id = step_up(server, &f.alice).await;
    let at = server.clock.now_ms();
    let reply = disable_with(&f, &f.alice, &bob_id, &step_up_id).await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    assert_eq!(reply.body["person"]["id"], bob_id.as_str());
    assert_eq!(reply.body["person"]["status"], "disabled");
    assert_eq!(
        (&reply.body["changed"], &reply.body["sessions_ended"]),
        (&json!(true), &json!(1))
    );
    assert_eq!(status_of(server, &bob_id).await, "disabled");
    let reply = identity_common::get(server, "/api/v1/auth/session", Some(f.bob.token())).await;
    assert_eq!(reply.status, 401, "{:?}", reply.body);
    for id in &bobs {
        assert_ended(&f, id, &bob_id, "user_disabled", created, at).await;
    }
    for (id, state) in alices.iter().zip(["opening", "active", "detached"]) {
        assert_untouched(&f, id, state).await;
    }
    let allowed = identity_common::audit_of(server, "person.disable", "allow").await;
    assert_eq!(allowed.len(), 1, "{allowed:?}");
    assert_eq!(allowed[0].actor_kind, "person");
    assert_eq!(allowed[0].actor_id.as_deref(), Some(alice_id.as_str()));
    assert_eq!(allowed[0].target_kind.as_deref(), Some("person"));
    assert_eq!(allowed[0].target_id.as_deref(), Some(bob_id.as_str()));
    assert_eq!(
        allowed[0].details,
        json!({"reason": "left the team", "sessions_ended": 1, "no_change": false})
    );
    let denied = identity_common::audit_of(server, "person.disable", "deny").await;
    let codes: Vec<_> = denied
        .iter()
        .map(|row| {
            row.details["reason_code"]
                .as_str()
                .unwrap_or("-")
                .to_owned()
        })
        .collect();
    assert!(codes.contains(&"step_up_missing".to_owned()), "{codes:?}");
    let last = denied
        .iter()
        .find(|row| row.details["reason_code"] == "last_owner")
        .expect("the deny of the last owner");
    assert_eq!(last.actor_id.as_deref(), Some(alice_id.as_str()));
    assert_eq!(last.target_id.as_deref(), Some(alice_id.as_str()));
    assert_eq!(last.details["reason"], "left the team");
    for row in allowed.iter().chain(&denied) {
        let text = row.details.to_string();
        assert!(!text.contains("bob") && !text.contains("alice"), "{text}");
    }

    // The step-up was consumed; disabled already changes nothing.
    let reply = disable_with(&f, &f.alice, &bob_id, &step_up_id).await;
    assert_eq!(reply.status, 401, "{:?}", reply.body);
    assert_eq!(reply.body["code"], "step_up_required");
    let reply = disable(&f, &f.alice, &bob_id).await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    assert_eq!(
        (&reply.body["changed"], &reply.body["sessions_ended"]),
        (&json!(false), &json!(0))
    );
    let allowed = identity_common::audit_of(server, "person.disable", "allow").await;
    assert_eq!(allowed.len(), 2, "{allowed:?}");
    assert_eq!(allowed[1].details["no_change"], true);

    // A disabled person's enrollment code no longer enrolls.
    let reply = disable(&f, &f.alice, &carol_id).await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    let reply = post(
        server,
        "/api/v1/auth/enroll",
        None,
        json!({"code": carol_code, "password": identity_common::PASSWORD}),
    )
    .await;
    assert_eq!(reply.status, 401, "{:?}", reply.body);
}

async fn resetting_the_second_factor_revokes_the_sessions(engine: Engine) {
    let f = fixture(engine).await;
    let created = f.server.clock.now_ms();
    let ended = three(&f, f.bob.id(), &f.bob.session).await;
    let closed = insert(&f, closed_row(f.bob.id(), &f.bob.session)).await;
    let kept = three(&f, f.alice.id(), &f.alice.session).await;
    f.server.clock.advance(std::time::Duration::from_secs(4));
    let at = f.server.clock.now_ms();

    let state = &f.server.state;
    let reset = bothy_server::identity::admin::reset_second_factor(
        state.db(),
        state.pepper(),
        &state.config().auth,
        at,
        "bob",
    )
    .await
    .unwrap();
    assert_eq!(reset.sessions_ended.len(), 1);
    for id in &ended {
        assert_ended(&f, id, f.bob.id(), "session_revoked", created, at).await;
    }
    assert_untouched(&f, &closed, "closed").await;
    for (id, state) in kept.iter().zip(["opening", "active", "detached"]) {
        assert_untouched(&f, id, state).await;
    }
}

async fn an_expired_login_session_ends_in_the_sweep(engine: Engine) {
    let f = fixture(engine).await;
    let created = f.server.clock.now_ms();
    // Openings with a fresh grant; the expiry comes before the open deadline.
    let ended = three(&f, f.alice.id(), &f.alice_two).await;
    let closed = insert(&f, closed_row(f.alice.id(), &f.alice_two)).await;
    let kept = three(&f, f.alice.id(), &f.alice.session).await;
    let expires_at = created + 10_000;
    sqlx::query("UPDATE login_sessions SET expires_at = $1 WHERE id = $2")
        .bind(expires_at)
        .bind(f.alice_two.login_session_id.clone())
        .execute(f.server.state.db().pool())
        .await
        .unwrap();
    let state = &f.server.state;

    // One millisecond before expires_at the login session is valid.
    let swept = sweep::run_once(state.db(), state.config(), expires_at - 1)
        .await
        .unwrap();
    assert_eq!(swept, []);
    // At expires_at it is not (valid only while now < expires_at).
    let swept = sweep::run_once(state.db(), state.config(), expires_at)
        .await
        .unwrap();
    let mut swept_ids: Vec<String> = swept
        .iter()
        .map(|s| {
            assert_eq!(s.reason.as_str(), "session_revoked");
            assert_eq!(s.detail, None);
            s.session_id.hyphenated().to_string()
        })
        .collect();
    swept_ids.sort();
    let mut expected = ended.clone();
    expected.sort();
    assert_eq!(swept_ids, expected);
    for id in &ended {
        assert_ended(&f, id, f.alice.id(), "session_revoked", created, expires_at).await;
    }
    assert_untouched(&f, &closed, "closed").await;
    for (id, state) in kept.iter().zip(["opening", "active", "detached"]) {
        assert_untouched(&f, id, state).await;
    }
    // A second pass finds nothing: the first committed end wins.
    let swept = sweep::run_once(state.db(), state.config(), expires_at + MINUTE)
        .await
        .unwrap();
    assert!(
        swept
            .iter()
            .all(|s| !ended.contains(&s.session_id.hyphenated().to_string())),
        "{swept:?}"
    );
}

/// A grant of terminal on the fixture's host to `recipient` (a person or a
/// group) that expires at `expires_at`; its ID.
async fn expiring_grant(f: &Fixture, kind: &str, recipient_id: &str, expires_at: i64) -> String {
    let reply = post(
        &f.server,
        "/api/v1/grants",
        Some(f.alice.token()),
        json!({"host_id": f.host_id, "recipient_kind": kind, "recipient_id": recipient_id,
               "expires_at": expires_at}),
    )
    .await;
    assert_eq!(reply.status, 201, "grant: {:?}", reply.body);
    reply.body["grant"]["id"].as_str().unwrap().to_owned()
}

/// 8.3 (issue 15 item 12): the expiry of a grant is a revocation. The job
/// terminal.sweep ends, at the first pass at or after `expires_at`, the
/// sessions of every person who lost terminal by it (`access_revoked`, one
/// terminate each), once; a person with another valid grant and an owner
/// keep theirs; a pass before the instant ends nothing; the permission
/// version rises.
async fn an_expired_grant_ends_the_sessions_it_allowed(engine: Engine) {
    let f = fixture(engine).await;
    let created = f.server.clock.now_ms();
    let expires_at = created + 10 * MINUTE;
    expiring_grant(&f, "person", f.bob.id(), expires_at).await;
    let bobs = started(&f, f.bob.id(), &f.bob.session).await;
    let alices = started(&f, f.alice.id(), &f.alice.session).await;
    let state = &f.server.state;
    let version = permission_version(&f.server).await;

    sweep::run_once(state.db(), state.config(), expires_at - 1)
        .await
        .unwrap();
    for (id, state) in bobs.iter().zip(["active", "detached"]) {
        assert_untouched(&f, id, state).await;
    }
    assert_eq!(permission_version(&f.server).await, version);

    sweep::run_once(state.db(), state.config(), expires_at)
        .await
        .unwrap();
    for id in &bobs {
        assert_ended(&f, id, f.bob.id(), "access_revoked", created, expires_at).await;
    }
    for (id, state) in alices.iter().zip(["active", "detached"]) {
        assert_untouched(&f, id, state).await;
    }
    assert!(permission_version(&f.server).await > version);
    let terminates = |rows: &[identity_common::AuditRow]| {
        rows.iter()
            .filter(|row| row.action == "terminal.terminate")
            .count()
    };
    let before = terminates(&audit_rows(&f.server).await);
    // Handled once: a later pass ends nothing more.
    sweep::run_once(state.db(), state.config(), expires_at + MINUTE)
        .await
        .unwrap();
    assert_eq!(terminates(&audit_rows(&f.server).await), before);

    // A group grant that expires ends the sessions of its members; a member
    // who still has their own valid grant keeps theirs.
    f.server.clock.set(expires_at + MINUTE);
    let reply = post(
        &f.server,
        "/api/v1/groups",
        Some(f.alice.token()),
        json!({"name": "night-shift"}),
    )
    .await;
    assert_eq!(reply.status, 201, "{:?}", reply.body);
    let group_id = reply.body["group"]["id"].as_str().unwrap().to_owned();
    let reply = post(
        &f.server,
        &format!("/api/v1/groups/{group_id}/members"),
        Some(f.alice.token()),
        json!({"person_id": f.bob.id()}),
    )
    .await;
    assert!(reply.status.is_success(), "{:?}", reply.body);
    let since = f.server.clock.now_ms();
    let group_expiry = since + 5 * MINUTE;
    expiring_grant(&f, "group", &group_id, group_expiry).await;
    let lost = started(&f, f.bob.id(), &f.bob.session).await;
    sweep::run_once(state.db(), state.config(), group_expiry)
        .await
        .unwrap();
    for id in &lost {
        assert_ended(&f, id, f.bob.id(), "access_revoked", since, group_expiry).await;
    }
    f.server.clock.set(group_expiry + MINUTE);
    let now = f.server.clock.now_ms();
    let second_expiry = now + 5 * MINUTE;
    expiring_grant(&f, "group", &group_id, second_expiry).await;
    expiring_grant(&f, "person", f.bob.id(), now + 60 * MINUTE).await;
    let kept = started(&f, f.bob.id(), &f.bob.session).await;
    sweep::run_once(state.db(), state.config(), second_expiry)
        .await
        .unwrap();
    for (id, state) in kept.iter().zip(["active", "detached"]) {
        assert_untouched(&f, id, state).await;
    }
}

/// An active and a detached session of one login session and device (the
/// open deadline of an opening would end it in a sweep pass first).
async fn started(f: &Fixture, person_id: &str, session: &Session) -> Vec<String> {
    let mut ids = Vec::new();
    for state in ["active", "detached"] {
        let row = NewRow {
            state,
            person_id,
            login_session_id: &session.login_session_id,
            device_id: &session.device_id,
        };
        ids.push(insert(f, row).await);
    }
    ids
}

/// `POST /api/v1/persons/{id}/role` with a fresh step-up of `by`.
async fn set_role(f: &Fixture, by: &Person, person_id: &str, role: &str) -> identity_common::Reply {
    let step_up_id = step_up(&f.server, by).await;
    post(
        &f.server,
        &format!("/api/v1/persons/{person_id}/role"),
        Some(by.token()),
        json!({"role": role, "reason": "team change", "step_up_id": step_up_id}),
    )
    .await
}

/// The role of a person as stored.
async fn role_of(server: &TestServer, person_id: &str) -> String {
    person_column(server, person_id, "role").await
}

/// A text column (`role`, `status`) of a person as stored.
async fn person_column(server: &TestServer, person_id: &str, column: &str) -> String {
    sqlx::query_scalar(&format!(
        "SELECT {column} FROM persons WHERE principal_id = $1"
    ))
    .bind(person_id.to_owned())
    .fetch_one(server.state.db().pool())
    .await
    .unwrap()
}

/// 8.3 "removal of the owner role": SR10 binds the former owner at once. In
/// the unit of work of the change the permission version rises and every
/// session they may no longer have ends with `access_revoked` — on a host not
/// assigned to them, on a host of theirs without a grant, on the server host
/// — while the session on their own host with a grant stays. The last
/// active owner is never demoted.
async fn removing_the_owner_role_ends_what_sr10_no_longer_allows(engine: Engine) {
    let f = fixture(engine).await;
    let server = &f.server;
    let bob_id = f.bob.id().to_owned();
    // alice makes bob an owner.
    let reply = set_role(&f, &f.alice, &bob_id, "owner").await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    assert_eq!(reply.body["person"]["role"], "owner");
    assert_eq!(
        (&reply.body["changed"], &reply.body["sessions_ended"]),
        (&json!(true), &json!(0))
    );

    // bob's own host with a grant, his host without one, and a server host
    // of his with a grant.
    let own = active_host(
        server,
        &f.alice,
        "bobs",
        Some(&bob_id),
        21,
        &["bob_os"],
        &[(&bob_id, "bob_os")],
    )
    .await;
    let bare = active_host(
        server,
        &f.alice,
        "bare",
        Some(&bob_id),
        22,
        &["bob_os"],
        &[(&bob_id, "bob_os")],
    )
    .await;
    let (srv, code) = create_host(server, &f.alice, "srv", Some(&bob_id)).await;
    let paired = pair(server, &code, &HostKeys::generate(23), &["bob_os"]).await;
    assert_eq!(paired.status, 200, "{:?}", paired.body);
    let confirmed = confirm(
        server,
        &f.alice,
        &srv,
        &reply_prefix(&paired),
        "none",
        None,
        true,
        &[(&bob_id, "bob_os")],
    )
    .await;
    assert_eq!(confirmed.status, 200, "{:?}", confirmed.body);
    for host in [own.host_id.as_str(), srv.as_str()] {
        let grant = post(
            server,
            "/api/v1/grants",
            Some(f.alice.token()),
            json!({"host_id": host, "recipient_kind": "person", "recipient_id": bob_id}),
        )
        .await;
        assert_eq!(grant.status, 201, "{:?}", grant.body);
    }
    let row = |state| NewRow {
        state,
        person_id: &bob_id,
        login_session_id: &f.bob.session.login_session_id,
        device_id: &f.bob.session.device_id,
    };
    let created = server.clock.now_ms();
    let on_box = insert(&f, row("active")).await;
    let on_own = insert_at(server, &own.host_id, row("active")).await;
    let on_bare = insert_at(server, &bare.host_id, row("detached")).await;
    let on_srv = insert_at(server, &srv, row("opening")).await;
    let alices = insert(
        &f,
        NewRow {
            state: "active",
            person_id: f.alice.id(),
            login_session_id: &f.alice.session.login_session_id,
            device_id: &f.alice.session.device_id,
        },
    )
    .await;

    // Refusals change nothing: a wrong role, no valid step-up.
    let reply = set_role(&f, &f.alice, &bob_id, "admin").await;
    assert_eq!(reply.status, 400, "{:?}", reply.body);
    assert_eq!(
        reply.body["errors"],
        json!([{"pointer": "/role", "code": "invalid"}])
    );
    let reply = post(
        server,
        &format!("/api/v1/persons/{bob_id}/role"),
        Some(f.alice.token()),
        json!({"role": "member", "reason": "team change", "step_up_id": "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"}),
    )
    .await;
    assert_eq!(reply.status, 401, "{:?}", reply.body);
    assert_eq!(reply.body["code"], "step_up_required");
    assert_eq!(role_of(server, &bob_id).await, "owner");

    // alice removes bob's owner role.
    let version = permission_version(server).await;
    server.clock.advance(std::time::Duration::from_secs(3));
    let step_up_id = step_up(server, &f.alice).await;
    let at = server.clock.now_ms();
    let reply = post(
        server,
        &format!("/api/v1/persons/{bob_id}/role"),
        Some(f.alice.token()),
        json!({"role": "member", "reason": "left the admin team", "step_up_id": step_up_id}),
    )
    .await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    assert_eq!(reply.body["person"]["role"], "member");
    assert_eq!(
        (&reply.body["changed"], &reply.body["sessions_ended"]),
        (&json!(true), &json!(3))
    );
    assert_eq!(permission_version(server).await, version + 1);
    for (id, host) in [
        (&on_box, &f.host_id),
        (&on_bare, &bare.host_id),
        (&on_srv, &srv),
    ] {
        assert_eq!(
            stored(server, id).await,
            (
                "closed".to_owned(),
                Some("access_revoked".to_owned()),
                None,
                2
            ),
            "session {id}"
        );
        let terminate: Vec<_> = audit_rows(server)
            .await
            .into_iter()
            .filter(|row| {
                row.action == "terminal.terminate" && row.details["session_id"] == id.as_str()
            })
            .collect();
        assert_eq!(terminate.len(), 1, "{terminate:?}");
        assert_eq!(
            terminate[0].details,
            json!({
                "session_id": id,
                "close_reason": "access_revoked",
                "bytes_in": 11,
                "bytes_out": 22,
                "duration_ms": at - created,
            })
        );
        let events = changed_events(server, id).await;
        assert_eq!(events.len(), 1, "{events:?}");
        assert_eq!(
            events[0].2,
            json!({"session_id": id, "host_id": host, "state": "closed", "close_reason": "access_revoked"})
        );
    }
    assert_untouched(&f, &on_own, "active").await;
    assert_untouched(&f, &alices, "active").await;
    let changes: Vec<_> = audit_rows(server)
        .await
        .into_iter()
        .filter(|row| row.action == "person.set_role")
        .collect();
    let demotion = changes
        .iter()
        .find(|row| row.decision == "allow" && row.details["to_role"] == "member")
        .expect("the allow entry of the demotion");
    assert_eq!(demotion.actor_id.as_deref(), Some(f.alice.id()));
    assert_eq!(demotion.target_id.as_deref(), Some(bob_id.as_str()));
    assert_eq!(
        demotion.details,
        json!({
            "from_role": "owner",
            "to_role": "member",
            "reason": "left the admin team",
            "sessions_ended": 3,
        })
    );
    assert!(
        changes
            .iter()
            .any(|row| row.decision == "deny" && row.details["reason_code"] == "step_up_missing")
    );

    // bob is a member now: the route is not his.
    let reply = set_role(&f, &f.bob, f.alice.id(), "member").await;
    assert_eq!(reply.status, 403, "{:?}", reply.body);
    assert_eq!(reply.body["reason"], "owner_required");
    // The last active owner keeps the role.
    let version = permission_version(server).await;
    let reply = set_role(&f, &f.alice, f.alice.id(), "member").await;
    assert_eq!(reply.status, 409, "{:?}", reply.body);
    assert_eq!(
        (&reply.body["code"], &reply.body["reason"]),
        (&json!("conflict"), &json!("last_owner"))
    );
    assert_eq!(role_of(server, f.alice.id()).await, "owner");
    assert_eq!(permission_version(server).await, version);
    assert_untouched(&f, &alices, "active").await;
    // The same role again changes nothing.
    let reply = set_role(&f, &f.alice, &bob_id, "member").await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    assert_eq!(reply.body["changed"], false);
    assert_eq!(permission_version(server).await, version);

    // The operator's command (`admin set-role`) through the same function.
    let set = bothy_server::identity::admin::set_role(
        server.state.db(),
        server.clock.now_ms(),
        bothy_server::identity::admin::PersonRef::Username("bob"),
        bothy_server::identity::Role::Owner,
        bothy_server::identity::admin::RoleAuthority::Operator,
    )
    .await
    .unwrap();
    assert!(set.changed);
    assert_eq!(role_of(server, &bob_id).await, "owner");
    assert_untouched(&f, &on_own, "active").await;
}

both_engines!(
    an_expired_grant_ends_the_sessions_it_allowed,
    removing_the_owner_role_ends_what_sr10_no_longer_allows,
    logout_ends_the_sessions_of_that_login_session,
    revoking_a_login_session_ends_its_sessions,
    revoking_a_device_ends_its_sessions,
    disabling_a_person_ends_all_their_sessions,
    an_owner_disables_a_person_through_the_route,
    resetting_the_second_factor_revokes_the_sessions,
    an_expired_login_session_ends_in_the_sweep,
);
