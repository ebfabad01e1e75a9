//! The web console's login (DESIGN 3.1; spec 24 6.2 "Step-up", 12 "Web
//! console"): password + passkey, a cookie, and CSRF protection.
//!
//! - [`login_start`] (`POST /api/v1/auth/console/login/start {username}`): an
//!   assertion challenge for the person's passkeys. An unknown username, or one
//!   without passkeys, gets options of the same shape ([`passkey::decoy_options`])
//!   and fails at the finish: no enumeration.
//! - [`login_finish`] (`.../finish {username, password, challenge_id,
//!   credential}`): takes the challenge (single use), verifies the password
//!   (against the dummy hash when there is no account) and the assertion (with
//!   user verification), then creates a login session with `client_component =
//!   console`, no device, an access token that travels only as the cookie
//!   [`COOKIE_NAME`] (`HttpOnly; Secure; SameSite=Strict; Path=/`), and a CSRF
//!   token. Every failure is the same `401 unauthenticated`.
//! - CSRF: every cookie-authenticated request that is not GET or HEAD carries
//!   `X-CSRF-Token`; [`check_csrf`] compares the pepper's HMAC of it with the
//!   stored one in constant time, else `403 forbidden` `csrf_token_invalid`.
//! - The console has no device key: quick reattach never applies to it (6.2);
//!   the login session's `client_component` says so.

use serde_json::Value;
use subtle::ConstantTimeEq;
use uuid::Uuid;

use super::login_sessions;
use super::login_sessions::{ClientComponent, LoginMethod};
use super::opaque::{OpaqueSecret, SecretKind};
use super::passkey;
use super::password::Password;
use super::persons::{self, Username};
use super::{AuthFailure, IdentityError, PersonStatus, deny};
use crate::audit::{Actor, AuditAction, AuditDetails, AuditEntry, TargetKind};
use crate::clock::{UnixMillis, millis};
use crate::config::Config;
use crate::db::{self, Db, DbError};
use crate::pepper::Pepper;

/// The name of the session cookie.
pub const COOKIE_NAME: &str = "bothy_session";

/// The CSRF header.
pub const CSRF_HEADER: &str = "x-csrf-token";

/// A started console login.
pub type Started = passkey::Started;

/// A console login request.
#[derive(Debug)]
pub struct ConsoleLogin {
    /// `username`, as sent.
    pub username: String,
    /// `password`.
    pub password: Option<Password>,
    /// `challenge_id`.
    pub challenge_id: Uuid,
    /// `credential`: the `PublicKeyCredential` of the browser.
    pub credential: Value,
}

/// A console login session: set [`ConsoleLoggedIn::access_token`] as the cookie.
#[derive(Debug)]
pub struct ConsoleLoggedIn {
    /// The cookie value.
    pub access_token: OpaqueSecret,
    /// `csrf_token`.
    pub csrf_token: OpaqueSecret,
    /// `login_session_id`.
    pub login_session_id: Uuid,
    /// `expires_at` (Unix ms).
    pub expires_at: UnixMillis,
}

/// `POST /api/v1/auth/console/login/start`: see the module docs.
pub async fn login_start(
    db: &Db,
    pepper: &Pepper,
    config: &Config,
    now: UnixMillis,
    username: &str,
) -> Result<Started, IdentityError> {
    let mut uow = db.begin(now).await?;
    let person = match Username::parse(username) {
        Some(username) => persons::find_by_username(uow.conn(), &username).await?,
        None => None,
    };
    let person = person.filter(|person| person.status == PersonStatus::Active && person.enrolled);
    let real = match &person {
        Some(person) => passkey::start_assertion(&mut uow, config, person.id).await?,
        None => None,
    };
    let (options, state) = match real {
        Some((options, state)) => (options, Some(state)),
        None => (passkey::decoy_options(config, pepper, username)?, None),
    };
    let person_id = person.map(|person| person.id);
    let challenge_id = passkey::store_login_challenge(&mut uow, now, person_id, state).await?;
    uow.commit().await?;
    Ok(Started {
        challenge_id,
        options,
    })
}

fn login_denied(target: Option<Uuid>, failure: AuthFailure) -> AuditEntry {
    let entry = AuditEntry::deny(AuditAction::AuthLogin, Actor::System).details(
        AuditDetails::new()
            .code("client_component", ClientComponent::Console)
            .code("reason_code", failure),
    );
    match target {
        Some(person) => entry.target(TargetKind::Person, person),
        None => entry,
    }
}

