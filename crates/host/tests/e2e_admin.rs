//! `bothy-host session-user remove` and `add` end to end (2.2 items 3–5):
//! the real server, `bothy-host pair`, the real service under `bothy-host
//! supervise` with real OS users. Both commands restart the service through
//! supervise's reload, which stops the removed user's helper and starts the
//! added user's helper first (D-260, D-261). See `e2e_common` for the
//! harness.

use bothy_testkit::hosts as hosts_common;
use bothy_testkit::output;
use bothy_testkit::scenario as e2e_common;
use bothy_testkit::users;

use std::os::unix::fs::MetadataExt;
use std::time::Duration;

use bothy_host::doctor::accounts::UserEntry;
use bothy_host::manager;
use bothy_server::db::Engine;
use bothy_testkit::wait::try_eventually;
use e2e_common::{Options, Scenario};
use hosts_common::invited_person;
use output::{refused, succeeded, text};
use serde_json::json;
use users::{Accounts, processes_of};

/// Waits (bounded) until the host reports exactly `names`.
async fn wait_reported(scenario: &Scenario, names: &[String]) {
    let reached = try_eventually(Duration::from_secs(30), || async move {
        (reported_names(scenario).await == names).then_some(())
    })
    .await;
    if reached.is_none() {
        panic!(
            "the host reports {:?}, never {names:?}; its log:\n{}",
            reported_names(scenario).await,
            scenario.log()
        );
    }
}

/// The names of the session users the host reported.
async fn reported_names(scenario: &Scenario) -> Vec<String> {
    scenario
        .reported_session_users()
        .await
        .as_array()
        .expect("a list")
        .iter()
        .map(|u| u["name"].as_str().expect("a name").to_owned())
        .collect()
}

/// Remove: the session of the removed user ends with the restart, the host
/// reports only the remaining user, HD9 passes for the closed home of the
/// former session user, the binding stays and the name cannot be added again;
/// the person has no terminal on the host any more (no_session_user).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remove_restarts_the_service_which_then_reports_without_the_user() {
    let scenario = Scenario::start(
        Engine::Sqlite,
        Options {
            session_users: 2,
            ..Options::default()
        },
    )
    .await;
    let removed = scenario.users[0].name.clone();
    let kept = scenario.users[1].name.clone();
    assert_eq!(
        reported_names(&scenario).await,
        [removed.clone(), kept.clone()]
    );
    // The owner's opening binds the first session user to the owner.
    let device = scenario.open_shell().await;
    // Started (session.started applied): a restart ends only started
    // sessions with host_restarted (6.2); an opening waits for its deadline.
    scenario.wait_state(device.session_id, "active").await;
    let bindings = std::fs::read(scenario.state_dir.join("bindings.json")).expect("bound");
    let former_helper = scenario.helper_pid(0);
    assert!(processes_of(scenario.users[0].uid).contains(&former_helper));

    let output = scenario.session_user(&["remove", &removed]);
    let stdout = succeeded(&output);
    assert!(
        stdout.contains("the service was restarted"),
        "{}",
        text(&output)
    );
    assert!(
        stdout.contains(&format!("stopped and removed the helper of {removed}")),
        "{}",
        text(&output)
    );
    // supervise stopped the former helper (and with it the shell of its
    // session) before it started the service again: no process of the
    // former session user is left.
    assert!(
        processes_of(scenario.users[0].uid).is_empty(),
        "{:?}; its log:\n{}",
        processes_of(scenario.users[0].uid),
        scenario.log()
    );
    assert!(
        !manager::helper_record(&scenario.runtime_dir, &removed).exists(),
        "the record of the former helper is gone"
    );
    assert!(
        !scenario
            .runtime_dir
            .join("helper")
            .join(format!("{removed}.sock"))
            .exists(),
        "the endpoint of the former helper is gone"
    );
    // The restart ends it (host_restarted, 6.2), unless the server applies the
    // new report's missing name first (access_revoked, SR12 "name no longer
    // reported", 10.3): both are ends the chapter names for this step.
    let reason = scenario.closed(device.session_id).await.0;
    assert!(
        reason == "host_restarted" || reason == "access_revoked",
        "{reason}"
    );

    // The new service logs in and reports only the remaining name: its doctor
    // passed, HD9 included (the former session user's home is closed).
    wait_reported(&scenario, std::slice::from_ref(&kept)).await;
    scenario.wait_connected().await;
    let home = std::fs::metadata(&scenario.users[0].home).expect("home");
    assert_eq!(home.mode() & 0o077, 0);
    assert_eq!(
        std::fs::read(scenario.state_dir.join("bindings.json")).expect("kept"),
        bindings
    );

    // The owner's assignment names a name the host no longer reports.
    let reply = scenario
        .open_reply(&scenario.owner, "shell", &[7u8; 32])
        .await;
    assert_eq!(reply.status, 403, "{:?}", reply.body);
    assert_eq!(reply.body["code"], "terminal_denied", "{:?}", reply.body);
    assert_eq!(reply.body["reason"], "no_session_user", "{:?}", reply.body);

    // The name stays taken on this host.
    let output = scenario.session_user(&["add", &removed]);
    refused(&output, 1, "is bound to a person");
}

