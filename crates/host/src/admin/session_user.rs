//! `bothy-host session-user add NAME` and `bothy-host session-user remove
//! NAME` (2.2 items 3–5, 6.5 "Limit", 16-operations.md 4.4 item 1;
//! `docs/decisions.md` D-193, D-195, D-196, D-261), as root.
//!
//! add: a valid name (HD1) that is no session user yet (compared without
//! case) and is bound to no person in `bindings.json` of the state directory
//! (compared without case: 2.2 item 5 counts names without case for
//! uniqueness), so a former session user's name is never handed out again →
//! the account (made when missing: own group, home 0700; an existing one must
//! pass HD1 and HD2, and its home is closed) → the helper units → the name
//! appended to `host_service.session_users` → under systemd the socket
//! started → the service restarted.
//!
//! remove: a name of `host_service.session_users` (exactly) → the name out
//! of `session_users` and its entry out of `claude_workdirs` → its helper
//! units stopped (systemd) and removed → its home closed (no permission for
//! group and others, no ACL of access) → the service restarted → the reminder
//! to delete the account with its long-running processes. Its binding stays.
//!
//! The service is restarted the way `bothy-host restart` does it (D-136), by
//! both commands. Under `bothy-host supervise` that restart is also its
//! `daemon-reload` (D-260): supervise reads the configuration again, stops
//! and removes the helper of a removed name, starts the helper of an added
//! one, then starts the service; the command then checks the helper's PID
//! record (present after `add`, gone after `remove`) and fails when it is not
//! so (D-261). Exit codes like `install`: 0 done, 1 refused or failed, 2 not
//! root, 78 the configuration is invalid.

use std::path::{Path, PathBuf};

use super::accounts;
use super::config_edit::{ConfigFile, EditError};
use super::install::{
    self, Failure, Steps, failed, remove_helper_units, systemctl, systemd_manages,
    write_helper_units,
};
use super::restart::{RESTART_BOUND, live_supervise, restart_under_supervise, systemd_booted};
use super::units::{self, Change, UnitDir, UnitInputs};
use crate::config::HostServiceConfig;
use crate::doctor::accounts::UserEntry;
use crate::manager;
use crate::state::StateDir;

/// The options both sub-commands share.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionUserOptions {
    /// `--unit-dir`: where the units are.
    pub unit_dir: PathBuf,
}

fn open_config(config_path: &Path) -> Result<ConfigFile, Failure> {
    ConfigFile::open(config_path).map_err(|e| match e {
        EditError::Invalid(e) => (crate::EXIT_REFUSED_START, format!("config_invalid: {e}")),
        other => failed(format!(
            "the configuration {} cannot be used: {other}",
            config_path.display()
        )),
    })
}

/// `bothy-host session-user add NAME`.
pub fn add_command(config_path: &Path, name: &str, options: &SessionUserOptions) -> i32 {
    install::as_root(
        "bothy-host session-user add",
        "it creates an account, edits the configuration and restarts the service",
        |steps| add(config_path, name, options, steps),
    )
}

/// `bothy-host session-user remove NAME`.
pub fn remove_command(config_path: &Path, name: &str, options: &SessionUserOptions) -> i32 {
    install::as_root(
        "bothy-host session-user remove",
        "it edits the configuration, removes a helper and restarts the service",
        |steps| remove(config_path, name, options, steps),
    )
}

fn unit_inputs(config_path: &Path, h: &HostServiceConfig) -> Result<UnitInputs, Failure> {
    let service = UserEntry::lookup(&h.service_user)
        .map_err(|e| failed(format!("the user database cannot be read: {e}")))?
        .ok_or_else(|| {
            failed(format!(
                "the service user {} does not exist: run bothy-host install first",
                h.service_user
            ))
        })?;
    let service_group = crate::doctor::accounts::group_name(service.gid)
        .ok_or_else(|| failed("the primary group of the service user has no name"))?;
    let binary = install::own_binary().map_err(failed)?;
    for (what, path) in [
        ("the binary", &binary),
        ("the configuration file", &config_path.to_owned()),
        ("host_service.runtime_dir", &h.runtime_dir),
    ] {
        if !units::unit_safe_path(path) {
            return Err(failed(format!(
                "{what} {} has characters a unit file cannot carry unquoted",
                path.display()
            )));
        }
    }
    Ok(UnitInputs {
        binary,
        config: config_path.to_owned(),
        service_user: h.service_user.clone(),
        service_group,
    })
}

