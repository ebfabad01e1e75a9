//! The user and group database as the doctor reads it (HD1, HD2, HD9): single
//! names through NSS (`getpwnam`, `getgrouplist`, `getgrgid`), and the list of
//! person accounts for HD9 from `/etc/passwd` and the UID range of
//! `/etc/login.defs` (`docs/decisions.md` D-156: accounts that only a network
//! directory knows cannot be listed without `getpwent`).

use std::ffi::CString;
use std::path::PathBuf;

use bothy_proto::report::SESSION_USER_NAME_PATTERN;
use nix::unistd::{Gid, Group, User};

use super::terms::Account;

/// The fixed forbidden groups of HD2.
pub const FORBIDDEN_GROUPS: [&str; 8] = [
    "admin",
    "sudo",
    "wheel",
    "Administrators",
    "docker",
    "lxd",
    "libvirt",
    "disk",
];

/// Longest session user name (the limit of Linux `useradd`; the report's
/// `os_user_max_chars` default).
pub const MAX_NAME_CHARS: usize = 32;

/// The account that `nobody` names; HD9 skips it (D-M2-42-6).
pub const NOBODY: &str = "nobody";

/// Default `UID_MIN` and `UID_MAX` of `login.defs(5)` when the file does not say.
const DEFAULT_UID_MIN: u32 = 1000;
const DEFAULT_UID_MAX: u32 = 60000;

/// One account of the user database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserEntry {
    /// The name.
    pub name: String,
    /// User ID.
    pub uid: u32,
    /// Primary group ID.
    pub gid: u32,
    /// The home folder.
    pub home: PathBuf,
    /// The login shell.
    pub shell: PathBuf,
}

impl UserEntry {
    /// The account named `name`; `Ok(None)` when there is none.
    pub fn lookup(name: &str) -> std::io::Result<Option<UserEntry>> {
        if name.is_empty() || name.contains('\0') {
            return Ok(None);
        }
        let user = User::from_name(name).map_err(std::io::Error::from)?;
        Ok(user.map(|u| UserEntry {
            name: u.name,
            uid: u.uid.as_raw(),
            gid: u.gid.as_raw(),
            home: u.dir,
            shell: u.shell,
        }))
    }

    /// The account as the checks see it: every group from `getgrouplist`.
    /// When the group list cannot be read, only the primary group counts
    /// here; HD2 then fails ([`UserEntry::groups`] is `None`), so such an
    /// account never gets a start.
    pub fn account(&self) -> Account {
        Account {
            uid: self.uid,
            gids: self.groups().unwrap_or_else(|| vec![self.gid]),
        }
    }

    /// The primary and supplementary group IDs; `None` when the group list
    /// cannot be read (a name NSS refuses, an error of `getgrouplist`).
    pub fn groups(&self) -> Option<Vec<u32>> {
        let name = CString::new(self.name.as_str()).ok()?;
        let gids = nix::unistd::getgrouplist(&name, Gid::from_raw(self.gid)).ok()?;
        let mut out: Vec<u32> = gids.into_iter().map(Gid::as_raw).collect();
        if !out.contains(&self.gid) {
            out.push(self.gid);
        }
        Some(out)
    }

    /// The forbidden groups of HD2 (the fixed list and `extra`) this account
    /// is in, sorted; `None` when its group list cannot be read, which HD2
    /// and `install` treat as a finding (fail closed).
    pub fn forbidden_groups(&self, extra: &[String]) -> Option<Vec<String>> {
        let mut out: Vec<String> = self
            .groups()?
            .into_iter()
            .filter_map(group_name)
            .filter(|g| FORBIDDEN_GROUPS.contains(&g.as_str()) || extra.iter().any(|e| e == g))
            .collect();
        out.sort();
        out.dedup();
        Some(out)
    }
}

/// The name of the group `gid`, if the database has one.
pub fn group_name(gid: u32) -> Option<String> {
    Group::from_gid(Gid::from_raw(gid))
        .ok()
        .flatten()
        .map(|g| g.name)
}

