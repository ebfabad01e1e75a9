//! Pairing (spec 3.2, 3.3; DESIGN 3.4): createHost, issueHostPairingCode
//! (re-pairing), host.pair and confirmHost with its fingerprint attempts and the
//! fallback to pairing.
//!
//! # The pairing code
//! `bothy_hpc_<random>_<checksum>` ([`PairingCode`], D-10): shown exactly once
//! (the answer of createHost or issueHostPairingCode); the row keeps only
//! base64url of HMAC-SHA-256 with the pepper over the whole string
//! ([`code_hash`], the derivation of `api_tokens.token_hash`), and
//! `pairing_expires_at = now + terminal.pairing_code_ttl` (valid while
//! `now < pairing_expires_at`). host.pair refuses every code that does not work
//! with the one `401 unauthenticated` ([`HostError::PairingCodeRefused`]): wrong
//! form or checksum (checked by [`PairRequest::decode`] before any database
//! access), unknown, used, replaced or expired. Refusals are audited in
//! aggregated form ([`RefusalAudit`], docs/decisions.md D-23).
//!
//! # States (3.1)
//! - createHost: → pairing (version 1).
//! - issueHostPairingCode: pairing → pairing replaces only the code; confirming,
//!   active, disabled → pairing also discards the three key columns
//!   (`key_fingerprint` stays), clears `disabled_reason` / `disabled_at`, ends
//!   every session (`host_rekeyed`) and, leaving active, raises the permission
//!   version; retired → `409 invalid_state_transition`.
//! - host.pair: pairing → confirming; stores the keys, `key_generation + 1`.
//! - confirmHost: confirming → active with the right prefix; after
//!   `terminal.fingerprint_max_attempts` wrong ones → pairing without keys and
//!   with a code nobody saw ("Fallback").
//!
//! # confirmHost, in this order (D-24)
//! 1. `Idempotency-Key`: a stored response of the same request is replayed
//!    before anything else (so a retry never counts again).
//! 2. The host under lock (`404`), `If-Match` when sent (`412`; optional here).
//! 3. State confirming, else `409 invalid_state_transition`.
//! 4. The prefix's form (`400 invalid_format` at `/fingerprint_prefix`; the
//!    attempt does not count).
//! 5. The step-up (`401 step_up_required`, audited; the attempt does not count).
//! 6. The constant-time comparison, before any assignment or declaration. A
//!    wrong prefix raises `fingerprint_failures` (no new version) and commits
//!    with the consumed step-up and the stored idempotent response, answering
//!    `409 fingerprint_mismatch` with `attempts_remaining`; the attempt that
//!    reaches the limit falls back to pairing.
//! 7. The declaration ([`super::llm::apply`]), the assignments
//!    ([`super::session_users::assign`]), `declared_server_host`, state active.
//!    An I6 violation rolls everything back and is audited as a host.manage deny
//!    with `invariant_violation` in a fresh unit of work.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;

use bothy_proto::codes::CloseReason;
use bothy_proto::fingerprint::{FingerprintError, KeyFingerprint, PrefixMatch, key_fingerprint};
use bothy_proto::json::Object;
use bothy_proto::jwk::{Ed25519PublicJwk, JwkError, JwkErrorKind};
use bothy_proto::pairing::PairingCode;
use bothy_proto::report::{
    self, ReportContext, ReportLimits, ReportParts, ReportedProfile, ReportedSessionUser,
};
use serde_json::Value;
use sqlx::Row;
use uuid::Uuid;

use super::llm::{self, Declaration};
use super::session_users::{self, Assignment, count, end_error, is_assignable_person};
use super::{
    Host, HostConflict, HostError, HostState, IfMatchRefusal, ManageOperation, check_transition,
    host_updated,
};
use crate::audit::{Actor, AuditAction, AuditDetails, AuditEntry, Target, TargetKind, code_enum};
use crate::clock::{UnixMillis, millis};
use crate::config::Config;
use crate::db::idempotency::{self, IdempotencyKey, StoredResponse};
use crate::db::{self, Db, DbError, Engine, UnitOfWork};
use crate::identity::principal::PersonPrincipal;
use crate::identity::{IdentityError, Invalid, step_up};
use crate::pepper::{Pepper, PepperPurpose};
use crate::permissions::i6;
use crate::revocation::{self, EndScope};
use crate::terminal::signals::{self, Signal};

code_enum! {
    /// The `result` of a confirmHost audit entry (10.1).
    pub enum ConfirmResult {
        /// The prefix matched: the host is active.
        Confirmed => "confirmed",
        /// A wrong prefix; the host stays confirming.
        FingerprintMismatch => "fingerprint_mismatch",
        /// The wrong prefix that reached `terminal.fingerprint_max_attempts`:
        /// the host fell back to pairing.
        FingerprintMaxAttempts => "fingerprint_max_attempts",
    }
}

code_enum! {
    /// The `reason_code` of a host.pair deny entry.
    pub enum PairRefusal {
        /// A code that does not work (aggregated, [`RefusalAudit`]).
        Unauthenticated => "unauthenticated",
    }
}

code_enum! {
    /// `platform` of the host.pair audit entry, when the reported platform is
    /// exactly one of these (the report's platform is a display text; 2.1).
    pub enum Platform {
        /// Linux.
        Linux => "linux",
        /// macOS.
        Macos => "macos",
        /// Windows.
        Windows => "windows",
    }
}

