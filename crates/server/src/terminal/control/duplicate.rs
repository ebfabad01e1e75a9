//! The second control connection on one node (3.4, M2-43): a host that logs in
//! while this process still holds a connection of it. The newer connection
//! asks the older one's task for a WebSocket ping and waits at most
//! `terminal.host_duplicate_probe_timeout` for its pong:
//!
//! - no pong: the older one is dead; it closes with 4009, the newer is
//!   accepted, and the login's unit of work writes one allow entry
//!   `host.connect` with `code: stale_connection_replaced`;
//! - a pong: two host services run with the same keys. In one unit of work an
//!   active (or disabled) host becomes disabled with `duplicate_connection`, a
//!   confirming one falls back to pairing (keys dropped, `key_changed`), its
//!   sessions end with `host_disabled`, the permission version rises, one deny
//!   entry `host.connect` (`reason_code: host_duplicate_connection`, `code:
//!   duplicate_connection`) and `host.updated` are written; then both
//!   connections close with 4112.
//!
//! # Several nodes (3.4 "Several nodes", rule b)
//! [`probe_older_here`]: when another node announces a connection of a host
//! that is newer (greater UUIDv7 `conn_id`) than the one this node holds, this
//! node probes its own, at most one probe per connection at a time. No pong:
//! it closes with 4009 (superseded: the host's sessions are the newer
//! connection's now), writes the allow entry of a replaced connection and, as
//! every ending connection, withdraws itself (`terminal.host_gone`). A pong:
//! the verdict above in one unit of work, which stages `terminal.host_close`,
//! so every node closes the host's connections with the code of the state it
//! reads, and this node closes its own with 4112 (D-M2-47-13).

use std::collections::HashSet;
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use bothy_proto::codes::{CloseCode, CloseReason};
use bothy_proto::pairing::PairingCode;
use tokio::sync::oneshot;

use super::{ConnCommand, ControlConnection, End, command_sender, login::end_error};
use crate::audit::{Actor, AuditAction, AuditDetails, AuditEntry, TargetKind};
use crate::codes::code_enum;
use crate::db::{self, DbError, UnitOfWork};
use crate::hosts::{self, DisabledReason, Host, HostError, HostState};
use crate::revocation::{EndScope, end};
use crate::state::AppState;
use crate::terminal::signals::{self, Signal};

code_enum! {
    /// The `code` of a `host.connect` entry of 3.4.
    pub enum DuplicateCode {
        /// The older connection did not answer; the newer one replaced it.
        StaleConnectionReplaced => "stale_connection_replaced",
        /// Both answered: copied keys.
        DuplicateConnection => "duplicate_connection",
    }
}

code_enum! {
    /// The `reason_code` of the deny entry of a live duplicate (07 4.1).
    pub enum DuplicateDenial {
        /// A second live control connection with the same keys.
        HostDuplicateConnection => "host_duplicate_connection",
    }
}

/// Lists a host's duplicate verdict on this node until dropped. The older
/// connection's log tail sees the verdict's `host.updated` before the
/// verdict's own close reaches it; while the host is listed, it leaves the
/// close to the verdict (4112 on this node, D-M2-47-13). The list is the
/// node's ([`LocalControlLinks`](crate::terminal::links::LocalControlLinks)):
/// a connection of the host on another node closes by the verdict's
/// `terminal.host_close` (D-519).
struct VerdictRunning {
    state: AppState,
    host_id: uuid::Uuid,
}

impl VerdictRunning {
    fn new(state: &AppState, host_id: uuid::Uuid) -> VerdictRunning {
        state
            .local_control_links()
            .set_verdict_running(host_id, true);
        VerdictRunning {
            state: state.clone(),
            host_id,
        }
    }
}

impl Drop for VerdictRunning {
    fn drop(&mut self) {
        self.state
            .local_control_links()
            .set_verdict_running(self.host_id, false);
    }
}

/// Runs the check for a login of `host`. `Ok(true)`: an older, dead
/// connection was replaced (audit in the login's unit of work); `Ok(false)`:
/// there was none; `Err`: close the new connection (4112, or 4000).
pub(super) async fn check(connection: &ControlConnection, host: &Host) -> Result<bool, End> {
    let links = connection.state.local_control_links();
    let Some(older) = links.conn_id(host.id) else {
        return Ok(false);
    };
    if older == connection.conn_id {
        return Ok(false);
    }
    let Some(sender) = command_sender(older) else {
        // The task is gone already; its registration is stale.
        return Ok(true);
    };
    let timeout = connection
        .state
        .config()
        .terminal
        .host_duplicate_probe_timeout;
    if !probe(&sender, timeout).await {
        let _ = sender.try_send(ConnCommand::Close {
            code: CloseCode::HeartbeatTimeout,
            superseded: true,
        });
        return Ok(true);
    }
    // Listed before the verdict commits and unlisted only after the older
    // connection's close was handed over: its task either skips the
    // verdict's host.updated or finds the command first (its loop looks at
    // commands before the log tail).
    let running = VerdictRunning::new(&connection.state, host.id);
    let verdict = duplicate_verdict(&connection.state, host.id).await;
    let _ = sender.try_send(ConnCommand::Close {
        code: CloseCode::HostDuplicate,
        superseded: true,
    });
    drop(running);
    match verdict {
        Ok(()) => Err(End::code(CloseCode::HostDuplicate)),
        Err(error) => {
            tracing::warn!(%error, "the duplicate verdict could not be written");
            Err(End::code(CloseCode::UnknownError))
        }
    }
}

