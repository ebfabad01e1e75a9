//! One terminal session on the device side (6.1 steps 5-7, 5.2, 5.4): the
//! device stream with `identify` and `ready`, Noise NK as the initiator with
//! the host key of the grant, the frame `start` with the local size, then
//! stdin → data frames (through the `~` escapes), SIGWINCH → resize, and
//! output → the output filter → stdout, until the exit frame and the close.

use std::io::{Read, Write};

use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;
use uuid::Uuid;
use zeroize::Zeroizing;

use bothy_api::terminal::TerminalSessionGrant;
use bothy_net::ServerSocket;
use bothy_noise::{EphemeralKey, Initiator, MAX_MESSAGE_LEN, Transport};
use bothy_proto::b64;
use bothy_proto::frame::{Direction, Frame, MAX_DATA_LEN};
use bothy_proto::stream::{self, DeviceMessage, Identify, ServerMessage};

use crate::api::Api;
use crate::close::StreamEnd;
use crate::error::ClientError;
use crate::escape::{EscapeReader, HELP, Input};
use crate::filter::OutputFilter;
use crate::pins::Pin;
use crate::tty::{self, RawMode};

/// What open and attach answer (DESIGN §3.4).
pub struct Grant {
    /// The session.
    pub session_id: Uuid,
    /// The terminal session token (message 1's payload).
    pub token: Zeroizing<String>,
    /// The host's static Noise key.
    pub noise_public_key: [u8; 32],
    /// The key, its generation and fingerprint as the server named them.
    pub pin: Pin,
}

impl std::fmt::Debug for Grant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grant")
            .field("session_id", &self.session_id)
            .finish_non_exhaustive()
    }
}

impl Grant {
    /// Reads the answer of open or attach.
    pub fn from_api(grant: &TerminalSessionGrant) -> Result<Grant, ClientError> {
        let session_id = Uuid::parse_str(&grant.session_id)
            .map_err(|_| ClientError::Protocol("a session_id that is no UUID".into()))?;
        let noise_public_key = b64::decode_array(&grant.noise_public_key)
            .map_err(|_| ClientError::Protocol("a noise_public_key of the wrong form".into()))?;
        Ok(Grant {
            session_id,
            token: Zeroizing::new(grant.token.clone()),
            noise_public_key,
            pin: Pin {
                noise_public_key: grant.noise_public_key.clone(),
                key_generation: grant.key_generation,
                key_fingerprint: grant.key_fingerprint.clone(),
            },
        })
    }
}

/// The local input of a session: stdin read on its own thread, with the
/// `~` escapes, kept across a reattach (one reader of the terminal only).
pub struct LocalInput {
    receiver: tokio::sync::mpsc::Receiver<Vec<u8>>,
    escapes: EscapeReader,
    open: bool,
    /// Typed bytes after a line read by [`LocalInput::read_line`].
    rest: Vec<u8>,
}

impl std::fmt::Debug for LocalInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalInput").finish_non_exhaustive()
    }
}

impl LocalInput {
    /// Starts reading stdin.
    pub fn start() -> LocalInput {
        LocalInput {
            receiver: stdin_reader(),
            escapes: EscapeReader::default(),
            open: true,
            rest: Vec::new(),
        }
    }

    /// A line typed outside raw mode (the answer to a question asked while
    /// a session waits, e.g. the step-up of a reattach); `None` at the end
    /// of the input.
    pub async fn read_line(&mut self) -> Option<String> {
        let mut line = std::mem::take(&mut self.rest);
        loop {
            if let Some(end) = line.iter().position(|b| *b == b'\n' || *b == b'\r') {
                self.rest = line.split_off(end + 1);
                line.truncate(end);
                return Some(String::from_utf8_lossy(&line).trim().to_owned());
            }
            match self.receiver.recv().await {
                Some(bytes) => line.extend_from_slice(&bytes),
                None => {
                    self.open = false;
                    return None;
                }
            }
        }
    }
}

/// How a session ended for this client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// The program ended with this exit code (exit frame, then 4100).
    Exited(i32),
    /// The stream closed with a code (after `~.` normally 4100 client_closed).
    Closed {
        /// The close.
        end: StreamEnd,
        /// The person typed `~.`.
        by_escape: bool,
    },
    /// The connection broke without a close frame, or the server answered
    /// nothing (not even a pong) for this many seconds.
    Lost(Option<u64>),
    /// The person typed `~&`: the session runs on, detached.
    Detached,
}

