//! Support of the doctor's integration tests: real users (serialised creation),
//! root-owned scratch folders outside the world-writable `/tmp`, the real
//! `bothy-host doctor-probe` as the session user, and a configuration built
//! around them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use bothy_host::config::HostServiceConfig;
use bothy_host::doctor::service_side::run_probe;
use bothy_host::doctor::terms::Account;
use bothy_host::doctor::wire::{CheckAnswer, CheckRequest, RequestKind};
use bothy_host::doctor::{Doctor, Places, ProbePort, RunKind, Scope, ServiceContext};
use bothy_proto::control::LlmCredentials;
use bothy_proto::doctor::{Check, DoctorCode, DoctorEntry};

pub use crate::users::TestUser;

/// `useradd` and `userdel` lock the user database; one at a time per binary.
static USERS: Mutex<()> = Mutex::new(());

/// A real user for this test.
pub fn user(tag: &str) -> TestUser {
    let _guard = USERS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    TestUser::create(tag)
}

/// The `bothy-host` binary of this build.
pub fn bin() -> PathBuf {
    PathBuf::from(crate::machine::bothy_host())
}

/// A folder of root, mode 0755, on a path of root only (not `/tmp`), removed
/// on drop.
#[derive(Debug)]
pub struct RootDir(tempfile::TempDir);

impl RootDir {
    pub fn new() -> RootDir {
        std::fs::create_dir_all("/var/cache/bothy/doctor-tests").unwrap();
        chmod(Path::new("/var/cache/bothy/doctor-tests"), 0o755);
        let dir = tempfile::Builder::new()
            .prefix("t")
            .tempdir_in("/var/cache/bothy/doctor-tests")
            .unwrap();
        chmod(dir.path(), 0o755);
        RootDir(dir)
    }

    pub fn path(&self) -> &Path {
        self.0.path()
    }

    pub fn join(&self, p: &str) -> PathBuf {
        self.0.path().join(p)
    }
}

pub fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

pub fn chown(path: &Path, user: &TestUser) {
    nix::unistd::chown(
        path,
        Some(nix::unistd::Uid::from_raw(user.uid)),
        Some(nix::unistd::Gid::from_raw(user.gid)),
    )
    .unwrap();
}

pub fn lchown(path: &Path, user: &TestUser) {
    std::os::unix::fs::lchown(path, Some(user.uid), Some(user.gid)).unwrap();
}

/// A folder (and its parents) with `mode`.
pub fn mkdir(path: &Path, mode: u32) -> PathBuf {
    std::fs::create_dir_all(path).unwrap();
    chmod(path, mode);
    path.to_owned()
}

/// A file with `text` and `mode`.
pub fn write(path: &Path, text: &str, mode: u32) -> PathBuf {
    std::fs::write(path, text).unwrap();
    chmod(path, mode);
    path.to_owned()
}

/// An account as the checks see it.
pub fn account(user: &TestUser) -> Account {
    bothy_host::doctor::accounts::UserEntry::lookup(&user.name)
        .unwrap()
        .unwrap()
        .account()
}

/// A request of `kind` for `user`, with `others` as the other session users.
pub fn request(kind: RequestKind, user: &TestUser, others: &[&TestUser]) -> CheckRequest {
    CheckRequest {
        kind,
        uid: user.uid,
        home: user.home.clone(),
        shell: PathBuf::from("/bin/bash"),
        others: others.iter().map(|o| account(o)).collect(),
        declaration: Some(LlmCredentials::Organization),
        claude_bin: None,
        search_tail: vec!["/usr/bin".into(), "/bin".into()],
        workdirs: Vec::new(),
        state_dir: PathBuf::from("/nonexistent-state"),
        key_files: Vec::new(),
        homes: Vec::new(),
        sudo: vec!["/usr/bin/sudo".into()],
        auth_status_timeout_ms: 20_000,
        entry_scan_timeout_ms: 60_000,
    }
}

/// The answer of the real `doctor-probe` running as `user`.
pub fn probe(user: &TestUser, request: &CheckRequest) -> CheckAnswer {
    let bytes = run_probe(
        &bin(),
        &user.name,
        &request.encode(),
        Duration::from_secs(120),
    )
    .expect("the probe answers");
    CheckAnswer::decode(&bytes).expect("the answer decodes")
}

/// The light part of a light or full answer.
pub fn light(answer: &CheckAnswer) -> &bothy_host::doctor::wire::LightAnswer {
    match answer {
        CheckAnswer::Light(l) => l,
        CheckAnswer::Full(f) => &f.light,
        other => panic!("not a light answer: {other:?}"),
    }
}

/// A configuration for `session` users with `service` as the service user and
/// a state directory of it (mode 0700) under `root`.
pub fn config(root: &RootDir, service: &TestUser, session: &[&TestUser]) -> HostServiceConfig {
    let state = mkdir(&root.join("state"), 0o700);
    chown(&state, service);
    let runtime = mkdir(&root.join("run"), 0o755);
    HostServiceConfig {
        state_dir: state,
        runtime_dir: runtime,
        service_user: service.name.clone(),
        session_users: session.iter().map(|u| u.name.clone()).collect(),
        auth_status_timeout: Duration::from_secs(20),
        entry_scan_timeout: Duration::from_secs(60),
        ..HostServiceConfig::default()
    }
}

/// Places of the host with the helper binary of this build.
pub fn places() -> Places {
    Places {
        helper_binary: Some(bin()),
        service_probe: Some(bin()),
        ..Places::default()
    }
}

/// A full run of the real doctor: the service side here (as root, with the
/// service user's sudo through a probe) and every helper side in a probe.
pub async fn full_run(
    config: &HostServiceConfig,
    declaration: Option<LlmCredentials>,
    former: Vec<String>,
    places: Places,
) -> Doctor {
    let mut doctor = Doctor::with_places(places);
    let port = ProbePort::new(bin(), config);
    let ctx = ServiceContext {
        config,
        config_path: None,
        declaration,
        server_url: None,
        control_peer: None,
        former_session_users: former,
    };
    doctor.run(&ctx, &port, RunKind::Full, Scope::All).await;
    doctor
}

/// The entries of `check`.
pub fn of(doctor: &Doctor, check: Check) -> Vec<DoctorEntry> {
    doctor
        .entries()
        .into_iter()
        .filter(|e| e.check == check)
        .collect()
}

/// Whether an entry of the code's check carries `code` (named or not).
pub fn has(doctor: &Doctor, code: DoctorCode) -> bool {
    doctor.entries().iter().any(|e| e.code == Some(code))
}

/// Whether an entry names `name` with `code`.
pub fn names(doctor: &Doctor, code: DoctorCode, name: &str) -> bool {
    doctor.entries().contains(&DoctorEntry::naming(code, name))
}

/// A `passwd` text with only these accounts (HD9 then looks at nothing else).
pub fn passwd(root: &RootDir, users: &[&TestUser]) -> PathBuf {
    let text: String = users
        .iter()
        .map(|u| {
            format!(
                "{}:x:{}:{}::{}:/bin/bash\n",
                u.name,
                u.uid,
                u.gid,
                u.home.display()
            )
        })
        .collect();
    write(&root.join("passwd"), &text, 0o644)
}
