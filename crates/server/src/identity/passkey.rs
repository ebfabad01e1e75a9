//! WebAuthn passkeys (DESIGN 3.1; spec 24 6.2 "Step-up", 12 "Web console", 13,
//! TM-T07, TM-T12): registration during enrollment or by a logged-in person,
//! the passkey half of the console login, and passkey step-ups.
//!
//! - Relying party: [`relying_party`] — `rp_id` is the host of
//!   `server.public_url`, the origin is that URL.
//! - Every ceremony is a start and a finish. Start stores the webauthn-rs state
//!   in `webauthn_challenges` (valid [`CHALLENGE_TTL_MS`], bound to the person, the
//!   enrollment code or the login session it was issued for); finish takes the
//!   challenge with one conditional `UPDATE ... WHERE used_at IS NULL`, so it is
//!   single use even when the finish then fails, and a replay is refused.
//! - webauthn-rs passkeys always ask for `userVerification = required`; the
//!   finish checks the result says so as well.
//! - Credentials are stored per person (`passkeys`, the webauthn-rs `Passkey` as
//!   JSON); the counter and backup flags are written back at every use.
//! - Nothing of a credential, a challenge or a state reaches the audit, an
//!   event, a log line or an error: the audit names IDs and codes only.

use serde_json::Value;
use sqlx::Row;
use uuid::Uuid;
use webauthn_rs::prelude::{
    Passkey, PasskeyAuthentication, PasskeyRegistration, PublicKeyCredential,
    RegisterPublicKeyCredential, Url, Webauthn, WebauthnBuilder,
};

use super::login_sessions;
use super::opaque::{OpaqueSecret, SecretKind};
use super::password::Password;
use super::principal::PersonPrincipal;
use super::step_up::{self, CreatedStepUp, StepUpMethod, StepUpRefusal};
use super::totp::{self, TotpCode};
use super::{AuthFailure, ConflictReason, IdentityError, PersonStatus, deny, enrollment};
use crate::audit::{Actor, AuditAction, AuditCode, AuditDetails, AuditEntry, TargetKind};
use crate::clock::UnixMillis;
use crate::codes::code_enum;
use crate::config::Config;
use crate::db::{self, Db, DbError, UnitOfWork};
use crate::pepper::{Pepper, PepperPurpose};

/// How long a challenge may be finished after its start (exclusive); the same
/// as the `timeout` webauthn-rs puts into the options.
pub const CHALLENGE_TTL_MS: i64 = 5 * 60 * 1000;

code_enum! {
    /// What a challenge is for (`webauthn_challenges.purpose`).
    pub enum ChallengePurpose {
        /// Registration during enrollment (bound to the enrollment code).
        Enroll => "enroll",
        /// Registration by a logged-in person (bound to the login session).
        Register => "register",
        /// The passkey of a console login (bound to the username's person, if any).
        ConsoleLogin => "console_login",
        /// A passkey step-up (bound to the login session).
        StepUp => "step_up",
    }
}

code_enum! {
    /// The passkey operation, in the audit (`operation`).
    pub enum PasskeyOperation {
        /// A passkey registered during enrollment.
        EnrollPasskey => "passkey_register_enroll",
        /// A passkey added by a logged-in person.
        AddPasskey => "passkey_register",
        /// The first passkey of a person, authorized by password and TOTP
        /// without a login session (D-408).
        FirstPasskey => "passkey_register_first",
    }
}

/// A started ceremony: hand `options` to the browser, keep `challenge_id`.
#[derive(Debug, Clone)]
pub struct Started {
    /// `challenge_id`.
    pub challenge_id: Uuid,
    /// `options`: `PublicKeyCredentialCreationOptions` or `...RequestOptions`.
    pub options: Value,
}

