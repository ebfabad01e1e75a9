//! Permissions on hosts (spec 24 sections 7.3, 8.1–8.4, 13; DESIGN 3.2) on both
//! engines, against the real server on port 0 over TLS: grants, groups, I6,
//! revocation, host.read, and the one `authorize` of every terminal entry point.
//!
//! Everything is set up through the real HTTP API (persons, hosts, pairing,
//! confirmation, grants, groups). The routes that open and attach a terminal
//! come with the next issue; until then the terminal decisions (TM-T08, TM-T09,
//! TM-T17, TM-T28 (a)) are checked by calling
//! `permissions::authorize::authorize_audited` in-process against the test
//! server's own database — the function those routes will call — with the
//! principal the server authenticates from the person's real bearer token.
//!
//! Terminal sessions do not exist yet either: the revocation tests insert
//! `terminal_sessions` rows directly, as the terminal module will write them
//! (state `active` or `detached`, the person's valid session user), and check
//! that the rights change closed exactly the right ones.
//!
//! Time moves only through the server's manual clock; nothing sleeps.

#![allow(clippy::unwrap_used)] // test bodies are plain fns called by the generated #[test]s

use bothy_testkit as support;
use bothy_testkit::assert_problem_reason;
use bothy_testkit::assert_problem_reason as assert_reply;
use bothy_testkit::hosts as hosts_common;
use bothy_testkit::identity as identity_common;

use std::time::Duration;

use bothy_server::clock::Clock;
use bothy_server::db::Engine;
use bothy_server::events::{Audience, DurableEvent, EventKind};
use bothy_server::hosts::{self, Host};
use bothy_server::http::ApiError;
use bothy_server::identity::principal::{self, Principal};
use bothy_server::permissions::authorize::{Action, Authorized, authorize_audited};
use hosts_common::*;
use identity_common::*;
use reqwest::header::{HeaderName, HeaderValue};
use serde_json::{Map, Value, json};
use sqlx::Row;
use support::both_engines;
use support::server::TestServer;
use support::ws;
use uuid::Uuid;

fn uuid(text: &str) -> Uuid {
    bothy_proto::ids::parse_uuid(text).unwrap()
}

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// The server with its first owner alice and the member bob, both logged in.
struct World {
    server: TestServer,
    alice: Person,
    bob: Person,
}

async fn world(engine: Engine) -> World {
    let server = TestServer::start(engine).await;
    let alice = owner_person(&server, "alice").await;
    let bob = invited_person(&server, &alice, "bob", "member", 2).await;
    World { server, alice, bob }
}

/// `POST /api/v1/grants`.
async fn grant(
    server: &TestServer,
    token: &str,
    host_id: &str,
    recipient_kind: &str,
    recipient_id: &str,
) -> Reply {
    post(
        server,
        "/api/v1/grants",
        Some(token),
        json!({"host_id": host_id, "recipient_kind": recipient_kind, "recipient_id": recipient_id}),
    )
    .await
}

/// A grant that must be created; the 201 body.
async fn granted(
    server: &TestServer,
    by: &Person,
    host_id: &str,
    recipient_kind: &str,
    recipient_id: &str,
) -> Value {
    let reply = grant(server, by.token(), host_id, recipient_kind, recipient_id).await;
    assert_eq!(reply.status, 201, "grant: {:?}", reply.body);
    reply.body
}

/// `POST /api/v1/grants/{id}/revoke`; the 200 body.
async fn revoke(server: &TestServer, by: &Person, grant_id: &str) -> Value {
    let reply = post_empty(
        server,
        &format!("/api/v1/grants/{grant_id}/revoke"),
        by.token(),
    )
    .await;
    assert_eq!(reply.status, 200, "revoke: {:?}", reply.body);
    reply.body
}

/// A group made through `POST /api/v1/groups`; its ID.
async fn group(server: &TestServer, by: &Person, name: &str) -> String {
    let reply = post(
        server,
        "/api/v1/groups",
        Some(by.token()),
        json!({"name": name}),
    )
    .await;
    assert_eq!(reply.status, 201, "group: {:?}", reply.body);
    reply.body["group"]["id"].as_str().unwrap().to_owned()
}

/// `POST /api/v1/groups/{id}/members`.
async fn join(server: &TestServer, by: &Person, group_id: &str, person_id: &str) -> Reply {
    post(
        server,
        &format!("/api/v1/groups/{group_id}/members"),
        Some(by.token()),
        json!({"person_id": person_id}),
    )
    .await
}

/// `POST /api/v1/groups/{id}/members/{person_id}/remove`; the 200 body.
async fn leave(server: &TestServer, by: &Person, group_id: &str, person_id: &str) -> Value {
    let reply = post_empty(
        server,
        &format!("/api/v1/groups/{group_id}/members/{person_id}/remove"),
        by.token(),
    )
    .await;
    assert_eq!(reply.status, 200, "leave: {:?}", reply.body);
    reply.body
}

/// A host confirmed with `declared_server_host = true` (2.3): createHost,
/// host.pair, confirmHost through the routes.
async fn declared_server_host(
    server: &TestServer,
    by: &Person,
    assignee: Option<&str>,
    keys_seed: u8,
    users: &[&str],
    assignments: &[Assignment<'_>],
) -> String {
    let (host_id, code) = create_host(server, by, "server", assignee).await;
    let keys = HostKeys::generate(keys_seed);
    let paired = pair(server, &code, &keys, users).await;
    assert_eq!(paired.status, 200, "host.pair: {:?}", paired.body);
    let confirmed = confirm(
        server,
        by,
        &host_id,
        &reply_prefix(&paired),
        "none",
        None,
        true,
        assignments,
    )
    .await;
    assert_eq!(confirmed.status, 200, "confirmHost: {:?}", confirmed.body);
    assert_eq!(confirmed.body["host"]["is_server_host"], true);
    host_id
}

/// The host's `ETag` as stored (`"<version>"`).
async fn etag_of(server: &TestServer, host_id: &str) -> String {
    let version: i64 = sqlx::query_scalar("SELECT version FROM hosts WHERE id = $1")
        .bind(host_id)
        .fetch_one(server.state.db().pool())
        .await
        .unwrap();
    format!("\"{version}\"")
}

/// setHostLlmCredentials through the route (step-up, `If-Match`).
async fn set_llm(
    server: &TestServer,
    by: &Person,
    host_id: &str,
    llm_credentials: &str,
    holder: Option<&str>,
) -> Reply {
    let step_up_id = step_up(server, by).await;
    let mut body = json!({
        "llm_credentials": llm_credentials,
        "reason": "the login of this host changed",
        "step_up_id": step_up_id,
    });
    if let Some(holder) = holder {
        body["credential_holder_id"] = json!(holder);
    }
    let etag = etag_of(server, host_id).await;
    let response = server
        .client
        .put(server.url(&format!("/api/v1/hosts/{host_id}/llm-credentials")))
        .bearer_auth(by.token())
        .header(
            HeaderName::from_static("if-match"),
            HeaderValue::from_str(&etag).unwrap(),
        )
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let text = response.text().await.unwrap();
    let body = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap()
    };
    Reply {
        status,
        headers,
        body,
    }
}

