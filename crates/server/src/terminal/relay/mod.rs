//! The relay (6.1 steps 5–7, 6.2, 6.3, 9): pairs the host's data connection
//! and the device stream of a session in memory and forwards each binary
//! message unchanged.
//!
//! # Layout
//! - this file: joining and leaving the registry, pairing, the phase rule and
//!   the timers (the methods of [`Relay`] that reach the server's state);
//! - [`registry`]: the registry's data, the sides of every session on this
//!   process ([`Relay::sides`], [`Relay::device_present`] for the control
//!   connection), their commands, counters and limits; below `state`, which
//!   holds the [`Relay`];
//! - [`pipe`](self::pipe): one direction, a queue bounded by
//!   `terminal.relay_buffer_max_bytes` with real backpressure;
//! - [`side`]: the loop of one connected side after its login (read, forward,
//!   write, close);
//! - [`store`]: what the relay writes: detach, byte counters, its own ends;
//! - [`wire`]: the WebSocket of both sides (RFC 6455, the server's end),
//!   which holds no buffer while a side is idle.
//!
//! # Pairing
//! A side joins after its identify was accepted. A side pairs at most once,
//! with the first counterpart that has not been paired either (a new handshake
//! always runs on a fresh pair of connections, D-M2-44-4). A newer device
//! stream of the same session replaces the older one (4103); a newer data
//! connection replaces the older one (1000, the host service does the same).
//! Each side reads its socket into its own outgoing [`pipe`](self::pipe) from
//! the start; the counterpart takes the receiving end at the pairing, so what
//! a lone side sent before stays in memory, at most one buffer, and never
//! leaves this process.
//!
//! # Timers (all on the server's clock, checked every [`TICK`])
//! - Each side that was never paired: `terminal.open_timeout` from its join;
//!   then the phase rule of 9 (`opening`: every lone side 4102 and the session
//!   ends `open_failed`/`open_timeout`; started: a lone device 4102, a lone
//!   host waits).
//! - Per session: idle (`terminal.idle_timeout` + `terminal.idle_grace` after
//!   the last device byte, `started_at` or `created_at`), maximum duration
//!   (`terminal.max_session_duration` from `created_at`), detach grace
//!   (`terminal.detach_grace` after `detached_at`): the relay ends the session
//!   itself.
//! - Byte counters and `last_input_at`: written at most once per
//!   `terminal.idle_grace`, and at release.
//!
//! # Writes and the shutdown
//! Every write the relay spawns (detach, reactivation, counters, its own
//! ends) holds a [`ShutdownGuard`](crate::shutdown::ShutdownGuard) of its
//! own, taken before the spawn, so the server's drain waits for it and the
//! database closes only after it: at shutdown every side leaves, and the
//! release writes the pending counters (issue 16).
//!
//! # Ends
//! After the commit of any end, the log tail hands `terminal_session.changed`
//! with state `closed` to [`Relay`]'s tail task, which closes every side of
//! that session with 4100 and the `close_reason` as close text — paired sides
//! after the session's last words ([`Command::End`]: the host's exit frame
//! travels on the data connection while its `session.ended` travels on the
//! control connection, so the end may be committed before the exit frame
//! reached the relay; it still reaches the device before the 4100) (a never paired
//! side of an `open_failed` session gets 4102 instead, 6.1 step 6). The device
//! stream of an `open_failed` end whose `close_detail` is a refused handshake
//! of 5.3 gets that refusal's 4101 or 4104 with the detail as text instead
//! ([`stream_code_for_end`]), so the device gets the same code whether the
//! host service closed its data connection or reported `session.ended`.
//!
//! A data connection the host service closes with 4101 or 4104 is a refused
//! handshake (5.3): the device gets that code and detail, an opening ends
//! `open_failed` with the detail, and so does a started session on 4104,
//! because the host service ended its PTY (6.2); after a 4101 a started
//! session stays detached and attachable (docs/decisions.md D-320).

pub mod login;
mod pipe;
mod queue;
pub(crate) mod registry;
pub(crate) mod side;
pub(crate) mod store;
pub(crate) mod wire;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bothy_proto::codes::{CloseCode, CloseDetail, CloseReason};
use tokio::sync::oneshot;
use uuid::Uuid;

