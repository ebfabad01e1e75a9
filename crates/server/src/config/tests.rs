//! Unit tests of the whole decoding: defaults, every kind of refusal (named by
//! key, never carrying the value), environment overrides, redacted output.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};

use super::*;

const CANARY: &str = "s3cr3t-canary";

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// The refusal of `yaml` with `env`; neither its message nor its `Debug` may
/// carry the canary.
fn refused_with_env(yaml: &str, vars: &[(&str, &str)]) -> ConfigError {
    let error = match Config::from_yaml_str_with_env(yaml, env(vars)) {
        Ok(config) => panic!("accepted: {config:?}"),
        Err(error) => error,
    };
    let shown = error.to_string();
    let debug = format!("{error:?}");
    assert!(!shown.contains("s3cr3t"), "value in message: {shown}");
    assert!(!debug.contains("s3cr3t"), "value in Debug: {debug}");
    error
}

fn refused(yaml: &str) -> ConfigError {
    refused_with_env(yaml, &[])
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// The value at a dotted key of a parsed document.
fn at<'a>(document: &'a Value, dotted_key: &str) -> Option<&'a Value> {
    dotted_key
        .split('.')
        .try_fold(document, |v, name| v.as_object()?.get(name))
}

#[test]
fn empty_file_is_every_default() {
    for text in ["", "\n", "# nothing set\n", "---\n", "{}\n"] {
        assert_eq!(
            Config::from_yaml_str(text).unwrap(),
            Config::default(),
            "{text:?}"
        );
    }
    let c = Config::from_yaml_str("").unwrap();
    assert_eq!(c.server.listen.to_string(), "0.0.0.0:8443");
    assert_eq!(c.server.public_url.as_str(), "https://localhost:8443");
    assert_eq!(c.server.data_dir, PathBuf::from("/var/lib/bothy-server"));
    assert_eq!(c.server.tls, Tls::Auto);
    assert_eq!(c.database.url, None);
    assert_eq!(
        c.database_url().expose(),
        "sqlite:///var/lib/bothy-server/bothy.sqlite"
    );
    assert_eq!(c.database_url().engine(), DatabaseEngine::Sqlite);
    assert_eq!(c.database.tx_retry_max, 3);
    assert_eq!(c.database.listen_reconnect_backoff_cap, secs(30));
    assert_eq!(c.cluster.mode, ClusterMode::Single);
    assert_eq!(c.auth.clock_leeway, secs(30));
    assert_eq!(
        c.token_pepper_path(),
        PathBuf::from("/var/lib/bothy-server/token_pepper")
    );
    assert_eq!(c.auth.login_session_ttl, secs(12 * 3600));
    assert_eq!(c.auth.enrollment_code_ttl, secs(24 * 3600));
    assert_eq!(c.auth.totp_step, secs(30));
    assert_eq!(c.auth.totp_skew_steps, 1);
    let t = &c.terminal;
    assert_eq!(t.pairing_code_ttl, secs(15 * 60));
    assert_eq!(t.fingerprint_confirm_chars, 8);
    assert_eq!(t.fingerprint_max_attempts, 3);
    assert_eq!(t.session_token_ttl, secs(30));
    assert_eq!(t.open_timeout, secs(20));
    assert_eq!(t.max_session_duration, secs(12 * 3600));
    assert_eq!(t.max_sessions_per_person, 5);
    assert_eq!(t.max_sessions_per_host, 10);
    assert_eq!(t.relay_buffer_max_bytes, 262_144);
    assert_eq!(t.host_duplicate_probe_timeout, secs(5));
    assert_eq!(c.sync.ws_max_frame_bytes, 65_536);
    assert_eq!(c.sync.outbound_queue_max, 256);
    assert_eq!(c.gateway.write_timeout, secs(10));
    assert_eq!(c.gateway.ping_interval, secs(15));
    assert_eq!(c.gateway.ping_timeout, secs(20));
    assert_eq!(c.identity.last_active_granularity, secs(60));
    assert_eq!(c.host.os_user_max_chars, 32);
    assert_eq!(c.signing_key.cache_ttl, secs(300));
    assert_eq!(c.agent.jwks_max_age, secs(24 * 3600));
    assert_eq!(
        c.rl.public_auth,
        RateLimit {
            burst: 10,
            refill_per_minute: 10
        }
    );
    assert_eq!(c.rl.terminal.burst, 20);
    assert_eq!(c.rl.host.refill_per_minute, 60);
}

