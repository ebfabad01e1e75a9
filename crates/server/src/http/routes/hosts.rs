//! Hosts and their pairing (DESIGN 3.4; spec 3.1–3.3; the rules and their
//! order are in [`crate::hosts::pairing`]):
//!
//! | Route | Request | Response |
//! |---|---|---|
//! | `POST /api/v1/hosts` (createHost; owners, step-up) | `name`, `assigned_user_id?`, `reason`, `step_up_id` | 201 `{host, pairing_code}` with `ETag` — the code only here |
//! | `POST /api/v1/hosts/{host_id}/pairing-code` (issueHostPairingCode; owners, step-up) | `reason`, `step_up_id` | 200 `{host, pairing_code}` with `ETag` |
//! | `POST /api/v1/hosts/pair` (host.pair; public, `rl.public_auth`) | `code`, `noise_public_key`, `auth_public_jwk`, `host_version`, `platform`, `os_version`, `profiles[]`, `session_users[]`, `require_local_confirm`, `is_server_host` | 200 `{host_id, instance_id, key_fingerprint}` |
//! | `POST /api/v1/hosts/{host_id}/confirm` (confirmHost; owners, step-up, `Idempotency-Key`, `If-Match` optional) | `fingerprint_prefix`, `llm_credentials`, `credential_holder_id?`, `declared_server_host`, `session_users[] {user_id, os_user}`, `reason`, `step_up_id` | 200 `{host}` with `ETag` |
//! | `GET /api/v1/hosts` (host.read) | — | `{hosts[]}` |
//! | `GET /api/v1/hosts/{host_id}` (host.read) | — | the host, with `ETag`; `404` when not readable |
//!
//! Forms checked here: `name` per [`crate::hosts::manage::check_host_name`];
//! `reason` 1..=500 characters without control characters other than line
//! breaks (`required`, `too_long`, `invalid`); `llm_credentials` one of the
//! three (`invalid`). The host.pair body may be as large as a control
//! connection's report frame (`sync.ws_max_frame_bytes`), because it carries
//! the same lists (docs/decisions.md D-23).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use bothy_api::hosts::{
    ConfirmHostRequest, CreateHostRequest, Host, HostList, HostReply, HostWithCode,
    IssuePairingCodeRequest, PairHostRequest, PairedHost,
};
use bothy_proto::json::Object;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::auth::gate;
use super::body::{ClientAddr, JsonBody, path_id, read_conn};
use crate::audit::{AuditAction, AuditEntry, REASON_MAX_CHARS, TargetKind};
use crate::db;
use crate::db::idempotency::{self, StoredResponse};
use crate::hosts::llm::Declaration;
use crate::hosts::pairing::{
    self, ConfirmAnswer, ConfirmOnce, Confirmation, Confirmed, Idempotent, NewHost, PairRequest,
    RefusalAudit, Reissue, WithCode,
};
use crate::hosts::session_users::{self, Assignment};
use crate::hosts::{self, HostError, LlmCredentials, manage};
use crate::http::api_doc::{
    Internal, NotFound, PayloadTooLarge, Problem, RateLimited, Unauthenticated, Unavailable,
    UnsupportedMediaType,
};
use crate::http::idempotency::key_from_headers;
use crate::http::precondition::{check_if_match, etag};
use crate::http::problem::PROBLEM_JSON;
use crate::http::{ApiError, ProblemCode};
use crate::identity::principal::{PersonPrincipal, Principal};
use crate::permissions::authorize::may_read_host;
use crate::state::AppState;
use crate::terminal::links::ControlSignal;

/// The routes of this file. The aggregation of host.pair refusals lives as
/// long as the router, i.e. once per server.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_hosts, create_host))
        .routes(routes!(get_host))
        .routes(routes!(issue_pairing_code))
        .routes(routes!(pair_host))
        .routes(routes!(confirm_host))
        .layer(Extension(Arc::new(RefusalAudit::new())))
}

