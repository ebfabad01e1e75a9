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
//! - `terminal.session_open`, `terminal.session_paired`: nothing yet. No unit
//!   of work of this build sends them; rules b and c of 3.4, the probation
//!   and the openings across nodes are the rest of issue 18, and until they
//!   exist `serve` refuses `cluster.mode: multi` (D-321). A forged one
//!   therefore causes nothing.
//!
//! The reconciliation after the listener's `LISTEN` succeeded again: the
//! node reads the host of every control connection it holds; a connection of
//! a host no longer active reads it again itself and closes with the code
//! above (a host disabled, retired or re-paired while the node missed the
//! signals closes now), and every eligible one (host active, first report
//! applied) is announced with `terminal.host_present` at once.

use std::sync::Arc;

use tokio::sync::broadcast;
use tokio::task::JoinHandle;

use super::presence::{self, Change};
use super::{Signal, SignalHandler, deliver, listener};
use crate::config::ClusterMode;
use crate::db::DbError;
use crate::hosts::{self, HostState};
use crate::state::AppState;
use crate::terminal::links::{ControlLinks, ControlSignal};
use crate::terminal::relay::TICK;

/// The handler of this process.
#[derive(Debug, Clone)]
pub struct Node {
    state: AppState,
}

impl Node {
    /// The handler over the process's state.
    pub fn new(state: AppState) -> Node {
        Node { state }
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
            // See the module docs: not sent by this build.
            Signal::SessionOpen { .. } | Signal::SessionPaired { .. } => {}
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
