//! Starting processes straight into a cgroup: the PTY of a session (6.5) and,
//! for `bothy-host supervise`, the helpers and the service with their
//! privileges dropped.
//!
//! One primitive, [`clone_exec`]: `clone3` with `CLONE_INTO_CGROUP` (and
//! `CLONE_PIDFD`), so the child exists only inside its cgroup and no user code
//! ever runs outside it; a kernel that refuses either flag fails the start.
//! Everything the child needs (C strings, argument and environment arrays,
//! groups) is prepared before the clone; between clone and `execve` the child
//! makes only raw system calls, which are async-signal-safe and need no lock
//! of the (multi-threaded) parent: signals back to their defaults and unblocked,
//! `setsid` and `TIOCSCTTY`, the descriptors moved into place and every other
//! one closed at exec, `setgroups`/`setresgid`/`setresuid` as raw system calls
//! (the libc wrappers would try to reach the parent's other threads), the
//! parent-death signal when asked for (after the change of user, which
//! clears it), `chdir`,
//! `LISTEN_PID` written into a prepared buffer, `execve`. A failure in the
//! child travels as stage and errno through a close-on-exec pipe, so the start
//! fails with its cause instead of a child that exits 127.
//!
//! [`spawn`] builds a PTY session on it: `posix_openpt`, the size, the peer
//! opened with `TIOCGPTPEER` (no path lookup), the child in its own POSIX
//! session with the PTY as controlling terminal on 0, 1 and 2.

#![allow(unsafe_code)]

use std::ffi::{CString, OsStr, OsString, c_char, c_int};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use bothy_proto::frame::TerminalSize;
use nix::errno::Errno;
use nix::fcntl::OFlag;
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use uuid::Uuid;
use zeroize::Zeroize;

use super::env::Environment;

/// What the PTY of a session runs: the public primitive the profiles (and the
/// doctor's claude starts) build.
#[derive(Debug)]
pub struct SpawnSpec {
    /// The absolute program `execve` runs.
    pub program: PathBuf,
    /// `argv[0]` (for a login shell `-` and the base name).
    pub argv0: OsString,
    /// The arguments after `argv[0]`.
    pub args: Vec<OsString>,
    /// The whole environment (built from scratch, [`super::env`]).
    pub env: Environment,
    /// The working directory.
    pub cwd: PathBuf,
    /// The size of the PTY at start.
    pub size: TerminalSize,
    /// The session (the cgroup `s-<session id>`).
    pub session_id: Uuid,
}

/// The user, group and supplementary groups a child takes before `execve`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credentials {
    /// User ID (real, effective and saved).
    pub uid: u32,
    /// Group ID (real, effective and saved).
    pub gid: u32,
    /// Supplementary groups (empty clears them).
    pub groups: Vec<u32>,
}

/// The POSIX session of a child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionMode {
    /// The session of the parent.
    Keep,
    /// A new session (`setsid`) without a controlling terminal.
    New,
    /// A new session whose controlling terminal is descriptor 0 (a PTY).
    NewWithTerminal,
}

/// Everything about one child of [`clone_exec`].
#[derive(Debug)]
pub struct ExecPlan<'a> {
    /// The absolute program.
    pub program: &'a Path,
    /// The whole argument vector, `argv[0]` first.
    pub argv: Vec<OsString>,
    /// The environment.
    pub env: &'a Environment,
    /// `LISTEN_PID=<the child's own PID>` is added (socket activation).
    pub listen_pid: bool,
    /// The working directory, if it changes.
    pub cwd: Option<&'a Path>,
    /// Descriptors of the parent and the number each gets in the child (at
    /// most [`MAX_MAPPED_FDS`]); every other descriptor is closed at exec.
    pub fds: Vec<(BorrowedFd<'a>, RawFd)>,
    /// The POSIX session.
    pub session: SessionMode,
    /// Privileges to drop to (the parent is root), if any.
    pub credentials: Option<Credentials>,
    /// The cgroup folder the child is created in.
    pub cgroup: BorrowedFd<'a>,
    /// The signal the child gets when the thread that started it ends
    /// (`PR_SET_PDEATHSIG`, set after the change of user, which clears it);
    /// a child whose parent already ended before that exits at once. Only
    /// for a caller whose calling thread lives as long as the process
    /// (supervise's single thread), never from a pool thread.
    pub parent_death_signal: Option<c_int>,
}

