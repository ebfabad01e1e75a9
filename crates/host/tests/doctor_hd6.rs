//! HD6 and HD10 for `host_service.claude_bin` at the level of the checks
//! (TM-T27; TM-T29 (l) second part; 7.4 "Fail closed"), with real users,
//! fake `claude` programs, real `node`, the real `doctor-probe`, and
//! `strace -f -e trace=execve` for the trace of process starts.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use bothy_testkit::doctor as doctor_common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use bothy_host::config::{Profile, UserWorkdirs, Workdir};
use bothy_host::doctor::Places;
use bothy_host::doctor::service_side::{ServiceInputs, service_checks};
use bothy_host::doctor::wire::{CheckAnswer, CheckRequest, Hd6Observation, RequestKind};
use bothy_proto::control::LlmCredentials;
use bothy_proto::doctor::{Check, DoctorCode, DoctorEntry};
use bothy_proto::report::ProfileKind;
use doctor_common::*;

/// The probe under `strace -f -e trace=execve`: its answer and every program
/// that was started.
fn traced_probe(
    root: &RootDir,
    user: &TestUser,
    request: &CheckRequest,
) -> (CheckAnswer, Vec<PathBuf>) {
    let trace = root.join(&format!("trace-{}", user.name));
    let mut child = Command::new("strace")
        .args(["-f", "-qq", "-e", "trace=execve", "-e", "signal=none", "-o"])
        .arg(&trace)
        .arg(bin())
        .args(["doctor-probe", "--user", &user.name])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(&request.encode())
        .unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let output = rx
        .recv_timeout(Duration::from_secs(120))
        .expect("the traced probe ends")
        .unwrap();
    assert!(output.status.success());
    let answer = CheckAnswer::decode(&output.stdout).unwrap();
    let text = std::fs::read_to_string(&trace).unwrap();
    let execs = text
        .lines()
        .filter_map(|l| {
            let at = l.find("execve(\"")? + 8;
            let end = l[at..].find('"')?;
            Some(PathBuf::from(&l[at..at + end]))
        })
        .collect();
    (answer, execs)
}

/// A folder of root for programs, mode 0755.
fn programs(root: &RootDir) -> PathBuf {
    mkdir(&root.join("cb"), 0o755)
}

fn hd6_request(user: &TestUser, claude_bin: Option<&Path>) -> CheckRequest {
    let mut request = request(RequestKind::Light, user, &[]);
    request.claude_bin = claude_bin.map(Path::to_owned);
    request.auth_status_timeout_ms = 10_000;
    request
}

fn hd6(user: &TestUser, request: &CheckRequest) -> Hd6Observation {
    light(&probe(user, request)).hd6
}

/// `~/bin/<name>` of the user printing `text`, and a `.profile` that puts
/// `~/bin` first on the PATH.
fn user_program(user: &TestUser, name: &str, body: &str) -> PathBuf {
    let dir = mkdir(&user.home.join("bin"), 0o755);
    chown(&dir, user);
    let program = write(&dir.join(name), body, 0o755);
    chown(&program, user);
    let profile = write(
        &user.home.join(".profile"),
        "export PATH=\"$HOME/bin:$PATH\"\nalias claude=\"$HOME/bin/claude\"\n",
        0o644,
    );
    chown(&profile, user);
    program
}

#[test]
fn t27_hd6_calls_only_claude_bin_and_detects_the_subscription() {
    let root = RootDir::new();
    let a = user("a");
    let cb = programs(&root);
    let claude = write(
        &cb.join("claude"),
        "#!/bin/sh\n[ \"$1 $2\" = 'auth status' ] || exit 9\nprintf '{\"loggedIn\":true,\"authMethod\":\"claude.ai\"}\\n'\n",
        0o755,
    );
    let fake = user_program(
        &a,
        "claude",
        "#!/bin/sh\nprintf '{\"authMethod\":\"api_key\"}\\n'\n",
    );
    let request = hd6_request(&a, Some(&claude));
    let (answer, execs) = traced_probe(&root, &a, &request);
    let observed = light(&answer).hd6;
    assert!(observed.subscription, "{observed:?}");
    assert!(!observed.status_unknown);
    assert!(execs.contains(&claude), "{execs:?}");
    assert!(
        !execs.contains(&fake),
        "the claude of the user's PATH never runs: {execs:?}"
    );
}

#[test]
fn t27_env_node_finds_the_interpreter_of_the_search_list_never_the_users() {
    let root = RootDir::new();
    let a = user("a");
    let cb = programs(&root);
    let claude = write(
        &cb.join("claude"),
        "#!/usr/bin/env node\nconsole.log(JSON.stringify({authMethod: 'api_key'}))\n",
        0o755,
    );
    let fake_node = user_program(
        &a,
        "node",
        "#!/bin/sh\nprintf '{\"authMethod\":\"claude.ai\"}\\n'\n",
    );
    let (answer, execs) = traced_probe(&root, &a, &hd6_request(&a, Some(&claude)));
    let observed = light(&answer).hd6;
    assert_eq!(
        observed,
        Hd6Observation {
            subscription: false,
            status_unknown: false,
            unchecked: false
        }
    );
    assert!(execs.contains(&PathBuf::from("/usr/bin/node")), "{execs:?}");
    assert!(
        !execs.contains(&fake_node),
        "the fake node never runs: {execs:?}"
    );
}

