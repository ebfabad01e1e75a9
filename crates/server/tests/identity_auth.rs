//! Identity against the real server on port 0 over TLS, on both engines
//! (DESIGN 3.1, 3.4): bootstrap → enroll → confirm → login → whoami → step-up →
//! consume once; login failures that all look alike; TOTP expiry and replay;
//! step-up expiry, ownership and concurrent consumption; revocations, logout,
//! agents and apps (TM-T17's refusal), the rate limit of public auth calls, a
//! restart, enrollment refusals, the admin functions, and a canary that no
//! secret reaches the audit, the event log or an error body.
//!
//! Time moves only through the server's manual clock.

#![allow(clippy::unwrap_used)] // test bodies are plain fns called by the generated #[test]s

use bothy_testkit as support;
use bothy_testkit::identity as identity_common;

use std::time::Duration;

use bothy_server::clock::Clock;
use bothy_server::db::Engine;
use bothy_server::identity::admin::{PersonRef, RoleAuthority};
use bothy_server::identity::step_up::{self, StepUpRefusal};
use bothy_server::identity::{ConflictReason, IdentityError, admin};
use identity_common::*;
use serde_json::{Value, json};
use support::both_engines;
use support::server::TestServer;
use uuid::Uuid;

fn uuid(text: &Value) -> Uuid {
    bothy_proto::ids::parse_uuid(text.as_str().expect("a string")).expect("a UUID")
}

async fn consume(server: &TestServer, session: &str, step_up: &str) -> Result<(), IdentityError> {
    let now = server.clock.now_ms();
    let mut uow = server.state.db().begin(now).await.unwrap();
    let result =
        step_up::consume(&mut uow, uuid(&json!(session)), uuid(&json!(step_up)), now).await;
    uow.commit().await.unwrap();
    result.map(|_| ())
}

fn refusal(result: Result<(), IdentityError>) -> StepUpRefusal {
    match result {
        Err(IdentityError::StepUpRequired(refusal)) => refusal,
        other => panic!("expected a step-up refusal, got {other:?}"),
    }
}

async fn step_up(server: &TestServer, person: &Enrolled, token: &str) -> Value {
    let code = person.fresh_code(server);
    let reply = post(
        server,
        "/api/v1/auth/step-up",
        Some(token),
        json!({"method": "totp", "code": code}),
    )
    .await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    reply.body
}

fn unauthenticated_body() -> Value {
    json!({"type": "about:blank", "title": "Unauthorized", "status": 401, "code": "unauthenticated"})
}

// ---------------------------------------------------------------- the happy path

async fn enroll_login_whoami_step_up_consume_once(engine: Engine) {
    let server = TestServer::start(engine).await;
    let alice = owner(&server, "Alice").await;
    assert_eq!(
        alice.username, "alice",
        "usernames are folded to lower case"
    );
    assert!(
        alice
            .otpauth_uri
            .starts_with("otpauth://totp/bothy:alice?secret="),
        "{}",
        alice.otpauth_uri
    );

    let session = alice.login(&server, 1).await;
    assert!(session.token.starts_with("bothy_at_"));
    assert_eq!(session.token.len(), 9 + 43);
    assert_eq!(
        session.expires_at,
        server.clock.now_ms() + 12 * 3600 * 1000,
        "auth.login_session_ttl"
    );

    let whoami = get(&server, "/api/v1/auth/session", Some(&session.token)).await;
    assert_eq!(whoami.status, 200);
    assert_eq!(
        whoami.body,
        json!({
            "principal_id": alice.person_id,
            "kind": "person",
            "username": "alice",
            "role": "owner",
            "login_session_id": session.login_session_id,
            "device_id": session.device_id,
            "client_component": "cli",
            "expires_at": session.expires_at,
        })
    );

    // The same key again is the same device.
    let again = alice.login(&server, 1).await;
    assert_eq!(again.device_id, session.device_id);
    assert_ne!(again.login_session_id, session.login_session_id);
    let other = alice.login(&server, 2).await;
    assert_ne!(other.device_id, session.device_id);

    let created = step_up(&server, &alice, &session.token).await;
    assert_eq!(
        created["expires_at"],
        server.clock.now_ms() + 60_000,
        "terminal.step_up_max_age"
    );
    let step_up_id = created["step_up_id"].as_str().unwrap();
    consume(&server, &session.login_session_id, step_up_id)
        .await
        .expect("first consumption succeeds");
    assert_eq!(
        refusal(consume(&server, &session.login_session_id, step_up_id).await),
        StepUpRefusal::Consumed
    );
    // A step-up nobody created.
    assert_eq!(
        refusal(
            consume(
                &server,
                &session.login_session_id,
                &Uuid::from_u128(42).to_string()
            )
            .await
        ),
        StepUpRefusal::Missing
    );

    let logins = audit_of(&server, "auth.login", "allow").await;
    assert_eq!(logins.len(), 3);
    assert_eq!(
        logins[0].actor_id.as_deref(),
        Some(alice.person_id.as_str())
    );
    assert_eq!(logins[0].details["new_device"], true);
    assert_eq!(logins[1].details["new_device"], false);
    assert_eq!(audit_of(&server, "auth.enroll", "allow").await.len(), 2);
    assert_eq!(audit_of(&server, "auth.step_up", "allow").await.len(), 1);
    let bootstrap = audit_of(&server, "person.invite", "allow").await;
    assert_eq!(bootstrap.len(), 1);
    assert_eq!(bootstrap[0].actor_kind, "system");
    assert_eq!(
        bootstrap[0].details,
        json!({"operation": "bootstrap", "role": "owner"})
    );
    server.stop().await;
}

// ---------------------------------------------------------------- login failures

