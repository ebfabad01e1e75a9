//! Local confirmation (6.4) end to end: the real server, `bothy-host
//! supervise` with the real service and helpers, real OS users, and real
//! `bothy-host confirm-agent` processes run as those users. The dialog is a
//! test program named `zenity` in the agent's dialog folder; `loginctl` is a
//! test program that names the user of seat0's active session (this machine
//! runs no logind). Both, and the folder of `confirm.sock` (so that scenarios
//! run side by side), are the test seams of the feature `test-seams` (D-200,
//! D-203, D-205).

use bothy_testkit::scenario as e2e_common;
use bothy_testkit::users;
use bothy_testkit::wait::try_eventually;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use bothy_proto::frame::TerminalSize;
use bothy_server::db::Engine;
use e2e_common::{DeviceSession, Options, Received, Scenario, ScenarioDir, bothy_host};
use users::TestUser;

/// The files of one scenario's local confirmation: the fake `loginctl`, the
/// owner of seat0, the folder of `confirm.sock`.
struct Desk {
    dir: ScenarioDir,
}

impl Desk {
    fn new() -> Desk {
        let dir = ScenarioDir::new();
        let owner = dir.path.join("seat-owner");
        fs::write(&owner, "").expect("seat owner");
        fs::set_permissions(&owner, fs::Permissions::from_mode(0o644)).expect("chmod");
        // Answers exactly the two questions the service asks; anything else fails.
        let loginctl = dir.path.join("loginctl");
        fs::write(
            &loginctl,
            format!(
                "#!/bin/sh\ncase \" $* \" in\n  *\" show-seat seat0 --property=ActiveSession --value \"*) echo 7 ;;\n  *\" show-session --property=User --value -- 7 \"*) exec cat {} ;;\n  *) exit 1 ;;\nesac\n",
                owner.display()
            ),
        )
        .expect("loginctl");
        fs::set_permissions(&loginctl, fs::Permissions::from_mode(0o755)).expect("chmod");
        Desk { dir }
    }

    fn confirm_dir(&self) -> PathBuf {
        self.dir.path.join("confirm")
    }

    /// The test seams for supervise (which hands them to the service).
    fn env(&self) -> Vec<(String, PathBuf)> {
        vec![
            ("BOTHY_HOST_TEST_CONFIRM_DIR".into(), self.confirm_dir()),
            (
                "BOTHY_HOST_TEST_LOGINCTL".into(),
                self.dir.path.join("loginctl"),
            ),
        ]
    }

    /// Makes `uid` the user of seat0's active session (`None`: loginctl
    /// prints nothing, as without an active session).
    fn seat_owner(&self, uid: Option<u32>) {
        let text = uid.map(|u| format!("{u}\n")).unwrap_or_default();
        fs::write(self.dir.path.join("seat-owner"), text).expect("seat owner");
    }

