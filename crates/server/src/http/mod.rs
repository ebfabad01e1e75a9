//! HTTP and WebSocket: the axum router under `/api/v1`, errors as
//! `application/problem+json` ([`problem`]), health and readiness ([`health`]),
//! and the accept loop with TLS and graceful shutdown ([`serve`]).
//!
//! Layout:
//! - [`problem`]: [`ApiError`], the problem codes, and the one mapping of the
//!   domain's errors (identity, hosts, terminal sessions) to problems.
//! - [`extract`]: the authenticated principal of a request (bearer token or
//!   the console's cookie with its CSRF header).
//! - [`health`]: `/healthz`, `/readyz`.
//! - [`metrics`](mod@metrics): `/metrics` in the Prometheus text format
//!   ([`crate::metrics`] holds the registry); every request is counted by the
//!   layer [`metrics::count_requests`].
//! - [`idempotency`]: `Idempotency-Key`: stored responses replayed, reuse refused.
//! - [`precondition`]: `ETag` from a version and the `If-Match` check.
//! - [`routes`]: the REST routes under `/api/v1` (auth, persons, devices, tokens,
//!   audit) and the event stream WebSocket.
//! - [`api_doc`]: the OpenAPI 3.1 document, generated from the handlers
//!   ([`openapi`]) and served at `GET /api/v1/openapi.json`; `bothy-server
//!   openapi` prints it, `docs/api/openapi.json` holds it.
//! - [`serve`](mod@serve): the accept loop.
//! - [`console`]: the web console's page and bundle at `/` and `/assets/`
//!   (embedded at build time), with its security headers.
//!
//! Every route is registered through `utoipa_axum::routes!` from a handler with
//! `#[utoipa::path]` ([`api`]), so the router and the document come from the same
//! list and cannot drift.

pub mod api_doc;
pub mod console;
pub mod extract;
pub mod health;
pub mod idempotency;
pub mod metrics;
pub mod precondition;
pub mod problem;
pub mod routes;
pub mod serve;
mod tls_stream;
pub(crate) mod upgrade;

use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;
use axum::{Extension, Router, middleware};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub use problem::{ApiError, ProblemCode};
pub use serve::serve;

use crate::state::AppState;

/// Every route with its OpenAPI operation, not yet bound to a state.
pub fn api() -> OpenApiRouter<AppState> {
    let mut api = OpenApiRouter::with_openapi(api_doc::base())
        .routes(routes!(health::healthz))
        .routes(routes!(health::readyz))
        .routes(routes!(serve_metrics))
        .routes(routes!(api_doc::serve_document))
        .routes(routes!(console::page))
        .routes(routes!(console::script))
        .routes(routes!(console::style))
        .routes(routes!(console::stream_worker))
        .merge(routes::router());
    api_doc::code_members(api.get_openapi_mut());
    api
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
        .layer(middleware::from_fn(console::security_headers))
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
