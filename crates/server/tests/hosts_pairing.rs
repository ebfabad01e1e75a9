//! Pairing against the real server on port 0 over TLS, on both engines (spec
//! 3.1–3.3, 10.1, 13; DESIGN 3.4): createHost → host.pair → confirmHost, the
//! fingerprint attempts with and without `Idempotency-Key` and the fallback to
//! pairing (TM-T19), every refusal of a pairing code with one body and the
//! refusal of a wrong checksum without the database (TM-T20), every key and
//! report refusal of host.pair, `host_key_reused` and `host_key_in_use`, the
//! re-pairing from every state, the reads, agents (TM-T17's part) and a
//! canary that no host name, code or key reaches the audit or the event log.
//!
//! Time moves only through the server's manual clock.

#![allow(clippy::unwrap_used)] // test bodies are plain fns called by the generated #[test]s

use bothy_testkit as support;
use bothy_testkit::hosts as hosts_common;
use bothy_testkit::identity as identity_common;

use std::time::Duration;

use bothy_proto::pairing::PairingCode;
use bothy_server::clock::Clock;
use bothy_server::db::Engine;
use bothy_server::hosts::pairing;
use hosts_common::*;
use identity_common::*;
use reqwest::Method;
use serde_json::{Value, json};
use sqlx::Row;
use support::both_engines;
use support::server::TestServer;

/// Enough `rl.public_auth` for the refusals these tests make on purpose.
const GENEROUS_LIMIT: &str = "rl:\n  public_auth:\n    burst: 1000\n    refill_per_minute: 1000\n";

async fn server(engine: Engine) -> TestServer {
    TestServer::start_with(engine, GENEROUS_LIMIT).await
}

/// One column of the host row, as text (NULL: None).
async fn column(server: &TestServer, host_id: &str, column: &str) -> Option<String> {
    sqlx::query(&format!("SELECT {column} FROM hosts WHERE id = $1"))
        .bind(host_id)
        .fetch_one(server.state.db().pool())
        .await
        .unwrap()
        .get::<Option<String>, _>(0)
}

/// One integer column of the host row.
async fn number(server: &TestServer, host_id: &str, column: &str) -> Option<i64> {
    sqlx::query(&format!("SELECT {column} FROM hosts WHERE id = $1"))
        .bind(host_id)
        .fetch_one(server.state.db().pool())
        .await
        .unwrap()
        .get::<Option<i64>, _>(0)
}

/// The host.manage entries of one host with this decision.
async fn manage_entries(server: &TestServer, host_id: &str, decision: &str) -> Vec<Value> {
    audit_of(server, "host.manage", decision)
        .await
        .into_iter()
        .filter(|row| row.target_id.as_deref() == Some(host_id))
        .map(|row| row.details)
        .collect()
}

/// A code of the right form whose checksum is wrong.
fn bad_checksum(code: &str) -> String {
    let last = code.chars().last().unwrap();
    let replacement = if last == '0' { '1' } else { '0' };
    format!("{}{replacement}", &code[..code.len() - 1])
}

fn assert_unauthenticated(reply: &Reply) {
    assert_eq!(reply.status, 401, "{:?}", reply.body);
    assert_eq!(
        reply.body,
        json!({"type": "about:blank", "title": "Unauthorized", "status": 401,
               "code": "unauthenticated"})
    );
}

fn assert_finding(reply: &Reply, pointer: &str, code: &str) {
    assert_eq!(reply.status, 400, "{:?}", reply.body);
    assert_eq!(reply.body["code"], "validation_failed");
    let errors = reply.body["errors"].as_array().unwrap();
    assert!(
        errors
            .iter()
            .any(|e| e["pointer"] == pointer && e["code"] == code),
        "{pointer} {code} in {errors:?}"
    );
}

/// Expected `errors[]`: `(pointer, code)` in order.
type Findings = Vec<(&'static str, &'static str)>;

fn id(value: &Value) -> String {
    value.as_str().unwrap().to_owned()
}

// ---------------------------------------------------------------------------

