//! `bothy-host supervise`: the service manager where no systemd runs (DESIGN
//! §4). Run as root, it does for the same binaries what the systemd units of
//! `bothy-host install` do (2.2, 6.5, D-M2-42-14):
//!
//! - `<runtime_dir>` and `<runtime_dir>/helper/`, `<runtime_dir>/pids/`: root,
//!   mode 0755 (a folder of a trusted owner, writable by no session user).
//! - Per session user that exists (a missing one is skipped and logged; the
//!   doctor reports HD1): the endpoint `<runtime_dir>/helper/<user>.sock`,
//!   bound and listened to here, owned by the service user with mode 0600, so
//!   only the service user (and root) can connect; the helper only holds the
//!   listening socket, and a process of the session user cannot recreate it.
//! - A delegated cgroup v2 subtree per helper, as `Delegate=yes` makes it:
//!   `<own cgroup>/bothy-host-<pid>/helper@<user>`, whose folder and
//!   `cgroup.procs`, `cgroup.threads`, `cgroup.subtree_control` belong to the
//!   session user. Supervise moves itself into `.../supervise`, the service
//!   runs in `.../service`.
//! - Each helper starts as its session user (its supplementary groups, its
//!   group, its user) inside its cgroup (`clone3` with `CLONE_INTO_CGROUP`,
//!   [`crate::helper::pty::clone_exec`]), with the listening socket as
//!   descriptor 3 and `LISTEN_FDS=1`, `LISTEN_PID=<its PID>` — the form of
//!   systemd socket activation (D-132) — and an environment from scratch:
//!   `PATH` = systemd's default list, `LANG`/`LC_*` and `BOTHY_HOST_LOG` from
//!   supervise's environment (D-135).
//! - Then `bothy-host --config <file> run` as the service user, supplementary
//!   groups cleared, with only `PATH`, `SSL_CERT_FILE`, `HTTPS_PROXY`,
//!   `https_proxy`, `NO_PROXY`, `no_proxy`, `BOTHY_HOST_LOG`, every
//!   `BOTHY_HOST_TEST_*` from supervise's environment, and
//!   [`crate::manager::SUPERVISED_ENV`]`=1`, which makes the service read the
//!   PID records ([`crate::manager`]).
//! - Standard input is `/dev/null`; standard output and error are supervise's.
//! - With `host_service.require_local_confirm = true`, the folder of the
//!   confirmation endpoint (`/run/bothy-host-confirm`, 6.4) as
//!   `RuntimeDirectory=bothy-host-confirm` makes it: created before every
//!   start of the service, owned by the service user and its group, mode
//!   0755, removed when the service ends and when supervise stops (D-201).
//!
//! Restarts are those of the units, with `RestartPreventExitStatus=78`: the
//! service (`Restart=on-failure`) starts again after being killed by a signal
//! or exiting non-zero other than 78; a helper (`Restart=always`, D-330) after
//! any end but 78, since its own session user can end it. The pause is a
//! backoff (200 ms, doubling to 5 s, back to 200 ms after 10 s of running).
//! When a helper ends, its whole subtree is killed first (as systemd does for
//! a unit), so no PTY outlives its helper; the new helper gets a new PID,
//! which its record names before the helper accepts anything.
//!
//! Every unit gets `PR_SET_PDEATHSIG` SIGKILL (set in the child after the
//! change of user; supervise is single-threaded, so the thread that starts a
//! unit lives as long as supervise): when supervise dies without its shutdown
//! (`kill -9`, a crash), the service and the helpers die with it, and no
//! orphaned service keeps the control connection (3.4). What their sessions
//! started may still run in the old tree; the next supervise reads the
//! records of the previous one (`supervise.pid`, `supervise.cgroup`, see
//! [`crate::manager`]) under its lock, kills and removes that tree and drops
//! the old PID records before it starts anything (D-332).
//!
//! SIGHUP (from `bothy-host restart`, `bothy-host session-user add|remove`)
//! does what `systemctl daemon-reload` and a restart of the service do
//! (D-260): supervise reads the configuration again, with the same strict
//! decoding as at its start. A configuration that no longer decodes (or that
//! changes `runtime_dir` or `service_user`, which only a new supervise can
//! take over) is refused: the error is logged, and everything keeps running
//! as it was, the service too. Otherwise the service stops (SIGTERM, SIGKILL
//! after 10 s); then the helper of every name no longer in `session_users`
//! stops the same way and goes with its endpoint, record and cgroup; then
//! every newly listed session user gets its endpoint and helper exactly as at
//! the start; the folder of `confirm.sock` follows `require_local_confirm`;
//! and the service starts at once — also one that had exited 78 or waited
//! for its backoff. Helpers that stay listed keep running (their sessions end
//! with the service, as under systemd). SIGTERM or SIGINT stop everything
//! (the service first, then the helpers), remove the cgroups, the endpoints
//! and the records, and exit 0.
//!
//! Layout: this module is the supervisor's loop (start, signals, reload,
//! stop); `units` the units (a helper per session user, the service), their
//! start in a fresh cgroup and the records of PIDs and cgroups; `endpoint`
//! the helpers' endpoints and the folders of root they live in.

