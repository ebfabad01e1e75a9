//! `bothy-host supervise` and `bothy-host restart` with real users and
//! processes (DESIGN §4; 2.2 items 1–3, 6.5, D-M2-42-14).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use bothy_testkit as support;
use bothy_testkit::helper as helper_common;

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::process::Command;
use std::time::{Duration, Instant};

use bothy_host::channel::StartProgram;
use bothy_host::manager;
use helper_common::{Supervised, poll, processes_of};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

fn signal(pid: u32, signal: Signal) {
    kill(Pid::from_raw(pid as i32), signal).unwrap();
}

fn cgroup_of(pid: u32) -> String {
    let text = fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    bothy_host::helper::cgroup::parse_own_cgroup(&text).unwrap()
}

fn uid_of(pid: u32) -> u32 {
    fs::metadata(format!("/proc/{pid}")).unwrap().uid()
}

fn restart(sup: &Supervised) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_bothy-host"))
        .arg("--config")
        .arg(&sup.config)
        .arg("restart")
        .output()
        .unwrap()
}

/// Waits until `pred` has held for the whole `span`: for "does not happen".
fn stays(span: Duration, mut pred: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + span;
    while Instant::now() < end {
        if !pred() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    pred()
}

#[test]
fn supervise_lays_out_folders_endpoints_cgroups_and_users_like_the_units() {
    let sup = Supervised::start(2);
    let run = &sup.runtime_dir;
    for folder in [run.clone(), run.join("helper"), run.join("pids")] {
        let m = fs::symlink_metadata(&folder).unwrap();
        assert!(m.is_dir());
        assert_eq!(
            (m.uid(), m.gid(), m.mode() & 0o777),
            (0, 0, 0o755),
            "{}",
            folder.display()
        );
    }
    let service = sup.service_pid();
    assert_eq!(uid_of(service), sup.service_user.uid);
    assert!(
        cgroup_of(service).ends_with("/service"),
        "{}",
        cgroup_of(service)
    );
    let supervise = sup.child.as_ref().unwrap().id();
    assert!(cgroup_of(supervise).ends_with(&format!("/bothy-host-{supervise}/supervise")));
    assert_eq!(
        manager::read_record(run, &manager::supervise_record(run)).unwrap(),
        supervise
    );

    for user in &sup.users {
        let helper = sup.helper_pid(user);
        assert_eq!(uid_of(helper), user.uid);
        let status = fs::read_to_string(format!("/proc/{helper}/status")).unwrap();
        let groups = status.lines().find(|l| l.starts_with("Groups:")).unwrap();
        assert!(
            groups.split_whitespace().any(|g| g == user.gid.to_string()),
            "{groups}"
        );
        let record = manager::helper_record(run, &user.name);
        let m = fs::metadata(&record).unwrap();
        assert_eq!((m.uid(), m.mode() & 0o777), (0, 0o644));
        // The delegated subtree belongs to the session user; the helper sits in its leaf.
        let cgroup = sup.helper_cgroup(user);
        assert!(cgroup.ends_with(format!("helper@{}", user.name)));
        for entry in [
            "",
            "cgroup.procs",
            "cgroup.threads",
            "cgroup.subtree_control",
        ] {
            assert_eq!(
                fs::metadata(cgroup.join(entry)).unwrap().uid(),
                user.uid,
                "{entry}"
            );
        }
        assert!(cgroup_of(helper).ends_with(&format!("helper@{}/helper", user.name)));
        // Socket activation with the listening socket as descriptor 3.
        let target = fs::read_link(format!("/proc/{helper}/fd/3")).unwrap();
        assert!(target.to_string_lossy().starts_with("socket:"));
    }

    // The service's environment: from scratch, with the supervised marker.
    poll("the stand-in service to be ready", || {
        let cmdline = fs::read(format!("/proc/{service}/cmdline")).ok()?;
        cmdline.starts_with(b"sleep").then_some(())
    });
    let env = fs::read_to_string(sup.dir.path().join(format!("svc/env.{service}"))).unwrap();
    assert!(env.lines().any(|l| l == "BOTHY_HOST_SUPERVISED=1"), "{env}");
    assert!(env.lines().any(|l| l.starts_with("BOTHY_HOST_TEST_DIR=")));
    assert!(env.lines().any(|l| l == "BOTHY_HOST_LOG=debug"));
    assert!(!env.contains("NOT_FOR_THE_SERVICE"), "{env}");
    let args = fs::read_to_string(sup.dir.path().join(format!("svc/args.{service}"))).unwrap();
    assert_eq!(
        args.trim_end(),
        format!("--config {} run", sup.config.display())
    );
    let groups = fs::read_to_string(format!("/proc/{service}/status")).unwrap();
    let groups = groups.lines().find(|l| l.starts_with("Groups:")).unwrap();
    assert_eq!(
        groups.trim(),
        "Groups:",
        "the service has no supplementary groups"
    );
}

#[test]
fn a_missing_session_user_is_skipped_and_a_second_supervise_is_refused() {
    let users = vec![support::users::TestUser::create("a")];
    let sup = Supervised::start_with(users, &["btnosuchuser0"]);
    assert!(!sup.runtime_dir.join("helper/btnosuchuser0.sock").exists());
    assert!(
        sup.log_text().contains("user_missing"),
        "{}",
        sup.log_text()
    );
    // The log names codes and indexes, not the missing name.
    assert!(!sup.log_text().contains("btnosuchuser0"));
    let second = sup.spawn_supervise().wait_with_output().unwrap();
    assert_eq!(second.status.code(), Some(1));
    // The refusal names the folder, the PID that holds it and the key to
    // change (issue 16 item 2).
    let holder = fs::read_to_string(sup.runtime_dir.join("supervise.pid")).unwrap();
    let log = sup.log_text();
    let line = log
        .lines()
        .find(|l| l.contains("supervise_running"))
        .unwrap_or_else(|| panic!("{log}"));
    assert!(
        line.contains(&sup.runtime_dir.display().to_string())
            && line.contains(&format!("PID {}", holder.trim()))
            && line.contains("host_service.runtime_dir"),
        "{line}"
    );
}

#[tokio::test]
async fn a_crashed_helper_restarts_with_a_new_pid_and_its_ptys_die_with_it() {
    let sup = Supervised::start(1);
    let user = sup.user(0);
    let helper_cgroup = sup.helper_cgroup(user);
    let _main = sup.main(user).await;
    let mut s = sup.session(user, StartProgram::Shell, (80, 24)).await;
    s.type_text("nohup sleep 1041 >/dev/null 2>&1 & printf 'C:%s:\\n' ok\n")
        .await;
    s.wait_for("C:ok:").await;
    poll("the sleep", || {
        (!processes_of(user.uid, "sleep 1041").is_empty()).then_some(())
    });

    let old = sup.helper_pid(user);
    signal(old, Signal::SIGKILL);
    let new = poll("a new helper", || {
        let now = sup.helper_pid(user);
        (now != old).then_some(now)
    });
    // Like systemd for a unit: the whole subtree of the crashed helper is gone.
    assert!(processes_of(user.uid, "sleep 1041").is_empty());
    assert!(!s.cgroup(&helper_cgroup).exists());
    assert!(processes_of(user.uid, "-bash").is_empty());
    // The new helper serves, and the peer check names it.
    assert_eq!(sup.expectation(user).main_pid, new);
    let _main = sup.main(user).await;
    let mut again = sup.session(user, StartProgram::Shell, (80, 24)).await;
    again.type_text("exit 0\n").await;
    assert_eq!(again.exited().await, Some(0));
}

#[test]
fn a_crashed_service_restarts_but_an_exit_78_stays_down_until_bothy_host_restart() {
    let sup = Supervised::start(1);
    let first = sup.service_pid();
    // The record exists from the clone on; the script notes its start a moment later.
    poll("the first start", || {
        (!sup.service_starts().is_empty()).then_some(())
    });
    assert_eq!(sup.service_starts(), [first]);

    // A crash (killed by a signal) restarts after the backoff.
    signal(first, Signal::SIGKILL);
    let second = poll("a restarted service", || {
        let starts = sup.service_starts();
        (starts.len() == 2).then(|| starts[1])
    });
    assert_eq!(sup.service_pid(), second);

    // The next crash restarts into a refused start (78): no further start.
    sup.set_service_exit(Some(bothy_host::EXIT_REFUSED_START));
    signal(second, Signal::SIGKILL);
    poll("the refused start", || {
        (sup.service_starts().len() == 3).then_some(())
    });
    let record = manager::service_record(&sup.runtime_dir);
    poll("its record to go", || (!record.exists()).then_some(()));
    assert!(
        stays(Duration::from_secs(2), || sup.service_starts().len() == 3),
        "a service that exited 78 was started again"
    );
    assert!(sup.log_text().contains("not restarted (0 or 78)"));

    // bothy-host restart starts it again, also after 78.
    sup.set_service_exit(None);
    let out = restart(&sup);
    assert!(out.status.success(), "{out:?}\n{}", sup.log_text());
    let fourth = sup.service_pid();
    poll("the fourth start", || {
        (sup.service_starts().len() == 4).then_some(())
    });
    assert_eq!(sup.service_starts()[3], fourth);
    assert!(String::from_utf8_lossy(&out.stdout).contains(&fourth.to_string()));

    // And a running service is stopped and started anew.
    let out = restart(&sup);
    assert!(out.status.success(), "{out:?}");
    let fifth = sup.service_pid();
    assert_ne!(fifth, fourth);
    poll("the fifth start", || {
        (sup.service_starts().len() == 5).then_some(())
    });
    // An exit 0 stays down too.
    sup.set_service_exit(Some(0));
    signal(fifth, Signal::SIGKILL);
    poll("the start that exits 0", || {
        (sup.service_starts().len() == 6).then_some(())
    });
    assert!(stays(Duration::from_secs(2), || sup.service_starts().len() == 6));
}

#[test]
fn restart_without_supervise_or_systemd_fails_with_a_message() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    fs::write(
        &config,
        format!(
            "host_service:\n  runtime_dir: {}\n",
            dir.path().join("run").display()
        ),
    )
    .unwrap();
    assert!(
        !std::path::Path::new("/run/systemd/system").exists(),
        "this test expects a host without systemd"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_bothy-host"))
        .arg("--config")
        .arg(&config)
        .arg("restart")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no bothy-host supervise runs"), "{stderr}");
}

#[tokio::test]
async fn sigterm_stops_everything_and_removes_cgroups_endpoints_and_records() {
    let mut sup = Supervised::start(2);
    let supervise = sup.child.as_ref().unwrap().id();
    let root = sup.helper_cgroup(sup.user(0)).parent().unwrap().to_owned();
    assert!(root.ends_with(format!("bothy-host-{supervise}")));
    let user = sup.user(0);
    let _main = sup.main(user).await;
    let mut s = sup.session(user, StartProgram::Shell, (80, 24)).await;
    s.type_text("setsid sleep 1051 </dev/null >/dev/null 2>&1 & printf 'T:%s:\\n' ok\n")
        .await;
    s.wait_for("T:ok:").await;
    let helpers: Vec<u32> = sup.users.iter().map(|u| sup.helper_pid(u)).collect();
    let service = sup.service_pid();

    let status = sup.stop();
    assert_eq!(status.code(), Some(0), "{}", sup.log_text());
    assert!(!root.exists(), "the cgroup subtree is removed");
    for pid in helpers.iter().chain([&service]) {
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "{pid} ended"
        );
    }
    for user in &sup.users {
        let left: Vec<String> = processes_of(user.uid, "")
            .iter()
            .map(|pid| fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default())
            .collect();
        assert!(left.is_empty(), "no process of a session user: {left:?}");
        assert!(!sup.endpoint(user).exists());
        assert!(!manager::helper_record(&sup.runtime_dir, &user.name).exists());
    }
    assert!(!manager::service_record(&sup.runtime_dir).exists());
    assert!(!manager::supervise_record(&sup.runtime_dir).exists());
    assert!(!manager::supervise_cgroup_record(&sup.runtime_dir).exists());
}

