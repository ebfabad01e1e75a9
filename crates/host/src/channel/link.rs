//! Both sides of one connection of the local channel after the handover.
//!
//! The service's side is [`Channel`]: [`Channel::connect`] runs the handover
//! and the peer check ([`super::peer`]) and only then allows a send. The
//! helper's side is [`HelperLink`], made from the end it kept.

use std::path::Path;

use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};

pub use super::ChannelError;
pub use super::peer::PeerExpectation;

use super::codec::{FrameReader, FrameWriter};
use super::message::{FromHelper, ToHelper};
use super::peer;

/// The service's end of one connection to a helper, after the peer check.
#[derive(Debug)]
pub struct Channel {
    reader: ChannelReader,
    writer: ChannelWriter,
}

/// The receiving half of a [`Channel`].
pub type ChannelReader = FrameReader<OwnedReadHalf, FromHelper>;

/// The sending half of a [`Channel`].
pub type ChannelWriter = FrameWriter<OwnedWriteHalf, ToHelper>;

impl Channel {
    /// Connects to the helper's endpoint, receives the end of its socketpair
    /// and compares the peer of that end with `expected` (user ID and main PID
    /// from the service manager). No byte is sent before the check passes; a
    /// mismatch is [`ChannelError::PeerMismatch`], a helper that is not there
    /// [`ChannelError::Unreachable`], a platform without SO_PEERCRED
    /// [`ChannelError::PeerCheckUnavailable`] — each an HD10 code
    /// ([`crate::doctor::HelperFault`] through `From`).
    ///
    /// The first message then chooses the role of the connection:
    /// [`ToHelper::Main`] or [`ToHelper::Start`].
    pub async fn connect(
        endpoint: &Path,
        expected: PeerExpectation,
    ) -> Result<Channel, ChannelError> {
        let stream = peer::receive(endpoint, expected).await?;
        Ok(Channel::from_checked(stream))
    }

    /// Wraps a stream whose peer was checked.
    fn from_checked(stream: UnixStream) -> Channel {
        let (read, write) = stream.into_split();
        Channel {
            reader: FrameReader::new(read),
            writer: FrameWriter::new(write),
        }
    }

    /// Sends one message. Not cancel-safe (use [`Channel::into_split`] to send
    /// from one task and receive in a `select!` elsewhere).
    pub async fn send(&mut self, message: &ToHelper) -> Result<(), ChannelError> {
        self.writer.send(message).await
    }

    /// Receives the next message; `Ok(None)` when the helper closed the
    /// connection. Cancel-safe.
    pub async fn recv(&mut self) -> Result<Option<FromHelper>, ChannelError> {
        self.reader.recv().await
    }

    /// The two halves, for a reader task and a writer task.
    pub fn into_split(self) -> (ChannelReader, ChannelWriter) {
        (self.reader, self.writer)
    }
}

/// The helper's end of one connection.
#[derive(Debug)]
pub struct HelperLink {
    /// Messages from the service.
    pub reader: HelperReader,
    /// Messages to the service.
    pub writer: HelperWriter,
}

/// The receiving half of a [`HelperLink`].
pub type HelperReader = FrameReader<OwnedReadHalf, ToHelper>;

/// The sending half of a [`HelperLink`].
pub type HelperWriter = FrameWriter<OwnedWriteHalf, FromHelper>;

impl HelperLink {
    /// Wraps the end the helper kept after [`peer::hand_over`].
    pub fn new(stream: UnixStream) -> HelperLink {
        let (read, write) = stream.into_split();
        HelperLink {
            reader: FrameReader::new(read),
            writer: FrameWriter::new(write),
        }
    }
}
