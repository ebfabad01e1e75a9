//! What the service manager reports (2.2 "PTY helper" item 3, D-M2-42-11): the
//! main PID of each helper, for the peer check of the local channel. Under
//! systemd it asks systemd; under `bothy-host supervise` it reads the record
//! that supervise keeps in `host_service.runtime_dir` (a folder of root).
//!
//! Which one (D-133): a service that `bothy-host supervise` started has
//! [`SUPERVISED_ENV`]`=1` in its environment (supervise builds that environment
//! from scratch, so nothing else sets it); it reads
//! `<runtime_dir>/pids/helper@<user>.pid`. Every other process asks systemd:
//! `systemctl show --property=MainPID --value bothy-host-helper@<user>.service`.
//!
//! A record counts only when it, `pids/` and `runtime_dir` belong to root and
//! are writable by no one else (the session users must not forge the PID the
//! peer check compares with).
//!
//! # Records of supervise
//! | Path | Content |
//! |---|---|
//! | `<runtime_dir>/supervise.pid` | the PID of supervise; it holds an exclusive `flock` on the file while it runs |
//! | `<runtime_dir>/pids/helper@<user>.pid` | the main PID of that helper, while it runs |
//! | `<runtime_dir>/pids/service.pid` | the PID of `bothy-host run`, while it runs |
//! | `<runtime_dir>/supervise.cgroup` | the cgroup of supervise's tree, `<path below the cgroup2 mount>/bothy-host-<PID of supervise>` |
//!
//! Each PID record is `<decimal PID>\n`, the cgroup record `<path>\n`, mode
//! 0644, written atomically (a temporary file renamed into place); a record
//! is removed when its process ends. After a supervise that ended without
//! its shutdown (`kill -9`), `supervise.pid` and `supervise.cgroup` still
//! name its tree, and the next supervise ends that tree before it starts
//! anything (D-332).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::channel::PeerExpectation;
use crate::config::HostServiceConfig;
use crate::doctor::HelperFault;

/// Set to `1` by `bothy-host supervise` in the environment of the service.
pub const SUPERVISED_ENV: &str = "BOTHY_HOST_SUPERVISED";

/// The systemd unit of the helper of `user`.
pub fn helper_unit(user: &str) -> String {
    format!("bothy-host-helper@{user}.service")
}

/// The systemd unit of the service.
pub const SERVICE_UNIT: &str = "bothy-host.service";

/// `<runtime_dir>/pids`.
pub fn pids_dir(runtime_dir: &Path) -> PathBuf {
    runtime_dir.join("pids")
}

/// `<runtime_dir>/pids/helper@<user>.pid`.
pub fn helper_record(runtime_dir: &Path, user: &str) -> PathBuf {
    pids_dir(runtime_dir).join(format!("helper@{user}.pid"))
}

/// `<runtime_dir>/pids/service.pid`.
pub fn service_record(runtime_dir: &Path) -> PathBuf {
    pids_dir(runtime_dir).join("service.pid")
}

/// `<runtime_dir>/supervise.pid`.
pub fn supervise_record(runtime_dir: &Path) -> PathBuf {
    runtime_dir.join("supervise.pid")
}

/// `<runtime_dir>/supervise.cgroup`.
pub fn supervise_cgroup_record(runtime_dir: &Path) -> PathBuf {
    runtime_dir.join("supervise.cgroup")
}

