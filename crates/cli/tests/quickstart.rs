//! `scripts/quickstart` end to end (issue 8, "Try it on one machine"; issue
//! 16, "Check"): the script itself, run as the README says
//! (`scripts/quickstart`, by its execute bit, not through `bash`) as root in a
//! pseudo-terminal with its prompts answered the way a newcomer would answer
//! them — the enrollment code it prints, a password, the codes of an
//! authenticator app computed from the secret that `bothy enroll` shows, the
//! start of the fingerprint `bothy-host pair` prints — from nothing to a
//! shell whose exit code the script returns. Two run at the same time in
//! their own folders; a third walks the newcomer's path with wrong answers,
//! a killed client and two restarts of the server (SIGKILL and SIGTERM).
//!
//! What differs from a newcomer's run, and why:
//! - `QUICKSTART_BIN` points at the binaries of this build (bothy-host with
//!   the `test-seams` feature) and `BOTHY_HOST_TEST_PTRACE_SCOPE_FILE`
//!   redirects the one input of HD10 this kernel lacks (no Yama; DESIGN §4).
//! - The folder, the port and the OS users are the test's own, so that the
//!   machine keeps nothing of the run.
//! - The server runs on the real clock, and a TOTP code is single use: the
//!   five codes of the run (enroll, login, three step-ups) would need two more
//!   30-second steps of waiting. `BOTHY_AUTH__TOTP_SKEW_STEPS=5` lets the
//!   server accept the next steps at once instead (an operator's key, 0..=10),
//!   so nothing sleeps (docs/decisions.md D-310).

use bothy_testkit::machine;
use bothy_testkit::users;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use nix::sys::wait::WaitStatus;
use rexpect::session::PtySession;
use users::TestUser;

/// How long one expectation may wait (a safety net; nothing sleeps). The
/// script's steps each take a second or two; the server's first start
/// migrates a new database.
const EXPECT_MS: u64 = 120_000;

/// The skew the test's server accepts (see the module docs).
const SKEW_STEPS: u64 = 5;

const PASSWORD: &str = "correct horse battery staple quickstart";

/// Stops what the script started, also when the test fails half way.
struct Stop {
    dir: PathBuf,
}

impl Drop for Stop {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for log in ["server.log", "host.log"] {
                let text = std::fs::read_to_string(self.dir.join(log)).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(40).collect();
                eprintln!("--- the end of {log} in {}:", self.dir.display());
                for line in tail.iter().rev() {
                    eprintln!("{line}");
                }
            }
        }
        let _ = Command::new(script())
            .arg("stop")
            .env("QUICKSTART_DIR", &self.dir)
            .output();
    }
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/quickstart")
}

/// A port nobody listens on now (the script's server takes it a moment later).
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("its address").port()
}

/// The codes an authenticator app would show, each for a later step than the
/// one before (a used step is refused), within the skew around the real time.
struct App {
    totp: totp_rs::TOTP,
    last_step: Option<u64>,
}

impl App {
    fn next_code(&mut self) -> String {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_secs();
        let current = now / self.totp.step;
        let step = match self.last_step {
            Some(last) => (last + 1).max(current + 1 - SKEW_STEPS),
            None => current + 1 - SKEW_STEPS,
        };
        assert!(
            step <= current + SKEW_STEPS,
            "more codes than the skew allows"
        );
        self.last_step = Some(step);
        self.totp.generate(step * self.totp.step)
    }
}

fn answer(p: &mut PtySession, prompt: &str, text: &str) {
    p.exp_string(prompt)
        .unwrap_or_else(|e| panic!("the prompt {prompt:?}: {e}"));
    p.send_line(text).expect("typed");
}

fn expect(p: &mut PtySession, text: &str) -> String {
    p.exp_string(text)
        .unwrap_or_else(|e| panic!("{text:?}: {e}"))
}

