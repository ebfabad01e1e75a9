//! The commands of the doctor:
//!
//! * `bothy-host doctor` ([`command`]): as root. With the service running the
//!   full run happens in the service (admin.sock, 2.2 "Output on the host";
//!   [`through_running_service`]). Without a running service the command
//!   checks by itself: the service side in this
//!   process (the service user's own `sudo -n true` in a probe as that user),
//!   each session user's part in a `doctor-probe` child that runs as that user.
//!   It prints per check the result and code and the names the output on the
//!   host may name, and exits 1 when a check failed (warnings alone: 0).
//! * `bothy-host doctor-probe --user NAME` ([`probe_command`]): started as root,
//!   it gives root up for NAME (its groups from the group database, then group
//!   and user IDs; getting root back must fail), protects its memory
//!   (`PR_SET_DUMPABLE` 0; it stops when that fails), reads one request on standard input and writes the
//!   answer of [`super::helper_side::helper_checks`] to standard output.
//! * `bothy-host login-probe NONCE` ([`super::hd6::login_probe_command`]): what
//!   the login shell of the HD6 probe `exec`s.

use std::ffi::CString;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::unistd::{Gid, Uid};

use super::accounts::UserEntry;
use super::helper_side::{HelperState, helper_checks};
use super::service_side::{Places, run_probe};
use super::wire::MAX_WIRE_BYTES;
use super::{Doctor, HelperFault, HelperPort, RunKind, Scope, ServiceContext};
use crate::config::{Config, HostServiceConfig};
use crate::state::StateDir;

pub use super::hd6::login_probe_command;

/// Exit code of `bothy-host doctor` when a check failed.
pub const EXIT_CHECK_FAILED: i32 = 1;
/// Exit code when the command cannot run (not root, no runtime).
pub const EXIT_CANNOT_RUN: i32 = 2;

/// Reaches each session user's part through a `doctor-probe` child running as
/// that user. Real processes, so also the integration tests' way to the
/// helper side.
#[derive(Debug, Clone)]
pub struct ProbePort {
    program: PathBuf,
    timeout: Duration,
}

impl ProbePort {
    /// Probes with `program` (the `bothy-host` binary), each bounded by the
    /// configured timeouts: the check of the entries and four runs of
    /// `claude auth status`-sized steps, plus a margin.
    pub fn new(program: PathBuf, config: &HostServiceConfig) -> ProbePort {
        let timeout =
            config.entry_scan_timeout + config.auth_status_timeout * 6 + Duration::from_secs(30);
        ProbePort { program, timeout }
    }
}

impl HelperPort for ProbePort {
    fn checks(
        &self,
        user: &str,
        request: Vec<u8>,
    ) -> impl std::future::Future<Output = Result<Vec<u8>, HelperFault>> + Send {
        let program = self.program.clone();
        let user = user.to_owned();
        let timeout = self.timeout;
        async move {
            tokio::task::spawn_blocking(move || run_probe(&program, &user, &request, timeout))
                .await
                .ok()
                .flatten()
                .ok_or(HelperFault::Unreachable)
        }
    }
}

/// `bothy-host doctor` (module docs).
pub fn command(config_path: &Path) -> i32 {
    if !Uid::effective().is_root() {
        eprintln!("bothy-host doctor: run it as root");
        return EXIT_CANNOT_RUN;
    }
    let config = match Config::load(config_path) {
        Ok(config) => config.host_service,
        Err(e) => {
            eprintln!("bothy-host doctor: config_invalid: {e}");
            return crate::EXIT_REFUSED_START;
        }
    };
    if let Some(code) = through_running_service(&config) {
        return code;
    }
    let Ok(program) = std::env::current_exe() else {
        eprintln!("bothy-host doctor: the own binary cannot be found");
        return EXIT_CANNOT_RUN;
    };
    let state = StateDir::new(&config.state_dir, None);
    // An unreadable state directory leaves the declaration unknown and the
    // former users unnamed; the checks themselves still run (HD4 judges it).
    let declaration = state.load_declaration().ok().flatten();
    let server_url = state.load_pairing().ok().flatten().map(|p| p.server_url);
    let former: Vec<String> = state
        .load_bindings()
        .map(|b| {
            b.into_keys()
                .filter(|n| !config.session_users.contains(n))
                .collect()
        })
        .unwrap_or_default();
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        eprintln!("bothy-host doctor: no runtime");
        return EXIT_CANNOT_RUN;
    };
    let places = Places {
        service_probe: Some(program.clone()),
        ..Places::default()
    };
    let mut doctor = Doctor::with_places(places);
    let port = ProbePort::new(program, &config);
    let ctx = ServiceContext {
        config: &config,
        config_path: Some(config_path),
        declaration,
        server_url: server_url.as_deref(),
        control_peer: None,
        former_session_users: former,
    };
    runtime.block_on(doctor.run(&ctx, &port, RunKind::Full, Scope::All));
    let mut out = std::io::stdout().lock();
    for line in doctor.local_output() {
        let _ = writeln!(out, "{line}");
    }
    let _ = out.flush();
    if doctor.entries().iter().any(|e| !e.ok) {
        EXIT_CHECK_FAILED
    } else {
        0
    }
}