use self::pipe::{PipeReceiver, PipeSender};
use self::queue::QueueReceiver;
pub(crate) use self::registry::{Command, Limits, Stats};
use self::registry::{Member, Slot};
pub use self::registry::{Relay, Side, Sides};
use crate::clock::millis;
use crate::events::{Delivery, EventKind, EventsError};
use crate::state::AppState;

/// How often the relay looks at its clocks (open deadlines, stalls, limits,
/// counters). The deadlines themselves are on the server's clock, so a test
/// moves that clock instead of sleeping.
pub const TICK: Duration = Duration::from_millis(100);

/// The close code 1000 (normal closure): a data connection replaced by a newer one.
pub const NORMAL_CLOSURE: u16 = 1000;

/// What a side gets when it joins.
#[derive(Debug)]
pub(crate) struct Joined {
    pub(crate) conn_id: u64,
    pub(crate) commands: QueueReceiver<Command>,
    pub(crate) paired: oneshot::Receiver<PipeReceiver>,
    pub(crate) outgoing: PipeSender,
    pub(crate) linked: Arc<AtomicBool>,
    pub(crate) stats: Arc<Stats>,
}

/// How a side left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Leave {
    /// Its connection ended (closed, broken, or closed by the server).
    Gone,
    /// The host service closed its data connection with 4101 or 4104 and a
    /// close text: handed to the device unchanged.
    HandOver(u16, String),
}

/// A handshake the host service refused by closing its data connection
/// with 4101 or 4104 and the `close_detail` as close text (5.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct HostRefusal {
    code: CloseCode,
    detail: CloseDetail,
}

impl HostRefusal {
    /// The refusal a close of the host stands for. A close text that is no
    /// detail of that code's rows in the table of 5.3 counts as the code's
    /// generic detail (`token_replayed` for 4101, `handshake_failed` for
    /// 4104), so the device and the stored end always agree on the code.
    fn new(code: u16, text: &str) -> HostRefusal {
        let code = if code == CloseCode::TerminalTokenStale.as_u16() {
            CloseCode::TerminalTokenStale
        } else {
            CloseCode::TerminalHandshakeFailed
        };
        let detail = CloseDetail::parse(text)
            .ok()
            .filter(|d| handshake_refusal(CloseReason::OpenFailed, Some(*d)).is_some())
            .filter(|d| d.handshake_close_code() == code)
            .unwrap_or(match code {
                CloseCode::TerminalTokenStale => CloseDetail::TokenReplayed,
                _ => CloseDetail::HandshakeFailed,
            });
        HostRefusal { code, detail }
    }

    /// Whether the host service ended a live PTY of the session with this
    /// refusal: "every refusal with 4104 of a session.open whose session has
    /// a live PTY ... ends that PTY with its tree without session.ended"
    /// (6.2); a 4101 leaves it detached.
    fn ends_pty(self) -> bool {
        self.code == CloseCode::TerminalHandshakeFailed
    }
}

impl Relay {
    /// Starts the tail task and the ticker once (on the first connection), so
    /// that an end committed after this call reaches every side that joins
    /// later. Call it before reading the session's row.
    pub(crate) fn ensure_started(&self, state: &AppState) {
        if self.started.swap(true, Ordering::SeqCst) {
            return;
        }
        let subscription = state.events().subscribe_from(state.events().position());
        tokio::spawn(tail_task(state.clone(), subscription));
        tokio::spawn(ticker(state.clone()));
    }

