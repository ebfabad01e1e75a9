//! `bothy-host restart` (16-operations.md 4.4; 2.2 item 5): restarts the
//! running host service, which ends every session (6.2).
//!
//! Which service manager (D-136): when a `bothy-host supervise` holds the lock
//! of this configuration's `runtime_dir` (`supervise.lock`), the command sends
//! it SIGHUP and waits until the record `pids/service.pid` names a new process
//! — supervise restarts the service also after an exit 78, which is how a
//! refused start is started again once fixed (D-M2-42-14), and reads the
//! configuration again before, applying its session users to the helpers
//! (D-260). Otherwise, on a
//! host booted with systemd (`/run/systemd/system` exists), it runs
//! `systemctl restart bothy-host.service`. Neither: exit 1 with a message.

use std::fs::File;
use std::path::Path;
use std::time::{Duration, Instant};

use nix::fcntl::{Flock, FlockArg};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::config::Config;
use crate::manager;
use crate::supervise::lock_path;

/// How long the command waits for the new service process.
pub const RESTART_BOUND: Duration = Duration::from_secs(30);

/// Whether the host was booted with systemd (`sd_booted`).
pub fn systemd_booted() -> bool {
    Path::new("/run/systemd/system").is_dir()
}

/// `bothy-host restart`: 0 when the service was restarted.
pub fn command(config_path: &Path) -> i32 {
    let config = match Config::load(config_path) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("bothy-host restart: the configuration is invalid: {e}");
            return 1;
        }
    };
    let runtime_dir = &config.host_service.runtime_dir;
    match live_supervise(runtime_dir) {
        Ok(Some(pid)) => match restart_under_supervise(runtime_dir, pid, RESTART_BOUND) {
            Ok(new_pid) => {
                println!("bothy-host restart: the service runs again (PID {new_pid})");
                0
            }
            Err(message) => {
                eprintln!("bothy-host restart: {message}");
                1
            }
        },
        Ok(None) if systemd_booted() => {
            match std::process::Command::new("systemctl")
                .args(["restart", manager::SERVICE_UNIT])
                .status()
            {
                Ok(status) if status.success() => {
                    println!("bothy-host restart: {} restarted", manager::SERVICE_UNIT);
                    0
                }
                Ok(status) => {
                    eprintln!(
                        "bothy-host restart: systemctl restart {} failed ({status})",
                        manager::SERVICE_UNIT
                    );
                    1
                }
                Err(e) => {
                    eprintln!("bothy-host restart: systemctl could not run: {e}");
                    1
                }
            }
        }
        Ok(None) => {
            eprintln!(
                "bothy-host restart: no bothy-host supervise runs for {} and this host was not booted with systemd; nothing to restart",
                runtime_dir.display()
            );
            1
        }
        Err(message) => {
            eprintln!("bothy-host restart: {message}");
            1
        }
    }
}

/// The PID of the supervise that holds the lock of `runtime_dir`, if one runs.
pub fn live_supervise(runtime_dir: &Path) -> Result<Option<u32>, String> {
    let file = match File::open(lock_path(runtime_dir)) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot open the lock of supervise: {e}")),
    };
    match Flock::lock(file, FlockArg::LockSharedNonblock) {
        // Nobody holds it: no supervise runs (the lock is released on drop).
        Ok(_unlocked) => Ok(None),
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => {
            manager::read_record(runtime_dir, &manager::supervise_record(runtime_dir))
                .map(Some)
                .map_err(|e| format!("supervise runs, but its record cannot be used: {e}"))
        }
        Err((_, e)) => Err(format!("cannot probe the lock of supervise: {e}")),
    }
}

/// SIGHUP to supervise, then waits (at most `bound`) for a service process
/// other than the one before.
pub fn restart_under_supervise(
    runtime_dir: &Path,
    supervise_pid: u32,
    bound: Duration,
) -> Result<u32, String> {
    let record = manager::service_record(runtime_dir);
    let before = manager::read_record(runtime_dir, &record).ok();
    let pid = i32::try_from(supervise_pid)
        .map_err(|_| "the record of supervise is not a PID".to_owned())?;
    kill(Pid::from_raw(pid), Signal::SIGHUP)
        .map_err(|e| format!("cannot signal supervise (PID {supervise_pid}): {e}"))?;
    let deadline = Instant::now() + bound;
    loop {
        if let Ok(now) = manager::read_record(runtime_dir, &record)
            && Some(now) != before
        {
            return Ok(now);
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "supervise (PID {supervise_pid}) did not start the service within {} s; \
                 its log says why (config_invalid or supervise_restart_needed: a refused \
                 restart leaves everything running as it was, D-260)",
                bound.as_secs()
            ));
        }
        // Polling a process-table fact (the record) with a bound.
        std::thread::sleep(Duration::from_millis(10));
    }
}
