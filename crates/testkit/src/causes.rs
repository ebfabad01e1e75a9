//! Causes of TM-T13 on the real machine, each undone by a guard on drop (also
//! when the test panics): a user in a group, and a passwordless sudo rule.
//! Used by `doctor_t13` (the checks) and `e2e_t13` (the service); they take
//! the account's name, so either test's user type fits.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

fn run(program: &str, args: &[&str]) {
    let out = Command::new(program).args(args).output().expect(program);
    assert!(out.status.success(), "{program} {args:?}: {out:?}");
}

/// The account `user` added to `group` (created when missing and then removed
/// again on drop; the membership itself ends with the test user).
#[derive(Debug)]
pub struct Membership {
    created: Option<String>,
}

impl Membership {
    pub fn add(user: &str, group: &str) -> Membership {
        let exists = Command::new("getent")
            .args(["group", group])
            .output()
            .expect("getent")
            .status
            .success();
        let created = if exists {
            None
        } else {
            run("groupadd", &[group]);
            Some(group.to_owned())
        };
        let membership = Membership { created };
        run("usermod", &["-aG", group, user]);
        membership
    }
}

impl Drop for Membership {
    fn drop(&mut self) {
        if let Some(group) = &self.created {
            let _ = Command::new("groupdel").arg(group).output();
        }
    }
}

/// A rule `user ALL=(ALL) NOPASSWD: ALL` in /etc/sudoers.d (root's, 0440),
/// removed on drop. Needs the real sudo (`.ci/run` installs it).
#[derive(Debug)]
pub struct SudoRule(PathBuf);

impl SudoRule {
    pub fn passwordless(user: &str) -> SudoRule {
        assert!(
            Path::new("/usr/bin/sudo").exists(),
            "sudo is needed: install it (apt-get install sudo; .ci/run does this)"
        );
        let rule = SudoRule(Path::new("/etc/sudoers.d").join(format!("bothy-test-{user}")));
        std::fs::write(&rule.0, format!("{user} ALL=(ALL) NOPASSWD: ALL\n"))
            .expect("sudoers.d rule");
        std::fs::set_permissions(&rule.0, std::fs::Permissions::from_mode(0o440)).expect("chmod");
        rule
    }
}

impl Drop for SudoRule {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
