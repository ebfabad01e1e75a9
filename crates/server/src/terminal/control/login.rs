//! hello and identify (3.5 "Login"), decided in exactly the numbered order:
//!
//! 1. no frame within `terminal.host_auth_timeout` (the loop's deadline), or
//!    another valid host op first: 4113; a frame that fails decoding: 4002;
//! 2. `protocol_version` not in [`PROTOCOL_VERSIONS`]: 4114;
//! 3. `live_sessions` absent, `session_id` present, `host_version` not SemVer: 4002;
//! 4. the proof ([`host_auth::verify_host_proof`]): 4110 / 4113. Before it, an
//!    empty `rl.public_auth` bucket of the client address closes with 4008; a
//!    refused proof takes one token of it; after a proof that verifies, the
//!    login takes one token of `rl.host` of the host, else 4008 (6.3,
//!    [`crate::terminal::channel_limits`]);
//! 5. `authorize(host, host.connect)` ([`host_auth::check_host_may_connect`]): 4111;
//! 6. the duplicate check of 3.4 ([`super::duplicate`]), then one unit of
//!    work: live_sessions reconciliation (6.2), reported_host_version,
//!    last_seen_at;
//! 7. register, read state and auth_jkt once more, ready.
//!
//! A refusal of steps 4 and 5 for a host that exists writes a deny entry
//! `host.connect` with `reason_code` (`host_unpaired`, `host_auth_failed`,
//! `host_disabled`); an unknown host ID writes none (docs/decisions.md D-63).

use std::collections::HashSet;

use bothy_proto::codes::{CloseCode, CloseReason};
use bothy_proto::control::{Hello, HostMessage, Identify, Ready, ServerMessage};
use bothy_proto::jwk::Jwks;
use sqlx::Row;
use tokio::sync::mpsc;
use uuid::Uuid;

use super::{ControlConnection, End, LoggedIn, duplicate};
use crate::audit::{Actor, AuditAction, AuditDetails, AuditEntry, TargetKind};
use crate::codes::code_enum;
use crate::db::{self, DbError};
use crate::hosts::{self, HostError};
use crate::revocation::{EndScope, end};
use crate::terminal::channel_limits;
use crate::terminal::host_auth::{
    self, HostAuthRefusal, PROTOCOL_VERSIONS, protocol_version_supported,
};
use crate::terminal::links::ControlSignal;

code_enum! {
    /// The `reason_code` of a refused login (deny entry `host.connect`).
    pub enum LoginDenial {
        /// 4110.
        HostUnpaired => "host_unpaired",
        /// 4113.
        HostAuthFailed => "host_auth_failed",
        /// 4111.
        HostDisabled => "host_disabled",
    }
}

/// A connection between hello and identify.
pub(super) struct Pending {
    challenge: [u8; 32],
    server_time: i64,
    jwks: Jwks,
}

fn internal(error: &dyn std::fmt::Display) -> End {
    tracing::warn!(%error, "the control connection login failed internally");
    End::code(CloseCode::UnknownError)
}

impl Pending {
    /// Sends hello: protocol versions, a fresh challenge, the server time, the
    /// heartbeat values and the JWKS of purpose terminal.
    pub(super) async fn hello(connection: &ControlConnection) -> Result<Pending, End> {
        let state = &connection.state;
        let now = state.clock().now_ms();
        crate::terminal::keys::ensure_active(state.db(), state.pepper(), now)
            .await
            .map_err(|e| internal(&e))?;
        let mut conn = state
            .db()
            .pool()
            .acquire()
            .await
            .map_err(|e| internal(&e))?;
        let jwks = crate::terminal::keys::jwks(&mut conn, now)
            .await
            .map_err(|e| internal(&e))?;
        drop(conn);
        let mut challenge = [0u8; 32];
        getrandom::fill(&mut challenge).map_err(|_| internal(&"the random source failed"))?;
        let terminal = &state.config().terminal;
        let hello = Hello {
            protocol_versions: PROTOCOL_VERSIONS.to_vec(),
            challenge,
            server_time: u64::try_from(now).unwrap_or(0),
            heartbeat_interval_ms: u64::try_from(terminal.host_heartbeat_interval.as_millis())
                .unwrap_or(u64::MAX),
            heartbeat_miss_limit: terminal.host_heartbeat_miss_limit,
            jwks: jwks.clone(),
        };
        connection.send(&ServerMessage::Hello(hello))?;
        Ok(Pending {
            challenge,
            server_time: now,
            jwks,
        })
    }

