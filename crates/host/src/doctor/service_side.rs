//! The doctor's part in the service user (2.2, table of checks): HD1, HD2, HD3
//! for the service user, HD4, HD8 (ownership, mode and ACL), HD10 (helper
//! binary, service definitions, channel endpoint folder, the configuration file,
//! `claude_bin` with its search list and interpreter, `ptrace_scope`) and HD11
//! at the places for all (helper binary, `claude_bin`, programs of the profiles);
//! plus what HD7 needs from this side (which programs resolve) and the accounts
//! HD9 asks the helpers about. Blocking.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use bothy_proto::doctor::DoctorCode;

use super::accounts::{self, UserEntry};
use super::bounded;
use super::program::{self, ProgramCheck};
use super::terms::{self, Account, EXEC, NodeKind, READ, WRITE};
use super::wire::{self, CheckAnswer, CheckRequest, RequestKind};
use crate::config::HostServiceConfig;
use bothy_proto::report::ProfileKind;

pub use super::accounts::FORBIDDEN_GROUPS;

/// Names that are root-level accounts (HD1 `privileged_user`), compared
/// without case; any account with user ID 0 counts too.
const PRIVILEGED_NAMES: [&str; 3] = ["root", "Administrator", "SYSTEM"];

/// The key files of the state directory HD4 and HD8 judge (4.2, D-M2-42-4).
pub const KEY_FILES: [&str; 2] = [crate::state::KEYS_FILE, crate::state::CLAUDE_API_KEY_FILE];

/// `kernel.yama.ptrace_scope` (HD10).
pub const PTRACE_SCOPE_FILE: &str = "/proc/sys/kernel/yama/ptrace_scope";

/// The environment variable that redirects [`PTRACE_SCOPE_FILE`], read only in
/// builds with the Cargo feature `test-seams` (DESIGN §4).
pub const PTRACE_SCOPE_ENV: &str = "BOTHY_HOST_TEST_PTRACE_SCOPE_FILE";

/// The fixed places of the host the service side looks at. [`Places::default`]
/// is the host as it is; tests construct other places (DESIGN STYLE 10).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Places {
    /// The binary of the helper; `None`: `/proc/self/exe` (one binary for all).
    pub helper_binary: Option<PathBuf>,
    /// Where the service definitions lie (`bothy-host*.service`, `*.socket`).
    pub unit_folder: PathBuf,
    /// The sockets of the Docker daemon (HD2).
    pub docker_sockets: Vec<PathBuf>,
    /// Where `sudo` may be (HD3), tried in order.
    pub sudo: Vec<PathBuf>,
    /// The user database read for HD9's person accounts.
    pub passwd: PathBuf,
    /// `login.defs` with `UID_MIN` and `UID_MAX`.
    pub login_defs: PathBuf,
    /// The fixed folders of the search list after the configured one (7.4).
    pub search_tail: Vec<PathBuf>,
    /// When set, the checks that depend on the identity of the service user
    /// (its HD3) run in `<program> doctor-probe --user <service user>`: the way
    /// of `bothy-host doctor`, which runs as root.
    pub service_probe: Option<PathBuf>,
}

impl Default for Places {
    fn default() -> Self {
        Places {
            helper_binary: None,
            unit_folder: PathBuf::from("/etc/systemd/system"),
            docker_sockets: vec![
                PathBuf::from("/var/run/docker.sock"),
                PathBuf::from("/run/docker.sock"),
            ],
            sudo: [
                "/usr/bin/sudo",
                "/bin/sudo",
                "/usr/sbin/sudo",
                "/usr/local/bin/sudo",
            ]
            .iter()
            .map(PathBuf::from)
            .collect(),
            passwd: PathBuf::from("/etc/passwd"),
            login_defs: PathBuf::from("/etc/login.defs"),
            search_tail: program::FIXED_SEARCH_FOLDERS
                .iter()
                .map(PathBuf::from)
                .collect(),
            service_probe: None,
        }
    }
}