/// Every "Server" row of spec 24 section 17, as the table writes it.
#[test]
fn section_17_defaults_as_the_table_writes_them() {
    let table = [
        ("pairing_code_ttl", json!("15m")),
        ("fingerprint_confirm_chars", json!(8)),
        ("fingerprint_max_attempts", json!(3)),
        ("report_label_max_chars", json!(100)),
        ("report_max_entries", json!(64)),
        ("step_up_max_age", json!("60s")),
        ("session_token_ttl", json!("30s")),
        ("open_timeout", json!("20s")),
        ("detach_grace", json!("15m")),
        ("quick_reattach_window", json!("60s")),
        ("idle_timeout", json!("30m")),
        ("idle_grace", json!("2m")),
        ("max_session_duration", json!("12h")),
        ("max_sessions_per_person", json!(5)),
        ("max_sessions_per_host", json!(10)),
        ("relay_buffer_max_bytes", json!(262_144)),
        ("relay_stall_timeout", json!("10s")),
        ("host_heartbeat_interval", json!("20s")),
        ("host_heartbeat_miss_limit", json!(3)),
        ("host_auth_timeout", json!("10s")),
        ("sweep_interval", json!("30s")),
        ("host_duplicate_probe_timeout", json!("5s")),
    ];
    assert_eq!(
        table.len(),
        schema::TERMINAL.len(),
        "every terminal key is in the table"
    );
    // The table, written as a file, is exactly the defaults.
    let mut members = serde_json::Map::new();
    for (name, value) in &table {
        members.insert((*name).to_owned(), value.clone());
    }
    let file = json!({ "terminal": members }).to_string();
    assert_eq!(Config::from_yaml_str(&file).unwrap(), Config::default());
}

#[test]
fn values_are_read() {
    let c = Config::from_yaml_str(
        "server:\n  listen: '[::]:9443'\n  public_url: https://bothy.example.org\n  data_dir: /srv/bothy\n  tls: off\n\
         database:\n  url: postgres://bothy@db/bothy\n  tx_retry_max: 0\n\
         cluster:\n  mode: multi\n\
         auth:\n  clock_leeway: 0s\n  token_pepper_file: /run/secrets/pepper\n  totp_step: 1m\n\
         terminal:\n  pairing_code_ttl: 2h 30m\n  fingerprint_confirm_chars: 52\n  relay_buffer_max_bytes: 1_048_576\n\
         rl:\n  terminal:\n    burst: 3\n",
    )
    .unwrap();
    assert_eq!(c.server.listen.to_string(), "[::]:9443");
    assert_eq!(c.server.public_url.as_str(), "https://bothy.example.org");
    assert_eq!(c.server.tls, Tls::Off);
    assert_eq!(c.database_url().engine(), DatabaseEngine::Postgres);
    assert_eq!(c.database.tx_retry_max, 0);
    assert_eq!(c.cluster.mode, ClusterMode::Multi);
    assert_eq!(c.auth.clock_leeway, Duration::ZERO);
    assert_eq!(c.token_pepper_path(), PathBuf::from("/run/secrets/pepper"));
    assert_eq!(c.auth.totp_step, secs(60));
    assert_eq!(c.terminal.pairing_code_ttl, secs(9000));
    assert_eq!(c.terminal.fingerprint_confirm_chars, 52);
    assert_eq!(c.terminal.relay_buffer_max_bytes, 1 << 20);
    assert_eq!(c.rl.terminal.burst, 3);
    assert_eq!(
        c.rl.terminal.refill_per_minute, 20,
        "the other member keeps its default"
    );
    // The derived defaults follow server.data_dir.
    let c = Config::from_yaml_str("server:\n  data_dir: /srv/b\n").unwrap();
    assert_eq!(c.database_url().expose(), "sqlite:///srv/b/bothy.sqlite");
    assert_eq!(c.token_pepper_path(), PathBuf::from("/srv/b/token_pepper"));
}

