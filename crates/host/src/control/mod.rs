//! The control connection (3.5, "Host service" paragraph): exactly one outgoing
//! `wss://<server>/api/v1/hosts/connect`. The host service reads `hello`, picks
//! the highest protocol version both sides speak (none: "update the host service
//! or the server" and stop), sends `identify` with the proof and
//! `live_sessions`, takes `ready` (the declaration, D-M2-42-15), sends `report`
//! before it accepts any `session.open`, then heartbeats, session reports and
//! the server's `session.open` / `session.close`.
//!
//! The reaction per close code is exactly the list of 3.5: 1000, 1001, 4000,
//! 4002, 4009, 4014, 4113 and any unknown code reconnect with backoff (full
//! jitter, reset after `ready`); 4013 after a random delay below the base; 4008
//! after the `retry_after` of the close text, else the cap; 4111 ends every PTY
//! and waits the cap before each attempt; 4110, 4112 and 4114 end every PTY and
//! stop the service with the exit code of a refused start (78).
//!
//! # Layout
//! - [`backoff`]: the delays.
//! - [`outbox`]: [`ControlHandle`], the way of the sessions' reports to the
//!   server, which the service's [`Host`] holds.

pub mod backoff;
pub mod outbox;

use std::sync::Arc;
use std::time::Duration;

use bothy_net::ServerSocket;
use bothy_proto::codes::CloseCode;
use bothy_proto::control::{Heartbeat, HostMessage, Identify, Ready, ServerMessage};
use bothy_proto::jws::HostAuthClaims;
use bothy_proto::report::Report;
use futures_util::{SinkExt, StreamExt};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode as WsCloseCode;

use self::backoff::{Backoff, retry_after};
pub use self::outbox::ControlHandle;
use crate::EXIT_REFUSED_START;
use crate::host::Host;

/// The path of the control connection.
pub const CONNECT_PATH: &str = "/api/v1/hosts/connect";

/// The protocol versions this host service speaks.
pub const PROTOCOL_VERSIONS: &[u32] = &[1];

/// Largest frame read on the control connection.
const MAX_MESSAGE: usize = 1 << 20;

/// How long the host waits for `hello` and `ready`.
const LOGIN_TIMEOUT: Duration = Duration::from_secs(30);

/// How one connection ended.
#[derive(Debug)]
enum Ended {
    /// The server closed with this code and text.
    Closed(u16, String),
    /// The connection broke, or could not be opened, or timed out.
    Lost,
    /// The service stops with this exit code.
    Stop(i32),
}

/// Keeps the control connection until the service stops; returns the exit code.
pub async fn run(host: Arc<Host>, mut shutdown: watch::Receiver<bool>) -> i32 {
    let config = &host.config;
    let mut backoff = Backoff::new(config.reconnect_backoff_base, config.reconnect_backoff_cap);
    let mut delay = Duration::ZERO;
    let mut connected_before = false;
    loop {
        tokio::select! {
            _ = shutdown.wait_for(|stop| *stop) => return 0,
            () = tokio::time::sleep(delay) => {}
        }
        let ended = connection(&host, &mut backoff, &mut shutdown, &mut connected_before).await;
        if let Ended::Closed(code, reason) = &ended {
            tracing::info!(close_code = *code, close_reason = %reason, "the server closed the control connection");
        }
        delay = match ended {
            Ended::Stop(code) => return code,
            Ended::Lost => backoff.next_delay(),
            Ended::Closed(code, reason) => match CloseCode::from_u16(code) {
                Ok(
                    CloseCode::HostUnpaired
                    | CloseCode::HostDuplicate
                    | CloseCode::HostVersionUnsupported,
                ) => {
                    tracing::error!(
                        close_code = code,
                        "the server refuses this host; the service stops (run bothy-host pair again or update it)"
                    );
                    host.sessions.kill_all();
                    return EXIT_REFUSED_START;
                }
                Ok(CloseCode::HostDisabled) => {
                    tracing::warn!(
                        close_code = code,
                        "the host is disabled or retired; every PTY ends"
                    );
                    host.sessions.kill_all();
                    backoff.cap()
                }
                Ok(CloseCode::ServerShutdown) => backoff.below_base(),
                Ok(CloseCode::RateLimited) => retry_after(&reason).unwrap_or(backoff.cap()),
                _ => backoff.next_delay(),
            },
        };
        tracing::info!(
            delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
            "reconnecting"
        );
    }
}

