//! What goes wrong, shown as one line with a code (the server's problem
//! `code` where the server refused, else a code of the client) and a one-line
//! hint. No variant carries a token, a password or terminal content.

use bothy_net::NetError;

use crate::api::Problem;

/// An error of a command.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server refused with a problem (`application/problem+json`).
    #[error("{}", .0.summary())]
    Problem(Problem),
    /// The server could not be reached.
    #[error("{0}")]
    Net(#[from] NetError),
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
    /// The person answered no.
    #[error("cancelled")]
    Cancelled,
    /// The output of a session is gone (a closed pipe or terminal); the
    /// session stays detached.
    #[error("the output went away (a closed pipe or terminal)")]
    OutputClosed,
    /// Bad input on the command line.
    #[error("{0}")]
    Usage(String),
    /// The host named on the command line is not known.
    #[error("no host named {0:?} that you can see")]
    UnknownHost(String),
    /// No person has the username named on the command line.
    #[error("no person has the username {0:?}")]
    UnknownPerson(String),
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

impl ClientError {
    /// The code printed first: the server's problem code, or the client's own.
    pub fn code(&self) -> String {
        match self {
            ClientError::Problem(problem) => problem.code.clone(),
            ClientError::Net(NetError::BadUrl) => "bad_url".into(),
            ClientError::Net(NetError::NoRoots) => "no_trusted_roots".into(),
            ClientError::Net(NetError::Timeout) => "timeout".into(),
            ClientError::Net(NetError::Certificate(_)) => "certificate_not_trusted".into(),
            ClientError::Net(_) => "unreachable".into(),
            ClientError::NotLoggedIn => "not_logged_in".into(),
            ClientError::InsecureFile(_) => "insecure_file".into(),
            ClientError::Storage { .. } => "storage".into(),
            ClientError::Damaged(_) => "damaged_file".into(),
            ClientError::NoTerminal(_) => "no_terminal".into(),
            ClientError::Cancelled => "cancelled".into(),
            ClientError::OutputClosed => "output_closed".into(),
            ClientError::Usage(_) => "usage".into(),
            ClientError::UnknownHost(_) => "unknown_host".into(),
            ClientError::UnknownPerson(_) => "unknown_person".into(),
            ClientError::Protocol(_) => "protocol".into(),
            ClientError::PinRefused => "host_key_changed".into(),
            ClientError::Stream(end) => end.code_name(),
        }
    }

    /// One line that says what to do.
    pub fn hint(&self) -> String {
        match self {
            ClientError::Problem(problem) => problem.hint(),
            ClientError::Net(NetError::BadUrl) => {
                "give the server as https://host or https://host:port".into()
            }
            ClientError::Net(NetError::NoRoots) => {
                "install the system's CA certificates, or point SSL_CERT_FILE at a CA bundle".into()
            }
            ClientError::Net(NetError::Certificate(_)) => {
                "the server's certificate must verify: for a server with its own local CA, point \
                 SSL_CERT_FILE at that CA (its ca.pem); nothing skips the check"
                    .into()
            }
            ClientError::Net(_) => {
                "check the server address and your network; the certificate is always verified"
                    .into()
            }
            ClientError::NotLoggedIn => "run: bothy login --server https://your-server".into(),
            ClientError::InsecureFile(path) => format!("run: chmod 600 {path}"),
            ClientError::Storage { .. } => "check the permissions of the folder".into(),
            ClientError::Damaged(_) => "run bothy logout, then bothy login again".into(),
            ClientError::NoTerminal(_) => "run the command in a terminal".into(),
            ClientError::Cancelled => "nothing was changed".into(),
            ClientError::OutputClosed => {
                "the session stays detached: bothy sessions, then bothy attach SESSION".into()
            }
            ClientError::Usage(_) => "see bothy --help".into(),
            ClientError::UnknownHost(_) => "run bothy hosts to see the hosts you can use".into(),
            ClientError::UnknownPerson(_) => {
                "check the username: it is the one the person was invited with (bothy person invite)"
                    .into()
            }
            ClientError::Protocol(_) => "update bothy to the server's version".into(),
            ClientError::PinRefused => {
                "ask the owner whether the host was paired again before you confirm".into()
            }
            ClientError::Stream(end) => end.hint().into(),
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