fn invalid(pointer: &str, code: &'static str) -> ApiError {
    ApiError::new(ProblemCode::ValidationFailed).with_error(pointer, code)
}

/// The mandatory `reason`: the owner's free text, the only one the audit keeps.
fn reason(object: &Object<'_>) -> Result<String, ApiError> {
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

/// A person who is an owner (both refusals audited as host.manage denials).
async fn owner<'p>(
    state: &AppState,
    principal: &'p Principal,
    now: i64,
) -> Result<&'p PersonPrincipal, ApiError> {
    let person = principal
        .require_owner_person(state.db(), now, AuditAction::HostManage)
        .await?;
    Ok(person)
}

/// `{host, pairing_code}` with the host's `ETag`.
fn with_code(status: StatusCode, issued: WithCode) -> Response {
    (
        status,
        [(header::ETAG, etag(issued.host.version))],
        Json(HostWithCode {
            host: issued.view,
            pairing_code: issued.pairing_code.as_str().to_owned(),
        }),
    )
        .into_response()
}

/// Creates a host in state `pairing` and returns its pairing code, exactly once
/// (owners; step-up).
///
/// Only the HMAC of the code is stored; it is valid for
/// `terminal.pairing_code_ttl` and for one host.pair.
#[utoipa::path(
    post,
    path = "/api/v1/hosts",
    operation_id = "createHost",
    tag = "hosts",
    request_body = CreateHostRequest,
    security(("bearer" = []), ("console_cookie" = [], "csrf_token" = [])),
    responses(
        (status = 201, description = "The host and its pairing code (shown only here).",
            body = HostWithCode, headers(("ETag" = String, description = "The host's version."))),
        (status = 400, description = "`validation_failed`: besides the body codes, `/name` \
            `required` | `too_long` | `invalid`, `/reason` `required` | `too_long` | \
            `invalid`, `/assigned_user_id` `unknown_user`.", body = Problem,
            content_type = PROBLEM_JSON),
        (status = 401, description = "`unauthenticated`, or `step_up_required` (audited).",
            body = Problem, content_type = PROBLEM_JSON),
        (status = 403, description = "`forbidden` reason `subject_kind_not_allowed` or \
            `owner_required` (audited), or `csrf_token_invalid`.", body = Problem,
            content_type = PROBLEM_JSON),
        PayloadTooLarge,
        UnsupportedMediaType,
        Internal,
        Unavailable,
    )
)]
async fn create_host(
    State(state): State<AppState>,
    principal: Principal,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let now = state.clock().now_ms();
    let person = owner(&state, &principal, now).await?;
    let object = Object::root(&body, &["name", "assigned_user_id", "reason", "step_up_id"])?;
    let name = object.str("name")?;
    manage::check_host_name(name).map_err(|code| invalid("/name", code))?;
    let assigned_user_id = object
        .opt_member("assigned_user_id")
        .map(|member| member.as_uuid())
        .transpose()?;
    let new = NewHost {
        name: name.trim().to_owned(),
        assigned_user_id,
        reason: reason(&object)?,
        step_up_id: object.uuid("step_up_id")?,
    };
    let created = pairing::create(
        state.db(),
        state.pepper(),
        state.config(),
        now,
        person,
        &new,
    )
    .await?;
    Ok(with_code(StatusCode::CREATED, created))
}

