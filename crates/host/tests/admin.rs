//! `bothy-host install` and `bothy-host session-user add|remove` with real
//! accounts, real files and the real binary (2.2 items 1–4, "PTY helper" item
//! 1, D-M2-42-14, DESIGN §4). The units are checked literally and with
//! `systemd-analyze verify`; the tests write them to a folder of their own
//! with `--unit-dir` (systemd does not run here, D-191).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use bothy_testkit as support;
use bothy_testkit::helper as helper_common;

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use bothy_host::admin::units::FORBIDDEN_DIRECTIVES;
use bothy_host::channel::{Channel, PeerExpectation};
use bothy_host::config::Config;
use bothy_host::doctor::accounts::UserEntry;
use bothy_host::manager;
use bothy_host::state::{Owner, StateDir};
use helper_common::{Supervised, poll, run_as};
use support::output::{refused, stderr, stdout, succeeded, text};
use support::users::{Accounts, TestUser, processes_of, unique_name};
use uuid::Uuid;

const BIN: &str = env!("CARGO_BIN_EXE_bothy-host");

/// The options that set `no_new_privs` as systemd.exec(5) lists them under
/// `NoNewPrivileges=` (systemd 252). Written out here on purpose, not taken
/// from `FORBIDDEN_DIRECTIVES` of the code: it is the oracle the refusal of
/// drop-ins is checked against, so that an option missing from the code's
/// list fails the test instead of going unchecked.
const IMPLYING_NO_NEW_PRIVS: &[&str] = &[
    "NoNewPrivileges",
    "DynamicUser",
    "LockPersonality",
    "MemoryDenyWriteExecute",
    "PrivateDevices",
    "ProtectClock",
    "ProtectHostname",
    "ProtectKernelLogs",
    "ProtectKernelModules",
    "ProtectKernelTunables",
    "RestrictAddressFamilies",
    "RestrictNamespaces",
    "RestrictRealtime",
    "RestrictSUIDSGID",
    "SystemCallArchitectures",
    "SystemCallFilter",
    "SystemCallLog",
];

/// Every directive a unit of ours may carry; anything else fails the test.
const ALLOWED: &[&str] = &[
    "Description",
    "Wants",
    "After",
    "Requires",
    "Type",
    "User",
    "ExecStart",
    "Restart",
    "RestartSec",
    "StartLimitIntervalSec",
    "RestartPreventExitStatus",
    "RuntimeDirectory",
    "RuntimeDirectoryMode",
    "WantedBy",
    "ListenStream",
    "Accept",
    "SocketUser",
    "SocketGroup",
    "SocketMode",
    "DirectoryMode",
    "RemoveOnStop",
    "Service",
    "Delegate",
];

/// A folder for one test under `/var/lib/bothy-tests` (root, 0755; D-106).
fn test_dir() -> tempfile::TempDir {
    fs::create_dir_all("/var/lib/bothy-tests").unwrap();
    let dir = tempfile::tempdir_in("/var/lib/bothy-tests").unwrap();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

fn bothy_host(config: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("--config")
        .arg(config)
        .args(args)
        .output()
        .expect("bothy-host runs")
}

/// `host_service.session_users` of the configuration at `config`.
fn session_users(config: &Path) -> Vec<String> {
    Config::load(config).unwrap().host_service.session_users
}

/// [`bothy_host`] run as `user` instead of root.
fn bothy_host_as(user: &TestUser, config: &Path, args: &[&str]) -> Output {
    let mut all = vec!["--config", config.to_str().unwrap()];
    all.extend(args);
    run_as(user, BIN, &all)
}

/// A new account in the group `disk`, one of the groups HD2 forbids.
fn member_of_disk(tag: &str) -> TestUser {
    let member = TestUser::create(tag);
    let status = Command::new("gpasswd")
        .args(["-a", &member.name, "disk"])
        .output()
        .unwrap();
    assert!(status.status.success());
    member
}

/// The directives of a unit file (comments and sections left out).
fn directives(text: &str) -> Vec<(String, String)> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with('['))
        .map(|l| {
            let (k, v) = l.split_once('=').expect("a directive");
            (k.to_owned(), v.to_owned())
        })
        .collect()
}

