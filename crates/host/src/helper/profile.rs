//! What each profile starts (11.1 "Start specifications on the host"): the
//! [`SpawnSpec`] of a [`PtyStart`].
//!
//! - shell: the shell of the user database, an absolute path listed in
//!   `/etc/shells` (else `pty_failed`), as a login shell (`argv[0]` = `-` and
//!   its base name), in the home.
//! - command: the configured program resolved (as the session user) to an
//!   absolute file, with its arguments, in the home.
//! - claude: [`claude_spawn_spec`], built by the doctor's side (it needs the
//!   HD6/HD7/HD11 state of this helper).
//!
//! Logs name codes only, never a path of the session user.

use std::ffi::OsString;
use std::path::Path;
use std::sync::Mutex;

use crate::channel::{PtyStart, StartFailure, StartProgram};
use crate::doctor::helper_side::HelperState;

use super::env::{Environment, SessionUser, base_environment, listed_shell};
use super::pty::{SpawnSpec, login_argv0};

/// The list of login shells.
pub const SHELLS_FILE: &str = "/etc/shells";

/// What a start needs from the helper besides the start itself.
#[derive(Debug)]
pub struct StartContext<'a> {
    /// The session user (this process's user).
    pub user: &'a SessionUser,
    /// The helper's own environment (the source of PATH, LANG, LC_*, TMPDIR).
    pub helper_env: &'a [(OsString, OsString)],
    /// The doctor's state of this helper, locked only by the claude starts (a
    /// long check run holds it; shell and command starts never wait for it).
    pub state: &'a Mutex<HelperState>,
}

/// The spawn of `start`, or the reason it cannot start.
pub fn spawn_spec(start: &PtyStart, ctx: &StartContext<'_>) -> Result<SpawnSpec, StartFailure> {
    let env = base_environment(ctx.user, ctx.helper_env.iter().cloned());
    match &start.program {
        StartProgram::Shell => {
            let shells = std::fs::read_to_string(SHELLS_FILE).map_err(|_| {
                tracing::warn!(code = "shells_unreadable", "pty_failed");
                StartFailure::PtyFailed
            })?;
            shell_spec(start, ctx.user, env, &shells)
        }
        StartProgram::Command { program, args } => {
            command_spec(start, ctx.user, env, program, args)
        }
        StartProgram::ClaudeOrganization { .. } | StartProgram::ClaudePersonal { .. } => {
            claude_spawn_spec(start, ctx, env)
        }
    }
}

/// The login shell of the user database, if `/etc/shells` (the text `shells`)
/// lists it.
pub fn shell_spec(
    start: &PtyStart,
    user: &SessionUser,
    env: Environment,
    shells: &str,
) -> Result<SpawnSpec, StartFailure> {
    if !listed_shell(&user.shell, shells) {
        tracing::warn!(code = "shell_not_listed", "pty_failed");
        return Err(StartFailure::PtyFailed);
    }
    Ok(SpawnSpec {
        program: user.shell.clone(),
        argv0: login_argv0(&user.shell),
        args: Vec::new(),
        env,
        cwd: user.home.clone(),
        size: start.size,
        session_id: start.session_id,
    })
}

/// A fixed command: the program resolved to an absolute file.
pub fn command_spec(
    start: &PtyStart,
    user: &SessionUser,
    env: Environment,
    program: &Path,
    args: &[String],
) -> Result<SpawnSpec, StartFailure> {
    let resolved = std::fs::canonicalize(program)
        .ok()
        .filter(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file()))
        .ok_or_else(|| {
            tracing::warn!(code = "program_unresolvable", "pty_failed");
            StartFailure::PtyFailed
        })?;
    Ok(SpawnSpec {
        argv0: resolved.clone().into_os_string(),
        program: resolved,
        args: args.iter().map(OsString::from).collect(),
        env,
        cwd: user.home.clone(),
        size: start.size,
        session_id: start.session_id,
    })
}

/// The profile claude (7.4 "Start of claude with organization" and "with
/// personal", 11.1): built by the doctor's side
/// ([`crate::doctor::claude_start`]), which holds the HD6/HD7/HD11 state of
/// this helper: the resolved `claude_bin`, the identities of the working
/// directories, the login-shell probe.
pub fn claude_spawn_spec(
    start: &PtyStart,
    ctx: &StartContext<'_>,
    env: Environment,
) -> Result<SpawnSpec, StartFailure> {
    crate::doctor::claude_start::claude_spawn_spec(start, ctx.user, ctx.state, env)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use bothy_proto::frame::TerminalSize;
    use std::path::PathBuf;
    use uuid::Uuid;

    fn start(program: StartProgram) -> PtyStart {
        PtyStart {
            session_id: Uuid::nil(),
            size: TerminalSize::new(80, 24).unwrap(),
            program,
        }
    }

    fn user(shell: &str) -> SessionUser {
        SessionUser {
            name: "a".into(),
            uid: 1,
            gid: 1,
            home: PathBuf::from("/home/a"),
            shell: PathBuf::from(shell),
        }
    }

    #[test]
    fn the_shell_is_a_listed_login_shell_in_the_home() {
        let s = start(StartProgram::Shell);
        let spec = shell_spec(&s, &user("/bin/bash"), Environment::new(), "/bin/bash\n").unwrap();
        assert_eq!(spec.program, PathBuf::from("/bin/bash"));
        assert_eq!(spec.argv0, OsString::from("-bash"));
        assert!(spec.args.is_empty());
        assert_eq!(spec.cwd, PathBuf::from("/home/a"));
        assert_eq!(
            shell_spec(&s, &user("/bin/zsh"), Environment::new(), "/bin/bash\n").unwrap_err(),
            StartFailure::PtyFailed
        );
        assert_eq!(
            shell_spec(&s, &user("bash"), Environment::new(), "bash\n").unwrap_err(),
            StartFailure::PtyFailed
        );
    }

    #[test]
    fn a_command_is_resolved_or_refused() {
        let s = start(StartProgram::Shell);
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("sh-link");
        std::os::unix::fs::symlink("/bin/sh", &link).unwrap();
        let spec = command_spec(
            &s,
            &user("/bin/sh"),
            Environment::new(),
            &link,
            &["-c".into()],
        )
        .unwrap();
        assert_eq!(spec.program, std::fs::canonicalize("/bin/sh").unwrap());
        assert_eq!(spec.args, [OsString::from("-c")]);
        assert_eq!(
            command_spec(&s, &user("/bin/sh"), Environment::new(), dir.path(), &[]).unwrap_err(),
            StartFailure::PtyFailed
        );
        assert_eq!(
            command_spec(
                &s,
                &user("/bin/sh"),
                Environment::new(),
                &dir.path().join("missing"),
                &[]
            )
            .unwrap_err(),
            StartFailure::PtyFailed
        );
    }
}