/// 3.4, issue 15: `kill -9` of supervise. The service and the helpers die
/// with it (parent-death signal); what a session started outside the shell
/// lives on in the old tree until the next supervise, which ends that tree
/// (named by `supervise.pid` and `supervise.cgroup`) and removes it before it
/// starts its own units.
#[tokio::test]
async fn a_killed_supervise_takes_its_units_along_and_the_next_one_ends_the_rest() {
    let mut sup = Supervised::start(1);
    let old_supervise = sup.child.as_ref().unwrap().id();
    let uid = sup.user(0).uid;
    let old_root = sup.helper_cgroup(sup.user(0)).parent().unwrap().to_owned();
    let mount = bothy_host::helper::cgroup::cgroup2_mount().unwrap();
    assert_eq!(
        manager::read_cgroup_record(&sup.runtime_dir).unwrap(),
        std::path::Path::new("/").join(old_root.strip_prefix(&mount).unwrap())
    );
    let _main = sup.main(sup.user(0)).await;
    let mut s = sup
        .session(sup.user(0), StartProgram::Shell, (80, 24))
        .await;
    s.type_text("setsid sleep 1061 </dev/null >/dev/null 2>&1 & printf 'K:%s:\\n' ok\n")
        .await;
    s.wait_for("K:ok:").await;
    // The process that runs `sleep` itself (not `setsid`, which may fork).
    let sleeper = poll("the sleep", || {
        processes_of(uid, "sleep 1061").into_iter().find(|pid| {
            fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c.starts_with(b"sleep\0"))
        })
    });
    let helper = sup.helper_pid(sup.user(0));
    let service = sup.service_pid();

    let mut child = sup.child.take().unwrap();
    signal(old_supervise, Signal::SIGKILL);
    child.wait().unwrap();
    poll("the units to die with supervise", || {
        [helper, service]
            .iter()
            .all(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists())
            .then_some(())
    });
    assert!(
        std::path::Path::new(&format!("/proc/{sleeper}")).exists(),
        "the session's own process is left for the next supervise"
    );

    sup.child = Some(sup.spawn_supervise());
    // The old records go first, then the new units write theirs.
    let record = manager::helper_record(&sup.runtime_dir, &sup.user(0).name);
    poll("the new helper", || {
        manager::read_record(&sup.runtime_dir, &record)
            .ok()
            .filter(|pid| *pid != helper)
    });
    let service_record = manager::service_record(&sup.runtime_dir);
    poll("the new service", || {
        manager::read_record(&sup.runtime_dir, &service_record)
            .ok()
            .filter(|pid| *pid != service)
    });
    poll("the old tree to be gone", || {
        (!old_root.exists() && processes_of(uid, "sleep 1061").is_empty()).then_some(())
    });
    assert!(sup.log_text().contains("previous_tree_ended"));
    let new_supervise = sup.child.as_ref().unwrap().id();
    assert_eq!(
        manager::read_record(
            &sup.runtime_dir,
            &manager::supervise_record(&sup.runtime_dir)
        )
        .unwrap(),
        new_supervise
    );
    let new_root = sup.helper_cgroup(sup.user(0)).parent().unwrap().to_owned();
    assert!(new_root.ends_with(format!("bothy-host-{new_supervise}")));
    let _main = sup.main(sup.user(0)).await;
    let mut again = sup
        .session(sup.user(0), StartProgram::Shell, (80, 24))
        .await;
    again.type_text("exit 0\n").await;
    assert_eq!(again.exited().await, Some(0));
}

