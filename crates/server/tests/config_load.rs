//! `Config::load` from real files: defaults, file plus `BOTHY_` overrides, the
//! refusals of unreadable files, and the redacted output read back from a file
//! (what `bothy-server config check` prints is itself a valid configuration).

use std::io::Write as _;
use std::path::Path;
use std::time::Duration;

use bothy_server::config::{ClusterMode, Config, ConfigError, DatabaseEngine, Tls, env_var_for};

const CANARY: &str = "s3cr3t-canary";

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn file(text: &str) -> std::io::Result<tempfile::NamedTempFile> {
    let mut f = tempfile::NamedTempFile::new()?;
    f.write_all(text.as_bytes())?;
    f.flush()?;
    Ok(f)
}

fn assert_no_canary(e: &ConfigError) {
    assert!(!e.to_string().contains(CANARY), "{e}");
    assert!(!format!("{e:?}").contains(CANARY), "{e:?}");
}

#[test]
fn no_file_is_every_default() {
    assert_eq!(Config::load(None, env(&[])).unwrap(), Config::default());
    let empty = file("").unwrap();
    assert_eq!(
        Config::load(Some(empty.path()), env(&[])).unwrap(),
        Config::default()
    );
}

#[test]
fn file_and_environment() {
    let f = file(
        "# bothy-server\n\
         server:\n  data_dir: /srv/bothy\n  tls: off\n\
         terminal:\n  pairing_code_ttl: 10m\n  max_sessions_per_person: 2\n",
    )
    .unwrap();
    let c = Config::load(
        Some(f.path()),
        env(&[
            ("BOTHY_TERMINAL__PAIRING_CODE_TTL", "20m"),
            (
                "BOTHY_DATABASE__URL",
                "postgres://bothy:s3cr3t-canary@db/bothy",
            ),
            ("BOTHY_CLUSTER__MODE", "multi"),
            ("BOTHY_CONFIG", "/somewhere/else.yaml"),
            ("BOTHY_LOG", "info"),
        ]),
    )
    .unwrap();
    assert_eq!(c.terminal.pairing_code_ttl, Duration::from_secs(20 * 60));
    assert_eq!(c.terminal.max_sessions_per_person, 2);
    assert_eq!(c.server.tls, Tls::Off);
    assert_eq!(c.cluster.mode, ClusterMode::Multi);
    assert_eq!(c.database_url().engine(), DatabaseEngine::Postgres);
    assert_eq!(c.token_pepper_path(), Path::new("/srv/bothy/token_pepper"));
    assert!(!format!("{c:?}").contains(CANARY));
    assert!(!c.to_redacted_yaml().contains(CANARY));
    assert_eq!(
        env_var_for("terminal.pairing_code_ttl"),
        "BOTHY_TERMINAL__PAIRING_CODE_TTL"
    );
}

#[test]
fn refusals_from_files_name_keys_not_values() {
    let f = file("terminal:\n  idle_timeout: s3cr3t-canary\n").unwrap();
    let e = Config::load(Some(f.path()), env(&[])).unwrap_err();
    assert_eq!(e.key(), Some("terminal.idle_timeout"));
    assert_no_canary(&e);

    let f =
        file("database:\n  url: postgres://u:s3cr3t-canary@db/x\n  url: sqlite:///x\n").unwrap();
    let e = Config::load(Some(f.path()), env(&[])).unwrap_err();
    assert!(
        matches!(&e, ConfigError::DuplicateKey { key, .. } if key == "database.url"),
        "{e}"
    );
    assert_no_canary(&e);

    let f = file("").unwrap();
    let e = Config::load(Some(f.path()), env(&[("BOTHY_NOPE", CANARY)])).unwrap_err();
    assert!(
        matches!(&e, ConfigError::UnknownEnvVar { var } if var == "BOTHY_NOPE"),
        "{e}"
    );
    assert_no_canary(&e);
}

#[test]
fn unreadable_files() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("server.yaml");
    let e = Config::load(Some(&missing), env(&[])).unwrap_err();
    assert!(
        matches!(&e, ConfigError::Read { path, .. } if path == &missing),
        "{e}"
    );
    assert!(e.to_string().contains("server.yaml"), "{e}");

    let big = file(&format!("# {}\n", "x".repeat(1 << 20))).unwrap();
    let e = Config::load(Some(big.path()), env(&[])).unwrap_err();
    assert!(e.to_string().contains("larger than 1 MiB"), "{e}");

    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(b"terminal:\n  open_timeout: \"\xff\"\n")
        .unwrap();
    let e = Config::load(Some(f.path()), env(&[])).unwrap_err();
    assert!(
        matches!(e, ConfigError::Syntax { location: None, .. }),
        "{e}"
    );
}

#[test]
fn redacted_output_is_a_configuration() {
    let f = file(
        "server:\n  listen: 127.0.0.1:0\n  tls:\n    cert_file: /etc/bothy/cert.pem\n    key_file: /etc/bothy/key.pem\n\
         terminal:\n  detach_grace: 2h 30m\n  relay_stall_timeout: 1s 500ms\n",
    ).unwrap();
    let c = Config::load(Some(f.path()), env(&[])).unwrap();
    let out = file(&c.to_redacted_yaml()).unwrap();
    assert_eq!(Config::load(Some(out.path()), env(&[])).unwrap(), c);

    // The defaults round-trip too.
    let out = file(&Config::default().to_redacted_yaml()).unwrap();
    assert_eq!(
        Config::load(Some(out.path()), env(&[])).unwrap(),
        Config::default()
    );
}
