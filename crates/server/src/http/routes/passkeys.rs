//! Passkey and web-console routes (DESIGN 3.1, 3.4; spec 24 6.2, 12, 13):
//!
//! | Route | Request | Response |
//! |---|---|---|
//! | `POST /auth/enroll/passkey/start` (public) | `code` | `challenge_id`, `options` |
//! | `POST /auth/enroll/passkey/finish` (public) | `code`, `challenge_id`, `credential` | `passkey_id` |
//! | `POST /auth/passkeys/start` | `step_up_id` (fresh TOTP step-up, consumed) | `challenge_id`, `options` |
//! | `POST /auth/passkeys/finish` | `challenge_id`, `credential` | `passkey_id` |
//! | `POST /auth/console/login/start` (public) | `username` | `challenge_id`, `options` |
//! | `POST /auth/console/login/finish` (public) | `username`, `password`, `challenge_id`, `credential` | cookie `bothy_session`; `login_session_id`, `expires_at`, `csrf_token` |
//! | `POST /auth/step-up/passkey/start` | — | `challenge_id`, `options` |
//!
//! The passkey step-up itself is `POST /auth/step-up {method: "webauthn",
//! challenge_id, credential}` ([`super::auth`]). The public calls and the
//! step-up are limited by `rl.public_auth` like the CLI's login.

use axum::extract::State;
use axum::http::header::SET_COOKIE;
use axum::response::{AppendHeaders, IntoResponse};
use axum::routing::post;
use axum::{Json, Router};
use bothy_proto::json::Object;
use serde_json::{Value, json};

use super::auth::{charged, gate};
use super::body::{ClientAddr, JsonBody};
use crate::audit::AuditAction;
use crate::db;
use crate::http::{ApiError, AppState};
use crate::identity::console::{self, ConsoleLogin};
use crate::identity::passkey::{self, Started};
use crate::identity::password::Password;
use crate::identity::principal::{PersonPrincipal, Principal};
use crate::identity::step_up::CreatedStepUp;

/// The routes of this file.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/auth/enroll/passkey/start", post(enroll_start))
        .route("/api/v1/auth/enroll/passkey/finish", post(enroll_finish))
        .route("/api/v1/auth/passkeys/start", post(register_start))
        .route("/api/v1/auth/passkeys/finish", post(register_finish))
        .route("/api/v1/auth/console/login/start", post(login_start))
        .route("/api/v1/auth/console/login/finish", post(login_finish))
        .route("/api/v1/auth/step-up/passkey/start", post(step_up_start))
}

fn started(started: Started) -> Json<Value> {
    Json(json!({
        "challenge_id": db::id_text(&started.challenge_id),
        "options": started.options,
    }))
}

async fn enroll_start(
    State(state): State<AppState>,
    client: ClientAddr,
    JsonBody(body): JsonBody,
) -> Result<Json<Value>, ApiError> {
    let now = state.clock().now_ms();
    gate(&state, client, now)?;
    let object = Object::root(&body, &["code"])?;
    let code = object.str("code")?;
    let result = passkey::enroll_start(state.db(), state.pepper(), state.config(), now, code).await;
    Ok(started(charged(&state, client, now, result)?))
}

async fn enroll_finish(
    State(state): State<AppState>,
    client: ClientAddr,
    JsonBody(body): JsonBody,
) -> Result<Json<Value>, ApiError> {
    let now = state.clock().now_ms();
    gate(&state, client, now)?;
    let object = Object::root(&body, &["code", "challenge_id", "credential"])?;
    let code = object.str("code")?;
    let challenge_id = object.uuid("challenge_id")?;
    let credential = object.member("credential")?.value();
    let result = passkey::enroll_finish(
        state.db(),
        state.pepper(),
        state.config(),
        now,
        code,
        challenge_id,
        credential,
    )
    .await;
    let passkey_id = charged(&state, client, now, result)?;
    Ok(Json(json!({ "passkey_id": db::id_text(&passkey_id) })))
}