    /// Registers an identified side of `session_id` and pairs it if a fresh
    /// counterpart is there.
    pub(crate) fn join(
        &self,
        state: &AppState,
        session_id: Uuid,
        side: Side,
        limits: Limits,
    ) -> Joined {
        let now = state.clock().now_ms();
        let buffer = state.config().terminal.relay_buffer_max_bytes;
        let conn_id = self.next_conn.fetch_add(1, Ordering::Relaxed);
        let (commands_tx, commands) = queue::queue();
        let (paired_tx, paired) = oneshot::channel();
        let (outgoing, outgoing_rx) = pipe::pipe(buffer);
        let linked = Arc::new(AtomicBool::new(false));
        let member = Member {
            conn_id,
            commands: commands_tx,
            paired_tx: Some(paired_tx),
            outgoing_rx: Some(outgoing_rx),
            linked: Arc::clone(&linked),
            partner: None,
            joined_at: now,
            timer_done: false,
        };
        let mut slots = self.lock_slots();
        let slot = slots.entry(session_id).or_insert_with(|| Slot {
            device: None,
            host: None,
            limits,
            stats: Arc::new(Stats::default()),
            last_flush: now,
            ending: false,
            state_writes: Arc::new(tokio::sync::Mutex::new(())),
        });
        let stats = Arc::clone(&slot.stats);
        if let Some(older) = slot.member(side).take() {
            // A newer side of the same session: the older one is replaced.
            match side {
                Side::Device => {
                    older.close(
                        CloseCode::TerminalReplaced.as_u16(),
                        CloseCode::TerminalReplaced.name(),
                    );
                }
                Side::Host => older.close(NORMAL_CLOSURE, "replaced"),
            }
            // Its counterpart is no longer linked to anyone.
            if older.partner.is_some() {
                if let Some(other) = slot.member(other_side(side)).as_ref() {
                    if other.partner == Some(older.conn_id) {
                        other.linked.store(false, Ordering::SeqCst);
                    }
                }
            }
        }
        *slot.member(side) = Some(member);
        // A device paired again with the host of a started session: the
        // session is active again (6.2), and the relay's detach clock stops.
        let paired_now = pair_if_possible(slot);
        let reactivate = paired_now && slot.limits.started_at.is_some();
        let opening_paired = paired_now && slot.limits.started_at.is_none();
        if reactivate {
            slot.limits.detached_at = None;
        }
        let writes = Arc::clone(&slot.state_writes);
        let sides = slot.sides();
        drop(slots);
        self.set_sides(session_id, sides);
        if reactivate {
            let state = state.clone();
            let done = state.shutdown().track();
            tokio::spawn(async move {
                let _done = done;
                let _write = writes.lock().await;
                if state.relay().device_paired(session_id) {
                    store::reactivate(&state, session_id).await;
                }
            });
        }
        if opening_paired && state.config().cluster.mode == crate::config::ClusterMode::Multi {
            let state = state.clone();
            tokio::spawn(async move { store::announce_paired(&state, session_id).await });
        }
        Joined {
            conn_id,
            commands,
            paired,
            outgoing,
            linked,
            stats,
        }
    }

    /// A side's connection ended.
    pub(crate) fn leave(
        &self,
        state: &AppState,
        session_id: Uuid,
        side: Side,
        conn_id: u64,
        how: Leave,
    ) {
        let mut slots = self.lock_slots();
        let Some(slot) = slots.get_mut(&session_id) else {
            return;
        };
        let is_current = slot
            .member(side)
            .as_ref()
            .is_some_and(|m| m.conn_id == conn_id);
        if !is_current {
            // Replaced or closed by the relay already.
            return;
        }
        let Some(left) = slot.member(side).take() else {
            return;
        };
        let mut detach = false;
        let refusal = match &how {
            Leave::HandOver(code, reason) if side == Side::Host => {
                Some(HostRefusal::new(*code, reason))
            }
            _ => None,
        };
        let other = slot.member(other_side(side));
        let partner_present = left.partner.is_some()
            && other
                .as_ref()
                .is_some_and(|o| o.partner == Some(left.conn_id));
        match side {
            Side::Device => {
                // The host stays (a paired host never pairs again) and waits
                // for the end or a newer data connection.
                if let Some(host) = other.as_ref() {
                    if partner_present {
                        host.linked.store(false, Ordering::SeqCst);
                    }
                }
                detach = true;
            }
            Side::Host => {
                if partner_present {
                    if let Some(device) = other.take() {
                        match &refusal {
                            Some(refusal) => {
                                device.close(refusal.code.as_u16(), refusal.detail.as_str());
                            }
                            // A host side that leaves while the server shuts
                            // down left because of the shutdown (or with it):
                            // its device is told 4013 like every other socket
                            // (13), not 4102. The device's own loop may have
                            // looked at the shutdown just before the trigger
                            // and at its queue just after this close.
                            None if state.shutdown().is_triggered() => device.close(
                                CloseCode::ServerShutdown.as_u16(),
                                CloseCode::ServerShutdown.name(),
                            ),
                            None => device.close(
                                CloseCode::TerminalHostUnavailable.as_u16(),
                                CloseCode::TerminalHostUnavailable.name(),
                            ),
                        }
                        detach = true;
                    }
                }
            }
        }
        let sides = slot.sides();
        let release = sides == Sides::default();
        let stats = Arc::clone(&slot.stats);
        let writes = Arc::clone(&slot.state_writes);
        if release {
            slots.remove(&session_id);
        }
        drop(slots);
        self.set_sides(session_id, sides);
        let state = state.clone();
        // The server waits for this write before it closes the database: at
        // shutdown every side leaves here, and the release writes the
        // session's pending counters.
        let done = state.shutdown().track();
        tokio::spawn(async move {
            let _done = done;
            if let Some(refusal) = refusal {
                // The host service refused the handshake of this grant. An
                // opening ends open_failed with the refusal's detail (5.3); a
                // 4104 also ended a live PTY on the host (6.2), so a started
                // session ends the same way instead of staying `detached`
                // without a PTY; a 4101 leaves a started session detached.
                store::end_by_relay(
                    &state,
                    session_id,
                    &stats,
                    CloseReason::OpenFailed,
                    Some(refusal.detail),
                    !refusal.ends_pty(),
                )
                .await;
            }
            if detach {
                let _write = writes.lock().await;
                // A newer device may have paired meanwhile (an attach).
                if !state.relay().device_paired(session_id) {
                    store::detach(&state, session_id).await;
                }
            }
            if release {
                store::flush(&state, session_id, &stats).await;
            }
        });
    }

