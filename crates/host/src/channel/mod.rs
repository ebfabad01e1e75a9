//! The local channel between the service and one PTY helper (spec 2.2,
//! D-M2-42-11; DESIGN §4).
//!
//! The service manager creates the endpoint (a listening Unix socket in a folder
//! of a trusted owner) and hands it to the helper. The service connects; the
//! helper accepts, creates a socketpair and passes one end with SCM_RIGHTS over
//! the accepted connection; every further message runs over that pair. Before
//! any message the service compares the peer of its end (SO_PEERCRED: user ID
//! and process ID) with the session user and the main PID the service manager
//! reports for that helper ([`crate::manager`]); a mismatch sends nothing and is
//! HD10 (`peer_mismatch`, naming that session user).
//!
//! Each connection has one role, chosen by its first message: the **main**
//! connection of a helper (checks; its loss ends every PTY of the helper), or one
//! **session** connection per PTY (start, input, size, end; output and exit),
//! so one slow session holds back only its own PTY. Over the channel run only
//! decrypted frames, control commands and check results, never the host's keys.
//!
//! # Using it (the service)
//! ```no_run
//! # async fn f(config: &bothy_host::config::HostServiceConfig) -> Result<(), bothy_host::doctor::HelperFault> {
//! use bothy_host::channel::{Channel, ToHelper};
//! let expected = bothy_host::manager::helper_expectation(config, "alice")?;
//! let mut main = Channel::connect(&config.helper_endpoint("alice"), expected).await?;
//! main.send(&ToHelper::Main).await?;
//! main.send(&ToHelper::Checks(Vec::new())).await?;
//! let _answer = main.recv().await?;
//! # Ok(()) }
//! ```
//!
//! # Layout
//! - [`message`]: the messages and their length-prefixed binary encoding.
//! - [`codec`]: frames over a tokio stream (a cancel-safe reader, a writer).
//! - [`peer`]: the socketpair handover, the peer check, the listening socket
//!   from the service manager.
//! - [`link`]: both ends of a connection: [`Channel`] (the service's, after the
//!   check) and [`link::HelperLink`].

use crate::doctor::HelperFault;

pub mod codec;
pub mod link;
pub mod message;
pub mod peer;

pub use link::{Channel, ChannelReader, ChannelWriter};
pub use message::{
    DecodeError, EncodeError, FromHelper, PtyStart, StartFailure, StartProgram, ToHelper,
};
pub use peer::PeerExpectation;

/// What can go wrong on the local channel. The first three are the HD10 codes
/// of the peer check; the others happen after it.
#[derive(Debug, thiserror::Error)]
pub enum ChannelError {
    /// No helper answered: connecting failed, or the connection closed or stayed
    /// silent before the handover (`helper_unreachable`).
    #[error("helper_unreachable")]
    Unreachable(#[source] std::io::Error),
    /// The peer is not the helper the service manager reports: another user,
    /// another process, or not the handover of a helper (`peer_mismatch`).
    #[error("peer_mismatch")]
    PeerMismatch,
    /// The platform cannot report the peer of a socket (`peer_check_unavailable`).
    #[error("peer_check_unavailable")]
    PeerCheckUnavailable,
    /// Reading or writing failed after the check, or the stream ended inside a
    /// frame.
    #[error("channel broken")]
    Broken(#[source] std::io::Error),
    /// The other side sent bytes that are no message.
    #[error("message refused: {0}")]
    Decode(#[from] DecodeError),
    /// A message that cannot be encoded (a bug of the sender).
    #[error("message not encodable: {0}")]
    Encode(#[from] EncodeError),
}

impl From<ChannelError> for HelperFault {
    /// The HD10 code of a channel failure. A helper that passed the check and
    /// then broke the channel or sent garbage no longer answers: unreachable.
    fn from(error: ChannelError) -> HelperFault {
        match error {
            ChannelError::PeerMismatch => HelperFault::PeerMismatch,
            ChannelError::PeerCheckUnavailable => HelperFault::PeerCheckUnavailable,
            ChannelError::Unreachable(_)
            | ChannelError::Broken(_)
            | ChannelError::Decode(_)
            | ChannelError::Encode(_) => HelperFault::Unreachable,
        }
    }
}