/// A session user whose helper is asked: a valid name, in the user database,
/// not privileged, not the service user, not a duplicate of an earlier one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AskedUser {
    /// The name as configured.
    pub name: String,
    /// Its entry.
    pub entry: UserEntry,
    /// Its account (every group).
    pub account: Account,
}

/// Another account whose home HD9's listing attempt covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForeignHome {
    /// The account's name.
    pub name: String,
    /// Its home.
    pub home: PathBuf,
    /// A former session user (rule for names).
    pub former: bool,
}

/// What the service side found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ServiceFindings {
    /// Every code found (none names an account: 2.2, rule for names).
    pub codes: Vec<DoctorCode>,
    /// The session users whose helpers are asked, in the order of the
    /// configuration.
    pub asked: Vec<AskedUser>,
    /// `claude_bin` is set and usable for the service user (7.4).
    pub claude_usable: bool,
    /// Per configured profile: whether it keeps its program (HD7); a profile
    /// that is not a command always does.
    pub program_present: Vec<bool>,
    /// HD9's accounts.
    pub homes: Vec<ForeignHome>,
}

/// What the service side needs.
#[derive(Debug, Clone)]
pub struct ServiceInputs {
    /// The configuration.
    pub config: HostServiceConfig,
    /// The configuration file, when known.
    pub config_path: Option<PathBuf>,
    /// Former session users (bound, no longer configured).
    pub former: Vec<String>,
    /// The places.
    pub places: Places,
}

/// Runs the service side (module docs).
pub fn service_checks(inputs: &ServiceInputs) -> ServiceFindings {
    let mut out = service_checks_but_sudo(inputs);
    if service_sudo_passwordless(inputs) {
        out.codes.push(DoctorCode::PasswordlessSudo);
    }
    out
}

/// HD3 for the service user alone: whether `sudo -n true` passes for it (an
/// unknown service user has no sudo to check; HD1 reports it). It starts
/// sudo, the slowest step of the service side, so a run starts it on a thread
/// of its own beside the other checks and the helpers' answers.
pub fn service_sudo_passwordless(inputs: &ServiceInputs) -> bool {
    let config = &inputs.config;
    accounts::UserEntry::lookup(&config.service_user)
        .ok()
        .flatten()
        .is_some_and(|service| service_sudo(&service, &inputs.places, config.auth_status_timeout))
}

/// The service side without [`service_sudo_passwordless`].
pub fn service_checks_but_sudo(inputs: &ServiceInputs) -> ServiceFindings {
    service_checks_but_sudo_then(inputs, |_| {})
}

/// [`service_checks_but_sudo`] that hands HD1's session users to `asked` as
/// soon as they are known, before the other checks: a light run asks their
/// helpers meanwhile (D-707).
pub fn service_checks_but_sudo_then(
    inputs: &ServiceInputs,
    asked: impl FnOnce(&[AskedUser]),
) -> ServiceFindings {
    let config = &inputs.config;
    let mut out = ServiceFindings::default();
    let service = accounts::UserEntry::lookup(&config.service_user)
        .ok()
        .flatten();
    let session = hd1(config, service.as_ref(), &mut out);
    asked(&out.asked);
    let session_accounts: Vec<Account> = session.iter().map(|(_, e)| e.account()).collect();
    hd2(
        config,
        service.as_ref(),
        &session,
        &inputs.places,
        &mut out.codes,
    );
    hd4_hd8(config, service.as_ref(), &session_accounts, &mut out.codes);
    let claude = config.claude_bin.as_ref().map(|bin| {
        program::check_program(
            bin,
            &program::search_folders(bin, &inputs.places.search_tail),
        )
    });
    out.claude_usable = claude.as_ref().is_some_and(|c| c.usable);
    hd10_hd11(inputs, claude.as_ref(), &session_accounts, &mut out);
    out.homes = foreign_homes(inputs, service.as_ref());
    out
}

