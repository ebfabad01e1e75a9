//! TM-T13 at the level of the service (spec 2.2 "Message on a refused start",
//! exit policy D-M2-42-14, section 14): for every case of TM-T13 a real
//! scenario (the real server on port 0, `bothy-host pair`, `bothy-host
//! supervise` as root, real OS users, groups and files) whose service then
//! starts with the cause in place, and each time literally: the doctor refuses
//! the start with the case's code, the service exits 78 and supervise does not
//! restart it, exactly one report reached the server (the stored
//! `reported_doctor` holds the code — for a subscription login naming the
//! session user — and the audit has exactly one new `host.connect` entry, naming the check as
//! failed),
//! and no session can be opened (the open route answers 409
//! host_unavailable, or 403 no_session_user where the case's configuration no
//! longer lists the owner's session user, which the one report tells the
//! server).
//!
//! Every case can be set up in a running service: the configuration decoder
//! accepts root as a session user, the service user as a session user, an
//! empty `session_users` and two identical names (they are HD1's to refuse,
//! not the decoder's), so none of them ends as `config_invalid`. The cases
//! with a cause outside the configuration (groups sudo and docker, the Docker
//! socket, passwordless sudo, the subscription login) touch only the first
//! session user of the scenario, so other scenarios running on the same
//! machine are not affected; each cause is undone by a guard, also on a panic.
//! The check-level counterpart with the passing side of every check is
//! `doctor_t13`.

use bothy_testkit::causes;
use bothy_testkit::identity as identity_common;
use bothy_testkit::scenario as e2e_common;
use bothy_testkit::users;

use std::any::Any;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use bothy_server::db::Engine;
use causes::{Membership, SudoRule};
use e2e_common::{Options, Scenario, has_entry, subscription_login};
use serde_json::Value;
use users::TestUser;

const HD1: &str = "hd1_user";
const HD2: &str = "hd2_groups";
const HD3: &str = "hd3_sudo";
const HD6: &str = "hd6_llm_login";
const HD8: &str = "hd8_separation";

/// What a case changes before the service starts again: the configuration
/// (an edit of its text) and/or the machine (a guard that undoes it on drop).
struct Cause {
    edit: Box<dyn FnOnce(String) -> String>,
    guard: Box<dyn Any>,
}

impl Cause {
    /// A cause in the configuration only.
    fn config(edit: impl FnOnce(String) -> String + 'static) -> Cause {
        Cause {
            edit: Box::new(edit),
            guard: Box::new(()),
        }
    }

    /// A cause on the machine, undone when `guard` drops.
    fn held(guard: impl Any) -> Cause {
        Cause {
            edit: Box::new(|config| config),
            guard: Box::new(guard),
        }
    }
}

/// The expected refusal: the check, its code, whether the entry names the
/// first session user, and the open route's answer to the owner (status,
/// problem `code`, `reason` when it has one).
struct Expected {
    check: &'static str,
    code: &'static str,
    names_first_user: bool,
    open: (u16, &'static str, Option<&'static str>),
}

/// The one flow of every case: a clean scenario connects; the service stops;
/// `cause` is put in place; the service starts and must refuse the start as
/// `expected` says, exit 78 without a restart, after exactly one report; no
/// session opens.
async fn refused_start(
    options: Options,
    cause: impl FnOnce(&Scenario) -> Cause,
    expected: Expected,
) {
    let mut scenario = Scenario::start(Engine::Sqlite, options).await;
    let connects_before = host_connects(&scenario).await;
    scenario.stop_service();
    let Cause { edit, guard } = cause(&scenario);
    let _guard = guard;
    scenario.reconfigure(edit);
    scenario.wait_log("status=78").await;
    let log = scenario.log();
    assert!(
        log.lines()
            .any(|line| line.contains("status=78") && line.contains("not restarted (0 or 78)")),
        "supervise says exit 78, not restarted: {log}"
    );
    assert_eq!(
        log.matches("doctor refuses the start;").count(),
        1,
        "one refused start, not restarted: {log}"
    );
    let first = scenario.users[0].name.clone();
    let name = expected.names_first_user.then_some(first.as_str());
    scenario
        .wait_doctor(expected.code, |entries| {
            has_entry(entries, expected.check, expected.code, name)
        })
        .await;
    let (allowed, denied) = host_connects(&scenario).await;
    let new = &allowed[connects_before.0.len()..];
    assert_eq!(denied, connects_before.1, "the login itself passed");
    assert_eq!(new.len(), 1, "exactly one report: {new:?}");
    assert!(
        new[0]["failed_checks"]
            .as_array()
            .is_some_and(|failed| failed.iter().any(|c| c == expected.check)),
        "the report names {} failed: {new:?}",
        expected.check
    );
    assert!(!scenario.connected(), "a refused start stays disconnected");
    let reply = scenario
        .open_reply(&scenario.owner, "shell", &[7u8; 32])
        .await;
    assert_eq!(
        (
            reply.status.as_u16(),
            reply.body["code"].as_str(),
            reply.body["reason"].as_str()
        ),
        (expected.open.0, Some(expected.open.1), expected.open.2),
        "no session opens: {:?}",
        reply.body
    );
}