/// One control connection from the upgrade to its end.
async fn connection(
    host: &Arc<Host>,
    backoff: &mut Backoff,
    shutdown: &mut watch::Receiver<bool>,
    connected_before: &mut bool,
) -> Ended {
    let (ws, peer) = match host
        .connector
        .websocket(&host.server, CONNECT_PATH, MAX_MESSAGE)
        .await
    {
        Ok(connected) => connected,
        Err(error) => {
            tracing::warn!(%error, "the control connection could not be opened");
            return Ended::Lost;
        }
    };
    host.set_control_peer(peer.direct_peer.map(|a| a.ip()));
    let (mut tx, mut rx) = ws.split();
    let login = login(host, &mut rx, &mut tx, false).await;
    let (ready, hello_interval, miss_limit) = match login {
        Ok(done) => done,
        Err(ended) => return ended,
    };
    backoff.reset();
    // Issue 16 item 14: a successful (re)connection in the log, IDs only.
    if std::mem::replace(connected_before, true) {
        tracing::info!(host_id = %host.host_id, "reconnected to the server");
    } else {
        tracing::info!(host_id = %host.host_id, "connected to the server");
    }
    host.apply_ready(&ready).await;
    // report before any session.open is accepted (3.5).
    if send(&mut tx, &HostMessage::Report(host.report().await))
        .await
        .is_err()
    {
        return Ended::Lost;
    }
    let (mut outbox, queued) = host.control.attach();
    let mut unsent: Vec<HostMessage> = Vec::new();
    for (i, message) in queued.iter().enumerate() {
        if send(&mut tx, message).await.is_err() {
            unsent.extend(queued[i..].iter().cloned());
            host.control.detach(outbox, unsent);
            return Ended::Lost;
        }
    }
    let interval = Duration::from_millis(hello_interval.max(1));
    let dead_after = interval.saturating_mul(miss_limit.saturating_add(1));
    let mut last_frame = Instant::now();
    let mut heartbeat = tokio::time::interval_at(Instant::now() + interval, interval);
    let ended = loop {
        tokio::select! {
            _ = shutdown.wait_for(|stop| *stop) => {
                if host.is_refused() {
                    // A refused start during operation: the result first (2.2).
                    let _ = send(&mut tx, &HostMessage::Report(host.report().await)).await;
                    host.sessions.kill_all();
                }
                close(&mut tx, 1000, "shutdown").await;
                break Ended::Stop(0);
            }
            frame = rx.next() => {
                last_frame = Instant::now();
                match frame {
                    Some(Ok(Message::Text(text))) => {
                        match ServerMessage::decode(text.as_bytes(), MAX_MESSAGE) {
                            Ok(message) => handle(host, message).await,
                            Err(error) => {
                                tracing::warn!(%error, "a control frame of the server does not decode");
                                close(&mut tx, CloseCode::InvalidMessage.as_u16(), "invalid_message").await;
                                break Ended::Lost;
                            }
                        }
                    }
                    Some(Ok(Message::Close(frame))) => {
                        let (code, reason) = frame
                            .map(|f| (u16::from(f.code), f.reason.to_string()))
                            .unwrap_or((1005, String::new()));
                        break Ended::Closed(code, reason);
                    }
                    Some(Ok(Message::Binary(_))) => {
                        close(&mut tx, CloseCode::InvalidMessage.as_u16(), "invalid_message").await;
                        break Ended::Lost;
                    }
                    Some(Ok(_)) => {}
                    Some(Err(_)) | None => break Ended::Lost,
                }
            }
            message = outbox.recv() => {
                let Some(message) = message else { break Ended::Lost };
                if send(&mut tx, &message).await.is_err() {
                    unsent.push(message);
                    break Ended::Lost;
                }
            }
            () = host.control.report_needed.notified() => {
                if send(&mut tx, &HostMessage::Report(host.report().await)).await.is_err() {
                    break Ended::Lost;
                }
            }
            _ = heartbeat.tick() => {
                let active = u32::try_from(host.sessions.active_count()).unwrap_or(u32::MAX);
                let beat = HostMessage::Heartbeat(Heartbeat { active_sessions: active });
                if send(&mut tx, &beat).await.is_err() {
                    break Ended::Lost;
                }
            }
            () = tokio::time::sleep_until(last_frame + dead_after) => {
                tracing::warn!("no frame of the server within the heartbeat window: the connection counts as dead");
                break Ended::Lost;
            }
        }
    };
    host.control.detach(outbox, unsent);
    host.set_control_peer(None);
    ended
}

type Tx = futures_util::stream::SplitSink<ServerSocket, Message>;
type Rx = futures_util::stream::SplitStream<ServerSocket>;

/// hello, identify, ready. `refused`: the login of a refused start (empty
/// `live_sessions`).
async fn login(
    host: &Arc<Host>,
    rx: &mut Rx,
    tx: &mut Tx,
    refused: bool,
) -> Result<(Ready, u64, u32), Ended> {
    let hello = match next_server_message(rx, LOGIN_TIMEOUT).await? {
        ServerMessage::Hello(hello) => hello,
        _ => return Err(Ended::Lost),
    };
    let Some(version) = PROTOCOL_VERSIONS
        .iter()
        .rev()
        .find(|v| hello.protocol_versions.contains(v))
    else {
        tracing::error!("no common protocol version: update the host service or the server");
        close(tx, 1000, "no common protocol version").await;
        return Err(Ended::Stop(EXIT_REFUSED_START));
    };
    *host.jwks.lock().unwrap_or_else(|p| p.into_inner()) = hello.jwks.clone();
    let live_sessions = if refused {
        Vec::new()
    } else {
        let mut live = host.sessions.live_ids();
        for id in host.control.unreported_sessions() {
            if !live.contains(&id) {
                live.push(id);
            }
        }
        live
    };
    let identify = Identify {
        protocol_version: *version,
        host_id: host.host_id,
        proof: HostAuthClaims {
            challenge: hello.challenge,
            host_id: host.host_id,
            iat: host.clock.now_ms().div_euclid(1000),
        }
        .sign(&host.keys.auth),
        host_version: crate::HOST_VERSION.to_owned(),
        live_sessions: Some(live_sessions),
        session_id: None,
    };
    if send(tx, &HostMessage::Identify(identify)).await.is_err() {
        return Err(Ended::Lost);
    }
    match next_server_message(rx, LOGIN_TIMEOUT).await? {
        ServerMessage::Ready(ready) => Ok((
            ready,
            hello.heartbeat_interval_ms,
            hello.heartbeat_miss_limit,
        )),
        _ => Err(Ended::Lost),
    }
}