/// Checks that `unit` sets each of the `wanted` directives to its value.
fn assert_has(unit: &str, wanted: &[(&str, &str)]) {
    let d = directives(unit);
    for (key, value) in wanted {
        assert!(
            d.iter().any(|(k, v)| k == key && v == value),
            "{key}={value} missing in\n{unit}"
        );
    }
}

fn assert_nothing_forbidden(unit: &str) {
    for (key, _) in directives(unit) {
        assert!(
            ALLOWED.contains(&key.as_str()),
            "{key}= is not expected in\n{unit}"
        );
        assert!(
            !IMPLYING_NO_NEW_PRIVS.contains(&key.as_str()),
            "{key}= in\n{unit}"
        );
        assert!(
            !FORBIDDEN_DIRECTIVES.contains(&key.as_str()),
            "{key}= in\n{unit}"
        );
    }
}

/// `systemd-analyze verify` of `files`: it exits 0 also for unknown keys and
/// values it cannot parse (it ignores them with a message), so any output is a
/// failure too.
fn verify(files: &[PathBuf]) -> Result<(), String> {
    let output = Command::new("systemd-analyze")
        .args(["verify", "--man=no", "--recursive-errors=no"])
        .args(files)
        .output()
        .expect("systemd-analyze runs (package systemd; .ci/run installs it)");
    let said = format!("{}{}", stdout(&output), stderr(&output));
    if output.status.success() && said.trim().is_empty() {
        Ok(())
    } else {
        Err(format!(
            "systemd-analyze verify: {:?}\n{said}",
            output.status.code()
        ))
    }
}

/// Every file and link below `dir`: content (or link target), mode, inode, mtime.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, (Vec<u8>, u32, u64, i64, i64)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(folder) = stack.pop() {
        for entry in fs::read_dir(&folder).unwrap() {
            let path = entry.unwrap().path();
            let m = fs::symlink_metadata(&path).unwrap();
            if m.is_dir() {
                stack.push(path.clone());
            }
            let content = if m.file_type().is_symlink() {
                fs::read_link(&path)
                    .unwrap()
                    .into_os_string()
                    .into_encoded_bytes()
            } else if m.is_file() {
                fs::read(&path).unwrap()
            } else {
                Vec::new()
            };
            out.insert(
                path,
                (content, m.mode(), m.ino(), m.mtime(), m.mtime_nsec()),
            );
        }
    }
    out
}

fn forbidden_groups(name: &str) -> Vec<String> {
    let entry = UserEntry::lookup(name)
        .unwrap()
        .expect("the account exists");
    bothy_host::admin::accounts::forbidden_groups(&entry, &[])
        .expect("the groups of a test account can be read")
}