/// Largest number of descriptors an [`ExecPlan`] maps.
pub const MAX_MAPPED_FDS: usize = 8;

/// A started child.
#[derive(Debug)]
pub struct Child {
    /// Its PID.
    pub pid: u32,
    /// Its pidfd: readable once it exited; `waitid(P_PIDFD)` reaps it.
    pub pidfd: OwnedFd,
}

/// Where in the child a start failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Stage {
    /// Resetting signal dispositions and the mask.
    Signals = 1,
    /// `setsid`.
    Session = 2,
    /// `TIOCSCTTY`.
    ControllingTerminal = 3,
    /// Moving descriptors into place.
    Descriptors = 4,
    /// `setgroups`.
    Groups = 5,
    /// `setresgid`.
    Gid = 6,
    /// `setresuid`.
    Uid = 7,
    /// `chdir`.
    Chdir = 8,
    /// `execve`.
    Exec = 9,
    /// `PR_SET_PDEATHSIG`, or the parent ended before it was set.
    ParentDeath = 10,
}

impl Stage {
    fn from_u8(value: u8) -> Option<Stage> {
        Some(match value {
            1 => Stage::Signals,
            2 => Stage::Session,
            3 => Stage::ControllingTerminal,
            4 => Stage::Descriptors,
            5 => Stage::Groups,
            6 => Stage::Gid,
            7 => Stage::Uid,
            8 => Stage::Chdir,
            9 => Stage::Exec,
            10 => Stage::ParentDeath,
            _ => return None,
        })
    }
}