async fn login_failures_all_answer_the_same(engine: Engine) {
    let server = TestServer::start(engine).await;
    let alice = owner(&server, "alice").await;

    let mut wrong_password = alice.login_body(&server, 1);
    wrong_password["password"] = json!("not the password at all");
    let mut unknown_user = alice.login_body(&server, 1);
    unknown_user["username"] = json!("mallory");
    let mut wrong_totp = alice.login_body(&server, 1);
    let right = wrong_totp["totp"].as_str().unwrap().to_owned();
    let wrong = format!("{:06}", (right.parse::<u32>().unwrap() + 1) % 1_000_000);
    wrong_totp["totp"] = json!(wrong);
    let mut malformed_totp = alice.login_body(&server, 1);
    malformed_totp["totp"] = json!("12ab56");
    let mut malformed_username = alice.login_body(&server, 1);
    malformed_username["username"] = json!("not a username!");

    for body in [
        wrong_password,
        unknown_user,
        wrong_totp,
        malformed_totp,
        malformed_username,
    ] {
        let reply = post(&server, "/api/v1/auth/login", None, body).await;
        assert_eq!(reply.status, 401);
        assert_eq!(reply.headers["content-type"], "application/problem+json");
        assert_eq!(reply.body, unauthenticated_body());
    }

    // The clock stood still: rows of one millisecond have no order; sort them.
    let denied = audit_of(&server, "auth.login", "deny").await;
    let mut reasons: Vec<&str> = denied
        .iter()
        .map(|row| row.details["reason_code"].as_str().unwrap())
        .collect();
    reasons.sort_unstable();
    assert_eq!(
        reasons,
        [
            "unknown_username",
            "unknown_username",
            "wrong_password",
            "wrong_totp",
            "wrong_totp"
        ]
    );
    for row in &denied {
        assert_eq!(row.actor_kind, "system", "the caller is not authenticated");
        let text = row.details.to_string();
        assert!(
            !text.contains("mallory") && !text.contains("alice"),
            "{text}"
        );
        if row.details["reason_code"] == "unknown_username" {
            assert_eq!(row.target_id, None, "no account, no target");
        } else {
            assert_eq!(row.target_id.as_deref(), Some(alice.person_id.as_str()));
        }
    }

    // Structure errors are 400 and name the member, not the value.
    let mut bad_key = alice.login_body(&server, 1);
    bad_key["device_public_key"] = json!("AAAA");
    let reply = post(&server, "/api/v1/auth/login", None, bad_key).await;
    assert_eq!(reply.status, 400);
    assert_eq!(
        reply.body["errors"],
        json!([{"pointer": "/device_public_key", "code": "invalid_key"}])
    );
    let mut extra = alice.login_body(&server, 1);
    extra["remember_me"] = json!(true);
    let reply = post(&server, "/api/v1/auth/login", None, extra).await;
    assert_eq!(reply.status, 400);
    assert_eq!(
        reply.body["errors"],
        json!([{"pointer": "/remember_me", "code": "unknown_member"}])
    );
    server.stop().await;
}

// ---------------------------------------------------------------- TOTP

async fn totp_codes_expire_and_are_never_accepted_twice(engine: Engine) {
    let server = TestServer::start(engine).await;
    let alice = owner(&server, "alice").await;

    // Expired: a code two steps old is outside auth.totp_skew_steps = 1.
    let mut body = alice.login_body(&server, 1);
    server.clock.advance(STEP * 2);
    let reply = post(&server, "/api/v1/auth/login", None, body.clone()).await;
    assert_eq!(reply.status, 401);
    assert_eq!(reply.body, unauthenticated_body());
    // One step old is still accepted (the skew).
    body["totp"] = json!(alice.code_now(&server));
    server.clock.advance(STEP);
    let reply = post(&server, "/api/v1/auth/login", None, body.clone()).await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    let token = reply.body["access_token"].as_str().unwrap().to_owned();

    // Replayed: the same code again, at once.
    let reply = post(&server, "/api/v1/auth/login", None, body.clone()).await;
    assert_eq!(reply.status, 401);
    assert_eq!(reply.body, unauthenticated_body());
    // A step-up with the code the login used is refused too...
    let reply = post(
        &server,
        "/api/v1/auth/step-up",
        Some(&token),
        json!({"method": "totp", "code": body["totp"]}),
    )
    .await;
    assert_eq!(reply.status, 401);
    assert_eq!(reply.body["code"], "step_up_required");
    assert_eq!(reply.body["reason"], "totp_invalid");
    // Steps only move forward: after the next step's code (within the skew),
    // the current step's code is refused, though it was never used.
    server.clock.advance(STEP);
    let now_s = u64::try_from(server.clock.now_ms() / 1000).unwrap();
    let reply = post(
        &server,
        "/api/v1/auth/step-up",
        Some(&token),
        json!({"method": "totp", "code": alice.totp.generate(now_s + 30)}),
    )
    .await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    let reply = post(
        &server,
        "/api/v1/auth/step-up",
        Some(&token),
        json!({"method": "totp", "code": alice.totp.generate(now_s)}),
    )
    .await;
    assert_eq!(reply.status, 401);

    // Rows of one millisecond have no order; sort them.
    let mut reasons: Vec<String> = audit_rows(&server)
        .await
        .into_iter()
        .filter(|row| row.decision == "deny")
        .map(|row| {
            format!(
                "{} {}",
                row.action,
                row.details["reason_code"].as_str().unwrap()
            )
        })
        .collect();
    reasons.sort_unstable();
    assert_eq!(
        reasons,
        [
            "auth.login totp_replayed",
            "auth.login wrong_totp",
            "auth.step_up totp_replayed",
            "auth.step_up totp_replayed",
        ]
    );
    server.stop().await;
}

// ---------------------------------------------------------------- step-up

