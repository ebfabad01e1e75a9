//! updateHost (`PATCH /api/v1/hosts/{host_id}`) and setHostLlmCredentials
//! (`PUT /api/v1/hosts/{host_id}/llm-credentials`) against the real server on
//! port 0 over TLS, on both engines (spec 2.2 items 1–5, 3.1, 7.2, 7.3, 8.3,
//! 10.1, 10.3, 13; TM-T28 (b) and the server part of (e)).
//!
//! Hosts are made through the real routes (createHost, host.pair,
//! confirmHost). Three things a later issue brings are written directly into
//! the test database, each marked where it happens:
//! - terminal sessions: the open route comes with issue 5 ("Terminal sessions
//!   on the server"); the rows look as the terminal module writes them;
//! - a host disabled with `duplicate_connection`: the control connection (3.4)
//!   comes later;
//! - a later report of the host (`reported_session_users`), which the control
//!   connection applies.
//!
//! Time moves only through the server's manual clock; nothing sleeps.

#![allow(clippy::unwrap_used)] // test bodies are plain fns called by the generated #[test]s

use bothy_testkit as support;
use bothy_testkit::assert_problem;
use bothy_testkit::hosts as hosts_common;
use bothy_testkit::identity as identity_common;

use bothy_server::clock::Clock;
use bothy_server::db::Engine;
use bothy_server::hosts::{self, session_users};
use hosts_common::*;
use identity_common::{Reply, audit_rows, post};
use reqwest::Method;
use serde_json::{Value, json};
use sqlx::Row;
use support::both_engines;
use support::server::TestServer;

// ---------------------------------------------------------------------------
// Requests

async fn send(
    server: &TestServer,
    method: Method,
    path: &str,
    token: &str,
    if_match: Option<String>,
    body: &Value,
) -> Reply {
    let mut request = server
        .client
        .request(method, server.url(path))
        .bearer_auth(token)
        .json(body);
    if let Some(tag) = if_match {
        request = request.header("If-Match", tag);
    }
    let response = request.send().await.expect("request");
    let status = response.status();
    let headers = response.headers().clone();
    let text = response.text().await.expect("response body");
    let body = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("JSON body ({e}): {text}"))
    };
    Reply {
        status,
        headers,
        body,
    }
}

/// `"<version>"` of the host as stored now.
async fn etag_now(server: &TestServer, host_id: &str) -> String {
    format!("\"{}\"", host_version(server, host_id).await)
}

/// PATCH with a fresh step-up and the current `If-Match`; `changes` are the
/// members besides `reason` and `step_up_id`.
async fn patch(server: &TestServer, by: &Person, host_id: &str, changes: Value) -> Reply {
    let tag = etag_now(server, host_id).await;
    patch_with(server, by, host_id, Some(tag), changes).await
}

async fn patch_with(
    server: &TestServer,
    by: &Person,
    host_id: &str,
    if_match: Option<String>,
    mut changes: Value,
) -> Reply {
    let step_up_id = step_up(server, by).await;
    changes["reason"] = json!("change of plan");
    changes["step_up_id"] = json!(step_up_id);
    send(
        server,
        Method::PATCH,
        &format!("/api/v1/hosts/{host_id}"),
        by.token(),
        if_match,
        &changes,
    )
    .await
}

/// PUT llm-credentials with a fresh step-up and the current `If-Match`.
async fn put_llm(
    server: &TestServer,
    by: &Person,
    host_id: &str,
    llm: &str,
    holder: Option<&str>,
) -> Reply {
    let tag = etag_now(server, host_id).await;
    put_llm_with(server, by, host_id, Some(tag), llm, holder).await
}

async fn put_llm_with(
    server: &TestServer,
    by: &Person,
    host_id: &str,
    if_match: Option<String>,
    llm: &str,
    holder: Option<&str>,
) -> Reply {
    let step_up_id = step_up(server, by).await;
    let mut body = json!({
        "llm_credentials": llm,
        "reason": "the login changed",
        "step_up_id": step_up_id,
    });
    if let Some(holder) = holder {
        body["credential_holder_id"] = json!(holder);
    }
    send(
        server,
        Method::PUT,
        &format!("/api/v1/hosts/{host_id}/llm-credentials"),
        by.token(),
        if_match,
        &body,
    )
    .await
}

fn assert_finding(reply: &Reply, pointer: &str, code: &str) {
    assert_problem(reply, 400, "validation_failed");
    let errors = reply.body["errors"].as_array().expect("errors[]");
    assert!(
        errors
            .iter()
            .any(|e| e["pointer"] == pointer && e["code"] == code),
        "expected {pointer} {code} in {errors:?}"
    );
}

fn assert_conflict(reply: &Reply, reason: &str) {
    assert_problem(reply, 409, "conflict");
    assert_eq!(reply.body["reason"], reason, "{:?}", reply.body);
}

/// A 200 with `{host}` and an `ETag` equal to the host's version; the host.
fn ok_host(reply: &Reply) -> Value {
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    let host = reply.body["host"].clone();
    let tag = reply.headers["etag"].to_str().unwrap();
    assert_eq!(tag, format!("\"{}\"", host["version"]));
    host
}

// ---------------------------------------------------------------------------
// Reads of the database

async fn scalar_i64(server: &TestServer, sql: &str, bind: &str) -> i64 {
    sqlx::query_scalar::<_, i64>(sql)
        .bind(bind.to_owned())
        .fetch_one(server.state.db().pool())
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"))
}

async fn host_version(server: &TestServer, host_id: &str) -> i64 {
    scalar_i64(server, "SELECT version FROM hosts WHERE id = $1", host_id).await
}

/// Every `host.updated` payload of this host.
async fn host_updated_events(server: &TestServer, host_id: &str) -> Vec<Value> {
    sqlx::query("SELECT payload FROM events WHERE kind = 'host.updated' ORDER BY position")
        .fetch_all(server.state.db().pool())
        .await
        .unwrap()
        .iter()
        .map(|row| serde_json::from_str::<Value>(&row.get::<String, _>("payload")).unwrap())
        .filter(|payload| payload["host_id"] == host_id)
        .collect()
}

