//! `bothy-host install` (2.2 "PTY helper" item 1, 16-operations.md 4.4,
//! D-M2-42-14, DESIGN §4; `docs/decisions.md` D-190–D-192, D-194): as root,
//! makes the host ready for the host service, and says what it did.
//!
//! 1. The configuration file: read when it exists (never overwritten); else a
//!    skeleton with `service_user`, `state_dir` and `session_users` from the
//!    command line (root's, mode 0644, its folder root's with mode 0755).
//! 2. Checks before any change: the names (HD1), existing accounts (user ID 0,
//!    forbidden groups of HD2), an existing state directory (a folder of the
//!    service user), the paths the units name.
//! 3. The service user (system account, own group, home = the state
//!    directory, no login shell) and every session user (own group, home mode
//!    0700) that does not exist, without forbidden groups.
//! 4. The state directory: mode 0700, the service user's.
//! 5. The units of [`super::units`] in `--unit-dir` (default
//!    `/etc/systemd/system`) with their `enable` links; helper units of names
//!    that are no session user any more are removed.
//! 6. When systemd runs this host (`/run/systemd/system`) and the units went
//!    to its folder: `systemctl stop` for removed helpers, `daemon-reload`
//!    when a unit changed, `systemctl start` of every helper socket. The
//!    service itself is started by the operator after `bothy-host pair`.
//!    Without systemd, it says that `bothy-host supervise` runs the same
//!    binaries.
//!
//! A second run finds everything in place, changes nothing and says so.
//! Exit codes: 0 done, 1 refused or failed (nothing or only part done, as
//! printed), 2 not root, 78 the configuration is invalid.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::accounts;
use super::units::{self, Change, UnitDir, UnitInputs};
use crate::config::{Config, HostServiceConfig};
use crate::doctor::accounts::UserEntry;

/// Exit code: refused or failed.
pub const EXIT_FAILED: i32 = 1;
/// Exit code: not run as root.
pub const EXIT_NOT_ROOT: i32 = 2;

/// The options of `bothy-host install`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstallOptions {
    /// `--session-user`: for the skeleton; with an existing file each must be
    /// in its `session_users`.
    pub session_users: Vec<String>,
    /// `--service-user`: for the skeleton only.
    pub service_user: Option<String>,
    /// `--state-dir`: for the skeleton only.
    pub state_dir: Option<PathBuf>,
    /// `--unit-dir`: where the units go.
    pub unit_dir: PathBuf,
}

/// What the command prints: one line per step, and whether anything changed.
#[derive(Debug, Default)]
pub struct Steps {
    prefix: &'static str,
    changed: bool,
}

impl Steps {
    /// Lines start with `prefix` (`bothy-host install`).
    pub fn new(prefix: &'static str) -> Steps {
        Steps {
            prefix,
            changed: false,
        }
    }

    /// Prints `what` with the change.
    pub fn record(&mut self, change: Change, what: &str) {
        let verb = match change {
            Change::Created => "created",
            Change::Updated => "updated",
            Change::Unchanged => "unchanged",
            Change::Removed => "removed",
        };
        self.changed |= change.changed();
        println!("{}: {verb} {what}", self.prefix);
    }

    /// Prints a note (changes nothing).
    pub fn note(&self, text: &str) {
        println!("{}: {text}", self.prefix);
    }

    /// Whether any step changed something.
    pub fn changed(&self) -> bool {
        self.changed
    }

    /// Prints a refusal to standard error and returns `code`.
    pub fn fail(&self, code: i32, text: &str) -> i32 {
        eprintln!("{}: {text}", self.prefix);
        code
    }

    /// Notes that something changed outside a [`Change`] (a systemctl call).
    pub fn mark_changed(&mut self) {
        self.changed = true;
    }
}

/// Whether systemd runs this host and reads `unit_dir`.
pub fn systemd_manages(unit_dir: &UnitDir) -> bool {
    super::restart::systemd_booted() && unit_dir.is_systemds()
}

