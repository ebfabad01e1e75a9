//! The server's configuration: one YAML file nested like the key names of spec
//! chapter 24 section 17 (every key marked "Server", with its default) and the
//! server keys of DESIGN §3, decoded strictly, with single keys overridable by
//! `BOTHY_` environment variables. [`Config`] is a plain struct tree passed down
//! to whoever needs a value (STYLE 8: no globals); [`Config::default`] is every
//! default; secrets (the database password) never appear in `Debug` or in
//! [`Config::to_redacted_yaml`].
//!
//! # Decoding
//! 1. YAML text to a document (`yaml.rs`): one document, no duplicate key, no
//!    merge key, no unknown tag, YAML 1.2 booleans, no `null` below the top level.
//!    An empty file is every default.
//! 2. `BOTHY_` overrides written into the document (`env.rs`).
//! 3. The typed struct read with [`bothy_proto::json::Object`]: an exact member
//!    list per mapping (`schema.rs`), so an unknown key is refused; every member
//!    optional, an absent one takes its default; then the checks across keys.
//!
//! Every refusal ([`ConfigError`]) names the dotted key, never the value.
//!
//! # Keys and defaults
//! Durations are humantime strings (`15m`, `60s`, `2h 30m`), from 1ms (0s where
//! noted) to 365 days, in whole milliseconds; counts and sizes are integers.
//!
//! | Key | Default | Source, accepted values |
//! |---|---|---|
//! | `server.listen` | `0.0.0.0:8443` | DESIGN §3; IP address and port (port 0 = any) |
//! | `server.public_url` | `https://localhost:8443` | DESIGN §3, 2.3; http(s), no user, path, query |
//! | `server.data_dir` | `/var/lib/bothy-server` | DESIGN §3 |
//! | `server.tls` | `auto` | DESIGN §3; `auto`, `off` or `{cert_file, key_file}` |
//! | `server.tls_off_beyond_loopback` | `false` | D-354; `true` lets `tls: off` listen beyond a loopback address |
//! | `server.header_read_timeout` | 30s | D-350; the first request's head, from the accept (TLS handshake included) |
//! | `server.idle_timeout` | 75s | D-350; a connection without a request, or a request without traffic |
//! | `server.max_connections_per_address` | 128 | D-351; HTTP connections (not upgraded WebSockets) per client address; 1..=1000000 |
//! | `server.trusted_proxies` | empty | 9, D-506; CIDRs separated by commas; only a request from one of them has its client address taken from `Forwarded`/`X-Forwarded-For`; behind an edge raise `server.max_connections_per_address` to the edge's concurrent HTTP connections per node |
//! | `database.url` | absent: `sqlite://<data_dir>/bothy.sqlite` | DESIGN §3; `sqlite://`, `postgres://`, `postgresql://` |
//! | `database.tx_retry_max` | 3 | 6.3; 0..=100 |
//! | `database.listen_reconnect_backoff_cap` | 30s | 9 |
//! | `cluster.mode` | `single` | 9; `multi` needs a PostgreSQL `database.url`, the same token pepper on every node and an edge that hashes both stream paths by session (deploy/README.md, D-507–D-513) |
//! | `auth.clock_leeway` | 30s | 3.5, 5.3; 0s allowed |
//! | `auth.token_pepper_file` | absent: `<data_dir>/token_pepper` | 3.2 (`auth.token_pepper_ref`) |
//! | `auth.login_session_ttl` | 12h | DESIGN §3.1 |
//! | `auth.enrollment_code_ttl` | 24h | DESIGN §3.1 |
//! | `auth.totp_step` | 30s | DESIGN §3.1 (RFC 6238); whole seconds, 1s..=10m |
//! | `auth.totp_skew_steps` | 1 | DESIGN §3.1; 0..=10 |
//! | `terminal.pairing_code_ttl` | 15m | 17 |
//! | `terminal.fingerprint_confirm_chars` | 8 | 17; 1..=52 (the fingerprint's length, 4.3) |
//! | `terminal.fingerprint_max_attempts` | 3 | 17; 1..=100 |
//! | `terminal.report_label_max_chars` | 100 | 17; 1..=10000 |
//! | `terminal.report_max_entries` | 64 | 17; 1..=10000 |
//! | `terminal.step_up_max_age` | 60s | 17 |
//! | `terminal.session_token_ttl` | 30s | 17 |
//! | `terminal.open_timeout` | 20s | 17 |
//! | `terminal.detach_grace` | 15m | 17 |
//! | `terminal.quick_reattach_window` | 60s | 17; 0s allowed (no quick reattach) |
//! | `terminal.idle_timeout` | 30m | 17 |
//! | `terminal.idle_grace` | 2m | 17 |
//! | `terminal.max_session_duration` | 12h | 17 |
//! | `terminal.max_sessions_per_person` | 5 | 17; 1..=100000 |
//! | `terminal.max_sessions_per_host` | 10 | 17; 1..=100000 |
//! | `terminal.relay_buffer_max_bytes` | 262144 | 17; 65535 (one Noise message)..=67108864 |
//! | `terminal.relay_stall_timeout` | 10s | 17 |
//! | `terminal.host_heartbeat_interval` | 20s | 17 |
//! | `terminal.host_heartbeat_miss_limit` | 3 | 17; 1..=100 |
//! | `terminal.host_auth_timeout` | 10s | 17 |
//! | `terminal.sweep_interval` | 30s | 17 |
//! | `terminal.host_duplicate_probe_timeout` | 5s | 17 |
//!
//! Keys the chapter uses from chapters we do not have; **the defaults are ours**:
//!
//! | Key | Our default | Used in |
//! |---|---|---|
//! | `sync.ws_max_frame_bytes` | 65536 | 3.5 (largest text frame of the control connection); 1024..=16777216 |
//! | `sync.outbound_queue_max` | 256 | 3.5 (full queue: 4014); 1..=1000000 |
//! | `gateway.write_timeout` | 10s | 3.5 (missed write deadline: 4014) |
//! | `gateway.ping_interval` | 15s | 6.2 (the relay pings a side this long silent) |
//! | `gateway.ping_timeout` | 20s | 6.2 (no frame this long after a ping: the side is lost) |
//! | `identity.last_active_granularity` | 60s | 3.5 (`last_seen_at` writes) |
//! | `host.os_user_max_chars` | 32 | 3.2 (session user names); 1..=256 |
//! | `signing_key.cache_ttl` | 5m | 5.3 |
//! | `agent.jwks_max_age` | 24h | 5.3 (rotation publishes the next key this early) |
//! | `rl.public_auth` | burst 10, refill 10/min | 3.2, 6.3 (per client address) |
//! | `rl.terminal` | burst 20, refill 20/min | 6.3 (per person) |
//! | `rl.host` | burst 60, refill 60/min | 6.3 (per host) |
//! | `rl.step_up_person` | burst 10, refill 1/min | D-353 (failed step-ups per person) |
//! | `rl.step_up_address` | burst 5, refill 5/min | D-353 (failed step-ups per client address) |
//!
//! Each `rl.*` is a mapping `{burst, refill_per_minute}`, both 1..=1000000.
//!
//! # Environment
//! `BOTHY_<SECTION>__<KEY>` sets one key (`BOTHY_TERMINAL__PAIRING_CODE_TTL=20m`,
//! `BOTHY_SERVER__TLS=off`, `BOTHY_SERVER__TLS__CERT_FILE=...`); the value is one
//! YAML scalar. `BOTHY_CONFIG` (the file) and `BOTHY_LOG` (the log filter) are the
//! process's own and are not keys; any other unknown `BOTHY_` name is an error.