/// The stored form of a pairing code: base64url of the pepper's HMAC over the
/// whole string (3.2 "Code").
pub fn code_hash(pepper: &Pepper, code: &PairingCode) -> String {
    bothy_proto::b64::encode(&pepper.mac(PepperPurpose::PairingCode, code.as_str().as_bytes()))
}

/// A host with the pairing code just issued for it (shown once).
#[derive(Debug)]
pub struct WithCode {
    /// The host after the change.
    pub host: Host,
    /// The host as a reader sees it ([`session_users::host_json`]).
    pub json: Value,
    /// The code; only its HMAC is stored.
    pub pairing_code: PairingCode,
}

/// createHost as requested (the route checked the forms of name and reason).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewHost {
    /// The display name (checked by [`super::manage::check_host_name`]).
    pub name: String,
    /// The assignee, if any.
    pub assigned_user_id: Option<Uuid>,
    /// The owner's reason.
    pub reason: String,
    /// The step-up this request consumes.
    pub step_up_id: Uuid,
}

fn new_code(pepper: &Pepper) -> Result<(PairingCode, String), HostError> {
    let code =
        PairingCode::generate().map_err(|_| HostError::Crypto("the random source failed"))?;
    let hash = code_hash(pepper, &code);
    Ok((code, hash))
}

fn expires_at(config: &Config, now: UnixMillis) -> UnixMillis {
    now.saturating_add(millis(config.terminal.pairing_code_ttl))
}

async fn reload(uow: &mut UnitOfWork, host_id: Uuid) -> Result<(Host, Value), HostError> {
    let host = super::load(uow.conn(), host_id)
        .await?
        .ok_or(HostError::Stored("hosts row"))?;
    let json = session_users::host_json(uow.conn(), &host).await?;
    Ok((host, json))
}

/// createHost (`POST /api/v1/hosts`) for an owner `actor` (the route checked
/// person and role): consumes the step-up, checks the assignee (a person who is
/// not deleted, else `unknown_user` at `/assigned_user_id`), inserts the host
/// in pairing with a fresh code, raises the permission version when it has an
/// assignee, writes host.manage (operation create) and `host.updated`.
pub async fn create(
    db: &Db,
    pepper: &Pepper,
    config: &Config,
    now: UnixMillis,
    actor: &PersonPrincipal,
    new: &NewHost,
) -> Result<WithCode, HostError> {
    let host_id = db::new_id(now)?;
    let mut uow = db.begin(now).await?;
    // No host exists yet: a refused step-up is audited without a target.
    if let Err(error) =
        step_up::consume(&mut uow, actor.login_session_id, new.step_up_id, now).await
    {
        if let IdentityError::StepUpRequired(refusal) = error {
            uow.audit(
                AuditEntry::deny(AuditAction::HostManage, actor.actor()).details(
                    AuditDetails::new()
                        .code("operation", ManageOperation::Create)
                        .code("reason_code", refusal),
                ),
            );
            uow.commit().await?;
        }
        return Err(error.into());
    }
    if let Some(assignee) = new.assigned_user_id {
        if !is_assignable_person(uow.conn(), assignee).await? {
            return Err(HostError::invalid("/assigned_user_id", "unknown_user"));
        }
    }
    let (code, hash) = new_code(pepper)?;
    sqlx::query(
        "INSERT INTO hosts (id, name, state, assigned_user_id, key_generation, \
         pairing_code_hash, pairing_expires_at, fingerprint_failures, llm_credentials, version, \
         created_by, created_at, updated_at) \
         VALUES ($1, $2, 'pairing', $3, 0, $4, $5, 0, 'none', 1, $6, $7, $7)",
    )
    .bind(db::id_text(&host_id))
    .bind(new.name.as_str())
    .bind(new.assigned_user_id.map(|id| db::id_text(&id)))
    .bind(hash)
    .bind(expires_at(config, now))
    .bind(db::id_text(&actor.person_id))
    .bind(now)
    .execute(uow.conn())
    .await
    .map_err(DbError::from)?;
    if new.assigned_user_id.is_some() {
        crate::permissions::bump_version(&mut uow).await?;
    }
    host_updated(&mut uow, host_id, 1, HostState::Pairing, false);
    let mut details = AuditDetails::new()
        .id("host_id", host_id)
        .code("operation", ManageOperation::Create)
        .code("to_state", HostState::Pairing);
    if let Some(assignee) = new.assigned_user_id {
        details = details.id("to_assigned_user_id", assignee);
    }
    uow.audit(
        AuditEntry::allow(AuditAction::HostManage, actor.actor())
            .target(TargetKind::Host, host_id)
            .details(details.reason(&new.reason)),
    );
    let (host, json) = reload(&mut uow, host_id).await?;
    uow.commit().await?;
    Ok(WithCode {
        host,
        json,
        pairing_code: code,
    })
}

/// issueHostPairingCode as requested.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reissue {
    /// The host.
    pub host_id: Uuid,
    /// The owner's reason.
    pub reason: String,
    /// The step-up this request consumes.
    pub step_up_id: Uuid,
}

