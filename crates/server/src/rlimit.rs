//! The limit of open files (`RLIMIT_NOFILE`): every connection is a file
//! descriptor, and the soft limit many systems start a process with (1024)
//! is far below what a server holds. At start the soft limit is raised to
//! the hard one, as nginx (`worker_rlimit_nofile`) and OpenSSH's sshd raise
//! theirs, and the figure is logged (docs/decisions.md D-351). The hard
//! limit is the operator's (`LimitNOFILE=` of systemd); a server that cannot
//! raise it works on with the soft limit it has.

use nix::sys::resource::{Resource, getrlimit, setrlimit};

/// The open-files limits after [`raise_open_files`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenFiles {
    /// The soft limit, which the kernel enforces.
    pub soft: u64,
    /// The hard limit, the ceiling of the soft one.
    pub hard: u64,
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit and logs the figure;
/// `None` (logged) when the limits cannot be read or changed.
pub fn raise_open_files() -> Option<OpenFiles> {
    let (soft, hard) = match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok(limits) => limits,
        Err(error) => {
            tracing::warn!(%error, "cannot read the limit of open files");
            return None;
        }
    };
    if soft < hard {
        if let Err(error) = setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            tracing::warn!(%error, soft, hard, "cannot raise the limit of open files");
            return Some(OpenFiles { soft, hard });
        }
    }
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
    tracing::info!(open_files = soft, hard, "limit of open files");
    Some(OpenFiles { soft, hard })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The soft limit is lowered first (below the hard one), then raised by
    /// the function to the hard limit.
    #[test]
    fn the_soft_limit_is_raised_to_the_hard_one() {
        let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        let lower = hard.min(4096).saturating_sub(1).max(64);
        setrlimit(Resource::RLIMIT_NOFILE, lower, hard).unwrap();
        assert_eq!(getrlimit(Resource::RLIMIT_NOFILE).unwrap().0, lower);
        let raised = raise_open_files().unwrap();
        assert_eq!(raised, OpenFiles { soft: hard, hard });
        let limits = std::fs::read_to_string("/proc/self/limits").unwrap();
        let line = limits
            .lines()
            .find(|line| line.starts_with("Max open files"))
            .unwrap();
        let figures: Vec<&str> = line.split_whitespace().skip(3).take(2).collect();
        assert_eq!(figures, [hard.to_string(), hard.to_string()], "{line}");
    }
}
