//! The environment of a PTY, built from scratch (11.1 "Start specifications on
//! the host", Unix allow list): `HOME`, `USER`, `LOGNAME` and `SHELL` of the
//! session user; `PATH` cleaned from the helper's own environment (only
//! absolute, existing folders that are not writable by group or others, judged
//! after resolution as the session user, without duplicates); `LANG`, `LC_*`
//! and `TMPDIR` from the helper's environment when present; then
//! `TERM=xterm-256color`.
//!
//! Also the session user itself ([`SessionUser`]) and the `/etc/shells` rule
//! of the profile shell.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use zeroize::Zeroizing;

/// `TERM` of every profile: the renderer of the clients is xterm (11.1, 12).
pub const TERM: &str = "xterm-256color";

/// The account the helper runs as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionUser {
    /// Its name.
    pub name: String,
    /// Its user ID.
    pub uid: u32,
    /// Its primary group ID.
    pub gid: u32,
    /// Its home, from the user database.
    pub home: PathBuf,
    /// Its login shell, from the user database.
    pub shell: PathBuf,
}

impl SessionUser {
    /// The user of this process (its real user ID) from the user database.
    pub fn current() -> std::io::Result<SessionUser> {
        let uid = nix::unistd::getuid();
        let user = nix::unistd::User::from_uid(uid)
            .map_err(std::io::Error::from)?
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "no such user"))?;
        Ok(SessionUser {
            name: user.name,
            uid: uid.as_raw(),
            gid: user.gid.as_raw(),
            home: user.dir,
            shell: user.shell,
        })
    }
}

/// An environment of `NAME=value` entries; every entry is wiped when dropped
/// (it may hold the API key of organization).
#[derive(Default)]
pub struct Environment {
    entries: Vec<Zeroizing<Vec<u8>>>,
}

impl std::fmt::Debug for Environment {
    /// Names only, never values.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.entries.iter().map(|e| {
                let name = e.split(|b| *b == b'=').next().unwrap_or_default();
                String::from_utf8_lossy(name).into_owned()
            }))
            .finish()
    }
}

impl Environment {
    /// An empty environment.
    pub fn new() -> Environment {
        Environment::default()
    }

    /// Sets `name` to `value`, replacing an earlier value. A name with `=` or
    /// NUL, or a value with NUL, is refused (`false`): execve could not carry it.
    pub fn set(&mut self, name: &str, value: impl AsRef<OsStr>) -> bool {
        let value = value.as_ref().as_bytes();
        if name.is_empty() || name.contains(['=', '\0']) || value.contains(&0) {
            return false;
        }
        let mut entry = Zeroizing::new(Vec::with_capacity(name.len() + 1 + value.len()));
        entry.extend_from_slice(name.as_bytes());
        entry.push(b'=');
        entry.extend_from_slice(value);
        self.remove(name);
        self.entries.push(entry);
        true
    }

    /// Removes `name`.
    pub fn remove(&mut self, name: &str) {
        self.entries.retain(|e| !is_entry_of(e, name));
    }

    /// The value of `name`.
    pub fn get(&self, name: &str) -> Option<&OsStr> {
        self.entries
            .iter()
            .find(|e| is_entry_of(e, name))
            .map(|e| OsStr::from_bytes(&e[name.len() + 1..]))
    }

    /// The names, in order.
    pub fn names(&self) -> Vec<String> {
        self.entries
            .iter()
            .map(|e| {
                let name = e.split(|b| *b == b'=').next().unwrap_or_default();
                String::from_utf8_lossy(name).into_owned()
            })
            .collect()
    }

    /// The `NAME=value` entries (without NUL).
    pub fn entries(&self) -> impl Iterator<Item = &[u8]> {
        self.entries.iter().map(|e| e.as_slice())
    }
}

fn is_entry_of(entry: &[u8], name: &str) -> bool {
    entry.len() > name.len() && entry.starts_with(name.as_bytes()) && entry[name.len()] == b'='
}

/// The environment every profile starts from: the allow list of 11.1 out of
/// `helper_env` (the helper's own environment) and the user database.
pub fn base_environment(
    user: &SessionUser,
    helper_env: impl IntoIterator<Item = (OsString, OsString)>,
) -> Environment {
    let mut env = Environment::new();
    env.set("HOME", &user.home);
    env.set("USER", &user.name);
    env.set("LOGNAME", &user.name);
    env.set("SHELL", &user.shell);
    let mut path = None;
    let mut passed: Vec<(String, OsString)> = Vec::new();
    for (name, value) in helper_env {
        let Some(name) = name.to_str() else { continue };
        if name == "PATH" {
            path = Some(value);
        } else if name == "LANG" || name.starts_with("LC_") || name == "TMPDIR" {
            passed.push((name.to_owned(), value));
        }
    }
    env.set("PATH", clean_path(path.as_deref().unwrap_or_default()));
    passed.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, value) in passed {
        env.set(&name, value);
    }
    env.set("TERM", TERM);
    env
}

