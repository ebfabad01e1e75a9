//! `/api/v1/groups`: groups of persons, the recipients of grants besides
//! persons (owners; DESIGN 3.1, 3.2). Agents and apps get `403 forbidden`
//! (`subject_kind_not_allowed`), members `403 forbidden` (`owner_required`),
//! both audited. Every change is audited as `group.manage`.
//!
//! | Route | Request | Response |
//! |---|---|---|
//! | `POST /groups` | `name` | 201: `group` {`id`, `name`, `members[]`} |
//! | `GET /groups` | — | `groups[]`, by name |
//! | `POST /groups/{id}/members` | `person_id` | 200: `group`, `added` |
//! | `POST /groups/{id}/members/{person_id}/remove` | — | 200: `group`, `removed`, `sessions_ended` |
//!
//! Joining and leaving are rights changes ([`crate::permissions::grants`]):
//! joining runs the I6 check (`409 i6_violation`), leaving ends the person's
//! terminal sessions on the hosts where they lose terminal (`access_revoked`).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use bothy_api::groups::{
    AddGroupMemberRequest, CreateGroupRequest, GroupAnswer, GroupList, GroupView, MemberAdded,
    MemberRemoved,
};
use bothy_proto::json::Object;
use sqlx::AnyConnection;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::body::{JsonBody, path_id, read_conn};
use crate::audit::AuditAction;
use crate::db;
use crate::http::api_doc::{
    Internal, NotFound, PayloadTooLarge, Problem, Unauthenticated, Unavailable,
    UnsupportedMediaType,
};
use crate::http::problem::PROBLEM_JSON;
use crate::http::{ApiError, ProblemCode};
use crate::identity::IdentityError;
use crate::identity::groups::{self, Group};
use crate::identity::persons::Username;
use crate::identity::principal::Principal;
use crate::permissions::grants;
use crate::state::AppState;

/// The routes of this file.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list, create))
        .routes(routes!(add_member))
        .routes(routes!(remove_member))
}

async fn group_view(conn: &mut AnyConnection, group: &Group) -> Result<GroupView, ApiError> {
    let members: Vec<String> = groups::members(conn, group.id)
        .await?
        .iter()
        .map(db::id_text)
        .collect();
    Ok(GroupView {
        id: db::id_text(&group.id),
        name: group.name.as_str().to_owned(),
        members,
    })
}

async fn group_now(state: &AppState, id: Uuid) -> Result<GroupView, ApiError> {
    let mut conn = read_conn(state).await?;
    let group = groups::get(&mut conn, id)
        .await?
        .ok_or(IdentityError::NotFound)?;
    group_view(&mut conn, &group).await
}

/// Creates a group (owners).
#[utoipa::path(
    post,
    path = "/api/v1/groups",
    operation_id = "createGroup",
    tag = "groups",
    request_body = CreateGroupRequest,
    security(("bearer" = []), ("console_cookie" = [], "csrf_token" = [])),
    responses(
        (status = 201, description = "Created.", body = GroupAnswer),
        (status = 400, description = "`validation_failed`: the body breaks a rule; besides \
            the body codes, `/name` `invalid` (the username rule).", body = Problem,
            content_type = PROBLEM_JSON),
        Unauthenticated,
        (status = 403, description = "`forbidden` reason `subject_kind_not_allowed` (an agent \
            or app), `owner_required` (a member; both audited) or `csrf_token_invalid`.",
            body = Problem, content_type = PROBLEM_JSON),
        (status = 409, description = "`conflict` reason `group_name_taken`.", body = Problem,
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
) -> Result<(StatusCode, Json<GroupAnswer>), ApiError> {
    let now = state.clock().now_ms();
    let actor = principal
        .require_owner_person(state.db(), now, AuditAction::GroupManage)
        .await?;
    let object = Object::root(&body, &["name"])?;
    let name = Username::parse(object.str("name")?).ok_or_else(|| {
        ApiError::new(ProblemCode::ValidationFailed).with_error("/name", "invalid")
    })?;
    let mut uow = state.db().begin(now).await.map_err(IdentityError::from)?;
    let id = groups::create(&mut uow, actor.actor(), &name).await?;
    uow.commit().await.map_err(IdentityError::from)?;
    Ok((
        StatusCode::CREATED,
        Json(GroupAnswer {
            group: group_now(&state, id).await?,
        }),
    ))
}

/// Every group with its members (owners).
#[utoipa::path(
    get,
    path = "/api/v1/groups",
    operation_id = "listGroups",
    tag = "groups",
    security(("bearer" = []), ("console_cookie" = [])),
    responses(
        (status = 200, description = "The groups, by name.", body = GroupList),
        Unauthenticated,
        (status = 403, description = "`forbidden` reason `subject_kind_not_allowed` (an agent \
            or app) or `owner_required` (a member); both audited as `identity.read`.",
            body = Problem, content_type = PROBLEM_JSON),
        Internal,
        Unavailable,
    )
)]
async fn list(
    State(state): State<AppState>,
    principal: Principal,
) -> Result<Json<GroupList>, ApiError> {
    let now = state.clock().now_ms();
    principal
        .require_owner_person(state.db(), now, AuditAction::IdentityRead)
        .await?;
    let mut conn = read_conn(&state).await?;
    let mut answer = Vec::new();
    for group in groups::list(&mut conn).await? {
        answer.push(group_view(&mut conn, &group).await?);
    }
    Ok(Json(GroupList { groups: answer }))
}

