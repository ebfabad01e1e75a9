//! The server's shutdown as a broadcast (STYLE 9, after mini-redis
//! `src/shutdown.rs`): [`App::serve`](crate::app::App::serve) owns the one
//! [`Shutdown`] and triggers it when its shutdown future completes; every
//! long-lived task learns of it through a [`ShutdownListener`] and the server
//! waits for the tasks it tracks before it closes the database.
//!
//! Why this exists besides the graceful shutdown of the HTTP connections
//! ([`crate::http::serve()`]): an upgraded WebSocket leaves hyper's connection
//! tracking at the upgrade, so hyper neither tells it about the shutdown nor
//! waits for it. A WebSocket task therefore takes a [`ShutdownGuard`] *before*
//! the `101` goes out, selects on [`ShutdownGuard::triggered`] next to its
//! other work, closes its socket with 4013 `server_shutdown` (spec 24 section
//! 13: "WebSockets will close with 4013") and drops the guard;
//! [`Shutdown::drained`] resolves once every guard is gone. The events stream
//! (`GET /api/v1/events`) uses it now; the terminal relay's device streams and
//! host connections take a guard the same way.
//!
//! The log tail ([`crate::events::LogTail`]) takes the same signal as its
//! `watch::Receiver<bool>` ([`ShutdownListener::watch`]), so it stops with the
//! server.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

/// How long a WebSocket task waits for the peer's close frame after it sent
/// its own (RFC 6455 7.1.1: the server closes the TCP connection after the
/// closing handshake, so the peer has read the code before the connection
/// goes). Part of every task's goodbye, so the server's drain allows for it.
pub const CLOSE_ANSWER_WAIT: Duration = Duration::from_secs(2);

/// The trigger: one per server, owned by whoever runs the server.
#[derive(Debug)]
pub struct Shutdown {
    /// `true` once triggered. A watch, not a broadcast: a task that subscribes
    /// after the trigger still sees it, and nobody can lag behind.
    signal: watch::Sender<bool>,
    /// How many tracked tasks are still running (see [`ShutdownGuard`]).
    tasks: Arc<watch::Sender<usize>>,
}

impl Default for Shutdown {
    fn default() -> Self {
        Shutdown::new()
    }
}

impl Shutdown {
    /// A shutdown that has not been triggered, with no tracked tasks.
    pub fn new() -> Shutdown {
        let (signal, _) = watch::channel(false);
        let (tasks, _) = watch::channel(0);
        Shutdown {
            signal,
            tasks: Arc::new(tasks),
        }
    }

    /// A listener for tasks to come.
    pub fn listener(&self) -> ShutdownListener {
        ShutdownListener {
            signal: self.signal.subscribe(),
            tasks: Arc::clone(&self.tasks),
        }
    }

    /// Tells every listener, now and later, that the server shuts down.
    /// Idempotent.
    pub fn trigger(&self) {
        // `send_replace` stores the value even without any receiver.
        self.signal.send_replace(true);
    }

    /// Whether [`Shutdown::trigger`] was called.
    pub fn is_triggered(&self) -> bool {
        *self.signal.borrow()
    }

    /// Resolves once no [`ShutdownGuard`] is alive. Call it after
    /// [`Shutdown::trigger`], under a timeout of the caller's choice.
    pub async fn drained(&self) {
        let mut tasks = self.tasks.subscribe();
        // The sender lives in `self`, so this cannot fail while we wait.
        let _ = tasks.wait_for(|running| *running == 0).await;
    }

    /// How many tracked tasks are running now.
    pub fn tracked(&self) -> usize {
        *self.tasks.borrow()
    }
}

/// What a task keeps to learn of the shutdown: cheap to clone, lives in
/// [`AppState`](crate::state::AppState).
#[derive(Debug, Clone)]
pub struct ShutdownListener {
    signal: watch::Receiver<bool>,
    tasks: Arc<watch::Sender<usize>>,
}

impl ShutdownListener {
    /// Whether the shutdown was triggered (or the [`Shutdown`] is gone).
    pub fn is_triggered(&self) -> bool {
        *self.signal.borrow() || self.signal.has_changed().is_err()
    }

    /// The raw signal, for code that takes a `watch::Receiver<bool>` whose
    /// `true` (or a dropped sender) means "stop" — the log tail.
    pub fn watch(&self) -> watch::Receiver<bool> {
        self.signal.clone()
    }

    /// How many tracked tasks are running now (for tests of the order of
    /// the shutdown).
    pub fn tracked(&self) -> usize {
        *self.tasks.borrow()
    }

    /// Registers a task the server waits for at shutdown. Take it before the
    /// task is announced to its peer (before the WebSocket's `101`), so a
    /// shutdown that starts in between still waits for it.
    pub fn track(&self) -> ShutdownGuard {
        self.tasks.send_modify(|running| *running += 1);
        ShutdownGuard {
            signal: self.signal.clone(),
            tasks: Arc::clone(&self.tasks),
        }
    }
}

/// A tracked task's part: [`ShutdownGuard::triggered`] to select on; dropping
/// it tells the server this task is done.
#[derive(Debug)]
pub struct ShutdownGuard {
    signal: watch::Receiver<bool>,
    tasks: Arc<watch::Sender<usize>>,
}

impl ShutdownGuard {
    /// Resolves once the shutdown is triggered (at once if it already was, or
    /// if the [`Shutdown`] is gone). Cancel-safe: use it in `select!`.
    pub async fn triggered(&mut self) {
        // An error means the sender was dropped: the server is gone, stop too.
        let _ = self.signal.wait_for(|stop| *stop).await;
    }

    /// Whether the shutdown was triggered.
    pub fn is_triggered(&self) -> bool {
        *self.signal.borrow() || self.signal.has_changed().is_err()
    }
}

impl Drop for ShutdownGuard {
    fn drop(&mut self) {
        self.tasks
            .send_modify(|running| *running = running.saturating_sub(1));
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn guards_see_the_trigger_and_the_drain_waits_for_them() {
        let shutdown = Shutdown::new();
        let listener = shutdown.listener();
        let mut guard = listener.track();
        assert!(!guard.is_triggered());
        assert_eq!(shutdown.tracked(), 1);

        let task = tokio::spawn(async move {
            guard.triggered().await;
            // The task closes its socket here, then drops the guard.
            drop(guard);
        });
        shutdown.trigger();
        tokio::time::timeout(Duration::from_secs(5), shutdown.drained())
            .await
            .unwrap_or_else(|_| panic!("drained"));
        assert!(task.await.is_ok());
        assert_eq!(shutdown.tracked(), 0);

        // A task that starts after the trigger sees it at once.
        let mut late = listener.track();
        tokio::time::timeout(Duration::from_secs(5), late.triggered())
            .await
            .unwrap_or_else(|_| panic!("late guard triggered"));
        assert!(listener.is_triggered());
    }

    #[tokio::test]
    async fn a_dropped_shutdown_counts_as_triggered() {
        let shutdown = Shutdown::new();
        let listener = shutdown.listener();
        let mut guard = listener.track();
        drop(shutdown);
        assert!(listener.is_triggered());
        tokio::time::timeout(Duration::from_secs(5), guard.triggered())
            .await
            .unwrap_or_else(|_| panic!("triggered"));
    }
}
