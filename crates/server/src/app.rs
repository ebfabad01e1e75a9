//! Assembling a running server from its configuration: the data directory, the
//! database (migrated), the token pepper, TLS, the event log tail, and the router —
//! and serving it on a given listener until a shutdown future completes (STYLE 9
//! and 10: `serve` takes the listener and the shutdown, so tests run the real
//! server on port 0).
//!
//! # Stopping
//! When the shutdown future completes, [`App::serve`] triggers the one
//! [`Shutdown`]: the accept loop stops and drains the HTTP connections, every
//! WebSocket task closes its socket with 4013 `server_shutdown`, and the log tail
//! (started in [`App::open`] on the same signal) stops. `serve` then waits for
//! the WebSocket tasks and the relay's writes they started (the byte counters
//! of every released session, issue 16) as long as one task's goodbye may take
//! (`gateway.write_timeout` for the close frame plus [`CLOSE_ANSWER_WAIT`] for
//! the answer), then for the tail task, and closes the database last.
//!
//! # terminal.sweep
//! [`App::open`] also releases the terminal sessions a previous run left
//! `active` (one node, [`crate::terminal::sweep::release_at_start`]) and starts
//! the job `terminal.sweep` on the injected clock and the same shutdown signal;
//! `serve` waits for it after the tail.

