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
        to_helper,
    } = pty;
    let session_id = settings.session_id;
    let mut core = Core::new(settings, to_helper);
    let report = loop {
        let idle_at = core.last_input + core.idle;
        let detach_at = core.detached_since.map(|since| since + core.detach);
        let sending = core.sending();
        // An owned reservation on a clone, so the branches below may replace
        // the sink while this future waits.
        let reserve = reserve(if sending { core.sink.clone() } else { None });
        let next = tokio::select! {
            biased;
            command = commands.recv() => match command {
                Some(command) => core.command(command).await,
                None => Next::End(None),
            },
            permit = reserve, if sending => core.send_queued(permit),
            message = from_helper.recv(), if !sending => core.helper_message(message).await,
            () = tokio::time::sleep_until(idle_at) => core.end(CloseReason::IdleTimeout),
            () = sleep_until_some(detach_at) => core.end(CloseReason::DetachExpired),
        };
        if let Next::End(report) = next {
            break report;
        }
    };
    // Dropping the sender closes the session connection: the helper ends the
    // tree even if `End` did not arrive.
    drop(core.to_helper);
    sessions.pty_ended(session_id, report);
}

/// What one turn of the core's loop decides.
enum Next {
    /// The session goes on.
    Continue,
    /// The session is over; the end to report, if any.
    End(Option<SessionEnded>),
}

/// The state of one PTY's core between turns of its loop.
struct Core<W> {
    session_id: Uuid,
    scrollback_bytes: usize,
    idle: Duration,
    detach: Duration,
    ring: Scrollback,
    /// Output since the snapshot, until the device is live.
    since_start: Option<SinceStart>,
    /// The attached device's way out, and the link it came on.
    sink: Option<mpsc::Sender<OutFrame>>,
    sink_link: u64,
    /// Frames waiting for room toward the device.
    queue: VecDeque<OutFrame>,
    last_input: Instant,
    /// `None` while a device is attached.
    detached_since: Option<Instant>,
    to_helper: W,
}

impl<W: PtyInput> Core<W> {
    fn new(settings: CoreSettings, to_helper: W) -> Core<W> {
        Core {
            session_id: settings.session_id,
            scrollback_bytes: settings.scrollback_bytes,
            idle: settings.idle,
            detach: settings.detach,
            ring: Scrollback::new(settings.scrollback_bytes),
            since_start: None,
            sink: None,
            sink_link: 0,
            queue: VecDeque::new(),
            last_input: Instant::now(),
            // A PTY starts with its device attached; until `Live` it counts
            // as detached.
            detached_since: Some(Instant::now()),
            to_helper,
        }
    }

    /// Whether output waits for room toward the device (then the core stops
    /// reading the helper: backpressure).
    fn sending(&self) -> bool {
        self.sink.is_some() && !self.queue.is_empty()
    }

    /// The end of the session for `reason`, without detail or exit code.
    fn ended(&self, reason: CloseReason) -> Next {
        Next::End(Some(ended(self.session_id, reason, None, None)))
    }

    /// The helper is told to end the tree now, and the session ends for `reason`.
    fn end(&mut self, reason: CloseReason) -> Next {
        self.to_helper.end_now();
        self.ended(reason)
    }

    /// Forgets the device: no sink, nothing queued.
    fn drop_sink(&mut self) {
        self.sink = None;
        self.queue.clear();
    }

    /// Sends `message` to the helper; a gone helper ends the session.
    async fn send_to_helper(&mut self, message: ToHelper) -> Next {
        match self.to_helper.send(message).await {
            Ok(()) => Next::Continue,
            Err(PtyGone) => self.ended(CloseReason::ProcessExited),
        }
    }