#[test]
fn install_makes_accounts_state_dir_skeleton_and_units_and_a_second_run_changes_nothing() {
    let dir = test_dir();
    let (svc, a, b) = (unique_name("s"), unique_name("a"), unique_name("b"));
    let _accounts = Accounts(vec![svc.clone(), a.clone(), b.clone()]);
    let config = dir.path().join("etc/config.yaml");
    let state = dir.path().join("lib/state");
    let units = dir.path().join("units");
    let args = [
        "install",
        "--service-user",
        &svc,
        "--state-dir",
        state.to_str().unwrap(),
        "--session-user",
        &a,
        "--session-user",
        &b,
        "--unit-dir",
        units.to_str().unwrap(),
    ];
    let first = bothy_host(&config, &args);
    let out = succeeded(&first);
    for line in [
        format!("created configuration {}", config.display()),
        format!("created service user {svc}"),
        format!("created session user {a}"),
        format!("created session user {b}"),
        format!("created state directory {}", state.display()),
    ] {
        assert!(out.contains(&line), "{line}: {}", text(&first));
    }
    assert!(out.contains("which systemd does not read"), "{out}");

    // The skeleton: root's, 0644, and it says what was given.
    let m = fs::metadata(&config).unwrap();
    assert_eq!((m.uid(), m.gid(), m.mode() & 0o7777), (0, 0, 0o644));
    let decoded = Config::load(&config).unwrap().host_service;
    assert_eq!(decoded.service_user, svc);
    assert_eq!(decoded.state_dir, state);
    assert_eq!(decoded.session_users, [a.clone(), b.clone()]);

    // Accounts without forbidden groups; closed homes; the service user's home
    // is the state directory and it has no login shell.
    for name in [&svc, &a, &b] {
        assert!(
            forbidden_groups(name).is_empty(),
            "{name}: {:?}",
            forbidden_groups(name)
        );
        let entry = UserEntry::lookup(name).unwrap().unwrap();
        assert_ne!(entry.uid, 0);
    }
    let service = UserEntry::lookup(&svc).unwrap().unwrap();
    assert_eq!(service.home, state);
    assert!(
        service.shell.ends_with("nologin"),
        "{}",
        service.shell.display()
    );
    for name in [&a, &b] {
        let entry = UserEntry::lookup(name).unwrap().unwrap();
        let home = fs::metadata(&entry.home).unwrap();
        assert_eq!(
            (home.uid(), home.mode() & 0o777),
            (entry.uid, 0o700),
            "{name}"
        );
    }
    let m = fs::symlink_metadata(&state).unwrap();
    assert!(m.is_dir());
    assert_eq!(
        (m.uid(), m.gid(), m.mode() & 0o7777),
        (service.uid, service.gid, 0o700)
    );

    // The units, literally.
    let binary = fs::canonicalize(BIN).unwrap();
    let service_unit = fs::read_to_string(units.join("bothy-host.service")).unwrap();
    let exec = format!("{} --config {} run", binary.display(), config.display());
    assert_has(
        &service_unit,
        &[
            ("User", &svc),
            ("Restart", "on-failure"),
            ("RestartPreventExitStatus", "78"),
            ("RuntimeDirectory", "bothy-host-confirm"),
            ("ExecStart", &exec),
            ("WantedBy", "multi-user.target"),
        ],
    );
    assert_nothing_forbidden(&service_unit);
    let mut files = vec![units.join("bothy-host.service")];
    for name in [&a, &b] {
        let socket =
            fs::read_to_string(units.join(format!("bothy-host-helper@{name}.socket"))).unwrap();
        let helper =
            fs::read_to_string(units.join(format!("bothy-host-helper@{name}.service"))).unwrap();
        // The endpoint exactly where supervise puts it, in the same form (D-132).
        let endpoint = decoded.helper_endpoint(name);
        let service = format!("bothy-host-helper@{name}.service");
        assert_has(
            &socket,
            &[
                ("ListenStream", endpoint.to_str().unwrap()),
                ("SocketUser", &svc),
                ("SocketMode", "0600"),
                ("DirectoryMode", "0755"),
                ("Accept", "no"),
                ("WantedBy", "sockets.target"),
                ("Service", &service),
            ],
        );
        let exec = format!("{} pty-helper", binary.display());
        assert_has(
            &helper,
            &[
                ("User", name),
                ("Delegate", "yes"),
                ("ExecStart", &exec),
                ("Restart", "always"),
                ("RestartSec", "1s"),
                ("StartLimitIntervalSec", "0"),
                ("RestartPreventExitStatus", "78"),
            ],
        );
        assert_nothing_forbidden(&socket);
        assert_nothing_forbidden(&helper);
        let link = units.join(format!(
            "sockets.target.wants/bothy-host-helper@{name}.socket"
        ));
        assert_eq!(
            fs::read_link(&link).unwrap(),
            units.join(format!("bothy-host-helper@{name}.socket"))
        );
        files.push(units.join(format!("bothy-host-helper@{name}.socket")));
        files.push(units.join(format!("bothy-host-helper@{name}.service")));
    }
    assert_eq!(
        fs::read_link(units.join("multi-user.target.wants/bothy-host.service")).unwrap(),
        units.join("bothy-host.service")
    );
    for file in &files {
        let m = fs::metadata(file).unwrap();
        assert_eq!(
            (m.uid(), m.gid(), m.mode() & 0o7777),
            (0, 0, 0o644),
            "{}",
            file.display()
        );
    }
    verify(&files).unwrap();

    // The verification can fail: a wrong value or an unknown key is caught.
    let broken = dir.path().join("broken");
    fs::create_dir(&broken).unwrap();
    for (from, to) in [
        (
            "RestartPreventExitStatus=78",
            "RestartPreventExitStatus=seventy-eight",
        ),
        ("Delegate=yes", "Delegate=yes\nDelegateTypo=yes"),
    ] {
        let name = format!("bothy-host-helper@{a}.service");
        let unit = fs::read_to_string(units.join(&name)).unwrap();
        assert!(unit.contains(from));
        fs::write(broken.join(&name), unit.replace(from, to)).unwrap();
        assert!(verify(&[broken.join(&name)]).is_err(), "{to} passed verify");
    }

    // A second run: nothing changes, and it says so.
    let before = snapshot(dir.path());
    let second = bothy_host(&config, &args);
    let out = succeeded(&second);
    assert!(out.contains("nothing changed"), "{out}");
    for verb in ["created", "updated", "removed"] {
        assert!(
            !out.lines().any(|l| l.contains(&format!(": {verb} "))),
            "{verb}: {out}"
        );
    }
    assert_eq!(before, snapshot(dir.path()), "the second run changed files");

    // Without the flags of the skeleton, the file is the truth.
    let third = bothy_host(&config, &["install", "--unit-dir", units.to_str().unwrap()]);
    assert!(succeeded(&third).contains("nothing changed"));
    assert_eq!(before, snapshot(dir.path()));

    // A helper unit of a name that is no session user any more is removed.
    fs::write(
        &config,
        fs::read_to_string(&config)
            .unwrap()
            .replace(&format!("[{a}, {b}]"), &format!("[{a}]")),
    )
    .unwrap();
    let fourth = bothy_host(&config, &["install", "--unit-dir", units.to_str().unwrap()]);
    succeeded(&fourth);
    assert!(!units.join(format!("bothy-host-helper@{b}.socket")).exists());
    assert!(
        !units
            .join(format!("bothy-host-helper@{b}.service"))
            .exists()
    );
    assert!(
        fs::symlink_metadata(
            units.join(format!("sockets.target.wants/bothy-host-helper@{b}.socket"))
        )
        .is_err()
    );
    assert!(units.join(format!("bothy-host-helper@{a}.socket")).exists());
}