/// Whether `name` may be a session user name: the report's pattern
/// ([`SESSION_USER_NAME_PATTERN`], ASCII) and at most [`MAX_NAME_CHARS`].
pub fn valid_session_user_name(name: &str) -> bool {
    debug_assert_eq!(SESSION_USER_NAME_PATTERN, "^[A-Za-z_][A-Za-z0-9_.-]*$");
    let mut chars = name.chars();
    let Some(first) = chars.next() else {
        return false;
    };
    name.chars().count() <= MAX_NAME_CHARS
        && (first.is_ascii_alphabetic() || first == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// `UID_MIN` and `UID_MAX` of a `login.defs` text (defaults where absent).
pub fn uid_range(login_defs: &str) -> (u32, u32) {
    let mut min = DEFAULT_UID_MIN;
    let mut max = DEFAULT_UID_MAX;
    for line in login_defs.lines() {
        let mut words = line.split_whitespace();
        let (Some(key), Some(value)) = (words.next(), words.next()) else {
            continue;
        };
        let Ok(value) = value.parse::<u32>() else {
            continue;
        };
        match key {
            "UID_MIN" => min = value,
            "UID_MAX" => max = value,
            _ => {}
        }
    }
    (min, max)
}

/// The person accounts of a `passwd` text: user ID from `uid_min` to
/// `uid_max`, `nobody` skipped (2.2, "Which accounts count").
pub fn person_accounts(passwd: &str, uid_min: u32, uid_max: u32) -> Vec<UserEntry> {
    passwd
        .lines()
        .filter_map(parse_passwd_line)
        .filter(|u| u.uid >= uid_min && u.uid <= uid_max && u.name != NOBODY)
        .collect()
}

fn parse_passwd_line(line: &str) -> Option<UserEntry> {
    if line.starts_with('#') || line.starts_with('+') || line.starts_with('-') {
        return None;
    }
    let fields: Vec<&str> = line.split(':').collect();
    if fields.len() != 7 || fields[0].is_empty() {
        return None;
    }
    Some(UserEntry {
        name: fields[0].to_owned(),
        uid: fields[2].parse().ok()?,
        gid: fields[3].parse().ok()?,
        home: PathBuf::from(fields[5]),
        shell: PathBuf::from(fields[6]),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A group list that cannot be read is a finding of HD2, never "no
    /// forbidden group" (fail closed); the account's writability checks
    /// still count its primary group.
    #[test]
    fn an_unreadable_group_list_fails_closed() {
        let entry = UserEntry {
            name: "no\0such".into(),
            uid: 54_321,
            gid: 54_321,
            home: PathBuf::from("/nonexistent"),
            shell: PathBuf::from("/bin/sh"),
        };
        assert_eq!(entry.groups(), None);
        assert_eq!(entry.forbidden_groups(&[]), None);
        assert_eq!(entry.account().gids, vec![54_321]);
        let root = UserEntry::lookup("root").unwrap().expect("root");
        assert_eq!(root.forbidden_groups(&[]), Some(Vec::new()));
        assert_eq!(
            root.forbidden_groups(&["root".to_owned()]),
            Some(vec!["root".to_owned()])
        );
    }

    #[test]
    fn names() {
        for ok in ["alice", "_x", "A.b-c_9", &"a".repeat(32)] {
            assert!(valid_session_user_name(ok), "{ok}");
        }
        for bad in ["", "9a", "-a", "a b", "ä", "a:b", &"a".repeat(33), "a/b"] {
            assert!(!valid_session_user_name(bad), "{bad}");
        }
    }

    #[test]
    fn login_defs_and_passwd() {
        assert_eq!(uid_range(""), (1000, 60000));
        assert_eq!(
            uid_range("# c\nUID_MIN\t\t 2000\nUID_MAX 3000\nGID_MIN 5\n"),
            (2000, 3000)
        );
        let passwd = "root:x:0:0:root:/root:/bin/bash\n\
                      daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n\
                      alice:x:1000:1000::/home/alice:/bin/bash\n\
                      nobody:x:65534:65534::/nonexistent:/usr/sbin/nologin\n\
                      broken:x:zz:1::/x:/bin/sh\n\
                      bob:x:2500:2500::/home/bob:/bin/sh\n";
        let names: Vec<String> = person_accounts(passwd, 1000, 60000)
            .into_iter()
            .map(|u| u.name)
            .collect();
        assert_eq!(names, ["alice", "bob"]);
        let names: Vec<String> = person_accounts(passwd, 1000, 70000)
            .into_iter()
            .map(|u| u.name)
            .collect();
        assert_eq!(names, ["alice", "bob"], "nobody is skipped by name");
    }

    #[test]
    fn root_is_in_the_database() {
        let root = UserEntry::lookup("root").expect("database").expect("root");
        assert_eq!(root.uid, 0);
        assert!(root.groups().expect("root's groups").contains(&0));
        assert_eq!(group_name(0).as_deref(), Some("root"));
        assert_eq!(UserEntry::lookup("no-such-user-bothy").expect("db"), None);
    }
}
