//! The control connection of a host service, `GET /api/v1/hosts/connect`
//! (spec 24 sections 3.4, 3.5, 6.2, 10.1, 10.2, 13; asyncapi `hostControl`).
//!
//! # Layout
//! - this file: the connection task — the outbound queue and its writer, the
//!   one `select!` loop (shutdown, writer, timers, frames, signals of
//!   [`LocalControlLinks`](crate::terminal::links::LocalControlLinks), the log
//!   tail, probes of a newer connection), the re-authorization of every op and
//!   the loss of the connection;
//! - [`login`]: hello and identify in the numbered order of 3.5, the unit of
//!   work of step 6 (live_sessions reconciliation of 6.2, reported_host_version,
//!   last_seen_at) and ready;
//! - [`duplicate`]: the one-node duplicate check of 3.4 (probe the older
//!   connection with a WebSocket ping; dead → 4009, alive → both 4112 and the
//!   verdict in one unit of work);
//! - [`report`]: the report (validation, only-changed writes, SR12 and SR10
//!   ends, the `host.connect` audit on a change, `connected`);
//! - [`sessions`]: `session.started` and `session.ended`.
//!
//! # Closing
//! | Code | When |
//! |---|---|
//! | 4002 | a frame that fails decoding (binary, invalid JSON, over `sync.ws_max_frame_bytes` with reason `frame_too_large`, unknown op, server op, second identify), identify step 3 |
//! | 4008 | `rl.public_auth` of the client address is empty (before the proof is checked), or `rl.host` of the host (after it); close text `retry_after=<seconds>` ([`crate::terminal::channel_limits`]) |
//! | 4009 | no heartbeat for `host_heartbeat_interval × (miss_limit + 1)`; an older connection that did not answer the duplicate probe |
//! | 4013 | shutdown |
//! | 4014 | the outbound queue (`sync.outbound_queue_max`) is full, or a write missed `gateway.write_timeout` |
//! | 4110 / 4111 / 4113 / 4114 / 4112 | the login (3.5 steps 1–5), a later op whose host.connect check fails, a state change of the host ([`host_close`]), a live duplicate |
//! | 4000 | an internal error |
//!
//! Before the close frame the frames already queued are written (at most
//! `gateway.write_timeout` in all), so a `session.close` queued before a
//! state change's close reaches the host first; a 4014 closes at once.
//!
//! # Timers
//! The deadlines of the connection — `terminal.host_auth_timeout` after hello
//! and the heartbeat deadline — are instants of the server's clock
//! ([`crate::clock::Clock`]), looked at every [`TICK`], so a test moves the
//! clock instead of waiting (docs/decisions.md D-87). The duplicate probe
//! waits for a network answer and stays a tokio timeout.
//!
//! # A state change of the host (spec 9 `terminal.host_close`)
//! Every transition that may end the host's login — out of active, a
//! re-pairing, the fallback of the confirmation, the duplicate verdict —
//! writes `host.updated` in its unit of work, after the ends of the host's
//! sessions. The connection follows the log tail: on a `host.updated` of its
//! host it reads the host and closes with the code of the state read now
//! (4110 keys dropped or replaced, 4111 disabled or retired, 4112 disabled
//! with `duplicate_connection`); a host that may stay connected keeps it. The
//! `session.close` of those ends come earlier in the same tail, so the host
//! service hears them before the close (docs/decisions.md D-87). While this
//! node's duplicate verdict of the host runs, the verdict closes the older
//! connection itself with 4112.
//!
//! # session.close for sessions that end while connected
//! The connection subscribes to the log tail before its login unit of work and
//! sends `session.close {session_id, close_reason}` for every committed
//! `terminal_session.changed` with `state = closed` of its host — whoever ended
//! it (one end function, every caller) and on whichever node (the tail reads
//! the table). Ends this connection caused itself (a `session.ended` of the
//! host, `host_restarted` of the reconciliation) are not echoed: the host knows
//! them already (docs/decisions.md D-62). [`ControlSignal::SessionClose`] is
//! forwarded as well, for callers that want to say it directly.

pub mod duplicate;
pub mod login;
mod report;
mod sessions;

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, WebSocket};
use bothy_proto::codes::{CloseCode, CloseReason};
use bothy_proto::control::{
    ErrorCode, HeartbeatAck, HostMessage, HostOp, OpError, Ready, ServerMessage, SessionClose,
};
use bothy_proto::jwk::Jwks;
use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Map, json};
use tokio::sync::{mpsc, oneshot};
use uuid::Uuid;