async fn create_pair_confirm(engine: Engine) {
    let server = server(engine).await;
    let owner = owner_person(&server, "olivia").await;
    let bob = invited_person(&server, &owner, "bob", "member", 2).await;
    let versions_before = permission_version(&server).await;

    // createHost: the code once, only its HMAC stored, valid for 15 minutes.
    let body = create_body(&server, &owner, "  build box  ", Some(bob.id())).await;
    let created_at = server.clock.now_ms();
    let reply = create_host_with(&server, &owner, body).await;
    assert_eq!(reply.status, 201, "{:?}", reply.body);
    assert_eq!(etag_of(&reply), "\"1\"");
    let host = &reply.body["host"];
    let host_id = id(&host["id"]);
    let code = id(&reply.body["pairing_code"]);
    assert!(PairingCode::parse(&code).is_ok(), "{code}");
    assert_eq!(host["name"], "build box");
    assert_eq!(host["state"], "pairing");
    assert_eq!(host["assigned_user_id"], bob.id());
    assert_eq!(host["key_generation"], 0);
    assert_eq!(host["version"], 1);
    assert_eq!(host["llm_credentials"], "none");
    assert_eq!(host["pairing_expires_at"], created_at + 15 * 60 * 1000);
    assert_eq!(host["session_users"], json!([]));
    assert!(host.get("noise_public_key").is_none());
    assert!(host.get("key_fingerprint").is_none());
    assert!(host.get("pairing_code_hash").is_none());
    let stored = column(&server, &host_id, "pairing_code_hash")
        .await
        .unwrap();
    let parsed = PairingCode::parse(&code).unwrap();
    assert_eq!(stored, pairing::code_hash(server.state.pepper(), &parsed));
    assert_ne!(stored, code);
    assert_eq!(permission_version(&server).await, versions_before + 1);
    assert_eq!(
        manage_entries(&server, &host_id, "allow").await,
        [json!({
            "host_id": host_id, "operation": "create", "to_state": "pairing",
            "to_assigned_user_id": bob.id(), "reason": REASON,
        })]
    );
    assert_eq!(
        host_updated_events(&server, &host_id).await,
        [json!({"host_id": host_id, "version": 1, "state": "pairing", "key_changed": false})]
    );

    // host.pair: the keys, the report as sent, confirming.
    let keys = HostKeys::generate(7);
    let mut body = pair_body(&code, &keys, &["bob", "Zed_2"]);
    body["session_users"][0]["workdirs"] =
        json!([{"display_name": "api"}, {"display_name": "web"}]);
    body["is_server_host"] = json!(true);
    body["require_local_confirm"] = json!(true);
    let paired = pair_with(&server, body.clone()).await;
    assert_eq!(paired.status, 200, "{:?}", paired.body);
    let instance: String = sqlx::query_scalar("SELECT instance_id FROM instance WHERE id = 1")
        .fetch_one(server.state.db().pool())
        .await
        .unwrap();
    assert_eq!(
        paired.body,
        json!({"host_id": host_id, "instance_id": instance,
               "key_fingerprint": keys.fingerprint().as_str()})
    );
    let read = get_host(&server, owner.token(), &host_id).await;
    assert_eq!(read.status, 200);
    assert_eq!(etag_of(&read), "\"2\"");
    let host = &read.body;
    assert_eq!(host["state"], "confirming");
    assert_eq!(host["version"], 2);
    assert_eq!(host["key_generation"], 1);
    assert_eq!(host["noise_public_key"], keys.noise_public_b64());
    assert_eq!(host["key_fingerprint"], keys.fingerprint().as_str());
    assert_eq!(host["reported_session_users"], body["session_users"]);
    assert_eq!(host["reported_profiles"], body["profiles"]);
    assert_eq!(host["reported_host_version"], "1.4.0");
    assert_eq!(host["reported_platform"], "linux");
    assert_eq!(host["reported_os_version"], "Debian 12");
    assert_eq!(host["reported_is_server_host"], true);
    assert_eq!(host["reported_require_local_confirm"], true);
    assert_eq!(host["is_server_host"], true);
    assert!(host.get("pairing_expires_at").is_none());
    assert_eq!(column(&server, &host_id, "pairing_code_hash").await, None);
    assert_eq!(
        column(&server, &host_id, "auth_public_jwk").await.unwrap(),
        keys.auth_jwk().to_json()
    );
    assert_eq!(
        column(&server, &host_id, "auth_jkt").await.unwrap(),
        keys.auth_jkt()
    );
    assert_eq!(
        audit_of(&server, "host.pair", "allow")
            .await
            .iter()
            .map(|row| (row.actor_kind.clone(), row.details.clone()))
            .collect::<Vec<_>>(),
        [(
            "host".to_owned(),
            json!({"host_id": host_id, "fingerprint": keys.fingerprint().audit_form(),
                   "key_generation": 1, "platform": "linux"})
        )]
    );
    // The code is single use.
    assert_unauthenticated(&pair(&server, &code, &HostKeys::generate(8), &["bob"]).await);

    // confirmHost: the prefix in lower case matches too; a session user for bob.
    let versions_before = permission_version(&server).await;
    let prefix = keys.prefix().to_lowercase();
    let confirmed = confirm(
        &server,
        &owner,
        &host_id,
        &prefix,
        "organization",
        None,
        true,
        &[(bob.id(), "bob")],
    )
    .await;
    assert_eq!(confirmed.status, 200, "{:?}", confirmed.body);
    assert_eq!(etag_of(&confirmed), "\"3\"");
    let host = &confirmed.body["host"];
    assert_eq!(host["state"], "active");
    assert_eq!(host["version"], 3);
    assert_eq!(host["llm_credentials"], "organization");
    assert_eq!(host["declared_server_host"], true);
    assert_eq!(host["session_users"][0]["user_id"], bob.id());
    assert_eq!(host["session_users"][0]["os_user"], "bob");
    assert!(permission_version(&server).await > versions_before);
    let entries = manage_entries(&server, &host_id, "allow").await;
    let confirm_entry = entries
        .iter()
        .find(|e| e["operation"] == "confirm")
        .unwrap();
    assert_eq!(
        confirm_entry,
        &json!({
            "host_id": host_id, "operation": "confirm", "result": "confirmed",
            "fingerprint": keys.fingerprint().audit_form(), "key_generation": 1,
            "llm_credentials": "organization", "declared_server_host": true,
            "from_state": "confirming", "to_state": "active", "reason": REASON,
        })
    );
    assert!(
        entries
            .iter()
            .any(|e| e["operation"] == "session_user" && e["os_user"] == "bob")
    );
    assert_eq!(
        host_updated_events(&server, &host_id).await,
        [
            json!({"host_id": host_id, "version": 1, "state": "pairing", "key_changed": false}),
            json!({"host_id": host_id, "version": 2, "state": "confirming", "key_changed": true}),
            json!({"host_id": host_id, "version": 3, "state": "active", "key_changed": false}),
        ]
    );

    // A second host answers the same instance_id.
    let (_, code) = create_host(&server, &owner, "second", None).await;
    let paired = pair(&server, &code, &HostKeys::generate(9), &["bob"]).await;
    assert_eq!(paired.body["instance_id"], instance.as_str());
}

async fn create_host_refusals(engine: Engine) {
    let server = server(engine).await;
    let owner = owner_person(&server, "olivia").await;
    let member = invited_person(&server, &owner, "mia", "member", 2).await;

    for (name, code) in [
        ("", "required"),
        ("   ", "required"),
        ("a\u{7}b", "invalid"),
        (&"x".repeat(101) as &str, "too_long"),
    ] {
        let body = create_body(&server, &owner, name, None).await;
        assert_finding(
            &create_host_with(&server, &owner, body).await,
            "/name",
            code,
        );
    }
    let at_limit = create_body(&server, &owner, &"é".repeat(100), None).await;
    assert_eq!(
        create_host_with(&server, &owner, at_limit).await.status,
        201
    );

    let mut body = create_body(&server, &owner, "box", None).await;
    body["reason"] = json!(" ");
    assert_finding(
        &create_host_with(&server, &owner, body).await,
        "/reason",
        "required",
    );
    let mut body = create_body(&server, &owner, "box", None).await;
    body["reason"] = json!("x".repeat(501));
    assert_finding(
        &create_host_with(&server, &owner, body).await,
        "/reason",
        "too_long",
    );
    let mut body = create_body(&server, &owner, "box", None).await;
    body.as_object_mut().unwrap().remove("reason");
    assert_finding(
        &create_host_with(&server, &owner, body).await,
        "/reason",
        "required",
    );

    // The assignee must be an existing person who is not deleted.
    let stranger = bothy_proto::ids::uuid_v7(1)
        .unwrap()
        .hyphenated()
        .to_string();
    let body = create_body(&server, &owner, "box", Some(&stranger)).await;
    assert_finding(
        &create_host_with(&server, &owner, body).await,
        "/assigned_user_id",
        "unknown_user",
    );
    let agent = post(
        &server,
        "/api/v1/tokens",
        Some(owner.token()),
        json!({"kind": "agent", "name": "builder"}),
    )
    .await;
    assert_eq!(agent.status, 201, "{:?}", agent.body);
    let body = create_body(
        &server,
        &owner,
        "box",
        Some(&id(&agent.body["principal_id"])),
    )
    .await;
    assert_finding(
        &create_host_with(&server, &owner, body).await,
        "/assigned_user_id",
        "unknown_user",
    );

    // The step-up: none, or used.
    let body = create_body(&server, &owner, "box", None).await;
    assert_eq!(
        create_host_with(&server, &owner, body.clone()).await.status,
        201
    );
    let again = create_host_with(&server, &owner, body).await;
    assert_eq!(again.status, 401);
    assert_eq!(again.body["code"], "step_up_required");
    let denied = audit_of(&server, "host.manage", "deny").await;
    assert_eq!(
        denied.last().unwrap().details,
        json!({"operation": "create", "reason_code": "step_up_consumed"})
    );

    // TM-T17: an agent's token; a member.
    let token = id(&agent.body["token"]);
    let refused = post(
        &server,
        "/api/v1/hosts",
        Some(&token),
        json!({"name": "box", "reason": REASON, "step_up_id": stranger}),
    )
    .await;
    assert_eq!(refused.status, 403);
    assert_eq!(refused.body["code"], "forbidden");
    assert_eq!(refused.body["reason"], "subject_kind_not_allowed");
    // (Audit rows of one millisecond have no order: find it by its actor.)
    let denied = audit_of(&server, "host.manage", "deny").await;
    let agents: Vec<&AuditRow> = denied
        .iter()
        .filter(|row| row.actor_kind == "agent")
        .collect();
    assert_eq!(agents.len(), 1);
    let last = agents[0];
    assert_eq!(
        last.actor_id.as_deref(),
        Some(id(&agent.body["principal_id"]).as_str())
    );
    assert_eq!(
        last.details,
        json!({"reason_code": "subject_kind_not_allowed"})
    );
    let body = create_body(&server, &member, "box", None).await;
    let refused = create_host_with(&server, &member, body).await;
    assert_eq!(refused.status, 403);
    assert_eq!(refused.body["reason"], "owner_required");
    // The agent on the other owner routes of this file, too.
    for path in [
        format!("/api/v1/hosts/{stranger}/pairing-code"),
        format!("/api/v1/hosts/{stranger}/confirm"),
    ] {
        let refused = post(&server, &path, Some(&token), json!({})).await;
        assert_eq!(refused.status, 403, "{path}");
        assert_eq!(refused.body["reason"], "subject_kind_not_allowed");
    }
}

