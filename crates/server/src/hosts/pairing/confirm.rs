//! confirmHost (3.2 step 3): the fingerprint prefix, the declaration and
//! the idempotent answer.

use super::*;

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
    /// The host is active: as a reader sees it.
    Confirmed(&'a bothy_api::hosts::Host),
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
    /// The host is active: the host, and as a reader sees it.
    Active(Box<Host>, Box<bothy_api::hosts::Host>),
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
    let host = crate::hosts::load_for_update(&mut uow, request.host_id).await?;
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
    let mut uow = crate::hosts::manage::consume_step_up(
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
    let version = crate::hosts::bump_version(&mut uow, host.id).await?;
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
    let (host, view) = reload(&mut uow, host.id).await?;
    store_response(
        &mut uow,
        actor,
        idempotent,
        render,
        ConfirmAnswer::Confirmed(&view),
    )
    .await?;
    uow.commit().await?;
    Ok(Confirmed::Active(Box::new(host), Box::new(view)))
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
        let version = crate::hosts::bump_version(uow, host.id).await?;
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