use crate::clock::{UnixMillis, millis};
use crate::db;
use crate::events::{
    Audience, Delivery, EphemeralEvent, EphemeralKind, EventKind, EventsError, Subscription,
};
use crate::hosts::{self, Host};
use crate::ratelimit::RetryAfter;
use crate::shutdown::{CLOSE_ANSWER_WAIT, ShutdownGuard};
use crate::state::AppState;
use crate::terminal::channel_limits;
use crate::terminal::host_auth::{self, HostAuthRefusal};
use crate::terminal::links::ControlSignal;
use crate::terminal::relay::TICK;
use crate::terminal::signals::{self, Signal};

/// What one connection task can be asked by another connection of the same
/// host on this node (3.4): answer a probe, or close.
#[derive(Debug)]
enum ConnCommand {
    /// Send a WebSocket ping; answer on the sender when its pong arrives.
    Probe(oneshot::Sender<()>),
    /// Close with this code. `superseded`: a newer connection of the host takes
    /// over, so this one neither detaches the host's sessions nor announces
    /// `connected = false`.
    Close {
        /// The code.
        code: CloseCode,
        /// A newer connection replaces this one.
        superseded: bool,
    },
}

/// The command channels of the connections of this process, by connection ID
/// (UUIDv7, unique per process and across test servers in one process). The
/// registry of [`LocalControlLinks`](crate::terminal::links::LocalControlLinks)
/// says which connection a host has; this says how to reach that connection's
/// task for the probe (docs/decisions.md D-61).
static COMMANDS: LazyLock<Mutex<HashMap<Uuid, mpsc::Sender<ConnCommand>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

fn command_sender(conn_id: Uuid) -> Option<mpsc::Sender<ConnCommand>> {
    let commands = COMMANDS.lock().unwrap_or_else(|p| p.into_inner());
    commands.get(&conn_id).cloned()
}

/// Removes the connection's command channel when the task ends.
struct CommandSlot(Uuid);

impl CommandSlot {
    fn new(conn_id: Uuid, sender: mpsc::Sender<ConnCommand>) -> CommandSlot {
        let mut commands = COMMANDS.lock().unwrap_or_else(|p| p.into_inner());
        commands.insert(conn_id, sender);
        CommandSlot(conn_id)
    }
}

impl Drop for CommandSlot {
    fn drop(&mut self) {
        let mut commands = COMMANDS.lock().unwrap_or_else(|p| p.into_inner());
        commands.remove(&self.0);
    }
}