/// HD1; returns every configured session user that exists (for HD2, HD4, HD8,
/// HD10, HD11), and fills `out.asked`.
fn hd1(
    config: &HostServiceConfig,
    service: Option<&UserEntry>,
    out: &mut ServiceFindings,
) -> Vec<(String, UserEntry)> {
    let users = &config.session_users;
    let codes = &mut out.codes;
    if users.is_empty() {
        codes.push(DoctorCode::SessionUsersEmpty);
    }
    let mut duplicate = vec![false; users.len()];
    for (i, a) in users.iter().enumerate() {
        if users[..i].iter().any(|b| b.eq_ignore_ascii_case(a)) {
            duplicate[i] = true;
        }
    }
    if duplicate.iter().any(|d| *d) {
        codes.push(DoctorCode::SessionUserDuplicate);
    }
    let privileged = |name: &str, entry: Option<&UserEntry>| {
        PRIVILEGED_NAMES
            .iter()
            .any(|p| p.eq_ignore_ascii_case(name))
            || entry.is_some_and(|e| e.uid == 0)
    };
    if service.is_none() {
        codes.push(DoctorCode::UserMissing);
    }
    if privileged(&config.service_user, service) {
        codes.push(DoctorCode::PrivilegedUser);
    }
    let mut existing = Vec::new();
    for (i, name) in users.iter().enumerate() {
        let valid = accounts::valid_session_user_name(name);
        if !valid {
            codes.push(DoctorCode::SessionUserNameInvalid);
        }
        let entry = if name.is_empty() || name.contains('\0') {
            None
        } else {
            UserEntry::lookup(name).ok().flatten()
        };
        let is_service = *name == config.service_user
            || matches!((&entry, service), (Some(e), Some(s)) if e.uid == s.uid);
        if is_service {
            codes.push(DoctorCode::SessionUserIsServiceUser);
        }
        if privileged(name, entry.as_ref()) {
            codes.push(DoctorCode::PrivilegedUser);
        }
        let Some(entry) = entry else {
            codes.push(DoctorCode::UserMissing);
            continue;
        };
        let askable = valid
            && !duplicate[i]
            && !is_service
            && !privileged(name, Some(&entry))
            && wire::sendable(&entry.home)
            && wire::sendable(&entry.shell);
        if askable {
            out.asked.push(AskedUser {
                name: name.clone(),
                account: entry.account(),
                entry: entry.clone(),
            });
        }
        existing.push((name.clone(), entry));
    }
    existing
}

/// HD2: forbidden groups, and the Docker socket writable for one of them.
fn hd2(
    config: &HostServiceConfig,
    service: Option<&UserEntry>,
    session: &[(String, UserEntry)],
    places: &Places,
    codes: &mut Vec<DoctorCode>,
) {
    let everyone: Vec<&UserEntry> = service
        .into_iter()
        .chain(session.iter().map(|(_, e)| e))
        .collect();
    // A group list that cannot be read counts as a forbidden group: the
    // check cannot show the account is outside them (fail closed).
    let in_forbidden = everyone.iter().any(|e| {
        e.forbidden_groups(&config.extra_forbidden_groups)
            .is_none_or(|groups| !groups.is_empty())
    });
    if in_forbidden {
        codes.push(DoctorCode::ForbiddenGroup);
    }
    let accounts: Vec<Account> = everyone.iter().map(|e| e.account()).collect();
    if places
        .docker_sockets
        .iter()
        .any(|socket| docker_socket_writable(socket, &accounts))
    {
        codes.push(DoctorCode::DockerSocketWritable);
    }
}

/// Whether the socket at `path` (links followed) is writable for one of
/// `accounts`; a missing socket is not.
pub fn docker_socket_writable(path: &Path, accounts: &[Account]) -> bool {
    terms::resolve(path)
        .target
        .is_some_and(|socket| terms::writable_by_any(&socket, accounts))
}

