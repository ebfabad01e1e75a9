//! TM-T13 at the level of the checks, with real users, files and processes:
//! `bothy-host doctor` as root, in group sudo, in group docker, with a writable
//! Docker socket, with passwordless sudo, with a subscription login with
//! organization, with the same service and session user, with an empty
//! `host_service.session_users`, with two identical session users — each time
//! "start refused with a code", and the same check passes without the cause.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use bothy_testkit::causes;
use bothy_testkit::doctor as doctor_common;

use std::path::PathBuf;
use std::time::Duration;

use bothy_host::config::HostServiceConfig;
use bothy_host::doctor::service_side::{
    ServiceInputs, docker_socket_writable, ptrace_scope_low, ptrace_scope_path, service_checks,
};
use bothy_host::doctor::{Doctor, Places};
use bothy_proto::control::LlmCredentials;
use bothy_proto::doctor::{Check, DoctorCode, DoctorEntry};
use causes::{Membership, SudoRule};
use doctor_common::*;

fn test_places(root: &RootDir, users: &[&TestUser]) -> Places {
    Places {
        passwd: passwd(root, users),
        ..places()
    }
}

/// [`full_run`] with the declaration organization and no former session
/// users.
async fn organization_run(config: &HostServiceConfig, places: Places) -> Doctor {
    full_run(config, Some(LlmCredentials::Organization), vec![], places).await
}

fn service_codes(config: &HostServiceConfig, places: Places) -> Vec<DoctorCode> {
    service_checks(&ServiceInputs {
        config: config.clone(),
        config_path: None,
        former: Vec::new(),
        places,
    })
    .codes
}

#[tokio::test]
async fn a_clean_host_passes_hd1_to_hd4_hd6_hd8_hd9() {
    let root = RootDir::new();
    let svc = user("svc");
    let a = user("a");
    let config = config(&root, &svc, &[&a]);
    let doctor = organization_run(&config, test_places(&root, &[&svc, &a])).await;
    for check in [
        Check::Hd1User,
        Check::Hd2Groups,
        Check::Hd3Sudo,
        Check::Hd4StateDir,
        Check::Hd8Separation,
        Check::Hd9ForeignHomes,
    ] {
        assert_eq!(of(&doctor, check), [DoctorEntry::passed(check)], "{check}");
    }
    // No claude_bin: HD6 looked at the login locations only and warns.
    assert_eq!(
        of(&doctor, Check::Hd6LlmLogin),
        [DoctorEntry::for_code(DoctorCode::AuthStatusUnchecked)]
    );
    for check in [
        Check::Hd5ServerHost,
        Check::Hd7Profiles,
        Check::Hd11SharedLocations,
    ] {
        assert_eq!(of(&doctor, check), [DoctorEntry::passed(check)], "{check}");
    }
    // HD10 finds nothing but what the kernel says about Yama.
    let low = ptrace_scope_low(&ptrace_scope_path());
    let hd10 = if low {
        vec![DoctorEntry::for_code(DoctorCode::PtraceScopeLow)]
    } else {
        vec![DoctorEntry::passed(Check::Hd10HelperIntegrity)]
    };
    assert_eq!(of(&doctor, Check::Hd10HelperIntegrity), hd10);
    assert_eq!(doctor.refuses_start(), low);
    assert_eq!(doctor.gate(&a.name).is_ok(), !low);
}

#[tokio::test]
async fn root_as_session_user_is_privileged() {
    let root = RootDir::new();
    let svc = user("svc");
    let mut config = config(&root, &svc, &[]);
    config.session_users = vec!["root".into()];
    let doctor = organization_run(&config, test_places(&root, &[&svc])).await;
    assert_eq!(
        of(&doctor, Check::Hd1User),
        [DoctorEntry::for_code(DoctorCode::PrivilegedUser)]
    );
    assert!(doctor.refuses_start());
    assert!(doctor.refuses_running_service());
    // No helper is asked for root, and root is not reported.
    assert!(
        doctor
            .reported_session_users()
            .iter()
            .all(|u| u.name == "root")
    );
    config.service_user = "root".into();
    config.session_users = vec![svc.name.clone()];
    let doctor = organization_run(&config, test_places(&root, &[&svc])).await;
    assert!(
        of(&doctor, Check::Hd1User).contains(&DoctorEntry::for_code(DoctorCode::PrivilegedUser))
    );
}

