//! The tree of configuration keys: one list of member names per mapping, the
//! single source for the strict decoder (exact member lists, so an unknown key is
//! refused), for the names of the `BOTHY_` environment overrides, and for the
//! tests that check every key is read and written.

/// One key of the configuration file.
#[derive(Debug)]
pub(crate) struct Key {
    /// The member name, as written in the file (`pairing_code_ttl`).
    pub(crate) name: &'static str,
    /// What the key holds.
    pub(crate) shape: Shape,
}

/// What a key holds.
#[derive(Debug)]
pub(crate) enum Shape {
    /// One scalar: a string, an integer or a duration string.
    Scalar,
    /// A mapping with exactly these members, each optional.
    Mapping(&'static [Key]),
    /// A scalar or a mapping with these members (`server.tls`).
    ScalarOrMapping(&'static [Key]),
}

const fn scalar(name: &'static str) -> Key {
    Key {
        name,
        shape: Shape::Scalar,
    }
}

const fn mapping(name: &'static str, members: &'static [Key]) -> Key {
    Key {
        name,
        shape: Shape::Mapping(members),
    }
}

/// The top level of the file.
pub(crate) const ROOT: &[Key] = &[
    mapping("server", SERVER),
    mapping("database", DATABASE),
    mapping("cluster", CLUSTER),
    mapping("auth", AUTH),
    mapping("terminal", TERMINAL),
    mapping("sync", SYNC),
    mapping("gateway", GATEWAY),
    mapping("identity", IDENTITY),
    mapping("host", HOST),
    mapping("signing_key", SIGNING_KEY),
    mapping("agent", AGENT),
    mapping("rl", RL),
];

pub(crate) const SERVER: &[Key] = &[
    scalar("listen"),
    scalar("public_url"),
    scalar("data_dir"),
    Key {
        name: "tls",
        shape: Shape::ScalarOrMapping(TLS_FILES),
    },
    scalar("tls_off_beyond_loopback"),
    scalar("header_read_timeout"),
    scalar("idle_timeout"),
    scalar("max_connections_per_address"),
    scalar("trusted_proxies"),
];

pub(crate) const TLS_FILES: &[Key] = &[scalar("cert_file"), scalar("key_file")];

pub(crate) const DATABASE: &[Key] = &[
    scalar("url"),
    scalar("tx_retry_max"),
    scalar("listen_reconnect_backoff_cap"),
];

pub(crate) const CLUSTER: &[Key] = &[scalar("mode")];

pub(crate) const AUTH: &[Key] = &[
    scalar("clock_leeway"),
    scalar("token_pepper_file"),
    scalar("login_session_ttl"),
    scalar("enrollment_code_ttl"),
    scalar("totp_step"),
    scalar("totp_skew_steps"),
];

pub(crate) const TERMINAL: &[Key] = &[
    scalar("pairing_code_ttl"),
    scalar("fingerprint_confirm_chars"),
    scalar("fingerprint_max_attempts"),
    scalar("report_label_max_chars"),
    scalar("report_max_entries"),
    scalar("step_up_max_age"),
    scalar("session_token_ttl"),
    scalar("open_timeout"),
    scalar("detach_grace"),
    scalar("quick_reattach_window"),
    scalar("idle_timeout"),
    scalar("idle_grace"),
    scalar("max_session_duration"),
    scalar("max_sessions_per_person"),
    scalar("max_sessions_per_host"),
    scalar("relay_buffer_max_bytes"),
    scalar("relay_stall_timeout"),
    scalar("host_heartbeat_interval"),
    scalar("host_heartbeat_miss_limit"),
    scalar("host_auth_timeout"),
    scalar("sweep_interval"),
    scalar("host_duplicate_probe_timeout"),
];

pub(crate) const SYNC: &[Key] = &[scalar("ws_max_frame_bytes"), scalar("outbound_queue_max")];

pub(crate) const GATEWAY: &[Key] = &[
    scalar("write_timeout"),
    scalar("ping_interval"),
    scalar("ping_timeout"),
];

pub(crate) const IDENTITY: &[Key] = &[scalar("last_active_granularity")];

pub(crate) const HOST: &[Key] = &[scalar("os_user_max_chars")];

pub(crate) const SIGNING_KEY: &[Key] = &[scalar("cache_ttl")];

pub(crate) const AGENT: &[Key] = &[scalar("jwks_max_age")];

pub(crate) const RL: &[Key] = &[
    mapping("public_auth", RATE_LIMIT),
    mapping("terminal", RATE_LIMIT),
    mapping("host", RATE_LIMIT),
    mapping("step_up_person", RATE_LIMIT),
    mapping("step_up_address", RATE_LIMIT),
];

pub(crate) const RATE_LIMIT: &[Key] = &[scalar("burst"), scalar("refill_per_minute")];

/// The member names of one mapping, for [`bothy_proto::json::Object`].
pub(crate) fn names(keys: &[Key]) -> Vec<&'static str> {
    keys.iter().map(|key| key.name).collect()
}

/// The members of a key that may hold a mapping.
pub(crate) fn members(key: &Key) -> &'static [Key] {
    match key.shape {
        Shape::Scalar => &[],
        Shape::Mapping(members) | Shape::ScalarOrMapping(members) => members,
    }
}

/// Every key that holds a value of its own, in file order, dotted
/// (`terminal.pairing_code_ttl`); `server.tls` is listed with its members.
pub(crate) fn value_keys() -> Vec<String> {
    fn walk(prefix: &str, keys: &[Key], out: &mut Vec<String>) {
        for key in keys {
            let dotted = if prefix.is_empty() {
                key.name.to_owned()
            } else {
                format!("{prefix}.{}", key.name)
            };
            match key.shape {
                Shape::Scalar => out.push(dotted),
                Shape::Mapping(members) => walk(&dotted, members, out),
                Shape::ScalarOrMapping(members) => {
                    out.push(dotted.clone());
                    walk(&dotted, members, out);
                }
            }
        }
    }
    let mut out = Vec::new();
    walk("", ROOT, &mut out);
    out
}