/// The folders of a `PATH` that pass 11.1: absolute, existing, a folder after
/// resolution, not writable by group or others, each resolved folder once.
/// The resolved folders are what is kept (what was judged is what runs).
pub fn clean_path(path: &OsStr) -> OsString {
    let mut kept: Vec<PathBuf> = Vec::new();
    for part in path.as_bytes().split(|b| *b == b':') {
        let part = Path::new(OsStr::from_bytes(part));
        if !part.is_absolute() {
            continue;
        }
        let Ok(resolved) = std::fs::canonicalize(part) else {
            continue;
        };
        let Ok(metadata) = std::fs::metadata(&resolved) else {
            continue;
        };
        if !metadata.is_dir() || metadata.mode() & 0o022 != 0 {
            continue;
        }
        if resolved.as_os_str().as_bytes().contains(&b':') || kept.contains(&resolved) {
            continue;
        }
        kept.push(resolved);
    }
    let joined: Vec<Vec<u8>> = kept
        .into_iter()
        .map(|p| p.into_os_string().into_vec())
        .collect();
    OsString::from_vec(joined.join(&b':'))
}

/// Whether `shell` is an absolute path listed in `shells` (the text of
/// `/etc/shells`: one path per line, `#` comments).
pub fn listed_shell(shell: &Path, shells: &str) -> bool {
    shell.is_absolute()
        && shells
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .any(|l| Path::new(l) == shell)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn user() -> SessionUser {
        SessionUser {
            name: "alice".into(),
            uid: 1000,
            gid: 1000,
            home: PathBuf::from("/home/alice"),
            shell: PathBuf::from("/bin/bash"),
        }
    }

    #[test]
    fn path_keeps_only_closed_existing_absolute_folders_once() {
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("good");
        let group_writable = dir.path().join("gw");
        let other_writable = dir.path().join("ow");
        let link = dir.path().join("link");
        for (folder, mode) in [
            (&good, 0o755),
            (&group_writable, 0o775),
            (&other_writable, 0o757),
        ] {
            std::fs::create_dir(folder).unwrap();
            std::fs::set_permissions(folder, std::fs::Permissions::from_mode(mode)).unwrap();
        }
        std::os::unix::fs::symlink(&good, &link).unwrap();
        // The temporary folder itself may be writable by others; only the
        // folders of the PATH count.
        let good_resolved = std::fs::canonicalize(&good).unwrap();
        let missing = dir.path().join("missing");
        let parts: [&[u8]; 8] = [
            good.as_os_str().as_bytes(),
            b"relative/bin",
            group_writable.as_os_str().as_bytes(),
            other_writable.as_os_str().as_bytes(),
            link.as_os_str().as_bytes(),
            b"",
            missing.as_os_str().as_bytes(),
            good.as_os_str().as_bytes(),
        ];
        let path = OsString::from_vec(parts.join(&b':'));
        assert_eq!(clean_path(&path), good_resolved.into_os_string());
        assert_eq!(clean_path(OsStr::new("")), OsString::new());
    }

    #[test]
    fn the_base_environment_is_the_allow_list() {
        let helper_env = [
            ("PATH", "/usr/bin:/nonexistent"),
            ("LANG", "C.UTF-8"),
            ("LC_ALL", "C"),
            ("TMPDIR", "/tmp"),
            ("SECRET", "x"),
            ("LD_PRELOAD", "/evil.so"),
            ("LISTEN_FDS", "1"),
            ("TERM", "dumb"),
            ("HOME", "/root"),
        ]
        .map(|(n, v)| (OsString::from(n), OsString::from(v)));
        let env = base_environment(&user(), helper_env);
        assert_eq!(
            env.names(),
            [
                "HOME", "USER", "LOGNAME", "SHELL", "PATH", "LANG", "LC_ALL", "TMPDIR", "TERM"
            ]
        );
        assert_eq!(env.get("HOME").unwrap(), "/home/alice");
        assert_eq!(env.get("TERM").unwrap(), TERM);
        let path = env.get("PATH").unwrap().to_str().unwrap();
        assert!(path.ends_with("usr/bin"), "{path}");
        assert!(!path.contains("nonexistent"));
        assert!(env.get("SECRET").is_none() && env.get("LD_PRELOAD").is_none());
    }

    #[test]
    fn entries_refuse_what_execve_cannot_carry_and_debug_hides_values() {
        let mut env = Environment::new();
        assert!(!env.set("A=B", "x"));
        assert!(!env.set("A", OsStr::from_bytes(b"x\0y")));
        assert!(env.set("ANTHROPIC_API_KEY", "sk-secret"));
        assert!(env.set("ANTHROPIC_API_KEY", "sk-other"));
        assert_eq!(env.entries().count(), 1);
        assert!(!format!("{env:?}").contains("sk-"));
    }

    #[test]
    fn a_shell_must_be_listed_and_absolute() {
        let shells = "# /etc/shells\n/bin/sh\n  /bin/bash  \n";
        assert!(listed_shell(Path::new("/bin/bash"), shells));
        assert!(!listed_shell(Path::new("/bin/zsh"), shells));
        assert!(!listed_shell(Path::new("bash"), "bash\n"));
        assert!(!listed_shell(Path::new("# /etc/shells"), shells));
    }
}