#[test]
fn a_session_user_in_group_sudo_or_docker_is_in_a_forbidden_group() {
    for group in ["sudo", "docker"] {
        let root = RootDir::new();
        let svc = user("svc");
        let a = user("a");
        let config = config(&root, &svc, &[&a]);
        let places = test_places(&root, &[&svc, &a]);
        assert!(!service_codes(&config, places.clone()).contains(&DoctorCode::ForbiddenGroup));
        let _member = Membership::add(&a.name, group);
        let codes = service_codes(&config, places);
        assert!(
            codes.contains(&DoctorCode::ForbiddenGroup),
            "{group}: {codes:?}"
        );
        drop(a);
    }
}

#[test]
fn an_extra_forbidden_group_counts_and_the_service_user_counts_too() {
    let root = RootDir::new();
    let svc = user("svc");
    let a = user("a");
    let mut config = config(&root, &svc, &[&a]);
    config.extra_forbidden_groups = vec![svc.name.clone()];
    assert!(
        service_codes(&config, test_places(&root, &[&svc, &a]))
            .contains(&DoctorCode::ForbiddenGroup)
    );
}

#[tokio::test]
async fn a_writable_docker_socket_refuses_the_start() {
    let root = RootDir::new();
    let svc = user("svc");
    let a = user("a");
    let socket = root.join("docker.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    chmod(&socket, 0o660);
    let config = config(&root, &svc, &[&a]);
    let places = Places {
        docker_sockets: vec![socket.clone()],
        ..test_places(&root, &[&svc, &a])
    };
    assert!(!docker_socket_writable(
        &socket,
        &[account(&a), account(&svc)]
    ));
    assert!(!service_codes(&config, places.clone()).contains(&DoctorCode::DockerSocketWritable));
    // The socket's group is the session user's: writable for it.
    nix::unistd::chown(&socket, None, Some(nix::unistd::Gid::from_raw(a.gid))).unwrap();
    assert!(docker_socket_writable(&socket, &[account(&a)]));
    let doctor = organization_run(&config, places).await;
    assert_eq!(
        of(&doctor, Check::Hd2Groups),
        [DoctorEntry::for_code(DoctorCode::DockerSocketWritable)]
    );
    assert!(doctor.refuses_start());
}

/// The real `sudo` (TM-T13 needs it; `.ci/run` installs it on a fresh machine).
fn real_sudo() -> PathBuf {
    let sudo = PathBuf::from("/usr/bin/sudo");
    assert!(
        sudo.exists(),
        "sudo is needed: install it (apt-get install sudo; .ci/run does this)"
    );
    sudo
}

#[tokio::test]
async fn passwordless_sudo_of_a_session_user_or_the_service_user_refuses_the_start() {
    real_sudo();
    let root = RootDir::new();
    let svc = user("svc");
    let a = user("a");
    let config = config(&root, &svc, &[&a]);
    let places = test_places(&root, &[&svc, &a]);
    {
        let _rule = SudoRule::passwordless(&a.name);
        let doctor = organization_run(&config, places.clone()).await;
        assert_eq!(
            of(&doctor, Check::Hd3Sudo),
            [DoctorEntry::for_code(DoctorCode::PasswordlessSudo)]
        );
        assert!(doctor.refuses_start());
        // The rule was found by the helper side, not the service side.
        assert!(!service_codes(&config, places.clone()).contains(&DoctorCode::PasswordlessSudo));
    }
    {
        let _rule = SudoRule::passwordless(&svc.name);
        assert!(service_codes(&config, places.clone()).contains(&DoctorCode::PasswordlessSudo));
    }
    assert!(!service_codes(&config, places).contains(&DoctorCode::PasswordlessSudo));
}

#[test]
fn a_fake_sudo_on_the_list_is_what_hd3_runs() {
    let root = RootDir::new();
    let svc = user("svc");
    let config = config(&root, &svc, &[]);
    let yes = write(&root.join("sudo-yes"), "#!/bin/sh\nexit 0\n", 0o755);
    let hang = write(&root.join("sudo-hang"), "#!/bin/sh\nexec sleep 60\n", 0o755);
    let mut config_fast = config.clone();
    config_fast.auth_status_timeout = Duration::from_millis(300);
    for (sudo, expected) in [(yes, true), (hang, true), (root.join("missing"), false)] {
        let places = Places {
            sudo: vec![sudo.clone()],
            ..test_places(&root, &[&svc])
        };
        assert_eq!(
            service_codes(&config_fast, places).contains(&DoctorCode::PasswordlessSudo),
            expected,
            "{}",
            sudo.display()
        );
    }
}

#[tokio::test]
async fn a_subscription_login_with_organization_names_the_session_user() {
    let root = RootDir::new();
    let svc = user("svc");
    let a = user("a");
    let b = user("b");
    let claude = mkdir(&a.home.join(".claude"), 0o700);
    chown(&claude, &a);
    let file = write(&claude.join(".credentials.json"), "{}", 0o600);
    chown(&file, &a);
    let config = config(&root, &svc, &[&a, &b]);
    let places = test_places(&root, &[&svc, &a, &b]);
    let doctor = organization_run(&config, places.clone()).await;
    assert_eq!(
        of(&doctor, Check::Hd6LlmLogin),
        [DoctorEntry::naming(
            DoctorCode::SubscriptionLoginDetected,
            &a.name
        )]
    );
    assert!(doctor.refuses_start());
    assert!(doctor.local_output().contains(&format!(
        "  session user {}: subscription_login_detected",
        a.name
    )));
    // With personal it is the holder's own business.
    let doctor = full_run(&config, Some(LlmCredentials::Personal), vec![], places).await;
    assert_eq!(
        of(&doctor, Check::Hd6LlmLogin),
        [DoctorEntry::passed(Check::Hd6LlmLogin)]
    );
}

#[tokio::test]
async fn service_user_as_session_user_empty_list_and_duplicates() {
    let root = RootDir::new();
    let svc = user("svc");
    let a = user("a");
    let places = test_places(&root, &[&svc, &a]);
    let mut config = config(&root, &svc, &[&svc]);
    let doctor = organization_run(&config, places.clone()).await;
    assert_eq!(
        of(&doctor, Check::Hd1User),
        [DoctorEntry::for_code(DoctorCode::SessionUserIsServiceUser)]
    );
    assert!(doctor.refuses_start());
    config.session_users = vec![];
    let doctor = organization_run(&config, places.clone()).await;
    assert_eq!(
        of(&doctor, Check::Hd1User),
        [DoctorEntry::for_code(DoctorCode::SessionUsersEmpty)]
    );
    assert!(doctor.refuses_start());
    config.session_users = vec![a.name.clone(), a.name.to_uppercase()];
    let doctor = organization_run(&config, places).await;
    assert_eq!(
        of(&doctor, Check::Hd1User),
        [DoctorEntry::for_code(DoctorCode::SessionUserDuplicate)],
        "the first code of the list, before user_missing"
    );
    assert!(doctor.refuses_start());
    let reported: Vec<String> = doctor
        .reported_session_users()
        .into_iter()
        .map(|u| u.name)
        .collect();
    assert_eq!(reported, std::slice::from_ref(&a.name));
}

#[test]
fn a_missing_user_and_an_invalid_name() {
    let root = RootDir::new();
    let svc = user("svc");
    let mut config = config(&root, &svc, &[]);
    config.session_users = vec!["btnosuchuser".into()];
    let codes = service_codes(&config, test_places(&root, &[&svc]));
    assert!(codes.contains(&DoctorCode::UserMissing));
    config.session_users = vec!["9 bad".into()];
    let codes = service_codes(&config, test_places(&root, &[&svc]));
    assert!(codes.contains(&DoctorCode::SessionUserNameInvalid));
}
