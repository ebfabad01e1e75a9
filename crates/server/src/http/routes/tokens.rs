//! `/api/v1/tokens`: API tokens of agents and apps (owners; DESIGN 3.1):
//!
//! | Route | Request | Response |
//! |---|---|---|
//! | `POST /tokens` | `kind` (`agent` or `app`) and `name` — a new principal — or `principal_id` of an existing agent or app | 201: `token` (shown once), `token_id`, `principal_id`, `kind`, `name`, `created_at` |
//! | `GET /tokens` | — | `tokens[]` {`id`, `principal_id`, `kind`, `name`, `created_by`, `created_at`, `revoked_at`}, never a value |
//! | `POST /tokens/{id}/revoke` | — | 204 |

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use bothy_proto::json::Object;
use serde_json::{Value, json};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::body::{JsonBody, path_id, read_conn};
use crate::audit::AuditAction;
use crate::db;
use crate::http::api_doc::{
    Internal, NotFound, PayloadTooLarge, Problem, ServiceKind, Unauthenticated, Unavailable,
    UnsupportedMediaType,
};
use crate::http::problem::PROBLEM_JSON;
use crate::http::{ApiError, ProblemCode};
use crate::identity::PrincipalKind;
use crate::identity::api_tokens::{self, ServiceName, TokenFor};
use crate::identity::principal::Principal;
use crate::state::AppState;

/// The routes of this file.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list, create))
        .routes(routes!(revoke))
}

fn invalid(pointer: &str, code: &'static str) -> ApiError {
    ApiError::new(ProblemCode::ValidationFailed).with_error(pointer, code)
}

/// Creates an API token (owners), for a new agent or app (`kind` and `name`) or
/// for an existing one (`principal_id`).
///
/// The token is shown only in this answer and never stored in plain text.
#[utoipa::path(
    post,
    path = "/api/v1/tokens",
    operation_id = "createApiToken",
    tag = "tokens",
    request_body = CreateApiTokenRequest,
    security(("bearer" = []), ("console_cookie" = [], "csrf_token" = [])),
    responses(
        (status = 201, description = "Created.", body = CreatedApiToken),
        (status = 400, description = "`validation_failed`: the body breaks a rule; besides \
            the body codes, `/principal_id` `mutually_exclusive` (with `kind` or `name`) or \
            `unknown_principal`, `/kind` `not_allowed` (not `agent` or `app`), `/name` \
            `invalid`.", body = Problem, content_type = PROBLEM_JSON),
        Unauthenticated,
        (status = 403, description = "`forbidden` reason `subject_kind_not_allowed` (an agent \
            or app), `owner_required` (a member; both audited) or `csrf_token_invalid`.",
            body = Problem, content_type = PROBLEM_JSON),
        PayloadTooLarge,
        UnsupportedMediaType,
        Internal,
        Unavailable,
    )
)]
async fn create(
    State(state): State<AppState>,
    principal: Principal,
    JsonBody(body): JsonBody,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let now = state.clock().now_ms();
    let actor = principal
        .require_owner_person(state.db(), now, AuditAction::ApiTokenCreate)
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

/// Every API token (owners); never a token's value.
#[utoipa::path(
    get,
    path = "/api/v1/tokens",
    operation_id = "listApiTokens",
    tag = "tokens",
    security(("bearer" = []), ("console_cookie" = [])),
    responses(
        (status = 200, description = "The tokens, oldest first, revoked ones included.",
            body = ApiTokenList),
        Unauthenticated,
        (status = 403, description = "`forbidden` reason `subject_kind_not_allowed` (an agent \
            or app) or `owner_required` (a member); both audited.", body = Problem,
            content_type = PROBLEM_JSON),
        Internal,
        Unavailable,
    )
)]
async fn list(
    State(state): State<AppState>,
    principal: Principal,
) -> Result<Json<Value>, ApiError> {
    let now = state.clock().now_ms();
    principal
        .require_owner_person(state.db(), now, AuditAction::IdentityRead)
        .await?;
    let mut conn = read_conn(&state).await?;
    let tokens: Vec<Value> = api_tokens::list(&mut conn)
        .await?
        .iter()
        .map(api_tokens::ApiToken::to_json)
        .collect();
    Ok(Json(json!({ "tokens": tokens })))
}

/// Revokes an API token (owners); it is refused from the next request on.
#[utoipa::path(
    post,
    path = "/api/v1/tokens/{id}/revoke",
    operation_id = "revokeApiToken",
    tag = "tokens",
    params(("id" = String, Path, format = "uuid", description = "The token's ID (`token_id`).")),
    security(("bearer" = []), ("console_cookie" = [], "csrf_token" = [])),
    responses(
        (status = 204, description = "Revoked (also when it was revoked already)."),
        Unauthenticated,
        (status = 403, description = "`forbidden` reason `subject_kind_not_allowed` (an agent \
            or app), `owner_required` (a member; both audited) or `csrf_token_invalid`.",
            body = Problem, content_type = PROBLEM_JSON),
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
    let actor = principal
        .require_owner_person(state.db(), now, AuditAction::ApiTokenRevoke)
        .await?;
    let id = path_id(&id)?;
    api_tokens::revoke(state.db(), now, actor, id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /api/v1/tokens` (doc-only; the handler reads exactly these members).
/// Either `kind` and `name` (a new principal) or `principal_id` alone.
#[derive(Debug, ToSchema)]
pub struct CreateApiTokenRequest {
    /// `agent` or `app`: the kind of the new principal.
    #[schema(required = false)]
    pub kind: ServiceKind,
    /// The new principal's name: 1 to 64 ASCII letters, digits, `.`, `_`, `-`,
    /// starting with a letter or digit.
    #[schema(required = false, example = "ci-runner")]
    pub name: String,
    /// An existing agent or app.
    #[schema(required = false, format = "uuid")]
    pub principal_id: String,
}

/// `201` of `POST /api/v1/tokens` (doc-only).
#[derive(Debug, ToSchema)]
pub struct CreatedApiToken {
    /// The API token `bothy_tk_...` (shown only now); use it as `Bearer`.
    pub token: String,
    /// The token's ID.
    #[schema(format = "uuid")]
    pub token_id: String,
    /// The agent or app.
    #[schema(format = "uuid")]
    pub principal_id: String,
    /// `agent` or `app`.
    pub kind: ServiceKind,
    /// The principal's name.
    pub name: String,
    /// When the token was created (Unix ms).
    pub created_at: i64,
}

/// `GET /api/v1/tokens` (doc-only).
#[derive(Debug, ToSchema)]
pub struct ApiTokenList {
    /// Oldest first.
    pub tokens: Vec<ApiToken>,
}

/// An API token without its value (doc-only; `api_tokens::ApiToken::to_json`).
#[derive(Debug, ToSchema)]
pub struct ApiToken {
    /// The token's ID.
    #[schema(format = "uuid")]
    pub id: String,
    /// The agent or app.
    #[schema(format = "uuid")]
    pub principal_id: String,
    /// `agent` or `app`.
    pub kind: ServiceKind,
    /// The principal's name.
    pub name: String,
    /// The owner who created it.
    #[schema(format = "uuid")]
    pub created_by: String,
    /// When it was created (Unix ms).
    pub created_at: i64,
    /// When it was revoked (Unix ms); `null` while it is not.
    #[schema(required = true)]
    pub revoked_at: Option<i64>,
}