/// How the loop ended.
#[derive(Debug, Clone, PartialEq, Eq)]
enum End {
    /// The server closes with this code and reason text.
    Close(CloseCode, Option<&'static str>),
    /// A rate limit of 6.3 is empty: 4008 with `retry_after=<seconds>`.
    Limited(RetryAfter),
    /// The host sent its close frame.
    ClosedByHost,
    /// The connection broke.
    Gone,
}

impl End {
    fn code(code: CloseCode) -> End {
        End::Close(code, None)
    }
}

impl From<HostAuthRefusal> for End {
    fn from(refusal: HostAuthRefusal) -> Self {
        if let HostAuthRefusal::Internal(error) = &refusal {
            tracing::warn!(%error, "the control connection cannot read its host");
        }
        End::code(refusal.close_code())
    }
}

/// How the writer ended.
enum WriterEnd {
    Stalled,
    Broken,
}

/// The logged-in part of a connection (after ready).
#[derive(Debug)]
struct LoggedIn {
    host_id: Uuid,
    /// `hosts.auth_jkt` at the login: a different one later is a re-pairing (4110).
    auth_jkt: String,
    /// The first report after ready was applied (the host counts as connected).
    report_applied: bool,
    /// The JWKS last sent (hello or heartbeat_ack).
    jwks_sent: Jwks,
    /// When `last_seen_at` was last written (server clock).
    last_seen_written: i64,
    /// Sessions this connection ended itself (not echoed as session.close).
    ended_here: HashSet<Uuid>,
}

/// One control connection.
#[derive(Debug)]
struct ControlConnection {
    state: AppState,
    guard: ShutdownGuard,
    conn_id: Uuid,
    /// The client's address (the key of `rl.public_auth`, 6.3).
    client: IpAddr,
    queue: mpsc::Sender<Message>,
    /// Set when a newer connection of the host took over (3.4).
    superseded: bool,
    /// The pending duplicate probe of a newer connection, with the ping payload.
    probe: Option<(Vec<u8>, oneshot::Sender<()>)>,
}

/// Runs the control connection of `client` on an upgraded socket. `guard`
/// was taken before the upgrade (so a shutdown in between still closes it
/// with 4013).
pub async fn serve(state: AppState, guard: ShutdownGuard, websocket: WebSocket, client: IpAddr) {
    let now = state.clock().now_ms();
    let conn_id = match bothy_proto::ids::uuid_v7(u64::try_from(now).unwrap_or(0)) {
        Ok(id) => id,
        Err(_) => return,
    };
    let write_timeout = state.config().gateway.write_timeout;
    let (queue, mut outbound) = mpsc::channel::<Message>(state.config().sync.outbound_queue_max);
    let (signal_tx, mut signals) =
        mpsc::channel::<ControlSignal>(state.config().sync.outbound_queue_max);
    let (command_tx, mut commands) = mpsc::channel::<ConnCommand>(8);
    let _slot = CommandSlot::new(conn_id, command_tx);
    let (mut sink, mut stream) = websocket.split();
    let mut connection = ControlConnection {
        state: state.clone(),
        guard,
        conn_id,
        client,
        queue,
        superseded: false,
        probe: None,
    };

    let mut logged_in: Option<LoggedIn> = None;
    let mut subscription: Option<Subscription> = None;
    let mut login = match login::Pending::hello(&connection).await {
        Ok(pending) => Some(pending),
        Err(end) => {
            finish(&mut sink, &mut stream, &mut outbound, end, write_timeout).await;
            return;
        }
    };
    let auth_timeout = millis(state.config().terminal.host_auth_timeout);
    let mut deadline = state.clock().now_ms().saturating_add(auth_timeout);
    // The deadlines are on the server's clock: one look every TICK.
    let mut ticks = tokio::time::interval(TICK);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);

    let end = {
        let writer = write_queue(&mut sink, &mut outbound, write_timeout);
        tokio::pin!(writer);
        loop {
            let is_in = logged_in.is_some();
            tokio::select! {
                biased;
                () = connection.guard.triggered() => break End::code(CloseCode::ServerShutdown),
                ended = &mut writer => break match ended {
                    WriterEnd::Stalled => End::code(CloseCode::SlowConsumer),
                    WriterEnd::Broken => End::Gone,
                },
                _ = ticks.tick() => {
                    if state.clock().now_ms() >= deadline {
                        break End::code(if is_in {
                            CloseCode::HeartbeatTimeout
                        } else {
                            CloseCode::HostAuthFailed
                        });
                    }
                }
                command = commands.recv() => match command {
                    Some(ConnCommand::Probe(answer)) => {
                        let payload = conn_id.as_bytes().to_vec();
                        if connection.push(Message::Ping(payload.clone().into())).is_err() {
                            break End::code(CloseCode::SlowConsumer);
                        }
                        connection.probe = Some((payload, answer));
                    }
                    Some(ConnCommand::Close { code, superseded }) => {
                        connection.superseded = superseded;
                        break End::code(code);
                    }
                    None => {}
                },
                signal = signals.recv(), if is_in => {
                    let Some(signal) = signal else { continue };
                    let Some(session) = logged_in.as_mut() else { continue };
                    let result = if signal == ControlSignal::CheckHost {
                        connection.catch_up_and_check(session, &mut subscription).await
                    } else {
                        connection.on_signal(session, signal).await
                    };
                    if let Err(end) = result {
                        break end;
                    }
                }
                delivery = next_delivery(&mut subscription), if is_in => {
                    let Some(session) = logged_in.as_ref() else { continue };
                    if let Err(end) = connection.on_delivery(session, delivery).await {
                        break end;
                    }
                }
                frame = stream.next() => match frame {
                    Some(Ok(Message::Text(text))) => {
                        if let Some(session) = logged_in.as_mut() {
                            match connection.on_op(session, text.as_bytes()).await {
                                Ok(Some(next_deadline)) => deadline = next_deadline,
                                Ok(None) => {}
                                Err(end) => break end,
                            }
                        } else if let Some(pending) = login.take() {
                            // Subscribed before the login's unit of work: no
                            // end committed from there on is missed.
                            subscription = Some(
                                state.events().subscribe_from(state.events().position()),
                            );
                            match pending.identify(&mut connection, text.as_bytes(), signal_tx.clone()).await {
                                Ok(session) => {
                                    deadline = connection.heartbeat_deadline();
                                    logged_in = Some(session);
                                }
                                Err(end) => break end,
                            }
                        }
                    }
                    Some(Ok(Message::Binary(_))) => break End::code(CloseCode::InvalidMessage),
                    Some(Ok(Message::Pong(payload))) => {
                        if connection.probe.as_ref().is_some_and(|(sent, _)| sent.as_slice() == payload.as_ref()) {
                            if let Some((_, answer)) = connection.probe.take() {
                                let _ = answer.send(());
                            }
                        }
                    }
                    Some(Ok(Message::Ping(_))) => {}
                    Some(Ok(Message::Close(_))) => break End::ClosedByHost,
                    None => break End::Gone,
                    Some(Err(error)) => break frame_error(&error),
                },
            }
        }
    };

