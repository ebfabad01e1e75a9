//! HD11 and HD7 at the level of the checks (TM-T29 (a)–(f), (h), (j); Linux),
//! with real users A and B, real folders, links and ACLs, and the real
//! `doctor-probe` running as the session user: what its helper would answer.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use bothy_testkit::doctor as doctor_common;

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bothy_host::config::{Profile, ProfileCommand, UserWorkdirs, Workdir};
use bothy_host::doctor::acl::{self, Acl, AclEntry, Tag};
use bothy_host::doctor::service_side::{ServiceInputs, service_checks};
use bothy_host::doctor::wire::{Hd11Observation, RequestKind};
use bothy_host::doctor::{HelperPort, ProbePort, RunKind, Scope, ServiceContext};
use bothy_proto::codes::CloseDetail;
use bothy_proto::control::LlmCredentials;
use bothy_proto::doctor::{Check, DoctorCode, DoctorEntry};
use bothy_proto::report::ProfileKind;
use doctor_common::*;

/// An ACL that gives `user` the bits `perm` besides the mode `mode`.
fn acl_for(user: &TestUser, perm: u8, mode: u32) -> Acl {
    let class = |shift: u32| ((mode >> shift) & 0o7) as u8;
    Acl {
        entries: vec![
            AclEntry {
                tag: Tag::UserObj,
                perm: class(6),
                id: u32::MAX,
            },
            AclEntry {
                tag: Tag::User,
                perm,
                id: user.uid,
            },
            AclEntry {
                tag: Tag::GroupObj,
                perm: class(3),
                id: u32::MAX,
            },
            AclEntry {
                tag: Tag::Mask,
                perm: 0o7,
                id: u32::MAX,
            },
            AclEntry {
                tag: Tag::Other,
                perm: class(0),
                id: u32::MAX,
            },
        ],
    }
}

/// B's HD11 (without the entries) for these working directories.
fn hd11_of(b: &TestUser, others: &[&TestUser], workdirs: &[PathBuf]) -> Hd11Observation {
    let mut request = request(RequestKind::Light, b, others);
    request.declaration = Some(LlmCredentials::Personal);
    request.workdirs = workdirs.to_vec();
    light(&probe(b, &request)).hd11
}

const CLEAN: Hd11Observation = Hd11Observation {
    home_unresolvable: false,
    shared_location: false,
};
const SHARED: Hd11Observation = Hd11Observation {
    home_unresolvable: false,
    shared_location: true,
};

/// A working directory of `owner`, mode 0700.
fn workdir_of(path: &Path, owner: &TestUser) -> PathBuf {
    mkdir(path, 0o700);
    chown(path, owner);
    path.to_owned()
}

#[test]
fn a_clean_working_directory_and_home_pass() {
    let root = RootDir::new();
    let a = user("a");
    let b = user("b");
    let wb = workdir_of(&root.join("wb"), &b);
    assert_eq!(hd11_of(&b, &[&a], std::slice::from_ref(&wb)), CLEAN);
    // What cannot be resolved is not present.
    assert_eq!(hd11_of(&b, &[&a], &[root.join("missing")]), CLEAN);
}

#[test]
fn t29_a_a_working_directory_of_b_that_a_can_write() {
    let root = RootDir::new();
    let a = user("a");
    let b = user("b");
    let wb = workdir_of(&root.join("wb"), &b);
    acl::write(&wb, &acl_for(&a, 0o7, 0o700)).unwrap();
    assert_eq!(hd11_of(&b, &[&a], std::slice::from_ref(&wb)), SHARED);
    // A is not blocked by B's folder (it is not A's location).
    assert_eq!(hd11_of(&a, &[&b], &[]), CLEAN);
    // Without A among the other session users the same folder passes.
    assert_eq!(hd11_of(&b, &[], &[wb]), CLEAN);
}