#[test]
fn install_refuses_what_the_doctor_would_refuse_and_callers_other_than_root() {
    let dir = test_dir();
    let units = dir.path().join("units");
    let config = dir.path().join("config.yaml");
    let unit_dir = units.to_str().unwrap();

    // Not root: exit 2, nothing written.
    let stranger = TestUser::create("x");
    let output = bothy_host_as(&stranger, &config, &["install", "--unit-dir", unit_dir]);
    refused(&output, 2, "run it as root");
    assert!(!config.exists() && !units.exists());

    // Names HD1 refuses, before anything is made.
    for bad in [
        vec!["--session-user", "root"],
        vec!["--session-user", "a b"],
        vec!["--service-user", "root"],
    ] {
        let mut args = vec!["install", "--unit-dir", unit_dir];
        args.extend(bad.iter());
        let output = bothy_host(&config, &args);
        assert_eq!(output.status.code(), Some(1), "{bad:?}: {}", text(&output));
        assert!(!config.exists() && !units.exists(), "{bad:?}");
    }

    // An existing account in a forbidden group (HD2) is refused, named, and
    // not changed.
    let service = TestUser::create("svc");
    let member = member_of_disk("d");
    let state = dir.path().join("state");
    fs::write(
        &config,
        format!(
            "host_service:\n  service_user: {}\n  state_dir: {}\n  session_users: [{}]\n",
            service.name,
            state.display(),
            member.name
        ),
    )
    .unwrap();
    let written = fs::read(&config).unwrap();
    let output = bothy_host(&config, &["install", "--unit-dir", unit_dir]);
    refused(&output, 1, "forbidden group(s) disk");
    assert!(stderr(&output).contains(&member.name));
    assert!(!units.exists() && !state.exists());
    assert_eq!(
        fs::read(&config).unwrap(),
        written,
        "install never overwrites"
    );

    // A name for the skeleton with an existing file that does not list it.
    let output = bothy_host(
        &config,
        &[
            "install",
            "--unit-dir",
            unit_dir,
            "--session-user",
            "someoneelse",
        ],
    );
    refused(&output, 1, "session-user add someoneelse");

    // A state directory of another account is not taken over.
    let _ = Command::new("gpasswd")
        .args(["-d", &member.name, "disk"])
        .output();
    fs::create_dir(&state).unwrap();
    let output = bothy_host(&config, &["install", "--unit-dir", unit_dir]);
    refused(&output, 1, "does not belong to the service user");
    assert!(!units.exists());

    // A drop-in that would set no_new_privs (each option of the test's own
    // list) or mount nosuid is refused, in every folder that applies to a
    // unit of ours.
    fs::remove_dir(&state).unwrap();
    let folders = [
        "bothy-host.service.d",
        "bothy-host-helper@.service.d",
        "service.d",
    ];
    let keys = IMPLYING_NO_NEW_PRIVS.iter().chain(&["ProtectSystem"]);
    for (key, folder) in keys.zip(folders.iter().cycle()) {
        let drop_in = units.join(folder);
        fs::create_dir_all(&drop_in).unwrap();
        fs::write(
            drop_in.join("local.conf"),
            format!("[Service]\n{key}=yes\n"),
        )
        .unwrap();
        let output = bothy_host(&config, &["install", "--unit-dir", unit_dir]);
        refused(&output, 1, &format!("{key}= in "));
        assert!(!units.join("bothy-host.service").exists() && !state.exists());
        fs::remove_dir_all(&drop_in).unwrap();
    }

    // An invalid configuration: 78, named key, nothing done.
    fs::write(&config, "host_service:\n  nope: 1\n").unwrap();
    let output = bothy_host(&config, &["install", "--unit-dir", unit_dir]);
    refused(&output, 78, "host_service.nope");
}

