//! The live sessions of the service (6.2, 6.3): which data connection is the
//! current one of a session, the PTYs that run, the `jti` memory of the check
//! order (5.3 step 6), and one **core** task per PTY that owns its output.
//!
//! The core ([`core`]) reads the PTY's output from the helper, keeps it in the
//! scrollback ring buffer, and hands it to the attached device when there is
//! one; while no device is attached it keeps reading, so the program never
//! blocks. It measures idle time (the last `data` or `resize` frame of the
//! device, across detaches) and the detach grace, and ends the session with
//! `idle_timeout` or `detach_expired`. Ends go to the server as `session.ended`
//! through the [`Reporter`], except ends the server itself ordered (4100,
//! `session.close`).
//!
//! # Layout
//! - [`scrollback`]: the ring buffer and the output collected while an attach is
//!   confirmed.
//! - [`core`]: the task of one PTY.

pub mod core;
pub mod scrollback;

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use bothy_proto::codes::{CloseDetail, CloseReason};
use bothy_proto::control::{HostMessage, SessionEnded};
use tokio::sync::{mpsc, oneshot};
use uuid::Uuid;

use crate::data::checks::LivePty;

pub use self::core::{CoreCmd, OutFrame};

/// How many reported ends the service remembers (an attach for such a session
/// gets 1000 and no report, 5.3).
const ENDED_MEMORY: usize = 4096;

/// Where the sessions' reports go: the control connection, or a queue for the
/// next login when it is down.
pub trait Reporter: Send + Sync + 'static {
    /// Sends `session.started` or `session.ended` now or after the next login.
    fn report(&self, message: HostMessage);
}

/// The current data connection of a session.
#[derive(Debug)]
struct LinkSlot {
    id: u64,
    /// Fires when a newer `session.open` replaces this connection (close 1000).
    replaced: Option<oneshot::Sender<()>>,
}

/// A running PTY.
#[derive(Debug, Clone)]
pub struct PtyHandle {
    /// sub, osu and prf of the token that opened it (step 8 of an attach).
    pub owner: LivePty,
    /// The core's commands.
    pub cmd: mpsc::Sender<CoreCmd>,
}

#[derive(Debug, Default)]
struct Entry {
    link: Option<LinkSlot>,
    pty: Option<PtyHandle>,
}

#[derive(Debug, Default)]
struct Inner {
    entries: HashMap<Uuid, Entry>,
    jtis: HashMap<Uuid, i64>,
    ended: VecDeque<Uuid>,
    next_link: u64,
}

/// The registry of the service's sessions.
pub struct Sessions {
    inner: Mutex<Inner>,
    reporter: Arc<dyn Reporter>,
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let count = self.lock().entries.len();
        f.debug_struct("Sessions").field("entries", &count).finish()
    }
}

/// A data connection's claim on its session.
#[derive(Debug)]
pub struct LinkClaim {
    /// The connection's number.
    pub id: u64,
    /// Fires when a newer `session.open` replaces it.
    pub replaced: oneshot::Receiver<()>,
}