/// The configuration file of `sup` with `edit` applied.
fn rewrite_config(sup: &Supervised, edit: impl FnOnce(String) -> String) {
    let text = fs::read_to_string(&sup.config).unwrap();
    fs::write(&sup.config, edit(text)).unwrap();
}

/// SIGHUP is `systemctl daemon-reload` plus a restart of the service (D-260):
/// the helper of a name no longer listed stops and goes with its endpoint,
/// record and cgroup before the service starts again; a newly listed session
/// user gets its endpoint and its helper as at the start; a helper that stays
/// listed keeps running; the folder of confirm.sock follows
/// require_local_confirm.
#[tokio::test]
async fn sighup_reads_the_configuration_again_and_applies_the_helpers_and_the_confirm_folder() {
    let sup = Supervised::start(2);
    let (gone, kept) = (sup.user(0), sup.user(1));
    let new = support::users::TestUser::create("c");
    let gone_helper = sup.helper_pid(gone);
    let gone_cgroup = sup.helper_cgroup(gone);
    let kept_helper = sup.helper_pid(kept);
    let service = sup.service_pid();
    assert_eq!(processes_of(gone.uid, ""), [gone_helper]);
    assert!(!sup.confirm_dir().exists());

    rewrite_config(&sup, |text| {
        text.replace(
            &format!("[{}, {}]", gone.name, kept.name),
            &format!("[{}, {}]", kept.name, new.name),
        ) + "  require_local_confirm: true\n"
    });
    let out = restart(&sup);
    assert!(out.status.success(), "{out:?}\n{}", sup.log_text());
    let second = sup.service_pid();
    assert_ne!(second, service);
    assert!(String::from_utf8_lossy(&out.stdout).contains(&second.to_string()));

    // The removed name: stopped before the service started again, and gone.
    assert!(
        processes_of(gone.uid, "").is_empty(),
        "{:?}",
        processes_of(gone.uid, "")
    );
    assert!(!sup.endpoint(gone).exists());
    assert!(!manager::helper_record(&sup.runtime_dir, &gone.name).exists());
    assert!(!gone_cgroup.exists(), "{}", gone_cgroup.display());

    // The kept one runs on.
    assert_eq!(sup.helper_pid(kept), kept_helper);

    // The new one: started before the service, as its user, in its delegated
    // cgroup, behind an endpoint of the service user; the peer check and a
    // round trip on its main connection pass.
    let record = manager::helper_record(&sup.runtime_dir, &new.name);
    let helper =
        manager::read_record(&sup.runtime_dir, &record).expect("started before the service");
    assert_eq!(uid_of(helper), new.uid);
    let endpoint = fs::symlink_metadata(sup.endpoint(&new)).unwrap();
    assert_eq!(
        (endpoint.uid(), endpoint.mode() & 0o777),
        (sup.service_user.uid, 0o600)
    );
    assert!(
        sup.helper_cgroup(&new)
            .ends_with(format!("helper@{}", new.name))
    );
    let _main = sup.main(&new).await;

    // The folder of confirm.sock, as RuntimeDirectory= makes it.
    let confirm = fs::symlink_metadata(sup.confirm_dir()).unwrap();
    assert!(confirm.is_dir());
    assert_eq!(
        (confirm.uid(), confirm.mode() & 0o777),
        (sup.service_user.uid, 0o755)
    );
    assert!(sup.log_text().contains("reloaded"));
    // The log names positions, never the session users.
    for name in [&gone.name, &new.name] {
        assert!(!sup.log_text().contains(name.as_str()), "{name} in the log");
    }

    // Switched off again: the folder goes with the service and stays away.
    rewrite_config(&sup, |text| {
        text.replace("  require_local_confirm: true\n", "")
    });
    let out = restart(&sup);
    assert!(out.status.success(), "{out:?}\n{}", sup.log_text());
    assert_ne!(sup.service_pid(), second);
    assert!(!sup.confirm_dir().exists());
    assert_eq!(sup.helper_pid(kept), kept_helper);
    assert_eq!(sup.helper_pid(&new), helper);
}

