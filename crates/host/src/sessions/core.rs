//! The task of one PTY: output to the ring buffer and the attached device,
//! input and sizes to the helper, the idle and detach timers, and the end.
//!
//! Backpressure: while a device is attached, output waits for room toward it
//! and the core stops reading the helper, so the helper stops reading the PTY
//! (the program waits, as with ssh). While no device is attached the core keeps
//! reading into the ring buffer, so the program never blocks (6.2).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use bothy_proto::codes::{CloseDetail, CloseReason};
use bothy_proto::control::SessionEnded;
use bothy_proto::frame::{MAX_DATA_LEN, TerminalSize};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use uuid::Uuid;

use super::Sessions;
use super::scrollback::{Scrollback, SinceStart};
use crate::channel::codec::{FrameReader, FrameWriter};
use crate::channel::{ChannelReader, ChannelWriter, FromHelper, ToHelper};

/// How long the exit frame may wait for room toward a slow device before the
/// end is reported anyway.
const EXIT_FLUSH_LIMIT: Duration = Duration::from_secs(5);

/// What the core sends toward the device (the data connection's writer turns
/// each into frames of at most [`MAX_DATA_LEN`] bytes, encrypted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutFrame {
    /// PTY output.
    Data(Vec<u8>),
    /// The exit code (5.4).
    Exit(i32),
    /// Opens a replay.
    ReplayBegin,
    /// Closes a replay.
    ReplayEnd,
    /// No frame: the writer signals it once every frame before it is on the
    /// socket (the exit frame goes out before `session.ended`, so the
    /// server's end never overtakes it).
    Flushed(FlushAck),
}

/// The signal of [`OutFrame::Flushed`].
#[derive(Debug, Clone, Default)]
pub struct FlushAck(Arc<tokio::sync::Notify>);

impl FlushAck {
    /// The writer has sent everything before the marker.
    pub fn done(&self) {
        self.0.notify_one();
    }

    /// Waits for [`FlushAck::done`].
    pub async fn wait(&self) {
        self.0.notified().await;
    }
}

impl PartialEq for FlushAck {
    fn eq(&self, other: &FlushAck) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for FlushAck {}

/// Commands to the core.
#[derive(Debug)]
pub enum CoreCmd {
    /// An attach's `start` arrived: answer the replay as the buffer is now and
    /// collect the output from now on until [`CoreCmd::Live`].
    Snapshot(oneshot::Sender<Vec<u8>>),
    /// The data connection with this number attached a device: send it the
    /// output collected since the snapshot (if any), then the live output.
    Live(u64, mpsc::Sender<OutFrame>),
    /// The data connection with this number is gone (not by an end): the
    /// session is detached, unless a newer connection attached meanwhile.
    Detached(u64),
    /// The size from `start` of an attach (not input).
    SetSize(TerminalSize),
    /// Input for the PTY (a `data` frame): counts for idle.
    Input(Vec<u8>),
    /// A new size (`resize`, or `start` of an attach): counts for idle.
    Resize(TerminalSize),
    /// The server values of the latest handshake (idle and detach, 2.2 item 5).
    Timers {
        /// `terminal.idle_timeout`.
        idle: Duration,
        /// `terminal.detach_grace`.
        detach: Duration,
    },
    /// End now and report `session.ended` with this reason and detail.
    End(CloseReason, Option<CloseDetail>),
    /// End now without a report (the server ended the session: 4100,
    /// `session.close`, or the host's state).
    Kill,
}

/// What the helper sends about a PTY, as the core reads it.
pub trait PtyOutput: Send + 'static {
    /// The next message; `None` once the session connection ended or broke
    /// (the helper ends the tree then). Cancel-safe: the core waits on it in
    /// a `select!` beside its commands and timers.
    fn recv(&mut self) -> impl Future<Output = Option<FromHelper>> + Send;
}

/// Where the core sends input, sizes and the end of a PTY.
pub trait PtyInput: Send + 'static {
    /// Sends one message; `Err` once the session connection is gone. Not
    /// cancel-safe: the core awaits it to the end.
    fn send(&mut self, message: ToHelper) -> impl Future<Output = Result<(), PtyGone>> + Send;

    /// Sends `End` if that needs no wait; the core closes the connection
    /// right after, which ends the tree as well (so a half-sent `End` does
    /// no harm).
    fn end_now(&mut self);
}