mod decode;
mod effective;
mod env;
#[doc(hidden)]
pub mod fuzzing;
mod schema;
mod values;

use crate::proxies::TrustedProxies;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Map, Value};

pub use bothy_config::ConfigError;
pub use bothy_config::duration::format_duration;
use bothy_config::yaml;
pub use env::{
    CONFIG_PATH_ENV, ENV_PREFIX, LOG_FILTER_ENV, RESERVED_ENV_VARS, env_var_for, process_env,
};
pub use values::{ClusterMode, DatabaseEngine, DatabaseUrl, PublicUrl, RateLimit, Tls};

/// The whole configuration of `bothy-server`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Config {
    /// `server.*`: where the server listens and how it is reached.
    pub server: ServerConfig,
    /// `database.*`
    pub database: DatabaseConfig,
    /// `cluster.*`
    pub cluster: ClusterConfig,
    /// `auth.*`
    pub auth: AuthConfig,
    /// `terminal.*`: spec 24 section 17.
    pub terminal: TerminalConfig,
    /// `sync.*` (our defaults).
    pub sync: SyncConfig,
    /// `gateway.*` (our defaults).
    pub gateway: GatewayConfig,
    /// `identity.*` (our defaults).
    pub identity: IdentityConfig,
    /// `host.*` (our defaults).
    pub host: HostConfig,
    /// `signing_key.*` (our defaults).
    pub signing_key: SigningKeyConfig,
    /// `agent.*` (our defaults).
    pub agent: AgentConfig,
    /// `rl.*`: the token buckets (our defaults).
    pub rl: RateLimitsConfig,
}