#[test]
fn t29_b_a_folder_above_a_working_directory_of_b_that_a_can_write() {
    let root = RootDir::new();
    let a = user("a");
    let b = user("b");
    let up = mkdir(&root.join("up"), 0o755);
    let wb = workdir_of(&up.join("wb"), &b);
    assert_eq!(hd11_of(&b, &[&a], std::slice::from_ref(&wb)), CLEAN);
    acl::write(&up, &acl_for(&a, 0o3, 0o755)).unwrap();
    assert_eq!(hd11_of(&b, &[&a], std::slice::from_ref(&wb)), SHARED);
    chmod(&up, 0o777);
    std::fs::remove_dir_all(&up).ok();
    // A folder above that belongs to A.
    let up = mkdir(&root.join("up2"), 0o755);
    chown(&up, &a);
    let wb = workdir_of(&up.join("wb"), &b);
    assert_eq!(hd11_of(&b, &[&a], &[wb]), SHARED);
}

#[test]
fn t29_d_a_claude_config_dir_of_b_that_a_can_read() {
    let root = RootDir::new();
    let a = user("a");
    let b = user("b");
    let dir = b.home.join(".config/bothy-host/claude");
    for d in [
        b.home.join(".config"),
        b.home.join(".config/bothy-host"),
        dir.clone(),
    ] {
        mkdir(&d, 0o700);
        chown(&d, &b);
    }
    let mut request = request(RequestKind::Light, &b, &[&a]);
    assert_eq!(light(&probe(&b, &request)).hd11, CLEAN);
    acl::write(&dir, &acl_for(&a, 0o5, 0o700)).unwrap();
    assert_eq!(light(&probe(&b, &request)).hd11, SHARED);
    // With personal the fixed folder is no location (the home covers it).
    request.declaration = Some(LlmCredentials::Personal);
    assert_eq!(light(&probe(&b, &request)).hd11, CLEAN);
    drop(root);
}

#[test]
fn a_home_that_others_can_read_or_that_does_not_resolve() {
    let a = user("a");
    let b = user("b");
    chmod(&b.home, 0o755);
    assert_eq!(hd11_of(&b, &[&a], &[]), SHARED);
    chmod(&b.home, 0o700);
    assert_eq!(hd11_of(&b, &[&a], &[]), CLEAN);
    let mut request = request(RequestKind::Light, &b, &[&a]);
    request.home = PathBuf::from("/nonexistent/home");
    request.declaration = Some(LlmCredentials::Personal);
    assert_eq!(
        light(&probe(&b, &request)).hd11,
        Hd11Observation {
            home_unresolvable: true,
            shared_location: false
        }
    );
}

#[test]
fn t29_h_chain_files_above_a_working_directory_of_b() {
    let root = RootDir::new();
    let a = user("a");
    let b = user("b");
    let up = mkdir(&root.join("up"), 0o755);
    let wb = workdir_of(&up.join("wb"), &b);
    let check = || hd11_of(&b, &[&a], std::slice::from_ref(&wb));
    assert_eq!(check(), CLEAN);
    // A CLAUDE.md that belongs to A.
    let md = write(&up.join("CLAUDE.md"), "x", 0o644);
    chown(&md, &a);
    assert_eq!(check(), SHARED);
    // A CLAUDE.md of root that A can write.
    nix::unistd::chown(&md, Some(nix::unistd::Uid::from_raw(0)), None).unwrap();
    assert_eq!(check(), CLEAN);
    chmod(&md, 0o666);
    assert_eq!(check(), SHARED);
    std::fs::remove_file(&md).unwrap();
    // A folder .claude that belongs to A.
    let dot = mkdir(&up.join(".claude"), 0o755);
    chown(&dot, &a);
    assert_eq!(check(), SHARED);
    // A .claude of root with a file of A deep inside.
    nix::unistd::chown(&dot, Some(nix::unistd::Uid::from_raw(0)), None).unwrap();
    let deep = mkdir(&dot.join("x/y"), 0o755);
    assert_eq!(check(), CLEAN);
    let f = write(&deep.join("settings.json"), "{}", 0o644);
    chown(&f, &a);
    assert_eq!(check(), SHARED);
    std::fs::remove_dir_all(&dot).unwrap();
    // AGENTS.md, .mcp.json, CLAUDE.local.md and .git count the same.
    for name in ["AGENTS.md", ".mcp.json", "CLAUDE.local.md"] {
        let f = write(&up.join(name), "x", 0o644);
        chown(&f, &a);
        assert_eq!(check(), SHARED, "{name}");
        std::fs::remove_file(&f).unwrap();
    }
    let git = mkdir(&up.join(".git/hooks"), 0o755);
    let hook = write(&git.join("post-checkout"), "#!/bin/sh\n", 0o757);
    assert_eq!(check(), SHARED, "a hook A can write");
    chmod(&hook, 0o755);
    assert_eq!(check(), CLEAN);
}