/// One quickstart of a test: its folder, port, users and the home of the
/// person who runs it.
struct Quickstart {
    /// First, so that it drops first (fields drop in declaration order): the
    /// script's `stop` needs the folder's PID files and the users it runs as.
    _stop: Stop,
    dir: PathBuf,
    home: PathBuf,
    port: u16,
    yama: PathBuf,
    service_user: TestUser,
    session_user: TestUser,
    _scenario: machine::ScenarioDir,
}

impl Quickstart {
    fn new(tag: &str) -> Quickstart {
        let service_user = TestUser::create(&format!("{tag}s"));
        let session_user = TestUser::create(&format!("{tag}h"));
        let scenario = machine::ScenarioDir::new();
        let dir = scenario.path.join("quickstart");
        let home = scenario.path.join("root-home");
        std::fs::create_dir(&home).expect("home");
        let yama = scenario.path.join("ptrace_scope");
        std::fs::write(&yama, "1\n").expect("test ptrace_scope");
        Quickstart {
            _stop: Stop { dir: dir.clone() },
            dir,
            home,
            port: free_port(),
            yama,
            service_user,
            session_user,
            _scenario: scenario,
        }
    }

    /// The environment of the person (HOME and XDG folders of their own).
    fn person(&self, command: &mut Command) {
        command
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("HOME", &self.home)
            .env("XDG_CONFIG_HOME", self.home.join("config"))
            .env("XDG_DATA_HOME", self.home.join("data"))
            .env("NO_COLOR", "1");
    }

    /// `scripts/quickstart` in a pseudo-terminal, exactly as the README
    /// writes it (the settings are the environment's).
    fn spawn(&self) -> PtySession {
        let binaries = Path::new(machine::bothy_host())
            .parent()
            .expect("the target folder")
            .to_path_buf();
        let mut command = Command::new(script());
        self.person(&mut command);
        command
            .env("QUICKSTART_DIR", &self.dir)
            .env("QUICKSTART_PORT", self.port.to_string())
            .env("QUICKSTART_BIN", &binaries)
            .env("QUICKSTART_HOST", "my-machine")
            .env("QUICKSTART_SESSION_USER", &self.session_user.name)
            .env("QUICKSTART_SERVICE_USER", &self.service_user.name)
            .env("BOTHY_AUTH__TOTP_SKEW_STEPS", SKEW_STEPS.to_string())
            .env("BOTHY_HOST_TEST_PTRACE_SCOPE_FILE", &self.yama);
        rexpect::session::spawn_command(command, Some(EXPECT_MS)).expect("the script starts")
    }

    /// The installed `bothy` with the person's folders and the server's CA.
    fn bothy(&self, args: &[&str]) -> Command {
        let mut command = Command::new(self.dir.join("bin/bothy"));
        self.person(&mut command);
        command
            .args(args)
            .env("SSL_CERT_FILE", self.dir.join("ca.pem"));
        command
    }

    fn pid_of(&self, file: &str) -> i32 {
        std::fs::read_to_string(self.dir.join(file))
            .expect("a PID file")
            .trim()
            .parse()
            .expect("a PID")
    }
}

/// The exit code of a process driven by rexpect, after its end.
fn exit_code(p: &mut PtySession) -> i32 {
    let _ = p.exp_eof();
    match p.process().wait().expect("wait") {
        WaitStatus::Exited(_, code) => code,
        other => panic!("ended with {other:?}"),
    }
}