/// The relying party of `server.public_url`.
pub fn relying_party(config: &Config) -> Result<Webauthn, IdentityError> {
    let failed = |_| IdentityError::Crypto("the WebAuthn relying party");
    let origin = Url::parse(config.server.public_url.as_str()).map_err(failed)?;
    let rp_id = origin
        .host_str()
        .ok_or(IdentityError::Crypto("the WebAuthn relying party"))?
        .to_owned();
    WebauthnBuilder::new(&rp_id, &origin)
        .and_then(|builder| builder.rp_name("bothy").build())
        .map_err(|_| IdentityError::Crypto("the WebAuthn relying party"))
}

/// A taken (now used) challenge.
#[derive(Debug)]
struct Taken {
    person_id: Option<Uuid>,
    enrollment_code_id: Option<Uuid>,
    login_session_id: Option<Uuid>,
    state: Option<String>,
}

/// What a challenge is bound to.
#[derive(Debug, Clone, Copy, Default)]
struct Binding {
    person_id: Option<Uuid>,
    enrollment_code_id: Option<Uuid>,
    login_session_id: Option<Uuid>,
}

async fn store_challenge(
    uow: &mut UnitOfWork,
    now: UnixMillis,
    purpose: ChallengePurpose,
    binding: Binding,
    state: Option<String>,
) -> Result<Uuid, IdentityError> {
    let id = db::new_id(now)?;
    sqlx::query(
        "INSERT INTO webauthn_challenges (id, purpose, person_id, enrollment_code_id, \
         login_session_id, state, created_at, expires_at, used_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, NULL)",
    )
    .bind(db::id_text(&id))
    .bind(purpose.as_str())
    .bind(binding.person_id.map(|id| db::id_text(&id)))
    .bind(binding.enrollment_code_id.map(|id| db::id_text(&id)))
    .bind(binding.login_session_id.map(|id| db::id_text(&id)))
    .bind(state)
    .bind(now)
    .bind(now.saturating_add(CHALLENGE_TTL_MS))
    .execute(uow.conn())
    .await
    .map_err(DbError::from)?;
    Ok(id)
}

/// Uses challenge `id` of `purpose` up, if it is live: single use.
async fn take_challenge(
    uow: &mut UnitOfWork,
    id: Uuid,
    purpose: ChallengePurpose,
    now: UnixMillis,
) -> Result<Option<Taken>, IdentityError> {
    let row = sqlx::query(
        "UPDATE webauthn_challenges SET used_at = $1 \
         WHERE id = $2 AND purpose = $3 AND used_at IS NULL AND expires_at > $1 \
         RETURNING person_id, enrollment_code_id, login_session_id, state",
    )
    .bind(now)
    .bind(db::id_text(&id))
    .bind(purpose.as_str())
    .fetch_optional(uow.conn())
    .await
    .map_err(DbError::from)?;
    let Some(row) = row else { return Ok(None) };
    Ok(Some(Taken {
        person_id: db::get_opt_uuid(&row, "person_id")?,
        enrollment_code_id: db::get_opt_uuid(&row, "enrollment_code_id")?,
        login_session_id: db::get_opt_uuid(&row, "login_session_id")?,
        state: row
            .try_get("state")
            .map_err(|_| IdentityError::Stored("webauthn_challenges.state"))?,
    }))
}

/// The stored passkeys of `person_id`, with their row IDs.
async fn person_passkeys(
    uow: &mut UnitOfWork,
    person_id: Uuid,
) -> Result<Vec<(Uuid, Passkey)>, IdentityError> {
    let rows = sqlx::query("SELECT id, passkey FROM passkeys WHERE person_id = $1 ORDER BY id")
        .bind(db::id_text(&person_id))
        .fetch_all(uow.conn())
        .await
        .map_err(DbError::from)?;
    rows.iter()
        .map(|row| {
            let text: String = row
                .try_get("passkey")
                .map_err(|_| IdentityError::Stored("passkeys.passkey"))?;
            let passkey = serde_json::from_str(&text)
                .map_err(|_| IdentityError::Stored("passkeys.passkey"))?;
            Ok((db::get_uuid(row, "id")?, passkey))
        })
        .collect()
}

