//! The doctor's part in a PTY helper (2.2): the checks that run in the account of
//! its session user — HD3 (`sudo -n true` as itself), HD6, HD8 (the read
//! attempt), HD9 (the listing attempt), HD10 (whether its memory is protected),
//! HD11 at its locations with the check of the entries — and the identities of
//! its working directories for HD7.
//!
//! [`helper_checks`] is the entry point: the helper calls it for every
//! [`crate::channel::ToHelper::Checks`] of its main connection and sends the
//! returned bytes back as [`crate::channel::FromHelper::CheckResults`]. It is
//! **blocking** (it starts `claude auth status`, the login shell, `sudo` and
//! walks folders, each bounded by its configured timeout): callers run it on a
//! blocking thread (`tokio::task::spawn_blocking`), one request at a time per
//! helper, as the main connection carries them.
//!
//! The check of the entries of a full request runs on a thread of its own in a
//! long-running helper ([`HelperState::new`]): the answer reports it running,
//! and a later answer (every light request of the gate or of the periodic run)
//! carries its result. In `bothy-host doctor-probe` ([`HelperState::one_shot`])
//! it runs before the answer.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use bothy_proto::control::LlmCredentials;

use super::bounded;
use super::hd6::{self, ShellUser};
use super::hd11::{self, Locations};
use super::program::{self, ProgramCheck};
use super::terms::{self, Account, FileId};
use super::wire::{
    CheckAnswer, CheckRequest, FullAnswer, Hd6Observation, LightAnswer, Refusal, RequestKind,
    ScanReport, ScanResult,
};

/// What one helper keeps between requests.
#[derive(Debug)]
pub struct HelperState {
    /// The program the login shell `exec`s for the probe (`bothy-host` itself).
    probe_program: PathBuf,
    /// Whether the check of the entries runs before the answer.
    one_shot: bool,
    /// What the last light or full request found (the claude start uses it).
    last: Option<LastCheck>,
    /// The check of the entries.
    scan: Arc<ScanSlot>,
}

/// The check of the entries and the signal of its end.
#[derive(Debug, Default)]
struct ScanSlot {
    shared: Mutex<ScanShared>,
    ended: Condvar,
}

/// A copy of what the start of claude takes from a [`HelperState`].
#[derive(Debug, Clone)]
pub struct StartView {
    pub(crate) probe_program: PathBuf,
    pub(crate) last: Option<LastCheck>,
}

/// What the start of claude takes from the last check of this helper (7.4
/// "Start of claude with organization": "the resolved host_service.claude_bin
/// of the last check", "the working directories of its last check").
#[derive(Debug, Clone)]
pub(crate) struct LastCheck {
    /// The session user.
    pub uid: u32,
    /// Its home.
    pub home: PathBuf,
    /// `host_service.auth_status_timeout`.
    pub auth_status_timeout: Duration,
    /// The resolved claude_bin and the search list, when usable.
    pub claude: Option<UsableClaude>,
    /// The working directories after HD7: as sent, resolved, identity.
    pub workdirs: Vec<(PathBuf, PathBuf, FileId)>,
}

/// A usable `claude_bin` as the helper resolved it.
#[derive(Debug, Clone)]
pub(crate) struct UsableClaude {
    /// The resolved program.
    pub program: PathBuf,
    /// The resolved folders of the fixed search list.
    pub search_path: Vec<PathBuf>,
}

/// The state of the check of the entries, shared with its thread.
#[derive(Debug, Default)]
struct ScanShared {
    /// The number of the newest run started (or requested while one ran).
    started: u64,
    /// The last finished run and its result.
    finished: u64,
    result: Option<ScanResult>,
    /// A run is going on.
    running: bool,
    /// A full request arrived while a run was going on: run once more after it.
    again: bool,
    /// What the next run scans.
    job: Option<ScanJob>,
}

#[derive(Debug, Clone)]
struct ScanJob {
    roots: Vec<PathBuf>,
    me: Account,
    others: Vec<Account>,
    timeout: Duration,
}

impl HelperState {
    /// The state of a long-running helper: the probe program is this binary.
    pub fn new() -> HelperState {
        HelperState::with_probe_program(this_binary(), false)
    }

    /// The state of a one-shot probe (`bothy-host doctor-probe`): the check of
    /// the entries runs before the answer.
    pub fn one_shot() -> HelperState {
        HelperState::with_probe_program(this_binary(), true)
    }