/// The whole script with right answers, from nothing to a shell; the exit
/// code of the shell is the script's.
fn newcomer_with_right_answers(quickstart: &Quickstart) {
    let mut p = quickstart.spawn();
    let session_user = &quickstart.session_user.name;
    expect(&mut p, "Your one-time enrollment code");
    let (_, enrollment) = p.exp_regex("bothy_ec_[A-Za-z0-9_-]+").expect("the code");
    answer(&mut p, "Enrollment code: ", &enrollment);
    answer(&mut p, "New password: ", PASSWORD);
    answer(&mut p, "The password again: ", PASSWORD);
    let (_, uri) = p.exp_regex("otpauth://[^\\s]+").expect("the URI");
    let mut app = App {
        totp: totp_rs::TOTP::from_url(&uri).expect("an otpauth URI"),
        last_step: None,
    };
    answer(&mut p, "The code your app shows now: ", &app.next_code());
    expect(&mut p, "Enrolled as owner");
    answer(&mut p, "Password: ", PASSWORD);
    answer(&mut p, "TOTP code: ", &app.next_code());
    expect(&mut p, "Logged in as owner");
    expect(&mut p, "==> Doctor");
    answer(&mut p, "TOTP code for the step-up: ", &app.next_code());
    expect(&mut p, "Pairing code (shown only now)");
    let (_, fingerprint) = p
        .exp_regex("[0-9A-Za-z]{4}(-[0-9A-Za-z]{4}){12}")
        .expect("pair prints the fingerprint in groups of four");
    let prefix: String = fingerprint.chars().filter(|c| *c != '-').take(8).collect();
    expect(&mut p, "connected; it reported its session users");
    answer(
        &mut p,
        "characters of the fingerprint that bothy-host pair showed: ",
        &prefix,
    );
    answer(&mut p, "(yes/no): ", "yes");
    answer(&mut p, "(none/organization/personal): ", "none");
    answer(&mut p, "Your own session user on this host (", session_user);
    answer(&mut p, "(USERNAME SESSION_USER; empty to finish): ", "");
    answer(&mut p, "TOTP code for the step-up: ", &app.next_code());
    expect(&mut p, "confirmed: active");
    answer(&mut p, "TOTP code for the step-up: ", &app.next_code());
    p.send_line("echo \"I am $(id -un)\"; exit 7")
        .expect("typed");
    expect(&mut p, &format!("I am {session_user}"));
    expect(&mut p, "The session ended with exit code 7");
    assert_eq!(exit_code(&mut p), 7, "the script's exit code");
}

/// Two quickstarts at the same time on one machine, each in its own folder
/// (issue 16 items 1 and 2): the script runs by its execute bit, and the
/// host services run under supervise with runtime folders of their own. What
/// they started outlives the scripts and their terminals.
#[test]
fn two_quickstarts_take_newcomers_from_nothing_to_a_shell_at_the_same_time() {
    machine::close_foreign_homes();
    let first = Quickstart::new("qa");
    let second = Quickstart::new("qb");
    std::thread::scope(|scope| {
        let a = scope.spawn(|| newcomer_with_right_answers(&first));
        let b = scope.spawn(|| newcomer_with_right_answers(&second));
        a.join().expect("the first quickstart");
        b.join().expect("the second quickstart");
    });
    for quickstart in [&first, &second] {
        let dir = &quickstart.dir;
        // The runtime folder is the quickstart's own.
        assert!(dir.join("host/run/supervise.lock").is_file(), "{dir:?}");
        assert!(dir.join("server.pid").is_file() && dir.join("host.pid").is_file());
        let hosts = quickstart
            .bothy(&["hosts", "--json"])
            .output()
            .expect("bothy runs");
        let listed = String::from_utf8_lossy(&hosts.stdout);
        assert!(
            hosts.status.success() && listed.contains("\"connected\":true"),
            "{listed}{}",
            String::from_utf8_lossy(&hosts.stderr)
        );
        // The terminal's hangup did not reach supervise (SIGHUP: restart).
        let host_log = std::fs::read_to_string(dir.join("host.log")).expect("host.log");
        assert!(
            !host_log.contains("restart_requested"),
            "the terminal's hangup reached supervise: {host_log}"
        );
        let stopped = Command::new(script())
            .arg("stop")
            .env("QUICKSTART_DIR", dir)
            .output()
            .expect("stop runs");
        assert!(stopped.status.success(), "{stopped:?}");
        assert!(!dir.join("server.pid").exists() && !dir.join("host.pid").exists());
    }
}

