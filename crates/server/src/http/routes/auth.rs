//! `/api/v1/auth/*` (DESIGN 3.1, 3.4):
//!
//! | Route | Request | Response |
//! |---|---|---|
//! | `POST /auth/enroll/check` (public) | `code` | `username`, `code_expires_at` |
//! | `POST /auth/enroll` (public) | `code`, `password` | `person_id`, `username`, `otpauth_uri`, `code_expires_at` |
//! | `POST /auth/enroll/confirm` (public) | `code`, `totp` | `person_id`, `username` |
//! | `POST /auth/login` (public) | `username`, `password`, `totp`, `device_public_key`, `device_name` | `access_token`, `login_session_id`, `device_id`, `expires_at` |
//! | `GET /auth/session` | — | `principal_id`, `kind`, persons: `username`, `role`, `login_session_id`, `device_id`, `client_component`, `expires_at`; agents and apps: `name`, `token_id` |
//! | `POST /auth/logout` | — | 204 |
//! | `GET /auth/sessions` | — | `sessions[]` (own; owners: everyone's) |
//! | `POST /auth/sessions/{id}/revoke` | — | 204 |
//! | `POST /auth/step-up` | `method: "totp"`, `code`; or `method: "webauthn"`, `challenge_id`, `credential` | `step_up_id`, `expires_at` |
//!
//! Times are Unix milliseconds. The public calls are limited by
//! `rl.public_auth` per client address: an empty bucket is `429 rate_limited`
//! (with `Retry-After` and `retry_after`) before any check, and only a failed
//! check takes a token. The step-up, which only a logged-in person can try,
//! counts its failures apart from them, in two buckets at once:
//! `rl.step_up_person` of the person and `rl.step_up_address` of the client
//! address; either one empty is `429` before the check (docs/decisions.md
//! D-353). Failed logins from an address therefore never lock a logged-in
//! person out of the step-up, one address that keeps failing is stopped
//! before the person's own bucket is empty, and guesses from many addresses
//! for one person are stopped by the person's bucket.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::http::header::SET_COOKIE;
use axum::response::{AppendHeaders, IntoResponse, Response};
use bothy_api::auth::{
    CheckEnrollmentCodeRequest, CheckEnrollmentCodeResponse, ConfirmEnrollmentRequest,
    ConfirmEnrollmentResponse, EnrollRequest, EnrollResponse, LoginRequest, LoginResponse,
    LoginSession, LoginSessionList, PERSON_KIND, PersonSession, ServiceSession, SessionResponse,
    StepUpRequest, StepUpResponse,
};
use bothy_proto::json::Object;
use bothy_proto::jwk::Ed25519PublicJwk;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::body::{ClientAddr, JsonBody, path_id, read_conn};
use crate::audit::AuditAction;
use crate::db;
use crate::http::api_doc::{
    Internal, NotFound, PayloadTooLarge, Problem, RateLimited, Unauthenticated, Unavailable,
    UnsupportedMediaType, ValidationFailed,
};
use crate::http::problem::PROBLEM_JSON;
use crate::http::{ApiError, ProblemCode};
use crate::identity::console;
use crate::identity::devices::DeviceName;
use crate::identity::login_sessions::{self, ClientComponent, SecondFactor};
use crate::identity::password::Password;
use crate::identity::principal::{PersonPrincipal, Principal};
use crate::identity::step_up::{self, CreatedStepUp, StepUpMethod, StepUpRefusal};
use crate::identity::totp::TotpCode;
use crate::identity::{IdentityError, enrollment};
use crate::state::AppState;

/// The routes of this file.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(enroll_check))
        .routes(routes!(enroll))
        .routes(routes!(enroll_confirm))
        .routes(routes!(login))
        .routes(routes!(session))
        .routes(routes!(logout))
        .routes(routes!(sessions))
        .routes(routes!(revoke_session))
        .routes(routes!(create_step_up))
}

/// `429` before any check when the client's bucket is empty.
pub(super) fn gate(state: &AppState, client: ClientAddr, now: i64) -> Result<(), ApiError> {
    state
        .public_auth_limit()
        .check(&client.0, now)
        .map_err(|retry| ApiError::new(ProblemCode::RateLimited).with_retry_after(retry.seconds))
}

