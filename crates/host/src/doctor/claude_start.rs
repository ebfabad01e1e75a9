//! The start of the profile claude in the PTY helper (7.4 "Start of claude with
//! organization" and "with personal", 11.1): the [`SpawnSpec`] of a
//! [`StartProgram::ClaudeOrganization`] or [`StartProgram::ClaudePersonal`],
//! built from the doctor's last check of this helper ([`HelperState`]).
//!
//! * Both: the working directory must be one of the last check (the list after
//!   HD7) and resolve now to the identity reported then, else
//!   `shared_location`; the child starts in the resolved folder.
//! * organization: exactly the resolved `host_service.claude_bin` of the last
//!   check (none usable: `pty_failed`); `PATH` = the fixed search list of HD6,
//!   then the cleaned `PATH` of the profile without those folders;
//!   `CLAUDE_CONFIG_DIR` = `<home>/.config/bothy-host/claude` (created with mode
//!   0700 when missing; it must resolve to exactly that folder, belong to the
//!   user and give nobody else anything, else `shared_location`);
//!   `ANTHROPIC_API_KEY` only in this child's environment (an empty key:
//!   `pty_failed`).
//! * personal: the login-shell probe of HD6 as this user, bounded by
//!   `host_service.auth_status_timeout` (timeout or failure: `pty_failed`); the
//!   value of `CLAUDE_CONFIG_DIR` must be absolute and resolve to a folder in
//!   the home (unset: `<home>/.claude`, which may be missing), else
//!   `shared_location`; the login shell then runs
//!   `cd <dir>; export CLAUDE_CONFIG_DIR=<value>; exec claude` (or `unset ...`),
//!   in the form of its family (sh, fish, csh). No key is set.
//!
//! Logs name codes only, never a path of the session user.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use zeroize::Zeroizing;

use crate::channel::{PtyStart, StartFailure, StartProgram};
use crate::helper::env::{Environment, SessionUser, clean_path, listed_shell};
use crate::helper::pty::{SpawnSpec, login_argv0};

use super::acl::AclState;
use super::hd6::{self, ShellFamily, ShellUser};
use super::hd11::organization_config_dir;
use super::helper_side::{HelperState, LastCheck, StartView};
use super::terms::{self, NodeKind};

/// The list of login shells.
const SHELLS_FILE: &str = "/etc/shells";

/// Variables that select another login; never in a claude start (7.4).
const LOGIN_VARIABLES: [&str; 6] = [
    "ANTHROPIC_AUTH_TOKEN",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "ANTHROPIC_PROFILE",
    "CLAUDE_CODE_USE_BEDROCK",
    "CLAUDE_CODE_USE_VERTEX",
    "CLAUDE_CODE_USE_FOUNDRY",
];

/// The spawn of a claude start; `env` is the allow-list environment of 11.1
/// ([`crate::helper::env::base_environment`]). Any other program is
/// `pty_failed` here. The helper's state is locked only to copy what the
/// start needs ([`HelperState::start_view`]). Blocking (the login-shell probe
/// of personal): callers run it on a blocking thread.
pub fn claude_spawn_spec(
    start: &PtyStart,
    user: &SessionUser,
    state: &Mutex<HelperState>,
    env: Environment,
) -> Result<SpawnSpec, StartFailure> {
    let view = state
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .start_view();
    spawn_spec_from(start, user, &view, env)
}

/// [`claude_spawn_spec`] from a copy of the helper's state.
pub fn spawn_spec_from(
    start: &PtyStart,
    user: &SessionUser,
    state: &StartView,
    env: Environment,
) -> Result<SpawnSpec, StartFailure> {
    let (program, argv0, args, env, cwd) = match &start.program {
        StartProgram::ClaudeOrganization { workdir, api_key } => {
            organization(user, state, workdir, api_key, env)?
        }
        StartProgram::ClaudePersonal { workdir } => personal(user, state, workdir, env)?,
        StartProgram::Shell | StartProgram::Command { .. } => return Err(failed("not_claude")),
    };
    Ok(SpawnSpec {
        program,
        argv0,
        args,
        env,
        cwd,
        size: start.size,
        session_id: start.session_id,
    })
}

type Parts = (PathBuf, OsString, Vec<OsString>, Environment, PathBuf);

fn failed(code: &'static str) -> StartFailure {
    tracing::warn!(code, "pty_failed");
    StartFailure::PtyFailed
}

fn shared(code: &'static str) -> StartFailure {
    tracing::warn!(code, "shared_location");
    StartFailure::SharedLocation
}

fn last_check<'a>(user: &SessionUser, state: &'a StartView) -> Result<&'a LastCheck, StartFailure> {
    let last = state.last.as_ref().ok_or_else(|| failed("no_check_yet"))?;
    if last.uid != user.uid {
        return Err(failed("check_of_another_user"));
    }
    Ok(last)
}

/// The working directory `sent` of the last check, resolved now to the same
/// identity; the resolved folder.
fn checked_workdir(last: &LastCheck, sent: &Path) -> Result<PathBuf, StartFailure> {
    let (_, _, id) = last
        .workdirs
        .iter()
        .find(|(path, _, _)| path == sent)
        .ok_or_else(|| shared("workdir_not_checked"))?;
    let now = terms::resolve(sent);
    match now.target {
        Some(t) if t.kind == NodeKind::Dir && t.id == *id => Ok(t.path),
        _ => Err(shared("workdir_changed")),
    }
}