    /// A new grant (attach) for the session: the device stream of the older
    /// grant is replaced now (6.2: "If another device attaches, the server
    /// closes the older connection with 4103"), before the host service
    /// replaces its data connection for the new grant, whose close would
    /// otherwise tell the older device 4102. The session is detached until
    /// the new device pairs.
    pub(crate) fn device_replaced_by_grant(&self, state: &AppState, session_id: Uuid) {
        let mut slots = self.lock_slots();
        let Some(slot) = slots.get_mut(&session_id) else {
            return;
        };
        let Some(older) = slot.device.take() else {
            return;
        };
        older.close(
            CloseCode::TerminalReplaced.as_u16(),
            CloseCode::TerminalReplaced.name(),
        );
        if let Some(host) = slot.host.as_ref() {
            if older.partner.is_some() && host.partner == Some(older.conn_id) {
                host.linked.store(false, Ordering::SeqCst);
            }
        }
        let writes = Arc::clone(&slot.state_writes);
        let sides = slot.sides();
        if sides == Sides::default() {
            slots.remove(&session_id);
        }
        drop(slots);
        self.set_sides(session_id, sides);
        let state = state.clone();
        let done = state.shutdown().track();
        tokio::spawn(async move {
            let _done = done;
            let _write = writes.lock().await;
            if !state.relay().device_paired(session_id) {
                store::detach(&state, session_id).await;
            }
        });
    }

    /// After `session.started` made the session `active` because its device
    /// was present: should the device have left between that check and the
    /// commit, its own detach found the session still `opening` and changed
    /// nothing (on PostgreSQL the two units of work do not wait for each
    /// other), so the session is detached now (6.2). Under the session's
    /// write lock like every detach; a device present again keeps it active.
    pub(crate) async fn detach_if_device_left(&self, state: &AppState, session_id: Uuid) {
        let writes = self
            .lock_slots()
            .get(&session_id)
            .map(|slot| Arc::clone(&slot.state_writes));
        let _write = match &writes {
            Some(writes) => Some(writes.lock().await),
            None => None,
        };
        if !self.device_present(session_id) {
            store::detach(state, session_id).await;
        }
    }

    /// Whether the session's device side is paired with its host side here.
    fn device_paired(&self, session_id: Uuid) -> bool {
        self.lock_slots().get(&session_id).is_some_and(Slot::paired)
    }

    /// A reader of `from` found no room for a message toward its counterpart
    /// within `terminal.relay_stall_timeout`, or a message larger than the
    /// whole buffer: the slow counterpart gets 4014 (its leaving detaches the
    /// session).
    pub(crate) fn peer_slow(&self, session_id: Uuid, from: Side) {
        let mut slots = self.lock_slots();
        let Some(slot) = slots.get_mut(&session_id) else {
            return;
        };
        if let Some(peer) = slot.member(other_side(from)).as_ref() {
            peer.close(
                CloseCode::SlowConsumer.as_u16(),
                CloseCode::SlowConsumer.name(),
            );
        }
    }