/// The opening of every public route: the client's `rl.public_auth` bucket
/// before anything ([`gate`]), then the body with exactly `members`.
pub(super) fn public_body<'a>(
    state: &AppState,
    client: ClientAddr,
    now: i64,
    body: &'a serde_json::Value,
    members: &[&str],
) -> Result<Object<'a>, ApiError> {
    gate(state, client, now)?;
    Ok(Object::root(body, members)?)
}

/// `username`, `password` and `totp` of a public call that proves password
/// and TOTP code (the CLI's login, the first passkey's start), read in this
/// order: the password only bounded in length ([`Password::presented`]) and
/// the code only in form ([`TotpCode::parse`]), so a wrong one is the check's
/// `401`, never a `400` that tells it apart.
pub(super) fn password_and_totp<'a>(
    object: &Object<'a>,
) -> Result<(&'a str, Option<Password>, Option<TotpCode>), ApiError> {
    Ok((
        object.str("username")?,
        Password::presented(object.str("password")?),
        TotpCode::parse(object.str("totp")?),
    ))
}

/// Whether `error` is a failed check of a presented credential (a password,
/// a code, an assertion), which the rate limits count.
fn failed_check(error: &IdentityError) -> bool {
    matches!(
        error,
        IdentityError::Unauthenticated(_)
            | IdentityError::StepUpRequired(
                StepUpRefusal::TotpInvalid | StepUpRefusal::PasskeyInvalid
            )
    )
}

/// Charges a failed credential check to the client's bucket.
pub(super) fn charged<T>(
    state: &AppState,
    client: ClientAddr,
    now: i64,
    result: Result<T, IdentityError>,
) -> Result<T, ApiError> {
    result.map_err(|error| {
        if failed_check(&error) {
            // An empty bucket here (a concurrent failure took the last token)
            // changes nothing: this answer is a 401 either way.
            let _ = state.public_auth_limit().try_take(&client.0, now);
        }
        ApiError::from(error)
    })
}

/// Checks a one-time enrollment code before the person chooses a password
/// (public; changes nothing).
///
/// A client asks this first, so that a mistyped code is said before the
/// password prompts. A code that does not work gets the same `401` as from
/// `POST /api/v1/auth/enroll`, audited the same way; both are limited by
/// `rl.public_auth`.
#[utoipa::path(
    post,
    path = "/api/v1/auth/enroll/check",
    operation_id = "checkEnrollmentCode",
    tag = "auth",
    request_body = CheckEnrollmentCodeRequest,
    responses(
        (status = 200, description = "The code works: whom it enrolls and until when.",
            body = CheckEnrollmentCodeResponse),
        ValidationFailed,
        (status = 401, description = "`unauthenticated`: the code is unknown, used or \
            expired (audited; the same body as for enroll).", body = Problem,
            content_type = PROBLEM_JSON),
        PayloadTooLarge,
        UnsupportedMediaType,
        RateLimited,
        Internal,
        Unavailable,
    )
)]
async fn enroll_check(
    State(state): State<AppState>,
    client: ClientAddr,
    JsonBody(body): JsonBody,
) -> Result<Json<CheckEnrollmentCodeResponse>, ApiError> {
    let now = state.clock().now_ms();
    let object = public_body(&state, client, now, &body, &["code"])?;
    let code = object.str("code")?;
    let checked = charged(
        &state,
        client,
        now,
        enrollment::check(state.db(), state.pepper(), now, code).await,
    )?;
    Ok(Json(CheckEnrollmentCodeResponse {
        username: checked.username.as_str().to_owned(),
        code_expires_at: checked.code_expires_at,
    }))
}

/// `429` before the step-up's check when the person's or the client
/// address's step-up bucket is empty (D-353); `Retry-After` is the later of
/// the two.
pub(super) fn step_up_gate(
    state: &AppState,
    person: &PersonPrincipal,
    client: ClientAddr,
    now: i64,
) -> Result<(), ApiError> {
    let by_person = state
        .step_up_person_limit()
        .check(&person.person_id, now)
        .err();
    let by_address = state.step_up_address_limit().check(&client.0, now).err();
    match by_person
        .into_iter()
        .chain(by_address)
        .map(|r| r.seconds)
        .max()
    {
        None => Ok(()),
        Some(seconds) => Err(ApiError::new(ProblemCode::RateLimited).with_retry_after(seconds)),
    }
}