    /// Decides the first frame after hello (steps 1–7).
    pub(super) async fn identify(
        self,
        connection: &mut ControlConnection,
        bytes: &[u8],
        signals: mpsc::Sender<ControlSignal>,
    ) -> Result<LoggedIn, End> {
        let state = connection.state.clone();
        let config = state.config();
        // Step 1.
        let message = HostMessage::decode(bytes, config.sync.ws_max_frame_bytes)
            .map_err(|error| End::Close(error.close_code(), error.close_reason_text()))?;
        let HostMessage::Identify(identify) = message else {
            return Err(End::code(CloseCode::HostAuthFailed));
        };
        // Step 2.
        if !protocol_version_supported(identify.protocol_version) {
            return Err(End::code(CloseCode::HostVersionUnsupported));
        }
        // Step 3.
        identify
            .check_control_shape()
            .map_err(|error| End::code(error.close_code()))?;
        // Step 4, under the rate limits of 6.3.
        let now = state.clock().now_ms();
        channel_limits::gate(&state, connection.client, now).map_err(End::Limited)?;
        let verified = async {
            let mut conn = state
                .db()
                .pool()
                .acquire()
                .await
                .map_err(|e| HostAuthRefusal::Internal(HostError::Db(DbError::from(e))))?;
            host_auth::verify_host_proof(
                &mut conn,
                identify.host_id,
                &identify.proof,
                &self.challenge,
                self.server_time,
                now,
                config.auth.clock_leeway,
            )
            .await
        }
        .await;
        let host = match verified {
            Ok(host) => host,
            Err(refusal) => {
                if matches!(
                    refusal,
                    HostAuthRefusal::Unpaired | HostAuthRefusal::AuthFailed
                ) {
                    channel_limits::charge_failed_check(&state, connection.client, now);
                }
                audit_refusal(connection, identify.host_id, &refusal).await;
                return Err(refusal.into());
            }
        };
        channel_limits::take_host(&state, host.id, now).map_err(End::Limited)?;
        // Step 5.
        if let Err(refusal) = host_auth::check_host_may_connect(&host) {
            audit_refusal(connection, identify.host_id, &refusal).await;
            return Err(refusal.into());
        }
        let auth_jkt = host.auth_jkt.clone().unwrap_or_default();

        // Step 6: the duplicate check, then one unit of work.
        let replaced = duplicate::check(connection, &host).await?;
        let live: HashSet<Uuid> = identify
            .live_sessions
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect();
        let (closes, ended_here) = login_unit_of_work(connection, &identify, &live, replaced)
            .await
            .map_err(|e| internal(&e))?;

        // Step 7.
        let links = state.local_control_links();
        links.register(host.id, connection.conn_id, signals);
        // Its own announcements are not another node's (spec 9).
        state.presence().own_opened(connection.conn_id);
        let fresh = async {
            let mut conn = state
                .db()
                .pool()
                .acquire()
                .await
                .map_err(|e| HostAuthRefusal::Internal(HostError::Db(DbError::from(e))))?;
            let host = hosts::load(&mut conn, host.id)
                .await?
                .ok_or(HostAuthRefusal::Unpaired)?;
            host_auth::check_still_connected(&host, &auth_jkt)?;
            Ok::<_, HostAuthRefusal>(host)
        }
        .await;
        let fresh = match fresh {
            Ok(fresh) => fresh,
            Err(refusal) => {
                links.unregister(host.id, connection.conn_id);
                return Err(refusal.into());
            }
        };
        let sent = connection
            .send(&ServerMessage::Ready(Ready {
                host_id: fresh.id,
                state: fresh.state,
                llm_credentials: fresh.llm_credentials,
            }))
            .and_then(|()| {
                closes.iter().try_for_each(|(session_id, reason)| {
                    connection.send_close(*session_id, *reason)
                })
            });
        if let Err(end) = sent {
            // Not logged in after all (a full queue): no registration stays.
            links.unregister(host.id, connection.conn_id);
            return Err(end);
        }
        Ok(LoggedIn {
            host_id: fresh.id,
            auth_jkt,
            report_applied: false,
            jwks_sent: self.jwks,
            last_seen_written: now,
            ended_here,
        })
    }
}

/// The deny entry of a refused login, for a host that exists.
async fn audit_refusal(connection: &ControlConnection, host_id: Uuid, refusal: &HostAuthRefusal) {
    let denial = match refusal {
        HostAuthRefusal::Unpaired => LoginDenial::HostUnpaired,
        HostAuthRefusal::AuthFailed => LoginDenial::HostAuthFailed,
        HostAuthRefusal::Disabled => LoginDenial::HostDisabled,
        HostAuthRefusal::Internal(_) => return,
    };
    let state = &connection.state;
    let now = state.clock().now_ms();
    let written = async {
        let mut uow = state.db().begin(now).await?;
        let exists = sqlx::query("SELECT id FROM hosts WHERE id = $1")
            .bind(db::id_text(&host_id))
            .fetch_optional(uow.conn())
            .await
            .map_err(DbError::from)?
            .is_some();
        if !exists {
            return Ok(());
        }
        uow.audit(
            AuditEntry::deny(AuditAction::HostConnect, Actor::Host(host_id))
                .target(TargetKind::Host, host_id)
                .details(
                    AuditDetails::new()
                        .id("host_id", host_id)
                        .code("reason_code", denial),
                ),
        );
        uow.commit().await.map(|_| ())
    }
    .await;
    if let Err(error) = written {
        tracing::warn!(%error, "the control connection could not audit a refused login");
    }
}