#[test]
fn tls_files() {
    let c = Config::from_yaml_str(
        "server:\n  tls:\n    cert_file: /etc/bothy/cert.pem\n    key_file: /etc/bothy/key.pem\n",
    )
    .unwrap();
    assert_eq!(
        c.server.tls,
        Tls::Files {
            cert_file: "/etc/bothy/cert.pem".into(),
            key_file: "/etc/bothy/key.pem".into()
        }
    );
    let e = refused("server:\n  tls:\n    cert_file: /c.pem\n");
    assert!(
        matches!(&e, ConfigError::MissingKey { key } if key == "server.tls.key_file"),
        "{e}"
    );
    let e = refused(
        "server:\n  tls:\n    cert_file: /c.pem\n    key_file: /k.pem\n    password: s3cr3t-canary\n",
    );
    assert!(
        matches!(&e, ConfigError::UnknownKey { key } if key == "server.tls.password"),
        "{e}"
    );
    let e = refused("server:\n  tls:\n    cert_file: ''\n    key_file: /k.pem\n");
    assert_eq!(e.key(), Some("server.tls.cert_file"));
    let e = refused("server:\n  tls: s3cr3t-canary\n");
    assert!(
        matches!(&e, ConfigError::InvalidValue { key, .. } if key == "server.tls"),
        "{e}"
    );
    // YAML 1.1 would read `off` as false; we read YAML 1.2 booleans only.
    assert_eq!(
        Config::from_yaml_str("server: {tls: off}")
            .unwrap()
            .server
            .tls,
        Tls::Off
    );
    assert_eq!(refused("server: {tls: false}").key(), Some("server.tls"));
}

#[test]
fn unknown_keys() {
    let e = refused("terminal:\n  pairing_code_tt: s3cr3t-canary\n");
    assert!(
        matches!(&e, ConfigError::UnknownKey { key } if key == "terminal.pairing_code_tt"),
        "{e}"
    );
    assert_eq!(
        e.to_string(),
        "unknown configuration key terminal.pairing_code_tt"
    );
    let e = refused("termnial:\n  pairing_code_ttl: 15m\n");
    assert!(matches!(&e, ConfigError::UnknownKey { key } if key == "termnial"));
    let e = refused("rl:\n  public_auth:\n    brust: 5\n");
    assert_eq!(e.key(), Some("rl.public_auth.brust"));
    // A flat dotted key is one unknown key of the top level, and shown quoted.
    let e = refused("terminal.pairing_code_ttl: 15m\n");
    assert!(
        matches!(&e, ConfigError::UnknownKey { key } if key == "\"terminal.pairing_code_ttl\""),
        "{e}"
    );
    // A key that is itself the canary is a name, not a value: it is cut and
    // quoted, but named (here we only check the refusal).
    assert!(matches!(
        Config::from_yaml_str("server:\n  s3cr3t: 1\n"),
        Err(ConfigError::UnknownKey { .. })
    ));
}

