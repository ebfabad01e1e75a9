//! Passkey and web-console routes (DESIGN 3.1, 3.4; spec 24 6.2, 12, 13):
//!
//! | Route | Request | Response |
//! |---|---|---|
//! | `POST /auth/enroll/passkey/start` (public) | `code` | `challenge_id`, `options` |
//! | `POST /auth/enroll/passkey/finish` (public) | `code`, `challenge_id`, `credential` | `passkey_id` |
//! | `POST /auth/passkeys/start` | `step_up_id` (fresh TOTP step-up, consumed) | `challenge_id`, `options` |
//! | `POST /auth/passkeys/finish` | `challenge_id`, `credential` | `passkey_id` |
//! | `POST /auth/passkeys/first/start` (public) | `username`, `password`, `totp` | `challenge_id`, `options` |
//! | `POST /auth/passkeys/first/finish` (public) | `username`, `password`, `challenge_id`, `credential` | `passkey_id` |
//! | `POST /auth/console/login/start` (public) | `username` | `challenge_id`, `options` |
//! | `POST /auth/console/login/finish` (public) | `username`, `password`, `challenge_id`, `credential` | cookie `bothy_session`; `login_session_id`, `expires_at`, `csrf_token` |
//! | `POST /auth/step-up/passkey/start` | — | `challenge_id`, `options` |
//!
//! The passkey step-up itself is `POST /auth/step-up {method: "webauthn",
//! challenge_id, credential}` ([`super::auth`]). The public calls are limited
//! by `rl.public_auth` like the CLI's login; the step-up by the step-up
//! buckets of the person and the address ([`super::auth`], D-353).

use axum::Json;
use axum::extract::State;
use axum::http::header::SET_COOKIE;
use axum::response::{AppendHeaders, IntoResponse};
use bothy_api::passkeys::{
    ConsoleLoginFinishRequest, ConsoleLoginResponse, ConsoleLoginStartRequest,
    FirstPasskeyFinishRequest, FirstPasskeyStartRequest, PasskeyChallenge,
    PasskeyEnrollFinishRequest, PasskeyEnrollStartRequest, PasskeyFinishRequest,
    PasskeyRegisterStartRequest, PasskeyRegistered,
};
use bothy_proto::json::Object;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::auth::{charged, password_and_totp, public_body, step_up_charged};
use super::body::{ClientAddr, JsonBody};
use crate::audit::AuditAction;
use crate::db;
use crate::http::ApiError;
use crate::http::api_doc::{
    Internal, PayloadTooLarge, Problem, RateLimited, Unavailable, UnsupportedMediaType,
    ValidationFailed,
};
use crate::http::problem::PROBLEM_JSON;
use crate::identity::console::{self, ConsoleLogin};
use crate::identity::passkey::{self, Started};
use crate::identity::password::Password;
use crate::identity::principal::{PersonPrincipal, Principal};
use crate::identity::step_up::CreatedStepUp;
use crate::state::AppState;

/// The routes of this file.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(enroll_start))
        .routes(routes!(enroll_finish))
        .routes(routes!(register_start))
        .routes(routes!(register_finish))
        .routes(routes!(first_start))
        .routes(routes!(first_finish))
        .routes(routes!(login_start))
        .routes(routes!(login_finish))
        .routes(routes!(step_up_start))
}

fn started(started: Started) -> Json<PasskeyChallenge> {
    Json(PasskeyChallenge {
        challenge_id: db::id_text(&started.challenge_id),
        options: started.options,
    })
}

/// The members of a finish proven by password and passkey: the console's
/// login and the first passkey's finish.
const PASSWORD_AND_PASSKEY: &[&str] = &["username", "password", "challenge_id", "credential"];

/// The members of [`PASSWORD_AND_PASSKEY`], read in this order; the password
/// only bounded in length ([`Password::presented`]), so a wrong one is the
/// check's `401`.
fn password_and_passkey(object: &Object<'_>) -> Result<ConsoleLogin, ApiError> {
    Ok(ConsoleLogin {
        username: object.str("username")?.to_owned(),
        password: Password::presented(object.str("password")?),
        challenge_id: object.uuid("challenge_id")?,
        credential: object.member("credential")?.value().clone(),
    })
}

fn registered(passkey_id: uuid::Uuid) -> Json<PasskeyRegistered> {
    Json(PasskeyRegistered {
        passkey_id: db::id_text(&passkey_id),
    })
}

