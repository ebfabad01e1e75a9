//! Prometheus metrics (DESIGN §3 "Observability"; spec 24 section 10.4):
//! counters and gauges of this process, served as the Prometheus text format
//! (version 0.0.4) on `GET /metrics`.
//!
//! # Privacy (10.4)
//! "Only counters and durations without IDs of people and without host names":
//! every label value here is a compiled-in code from a closed list
//! ([`RouteGroup`], [`StatusClass`]); no label is ever taken from a request, so no
//! ID, username, host name, path, token or content can reach `/metrics`.
//!
//! # Names
//! | Metric | Type | Labels | Meaning |
//! |---|---|---|---|
//! | `bothy_http_requests_total` | counter | `route_group` (`api`, `health`, `metrics`, `other`), `status_class` (`1xx`..`5xx`) | HTTP requests answered (a WebSocket upgrade counts once, as `1xx`) |
//! | `bothy_events_sockets` | gauge | — | event stream sockets (`GET /api/v1/events`) subscribed now; a socket stops counting when the server decides to close it |
//! | `bothy_events_delivered_total` | counter | — | event messages written to event stream sockets (`ready` not counted) |
//! | `bothy_events_dropped_slow_total` | counter | — | event stream sockets closed with 4014 `slow_consumer` |
//! | `bothy_terminal_hosts_connected` | gauge | — | hosts whose control connection on this process is connected (first report applied, 3.5) |
//! | `bothy_terminal_relay_unpaired_total` | counter | `side` (`client`, `host`; spec 9) | relay sides that found no counterpart within `terminal.open_timeout` and closed with 4102 (section 9) |
//! | `bothy_tls_handshakes_total` | counter | `kind` (`full`, `resumed`) | TLS handshakes completed on the main listener: `resumed` took a session the client kept from an earlier connection (no certificate sent or checked again), `full` everything else |
//!
//! The terminal relay's metrics (e.g. `bothy_terminal_relay_unpaired{side}`,
//! section 9) are registered by the relay when it exists, where they can be tested.
//!
//! # Exposure
//! `/metrics` needs no credential, like `/healthz`, and is served on the main
//! listener (DESIGN names no authentication for it). It says nothing about
//! people or hosts, but operators who expose the API publicly should still
//! filter `/metrics` at the edge.
//!
//! # Cost
//! Every series of `bothy_http_requests_total` is created at start (4 × 5), and
//! the request layer holds their handles in a table: counting a request is one
//! relaxed atomic add, with no lock, lookup or allocation beyond the middleware's.

use std::fmt;
use std::sync::Arc;

use axum::http::StatusCode;
use prometheus_client::encoding::prometheus_text;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::sync::watch;

use crate::codes::code_enum;

code_enum! {
    /// The route group of a request: a fixed small set, never a path.
    pub enum RouteGroup {
        /// Everything under `/api/`.
        Api => "api",
        /// `/healthz` and `/readyz`.
        Health => "health",
        /// `/metrics`.
        Metrics => "metrics",
        /// Anything else (unknown paths, the console's files later).
        Other => "other",
    }
}

code_enum! {
    /// The class of a response status.
    pub enum StatusClass {
        /// 100..=199 (WebSocket upgrades).
        Informational => "1xx",
        /// 200..=299.
        Success => "2xx",
        /// 300..=399.
        Redirection => "3xx",
        /// 400..=499.
        ClientError => "4xx",
        /// 500..=599 (and anything out of range).
        ServerError => "5xx",
    }
}

impl RouteGroup {
    /// The group of a request path.
    pub fn of_path(path: &str) -> RouteGroup {
        if path.starts_with("/api/") {
            RouteGroup::Api
        } else if path == "/healthz" || path == "/readyz" {
            RouteGroup::Health
        } else if path == "/metrics" {
            RouteGroup::Metrics
        } else {
            RouteGroup::Other
        }
    }

    /// The position in [`RouteGroup::ALL`] (declaration order).
    const fn index(self) -> usize {
        self as usize
    }
}

impl StatusClass {
    /// The class of a status.
    pub fn of(status: StatusCode) -> StatusClass {
        match status.as_u16() {
            100..=199 => StatusClass::Informational,
            200..=299 => StatusClass::Success,
            300..=399 => StatusClass::Redirection,
            400..=499 => StatusClass::ClientError,
            _ => StatusClass::ServerError,
        }
    }

    /// The position in [`StatusClass::ALL`] (declaration order).
    const fn index(self) -> usize {
        self as usize
    }
}

/// The labels of `bothy_http_requests_total`; both values are codes of the
/// enums above (`&'static str`, never request data).
type HttpLabels = [(&'static str, &'static str); 2];

/// The number of route groups and status classes (the table's shape).
const GROUPS: usize = 4;
const CLASSES: usize = 5;
const _: () = assert!(RouteGroup::ALL.len() == GROUPS && StatusClass::ALL.len() == CLASSES);