#[test]
fn duplicate_keys() {
    let e = refused("terminal:\n  open_timeout: 5s\nterminal:\n  open_timeout: s3cr3t-canary\n");
    assert!(
        matches!(&e, ConfigError::DuplicateKey { key, location: Some((3, 1)) } if key == "terminal"),
        "{e}"
    );
    let e =
        refused("terminal:\n  open_timeout: 5s\n  idle_grace: 1m\n  open_timeout: s3cr3t-canary\n");
    assert!(
        matches!(&e, ConfigError::DuplicateKey { key, .. } if key == "terminal.open_timeout"),
        "{e}"
    );
    assert!(
        e.to_string()
            .contains("terminal.open_timeout appears more than once at line 4"),
        "{e}"
    );
    let e = refused("rl:\n  host: {burst: 1, burst: 2}\n");
    assert_eq!(e.key(), Some("rl.host.burst"));
}

#[test]
fn wrong_types() {
    let e = refused("terminal:\n  max_sessions_per_person: \"five s3cr3t-canary\"\n");
    assert!(
        matches!(&e, ConfigError::WrongType { key, expected } if key == "terminal.max_sessions_per_person" && expected == "an integer"),
        "{e}"
    );
    let e = refused("server:\n  tls: 3\n");
    assert!(
        matches!(&e, ConfigError::WrongType { key, .. } if key == "server.tls"),
        "{e}"
    );
    let e = refused("terminal:\n  open_timeout: 20\n");
    assert!(
        matches!(&e, ConfigError::WrongType { key, .. } if key == "terminal.open_timeout"),
        "{e}"
    );
    assert!(e.to_string().contains("a duration string"), "{e}");
    let e = refused("terminal: s3cr3t-canary\n");
    assert!(
        matches!(&e, ConfigError::WrongType { key, expected } if key == "terminal" && expected == "a mapping"),
        "{e}"
    );
    let e = refused("database:\n  url: [s3cr3t-canary]\n");
    assert_eq!(e.key(), Some("database.url"));
    let e = refused("terminal:\n  fingerprint_confirm_chars: 8.5\n");
    assert!(matches!(e, ConfigError::WrongType { .. }));
    let e = refused("- s3cr3t-canary\n");
    assert!(
        matches!(&e, ConfigError::WrongType { key, .. } if key.is_empty()),
        "{e}"
    );
    let e = refused("s3cr3t-canary\n");
    assert!(matches!(e, ConfigError::WrongType { .. }));
}

#[test]
fn null_values() {
    let e = refused("terminal:\n");
    assert!(
        matches!(&e, ConfigError::NullValue { key } if key == "terminal"),
        "{e}"
    );
    let e = refused("terminal:\n  open_timeout: ~\n");
    assert!(
        matches!(&e, ConfigError::NullValue { key } if key == "terminal.open_timeout"),
        "{e}"
    );
}

#[test]
fn bad_durations() {
    for bad in [
        "s3cr3t-canary",
        "0s",
        "-5s",
        "15",
        "5 parsecs s3cr3t-canary",
        "1500us",
        "400d",
        "",
    ] {
        let e = refused(&format!("terminal:\n  pairing_code_ttl: \"{bad}\"\n"));
        assert!(
            matches!(&e, ConfigError::InvalidValue { key, .. } if key == "terminal.pairing_code_ttl"),
            "{bad}: {e}"
        );
    }
    let e = refused("terminal:\n  pairing_code_ttl: s3cr3t-canary\n");
    assert_eq!(
        e.to_string(),
        "invalid value for configuration key terminal.pairing_code_ttl: must be a duration \
         such as \"15m\", from 1ms to 365d, in whole milliseconds"
    );
    // Zero where it means "none".
    let c = Config::from_yaml_str("terminal:\n  quick_reattach_window: 0s\n").unwrap();
    assert_eq!(c.terminal.quick_reattach_window, Duration::ZERO);
    assert_eq!(
        refused("auth:\n  totp_step: 1500ms\n").key(),
        Some("auth.totp_step")
    );
}