/// The principal the server authenticates from `token` now.
async fn principal_of(server: &TestServer, token: &str) -> Principal {
    let state = &server.state;
    principal::authenticate(state.db(), state.pepper(), token, server.clock.now_ms())
        .await
        .unwrap()
        .expect("the token authenticates")
}

async fn load_host(server: &TestServer, host_id: &str) -> Host {
    let mut conn = server.state.db().pool().acquire().await.unwrap();
    hosts::load(&mut conn, uuid(host_id))
        .await
        .unwrap()
        .expect("the host exists")
}

/// The terminal decision for `token` on `host_id`: what terminal.open or
/// terminal.attach will do, through `authorize_audited` on the server's
/// database (the routes come with the next issue). A refusal comes back as the
/// problem body the route will answer.
async fn terminal(
    server: &TestServer,
    token: &str,
    host_id: &str,
    action: Action,
) -> Result<Authorized, Value> {
    let principal = principal_of(server, token).await;
    let host = load_host(server, host_id).await;
    authorize_audited(
        server.state.db(),
        server.clock.now_ms(),
        &principal,
        action,
        &host,
    )
    .await
    .map_err(|error| ApiError::from(error).body())
}

#[track_caller]
fn assert_problem(result: Result<Authorized, Value>, status: u16, code: &str, reason: &str) {
    let body = match result {
        Ok(authorized) => panic!("allowed: {authorized:?}"),
        Err(body) => body,
    };
    assert_problem_reason(&body, status, code, Some(reason));
}

/// The deny entries of `action` with this `reason_code`.
async fn denials(server: &TestServer, action: &str, reason_code: &str) -> Vec<AuditRow> {
    audit_of(server, action, "deny")
        .await
        .into_iter()
        .filter(|row| row.details["reason_code"] == reason_code)
        .collect()
}

/// Inserts a terminal session of `person` on the host as the terminal module
/// will write it (their valid session user, profile shell); its ID.
async fn insert_session(
    server: &TestServer,
    host_id: &str,
    person: &Person,
    state: &str,
) -> String {
    let pool = server.state.db().pool();
    let session_user: String = sqlx::query_scalar(
        "SELECT id FROM host_session_users WHERE host_id = $1 AND person_id = $2 AND ended_at IS NULL",
    )
    .bind(host_id)
    .bind(person.id())
    .fetch_one(pool)
    .await
    .unwrap();
    let now = server.clock.now_ms();
    let id = bothy_proto::ids::uuid_v7(u64::try_from(now).unwrap())
        .unwrap()
        .hyphenated()
        .to_string();
    sqlx::query(
        "INSERT INTO terminal_sessions (id, host_id, person_id, login_session_id, device_id, \
         host_session_user_id, profile, state, created_at, started_at, version) \
         VALUES ($1, $2, $3, $4, $5, $6, 'shell', $7, $8, $8, 1)",
    )
    .bind(&id)
    .bind(host_id)
    .bind(person.id())
    .bind(&person.session.login_session_id)
    .bind(&person.session.device_id)
    .bind(&session_user)
    .bind(state)
    .bind(now)
    .execute(pool)
    .await
    .unwrap();
    id
}

/// `(state, close_reason)` of a terminal session.
async fn session_state(server: &TestServer, id: &str) -> (String, Option<String>) {
    let row = sqlx::query("SELECT state, close_reason FROM terminal_sessions WHERE id = $1")
        .bind(id)
        .fetch_one(server.state.db().pool())
        .await
        .unwrap();
    (row.get("state"), row.get("close_reason"))
}

async fn assert_open(server: &TestServer, id: &str) {
    let (state, reason) = session_state(server, id).await;
    assert_ne!(state, "closed", "{id} was closed ({reason:?})");
}

async fn assert_closed_revoked(server: &TestServer, id: &str) {
    assert_eq!(
        session_state(server, id).await,
        ("closed".to_owned(), Some("access_revoked".to_owned()))
    );
}

/// An API token of a new agent or app; the token.
async fn service_token(server: &TestServer, by: &Person, kind: &str, name: &str) -> String {
    let reply = post(
        server,
        "/api/v1/tokens",
        Some(by.token()),
        json!({"kind": kind, "name": name}),
    )
    .await;
    assert_eq!(reply.status, 201, "{:?}", reply.body);
    reply.body["token"].as_str().unwrap().to_owned()
}

// ---------------------------------------------------------------------------
// TM-T08: SR10
// ---------------------------------------------------------------------------

