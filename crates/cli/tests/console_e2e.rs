//! The web console end to end (issue 19, TM-T26 console parts): the real
//! server in this process, a real `bothy-host` paired and running under
//! `bothy-host supervise` with a real session user (the host harness
//! `e2e_common`), and a real headless Chromium driven by
//! `web/console/e2e/console.e2e.mjs` (playwright-core over CDP, Debian's
//! `/usr/bin/chromium`, a CDP WebAuthn virtual authenticator).
//!
//! The owner of the scene enrolled with the CLI (password and TOTP, no
//! passkey). In the browser the owner first adds a passkey with password and
//! TOTP (D-408; this test computes the codes on the server's manual clock),
//! then logs in with password and passkey, opens a shell with a passkey
//! step-up, types a canary and `id -un`, reloads the tab (a new step-up, the
//! attach replays the canary), checks that `stty size` follows the viewport,
//! that OSC 52, OSC 8 and a title query never reach the page, `exit 7`, the
//! close codes of 13 as sentences (4101 from a replayed message 1, 4104 from a
//! changed one, 4103 from a second browser attaching), a transport message
//! that does not decrypt, a stream cut mid-handshake and malformed JSON
//! answers (a clear message, no working terminal left), the mobile layout's
//! extra-keys bar with Ctrl+C; then this test re-pairs the host and the
//! browser shows the hard warning with both fingerprints, opens nothing
//! without the confirmation and opens with it (audited `pin_changed`,
//! TM-T18); the foreign assignee warning of 8.4 before any step-up; a person
//! whose passkey is gone gets the notice, not a TOTP field; no secret in
//! localStorage, the console log or a URL; logout deletes the pins database
//! and leaves no storage; an owner's reset gives a new enrollment code with
//! which the browser enrolls (password, passkey, TOTP) and logs in; no CSP
//! violation was reported. Screenshots go to the folder the test prints.

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
    let old_fingerprint = host_fingerprint(&scenario).await;

    let console = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../web/console");
    let shots = std::env::temp_dir().join(format!("bothy-console-e2e-{}", std::process::id()));
    let mut node = Command::new("node")
        .arg("e2e/console.e2e.mjs")
        .current_dir(&console)
        .env("E2E_PORT", scenario.server.port.to_string())
        .env("E2E_CA", &scenario.server.ca_file)
        .env("E2E_OWNER", &username)
        .env("E2E_OWNER_PASSWORD", &scenario.owner.enrolled.password)
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
    let runtime = tokio::runtime::Handle::current();
    tokio::task::block_in_place(|| {
        for line in stdout.lines() {
            let line = line.expect("a line from the script");
            // The TOTP secret of this throwaway person stays out of the output.
            match line.split_once(' ') {
                Some(("TOTP_SECRET", _)) => println!("console e2e: TOTP_SECRET (not shown)"),
                _ => println!("console e2e: {line}"),
            }
            let server = &scenario.server;
            let answer = if let Some(secret) = line.strip_prefix("TOTP_SECRET ") {
                let uri = format!(
                    "otpauth://totp/bothy:{username}?secret={secret}&issuer=bothy&algorithm=SHA1&digits=6&period=30"
                );
                let new = totp_rs::TOTP::from_url(&uri).expect("the secret the page shows");
                server.clock.advance(identity_common::STEP);
                let seconds = u64::try_from(server.clock.now_ms() / 1000).expect("after 1970");
                Some(format!("TOTP {}", new.generate(seconds)))
            } else {
                match line.as_str() {
                    "TOTP_NOW?" => Some(format!(
                        "TOTP {}",
                        scenario.owner.enrolled.fresh_code(server)
                    )),
                    "REPAIR?" => {
                        // The owner re-pairs the host (3.3) as the CLI test of
                        // TM-T18 does.
                        runtime.block_on(repair(&mut scenario));
                        Some("REPAIRED".to_owned())
                    }
                    "ASSIGN?" => {
                        let bob = runtime.block_on(identity_common::invite(
                            server,
                            scenario.owner.token(),
                            "bob",
                            "member",
                        ));
                        let change = serde_json::json!({"assigned_user_id": bob.person_id});
                        runtime.block_on(update_host(&scenario, change));
                        Some("ASSIGNED".to_owned())
                    }
                    "UNASSIGN?" => {
                        let change = serde_json::json!({"clear_assigned_user": true});
                        runtime.block_on(update_host(&scenario, change));
                        Some("UNASSIGNED".to_owned())
                    }
                    "NO_PASSKEY?" => {
                        // The person's passkeys are gone (as after a removal);
                        // the console login session stays.
                        runtime
                            .block_on(
                                sqlx::query("DELETE FROM passkeys WHERE person_id = $1")
                                    .bind(&person_id)
                                    .execute(server.state.db().pool()),
                            )
                            .expect("delete the passkeys");
                        Some("GONE".to_owned())
                    }
                    "CODE?" => {
                        let reset = runtime
                            .block_on(bothy_server::identity::admin::reset_second_factor(
                                server.state.db(),
                                server.state.pepper(),
                                &server.state.config().auth,
                                server.clock.now_ms(),
                                &username,
                            ))
                            .expect("a new enrollment code for the owner");
                        Some(format!("CODE {}", reset.issued.code.expose()))
                    }
                    "OK" => {
                        ok = true;
                        None
                    }
                    _ => None,
                }
            };
            if let Some(answer) = answer {
                writeln!(stdin, "{answer}").expect("answer");
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
        "passkey-added.png",
        "login.png",
        "hosts.png",
        "session-desktop.png",
        "session-mobile.png",
        "pin-changed.png",
        "close-4104.png",
        "close-4103.png",
        "foreign-assignee.png",
        "no-passkey.png",
    ] {
        assert!(shots.join(shot).exists(), "{shot}");
    }
    assert_ne!(host_fingerprint(&scenario).await, old_fingerprint);
    // The audit of the openings: the one after the confirmed key change says
    // pin_changed = true, the next one (the new pin) false.
    let opens = identity_common::audit_of(&scenario.server, "terminal.open", "allow").await;
    let flags: Vec<bool> = opens
        .iter()
        .map(|row| row.details["pin_changed"].as_bool().unwrap_or(false))
        .collect();
    assert_eq!(flags.iter().filter(|f| **f).count(), 1, "{flags:?}");
    let changed = flags.iter().position(|f| *f).expect("one pin_changed");
    assert_eq!(flags.get(changed + 1), Some(&false), "{flags:?}");
    // The passkey came through the first-passkey routes, audited.
    let added: Vec<_> = identity_common::audit_of(&scenario.server, "auth.enroll", "allow")
        .await
        .into_iter()
        .filter(|row| row.details["operation"] == "passkey_register_first")
        .collect();
    assert_eq!(added.len(), 1);
    assert_eq!(added[0].actor_id.as_deref(), Some(person_id.as_str()));
}

/// PATCH the host with a fresh TOTP step-up of the owner's CLI session.
async fn update_host(scenario: &Scenario, mut change: serde_json::Value) {
    let server = &scenario.server;
    let version: i64 = sqlx::query_scalar("SELECT version FROM hosts WHERE id = $1")
        .bind(&scenario.host_id)
        .fetch_one(server.state.db().pool())
        .await
        .expect("the host's version");
    change["reason"] = serde_json::json!("console test");
    change["step_up_id"] = serde_json::json!(hosts_common::step_up(server, &scenario.owner).await);
    let tag = format!("\"{version}\"");
    let reply = hosts_common::send(
        server,
        reqwest::Method::PATCH,
        &format!("/api/v1/hosts/{}", scenario.host_id),
        Some(scenario.owner.token()),
        Some(&change),
        &[("if-match", tag.as_str())],
    )
    .await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
}

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
async fn repair(scenario: &mut Scenario) {
    let owner = &scenario.owner;
    let code = hosts_common::new_pairing_code(&scenario.server, owner, &scenario.host_id).await;
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
        &scenario.owner,
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
