//! The HTTP side of the metrics ([`crate::metrics`]): the middleware that
//! counts every request by route group and status class, and `GET /metrics`
//! in the Prometheus text format.

use std::fmt;

use axum::extract::{Request, State};
use axum::http::HeaderValue;
use axum::http::header::CONTENT_TYPE;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use prometheus_client::encoding::prometheus_text;

use crate::http::ApiError;
use crate::metrics::{RouteGroup, StatusClass};
use crate::state::AppState;

/// The middleware that counts every request by route group and status class
/// (installed on the whole router, fallbacks included).
pub async fn count_requests(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    // Classify before the handler runs: the path is all we need, and we
    // keep no part of it.
    let group = RouteGroup::of_path(request.uri().path());
    let response = next.run(request).await;
    state
        .metrics()
        .count_request(group, StatusClass::of(response.status()));
    response
}

/// `GET /metrics`: the text format.
pub async fn serve_metrics(State(state): State<AppState>) -> Result<Response, ApiError> {
    let text = state
        .metrics()
        .render()
        .map_err(|error| ApiError::internal(EncodeError(error)))?;
    let mut response = text.into_response();
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static(prometheus_text::CONTENT_TYPE),
    );
    Ok(response)
}

/// Encoding the registry failed (a `fmt::Error`, only possible on a bug).
#[derive(Debug, thiserror::Error)]
#[error("encoding the metrics failed")]
struct EncodeError(#[source] fmt::Error);