fn hd10_codes(config: &bothy_host::config::HostServiceConfig, places: Places) -> Vec<DoctorCode> {
    service_checks(&ServiceInputs {
        config: config.clone(),
        config_path: None,
        former: vec![],
        places,
    })
    .codes
}

#[test]
fn t27_hd10_claude_bin_its_interpreter_and_every_folder_of_the_search_list() {
    let root = RootDir::new();
    let svc = user("svc");
    let a = user("a");
    let cb = programs(&root);
    let claude = write(&cb.join("claude"), "#!/usr/bin/env node\n", 0o755);
    let mut config = config(&root, &svc, &[&a]);
    config.claude_bin = Some(claude.clone());
    let untrusted =
        |places: Places| hd10_codes(&config, places).contains(&DoctorCode::ClaudeBinUntrusted);
    assert!(!untrusted(places()));
    // claude_bin pointing to a file the session user can write.
    chown(&claude, &a);
    assert!(untrusted(places()));
    nix::unistd::chown(&claude, Some(nix::unistd::Uid::from_raw(0)), None).unwrap();
    // A node in the search list (the folder of claude_bin) that the session user can write.
    let node = write(&cb.join("node"), "#!/bin/sh\n", 0o755);
    chown(&node, &a);
    assert!(untrusted(places()));
    // The checked node in that folder, but a folder of the fixed list writable
    // for the session user (as /bin would be).
    nix::unistd::chown(&node, Some(nix::unistd::Uid::from_raw(0)), None).unwrap();
    assert!(!untrusted(places()));
    let open_bin = mkdir(&root.join("bin"), 0o757);
    let places_open = Places {
        search_tail: vec!["/usr/bin".into(), open_bin],
        ..places()
    };
    assert!(untrusted(places_open));
    // A #! line HD10 cannot follow does not pass.
    write(&claude, "#!/usr/bin/env -i node\n", 0o755);
    assert!(untrusted(places()));
}

#[test]
fn fail_closed_answers_of_claude_auth_status_are_unknown() {
    let root = RootDir::new();
    let a = user("a");
    let cb = programs(&root);
    for (name, body) in [
        ("text", "#!/bin/sh\necho 'Logged in with Claude.ai'\n"),
        (
            "exit2",
            "#!/bin/sh\nprintf '{\"authMethod\":\"none\"}'\nexit 2\n",
        ),
        (
            "other",
            "#!/bin/sh\nprintf '{\"authMethod\":\"console\"}'\n",
        ),
        ("slow", "#!/bin/sh\nexec sleep 30\n"),
    ] {
        let claude = write(&cb.join(name), body, 0o755);
        let mut request = hd6_request(&a, Some(&claude));
        request.auth_status_timeout_ms = 3_000;
        let observed = hd6(&a, &request);
        assert!(observed.status_unknown, "{name}: {observed:?}");
        assert!(!observed.unchecked, "{name}");
    }
    let none = write(
        &cb.join("none"),
        "#!/bin/sh\nprintf '{\"authMethod\":\"none\"}'\nexit 1\n",
        0o755,
    );
    assert_eq!(
        hd6(&a, &hd6_request(&a, Some(&none))),
        Hd6Observation::default()
    );
}

#[test]
fn login_locations_and_the_login_shell_probe() {
    let a = user("a");
    // Nothing: only the login locations are looked at, unchecked.
    let clean = hd6(&a, &hd6_request(&a, None));
    assert_eq!(
        clean,
        Hd6Observation {
            subscription: false,
            status_unknown: false,
            unchecked: true
        }
    );
    // CLAUDE_CODE_OAUTH_TOKEN set by the startup files (only its presence is read).
    let profile = write(
        &a.home.join(".profile"),
        "export CLAUDE_CODE_OAUTH_TOKEN=canary-token-value\n",
        0o644,
    );
    chown(&profile, &a);
    assert!(hd6(&a, &hd6_request(&a, None)).subscription);
    // A CLAUDE_CONFIG_DIR of the login shell with a credentials file.
    let dir = mkdir(&a.home.join("cc"), 0o700);
    chown(&dir, &a);
    write(
        &profile,
        &format!("export CLAUDE_CONFIG_DIR={}\n", dir.display()),
        0o644,
    );
    assert!(!hd6(&a, &hd6_request(&a, None)).subscription);
    let creds = write(&dir.join(".credentials.json"), "{}", 0o600);
    chown(&creds, &a);
    assert!(hd6(&a, &hd6_request(&a, None)).subscription);
    // The organization folder of the profile claude counts as well.
    std::fs::remove_file(&creds).unwrap();
    let org = mkdir(&a.home.join(".config/bothy-host/claude"), 0o700);
    for d in [".config", ".config/bothy-host", ".config/bothy-host/claude"] {
        chown(&a.home.join(d), &a);
    }
    let creds = write(&org.join(".credentials.json"), "{}", 0o600);
    chown(&creds, &a);
    assert!(hd6(&a, &hd6_request(&a, None)).subscription);
    // With personal the helper does not look.
    let mut personal = hd6_request(&a, None);
    personal.declaration = Some(LlmCredentials::Personal);
    assert_eq!(hd6(&a, &personal), Hd6Observation::default());
    // A login shell that does not end in time: unknown.
    write(&profile, "sleep 30\n", 0o644);
    let mut slow = hd6_request(&a, None);
    slow.auth_status_timeout_ms = 1_000;
    let observed = hd6(&a, &slow);
    assert!(observed.status_unknown, "{observed:?}");
}