    if let Some(session) = logged_in.as_ref() {
        connection.lost(session, &end).await;
    }
    drop(subscription);
    finish(&mut sink, &mut stream, &mut outbound, end, write_timeout).await;
    drop(connection);
}

/// The close of a frame the WebSocket layer refused: over the size limit is
/// `frame_too_large`, anything else a broken frame; 4002 either way.
fn frame_error(error: &axum::Error) -> End {
    let text = error.to_string();
    if text.contains("too long") || text.contains("too big") || text.contains("Space limit") {
        End::Close(
            CloseCode::InvalidMessage,
            Some(bothy_proto::control::FRAME_TOO_LARGE),
        )
    } else {
        End::code(CloseCode::InvalidMessage)
    }
}

async fn next_delivery(subscription: &mut Option<Subscription>) -> Result<Delivery, EventsError> {
    match subscription {
        Some(subscription) => subscription.recv().await,
        None => std::future::pending().await,
    }
}

impl ControlConnection {
    /// Queues a frame; a full queue is 4014.
    fn push(&self, message: Message) -> Result<(), End> {
        self.queue
            .try_send(message)
            .map_err(|_| End::code(CloseCode::SlowConsumer))
    }

    /// Queues a server message.
    fn send(&self, message: &ServerMessage) -> Result<(), End> {
        self.push(Message::text(message.to_json()))
    }

    fn send_close(&self, session_id: Uuid, close_reason: CloseReason) -> Result<(), End> {
        self.send(&ServerMessage::SessionClose(SessionClose {
            session_id,
            close_reason,
        }))
    }

    fn send_error(&self, op: HostOp, code: ErrorCode, session_id: Option<Uuid>) -> Result<(), End> {
        self.send(&ServerMessage::Error(OpError {
            op,
            code,
            session_id,
            errors: None,
        }))
    }

    /// `heartbeat_interval × (miss_limit + 1)` from now (3.5 "Heartbeat"), on
    /// the server's clock.
    fn heartbeat_deadline(&self) -> UnixMillis {
        let terminal = &self.state.config().terminal;
        let misses = terminal.host_heartbeat_miss_limit.saturating_add(1);
        self.state.clock().now_ms().saturating_add(millis(
            terminal.host_heartbeat_interval.saturating_mul(misses),
        ))
    }

    /// Every later op authorizes host.connect again (3.5): the host as stored
    /// now, still with the login key of this connection.
    async fn reauthorize(&self, session: &LoggedIn) -> Result<Host, End> {
        let mut conn = self.state.db().pool().acquire().await.map_err(|error| {
            tracing::warn!(%error, "the control connection cannot reach the database");
            End::code(CloseCode::UnknownError)
        })?;
        let host = hosts::load(&mut conn, session.host_id)
            .await
            .map_err(HostAuthRefusal::from)?
            .ok_or(HostAuthRefusal::Unpaired)?;
        host_auth::check_still_connected(&host, &session.auth_jkt)?;
        Ok(host)
    }