/// Issues a new pairing code for a host (re-pairing; owners; step-up).
///
/// From `pairing` the new code only replaces the old one. From `confirming`,
/// `active` and `disabled` the stored keys are discarded at once
/// (`key_fingerprint` stays), the host goes back to `pairing` and every
/// session of the host ends (`host_rekeyed`).
#[utoipa::path(
    post,
    path = "/api/v1/hosts/{host_id}/pairing-code",
    operation_id = "issueHostPairingCode",
    tag = "hosts",
    params(("host_id" = String, Path, format = "uuid", description = "The host's ID.")),
    request_body = IssuePairingCodeRequest,
    security(("bearer" = []), ("console_cookie" = [], "csrf_token" = [])),
    responses(
        (status = 200, description = "The host and its new pairing code (shown only here).",
            body = HostWithCode, headers(("ETag" = String, description = "The host's version."))),
        (status = 400, description = "`validation_failed`: besides the body codes, `/reason` \
            `required` | `too_long` | `invalid`.", body = Problem, content_type = PROBLEM_JSON),
        (status = 401, description = "`unauthenticated`, or `step_up_required` (audited).",
            body = Problem, content_type = PROBLEM_JSON),
        (status = 403, description = "`forbidden` reason `subject_kind_not_allowed` or \
            `owner_required` (audited), or `csrf_token_invalid`.", body = Problem,
            content_type = PROBLEM_JSON),
        NotFound,
        (status = 409, description = "`invalid_state_transition`: the host is retired.",
            body = Problem, content_type = PROBLEM_JSON),
        PayloadTooLarge,
        UnsupportedMediaType,
        Internal,
        Unavailable,
    )
)]
async fn issue_pairing_code(
    State(state): State<AppState>,
    principal: Principal,
    Path(host_id): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let now = state.clock().now_ms();
    let person = owner(&state, &principal, now).await?;
    let host_id = path_id(&host_id)?;
    let object = Object::root(&body, &["reason", "step_up_id"])?;
    let reason = reason(&object)?;
    let step_up_id = object.uuid("step_up_id")?;
    let request = Reissue {
        host_id,
        reason,
        step_up_id,
    };
    let issued = pairing::issue_code(
        state.db(),
        state.pepper(),
        state.config(),
        now,
        person,
        &request,
    )
    .await?;
    Ok(with_code(StatusCode::OK, issued))
}

fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .is_some_and(|media| media.trim().eq_ignore_ascii_case("application/json"))
}

