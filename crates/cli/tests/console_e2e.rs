//! The web console end to end (issue 19, TM-T26 console parts): the real
//! server in this process, a real `bothy-host` paired and running under
//! `bothy-host supervise` with a real session user (the host harness
//! `e2e_common`), and a real headless Chromium driven by
//! `web/console/e2e/console.e2e.mjs` (playwright-core over CDP, Debian's
//! `/usr/bin/chromium`, a CDP WebAuthn virtual authenticator).
//!
//! The owner of the scene enrolled with TOTP only; an owner's reset gives a
//! new enrollment code (D-405), with which the browser enrolls: password,
//! passkey, TOTP (this test computes the code on the server's manual clock).
//! Then the browser logs in with password and passkey, opens a shell with a
//! passkey step-up, types a canary and `id -un`, reloads the tab (a new
//! step-up, the attach replays the canary), checks that `stty size` follows
//! the viewport, that OSC 52, OSC 8 and a title query never reach the page,
//! `exit 7`, the mobile layout's extra-keys bar with Ctrl+C; then this test
//! re-pairs the host and the browser shows the hard warning with both
//! fingerprints, opens nothing without the confirmation and opens with it
//! (audited `pin_changed`, TM-T18); logout deletes the pins database and
//! leaves no storage; no CSP violation was reported. Screenshots go to the
//! folder the test prints.

use bothy_testkit::hosts as hosts_common;
use bothy_testkit::identity as identity_common;
use bothy_testkit::scenario as e2e_common;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use bothy_server::clock::Clock;
use bothy_server::db::Engine;
use e2e_common::{Options, Scenario};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_enrolls_logs_in_and_runs_a_shell_in_chromium() {
    let mut scenario = Scenario::start(Engine::Sqlite, Options::default()).await;
    let username = scenario.owner.enrolled.username.clone();
    let person_id = scenario.owner.enrolled.person_id.clone();
    let reset = {
        let server = &scenario.server;
        bothy_server::identity::admin::reset_second_factor(
            server.state.db(),
            server.state.pepper(),
            &server.state.config().auth,
            server.clock.now_ms(),
            &username,
        )
        .await
        .expect("a new enrollment code for the owner")
    };
    let code = reset.issued.code.expose().to_owned();
    let old_fingerprint = host_fingerprint(&scenario).await;

    let console = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../web/console");
    let shots = std::env::temp_dir().join(format!("bothy-console-e2e-{}", std::process::id()));
    let mut node = Command::new("node")
        .arg("e2e/console.e2e.mjs")
        .current_dir(&console)
        .env("E2E_PORT", scenario.server.port.to_string())
        .env("E2E_CA", &scenario.server.ca_file)
        .env("E2E_CODE", &code)
        .env("E2E_SESSION_USER", &scenario.users[0].name)
        .env("E2E_SCREENSHOTS", &shots)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("node runs (npm ci in web/console first)");
    let mut stdin = node.stdin.take().expect("stdin");
    let stdout = BufReader::new(node.stdout.take().expect("stdout"));
    let mut ok = false;
    let mut transcript = Vec::new();
    let mut totp: Option<totp_rs::TOTP> = None;
    let runtime = tokio::runtime::Handle::current();
    tokio::task::block_in_place(|| {
        for line in stdout.lines() {
            let line = line.expect("a line from the script");
            // The TOTP secret of this throwaway person stays out of the output.
            match line.split_once(' ') {
                Some(("TOTP_SECRET", _)) => println!("console e2e: TOTP_SECRET (not shown)"),
                _ => println!("console e2e: {line}"),
            }
            if let Some(secret) = line.strip_prefix("TOTP_SECRET ") {
                let uri = format!(
                    "otpauth://totp/bothy:{username}?secret={secret}&issuer=bothy&algorithm=SHA1&digits=6&period=30"
                );
                let new = totp_rs::TOTP::from_url(&uri).expect("the secret the page shows");
                scenario.server.clock.advance(identity_common::STEP);
                let seconds =
                    u64::try_from(scenario.server.clock.now_ms() / 1000).expect("after 1970");
                writeln!(stdin, "TOTP {}", new.generate(seconds)).expect("answer");
                totp = Some(new);
            } else if line == "USERNAME?" {
                writeln!(stdin, "USERNAME {username}").expect("answer");
            } else if line == "REPAIR?" {
                // The owner, now with the console's password and the new TOTP
                // secret, re-pairs the host (3.3) as the CLI test of TM-T18 does.
                let enrolled = identity_common::Enrolled {
                    username: username.clone(),
                    password: PASSWORD.to_owned(),
                    person_id: person_id.clone(),
                    otpauth_uri: String::new(),
                    totp: totp.clone().expect("enrolled before"),
                };
                runtime.block_on(repair(&mut scenario, enrolled));
                writeln!(stdin, "REPAIRED").expect("answer");
            } else if line == "OK" {
                ok = true;
            }
            if line.starts_with("TOTP_SECRET ") {
                transcript.push("TOTP_SECRET (not shown)".to_owned());
            } else {
                transcript.push(line);
            }
        }
    });
    let status = node.wait().expect("node ends");
    assert!(
        ok && status.success(),
        "the browser run failed ({status}):\n{}\nservice log:\n{}",
        transcript.join("\n"),
        scenario.log()
    );
    println!("console e2e: screenshots in {}", shots.display());
    for shot in [
        "login.png",
        "hosts.png",
        "session-desktop.png",
        "session-mobile.png",
        "pin-changed.png",
    ] {
        assert!(shots.join(shot).exists(), "{shot}");
    }
    assert_ne!(host_fingerprint(&scenario).await, old_fingerprint);
    // The audit of the openings: the one after the confirmed key change says
    // pin_changed = true, the one after it (the new pin) false.
    let opens = identity_common::audit_of(&scenario.server, "terminal.open", "allow").await;
    let flags: Vec<bool> = opens
        .iter()
        .map(|row| row.details["pin_changed"].as_bool().unwrap_or(false))
        .collect();
    assert_eq!(flags.iter().filter(|f| **f).count(), 1, "{flags:?}");
    assert_eq!(flags.last(), Some(&false), "{flags:?}");
    assert_eq!(flags.get(flags.len() - 2), Some(&true), "{flags:?}");
}