    /// A state with an explicit probe program (the `bothy-host` binary).
    pub fn with_probe_program(probe_program: PathBuf, one_shot: bool) -> HelperState {
        HelperState {
            probe_program,
            one_shot,
            last: None,
            scan: Arc::new(ScanSlot::default()),
        }
    }

    /// What a start of claude needs from this state: a copy, so the start
    /// does not hold the helper's lock while its login-shell probe runs.
    pub fn start_view(&self) -> StartView {
        StartView {
            probe_program: self.probe_program.clone(),
            last: self.last.clone(),
        }
    }

    fn probe_program(&self) -> &Path {
        &self.probe_program
    }

    /// Waits until no check of the entries is going on, at most `bound`;
    /// whether none is.
    pub fn wait_entry_scan(&self, bound: Duration) -> bool {
        let guard = lock(&self.scan);
        let (guard, _) = self
            .scan
            .ended
            .wait_timeout_while(guard, bound, |s| s.running)
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        !guard.running
    }
}

impl Default for HelperState {
    fn default() -> Self {
        HelperState::new()
    }
}

fn this_binary() -> PathBuf {
    std::fs::read_link("/proc/self/exe").unwrap_or_else(|_| PathBuf::from("/proc/self/exe"))
}

/// Answers one request of the service (module docs). Blocking.
pub fn helper_checks(request: &[u8], state: &mut HelperState) -> Vec<u8> {
    answer(request, state).encode()
}

fn answer(request: &[u8], state: &mut HelperState) -> CheckAnswer {
    let Ok(request) = CheckRequest::decode(request) else {
        return CheckAnswer::Refused(Refusal::BadRequest);
    };
    let me = current_account();
    if me.uid != request.uid {
        return CheckAnswer::Refused(Refusal::WrongUser);
    }
    let auth_timeout = Duration::from_millis(request.auth_status_timeout_ms);
    match request.kind {
        RequestKind::Sudo => CheckAnswer::Sudo {
            passwordless_sudo: passwordless_sudo(&request.sudo, auth_timeout),
        },
        RequestKind::Identities => CheckAnswer::Identities(identities(&request.workdirs)),
        RequestKind::Light => CheckAnswer::Light(light(&request, &me, state)),
        RequestKind::Full => {
            let awaited = start_scan(&request, &me, state);
            let mut light = light(&request, &me, state);
            light.entry_scan.awaited = awaited;
            CheckAnswer::Full(FullAnswer {
                light,
                passwordless_sudo: passwordless_sudo(&request.sudo, auth_timeout),
                reads_state: reads_state(&request.state_dir, &request.key_files),
                listable_homes: request
                    .homes
                    .iter()
                    .enumerate()
                    .filter(|(_, home)| std::fs::read_dir(home).is_ok())
                    .map(|(i, _)| i)
                    .collect(),
                dumpable: nix::sys::prctl::get_dumpable().unwrap_or(true),
            })
        }
    }
}

/// The account of this process: real user ID and every group it has.
fn current_account() -> Account {
    let uid = nix::unistd::getuid().as_raw();
    let mut gids: Vec<u32> = nix::unistd::getgroups()
        .map(|g| g.into_iter().map(|g| g.as_raw()).collect())
        .unwrap_or_default();
    let gid = nix::unistd::getgid().as_raw();
    if !gids.contains(&gid) {
        gids.push(gid);
    }
    Account { uid, gids }
}

fn identities(workdirs: &[PathBuf]) -> Vec<Option<FileId>> {
    workdirs
        .iter()
        .map(|w| {
            let r = terms::resolve(w);
            r.target
                .filter(|t| t.kind == terms::NodeKind::Dir)
                .map(|t| t.id)
        })
        .collect()
}

fn light(request: &CheckRequest, me: &Account, state: &mut HelperState) -> LightAnswer {
    let auth_timeout = Duration::from_millis(request.auth_status_timeout_ms);
    let claude = request.claude_bin.as_ref().map(|bin| {
        program::check_program(bin, &program::search_folders(bin, &request.search_tail))
    });
    let usable = claude.as_ref().and_then(usable_claude);
    let mut located = Vec::new();
    let mut workdirs = Vec::new();
    for path in &request.workdirs {
        let r = terms::resolve(path);
        match r.target.as_ref().filter(|t| t.kind == terms::NodeKind::Dir) {
            Some(t) => {
                workdirs.push(Some(t.id));
                located.push((path.clone(), t.path.clone(), t.id));
            }
            None => workdirs.push(None),
        }
    }
    let hd6 = hd6_checks(
        request,
        usable.as_ref(),
        state.probe_program(),
        auth_timeout,
    );
    let deadline = Instant::now() + Duration::from_millis(request.entry_scan_timeout_ms);
    let hd11 = hd11::check_locations(&locations(request), me, &request.others, deadline);
    state.last = Some(LastCheck {
        uid: request.uid,
        home: request.home.clone(),
        auth_status_timeout: auth_timeout,
        claude: usable,
        workdirs: located,
    });
    LightAnswer {
        workdirs,
        hd6,
        hd11,
        entry_scan: scan_report(state),
    }
}

