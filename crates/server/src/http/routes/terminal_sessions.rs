//! Terminal sessions (DESIGN 3.4; spec 6.1–6.3, 6.6, 13; the rules and their
//! order are in [`crate::terminal::sessions`]):
//!
//! | Route | Request | Response |
//! |---|---|---|
//! | `POST /api/v1/hosts/{host_id}/terminal/sessions` (openTerminalSession; persons, step-up, `rl.terminal`) | `profile`, `columns`, `rows`, `client_ephemeral_key_hash`, `workdir_index?`, `step_up_id?`, `pin_changed?` | 201 `{session_id, token, stream_path, noise_public_key, key_fingerprint, key_generation, expires_at}` |
//! | `POST /api/v1/terminal/sessions/{session_id}/attach-challenge` (the session's person) | — | 200 `{nonce, expires_at}` |
//! | `POST /api/v1/terminal/sessions/{session_id}/attach` (attachTerminalSession; the session's person, step-up or quick reattach, `rl.terminal`) | `client_ephemeral_key_hash`, `step_up_id?`, `device_proof? {nonce, signature}`, `pin_changed?` | 200, as for open |
//! | `POST /api/v1/terminal/sessions/{session_id}/close` (closeTerminalSession; the person or an owner) | — | 200 `{session_id, state, close_reason}` |
//! | `GET /api/v1/terminal/sessions` (own sessions; owners with `host_id`: every session of the host; keyset paging, newest first) | `?host_id=&state=open\|closed&after=&limit=` | `{sessions[], next?}` |
//! | `GET /api/v1/terminal/sessions/{session_id}` (the person or an owner) | — | the session |
//!
//! Forms checked here: `profile` a string (whether the host offers it is the
//! module's `profile_unknown`), `columns` and `rows` integers in
//! 1..=[`SIZE_MAX`] (`/columns` `out_of_range`), `workdir_index` a
//! non-negative integer, `pin_changed` a boolean, `device_proof` exactly
//! `{nonce, signature}`.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use bothy_api::terminal::{
    AttachChallenge, AttachTerminalSessionRequest, ClosedTerminalSession,
    OpenTerminalSessionRequest, TerminalSession, TerminalSessionGrant, TerminalSessionList,
};
use bothy_proto::json::Object;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::body::{JsonBody, path_id};
use super::query::{self, QueryParams};
use crate::db;
use crate::http::api_doc::{
    Internal, NotFound, PayloadTooLarge, Problem, RateLimited, Unauthenticated, Unavailable,
    UnsupportedMediaType,
};
use crate::http::problem::PROBLEM_JSON;
use crate::http::{ApiError, ProblemCode};
use crate::identity::principal::Principal;
use crate::state::AppState;
use crate::terminal::sessions::{
    self, AttachRequest, DeviceProof, OpenRequest, SIZE_MAX, SessionError,
};

/// The routes of this file.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(open_terminal_session))
        .routes(routes!(list_terminal_sessions))
        .routes(routes!(get_terminal_session))
        .routes(routes!(attach_challenge))
        .routes(routes!(attach_terminal_session))
        .routes(routes!(close_terminal_session))
}

fn invalid(pointer: &str, code: &'static str) -> ApiError {
    ApiError::new(ProblemCode::ValidationFailed).with_error(pointer, code)
}

fn size(object: &Object<'_>, name: &str) -> Result<u32, ApiError> {
    let value: u32 = object
        .uint(name)
        .map_err(|_| invalid(&format!("/{name}"), "out_of_range"))?;
    if value == 0 || value > SIZE_MAX {
        return Err(invalid(&format!("/{name}"), "out_of_range"));
    }
    Ok(value)
}

fn opt_bool(object: &Object<'_>, name: &str) -> Result<bool, ApiError> {
    Ok(object
        .opt_member(name)
        .map(|member| member.as_bool())
        .transpose()?
        .unwrap_or(false))
}

/// The answer of open and attach.
fn grant_body(grant: &sessions::Grant) -> TerminalSessionGrant {
    TerminalSessionGrant {
        session_id: db::id_text(&grant.session_id),
        token: grant.token.token.clone(),
        stream_path: grant.stream_path(),
        noise_public_key: grant.noise_public_key.clone(),
        key_fingerprint: grant.key_fingerprint.clone(),
        key_generation: grant.key_generation,
        expires_at: grant.token.expires_at,
    }
}