/// The way through a running service (2.2 "Output on the host"): when the
/// service answers on `admin.sock`, the full run happens there and this
/// returns the exit code; `None` when no service answers, and the command
/// checks by itself.
pub fn through_running_service(config: &HostServiceConfig) -> Option<i32> {
    let answer = crate::admin::doctor_answer::ask_doctor(&config.state_dir)?;
    Some(crate::admin::doctor_answer::print_answer(&answer))
}

/// Why a probe could not become its user.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DropError {
    /// No such user.
    #[error("no such user")]
    NoUser,
    /// A system call refused.
    #[error("the change of user failed")]
    Failed,
    /// Root could be regained after the change.
    #[error("root was not given up")]
    StillRoot,
    /// Not root and not that user.
    #[error("the probe runs as another user")]
    WrongUser,
}

/// Gives root up for `user`: its groups, then group and user IDs (real,
/// effective, saved). Safe system calls only (nix).
pub fn become_user(user: &str) -> Result<UserEntry, DropError> {
    let entry = UserEntry::lookup(user)
        .ok()
        .flatten()
        .ok_or(DropError::NoUser)?;
    let uid = Uid::from_raw(entry.uid);
    let gid = Gid::from_raw(entry.gid);
    if !Uid::effective().is_root() {
        return if Uid::current() == uid && Uid::effective() == uid {
            Ok(entry)
        } else {
            Err(DropError::WrongUser)
        };
    }
    let name = CString::new(entry.name.as_str()).map_err(|_| DropError::NoUser)?;
    nix::unistd::initgroups(&name, gid).map_err(|_| DropError::Failed)?;
    nix::unistd::setresgid(gid, gid, gid).map_err(|_| DropError::Failed)?;
    nix::unistd::setresuid(uid, uid, uid).map_err(|_| DropError::Failed)?;
    let ids = nix::unistd::getresuid().map_err(|_| DropError::Failed)?;
    if ids.real != uid || ids.effective != uid || ids.saved != uid {
        return Err(DropError::Failed);
    }
    if entry.uid != 0 && nix::unistd::setuid(Uid::from_raw(0)).is_ok() {
        return Err(DropError::StillRoot);
    }
    Ok(entry)
}

/// `bothy-host doctor-probe --user NAME` (module docs).
pub fn probe_command(user: &str) -> i32 {
    if let Err(e) = become_user(user) {
        eprintln!("bothy-host doctor-probe: {e}");
        return EXIT_CANNOT_RUN;
    }
    // The probe runs the helper's checks as the user, beside that user's
    // other processes: without PR_SET_DUMPABLE 0 they could attach to it and
    // forge its answer (2.2 "PTY helper" item 4), so a failure ends it before
    // it reads the request. No test makes this call fail: on Linux
    // prctl(PR_SET_DUMPABLE, 0) fails only for an argument other than 0 or 1
    // (EINVAL), which this call never passes; the check stays so that a
    // kernel or seccomp filter that refuses it fails closed.
    if let Err(e) = nix::sys::prctl::set_dumpable(false) {
        eprintln!("bothy-host doctor-probe: PR_SET_DUMPABLE failed ({e}); the probe does not run");
        return EXIT_CANNOT_RUN;
    }
    let mut request = Vec::new();
    let limit = u64::try_from(MAX_WIRE_BYTES).unwrap_or(u64::MAX) + 1;
    if std::io::stdin()
        .lock()
        .take(limit)
        .read_to_end(&mut request)
        .is_err()
    {
        return EXIT_CANNOT_RUN;
    }
    let mut state = HelperState::one_shot();
    let answer = helper_checks(&request, &mut state);
    let mut out = std::io::stdout().lock();
    if out.write_all(&answer).and_then(|()| out.flush()).is_err() {
        return EXIT_CANNOT_RUN;
    }
    0
}
