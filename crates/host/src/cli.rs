//! The command line of `bothy-host` (clap): the sub-commands exactly as the
//! chapter names them (DESIGN §1). [`main`] parses, sets up logging, runs the
//! command and maps its result to the exit code.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::config::DEFAULT_CONFIG_PATH;

pub use crate::LOG_FILTER_ENV;

/// bothy-host: the host service of bothy terminal.
#[derive(Debug, Parser)]
#[command(name = "bothy-host", version, about, long_about = None)]
pub struct Cli {
    /// The configuration file.
    #[arg(long, global = true, value_name = "FILE", default_value = DEFAULT_CONFIG_PATH)]
    pub config: PathBuf,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The sub-commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Pair this host with a server: generate the keys, redeem the pairing code,
    /// print the fingerprint the owner types to confirm.
    Pair {
        /// The server, https://...
        #[arg(long, value_name = "URL")]
        server: String,
        /// The pairing code the owner got when creating the host.
        #[arg(long, value_name = "CODE")]
        code: String,
    },
    /// Run the host service (as the service user; started by the service manager).
    Run,
    /// Run the PTY helper of one session user (as that user; started by the
    /// service manager with the channel endpoint).
    PtyHelper,
    /// Play the service manager where no systemd runs (as root): start the PTY
    /// helpers and the service, restart what crashes.
    Supervise,
    /// Restart the running host service (all sessions end).
    Restart,
    /// Prepare this host (as root): the service user and the session users,
    /// the state directory, a configuration skeleton when there is none, and
    /// the systemd units. A second run changes nothing.
    Install {
        /// A session user for the skeleton (repeatable); with an existing
        /// configuration each must be in its host_service.session_users.
        #[arg(long = "session-user", value_name = "NAME")]
        session_users: Vec<String>,
        /// The service user written into the skeleton (default bothy-host).
        #[arg(long, value_name = "NAME")]
        service_user: Option<String>,
        /// The state directory written into the skeleton (default /var/lib/bothy-host).
        #[arg(long, value_name = "DIR")]
        state_dir: Option<PathBuf>,
        /// Where the units go; systemd reads only the default.
        #[arg(long, value_name = "DIR", default_value = crate::admin::units::DEFAULT_UNIT_DIR)]
        unit_dir: PathBuf,
    },
    /// Add or remove a session user (as root); restarts the service.
    SessionUser {
        /// add or remove.
        #[command(subcommand)]
        action: SessionUserAction,
        /// Where the units are; systemd reads only the default.
        #[arg(long, value_name = "DIR", default_value = crate::admin::units::DEFAULT_UNIT_DIR, global = true)]
        unit_dir: PathBuf,
    },
    /// Run the checks HD1–HD11 (as root) and print each result; exit code 1
    /// when a check failed.
    Doctor,
    /// Show the local confirmation dialogs of the host service (6.4): run by
    /// the person at this machine in their desktop session.
    ConfirmAgent,
    /// Internal: the session user's part of `doctor`, as that user (request on
    /// standard input, answer on standard output).
    #[command(hide = true)]
    DoctorProbe {
        /// The session user to become.
        #[arg(long, value_name = "NAME")]
        user: String,
    },
    /// Internal: what the login shell of the HD6 probe runs last.
    #[command(hide = true)]
    LoginProbe {
        /// The marker of the answer line.
        nonce: String,
    },
}

/// `bothy-host session-user add|remove NAME`.
#[derive(Debug, Subcommand)]
pub enum SessionUserAction {
    /// Create (if missing) and add a session user: never a name bound to a
    /// person before (2.2 item 3).
    Add {
        /// The session user.
        name: String,
    },
    /// Take a session user out: configuration, helper, closed home; its
    /// binding stays. Then delete the account with its processes.
    Remove {
        /// The session user.
        name: String,
    },
}

/// Parses the command line, runs the command and returns the exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    let code = match cli.command {
        Command::Pair { server, code } => crate::pair::command(&cli.config, &server, &code),
        Command::Run => crate::service::command(&cli.config),
        Command::PtyHelper => crate::helper::command(),
        Command::Supervise => crate::supervise::command(&cli.config),
        Command::Restart => crate::admin::restart::command(&cli.config),
        Command::Install {
            session_users,
            service_user,
            state_dir,
            unit_dir,
        } => crate::admin::install::command(
            &cli.config,
            &crate::admin::install::InstallOptions {
                session_users,
                service_user,
                state_dir,
                unit_dir,
            },
        ),
        Command::SessionUser { action, unit_dir } => {
            let options = crate::admin::session_user::SessionUserOptions { unit_dir };
            match action {
                SessionUserAction::Add { name } => {
                    crate::admin::session_user::add_command(&cli.config, &name, &options)
                }
                SessionUserAction::Remove { name } => {
                    crate::admin::session_user::remove_command(&cli.config, &name, &options)
                }
            }
        }
        Command::Doctor => crate::doctor::command(&cli.config),
        Command::ConfirmAgent => crate::confirm::agent::command(),
        Command::DoctorProbe { user } => crate::doctor::command::probe_command(&user),
        Command::LoginProbe { nonce } => crate::doctor::command::login_probe_command(&nonce),
    };
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

/// Logs to standard error; plain text without colours when it is not a terminal.
fn init_logging() {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_env(LOG_FILTER_ENV)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .try_init();
}
