//! The machine side of the scenario tests, shared by the host harness
//! ([`crate::scenario`]) and the quickstart test of the client: where the binaries
//! under test are, a folder per scenario that the service user may read, and
//! the homes HD9 needs closed. Nothing here talks to the server.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Where scenario folders live: a chain of folders of root, writable by no one
/// else (HD10 and HD11 check the folders of the configuration file).
pub const SCENARIO_BASE: &str = "/var/lib/bothy-tests";

/// A folder for one scenario under [`SCENARIO_BASE`], mode 0755, removed on drop.
#[derive(Debug)]
pub struct ScenarioDir {
    pub path: PathBuf,
}

impl ScenarioDir {
    pub fn new() -> ScenarioDir {
        fs::create_dir_all(SCENARIO_BASE).expect("scenario base");
        fs::set_permissions(SCENARIO_BASE, fs::Permissions::from_mode(0o755)).expect("chmod");
        let mut random = [0u8; 6];
        getrandom::fill(&mut random).expect("random");
        let name: String = random.iter().map(|b| format!("{b:02x}")).collect();
        let path = Path::new(SCENARIO_BASE).join(name);
        fs::create_dir(&path).expect("scenario folder");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).expect("chmod");
        ScenarioDir { path }
    }
}

impl Drop for ScenarioDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.path);
    }
}

/// The path of the `bothy-host` binary under test: the one in the same target
/// folder as the test binary, where Cargo puts it for the tests of bothy-host
/// and where `cargo test --workspace` builds it for the tests of other
/// packages (the `bothy` client's; docs/decisions.md D-224).
pub fn bothy_host() -> &'static str {
    bothy_host_beside_the_test()
}

/// `<target>/<profile>/bothy-host` beside `<target>/<profile>/deps/<test>`.
fn bothy_host_beside_the_test() -> &'static str {
    static PATH: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        let test = std::env::current_exe().expect("the test binary's path");
        let profile_dir = test
            .parent()
            .and_then(Path::parent)
            .expect("the test binary lives in <target>/<profile>/deps");
        let path = profile_dir.join("bothy-host");
        assert!(
            path.is_file(),
            "{} is missing: build it first with `cargo build -p bothy-host --features \
             test-seams`, or run the tests with `cargo test --workspace --features \
             bothy-host/test-seams,bothy/test-seams`",
            path.display()
        );
        path.display().to_string()
    })
}

/// HD9 refuses the start while a session user can list the home of another
/// person account (UID_MIN..UID_MAX), and images of this machine kind carry
/// one with a home of mode 0755. The harness does what the operator of such a
/// host would do before installing: it closes those homes (idempotent; the
/// test users' own homes are 0700 already).
pub fn close_foreign_homes() {
    let passwd = fs::read_to_string("/etc/passwd").unwrap_or_default();
    for line in passwd.lines() {
        let fields: Vec<&str> = line.split(':').collect();
        let (Some(uid), Some(home)) = (fields.get(2), fields.get(5)) else {
            continue;
        };
        let Ok(uid) = uid.parse::<u32>() else {
            continue;
        };
        if !(1000..=60000).contains(&uid) || home.is_empty() || *home == "/" {
            continue;
        }
        if let Ok(meta) = fs::metadata(home) {
            if meta.is_dir() && meta.permissions().mode() & 0o055 != 0 {
                let mode = meta.permissions().mode() & 0o700;
                let _ = fs::set_permissions(home, fs::Permissions::from_mode(mode));
            }
        }
    }
}