/// A host prepared for the session-user commands: a service user, one session
/// user, a configuration with comments and working directories.
struct Host {
    _dir: tempfile::TempDir,
    config: PathBuf,
    state: PathBuf,
    units: PathBuf,
    service: TestUser,
    first: TestUser,
}

impl Host {
    fn new(extra: &str) -> Host {
        let dir = test_dir();
        let service = TestUser::create("svc");
        let first = TestUser::create("a");
        let config = dir.path().join("config.yaml");
        let state = dir.path().join("state");
        let units = dir.path().join("units");
        fs::write(
            &config,
            format!(
                "# the host's configuration\nhost_service:\n  service_user: {svc}  # the service\n  state_dir: {state}\n  runtime_dir: {run}\n  # people\n  session_users:\n    - {first}  # the first\n  claude_workdirs:\n    {first}:\n      - {{path: /srv/a, display_name: a}}\n{extra}  scrollback_bytes: 4096\n",
                svc = service.name,
                state = state.display(),
                run = dir.path().join("run").display(),
                first = first.name,
            ),
        )
        .unwrap();
        let output = bothy_host(&config, &["install", "--unit-dir", units.to_str().unwrap()]);
        succeeded(&output);
        Host {
            _dir: dir,
            config,
            state,
            units,
            service,
            first,
        }
    }

    fn run(&self, args: &[&str]) -> Output {
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["--unit-dir", self.units.to_str().unwrap()]);
        bothy_host(&self.config, &all)
    }

    fn state_dir(&self) -> StateDir {
        StateDir::new(
            &self.state,
            Some(Owner {
                uid: self.service.uid,
                gid: self.service.gid,
            }),
        )
    }
}

/// An ACL of access on `path` that gives `uid` r-x (the kernel's format:
/// version 2, then tag/perm/id entries).
fn open_with_acl(path: &Path, uid: u32) {
    let mut acl = 2u32.to_le_bytes().to_vec();
    for (tag, perm, id) in [
        (0x01u16, 7u16, u32::MAX),
        (0x02, 5, uid),
        (0x04, 0, u32::MAX),
        (0x10, 5, u32::MAX),
        (0x20, 0, u32::MAX),
    ] {
        acl.extend(tag.to_le_bytes());
        acl.extend(perm.to_le_bytes());
        acl.extend(id.to_le_bytes());
    }
    rustix::fs::setxattr(
        path,
        "system.posix_acl_access",
        &acl,
        rustix::fs::XattrFlags::empty(),
    )
    .unwrap();
}

fn has_acl(path: &Path) -> bool {
    rustix::fs::getxattr(path, "system.posix_acl_access", &mut [0u8; 0][..]).is_ok()
}