/// Why a child did not start.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    /// The kernel refused `clone3` with `CLONE_INTO_CGROUP` and `CLONE_PIDFD`.
    #[error("clone3 into the cgroup refused: {0}")]
    Clone(Errno),
    /// The child failed before `execve` succeeded.
    #[error("the child failed at {stage:?}: {errno}")]
    Child {
        /// The step that failed.
        stage: Stage,
        /// Its error.
        errno: Errno,
    },
    /// A program, argument or folder with a NUL byte, or too many descriptors.
    #[error("the start cannot be expressed: {0}")]
    Invalid(&'static str),
    /// Preparing failed (pipe, PTY).
    #[error("preparing the start failed: {0}")]
    Io(#[from] io::Error),
}

impl From<Errno> for SpawnError {
    fn from(errno: Errno) -> Self {
        SpawnError::Io(errno.into())
    }
}

/// `struct clone_args` of `linux/sched.h` (`CLONE_ARGS_SIZE_VER2`, 88 bytes).
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

const CLONE_PIDFD: u64 = 0x1000;
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;
const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
/// Room for `LISTEN_PID=` and the digits of any PID.
const LISTEN_PID_PREFIX: &[u8] = b"LISTEN_PID=";
const LISTEN_PID_ENTRY: usize = 32;
/// One above the highest signal number of Linux (`_NSIG` is 64).
const NSIG: c_int = 65;

/// C strings that are wiped when dropped (the environment may hold a key).
struct SecretStrings(Vec<CString>);

impl Drop for SecretStrings {
    fn drop(&mut self) {
        for string in self.0.drain(..) {
            string.into_bytes_with_nul().zeroize();
        }
    }
}

fn c_string(bytes: &[u8], what: &'static str) -> Result<CString, SpawnError> {
    CString::new(bytes).map_err(|_| SpawnError::Invalid(what))
}

/// Everything the child reads, prepared before the clone.
struct Prepared {
    program: CString,
    argv_ptrs: Vec<*const c_char>,
    envp_ptrs: Vec<*const c_char>,
    listen_pid: Option<*mut u8>,
    cwd: Option<CString>,
    fds: [(RawFd, RawFd); MAX_MAPPED_FDS],
    fd_count: usize,
    high: RawFd,
    fd_limit: RawFd,
    session: SessionMode,
    credentials: Option<(libc::uid_t, libc::gid_t)>,
    groups: Vec<libc::gid_t>,
    default_action: libc::sigaction,
    empty_mask: libc::sigset_t,
    /// The signal and the PID of the parent (this process).
    parent_death: Option<(c_int, libc::pid_t)>,
}

/// Starts the child of `plan` inside its cgroup. Safe to call from any thread
/// of a multi-threaded process.
pub fn clone_exec(plan: &ExecPlan<'_>) -> Result<Child, SpawnError> {
    if plan.fds.len() > MAX_MAPPED_FDS {
        return Err(SpawnError::Invalid("too many descriptors"));
    }
    let program = c_string(plan.program.as_os_str().as_bytes(), "program")?;
    let argv: Vec<CString> = plan
        .argv
        .iter()
        .map(|a| c_string(a.as_bytes(), "argument"))
        .collect::<Result<_, _>>()?;
    let env = SecretStrings(
        plan.env
            .entries()
            .filter(|e| !(plan.listen_pid && e.starts_with(LISTEN_PID_PREFIX)))
            .map(|e| c_string(e, "environment"))
            .collect::<Result<_, _>>()?,
    );
    let mut listen_pid_entry = [0u8; LISTEN_PID_ENTRY];
    listen_pid_entry[..LISTEN_PID_PREFIX.len()].copy_from_slice(LISTEN_PID_PREFIX);
    let cwd = plan
        .cwd
        .map(|c| c_string(c.as_os_str().as_bytes(), "working directory"))
        .transpose()?;

    let mut argv_ptrs: Vec<*const c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    argv_ptrs.push(std::ptr::null());
    let mut envp_ptrs: Vec<*const c_char> = env.0.iter().map(|e| e.as_ptr()).collect();
    let listen_pid = if plan.listen_pid {
        envp_ptrs.push(listen_pid_entry.as_ptr().cast());
        Some(listen_pid_entry.as_mut_ptr())
    } else {
        None
    };
    envp_ptrs.push(std::ptr::null());

    let mut fds = [(-1, -1); MAX_MAPPED_FDS];
    for (slot, (source, target)) in fds.iter_mut().zip(&plan.fds) {
        *slot = (source.as_raw_fd(), *target);
    }
    let high = plan.fds.iter().map(|(_, t)| *t).max().unwrap_or(2).max(2) + 1;
    let fd_limit = nix::unistd::sysconf(nix::unistd::SysconfVar::OPEN_MAX)
        .ok()
        .flatten()
        .map_or(1024, |max| max.clamp(1024, 1 << 16) as RawFd);

    // SAFETY: an all-zero `sigaction` is a valid value: handler SIG_DFL, empty
    // mask, no flags.
    let default_action: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: `sigemptyset` initialises the set it is given; a zeroed set is
    // valid storage for it.
    let empty_mask = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        set
    };

    let prepared = Prepared {
        program,
        argv_ptrs,
        envp_ptrs,
        listen_pid,
        cwd,
        fds,
        fd_count: plan.fds.len(),
        high,
        fd_limit,
        session: plan.session,
        credentials: plan.credentials.as_ref().map(|c| (c.uid, c.gid)),
        groups: plan
            .credentials
            .as_ref()
            .map(|c| c.groups.clone())
            .unwrap_or_default(),
        default_action,
        empty_mask,
        parent_death: plan
            .parent_death_signal
            .map(|signal| (signal, nix::unistd::getpid().as_raw())),
    };

    let (report_read, report_write) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
    let mut pidfd: c_int = -1;
    let mut args = CloneArgs {
        flags: CLONE_PIDFD | CLONE_INTO_CGROUP,
        pidfd: std::ptr::addr_of_mut!(pidfd) as u64,
        exit_signal: libc::SIGCHLD as u64,
        cgroup: plan.cgroup.as_raw_fd() as u64,
        ..CloneArgs::default()
    };
    // SAFETY: `args` is a valid `clone_args` of the size passed; without
    // CLONE_VM the child gets a copy of this address space (fork semantics),
    // so stack 0 is correct. The child runs only `child`, which makes raw
    // system calls on memory prepared above and never returns.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            std::ptr::addr_of_mut!(args),
            std::mem::size_of::<CloneArgs>(),
        )
    };
    if ret == 0 {
        child(&prepared, report_write.as_raw_fd());
    }
    if ret < 0 {
        return Err(SpawnError::Clone(Errno::last()));
    }
    drop(report_write);
    // SAFETY: with CLONE_PIDFD the kernel stored a new descriptor in `pidfd`
    // for this process; nothing else owns it.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    let pid = u32::try_from(ret).map_err(|_| SpawnError::Clone(Errno::EINVAL))?;
    drop(env);
    listen_pid_entry.zeroize();

    let mut report = [0u8; 5];
    let mut filled = 0;
    while filled < report.len() {
        match nix::unistd::read(&report_read, &mut report[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(Errno::EINTR) => continue,
            Err(errno) => return Err(errno.into()),
        }
    }
    if filled == 0 {
        return Ok(Child { pid, pidfd });
    }
    // The child failed and exited: reap it.
    let _ = nix::sys::wait::waitid(
        nix::sys::wait::Id::PIDFd(pidfd.as_fd()),
        nix::sys::wait::WaitPidFlag::WEXITED,
    );
    let stage = Stage::from_u8(report[0]).unwrap_or(Stage::Exec);
    let errno = Errno::from_raw(i32::from_be_bytes([
        report[1], report[2], report[3], report[4],
    ]));
    Err(SpawnError::Child { stage, errno })
}