/// issueHostPairingCode (`POST /api/v1/hosts/{host_id}/pairing-code`, 3.3) for
/// an owner `actor`: see the module docs for what each state does. Audit
/// host.manage operation pairing_code (from_state, to_state, old_fingerprint
/// when keys were discarded, key_generation, sessions_ended, reason).
pub async fn issue_code(
    db: &Db,
    pepper: &Pepper,
    config: &Config,
    now: UnixMillis,
    actor: &PersonPrincipal,
    request: &Reissue,
) -> Result<WithCode, HostError> {
    let reason = request.reason.as_str();
    let mut uow = db.begin(now).await?;
    let host = super::load_for_update(&mut uow, request.host_id).await?;
    let mut uow = super::manage::consume_step_up(
        uow,
        actor,
        request.step_up_id,
        host.id,
        ManageOperation::PairingCode,
    )
    .await?;
    check_transition(host.state, HostState::Pairing)?;
    let (code, hash) = new_code(pepper)?;
    let discard = host.state != HostState::Pairing;
    if discard {
        sqlx::query(
            "UPDATE hosts SET state = 'pairing', noise_public_key = NULL, auth_public_jwk = NULL, \
             auth_jkt = NULL, disabled_reason = NULL, disabled_at = NULL, \
             fingerprint_failures = 0, pairing_code_hash = $1, pairing_expires_at = $2 \
             WHERE id = $3",
        )
    } else {
        sqlx::query(
            "UPDATE hosts SET pairing_code_hash = $1, pairing_expires_at = $2 WHERE id = $3",
        )
    }
    .bind(hash)
    .bind(expires_at(config, now))
    .bind(db::id_text(&host.id))
    .execute(uow.conn())
    .await
    .map_err(DbError::from)?;
    if discard {
        // Spec 9: every node closes the host's control connections (4110).
        signals::stage(&mut uow, &Signal::HostClose { host_id: host.id });
    }
    // Every session of the host runs on the keys just discarded (3.3).
    let ended = revocation::end(
        &mut uow,
        EndScope::Host(host.id),
        CloseReason::HostRekeyed,
        None,
    )
    .await
    .map_err(end_error)?;
    if host.state == HostState::Active {
        crate::permissions::bump_version(&mut uow).await?;
    }
    let version = super::bump_version(&mut uow, host.id).await?;
    host_updated(&mut uow, host.id, version, HostState::Pairing, discard);
    let mut details = AuditDetails::new()
        .id("host_id", host.id)
        .code("operation", ManageOperation::PairingCode)
        .code("from_state", host.state)
        .code("to_state", HostState::Pairing)
        .count("key_generation", host.key_generation)
        .count("sessions_ended", count(ended.len()));
    if discard {
        if let Some(old) = stored_fingerprint(&host) {
            details = details.fingerprint("old_fingerprint", &old);
        }
    }
    uow.audit(
        AuditEntry::allow(AuditAction::HostManage, actor.actor())
            .target(TargetKind::Host, host.id)
            .details(details.reason(reason)),
    );
    let (host, json) = reload(&mut uow, host.id).await?;
    uow.commit().await?;
    Ok(WithCode {
        host,
        json,
        pairing_code: code,
    })
}

/// `hosts.key_fingerprint` as a fingerprint, if one is stored (and readable).
fn stored_fingerprint(host: &Host) -> Option<KeyFingerprint> {
    host.key_fingerprint
        .as_deref()
        .and_then(KeyFingerprint::parse)
}

/// The fingerprint of the keys the host holds now (None without keys).
fn current_fingerprint(host: &Host) -> Result<Option<KeyFingerprint>, HostError> {
    let (Some(noise), Some(jwk)) = (&host.noise_public_key, &host.auth_public_jwk) else {
        return Ok(None);
    };
    let noise = bothy_proto::b64::decode_array::<32>(noise)
        .map_err(|_| HostError::Stored("hosts.noise_public_key"))?;
    let jwk = Ed25519PublicJwk::from_json(jwk.as_bytes())
        .map_err(|_| HostError::Stored("hosts.auth_public_jwk"))?;
    Ok(Some(key_fingerprint(&noise, &jwk.raw())))
}

/// The members of the host.pair body (DESIGN 3.4).
pub const PAIR_MEMBERS: &[&str] = &[
    "code",
    "noise_public_key",
    "auth_public_jwk",
    "host_version",
    "platform",
    "os_version",
    "profiles",
    "session_users",
    "require_local_confirm",
    "is_server_host",
];

/// A host.pair body that passed every check that needs no database.
#[derive(Debug, Clone)]
pub struct PairRequest {
    /// The code (form and checksum checked).
    pub code: PairingCode,
    /// The X25519 key (32 bytes, not of small order).
    pub noise_public_key: [u8; 32],
    /// The Ed25519 login key.
    pub auth_public_jwk: Ed25519PublicJwk,
    /// SemVer without `v`.
    pub host_version: String,
    /// Display text.
    pub platform: String,
    /// Display text.
    pub os_version: String,
    /// As reported, in order.
    pub profiles: Vec<ReportedProfile>,
    /// As reported, in order.
    pub session_users: Vec<ReportedSessionUser>,
    /// `host_service.require_local_confirm`.
    pub require_local_confirm: bool,
    /// HD5 or the server's own address (2.3).
    pub is_server_host: bool,
}

/// The `errors[].code` of a JWK refusal at its pointer (3.2 "Keys").
fn jwk_finding(error: &JwkError) -> Invalid {
    let code = match error.kind() {
        JwkErrorKind::UnknownMember => "unknown_member",
        JwkErrorKind::InvalidKey => "invalid_key",
        JwkErrorKind::MissingMember => "required",
        JwkErrorKind::WrongType => "wrong_type",
        JwkErrorKind::Invalid => "invalid",
    };
    Invalid::at(error.pointer().unwrap_or("/auth_public_jwk"), code)
}