#[test]
fn session_user_add_then_remove_with_a_real_account() {
    let host = Host::new("");
    let new = unique_name("n");
    let _accounts = Accounts(vec![new.clone()]);
    let first = host.first.name.clone();
    let original = fs::read_to_string(&host.config).unwrap();

    let output = host.run(&["session-user", "add", &new]);
    let out = succeeded(&output);
    assert!(
        out.contains(&format!("created session user {new}")),
        "{out}"
    );
    assert!(
        out.contains(&format!("{new} added to host_service.session_users")),
        "{out}"
    );
    assert!(out.contains("no service runs"), "{out}");

    // The account: its own group, no forbidden group, home closed.
    let entry = UserEntry::lookup(&new).unwrap().expect("created");
    assert!(forbidden_groups(&new).is_empty());
    let home = fs::metadata(&entry.home).unwrap();
    assert_eq!((home.uid(), home.mode() & 0o777), (entry.uid, 0o700));

    // The configuration: one line more, everything else as it was.
    let edited = fs::read_to_string(&host.config).unwrap();
    assert_eq!(
        edited,
        original.replace(
            &format!("    - {first}  # the first\n"),
            &format!("    - {first}  # the first\n    - {new}\n")
        )
    );
    let decoded = Config::load(&host.config).unwrap().host_service;
    assert_eq!(decoded.session_users, [first.clone(), new.clone()]);
    assert_eq!(decoded.scrollback_bytes, 4096);
    let m = fs::metadata(&host.config).unwrap();
    assert_eq!(
        (m.uid(), m.mode() & 0o7777),
        (0, 0o644),
        "owner and mode kept"
    );

    // Its helper units, accepted by systemd.
    let socket = host.units.join(format!("bothy-host-helper@{new}.socket"));
    let service = host.units.join(format!("bothy-host-helper@{new}.service"));
    assert_has(&fs::read_to_string(&service).unwrap(), &[("User", &new)]);
    assert_has(
        &fs::read_to_string(&socket).unwrap(),
        &[(
            "ListenStream",
            decoded.helper_endpoint(&new).to_str().unwrap(),
        )],
    );
    verify(&[
        socket.clone(),
        service.clone(),
        host.units.join("bothy-host.service"),
    ])
    .unwrap();

    // A person opens a session: the name is bound. Then the person opens the
    // home to the other session user of this test only, by an ACL entry whose
    // mask also opens the group bits of the mode (never to all: the HD9 of
    // other scenarios running now would see it, D-106).
    let person = Uuid::new_v4();
    assert!(host.state_dir().bind(&new, person).unwrap());
    let bindings = fs::read(host.state.join("bindings.json")).unwrap();
    open_with_acl(&entry.home, host.first.uid);
    assert!(has_acl(&entry.home));
    assert_eq!(fs::metadata(&entry.home).unwrap().mode() & 0o777, 0o750);

    let output = host.run(&["session-user", "remove", &new]);
    let out = succeeded(&output);
    assert!(
        out.contains(&format!("updated home of {new} closed to other users")),
        "{out}"
    );
    assert!(out.contains("binding of"), "{out}");
    assert!(
        out.contains(&format!(
            "delete the account {new} together with its long-running processes"
        )),
        "{out}"
    );
    assert_eq!(fs::read_to_string(&host.config).unwrap(), original);
    assert!(!socket.exists() && !service.exists());
    assert!(
        fs::symlink_metadata(host.units.join(format!(
            "sockets.target.wants/bothy-host-helper@{new}.socket"
        )))
        .is_err()
    );
    let home = fs::metadata(&entry.home).unwrap();
    assert_eq!(home.mode() & 0o077, 0, "closed: {:o}", home.mode());
    assert!(!has_acl(&entry.home), "the ACL of access is gone");
    assert_eq!(
        fs::read(host.state.join("bindings.json")).unwrap(),
        bindings,
        "the binding stays"
    );
    assert_eq!(
        host.state_dir().load_bindings().unwrap().get(&new),
        Some(&person)
    );

    // The name is never handed out again, in no spelling.
    for spelling in [new.clone(), new.to_uppercase()] {
        let output = host.run(&["session-user", "add", &spelling]);
        refused(&output, 1, "is bound to a person");
        assert_eq!(fs::read_to_string(&host.config).unwrap(), original);
        assert!(!socket.exists());
    }
}