    /// One frame after ready. Returns the new heartbeat deadline after a heartbeat.
    async fn on_op(
        &mut self,
        session: &mut LoggedIn,
        bytes: &[u8],
    ) -> Result<Option<UnixMillis>, End> {
        let max = self.state.config().sync.ws_max_frame_bytes;
        let message = HostMessage::decode(bytes, max)
            .map_err(|error| End::Close(error.close_code(), error.close_reason_text()))?;
        let host = self.reauthorize(session).await?;
        match message {
            HostMessage::Identify(_) => Err(End::code(CloseCode::InvalidMessage)),
            HostMessage::Report(report) => {
                report::apply(self, session, &host, &report).await?;
                Ok(None)
            }
            HostMessage::Heartbeat(_) => {
                self.heartbeat(session, &host).await?;
                Ok(Some(self.heartbeat_deadline()))
            }
            HostMessage::SessionStarted(started) => {
                sessions::started(self, session, started.session_id).await?;
                Ok(None)
            }
            HostMessage::SessionEnded(ended) => {
                sessions::ended(self, session, &ended).await?;
                Ok(None)
            }
        }
    }

    /// heartbeat → heartbeat_ack (with the JWKS when it changed since the last
    /// one sent); `last_seen_at` when older than identity.last_active_granularity.
    async fn heartbeat(&self, session: &mut LoggedIn, host: &Host) -> Result<(), End> {
        let now = self.state.clock().now_ms();
        let internal = |error: &dyn std::fmt::Display| {
            tracing::warn!(%error, "the control connection cannot answer a heartbeat");
            End::code(CloseCode::UnknownError)
        };
        let mut conn = self
            .state
            .db()
            .pool()
            .acquire()
            .await
            .map_err(|e| internal(&e))?;
        let jwks = crate::terminal::keys::jwks(&mut conn, now)
            .await
            .map_err(|e| internal(&e))?;
        drop(conn);
        let changed = jwks != session.jwks_sent;
        let granularity = i64::try_from(
            self.state
                .config()
                .identity
                .last_active_granularity
                .as_millis(),
        )
        .unwrap_or(i64::MAX);
        let last = host
            .last_seen_at
            .unwrap_or(i64::MIN)
            .max(session.last_seen_written);
        if now.saturating_sub(last) >= granularity {
            // `last_seen_at` is a hint of presence: a database that cannot
            // write now does not end the host's connection (no 4000 flapping
            // while it recovers); the next heartbeat tries again.
            let written = async {
                let mut uow = self.state.db().begin(now).await?;
                sqlx::query("UPDATE hosts SET last_seen_at = $1 WHERE id = $2")
                    .bind(now)
                    .bind(db::id_text(&host.id))
                    .execute(uow.conn())
                    .await?;
                uow.commit().await.map(|_| ())
            }
            .await;
            match written {
                Ok(()) => session.last_seen_written = now,
                Err(error) => tracing::warn!(
                    error = %error,
                    "the control connection cannot write last_seen_at; it tries again at the \
                     next heartbeat"
                ),
            }
        }
        self.send(&ServerMessage::HeartbeatAck(HeartbeatAck {
            server_time: u64::try_from(now).unwrap_or(0),
            jwks: changed.then(|| jwks.clone()),
        }))?;
        if changed {
            session.jwks_sent = jwks;
        }
        if session.report_applied {
            self.announce(session).await;
        }
        Ok(())
    }

    /// Spec 9 `terminal.host_present` (outside any unit of work): after the
    /// first report and after each heartbeat, so a lost announcement is
    /// repeated. A failure is logged; the next heartbeat tries again.
    async fn announce(&self, session: &LoggedIn) {
        let present = Signal::HostPresent {
            host_id: session.host_id,
            conn_id: self.conn_id,
        };
        if let Err(error) = signals::send(self.state.db(), &present).await {
            tracing::warn!(%error, "the control connection could not announce itself");
        }
    }

    /// A signal from another part of the server.
    async fn on_signal(&self, session: &mut LoggedIn, signal: ControlSignal) -> Result<(), End> {
        match signal {
            ControlSignal::SessionOpen(open) => self.send(&ServerMessage::SessionOpen(open)),
            ControlSignal::SessionClose(close) => self.send(&ServerMessage::SessionClose(close)),
            ControlSignal::ReadyAgain => {
                let host = self.reauthorize(session).await?;
                self.send(&ServerMessage::Ready(Ready {
                    host_id: host.id,
                    state: host.state,
                    llm_credentials: host.llm_credentials,
                }))
            }
            ControlSignal::Close(code) => Err(End::code(code)),
            ControlSignal::CheckHost => self.check_host(session).await,
        }
    }

