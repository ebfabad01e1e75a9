//! The effective configuration as YAML (`bothy-server config check`): every key
//! in file order, defaults filled in, durations in the file's notation, the
//! database password as `***`. Written by hand: the output is small, its order is
//! the schema's, and a hand-written writer cannot emit a value it was not given.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use super::{Config, RateLimit, Tls};
use bothy_config::duration::format_duration;

pub(crate) fn to_redacted_yaml(c: &Config) -> String {
    let mut w = Writer::default();
    w.comment(
        0,
        "bothy-server: effective configuration (defaults filled in, passwords as ***)",
    );

    w.section("server");
    w.string("listen", &c.server.listen.to_string());
    w.string("public_url", c.server.public_url.as_str());
    w.path("data_dir", &c.server.data_dir);
    match &c.server.tls {
        Tls::Auto => w.string("tls", "auto"),
        Tls::Off => w.string("tls", "off"),
        Tls::Files {
            cert_file,
            key_file,
        } => {
            w.nested("tls");
            w.path("cert_file", cert_file);
            w.path("key_file", key_file);
            w.end_nested();
        }
    }
    w.boolean("tls_off_beyond_loopback", c.server.tls_off_beyond_loopback);
    w.duration("header_read_timeout", c.server.header_read_timeout);
    w.duration("idle_timeout", c.server.idle_timeout);
    w.uint(
        "max_connections_per_address",
        c.server.max_connections_per_address,
    );
    w.string("trusted_proxies", &c.server.trusted_proxies.to_string());

    w.section("database");
    match &c.database.url {
        Some(url) => w.string("url", &url.redacted()),
        None => w.derived("url", &c.database_url().redacted(), "server.data_dir"),
    }
    w.uint("tx_retry_max", c.database.tx_retry_max);
    w.duration(
        "listen_reconnect_backoff_cap",
        c.database.listen_reconnect_backoff_cap,
    );

    w.section("cluster");
    w.string("mode", c.cluster.mode.as_str());

    let a = &c.auth;
    w.section("auth");
    w.duration("clock_leeway", a.clock_leeway);
    match &a.token_pepper_file {
        Some(path) => w.path("token_pepper_file", path),
        None => w.derived(
            "token_pepper_file",
            &c.token_pepper_path().to_string_lossy(),
            "server.data_dir",
        ),
    }
    w.duration("login_session_ttl", a.login_session_ttl);
    w.duration("enrollment_code_ttl", a.enrollment_code_ttl);
    w.duration("totp_step", a.totp_step);
    w.uint("totp_skew_steps", a.totp_skew_steps);

    let t = &c.terminal;
    w.section("terminal");
    w.duration("pairing_code_ttl", t.pairing_code_ttl);
    w.uint("fingerprint_confirm_chars", t.fingerprint_confirm_chars);
    w.uint("fingerprint_max_attempts", t.fingerprint_max_attempts);
    w.uint("report_label_max_chars", t.report_label_max_chars);
    w.uint("report_max_entries", t.report_max_entries);
    w.duration("step_up_max_age", t.step_up_max_age);
    w.duration("session_token_ttl", t.session_token_ttl);
    w.duration("open_timeout", t.open_timeout);
    w.duration("detach_grace", t.detach_grace);
    w.duration("quick_reattach_window", t.quick_reattach_window);
    w.duration("idle_timeout", t.idle_timeout);
    w.duration("idle_grace", t.idle_grace);
    w.duration("max_session_duration", t.max_session_duration);
    w.uint("max_sessions_per_person", t.max_sessions_per_person);
    w.uint("max_sessions_per_host", t.max_sessions_per_host);
    w.uint("relay_buffer_max_bytes", t.relay_buffer_max_bytes);
    w.duration("relay_stall_timeout", t.relay_stall_timeout);
    w.duration("host_heartbeat_interval", t.host_heartbeat_interval);
    w.uint("host_heartbeat_miss_limit", t.host_heartbeat_miss_limit);
    w.duration("host_auth_timeout", t.host_auth_timeout);
    w.duration("sweep_interval", t.sweep_interval);
    w.duration(
        "host_duplicate_probe_timeout",
        t.host_duplicate_probe_timeout,
    );

    w.section("sync");
    w.uint("ws_max_frame_bytes", c.sync.ws_max_frame_bytes);
    w.uint("outbound_queue_max", c.sync.outbound_queue_max);

    w.section("gateway");
    w.duration("write_timeout", c.gateway.write_timeout);
    w.duration("ping_interval", c.gateway.ping_interval);
    w.duration("ping_timeout", c.gateway.ping_timeout);

    w.section("identity");
    w.duration(
        "last_active_granularity",
        c.identity.last_active_granularity,
    );

    w.section("host");
    w.uint("os_user_max_chars", c.host.os_user_max_chars);

    w.section("signing_key");
    w.duration("cache_ttl", c.signing_key.cache_ttl);

    w.section("agent");
    w.duration("jwks_max_age", c.agent.jwks_max_age);

    w.section("rl");
    for (name, limit) in [
        ("public_auth", c.rl.public_auth),
        ("terminal", c.rl.terminal),
        ("host", c.rl.host),
        ("step_up_person", c.rl.step_up_person),
        ("step_up_address", c.rl.step_up_address),
    ] {
        w.rate_limit(name, limit);
    }

    w.out
}