/// Why the service manager did not report a main PID.
#[derive(Debug, thiserror::Error)]
pub enum ManagerError {
    /// The helper does not run (no record, or MainPID 0).
    #[error("helper_not_running")]
    NotRunning,
    /// The session user does not exist.
    #[error("user_missing")]
    UserMissing,
    /// A record of supervise that others could have written, or that is not a PID.
    #[error("the record of the service manager is not trustworthy")]
    UntrustedRecord,
    /// No service manager answered (no systemctl, or it failed).
    #[error("no service manager reports the helper")]
    Unavailable(#[source] std::io::Error),
}

impl From<ManagerError> for HelperFault {
    /// A helper that does not run is unreachable; a PID that cannot be learnt
    /// leaves the peer unproven.
    fn from(error: ManagerError) -> HelperFault {
        match error {
            ManagerError::NotRunning | ManagerError::UserMissing => HelperFault::Unreachable,
            ManagerError::UntrustedRecord | ManagerError::Unavailable(_) => {
                HelperFault::PeerCheckUnavailable
            }
        }
    }
}

/// Whether this process was started by `bothy-host supervise`.
pub fn supervised() -> bool {
    std::env::var_os(SUPERVISED_ENV).is_some_and(|v| v == "1")
}

/// The main PID of the helper of `user` as the service manager reports it.
/// Blocking: reads a file, or runs `systemctl` (call it from
/// `spawn_blocking` in async code).
pub fn helper_main_pid(config: &HostServiceConfig, user: &str) -> Result<u32, ManagerError> {
    if supervised() {
        read_record(
            &config.runtime_dir,
            &helper_record(&config.runtime_dir, user),
        )
    } else {
        systemd_main_pid(&helper_unit(user))
    }
}

/// The user ID of `user` and the main PID of its helper: what
/// [`crate::channel::Channel::connect`] compares with. Blocking like
/// [`helper_main_pid`].
pub fn helper_expectation(
    config: &HostServiceConfig,
    user: &str,
) -> Result<PeerExpectation, ManagerError> {
    let uid = nix::unistd::User::from_name(user)
        .map_err(|e| ManagerError::Unavailable(e.into()))?
        .ok_or(ManagerError::UserMissing)?
        .uid
        .as_raw();
    let main_pid = helper_main_pid(config, user)?;
    Ok(PeerExpectation { uid, main_pid })
}

/// Reads a PID record of supervise after checking its owner and mode, and
/// those of the folders `runtime_dir` and `pids/` above it.
pub fn read_record(runtime_dir: &Path, record: &Path) -> Result<u32, ManagerError> {
    let text = read_trusted(runtime_dir, record)?;
    parse_pid(&text).ok_or(ManagerError::UntrustedRecord)
}

/// Reads `supervise.cgroup` like [`read_record`]: the path of supervise's
/// tree below the cgroup2 mount, absolute, without `.` or `..`.
pub fn read_cgroup_record(runtime_dir: &Path) -> Result<PathBuf, ManagerError> {
    let text = read_trusted(runtime_dir, &supervise_cgroup_record(runtime_dir))?;
    let line = text
        .strip_suffix('\n')
        .ok_or(ManagerError::UntrustedRecord)?;
    let plain = line.strip_prefix('/').is_some_and(|rest| {
        rest.split('/')
            .all(|part| !part.is_empty() && part != "." && part != ".." && !part.contains('\n'))
    });
    if !plain {
        return Err(ManagerError::UntrustedRecord);
    }
    Ok(PathBuf::from(line))
}

/// The text of a record of supervise whose owner and mode, and those of its
/// folders below `runtime_dir`, are root's and closed to others.
fn read_trusted(runtime_dir: &Path, record: &Path) -> Result<String, ManagerError> {
    for folder in [runtime_dir, &pids_dir(runtime_dir)] {
        if record.starts_with(folder) {
            trusted(folder)?;
        }
    }
    let metadata = match std::fs::symlink_metadata(record) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(ManagerError::NotRunning);
        }
        Err(e) => return Err(ManagerError::Unavailable(e)),
    };
    if !metadata.is_file() {
        return Err(ManagerError::UntrustedRecord);
    }
    trusted(record)?;
    match std::fs::read_to_string(record) {
        Ok(t) => Ok(t),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(ManagerError::NotRunning),
        Err(e) => Err(ManagerError::Unavailable(e)),
    }
}

/// `<decimal PID>\n`, nothing else, never 0.
fn parse_pid(text: &str) -> Option<u32> {
    let digits = text.strip_suffix('\n')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse::<u32>().ok().filter(|pid| *pid != 0)
}

/// Owned by root and writable by neither group nor others (no symlink).
fn trusted(path: &Path) -> Result<(), ManagerError> {
    let metadata = std::fs::symlink_metadata(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => ManagerError::NotRunning,
        _ => ManagerError::Unavailable(e),
    })?;
    if metadata.file_type().is_symlink() || metadata.uid() != 0 || metadata.mode() & 0o022 != 0 {
        return Err(ManagerError::UntrustedRecord);
    }
    Ok(())
}