fn to_json<T: serde::Serialize>(value: &T) -> Result<String, IdentityError> {
    serde_json::to_string(value).map_err(|_| IdentityError::Crypto("WebAuthn state"))
}

fn to_value<T: serde::Serialize>(value: &T) -> Result<Value, IdentityError> {
    serde_json::to_value(value).map_err(|_| IdentityError::Crypto("WebAuthn options"))
}

fn from_state<T: serde::de::DeserializeOwned>(state: Option<&str>) -> Option<T> {
    state.and_then(|text| serde_json::from_str(text).ok())
}

/// Starts a registration for `person_id` (`username`), excluding their passkeys.
async fn start_registration(
    uow: &mut UnitOfWork,
    config: &Config,
    now: UnixMillis,
    person_id: Uuid,
    username: &str,
    purpose: ChallengePurpose,
    binding: Binding,
) -> Result<Started, IdentityError> {
    let rp = relying_party(config)?;
    let exclude: Vec<_> = person_passkeys(uow, person_id)
        .await?
        .iter()
        .map(|(_, passkey)| passkey.cred_id().clone())
        .collect();
    let (options, state) = rp
        .start_passkey_registration(person_id, username, username, Some(exclude))
        .map_err(|_| IdentityError::Crypto("WebAuthn registration start"))?;
    let challenge_id = store_challenge(uow, now, purpose, binding, Some(to_json(&state)?)).await?;
    Ok(Started {
        challenge_id,
        options: to_value(&options)?,
    })
}

/// Verifies a registration against `state` and stores the passkey; `Err` is the
/// audit's reason.
async fn finish_registration(
    uow: &mut UnitOfWork,
    config: &Config,
    now: UnixMillis,
    person_id: Uuid,
    state: Option<&str>,
    credential: &Value,
) -> Result<Result<Uuid, AuthFailure>, IdentityError> {
    let Some(state) = from_state::<PasskeyRegistration>(state) else {
        return Ok(Err(AuthFailure::ChallengeInvalid));
    };
    let Ok(credential) = serde_json::from_value::<RegisterPublicKeyCredential>(credential.clone())
    else {
        return Ok(Err(AuthFailure::PasskeyInvalid));
    };
    let rp = relying_party(config)?;
    let Ok(passkey) = rp.finish_passkey_registration(&credential, &state) else {
        return Ok(Err(AuthFailure::PasskeyInvalid));
    };
    let credential_id = bothy_proto::b64::encode(passkey.cred_id().as_ref());
    let taken: Option<String> =
        sqlx::query_scalar("SELECT id FROM passkeys WHERE credential_id = $1")
            .bind(&credential_id)
            .fetch_optional(uow.conn())
            .await
            .map_err(DbError::from)?;
    if taken.is_some() {
        return Ok(Err(AuthFailure::PasskeyInvalid));
    }
    let id = db::new_id(now)?;
    sqlx::query(
        "INSERT INTO passkeys (id, person_id, credential_id, passkey, created_at, last_used_at) \
         VALUES ($1, $2, $3, $4, $5, NULL)",
    )
    .bind(db::id_text(&id))
    .bind(db::id_text(&person_id))
    .bind(credential_id)
    .bind(to_json(&passkey)?)
    .bind(now)
    .execute(uow.conn())
    .await
    .map_err(DbError::from)?;
    Ok(Ok(id))
}

