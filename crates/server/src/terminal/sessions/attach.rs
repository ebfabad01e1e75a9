//! attachTerminalSession with its quick-reattach challenge and the device
//! key's proof (6.2, D-71).

use super::*;

/// The version byte of a nonce.
const NONCE_VERSION: u8 = 1;
/// version + session + jti + login session + expires_at + random.
const NONCE_PAYLOAD_LEN: usize = 1 + 16 + 16 + 16 + 8 + 16;
const NONCE_LEN: usize = NONCE_PAYLOAD_LEN + 32;

fn nonce_payload(
    session_id: Uuid,
    token_jti: Uuid,
    login_session_id: Uuid,
    expires_at: UnixMillis,
    random: &[u8; 16],
) -> Vec<u8> {
    let mut payload = Vec::with_capacity(NONCE_PAYLOAD_LEN);
    payload.push(NONCE_VERSION);
    payload.extend_from_slice(session_id.as_bytes());
    payload.extend_from_slice(token_jti.as_bytes());
    payload.extend_from_slice(login_session_id.as_bytes());
    payload.extend_from_slice(&expires_at.to_be_bytes());
    payload.extend_from_slice(random);
    payload
}

/// A nonce for the session's current grant: stateless (MAC of the pepper),
/// bound to the session, its current `token_jti` (so any later grant makes it
/// worthless: single use), the caller's login session and an expiry of
/// `terminal.step_up_max_age` (D-71).
pub async fn attach_challenge(
    state: &AppState,
    principal: &Principal,
    session_id: Uuid,
) -> Result<Challenge, SessionError> {
    let now = state.clock().now_ms();
    let person = person_of(principal).ok_or(IdentityError::Forbidden(
        ForbiddenReason::SubjectKindNotAllowed,
    ))?;
    let row = {
        let mut conn = state.db().pool().acquire().await.map_err(DbError::from)?;
        load(&mut conn, session_id).await?
    };
    let row = match row {
        Some(row) if row.person_id == person.person_id => row,
        _ => return Err(HostError::NotFound.into()),
    };
    if row.state == SessionState::Closed {
        return Err(HostError::InvalidStateTransition.into());
    }
    let jti = row.token_jti.ok_or(stored("terminal_sessions.token_jti"))?;
    let expires_at = now.saturating_add(millis(state.config().terminal.step_up_max_age));
    let mut random = [0u8; 16];
    getrandom::fill(&mut random).map_err(|_| HostError::Crypto("the random source failed"))?;
    let mut bytes = nonce_payload(
        session_id,
        jti,
        person.login_session_id,
        expires_at,
        &random,
    );
    let mac = state.pepper().mac(PepperPurpose::ReattachNonce, &bytes);
    bytes.extend_from_slice(&mac);
    Ok(Challenge {
        nonce: b64::encode(&bytes),
        expires_at,
    })
}

