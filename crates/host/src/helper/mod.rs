//! The PTY helper (`bothy-host pty-helper`): one per session user, running as
//! that user, started by the service manager with the listening socket of its
//! channel endpoint (2.2 "Every PTY helper runs as its session user...", 6.5,
//! 11.1; DESIGN §4).
//!
//! At start, before any thread exists: `PR_SET_DUMPABLE` 0 (item 4: another
//! process of the same user may not attach or read its memory); the listening
//! socket from the service manager ([`crate::channel::peer`]); the move into
//! the leaf `<its cgroup>/helper`, which fails the start when the cgroup is
//! not delegated to it; every cgroup and stray process an earlier run left
//! in its subtree is ended ([`Helper::sweep`]). A
//! refused start exits [`crate::EXIT_REFUSED_START`] (78) with a log line that
//! names the code, so neither systemd nor supervise restarts it in a loop.
//!
//! Then it serves connections, each after the socketpair handover; the first
//! message chooses the role:
//! - [`ToHelper::Main`]: the main connection. It answers
//!   [`ToHelper::Checks`] through the doctor's side
//!   ([`crate::doctor::helper_side::helper_checks`]). A newer main connection
//!   replaces the older one, which is closed. Losing the main connection (or
//!   its replacement) ends every PTY of the helper with its tree (D-W-90); the
//!   helper then waits for the next connection.
//! - [`ToHelper::Start`]: a session connection ([`session`]), accepted only
//!   while a main connection lives (D-134).
//!
//! # Layout
//! - [`env`]: the session user, the environment from scratch, `/etc/shells`.
//! - [`profile`]: what each profile starts.
//! - [`pty`]: `clone3` into a cgroup, the PTY, exit codes.
//! - [`cgroup`]: cgroup v2: own cgroup, create, kill, wait, remove.
//! - `session`: one session connection: start, input, size, output, end.

use std::collections::HashSet;
use std::ffi::OsString;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::net::{UnixListener, UnixStream};
use tokio::sync::watch;
use tracing::{error, info, warn};

use crate::channel::link::{HelperLink, HelperReader, HelperWriter};
use crate::channel::peer;
use crate::channel::{FromHelper, ToHelper};
use crate::doctor::helper_side::{HelperState, helper_checks};

use self::cgroup::Cgroup;
use self::env::SessionUser;

pub mod cgroup;
pub mod env;
pub mod profile;
pub mod pty;
mod session;

/// The leaf the helper process itself lives in.
pub const HELPER_LEAF: &str = "helper";

/// Prefix of the cgroup of a session (`s-<session id>`).
pub const SESSION_PREFIX: &str = "s-";

/// `bothy-host pty-helper`: runs until killed; returns an exit code only when
/// the start is refused (78) or serving fails.
pub fn command() -> i32 {
    if let Err(e) = nix::sys::prctl::set_dumpable(false) {
        error!(code = "helper_unprotected", error = %e, "PR_SET_DUMPABLE failed; start refused");
        return crate::EXIT_REFUSED_START;
    }
    let listener = match peer::listener_from_service_manager() {
        Ok(l) => l,
        Err(e) => {
            error!(code = "listen_socket_missing", error = %e, "start refused");
            return crate::EXIT_REFUSED_START;
        }
    };
    let user = match SessionUser::current() {
        Ok(u) => u,
        Err(e) => {
            error!(code = "user_missing", error = %e, "start refused");
            return crate::EXIT_REFUSED_START;
        }
    };
    let base = match enter_cgroup() {
        Ok(base) => base,
        Err(e) => {
            error!(
                code = "cgroup_not_delegated",
                error = %e,
                "the helper may not create cgroups in its own cgroup (Delegate=yes); start refused"
            );
            return crate::EXIT_REFUSED_START;
        }
    };
    let helper = Arc::new(Helper::new(
        user,
        base,
        std::env::vars_os().collect(),
        HelperState::default(),
    ));
    // Whatever an earlier run of this helper left in its subtree ends now.
    helper.sweep();
    // One thread (D-705): the helper only moves bytes between its session
    // connections and their PTYs; checks and starts run on the blocking pool.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            error!(code = "runtime_failed", error = %e);
            return 1;
        }
    };
    runtime.block_on(async move {
        if let Err(e) = listener.set_nonblocking(true) {
            error!(code = "listen_socket_failed", error = %e);
            return 1;
        }
        match UnixListener::from_std(listener) {
            Ok(listener) => serve(listener, helper).await,
            Err(e) => {
                error!(code = "listen_socket_failed", error = %e);
                1
            }
        }
    })
}

