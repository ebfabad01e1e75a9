//! The commands of `bothy` and their help (clap derive).

use clap::{Parser, Subcommand};

/// The command-line client of the bothy terminal: log in, open a terminal on
/// a host, end to end encrypted, like ssh.
#[derive(Debug, Parser)]
#[command(
    name = "bothy",
    version,
    about,
    long_about = None,
    after_help = crate::error::EXIT_STATUS_HELP
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Enroll with the one-time code an owner gave you: set your password and
    /// add the TOTP secret to your authenticator app.
    Enroll {
        /// The server, https://host[:port].
        #[arg(long, value_name = "URL")]
        server: String,
    },
    /// Log in on a server with password and TOTP code; registers this
    /// device's key and stores the login (mode 0600) in
    /// $XDG_CONFIG_HOME/bothy.
    Login {
        /// The server, https://host[:port].
        #[arg(long, value_name = "URL")]
        server: String,
        /// The username (asked when not given).
        #[arg(long)]
        username: Option<String>,
        /// The name of this device on the server (default: bothy on HOSTNAME).
        #[arg(long)]
        device_name: Option<String>,
    },
    /// End the login session on the server and forget it here (this
    /// device's key stays).
    Logout,
    /// Show who is logged in, on which server.
    Whoami {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// List the hosts you can see: state, connected, LLM login, the start of
    /// the fingerprint (the whole one: bothy host show HOST, or --json).
    Hosts {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Open a terminal session on a host (asks for a TOTP step-up). `~.`
    /// after a newline ends the session, `~?` lists the escapes. Exits with
    /// the remote program's exit code.
    Open {
        /// The host: its name or ID.
        host: String,
        /// The profile to start (default: shell).
        #[arg(long, default_value = "shell")]
        profile: String,
        /// For a profile of kind claude: the index of the working directory
        /// in your session user's list (see bothy hosts --json).
        #[arg(long, value_name = "N")]
        workdir: Option<u32>,
        #[command(flatten)]
        alive: Alive,
    },
    /// List your open terminal sessions (--all: closed ones too, with how
    /// they ended): host, state, profile, started, time left.
    Sessions {
        /// Only the sessions on this host (name or ID).
        #[arg(long)]
        host: Option<String>,
        /// Closed sessions too, with their close reason.
        #[arg(long)]
        all: bool,
        /// Print JSON instead of a table (times in RFC 3339).
        #[arg(long)]
        json: bool,
        /// Sessions per request to the server (1..=500); the list follows
        /// every page either way.
        #[arg(long, hide = true, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..=500))]
        page_size: u32,
    },
    /// Attach a detached session again; the host replays the recent output
    /// first. From the same device and login within the server's quick
    /// reattach window no step-up is asked (6.2), else a TOTP step-up.
    /// Without SESSION: your only detached session (on --host).
    Attach {
        /// The session: its ID or the start of it (see bothy sessions).
        session: Option<String>,
        /// Without SESSION: the only detached session on this host.
        #[arg(long)]
        host: Option<String>,
        #[command(flatten)]
        alive: Alive,
    },
    /// Close a session (yours, or as an owner anyone's).
    Close {
        /// The session: its ID or the start of it (see bothy sessions).
        session: String,
    },
    /// Administer hosts (owners).
    Host {
        /// What to do.
        #[command(subcommand)]
        action: HostAction,
    },
    /// Give a person or a group the capability terminal on a host (owners).
    #[command(group(clap::ArgGroup::new("recipient").required(true).args(["person", "group"])))]
    Grant {
        /// The host: its name or ID.
        host: String,
        /// The person (username).
        #[arg(long)]
        person: Option<String>,
        /// The group (its name).
        #[arg(long)]
        group: Option<String>,
    },
    /// List the grants (owners), all or those of one host.
    Grants {
        /// Only the grants on this host (name or ID).
        #[arg(long)]
        host: Option<String>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Revoke a grant (owners); the recipient's sessions on the host end.
    Revoke {
        /// The grant's ID (see bothy grants).
        grant: String,
    },
    /// Print the shell completion script for SHELL (e.g. `bothy completions
    /// bash > /etc/bash_completion.d/bothy`).
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Persons (owners).
    Person {
        /// What to do.
        #[command(subcommand)]
        action: PersonAction,
    },
}

/// The keepalive of the device stream (like ssh's ServerAliveInterval and
/// ServerAliveCountMax=3).
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct Alive {
    /// Seconds between WebSocket pings to the server; a server or network
    /// that answers nothing for three of them counts as lost, and the session
    /// is reattached.
    #[arg(long, value_name = "SECONDS", default_value_t = 15, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub server_alive_interval: u64,
}

/// What an owner does with persons.
#[derive(Debug, Subcommand)]
pub enum PersonAction {
    /// Invite a person: prints their one-time enrollment code.
    Invite {
        /// The new person's username.
        username: String,
        /// owner or member.
        #[arg(long, default_value = "member")]
        role: String,
    },
    /// Disable a person (asks for a TOTP step-up): their login sessions and
    /// terminal sessions end at once and they can no longer log in. The last
    /// active owner cannot be disabled.
    Disable {
        /// The person's username.
        username: String,
        /// Why (kept in the audit).
        #[arg(long)]
        reason: String,
    },
    /// Enable a disabled person again: they can log in, and their grants
    /// hold again.
    Enable {
        /// The person's username.
        username: String,
    },
}

/// What an owner does with a host. Every change asks for a TOTP step-up and
/// takes a reason for the audit.
#[derive(Debug, Subcommand)]
pub enum HostAction {
    /// Create a host; prints its pairing code once and the exact
    /// `bothy-host pair` command to run on it.
    Create {
        /// The host's name.
        name: String,
        /// The person the host is assigned to (username).
        #[arg(long)]
        assignee: Option<String>,
        /// Why (kept in the audit).
        #[arg(long)]
        reason: String,
    },
    /// Show everything about a host: state, connection, keys with the whole
    /// fingerprint, LLM login, session users.
    Show {
        /// The host: its name or ID.
        host: String,
        /// Print JSON instead of text (times in RFC 3339).
        #[arg(long)]
        json: bool,
    },
    /// Confirm a paired host: type the first characters of the fingerprint
    /// `bothy-host pair` showed, declare whether it is the server's machine
    /// and its LLM login, and take a session user.
    Confirm {
        /// The host: its name or ID.
        host: String,
        /// Why (kept in the audit).
        #[arg(long)]
        reason: String,
    },
    /// Pair a host again (new keys): ends its sessions, prints a new code.
    PairAgain {
        /// The host: its name or ID.
        host: String,
        /// Why (kept in the audit).
        #[arg(long)]
        reason: String,
    },
    /// Disable a host (ends its sessions).
    Disable {
        /// The host: its name or ID.
        host: String,
        /// Why (kept in the audit).
        #[arg(long)]
        reason: String,
    },
    /// Enable a disabled host.
    Enable {
        /// The host: its name or ID.
        host: String,
        /// Why (kept in the audit).
        #[arg(long)]
        reason: String,
    },
    /// Retire a host for good (ends its sessions).
    Retire {
        /// The host: its name or ID.
        host: String,
        /// Why (kept in the audit).
        #[arg(long)]
        reason: String,
    },
    /// Declare the host's LLM login (7.2): none, organization or personal
    /// (with its holder).
    Llm {
        /// The host: its name or ID.
        host: String,
        /// none, organization or personal.
        #[arg(value_parser = ["none", "organization", "personal"])]
        credentials: String,
        /// With personal: the person whose login it is (username; default you).
        #[arg(long)]
        holder: Option<String>,
        /// Why (kept in the audit).
        #[arg(long)]
        reason: String,
    },
    /// Give a person a session user the host reported.
    Assign {
        /// The host: its name or ID.
        host: String,
        /// The person (username).
        #[arg(long)]
        person: String,
        /// The session user (a name the host reported).
        #[arg(long)]
        os_user: String,
        /// Why (kept in the audit).
        #[arg(long)]
        reason: String,
    },
    /// End a person's session user assignment on the host (ends their sessions).
    Unassign {
        /// The host: its name or ID.
        host: String,
        /// The person (username).
        #[arg(long)]
        person: String,
        /// Why (kept in the audit).
        #[arg(long)]
        reason: String,
    },
}