/// `server.*`
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    /// `server.listen`: the socket address of HTTP(S) and WebSocket.
    pub listen: SocketAddr,
    /// `server.public_url`: the URL hosts and clients use (`bothy-host pair
    /// --server`, 2.3 `reported_is_server_host`).
    pub public_url: PublicUrl,
    /// `server.data_dir`: the server's own files (SQLite database, token pepper,
    /// the CA of `tls: auto`).
    pub data_dir: PathBuf,
    /// `server.tls`
    pub tls: Tls,
    /// `server.tls_off_beyond_loopback`: the operator's acknowledgement that
    /// `tls: off` listens on an address other than loopback (D-354); without
    /// it the server refuses to start so.
    pub tls_off_beyond_loopback: bool,
    /// `server.header_read_timeout`: the first request's head must arrive
    /// within this time of the accept (the TLS handshake included).
    pub header_read_timeout: Duration,
    /// `server.idle_timeout`: an HTTP connection without a request in flight
    /// (keep-alive, HTTP/2 without a stream), or whose request moves no byte,
    /// is closed after this time. Upgraded WebSockets are no HTTP
    /// connections any more and keep their own rules.
    pub idle_timeout: Duration,
    /// `server.max_connections_per_address`: HTTP connections (from accept to
    /// the end, or to a WebSocket upgrade) of one client address; more are
    /// closed at accept.
    pub max_connections_per_address: usize,
    /// `server.trusted_proxies`: the edges whose `Forwarded` or
    /// `X-Forwarded-For` names the client ([`crate::proxies`], D-506).
    pub trusted_proxies: TrustedProxies,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 8443)),
            public_url: PublicUrl::default(),
            data_dir: PathBuf::from("/var/lib/bothy-server"),
            tls: Tls::Auto,
            tls_off_beyond_loopback: false,
            header_read_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(75),
            max_connections_per_address: 128,
            trusted_proxies: TrustedProxies::default(),
        }
    }
}

/// `database.*`
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatabaseConfig {
    /// `database.url`; absent means SQLite in the data directory, see
    /// [`Config::database_url`].
    pub url: Option<DatabaseUrl>,
    /// `database.tx_retry_max`: how often a unit of work whose locked counts
    /// changed starts again before `503 unavailable` (6.3).
    pub tx_retry_max: u32,
    /// `database.listen_reconnect_backoff_cap`: the delay between attempts to
    /// reconnect the LISTEN connection (9).
    pub listen_reconnect_backoff_cap: Duration,
}

impl Default for DatabaseConfig {
    fn default() -> Self {
        DatabaseConfig {
            url: None,
            tx_retry_max: 3,
            listen_reconnect_backoff_cap: Duration::from_secs(30),
        }
    }
}

