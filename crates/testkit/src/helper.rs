//! A real `bothy-host supervise` for the tests of the helper, the channel and
//! supervise itself: real users (a service user and session users made with
//! `useradd`), a configuration in a temporary folder, the real helpers as
//! their session users in delegated cgroups.
//!
//! The service supervise starts is a stand-in shell script (the test seam
//! `BOTHY_HOST_TEST_SERVICE_PROGRAM`, feature `test-seams`, D-141): it
//! records its PID, arguments and environment and sleeps, or exits with the
//! code in `exit-code`. Built without the feature, these tests fail with a
//! message that says so; they never skip. The
//! test process plays the service's side of the channel itself: it runs as
//! root, and the peer check compares the *peer* (the helper) with the
//! expectation, not the caller; that only the service user (and root) may
//! connect to an endpoint is its own assertion (`channel_peer.rs`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use bothy_host::channel::{
    Channel, ChannelError, FromHelper, PeerExpectation, PtyStart, StartProgram, ToHelper,
};
use bothy_host::manager;
use bothy_proto::frame::TerminalSize;
use uuid::Uuid;

use crate::users::{self, TestUser};
use crate::wait::try_eventually_blocking;

/// Bound of every wait on a process or a message.
pub const BOUND: Duration = Duration::from_secs(20);

const SERVICE_SCRIPT: &str = r#"#!/bin/sh
d="$BOTHY_HOST_TEST_DIR"
echo "$$" >> "$d/svc/starts"
echo "$*" > "$d/svc/args.$$"
env > "$d/svc/env.$$"
if [ -f "$d/exit-code" ]; then exit "$(cat "$d/exit-code")"; fi
exec sleep 1000000
"#;

/// A running supervise with its users.
#[derive(Debug)]
pub struct Supervised {
    /// The temporary folder (root, 0755).
    pub dir: tempfile::TempDir,
    /// The configuration file.
    pub config: PathBuf,
    /// `host_service.runtime_dir`.
    pub runtime_dir: PathBuf,
    /// The service user.
    pub service_user: TestUser,
    /// The session users, in the order of the configuration.
    pub users: Vec<TestUser>,
    /// The supervise process.
    pub child: Option<Child>,
    /// Where supervise (and its children) log.
    pub log: PathBuf,
}

/// Polls `probe` until it gives a value, at most [`BOUND`]: for facts of the
/// process table and of files, which give no event to wait for.
#[track_caller]
pub fn poll<T>(what: &str, probe: impl FnMut() -> Option<T>) -> T {
    crate::wait::eventually_blocking(what, BOUND, probe)
}

impl Supervised {
    /// Supervise with `count` new session users (tags `a`, `b`, ...).
    pub fn start(count: usize) -> Supervised {
        let users = (0..count)
            .map(|i| TestUser::create(&((b'a' + i as u8) as char).to_string()))
            .collect();
        Supervised::start_with(users, &[])
    }

    /// Supervise for `users`, with `extra` names appended to `session_users`.
    pub fn start_with(users: Vec<TestUser>, extra: &[&str]) -> Supervised {
        if !bothy_host::seams::ENABLED {
            panic!(
                "these tests need the stand-in service of the feature test-seams: \
                 cargo test -p bothy-host --features test-seams (scripts/test builds with it)"
            );
        }
        let service_user = TestUser::create("svc");
        let dir = tempfile::tempdir().unwrap();
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let runtime_dir = dir.path().join("run");
        let state_dir = dir.path().join("state");
        let svc = dir.path().join("svc");
        fs::create_dir(&svc).unwrap();
        std::os::unix::fs::chown(&svc, Some(service_user.uid), Some(service_user.gid)).unwrap();
        let script = dir.path().join("service.sh");
        fs::write(&script, SERVICE_SCRIPT).unwrap();
        fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
        let names: Vec<String> = users
            .iter()
            .map(|u| u.name.clone())
            .chain(extra.iter().map(|s| (*s).to_owned()))
            .collect();
        let config = dir.path().join("config.yaml");
        fs::write(
            &config,
            format!(
                "host_service:\n  state_dir: {}\n  runtime_dir: {}\n  service_user: {}\n  session_users: [{}]\n",
                state_dir.display(),
                runtime_dir.display(),
                service_user.name,
                names.join(", ")
            ),
        )
        .unwrap();
        let log = dir.path().join("supervise.log");
        let mut supervised = Supervised {
            dir,
            config,
            runtime_dir,
            service_user,
            users,
            child: None,
            log,
        };
        supervised.child = Some(supervised.spawn_supervise());
        for user in &supervised.users {
            supervised.helper_pid(user);
        }
        supervised.service_pid();
        supervised
    }

