//! The service's side of the local confirmation (6.4): the endpoint
//! `confirm.sock` (mode 0666, in the folder the service manager makes for the
//! service user), the agents connected to it, and the requests.
//!
//! - At the connection the peer rule ([`super::peer`]) judges the peer's
//!   user (SO_PEERCRED); a refused peer is logged with
//!   `confirm_peer_refused` and its connection closed.
//! - Before every request the rule judges every connected agent again; a
//!   refused one is closed the same way.
//! - A request goes to every accepted agent; the first answer wins, and the
//!   other agents get `cancel`. No accepted agent, no answer within
//!   `host_service.local_confirm_timeout`, a denial, or the loss of every
//!   asked agent deny (D-204). The time runs from the request; it does not
//!   end at the opening's `expires_at`, which bounds only the wait for
//!   `start` (6.1 step 7, "only this wait").
//! - An agent that sends a line that is no answer (or a line longer than
//!   [`MAX_LINE`](super::protocol::MAX_LINE)) is closed with
//!   `confirm_agent_invalid`; an answer to a request it was not asked or
//!   that is over is ignored (an answer racing a cancel is normal).
//!
//! The logs name no user: the codes and the reason only (10.4, the rule for
//! names of 2.2).

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, oneshot, watch};

use super::peer::{PeerRule, Refusal};
use super::protocol::{FromAgent, Kind, MAX_TIMEOUT_MS, ProtocolError, Side, ToAgent, converse};

/// The most connections the endpoint holds at once (agents and peers being
/// judged): every local user may connect (mode 0666), so the number is
/// bounded; a connection beyond it is closed at once (D-200).
pub const MAX_CONNECTIONS: usize = 32;

/// Why a confirmation was denied (the `reason` of `local_confirm_denied`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DenyReason {
    /// No accepted agent was connected.
    NoAgent,
    /// An agent answered no (the person, or the agent without a dialog).
    Denied,
    /// No answer within `host_service.local_confirm_timeout`.
    Timeout,
    /// Every asked agent went away before answering.
    AgentsGone,
}

impl DenyReason {
    /// The code in the log.
    pub fn as_str(self) -> &'static str {
        match self {
            DenyReason::NoAgent => "no_agent",
            DenyReason::Denied => "denied",
            DenyReason::Timeout => "timeout",
            DenyReason::AgentsGone => "agents_gone",
        }
    }
}

/// How one request ended before its deadline.
#[derive(Debug)]
enum Outcome {
    Answer { agent: u64, allow: bool },
    AgentsGone,
}

#[derive(Debug)]
struct Agent {
    uid: u32,
    /// Dropping it ends the connection's task, which closes the connection.
    tx: mpsc::UnboundedSender<ToAgent>,
}

#[derive(Debug)]
struct Pending {
    /// The agents that were asked and are still connected.
    agents: Vec<u64>,
    answer: Option<oneshot::Sender<Outcome>>,
}

#[derive(Debug, Default)]
struct HubState {
    next_agent: u64,
    next_request: u64,
    agents: HashMap<u64, Agent>,
    pending: HashMap<u64, Pending>,
}

/// The agents and the open requests of one service.
#[derive(Debug)]
pub struct ConfirmHub {
    rule: PeerRule,
    timeout: Duration,
    state: Mutex<HubState>,
    connections: std::sync::atomic::AtomicUsize,
}

/// Counts one connection of the endpoint while it lives.
struct ConnectionSlot<'a>(&'a std::sync::atomic::AtomicUsize);

impl Drop for ConnectionSlot<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl ConfirmHub {
    /// A hub that judges peers by `rule` and waits `timeout` for an answer.
    pub fn new(rule: PeerRule, timeout: Duration) -> ConfirmHub {
        ConfirmHub {
            rule,
            timeout,
            state: Mutex::new(HubState::default()),
            connections: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HubState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Binds the endpoint at `path` (a stale socket is replaced) with mode
    /// 0666: the mode lets every local user connect; the peer rule decides.
    pub fn bind(path: &Path) -> std::io::Result<UnixListener> {
        match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let listener = UnixListener::bind(path)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))?;
        Ok(listener)
    }

