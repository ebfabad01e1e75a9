//! cgroup v2 for the helper and for `bothy-host supervise` (6.5, DESIGN §4).
//!
//! The hierarchy is found from `/proc/self/mountinfo` (the mount of type
//! `cgroup2`; hybrid hosts mount it beside the v1 controllers) and the own
//! cgroup from the `0::` line of `/proc/self/cgroup`; no path is hard-coded.
//! Ending a cgroup writes `1` to `cgroup.kill` (Linux 5.14); where that file is
//! missing it sends SIGKILL to every PID in `cgroup.procs` until none is left.
//! Either way it then waits, with a bound, for `populated 0` in
//! `cgroup.events` and removes the folder.

use std::fs::{self, File};
use std::io::{self, ErrorKind};
use std::os::fd::OwnedFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long an end waits for the processes of a cgroup to be gone.
pub const EMPTY_BOUND: Duration = Duration::from_secs(10);

/// Pause between two looks at `cgroup.events` (a process-table fact).
const POLL_STEP: Duration = Duration::from_millis(5);

/// The mount point of the cgroup v2 hierarchy, from `/proc/self/mountinfo`.
pub fn cgroup2_mount() -> io::Result<PathBuf> {
    let text = fs::read_to_string("/proc/self/mountinfo")?;
    parse_cgroup2_mount(&text)
        .ok_or_else(|| io::Error::new(ErrorKind::NotFound, "no cgroup2 mount"))
}