/// Whether `proof` is a valid quick-reattach proof for `row` by `person` now.
async fn verify_proof(
    state: &AppState,
    person: &PersonPrincipal,
    row: &SessionRow,
    proof: &DeviceProof,
    client_ephemeral_key_hash: &str,
    now: UnixMillis,
) -> Result<bool, SessionError> {
    let Ok(bytes) = b64::decode(&proof.nonce) else {
        return Ok(false);
    };
    if bytes.len() != NONCE_LEN || bytes[0] != NONCE_VERSION {
        return Ok(false);
    }
    let (payload, mac) = bytes.split_at(NONCE_PAYLOAD_LEN);
    let expected = state.pepper().mac(PepperPurpose::ReattachNonce, payload);
    if !bool::from(subtle::ConstantTimeEq::ct_eq(mac, &expected[..])) {
        return Ok(false);
    }
    let id_at = |offset: usize| {
        let mut id = [0u8; 16];
        id.copy_from_slice(&payload[offset..offset + 16]);
        Uuid::from_bytes(id)
    };
    let mut expiry = [0u8; 8];
    expiry.copy_from_slice(&payload[49..57]);
    let expires_at = i64::from_be_bytes(expiry);
    if id_at(1) != row.id
        || Some(id_at(17)) != row.token_jti
        || id_at(33) != person.login_session_id
        || expires_at < now
    {
        return Ok(false);
    }
    let Some(device_id) = person.device_id else {
        return Ok(false);
    };
    let public_key: Option<String> = {
        let mut conn = state.db().pool().acquire().await.map_err(DbError::from)?;
        sqlx::query_scalar(
            "SELECT public_key FROM devices WHERE id = $1 AND person_id = $2 AND revoked_at IS NULL",
        )
        .bind(db::id_text(&device_id))
        .bind(db::id_text(&person.person_id))
        .fetch_optional(&mut *conn)
        .await
        .map_err(DbError::from)?
    };
    let Some(public_key) = public_key else {
        return Ok(false);
    };
    let (Ok(key), Ok(signature)) = (
        b64::decode_array::<32>(&public_key),
        b64::decode_array::<64>(&proof.signature),
    ) else {
        return Ok(false);
    };
    let message =
        stream::quick_reattach_proof_message(row.id, &proof.nonce, client_ephemeral_key_hash);
    Ok(
        ring::signature::UnparsedPublicKey::new(&ring::signature::ED25519, key)
            .verify(&message, &signature)
            .is_ok(),
    )
}

/// Why a request without a step-up is no quick reattach, if it is none: the
/// audit's `reason_code` and the refusal the client sees (the console's says
/// `passkey_required`).
async fn quick_reattach_refusal(
    state: &AppState,
    person: &PersonPrincipal,
    row: &SessionRow,
    request: &AttachRequest,
    now: UnixMillis,
) -> Result<Option<(&'static str, StepUpRefusal)>, SessionError> {
    let refusal = |code: Refusal| Ok(Some((code.as_str(), StepUpRefusal::Missing)));
    if person.client_component == ClientComponent::Console {
        return Ok(Some((
            Refusal::QuickReattachConsole.as_str(),
            StepUpRefusal::PasskeyRequired,
        )));
    }
    if person.device_id.is_none()
        || person.device_id != row.device_id
        || person.login_session_id != row.login_session_id
    {
        return refusal(Refusal::QuickReattachOtherDevice);
    }
    if row.state != SessionState::Detached {
        return refusal(Refusal::QuickReattachNotDetached);
    }
    let window = millis(state.config().terminal.quick_reattach_window);
    match row.detached_at {
        Some(at) if now <= at.saturating_add(window) => {}
        _ => return refusal(Refusal::QuickReattachWindowPassed),
    }
    let Some(proof) = &request.device_proof else {
        return Ok(Some((
            StepUpRefusal::Missing.as_str(),
            StepUpRefusal::Missing,
        )));
    };
    if !verify_proof(
        state,
        person,
        row,
        proof,
        &request.client_ephemeral_key_hash,
        now,
    )
    .await?
    {
        return refusal(Refusal::DeviceProofInvalid);
    }
    Ok(None)
}

// ---------------------------------------------------------------------------
// attachTerminalSession
// ---------------------------------------------------------------------------

