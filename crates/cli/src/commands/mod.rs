//! The commands: each reads the stored login, calls the server and prints a
//! result; errors come back to [`run`], which prints them once and turns
//! them into the exit status of the scheme in [`crate::error`].
//!
//! # Layout
//! - [`common`]: the stored login and API client, questions asked again, the
//!   TOTP code and the step-up, colour, JSON output.
//! - [`account`]: `enroll`, `login`, `logout`, `whoami`.
//! - [`hosts`]: `hosts`, `host show`, the host lookup, the pin check, 8.4.
//! - [`sessions`]: `sessions`, `close`, the session lookup and list.
//! - [`host_admin`]: `bothy host ...`, grants, persons: administration for
//!   owners.
//!
//! `open` and `attach` are [`crate::attach`]'s.

pub mod account;
pub mod common;
pub mod host_admin;
pub mod hosts;
pub mod sessions;

use crate::cli::{Cli, Command};
use crate::dirs::Dirs;
use crate::error::{ClientError, EXIT_OK};

pub use crate::error::{EXIT_FAILURE, EXIT_SESSION_FAILURE, EXIT_USAGE};
pub use common::{PASSWORD_MIN_CHARS, TRIES, color_enabled, totp_form};
pub use sessions::MIN_PREFIX_CHARS;

/// Runs a command; returns the process's exit status (D-371).
pub fn run(cli: Cli) -> i32 {
    let session_command = matches!(cli.command, Command::Open { .. } | Command::Attach { .. });
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("bothy: runtime: {e}");
            return if session_command {
                EXIT_SESSION_FAILURE
            } else {
                EXIT_FAILURE
            };
        }
    };
    match runtime.block_on(dispatch(cli.command)) {
        Ok(code) => code,
        Err(error) => {
            error.print(color_enabled());
            error.exit_code(session_command)
        }
    }
}

async fn dispatch(command: Command) -> Result<i32, ClientError> {
    if let Command::Completions { shell } = command {
        let mut command = <Cli as clap::CommandFactory>::command();
        clap_complete::generate(shell, &mut command, "bothy", &mut std::io::stdout());
        return Ok(EXIT_OK);
    }
    let dirs = Dirs::from_env()?;
    match command {
        Command::Login {
            server,
            username,
            device_name,
        } => account::login(&dirs, &server, username, device_name).await,
        Command::Enroll { server } => account::enroll(&server).await,
        Command::Logout => account::logout(&dirs).await,
        Command::Whoami { json } => account::whoami(&dirs, json).await,
        Command::Hosts { json } => hosts::hosts(&dirs, json).await,
        Command::Open {
            host,
            profile,
            workdir,
            alive,
        } => crate::attach::open(&dirs, &host, &profile, workdir, alive).await,
        Command::Sessions {
            host,
            all,
            json,
            page_size,
        } => sessions::sessions(&dirs, host.as_deref(), all, json, page_size).await,
        Command::Attach {
            session,
            host,
            alive,
        } => crate::attach::attach(&dirs, session.as_deref(), host.as_deref(), alive).await,
        Command::Close { session } => sessions::close(&dirs, &session).await,
        Command::Host { action } => host_admin::run(&dirs, action).await,
        Command::Grant {
            host,
            person,
            group,
        } => host_admin::grant(&dirs, &host, person.as_deref(), group.as_deref()).await,
        Command::Grants { host, json } => host_admin::grants(&dirs, host.as_deref(), json).await,
        Command::Revoke { grant } => host_admin::revoke(&dirs, &grant).await,
        Command::Person { action } => host_admin::person(&dirs, action).await,
        // Answered above, before the folders are needed.
        Command::Completions { .. } => Ok(EXIT_OK),
    }
}
