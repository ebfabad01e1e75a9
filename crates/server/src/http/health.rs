//! `/healthz` (the process answers) and `/readyz` (the database answers; 503
//! otherwise). Neither needs a credential, and neither says more than that.

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

use super::AppState;
use super::problem::{ApiError, ProblemCode};

/// `GET /healthz`.
pub async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// `GET /readyz`.
pub async fn readyz(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    state
        .db()
        .ping()
        .await
        .map_err(|error| ApiError::new(ProblemCode::Unavailable).caused_by(error))?;
    Ok(Json(json!({"status": "ready"})))
}