/// Charges a failed step-up to both step-up buckets: the person's and the
/// client address's (D-353).
pub(super) fn step_up_charged<T>(
    state: &AppState,
    person: &PersonPrincipal,
    client: ClientAddr,
    now: i64,
    result: Result<T, IdentityError>,
) -> Result<T, ApiError> {
    result.map_err(|error| {
        if failed_check(&error) {
            // As in `charged`: the answer is a 401 either way.
            let _ = state
                .step_up_person_limit()
                .try_take(&person.person_id, now);
            let _ = state.step_up_address_limit().try_take(&client.0, now);
        }
        ApiError::from(error)
    })
}

/// Starts an enrollment with a one-time code: sets the password and a pending
/// TOTP secret (public).
///
/// Add `otpauth_uri` to an authenticator app, then confirm with its current code
/// (`POST /api/v1/auth/enroll/confirm`). Enrolling again before confirming
/// replaces the pending secret.
#[utoipa::path(
    post,
    path = "/api/v1/auth/enroll",
    operation_id = "enroll",
    tag = "auth",
    request_body = EnrollRequest,
    responses(
        (status = 200, description = "The password is set; the TOTP secret is pending.",
            body = EnrollResponse),
        (status = 400, description = "`validation_failed`: the body codes, or `/password` \
            `too_short` or `too_long`.", body = Problem, content_type = PROBLEM_JSON),
        (status = 401, description = "`unauthenticated`: the code is unknown, used or \
            expired (audited).", body = Problem, content_type = PROBLEM_JSON),
        PayloadTooLarge,
        UnsupportedMediaType,
        RateLimited,
        Internal,
        Unavailable,
    )
)]
async fn enroll(
    State(state): State<AppState>,
    client: ClientAddr,
    JsonBody(body): JsonBody,
) -> Result<Json<EnrollResponse>, ApiError> {
    let now = state.clock().now_ms();
    let object = public_body(&state, client, now, &body, &["code", "password"])?;
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
    Ok(Json(EnrollResponse {
        person_id: db::id_text(&started.person_id),
        username: started.username.as_str().to_owned(),
        otpauth_uri: started.otpauth_uri.as_str().to_owned(),
        code_expires_at: started.code_expires_at,
    }))
}

/// Confirms an enrollment with a current TOTP code, which spends the one-time
/// code (public).
#[utoipa::path(
    post,
    path = "/api/v1/auth/enroll/confirm",
    operation_id = "confirmEnrollment",
    tag = "auth",
    request_body = ConfirmEnrollmentRequest,
    responses(
        (status = 200, description = "Enrolled: the person can log in.",
            body = ConfirmEnrollmentResponse),
        ValidationFailed,
        (status = 401, description = "`unauthenticated`: the code is unknown, used or \
            expired, or the TOTP code is wrong or used (audited; the same body).",
            body = Problem, content_type = PROBLEM_JSON),
        PayloadTooLarge,
        UnsupportedMediaType,
        RateLimited,
        Internal,
        Unavailable,
    )
)]
async fn enroll_confirm(
    State(state): State<AppState>,
    client: ClientAddr,
    JsonBody(body): JsonBody,
) -> Result<Json<ConfirmEnrollmentResponse>, ApiError> {
    let now = state.clock().now_ms();
    let object = public_body(&state, client, now, &body, &["code", "totp"])?;
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
    Ok(Json(ConfirmEnrollmentResponse {
        person_id: db::id_text(&confirmed.person_id),
        username: confirmed.username.as_str().to_owned(),
    }))
}