impl Sessions {
    /// An empty registry reporting through `reporter`.
    pub fn new(reporter: Arc<dyn Reporter>) -> Sessions {
        Sessions {
            inner: Mutex::new(Inner::default()),
            reporter,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new data connection for `session_id` (one per `session.open`); an
    /// older one of the same session is told to close with 1000 (6.2).
    pub fn claim_link(&self, session_id: Uuid) -> LinkClaim {
        let mut inner = self.lock();
        inner.next_link += 1;
        let id = inner.next_link;
        let (tx, rx) = oneshot::channel();
        let entry = inner.entries.entry(session_id).or_default();
        if let Some(mut old) = entry.link.replace(LinkSlot {
            id,
            replaced: Some(tx),
        }) {
            if let Some(replaced) = old.replaced.take() {
                let _ = replaced.send(());
            }
        }
        LinkClaim { id, replaced: rx }
    }

    /// The data connection `id` of `session_id` is gone.
    pub fn release_link(&self, session_id: Uuid, id: u64) {
        let mut inner = self.lock();
        if let Some(entry) = inner.entries.get_mut(&session_id) {
            if entry.link.as_ref().is_some_and(|l| l.id == id) {
                entry.link = None;
            }
            if entry.link.is_none() && entry.pty.is_none() {
                inner.entries.remove(&session_id);
            }
        }
    }

    /// Whether `id` is still the current data connection of `session_id`.
    pub fn is_current_link(&self, session_id: Uuid, id: u64) -> bool {
        self.lock()
            .entries
            .get(&session_id)
            .and_then(|e| e.link.as_ref())
            .is_some_and(|l| l.id == id)
    }

    /// The live PTY of `session_id`.
    pub fn pty(&self, session_id: Uuid) -> Option<PtyHandle> {
        self.lock()
            .entries
            .get(&session_id)
            .and_then(|e| e.pty.clone())
    }

    /// Registers the PTY that connection `link_id` started; `false` (and the
    /// caller ends the PTY) when a newer connection replaced it meanwhile.
    pub fn register_pty(&self, session_id: Uuid, link_id: u64, pty: PtyHandle) -> bool {
        let mut inner = self.lock();
        let Some(entry) = inner.entries.get_mut(&session_id) else {
            return false;
        };
        if entry.link.as_ref().is_none_or(|l| l.id != link_id) || entry.pty.is_some() {
            return false;
        }
        entry.pty = Some(pty);
        true
    }

    /// Whether the end of `session_id` was already reported.
    pub fn is_ended(&self, session_id: Uuid) -> bool {
        self.lock().ended.contains(&session_id)
    }

    /// Step 6: records `jti` until `until_ms`; `false` if seen before. Expired
    /// entries are dropped on the way (the memory lives until exp + leeway).
    pub fn remember_jti(&self, jti: Uuid, until_ms: i64, now_ms: i64) -> bool {
        let mut inner = self.lock();
        inner.jtis.retain(|_, until| *until >= now_ms);
        if inner.jtis.contains_key(&jti) {
            return false;
        }
        inner.jtis.insert(jti, until_ms);
        true
    }

    /// The sessions to name in `live_sessions` (6.2): every live PTY.
    pub fn live_ids(&self) -> Vec<Uuid> {
        self.lock()
            .entries
            .iter()
            .filter(|(_, e)| e.pty.is_some())
            .map(|(id, _)| *id)
            .collect()
    }

    /// The number of live PTYs (`heartbeat.active_sessions`).
    pub fn active_count(&self) -> usize {
        self.lock()
            .entries
            .values()
            .filter(|e| e.pty.is_some())
            .count()
    }

    /// Reports `session.started` (once, after the PTY of an opening started).
    pub fn report_started(&self, session_id: Uuid) {
        self.reporter.report(HostMessage::SessionStarted(
            bothy_proto::control::SessionStarted { session_id },
        ));
    }

    /// The core of `session_id` ended: forget the PTY, and report the end when
    /// `report` carries one (ends the server ordered are not reported).
    pub fn pty_ended(&self, session_id: Uuid, report: Option<SessionEnded>) {
        {
            let mut inner = self.lock();
            if let Some(entry) = inner.entries.get_mut(&session_id) {
                entry.pty = None;
                if entry.link.is_none() {
                    inner.entries.remove(&session_id);
                }
            }
            if report.is_some() {
                if inner.ended.len() >= ENDED_MEMORY {
                    inner.ended.pop_front();
                }
                inner.ended.push_back(session_id);
            }
        }
        if let Some(ended) = report {
            self.reporter.report(HostMessage::SessionEnded(ended));
        }
    }

    /// Reports the end of an opening that never had a PTY.
    pub fn opening_failed(&self, session_id: Uuid, detail: CloseDetail) {
        self.pty_ended(
            session_id,
            Some(SessionEnded {
                session_id,
                close_reason: CloseReason::OpenFailed,
                close_detail: Some(detail),
                exit_code: None,
            }),
        );
    }

    /// Ends every PTY (4110, 4111, 4112, 4114, shutdown): without a report,
    /// because the server ends them itself (host state, restart).
    pub fn kill_all(&self) {
        for pty in self.all_ptys() {
            let _ = pty.cmd.try_send(CoreCmd::Kill);
        }
    }

    /// Ends the PTYs of `osu` (or every PTY when `None`) with
    /// host_policy_violation and `detail` (7.4 "Gate in operation").
    pub fn enforce(&self, osu: Option<&str>, detail: CloseDetail) {
        for pty in self.all_ptys() {
            if osu.is_none_or(|u| u == pty.owner.osu) {
                let _ = pty
                    .cmd
                    .try_send(CoreCmd::End(CloseReason::HostPolicyViolation, Some(detail)));
            }
        }
    }

    /// Ends the PTY of `session_id` without a report (`session.close`, 4100).
    pub fn kill(&self, session_id: Uuid) {
        if let Some(pty) = self.pty(session_id) {
            let _ = pty.cmd.try_send(CoreCmd::Kill);
        }
    }

    fn all_ptys(&self) -> Vec<PtyHandle> {
        self.lock()
            .entries
            .values()
            .filter_map(|e| e.pty.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Collect(Mutex<Vec<HostMessage>>);

    impl Reporter for Collect {
        fn report(&self, message: HostMessage) {
            self.0.lock().expect("lock").push(message);
        }
    }

    #[test]
    fn a_newer_link_replaces_the_older() {
        let sessions = Sessions::new(Arc::new(Collect::default()));
        let id = Uuid::from_u128(1);
        let mut first = sessions.claim_link(id);
        assert!(first.replaced.try_recv().is_err());
        let second = sessions.claim_link(id);
        assert!(first.replaced.try_recv().is_ok(), "the older one is told");
        assert!(!sessions.is_current_link(id, first.id));
        assert!(sessions.is_current_link(id, second.id));
        sessions.release_link(id, first.id);
        assert!(sessions.is_current_link(id, second.id));
        sessions.release_link(id, second.id);
        assert!(!sessions.is_current_link(id, second.id));
    }

    #[test]
    fn jtis_are_remembered_until_their_expiry() {
        let sessions = Sessions::new(Arc::new(Collect::default()));
        let jti = Uuid::from_u128(5);
        assert!(sessions.remember_jti(jti, 1_000, 0));
        assert!(!sessions.remember_jti(jti, 1_000, 500));
        assert!(!sessions.remember_jti(jti, 1_000, 1_000));
        // Past its expiry it is forgotten (a token that old fails step 5 anyway).
        assert!(sessions.remember_jti(jti, 3_000, 1_001));
    }

    #[test]
    fn ends_are_reported_once_and_remembered() {
        let reporter = Arc::new(Collect::default());
        let sessions = Sessions::new(reporter.clone());
        let id = Uuid::from_u128(2);
        let link = sessions.claim_link(id);
        let (tx, _rx) = mpsc::channel(1);
        let pty = PtyHandle {
            owner: LivePty {
                sub: Uuid::from_u128(3),
                osu: "alice".into(),
                prf: "shell".into(),
            },
            cmd: tx,
        };
        assert!(sessions.register_pty(id, link.id, pty.clone()));
        assert!(
            !sessions.register_pty(id, link.id, pty),
            "one PTY per session"
        );
        assert_eq!(sessions.live_ids(), vec![id]);
        sessions.pty_ended(
            id,
            Some(SessionEnded {
                session_id: id,
                close_reason: CloseReason::ProcessExited,
                close_detail: None,
                exit_code: Some(0),
            }),
        );
        assert!(sessions.live_ids().is_empty());
        assert!(sessions.is_ended(id));
        assert_eq!(reporter.0.lock().expect("lock").len(), 1);
    }
}
