//! The peer check of the local channel against real helpers and fakes
//! (2.2 "PTY helper" items 2 and 3, D-M2-42-11, HD10 codes).
//!
//! The fake helper is a process of a session user that serves the handover
//! exactly like the helper (one byte, one end of a socketpair it created):
//! what a shell of that user could run. It is a short Python program
//! (`socket.send_fds`), so the test can see from the fake's side that it
//! receives no byte.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use bothy_testkit as support;
use bothy_testkit::helper as helper_common;

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

use bothy_host::channel::{Channel, ChannelError, FromHelper, PeerExpectation, ToHelper};
use bothy_host::doctor::HelperFault;
use helper_common::{Supervised, poll, run_as, within};
use support::users::TestUser;

const FAKE_HELPER: &str = r#"
import os, socket, sys
path = sys.argv[1]
server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
server.bind(path)
server.listen(1)
print("ready", os.getpid(), flush=True)
connection, _ = server.accept()
ours, theirs = socket.socketpair()
socket.send_fds(connection, [b"\xb7"], [theirs.fileno()])
theirs.close()
connection.close()
ours.settimeout(20)
received = 0
while True:
    data = ours.recv(65536)
    if not data:
        break
    received += len(data)
print("received", received, flush=True)
"#;

/// A fake helper running as `user` on `path`; returns the process and its PID.
fn fake_helper(
    user: &TestUser,
    dir: &std::path::Path,
) -> (std::process::Child, u32, std::path::PathBuf) {
    let folder = dir.join(format!("fake-{}", user.name));
    std::fs::create_dir_all(&folder).unwrap();
    std::os::unix::fs::chown(&folder, Some(user.uid), Some(user.gid)).unwrap();
    let path = folder.join("h.sock");
    let mut child = Command::new("/usr/bin/python3")
        .arg("-c")
        .arg(FAKE_HELPER)
        .arg(&path)
        .uid(user.uid)
        .gid(user.gid)
        .env_clear()
        .current_dir("/")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    let pid: u32 = line
        .trim()
        .strip_prefix("ready ")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("fake helper: {line:?}"));
    (child, pid, path)
}

