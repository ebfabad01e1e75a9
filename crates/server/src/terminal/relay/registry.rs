//! The registry of the relay (6.1, 6.2): which sides of which session are
//! here ([`Relay`] and its slots), what the relay tells a side's task
//! ([`Command`]), and each session's counters and limits. Data only, below
//! the relay's logic (`relay`, `side`, `store`, which reach the rest of the
//! server through `AppState`), so that `state` can hold a [`Relay`] without
//! importing that logic.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;
use uuid::Uuid;

use super::pipe::PipeReceiver;
use super::queue::QueueSender;
use crate::clock::UnixMillis;

/// Which sides of a session are connected on this process.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sides {
    /// The device stream passed its identify.
    pub device: bool,
    /// The host's data connection passed its identify.
    pub host: bool,
}

/// One side of a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Side {
    /// The device stream.
    Device,
    /// The host's data connection.
    Host,
}

impl Side {
    /// The label `side` of `bothy_terminal_relay_unpaired` (spec 9 names the
    /// device's side `client`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Side::Device => "client",
            Side::Host => "host",
        }
    }
}

/// What the relay tells a side's task.
#[derive(Debug)]
pub(crate) enum Command {
    /// Close with this code and close text.
    Close(u16, String),
    /// The session ended: close with this code and text, but the last words
    /// of the session go through first. The host's side sends its close
    /// frame and keeps forwarding what the host sent before its answer (the
    /// exit frame of 5.4 travels on the data connection, the end on the
    /// control connection, so the end may arrive first); the device's side
    /// closes once everything the host's side forwarded was written to it.
    /// Both bounded by [`crate::shutdown::CLOSE_ANSWER_WAIT`].
    End(u16, String),
}

/// The counters of one session, shared by its sides' tasks.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    /// Device-to-host bytes not yet written to `bytes_in`.
    pub(super) bytes_in: AtomicU64,
    /// Host-to-device bytes not yet written to `bytes_out`.
    pub(super) bytes_out: AtomicU64,
    /// The time of the last device byte (0: none since the last write).
    pub(super) pending_input: AtomicI64,
    /// The time of the last device byte ever seen here (0: none).
    pub(super) last_input: AtomicI64,
    /// How many readers of this session wait for room now.
    pub(super) stalled: AtomicUsize,
    /// How many waits for room have begun (each counts its stall timer from
    /// its own start).
    pub(super) stalls: AtomicU64,
}

impl Stats {
    /// Counts a message forwarded from `side`.
    pub(crate) fn count(&self, side: Side, len: usize, now: UnixMillis) {
        let len = len as u64;
        match side {
            Side::Device => {
                self.bytes_in.fetch_add(len, Ordering::Relaxed);
                self.pending_input.store(now, Ordering::Relaxed);
                self.last_input.store(now, Ordering::Relaxed);
            }
            Side::Host => {
                self.bytes_out.fetch_add(len, Ordering::Relaxed);
            }
        }
    }

    /// Marks a reader waiting for room (or no longer).
    pub(crate) fn set_stalled(&self, stalled: bool) {
        if stalled {
            self.stalls.fetch_add(1, Ordering::SeqCst);
            self.stalled.fetch_add(1, Ordering::SeqCst);
        } else {
            self.stalled.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Takes what is pending (bytes in, bytes out, last input or 0).
    pub(crate) fn take(&self) -> (u64, u64, UnixMillis) {
        (
            self.bytes_in.swap(0, Ordering::SeqCst),
            self.bytes_out.swap(0, Ordering::SeqCst),
            self.pending_input.swap(0, Ordering::SeqCst),
        )
    }

    /// Puts back what [`Stats::take`] took, after a failed write.
    pub(crate) fn put_back(&self, bytes_in: u64, bytes_out: u64, last_input: UnixMillis) {
        self.bytes_in.fetch_add(bytes_in, Ordering::SeqCst);
        self.bytes_out.fetch_add(bytes_out, Ordering::SeqCst);
        if last_input != 0 {
            let _ = self.pending_input.compare_exchange(
                0,
                last_input,
                Ordering::SeqCst,
                Ordering::SeqCst,
            );
        }
    }

    pub(super) fn has_pending(&self) -> bool {
        self.bytes_in.load(Ordering::Relaxed) != 0
            || self.bytes_out.load(Ordering::Relaxed) != 0
            || self.pending_input.load(Ordering::Relaxed) != 0
    }
}

/// The session as the relay knows it (read from its row, refreshed by the log
/// tail).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    pub(crate) created_at: UnixMillis,
    pub(crate) started_at: Option<UnixMillis>,
    pub(crate) last_input_at: Option<UnixMillis>,
    pub(crate) detached_at: Option<UnixMillis>,
}

/// A side in the registry.
#[derive(Debug)]
pub(super) struct Member {
    pub(super) conn_id: u64,
    pub(super) commands: QueueSender<Command>,
    /// Hands the counterpart's outgoing receiver over at the pairing.
    pub(super) paired_tx: Option<oneshot::Sender<PipeReceiver>>,
    /// This side's outgoing receiver until the counterpart takes it.
    pub(super) outgoing_rx: Option<PipeReceiver>,
    /// Linked to a present counterpart now (the stall timer runs only then).
    pub(super) linked: Arc<AtomicBool>,
    /// The conn_id of the counterpart it was paired with, if ever.
    pub(super) partner: Option<u64>,
    pub(super) joined_at: UnixMillis,
    /// Its open timer ran (or it was paired).
    pub(super) timer_done: bool,
}

impl Member {
    pub(super) fn close(&self, code: u16, reason: &str) {
        let _ = self.commands.send(Command::Close(code, reason.to_owned()));
    }

