//! The PTY helper through its channel, with real users under a real
//! `bothy-host supervise` (6.5, 11.1, 2.2 item 4; D-W-90).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use bothy_testkit as support;
use bothy_testkit::helper as helper_common;

use std::path::PathBuf;

use bothy_host::channel::{FromHelper, PtyStart, StartFailure, StartProgram, ToHelper};
use bothy_proto::frame::TerminalSize;
use helper_common::{Supervised, poll, processes_of, run_as, within};

fn command(program: &str, args: &[&str]) -> StartProgram {
    StartProgram::Command {
        program: PathBuf::from(program),
        args: args.iter().map(|a| (*a).to_owned()).collect(),
    }
}

#[tokio::test]
async fn the_shell_runs_as_its_session_user_with_its_size_and_exit_code() {
    let sup = Supervised::start(2);
    for user in &sup.users {
        let _main = sup.main(user).await;
        let mut s = sup.session(user, StartProgram::Shell, (80, 24)).await;
        // The typed line never contains what the marker prints.
        s.type_text("printf 'U:%s:\\n' \"$(id -un)\"; printf 'S:%s:\\n' \"$(stty size)\"\n")
            .await;
        s.wait_for(&format!("U:{}:", user.name)).await;
        s.wait_for("S:24 80:").await;
        s.channel
            .send(&ToHelper::Resize(TerminalSize::new(132, 43).unwrap()))
            .await
            .unwrap();
        s.type_text("printf 'S:%s:\\n' \"$(stty size)\"\n").await;
        s.wait_for("S:43 132:").await;
        // A login shell: argv[0] is "-bash", the working directory the home.
        s.type_text("printf 'Z:%s:%s:\\n' \"$0\" \"$PWD\"\n").await;
        s.wait_for(&format!("Z:-bash:{}:", user.home.display()))
            .await;
        s.type_text("exit 3\n").await;
        assert_eq!(s.exited().await, Some(3), "{}", s.output);
    }
}

#[tokio::test]
async fn a_signal_gives_128_plus_its_number() {
    let sup = Supervised::start(1);
    let user = sup.user(0);
    let _main = sup.main(user).await;
    let mut s = sup.session(user, StartProgram::Shell, (80, 24)).await;
    s.type_text("kill -KILL $$\n").await;
    assert_eq!(s.exited().await, Some(128 + 9));
    let mut s = sup
        .session(user, command("/bin/sh", &["-c", "kill -TERM $$"]), (80, 24))
        .await;
    assert_eq!(s.exited().await, Some(128 + 15));
}

#[tokio::test]
async fn end_kills_the_whole_tree_at_once_and_removes_the_cgroup() {
    let sup = Supervised::start(1);
    let user = sup.user(0);
    let helper_cgroup = sup.helper_cgroup(user);
    let _main = sup.main(user).await;
    let mut s = sup.session(user, StartProgram::Shell, (80, 24)).await;
    s.type_text(
        "setsid sleep 1017 </dev/null >/dev/null 2>&1 & nohup sleep 1018 >/dev/null 2>&1 & \
         disown -a; printf 'B:%s:\\n' \"$(grep ^0:: /proc/self/cgroup)\"\n",
    )
    .await;
    s.wait_for("B:0::").await;
    let cgroup = s.cgroup(&helper_cgroup);
    assert!(
        s.output.contains(&format!("/s-{}", s.id)),
        "the shell runs in its session's cgroup: {}",
        s.output
    );
    assert!(cgroup.is_dir());
    poll("both sleeps", || {
        (processes_of(user.uid, "sleep 1017").len() == 1
            && processes_of(user.uid, "sleep 1018").len() == 1)
            .then_some(())
    });
    let procs = std::fs::read_to_string(cgroup.join("cgroup.procs")).unwrap();
    for pid in processes_of(user.uid, "sleep 101") {
        assert!(
            procs.lines().any(|l| l == pid.to_string()),
            "{pid} in the cgroup"
        );
    }

    s.channel.send(&ToHelper::End).await.unwrap();
    // The shell was killed with the tree: SIGKILL, no grace.
    assert_eq!(s.exited().await, Some(128 + 9));
    assert!(!cgroup.exists(), "the session's cgroup is removed");
    assert!(processes_of(user.uid, "sleep 101").is_empty());
    // The helper itself lives on.
    assert!(processes_of(user.uid, "pty-helper").len() == 1);
}

