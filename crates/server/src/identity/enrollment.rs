//! Enrollment (DESIGN 3.1): a one-time code → a password and a TOTP secret.
//!
//! 1. An enrollment code is issued to a person — the first owner by `admin
//!    bootstrap`, others by an owner's invitation (`POST /api/v1/persons`), anyone
//!    again by `admin reset-second-factor`. It is an [`OpaqueSecret`]
//!    (`bothy_ec_`, 256 bits), stored only as the pepper's HMAC, valid for
//!    `auth.enrollment_code_ttl`. Issuing a code deletes the person's earlier
//!    unused codes and pending credentials: the newest code is the only one.
//! 2. [`check`] (`POST /api/v1/auth/enroll/check`, the code alone), optional:
//!    whether the code would be accepted, before the person chooses a password
//!    (docs/decisions.md D-372). It changes nothing; a refusal is the same 401
//!    as every other, audited like the others.
//! 3. [`start`] (`POST /api/v1/auth/enroll`, code + password): checks the password
//!    rule, hashes it, creates a *pending* TOTP secret and returns its
//!    `otpauth://` URI — the only time the secret leaves the server. Calling it
//!    again with the same code replaces the pending secret and password.
//! 4. [`confirm`] (`POST /api/v1/auth/enroll/confirm`, code + a current TOTP
//!    code): activates the credential (replacing any earlier one), sets the
//!    password, and uses the code up. The TOTP code's time step counts as used.
//!
//! A code that is unknown, used or expired, or whose person is not active, is
//! `401 unauthenticated` with the same body in every case.

use sqlx::{AnyConnection, Row};
use uuid::Uuid;
use zeroize::Zeroizing;

use super::opaque::{OpaqueSecret, SecretKind};
use super::password::{self, Password};
use super::persons::Username;
use super::totp::{TotpCode, TotpSecret};
use super::{AuthFailure, IdentityError, deny};
use crate::audit::{Actor, AuditAction, AuditDetails, AuditEntry, TargetKind};
use crate::clock::{UnixMillis, millis};
use crate::codes::code_enum;
use crate::config::AuthConfig;
use crate::db::{self, Db, DbError, UnitOfWork};
use crate::pepper::Pepper;

code_enum! {
    /// Why a code was issued (`enrollment_codes.purpose`).
    pub enum EnrollmentPurpose {
        /// The first owner (`admin bootstrap`).
        Bootstrap => "bootstrap",
        /// An owner invited the person.
        Invite => "invite",
        /// An operator reset the second factor.
        ResetSecondFactor => "reset_second_factor",
    }
}

code_enum! {
    /// The step of enrollment, in the audit (`operation`).
    pub enum EnrollmentStep {
        /// `POST /auth/enroll/check`.
        Check => "check",
        /// `POST /auth/enroll`.
        Start => "start",
        /// `POST /auth/enroll/confirm`.
        Confirm => "confirm",
    }
}

/// A code just issued: show [`IssuedCode::code`] once.
#[derive(Debug)]
pub struct IssuedCode {
    /// The person it enrolls.
    pub person_id: Uuid,
    /// The code.
    pub code: OpaqueSecret,
    /// Until when it is valid (exclusive).
    pub expires_at: UnixMillis,
}