async fn step_ups_expire_belong_to_one_session_and_are_consumed_once(engine: Engine) {
    let server = TestServer::start(engine).await;
    let alice = owner(&server, "alice").await;
    let one = alice.login(&server, 1).await;
    let two = alice.login(&server, 2).await;

    // Exactly terminal.step_up_max_age old: still usable; a millisecond more: not.
    let created = step_up(&server, &alice, &one.token).await;
    let id = created["step_up_id"].as_str().unwrap();
    server.clock.advance(Duration::from_millis(60_001));
    assert_eq!(
        refusal(consume(&server, &one.login_session_id, id).await),
        StepUpRefusal::Expired
    );
    let created = step_up(&server, &alice, &one.token).await;
    let id = created["step_up_id"].as_str().unwrap();
    server.clock.advance(Duration::from_secs(60));
    consume(&server, &one.login_session_id, id)
        .await
        .expect("exactly max age old");

    // Another login session's step-up.
    let created = step_up(&server, &alice, &one.token).await;
    let id = created["step_up_id"].as_str().unwrap();
    assert_eq!(
        refusal(consume(&server, &two.login_session_id, id).await),
        StepUpRefusal::OtherSession
    );
    // Still unconsumed for its own session.
    consume(&server, &one.login_session_id, id).await.unwrap();

    // Two concurrent consumers: the first consumes in an open unit of work; the
    // second starts while that one is uncommitted (PostgreSQL: its UPDATE is
    // seen waiting on the row lock; SQLite: it waits for the one writer), and
    // is refused once the first commits.
    let created = step_up(&server, &alice, &one.token).await;
    let (session, id) = (
        uuid(&json!(one.login_session_id)),
        uuid(&created["step_up_id"]),
    );
    let now = server.clock.now_ms();
    let mut first = server.state.db().begin(now).await.unwrap();
    step_up::consume(&mut first, session, id, now)
        .await
        .unwrap();
    let db = server.state.db().clone();
    let second = tokio::spawn(async move {
        let mut uow = db.begin(now).await.unwrap();
        let result = step_up::consume(&mut uow, session, id, now).await;
        uow.commit().await.unwrap();
        result
    });
    if engine == Engine::Postgres {
        wait_for_lock_waiter(&server).await;
    }
    first.commit().await.unwrap();
    match second.await.unwrap() {
        Err(IdentityError::StepUpRequired(StepUpRefusal::Consumed)) => {}
        other => panic!("the second consumer must be refused, got {other:?}"),
    }

    // A step-up of a session that ended is refused.
    let created = step_up(&server, &alice, &two.token).await;
    let id = created["step_up_id"].as_str().unwrap().to_owned();
    let reply = post_empty(&server, "/api/v1/auth/logout", &two.token).await;
    assert_eq!(reply.status, 204);
    assert_eq!(
        refusal(consume(&server, &two.login_session_id, &id).await),
        StepUpRefusal::SessionEnded
    );

    // Unknown method.
    let reply = post(
        &server,
        "/api/v1/auth/step-up",
        Some(&one.token),
        json!({"method": "sms", "code": "123456"}),
    )
    .await;
    assert_eq!(reply.status, 400);
    assert_eq!(
        reply.body["errors"],
        json!([{"pointer": "/method", "code": "unknown_method"}])
    );
    // `webauthn` takes a challenge and a credential (tests/identity_passkey.rs).
    let reply = post(
        &server,
        "/api/v1/auth/step-up",
        Some(&one.token),
        json!({"method": "webauthn", "code": "123456"}),
    )
    .await;
    assert_eq!(reply.status, 400);
    assert_eq!(
        reply.body["errors"],
        json!([{"pointer": "/challenge_id", "code": "required"}])
    );
    server.stop().await;
}

/// Waits (bounded) until a session of this test database waits on a lock:
/// for another task to reach the lock, not for time to pass.
async fn wait_for_lock_waiter(server: &TestServer) {
    let waited = support::wait::try_eventually(Duration::from_secs(5), || async {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM pg_stat_activity \
             WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .fetch_one(server.state.db().pool())
        .await
        .unwrap();
        (waiting > 0).then_some(())
    })
    .await;
    if waited.is_none() {
        panic!("the second consumer never waited on the step-up's row lock");
    }
}

/// A step-up refused by consume maps to `401 step_up_required` for the client.
#[test]
fn consume_refusals_are_step_up_required() {
    let error: bothy_server::http::ApiError =
        IdentityError::StepUpRequired(StepUpRefusal::Consumed).into();
    assert_eq!(error.body()["status"], 401);
    assert_eq!(error.body()["code"], "step_up_required");
    assert!(error.body().get("reason").is_none());
}

// ---------------------------------------------------------------- revocations

async fn revocations_and_logout_take_effect_at_once(engine: Engine) {
    let server = TestServer::start(engine).await;
    let alice = owner(&server, "alice").await;
    let owner_session = alice.login(&server, 9).await;
    let bob = invite(&server, &owner_session.token, "bob", "member").await;
    let laptop = bob.login(&server, 1).await;
    let laptop_again = bob.login(&server, 1).await;
    let phone = bob.login(&server, 2).await;
    let spare = bob.login(&server, 3).await;

    let whoami = |token: String| {
        let server = &server;
        async move {
            get(server, "/api/v1/auth/session", Some(&token))
                .await
                .status
        }
    };

    // A member sees only their own sessions; an owner sees everyone's.
    let mine = get(&server, "/api/v1/auth/sessions", Some(&laptop.token)).await;
    assert_eq!(mine.status, 200);
    assert_eq!(mine.body["sessions"].as_array().unwrap().len(), 4);
    assert_eq!(mine.body["sessions"][0]["current"], true);
    let all = get(&server, "/api/v1/auth/sessions", Some(&owner_session.token)).await;
    assert_eq!(all.body["sessions"].as_array().unwrap().len(), 5);
    let devices = get(&server, "/api/v1/devices", Some(&laptop.token)).await;
    assert_eq!(devices.body["devices"].as_array().unwrap().len(), 3);

    // A member cannot revoke someone else's session: not found.
    let reply = post_empty(
        &server,
        &format!(
            "/api/v1/auth/sessions/{}/revoke",
            owner_session.login_session_id
        ),
        &laptop.token,
    )
    .await;
    assert_eq!(reply.status, 404);
    assert_eq!(whoami(owner_session.token.clone()).await, 200);

    // Revoking a session ends it at once.
    let reply = post_empty(
        &server,
        &format!("/api/v1/auth/sessions/{}/revoke", spare.login_session_id),
        &laptop.token,
    )
    .await;
    assert_eq!(reply.status, 204);
    assert_eq!(whoami(spare.token.clone()).await, 401);

    // Revoking a device ends every session of it, and only those.
    let reply = post_empty(
        &server,
        &format!("/api/v1/devices/{}/revoke", laptop.device_id),
        &owner_session.token,
    )
    .await;
    assert_eq!(reply.status, 204);
    assert_eq!(whoami(laptop.token.clone()).await, 401);
    assert_eq!(whoami(laptop_again.token.clone()).await, 401);
    assert_eq!(whoami(phone.token.clone()).await, 200);
    // The revoked key cannot log in again, even with the right credentials.
    let reply = post(
        &server,
        "/api/v1/auth/login",
        None,
        bob.login_body(&server, 1),
    )
    .await;
    assert_eq!(reply.status, 403);
    assert_eq!(reply.body["code"], "forbidden");
    assert_eq!(reply.body["reason"], "device_revoked");

    // Logout ends the caller's session.
    let reply = post_empty(&server, "/api/v1/auth/logout", &phone.token).await;
    assert_eq!(reply.status, 204);
    assert_eq!(whoami(phone.token.clone()).await, 401);
    // An ended session cannot log out again.
    let reply = post_empty(&server, "/api/v1/auth/logout", &phone.token).await;
    assert_eq!(reply.status, 401);

    let device_revoke = audit_of(&server, "device.revoke", "allow").await;
    assert_eq!(device_revoke.len(), 1);
    assert_eq!(device_revoke[0].details["sessions_ended"], 2);
    assert_eq!(audit_of(&server, "session.revoke", "deny").await.len(), 1);
    assert_eq!(audit_of(&server, "session.revoke", "allow").await.len(), 1);
    assert_eq!(audit_of(&server, "auth.logout", "allow").await.len(), 1);
    let ends: Vec<(String, Option<String>)> = sqlx::query_as(
        "SELECT id, end_reason FROM login_sessions WHERE person_id = $1 ORDER BY id",
    )
    .bind(&bob.person_id)
    .fetch_all(server.state.db().pool())
    .await
    .unwrap();
    let reasons: Vec<Option<&str>> = ends.iter().map(|(_, r)| r.as_deref()).collect();
    assert_eq!(
        reasons,
        [
            Some("device_revoked"),
            Some("device_revoked"),
            Some("logout"),
            Some("session_revoked")
        ]
    );
    server.stop().await;
}