    /// Accepts agents until `stop`; removes the socket at the end.
    pub async fn serve(
        self: Arc<Self>,
        listener: UnixListener,
        path: PathBuf,
        mut stop: watch::Receiver<bool>,
    ) {
        loop {
            let stream = tokio::select! {
                // The guard of `wait_for` must not live in this future (Send).
                () = async { let _ = stop.wait_for(|s| *s).await; } => break,
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => stream,
                    Err(error) => {
                        tracing::warn!(%error, "accept on confirm.sock failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
            };
            let held = self
                .connections
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            if held >= MAX_CONNECTIONS {
                self.connections
                    .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                tracing::warn!(
                    code = "confirm_endpoint_busy",
                    "confirm.sock holds the most connections; a new one was closed"
                );
                drop(stream);
                continue;
            }
            tokio::spawn(Arc::clone(&self).admit(stream));
        }
        let _ = std::fs::remove_file(&path);
    }

    /// The peer rule at the connection, then the connection's task.
    async fn admit(self: Arc<Self>, stream: UnixStream) {
        let _slot = ConnectionSlot(&self.connections);
        let judged = match getsockopt(&stream, PeerCredentials) {
            Ok(credentials) => {
                let uid = credentials.uid();
                self.rule.judge(uid).await.map(|()| uid)
            }
            Err(_) => Err(Refusal::NoCredentials),
        };
        let uid = match judged {
            Ok(uid) => uid,
            Err(refusal) => {
                refused(refusal);
                return;
            }
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let id = {
            let mut state = self.lock();
            let id = state.next_agent;
            state.next_agent += 1;
            state.agents.insert(id, Agent { uid, tx });
            id
        };
        tracing::info!(
            code = "confirm_agent_connected",
            agent = id,
            "a confirmation agent connected"
        );
        self.connection(id, stream, rx).await;
        self.remove_agent(id);
        tracing::info!(
            code = "confirm_agent_disconnected",
            agent = id,
            "a confirmation agent disconnected"
        );
    }

    /// Writes what the hub sends and reads the agent's answers, until either
    /// side ends.
    async fn connection(
        &self,
        agent: u64,
        stream: UnixStream,
        rx: mpsc::UnboundedReceiver<ToAgent>,
    ) {
        let mut side = AgentConnection {
            hub: self,
            agent,
            rx,
        };
        converse(stream, &mut side).await;
    }

    /// An agent's answer: the first one to a request it was asked wins.
    fn answer(&self, agent: u64, request: u64, allow: bool) {
        let mut state = self.lock();
        let Some(pending) = state.pending.get_mut(&request) else {
            return;
        };
        if !pending.agents.contains(&agent) {
            return;
        }
        if let Some(answer) = pending.answer.take() {
            let _ = answer.send(Outcome::Answer { agent, allow });
        }
    }

    /// Forgets an agent (its connection ends when its sender is dropped); a
    /// request whose every asked agent is gone ends at once.
    fn remove_agent(&self, agent: u64) {
        let mut state = self.lock();
        state.agents.remove(&agent);
        for pending in state.pending.values_mut() {
            pending.agents.retain(|a| *a != agent);
            if pending.agents.is_empty()
                && let Some(answer) = pending.answer.take()
            {
                let _ = answer.send(Outcome::AgentsGone);
            }
        }
    }

    /// Asks the person at the desk (6.4); `Ok(())` is consent.
    pub async fn confirm(
        &self,
        kind: Kind,
        profile: &str,
        session_user: &str,
    ) -> Result<(), DenyReason> {
        // The peer rule again, before the request.
        let candidates: Vec<(u64, u32)> = self
            .lock()
            .agents
            .iter()
            .map(|(id, agent)| (*id, agent.uid))
            .collect();
        let mut accepted = Vec::new();
        for (id, uid) in candidates {
            match self.rule.judge(uid).await {
                Ok(()) => accepted.push(id),
                Err(refusal) => {
                    refused(refusal);
                    self.remove_agent(id);
                }
            }
        }
        let timeout_ms = u64::try_from(self.timeout.as_millis())
            .unwrap_or(u64::MAX)
            .clamp(1, MAX_TIMEOUT_MS);
        let (answer_tx, answer_rx) = oneshot::channel();
        let request = {
            let mut state = self.lock();
            accepted.retain(|id| state.agents.contains_key(id));
            if accepted.is_empty() {
                return Err(DenyReason::NoAgent);
            }
            let request = state.next_request;
            state.next_request += 1;
            let message = ToAgent::Confirm {
                id: request,
                kind,
                profile: profile.to_owned(),
                session_user: session_user.to_owned(),
                timeout_ms,
            };
            for id in &accepted {
                if let Some(agent) = state.agents.get(id) {
                    let _ = agent.tx.send(message.clone());
                }
            }
            state.pending.insert(
                request,
                Pending {
                    agents: accepted,
                    answer: Some(answer_tx),
                },
            );
            request
        };
        // Whatever ends the wait (also a dropped future) ends the request and
        // cancels the dialogs of the agents that did not win.
        let mut guard = RequestGuard {
            hub: self,
            request,
            winner: None,
        };
        match tokio::time::timeout(self.timeout, answer_rx).await {
            Ok(Ok(Outcome::Answer { agent, allow })) => {
                guard.winner = Some(agent);
                if allow {
                    Ok(())
                } else {
                    Err(DenyReason::Denied)
                }
            }
            Ok(Ok(Outcome::AgentsGone) | Err(_)) => Err(DenyReason::AgentsGone),
            Err(_) => Err(DenyReason::Timeout),
        }
    }
}

/// Ends a request: forgets it and sends `cancel` to every asked agent but
/// the one whose answer won.
struct RequestGuard<'a> {
    hub: &'a ConfirmHub,
    request: u64,
    winner: Option<u64>,
}

impl Drop for RequestGuard<'_> {
    fn drop(&mut self) {
        let mut state = self.hub.lock();
        let Some(pending) = state.pending.remove(&self.request) else {
            return;
        };
        for id in pending.agents {
            if Some(id) == self.winner {
                continue;
            }
            if let Some(agent) = state.agents.get(&id) {
                let _ = agent.tx.send(ToAgent::Cancel { id: self.request });
            }
        }
    }
}

fn refused(refusal: Refusal) {
    tracing::warn!(
        code = "confirm_peer_refused",
        reason = refusal.as_str(),
        "a peer of confirm.sock was refused and its connection closed"
    );
}

/// The service's end of the connection of one agent.
struct AgentConnection<'a> {
    hub: &'a ConfirmHub,
    agent: u64,
    rx: mpsc::UnboundedReceiver<ToAgent>,
}

impl Side for AgentConnection<'_> {
    async fn next_to_send(&mut self) -> Option<String> {
        self.rx.recv().await.map(|message| message.encode())
    }

    fn received(&mut self, line: &[u8]) -> Result<(), ProtocolError> {
        let FromAgent::Answer { id, allow } = FromAgent::decode(line)?;
        self.hub.answer(self.agent, id, allow);
        Ok(())
    }

    fn invalid(&self) {
        tracing::warn!(
            code = "confirm_agent_invalid",
            agent = self.agent,
            "a confirmation agent sent a line that is no answer; its connection was closed"
        );
    }
}
