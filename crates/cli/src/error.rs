//! What goes wrong, shown as one line with a code (the server's problem
//! `code` where the server refused, else a code of the client) and a one-line
//! hint. No variant carries a token, a password or terminal content.
//!
//! # Exit status (docs/decisions.md D-371)
//! One scheme for every command, printed by `bothy --help`:
//! - 0: success;
//! - `open` and `attach`: the remote program's exit status; 255 when the
//!   session did not end with one (an error before or during it, `~.`, a
//!   detach, a signal), as ssh does;
//! - 2: a usage error (the command line, in every command, also what clap
//!   refuses);
//! - 1: any other error of the other commands.

use bothy_net::NetError;
use uuid::Uuid;

use crate::problem::Problem;

/// A command that succeeded.
pub const EXIT_OK: i32 = 0;
/// A failed command other than `open` and `attach`.
pub const EXIT_FAILURE: i32 = 1;
/// A usage error (the command line), in every command; clap's own code.
pub const EXIT_USAGE: i32 = 2;
/// `open` and `attach` when the session did not end with the program's
/// exit status (like ssh's 255).
pub const EXIT_SESSION_FAILURE: i32 = 255;

/// The section "Exit status" of `bothy --help` (the scheme above).
pub const EXIT_STATUS_HELP: &str = "\
Exit status:
  0    success
  N    open, attach: the exit status of the remote program
  255  open, attach: the session did not end with an exit status of its own
       (an error, ~., a detach, a signal; as ssh)
  2    usage error (the command line), in every command
  1    any other error of the other commands";

/// An error of a command.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server refused with a problem (`application/problem+json`).
    #[error("{}", .0.summary())]
    Problem(Problem),
    /// The network: the server could not be reached (`server` names the URL
    /// that was tried, where one was).
    #[error("{}", net_message(server.as_deref(), error))]
    Net {
        /// `https://host:port`.
        server: Option<String>,
        /// What failed.
        error: NetError,
    },
    /// No login is stored.
    #[error("not logged in")]
    NotLoggedIn,
    /// A stored file is readable by others, or not ours.
    #[error("{0} is readable by other users")]
    InsecureFile(String),
    /// A stored file cannot be read or written.
    #[error("{what}: {source}")]
    Storage {
        what: String,
        source: std::io::Error,
    },
    /// A stored file is not what this client writes.
    #[error("{0} is damaged")]
    Damaged(String),
    /// A question needs a terminal and there is none.
    #[error("this needs a terminal to ask: {0}")]
    NoTerminal(&'static str),
    /// The person answered no, or ended the input.
    #[error("cancelled")]
    Cancelled,
    /// The session was left running, detached: by `~&`, a signal (SIGTERM,
    /// SIGHUP), or an output that went away.
    #[error("session {session_id} is detached ({why})")]
    Detached {
        /// The session.
        session_id: Uuid,
        /// What made the client leave: `~&`, `SIGTERM`, `SIGHUP`, `output closed`.
        why: &'static str,
    },
    /// Bad input on the command line.
    #[error("{0}")]
    Usage(String),
    /// The host named on the command line is not known.
    #[error("no host named {0:?} that you can see")]
    UnknownHost(String),
    /// No person has the username named on the command line.
    #[error("no person has the username {0:?}")]
    UnknownPerson(String),
    /// No group has the name named on the command line.
    #[error("no group named {0:?}")]
    UnknownGroup(String),
    /// No session matches what the command line named.
    #[error("{0}")]
    NoSession(String),
    /// The host is not in the state the command needs.
    #[error("{0}")]
    HostState(String),
    /// The server answered something this client does not understand.
    #[error("unexpected answer from the server: {0}")]
    Protocol(String),
    /// The host's key differs from the pinned one and the person did not
    /// confirm (5.5).
    #[error("the host key changed and the change was not confirmed")]
    PinRefused,
    /// The device stream ended with a close code of section 13.
    #[error("{0}")]
    Stream(crate::close::StreamEnd),
}

impl From<NetError> for ClientError {
    fn from(error: NetError) -> Self {
        ClientError::Net {
            server: None,
            error,
        }
    }
}

/// The message of a network error; the URL where one was tried.
fn net_message(server: Option<&str>, error: &NetError) -> String {
    match (server, error) {
        (Some(server), NetError::Refused) => {
            format!("nothing accepts connections at {server} (connection refused)")
        }
        (Some(server), NetError::Timeout) => format!("{server} did not answer in time"),
        (Some(server), NetError::Connect(detail)) => format!("cannot reach {server}: {detail}"),
        (Some(server), NetError::Certificate(detail)) => {
            format!("the certificate of {server} is not trusted: {detail}")
        }
        (_, error) => error.to_string(),
    }
}