    /// Starts `bothy-host supervise` for this configuration.
    pub fn spawn_supervise(&self) -> Child {
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        Command::new(crate::machine::bothy_host())
            .arg("--config")
            .arg(&self.config)
            .arg("supervise")
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")
            .env("BOTHY_HOST_LOG", "debug")
            .env(
                "BOTHY_HOST_TEST_SERVICE_PROGRAM",
                self.dir.path().join("service.sh"),
            )
            .env("BOTHY_HOST_TEST_DIR", self.dir.path())
            // The folder of confirm.sock, should a test switch
            // require_local_confirm on (D-200 test seam).
            .env("BOTHY_HOST_TEST_CONFIRM_DIR", self.confirm_dir())
            .env("NOT_FOR_THE_SERVICE", "1")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("bothy-host supervise starts")
    }

    /// Where supervise makes the folder of confirm.sock (test seam).
    pub fn confirm_dir(&self) -> PathBuf {
        self.dir.path().join("confirm")
    }

    /// The PID of supervise.
    pub fn supervise_pid(&self) -> u32 {
        self.child.as_ref().expect("supervise runs").id()
    }

    /// Waits (bounded) until the log of supervise contains `needle`.
    pub fn wait_log(&self, needle: &str) {
        let seen =
            try_eventually_blocking(BOUND, || self.log_text().contains(needle).then_some(()));
        assert!(
            seen.is_some(),
            "{needle} never appeared in the log:\n{}",
            self.log_text()
        );
    }

    /// What supervise and its children logged.
    pub fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The session user `i`.
    pub fn user(&self, i: usize) -> &TestUser {
        &self.users[i]
    }

    /// The PID in the record of the helper of `user` (waits for it).
    pub fn helper_pid(&self, user: &TestUser) -> u32 {
        let record = manager::helper_record(&self.runtime_dir, &user.name);
        poll("the helper's record", || {
            manager::read_record(&self.runtime_dir, &record).ok()
        })
    }

    /// The PID in the record of the service (waits for it).
    pub fn service_pid(&self) -> u32 {
        let record = manager::service_record(&self.runtime_dir);
        poll("the service's record", || {
            manager::read_record(&self.runtime_dir, &record).ok()
        })
    }