impl PairRequest {
    /// Decodes and checks a host.pair body without touching the database: the
    /// exact members (`400`), then the code's form and checksum (`401
    /// unauthenticated`, the body of every code refusal), then every finding
    /// of the keys and the report at once (`400 validation_failed` with
    /// pointers into the body).
    pub fn decode(body: &Value, limits: &ReportLimits) -> Result<PairRequest, HostError> {
        let api = HostError::Json;
        let object = Object::root(body, PAIR_MEMBERS).map_err(api)?;
        let code = PairingCode::parse(object.str("code").map_err(api)?)
            .map_err(|_| HostError::PairingCodeRefused)?;

        let mut findings = Vec::new();
        let noise = object.member("noise_public_key").map_err(api)?;
        let noise_text = noise.as_str().map_err(api)?;
        let noise_public_key = match bothy_proto::x25519::decode_public_key(noise_text) {
            Ok(key) => Some(key),
            Err(_) => {
                findings.push(Invalid::at(noise.pointer(), "invalid_key"));
                None
            }
        };
        let auth_public_jwk =
            match Ed25519PublicJwk::from_member(object.member("auth_public_jwk").map_err(api)?) {
                Ok(jwk) => Some(jwk),
                Err(error) => {
                    findings.push(jwk_finding(&error));
                    None
                }
            };
        let host_version = object.str("host_version").map_err(api)?;
        if !report::is_valid_host_version(host_version) {
            findings.push(Invalid::at("/host_version", "invalid_format"));
        }
        let platform = object.str("platform").map_err(api)?;
        let os_version = object.str("os_version").map_err(api)?;
        let profiles =
            report::decode_profiles(object.member("profiles").map_err(api)?).map_err(api)?;
        let session_users =
            report::decode_session_users(object.member("session_users").map_err(api)?)
                .map_err(api)?;
        let require_local_confirm = object.bool("require_local_confirm").map_err(api)?;
        let is_server_host = object.bool("is_server_host").map_err(api)?;
        let parts = ReportParts {
            platform,
            os_version,
            profiles: &profiles,
            session_users: &session_users,
            doctor: None,
        };
        findings.extend(
            report::validate(&parts, limits, ReportContext::Pair)
                .into_iter()
                .map(|finding| Invalid::at(finding.pointer, finding.code.as_str())),
        );
        match (noise_public_key, auth_public_jwk) {
            (Some(noise_public_key), Some(auth_public_jwk)) if findings.is_empty() => {
                Ok(PairRequest {
                    code,
                    noise_public_key,
                    auth_public_jwk,
                    host_version: host_version.to_owned(),
                    platform: platform.to_owned(),
                    os_version: os_version.to_owned(),
                    profiles,
                    session_users,
                    require_local_confirm,
                    is_server_host,
                })
            }
            _ => Err(HostError::Invalid(findings)),
        }
    }
}

/// The report limits of the configuration (3.2 "Report").
pub fn report_limits(config: &Config) -> ReportLimits {
    ReportLimits {
        label_max_chars: config.terminal.report_label_max_chars,
        max_entries: config.terminal.report_max_entries,
        os_user_max_chars: config.host.os_user_max_chars,
    }
}

/// What host.pair answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paired {
    /// The host.
    pub host_id: Uuid,
    /// This server instance ([`instance_id`]).
    pub instance_id: String,
    /// The fingerprint of the keys (display form, 4.3).
    pub key_fingerprint: KeyFingerprint,
}

/// The ID of this server instance (host.pair's `instance_id`): the one row of
/// `instance`, made on the first call. `INSERT ... ON CONFLICT DO NOTHING`
/// then `SELECT`, so two first calls on any node agree on the row that won.
pub async fn instance_id(uow: &mut UnitOfWork) -> Result<String, HostError> {
    let now = uow.now_ms();
    let candidate = db::new_id(now)?;
    sqlx::query(
        "INSERT INTO instance (id, instance_id, created_at) VALUES (1, $1, $2) \
         ON CONFLICT (id) DO NOTHING",
    )
    .bind(db::id_text(&candidate))
    .bind(now)
    .execute(uow.conn())
    .await
    .map_err(DbError::from)?;
    let row = sqlx::query("SELECT instance_id FROM instance WHERE id = 1")
        .fetch_one(uow.conn())
        .await
        .map_err(DbError::from)?;
    row.try_get::<String, _>("instance_id")
        .map_err(|_| HostError::Stored("instance.instance_id"))
}