/// A session as the reads show it: state, profile, host, times, and the time
/// left until the maximum duration (`remaining_ms`, 0 once passed or closed).
fn session_body(state: &AppState, row: &sessions::SessionRow, now: i64) -> TerminalSession {
    let max_ends_at = row.max_ends_at(state);
    let remaining_ms = if row.state == sessions::SessionState::Closed {
        0
    } else {
        max_ends_at.saturating_sub(now).max(0)
    };
    TerminalSession {
        session_id: db::id_text(&row.id),
        host_id: db::id_text(&row.host_id),
        person_id: db::id_text(&row.person_id),
        profile: row.profile.clone(),
        state: row.state.as_str().to_owned(),
        close_reason: row.close_reason.clone(),
        close_detail: row.close_detail.clone(),
        created_at: row.created_at,
        started_at: row.started_at,
        detached_at: row.detached_at,
        ended_at: row.ended_at,
        workdir_index: row.workdir_index,
        foreign_assignee: row.foreign_assignee,
        max_ends_at,
        remaining_ms,
        version: row.version,
    }
}

fn api(error: SessionError) -> ApiError {
    error.into()
}

/// Opens a terminal session on a host (persons; a fresh step-up).
///
/// Checks in this order: a person, `rl.terminal`, the host, the permission
/// with SR11 (I6), SR10 and SR12, the host active and connected, the profile
/// known from the host's last report (and with a profile of kind claude a
/// working directory of the person's own session user), the session limits;
/// then the step-up is consumed with the new session in one transaction. The
/// host service is told after the commit.
#[utoipa::path(
    post,
    path = "/api/v1/hosts/{host_id}/terminal/sessions",
    operation_id = "openTerminalSession",
    tag = "terminal",
    params(("host_id" = String, Path, format = "uuid", description = "The host's ID.")),
    request_body = OpenTerminalSessionRequest,
    security(("bearer" = []), ("console_cookie" = [], "csrf_token" = [])),
    responses(
        (status = 201, description = "The session (`opening`) and its terminal session token.",
            body = TerminalSessionGrant),
        (status = 400, description = "`validation_failed`: besides the body codes, `/columns` \
            and `/rows` `out_of_range`, `/client_ephemeral_key_hash` `invalid_format`, \
            `/workdir_index` `required` (profile of kind claude) or `not_allowed` (any other \
            kind).", body = Problem, content_type = PROBLEM_JSON),
        (status = 401, description = "`unauthenticated`, or `step_up_required` (missing, too \
            old, consumed, of another login session; in the console without a passkey with \
            reason `passkey_required`; audited).", body = Problem, content_type = PROBLEM_JSON),
        (status = 403, description = "`forbidden` reason `subject_kind_not_allowed` or \
            `no_permission`, or `terminal_denied` reason `i6_holder_only`, \
            `server_host_owner_only`, `not_host_assignee`, `no_session_user`, \
            `profile_unknown`, `session_limit` (all audited); `csrf_token_invalid`.",
            body = Problem, content_type = PROBLEM_JSON),
        NotFound,
        (status = 409, description = "`host_unavailable`: the host is not active or its host \
            service is not connected (audited).", body = Problem, content_type = PROBLEM_JSON),
        PayloadTooLarge,
        UnsupportedMediaType,
        RateLimited,
        Internal,
        (status = 503, description = "`unavailable`: the database is not available, or the \
            opening lost its race `database.tx_retry_max` times.", body = Problem,
            content_type = PROBLEM_JSON),
    )
)]
async fn open_terminal_session(
    State(state): State<AppState>,
    principal: Principal,
    Path(host_id): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let host_id = path_id(&host_id)?;
    let object = Object::root(
        &body,
        &[
            "profile",
            "columns",
            "rows",
            "client_ephemeral_key_hash",
            "workdir_index",
            "step_up_id",
            "pin_changed",
        ],
    )?;
    let request = OpenRequest {
        host_id,
        profile: object.str("profile")?.to_owned(),
        columns: size(&object, "columns")?,
        rows: size(&object, "rows")?,
        client_ephemeral_key_hash: object.str("client_ephemeral_key_hash")?.to_owned(),
        workdir_index: object
            .opt_member("workdir_index")
            .map(|member| member.as_uint::<u32>())
            .transpose()?,
        step_up_id: object
            .opt_member("step_up_id")
            .map(|member| member.as_uuid())
            .transpose()?,
        pin_changed: opt_bool(&object, "pin_changed")?,
    };
    let grant = sessions::open(&state, &principal, &request)
        .await
        .map_err(api)?;
    Ok((StatusCode::CREATED, Json(grant_body(&grant))).into_response())
}

