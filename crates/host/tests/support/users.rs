//! [`TestUser`]: a real account made with `useradd` for one test, with a unique
//! name (`bt<8 hex><tag>`), a home of mode 0700 and `/bin/bash` as its shell.
//! Dropping it kills every process of the account and removes it with its home.

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
        let mut random = [0u8; 4];
        getrandom::fill(&mut random).expect("random");
        let hex: String = random.iter().map(|b| format!("{b:02x}")).collect();
        let name = format!("bt{hex}{tag}");
        let status = Command::new("useradd")
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
        Command::new("pgrep")
            .args(["-u", &self.uid.to_string()])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    }
}

impl Drop for TestUser {
    fn drop(&mut self) {
        let uid = self.uid.to_string();
        for _ in 0..50 {
            let _ = Command::new("pkill").args(["-KILL", "-u", &uid]).status();
            if !self.has_processes() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let _ = Command::new("userdel")
            .args(["--remove", &self.name])
            .output();
        let _ = Command::new("groupdel").arg(&self.name).output();
    }
}