/// Hands over the keys and the report of a host service with its pairing code
/// (public; `bothy-host pair`). The host becomes `confirming`.
///
/// Every code that does not work — wrong form or checksum (refused without any
/// database access), unknown, used, replaced or expired — gets the same `401`.
/// After a `400` or `409` the code stays valid.
#[utoipa::path(
    post,
    path = "/api/v1/hosts/pair",
    operation_id = "pairHost",
    tag = "hosts",
    request_body = PairHostRequest,
    security(()),
    responses(
        (status = 200, description = "The keys are stored; the owner confirms the fingerprint \
            next.", body = PairedHost),
        (status = 400, description = "`validation_failed`: besides the body codes, \
            `/noise_public_key` `invalid_key` (not 32 bytes of strict base64url, or of small \
            order), `/auth_public_jwk/<member>` `unknown_member` (also `d`), \
            `/auth_public_jwk/x` | `/kty` | `/crv` `invalid_key`, `/host_version` \
            `invalid_format`, and the report's findings (`required`, `too_long`, \
            `invalid_format`, `duplicate`, `limit_reached`) at their pointers.",
            body = Problem, content_type = PROBLEM_JSON),
        (status = 401, description = "`unauthenticated`: the code does not work (one body for \
            every cause; audited in aggregated form).", body = Problem,
            content_type = PROBLEM_JSON),
        (status = 409, description = "`conflict` reason `host_key_reused` (the keys this host \
            had before its re-pairing) or `host_key_in_use` (the login key of another host).",
            body = Problem, content_type = PROBLEM_JSON),
        PayloadTooLarge,
        UnsupportedMediaType,
        RateLimited,
        Internal,
        Unavailable,
    )
)]
async fn pair_host(
    State(state): State<AppState>,
    Extension(refusals): Extension<Arc<RefusalAudit>>,
    client: ClientAddr,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<PairedHost>, ApiError> {
    let now = state.clock().now_ms();
    gate(&state, client, now)?;
    if !is_json(&headers) {
        return Err(ApiError::new(ProblemCode::UnsupportedMediaType));
    }
    let limit = state.config().sync.ws_max_frame_bytes;
    let bytes = axum::body::to_bytes(body, limit)
        .await
        .map_err(|_| ApiError::new(ProblemCode::PayloadTooLarge))?;
    let value = bothy_proto::json::parse(&bytes, limit)?;
    let limits = pairing::report_limits(state.config());
    let result = match PairRequest::decode(&value, &limits) {
        Ok(request) => pairing::pair(state.db(), state.pepper(), now, &request).await,
        Err(error) => Err(error),
    };
    match result {
        Ok(paired) => Ok(Json(PairedHost {
            host_id: db::id_text(&paired.host_id),
            instance_id: paired.instance_id,
            key_fingerprint: paired.key_fingerprint.as_str().to_owned(),
        })),
        Err(HostError::PairingCodeRefused) => {
            // An empty bucket here (a concurrent failure took the last token)
            // changes nothing: this answer is a 401 either way.
            let _ = state.public_auth_limit().try_take(&client.0, now);
            if let Err(error) = refusals.refused(state.db(), client.0, now).await {
                // The refusal stands without its audit entry; the database is
                // not needed to refuse a code.
                tracing::warn!(error = %error, "host.pair refusal not audited");
            }
            Err(HostError::PairingCodeRefused.into())
        }
        Err(other) => Err(other.into()),
    }
}

/// Confirms a paired host with the first characters of its fingerprint, its
/// LLM login and the session users of persons (owners; step-up). The host
/// becomes `active`.
///
/// The prefix is compared before anything else is looked at. A wrong prefix is
/// `409 fingerprint_mismatch` with `attempts_remaining` and counts (also with
/// an `Idempotency-Key`; a retry with the same key replays the stored answer
/// and does not count again); at `terminal.fingerprint_max_attempts` the host
/// falls back to `pairing` and only a new pairing code continues.
#[utoipa::path(
    post,
    path = "/api/v1/hosts/{host_id}/confirm",
    operation_id = "confirmHost",
    tag = "hosts",
    params(
        ("host_id" = String, Path, format = "uuid", description = "The host's ID."),
        ("If-Match" = Option<String>, Header, description = "Optional: the host's `ETag`; \
            checked when sent."),
        ("Idempotency-Key" = Option<String>, Header, description = "Optional: 1 to 255 \
            visible ASCII characters; a retry with the same key and body gets the stored \
            answer."),
    ),
    request_body = ConfirmHostRequest,
    security(("bearer" = []), ("console_cookie" = [], "csrf_token" = [])),
    responses(
        (status = 200, description = "The host, now active.", body = HostReply,
            headers(("ETag" = String, description = "The host's version."))),
        (status = 400, description = "`validation_failed`: besides the body codes, \
            `/fingerprint_prefix` `invalid_format` (not exactly \
            `terminal.fingerprint_confirm_chars` Crockford characters; does not count), \
            `/llm_credentials` `invalid`, `/credential_holder_id` `required` | `not_allowed` | \
            `unknown_user`, `/session_users/<i>/os_user` `session_user_not_on_host`, \
            `/session_users/<i>/user_id` `unknown_user`, `/reason` `required` | `too_long` | \
            `invalid`, `/headers/idempotency-key` `invalid_format`.", body = Problem,
            content_type = PROBLEM_JSON),
        (status = 401, description = "`unauthenticated`, or `step_up_required` (audited; \
            does not count).", body = Problem, content_type = PROBLEM_JSON),
        (status = 403, description = "`forbidden` reason `subject_kind_not_allowed` or \
            `owner_required` (audited), or `csrf_token_invalid`.", body = Problem,
            content_type = PROBLEM_JSON),
        NotFound,
        (status = 409, description = "`fingerprint_mismatch` with `attempts_remaining` (0: \
            back to pairing), `invalid_state_transition` (not confirming), `conflict` reason \
            `session_user_taken`, `i6_violation` (audited).", body = Problem,
            content_type = PROBLEM_JSON),
        (status = 412, description = "`precondition_failed`: `If-Match` is not the host's \
            version.", body = Problem, content_type = PROBLEM_JSON),
        (status = 422, description = "`idempotency_key_reused`: the key was used with another \
            request.", body = Problem, content_type = PROBLEM_JSON),
        PayloadTooLarge,
        UnsupportedMediaType,
        Internal,
        Unavailable,
    )
)]
async fn confirm_host(
    State(state): State<AppState>,
    principal: Principal,
    Path(host_id): Path<String>,
    headers: HeaderMap,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let now = state.clock().now_ms();
    let person = owner(&state, &principal, now).await?;
    let host_id = path_id(&host_id)?;
    let key = key_from_headers(&headers)?;
    let object = Object::root(
        &body,
        &[
            "fingerprint_prefix",
            "llm_credentials",
            "credential_holder_id",
            "declared_server_host",
            "session_users",
            "reason",
            "step_up_id",
        ],
    )?;
    let fingerprint_prefix = object.str("fingerprint_prefix")?.to_owned();
    let llm_credentials = LlmCredentials::parse(object.str("llm_credentials")?)
        .ok_or_else(|| invalid("/llm_credentials", "invalid"))?;
    let credential_holder_id = object
        .opt_member("credential_holder_id")
        .map(|member| member.as_uuid())
        .transpose()?;
    let declared_server_host = object.bool("declared_server_host")?;
    let mut assignments = Vec::new();
    for item in object.array("session_users")?.iter() {
        let item = item.into_object(&["user_id", "os_user"])?;
        assignments.push(Assignment {
            person_id: item.uuid("user_id")?,
            os_user: item.str("os_user")?.to_owned(),
        });
    }
    let request = Confirmation {
        host_id,
        fingerprint_prefix,
        declaration: Declaration {
            llm_credentials,
            credential_holder_id,
        },
        declared_server_host,
        assignments,
        reason: reason(&object)?,
        step_up_id: object.uuid("step_up_id")?,
    };
    let route = format!("/api/v1/hosts/{}/confirm", db::id_text(&host_id));
    let idempotent = key.map(|key| Idempotent {
        request_hash: idempotency::request_hash("POST", &route, body.to_string().as_bytes()),
        key,
        route,
    });
    let if_match_check = |version: i64| check_if_match(&headers, version);
    let if_match: Option<&pairing::IfMatch<'_>> = headers
        .contains_key(header::IF_MATCH)
        .then_some(&if_match_check);
    let render = |answer: ConfirmAnswer<'_>| match answer {
        ConfirmAnswer::Confirmed(host) => {
            stored_json(StatusCode::OK, &HostReply { host: host.clone() })
        }
        ConfirmAnswer::Refused(refusal) => {
            let problem = ApiError::from(refusal);
            StoredResponse {
                status: problem.code().status().as_u16(),
                body: problem.body().to_string(),
            }
        }
    };
    let confirmed = pairing::confirm(
        state.db(),
        state.pepper(),
        state.config(),
        now,
        person,
        &request,
        ConfirmOnce {
            if_match,
            idempotent: idempotent.as_ref(),
            render: Some(&render),
        },
    )
    .await?;
    Ok(match confirmed {
        Confirmed::Active(host, view) => {
            // 2.2 item 5: a connected host service learns its state and
            // declaration from `ready`, sent again after the commit.
            let _ = state
                .control_links()
                .send(host.id, ControlSignal::ReadyAgain);
            (
                StatusCode::OK,
                [(header::ETAG, etag(host.version))],
                Json(HostReply { host: *view }),
            )
                .into_response()
        }
        Confirmed::Replayed(stored) => {
            let status =
                StatusCode::from_u16(stored.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let media = if status.is_success() {
                "application/json"
            } else {
                PROBLEM_JSON
            };
            (status, [(header::CONTENT_TYPE, media)], stored.body).into_response()
        }
    })
}