/// HD3 for the service user: `sudo -n true` as itself, directly or through a
/// probe as that user (`bothy-host doctor`). No answer counts as passwordless.
fn service_sudo(service: &UserEntry, places: &Places, timeout: Duration) -> bool {
    let Some(probe) = &places.service_probe else {
        return super::helper_side::passwordless_sudo(&places.sudo, timeout);
    };
    let request = CheckRequest {
        kind: RequestKind::Sudo,
        uid: service.uid,
        home: PathBuf::from("/"),
        shell: PathBuf::from("/bin/sh"),
        others: Vec::new(),
        declaration: None,
        claude_bin: None,
        search_tail: Vec::new(),
        workdirs: Vec::new(),
        state_dir: PathBuf::from("/"),
        key_files: Vec::new(),
        homes: Vec::new(),
        sudo: places.sudo.clone(),
        auth_status_timeout_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
        entry_scan_timeout_ms: 0,
    };
    match run_probe(probe, &service.name, &request.encode(), timeout * 2) {
        Some(answer) => !matches!(
            CheckAnswer::decode(&answer),
            Ok(CheckAnswer::Sudo {
                passwordless_sudo: false
            })
        ),
        None => true,
    }
}

/// Runs `program doctor-probe --user <user>` with `request` on standard input
/// (blocking): the answer, or `None` when the probe failed or did not end in
/// time. The probe starts as root and gives root up before it reads.
pub fn run_probe(program: &Path, user: &str, request: &[u8], timeout: Duration) -> Option<Vec<u8>> {
    let mut command = Command::new(program);
    command
        .args(["doctor-probe", "--user", user])
        .env_clear()
        .current_dir("/");
    let done = bounded::run_with_input(
        &mut command,
        Some(request.to_vec()),
        timeout,
        wire::MAX_WIRE_BYTES,
    )
    .ok()?;
    (done.status.success() && !done.truncated).then_some(done.stdout)
}

