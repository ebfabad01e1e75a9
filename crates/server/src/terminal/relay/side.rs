//! The loop of one side after its login: read binary messages from the
//! socket into the outgoing pipe (waiting for room: backpressure), write what
//! the counterpart sent, and close when the relay, the shutdown or the peer
//! says so.
//!
//! Keepalive: a side silent for `gateway.ping_interval` gets a WebSocket
//! ping; one that sends no frame for `gateway.ping_timeout` after it is lost
//! (dropped without a close, like a broken connection: a lost device
//! detaches the session, 6.2; a lost host side tells its device 4102, or
//! 4013 once the server shuts down).
//!
//! Close codes of this loop: 4002 for a text frame or a broken frame; 4013 at
//! shutdown; whatever the relay sends ([`super::Command::Close`]): 4100, 4102,
//! 4103, 4014, 1000 or a code handed over from the host (4101, 4104).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::body::Bytes;
use bothy_proto::codes::CloseCode;
use futures_util::FutureExt;
use tokio::io::{ReadHalf, WriteHalf};
use tokio::sync::Notify;
use tokio::time::Instant;
use uuid::Uuid;

use super::pipe::{PipeReceiver, PipeSender};
use super::wire::{self, Io, Message, WireReader, WireSocket, WireWriter};
use super::{Command, Joined, Leave, Side, TICK};
use crate::clock::millis;
use crate::shutdown::{CLOSE_ANSWER_WAIT, ShutdownGuard};
use crate::state::AppState;

/// The bytes of queued messages one flush of the writer takes at most.
const WRITE_BATCH: usize = 256 * 1024;

/// The reading half of a side's socket.
type Reader = WireReader<ReadHalf<Io>>;
/// The writing half of a side's socket.
type Writer = WireWriter<WriteHalf<Io>>;

/// How the loop ended.
enum End {
    /// The server closes with this code and text.
    Close(u16, String),
    /// The session ended: close with this code and text after its last
    /// words ([`Command::End`]).
    Finish(u16, String),
    /// The peer sent its close frame (code, text).
    ClosedByPeer(Option<(u16, String)>),
    /// The connection broke.
    Gone,
}