fn usable_claude(check: &ProgramCheck) -> Option<UsableClaude> {
    Some(UsableClaude {
        program: check.program()?.to_owned(),
        search_path: check.search_path(),
    })
}

/// The locations other than the home: the organization config folder and the
/// working directories after HD7.
fn locations(request: &CheckRequest) -> Locations {
    let mut others = request.workdirs.clone();
    if request.declaration == Some(LlmCredentials::Organization) {
        others.push(hd11::organization_config_dir(&request.home));
    }
    Locations::resolve(&request.home, &others)
}

/// HD6 in this account (7.4). With personal the login is the holder's own
/// business and the helper does not look at it (`docs/decisions.md` D-158).
fn hd6_checks(
    request: &CheckRequest,
    claude: Option<&UsableClaude>,
    probe_program: &Path,
    timeout: Duration,
) -> Hd6Observation {
    if request.declaration == Some(LlmCredentials::Personal) {
        return Hd6Observation::default();
    }
    let mut observation = Hd6Observation {
        unchecked: claude.is_none(),
        ..Hd6Observation::default()
    };
    let home = &request.home;
    let user_name = nix::unistd::User::from_uid(nix::unistd::getuid())
        .ok()
        .flatten()
        .map(|u| u.name)
        .unwrap_or_default();
    let login = hd6::login_shell_probe(
        ShellUser {
            name: &user_name,
            home,
            shell: &request.shell,
        },
        probe_program,
        timeout,
    );
    let mut config_dirs: Vec<Option<PathBuf>> = vec![None];
    if request.declaration == Some(LlmCredentials::Organization) {
        config_dirs.push(Some(hd11::organization_config_dir(home)));
    }
    let mut credential_folders = vec![home.join(".claude")];
    credential_folders.extend(config_dirs.iter().flatten().cloned());
    match login {
        Ok(login) => {
            observation.subscription |= login.oauth_token;
            if let Some(dir) = login.config_dir.filter(|d| d.is_absolute()) {
                credential_folders.push(dir);
            }
        }
        Err(_) => observation.status_unknown = true,
    }
    observation.subscription |= credential_folders
        .iter()
        .any(|folder| std::fs::symlink_metadata(folder.join(".credentials.json")).is_ok());
    if let Some(claude) = claude {
        for dir in &config_dirs {
            match hd6::auth_status(
                &claude.program,
                home,
                dir.as_deref(),
                &claude.search_path,
                timeout,
            ) {
                Some(method) => observation.subscription |= method.is_subscription(),
                None => observation.status_unknown = true,
            }
        }
    }
    observation
}

/// HD3: `sudo -n true` with the first `sudo` of the list that exists (a
/// name that resolves to nothing is no `sudo`). Success, no end within the
/// bound, or a `sudo` that exists but cannot be started (not executable, not
/// a program, a folder, no process left) is passwordless sudo: what was not
/// checked does not pass (fail closed, D-333).
pub(crate) fn passwordless_sudo(candidates: &[PathBuf], timeout: Duration) -> bool {
    let Some(sudo) = candidates.iter().find(|p| std::fs::metadata(p).is_ok()) else {
        return false;
    };
    let mut command = Command::new(sudo);
    command
        .args(["-n", "true"])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .current_dir("/");
    match bounded::run(&mut command, timeout, 0) {
        Ok(done) => done.status.success(),
        Err(bounded::RunError::Timeout) => true,
        Err(bounded::RunError::Spawn) => {
            tracing::warn!(
                code = "sudo_not_started",
                "sudo exists but could not be started; HD3 fails closed"
            );
            true
        }
    }
}

/// HD8's attempt: list the state directory, read one byte of each key file.
fn reads_state(state_dir: &Path, key_files: &[PathBuf]) -> bool {
    use std::io::Read;
    if std::fs::read_dir(state_dir).is_ok() {
        return true;
    }
    key_files.iter().any(|f| {
        std::fs::File::open(f).is_ok_and(|mut file| {
            let mut byte = [0u8; 1];
            file.read(&mut byte).is_ok()
        })
    })
}