fn add(
    config_path: &Path,
    name: &str,
    options: &SessionUserOptions,
    steps: &mut Steps,
) -> Result<(), Failure> {
    accounts::check_name(name).map_err(failed)?;
    let mut file = open_config(config_path)?;
    let config_path = file.path().to_owned();
    let h = file.config().host_service.clone();
    if name.eq_ignore_ascii_case(&h.service_user) {
        return Err(failed(format!(
            "{name} is the service user and cannot be a session user (HD1)"
        )));
    }
    if let Some(listed) = h
        .session_users
        .iter()
        .find(|u| u.eq_ignore_ascii_case(name))
    {
        return Err(failed(format!(
            "{listed} is already a session user of this host (names are compared without case); nothing changed"
        )));
    }
    let bindings = StateDir::new(&h.state_dir, None)
        .load_bindings()
        .map_err(|e| {
            failed(format!(
                "the bindings cannot be read ({e}); a name bound to a person must never be handed out again, so nothing changed"
            ))
        })?;
    if let Some(bound) = bindings.keys().find(|u| u.eq_ignore_ascii_case(name)) {
        return Err(failed(format!(
            "{bound} is bound to a person in {} (a former session user); a used name is never given to anyone else (2.2 item 3): choose a new name; nothing changed",
            h.state_dir.join(crate::state::BINDINGS_FILE).display()
        )));
    }
    let inputs = unit_inputs(&config_path, &h)?;
    let unit_dir = UnitDir::new(&options.unit_dir);
    install::refuse_forbidden_drop_ins(&unit_dir).map_err(failed)?;
    let systemd = systemd_manages(&unit_dir);

    let (entry, change) =
        accounts::ensure_session_user(name, &h.extra_forbidden_groups).map_err(failed)?;
    steps.record(change, &format!("session user {name}"));
    if change != Change::Created {
        let closed = accounts::close_home(&entry.home)
            .map_err(|e| failed(format!("the home of {name} cannot be closed: {e}")))?;
        steps.record(closed, &format!("home of {name} closed to other users"));
    }

    unit_dir.ensure().map_err(|e| {
        failed(format!(
            "{} cannot be created: {e}",
            unit_dir.path().display()
        ))
    })?;
    let units_changed = write_helper_units(&unit_dir, &inputs, &h, name, steps).map_err(failed)?;

    let mut users = h.session_users.clone();
    users.push(name.to_owned());
    let change = file.set_session_users(&users).map_err(|e| {
        failed(format!(
            "{}: {e}; the account and the units are in place, the configuration is unchanged",
            config_path.display()
        ))
    })?;
    steps.record(
        Change::updated_if(change),
        &format!(
            "{}: {name} added to host_service.session_users",
            config_path.display()
        ),
    );
    drop(file);

    if systemd {
        if units_changed {
            systemctl(&["daemon-reload"]).map_err(failed)?;
            steps.note("systemctl daemon-reload");
        }
        let socket = units::helper_socket(name);
        systemctl(&["start", &socket]).map_err(failed)?;
        steps.note(&format!("systemctl start {socket}"));
    }
    restart(&h, name, Purpose::Add, steps)
}