/// A gauge that can also be awaited: the Prometheus value plus a watch of the
/// same number, so code (the tests, a drain) can wait for a level instead of
/// polling.
#[derive(Debug, Clone)]
pub struct WatchedGauge {
    gauge: Gauge,
    level: Arc<watch::Sender<i64>>,
}

impl WatchedGauge {
    fn new() -> WatchedGauge {
        let (level, _) = watch::channel(0);
        WatchedGauge {
            gauge: Gauge::default(),
            level: Arc::new(level),
        }
    }

    /// Adds one.
    pub fn inc(&self) {
        self.gauge.inc();
        self.level.send_modify(|level| *level += 1);
    }

    /// Takes one away.
    pub fn dec(&self) {
        self.gauge.dec();
        self.level.send_modify(|level| *level -= 1);
    }

    /// The value now.
    pub fn get(&self) -> i64 {
        self.gauge.get()
    }

    /// Resolves once the value satisfies `ready`.
    pub async fn wait_for(&self, ready: impl FnMut(&i64) -> bool) {
        let mut level = self.level.subscribe();
        // The sender lives in `self`: the wait cannot fail.
        let _ = level.wait_for(ready).await;
    }
}

code_enum! {
    /// How a TLS handshake went: a full one, or the resumption of a session
    /// the client kept (TLS 1.3 with a pre-shared key of an earlier
    /// connection; the key exchange runs again, the certificate does not).
    pub enum TlsHandshakeKind {
        /// A full handshake (with or without a HelloRetryRequest).
        Full => "full",
        /// A resumed session.
        Resumed => "resumed",
    }
}

impl TlsHandshakeKind {
    /// The kind of a completed handshake.
    pub fn of(kind: rustls::HandshakeKind) -> TlsHandshakeKind {
        match kind {
            rustls::HandshakeKind::Resumed => TlsHandshakeKind::Resumed,
            _ => TlsHandshakeKind::Full,
        }
    }

    /// The position in [`TlsHandshakeKind::ALL`] (declaration order).
    const fn index(self) -> usize {
        self as usize
    }
}

/// The handles of `bothy_tls_handshakes_total` by kind, for the accept loop
/// (clones share the family's atomics).
#[derive(Debug, Clone, Default)]
pub struct TlsHandshakes([Counter; 2]);

impl TlsHandshakes {
    /// Counts one completed handshake.
    pub fn count(&self, kind: TlsHandshakeKind) {
        self.0[kind.index()].inc();
    }

    /// The handshakes counted of `kind`.
    pub fn get(&self, kind: TlsHandshakeKind) -> u64 {
        self.0[kind.index()].get()
    }
}

/// The metrics of this process and their registry. Cheap to share (`Arc` in
/// [`AppState`]); every handle is an atomic.
pub struct Metrics {
    registry: Registry,
    /// `bothy_http_requests_total`, one handle per (group, class).
    http_requests: [[Counter; CLASSES]; GROUPS],
    events_sockets: WatchedGauge,
    events_delivered: Counter,
    events_dropped_slow: Counter,
    /// `bothy_terminal_relay_unpaired_total` for `client` and `host`.
    terminal_relay_unpaired: [Counter; 2],
    /// `bothy_terminal_hosts_connected`.
    control_hosts_connected: WatchedGauge,
    /// `bothy_tls_handshakes_total` by kind.
    tls_handshakes: TlsHandshakes,
}