/// host.pair (`POST /api/v1/hosts/pair`, public) with a request that passed
/// [`PairRequest::decode`]. A code that does not find a host in pairing
/// within its validity is [`HostError::PairingCodeRefused`] (the caller
/// audits it through [`RefusalAudit`]). The keys of this host's last pairing
/// (its kept `key_fingerprint`) are `409 conflict host_key_reused`; a login key
/// another host holds is `409 conflict host_key_in_use` — both audited as
/// host.pair deny, and the code stays valid. On success the host is
/// confirming with the keys, `key_generation + 1`, the report as sent.
pub async fn pair(
    db: &Db,
    pepper: &Pepper,
    now: UnixMillis,
    request: &PairRequest,
) -> Result<Paired, HostError> {
    let hash = code_hash(pepper, &request.code);
    let mut uow = db.begin(now).await?;
    let lock = match uow.engine() {
        Engine::Postgres => " FOR UPDATE",
        Engine::Sqlite => "",
    };
    let row = sqlx::query(&format!(
        "SELECT {} FROM hosts WHERE pairing_code_hash = $1{lock}",
        super::COLUMNS
    ))
    .bind(&hash)
    .fetch_optional(uow.conn())
    .await
    .map_err(DbError::from)?;
    let Some(host) = row.as_ref().map(super::from_row).transpose()? else {
        return Err(HostError::PairingCodeRefused);
    };
    let valid = host.state == HostState::Pairing
        && host.pairing_expires_at.is_some_and(|expires| now < expires);
    if !valid {
        return Err(HostError::PairingCodeRefused);
    }

    let jwk = &request.auth_public_jwk;
    let fingerprint = key_fingerprint(&request.noise_public_key, &jwk.raw());
    let jkt = jwk.thumbprint();
    let conflict = if host.key_fingerprint.as_deref() == Some(fingerprint.as_str()) {
        Some(HostConflict::HostKeyReused)
    } else {
        let other: Option<String> =
            sqlx::query_scalar("SELECT id FROM hosts WHERE auth_jkt = $1 AND id <> $2")
                .bind(&jkt)
                .bind(db::id_text(&host.id))
                .fetch_optional(uow.conn())
                .await
                .map_err(DbError::from)?;
        other.map(|_| HostConflict::HostKeyInUse)
    };
    if let Some(conflict) = conflict {
        return Err(pair_conflict(uow, &host, conflict).await);
    }
    check_transition(host.state, HostState::Confirming)?;

    let generation = host.key_generation.saturating_add(1);
    let session_users = Value::Array(
        request
            .session_users
            .iter()
            .map(ReportedSessionUser::to_value)
            .collect(),
    )
    .to_string();
    let profiles = Value::Array(
        request
            .profiles
            .iter()
            .map(ReportedProfile::to_value)
            .collect(),
    )
    .to_string();
    let updated = sqlx::query(
        "UPDATE hosts SET state = 'confirming', noise_public_key = $1, auth_public_jwk = $2, \
         auth_jkt = $3, key_fingerprint = $4, key_generation = $5, pairing_code_hash = NULL, \
         pairing_expires_at = NULL, fingerprint_failures = 0, reported_session_users = $6, \
         reported_profiles = $7, reported_is_server_host = $8, \
         reported_require_local_confirm = $9, reported_host_version = $10, \
         reported_platform = $11, reported_os_version = $12 \
         WHERE id = $13",
    )
    .bind(bothy_proto::b64::encode(&request.noise_public_key))
    .bind(jwk.to_json())
    .bind(&jkt)
    .bind(fingerprint.as_str())
    .bind(generation)
    .bind(session_users)
    .bind(profiles)
    .bind(request.is_server_host)
    .bind(request.require_local_confirm)
    .bind(request.host_version.as_str())
    .bind(request.platform.as_str())
    .bind(request.os_version.as_str())
    .bind(db::id_text(&host.id))
    .execute(uow.conn())
    .await
    .map_err(DbError::from);
    match updated {
        Ok(_) => {}
        // The unique index on auth_jkt: another host paired with this key
        // between our check and our write.
        Err(DbError::Conflict(_)) => {
            drop(uow);
            let uow = db.begin(now).await?;
            return Err(pair_conflict(uow, &host, HostConflict::HostKeyInUse).await);
        }
        Err(other) => return Err(other.into()),
    }
    let version = super::bump_version(&mut uow, host.id).await?;
    host_updated(&mut uow, host.id, version, HostState::Confirming, true);
    let mut details = AuditDetails::new()
        .id("host_id", host.id)
        .fingerprint("fingerprint", &fingerprint)
        .count("key_generation", generation);
    if let Some(old) = stored_fingerprint(&host) {
        details = details.fingerprint("old_fingerprint", &old);
    }
    if let Some(platform) = Platform::parse(&request.platform) {
        details = details.code("platform", platform);
    }
    uow.audit(
        AuditEntry::allow(AuditAction::HostPair, Actor::Host(host.id))
            .target(TargetKind::Host, host.id)
            .details(details),
    );
    let instance_id = instance_id(&mut uow).await?;
    uow.commit().await?;
    Ok(Paired {
        host_id: host.id,
        instance_id,
        key_fingerprint: fingerprint,
    })
}

/// Commits a host.pair deny for a key conflict in `uow` (which changed
/// nothing) and returns the `409`.
async fn pair_conflict(mut uow: UnitOfWork, host: &Host, conflict: HostConflict) -> HostError {
    uow.audit(
        AuditEntry::deny(AuditAction::HostPair, Actor::Host(host.id))
            .target(TargetKind::Host, host.id)
            .details(
                AuditDetails::new()
                    .id("host_id", host.id)
                    .code("reason_code", conflict),
            ),
    );
    match uow.commit().await {
        Ok(_) => HostError::Conflict(conflict),
        Err(error) => HostError::Db(error),
    }
}

/// The aggregation window of host.pair refusals.
pub const REFUSAL_WINDOW_MS: i64 = 60_000;

/// Most client addresses [`RefusalAudit`] tracks; beyond that, new addresses
/// share one overflow entry.
pub const REFUSAL_MAX_ADDRESSES: usize = 4096;