    /// Spec 9 `terminal.host_close` (and the listener's reconciliation): first
    /// the deliveries of the log tail up to the log's end as committed now, so
    /// the `session.close` of the ends of the same transaction go out before
    /// the close (D-87, D-500); then the host as read now decides.
    async fn catch_up_and_check(
        &self,
        session: &LoggedIn,
        subscription: &mut Option<Subscription>,
    ) -> Result<(), End> {
        if let Some(subscription) = subscription.as_mut() {
            match crate::events::last_position(self.state.db()).await {
                Ok(end) => {
                    while subscription.position() < end {
                        let delivery = subscription.recv().await;
                        self.on_delivery(session, delivery).await?;
                    }
                }
                Err(error) => {
                    tracing::warn!(%error, "the control connection cannot read the event log");
                    return Err(End::code(CloseCode::UnknownError));
                }
            }
        }
        self.check_host(session).await
    }

    /// The close of a host that may no longer be connected, unless this
    /// node's duplicate verdict of the host runs (it closes itself).
    async fn check_host(&self, session: &LoggedIn) -> Result<(), End> {
        if self
            .state
            .local_control_links()
            .verdict_running(session.host_id)
        {
            return Ok(());
        }
        self.host_close_check(session).await
    }

    /// A delivery of the log tail: session.close for a closed session of this
    /// host that this connection did not end itself; after a `host.updated`
    /// of this host, the close of a host that may no longer be connected
    /// (see the module docs).
    async fn on_delivery(
        &self,
        session: &LoggedIn,
        delivery: Result<Delivery, EventsError>,
    ) -> Result<(), End> {
        let event = match delivery {
            Ok(Delivery::Durable(event)) => event,
            Ok(Delivery::Ephemeral(_)) => return Ok(()),
            Err(EventsError::TailStopped) => return Err(End::code(CloseCode::ServerShutdown)),
            Err(EventsError::Db(error)) => {
                tracing::warn!(%error, "the control connection cannot read the event log");
                return Err(End::code(CloseCode::UnknownError));
            }
        };
        let payload = &event.payload;
        let field = |name: &str| payload.get(name).and_then(|v| v.as_str());
        if event.kind == EventKind::HostUpdated {
            if field("host_id") != Some(db::id_text(&session.host_id).as_str())
                || self
                    .state
                    .local_control_links()
                    .verdict_running(session.host_id)
            {
                return Ok(());
            }
            return self.host_close_check(session).await;
        }
        if event.kind != EventKind::TerminalSessionChanged {
            return Ok(());
        }
        if field("state") != Some("closed")
            || field("host_id") != Some(db::id_text(&session.host_id).as_str())
        {
            return Ok(());
        }
        let (Some(id), Some(reason)) = (
            field("session_id").and_then(|id| bothy_proto::ids::parse_uuid(id).ok()),
            field("close_reason").and_then(|r| CloseReason::parse(r).ok()),
        ) else {
            return Ok(());
        };
        if session.ended_here.contains(&id) {
            return Ok(());
        }
        self.send_close(id, reason)
    }

    /// After a committed change of the host: the close of 9
    /// `terminal.host_close` with the code of the state read now, if the host
    /// may no longer be connected with this login.
    async fn host_close_check(&self, session: &LoggedIn) -> Result<(), End> {
        let mut conn = self.state.db().pool().acquire().await.map_err(|error| {
            tracing::warn!(%error, "the control connection cannot reach the database");
            End::code(CloseCode::UnknownError)
        })?;
        let host = hosts::load(&mut conn, session.host_id)
            .await
            .map_err(HostAuthRefusal::from)?;
        drop(conn);
        match host {
            Some(host) => host_close_code(&host, &session.auth_jkt)
                .map_or(Ok(()), |code| Err(End::code(code))),
            None => Err(End::code(CloseCode::HostUnpaired)),
        }
    }