// ---------------------------------------------------------------- agents and apps

async fn agents_and_apps_authenticate_but_are_not_persons(engine: Engine) {
    let server = TestServer::start(engine).await;
    let alice = owner(&server, "alice").await;
    let session = alice.login(&server, 1).await;

    let created = post(
        &server,
        "/api/v1/tokens",
        Some(&session.token),
        json!({"kind": "agent", "name": "ci-bot"}),
    )
    .await;
    assert_eq!(created.status, 201, "{:?}", created.body);
    let token = created.body["token"].as_str().unwrap().to_owned();
    assert!(token.starts_with("bothy_tk_"));
    let agent_id = created.body["principal_id"].as_str().unwrap().to_owned();

    let whoami = get(&server, "/api/v1/auth/session", Some(&token)).await;
    assert_eq!(whoami.status, 200);
    assert_eq!(
        whoami.body,
        json!({
            "principal_id": agent_id,
            "kind": "agent",
            "name": "ci-bot",
            "token_id": created.body["token_id"],
        })
    );

    // A person-only route: 403 subject_kind_not_allowed, audited.
    let reply = post(
        &server,
        "/api/v1/auth/step-up",
        Some(&token),
        json!({"method": "totp", "code": "123456"}),
    )
    .await;
    assert_eq!(reply.status, 403);
    assert_eq!(
        reply.body,
        json!({
            "type": "about:blank",
            "title": "Forbidden",
            "status": 403,
            "code": "forbidden",
            "reason": "subject_kind_not_allowed",
        })
    );
    let denied = audit_of(&server, "auth.step_up", "deny").await;
    assert_eq!(denied.len(), 1);
    assert_eq!(denied[0].actor_kind, "agent");
    assert_eq!(denied[0].actor_id.as_deref(), Some(agent_id.as_str()));
    assert_eq!(
        denied[0].details,
        json!({"reason_code": "subject_kind_not_allowed"})
    );

    // An app, a second token for it, and the owner-only list.
    let app = post(
        &server,
        "/api/v1/tokens",
        Some(&session.token),
        json!({"kind": "app", "name": "dashboard"}),
    )
    .await;
    assert_eq!(app.status, 201);
    let second = post(
        &server,
        "/api/v1/tokens",
        Some(&session.token),
        json!({"principal_id": app.body["principal_id"]}),
    )
    .await;
    assert_eq!(second.status, 201);
    assert_eq!(second.body["principal_id"], app.body["principal_id"]);
    let app_token = second.body["token"].as_str().unwrap();
    let whoami = get(&server, "/api/v1/auth/session", Some(app_token)).await;
    assert_eq!(whoami.body["kind"], "app");
    let reply = post_empty(&server, "/api/v1/auth/logout", app_token).await;
    assert_eq!(reply.status, 403);
    assert_eq!(reply.body["reason"], "subject_kind_not_allowed");
    let list = get(&server, "/api/v1/tokens", Some(&session.token)).await;
    assert_eq!(list.body["tokens"].as_array().unwrap().len(), 3);
    assert!(
        !list.body.to_string().contains("bothy_tk_"),
        "values never listed"
    );

    // A token for a person is refused; members cannot create tokens.
    let reply = post(
        &server,
        "/api/v1/tokens",
        Some(&session.token),
        json!({"kind": "person", "name": "x"}),
    )
    .await;
    assert_eq!(reply.status, 400);
    assert_eq!(reply.body["errors"][0]["pointer"], "/kind");
    let bob = invite(&server, &session.token, "bob", "member").await;
    let bob_session = bob.login(&server, 2).await;
    let reply = post(
        &server,
        "/api/v1/tokens",
        Some(&bob_session.token),
        json!({"kind": "agent", "name": "mine"}),
    )
    .await;
    assert_eq!(reply.status, 403);
    assert_eq!(reply.body["reason"], "owner_required");
    assert_eq!(audit_of(&server, "api_token.create", "deny").await.len(), 1);

    // Revoked: 401 at once. Malformed and missing credentials: 401, one body.
    let reply = post_empty(
        &server,
        &format!(
            "/api/v1/tokens/{}/revoke",
            created.body["token_id"].as_str().unwrap()
        ),
        &session.token,
    )
    .await;
    assert_eq!(reply.status, 204);
    for token in [
        Some(token.as_str()),
        Some("bothy_tk_short"),
        Some("nonsense"),
        None,
    ] {
        let reply = get(&server, "/api/v1/auth/session", token).await;
        assert_eq!(reply.status, 401);
        assert_eq!(reply.body, unauthenticated_body());
    }
    server.stop().await;
}

// ---------------------------------------------------------------- rate limit

async fn failed_logins_are_rate_limited(engine: Engine) {
    let server = TestServer::start(engine).await;
    let alice = owner(&server, "alice").await;
    let right = alice.login_body(&server, 1);
    let mut wrong = right.clone();
    wrong["password"] = json!("wrong wrong wrong");
    // rl.public_auth: burst 10, 10 per minute; the clock stands still.
    for _ in 0..10 {
        let reply = post(&server, "/api/v1/auth/login", None, wrong.clone()).await;
        assert_eq!(reply.status, 401);
    }
    let reply = post(&server, "/api/v1/auth/login", None, wrong.clone()).await;
    assert_eq!(reply.status, 429);
    assert_eq!(reply.headers["retry-after"], "6");
    assert_eq!(reply.headers["content-type"], "application/problem+json");
    assert_eq!(reply.body["code"], "rate_limited");
    assert_eq!(reply.body["retry_after"], 6);
    // Before any check: even the right credentials wait.
    let reply = post(&server, "/api/v1/auth/login", None, right.clone()).await;
    assert_eq!(reply.status, 429);
    // The 429s took nothing and checked nothing.
    assert_eq!(audit_of(&server, "auth.login", "deny").await.len(), 10);

    // 30 s later 5 tokens are back; a success takes none.
    server.clock.advance(STEP);
    let reply = post(&server, "/api/v1/auth/login", None, right).await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    let mut failures = 0;
    loop {
        let reply = post(&server, "/api/v1/auth/login", None, wrong.clone()).await;
        if reply.status == 429 {
            break;
        }
        assert_eq!(reply.status, 401);
        failures += 1;
        assert!(failures <= 5, "the bucket held at most five tokens");
    }
    assert_eq!(failures, 5);
    assert_eq!(audit_of(&server, "auth.login", "deny").await.len(), 15);
    server.stop().await;
}