#[test]
fn t29_j_links_owned_by_root_into_folders_of_a() {
    let root = RootDir::new();
    let a = user("a");
    let b = user("b");
    // A folder of A that B can traverse, reached through a link of root.
    let adir = mkdir(&root.join("adir"), 0o755);
    chown(&adir, &a);
    let work = workdir_of(&adir.join("work"), &b);
    let link = root.join("lnk");
    symlink(&adir, &link).unwrap();
    assert_eq!(hd11_of(&b, &[&a], &[link.join("work")]), SHARED);
    assert_eq!(
        hd11_of(&b, &[], &[link.join("work")]),
        CLEAN,
        "only A makes it shared"
    );
    drop(work);
    // A CLAUDE.md above B's folder: a link of root to a file of A.
    let up = mkdir(&root.join("up"), 0o755);
    let wb = workdir_of(&up.join("wb"), &b);
    let target = write(&adir.join("notes.md"), "x", 0o644);
    chown(&target, &a);
    symlink(&target, up.join("CLAUDE.md")).unwrap();
    assert_eq!(hd11_of(&b, &[&a], std::slice::from_ref(&wb)), SHARED);
    std::fs::remove_file(up.join("CLAUDE.md")).unwrap();
    // A chain file that is a link pointing nowhere counts as a violation.
    symlink(root.join("nowhere"), up.join("AGENTS.md")).unwrap();
    assert_eq!(hd11_of(&b, &[&a], std::slice::from_ref(&wb)), SHARED);
    std::fs::remove_file(up.join("AGENTS.md")).unwrap();
    assert_eq!(hd11_of(&b, &[&a], &[wb]), CLEAN);
    // A link owned by A on the way.
    let own = root.join("alink");
    symlink(&up, &own).unwrap();
    lchown(&own, &a);
    assert_eq!(hd11_of(&b, &[&a], &[own.join("wb")]), SHARED);
}

fn workdirs(user: &TestUser, list: &[(&Path, &str)]) -> UserWorkdirs {
    UserWorkdirs {
        user: user.name.clone(),
        workdirs: list
            .iter()
            .map(|(p, d)| Workdir {
                path: p.to_path_buf(),
                display_name: (*d).to_owned(),
            })
            .collect(),
    }
}