/// `cluster.*`
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClusterConfig {
    /// `cluster.mode` (9).
    pub mode: ClusterMode,
}

/// `auth.*`
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthConfig {
    /// `auth.clock_leeway`: tolerance for `iat` and `exp` (3.5, 5.3).
    pub clock_leeway: Duration,
    /// `auth.token_pepper_file`: the file of the HMAC pepper for tokens and
    /// pairing codes (3.2); absent means [`Config::token_pepper_path`]'s default.
    pub token_pepper_file: Option<PathBuf>,
    /// `auth.login_session_ttl`
    pub login_session_ttl: Duration,
    /// `auth.enrollment_code_ttl`
    pub enrollment_code_ttl: Duration,
    /// `auth.totp_step` (RFC 6238 time step).
    pub totp_step: Duration,
    /// `auth.totp_skew_steps`: steps accepted before and after the current one.
    pub totp_skew_steps: u32,
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            clock_leeway: Duration::from_secs(30),
            token_pepper_file: None,
            login_session_ttl: Duration::from_secs(12 * 3600),
            enrollment_code_ttl: Duration::from_secs(24 * 3600),
            totp_step: Duration::from_secs(30),
            totp_skew_steps: 1,
        }
    }
}

/// `terminal.*`: every key of spec 24 section 17 marked "Server".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TerminalConfig {
    /// Validity of a pairing code for a host (3.2).
    pub pairing_code_ttl: Duration,
    /// This many characters of the fingerprint the owner types (3.2).
    pub fingerprint_confirm_chars: usize,
    /// Failed confirmations before the fallback to pairing (3.2).
    pub fingerprint_max_attempts: u32,
    /// Longest reported label: profile name, display name, working directory,
    /// OS version (3.2).
    pub report_label_max_chars: usize,
    /// Most entries per reported list (3.2).
    pub report_max_entries: usize,
    /// Oldest step-up that `terminal.open` and `terminal.attach` accept.
    pub step_up_max_age: Duration,
    /// Validity of a terminal session token (5.3).
    pub session_token_ttl: Duration,
    /// Deadline until both relay sides are connected and the handshake is done.
    pub open_timeout: Duration,
    /// How long a detached session stays attachable.
    pub detach_grace: Duration,
    /// Reattach from the same device without a step-up within this time.
    pub quick_reattach_window: Duration,
    /// Without device input this long, the session ends.
    pub idle_timeout: Duration,
    /// Extra time after which the server itself ends an idle session.
    pub idle_grace: Duration,
    /// Longest session.
    pub max_session_duration: Duration,
    /// Open sessions per person.
    pub max_sessions_per_person: u32,
    /// Open sessions per host.
    pub max_sessions_per_host: u32,
    /// Relay buffer per direction and session, in bytes.
    pub relay_buffer_max_bytes: usize,
    /// How long the relay holds back a sender while the buffer is full (then 4014).
    pub relay_stall_timeout: Duration,
    /// Heartbeat interval of the control connection (reported in hello).
    pub host_heartbeat_interval: Duration,
    /// Missed heartbeats until the control connection is closed.
    pub host_heartbeat_miss_limit: u32,
    /// Deadline between hello and identify.
    pub host_auth_timeout: Duration,
    /// Interval of the job `terminal.sweep`.
    pub sweep_interval: Duration,
    /// How long the server waits for the older control connection's answer (3.4).
    pub host_duplicate_probe_timeout: Duration,
}