/// The session connection to the helper is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PtyGone;

/// The PTY of a session as the core sees it: the two halves of its session
/// connection of the local channel, read and written by the core itself (no
/// task in between: one hand-off less each way for every keystroke and its
/// echo, issue 20).
#[derive(Debug)]
pub struct PtyIo<R = ChannelReader, W = ChannelWriter> {
    /// From the helper.
    pub from_helper: R,
    /// To the helper.
    pub to_helper: W,
}

impl PtyOutput for ChannelReader {
    async fn recv(&mut self) -> Option<FromHelper> {
        // A frame the decoder refuses leaves the stream out of step: the
        // connection counts as broken.
        FrameReader::recv(self).await.ok().flatten()
    }
}

impl PtyInput for ChannelWriter {
    async fn send(&mut self, message: ToHelper) -> Result<(), PtyGone> {
        FrameWriter::send(self, &message).await.map_err(|_| PtyGone)
    }

    fn end_now(&mut self) {
        use futures_util::FutureExt as _;
        let _ = FrameWriter::send(self, &ToHelper::End).now_or_never();
    }
}

/// The core's starting values.
#[derive(Debug, Clone, Copy)]
pub struct CoreSettings {
    /// The session.
    pub session_id: Uuid,
    /// `host_service.scrollback_bytes`.
    pub scrollback_bytes: usize,
    /// `terminal.idle_timeout` from the hello of the handshake.
    pub idle: Duration,
    /// `terminal.detach_grace` from the hello of the handshake.
    pub detach: Duration,
}

