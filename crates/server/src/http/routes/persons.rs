//! `/api/v1/persons` (owners; DESIGN 3.1):
//!
//! | Route | Request | Response |
//! |---|---|---|
//! | `POST /persons` | `username`, `role` (`owner` or `member`) | 201: `person` {`id`, `username`, `role`, `status`, `enrolled`, `created_at`}, `enrollment_code` (shown once), `enrollment_expires_at` |
//! | `GET /persons` | — | `persons[]` |
//!
//! The invited person enrolls with the code (`POST /api/v1/auth/enroll`).

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use bothy_proto::json::Object;
use serde_json::{Value, json};

use super::body::{JsonBody, read_conn};
use crate::audit::AuditAction;
use crate::http::{ApiError, AppState, ProblemCode};
use crate::identity::persons::{self, Username};
use crate::identity::principal::Principal;
use crate::identity::{Role, admin};

/// The routes of this file.
pub fn router() -> Router<AppState> {
    Router::new().route("/api/v1/persons", get(list).post(invite))
}

async fn invite(
    State(state): State<AppState>,
    principal: Principal,
    JsonBody(body): JsonBody,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let now = state.clock().now_ms();
    let actor = principal
        .require_person(state.db(), now, AuditAction::PersonInvite)
        .await?;
    actor
        .require_owner(state.db(), now, AuditAction::PersonInvite)
        .await?;
    let object = Object::root(&body, &["username", "role"])?;
    let username = Username::parse(object.str("username")?).ok_or_else(|| {
        ApiError::new(ProblemCode::ValidationFailed).with_error("/username", "invalid_username")
    })?;
    let role = Role::parse(object.str("role")?).ok_or_else(|| {
        ApiError::new(ProblemCode::ValidationFailed).with_error("/role", "invalid")
    })?;
    let invited = admin::invite(
        state.db(),
        state.pepper(),
        &state.config().auth,
        now,
        actor,
        &username,
        role,
    )
    .await?;
    Ok((
        StatusCode::CREATED,
        Json(json!({
            "person": invited.person.to_json(),
            "enrollment_code": invited.issued.code.expose(),
            "enrollment_expires_at": invited.issued.expires_at,
        })),
    ))
}

async fn list(
    State(state): State<AppState>,
    principal: Principal,
) -> Result<Json<Value>, ApiError> {
    let now = state.clock().now_ms();
    let actor = principal
        .require_person(state.db(), now, AuditAction::IdentityRead)
        .await?;
    actor
        .require_owner(state.db(), now, AuditAction::IdentityRead)
        .await?;
    let mut conn = read_conn(&state).await?;
    let persons: Vec<Value> = persons::list(&mut conn)
        .await?
        .iter()
        .map(persons::Person::to_json)
        .collect();
    Ok(Json(json!({ "persons": persons })))
}