    /// One command of the service.
    async fn command(&mut self, command: CoreCmd) -> Next {
        match command {
            CoreCmd::Snapshot(reply) => {
                self.drop_sink();
                let _ = reply.send(self.ring.replay());
                self.since_start = Some(SinceStart::new(self.scrollback_bytes));
                Next::Continue
            }
            CoreCmd::Live(link, new_sink) => {
                self.sink_link = link;
                self.queue.clear();
                if let Some(collected) = self.since_start.take() {
                    let bytes = collected.into_bytes();
                    for chunk in bytes.chunks(MAX_DATA_LEN) {
                        self.queue.push_back(OutFrame::Data(chunk.to_vec()));
                    }
                }
                self.sink = Some(new_sink);
                self.detached_since = None;
                Next::Continue
            }
            CoreCmd::Detached(link) => {
                if link != self.sink_link {
                    return Next::Continue;
                }
                self.drop_sink();
                self.since_start = None;
                if self.detached_since.is_none() {
                    self.detached_since = Some(Instant::now());
                }
                Next::Continue
            }
            CoreCmd::Input(bytes) => {
                self.last_input = Instant::now();
                self.send_to_helper(ToHelper::Input(bytes)).await
            }
            CoreCmd::Resize(size) => {
                self.last_input = Instant::now();
                self.send_to_helper(ToHelper::Resize(size)).await
            }
            CoreCmd::SetSize(size) => self.send_to_helper(ToHelper::Resize(size)).await,
            CoreCmd::Timers { idle, detach } => {
                self.idle = idle;
                self.detach = detach;
                Next::Continue
            }
            CoreCmd::End(reason, detail) => {
                self.to_helper.end_now();
                Next::End(Some(ended(self.session_id, reason, detail, None)))
            }
            CoreCmd::Kill => {
                self.to_helper.end_now();
                Next::End(None)
            }
        }
    }

    /// Room toward the device: the next queued frame goes out; a gone writer
    /// of the data connection means detached.
    fn send_queued(&mut self, permit: Result<mpsc::OwnedPermit<OutFrame>, ()>) -> Next {
        match permit {
            Ok(permit) => {
                if let Some(frame) = self.queue.pop_front() {
                    permit.send(frame);
                }
            }
            Err(()) => {
                // The data connection's writer is gone: detached.
                self.drop_sink();
                self.detached_since = Some(Instant::now());
            }
        }
        Next::Continue
    }

    /// One message of the helper (`None`: the session connection broke).
    async fn helper_message(&mut self, message: Option<FromHelper>) -> Next {
        match message {
            Some(FromHelper::Output(bytes)) => {
                self.ring.push(&bytes);
                if let Some(collected) = self.since_start.as_mut() {
                    collected.push(&bytes);
                } else if self.sink.is_some() {
                    self.queue.push_back(OutFrame::Data(bytes));
                }
                Next::Continue
            }
            Some(FromHelper::Exited(code)) => {
                self.flush_exit(code).await;
                Next::End(Some(ended(
                    self.session_id,
                    CloseReason::ProcessExited,
                    None,
                    code,
                )))
            }
            // The session connection to the helper broke: the helper ends the
            // tree; process_exited without an exit code (D-M2-45-16).
            None => self.ended(CloseReason::ProcessExited),
            Some(other) => {
                tracing::warn!(message = ?message_kind(&other), "unexpected message from the helper; the session ends");
                self.end(CloseReason::ProcessExited)
            }
        }
    }

    /// With a device attached and an exit code, the exit frame is on the data
    /// connection's socket before the end goes out on the control connection
    /// (5.4: exit, then session.ended), waiting at most [`EXIT_FLUSH_LIMIT`].
    async fn flush_exit(&mut self, code: Option<i32>) {
        let (Some(sink), Some(code)) = (self.sink.as_ref(), code) else {
            return;
        };
        let queue = &mut self.queue;
        queue.push_back(OutFrame::Exit(code));
        let written = FlushAck::default();
        queue.push_back(OutFrame::Flushed(written.clone()));
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
}

/// An owned reservation of room on `sink`; never ready without one.
async fn reserve(sink: Option<mpsc::Sender<OutFrame>>) -> Result<mpsc::OwnedPermit<OutFrame>, ()> {
    match sink {
        Some(sender) => sender.reserve_owned().await.map_err(|_| ()),
        None => std::future::pending().await,
    }
}

/// Sleeps until `at`; never ready without one.
async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
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