/// Verifies an assertion against `state` and `person_id`'s passkeys, requires
/// user verification, and writes the counter and backup flags back; `Err` is
/// the audit's reason.
pub(crate) async fn verify_assertion(
    uow: &mut UnitOfWork,
    config: &Config,
    now: UnixMillis,
    person_id: Uuid,
    state: Option<&str>,
    credential: &Value,
) -> Result<Result<Uuid, AuthFailure>, IdentityError> {
    let Some(state) = from_state::<PasskeyAuthentication>(state) else {
        return Ok(Err(AuthFailure::PasskeyInvalid));
    };
    let Ok(credential) = serde_json::from_value::<PublicKeyCredential>(credential.clone()) else {
        return Ok(Err(AuthFailure::PasskeyInvalid));
    };
    let rp = relying_party(config)?;
    let Ok(result) = rp.finish_passkey_authentication(&credential, &state) else {
        return Ok(Err(AuthFailure::PasskeyInvalid));
    };
    if !result.user_verified() {
        return Ok(Err(AuthFailure::PasskeyInvalid));
    }
    let mut passkeys = person_passkeys(uow, person_id).await?;
    let Some((id, passkey)) = passkeys
        .iter_mut()
        .find(|(_, passkey)| passkey.cred_id() == result.cred_id())
    else {
        return Ok(Err(AuthFailure::PasskeyInvalid));
    };
    passkey.update_credential(&result);
    sqlx::query("UPDATE passkeys SET passkey = $1, last_used_at = $2 WHERE id = $3")
        .bind(to_json(&*passkey)?)
        .bind(now)
        .bind(db::id_text(id))
        .execute(uow.conn())
        .await
        .map_err(DbError::from)?;
    Ok(Ok(*id))
}

/// Starts an assertion with `person_id`'s passkeys; `None` when they have none.
pub(crate) async fn start_assertion(
    uow: &mut UnitOfWork,
    config: &Config,
    person_id: Uuid,
) -> Result<Option<(Value, String)>, IdentityError> {
    let passkeys: Vec<Passkey> = person_passkeys(uow, person_id)
        .await?
        .into_iter()
        .map(|(_, passkey)| passkey)
        .collect();
    if passkeys.is_empty() {
        return Ok(None);
    }
    let rp = relying_party(config)?;
    let (options, state) = rp
        .start_passkey_authentication(&passkeys)
        .map_err(|_| IdentityError::Crypto("WebAuthn authentication start"))?;
    Ok(Some((to_value(&options)?, to_json(&state)?)))
}

/// Request options that look like those of a real account (same members, a
/// random challenge, one credential ID derived from the pepper and `username`,
/// stable across calls) for a username without passkeys: no enumeration.
pub(crate) fn decoy_options(
    config: &Config,
    pepper: &Pepper,
    username: &str,
) -> Result<Value, IdentityError> {
    let origin = Url::parse(config.server.public_url.as_str())
        .map_err(|_| IdentityError::Crypto("the WebAuthn relying party"))?;
    let rp_id = origin
        .host_str()
        .ok_or(IdentityError::Crypto("the WebAuthn relying party"))?;
    let mut challenge = [0u8; 32];
    getrandom::fill(&mut challenge).map_err(|_| IdentityError::Crypto("the random source"))?;
    let credential_id = pepper.mac(PepperPurpose::PasskeyDecoy, username.as_bytes());
    Ok(serde_json::json!({
        "publicKey": {
            "challenge": bothy_proto::b64::encode(&challenge),
            "timeout": CHALLENGE_TTL_MS,
            "rpId": rp_id,
            "allowCredentials": [{
                "type": "public-key",
                "id": bothy_proto::b64::encode(&credential_id[..16]),
            }],
            "userVerification": "required",
        }
    }))
}

fn enroll_denied(person: Option<Uuid>, failure: AuthFailure) -> AuditEntry {
    let entry = AuditEntry::deny(
        AuditAction::AuthEnroll,
        person.map_or(Actor::System, Actor::Person),
    )
    .details(
        AuditDetails::new()
            .code("operation", PasskeyOperation::EnrollPasskey)
            .code("reason_code", failure),
    );
    match person {
        Some(id) => entry.target(TargetKind::Person, id),
        None => entry,
    }
}