    /// The connection ended after ready: unregister, `connected = false`, and
    /// unless a state change of the host closed it (4110, 4111, 4112) or a
    /// newer connection took over, every active session of the host becomes
    /// detached (3.5 "Loss and shutdown").
    async fn lost(&self, session: &LoggedIn, end: &End) {
        let links = self.state.local_control_links();
        let was_registered = links.unregister(session.host_id, self.conn_id);
        if session.report_applied {
            self.state.metrics().control_hosts_connected().dec();
        }
        self.state
            .presence()
            .own_closed(self.conn_id, self.state.clock().now_ms());
        if session.report_applied {
            // Spec 9 `terminal.host_gone`: every node removes this entry.
            let gone = Signal::HostGone {
                host_id: session.host_id,
                conn_id: self.conn_id,
            };
            if let Err(error) = signals::send(self.state.db(), &gone).await {
                tracing::warn!(%error, "the control connection could not withdraw itself");
            }
        }
        if !was_registered || self.superseded {
            return;
        }
        let now = self.state.clock().now_ms();
        let state_change = matches!(
            end,
            End::Close(
                CloseCode::HostUnpaired | CloseCode::HostDisabled | CloseCode::HostDuplicate,
                _
            )
        );
        let result = async {
            let mut uow = self.state.db().begin(now).await?;
            if session.report_applied {
                uow.ephemeral(presence(session.host_id, false));
            }
            if !state_change {
                sessions::detach_active(&mut uow, session.host_id).await?;
            }
            uow.commit().await.map(|_| ())
        }
        .await;
        if let Err(error) = result {
            tracing::warn!(%error, "the control connection could not record its loss");
        }
    }
}

/// `host.presence_changed {host_id, connected}` to everyone with host.read.
pub(crate) fn presence(host_id: Uuid, connected: bool) -> EphemeralEvent {
    let mut payload = Map::new();
    payload.insert("host_id".into(), json!(db::id_text(&host_id)));
    payload.insert("connected".into(), json!(connected));
    EphemeralEvent::new(
        EphemeralKind::HostPresenceChanged,
        Audience::HostReaders(host_id),
        payload,
    )
}

/// The close code of 9 `terminal.host_close` for a connection logged in with
/// `login_jkt`: 4112 for a host disabled with `duplicate_connection`, else
/// the code of the host.connect check ([`host_auth::check_still_connected`]:
/// 4110 keys dropped or replaced, 4111 disabled or retired); `None` while the
/// host may stay connected.
fn host_close_code(host: &Host, login_jkt: &str) -> Option<CloseCode> {
    if host.state == crate::hosts::HostState::Disabled
        && host.disabled_reason == Some(crate::hosts::DisabledReason::DuplicateConnection)
    {
        return Some(CloseCode::HostDuplicate);
    }
    host_auth::check_still_connected(host, login_jkt)
        .err()
        .map(|refusal| refusal.close_code())
}

/// Writes the queue to the socket, each message under `gateway.write_timeout`.
async fn write_queue(
    sink: &mut SplitSink<WebSocket, Message>,
    outbound: &mut mpsc::Receiver<Message>,
    write_timeout: Duration,
) -> WriterEnd {
    while let Some(message) = outbound.recv().await {
        match tokio::time::timeout(write_timeout, sink.send(message)).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => return WriterEnd::Broken,
            Err(_) => return WriterEnd::Stalled,
        }
    }
    WriterEnd::Broken
}

/// Says goodbye as `end` asks: the frames still queued first (at most
/// `write_timeout` in all; not for a slow consumer, whose queue is the
/// problem), then the close frame, then waits for the host's.
async fn finish(
    sink: &mut SplitSink<WebSocket, Message>,
    stream: &mut SplitStream<WebSocket>,
    outbound: &mut mpsc::Receiver<Message>,
    end: End,
    write_timeout: Duration,
) {
    let (code, reason) = match end {
        End::Close(code, reason) => (code, reason.unwrap_or(code.name()).to_owned()),
        End::Limited(retry) => (CloseCode::RateLimited, channel_limits::close_text(retry)),
        End::ClosedByHost => return read_to_end(stream, CLOSE_ANSWER_WAIT).await,
        End::Gone => return,
    };
    if code != CloseCode::SlowConsumer {
        let drained = tokio::time::timeout(write_timeout, async {
            while let Ok(message) = outbound.try_recv() {
                sink.send(message).await?;
            }
            Ok::<(), axum::Error>(())
        })
        .await;
        if !matches!(drained, Ok(Ok(()))) {
            return;
        }
    }
    let frame = Message::Close(Some(CloseFrame {
        code: code.as_u16(),
        reason: reason.into(),
    }));
    if let Ok(Ok(())) = tokio::time::timeout(write_timeout, sink.send(frame)).await {
        read_to_end(stream, CLOSE_ANSWER_WAIT).await;
    }
}

async fn read_to_end(stream: &mut SplitStream<WebSocket>, limit: Duration) {
    let _ = tokio::time::timeout(limit, async {
        while let Some(Ok(_)) = stream.next().await {}
    })
    .await;
}