#[derive(Debug, Clone, Copy)]
struct Window {
    /// When the last entry for this address was written.
    written_at: UnixMillis,
    /// Refusals since then, not yet in an entry.
    pending: i64,
}

/// The aggregation of host.pair code refusals in the audit (3.2 "Code",
/// docs/decisions.md D-23), in memory per process: per client address at most
/// one deny entry (`reason_code = unauthenticated`, actor system) per
/// [`REFUSAL_WINDOW_MS`]. The first refusal after a quiet window writes an
/// entry at once; later ones in the window are counted and go into the next
/// entry of that address, whose `count` is the number of refusals since the
/// previous entry, itself included. At most [`REFUSAL_MAX_ADDRESSES`]
/// addresses are tracked: idle ones are dropped first, then new addresses
/// share one overflow entry.
#[derive(Debug, Default)]
pub struct RefusalAudit {
    windows: Mutex<HashMap<Option<IpAddr>, Window>>,
}

impl RefusalAudit {
    /// An empty aggregation.
    pub fn new() -> RefusalAudit {
        RefusalAudit::default()
    }

    /// Counts one refusal from `client` at `now`; the count of the entry to
    /// write now, if one is due.
    pub fn record(&self, client: IpAddr, now: UnixMillis) -> Option<i64> {
        // A poisoned lock only means another request panicked mid-update; the
        // counters are still usable.
        let mut windows = self
            .windows
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut key = Some(client);
        if !windows.contains_key(&key) && windows.len() >= REFUSAL_MAX_ADDRESSES {
            windows.retain(|_, w| w.pending > 0 || now - w.written_at < REFUSAL_WINDOW_MS);
            if windows.len() >= REFUSAL_MAX_ADDRESSES {
                key = None;
            }
        }
        match windows.get_mut(&key) {
            Some(window) if now - window.written_at < REFUSAL_WINDOW_MS => {
                window.pending = window.pending.saturating_add(1);
                None
            }
            Some(window) => {
                let count = window.pending.saturating_add(1);
                *window = Window {
                    written_at: now,
                    pending: 0,
                };
                Some(count)
            }
            None => {
                windows.insert(
                    key,
                    Window {
                        written_at: now,
                        pending: 0,
                    },
                );
                Some(1)
            }
        }
    }

    /// Counts a refusal and writes its entry when one is due (in its own
    /// unit of work: the refused request changed nothing).
    pub async fn refused(&self, db: &Db, client: IpAddr, now: UnixMillis) -> Result<(), DbError> {
        let Some(count) = self.record(client, now) else {
            return Ok(());
        };
        let mut uow = db.begin(now).await?;
        uow.audit(
            AuditEntry::deny(AuditAction::HostPair, Actor::System).details(
                AuditDetails::new()
                    .code("reason_code", PairRefusal::Unauthenticated)
                    .count("count", count),
            ),
        );
        uow.commit().await.map(|_| ())
    }
}

/// confirmHost as requested (the route checked the forms).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Confirmation {
    /// The host.
    pub host_id: Uuid,
    /// What the owner typed.
    pub fingerprint_prefix: String,
    /// The LLM login (7.2).
    pub declaration: Declaration,
    /// The owner's answer to the server-host question.
    pub declared_server_host: bool,
    /// Persons and their session users.
    pub assignments: Vec<Assignment>,
    /// The owner's reason.
    pub reason: String,
    /// The step-up this request consumes.
    pub step_up_id: Uuid,
}

/// An `Idempotency-Key` with what identifies its request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Idempotent {
    /// The key.
    pub key: IdempotencyKey,
    /// The route (`/api/v1/hosts/{id}/confirm`).
    pub route: String,
    /// [`idempotency::request_hash`] of method, route and body.
    pub request_hash: String,
}

/// The `If-Match` check of a request that sent one: the host's version in,
/// a refusal out.
pub type IfMatch<'a> = dyn Fn(i64) -> Result<(), IfMatchRefusal> + Send + Sync + 'a;

/// What confirmHost answers, as its stored response renders it.
#[derive(Debug)]
pub enum ConfirmAnswer<'a> {
    /// The host is active: its reader JSON.
    Confirmed(&'a Value),
    /// A refusal that is committed (a wrong prefix counts an attempt).
    Refused(HostError),
}

/// How an answer of confirmHost reads as a stored response (its status code
/// and body), so a retry with the same idempotency key replays it exactly;
/// the caller's transport knows the form.
pub type RenderAnswer<'a> = dyn Fn(ConfirmAnswer<'_>) -> StoredResponse + Send + Sync + 'a;

/// What confirmHost takes from the request besides its body: the version it
/// was built on, and its idempotency key with the form of a stored refusal.
#[derive(Clone, Copy, Default)]
pub struct ConfirmOnce<'a> {
    /// The `If-Match` check, when the request sent one.
    pub if_match: Option<&'a IfMatch<'a>>,
    /// The idempotency key, when the request sent one.
    pub idempotent: Option<&'a Idempotent>,
    /// The stored form of an answer (given with `idempotent`).
    pub render: Option<&'a RenderAnswer<'a>>,
}

impl std::fmt::Debug for ConfirmOnce<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfirmOnce")
            .field("if_match", &self.if_match.is_some())
            .field("idempotent", &self.idempotent)
            .finish()
    }
}