async fn tm_t08_non_owner_only_on_their_own_host_and_never_the_server_host(engine: Engine) {
    let World { server, alice, bob } = world(engine).await;
    let users = ["alice-su", "bob-su"];
    let both = [(alice.id(), "alice-su"), (bob.id(), "bob-su")];
    // Someone else's host (assigned to alice), bob's own host, the server host
    // (declared, and even assigned to bob).
    let alices = active_host(
        &server,
        &alice,
        "alices-box",
        Some(alice.id()),
        11,
        &users,
        &both,
    )
    .await
    .host_id;
    let bobs = active_host(
        &server,
        &alice,
        "bobs-box",
        Some(bob.id()),
        12,
        &users,
        &both,
    )
    .await
    .host_id;
    let server_host =
        declared_server_host(&server, &alice, Some(bob.id()), 13, &users, &both).await;

    // Without a grant bob has no terminal at all on his own host.
    assert_problem(
        terminal(&server, bob.token(), &bobs, Action::TerminalOpen).await,
        403,
        "forbidden",
        "no_permission",
    );

    // Grants on all three; the preview already says which take effect.
    let on_alices = granted(&server, &alice, &alices, "person", bob.id()).await;
    assert_eq!(
        on_alices["preview"],
        json!({"effective": false, "hint": "terminal_not_effective"})
    );
    let on_bobs = granted(&server, &alice, &bobs, "person", bob.id()).await;
    assert_eq!(on_bobs["preview"], json!({"effective": true}));
    let on_server = granted(&server, &alice, &server_host, "person", bob.id()).await;
    assert_eq!(
        on_server["preview"],
        json!({"effective": false, "hint": "terminal_not_effective"})
    );

    // Someone else's host: 403 terminal_denied not_host_assignee (open and attach).
    for action in [Action::TerminalOpen, Action::TerminalAttach] {
        assert_problem(
            terminal(&server, bob.token(), &alices, action).await,
            403,
            "terminal_denied",
            "not_host_assignee",
        );
    }
    // Their own host: allowed, in their own session user.
    let allowed = terminal(&server, bob.token(), &bobs, Action::TerminalOpen)
        .await
        .unwrap();
    assert_eq!(allowed.person_id, uuid(bob.id()));
    assert!(!allowed.is_owner);
    assert!(!allowed.foreign_assignee);
    assert_eq!(allowed.session_user.unwrap().os_user, "bob-su");
    // The server host: 403 terminal_denied server_host_owner_only.
    assert_problem(
        terminal(&server, bob.token(), &server_host, Action::TerminalOpen).await,
        403,
        "terminal_denied",
        "server_host_owner_only",
    );

    // Owners: everywhere, the server host included; on bob's host with
    // foreign_assignee (8.4).
    let owner_on_bobs = terminal(&server, alice.token(), &bobs, Action::TerminalOpen)
        .await
        .unwrap();
    assert!(owner_on_bobs.is_owner && owner_on_bobs.foreign_assignee);
    assert_eq!(owner_on_bobs.session_user.unwrap().os_user, "alice-su");
    let owner_on_server = terminal(&server, alice.token(), &server_host, Action::TerminalOpen)
        .await
        .unwrap();
    assert!(owner_on_server.foreign_assignee);
    let owner_on_own = terminal(&server, alice.token(), &alices, Action::TerminalAttach)
        .await
        .unwrap();
    assert!(!owner_on_own.foreign_assignee);

    // A host that reports itself as the server host (2.3) counts the same. The
    // control connection's report comes with the next issue, so the column is
    // set as that report will set it.
    sqlx::query("UPDATE hosts SET reported_is_server_host = $1 WHERE id = $2")
        .bind(true)
        .bind(&bobs)
        .execute(server.state.db().pool())
        .await
        .unwrap();
    assert_problem(
        terminal(&server, bob.token(), &bobs, Action::TerminalOpen).await,
        403,
        "terminal_denied",
        "server_host_owner_only",
    );

    // Every refusal is a deny entry of its action with the reason and the host.
    let assignee = denials(&server, "terminal.open", "not_host_assignee").await;
    assert_eq!(assignee.len(), 1);
    assert_eq!(assignee[0].actor_id.as_deref(), Some(bob.id()));
    assert_eq!(assignee[0].target_kind.as_deref(), Some("host"));
    assert_eq!(assignee[0].target_id.as_deref(), Some(alices.as_str()));
    assert_eq!(assignee[0].details["host_id"], alices.as_str());
    assert_eq!(
        denials(&server, "terminal.attach", "not_host_assignee")
            .await
            .len(),
        1
    );
    let server_only = denials(&server, "terminal.open", "server_host_owner_only").await;
    assert_eq!(server_only.len(), 2);
    assert_eq!(
        denials(&server, "terminal.open", "no_permission")
            .await
            .len(),
        1
    );
    // Allowed decisions write nothing: the open route writes its allow entry.
    assert!(audit_of(&server, "terminal.open", "allow").await.is_empty());
    server.stop().await;
}

// ---------------------------------------------------------------------------
// TM-T09: I6
// ---------------------------------------------------------------------------

async fn tm_t09_i6_on_grants_declarations_and_openings(engine: Engine) {
    let World { server, alice, bob } = world(engine).await;
    let dave = invited_person(&server, &alice, "dave", "owner", 4).await;
    let devs = group(&server, &alice, "devs").await;
    let users = ["alice-su", "bob-su", "dave-su"];
    let everyone = [
        (alice.id(), "alice-su"),
        (bob.id(), "bob-su"),
        (dave.id(), "dave-su"),
    ];
    // alice's personal subscription is the login of this host.
    let personal = active_host_declared(
        &server,
        &alice,
        "personal",
        Some(alice.id()),
        21,
        &users,
        ("personal", Some(alice.id())),
        &everyone,
    )
    .await
    .host_id;
    let version = permission_version(&server).await;

    // A grant to a second person: 409 i6_violation, audited, nothing stored.
    let reply = grant(&server, alice.token(), &personal, "person", bob.id()).await;
    assert_reply(&reply, 409, "i6_violation", None);
    // A grant to a group: the same.
    let reply = grant(&server, alice.token(), &personal, "group", &devs).await;
    assert_reply(&reply, 409, "i6_violation", None);
    let refused = denials(&server, "grant.create", "invariant_violation").await;
    assert_eq!(refused.len(), 2);
    for row in &refused {
        assert_eq!(row.actor_id.as_deref(), Some(alice.id()));
        assert_eq!(row.target_kind.as_deref(), Some("host"));
        assert_eq!(row.target_id.as_deref(), Some(personal.as_str()));
    }
    let mut recipients: Vec<String> = refused
        .iter()
        .map(|row| row.details["recipient_id"].as_str().unwrap().to_owned())
        .collect();
    recipients.sort();
    let mut expected = vec![bob.id().to_owned(), devs.clone()];
    expected.sort();
    assert_eq!(recipients, expected);
    assert_eq!(server.db().count("grants").await, 0);
    assert!(audit_of(&server, "grant.create", "allow").await.is_empty());
    assert_eq!(permission_version(&server).await, version);
    // A grant to the holder is the one grant such a host may have.
    let holders = granted(&server, &alice, &personal, "person", alice.id()).await;
    assert_eq!(holders["preview"], json!({"effective": true}));

    // Switching to personal while a grant to others exists: 409 i6_violation.
    let organization = active_host(
        &server,
        &alice,
        "shared",
        Some(bob.id()),
        22,
        &users,
        &everyone,
    )
    .await
    .host_id;
    granted(&server, &alice, &organization, "person", bob.id()).await;
    let reply = set_llm(&server, &alice, &organization, "personal", Some(alice.id())).await;
    assert_reply(&reply, 409, "i6_violation", None);
    assert_eq!(
        load_host(&server, &organization)
            .await
            .llm_credentials
            .as_str(),
        "none"
    );
    // The same with a group grant only.
    let team = active_host(&server, &alice, "team", None, 23, &users, &everyone)
        .await
        .host_id;
    granted(&server, &alice, &team, "group", &devs).await;
    let reply = set_llm(&server, &alice, &team, "personal", Some(alice.id())).await;
    assert_reply(&reply, 409, "i6_violation", None);

    // A second owner opens on the personal host: 403 terminal_denied
    // i6_holder_only (owners too), audited; the holder opens.
    for action in [Action::TerminalOpen, Action::TerminalAttach] {
        assert_problem(
            terminal(&server, dave.token(), &personal, action).await,
            403,
            "terminal_denied",
            "i6_holder_only",
        );
    }
    let holder = terminal(&server, alice.token(), &personal, Action::TerminalOpen)
        .await
        .unwrap();
    assert_eq!(holder.session_user.unwrap().os_user, "alice-su");
    let refused = denials(&server, "terminal.open", "i6_holder_only").await;
    assert_eq!(refused.len(), 1);
    assert_eq!(refused[0].actor_id.as_deref(), Some(dave.id()));
    assert_eq!(
        denials(&server, "terminal.attach", "i6_holder_only")
            .await
            .len(),
        1
    );
    server.stop().await;
}