/// Adds a person to a group (owners).
///
/// A rights change: the permission version rises, and the invariant I6 is
/// checked for the person in the same unit of work.
#[utoipa::path(
    post,
    path = "/api/v1/groups/{id}/members",
    operation_id = "addGroupMember",
    tag = "groups",
    request_body = AddGroupMemberRequest,
    params(("id" = String, Path, format = "uuid", description = "The group's ID.")),
    security(("bearer" = []), ("console_cookie" = [], "csrf_token" = [])),
    responses(
        (status = 200, description = "A member (`added` false: already one).",
            body = MemberAdded),
        (status = 400, description = "`validation_failed`: the body breaks a rule; besides \
            the body codes, `/person_id` `unknown_user` (no such person, or deleted).",
            body = Problem, content_type = PROBLEM_JSON),
        Unauthenticated,
        (status = 403, description = "`forbidden` reason `subject_kind_not_allowed` (an agent \
            or app), `owner_required` (a member; both audited) or `csrf_token_invalid`.",
            body = Problem, content_type = PROBLEM_JSON),
        NotFound,
        (status = 409, description = "`i6_violation`: the group holds a grant on a host \
            whose LLM login is personal (audited).", body = Problem,
            content_type = PROBLEM_JSON),
        PayloadTooLarge,
        UnsupportedMediaType,
        Internal,
        Unavailable,
    )
)]
async fn add_member(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Json<MemberAdded>, ApiError> {
    let now = state.clock().now_ms();
    let actor = principal
        .require_owner_person(state.db(), now, AuditAction::GroupManage)
        .await?;
    let id = path_id(&id)?;
    let object = Object::root(&body, &["person_id"])?;
    let person_id = object.uuid("person_id")?;
    let added = grants::add_member(state.db(), now, actor, id, person_id).await?;
    Ok(Json(MemberAdded {
        group: group_now(&state, id).await?,
        added,
    }))
}

/// Removes a person from a group (owners).
///
/// A rights change: the permission version rises, and the person's terminal
/// sessions end (`access_revoked`) on every host where the group's grant was
/// their only terminal.
#[utoipa::path(
    post,
    path = "/api/v1/groups/{id}/members/{person_id}/remove",
    operation_id = "removeGroupMember",
    tag = "groups",
    params(
        ("id" = String, Path, format = "uuid", description = "The group's ID."),
        ("person_id" = String, Path, format = "uuid", description = "The member."),
    ),
    security(("bearer" = []), ("console_cookie" = [], "csrf_token" = [])),
    responses(
        (status = 200, description = "Not a member (any more; `removed` false: was none).",
            body = MemberRemoved),
        Unauthenticated,
        (status = 403, description = "`forbidden` reason `subject_kind_not_allowed` (an agent \
            or app), `owner_required` (a member; both audited) or `csrf_token_invalid`.",
            body = Problem, content_type = PROBLEM_JSON),
        NotFound,
        Internal,
        Unavailable,
    )
)]
async fn remove_member(
    State(state): State<AppState>,
    principal: Principal,
    Path((id, person_id)): Path<(String, String)>,
) -> Result<Json<MemberRemoved>, ApiError> {
    let now = state.clock().now_ms();
    let actor = principal
        .require_owner_person(state.db(), now, AuditAction::GroupManage)
        .await?;
    let id = path_id(&id)?;
    let person_id = path_id(&person_id)?;
    let left = grants::remove_member(state.db(), now, actor, id, person_id).await?;
    Ok(Json(MemberRemoved {
        group: group_now(&state, id).await?,
        removed: left.removed,
        sessions_ended: u64::try_from(left.sessions_ended).unwrap_or(u64::MAX),
    }))
}