/// attachTerminalSession (module docs).
pub async fn attach(
    state: &AppState,
    principal: &Principal,
    session_id: Uuid,
    request: &AttachRequest,
) -> Result<Grant, SessionError> {
    let now = state.clock().now_ms();
    let db = state.db();
    let action = AuditAction::TerminalAttach;
    let person = principal.require_person(db, now, action).await?;
    take_token(state, person, now)?;
    token::parse_client_ephemeral_key_hash(&request.client_ephemeral_key_hash)?;
    let row = {
        let mut conn = db.pool().acquire().await.map_err(DbError::from)?;
        load(&mut conn, session_id).await?
    };
    let row = match row {
        Some(row) if row.person_id == person.person_id => row,
        Some(row) => {
            let entry = deny_entry(
                principal,
                action,
                Some(row.host_id),
                Some(row.id),
                Refusal::NotSessionPerson,
            );
            return Err(refuse(db, now, entry, HostError::NotFound.into()).await);
        }
        None => return Err(HostError::NotFound.into()),
    };
    if row.state == SessionState::Closed {
        let entry = deny_entry(
            principal,
            action,
            Some(row.host_id),
            Some(row.id),
            Refusal::SessionClosed,
        );
        return Err(refuse(db, now, entry, HostError::InvalidStateTransition.into()).await);
    }
    let host = load_host(db, row.host_id).await?;
    let authorized = authorize_audited(db, now, principal, Action::TerminalAttach, &host).await?;
    let same_user = authorized
        .session_user
        .as_ref()
        .is_some_and(|user| user.id == row.host_session_user_id);
    if !same_user {
        let entry = deny_entry(
            principal,
            action,
            Some(host.id),
            Some(row.id),
            DenyReason::NoSessionUser,
        );
        return Err(refuse(db, now, entry, denied(DenyReason::NoSessionUser)).await);
    }
    let kind = check_host_side(
        state,
        principal,
        action,
        &host,
        Some(row.id),
        &row.profile,
        now,
    )
    .await?;
    if request.step_up_id.is_none() {
        if let Some((code, refusal)) =
            quick_reattach_refusal(state, person, &row, request, now).await?
        {
            let entry = deny_entry(
                principal,
                action,
                Some(host.id),
                Some(row.id),
                CodeRef(code),
            );
            return Err(refuse(db, now, entry, step_up_required(refusal)).await);
        }
    }
    let signer = signer(state, now).await?;
    let grant = attach_once(
        state,
        principal,
        person,
        request,
        &row,
        &host,
        &authorized,
        kind,
        &signer,
        now,
    )
    .await?;
    // The older device stream gets 4103 before the host service replaces its
    // data connection for this grant (6.2).
    state
        .relay()
        .device_replaced_by_grant(state, grant.session_id);
    send_session_open(
        state,
        grant.host_id,
        grant.session_id,
        grant.open_deadline_at,
    );
    Ok(grant)
}

/// A code already checked to be one of this module's closed lists.
struct CodeRef(&'static str);

impl AuditCode for CodeRef {
    fn as_str(&self) -> &'static str {
        self.0
    }
}