// ---------------------------------------------------------------------------
// TM-T28 (a): SR12
// ---------------------------------------------------------------------------

async fn tm_t28a_owner_and_assignee_without_a_session_user(engine: Engine) {
    let World { server, alice, bob } = world(engine).await;
    // bob is the assignee and has a grant; the host reports both names, but
    // nobody has an assignment.
    let host = active_host(
        &server,
        &alice,
        "bobs-box",
        Some(bob.id()),
        31,
        &["alice-su", "bob-su"],
        &[],
    )
    .await
    .host_id;
    granted(&server, &alice, &host, "person", bob.id()).await;
    for person in [&alice, &bob] {
        assert_problem(
            terminal(&server, person.token(), &host, Action::TerminalOpen).await,
            403,
            "terminal_denied",
            "no_session_user",
        );
    }
    let refused = denials(&server, "terminal.open", "no_session_user").await;
    let mut actors: Vec<String> = refused
        .iter()
        .map(|row| row.actor_id.clone().unwrap())
        .collect();
    actors.sort();
    let mut expected = vec![alice.id().to_owned(), bob.id().to_owned()];
    expected.sort();
    assert_eq!(actors, expected);
    for row in &refused {
        assert_eq!(row.target_id.as_deref(), Some(host.as_str()));
    }

    // An assignment whose name the host no longer reports counts as none (the
    // next report after `session-user remove`; the control connection comes
    // with the next issue, so the column is set as that report will set it).
    let other = active_host(
        &server,
        &alice,
        "other",
        Some(bob.id()),
        32,
        &["bob-su"],
        &[(bob.id(), "bob-su")],
    )
    .await
    .host_id;
    granted(&server, &alice, &other, "person", bob.id()).await;
    terminal(&server, bob.token(), &other, Action::TerminalOpen)
        .await
        .unwrap();
    sqlx::query("UPDATE hosts SET reported_session_users = $1 WHERE id = $2")
        .bind(json!([{"name": "someone-else", "workdirs": []}]).to_string())
        .bind(&other)
        .execute(server.state.db().pool())
        .await
        .unwrap();
    assert_problem(
        terminal(&server, bob.token(), &other, Action::TerminalAttach).await,
        403,
        "terminal_denied",
        "no_session_user",
    );
    server.stop().await;
}

// ---------------------------------------------------------------------------
// TM-T17: agents and apps
// ---------------------------------------------------------------------------

