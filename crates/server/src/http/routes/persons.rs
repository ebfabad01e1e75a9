//! `/api/v1/persons` (owners; DESIGN 3.1):
//!
//! | Route | Request | Response |
//! |---|---|---|
//! | `POST /persons` | `username`, `role` (`owner` or `member`) | 201: `person` {`id`, `username`, `role`, `status`, `enrolled`, `created_at`}, `enrollment_code` (shown once), `enrollment_expires_at` |
//! | `GET /persons` | — | `persons[]` |
//! | `POST /persons/{id}/disable` | `reason`, `step_up_id` | 200: `person`, `changed`, `sessions_ended` (login sessions); `409 conflict` `last_owner` |
//! | `POST /persons/{id}/enable` | — | 200: `person`, `changed`; `409 i6_violation` if a grant of theirs would break I6 |
//! | `POST /persons/{id}/role` | `role` (`owner` or `member`), `reason`, `step_up_id` | 200: `person`, `changed`, `sessions_ended`; `409 conflict` `last_owner` |
//!
//! The invited person enrolls with the code (`POST /api/v1/auth/enroll`).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use bothy_api::persons::{
    DisablePersonRequest, DisabledPerson, EnabledPerson, InvitePersonRequest, InvitedPerson,
    Person, PersonList, RoleSet, SetRoleRequest,
};
use bothy_proto::json::Object;
use utoipa::IntoResponses;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::body::{JsonBody, path_id, read_conn};
use super::host_manage;
use crate::audit::AuditAction;
use crate::db;
use crate::http::api_doc::{
    Internal, NotFound, PayloadTooLarge, Problem, Unauthenticated, Unavailable,
    UnsupportedMediaType, ValidationFailed,
};
use crate::http::problem::PROBLEM_JSON;
use crate::http::{ApiError, ProblemCode};
use crate::identity::admin::{PersonRef, RoleAuthority};
use crate::identity::persons::{self, Username};
use crate::identity::principal::Principal;
use crate::identity::{PersonStatus, Role, admin};
use crate::state::AppState;

/// The routes of this file.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list, invite))
        .routes(routes!(disable))
        .routes(routes!(enable))
        .routes(routes!(set_role))
}

/// Invites a person: creates them with a one-time enrollment code (owners).
///
/// The code is shown only in this answer; the person enrolls with it
/// (`POST /api/v1/auth/enroll`) before `enrollment_expires_at`.
#[utoipa::path(
    post,
    path = "/api/v1/persons",
    operation_id = "invitePerson",
    tag = "persons",
    request_body = InvitePersonRequest,
    security(("bearer" = []), ("console_cookie" = [], "csrf_token" = [])),
    responses(
        (status = 201, description = "Invited.", body = InvitedPerson),
        ValidationFailed,
        Unauthenticated,
        OwnerRequired,
        (status = 409, description = "`conflict` reason `username_taken` (compared \
            case-insensitively).", body = Problem, content_type = PROBLEM_JSON),
        PayloadTooLarge,
        UnsupportedMediaType,
        Internal,
        Unavailable,
    )
)]
async fn invite(
    State(state): State<AppState>,
    principal: Principal,
    JsonBody(body): JsonBody,
) -> Result<(StatusCode, Json<InvitedPerson>), ApiError> {
    let now = state.clock().now_ms();
    let actor = principal
        .require_owner_person(state.db(), now, AuditAction::PersonInvite)
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
        Json(InvitedPerson {
            person: person_body(&invited.person),
            enrollment_code: invited.issued.code.expose().to_owned(),
            enrollment_expires_at: invited.issued.expires_at,
        }),
    ))
}

/// Every person (owners).
#[utoipa::path(
    get,
    path = "/api/v1/persons",
    operation_id = "listPersons",
    tag = "persons",
    security(("bearer" = []), ("console_cookie" = [])),
    responses(
        (status = 200, description = "The persons.", body = PersonList),
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
) -> Result<Json<PersonList>, ApiError> {
    let now = state.clock().now_ms();
    principal
        .require_owner_person(state.db(), now, AuditAction::IdentityRead)
        .await?;
    let mut conn = read_conn(&state).await?;
    let persons = persons::list(&mut conn)
        .await?
        .iter()
        .map(person_body)
        .collect();
    Ok(Json(PersonList { persons }))
}