use std::ffi::{CString, OsString};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{SigSet, Signal, kill};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::socket::{
    AddressFamily, Backlog, SockFlag, SockType, UnixAddr, bind, listen, socket,
};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{Pid, User};
use tracing::{error, info, warn};

use crate::config::{Config, HostServiceConfig};
use crate::helper::cgroup::{Cgroup, EMPTY_BOUND};
use crate::helper::env::Environment;
use crate::helper::pty::{Credentials, ExecPlan, SessionMode, clone_exec};
use crate::manager;

mod endpoint;
mod units;

use endpoint::*;
pub use units::write_record;
use units::*;

/// `PATH` of a helper: systemd's default for services (merged `/usr`).
pub const HELPER_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin";

/// The lock file supervise holds while it runs (`bothy-host restart` probes it).
pub fn lock_path(runtime_dir: &Path) -> PathBuf {
    runtime_dir.join("supervise.lock")
}

/// First pause before a restart (systemd's `RestartSec=` is 100 ms).
const BACKOFF_BASE: Duration = Duration::from_millis(200);
/// Longest pause before a restart.
const BACKOFF_CAP: Duration = Duration::from_secs(5);
/// A process that ran this long starts again with the first pause.
const BACKOFF_RESET: Duration = Duration::from_secs(10);
/// From SIGTERM to SIGKILL when stopping (systemd: `TimeoutStopSec=`).
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// The test seam of the service's program (feature `test-seams` only): the
/// scenario tests of supervise run a stand-in service they control.
pub const TEST_SERVICE_PROGRAM_ENV: &str = "BOTHY_HOST_TEST_SERVICE_PROGRAM";

/// `bothy-host supervise`: runs until SIGTERM or SIGINT. 78 when the start is
/// refused (configuration, not root, service user missing, no cgroup v2),
/// 1 when another supervise holds this runtime folder.
pub fn command(config_path: &Path) -> i32 {
    let config = match Config::load(config_path) {
        Ok(c) => c,
        Err(e) => {
            error!(
                code = "config_invalid",
                key = e.key().unwrap_or(""),
                "start refused"
            );
            return crate::EXIT_REFUSED_START;
        }
    };
    if !nix::unistd::geteuid().is_root() {
        error!(
            code = "supervise_not_root",
            "bothy-host supervise runs as root; start refused"
        );
        return crate::EXIT_REFUSED_START;
    }
    let mut supervisor = match Supervisor::start(config_path, &config.host_service) {
        Ok(s) => s,
        Err(StartError::Busy) => {
            // Issue 16 item 2: which folder, which process, and the key that
            // gives this configuration a folder of its own.
            let runtime_dir = &config.host_service.runtime_dir;
            let holder = manager::read_record(runtime_dir, &manager::supervise_record(runtime_dir))
                .map_or_else(|_| "unknown".to_owned(), |pid| pid.to_string());
            error!(
                code = "supervise_running",
                runtime_dir = %runtime_dir.display(),
                pid = %holder,
                "another supervise (PID {holder}) runs for the runtime folder {}: stop it, or give \
                 this configuration a folder of its own with host_service.runtime_dir",
                runtime_dir.display()
            );
            return 1;
        }
        Err(StartError::Refused(code, e)) => {
            error!(code, error = %e, "start refused");
            return crate::EXIT_REFUSED_START;
        }
    };
    supervisor.run()
}