    /// A side found its session closed right after it joined (the end was
    /// committed before the log tail could see this side): every side is
    /// closed as [`Self::session_closed`] does when the tail delivers it.
    pub(crate) fn closed_at_join(
        &self,
        state: &AppState,
        session_id: Uuid,
        row: &store::SessionRow,
    ) {
        let reason = row
            .close_reason
            .as_deref()
            .unwrap_or(CloseReason::AccessRevoked.as_str());
        let detail = row
            .close_detail
            .as_deref()
            .and_then(|text| CloseDetail::parse(text).ok());
        self.session_closed(state, session_id, reason, detail);
    }

    /// Closes every side of an ended session (after the commit of the end):
    /// the device with [`stream_code_for_end`], the host with 4100 and the
    /// `close_reason`; a never paired side of an `open_failed` end is counted
    /// unpaired and gets 4102 unless a refused handshake names its own code.
    fn session_closed(
        &self,
        state: &AppState,
        session_id: Uuid,
        reason: &str,
        detail: Option<CloseDetail>,
    ) {
        let mut slots = self.lock_slots();
        let Some(slot) = slots.get_mut(&session_id) else {
            return;
        };
        slot.ending = true;
        // The last words of a session (an exit frame) matter only between
        // paired sides; a lone side closes at once.
        let paired = slot.paired();
        let open_failed = reason == CloseReason::OpenFailed.as_str();
        let refused = CloseReason::parse(reason)
            .ok()
            .and_then(|reason| handshake_refusal(reason, detail));
        for side in [Side::Device, Side::Host] {
            if let Some(member) = slot.member(side).as_mut() {
                let lone = open_failed && member.lone_never_paired();
                if lone && !member.timer_done {
                    member.timer_done = true;
                    count_unpaired(state, side);
                }
                let (code, text) = match (side, refused) {
                    (Side::Device, Some(detail)) => {
                        (detail.handshake_close_code().as_u16(), detail.as_str())
                    }
                    _ if lone => (
                        CloseCode::TerminalHostUnavailable.as_u16(),
                        CloseCode::TerminalHostUnavailable.name(),
                    ),
                    _ => (CloseCode::TerminalClosed.as_u16(), reason),
                };
                if paired {
                    member.end(code, text);
                } else {
                    member.close(code, text);
                }
            }
        }
    }

    /// Re-reads a session's limits (the log tail saw a change). A device
    /// paired with the host here is attached whatever an older row said (the
    /// tail may deliver a detach before the write that made the session
    /// active again), so the detach clock stays stopped.
    fn refresh(&self, session_id: Uuid, mut limits: Limits) {
        let mut slots = self.lock_slots();
        if let Some(slot) = slots.get_mut(&session_id) {
            if slot.paired() {
                limits.detached_at = None;
            }
            slot.limits = limits;
        }
    }

    /// Whether a side of the session is connected here.
    pub(crate) fn holds(&self, session_id: Uuid) -> bool {
        self.lock_slots().contains_key(&session_id)
    }

