//! Step-up (DESIGN 3.1; spec 6.1 step 3, 6.2 "Step-up", 13): a fresh proof of
//! the second factor that belongs to one login session, is usable for
//! `terminal.step_up_max_age` and is consumed by exactly one `terminal.open` or
//! `terminal.attach`, in that action's unit of work.
//!
//! - [`create`] (`POST /api/v1/auth/step-up`, `{method: "totp", code}`): checks a
//!   TOTP code like a login does (each time step once), stores the step-up with
//!   `expires_at = now + terminal.step_up_max_age` and returns its ID. A wrong
//!   code is `401 step_up_required` with `reason: totp_invalid` — the access
//!   token is fine, so the client asks for a new code instead of a new login.
//! - [`consume`]: one conditional `UPDATE ... WHERE consumed_at IS NULL`; only
//!   the caller whose statement changed the row succeeds, so two concurrent
//!   consumers cannot both pass (PostgreSQL re-checks the condition after the
//!   first commits; SQLite runs one writer at a time). Every refusal is
//!   [`IdentityError::StepUpRequired`] with a [`StepUpRefusal`] for the audit.
//! - Methods: [`StepUpMethod`]. `webauthn` step-ups (an assertion with
//!   `userVerification = required`) are created by
//!   [`super::passkey::step_up_finish`] through [`insert`]; the console takes
//!   only those: its `totp` is `401 step_up_required` with `reason:
//!   passkey_required` (6.2, 12, 13).

use sqlx::Row;
use uuid::Uuid;

use super::login_sessions::ClientComponent;
use super::principal::PersonPrincipal;
use super::totp::{self, TotpCode};
use super::{IdentityError, deny};
use crate::audit::{AuditAction, AuditDetails, AuditEntry, TargetKind};
use crate::clock::{UnixMillis, millis};
use crate::codes::code_enum;
use crate::config::Config;
use crate::db::{self, Db, DbError, UnitOfWork};
use crate::pepper::Pepper;

code_enum! {
    /// How a step-up was proven (`step_ups.method`).
    pub enum StepUpMethod {
        /// A TOTP code (CLI).
        Totp => "totp",
        /// A WebAuthn assertion with user verification (console; [`super::passkey`]).
        Webauthn => "webauthn",
    }
}

code_enum! {
    /// Why a step-up was refused (the audit's `reason_code`).
    pub enum StepUpRefusal {
        /// No step-up with that ID.
        Missing => "step_up_missing",
        /// The step-up belongs to another login session.
        OtherSession => "step_up_other_session",
        /// Older than `terminal.step_up_max_age`.
        Expired => "step_up_expired",
        /// Consumed already.
        Consumed => "step_up_consumed",
        /// Its login session ended or expired.
        SessionEnded => "login_session_ended",
        /// Creating one: the TOTP code was wrong or used.
        TotpInvalid => "totp_invalid",
        /// Creating one: a console session offered TOTP; it takes only passkeys.
        PasskeyRequired => "passkey_required",
        /// Creating one: the passkey assertion or its challenge did not verify.
        PasskeyInvalid => "passkey_invalid",
    }
}

impl StepUpRefusal {
    /// The `reason` the client sees, where it helps the client react.
    pub const fn client_reason(self) -> Option<&'static str> {
        match self {
            StepUpRefusal::TotpInvalid => Some("totp_invalid"),
            StepUpRefusal::PasskeyRequired => Some("passkey_required"),
            StepUpRefusal::PasskeyInvalid => Some("passkey_invalid"),
            _ => None,
        }
    }
}

/// A step-up just created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CreatedStepUp {
    /// `step_up_id`.
    pub id: Uuid,
    /// `expires_at` (Unix ms): the last moment it can be consumed.
    pub expires_at: UnixMillis,
}

/// A consumed step-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConsumedStepUp {
    /// Its ID.
    pub id: Uuid,
    /// How it was proven (the console accepts only passkeys, 6.2).
    pub method: StepUpMethod,
}

/// `POST /api/v1/auth/step-up`: see the module docs.
pub async fn create(
    db: &Db,
    pepper: &Pepper,
    config: &Config,
    now: UnixMillis,
    person: &PersonPrincipal,
    method: StepUpMethod,
    code: Option<&TotpCode>,
) -> Result<CreatedStepUp, IdentityError> {
    let mut uow = db.begin(now).await?;
    // The console takes only passkeys (6.2, 12); passkey step-ups are created by
    // `passkey::step_up_finish`, never here.
    let refusal = match (person.client_component, method) {
        (ClientComponent::Console, _) => Some(StepUpRefusal::PasskeyRequired),
        (_, StepUpMethod::Webauthn) => Some(StepUpRefusal::PasskeyInvalid),
        (_, StepUpMethod::Totp) => None,
    };
    if let Some(refusal) = refusal {
        let entry = AuditEntry::deny(AuditAction::AuthStepUp, person.actor())
            .target(TargetKind::LoginSession, person.login_session_id)
            .details(
                AuditDetails::new()
                    .code("method", method)
                    .code("reason_code", refusal),
            );
        return Err(deny(uow, entry, IdentityError::StepUpRequired(refusal)).await);
    }
    if let Err(failure) =
        totp::verify_person_code(&mut uow, pepper, &config.auth, person.person_id, code).await?
    {
        let entry = AuditEntry::deny(AuditAction::AuthStepUp, person.actor())
            .target(TargetKind::LoginSession, person.login_session_id)
            .details(
                AuditDetails::new()
                    .code("method", method)
                    .code("reason_code", failure),
            );
        return Err(deny(
            uow,
            entry,
            IdentityError::StepUpRequired(StepUpRefusal::TotpInvalid),
        )
        .await);
    }
    let created = insert(&mut uow, config, now, person, method).await?;
    uow.commit().await?;
    Ok(created)
}

