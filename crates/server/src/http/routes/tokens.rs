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
use bothy_api::tokens::{
    ApiToken, ApiTokenList, CreateApiTokenRequest, CreatedApiToken, ServiceKind,
};
use bothy_proto::json::Object;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::body::{JsonBody, path_id, read_conn};
use crate::audit::AuditAction;
use crate::db;
use crate::http::api_doc::{
    Internal, NotFound, PayloadTooLarge, Problem, Unauthenticated, Unavailable,
    UnsupportedMediaType,
};
use crate::http::problem::PROBLEM_JSON;
use crate::http::{ApiError, ProblemCode};
use crate::identity::api_tokens::{self, ServiceName, TokenFor};
use crate::identity::principal::Principal;
use crate::identity::{IdentityError, PrincipalKind};
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
) -> Result<(StatusCode, Json<CreatedApiToken>), ApiError> {
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
        Json(CreatedApiToken {
            token: created.token.expose().to_owned(),
            token_id: db::id_text(&created.info.id),
            principal_id: db::id_text(&created.info.principal_id),
            kind: service_kind(created.info.kind)?,
            name: created.info.name.clone(),
            created_at: created.info.created_at,
        }),
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
) -> Result<Json<ApiTokenList>, ApiError> {
    let now = state.clock().now_ms();
    principal
        .require_owner_person(state.db(), now, AuditAction::IdentityRead)
        .await?;
    let mut conn = read_conn(&state).await?;
    let tokens = api_tokens::list(&mut conn)
        .await?
        .iter()
        .map(token_body)
        .collect::<Result<_, _>>()?;
    Ok(Json(ApiTokenList { tokens }))
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

/// An API token as the list shows it (never its value).
fn token_body(token: &api_tokens::ApiToken) -> Result<ApiToken, ApiError> {
    Ok(ApiToken {
        id: db::id_text(&token.id),
        principal_id: db::id_text(&token.principal_id),
        kind: service_kind(token.kind)?,
        name: token.name.clone(),
        created_by: db::id_text(&token.created_by),
        created_at: token.created_at,
        revoked_at: token.revoked_at,
    })
}

/// The API's kind of an agent or app; a person here is a stored row that
/// breaks the schema (API tokens belong to agents and apps only).
pub(super) fn service_kind(kind: PrincipalKind) -> Result<ServiceKind, ApiError> {
    match kind {
        PrincipalKind::Agent => Ok(ServiceKind::Agent),
        PrincipalKind::App => Ok(ServiceKind::App),
        PrincipalKind::Person => Err(IdentityError::Stored("principals.kind").into()),
    }
}