/// Issue 15 (item 7, D-355): logins at once all get their own answer from the
/// hashing threads: 401 for a wrong password and for an unknown username
/// (the dummy hash), 200 for the right one.
async fn concurrent_logins_get_their_answers(engine: Engine) {
    let server = TestServer::start_with(
        engine,
        "rl:\n  public_auth: {burst: 1000, refill_per_minute: 1000}\n",
    )
    .await;
    let alice = owner(&server, "alice").await;
    let right = alice.login_body(&server, 1);
    let mut requests = Vec::new();
    for n in 0..40 {
        let mut body = right.clone();
        match n % 4 {
            0 => body["username"] = json!(format!("nobody{n}")),
            _ => body["password"] = json!(format!("not the password {n}")),
        }
        requests.push((body, 401));
    }
    requests.insert(17, (right, 200));
    let answers = futures_util::future::join_all(requests.into_iter().map(|(body, want)| {
        let server = &server;
        async move {
            let reply = post(server, "/api/v1/auth/login", None, body).await;
            (reply.status.as_u16(), want)
        }
    }))
    .await;
    for (got, want) in answers {
        assert_eq!(got, want);
    }
    assert_eq!(audit_of(&server, "auth.login", "deny").await.len(), 40);
    assert_eq!(audit_of(&server, "auth.login", "allow").await.len(), 1);
    server.stop().await;
}

/// Issue 15 (item 8, D-353): failed step-ups count per person and per client
/// address, apart from the failed logins of `rl.public_auth`. The clock
/// stands still, so no bucket refills; each person has the three codes of the
/// accepted steps (skew 1) for step-ups that succeed.
async fn step_up_failures_count_per_person_and_per_address(engine: Engine) {
    let server = TestServer::start(engine).await;
    let alice = owner(&server, "alice").await;
    let alice_session = alice.login(&server, 1).await;
    let mut others = Vec::new();
    for (seed, name) in ["bob", "carol", "dave", "erin", "frank", "grace"]
        .into_iter()
        .enumerate()
    {
        let person = invite(&server, &alice_session.token, name, "member").await;
        let session = person.login(&server, 2 + u8::try_from(seed).unwrap()).await;
        others.push((person, session));
    }
    let from = |last: u8| server.client_from(std::net::IpAddr::from([127, 0, 0, last]));
    let (a, b, c, d, e) = (from(2), from(3), from(4), from(5), from(6));
    let now_s = u64::try_from(server.clock.now_ms() / 1000).unwrap();
    let codes = |person: &Enrolled| -> Vec<String> {
        [now_s - 30, now_s, now_s + 30]
            .into_iter()
            .map(|t| person.totp.generate(t))
            .collect()
    };
    let wrong = |person: &Enrolled| -> String {
        let valid = codes(person);
        (0..10u32)
            .map(|digit| digit.to_string().repeat(6))
            .find(|candidate| !valid.contains(candidate))
            .unwrap()
    };
    let step_up_by = async |client: &reqwest::Client, token: &str, code: &str| {
        post_by(
            client,
            &server,
            "/api/v1/auth/step-up",
            Some(token),
            json!({"method": "totp", "code": code}),
        )
        .await
    };
    let alice_codes = codes(&alice);
    let alice_wrong = wrong(&alice);

    // Failed logins from address A (a stranger behind the same NAT) empty
    // A's rl.public_auth bucket; alice, logged in, still steps up from A.
    for _ in 0..10 {
        let body = json!({"username": "alice", "password": "wrong wrong wrong",
            "totp": "000000", "device_public_key": device_key(99), "device_name": "x"});
        let reply = post_by(&a, &server, "/api/v1/auth/login", None, body).await;
        assert_eq!(reply.status, 401, "{:?}", reply.body);
    }
    let body = json!({"username": "alice", "password": "wrong wrong wrong",
        "totp": "000000", "device_public_key": device_key(99), "device_name": "x"});
    let reply = post_by(&a, &server, "/api/v1/auth/login", None, body).await;
    assert_eq!(reply.status, 429, "A's public_auth bucket is empty");
    let reply = step_up_by(&a, &alice_session.token, &alice_codes[0]).await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);

    // Alice's failures from A stop A (rl.step_up_address, burst 5) before
    // they stop alice: she steps up from B.
    for _ in 0..5 {
        let reply = step_up_by(&a, &alice_session.token, &alice_wrong).await;
        assert_eq!(reply.status, 401, "{:?}", reply.body);
        assert_eq!(reply.body["reason"], "totp_invalid");
    }
    let reply = step_up_by(&a, &alice_session.token, &alice_codes[1]).await;
    assert_eq!(reply.status, 429, "A is stopped, before any check");
    assert_eq!(reply.body["code"], "rate_limited");
    assert_eq!(reply.headers["retry-after"], "12");
    let reply = step_up_by(&b, &alice_session.token, &alice_codes[1]).await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);

    // Her own failures from B as well empty her bucket (rl.step_up_person,
    // burst 10): now she is stopped from any address, C included, while
    // bob steps up from C.
    for _ in 0..5 {
        let reply = step_up_by(&b, &alice_session.token, &alice_wrong).await;
        assert_eq!(reply.status, 401, "{:?}", reply.body);
    }
    let reply = step_up_by(&c, &alice_session.token, &alice_codes[2]).await;
    assert_eq!(reply.status, 429, "alice's own bucket is empty");
    assert_eq!(reply.headers["retry-after"], "60");
    let (bob, bob_session) = &others[0];
    let reply = step_up_by(&c, &bob_session.token, &codes(bob)[0]).await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);

    // Address D fails once for each of five persons: D is stopped for the
    // sixth person, who steps up from E.
    for (person, session) in &others[..5] {
        let reply = step_up_by(&d, &session.token, &wrong(person)).await;
        assert_eq!(reply.status, 401, "{:?}", reply.body);
    }
    // Grace logged in last, with the code of this step: the next one is hers.
    let (grace, grace_session) = &others[5];
    let reply = step_up_by(&d, &grace_session.token, &codes(grace)[2]).await;
    assert_eq!(reply.status, 429, "D failed against many persons");
    let reply = step_up_by(&e, &grace_session.token, &codes(grace)[2]).await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);

    // Every refusal of a presented code was audited; the 429s checked nothing.
    assert_eq!(
        audit_of(&server, "auth.step_up", "deny").await.len(),
        5 + 5 + 5
    );
    server.stop().await;
}