/// `systemctl show --property=MainPID --value <unit>`.
fn systemd_main_pid(unit: &str) -> Result<u32, ManagerError> {
    let output = Command::new("systemctl")
        .args(["show", "--property=MainPID", "--value", unit])
        .env_clear()
        .output()
        .map_err(ManagerError::Unavailable)?;
    if !output.status.success() {
        return Err(ManagerError::Unavailable(std::io::Error::other(
            "systemctl show failed",
        )));
    }
    let text = String::from_utf8_lossy(&output.stdout);
    match text.trim().parse::<u32>() {
        Ok(0) => Err(ManagerError::NotRunning),
        Ok(pid) => Ok(pid),
        Err(_) => Err(ManagerError::Unavailable(std::io::Error::other(
            "systemctl printed no PID",
        ))),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn pid_records_are_strict() {
        assert_eq!(parse_pid("123\n"), Some(123));
        for bad in [
            "",
            "\n",
            "0\n",
            "123",
            "12 3\n",
            "-1\n",
            "+1\n",
            "1\n\n",
            "99999999999\n",
        ] {
            assert_eq!(parse_pid(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_cgroup_record_is_one_plain_absolute_path() {
        let dir = tempfile::tempdir().unwrap();
        let runtime = dir.path().join("run");
        std::fs::create_dir_all(&runtime).unwrap();
        std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o755)).unwrap();
        let record = supervise_cgroup_record(&runtime);
        assert!(matches!(
            read_cgroup_record(&runtime),
            Err(ManagerError::NotRunning)
        ));
        let write = |text: &str| {
            std::fs::write(&record, text).unwrap();
            std::fs::set_permissions(&record, std::fs::Permissions::from_mode(0o644)).unwrap();
        };
        write("/system.slice/x/bothy-host-42\n");
        assert_eq!(
            read_cgroup_record(&runtime).unwrap(),
            PathBuf::from("/system.slice/x/bothy-host-42")
        );
        for bad in [
            "/a/bothy-host-42",
            "relative/bothy-host-42\n",
            "/a/../bothy-host-42\n",
            "/a/./bothy-host-42\n",
            "/\n",
            "/a\n/b\n",
        ] {
            write(bad);
            assert!(
                matches!(
                    read_cgroup_record(&runtime),
                    Err(ManagerError::UntrustedRecord)
                ),
                "{bad:?}"
            );
        }
        write("/a/bothy-host-42\n");
        std::fs::set_permissions(&record, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(matches!(
            read_cgroup_record(&runtime),
            Err(ManagerError::UntrustedRecord)
        ));
    }

    #[test]
    fn a_record_counts_only_in_root_folders_closed_to_others() {
        // The tests run as root, so the files below belong to root.
        let dir = tempfile::tempdir().unwrap();
        let runtime = dir.path().join("run");
        std::fs::create_dir_all(pids_dir(&runtime)).unwrap();
        for folder in [&runtime, &pids_dir(&runtime)] {
            std::fs::set_permissions(folder, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let record = helper_record(&runtime, "alice");
        assert!(matches!(
            read_record(&runtime, &record),
            Err(ManagerError::NotRunning)
        ));
        std::fs::write(&record, "4242\n").unwrap();
        std::fs::set_permissions(&record, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(read_record(&runtime, &record).unwrap(), 4242);

        std::fs::set_permissions(&record, std::fs::Permissions::from_mode(0o664)).unwrap();
        assert!(matches!(
            read_record(&runtime, &record),
            Err(ManagerError::UntrustedRecord)
        ));
        std::fs::set_permissions(&record, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::set_permissions(pids_dir(&runtime), std::fs::Permissions::from_mode(0o777))
            .unwrap();
        assert!(matches!(
            read_record(&runtime, &record),
            Err(ManagerError::UntrustedRecord)
        ));
        std::fs::set_permissions(pids_dir(&runtime), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        std::os::unix::fs::chown(&record, Some(1), None).unwrap();
        assert!(matches!(
            read_record(&runtime, &record),
            Err(ManagerError::UntrustedRecord)
        ));
    }
}
