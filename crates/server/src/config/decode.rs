//! The typed reading of the document with [`bothy_proto::json::Object`]: exact
//! member lists from [`super::schema`] (an unknown key is refused before any
//! value is read), every member optional with its default, then the checks
//! across keys. There is no second strict reader here: types and member lists
//! are `bothy_proto::json`'s; this module adds durations, ranges and the value
//! types of [`super::values`].

use std::net::SocketAddr;
use std::time::Duration;

use bothy_config::Section;
use bothy_config::duration::{DurationRule, POSITIVE, ZERO_ALLOWED};
use bothy_config::error::dotted;
use bothy_proto::fingerprint::FINGERPRINT_CHARS;
use bothy_proto::json::Member;
use serde_json::Value;

use super::schema;
use super::{
    AgentConfig, AuthConfig, ClusterConfig, ClusterMode, Config, ConfigError, DatabaseConfig,
    DatabaseEngine, DatabaseUrl, GatewayConfig, HostConfig, IdentityConfig, PublicUrl, RateLimit,
    RateLimitsConfig, ServerConfig, SigningKeyConfig, SyncConfig, TerminalConfig, Tls,
};

/// Decodes the whole configuration from the document (a mapping).
pub(crate) fn decode(document: &Value) -> Result<Config, ConfigError> {
    let root = Section::root(document, &schema::names(schema::ROOT))?;
    let config = Config {
        server: server(&root.section("server", &schema::names(schema::SERVER))?)?,
        database: database(&root.section("database", &schema::names(schema::DATABASE))?)?,
        cluster: cluster(&root.section("cluster", &schema::names(schema::CLUSTER))?)?,
        auth: auth(&root.section("auth", &schema::names(schema::AUTH))?)?,
        terminal: terminal(&root.section("terminal", &schema::names(schema::TERMINAL))?)?,
        sync: sync(&root.section("sync", &schema::names(schema::SYNC))?)?,
        gateway: gateway(&root.section("gateway", &schema::names(schema::GATEWAY))?)?,
        identity: identity(&root.section("identity", &schema::names(schema::IDENTITY))?)?,
        host: host(&root.section("host", &schema::names(schema::HOST))?)?,
        signing_key: signing_key(
            &root.section("signing_key", &schema::names(schema::SIGNING_KEY))?,
        )?,
        agent: agent(&root.section("agent", &schema::names(schema::AGENT))?)?,
        rl: rate_limits(&root.section("rl", &schema::names(schema::RL))?)?,
    };
    check_across_keys(&config)?;
    Ok(config)
}

fn server(s: &Section<'_>) -> Result<ServerConfig, ConfigError> {
    let d = ServerConfig::default();
    Ok(ServerConfig {
        listen: match s.string("listen")? {
            None => d.listen,
            Some((text, key)) => text.parse::<SocketAddr>().map_err(|_| {
                ConfigError::invalid(
                    &key,
                    "an IP address and port such as 0.0.0.0:8443 or [::]:8443",
                )
            })?,
        },
        public_url: match s.string("public_url")? {
            None => d.public_url,
            Some((text, _)) => PublicUrl::parse(text)?,
        },
        data_dir: s.path("data_dir")?.unwrap_or(d.data_dir),
        tls: match s.member("tls") {
            None => d.tls,
            Some(member) => tls(member)?,
        },
        tls_off_beyond_loopback: s
            .boolean("tls_off_beyond_loopback")?
            .unwrap_or(d.tls_off_beyond_loopback),
        header_read_timeout: s.duration("header_read_timeout", d.header_read_timeout, POSITIVE)?,
        idle_timeout: s.duration("idle_timeout", d.idle_timeout, POSITIVE)?,
        max_connections_per_address: s.count(
            "max_connections_per_address",
            d.max_connections_per_address,
            1,
            1_000_000,
        )?,
        trusted_proxies: match s.string("trusted_proxies")? {
            None => d.trusted_proxies,
            Some((text, key)) => {
                text.parse()
                    .map_err(|error: crate::proxies::InvalidProxies| {
                        ConfigError::invalid(&key, error.to_string())
                    })?
            }
        },
    })
}

const TLS_EXPECTED: &str = "auto, off, or a mapping with cert_file and key_file";

