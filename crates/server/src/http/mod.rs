//! HTTP and WebSocket: the axum router under `/api/v1`, errors as
//! `application/problem+json` ([`problem`]), health and readiness ([`health`]),
//! and the accept loop with TLS and graceful shutdown ([`serve`]).
//!
//! Layout:
//! - [`problem`]: [`ApiError`] and the problem codes.
//! - [`health`]: `/healthz`, `/readyz`.
//! - [`idempotency`]: `Idempotency-Key`: stored responses replayed, reuse refused.
//! - [`precondition`]: `ETag` from a version and the `If-Match` check.
//! - [`routes`]: the REST routes under `/api/v1` (auth, persons, devices, tokens).
//! - [`serve`](mod@serve): the accept loop.

pub mod health;
pub mod idempotency;
pub mod precondition;
pub mod problem;
pub mod routes;
pub mod serve;

use std::net::IpAddr;
use std::sync::Arc;

use axum::Router;
use axum::routing::get;

pub use problem::{ApiError, ProblemCode};
pub use serve::serve;

use crate::clock::SharedClock;
use crate::config::Config;
use crate::db::Db;
use crate::pepper::Pepper;
use crate::ratelimit::RateLimiter;

/// What every handler can reach: the configuration, the database, the clock,
/// the pepper and the rate limits. Cheap to clone (one `Arc`).
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
    /// `rl.public_auth` per client address: failed logins, enrollments and
    /// step-ups (identity). In memory, per process: several nodes each count
    /// their own share, which only loosens the limit by the number of nodes.
    public_auth: RateLimiter<IpAddr>,
}

impl AppState {
    /// Bundles what the handlers need.
    pub fn new(config: Config, db: Db, clock: SharedClock, pepper: Pepper) -> Self {
        let public_auth = RateLimiter::new(config.rl.public_auth);
        AppState {
            inner: Arc::new(AppInner {
                config,
                db,
                clock,
                pepper,
                public_auth,
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
}

/// The whole API.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .merge(routes::router())
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
}

async fn not_found() -> ApiError {
    ApiError::new(ProblemCode::NotFound)
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(ProblemCode::MethodNotAllowed)
}