#[tokio::test]
async fn t29_l_a_script_without_its_interpreter_in_the_search_list_counts_as_empty() {
    let root = RootDir::new();
    let svc = user("svc");
    let a = user("a");
    let cb = programs(&root);
    let claude = write(
        &cb.join("claude"),
        "#!/usr/bin/env bothy-test-node\n",
        0o755,
    );
    let fake = user_program(
        &a,
        "bothy-test-node",
        "#!/bin/sh\nprintf '{\"authMethod\":\"none\"}'\n",
    );
    let wa = mkdir(&root.join("wa"), 0o700);
    chown(&wa, &a);
    let mut config = config(&root, &svc, &[&a]);
    config.claude_bin = Some(claude.clone());
    config.profiles.push(Profile {
        name: "claude".into(),
        display_name: "Claude".into(),
        kind: ProfileKind::Claude,
        command: None,
    });
    config.claude_workdirs = vec![UserWorkdirs {
        user: a.name.clone(),
        workdirs: vec![Workdir {
            path: wa,
            display_name: "wa".into(),
        }],
    }];
    let doctor = full_run(
        &config,
        Some(LlmCredentials::Organization),
        vec![],
        places(),
    )
    .await;
    assert!(
        doctor
            .reported_profiles()
            .iter()
            .all(|p| p.kind != ProfileKind::Claude)
    );
    assert_eq!(
        of(&doctor, Check::Hd6LlmLogin),
        [DoctorEntry::for_code(DoctorCode::AuthStatusUnchecked)]
    );
    assert_eq!(
        of(&doctor, Check::Hd7Profiles),
        [DoctorEntry::for_code(DoctorCode::ClaudeProfileUnavailable)]
    );
    // HD6 calls nothing: neither claude_bin nor the node of the rest of the PATH.
    let (answer, execs) = traced_probe(&root, &a, &hd6_request(&a, Some(&claude)));
    assert!(light(&answer).hd6.unchecked);
    assert!(!execs.contains(&claude), "{execs:?}");
    assert!(!execs.contains(&fake), "{execs:?}");
}

/// Where `scripts/test` installs the real `claude` CLI from the npm registry
/// (`@anthropic-ai/claude-code` at the version pinned there): a root folder
/// outside the clone, so a session user can write no part of its path.
const REAL_CLAUDE: &str =
    "/var/lib/bothy-tests/claude-code/node_modules/@anthropic-ai/claude-code/bin/claude.exe";

/// Issue 15 item 16: HD6 runs the real `claude auth status` of the published
/// CLI (not a fake script) in the account of a session user without any
/// login, and reads its real output (`{"loggedIn":false,"authMethod":"none",
/// "apiProvider":...}`, exit 1) as no subscription login, known, checked;
/// HD10 trusts the real binary's path. The binary must be there: scripts/test
/// installs it, and the test fails rather than skips without it.
#[test]
fn the_real_claude_cli_without_a_login_is_read_as_none() {
    let claude = PathBuf::from(REAL_CLAUDE);
    assert!(
        claude.is_file(),
        "{REAL_CLAUDE} is missing: scripts/test installs the real claude CLI with \
         `npm install --prefix /var/lib/bothy-tests/claude-code @anthropic-ai/claude-code@<pinned>`"
    );
    let root = RootDir::new();
    let a = user("a");
    let (answer, execs) = traced_probe(&root, &a, &hd6_request(&a, Some(&claude)));
    assert_eq!(light(&answer).hd6, Hd6Observation::default());
    assert!(execs.contains(&claude), "the real claude ran: {execs:?}");
    let svc = user("svc");
    let mut config = config(&root, &svc, &[&a]);
    config.claude_bin = Some(claude);
    assert!(
        !hd10_codes(&config, places()).contains(&DoctorCode::ClaudeBinUntrusted),
        "HD10 trusts the installed binary and its folders"
    );
}
