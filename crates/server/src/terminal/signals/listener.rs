//! The listener of `cluster.mode: multi` (spec 24 section 9 "Listener"): the
//! one `LISTEN ephemeral` connection of an api process, with the application
//! name `bothy-ephemeral`, whose notifications reach the handler in order.
//!
//! On the loss of the connection the listener writes one log record, tries
//! again at once and then every `database.listen_reconnect_backoff_cap`. Only
//! after `LISTEN` succeeded again — so that nothing committed from then on is
//! missed — the handler reconciles ([`SignalHandler::reconcile`]); the first
//! `LISTEN` at the start reconciles as well (nothing to close then, but the
//! connections are announced). A soft dependency: no readiness check, `/readyz`
//! unchanged; it stops with the server's shutdown, like the log tail.
//!
//! The connection is its own one-connection pool, so a lost backend is never
//! reused: the listener drops it and connects anew (sqlx's own reconnect of
//! [`PgListener`] is off, so the loss is seen here and reconciled).

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use tokio::sync::watch;

use super::{SignalHandler, deliver};
use crate::db::SIGNAL_CHANNEL;

/// The application name of the connection (`pg_stat_activity`).
pub const APPLICATION_NAME: &str = "bothy-ephemeral";

/// Resolves once the shutdown is signalled (or its sender is gone).
pub(crate) async fn shutdown_signalled(shutdown: &mut watch::Receiver<bool>) {
    // An error means the sender is gone: treat as shut down.
    let _ = shutdown.wait_for(|stopped| *stopped).await;
}

/// Runs the listener until the shutdown. `url` is the database URL (never
/// logged).
pub async fn run<H: SignalHandler>(
    url: String,
    handler: Arc<H>,
    backoff_cap: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    // Failed attempts since the last success; the first retry is at once.
    let mut failures: u32 = 0;
    let mut ever_connected = false;
    loop {
        let connected = tokio::select! {
            () = shutdown_signalled(&mut shutdown) => return,
            connected = connect(&url) => connected,
        };
        match connected {
            Ok(mut listener) => {
                if ever_connected {
                    tracing::info!("the signal listener listens again; reconciling");
                }
                ever_connected = true;
                failures = 0;
                handler.reconcile().await;
                let lost = loop {
                    let received = tokio::select! {
                        () = shutdown_signalled(&mut shutdown) => return,
                        received = listener.try_recv() => received,
                    };
                    match received {
                        Ok(Some(notification)) => {
                            deliver(handler.as_ref(), notification.payload()).await;
                        }
                        Ok(None) => break "the connection ended".to_owned(),
                        Err(error) => break crate::db::cause(&error).to_string(),
                    }
                };
                tracing::warn!(
                    error = %lost,
                    "the signal listener lost its connection; signals sent meanwhile are missed \
                     until it listens again"
                );
            }
            Err(error) => {
                failures = failures.saturating_add(1);
                if failures == 1 && !ever_connected {
                    tracing::warn!(
                        error = %crate::db::cause(&error),
                        "the signal listener cannot connect; trying again every {:?}",
                        backoff_cap
                    );
                }
            }
        }
        // Again at once after a loss, then every backoff cap.
        let delay = if failures == 0 {
            Duration::ZERO
        } else {
            backoff_cap
        };
        tokio::select! {
            () = shutdown_signalled(&mut shutdown) => return,
            () = tokio::time::sleep(delay) => {}
        }
    }
}

async fn connect(url: &str) -> Result<PgListener, sqlx::Error> {
    let options = PgConnectOptions::from_str(url)?.application_name(APPLICATION_NAME);
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .min_connections(0)
        .connect_with(options)
        .await?;
    let mut listener = PgListener::connect_with(&pool).await?;
    listener.eager_reconnect(false);
    listener.listen(SIGNAL_CHANNEL).await?;
    Ok(listener)
}