// ---------------------------------------------------------------- restart

async fn a_restart_keeps_persons_sessions_and_tokens(engine: Engine) {
    let server = TestServer::start(engine).await;
    let alice = owner(&server, "alice").await;
    let session = alice.login(&server, 1).await;
    let agent = post(
        &server,
        "/api/v1/tokens",
        Some(&session.token),
        json!({"kind": "agent", "name": "ci"}),
    )
    .await;
    let agent_token = agent.body["token"].as_str().unwrap().to_owned();
    let pepper_path = server.data_dir().join("token_pepper");
    let pepper = std::fs::read(&pepper_path).unwrap();
    let (db, data_dir) = server.stop().await;

    let server = TestServer::start_on(db, data_dir).await;
    assert_eq!(
        std::fs::read(&pepper_path).unwrap(),
        pepper,
        "the pepper survives"
    );
    let whoami = get(&server, "/api/v1/auth/session", Some(&session.token)).await;
    assert_eq!(whoami.status, 200);
    assert_eq!(
        whoami.body["login_session_id"],
        session.login_session_id.as_str()
    );
    let whoami = get(&server, "/api/v1/auth/session", Some(&agent_token)).await;
    assert_eq!(whoami.body["kind"], "agent");
    // The new clock starts where the old one started: move past the last used step.
    server.clock.advance(STEP * 20);
    let again = alice.login(&server, 1).await;
    assert_eq!(again.device_id, session.device_id);
    // Expiry: auth.login_session_ttl after the login.
    server.clock.set(session.expires_at);
    let whoami = get(&server, "/api/v1/auth/session", Some(&session.token)).await;
    assert_eq!(whoami.status, 401);
    server.stop().await;
}

// ---------------------------------------------------------------- enrollment

async fn enrollment_refuses_bad_codes_and_passwords(engine: Engine) {
    let server = TestServer::start(engine).await;
    let code = bootstrap(&server, "alice").await;
    assert!(code.starts_with("bothy_ec_") && code.len() == 9 + 43);

    let reply = post(
        &server,
        "/api/v1/auth/enroll",
        None,
        json!({"code": code, "password": "short"}),
    )
    .await;
    assert_eq!(reply.status, 400);
    assert_eq!(
        reply.body["errors"],
        json!([{"pointer": "/password", "code": "too_short"}])
    );
    // Confirm before start: nothing pending.
    let reply = post(
        &server,
        "/api/v1/auth/enroll/confirm",
        None,
        json!({"code": code, "totp": "123456"}),
    )
    .await;
    assert_eq!(reply.body, unauthenticated_body());

    let alice = enroll(&server, &code, PASSWORD).await;
    let unknown = format!("bothy_ec_{}", "A".repeat(43));
    for bad in [code.as_str(), unknown.as_str(), "bothy_ec_", "garbage"] {
        for path in ["/api/v1/auth/enroll", "/api/v1/auth/enroll/confirm"] {
            let body = if path.ends_with("confirm") {
                json!({"code": bad, "totp": alice.code_now(&server)})
            } else {
                json!({"code": bad, "password": PASSWORD})
            };
            let reply = post(&server, path, None, body).await;
            assert_eq!(reply.status, 401, "{path} {bad}");
            assert_eq!(reply.body, unauthenticated_body(), "{path} {bad}");
        }
        // Eight failures so far would empty the bucket soon: refill it.
        server.clock.advance(Duration::from_secs(60));
    }

    let session = alice.login(&server, 1).await;
    let invited = post(
        &server,
        "/api/v1/persons",
        Some(&session.token),
        json!({"username": "Bob", "role": "member"}),
    )
    .await;
    assert_eq!(invited.status, 201);
    assert_eq!(invited.body["person"]["username"], "bob");
    assert_eq!(invited.body["person"]["enrolled"], false);
    let bob_code = invited.body["enrollment_code"].as_str().unwrap().to_owned();
    // Case-insensitive uniqueness.
    let reply = post(
        &server,
        "/api/v1/persons",
        Some(&session.token),
        json!({"username": "BOB", "role": "owner"}),
    )
    .await;
    assert_eq!(reply.status, 409);
    assert_eq!(reply.body["reason"], "username_taken");
    let reply = post(
        &server,
        "/api/v1/persons",
        Some(&session.token),
        json!({"username": "b b", "role": "member"}),
    )
    .await;
    assert_eq!(reply.body["errors"][0]["code"], "invalid_username");

    // Expired: auth.enrollment_code_ttl (24 h) later the code is worthless.
    server.clock.advance(Duration::from_secs(24 * 3600));
    let reply = post(
        &server,
        "/api/v1/auth/enroll",
        None,
        json!({"code": bob_code, "password": PASSWORD}),
    )
    .await;
    assert_eq!(reply.body, unauthenticated_body());

    let session = alice.login(&server, 1).await;
    let persons = get(&server, "/api/v1/persons", Some(&session.token)).await;
    assert_eq!(persons.body["persons"].as_array().unwrap().len(), 2);
    let denied = audit_of(&server, "auth.enroll", "deny").await;
    assert_eq!(denied.len(), 1 + 8 + 1);
    assert!(
        denied
            .iter()
            .all(|row| row.details["reason_code"] != "unknown_username")
    );
    server.stop().await;
}