/// The details of the `host.connect` entries of the audit, oldest first: the
/// server writes one allowed entry with every report that changes the doctor
/// result, in the same transaction as `reported_doctor` (a refused login
/// would be a denied one).
async fn host_connects(scenario: &Scenario) -> (Vec<Value>, usize) {
    let allowed = identity_common::audit_of(&scenario.server, "host.connect", "allow").await;
    let denied = identity_common::audit_of(&scenario.server, "host.connect", "deny").await;
    (
        allowed.into_iter().map(|row| row.details).collect(),
        denied.len(),
    )
}

/// Replaces the configured session users by `users` (YAML flow list items).
fn session_users(scenario: &Scenario, users: &[&str]) -> Cause {
    let old = format!("session_users: [{}]", scenario.users[0].name);
    let new = format!("session_users: [{}]", users.join(", "));
    Cause::config(move |config| {
        assert!(config.contains(&old), "{config}");
        config.replace(&old, &new)
    })
}

/// A real unix socket at the path HD2 checks (`/run/docker.sock`; `/var/run`
/// is a link to `/run`), of root with group `user`'s own group and mode
/// 0660: writable for that session user only. Removed on drop.
struct DockerSocket {
    path: PathBuf,
    _listener: std::os::unix::net::UnixListener,
}

impl DockerSocket {
    fn writable_for(user: &TestUser) -> DockerSocket {
        let path = PathBuf::from("/run/docker.sock");
        assert!(
            !Path::new("/var/run/docker.sock").exists() && !path.exists(),
            "a Docker daemon's socket exists on this machine: TM-T13's socket case needs a \
             machine without Docker"
        );
        let listener = std::os::unix::net::UnixListener::bind(&path).expect("bind");
        let socket = DockerSocket {
            path,
            _listener: listener,
        };
        std::fs::set_permissions(&socket.path, std::fs::Permissions::from_mode(0o660))
            .expect("chmod");
        std::os::unix::fs::chown(&socket.path, Some(0), Some(user.gid)).expect("chown");
        socket
    }
}

impl Drop for DockerSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The refusal `code` of `check`, no name; the open route answers 409
/// host_unavailable (the owner's session user is still reported).
const fn hd(check: &'static str, code: &'static str) -> Expected {
    Expected {
        check,
        code,
        names_first_user: false,
        open: HOST_UNAVAILABLE,
    }
}

const HOST_UNAVAILABLE: (u16, &str, Option<&str>) = (409, "host_unavailable", None);

/// The open route's answer when the report no longer lists the owner's
/// session user (the configuration dropped it): 403 before the host's
/// connection is looked at.
const NO_SESSION_USER: (u16, &str, Option<&str>) =
    (403, "terminal_denied", Some("no_session_user"));

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn root_as_session_user() {
    refused_start(
        Options::default(),
        |s| session_users(s, &[s.users[0].name.as_str(), "root"]),
        hd(HD1, "privileged_user"),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_user_in_group_sudo() {
    refused_start(
        Options::default(),
        |s| Cause::held(Membership::add(&s.users[0].name, "sudo")),
        hd(HD2, "forbidden_group"),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_user_in_group_docker() {
    refused_start(
        Options::default(),
        |s| Cause::held(Membership::add(&s.users[0].name, "docker")),
        hd(HD2, "forbidden_group"),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writable_docker_socket() {
    refused_start(
        Options::default(),
        |s| Cause::held(DockerSocket::writable_for(&s.users[0])),
        hd(HD2, "docker_socket_writable"),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passwordless_sudo_of_a_session_user() {
    refused_start(
        Options::default(),
        |s| Cause::held(SudoRule::passwordless(&s.users[0].name)),
        hd(HD3, "passwordless_sudo"),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_login_with_organization_names_the_user() {
    refused_start(
        Options {
            llm_credentials: "organization",
            ..Options::default()
        },
        |s| {
            subscription_login(&s.users[0]);
            Cause::held(())
        },
        Expected {
            names_first_user: true,
            ..hd(HD6, "subscription_login_detected")
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_user_as_session_user() {
    refused_start(
        Options::default(),
        |s| session_users(s, &[s.service_user.name.as_str()]),
        Expected {
            open: NO_SESSION_USER,
            ..hd(HD1, "session_user_is_service_user")
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_session_users() {
    refused_start(
        Options::default(),
        |s| session_users(s, &[]),
        Expected {
            open: NO_SESSION_USER,
            ..hd(HD1, "session_users_empty")
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_identical_session_users() {
    refused_start(
        Options::default(),
        |s| session_users(s, &[s.users[0].name.as_str(), s.users[0].name.as_str()]),
        hd(HD1, "session_user_duplicate"),
    )
    .await;
}

/// Restores the mode of a folder on drop.
struct ModeGuard {
    path: PathBuf,
    mode: u32,
}

impl Drop for ModeGuard {
    fn drop(&mut self) {
        let _ = std::fs::set_permissions(&self.path, std::fs::Permissions::from_mode(self.mode));
    }
}

/// TM-T22 through the real service (issue 15 item 13): a state directory that
/// a session user may list and enter (mode 0755) refuses the start with HD8
/// `state_access_for_session_user`: exit 78, not restarted, exactly one
/// report, no session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tm_t22_a_state_directory_open_to_a_session_user() {
    refused_start(
        Options::default(),
        |s| {
            let path = s.state_dir.clone();
            let mode = std::fs::metadata(&path)
                .expect("state dir")
                .permissions()
                .mode()
                & 0o7777;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
            Cause::held(ModeGuard { path, mode })
        },
        hd(HD8, "state_access_for_session_user"),
    )
    .await;
}
