//! TM-T22 (HD4, HD8: the state directory and the key file are closed to every
//! session user; read permission through an ACL or a group refuses the start)
//! and TM-T24 at the level of the checks (HD9: a foreign home that a session
//! user can list refuses the start; the report names only former session
//! users, the output on the host every such user), with real users, files and
//! the real `doctor-probe`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use bothy_testkit::doctor as doctor_common;

use bothy_host::doctor::acl::{self, Acl, AclEntry, Tag};
use bothy_host::doctor::wire::{CheckAnswer, RequestKind};
use bothy_proto::control::LlmCredentials;
use bothy_proto::doctor::{Check, DoctorCode, DoctorEntry};
use doctor_common::*;

fn user_acl(user: &TestUser, perm: u8, owner: u8) -> Acl {
    Acl {
        entries: vec![
            AclEntry {
                tag: Tag::UserObj,
                perm: owner,
                id: u32::MAX,
            },
            AclEntry {
                tag: Tag::User,
                perm,
                id: user.uid,
            },
            AclEntry {
                tag: Tag::GroupObj,
                perm: 0,
                id: u32::MAX,
            },
            AclEntry {
                tag: Tag::Mask,
                perm,
                id: u32::MAX,
            },
            AclEntry {
                tag: Tag::Other,
                perm: 0,
                id: u32::MAX,
            },
        ],
    }
}