/// `POST /auth/enroll/check` (issue 16 item 4, D-372): a code that works
/// names its person and changes nothing; every code that does not work gets
/// the one 401 of enroll (no oracle between wrong, used and expired), audited
/// as an enroll refusal with operation `check`, and charged to the bucket.
async fn the_enrollment_code_is_checked_alone(engine: Engine) {
    let server = TestServer::start(engine).await;
    let code = bootstrap(&server, "alice").await;
    let check = |code: String| {
        let server = &server;
        async move {
            post(
                server,
                "/api/v1/auth/enroll/check",
                None,
                json!({"code": code}),
            )
            .await
        }
    };
    let reply = check(code.clone()).await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    assert_eq!(reply.body["username"], "alice");
    assert!(reply.body["code_expires_at"].as_i64().is_some());
    // Checked twice: still works (nothing was used), and enroll goes on.
    assert_eq!(check(code.clone()).await.status, 200);
    let alice = enroll(&server, &code, PASSWORD).await;
    // Used now: the same refusal as an unknown, a malformed and an expired one.
    let session = alice.login(&server, 1).await;
    let invited = post(
        &server,
        "/api/v1/persons",
        Some(&session.token),
        json!({"username": "bob", "role": "member"}),
    )
    .await;
    let bob_code = invited.body["enrollment_code"].as_str().unwrap().to_owned();
    let unknown = format!("bothy_ec_{}", "A".repeat(43));
    for bad in [code.as_str(), unknown.as_str(), "garbage"] {
        let reply = check(bad.to_owned()).await;
        assert_eq!(reply.status, 401, "{bad}");
        assert_eq!(reply.body, unauthenticated_body(), "{bad}");
    }
    server.clock.advance(Duration::from_secs(24 * 3600));
    let reply = check(bob_code).await;
    assert_eq!(reply.body, unauthenticated_body(), "expired");
    // A strict body: another member is a validation error, not a check.
    let reply = post(
        &server,
        "/api/v1/auth/enroll/check",
        None,
        json!({"code": "x", "password": PASSWORD}),
    )
    .await;
    assert_eq!(reply.status, 400, "{:?}", reply.body);
    let denied = audit_of(&server, "auth.enroll", "deny").await;
    let checks = denied
        .iter()
        .filter(|row| row.details["operation"] == "check")
        .count();
    assert_eq!(checks, 4, "{denied:?}");
    server.stop().await;
}

// ---------------------------------------------------------------- admin

async fn admin_reset_and_disable_end_sessions(engine: Engine) {
    let server = TestServer::start(engine).await;
    let alice = owner(&server, "alice").await;
    let owner_session = alice.login(&server, 9).await;
    let bob = invite(&server, &owner_session.token, "bob", "member").await;
    let bob_session = bob.login(&server, 1).await;
    let state = &server.state;

    // A second bootstrap is refused once an owner exists.
    let again = admin::bootstrap(
        state.db(),
        state.pepper(),
        &state.config().auth,
        server.clock.now_ms(),
        "eve",
    )
    .await;
    assert!(matches!(
        again,
        Err(IdentityError::Conflict(ConflictReason::OwnerExists))
    ));

    let reset = admin::reset_second_factor(
        state.db(),
        state.pepper(),
        &state.config().auth,
        server.clock.now_ms(),
        "BOB",
    )
    .await
    .unwrap();
    assert_eq!(reset.sessions_ended.len(), 1);
    assert_eq!(
        get(&server, "/api/v1/auth/session", Some(&bob_session.token))
            .await
            .status,
        401
    );
    // The old TOTP no longer logs in; the new enrollment does.
    let reply = post(
        &server,
        "/api/v1/auth/login",
        None,
        bob.login_body(&server, 1),
    )
    .await;
    assert_eq!(reply.status, 401);
    let bob = enroll(
        &server,
        reset.issued.code.expose(),
        "a brand new passphrase",
    )
    .await;
    let bob_session = bob.login(&server, 1).await;

    let disabled = admin::disable(
        state.db(),
        server.clock.now_ms(),
        PersonRef::Username("bob"),
        RoleAuthority::Operator,
    )
    .await
    .unwrap();
    assert!(disabled.changed);
    assert_eq!(disabled.sessions_ended.len(), 1);
    assert_eq!(
        get(&server, "/api/v1/auth/session", Some(&bob_session.token))
            .await
            .status,
        401
    );
    let reply = post(
        &server,
        "/api/v1/auth/login",
        None,
        bob.login_body(&server, 1),
    )
    .await;
    assert_eq!(reply.status, 401);
    assert!(matches!(
        admin::disable(
            state.db(),
            server.clock.now_ms(),
            PersonRef::Username("nobody"),
            RoleAuthority::Operator,
        )
        .await,
        Err(IdentityError::NotFound)
    ));

    let resets = audit_of(&server, "person.reset_second_factor", "allow").await;
    assert_eq!(resets.len(), 1);
    assert_eq!(resets[0].actor_kind, "system");
    assert_eq!(resets[0].target_id.as_deref(), Some(bob.person_id.as_str()));
    assert_eq!(
        resets[0].details,
        json!({"credentials_removed": 1, "sessions_ended": 1})
    );
    let disables = audit_of(&server, "person.disable", "allow").await;
    assert_eq!(disables[0].actor_kind, "system");
    assert_eq!(disables[0].details["sessions_ended"], 1);
    let reasons: Vec<(String,)> =
        sqlx::query_as("SELECT end_reason FROM login_sessions WHERE person_id = $1 ORDER BY id")
            .bind(&bob.person_id)
            .fetch_all(server.state.db().pool())
            .await
            .unwrap();
    assert_eq!(
        reasons,
        [
            ("session_revoked".to_owned(),),
            ("user_disabled".to_owned(),)
        ]
    );
    server.stop().await;
}

// ---------------------------------------------------------------- canary