/// Lists the hosts the caller may read (host.read).
#[utoipa::path(
    get,
    path = "/api/v1/hosts",
    operation_id = "listHosts",
    tag = "hosts",
    security(("bearer" = []), ("console_cookie" = [])),
    responses(
        (status = 200, description = "The readable hosts, oldest first.", body = HostList),
        Unauthenticated,
        Internal,
        Unavailable,
    )
)]
async fn list_hosts(
    State(state): State<AppState>,
    principal: Principal,
) -> Result<Json<HostList>, ApiError> {
    let now = state.clock().now_ms();
    let mut conn = read_conn(&state).await?;
    let mut readable = Vec::new();
    for host in hosts::list(&mut conn).await? {
        if may_read_host(&mut conn, &principal, host.id, now).await? {
            let mut view = session_users::host_view(&mut conn, &host).await?;
            with_connected(&state, &host, &mut view);
            readable.push(view);
        }
    }
    Ok(Json(HostList { hosts: readable }))
}

/// Adds `connected` (3.5 "Connected"): the host's control connection on this
/// process has its first report applied. Not part of the version.
fn with_connected(state: &AppState, host: &hosts::Host, view: &mut Host) {
    view.connected = Some(state.control_links().is_connected(host.id));
}

/// A stored answer of `body` (serializing these types does not fail; if it
/// did, the stored answer is the internal problem).
fn stored_json(status: StatusCode, body: &impl serde::Serialize) -> StoredResponse {
    match serde_json::to_string(body) {
        Ok(body) => StoredResponse {
            status: status.as_u16(),
            body,
        },
        Err(error) => {
            let problem = ApiError::internal(error);
            StoredResponse {
                status: problem.code().status().as_u16(),
                body: problem.body().to_string(),
            }
        }
    }
}