#[allow(clippy::too_many_arguments)]
async fn attach_once(
    state: &AppState,
    principal: &Principal,
    person: &PersonPrincipal,
    request: &AttachRequest,
    row: &SessionRow,
    host: &Host,
    authorized: &Authorized,
    kind: ProfileKind,
    signer: &TerminalSigner,
    now: UnixMillis,
) -> Result<Grant, SessionError> {
    let db = state.db();
    let config = &state.config().terminal;
    let action = AuditAction::TerminalAttach;
    let mut uow = db.begin(now).await?;
    if let Some(step_up_id) = request.step_up_id {
        if let Err(refusal) = consume_step_up(&mut uow, person, step_up_id, now).await? {
            drop(uow);
            let entry = deny_entry(principal, action, Some(host.id), Some(row.id), refusal);
            return Err(refuse(db, now, entry, step_up_required(refusal)).await);
        }
    }
    let session_user = authorized
        .session_user
        .as_ref()
        .ok_or(stored("session user of a terminal decision"))?;
    // An opening never started its PTY: the token opens again (6.2, M2-44),
    // with the working directory of the opening.
    let (att, workdir_index) = if row.state == SessionState::Opening {
        (Att::Open, row.workdir_index)
    } else {
        (Att::Attach, None)
    };
    let profile = ProfileName::new(&row.profile).map_err(|_| TokenError::InvalidProfileName)?;
    let instance_id = pairing::instance_id(&mut uow).await?;
    let issued = token::issue(
        signer,
        &TokenRequest {
            instance_id: &instance_id,
            host_id: host.id,
            person_id: person.person_id,
            session_id: row.id,
            device_id: token_device(person),
            profile: profile.as_str(),
            profile_kind: kind,
            client_ephemeral_key_hash: &request.client_ephemeral_key_hash,
            own: authorized.is_owner,
            os_user: &session_user.os_user,
            workdir_index,
            att,
        },
        config.session_token_ttl,
        now,
    )?;
    let open_deadline_at = now.saturating_add(millis(config.open_timeout));
    // Compare-and-swap on what the decision rests on (D-517): the grant it
    // saw (a concurrent grant wins, and a nonce bound to the old jti is
    // spent) and a state it allows (a concurrent end wins). Not on the row's
    // version: the relay moves a session between `active` and `detached`
    // while a device comes and goes, and an attach that either state allows
    // must not fail on that with 409. A quick reattach needs `detached`
    // still; an attach to an opening needs `opening`.
    let (first, second) = match row.state {
        SessionState::Opening => ("opening", "opening"),
        SessionState::Detached if request.step_up_id.is_none() => ("detached", "detached"),
        SessionState::Active | SessionState::Detached => ("active", "detached"),
        SessionState::Closed => return Err(HostError::InvalidStateTransition.into()),
    };
    let grant_seen = match row.token_jti {
        Some(_) => "token_jti = $9",
        None => "token_jti IS NULL",
    };
    let query = format!(
        "UPDATE terminal_sessions \
         SET token_jti = $1, token_expires_at = $2, open_deadline_at = $3, device_id = $4, \
             login_session_id = $5, version = version + 1 \
         WHERE id = $6 AND state IN ($7, $8) AND {grant_seen}"
    );
    let mut update = sqlx::query(&query)
        .bind(db::id_text(&issued.jti))
        .bind(issued.expires_at)
        .bind(open_deadline_at)
        .bind(person.device_id.map(|id| db::id_text(&id)))
        .bind(db::id_text(&person.login_session_id))
        .bind(db::id_text(&row.id))
        .bind(first)
        .bind(second);
    if let Some(jti) = row.token_jti {
        update = update.bind(db::id_text(&jti));
    }
    let updated = update.execute(uow.conn()).await.map_err(DbError::from)?;
    if updated.rows_affected() != 1 {
        // Another grant or an end committed since the decision.
        return Err(HostError::InvalidStateTransition.into());
    }
    uow.audit(
        AuditEntry::allow(action, principal.actor())
            .target(TargetKind::TerminalSession, row.id)
            .details(
                grant_details(
                    host.id,
                    row.id,
                    &profile,
                    person.device_id,
                    request.pin_changed,
                    authorized.foreign_assignee,
                )
                .flag("quick_reattach", request.step_up_id.is_none()),
            ),
    );
    changed_event(&mut uow, person.person_id, row.id, host.id, row.state);
    signals::stage(
        &mut uow,
        &Signal::SessionOpen {
            host_id: host.id,
            session_id: row.id,
        },
    );
    uow.commit().await?;
    let (noise_public_key, key_fingerprint) = host_keys(host)?;
    Ok(Grant {
        session_id: row.id,
        host_id: host.id,
        token: issued,
        noise_public_key,
        key_fingerprint,
        key_generation: host.key_generation,
        open_deadline_at,
    })
}

// ---------------------------------------------------------------------------
// closeTerminalSession and the reads
// ---------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nonce_layout_adds_up() {
        let payload = nonce_payload(
            Uuid::from_u128(1),
            Uuid::from_u128(2),
            Uuid::from_u128(3),
            -1,
            &[9; 16],
        );
        assert_eq!(payload.len(), NONCE_PAYLOAD_LEN);
        assert_eq!(payload[0], NONCE_VERSION);
        assert_eq!(&payload[49..57], &(-1i64).to_be_bytes());
    }
}