/// `POST /api/v1/auth/enroll/passkey/start {code}`: a registration for the
/// person of a live enrollment code.
pub async fn enroll_start(
    db: &Db,
    pepper: &Pepper,
    config: &Config,
    now: UnixMillis,
    code: &str,
) -> Result<Started, IdentityError> {
    let mut uow = db.begin(now).await?;
    let valid = match OpaqueSecret::parse(SecretKind::EnrollmentCode, code) {
        Some(code) => enrollment::valid_code(uow.conn(), pepper, &code, now).await?,
        None => None,
    };
    let Some(valid) = valid else {
        let failure = AuthFailure::CodeInvalid;
        return Err(deny(
            uow,
            enroll_denied(None, failure),
            IdentityError::Unauthenticated(failure),
        )
        .await);
    };
    let binding = Binding {
        person_id: Some(valid.person_id),
        enrollment_code_id: Some(valid.id),
        login_session_id: None,
    };
    let started = start_registration(
        &mut uow,
        config,
        now,
        valid.person_id,
        valid.username.as_str(),
        ChallengePurpose::Enroll,
        binding,
    )
    .await?;
    uow.commit().await?;
    Ok(started)
}

/// `POST /api/v1/auth/enroll/passkey/finish {code, challenge_id, credential}`.
pub async fn enroll_finish(
    db: &Db,
    pepper: &Pepper,
    config: &Config,
    now: UnixMillis,
    code: &str,
    challenge_id: Uuid,
    credential: &Value,
) -> Result<Uuid, IdentityError> {
    let mut uow = db.begin(now).await?;
    let valid = match OpaqueSecret::parse(SecretKind::EnrollmentCode, code) {
        Some(code) => enrollment::valid_code(uow.conn(), pepper, &code, now).await?,
        None => None,
    };
    let taken = take_challenge(&mut uow, challenge_id, ChallengePurpose::Enroll, now).await?;
    let Some(valid) = valid else {
        let failure = AuthFailure::CodeInvalid;
        return Err(deny(
            uow,
            enroll_denied(None, failure),
            IdentityError::Unauthenticated(failure),
        )
        .await);
    };
    let person = Some(valid.person_id);
    let bound = taken.as_ref().is_some_and(|taken| {
        taken.enrollment_code_id == Some(valid.id) && taken.person_id == person
    });
    if !bound {
        let failure = AuthFailure::ChallengeInvalid;
        return Err(deny(
            uow,
            enroll_denied(person, failure),
            IdentityError::Unauthenticated(failure),
        )
        .await);
    }
    let state = taken.and_then(|taken| taken.state);
    match finish_registration(
        &mut uow,
        config,
        now,
        valid.person_id,
        state.as_deref(),
        credential,
    )
    .await?
    {
        Ok(passkey_id) => {
            uow.audit(
                AuditEntry::allow(AuditAction::AuthEnroll, Actor::Person(valid.person_id))
                    .target(TargetKind::Person, valid.person_id)
                    .details(
                        AuditDetails::new()
                            .code("operation", PasskeyOperation::EnrollPasskey)
                            .id("passkey_id", passkey_id),
                    ),
            );
            uow.commit().await?;
            Ok(passkey_id)
        }
        Err(failure) => Err(deny(
            uow,
            enroll_denied(person, failure),
            IdentityError::Unauthenticated(failure),
        )
        .await),
    }
}

fn step_up_denied(person: &PersonPrincipal, refusal: AuthFailure) -> AuditEntry {
    AuditEntry::deny(AuditAction::AuthStepUp, person.actor())
        .target(TargetKind::LoginSession, person.login_session_id)
        .details(
            AuditDetails::new()
                .code("method", StepUpMethod::Webauthn)
                .code("reason_code", refusal),
        )
}

