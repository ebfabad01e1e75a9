//! The `bothy-server` binary: `config check` prints the effective configuration
//! with secrets redacted and exits 0; an invalid configuration exits 78 naming
//! the key and never the value; `migrate` migrates the SQLite default.

#![allow(clippy::unwrap_used)] // test bodies are plain fns called by the generated #[test]s

use std::process::{Command, Output};

fn bothy_server(args: &[&str], envs: &[(&str, &str)]) -> Output {
    let home = tempfile::tempdir().unwrap();
    Command::new(env!("CARGO_BIN_EXE_bothy-server"))
        .args(args)
        .env_clear()
        .env("HOME", home.path())
        .envs(envs.iter().copied())
        .output()
        .expect("run bothy-server")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn config_check_prints_the_effective_configuration_redacted() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.yaml");
    std::fs::write(
        &file,
        "database:\n  url: postgres://bothy:pw-canary-1@db.example/bothy\nterminal:\n  idle_timeout: 45m\n",
    )
    .unwrap();
    let out = bothy_server(
        &["--config", file.to_str().unwrap(), "config", "check"],
        &[],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("45m"), "{stdout}");
    assert!(
        stdout.contains("pairing_code_ttl"),
        "every key is printed: {stdout}"
    );
    assert!(
        !stdout.contains("pw-canary-1"),
        "password redacted: {stdout}"
    );
}

#[test]
fn invalid_configuration_exits_78_naming_the_key_not_the_value() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.yaml");
    std::fs::write(&file, "terminal:\n  idle_timeout: canary-value-77\n").unwrap();
    let out = bothy_server(
        &["--config", file.to_str().unwrap(), "config", "check"],
        &[],
    );
    assert_eq!(out.status.code(), Some(78));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("terminal.idle_timeout"), "{stderr}");
    assert!(!stderr.contains("canary-value-77"), "{stderr}");

    let out = bothy_server(
        &["config", "check"],
        &[("BOTHY_TERMINAL__NO_SUCH_KEY", "canary-value-78")],
    );
    assert_eq!(out.status.code(), Some(78));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("BOTHY_TERMINAL__NO_SUCH_KEY"), "{stderr}");
    assert!(!stderr.contains("canary-value-78"), "{stderr}");
}

#[test]
fn migrate_creates_the_sqlite_default_in_the_data_dir() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    std::fs::create_dir(&data_dir).unwrap();
    let out = bothy_server(
        &["migrate"],
        &[("BOTHY_SERVER__DATA_DIR", data_dir.to_str().unwrap())],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(data_dir.join("bothy.sqlite").is_file());
    // Again: a no-op that still succeeds.
    let out = bothy_server(
        &["migrate"],
        &[("BOTHY_SERVER__DATA_DIR", data_dir.to_str().unwrap())],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn unknown_command_is_a_usage_error() {
    let out = bothy_server(&["no-such-command"], &[]);
    assert_eq!(out.status.code(), Some(2));
}

/// A newcomer's first start: `serve` on the SQLite default in an empty data
/// directory creates the database, the CA and the pepper, listens, says
/// how to bootstrap the first owner, and stops cleanly on SIGTERM.
#[test]
fn serve_on_the_sqlite_default_tells_how_to_bootstrap_and_stops_on_sigterm() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    use std::sync::mpsc;
    use std::time::Duration;

    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    let mut child = Command::new(env!("CARGO_BIN_EXE_bothy-server"))
        .arg("serve")
        .env_clear()
        .env("HOME", dir.path())
        .env("BOTHY_SERVER__DATA_DIR", &data_dir)
        .env("BOTHY_SERVER__LISTEN", "127.0.0.1:0")
        .env("BOTHY_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (lines_tx, lines) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    let mut address = None;
    let mut told_bootstrap = false;
    while !(told_bootstrap && address.is_some()) {
        // A safety net against a hang, not a timing assumption.
        let line = lines
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| {
                let _ = child.kill();
                panic!("serve did not start: {seen:#?}")
            });
        if line.contains("listening") {
            address = line
                .split_whitespace()
                .find_map(|w| w.strip_prefix("address="))
                .map(str::to_owned);
        }
        told_bootstrap |= line.contains("admin bootstrap --username NAME");
        seen.push(line);
    }
    assert!(data_dir.join("bothy.sqlite").is_file());
    assert!(data_dir.join("tls/ca.pem").is_file());
    assert!(data_dir.join("token_pepper").is_file());

    // SIGTERM: a clean stop with exit status 0.
    let pid = child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}: {seen:#?}");
    let rest: Vec<String> = lines.try_iter().collect();
    assert!(rest.iter().any(|l| l.contains("stopped")), "{rest:#?}");
}