/// Whether the older connection answered a ping within `timeout`.
async fn probe(sender: &tokio::sync::mpsc::Sender<ConnCommand>, timeout: Duration) -> bool {
    let (answer, answered) = oneshot::channel();
    if sender.try_send(ConnCommand::Probe(answer)).is_err() {
        return false;
    }
    matches!(tokio::time::timeout(timeout, answered).await, Ok(Ok(())))
}

/// The allow entry of a replaced dead connection.
pub(super) fn audit_replaced(uow: &mut UnitOfWork, host_id: uuid::Uuid) {
    uow.audit(
        AuditEntry::allow(AuditAction::HostConnect, Actor::Host(host_id))
            .target(TargetKind::Host, host_id)
            .details(
                AuditDetails::new()
                    .id("host_id", host_id)
                    .code("code", DuplicateCode::StaleConnectionReplaced),
            ),
    );
}

/// The verdict of a live duplicate, in one unit of work.
async fn duplicate_verdict(state: &AppState, host_id: uuid::Uuid) -> Result<(), HostError> {
    let now = state.clock().now_ms();
    let mut uow = state.db().begin(now).await?;
    let host = hosts::load_for_update(&mut uow, host_id).await?;
    let (to_state, key_changed) = match host.state {
        HostState::Confirming => {
            // 03 allows disabled only after the confirmation: the fallback of 3.2.
            let code = PairingCode::generate()
                .map_err(|_| HostError::Crypto("the random source failed"))?;
            let hash = hosts::pairing::code_hash(state.pepper(), &code);
            sqlx::query(
                "UPDATE hosts SET state = 'pairing', noise_public_key = NULL, \
                 auth_public_jwk = NULL, auth_jkt = NULL, pairing_code_hash = $1, \
                 pairing_expires_at = $2, fingerprint_failures = 0 WHERE id = $3",
            )
            .bind(hash)
            .bind(now)
            .bind(db::id_text(&host.id))
            .execute(uow.conn())
            .await
            .map_err(DbError::from)?;
            (HostState::Pairing, true)
        }
        HostState::Active | HostState::Disabled => {
            sqlx::query(
                "UPDATE hosts SET state = 'disabled', disabled_reason = $1, disabled_at = $2 \
                 WHERE id = $3",
            )
            .bind(DisabledReason::DuplicateConnection.as_str())
            .bind(now)
            .bind(db::id_text(&host.id))
            .execute(uow.conn())
            .await
            .map_err(DbError::from)?;
            (HostState::Disabled, false)
        }
        // Changed meanwhile: nothing left to disable.
        HostState::Pairing | HostState::Retired => {
            uow.rollback().await?;
            return Ok(());
        }
    };
    crate::permissions::bump_version(&mut uow).await?;
    end(
        &mut uow,
        EndScope::Host(host.id),
        CloseReason::HostDisabled,
        None,
    )
    .await
    .map_err(end_error)?;
    let version = hosts::bump_version(&mut uow, host.id).await?;
    hosts::host_updated(&mut uow, host.id, version, to_state, key_changed);
    // Spec 9 and 3.4 rule b: every node closes the host's control connections
    // with the code of the state it reads (D-M2-47-13).
    signals::stage(&mut uow, &Signal::HostClose { host_id: host.id });
    uow.audit(
        AuditEntry::deny(AuditAction::HostConnect, Actor::Host(host.id))
            .target(TargetKind::Host, host.id)
            .details(
                AuditDetails::new()
                    .id("host_id", host.id)
                    .code("reason_code", DuplicateDenial::HostDuplicateConnection)
                    .code("code", DuplicateCode::DuplicateConnection)
                    .code("from_state", host.state)
                    .code("to_state", to_state),
            ),
    );
    uow.commit().await?;
    Ok(())
}

/// The connections of this process being probed for a newer connection
/// elsewhere (at most one probe per connection at a time).
static PROBING: LazyLock<Mutex<HashSet<uuid::Uuid>>> = LazyLock::new(|| Mutex::new(HashSet::new()));

/// Lists a connection in [`PROBING`] until dropped.
struct Probing(uuid::Uuid);

impl Probing {
    fn start(conn_id: uuid::Uuid) -> Option<Probing> {
        let mut probing = PROBING.lock().unwrap_or_else(|p| p.into_inner());
        probing.insert(conn_id).then_some(Probing(conn_id))
    }
}

impl Drop for Probing {
    fn drop(&mut self) {
        PROBING
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.0);
    }
}

/// Rule b of 3.4 across nodes (module docs): `older` is this node's
/// connection of `host_id`, older than one announced by another node.
pub(crate) async fn probe_older_here(state: &AppState, host_id: uuid::Uuid, older: uuid::Uuid) {
    let Some(_probing) = Probing::start(older) else {
        return;
    };
    let Some(sender) = command_sender(older) else {
        return;
    };
    let timeout = state.config().terminal.host_duplicate_probe_timeout;
    if !probe(&sender, timeout).await {
        let replaced = async {
            let mut uow = state.db().begin(state.clock().now_ms()).await?;
            audit_replaced(&mut uow, host_id);
            uow.commit().await.map(|_| ())
        }
        .await;
        if let Err(error) = replaced {
            tracing::warn!(%error, "the replaced control connection could not be audited");
        }
        let _ = sender.try_send(ConnCommand::Close {
            code: CloseCode::HeartbeatTimeout,
            superseded: true,
        });
        return;
    }
    let running = VerdictRunning::new(state, host_id);
    let verdict = duplicate_verdict(state, host_id).await;
    let _ = sender.try_send(ConnCommand::Close {
        code: if verdict.is_ok() {
            CloseCode::HostDuplicate
        } else {
            CloseCode::UnknownError
        },
        superseded: true,
    });
    drop(running);
    if let Err(error) = verdict {
        tracing::warn!(%error, "the duplicate verdict could not be written");
    }
}
