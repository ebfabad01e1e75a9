//! openTerminalSession (6.1 steps 1–4): the decision, then one unit of work
//! that may start again on a changed host (see the parent module).

use super::*;

/// openTerminalSession (module docs).
pub async fn open(
    state: &AppState,
    principal: &Principal,
    request: &OpenRequest,
) -> Result<Grant, SessionError> {
    let now = state.clock().now_ms();
    let person = principal
        .require_person(state.db(), now, AuditAction::TerminalOpen)
        .await?;
    take_token(state, person, now)?;
    token::parse_client_ephemeral_key_hash(&request.client_ephemeral_key_hash)?;
    let signer = signer(state, now).await?;
    let retries = state.config().database.tx_retry_max;
    let mut attempt = 0;
    loop {
        let decision = decide_open(state, principal, request, now).await?;
        match open_once(state, principal, person, request, &decision, &signer, now).await {
            Ok(Attempt::Done(grant)) => {
                send_session_open(
                    state,
                    grant.host_id,
                    grant.session_id,
                    grant.open_deadline_at,
                );
                return Ok(grant);
            }
            Ok(Attempt::Again) | Err(SessionError::Host(HostError::Db(DbError::Busy(_)))) => {
                attempt += 1;
                if attempt > retries {
                    tracing::warn!(attempts = attempt, "terminal.open contended; giving up");
                    return Err(SessionError::Contended);
                }
            }
            Err(error) => return Err(error),
        }
    }
}

/// The decision of an opening, taken outside the unit of work.
struct OpenDecision {
    host: Host,
    authorized: Authorized,
    kind: ProfileKind,
}

async fn decide_open(
    state: &AppState,
    principal: &Principal,
    request: &OpenRequest,
    now: UnixMillis,
) -> Result<OpenDecision, SessionError> {
    let db = state.db();
    let action = AuditAction::TerminalOpen;
    let host = load_host(db, request.host_id).await?;
    let authorized = authorize_audited(db, now, principal, Action::TerminalOpen, &host).await?;
    let kind =
        check_host_side(state, principal, action, &host, None, &request.profile, now).await?;
    token::check_workdir_index(kind, Att::Open, request.workdir_index)?;
    let session_user = authorized
        .session_user
        .as_ref()
        .ok_or(stored("session user of a terminal decision"))?;
    if let Some(index) = request.workdir_index {
        let count = reported_workdir_count(&host, &session_user.os_user);
        if usize::try_from(index).map_or(true, |index| index >= count) {
            let entry = deny_entry(
                principal,
                action,
                Some(host.id),
                None,
                DenyReason::ProfileUnknown,
            );
            return Err(refuse(db, now, entry, denied(DenyReason::ProfileUnknown)).await);
        }
    }
    let counts = {
        let mut conn = db.pool().acquire().await.map_err(DbError::from)?;
        open_counts(&mut conn, authorized.person_id, host.id).await?
    };
    if !within_limits(state, counts) {
        let entry = deny_entry(
            principal,
            action,
            Some(host.id),
            None,
            DenyReason::SessionLimit,
        );
        return Err(refuse(db, now, entry, denied(DenyReason::SessionLimit)).await);
    }
    Ok(OpenDecision {
        host,
        authorized,
        kind,
    })
}