/// Disables a person (owners, with a step-up and a reason).
///
/// In one unit of work the status becomes `disabled`, every login session of
/// the person ends (`user_disabled`) and with them every terminal session of
/// theirs (`user_disabled`, 8.3); their grants stay but are dormant. The last
/// active owner is never disabled (`409 conflict` `last_owner`), also not by
/// themself. Disabled already changes nothing (`changed: false`; the step-up
/// is still consumed and the call audited).
#[utoipa::path(
    post,
    path = "/api/v1/persons/{id}/disable",
    operation_id = "disablePerson",
    tag = "persons",
    params(("id" = String, Path, format = "uuid", description = "The person's ID.")),
    request_body = DisablePersonRequest,
    security(("bearer" = []), ("console_cookie" = [], "csrf_token" = [])),
    responses(
        (status = 200, description = "Disabled (`changed` false: was disabled already).",
            body = DisabledPerson),
        (status = 400, description = "`validation_failed`: the body codes, `/reason` \
            `required` | `too_long` | `invalid`.", body = Problem,
            content_type = PROBLEM_JSON),
        StepUpRequired,
        OwnerRequired,
        NotFound,
        LastOwner,
        PayloadTooLarge,
        UnsupportedMediaType,
        Internal,
        Unavailable,
    )
)]
async fn disable(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Json<DisabledPerson>, ApiError> {
    let now = state.clock().now_ms();
    let actor = principal
        .require_owner_person(state.db(), now, AuditAction::PersonDisable)
        .await?;
    let id = path_id(&id)?;
    let object = Object::root(&body, &["reason", "step_up_id"])?;
    let reason = host_manage::reason(&object)?;
    let step_up_id = object.uuid("step_up_id")?;
    let authority = RoleAuthority::Owner {
        person: actor,
        step_up_id,
        reason: &reason,
    };
    let disabled = admin::disable(state.db(), now, PersonRef::Id(id), authority).await?;
    Ok(Json(DisabledPerson {
        person: person_body(&disabled.person),
        changed: disabled.changed,
        sessions_ended: count(disabled.sessions_ended.len()),
    }))
}

/// Enables a disabled person again (owners).
///
/// A rights change: their dormant grants hold again, so the permission version
/// rises and the invariant I6 is checked for them in the same unit of work.
#[utoipa::path(
    post,
    path = "/api/v1/persons/{id}/enable",
    operation_id = "enablePerson",
    tag = "persons",
    params(("id" = String, Path, format = "uuid", description = "The person's ID.")),
    security(("bearer" = []), ("console_cookie" = [], "csrf_token" = [])),
    responses(
        (status = 200, description = "Active (`changed` false: was active already).",
            body = EnabledPerson),
        Unauthenticated,
        OwnerRequired,
        NotFound,
        (status = 409, description = "`i6_violation`: a grant of theirs (directly or through \
            a group) is on a host whose LLM login is another person's personal subscription \
            (audited; nothing changed).", body = Problem, content_type = PROBLEM_JSON),
        Internal,
        Unavailable,
    )
)]
async fn enable(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> Result<Json<EnabledPerson>, ApiError> {
    let now = state.clock().now_ms();
    let actor = principal
        .require_owner_person(state.db(), now, AuditAction::PersonEnable)
        .await?;
    let id = path_id(&id)?;
    let enabled = admin::enable(state.db(), now, actor.actor(), PersonRef::Id(id)).await?;
    Ok(Json(EnabledPerson {
        person: person_body(&enabled.person),
        changed: enabled.changed,
    }))
}

/// Sets a person's role (owners, with a step-up and a reason).
///
/// A rights change: the permission version rises. Removing the owner role
/// ends, in the same unit of work, every terminal session of the person that
/// a member may not have (the server host, a host not assigned to them, a
/// host without a valid grant terminal) with `access_revoked`. The last
/// active owner keeps the role (`409 conflict` `last_owner`). The same role
/// again changes nothing (`changed: false`; the step-up is still consumed).
#[utoipa::path(
    post,
    path = "/api/v1/persons/{id}/role",
    operation_id = "setPersonRole",
    tag = "persons",
    params(("id" = String, Path, format = "uuid", description = "The person's ID.")),
    request_body = SetRoleRequest,
    security(("bearer" = []), ("console_cookie" = [], "csrf_token" = [])),
    responses(
        (status = 200, description = "The role is set.", body = RoleSet),
        (status = 400, description = "`validation_failed`: the body codes, `/role` `invalid`, \
            `/reason` `required` | `too_long` | `invalid`.", body = Problem,
            content_type = PROBLEM_JSON),
        StepUpRequired,
        OwnerRequired,
        NotFound,
        LastOwner,
        PayloadTooLarge,
        UnsupportedMediaType,
        Internal,
        Unavailable,
    )
)]
async fn set_role(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Json<RoleSet>, ApiError> {
    let now = state.clock().now_ms();
    let actor = principal
        .require_owner_person(state.db(), now, AuditAction::PersonSetRole)
        .await?;
    let id = path_id(&id)?;
    let object = Object::root(&body, &["role", "reason", "step_up_id"])?;
    let role = Role::parse(object.str("role")?).ok_or_else(|| {
        ApiError::new(ProblemCode::ValidationFailed).with_error("/role", "invalid")
    })?;
    let reason = host_manage::reason(&object)?;
    let step_up_id = object.uuid("step_up_id")?;
    let authority = RoleAuthority::Owner {
        person: actor,
        step_up_id,
        reason: &reason,
    };
    let set = admin::set_role(state.db(), now, PersonRef::Id(id), role, authority).await?;
    Ok(Json(RoleSet {
        person: person_body(&set.person),
        changed: set.changed,
        sessions_ended: count(set.sessions_ended),
    }))
}

/// A person as the routes show them.
fn person_body(person: &persons::Person) -> Person {
    Person {
        id: db::id_text(&person.id),
        username: person.username.as_str().to_owned(),
        role: role(person.role),
        status: match person.status {
            PersonStatus::Active => bothy_api::persons::PersonStatus::Active,
            PersonStatus::Disabled => bothy_api::persons::PersonStatus::Disabled,
            PersonStatus::Deleted => bothy_api::persons::PersonStatus::Deleted,
        },
        enrolled: person.enrolled,
        created_at: person.created_at,
    }
}

/// The API's role of a person's role.
pub(super) fn role(role: Role) -> bothy_api::persons::Role {
    match role {
        Role::Owner => bothy_api::persons::Role::Owner,
        Role::Member => bothy_api::persons::Role::Member,
    }
}

/// A count of ended sessions on the wire.
fn count(ended: usize) -> u64 {
    u64::try_from(ended).unwrap_or(u64::MAX)
}

/// `403` of the routes that change persons (doc-only).
#[derive(Debug, IntoResponses)]
#[response(
    status = 403,
    description = "`forbidden` reason `subject_kind_not_allowed` (an agent or app), \
        `owner_required` (a member; both audited) or `csrf_token_invalid`.",
    content_type = "application/problem+json"
)]
pub struct OwnerRequired(pub Problem);

/// `401` of the routes that take a step-up (doc-only).
#[derive(Debug, IntoResponses)]
#[response(
    status = 401,
    description = "`unauthenticated`, or `step_up_required` (the step-up is missing, expired, \
        consumed or of another login session; audited).",
    content_type = "application/problem+json"
)]
pub struct StepUpRequired(pub Problem);

/// `409 last_owner` of the role change and the disable (doc-only).
#[derive(Debug, IntoResponses)]
#[response(
    status = 409,
    description = "`conflict` reason `last_owner`: the person is the last active owner \
        (audited; nothing changed).",
    content_type = "application/problem+json"
)]
pub struct LastOwner(pub Problem);
