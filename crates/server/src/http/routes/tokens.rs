//! `/api/v1/tokens`: API tokens of agents and apps (owners; DESIGN 3.1):
//!
//! | Route | Request | Response |
//! |---|---|---|
//! | `POST /tokens` | `kind` (`agent` or `app`) and `name` — a new principal — or `principal_id` of an existing agent or app | 201: `token` (shown once), `token_id`, `principal_id`, `kind`, `name`, `created_at` |
//! | `GET /tokens` | — | `tokens[]` {`id`, `principal_id`, `kind`, `name`, `created_by`, `created_at`, `revoked_at`}, never a value |
//! | `POST /tokens/{id}/revoke` | — | 204 |

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use bothy_proto::json::Object;
use serde_json::{Value, json};

use super::body::{JsonBody, path_id, read_conn};
use crate::audit::AuditAction;
use crate::db;
use crate::http::{ApiError, AppState, ProblemCode};
use crate::identity::PrincipalKind;
use crate::identity::api_tokens::{self, ServiceName, TokenFor};
use crate::identity::principal::Principal;

/// The routes of this file.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/tokens", get(list).post(create))
        .route("/api/v1/tokens/{id}/revoke", post(revoke))
}

fn invalid(pointer: &str, code: &'static str) -> ApiError {
    ApiError::new(ProblemCode::ValidationFailed).with_error(pointer, code)
}

async fn create(
    State(state): State<AppState>,
    principal: Principal,
    JsonBody(body): JsonBody,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let now = state.clock().now_ms();
    let actor = principal
        .require_person(state.db(), now, AuditAction::ApiTokenCreate)
        .await?;
    actor
        .require_owner(state.db(), now, AuditAction::ApiTokenCreate)
        .await?;
    let object = Object::root(&body, &["kind", "name", "principal_id"])?;
    let target = if object.has("principal_id") {
        if object.has("kind") || object.has("name") {
            return Err(invalid("/principal_id", "mutually_exclusive"));
        }
        TokenFor::Existing(object.uuid("principal_id")?)
    } else {
        let kind = match PrincipalKind::parse(object.str("kind")?) {
            Some(kind @ (PrincipalKind::Agent | PrincipalKind::App)) => kind,
            _ => return Err(invalid("/kind", "not_allowed")),
        };
        let name =
            ServiceName::parse(object.str("name")?).ok_or_else(|| invalid("/name", "invalid"))?;
        TokenFor::New(kind, name)
    };
    let created = api_tokens::create(state.db(), state.pepper(), now, actor, target).await?;
    Ok((
        StatusCode::CREATED,
        Json(json!({
            "token": created.token.expose(),
            "token_id": db::id_text(&created.info.id),
            "principal_id": db::id_text(&created.info.principal_id),
            "kind": created.info.kind.as_str(),
            "name": created.info.name,
            "created_at": created.info.created_at,
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
    let tokens: Vec<Value> = api_tokens::list(&mut conn)
        .await?
        .iter()
        .map(api_tokens::ApiToken::to_json)
        .collect();
    Ok(Json(json!({ "tokens": tokens })))
}

async fn revoke(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let now = state.clock().now_ms();
    let actor = principal
        .require_person(state.db(), now, AuditAction::ApiTokenRevoke)
        .await?;
    actor
        .require_owner(state.db(), now, AuditAction::ApiTokenRevoke)
        .await?;
    let id = path_id(&id)?;
    api_tokens::revoke(state.db(), now, actor, id).await?;
    Ok(StatusCode::NO_CONTENT)
}