/// Starts registering a passkey during enrollment, with the one-time code
/// (public).
#[utoipa::path(
    post,
    path = "/api/v1/auth/enroll/passkey/start",
    operation_id = "startPasskeyEnrollment",
    tag = "passkeys",
    request_body = PasskeyEnrollStartRequest,
    responses(
        (status = 200, description = "A registration challenge (5 minutes, single use).",
            body = PasskeyChallenge),
        ValidationFailed,
        (status = 401, description = "`unauthenticated`: the code is unknown, used or \
            expired (audited).", body = Problem, content_type = PROBLEM_JSON),
        PayloadTooLarge,
        UnsupportedMediaType,
        RateLimited,
        Internal,
        Unavailable,
    )
)]
async fn enroll_start(
    State(state): State<AppState>,
    client: ClientAddr,
    JsonBody(body): JsonBody,
) -> Result<Json<PasskeyChallenge>, ApiError> {
    let now = state.clock().now_ms();
    let object = public_body(&state, client, now, &body, &["code"])?;
    let code = object.str("code")?;
    let result = passkey::enroll_start(state.db(), state.pepper(), state.config(), now, code).await;
    Ok(started(charged(&state, client, now, result)?))
}

/// Finishes registering a passkey during enrollment (public).
#[utoipa::path(
    post,
    path = "/api/v1/auth/enroll/passkey/finish",
    operation_id = "finishPasskeyEnrollment",
    tag = "passkeys",
    request_body = PasskeyEnrollFinishRequest,
    responses(
        (status = 200, description = "The passkey is registered.", body = PasskeyRegistered),
        ValidationFailed,
        (status = 401, description = "`unauthenticated`: the code, the challenge (unknown, \
            used, expired, or for something else) or the attestation is not valid (audited; \
            the challenge is spent either way).", body = Problem, content_type = PROBLEM_JSON),
        PayloadTooLarge,
        UnsupportedMediaType,
        RateLimited,
        Internal,
        Unavailable,
    )
)]
async fn enroll_finish(
    State(state): State<AppState>,
    client: ClientAddr,
    JsonBody(body): JsonBody,
) -> Result<Json<PasskeyRegistered>, ApiError> {
    let now = state.clock().now_ms();
    let object = public_body(
        &state,
        client,
        now,
        &body,
        &["code", "challenge_id", "credential"],
    )?;
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
    Ok(registered(passkey_id))
}

async fn person<'a>(
    state: &AppState,
    principal: &'a Principal,
    action: AuditAction,
) -> Result<&'a PersonPrincipal, ApiError> {
    let now = state.clock().now_ms();
    Ok(principal.require_person(state.db(), now, action).await?)
}

/// Starts adding a passkey for the caller, after a fresh TOTP step-up that
/// this consumes.
#[utoipa::path(
    post,
    path = "/api/v1/auth/passkeys/start",
    operation_id = "startPasskeyRegistration",
    tag = "passkeys",
    request_body = PasskeyRegisterStartRequest,
    security(("bearer" = []), ("console_cookie" = [], "csrf_token" = [])),
    responses(
        (status = 200, description = "A registration challenge (5 minutes, single use).",
            body = PasskeyChallenge),
        ValidationFailed,
        (status = 401, description = "`unauthenticated` (no valid credential), or \
            `step_up_required`: the step-up is missing, of another login session, expired or \
            consumed (audited).", body = Problem, content_type = PROBLEM_JSON),
        (status = 403, description = "`forbidden` reason `subject_kind_not_allowed` (an agent \
            or app, audited) or `csrf_token_invalid`.", body = Problem,
            content_type = PROBLEM_JSON),
        PayloadTooLarge,
        UnsupportedMediaType,
        Internal,
        Unavailable,
    )
)]
async fn register_start(
    State(state): State<AppState>,
    principal: Principal,
    JsonBody(body): JsonBody,
) -> Result<Json<PasskeyChallenge>, ApiError> {
    let person = person(&state, &principal, AuditAction::AuthEnroll).await?;
    let now = state.clock().now_ms();
    let object = Object::root(&body, &["step_up_id"])?;
    let step_up_id = object.uuid("step_up_id")?;
    let result = passkey::register_start(state.db(), state.config(), now, person, step_up_id).await;
    Ok(started(result?))
}