/// TM-T19: wrong fingerprints up to terminal.fingerprint_max_attempts.
async fn tm_t19_fallback_after_max_attempts(engine: Engine) {
    let server = server(engine).await;
    let owner = owner_person(&server, "olivia").await;
    let (host_id, code) = create_host(&server, &owner, "box", None).await;
    let keys = HostKeys::generate(11);
    assert_eq!(pair(&server, &code, &keys, &["alice"]).await.status, 200);
    let version = number(&server, &host_id, "version").await.unwrap();

    for remaining in [2, 1] {
        let reply = confirm(
            &server,
            &owner,
            &host_id,
            &keys.wrong_prefix(),
            "none",
            None,
            false,
            &[],
        )
        .await;
        assert_eq!(reply.status, 409, "{:?}", reply.body);
        assert_eq!(reply.body["code"], "fingerprint_mismatch");
        assert_eq!(reply.body["attempts_remaining"], remaining);
        // The counter is not part of Host: no new version.
        assert_eq!(number(&server, &host_id, "version").await, Some(version));
        assert_eq!(
            get_host(&server, owner.token(), &host_id).await.body["state"],
            "confirming"
        );
    }
    let last = confirm(
        &server,
        &owner,
        &host_id,
        &keys.wrong_prefix(),
        "none",
        None,
        false,
        &[],
    )
    .await;
    let failed_at = server.clock.now_ms();
    assert_eq!(last.status, 409);
    assert_eq!(last.body["code"], "fingerprint_mismatch");
    assert_eq!(last.body["attempts_remaining"], 0);

    // Back to pairing, keys discarded, key_fingerprint kept, a code nobody saw.
    let host = get_host(&server, owner.token(), &host_id).await.body;
    assert_eq!(host["state"], "pairing");
    assert_eq!(host["version"], version + 1);
    assert!(host.get("noise_public_key").is_none());
    assert!(host.get("key_fingerprint").is_none());
    assert_eq!(host["pairing_expires_at"], failed_at);
    for key_column in ["noise_public_key", "auth_public_jwk", "auth_jkt"] {
        assert_eq!(
            column(&server, &host_id, key_column).await,
            None,
            "{key_column}"
        );
    }
    assert_eq!(
        column(&server, &host_id, "key_fingerprint")
            .await
            .as_deref(),
        Some(keys.fingerprint().as_str())
    );
    let hidden = column(&server, &host_id, "pairing_code_hash")
        .await
        .unwrap();
    let used = pairing::code_hash(server.state.pepper(), &PairingCode::parse(&code).unwrap());
    assert_ne!(hidden, used);
    assert_eq!(
        number(&server, &host_id, "fingerprint_failures").await,
        Some(0)
    );
    let events = host_updated_events(&server, &host_id).await;
    assert_eq!(
        events.last().unwrap(),
        &json!({"host_id": host_id, "version": version + 1, "state": "pairing",
                "key_changed": true})
    );
    let fp = keys.fingerprint().audit_form();
    assert_eq!(
        manage_entries(&server, &host_id, "deny").await,
        [
            json!({"host_id": host_id, "operation": "confirm", "result": "fingerprint_mismatch",
                   "fingerprint": fp, "key_generation": 1, "attempts_remaining": 2,
                   "reason": REASON}),
            json!({"host_id": host_id, "operation": "confirm", "result": "fingerprint_mismatch",
                   "fingerprint": fp, "key_generation": 1, "attempts_remaining": 1,
                   "reason": REASON}),
            json!({"host_id": host_id, "operation": "confirm",
                   "result": "fingerprint_max_attempts", "fingerprint": fp,
                   "key_generation": 1, "attempts_remaining": 0, "from_state": "confirming",
                   "to_state": "pairing", "reason": REASON}),
        ]
    );

    // The right prefix now is too late, the used code does not work: only a
    // new pairing code continues.
    let late = confirm(
        &server,
        &owner,
        &host_id,
        &keys.prefix(),
        "none",
        None,
        false,
        &[],
    )
    .await;
    assert_eq!(late.status, 409);
    assert_eq!(late.body["code"], "invalid_state_transition");
    let other_keys = HostKeys::generate(12);
    assert_unauthenticated(&pair(&server, &code, &other_keys, &["alice"]).await);
    let new_code = new_pairing_code(&server, &owner, &host_id).await;
    let paired = pair(&server, &new_code, &other_keys, &["alice"]).await;
    assert_eq!(paired.status, 200, "{:?}", paired.body);
    let host = get_host(&server, owner.token(), &host_id).await.body;
    assert_eq!(host["state"], "confirming");
    assert_eq!(host["key_generation"], 2);
    let pair_entry = audit_of(&server, "host.pair", "allow").await.pop().unwrap();
    assert_eq!(
        pair_entry.details,
        json!({"host_id": host_id, "fingerprint": other_keys.fingerprint().audit_form(),
               "old_fingerprint": fp, "key_generation": 2, "platform": "linux"})
    );
    let confirmed = confirm(
        &server,
        &owner,
        &host_id,
        &other_keys.prefix(),
        "none",
        None,
        false,
        &[],
    )
    .await;
    assert_eq!(confirmed.status, 200, "{:?}", confirmed.body);
}

