//! The `bothy-server` command line (STYLE 7: parse, init tracing, load config,
//! call the library, wire signals; `main → try_main` prints the error once).
//!
//! Exit codes: 0 success, 1 a runtime failure, 2 a usage error (clap),
//! 78 (EX_CONFIG) an invalid configuration.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand, ValueEnum};
use tokio::net::TcpListener;

use crate::app::{App, Store};
use crate::audit::Actor;
use crate::clock::{Clock, SystemClock, UnixMillis};
use crate::config::{self, Config, ConfigError};
use crate::db::Db;
use crate::hosts::HostError;
use crate::http;
use crate::identity::admin::{self, Enrollable, PersonRef, RoleAuthority};
use crate::identity::password::PASSWORD_MIN_CHARS;
use crate::identity::{ConflictReason, IdentityError, Role};

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
    /// Print the OpenAPI 3.1 document of the HTTP API (JSON; needs no
    /// configuration or database). `docs/api/openapi.json` is its output.
    Openapi,
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
    /// Disable a person and end their login sessions and terminal sessions.
    /// The last active owner is never disabled (nothing changes).
    Disable {
        /// The person's username.
        #[arg(long, value_name = "NAME")]
        username: String,
    },
    /// Enable a disabled person again. Refused (nothing changes) if one of their
    /// grants would then break I6: a grant on a host whose LLM login is the
    /// personal subscription of someone else.
    Enable {
        /// The person's username.
        #[arg(long, value_name = "NAME")]
        username: String,
    },
    /// Set a person's role. Removing the owner role ends their terminal
    /// sessions that a member may not have (spec 8.3); the last active owner
    /// keeps the role.
    SetRole {
        /// The person's username.
        #[arg(long, value_name = "NAME")]
        username: String,
        /// The new role.
        #[arg(long, value_enum)]
        role: RoleArg,
    },
    /// Rotate the server signing key of purpose terminal (spec 5.3): publish a
    /// next key in the JWKS now, which signs terminal session tokens once it has
    /// been published for agent.jwks_max_age. Prints the new kid and when it
    /// becomes active.
    RotateTerminalKey {
        /// Emergency rotation: the new key signs at once. Host services may
        /// refuse new session tokens for up to one heartbeat interval plus
        /// signing_key.cache_ttl, until they have the new JWKS.
        #[arg(long)]
        now: bool,
    },
}

/// A role on the command line.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum RoleArg {
    /// Manages the instance; terminal on every host (I6 and SR12 permitting).
    Owner,
    /// Everyone else.
    Member,
}

impl From<RoleArg> for Role {
    fn from(role: RoleArg) -> Role {
        match role {
            RoleArg::Owner => Role::Owner,
            RoleArg::Member => Role::Member,
        }
    }
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
    // The document depends on the code only: no configuration is read for it.
    if let Command::Openapi = cli.command {
        return openapi();
    }
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
        Command::Openapi => openapi(),
    }
}

/// `openapi`: the document as `docs/api/openapi.json` holds it.
fn openapi() -> Result<(), CliError> {
    let text = http::api_doc::to_json(&http::openapi()).map_err(anyhow::Error::from)?;
    print!("{text}");
    Ok(())
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
        AdminCommand::Disable { username } => admin::disable(
            &db,
            now,
            PersonRef::Username(username),
            RoleAuthority::Operator,
        )
        .await
        .map(|done| {
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
        }),
        AdminCommand::Enable { username } => {
            let enabled = admin::enable(&db, now, Actor::System, PersonRef::Username(username))
                .await
                .map(|done| {
                    let verb = if done.changed {
                        "Enabled"
                    } else {
                        "Already active:"
                    };
                    println!("{verb} {}.", done.person.username);
                });
            db.close().await;
            return enabled.map_err(|error| match error {
                HostError::Identity(error) => admin_error(error, &command),
                HostError::I6Violation => anyhow::anyhow!(
                    "enabling {username:?} would break I6: they hold a grant (directly or \
                     through a group) on a host whose LLM login is the personal subscription of \
                     another person; revoke that grant first. Nothing changed"
                ),
                other => anyhow::Error::new(other),
            });
        }
        AdminCommand::SetRole { username, role } => {
            let role = Role::from(*role);
            let set = admin::set_role(
                &db,
                now,
                PersonRef::Username(username),
                role,
                RoleAuthority::Operator,
            )
            .await
            .map(|done| {
                if done.changed {
                    println!(
                        "{} is now {}; {} terminal session(s) ended.",
                        done.person.username,
                        role.as_str(),
                        done.sessions_ended
                    );
                } else {
                    println!("Already {}: {}.", role.as_str(), done.person.username);
                }
            });
            db.close().await;
            return set.map_err(|error| match error {
                HostError::Identity(error) => admin_error(error, &command),
                other => anyhow::Error::new(other),
            });
        }
        AdminCommand::RotateTerminalKey { now: at_once } => {
            let rotated = rotate_terminal_key(&config, &db, &pepper, now, *at_once).await;
            db.close().await;
            return rotated;
        }
    };
    db.close().await;
    result.map_err(|error| admin_error(error, &command))
}