/// Starts the check of the entries of a full request (or runs it, one-shot);
/// returns the number of the run the request waits for.
fn start_scan(request: &CheckRequest, me: &Account, state: &mut HelperState) -> u64 {
    let locations = locations(request);
    let job = ScanJob {
        roots: locations.roots(),
        me: me.clone(),
        others: request.others.clone(),
        timeout: Duration::from_millis(request.entry_scan_timeout_ms),
    };
    if state.one_shot {
        let result = run_job(&job);
        let mut shared = lock(&state.scan);
        shared.started += 1;
        shared.finished = shared.started;
        shared.result = Some(result);
        return shared.started;
    }
    let mut shared = lock(&state.scan);
    shared.job = Some(job);
    shared.started += 1;
    if shared.running {
        shared.again = true;
        return shared.started;
    }
    shared.running = true;
    let number = shared.started;
    drop(shared);
    let scan = Arc::clone(&state.scan);
    let spawned = std::thread::Builder::new()
        .name("entry-scan".into())
        .spawn(move || scan_thread(&scan, number));
    if spawned.is_err() {
        let mut shared = lock(&state.scan);
        shared.running = false;
        shared.finished = number;
        shared.result = Some(ScanResult::Timeout);
    }
    number
}

fn scan_thread(scan: &ScanSlot, mut number: u64) {
    loop {
        let job = lock(scan).job.clone();
        let result = job.as_ref().map_or(ScanResult::Timeout, run_job);
        let mut shared = lock(scan);
        shared.finished = number;
        shared.result = Some(result);
        if shared.again {
            shared.again = false;
            number = shared.started;
            continue;
        }
        shared.running = false;
        drop(shared);
        scan.ended.notify_all();
        return;
    }
}

fn run_job(job: &ScanJob) -> ScanResult {
    hd11::scan_entries(
        &job.roots,
        &job.me,
        &job.others,
        Instant::now() + job.timeout,
    )
}

fn scan_report(state: &HelperState) -> ScanReport {
    let shared = lock(&state.scan);
    ScanReport {
        awaited: shared.started,
        finished: shared.finished,
        result: shared.result,
    }
}