    /// One look at every clock; the work it finds runs in its own tasks.
    fn tick(&self, state: &AppState) {
        let now = state.clock().now_ms();
        let config = &state.config().terminal;
        let open_timeout = millis(config.open_timeout);
        let idle = millis(config.idle_timeout).saturating_add(millis(config.idle_grace));
        let max_duration = millis(config.max_session_duration);
        let detach_grace = millis(config.detach_grace);
        let flush_every = millis(config.idle_grace);
        let mut lone = Vec::new();
        let mut ends = Vec::new();
        let mut flushes = Vec::new();
        {
            let mut slots = self.lock_slots();
            for (session_id, slot) in slots.iter_mut() {
                for side in [Side::Device, Side::Host] {
                    if let Some(member) = slot.member(side).as_mut() {
                        if !member.timer_done
                            && member.lone_never_paired()
                            && now >= member.joined_at.saturating_add(open_timeout)
                        {
                            member.timer_done = true;
                            lone.push((*session_id, side, member.conn_id));
                        }
                    }
                }
                if !slot.ending {
                    let limits = slot.limits;
                    let last_input = slot.stats.last_input.load(Ordering::Relaxed);
                    let idle_base = [
                        Some(limits.created_at),
                        limits.started_at,
                        limits.last_input_at,
                        (last_input != 0).then_some(last_input),
                    ]
                    .into_iter()
                    .flatten()
                    .max()
                    .unwrap_or(limits.created_at);
                    let reason = if now >= limits.created_at.saturating_add(max_duration) {
                        Some(CloseReason::MaxDuration)
                    } else if limits
                        .detached_at
                        .is_some_and(|at| now >= at.saturating_add(detach_grace))
                    {
                        Some(CloseReason::DetachExpired)
                    } else if now >= idle_base.saturating_add(idle) {
                        Some(CloseReason::IdleTimeout)
                    } else {
                        None
                    };
                    if let Some(reason) = reason {
                        slot.ending = true;
                        ends.push((*session_id, reason, Arc::clone(&slot.stats)));
                        continue;
                    }
                }
                if slot.stats.has_pending() && now >= slot.last_flush.saturating_add(flush_every) {
                    slot.last_flush = now;
                    flushes.push((*session_id, Arc::clone(&slot.stats)));
                }
            }
        }
        for (session_id, side, conn_id) in lone {
            let state = state.clone();
            tokio::spawn(async move { lone_deadline(&state, session_id, side, conn_id).await });
        }
        for (session_id, reason, stats) in ends {
            let state = state.clone();
            let done = state.shutdown().track();
            tokio::spawn(async move {
                let _done = done;
                if !store::end_by_relay(&state, session_id, &stats, reason, None, false).await {
                    // Not written (a database error): try again at a later tick.
                    let mut slots = state.relay().lock_slots();
                    if let Some(slot) = slots.get_mut(&session_id) {
                        slot.ending = false;
                    }
                }
            });
        }
        for (session_id, stats) in flushes {
            let state = state.clone();
            let done = state.shutdown().track();
            tokio::spawn(async move {
                let _done = done;
                store::flush(&state, session_id, &stats).await;
            });
        }
        self.ticks.fetch_add(1, Ordering::SeqCst);
    }

    /// The never paired lone sides of a session, closed with 4102 and
    /// counted; returns whether any was there.
    fn close_lone(&self, state: &AppState, session_id: Uuid, only: Option<(Side, u64)>) {
        let mut slots = self.lock_slots();
        let Some(slot) = slots.get_mut(&session_id) else {
            return;
        };
        for side in [Side::Device, Side::Host] {
            if let Some((only_side, only_conn)) = only {
                if side != only_side {
                    continue;
                }
                if slot.member(side).as_ref().map(|m| m.conn_id) != Some(only_conn) {
                    continue;
                }
            }
            if let Some(member) = slot.member(side).as_mut() {
                if member.lone_never_paired() {
                    member.timer_done = true;
                    count_unpaired(state, side);
                    member.close(
                        CloseCode::TerminalHostUnavailable.as_u16(),
                        CloseCode::TerminalHostUnavailable.name(),
                    );
                }
            }
        }
    }
}

/// The refused handshake an end stands for, if any: `open_failed` with one
/// of the details of the table of 5.3 (the host service's refusal of the
/// token or the handshake, reported through `session.ended`).
fn handshake_refusal(reason: CloseReason, detail: Option<CloseDetail>) -> Option<CloseDetail> {
    match (reason, detail?) {
        (
            CloseReason::OpenFailed,
            detail @ (CloseDetail::TokenExpired
            | CloseDetail::TokenReplayed
            | CloseDetail::TokenInvalid
            | CloseDetail::HandshakeFailed
            | CloseDetail::ProfileUnknown
            | CloseDetail::SessionUserUnknown
            | CloseDetail::SessionUserMismatch
            | CloseDetail::ServerHostOwnerOnly),
        ) => Some(detail),
        _ => None,
    }
}

/// The close code and text of the device stream for an end (5.3
/// "StreamCodeForEnd", 6.1 step 7): a refused handshake reported through
/// `session.ended` reaches the device with the code the host service would
/// have closed with (4101 for `token_expired` and `token_replayed`, 4104 for
/// the other details of 5.3) and the detail as close text; every other end
/// gives 4100 with the `close_reason` (docs/decisions.md D-85).
pub fn stream_code_for_end(reason: CloseReason, detail: Option<CloseDetail>) -> (u16, String) {
    match handshake_refusal(reason, detail) {
        Some(detail) => (
            detail.handshake_close_code().as_u16(),
            detail.as_str().to_owned(),
        ),
        None => (
            CloseCode::TerminalClosed.as_u16(),
            reason.as_str().to_owned(),
        ),
    }
}

fn other_side(side: Side) -> Side {
    match side {
        Side::Device => Side::Host,
        Side::Host => Side::Device,
    }
}

