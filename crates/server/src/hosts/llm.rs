//! The declaration of the LLM login of a host (7.2) and its I6 consequences
//! (7.3 items 1 and 3): [`apply`], which confirmHost and setHostLlmCredentials
//! share, and [`set`], the whole setHostLlmCredentials
//! (`PUT /api/v1/hosts/{host_id}/llm-credentials`).
//!
//! - `credential_holder_id` exactly with `personal`; the holder is a person who
//!   is not deleted. Findings: `required`, `not_allowed`, `unknown_user`.
//! - A change to `personal`, or of the holder, ends every open session of other
//!   people on the host (`i6_violation`) in the same unit of work; then the I6
//!   check runs on the result ([`crate::permissions::i6::check_host`]). A
//!   violation rolls everything back: `409 i6_violation`, and a deny entry
//!   (host.manage, `reason_code: invariant_violation`) in a fresh unit of work.
//! - The same declaration again is `200` without a new host version, without
//!   `host.updated` and without a new permission version; its audit entry says
//!   `no_change` (docs/decisions.md D-32).
//! - A retired host answers `409 conflict` reason `host_retired`, also for the
//!   same declaration: retired is final (3.1; D-33). Every other state takes it.

use bothy_proto::codes::CloseReason;
use uuid::Uuid;

use super::session_users::{count, end_error, is_assignable_person};
use super::{Host, HostConflict, HostError, HostState, LlmCredentials, ManageOperation};
use crate::audit::{AuditAction, AuditDetails, AuditEntry, Target, TargetKind};
use crate::clock::UnixMillis;
use crate::db::{self, Db, DbError, UnitOfWork};
use crate::hosts::manage::{self, ManagedHost};
use crate::identity::principal::PersonPrincipal;
use crate::permissions::i6;
use crate::revocation::{self, EndScope};

/// A declaration as requested.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Declaration {
    /// The login.
    pub llm_credentials: LlmCredentials,
    /// The holder, exactly with personal.
    pub credential_holder_id: Option<Uuid>,
}

impl Declaration {
    /// The declaration `host` has now.
    pub fn of(host: &Host) -> Declaration {
        Declaration {
            llm_credentials: host.llm_credentials,
            credential_holder_id: host.credential_holder_id,
        }
    }

    /// Its audit details: `llm_credentials` and, with personal,
    /// `credential_holder_id`.
    fn audit(&self, details: AuditDetails) -> AuditDetails {
        let details = details.code("llm_credentials", self.llm_credentials);
        match self.credential_holder_id {
            Some(holder) => details.id("credential_holder_id", holder),
            None => details,
        }
    }

    /// The details of the declaration before a change: `from_llm_credentials`
    /// and, with personal, `from_credential_holder_id`.
    fn audit_from(&self, details: AuditDetails) -> AuditDetails {
        let details = details.code("from_llm_credentials", self.llm_credentials);
        match self.credential_holder_id {
            Some(holder) => details.id("from_credential_holder_id", holder),
            None => details,
        }
    }
}

/// Validates and applies `declaration` to `host` in `uow` (confirmHost and
/// setHostLlmCredentials): holder missing with personal → `required`, sent with
/// none/organization → `not_allowed`, unknown / not a person / deleted →
/// `unknown_user`, all under `pointer_base` + `/credential_holder_id`. Writes
/// the columns if they change; on a change to personal or of the holder ends
/// the other people's sessions on the host (i6_violation) and runs the I6 check
/// ([`crate::permissions::i6::check_host`]). Returns whether anything changed.
/// Writes no audit and bumps no version: the caller does both once — the host
/// version, and the permission version when this returns `true`.
pub async fn apply(
    uow: &mut UnitOfWork,
    host: &Host,
    declaration: Declaration,
    pointer_base: &str,
) -> Result<bool, HostError> {
    Ok(apply_counting(uow, host, declaration, pointer_base)
        .await?
        .is_some())
}