fn remove(
    config_path: &Path,
    name: &str,
    options: &SessionUserOptions,
    steps: &mut Steps,
) -> Result<(), Failure> {
    if !crate::doctor::accounts::valid_session_user_name(name) {
        return Err(failed(format!("{name:?} is not a valid session user name")));
    }
    let mut file = open_config(config_path)?;
    let config_path = file.path().to_owned();
    let h = file.config().host_service.clone();
    if !h.session_users.iter().any(|u| u == name) {
        let hint = h
            .session_users
            .iter()
            .find(|u| u.eq_ignore_ascii_case(name))
            .map(|u| format!(" (did you mean {u}? names are compared exactly)"))
            .unwrap_or_default();
        return Err(failed(format!(
            "{name} is not a session user of this host (host_service.session_users){hint}; nothing changed"
        )));
    }
    let unit_dir = UnitDir::new(&options.unit_dir);
    let systemd = systemd_manages(&unit_dir);

    let users: Vec<String> = h
        .session_users
        .iter()
        .filter(|u| *u != name)
        .cloned()
        .collect();
    let had_workdirs = h.claude_workdirs.iter().any(|w| w.user == name);
    let change = file
        .set_session_users(&users)
        .map_err(|e| failed(format!("{}: {e}; nothing changed", config_path.display())))?;
    steps.record(
        Change::updated_if(change),
        &format!(
            "{}: {name} taken out of host_service.session_users{}",
            config_path.display(),
            if had_workdirs {
                " and host_service.claude_workdirs"
            } else {
                ""
            }
        ),
    );
    drop(file);

    let units_changed = remove_helper_units(&unit_dir, name, systemd, steps).map_err(failed)?;
    if !units_changed {
        steps.note(&format!(
            "{name} had no helper units in {}",
            unit_dir.path().display()
        ));
    }
    if systemd && units_changed {
        systemctl(&["daemon-reload"]).map_err(failed)?;
        steps.note("systemctl daemon-reload");
    }

    match UserEntry::lookup(name) {
        Ok(Some(entry)) => {
            let change = accounts::close_home(&entry.home)
                .map_err(|e| failed(format!("the home of {name} cannot be closed: {e}")))?;
            steps.record(change, &format!("home of {name} closed to other users"));
        }
        Ok(None) => steps.note(&format!("{name} has no account any more; no home to close")),
        Err(e) => return Err(failed(format!("the user database cannot be read: {e}"))),
    }
    steps.note(&format!(
        "the binding of {name} stays in the state directory: the name is never given to another person"
    ));
    restart(&h, name, Purpose::Remove, steps)?;
    steps.note(&format!(
        "now delete the account {name} together with its long-running processes (crontab, at jobs, services of the user), \
         which can open its home again: e.g. crontab -r -u {name}; pkill -KILL -u {name}; userdel {name} (--remove deletes its home too)"
    ));
    Ok(())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Purpose {
    Add,
    Remove,
}

/// Restarts the running service like `bothy-host restart` (D-136); under
/// supervise, checks that the helper of `name` came or went with it (D-261).
fn restart(
    h: &HostServiceConfig,
    name: &str,
    purpose: Purpose,
    steps: &mut Steps,
) -> Result<(), Failure> {
    match live_supervise(&h.runtime_dir) {
        Ok(Some(pid)) => {
            let new_pid =
                restart_under_supervise(&h.runtime_dir, pid, RESTART_BOUND).map_err(failed)?;
            steps.mark_changed();
            // supervise starts the service only after the helpers changed, so
            // the records tell now what it did.
            let record = manager::helper_record(&h.runtime_dir, name);
            let helper = manager::read_record(&h.runtime_dir, &record).ok();
            match (purpose, helper) {
                (Purpose::Add, Some(helper)) => steps.note(&format!(
                    "bothy-host supervise (PID {pid}) started the helper of {name} (PID {helper})"
                )),
                (Purpose::Add, None) => {
                    return Err(failed(format!(
                        "bothy-host supervise (PID {pid}) restarted the service (PID {new_pid}) but runs no helper for {name}; \
                         its log says why (helper_setup_failed, start_failed), and the service refuses to start without it (HD10)"
                    )));
                }
                (Purpose::Remove, None) => steps.note(&format!(
                    "bothy-host supervise (PID {pid}) stopped and removed the helper of {name}"
                )),
                (Purpose::Remove, Some(helper)) => {
                    return Err(failed(format!(
                        "bothy-host supervise (PID {pid}) restarted the service (PID {new_pid}) but the helper of {name} still runs (PID {helper}); \
                         its log says why"
                    )));
                }
            }
            steps.note(&format!("the service was restarted (PID {new_pid})"));
            Ok(())
        }
        Ok(None) if systemd_booted() => {
            systemctl(&["restart", manager::SERVICE_UNIT]).map_err(failed)?;
            steps.mark_changed();
            steps.note(&format!("systemctl restart {}", manager::SERVICE_UNIT));
            Ok(())
        }
        Ok(None) => {
            steps.note(&format!(
                "no service runs (no bothy-host supervise for {}, no systemd): the change takes effect when it starts",
                h.runtime_dir.display()
            ));
            Ok(())
        }
        Err(message) => Err(failed(format!(
            "the service cannot be restarted: {message}"
        ))),
    }
}