/// The child between `clone3` and `execve`. Only raw system calls on prepared
/// memory; never returns.
fn child(p: &Prepared, report: RawFd) -> ! {
    // SAFETY (whole function): every call is a thin system call wrapper that
    // is async-signal-safe and takes no lock; every pointer points into
    // `Prepared`, which this child's copy of the address space still holds.
    unsafe {
        let fail = |stage: Stage, report: RawFd| -> ! {
            let errno = *libc::__errno_location();
            let mut message = [0u8; 5];
            message[0] = stage as u8;
            message[1..].copy_from_slice(&errno.to_be_bytes());
            libc::write(report, message.as_ptr().cast(), message.len());
            libc::_exit(127);
        };

        for signal in 1..NSIG {
            if signal != libc::SIGKILL && signal != libc::SIGSTOP {
                // Fails for the signals libc keeps for itself; that is fine.
                libc::sigaction(signal, &p.default_action, std::ptr::null_mut());
            }
        }
        if libc::sigprocmask(libc::SIG_SETMASK, &p.empty_mask, std::ptr::null_mut()) != 0 {
            fail(Stage::Signals, report);
        }

        if p.session != SessionMode::Keep && libc::setsid() < 0 {
            fail(Stage::Session, report);
        }

        // Move the report pipe and every source above the targets first, so
        // no dup2 below overwrites a descriptor still needed.
        let report = libc::fcntl(report, libc::F_DUPFD_CLOEXEC, p.high);
        if report < 0 {
            libc::_exit(127);
        }
        let mapped = &p.fds[..p.fd_count];
        let mut moved = [-1 as RawFd; MAX_MAPPED_FDS];
        for (slot, (source, _)) in moved.iter_mut().zip(mapped) {
            *slot = libc::fcntl(*source, libc::F_DUPFD_CLOEXEC, p.high);
            if *slot < 0 {
                fail(Stage::Descriptors, report);
            }
        }
        for (source, (_, target)) in moved.iter().zip(mapped) {
            if libc::dup2(*source, *target) < 0 {
                fail(Stage::Descriptors, report);
            }
        }
        for fd in 0..p.high {
            if !mapped.iter().any(|(_, target)| *target == fd) {
                libc::close(fd);
            }
        }
        if libc::syscall(
            libc::SYS_close_range,
            p.high as libc::c_uint,
            libc::c_uint::MAX,
            CLOSE_RANGE_CLOEXEC,
        ) != 0
        {
            for fd in p.high..p.fd_limit {
                libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
            }
        }

        if p.session == SessionMode::NewWithTerminal && libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
            fail(Stage::ControllingTerminal, report);
        }

        if let Some((uid, gid)) = p.credentials {
            if libc::syscall(libc::SYS_setgroups, p.groups.len(), p.groups.as_ptr()) != 0 {
                fail(Stage::Groups, report);
            }
            if libc::syscall(libc::SYS_setresgid, gid, gid, gid) != 0 {
                fail(Stage::Gid, report);
            }
            if libc::syscall(libc::SYS_setresuid, uid, uid, uid) != 0 {
                fail(Stage::Uid, report);
            }
        }

        // After the change of user: a change of the effective IDs clears
        // the parent-death signal.
        if let Some((signal, parent)) = p.parent_death {
            if libc::prctl(libc::PR_SET_PDEATHSIG, signal as libc::c_ulong, 0, 0, 0) != 0 {
                fail(Stage::ParentDeath, report);
            }
            // The parent ended before the signal was armed: it would never
            // come, so the child goes now.
            if libc::syscall(libc::SYS_getppid) as libc::pid_t != parent {
                *libc::__errno_location() = libc::ESRCH;
                fail(Stage::ParentDeath, report);
            }
        }

        if let Some(cwd) = &p.cwd
            && libc::chdir(cwd.as_ptr()) != 0
        {
            fail(Stage::Chdir, report);
        }

        if let Some(entry) = p.listen_pid {
            let mut pid = libc::syscall(libc::SYS_getpid) as u64;
            let mut digits = [0u8; 20];
            let mut n = 0;
            loop {
                digits[n] = b'0' + (pid % 10) as u8;
                n += 1;
                pid /= 10;
                if pid == 0 {
                    break;
                }
            }
            let mut at = LISTEN_PID_PREFIX.len();
            while n > 0 {
                n -= 1;
                *entry.add(at) = digits[n];
                at += 1;
            }
            *entry.add(at) = 0;
        }

        libc::execve(
            p.program.as_ptr(),
            p.argv_ptrs.as_ptr(),
            p.envp_ptrs.as_ptr(),
        );
        fail(Stage::Exec, report)
    }
}