/// Stores a step-up of `person`'s login session proven by `method` and audits
/// it, in `uow` (the TOTP check above, the passkey check of `passkey`).
pub(crate) async fn insert(
    uow: &mut UnitOfWork,
    config: &Config,
    now: UnixMillis,
    person: &PersonPrincipal,
    method: StepUpMethod,
) -> Result<CreatedStepUp, IdentityError> {
    let id = db::new_id(now)?;
    // Inclusive: a step-up exactly step_up_max_age old is still "at most this old".
    let expires_at = now.saturating_add(millis(config.terminal.step_up_max_age));
    sqlx::query(
        "INSERT INTO step_ups (id, login_session_id, method, created_at, expires_at, consumed_at) \
         VALUES ($1, $2, $3, $4, $5, NULL)",
    )
    .bind(db::id_text(&id))
    .bind(db::id_text(&person.login_session_id))
    .bind(method.as_str())
    .bind(now)
    .bind(expires_at)
    .execute(uow.conn())
    .await
    .map_err(DbError::from)?;
    uow.audit(
        AuditEntry::allow(AuditAction::AuthStepUp, person.actor())
            .target(TargetKind::LoginSession, person.login_session_id)
            .details(
                AuditDetails::new()
                    .id("step_up_id", id)
                    .code("method", method),
            ),
    );
    Ok(CreatedStepUp { id, expires_at })
}

/// Consumes step-up `step_up_id` of login session `login_session_id` at `now`,
/// in the caller's unit of work (the terminal module's open or attach):
/// succeeds once; refuses one that is missing, of another login session, older
/// than `terminal.step_up_max_age`, consumed, or whose login session ended.
/// Rolled back with the caller's unit of work, the step-up stays unconsumed.
pub async fn consume(
    uow: &mut UnitOfWork,
    login_session_id: Uuid,
    step_up_id: Uuid,
    now: UnixMillis,
) -> Result<ConsumedStepUp, IdentityError> {
    let consumed = sqlx::query(
        "UPDATE step_ups SET consumed_at = $1 \
         WHERE id = $2 AND login_session_id = $3 AND consumed_at IS NULL AND expires_at >= $1 \
           AND EXISTS (SELECT 1 FROM login_sessions ls \
                       WHERE ls.id = $3 AND ls.ended_at IS NULL AND ls.expires_at > $1) \
         RETURNING method",
    )
    .bind(now)
    .bind(db::id_text(&step_up_id))
    .bind(db::id_text(&login_session_id))
    .fetch_optional(uow.conn())
    .await
    .map_err(DbError::from)?;
    if let Some(row) = consumed {
        let method: String = row
            .try_get("method")
            .map_err(|_| IdentityError::Stored("step_ups.method"))?;
        return Ok(ConsumedStepUp {
            id: step_up_id,
            method: StepUpMethod::parse(&method).ok_or(IdentityError::Stored("step_ups.method"))?,
        });
    }
    // Refused: say why, for the caller's audit entry.
    let row = sqlx::query(
        "SELECT su.login_session_id, su.consumed_at, su.expires_at FROM step_ups su WHERE su.id = $1",
    )
    .bind(db::id_text(&step_up_id))
    .fetch_optional(uow.conn())
    .await
    .map_err(DbError::from)?;
    let refusal = match row {
        None => StepUpRefusal::Missing,
        Some(row) => {
            let stored = |_| IdentityError::Stored("step_ups row");
            let owner = db::get_uuid(&row, "login_session_id")?;
            let consumed_at: Option<i64> = row.try_get("consumed_at").map_err(stored)?;
            let expires_at: i64 = row.try_get("expires_at").map_err(stored)?;
            if owner != login_session_id {
                StepUpRefusal::OtherSession
            } else if consumed_at.is_some() {
                StepUpRefusal::Consumed
            } else if expires_at < now {
                StepUpRefusal::Expired
            } else {
                StepUpRefusal::SessionEnded
            }
        }
    };
    Err(IdentityError::StepUpRequired(refusal))
}
