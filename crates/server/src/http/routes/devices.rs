//! `/api/v1/devices` (DESIGN 3.1):
//!
//! | Route | Request | Response |
//! |---|---|---|
//! | `GET /devices` | — | `devices[]` {`id`, `person_id`, `name`, `public_key`, `created_at`, `last_login_at`, `revoked_at`} (own; owners: everyone's) |
//! | `POST /devices/{id}/revoke` | — | 204; the device's login sessions end at once |

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use bothy_api::devices::{Device, DeviceList};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::body::{path_id, read_conn};
use crate::audit::AuditAction;
use crate::db;
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
) -> Result<Json<DeviceList>, ApiError> {
    let now = state.clock().now_ms();
    let person = principal
        .require_person(state.db(), now, AuditAction::IdentityRead)
        .await?;
    let filter = (!person.is_owner()).then_some(person.person_id);
    let mut conn = read_conn(&state).await?;
    let devices = devices::list(&mut conn, filter)
        .await?
        .iter()
        .map(device_body)
        .collect();
    Ok(Json(DeviceList { devices }))
}

fn device_body(device: &devices::Device) -> Device {
    Device {
        id: db::id_text(&device.id),
        person_id: db::id_text(&device.person_id),
        name: device.name.clone(),
        public_key: device.public_key.clone(),
        created_at: device.created_at,
        last_login_at: device.last_login_at,
        revoked_at: device.revoked_at,
    }
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
