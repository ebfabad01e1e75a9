//! The registry of control connections (3.4, 3.5, 9): which host has a
//! control connection on this process, whether its first report was applied
//! ("connected"), and the channel through which other parts of the server hand
//! it signals (`session.open`, `session.close`, a close code).
//!
//! Callers see only the port [`ControlLinks`]: the terminal routes ask
//! [`ControlLinks::is_connected`] and hand signals with [`ControlLinks::send`].
//! [`LocalControlLinks`] is the one-node implementation; the multi-node path of
//! section 9 (NOTIFY to the node of the connection) implements the same port
//! later without changing callers.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Mutex;

use bothy_proto::codes::{CloseCode, CloseDetail, CloseReason};
use bothy_proto::control::{SessionClose, SessionOpen};
use tokio::sync::mpsc;
use uuid::Uuid;

/// What another part of the server asks a control connection to do.
#[derive(Debug, Clone, PartialEq)]
pub enum ControlSignal {
    /// Send `session.open`.
    SessionOpen(SessionOpen),
    /// Send `session.close`.
    SessionClose(SessionClose),
    /// Send `ready` again (a committed change of the declaration, 2.2 item 5).
    ReadyAgain,
    /// Close the connection with this code (a state change of the host).
    Close(CloseCode),
    /// Read the host now and close with the code of its state if it may no
    /// longer be connected (spec 9 `terminal.host_close` and the listener's
    /// reconciliation; [`crate::terminal::signals`]).
    CheckHost,
}

/// One registered control connection ([`LocalControlLinks::connections`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkInfo {
    /// The host.
    pub host_id: Uuid,
    /// The connection.
    pub conn_id: Uuid,
    /// Its first report was applied (eligible for sessions).
    pub report_applied: bool,
}

/// The host has no registered control connection on this process (or its
/// queue is full or gone).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the host has no usable control connection here")]
pub struct NotConnected;

/// The port the rest of the server uses.
pub trait ControlLinks: Send + Sync + fmt::Debug {
    /// Whether the host has a control connection whose first report was applied.
    fn is_connected(&self, host_id: Uuid) -> bool;

    /// Hands `signal` to the host's control connection without waiting.
    fn send(&self, host_id: Uuid, signal: ControlSignal) -> Result<(), NotConnected>;
}

#[derive(Debug)]
struct Link {
    conn_id: Uuid,
    report_applied: bool,
    /// When its first report was applied (and it was first announced), on
    /// the server's clock: the start of its probation (3.4).
    applied_at: Option<i64>,
    sender: mpsc::Sender<ControlSignal>,
}

/// A `session.ended` of a host that this process accepted but could not
/// record (the database could not write): applied by the host's next login
/// before the reconciliation of 6.2, so the session ends as the host reported
/// it and not `host_restarted` (docs/decisions.md D-356).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnrecordedEnd {
    /// The reported reason.
    pub close_reason: CloseReason,
    /// The reported detail.
    pub close_detail: Option<CloseDetail>,
}

/// The most unrecorded ends kept per host (a host has at most
/// `terminal.max_sessions_per_host` sessions, 100000 at most).
const UNRECORDED_ENDS_MAX: usize = 100_000;

/// The control connections of this process, by host.
#[derive(Default)]
pub struct LocalControlLinks {
    links: Mutex<HashMap<Uuid, Link>>,
    unrecorded_ends: Mutex<HashMap<Uuid, HashMap<Uuid, UnrecordedEnd>>>,
    /// The hosts whose duplicate verdict (3.4) this node is writing now.
    /// Per node, not per process: another node's verdict is not this node's
    /// to wait for (docs/decisions.md D-519).
    verdicts: Mutex<HashSet<Uuid>>,
}

impl fmt::Debug for LocalControlLinks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let count = self.links.lock().map(|links| links.len()).unwrap_or(0);
        f.debug_struct("LocalControlLinks")
            .field("connections", &count)
            .finish()
    }
}

impl LocalControlLinks {
    /// An empty registry.
    pub fn new() -> LocalControlLinks {
        LocalControlLinks::default()
    }

    /// Registers the connection `conn_id` of `host_id` with its signal queue,
    /// replacing an older registration of the host (the caller decided the
    /// duplicate check of 3.4 first). Returns the replaced connection's ID.
    pub fn register(
        &self,
        host_id: Uuid,
        conn_id: Uuid,
        sender: mpsc::Sender<ControlSignal>,
    ) -> Option<Uuid> {
        let mut links = self
            .links
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        links
            .insert(
                host_id,
                Link {
                    conn_id,
                    report_applied: false,
                    applied_at: None,
                    sender,
                },
            )
            .map(|old| old.conn_id)
    }

    /// Marks the connection's first report as applied: from now on the host
    /// counts as connected and may receive `session.open` (with several
    /// nodes after its probation, counted from `now`, the time of its first
    /// announcement).
    pub fn mark_report_applied(&self, host_id: Uuid, conn_id: Uuid, now: i64) {
        let mut links = self
            .links
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(link) = links
            .get_mut(&host_id)
            .filter(|link| link.conn_id == conn_id)
        {
            link.report_applied = true;
            link.applied_at.get_or_insert(now);
        }
    }