#[tokio::test]
async fn t29_c_and_j_hd7_drops_shared_unreachable_and_missing_folders() {
    let root = RootDir::new();
    let svc = user("svc");
    let a = user("a");
    let b = user("b");
    // The same folder for A and B outside the homes, for B through a link.
    let shared = mkdir(&root.join("shared"), 0o755);
    symlink(&shared, root.join("shared-link")).unwrap();
    // B's further folder, B's folder into A's home (0700), a missing one.
    let wb = workdir_of(&root.join("wb"), &b);
    let in_a = workdir_of(&a.home.join("project"), &a);
    let mut config = config(&root, &svc, &[&a, &b]);
    config.profiles.push(Profile {
        name: "claude".into(),
        display_name: "Claude".into(),
        kind: ProfileKind::Claude,
        command: None,
    });
    config.claude_workdirs = vec![
        workdirs(&a, &[(&shared, "shared"), (&in_a, "project")]),
        workdirs(
            &b,
            &[
                (&root.join("shared-link"), "shared"),
                (&in_a, "a-project"),
                (&root.join("missing"), "gone"),
                (&wb, "b"),
            ],
        ),
    ];
    let places = bothy_host::doctor::Places {
        passwd: passwd(&root, &[&svc, &a, &b]),
        ..places()
    };
    let doctor = full_run(&config, Some(LlmCredentials::Personal), vec![], places).await;
    let lists: Vec<(String, Vec<String>)> = doctor
        .reported_session_users()
        .into_iter()
        .map(|u| {
            (
                u.name,
                u.workdirs.into_iter().map(|w| w.display_name).collect(),
            )
        })
        .collect();
    assert_eq!(
        lists,
        [
            (a.name.clone(), vec!["project".to_owned()]),
            (b.name.clone(), vec!["b".to_owned()])
        ]
    );
    assert_eq!(
        of(&doctor, Check::Hd7Profiles),
        [DoctorEntry::for_code(DoctorCode::WorkdirDropped)]
    );
    // The index counts in the list after HD7.
    assert_eq!(doctor.workdir(&b.name, 0), Some(wb.clone()));
    assert_eq!(doctor.workdir(&a.name, 0), Some(in_a.clone()));
    // HD11 passes for both: dropped folders are no locations.
    assert_eq!(
        of(&doctor, Check::Hd11SharedLocations),
        [DoctorEntry::passed(Check::Hd11SharedLocations)]
    );
    assert!(
        doctor
            .reported_profiles()
            .iter()
            .any(|p| p.kind == ProfileKind::Claude)
    );
}

#[tokio::test]
async fn t29_e_an_entry_of_a_in_bs_working_directory_stays_until_a_full_run() {
    let root = RootDir::new();
    let svc = user("svc");
    let a = user("a");
    let b = user("b");
    let wb = workdir_of(&root.join("wb"), &b);
    let mut config = config(&root, &svc, &[&a, &b]);
    config.claude_workdirs = vec![workdirs(&b, &[(&wb, "b")])];
    let places = bothy_host::doctor::Places {
        passwd: passwd(&root, &[&svc, &a, &b]),
        ..places()
    };
    let entry = write(&wb.join("from-a"), "x", 0o644);
    chown(&entry, &a);
    let mut doctor = full_run(&config, Some(LlmCredentials::Personal), vec![], places).await;
    assert_eq!(
        of(&doctor, Check::Hd11SharedLocations),
        [DoctorEntry::naming(DoctorCode::ForeignEntry, &b.name)]
    );
    assert!(
        doctor
            .local_output()
            .contains(&format!("  session user {}: foreign_entry", b.name))
    );
    std::fs::remove_file(&entry).unwrap();
    let port = ProbePort::new(bin(), &config);
    let ctx = ServiceContext {
        config: &config,
        config_path: None,
        declaration: Some(LlmCredentials::Personal),
        server_url: None,
        control_peer: None,
        former_session_users: vec![],
    };
    // The periodic run does not clear it.
    doctor.run(&ctx, &port, RunKind::Light, Scope::All).await;
    assert!(names(&doctor, DoctorCode::ForeignEntry, &b.name));
    assert_eq!(
        doctor.enforcement().end_users,
        [(b.name.clone(), CloseDetail::SharedLocation)]
    );
    // bothy-host doctor (a full run) does.
    doctor.run(&ctx, &port, RunKind::Full, Scope::All).await;
    assert_eq!(
        of(&doctor, Check::Hd11SharedLocations),
        [DoctorEntry::passed(Check::Hd11SharedLocations)]
    );
}

