//! Login sessions (DESIGN 3.1): created by `POST /api/v1/auth/login` (password
//! and a second factor, from the CLI, registering its device), carried as an
//! opaque access token (`bothy_at_`, stored as the pepper's HMAC), valid for
//! `auth.login_session_ttl`, ended by logout, revocation of the session or its
//! device, or disabling the person.
//!
//! # One end function
//! Every end goes through [`end`], in the unit of work of its cause, and says
//! why ([`EndReason`], the identity codes of 10.3). The terminal module's
//! `identity.SessionEnded` subscription (8.3, M2-46) is wired in there: [`end`]
//! ends the terminal sessions of every login session it ends, in the same
//! transaction, through [`crate::revocation::end`] with the close reason of the
//! same name ([`EndReason::close_reason`]). An ended session fails
//! authentication at once: every request looks it up. A login session that
//! merely passes `expires_at` has no end here: the job `terminal.sweep` ends
//! its terminal sessions with `session_revoked` (6.3).
//!
//! # Login
//! The checks run in an order that reveals nothing: the username is looked up,
//! the password verified (against a dummy hash when there is no account, so the
//! time is the same), status and enrollment checked, then the TOTP code. Every
//! failure answers the same `401 unauthenticated`; the audit alone says which
//! check failed, and names the account only if it exists. The route charges the
//! failure to `rl.public_auth`.

use bothy_proto::jwk::Ed25519PublicJwk;
use sqlx::any::AnyRow;
use sqlx::{AnyConnection, Row};
use uuid::Uuid;

use super::devices::{self, DeviceName};
use super::opaque::{OpaqueSecret, SecretKind};
use super::password::{self, Password};
use super::persons::{self, Username};
use super::principal::PersonPrincipal;
use super::totp::{self, TotpCode};
use super::{AuthFailure, ForbiddenReason, IdentityError, PersonStatus, Role, deny};
use crate::audit::{Actor, AuditAction, AuditDetails, AuditEntry, TargetKind};
use crate::clock::{UnixMillis, millis};
use crate::codes::code_enum;
use crate::config::AuthConfig;
use crate::db::{self, Db, DbError, UnitOfWork};
use crate::pepper::Pepper;
use crate::revocation::EndError;
use crate::revocation::{self, EndScope};

code_enum! {
    /// Why a login session ended (`login_sessions.end_reason`); the same words
    /// as the terminal's close reasons of 10.3.
    pub enum EndReason {
        /// The person logged out.
        Logout => "logout",
        /// The session was revoked (by its person, an owner, or a reset of the
        /// second factor).
        SessionRevoked => "session_revoked",
        /// Its device was revoked.
        DeviceRevoked => "device_revoked",
        /// The person was disabled.
        UserDisabled => "user_disabled",
    }
}

impl EndReason {
    /// The terminal close reason a session ended this way gets (10.3).
    pub const fn close_reason(self) -> bothy_proto::codes::CloseReason {
        use bothy_proto::codes::CloseReason;
        match self {
            EndReason::Logout => CloseReason::Logout,
            EndReason::SessionRevoked => CloseReason::SessionRevoked,
            EndReason::DeviceRevoked => CloseReason::DeviceRevoked,
            EndReason::UserDisabled => CloseReason::UserDisabled,
        }
    }
}

code_enum! {
    /// Which client a login session belongs to (`login_sessions.client_component`).
    pub enum ClientComponent {
        /// The `bothy` CLI, with a device key.
        Cli => "cli",
        /// The web console (cookie, no device key; with the passkey task).
        Console => "console",
    }
}

/// Which login sessions [`end`] ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// This one.
    Session(Uuid),
    /// Those of this device.
    Device(Uuid),
    /// Those of this person.
    Person(Uuid),
}

/// Ends the live login sessions `ending` selects, in `uow`, for `reason`;
/// returns their IDs. **The** end function of identity (module docs).
pub async fn end(
    uow: &mut UnitOfWork,
    ending: Ending,
    reason: EndReason,
) -> Result<Vec<Uuid>, IdentityError> {
    let (column, id) = match ending {
        Ending::Session(id) => ("id", id),
        Ending::Device(id) => ("device_id", id),
        Ending::Person(id) => ("person_id", id),
    };
    let now = uow.now_ms();
    // The column is one of three names written above, never input.
    let rows = sqlx::query(&format!(
        "UPDATE login_sessions SET ended_at = $1, end_reason = $2 \
         WHERE {column} = $3 AND ended_at IS NULL RETURNING id"
    ))
    .bind(now)
    .bind(reason.as_str())
    .bind(db::id_text(&id))
    .fetch_all(uow.conn())
    .await
    .map_err(DbError::from)?;
    let mut ended = rows
        .iter()
        .map(|row| db::get_uuid(row, "id"))
        .collect::<Result<Vec<_>, _>>()?;
    ended.sort();
    // identity.SessionEnded (8.3, M2-46): their terminal sessions end in this
    // unit of work; sessions closed before keep their first end.
    for &login_session in &ended {
        revocation::end(
            uow,
            EndScope::LoginSession(login_session),
            reason.close_reason(),
            None,
        )
        .await
        .map_err(terminal_end_error)?;
    }
    Ok(ended)
}