#[test]
fn ranges() {
    for bad in ["0", "53", "-1", "99999999999999999999"] {
        let e = refused(&format!("terminal:\n  fingerprint_confirm_chars: {bad}\n"));
        assert_eq!(
            e.key(),
            Some("terminal.fingerprint_confirm_chars"),
            "{bad}: {e}"
        );
    }
    let e = refused("terminal:\n  fingerprint_confirm_chars: 53\n");
    assert_eq!(
        e.to_string(),
        "invalid value for configuration key terminal.fingerprint_confirm_chars: must be an \
         integer from 1 to 52"
    );
    for ok in [1, 52] {
        let c = Config::from_yaml_str(&format!("terminal:\n  fingerprint_confirm_chars: {ok}\n"))
            .unwrap();
        assert_eq!(c.terminal.fingerprint_confirm_chars, ok);
    }
    for (yaml, key) in [
        (
            "terminal: {max_sessions_per_person: 0}",
            "terminal.max_sessions_per_person",
        ),
        (
            "terminal: {relay_buffer_max_bytes: 1000}",
            "terminal.relay_buffer_max_bytes",
        ),
        (
            "rl: {host: {refill_per_minute: 0}}",
            "rl.host.refill_per_minute",
        ),
        ("database: {tx_retry_max: -1}", "database.tx_retry_max"),
        ("host: {os_user_max_chars: 0}", "host.os_user_max_chars"),
    ] {
        assert_eq!(refused(yaml).key(), Some(key), "{yaml}");
    }
}

#[test]
fn invalid_values_never_show_the_value() {
    for (yaml, key) in [
        ("server: {listen: 's3cr3t-canary:80'}", "server.listen"),
        ("server: {listen: 'localhost:8443'}", "server.listen"),
        (
            "server: {public_url: 'https://s3cr3t-canary.example/path'}",
            "server.public_url",
        ),
        (
            "server: {public_url: 'https://user:s3cr3t-canary@example.org'}",
            "server.public_url",
        ),
        (
            "database: {url: 'mysql://bothy:s3cr3t-canary@db/bothy'}",
            "database.url",
        ),
        ("cluster: {mode: s3cr3t-canary}", "cluster.mode"),
        ("server: {data_dir: ''}", "server.data_dir"),
    ] {
        let e = refused(yaml);
        assert!(matches!(e, ConfigError::InvalidValue { .. }), "{yaml}: {e}");
        assert_eq!(e.key(), Some(key), "{yaml}");
    }
}

#[test]
fn multi_needs_postgres() {
    let e = refused("cluster:\n  mode: multi\n");
    assert!(
        matches!(&e, ConfigError::InvalidValue { key, .. } if key == "cluster.mode"),
        "{e}"
    );
    let e = refused("cluster: {mode: multi}\ndatabase: {url: 'sqlite:///srv/b.sqlite'}\n");
    assert_eq!(e.key(), Some("cluster.mode"));
    let c = Config::from_yaml_str(
        "cluster: {mode: multi}\ndatabase: {url: 'postgresql://bothy:s3cr3t-canary@db/bothy'}\n",
    )
    .unwrap();
    assert_eq!(c.cluster.mode, ClusterMode::Multi);
}

#[test]
fn yaml_syntax_errors() {
    let e = refused("terminal:\n  open_timeout: [s3cr3t-canary\n");
    assert!(
        matches!(
            e,
            ConfigError::Syntax {
                location: Some((2, _)),
                ..
            }
        ),
        "{e}"
    );
    let e = refused("terminal:\n  open_timeout: \"s3cr3t-canary\n");
    assert!(
        matches!(
            e,
            ConfigError::Syntax {
                location: Some(_),
                ..
            }
        ),
        "{e}"
    );
    let e = refused("a: b: s3cr3t-canary\n");
    assert!(matches!(e, ConfigError::Syntax { .. }), "{e}");
    assert!(
        e.to_string()
            .starts_with("the configuration is not valid YAML"),
        "{e}"
    );
    let e = refused("terminal: {open_timeout: 5s}\n---\nterminal: {open_timeout: s3cr3t-canary}\n");
    assert!(
        matches!(
            e,
            ConfigError::Syntax {
                reason: "more than one YAML document",
                ..
            }
        ),
        "{e}"
    );
    let e = refused("base: &b {open_timeout: 5s}\nterminal:\n  <<: *b\n");
    assert!(matches!(e, ConfigError::Syntax { .. }), "{e}");
    let e = refused("terminal:\n  open_timeout: !vault s3cr3t-canary\n");
    assert!(matches!(e, ConfigError::Syntax { .. }), "{e}");
    let e = refused("terminal:\n\topen_timeout: 5s\n");
    assert!(matches!(e, ConfigError::Syntax { .. }), "{e}");
}

