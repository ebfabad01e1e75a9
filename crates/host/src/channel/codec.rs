//! Reading and writing frames of [`super::message`] over a byte stream (tokio).
//!
//! [`FrameReader::recv`] is cancel-safe: it keeps a partly read frame in
//! itself, so it can sit in a `select!` beside other events. The reader reads
//! exactly one frame at a time (the prefix, then exactly the body), so no byte
//! of a later frame ever waits in a buffer, and a body that carried a secret is
//! wiped after decoding. [`FrameWriter::send`] is not cancel-safe (a cancelled
//! write leaves half a frame); it belongs to one task.

use std::io;
use std::marker::PhantomData;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use zeroize::Zeroize;

use super::ChannelError;
use super::message::{LENGTH_BYTES, Message, body_length};

/// Reads frames of messages `M` from `R`.
#[derive(Debug)]
pub struct FrameReader<R, M> {
    inner: R,
    prefix: [u8; LENGTH_BYTES],
    prefix_filled: usize,
    /// The body read so far, with room for the rest (not zeroed: the reads
    /// fill it in order).
    body: Vec<u8>,
    body_length: usize,
    _message: PhantomData<fn() -> M>,
}

impl<R: AsyncRead + Unpin, M: Message> FrameReader<R, M> {
    /// A reader over `inner`.
    pub fn new(inner: R) -> Self {
        FrameReader {
            inner,
            prefix: [0; LENGTH_BYTES],
            prefix_filled: 0,
            body: Vec::new(),
            body_length: 0,
            _message: PhantomData,
        }
    }

    /// The next message; `Ok(None)` when the peer closed the stream between
    /// two frames. A close inside a frame is [`ChannelError::Broken`], a frame
    /// the decoder refuses is [`ChannelError::Decode`] (after which the stream
    /// is out of step and must be dropped). Cancel-safe.
    pub async fn recv(&mut self) -> Result<Option<M>, ChannelError> {
        while self.prefix_filled < LENGTH_BYTES {
            let n = self
                .inner
                .read(&mut self.prefix[self.prefix_filled..])
                .await
                .map_err(ChannelError::Broken)?;
            if n == 0 {
                if self.prefix_filled == 0 {
                    return Ok(None);
                }
                return Err(ChannelError::Broken(io::ErrorKind::UnexpectedEof.into()));
            }
            self.prefix_filled += n;
            if self.prefix_filled == LENGTH_BYTES {
                // Refuse an oversized frame before reading (or allocating) its body.
                self.body_length = body_length(&self.prefix)?;
                self.body = Vec::with_capacity(self.body_length);
            }
        }
        while self.body.len() < self.body_length {
            // Never past this frame's body: the next frame stays in the stream.
            let rest = (self.body_length - self.body.len()) as u64;
            let n = (&mut self.inner)
                .take(rest)
                .read_buf(&mut self.body)
                .await
                .map_err(ChannelError::Broken)?;
            if n == 0 {
                return Err(ChannelError::Broken(io::ErrorKind::UnexpectedEof.into()));
            }
        }
        let mut body = std::mem::take(&mut self.body);
        self.prefix_filled = 0;
        self.body_length = 0;
        let decoded = M::decode_body(&body);
        if body.first().is_some_and(|tag| M::tag_carries_secret(*tag)) {
            body.zeroize();
        }
        Ok(Some(decoded?))
    }

    /// The stream back (a partly read frame is lost).
    pub fn into_inner(self) -> R {
        self.inner
    }
}

/// Writes frames of messages `M` to `W`.
#[derive(Debug)]
pub struct FrameWriter<W, M> {
    inner: W,
    _message: PhantomData<fn(M)>,
}

impl<W: AsyncWrite + Unpin, M: Message> FrameWriter<W, M> {
    /// A writer over `inner`.
    pub fn new(inner: W) -> Self {
        FrameWriter {
            inner,
            _message: PhantomData,
        }
    }

    /// Writes one message as one frame. Not cancel-safe.
    pub async fn send(&mut self, message: &M) -> Result<(), ChannelError> {
        let mut frame = message.encode()?;
        let written = self.inner.write_all(&frame).await;
        if message.carries_secret() {
            frame.zeroize();
        }
        written.map_err(ChannelError::Broken)
    }

    /// Flushes and shuts the writing half down (the peer reads end of stream).
    pub async fn shutdown(&mut self) -> Result<(), ChannelError> {
        self.inner.shutdown().await.map_err(ChannelError::Broken)
    }

    /// The stream back.
    pub fn into_inner(self) -> W {
        self.inner
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::channel::message::DecodeError;
    use crate::channel::message::{FromHelper, MAX_FRAME_BYTES, ToHelper};

    #[tokio::test]
    async fn frames_survive_any_split_of_the_stream() {
        let messages = vec![
            ToHelper::Main,
            ToHelper::Input(b"hello".to_vec()),
            ToHelper::Checks(vec![7; 3000]),
            ToHelper::End,
        ];
        let bytes: Vec<u8> = messages.iter().flat_map(|m| m.encode().unwrap()).collect();
        // A stream that hands out one byte per read.
        let (mut client, server) = tokio::io::duplex(1);
        let writer = tokio::spawn(async move {
            client.write_all(&bytes).await.unwrap();
        });
        let mut reader = FrameReader::<_, ToHelper>::new(server);
        for expected in &messages {
            assert_eq!(reader.recv().await.unwrap().as_ref(), Some(expected));
        }
        writer.await.unwrap();
        assert!(reader.recv().await.unwrap().is_none());
    }

    #[tokio::test]
    async fn a_close_inside_a_frame_is_broken_and_a_huge_prefix_is_refused_early() {
        let (mut client, server) = tokio::io::duplex(64);
        client.write_all(&[0, 0, 0, 5, 0x84]).await.unwrap();
        drop(client);
        let mut reader = FrameReader::<_, FromHelper>::new(server);
        assert!(matches!(reader.recv().await, Err(ChannelError::Broken(_))));

        let (mut client, server) = tokio::io::duplex(64);
        let huge = u32::try_from(MAX_FRAME_BYTES + 1).unwrap().to_be_bytes();
        client.write_all(&huge).await.unwrap();
        let mut reader = FrameReader::<_, FromHelper>::new(server);
        // Refused after the prefix, without waiting for (or allocating) a body.
        assert!(matches!(
            reader.recv().await,
            Err(ChannelError::Decode(DecodeError::TooLarge))
        ));
    }

    #[tokio::test]
    async fn recv_is_cancel_safe() {
        let (mut client, server) = tokio::io::duplex(1024);
        let mut reader = FrameReader::<_, ToHelper>::new(server);
        let frame = ToHelper::Input(b"abc".to_vec()).encode().unwrap();
        client.write_all(&frame[..6]).await.unwrap();
        // Cancelled while the frame is incomplete: nothing is lost.
        let timed_out =
            tokio::time::timeout(std::time::Duration::from_millis(20), reader.recv()).await;
        assert!(timed_out.is_err());
        client.write_all(&frame[6..]).await.unwrap();
        assert_eq!(
            reader.recv().await.unwrap(),
            Some(ToHelper::Input(b"abc".to_vec()))
        );
    }
}
