//! The peer rule of the confirmation endpoint (6.4 "Peer rule"): the user of
//! the connected process (SO_PEERCRED), judged at the connection and again
//! before every request, is neither the service user, nor a session user of
//! `host_service.session_users`, nor a former session user (bound in
//! `bindings.json`, no longer listed), and it is the user of the active
//! session on seat0 as `loginctl` reports it. Anything the service cannot
//! establish (the user database, `bindings.json`, `loginctl`) refuses: the
//! rule fails closed (D-203).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use crate::doctor::accounts::UserEntry;
use crate::state::StateDir;

/// Where `loginctl` is looked for, in this order (never through `PATH`).
pub const LOGINCTL: [&str; 2] = ["/usr/bin/loginctl", "/bin/loginctl"];

/// With the feature `test-seams` only: the program that stands in for
/// `loginctl` (this machine runs no logind; DESIGN §4).
pub const LOGINCTL_ENV: &str = "BOTHY_HOST_TEST_LOGINCTL";

/// How long one call of `loginctl` may take.
const LOGINCTL_TIMEOUT: Duration = Duration::from_secs(5);

/// The most `loginctl` may print for one property.
const LOGINCTL_OUTPUT: usize = 4096;

/// Why a peer was refused (the `reason` of `confirm_peer_refused`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The peer credentials could not be read.
    NoCredentials,
    /// The service user (or the service's own user ID).
    ServiceUser,
    /// A user of `host_service.session_users`.
    SessionUser,
    /// A former session user.
    FormerSessionUser,
    /// Not the user of the active session on seat0.
    NotSeatOwner,
    /// The user database could not be read.
    UserDatabase,
    /// `bindings.json` could not be read, so former session users are unknown.
    Bindings,
    /// `loginctl` is missing, failed, timed out or printed no usable answer.
    SeatUnknown,
}

impl Refusal {
    /// The code in the log.
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::NoCredentials => "no_credentials",
            Refusal::ServiceUser => "service_user",
            Refusal::SessionUser => "session_user",
            Refusal::FormerSessionUser => "former_session_user",
            Refusal::NotSeatOwner => "not_seat_owner",
            Refusal::UserDatabase => "user_database_unavailable",
            Refusal::Bindings => "bindings_unreadable",
            Refusal::SeatUnknown => "seat_owner_unknown",
        }
    }
}

/// What the rule compares a peer against.
#[derive(Debug)]
pub struct PeerRule {
    service_user: String,
    session_users: Vec<String>,
    state: StateDir,
    loginctl: Option<PathBuf>,
}

impl PeerRule {
    /// The rule of a service with this service user, these session users and
    /// this state directory.
    pub fn new(service_user: &str, session_users: &[String], state_dir: &Path) -> PeerRule {
        PeerRule {
            service_user: service_user.to_owned(),
            session_users: session_users.to_vec(),
            state: StateDir::new(state_dir, None),
            loginctl: loginctl_program_from(|name| std::env::var_os(name)),
        }
    }

    /// Judges the peer with user ID `uid` now.
    pub async fn judge(&self, uid: u32) -> Result<(), Refusal> {
        self.excluded(uid)?;
        let program = self.loginctl.as_deref().ok_or(Refusal::SeatUnknown)?;
        let owner = seat0_owner(program).await?;
        if owner != uid {
            return Err(Refusal::NotSeatOwner);
        }
        Ok(())
    }

    /// The accounts that never confirm: service user, session users, former
    /// session users.
    fn excluded(&self, uid: u32) -> Result<(), Refusal> {
        if uid == nix::unistd::geteuid().as_raw() || uid == nix::unistd::getuid().as_raw() {
            return Err(Refusal::ServiceUser);
        }
        if uid_of(&self.service_user)? == Some(uid) {
            return Err(Refusal::ServiceUser);
        }
        for name in &self.session_users {
            if uid_of(name)? == Some(uid) {
                return Err(Refusal::SessionUser);
            }
        }
        let bindings = self.state.load_bindings().map_err(|_| Refusal::Bindings)?;
        for name in bindings.keys() {
            if !self.session_users.contains(name) && uid_of(name)? == Some(uid) {
                return Err(Refusal::FormerSessionUser);
            }
        }
        Ok(())
    }
}

/// The user ID of `name`; `None` when the user database has no such account
/// (it can then be no peer).
fn uid_of(name: &str) -> Result<Option<u32>, Refusal> {
    UserEntry::lookup(name)
        .map(|entry| entry.map(|e| e.uid))
        .map_err(|_| Refusal::UserDatabase)
}

/// The `loginctl` to run: the first of [`LOGINCTL`] that exists, or, only
/// with the feature `test-seams`, the program [`LOGINCTL_ENV`] names.
pub fn loginctl_program_from(env: impl Fn(&str) -> Option<std::ffi::OsString>) -> Option<PathBuf> {
    if let Some(program) = crate::seams::path_from(env, LOGINCTL_ENV) {
        return Some(program);
    }
    LOGINCTL
        .iter()
        .map(PathBuf::from)
        .find(|path| path.is_file())
}

