//! The units supervise keeps running: a PTY helper per session user and the
//! service, how each starts in a fresh cgroup, and the records of their PIDs
//! and cgroups.

use super::*;

/// One process supervise keeps running.
#[derive(Debug)]
pub(super) struct Unit {
    /// What the logs call it (no user names: `helper 0`, `service`).
    pub(super) label: String,
    pub(super) kind: UnitKind,
    /// Its cgroup, made anew before every start (D-137).
    pub(super) cgroup: Cgroup,
    /// Who the cgroup is delegated to (a helper's session user).
    pub(super) delegate_to: Option<(u32, u32)>,
    pub(super) record: PathBuf,
    pub(super) pid: Option<Pid>,
    pub(super) started: Instant,
    pub(super) restart_at: Option<Instant>,
    pub(super) backoff: Duration,
    /// A stop was asked for (SIGHUP restart): SIGKILL at this instant.
    pub(super) kill_at: Option<Instant>,
    /// Stopped for a restart (SIGHUP): not restarted by the rule of
    /// `Restart=`; the reload starts it.
    pub(super) restart_now: bool,
    /// A helper whose session user is no longer listed: it stops and goes.
    pub(super) retiring: bool,
}

impl Unit {
    /// The session user of a helper.
    pub(super) fn helper_name(&self) -> Option<&str> {
        match &self.kind {
            UnitKind::Helper { name, .. } => Some(name),
            UnitKind::Service { .. } => None,
        }
    }
}

#[derive(Debug)]
pub(super) enum UnitKind {
    Helper {
        /// The session user (never logged: the labels are numbers).
        name: String,
        listener: OwnedFd,
        endpoint: PathBuf,
        credentials: Credentials,
    },
    Service {
        credentials: Credentials,
    },
}

/// The service's program: this binary (or, in test builds only, the stand-in
/// named by [`TEST_SERVICE_PROGRAM_ENV`]).
pub(super) fn service_program(exe: &Path) -> PathBuf {
    crate::seams::path(TEST_SERVICE_PROGRAM_ENV).unwrap_or_else(|| exe.to_owned())
}

pub(super) fn record_start(unit: &mut Unit, started: io::Result<u32>) {
    unit.restart_at = None;
    unit.started = Instant::now();
    match started {
        Ok(pid) => {
            unit.pid = Some(Pid::from_raw(pid as i32));
            if let Err(e) = write_record(&unit.record, pid) {
                error!(code = "record_not_written", unit = unit.label, error = %e);
            }
            info!(code = "started", unit = unit.label, pid);
        }
        Err(e) => {
            error!(code = "start_failed", unit = unit.label, error = %e, "restart after backoff");
            unit.restart_at = Some(Instant::now() + unit.backoff);
            unit.backoff = (unit.backoff * 2).min(BACKOFF_CAP);
        }
    }
}