impl ClientError {
    /// The code printed first: the server's problem code, or the client's own.
    pub fn code(&self) -> String {
        match self {
            ClientError::Problem(problem) => problem.code.clone(),
            ClientError::Net { error, .. } => match error {
                NetError::BadUrl => "bad_url",
                NetError::NoRoots => "no_trusted_roots",
                NetError::Timeout => "timeout",
                NetError::Certificate(_) => "certificate_not_trusted",
                _ => "unreachable",
            }
            .into(),
            ClientError::NotLoggedIn => "not_logged_in".into(),
            ClientError::InsecureFile(_) => "insecure_file".into(),
            ClientError::Storage { .. } => "storage".into(),
            ClientError::Damaged(_) => "damaged_file".into(),
            ClientError::NoTerminal(_) => "no_terminal".into(),
            ClientError::Cancelled => "cancelled".into(),
            ClientError::Detached { why, .. } => {
                if *why == "output closed" {
                    "output_closed".into()
                } else {
                    "detached".into()
                }
            }
            ClientError::Usage(_) => "usage".into(),
            ClientError::UnknownHost(_) => "unknown_host".into(),
            ClientError::UnknownPerson(_) => "unknown_person".into(),
            ClientError::UnknownGroup(_) => "unknown_group".into(),
            ClientError::NoSession(_) => "no_session".into(),
            ClientError::HostState(_) => "host_state".into(),
            ClientError::Protocol(_) => "protocol".into(),
            ClientError::PinRefused => "host_key_changed".into(),
            ClientError::Stream(end) => end.code_name(),
        }
    }

    /// One line that says what to do.
    pub fn hint(&self) -> String {
        match self {
            ClientError::Problem(problem) => problem.hint(),
            ClientError::Net { error, .. } => match error {
                NetError::BadUrl => "give the server as https://host or https://host:port".into(),
                NetError::NoRoots => {
                    "install the system's CA certificates, or point SSL_CERT_FILE at a CA bundle"
                        .into()
                }
                NetError::Certificate(_) => {
                    "the server's certificate must verify: for a server with its own local CA, \
                     point SSL_CERT_FILE at that CA (its ca.pem); nothing skips the check"
                        .into()
                }
                NetError::Refused => {
                    "is the server running, on this address and port? (the address is the one of \
                     bothy login --server)"
                        .into()
                }
                _ => "check the server address and your network".into(),
            },
            ClientError::NotLoggedIn => "run: bothy login --server https://your-server".into(),
            ClientError::InsecureFile(path) => format!("run: chmod 600 {path}"),
            ClientError::Storage { .. } => "check the permissions of the folder".into(),
            ClientError::Damaged(_) => "run bothy logout, then bothy login again".into(),
            ClientError::NoTerminal(_) => "run the command in a terminal".into(),
            ClientError::Cancelled => "nothing was changed".into(),
            ClientError::Detached { session_id, .. } => {
                format!("bothy attach {session_id} takes it back")
            }
            ClientError::Usage(_) => "see bothy --help".into(),
            ClientError::UnknownHost(_) => "run bothy hosts to see the hosts you can use".into(),
            ClientError::UnknownPerson(_) => {
                "check the username: it is the one the person was invited with (bothy person invite)"
                    .into()
            }
            ClientError::UnknownGroup(_) => "check the group's name".into(),
            ClientError::NoSession(_) => "bothy sessions lists your open sessions".into(),
            ClientError::HostState(_) => "bothy hosts shows the host's state".into(),
            ClientError::Protocol(_) => "update bothy to the server's version".into(),
            ClientError::PinRefused => {
                "ask the owner whether the host was paired again before you confirm".into()
            }
            ClientError::Stream(end) => end.hint().into(),
        }
    }

    /// The exit status of this error in a command (D-371): 2 for a usage
    /// error, else 255 in `open` and `attach` and 1 elsewhere.
    pub fn exit_code(&self, session_command: bool) -> i32 {
        match self {
            ClientError::Usage(_) => EXIT_USAGE,
            _ if session_command => EXIT_SESSION_FAILURE,
            _ => EXIT_FAILURE,
        }
    }

    /// Prints the error to stderr: `bothy: CODE: message` and `hint: ...`.
    pub fn print(&self, color: bool) {
        let code = self.code();
        let (start, end) = if color {
            ("\x1b[1;31m", "\x1b[0m")
        } else {
            ("", "")
        };
        eprintln!("bothy: {start}{code}{end}: {self}");
        eprintln!("hint: {}", self.hint());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_errors_exit_2_in_every_command() {
        let usage = ClientError::Usage("x".into());
        assert_eq!(usage.exit_code(true), EXIT_USAGE);
        assert_eq!(usage.exit_code(false), EXIT_USAGE);
        assert_eq!(ClientError::NotLoggedIn.exit_code(true), 255);
        assert_eq!(ClientError::NotLoggedIn.exit_code(false), 1);
    }

    /// Issue 16 item 8: a refused connection names the URL and says nothing
    /// of certificates.
    #[test]
    fn a_refused_connection_names_the_url() {
        let error = ClientError::Net {
            server: Some("https://localhost:8443".into()),
            error: NetError::Refused,
        };
        assert_eq!(error.code(), "unreachable");
        let text = error.to_string();
        assert!(text.contains("https://localhost:8443"), "{text}");
        assert!(!error.hint().contains("certificate"), "{}", error.hint());
    }
}