/// The user ID of the active session on seat0.
pub async fn seat0_owner(loginctl: &Path) -> Result<u32, Refusal> {
    let session = run_loginctl(
        loginctl,
        &["show-seat", "seat0", "--property=ActiveSession", "--value"],
    )
    .await?;
    let session = parse_session_id(&session).ok_or(Refusal::SeatUnknown)?;
    let user = run_loginctl(
        loginctl,
        &["show-session", "--property=User", "--value", "--", &session],
    )
    .await?;
    parse_uid(&user).ok_or(Refusal::SeatUnknown)
}

/// Runs `loginctl --no-pager ARGS` with a fixed environment, bounded in time
/// and output; its standard output.
async fn run_loginctl(program: &Path, args: &[&str]) -> Result<Vec<u8>, Refusal> {
    let mut command = tokio::process::Command::new(program);
    command
        .arg("--no-pager")
        .args(args)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("LC_ALL", "C")
        .env("SYSTEMD_PAGER", "")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    let output = tokio::time::timeout(LOGINCTL_TIMEOUT, command.output())
        .await
        .map_err(|_| Refusal::SeatUnknown)?
        .map_err(|_| Refusal::SeatUnknown)?;
    if !output.status.success() || output.stdout.len() > LOGINCTL_OUTPUT {
        return Err(Refusal::SeatUnknown);
    }
    Ok(output.stdout)
}

/// One line with a session ID as logind names sessions (`2`, `c1`,
/// `session-3`): ASCII letters, digits, `-` and `_`, not starting with `-`.
/// An empty answer (no active session) is `None`.
pub fn parse_session_id(output: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(output).ok()?;
    let text = text.strip_suffix('\n').unwrap_or(text);
    let valid = !text.is_empty()
        && text.len() <= 64
        && !text.starts_with('-')
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    valid.then(|| text.to_owned())
}

/// One line with a decimal user ID.
pub fn parse_uid(output: &[u8]) -> Option<u32> {
    let text = std::str::from_utf8(output).ok()?;
    let text = text.strip_suffix('\n').unwrap_or(text);
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) || text.len() > 10 {
        return None;
    }
    text.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loginctl_answers_are_read_strictly() {
        assert_eq!(parse_session_id(b"2\n").as_deref(), Some("2"));
        assert_eq!(parse_session_id(b"c17\n").as_deref(), Some("c17"));
        assert_eq!(parse_session_id(b"session-3").as_deref(), Some("session-3"));
        for bad in [
            &b"\n"[..],
            b"",
            b"-p\n",
            b"2 3\n",
            b"2\n3\n",
            b"2\n\n",
            b"../x\n",
            b"\xff\n",
        ] {
            assert_eq!(parse_session_id(bad), None, "{bad:?}");
        }
        assert_eq!(parse_uid(b"1000\n"), Some(1000));
        assert_eq!(parse_uid(b"0\n"), Some(0));
        for bad in [
            &b"\n"[..],
            b"",
            b"-1\n",
            b"+5\n",
            b"1000 \n",
            b"alice\n",
            b"4294967296\n",
            b"1000\n1001\n",
        ] {
            assert_eq!(parse_uid(bad), None, "{bad:?}");
        }
    }

    #[cfg(not(feature = "test-seams"))]
    #[test]
    fn without_test_seams_the_variable_is_ignored() {
        let program = loginctl_program_from(|_| Some("/nonexistent/loginctl".into()));
        assert!(program.is_none_or(|p| LOGINCTL.iter().any(|l| Path::new(l) == p)));
    }

    #[cfg(feature = "test-seams")]
    #[test]
    fn with_test_seams_the_variable_names_the_program() {
        let program = loginctl_program_from(|name| {
            (name == LOGINCTL_ENV).then(|| "/var/lib/test/loginctl".into())
        });
        assert_eq!(program, Some(PathBuf::from("/var/lib/test/loginctl")));
    }

    #[tokio::test]
    async fn a_failing_or_silent_loginctl_refuses() {
        // No logind runs here: the real loginctl fails, which refuses.
        if let Some(real) = LOGINCTL.iter().map(Path::new).find(|p| p.is_file()) {
            assert_eq!(seat0_owner(real).await, Err(Refusal::SeatUnknown));
        }
        assert_eq!(
            seat0_owner(Path::new("/nonexistent/loginctl")).await,
            Err(Refusal::SeatUnknown)
        );
        // `true` succeeds with no output: no active session.
        assert_eq!(
            seat0_owner(Path::new("/bin/true")).await,
            Err(Refusal::SeatUnknown)
        );
    }
}