/// Pairs the device and the host of a slot if both are there and neither was
/// paired before.
fn pair_if_possible(slot: &mut Slot) -> bool {
    let (Some(device), Some(host)) = (slot.device.as_mut(), slot.host.as_mut()) else {
        return false;
    };
    if device.partner.is_some() || host.partner.is_some() {
        return false;
    }
    let (Some(device_rx), Some(host_rx)) = (device.outgoing_rx.take(), host.outgoing_rx.take())
    else {
        return false;
    };
    device.partner = Some(host.conn_id);
    host.partner = Some(device.conn_id);
    device.timer_done = true;
    host.timer_done = true;
    device.linked.store(true, Ordering::SeqCst);
    host.linked.store(true, Ordering::SeqCst);
    if let Some(tx) = device.paired_tx.take() {
        let _ = tx.send(host_rx);
    }
    if let Some(tx) = host.paired_tx.take() {
        let _ = tx.send(device_rx);
    }
    true
}

/// Counts an unpaired side and writes its one log record (without any ID).
fn count_unpaired(state: &AppState, side: Side) {
    state.metrics().terminal_relay_unpaired(side.as_str()).inc();
    tracing::info!(
        side = side.as_str(),
        "a relay side found no counterpart in time (4102)"
    );
}

/// The open deadline of a never paired side passed: the phase rule of 9.
async fn lone_deadline(state: &AppState, session_id: Uuid, side: Side, conn_id: u64) {
    let phase = match store::state_of(state, session_id).await {
        Ok(phase) => phase,
        Err(()) => return,
    };
    let relay = state.relay();
    match phase.as_deref() {
        Some("opening") => {
            // Every lone side of the session goes, and the opening ends (a
            // compare-and-swap on `opening`).
            relay.close_lone(state, session_id, None);
            let stats = {
                let slots = relay.lock_slots();
                slots.get(&session_id).map(|slot| Arc::clone(&slot.stats))
            };
            let stats = stats.unwrap_or_default();
            store::end_by_relay(
                state,
                session_id,
                &stats,
                CloseReason::OpenFailed,
                Some(CloseDetail::OpenTimeout),
                true,
            )
            .await;
        }
        // A lone device of a started session goes, the session stays
        // detached; a lone host waits for an attaching device until the end.
        Some("active" | "detached") if side == Side::Device => {
            relay.close_lone(state, session_id, Some((side, conn_id)));
        }
        // A lone host of a started session; closed or gone (the log tail
        // closes the sides).
        _ => {}
    }
}

/// Hands each committed `terminal_session.changed` of a session held here to
/// the relay.
async fn tail_task(state: AppState, mut subscription: crate::events::Subscription) {
    loop {
        let delivery = match subscription.recv().await {
            Ok(delivery) => delivery,
            Err(EventsError::TailStopped) => return,
            Err(EventsError::Db(error)) => {
                tracing::warn!(%error, "the relay cannot read the event log");
                tokio::time::sleep(TICK).await;
                continue;
            }
        };
        let Delivery::Durable(event) = delivery else {
            continue;
        };
        if event.kind != EventKind::TerminalSessionChanged {
            continue;
        }
        let Some(session_id) = event
            .payload
            .get("session_id")
            .and_then(|v| v.as_str())
            .and_then(|s| Uuid::parse_str(s).ok())
        else {
            continue;
        };
        let relay = state.relay();
        if !relay.holds(session_id) {
            continue;
        }
        let session_state = event.payload.get("state").and_then(|v| v.as_str());
        if session_state == Some("closed") {
            let reason = event
                .payload
                .get("close_reason")
                .and_then(|v| v.as_str())
                .unwrap_or(CloseCode::TerminalClosed.name())
                .to_owned();
            let detail = event
                .payload
                .get("close_detail")
                .and_then(|v| v.as_str())
                .and_then(|text| CloseDetail::parse(text).ok());
            relay.session_closed(&state, session_id, &reason, detail);
        } else if let Ok(Some(row)) = store::load(&state, session_id).await {
            relay.refresh(session_id, row.limits());
            let several = state.config().cluster.mode == crate::config::ClusterMode::Multi;
            if several && row.state == "detached" && relay.device_paired(session_id) {
                // Another node detached it (its control connection of the
                // host ended, or its `session.started` found no device
                // there) while both sides are relayed here: active again
                // (spec 9, D-508), under the session's write lock.
                let writes = relay
                    .lock_slots()
                    .get(&session_id)
                    .map(|slot| Arc::clone(&slot.state_writes));
                if let Some(writes) = writes {
                    let state = state.clone();
                    let done = state.shutdown().track();
                    tokio::spawn(async move {
                        let _done = done;
                        let _write = writes.lock().await;
                        if state.relay().device_paired(session_id) {
                            store::reactivate(&state, session_id).await;
                        }
                    });
                }
            }
        }
    }
}

