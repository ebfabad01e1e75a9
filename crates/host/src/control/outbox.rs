//! The outbox of the control connection: the sessions' reports go to the
//! current connection, or wait in a queue for the next login while it is
//! down; and the request for a fresh `report`.

use std::sync::Mutex;

use bothy_proto::control::HostMessage;
use tokio::sync::{Notify, mpsc};

use crate::sessions::Reporter;

/// The way of the sessions' reports to the server: the outbox of the current
/// connection, or a queue for the next login while it is down.
#[derive(Debug, Default)]
pub struct ControlHandle {
    inner: Mutex<Outbox>,
    pub(super) report_needed: Notify,
}

#[derive(Debug, Default)]
struct Outbox {
    current: Option<mpsc::UnboundedSender<HostMessage>>,
    pending: Vec<HostMessage>,
}

impl ControlHandle {
    /// Asks the connection to send a fresh `report` (the doctor's result changed).
    pub fn request_report(&self) {
        self.report_needed.notify_one();
    }

    /// The sessions of reports not sent yet (named in `live_sessions`: "whose
    /// end it could not yet report", 6.2).
    pub fn unreported_sessions(&self) -> Vec<uuid::Uuid> {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner
            .pending
            .iter()
            .filter_map(|m| match m {
                HostMessage::SessionEnded(e) => Some(e.session_id),
                _ => None,
            })
            .collect()
    }

    pub(super) fn attach(&self) -> (mpsc::UnboundedReceiver<HostMessage>, Vec<HostMessage>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.current = Some(tx);
        (rx, std::mem::take(&mut inner.pending))
    }

    /// The connection is gone: whatever it had not written goes back to the queue.
    pub(super) fn detach(
        &self,
        mut rx: mpsc::UnboundedReceiver<HostMessage>,
        unsent: Vec<HostMessage>,
    ) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.current = None;
        let mut queued = unsent;
        while let Ok(message) = rx.try_recv() {
            queued.push(message);
        }
        queued.append(&mut inner.pending);
        inner.pending = queued;
    }
}

impl Reporter for ControlHandle {
    fn report(&self, message: HostMessage) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(current) = inner.current.as_ref() {
            if let Err(mpsc::error::SendError(message)) = current.send(message) {
                inner.pending.push(message);
            }
        } else {
            inner.pending.push(message);
        }
    }
}