fn organization(
    user: &SessionUser,
    state: &StartView,
    workdir: &Path,
    api_key: &Zeroizing<String>,
    mut env: Environment,
) -> Result<Parts, StartFailure> {
    let last = last_check(user, state)?;
    let cwd = checked_workdir(last, workdir)?;
    let claude = last
        .claude
        .as_ref()
        .ok_or_else(|| failed("claude_bin_unusable"))?;
    if api_key.is_empty() {
        return Err(failed("api_key_missing"));
    }
    let config_dir = organization_folder(user, &last.home)?;
    let mut path: Vec<PathBuf> = claude.search_path.clone();
    let rest = clean_path(env.get("PATH").unwrap_or_default());
    for part in rest
        .as_bytes()
        .split(|b| *b == b':')
        .filter(|p| !p.is_empty())
    {
        let part = PathBuf::from(OsStr::from_bytes(part));
        if !path.contains(&part) {
            path.push(part);
        }
    }
    for name in LOGIN_VARIABLES {
        env.remove(name);
    }
    let ok = env.set("PATH", hd6::join_path(&path))
        && env.set("CLAUDE_CONFIG_DIR", &config_dir)
        && env.set("ANTHROPIC_API_KEY", api_key.as_str());
    if !ok {
        return Err(failed("environment_refused"));
    }
    Ok((
        claude.program.clone(),
        claude.program.clone().into_os_string(),
        Vec::new(),
        env,
        cwd,
    ))
}

/// `<home>/.config/bothy-host/claude`, created when missing, resolving to
/// exactly itself, the user's own and closed to everyone else.
fn organization_folder(user: &SessionUser, home: &Path) -> Result<PathBuf, StartFailure> {
    let wanted = organization_config_dir(home);
    if std::fs::symlink_metadata(&wanted).is_err() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&wanted)
            .map_err(|_| shared("config_dir_not_created"))?;
    }
    let home_resolved = terms::resolve(home)
        .target
        .map(|t| t.path)
        .ok_or_else(|| shared("home_unresolvable"))?;
    let resolution = terms::resolve(&wanted);
    let target = resolution
        .target
        .ok_or_else(|| shared("config_dir_unresolvable"))?;
    let exact = target.path == organization_config_dir(&home_resolved);
    let closed = target.kind == NodeKind::Dir
        && target.uid == user.uid
        && target.mode & 0o077 == 0
        && target.acl == AclState::Absent;
    if !(exact && closed) {
        return Err(shared("config_dir_not_private"));
    }
    Ok(target.path)
}

fn personal(
    user: &SessionUser,
    state: &StartView,
    workdir: &Path,
    mut env: Environment,
) -> Result<Parts, StartFailure> {
    let last = last_check(user, state)?;
    let cwd = checked_workdir(last, workdir)?;
    let shells = std::fs::read_to_string(SHELLS_FILE).map_err(|_| failed("shells_unreadable"))?;
    if !listed_shell(&user.shell, &shells) {
        return Err(failed("shell_not_listed"));
    }
    let login = hd6::login_shell_probe(
        ShellUser {
            name: &user.name,
            home: &user.home,
            shell: &user.shell,
        },
        &state.probe_program,
        last.auth_status_timeout,
    )
    .map_err(|_| failed("login_shell_probe_failed"))?;
    let config_dir = login.config_dir.as_deref();
    check_personal_config_dir(&user.home, config_dir)?;
    let family = ShellFamily::of(&user.shell);
    let quote = |text: &OsStr| {
        text.to_str()
            .and_then(|t| family.quote(t))
            .ok_or_else(|| shared("value_not_quotable"))
    };
    let cd = quote(cwd.as_os_str())?;
    let set = match config_dir {
        Some(dir) => {
            let value = quote(dir.as_os_str())?;
            match family {
                ShellFamily::Posix => format!("export CLAUDE_CONFIG_DIR={value}"),
                ShellFamily::Fish => format!("set -gx CLAUDE_CONFIG_DIR {value}"),
                ShellFamily::Csh => format!("setenv CLAUDE_CONFIG_DIR {value}"),
            }
        }
        None => match family {
            ShellFamily::Posix => "unset CLAUDE_CONFIG_DIR".to_owned(),
            ShellFamily::Fish => "set -e CLAUDE_CONFIG_DIR".to_owned(),
            ShellFamily::Csh => "unsetenv CLAUDE_CONFIG_DIR".to_owned(),
        },
    };
    let command = match family {
        ShellFamily::Fish => format!("cd {cd}; or exit 1; {set}; exec claude"),
        ShellFamily::Posix | ShellFamily::Csh => format!("cd {cd} || exit 1; {set}; exec claude"),
    };
    for name in LOGIN_VARIABLES.iter().chain(&["ANTHROPIC_API_KEY"]) {
        env.remove(name);
    }
    Ok((
        user.shell.clone(),
        login_argv0(&user.shell),
        vec![OsString::from("-c"), OsString::from(command)],
        env,
        cwd,
    ))
}

/// 7.4 "Start of claude with personal": the value must be absolute and resolve
/// to a folder in the home; unset means `<home>/.claude`, which may be missing
/// (claude creates it there) but must not lead out of the home.
pub fn check_personal_config_dir(home: &Path, value: Option<&Path>) -> Result<(), StartFailure> {
    let home = terms::resolve(home)
        .target
        .map(|t| t.path)
        .ok_or_else(|| shared("home_unresolvable"))?;
    let (path, may_be_missing) = match value {
        Some(v) if v.is_absolute() => (v.to_owned(), false),
        Some(_) => return Err(shared("config_dir_relative")),
        None => (home.join(".claude"), true),
    };
    if may_be_missing && std::fs::symlink_metadata(&path).is_err() {
        return Ok(());
    }
    let target = terms::resolve(&path)
        .target
        .ok_or_else(|| shared("config_dir_unresolvable"))?;
    if target.kind != NodeKind::Dir || !target.path.starts_with(&home) {
        return Err(shared("config_dir_outside_home"));
    }
    Ok(())
}
