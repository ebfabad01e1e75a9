//! The audit log on both engines: typed details, what is stored, and the reader
//! of `GET /api/v1/audit` (filters, keyset paging).

// The bodies run once per engine through `both_engines!`, so clippy does not see
// them as tests (only the generated wrappers are `#[test]`); unwrap is the test
// idiom here as in every `#[test]`.
#![allow(clippy::unwrap_used)]

use bothy_testkit as support;

use bothy_proto::codes::{CloseDetail, CloseReason};
use bothy_proto::fingerprint::key_fingerprint;
use bothy_server::audit::{
    self, Actor, AuditAction, AuditDetails, AuditEntry, AuditError, AuditFilter, Decision,
    OS_USER_MAX_CHARS, OsUserName, PageRequest, ProfileName, REASON_MAX_CHARS, TargetKind,
};
use bothy_server::db::Engine;
use serde_json::json;
use sqlx::Row;
use support::{TestDb, both_engines};
use uuid::Uuid;

const NOW: i64 = 1_764_000_000_000;

fn id(n: u128) -> Uuid {
    Uuid::from_u128(n)
}

#[test]
fn details_hold_only_typed_values() {
    let fingerprint = key_fingerprint(&[0u8; 32], &[1u8; 32]);
    let details = AuditDetails::new()
        .id("session_id", id(0x0192_f5c4_7d3a_7b2e_9f00_1234_5678_90ab))
        .code("close_reason", CloseReason::IdleTimeout)
        .codes("close_details", [CloseDetail::OpenTimeout])
        .count("bytes_in", 42)
        .count("duration_ms", -1)
        .flag("pin_changed", true)
        .fingerprint("fingerprint", &fingerprint)
        .os_user(&OsUserName::new("alice_dev").unwrap())
        .os_users(
            "added",
            [
                &OsUserName::new("bob").unwrap(),
                &OsUserName::new("c.d-e").unwrap(),
            ],
        )
        .profile(&ProfileName::new("Claude Code").unwrap())
        .reason("rotating the key after the laptop was lost");
    assert_eq!(
        details.to_json(),
        json!({
            "added": ["bob", "c.d-e"],
            "bytes_in": 42,
            "close_details": ["open_timeout"],
            "close_reason": "idle_timeout",
            "duration_ms": -1,
            "fingerprint": fingerprint.audit_form(),
            "os_user": "alice_dev",
            "pin_changed": true,
            "profile": "Claude Code",
            "reason": "rotating the key after the laptop was lost",
            "session_id": "0192f5c4-7d3a-7b2e-9f00-1234567890ab",
        })
    );
    // The audit form of a fingerprint: lower case, no hyphens.
    let form = details.to_json()["fingerprint"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(form.len(), 52);
    assert!(
        form.chars()
            .all(|c| c.is_ascii_digit() || c.is_ascii_lowercase())
    );
    // A later value under the same key replaces the earlier one.
    let replaced = AuditDetails::new().count("n", 1).count("n", 2);
    assert_eq!(replaced.to_json(), json!({"n": 2}));
    assert!(AuditDetails::new().is_empty());
    assert_eq!(AuditDetails::new().to_json(), json!({}));
}

#[test]
fn the_reason_is_the_only_free_text_and_is_bounded() {
    let long = "é".repeat(REASON_MAX_CHARS + 10);
    let details = AuditDetails::new().reason(&long);
    let stored = details.to_json()["reason"].as_str().unwrap().to_owned();
    assert_eq!(stored.chars().count(), REASON_MAX_CHARS);
    // Names are checked against their patterns; a path, a command or a
    // sentence cannot pass as a session user or profile name.
    assert!(OsUserName::new(&"a".repeat(OS_USER_MAX_CHARS)).is_ok());
    for bad in [
        "",
        "../etc",
        "/home/alice",
        "rm -rf",
        "a b",
        "ali\nce",
        &"a".repeat(OS_USER_MAX_CHARS + 1),
    ] {
        assert!(
            matches!(OsUserName::new(bad), Err(AuditError::InvalidOsUserName)),
            "{bad:?}"
        );
    }
    for bad in ["", "shell\u{7}", "x\ny", &"p".repeat(201)] {
        assert!(
            matches!(ProfileName::new(bad), Err(AuditError::InvalidProfileName)),
            "{bad:?}"
        );
    }
    assert_eq!(
        OsUserName::new("_svc.user-1").unwrap().as_str(),
        "_svc.user-1"
    );
}

#[test]
fn codes_have_their_dotted_names() {
    let names: Vec<&str> = AuditAction::ALL.iter().map(|a| a.as_str()).collect();
    for expected in [
        "host.manage",
        "host.pair",
        "host.connect",
        "terminal.open",
        "terminal.attach",
        "terminal.close",
        "terminal.stream",
        "terminal.terminate",
        "auth.login",
        "auth.logout",
        "auth.step_up",
        "auth.enroll",
        "person.invite",
        "person.disable",
        "person.reset_second_factor",
        "device.revoke",
        "session.revoke",
        "api_token.create",
    ] {
        assert!(names.contains(&expected), "{expected}");
        assert_eq!(AuditAction::parse(expected).unwrap().as_str(), expected);
    }
    assert_eq!(AuditAction::parse("host.Manage"), None);
    assert_eq!(Decision::parse("deny"), Some(Decision::Deny));
}

async fn entries_are_stored_as_written(engine: Engine) {
    let t = TestDb::new(engine).await;
    let entries = [
        AuditEntry::allow(AuditAction::TerminalOpen, Actor::Person(id(1)))
            .target(TargetKind::TerminalSession, id(10))
            .details(
                AuditDetails::new()
                    .id("host_id", id(20))
                    .flag("foreign_assignee", false),
            ),
        AuditEntry::deny(AuditAction::TerminalOpen, Actor::Agent(id(2)))
            .details(AuditDetails::new().code("close_reason", CloseReason::ClientClosed)),
        AuditEntry::allow(AuditAction::TerminalTerminate, Actor::System)
            .target(TargetKind::TerminalSession, id(10)),
        AuditEntry::allow(AuditAction::HostPair, Actor::Host(id(20))),
        AuditEntry::deny(AuditAction::ApiTokenCreate, Actor::App(id(3))),
    ];
    let mut uow = t.db.begin(NOW).await.unwrap();
    for entry in &entries {
        uow.audit(entry.clone());
    }
    uow.commit().await.unwrap();

    let page = audit::list(
        &t.db,
        &AuditFilter::default(),
        PageRequest {
            before: None,
            limit: 100,
        },
    )
    .await
    .unwrap();
    assert_eq!(page.entries.len(), entries.len());
    assert_eq!(page.next, None);
    for entry in &entries {
        let found = page
            .entries
            .iter()
            .find(|r| {
                r.action == entry.action && r.actor == entry.actor && r.decision == entry.decision
            })
            .unwrap_or_else(|| panic!("{entry:?} not stored"));
        assert_eq!(found.target, entry.target);
        assert_eq!(found.details, entry.details.to_json());
        assert_eq!(found.at, NOW);
        assert_eq!(found.id.get_version_num(), 7);
        assert_eq!(
            bothy_proto::ids::v7_unix_millis(&found.id),
            Some(NOW as u64)
        );
    }
    // The columns as stored: kinds as codes, IDs hyphenated, NULL where absent.
    let row = sqlx::query(
        "SELECT actor_kind, actor_id, target_kind, target_id, details FROM audit \
         WHERE action = 'terminal.terminate'",
    )
    .fetch_one(t.db.pool())
    .await
    .unwrap();
    assert_eq!(row.get::<String, _>("actor_kind"), "system");
    assert_eq!(row.get::<Option<String>, _>("actor_id"), None);
    assert_eq!(row.get::<String, _>("target_kind"), "terminal_session");
    assert_eq!(
        row.get::<String, _>("target_id"),
        "00000000-0000-0000-0000-00000000000a"
    );
    assert_eq!(row.get::<String, _>("details"), "{}");
}

async fn the_reader_filters(engine: Engine) {
    let t = TestDb::new(engine).await;
    // Three units of work at three times.
    let plan = [
        (
            NOW,
            AuditEntry::allow(AuditAction::HostManage, Actor::Person(id(1)))
                .target(TargetKind::Host, id(100)),
        ),
        (
            NOW + 10,
            AuditEntry::deny(AuditAction::TerminalOpen, Actor::Person(id(2)))
                .target(TargetKind::Host, id(100)),
        ),
        (
            NOW + 20,
            AuditEntry::allow(AuditAction::TerminalOpen, Actor::Person(id(1)))
                .target(TargetKind::Host, id(101)),
        ),
    ];
    for (at, entry) in &plan {
        let mut uow = t.db.begin(*at).await.unwrap();
        uow.audit(entry.clone());
        uow.commit().await.unwrap();
    }
    let page = PageRequest {
        before: None,
        limit: 50,
    };
    let list = |filter: AuditFilter| {
        let db = t.db.clone();
        async move {
            audit::list(&db, &filter, page)
                .await
                .unwrap()
                .entries
                .iter()
                .map(|r| r.at)
                .collect::<Vec<_>>()
        }
    };
    // Newest first.
    assert_eq!(
        list(AuditFilter::default()).await,
        [NOW + 20, NOW + 10, NOW]
    );
    let by_action = AuditFilter {
        action: Some(AuditAction::TerminalOpen),
        ..AuditFilter::default()
    };
    assert_eq!(list(by_action).await, [NOW + 20, NOW + 10]);
    let by_decision = AuditFilter {
        decision: Some(Decision::Deny),
        ..AuditFilter::default()
    };
    assert_eq!(list(by_decision).await, [NOW + 10]);
    let by_actor = AuditFilter {
        actor_id: Some(id(1)),
        ..AuditFilter::default()
    };
    assert_eq!(list(by_actor).await, [NOW + 20, NOW]);
    let by_target = AuditFilter {
        target_id: Some(id(100)),
        ..AuditFilter::default()
    };
    assert_eq!(list(by_target).await, [NOW + 10, NOW]);
    let by_time = AuditFilter {
        from_ms: Some(NOW + 10),
        until_ms: Some(NOW + 20),
        ..AuditFilter::default()
    };
    assert_eq!(list(by_time).await, [NOW + 10]);
    let all_at_once = AuditFilter {
        action: Some(AuditAction::TerminalOpen),
        decision: Some(Decision::Allow),
        actor_id: Some(id(1)),
        target_id: Some(id(101)),
        from_ms: Some(NOW),
        until_ms: Some(NOW + 21),
    };
    assert_eq!(list(all_at_once).await, [NOW + 20]);
    let nobody = AuditFilter {
        actor_id: Some(id(99)),
        ..AuditFilter::default()
    };
    assert!(list(nobody).await.is_empty());
}

async fn the_reader_pages_by_id(engine: Engine) {
    let t = TestDb::new(engine).await;
    // 25 entries over 5 milliseconds, 5 in each (same-millisecond IDs too).
    for ms in 0..5 {
        let mut uow = t.db.begin(NOW + ms).await.unwrap();
        for _ in 0..5 {
            uow.audit(AuditEntry::allow(
                AuditAction::AuthLogin,
                Actor::Person(id(1)),
            ));
        }
        uow.commit().await.unwrap();
    }
    let filter = AuditFilter {
        action: Some(AuditAction::AuthLogin),
        ..AuditFilter::default()
    };
    let mut before = None;
    let mut seen = Vec::new();
    let mut sizes = Vec::new();
    loop {
        let page = audit::list(&t.db, &filter, PageRequest { before, limit: 10 })
            .await
            .unwrap();
        sizes.push(page.entries.len());
        seen.extend(page.entries.iter().map(|r| (r.id, r.at)));
        match page.next {
            Some(next) => before = Some(next),
            None => break,
        }
    }
    assert_eq!(sizes, [10, 10, 5]);
    let mut ids: Vec<Uuid> = seen.iter().map(|(id, _)| *id).collect();
    // Strictly descending by ID (no duplicates), and so by time.
    assert!(ids.windows(2).all(|w| w[0] > w[1]));
    assert!(seen.windows(2).all(|w| w[0].1 >= w[1].1));
    ids.dedup();
    assert_eq!(ids.len(), 25);
    // Limits are clamped to 1..=PAGE_MAX.
    let one = audit::list(
        &t.db,
        &filter,
        PageRequest {
            before: None,
            limit: 0,
        },
    )
    .await
    .unwrap();
    assert_eq!(one.entries.len(), 1);
    assert!(one.next.is_some());
}

async fn undecodable_rows_are_reported_not_guessed(engine: Engine) {
    let t = TestDb::new(engine).await;
    sqlx::query(
        "INSERT INTO audit (id, at, action, decision, actor_kind, actor_id, target_kind, \
         target_id, details) VALUES ($1, $2, 'future.action', 'allow', 'system', NULL, NULL, \
         NULL, '{}')",
    )
    .bind("01930000-0000-7000-8000-000000000000")
    .bind(NOW)
    .execute(t.db.pool())
    .await
    .unwrap();
    let error = audit::list(
        &t.db,
        &AuditFilter::default(),
        PageRequest {
            before: None,
            limit: 10,
        },
    )
    .await
    .unwrap_err();
    assert!(
        matches!(error, AuditError::Stored { column: "action" }),
        "{error:?}"
    );
}

both_engines!(
    entries_are_stored_as_written,
    the_reader_filters,
    the_reader_pages_by_id,
    undecodable_rows_are_reported_not_guessed,
);
