//! `/api/v1/auth/*` (DESIGN 3.1, 3.4):
//!
//! | Route | Request | Response |
//! |---|---|---|
//! | `POST /auth/enroll` (public) | `code`, `password` | `person_id`, `username`, `otpauth_uri`, `code_expires_at` |
//! | `POST /auth/enroll/confirm` (public) | `code`, `totp` | `person_id`, `username` |
//! | `POST /auth/login` (public) | `username`, `password`, `totp`, `device_public_key`, `device_name` | `access_token`, `login_session_id`, `device_id`, `expires_at` |
//! | `GET /auth/session` | — | `principal_id`, `kind`, persons: `username`, `role`, `login_session_id`, `device_id`, `client_component`, `expires_at`; agents and apps: `name`, `token_id` |
//! | `POST /auth/logout` | — | 204 |
//! | `GET /auth/sessions` | — | `sessions[]` (own; owners: everyone's) |
//! | `POST /auth/sessions/{id}/revoke` | — | 204 |
//! | `POST /auth/step-up` | `method: "totp"`, `code`; or `method: "webauthn"`, `challenge_id`, `credential` | `step_up_id`, `expires_at` |
//!
//! Times are Unix milliseconds. The public calls and the step-up are limited by
//! `rl.public_auth` per client address: an empty bucket is `429 rate_limited`
//! (with `Retry-After` and `retry_after`) before any check, and only a failed
//! check takes a token.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::http::header::SET_COOKIE;
use axum::response::{AppendHeaders, IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use bothy_proto::json::Object;
use bothy_proto::jwk::Ed25519PublicJwk;
use serde_json::{Value, json};

use super::body::{ClientAddr, JsonBody, path_id, read_conn};
use crate::audit::AuditAction;
use crate::db;
use crate::http::{ApiError, AppState, ProblemCode};
use crate::identity::console;
use crate::identity::devices::DeviceName;
use crate::identity::login_sessions::{self, ClientComponent, LoginRequest, SecondFactor};
use crate::identity::password::Password;
use crate::identity::principal::Principal;
use crate::identity::step_up::{self, StepUpMethod, StepUpRefusal};
use crate::identity::totp::TotpCode;
use crate::identity::{IdentityError, enrollment};

/// The routes of this file.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/auth/enroll", post(enroll))
        .route("/api/v1/auth/enroll/confirm", post(enroll_confirm))
        .route("/api/v1/auth/login", post(login))
        .route("/api/v1/auth/session", get(session))
        .route("/api/v1/auth/logout", post(logout))
        .route("/api/v1/auth/sessions", get(sessions))
        .route("/api/v1/auth/sessions/{id}/revoke", post(revoke_session))
        .route("/api/v1/auth/step-up", post(create_step_up))
}

/// `429` before any check when the client's bucket is empty.
pub(super) fn gate(state: &AppState, client: ClientAddr, now: i64) -> Result<(), ApiError> {
    state
        .public_auth_limit()
        .check(&client.0, now)
        .map_err(|retry| ApiError::new(ProblemCode::RateLimited).with_retry_after(retry.seconds))
}

/// Charges a failed credential check to the client's bucket.
pub(super) fn charged<T>(
    state: &AppState,
    client: ClientAddr,
    now: i64,
    result: Result<T, IdentityError>,
) -> Result<T, ApiError> {
    result.map_err(|error| {
        let failed_check = matches!(
            error,
            IdentityError::Unauthenticated(_)
                | IdentityError::StepUpRequired(
                    StepUpRefusal::TotpInvalid | StepUpRefusal::PasskeyInvalid
                )
        );
        if failed_check {
            // An empty bucket here (a concurrent failure took the last token)
            // changes nothing: this answer is a 401 either way.
            let _ = state.public_auth_limit().try_take(&client.0, now);
        }
        ApiError::from(error)
    })
}

async fn enroll(
    State(state): State<AppState>,
    client: ClientAddr,
    JsonBody(body): JsonBody,
) -> Result<Json<Value>, ApiError> {
    let now = state.clock().now_ms();
    gate(&state, client, now)?;
    let object = Object::root(&body, &["code", "password"])?;
    let code = object.str("code")?;
    let password = object.str("password")?;
    let started = charged(
        &state,
        client,
        now,
        enrollment::start(
            state.db(),
            state.pepper(),
            &state.config().auth,
            now,
            code,
            password,
        )
        .await,
    )?;
    Ok(Json(json!({
        "person_id": db::id_text(&started.person_id),
        "username": started.username.as_str(),
        "otpauth_uri": started.otpauth_uri.as_str(),
        "code_expires_at": started.code_expires_at,
    })))
}

async fn enroll_confirm(
    State(state): State<AppState>,
    client: ClientAddr,
    JsonBody(body): JsonBody,
) -> Result<Json<Value>, ApiError> {
    let now = state.clock().now_ms();
    gate(&state, client, now)?;
    let object = Object::root(&body, &["code", "totp"])?;
    let code = object.str("code")?;
    let totp = object.str("totp")?;
    let confirmed = charged(
        &state,
        client,
        now,
        enrollment::confirm(
            state.db(),
            state.pepper(),
            &state.config().auth,
            now,
            code,
            totp,
        )
        .await,
    )?;
    Ok(Json(json!({
        "person_id": db::id_text(&confirmed.person_id),
        "username": confirmed.username.as_str(),
    })))
}