/// `POST /api/v1/auth/step-up/passkey/start`: an assertion challenge for the
/// caller's login session.
pub async fn step_up_start(
    db: &Db,
    config: &Config,
    now: UnixMillis,
    person: &PersonPrincipal,
) -> Result<Started, IdentityError> {
    let mut uow = db.begin(now).await?;
    let Some((options, state)) = start_assertion(&mut uow, config, person.person_id).await? else {
        let entry = step_up_denied(person, AuthFailure::PasskeyInvalid);
        return Err(deny(
            uow,
            entry,
            IdentityError::StepUpRequired(StepUpRefusal::PasskeyInvalid),
        )
        .await);
    };
    let binding = Binding {
        person_id: Some(person.person_id),
        enrollment_code_id: None,
        login_session_id: Some(person.login_session_id),
    };
    let challenge_id = store_challenge(
        &mut uow,
        now,
        ChallengePurpose::StepUp,
        binding,
        Some(state),
    )
    .await?;
    uow.commit().await?;
    Ok(Started {
        challenge_id,
        options,
    })
}

/// `POST /api/v1/auth/step-up {method: "webauthn", challenge_id, credential}`.
pub async fn step_up_finish(
    db: &Db,
    config: &Config,
    now: UnixMillis,
    person: &PersonPrincipal,
    challenge_id: Uuid,
    credential: &Value,
) -> Result<CreatedStepUp, IdentityError> {
    let mut uow = db.begin(now).await?;
    let taken = take_challenge(&mut uow, challenge_id, ChallengePurpose::StepUp, now).await?;
    let refused = IdentityError::StepUpRequired(StepUpRefusal::PasskeyInvalid);
    let Some(taken) = taken.filter(|taken| {
        taken.login_session_id == Some(person.login_session_id)
            && taken.person_id == Some(person.person_id)
    }) else {
        let entry = step_up_denied(person, AuthFailure::ChallengeInvalid);
        return Err(deny(uow, entry, refused).await);
    };
    if let Err(failure) = verify_assertion(
        &mut uow,
        config,
        now,
        person.person_id,
        taken.state.as_deref(),
        credential,
    )
    .await?
    {
        return Err(deny(uow, step_up_denied(person, failure), refused).await);
    }
    let created = step_up::insert(&mut uow, config, now, person, StepUpMethod::Webauthn).await?;
    uow.commit().await?;
    Ok(created)
}

fn register_denied(person: &PersonPrincipal, failure: AuthFailure) -> AuditEntry {
    AuditEntry::deny(AuditAction::AuthEnroll, person.actor())
        .target(TargetKind::Person, person.person_id)
        .details(
            AuditDetails::new()
                .code("operation", PasskeyOperation::AddPasskey)
                .code("reason_code", failure),
        )
}

/// `POST /api/v1/auth/passkeys/start {step_up_id}`: a logged-in person adds a
/// passkey; consumes a fresh step-up of their login session.
pub async fn register_start(
    db: &Db,
    config: &Config,
    now: UnixMillis,
    person: &PersonPrincipal,
    step_up_id: Uuid,
) -> Result<Started, IdentityError> {
    let mut uow = db.begin(now).await?;
    if let Err(error) = step_up::consume(&mut uow, person.login_session_id, step_up_id, now).await {
        let IdentityError::StepUpRequired(refusal) = &error else {
            return Err(error);
        };
        let entry = AuditEntry::deny(AuditAction::AuthEnroll, person.actor())
            .target(TargetKind::Person, person.person_id)
            .details(
                AuditDetails::new()
                    .code("operation", PasskeyOperation::AddPasskey)
                    .code("reason_code", *refusal),
            );
        return Err(deny(uow, entry, error).await);
    }
    let binding = Binding {
        person_id: Some(person.person_id),
        enrollment_code_id: None,
        login_session_id: Some(person.login_session_id),
    };
    let started = start_registration(
        &mut uow,
        config,
        now,
        person.person_id,
        person.username.as_str(),
        ChallengePurpose::Register,
        binding,
    )
    .await?;
    uow.commit().await?;
    Ok(started)
}