#[test]
fn remove_takes_the_working_directories_out_too() {
    let second = TestUser::create("b");
    let host = Host::new(&format!(
        "    {}:\n      - path: /srv/b\n        display_name: b\n",
        second.name
    ));
    let first = host.first.name.clone();
    let output = host.run(&["session-user", "add", &second.name]);
    assert!(succeeded(&output).contains(&format!("unchanged session user {}", second.name)));
    let with_both = Config::load(&host.config).unwrap().host_service;
    assert_eq!(with_both.workdirs_of(&second.name).len(), 1);

    let output = host.run(&["session-user", "remove", &first]);
    assert!(succeeded(&output).contains("and host_service.claude_workdirs"));
    let text_after = fs::read_to_string(&host.config).unwrap();
    assert!(text_after.contains("# the host's configuration\n"));
    assert!(text_after.contains("  # people\n"));
    let after = Config::load(&host.config).unwrap().host_service;
    assert_eq!(after.session_users, std::slice::from_ref(&second.name));
    assert!(after.workdirs_of(&first).is_empty());
    assert_eq!(
        after.workdirs_of(&second.name),
        with_both.workdirs_of(&second.name)
    );
    assert_eq!(after.state_dir, with_both.state_dir);
    assert_eq!(after.scrollback_bytes, 4096);
}

#[test]
fn session_user_refusals() {
    let host = Host::new("");
    let first = host.first.name.clone();
    let original = fs::read_to_string(&host.config).unwrap();
    let cases: Vec<(Vec<String>, i32, String)> = vec![
        (
            vec!["add".into(), "a b".into()],
            1,
            "not a valid user name".into(),
        ),
        (
            vec!["add".into(), "root".into()],
            1,
            "administrator account".into(),
        ),
        (
            vec!["add".into(), host.service.name.clone()],
            1,
            "is the service user".into(),
        ),
        (
            vec!["add".into(), first.clone()],
            1,
            "already a session user".into(),
        ),
        (
            vec!["add".into(), first.to_uppercase()],
            1,
            "already a session user".into(),
        ),
        (
            vec!["remove".into(), "a b".into()],
            1,
            "not a valid session user name".into(),
        ),
        (
            vec!["remove".into(), unique_name("u")],
            1,
            "is not a session user of this host".into(),
        ),
        (
            vec!["remove".into(), first.to_uppercase()],
            1,
            format!("did you mean {first}?"),
        ),
    ];
    for (args, code, message) in cases {
        let mut all = vec!["session-user"];
        all.extend(args.iter().map(String::as_str));
        refused(&host.run(&all), code, &message);
        assert_eq!(
            fs::read_to_string(&host.config).unwrap(),
            original,
            "{args:?}"
        );
    }

    // An existing account in a forbidden group is not made a session user.
    let member = member_of_disk("d");
    let output = host.run(&["session-user", "add", &member.name]);
    refused(&output, 1, "forbidden group(s) disk");
    assert_eq!(fs::read_to_string(&host.config).unwrap(), original);

    // Bindings that cannot be read: fail closed.
    host.state_dir()
        .write_atomic("bindings.json", b"{not json")
        .unwrap();
    let new = unique_name("n");
    let output = host.run(&["session-user", "add", &new]);
    refused(&output, 1, "bindings cannot be read");
    assert!(
        UserEntry::lookup(&new).unwrap().is_none(),
        "no account made"
    );

    // Not root.
    let output = bothy_host_as(
        &host.first,
        &host.config,
        &["session-user", "remove", &first],
    );
    refused(&output, 2, "run it as root");
    assert_eq!(fs::read_to_string(&host.config).unwrap(), original);
}

