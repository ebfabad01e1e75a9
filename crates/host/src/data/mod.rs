//! One data connection per `session.open` (6.1 steps 4–7, 6.2, M2-45): the host
//! service dials `/api/v1/hosts/sessions/{id}/stream`, reads `hello` (the
//! server values it applies to this session), proves itself with the login key,
//! then speaks binary frames, each one Noise message: message 1 runs the check
//! order ([`checks`]), message 2 carries `{"v":1,"host_version","profile"}`, the
//! first transport message must be `start` (awaited until `expires_at`), then
//! the gate, the local confirmation, the PTY (open) or the replay (attach), and
//! the frames of 5.4 both ways.
//!
//! The host service never redials a data connection on its own. A close of the
//! server with 4100 ends the PTY without `session.ended`; every other close or a
//! loss leaves a live PTY detached. A refusal closes with 4101/4104 and the
//! `close_detail` as close text; a newer `session.open` of the same session
//! replaces this connection (1000).

pub mod checks;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bothy_net::ServerSocket;
use bothy_noise::{Responder, Transport};
use bothy_proto::codes::{CloseCode, CloseDetail, CloseReason};
use bothy_proto::control::{Identify, SessionOpen};
use bothy_proto::data::{self, Hello, ServerValues};
use bothy_proto::frame::{Direction, Frame, MAX_DATA_LEN, TerminalSize};
use bothy_proto::jws::{Att, HostAuthClaims};
use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{Sink, SinkExt, StreamExt};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode as WsCloseCode;
use uuid::Uuid;

use self::checks::{Accepted, CheckContext, check_message1, write_message2};
use crate::confirm::protocol::Kind as ConfirmKind;
use crate::host::Host;
use crate::sessions::core::{self, CoreSettings};
use crate::sessions::{CoreCmd, OutFrame, PtyHandle};

/// Largest message read on a data connection: one Noise message, or the hello.
const MAX_MESSAGE: usize = 1 << 20;

/// How many frames may wait toward the device before the PTY is held back.
const OUT_QUEUE: usize = 64;

/// How long a data connection may wait for message 1 beyond `expires_at`
/// before it gives up on its own (the server's open deadline closes it first).
const MESSAGE1_GRACE: Duration = Duration::from_secs(60);

type WsTx = SplitSink<ServerSocket, Message>;
type WsRx = SplitStream<ServerSocket>;

/// What the server's side of the connection did.
#[derive(Debug)]
enum Incoming {
    Binary(Vec<u8>),
    Text,
    Closed(Option<u16>),
    Replaced,
    Deadline,
}

/// Runs the data connection of one `session.open`; `received` is when the
/// `session.open` arrived (the opening window is `expires_at` minus that).
pub async fn run(host: Arc<Host>, open: SessionOpen, received_ms: i64) {
    let session_id = open.session_id;
    let claim = host.sessions.claim_link(session_id);
    let link_id = claim.id;
    let link = Link {
        host: Arc::clone(&host),
        session_id,
        link_id,
        replaced: Some(claim.replaced),
        expires_at_ms: i64::try_from(open.expires_at).unwrap_or(i64::MAX),
        window: Duration::from_millis(
            u64::try_from(i64::try_from(open.expires_at).unwrap_or(i64::MAX) - received_ms)
                .unwrap_or(0),
        ),
    };
    link.run().await;
    host.sessions.release_link(session_id, link_id);
}

struct Link {
    host: Arc<Host>,
    session_id: Uuid,
    link_id: u64,
    /// Fires when a newer `session.open` replaces this connection.
    replaced: Option<oneshot::Receiver<()>>,
    expires_at_ms: i64,
    window: Duration,
}