/// Logs in from the CLI with password and TOTP, and registers the device key
/// (public).
///
/// The access token authenticates later calls as `Authorization: Bearer`. A key
/// seen before is the same device (renamed to `device_name`).
#[utoipa::path(
    post,
    path = "/api/v1/auth/login",
    operation_id = "login",
    tag = "auth",
    request_body = LoginRequest,
    responses(
        (status = 200, description = "Logged in: a new login session on the device.",
            body = LoginResponse),
        (status = 400, description = "`validation_failed`: the body codes, \
            `/device_public_key` `invalid_key` or `/device_name` `invalid`.", body = Problem,
            content_type = PROBLEM_JSON),
        (status = 401, description = "`unauthenticated`: any wrong part (username, password, \
            TOTP code, a person not active or not enrolled; audited; always the same body).",
            body = Problem, content_type = PROBLEM_JSON),
        (status = 403, description = "`forbidden` reason `device_revoked`: the key's device \
            was revoked; log in with a new key.", body = Problem, content_type = PROBLEM_JSON),
        PayloadTooLarge,
        UnsupportedMediaType,
        RateLimited,
        Internal,
        Unavailable,
    )
)]
async fn login(
    State(state): State<AppState>,
    client: ClientAddr,
    JsonBody(body): JsonBody,
) -> Result<Json<LoginResponse>, ApiError> {
    let now = state.clock().now_ms();
    let object = public_body(
        &state,
        client,
        now,
        &body,
        &[
            "username",
            "password",
            "totp",
            "device_public_key",
            "device_name",
        ],
    )?;
    let (username, password, totp) = password_and_totp(&object)?;
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
    let request = login_sessions::LoginRequest {
        username: username.to_owned(),
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
    Ok(Json(LoginResponse {
        access_token: logged_in.access_token.expose().to_owned(),
        login_session_id: db::id_text(&logged_in.login_session_id),
        device_id: db::id_text(&logged_in.device_id),
        expires_at: logged_in.expires_at,
    }))
}

/// Who the caller is ("whoami"): a person in a login session, or an agent or app
/// with an API token.
#[utoipa::path(
    get,
    path = "/api/v1/auth/session",
    operation_id = "getSession",
    tag = "auth",
    security(("bearer" = []), ("console_cookie" = [])),
    responses(
        (status = 200, description = "The principal.", body = SessionResponse),
        Unauthenticated,
        Internal,
        Unavailable,
    )
)]
async fn session(principal: Principal) -> Result<Json<SessionResponse>, ApiError> {
    Ok(Json(match &principal {
        Principal::Person(person) => SessionResponse::Person(PersonSession {
            principal_id: db::id_text(&person.person_id),
            kind: PERSON_KIND.to_owned(),
            username: person.username.as_str().to_owned(),
            role: super::persons::role(person.role),
            login_session_id: db::id_text(&person.login_session_id),
            device_id: person.device_id.map(|id| db::id_text(&id)),
            client_component: client_component(person.client_component),
            expires_at: person.expires_at,
        }),
        Principal::Service(service) => SessionResponse::Service(ServiceSession {
            principal_id: db::id_text(&service.principal_id),
            kind: super::tokens::service_kind(service.kind)?,
            name: service.name.clone(),
            token_id: db::id_text(&service.token_id),
        }),
    }))
}

fn client_component(component: ClientComponent) -> bothy_api::auth::ClientComponent {
    match component {
        ClientComponent::Cli => bothy_api::auth::ClientComponent::Cli,
        ClientComponent::Console => bothy_api::auth::ClientComponent::Console,
    }
}

/// A live login session as the list shows it; `current` marks the caller's.
fn login_session_body(session: &login_sessions::LoginSession, current: uuid::Uuid) -> LoginSession {
    LoginSession {
        id: db::id_text(&session.id),
        person_id: db::id_text(&session.person_id),
        username: session.username.as_str().to_owned(),
        device_id: session.device_id.map(|id| db::id_text(&id)),
        client_component: client_component(session.client_component),
        created_at: session.created_at,
        expires_at: session.expires_at,
        current: session.id == current,
    }
}

/// Ends the caller's login session (persons); a console session's cookie is
/// cleared.
#[utoipa::path(
    post,
    path = "/api/v1/auth/logout",
    operation_id = "logout",
    tag = "auth",
    security(("bearer" = []), ("console_cookie" = [], "csrf_token" = [])),
    responses(
        (status = 204, description = "Logged out. A console session also gets a `Set-Cookie` \
            that clears its cookie.", headers(("Set-Cookie" = String,
            description = "Console sessions only: clears the session cookie."))),
        Unauthenticated,
        (status = 403, description = "`forbidden` reason `subject_kind_not_allowed` (an agent \
            or app, audited) or `csrf_token_invalid`.", body = Problem,
            content_type = PROBLEM_JSON),
        Internal,
        Unavailable,
    )
)]
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