/// HD4 and the service's part of HD8.
fn hd4_hd8(
    config: &HostServiceConfig,
    service: Option<&UserEntry>,
    session: &[Account],
    codes: &mut Vec<DoctorCode>,
) {
    let service_uid = service.map(|s| s.uid);
    match terms::Node::lstat(&config.state_dir) {
        Ok(dir) if dir.kind == NodeKind::Dir => {
            if Some(dir.uid) != service_uid {
                codes.push(DoctorCode::StateDirOwner);
            }
            if dir.mode & 0o7777 != 0o700 {
                codes.push(DoctorCode::StateDirMode);
            }
            if session
                .iter()
                .any(|a| terms::permits(&dir, a, READ | WRITE | EXEC))
            {
                codes.push(DoctorCode::StateAccessForSessionUser);
            }
        }
        // Missing, a link or not a folder: it does not belong to the service user.
        _ => codes.push(DoctorCode::StateDirOwner),
    }
    for name in KEY_FILES {
        let path = config.state_dir.join(name);
        match terms::Node::lstat(&path) {
            Ok(file) => {
                if file.kind != NodeKind::File
                    || Some(file.uid) != service_uid
                    || file.mode & 0o7077 != 0
                {
                    codes.push(DoctorCode::KeyFileUnprotected);
                }
                if session
                    .iter()
                    .any(|a| terms::permits(&file, a, READ | WRITE | EXEC))
                {
                    codes.push(DoctorCode::StateAccessForSessionUser);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(_) => codes.push(DoctorCode::KeyFileUnprotected),
        }
    }
}

/// The binary of the helper: `/proc/self/exe` unless the places name one.
pub fn helper_binary(places: &Places) -> PathBuf {
    places.helper_binary.clone().unwrap_or_else(|| {
        std::fs::read_link("/proc/self/exe").unwrap_or_else(|_| PathBuf::from("/proc/self/exe"))
    })
}

/// HD10 and HD11 at the places for all, and which profile programs resolve.
fn hd10_hd11(
    inputs: &ServiceInputs,
    claude: Option<&ProgramCheck>,
    session: &[Account],
    out: &mut ServiceFindings,
) {
    let config = &inputs.config;
    let places = &inputs.places;
    let trusted = |path: &Path| terms::trusted_for_all(&terms::resolve(path), session);
    let helper = helper_binary(places);
    let helper_ok = trusted(&helper);
    let units_ok = service_definitions(&places.unit_folder)
        .iter()
        .all(|u| trusted(u));
    let endpoint = config.runtime_dir.join("helper");
    let endpoint_ok = !terms::resolve(&endpoint).present() || trusted(&endpoint);
    let config_ok = inputs.config_path.as_deref().is_none_or(trusted);
    if !(helper_ok && units_ok && endpoint_ok && config_ok) {
        out.codes.push(DoctorCode::HelperUntrusted);
    }
    if claude.is_some_and(|c| !c.trusted(session)) {
        out.codes.push(DoctorCode::ClaudeBinUntrusted);
    }
    if ptrace_scope_low(&ptrace_scope_path()) {
        out.codes.push(DoctorCode::PtraceScopeLow);
    }
    if !cfg!(target_os = "linux") {
        out.codes.push(DoctorCode::PeerCheckUnavailable);
    }
    // HD11, places for all: the helper, claude_bin, the programs of the profiles.
    let mut places_ok = helper_ok;
    if let Some(claude) = claude
        && claude.file.present()
    {
        places_ok &= terms::trusted_for_all(&claude.file, session);
    }
    for profile in &config.profiles {
        let present = match (&profile.kind, &profile.command) {
            (ProfileKind::Command, Some(command)) => {
                let resolution = terms::resolve(&command.program);
                let present = resolution
                    .target
                    .as_ref()
                    .is_some_and(|t| t.kind == NodeKind::File);
                if present {
                    places_ok &= terms::trusted_for_all(&resolution, session);
                }
                present
            }
            (ProfileKind::Command, None) => false,
            _ => true,
        };
        out.program_present.push(present);
    }
    if !places_ok {
        out.codes.push(DoctorCode::ProgramLocationUntrusted);
    }
}

/// `bothy-host*.service` and `bothy-host*.socket` in `folder`, with the files of
/// their drop-in folders (`*.service.d/*.conf`).
pub fn service_definitions(folder: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(folder) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !name.starts_with("bothy-host") {
            continue;
        }
        let path = entry.path();
        if name.ends_with(".service") || name.ends_with(".socket") {
            out.push(path);
        } else if name.ends_with(".service.d") || name.ends_with(".socket.d") {
            out.push(path.clone());
            if let Ok(drop_ins) = std::fs::read_dir(&path) {
                out.extend(drop_ins.flatten().map(|d| d.path()));
            }
        }
    }
    out.sort();
    out
}

/// The file `kernel.yama.ptrace_scope` is read from: [`PTRACE_SCOPE_FILE`], or,
/// only with the feature `test-seams`, the file [`PTRACE_SCOPE_ENV`] names.
pub fn ptrace_scope_path() -> PathBuf {
    ptrace_scope_path_from(|name| std::env::var_os(name))
}

/// [`ptrace_scope_path`] with the environment as a function.
pub fn ptrace_scope_path_from(env: impl Fn(&str) -> Option<std::ffi::OsString>) -> PathBuf {
    crate::seams::path_from(env, PTRACE_SCOPE_ENV)
        .unwrap_or_else(|| PathBuf::from(PTRACE_SCOPE_FILE))
}

/// HD10 `ptrace_scope_low`: the file is missing, unreadable or below 1.
pub fn ptrace_scope_low(path: &Path) -> bool {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|text| text.trim().parse::<u32>().ok())
        .is_none_or(|level| level < 1)
}