/// Attempts with and without `Idempotency-Key`, `If-Match`, the prefix's form,
/// refusals that do not count.
async fn fingerprint_attempts(engine: Engine) {
    let server = server(engine).await;
    let owner = owner_person(&server, "olivia").await;
    let (host_id, code) = create_host(&server, &owner, "box", None).await;
    let keys = HostKeys::generate(21);
    assert_eq!(pair(&server, &code, &keys, &["alice"]).await.status, 200);
    let failures = || number(&server, &host_id, "fingerprint_failures");
    let etag = etag_of(&get_host(&server, owner.token(), &host_id).await);

    // Malformed prefixes do not count.
    let right = keys.prefix();
    for bad in [
        right[..7].to_owned(),
        format!("{right}0"),
        format!("{}I", &right[..7]),
        format!("{}O", &right[..7]),
        format!("{}-{}", &right[..4], &right[4..7]),
        String::new(),
    ] {
        let body = confirm_body(&server, &owner, &bad, "none", None, false, &[]).await;
        let reply = confirm_with(&server, &owner, &host_id, &body, &[]).await;
        assert_finding(&reply, "/fingerprint_prefix", "invalid_format");
        assert_eq!(failures().await, Some(0), "{bad:?}");
    }
    // A refused step-up does not count either.
    let mut body = confirm_body(
        &server,
        &owner,
        &keys.wrong_prefix(),
        "none",
        None,
        false,
        &[],
    )
    .await;
    body["step_up_id"] = json!(
        bothy_proto::ids::uuid_v7(1)
            .unwrap()
            .hyphenated()
            .to_string()
    );
    let reply = confirm_with(&server, &owner, &host_id, &body, &[]).await;
    assert_eq!(reply.status, 401);
    assert_eq!(reply.body["code"], "step_up_required");
    assert_eq!(failures().await, Some(0));
    // Nor a stale If-Match.
    let body = confirm_body(
        &server,
        &owner,
        &keys.wrong_prefix(),
        "none",
        None,
        false,
        &[],
    )
    .await;
    let reply = confirm_with(&server, &owner, &host_id, &body, &[("if-match", "\"99\"")]).await;
    assert_eq!(reply.status, 412);
    assert_eq!(failures().await, Some(0));

    // With a key: counts once, a retry replays the stored answer.
    let body = confirm_body(
        &server,
        &owner,
        &keys.wrong_prefix(),
        "none",
        None,
        false,
        &[],
    )
    .await;
    let first = confirm_with(
        &server,
        &owner,
        &host_id,
        &body,
        &[("idempotency-key", "try-1")],
    )
    .await;
    assert_eq!(first.status, 409);
    assert_eq!(first.body["attempts_remaining"], 2);
    assert_eq!(failures().await, Some(1));
    let retry = confirm_with(
        &server,
        &owner,
        &host_id,
        &body,
        &[("idempotency-key", "try-1")],
    )
    .await;
    assert_eq!(retry.status, 409);
    assert_eq!(retry.body, first.body);
    assert_eq!(
        retry.headers["content-type"].to_str().unwrap(),
        "application/problem+json"
    );
    assert_eq!(failures().await, Some(1));
    // The same key with another body.
    let other = confirm_body(
        &server,
        &owner,
        &keys.wrong_prefix(),
        "none",
        None,
        false,
        &[],
    )
    .await;
    let reused = confirm_with(
        &server,
        &owner,
        &host_id,
        &other,
        &[("idempotency-key", "try-1")],
    )
    .await;
    assert_eq!(reused.status, 422);
    assert_eq!(reused.body["code"], "idempotency_key_reused");
    assert_eq!(failures().await, Some(1));

    // Without a key, with the same If-Match as before the attempts: counts.
    let reply = confirm_with(&server, &owner, &host_id, &other, &[("if-match", &etag)]).await;
    assert_eq!(reply.status, 409);
    assert_eq!(reply.body["attempts_remaining"], 1);
    assert_eq!(failures().await, Some(2));
    assert_eq!(
        etag_of(&get_host(&server, owner.token(), &host_id).await),
        etag,
        "failed attempts make no new version"
    );

    // The right prefix with a key and If-Match; its retry replays 200.
    let body = confirm_body(&server, &owner, &right, "none", None, false, &[]).await;
    let headers = [("idempotency-key", "try-2"), ("if-match", etag.as_str())];
    let done = confirm_with(&server, &owner, &host_id, &body, &headers).await;
    assert_eq!(done.status, 200, "{:?}", done.body);
    assert_eq!(done.body["host"]["state"], "active");
    assert_eq!(failures().await, Some(0));
    let replayed = confirm_with(&server, &owner, &host_id, &body, &headers).await;
    assert_eq!(replayed.status, 200);
    assert_eq!(replayed.body, done.body);
    assert_eq!(manage_entries(&server, &host_id, "allow").await.len(), 2);
    // Confirming an active host.
    let again = confirm(&server, &owner, &host_id, &right, "none", None, false, &[]).await;
    assert_eq!(again.status, 409);
    assert_eq!(again.body["code"], "invalid_state_transition");
}

/// TM-T20: a code twice, expired, replaced, unknown, with a wrong checksum or
/// form: one body; refusals aggregated in the audit.
async fn tm_t20_code_refusals(engine: Engine) {
    let server = server(engine).await;
    let owner = owner_person(&server, "olivia").await;
    let keys = HostKeys::generate(31);

    let refusals = std::cell::Cell::new(0i64);
    let refused = |reply: Reply| {
        assert_unauthenticated(&reply);
        refusals.set(refusals.get() + 1);
    };

    let (_, used) = create_host(&server, &owner, "used", None).await;
    assert_eq!(pair(&server, &used, &keys, &["alice"]).await.status, 200);
    refused(pair(&server, &used, &HostKeys::generate(32), &["alice"]).await);

    // Expired: valid before pairing_expires_at, not at it.
    let (expiring_id, expiring) = create_host(&server, &owner, "expiring", None).await;
    let expires: i64 = number(&server, &expiring_id, "pairing_expires_at")
        .await
        .unwrap();
    server.clock.set(expires);
    refused(pair(&server, &expiring, &HostKeys::generate(33), &["alice"]).await);
    let (other_id, other) = create_host(&server, &owner, "just in time", None).await;
    let deadline = number(&server, &other_id, "pairing_expires_at")
        .await
        .unwrap();
    server.clock.set(deadline - 1);
    assert_eq!(
        pair(&server, &other, &HostKeys::generate(34), &["alice"])
            .await
            .status,
        200
    );

    // Replaced by issueHostPairingCode.
    let (replaced_id, replaced) = create_host(&server, &owner, "replaced", None).await;
    let fresh = new_pairing_code(&server, &owner, &replaced_id).await;
    refused(pair(&server, &replaced, &HostKeys::generate(35), &["alice"]).await);

    // Unknown, wrong checksum, wrong form.
    let unknown = PairingCode::generate().unwrap();
    refused(pair(&server, unknown.as_str(), &keys, &["alice"]).await);
    refused(pair(&server, &bad_checksum(&fresh), &keys, &["alice"]).await);
    for form in ["", "bothy_hpc_", &fresh.to_uppercase() as &str, &fresh[1..]] {
        refused(pair(&server, form, &keys, &["alice"]).await);
    }
    // The replacement still works, after all those refusals.
    assert_eq!(
        pair(&server, &fresh, &HostKeys::generate(36), &["alice"])
            .await
            .status,
        200
    );

    // Aggregated: at most one entry per address and minute; the counts of
    // the entries add up to the refusals once the last window is written.
    server.clock.advance(Duration::from_secs(60));
    refused(pair(&server, unknown.as_str(), &keys, &["alice"]).await);
    let rows = pair_denials(&server).await;
    assert_eq!(
        rows.iter()
            .map(|(_, d)| d["count"].as_i64().unwrap())
            .sum::<i64>(),
        refusals.get()
    );
    assert!(
        rows.windows(2).all(|w| w[1].0 - w[0].0 >= 60_000),
        "{rows:?}"
    );
    assert!(rows.len() < usize::try_from(refusals.get()).unwrap());
    // A burst within one minute writes nothing until the next minute.
    for _ in 0..5 {
        refused(pair(&server, unknown.as_str(), &keys, &["alice"]).await);
    }
    assert_eq!(pair_denials(&server).await.len(), rows.len());
    server.clock.advance(Duration::from_secs(60));
    refused(pair(&server, unknown.as_str(), &keys, &["alice"]).await);
    let after = pair_denials(&server).await;
    assert_eq!(after.len(), rows.len() + 1);
    assert_eq!(
        after.last().unwrap().1,
        json!({"reason_code": "unauthenticated", "count": 6})
    );
    let raw = audit_of(&server, "host.pair", "deny").await;
    assert!(
        raw.iter()
            .all(|row| row.actor_kind == "system" && row.target_id.is_none())
    );
}