/// `POST /api/v1/auth/passkeys/finish {challenge_id, credential}`.
pub async fn register_finish(
    db: &Db,
    config: &Config,
    now: UnixMillis,
    person: &PersonPrincipal,
    challenge_id: Uuid,
    credential: &Value,
) -> Result<Uuid, IdentityError> {
    let mut uow = db.begin(now).await?;
    let taken = take_challenge(&mut uow, challenge_id, ChallengePurpose::Register, now).await?;
    let Some(taken) = taken.filter(|taken| {
        taken.login_session_id == Some(person.login_session_id)
            && taken.person_id == Some(person.person_id)
    }) else {
        let failure = AuthFailure::ChallengeInvalid;
        return Err(deny(
            uow,
            register_denied(person, failure),
            IdentityError::Unauthenticated(failure),
        )
        .await);
    };
    match finish_registration(
        &mut uow,
        config,
        now,
        person.person_id,
        taken.state.as_deref(),
        credential,
    )
    .await?
    {
        Ok(passkey_id) => {
            uow.audit(
                AuditEntry::allow(AuditAction::AuthEnroll, person.actor())
                    .target(TargetKind::Person, person.person_id)
                    .details(
                        AuditDetails::new()
                            .code("operation", PasskeyOperation::AddPasskey)
                            .id("passkey_id", passkey_id),
                    ),
            );
            uow.commit().await?;
            Ok(passkey_id)
        }
        Err(failure) => Err(deny(
            uow,
            register_denied(person, failure),
            IdentityError::Unauthenticated(failure),
        )
        .await),
    }
}

fn first_denied(target: Option<Uuid>, reason: impl AuditCode) -> AuditEntry {
    // Not authenticated yet: the actor is unknown (system), the target the
    // account tried, if it exists; no username, no password, no code.
    let entry = AuditEntry::deny(AuditAction::AuthEnroll, Actor::System).details(
        AuditDetails::new()
            .code("operation", PasskeyOperation::FirstPasskey)
            .code("reason_code", reason),
    );
    match target {
        Some(person) => entry.target(TargetKind::Person, person),
        None => entry,
    }
}

/// The first factor of [`first_start`] and [`first_finish`]: the active,
/// enrolled person of `username` whose password this is, or the audit's reason.
async fn first_person(
    db: &Db,
    username: &str,
    password: Option<&Password>,
) -> Result<(Option<Uuid>, Result<super::persons::Person, AuthFailure>), IdentityError> {
    let (person, password_ok) = login_sessions::check_password(db, username, password).await?;
    let target = person.as_ref().map(|person| person.id);
    let checked = match person {
        None => Err(AuthFailure::UnknownUsername),
        Some(person) if person.status != PersonStatus::Active => Err(AuthFailure::PersonInactive),
        Some(person) if !person.enrolled => Err(AuthFailure::NotEnrolled),
        Some(_) if !password_ok => Err(AuthFailure::WrongPassword),
        Some(person) => Ok(person),
    };
    Ok((target, checked))
}

/// `POST /api/v1/auth/passkeys/first/start {username, password, totp}`: a
/// person enrolled without a passkey (the CLI's enrollment) authorizes the
/// registration of their first passkey with password and TOTP (D-408). This
/// opens no login session; the TOTP code's time step is used up. A person who
/// has a passkey already is refused (`409 conflict`, `passkey_exists`).
pub async fn first_start(
    db: &Db,
    pepper: &Pepper,
    config: &Config,
    now: UnixMillis,
    username: &str,
    password: Option<&Password>,
    code: Option<&TotpCode>,
) -> Result<Started, IdentityError> {
    let (target, checked) = first_person(db, username, password).await?;
    let mut uow = db.begin(now).await?;
    let person = match checked {
        Ok(person) => person,
        Err(failure) => {
            let error = IdentityError::Unauthenticated(failure);
            return Err(deny(uow, first_denied(target, failure), error).await);
        }
    };
    if let Err(failure) =
        totp::verify_person_code(&mut uow, pepper, &config.auth, person.id, code).await?
    {
        let error = IdentityError::Unauthenticated(failure);
        return Err(deny(uow, first_denied(target, failure), error).await);
    }
    if !person_passkeys(&mut uow, person.id).await?.is_empty() {
        let reason = ConflictReason::PasskeyExists;
        let error = IdentityError::Conflict(reason);
        return Err(deny(uow, first_denied(target, reason), error).await);
    }
    let binding = Binding {
        person_id: Some(person.id),
        enrollment_code_id: None,
        login_session_id: None,
    };
    let started = start_registration(
        &mut uow,
        config,
        now,
        person.id,
        person.username.as_str(),
        ChallengePurpose::Register,
        binding,
    )
    .await?;
    uow.commit().await?;
    Ok(started)
}