/// Every host.manage audit entry of this host (details), oldest first.
async fn manage_audit(server: &TestServer, host_id: &str, decision: &str) -> Vec<Value> {
    audit_rows(server)
        .await
        .into_iter()
        .filter(|row| {
            row.action == "host.manage"
                && row.decision == decision
                && row.target_id.as_deref() == Some(host_id)
        })
        .map(|row| row.details)
        .collect()
}

/// `(person_id, os_user, ended)` of every assignment row of the host.
async fn assignment_rows(server: &TestServer, host_id: &str) -> Vec<(String, String, bool)> {
    sqlx::query(
        "SELECT person_id, os_user, ended_at FROM host_session_users WHERE host_id = $1 \
         ORDER BY assigned_at, os_user_folded",
    )
    .bind(host_id.to_owned())
    .fetch_all(server.state.db().pool())
    .await
    .unwrap()
    .iter()
    .map(|row| {
        (
            row.get::<String, _>("person_id"),
            row.get::<String, _>("os_user"),
            row.get::<Option<i64>, _>("ended_at").is_some(),
        )
    })
    .collect()
}

/// The host as a reader sees it, read through the library (with its valid
/// assignments).
async fn host_now(server: &TestServer, host_id: &str) -> Value {
    let mut conn = server.state.db().pool().acquire().await.unwrap();
    let id = bothy_proto::ids::parse_uuid(host_id).unwrap();
    let host = hosts::load(&mut conn, id).await.unwrap().expect("the host");
    serde_json::to_value(session_users::host_view(&mut conn, &host).await.unwrap()).unwrap()
}

/// What a test compares to say "nothing changed": the host as a reader sees
/// it, every assignment row, the permission version and the event count.
async fn snapshot(
    server: &TestServer,
    host_id: &str,
) -> (Value, Vec<(String, String, bool)>, i64, i64) {
    let events = sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM events")
        .fetch_one(server.state.db().pool())
        .await
        .unwrap();
    (
        host_now(server, host_id).await,
        assignment_rows(server, host_id).await,
        permission_version(server).await,
        events,
    )
}

// ---------------------------------------------------------------------------
// Terminal sessions written as the terminal module writes them (the open route
// comes with issue 5, "Terminal sessions on the server").

/// Inserts an `active` session of `person` on the host (their valid assignment
/// is its session user); its ID.
async fn open_session(server: &TestServer, host_id: &str, person: &Person) -> String {
    let now = server.clock.now_ms();
    let id = bothy_proto::ids::uuid_v7(u64::try_from(now).unwrap())
        .unwrap()
        .hyphenated()
        .to_string();
    let pool = server.state.db().pool();
    let assignment: String = sqlx::query_scalar(
        "SELECT id FROM host_session_users WHERE host_id = $1 AND person_id = $2 \
         AND ended_at IS NULL",
    )
    .bind(host_id.to_owned())
    .bind(person.id().to_owned())
    .fetch_one(pool)
    .await
    .expect("the person has a valid assignment on the host");
    sqlx::query(
        "INSERT INTO terminal_sessions (id, host_id, person_id, login_session_id, device_id, \
         host_session_user_id, profile, state, close_reason, close_detail, created_at, \
         started_at, ended_at, last_input_at, bytes_in, bytes_out, version) \
         VALUES ($1, $2, $3, $4, $5, $6, 'shell', 'active', NULL, NULL, $7, $7, NULL, $7, 10, 20, 1)",
    )
    .bind(id.clone())
    .bind(host_id.to_owned())
    .bind(person.id().to_owned())
    .bind(person.session.login_session_id.clone())
    .bind(person.session.device_id.clone())
    .bind(assignment)
    .bind(now)
    .execute(pool)
    .await
    .unwrap();
    id
}

/// `(state, close_reason)` of a session.
async fn session_state(server: &TestServer, session_id: &str) -> (String, Option<String>) {
    let row = sqlx::query("SELECT state, close_reason FROM terminal_sessions WHERE id = $1")
        .bind(session_id.to_owned())
        .fetch_one(server.state.db().pool())
        .await
        .unwrap();
    (row.get("state"), row.get("close_reason"))
}

/// Asserts the session is closed with `reason`, with one terminal.terminate
/// entry (actor system) and one `terminal_session.changed` to its person.
async fn assert_ended(server: &TestServer, session_id: &str, person: &Person, reason: &str) {
    assert_eq!(
        session_state(server, session_id).await,
        ("closed".to_owned(), Some(reason.to_owned())),
        "session {session_id}"
    );
    let terminate: Vec<_> = audit_rows(server)
        .await
        .into_iter()
        .filter(|row| row.action == "terminal.terminate" && row.details["session_id"] == session_id)
        .collect();
    assert_eq!(terminate.len(), 1, "{terminate:?}");
    assert_eq!(terminate[0].actor_kind, "system");
    assert_eq!(terminate[0].details["close_reason"], reason);
    let events: Vec<(String, Option<String>, Value)> = sqlx::query(
        "SELECT audience_kind, audience_id, payload FROM events \
         WHERE kind = 'terminal_session.changed' ORDER BY position",
    )
    .fetch_all(server.state.db().pool())
    .await
    .unwrap()
    .iter()
    .map(|row| {
        (
            row.get("audience_kind"),
            row.get("audience_id"),
            serde_json::from_str(&row.get::<String, _>("payload")).unwrap(),
        )
    })
    .filter(|(_, _, payload): &(String, Option<String>, Value)| payload["session_id"] == session_id)
    .collect();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].0, "person");
    assert_eq!(events[0].1.as_deref(), Some(person.id()));
    assert_eq!(events[0].2["state"], "closed");
    assert_eq!(events[0].2["close_reason"], reason);
}

async fn assert_open(server: &TestServer, session_id: &str) {
    assert_eq!(session_state(server, session_id).await.0, "active");
}

// ---------------------------------------------------------------------------
// Setup

struct World {
    server: TestServer,
    owner: Person,
    mia: Person,
    noah: Person,
}