impl Default for TerminalConfig {
    fn default() -> Self {
        TerminalConfig {
            pairing_code_ttl: Duration::from_secs(15 * 60),
            fingerprint_confirm_chars: 8,
            fingerprint_max_attempts: 3,
            report_label_max_chars: 100,
            report_max_entries: 64,
            step_up_max_age: Duration::from_secs(60),
            session_token_ttl: Duration::from_secs(30),
            open_timeout: Duration::from_secs(20),
            detach_grace: Duration::from_secs(15 * 60),
            quick_reattach_window: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(30 * 60),
            idle_grace: Duration::from_secs(2 * 60),
            max_session_duration: Duration::from_secs(12 * 3600),
            max_sessions_per_person: 5,
            max_sessions_per_host: 10,
            relay_buffer_max_bytes: 262_144,
            relay_stall_timeout: Duration::from_secs(10),
            host_heartbeat_interval: Duration::from_secs(20),
            host_heartbeat_miss_limit: 3,
            host_auth_timeout: Duration::from_secs(10),
            sweep_interval: Duration::from_secs(30),
            host_duplicate_probe_timeout: Duration::from_secs(5),
        }
    }
}

/// `sync.*` (our defaults).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncConfig {
    /// Largest WebSocket text frame (the `{op, d}` messages, 3.5), in bytes.
    pub ws_max_frame_bytes: usize,
    /// Outbound messages queued per connection; full: 4014 (3.5).
    pub outbound_queue_max: usize,
}

impl Default for SyncConfig {
    fn default() -> Self {
        SyncConfig {
            ws_max_frame_bytes: 65_536,
            outbound_queue_max: 256,
        }
    }
}

/// `gateway.*` (our defaults).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayConfig {
    /// Deadline of one WebSocket write; missed: 4014 (3.5).
    pub write_timeout: Duration,
    /// The relay pings each side of a session (device stream, host data
    /// connection) after this long without a frame from it.
    pub ping_interval: Duration,
    /// A side that sends no frame (a pong or anything else) for this long
    /// after a ping is dead: the relay drops it as a lost connection (6.2).
    pub ping_timeout: Duration,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        GatewayConfig {
            write_timeout: Duration::from_secs(10),
            ping_interval: Duration::from_secs(15),
            ping_timeout: Duration::from_secs(20),
        }
    }
}

/// `identity.*` (our defaults).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentityConfig {
    /// `last_seen_at` is written only when older than this (3.5).
    pub last_active_granularity: Duration,
}

impl Default for IdentityConfig {
    fn default() -> Self {
        IdentityConfig {
            last_active_granularity: Duration::from_secs(60),
        }
    }
}

/// `host.*` (our defaults).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostConfig {
    /// Longest reported session user name (3.2).
    pub os_user_max_chars: usize,
}

impl Default for HostConfig {
    fn default() -> Self {
        HostConfig {
            os_user_max_chars: 32,
        }
    }
}

/// `signing_key.*` (our defaults).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SigningKeyConfig {
    /// How long a node caches the signing keys (5.3).
    pub cache_ttl: Duration,
}

impl Default for SigningKeyConfig {
    fn default() -> Self {
        SigningKeyConfig {
            cache_ttl: Duration::from_secs(5 * 60),
        }
    }
}

/// `agent.*` (our defaults).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentConfig {
    /// A scheduled rotation publishes the next key this long before it signs (5.3).
    pub jwks_max_age: Duration,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            jwks_max_age: Duration::from_secs(24 * 3600),
        }
    }
}

/// `rl.*`: token buckets (our defaults).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimitsConfig {
    /// `rl.public_auth`: per client address, for public auth calls and failed
    /// credential checks on the terminal channels (3.2, 6.3).
    pub public_auth: RateLimit,
    /// `rl.terminal`: per person, for open, attach and device streams (6.3).
    pub terminal: RateLimit,
    /// `rl.host`: per host, for control and data connections (6.3).
    pub host: RateLimit,
    /// `rl.step_up_person`: per person, failed step-ups from any address (D-353).
    pub step_up_person: RateLimit,
    /// `rl.step_up_address`: per client address, failed step-ups of any
    /// person (D-353).
    pub step_up_address: RateLimit,
}

impl Default for RateLimitsConfig {
    fn default() -> Self {
        RateLimitsConfig {
            public_auth: RateLimit {
                burst: 10,
                refill_per_minute: 10,
            },
            terminal: RateLimit {
                burst: 20,
                refill_per_minute: 20,
            },
            host: RateLimit {
                burst: 60,
                refill_per_minute: 60,
            },
            step_up_person: RateLimit {
                burst: 10,
                refill_per_minute: 1,
            },
            step_up_address: RateLimit {
                burst: 5,
                refill_per_minute: 5,
            },
        }
    }
}