/// How many keepalive intervals without any frame of the server make the
/// connection count as lost (ssh's ServerAliveCountMax default).
pub const ALIVE_COUNT_MAX: u32 = 3;

/// How long the handshake of a device stream may wait for the server's
/// `ready` and the host's message 2.
const HANDSHAKE_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// A device stream after the handshake.
pub struct Connected {
    session_id: Uuid,
    sink: SplitSink<ServerSocket, Message>,
    stream: SplitStream<ServerSocket>,
    transport: Transport,
}

impl std::fmt::Debug for Connected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connected").finish_non_exhaustive()
    }
}

fn close_of(message: &Message) -> Option<StreamEnd> {
    match message {
        Message::Close(frame) => Some(match frame {
            Some(frame) => StreamEnd {
                code: u16::from(frame.code),
                reason: frame.reason.to_string(),
            },
            None => StreamEnd {
                code: 1005,
                reason: String::new(),
            },
        }),
        _ => None,
    }
}

/// The next message that is not a ping or pong; a close ends with its code.
async fn next_message(stream: &mut SplitStream<ServerSocket>) -> Result<Message, ClientError> {
    loop {
        match stream.next().await {
            None | Some(Err(_)) => {
                return Err(ClientError::Stream(StreamEnd {
                    code: 1006,
                    reason: String::new(),
                }));
            }
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
            Some(Ok(message)) => {
                if let Some(end) = close_of(&message) {
                    return Err(ClientError::Stream(end));
                }
                return Ok(message);
            }
        }
    }
}

/// Connects the device stream of the grant and runs the handshake (message
/// 1 with the token, message 2 from the host).
pub async fn connect(
    api: &Api,
    access_token: &str,
    host_id: Uuid,
    grant: &Grant,
    ephemeral: EphemeralKey,
) -> Result<Connected, ClientError> {
    let path = stream::stream_path(&grant.session_id);
    let (ws, _) = api
        .connector()
        .websocket(api.server(), &path, MAX_MESSAGE_LEN)
        .await
        .map_err(|e| api.unreachable(e))?;
    let (mut sink, mut stream) = ws.split();
    let identify = DeviceMessage::Identify(Identify {
        access_token: Some(access_token.to_owned()),
    })
    .to_json();
    sink.send(Message::text(identify))
        .await
        .map_err(|_| lost())?;
    match next_message_within(&mut stream).await? {
        Message::Text(text) => match ServerMessage::decode(text.as_bytes(), 4096) {
            Ok(ServerMessage::Ready(_)) => {}
            Err(_) => {
                return Err(ClientError::Protocol(
                    "an answer to identify that is not ready".into(),
                ));
            }
        },
        _ => return Err(ClientError::Protocol("a binary frame before ready".into())),
    }
    let mut initiator = Initiator::with_ephemeral(
        grant.session_id,
        host_id,
        &grant.noise_public_key,
        ephemeral,
    )
    .map_err(|_| ClientError::Protocol("the host key is not usable".into()))?;
    let message1 = initiator
        .write_message1(grant.token.as_bytes())
        .map_err(|_| ClientError::Protocol("message 1 could not be made".into()))?;
    sink.send(Message::binary(message1))
        .await
        .map_err(|_| lost())?;
    let message2 = match next_message_within(&mut stream).await? {
        Message::Binary(bytes) => bytes,
        _ => {
            return Err(ClientError::Protocol(
                "a text frame instead of message 2".into(),
            ));
        }
    };
    let (_payload, transport) = initiator.read_message2(&message2).map_err(|_| {
        // Message 2 that does not decrypt: not the host the key belongs to.
        ClientError::Stream(StreamEnd {
            code: bothy_proto::codes::CloseCode::TerminalHandshakeFailed.as_u16(),
            reason: "handshake_failed".into(),
        })
    })?;
    Ok(Connected {
        session_id: grant.session_id,
        sink,
        stream,
        transport,
    })
}