#[allow(clippy::too_many_arguments)]
pub(super) fn start_unit(
    program: &Path,
    argv: Vec<OsString>,
    env: &Environment,
    listen_pid: bool,
    fds: Vec<(std::os::fd::BorrowedFd<'_>, i32)>,
    credentials: Credentials,
    cgroup: &Cgroup,
    delegate_to: Option<(u32, u32)>,
) -> io::Result<u32> {
    fresh_cgroup(cgroup, delegate_to)?;
    let dir = cgroup.open_dir()?;
    let plan = ExecPlan {
        program,
        argv,
        env,
        listen_pid,
        cwd: Some(Path::new("/")),
        fds,
        session: SessionMode::New,
        credentials: Some(credentials),
        cgroup: dir.as_fd(),
        // The unit dies with supervise (its only thread starts it), so a
        // crash of supervise leaves no service holding the control
        // connection (3.4, D-332).
        parent_death_signal: Some(libc::SIGKILL),
    };
    let child = clone_exec(&plan).map_err(io::Error::other)?;
    // Supervise reaps with waitpid; the pidfd is not needed.
    drop(child.pidfd);
    Ok(child.pid)
}

/// The units of every name of `config.session_users` that has none among
/// `existing` — the one path of the start and of a reload. A duplicate and a
/// name without an account are skipped and logged (the doctor reports HD1),
/// as is a helper whose endpoint or cgroup cannot be set up.
pub(super) fn new_helper_units(
    config: &HostServiceConfig,
    existing: &[String],
    service_user: &User,
    root: &Cgroup,
) -> Vec<Unit> {
    let mut units = Vec::new();
    let mut seen: Vec<&str> = Vec::new();
    for (index, name) in config.session_users.iter().enumerate() {
        if seen.contains(&name.as_str()) {
            warn!(code = "session_user_duplicate", index, "helper skipped");
            continue;
        }
        seen.push(name);
        if existing.iter().any(|e| e == name) {
            continue;
        }
        let user = match User::from_name(name) {
            Ok(Some(u)) => u,
            _ => {
                warn!(code = "user_missing", index, "helper skipped");
                continue;
            }
        };
        match helper_unit(index, name, &user, config, service_user, root) {
            Ok(unit) => units.push(unit),
            Err(e) => error!(code = "helper_setup_failed", index, error = %e, "helper skipped"),
        }
    }
    units
}

/// Sets up the endpoint and the cgroup of one helper.
pub(super) fn helper_unit(
    index: usize,
    name: &str,
    user: &User,
    config: &HostServiceConfig,
    service_user: &User,
    root: &Cgroup,
) -> io::Result<Unit> {
    let endpoint = config.helper_endpoint(name);
    let listener = bind_endpoint(&endpoint, service_user)?;
    let cgroup = root.child(&format!("helper@{name}"));
    let c_name = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let groups = nix::unistd::getgrouplist(&c_name, user.gid)?
        .into_iter()
        .map(|g| g.as_raw())
        .collect();
    Ok(Unit {
        label: format!("helper {index}"),
        kind: UnitKind::Helper {
            name: name.to_owned(),
            listener,
            endpoint,
            credentials: Credentials {
                uid: user.uid.as_raw(),
                gid: user.gid.as_raw(),
                groups,
            },
        },
        cgroup,
        delegate_to: Some((user.uid.as_raw(), user.gid.as_raw())),
        record: manager::helper_record(&config.runtime_dir, name),
        pid: None,
        started: Instant::now(),
        restart_at: None,
        backoff: BACKOFF_BASE,
        kill_at: None,
        restart_now: false,
        retiring: false,
    })
}

/// Makes the cgroup of a unit anew (an old one is killed and removed first):
/// after `cgroup.kill` on a cgroup, this kernel kills every child cloned into
/// it with `CLONE_INTO_CGROUP` (D-137). With `delegate_to`, what
/// `Delegate=yes` does: the folder and the files a delegate needs belong to
/// that user.
pub(super) fn fresh_cgroup(cgroup: &Cgroup, delegate_to: Option<(u32, u32)>) -> io::Result<()> {
    cgroup.kill_and_remove(EMPTY_BOUND)?;
    fs::create_dir(cgroup.path())?;
    if let Some((uid, gid)) = delegate_to {
        std::os::unix::fs::chown(cgroup.path(), Some(uid), Some(gid))?;
        for file in ["cgroup.procs", "cgroup.threads", "cgroup.subtree_control"] {
            std::os::unix::fs::chown(cgroup.path().join(file), Some(uid), Some(gid))?;
        }
    }
    Ok(())
}

/// Ends the tree of a supervise that ended without its shutdown (a crash,
/// `kill -9`; D-332): its units died with it (parent-death signal), but what
/// their sessions started, or a unit that outlived it anyway, may still run
/// in its cgroup. `previous` is the PID its record names, `previous_cgroup`
/// the cgroup its record names; the cgroup counts only when its name is
/// `bothy-host-<that PID>`. The same name below this supervise's own cgroup
/// is tried as well (a record written by an older version lacks the cgroup).
/// Then the PID records of its units go.
pub(super) fn end_previous_tree(
    runtime_dir: &Path,
    original: &Cgroup,
    previous: Result<u32, manager::ManagerError>,
    previous_cgroup: Result<PathBuf, manager::ManagerError>,
) {
    let pid = match previous {
        Ok(pid) => pid,
        Err(manager::ManagerError::NotRunning) => return,
        Err(e) => {
            warn!(code = "previous_record_untrusted", error = %e, "the previous tree is not looked for");
            return;
        }
    };
    let name = format!("bothy-host-{pid}");
    let mut trees = Vec::new();
    match (previous_cgroup, crate::helper::cgroup::cgroup2_mount()) {
        (Ok(path), Ok(mount)) if path.file_name().is_some_and(|n| *n == *name) => {
            trees.push(Cgroup::at(
                mount.join(path.strip_prefix("/").unwrap_or(&path)),
            ));
        }
        (Ok(_), _) => warn!(code = "previous_cgroup_record_mismatch"),
        _ => {}
    }
    trees.push(original.child(&name));
    let mut ended = false;
    for tree in trees {
        if !tree.path().is_dir() {
            continue;
        }
        match tree.kill_and_remove(EMPTY_BOUND) {
            Ok(()) => ended = true,
            Err(e) => error!(code = "previous_tree_not_ended", error = %e),
        }
    }
    if ended {
        warn!(
            code = "previous_tree_ended",
            "the tree of a supervise that ended without its shutdown was ended"
        );
    }
    if let Ok(entries) = fs::read_dir(manager::pids_dir(runtime_dir)) {
        for entry in entries.flatten() {
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// Writes `<path of cgroup below the cgroup2 mount>\n` to `path` like
/// [`write_record`].
pub(super) fn write_cgroup_record(path: &Path, cgroup: &Cgroup) -> io::Result<()> {
    let mount = crate::helper::cgroup::cgroup2_mount()?;
    let below = cgroup
        .path()
        .strip_prefix(&mount)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "cgroup outside its mount"))?;
    let text = format!("/{}\n", below.display());
    write_text(path, text.as_bytes())
}

/// Writes `<pid>\n` to `path` atomically with mode 0644.
pub fn write_record(path: &Path, pid: u32) -> io::Result<()> {
    write_text(path, format!("{pid}\n").as_bytes())
}

/// Writes `bytes` to `path` atomically with mode 0644.
pub(super) fn write_text(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let temporary = path.with_extension("tmp");
    let _ = fs::remove_file(&temporary);
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&temporary)?;
    file.write_all(bytes)?;
    file.set_permissions(fs::Permissions::from_mode(0o644))?;
    drop(file);
    fs::rename(&temporary, path)
}