/// `admin rotate-terminal-key [--now]`: rotates and says which key signs when.
async fn rotate_terminal_key(
    config: &Config,
    db: &Db,
    pepper: &crate::pepper::Pepper,
    now: UnixMillis,
    at_once: bool,
) -> anyhow::Result<()> {
    use crate::terminal::keys::{self, KeyPolicy, Rotation, RotationMode};
    let mode = if at_once {
        RotationMode::Emergency
    } else {
        RotationMode::Scheduled
    };
    let policy = KeyPolicy::from_config(config);
    match keys::rotate(db, pepper, &policy, mode, now).await? {
        Rotation::First { kid } => {
            println!("Created the first terminal signing key {kid}; it is active now.");
        }
        Rotation::Scheduled { kid, activates_at } => {
            println!(
                "Published the next terminal signing key {kid}; it becomes active at {} \
                 (agent.jwks_max_age from now).",
                rfc3339(activates_at)
            );
        }
        Rotation::AlreadyScheduled { kid, activates_at } => {
            println!(
                "A rotation is already scheduled: the next terminal signing key {kid} becomes \
                 active at {}. Nothing changed; --now replaces the active key at once.",
                rfc3339(activates_at)
            );
        }
        Rotation::Emergency {
            kid,
            previous_kid,
            previous_published_until,
            withdrawn_kid,
        } => {
            println!(
                "Created the terminal signing key {kid}; it is active now (emergency rotation)."
            );
            println!(
                "The previous key {previous_kid} signs no more tokens; it stays in the JWKS \
                 until {}, when the tokens it signed have expired.",
                rfc3339(previous_published_until)
            );
            if let Some(withdrawn) = withdrawn_kid {
                println!("The scheduled next key {withdrawn} was withdrawn.");
            }
            println!(
                "Host services may refuse new terminal session tokens until they have the new \
                 JWKS: at most one terminal.host_heartbeat_interval plus signing_key.cache_ttl."
            );
        }
    }
    Ok(())
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
        "  bothy enroll --server {base}    (asks for the code and a password, shows the TOTP secret)"
    );
    println!("or over HTTP:");
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
        | AdminCommand::Disable { username }
        | AdminCommand::Enable { username }
        | AdminCommand::SetRole { username, .. } => username,
        AdminCommand::RotateTerminalKey { .. } => return anyhow::Error::new(error),
    };
    match error {
        IdentityError::Conflict(ConflictReason::OwnerExists) => anyhow::anyhow!(
            "an owner exists already; bootstrap runs only once. An operator who lost access runs \
             `bothy-server admin reset-second-factor --username NAME`"
        ),
        IdentityError::Conflict(ConflictReason::UsernameTaken) => {
            anyhow::anyhow!("the username {username:?} is taken")
        }
        IdentityError::Conflict(ConflictReason::LastOwner) => anyhow::anyhow!(
            "{username:?} is the last active owner; make another person an owner first. \
             Nothing changed"
        ),
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