/// Runs a joined side until it ends, then tells the relay.
///
/// A plain function around one `async move` block that uses what it
/// captured in place, and the loops pinned where they are made, so the
/// task's future holds each value once: an `async fn` may keep its arguments
/// beside the locals they are moved into, and `tokio::pin!` a future beside
/// its pinned copy; every idle side's task is sized by this (issue 20, D-722).
pub(crate) fn run(
    state: AppState,
    session_id: Uuid,
    side: Side,
    websocket: WireSocket<Io>,
    joined: Joined,
    mut guard: ShutdownGuard,
) -> impl Future<Output = ()> + Send {
    let Joined {
        conn_id,
        mut commands,
        paired,
        outgoing,
        linked,
        stats,
    } = joined;
    let (mut writer, mut reader) = websocket.split();
    async move {
        let gateway = &state.config().gateway;
        let write_timeout = gateway.write_timeout;
        let alive = Liveness::new();
        // The keepalive asks the writer for a ping (a kept permit: at most one
        // waits).
        let pings = Notify::new();
        // The reader hands the writer the payload of the last ping that came,
        // for its pong.
        let pongs = Pongs::default();
        // Told when everything the counterpart sent was written here and the
        // counterpart is gone (or never came): the device's close at the end of
        // a session waits for it.
        let drained = Notify::new();
        // The message the reader took from the socket and waits to forward (for
        // room in the pipe) when the loop ends: the end of a session still
        // forwards it (its order comes before anything read afterwards).
        let mut carried: Option<axum::body::Bytes> = None;
        let end = {
            // Made where they stay pinned, so each exists once in the task.
            let mut reader = std::pin::pin!(read_loop(
                &state,
                session_id,
                side,
                &mut reader,
                &outgoing,
                &linked,
                &stats,
                &alive,
                &pongs,
                &mut carried,
            ));
            let mut writer =
                std::pin::pin!(write_loop(&mut writer, paired, &pings, &pongs, &drained));
            let mut keepalive = std::pin::pin!(keepalive(
                &alive,
                &pings,
                gateway.ping_interval,
                gateway.ping_timeout
            ));
            let end = tokio::select! {
                biased;
                () = guard.triggered() => End::Close(
                    CloseCode::ServerShutdown.as_u16(),
                    CloseCode::ServerShutdown.name().to_owned(),
                ),
                command = commands.recv() => match command {
                    Some(Command::Close(code, reason)) => End::Close(code, reason),
                    Some(Command::End(code, reason)) => End::Finish(code, reason),
                    None => End::Gone,
                },
                end = &mut reader => end,
                () = &mut writer => End::Gone,
                () = &mut keepalive => {
                    // No frame, not even a pong, since a ping: the peer is gone
                    // without a reset (a device whose network vanished); the
                    // relay treats it as a lost connection (6.2: detached).
                    tracing::info!(side = side.as_str(), "a relay side answered no ping in time");
                    End::Gone
                }
            };
            match end {
                // The device's side at the end of the session: the writer goes on
                // until everything the host's side forwarded was written here and
                // the host's side is gone (or never came), bounded.
                End::Finish(code, reason) if side == Side::Device => {
                    // The goodbyes below wait on the heap: an idle side's task
                    // keeps only what its loop needs (D-706).
                    Box::pin(async {
                        tokio::select! {
                            () = drained.notified() => {}
                            () = &mut writer => {}
                            () = tokio::time::sleep(CLOSE_ANSWER_WAIT) => {}
                            () = guard.triggered() => {}
                        }
                    })
                    .await;
                    End::Close(code, reason)
                }
                other => other,
            }
        };
        let end = match end {
            // The host's side: close, forwarding what the host sent before its
            // answer (its close frame follows its last data on the connection).
            End::Finish(code, reason) => {
                let frame = Message::Close(Some((code, reason)));
                Box::pin(async {
                    if let Ok(Ok(())) =
                        tokio::time::timeout(write_timeout, writer.send(frame)).await
                    {
                        forward_until_close(&state, side, &mut reader, &outgoing, &stats, carried)
                            .await;
                        let _ = tokio::time::timeout(write_timeout, writer.shutdown()).await;
                    }
                })
                .await;
                drop(outgoing);
                state
                    .relay()
                    .leave(&state, session_id, side, conn_id, Leave::Gone);
                drop(guard);
                return;
            }
            other => other,
        };
        drop(outgoing);
        let leave = match &end {
            End::ClosedByPeer(Some((code, reason)))
                if side == Side::Host
                    && (*code == CloseCode::TerminalTokenStale.as_u16()
                        || *code == CloseCode::TerminalHandshakeFailed.as_u16()) =>
            {
                Leave::HandOver(*code, reason.clone())
            }
            _ => Leave::Gone,
        };
        state
            .relay()
            .leave(&state, session_id, side, conn_id, leave);
        match end {
            End::Close(code, reason) | End::Finish(code, reason) => {
                Box::pin(wire::close(
                    &mut writer,
                    &mut reader,
                    code,
                    reason,
                    write_timeout,
                ))
                .await;
            }
            End::ClosedByPeer(frame) => {
                Box::pin(answer_close(&mut writer, frame, write_timeout)).await;
            }
            End::Gone => {}
        }
        drop(guard);
    }
}

/// The host's side after its close frame at the end of a session: every
/// binary message the host sent before its close answer still goes to the
/// device (an exit frame, the last output); ends at the answer, a broken
/// connection, or after [`CLOSE_ANSWER_WAIT`].
async fn forward_until_close(
    state: &AppState,
    side: Side,
    reader: &mut Reader,
    outgoing: &PipeSender,
    stats: &super::Stats,
    carried: Option<Bytes>,
) {
    let _ = tokio::time::timeout(CLOSE_ANSWER_WAIT, async {
        if let Some(bytes) = carried {
            let len = bytes.len();
            outgoing.reserve(len).await;
            stats.count(side, len, state.clock().now_ms());
            outgoing.send(bytes);
        }
        while let Some(Ok(message)) = reader.recv().await {
            let Message::Binary(bytes) = message else {
                if matches!(message, Message::Close(_)) {
                    return;
                }
                continue;
            };
            let len = bytes.len();
            if outgoing.fits(len).is_err() {
                continue;
            }
            outgoing.reserve(len).await;
            stats.count(side, len, state.clock().now_ms());
            outgoing.send(bytes);
        }
    })
    .await;
}

/// When a side last sent a frame, for the keepalive: milliseconds of
/// tokio's monotonic clock since the side joined. Network liveness is real
/// elapsed time, not a deadline of the spec, so it does not run on the
/// server's injected clock (whose jumps in tests would kill live peers).
struct Liveness {
    start: Instant,
    last_frame_ms: AtomicU64,
}