/// `add` under a running supervise (TM-T21 (f) in form): while the owner has a
/// session, `session-user add` with a new name makes the account, and
/// supervise starts its helper (a real process of the new account) before it
/// starts the service again; the restart ends the owner's session with
/// host_restarted, the new service reports the new name without any further
/// step, the name can be assigned to another person, who then gets a shell
/// as that user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_starts_the_helper_and_restarts_the_service_which_then_reports_the_name() {
    let scenario = Scenario::start(Engine::Sqlite, Options::default()).await;
    let first = scenario.users[0].name.clone();
    assert_eq!(
        reported_names(&scenario).await,
        std::slice::from_ref(&first)
    );
    let device = scenario.open_shell().await;
    // Started (session.started applied): a restart ends only started
    // sessions with host_restarted (6.2); an opening waits for its deadline.
    scenario.wait_state(device.session_id, "active").await;
    let before = scenario.service_pid();
    let kept_helper = scenario.helper_pid(0);

    let new = users::unique_name("n");
    let _account = Accounts(vec![new.clone()]);
    let output = scenario.session_user(&["add", &new]);
    let stdout = succeeded(&output);
    let restarted = scenario.service_pid();
    assert_ne!(restarted, before, "{}", text(&output));
    assert!(
        stdout.contains(&format!("the service was restarted (PID {restarted})")),
        "{}",
        text(&output)
    );

    // The new helper: a real process of the new account, named by its record
    // and by the command's output.
    let entry = UserEntry::lookup(&new)
        .expect("passwd")
        .expect("add made the account");
    let record = manager::helper_record(&scenario.runtime_dir, &new);
    let helper = manager::read_record(&scenario.runtime_dir, &record).expect("the new helper runs");
    assert!(
        stdout.contains(&format!("started the helper of {new} (PID {helper})")),
        "{}",
        text(&output)
    );
    assert_eq!(
        std::fs::metadata(format!("/proc/{helper}"))
            .expect("the helper process")
            .uid(),
        entry.uid
    );
    // Only the helper, once the restarted service's checks in the new
    // account (HD6's login-shell probe and the others, children of the
    // helper) have ended.
    let uid = entry.uid;
    let settled = try_eventually(Duration::from_secs(30), || async move {
        (processes_of(uid) == [helper]).then_some(())
    })
    .await;
    assert!(
        settled.is_some(),
        "the new account runs {:?}, not only its helper {helper}",
        processes_of(uid)
    );
    assert_eq!(
        scenario.helper_pid(0),
        kept_helper,
        "the other helper runs on"
    );

    // The restart ends the running session (6.2) …
    assert_eq!(scenario.closed(device.session_id).await.0, "host_restarted");
    // … and the new service (its doctor passed with the new helper, HD10)
    // reports the new name.
    wait_reported(&scenario, &[first.clone(), new.clone()]).await;
    scenario.wait_connected().await;

    // The server accepts the name for a person now, and that person's shell
    // runs as the new user in its new helper.
    let bob = invited_person(&scenario.server, &scenario.owner, "bob", "owner", 2).await;
    let reply = scenario
        .host_change(
            reqwest::Method::PATCH,
            "",
            json!({"assign_session_users": [{"user_id": bob.id(), "os_user": new}]}),
        )
        .await;
    assert_eq!(reply.status.as_u16(), 200, "assign: {:?}", reply.body);
    let mut shell = scenario
        .open_as(
            &bob,
            "shell",
            bothy_proto::frame::TerminalSize::new(100, 30).expect("size"),
        )
        .await;
    shell.type_text("echo \"WHO=$(id -un):\"\n").await;
    shell.expect_output(&format!("WHO={new}:")).await;
    assert!(
        processes_of(entry.uid).len() > 1,
        "the shell runs as the new user"
    );
}