/// A SIGHUP whose configuration no longer decodes restarts nothing: supervise
/// logs config_invalid with the key, the service and the helpers run on
/// unchanged, and the list of the broken file is not applied. A change only a
/// new supervise can take over is refused the same way. Fixed, the next
/// restart applies it (D-260).
#[test]
fn a_sighup_with_a_configuration_that_no_longer_decodes_restarts_nothing() {
    let sup = Supervised::start(1);
    let user = sup.user(0);
    let newcomer = support::users::TestUser::create("n");
    let helper = sup.helper_pid(user);
    let service = sup.service_pid();
    poll("the first start", || {
        (!sup.service_starts().is_empty()).then_some(())
    });
    let good = fs::read_to_string(&sup.config).unwrap();
    let with_newcomer = good.replace(
        &format!("[{}]", user.name),
        &format!("[{}, {}]", user.name, newcomer.name),
    );
    assert_ne!(with_newcomer, good);
    let unchanged = || {
        sup.service_pid() == service
            && sup.service_starts().len() == 1
            && sup.helper_pid(user) == helper
            && !sup.endpoint(&newcomer).exists()
    };

    fs::write(&sup.config, format!("{with_newcomer}  nope: 1\n")).unwrap();
    signal(sup.supervise_pid(), Signal::SIGHUP);
    sup.wait_log("config_invalid");
    assert!(
        sup.log_text().contains("host_service.nope"),
        "{}",
        sup.log_text()
    );
    assert!(
        stays(Duration::from_secs(1), unchanged),
        "{}",
        sup.log_text()
    );
    // bothy-host restart refuses that file itself, before any signal.
    let out = restart(&sup);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("configuration is invalid"));
    assert!(unchanged());

    // Another runtime folder: only a new supervise can take it over.
    fs::write(
        &sup.config,
        with_newcomer.replace(
            sup.runtime_dir.to_str().unwrap(),
            sup.dir.path().join("elsewhere").to_str().unwrap(),
        ),
    )
    .unwrap();
    signal(sup.supervise_pid(), Signal::SIGHUP);
    sup.wait_log("supervise_restart_needed");
    assert!(sup.log_text().contains("host_service.runtime_dir"));
    assert!(
        stays(Duration::from_secs(1), unchanged),
        "{}",
        sup.log_text()
    );
    assert!(!sup.dir.path().join("elsewhere").exists());

    // Fixed: the next restart applies the list.
    fs::write(&sup.config, &with_newcomer).unwrap();
    let out = restart(&sup);
    assert!(out.status.success(), "{out:?}\n{}", sup.log_text());
    assert_ne!(sup.service_pid(), service);
    assert_eq!(sup.helper_pid(user), helper);
    assert_eq!(uid_of(sup.helper_pid(&newcomer)), newcomer.uid);
}