impl Liveness {
    fn new() -> Liveness {
        Liveness {
            start: Instant::now(),
            last_frame_ms: AtomicU64::new(0),
        }
    }

    fn elapsed_ms(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// A frame arrived now.
    fn seen(&self) {
        self.last_frame_ms
            .store(self.elapsed_ms(), Ordering::Relaxed);
    }

    fn last_frame_ms(&self) -> u64 {
        self.last_frame_ms.load(Ordering::Relaxed)
    }
}

/// Asks the writer for a ping whenever the side was silent for `interval`,
/// and returns when a ping stayed without any frame for `timeout`.
async fn keepalive(alive: &Liveness, pings: &Notify, interval: Duration, timeout: Duration) {
    let interval_ms = u64::try_from(interval.as_millis()).unwrap_or(u64::MAX);
    let timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
    // The time of the ping that no frame has answered yet.
    let mut outstanding: Option<u64> = None;
    loop {
        let now = alive.elapsed_ms();
        let last = alive.last_frame_ms();
        let wake_at = match outstanding {
            Some(sent) if last >= sent => {
                outstanding = None;
                continue;
            }
            Some(sent) if now.saturating_sub(sent) >= timeout_ms => return,
            Some(sent) => sent.saturating_add(timeout_ms),
            None if now.saturating_sub(last) >= interval_ms => {
                // A kept permit means a ping is on its way already.
                pings.notify_one();
                outstanding = Some(now);
                continue;
            }
            None => last.saturating_add(interval_ms),
        };
        let wait = wake_at.saturating_sub(now).max(1);
        tokio::time::sleep(Duration::from_millis(wait)).await;
    }
}

/// Reads the socket; each binary message waits for room toward the
/// counterpart, then goes into the pipe unchanged.
#[allow(clippy::too_many_arguments)]
async fn read_loop(
    state: &AppState,
    session_id: Uuid,
    side: Side,
    reader: &mut Reader,
    outgoing: &PipeSender,
    linked: &std::sync::atomic::AtomicBool,
    stats: &super::Stats,
    alive: &Liveness,
    pongs: &Pongs,
    carried: &mut Option<Bytes>,
) -> End {
    let stall_timeout = millis(state.config().terminal.relay_stall_timeout);
    // After a slow receiver was told 4014 this link forwards nothing more,
    // so the receiver sees a gap-free prefix (docs/decisions.md D-80).
    let mut dead = false;
    loop {
        let next = reader.recv().await;
        alive.seen();
        let message = match next {
            Some(Ok(Message::Binary(bytes))) => bytes,
            Some(Ok(Message::Ping(payload))) => {
                pongs.answer(payload);
                continue;
            }
            Some(Ok(Message::Pong(_))) => continue,
            Some(Ok(Message::Close(frame))) => return End::ClosedByPeer(frame),
            // Text frames are forbidden after the login; a frame over the
            // limit or a broken one fails to decode: 4002 either way.
            Some(Ok(Message::Text(_))) | Some(Err(_)) => {
                return End::Close(
                    CloseCode::InvalidMessage.as_u16(),
                    CloseCode::InvalidMessage.name().to_owned(),
                );
            }
            None => return End::Gone,
        };
        let len = message.len();
        if dead {
            continue;
        }
        if outgoing.fits(len).is_err() {
            // Can never fit: the receiver is the slow end (6.3).
            if linked.load(Ordering::SeqCst) {
                dead = true;
                state.relay().peer_slow(session_id, side);
            }
            continue;
        }
        // Held where the end of the session finds it while this waits.
        *carried = Some(message);
        // Nothing is taken unless the room is there now.
        let ready = outgoing.reserve(len).now_or_never().is_some();
        if !ready {
            // On the heap while it waits: the task of every idle side keeps
            // only what its idle state needs (D-706).
            let slow = Box::pin(wait_for_room(
                state,
                outgoing,
                linked,
                stats,
                len,
                stall_timeout,
            ))
            .await;
            if slow {
                // No room within terminal.relay_stall_timeout: the receiver
                // gets 4014; this message is not forwarded. The reservation
                // is dropped (nothing was taken).
                *carried = None;
                dead = true;
                state.relay().peer_slow(session_id, side);
                continue;
            }
        }
        let Some(message) = carried.take() else {
            continue;
        };
        stats.count(side, len, state.clock().now_ms());
        outgoing.send(message);
    }
}

/// Waits for room for `len` bytes in `outgoing`; `true` if the counterpart,
/// linked, took nothing for `stall_timeout` (ms): the slow receiver of 6.3.
async fn wait_for_room(
    state: &AppState,
    outgoing: &PipeSender,
    linked: &std::sync::atomic::AtomicBool,
    stats: &super::Stats,
    len: usize,
    stall_timeout: i64,
) -> bool {
    let mut reserve = std::pin::pin!(outgoing.reserve(len));
    // The stall counts from now (when linked), before anyone can see it.
    let mut stall_start: Option<i64> = linked
        .load(Ordering::SeqCst)
        .then(|| state.clock().now_ms());
    stats.set_stalled(true);
    let slow = loop {
        tokio::select! {
            () = &mut reserve => break false,
            () = tokio::time::sleep(TICK) => {
                if linked.load(Ordering::SeqCst) && !outgoing.is_closed() {
                    let now = state.clock().now_ms();
                    let start = *stall_start.get_or_insert(now);
                    if now.saturating_sub(start) >= stall_timeout {
                        break true;
                    }
                } else {
                    stall_start = None;
                }
            }
        }
    };
    stats.set_stalled(false);
    slow
}

/// Writes what the counterpart sent, once paired, the keepalive's pings and
/// the answers to the peer's pings; gives the room of each message back after
/// its write. Ends only when a write fails (never while the peer may still
/// send: after the counterpart left, the relay says what happens next).
async fn write_loop(
    writer: &mut Writer,
    paired: tokio::sync::oneshot::Receiver<PipeReceiver>,
    pings: &Notify,
    pongs: &Pongs,
    drained: &Notify,
) {
    let mut paired = Some(paired);
    let mut incoming: Option<PipeReceiver> = None;
    loop {
        tokio::select! {
            () = pings.notified() => {
                if writer.send(Message::Ping(Bytes::new())).await.is_err() {
                    return;
                }
            }
            () = pongs.ready.notified() => {
                let payload = pongs.take();
                if let Some(payload) = payload {
                    if writer.send(Message::Pong(payload)).await.is_err() {
                        return;
                    }
                }
            }
            received = async {
                match paired.as_mut() {
                    Some(paired) => paired.await,
                    None => std::future::pending().await,
                }
            }, if paired.is_some() => {
                paired = None;
                incoming = received.ok();
                if incoming.is_none() {
                    // Never paired: nothing will come.
                    drained.notify_one();
                }
            }
            message = async {
                match incoming.as_mut() {
                    Some(incoming) => incoming.recv().await,
                    None => std::future::pending().await,
                }
            }, if incoming.is_some() => {
                let Some(message) = message else {
                    // The counterpart left and everything it sent is written.
                    incoming = None;
                    drained.notify_one();
                    continue;
                };
                // What else the counterpart queued meanwhile goes out with
                // this message in one vectored write and one flush: TLS packs
                // the frames into records together, and this task wakes once
                // (docs/decisions.md D-451). The room comes back after the
                // flush, so the bound of the pipe still holds.
                let mut len = message.len();
                let mut batch = vec![message];
                while len < WRITE_BATCH {
                    let Some(next) = incoming.as_mut().and_then(PipeReceiver::try_recv) else {
                        break;
                    };
                    len += next.len();
                    batch.push(next);
                }
                if writer.send_binary(batch).await.is_err() {
                    return;
                }
                if let Some(incoming) = incoming.as_ref() {
                    incoming.written(len);
                }
            }
            else => std::future::pending::<()>().await,
        }
    }
}

/// The payload of the last ping the peer sent, for the writer's pong (a
/// newer ping replaces one not answered yet; RFC 6455 5.5.3 allows
/// answering only the most recent).
#[derive(Default)]
struct Pongs {
    payload: std::sync::Mutex<Option<Bytes>>,
    ready: Notify,
}

impl Pongs {
    fn answer(&self, payload: Bytes) {
        if let Ok(mut slot) = self.payload.lock() {
            *slot = Some(payload);
        }
        self.ready.notify_one();
    }

    fn take(&self) -> Option<Bytes> {
        self.payload.lock().ok().and_then(|mut slot| slot.take())
    }
}

/// Answers the peer's close frame with the same code and reason (RFC 6455
/// 5.5.1), then ends the connection's writing.
async fn answer_close(writer: &mut Writer, frame: Option<(u16, String)>, write_timeout: Duration) {
    let _ = tokio::time::timeout(write_timeout, async {
        if writer.send(Message::Close(frame)).await.is_ok() {
            let _ = writer.shutdown().await;
        }
    })
    .await;
}