/// Moves this process into `<its cgroup>/helper` and returns `<its cgroup>`,
/// under which the sessions' cgroups are made.
pub fn enter_cgroup() -> std::io::Result<Cgroup> {
    let base = Cgroup::own()?;
    let leaf = base.create_child(HELPER_LEAF, true)?;
    leaf.add_process(std::process::id())?;
    Ok(base)
}

/// The state of one helper process.
#[derive(Debug)]
pub struct Helper {
    user: SessionUser,
    base: Cgroup,
    helper_env: Vec<(OsString, OsString)>,
    state: Arc<Mutex<HelperState>>,
    main: Mutex<Option<MainSlot>>,
    next_main: AtomicU64,
    /// The cgroups (`s-<session id>`) of the sessions that are starting or
    /// running; every other cgroup of the subtree is swept ([`Helper::sweep`]).
    live: Mutex<HashSet<String>>,
}

/// A claimed session cgroup name (see [`Helper::claim`]).
#[derive(Debug)]
struct LiveClaim {
    helper: Arc<Helper>,
    name: String,
}

impl Drop for LiveClaim {
    fn drop(&mut self) {
        self.helper
            .live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.name);
    }
}

/// Kills and removes `cgroup` with everything below; 1 when it was there.
fn end_cgroup(cgroup: &Cgroup) -> usize {
    match cgroup.kill_and_remove(cgroup::EMPTY_BOUND) {
        Ok(()) => 1,
        Err(e) => {
            warn!(code = "stray_cgroup_not_removed", error = %e);
            0
        }
    }
}

