//! `GET /api/v1/audit` against the real server on port 0 over TLS, on both
//! engines (spec 24 section 10.1; DESIGN 3.3): owners list the entries newest
//! first with every filter and keyset paging; members and agents are refused
//! (and the refusal is audited); malformed filters are `400 validation_failed`
//! with the parameter's pointer.

#![allow(clippy::unwrap_used)] // test bodies are plain fns called by the generated #[test]s

use bothy_testkit as support;
use bothy_testkit::identity as identity_common;

use std::collections::HashSet;
use std::time::Duration;

use bothy_server::audit::{Actor, AuditAction, AuditDetails, AuditEntry, TargetKind};
use bothy_server::clock::Clock;
use bothy_server::db::Engine;
use identity_common::*;
use serde_json::{Value, json};
use support::both_engines;
use support::server::TestServer;
use uuid::Uuid;

const AUDIT: &str = "/api/v1/audit";

fn uuid(text: &str) -> Uuid {
    bothy_proto::ids::parse_uuid(text).unwrap()
}

fn id_text(id: Uuid) -> String {
    id.hyphenated().to_string()
}

/// Writes `entries` in one unit of work at the server's time; that time.
async fn write(server: &TestServer, entries: Vec<AuditEntry>) -> i64 {
    let now = server.clock.now_ms();
    let mut uow = server.state.db().begin(now).await.unwrap();
    for entry in entries {
        uow.audit(entry);
    }
    uow.commit().await.unwrap();
    now
}

async fn list(server: &TestServer, query: &str, token: &str) -> Reply {
    get(server, &format!("{AUDIT}{query}"), Some(token)).await
}

/// Every entry of a query, page by page with `limit`; checks the cursor chain.
async fn all_pages(server: &TestServer, query: &str, limit: u32, token: &str) -> Vec<Value> {
    let mut entries = Vec::new();
    let mut before: Option<String> = None;
    loop {
        let mut path = format!("?limit={limit}{query}");
        if let Some(cursor) = &before {
            path.push_str(&format!("&before={cursor}"));
        }
        let page = list(server, &path, token).await;
        assert_eq!(page.status, 200, "{:?}", page.body);
        let got = page.body["entries"].as_array().unwrap().clone();
        assert!(got.len() <= limit as usize);
        entries.extend(got.iter().cloned());
        match page.body.get("next") {
            Some(next) => {
                // A full page, and the cursor is its last entry.
                assert_eq!(got.len(), limit as usize);
                assert_eq!(next, &got.last().unwrap()["id"]);
                before = Some(next.as_str().unwrap().to_owned());
            }
            None => return entries,
        }
    }
}

fn ids(entries: &[Value]) -> Vec<String> {
    entries
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_owned())
        .collect()
}