/// Reads one host (host.read), with its `ETag`.
#[utoipa::path(
    get,
    path = "/api/v1/hosts/{host_id}",
    operation_id = "getHost",
    tag = "hosts",
    params(("host_id" = String, Path, format = "uuid", description = "The host's ID.")),
    security(("bearer" = []), ("console_cookie" = [])),
    responses(
        (status = 200, description = "The host.", body = Host,
            headers(("ETag" = String, description = "The host's version."))),
        Unauthenticated,
        NotFound,
        Internal,
        Unavailable,
    )
)]
async fn get_host(
    State(state): State<AppState>,
    principal: Principal,
    Path(host_id): Path<String>,
) -> Result<Response, ApiError> {
    let now = state.clock().now_ms();
    let host_id = path_id(&host_id)?;
    let mut conn = read_conn(&state).await?;
    let host = hosts::load(&mut conn, host_id).await?;
    let host = match host {
        Some(host) if may_read_host(&mut conn, &principal, host.id, now).await? => host,
        Some(_) => {
            // A host that exists but is not readable: the denial is audited,
            // the answer is the same 404 as for no host.
            let mut uow = state.db().begin(now).await.map_err(HostError::from)?;
            uow.audit(
                AuditEntry::deny(AuditAction::HostRead, principal.actor())
                    .target(TargetKind::Host, host_id),
            );
            uow.commit().await.map_err(HostError::from)?;
            return Err(HostError::NotFound.into());
        }
        None => return Err(HostError::NotFound.into()),
    };
    let mut view = session_users::host_view(&mut conn, &host).await?;
    with_connected(&state, &host, &mut view);
    Ok((
        StatusCode::OK,
        [(header::ETAG, etag(host.version))],
        Json(view),
    )
        .into_response())
}
