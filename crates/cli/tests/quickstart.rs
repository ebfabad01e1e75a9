//! `scripts/quickstart` end to end (issue 8, "Try it on one machine"): the
//! script itself, run as root in a pseudo-terminal with its prompts answered
//! the way a newcomer would answer them — the enrollment code it prints, a
//! password, the codes of an authenticator app computed from the secret that
//! `bothy enroll` shows, the start of the fingerprint `bothy-host pair`
//! prints — from nothing to a shell whose exit code the script returns.
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

#[path = "../../host/tests/support/machine.rs"]
mod machine;
#[path = "../../host/tests/support/users.rs"]
#[allow(dead_code)]
mod users;

use std::path::{Path, PathBuf};
use std::process::Command;

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
                eprintln!("--- the end of {log}:");
                for line in tail.iter().rev() {
                    eprintln!("{line}");
                }
            }
        }
        let _ = Command::new("bash")
            .arg(script())
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

#[test]
fn quickstart_takes_a_newcomer_from_nothing_to_a_shell() {
    machine::close_foreign_homes();
    let service_user = TestUser::create("qsvc");
    let session_user = TestUser::create("qsh");
    let scenario = machine::ScenarioDir::new();
    let dir = scenario.path.join("quickstart");
    let home = scenario.path.join("root-home");
    std::fs::create_dir(&home).expect("home");
    let yama = scenario.path.join("ptrace_scope");
    std::fs::write(&yama, "1\n").expect("test ptrace_scope");
    let binaries = Path::new(machine::bothy_host())
        .parent()
        .expect("the target folder")
        .to_path_buf();
    let port = free_port();
    let _stop = Stop { dir: dir.clone() };

    let mut command = Command::new("bash");
    command
        .arg(script())
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("HOME", &home)
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env("XDG_DATA_HOME", home.join("data"))
        .env("NO_COLOR", "1")
        .env("QUICKSTART_DIR", &dir)
        .env("QUICKSTART_PORT", port.to_string())
        .env("QUICKSTART_BIN", &binaries)
        .env("QUICKSTART_HOST", "my-machine")
        .env("QUICKSTART_SESSION_USER", &session_user.name)
        .env("QUICKSTART_SERVICE_USER", &service_user.name)
        .env("BOTHY_AUTH__TOTP_SKEW_STEPS", SKEW_STEPS.to_string())
        .env("BOTHY_HOST_TEST_PTRACE_SCOPE_FILE", &yama);
    let mut p = rexpect::session::spawn_command(command, Some(EXPECT_MS)).expect("bash starts");

    // The server, the owner's code, the enrollment with the app's secret.
    p.exp_string("Your one-time enrollment code")
        .expect("bootstrap");
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
    p.exp_string("Enrolled as owner").expect("enrolled");
    answer(&mut p, "Password: ", PASSWORD);
    answer(&mut p, "TOTP code: ", &app.next_code());
    p.exp_string("Logged in as owner").expect("logged in");

    // The host: install, doctor, create (step-up), pair, service, confirm.
    p.exp_string("==> Doctor").expect("installed");
    answer(&mut p, "TOTP code for the step-up: ", &app.next_code());
    p.exp_string("Pairing code (shown only now)")
        .expect("created");
    let (_, fingerprint) = p
        .exp_regex("[0-9A-Za-z]{4}(-[0-9A-Za-z]{4}){12}")
        .expect("pair prints the fingerprint in groups of four");
    let prefix: String = fingerprint.chars().filter(|c| *c != '-').take(8).collect();
    p.exp_string("connected; it reported its session users")
        .expect("the service connected");
    answer(
        &mut p,
        "characters of the fingerprint that bothy-host pair showed: ",
        &prefix,
    );
    answer(&mut p, "(yes/no): ", "yes");
    answer(&mut p, "(none/organization/personal): ", "none");
    answer(
        &mut p,
        "Your own session user on this host (",
        &session_user.name,
    );
    answer(&mut p, "(USERNAME SESSION_USER; empty to finish): ", "");
    answer(&mut p, "TOTP code for the step-up: ", &app.next_code());
    p.exp_string("confirmed: active").expect("confirmed");

    // The shell, as the session user; its exit code is the script's.
    answer(&mut p, "TOTP code for the step-up: ", &app.next_code());
    p.send_line("echo \"I am $(id -un)\"; exit 7")
        .expect("typed");
    p.exp_string(&format!("I am {}", session_user.name))
        .expect("the shell runs as the session user");
    p.exp_string("The session ended with exit code 7")
        .expect("the script reports the exit code");
    let _ = p.exp_eof();
    match p.process().wait().expect("wait") {
        WaitStatus::Exited(_, code) => assert_eq!(code, 7, "the script's exit code"),
        other => panic!("the script ended with {other:?}"),
    }

    // What it started outlives the script and its terminal (which hung up,
    // and SIGHUP means "restart" to supervise): the server answers, and the
    // host is connected with the service that started first.
    assert!(dir.join("server.pid").is_file() && dir.join("host.pid").is_file());
    let hosts = Command::new(dir.join("bin/bothy"))
        .args(["hosts", "--json"])
        .env_clear()
        .env("HOME", &home)
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env("XDG_DATA_HOME", home.join("data"))
        .env("SSL_CERT_FILE", dir.join("ca.pem"))
        .output()
        .expect("bothy runs");
    let listed = String::from_utf8_lossy(&hosts.stdout);
    assert!(
        hosts.status.success() && listed.contains("\"connected\":true"),
        "{listed}{}",
        String::from_utf8_lossy(&hosts.stderr)
    );
    let host_log = std::fs::read_to_string(dir.join("host.log")).expect("host.log");
    assert!(
        !host_log.contains("restart_requested"),
        "the terminal's hangup reached supervise: {host_log}"
    );
    let stopped = Command::new("bash")
        .arg(script())
        .arg("stop")
        .env("QUICKSTART_DIR", &dir)
        .output()
        .expect("stop runs");
    assert!(stopped.status.success(), "{stopped:?}");
    assert!(!dir.join("server.pid").exists() && !dir.join("host.pid").exists());
}