/// A server with an owner and two members (Mia, Noah), each logged in.
async fn world(engine: Engine) -> World {
    let server = TestServer::start(engine).await;
    let owner = owner_person(&server, "olivia").await;
    let mia = invited_person(&server, &owner, "mia", "member", 2).await;
    let noah = invited_person(&server, &owner, "noah", "member", 3).await;
    World {
        server,
        owner,
        mia,
        noah,
    }
}

/// Writes a report of the host as the control connection would apply it
/// (the control connection comes later).
async fn report_session_users(server: &TestServer, host_id: &str, names: &[&str]) {
    let users: Vec<Value> = names.iter().map(|n| session_user(n, &[])).collect();
    sqlx::query("UPDATE hosts SET reported_session_users = $1 WHERE id = $2")
        .bind(Value::Array(users).to_string())
        .bind(host_id.to_owned())
        .execute(server.state.db().pool())
        .await
        .unwrap();
}

// ---------------------------------------------------------------------------
// TM-T28 (b): one session user per person, forever

async fn session_user_taken_now_or_in_the_past(engine: Engine) {
    let World {
        server,
        owner,
        mia,
        noah,
    } = world(engine).await;
    let host = active_host(
        &server,
        &owner,
        "build box",
        None,
        7,
        &["mia_os", "noah_os", "spare"],
        &[(mia.id(), "mia_os")],
    )
    .await;
    let id = host.host_id.as_str();
    assert_eq!(
        host.host["session_users"],
        json!([{"user_id": mia.id(), "os_user": "mia_os"}])
    );

    // A name that belongs to another person now.
    let before = snapshot(&server, id).await;
    let reply = patch(
        &server,
        &owner,
        id,
        json!({"name": "renamed", "assign_session_users": [{"user_id": noah.id(), "os_user": "mia_os"}]}),
    )
    .await;
    assert_conflict(&reply, "session_user_taken");
    assert_eq!(
        snapshot(&server, id).await,
        before,
        "nothing changed, not even the name"
    );

    // A second valid assignment of the same person.
    let reply = patch(
        &server,
        &owner,
        id,
        json!({"assign_session_users": [{"user_id": mia.id(), "os_user": "spare"}]}),
    )
    .await;
    assert_conflict(&reply, "session_user_taken");
    assert_eq!(snapshot(&server, id).await, before);

    // Two assignments of one person in one request, and one name twice.
    for assignments in [
        json!([{"user_id": noah.id(), "os_user": "noah_os"}, {"user_id": noah.id(), "os_user": "spare"}]),
        json!([{"user_id": noah.id(), "os_user": "spare"}, {"user_id": owner.id(), "os_user": "spare"}]),
    ] {
        let reply = patch(
            &server,
            &owner,
            id,
            json!({"assign_session_users": assignments}),
        )
        .await;
        assert_conflict(&reply, "session_user_taken");
        assert_eq!(snapshot(&server, id).await, before);
    }

    // Repeating the valid assignment exactly changes nothing and is no conflict.
    let reply = patch(
        &server,
        &owner,
        id,
        json!({"assign_session_users": [{"user_id": mia.id(), "os_user": "mia_os"}]}),
    )
    .await;
    let shown = ok_host(&reply);
    assert_eq!(shown["version"], before.0["version"]);
    assert_eq!(
        manage_audit(&server, id, "allow").await.last().unwrap()["no_change"],
        true
    );

    // End Mia's assignment: the name stays taken for everyone, Mia included.
    let reply = patch(
        &server,
        &owner,
        id,
        json!({"end_session_users": [mia.id()]}),
    )
    .await;
    let shown = ok_host(&reply);
    assert_eq!(shown["session_users"], json!([]));
    for (person, name) in [(&noah, "mia_os"), (&mia, "mia_os")] {
        let before = snapshot(&server, id).await;
        let reply = patch(
            &server,
            &owner,
            id,
            json!({"assign_session_users": [{"user_id": person.id(), "os_user": name}]}),
        )
        .await;
        assert_conflict(&reply, "session_user_taken");
        assert_eq!(snapshot(&server, id).await, before);
    }

    // The host later reports the name in other letters: still taken (case is
    // ignored for uniqueness). The report is written as the control connection
    // would apply it.
    report_session_users(&server, id, &["MIA_OS", "noah_os", "spare"]).await;
    let before = snapshot(&server, id).await;
    let reply = patch(
        &server,
        &owner,
        id,
        json!({"assign_session_users": [{"user_id": noah.id(), "os_user": "MIA_OS"}]}),
    )
    .await;
    assert_conflict(&reply, "session_user_taken");
    assert_eq!(snapshot(&server, id).await, before);

    // Mia gets a fresh session user; Noah gets his own; both in one request.
    let reply = patch(
        &server,
        &owner,
        id,
        json!({"assign_session_users": [
            {"user_id": mia.id(), "os_user": "spare"},
            {"user_id": noah.id(), "os_user": "noah_os"},
        ]}),
    )
    .await;
    let shown = ok_host(&reply);
    assert_eq!(
        shown["session_users"],
        // Made in one unit of work: ordered by name.
        json!([
            {"user_id": noah.id(), "os_user": "noah_os"},
            {"user_id": mia.id(), "os_user": "spare"},
        ])
    );
    assert_eq!(
        assignment_rows(&server, id).await,
        vec![
            (mia.id().to_owned(), "mia_os".to_owned(), true),
            (noah.id().to_owned(), "noah_os".to_owned(), false),
            (mia.id().to_owned(), "spare".to_owned(), false),
        ]
    );
    // One audit entry per assignment made or ended, with the reserved os_user.
    let entries: Vec<Value> = manage_audit(&server, id, "allow")
        .await
        .into_iter()
        .filter(|d| d["operation"] == "session_user")
        .collect();
    let summary: Vec<(String, String, String)> = entries
        .iter()
        .map(|d| {
            (
                d["change"].as_str().unwrap().to_owned(),
                d["user_id"].as_str().unwrap().to_owned(),
                d["os_user"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    // Entries of one unit of work share its time, so their order is not fixed.
    let mut last_request = summary[summary.len() - 2..].to_vec();
    last_request.sort();
    let entry = |change: &str, person: &Person, name: &str| {
        (change.to_owned(), person.id().to_owned(), name.to_owned())
    };
    assert_eq!(summary[summary.len() - 3], entry("revoked", &mia, "mia_os"));
    let mut expected = vec![
        entry("assigned", &mia, "spare"),
        entry("assigned", &noah, "noah_os"),
    ];
    expected.sort();
    assert_eq!(last_request, expected);
    // The first came with confirmHost and its reason; the later ones with ours.
    assert_eq!(entries[0]["reason"], REASON);
    assert!(entries[1..].iter().all(|d| d["reason"] == "change of plan"));
}

// ---------------------------------------------------------------------------
// TM-T28 (e), server part: only names the host reports, exactly

async fn names_the_host_does_not_report(engine: Engine) {
    let World {
        server,
        owner,
        mia,
        noah,
    } = world(engine).await;

    // confirmHost with a name the host does not report: 400, nothing stored.
    let (host_id, code) = create_host(&server, &owner, "lab", None).await;
    let keys = HostKeys::generate(9);
    let paired = pair(&server, &code, &keys, &["mia_os"]).await;
    assert_eq!(paired.status, 200, "{:?}", paired.body);
    let reply = confirm(
        &server,
        &owner,
        &host_id,
        &reply_prefix(&paired),
        "none",
        None,
        false,
        &[(mia.id(), "Mia_os")],
    )
    .await;
    assert_finding(
        &reply,
        "/session_users/0/os_user",
        "session_user_not_on_host",
    );
    assert!(assignment_rows(&server, &host_id).await.is_empty());
    assert_eq!(host_now(&server, &host_id).await["state"], "confirming");

    // updateHost the same: wrong case, an unknown name, an unknown person —
    // every finding at once, nothing stored.
    let host = active_host(
        &server,
        &owner,
        "lab 2",
        None,
        10,
        &["mia_os", "noah_os"],
        &[],
    )
    .await;
    let id = host.host_id.as_str();
    let before = snapshot(&server, id).await;
    let reply = patch(
        &server,
        &owner,
        id,
        json!({"assign_session_users": [
            {"user_id": mia.id(), "os_user": "MIA_OS"},
            {"user_id": noah.id(), "os_user": "nobody"},
            {"user_id": "0190a000-0000-7000-8000-000000000000", "os_user": "noah_os"},
        ]}),
    )
    .await;
    assert_finding(
        &reply,
        "/assign_session_users/0/os_user",
        "session_user_not_on_host",
    );
    assert_finding(
        &reply,
        "/assign_session_users/1/os_user",
        "session_user_not_on_host",
    );
    assert_finding(&reply, "/assign_session_users/2/user_id", "unknown_user");
    assert_eq!(reply.body["errors"].as_array().unwrap().len(), 3);
    assert_eq!(snapshot(&server, id).await, before);
    assert!(assignment_rows(&server, id).await.is_empty());

    // A deleted person cannot get one either.
    sqlx::query("UPDATE persons SET status = 'deleted' WHERE principal_id = $1")
        .bind(noah.id().to_owned())
        .execute(server.state.db().pool())
        .await
        .unwrap();
    let reply = patch(
        &server,
        &owner,
        id,
        json!({"assign_session_users": [{"user_id": noah.id(), "os_user": "noah_os"}]}),
    )
    .await;
    assert_finding(&reply, "/assign_session_users/0/user_id", "unknown_user");

    // The exact name works.
    let reply = patch(
        &server,
        &owner,
        id,
        json!({"assign_session_users": [{"user_id": mia.id(), "os_user": "mia_os"}]}),
    )
    .await;
    ok_host(&reply);
}

// ---------------------------------------------------------------------------
// setHostLlmCredentials (7.2, 7.3)

async fn llm_credentials_rules(engine: Engine) {
    let World {
        server,
        owner,
        mia,
        noah,
    } = world(engine).await;
    let host = active_host(
        &server,
        &owner,
        "llm box",
        Some(mia.id()),
        11,
        &["mia_os", "noah_os", "olivia_os"],
        &[
            (mia.id(), "mia_os"),
            (noah.id(), "noah_os"),
            (owner.id(), "olivia_os"),
        ],
    )
    .await;
    let id = host.host_id.as_str();
    let path = format!("/api/v1/hosts/{id}/llm-credentials");

    // The holder exactly with personal.
    let before = snapshot(&server, id).await;
    let reply = put_llm(&server, &owner, id, "personal", None).await;
    assert_finding(&reply, "/credential_holder_id", "required");
    for llm in ["none", "organization"] {
        let reply = put_llm(&server, &owner, id, llm, Some(mia.id())).await;
        assert_finding(&reply, "/credential_holder_id", "not_allowed");
    }
    let reply = put_llm(
        &server,
        &owner,
        id,
        "personal",
        Some("0190a000-0000-7000-8000-000000000000"),
    )
    .await;
    assert_finding(&reply, "/credential_holder_id", "unknown_user");
    // Not a person: an agent principal.
    let agent = post(
        &server,
        "/api/v1/tokens",
        Some(owner.token()),
        json!({"kind": "agent", "name": "ci-bot"}),
    )
    .await;
    assert_eq!(agent.status, 201, "{:?}", agent.body);
    let agent_id = agent.body["principal_id"].as_str().unwrap().to_owned();
    let reply = put_llm(&server, &owner, id, "personal", Some(&agent_id)).await;
    assert_finding(&reply, "/credential_holder_id", "unknown_user");
    let reply = put_llm(&server, &owner, id, "bogus", None).await;
    assert_finding(&reply, "/llm_credentials", "invalid");
    assert_eq!(snapshot(&server, id).await, before);

    // If-Match is mandatory and must be current.
    let reply = put_llm_with(&server, &owner, id, None, "organization", None).await;
    assert_problem(&reply, 428, "precondition_required");
    let stale = format!("\"{}\"", host_version(&server, id).await - 1);
    let reply = put_llm_with(&server, &owner, id, Some(stale), "organization", None).await;
    assert_problem(&reply, 412, "precondition_failed");
    // Owners only; a step-up is required.
    let tag = etag_now(&server, id).await;
    let body = json!({"llm_credentials": "organization", "reason": "r", "step_up_id": step_up(&server, &mia).await});
    let reply = send(
        &server,
        Method::PUT,
        &path,
        mia.token(),
        Some(tag.clone()),
        &body,
    )
    .await;
    assert_problem(&reply, 403, "forbidden");
    assert_eq!(reply.body["reason"], "owner_required");
    let used = step_up(&server, &owner).await;
    let body = json!({"llm_credentials": "none", "reason": "r", "step_up_id": used});
    let first = send(
        &server,
        Method::PUT,
        &path,
        owner.token(),
        Some(tag.clone()),
        &body,
    )
    .await;
    ok_host(&first);
    let reply = send(
        &server,
        Method::PUT,
        &path,
        owner.token(),
        Some(tag.clone()),
        &body,
    )
    .await;
    assert_problem(&reply, 401, "step_up_required");
    let denied = manage_audit(&server, id, "deny").await;
    assert_eq!(denied.last().unwrap()["reason_code"], "step_up_consumed");
    let body = json!({"llm_credentials": "none", "step_up_id": step_up(&server, &owner).await});
    let reply = send(
        &server,
        Method::PUT,
        &path,
        owner.token(),
        Some(tag.clone()),
        &body,
    )
    .await;
    assert_finding(&reply, "/reason", "required");
    assert_eq!(snapshot(&server, id).await, before);

    // The same declaration (none, the first PUT above): 200, no version, no
    // event, no permission version; audit no_change.
    let events = host_updated_events(&server, id).await.len();
    let permission = permission_version(&server).await;
    let version = host_version(&server, id).await;
    let reply = put_llm(&server, &owner, id, "none", None).await;
    let shown = ok_host(&reply);
    assert_eq!(shown["version"], version);
    assert_eq!(host_updated_events(&server, id).await.len(), events);
    assert_eq!(permission_version(&server).await, permission);
    let last = manage_audit(&server, id, "allow").await.pop().unwrap();
    assert_eq!(last["operation"], "llm_credentials");
    assert_eq!(last["no_change"], true);
    assert_eq!(last["llm_credentials"], "none");

    // A change: new version, one event, one permission version, audit.
    let mia_session = open_session(&server, id, &mia).await;
    let noah_session = open_session(&server, id, &noah).await;
    let owner_session = open_session(&server, id, &owner).await;
    let reply = put_llm(&server, &owner, id, "organization", None).await;
    let shown = ok_host(&reply);
    assert_eq!(shown["version"], version + 1);
    assert_eq!(shown["llm_credentials"], "organization");
    let updated = host_updated_events(&server, id).await;
    assert_eq!(updated.len(), events + 1);
    assert_eq!(updated.last().unwrap()["version"], version + 1);
    assert_eq!(permission_version(&server).await, permission + 1);
    let last = manage_audit(&server, id, "allow").await.pop().unwrap();
    assert_eq!(last["operation"], "llm_credentials");
    assert_eq!(last["llm_credentials"], "organization");
    assert_eq!(last["from_llm_credentials"], "none");
    assert_eq!(last["reason"], "the login changed");
    assert!(last.get("no_change").is_none());
    // Not to personal: nobody's session ends.
    for session in [&mia_session, &noah_session, &owner_session] {
        assert_open(&server, session).await;
    }

    // To personal with Mia as holder: everyone else's sessions end (i6_violation).
    let reply = put_llm(&server, &owner, id, "personal", Some(mia.id())).await;
    let shown = ok_host(&reply);
    assert_eq!(shown["credential_holder_id"], mia.id());
    assert_open(&server, &mia_session).await;
    assert_ended(&server, &noah_session, &noah, "i6_violation").await;
    assert_ended(&server, &owner_session, &owner, "i6_violation").await;
    assert_eq!(permission_version(&server).await, permission + 2);
    let last = manage_audit(&server, id, "allow").await.pop().unwrap();
    assert_eq!(last["credential_holder_id"], mia.id());
    assert_eq!(last["sessions_ended"], 2);

    // A change of the holder: Mia's session ends too.
    let noah_again = open_session(&server, id, &noah).await;
    let reply = put_llm(&server, &owner, id, "personal", Some(noah.id())).await;
    ok_host(&reply);
    assert_ended(&server, &mia_session, &mia, "i6_violation").await;
    assert_open(&server, &noah_again).await;
    assert_eq!(permission_version(&server).await, permission + 3);

    // I6: a grant terminal to someone other than the holder makes the change
    // roll back, with a deny entry. The grant is written as grant.create would
    // (before the host became personal), owned by this test.
    let reply = put_llm(&server, &owner, id, "none", None).await;
    ok_host(&reply);
    let now = server.clock.now_ms();
    let grant_id = bothy_proto::ids::uuid_v7(u64::try_from(now).unwrap())
        .unwrap()
        .hyphenated()
        .to_string();
    sqlx::query(
        "INSERT INTO grants (id, target_kind, target_id, capability, recipient_kind, recipient_id, \
         created_by, created_at, expires_at, revoked_by, revoked_at) \
         VALUES ($1, 'host', $2, 'terminal', 'person', $3, $4, $5, NULL, NULL, NULL)",
    )
    .bind(grant_id)
    .bind(id.to_owned())
    .bind(mia.id().to_owned())
    .bind(owner.id().to_owned())
    .bind(now)
    .execute(server.state.db().pool())
    .await
    .unwrap();
    let noah_third = open_session(&server, id, &noah).await;
    let mia_third = open_session(&server, id, &mia).await;
    let before = snapshot(&server, id).await;
    let step_up_id = step_up(&server, &owner).await;
    let body = json!({
        "llm_credentials": "personal",
        "credential_holder_id": noah.id(),
        "reason": "noah's subscription",
        "step_up_id": step_up_id,
    });
    let tag = etag_now(&server, id).await;
    let reply = send(
        &server,
        Method::PUT,
        &path,
        owner.token(),
        Some(tag.clone()),
        &body,
    )
    .await;
    assert_problem(&reply, 409, "i6_violation");
    assert_eq!(snapshot(&server, id).await, before, "rolled back");
    assert_open(&server, &noah_third).await;
    assert_open(&server, &mia_third).await;
    let denied = manage_audit(&server, id, "deny").await.pop().unwrap();
    assert_eq!(denied["operation"], "llm_credentials");
    assert_eq!(denied["reason_code"], "invariant_violation");
    assert_eq!(denied["llm_credentials"], "personal");
    assert_eq!(denied["credential_holder_id"], noah.id());
    // The rollback left the step-up unconsumed: the same request with Mia, the
    // grant's holder, as the login's holder goes through.
    let body = json!({
        "llm_credentials": "personal",
        "credential_holder_id": mia.id(),
        "reason": "mia's subscription",
        "step_up_id": step_up_id,
    });
    let reply = send(&server, Method::PUT, &path, owner.token(), Some(tag), &body).await;
    ok_host(&reply);
    assert_ended(&server, &noah_third, &noah, "i6_violation").await;
    assert_open(&server, &mia_third).await;

    // Retired is final: 409 conflict host_retired, also for the same declaration.
    let reply = patch(&server, &owner, id, json!({"state": "retired"})).await;
    ok_host(&reply);
    let before = snapshot(&server, id).await;
    for (llm, holder) in [("organization", None), ("personal", Some(mia.id()))] {
        let reply = put_llm(&server, &owner, id, llm, holder).await;
        assert_conflict(&reply, "host_retired");
    }
    assert_eq!(snapshot(&server, id).await, before);
}

/// Every state but retired takes the declaration, also before the confirmation.
async fn llm_credentials_in_every_state(engine: Engine) {
    let World {
        server, owner, mia, ..
    } = world(engine).await;
    let (pairing, _code) = create_host(&server, &owner, "waiting", None).await;
    // A deleted person cannot hold the login.
    let dora = invited_person(&server, &owner, "dora", "member", 5).await;
    sqlx::query("UPDATE persons SET status = 'deleted' WHERE principal_id = $1")
        .bind(dora.id().to_owned())
        .execute(server.state.db().pool())
        .await
        .unwrap();
    let reply = put_llm(&server, &owner, &pairing, "personal", Some(dora.id())).await;
    assert_finding(&reply, "/credential_holder_id", "unknown_user");
    let reply = put_llm(&server, &owner, &pairing, "personal", Some(mia.id())).await;
    assert_eq!(ok_host(&reply)["state"], "pairing");
    let (confirming, code) = create_host(&server, &owner, "paired", None).await;
    let paired = pair(&server, &code, &HostKeys::generate(12), &["mia_os"]).await;
    assert_eq!(paired.status, 200, "{:?}", paired.body);
    let reply = put_llm(&server, &owner, &confirming, "organization", None).await;
    assert_eq!(ok_host(&reply)["state"], "confirming");
    let host = active_host(&server, &owner, "on", None, 13, &["mia_os"], &[]).await;
    let reply = patch(&server, &owner, &host.host_id, json!({"state": "disabled"})).await;
    ok_host(&reply);
    let reply = put_llm(&server, &owner, &host.host_id, "organization", None).await;
    assert_eq!(ok_host(&reply)["state"], "disabled");
    let missing = "0190a000-0000-7000-8000-000000000000";
    let reply = put_llm_with(&server, &owner, missing, Some("\"1\"".into()), "none", None).await;
    assert_problem(&reply, 404, "not_found");
}

// ---------------------------------------------------------------------------
// updateHost: the state machine (3.1)

async fn update_state_transitions(engine: Engine) {
    let World {
        server,
        owner,
        mia,
        noah,
    } = world(engine).await;
    let host = active_host(
        &server,
        &owner,
        "states",
        Some(mia.id()),
        14,
        &["mia_os", "noah_os"],
        &[(mia.id(), "mia_os"), (noah.id(), "noah_os")],
    )
    .await;
    let id = host.host_id.as_str();

    // active → disabled: sessions end (host_disabled), disabled_reason owner,
    // one permission version, one host version, one event.
    let mia_session = open_session(&server, id, &mia).await;
    let noah_session = open_session(&server, id, &noah).await;
    let permission = permission_version(&server).await;
    let version = host_version(&server, id).await;
    let events = host_updated_events(&server, id).await.len();
    let reply = patch(&server, &owner, id, json!({"state": "disabled"})).await;
    let shown = ok_host(&reply);
    assert_eq!(shown["state"], "disabled");
    assert_eq!(shown["disabled_reason"], "owner");
    assert_eq!(shown["disabled_at"], server.clock.now_ms());
    assert_eq!(shown["version"], version + 1);
    assert_eq!(permission_version(&server).await, permission + 1);
    let updated = host_updated_events(&server, id).await;
    assert_eq!(updated.len(), events + 1);
    assert_eq!(updated.last().unwrap()["state"], "disabled");
    assert_ended(&server, &mia_session, &mia, "host_disabled").await;
    assert_ended(&server, &noah_session, &noah, "host_disabled").await;
    let last = manage_audit(&server, id, "allow").await.pop().unwrap();
    assert_eq!(last["operation"], "state");
    assert_eq!(last["from_state"], "active");
    assert_eq!(last["to_state"], "disabled");
    assert_eq!(last["disabled_reason"], "owner");
    assert_eq!(last["sessions_ended"], 2);

    // disabled → disabled: nothing changes.
    let reply = patch(&server, &owner, id, json!({"state": "disabled"})).await;
    assert_eq!(ok_host(&reply)["version"], version + 1);
    assert_eq!(permission_version(&server).await, permission + 1);
    assert_eq!(
        manage_audit(&server, id, "allow").await.pop().unwrap()["no_change"],
        true
    );

    // disabled → active: cleared, one permission version (sessions possible again).
    let reply = patch(&server, &owner, id, json!({"state": "active"})).await;
    let shown = ok_host(&reply);
    assert_eq!(shown["state"], "active");
    assert!(shown.get("disabled_reason").is_none() && shown.get("disabled_at").is_none());
    assert_eq!(permission_version(&server).await, permission + 2);

    // active → retired: sessions end (host_retired).
    let mia_session = open_session(&server, id, &mia).await;
    let reply = patch(&server, &owner, id, json!({"state": "retired"})).await;
    assert_eq!(ok_host(&reply)["state"], "retired");
    assert_ended(&server, &mia_session, &mia, "host_retired").await;
    assert_eq!(permission_version(&server).await, permission + 3);

    // Retired is final.
    let before = snapshot(&server, id).await;
    for state in ["active", "disabled"] {
        let reply = patch(&server, &owner, id, json!({"state": state})).await;
        assert_problem(&reply, 409, "invalid_state_transition");
    }
    for changes in [json!({"name": "again"}), json!({"state": "retired"})] {
        let reply = patch(&server, &owner, id, changes).await;
        assert_conflict(&reply, "host_retired");
    }
    assert_eq!(snapshot(&server, id).await, before);

    // disabled → retired: a new host version, but no new permission version
    // (a disabled host allows no session before or after).
    let other = active_host(&server, &owner, "second", None, 15, &["x"], &[]).await;
    let reply = patch(
        &server,
        &owner,
        &other.host_id,
        json!({"state": "disabled"}),
    )
    .await;
    ok_host(&reply);
    let permission = permission_version(&server).await;
    let version = host_version(&server, &other.host_id).await;
    let reply = patch(&server, &owner, &other.host_id, json!({"state": "retired"})).await;
    let shown = ok_host(&reply);
    assert_eq!(shown["state"], "retired");
    assert!(shown.get("disabled_reason").is_none());
    assert_eq!(shown["version"], version + 1);
    assert_eq!(permission_version(&server).await, permission);

    // Not edges of updateHost: pairing and confirming go nowhere from here.
    let (pairing, code) = create_host(&server, &owner, "pairing", None).await;
    for state in ["disabled", "active", "retired"] {
        let reply = patch(&server, &owner, &pairing, json!({"state": state})).await;
        assert_problem(&reply, 409, "invalid_state_transition");
    }
    let paired = pair(&server, &code, &HostKeys::generate(16), &["x"]).await;
    assert_eq!(paired.status, 200, "{:?}", paired.body);
    for state in ["disabled", "active", "retired"] {
        let reply = patch(&server, &owner, &pairing, json!({"state": state})).await;
        assert_problem(&reply, 409, "invalid_state_transition");
    }
    for (state, code) in [
        ("pairing", "not_allowed"),
        ("confirming", "not_allowed"),
        ("off", "invalid"),
    ] {
        let reply = patch(&server, &owner, &pairing, json!({"state": state})).await;
        assert_finding(&reply, "/state", code);
    }

    // A host disabled with duplicate_connection cannot be enabled, only
    // re-paired. The state is written directly: the control connection that
    // detects a second live connection (3.4) comes later.
    let dup = active_host(&server, &owner, "copied keys", None, 17, &["x"], &[]).await;
    sqlx::query(
        "UPDATE hosts SET state = 'disabled', disabled_reason = 'duplicate_connection', \
         disabled_at = $1 WHERE id = $2",
    )
    .bind(server.clock.now_ms())
    .bind(dup.host_id.clone())
    .execute(server.state.db().pool())
    .await
    .unwrap();
    let before = snapshot(&server, &dup.host_id).await;
    let reply = patch(&server, &owner, &dup.host_id, json!({"state": "active"})).await;
    assert_problem(&reply, 409, "invalid_state_transition");
    assert_eq!(snapshot(&server, &dup.host_id).await, before);
    // Retiring it is allowed.
    let reply = patch(&server, &owner, &dup.host_id, json!({"state": "retired"})).await;
    assert_eq!(ok_host(&reply)["state"], "retired");
}

// ---------------------------------------------------------------------------
// updateHost: name, assignee, assignments, the request rules

async fn update_members_and_no_change(engine: Engine) {
    let World {
        server,
        owner,
        mia,
        noah,
    } = world(engine).await;
    let second_owner = invited_person(&server, &owner, "otto", "owner", 4).await;
    let host = active_host(
        &server,
        &owner,
        "members",
        Some(mia.id()),
        18,
        &["mia_os", "noah_os", "otto_os"],
        &[
            (mia.id(), "mia_os"),
            (noah.id(), "noah_os"),
            (second_owner.id(), "otto_os"),
        ],
    )
    .await;
    let id = host.host_id.as_str();
    let before = snapshot(&server, id).await;

    // The request rules.
    let reply = patch(&server, &owner, id, json!({})).await;
    assert_finding(&reply, "", "required");
    let reply = patch(
        &server,
        &owner,
        id,
        json!({"assigned_user_id": noah.id(), "clear_assigned_user": true}),
    )
    .await;
    assert_finding(&reply, "/clear_assigned_user", "mutually_exclusive");
    for (name, code) in [
        ("", "required"),
        ("   ", "required"),
        ("a\u{7}b", "invalid"),
    ] {
        let reply = patch(&server, &owner, id, json!({"name": name})).await;
        assert_finding(&reply, "/name", code);
    }
    let reply = patch(&server, &owner, id, json!({"name": "x".repeat(101)})).await;
    assert_finding(&reply, "/name", "too_long");
    let reply = patch(&server, &owner, id, json!({"colour": "red"})).await;
    assert_finding(&reply, "/colour", "unknown_member");
    let reply = patch(
        &server,
        &owner,
        id,
        json!({"assigned_user_id": "0190a000-0000-7000-8000-000000000000"}),
    )
    .await;
    assert_finding(&reply, "/assigned_user_id", "unknown_user");
    let reply = patch(
        &server,
        &owner,
        id,
        json!({"end_session_users": [noah.id(), noah.id()]}),
    )
    .await;
    assert_finding(&reply, "/end_session_users/1", "duplicate");
    let reply = patch(
        &server,
        &owner,
        id,
        json!({"end_session_users": ["0190a000-0000-7000-8000-000000000000"]}),
    )
    .await;
    assert_finding(&reply, "/end_session_users/0", "unknown_user");
    // If-Match is mandatory and must be current; a member is refused.
    let reply = patch_with(&server, &owner, id, None, json!({"name": "n"})).await;
    assert_problem(&reply, 428, "precondition_required");
    let reply = patch_with(
        &server,
        &owner,
        id,
        Some("\"1\"".into()),
        json!({"name": "n"}),
    )
    .await;
    assert_problem(&reply, 412, "precondition_failed");
    let reply = patch(&server, &mia, id, json!({"name": "n"})).await;
    assert_problem(&reply, 403, "forbidden");
    assert_eq!(snapshot(&server, id).await, before);

    // Nothing changes: every member equal to the current value.
    let reply = patch(
        &server,
        &owner,
        id,
        json!({
            "name": "members",
            "assigned_user_id": mia.id(),
            "state": "active",
            "assign_session_users": [{"user_id": noah.id(), "os_user": "noah_os"}],
            "end_session_users": [owner.id()],
        }),
    )
    .await;
    let shown = ok_host(&reply);
    assert_eq!(snapshot(&server, id).await, before);
    assert_eq!(shown, before.0);
    let last = manage_audit(&server, id, "allow").await.pop().unwrap();
    assert_eq!(last["operation"], "update");
    assert_eq!(last["no_change"], true);
    assert_eq!(last["reason"], "change of plan");

    // A name change: a new host version and event, no new permission version.
    let (_, _, permission, _) = before;
    let version = host_version(&server, id).await;
    let reply = patch(&server, &owner, id, json!({"name": "renamed"})).await;
    let shown = ok_host(&reply);
    assert_eq!(shown["name"], "renamed");
    assert_eq!(shown["version"], version + 1);
    assert_eq!(permission_version(&server).await, permission);
    let last = manage_audit(&server, id, "allow").await.pop().unwrap();
    assert_eq!(last["operation"], "update");
    assert_eq!(last["name_changed"], true);
    assert!(last.get("to_assigned_user_id").is_none());
    assert!(
        !audit_rows(&server)
            .await
            .iter()
            .any(|row| row.details.to_string().contains("renamed")),
        "the host name never reaches the audit"
    );

    // A step-up is consumed by exactly one request (here one that finds
    // nothing to change); the refusal is audited.
    let used = step_up(&server, &owner).await;
    let body = json!({"name": "renamed", "reason": "again", "step_up_id": used});
    let path = format!("/api/v1/hosts/{id}");
    let tag = etag_now(&server, id).await;
    let reply = send(
        &server,
        Method::PATCH,
        &path,
        owner.token(),
        Some(tag.clone()),
        &body,
    )
    .await;
    assert_eq!(ok_host(&reply)["version"], version + 1);
    let reply = send(
        &server,
        Method::PATCH,
        &path,
        owner.token(),
        Some(tag),
        &body,
    )
    .await;
    assert_problem(&reply, 401, "step_up_required");
    let denied = manage_audit(&server, id, "deny").await.pop().unwrap();
    assert_eq!(denied["operation"], "update");
    assert_eq!(denied["reason_code"], "step_up_consumed");

    // An assignee change ends the former (member) assignee's sessions.
    let mia_session = open_session(&server, id, &mia).await;
    let noah_session = open_session(&server, id, &noah).await;
    let reply = patch(&server, &owner, id, json!({"assigned_user_id": noah.id()})).await;
    let shown = ok_host(&reply);
    assert_eq!(shown["assigned_user_id"], noah.id());
    assert_ended(&server, &mia_session, &mia, "access_revoked").await;
    assert_open(&server, &noah_session).await;
    assert_eq!(permission_version(&server).await, permission + 1);
    let last = manage_audit(&server, id, "allow").await.pop().unwrap();
    assert_eq!(last["from_assigned_user_id"], mia.id());
    assert_eq!(last["to_assigned_user_id"], noah.id());
    assert_eq!(last["name_changed"], false);

    // An owner as former assignee keeps their sessions (owners have terminal
    // everywhere); clearing the assignee.
    let reply = patch(
        &server,
        &owner,
        id,
        json!({"assigned_user_id": second_owner.id()}),
    )
    .await;
    ok_host(&reply);
    assert_ended(&server, &noah_session, &noah, "access_revoked").await;
    let otto_session = open_session(&server, id, &second_owner).await;
    let reply = patch(&server, &owner, id, json!({"clear_assigned_user": true})).await;
    let shown = ok_host(&reply);
    assert!(shown.get("assigned_user_id").is_none());
    assert_open(&server, &otto_session).await;
    assert_eq!(permission_version(&server).await, permission + 3);
    let last = manage_audit(&server, id, "allow").await.pop().unwrap();
    assert_eq!(last["from_assigned_user_id"], second_owner.id());
    assert!(last.get("to_assigned_user_id").is_none());

    // Ending an assignment ends that person's sessions there (access_revoked)
    // and raises the permission version once, however many end.
    let reply = patch(
        &server,
        &owner,
        id,
        json!({"end_session_users": [second_owner.id(), mia.id()]}),
    )
    .await;
    let shown = ok_host(&reply);
    assert_eq!(
        shown["session_users"],
        json!([{"user_id": noah.id(), "os_user": "noah_os"}])
    );
    assert_ended(&server, &otto_session, &second_owner, "access_revoked").await;
    assert_eq!(permission_version(&server).await, permission + 4);

    // Several members at once: one host version, one event, one permission version.
    let version = host_version(&server, id).await;
    let events = host_updated_events(&server, id).await.len();
    let reply = patch(
        &server,
        &owner,
        id,
        json!({
            "name": "all at once",
            "assigned_user_id": mia.id(),
            "state": "disabled",
            "end_session_users": [noah.id()],
        }),
    )
    .await;
    let shown = ok_host(&reply);
    assert_eq!(shown["version"], version + 1);
    assert_eq!(host_updated_events(&server, id).await.len(), events + 1);
    assert_eq!(permission_version(&server).await, permission + 5);
    // One entry per operation; entries of one unit of work share its time, so
    // their order is not fixed.
    let mut ops: Vec<String> = manage_audit(&server, id, "allow")
        .await
        .iter()
        .rev()
        .take(3)
        .map(|d| d["operation"].as_str().unwrap().to_owned())
        .collect();
    ops.sort();
    assert_eq!(ops, ["session_user", "state", "update"]);
}

both_engines!(
    session_user_taken_now_or_in_the_past,
    names_the_host_does_not_report,
    llm_credentials_rules,
    llm_credentials_in_every_state,
    update_state_transitions,
    update_members_and_no_change,
);