async fn login(
    State(state): State<AppState>,
    client: ClientAddr,
    JsonBody(body): JsonBody,
) -> Result<Json<Value>, ApiError> {
    let now = state.clock().now_ms();
    gate(&state, client, now)?;
    let object = Object::root(
        &body,
        &[
            "username",
            "password",
            "totp",
            "device_public_key",
            "device_name",
        ],
    )?;
    let username = object.str("username")?.to_owned();
    let password = Password::presented(object.str("password")?);
    let totp = TotpCode::parse(object.str("totp")?);
    let key = object.member("device_public_key")?;
    let device_public_key = key
        .as_b64_array::<32>()
        .ok()
        .and_then(|raw| Ed25519PublicJwk::from_raw(&raw).ok())
        .ok_or_else(|| {
            ApiError::new(ProblemCode::ValidationFailed).with_error(key.pointer(), "invalid_key")
        })?;
    let device_name = DeviceName::parse(object.str("device_name")?).ok_or_else(|| {
        ApiError::new(ProblemCode::ValidationFailed).with_error("/device_name", "invalid")
    })?;
    let request = LoginRequest {
        username,
        password,
        second_factor: SecondFactor::Totp(totp),
        device_public_key,
        device_name,
    };
    let logged_in = charged(
        &state,
        client,
        now,
        login_sessions::login(
            state.db(),
            state.pepper(),
            &state.config().auth,
            now,
            request,
        )
        .await,
    )?;
    Ok(Json(json!({
        "access_token": logged_in.access_token.expose(),
        "login_session_id": db::id_text(&logged_in.login_session_id),
        "device_id": db::id_text(&logged_in.device_id),
        "expires_at": logged_in.expires_at,
    })))
}

async fn session(principal: Principal) -> Json<Value> {
    Json(principal.to_json())
}

async fn logout(State(state): State<AppState>, principal: Principal) -> Result<Response, ApiError> {
    let now = state.clock().now_ms();
    let person = principal
        .require_person(state.db(), now, AuditAction::AuthLogout)
        .await?;
    login_sessions::logout(state.db(), now, person).await?;
    if person.client_component == ClientComponent::Console {
        let cleared = AppendHeaders([(SET_COOKIE, console::cleared_cookie())]);
        return Ok((StatusCode::NO_CONTENT, cleared).into_response());
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn sessions(
    State(state): State<AppState>,
    principal: Principal,
) -> Result<Json<Value>, ApiError> {
    let now = state.clock().now_ms();
    let person = principal
        .require_person(state.db(), now, AuditAction::IdentityRead)
        .await?;
    let filter = (!person.is_owner()).then_some(person.person_id);
    let mut conn = read_conn(&state).await?;
    let sessions = login_sessions::list(&mut conn, filter, now).await?;
    let sessions: Vec<Value> = sessions
        .iter()
        .map(|session| session.to_json(person.login_session_id))
        .collect();
    Ok(Json(json!({ "sessions": sessions })))
}

async fn revoke_session(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let now = state.clock().now_ms();
    let person = principal
        .require_person(state.db(), now, AuditAction::SessionRevoke)
        .await?;
    let id = path_id(&id)?;
    login_sessions::revoke(state.db(), now, person, id).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn create_step_up(
    State(state): State<AppState>,
    principal: Principal,
    client: ClientAddr,
    JsonBody(body): JsonBody,
) -> Result<Json<Value>, ApiError> {
    let now = state.clock().now_ms();
    let person = principal
        .require_person(state.db(), now, AuditAction::AuthStepUp)
        .await?;
    gate(&state, client, now)?;
    let object = Object::root(&body, &["method", "code", "challenge_id", "credential"])?;
    let method = object.member("method")?;
    let method = StepUpMethod::parse(method.as_str()?).ok_or_else(|| {
        ApiError::new(ProblemCode::ValidationFailed).with_error(method.pointer(), "unknown_method")
    })?;
    // A passkey step-up (console; [`super::passkeys`]); the console's `totp`
    // goes on to `step_up::create`, which answers `passkey_required`.
    if method == StepUpMethod::Webauthn {
        let created = super::passkeys::step_up_finish(&state, client, person, &object).await?;
        return Ok(Json(json!({
            "step_up_id": db::id_text(&created.id),
            "expires_at": created.expires_at,
        })));
    }
    let code = TotpCode::parse(object.str("code")?);
    let created = charged(
        &state,
        client,
        now,
        step_up::create(
            state.db(),
            state.pepper(),
            state.config(),
            now,
            person,
            method,
            code.as_ref(),
        )
        .await,
    )?;
    Ok(Json(json!({
        "step_up_id": db::id_text(&created.id),
        "expires_at": created.expires_at,
    })))
}