fn lock(scan: &ScanSlot) -> std::sync::MutexGuard<'_, ScanShared> {
    scan.shared
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request of `kind` for `uid` that names no location.
    fn bare_request(kind: RequestKind, uid: u32) -> CheckRequest {
        CheckRequest {
            kind,
            uid,
            home: "/root".into(),
            shell: "/bin/sh".into(),
            others: vec![],
            declaration: None,
            claude_bin: None,
            search_tail: vec![],
            workdirs: vec![],
            state_dir: "/nonexistent".into(),
            key_files: vec![],
            homes: vec![],
            sudo: vec![],
            auth_status_timeout_ms: 1000,
            entry_scan_timeout_ms: 1000,
        }
    }

    #[test]
    fn a_request_that_does_not_decode_or_names_another_user_is_refused() {
        let mut state = HelperState::with_probe_program(PathBuf::from("/nonexistent"), true);
        let answer = CheckAnswer::decode(&helper_checks(b"{", &mut state)).expect("decodes");
        assert_eq!(answer, CheckAnswer::Refused(Refusal::BadRequest));
        let request = bare_request(RequestKind::Identities, nix::unistd::getuid().as_raw() + 1);
        let answer =
            CheckAnswer::decode(&helper_checks(&request.encode(), &mut state)).expect("decodes");
        assert_eq!(answer, CheckAnswer::Refused(Refusal::WrongUser));
    }

    /// HD3 fails closed (issue 15): a `sudo` that exists but cannot be
    /// started — not executable, not a program, a folder — counts as
    /// passwordless sudo; only when no candidate exists does HD3 pass.
    #[test]
    fn a_sudo_that_exists_but_cannot_be_started_fails_hd3() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let not_executable = dir.path().join("sudo-0644");
        std::fs::write(&not_executable, b"#!/bin/sh\nexit 1\n").expect("write");
        std::fs::set_permissions(&not_executable, std::fs::Permissions::from_mode(0o644))
            .expect("chmod");
        let no_program = dir.path().join("sudo-garbage");
        std::fs::write(&no_program, b"\x01\x02 not a program").expect("write");
        std::fs::set_permissions(&no_program, std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
        let folder = dir.path().join("sudo-folder");
        std::fs::create_dir(&folder).expect("mkdir");
        let missing = dir.path().join("missing");
        let timeout = Duration::from_secs(10);
        for sudo in [&not_executable, &no_program, &folder] {
            assert!(
                passwordless_sudo(&[missing.clone(), sudo.clone()], timeout),
                "{}",
                sudo.display()
            );
        }
        // The same through the helper's answer to a request of kind sudo.
        let mut state = HelperState::with_probe_program(PathBuf::from("/nonexistent"), true);
        let request = CheckRequest {
            sudo: vec![not_executable.clone()],
            auth_status_timeout_ms: 10_000,
            ..bare_request(RequestKind::Sudo, nix::unistd::getuid().as_raw())
        };
        assert_eq!(
            CheckAnswer::decode(&helper_checks(&request.encode(), &mut state)).expect("decodes"),
            CheckAnswer::Sudo {
                passwordless_sudo: true
            }
        );
        // A sudo that runs and refuses passes; none at all passes.
        let refusing = dir.path().join("sudo-refuses");
        std::fs::write(&refusing, b"#!/bin/sh\nexit 1\n").expect("write");
        std::fs::set_permissions(&refusing, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        assert!(!passwordless_sudo(&[missing.clone(), refusing], timeout));
        assert!(!passwordless_sudo(&[missing], timeout));
    }

    #[test]
    fn identities_follow_links_and_leave_out_what_does_not_resolve() {
        let dir = tempfile::tempdir().expect("tempdir");
        let base = std::fs::canonicalize(dir.path()).expect("canonical");
        std::fs::create_dir(base.join("w")).expect("mkdir");
        std::os::unix::fs::symlink(base.join("w"), base.join("l")).expect("symlink");
        std::fs::write(base.join("f"), b"").expect("write");
        let ids = identities(&[
            base.join("w"),
            base.join("l"),
            base.join("missing"),
            base.join("f"),
        ]);
        assert!(ids[0].is_some());
        assert_eq!(ids[0], ids[1]);
        assert_eq!(ids[2], None);
        assert_eq!(ids[3], None, "a file is no working directory");
    }

    #[test]
    fn a_long_running_helper_checks_the_entries_beside_its_answers() {
        let dir = tempfile::tempdir().expect("tempdir");
        let home = std::fs::canonicalize(dir.path()).expect("canonical");
        std::fs::create_dir(home.join("d")).expect("mkdir");
        std::fs::write(home.join("d/f"), b"x").expect("write");
        let other = 4_000_555;
        let mut state = HelperState::with_probe_program(PathBuf::from("/nonexistent"), false);
        let mut request = CheckRequest {
            kind: RequestKind::Full,
            uid: nix::unistd::getuid().as_raw(),
            home: home.clone(),
            shell: "/bin/sh".into(),
            others: vec![Account {
                uid: other,
                gids: vec![other],
            }],
            declaration: Some(LlmCredentials::Personal),
            claude_bin: None,
            search_tail: vec![],
            workdirs: vec![],
            state_dir: "/nonexistent".into(),
            key_files: vec![],
            homes: vec![],
            sudo: vec![],
            auth_status_timeout_ms: 1000,
            entry_scan_timeout_ms: 60_000,
        };
        let scan_of = |answer: CheckAnswer| match answer {
            CheckAnswer::Full(full) => full.light.entry_scan,
            CheckAnswer::Light(light) => light.entry_scan,
            other => panic!("{other:?}"),
        };
        let ask = |request: &CheckRequest, state: &mut HelperState| {
            CheckAnswer::decode(&helper_checks(&request.encode(), state)).expect("decodes")
        };
        assert_eq!(scan_of(ask(&request, &mut state)).awaited, 1);
        assert!(state.wait_entry_scan(Duration::from_secs(30)));
        request.kind = RequestKind::Light;
        let report = scan_of(ask(&request, &mut state));
        assert_eq!(
            (report.finished, report.result),
            (1, Some(ScanResult::Clean))
        );
        nix::unistd::chown(
            &home.join("d/f"),
            Some(nix::unistd::Uid::from_raw(other)),
            None,
        )
        .expect("chown");
        request.kind = RequestKind::Full;
        assert_eq!(scan_of(ask(&request, &mut state)).awaited, 2);
        assert!(state.wait_entry_scan(Duration::from_secs(30)));
        request.kind = RequestKind::Light;
        let report = scan_of(ask(&request, &mut state));
        assert_eq!(
            (report.finished, report.result),
            (2, Some(ScanResult::ForeignEntry))
        );
    }
}