async fn tm_t17_agents_and_apps_are_refused_and_audited(engine: Engine) {
    let World { server, alice, bob } = world(engine).await;
    let host = active_host(
        &server,
        &alice,
        "box",
        Some(bob.id()),
        41,
        &["bob-su"],
        &[(bob.id(), "bob-su")],
    )
    .await
    .host_id;
    let devs = group(&server, &alice, "devs").await;
    let a_grant = granted(&server, &alice, &host, "person", bob.id()).await["grant"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let agent = service_token(&server, &alice, "agent", "ci-bot").await;
    let app = service_token(&server, &alice, "app", "dashboard").await;

    for (token, kind) in [(&agent, "agent"), (&app, "app")] {
        let body = json!({"host_id": host, "recipient_kind": "person", "recipient_id": bob.id()});
        let calls = [
            (
                "grant.create",
                post(&server, "/api/v1/grants", Some(token), body).await,
            ),
            (
                "host.read",
                get(
                    &server,
                    &format!("/api/v1/grants?host_id={host}"),
                    Some(token),
                )
                .await,
            ),
            (
                "grant.revoke",
                post_empty(&server, &format!("/api/v1/grants/{a_grant}/revoke"), token).await,
            ),
            (
                "group.manage",
                post(
                    &server,
                    "/api/v1/groups",
                    Some(token),
                    json!({"name": "ops"}),
                )
                .await,
            ),
            (
                "identity.read",
                get(&server, "/api/v1/groups", Some(token)).await,
            ),
            (
                "group.manage",
                post(
                    &server,
                    &format!("/api/v1/groups/{devs}/members"),
                    Some(token),
                    json!({"person_id": bob.id()}),
                )
                .await,
            ),
            (
                "group.manage",
                post_empty(
                    &server,
                    &format!("/api/v1/groups/{devs}/members/{}/remove", bob.id()),
                    token,
                )
                .await,
            ),
            (
                "person.enable",
                post_empty(
                    &server,
                    &format!("/api/v1/persons/{}/enable", bob.id()),
                    token,
                )
                .await,
            ),
        ];
        for (_, reply) in &calls {
            assert_reply(reply, 403, "forbidden", Some("subject_kind_not_allowed"));
        }
        // The terminal actions themselves.
        for action in [Action::TerminalOpen, Action::TerminalAttach] {
            assert_problem(
                terminal(&server, token, &host, action).await,
                403,
                "forbidden",
                "subject_kind_not_allowed",
            );
        }
        // Each call is one deny entry of its action, by this agent or app.
        let rows: Vec<AuditRow> = audit_rows(&server)
            .await
            .into_iter()
            .filter(|row| row.decision == "deny" && row.actor_kind == kind)
            .collect();
        let mut actions: Vec<&str> = rows.iter().map(|row| row.action.as_str()).collect();
        actions.sort_unstable();
        let mut expected: Vec<&str> = calls.iter().map(|(action, _)| *action).collect();
        expected.extend(["terminal.open", "terminal.attach"]);
        expected.sort_unstable();
        assert_eq!(actions, expected, "{kind}");
        for row in &rows {
            assert_eq!(row.details["reason_code"], "subject_kind_not_allowed");
        }
        let terminal_rows: Vec<_> = rows
            .iter()
            .filter(|row| row.action.starts_with("terminal."))
            .collect();
        for row in terminal_rows {
            assert_eq!(row.target_id.as_deref(), Some(host.as_str()));
        }
    }
    // Nothing changed: the grant holds, no group was made.
    let list = get(&server, "/api/v1/grants", Some(alice.token())).await;
    assert_eq!(list.body["grants"][0]["valid"], true);
    let groups = get(&server, "/api/v1/groups", Some(alice.token())).await;
    assert_eq!(groups.body["groups"].as_array().unwrap().len(), 1);

    // A member is an owner_required denial on the same routes.
    let reply = grant(&server, bob.token(), &host, "person", bob.id()).await;
    assert_reply(&reply, 403, "forbidden", Some("owner_required"));
    server.stop().await;
}

// ---------------------------------------------------------------------------
// Grants: validation, duplicates, expiry, lists, group previews
// ---------------------------------------------------------------------------

async fn grants_are_validated_listed_and_expire(engine: Engine) {
    let World { server, alice, bob } = world(engine).await;
    let carol = invited_person(&server, &alice, "carol", "member", 3).await;
    let host = active_host(
        &server,
        &alice,
        "bobs-box",
        Some(bob.id()),
        51,
        &["alice-su", "bob-su", "carol-su"],
        &[
            (alice.id(), "alice-su"),
            (bob.id(), "bob-su"),
            (carol.id(), "carol-su"),
        ],
    )
    .await
    .host_id;
    let devs = group(&server, &alice, "devs").await;
    let agent = service_token(&server, &alice, "agent", "ci-bot").await;
    let agent_id = match principal_of(&server, &agent).await {
        Principal::Service(service) => service.principal_id.hyphenated().to_string(),
        Principal::Person(_) => panic!("an agent"),
    };
    let unknown = Uuid::from_u128(42).hyphenated().to_string();
    let now = server.clock.now_ms();

    for (body, pointer, code) in [
        (
            json!({"host_id": host, "recipient_kind": "person", "recipient_id": unknown}),
            "/recipient_id",
            "unknown_user",
        ),
        // Agents and apps never receive grants (8.1).
        (
            json!({"host_id": host, "recipient_kind": "person", "recipient_id": agent_id}),
            "/recipient_id",
            "unknown_user",
        ),
        (
            json!({"host_id": host, "recipient_kind": "group", "recipient_id": unknown}),
            "/recipient_id",
            "unknown_group",
        ),
        (
            json!({"host_id": host, "recipient_kind": "agent", "recipient_id": agent_id}),
            "/recipient_kind",
            "invalid",
        ),
        (
            json!({"host_id": unknown, "recipient_kind": "person", "recipient_id": bob.id()}),
            "/host_id",
            "unknown_host",
        ),
        (
            json!({"host_id": host, "recipient_kind": "person", "recipient_id": bob.id(), "expires_at": now}),
            "/expires_at",
            "not_in_future",
        ),
        (
            json!({"host_id": host, "recipient_kind": "person", "recipient_id": bob.id(), "level": 1}),
            "/level",
            "unknown_member",
        ),
        (
            json!({"host_id": host, "recipient_kind": "person"}),
            "/recipient_id",
            "required",
        ),
    ] {
        let reply = post(&server, "/api/v1/grants", Some(alice.token()), body.clone()).await;
        assert_eq!(reply.status, 400, "{body}: {:?}", reply.body);
        assert_eq!(
            reply.body["errors"],
            json!([{"pointer": pointer, "code": code}]),
            "{body}"
        );
    }

    // One that expires in a minute; the same again is a conflict.
    let version = permission_version(&server).await;
    let expires_at = now + 60_000;
    let reply = post(
        &server,
        "/api/v1/grants",
        Some(alice.token()),
        json!({"host_id": host, "recipient_kind": "person", "recipient_id": bob.id(), "expires_at": expires_at}),
    )
    .await;
    assert_eq!(reply.status, 201, "{:?}", reply.body);
    let first = reply.body["grant"].clone();
    assert_eq!(first["expires_at"], expires_at);
    assert_eq!(first["valid"], true);
    assert_eq!(first["target_kind"], "host");
    assert_eq!(first["capability"], "terminal");
    assert_eq!(first["created_by"], alice.id());
    assert_eq!(permission_version(&server).await, version + 1);
    let created = audit_of(&server, "grant.create", "allow").await;
    assert_eq!(created.len(), 1);
    assert_eq!(created[0].target_kind.as_deref(), Some("grant"));
    assert_eq!(created[0].details["host_id"], host.as_str());
    assert_eq!(created[0].details["recipient_kind"], "person");
    assert_eq!(created[0].details["effective"], true);
    assert_reply(
        &grant(&server, alice.token(), &host, "person", bob.id()).await,
        409,
        "conflict",
        Some("grant_exists"),
    );
    terminal(&server, bob.token(), &host, Action::TerminalOpen)
        .await
        .unwrap();

    // At `expires_at` it has expired: no terminal, no host.read.
    server.clock.advance(Duration::from_secs(60));
    assert_problem(
        terminal(&server, bob.token(), &host, Action::TerminalOpen).await,
        403,
        "forbidden",
        "no_permission",
    );
    let listed = get(
        &server,
        &format!("/api/v1/grants?host_id={host}"),
        Some(alice.token()),
    )
    .await;
    assert_eq!(listed.status, 200, "{:?}", listed.body);
    assert_eq!(listed.body["grants"][0]["valid"], false);
    // A new grant replaces the expired one.
    let second = granted(&server, &alice, &host, "person", bob.id()).await;
    let replaced = audit_of(&server, "grant.create", "allow").await;
    assert_eq!(replaced[1].details["replaced_grant_id"], first["id"]);
    terminal(&server, bob.token(), &host, Action::TerminalOpen)
        .await
        .unwrap();

    // A group grant: previewed per member (bob is the assignee, carol is not,
    // alice is an owner) and overall.
    for person in [&bob, &carol, &alice] {
        assert_eq!(join(&server, &alice, &devs, person.id()).await.status, 200);
    }
    let group_grant = granted(&server, &alice, &host, "group", &devs).await;
    let mut members = group_grant["preview"]["members"]
        .as_array()
        .unwrap()
        .clone();
    members.sort_by_key(|member| member["person_id"].as_str().unwrap().to_owned());
    let mut expected = vec![
        json!({"person_id": alice.id(), "effective": true}),
        json!({"person_id": bob.id(), "effective": true}),
        json!({"person_id": carol.id(), "effective": false}),
    ];
    expected.sort_by_key(|member| member["person_id"].as_str().unwrap().to_owned());
    assert_eq!(members, expected);
    assert_eq!(group_grant["preview"]["effective"], true);
    // Through the group carol holds terminal, but SR10 still refuses her.
    assert_problem(
        terminal(&server, carol.token(), &host, Action::TerminalOpen).await,
        403,
        "terminal_denied",
        "not_host_assignee",
    );
    // A group with only non-assignees: not effective overall.
    let others = group(&server, &alice, "others").await;
    assert_eq!(join(&server, &alice, &others, carol.id()).await.status, 200);
    let useless = granted(&server, &alice, &host, "group", &others).await;
    assert_eq!(
        useless["preview"],
        json!({"effective": false, "hint": "terminal_not_effective",
               "members": [{"person_id": carol.id(), "effective": false}]})
    );

    // The list: every grant of the host (by ID, so by the millisecond of
    // creation; the expired one first); strict parameters.
    let listed = get(
        &server,
        &format!("/api/v1/grants?host_id={host}"),
        Some(alice.token()),
    )
    .await;
    let ids: Vec<&Value> = listed.body["grants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|grant| &grant["id"])
        .collect();
    assert_eq!(ids.len(), 4);
    assert_eq!(ids[0], &first["id"]);
    let mut later: Vec<String> = ids[1..].iter().map(|id| id.to_string()).collect();
    later.sort();
    let mut expected: Vec<String> = [
        &second["grant"]["id"],
        &group_grant["grant"]["id"],
        &useless["grant"]["id"],
    ]
    .iter()
    .map(|id| id.to_string())
    .collect();
    expected.sort();
    assert_eq!(later, expected);
    let none = get(
        &server,
        &format!("/api/v1/grants?host_id={unknown}"),
        Some(alice.token()),
    )
    .await;
    assert_eq!(none.body, json!({"grants": []}));
    for (query, pointer, code) in [
        ("host_id=nope", "/query/host_id", "invalid"),
        ("host=1", "/query/host", "unknown_parameter"),
    ] {
        let reply = get(
            &server,
            &format!("/api/v1/grants?{query}"),
            Some(alice.token()),
        )
        .await;
        assert_eq!(reply.status, 400, "{query}");
        assert_eq!(
            reply.body["errors"],
            json!([{"pointer": pointer, "code": code}])
        );
    }
    // Members cannot list grants.
    let reply = get(&server, "/api/v1/grants", Some(bob.token())).await;
    assert_reply(&reply, 403, "forbidden", Some("owner_required"));

    // Revoking twice: the second changes nothing; unknown is 404.
    let grant_id = second["grant"]["id"].as_str().unwrap();
    let version = permission_version(&server).await;
    let revoked = revoke(&server, &alice, grant_id).await;
    assert_eq!(revoked["grant"]["valid"], false);
    assert_eq!(revoked["grant"]["revoked_by"], alice.id());
    assert_eq!(permission_version(&server).await, version + 1);
    let again = revoke(&server, &alice, grant_id).await;
    assert_eq!(again["sessions_ended"], 0);
    assert_eq!(permission_version(&server).await, version + 1);
    let revokes = audit_of(&server, "grant.revoke", "allow").await;
    assert_eq!(revokes.len(), 2);
    let unchanged = revokes
        .iter()
        .filter(|row| row.details["no_change"] == true)
        .count();
    assert_eq!(unchanged, 1);
    let reply = post_empty(
        &server,
        &format!("/api/v1/grants/{unknown}/revoke"),
        alice.token(),
    )
    .await;
    assert_eq!(reply.status, 404);
    server.stop().await;
}

// ---------------------------------------------------------------------------
// Revocation ends sessions (8.3)
// ---------------------------------------------------------------------------

async fn revocations_end_the_sessions_of_who_loses_terminal(engine: Engine) {
    let World { server, alice, bob } = world(engine).await;
    let carol = invited_person(&server, &alice, "carol", "member", 3).await;
    let users = ["alice-su", "bob-su", "carol-su"];
    let everyone = [
        (alice.id(), "alice-su"),
        (bob.id(), "bob-su"),
        (carol.id(), "carol-su"),
    ];
    let bobs = active_host(
        &server,
        &alice,
        "bobs-box",
        Some(bob.id()),
        61,
        &users,
        &everyone,
    )
    .await
    .host_id;
    let carols = active_host(
        &server,
        &alice,
        "carols-box",
        Some(carol.id()),
        62,
        &users,
        &everyone,
    )
    .await
    .host_id;
    let devs = group(&server, &alice, "devs").await;
    for person in [&alice, &bob, &carol] {
        assert_eq!(join(&server, &alice, &devs, person.id()).await.status, 200);
    }
    let direct = granted(&server, &alice, &bobs, "person", bob.id()).await["grant"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let via_group_bobs = granted(&server, &alice, &bobs, "group", &devs).await["grant"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let via_group_carols = granted(&server, &alice, &carols, "group", &devs).await["grant"]["id"]
        .as_str()
        .unwrap()
        .to_owned();

    // Sessions as the terminal module writes them: bob two on his host, carol
    // one on hers, alice (an owner) one on each.
    let bob_active = insert_session(&server, &bobs, &bob, "active").await;
    let bob_detached = insert_session(&server, &bobs, &bob, "detached").await;
    let carol_session = insert_session(&server, &carols, &carol, "active").await;
    let alice_on_bobs = insert_session(&server, &bobs, &alice, "active").await;
    let alice_on_carols = insert_session(&server, &carols, &alice, "active").await;

    // Revoking bob's own grant: the group's grant still gives him terminal.
    let revoked = revoke(&server, &alice, &direct).await;
    assert_eq!(revoked["sessions_ended"], 0);
    assert_open(&server, &bob_active).await;
    assert_open(&server, &bob_detached).await;

    // bob leaves the group: now he loses terminal on his host, and both of his
    // sessions there end; nobody else's do.
    let version = permission_version(&server).await;
    let left = leave(&server, &alice, &devs, bob.id()).await;
    assert_eq!(left["removed"], true);
    assert_eq!(left["sessions_ended"], 2);
    assert_eq!(permission_version(&server).await, version + 1);
    assert_closed_revoked(&server, &bob_active).await;
    assert_closed_revoked(&server, &bob_detached).await;
    assert_open(&server, &alice_on_bobs).await;
    assert_open(&server, &carol_session).await;
    let left_again = leave(&server, &alice, &devs, bob.id()).await;
    assert_eq!(left_again["removed"], false);

    // Revoking the group grant on carol's host ends carol's session; alice is
    // a member too, but an owner keeps hers (implicit terminal).
    let revoked = revoke(&server, &alice, &via_group_carols).await;
    assert_eq!(revoked["sessions_ended"], 1);
    assert_closed_revoked(&server, &carol_session).await;
    assert_open(&server, &alice_on_carols).await;
    assert_open(&server, &alice_on_bobs).await;

    // Each end is audited (terminal.terminate, actor system) and reaches its
    // person (terminal_session.changed).
    let ended: Vec<AuditRow> = audit_of(&server, "terminal.terminate", "allow").await;
    let mut ended_ids: Vec<String> = ended
        .iter()
        .map(|row| row.target_id.clone().unwrap())
        .collect();
    ended_ids.sort();
    let mut expected = vec![
        bob_active.clone(),
        bob_detached.clone(),
        carol_session.clone(),
    ];
    expected.sort();
    assert_eq!(ended_ids, expected);
    for row in &ended {
        assert_eq!(row.actor_kind, "system");
        assert_eq!(row.details["close_reason"], "access_revoked");
    }
    let changed: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM events WHERE kind = 'terminal_session.changed'")
            .fetch_one(server.state.db().pool())
            .await
            .unwrap();
    assert_eq!(changed, 3);
    let _ = via_group_bobs;
    server.stop().await;
}

// ---------------------------------------------------------------------------
// I6 on person enable and on group join
// ---------------------------------------------------------------------------

async fn i6_on_person_enable_and_group_join(engine: Engine) {
    let World { server, alice, bob } = world(engine).await;
    let carol = invited_person(&server, &alice, "carol", "member", 3).await;
    let users = ["alice-su", "bob-su"];
    let both = [(alice.id(), "alice-su"), (bob.id(), "bob-su")];
    let host = active_host(&server, &alice, "box", Some(bob.id()), 71, &users, &both)
        .await
        .host_id;
    let bobs_grant = granted(&server, &alice, &host, "person", bob.id()).await["grant"]["id"]
        .as_str()
        .unwrap()
        .to_owned();

    // bob is disabled: his grant is dormant, so the host may become alice's
    // personal one.
    bothy_server::identity::admin::disable(
        server.state.db(),
        server.clock.now_ms(),
        bothy_server::identity::admin::PersonRef::Username("bob"),
        bothy_server::identity::admin::RoleAuthority::Operator,
    )
    .await
    .unwrap();
    let reply = set_llm(&server, &alice, &host, "personal", Some(alice.id())).await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);

    // Enabling him would revive a grant to someone other than the holder.
    let version = permission_version(&server).await;
    let enable = format!("/api/v1/persons/{}/enable", bob.id());
    let reply = post_empty(&server, &enable, alice.token()).await;
    assert_reply(&reply, 409, "i6_violation", None);
    let persons = get(&server, "/api/v1/persons", Some(alice.token())).await;
    let bob_now = persons.body["persons"]
        .as_array()
        .unwrap()
        .iter()
        .find(|person| person["id"] == bob.id())
        .unwrap()
        .clone();
    assert_eq!(bob_now["status"], "disabled");
    assert_eq!(permission_version(&server).await, version);
    let refused = denials(&server, "person.enable", "invariant_violation").await;
    assert_eq!(refused.len(), 1);
    assert_eq!(refused[0].actor_id.as_deref(), Some(alice.id()));
    assert_eq!(refused[0].target_id.as_deref(), Some(bob.id()));
    assert!(audit_of(&server, "person.enable", "allow").await.is_empty());

    // Without that grant the enable goes through (and again changes nothing).
    revoke(&server, &alice, &bobs_grant).await;
    let reply = post_empty(&server, &enable, alice.token()).await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    assert_eq!(reply.body["person"]["status"], "active");
    assert_eq!(reply.body["changed"], true);
    assert!(permission_version(&server).await > version);
    let reply = post_empty(&server, &enable, alice.token()).await;
    assert_eq!(reply.body["changed"], false);
    let reply = post_empty(
        &server,
        &format!("/api/v1/persons/{}/enable", Uuid::from_u128(7)),
        alice.token(),
    )
    .await;
    assert_eq!(reply.status, 404);

    // Joining a group: fine while its grants are on hosts that are not
    // personal; the permission version rises.
    let devs = group(&server, &alice, "devs").await;
    let other = active_host(&server, &alice, "other", None, 72, &users, &both)
        .await
        .host_id;
    granted(&server, &alice, &other, "group", &devs).await;
    let version = permission_version(&server).await;
    let reply = join(&server, &alice, &devs, carol.id()).await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    assert_eq!(reply.body["added"], true);
    assert_eq!(reply.body["group"]["members"], json!([carol.id()]));
    assert_eq!(permission_version(&server).await, version + 1);

    // A group grant on a personal host: no route writes one (grant.create and
    // host.manage refuse it), so a row from elsewhere (a restore, an older
    // binary) is put in directly; joining that group must still fail closed.
    let leaky = group(&server, &alice, "leaky").await;
    sqlx::query(
        "INSERT INTO grants (id, target_kind, target_id, capability, recipient_kind, \
         recipient_id, created_by, created_at) VALUES ($1, 'host', $2, 'terminal', 'group', $3, $4, $5)",
    )
    .bind(Uuid::from_u128(99).hyphenated().to_string())
    .bind(&host)
    .bind(&leaky)
    .bind(alice.id())
    .bind(server.clock.now_ms())
    .execute(server.state.db().pool())
    .await
    .unwrap();
    let reply = join(&server, &alice, &leaky, carol.id()).await;
    assert_reply(&reply, 409, "i6_violation", None);
    let groups = get(&server, "/api/v1/groups", Some(alice.token())).await;
    let leaky_now = groups.body["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|group| group["id"] == leaky.as_str())
        .unwrap()
        .clone();
    assert_eq!(leaky_now["members"], json!([]));
    let refused = denials(&server, "group.manage", "invariant_violation").await;
    assert_eq!(refused.len(), 1);
    assert_eq!(refused[0].target_id.as_deref(), Some(leaky.as_str()));
    assert_eq!(refused[0].details["operation"], "add_member");
    assert_eq!(refused[0].details["person_id"], carol.id());

    // Group routes: validation, 404, duplicate name.
    let reply = join(&server, &alice, &devs, &Uuid::from_u128(5).to_string()).await;
    assert_eq!(
        reply.body["errors"],
        json!([{"pointer": "/person_id", "code": "unknown_user"}])
    );
    let reply = join(&server, &alice, &Uuid::from_u128(5).to_string(), carol.id()).await;
    assert_eq!(reply.status, 404);
    let reply = post(
        &server,
        "/api/v1/groups",
        Some(alice.token()),
        json!({"name": "DEVS"}),
    )
    .await;
    assert_reply(&reply, 409, "conflict", Some("group_name_taken"));
    let reply = post(
        &server,
        "/api/v1/groups",
        Some(alice.token()),
        json!({"name": "no spaces"}),
    )
    .await;
    assert_eq!(
        reply.body["errors"],
        json!([{"pointer": "/name", "code": "invalid"}])
    );
    server.stop().await;
}

/// `bothy-server admin ARGS` through the real binary, on the test server's
/// database and data directory (the pepper), while the server runs.
async fn admin(server: &TestServer, args: &[&str]) -> std::process::Output {
    let home = tempfile::tempdir().unwrap();
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_bothy-server"));
    command
        .arg("admin")
        .args(args)
        .env_clear()
        .env("HOME", home.path())
        .env("BOTHY_SERVER__DATA_DIR", server.data_dir())
        .env("BOTHY_SERVER__PUBLIC_URL", "https://bothy.example")
        .env("BOTHY_DATABASE__URL", server.db().url());
    tokio::task::spawn_blocking(move || {
        let output = command.output().expect("run bothy-server");
        drop(home);
        output
    })
    .await
    .unwrap()
}

async fn admin_enable_checks_i6_through_the_binary(engine: Engine) {
    let World { server, alice, bob } = world(engine).await;
    let host = active_host(
        &server,
        &alice,
        "box",
        Some(bob.id()),
        91,
        &["alice-su", "bob-su"],
        &[(alice.id(), "alice-su"), (bob.id(), "bob-su")],
    )
    .await
    .host_id;
    let bobs_grant = granted(&server, &alice, &host, "person", bob.id()).await["grant"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let out = admin(&server, &["disable", "--username", "bob"]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "Disabled bob; 1 login session(s) ended.\n"
    );
    // A disabled person's second factor is not reset.
    let out = admin(&server, &["reset-second-factor", "--username", "bob"]).await;
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("the person \"bob\" is not active"),
        "{stderr}"
    );
    let reply = set_llm(&server, &alice, &host, "personal", Some(alice.id())).await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);

    let out = admin(&server, &["enable", "--username", "BOB"]).await;
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("would break I6"), "{stderr}");
    assert!(stderr.contains("Nothing changed"), "{stderr}");
    assert!(out.stdout.is_empty());
    let refused = denials(&server, "person.enable", "invariant_violation").await;
    assert_eq!(refused.len(), 1);
    assert_eq!(refused[0].actor_kind, "system");
    assert_eq!(refused[0].target_id.as_deref(), Some(bob.id()));

    revoke(&server, &alice, &bobs_grant).await;
    let out = admin(&server, &["enable", "--username", "bob"]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "Enabled bob.\n");
    let out = admin(&server, &["enable", "--username", "bob"]).await;
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "Already active: bob.\n"
    );
    let enabled = audit_of(&server, "person.enable", "allow").await;
    assert_eq!(enabled.len(), 2);
    let out = admin(&server, &["enable", "--username", "nobody"]).await;
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no person has the username \"nobody\""),
        "{stderr}"
    );
    // bob logs in again (his sessions ended when he was disabled).
    bob.enrolled.login(&server, 5).await;
    server.stop().await;
}

