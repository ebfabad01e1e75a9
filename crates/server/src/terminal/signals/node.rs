//! This process's handler of the signals ([`Node`]) and the task that feeds
//! it: the listener of [`super::listener`] with several nodes, the local
//! transport of the `db` module with one.
//!
//! What the handler does per kind (spec 24 section 9):
//! - `terminal.host_close`: every control connection of the host on this
//!   process reads the host now and closes with the code of the state read
//!   (4110 back in pairing, 4111 disabled or retired, 4112 disabled with
//!   `duplicate_connection`); a host that may stay connected keeps it. The
//!   connection first catches up with the log tail, so the `session.close` of
//!   the sessions ended in the same transaction reach the host before the
//!   close (docs/decisions.md D-87, D-500).
//! - `terminal.host_present`, `terminal.host_gone`: the presence view of the
//!   node ([`super::presence`]; announcements of its own connections are
//!   ignored). A host that starts or stops counting there while it has no
//!   eligible connection on this node gets `host.presence_changed` on this
//!   node, so the event is true on every node (10.2). Entries that outlive
//!   the window expire on the node's clock, looked at every
//!   [`TICK`](crate::terminal::relay::TICK), with the same event.
//! - `terminal.session_open` (several nodes; one node sends `session.open`
//!   itself after the commit): the node with an eligible control connection
//!   of the host sends `session.open` after the probation of 3.4 (twice
//!   `terminal.host_duplicate_probe_timeout` from the connection's first
//!   announcement), after reading the row again: the session not closed, the
//!   host active, the connection still the host's eligible one here; the
//!   deadline is the row's `open_deadline_at`. Each grant (the row's
//!   `token_jti`) is sent at most once per node, so a repeated or forged
//!   signal cannot replace the data connection of a live session. The other
//!   nodes need no state: a side that reaches them builds its expectation
//!   from the row at its identify (the relay), and an opening without sides
//!   ends through the sweep's compare-and-swap (docs/decisions.md D-507).
//! - `terminal.session_paired`: nothing to mark. An expectation without sides
//!   is the sweep's check 3, which never ends an opening on a host with
//!   `require_local_confirm = true` (D-509).
//!
//! The reconciliation after the listener's `LISTEN` succeeded again: the
//! node reads the host of every control connection it holds; a connection of
//! a host no longer active reads it again itself and closes with the code
//! above (a host disabled, retired or re-paired while the node missed the
//! signals closes now), and every eligible one (host active, first report
//! applied) is announced with `terminal.host_present` at once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bothy_proto::control::SessionOpen;
use sqlx::Row;
use uuid::Uuid;

use tokio::sync::broadcast;
use tokio::task::JoinHandle;

use super::presence::{self, Change};
use super::{Signal, SignalHandler, deliver, listener};
use crate::clock::millis;
use crate::config::ClusterMode;
use crate::db::DbError;
use crate::hosts::{self, HostState};
use crate::state::AppState;
use crate::terminal::links::{ControlLinks, ControlSignal};
use crate::terminal::relay::TICK;

/// The most grants a node remembers as sent (then it forgets them all; a
/// forged repetition of an old one may then reach the host once more).
const SENT_MAX: usize = 100_000;

/// The handler of this process.
#[derive(Debug, Clone)]
pub struct Node {
    state: AppState,
    /// The grant (`token_jti`) of each session whose `session.open` this node
    /// handed to a control connection.
    sent: Arc<Mutex<HashMap<Uuid, String>>>,
}

impl Node {
    /// The handler over the process's state.
    pub fn new(state: AppState) -> Node {
        Node {
            state,
            sent: Arc::default(),
        }
    }

    fn window(&self) -> i64 {
        presence::window_ms(&self.state.config().terminal)
    }

    /// `host.presence_changed` on this node for a host whose presence
    /// elsewhere changed, unless it has an eligible connection here (whose
    /// own events say it).
    fn presence_changed(&self, host_id: uuid::Uuid, connected: bool) {
        if self.state.local_control_links().is_connected(host_id) {
            return;
        }
        self.state
            .db()
            .publish_ephemeral(crate::terminal::control::presence(host_id, connected));
    }

    /// Drops the entries that outlived the window.
    pub fn expire(&self) {
        let now = self.state.clock().now_ms();
        for host_id in self.state.presence().expire(now, self.window()) {
            self.presence_changed(host_id, false);
        }
    }