impl Link {
    async fn run(mut self) {
        let path = data::stream_path(&self.session_id);
        let ws = match self
            .host
            .connector
            .websocket(&self.host.server, &path, MAX_MESSAGE)
            .await
        {
            Ok((ws, _)) => ws,
            Err(error) => {
                tracing::warn!(%error, "the data connection could not be opened");
                return;
            }
        };
        let (mut tx, mut rx) = ws.split();
        // hello, then identify.
        let hello = match self.read_hello(&mut rx).await {
            Some(hello) => hello,
            None => {
                close(&mut tx, CloseCode::InvalidMessage.as_u16(), "hello").await;
                return;
            }
        };
        let values = match hello.server_values() {
            Ok(values) => values,
            Err(error) => {
                tracing::warn!(%error, "the hello of a data connection lacks a usable value");
                close(&mut tx, CloseCode::InvalidMessage.as_u16(), "hello").await;
                return;
            }
        };
        let proof = HostAuthClaims {
            challenge: hello.challenge,
            host_id: self.host.host_id,
            iat: self.host.clock.now_ms().div_euclid(1000),
        }
        .sign(&self.host.keys.auth);
        let identify = data::HostMessage::Identify(Identify {
            protocol_version: 1,
            host_id: self.host.host_id,
            proof,
            host_version: crate::HOST_VERSION.to_owned(),
            live_sessions: None,
            session_id: Some(self.session_id),
        });
        if tx.send(Message::text(identify.to_json())).await.is_err() {
            return;
        }
        // Message 1.
        let message1_deadline =
            deadline_at(self.host.clock.now_ms(), self.expires_at_ms) + MESSAGE1_GRACE;
        let message1 = match self.next(&mut rx, message1_deadline).await {
            Incoming::Binary(bytes) => bytes,
            Incoming::Replaced => {
                close(&mut tx, 1000, "replaced").await;
                return;
            }
            Incoming::Closed(code) => {
                self.server_closed(code);
                return;
            }
            Incoming::Text => {
                close(
                    &mut tx,
                    CloseCode::InvalidMessage.as_u16(),
                    "binary frames only",
                )
                .await;
                return;
            }
            Incoming::Deadline => {
                close(&mut tx, 1000, "no message 1").await;
                return;
            }
        };
        // An attach for a session whose end was already reported: 1000, no report.
        if self.host.sessions.is_ended(self.session_id) {
            close(&mut tx, 1000, "ended").await;
            return;
        }
        let handshake = self.check(&hello, &message1).and_then(|mut accepted| {
            let (message2, transport) = write_message2(&mut accepted)?;
            Ok((accepted, message2, transport))
        });
        let (accepted, message2, transport) = match handshake {
            Ok(done) => done,
            Err(detail) => {
                let code = detail.handshake_close_code();
                if code == CloseCode::TerminalHandshakeFailed
                    && self.host.sessions.pty(self.session_id).is_some()
                {
                    // 4104 for a session with a live PTY ends it, without a
                    // report (6.2); the server ends the session on this close.
                    self.host.sessions.kill(self.session_id);
                }
                tracing::info!(
                    session_id = %self.session_id,
                    close_detail = detail.as_str(),
                    "message 1 refused"
                );
                close(&mut tx, code.as_u16(), detail.as_str()).await;
                return;
            }
        };
        if tx.send(Message::binary(message2)).await.is_err() {
            return;
        }
        let transport = Arc::new(Mutex::new(transport));
        // The writer: frames toward the device, encrypted, in order.
        let (out_tx, out_rx) = mpsc::channel::<OutFrame>(OUT_QUEUE);
        let (close_tx, close_rx) = oneshot::channel::<(u16, &'static str)>();
        let writer = tokio::spawn(writer(tx, Arc::clone(&transport), out_rx, close_rx));
        let mut stream = Stream {
            rx,
            transport,
            close: Some(close_tx),
        };
        match accepted.claims.att {
            Att::Open => self.open(&mut stream, accepted, values, out_tx).await,
            Att::Attach => self.attach(&mut stream, accepted, values, out_tx).await,
        }
        stream.close(1000, "done");
        let _ = writer.await;
    }

    /// The hello of this connection (the only text the server sends).
    async fn read_hello(&mut self, rx: &mut WsRx) -> Option<Hello> {
        let deadline = deadline_at(self.host.clock.now_ms(), self.expires_at_ms) + MESSAGE1_GRACE;
        loop {
            let next = tokio::time::timeout_at(deadline, rx.next()).await.ok()??;
            match next.ok()? {
                Message::Text(text) => {
                    let data::ServerMessage::Hello(hello) =
                        data::ServerMessage::decode(text.as_bytes(), MAX_MESSAGE).ok()?;
                    return Some(hello);
                }
                Message::Ping(_) | Message::Pong(_) => {}
                _ => return None,
            }
        }
    }

    /// The next frame of the server, the replacement of this connection, or the
    /// deadline.
    async fn next(&mut self, rx: &mut WsRx, deadline: Instant) -> Incoming {
        loop {
            let replaced = async {
                match self.replaced.as_mut() {
                    Some(replaced) => replaced.await.is_ok(),
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                fired = replaced => {
                    self.replaced = None;
                    if fired {
                        return Incoming::Replaced;
                    }
                }
                () = tokio::time::sleep_until(deadline) => return Incoming::Deadline,
                next = rx.next() => match next {
                    Some(Ok(Message::Binary(bytes))) => return Incoming::Binary(bytes.to_vec()),
                    Some(Ok(Message::Text(_))) => return Incoming::Text,
                    Some(Ok(Message::Close(frame))) => {
                        return Incoming::Closed(frame.map(|f| u16::from(f.code)));
                    }
                    Some(Ok(_)) => {}
                    Some(Err(_)) | None => return Incoming::Closed(None),
                },
            }
        }
    }

    /// The server closed or the connection broke: 4100 ends a live PTY without
    /// a report; anything else leaves it detached (6.2).
    fn server_closed(&self, code: Option<u16>) {
        if code == Some(CloseCode::TerminalClosed.as_u16()) {
            self.host.sessions.kill(self.session_id);
        }
    }

    fn check(&self, hello: &Hello, message1: &[u8]) -> Result<Accepted, CloseDetail> {
        let responder = Responder::new(self.session_id, self.host.host_id, &self.host.keys.noise)
            .map_err(|_| CloseDetail::HandshakeFailed)?;
        let ctx = CheckContext {
            host_id: self.host.host_id,
            session_id: self.session_id,
            jwks: &hello.jwks,
            leeway_ms: u64::try_from(hello.clock_leeway_ms).unwrap_or(0),
            now_ms: self.host.clock.now_ms(),
            is_server_host: self.host.is_server_host(),
        };
        let mut state = self.host.check_state();
        check_message1(responder, message1, &ctx, &mut state)
    }

    /// The first transport message: `start` with the size, awaited until
    /// `expires_at`. `Err(None)`: nothing came in time; `Err(Some(_))`: how
    /// the server side ended; `Ok(Err(()))`: a fault of the stream.
    async fn start(&mut self, stream: &mut Stream) -> StartOutcome {
        let deadline = deadline_at(self.host.clock.now_ms(), self.expires_at_ms);
        match self.next(&mut stream.rx, deadline).await {
            Incoming::Binary(bytes) => match stream.decrypt(&bytes) {
                Some(plain) => match Frame::decode(&plain, Direction::DeviceToHost) {
                    Ok(Frame::Start(size)) => StartOutcome::Start(size),
                    _ => StartOutcome::Fault,
                },
                None => StartOutcome::Fault,
            },
            Incoming::Deadline => StartOutcome::Timeout,
            Incoming::Replaced => StartOutcome::Replaced,
            Incoming::Closed(code) => StartOutcome::Closed(code),
            Incoming::Text => StartOutcome::Fault,
        }
    }

    async fn open(
        &mut self,
        stream: &mut Stream,
        accepted: Accepted,
        values: ServerValues,
        out: mpsc::Sender<OutFrame>,
    ) {
        let claims = accepted.claims;
        let size = match self.start(stream).await {
            StartOutcome::Start(size) => size,
            StartOutcome::Timeout => {
                // No PTY; the opening ends open_failed / open_timeout (6.1 step 7).
                self.host
                    .sessions
                    .opening_failed(self.session_id, CloseDetail::OpenTimeout);
                self.await_server_close(stream).await;
                return;
            }
            StartOutcome::Fault => {
                self.host
                    .sessions
                    .opening_failed(self.session_id, CloseDetail::HandshakeFailed);
                self.await_server_close(stream).await;
                return;
            }
            StartOutcome::Replaced => {
                stream.close(1000, "replaced");
                return;
            }
            StartOutcome::Closed(_) => return,
        };
        // The gate, the local confirmation, the PTY (6.1 step 7).
        let started = self.host.open_pty(&claims, size).await;
        let pty = match started {
            Ok(pty) => pty,
            Err(detail) => {
                tracing::info!(
                    close_detail = detail.as_str(),
                    "the opening failed on the host"
                );
                self.host.sessions.opening_failed(self.session_id, detail);
                self.await_server_close(stream).await;
                return;
            }
        };
        let (cmd_tx, cmd_rx) = mpsc::channel(64);
        let handle = PtyHandle {
            owner: checks::LivePty {
                sub: claims.sub,
                osu: claims.osu.clone(),
                prf: claims.prf.clone(),
            },
            cmd: cmd_tx.clone(),
        };
        if !self
            .host
            .sessions
            .register_pty(self.session_id, self.link_id, handle)
        {
            // A newer session.open took over meanwhile: this PTY is dropped
            // (its session connection closes, the helper ends the tree).
            drop(pty);
            stream.close(1000, "replaced");
            return;
        }
        let settings = CoreSettings {
            session_id: self.session_id,
            scrollback_bytes: self.host.config.scrollback_bytes,
            idle: values.idle_timeout,
            detach: values.detach_grace,
        };
        tokio::spawn(core::run(
            Arc::clone(&self.host.sessions),
            settings,
            pty,
            cmd_rx,
        ));
        self.host.sessions.report_started(self.session_id);
        tracing::info!(session_id = %self.session_id, link = self.link_id, "session opened");
        if cmd_tx.send(CoreCmd::Live(self.link_id, out)).await.is_err() {
            return;
        }
        self.pump(stream, &cmd_tx).await;
    }

    async fn attach(
        &mut self,
        stream: &mut Stream,
        accepted: Accepted,
        values: ServerValues,
        out: mpsc::Sender<OutFrame>,
    ) {
        let claims = accepted.claims;
        let Some(pty) = self.host.sessions.pty(self.session_id) else {
            stream.close(1000, "ended");
            return;
        };
        let cmd = pty.cmd;
        let _ = cmd
            .send(CoreCmd::Timers {
                idle: values.idle_timeout,
                detach: values.detach_grace,
            })
            .await;
        let size = match self.start(stream).await {
            StartOutcome::Start(size) => size,
            StartOutcome::Fault => {
                let _ = cmd
                    .send(CoreCmd::End(
                        CloseReason::OpenFailed,
                        Some(CloseDetail::HandshakeFailed),
                    ))
                    .await;
                self.await_server_close(stream).await;
                return;
            }
            // No start: 1000, the session stays detached (6.2).
            StartOutcome::Timeout | StartOutcome::Replaced => {
                stream.close(1000, "no start");
                return;
            }
            StartOutcome::Closed(code) => {
                self.server_closed(code);
                return;
            }
        };
        // The buffer as it was when start arrived.
        let (reply, answer) = oneshot::channel();
        if cmd.send(CoreCmd::Snapshot(reply)).await.is_err() {
            return;
        }
        let Ok(replay) = answer.await else {
            return;
        };
        if let Err(detail) = self
            .host
            .confirm_locally(ConfirmKind::Attach, &claims)
            .await
        {
            // A denied attach ends the session (6.4).
            let _ = cmd
                .send(CoreCmd::End(CloseReason::OpenFailed, Some(detail)))
                .await;
            self.await_server_close(stream).await;
            return;
        }
        let _ = cmd.send(CoreCmd::SetSize(size)).await;
        // Issue 16 item 14: each attach in the log, by its IDs only.
        tracing::info!(session_id = %self.session_id, link = self.link_id, "session attached");
        if !replay.is_empty() {
            if out.send(OutFrame::ReplayBegin).await.is_err() {
                return;
            }
            for chunk in replay.chunks(MAX_DATA_LEN) {
                if out.send(OutFrame::Data(chunk.to_vec())).await.is_err() {
                    return;
                }
            }
            if out.send(OutFrame::ReplayEnd).await.is_err() {
                return;
            }
        }
        if cmd.send(CoreCmd::Live(self.link_id, out)).await.is_err() {
            return;
        }
        self.pump(stream, &cmd).await;
    }

    /// The connection of a live PTY ended without the session's end: the
    /// session is detached on the host (6.2); logged by its IDs only.
    async fn detached(&self, cmd: &mpsc::Sender<CoreCmd>, why: &'static str) {
        tracing::info!(session_id = %self.session_id, link = self.link_id, why, "session detached");
        let _ = cmd.send(CoreCmd::Detached(self.link_id)).await;
    }

    /// Frames from the device until the connection ends.
    async fn pump(&mut self, stream: &mut Stream, cmd: &mpsc::Sender<CoreCmd>) {
        loop {
            match self.next(&mut stream.rx, far_future()).await {
                Incoming::Binary(bytes) => {
                    let Some(plain) = stream.decrypt(&bytes) else {
                        self.fault(stream, cmd).await;
                        return;
                    };
                    let command = match Frame::decode(&plain, Direction::DeviceToHost) {
                        Ok(Frame::Data(input)) => CoreCmd::Input(input.to_vec()),
                        Ok(Frame::Resize(size)) => CoreCmd::Resize(size),
                        Ok(Frame::Close) => {
                            let _ = cmd
                                .send(CoreCmd::End(CloseReason::ClientClosed, None))
                                .await;
                            self.await_server_close(stream).await;
                            return;
                        }
                        // A second start, or any frame fault, ends the session.
                        _ => {
                            self.fault(stream, cmd).await;
                            return;
                        }
                    };
                    if cmd.send(command).await.is_err() {
                        // The PTY ended; the server closes this connection.
                        self.await_server_close(stream).await;
                        return;
                    }
                }
                Incoming::Text => {
                    self.detached(cmd, "text frame").await;
                    stream.close(CloseCode::InvalidMessage.as_u16(), "binary frames only");
                    return;
                }
                Incoming::Replaced => {
                    self.detached(cmd, "replaced").await;
                    stream.close(1000, "replaced");
                    return;
                }
                Incoming::Closed(code) => {
                    if code == Some(CloseCode::TerminalClosed.as_u16()) {
                        let _ = cmd.send(CoreCmd::Kill).await;
                    } else {
                        self.detached(cmd, "connection ended").await;
                    }
                    return;
                }
                Incoming::Deadline => {}
            }
        }
    }

    /// A fault of the encrypted stream (5.4, D-M2-45-8): the tree ends, the
    /// session ends open_failed / handshake_failed.
    async fn fault(&mut self, stream: &mut Stream, cmd: &mpsc::Sender<CoreCmd>) {
        tracing::info!(
            close_detail = "handshake_failed",
            "a fault of the encrypted stream"
        );
        let _ = cmd
            .send(CoreCmd::End(
                CloseReason::OpenFailed,
                Some(CloseDetail::HandshakeFailed),
            ))
            .await;
        self.await_server_close(stream).await;
    }

    /// After a `session.ended` the host keeps the connection open until the
    /// server closes it, at most the length of the opening window; then 1000
    /// (6.1 step 7).
    async fn await_server_close(&mut self, stream: &mut Stream) {
        let deadline = Instant::now() + self.window;
        loop {
            match self.next(&mut stream.rx, deadline).await {
                Incoming::Binary(_) | Incoming::Text => {}
                Incoming::Closed(code) => {
                    self.server_closed(code);
                    return;
                }
                Incoming::Replaced | Incoming::Deadline => {
                    stream.close(1000, "ended");
                    return;
                }
            }
        }
    }
}

enum StartOutcome {
    Start(TerminalSize),
    Fault,
    Timeout,
    Replaced,
    Closed(Option<u16>),
}

/// The reading half of an established session stream.
struct Stream {
    rx: WsRx,
    transport: Arc<Mutex<Transport>>,
    close: Option<oneshot::Sender<(u16, &'static str)>>,
}

impl Stream {
    fn decrypt(&self, message: &[u8]) -> Option<Vec<u8>> {
        let mut transport = self.transport.lock().unwrap_or_else(|p| p.into_inner());
        transport.read_message(message).ok()
    }

    /// Asks the writer to close with `code` (once; later calls do nothing).
    fn close(&mut self, code: u16, reason: &'static str) {
        if let Some(close) = self.close.take() {
            let _ = close.send((code, reason));
        }
    }
}

/// At most this much output goes into one batch of the writer before it
/// flushes (as the relay's writer, D-451).
const BATCH_BYTES: usize = 256 * 1024;

/// A batch of at least this much output is part of a stream (a `cat`, a
/// build's log), not of typing (an echo, a prompt): D-704.
const STREAM_BATCH_BYTES: usize = 2048;

/// While output streams, how long a batch waits for more output to fill its
/// last `data` frame (D-704). The first batch of a stream never waits.
const STREAM_FILL_WAIT: Duration = Duration::from_millis(2);

/// Encrypts and sends the frames toward the device until the core and the link
/// let go of the channel or a close is asked for. What is queued when the
/// writer wakes goes out as one batch with one flush, and consecutive output
/// is merged into frames of up to [`MAX_DATA_LEN`] bytes (D-452): a burst of
/// small reads of the PTY costs one Noise message and one WebSocket frame per
/// 64 KiB, not one per read. A lone chunk (an echo) goes out at once.
async fn writer(
    mut tx: WsTx,
    transport: Arc<Mutex<Transport>>,
    mut frames: mpsc::Receiver<OutFrame>,
    mut close_rx: oneshot::Receiver<(u16, &'static str)>,
) {
    // When the last batch that was part of a stream went out.
    let mut streamed_at: Option<Instant> = None;
    loop {
        tokio::select! {
            biased;
            asked = &mut close_rx => {
                if let Ok((code, reason)) = asked {
                    close(&mut tx, code, reason).await;
                }
                return;
            }
            frame = frames.recv() => {
                let Some(frame) = frame else {
                    // Everyone let go; wait for the close request of the link.
                    if let Ok((code, reason)) = close_rx.await {
                        close(&mut tx, code, reason).await;
                    }
                    return;
                };
                let streaming = streamed_at
                    .is_some_and(|at| at.elapsed() <= STREAM_FILL_WAIT);
                match send_batch(&mut tx, &transport, frame, &mut frames, streaming).await {
                    Ok(taken) if taken >= STREAM_BATCH_BYTES => streamed_at = Some(Instant::now()),
                    Ok(_) => streamed_at = None,
                    Err(()) => return,
                }
            }
        }
    }
}

/// Sends `first` and what else is queued now (up to [`BATCH_BYTES`] of
/// output), flushes once, then signals the flush markers of the batch; the
/// bytes of output it took. While output `streaming` (D-704), a last `data`
/// frame that is not full waits up to [`STREAM_FILL_WAIT`] for more output;
/// any other frame ends the wait.
async fn send_batch<S: Sink<Message> + Unpin>(
    tx: &mut S,
    transport: &Mutex<Transport>,
    first: OutFrame,
    frames: &mut mpsc::Receiver<OutFrame>,
    streaming: bool,
) -> Result<usize, ()> {
    let fill_until = streaming.then(|| Instant::now() + STREAM_FILL_WAIT);
    let mut output: Vec<u8> = Vec::new();
    let mut markers: Vec<core::FlushAck> = Vec::new();
    let mut taken = 0usize;
    let mut next = Some(first);
    while let Some(frame) = next.take() {
        match frame {
            OutFrame::Data(bytes) => {
                taken += bytes.len();
                if output.is_empty() {
                    output = bytes;
                } else {
                    output.extend_from_slice(&bytes);
                }
                // Whole frames go out as soon as they are full; the rest waits
                // for more output of the batch.
                let full = output.len() - output.len() % MAX_DATA_LEN;
                if full > 0 {
                    send_output(tx, transport, &output[..full]).await?;
                    output.drain(..full);
                }
            }
            OutFrame::Flushed(written) => markers.push(written),
            other => {
                send_output(tx, transport, &output).await?;
                output.clear();
                let plain = match other {
                    OutFrame::Exit(code) => encode(Frame::Exit(code)),
                    OutFrame::ReplayBegin => encode(Frame::ReplayBegin),
                    _ => encode(Frame::ReplayEnd),
                };
                send_message(tx, transport, &plain).await?;
            }
        }
        if taken < BATCH_BYTES {
            next = frames.try_recv().ok();
            if let (None, Some(until)) = (&next, fill_until)
                && !output.is_empty()
                && markers.is_empty()
            {
                next = tokio::time::timeout_at(until, frames.recv())
                    .await
                    .ok()
                    .flatten();
            }
        }
    }
    send_output(tx, transport, &output).await?;
    tx.flush().await.map_err(|_| ())?;
    // Every frame before each marker is on the socket now.
    for written in markers {
        written.done();
    }
    Ok(taken)
}

/// Queues `bytes` of output as `data` frames of at most [`MAX_DATA_LEN`].
async fn send_output<S: Sink<Message> + Unpin>(
    tx: &mut S,
    transport: &Mutex<Transport>,
    bytes: &[u8],
) -> Result<(), ()> {
    for chunk in bytes.chunks(MAX_DATA_LEN) {
        let plain = Frame::Data(chunk)
            .to_vec(Direction::HostToDevice)
            .map_err(|_| ())?;
        send_message(tx, transport, &plain).await?;
    }
    Ok(())
}

/// Encrypts one frame and queues it on the WebSocket (no flush).
async fn send_message<S: Sink<Message> + Unpin>(
    tx: &mut S,
    transport: &Mutex<Transport>,
    plain: &[u8],
) -> Result<(), ()> {
    let message = {
        let mut transport = transport.lock().unwrap_or_else(|p| p.into_inner());
        transport.write_message(plain).map_err(|_| ())?
    };
    tx.feed(Message::binary(message)).await.map_err(|_| ())
}

fn encode(frame: Frame<'_>) -> Vec<u8> {
    frame.to_vec(Direction::HostToDevice).unwrap_or_default()
}

async fn close(tx: &mut WsTx, code: u16, reason: &str) {
    let frame = CloseFrame {
        code: WsCloseCode::from(code),
        reason: reason.to_owned().into(),
    };
    let _ = tx.send(Message::Close(Some(frame))).await;
    let _ = tx.flush().await;
}

/// The tokio instant of the Unix millisecond time `unix_ms` when the host's
/// clock reads `now_ms` (past times are now).
fn deadline_at(now_ms: i64, unix_ms: i64) -> Instant {
    let remaining = u64::try_from(unix_ms.saturating_sub(now_ms)).unwrap_or(0);
    Instant::now() + Duration::from_millis(remaining)
}

fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(365 * 24 * 3600)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_count_from_the_injected_clock_not_the_system_time() {
        // The host's clock reads 1 s after the epoch; the opening expires a
        // minute later: the deadline is a minute from now, whatever the
        // system's time.
        let before = Instant::now();
        let at = deadline_at(1_000, 61_000);
        assert!(at >= before + Duration::from_secs(60));
        assert!(at <= Instant::now() + Duration::from_secs(60));
        // A time the clock has passed is now.
        assert!(deadline_at(61_000, 1_000) <= Instant::now());
    }

    /// The host's transport (as the writer holds it) and the device's.
    fn transports() -> (Mutex<Transport>, Transport) {
        let host = bothy_noise::StaticKeypair::generate().unwrap();
        let (session_id, host_id) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let mut device = bothy_noise::Initiator::new(session_id, host_id, &host.public()).unwrap();
        let mut responder = Responder::new(session_id, host_id, &host).unwrap();
        responder
            .read_message1(&device.write_message1(b"token").unwrap())
            .unwrap();
        let (message2, host_transport) = responder.write_message2(b"{}").unwrap();
        let (_, device_transport) = device.read_message2(&message2).unwrap();
        (Mutex::new(host_transport), device_transport)
    }

    /// What the device reads of the sent messages: (frame type, length of
    /// the frame's body).
    fn read(device: &mut Transport, sent: &[Message]) -> Vec<(u8, usize)> {
        sent.iter()
            .map(|message| {
                let plain = device.read_message(&message.clone().into_data()).unwrap();
                (plain[0], plain.len() - 1)
            })
            .collect()
    }

    /// `frame`, sent into the writer's channel `after` from now.
    fn later(frames: &mpsc::Sender<OutFrame>, after: Duration, frame: OutFrame) {
        let frames = frames.clone();
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            frames.send(frame).await.unwrap();
        });
    }

    const CHUNK: usize = 4096;

    /// One batch from a first chunk of `a`: what `send_batch` took, how long
    /// it waited, and what the device reads of the messages it sent.
    async fn batch(
        host: &Mutex<Transport>,
        device: &mut Transport,
        frames: &mut mpsc::Receiver<OutFrame>,
        streaming: bool,
    ) -> (Result<usize, ()>, Duration, Vec<(u8, usize)>) {
        let mut sent: Vec<Message> = Vec::new();
        let started = Instant::now();
        let first = OutFrame::Data(vec![b'a'; CHUNK]);
        let taken = send_batch(&mut sent, host, first, frames, streaming).await;
        (taken, started.elapsed(), read(device, &sent))
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_outside_a_stream_goes_out_at_once() {
        let (host, mut device) = transports();
        let (frames_tx, mut frames) = mpsc::channel(8);
        later(
            &frames_tx,
            Duration::from_millis(1),
            OutFrame::Data(vec![b'b'; CHUNK]),
        );
        let (taken, waited, read) = batch(&host, &mut device, &mut frames, false).await;
        assert_eq!(taken, Ok(CHUNK));
        assert_eq!(waited, Duration::ZERO);
        assert_eq!(read, [(0x02, CHUNK)]);
    }

    #[tokio::test(start_paused = true)]
    async fn while_output_streams_the_last_frame_fills_for_up_to_the_wait() {
        let (host, mut device) = transports();
        let (frames_tx, mut frames) = mpsc::channel(8);
        // Within the wait: one frame of both chunks.
        later(
            &frames_tx,
            Duration::from_millis(1),
            OutFrame::Data(vec![b'b'; CHUNK]),
        );
        // After it: the next batch's.
        later(
            &frames_tx,
            STREAM_FILL_WAIT + Duration::from_millis(1),
            OutFrame::Data(vec![b'c'; CHUNK]),
        );
        let (taken, waited, read) = batch(&host, &mut device, &mut frames, true).await;
        assert_eq!(taken, Ok(2 * CHUNK));
        assert_eq!(waited, STREAM_FILL_WAIT);
        assert_eq!(read, [(0x02, 2 * CHUNK)]);
    }

    #[tokio::test(start_paused = true)]
    async fn an_exit_or_a_flush_marker_ends_the_wait() {
        let (host, mut device) = transports();
        let (frames_tx, mut frames) = mpsc::channel(8);
        // The exit during the wait: the output before it, then the exit, at once.
        later(&frames_tx, Duration::from_millis(1), OutFrame::Exit(7));
        let (taken, waited, read) = batch(&host, &mut device, &mut frames, true).await;
        assert_eq!(taken, Ok(CHUNK));
        assert_eq!(waited, Duration::from_millis(1));
        assert_eq!(read, [(0x02, CHUNK), (0x05, 4)]);

        // A flush marker queued with the output: nobody waits for it longer.
        let ack = core::FlushAck::default();
        frames_tx
            .send(OutFrame::Flushed(ack.clone()))
            .await
            .unwrap();
        later(
            &frames_tx,
            Duration::from_millis(1),
            OutFrame::Data(vec![b'b'; CHUNK]),
        );
        let (taken, waited, read) = batch(&host, &mut device, &mut frames, true).await;
        assert_eq!(taken, Ok(CHUNK));
        assert_eq!(waited, Duration::ZERO);
        assert_eq!(read, [(0x02, CHUNK)]);
        ack.wait().await;
    }
}