async fn no_secret_reaches_audit_events_or_error_bodies(engine: Engine) {
    let server = TestServer::start(engine).await;
    let password = "canary-password-7f3a9c";
    let code = bootstrap(&server, "alice").await;
    let alice = enroll(&server, &code, password).await;
    let totp_secret = alice.totp.get_secret_base32();
    let session = alice.login(&server, 1).await;
    let agent = post(
        &server,
        "/api/v1/tokens",
        Some(&session.token),
        json!({"kind": "agent", "name": "canary-agent"}),
    )
    .await;
    let agent_token = agent.body["token"].as_str().unwrap().to_owned();
    let invited = post(
        &server,
        "/api/v1/persons",
        Some(&session.token),
        json!({"username": "bob", "role": "member"}),
    )
    .await;
    let bob_code = invited.body["enrollment_code"].as_str().unwrap().to_owned();

    // Failures that carry the secrets in their requests.
    let mut error_bodies = Vec::new();
    let mut send = |reply: Reply| error_bodies.push(reply.body.to_string());
    let mut body = alice.login_body(&server, 2);
    body["password"] = json!(format!("{password}x"));
    send(post(&server, "/api/v1/auth/login", None, body).await);
    let mut body = alice.login_body(&server, 2);
    body["username"] = json!(password);
    send(post(&server, "/api/v1/auth/login", None, body).await);
    let mut body = alice.login_body(&server, 2);
    body["totp"] = json!(totp_secret);
    send(post(&server, "/api/v1/auth/login", None, body).await);
    send(
        post(
            &server,
            "/api/v1/auth/enroll",
            None,
            json!({"code": code, "password": password}),
        )
        .await,
    );
    send(
        post(
            &server,
            "/api/v1/auth/enroll",
            None,
            json!({"code": bob_code, "password": "tiny"}),
        )
        .await,
    );
    send(
        post(
            &server,
            "/api/v1/auth/enroll/confirm",
            None,
            json!({"code": bob_code, "totp": "000000"}),
        )
        .await,
    );
    send(
        post(
            &server,
            "/api/v1/auth/step-up",
            Some(&agent_token),
            json!({"method": "totp", "code": "1"}),
        )
        .await,
    );
    send(
        post(
            &server,
            "/api/v1/auth/step-up",
            Some(&session.token),
            json!({"method": password, "code": "1"}),
        )
        .await,
    );
    send(
        post(
            &server,
            "/api/v1/auth/login",
            None,
            json!({"username": "alice", "password": password, "token": session.token}),
        )
        .await,
    );
    send(
        get(
            &server,
            "/api/v1/persons",
            Some(&format!("{}x", session.token)),
        )
        .await,
    );
    send(
        post(
            &server,
            "/api/v1/tokens",
            Some(&session.token),
            json!({"kind": "agent", "name": format!("{password}!")}),
        )
        .await,
    );
    assert_eq!(error_bodies.len(), 11);

    let canaries = [
        password,
        totp_secret.as_str(),
        &totp_secret[..16],
        session.token.as_str(),
        &session.token[9..],
        agent_token.as_str(),
        &agent_token[9..],
        code.as_str(),
        &code[9..],
        bob_code.as_str(),
        &bob_code[9..],
    ];
    let stored = audit_and_event_text(&server).await;
    assert!(stored.contains("auth.login"), "the audit was read");
    for canary in canaries {
        assert!(!stored.contains(canary), "audit or events hold a secret");
        for body in &error_bodies {
            assert!(
                !body.contains(canary),
                "an error body holds a secret: {body}"
            );
        }
    }
    // At rest: only hashes and sealed secrets.
    let tables: Vec<(String,)> = sqlx::query_as(
        "SELECT password_hash FROM persons WHERE password_hash IS NOT NULL \
         UNION ALL SELECT secret_sealed FROM totp_credentials \
         UNION ALL SELECT token_hash FROM login_sessions \
         UNION ALL SELECT token_hash FROM api_tokens \
         UNION ALL SELECT code_hash FROM enrollment_codes",
    )
    .fetch_all(server.state.db().pool())
    .await
    .unwrap();
    assert!(tables.len() >= 6);
    for (value,) in &tables {
        for canary in canaries {
            assert!(
                !value.contains(canary),
                "a secret is stored as it was handed out"
            );
        }
    }
    server.stop().await;
}

// ---------------------------------------------------------------- groups

async fn groups_hold_persons_only(engine: Engine) {
    use bothy_server::audit::Actor;
    use bothy_server::identity::groups;
    use bothy_server::identity::persons::Username;

    let server = TestServer::start(engine).await;
    let alice = owner(&server, "alice").await;
    let session = alice.login(&server, 1).await;
    let agent = post(
        &server,
        "/api/v1/tokens",
        Some(&session.token),
        json!({"kind": "agent", "name": "bot"}),
    )
    .await;
    let alice_id = uuid(&json!(alice.person_id));
    let agent_id = uuid(&agent.body["principal_id"]);
    let actor = Actor::Person(alice_id);
    let db = server.state.db();
    let now = server.clock.now_ms();

    let mut uow = db.begin(now).await.unwrap();
    let ops = groups::create(&mut uow, actor, &Username::parse("Ops").unwrap())
        .await
        .unwrap();
    assert!(
        groups::add_member(&mut uow, actor, ops, alice_id)
            .await
            .unwrap()
    );
    assert!(
        !groups::add_member(&mut uow, actor, ops, alice_id)
            .await
            .unwrap()
    );
    uow.commit().await.unwrap();

    let mut uow = db.begin(now).await.unwrap();
    assert!(matches!(
        groups::create(&mut uow, actor, &Username::parse("ops").unwrap()).await,
        Err(IdentityError::Conflict(ConflictReason::GroupNameTaken))
    ));
    drop(uow);
    let mut uow = db.begin(now).await.unwrap();
    assert!(matches!(
        groups::add_member(&mut uow, actor, ops, agent_id).await,
        Err(IdentityError::NotFound)
    ));
    drop(uow);

    let mut conn = db.pool().acquire().await.unwrap();
    assert_eq!(groups::members(&mut conn, ops).await.unwrap(), [alice_id]);
    let of = groups::groups_of(&mut conn, alice_id).await.unwrap();
    assert_eq!(of.len(), 1);
    assert_eq!(of[0].name.as_str(), "ops");
    drop(conn);

    let mut uow = db.begin(now).await.unwrap();
    assert!(
        groups::remove_member(&mut uow, actor, ops, alice_id)
            .await
            .unwrap()
    );
    uow.commit().await.unwrap();
    let mut conn = db.pool().acquire().await.unwrap();
    assert!(groups::members(&mut conn, ops).await.unwrap().is_empty());
    drop(conn);
    let operations: Vec<String> = audit_of(&server, "group.manage", "allow")
        .await
        .iter()
        .map(|row| row.details["operation"].as_str().unwrap().to_owned())
        .collect();
    let mut sorted = operations.clone();
    sorted.sort_unstable();
    assert_eq!(
        sorted,
        ["add_member", "add_member", "create", "remove_member"]
    );
    server.stop().await;
}

both_engines!(
    enroll_login_whoami_step_up_consume_once,
    login_failures_all_answer_the_same,
    totp_codes_expire_and_are_never_accepted_twice,
    step_ups_expire_belong_to_one_session_and_are_consumed_once,
    revocations_and_logout_take_effect_at_once,
    agents_and_apps_authenticate_but_are_not_persons,
    failed_logins_are_rate_limited,
    step_up_failures_count_per_person_and_per_address,
    concurrent_logins_get_their_answers,
    a_restart_keeps_persons_sessions_and_tokens,
    enrollment_refuses_bad_codes_and_passwords,
    the_enrollment_code_is_checked_alone,
    admin_reset_and_disable_end_sessions,
    no_secret_reaches_audit_events_or_error_bodies,
    groups_hold_persons_only,
);