/// [`next_message`] within [`HANDSHAKE_WAIT`]; a server that says nothing
/// for so long counts as lost.
async fn next_message_within(
    stream: &mut SplitStream<ServerSocket>,
) -> Result<Message, ClientError> {
    tokio::time::timeout(HANDSHAKE_WAIT, next_message(stream))
        .await
        .map_err(|_| lost())?
}

fn lost() -> ClientError {
    ClientError::Stream(StreamEnd {
        code: 1006,
        reason: String::new(),
    })
}

impl Connected {
    async fn send(&mut self, frame: Frame<'_>) -> Result<(), ClientError> {
        let plain = frame
            .to_vec(Direction::DeviceToHost)
            .map_err(|_| ClientError::Protocol("a frame out of range".into()))?;
        let message = self
            .transport
            .write_message(&plain)
            .map_err(|_| ClientError::Protocol("the transport refused to encrypt".into()))?;
        self.sink
            .send(Message::binary(message))
            .await
            .map_err(|_| lost())
    }

    /// Runs the session in this terminal until it ends: raw mode, `start`,
    /// input, resizes and output, a WebSocket ping every `alive_interval`.
    pub async fn run(
        mut self,
        input: &mut LocalInput,
        alive_interval: std::time::Duration,
    ) -> Result<Ended, ClientError> {
        let raw = RawMode::enter();
        let result = self.pump(input, alive_interval).await;
        drop(raw);
        result
    }

    /// The client leaves; the session stays detached on the server.
    fn detached(&self, why: &'static str) -> ClientError {
        ClientError::Detached {
            session_id: self.session_id,
            why,
        }
    }