    /// The PIDs the stand-in service recorded at each start.
    pub fn service_starts(&self) -> Vec<u32> {
        fs::read_to_string(self.dir.path().join("svc/starts"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.parse().ok())
            .collect()
    }

    /// Makes the next stand-in service exit with `code` (or run, `None`).
    pub fn set_service_exit(&self, code: Option<i32>) {
        let path = self.dir.path().join("exit-code");
        match code {
            Some(code) => fs::write(path, code.to_string()).unwrap(),
            None => {
                let _ = fs::remove_file(path);
            }
        }
    }

    /// What the channel's peer check expects for the helper of `user` now.
    pub fn expectation(&self, user: &TestUser) -> PeerExpectation {
        PeerExpectation {
            uid: user.uid,
            main_pid: self.helper_pid(user),
        }
    }

    /// The endpoint of `user`'s helper.
    pub fn endpoint(&self, user: &TestUser) -> PathBuf {
        self.runtime_dir
            .join("helper")
            .join(format!("{}.sock", user.name))
    }

    /// A checked connection to `user`'s helper.
    pub async fn connect(&self, user: &TestUser) -> Result<Channel, ChannelError> {
        Channel::connect(&self.endpoint(user), self.expectation(user)).await
    }

    /// The main connection of `user`'s helper.
    pub async fn main(&self, user: &TestUser) -> Channel {
        let mut channel = self.connect(user).await.expect("peer check passes");
        channel.send(&ToHelper::Main).await.unwrap();
        // A check round trip: the main connection is registered once it answers.
        channel.send(&ToHelper::Checks(Vec::new())).await.unwrap();
        let answer = within(channel.recv()).await.unwrap();
        assert!(
            matches!(answer, Some(FromHelper::CheckResults(_))),
            "{answer:?}"
        );
        channel
    }

    /// A started session of `user` with `program` and `size`.
    pub async fn session(
        &self,
        user: &TestUser,
        program: StartProgram,
        size: (u16, u16),
    ) -> Session {
        let mut channel = self.connect(user).await.expect("peer check passes");
        let id = session_id();
        channel
            .send(&ToHelper::Start(Box::new(PtyStart {
                session_id: id,
                size: TerminalSize::new(size.0, size.1).unwrap(),
                program,
            })))
            .await
            .unwrap();
        let first = within(channel.recv()).await.unwrap();
        assert_eq!(first, Some(FromHelper::Started), "{}", self.log_text());
        Session {
            channel,
            id,
            output: String::new(),
        }
    }

    /// The cgroup folder of `user`'s helper service (`.../helper@<user>`).
    pub fn helper_cgroup(&self, user: &TestUser) -> PathBuf {
        let pid = self.helper_pid(user);
        let own = poll("the helper in its leaf", || {
            let text = fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
            let own = bothy_host::helper::cgroup::parse_own_cgroup(&text)?;
            own.ends_with("/helper").then_some(own)
        });
        let mount = bothy_host::helper::cgroup::cgroup2_mount().unwrap();
        mount
            .join(own.trim_start_matches('/'))
            .parent()
            .unwrap()
            .to_owned()
    }

    /// Sends SIGTERM and waits for supervise; its exit status.
    pub fn stop(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("supervise runs");
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        poll("supervise to exit", || child.try_wait().unwrap())
    }
}

impl Drop for Supervised {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- supervise log ---\n{}", self.log_text());
        }
        if let Some(mut child) = self.child.take() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(child.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            if try_eventually_blocking(BOUND, || child.try_wait().ok().flatten()).is_some() {
                return;
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A fresh random session ID.
pub fn session_id() -> Uuid {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).unwrap();
    uuid::Builder::from_random_bytes(bytes).into_uuid()
}

/// Awaits `future` at most [`BOUND`].
pub async fn within<F: std::future::Future>(future: F) -> F::Output {
    tokio::time::timeout(BOUND, future)
        .await
        .expect("an answer within the bound")
}

/// A running PTY session seen from the service's side.
#[derive(Debug)]
pub struct Session {
    /// Its connection.
    pub channel: Channel,
    /// Its ID.
    pub id: Uuid,
    /// All output so far (lossy UTF-8).
    pub output: String,
}

impl Session {
    /// Types `text` into the PTY.
    pub async fn type_text(&mut self, text: &str) {
        self.channel
            .send(&ToHelper::Input(text.as_bytes().to_vec()))
            .await
            .unwrap();
    }

    /// Reads output until it contains `needle`; panics on `Exited` or a close.
    pub async fn wait_for(&mut self, needle: &str) {
        within(async {
            while !self.output.contains(needle) {
                match self.channel.recv().await.unwrap() {
                    Some(FromHelper::Output(bytes)) => {
                        self.output.push_str(&String::from_utf8_lossy(&bytes))
                    }
                    other => panic!("{other:?} before {needle:?}; output: {}", self.output),
                }
            }
        })
        .await;
    }

    /// The first `<prefix><digits>:` the output holds (the typed line shows
    /// `<prefix>%s:` instead), read until it arrives.
    pub async fn wait_number(&mut self, prefix: &str) -> u32 {
        within(async {
            loop {
                let found = self.output.match_indices(prefix).find_map(|(at, _)| {
                    let rest = &self.output[at + prefix.len()..];
                    let (digits, _) = rest.split_once(':')?;
                    digits.parse::<u32>().ok()
                });
                if let Some(n) = found {
                    return n;
                }
                match self.channel.recv().await.unwrap() {
                    Some(FromHelper::Output(bytes)) => {
                        self.output.push_str(&String::from_utf8_lossy(&bytes))
                    }
                    other => panic!("{other:?} before {prefix:?}; output: {}", self.output),
                }
            }
        })
        .await
    }

    /// Reads until `Exited` and then the end of the connection; the status.
    pub async fn exited(&mut self) -> Option<i32> {
        within(async {
            loop {
                match self.channel.recv().await.unwrap() {
                    Some(FromHelper::Output(bytes)) => {
                        self.output.push_str(&String::from_utf8_lossy(&bytes))
                    }
                    Some(FromHelper::Exited(status)) => {
                        assert!(self.channel.recv().await.unwrap().is_none());
                        return status;
                    }
                    other => panic!("{other:?} before Exited"),
                }
            }
        })
        .await
    }

    /// The cgroup folder of this session under `helper_cgroup`.
    pub fn cgroup(&self, helper_cgroup: &Path) -> PathBuf {
        helper_cgroup.join(format!("s-{}", self.id))
    }
}

/// The processes of `uid` whose command line contains `needle`.
pub fn processes_of(uid: u32, needle: &str) -> Vec<u32> {
    users::processes_of(uid)
        .into_iter()
        .filter(|pid| {
            let cmdline = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            String::from_utf8_lossy(&cmdline)
                .replace('\0', " ")
                .contains(needle)
        })
        .collect()
}

/// Runs `program` with `args` as `user` (its user and primary group).
pub fn run_as(user: &TestUser, program: &str, args: &[&str]) -> std::process::Output {
    use std::os::unix::process::CommandExt;
    Command::new(program)
        .args(args)
        .uid(user.uid)
        .gid(user.gid)
        .current_dir("/")
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .output()
        .expect("runs")
}