#[test]
fn env_overrides() {
    let c = Config::from_yaml_str_with_env(
        "terminal:\n  pairing_code_ttl: 5m\n",
        env(&[
            ("BOTHY_TERMINAL__PAIRING_CODE_TTL", "20m"),
            ("BOTHY_TERMINAL__MAX_SESSIONS_PER_HOST", "12"),
            ("BOTHY_SERVER__TLS", "off"),
            (
                "BOTHY_DATABASE__URL",
                "postgres://bothy:s3cr3t-canary@db/bothy",
            ),
            ("BOTHY_CLUSTER__MODE", "multi"),
            ("BOTHY_RL__HOST__BURST", "7"),
            ("BOTHY_CONFIG", "/etc/bothy/server.yaml"),
            ("BOTHY_LOG", "debug"),
            ("PATH", "/usr/bin"),
        ]),
    )
    .unwrap();
    assert_eq!(
        c.terminal.pairing_code_ttl,
        secs(20 * 60),
        "env wins over the file"
    );
    assert_eq!(c.terminal.max_sessions_per_host, 12);
    assert_eq!(c.server.tls, Tls::Off);
    assert_eq!(c.database_url().engine(), DatabaseEngine::Postgres);
    assert_eq!(c.cluster.mode, ClusterMode::Multi);
    assert_eq!(c.rl.host.burst, 7);
    assert!(!format!("{c:?}").contains("s3cr3t"));

    // TLS files from two variables, over `tls: auto` in the file.
    let c = Config::from_yaml_str_with_env(
        "server:\n  tls: auto\n",
        env(&[
            ("BOTHY_SERVER__TLS__CERT_FILE", "/c.pem"),
            ("BOTHY_SERVER__TLS__KEY_FILE", "/k.pem"),
        ]),
    )
    .unwrap();
    assert_eq!(
        c.server.tls,
        Tls::Files {
            cert_file: "/c.pem".into(),
            key_file: "/k.pem".into()
        }
    );
}

