//! `bothy-server admin ...` through the real binary (`env_clear`, a temporary
//! data directory with the embedded SQLite default): bootstrap prints a code
//! and the next step, refuses a second owner; the printed code enrolls on a
//! server over the same data directory (the pepper is shared); reset of the
//! second factor, while that server runs, and disable, which refuses the last
//! active owner.

#![allow(clippy::unwrap_used)] // test bodies are plain fns called by the generated #[test]s

// Only the client that trusts the server's CA is used here.
use bothy_testkit as support;

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Output};
use std::sync::Arc;

use bothy_server::app::App;
use bothy_server::clock::SystemClock;
use bothy_server::config::Config;
use serde_json::{Value, json};
use tokio::net::TcpListener;

fn admin(data_dir: &std::path::Path, args: &[&str]) -> Output {
    let home = tempfile::tempdir().unwrap();
    Command::new(env!("CARGO_BIN_EXE_bothy-server"))
        .arg("admin")
        .args(args)
        .env_clear()
        .env("HOME", home.path())
        .env("BOTHY_SERVER__DATA_DIR", data_dir)
        .env("BOTHY_SERVER__PUBLIC_URL", "https://bothy.example")
        .output()
        .expect("run bothy-server")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The one `bothy_ec_...` word of the output.
fn code_in(stdout: &str) -> String {
    let codes: Vec<&str> = stdout
        .split_whitespace()
        .filter(|word| word.starts_with("bothy_ec_"))
        .collect();
    assert_eq!(codes.len(), 1, "{stdout}");
    assert_eq!(codes[0].len(), 9 + 43);
    codes[0].to_owned()
}

/// Asserts `out` is the refusal of a change to alice, the last active owner
/// (docs/decisions.md D-86, D-301): exit 1, nothing printed to stdout.
fn refused_as_the_last_owner(out: &Output) {
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("\"alice\" is the last active owner"),
        "{stderr}"
    );
    assert!(stderr.contains("Nothing changed"), "{stderr}");
    assert!(text(&out.stdout).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_commands_through_the_binary() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");

    let out = admin(&data_dir, &["bootstrap", "--username", "Alice"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        stdout.starts_with("Created the owner alice (person "),
        "{stdout}"
    );
    assert!(
        stdout.contains("shown only now, single use, valid until"),
        "{stdout}"
    );
    assert!(
        stdout.contains("POST https://bothy.example/api/v1/auth/enroll with"),
        "{stdout}"
    );
    assert!(stdout.contains("/api/v1/auth/enroll/confirm"), "{stdout}");
    assert!(
        stdout.contains("bothy enroll --server https://bothy.example"),
        "the client's way first: {stdout}"
    );
    let code = code_in(&stdout);
    let pepper = data_dir.join("token_pepper");
    let mode = std::fs::metadata(&pepper).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    assert!(
        !text(&out.stderr).contains(&code),
        "the code goes to stdout only"
    );

    // Bootstrap runs once.
    let out = admin(&data_dir, &["bootstrap", "--username", "eve"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("an owner exists already"), "{stderr}");
    assert!(stderr.contains("reset-second-factor"), "{stderr}");
    assert!(text(&out.stdout).is_empty());

    // The printed code enrolls on a server over the same data directory.
    let yaml = format!(
        "server:\n  listen: 127.0.0.1:0\n  public_url: https://localhost\n  data_dir: \"{}\"\n",
        data_dir.display()
    );
    let config = Config::from_yaml_str(&yaml).unwrap();
    let app = App::open(config, Arc::new(SystemClock)).await.unwrap();
    let client = support::server::client_trusting(app.ca_file().unwrap());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!(
        "https://localhost:{}",
        listener.local_addr().unwrap().port()
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(app.serve(listener, async {
        let _ = stopped.await;
    }));
    let enroll = |path: &'static str, body: Value| {
        let (client, base) = (client.clone(), base.clone());
        async move {
            let reply = client
                .post(format!("{base}{path}"))
                .json(&body)
                .send()
                .await
                .unwrap();
            (reply.status(), reply.json::<Value>().await.unwrap())
        }
    };
    let (status, started) = enroll(
        "/api/v1/auth/enroll",
        json!({"code": code, "password": "correct horse battery staple"}),
    )
    .await;
    assert_eq!(status, 200, "{started}");
    let totp = totp_rs::TOTP::from_url(started["otpauth_uri"].as_str().unwrap()).unwrap();
    let (status, confirmed) = enroll(
        "/api/v1/auth/enroll/confirm",
        json!({"code": code, "totp": totp.generate_current().unwrap()}),
    )
    .await;
    assert_eq!(status, 200, "{confirmed}");
    assert_eq!(confirmed["username"], "alice");

    // While the server runs: reset, then disable.
    let out = admin(&data_dir, &["reset-second-factor", "--username", "ALICE"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        stdout.starts_with("Removed the TOTP credential of alice and ended 0 login session(s)."),
        "{stdout}"
    );
    let new_code = code_in(&stdout);
    assert_ne!(new_code, code);
    // alice is the last active owner: disable refuses her (docs/decisions.md
    // D-301) and nothing changes, so the new code enrolls. (Disabling through
    // the binary: permissions.rs; a disabled person's code: terminal_revocation.rs.)
    refused_as_the_last_owner(&admin(&data_dir, &["disable", "--username", "alice"]));
    let (status, started) = enroll(
        "/api/v1/auth/enroll",
        json!({"code": new_code, "password": "correct horse battery staple"}),
    )
    .await;
    assert_eq!(status, 200, "{started}");

    for (args, message) in [
        (
            &["disable", "--username", "nobody"][..],
            "no person has the username \"nobody\"",
        ),
        (
            &["bootstrap", "--username", "bad name"][..],
            "is not a valid username",
        ),
    ] {
        let out = admin(&data_dir, args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let stderr = text(&out.stderr);
        assert!(stderr.contains(message), "{args:?}: {stderr}");
    }

    let _ = stop.send(());
    server.await.unwrap().unwrap();
}

/// `admin set-role` (docs/decisions.md D-86): the last active owner keeps the
/// role, the same role changes nothing, an unknown person and an unknown role
/// are refused.
#[test]
fn set_role_through_the_binary() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    let out = admin(&data_dir, &["bootstrap", "--username", "alice"]);
    assert!(out.status.success(), "{}", text(&out.stderr));

    refused_as_the_last_owner(&admin(
        &data_dir,
        &["set-role", "--username", "alice", "--role", "member"],
    ));
    let out = admin(
        &data_dir,
        &["set-role", "--username", "ALICE", "--role", "owner"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "Already owner: alice.\n");
    let out = admin(
        &data_dir,
        &["set-role", "--username", "nobody", "--role", "owner"],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("no person has the username \"nobody\""),
        "{}",
        text(&out.stderr)
    );
    let out = admin(
        &data_dir,
        &["set-role", "--username", "alice", "--role", "admin"],
    );
    assert_eq!(out.status.code(), Some(2), "a usage error");
}