fn tls(member: Member<'_>) -> Result<Tls, ConfigError> {
    let key = dotted(member.pointer());
    match member.value() {
        Value::String(text) => match text.as_str() {
            "auto" => Ok(Tls::Auto),
            "off" => Ok(Tls::Off),
            _ => Err(ConfigError::invalid(&key, TLS_EXPECTED)),
        },
        Value::Object(_) => {
            let files = Section::of_member(member, &schema::names(schema::TLS_FILES))?;
            let required = |name: &str| {
                files.path(name)?.ok_or_else(|| ConfigError::MissingKey {
                    key: format!("{key}.{name}"),
                })
            };
            Ok(Tls::Files {
                cert_file: required("cert_file")?,
                key_file: required("key_file")?,
            })
        }
        _ => Err(ConfigError::wrong_type(&key, TLS_EXPECTED)),
    }
}

fn database(s: &Section<'_>) -> Result<DatabaseConfig, ConfigError> {
    let d = DatabaseConfig::default();
    Ok(DatabaseConfig {
        url: match s.string("url")? {
            None => None,
            Some((text, _)) => Some(DatabaseUrl::parse(text)?),
        },
        tx_retry_max: s.count("tx_retry_max", d.tx_retry_max, 0, 100)?,
        listen_reconnect_backoff_cap: s.duration(
            "listen_reconnect_backoff_cap",
            d.listen_reconnect_backoff_cap,
            POSITIVE,
        )?,
    })
}

fn cluster(s: &Section<'_>) -> Result<ClusterConfig, ConfigError> {
    let mode = match s.string("mode")? {
        None => ClusterMode::default(),
        Some((text, key)) => match text {
            "single" => ClusterMode::Single,
            "multi" => ClusterMode::Multi,
            _ => return Err(ConfigError::invalid(&key, "single or multi")),
        },
    };
    Ok(ClusterConfig { mode })
}

/// `auth.totp_step`: whole seconds, at most ten minutes.
const TOTP_STEP: DurationRule = DurationRule {
    min: Duration::from_secs(1),
    max: Duration::from_secs(600),
    whole_seconds: true,
};

fn auth(s: &Section<'_>) -> Result<AuthConfig, ConfigError> {
    let d = AuthConfig::default();
    Ok(AuthConfig {
        clock_leeway: s.duration("clock_leeway", d.clock_leeway, ZERO_ALLOWED)?,
        token_pepper_file: s.path("token_pepper_file")?,
        login_session_ttl: s.duration("login_session_ttl", d.login_session_ttl, POSITIVE)?,
        enrollment_code_ttl: s.duration("enrollment_code_ttl", d.enrollment_code_ttl, POSITIVE)?,
        totp_step: s.duration("totp_step", d.totp_step, TOTP_STEP)?,
        totp_skew_steps: s.count("totp_skew_steps", d.totp_skew_steps, 0, 10)?,
    })
}

/// The largest WebSocket binary message of a stream: one Noise message (5.2).
const NOISE_MESSAGE_MAX: u64 = 65_535;

fn terminal(s: &Section<'_>) -> Result<TerminalConfig, ConfigError> {
    let d = TerminalConfig::default();
    Ok(TerminalConfig {
        pairing_code_ttl: s.duration("pairing_code_ttl", d.pairing_code_ttl, POSITIVE)?,
        fingerprint_confirm_chars: s.count(
            "fingerprint_confirm_chars",
            d.fingerprint_confirm_chars,
            1,
            // The owner types at most the whole fingerprint (4.3).
            FINGERPRINT_CHARS as u64,
        )?,
        fingerprint_max_attempts: s.count(
            "fingerprint_max_attempts",
            d.fingerprint_max_attempts,
            1,
            100,
        )?,
        report_label_max_chars: s.count(
            "report_label_max_chars",
            d.report_label_max_chars,
            1,
            10_000,
        )?,
        report_max_entries: s.count("report_max_entries", d.report_max_entries, 1, 10_000)?,
        step_up_max_age: s.duration("step_up_max_age", d.step_up_max_age, POSITIVE)?,
        session_token_ttl: s.duration("session_token_ttl", d.session_token_ttl, POSITIVE)?,
        open_timeout: s.duration("open_timeout", d.open_timeout, POSITIVE)?,
        detach_grace: s.duration("detach_grace", d.detach_grace, POSITIVE)?,
        quick_reattach_window: s.duration(
            "quick_reattach_window",
            d.quick_reattach_window,
            ZERO_ALLOWED,
        )?,
        idle_timeout: s.duration("idle_timeout", d.idle_timeout, POSITIVE)?,
        idle_grace: s.duration("idle_grace", d.idle_grace, POSITIVE)?,
        max_session_duration: s.duration(
            "max_session_duration",
            d.max_session_duration,
            POSITIVE,
        )?,
        max_sessions_per_person: s.count(
            "max_sessions_per_person",
            d.max_sessions_per_person,
            1,
            100_000,
        )?,
        max_sessions_per_host: s.count(
            "max_sessions_per_host",
            d.max_sessions_per_host,
            1,
            100_000,
        )?,
        relay_buffer_max_bytes: s.count(
            "relay_buffer_max_bytes",
            d.relay_buffer_max_bytes,
            NOISE_MESSAGE_MAX,
            64 << 20,
        )?,
        relay_stall_timeout: s.duration("relay_stall_timeout", d.relay_stall_timeout, POSITIVE)?,
        host_heartbeat_interval: s.duration(
            "host_heartbeat_interval",
            d.host_heartbeat_interval,
            POSITIVE,
        )?,
        host_heartbeat_miss_limit: s.count(
            "host_heartbeat_miss_limit",
            d.host_heartbeat_miss_limit,
            1,
            100,
        )?,
        host_auth_timeout: s.duration("host_auth_timeout", d.host_auth_timeout, POSITIVE)?,
        sweep_interval: s.duration("sweep_interval", d.sweep_interval, POSITIVE)?,
        host_duplicate_probe_timeout: s.duration(
            "host_duplicate_probe_timeout",
            d.host_duplicate_probe_timeout,
            POSITIVE,
        )?,
    })
}

