//! HD6 in the account of a session user (7.4): `claude auth status` only through
//! the resolved `host_service.claude_bin` with an environment the helper sets
//! itself, the presence of the login locations, and the login-shell probe.
//!
//! * `claude auth status`: `HOME`, `CLAUDE_CONFIG_DIR` of the check (absent for
//!   the default folder) and `PATH` = the fixed search list; nothing else, no
//!   startup files (no shell runs). Bounded by `host_service.auth_status_timeout`.
//!   Fail closed ("Fail closed and unknown declaration"): an `authMethod`
//!   outside the six, output that is not JSON, a timeout or an exit code other
//!   than 0 and 1 is unknown.
//! * The login-shell probe: the login shell of the user (`argv[0]` = `-` and the
//!   base name, the convention of login(1)) reads its startup files and then
//!   `exec`s `bothy-host login-probe <nonce>`, which prints only whether
//!   `CLAUDE_CODE_OAUTH_TOKEN` is set and the value of `CLAUDE_CONFIG_DIR` —
//!   never a token. The nonce marks our line among whatever the startup files
//!   print.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use bothy_proto::json::{self, Object};
use serde_json::json;

use super::bounded;

/// The values of `authMethod` (7.4, cli-reference).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthMethod {
    /// `none`
    None,
    /// `claude.ai`: a subscription login.
    ClaudeAi,
    /// `oauth_token`: a subscription token.
    OauthToken,
    /// `api_key`
    ApiKey,
    /// `api_key_helper`
    ApiKeyHelper,
    /// `third_party`
    ThirdParty,
}

impl AuthMethod {
    /// The value of `authMethod`.
    pub fn parse(text: &str) -> Option<AuthMethod> {
        Some(match text {
            "none" => AuthMethod::None,
            "claude.ai" => AuthMethod::ClaudeAi,
            "oauth_token" => AuthMethod::OauthToken,
            "api_key" => AuthMethod::ApiKey,
            "api_key_helper" => AuthMethod::ApiKeyHelper,
            "third_party" => AuthMethod::ThirdParty,
            _ => return None,
        })
    }

    /// Whether this is a subscription login (7.4: claude.ai or oauth_token).
    pub fn is_subscription(self) -> bool {
        matches!(self, AuthMethod::ClaudeAi | AuthMethod::OauthToken)
    }
}

/// Largest output of `claude auth status` read.
const MAX_STATUS_BYTES: usize = 64 * 1024;
/// Largest output of the login shell read.
const MAX_PROBE_BYTES: usize = 256 * 1024;

/// Reads the output of `claude auth status`: exit code 0 or 1, one JSON object
/// with a string `authMethod` among the six. Anything else is `None` (unknown).
pub fn parse_auth_status(exit_code: Option<i32>, stdout: &[u8]) -> Option<AuthMethod> {
    if !matches!(exit_code, Some(0 | 1)) {
        return None;
    }
    let value: serde_json::Value = serde_json::from_slice(stdout).ok()?;
    AuthMethod::parse(value.as_object()?.get("authMethod")?.as_str()?)
}

/// Runs `program auth status` (module docs); `None` is unknown.
pub fn auth_status(
    program: &Path,
    home: &Path,
    config_dir: Option<&Path>,
    search_path: &[PathBuf],
    timeout: Duration,
) -> Option<AuthMethod> {
    let mut command = Command::new(program);
    command
        .args(["auth", "status"])
        .env_clear()
        .env("HOME", home)
        .env("PATH", join_path(search_path))
        .current_dir(home);
    if let Some(dir) = config_dir {
        command.env("CLAUDE_CONFIG_DIR", dir);
    }
    let done = bounded::run(&mut command, timeout, MAX_STATUS_BYTES).ok()?;
    if done.truncated {
        return None;
    }
    parse_auth_status(done.status.code(), &done.stdout)
}

/// `PATH` of the folders, in order.
pub fn join_path(folders: &[PathBuf]) -> OsString {
    let parts: Vec<&[u8]> = folders.iter().map(|f| f.as_os_str().as_bytes()).collect();
    OsString::from(OsStr::from_bytes(&parts.join(&b':')))
}

/// What the login shell of a session user sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoginShell {
    /// `CLAUDE_CODE_OAUTH_TOKEN` is set (its value is never read).
    pub oauth_token: bool,
    /// The value of `CLAUDE_CONFIG_DIR`, if set.
    pub config_dir: Option<PathBuf>,
}

/// Why the login-shell probe gave no answer (7.4: a timeout or a failed shell
/// gives pty_failed at a start, auth_status_unknown in HD6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ProbeError {
    /// The shell did not end within `host_service.auth_status_timeout`.
    #[error("the login shell did not end in time")]
    Timeout,
    /// The shell could not start, or its answer is missing or malformed.
    #[error("the login shell gave no answer")]
    Failed,
}