async fn owners_filter_and_page_the_audit(engine: Engine) {
    let server = TestServer::start(engine).await;
    let alice = owner(&server, "alice").await;
    let token = alice.login(&server, 1).await.token;
    let bob = invite(&server, &token, "bob", "member").await;
    let bob_token = bob.login(&server, 2).await.token;
    let (alice_id, bob_id) = (uuid(&alice.person_id), uuid(&bob.person_id));

    let (host_a, host_b) = (Uuid::from_u128(0xa), Uuid::from_u128(0xb));
    server.clock.advance(Duration::from_secs(60));
    let first = write(
        &server,
        vec![
            AuditEntry::allow(AuditAction::HostManage, Actor::Person(alice_id))
                .target(TargetKind::Host, host_a)
                .details(
                    AuditDetails::new()
                        .flag("no_change", true)
                        .reason("tidy up"),
                ),
            AuditEntry::deny(AuditAction::HostManage, Actor::Person(bob_id))
                .target(TargetKind::Host, host_a),
        ],
    )
    .await;
    server.clock.advance(Duration::from_secs(60));
    let second = write(
        &server,
        vec![
            AuditEntry::allow(AuditAction::HostManage, Actor::Person(alice_id))
                .target(TargetKind::Host, host_b),
            AuditEntry::allow(AuditAction::TerminalTerminate, Actor::System)
                .target(TargetKind::TerminalSession, Uuid::from_u128(0xc)),
        ],
    )
    .await;

    // Everything, newest first, with the entry's full shape.
    let everything = list(&server, "", &token).await;
    assert_eq!(everything.status, 200, "{:?}", everything.body);
    assert!(
        everything.body.get("next").is_none(),
        "{:?}",
        everything.body
    );
    let entries = everything.body["entries"].as_array().unwrap().clone();
    let times: Vec<i64> = entries.iter().map(|e| e["at"].as_i64().unwrap()).collect();
    assert!(
        times.windows(2).all(|w| w[0] >= w[1]),
        "newest first: {times:?}"
    );
    // The system has no ID.
    let system = entries
        .iter()
        .find(|e| e["action"] == "terminal.terminate")
        .unwrap();
    assert_eq!(system["at"], second);
    assert_eq!(system["actor"], json!({"kind": "system"}));
    let tidy = entries
        .iter()
        .find(|e| e["details"]["reason"] == "tidy up")
        .unwrap();
    assert_eq!(
        tidy,
        &json!({
            "id": tidy["id"],
            "at": first,
            "action": "host.manage",
            "decision": "allow",
            "actor": {"kind": "person", "id": alice.person_id},
            "target": {"kind": "host", "id": id_text(host_a)},
            "details": {"no_change": true, "reason": "tidy up"},
        })
    );
    // The logins and the invitation are there too, without a target or with one.
    assert!(entries.iter().any(|e| e["action"] == "auth.login"));
    let invite_entry = entries
        .iter()
        .find(|e| e["action"] == "person.invite")
        .unwrap();
    assert_eq!(invite_entry["actor"]["id"], alice.person_id);

    // Each filter.
    let host_manage = all_pages(&server, "&action=host.manage", 100, &token).await;
    assert_eq!(host_manage.len(), 3);
    assert!(host_manage.iter().all(|e| e["action"] == "host.manage"));

    let denied = all_pages(&server, "&decision=deny", 100, &token).await;
    assert!(denied.iter().all(|e| e["decision"] == "deny"));
    assert!(denied.iter().any(|e| e["actor"]["id"] == bob.person_id));

    let by_bob = all_pages(&server, &format!("&actor_id={bob_id}"), 100, &token).await;
    assert!(!by_bob.is_empty());
    assert!(by_bob.iter().all(|e| e["actor"]["id"] == bob.person_id));

    let on_a = all_pages(&server, &format!("&target_id={host_a}"), 100, &token).await;
    assert_eq!(on_a.len(), 2);
    assert!(on_a.iter().all(|e| e["target"]["id"] == id_text(host_a)));

    // `from <= at < until`.
    let window = all_pages(
        &server,
        &format!("&from={first}&until={second}"),
        100,
        &token,
    )
    .await;
    assert_eq!(window.len(), 2);
    assert!(window.iter().all(|e| e["at"] == first));
    let since_second = all_pages(&server, &format!("&from={second}"), 100, &token).await;
    assert_eq!(since_second.len(), 2);

    // Filters combine.
    let combined = all_pages(
        &server,
        &format!("&action=host.manage&decision=allow&target_id={host_a}"),
        100,
        &token,
    )
    .await;
    assert_eq!(
        ids(&combined),
        vec![tidy["id"].as_str().unwrap().to_owned()]
    );

    // Paging: pages of 2 give the same entries in the same order, once each.
    let paged = all_pages(&server, "", 2, &token).await;
    assert_eq!(ids(&paged), ids(&entries));
    assert_eq!(
        ids(&paged).into_iter().collect::<HashSet<_>>().len(),
        entries.len()
    );
    let paged_filter = all_pages(&server, "&action=host.manage", 1, &token).await;
    assert_eq!(ids(&paged_filter), ids(&host_manage));

    // A member's token lists nothing: 403, and the refusal is in the audit.
    let refused = list(&server, "", &bob_token).await;
    assert_eq!(refused.status, 403);
    assert_eq!(refused.body["code"], "forbidden");
    assert_eq!(refused.body["reason"], "owner_required");
    let denials = list(&server, "?action=audit.read&decision=deny", &token).await;
    let denials = denials.body["entries"].as_array().unwrap().clone();
    assert_eq!(denials.len(), 1);
    assert_eq!(denials[0]["actor"]["id"], bob.person_id);
    server.stop().await;
}

async fn refusals(engine: Engine) {
    let server = TestServer::start(engine).await;
    let alice = owner(&server, "alice").await;
    let token = alice.login(&server, 1).await.token;

    let unauthenticated = get(&server, AUDIT, None).await;
    assert_eq!(unauthenticated.status, 401);
    assert_eq!(unauthenticated.body["code"], "unauthenticated");

    let created = post(
        &server,
        "/api/v1/tokens",
        Some(&token),
        json!({"kind": "app", "name": "dashboard"}),
    )
    .await;
    assert_eq!(created.status, 201, "{:?}", created.body);
    let app = created.body["token"].as_str().unwrap();
    let refused = get(&server, AUDIT, Some(app)).await;
    assert_eq!(refused.status, 403);
    assert_eq!(refused.body["reason"], "subject_kind_not_allowed");

    for (query, pointer, code) in [
        ("action=host.nope", "/query/action", "invalid"),
        ("action=HOST.MANAGE", "/query/action", "invalid"),
        ("decision=maybe", "/query/decision", "invalid"),
        ("actor_id=alice", "/query/actor_id", "invalid"),
        ("target_id=1234", "/query/target_id", "invalid"),
        ("before=not-a-cursor", "/query/before", "invalid"),
        ("from=yesterday", "/query/from", "invalid"),
        ("until=-5", "/query/until", "invalid"),
        ("limit=0", "/query/limit", "out_of_range"),
        ("limit=501", "/query/limit", "out_of_range"),
        ("limit=ten", "/query/limit", "invalid"),
        ("limit=5&limit=6", "/query/limit", "duplicate_parameter"),
        ("actor=alice", "/query/actor", "unknown_parameter"),
    ] {
        let reply = list(&server, &format!("?{query}"), &token).await;
        assert_eq!(reply.status, 400, "{query}: {:?}", reply.body);
        assert_eq!(reply.body["code"], "validation_failed", "{query}");
        assert_eq!(
            reply.body["errors"],
            json!([{"pointer": pointer, "code": code}]),
            "{query}"
        );
        assert!(!reply.body.to_string().contains("nope"), "no value echoed");
    }
    // The bounds themselves are fine.
    for query in ["limit=1", "limit=500", "action=identity.read&decision=deny"] {
        let reply = list(&server, &format!("?{query}"), &token).await;
        assert_eq!(reply.status, 200, "{query}: {:?}", reply.body);
    }
    server.stop().await;
}

both_engines!(owners_filter_and_page_the_audit, refusals);
