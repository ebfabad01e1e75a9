//! The start of the profile claude as the PTY helper builds it (7.4 "Start of
//! claude with personal" and "with organization"; TM-T29 (k) and (l) first
//! part, at the level of the spawn specification): each test runs once as the
//! parent (root: users, files, assertions) and once as its own child, started
//! with this test's name and `BOTHY_DOCTOR_CHILD`, which gives root up for the
//! session user, runs the helper's last check, builds the spawn specification
//! and runs it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use bothy_testkit::doctor as doctor_common;

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::symlink;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use bothy_host::channel::{PtyStart, StartFailure, StartProgram};
use bothy_host::doctor::claude_start::claude_spawn_spec;
use bothy_host::doctor::command::become_user;
use bothy_host::doctor::helper_side::{HelperState, helper_checks};
use bothy_host::doctor::wire::RequestKind;
use bothy_host::helper::env::{SessionUser, base_environment};
use bothy_proto::control::LlmCredentials;
use bothy_proto::frame::TerminalSize;
use doctor_common::*;
use zeroize::Zeroizing;

const CHILD: &str = "BOTHY_DOCTOR_CHILD";

/// What the child is asked to do: `user`, working directory, declaration, and
/// for organization `claude_bin`.
#[derive(Debug, Clone)]
struct Job {
    user: String,
    workdir: PathBuf,
    organization: Option<PathBuf>,
}

impl Job {
    fn encode(&self) -> String {
        format!(
            "{}\n{}\n{}",
            self.user,
            self.workdir.display(),
            self.organization
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default()
        )
    }

    fn decode(text: &str) -> Job {
        let mut lines = text.split('\n');
        let user = lines.next().unwrap().to_owned();
        let workdir = PathBuf::from(lines.next().unwrap());
        let organization = lines.next().filter(|l| !l.is_empty()).map(PathBuf::from);
        Job {
            user,
            workdir,
            organization,
        }
    }
}

/// The child's part: the answer line is `RESULT <outcome>`.
fn child(job: &Job) {
    become_user(&job.user).expect("becomes the session user");
    let me = SessionUser::current().unwrap();
    let mut request = request_for(&me, job);
    request.kind = RequestKind::Light;
    let mut state = HelperState::with_probe_program(bin(), false);
    let _ = helper_checks(&request.encode(), &mut state);
    let program = match &job.organization {
        Some(_) => StartProgram::ClaudeOrganization {
            workdir: job.workdir.clone(),
            api_key: Zeroizing::new("sk-canary-key".to_owned()),
        },
        None => StartProgram::ClaudePersonal {
            workdir: job.workdir.clone(),
        },
    };
    let start = PtyStart {
        session_id: uuid::Uuid::nil(),
        size: TerminalSize::new(80, 24).unwrap(),
        program,
    };
    let helper_env = vec![(
        OsString::from("PATH"),
        OsString::from(format!("{}/bin:/usr/bin:/bin", me.home.display())),
    )];
    let env = base_environment(&me, helper_env);
    match claude_spawn_spec(&start, &me, &std::sync::Mutex::new(state), env) {
        Err(StartFailure::SharedLocation) => println!("RESULT err shared_location"),
        Err(StartFailure::PtyFailed) => println!("RESULT err pty_failed"),
        Ok(spec) => {
            let mut command = Command::new(&spec.program);
            command
                .arg0(&spec.argv0)
                .args(&spec.args)
                .current_dir(&spec.cwd)
                .env_clear();
            for entry in spec.env.entries() {
                let at = entry.iter().position(|b| *b == b'=').unwrap();
                command.env(
                    std::ffi::OsStr::from_bytes(&entry[..at]),
                    std::ffi::OsStr::from_bytes(&entry[at + 1..]),
                );
            }
            let output = command.stdin(Stdio::null()).output().unwrap();
            let text = String::from_utf8_lossy(&output.stdout);
            println!("RESULT ok {}", text.trim().replace('\n', " "));
        }
    }
}