/// The user a login shell runs for.
#[derive(Debug, Clone, Copy)]
pub struct ShellUser<'a> {
    /// Its name (`USER`, `LOGNAME`).
    pub name: &'a str,
    /// Its home.
    pub home: &'a Path,
    /// Its login shell.
    pub shell: &'a Path,
}

/// The shell families whose syntax the commands of 7.4 are written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShellFamily {
    /// sh, bash, dash, zsh, ksh and the like.
    Posix,
    /// fish.
    Fish,
    /// csh and tcsh.
    Csh,
}

impl ShellFamily {
    /// The family of a shell by its base name.
    pub fn of(shell: &Path) -> ShellFamily {
        match shell.file_name().and_then(OsStr::to_str) {
            Some("fish") => ShellFamily::Fish,
            Some("csh" | "tcsh") => ShellFamily::Csh,
            _ => ShellFamily::Posix,
        }
    }

    /// `text` as one single-quoted word of this family; `None` for text no
    /// quoting of the family carries safely (control characters, and for csh
    /// `!`, which csh expands even in single quotes).
    pub fn quote(self, text: &str) -> Option<String> {
        if text.chars().any(char::is_control) {
            return None;
        }
        match self {
            ShellFamily::Posix => Some(format!("'{}'", text.replace('\'', r"'\''"))),
            ShellFamily::Fish => Some(format!(
                "'{}'",
                text.replace('\\', r"\\").replace('\'', r"\'")
            )),
            ShellFamily::Csh if text.contains('!') => None,
            ShellFamily::Csh => Some(format!("'{}'", text.replace('\'', r"'\''"))),
        }
    }
}

/// A command line `shell` runs as a login shell: `argv[0]` is `-` plus the base
/// name of the shell (login(1)), then `-c command`.
pub fn login_shell_command(user: ShellUser<'_>, command: &str) -> Command {
    let base = user
        .shell
        .file_name()
        .map(|n| n.as_bytes().to_vec())
        .unwrap_or_default();
    let argv0 = OsString::from(OsStr::from_bytes(&[b"-".as_slice(), &base].concat()));
    let mut c = Command::new(user.shell);
    c.arg0(argv0)
        .arg("-c")
        .arg(command)
        .env_clear()
        .env("HOME", user.home)
        .env("USER", user.name)
        .env("LOGNAME", user.name)
        .env("SHELL", user.shell)
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .current_dir(user.home);
    c
}

/// Runs the login-shell probe of `user` with `probe_program` (the
/// `bothy-host` binary) as the last command of the shell.
pub fn login_shell_probe(
    user: ShellUser<'_>,
    probe_program: &Path,
    timeout: Duration,
) -> Result<LoginShell, ProbeError> {
    let family = ShellFamily::of(user.shell);
    let program = probe_program
        .to_str()
        .and_then(|p| family.quote(p))
        .ok_or(ProbeError::Failed)?;
    let nonce = nonce().ok_or(ProbeError::Failed)?;
    let command = format!("exec {program} login-probe {nonce}");
    let mut shell = login_shell_command(user, &command);
    let done = match bounded::run(&mut shell, timeout, MAX_PROBE_BYTES) {
        Ok(done) => done,
        Err(bounded::RunError::Timeout) => return Err(ProbeError::Timeout),
        Err(bounded::RunError::Spawn) => return Err(ProbeError::Failed),
    };
    if done.status.code() != Some(0) {
        return Err(ProbeError::Failed);
    }
    parse_probe_output(&done.stdout, &nonce).ok_or(ProbeError::Failed)
}