async fn person<'a>(
    state: &AppState,
    principal: &'a Principal,
    action: AuditAction,
) -> Result<&'a PersonPrincipal, ApiError> {
    let now = state.clock().now_ms();
    Ok(principal.require_person(state.db(), now, action).await?)
}

async fn register_start(
    State(state): State<AppState>,
    principal: Principal,
    JsonBody(body): JsonBody,
) -> Result<Json<Value>, ApiError> {
    let person = person(&state, &principal, AuditAction::AuthEnroll).await?;
    let now = state.clock().now_ms();
    let object = Object::root(&body, &["step_up_id"])?;
    let step_up_id = object.uuid("step_up_id")?;
    let result = passkey::register_start(state.db(), state.config(), now, person, step_up_id).await;
    Ok(started(result?))
}

async fn register_finish(
    State(state): State<AppState>,
    principal: Principal,
    client: ClientAddr,
    JsonBody(body): JsonBody,
) -> Result<Json<Value>, ApiError> {
    let person = person(&state, &principal, AuditAction::AuthEnroll).await?;
    let now = state.clock().now_ms();
    let object = Object::root(&body, &["challenge_id", "credential"])?;
    let challenge_id = object.uuid("challenge_id")?;
    let credential = object.member("credential")?.value();
    let result = passkey::register_finish(
        state.db(),
        state.config(),
        now,
        person,
        challenge_id,
        credential,
    )
    .await;
    let passkey_id = charged(&state, client, now, result)?;
    Ok(Json(json!({ "passkey_id": db::id_text(&passkey_id) })))
}

async fn login_start(
    State(state): State<AppState>,
    client: ClientAddr,
    JsonBody(body): JsonBody,
) -> Result<Json<Value>, ApiError> {
    let now = state.clock().now_ms();
    gate(&state, client, now)?;
    let object = Object::root(&body, &["username"])?;
    let username = object.str("username")?;
    let result =
        console::login_start(state.db(), state.pepper(), state.config(), now, username).await;
    Ok(started(result?))
}

async fn login_finish(
    State(state): State<AppState>,
    client: ClientAddr,
    JsonBody(body): JsonBody,
) -> Result<impl IntoResponse, ApiError> {
    let now = state.clock().now_ms();
    gate(&state, client, now)?;
    let object = Object::root(
        &body,
        &["username", "password", "challenge_id", "credential"],
    )?;
    let request = ConsoleLogin {
        username: object.str("username")?.to_owned(),
        password: Password::presented(object.str("password")?),
        challenge_id: object.uuid("challenge_id")?,
        credential: object.member("credential")?.value().clone(),
    };
    let result =
        console::login_finish(state.db(), state.pepper(), state.config(), now, request).await;
    let logged_in = charged(&state, client, now, result)?;
    let cookie = console::session_cookie(&logged_in.access_token, state.config());
    Ok((
        AppendHeaders([(SET_COOKIE, cookie)]),
        Json(json!({
            "login_session_id": db::id_text(&logged_in.login_session_id),
            "expires_at": logged_in.expires_at,
            "csrf_token": logged_in.csrf_token.expose(),
        })),
    ))
}

async fn step_up_start(
    State(state): State<AppState>,
    principal: Principal,
) -> Result<Json<Value>, ApiError> {
    let person = person(&state, &principal, AuditAction::AuthStepUp).await?;
    let now = state.clock().now_ms();
    Ok(started(
        passkey::step_up_start(state.db(), state.config(), now, person).await?,
    ))
}

/// `POST /auth/step-up` with `method: "webauthn"` (called by [`super::auth`]).
pub(super) async fn step_up_finish(
    state: &AppState,
    client: ClientAddr,
    person: &PersonPrincipal,
    object: &Object<'_>,
) -> Result<CreatedStepUp, ApiError> {
    let now = state.clock().now_ms();
    let challenge_id = object.uuid("challenge_id")?;
    let credential = object.member("credential")?.value();
    let result = passkey::step_up_finish(
        state.db(),
        state.config(),
        now,
        person,
        challenge_id,
        credential,
    )
    .await;
    charged(state, client, now, result)
}