impl AsRawFd for Child {
    /// The pidfd (readable once the child exited).
    fn as_raw_fd(&self) -> RawFd {
        self.pidfd.as_raw_fd()
    }
}

/// The master of a PTY registered with the tokio reactor.
pub fn register_master(master: OwnedFd) -> io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: an `OwnedFd` is open for its whole life and always returns the
    // same descriptor; the `AsyncFd` owns it until it is dropped.
    unsafe { AsyncFd::register_with_interest(master, Interest::READABLE | Interest::WRITABLE) }
        .map_err(|e| e.into_parts().1)
}

/// A child's pidfd registered with the tokio reactor (readable once it exited).
pub fn register_child(child: Child) -> io::Result<AsyncFd<Child>> {
    // SAFETY: the pidfd is an `OwnedFd` inside `child`, open for its whole
    // life; `Child::as_raw_fd` always returns it.
    unsafe { AsyncFd::register_with_interest(child, Interest::READABLE) }
        .map_err(|e| e.into_parts().1)
}

/// A running PTY: the master side and the session leader.
#[derive(Debug)]
pub struct Pty {
    /// The master side, non-blocking and close-on-exec.
    pub master: OwnedFd,
    /// The first process of the session.
    pub child: Child,
}

/// Opens a PTY of `spec.size` and starts `spec` on it, inside the cgroup
/// `cgroup` (the folder `s-<session id>`), in its own POSIX session with the
/// PTY as controlling terminal.
pub fn spawn(spec: &SpawnSpec, cgroup: BorrowedFd<'_>) -> Result<Pty, SpawnError> {
    let master = nix::pty::posix_openpt(OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC)?;
    nix::pty::grantpt(&master)?;
    nix::pty::unlockpt(&master)?;
    let master = OwnedFd::from(master);
    set_size(&master, spec.size)?;
    // SAFETY: TIOCGPTPEER takes open flags and returns a new descriptor of the
    // peer (or -1); the master stays open for the call.
    let slave = unsafe {
        libc::ioctl(
            master.as_raw_fd(),
            libc::TIOCGPTPEER,
            libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
        )
    };
    if slave < 0 {
        return Err(SpawnError::Io(io::Error::last_os_error()));
    }
    // SAFETY: the ioctl just returned this new descriptor; nothing else owns it.
    let slave = unsafe { OwnedFd::from_raw_fd(slave) };

    let mut argv = Vec::with_capacity(spec.args.len() + 1);
    argv.push(spec.argv0.clone());
    argv.extend(spec.args.iter().cloned());
    let plan = ExecPlan {
        program: &spec.program,
        argv,
        env: &spec.env,
        listen_pid: false,
        cwd: Some(&spec.cwd),
        fds: vec![(slave.as_fd(), 0), (slave.as_fd(), 1), (slave.as_fd(), 2)],
        session: SessionMode::NewWithTerminal,
        credentials: None,
        cgroup,
        // A session ends with its cgroup, never with a thread of the helper.
        parent_death_signal: None,
    };
    let child = clone_exec(&plan)?;
    drop(slave);
    let flags = nix::fcntl::fcntl(&master, nix::fcntl::FcntlArg::F_GETFL)?;
    nix::fcntl::fcntl(
        &master,
        nix::fcntl::FcntlArg::F_SETFL(OFlag::from_bits_truncate(flags) | OFlag::O_NONBLOCK),
    )?;
    Ok(Pty { master, child })
}