/// The PID of the script's `bothy open` of the quickstart in `dir` (the
/// `bothy` process that inherited this quickstart's folder and runs `open`).
fn bothy_open_of(dir: &Path) -> i32 {
    let wanted = format!("QUICKSTART_DIR={}", dir.display());
    bothy_testkit::wait::try_eventually_blocking(Duration::from_secs(60), || {
        for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            if comm.trim() != "bothy" {
                continue;
            }
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            let has = |bytes: &[u8], text: &str| {
                bytes.split(|b| *b == 0).any(|part| part == text.as_bytes())
            };
            if has(&cmdline, "open") && has(&environ, &wanted) {
                return Some(pid);
            }
        }
        None
    })
    .unwrap_or_else(|| panic!("no bothy open of {dir:?}"))
}

fn signal(pid: i32, signal: nix::sys::signal::Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal).expect("signalled");
}

/// The scripts runs again after a restart of its server: every step that is
/// done says so, the server starts, and it ends with a shell of its own
/// (answered and left).
fn resume(quickstart: &Quickstart, app: &mut App) {
    let mut p = quickstart.spawn();
    expect(&mut p, "started (PID");
    expect(&mut p, "enrolled already");
    expect(&mut p, "logged in already");
    expect(&mut p, "The host my-machine exists on the server (active)");
    expect(&mut p, "running already");
    expect(&mut p, "connected; it reported its session users");
    expect(&mut p, "The host my-machine is confirmed already.");
    answer(&mut p, "TOTP code for the step-up: ", &app.next_code());
    p.send_line("exit 0").expect("typed");
    expect(&mut p, "The session ended with exit code 0");
    assert_eq!(exit_code(&mut p), 0);
}