/// What confirmHost did.
#[derive(Debug)]
pub enum Confirmed {
    /// The host is active: the host and its reader JSON.
    Active(Box<Host>, Value),
    /// A retry with an `Idempotency-Key`: the stored response, as it was.
    Replayed(StoredResponse),
}

async fn store_response(
    uow: &mut UnitOfWork,
    actor: &PersonPrincipal,
    idempotent: Option<&Idempotent>,
    render: Option<&RenderAnswer<'_>>,
    answer: ConfirmAnswer<'_>,
) -> Result<(), HostError> {
    if let (Some(idempotent), Some(render)) = (idempotent, render) {
        let response = render(answer);
        idempotency::store(
            uow,
            actor.person_id,
            &idempotent.key,
            &idempotent.route,
            &idempotent.request_hash,
            &response,
        )
        .await?;
    }
    Ok(())
}

fn confirm_details(host: &Host, fingerprint: &KeyFingerprint) -> AuditDetails {
    AuditDetails::new()
        .id("host_id", host.id)
        .code("operation", ManageOperation::Confirm)
        .fingerprint("fingerprint", fingerprint)
        .count("key_generation", host.key_generation)
}

/// confirmHost (`POST /api/v1/hosts/{host_id}/confirm`) for an owner `actor`,
/// in the order of the module docs. `if_match` checks the version when the
/// request sent `If-Match`. A wrong prefix is committed and answered with
/// `Err(HostError::FingerprintMismatch)`.
pub async fn confirm(
    db: &Db,
    pepper: &Pepper,
    config: &Config,
    now: UnixMillis,
    actor: &PersonPrincipal,
    request: &Confirmation,
    once: ConfirmOnce<'_>,
) -> Result<Confirmed, HostError> {
    let ConfirmOnce {
        if_match,
        idempotent,
        render,
    } = once;
    let mut uow = db.begin(now).await?;
    if let Some(idempotent) = idempotent {
        let stored = idempotency::lookup(
            &mut uow,
            actor.person_id,
            &idempotent.key,
            &idempotent.route,
            &idempotent.request_hash,
        )
        .await?;
        if let Some(stored) = stored {
            return Ok(Confirmed::Replayed(stored));
        }
    }
    let host = super::load_for_update(&mut uow, request.host_id).await?;
    if let Some(if_match) = if_match {
        if_match(host.version)?;
    }
    if host.state != HostState::Confirming {
        return Err(HostError::InvalidStateTransition);
    }
    let fingerprint = current_fingerprint(&host)?.ok_or(HostError::Stored("hosts keys"))?;
    let matched = match fingerprint.check_prefix(
        &request.fingerprint_prefix,
        config.terminal.fingerprint_confirm_chars,
    ) {
        Ok(matched) => matched,
        Err(FingerprintError::InvalidFormat) => {
            return Err(HostError::invalid("/fingerprint_prefix", "invalid_format"));
        }
        Err(FingerprintError::ConfirmCharsOutOfRange) => {
            return Err(HostError::Stored("terminal.fingerprint_confirm_chars"));
        }
    };
    let mut uow = super::manage::consume_step_up(
        uow,
        actor,
        request.step_up_id,
        host.id,
        ManageOperation::Confirm,
    )
    .await?;
    if matched == PrefixMatch::Mismatch {
        let attempts_remaining = mismatch(
            &mut uow,
            pepper,
            config,
            actor,
            &host,
            &fingerprint,
            request,
        )
        .await?;
        let refusal = ConfirmAnswer::Refused(HostError::FingerprintMismatch { attempts_remaining });
        store_response(&mut uow, actor, idempotent, render, refusal).await?;
        uow.commit().await?;
        return Err(HostError::FingerprintMismatch { attempts_remaining });
    }

    // The prefix matched: only now the declaration and the assignments (3.2).
    let applied = async {
        llm::apply(&mut uow, &host, request.declaration, "").await?;
        session_users::assign(
            &mut uow,
            &host,
            actor.person_id,
            &request.assignments,
            "/session_users",
            &request.reason,
        )
        .await
    }
    .await;
    let details = declaration_details(confirm_details(&host, &fingerprint), request);
    if let Err(error) = applied {
        return Err(match error {
            HostError::I6Violation => {
                drop(uow);
                i6::audit_violation(
                    db,
                    now,
                    AuditAction::HostManage,
                    actor.actor(),
                    Some(Target {
                        kind: TargetKind::Host,
                        id: host.id,
                    }),
                    details.reason(&request.reason),
                )
                .await
            }
            other => other,
        });
    }
    check_transition(host.state, HostState::Active)?;
    sqlx::query(
        "UPDATE hosts SET state = 'active', declared_server_host = $1, fingerprint_failures = 0 \
         WHERE id = $2",
    )
    .bind(request.declared_server_host)
    .bind(db::id_text(&host.id))
    .execute(uow.conn())
    .await
    .map_err(DbError::from)?;
    crate::permissions::bump_version(&mut uow).await?;
    let version = super::bump_version(&mut uow, host.id).await?;
    host_updated(&mut uow, host.id, version, HostState::Active, false);
    uow.audit(
        AuditEntry::allow(AuditAction::HostManage, actor.actor())
            .target(TargetKind::Host, host.id)
            .details(
                details
                    .code("result", ConfirmResult::Confirmed)
                    .code("from_state", HostState::Confirming)
                    .code("to_state", HostState::Active)
                    .reason(&request.reason),
            ),
    );
    let (host, json) = reload(&mut uow, host.id).await?;
    store_response(
        &mut uow,
        actor,
        idempotent,
        render,
        ConfirmAnswer::Confirmed(&json),
    )
    .await?;
    uow.commit().await?;
    Ok(Confirmed::Active(Box::new(host), json))
}