/// Runs `systemctl ARGS`.
pub fn systemctl(args: &[&str]) -> Result<(), String> {
    let output = std::process::Command::new("systemctl")
        .args(args)
        .output()
        .map_err(|e| format!("systemctl could not run: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "systemctl {} failed ({}): {}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

/// The binary the units run: this one, resolved.
pub fn own_binary() -> Result<PathBuf, String> {
    std::env::current_exe()
        .and_then(fs::canonicalize)
        .map_err(|e| format!("the own binary cannot be found: {e}"))
}

/// The skeleton of a configuration file (D-194).
pub fn skeleton(service_user: &str, state_dir: &Path, session_users: &[String]) -> String {
    let users: Vec<String> = session_users
        .iter()
        .map(|u| super::config_edit::scalar(u))
        .collect();
    format!(
        "# The configuration of bothy-host (spec 24, section 17), written by\n\
# `bothy-host install`, which never overwrites it. A change takes effect after\n\
# `bothy-host restart`; session users are added and removed with\n\
# `bothy-host session-user add NAME` and `bothy-host session-user remove NAME`.\n\
host_service:\n\
\x20 service_user: {service_user}\n\
\x20 state_dir: {state_dir}\n\
\x20 session_users: [{users}]\n\
\x20 # profiles: [{{name: shell, display_name: Shell, kind: shell}}]\n\
\x20 # claude_bin: \"\"\n\
\x20 # claude_workdirs: {{}}\n\
\x20 # extra_forbidden_groups: []\n\
\x20 # require_local_confirm: false\n",
        service_user = super::config_edit::scalar(service_user),
        state_dir = Value::String(state_dir.to_string_lossy().into_owned()),
        users = users.join(", "),
    )
}

/// `bothy-host install` (module docs).
pub fn command(config_path: &Path, options: &InstallOptions) -> i32 {
    as_root(
        "bothy-host install",
        "it creates accounts, the state directory and the units of the service manager",
        |steps| {
            install(config_path, options, steps)?;
            if !steps.changed() {
                steps.note("nothing changed: everything was in place");
            }
            Ok(())
        },
    )
}

/// Why a command of this module stops: its exit code and the message.
pub(super) type Failure = (i32, String);

/// A [`Failure`] with [`EXIT_FAILED`].
pub(super) fn failed(message: impl Into<String>) -> Failure {
    (EXIT_FAILED, message.into())
}

/// Runs `command` (lines prefixed `what`) when the caller is root, else
/// refuses with [`EXIT_NOT_ROOT`] and `why` it needs root; the exit code: 0,
/// or that of the [`Failure`], whose message goes to standard error.
pub(super) fn as_root(
    what: &'static str,
    why: &str,
    command: impl FnOnce(&mut Steps) -> Result<(), Failure>,
) -> i32 {
    let mut steps = Steps::new(what);
    if !nix::unistd::geteuid().is_root() {
        return steps.fail(EXIT_NOT_ROOT, &format!("run it as root: {why}"));
    }
    match command(&mut steps) {
        Ok(()) => 0,
        Err((code, message)) => steps.fail(code, &message),
    }
}

/// The steps of the module docs, in their order; each stops the run with its
/// [`Failure`].
fn install(config_path: &Path, options: &InstallOptions, steps: &mut Steps) -> Result<(), Failure> {
    let config_path = std::path::absolute(config_path)
        .map_err(|e| failed(format!("the configuration path cannot be used: {e}")))?;
    // 1. The configuration: read, or a skeleton to write.
    let (config, skeleton_text) = read_or_draft_config(&config_path, options)?;
    let h = &config.host_service;
    // 2. Checks before any change.
    check_names(h)?;
    check_existing_accounts(h)?;
    check_state_dir(h)?;
    let binary = own_binary().map_err(failed)?;
    check_unit_paths(&binary, &config_path, h)?;
    let unit_dir = UnitDir::new(&options.unit_dir);
    refuse_forbidden_drop_ins(&unit_dir).map_err(failed)?;
    if !root_only(&binary) {
        steps.note(&format!(
            "{} or a folder above it is not root's or is writable by group or others: HD10 refuses the start until the binary lies in a folder like /usr/local/bin (then run install from there)",
            binary.display()
        ));
    }
    // 3. The configuration skeleton.
    write_skeleton(&config_path, skeleton_text.as_deref(), steps)?;
    if h.session_users.is_empty() {
        steps.note(
            "host_service.session_users is empty: the doctor refuses the start (HD1) until one is added with bothy-host session-user add NAME",
        );
    }
    // 4. Accounts.
    let service = ensure_accounts(h, steps)?;
    // 5. The state directory.
    make_state_dir(h, &service, steps)?;
    // 6. Units.
    let group = crate::doctor::accounts::group_name(service.gid)
        .ok_or_else(|| failed("the primary group of the service user has no name".to_owned()))?;
    let inputs = UnitInputs {
        binary,
        config: config_path.clone(),
        service_user: h.service_user.clone(),
        service_group: group,
    };
    let systemd = systemd_manages(&unit_dir);
    let units_changed = write_units(&unit_dir, &inputs, h, systemd, steps)?;
    // 7. The service manager.
    tell_service_manager(&unit_dir, h, systemd, units_changed, steps)
}

/// Step 1: the configuration at `config_path` when it exists (it must agree
/// with the command line), else the skeleton from the command line and its
/// text to write.
fn read_or_draft_config(
    config_path: &Path,
    options: &InstallOptions,
) -> Result<(Config, Option<String>), Failure> {
    match fs::symlink_metadata(config_path) {
        Ok(_) => {
            let config = Config::load(config_path).map_err(|e| {
                (
                    crate::EXIT_REFUSED_START,
                    format!("config_invalid: {e}; install changes nothing"),
                )
            })?;
            let h = &config.host_service;
            if options
                .service_user
                .as_ref()
                .is_some_and(|u| *u != h.service_user)
                || options
                    .state_dir
                    .as_ref()
                    .is_some_and(|d| *d != h.state_dir)
            {
                return Err(failed(format!(
                    "{} exists and names another service user or state directory; install never overwrites it (edit the file, or leave out --service-user and --state-dir)",
                    config_path.display()
                )));
            }
            if let Some(name) = options
                .session_users
                .iter()
                .find(|u| !h.session_users.contains(u))
            {
                return Err(failed(format!(
                    "{name} is not in host_service.session_users of {}; install never overwrites the file: use bothy-host session-user add {name}",
                    config_path.display()
                )));
            }
            Ok((config, None))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let defaults = HostServiceConfig::default();
            let service_user = options
                .service_user
                .clone()
                .unwrap_or(defaults.service_user);
            let state_dir = options.state_dir.clone().unwrap_or(defaults.state_dir);
            for name in std::iter::once(&service_user).chain(&options.session_users) {
                accounts::check_name(name).map_err(failed)?;
            }
            if !state_dir.is_absolute() {
                return Err(failed("--state-dir must be an absolute path"));
            }
            let text = skeleton(&service_user, &state_dir, &options.session_users);
            let config = Config::from_yaml_str(&text)
                .map_err(|e| failed(format!("the skeleton would be invalid: {e}")))?;
            Ok((config, Some(text)))
        }
        Err(e) => Err(failed(format!(
            "{} cannot be read: {e}",
            config_path.display()
        ))),
    }
}

/// Step 2, the names (HD1): each valid, no session user is the service user,
/// none twice without regard to case.
fn check_names(h: &HostServiceConfig) -> Result<(), Failure> {
    accounts::check_name(&h.service_user).map_err(failed)?;
    let mut seen: Vec<&str> = Vec::new();
    for name in &h.session_users {
        accounts::check_name(name).map_err(failed)?;
        if name.eq_ignore_ascii_case(&h.service_user) {
            return Err(failed(format!(
                "{name} is the service user and cannot be a session user (HD1)"
            )));
        }
        if seen.iter().any(|s| s.eq_ignore_ascii_case(name)) {
            return Err(failed(format!(
                "{name} is listed twice in host_service.session_users (names are compared without case, HD1)"
            )));
        }
        seen.push(name);
    }
    Ok(())
}

/// Step 2, the accounts that exist already: no user ID 0, no forbidden
/// groups (HD2).
fn check_existing_accounts(h: &HostServiceConfig) -> Result<(), Failure> {
    for name in std::iter::once(&h.service_user).chain(&h.session_users) {
        if let Some(entry) = UserEntry::lookup(name)
            .map_err(|e| failed(format!("the user database cannot be read: {e}")))?
        {
            accounts::check_existing(&entry, &h.extra_forbidden_groups).map_err(failed)?;
        }
    }
    Ok(())
}

/// Step 2, an existing state directory: a folder of the service user.
fn check_state_dir(h: &HostServiceConfig) -> Result<(), Failure> {
    let service_uid = UserEntry::lookup(&h.service_user)
        .ok()
        .flatten()
        .map(|e| e.uid);
    match fs::symlink_metadata(&h.state_dir) {
        Ok(m) if !m.is_dir() => Err(failed(format!(
            "the state directory {} is not a folder (a link is refused)",
            h.state_dir.display()
        ))),
        Ok(m) if Some(m.uid()) != service_uid => Err(failed(format!(
            "the state directory {} exists and does not belong to the service user {}; install does not take over a folder of another account",
            h.state_dir.display(),
            h.service_user
        ))),
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(failed(format!(
            "the state directory {} cannot be read: {e}",
            h.state_dir.display()
        ))),
    }
}

/// Step 2, the paths the units name: each one a unit file carries unquoted.
fn check_unit_paths(
    binary: &Path,
    config_path: &Path,
    h: &HostServiceConfig,
) -> Result<(), Failure> {
    for (what, path) in [
        ("the binary", binary),
        ("the configuration file", config_path),
        ("host_service.runtime_dir", h.runtime_dir.as_path()),
    ] {
        if !units::unit_safe_path(path) {
            return Err(failed(format!(
                "{what} {} has characters a unit file cannot carry unquoted (only letters, digits and / . _ - + @)",
                path.display()
            )));
        }
    }
    Ok(())
}

/// Step 3: writes the skeleton when there is one; an existing file is never
/// overwritten.
fn write_skeleton(
    config_path: &Path,
    skeleton_text: Option<&str>,
    steps: &mut Steps,
) -> Result<(), Failure> {
    if let Some(text) = skeleton_text {
        if let Some(folder) = config_path.parent() {
            units::root_folder(folder)
                .map_err(|e| failed(format!("{} cannot be created: {e}", folder.display())))?;
        }
        let change = units::write_root_file(config_path, text.as_bytes(), 0o644)
            .map_err(|e| failed(format!("{} cannot be written: {e}", config_path.display())))?;
        steps.record(change, &format!("configuration {}", config_path.display()));
    } else {
        steps.record(
            Change::Unchanged,
            &format!(
                "configuration {} (never overwritten)",
                config_path.display()
            ),
        );
    }
    Ok(())
}

/// Step 4: the service user and every session user; the service user's entry.
fn ensure_accounts(h: &HostServiceConfig, steps: &mut Steps) -> Result<UserEntry, Failure> {
    let (service, change) =
        accounts::ensure_service_user(&h.service_user, &h.state_dir, &h.extra_forbidden_groups)
            .map_err(failed)?;
    steps.record(change, &format!("service user {}", h.service_user));
    for name in &h.session_users {
        let (entry, change) =
            accounts::ensure_session_user(name, &h.extra_forbidden_groups).map_err(failed)?;
        steps.record(change, &format!("session user {name}"));
        if change == Change::Unchanged && home_open(&entry.home) {
            steps.note(&format!(
                "the home of {name} gives other users access; HD11 blocks {name} until it is closed (chmod go-rwx, no ACL entries)"
            ));
        }
    }
    Ok(service)
}

/// Step 5: the state directory, mode 0700, the service user's.
fn make_state_dir(
    h: &HostServiceConfig,
    service: &UserEntry,
    steps: &mut Steps,
) -> Result<(), Failure> {
    let change = state_dir(&h.state_dir, service).map_err(|e| {
        failed(format!(
            "the state directory {} cannot be made: {e}",
            h.state_dir.display()
        ))
    })?;
    steps.record(
        change,
        &format!(
            "state directory {} (mode 0700, {})",
            h.state_dir.display(),
            h.service_user
        ),
    );
    Ok(())
}

/// Step 6: the helper units of stale names removed, those of every session
/// user and the service's unit written and enabled; whether a unit changed.
fn write_units(
    unit_dir: &UnitDir,
    inputs: &UnitInputs,
    h: &HostServiceConfig,
    systemd: bool,
    steps: &mut Steps,
) -> Result<bool, Failure> {
    unit_dir.ensure().map_err(|e| {
        failed(format!(
            "{} cannot be created: {e}",
            unit_dir.path().display()
        ))
    })?;
    let mut units_changed = false;
    let stale: Vec<String> = unit_dir
        .helper_users()
        .map_err(|e| failed(format!("{} cannot be read: {e}", unit_dir.path().display())))?
        .into_iter()
        .filter(|u| !h.session_users.contains(u))
        .collect();
    for user in &stale {
        units_changed |= remove_helper_units(unit_dir, user, systemd, steps).map_err(failed)?;
    }
    for user in &h.session_users {
        units_changed |= write_helper_units(unit_dir, inputs, h, user, steps).map_err(failed)?;
    }
    let change = unit_dir
        .write(units::SERVICE_UNIT, &units::service_unit(inputs))
        .map_err(|e| failed(format!("{}: {e}", units::SERVICE_UNIT)))?;
    units_changed |= change.changed();
    steps.record(
        change,
        &unit_dir
            .path()
            .join(units::SERVICE_UNIT)
            .display()
            .to_string(),
    );
    let change = unit_dir
        .enable("multi-user.target", units::SERVICE_UNIT)
        .map_err(|e| failed(format!("enabling {}: {e}", units::SERVICE_UNIT)))?;
    units_changed |= change.changed();
    steps.record(
        change,
        &format!("link multi-user.target.wants/{}", units::SERVICE_UNIT),
    );
    Ok(units_changed)
}

/// Step 7: with systemd, reload when a unit changed and start every helper
/// socket; without, say what runs the same binaries.
fn tell_service_manager(
    unit_dir: &UnitDir,
    h: &HostServiceConfig,
    systemd: bool,
    units_changed: bool,
    steps: &mut Steps,
) -> Result<(), Failure> {
    if systemd {
        if units_changed {
            systemctl(&["daemon-reload"]).map_err(failed)?;
            steps.note("systemctl daemon-reload");
            steps.note(
                "a service or helper that runs keeps its old definition until it restarts (bothy-host restart)",
            );
        }
        for user in &h.session_users {
            systemctl(&["start", &units::helper_socket(user)]).map_err(failed)?;
        }
        steps.note(&format!(
            "next: bothy-host pair --server URL --code CODE, then systemctl start {}",
            units::SERVICE_UNIT
        ));
    } else if unit_dir.is_systemds() {
        steps.note(
            "systemd does not run this host: the units are written for a later boot with systemd; \
             until then `bothy-host supervise` (as root) runs the helpers and the service the same way",
        );
    } else {
        steps.note(&format!(
            "the units went to {}, which systemd does not read; nothing was reloaded \
             (without systemd, `bothy-host supervise` as root runs the helpers and the service)",
            unit_dir.path().display()
        ));
    }
    Ok(())
}

/// Refuses when a drop-in sets `NoNewPrivileges=` or an option that implies
/// it for one of our units (D-190): the units would no longer be what the
/// chapter requires, and HD3 would not see a sudo rule.
pub fn refuse_forbidden_drop_ins(unit_dir: &UnitDir) -> Result<(), String> {
    let found = units::forbidden_drop_ins(unit_dir.path()).map_err(|e| {
        format!(
            "the drop-ins in {} cannot be read: {e}",
            unit_dir.path().display()
        )
    })?;
    if found.is_empty() {
        return Ok(());
    }
    let list: Vec<String> = found
        .iter()
        .map(|(file, key)| format!("{key}= in {}", file.display()))
        .collect();
    Err(format!(
        "{}: these set no_new_privs or mount file systems nosuid, under which sudo -n true always fails and HD3 cannot see a sudo rule (D-M2-42-14); remove them; nothing changed",
        list.join(", ")
    ))
}

/// Whether `path` and every folder above it belong to root and are writable
/// by neither group nor others (a first look; HD10 is the check).
fn root_only(path: &Path) -> bool {
    path.ancestors()
        .all(|p| fs::metadata(p).is_ok_and(|m| m.uid() == 0 && m.mode() & 0o022 == 0))
}

/// Whether the home at `home` gives group or others any permission (or has an
/// ACL of access).
fn home_open(home: &Path) -> bool {
    match fs::metadata(home) {
        Ok(m) => {
            m.mode() & 0o077 != 0
                || rustix::fs::getxattr(home, "system.posix_acl_access", &mut [0u8; 0][..]).is_ok()
        }
        Err(_) => false,
    }
}

/// Creates the state directory (parents root's 0755), or makes an existing one
/// of the service user mode 0700.
fn state_dir(path: &Path, service: &UserEntry) -> std::io::Result<Change> {
    match fs::symlink_metadata(path) {
        Ok(m) => {
            if m.mode() & 0o7777 == 0o700 && m.uid() == service.uid && m.gid() == service.gid {
                return Ok(Change::Unchanged);
            }
            std::os::unix::fs::lchown(path, Some(service.uid), Some(service.gid))?;
            fs::set_permissions(path, fs::Permissions::from_mode(0o700))?;
            Ok(Change::Updated)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if let Some(parent) = path.parent() {
                units::root_folder(parent)?;
            }
            fs::DirBuilder::new().create(path)?;
            fs::set_permissions(path, fs::Permissions::from_mode(0o700))?;
            std::os::unix::fs::lchown(path, Some(service.uid), Some(service.gid))?;
            Ok(Change::Created)
        }
        Err(e) => Err(e),
    }
}

/// Writes the socket and service unit of `user`'s helper and enables the
/// socket. Whether a file changed.
pub fn write_helper_units(
    unit_dir: &UnitDir,
    inputs: &UnitInputs,
    config: &HostServiceConfig,
    user: &str,
    steps: &mut Steps,
) -> Result<bool, String> {
    let endpoint = config.helper_endpoint(user);
    let socket = units::helper_socket(user);
    let service = units::helper_service(user);
    let mut changed = false;
    for (name, text) in [
        (
            socket.clone(),
            units::helper_socket_unit(inputs, user, &endpoint),
        ),
        (service.clone(), units::helper_service_unit(inputs, user)),
    ] {
        let change = unit_dir
            .write(&name, &text)
            .map_err(|e| format!("{name}: {e}"))?;
        changed |= change.changed();
        steps.record(change, &unit_dir.path().join(&name).display().to_string());
    }
    let change = unit_dir
        .enable("sockets.target", &socket)
        .map_err(|e| format!("enabling {socket}: {e}"))?;
    changed |= change.changed();
    steps.record(change, &format!("link sockets.target.wants/{socket}"));
    Ok(changed)
}

/// Stops (under systemd) and removes the helper units of `user` with their
/// link. Whether a file was removed.
pub fn remove_helper_units(
    unit_dir: &UnitDir,
    user: &str,
    systemd: bool,
    steps: &mut Steps,
) -> Result<bool, String> {
    let socket = units::helper_socket(user);
    let service = units::helper_service(user);
    let present = [&socket, &service]
        .iter()
        .any(|name| fs::symlink_metadata(unit_dir.path().join(name)).is_ok());
    if systemd && present {
        // Stopping a loaded unit that does not run is no error.
        systemctl(&["stop", &socket, &service])?;
        steps.note(&format!("systemctl stop {socket} {service}"));
    }
    let mut changed = false;
    let change = unit_dir
        .disable("sockets.target", &socket)
        .map_err(|e| format!("disabling {socket}: {e}"))?;
    changed |= change.changed();
    if change.changed() {
        steps.record(change, &format!("link sockets.target.wants/{socket}"));
    }
    for name in [&socket, &service] {
        let change = unit_dir.remove(name).map_err(|e| format!("{name}: {e}"))?;
        changed |= change.changed();
        if change.changed() {
            steps.record(change, &unit_dir.path().join(name).display().to_string());
        }
    }
    Ok(changed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_skeleton_decodes_to_what_it_names() {
        let text = skeleton(
            "svc",
            Path::new("/var/lib/x y"),
            &["alice".into(), "null".into()],
        );
        let c = Config::from_yaml_str(&text).expect("valid");
        assert_eq!(c.host_service.service_user, "svc");
        assert_eq!(c.host_service.state_dir, PathBuf::from("/var/lib/x y"));
        assert_eq!(c.host_service.session_users, ["alice", "null"]);
        let empty = Config::from_yaml_str(&skeleton("s", Path::new("/s"), &[])).expect("valid");
        assert!(empty.host_service.session_users.is_empty());
    }
}