#[derive(Debug)]
enum StartError {
    Busy,
    Refused(&'static str, io::Error),
}

fn refused(code: &'static str) -> impl FnOnce(io::Error) -> StartError {
    move |e| StartError::Refused(code, e)
}

struct Supervisor {
    exe: PathBuf,
    config_path: PathBuf,
    runtime_dir: PathBuf,
    _lock: Flock<File>,
    original: Cgroup,
    root: Cgroup,
    /// The owner of the endpoints; a reload keeps it.
    service_user: User,
    helpers: Vec<Unit>,
    service: Unit,
    /// A restart asked for by SIGHUP, with the configuration it read: applied
    /// once the service (and then every retiring helper) has ended.
    reload: Option<HostServiceConfig>,
    signals: SignalFd,
    dev_null: OwnedFd,
    /// The folder of `confirm.sock` (only with require_local_confirm).
    confirm_dir: Option<PathBuf>,
    /// SIGTERM or SIGINT arrived: nothing starts again.
    stopping: bool,
}

impl Supervisor {
    fn start(config_path: &Path, config: &HostServiceConfig) -> Result<Supervisor, StartError> {
        nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o022));
        let runtime_dir = config.runtime_dir.clone();
        for folder in [
            runtime_dir.clone(),
            runtime_dir.join("helper"),
            manager::pids_dir(&runtime_dir),
        ] {
            root_folder(&folder).map_err(refused("runtime_dir_unusable"))?;
        }
        let lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(lock_path(&runtime_dir))
            .map_err(refused("runtime_dir_unusable"))?;
        let lock =
            Flock::lock(lock, FlockArg::LockExclusiveNonblock).map_err(|_| StartError::Busy)?;
        // With the lock held no other supervise runs for this folder: a
        // record that is still there names one that ended without its
        // shutdown (D-332).
        let previous = manager::read_record(&runtime_dir, &manager::supervise_record(&runtime_dir));
        let previous_cgroup = manager::read_cgroup_record(&runtime_dir);
        write_record(&manager::supervise_record(&runtime_dir), std::process::id())
            .map_err(refused("runtime_dir_unusable"))?;

        let exe = std::env::current_exe().map_err(refused("binary_unknown"))?;
        let config_path = std::path::absolute(config_path).map_err(refused("config_invalid"))?;
        let service_user = User::from_name(&config.service_user)
            .map_err(|e| StartError::Refused("service_user_missing", e.into()))?
            .ok_or_else(|| {
                StartError::Refused("service_user_missing", io::ErrorKind::NotFound.into())
            })?;
        let service_credentials = Credentials {
            uid: service_user.uid.as_raw(),
            gid: service_user.gid.as_raw(),
            groups: Vec::new(),
        };