/// Sets the size of the PTY (`TIOCSWINSZ` on the master).
pub fn set_size(master: &impl AsFd, size: TerminalSize) -> io::Result<()> {
    let winsize = libc::winsize {
        ws_row: size.rows(),
        ws_col: size.columns(),
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads one `winsize` from the pointer, which is valid
    // for the call; the descriptor is open (borrowed).
    let ret = unsafe {
        libc::ioctl(
            master.as_fd().as_raw_fd(),
            libc::TIOCSWINSZ,
            std::ptr::addr_of!(winsize),
        )
    };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The exit status of 5.4: the status, or 128 plus the signal number.
pub fn exit_code(status: nix::sys::wait::WaitStatus) -> Option<i32> {
    use nix::sys::wait::WaitStatus;
    match status {
        WaitStatus::Exited(_, code) => Some(code),
        WaitStatus::Signaled(_, signal, _) => Some(128 + signal as i32),
        _ => None,
    }
}

/// Reaps an exited child through its pidfd (blocks until it exited).
pub fn reap(child: &Child) -> Option<i32> {
    loop {
        match nix::sys::wait::waitid(
            nix::sys::wait::Id::PIDFd(child.pidfd.as_fd()),
            nix::sys::wait::WaitPidFlag::WEXITED,
        ) {
            Ok(status) => return exit_code(status),
            Err(Errno::EINTR) => continue,
            Err(_) => return None,
        }
    }
}

/// Reaps the child if it has exited, without blocking: `None` while it runs.
pub fn try_reap(child: &Child) -> Option<Option<i32>> {
    match nix::sys::wait::waitid(
        nix::sys::wait::Id::PIDFd(child.pidfd.as_fd()),
        nix::sys::wait::WaitPidFlag::WEXITED | nix::sys::wait::WaitPidFlag::WNOHANG,
    ) {
        Ok(nix::sys::wait::WaitStatus::StillAlive) => None,
        Ok(status) => Some(exit_code(status)),
        Err(_) => Some(None),
    }
}

/// `-` plus the base name of `shell`: `argv[0]` of a login shell (login(1)).
pub fn login_argv0(shell: &Path) -> OsString {
    let mut argv0 = OsString::from("-");
    argv0.push(shell.file_name().unwrap_or(OsStr::new("sh")));
    argv0
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::helper::cgroup::Cgroup;
    use std::io::Read;

    /// A throw-away cgroup under this test process's own cgroup.
    fn scratch_cgroup(tag: &str) -> Cgroup {
        let own = Cgroup::own().unwrap();
        own.create_child(&format!("bothy-unit-{tag}-{}", std::process::id()), false)
            .unwrap()
    }

    fn read_all(master: &OwnedFd) -> Vec<u8> {
        // Blocking reads until EIO (every slave closed).
        let flags = nix::fcntl::fcntl(master, nix::fcntl::FcntlArg::F_GETFL).unwrap();
        nix::fcntl::fcntl(
            master,
            nix::fcntl::FcntlArg::F_SETFL(OFlag::from_bits_truncate(flags) & !OFlag::O_NONBLOCK),
        )
        .unwrap();
        let mut file = std::fs::File::from(master.try_clone().unwrap());
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match file.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(_) => break,
            }
        }
        out
    }

    #[test]
    fn a_pty_child_runs_in_its_cgroup_session_and_environment() {
        let cgroup = scratch_cgroup("pty");
        let mut env = Environment::new();
        env.set("ONLY", "this");
        let spec = SpawnSpec {
            program: PathBuf::from("/bin/sh"),
            argv0: OsString::from("-sh"),
            args: vec![
                "-c".into(),
                "echo \"$0|$ONLY|$(cat /proc/self/cgroup | grep ^0::)|$(ps -o sid= -p $$)|$$\"; \
                 stty size; ls /proc/self/fd | wc -l"
                    .into(),
            ],
            env,
            cwd: PathBuf::from("/"),
            size: TerminalSize::new(91, 27).unwrap(),
            session_id: Uuid::nil(),
        };
        let dir = cgroup.open_dir().unwrap();
        let pty = spawn(&spec, dir.as_fd()).unwrap();
        let output = String::from_utf8_lossy(&read_all(&pty.master)).into_owned();
        assert_eq!(reap(&pty.child), Some(0), "{output}");
        let first = output.lines().next().unwrap().trim().to_owned();
        let fields: Vec<&str> = first.split('|').collect();
        assert_eq!(fields[0], "-sh", "{output}");
        assert_eq!(fields[1], "this");
        assert!(
            fields[2].ends_with(&format!("bothy-unit-pty-{}", std::process::id())),
            "{output}"
        );
        // Its own POSIX session: the session ID is its PID.
        assert_eq!(fields[3].trim(), fields[4].trim(), "{output}");
        assert!(output.contains("27 91"), "{output}");
        // 0, 1 and 2, plus the folder `ls` reads: nothing of the parent leaked.
        assert_eq!(output.lines().nth(2).map(str::trim), Some("4"), "{output}");
        cgroup.remove().unwrap();
    }

    #[test]
    fn a_failing_exec_or_chdir_is_reported_with_its_stage() {
        let cgroup = scratch_cgroup("fail");
        let dir = cgroup.open_dir().unwrap();
        let env = Environment::new();
        let plan = |program: &'static str, cwd: Option<&'static Path>| ExecPlan {
            program: Path::new(program),
            argv: vec!["x".into()],
            env: &env,
            listen_pid: false,
            cwd,
            fds: Vec::new(),
            session: SessionMode::New,
            credentials: None,
            cgroup: dir.as_fd(),
            parent_death_signal: None,
        };
        match clone_exec(&plan("/nonexistent/program", None)) {
            Err(SpawnError::Child { stage, errno }) => {
                assert_eq!(stage, Stage::Exec);
                assert_eq!(errno, Errno::ENOENT);
            }
            other => panic!("{other:?}"),
        }
        match clone_exec(&plan("/bin/true", Some(Path::new("/nonexistent")))) {
            Err(SpawnError::Child { stage, .. }) => assert_eq!(stage, Stage::Chdir),
            other => panic!("{other:?}"),
        }
        cgroup.remove().unwrap();
    }

    #[test]
    fn a_cgroup_that_is_not_a_cgroup_fails_the_clone() {
        let dir = tempfile::tempdir().unwrap();
        let folder = std::fs::File::open(dir.path()).unwrap();
        let env = Environment::new();
        let plan = ExecPlan {
            program: Path::new("/bin/true"),
            argv: vec!["true".into()],
            env: &env,
            listen_pid: false,
            cwd: None,
            fds: Vec::new(),
            session: SessionMode::Keep,
            credentials: None,
            cgroup: folder.as_fd(),
            parent_death_signal: None,
        };
        assert!(matches!(clone_exec(&plan), Err(SpawnError::Clone(_))));
    }

    #[test]
    fn exit_codes_follow_5_4() {
        use nix::sys::signal::Signal;
        use nix::sys::wait::WaitStatus;
        use nix::unistd::Pid;
        let pid = Pid::from_raw(1);
        assert_eq!(exit_code(WaitStatus::Exited(pid, 3)), Some(3));
        assert_eq!(
            exit_code(WaitStatus::Signaled(pid, Signal::SIGKILL, false)),
            Some(137)
        );
        assert_eq!(exit_code(WaitStatus::StillAlive), None);
        assert_eq!(login_argv0(Path::new("/bin/bash")), OsString::from("-bash"));
    }
}