async fn open_once(
    state: &AppState,
    principal: &Principal,
    person: &PersonPrincipal,
    request: &OpenRequest,
    decision: &OpenDecision,
    signer: &TerminalSigner,
    now: UnixMillis,
) -> Result<Attempt<Grant>, SessionError> {
    let db = state.db();
    let config = &state.config().terminal;
    let host_id = decision.host.id;
    let mut uow = db.begin(now).await?;
    lock_person(&mut uow, person.person_id).await?;
    let consumed = match request.step_up_id {
        Some(step_up_id) => consume_step_up(&mut uow, person, step_up_id, now).await?,
        None => Err(StepUpRefusal::Missing),
    };
    if let Err(refusal) = consumed {
        drop(uow);
        let entry = deny_entry(
            principal,
            AuditAction::TerminalOpen,
            Some(host_id),
            None,
            refusal,
        );
        return Err(refuse(db, now, entry, step_up_required(refusal)).await);
    }
    // The decision again, on locked rows (M2-46).
    let locked = hosts::load_for_update(&mut uow, host_id).await?;
    if locked != decision.host {
        return Ok(Attempt::Again);
    }
    match authorize::authorize(uow.conn(), principal, Action::TerminalOpen, &locked, now).await {
        Ok(again) if again == decision.authorized => {}
        Ok(_) => return Ok(Attempt::Again),
        Err(error) if Denial::of(&error).is_some() => return Ok(Attempt::Again),
        Err(error) => return Err(error.into()),
    }
    if !within_limits(
        state,
        open_counts(uow.conn(), person.person_id, host_id).await?,
    ) {
        return Ok(Attempt::Again);
    }

    let session_user = decision
        .authorized
        .session_user
        .as_ref()
        .ok_or(stored("session user of a terminal decision"))?;
    let profile = ProfileName::new(&request.profile).map_err(|_| TokenError::InvalidProfileName)?;
    let instance_id = pairing::instance_id(&mut uow).await?;
    let session_id = db::new_id(now)?;
    let issued = token::issue(
        signer,
        &TokenRequest {
            instance_id: &instance_id,
            host_id,
            person_id: person.person_id,
            session_id,
            device_id: token_device(person),
            profile: profile.as_str(),
            profile_kind: decision.kind,
            client_ephemeral_key_hash: &request.client_ephemeral_key_hash,
            own: decision.authorized.is_owner,
            os_user: &session_user.os_user,
            workdir_index: request.workdir_index,
            att: Att::Open,
        },
        config.session_token_ttl,
        now,
    )?;
    let open_deadline_at = now.saturating_add(millis(config.open_timeout));
    sqlx::query(
        "INSERT INTO terminal_sessions (id, host_id, person_id, login_session_id, device_id, \
           host_session_user_id, profile, state, created_at, version, token_jti, \
           token_expires_at, open_deadline_at, workdir_index, foreign_assignee) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, 'opening', $8, 1, $9, $10, $11, $12, $13)",
    )
    .bind(db::id_text(&session_id))
    .bind(db::id_text(&host_id))
    .bind(db::id_text(&person.person_id))
    .bind(db::id_text(&person.login_session_id))
    .bind(person.device_id.map(|id| db::id_text(&id)))
    .bind(db::id_text(&session_user.id))
    .bind(profile.as_str())
    .bind(now)
    .bind(db::id_text(&issued.jti))
    .bind(issued.expires_at)
    .bind(open_deadline_at)
    .bind(request.workdir_index.map(i64::from))
    .bind(decision.authorized.foreign_assignee)
    .execute(uow.conn())
    .await
    .map_err(DbError::from)?;
    uow.audit(
        AuditEntry::allow(AuditAction::TerminalOpen, principal.actor())
            .target(TargetKind::TerminalSession, session_id)
            .details(grant_details(
                host_id,
                session_id,
                &profile,
                person.device_id,
                request.pin_changed,
                decision.authorized.foreign_assignee,
            )),
    );
    changed_event(
        &mut uow,
        person.person_id,
        session_id,
        host_id,
        SessionState::Opening,
    );
    signals::stage(
        &mut uow,
        &Signal::SessionOpen {
            host_id,
            session_id,
        },
    );
    uow.commit().await?;
    let (noise_public_key, key_fingerprint) = host_keys(&locked)?;
    Ok(Attempt::Done(Grant {
        session_id,
        host_id,
        token: issued,
        noise_public_key,
        key_fingerprint,
        key_generation: locked.key_generation,
        open_deadline_at,
    }))
}

// ---------------------------------------------------------------------------
// Quick reattach: the nonce and the proof
// ---------------------------------------------------------------------------
