//! The application's state: the services every entry point reaches — the
//! configuration, the database, the clock, the pepper, the rate limits, the
//! log tail, the metrics, the shutdown signal, the control connections and
//! the relay of this process. It belongs to no transport: the HTTP handlers,
//! the WebSocket tasks and the jobs take it alike (issue 17: the domain
//! knows no HTTP).

use std::net::IpAddr;
use std::sync::Arc;

use uuid::Uuid;

use crate::clock::SharedClock;
use crate::config::Config;
use crate::db::Db;
use crate::events::LogTail;
use crate::metrics::Metrics;
use crate::pepper::Pepper;
use crate::ratelimit::RateLimiter;
use crate::shutdown::ShutdownListener;
use crate::terminal::links::{ControlLinks, LocalControlLinks};
use crate::terminal::relay::registry::Relay;
use crate::terminal::signals::presence::{self, NodeLinks, PresenceView};

/// What every handler can reach: the configuration, the database, the clock,
/// the pepper, the rate limits, the log tail, the metrics and the shutdown
/// signal. Cheap to clone (one `Arc`).
#[derive(Clone, Debug)]
pub struct AppState {
    inner: Arc<AppInner>,
}

#[derive(Debug)]
struct AppInner {
    config: Config,
    db: Db,
    clock: SharedClock,
    /// The HMAC key of stored tokens and codes (redacted in `Debug`).
    pepper: Pepper,
    /// `rl.public_auth` per client address: failed logins and enrollments
    /// (identity), failed credential checks of the terminal channels
    /// (6.3, [`crate::terminal::channel_limits`]). In memory, per process: several nodes each count
    /// their own share, which only loosens the limit by the number of nodes.
    public_auth: RateLimiter<IpAddr>,
    /// `rl.terminal` per person: openTerminalSession, attachTerminalSession and
    /// the device stream's identify (6.3). In memory, per process, like
    /// `public_auth`.
    terminal_limit: RateLimiter<Uuid>,
    /// `rl.host` per host: the control and data connections of the host
    /// service (6.3). In memory, per process, like `public_auth`.
    host_limit: RateLimiter<Uuid>,
    /// `rl.step_up_person` per person and `rl.step_up_address` per client
    /// address: failed step-ups, counted in both (docs/decisions.md D-353).
    step_up_person: RateLimiter<Uuid>,
    step_up_address: RateLimiter<IpAddr>,
    /// The log tail of this process: event stream sockets subscribe here.
    events: LogTail,
    /// The process's metrics (`/metrics`).
    metrics: Metrics,
    /// The server's shutdown, which WebSocket tasks select on (4013).
    shutdown: ShutdownListener,
    /// The control connections of this process (3.4, 3.5).
    control_links: Arc<LocalControlLinks>,
    /// The hosts connected to other nodes (spec 9 "Presence across nodes").
    presence: Arc<PresenceView>,
    /// The port over both: "host connected" of 6.1 step 2.
    node_links: NodeLinks,
    /// The relay of this process (6.1, 6.2).
    relay: Arc<Relay>,
}

impl AppState {
    /// Bundles what the handlers need; `events` is the running log tail and
    /// `shutdown` the signal of the server that serves this state.
    pub fn new(
        config: Config,
        db: Db,
        clock: SharedClock,
        pepper: Pepper,
        events: LogTail,
        shutdown: ShutdownListener,
    ) -> Self {
        let public_auth = RateLimiter::new(config.rl.public_auth);
        let terminal_limit = RateLimiter::new(config.rl.terminal);
        let host_limit = RateLimiter::new(config.rl.host);
        let step_up_person = RateLimiter::new(config.rl.step_up_person);
        let step_up_address = RateLimiter::new(config.rl.step_up_address);
        let control_links = Arc::new(LocalControlLinks::new());
        let presence = Arc::new(PresenceView::new());
        let node_links = NodeLinks::new(
            Arc::clone(&control_links),
            Arc::clone(&presence),
            clock.clone(),
            presence::window_ms(&config.terminal),
        );
        AppState {
            inner: Arc::new(AppInner {
                config,
                db,
                clock,
                pepper,
                public_auth,
                terminal_limit,
                host_limit,
                step_up_person,
                step_up_address,
                events,
                metrics: Metrics::new(),
                shutdown,
                control_links,
                presence,
                node_links,
                relay: Arc::new(Relay::new()),
            }),
        }
    }

    /// The effective configuration.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// The database.
    pub fn db(&self) -> &Db {
        &self.inner.db
    }

    /// The clock.
    pub fn clock(&self) -> &SharedClock {
        &self.inner.clock
    }

    /// The pepper.
    pub fn pepper(&self) -> &Pepper {
        &self.inner.pepper
    }

    /// The `rl.public_auth` buckets, by client address.
    pub fn public_auth_limit(&self) -> &RateLimiter<IpAddr> {
        &self.inner.public_auth
    }

    /// The `rl.terminal` buckets, by person.
    pub fn terminal_limit(&self) -> &RateLimiter<Uuid> {
        &self.inner.terminal_limit
    }

    /// The `rl.host` buckets, by host.
    pub fn host_limit(&self) -> &RateLimiter<Uuid> {
        &self.inner.host_limit
    }

    /// The `rl.step_up_person` buckets, by person.
    pub fn step_up_person_limit(&self) -> &RateLimiter<Uuid> {
        &self.inner.step_up_person
    }

    /// The `rl.step_up_address` buckets, by client address.
    pub fn step_up_address_limit(&self) -> &RateLimiter<IpAddr> {
        &self.inner.step_up_address
    }

    /// The log tail.
    pub fn events(&self) -> &LogTail {
        &self.inner.events
    }

    /// The metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// The shutdown signal.
    pub fn shutdown(&self) -> &ShutdownListener {
        &self.inner.shutdown
    }

    /// The port to the control connections (is a host connected, send it a
    /// signal), for every caller outside the control connection itself.
    pub fn control_links(&self) -> &dyn ControlLinks {
        &self.inner.node_links
    }

    /// This node's view of the hosts connected to other nodes (spec 9).
    pub fn presence(&self) -> &PresenceView {
        &self.inner.presence
    }

    /// The registry of this process's control connections, for the control
    /// connection's own registration.
    pub fn local_control_links(&self) -> &LocalControlLinks {
        &self.inner.control_links
    }

    /// The relay.
    pub fn relay(&self) -> &Relay {
        &self.inner.relay
    }
}