/// `POST /api/v1/auth/console/login/finish`: see the module docs.
pub async fn login_finish(
    db: &Db,
    pepper: &Pepper,
    config: &Config,
    now: UnixMillis,
    request: ConsoleLogin,
) -> Result<ConsoleLoggedIn, IdentityError> {
    let (person, password_ok) =
        login_sessions::check_password(db, &request.username, request.password.as_ref()).await?;
    let mut uow = db.begin(now).await?;
    // Used up whatever comes next: a challenge is good for one try.
    let taken = passkey::take_login_challenge(&mut uow, now, request.challenge_id).await?;
    let failure = match (&person, &taken) {
        (None, _) => Some(AuthFailure::UnknownUsername),
        (Some(person), _) if person.status != PersonStatus::Active => {
            Some(AuthFailure::PersonInactive)
        }
        (Some(person), _) if !person.enrolled => Some(AuthFailure::NotEnrolled),
        (Some(_), _) if !password_ok => Some(AuthFailure::WrongPassword),
        (Some(person), Some((Some(bound), Some(_)))) if *bound == person.id => None,
        (Some(_), _) => Some(AuthFailure::ChallengeInvalid),
    };
    let target = person.as_ref().map(|person| person.id);
    let (Some(person), None, Some((_, state))) = (person, failure, taken) else {
        let failure = failure.unwrap_or(AuthFailure::ChallengeInvalid);
        return Err(deny(
            uow,
            login_denied(target, failure),
            IdentityError::Unauthenticated(failure),
        )
        .await);
    };
    let passkey_id = match passkey::verify_assertion(
        &mut uow,
        config,
        now,
        person.id,
        state.as_deref(),
        &request.credential,
    )
    .await?
    {
        Ok(id) => id,
        Err(failure) => {
            return Err(deny(
                uow,
                login_denied(Some(person.id), failure),
                IdentityError::Unauthenticated(failure),
            )
            .await);
        }
    };

    let access_token = OpaqueSecret::generate(SecretKind::AccessToken)?;
    let csrf_token = OpaqueSecret::generate(SecretKind::CsrfToken)?;
    let login_session_id = db::new_id(now)?;
    let expires_at = now.saturating_add(millis(config.auth.login_session_ttl));
    sqlx::query(
        "INSERT INTO login_sessions \
         (id, person_id, device_id, client_component, token_hash, created_at, expires_at, csrf_hash) \
         VALUES ($1, $2, NULL, $3, $4, $5, $6, $7)",
    )
    .bind(db::id_text(&login_session_id))
    .bind(db::id_text(&person.id))
    .bind(ClientComponent::Console.as_str())
    .bind(access_token.hash(pepper))
    .bind(now)
    .bind(expires_at)
    .bind(csrf_token.hash(pepper))
    .execute(uow.conn())
    .await
    .map_err(DbError::from)?;
    uow.audit(
        AuditEntry::allow(AuditAction::AuthLogin, Actor::Person(person.id))
            .target(TargetKind::LoginSession, login_session_id)
            .details(
                AuditDetails::new()
                    .id("passkey_id", passkey_id)
                    .code("client_component", ClientComponent::Console)
                    .code("method", LoginMethod::PasswordPasskey),
            ),
    );
    uow.commit().await?;
    Ok(ConsoleLoggedIn {
        access_token,
        csrf_token,
        login_session_id,
        expires_at,
    })
}

/// Whether `presented` is the CSRF token of console login session
/// `login_session_id` (HMAC with the pepper, compared in constant time).
pub async fn check_csrf(
    db: &Db,
    pepper: &Pepper,
    login_session_id: Uuid,
    presented: Option<&str>,
) -> Result<bool, IdentityError> {
    let Some(token) = presented.and_then(|text| OpaqueSecret::parse(SecretKind::CsrfToken, text))
    else {
        return Ok(false);
    };
    let mut conn = db.pool().acquire().await.map_err(DbError::from)?;
    let stored: Option<Option<String>> =
        sqlx::query_scalar("SELECT csrf_hash FROM login_sessions WHERE id = $1")
            .bind(db::id_text(&login_session_id))
            .fetch_optional(&mut *conn)
            .await
            .map_err(DbError::from)?;
    let Some(Some(stored)) = stored else {
        return Ok(false);
    };
    Ok(bool::from(
        token.hash(pepper).as_bytes().ct_eq(stored.as_bytes()),
    ))
}

/// The `Set-Cookie` value of a new console session.
pub fn session_cookie(token: &OpaqueSecret, config: &Config) -> String {
    let max_age = config.auth.login_session_ttl.as_secs();
    format!(
        "{COOKIE_NAME}={}; HttpOnly; Secure; SameSite=Strict; Path=/; Max-Age={max_age}",
        token.expose()
    )
}

/// The `Set-Cookie` value that clears the session cookie.
pub fn cleared_cookie() -> String {
    format!("{COOKIE_NAME}=; HttpOnly; Secure; SameSite=Strict; Path=/; Max-Age=0")
}

/// The value of cookie [`COOKIE_NAME`] in a `Cookie` header value.
pub fn cookie_value(header: &str) -> Option<&str> {
    header.split(';').find_map(|pair| {
        let (name, value) = pair.trim().split_once('=')?;
        (name == COOKIE_NAME).then_some(value.trim())
    })
}
