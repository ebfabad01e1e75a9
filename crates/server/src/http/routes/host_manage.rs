//! Changes of a host after its confirmation (host.manage, owners, step-up,
//! `If-Match`; DESIGN 3.4, spec 2.2, 3.1, 7.2):
//!
//! | Route | Request | Response |
//! |---|---|---|
//! | `PATCH /api/v1/hosts/{host_id}` (updateHost) | `name?`, `assigned_user_id?`, `clear_assigned_user?`, `state?` (`disabled` \| `active` \| `retired`), `assign_session_users?` [{`user_id`, `os_user`}], `end_session_users?` [`user_id`], `reason`, `step_up_id` | 200 `{host}` with `ETag` |
//! | `PUT /api/v1/hosts/{host_id}/llm-credentials` (setHostLlmCredentials) | `llm_credentials`, `credential_holder_id?`, `reason`, `step_up_id` | 200 `{host}` with `ETag` |
//!
//! The rules and their order are in [`crate::hosts::manage`] and
//! [`crate::hosts::llm`]; this file decodes the bodies strictly and checks the
//! forms: `reason` 1..=500 characters without control characters other than
//! line breaks (`required`, `too_long`, `invalid`); `name` per
//! [`manage::check_host_name`]; `state` one of the three (`not_allowed` for
//! `pairing` / `confirming`, else `invalid`); `clear_assigned_user: true` with
//! `assigned_user_id` is `mutually_exclusive` at `/clear_assigned_user`; a
//! `user_id` twice in `end_session_users` is `duplicate` at the later one; at
//! least one change member, else `required` at the root pointer `""`.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bothy_api::hosts::{ManagedHostReply, SetHostLlmCredentialsRequest, UpdateHostRequest};
use bothy_proto::json::Object;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::body::{JsonBody, path_id};
use crate::audit::{AuditAction, REASON_MAX_CHARS};
use crate::hosts::llm::{self, Declaration, SetRequest};
use crate::hosts::manage::{self, AssigneeChange, ManagedHost, UpdateRequest};
use crate::hosts::session_users::Assignment;
use crate::hosts::{HostError, HostState, LlmCredentials};
use crate::http::api_doc::{
    Internal, NotFound, PayloadTooLarge, Problem, Unavailable, UnsupportedMediaType,
};
use crate::http::precondition::{check_if_match, etag};
use crate::http::problem::PROBLEM_JSON;
use crate::http::{ApiError, ProblemCode};
use crate::identity::principal::Principal;
use crate::state::AppState;
use crate::terminal::links::ControlSignal;

/// The routes of this file.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(update_host))
        .routes(routes!(set_llm_credentials))
}

const UPDATE_MEMBERS: &[&str] = &[
    "name",
    "assigned_user_id",
    "clear_assigned_user",
    "state",
    "assign_session_users",
    "end_session_users",
    "reason",
    "step_up_id",
];

const CHANGE_MEMBERS: &[&str] = &[
    "name",
    "assigned_user_id",
    "clear_assigned_user",
    "state",
    "assign_session_users",
    "end_session_users",
];

fn invalid(pointer: &str, code: &'static str) -> ApiError {
    ApiError::new(ProblemCode::ValidationFailed).with_error(pointer, code)
}

/// The mandatory `reason`: the owner's free text, the only one the audit keeps.
pub(super) fn reason(object: &Object<'_>) -> Result<String, ApiError> {
    let text = object.str("reason")?;
    if text.trim().is_empty() {
        return Err(invalid("/reason", "required"));
    }
    if text.chars().count() > REASON_MAX_CHARS {
        return Err(invalid("/reason", "too_long"));
    }
    if text
        .chars()
        .any(|c| c.is_control() && c != '\n' && c != '\r')
    {
        return Err(invalid("/reason", "invalid"));
    }
    Ok(text.to_owned())
}

/// 200 `{host}` with `ETag`.
fn reply(managed: ManagedHost) -> Response {
    (
        StatusCode::OK,
        [(header::ETAG, etag(managed.host.version))],
        Json(ManagedHostReply { host: managed.view }),
    )
        .into_response()
}

fn if_match(headers: &HeaderMap) -> impl FnOnce(i64) -> Result<(), HostError> + '_ {
    move |version| check_if_match(headers, version).map_err(HostError::from)
}

