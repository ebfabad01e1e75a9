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

use crate::app::{App, Store};
use crate::clock::{Clock, SystemClock, UnixMillis};
use crate::config::{self, Config, ConfigError};
use crate::db::Db;
use crate::identity::admin::{self, Enrollable};
use crate::identity::password::PASSWORD_MIN_CHARS;
use crate::identity::{ConflictReason, IdentityError};

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
    /// Administer persons on the configured database (works while `serve` runs).
    #[command(subcommand)]
    Admin(AdminCommand),
    /// Work with the configuration.
    #[command(subcommand)]
    Config(ConfigCommand),
}

#[derive(Debug, Subcommand)]
enum AdminCommand {
    /// Create the first owner and print a one-time enrollment code. Refused once
    /// any owner exists: an operator who lost access uses reset-second-factor.
    Bootstrap {
        /// The owner's username (letters, digits, `.`, `_`, `-`; case-insensitive).
        #[arg(long, value_name = "NAME")]
        username: String,
    },
    /// Remove a person's TOTP credential, end their login sessions and print a
    /// new enrollment code, with which they set a password and TOTP again.
    ResetSecondFactor {
        /// The person's username.
        #[arg(long, value_name = "NAME")]
        username: String,
    },
    /// Disable a person and end their login sessions.
    Disable {
        /// The person's username.
        #[arg(long, value_name = "NAME")]
        username: String,
    },
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
    // Colours only on a terminal, and never with NO_COLOR set: logs that go to a
    // file or the journal stay plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none();
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
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
        Command::Admin(command) => runtime()?
            .block_on(admin(config, command))
            .map_err(CliError::from),
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

async fn admin(config: Config, command: AdminCommand) -> anyhow::Result<()> {
    let Store { db, pepper } = Store::open(&config).await?;
    let now = SystemClock.now_ms();
    let auth = &config.auth;
    let result = match &command {
        AdminCommand::Bootstrap { username } => admin::bootstrap(&db, &pepper, auth, now, username)
            .await
            .map(|owner| {
                println!(
                    "Created the owner {} (person {}).",
                    owner.person.username, owner.person.id
                );
                print_code(&config, &owner);
            }),
        AdminCommand::ResetSecondFactor { username } => {
            admin::reset_second_factor(&db, &pepper, auth, now, username)
                .await
                .map(|reset| {
                    println!(
                        "Removed the TOTP credential of {} and ended {} login session(s).",
                        reset.person.username,
                        reset.sessions_ended.len()
                    );
                    print_code(&config, &reset);
                })
        }
        AdminCommand::Disable { username } => {
            admin::disable(&db, now, username).await.map(|done| {
                let verb = if done.changed {
                    "Disabled"
                } else {
                    "Already disabled:"
                };
                println!(
                    "{verb} {}; {} login session(s) ended.",
                    done.person.username,
                    done.sessions_ended.len()
                );
            })
        }
    };
    db.close().await;
    result.map_err(|error| admin_error(error, &command))
}

/// The code block of `bootstrap` and `reset-second-factor`, with the next step.
fn print_code(config: &Config, enrollable: &Enrollable) {
    let base = config.server.public_url.as_str().trim_end_matches('/');
    let name = &enrollable.person.username;
    println!();
    println!(
        "One-time enrollment code for {name} (shown only now, single use, valid until {}):",
        rfc3339(enrollable.issued.expires_at)
    );
    println!();
    println!("    {}", enrollable.issued.code.expose());
    println!();
    println!("Next step for {name}, before the code expires:");
    println!(
        "  1. POST {base}/api/v1/auth/enroll with {{\"code\": <the code>, \"password\": <at least {PASSWORD_MIN_CHARS} characters>}};"
    );
    println!("     add the otpauth:// URI of the answer to an authenticator app.");
    println!(
        "  2. POST {base}/api/v1/auth/enroll/confirm with {{\"code\": <the code>, \"totp\": <the app's current 6-digit code>}}."
    );
    println!("Then log in with POST {base}/api/v1/auth/login.");
}

fn rfc3339(ms: UnixMillis) -> String {
    let at =
        std::time::UNIX_EPOCH + std::time::Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    humantime::format_rfc3339_seconds(at).to_string()
}

/// An operator-facing message for a refused admin command.
fn admin_error(error: IdentityError, command: &AdminCommand) -> anyhow::Error {
    let username = match command {
        AdminCommand::Bootstrap { username }
        | AdminCommand::ResetSecondFactor { username }
        | AdminCommand::Disable { username } => username,
    };
    match error {
        IdentityError::Conflict(ConflictReason::OwnerExists) => anyhow::anyhow!(
            "an owner exists already; bootstrap runs only once. An operator who lost access runs \
             `bothy-server admin reset-second-factor --username NAME`"
        ),
        IdentityError::Conflict(ConflictReason::UsernameTaken) => {
            anyhow::anyhow!("the username {username:?} is taken")
        }
        IdentityError::NotFound => anyhow::anyhow!("no person has the username {username:?}"),
        IdentityError::Invalid(invalid) if invalid.code == "invalid_username" => anyhow::anyhow!(
            "{username:?} is not a valid username: 1 to 32 characters, ASCII letters, digits, \
             '.', '_' and '-', starting with a letter"
        ),
        IdentityError::Invalid(invalid) if invalid.code == "person_not_active" => {
            anyhow::anyhow!("the person {username:?} is not active")
        }
        other => anyhow::Error::new(other),
    }
}

async fn serve(config: Config) -> anyhow::Result<()> {
    let shutdown = shutdown_signal()?;
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
    let mut conn = app.state().db().pool().acquire().await?;
    if !crate::identity::persons::owner_exists(&mut conn).await? {
        tracing::info!(
            "no owner yet: run `bothy-server admin bootstrap --username NAME` with the same \
             configuration to create the first owner; it prints a one-time enrollment code"
        );
    }
    drop(conn);
    app.serve(listener, shutdown).await?;
    tracing::info!("stopped");
    Ok(())
}

/// Completes on SIGTERM or SIGINT. The handlers are installed when this is
/// called, not when the future is first polled, so a signal that arrives while
/// the server is still starting is not lost (and does not kill the process).
fn shutdown_signal() -> std::io::Result<impl std::future::Future<Output = ()> + Send> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
            _ = int.recv() => tracing::info!("SIGINT: shutting down"),
        }
    })
}