fn request_for(me: &SessionUser, job: &Job) -> bothy_host::doctor::wire::CheckRequest {
    bothy_host::doctor::wire::CheckRequest {
        kind: RequestKind::Light,
        uid: me.uid,
        home: me.home.clone(),
        shell: me.shell.clone(),
        others: vec![],
        declaration: Some(if job.organization.is_some() {
            LlmCredentials::Organization
        } else {
            LlmCredentials::Personal
        }),
        claude_bin: job.organization.clone(),
        search_tail: vec!["/usr/bin".into(), "/bin".into()],
        workdirs: vec![job.workdir.clone()],
        state_dir: "/nonexistent".into(),
        key_files: vec![],
        homes: vec![],
        sudo: vec![],
        auth_status_timeout_ms: 20_000,
        entry_scan_timeout_ms: 60_000,
    }
}

/// Runs this test's own child for `job` (optionally under strace); its outcome
/// and, when traced, every program it started.
fn run_child(test: &str, job: &Job, trace: Option<&Path>) -> (String, Vec<PathBuf>) {
    let exe = std::env::current_exe().unwrap();
    let mut command = match trace {
        Some(file) => {
            let mut c = Command::new("strace");
            c.args(["-f", "-qq", "-e", "trace=execve", "-e", "signal=none", "-o"])
                .arg(file)
                .arg(&exe);
            c
        }
        None => Command::new(&exe),
    };
    command
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(CHILD, job.encode())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let child = command.spawn().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let output = rx
        .recv_timeout(Duration::from_secs(120))
        .expect("the child ends")
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let result = text
        .lines()
        .find_map(|l| l.find("RESULT ").map(|at| &l[at + 7..]))
        .unwrap_or_else(|| panic!("no result: {text}"))
        .to_owned();
    let execs = trace
        .map(|file| {
            std::fs::read_to_string(file)
                .unwrap()
                .lines()
                .filter_map(|l| {
                    let at = l.find("execve(\"")? + 8;
                    let end = l[at..].find('"')?;
                    Some(PathBuf::from(&l[at..at + end]))
                })
                .collect()
        })
        .unwrap_or_default();
    (result, execs)
}

/// The child's job when this process is a child.
fn as_child() -> Option<Job> {
    std::env::var(CHILD).ok().map(|t| Job::decode(&t))
}

fn set_profile(user: &TestUser, text: &str) {
    let profile = write(&user.home.join(".profile"), text, 0o644);
    chown(&profile, user);
}

#[test]
fn t29_k_personal_claude_config_dir_must_resolve_into_the_home() {
    if let Some(job) = as_child() {
        return child(&job);
    }
    let root = RootDir::new();
    let b = user("b");
    let wb = mkdir(&root.join("wb"), 0o700);
    chown(&wb, &b);
    // The claude of the holder's PATH prints its CLAUDE_CONFIG_DIR and folder.
    let bin_dir = mkdir(&b.home.join("bin"), 0o755);
    chown(&bin_dir, &b);
    let claude = write(
        &bin_dir.join("claude"),
        "#!/bin/sh\nprintf '%s|%s|%s\\n' \"${CLAUDE_CONFIG_DIR-unset}\" \"$PWD\" \"${ANTHROPIC_API_KEY+key}\"\n",
        0o755,
    );
    chown(&claude, &b);
    let outside = mkdir(&root.join("outside"), 0o700);
    chown(&outside, &b);
    let link_out = b.home.join("link-out");
    symlink(&outside, &link_out).unwrap();
    lchown(&link_out, &b);
    let dangling = b.home.join("dangling");
    symlink(b.home.join("nothing-here"), &dangling).unwrap();
    lchown(&dangling, &b);
    let inside = mkdir(&b.home.join("cc"), 0o700);
    chown(&inside, &b);
    let job = Job {
        user: b.name.clone(),
        workdir: wb.clone(),
        organization: None,
    };
    let path = "export PATH=\"$HOME/bin:$PATH\"\n".to_owned();
    let name = "t29_k_personal_claude_config_dir_must_resolve_into_the_home";
    for dir in [&outside, &link_out, &dangling] {
        set_profile(
            &b,
            &format!("{path}export CLAUDE_CONFIG_DIR={}\n", dir.display()),
        );
        assert_eq!(
            run_child(name, &job, None).0,
            "err shared_location",
            "{}",
            dir.display()
        );
    }
    set_profile(
        &b,
        &format!("{path}export CLAUDE_CONFIG_DIR={}\n", inside.display()),
    );
    assert_eq!(
        run_child(name, &job, None).0,
        format!("ok {}|{}|", inside.display(), wb.display()),
        "claude runs with exactly this folder, in the working directory, without a key"
    );
    // Unset: the default folder in the home, and claude runs without the variable.
    set_profile(&b, &path);
    assert_eq!(
        run_child(name, &job, None).0,
        format!("ok unset|{}|", wb.display())
    );
    // A working directory that is not one of the last check, or changed since.
    let other = Job {
        workdir: root.join("elsewhere"),
        ..job.clone()
    };
    assert_eq!(run_child(name, &other, None).0, "err shared_location");
    // A login shell not in /etc/shells: pty_failed.
    assert!(
        Command::new("usermod")
            .args(["-s", "/bin/false", &b.name])
            .status()
            .unwrap()
            .success()
    );
    assert_eq!(run_child(name, &job, None).0, "err pty_failed");
}