    /// Rules b and c of 3.4 for an announced connection `announced` of the
    /// host: this node's own connection of the host, if older, is probed
    /// (in a task of its own; the handler goes on); if newer, it announces
    /// itself at once so the node of the older one probes. The node's own
    /// announcements never get here ([`PresenceView`](super::presence::PresenceView)).
    async fn compare_with_own(&self, host_id: uuid::Uuid, announced: uuid::Uuid) {
        let Some(own) = self.state.local_control_links().conn_id(host_id) else {
            return;
        };
        if own == announced || self.state.presence().is_own(announced) {
            return;
        }
        if own < announced {
            let state = self.state.clone();
            tokio::spawn(async move {
                crate::terminal::control::duplicate::probe_older_here(&state, host_id, own).await;
            });
        } else {
            let present = Signal::HostPresent {
                host_id,
                conn_id: own,
            };
            if let Err(error) = super::send(self.state.db(), &present).await {
                tracing::warn!(%error, "a control connection could not be announced");
            }
        }
    }

    /// `terminal.session_open`: see the module docs.
    fn session_open(&self, host_id: Uuid, session_id: Uuid) {
        if self.state.config().cluster.mode != ClusterMode::Multi {
            return;
        }
        let Some((conn_id, applied_at)) = self.state.local_control_links().eligible(host_id) else {
            return;
        };
        let state = self.state.clone();
        let sent = Arc::clone(&self.sent);
        tokio::spawn(async move {
            send_session_open(&state, &sent, host_id, session_id, conn_id, applied_at).await;
        });
    }

    fn check_host(&self, host_id: uuid::Uuid) {
        // No connection of the host here: nothing to close.
        let _ = self
            .state
            .local_control_links()
            .send(host_id, ControlSignal::CheckHost);
    }
}

impl SignalHandler for Node {
    async fn handle(&self, signal: Signal) {
        match signal {
            Signal::HostClose { host_id } => self.check_host(host_id),
            Signal::HostPresent { host_id, conn_id } => {
                self.compare_with_own(host_id, conn_id).await;
                let now = self.state.clock().now_ms();
                let change = self
                    .state
                    .presence()
                    .renew(host_id, conn_id, now, self.window());
                if change == Change::Appeared {
                    self.presence_changed(host_id, true);
                }
            }
            Signal::HostGone { host_id, conn_id } => {
                let now = self.state.clock().now_ms();
                let change = self
                    .state
                    .presence()
                    .remove(host_id, conn_id, now, self.window());
                if change == Change::Vanished {
                    self.presence_changed(host_id, false);
                }
            }
            Signal::SessionOpen {
                host_id,
                session_id,
            } => self.session_open(host_id, session_id),
            // See the module docs.
            Signal::SessionPaired { .. } => {}
        }
    }

    async fn reconcile(&self) {
        let connections = self.state.local_control_links().connections();
        for connection in connections {
            let host_id = connection.host_id;
            let active = match self.state.db().pool().acquire().await {
                Ok(mut conn) => hosts::load(&mut conn, host_id)
                    .await
                    .map(|host| host.is_some_and(|host| host.state == HostState::Active)),
                Err(error) => Err(hosts::HostError::from(DbError::from(error))),
            };
            match active {
                Ok(true) if connection.report_applied => {
                    let present = Signal::HostPresent {
                        host_id,
                        conn_id: connection.conn_id,
                    };
                    if let Err(error) = super::send(self.state.db(), &present).await {
                        // Its next heartbeat announces it again.
                        tracing::warn!(%error, "a control connection could not be announced");
                    }
                }
                Ok(true) => {}
                // Not active, or unreadable now: the connection reads its host
                // itself and closes with the code of the state.
                Ok(false) | Err(_) => self.check_host(host_id),
            }
        }
    }
}