/// HD9's accounts: root, the service user, every former session user and every
/// person account, without the session users and `nobody`.
fn foreign_homes(inputs: &ServiceInputs, service: Option<&UserEntry>) -> Vec<ForeignHome> {
    let config = &inputs.config;
    let mut out: Vec<ForeignHome> = Vec::new();
    let mut add = |name: &str, home: &Path, former: bool| {
        if name == accounts::NOBODY || config.session_users.iter().any(|s| s == name) {
            return;
        }
        if let Some(existing) = out.iter_mut().find(|h| h.name == name) {
            existing.former |= former;
            return;
        }
        out.push(ForeignHome {
            name: name.to_owned(),
            home: home.to_owned(),
            former,
        });
    };
    if let Ok(Some(root)) = UserEntry::lookup("root") {
        add(&root.name, &root.home, false);
    }
    if let Some(service) = service {
        add(&service.name, &service.home, false);
    }
    for name in &inputs.former {
        // A user the operating system no longer keeps has no home to check.
        if let Ok(Some(entry)) = UserEntry::lookup(name) {
            add(&entry.name, &entry.home, true);
        }
    }
    let passwd = std::fs::read_to_string(&inputs.places.passwd).unwrap_or_default();
    let login_defs = std::fs::read_to_string(&inputs.places.login_defs).unwrap_or_default();
    let (min, max) = accounts::uid_range(&login_defs);
    for person in accounts::person_accounts(&passwd, min, max) {
        add(&person.name, &person.home, false);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(not(feature = "test-seams"))]
    #[test]
    fn without_test_seams_the_real_ptrace_scope_is_read_and_the_variable_ignored() {
        let path = ptrace_scope_path_from(|_| Some("/nonexistent/one".into()));
        assert_eq!(path, PathBuf::from(PTRACE_SCOPE_FILE));
        let real = std::fs::read_to_string(PTRACE_SCOPE_FILE).ok();
        let expected_low = real
            .as_deref()
            .and_then(|t| t.trim().parse::<u32>().ok())
            .is_none_or(|l| l < 1);
        assert_eq!(ptrace_scope_low(&path), expected_low);
        if !Path::new("/proc/sys/kernel/yama").exists() {
            // This machine's kernel has no Yama (DESIGN §4): HD10 must fail.
            assert!(ptrace_scope_low(&path));
        }
    }

    #[cfg(feature = "test-seams")]
    #[test]
    fn with_test_seams_the_variable_redirects_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("ptrace_scope");
        std::fs::write(&file, "1\n").expect("write");
        let f = file.clone();
        let path = ptrace_scope_path_from(move |name| {
            (name == PTRACE_SCOPE_ENV).then(|| f.clone().into())
        });
        assert_eq!(path, file);
        assert!(!ptrace_scope_low(&path));
        assert_eq!(
            ptrace_scope_path_from(|_| None),
            PathBuf::from(PTRACE_SCOPE_FILE)
        );
    }

    #[test]
    fn ptrace_levels() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("scope");
        for (text, low) in [
            ("0\n", true),
            ("1\n", false),
            ("3", false),
            ("x", true),
            ("", true),
        ] {
            std::fs::write(&file, text).expect("write");
            assert_eq!(ptrace_scope_low(&file), low, "{text:?}");
        }
        assert!(ptrace_scope_low(&dir.path().join("missing")));
    }

    #[test]
    fn service_definitions_are_found_by_name() {
        let dir = tempfile::tempdir().expect("tempdir");
        for name in [
            "bothy-host.service",
            "bothy-host-helper@.service",
            "bothy-host-helper@alice.socket",
            "other.service",
            "bothy-host.timer",
        ] {
            std::fs::write(dir.path().join(name), b"").expect("write");
        }
        std::fs::create_dir(dir.path().join("bothy-host.service.d")).expect("mkdir");
        std::fs::write(dir.path().join("bothy-host.service.d/x.conf"), b"").expect("write");
        let names: Vec<String> = service_definitions(dir.path())
            .iter()
            .map(|p| {
                p.strip_prefix(dir.path())
                    .expect("inside")
                    .display()
                    .to_string()
            })
            .collect();
        assert_eq!(
            names,
            [
                "bothy-host-helper@.service",
                "bothy-host-helper@alice.socket",
                "bothy-host.service",
                "bothy-host.service.d",
                "bothy-host.service.d/x.conf"
            ]
        );
    }
}
