//! closeTerminalSession (the person or an owner) through the one end function.

use super::*;

/// A session [`close`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Closed {
    /// The session.
    pub session_id: Uuid,
    /// `client_closed` or `closed_by_owner`.
    pub close_reason: CloseReason,
}

/// closeTerminalSession (module docs).
pub async fn close(
    state: &AppState,
    principal: &Principal,
    session_id: Uuid,
) -> Result<Closed, SessionError> {
    let now = state.clock().now_ms();
    let db = state.db();
    let action = AuditAction::TerminalClose;
    let person = principal.require_person(db, now, action).await?;
    let row = {
        let mut conn = db.pool().acquire().await.map_err(DbError::from)?;
        load(&mut conn, session_id).await?
    };
    let Some(row) = row else {
        return Err(HostError::NotFound.into());
    };
    let (close_reason, closed_by) = if row.person_id == person.person_id {
        (CloseReason::ClientClosed, ClosedBy::Person)
    } else if person.is_owner() {
        (CloseReason::ClosedByOwner, ClosedBy::Owner)
    } else {
        let entry = deny_entry(
            principal,
            action,
            None,
            Some(row.id),
            Refusal::NotSessionPerson,
        );
        return Err(refuse(db, now, entry, HostError::NotFound.into()).await);
    };
    let closed_entry = || {
        deny_entry(
            principal,
            action,
            None,
            Some(row.id),
            Refusal::SessionClosed,
        )
    };
    if row.state == SessionState::Closed {
        return Err(refuse(
            db,
            now,
            closed_entry(),
            HostError::InvalidStateTransition.into(),
        )
        .await);
    }
    let mut uow = db.begin(now).await?;
    let ended = end(&mut uow, EndScope::Session(row.id), close_reason, None)
        .await
        .map_err(|error| match error {
            crate::revocation::EndError::Db(db_error) => SessionError::from(db_error),
            other => SessionError::Host(HostError::Stored(match other {
                crate::revocation::EndError::InvalidPair { .. } => "close pair",
                crate::revocation::EndError::Db(_) => "database",
            })),
        })?;
    if ended.is_empty() {
        // Another end committed since the read: the first end wins.
        drop(uow);
        return Err(refuse(
            db,
            now,
            closed_entry(),
            HostError::InvalidStateTransition.into(),
        )
        .await);
    }
    uow.audit(
        AuditEntry::allow(action, principal.actor())
            .target(TargetKind::TerminalSession, row.id)
            .details(
                AuditDetails::new()
                    .id("session_id", row.id)
                    .code("close_reason", close_reason)
                    .code("closed_by", closed_by),
            ),
    );
    // `session.close` reaches the host through the control connection's log
    // tail, like every other end (D-62).
    uow.commit().await?;
    Ok(Closed {
        session_id: row.id,
        close_reason,
    })
}