const PASSWORD: &str = "a console password 2026";

async fn host_fingerprint(scenario: &Scenario) -> String {
    let row: (Option<String>,) = sqlx::query_as("SELECT key_fingerprint FROM hosts WHERE id = $1")
        .bind(&scenario.host_id)
        .fetch_one(scenario.server.state.db().pool())
        .await
        .expect("the host row");
    row.0.expect("a paired host")
}

/// A new pairing code, `bothy-host pair` with new keys, confirmHost, the
/// service started again.
async fn repair(scenario: &mut Scenario, enrolled: identity_common::Enrolled) {
    let session = enrolled.login(&scenario.server, 21).await;
    let owner = hosts_common::Person { enrolled, session };
    let code = hosts_common::new_pairing_code(&scenario.server, &owner, &scenario.host_id).await;
    scenario.wait_log("status=78").await;
    scenario.stop_service();
    let paired = Command::new(e2e_common::bothy_host())
        .arg("--config")
        .arg(&scenario.config_path)
        .args(["pair", "--server", &scenario.server.base, "--code", &code])
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("SSL_CERT_FILE", scenario.dir.path.join("ca.pem"))
        .output()
        .expect("bothy-host pair runs");
    let stdout = String::from_utf8_lossy(&paired.stdout).into_owned();
    assert!(paired.status.success(), "pair: {stdout}");
    let fingerprint = stdout
        .lines()
        .map(str::trim)
        .find(|line| line.len() == 64 && line.matches('-').count() == 12)
        .expect("the fingerprint")
        .to_owned();
    let prefix: String = fingerprint.chars().filter(|c| *c != '-').take(8).collect();
    let confirmed = hosts_common::confirm(
        &scenario.server,
        &owner,
        &scenario.host_id,
        &prefix,
        "none",
        None,
        false,
        &[],
    )
    .await;
    assert_eq!(confirmed.status, 200, "{:?}", confirmed.body);
    scenario.start_service();
    scenario.wait_connected().await;
}