/// Issue 16, "Check": the newcomer's path with what went wrong for a real
/// newcomer — a mistyped enrollment code, a short password, a TOTP code used
/// twice, a wrong start of the fingerprint, a client killed with SIGTERM, and
/// the server killed with SIGKILL and stopped with SIGTERM — each answered
/// with the message that says what to do, and the session comes back in the
/// same client without a step-up, its background job still running.
#[test]
fn the_newcomers_path_with_wrong_answers_a_killed_client_and_server_restarts() {
    machine::close_foreign_homes();
    let quickstart = Quickstart::new("qn");
    let session_user = quickstart.session_user.name.clone();
    let mut p = quickstart.spawn();
    expect(&mut p, "Your one-time enrollment code");
    let (_, enrollment) = p.exp_regex("bothy_ec_[A-Za-z0-9_-]+").expect("the code");
    // A mistyped code: said before any password.
    let mistyped = format!("{}x", &enrollment[..enrollment.len() - 1]);
    answer(&mut p, "Enrollment code: ", &mistyped);
    let seen = expect(&mut p, "That code is wrong, used or expired");
    assert!(!seen.contains("assword"), "{seen:?}");
    answer(&mut p, "Enrollment code: ", &enrollment);
    expect(&mut p, "at least 12 characters");
    answer(&mut p, "New password: ", "short");
    expect(&mut p, "Too short: 5 characters, at least 12");
    answer(&mut p, "New password: ", PASSWORD);
    answer(&mut p, "The password again: ", PASSWORD);
    let (_, uri) = p.exp_regex("otpauth://[^\\s]+").expect("the URI");
    let mut app = App {
        totp: totp_rs::TOTP::from_url(&uri).expect("an otpauth URI"),
        last_step: None,
    };
    let first_code = app.next_code();
    answer(&mut p, "The code your app shows now: ", &first_code);
    expect(&mut p, "Enrolled as owner");
    // The same code again at the login: refused as used, and asked again.
    answer(&mut p, "Password: ", PASSWORD);
    answer(&mut p, "TOTP code: ", &first_code);
    expect(&mut p, "Not accepted:");
    expect(&mut p, "wait for the next one");
    answer(&mut p, "Password: ", PASSWORD);
    answer(&mut p, "TOTP code: ", &app.next_code());
    expect(&mut p, "Logged in as owner");
    expect(&mut p, "==> Doctor");
    answer(&mut p, "TOTP code for the step-up: ", &app.next_code());
    let (_, fingerprint) = p
        .exp_regex("[0-9A-Za-z]{4}(-[0-9A-Za-z]{4}){12}")
        .expect("the fingerprint");
    let prefix: String = fingerprint.chars().filter(|c| *c != '-').take(8).collect();
    let wrong = if prefix == "00000000" {
        "11111111"
    } else {
        "00000000"
    };
    expect(&mut p, "connected; it reported its session users");
    answer(&mut p, "characters of the fingerprint", wrong);
    answer(&mut p, "(yes/no): ", "yes");
    answer(&mut p, "(none/organization/personal): ", "none");
    answer(
        &mut p,
        "Your own session user on this host (",
        &session_user,
    );
    answer(&mut p, "empty to finish): ", "");
    answer(&mut p, "TOTP code for the step-up: ", &app.next_code());
    expect(
        &mut p,
        "2 attempts left (at 0 the host must be paired again)",
    );
    answer(&mut p, "characters of the fingerprint", &prefix);
    answer(&mut p, "TOTP code for the step-up: ", &app.next_code());
    expect(&mut p, "confirmed: active");
    answer(&mut p, "TOTP code for the step-up: ", &app.next_code());
    p.send_line("sleep 600 & echo MARK-$((6*7))")
        .expect("typed");
    expect(&mut p, "MARK-42");

    // The client killed with SIGTERM: the session stays, and it says how to
    // take it back.
    let client = bothy_open_of(&quickstart.dir);
    signal(client, nix::sys::signal::Signal::SIGTERM);
    let seen = expect(&mut p, "takes it back");
    assert!(seen.contains("is detached (SIGTERM)"), "{seen:?}");
    assert!(!seen.contains("nothing was changed"), "{seen:?}");
    expect(&mut p, "The session ended with exit code 255");
    assert_eq!(exit_code(&mut p), 255);

    // `bothy attach` takes it back quickly: no step-up.
    let mut attached = rexpect::session::spawn_command(
        quickstart.bothy(&["attach", "--server-alive-interval", "2"]),
        Some(EXPECT_MS),
    )
    .expect("bothy attach");
    let seen = expect(&mut attached, "MARK-42");
    assert!(!seen.contains("TOTP"), "a quick reattach: {seen:?}");

    // The server killed: the client keeps trying; the script started again
    // finds everything done but the server.
    signal(
        quickstart.pid_of("server.pid"),
        nix::sys::signal::Signal::SIGKILL,
    );
    expect(&mut attached, "reattaching session");
    resume(&quickstart, &mut app);
    let seen = expect(&mut attached, "bothy: reattached.");
    assert!(!seen.contains("TOTP"), "no step-up: {seen:?}");
    attached.send_line("jobs -r").expect("typed");
    expect(&mut attached, "Running");

    // The server stopped with SIGTERM (4013 server_shutdown): the same.
    signal(
        quickstart.pid_of("server.pid"),
        nix::sys::signal::Signal::SIGTERM,
    );
    let seen = expect(&mut attached, "reattaching session");
    assert!(seen.contains("server_shutdown"), "{seen:?}");
    assert!(!seen.contains("check your network"), "{seen:?}");
    resume(&quickstart, &mut app);
    let seen = expect(&mut attached, "bothy: reattached.");
    assert!(!seen.contains("TOTP"), "no step-up: {seen:?}");
    attached.send_line("jobs -r; exit 9").expect("typed");
    expect(&mut attached, "Running");
    assert_eq!(exit_code(&mut attached), 9);
}