/// Runs the core until the session ends.
pub async fn run<R: PtyOutput, W: PtyInput>(
    sessions: Arc<Sessions>,
    settings: CoreSettings,
    pty: PtyIo<R, W>,
    mut commands: mpsc::Receiver<CoreCmd>,
) {
    let PtyIo {
        mut from_helper,
        mut to_helper,
    } = pty;
    let session_id = settings.session_id;
    let mut idle = settings.idle;
    let mut detach = settings.detach;
    let mut ring = Scrollback::new(settings.scrollback_bytes);
    let mut since_start: Option<SinceStart> = None;
    let mut sink: Option<mpsc::Sender<OutFrame>> = None;
    let mut sink_link: u64 = 0;
    let mut queue: VecDeque<OutFrame> = VecDeque::new();
    let mut last_input = Instant::now();
    // A PTY starts with its device attached; until `Live` it counts as detached.
    let mut detached_since: Option<Instant> = Some(Instant::now());

    let report = loop {
        let idle_at = last_input + idle;
        let detach_at = detached_since.map(|since| since + detach);
        let sending = sink.is_some() && !queue.is_empty();
        // An owned reservation on a clone, so the branches below may replace
        // the sink while this future waits.
        let sink_clone = if sending { sink.clone() } else { None };
        let reserve = async move {
            match sink_clone {
                Some(sender) => sender.reserve_owned().await.map_err(|_| ()),
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            command = commands.recv() => {
                let Some(command) = command else {
                    break None;
                };
                match command {
                    CoreCmd::Snapshot(reply) => {
                        sink = None;
                        queue.clear();
                        let _ = reply.send(ring.replay());
                        since_start = Some(SinceStart::new(settings.scrollback_bytes));
                    }
                    CoreCmd::Live(link, new_sink) => {
                        sink_link = link;
                        queue.clear();
                        if let Some(collected) = since_start.take() {
                            let bytes = collected.into_bytes();
                            for chunk in bytes.chunks(MAX_DATA_LEN) {
                                queue.push_back(OutFrame::Data(chunk.to_vec()));
                            }
                        }
                        sink = Some(new_sink);
                        detached_since = None;
                    }
                    CoreCmd::Detached(link) => {
                        if link != sink_link {
                            continue;
                        }
                        sink = None;
                        queue.clear();
                        since_start = None;
                        if detached_since.is_none() {
                            detached_since = Some(Instant::now());
                        }
                    }
                    CoreCmd::Input(bytes) => {
                        last_input = Instant::now();
                        if to_helper.send(ToHelper::Input(bytes)).await.is_err() {
                            break Some(ended(session_id, CloseReason::ProcessExited, None, None));
                        }
                    }
                    CoreCmd::Resize(size) => {
                        last_input = Instant::now();
                        if to_helper.send(ToHelper::Resize(size)).await.is_err() {
                            break Some(ended(session_id, CloseReason::ProcessExited, None, None));
                        }
                    }
                    CoreCmd::SetSize(size) => {
                        if to_helper.send(ToHelper::Resize(size)).await.is_err() {
                            break Some(ended(session_id, CloseReason::ProcessExited, None, None));
                        }
                    }
                    CoreCmd::Timers { idle: i, detach: d } => {
                        idle = i;
                        detach = d;
                    }
                    CoreCmd::End(reason, detail) => {
                        to_helper.end_now();
                        break Some(ended(session_id, reason, detail, None));
                    }
                    CoreCmd::Kill => {
                        to_helper.end_now();
                        break None;
                    }
                }
            }
            permit = reserve, if sending => {
                match permit {
                    Ok(permit) => {
                        if let Some(frame) = queue.pop_front() {
                            permit.send(frame);
                        }
                    }
                    Err(_) => {
                        // The data connection's writer is gone: detached.
                        sink = None;
                        queue.clear();
                        detached_since = Some(Instant::now());
                    }
                }
            }
            message = from_helper.recv(), if !sending => {
                match message {
                    Some(FromHelper::Output(bytes)) => {
                        ring.push(&bytes);
                        if let Some(collected) = since_start.as_mut() {
                            collected.push(&bytes);
                        } else if sink.is_some() {
                            queue.push_back(OutFrame::Data(bytes));
                        }
                    }
                    Some(FromHelper::Exited(code)) => {
                        if let (Some(sink), Some(code)) = (sink.as_ref(), code) {
                            queue.push_back(OutFrame::Exit(code));
                            let written = FlushAck::default();
                            queue.push_back(OutFrame::Flushed(written.clone()));
                            // The exit frame is on the data connection's socket
                            // before the end goes out on the control connection
                            // (5.4: exit, then session.ended).
                            let flush = async {
                                while let Some(frame) = queue.pop_front() {
                                    if sink.send(frame).await.is_err() {
                                        return;
                                    }
                                }
                                written.wait().await;
                            };
                            let _ = tokio::time::timeout(EXIT_FLUSH_LIMIT, flush).await;
                        }
                        break Some(ended(session_id, CloseReason::ProcessExited, None, code));
                    }
                    // The session connection to the helper broke: the helper ends
                    // the tree; process_exited without an exit code (D-M2-45-16).
                    None => {
                        break Some(ended(session_id, CloseReason::ProcessExited, None, None));
                    }
                    Some(other) => {
                        tracing::warn!(message = ?message_kind(&other), "unexpected message from the helper; the session ends");
                        to_helper.end_now();
                        break Some(ended(session_id, CloseReason::ProcessExited, None, None));
                    }
                }
            }
            () = tokio::time::sleep_until(idle_at) => {
                to_helper.end_now();
                break Some(ended(session_id, CloseReason::IdleTimeout, None, None));
            }
            () = async {
                match detach_at {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            } => {
                to_helper.end_now();
                break Some(ended(session_id, CloseReason::DetachExpired, None, None));
            }
        }
    };
    // Dropping the sender closes the session connection: the helper ends the
    // tree even if `End` did not arrive.
    drop(to_helper);
    sessions.pty_ended(session_id, report);
}

fn ended(
    session_id: Uuid,
    close_reason: CloseReason,
    close_detail: Option<CloseDetail>,
    exit_code: Option<i32>,
) -> SessionEnded {
    SessionEnded {
        session_id,
        close_reason,
        close_detail,
        exit_code,
    }
}

fn message_kind(message: &FromHelper) -> &'static str {
    match message {
        FromHelper::CheckResults(_) => "check_results",
        FromHelper::Started => "started",
        FromHelper::StartFailed(_) => "start_failed",
        FromHelper::Output(_) => "output",
        FromHelper::Exited(_) => "exited",
    }
}

#[cfg(test)]
mod tests;