/// The aggregated host.pair denials: `(at, details)`, oldest first.
async fn pair_denials(server: &TestServer) -> Vec<(i64, Value)> {
    sqlx::query(
        "SELECT at, details FROM audit WHERE action = 'host.pair' AND decision = 'deny' \
         ORDER BY id",
    )
    .fetch_all(server.state.db().pool())
    .await
    .unwrap()
    .iter()
    .map(|row| {
        (
            row.get::<i64, _>("at"),
            serde_json::from_str(&row.get::<String, _>("details")).unwrap(),
        )
    })
    .collect()
}

/// TM-T20: a wrong checksum is refused without the database.
async fn tm_t20_checksum_without_database(engine: Engine) {
    let server = server(engine).await;
    let owner = owner_person(&server, "olivia").await;
    let (_, code) = create_host(&server, &owner, "box", None).await;
    let keys = HostKeys::generate(41);

    // The database goes away: every connection of the pool is closed.
    server.state.db().close().await;
    let refused = pair(&server, &bad_checksum(&code), &keys, &["alice"]).await;
    assert_unauthenticated(&refused);
    let refused = pair(&server, "bothy_hpc_short", &keys, &["alice"]).await;
    assert_unauthenticated(&refused);
    // A well-formed code needs the database, which is gone.
    let needs_db = pair(&server, &code, &keys, &["alice"]).await;
    assert!(
        needs_db.status == 500 || needs_db.status == 503,
        "{:?}",
        needs_db
    );
    assert_ne!(needs_db.body["code"], "unauthenticated");
}