#[test]
fn t29_l_organization_starts_exactly_the_resolved_claude_bin() {
    if let Some(job) = as_child() {
        return child(&job);
    }
    let root = RootDir::new();
    let b = user("b");
    let wb = mkdir(&root.join("wb"), 0o700);
    chown(&wb, &b);
    let cb = mkdir(&root.join("cb"), 0o755);
    let claude = write(
        &cb.join("claude"),
        "#!/usr/bin/env node\nconsole.log([process.env.CLAUDE_CONFIG_DIR, process.cwd(), process.env.ANTHROPIC_API_KEY ? 'key' : 'nokey', process.env.PATH.split(':').slice(0, 3).join(':')].join('|'))\n",
        0o755,
    );
    let link_dir = mkdir(&root.join("links"), 0o755);
    symlink(&claude, link_dir.join("claude")).unwrap();
    // Another claude and another node in the PATH of the session user.
    let bin_dir = mkdir(&b.home.join("bin"), 0o755);
    chown(&bin_dir, &b);
    let other_claude = write(&bin_dir.join("claude"), "#!/bin/sh\necho other\n", 0o755);
    let other_node = write(&bin_dir.join("node"), "#!/bin/sh\necho other node\n", 0o755);
    for p in [&other_claude, &other_node] {
        chown(p, &b);
    }
    let job = Job {
        user: b.name.clone(),
        workdir: wb.clone(),
        organization: Some(link_dir.join("claude")),
    };
    let trace = root.join("trace");
    let (result, execs) = run_child(
        "t29_l_organization_starts_exactly_the_resolved_claude_bin",
        &job,
        Some(&trace),
    );
    let config_dir = b.home.join(".config/bothy-host/claude");
    assert_eq!(
        result,
        format!(
            "ok {}|{}|key|{}:/usr/bin:{}",
            config_dir.display(),
            wb.display(),
            link_dir.display(),
            bin_dir.display()
        ),
        "the search list of HD6 first (the configured folder, not the link's), then the cleaned PATH"
    );
    assert!(
        execs.contains(&claude),
        "the resolved claude_bin starts: {execs:?}"
    );
    assert!(!execs.contains(&link_dir.join("claude")), "{execs:?}");
    assert!(!execs.contains(&other_claude), "{execs:?}");
    assert!(!execs.contains(&other_node), "{execs:?}");
    // The fixed folder was created for the session user with mode 0700.
    let meta = std::fs::metadata(&config_dir).unwrap();
    assert_eq!(std::os::unix::fs::MetadataExt::uid(&meta), b.uid);
    assert_eq!(std::os::unix::fs::MetadataExt::mode(&meta) & 0o777, 0o700);
    // A fixed folder that leads elsewhere: shared_location.
    std::fs::remove_dir(&config_dir).unwrap();
    let elsewhere = mkdir(&b.home.join("elsewhere"), 0o700);
    chown(&elsewhere, &b);
    symlink(&elsewhere, &config_dir).unwrap();
    lchown(&config_dir, &b);
    let (result, _) = run_child(
        "t29_l_organization_starts_exactly_the_resolved_claude_bin",
        &job,
        None,
    );
    assert_eq!(result, "err shared_location");
}