/// File name of the default SQLite database in the data directory.
pub const SQLITE_FILE_NAME: &str = "bothy.sqlite";

/// File name of the default token pepper in the data directory.
pub const TOKEN_PEPPER_FILE_NAME: &str = "token_pepper";

impl Config {
    /// Reads the configuration file (`None`: defaults only) and applies the
    /// `BOTHY_` overrides of `env` (pass [`process_env`]`()?` in the binary, your
    /// own pairs in tests).
    pub fn load(
        path: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config, ConfigError> {
        let text = match path {
            None => String::new(),
            Some(path) => {
                let bytes = read_limited(path).map_err(|error| ConfigError::Read {
                    path: path.to_owned(),
                    error,
                })?;
                String::from_utf8(bytes).map_err(|_| ConfigError::Syntax {
                    reason: "the file is not valid UTF-8",
                    location: None,
                })?
            }
        };
        Self::from_yaml_str_with_env(&text, env)
    }

    /// Decodes a configuration from YAML text, without environment overrides.
    pub fn from_yaml_str(yaml: &str) -> Result<Config, ConfigError> {
        Self::from_yaml_str_with_env(yaml, std::iter::empty())
    }

    /// Decodes a configuration from YAML text and applies the `BOTHY_` overrides
    /// of `env`.
    pub fn from_yaml_str_with_env(
        yaml: &str,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config, ConfigError> {
        let document = yaml::parse_document(yaml)?;
        let overrides = env::overrides(env)?;
        let mut root = match document {
            Value::Null => Map::new(),
            Value::Object(members) => members,
            _ => {
                return Err(ConfigError::wrong_type(
                    "",
                    "a mapping of sections (server, database, terminal, ...)",
                ));
            }
        };
        env::apply(&mut root, &overrides);
        decode::decode(&Value::Object(root)).map_err(|e| env::attribute(e, &overrides))
    }

    /// The database to use: `database.url`, or SQLite in
    /// `<data_dir>/bothy.sqlite` when it is absent.
    pub fn database_url(&self) -> DatabaseUrl {
        match &self.database.url {
            Some(url) => url.clone(),
            None => DatabaseUrl::sqlite_file(&self.server.data_dir.join(SQLITE_FILE_NAME)),
        }
    }

    /// The token pepper's file: `auth.token_pepper_file`, or
    /// `<data_dir>/token_pepper` when it is absent (the server creates it on first
    /// start).
    pub fn token_pepper_path(&self) -> PathBuf {
        match &self.auth.token_pepper_file {
            Some(path) => path.clone(),
            None => self.server.data_dir.join(TOKEN_PEPPER_FILE_NAME),
        }
    }

    /// Every key of the configuration in dotted form, in schema order (for the
    /// configuration reference in `docs/configuration.md`, which a test keeps
    /// complete).
    pub fn keys() -> Vec<String> {
        schema::value_keys()
    }

    /// The effective configuration as YAML, for `bothy-server config check`:
    /// every key with its value (defaults filled in), durations in humantime
    /// notation, the database password as `***`. A key whose default is derived
    /// from `server.data_dir` (`database.url`, `auth.token_pepper_file`) and that
    /// is not set is shown as a comment with its effective value, so that reading
    /// the output back gives the same configuration.
    pub fn to_redacted_yaml(&self) -> String {
        effective::to_redacted_yaml(self)
    }
}

/// Longest configuration file read; a path such as `/dev/zero` must not make
/// the server read forever.
const FILE_MAX_BYTES: u64 = 1 << 20;

fn read_limited(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read as _;
    let mut bytes = Vec::new();
    std::fs::File::open(path)?
        .take(FILE_MAX_BYTES + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > FILE_MAX_BYTES {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "the file is larger than 1 MiB",
        ));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests;