/// [`apply`], returning how many sessions it ended when it changed anything
/// (`None`: the declaration was the host's already).
pub async fn apply_counting(
    uow: &mut UnitOfWork,
    host: &Host,
    declaration: Declaration,
    pointer_base: &str,
) -> Result<Option<usize>, HostError> {
    let pointer = format!("{pointer_base}/credential_holder_id");
    let holder = match (
        declaration.llm_credentials,
        declaration.credential_holder_id,
    ) {
        (LlmCredentials::Personal, None) => return Err(HostError::invalid(pointer, "required")),
        (LlmCredentials::None | LlmCredentials::Organization, Some(_)) => {
            return Err(HostError::invalid(pointer, "not_allowed"));
        }
        (LlmCredentials::Personal, Some(holder)) => {
            if !is_assignable_person(uow.conn(), holder).await? {
                return Err(HostError::invalid(pointer, "unknown_user"));
            }
            Some(holder)
        }
        (LlmCredentials::None | LlmCredentials::Organization, None) => None,
    };
    if Declaration::of(host) == declaration {
        return Ok(None);
    }
    sqlx::query("UPDATE hosts SET llm_credentials = $1, credential_holder_id = $2 WHERE id = $3")
        .bind(declaration.llm_credentials.as_str())
        .bind(holder.map(|id| db::id_text(&id)))
        .bind(db::id_text(&host.id))
        .execute(uow.conn())
        .await
        .map_err(DbError::from)?;
    // Changed and personal: either a change to personal or of the holder (7.3
    // item 3). Everyone but the holder loses their sessions.
    let mut ended = 0;
    if let Some(holder) = holder {
        ended = revocation::end(
            uow,
            EndScope::HostExceptPerson {
                host_id: host.id,
                person_id: holder,
            },
            CloseReason::I6Violation,
            None,
        )
        .await
        .map_err(end_error)?
        .len();
    }
    i6::check_host(uow, host.id).await?;
    Ok(Some(ended))
}

/// What setHostLlmCredentials was asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetRequest {
    /// The host.
    pub host_id: Uuid,
    /// The declaration.
    pub declaration: Declaration,
    /// The owner's reason (validated by the route).
    pub reason: String,
    /// The step-up the request consumes.
    pub step_up_id: Uuid,
}

/// setHostLlmCredentials for an owner `person` (the route checked the role):
/// in one unit of work the host row under lock, `If-Match` against its version
/// (`if_match` does the check, so a missing or stale one is `428` / `412`), the
/// step-up, [`apply`], audit, and on a change one host version, one
/// `host.updated` and one permission version. Returns the host after.
pub async fn set(
    db: &Db,
    now: UnixMillis,
    person: &PersonPrincipal,
    request: &SetRequest,
    if_match: impl FnOnce(i64) -> Result<(), HostError>,
) -> Result<ManagedHost, HostError> {
    let mut uow = db.begin(now).await?;
    let host = super::load_for_update(&mut uow, request.host_id).await?;
    if_match(host.version)?;
    let operation = ManageOperation::LlmCredentials;
    let mut uow =
        manage::consume_step_up(uow, person, request.step_up_id, host.id, operation).await?;
    if host.state == HostState::Retired {
        return Err(HostError::Conflict(HostConflict::HostRetired));
    }
    let details = request.declaration.audit(
        AuditDetails::new()
            .code("operation", operation)
            .reason(&request.reason),
    );
    let outcome = apply_counting(&mut uow, &host, request.declaration, "").await;
    let ended = match outcome {
        Err(HostError::I6Violation) => {
            // Rolls the change back (the step-up stays unconsumed); the deny
            // entry goes into a fresh unit of work. A failed rollback loses
            // nothing: the transaction ends with its connection either way.
            let _ = uow.rollback().await;
            let target = Target {
                kind: TargetKind::Host,
                id: host.id,
            };
            return Err(i6::audit_violation(
                db,
                now,
                AuditAction::HostManage,
                person.actor(),
                Some(target),
                details,
            )
            .await);
        }
        Err(other) => return Err(other),
        Ok(ended) => ended,
    };
    let details = match ended {
        None => details.flag("no_change", true),
        Some(ended) => Declaration::of(&host)
            .audit_from(details)
            .count("sessions_ended", count(ended)),
    };
    uow.audit(
        AuditEntry::allow(AuditAction::HostManage, person.actor())
            .target(TargetKind::Host, host.id)
            .details(details),
    );
    if ended.is_some() {
        manage::record_change(&mut uow, host.id, host.state, true).await?;
    }
    let managed = ManagedHost::read(&mut uow, host.id).await?;
    uow.commit().await?;
    Ok(managed)
}
