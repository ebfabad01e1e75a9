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
use bothy_proto::json::Object;
use serde_json::{Value, json};
use utoipa::ToSchema;
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

fn granted(status: StatusCode, grant: &sessions::Grant) -> Response {
    (status, Json(grant.to_json())).into_response()
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
    Ok(granted(StatusCode::CREATED, &grant))
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
) -> Result<Json<Value>, ApiError> {
    let session_id = path_id(&session_id)?;
    let challenge = sessions::attach_challenge(&state, &principal, session_id)
        .await
        .map_err(api)?;
    Ok(Json(json!({
        "nonce": challenge.nonce,
        "expires_at": challenge.expires_at,
    })))
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
) -> Result<Json<Value>, ApiError> {
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
    Ok(Json(grant.to_json()))
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
) -> Result<Json<Value>, ApiError> {
    let session_id = path_id(&session_id)?;
    let closed = sessions::close(&state, &principal, session_id)
        .await
        .map_err(api)?;
    Ok(Json(json!({
        "session_id": db::id_text(&closed.session_id),
        "state": "closed",
        "close_reason": closed.close_reason.as_str(),
    })))
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
) -> Result<Json<Value>, ApiError> {
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
    let sessions: Vec<Value> = page
        .rows
        .iter()
        .map(|row| row.to_json(&state, now))
        .collect();
    let mut body = json!({ "sessions": sessions });
    if let Some(next) = page.next {
        body["next"] = Value::from(crate::db::id_text(&next));
    }
    Ok(Json(body))
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
) -> Result<Json<Value>, ApiError> {
    let session_id = path_id(&session_id)?;
    let now = state.clock().now_ms();
    let row = sessions::read(&state, &principal, session_id)
        .await
        .map_err(api)?;
    Ok(Json(row.to_json(&state, now)))
}

/// `POST /api/v1/hosts/{host_id}/terminal/sessions` (doc-only).
#[derive(Debug, ToSchema)]
pub struct OpenTerminalSessionRequest {
    /// The name of a profile the host reported.
    pub profile: String,
    /// The terminal width in cells (1..=10000).
    pub columns: u32,
    /// The terminal height in cells (1..=10000).
    pub rows: u32,
    /// base64url without padding of SHA-256 of the device's ephemeral Noise key.
    pub client_ephemeral_key_hash: String,
    /// With a profile of kind claude (and only then): the index of the working
    /// directory in the reported list of the person's own session user.
    #[schema(required = false)]
    pub workdir_index: u32,
    /// A fresh step-up of this login session, consumed by the request.
    #[schema(required = false, format = "uuid")]
    pub step_up_id: String,
    /// The client showed a changed host key (audit `pin_changed`; default false).
    #[schema(required = false)]
    pub pin_changed: bool,
}

/// The device's proof of a quick reattach (doc-only).
#[derive(Debug, ToSchema)]
pub struct DeviceProofBody {
    /// The nonce of `attach-challenge`.
    pub nonce: String,
    /// base64url of the Ed25519 signature of the device key over the UTF-8 text
    /// `bothy.v1.quick_reattach\n<session_id>\n<nonce>\n<client_ephemeral_key_hash>`.
    pub signature: String,
}

/// `POST /api/v1/terminal/sessions/{session_id}/attach` (doc-only).
#[derive(Debug, ToSchema)]
pub struct AttachTerminalSessionRequest {
    /// base64url without padding of SHA-256 of the new ephemeral Noise key.
    pub client_ephemeral_key_hash: String,
    /// A fresh step-up; without one the request must be a quick reattach.
    #[schema(required = false, format = "uuid")]
    pub step_up_id: String,
    /// The proof of a quick reattach.
    #[schema(required = false)]
    pub device_proof: DeviceProofBody,
    /// The client showed a changed host key (default false).
    #[schema(required = false)]
    pub pin_changed: bool,
}

/// The answer of open and attach (doc-only).
#[derive(Debug, ToSchema)]
pub struct TerminalSessionGrant {
    /// The session.
    #[schema(format = "uuid")]
    pub session_id: String,
    /// The terminal session token (`terminal-session+jwt`); the device puts it
    /// into message 1 of the handshake.
    pub token: String,
    /// The device stream: `/api/v1/terminal/sessions/{session_id}/stream`.
    pub stream_path: String,
    /// The host's static Noise key (base64url).
    pub noise_public_key: String,
    /// The fingerprint of the host's keys (4.3).
    pub key_fingerprint: String,
    /// The generation of the host's keys (pinned with the key).
    pub key_generation: i64,
    /// The token's expiry (Unix ms).
    pub expires_at: i64,
}

/// `{nonce, expires_at}` (doc-only).
#[derive(Debug, ToSchema)]
pub struct AttachChallenge {
    /// The nonce (base64url, opaque).
    pub nonce: String,
    /// Until when it is accepted (Unix ms).
    pub expires_at: i64,
}

/// `{session_id, state, close_reason}` (doc-only).
#[derive(Debug, ToSchema)]
pub struct ClosedTerminalSession {
    /// The session.
    #[schema(format = "uuid")]
    pub session_id: String,
    /// `closed`.
    pub state: String,
    /// `client_closed` or `closed_by_owner`.
    pub close_reason: String,
}

/// A session as the reads show it (doc-only).
#[derive(Debug, ToSchema)]
pub struct TerminalSession {
    /// The session.
    #[schema(format = "uuid")]
    pub session_id: String,
    /// Its host.
    #[schema(format = "uuid")]
    pub host_id: String,
    /// Its person.
    #[schema(format = "uuid")]
    pub person_id: String,
    /// The profile.
    pub profile: String,
    /// `opening`, `active`, `detached` or `closed`.
    pub state: String,
    /// Why it ended (closed only).
    #[schema(required = false)]
    pub close_reason: String,
    /// The detail of `open_failed` and `host_policy_violation`.
    #[schema(required = false)]
    pub close_detail: String,
    /// When it was opened (Unix ms).
    pub created_at: i64,
    /// When its PTY started.
    #[schema(required = false)]
    pub started_at: i64,
    /// When its device went away.
    #[schema(required = false)]
    pub detached_at: i64,
    /// When it ended.
    #[schema(required = false)]
    pub ended_at: i64,
    /// The working directory's index (claude).
    #[schema(required = false)]
    pub workdir_index: u32,
    /// An owner opened it on a host assigned to another person (8.4).
    pub foreign_assignee: bool,
    /// When `terminal.max_session_duration` ends it (Unix ms).
    pub max_ends_at: i64,
    /// Milliseconds left until then (0 when closed).
    pub remaining_ms: i64,
    /// The row's version.
    pub version: i64,
}

/// `{sessions[]}` (doc-only).
#[derive(Debug, ToSchema)]
pub struct TerminalSessionList {
    /// The sessions, newest first.
    pub sessions: Vec<TerminalSession>,
    /// The cursor of the next page (pass it as `after`); absent on the last
    /// page.
    #[schema(required = false, format = "uuid")]
    pub next: String,
}