/// Waits for the end of the connection's probation (3.4), reads the session
/// and the host again and hands `session.open` to the connection.
async fn send_session_open(
    state: &AppState,
    sent: &Mutex<HashMap<Uuid, String>>,
    host_id: Uuid,
    session_id: Uuid,
    conn_id: Uuid,
    applied_at: i64,
) {
    let probation = millis(state.config().terminal.host_duplicate_probe_timeout).saturating_mul(2);
    let end = applied_at.saturating_add(probation);
    let mut shutdown = state.shutdown().watch();
    while state.clock().now_ms() < end {
        if !still_eligible(state, host_id, conn_id) {
            return;
        }
        tokio::select! {
            () = listener::shutdown_signalled(&mut shutdown) => return,
            () = tokio::time::sleep(TICK) => {}
        }
    }
    let row = async {
        let mut conn = state.db().pool().acquire().await?;
        sqlx::query(
            "SELECT ts.state, ts.open_deadline_at, ts.token_jti, h.state AS host_state \
             FROM terminal_sessions ts JOIN hosts h ON h.id = ts.host_id \
             WHERE ts.id = $1 AND ts.host_id = $2",
        )
        .bind(crate::db::id_text(&session_id))
        .bind(crate::db::id_text(&host_id))
        .fetch_optional(&mut *conn)
        .await
    }
    .await;
    let row = match row {
        Ok(Some(row)) => row,
        // Unknown (or of another host): a forged signal.
        Ok(None) => return,
        Err(error) => {
            // 6.1 step 4: the open deadline ends the opening.
            tracing::warn!(%error, "session.open not sent: the session cannot be read");
            return;
        }
    };
    let read = (|| -> Result<(String, i64, String, String), sqlx::Error> {
        Ok((
            row.try_get("state")?,
            row.try_get::<Option<i64>, _>("open_deadline_at")?
                .unwrap_or(0),
            row.try_get::<Option<String>, _>("token_jti")?
                .unwrap_or_default(),
            row.try_get("host_state")?,
        ))
    })();
    let Ok((session_state, deadline, jti, host_state)) = read else {
        tracing::warn!("session.open not sent: the session row is not readable");
        return;
    };
    if session_state == "closed" || host_state != HostState::Active.as_str() {
        return;
    }
    if !still_eligible(state, host_id, conn_id) {
        // The connection ended or was replaced meanwhile: the deadline of
        // step 6 ends the opening (a newer connection's node got the signal
        // too, but only an eligible connection at its arrival sends).
        return;
    }
    {
        let mut sent = sent.lock().unwrap_or_else(|p| p.into_inner());
        if sent.get(&session_id) == Some(&jti) {
            return;
        }
        if sent.len() >= SENT_MAX {
            sent.clear();
        }
        sent.insert(session_id, jti);
    }
    let signal = ControlSignal::SessionOpen(SessionOpen {
        session_id,
        expires_at: u64::try_from(deadline).unwrap_or(0),
    });
    if state.local_control_links().send(host_id, signal).is_err() {
        tracing::info!(%session_id, "session.open not handed to the control connection");
    }
}

/// Whether `conn_id` is still the host's eligible connection on this node.
fn still_eligible(state: &AppState, host_id: Uuid, conn_id: Uuid) -> bool {
    state
        .local_control_links()
        .eligible(host_id)
        .map(|(current, _)| current)
        == Some(conn_id)
}

/// Starts the task that feeds [`Node`] until the shutdown: the listener with
/// `cluster.mode: multi`, else the local transport.
pub fn start(state: AppState) -> JoinHandle<()> {
    let node = Arc::new(Node::new(state.clone()));
    let shutdown = state.shutdown().watch();
    let expiry = run_expiry(Arc::clone(&node), shutdown.clone());
    match state.config().cluster.mode {
        ClusterMode::Multi => {
            let url = state.db().url().to_owned();
            let cap = state.config().database.listen_reconnect_backoff_cap;
            let feed = listener::run(url, node, cap, shutdown);
            tokio::spawn(async move {
                tokio::join!(feed, expiry);
            })
        }
        ClusterMode::Single => {
            let receiver = state.db().subscribe_signals();
            let feed = run_local(receiver, node, shutdown);
            tokio::spawn(async move {
                tokio::join!(feed, expiry);
            })
        }
    }
}

/// Looks at the presence view every [`TICK`] until the shutdown.
async fn run_expiry(node: Arc<Node>, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = listener::shutdown_signalled(&mut shutdown) => return,
            _ = tick.tick() => node.expire(),
        }
    }
}

/// The local transport: every payload of this process, in order.
pub async fn run_local<H: SignalHandler>(
    mut receiver: broadcast::Receiver<Arc<str>>,
    handler: Arc<H>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        let payload = tokio::select! {
            () = listener::shutdown_signalled(&mut shutdown) => return,
            payload = receiver.recv() => payload,
        };
        match payload {
            Ok(payload) => {
                deliver(handler.as_ref(), &payload).await;
            }
            Err(broadcast::error::RecvError::Lagged(missed)) => {
                // As after a lost LISTEN: read the state instead.
                tracing::warn!(missed, "the signal handler fell behind; reconciling");
                handler.reconcile().await;
            }
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}
