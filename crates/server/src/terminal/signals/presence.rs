//! The presence view of a node (spec 24 section 9 "Presence across nodes",
//! D-M2-47-6): which hosts have a control connection on another node, from
//! the `terminal.host_present` and `terminal.host_gone` this node heard.
//!
//! An entry counts while no more than `terminal.host_heartbeat_interval` times
//! `terminal.host_heartbeat_miss_limit` has passed since its last
//! announcement, on this node's clock: the silence after which the holder
//! closes the connection itself. A node that dies without
//! `terminal.host_gone` keeps its entries counting for at most that window.
//!
//! The view also remembers the connections of this node for the same window
//! after they end: a node ignores the announcement of its own connections,
//! also one that arrives after the connection is gone (a heartbeat's
//! announcement and the close's `terminal.host_gone` may travel over two
//! database connections and arrive in either order).

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use uuid::Uuid;

use crate::clock::{SharedClock, UnixMillis, millis};
use crate::config::TerminalConfig;
use crate::terminal::links::{ControlLinks, ControlSignal, LocalControlLinks, NotConnected};

/// The window of an entry in milliseconds: `terminal.host_heartbeat_interval`
/// times `terminal.host_heartbeat_miss_limit`.
pub fn window_ms(terminal: &TerminalConfig) -> i64 {
    millis(
        terminal
            .host_heartbeat_interval
            .saturating_mul(terminal.host_heartbeat_miss_limit),
    )
}

/// The port [`ControlLinks`] of a node: "host connected" (6.1 step 2) is an
/// eligible control connection on this node or a counting entry of another
/// node in the presence view; signals go to this node's connections.
pub struct NodeLinks {
    local: Arc<LocalControlLinks>,
    presence: Arc<PresenceView>,
    clock: SharedClock,
    window_ms: i64,
}

impl fmt::Debug for NodeLinks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeLinks")
            .field("local", &self.local)
            .field("window_ms", &self.window_ms)
            .finish_non_exhaustive()
    }
}

impl NodeLinks {
    /// The port over this node's registry and presence view.
    pub fn new(
        local: Arc<LocalControlLinks>,
        presence: Arc<PresenceView>,
        clock: SharedClock,
        window_ms: i64,
    ) -> NodeLinks {
        NodeLinks {
            local,
            presence,
            clock,
            window_ms,
        }
    }
}

impl ControlLinks for NodeLinks {
    fn is_connected(&self, host_id: Uuid) -> bool {
        self.local.is_connected(host_id)
            || self
                .presence
                .counts(host_id, self.clock.now_ms(), self.window_ms)
    }

    fn send(&self, host_id: Uuid, signal: ControlSignal) -> Result<(), NotConnected> {
        self.local.send(host_id, signal)
    }
}

/// The view; all times are this node's clock in milliseconds.
#[derive(Debug, Default)]
pub struct PresenceView {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// host → connection of another node → time of its last announcement.
    entries: HashMap<Uuid, HashMap<Uuid, UnixMillis>>,
    /// Connections of this node → when they ended (`None`: still open).
    own: HashMap<Uuid, Option<UnixMillis>>,
}

/// What a change did to whether the host counts as present elsewhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// It counts now and did not before.
    Appeared,
    /// It counted and does not any more.
    Vanished,
    /// No change.
    Same,
    /// The announcement was of this node's own connection: ignored.
    Own,
}