impl fmt::Debug for Metrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// Registers every metric of the table in the module documentation.
    pub fn new() -> Metrics {
        let mut registry = Registry::default();

        // Counters are registered without `_total`; the encoder appends it.
        let http: Family<HttpLabels, Counter> = Family::default();
        registry.register(
            "bothy_http_requests",
            "HTTP requests answered, by route group and status class",
            http.clone(),
        );
        // `ALL` lists the variants in declaration order, so `ALL[i].index() == i`.
        let http_requests = std::array::from_fn(|g| {
            std::array::from_fn(|c| {
                let labels = [
                    ("route_group", RouteGroup::ALL[g].as_str()),
                    ("status_class", StatusClass::ALL[c].as_str()),
                ];
                // The clone shares the family's atomic.
                http.get_or_create(&labels).clone()
            })
        });

        let events_sockets = WatchedGauge::new();
        registry.register(
            "bothy_events_sockets",
            "Event stream sockets subscribed now",
            events_sockets.gauge.clone(),
        );
        let events_delivered = Counter::default();
        registry.register(
            "bothy_events_delivered",
            "Event messages written to event stream sockets",
            events_delivered.clone(),
        );
        let events_dropped_slow = Counter::default();
        registry.register(
            "bothy_events_dropped_slow",
            "Event stream sockets closed as slow consumers (4014)",
            events_dropped_slow.clone(),
        );

        let unpaired: Family<[(&'static str, &'static str); 1], Counter> = Family::default();
        registry.register(
            "bothy_terminal_relay_unpaired",
            "Relay sides closed with 4102 without a counterpart, by side",
            unpaired.clone(),
        );
        // One statement per series: the family's read guard must be dropped
        // before the next `get_or_create` takes its write lock.
        let unpaired_client = unpaired.get_or_create(&[("side", "client")]).clone();
        let unpaired_host = unpaired.get_or_create(&[("side", "host")]).clone();
        let terminal_relay_unpaired = [unpaired_client, unpaired_host];

        let control_hosts_connected = WatchedGauge::new();
        registry.register(
            "bothy_terminal_hosts_connected",
            "Hosts with a connected control connection on this process",
            control_hosts_connected.gauge.clone(),
        );

        let handshakes: Family<[(&'static str, &'static str); 1], Counter> = Family::default();
        registry.register(
            "bothy_tls_handshakes",
            "TLS handshakes completed on the main listener, full or resumed",
            handshakes.clone(),
        );
        let tls_handshakes = TlsHandshakes(std::array::from_fn(|k| {
            handshakes
                .get_or_create(&[("kind", TlsHandshakeKind::ALL[k].as_str())])
                .clone()
        }));

        Metrics {
            registry,
            http_requests,
            events_sockets,
            events_delivered,
            events_dropped_slow,
            terminal_relay_unpaired,
            control_hosts_connected,
            tls_handshakes,
        }
    }

    /// Counts one answered request.
    pub fn count_request(&self, group: RouteGroup, class: StatusClass) {
        self.http_requests[group.index()][class.index()].inc();
    }

    /// The requests counted for `group` and `class`.
    pub fn requests(&self, group: RouteGroup, class: StatusClass) -> u64 {
        self.http_requests[group.index()][class.index()].get()
    }

    /// `bothy_events_sockets`.
    pub fn events_sockets(&self) -> &WatchedGauge {
        &self.events_sockets
    }

    /// `bothy_events_delivered_total`.
    pub fn events_delivered(&self) -> &Counter {
        &self.events_delivered
    }

    /// `bothy_events_dropped_slow_total`.
    pub fn events_dropped_slow(&self) -> &Counter {
        &self.events_dropped_slow
    }

    /// `bothy_terminal_relay_unpaired_total` of `side` (`client`, the device
    /// stream; anything else counts as `host`).
    pub fn terminal_relay_unpaired(&self, side: &str) -> &Counter {
        if side == "client" {
            &self.terminal_relay_unpaired[0]
        } else {
            &self.terminal_relay_unpaired[1]
        }
    }

    /// `bothy_terminal_hosts_connected`.
    pub fn control_hosts_connected(&self) -> &WatchedGauge {
        &self.control_hosts_connected
    }

    /// `bothy_tls_handshakes_total`, for the accept loop.
    pub fn tls_handshakes(&self) -> &TlsHandshakes {
        &self.tls_handshakes
    }

    /// Every metric in the Prometheus text format (version 0.0.4).
    pub fn render(&self) -> Result<String, fmt::Error> {
        let mut text = String::new();
        prometheus_text::encode(&mut text, &self.registry)?;
        Ok(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_and_classes() {
        assert_eq!(RouteGroup::of_path("/api/v1/events"), RouteGroup::Api);
        assert_eq!(RouteGroup::of_path("/healthz"), RouteGroup::Health);
        assert_eq!(RouteGroup::of_path("/readyz"), RouteGroup::Health);
        assert_eq!(RouteGroup::of_path("/metrics"), RouteGroup::Metrics);
        assert_eq!(RouteGroup::of_path("/metricsx"), RouteGroup::Other);
        assert_eq!(RouteGroup::of_path("/api"), RouteGroup::Other);
        assert_eq!(
            StatusClass::of(StatusCode::SWITCHING_PROTOCOLS),
            StatusClass::Informational
        );
        assert_eq!(
            StatusClass::of(StatusCode::NOT_FOUND),
            StatusClass::ClientError
        );
        assert_eq!(
            StatusClass::of(StatusCode::SERVICE_UNAVAILABLE),
            StatusClass::ServerError
        );
    }

    #[test]
    fn every_series_exists_from_the_start_and_counts() {
        let metrics = Metrics::new();
        metrics.count_request(RouteGroup::Api, StatusClass::ClientError);
        metrics.count_request(RouteGroup::Api, StatusClass::ClientError);
        metrics.events_delivered().inc();
        let text = metrics.render().unwrap_or_default();
        assert!(
            text.contains(
                "bothy_http_requests_total{route_group=\"api\",status_class=\"4xx\"} 2\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "bothy_http_requests_total{route_group=\"other\",status_class=\"1xx\"} 0\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("# TYPE bothy_events_sockets gauge\n"),
            "{text}"
        );
        assert!(text.contains("bothy_events_delivered_total 1\n"), "{text}");
        assert!(
            text.contains("bothy_events_dropped_slow_total 0\n"),
            "{text}"
        );
        assert_eq!(
            metrics.requests(RouteGroup::Api, StatusClass::ClientError),
            2
        );
    }
}