/// Kills every process of the helper's leaf that is not in the helper's own
/// POSIX session, until none is left (at most [`cgroup::EMPTY_BOUND`]); how
/// many were killed.
fn end_strangers(leaf: &Cgroup) -> usize {
    let own = nix::unistd::getpid();
    let Ok(own_session) = nix::unistd::getsid(None) else {
        warn!(code = "helper_session_unknown");
        return 0;
    };
    let deadline = std::time::Instant::now() + cgroup::EMPTY_BOUND;
    let mut killed: HashSet<nix::unistd::Pid> = HashSet::new();
    loop {
        let strangers: Vec<nix::unistd::Pid> = leaf
            .processes()
            .unwrap_or_default()
            .into_iter()
            .map(nix::unistd::Pid::from_raw)
            .filter(|pid| *pid != own)
            // A process that is gone already has no session: nothing to do.
            .filter(|pid| nix::unistd::getsid(Some(*pid)).is_ok_and(|sid| sid != own_session))
            .collect();
        if strangers.is_empty() {
            return killed.len();
        }
        for pid in strangers {
            if nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).is_ok() {
                killed.insert(pid);
            }
        }
        if std::time::Instant::now() >= deadline {
            warn!(code = "escaped_processes_not_ended");
            return killed.len();
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// The live main connection: while its sender lives, sessions run.
#[derive(Debug)]
struct MainSlot {
    id: u64,
    alive: watch::Sender<()>,
}

impl Helper {
    /// A helper for `user` whose sessions' cgroups go under `base`.
    pub fn new(
        user: SessionUser,
        base: Cgroup,
        helper_env: Vec<(OsString, OsString)>,
        state: HelperState,
    ) -> Helper {
        Helper {
            user,
            base,
            helper_env,
            state: Arc::new(Mutex::new(state)),
            main: Mutex::new(None),
            next_main: AtomicU64::new(1),
            live: Mutex::new(HashSet::new()),
        }
    }

    /// Drops `claim` and sweeps the subtree ([`Helper::sweep`]) on a
    /// blocking thread: the last step of every end of a session whose
    /// processes ran.
    async fn release(self: &Arc<Self>, claim: LiveClaim) {
        drop(claim);
        let helper = Arc::clone(self);
        if tokio::task::spawn_blocking(move || helper.sweep())
            .await
            .is_err()
        {
            warn!(code = "sweep_failed");
        }
    }

    /// Claims the cgroup name of a session before its cgroup is made; the
    /// claim ends when the returned value is dropped (after the cgroup is
    /// removed).
    fn claim(self: &Arc<Self>, name: String) -> LiveClaim {
        self.live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name.clone());
        LiveClaim {
            helper: Arc::clone(self),
            name,
        }
    }

    /// Ends what escaped a session (6.5, D-331). The subtree of the helper
    /// belongs to its session user, so a process of a session can make a
    /// cgroup of its own in it, or move into the helper's leaf, and so leave
    /// the cgroup that `cgroup.kill` ends. Blocking; runs after every end of
    /// a session and at the start:
    /// - every cgroup of the subtree other than the leaf `helper` and the
    ///   cgroups of live sessions is killed and removed;
    /// - every cgroup below the leaf likewise;
    /// - in the leaf itself, every process outside the helper's own POSIX
    ///   session is killed: the helper's checks run there in its session,
    ///   and no process of a session can join it (each session starts with
    ///   `setsid`, and a process never enters an existing POSIX session of
    ///   another process).
    pub fn sweep(&self) {
        let mut ended = 0usize;
        let names = self.base.children().unwrap_or_default();
        for name in names.iter().filter(|n| n.as_str() != HELPER_LEAF) {
            let live = self
                .live
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .contains(name);
            if live {
                continue;
            }
            ended += end_cgroup(&self.base.child(name));
        }
        let leaf = self.base.child(HELPER_LEAF);
        for name in leaf.children().unwrap_or_default() {
            ended += end_cgroup(&leaf.child(&name));
        }
        ended += end_strangers(&leaf);
        if ended > 0 {
            info!(code = "escaped_processes_ended", count = ended);
        }
    }

    /// A receiver that fails (`changed()` returns an error) once the current
    /// main connection is gone; `None` when there is none.
    fn subscribe_main(&self) -> Option<watch::Receiver<()>> {
        self.main
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map(|slot| slot.alive.subscribe())
    }
}

/// Accepts connections for ever; each gets the handover and its own task.
pub async fn serve(listener: UnixListener, helper: Arc<Helper>) -> i32 {
    info!(code = "helper_ready");
    loop {
        let connection = match listener.accept().await {
            Ok((connection, _)) => connection,
            Err(e) => {
                match e.raw_os_error() {
                    Some(libc::EBADF | libc::EINVAL | libc::ENOTSOCK) => {
                        error!(code = "listen_socket_failed", error = %e);
                        return 1;
                    }
                    _ => warn!(code = "accept_failed", error = %e),
                }
                // Out of descriptors or memory: let the situation change.
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        let helper = helper.clone();
        tokio::spawn(async move {
            match peer::hand_over(connection).await {
                Ok(stream) => connection_task(helper, stream).await,
                Err(e) => warn!(code = "handover_failed", error = %e),
            }
        });
    }
}

async fn connection_task(helper: Arc<Helper>, stream: UnixStream) {
    let HelperLink { mut reader, writer } = HelperLink::new(stream);
    match reader.recv().await {
        Ok(Some(ToHelper::Main)) => main_connection(helper, reader, writer).await,
        Ok(Some(ToHelper::Start(start))) => session::run(helper, *start, reader, writer).await,
        Ok(Some(_)) => warn!(code = "channel_first_message_invalid"),
        Ok(None) => {}
        Err(e) => warn!(code = "channel_message_refused", error = %e),
    }
}

async fn main_connection(helper: Arc<Helper>, mut reader: HelperReader, mut writer: HelperWriter) {
    let id = helper.next_main.fetch_add(1, Ordering::Relaxed);
    let (alive, mut replaced) = watch::channel(());
    let previous = helper
        .main
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .replace(MainSlot { id, alive });
    if previous.is_some() {
        info!(code = "main_connection_replaced");
    }
    drop(previous);
    info!(code = "main_connection_open");
    loop {
        tokio::select! {
            // The sender of this slot was dropped: a newer main connection.
            changed = replaced.changed() => {
                if changed.is_err() {
                    break;
                }
            }
            message = reader.recv() => match message {
                Ok(Some(ToHelper::Checks(request))) => {
                    let state = helper.state.clone();
                    let answer = tokio::task::spawn_blocking(move || {
                        let mut state = state.lock().unwrap_or_else(PoisonError::into_inner);
                        helper_checks(&request, &mut state)
                    })
                    .await;
                    let Ok(answer) = answer else {
                        error!(code = "checks_failed");
                        break;
                    };
                    if writer.send(&FromHelper::CheckResults(answer)).await.is_err() {
                        break;
                    }
                }
                Ok(Some(_)) => {
                    warn!(code = "main_message_invalid");
                    break;
                }
                Ok(None) => break,
                Err(e) => {
                    warn!(code = "channel_message_refused", error = %e);
                    break;
                }
            }
        }
    }
    let mut slot = helper.main.lock().unwrap_or_else(PoisonError::into_inner);
    if slot.as_ref().is_some_and(|s| s.id == id) {
        // Dropping the sender ends every session of the helper.
        *slot = None;
        info!(code = "main_connection_lost");
    }
}