fn sync(s: &Section<'_>) -> Result<SyncConfig, ConfigError> {
    let d = SyncConfig::default();
    Ok(SyncConfig {
        ws_max_frame_bytes: s.count("ws_max_frame_bytes", d.ws_max_frame_bytes, 1024, 16 << 20)?,
        outbound_queue_max: s.count("outbound_queue_max", d.outbound_queue_max, 1, 1_000_000)?,
    })
}

fn gateway(s: &Section<'_>) -> Result<GatewayConfig, ConfigError> {
    let d = GatewayConfig::default();
    Ok(GatewayConfig {
        write_timeout: s.duration("write_timeout", d.write_timeout, POSITIVE)?,
        ping_interval: s.duration("ping_interval", d.ping_interval, POSITIVE)?,
        ping_timeout: s.duration("ping_timeout", d.ping_timeout, POSITIVE)?,
    })
}

fn identity(s: &Section<'_>) -> Result<IdentityConfig, ConfigError> {
    let d = IdentityConfig::default();
    Ok(IdentityConfig {
        last_active_granularity: s.duration(
            "last_active_granularity",
            d.last_active_granularity,
            POSITIVE,
        )?,
    })
}

fn host(s: &Section<'_>) -> Result<HostConfig, ConfigError> {
    let d = HostConfig::default();
    Ok(HostConfig {
        os_user_max_chars: s.count("os_user_max_chars", d.os_user_max_chars, 1, 256)?,
    })
}

fn signing_key(s: &Section<'_>) -> Result<SigningKeyConfig, ConfigError> {
    let d = SigningKeyConfig::default();
    Ok(SigningKeyConfig {
        cache_ttl: s.duration("cache_ttl", d.cache_ttl, POSITIVE)?,
    })
}

fn agent(s: &Section<'_>) -> Result<AgentConfig, ConfigError> {
    let d = AgentConfig::default();
    Ok(AgentConfig {
        jwks_max_age: s.duration("jwks_max_age", d.jwks_max_age, POSITIVE)?,
    })
}

fn rate_limits(s: &Section<'_>) -> Result<RateLimitsConfig, ConfigError> {
    let d = RateLimitsConfig::default();
    let one = |name: &str, default: RateLimit| -> Result<RateLimit, ConfigError> {
        let bucket = s.section(name, &schema::names(schema::RATE_LIMIT))?;
        Ok(RateLimit {
            burst: bucket.count("burst", default.burst, 1, 1_000_000)?,
            refill_per_minute: bucket.count(
                "refill_per_minute",
                default.refill_per_minute,
                1,
                1_000_000,
            )?,
        })
    };
    Ok(RateLimitsConfig {
        public_auth: one("public_auth", d.public_auth)?,
        terminal: one("terminal", d.terminal)?,
        host: one("host", d.host)?,
        step_up_person: one("step_up_person", d.step_up_person)?,
        step_up_address: one("step_up_address", d.step_up_address)?,
    })
}

fn check_across_keys(config: &Config) -> Result<(), ConfigError> {
    if config.cluster.mode == ClusterMode::Multi
        && config.database_url().engine() != DatabaseEngine::Postgres
    {
        return Err(ConfigError::invalid(
            "cluster.mode",
            "single while database.url is not a PostgreSQL URL (multi needs PostgreSQL \
             for LISTEN/NOTIFY)",
        ));
    }
    Ok(())
}