/// Finishes adding a passkey for the caller.
#[utoipa::path(
    post,
    path = "/api/v1/auth/passkeys/finish",
    operation_id = "finishPasskeyRegistration",
    tag = "passkeys",
    request_body = PasskeyFinishRequest,
    security(("bearer" = []), ("console_cookie" = [], "csrf_token" = [])),
    responses(
        (status = 200, description = "The passkey is registered.", body = PasskeyRegistered),
        ValidationFailed,
        (status = 401, description = "`unauthenticated`: no valid credential, or the \
            challenge or the attestation is not valid (audited).", body = Problem,
            content_type = PROBLEM_JSON),
        (status = 403, description = "`forbidden` reason `subject_kind_not_allowed` (an agent \
            or app, audited) or `csrf_token_invalid`.", body = Problem,
            content_type = PROBLEM_JSON),
        PayloadTooLarge,
        UnsupportedMediaType,
        RateLimited,
        Internal,
        Unavailable,
    )
)]
async fn register_finish(
    State(state): State<AppState>,
    principal: Principal,
    client: ClientAddr,
    JsonBody(body): JsonBody,
) -> Result<Json<PasskeyRegistered>, ApiError> {
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
    Ok(registered(passkey_id))
}

/// Starts registering the first passkey of a person enrolled without one (the
/// CLI's enrollment), authorized by password and TOTP (public; D-408).
///
/// This opens no login session: password and TOTP here only allow the
/// registration, so a person whose account has no passkey can then log in to
/// the console, whose login and step-up take passkeys only. The TOTP code's
/// time step is used up. A person with a passkey already is refused.
#[utoipa::path(
    post,
    path = "/api/v1/auth/passkeys/first/start",
    operation_id = "startFirstPasskey",
    tag = "passkeys",
    request_body = FirstPasskeyStartRequest,
    responses(
        (status = 200, description = "A registration challenge (5 minutes, single use).",
            body = PasskeyChallenge),
        ValidationFailed,
        (status = 401, description = "`unauthenticated`: any wrong part (username, password, \
            TOTP code or a code already used, a disabled or not enrolled person; audited; \
            always the same body).", body = Problem, content_type = PROBLEM_JSON),
        (status = 409, description = "`conflict` reason `passkey_exists`: the password and \
            the code are right, but the person has a passkey already; log in to the console \
            with it (audited).", body = Problem, content_type = PROBLEM_JSON),
        PayloadTooLarge,
        UnsupportedMediaType,
        RateLimited,
        Internal,
        Unavailable,
    )
)]
async fn first_start(
    State(state): State<AppState>,
    client: ClientAddr,
    JsonBody(body): JsonBody,
) -> Result<Json<PasskeyChallenge>, ApiError> {
    let now = state.clock().now_ms();
    let object = public_body(
        &state,
        client,
        now,
        &body,
        &["username", "password", "totp"],
    )?;
    let (username, password, totp) = password_and_totp(&object)?;
    let result = passkey::first_start(
        state.db(),
        state.pepper(),
        state.config(),
        now,
        username,
        password.as_ref(),
        totp.as_ref(),
    )
    .await;
    Ok(started(charged(&state, client, now, result)?))
}

/// Finishes registering the first passkey of a person (public; D-408). Opens
/// no login session: log in to the console with the new passkey next.
#[utoipa::path(
    post,
    path = "/api/v1/auth/passkeys/first/finish",
    operation_id = "finishFirstPasskey",
    tag = "passkeys",
    request_body = FirstPasskeyFinishRequest,
    responses(
        (status = 200, description = "The passkey is registered.", body = PasskeyRegistered),
        ValidationFailed,
        (status = 401, description = "`unauthenticated`: any wrong part (username, password, \
            the challenge: unknown, used, expired or not of `startFirstPasskey` for this \
            person, the attestation; audited; the challenge is spent either way).",
            body = Problem, content_type = PROBLEM_JSON),
        (status = 409, description = "`conflict` reason `passkey_exists`: a passkey was \
            registered for the person since the start (audited).", body = Problem,
            content_type = PROBLEM_JSON),
        PayloadTooLarge,
        UnsupportedMediaType,
        RateLimited,
        Internal,
        Unavailable,
    )
)]
async fn first_finish(
    State(state): State<AppState>,
    client: ClientAddr,
    JsonBody(body): JsonBody,
) -> Result<Json<PasskeyRegistered>, ApiError> {
    let now = state.clock().now_ms();
    let object = public_body(&state, client, now, &body, PASSWORD_AND_PASSKEY)?;
    let request = password_and_passkey(&object)?;
    let result = passkey::first_finish(
        state.db(),
        state.config(),
        now,
        &request.username,
        request.password.as_ref(),
        request.challenge_id,
        &request.credential,
    )
    .await;
    let passkey_id = charged(&state, client, now, result)?;
    Ok(registered(passkey_id))
}