/// The next message of the server during the login; a close frame ends it.
async fn next_server_message(rx: &mut Rx, limit: Duration) -> Result<ServerMessage, Ended> {
    let deadline = Instant::now() + limit;
    loop {
        let frame = tokio::time::timeout_at(deadline, rx.next())
            .await
            .map_err(|_| Ended::Lost)?;
        match frame {
            Some(Ok(Message::Text(text))) => {
                return ServerMessage::decode(text.as_bytes(), MAX_MESSAGE).map_err(|error| {
                    tracing::warn!(%error, "a login frame of the server does not decode");
                    Ended::Lost
                });
            }
            Some(Ok(Message::Close(frame))) => {
                let (code, reason) = frame
                    .map(|f| (u16::from(f.code), f.reason.to_string()))
                    .unwrap_or((1005, String::new()));
                return Err(Ended::Closed(code, reason));
            }
            Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => {}
            Some(Ok(Message::Binary(_))) | Some(Err(_)) | None => return Err(Ended::Lost),
        }
    }
}

/// A message of the server after the login.
async fn handle(host: &Arc<Host>, message: ServerMessage) {
    match message {
        ServerMessage::SessionOpen(open) => {
            let host = Arc::clone(host);
            let received = host.clock.now_ms();
            tokio::spawn(crate::data::run(host, open, received));
        }
        ServerMessage::SessionClose(close) => {
            tracing::info!(
                close_reason = close.close_reason.as_str(),
                "the server ended a session"
            );
            host.sessions.kill(close.session_id);
        }
        ServerMessage::Ready(ready) => host.apply_ready(&ready).await,
        ServerMessage::HeartbeatAck(ack) => {
            if let Some(jwks) = ack.jwks {
                *host.jwks.lock().unwrap_or_else(|p| p.into_inner()) = jwks;
                tracing::info!("the server's terminal keys changed");
            }
        }
        ServerMessage::Error(error) => {
            tracing::warn!(
                op = error.op.as_str(),
                code = error.code.as_str(),
                "the server refused a message"
            );
        }
        ServerMessage::Hello(_) => {
            tracing::warn!("a second hello of the server is ignored");
        }
    }
}

async fn send(tx: &mut Tx, message: &HostMessage) -> Result<(), ()> {
    tx.send(Message::text(message.to_json()))
        .await
        .map_err(|_| ())
}

async fn close(tx: &mut Tx, code: u16, reason: &str) {
    let frame = CloseFrame {
        code: WsCloseCode::from(code),
        reason: reason.to_owned().into(),
    };
    let _ = tx.send(Message::Close(Some(frame))).await;
    let _ = tx.flush().await;
}

/// The login of a refused start (2.2 "Message on a refused start", 3.5): log in
/// with empty `live_sessions`, retrying with the backoff for at most the cap in
/// total, send exactly one report, close with 1000.
pub async fn report_refused_start(host: &Arc<Host>, report: Report) {
    let mut backoff = Backoff::new(
        host.config.reconnect_backoff_base,
        host.config.reconnect_backoff_cap,
    );
    let give_up = Instant::now() + host.config.reconnect_backoff_cap;
    loop {
        if let Ok((ws, _)) = host
            .connector
            .websocket(&host.server, CONNECT_PATH, MAX_MESSAGE)
            .await
        {
            let (mut tx, mut rx) = ws.split();
            match login(host, &mut rx, &mut tx, true).await {
                Ok(_) => {
                    let _ = send(&mut tx, &HostMessage::Report(report)).await;
                    close(&mut tx, 1000, "refused start").await;
                    // Read until the server answers the close (bounded).
                    let _ = tokio::time::timeout(Duration::from_secs(5), async {
                        while let Some(Ok(frame)) = rx.next().await {
                            if matches!(frame, Message::Close(_)) {
                                break;
                            }
                        }
                    })
                    .await;
                    return;
                }
                Err(Ended::Stop(_)) | Err(Ended::Closed(4110 | 4112 | 4114, _)) => return,
                Err(_) => {}
            }
        }
        let delay = backoff.next_delay();
        if Instant::now() + delay > give_up {
            tracing::warn!("the server could not be reached to report the refused start");
            return;
        }
        tokio::time::sleep(delay).await;
    }
}