/// A single-use nonce for a quick reattach (the session's person).
///
/// The device signs it with its device key (`device_proof` of the attach).
/// It is worthless after `expires_at` and after any later grant of the
/// session.
#[utoipa::path(
    post,
    path = "/api/v1/terminal/sessions/{session_id}/attach-challenge",
    operation_id = "challengeTerminalAttach",
    tag = "terminal",
    params(("session_id" = String, Path, format = "uuid", description = "The session's ID.")),
    security(("bearer" = []), ("console_cookie" = [], "csrf_token" = [])),
    responses(
        (status = 200, description = "The nonce.", body = AttachChallenge),
        Unauthenticated,
        (status = 403, description = "`forbidden` reason `subject_kind_not_allowed`.",
            body = Problem, content_type = PROBLEM_JSON),
        NotFound,
        (status = 409, description = "`invalid_state_transition`: the session is closed.",
            body = Problem, content_type = PROBLEM_JSON),
        Internal,
        Unavailable,
    )
)]
async fn attach_challenge(
    State(state): State<AppState>,
    principal: Principal,
    Path(session_id): Path<String>,
) -> Result<Json<AttachChallenge>, ApiError> {
    let session_id = path_id(&session_id)?;
    let challenge = sessions::attach_challenge(&state, &principal, session_id)
        .await
        .map_err(api)?;
    Ok(Json(AttachChallenge {
        nonce: challenge.nonce,
        expires_at: challenge.expires_at,
    }))
}

/// Attaches to a session again (the session's person): a new token and a
/// new handshake.
///
/// Needs a fresh step-up, except for a quick reattach: the same device and
/// login session, the session detached for at most
/// `terminal.quick_reattach_window`, proven by `device_proof` (never in the
/// web console).
#[utoipa::path(
    post,
    path = "/api/v1/terminal/sessions/{session_id}/attach",
    operation_id = "attachTerminalSession",
    tag = "terminal",
    params(("session_id" = String, Path, format = "uuid", description = "The session's ID.")),
    request_body = AttachTerminalSessionRequest,
    security(("bearer" = []), ("console_cookie" = [], "csrf_token" = [])),
    responses(
        (status = 200, description = "A new terminal session token for the session.",
            body = TerminalSessionGrant),
        (status = 400, description = "`validation_failed`: besides the body codes, \
            `/client_ephemeral_key_hash` `invalid_format`.", body = Problem,
            content_type = PROBLEM_JSON),
        (status = 401, description = "`unauthenticated`, or `step_up_required` (no step-up \
            and no valid quick reattach; in the console reason `passkey_required`; audited).",
            body = Problem, content_type = PROBLEM_JSON),
        (status = 403, description = "As for openTerminalSession (audited), without \
            `session_limit`.", body = Problem, content_type = PROBLEM_JSON),
        NotFound,
        (status = 409, description = "`invalid_state_transition` (the session is closed, or \
            another grant or end came first) or `host_unavailable` (audited).", body = Problem,
            content_type = PROBLEM_JSON),
        PayloadTooLarge,
        UnsupportedMediaType,
        RateLimited,
        Internal,
        Unavailable,
    )
)]
async fn attach_terminal_session(
    State(state): State<AppState>,
    principal: Principal,
    Path(session_id): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Json<TerminalSessionGrant>, ApiError> {
    let session_id = path_id(&session_id)?;
    let object = Object::root(
        &body,
        &[
            "client_ephemeral_key_hash",
            "step_up_id",
            "device_proof",
            "pin_changed",
        ],
    )?;
    let device_proof = match object.opt_member("device_proof") {
        Some(member) => {
            let proof = member.into_object(&["nonce", "signature"])?;
            Some(DeviceProof {
                nonce: proof.str("nonce")?.to_owned(),
                signature: proof.str("signature")?.to_owned(),
            })
        }
        None => None,
    };
    let request = AttachRequest {
        client_ephemeral_key_hash: object.str("client_ephemeral_key_hash")?.to_owned(),
        step_up_id: object
            .opt_member("step_up_id")
            .map(|member| member.as_uuid())
            .transpose()?,
        device_proof,
        pin_changed: opt_bool(&object, "pin_changed")?,
    };
    let grant = sessions::attach(&state, &principal, session_id, &request)
        .await
        .map_err(api)?;
    Ok(Json(grant_body(&grant)))
}

/// Ends a session: by its person (`client_closed`) or by an owner
/// (`closed_by_owner`).
#[utoipa::path(
    post,
    path = "/api/v1/terminal/sessions/{session_id}/close",
    operation_id = "closeTerminalSession",
    tag = "terminal",
    params(("session_id" = String, Path, format = "uuid", description = "The session's ID.")),
    security(("bearer" = []), ("console_cookie" = [], "csrf_token" = [])),
    responses(
        (status = 200, description = "The session is closed.", body = ClosedTerminalSession),
        Unauthenticated,
        (status = 403, description = "`forbidden` reason `subject_kind_not_allowed` (audited).",
            body = Problem, content_type = PROBLEM_JSON),
        NotFound,
        (status = 409, description = "`invalid_state_transition`: the session is closed \
            already.", body = Problem, content_type = PROBLEM_JSON),
        Internal,
        Unavailable,
    )
)]
async fn close_terminal_session(
    State(state): State<AppState>,
    principal: Principal,
    Path(session_id): Path<String>,
) -> Result<Json<ClosedTerminalSession>, ApiError> {
    let session_id = path_id(&session_id)?;
    let closed = sessions::close(&state, &principal, session_id)
        .await
        .map_err(api)?;
    Ok(Json(ClosedTerminalSession {
        session_id: db::id_text(&closed.session_id),
        state: "closed".to_owned(),
        close_reason: closed.close_reason.as_str().to_owned(),
    }))
}