/// Starts a web console login: an assertion challenge for the person's passkeys
/// (public).
///
/// An unknown username, or one without passkeys, gets options of the same shape
/// and fails at the finish: the answer does not tell whether the account exists.
#[utoipa::path(
    post,
    path = "/api/v1/auth/console/login/start",
    operation_id = "startConsoleLogin",
    tag = "passkeys",
    request_body = ConsoleLoginStartRequest,
    responses(
        (status = 200, description = "An assertion challenge (5 minutes, single use).",
            body = PasskeyChallenge),
        ValidationFailed,
        PayloadTooLarge,
        UnsupportedMediaType,
        RateLimited,
        Internal,
        Unavailable,
    )
)]
async fn login_start(
    State(state): State<AppState>,
    client: ClientAddr,
    JsonBody(body): JsonBody,
) -> Result<Json<PasskeyChallenge>, ApiError> {
    let now = state.clock().now_ms();
    let object = public_body(&state, client, now, &body, &["username"])?;
    let username = object.str("username")?;
    let result =
        console::login_start(state.db(), state.pepper(), state.config(), now, username).await;
    Ok(started(result?))
}

/// Finishes a web console login with password and passkey (public).
///
/// The session token travels only as the cookie `bothy_session`; state-changing
/// requests with it carry `csrf_token` in the CSRF header.
#[utoipa::path(
    post,
    path = "/api/v1/auth/console/login/finish",
    operation_id = "finishConsoleLogin",
    tag = "passkeys",
    request_body = ConsoleLoginFinishRequest,
    responses(
        (status = 200, description = "Logged in: a console login session.",
            body = ConsoleLoginResponse, headers(("Set-Cookie" = String,
            description = "`bothy_session=...; HttpOnly; Secure; SameSite=Strict; Path=/`."))),
        ValidationFailed,
        (status = 401, description = "`unauthenticated`: any wrong part (username, password, \
            challenge, assertion; audited; always the same body).", body = Problem,
            content_type = PROBLEM_JSON),
        PayloadTooLarge,
        UnsupportedMediaType,
        RateLimited,
        Internal,
        Unavailable,
    )
)]
async fn login_finish(
    State(state): State<AppState>,
    client: ClientAddr,
    JsonBody(body): JsonBody,
) -> Result<impl IntoResponse, ApiError> {
    let now = state.clock().now_ms();
    let object = public_body(&state, client, now, &body, PASSWORD_AND_PASSKEY)?;
    let request = password_and_passkey(&object)?;
    let result =
        console::login_finish(state.db(), state.pepper(), state.config(), now, request).await;
    let logged_in = charged(&state, client, now, result)?;
    let cookie = console::session_cookie(&logged_in.access_token, state.config());
    Ok((
        AppendHeaders([(SET_COOKIE, cookie)]),
        Json(ConsoleLoginResponse {
            login_session_id: db::id_text(&logged_in.login_session_id),
            expires_at: logged_in.expires_at,
            csrf_token: logged_in.csrf_token.expose().to_owned(),
        }),
    ))
}

/// Starts a passkey step-up of the caller's login session; finish it with
/// `POST /api/v1/auth/step-up` `{method: "webauthn", challenge_id, credential}`.
#[utoipa::path(
    post,
    path = "/api/v1/auth/step-up/passkey/start",
    operation_id = "startPasskeyStepUp",
    tag = "passkeys",
    security(("bearer" = []), ("console_cookie" = [], "csrf_token" = [])),
    responses(
        (status = 200, description = "An assertion challenge (5 minutes, single use).",
            body = PasskeyChallenge),
        (status = 401, description = "`unauthenticated` (no valid credential), or \
            `step_up_required` reason `passkey_invalid`: the person has no passkey (audited).",
            body = Problem, content_type = PROBLEM_JSON),
        (status = 403, description = "`forbidden` reason `subject_kind_not_allowed` (an agent \
            or app, audited) or `csrf_token_invalid`.", body = Problem,
            content_type = PROBLEM_JSON),
        Internal,
        Unavailable,
    )
)]
async fn step_up_start(
    State(state): State<AppState>,
    principal: Principal,
) -> Result<Json<PasskeyChallenge>, ApiError> {
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
    step_up_charged(state, person, client, now, result)
}