/// `POST /api/v1/auth/passkeys/first/finish {username, password, challenge_id,
/// credential}`: the password again (the challenge ID alone is no credential),
/// a challenge of [`first_start`] for this person, still no passkey, and a
/// valid attestation. Opens no login session either.
pub async fn first_finish(
    db: &Db,
    config: &Config,
    now: UnixMillis,
    username: &str,
    password: Option<&Password>,
    challenge_id: Uuid,
    credential: &Value,
) -> Result<Uuid, IdentityError> {
    let (target, checked) = first_person(db, username, password).await?;
    let mut uow = db.begin(now).await?;
    // Used up whatever comes next: a challenge is good for one try.
    let taken = take_challenge(&mut uow, challenge_id, ChallengePurpose::Register, now).await?;
    let person = match checked {
        Ok(person) => person,
        Err(failure) => {
            let error = IdentityError::Unauthenticated(failure);
            return Err(deny(uow, first_denied(target, failure), error).await);
        }
    };
    // A challenge of `first_start` is bound to the person and to no login
    // session; one of `register_start` (bound to a login session) is not one.
    let Some(taken) = taken.filter(|taken| {
        taken.person_id == Some(person.id)
            && taken.login_session_id.is_none()
            && taken.enrollment_code_id.is_none()
    }) else {
        let failure = AuthFailure::ChallengeInvalid;
        let error = IdentityError::Unauthenticated(failure);
        return Err(deny(uow, first_denied(target, failure), error).await);
    };
    if !person_passkeys(&mut uow, person.id).await?.is_empty() {
        let reason = ConflictReason::PasskeyExists;
        let error = IdentityError::Conflict(reason);
        return Err(deny(uow, first_denied(target, reason), error).await);
    }
    match finish_registration(
        &mut uow,
        config,
        now,
        person.id,
        taken.state.as_deref(),
        credential,
    )
    .await?
    {
        Ok(passkey_id) => {
            uow.audit(
                AuditEntry::allow(AuditAction::AuthEnroll, Actor::Person(person.id))
                    .target(TargetKind::Person, person.id)
                    .details(
                        AuditDetails::new()
                            .code("operation", PasskeyOperation::FirstPasskey)
                            .id("passkey_id", passkey_id),
                    ),
            );
            uow.commit().await?;
            Ok(passkey_id)
        }
        Err(failure) => {
            let error = IdentityError::Unauthenticated(failure);
            Err(deny(uow, first_denied(target, failure), error).await)
        }
    }
}

/// Stores a console-login challenge (the state is `None` for a decoy).
pub(crate) async fn store_login_challenge(
    uow: &mut UnitOfWork,
    now: UnixMillis,
    person_id: Option<Uuid>,
    state: Option<String>,
) -> Result<Uuid, IdentityError> {
    let binding = Binding {
        person_id,
        ..Binding::default()
    };
    store_challenge(uow, now, ChallengePurpose::ConsoleLogin, binding, state).await
}

/// Takes a console-login challenge: `(person_id, state)` when it is live.
pub(crate) async fn take_login_challenge(
    uow: &mut UnitOfWork,
    now: UnixMillis,
    challenge_id: Uuid,
) -> Result<Option<(Option<Uuid>, Option<String>)>, IdentityError> {
    Ok(
        take_challenge(uow, challenge_id, ChallengePurpose::ConsoleLogin, now)
            .await?
            .map(|taken| (taken.person_id, taken.state)),
    )
}
