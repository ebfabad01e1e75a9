//! `/api/v1/devices` (DESIGN 3.1):
//!
//! | Route | Request | Response |
//! |---|---|---|
//! | `GET /devices` | — | `devices[]` {`id`, `person_id`, `name`, `public_key`, `created_at`, `last_login_at`, `revoked_at`} (own; owners: everyone's) |
//! | `POST /devices/{id}/revoke` | — | 204; the device's login sessions end at once |

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{Value, json};

use super::body::{path_id, read_conn};
use crate::audit::AuditAction;
use crate::http::{ApiError, AppState};
use crate::identity::devices;
use crate::identity::principal::Principal;

/// The routes of this file.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/devices", get(list))
        .route("/api/v1/devices/{id}/revoke", post(revoke))
}

async fn list(
    State(state): State<AppState>,
    principal: Principal,
) -> Result<Json<Value>, ApiError> {
    let now = state.clock().now_ms();
    let person = principal
        .require_person(state.db(), now, AuditAction::IdentityRead)
        .await?;
    let filter = (!person.is_owner()).then_some(person.person_id);
    let mut conn = read_conn(&state).await?;
    let devices: Vec<Value> = devices::list(&mut conn, filter)
        .await?
        .iter()
        .map(devices::Device::to_json)
        .collect();
    Ok(Json(json!({ "devices": devices })))
}

async fn revoke(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let now = state.clock().now_ms();
    let person = principal
        .require_person(state.db(), now, AuditAction::DeviceRevoke)
        .await?;
    let id = path_id(&id)?;
    devices::revoke(state.db(), now, person, id).await?;
    Ok(StatusCode::NO_CONTENT)
}