#[tokio::test]
async fn t29_e_a_check_of_the_entries_past_its_timeout_names_only_that_user() {
    let root = RootDir::new();
    let svc = user("svc");
    let a = user("a");
    let b = user("b");
    // A's home holds nothing; B's holds many entries.
    for entry in std::fs::read_dir(&a.home).unwrap() {
        std::fs::remove_file(entry.unwrap().path()).unwrap();
    }
    let big = b.home.join("big");
    for i in 0..300 {
        let d = mkdir(&big.join(format!("d{i}")), 0o700);
        for j in 0..200 {
            std::fs::write(d.join(format!("f{j}")), b"").unwrap();
        }
    }
    std::process::Command::new("chown")
        .args(["-R", &format!("{}:{}", b.uid, b.gid)])
        .arg(&big)
        .status()
        .unwrap();
    let mut config = config(&root, &svc, &[&a, &b]);
    config.entry_scan_timeout = Duration::from_millis(10);
    let places = bothy_host::doctor::Places {
        passwd: passwd(&root, &[&svc, &a, &b]),
        ..places()
    };
    let doctor = full_run(&config, Some(LlmCredentials::Personal), vec![], places).await;
    assert_eq!(
        of(&doctor, Check::Hd11SharedLocations),
        [DoctorEntry::naming(DoctorCode::EntryScanTimeout, &b.name)]
    );
    assert_eq!(
        doctor.gate(&b.name).err(),
        Some(if has(&doctor, DoctorCode::PtraceScopeLow) {
            CloseDetail::HelperUntrusted
        } else {
            CloseDetail::SharedLocation
        })
    );
    assert!(
        !doctor
            .enforcement()
            .end_users
            .iter()
            .any(|(n, _)| *n == a.name)
    );
}

#[test]
fn t29_f_programs_of_profiles_and_claude_bin_must_be_roots_and_closed() {
    let root = RootDir::new();
    let svc = user("svc");
    let a = user("a");
    let other = user("adm");
    let bin_dir = mkdir(&root.join("bin"), 0o755);
    let tool = write(&bin_dir.join("tool"), "#!/bin/sh\n", 0o755);
    let mut config = config(&root, &svc, &[&a]);
    config.profiles.push(Profile {
        name: "tool".into(),
        display_name: "Tool".into(),
        kind: ProfileKind::Command,
        command: Some(ProfileCommand {
            program: tool.clone(),
            args: vec![],
        }),
    });
    let codes = |config: &bothy_host::config::HostServiceConfig| {
        service_checks(&ServiceInputs {
            config: config.clone(),
            config_path: None,
            former: vec![],
            places: places(),
        })
        .codes
    };
    assert!(!codes(&config).contains(&DoctorCode::ProgramLocationUntrusted));
    // Writable for a session user.
    chmod(&tool, 0o757);
    assert!(codes(&config).contains(&DoctorCode::ProgramLocationUntrusted));
    chmod(&tool, 0o755);
    // Belongs to another user of the host (neither session user nor root).
    chown(&tool, &other);
    assert!(codes(&config).contains(&DoctorCode::ProgramLocationUntrusted));
    nix::unistd::chown(
        &tool,
        Some(nix::unistd::Uid::from_raw(0)),
        Some(nix::unistd::Gid::from_raw(0)),
    )
    .unwrap();
    // In a folder of such a user.
    chown(&bin_dir, &other);
    assert!(codes(&config).contains(&DoctorCode::ProgramLocationUntrusted));
    nix::unistd::chown(&bin_dir, Some(nix::unistd::Uid::from_raw(0)), None).unwrap();
    assert!(!codes(&config).contains(&DoctorCode::ProgramLocationUntrusted));
    // The same three cases for claude_bin: HD10 and HD11.
    let claude = write(&bin_dir.join("claude"), "\x7fELF", 0o755);
    config.claude_bin = Some(claude.clone());
    let both = |c: &[DoctorCode]| {
        c.contains(&DoctorCode::ClaudeBinUntrusted)
            && c.contains(&DoctorCode::ProgramLocationUntrusted)
    };
    assert!(!codes(&config).contains(&DoctorCode::ClaudeBinUntrusted));
    chmod(&claude, 0o775);
    nix::unistd::chown(&claude, None, Some(nix::unistd::Gid::from_raw(a.gid))).unwrap();
    assert!(
        both(&codes(&config)),
        "writable through the group of a session user"
    );
    chmod(&claude, 0o755);
    chown(&claude, &other);
    assert!(both(&codes(&config)));
    nix::unistd::chown(
        &claude,
        Some(nix::unistd::Uid::from_raw(0)),
        Some(nix::unistd::Gid::from_raw(0)),
    )
    .unwrap();
    chown(&bin_dir, &other);
    assert!(
        both(&codes(&config)),
        "a folder of a package manager's account"
    );
    nix::unistd::chown(&bin_dir, Some(nix::unistd::Uid::from_raw(0)), None).unwrap();
    // A profile whose program does not resolve is dropped, not judged.
    config.profiles[1].command = Some(ProfileCommand {
        program: root.join("missing"),
        args: vec![],
    });
    let findings = service_checks(&ServiceInputs {
        config: config.clone(),
        config_path: None,
        former: vec![],
        places: places(),
    });
    assert_eq!(findings.program_present, [true, false]);
    assert!(
        !findings
            .codes
            .contains(&DoctorCode::ProgramLocationUntrusted)
    );
}