/// host.pair refusals of the keys and of the report; the code stays valid.
async fn pair_body_refusals(engine: Engine) {
    let server = server(engine).await;
    let owner = owner_person(&server, "olivia").await;
    let (host_id, code) = create_host(&server, &owner, "box", None).await;
    let keys = HostKeys::generate(51);
    let valid = pair_body(&code, &keys, &["alice", "bob"]);
    let refused = |change: &dyn Fn(&mut Value)| {
        let mut body = valid.clone();
        change(&mut body);
        body
    };
    let b64 = bothy_proto::b64::encode;
    let order_8: [u8; 32] = [
        0xe0, 0xeb, 0x7a, 0x7c, 0x3b, 0x41, 0xb8, 0xae, 0x16, 0x56, 0xe3, 0xfa, 0xf1, 0x9f, 0xc4,
        0x6a, 0xda, 0x09, 0x8d, 0xeb, 0x9c, 0x32, 0xb1, 0xfd, 0x86, 0x62, 0x05, 0x16, 0x5f, 0x49,
        0xb8, 0x00,
    ];
    let mut one = [0u8; 32];
    one[0] = 1;
    let cases: Vec<(&str, Value, Findings)> = vec![
        (
            "noise key not base64url",
            refused(&|b| b["noise_public_key"] = json!("not base64!")),
            vec![("/noise_public_key", "invalid_key")],
        ),
        (
            "noise key of 31 bytes",
            refused(&|b| b["noise_public_key"] = json!(b64(&[9; 31]))),
            vec![("/noise_public_key", "invalid_key")],
        ),
        (
            "noise key with padding",
            refused(&|b| b["noise_public_key"] = json!(format!("{}=", keys.noise_public_b64()))),
            vec![("/noise_public_key", "invalid_key")],
        ),
        (
            "noise key zero (small order)",
            refused(&|b| b["noise_public_key"] = json!(b64(&[0; 32]))),
            vec![("/noise_public_key", "invalid_key")],
        ),
        (
            "noise key of order 8",
            refused(&|b| b["noise_public_key"] = json!(b64(&order_8))),
            vec![("/noise_public_key", "invalid_key")],
        ),
        (
            "noise key 1 (small order)",
            refused(&|b| b["noise_public_key"] = json!(b64(&one))),
            vec![("/noise_public_key", "invalid_key")],
        ),
        (
            "private d in the JWK",
            refused(&|b| b["auth_public_jwk"]["d"] = json!(b64(&[1; 32]))),
            vec![("/auth_public_jwk/d", "unknown_member")],
        ),
        (
            "another member in the JWK",
            refused(&|b| b["auth_public_jwk"]["kid"] = json!("k")),
            vec![("/auth_public_jwk/kid", "unknown_member")],
        ),
        (
            "JWK x of 31 bytes",
            refused(&|b| b["auth_public_jwk"]["x"] = json!(b64(&[3; 31]))),
            vec![("/auth_public_jwk/x", "invalid_key")],
        ),
        (
            "JWK x of small order",
            refused(&|b| b["auth_public_jwk"]["x"] = json!(b64(&one))),
            vec![("/auth_public_jwk/x", "invalid_key")],
        ),
        (
            "JWK kty",
            refused(&|b| b["auth_public_jwk"]["kty"] = json!("EC")),
            vec![("/auth_public_jwk/kty", "invalid_key")],
        ),
        (
            "JWK crv",
            refused(&|b| b["auth_public_jwk"]["crv"] = json!("X25519")),
            vec![("/auth_public_jwk/crv", "invalid_key")],
        ),
        (
            "JWK without x",
            refused(&|b| {
                b["auth_public_jwk"].as_object_mut().unwrap().remove("x");
            }),
            vec![("/auth_public_jwk/x", "required")],
        ),
        (
            "host_version with v",
            refused(&|b| b["host_version"] = json!("v1.4.0")),
            vec![("/host_version", "invalid_format")],
        ),
        (
            "no session user",
            refused(&|b| b["session_users"] = json!([])),
            vec![("/session_users", "required")],
        ),
        (
            "session users equal without case",
            refused(&|b| b["session_users"][1]["name"] = json!("ALICE")),
            vec![("/session_users/1/name", "duplicate")],
        ),
        (
            "session user too long",
            refused(&|b| b["session_users"][1]["name"] = json!("b".repeat(33))),
            vec![("/session_users/1/name", "too_long")],
        ),
        (
            "session user with a slash",
            refused(&|b| b["session_users"][0]["name"] = json!("a/b")),
            vec![("/session_users/0/name", "invalid_format")],
        ),
        (
            "profile names twice",
            refused(&|b| b["profiles"][1]["name"] = json!("shell")),
            vec![("/profiles/1/name", "duplicate")],
        ),
        (
            "os_version too long",
            refused(&|b| b["os_version"] = json!("x".repeat(101))),
            vec![("/os_version", "too_long")],
        ),
        (
            "too many workdirs",
            refused(&|b| {
                let workdirs: Vec<Value> = (0..65)
                    .map(|i| json!({"display_name": format!("w{i}")}))
                    .collect();
                b["session_users"][0]["workdirs"] = json!(workdirs);
            }),
            vec![("/session_users/0/workdirs", "limit_reached")],
        ),
        (
            "several findings at once",
            refused(&|b| {
                b["noise_public_key"] = json!(b64(&[0; 32]));
                b["auth_public_jwk"]["d"] = json!("x");
                b["host_version"] = json!("1.4");
                b["platform"] = json!("");
            }),
            vec![
                ("/noise_public_key", "invalid_key"),
                ("/auth_public_jwk/d", "unknown_member"),
                ("/host_version", "invalid_format"),
                ("/platform", "required"),
            ],
        ),
        (
            "an unknown member",
            refused(&|b| b["doctor"] = json!([])),
            vec![("/doctor", "unknown_member")],
        ),
        (
            "a missing member",
            refused(&|b| {
                b.as_object_mut().unwrap().remove("is_server_host");
            }),
            vec![("/is_server_host", "required")],
        ),
        (
            "a wrong type",
            refused(&|b| b["require_local_confirm"] = json!("yes")),
            vec![("/require_local_confirm", "wrong_type")],
        ),
    ];
    for (name, body, findings) in cases {
        let reply = pair_with(&server, body).await;
        assert_eq!(reply.status, 400, "{name}: {:?}", reply.body);
        let got: Vec<(String, String)> = reply.body["errors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| (id(&e["pointer"]), id(&e["code"])))
            .collect();
        let want: Vec<(String, String)> = findings
            .iter()
            .map(|(p, c)| ((*p).to_owned(), (*c).to_owned()))
            .collect();
        assert_eq!(got, want, "{name}");
    }
    // Nothing was stored, and the code still works.
    assert_eq!(
        get_host(&server, owner.token(), &host_id).await.body["state"],
        "pairing"
    );
    assert_eq!(pair_with(&server, valid).await.status, 200);
    // A body that is no JSON at all.
    let raw = server
        .client
        .post(server.url("/api/v1/hosts/pair"))
        .header("content-type", "text/plain")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(raw.status(), 415);
}

/// host_key_reused and host_key_in_use (3.3, 13); the code stays valid.
async fn key_conflicts(engine: Engine) {
    let server = server(engine).await;
    let owner = owner_person(&server, "olivia").await;
    let k1 = HostKeys::generate(61);
    let k2 = HostKeys::generate(62);
    let a = active_host(&server, &owner, "a", None, 61, &["alice"], &[]).await;

    // B with A's login key: in use; with its own keys: fine.
    let (b_id, b_code) = create_host(&server, &owner, "b", None).await;
    let in_use = pair(&server, &b_code, &k1, &["alice"]).await;
    assert_eq!(in_use.status, 409);
    assert_eq!(in_use.body["code"], "conflict");
    assert_eq!(in_use.body["reason"], "host_key_in_use");
    // Only the login key counts: A's Noise key with another login key is fine.
    let mut mixed = pair_body(&b_code, &k2, &["alice"]);
    mixed["noise_public_key"] = json!(k1.noise_public_b64());
    assert_eq!(pair_with(&server, mixed).await.status, 200);

    // A re-paired: its old keys are refused, the code stays valid.
    let a_code = new_pairing_code(&server, &owner, &a.host_id).await;
    let reused = pair(&server, &a_code, &k1, &["alice"]).await;
    assert_eq!(reused.status, 409);
    assert_eq!(reused.body["reason"], "host_key_reused");
    // B's login key (now stored by B) is in use.
    let taken = pair(&server, &a_code, &k2, &["alice"]).await;
    assert_eq!(taken.body["reason"], "host_key_in_use");
    let k3 = HostKeys::generate(63);
    assert_eq!(pair(&server, &a_code, &k3, &["alice"]).await.status, 200);

    // Audit rows of one millisecond have no order among themselves: compare
    // as sorted lists.
    let mut denied: Vec<String> = audit_of(&server, "host.pair", "deny")
        .await
        .into_iter()
        .map(|row| {
            assert_eq!(row.target_id.as_deref(), row.details["host_id"].as_str());
            row.details.to_string()
        })
        .collect();
    denied.sort();
    let mut want: Vec<String> = [
        json!({"host_id": b_id, "reason_code": "host_key_in_use"}),
        json!({"host_id": a.host_id, "reason_code": "host_key_reused"}),
        json!({"host_id": a.host_id, "reason_code": "host_key_in_use"}),
    ]
    .iter()
    .map(Value::to_string)
    .collect();
    want.sort();
    assert_eq!(denied, want);
}

async fn insert_session(server: &TestServer, host_id: &str, person: &Person) -> String {
    let assignment: String = sqlx::query_scalar(
        "SELECT id FROM host_session_users WHERE host_id = $1 AND person_id = $2",
    )
    .bind(host_id)
    .bind(person.id())
    .fetch_one(server.state.db().pool())
    .await
    .unwrap();
    let session_id = bothy_proto::ids::uuid_v7(7)
        .unwrap()
        .hyphenated()
        .to_string();
    sqlx::query(
        "INSERT INTO terminal_sessions (id, host_id, person_id, login_session_id, device_id, \
         host_session_user_id, profile, state, created_at, version) \
         VALUES ($1, $2, $3, $4, $5, $6, 'shell', 'active', $7, 1)",
    )
    .bind(&session_id)
    .bind(host_id)
    .bind(person.id())
    .bind(&person.session.login_session_id)
    .bind(&person.session.device_id)
    .bind(assignment)
    .bind(server.clock.now_ms())
    .execute(server.state.db().pool())
    .await
    .unwrap();
    session_id
}

async fn patch_state(server: &TestServer, owner: &Person, host_id: &str, to: &str) {
    let version = etag_of(&get_host(server, owner.token(), host_id).await);
    let step_up_id = step_up(server, owner).await;
    let reply = send(
        server,
        Method::PATCH,
        &format!("/api/v1/hosts/{host_id}"),
        Some(owner.token()),
        Some(&json!({"state": to, "reason": REASON, "step_up_id": step_up_id})),
        &[("if-match", &version)],
    )
    .await;
    assert_eq!(reply.status, 200, "{to}: {:?}", reply.body);
}

/// issueHostPairingCode from every state of 3.1.
async fn re_pairing_from_every_state(engine: Engine) {
    let server = server(engine).await;
    let owner = owner_person(&server, "olivia").await;

    // From pairing: only the code changes.
    let (host_id, first) = create_host(&server, &owner, "pairing", None).await;
    let versions = permission_version(&server).await;
    let reply = issue_pairing_code(&server, &owner, &host_id).await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    assert_eq!(etag_of(&reply), "\"2\"");
    assert_eq!(reply.body["host"]["state"], "pairing");
    let second = id(&reply.body["pairing_code"]);
    assert_ne!(second, first);
    assert_eq!(permission_version(&server).await, versions);
    assert_eq!(
        manage_entries(&server, &host_id, "allow")
            .await
            .last()
            .unwrap(),
        &json!({"host_id": host_id, "operation": "pairing_code", "from_state": "pairing",
                "to_state": "pairing", "key_generation": 0, "sessions_ended": 0,
                "reason": REASON})
    );
    assert_eq!(
        host_updated_events(&server, &host_id).await.last().unwrap()["key_changed"],
        false
    );
    assert_unauthenticated(&pair(&server, &first, &HostKeys::generate(70), &["a"]).await);

    // From confirming: keys discarded, key_generation rises only at the next pair.
    let keys = HostKeys::generate(71);
    assert_eq!(pair(&server, &second, &keys, &["alice"]).await.status, 200);
    let reply = issue_pairing_code(&server, &owner, &host_id).await;
    assert_eq!(reply.status, 200);
    let host = &reply.body["host"];
    assert_eq!(host["state"], "pairing");
    assert_eq!(host["key_generation"], 1);
    assert!(host.get("noise_public_key").is_none());
    assert_eq!(
        manage_entries(&server, &host_id, "allow")
            .await
            .last()
            .unwrap(),
        &json!({"host_id": host_id, "operation": "pairing_code", "from_state": "confirming",
                "to_state": "pairing", "old_fingerprint": keys.fingerprint().audit_form(),
                "key_generation": 1, "sessions_ended": 0, "reason": REASON})
    );
    assert_eq!(
        host_updated_events(&server, &host_id).await.last().unwrap()["key_changed"],
        true
    );

    // From active: the sessions end (host_rekeyed), the rights version rises.
    let alice = invited_person(&server, &owner, "alice", "member", 3).await;
    let active = active_host(
        &server,
        &owner,
        "active",
        Some(alice.id()),
        72,
        &["alice"],
        &[(alice.id(), "alice")],
    )
    .await;
    let session = insert_session(&server, &active.host_id, &alice).await;
    let versions = permission_version(&server).await;
    let reply = issue_pairing_code(&server, &owner, &active.host_id).await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    assert!(permission_version(&server).await > versions);
    let closed: (String, Option<String>) =
        sqlx::query_as("SELECT state, close_reason FROM terminal_sessions WHERE id = $1")
            .bind(&session)
            .fetch_one(server.state.db().pool())
            .await
            .unwrap();
    assert_eq!(
        closed,
        ("closed".to_owned(), Some("host_rekeyed".to_owned()))
    );
    assert_eq!(
        manage_entries(&server, &active.host_id, "allow")
            .await
            .last()
            .unwrap(),
        &json!({"host_id": active.host_id, "operation": "pairing_code",
                "from_state": "active", "to_state": "pairing",
                "old_fingerprint": active.keys.fingerprint().audit_form(),
                "key_generation": 1, "sessions_ended": 1, "reason": REASON})
    );
    // The assignments survive a re-pairing.
    assert_eq!(reply.body["host"]["session_users"][0]["os_user"], "alice");

    // From disabled (by the owner, and after a duplicate connection): the
    // reason is cleared.
    let disabled = active_host(&server, &owner, "disabled", None, 73, &["alice"], &[]).await;
    patch_state(&server, &owner, &disabled.host_id, "disabled").await;
    assert_eq!(
        column(&server, &disabled.host_id, "disabled_reason")
            .await
            .as_deref(),
        Some("owner")
    );
    // Only a confirming host is confirmed.
    let refused = confirm(
        &server,
        &owner,
        &disabled.host_id,
        &disabled.keys.prefix(),
        "none",
        None,
        false,
        &[],
    )
    .await;
    assert_eq!(refused.status, 409);
    assert_eq!(refused.body["code"], "invalid_state_transition");
    let reply = issue_pairing_code(&server, &owner, &disabled.host_id).await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    assert!(reply.body["host"].get("disabled_reason").is_none());
    assert_eq!(
        column(&server, &disabled.host_id, "disabled_reason").await,
        None
    );
    assert_eq!(
        number(&server, &disabled.host_id, "disabled_at").await,
        None
    );
    let duplicate = active_host(&server, &owner, "duplicate", None, 74, &["alice"], &[]).await;
    sqlx::query(
        "UPDATE hosts SET state = 'disabled', disabled_reason = 'duplicate_connection', \
         disabled_at = $1 WHERE id = $2",
    )
    .bind(server.clock.now_ms())
    .bind(&duplicate.host_id)
    .execute(server.state.db().pool())
    .await
    .unwrap();
    let reply = issue_pairing_code(&server, &owner, &duplicate.host_id).await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    assert_eq!(reply.body["host"]["state"], "pairing");
    assert!(reply.body["host"].get("disabled_reason").is_none());

    // Retired is final.
    let retired = active_host(&server, &owner, "retired", None, 75, &["alice"], &[]).await;
    patch_state(&server, &owner, &retired.host_id, "retired").await;
    let reply = issue_pairing_code(&server, &owner, &retired.host_id).await;
    assert_eq!(reply.status, 409);
    assert_eq!(reply.body["code"], "invalid_state_transition");
    assert_eq!(
        get_host(&server, owner.token(), &retired.host_id)
            .await
            .body["state"],
        "retired"
    );
    let refused = confirm(
        &server,
        &owner,
        &retired.host_id,
        &retired.keys.prefix(),
        "none",
        None,
        false,
        &[],
    )
    .await;
    assert_eq!(refused.body["code"], "invalid_state_transition");
    // An unknown host.
    let nobody = bothy_proto::ids::uuid_v7(3)
        .unwrap()
        .hyphenated()
        .to_string();
    assert_eq!(
        issue_pairing_code(&server, &owner, &nobody).await.status,
        404
    );
}

/// The declaration at the confirmation: findings roll everything back and
/// leave the attempt uncounted; an I6 violation is audited.
async fn confirm_rolls_back(engine: Engine) {
    let server = server(engine).await;
    let owner = owner_person(&server, "olivia").await;
    let bob = invited_person(&server, &owner, "bob", "member", 2).await;
    let (host_id, code) = create_host(&server, &owner, "box", None).await;
    let keys = HostKeys::generate(81);
    assert_eq!(
        pair(&server, &code, &keys, &["alice", "bob"]).await.status,
        200
    );

    let reply = confirm(
        &server,
        &owner,
        &host_id,
        &keys.prefix(),
        "personal",
        None,
        false,
        &[],
    )
    .await;
    assert_finding(&reply, "/credential_holder_id", "required");
    let reply = confirm(
        &server,
        &owner,
        &host_id,
        &keys.prefix(),
        "none",
        None,
        false,
        &[(bob.id(), "carol")],
    )
    .await;
    assert_finding(
        &reply,
        "/session_users/0/os_user",
        "session_user_not_on_host",
    );
    let mut body = confirm_body(&server, &owner, &keys.prefix(), "none", None, false, &[]).await;
    body["llm_credentials"] = json!("shared");
    assert_finding(
        &confirm_with(&server, &owner, &host_id, &body, &[]).await,
        "/llm_credentials",
        "invalid",
    );

    // I6: a grant to bob, then personal for the owner.
    let grant = post(
        &server,
        "/api/v1/grants",
        Some(owner.token()),
        json!({"host_id": host_id, "recipient_kind": "person", "recipient_id": bob.id()}),
    )
    .await;
    assert_eq!(grant.status, 201, "{:?}", grant.body);
    let reply = confirm(
        &server,
        &owner,
        &host_id,
        &keys.prefix(),
        "personal",
        Some(owner.id()),
        false,
        &[],
    )
    .await;
    assert_eq!(reply.status, 409, "{:?}", reply.body);
    assert_eq!(reply.body["code"], "i6_violation");
    let denied = manage_entries(&server, &host_id, "deny").await;
    assert_eq!(
        denied.last().unwrap(),
        &json!({"host_id": host_id, "operation": "confirm",
                "fingerprint": keys.fingerprint().audit_form(), "key_generation": 1,
                "llm_credentials": "personal", "credential_holder_id": owner.id(),
                "declared_server_host": false, "reason": REASON,
                "reason_code": "invariant_violation"})
    );
    let host = get_host(&server, owner.token(), &host_id).await.body;
    assert_eq!(host["state"], "confirming");
    assert_eq!(host["llm_credentials"], "none");
    assert_eq!(
        number(&server, &host_id, "fingerprint_failures").await,
        Some(0)
    );

    // Personal for bob, the grantee, with his session user.
    let reply = confirm(
        &server,
        &owner,
        &host_id,
        &keys.prefix(),
        "personal",
        Some(bob.id()),
        false,
        &[(bob.id(), "bob")],
    )
    .await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    assert_eq!(reply.body["host"]["credential_holder_id"], bob.id());
}

/// host.read: owners see every host, an assignee theirs, others none.
async fn reads(engine: Engine) {
    let server = server(engine).await;
    let owner = owner_person(&server, "olivia").await;
    let bob = invited_person(&server, &owner, "bob", "member", 2).await;
    let mia = invited_person(&server, &owner, "mia", "member", 3).await;
    let (mine, _) = create_host(&server, &owner, "bob's", Some(bob.id())).await;
    let (other, _) = create_host(&server, &owner, "other", None).await;

    let all = get(&server, "/api/v1/hosts", Some(owner.token())).await;
    assert_eq!(all.status, 200);
    let ids: Vec<String> = all.body["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| id(&h["id"]))
        .collect();
    assert_eq!(ids, [mine.clone(), other.clone()]);
    let bobs = get(&server, "/api/v1/hosts", Some(bob.token())).await;
    assert_eq!(bobs.body["hosts"].as_array().unwrap().len(), 1);
    assert_eq!(bobs.body["hosts"][0]["id"], mine.as_str());
    let mias = get(&server, "/api/v1/hosts", Some(mia.token())).await;
    assert_eq!(mias.body, json!({"hosts": []}));

    let read = get_host(&server, bob.token(), &mine).await;
    assert_eq!(read.status, 200);
    assert_eq!(etag_of(&read), "\"1\"");
    assert_eq!(read.body["id"], mine.as_str());
    let hidden = get_host(&server, bob.token(), &other).await;
    assert_eq!(hidden.status, 404);
    let nobody = bothy_proto::ids::uuid_v7(5)
        .unwrap()
        .hyphenated()
        .to_string();
    let missing = get_host(&server, bob.token(), &nobody).await;
    assert_eq!(missing.status, 404);
    assert_eq!(missing.body, hidden.body);
    assert_eq!(
        get_host(&server, bob.token(), "not-an-id").await.status,
        404
    );
    let denied = audit_of(&server, "host.read", "deny").await;
    assert_eq!(denied.len(), 1);
    assert_eq!(denied[0].target_id.as_deref(), Some(other.as_str()));
    assert_eq!(get(&server, "/api/v1/hosts", None).await.status, 401);
}

/// No host name, pairing code, code HMAC or key in the audit or the events.
async fn canary(engine: Engine) {
    let server = server(engine).await;
    let owner = owner_person(&server, "olivia").await;
    let name = "canary-host-name-5f1e";
    let (host_id, first) = create_host(&server, &owner, name, None).await;
    let mut codes = vec![first.clone()];
    let keys = HostKeys::generate(91);
    let mut secrets = vec![
        name.to_owned(),
        keys.noise_public_b64(),
        id(&keys.auth_jwk_value()["x"]),
        keys.auth_jkt(),
        keys.fingerprint().as_str().to_owned(),
    ];
    // A refused code, a wrong prefix to the fallback, a re-pairing.
    assert_unauthenticated(&pair(&server, &bad_checksum(&first), &keys, &["alice"]).await);
    assert_eq!(pair(&server, &first, &keys, &["alice"]).await.status, 200);
    for _ in 0..3 {
        confirm(
            &server,
            &owner,
            &host_id,
            &keys.wrong_prefix(),
            "none",
            None,
            false,
            &[],
        )
        .await;
    }
    secrets.push(
        column(&server, &host_id, "pairing_code_hash")
            .await
            .unwrap(),
    );
    let code = new_pairing_code(&server, &owner, &host_id).await;
    secrets.push(
        column(&server, &host_id, "pairing_code_hash")
            .await
            .unwrap(),
    );
    codes.push(code.clone());
    let keys2 = HostKeys::generate(92);
    assert_eq!(pair(&server, &code, &keys2, &["alice"]).await.status, 200);
    secrets.push(keys2.noise_public_b64());
    confirm(
        &server,
        &owner,
        &host_id,
        &keys2.prefix(),
        "none",
        None,
        false,
        &[],
    )
    .await;
    for code in &codes {
        let parsed = PairingCode::parse(code).unwrap();
        secrets.push(pairing::code_hash(server.state.pepper(), &parsed));
        secrets.push(code.clone());
        // The random part alone, too.
        secrets.push(code[10..42].to_owned());
    }

    let text = audit_and_event_text(&server).await;
    assert!(text.contains(&host_id), "the check reads the right rows");
    for secret in &secrets {
        assert!(
            !text.contains(secret.as_str()),
            "{secret} in the audit or events"
        );
    }
}

/// rl.public_auth: refusals take tokens; an empty bucket is 429 before any check.
async fn pair_rate_limit(engine: Engine) {
    let server = TestServer::start(engine).await;
    let owner = owner_person(&server, "olivia").await;
    let (_, code) = create_host(&server, &owner, "box", None).await;
    let keys = HostKeys::generate(95);
    // Successful pairs and 400s take no token; refused codes do (burst 10).
    for _ in 0..12 {
        let mut body = pair_body(&code, &keys, &["alice"]);
        body["host_version"] = json!("v1");
        assert_eq!(pair_with(&server, body).await.status, 400);
    }
    for _ in 0..10 {
        assert_unauthenticated(&pair(&server, &bad_checksum(&code), &keys, &["alice"]).await);
    }
    let limited = pair(&server, &code, &keys, &["alice"]).await;
    assert_eq!(limited.status, 429, "{:?}", limited.body);
    assert_eq!(limited.body["code"], "rate_limited");
    server.clock.advance(Duration::from_secs(60));
    assert_eq!(pair(&server, &code, &keys, &["alice"]).await.status, 200);
}

/// instance_id: two first calls agree (race-safe on both engines).
async fn instance_id_once(engine: Engine) {
    let t = support::TestDb::new(engine).await;
    let db = t.db.clone();
    let first = async move {
        let mut uow = db.begin(1).await.unwrap();
        let id = pairing::instance_id(&mut uow).await.unwrap();
        uow.commit().await.unwrap();
        id
    };
    let db2 = t.db.clone();
    let second = async move {
        let mut uow = db2.begin(2).await.unwrap();
        let id = pairing::instance_id(&mut uow).await.unwrap();
        uow.commit().await.unwrap();
        id
    };
    let (a, b) = tokio::join!(tokio::spawn(first), tokio::spawn(second));
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a, b);
    assert_eq!(t.count("instance").await, 1);
    let mut uow = t.db.begin(3).await.unwrap();
    assert_eq!(pairing::instance_id(&mut uow).await.unwrap(), a);
}

both_engines!(
    create_pair_confirm,
    create_host_refusals,
    tm_t19_fallback_after_max_attempts,
    fingerprint_attempts,
    tm_t20_code_refusals,
    tm_t20_checksum_without_database,
    pair_body_refusals,
    key_conflicts,
    re_pairing_from_every_state,
    confirm_rolls_back,
    reads,
    canary,
    pair_rate_limit,
    instance_id_once,
);
