//! `bothy-host doctor` end to end while the service is not running: the real
//! binary as root, the declaration and bindings from a real state directory,
//! each session user's part in a `doctor-probe` as that user. The output names
//! per check the result and code and the accounts the rule for names allows,
//! never a path; the exit code is not 0 when a check failed (TM-T13, TM-T21
//! (g) on the host, TM-T24). The ptrace seam is tested on the library
//! (`service_side`), where the feature state is that of the test itself.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use bothy_testkit::doctor as doctor_common;

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use bothy_host::state::{Owner, StateDir};
use bothy_proto::control::LlmCredentials;
use doctor_common::*;

fn doctor(config: &Path, env: &[(&str, &Path)]) -> Output {
    let mut command = Command::new(bin());
    command
        .args(["--config"])
        .arg(config)
        .arg("doctor")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (name, value) in env {
        command.env(name, value);
    }
    let child = command.spawn().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    rx.recv_timeout(Duration::from_secs(300))
        .expect("doctor ends")
        .unwrap()
}

struct Host {
    root: RootDir,
    svc: TestUser,
    a: TestUser,
    b: TestUser,
    config: std::path::PathBuf,
}

fn host() -> Host {
    let root = RootDir::new();
    let svc = user("svc");
    let a = user("a");
    let b = user("b");
    let state = mkdir(&root.join("state"), 0o700);
    chown(&state, &svc);
    let dir = StateDir::new(
        &state,
        Some(Owner {
            uid: svc.uid,
            gid: svc.gid,
        }),
    );
    dir.store_declaration(LlmCredentials::Organization).unwrap();
    let config = write(
        &root.join("config.yaml"),
        &format!(
            "host_service:\n  state_dir: {}\n  service_user: {}\n  session_users: [{}, {}]\n  runtime_dir: {}\n  auth_status_timeout: 20s\n",
            state.display(),
            svc.name,
            a.name,
            b.name,
            mkdir(&root.join("run"), 0o755).display()
        ),
        0o644,
    );
    Host {
        root,
        svc,
        a,
        b,
        config,
    }
}

#[test]
fn a_subscription_login_is_named_on_the_host_and_fails_the_exit_code() {
    let host = host();
    let claude = mkdir(&host.b.home.join(".claude"), 0o700);
    chown(&claude, &host.b);
    let creds = write(
        &claude.join(".credentials.json"),
        "{\"token\":\"canary-secret\"}",
        0o600,
    );
    chown(&creds, &host.b);
    let out = doctor(&host.config, &[]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(1), "{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines.contains(&"HD6 hd6_llm_login: failed subscription_login_detected"),
        "{text}"
    );
    // The code, then what it means and what to do (issue 16 item 10).
    let at = lines
        .iter()
        .position(|l| *l == "HD6 hd6_llm_login: failed subscription_login_detected")
        .unwrap();
    assert!(
        lines[at + 1].starts_with("  hint: a session user holds a personal subscription login"),
        "{text}"
    );
    assert!(
        lines.contains(
            &format!(
                "  session user {}: subscription_login_detected",
                host.b.name
            )
            .as_str()
        ),
        "{text}"
    );
    assert!(!text.contains(&host.a.name), "A has no finding: {text}");
    for check in 1..=11 {
        assert!(
            lines.iter().any(|l| l.starts_with(&format!("HD{check} "))),
            "HD{check} missing: {text}"
        );
    }
    assert!(!text.contains('/'), "no path in the output: {text}");
    assert!(!text.contains("canary-secret"));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(!err.contains("canary-secret"));
    assert!(!err.contains(&host.b.home.display().to_string()), "{err}");
    drop(host.root);
    drop(host.svc);
}

#[test]
fn a_former_session_user_with_an_open_home_is_named() {
    let host = host();
    let former = user("f");
    StateDir::new(
        &host.root.join("state"),
        Some(Owner {
            uid: host.svc.uid,
            gid: host.svc.gid,
        }),
    )
    .bind(&former.name, uuid::Uuid::from_u128(7))
    .unwrap();
    chmod(&former.home, 0o755);
    let out = doctor(&host.config, &[]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains(&format!("  user {}: home can be listed", former.name)),
        "{text}"
    );
    assert!(
        text.contains("HD9 hd9_foreign_homes: failed foreign_home_listable"),
        "{text}"
    );
}

#[test]
fn only_root_runs_the_doctor_and_a_bad_configuration_is_refused() {
    let host = host();
    let out = Command::new(bin())
        .args(["--config"])
        .arg(&host.config)
        .arg("doctor")
        .uid(host.a.uid)
        .gid(host.a.gid)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let bad = write(
        &host.root.join("bad.yaml"),
        "host_service:\n  nope: s3cret\n",
        0o644,
    );
    let out = doctor(&bad, &[]);
    assert_eq!(out.status.code(), Some(78));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("s3cret"));
}