    /// Closes at the end of the session, after its last words ([`Command::End`]).
    pub(super) fn end(&self, code: u16, reason: &str) {
        let _ = self.commands.send(Command::End(code, reason.to_owned()));
    }

    pub(super) fn lone_never_paired(&self) -> bool {
        self.partner.is_none()
    }
}

#[derive(Debug)]
pub(super) struct Slot {
    pub(super) device: Option<Member>,
    pub(super) host: Option<Member>,
    pub(super) limits: Limits,
    pub(super) stats: Arc<Stats>,
    pub(super) last_flush: UnixMillis,
    /// An end by the relay is being written.
    pub(super) ending: bool,
    /// Serializes the relay's writes of the session's state (detach when the
    /// device leaves, active again when a device pairs with the host of a
    /// started session): each write looks at the pairing when it holds this,
    /// so the last one written follows the last change of the pairing.
    pub(super) state_writes: Arc<tokio::sync::Mutex<()>>,
}

impl Slot {
    pub(super) fn member(&mut self, side: Side) -> &mut Option<Member> {
        match side {
            Side::Device => &mut self.device,
            Side::Host => &mut self.host,
        }
    }

    pub(super) fn sides(&self) -> Sides {
        Sides {
            device: self.device.is_some(),
            host: self.host.is_some(),
        }
    }

    /// Whether the device side is paired with the host side.
    pub(super) fn paired(&self) -> bool {
        match (self.device.as_ref(), self.host.as_ref()) {
            (Some(device), Some(host)) => {
                device.partner == Some(host.conn_id) && host.partner == Some(device.conn_id)
            }
            _ => false,
        }
    }
}

/// The relay of this process.
#[derive(Default)]
pub struct Relay {
    pub(super) sessions: Mutex<HashMap<Uuid, Sides>>,
    pub(super) slots: Mutex<HashMap<Uuid, Slot>>,
    pub(super) next_conn: AtomicU64,
    pub(super) started: AtomicBool,
    /// How many looks at the clocks the ticker has finished.
    pub(super) ticks: AtomicU64,
}

impl fmt::Debug for Relay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let count = self.sessions.lock().map(|s| s.len()).unwrap_or(0);
        f.debug_struct("Relay").field("sessions", &count).finish()
    }
}

impl Relay {
    /// An empty relay.
    pub fn new() -> Relay {
        Relay::default()
    }

    /// The connected sides of a session.
    pub fn sides(&self, session_id: Uuid) -> Sides {
        let sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        sessions.get(&session_id).copied().unwrap_or_default()
    }

    /// Whether the device side of the session is connected here (a
    /// `session.started` without it makes the session detached at once, 6.1).
    pub fn device_present(&self, session_id: Uuid) -> bool {
        self.sides(session_id).device
    }

    /// Records a side's arrival or departure.
    pub fn set_sides(&self, session_id: Uuid, sides: Sides) {
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        if sides == Sides::default() {
            sessions.remove(&session_id);
        } else {
            sessions.insert(session_id, sides);
        }
    }

    /// Whether a reader of the session waits for room in the buffer toward
    /// its counterpart now (backpressure is holding a sender back).
    pub fn is_stalled(&self, session_id: Uuid) -> bool {
        let slots = self.lock_slots();
        slots
            .get(&session_id)
            .is_some_and(|slot| slot.stats.stalled.load(Ordering::SeqCst) > 0)
    }

    /// How many waits for room have begun in the session, in all (a test
    /// that moved the clock past the stall timeout sees a new wait that began
    /// after the move by this number).
    pub fn stalls(&self, session_id: Uuid) -> u64 {
        let slots = self.lock_slots();
        slots
            .get(&session_id)
            .map_or(0, |slot| slot.stats.stalls.load(Ordering::SeqCst))
    }

    /// How many sessions have a side here.
    pub fn session_count(&self) -> usize {
        self.lock_slots().len()
    }

    /// How many looks at the clocks ([`TICK`](super::TICK)) the relay has finished: a test
    /// that moved the server's clock waits for two more to know that the
    /// relay saw the new time (and acted on it, or found nothing due).
    pub fn ticks(&self) -> u64 {
        self.ticks.load(Ordering::SeqCst)
    }

    pub(super) fn lock_slots(&self) -> std::sync::MutexGuard<'_, HashMap<Uuid, Slot>> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }
}
