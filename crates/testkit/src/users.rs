//! [`TestUser`]: a real account made with `useradd` for one test, with a unique
//! name (`bt<8 hex><tag>`), a home of mode 0700 and `/bin/bash` as its shell.
//! Dropping it kills every process of the account and removes it with its home.
//! [`Accounts`] does the same for accounts a command under test creates.

use std::path::PathBuf;
use std::process::Command;

/// A real OS user that lives as long as this value.
#[derive(Debug)]
pub struct TestUser {
    /// The account name.
    pub name: String,
    /// Its user ID.
    pub uid: u32,
    /// Its primary group ID.
    pub gid: u32,
    /// Its home.
    pub home: PathBuf,
}

impl TestUser {
    /// Creates an account whose name ends in `tag` (at most 6 characters of
    /// `[a-z0-9]`). Panics when not root or when `useradd` fails.
    pub fn create(tag: &str) -> TestUser {
        assert!(tag.len() <= 6, "tag too long");
        let name = unique_name(tag);
        let status = Command::new("useradd")
            // The home is 0700 from its creation: with the default UMASK 022
            // it would be 0755 until the chmod below, and HD9 of a scenario
            // running at that moment would refuse its start (D-214).
            .args(["-K", "HOME_MODE=0700"])
            .args(["--create-home", "--shell", "/bin/bash", "--user-group"])
            .arg(&name)
            .status()
            .expect("useradd runs (the tests run as root)");
        assert!(status.success(), "useradd {name} failed: {status}");
        let user = nix::unistd::User::from_name(&name)
            .expect("user database")
            .expect("the new user exists");
        let home = user.dir.clone();
        std::fs::set_permissions(&home, std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .expect("chmod 0700 home");
        TestUser {
            name,
            uid: user.uid.as_raw(),
            gid: user.gid.as_raw(),
            home,
        }
    }

    /// Whether any process of the account still runs.
    pub fn has_processes(&self) -> bool {
        has_processes(&self.uid.to_string())
    }
}

impl Drop for TestUser {
    fn drop(&mut self) {
        remove_account(&self.name);
    }
}

/// A name no account has yet: `bt`, 8 random hex digits, then `tag`.
pub fn unique_name(tag: &str) -> String {
    let mut random = [0u8; 4];
    getrandom::fill(&mut random).expect("random");
    let hex: String = random.iter().map(|b| format!("{b:02x}")).collect();
    format!("bt{hex}{tag}")
}

/// Accounts a command under test creates (not the test): removed like a
/// [`TestUser`] on drop.
#[derive(Debug)]
pub struct Accounts(pub Vec<String>);

impl Drop for Accounts {
    fn drop(&mut self) {
        for name in &self.0 {
            remove_account(name);
        }
    }
}

/// Whether any process of `user` (a name or a UID) runs.
fn has_processes(user: &str) -> bool {
    Command::new("pgrep")
        .args(["-u", user])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// Kills every process of the account `name`, then removes it with its home
/// and its group.
fn remove_account(name: &str) {
    for _ in 0..50 {
        let _ = Command::new("pkill").args(["-KILL", "-u", name]).status();
        if !has_processes(name) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let _ = Command::new("userdel").args(["--remove", name]).output();
    let _ = Command::new("groupdel").arg(name).output();
}

/// The PIDs of every process whose real UID is `uid` (zombies too).
pub fn processes_of(uid: u32) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else {
            continue;
        };
        let real = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|u| u.parse::<u32>().ok());
        if real == Some(uid) {
            found.push(pid);
        }
    }
    found
}