/// Maps an error of [`crate::revocation::end`] for identity: a database error
/// stays one; a wrong close pair cannot come from the fixed reasons here and is
/// an internal error.
pub(crate) fn terminal_end_error(error: EndError) -> IdentityError {
    match error {
        EndError::Db(error) => IdentityError::Db(error),
        EndError::InvalidPair { .. } => IdentityError::Stored("close_reason and close_detail"),
    }
}

/// The second factor of a login. Passwords always come with one; the WebAuthn
/// task adds `Passkey` (console logins), which is not accepted before it exists.
#[derive(Debug, Clone)]
pub enum SecondFactor {
    /// A TOTP code (`totp`); `None` when the member had not the form of one
    /// (it fails like a wrong code, with the same answer).
    Totp(Option<TotpCode>),
}

/// A login request (`POST /api/v1/auth/login`, members pinned by DESIGN 3.4).
#[derive(Debug)]
pub struct LoginRequest {
    /// `username`, as sent (folded and checked here).
    pub username: String,
    /// `password`.
    pub password: Option<Password>,
    /// `totp`.
    pub second_factor: SecondFactor,
    /// `device_public_key`, decoded and checked.
    pub device_public_key: Ed25519PublicJwk,
    /// `device_name`.
    pub device_name: DeviceName,
}

/// A successful login: hand out [`LoggedIn::access_token`] once.
#[derive(Debug)]
pub struct LoggedIn {
    /// `access_token`.
    pub access_token: OpaqueSecret,
    /// `login_session_id`.
    pub login_session_id: Uuid,
    /// `device_id`.
    pub device_id: Uuid,
    /// `expires_at` (Unix ms).
    pub expires_at: UnixMillis,
    /// The person.
    pub person_id: Uuid,
}

fn login_denied(target: Option<Uuid>, failure: AuthFailure) -> AuditEntry {
    // The caller is not authenticated: the actor is unknown (system), the
    // target is the account tried, if it exists. No username of a non-existent
    // account, no password, no code.
    let entry = AuditEntry::deny(AuditAction::AuthLogin, Actor::System)
        .details(AuditDetails::new().code("reason_code", failure));
    match target {
        Some(person) => entry.target(TargetKind::Person, person),
        None => entry,
    }
}

/// The first factor of every login, CLI and console, in one place: the person of
/// `username` (if there is one) and whether `password` is theirs. A malformed or
/// unknown username and a missing password still cost one password check, so the
/// time of the answer does not tell whether the account exists.
pub(crate) async fn check_password(
    db: &Db,
    username: &str,
    password: Option<&Password>,
) -> Result<(Option<persons::Person>, bool), IdentityError> {
    let found = match Username::parse(username) {
        Some(username) => {
            let mut conn = db.pool().acquire().await.map_err(DbError::from)?;
            match persons::find_by_username(&mut conn, &username).await? {
                Some(person) => {
                    let hash = persons::password_hash(&mut conn, person.id).await?;
                    Some((person, hash))
                }
                None => None,
            }
        }
        None => None,
    };
    let ok = match (password, &found) {
        (Some(password), Some((_, hash))) => password::verify(password, hash.clone()).await?,
        (Some(password), None) => password::verify(password, None).await?,
        (None, _) => {
            let filler = Password::presented("").ok_or(IdentityError::Crypto("filler"))?;
            password::verify(&filler, None).await?
        }
    };
    Ok((found.map(|(person, _)| person), ok))
}

