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
use crate::audit::{Actor, AuditAction, AuditDetails, AuditEntry, Target, TargetKind};
use crate::clock::{UnixMillis, millis};
use crate::codes::code_enum;
use crate::config::Config;
use crate::db::idempotency::{self, IdempotencyKey, StoredResponse};
use crate::db::{self, Db, DbError, Engine, UnitOfWork};
use crate::identity::principal::PersonPrincipal;
use crate::identity::{IdentityError, Invalid, step_up};
use crate::pepper::{Pepper, PepperPurpose};
use crate::permissions::i6;
use crate::revocation::{self, EndScope};
use crate::terminal::signals::{self, Signal};

mod confirm;
mod pair;
mod refusals;

pub use confirm::*;
pub use pair::*;
pub use refusals::*;

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
    /// The host as a reader sees it ([`session_users::host_view`]).
    pub view: bothy_api::hosts::Host,
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

async fn reload(
    uow: &mut UnitOfWork,
    host_id: Uuid,
) -> Result<(Host, bothy_api::hosts::Host), HostError> {
    let host = super::load(uow.conn(), host_id)
        .await?
        .ok_or(HostError::Stored("hosts row"))?;
    let view = session_users::host_view(uow.conn(), &host).await?;
    Ok((host, view))
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
    let (host, view) = reload(&mut uow, host_id).await?;
    uow.commit().await?;
    Ok(WithCode {
        host,
        view,
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
    let (host, view) = reload(&mut uow, host.id).await?;
    uow.commit().await?;
    Ok(WithCode {
        host,
        view,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn platform_codes() {
        assert_eq!(Platform::parse("linux"), Some(Platform::Linux));
        assert_eq!(Platform::parse("Linux"), None);
        assert_eq!(Platform::parse("Debian 12"), None);
    }
}