/// Whether `a`'s probe can read the state directory or the key file.
fn helper_reads(a: &TestUser, state: &std::path::Path) -> bool {
    let mut request = request(RequestKind::Full, a, &[]);
    request.declaration = Some(LlmCredentials::Personal);
    request.state_dir = state.to_owned();
    request.key_files = vec![state.join("keys"), state.join("claude_api_key")];
    match probe(a, &request) {
        CheckAnswer::Full(full) => full.reads_state,
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn t22_the_state_directory_and_key_file_are_closed_to_session_users() {
    let root = RootDir::new();
    let svc = user("svc");
    let a = user("a");
    let config = config(&root, &svc, &[&a]);
    let state = config.state_dir.clone();
    let keys = write(&state.join("keys"), "secret-key-material", 0o600);
    chown(&keys, &svc);
    let places = bothy_host::doctor::Places {
        passwd: passwd(&root, &[&svc, &a]),
        ..places()
    };
    // A session cannot read them.
    assert!(!helper_reads(&a, &state));
    let doctor = full_run(
        &config,
        Some(LlmCredentials::Personal),
        vec![],
        places.clone(),
    )
    .await;
    for check in [Check::Hd4StateDir, Check::Hd8Separation] {
        assert_eq!(of(&doctor, check), [DoctorEntry::passed(check)], "{check}");
    }
    // An ACL entry that gives the session user read on the folder.
    acl::write(&state, &user_acl(&a, 0o5, 0o7)).unwrap();
    assert!(
        helper_reads(&a, &state),
        "the kernel grants what the ACL says"
    );
    let doctor = full_run(
        &config,
        Some(LlmCredentials::Personal),
        vec![],
        places.clone(),
    )
    .await;
    assert_eq!(
        of(&doctor, Check::Hd8Separation),
        [DoctorEntry::for_code(DoctorCode::StateAccessForSessionUser)]
    );
    assert!(doctor.refuses_start());
    assert!(doctor.refuses_running_service());
    // Only the key file through an ACL (the folder only searchable for it).
    acl::write(&state, &user_acl(&a, 0o1, 0o7)).unwrap();
    acl::write(&keys, &user_acl(&a, 0o4, 0o6)).unwrap();
    assert!(helper_reads(&a, &state));
    let doctor = full_run(
        &config,
        Some(LlmCredentials::Personal),
        vec![],
        places.clone(),
    )
    .await;
    assert_eq!(
        of(&doctor, Check::Hd8Separation),
        [DoctorEntry::for_code(DoctorCode::StateAccessForSessionUser)]
    );
    assert_eq!(
        of(&doctor, Check::Hd4StateDir),
        [DoctorEntry::for_code(DoctorCode::StateDirMode)],
        "the ACL's mask shows in the group bits of the mode"
    );
    // A group that gives read: the folder in the session user's group, 0750.
    let fresh = mkdir(&root.join("state2"), 0o750);
    nix::unistd::chown(
        &fresh,
        Some(nix::unistd::Uid::from_raw(svc.uid)),
        Some(nix::unistd::Gid::from_raw(a.gid)),
    )
    .unwrap();
    let mut grouped = config.clone();
    grouped.state_dir = fresh.clone();
    assert!(helper_reads(&a, &fresh));
    let doctor = full_run(&grouped, Some(LlmCredentials::Personal), vec![], places).await;
    assert_eq!(
        of(&doctor, Check::Hd4StateDir),
        [DoctorEntry::for_code(DoctorCode::StateDirMode)]
    );
    assert_eq!(
        of(&doctor, Check::Hd8Separation),
        [DoctorEntry::for_code(DoctorCode::StateAccessForSessionUser)]
    );
}

#[test]
fn t22_hd4_owner_and_mode() {
    let root = RootDir::new();
    let svc = user("svc");
    let mut config = config(&root, &svc, &[]);
    let codes = |config: &bothy_host::config::HostServiceConfig| {
        bothy_host::doctor::service_side::service_checks(
            &bothy_host::doctor::service_side::ServiceInputs {
                config: config.clone(),
                config_path: None,
                former: vec![],
                places: places(),
            },
        )
        .codes
    };
    assert!(
        !codes(&config)
            .iter()
            .any(|c| c.check() == Check::Hd4StateDir)
    );
    chmod(&config.state_dir, 0o755);
    assert!(codes(&config).contains(&DoctorCode::StateDirMode));
    chmod(&config.state_dir, 0o700);
    nix::unistd::chown(&config.state_dir, Some(nix::unistd::Uid::from_raw(0)), None).unwrap();
    assert!(codes(&config).contains(&DoctorCode::StateDirOwner));
    nix::unistd::chown(
        &config.state_dir,
        Some(nix::unistd::Uid::from_raw(svc.uid)),
        None,
    )
    .unwrap();
    let keys = write(&config.state_dir.join("keys"), "k", 0o600);
    chown(&keys, &svc);
    assert!(
        !codes(&config)
            .iter()
            .any(|c| c.check() == Check::Hd4StateDir)
    );
    chmod(&keys, 0o640);
    assert!(codes(&config).contains(&DoctorCode::KeyFileUnprotected));
    chmod(&keys, 0o600);
    nix::unistd::chown(&keys, Some(nix::unistd::Uid::from_raw(0)), None).unwrap();
    assert!(codes(&config).contains(&DoctorCode::KeyFileUnprotected));
    config.state_dir = root.join("missing");
    assert!(codes(&config).contains(&DoctorCode::StateDirOwner));
}

#[tokio::test]
async fn t24_foreign_homes_that_a_session_user_can_list() {
    let root = RootDir::new();
    let svc = user("svc");
    let a = user("a");
    let x = user("x");
    let b = user("b");
    let former = user("f");
    let config = config(&root, &svc, &[&a, &b]);
    let places = bothy_host::doctor::Places {
        passwd: passwd(&root, &[&svc, &a, &b, &x, &former]),
        ..places()
    };
    let run = || {
        full_run(
            &config,
            Some(LlmCredentials::Personal),
            vec![former.name.clone()],
            places.clone(),
        )
    };
    let doctor = run().await;
    assert_eq!(
        of(&doctor, Check::Hd9ForeignHomes),
        [DoctorEntry::passed(Check::Hd9ForeignHomes)]
    );
    // A user who is no session user opens its home.
    chmod(&x.home, 0o755);
    let doctor = run().await;
    assert_eq!(
        of(&doctor, Check::Hd9ForeignHomes),
        [DoctorEntry::for_code(DoctorCode::ForeignHomeListable)],
        "the report names no name"
    );
    assert!(doctor.refuses_start());
    let out = doctor.local_output();
    assert!(
        out.contains(&format!("  user {}: home can be listed", x.name)),
        "{out:?}"
    );
    chmod(&x.home, 0o700);
    // The former session user's home, reopened.
    chmod(&former.home, 0o705);
    let doctor = run().await;
    assert_eq!(
        of(&doctor, Check::Hd9ForeignHomes),
        [DoctorEntry::naming(
            DoctorCode::ForeignHomeListable,
            &former.name
        )]
    );
    assert!(
        doctor
            .local_output()
            .contains(&format!("  user {}: home can be listed", former.name))
    );
    chmod(&former.home, 0o700);
    // The service user's home counts as well.
    chmod(&svc.home, 0o755);
    let doctor = run().await;
    assert!(has(&doctor, DoctorCode::ForeignHomeListable));
    chmod(&svc.home, 0o700);
    // A session user's own open home is HD11 for it (another session user
    // could read it), not HD9.
    chmod(&a.home, 0o755);
    let doctor = run().await;
    assert_eq!(
        of(&doctor, Check::Hd9ForeignHomes),
        [DoctorEntry::passed(Check::Hd9ForeignHomes)]
    );
    assert_eq!(
        of(&doctor, Check::Hd11SharedLocations),
        [DoctorEntry::naming(DoctorCode::SharedLocation, &a.name)]
    );
    // The output on the host never carries a path.
    for line in doctor.local_output() {
        assert!(!line.contains('/'), "{line}");
    }
}