    /// Starts `bothy-host confirm-agent` as `user` with its own dialog
    /// folder; `with_zenity` false leaves the folder empty (no dialog tool).
    fn agent(&self, user: &TestUser, name: &str, with_zenity: bool) -> Agent {
        let dialogs = self.dir.path.join(format!("dialogs-{name}"));
        fs::create_dir(&dialogs).expect("dialog folder");
        fs::set_permissions(&dialogs, fs::Permissions::from_mode(0o755)).expect("chmod");
        let out = self.dir.path.join(format!("out-{name}"));
        fs::create_dir(&out).expect("out folder");
        std::os::unix::fs::chown(&out, Some(user.uid), Some(user.gid)).expect("chown");
        let mode = self.dir.path.join(format!("mode-{name}"));
        fs::write(&mode, "no\n").expect("mode");
        fs::set_permissions(&mode, fs::Permissions::from_mode(0o644)).expect("chmod");
        if with_zenity {
            // Records its arguments, then answers as the mode file says.
            let zenity = dialogs.join("zenity");
            fs::write(
                &zenity,
                format!(
                    "#!/bin/sh\nprintf '%s\\n' \"$@\" > {out}/args\necho started >> {out}/dialogs\ncase \"$(cat {mode})\" in\n  yes) exit 0 ;;\n  sleep) exec sleep 1000 ;;\n  *) exit 1 ;;\nesac\n",
                    out = out.display(),
                    mode = mode.display(),
                ),
            )
            .expect("zenity");
            fs::set_permissions(&zenity, fs::Permissions::from_mode(0o755)).expect("chmod");
        }
        let log = self.dir.path.join(format!("agent-{name}.log"));
        let file = fs::File::create(&log).expect("agent log");
        let child = as_user(user, bothy_host())
            .arg("confirm-agent")
            .env("BOTHY_HOST_LOG", "debug")
            .env("BOTHY_HOST_TEST_CONFIRM_DIR", self.confirm_dir())
            .env("BOTHY_HOST_TEST_DIALOG_DIR", &dialogs)
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("log"))
            .stderr(file)
            .spawn()
            .expect("the agent starts");
        Agent {
            child,
            log,
            mode,
            out,
        }
    }

    /// Runs the Python `script` as `user` with the path of `confirm.sock` as
    /// its first argument: a peer of the endpoint that is no agent.
    fn peer_script(&self, user: &TestUser, script: &str) -> Output {
        as_user(user, "python3")
            .args(["-c", script])
            .arg(self.confirm_dir().join("confirm.sock"))
            .output()
            .expect("python3 runs")
    }
}

/// `program` as `user` (its user and primary group), in `/`, with nothing of
/// the test's environment but a `PATH`.
fn as_user(user: &TestUser, program: &str) -> Command {
    let mut command = Command::new(program);
    command
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .current_dir("/")
        .uid(user.uid)
        .gid(user.gid);
    command
}

/// A running `bothy-host confirm-agent`, killed on drop.
struct Agent {
    child: Child,
    log: PathBuf,
    mode: PathBuf,
    out: PathBuf,
}

impl Agent {
    /// What the next dialog answers: `yes`, `no` or `sleep` (never answers).
    fn answer(&self, mode: &str) {
        fs::write(&self.mode, format!("{mode}\n")).expect("mode");
    }

    fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The arguments of the last dialog.
    fn dialog_args(&self) -> Vec<String> {
        fs::read_to_string(self.out.join("args"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    fn dialogs_shown(&self) -> usize {
        fs::read_to_string(self.out.join("dialogs"))
            .unwrap_or_default()
            .lines()
            .count()
    }

    async fn wait_log(&self, needle: &str) {
        let seen = try_eventually(e2e_common::WAIT, || async {
            self.log().contains(needle).then_some(())
        })
        .await;
        assert!(
            seen.is_some(),
            "{needle} never appeared in the agent's log:\n{}",
            self.log()
        );
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn size() -> TerminalSize {
    TerminalSize::new(100, 30).expect("size")
}

fn options(desk: &Desk, timeout: &str) -> Options {
    Options {
        extra_host_yaml: format!(
            "  require_local_confirm: true\n  local_confirm_timeout: {timeout}\n"
        ),
        extra_env: desk.env(),
        ..Options::default()
    }
}

/// How many lines of the host's log contain every one of `needles`.
fn log_lines(scenario: &Scenario, needles: &[&str]) -> usize {
    scenario
        .log()
        .lines()
        .filter(|line| needles.iter().all(|n| line.contains(n)))
        .count()
}

/// Waits (bounded) until at least `count` lines of the host's log contain
/// every one of `needles`.
async fn wait_lines(scenario: &Scenario, needles: &[&str], count: usize) {
    let seen = try_eventually(e2e_common::WAIT, || async {
        (log_lines(scenario, needles) >= count).then_some(())
    })
    .await;
    assert!(
        seen.is_some(),
        "fewer than {count} lines with {needles:?} in the host log:\n{}",
        scenario.log()
    );
}

/// Whether `uid` runs a `sleep 1000` (the never-answering dialog).
fn runs_dialog(uid: u32) -> bool {
    Command::new("pgrep")
        .args(["-u", &uid.to_string(), "-f", "sleep 1000"])
        .output()
        .is_ok_and(|o| o.status.success())
}

async fn wait_no_dialog(uid: u32) {
    let gone = try_eventually(e2e_common::WAIT, || async {
        (!runs_dialog(uid)).then_some(())
    })
    .await;
    assert!(gone.is_some(), "the dialog still runs");
}

/// An opening whose confirmation is denied: the device gets 4100 with
/// open_failed, the session ends open_failed / local_confirm_denied, no PTY
/// ran, and the host logs the reason.
async fn open_denied(scenario: &Scenario, reason: &str) {
    let before = log_lines(scenario, &["local_confirm_denied", reason]);
    let mut device = scenario.open_shell().await;
    let (code, text) = device.expect_close().await;
    assert_eq!((code, text.as_str()), (4100, "open_failed"));
    let (reason_closed, detail) = scenario.closed(device.session_id).await;
    assert_eq!(
        (reason_closed.as_str(), detail.as_deref()),
        ("open_failed", Some("local_confirm_denied"))
    );
    wait_lines(scenario, &["local_confirm_denied", reason], before + 1).await;
    // The helper never started a PTY for it.
    assert_eq!(
        log_lines(
            scenario,
            &["session_started", &device.session_id.to_string()]
        ),
        0,
        "a PTY started"
    );
}

/// An opening the person allows: the shell runs as the session user.
async fn open_allowed(scenario: &Scenario) -> DeviceSession {
    let mut device = scenario.open_shell().await;
    device.type_text("echo \"USER=[$(id -un)]\"\n").await;
    device
        .expect_output(&format!("USER=[{}]", scenario.users[0].name))
        .await;
    device
}

/// Allow, deny and timeout of openings and attaches; several agents, the
/// first answer wins and the others' dialogs close; no agent denies at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_confirmation_allows_denies_and_times_out_openings_and_attaches() {
    let desk = Desk::new();
    let person = TestUser::create("desk");
    desk.seat_owner(Some(person.uid));
    let mut scenario = Scenario::start(Engine::Sqlite, options(&desk, "3s")).await;

    // The folder as RuntimeDirectory= makes it, the socket with mode 0666.
    let folder = fs::symlink_metadata(desk.confirm_dir()).expect("the confirm folder");
    assert!(folder.is_dir());
    assert_eq!(folder.mode() & 0o7777, 0o755);
    assert_eq!(
        (folder.uid(), folder.gid()),
        (scenario.service_user.uid, scenario.service_user.gid)
    );
    let socket = fs::symlink_metadata(desk.confirm_dir().join("confirm.sock"))
        .expect("confirm.sock is open once the service runs");
    assert_eq!(socket.mode() & 0o777, 0o666);

    // No agent: denied at once.
    open_denied(&scenario, "no_agent").await;

    // An agent of the person at the desk; its dialog allows.
    let agent = desk.agent(&person, "a", true);
    wait_lines(&scenario, &["confirm_agent_connected"], 1).await;
    agent.answer("yes");
    let mut device = open_allowed(&scenario).await;
    let args = agent.dialog_args();
    for expected in [
        "--question",
        "--default-cancel",
        "--no-markup",
        "--timeout=3",
        "Profile: shell",
    ] {
        assert!(
            args.iter().any(|a| a.contains(expected)),
            "{expected} missing from {args:?}"
        );
    }
    assert!(
        args.iter()
            .any(|a| a.contains(&format!("Session user: {}", scenario.users[0].name))),
        "{args:?}"
    );
    assert!(
        args.iter()
            .any(|a| a.contains("open a new terminal session"))
    );
    assert_eq!(log_lines(&scenario, &["local_confirm_allowed", "open"]), 1);
    device.type_text("echo MARK-$((40+2))\n").await;
    device.expect_output("MARK-42").await;
    let session_id = device.session_id;
    drop(device);
    scenario.wait_state(session_id, "detached").await;

    // A denial, then no answer within local_confirm_timeout (the dialog is
    // closed when the time is up).
    agent.answer("no");
    open_denied(&scenario, "denied").await;
    agent.answer("sleep");
    let shown = agent.dialogs_shown();
    let started = tokio::time::Instant::now();
    open_denied(&scenario, "timeout").await;
    assert!(
        started.elapsed() >= Duration::from_millis(2900),
        "denied before local_confirm_timeout"
    );
    assert_eq!(agent.dialogs_shown(), shown + 1);
    wait_no_dialog(person.uid).await;

    // An allowed attach replays; a denied attach ends the session.
    agent.answer("yes");
    let mut again = scenario.attach(&scenario.owner, session_id, size()).await;
    assert_eq!(again.recv().await, Received::ReplayBegin);
    again.expect_output("MARK-42").await;
    assert!(
        agent
            .dialog_args()
            .iter()
            .any(|a| a.contains("attach to a running terminal session")),
        "the attach dialog says attach"
    );
    drop(again);
    scenario.wait_state(session_id, "detached").await;
    agent.answer("no");
    let mut denied = scenario.attach(&scenario.owner, session_id, size()).await;
    loop {
        match denied.recv().await {
            Received::Closed(code, text) => {
                assert_eq!((code, text.as_str()), (4100, "open_failed"));
                break;
            }
            Received::ReplayBegin | Received::ReplayEnd | Received::Data(_) => {
                panic!("a denied attach must not replay")
            }
            Received::Exit(_) => {}
        }
    }
    let (reason, detail) = scenario.closed(session_id).await;
    assert_eq!(
        (reason.as_str(), detail.as_deref()),
        ("open_failed", Some("local_confirm_denied"))
    );
    scenario.wait_no_session_processes(0).await;
    scenario
        .assert_attach_refused_as_closed(&scenario.owner, session_id)
        .await;

    // Two agents: the first answer wins, the other's dialog is cancelled.
    let slow = desk.agent(&person, "b", true);
    wait_lines(&scenario, &["confirm_agent_connected"], 2).await;
    slow.answer("sleep");
    agent.answer("yes");
    let mut device = open_allowed(&scenario).await;
    slow.wait_log("confirm_cancelled").await;
    wait_no_dialog(person.uid).await;
    device.type_text("exit 0\n").await;
    assert_eq!(device.expect_exit().await, 0);

    // A restart of the service: the agents connect again by themselves.
    drop(slow);
    let connected = log_lines(&scenario, &["confirm_agent_connected"]);
    scenario.restart();
    scenario.wait_connected().await;
    wait_lines(&scenario, &["confirm_agent_connected"], connected + 1).await;
    agent.answer("yes");
    drop(open_allowed(&scenario).await);

    // The logs name no user.
    for line in scenario.log().lines().filter(|l| l.contains("confirm")) {
        assert!(!line.contains(&person.name), "{line}");
        assert!(!line.contains(&scenario.users[0].name), "{line}");
    }

    // RuntimeDirectory= goes with the service.
    scenario.stop_service();
    assert!(!desk.confirm_dir().exists(), "the confirm folder was left");
}

/// The peer rule: the service user, a session user, a former session user
/// and a user who is not at seat0 are refused at the connection; an accepted
/// agent is judged again before a request; without a dialog tool the agent
/// denies and logs no_dialog_tool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_confirmation_refuses_peers_and_denies_without_a_dialog_tool() {
    let desk = Desk::new();
    let person = TestUser::create("desk");
    let other = TestUser::create("other");
    let former = TestUser::create("former");
    desk.seat_owner(Some(person.uid));
    let scenario = Scenario::start(Engine::Sqlite, options(&desk, "3s")).await;

    // `former` was a session user: bound in bindings.json, no longer listed.
    let bindings = scenario.state_dir.join("bindings.json");
    let text = format!(
        "{{\"v\":1,\"bindings\":{{\"{}\":\"{}\"}}}}",
        former.name,
        uuid::Uuid::new_v4()
    );
    let temporary = scenario.state_dir.join("bindings.json.test");
    fs::write(&temporary, text).expect("bindings");
    std::os::unix::fs::chown(
        &temporary,
        Some(scenario.service_user.uid),
        Some(scenario.service_user.gid),
    )
    .expect("chown");
    fs::set_permissions(&temporary, fs::Permissions::from_mode(0o600)).expect("chmod");
    fs::rename(&temporary, &bindings).expect("rename");

    let _service = desk.agent(&scenario.service_user, "svc", true);
    wait_lines(&scenario, &["confirm_peer_refused", "service_user"], 1).await;
    let session_user = &scenario.users[0];
    let _session = desk.agent(session_user, "u0", true);
    wait_lines(
        &scenario,
        &["confirm_peer_refused", "reason=\"session_user\""],
        1,
    )
    .await;
    let _former = desk.agent(&former, "former", true);
    wait_lines(
        &scenario,
        &["confirm_peer_refused", "former_session_user"],
        1,
    )
    .await;
    let _other = desk.agent(&other, "other", true);
    wait_lines(&scenario, &["confirm_peer_refused", "not_seat_owner"], 1).await;
    for agent in [&_service, &_session, &_former, &_other] {
        agent.answer("yes");
    }
    assert_eq!(log_lines(&scenario, &["confirm_agent_connected"]), 0);
    // No accepted agent: denied, and no refused agent was asked.
    open_denied(&scenario, "no_agent").await;
    for agent in [&_service, &_session, &_former, &_other] {
        assert_eq!(agent.dialogs_shown(), 0);
    }

    // The person at the desk, but no dialog program: the agent denies.
    let bare = desk.agent(&person, "bare", false);
    wait_lines(&scenario, &["confirm_agent_connected"], 1).await;
    open_denied(&scenario, "denied").await;
    bare.wait_log("no_dialog_tool").await;

    // An accepted peer that sends an answer to no request is kept; a line
    // that is no answer closes its connection.
    let client = desk.peer_script(
        &person,
        "import socket,sys\n\
             s=socket.socket(socket.AF_UNIX)\n\
             s.settimeout(30)\n\
             s.connect(sys.argv[1])\n\
             s.sendall(b'{\"op\":\"answer\",\"id\":999,\"allow\":true}\\n')\n\
             s.sendall(b'{\"op\":\"answer\",\"id\":1,\"allow\":\"yes\"}\\n')\n\
             print('closed' if s.recv(100)==b'' else 'open')\n",
    );
    assert_eq!(
        String::from_utf8_lossy(&client.stdout).trim(),
        "closed",
        "{}",
        String::from_utf8_lossy(&client.stderr)
    );
    assert_eq!(log_lines(&scenario, &["confirm_agent_invalid"]), 1);

    // Every local user may connect, so the endpoint holds a bounded number
    // of connections and closes the rest at once.
    let flood = desk.peer_script(
        &person,
        "import socket,sys\n\
             held=[]\n\
             for i in range(40):\n\
             \x20s=socket.socket(socket.AF_UNIX)\n\
             \x20s.connect(sys.argv[1])\n\
             \x20held.append(s)\n\
             import time\n\
             time.sleep(1)\n\
             closed=0\n\
             for s in held:\n\
             \x20s.setblocking(False)\n\
             \x20try:\n\
             \x20\x20closed+=s.recv(100)==b''\n\
             \x20except BlockingIOError:\n\
             \x20\x20pass\n\
             print(closed)\n",
    );
    let closed: usize = String::from_utf8_lossy(&flood.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&flood.stderr)));
    // At most MAX_CONNECTIONS (32) are held, whatever else is connected.
    assert!(closed >= 40 - 32, "only {closed} of 40 were closed");
    assert!(log_lines(&scenario, &["confirm_endpoint_busy"]) >= 8);

    // Another person takes the seat: the connected agent is refused before
    // the next request, which nobody may answer.
    desk.seat_owner(Some(other.uid));
    open_denied(&scenario, "no_agent").await;
    wait_lines(&scenario, &["confirm_peer_refused", "not_seat_owner"], 2).await;
    wait_lines(&scenario, &["confirm_agent_disconnected"], 1).await;

    // No active session on seat0 (loginctl prints nothing): refused.
    desk.seat_owner(None);
    let _later = desk.agent(&person, "later", true);
    wait_lines(
        &scenario,
        &["confirm_peer_refused", "seat_owner_unknown"],
        1,
    )
    .await;
    open_denied(&scenario, "no_agent").await;
}
