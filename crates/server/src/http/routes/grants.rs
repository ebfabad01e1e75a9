//! `/api/v1/grants`: grants terminal on hosts (owners; spec 8.1, 8.3, 7.3;
//! DESIGN 3.2). Agents and apps get `403 forbidden` (`subject_kind_not_allowed`),
//! members `403 forbidden` (`owner_required`), both audited.
//!
//! | Route | Request | Response |
//! |---|---|---|
//! | `POST /grants` | `host_id`, `recipient_kind` (`person` or `group`), `recipient_id`, `expires_at?` (Unix ms) | 201: `grant`, `preview` {`effective`, `hint?` = `terminal_not_effective`, `members?`} |
//! | `GET /grants?host_id=` | query `host_id` (optional) | `grants[]`, oldest first, revoked and expired ones included |
//! | `POST /grants/{id}/revoke` | — | 200: `grant`, `sessions_ended` |
//!
//! The rules live in [`crate::permissions::grants`].

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{StatusCode, Uri};
use bothy_api::grants::{CreateGrantRequest, CreatedGrant, Grant, GrantList, RevokedGrant};
use bothy_proto::json::Object;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::body::{JsonBody, path_id, read_conn};
use super::query::QueryParams;
use crate::audit::AuditAction;
use crate::http::api_doc::{
    Internal, NotFound, PayloadTooLarge, Problem, Unauthenticated, Unavailable,
    UnsupportedMediaType,
};
use crate::http::problem::PROBLEM_JSON;
use crate::http::{ApiError, ProblemCode};
use crate::identity::principal::Principal;
use crate::permissions::grants::{self, NewGrant, RecipientKind};
use crate::state::AppState;

/// The routes of this file.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list, create))
        .routes(routes!(revoke))
}

/// Creates a grant terminal on a host (owners).
///
/// Checked in one unit of work with the invariant I6 (7.3): on a host whose
/// LLM login is personal only its holder may hold a grant. The preview says
/// whether SR10 lets the grant take effect.
#[utoipa::path(
    post,
    path = "/api/v1/grants",
    operation_id = "createGrant",
    tag = "grants",
    request_body = CreateGrantRequest,
    security(("bearer" = []), ("console_cookie" = [], "csrf_token" = [])),
    responses(
        (status = 201, description = "Created.", body = CreatedGrant),
        (status = 400, description = "`validation_failed`: the body breaks a rule; besides \
            the body codes, `/recipient_kind` `invalid`, `/recipient_id` `unknown_user` (no \
            such person, or deleted) or `unknown_group`, `/host_id` `unknown_host`, \
            `/expires_at` `not_in_future`.", body = Problem, content_type = PROBLEM_JSON),
        Unauthenticated,
        (status = 403, description = "`forbidden` reason `subject_kind_not_allowed` (an agent \
            or app), `owner_required` (a member; both audited) or `csrf_token_invalid`.",
            body = Problem, content_type = PROBLEM_JSON),
        (status = 409, description = "`conflict` reason `grant_exists` (a valid grant with \
            the same recipient) or `host_retired`; `i6_violation` (a grant to anyone but the \
            holder of a personal login; audited).", body = Problem,
            content_type = PROBLEM_JSON),
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
) -> Result<(StatusCode, Json<CreatedGrant>), ApiError> {
    let now = state.clock().now_ms();
    let actor = principal
        .require_owner_person(state.db(), now, AuditAction::GrantCreate)
        .await?;
    let object = Object::root(
        &body,
        &["host_id", "recipient_kind", "recipient_id", "expires_at"],
    )?;
    let host_id = object.uuid("host_id")?;
    let recipient_kind = RecipientKind::parse(object.str("recipient_kind")?).ok_or_else(|| {
        ApiError::new(ProblemCode::ValidationFailed).with_error("/recipient_kind", "invalid")
    })?;
    let recipient_id = object.uuid("recipient_id")?;
    let expires_at = match object.opt_member("expires_at") {
        Some(member) => Some(member.as_i64()?),
        None => None,
    };
    let created = grants::create(
        state.db(),
        now,
        actor,
        NewGrant {
            host_id,
            recipient_kind,
            recipient_id,
            expires_at,
        },
    )
    .await?;
    Ok((
        StatusCode::CREATED,
        Json(CreatedGrant {
            grant: created.grant.to_api(now),
            preview: created.preview.to_api(),
        }),
    ))
}

/// Every grant (owners), or those of one host.
#[utoipa::path(
    get,
    path = "/api/v1/grants",
    operation_id = "listGrants",
    tag = "grants",
    params(("host_id" = Option<String>, Query, format = "uuid",
        description = "Only the grants on this host.")),
    security(("bearer" = []), ("console_cookie" = [])),
    responses(
        (status = 200, description = "The grants, oldest first, revoked and expired ones \
            included (`valid` says which hold now).", body = GrantList),
        (status = 400, description = "`validation_failed`: `/query/host_id` `invalid`, \
            `duplicate_parameter`; `unknown_parameter` for any other parameter.",
            body = Problem, content_type = PROBLEM_JSON),
        Unauthenticated,
        (status = 403, description = "`forbidden` reason `subject_kind_not_allowed` (an agent \
            or app) or `owner_required` (a member); both audited as `host.read`.",
            body = Problem, content_type = PROBLEM_JSON),
        Internal,
        Unavailable,
    )
)]
async fn list(
    State(state): State<AppState>,
    principal: Principal,
    uri: Uri,
) -> Result<Json<GrantList>, ApiError> {
    let now = state.clock().now_ms();
    principal
        .require_owner_person(state.db(), now, AuditAction::HostRead)
        .await?;
    let query = QueryParams::parse(&uri, &["host_id"])?;
    let host_id = query.uuid("host_id")?;
    let mut conn = read_conn(&state).await?;
    let grants: Vec<Grant> = grants::list(&mut conn, host_id)
        .await?
        .iter()
        .map(|grant| grant.to_api(now))
        .collect();
    Ok(Json(GrantList { grants }))
}

/// Revokes a grant (owners).
///
/// In the same unit of work the sessions end (`access_revoked`) of each person
/// who loses terminal on the host by it; owners and persons with another valid
/// grant keep theirs.
#[utoipa::path(
    post,
    path = "/api/v1/grants/{id}/revoke",
    operation_id = "revokeGrant",
    tag = "grants",
    params(("id" = String, Path, format = "uuid", description = "The grant's ID.")),
    security(("bearer" = []), ("console_cookie" = [], "csrf_token" = [])),
    responses(
        (status = 200, description = "Revoked (also when it was revoked already: then \
            `sessions_ended` is 0).", body = RevokedGrant),
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
) -> Result<Json<RevokedGrant>, ApiError> {
    let now = state.clock().now_ms();
    let actor = principal
        .require_owner_person(state.db(), now, AuditAction::GrantRevoke)
        .await?;
    let id = path_id(&id)?;
    let revoked = grants::revoke(state.db(), now, actor, id).await?;
    Ok(Json(RevokedGrant {
        grant: revoked.grant.to_api(now),
        sessions_ended: u64::try_from(revoked.sessions_ended).unwrap_or(u64::MAX),
    }))
}