fn nonce() -> Option<String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).ok()?;
    Some(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// The marker that opens the probe's line.
fn marker(nonce: &str) -> String {
    format!("bothy-login-probe-{nonce}:")
}

/// Finds the last line the probe printed after its marker.
pub fn parse_probe_output(stdout: &[u8], nonce: &str) -> Option<LoginShell> {
    let marker = marker(nonce);
    let text = std::str::from_utf8(stdout).ok()?;
    let at = text.rfind(&marker)?;
    let line = text[at + marker.len()..].lines().next()?;
    let value = json::parse(line.as_bytes(), MAX_PROBE_BYTES).ok()?;
    let o = Object::root(&value, &["oauth_token", "config_dir"]).ok()?;
    let config_dir = match o.opt_member("config_dir") {
        None => None,
        Some(member) => Some(PathBuf::from(member.as_str().ok()?)),
    };
    Some(LoginShell {
        oauth_token: o.bool("oauth_token").ok()?,
        config_dir,
    })
}

/// `bothy-host login-probe <nonce>`: what the login shell `exec`s. Prints the
/// marker and one JSON line: whether `CLAUDE_CODE_OAUTH_TOKEN` is set, and the
/// value of `CLAUDE_CONFIG_DIR` when it is set (a value that is not UTF-8 is
/// printed as an empty string: not absolute, so it never passes).
pub fn login_probe_command(nonce: &str) -> i32 {
    use std::io::Write;
    if nonce.is_empty() || !nonce.bytes().all(|b| b.is_ascii_hexdigit()) {
        return 2;
    }
    let mut line = serde_json::Map::new();
    line.insert(
        "oauth_token".into(),
        std::env::var_os("CLAUDE_CODE_OAUTH_TOKEN").is_some().into(),
    );
    if let Some(dir) = std::env::var_os("CLAUDE_CONFIG_DIR") {
        line.insert("config_dir".into(), dir.to_str().unwrap_or_default().into());
    }
    let text = format!("\n{}{}\n", marker(nonce), json!(line));
    let mut out = std::io::stdout().lock();
    if out
        .write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .is_err()
    {
        return 1;
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auth_status_is_parsed_fail_closed() {
        let ok = |m: &str| format!(r#"{{"loggedIn":true,"authMethod":"{m}","email":null}}"#);
        assert_eq!(
            parse_auth_status(Some(0), ok("claude.ai").as_bytes()),
            Some(AuthMethod::ClaudeAi)
        );
        assert_eq!(
            parse_auth_status(Some(1), br#"{"loggedIn":false,"authMethod":"none"}"#),
            Some(AuthMethod::None)
        );
        for method in [
            "none",
            "claude.ai",
            "oauth_token",
            "api_key",
            "api_key_helper",
            "third_party",
        ] {
            assert!(
                parse_auth_status(Some(0), ok(method).as_bytes()).is_some(),
                "{method}"
            );
        }
        assert_eq!(parse_auth_status(Some(2), ok("none").as_bytes()), None);
        assert_eq!(parse_auth_status(None, ok("none").as_bytes()), None);
        assert_eq!(parse_auth_status(Some(0), ok("Claude.ai").as_bytes()), None);
        assert_eq!(parse_auth_status(Some(0), ok("console").as_bytes()), None);
        assert_eq!(
            parse_auth_status(Some(0), b"Logged in with claude.ai"),
            None
        );
        assert_eq!(parse_auth_status(Some(0), br#"{"authMethod":7}"#), None);
        assert_eq!(parse_auth_status(Some(0), br#"["authMethod"]"#), None);
        assert!(AuthMethod::OauthToken.is_subscription());
        assert!(!AuthMethod::ApiKey.is_subscription());
    }

    #[test]
    fn probe_output_takes_the_last_marked_line() {
        let nonce = "ab12";
        let out = format!(
            "welcome\nbothy-login-probe-{nonce}:{{\"oauth_token\":true}}\nnoise\n\nbothy-login-probe-{nonce}:{{\"oauth_token\":false,\"config_dir\":\"/home/a/.cc\"}}\n"
        );
        assert_eq!(
            parse_probe_output(out.as_bytes(), nonce),
            Some(LoginShell {
                oauth_token: false,
                config_dir: Some("/home/a/.cc".into())
            })
        );
        assert_eq!(parse_probe_output(b"nothing", nonce), None);
        assert_eq!(
            parse_probe_output(b"bothy-login-probe-ab12:{\"oauth_token\":1}", nonce),
            None
        );
        assert_eq!(
            parse_probe_output(b"bothy-login-probe-ffff:{\"oauth_token\":true}", nonce),
            None
        );
    }

    #[test]
    fn quoting_per_shell_family() {
        assert_eq!(
            ShellFamily::of(Path::new("/usr/bin/fish")),
            ShellFamily::Fish
        );
        assert_eq!(ShellFamily::of(Path::new("/bin/tcsh")), ShellFamily::Csh);
        assert_eq!(ShellFamily::of(Path::new("/bin/bash")), ShellFamily::Posix);
        assert_eq!(
            ShellFamily::Posix.quote("/home/o'neil/x").as_deref(),
            Some(r"'/home/o'\''neil/x'")
        );
        assert_eq!(
            ShellFamily::Fish.quote(r"/a\b'c").as_deref(),
            Some(r"'/a\\b\'c'")
        );
        assert_eq!(ShellFamily::Csh.quote("/a!b"), None);
        assert_eq!(ShellFamily::Posix.quote("/a\nb"), None);
    }
}