/// Changes a host: name, assignee, state (disable, enable, retire) and the
/// assignments of session users (owners; step-up; `If-Match`).
///
/// Members equal to the current values change nothing; a request that changes
/// nothing answers 200 without a new version (audited with `no_change`).
/// Leaving `active` ends every session of the host; ending an assignment or
/// changing the assignee ends the sessions of the person who loses access.
#[utoipa::path(
    patch,
    path = "/api/v1/hosts/{host_id}",
    operation_id = "updateHost",
    tag = "hosts",
    params(
        ("host_id" = String, Path, format = "uuid", description = "The host's ID."),
        ("If-Match" = String, Header, description = "The host's `ETag` (`\"<version>\"`)."),
    ),
    request_body = UpdateHostRequest,
    security(("bearer" = []), ("console_cookie" = [], "csrf_token" = [])),
    responses(
        (status = 200, description = "The host after the change.", body = ManagedHostReply,
            headers(("ETag" = String, description = "The host's new version."))),
        (status = 400, description = "`validation_failed`: besides the body codes, \
            `/name` `required` | `too_long` | `invalid`, `/reason` `required` | `too_long` | \
            `invalid`, `/state` `not_allowed` | `invalid`, `/clear_assigned_user` \
            `mutually_exclusive`, `/assigned_user_id` `unknown_user`, \
            `/assign_session_users/<i>/user_id` `unknown_user`, \
            `/assign_session_users/<i>/os_user` `session_user_not_on_host`, \
            `/end_session_users/<i>` `unknown_user` | `duplicate`, `\"\"` `required` (no \
            change member).", body = Problem, content_type = PROBLEM_JSON),
        (status = 401, description = "`unauthenticated`, or `step_up_required` (the step-up \
            is missing, expired, consumed or of another login session; audited).",
            body = Problem, content_type = PROBLEM_JSON),
        (status = 403, description = "`forbidden` reason `subject_kind_not_allowed` or \
            `owner_required` (audited), or `csrf_token_invalid`.", body = Problem,
            content_type = PROBLEM_JSON),
        NotFound,
        (status = 409, description = "`invalid_state_transition` (not an edge of 3.1 for \
            updateHost, or enabling after `duplicate_connection`), `conflict` reason \
            `session_user_taken` (the name belongs or belonged to a person on this host, or \
            the person has a valid assignment) or `host_retired`.", body = Problem,
            content_type = PROBLEM_JSON),
        (status = 412, description = "`precondition_failed`: `If-Match` is not the host's \
            version.", body = Problem, content_type = PROBLEM_JSON),
        PayloadTooLarge,
        UnsupportedMediaType,
        (status = 428, description = "`precondition_required`: no `If-Match`.",
            body = Problem, content_type = PROBLEM_JSON),
        Internal,
        Unavailable,
    )
)]
async fn update_host(
    State(state): State<AppState>,
    principal: Principal,
    Path(host_id): Path<String>,
    headers: HeaderMap,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let now = state.clock().now_ms();
    let person = principal
        .require_owner_person(state.db(), now, AuditAction::HostManage)
        .await?;
    let host_id = path_id(&host_id)?;
    let object = Object::root(&body, UPDATE_MEMBERS)?;

    let name = object.opt_str("name")?;
    if let Some(name) = name {
        manage::check_host_name(name).map_err(|code| invalid("/name", code))?;
    }
    let assigned = object
        .opt_member("assigned_user_id")
        .map(|member| member.as_uuid())
        .transpose()?;
    let clear = object
        .opt_member("clear_assigned_user")
        .map(|member| member.as_bool())
        .transpose()?;
    let assignee = match (assigned, clear) {
        (Some(_), Some(true)) => return Err(invalid("/clear_assigned_user", "mutually_exclusive")),
        (Some(id), _) => Some(AssigneeChange::Set(id)),
        (None, Some(true)) => Some(AssigneeChange::Clear),
        (None, _) => None,
    };
    let to_state = match object.opt_str("state")? {
        None => None,
        Some(text) => match HostState::parse(text) {
            Some(s @ (HostState::Disabled | HostState::Active | HostState::Retired)) => Some(s),
            Some(HostState::Pairing | HostState::Confirming) => {
                return Err(invalid("/state", "not_allowed"));
            }
            None => return Err(invalid("/state", "invalid")),
        },
    };
    let mut assign_session_users = Vec::new();
    if let Some(member) = object.opt_member("assign_session_users") {
        for item in member.into_array()?.iter() {
            let item = item.into_object(&["user_id", "os_user"])?;
            assign_session_users.push(Assignment {
                person_id: item.uuid("user_id")?,
                os_user: item.str("os_user")?.to_owned(),
            });
        }
    }
    let mut end_session_users = Vec::new();
    if let Some(member) = object.opt_member("end_session_users") {
        for item in member.into_array()?.iter() {
            let id = item.as_uuid()?;
            if end_session_users.contains(&id) {
                return Err(invalid(item.pointer(), "duplicate"));
            }
            end_session_users.push(id);
        }
    }
    if !CHANGE_MEMBERS.iter().any(|name| object.has(name)) {
        return Err(invalid("", "required"));
    }
    let request = UpdateRequest {
        host_id,
        name: name.map(str::to_owned),
        assignee,
        state: to_state,
        assign_session_users,
        end_session_users,
        reason: reason(&object)?,
        step_up_id: object.uuid("step_up_id")?,
    };
    let managed = manage::update(state.db(), now, person, &request, if_match(&headers)).await?;
    Ok(reply(managed))
}