/// Under a running `bothy-host supervise`, `remove` and `add` restart the
/// service through supervise's reload (D-260, D-261): after `remove` the
/// former helper process is gone with its endpoint, record and cgroup; after
/// `add` the new user's helper runs as that user behind its endpoint, and the
/// service was restarted after it started.
#[test]
fn add_and_remove_under_supervise_start_and_stop_the_helper_and_restart_the_service() {
    let sup = Supervised::start(2);
    let units = sup.dir.path().join("units");
    let run = |args: &[&str]| {
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["--unit-dir", units.to_str().unwrap()]);
        bothy_host(&sup.config, &all)
    };
    let before = sup.service_pid();
    let removed = sup.user(0);
    let kept_helper = sup.helper_pid(sup.user(1));
    let removed_helper = sup.helper_pid(removed);
    let removed_cgroup = sup.helper_cgroup(removed);
    assert_eq!(processes_of(removed.uid), [removed_helper]);

    let output = run(&["session-user", "remove", &removed.name]);
    let out = succeeded(&output);
    assert!(
        out.contains("the service was restarted"),
        "{}",
        text(&output)
    );
    assert!(
        out.contains(&format!(
            "stopped and removed the helper of {}",
            removed.name
        )),
        "{}",
        text(&output)
    );
    let after = sup.service_pid();
    assert_ne!(after, before);
    poll("the stand-in's start", || {
        sup.service_starts().contains(&after).then_some(())
    });
    // The former helper was stopped before the new service started.
    assert!(
        processes_of(removed.uid).is_empty(),
        "{:?}\n{}",
        processes_of(removed.uid),
        sup.log_text()
    );
    assert!(!sup.endpoint(removed).exists());
    assert!(!manager::helper_record(&sup.runtime_dir, &removed.name).exists());
    assert!(!removed_cgroup.exists());
    assert_eq!(sup.helper_pid(sup.user(1)), kept_helper);
    assert_eq!(session_users(&sup.config), [sup.user(1).name.clone()]);

    let new = unique_name("n");
    let _accounts = Accounts(vec![new.clone()]);
    let output = run(&["session-user", "add", &new]);
    let out = succeeded(&output);
    let restarted = sup.service_pid();
    assert_ne!(restarted, after, "add under supervise restarts the service");
    assert!(
        out.contains(&format!("the service was restarted (PID {restarted})")),
        "{}",
        text(&output)
    );
    let entry = UserEntry::lookup(&new).unwrap().expect("created");
    let record = manager::helper_record(&sup.runtime_dir, &new);
    let helper = manager::read_record(&sup.runtime_dir, &record).expect("the new helper runs");
    assert!(
        out.contains(&format!("started the helper of {new} (PID {helper})")),
        "{}",
        text(&output)
    );
    // A real process of the new user, in its delegated cgroup, behind an
    // endpoint only the service user can use; the peer check passes.
    assert_eq!(
        fs::metadata(format!("/proc/{helper}")).unwrap().uid(),
        entry.uid
    );
    assert_eq!(processes_of(entry.uid), [helper]);
    poll("the new helper in its delegated cgroup", || {
        let text = fs::read_to_string(format!("/proc/{helper}/cgroup")).ok()?;
        text.trim_end()
            .ends_with(&format!("/helper@{new}/helper"))
            .then_some(())
    });
    let endpoint = sup.runtime_dir.join("helper").join(format!("{new}.sock"));
    let m = fs::symlink_metadata(&endpoint).unwrap();
    assert_eq!((m.uid(), m.mode() & 0o777), (sup.service_user.uid, 0o600));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime
        .block_on(Channel::connect(
            &endpoint,
            PeerExpectation {
                uid: entry.uid,
                main_pid: helper,
            },
        ))
        .expect("the peer check passes");
    assert_eq!(sup.helper_pid(sup.user(1)), kept_helper);
    assert_eq!(
        session_users(&sup.config),
        [sup.user(1).name.clone(), new.clone()]
    );
}

/// `add` under supervise fails when supervise could not start the new helper
/// (here a folder lies where its endpoint goes, so supervise refuses to bind
/// it): exit 1, a message that points to supervise's log, which names
/// helper_setup_failed (D-261).
#[test]
fn add_under_supervise_fails_when_supervise_cannot_start_the_helper() {
    let sup = Supervised::start(1);
    let units = sup.dir.path().join("units");
    let new = unique_name("n");
    let _accounts = Accounts(vec![new.clone()]);
    let blocker = sup.runtime_dir.join("helper").join(format!("{new}.sock"));
    fs::create_dir(&blocker).unwrap();
    let output = bothy_host(
        &sup.config,
        &[
            "session-user",
            "add",
            &new,
            "--unit-dir",
            units.to_str().unwrap(),
        ],
    );
    refused(&output, 1, &format!("runs no helper for {new}"));
    assert!(
        sup.log_text().contains("helper_setup_failed"),
        "{}",
        sup.log_text()
    );
    assert!(!manager::helper_record(&sup.runtime_dir, &new).exists());
    // What add did before stays: a second run would refuse, a restart applies it.
    assert_eq!(
        session_users(&sup.config),
        [sup.user(0).name.clone(), new.clone()]
    );
    fs::remove_dir(&blocker).unwrap();
    succeeded(&bothy_host(&sup.config, &["restart"]));
    let helper = manager::read_record(
        &sup.runtime_dir,
        &manager::helper_record(&sup.runtime_dir, &new),
    )
    .expect("the helper runs after the restart");
    assert_eq!(
        fs::metadata(format!("/proc/{helper}")).unwrap().uid(),
        UserEntry::lookup(&new).unwrap().unwrap().uid
    );
}