/// Step 6's unit of work. Returns the session.close frames due right after
/// ready (listed sessions that are closed, unknown or of another host) and
/// the sessions it ended itself.
async fn login_unit_of_work(
    connection: &ControlConnection,
    identify: &Identify,
    live: &HashSet<Uuid>,
    replaced: bool,
) -> Result<(Vec<(Uuid, CloseReason)>, HashSet<Uuid>), HostError> {
    let state = &connection.state;
    let now = state.clock().now_ms();
    let mut uow = state.db().begin(now).await?;
    let host = hosts::load_for_update(&mut uow, identify.host_id).await?;
    let mut ended_here = HashSet::new();

    // The host's session.ended reports this process could not record (the
    // database could not write): the host counts them as reported and names
    // those sessions no more, so they end as reported, not host_restarted
    // (D-356). One the host names as live again is its newer word.
    let unrecorded = state.local_control_links().unrecorded_ends(host.id);
    let mut pending: Vec<_> = unrecorded
        .iter()
        .filter(|(id, _)| !live.contains(id))
        .collect();
    pending.sort_by_key(|(id, _)| **id);
    for (id, reported) in pending {
        let row = sqlx::query("SELECT host_id, state FROM terminal_sessions WHERE id = $1")
            .bind(db::id_text(id))
            .fetch_optional(uow.conn())
            .await
            .map_err(DbError::from)?;
        let Some(row) = row else { continue };
        let state_now: String = row.try_get("state").map_err(DbError::from)?;
        if db::get_uuid(&row, "host_id")? != host.id || state_now == "closed" {
            continue;
        }
        end(
            &mut uow,
            EndScope::Session(*id),
            reported.close_reason,
            reported.close_detail,
        )
        .await
        .map_err(end_error)?;
        ended_here.insert(*id);
    }

    // 6.2: every active or detached session the host no longer names.
    let rows = sqlx::query(
        "SELECT id FROM terminal_sessions WHERE host_id = $1 AND state IN ('active', 'detached') \
         ORDER BY id",
    )
    .bind(db::id_text(&host.id))
    .fetch_all(uow.conn())
    .await
    .map_err(DbError::from)?;
    for row in &rows {
        let id = db::get_uuid(row, "id")?;
        if !live.contains(&id) {
            end(
                &mut uow,
                EndScope::Session(id),
                CloseReason::HostRestarted,
                None,
            )
            .await
            .map_err(end_error)?;
            ended_here.insert(id);
        }
    }

    // Listed sessions the server no longer allows get session.close.
    let mut closes = Vec::new();
    let mut listed: Vec<Uuid> = live.iter().copied().collect();
    listed.sort();
    for id in listed {
        let row =
            sqlx::query("SELECT host_id, state, close_reason FROM terminal_sessions WHERE id = $1")
                .bind(db::id_text(&id))
                .fetch_optional(uow.conn())
                .await
                .map_err(DbError::from)?;
        let reason = match row {
            Some(row) if db::get_uuid(&row, "host_id")? == host.id => {
                let state: String = row.try_get("state").map_err(DbError::from)?;
                if state != "closed" {
                    continue;
                }
                let reason: Option<String> = row.try_get("close_reason").map_err(DbError::from)?;
                reason
                    .and_then(|r| CloseReason::parse(&r).ok())
                    .unwrap_or(CloseReason::AccessRevoked)
            }
            _ => CloseReason::AccessRevoked,
        };
        closes.push((id, reason));
    }

    if host.reported_host_version.as_deref() != Some(identify.host_version.as_str()) {
        sqlx::query("UPDATE hosts SET reported_host_version = $1 WHERE id = $2")
            .bind(identify.host_version.as_str())
            .bind(db::id_text(&host.id))
            .execute(uow.conn())
            .await
            .map_err(DbError::from)?;
        let version = hosts::bump_version(&mut uow, host.id).await?;
        hosts::host_updated(&mut uow, host.id, version, host.state, false);
    }
    sqlx::query("UPDATE hosts SET last_seen_at = $1 WHERE id = $2")
        .bind(now)
        .bind(db::id_text(&host.id))
        .execute(uow.conn())
        .await
        .map_err(DbError::from)?;
    if replaced {
        duplicate::audit_replaced(&mut uow, host.id);
    }
    uow.commit().await?;
    state
        .local_control_links()
        .forget_unrecorded_ends(host.id, unrecorded.into_keys());
    Ok((closes, ended_here))
}

/// An error of the end function inside a host unit of work.
pub(super) fn end_error(error: crate::revocation::EndError) -> HostError {
    match error {
        crate::revocation::EndError::Db(error) => HostError::Db(error),
        crate::revocation::EndError::InvalidPair { .. } => {
            HostError::Stored("terminal_sessions.close_detail")
        }
    }
}