/// The mount point of the first `cgroup2` entry of a mountinfo text.
pub fn parse_cgroup2_mount(mountinfo: &str) -> Option<PathBuf> {
    mountinfo.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let fstype = right.split(' ').next()?;
        if fstype != "cgroup2" {
            return None;
        }
        let mount_point = left.split(' ').nth(4)?;
        Some(PathBuf::from(unescape_octal(mount_point)))
    })
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape_octal(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && i + 3 < bytes.len()
            && bytes[i + 1..i + 4]
                .iter()
                .all(|b| (b'0'..=b'7').contains(b))
        {
            let value =
                (bytes[i + 1] - b'0') * 64 + (bytes[i + 2] - b'0') * 8 + (bytes[i + 3] - b'0');
            out.push(value);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The own cgroup (v2) of this process, e.g. `/system.slice/x.service`.
pub fn own_cgroup() -> io::Result<String> {
    let text = fs::read_to_string("/proc/self/cgroup")?;
    parse_own_cgroup(&text).ok_or_else(|| io::Error::new(ErrorKind::NotFound, "no cgroup v2 entry"))
}

/// The path of the `0::` line of a `/proc/<pid>/cgroup` text.
pub fn parse_own_cgroup(text: &str) -> Option<String> {
    text.lines()
        .find_map(|line| line.strip_prefix("0::"))
        .filter(|path| path.starts_with('/'))
        .map(str::to_owned)
}

/// A cgroup folder in the v2 hierarchy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cgroup {
    path: PathBuf,
}

impl Cgroup {
    /// The cgroup of this process.
    pub fn own() -> io::Result<Cgroup> {
        let mount = cgroup2_mount()?;
        let own = own_cgroup()?;
        Ok(Cgroup {
            path: mount.join(own.trim_start_matches('/')),
        })
    }

    /// A cgroup at a known folder.
    pub fn at(path: PathBuf) -> Cgroup {
        Cgroup { path }
    }

    /// Its folder.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The child `name` (not created).
    pub fn child(&self, name: &str) -> Cgroup {
        Cgroup {
            path: self.path.join(name),
        }
    }

    /// Creates the child `name`; an existing one is fine when `reuse`.
    pub fn create_child(&self, name: &str, reuse: bool) -> io::Result<Cgroup> {
        let child = self.child(name);
        match fs::create_dir(&child.path) {
            Ok(()) => Ok(child),
            Err(e) if reuse && e.kind() == ErrorKind::AlreadyExists => Ok(child),
            Err(e) => Err(e),
        }
    }

    /// Moves the process `pid` into this cgroup.
    pub fn add_process(&self, pid: u32) -> io::Result<()> {
        fs::write(self.path.join("cgroup.procs"), pid.to_string())
    }

    /// The folder opened for `clone3` with `CLONE_INTO_CGROUP`.
    pub fn open_dir(&self) -> io::Result<OwnedFd> {
        let file = File::options()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
            .open(&self.path)?;
        Ok(OwnedFd::from(file))
    }

    /// The PIDs in `cgroup.procs`.
    pub fn processes(&self) -> io::Result<Vec<i32>> {
        let text = fs::read_to_string(self.path.join("cgroup.procs"))?;
        Ok(text.lines().filter_map(|l| l.trim().parse().ok()).collect())
    }

    /// Whether a process lives in this cgroup or below (`cgroup.events`).
    pub fn populated(&self) -> io::Result<bool> {
        let text = fs::read_to_string(self.path.join("cgroup.events"))?;
        Ok(text.lines().any(|l| l == "populated 1"))
    }

    /// The child cgroups (names of the sub-folders).
    pub fn children(&self) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in fs::read_dir(&self.path)? {
            let entry = entry?;
            if entry.file_type()?.is_dir() {
                names.push(entry.file_name().to_string_lossy().into_owned());
            }
        }
        Ok(names)
    }

    /// Kills every process in this cgroup and below at once: writes `1` to
    /// `cgroup.kill`; on a kernel without it, sends SIGKILL to every PID of
    /// `cgroup.procs` (here and below) until none is left (at most
    /// [`EMPTY_BOUND`]).
    pub fn kill(&self) -> io::Result<()> {
        match fs::write(self.path.join("cgroup.kill"), "1") {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == ErrorKind::NotFound && self.path.is_dir() => {
                self.kill_each(Instant::now() + EMPTY_BOUND)
            }
            Err(e) => Err(e),
        }
    }

    /// [`Cgroup::kill`], then waits for `populated 0`, at most `bound`.
    pub fn kill_all(&self, bound: Duration) -> io::Result<()> {
        let deadline = Instant::now() + bound;
        self.kill()?;
        self.wait_empty(deadline)
    }

    /// The fallback of a kernel without `cgroup.kill`.
    fn kill_each(&self, deadline: Instant) -> io::Result<()> {
        loop {
            let mut found = false;
            for cgroup in self.subtree()? {
                for pid in cgroup.processes().unwrap_or_default() {
                    found = true;
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(pid),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
            }
            if !found {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(io::Error::new(ErrorKind::TimedOut, "cgroup not empty"));
            }
            std::thread::sleep(POLL_STEP);
        }
    }

    /// This cgroup and every cgroup below it, deepest first.
    fn subtree(&self) -> io::Result<Vec<Cgroup>> {
        let mut out = Vec::new();
        for name in self.children()? {
            out.extend(self.child(&name).subtree()?);
        }
        out.push(self.clone());
        Ok(out)
    }

    /// Waits until `cgroup.events` says `populated 0`.
    fn wait_empty(&self, deadline: Instant) -> io::Result<()> {
        loop {
            if !self.populated()? {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(io::Error::new(ErrorKind::TimedOut, "cgroup not empty"));
            }
            std::thread::sleep(POLL_STEP);
        }
    }

    /// Removes this cgroup and every cgroup below it (deepest first). They must
    /// hold no process.
    pub fn remove(&self) -> io::Result<()> {
        let deadline = Instant::now() + EMPTY_BOUND;
        for cgroup in self.subtree()? {
            loop {
                match fs::remove_dir(&cgroup.path) {
                    Ok(()) => break,
                    Err(e) if e.kind() == ErrorKind::NotFound => break,
                    // A process that just died can keep the cgroup busy briefly.
                    Err(e)
                        if e.raw_os_error() == Some(libc::EBUSY) && Instant::now() < deadline =>
                    {
                        std::thread::sleep(POLL_STEP);
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(())
    }

    /// Kills everything in this cgroup and below, then removes the folders.
    pub fn kill_and_remove(&self, bound: Duration) -> io::Result<()> {
        if !self.path.is_dir() {
            return Ok(());
        }
        self.kill_all(bound)?;
        self.remove()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn the_cgroup2_mount_is_found_among_v1_mounts() {
        let text = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
41 31 0:38 / /sys/fs/cgroup/un\\040ified rw,relatime - cgroup2 cgroup2 rw
";
        assert_eq!(
            parse_cgroup2_mount(text),
            Some(PathBuf::from("/sys/fs/cgroup/un ified"))
        );
        assert_eq!(
            parse_cgroup2_mount("1 2 0:1 / / rw - ext4 /dev/x rw\n"),
            None
        );
        assert_eq!(
            parse_cgroup2_mount("29 23 0:26 / /sys/fs/cgroup rw shared:4 - cgroup2 cgroup2 rw\n"),
            Some(PathBuf::from("/sys/fs/cgroup"))
        );
    }

    #[test]
    fn the_own_cgroup_is_the_v2_line() {
        let text = "4:memory:/x\n1:cpu:/\n0::/system.slice/bothy-host-helper@a.service\n";
        assert_eq!(
            parse_own_cgroup(text).as_deref(),
            Some("/system.slice/bothy-host-helper@a.service")
        );
        assert_eq!(parse_own_cgroup("1:name=systemd:/\n"), None);
    }

    #[test]
    fn this_machine_has_a_cgroup2_hierarchy() {
        let cgroup = Cgroup::own().unwrap();
        assert!(cgroup.path().join("cgroup.procs").is_file());
    }
}