/// The caller's live login sessions; an owner's list holds everyone's.
#[utoipa::path(
    get,
    path = "/api/v1/auth/sessions",
    operation_id = "listLoginSessions",
    tag = "auth",
    security(("bearer" = []), ("console_cookie" = [])),
    responses(
        (status = 200, description = "The live login sessions.", body = LoginSessionList),
        Unauthenticated,
        (status = 403, description = "`forbidden` reason `subject_kind_not_allowed`: an agent \
            or app (audited).", body = Problem, content_type = PROBLEM_JSON),
        Internal,
        Unavailable,
    )
)]
async fn sessions(
    State(state): State<AppState>,
    principal: Principal,
) -> Result<Json<LoginSessionList>, ApiError> {
    let now = state.clock().now_ms();
    let person = principal
        .require_person(state.db(), now, AuditAction::IdentityRead)
        .await?;
    let filter = (!person.is_owner()).then_some(person.person_id);
    let mut conn = read_conn(&state).await?;
    let sessions = login_sessions::list(&mut conn, filter, now).await?;
    let sessions = sessions
        .iter()
        .map(|session| login_session_body(session, person.login_session_id))
        .collect();
    Ok(Json(LoginSessionList { sessions }))
}

/// Ends one of the caller's login sessions (owners: anyone's).
#[utoipa::path(
    post,
    path = "/api/v1/auth/sessions/{id}/revoke",
    operation_id = "revokeLoginSession",
    tag = "auth",
    params(("id" = String, Path, format = "uuid", description = "The login session's ID.")),
    security(("bearer" = []), ("console_cookie" = [], "csrf_token" = [])),
    responses(
        (status = 204, description = "Ended (also when it had ended already)."),
        Unauthenticated,
        (status = 403, description = "`forbidden` reason `subject_kind_not_allowed` (an agent \
            or app, audited) or `csrf_token_invalid`.", body = Problem,
            content_type = PROBLEM_JSON),
        NotFound,
        Internal,
        Unavailable,
    )
)]
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

/// Steps up the caller's login session: with a TOTP code (CLI) or a passkey
/// assertion (console; challenge from `POST /api/v1/auth/step-up/passkey/start`).
///
/// The step-up belongs to this login session, lasts `terminal.step_up_max_age`
/// and is consumed by exactly one action that requires it.
#[utoipa::path(
    post,
    path = "/api/v1/auth/step-up",
    operation_id = "stepUp",
    tag = "auth",
    request_body = StepUpRequest,
    security(("bearer" = []), ("console_cookie" = [], "csrf_token" = [])),
    responses(
        (status = 200, description = "Stepped up.", body = StepUpResponse),
        (status = 400, description = "`validation_failed`: the body codes, or `/method` \
            `unknown_method`.", body = Problem, content_type = PROBLEM_JSON),
        (status = 401, description = "`unauthenticated` (no valid credential), or \
            `step_up_required` with reason `totp_invalid` (a wrong or used code: ask for a new \
            one), `passkey_required` (a console session offered TOTP) or `passkey_invalid` \
            (the assertion or its challenge did not verify); refusals are audited.",
            body = Problem, content_type = PROBLEM_JSON),
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
async fn create_step_up(
    State(state): State<AppState>,
    principal: Principal,
    client: ClientAddr,
    JsonBody(body): JsonBody,
) -> Result<Json<StepUpResponse>, ApiError> {
    let now = state.clock().now_ms();
    let person = principal
        .require_person(state.db(), now, AuditAction::AuthStepUp)
        .await?;
    step_up_gate(&state, person, client, now)?;
    let object = Object::root(&body, &["method", "code", "challenge_id", "credential"])?;
    let method = object.member("method")?;
    let method = StepUpMethod::parse(method.as_str()?).ok_or_else(|| {
        ApiError::new(ProblemCode::ValidationFailed).with_error(method.pointer(), "unknown_method")
    })?;
    // A passkey step-up (console; [`super::passkeys`]); the console's `totp`
    // goes on to `step_up::create`, which answers `passkey_required`.
    if method == StepUpMethod::Webauthn {
        let created = super::passkeys::step_up_finish(&state, client, person, &object).await?;
        return Ok(Json(step_up_body(&created)));
    }
    let code = TotpCode::parse(object.str("code")?);
    let created = step_up_charged(
        &state,
        person,
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
    Ok(Json(step_up_body(&created)))
}

fn step_up_body(created: &CreatedStepUp) -> StepUpResponse {
    StepUpResponse {
        step_up_id: db::id_text(&created.id),
        expires_at: created.expires_at,
    }
}