    async fn pump(
        &mut self,
        input: &mut LocalInput,
        alive_interval: std::time::Duration,
    ) -> Result<Ended, ClientError> {
        let mut size = tty::window_size();
        self.send(Frame::Start(size)).await?;
        if !input.rest.is_empty() {
            let typed = std::mem::take(&mut input.rest);
            for step in input.escapes.feed(&typed) {
                if let Input::Data(bytes) = step {
                    for chunk in bytes.chunks(MAX_DATA_LEN) {
                        self.send(Frame::Data(chunk)).await?;
                    }
                }
            }
        }
        use tokio::signal::unix::{Signal, SignalKind};
        let signal = |kind, what: &str| -> Result<Signal, ClientError> {
            tokio::signal::unix::signal(kind).map_err(|e| ClientError::Storage {
                what: what.to_owned(),
                source: e,
            })
        };
        let mut winch = signal(SignalKind::window_change(), "SIGWINCH")?;
        // SIGTERM and SIGHUP (the terminal went away) end this client with the
        // terminal restored; the session stays, detached, for an attach.
        let mut term = signal(SignalKind::terminate(), "SIGTERM")?;
        let mut hangup = signal(SignalKind::hangup(), "SIGHUP")?;
        // After `~.` the server closes the stream; should it not within this
        // time, the client ends anyway (the person asked to leave).
        let mut close_deadline: Option<tokio::time::Instant> = None;
        let mut filter = OutputFilter::new();
        let mut out = Vec::with_capacity(MAX_DATA_LEN);
        let mut exit_code = None;
        let mut by_escape = false;
        let mut closing = false;
        // Keepalive (issue 15 item 9): a ping every interval; any frame of
        // the server (a pong too) shows it is there. Nothing for
        // ALIVE_COUNT_MAX intervals: the connection counts as lost, and the
        // session is reattached as after a reset.
        let start = tokio::time::Instant::now() + alive_interval;
        let mut alive = tokio::time::interval_at(start, alive_interval);
        alive.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let dead_after = alive_interval.saturating_mul(ALIVE_COUNT_MAX);
        let mut last_seen = tokio::time::Instant::now();
        loop {
            tokio::select! {
                message = self.stream.next() => {
                    let message = match message {
                        None | Some(Err(_)) => return Ok(Ended::Lost(None)),
                        Some(Ok(message)) => message,
                    };
                    last_seen = tokio::time::Instant::now();
                    if let Some(end) = close_of(&message) {
                        out.clear();
                        filter.finish(&mut out);
                        write_stdout(&out).map_err(|_| self.detached("output closed"))?;
                        if let (Some(code), Some(bothy_proto::codes::CloseCode::TerminalClosed)) =
                            (exit_code, end.close_code())
                        {
                            if end.reason == "process_exited" {
                                return Ok(Ended::Exited(code));
                            }
                        }
                        return Ok(Ended::Closed { end, by_escape });
                    }
                    let Message::Binary(bytes) = message else { continue };
                    let plain = self.transport.read_message(&bytes).map_err(|_| {
                        ClientError::Stream(StreamEnd {
                            code: bothy_proto::codes::CloseCode::TerminalHandshakeFailed.as_u16(),
                            reason: "handshake_failed".into(),
                        })
                    })?;
                    match Frame::decode(&plain, Direction::HostToDevice) {
                        Ok(Frame::Data(bytes)) => {
                            out.clear();
                            filter.filter(bytes, &mut out);
                            write_stdout(&out).map_err(|_| self.detached("output closed"))?;
                        }
                        Ok(Frame::Exit(code)) => exit_code = Some(code),
                        Ok(Frame::ReplayBegin | Frame::ReplayEnd) => {}
                        Ok(_) | Err(_) => {
                            return Err(ClientError::Protocol("a frame the host may not send".into()));
                        }
                    }
                }
                typed = input.receiver.recv(), if input.open && !closing => {
                    let Some(typed) = typed else {
                        input.open = false;
                        continue;
                    };
                    for step in input.escapes.feed(&typed) {
                        match step {
                            Input::Data(bytes) => {
                                for chunk in bytes.chunks(MAX_DATA_LEN) {
                                    self.send(Frame::Data(chunk)).await?;
                                }
                            }
                            Input::Help => {
                                write_stdout(HELP.as_bytes())
                                    .map_err(|_| self.detached("output closed"))?;
                            }
                            Input::Detach => {
                                // A close frame without the frame close: the
                                // relay detaches the session (6.2).
                                let _ = self.sink.close().await;
                                return Ok(Ended::Detached);
                            }
                            Input::Close => {
                                by_escape = true;
                                closing = true;
                                close_deadline = Some(tokio::time::Instant::now() + CLOSE_WAIT);
                                self.send(Frame::Close).await?;
                                break;
                            }
                        }
                    }
                }
                _ = term.recv() => return Err(self.detached("SIGTERM")),
                _ = hangup.recv() => return Err(self.detached("SIGHUP")),
                _ = alive.tick() => {
                    if last_seen.elapsed() >= dead_after {
                        return Ok(Ended::Lost(Some(dead_after.as_secs())));
                    }
                    if self.sink.send(Message::Ping(Vec::new().into())).await.is_err() {
                        return Ok(Ended::Lost(None));
                    }
                }
                _ = sleep_until_or_never(close_deadline) => {
                    return Ok(Ended::Closed {
                        end: StreamEnd { code: 1000, reason: "client_closed".into() },
                        by_escape,
                    });
                }
                _ = winch.recv() => {
                    let now = tty::window_size();
                    if now != size {
                        size = now;
                        self.send(Frame::Resize(size)).await?;
                    }
                }
            }
        }
    }
}

/// How long the client waits for the server's close after `~.`.
const CLOSE_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

async fn sleep_until_or_never(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// Writes the filtered output; an output that is gone (a closed pipe, a
/// terminal that went away) ends this client like SIGHUP does: the session
/// stays, detached, for an attach (like ssh, which ends on SIGPIPE).
fn write_stdout(bytes: &[u8]) -> std::io::Result<()> {
    if bytes.is_empty() {
        return Ok(());
    }
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(bytes).and_then(|()| stdout.flush())
}

/// Reads stdin on its own thread (a blocking read cannot be cancelled; the
/// process exits when the session ends).
fn stdin_reader() -> tokio::sync::mpsc::Receiver<Vec<u8>> {
    // Bounded: when the network is slow the typing waits here, not in memory.
    let (sender, receiver) = tokio::sync::mpsc::channel(16);
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin();
        let mut buffer = vec![0u8; 16 * 1024];
        loop {
            match stdin.read(&mut buffer) {
                Ok(0) => break,
                Ok(n) => {
                    if sender.blocking_send(buffer[..n].to_vec()).is_err() {
                        break;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
    });
    receiver
}