/// Issues a new code for `person_id` in `uow`, replacing earlier unused ones.
pub async fn issue(
    uow: &mut UnitOfWork,
    pepper: &Pepper,
    auth: &AuthConfig,
    person_id: Uuid,
    purpose: EnrollmentPurpose,
) -> Result<IssuedCode, IdentityError> {
    let now = uow.now_ms();
    let person = db::id_text(&person_id);
    sqlx::query("DELETE FROM totp_credentials WHERE person_id = $1 AND status = 'pending'")
        .bind(&person)
        .execute(uow.conn())
        .await
        .map_err(DbError::from)?;
    sqlx::query("DELETE FROM enrollment_codes WHERE person_id = $1 AND used_at IS NULL")
        .bind(&person)
        .execute(uow.conn())
        .await
        .map_err(DbError::from)?;
    let code = OpaqueSecret::generate(SecretKind::EnrollmentCode)?;
    let expires_at = now.saturating_add(millis(auth.enrollment_code_ttl));
    sqlx::query(
        "INSERT INTO enrollment_codes (id, person_id, code_hash, purpose, created_at, expires_at) \
         VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(db::id_text(&db::new_id(now)?))
    .bind(&person)
    .bind(code.hash(pepper))
    .bind(purpose.as_str())
    .bind(now)
    .bind(expires_at)
    .execute(uow.conn())
    .await
    .map_err(DbError::from)?;
    Ok(IssuedCode {
        person_id,
        code,
        expires_at,
    })
}

/// A started enrollment: show the URI once.
#[derive(Debug)]
pub struct Started {
    /// The person.
    pub person_id: Uuid,
    /// Their username.
    pub username: Username,
    /// `otpauth://totp/...` with the new secret.
    pub otpauth_uri: Zeroizing<String>,
    /// Until when the code (and so the confirmation) is valid.
    pub code_expires_at: UnixMillis,
}

/// A finished enrollment.
#[derive(Debug)]
pub struct Confirmed {
    /// The person.
    pub person_id: Uuid,
    /// Their username.
    pub username: Username,
}

pub(crate) struct ValidCode {
    pub(crate) id: Uuid,
    pub(crate) person_id: Uuid,
    pub(crate) username: Username,
    expires_at: UnixMillis,
    purpose: EnrollmentPurpose,
    pending_password_hash: Option<String>,
}

pub(crate) async fn valid_code(
    conn: &mut AnyConnection,
    pepper: &Pepper,
    code: &OpaqueSecret,
    now: UnixMillis,
) -> Result<Option<ValidCode>, IdentityError> {
    let row = sqlx::query(
        "SELECT ec.id, ec.person_id, ec.expires_at, ec.purpose, ec.pending_password_hash, p.username \
         FROM enrollment_codes ec JOIN persons p ON p.principal_id = ec.person_id \
         WHERE ec.code_hash = $1 AND ec.used_at IS NULL AND ec.expires_at > $2 \
           AND p.status = 'active'",
    )
    .bind(code.hash(pepper))
    .bind(now)
    .fetch_optional(conn)
    .await
    .map_err(DbError::from)?;
    let Some(row) = row else { return Ok(None) };
    let stored = |column| move |_| IdentityError::Stored(column);
    Ok(Some(ValidCode {
        id: db::get_uuid(&row, "id")?,
        person_id: db::get_uuid(&row, "person_id")?,
        username: Username::parse(
            &row.try_get::<String, _>("username")
                .map_err(stored("persons.username"))?,
        )
        .ok_or(IdentityError::Stored("persons.username"))?,
        expires_at: row
            .try_get("expires_at")
            .map_err(stored("enrollment_codes.expires_at"))?,
        purpose: EnrollmentPurpose::parse(
            &row.try_get::<String, _>("purpose")
                .map_err(stored("enrollment_codes.purpose"))?,
        )
        .ok_or(IdentityError::Stored("enrollment_codes.purpose"))?,
        pending_password_hash: row
            .try_get("pending_password_hash")
            .map_err(stored("enrollment_codes.pending_password_hash"))?,
    }))
}

fn allowed(person_id: Uuid, step: EnrollmentStep, purpose: EnrollmentPurpose) -> AuditEntry {
    AuditEntry::allow(AuditAction::AuthEnroll, Actor::Person(person_id))
        .target(TargetKind::Person, person_id)
        .details(
            AuditDetails::new()
                .code("operation", step)
                .code("purpose", purpose),
        )
}

fn denied(actor: Actor, step: EnrollmentStep, failure: AuthFailure) -> AuditEntry {
    let entry = AuditEntry::deny(AuditAction::AuthEnroll, actor).details(
        AuditDetails::new()
            .code("operation", step)
            .code("reason_code", failure),
    );
    match actor {
        Actor::Person(id) => entry.target(TargetKind::Person, id),
        _ => entry,
    }
}

/// What [`check`] answers for a code that works.
#[derive(Debug)]
pub struct Checked {
    /// The person the code enrolls.
    pub username: Username,
    /// Until when the code is valid.
    pub code_expires_at: UnixMillis,
}

/// `POST /api/v1/auth/enroll/check`: see the module docs. Reads only; a code
/// that does not work is refused exactly as [`start`] refuses it.
pub async fn check(
    db: &Db,
    pepper: &Pepper,
    now: UnixMillis,
    code: &str,
) -> Result<Checked, IdentityError> {
    let Some(code) = OpaqueSecret::parse(SecretKind::EnrollmentCode, code) else {
        return Err(refuse_code(db, now, EnrollmentStep::Check).await);
    };
    let mut conn = db.pool().acquire().await.map_err(DbError::from)?;
    let found = valid_code(&mut conn, pepper, &code, now).await?;
    drop(conn);
    match found {
        Some(valid) => Ok(Checked {
            username: valid.username,
            code_expires_at: valid.expires_at,
        }),
        None => Err(refuse_code(db, now, EnrollmentStep::Check).await),
    }
}

/// `POST /api/v1/auth/enroll`: see the module docs.
pub async fn start(
    db: &Db,
    pepper: &Pepper,
    auth: &AuthConfig,
    now: UnixMillis,
    code: &str,
    password: &str,
) -> Result<Started, IdentityError> {
    let password = Password::new(password, "/password")?;
    let Some(code) = OpaqueSecret::parse(SecretKind::EnrollmentCode, code) else {
        return Err(refuse_code(db, now, EnrollmentStep::Start).await);
    };
    // Look first, hash second: an unknown code costs no argon2 run.
    let mut conn = db.pool().acquire().await.map_err(DbError::from)?;
    let found = valid_code(&mut conn, pepper, &code, now).await?;
    drop(conn);
    if found.is_none() {
        return Err(refuse_code(db, now, EnrollmentStep::Start).await);
    }
    let password_hash = password::hash(&password).await?;

    let mut uow = db.begin(now).await?;
    // Again inside the unit of work: the code may have been used meanwhile.
    let Some(valid) = valid_code(uow.conn(), pepper, &code, now).await? else {
        let entry = denied(
            Actor::System,
            EnrollmentStep::Start,
            AuthFailure::CodeInvalid,
        );
        return Err(deny(
            uow,
            entry,
            IdentityError::Unauthenticated(AuthFailure::CodeInvalid),
        )
        .await);
    };
    let secret = TotpSecret::generate()?;
    let credential_id = db::new_id(now)?;
    let sealed = secret.seal(pepper, credential_id)?;
    sqlx::query("DELETE FROM totp_credentials WHERE person_id = $1 AND status = 'pending'")
        .bind(db::id_text(&valid.person_id))
        .execute(uow.conn())
        .await
        .map_err(DbError::from)?;
    sqlx::query(
        "INSERT INTO totp_credentials \
         (id, person_id, enrollment_code_id, secret_sealed, status, last_used_step, created_at, activated_at) \
         VALUES ($1, $2, $3, $4, 'pending', NULL, $5, NULL)",
    )
    .bind(db::id_text(&credential_id))
    .bind(db::id_text(&valid.person_id))
    .bind(db::id_text(&valid.id))
    .bind(sealed)
    .bind(now)
    .execute(uow.conn())
    .await
    .map_err(DbError::from)?;
    sqlx::query("UPDATE enrollment_codes SET pending_password_hash = $1 WHERE id = $2")
        .bind(password_hash)
        .bind(db::id_text(&valid.id))
        .execute(uow.conn())
        .await
        .map_err(DbError::from)?;
    uow.audit(allowed(
        valid.person_id,
        EnrollmentStep::Start,
        valid.purpose,
    ));
    let otpauth_uri = secret.otpauth_uri(&valid.username, auth.totp_step.as_secs())?;
    uow.commit().await?;
    Ok(Started {
        person_id: valid.person_id,
        username: valid.username,
        otpauth_uri,
        code_expires_at: valid.expires_at,
    })
}

/// `POST /api/v1/auth/enroll/confirm`: see the module docs.
pub async fn confirm(
    db: &Db,
    pepper: &Pepper,
    auth: &AuthConfig,
    now: UnixMillis,
    code: &str,
    totp: &str,
) -> Result<Confirmed, IdentityError> {
    let Some(code) = OpaqueSecret::parse(SecretKind::EnrollmentCode, code) else {
        return Err(refuse_code(db, now, EnrollmentStep::Confirm).await);
    };
    let mut uow = db.begin(now).await?;
    let Some(valid) = valid_code(uow.conn(), pepper, &code, now).await? else {
        let entry = denied(
            Actor::System,
            EnrollmentStep::Confirm,
            AuthFailure::CodeInvalid,
        );
        return Err(deny(
            uow,
            entry,
            IdentityError::Unauthenticated(AuthFailure::CodeInvalid),
        )
        .await);
    };
    let actor = Actor::Person(valid.person_id);
    let pending = sqlx::query(
        "SELECT id, secret_sealed FROM totp_credentials \
         WHERE enrollment_code_id = $1 AND status = 'pending'",
    )
    .bind(db::id_text(&valid.id))
    .fetch_optional(uow.conn())
    .await
    .map_err(DbError::from)?;
    let (Some(pending), Some(password_hash)) = (pending, valid.pending_password_hash) else {
        // Confirm before start: nothing to confirm.
        let entry = denied(actor, EnrollmentStep::Confirm, AuthFailure::NotEnrolled);
        return Err(deny(
            uow,
            entry,
            IdentityError::Unauthenticated(AuthFailure::NotEnrolled),
        )
        .await);
    };
    let credential_id = db::get_uuid(&pending, "id")?;
    let sealed: String = pending
        .try_get("secret_sealed")
        .map_err(|_| IdentityError::Stored("totp_credentials.secret_sealed"))?;
    let secret = TotpSecret::unseal(pepper, credential_id, &sealed)?;
    let step = match TotpCode::parse(totp) {
        Some(totp) => secret.match_code(&totp, now, auth)?,
        None => None,
    };
    let Some(step) = step else {
        let entry = denied(actor, EnrollmentStep::Confirm, AuthFailure::WrongTotp);
        return Err(deny(
            uow,
            entry,
            IdentityError::Unauthenticated(AuthFailure::WrongTotp),
        )
        .await);
    };
    let step = i64::try_from(step).map_err(|_| IdentityError::Crypto("TOTP step out of range"))?;
    let person = db::id_text(&valid.person_id);
    sqlx::query("DELETE FROM totp_credentials WHERE person_id = $1 AND id <> $2")
        .bind(&person)
        .bind(db::id_text(&credential_id))
        .execute(uow.conn())
        .await
        .map_err(DbError::from)?;
    sqlx::query(
        "UPDATE totp_credentials SET status = 'active', last_used_step = $1, activated_at = $2, \
         enrollment_code_id = NULL WHERE id = $3",
    )
    .bind(step)
    .bind(now)
    .bind(db::id_text(&credential_id))
    .execute(uow.conn())
    .await
    .map_err(DbError::from)?;
    sqlx::query("UPDATE persons SET password_hash = $1, updated_at = $2 WHERE principal_id = $3")
        .bind(password_hash)
        .bind(now)
        .bind(&person)
        .execute(uow.conn())
        .await
        .map_err(DbError::from)?;
    sqlx::query(
        "UPDATE enrollment_codes SET used_at = $1, pending_password_hash = NULL WHERE id = $2",
    )
    .bind(now)
    .bind(db::id_text(&valid.id))
    .execute(uow.conn())
    .await
    .map_err(DbError::from)?;
    uow.audit(allowed(
        valid.person_id,
        EnrollmentStep::Confirm,
        valid.purpose,
    ));
    uow.commit().await?;
    Ok(Confirmed {
        person_id: valid.person_id,
        username: valid.username,
    })
}

/// Audits a refused code (actor system: nobody is known) and returns the 401.
async fn refuse_code(db: &Db, now: UnixMillis, step: EnrollmentStep) -> IdentityError {
    let error = IdentityError::Unauthenticated(AuthFailure::CodeInvalid);
    match db.begin(now).await {
        Ok(uow) => {
            deny(
                uow,
                denied(Actor::System, step, AuthFailure::CodeInvalid),
                error,
            )
            .await
        }
        Err(db) => IdentityError::Db(db),
    }
}
