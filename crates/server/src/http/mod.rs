//! HTTP and WebSocket: the axum router under `/api/v1`, errors as
//! `application/problem+json` ([`problem`]), health and readiness ([`health`]),
//! and the accept loop with TLS and graceful shutdown ([`serve`]).
//!
//! Layout:
//! - [`problem`]: [`ApiError`] and the problem codes.
//! - [`health`]: `/healthz`, `/readyz`.
//! - `/metrics`: the Prometheus text format ([`crate::metrics`]); every request
//!   is counted by the layer [`crate::metrics::count_requests`].
//! - [`idempotency`]: `Idempotency-Key`: stored responses replayed, reuse refused.
//! - [`precondition`]: `ETag` from a version and the `If-Match` check.
//! - [`routes`]: the REST routes under `/api/v1` (auth, persons, devices, tokens,
//!   audit) and the event stream WebSocket.
//! - [`api_doc`]: the OpenAPI 3.1 document, generated from the handlers
//!   ([`openapi`]) and served at `GET /api/v1/openapi.json`; `bothy-server
//!   openapi` prints it, `docs/api/openapi.json` holds it.
//! - [`serve`](mod@serve): the accept loop.
//!
//! Every route is registered through `utoipa_axum::routes!` from a handler with
//! `#[utoipa::path]` ([`api`]), so the router and the document come from the same
//! list and cannot drift.

pub mod api_doc;
pub mod health;
pub mod idempotency;
pub mod precondition;
pub mod problem;
pub mod routes;
pub mod serve;

use std::net::IpAddr;
use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;
use axum::{Extension, Router, middleware};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

pub use problem::{ApiError, ProblemCode};
pub use serve::serve;

use crate::clock::SharedClock;
use crate::config::Config;
use crate::db::Db;
use crate::events::LogTail;
use crate::metrics::{self, Metrics};
use crate::pepper::Pepper;
use crate::ratelimit::RateLimiter;
use crate::shutdown::ShutdownListener;
use crate::terminal::links::{ControlLinks, LocalControlLinks};
use crate::terminal::relay::Relay;

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
                control_links: Arc::new(LocalControlLinks::new()),
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
        self.inner.control_links.as_ref()
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

/// Every route with its OpenAPI operation, not yet bound to a state.
pub fn api() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(api_doc::base())
        .routes(routes!(health::healthz))
        .routes(routes!(health::readyz))
        .routes(routes!(serve_metrics))
        .routes(routes!(api_doc::serve_document))
        .merge(routes::router())
}

/// The OpenAPI document of [`router`] (what `GET /api/v1/openapi.json` serves).
pub fn openapi() -> utoipa::openapi::OpenApi {
    api().into_openapi()
}

/// The whole API. The request counter wraps everything, fallbacks included.
pub fn router(state: AppState) -> Router {
    let (router, document) = api().split_for_parts();
    router
        .layer(Extension(api_doc::Document(Arc::new(document))))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(
            state.clone(),
            metrics::count_requests,
        ))
        .with_state(state)
}

/// The process's metrics in the Prometheus text format (version 0.0.4). Needs no
/// credential: operators who expose the API publicly filter it at the edge.
#[utoipa::path(
    get,
    path = "/metrics",
    operation_id = "metrics",
    tag = "platform",
    responses(
        (status = 200, description = "The metrics.", body = String,
            content_type = prometheus_client::encoding::prometheus_text::CONTENT_TYPE),
        api_doc::Internal,
    )
)]
async fn serve_metrics(state: State<AppState>) -> Result<Response, ApiError> {
    metrics::serve_metrics(state).await
}

async fn not_found() -> ApiError {
    ApiError::new(ProblemCode::NotFound)
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(ProblemCode::MethodNotAllowed)
}