#[tokio::test]
async fn a_lost_session_connection_or_the_leader_s_exit_end_the_tree_too() {
    let sup = Supervised::start(1);
    let user = sup.user(0);
    let helper_cgroup = sup.helper_cgroup(user);
    let _main = sup.main(user).await;

    let mut s = sup.session(user, StartProgram::Shell, (80, 24)).await;
    s.type_text("setsid sleep 1021 </dev/null >/dev/null 2>&1 & printf 'R:%s:\\n' ok\n")
        .await;
    s.wait_for("R:ok:").await;
    poll("the sleep", || {
        (!processes_of(user.uid, "sleep 1021").is_empty()).then_some(())
    });
    let cgroup = s.cgroup(&helper_cgroup);
    drop(s);
    poll("the tree of a dropped connection to end", || {
        (processes_of(user.uid, "sleep 1021").is_empty() && !cgroup.exists()).then_some(())
    });

    // The leader exits while a background process runs: it is killed too.
    let mut s = sup
        .session(
            user,
            command(
                "/bin/sh",
                &[
                    "-c",
                    "setsid sleep 1022 </dev/null >/dev/null 2>&1 & echo started; exit 0",
                ],
            ),
            (80, 24),
        )
        .await;
    assert_eq!(s.exited().await, Some(0));
    assert!(s.output.contains("started"), "{}", s.output);
    assert!(processes_of(user.uid, "sleep 1022").is_empty());
    assert!(!s.cgroup(&helper_cgroup).exists());
}

#[tokio::test]
async fn losing_the_main_connection_ends_every_pty_and_the_helper_waits_for_the_next() {
    let sup = Supervised::start(1);
    let user = sup.user(0);
    let helper_cgroup = sup.helper_cgroup(user);
    let main = sup.main(user).await;
    let mut sessions = Vec::new();
    for n in 0..2 {
        let mut s = sup.session(user, StartProgram::Shell, (80, 24)).await;
        s.type_text(&format!(
            "nohup sleep 103{n} >/dev/null 2>&1 & printf 'M:%s:\\n' {n}\n"
        ))
        .await;
        s.wait_for(&format!("M:{n}:")).await;
        sessions.push(s);
    }
    poll("the sleeps", || {
        (processes_of(user.uid, "sleep 103").len() == 2).then_some(())
    });
    drop(main);
    for s in &mut sessions {
        // The helper could not learn an exit of its own: the channel broke.
        assert_eq!(s.exited().await, None);
        assert!(!s.cgroup(&helper_cgroup).exists());
    }
    assert!(processes_of(user.uid, "sleep 103").is_empty());

    // Without a main connection no PTY starts.
    let mut channel = sup.connect(user).await.unwrap();
    channel
        .send(&ToHelper::Start(Box::new(PtyStart {
            session_id: helper_common::session_id(),
            size: TerminalSize::new(80, 24).unwrap(),
            program: StartProgram::Shell,
        })))
        .await
        .unwrap();
    assert_eq!(
        within(channel.recv()).await.unwrap(),
        Some(FromHelper::StartFailed(StartFailure::PtyFailed))
    );

    // The next main connection makes sessions possible again.
    let _main = sup.main(user).await;
    let mut s = sup
        .session(user, command("/bin/echo", &["again"]), (80, 24))
        .await;
    assert_eq!(s.exited().await, Some(0));
    assert!(s.output.contains("again"));
}

#[tokio::test]
async fn a_newer_main_connection_replaces_the_older_and_ends_its_sessions() {
    let sup = Supervised::start(1);
    let user = sup.user(0);
    let mut first = sup.main(user).await;
    let mut s = sup.session(user, StartProgram::Shell, (80, 24)).await;
    let _second = sup.main(user).await;
    assert_eq!(s.exited().await, None);
    // The older main connection is closed by the helper.
    assert!(within(first.recv()).await.unwrap().is_none());
}