#[test]
fn env_refusals_name_the_variable() {
    let e = refused_with_env("", &[("BOTHY_TERMINAL__PAIRING_CODE_TT", CANARY)]);
    assert!(
        matches!(&e, ConfigError::UnknownEnvVar { var } if var == "BOTHY_TERMINAL__PAIRING_CODE_TT"),
        "{e}"
    );
    let e = refused_with_env("", &[("BOTHY_DATABASE_URL", CANARY)]);
    assert!(matches!(e, ConfigError::UnknownEnvVar { .. }), "{e}");

    let e = refused_with_env("", &[("BOTHY_TERMINAL__PAIRING_CODE_TTL", CANARY)]);
    match &e {
        ConfigError::FromEnv { var, error } => {
            assert_eq!(var, "BOTHY_TERMINAL__PAIRING_CODE_TTL");
            assert!(matches!(**error, ConfigError::InvalidValue { .. }));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(e.key(), Some("terminal.pairing_code_ttl"));
    assert!(
        e.to_string()
            .contains("(set by environment variable BOTHY_TERMINAL__PAIRING_CODE_TTL)")
    );

    let e = refused_with_env(
        "",
        &[(
            "BOTHY_TERMINAL__MAX_SESSIONS_PER_PERSON",
            "five-s3cr3t-canary",
        )],
    );
    assert!(
        matches!(&e, ConfigError::FromEnv { error, .. } if matches!(**error, ConfigError::WrongType { .. })),
        "{e}"
    );
    let e = refused_with_env("", &[("BOTHY_DATABASE__URL", "mysql://u:s3cr3t-canary@db")]);
    assert!(matches!(e, ConfigError::FromEnv { .. }), "{e}");
    let e = refused_with_env("", &[("BOTHY_CLUSTER__MODE", "multi")]);
    assert!(
        matches!(&e, ConfigError::FromEnv { var, .. } if var == "BOTHY_CLUSTER__MODE"),
        "{e}"
    );
    // A refusal of the file's own value is not blamed on a variable.
    let e = refused_with_env(
        "terminal: {open_timeout: s3cr3t-canary}",
        &[("BOTHY_TERMINAL__IDLE_GRACE", "1m")],
    );
    assert!(matches!(e, ConfigError::InvalidValue { .. }), "{e}");
}

#[test]
fn redacted_output_hides_the_password() {
    let c = Config::from_yaml_str(
        "database:\n  url: 'postgres://bothy:s3cr3t-canary@db:5432/bothy?sslmode=require&password=s3cr3t-canary'\n",
    )
    .unwrap();
    let out = c.to_redacted_yaml();
    assert!(!out.contains("s3cr3t"), "{out}");
    assert!(
        out.contains("url: \"postgres://bothy:***@db:5432/bothy?sslmode=require&password=***\""),
        "{out}"
    );
    assert!(!format!("{c:?}").contains("s3cr3t"));
    assert!(!format!("{:?}", c.database_url()).contains("s3cr3t"));
    assert!(
        c.database_url().expose().contains(CANARY),
        "the driver gets the password"
    );
}

#[test]
fn redacted_output_of_the_defaults() {
    let out = Config::default().to_redacted_yaml();
    for line in [
        "server:\n  listen: \"0.0.0.0:8443\"\n  public_url: \"https://localhost:8443\"\n  data_dir: \"/var/lib/bothy-server\"\n  tls: \"auto\"\n",
        "  # url: \"sqlite:///var/lib/bothy-server/bothy.sqlite\"  (not set: the default from server.data_dir)\n",
        "  # token_pepper_file: \"/var/lib/bothy-server/token_pepper\"  (not set: the default from server.data_dir)\n",
        "  pairing_code_ttl: 15m\n",
        "  step_up_max_age: 60s\n",
        "  max_session_duration: 12h\n",
        "  enrollment_code_ttl: 24h\n",
        "  relay_buffer_max_bytes: 262144\n",
        "rl:\n  public_auth:\n    burst: 10\n    refill_per_minute: 10\n",
    ] {
        assert!(out.contains(line), "{line:?} not in:\n{out}");
    }
    // Round trip: reading the output back gives the defaults.
    assert_eq!(Config::from_yaml_str(&out).unwrap(), Config::default());
}

/// A configuration in which every key differs from its default.
fn everything_changed() -> Config {
    Config::from_yaml_str(
        "server:\n  listen: 127.0.0.1:0\n  public_url: http://10.0.0.1:8080\n  data_dir: /srv/b\n  tls: {cert_file: /c.pem, key_file: /k.pem}\n\
         \x20 tls_off_beyond_loopback: true\n  header_read_timeout: 31s\n  idle_timeout: 76s\n  max_connections_per_address: 129\n\
         \x20 trusted_proxies: '10.0.0.0/8, 2001:db8::/32'\n\
         database:\n  url: postgres://bothy@db/bothy\n  tx_retry_max: 9\n  listen_reconnect_backoff_cap: 1m 30s\n\
         cluster:\n  mode: multi\n\
         auth:\n  clock_leeway: 1s 500ms\n  token_pepper_file: /p\n  login_session_ttl: 1h\n  enrollment_code_ttl: 2h\n  totp_step: 60s\n  totp_skew_steps: 2\n\
         terminal:\n  pairing_code_ttl: 16m\n  fingerprint_confirm_chars: 9\n  fingerprint_max_attempts: 4\n  report_label_max_chars: 101\n  report_max_entries: 65\n\
         \x20 step_up_max_age: 61s\n  session_token_ttl: 31s\n  open_timeout: 21s\n  detach_grace: 16m\n  quick_reattach_window: 0s\n  idle_timeout: 31m\n\
         \x20 idle_grace: 3m\n  max_session_duration: 13h\n  max_sessions_per_person: 6\n  max_sessions_per_host: 11\n  relay_buffer_max_bytes: 262145\n\
         \x20 relay_stall_timeout: 11s\n  host_heartbeat_interval: 21s\n  host_heartbeat_miss_limit: 4\n  host_auth_timeout: 11s\n  sweep_interval: 31s\n\
         \x20 host_duplicate_probe_timeout: 6s\n\
         sync:\n  ws_max_frame_bytes: 65537\n  outbound_queue_max: 257\n\
         gateway:\n  write_timeout: 11s\n  ping_interval: 16s\n  ping_timeout: 21s\n\
         identity:\n  last_active_granularity: 61s\n\
         host:\n  os_user_max_chars: 33\n\
         signing_key:\n  cache_ttl: 6m\n\
         agent:\n  jwks_max_age: 25h\n\
         rl:\n  public_auth: {burst: 11, refill_per_minute: 12}\n  terminal: {burst: 21, refill_per_minute: 22}\n  host: {burst: 61, refill_per_minute: 62}\n\
         \x20 step_up_person: {burst: 12, refill_per_minute: 3}\n  step_up_address: {burst: 6, refill_per_minute: 7}\n",
    )
    .unwrap()
}

#[test]
fn every_key_round_trips_through_the_redacted_output() {
    let c = everything_changed();
    let d = Config::default();
    // Every section differs from the defaults (each field is checked by the
    // round trip below and by `every_key_is_written`).
    assert_ne!(c.server, d.server);
    assert_ne!(c.terminal, d.terminal);
    let out = c.to_redacted_yaml();
    assert_eq!(Config::from_yaml_str(&out).unwrap(), c, "{out}");
}

#[test]
fn every_key_is_written() {
    let out = everything_changed().to_redacted_yaml();
    let document = yaml::parse_document(&out).unwrap();
    for key in schema::value_keys() {
        assert!(at(&document, &key).is_some(), "{key} missing in:\n{out}");
    }
}

/// Each key of the schema is read by the decoder: a sequence there is refused,
/// named by that key (a key in the member list that no code read would pass).
#[test]
fn every_key_is_read() {
    for key in schema::value_keys() {
        let mut document = json!({});
        if key.starts_with("server.tls.") {
            document = json!({"server": {"tls": {"cert_file": "/c", "key_file": "/k"}}});
        }
        let mut slot = &mut document;
        for name in key.split('.') {
            slot = slot
                .as_object_mut()
                .unwrap()
                .entry(name)
                .or_insert_with(|| json!({}));
        }
        *slot = json!(["s3cr3t-canary"]);
        let e = refused(&document.to_string());
        assert!(matches!(e, ConfigError::WrongType { .. }), "{key}: {e}");
        assert_eq!(e.key(), Some(key.as_str()), "{e}");
    }
}

#[test]
fn every_key_can_be_set_from_the_environment() {
    let out = everything_changed().to_redacted_yaml();
    let document = yaml::parse_document(&out).unwrap();
    let mut vars = Vec::new();
    for key in schema::value_keys() {
        if key == "server.tls" {
            continue;
        }
        let value = match at(&document, &key).unwrap() {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        vars.push((env_var_for(&key), value));
    }
    let c = Config::from_yaml_str_with_env("", vars).unwrap();
    assert_eq!(c, everything_changed());
}