impl PresenceView {
    /// An empty view.
    pub fn new() -> PresenceView {
        PresenceView::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A control connection of this node was accepted.
    pub fn own_opened(&self, conn_id: Uuid) {
        self.lock().own.insert(conn_id, None);
    }

    /// A control connection of this node ended at `now`.
    pub fn own_closed(&self, conn_id: Uuid, now: UnixMillis) {
        self.lock().own.insert(conn_id, Some(now));
    }

    /// Whether `conn_id` is (or recently was) a connection of this node.
    pub fn is_own(&self, conn_id: Uuid) -> bool {
        self.lock().own.contains_key(&conn_id)
    }

    /// `terminal.host_present`: renews the entry.
    pub fn renew(&self, host_id: Uuid, conn_id: Uuid, now: UnixMillis, window: i64) -> Change {
        let mut inner = self.lock();
        if inner.own.contains_key(&conn_id) {
            return Change::Own;
        }
        let before = counts(inner.entries.get(&host_id), now, window);
        let last = inner
            .entries
            .entry(host_id)
            .or_default()
            .entry(conn_id)
            .or_insert(now);
        *last = (*last).max(now);
        if before {
            Change::Same
        } else {
            Change::Appeared
        }
    }

    /// `terminal.host_gone`: removes this one entry.
    pub fn remove(&self, host_id: Uuid, conn_id: Uuid, now: UnixMillis, window: i64) -> Change {
        let mut inner = self.lock();
        if inner.own.contains_key(&conn_id) {
            return Change::Own;
        }
        let before = counts(inner.entries.get(&host_id), now, window);
        if let Some(connections) = inner.entries.get_mut(&host_id) {
            connections.remove(&conn_id);
            if connections.is_empty() {
                inner.entries.remove(&host_id);
            }
        }
        let after = counts(inner.entries.get(&host_id), now, window);
        if before && !after {
            Change::Vanished
        } else {
            Change::Same
        }
    }

    /// Whether the host has a counting entry.
    pub fn counts(&self, host_id: Uuid, now: UnixMillis, window: i64) -> bool {
        counts(self.lock().entries.get(&host_id), now, window)
    }

    /// Drops the entries older than the window and the own connections that
    /// ended longer ago; returns the hosts that stopped counting.
    pub fn expire(&self, now: UnixMillis, window: i64) -> Vec<Uuid> {
        let mut inner = self.lock();
        let mut vanished = Vec::new();
        inner.entries.retain(|host_id, connections| {
            connections.retain(|_, last| fresh(*last, now, window));
            if connections.is_empty() {
                vanished.push(*host_id);
                false
            } else {
                true
            }
        });
        inner
            .own
            .retain(|_, ended| ended.is_none_or(|ended| fresh(ended, now, window)));
        vanished
    }
}

fn fresh(last: UnixMillis, now: UnixMillis, window: i64) -> bool {
    now.saturating_sub(last) <= window
}

fn counts(connections: Option<&HashMap<Uuid, UnixMillis>>, now: UnixMillis, window: i64) -> bool {
    connections
        .is_some_and(|connections| connections.values().any(|&last| fresh(last, now, window)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const WINDOW: i64 = 90_000;

    #[test]
    fn an_entry_counts_for_the_window_inclusive() {
        let view = PresenceView::new();
        let (host, conn) = (Uuid::from_u128(1), Uuid::from_u128(2));
        assert!(!view.counts(host, 0, WINDOW));
        assert_eq!(view.renew(host, conn, 1_000, WINDOW), Change::Appeared);
        assert_eq!(view.renew(host, conn, 2_000, WINDOW), Change::Same);
        assert!(view.counts(host, 2_000 + WINDOW, WINDOW));
        assert!(!view.counts(host, 2_001 + WINDOW, WINDOW));
        assert!(view.expire(2_000 + WINDOW, WINDOW).is_empty());
        assert_eq!(view.expire(2_001 + WINDOW, WINDOW), vec![host]);
        // Expired: the next announcement makes it appear again.
        assert_eq!(view.renew(host, conn, 200_000, WINDOW), Change::Appeared);
    }

    #[test]
    fn gone_removes_only_its_entry() {
        let view = PresenceView::new();
        let host = Uuid::from_u128(1);
        let (a, b) = (Uuid::from_u128(2), Uuid::from_u128(3));
        view.renew(host, a, 0, WINDOW);
        view.renew(host, b, 0, WINDOW);
        assert_eq!(view.remove(host, a, 10, WINDOW), Change::Same);
        assert!(view.counts(host, 10, WINDOW));
        assert_eq!(view.remove(host, b, 10, WINDOW), Change::Vanished);
        assert!(!view.counts(host, 10, WINDOW));
        assert_eq!(view.remove(host, b, 10, WINDOW), Change::Same);
    }

    #[test]
    fn own_connections_are_ignored_also_after_they_ended() {
        let view = PresenceView::new();
        let (host, own) = (Uuid::from_u128(1), Uuid::from_u128(2));
        view.own_opened(own);
        assert_eq!(view.renew(host, own, 0, WINDOW), Change::Own);
        view.own_closed(own, 100);
        assert_eq!(view.renew(host, own, 200, WINDOW), Change::Own);
        assert!(!view.counts(host, 200, WINDOW));
        view.expire(100 + WINDOW + 1, WINDOW);
        // Forgotten after the window: by then no announcement of it is due.
        assert_eq!(
            view.renew(host, own, 100 + WINDOW + 2, WINDOW),
            Change::Appeared
        );
    }
}
