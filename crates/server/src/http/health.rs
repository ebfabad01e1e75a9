//! `/healthz` (the process answers) and `/readyz` (the database takes a write:
//! [`crate::db::Db::probe_write`]; 503 otherwise, also while it answers reads
//! only). Neither needs a credential, and neither says more than that.

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};
use utoipa::ToSchema;

use super::api_doc::Unavailable;
use super::problem::{ApiError, ProblemCode};
use crate::state::AppState;

/// The process answers.
#[utoipa::path(
    get,
    path = "/healthz",
    operation_id = "healthz",
    tag = "platform",
    responses((status = 200, description = "`{\"status\": \"ok\"}`.", body = HealthStatus))
)]
pub async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// The process answers and its database takes a write.
#[utoipa::path(
    get,
    path = "/readyz",
    operation_id = "readyz",
    tag = "platform",
    responses(
        (status = 200, description = "`{\"status\": \"ready\"}`.", body = HealthStatus),
        Unavailable,
    )
)]
pub async fn readyz(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    state
        .db()
        .probe_write(state.clock().now_ms())
        .await
        .map_err(|error| ApiError::new(ProblemCode::Unavailable).caused_by(error))?;
    Ok(Json(json!({"status": "ready"})))
}

/// The answer of `/healthz` and `/readyz` (doc-only).
#[derive(Debug, ToSchema)]
pub struct HealthStatus {
    /// `ok` (`/healthz`) or `ready` (`/readyz`).
    #[schema(schema_with = statuses)]
    pub status: String,
}

fn statuses() -> utoipa::openapi::schema::Object {
    super::api_doc::string_enum(["ok", "ready"])
}
