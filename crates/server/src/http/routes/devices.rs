//! `/api/v1/devices` (DESIGN 3.1):
//!
//! | Route | Request | Response |
//! |---|---|---|
//! | `GET /devices` | — | `devices[]` {`id`, `person_id`, `name`, `public_key`, `created_at`, `last_login_at`, `revoked_at`} (own; owners: everyone's) |
//! | `POST /devices/{id}/revoke` | — | 204; the device's login sessions end at once |

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde_json::{Value, json};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::body::{path_id, read_conn};
use crate::audit::AuditAction;
use crate::http::ApiError;
use crate::http::api_doc::{Internal, NotFound, Problem, Unauthenticated, Unavailable};
use crate::http::problem::PROBLEM_JSON;
use crate::identity::devices;
use crate::identity::principal::Principal;
use crate::state::AppState;

/// The routes of this file.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list))
        .routes(routes!(revoke))
}

/// The caller's devices; an owner's list holds everyone's.
///
/// Oldest first, revoked ones included.
#[utoipa::path(
    get,
    path = "/api/v1/devices",
    operation_id = "listDevices",
    tag = "devices",
    security(("bearer" = []), ("console_cookie" = [])),
    responses(
        (status = 200, description = "The devices.", body = DeviceList),
        Unauthenticated,
        (status = 403, description = "`forbidden` reason `subject_kind_not_allowed`: an agent \
            or app (audited).", body = Problem, content_type = PROBLEM_JSON),
        Internal,
        Unavailable,
    )
)]
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

/// Revokes one of the caller's devices (owners: anyone's); its login sessions end
/// at once, and a later login with its key is refused (`403 device_revoked`).
#[utoipa::path(
    post,
    path = "/api/v1/devices/{id}/revoke",
    operation_id = "revokeDevice",
    tag = "devices",
    params(("id" = String, Path, format = "uuid", description = "The device's ID.")),
    security(("bearer" = []), ("console_cookie" = [], "csrf_token" = [])),
    responses(
        (status = 204, description = "Revoked (also when it was revoked already)."),
        Unauthenticated,
        (status = 403, description = "`forbidden` reason `subject_kind_not_allowed` (an agent \
            or app, audited) or `csrf_token_invalid` (console cookie without the session's \
            CSRF header).", body = Problem, content_type = PROBLEM_JSON),
        NotFound,
        Internal,
        Unavailable,
    )
)]
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

/// `GET /api/v1/devices` (doc-only).
#[derive(Debug, ToSchema)]
pub struct DeviceList {
    /// Oldest first.
    pub devices: Vec<Device>,
}

/// A device: the Ed25519 key of a CLI login (doc-only; `devices::Device::to_json`).
#[derive(Debug, ToSchema)]
pub struct Device {
    /// The device's ID.
    #[schema(format = "uuid")]
    pub id: String,
    /// Whose device it is.
    #[schema(format = "uuid")]
    pub person_id: String,
    /// The `device_name` of the last login with it.
    pub name: String,
    /// The raw Ed25519 public key, base64url without padding.
    pub public_key: String,
    /// The first login with it (Unix ms).
    pub created_at: i64,
    /// The last login with it (Unix ms).
    pub last_login_at: i64,
    /// When it was revoked (Unix ms); `null` while it is not.
    #[schema(required = true)]
    pub revoked_at: Option<i64>,
}
