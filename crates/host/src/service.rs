//! `bothy-host run`: the host service (2.2), as the service user. It reads the
//! configuration and the state directory once at start, runs the full doctor
//! run, and either refuses the start (one report, exit 78) or keeps the
//! control connection, opens a data connection per `session.open`, runs the
//! gate before every PTY and the periodic light run every
//! `host_service.credential_check_interval`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::sync::watch;

use crate::EXIT_REFUSED_START;
use crate::admin::endpoint::EndpointError;
use crate::clock::{SharedClock, SystemClock};
use crate::config::HostServiceConfig;
use crate::confirm::endpoint::ConfirmHub;
use crate::control;
use crate::doctor::{RunKind, Scope};
pub use crate::host::{HELPER_RESTART_WAIT, Helpers, Host, HostCheckState};

/// Runs the service; returns the exit code.
pub fn command(config_path: &Path) -> i32 {
    let config = match crate::config::load_or_refuse(config_path) {
        Ok(config) => config,
        Err(code) => return code,
    };
    // One thread (D-705): a keystroke and its echo cross the service in two
    // hand-offs between tasks, and on one thread neither wakes another
    // thread. Blocking work (the doctor's checks, the service manager's
    // answers, account lookups) runs on the blocking pool.
    let Some(runtime) = start_runtime(tokio::runtime::Builder::new_current_thread()) else {
        return 1;
    };
    runtime.block_on(run(
        config.host_service,
        config_path.to_owned(),
        Arc::new(SystemClock),
    ))
}

/// The runtime `builder` makes with every driver enabled; `None` (logged)
/// when it cannot start.
pub(crate) fn start_runtime(
    mut builder: tokio::runtime::Builder,
) -> Option<tokio::runtime::Runtime> {
    match builder.enable_all().build() {
        Ok(runtime) => Some(runtime),
        Err(error) => {
            tracing::error!(%error, "cannot start the runtime");
            None
        }
    }
}

async fn run(config: HostServiceConfig, config_path: PathBuf, clock: SharedClock) -> i32 {
    let (stop_tx, stop_rx) = watch::channel(false);
    let host = match Host::open(config, config_path, clock, stop_tx) {
        Ok(host) => Arc::new(host),
        Err(code) => return code,
    };
    host.doctor_run(RunKind::Full, Scope::All).await;
    if host.refuses_start().await {
        let report = host.report().await;
        control::report_refused_start(&host, report).await;
        return EXIT_REFUSED_START;
    }
    let admin = match crate::admin::endpoint::bind(&host.state.file(crate::state::ADMIN_SOCKET)) {
        Ok(listener) => Some(listener),
        Err(EndpointError::Unavailable(error)) => {
            tracing::warn!(
                %error,
                code = "admin_endpoint_unavailable",
                "bothy-host doctor cannot reach the running service"
            );
            None
        }
        Err(EndpointError::Unprotected(error)) => {
            // A socket others might reach is worse than none: no start.
            tracing::error!(
                %error,
                code = "admin_endpoint_unprotected",
                "admin.sock cannot be given mode 0600; the service does not start"
            );
            return EXIT_REFUSED_START;
        }
    };
    tokio::spawn(signals(host.stopper()));
    tokio::spawn(periodic_checks(Arc::clone(&host), stop_rx.clone()));
    if let Some(listener) = admin {
        tokio::spawn(crate::admin::endpoint::serve(Arc::clone(&host), listener));
    }
    if let Some(hub) = host.confirm_hub() {
        // Opened only with require_local_confirm (6.4 "Endpoint"). Without it
        // no agent can connect, so every start is denied (fail closed).
        let path = crate::confirm::socket_path();
        match ConfirmHub::bind(&path) {
            Ok(listener) => {
                tokio::spawn(Arc::clone(hub).serve(listener, path, stop_rx.clone()));
            }
            Err(error) => tracing::error!(
                %error,
                code = "confirm_endpoint_unavailable",
                "confirm.sock cannot be opened: every start is denied until the service \
                 manager provides its folder (RuntimeDirectory=bothy-host-confirm)"
            ),
        }
    }
    let code = control::run(Arc::clone(&host), stop_rx).await;
    host.sessions.kill_all();
    let _ = std::fs::remove_file(host.state.file(crate::state::ADMIN_SOCKET));
    if host.confirm_hub().is_some() {
        let _ = std::fs::remove_file(crate::confirm::socket_path());
    }
    if host.is_refused() {
        tracing::error!("doctor refuses the start; the result was reported, the service exits");
        return EXIT_REFUSED_START;
    }
    code
}

/// SIGTERM and SIGINT stop the service.
async fn signals(stop: watch::Sender<bool>) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    let _ = stop.send(true);
}

/// The light run every `host_service.credential_check_interval` (7.4).
async fn periodic_checks(host: Arc<Host>, mut stop: watch::Receiver<bool>) {
    let every = host.config.credential_check_interval;
    loop {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            () = tokio::time::sleep(every) => {}
        }
        host.doctor_run(RunKind::Light, Scope::All).await;
    }
}