// ---------------------------------------------------------------------------
// host.read: host.updated on the event stream
// ---------------------------------------------------------------------------

fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => panic!("not an object"),
    }
}

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

async fn subscribe(server: &TestServer, token: &str) -> ws::Ws {
    let mut socket = ws::open(server, "/api/v1/events", token).await;
    let ready = ws::next_json(&mut socket).await;
    assert_eq!(ready["op"], "ready", "{ready}");
    socket
}

async fn host_updated_reaches_members_with_a_grant_only(engine: Engine) {
    let World { server, alice, bob } = world(engine).await;
    let carol = invited_person(&server, &alice, "carol", "member", 3).await;
    let dave = invited_person(&server, &alice, "dave", "member", 4).await;
    // carol is the assignee (host.read without a grant); bob gets a grant that
    // SR10 keeps from taking effect (host.read all the same, D-43); dave has
    // nothing.
    let host = active_host(
        &server,
        &alice,
        "carols-box",
        Some(carol.id()),
        81,
        &["carol-su"],
        &[],
    )
    .await
    .host_id;
    let bobs_grant = granted(&server, &alice, &host, "person", bob.id()).await;
    assert_eq!(bobs_grant["preview"]["effective"], false);
    let bobs_grant = bobs_grant["grant"]["id"].as_str().unwrap().to_owned();

    let mut a = subscribe(&server, alice.token()).await;
    let mut b = subscribe(&server, bob.token()).await;
    let mut c = subscribe(&server, carol.token()).await;
    let mut d = subscribe(&server, dave.token()).await;
    let updated = |n: i64| {
        DurableEvent::new(
            EventKind::HostUpdated,
            Audience::HostReaders(uuid(&host)),
            object(json!({"host_id": host, "n": n})),
        )
    };
    let marker = |person: &Person, n: i64| {
        DurableEvent::new(
            EventKind::TerminalSessionChanged,
            Audience::Person(uuid(person.id())),
            object(json!({"marker": n})),
        )
    };
    let positions = commit(
        &server,
        vec![
            updated(1),
            marker(&alice, 1),
            marker(&bob, 1),
            marker(&carol, 1),
            marker(&dave, 1),
        ],
    )
    .await;
    // Deliveries come in position order: the marker right after proves what
    // was held back.
    for socket in [&mut a, &mut b, &mut c] {
        let first = ws::next_json(socket).await;
        assert_eq!(first["d"]["position"], positions[0], "{first}");
        assert_eq!(first["d"]["kind"], "host.updated");
        let next = ws::next_json(socket).await;
        assert_eq!(next["d"]["payload"], json!({"marker": 1}));
    }
    let first = ws::next_json(&mut d).await;
    assert_eq!(first["d"]["position"], positions[4], "{first}");

    // After the revocation bob no longer reads the host.
    revoke(&server, &alice, &bobs_grant).await;
    let positions = commit(&server, vec![updated(2), marker(&bob, 2)]).await;
    let next = ws::next_json(&mut b).await;
    assert_eq!(next["d"]["position"], positions[1], "{next}");
    let next = ws::next_json(&mut a).await;
    assert_eq!(next["d"]["position"], positions[0], "{next}");
    drop((a, b, c, d));
    server.stop().await;
}

both_engines!(
    tm_t08_non_owner_only_on_their_own_host_and_never_the_server_host,
    tm_t09_i6_on_grants_declarations_and_openings,
    tm_t28a_owner_and_assignee_without_a_session_user,
    tm_t17_agents_and_apps_are_refused_and_audited,
    grants_are_validated_listed_and_expire,
    revocations_end_the_sessions_of_who_loses_terminal,
    i6_on_person_enable_and_group_join,
    host_updated_reaches_members_with_a_grant_only,
    admin_enable_checks_i6_through_the_binary,
);