/// `llm_credentials`, `credential_holder_id` (with personal) and
/// `declared_server_host` as the request asked for them.
fn declaration_details(details: AuditDetails, request: &Confirmation) -> AuditDetails {
    let details = details
        .code("llm_credentials", request.declaration.llm_credentials)
        .flag("declared_server_host", request.declared_server_host);
    match request.declaration.credential_holder_id {
        Some(holder) => details.id("credential_holder_id", holder),
        None => details,
    }
}

/// A wrong prefix (3.2 "Failed attempts", "Fallback"): counts it and, at the
/// limit, falls back to pairing. Returns `attempts_remaining`.
async fn mismatch(
    uow: &mut UnitOfWork,
    pepper: &Pepper,
    config: &Config,
    actor: &PersonPrincipal,
    host: &Host,
    fingerprint: &KeyFingerprint,
    request: &Confirmation,
) -> Result<u32, HostError> {
    let max = i64::from(config.terminal.fingerprint_max_attempts);
    let failures = host.fingerprint_failures.saturating_add(1);
    let (result, remaining) = if failures >= max {
        // The fallback: keys gone (key_fingerprint stays), a code nobody sees
        // that expired at once, a new version, key_changed.
        let (_code, hash) = new_code(pepper)?;
        check_transition(host.state, HostState::Pairing)?;
        sqlx::query(
            "UPDATE hosts SET state = 'pairing', noise_public_key = NULL, auth_public_jwk = NULL, \
             auth_jkt = NULL, pairing_code_hash = $1, pairing_expires_at = $2, \
             fingerprint_failures = 0 WHERE id = $3",
        )
        .bind(hash)
        .bind(uow.now_ms())
        .bind(db::id_text(&host.id))
        .execute(uow.conn())
        .await
        .map_err(DbError::from)?;
        // Spec 9: every node closes the host's control connections (4110).
        signals::stage(uow, &Signal::HostClose { host_id: host.id });
        let version = super::bump_version(uow, host.id).await?;
        host_updated(uow, host.id, version, HostState::Pairing, true);
        (ConfirmResult::FingerprintMaxAttempts, 0)
    } else {
        // Not part of Host: no new version, the same If-Match stays valid.
        sqlx::query("UPDATE hosts SET fingerprint_failures = $1 WHERE id = $2")
            .bind(failures)
            .bind(db::id_text(&host.id))
            .execute(uow.conn())
            .await
            .map_err(DbError::from)?;
        (
            ConfirmResult::FingerprintMismatch,
            u32::try_from(max - failures).unwrap_or(0),
        )
    };
    let mut details = confirm_details(host, fingerprint)
        .code("result", result)
        .count("attempts_remaining", i64::from(remaining));
    if result == ConfirmResult::FingerprintMaxAttempts {
        details = details
            .code("from_state", HostState::Confirming)
            .code("to_state", HostState::Pairing);
    }
    uow.audit(
        AuditEntry::deny(AuditAction::HostManage, actor.actor())
            .target(TargetKind::Host, host.id)
            .details(details.reason(&request.reason)),
    );
    Ok(remaining)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn address(n: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, n])
    }

    #[test]
    fn refusals_write_at_most_one_entry_per_address_and_window() {
        let audit = RefusalAudit::new();
        let t = 1_000_000;
        assert_eq!(audit.record(address(1), t), Some(1));
        assert_eq!(audit.record(address(1), t + 1), None);
        assert_eq!(audit.record(address(1), t + REFUSAL_WINDOW_MS - 1), None);
        // Another address has its own window.
        assert_eq!(audit.record(address(2), t + 5), Some(1));
        // The next entry carries the two counted in the window and itself.
        assert_eq!(audit.record(address(1), t + REFUSAL_WINDOW_MS), Some(3));
        assert_eq!(audit.record(address(1), t + REFUSAL_WINDOW_MS + 1), None);
        // A quiet address writes its first refusal at once.
        assert_eq!(
            audit.record(address(2), t + 10 * REFUSAL_WINDOW_MS),
            Some(1)
        );
    }

    #[test]
    fn many_addresses_share_an_overflow_entry() {
        let audit = RefusalAudit::new();
        let t = 5_000_000;
        for i in 0..REFUSAL_MAX_ADDRESSES {
            let ip = IpAddr::from(u32::try_from(i).unwrap().to_be_bytes());
            assert_eq!(audit.record(ip, t), Some(1));
        }
        let late = IpAddr::from([192, 168, 1, 1]);
        assert_eq!(audit.record(late, t), Some(1));
        assert_eq!(audit.record(IpAddr::from([192, 168, 1, 2]), t), None);
        // After the window the idle addresses are dropped for new ones.
        assert_eq!(audit.record(late, t + REFUSAL_WINDOW_MS), Some(1));
        assert!(audit.windows.lock().unwrap().len() <= REFUSAL_MAX_ADDRESSES);
    }

    #[test]
    fn platform_codes() {
        assert_eq!(Platform::parse("linux"), Some(Platform::Linux));
        assert_eq!(Platform::parse("Linux"), None);
        assert_eq!(Platform::parse("Debian 12"), None);
    }
}