use std::fs;
use std::future::Future;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::clock::SharedClock;
use crate::config::{ClusterMode, Config, Tls};
use crate::db::{Db, DbError, DbOptions};
use crate::events::{EventsError, LogTail, TailConfig};
use crate::http;
use crate::pepper::{Pepper, PepperError};
use crate::shutdown::{CLOSE_ANSWER_WAIT, Shutdown};
use crate::state::AppState;
use crate::terminal::signals;
use crate::terminal::sweep::{self, SweepError};
use crate::tls::{self, TlsError, TlsSource};

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The data directory could not be created or secured.
    #[error("cannot use the data directory {path}: {source}")]
    DataDir {
        /// The directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The database could not be opened or migrated.
    #[error("database: {0}")]
    Db(#[from] DbError),
    /// The token pepper file is unusable (too open, malformed, unreadable).
    #[error("token pepper: {0}")]
    Pepper(#[from] PepperError),
    /// TLS could not be set up.
    #[error("TLS: {0}")]
    Tls(#[from] TlsError),
    /// The event log tail could not start (it reads the log's end first).
    #[error("event log: {0}")]
    Events(#[from] EventsError),
    /// The terminal sessions of the previous run could not be released.
    #[error("terminal sessions at start: {0}")]
    Sweep(#[from] SweepError),
    /// Serving failed.
    #[error("serving failed: {0}")]
    Serve(#[source] std::io::Error),
    /// `server.tls: off` on an address other than loopback, without the
    /// operator's acknowledgement (docs/decisions.md D-354).
    #[error(
        "config_invalid: server.tls is off while server.listen ({listen}) is not a loopback \
         address: access tokens, session cookies and passwords would cross the network in \
         clear. Listen on 127.0.0.1 or [::1] behind a TLS-terminating proxy on the same \
         machine, use server.tls: auto or certificate files, or set \
         server.tls_off_beyond_loopback: true if the network path to the proxy is protected \
         otherwise"
    )]
    TlsOffBeyondLoopback {
        /// The configured `server.listen`.
        listen: std::net::SocketAddr,
    },
}

/// A server ready to serve: database open and migrated, TLS loaded, the log
/// tail running.
#[derive(Debug)]
pub struct App {
    state: AppState,
    tls: Option<Arc<rustls::ServerConfig>>,
    ca_file: Option<PathBuf>,
    /// The trigger of the server's shutdown; dropping an `App` that never
    /// served drops it too, which stops the tail as well.
    shutdown: Shutdown,
    /// The log tail's task, awaited by [`App::serve`] before it returns.
    tail_task: JoinHandle<()>,
    /// The task of the job `terminal.sweep`, awaited by [`App::serve`].
    sweep_task: JoinHandle<()>,
    /// The task that hands the signals of section 9 to this process's
    /// handler, awaited by [`App::serve`].
    signals_task: JoinHandle<()>,
}

impl App {
    /// Opens everything the configuration names: creates the data directory
    /// (mode 0700), connects to and migrates the database, loads or creates the
    /// token pepper (mode 0600) and the TLS material, and starts the event log
    /// tail on the server's shutdown signal.
    pub async fn open(config: Config, clock: SharedClock) -> Result<App, StartError> {
        check_plain_http(&config)?;
        crate::rlimit::raise_open_files();
        let Store { db, pepper } = Store::open(&config).await?;
        let source = match &config.server.tls {
            Tls::Off => TlsSource::Off,
            Tls::Auto => TlsSource::Auto {
                dir: config.server.data_dir.join("tls"),
                public_host: config.server.public_url.host().to_string(),
            },
            Tls::Files {
                cert_file,
                key_file,
            } => TlsSource::Files {
                cert_file: cert_file.clone(),
                key_file: key_file.clone(),
            },
        };
        let server_tls = tls::server_config(&source)?;
        let shutdown = Shutdown::new();
        let tail_config = TailConfig {
            listen_reconnect_backoff_cap: config.database.listen_reconnect_backoff_cap,
            ..TailConfig::default()
        };
        let (events, tail_task) =
            LogTail::start(db.clone(), tail_config, shutdown.listener().watch()).await?;
        sweep::release_at_start(&db, &config, clock.now_ms()).await?;
        let sweep_task = sweep::start(
            db.clone(),
            config.clone(),
            clock.clone(),
            shutdown.listener().watch(),
        );
        let state = AppState::new(config, db, clock, pepper, events, shutdown.listener());
        // The signals of section 9: the listener with several nodes, the
        // local transport with one.
        let signals_task = signals::node::start(state.clone());
        Ok(App {
            state,
            tls: server_tls.config,
            ca_file: server_tls.ca_file,
            shutdown,
            tail_task,
            sweep_task,
            signals_task,
        })
    }

    /// The CA file clients must trust (`server.tls: auto`), for the start message.
    pub fn ca_file(&self) -> Option<&Path> {
        self.ca_file.as_deref()
    }

    /// Whether connections are TLS.
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// The shared state (for tests and admin commands).
    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// Serves on `listener` until `shutdown` completes, then stops as the
    /// module documentation says: HTTP connections and WebSocket tasks drain,
    /// the log tail stops, the database closes.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), StartError> {
        let App {
            state,
            tls,
            shutdown: trigger,
            tail_task,
            sweep_task,
            signals_task,
            ..
        } = self;
        let router = http::router(state.clone());
        // The accept loop stops on the same future that tells every WebSocket
        // task and the tail, so they drain side by side.
        let stopping = async {
            shutdown.await;
            trigger.trigger();
        };
        let limits = http::serve::ConnectionLimits::from(&state.config().server);
        let handshakes = state.metrics().tls_handshakes().clone();
        let result = http::serve(listener, tls, router, limits, handshakes, stopping).await;
        // Also when serving failed before the shutdown future completed.
        trigger.trigger();
        let goodbye = state.config().gateway.write_timeout + CLOSE_ANSWER_WAIT;
        if tokio::time::timeout(goodbye, trigger.drained())
            .await
            .is_err()
        {
            tracing::warn!(
                open = trigger.tracked(),
                "WebSocket tasks still running after the drain timeout; stopping anyway"
            );
        }
        if let Err(error) = tail_task.await {
            tracing::error!(%error, "the event log tail task failed");
        }
        if let Err(error) = sweep_task.await {
            tracing::error!(%error, "the terminal.sweep task failed");
        }
        if let Err(error) = signals_task.await {
            tracing::error!(%error, "the signal task failed");
        }
        state.db().close().await;
        result.map_err(StartError::Serve)
    }
}

/// What the server and the `admin` commands share: the migrated database and
/// the pepper. `admin` commands open exactly this, so they work on a fresh data
/// directory before the first `serve` and agree with it on the pepper.
#[derive(Debug)]
pub struct Store {
    /// The database, migrated.
    pub db: Db,
    /// The token pepper, loaded or created.
    pub pepper: Pepper,
}

impl Store {
    /// Creates the data directory (mode 0700), connects to and migrates the
    /// database, loads or creates the pepper.
    pub async fn open(config: &Config) -> Result<Store, StartError> {
        ensure_private_dir(&config.server.data_dir)?;
        let pepper = Pepper::load_or_create(&config.token_pepper_path())?;
        let options = DbOptions {
            signals_over_notify: config.cluster.mode == ClusterMode::Multi,
            ..DbOptions::default()
        };
        let db = Db::connect_with(config.database_url().expose(), &options).await?;
        db.migrate().await?;
        Ok(Store { db, pepper })
    }
}

/// `server.tls: off` serves plain HTTP for a proxy that terminates TLS; on a
/// loopback address only that proxy on the same machine reaches it. Beyond
/// loopback the operator must say so (D-354).
fn check_plain_http(config: &Config) -> Result<(), StartError> {
    let listen = config.server.listen;
    if config.server.tls != Tls::Off || listen.ip().to_canonical().is_loopback() {
        return Ok(());
    }
    if !config.server.tls_off_beyond_loopback {
        return Err(StartError::TlsOffBeyondLoopback { listen });
    }
    tracing::warn!(
        %listen,
        "server.tls is off on an address beyond loopback (acknowledged by \
         server.tls_off_beyond_loopback): tokens and cookies cross the network in clear \
         unless the path to the TLS-terminating proxy is protected"
    );
    Ok(())
}

fn ensure_private_dir(path: &Path) -> Result<(), StartError> {
    let error = |source| StartError::DataDir {
        path: path.to_path_buf(),
        source,
    };
    fs::create_dir_all(path).map_err(error)?;
    fs::set_permissions(path, fs::Permissions::from_mode(0o700)).map_err(error)
}