/// Lists the caller's own sessions, newest first, a page at a time; with
/// `host_id` only those on that host — for an owner every person's there.
#[utoipa::path(
    get,
    path = "/api/v1/terminal/sessions",
    operation_id = "listTerminalSessions",
    tag = "terminal",
    params(
        ("host_id" = Option<String>, Query, format = "uuid", description = "Only sessions \
            on this host."),
        ("state" = Option<String>, Query, description = "`open` (every state but closed) \
            or `closed`; without it every session."),
        ("after" = Option<String>, Query, format = "uuid", description = "The cursor: \
            `next` of the previous page."),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 500, description = "The page \
            size, 1..=500, default 200."),
    ),
    security(("bearer" = []), ("console_cookie" = [])),
    responses(
        (status = 200, description = "The sessions.", body = TerminalSessionList),
        (status = 400, description = "`validation_failed`: `/query/host_id`, \
            `/query/after`, `/query/state` or `/query/limit` `invalid`, \
            `unknown_parameter`, `duplicate_parameter`.", body = Problem,
            content_type = PROBLEM_JSON),
        Unauthenticated,
        (status = 403, description = "`forbidden` reason `subject_kind_not_allowed`.",
            body = Problem, content_type = PROBLEM_JSON),
        Internal,
        Unavailable,
    )
)]
async fn list_terminal_sessions(
    State(state): State<AppState>,
    principal: Principal,
    uri: Uri,
) -> Result<Json<TerminalSessionList>, ApiError> {
    let params = QueryParams::parse(&uri, &["host_id", "state", "after", "limit"])?;
    let open = match params.get("state") {
        None => None,
        Some("open") => Some(true),
        Some("closed") => Some(false),
        Some(_) => return Err(query::invalid("state", "invalid")),
    };
    let query = sessions::ListQuery {
        host_id: params.uuid("host_id")?,
        open,
        after: params.uuid("after")?,
        limit: match params.integer("limit", 1, i64::from(sessions::LIST_MAX))? {
            // In 1..=LIST_MAX, so it fits.
            Some(limit) => u32::try_from(limit).unwrap_or(sessions::LIST_MAX),
            None => sessions::LIST_DEFAULT,
        },
    };
    let now = state.clock().now_ms();
    let page = sessions::list(&state, &principal, query)
        .await
        .map_err(api)?;
    Ok(Json(TerminalSessionList {
        sessions: page
            .rows
            .iter()
            .map(|row| session_body(&state, row, now))
            .collect(),
        next: page.next.map(|next| db::id_text(&next)),
    }))
}

/// Reads one session (its person, or an owner); `404` for anyone else.
#[utoipa::path(
    get,
    path = "/api/v1/terminal/sessions/{session_id}",
    operation_id = "getTerminalSession",
    tag = "terminal",
    params(("session_id" = String, Path, format = "uuid", description = "The session's ID.")),
    security(("bearer" = []), ("console_cookie" = [])),
    responses(
        (status = 200, description = "The session.", body = TerminalSession),
        Unauthenticated,
        (status = 403, description = "`forbidden` reason `subject_kind_not_allowed`.",
            body = Problem, content_type = PROBLEM_JSON),
        NotFound,
        Internal,
        Unavailable,
    )
)]
async fn get_terminal_session(
    State(state): State<AppState>,
    principal: Principal,
    Path(session_id): Path<String>,
) -> Result<Json<TerminalSession>, ApiError> {
    let session_id = path_id(&session_id)?;
    let now = state.clock().now_ms();
    let row = sessions::read(&state, &principal, session_id)
        .await
        .map_err(api)?;
    Ok(Json(session_body(&state, &row, now)))
}