/// Declares the LLM login of a host (owners; step-up; `If-Match`; 7.2).
///
/// `credential_holder_id` exactly with `personal`. The same declaration again
/// answers 200 without a new version (audited with `no_change`). A change to
/// `personal` or of the holder ends the sessions of everyone else on the host;
/// a change that would leave a grant terminal to someone other than the holder
/// is `409 i6_violation` and changes nothing.
#[utoipa::path(
    put,
    path = "/api/v1/hosts/{host_id}/llm-credentials",
    operation_id = "setHostLlmCredentials",
    tag = "hosts",
    params(
        ("host_id" = String, Path, format = "uuid", description = "The host's ID."),
        ("If-Match" = String, Header, description = "The host's `ETag` (`\"<version>\"`)."),
    ),
    request_body = SetHostLlmCredentialsRequest,
    security(("bearer" = []), ("console_cookie" = [], "csrf_token" = [])),
    responses(
        (status = 200, description = "The host after the declaration.", body = ManagedHostReply,
            headers(("ETag" = String, description = "The host's version."))),
        (status = 400, description = "`validation_failed`: besides the body codes, \
            `/llm_credentials` `invalid`, `/credential_holder_id` `required` (missing with \
            `personal`) | `not_allowed` (with `none` or `organization`) | `unknown_user`, \
            `/reason` `required` | `too_long` | `invalid`.", body = Problem,
            content_type = PROBLEM_JSON),
        (status = 401, description = "`unauthenticated`, or `step_up_required` (audited).",
            body = Problem, content_type = PROBLEM_JSON),
        (status = 403, description = "`forbidden` reason `subject_kind_not_allowed` or \
            `owner_required` (audited), or `csrf_token_invalid`.", body = Problem,
            content_type = PROBLEM_JSON),
        NotFound,
        (status = 409, description = "`conflict` reason `host_retired` (retired is final), or \
            `i6_violation` (audited as a denial with `reason_code: invariant_violation`).",
            body = Problem, content_type = PROBLEM_JSON),
        (status = 412, description = "`precondition_failed`: `If-Match` is not the host's \
            version.", body = Problem, content_type = PROBLEM_JSON),
        PayloadTooLarge,
        UnsupportedMediaType,
        (status = 428, description = "`precondition_required`: no `If-Match`.",
            body = Problem, content_type = PROBLEM_JSON),
        Internal,
        Unavailable,
    )
)]
async fn set_llm_credentials(
    State(state): State<AppState>,
    principal: Principal,
    Path(host_id): Path<String>,
    headers: HeaderMap,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let now = state.clock().now_ms();
    let person = principal
        .require_owner_person(state.db(), now, AuditAction::HostManage)
        .await?;
    let host_id = path_id(&host_id)?;
    let object = Object::root(
        &body,
        &[
            "llm_credentials",
            "credential_holder_id",
            "reason",
            "step_up_id",
        ],
    )?;
    let llm_credentials = LlmCredentials::parse(object.str("llm_credentials")?)
        .ok_or_else(|| invalid("/llm_credentials", "invalid"))?;
    let credential_holder_id = object
        .opt_member("credential_holder_id")
        .map(|member| member.as_uuid())
        .transpose()?;
    let request = SetRequest {
        host_id,
        declaration: Declaration {
            llm_credentials,
            credential_holder_id,
        },
        reason: reason(&object)?,
        step_up_id: object.uuid("step_up_id")?,
    };
    let managed = llm::set(state.db(), now, person, &request, if_match(&headers)).await?;
    // 2.2 item 5: the host service learns the declaration from `ready`,
    // sent again after the commit (an unchanged one is harmless: the host
    // service acts only on a change). Not connected here: it learns it at
    // its next login.
    let _ = state
        .control_links()
        .send(managed.host.id, ControlSignal::ReadyAgain);
    Ok(reply(managed))
}