        // Orphans of the trees below (a session's `setsid` child whose shell
        // ended, a PTY whose helper died) become children of supervise, which
        // reaps them as an init would (D-137).
        if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
            warn!(code = "subreaper_unavailable", error = %e);
        }
        // Signals first, so no child's end is missed.
        let mut mask = SigSet::empty();
        for signal in [
            Signal::SIGCHLD,
            Signal::SIGTERM,
            Signal::SIGINT,
            Signal::SIGHUP,
        ] {
            mask.add(signal);
        }
        mask.thread_block()
            .map_err(|e| StartError::Refused("signals_unavailable", e.into()))?;
        let signals = SignalFd::with_flags(&mask, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)
            .map_err(|e| StartError::Refused("signals_unavailable", e.into()))?;
        let dev_null = OwnedFd::from(File::open("/dev/null").map_err(refused("dev_null_missing"))?);

        let original = Cgroup::own().map_err(refused("cgroup2_missing"))?;
        end_previous_tree(&runtime_dir, &original, previous, previous_cgroup);
        let root = original
            .create_child(&format!("bothy-host-{}", std::process::id()), false)
            .map_err(refused("cgroup_refused"))?;
        write_cgroup_record(&manager::supervise_cgroup_record(&runtime_dir), &root)
            .map_err(refused("runtime_dir_unusable"))?;
        let leaf = root
            .create_child("supervise", false)
            .map_err(refused("cgroup_refused"))?;
        leaf.add_process(std::process::id())
            .map_err(refused("cgroup_refused"))?;
        let service_cgroup = root.child("service");

        let helpers = new_helper_units(config, &[], &service_user, &root);

        let service = Unit {
            label: "service".to_owned(),
            kind: UnitKind::Service {
                credentials: service_credentials,
            },
            cgroup: service_cgroup,
            delegate_to: None,
            record: manager::service_record(&runtime_dir),
            pid: None,
            started: Instant::now(),
            restart_at: None,
            backoff: BACKOFF_BASE,
            kill_at: None,
            restart_now: false,
            retiring: false,
        };
        let mut supervisor = Supervisor {
            exe,
            config_path,
            runtime_dir,
            _lock: lock,
            original,
            root,
            service_user,
            helpers,
            service,
            reload: None,
            signals,
            dev_null,
            confirm_dir: config
                .require_local_confirm
                .then(crate::confirm::confirm_dir),
            stopping: false,
        };
        for i in 0..supervisor.helpers.len() {
            supervisor.start_helper(i);
        }
        supervisor.start_service();
        info!(code = "supervise_ready", helpers = supervisor.helpers.len());
        Ok(supervisor)
    }

    /// The main loop: signals, reaping, restarts.
    fn run(&mut self) -> i32 {
        loop {
            let timeout = self.next_deadline().map_or(PollTimeout::NONE, |at| {
                let wait = at.saturating_duration_since(Instant::now());
                // Round up, so the loop does not spin just before a deadline.
                let millis = wait.as_millis().saturating_add(1).min(60_000);
                PollTimeout::try_from(millis as u64).unwrap_or(PollTimeout::MAX)
            });
            let mut fds = [PollFd::new(self.signals.as_fd(), PollFlags::POLLIN)];
            match poll(&mut fds, timeout) {
                Ok(_) | Err(Errno::EINTR) => {}
                Err(e) => {
                    error!(code = "supervise_poll_failed", error = %e);
                    self.shutdown();
                    return 1;
                }
            }
            let mut stop = false;
            while let Ok(Some(info)) = self.signals.read_signal() {
                match Signal::try_from(info.ssi_signo as i32) {
                    Ok(Signal::SIGCHLD) => self.reap(),
                    Ok(Signal::SIGTERM | Signal::SIGINT) => stop = true,
                    Ok(Signal::SIGHUP) => self.request_restart(),
                    _ => {}
                }
            }
            // A SIGCHLD can merge with others; reap whatever has ended.
            self.reap();
            if stop {
                self.shutdown();
                return 0;
            }
            self.due();
            self.advance_reload();
        }
    }

    fn units_mut(&mut self) -> impl Iterator<Item = &mut Unit> {
        self.helpers
            .iter_mut()
            .chain(std::iter::once(&mut self.service))
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.helpers
            .iter()
            .chain(std::iter::once(&self.service))
            .flat_map(|u| [u.restart_at, u.kill_at])
            .flatten()
            .min()
    }

    /// Restarts that are due and stops that ran out of time.
    fn due(&mut self) {
        let now = Instant::now();
        for unit in self.units_mut() {
            if unit.kill_at.is_some_and(|at| at <= now) {
                if let Some(pid) = unit.pid {
                    warn!(code = "stop_timeout", unit = unit.label, "SIGKILL");
                    let _ = kill(pid, Signal::SIGKILL);
                }
                unit.kill_at = None;
            }
        }
        for i in 0..self.helpers.len() {
            if self.helpers[i].restart_at.is_some_and(|at| at <= now) {
                self.start_helper(i);
            }
        }
        // A pending reload starts the service itself, after the helpers.
        if self.reload.is_none() && self.service.restart_at.is_some_and(|at| at <= now) {
            self.start_service();
        }
    }

    /// Reaps every ended child and applies the restart rule.
    fn reap(&mut self) {
        loop {
            let status = match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) | Err(_) => return,
                Ok(status) => status,
            };
            let Some(pid) = status.pid() else { continue };
            if self.service.pid == Some(pid) {
                // RuntimeDirectory= goes with the service's end.
                self.remove_confirm_dir();
            }
            let stopping = self.stopping;
            {
                let Some(unit) = self.units_mut().find(|u| u.pid == Some(pid)) else {
                    continue;
                };
                unit.pid = None;
                unit.kill_at = None;
                let _ = fs::remove_file(&unit.record);
                // Like systemd for a unit: nothing of it outlives it.
                if let Err(e) = unit.cgroup.kill_and_remove(EMPTY_BOUND) {
                    warn!(code = "cgroup_not_emptied", unit = unit.label, error = %e);
                }
                let ran = unit.started.elapsed();
                let (code, signal) = match status {
                    WaitStatus::Exited(_, code) => (Some(code), None),
                    WaitStatus::Signaled(_, signal, _) => (None, Some(signal as i32)),
                    _ => (None, None),
                };
                let restart_now = std::mem::take(&mut unit.restart_now);
                // A helper is `Restart=always` (it never ends by itself, and
                // its own session user may end it: it comes back, D-330);
                // the service is `Restart=on-failure`. 78 stays down for both.
                let helper = unit.helper_name().is_some();
                let stays_down =
                    code == Some(crate::EXIT_REFUSED_START) || (code == Some(0) && !helper);
                if stopping || unit.retiring {
                    info!(code = "stopped", unit = unit.label, status = code, signal);
                } else if restart_now {
                    info!(code = "stopped_for_restart", unit = unit.label);
                } else if stays_down {
                    info!(
                        code = "exited",
                        unit = unit.label,
                        status = code,
                        "not restarted (0 or 78)"
                    );
                } else {
                    if ran >= BACKOFF_RESET {
                        unit.backoff = BACKOFF_BASE;
                    }
                    warn!(
                        code = "crashed",
                        unit = unit.label,
                        status = code,
                        signal,
                        backoff_ms = unit.backoff.as_millis() as u64,
                        "restart after backoff"
                    );
                    unit.restart_at = Some(Instant::now() + unit.backoff);
                    unit.backoff = (unit.backoff * 2).min(BACKOFF_CAP);
                }
            }
        }
    }

    /// SIGHUP: `daemon-reload` and a restart of the service (D-260). Reads
    /// the configuration again; when it is refused, nothing changes.
    fn request_restart(&mut self) {
        info!(code = "restart_requested");
        let config = match Config::load(&self.config_path) {
            Ok(c) => c.host_service,
            Err(e) => {
                error!(
                    code = "config_invalid",
                    key = e.key().unwrap_or(""),
                    "restart refused: the configuration does not decode; everything keeps running as it was"
                );
                return;
            }
        };
        let moved = if config.runtime_dir != self.runtime_dir {
            Some("host_service.runtime_dir")
        } else if config.service_user != self.service_user.name {
            Some("host_service.service_user")
        } else {
            None
        };
        if let Some(key) = moved {
            error!(
                code = "supervise_restart_needed",
                key,
                "restart refused: only a new bothy-host supervise takes this change over; everything keeps running as it was"
            );
            return;
        }
        // A later request replaces an earlier one that waits.
        self.reload = Some(config);
        self.service.restart_at = None;
        self.service.backoff = BACKOFF_BASE;
        if let Some(pid) = self.service.pid
            && !self.service.restart_now
        {
            self.service.restart_now = true;
            self.service.kill_at = Some(Instant::now() + STOP_TIMEOUT);
            let _ = kill(pid, Signal::SIGTERM);
        }
    }

    /// Carries a requested restart forward once the service has ended: the
    /// helpers of names no longer listed stop and go, then the helpers of new
    /// names start as at the start, then the service (D-260).
    fn advance_reload(&mut self) {
        if self.stopping || self.service.pid.is_some() {
            return;
        }
        let Some(config) = &self.reload else { return };
        let now = Instant::now();
        for unit in &mut self.helpers {
            let listed = unit
                .helper_name()
                .is_some_and(|name| config.session_users.iter().any(|u| u == name));
            if listed || unit.retiring {
                continue;
            }
            unit.retiring = true;
            unit.restart_at = None;
            if let UnitKind::Helper { endpoint, .. } = &unit.kind {
                // Nothing reaches the helper any more.
                let _ = fs::remove_file(endpoint);
            }
            if let Some(pid) = unit.pid {
                info!(
                    code = "helper_stopping",
                    unit = unit.label,
                    "no longer listed"
                );
                let _ = kill(pid, Signal::SIGTERM);
                unit.kill_at = Some(now + STOP_TIMEOUT);
            }
        }
        if self.helpers.iter().any(|u| u.retiring && u.pid.is_some()) {
            return;
        }
        let Some(config) = self.reload.take() else {
            return;
        };
        let before = self.helpers.len();
        self.helpers.retain(|unit| {
            if !unit.retiring {
                return true;
            }
            if let Err(e) = unit.cgroup.kill_and_remove(EMPTY_BOUND) {
                warn!(code = "cgroup_not_removed", unit = unit.label, error = %e);
            }
            let _ = fs::remove_file(&unit.record);
            info!(code = "helper_removed", unit = unit.label);
            false
        });
        let removed = before - self.helpers.len();
        let existing: Vec<String> = self
            .helpers
            .iter()
            .filter_map(|u| u.helper_name().map(str::to_owned))
            .collect();
        let added = new_helper_units(&config, &existing, &self.service_user, &self.root);
        let first_new = self.helpers.len();
        self.helpers.extend(added);
        // The labels follow the positions in the list read now.
        for unit in &mut self.helpers {
            if let Some(index) = unit
                .helper_name()
                .and_then(|name| config.session_users.iter().position(|u| u == name))
            {
                unit.label = format!("helper {index}");
            }
        }
        for i in first_new..self.helpers.len() {
            self.start_helper(i);
        }
        self.confirm_dir = config
            .require_local_confirm
            .then(crate::confirm::confirm_dir);
        info!(
            code = "reloaded",
            helpers = self.helpers.len(),
            added = self.helpers.len() - first_new,
            removed
        );
        self.start_service();
    }

    fn start_helper(&mut self, index: usize) {
        let mut env = Environment::new();
        env.set("PATH", HELPER_PATH);
        for (name, value) in std::env::vars_os() {
            if let Some(name) = name.to_str()
                && (name == "LANG" || name.starts_with("LC_") || name == crate::LOG_FILTER_ENV)
            {
                env.set(name, value);
            }
        }
        env.set("LISTEN_FDS", "1");
        let argv = vec![
            self.exe.clone().into_os_string(),
            OsString::from("pty-helper"),
        ];
        let exe = self.exe.clone();
        let dev_null = &self.dev_null;
        let unit = &mut self.helpers[index];
        let UnitKind::Helper {
            listener,
            credentials,
            ..
        } = &unit.kind
        else {
            return;
        };
        let started = start_unit(
            &exe,
            argv,
            &env,
            true,
            vec![
                (dev_null.as_fd(), 0),
                (std::io::stdout().as_fd(), 1),
                (std::io::stderr().as_fd(), 2),
                (listener.as_fd(), 3),
            ],
            credentials.clone(),
            &unit.cgroup,
            unit.delegate_to,
        );
        record_start(unit, started);
    }

    fn start_service(&mut self) {
        let mut env = Environment::new();
        for (name, value) in std::env::vars_os() {
            if let Some(name) = name.to_str()
                && (matches!(
                    name,
                    "PATH"
                        | "SSL_CERT_FILE"
                        | "HTTPS_PROXY"
                        | "https_proxy"
                        | "NO_PROXY"
                        | "no_proxy"
                        | crate::LOG_FILTER_ENV
                ) || name.starts_with("BOTHY_HOST_TEST_"))
            {
                env.set(name, value);
            }
        }
        env.set(manager::SUPERVISED_ENV, "1");
        let program = service_program(&self.exe);
        let argv = vec![
            program.clone().into_os_string(),
            OsString::from("--config"),
            self.config_path.clone().into_os_string(),
            OsString::from("run"),
        ];
        let UnitKind::Service { credentials } = &self.service.kind else {
            return;
        };
        if let Some(folder) = &self.confirm_dir
            && let Err(e) = runtime_directory(folder, credentials.uid, credentials.gid)
        {
            // The service then cannot open confirm.sock and denies every start.
            error!(code = "confirm_dir_unusable", error = %e);
        }
        let started = start_unit(
            &program,
            argv,
            &env,
            false,
            vec![
                (self.dev_null.as_fd(), 0),
                (std::io::stdout().as_fd(), 1),
                (std::io::stderr().as_fd(), 2),
            ],
            credentials.clone(),
            &self.service.cgroup,
            None,
        );
        record_start(&mut self.service, started);
    }

    /// Stops everything: the service first, then the helpers; removes the
    /// cgroups, endpoints and records.
    fn shutdown(&mut self) {
        info!(code = "supervise_stopping");
        self.stopping = true;
        for unit in self.units_mut() {
            unit.restart_at = None;
            unit.restart_now = false;
        }
        self.stop_and_wait(true);
        self.stop_and_wait(false);
        // Whatever is left in the subtree (the units' cgroups are empty now).
        if let Err(e) = self.original.add_process(std::process::id()) {
            warn!(code = "cgroup_not_left", error = %e);
        }
        if let Err(e) = self.root.kill_and_remove(EMPTY_BOUND) {
            warn!(code = "cgroup_not_removed", error = %e);
        }
        // The orphans that ended with the subtree.
        while let Ok(status) = waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
            if status == WaitStatus::StillAlive {
                break;
            }
        }
        for unit in &self.helpers {
            if let UnitKind::Helper { endpoint, .. } = &unit.kind {
                let _ = fs::remove_file(endpoint);
            }
            let _ = fs::remove_file(&unit.record);
        }
        let _ = fs::remove_file(&self.service.record);
        let _ = fs::remove_file(manager::supervise_cgroup_record(&self.runtime_dir));
        let _ = fs::remove_file(manager::supervise_record(&self.runtime_dir));
        self.remove_confirm_dir();
        info!(code = "supervise_stopped");
    }

    fn remove_confirm_dir(&self) {
        if let Some(folder) = &self.confirm_dir {
            match fs::remove_dir_all(folder) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => warn!(code = "confirm_dir_not_removed", error = %e),
            }
        }
    }

    /// SIGTERM to the service (`service`) or to every helper, SIGKILL after
    /// [`STOP_TIMEOUT`], until they are reaped.
    fn stop_and_wait(&mut self, service: bool) {
        let units: Vec<&mut Unit> = if service {
            vec![&mut self.service]
        } else {
            self.helpers.iter_mut().collect()
        };
        let deadline = Instant::now() + STOP_TIMEOUT;
        for unit in units {
            if let Some(pid) = unit.pid {
                let _ = kill(pid, Signal::SIGTERM);
                unit.kill_at = Some(deadline);
            }
        }
        loop {
            let running = if service {
                self.service.pid.is_some()
            } else {
                self.helpers.iter().any(|u| u.pid.is_some())
            };
            if !running {
                return;
            }
            let now = Instant::now();
            for unit in self.units_mut() {
                if let (Some(pid), Some(at)) = (unit.pid, unit.kill_at)
                    && at <= now
                {
                    let _ = kill(pid, Signal::SIGKILL);
                    unit.kill_at = None;
                }
            }
            let mut fds = [PollFd::new(self.signals.as_fd(), PollFlags::POLLIN)];
            let _ = poll(&mut fds, PollTimeout::from(100u8));
            while let Ok(Some(_)) = self.signals.read_signal() {}
            self.reap();
        }
    }
}