#[tokio::test]
async fn t29_f_a_program_that_becomes_writable_during_operation_ends_every_session() {
    let root = RootDir::new();
    let svc = user("svc");
    let a = user("a");
    let b = user("b");
    let tool = write(
        &mkdir(&root.join("bin"), 0o755).join("tool"),
        "#!/bin/sh\n",
        0o755,
    );
    let mut config = config(&root, &svc, &[&a, &b]);
    config.profiles.push(Profile {
        name: "tool".into(),
        display_name: "Tool".into(),
        kind: ProfileKind::Command,
        command: Some(ProfileCommand {
            program: tool.clone(),
            args: vec![],
        }),
    });
    let places = bothy_host::doctor::Places {
        passwd: passwd(&root, &[&svc, &a, &b]),
        ..places()
    };
    let mut doctor = full_run(&config, Some(LlmCredentials::Personal), vec![], places).await;
    assert!(!has(&doctor, DoctorCode::ProgramLocationUntrusted));
    chmod(&tool, 0o777);
    let port = ProbePort::new(bin(), &config);
    let ctx = ServiceContext {
        config: &config,
        config_path: None,
        declaration: Some(LlmCredentials::Personal),
        server_url: None,
        control_peer: None,
        former_session_users: vec![],
    };
    assert!(
        doctor
            .run(&ctx, &port, RunKind::Light, Scope::User(&a.name))
            .await
    );
    assert_eq!(
        of(&doctor, Check::Hd11SharedLocations),
        [DoctorEntry::for_code(DoctorCode::ProgramLocationUntrusted)],
        "the report names no session user"
    );
    if !has(&doctor, DoctorCode::PtraceScopeLow) {
        assert_eq!(
            doctor.enforcement().end_all,
            Some(CloseDetail::SharedLocation)
        );
        assert_eq!(doctor.gate(&b.name), Err(CloseDetail::SharedLocation));
    }
    chmod(&tool, 0o755);
    doctor.run(&ctx, &port, RunKind::Light, Scope::All).await;
    assert!(!has(&doctor, DoctorCode::ProgramLocationUntrusted));
    // The port is the real one: a probe for a user that does not exist fails.
    assert!(port.checks("btnosuchuser", b"{}".to_vec()).await.is_err());
}
