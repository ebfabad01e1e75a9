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
//! passkey step-up, types a canary and `id -un`, checks that `stty size`
//! follows the viewport, that OSC 52, OSC 8 and a title query never reach
//! the page, `exit 7`, the mobile layout's extra-keys bar with Ctrl+C, and
//! that no CSP violation was reported. Screenshots go to the folder the
//! test prints.

#[path = "../../server/tests/hosts_common/mod.rs"]
mod hosts_common;
#[path = "../../server/tests/identity_common/mod.rs"]
mod identity_common;
#[path = "../../server/tests/support/mod.rs"]
#[allow(unused_macros, unused_imports)]
mod support;
#[path = "../../server/tests/terminal_common/mod.rs"]
mod terminal_common;
#[path = "../../host/tests/support/users.rs"]
#[allow(dead_code)]
mod users;

#[path = "../../host/tests/e2e_common/mod.rs"]
mod e2e_common;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use bothy_server::clock::Clock;
use bothy_server::db::Engine;
use e2e_common::{Options, Scenario};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_enrolls_logs_in_and_runs_a_shell_in_chromium() {
    let scenario = Scenario::start(Engine::Sqlite, Options::default()).await;
    let server = &scenario.server;
    let username = scenario.owner.enrolled.username.clone();
    let reset = bothy_server::identity::admin::reset_second_factor(
        server.state.db(),
        server.state.pepper(),
        &server.state.config().auth,
        server.clock.now_ms(),
        &username,
    )
    .await
    .expect("a new enrollment code for the owner");
    let code = reset.issued.code.expose().to_owned();

    let console = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../web/console");
    let shots = std::env::temp_dir().join(format!("bothy-console-e2e-{}", std::process::id()));
    let mut node = Command::new("node")
        .arg("e2e/console.e2e.mjs")
        .current_dir(&console)
        .env("E2E_PORT", server.port.to_string())
        .env("E2E_CA", &server.ca_file)
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
    tokio::task::block_in_place(|| {
        for line in stdout.lines() {
            let line = line.expect("a line from the script");
            println!("console e2e: {line}");
            if let Some(secret) = line.strip_prefix("TOTP_SECRET ") {
                let uri = format!(
                    "otpauth://totp/bothy:{username}?secret={secret}&issuer=bothy&algorithm=SHA1&digits=6&period=30"
                );
                let totp = totp_rs::TOTP::from_url(&uri).expect("the secret the page shows");
                server.clock.advance(identity_common::STEP);
                let seconds = u64::try_from(server.clock.now_ms() / 1000).expect("after 1970");
                writeln!(stdin, "TOTP {}", totp.generate(seconds)).expect("answer");
            } else if line == "USERNAME?" {
                writeln!(stdin, "USERNAME {username}").expect("answer");
            } else if line == "OK" {
                ok = true;
            }
            transcript.push(line);
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
    ] {
        assert!(shots.join(shot).exists(), "{shot}");
    }
}
