//! HTTP and WebSocket: the axum router under `/api/v1`, errors as
//! `application/problem+json` ([`problem`]), health and readiness ([`health`]),
//! and the accept loop with TLS and graceful shutdown ([`serve`]).
//!
//! Layout:
//! - [`problem`]: [`ApiError`] and the problem codes.
//! - [`health`]: `/healthz`, `/readyz`.
//! - [`serve`](mod@serve): the accept loop.

pub mod health;
pub mod problem;
pub mod serve;

use std::sync::Arc;

use axum::Router;
use axum::routing::get;

pub use problem::{ApiError, ProblemCode};
pub use serve::serve;

use crate::clock::SharedClock;
use crate::config::Config;
use crate::db::Db;

/// What every handler can reach: the configuration, the database and the clock.
/// Cheap to clone (one `Arc`).
#[derive(Clone, Debug)]
pub struct AppState {
    inner: Arc<AppInner>,
}

#[derive(Debug)]
struct AppInner {
    config: Config,
    db: Db,
    clock: SharedClock,
}

impl AppState {
    /// Bundles what the handlers need.
    pub fn new(config: Config, db: Db, clock: SharedClock) -> Self {
        AppState {
            inner: Arc::new(AppInner { config, db, clock }),
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
}

/// The whole API.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
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