/// Appends lines; `depth` is the indentation of the next member.
#[derive(Default)]
struct Writer {
    out: String,
    depth: usize,
}

impl Writer {
    fn indent(&mut self, depth: usize) {
        for _ in 0..depth {
            self.out.push_str("  ");
        }
    }

    fn comment(&mut self, depth: usize, text: &str) {
        self.indent(depth);
        self.out.push_str("# ");
        self.out.push_str(text);
        self.out.push('\n');
    }

    fn section(&mut self, name: &str) {
        self.depth = 0;
        self.nested(name);
    }

    fn nested(&mut self, name: &str) {
        self.indent(self.depth);
        self.out.push_str(name);
        self.out.push_str(":\n");
        self.depth += 1;
    }

    fn end_nested(&mut self) {
        self.depth = self.depth.saturating_sub(1);
    }

    fn member(&mut self, name: &str, value: &str) {
        self.indent(self.depth);
        self.out.push_str(name);
        self.out.push_str(": ");
        self.out.push_str(value);
        self.out.push('\n');
    }

    fn string(&mut self, name: &str, value: &str) {
        self.member(name, &quoted(value));
    }

    fn path(&mut self, name: &str, value: &Path) {
        self.string(name, &value.to_string_lossy());
    }

    fn boolean(&mut self, name: &str, value: bool) {
        self.member(name, if value { "true" } else { "false" });
    }

    /// An integer (`u32`, `usize`).
    fn uint(&mut self, name: &str, value: impl std::fmt::Display) {
        self.member(name, &value.to_string());
    }

    fn duration(&mut self, name: &str, value: Duration) {
        self.member(name, &format_duration(value));
    }

    /// A key that is not set and whose default follows another key: shown as a
    /// comment, so that reading the output back leaves it unset.
    fn derived(&mut self, name: &str, value: &str, from: &str) {
        let depth = self.depth;
        self.comment(
            depth,
            &format!(
                "{name}: {}  (not set: the default from {from})",
                quoted(value)
            ),
        );
    }

    fn rate_limit(&mut self, name: &str, limit: RateLimit) {
        self.nested(name);
        self.uint("burst", limit.burst);
        self.uint("refill_per_minute", limit.refill_per_minute);
        self.end_nested();
    }
}

/// A YAML double-quoted scalar.
fn quoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() || c == '\u{2028}' || c == '\u{2029}' || c == '\u{feff}' => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_round_trips_through_the_reader() {
        for text in [
            "plain",
            "a\"b\\c",
            "line\nnext\ttab",
            "\u{1}\u{7f}",
            "ünï",
            "# not a comment",
            "off",
        ] {
            let yaml = format!("k: {}\n", quoted(text));
            let v = bothy_config::yaml::parse_document(&yaml).unwrap();
            assert_eq!(v["k"], text, "{yaml}");
        }
    }
}