/// Looks at the clocks every [`TICK`] until the server shuts down.
async fn ticker(state: AppState) {
    let mut shutdown = state.shutdown().watch();
    loop {
        tokio::select! {
            _ = shutdown.wait_for(|stop| *stop) => return,
            () = tokio::time::sleep(TICK) => state.relay().tick(&state),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 5.3 StreamCodeForEnd for every pair of 10.3 the end function stores.
    #[test]
    fn the_device_gets_the_code_of_a_refused_handshake_else_4100() {
        let refused = [
            ("token_expired", 4101),
            ("token_replayed", 4101),
            ("token_invalid", 4104),
            ("handshake_failed", 4104),
            ("profile_unknown", 4104),
            ("session_user_unknown", 4104),
            ("session_user_mismatch", 4104),
            ("server_host_owner_only", 4104),
        ];
        let mut handed = 0;
        for &reason in CloseReason::ALL {
            let details = std::iter::once(None).chain(CloseDetail::ALL.iter().copied().map(Some));
            for detail in details {
                if bothy_proto::codes::check_close_pair(reason, detail).is_err() {
                    continue;
                }
                let (code, text) = stream_code_for_end(reason, detail);
                let expected = refused
                    .iter()
                    .find(|(name, _)| {
                        reason == CloseReason::OpenFailed
                            && detail.map(CloseDetail::as_str) == Some(*name)
                    })
                    .map(|(name, code)| (*code, (*name).to_owned()));
                match expected {
                    Some(expected) => {
                        handed += 1;
                        assert_eq!((code, text), expected, "{reason} {detail:?}");
                    }
                    None => assert_eq!(
                        (code, text.as_str()),
                        (4100, reason.as_str()),
                        "{reason} {detail:?}"
                    ),
                }
            }
        }
        assert_eq!(handed, refused.len());
    }

    #[test]
    fn the_unpaired_label_of_the_device_side_is_client() {
        assert_eq!(Side::Device.as_str(), "client");
        assert_eq!(Side::Host.as_str(), "host");
    }

    /// A paired host side that leaves tells its device 4102 while the server
    /// runs, and 4013 once it shuts down (the device's own loop may have
    /// looked at the shutdown just before the trigger; D-706).
    #[tokio::test]
    async fn a_host_side_that_leaves_at_shutdown_tells_its_device_4013() {
        for shutting_down in [false, true] {
            let dir = tempfile::tempdir().expect("temporary data directory");
            let yaml = format!(
                "server:\n  listen: 127.0.0.1:0\n  public_url: https://localhost\n  data_dir: \"{}\"\n",
                dir.path().display()
            );
            let config = crate::config::Config::from_yaml_str(&yaml).expect("configuration");
            let app = crate::app::App::open(config, crate::clock::ManualClock::new(1_000))
                .await
                .expect("the server opens");
            let state = app.state().clone();
            if shutting_down {
                // A dropped trigger counts as triggered (crate::shutdown).
                drop(app);
                assert!(state.shutdown().is_triggered());
            }
            let limits = Limits {
                created_at: 1_000,
                started_at: Some(1_000),
                last_input_at: None,
                detached_at: None,
            };
            let session_id = Uuid::from_u128(7);
            let relay = state.relay();
            let mut device = relay.join(&state, session_id, Side::Device, limits);
            let host = relay.join(&state, session_id, Side::Host, limits);
            assert!(relay.sides(session_id).device && relay.sides(session_id).host);
            relay.leave(&state, session_id, Side::Host, host.conn_id, Leave::Gone);
            let expected = if shutting_down {
                CloseCode::ServerShutdown
            } else {
                CloseCode::TerminalHostUnavailable
            };
            match device.commands.try_recv() {
                Some(Command::Close(code, text)) => {
                    assert_eq!((code, text.as_str()), (expected.as_u16(), expected.name()));
                }
                other => panic!("expected a close for the device, got {other:?}"),
            }
        }
    }
}