/// `POST /api/v1/auth/login`: see the module docs.
pub async fn login(
    db: &Db,
    pepper: &Pepper,
    auth: &AuthConfig,
    now: UnixMillis,
    request: LoginRequest,
) -> Result<LoggedIn, IdentityError> {
    let (person, password_ok) =
        check_password(db, &request.username, request.password.as_ref()).await?;
    let failure = match &person {
        None => Some(AuthFailure::UnknownUsername),
        Some(person) if person.status != PersonStatus::Active => Some(AuthFailure::PersonInactive),
        Some(person) if !person.enrolled => Some(AuthFailure::NotEnrolled),
        Some(_) if !password_ok => Some(AuthFailure::WrongPassword),
        Some(_) => None,
    };

    let mut uow = db.begin(now).await?;
    let target = person.as_ref().map(|person| person.id);
    let (Some(person), None) = (person, failure) else {
        let failure = failure.unwrap_or(AuthFailure::UnknownUsername);
        let entry = login_denied(target, failure);
        return Err(deny(uow, entry, IdentityError::Unauthenticated(failure)).await);
    };

    let SecondFactor::Totp(code) = &request.second_factor;
    if let Err(failure) =
        totp::verify_person_code(&mut uow, pepper, auth, person.id, code.as_ref()).await?
    {
        let entry = login_denied(Some(person.id), failure);
        return Err(deny(uow, entry, IdentityError::Unauthenticated(failure)).await);
    }

    let device = match devices::register(
        &mut uow,
        person.id,
        &request.device_public_key,
        &request.device_name,
    )
    .await?
    {
        Ok(device) => device,
        Err(failure) => {
            let entry = login_denied(Some(person.id), failure);
            return Err(deny(
                uow,
                entry,
                IdentityError::Forbidden(ForbiddenReason::DeviceRevoked),
            )
            .await);
        }
    };

    let access_token = OpaqueSecret::generate(SecretKind::AccessToken)?;
    let login_session_id = db::new_id(now)?;
    let expires_at = now.saturating_add(millis(auth.login_session_ttl));
    sqlx::query(
        "INSERT INTO login_sessions \
         (id, person_id, device_id, client_component, token_hash, created_at, expires_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(db::id_text(&login_session_id))
    .bind(db::id_text(&person.id))
    .bind(db::id_text(&device.id))
    .bind(ClientComponent::Cli.as_str())
    .bind(access_token.hash(pepper))
    .bind(now)
    .bind(expires_at)
    .execute(uow.conn())
    .await
    .map_err(DbError::from)?;
    uow.audit(
        AuditEntry::allow(AuditAction::AuthLogin, Actor::Person(person.id))
            .target(TargetKind::LoginSession, login_session_id)
            .details(
                AuditDetails::new()
                    .id("device_id", device.id)
                    .flag("new_device", device.new)
                    .code("client_component", ClientComponent::Cli)
                    .code("method", LoginMethod::PasswordTotp),
            ),
    );
    uow.commit().await?;
    Ok(LoggedIn {
        access_token,
        login_session_id,
        device_id: device.id,
        expires_at,
        person_id: person.id,
    })
}

code_enum! {
    /// How a login authenticated, in the audit (`method`).
    pub enum LoginMethod {
        /// Password and TOTP (CLI).
        PasswordTotp => "password_totp",
        /// Password and passkey (web console).
        PasswordPasskey => "password_passkey",
    }
}

/// The person principal of a live access token: not ended, not expired, its
/// person active, its device (if any) not revoked.
pub(crate) async fn authenticate(
    conn: &mut AnyConnection,
    pepper: &Pepper,
    token: &OpaqueSecret,
    now: UnixMillis,
) -> Result<Option<PersonPrincipal>, IdentityError> {
    let row = sqlx::query(
        "SELECT ls.id, ls.person_id, ls.device_id, ls.client_component, ls.expires_at, \
                p.username, p.role \
         FROM login_sessions ls \
         JOIN persons p ON p.principal_id = ls.person_id \
         LEFT JOIN devices d ON d.id = ls.device_id \
         WHERE ls.token_hash = $1 AND ls.ended_at IS NULL AND ls.expires_at > $2 \
           AND p.status = 'active' AND d.revoked_at IS NULL",
    )
    .bind(token.hash(pepper))
    .bind(now)
    .fetch_optional(conn)
    .await
    .map_err(DbError::from)?;
    let Some(row) = row else { return Ok(None) };
    let stored = |column| move |_| IdentityError::Stored(column);
    Ok(Some(PersonPrincipal {
        person_id: db::get_uuid(&row, "person_id")?,
        username: Username::parse(
            &row.try_get::<String, _>("username")
                .map_err(stored("persons.username"))?,
        )
        .ok_or(IdentityError::Stored("persons.username"))?,
        role: Role::parse(
            &row.try_get::<String, _>("role")
                .map_err(stored("persons.role"))?,
        )
        .ok_or(IdentityError::Stored("persons.role"))?,
        login_session_id: db::get_uuid(&row, "id")?,
        device_id: db::get_opt_uuid(&row, "device_id")?,
        client_component: ClientComponent::parse(
            &row.try_get::<String, _>("client_component")
                .map_err(stored("login_sessions.client_component"))?,
        )
        .ok_or(IdentityError::Stored("login_sessions.client_component"))?,
        expires_at: row
            .try_get("expires_at")
            .map_err(stored("login_sessions.expires_at"))?,
    }))
}

/// A live login session as the API lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoginSession {
    /// Its ID.
    pub id: Uuid,
    /// Its person.
    pub person_id: Uuid,
    /// The person's username.
    pub username: Username,
    /// The device (CLI sessions).
    pub device_id: Option<Uuid>,
    /// CLI or console.
    pub client_component: ClientComponent,
    /// Login time.
    pub created_at: UnixMillis,
    /// Expiry.
    pub expires_at: UnixMillis,
}