/// What the fake saw after the handover.
fn fake_received(child: std::process::Child) -> String {
    let output = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

#[tokio::test]
async fn a_fake_helper_of_the_session_user_is_a_peer_mismatch_and_gets_no_byte() {
    let sup = Supervised::start(2);
    let (a, b) = (sup.user(0), sup.user(1));

    // A process of A serving the handover, while the service manager reports
    // the real helper of A: same user, another process.
    let (fake, fake_pid, path) = fake_helper(a, sup.dir.path());
    let result = Channel::connect(&path, sup.expectation(a)).await;
    assert!(
        matches!(result, Err(ChannelError::PeerMismatch)),
        "{result:?}"
    );
    assert_eq!(
        HelperFault::from(result.unwrap_err()),
        HelperFault::PeerMismatch
    );
    assert_eq!(fake_received(fake), "received 0");

    // A process of B, even with its own PID as the main PID: another user.
    let (fake, fake_pid_b, path) = fake_helper(b, sup.dir.path());
    let expected = PeerExpectation {
        uid: a.uid,
        main_pid: fake_pid_b,
    };
    let result = Channel::connect(&path, expected).await;
    assert!(
        matches!(result, Err(ChannelError::PeerMismatch)),
        "{result:?}"
    );
    assert_eq!(fake_received(fake), "received 0");

    // The control: the same fake passes when it is what the expectation names
    // (so the mismatches above came from the check, not from the fake).
    let (fake, fake_pid_again, path) = fake_helper(b, &sup.dir.path().join("again"));
    let mut channel = Channel::connect(
        &path,
        PeerExpectation {
            uid: b.uid,
            main_pid: fake_pid_again,
        },
    )
    .await
    .unwrap();
    channel.send(&ToHelper::Main).await.unwrap();
    drop(channel);
    assert_eq!(fake_received(fake), "received 5");
    assert_ne!(fake_pid, fake_pid_again);
}

#[tokio::test]
async fn the_real_helper_passes_only_with_its_reported_pid() {
    let sup = Supervised::start(1);
    let a = sup.user(0);
    let reported = sup.expectation(a);
    let wrong = PeerExpectation {
        main_pid: reported.main_pid + 1,
        ..reported
    };
    let result = Channel::connect(&sup.endpoint(a), wrong).await;
    assert!(
        matches!(result, Err(ChannelError::PeerMismatch)),
        "{result:?}"
    );
    // Nothing happened to the helper: the right expectation passes.
    let mut main = sup.connect(a).await.unwrap();
    main.send(&ToHelper::Main).await.unwrap();
    main.send(&ToHelper::Checks(b"ping".to_vec()))
        .await
        .unwrap();
    assert!(matches!(
        within(main.recv()).await.unwrap(),
        Some(FromHelper::CheckResults(_))
    ));
}

#[tokio::test]
async fn no_helper_on_the_endpoint_is_unreachable() {
    let dir = tempfile::tempdir().unwrap();
    let expected = PeerExpectation {
        uid: 0,
        main_pid: 1,
    };
    let missing = Channel::connect(&dir.path().join("none.sock"), expected).await;
    assert!(
        matches!(missing, Err(ChannelError::Unreachable(_))),
        "{missing:?}"
    );
    assert_eq!(
        HelperFault::from(missing.unwrap_err()),
        HelperFault::Unreachable
    );
    // A socket file that nobody listens on.
    let path = dir.path().join("bound.sock");
    let socket = nix::sys::socket::socket(
        nix::sys::socket::AddressFamily::Unix,
        nix::sys::socket::SockType::Stream,
        nix::sys::socket::SockFlag::empty(),
        None,
    )
    .unwrap();
    nix::sys::socket::bind(
        std::os::fd::AsRawFd::as_raw_fd(&socket),
        &nix::sys::socket::UnixAddr::new(&path).unwrap(),
    )
    .unwrap();
    let refused = Channel::connect(&path, expected).await;
    assert!(
        matches!(refused, Err(ChannelError::Unreachable(_))),
        "{refused:?}"
    );
}

#[tokio::test]
async fn only_the_service_user_can_connect_and_no_session_user_can_replace_the_endpoint() {
    let sup = Supervised::start(2);
    let a = sup.user(0);
    let endpoint = sup.endpoint(a);
    use std::os::unix::fs::MetadataExt;
    let metadata = std::fs::symlink_metadata(&endpoint).unwrap();
    assert_eq!(metadata.uid(), sup.service_user.uid);
    assert_eq!(metadata.mode() & 0o777, 0o600);
    let folder = std::fs::metadata(endpoint.parent().unwrap()).unwrap();
    assert_eq!((folder.uid(), folder.mode() & 0o777), (0, 0o755));

    let connect = r#"use Socket; socket(S, PF_UNIX, SOCK_STREAM, 0) or exit 2; connect(S, pack_sockaddr_un($ARGV[0])) or do { print "$!\n"; exit 1 }; exit 0"#;
    let endpoint_text = endpoint.to_str().unwrap();
    let service = run_as(
        &sup.service_user,
        "/usr/bin/perl",
        &["-e", connect, endpoint_text],
    );
    assert!(service.status.success(), "{service:?}");
    for user in &sup.users {
        let refused = run_as(user, "/usr/bin/perl", &["-e", connect, endpoint_text]);
        assert!(!refused.status.success());
        assert!(String::from_utf8_lossy(&refused.stdout).contains("Permission denied"));
        // Neither can it put its own socket in the endpoint's place.
        let replace = run_as(user, "/bin/rm", &["-f", endpoint_text]);
        assert!(!replace.status.success());
        assert!(endpoint.exists());
    }
    // The helper still serves (the perl connection got the handover and closed).
    let _main = sup.main(a).await;
}

#[tokio::test]
async fn after_the_helper_is_killed_the_peer_check_follows_the_new_pid() {
    let sup = Supervised::start(1);
    let a = sup.user(0);
    let old = sup.expectation(a);
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(old.main_pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    );
    let new_pid = poll("a new helper", || {
        let now = sup.helper_pid(a);
        (now != old.main_pid).then_some(now)
    });
    // The old PID no longer passes, the reported one does.
    let stale = Channel::connect(&sup.endpoint(a), old).await;
    assert!(
        matches!(stale, Err(ChannelError::PeerMismatch)),
        "{stale:?}"
    );
    let mut main = Channel::connect(
        &sup.endpoint(a),
        PeerExpectation {
            uid: a.uid,
            main_pid: new_pid,
        },
    )
    .await
    .unwrap();
    main.send(&ToHelper::Main).await.unwrap();
    main.send(&ToHelper::Checks(Vec::new())).await.unwrap();
    assert!(matches!(
        within(main.recv()).await.unwrap(),
        Some(FromHelper::CheckResults(_))
    ));
}
