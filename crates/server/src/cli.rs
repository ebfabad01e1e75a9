//! The `bothy-server` command line (STYLE 7: parse, init tracing, load config,
//! call the library, wire signals; `main → try_main` prints the error once).
//!
//! Exit codes: 0 success, 1 a runtime failure, 2 a usage error (clap),
//! 78 (EX_CONFIG) an invalid configuration.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use tokio::net::TcpListener;

use crate::app::App;
use crate::clock::SystemClock;
use crate::config::{self, Config, ConfigError};
use crate::db::Db;

/// Exit code of an invalid configuration (sysexits EX_CONFIG).
pub const EXIT_CONFIG: u8 = 78;

/// The default configuration file, read when it exists and no `--config` is given.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/bothy-server/config.yaml";

#[derive(Debug, Parser)]
#[command(
    name = "bothy-server",
    version,
    about = "bothy terminal server: authorizes terminal sessions and relays them end-to-end encrypted"
)]
struct Cli {
    /// The configuration file (YAML). Default: /etc/bothy-server/config.yaml if it
    /// exists, else the built-in defaults. `BOTHY_<SECTION>__<KEY>` variables
    /// override single keys.
    #[arg(long, global = true, env = config::CONFIG_PATH_ENV, value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the server (HTTPS and WebSocket) until SIGTERM or SIGINT.
    Serve,
    /// Apply the database migrations and exit.
    Migrate,
    /// Work with the configuration.
    #[command(subcommand)]
    Config(ConfigCommand),
}

#[derive(Debug, Subcommand)]
enum ConfigCommand {
    /// Validate the configuration and print the effective values, secrets redacted.
    Check,
}

/// Why a command failed, mapped to its exit code.
#[derive(Debug, thiserror::Error)]
enum CliError {
    #[error("invalid configuration: {0}")]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Other(#[from] anyhow::Error),
}

/// Runs the command line; the binary's `main`.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing();
    match try_main(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("bothy-server: {error:#}");
            match error {
                CliError::Config(_) => ExitCode::from(EXIT_CONFIG),
                CliError::Other(_) => ExitCode::FAILURE,
            }
        }
    }
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_env(config::LOG_FILTER_ENV)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

fn load_config(path: Option<PathBuf>) -> Result<Config, ConfigError> {
    let path = path.or_else(|| {
        let default = PathBuf::from(DEFAULT_CONFIG_PATH);
        default.exists().then_some(default)
    });
    Config::load(path.as_deref(), config::process_env()?)
}

fn try_main(cli: Cli) -> Result<(), CliError> {
    let config = load_config(cli.config)?;
    match cli.command {
        Command::Config(ConfigCommand::Check) => {
            print!("{}", config.to_redacted_yaml());
            Ok(())
        }
        Command::Serve => runtime()?.block_on(serve(config)).map_err(CliError::from),
        Command::Migrate => runtime()?.block_on(migrate(config)).map_err(CliError::from),
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, anyhow::Error> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

async fn migrate(config: Config) -> anyhow::Result<()> {
    let db = Db::connect(config.database_url().expose()).await?;
    db.migrate().await?;
    db.close().await;
    println!("database migrated ({})", config.database_url().redacted());
    Ok(())
}

async fn serve(config: Config) -> anyhow::Result<()> {
    let listen = config.server.listen;
    let app = App::open(config, Arc::new(SystemClock)).await?;
    let listener = TcpListener::bind(listen).await?;
    let scheme = if app.is_tls() { "https" } else { "http" };
    tracing::info!(address = %listener.local_addr()?, scheme, "listening");
    if let Some(ca) = app.ca_file() {
        tracing::info!(
            ca_file = %ca.display(),
            "clients trust this CA: point SSL_CERT_FILE of bothy-host and bothy at it"
        );
    }
    app.serve(listener, shutdown_signal()).await?;
    tracing::info!("stopped");
    Ok(())
}

/// Completes on SIGTERM or SIGINT.
async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(term) => term,
        Err(error) => {
            tracing::error!(%error, "cannot listen for SIGTERM; stopping on SIGINT only");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: shutting down"),
    }
}