fn decode_session(row: &AnyRow) -> Result<LoginSession, IdentityError> {
    let stored = |column| move |_| IdentityError::Stored(column);
    Ok(LoginSession {
        id: db::get_uuid(row, "id")?,
        person_id: db::get_uuid(row, "person_id")?,
        username: Username::parse(
            &row.try_get::<String, _>("username")
                .map_err(stored("persons.username"))?,
        )
        .ok_or(IdentityError::Stored("persons.username"))?,
        device_id: db::get_opt_uuid(row, "device_id")?,
        client_component: ClientComponent::parse(
            &row.try_get::<String, _>("client_component")
                .map_err(stored("login_sessions.client_component"))?,
        )
        .ok_or(IdentityError::Stored("login_sessions.client_component"))?,
        created_at: row
            .try_get("created_at")
            .map_err(stored("login_sessions.created_at"))?,
        expires_at: row
            .try_get("expires_at")
            .map_err(stored("login_sessions.expires_at"))?,
    })
}

/// The live login sessions of `person_id`, or of everyone with `None`.
pub async fn list(
    conn: &mut AnyConnection,
    person_id: Option<Uuid>,
    now: UnixMillis,
) -> Result<Vec<LoginSession>, IdentityError> {
    const SELECT: &str = "SELECT ls.id, ls.person_id, p.username, ls.device_id, \
         ls.client_component, ls.created_at, ls.expires_at \
         FROM login_sessions ls JOIN persons p ON p.principal_id = ls.person_id \
         WHERE ls.ended_at IS NULL AND ls.expires_at > $1";
    let rows = match person_id {
        Some(person) => {
            sqlx::query(&format!("{SELECT} AND ls.person_id = $2 ORDER BY ls.id"))
                .bind(now)
                .bind(db::id_text(&person))
                .fetch_all(conn)
                .await
        }
        None => {
            sqlx::query(&format!("{SELECT} ORDER BY ls.id"))
                .bind(now)
                .fetch_all(conn)
                .await
        }
    }
    .map_err(DbError::from)?;
    rows.iter().map(decode_session).collect()
}

/// `POST /api/v1/auth/logout`: ends the caller's own login session.
pub async fn logout(
    db: &Db,
    now: UnixMillis,
    person: &PersonPrincipal,
) -> Result<(), IdentityError> {
    let mut uow = db.begin(now).await?;
    end(
        &mut uow,
        Ending::Session(person.login_session_id),
        EndReason::Logout,
    )
    .await?;
    uow.audit(
        AuditEntry::allow(AuditAction::AuthLogout, person.actor())
            .target(TargetKind::LoginSession, person.login_session_id),
    );
    uow.commit().await?;
    Ok(())
}

/// `POST /api/v1/auth/sessions/{id}/revoke`: a person revokes their own login
/// session, an owner anyone's; others get 404. Whether it was live.
pub async fn revoke(
    db: &Db,
    now: UnixMillis,
    actor: &PersonPrincipal,
    session_id: Uuid,
) -> Result<bool, IdentityError> {
    let mut uow = db.begin(now).await?;
    let owner: Option<Uuid> =
        sqlx::query_scalar::<_, String>("SELECT person_id FROM login_sessions WHERE id = $1")
            .bind(db::id_text(&session_id))
            .fetch_optional(uow.conn())
            .await
            .map_err(DbError::from)?
            .map(|text| {
                bothy_proto::ids::parse_uuid(&text)
                    .map_err(|_| IdentityError::Stored("login_sessions.person_id"))
            })
            .transpose()?;
    let Some(session_person) = owner else {
        return Err(IdentityError::NotFound);
    };
    if session_person != actor.person_id && !actor.is_owner() {
        let entry = AuditEntry::deny(AuditAction::SessionRevoke, actor.actor())
            .target(TargetKind::LoginSession, session_id)
            .details(AuditDetails::new().code("reason_code", AuthFailure::OwnerRequired));
        return Err(deny(uow, entry, IdentityError::NotFound).await);
    }
    let ended = end(
        &mut uow,
        Ending::Session(session_id),
        EndReason::SessionRevoked,
    )
    .await?;
    uow.audit(
        AuditEntry::allow(AuditAction::SessionRevoke, actor.actor())
            .target(TargetKind::LoginSession, session_id)
            .details(
                AuditDetails::new()
                    .id("person_id", session_person)
                    .flag("no_change", ended.is_empty()),
            ),
    );
    uow.commit().await?;
    Ok(!ended.is_empty())
}