    /// The host's eligible connection and the time its first report was
    /// applied (the start of its probation of 3.4), if it has one.
    pub fn eligible(&self, host_id: Uuid) -> Option<(Uuid, i64)> {
        let links = self
            .links
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        links
            .get(&host_id)
            .filter(|link| link.report_applied && !link.sender.is_closed())
            .and_then(|link| link.applied_at.map(|at| (link.conn_id, at)))
    }

    /// Removes the registration if it is still `conn_id`'s; returns whether it was.
    pub fn unregister(&self, host_id: Uuid, conn_id: Uuid) -> bool {
        let mut links = self
            .links
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if links
            .get(&host_id)
            .is_some_and(|link| link.conn_id == conn_id)
        {
            links.remove(&host_id);
            true
        } else {
            false
        }
    }

    /// Keeps a `session.ended` of the host that could not be recorded.
    pub fn keep_unrecorded_end(&self, host_id: Uuid, session_id: Uuid, end: UnrecordedEnd) {
        let mut kept = self
            .unrecorded_ends
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let ends = kept.entry(host_id).or_default();
        if ends.len() < UNRECORDED_ENDS_MAX || ends.contains_key(&session_id) {
            ends.insert(session_id, end);
        }
    }

    /// The host's `session.ended` reports that could not be recorded.
    pub fn unrecorded_ends(&self, host_id: Uuid) -> HashMap<Uuid, UnrecordedEnd> {
        let kept = self
            .unrecorded_ends
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        kept.get(&host_id).cloned().unwrap_or_default()
    }

    /// Forgets `sessions` of the host's unrecorded ends (recorded now, or
    /// superseded by what the host said at its login).
    pub fn forget_unrecorded_ends(&self, host_id: Uuid, sessions: impl IntoIterator<Item = Uuid>) {
        let mut kept = self
            .unrecorded_ends
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(ends) = kept.get_mut(&host_id) {
            for session_id in sessions {
                ends.remove(&session_id);
            }
            if ends.is_empty() {
                kept.remove(&host_id);
            }
        }
    }

    /// Every registered connection of this process.
    pub fn connections(&self) -> Vec<LinkInfo> {
        let links = self
            .links
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        links
            .iter()
            .map(|(&host_id, link)| LinkInfo {
                host_id,
                conn_id: link.conn_id,
                report_applied: link.report_applied && !link.sender.is_closed(),
            })
            .collect()
    }

    /// The registered connection of the host, if any.
    pub fn conn_id(&self, host_id: Uuid) -> Option<Uuid> {
        let links = self
            .links
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        links.get(&host_id).map(|link| link.conn_id)
    }

    /// Lists (`running`) or unlists the host's duplicate verdict on this node.
    pub fn set_verdict_running(&self, host_id: Uuid, running: bool) {
        let mut verdicts = self
            .verdicts
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if running {
            verdicts.insert(host_id);
        } else {
            verdicts.remove(&host_id);
        }
    }

    /// Whether this node's duplicate verdict of the host is running.
    pub fn verdict_running(&self, host_id: Uuid) -> bool {
        self.verdicts
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .contains(&host_id)
    }
}

impl ControlLinks for LocalControlLinks {
    fn is_connected(&self, host_id: Uuid) -> bool {
        let links = self
            .links
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        links
            .get(&host_id)
            .is_some_and(|link| link.report_applied && !link.sender.is_closed())
    }

    fn send(&self, host_id: Uuid, signal: ControlSignal) -> Result<(), NotConnected> {
        let links = self
            .links
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let link = links.get(&host_id).ok_or(NotConnected)?;
        link.sender.try_send(signal).map_err(|_| NotConnected)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connected_only_after_the_report_and_only_for_the_registered_connection() {
        let links = LocalControlLinks::new();
        let host = Uuid::from_u128(1);
        let (first, second) = (Uuid::from_u128(10), Uuid::from_u128(11));
        let (tx, mut rx) = mpsc::channel(4);
        assert_eq!(links.register(host, first, tx), None);
        assert!(!links.is_connected(host));
        links.mark_report_applied(host, first, 0);
        assert!(links.is_connected(host));
        links.send(host, ControlSignal::ReadyAgain).unwrap();
        assert_eq!(rx.try_recv().unwrap(), ControlSignal::ReadyAgain);

        let (tx2, _rx2) = mpsc::channel(4);
        assert_eq!(links.register(host, second, tx2), Some(first));
        assert!(
            !links.is_connected(host),
            "a new connection starts unreported"
        );
        links.mark_report_applied(host, first, 0);
        assert!(
            !links.is_connected(host),
            "the old connection's report does not count"
        );
        assert!(!links.unregister(host, first));
        assert!(links.unregister(host, second));
        assert_eq!(
            links.send(host, ControlSignal::ReadyAgain),
            Err(NotConnected)
        );
    }
}