#[tokio::test]
async fn the_environment_is_built_from_scratch() {
    let sup = Supervised::start(1);
    let user = sup.user(0);
    let _main = sup.main(user).await;
    let mut s = sup
        .session(user, command("/usr/bin/env", &[]), (80, 24))
        .await;
    assert_eq!(s.exited().await, Some(0));
    let mut names: Vec<&str> = s
        .output
        .lines()
        .filter_map(|l| l.split_once('=').map(|(n, _)| n))
        .collect();
    names.sort_unstable();
    assert_eq!(
        names,
        ["HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER"],
        "{}",
        s.output
    );
    for expected in [
        format!("HOME={}", user.home.display()),
        format!("USER={}", user.name),
        format!("LOGNAME={}", user.name),
        "SHELL=/bin/bash".to_owned(),
        "TERM=xterm-256color".to_owned(),
    ] {
        assert!(
            s.output.lines().any(|l| l.trim_end() == expected),
            "{expected}: {}",
            s.output
        );
    }
    // The helper's PATH (systemd's default list), cleaned and resolved.
    let path = s
        .output
        .lines()
        .find_map(|l| l.trim_end().strip_prefix("PATH="))
        .unwrap();
    assert!(path.split(':').all(|p| p.starts_with('/')), "{path}");
    assert!(path.split(':').any(|p| p == "/usr/bin"), "{path}");
}

#[tokio::test]
async fn a_shell_not_in_etc_shells_or_a_missing_program_fails_with_pty_failed() {
    let user = support::users::TestUser::create("nosh");
    let status = std::process::Command::new("usermod")
        .args(["--shell", "/usr/bin/false", &user.name])
        .status()
        .unwrap();
    assert!(status.success());
    let sup = Supervised::start_with(vec![user], &[]);
    let user = sup.user(0);
    let _main = sup.main(user).await;
    for program in [StartProgram::Shell, command("/nonexistent/program", &[])] {
        let mut channel = sup.connect(user).await.unwrap();
        let session_id = helper_common::session_id();
        channel
            .send(&ToHelper::Start(Box::new(PtyStart {
                session_id,
                size: TerminalSize::new(80, 24).unwrap(),
                program,
            })))
            .await
            .unwrap();
        assert_eq!(
            within(channel.recv()).await.unwrap(),
            Some(FromHelper::StartFailed(StartFailure::PtyFailed))
        );
        assert!(within(channel.recv()).await.unwrap().is_none());
        assert!(
            !sup.helper_cgroup(user)
                .join(format!("s-{session_id}"))
                .exists()
        );
    }
}

#[tokio::test]
async fn every_byte_of_a_large_output_arrives_in_order() {
    let sup = Supervised::start(1);
    let user = sup.user(0);
    let _main = sup.main(user).await;
    // 4 MiB of output, far more than the PTY and the socket hold: the PTY is
    // read only as fast as the connection takes it, and nothing is dropped.
    let mut s = sup
        .session(
            user,
            command(
                "/bin/sh",
                &[
                    "-c",
                    "head -c 4194304 /dev/zero | tr '\\0' x; echo; echo END",
                ],
            ),
            (80, 24),
        )
        .await;
    assert_eq!(s.exited().await, Some(0));
    let xs = s.output.bytes().filter(|b| *b == b'x').count();
    assert_eq!(xs, 4 * 1024 * 1024);
    assert!(
        s.output.trim_end().ends_with("END"),
        "{}",
        &s.output[s.output.len() - 20..]
    );
}

#[tokio::test]
async fn the_helper_is_not_dumpable_but_its_shells_are() {
    let sup = Supervised::start(1);
    let user = sup.user(0);
    let helper = sup.helper_pid(user);
    let _main = sup.main(user).await;
    let mut s = sup.session(user, StartProgram::Shell, (80, 24)).await;
    s.type_text("printf 'P:%s:\\n' \"$$\"\n").await;
    let shell = s.wait_number("P:").await;

    // Same user: the shell's memory is readable, the helper's is not.
    let environ = |pid: u32| run_as(user, "/bin/cat", &[&format!("/proc/{pid}/environ")]);
    assert!(environ(shell).status.success());
    let refused = environ(helper);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("Permission denied"));
    // ptrace attach as the same user is refused.
    let strace = run_as(
        user,
        "/usr/bin/strace",
        &["-p", &helper.to_string(), "-e", "trace=none"],
    );
    assert!(!strace.status.success());
    assert!(
        String::from_utf8_lossy(&strace.stderr).contains("Operation not permitted"),
        "{}",
        String::from_utf8_lossy(&strace.stderr)
    );
    // The kernel hands /proc/<helper> to root.
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        std::fs::metadata(format!("/proc/{helper}/environ"))
            .unwrap()
            .uid(),
        0
    );
    assert_eq!(
        std::fs::metadata(format!("/proc/{shell}/environ"))
            .unwrap()
            .uid(),
        user.uid
    );
}
