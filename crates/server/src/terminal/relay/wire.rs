//! The relay's WebSocket (RFC 6455, the server's end) for its two sides, the
//! host's data connection and the device stream: frames go straight between
//! the connection and the messages, and an idle side holds no buffer of its
//! own (issue 20; docs/decisions.md D-718).
//!
//! Why not axum's WebSocket (tungstenite): its read buffer grows to the
//! largest message read and its write buffer to the largest batch written,
//! and neither is given back while the connection lives. A session that once
//! carried one 64 KiB message each way then kept about 320 KiB while idle,
//! against 33 KiB for one that never carried any. Here a message is read
//! into a buffer of exactly its length, which then is the message the relay
//! forwards (no second copy), and a message is written as its header and its
//! payload, vectored, into TLS (no write buffer: only the messages on their
//! way, until the connection took them).
//!
//! The upgrade itself (the HTTP request and the 101) is the web layer's:
//! `crate::http::upgrade`.
//!
//! What is tungstenite's and used from it: the frame header's parsing and
//! formatting ([`FrameHeader`]) and which close codes may travel
//! ([`CloseCode::is_allowed`]). What is this module's: the rules of the
//! server's end: every frame from the client masked, no reserved bits or opcodes, control frames whole and at most 125
//! bytes, fragments only in order, text valid UTF-8, a close frame's code
//! and reason valid, and the size limit on every frame and message (a frame
//! over it is refused from its header, before its payload).

use std::io::{self, Cursor, IoSlice};
use std::time::Duration;

use axum::body::Bytes;
use bytes::BufMut;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio_tungstenite::tungstenite::protocol::frame::FrameHeader;
use tokio_tungstenite::tungstenite::protocol::frame::coding::{CloseCode, Control, Data, OpCode};

use crate::shutdown::CLOSE_ANSWER_WAIT;

/// The connection under a relay side once upgraded.
pub(crate) type Io = TokioIo<hyper::upgrade::Upgraded>;

/// The longest frame header: 2 bytes, an 8-byte length, a 4-byte mask.
const MAX_HEADER: usize = 14;
/// The longest header the server writes (no mask).
const MAX_OUT_HEADER: usize = 10;
/// The largest payload of a control frame (RFC 6455 5.5).
const MAX_CONTROL: usize = 125;

/// One whole message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Message {
    Text(String),
    Binary(Bytes),
    Ping(Bytes),
    Pong(Bytes),
    /// A close frame: its code and reason, or none.
    Close(Option<(u16, String)>),
}

/// Why a message could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WireError {
    /// The connection failed, or ended inside a frame.
    #[error("the connection failed: {0}")]
    Io(#[from] io::Error),
    /// A frame or message breaks RFC 6455.
    #[error("WebSocket protocol violation: {0}")]
    Protocol(&'static str),
    /// A frame or message is larger than the limit.
    #[error("a WebSocket message over the size limit")]
    TooLarge,
}

/// Both halves of one connection, for the login, where one task reads and
/// writes in turn; [`WireSocket::split`] for a side's loop.
pub(crate) struct WireSocket<S> {
    reader: WireReader<ReadHalf<S>>,
    writer: WireWriter<WriteHalf<S>>,
}

impl<S: AsyncRead + AsyncWrite> WireSocket<S> {
    /// A socket over `io` with messages of at most `max` bytes.
    pub(crate) fn new(io: S, max: usize) -> WireSocket<S> {
        let (read, write) = tokio::io::split(io);
        WireSocket {
            reader: WireReader::new(read, max),
            writer: WireWriter::new(write),
        }
    }

    /// The next data or close message; a ping is answered here and is not
    /// returned, nor is a pong. `None` once the connection ended between
    /// frames or after a close frame.
    pub(crate) async fn recv(&mut self) -> Option<Result<Message, WireError>> {
        loop {
            match self.reader.recv().await {
                Some(Ok(Message::Ping(payload))) => {
                    // A failed answer shows on the next read.
                    let _ = self.writer.send(Message::Pong(payload)).await;
                }
                Some(Ok(Message::Pong(_))) => {}
                other => return other,
            }
        }
    }

    /// Sends one message and flushes it.
    pub(crate) async fn send(&mut self, message: Message) -> io::Result<()> {
        self.writer.send(message).await
    }

    /// The two halves, for a reader and a writer that run side by side.
    pub(crate) fn split(self) -> (WireWriter<WriteHalf<S>>, WireReader<ReadHalf<S>>) {
        (self.writer, self.reader)
    }
}

/// The frame being read.
struct Incoming {
    opcode: OpCode,
    is_final: bool,
    mask: [u8; 4],
    /// The payload's length, from the header.
    len: usize,
    /// The payload so far (its room is exactly `len`).
    payload: Vec<u8>,
}

/// The reading half: whole messages out of frames.
pub(crate) struct WireReader<R> {
    io: R,
    max: usize,
    /// The header being read (never more than the header itself is read).
    head: [u8; MAX_HEADER],
    head_len: usize,
    frame: Option<Incoming>,
    /// A fragmented data message so far: whether it is text, and its bytes.
    fragments: Option<(bool, Vec<u8>)>,
    /// A close frame was read: nothing follows.
    closed: bool,
}

impl<R: AsyncRead + Unpin> WireReader<R> {
    fn new(io: R, max: usize) -> WireReader<R> {
        WireReader {
            io,
            max,
            head: [0; MAX_HEADER],
            head_len: 0,
            frame: None,
            fragments: None,
            closed: false,
        }
    }

    /// The next message (pings and pongs included). `None` once the
    /// connection ended between frames, or after a close frame. Cancel-safe:
    /// what was read stays here, and the next call goes on from it.
    pub(crate) async fn recv(&mut self) -> Option<Result<Message, WireError>> {
        if self.closed {
            return None;
        }
        match self.read_message().await {
            Ok(Some(message)) => {
                if matches!(message, Message::Close(_)) {
                    self.closed = true;
                }
                Some(Ok(message))
            }
            Ok(None) => {
                self.closed = true;
                None
            }
            Err(error) => {
                self.closed = true;
                Some(Err(error))
            }
        }
    }

    async fn read_message(&mut self) -> Result<Option<Message>, WireError> {
        loop {
            if self.frame.is_none() {
                let need = header_len(&self.head[..self.head_len]);
                if self.head_len < need {
                    let n = self.io.read(&mut self.head[self.head_len..need]).await?;
                    if n == 0 {
                        let between_frames = self.head_len == 0 && self.fragments.is_none();
                        return if between_frames {
                            Ok(None)
                        } else {
                            Err(io::Error::from(io::ErrorKind::UnexpectedEof).into())
                        };
                    }
                    self.head_len += n;
                    continue;
                }
                let mut cursor = Cursor::new(&self.head[..self.head_len]);
                let (header, len) = FrameHeader::parse(&mut cursor)
                    .map_err(|_| WireError::Protocol("reserved opcode"))?
                    .ok_or(WireError::Protocol("incomplete frame header"))?;
                self.head_len = 0;
                self.frame = Some(self.check_header(&header, len)?);
            }
            let Some(frame) = self.frame.as_mut() else {
                continue;
            };
            let missing = frame.len - frame.payload.len();
            if missing > 0 {
                let n = self
                    .io
                    .read_buf(&mut (&mut frame.payload).limit(missing))
                    .await?;
                if n == 0 {
                    return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into());
                }
                continue;
            }
            let Some(Incoming {
                opcode,
                is_final,
                mask,
                mut payload,
                ..
            }) = self.frame.take()
            else {
                continue;
            };
            unmask(&mut payload, mask);
            if let Some(message) = self.complete(opcode, is_final, payload)? {
                return Ok(Some(message));
            }
        }
    }

    /// The checks a frame's header allows before its payload is read.
    fn check_header(&self, header: &FrameHeader, len: u64) -> Result<Incoming, WireError> {
        if header.rsv1 || header.rsv2 || header.rsv3 {
            return Err(WireError::Protocol("reserved bits set"));
        }
        let Some(mask) = header.mask else {
            return Err(WireError::Protocol("a client's frame without a mask"));
        };
        let len = usize::try_from(len).map_err(|_| WireError::TooLarge)?;
        match header.opcode {
            OpCode::Control(_) => {
                if !header.is_final {
                    return Err(WireError::Protocol("a fragmented control frame"));
                }
                if len > MAX_CONTROL {
                    return Err(WireError::Protocol("a control frame over 125 bytes"));
                }
            }
            OpCode::Data(data) => {
                let so_far = match (&self.fragments, data) {
                    (None, Data::Continue) => {
                        return Err(WireError::Protocol("a continuation without a message"));
                    }
                    (Some(_), Data::Text | Data::Binary) => {
                        return Err(WireError::Protocol("a new message inside a fragmented one"));
                    }
                    (Some((_, bytes)), _) => bytes.len(),
                    (None, _) => 0,
                };
                if len > self.max.saturating_sub(so_far) {
                    return Err(WireError::TooLarge);
                }
            }
        }
        Ok(Incoming {
            opcode: header.opcode,
            is_final: header.is_final,
            mask,
            len,
            payload: Vec::with_capacity(len),
        })
    }

    /// The message a whole frame completes, if any.
    fn complete(
        &mut self,
        opcode: OpCode,
        is_final: bool,
        payload: Vec<u8>,
    ) -> Result<Option<Message>, WireError> {
        let (text, bytes) = match opcode {
            OpCode::Control(Control::Ping) => return Ok(Some(Message::Ping(payload.into()))),
            OpCode::Control(Control::Pong) => return Ok(Some(Message::Pong(payload.into()))),
            OpCode::Control(Control::Close) => return close_message(&payload).map(Some),
            OpCode::Control(Control::Reserved(_)) | OpCode::Data(Data::Reserved(_)) => {
                return Err(WireError::Protocol("reserved opcode"));
            }
            OpCode::Data(Data::Continue) => {
                let Some((text, mut bytes)) = self.fragments.take() else {
                    return Err(WireError::Protocol("a continuation without a message"));
                };
                bytes.extend_from_slice(&payload);
                (text, bytes)
            }
            OpCode::Data(Data::Text) => (true, payload),
            OpCode::Data(Data::Binary) => (false, payload),
        };
        if !is_final {
            self.fragments = Some((text, bytes));
            return Ok(None);
        }
        if text {
            String::from_utf8(bytes)
                .map(|text| Some(Message::Text(text)))
                .map_err(|_| WireError::Protocol("a text message that is not UTF-8"))
        } else {
            Ok(Some(Message::Binary(Bytes::from(bytes))))
        }
    }
}

/// How many bytes the header that starts with `head` has (2 until its
/// second byte is known).
fn header_len(head: &[u8]) -> usize {
    let [_, second, ..] = head else {
        return 2;
    };
    let length = match second & 0x7F {
        126 => 2,
        127 => 8,
        _ => 0,
    };
    let mask = if second & 0x80 != 0 { 4 } else { 0 };
    2 + length + mask
}

/// Removes a client's mask (RFC 6455 5.3), eight bytes at a time.
fn unmask(payload: &mut [u8], mask: [u8; 4]) {
    let wide = u64::from_ne_bytes([
        mask[0], mask[1], mask[2], mask[3], mask[0], mask[1], mask[2], mask[3],
    ]);
    let mut chunks = payload.chunks_exact_mut(8);
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        chunk.copy_from_slice(&(u64::from_ne_bytes(word) ^ wide).to_ne_bytes());
    }
    // Whole chunks were multiples of 8 bytes, so the mask starts over here.
    for (i, byte) in chunks.into_remainder().iter_mut().enumerate() {
        *byte ^= mask[i % 4];
    }
}

/// The message of a close frame's payload.
fn close_message(payload: &[u8]) -> Result<Message, WireError> {
    match payload {
        [] => Ok(Message::Close(None)),
        [_] => Err(WireError::Protocol("a close frame with one byte")),
        [high, low, reason @ ..] => {
            let code = u16::from_be_bytes([*high, *low]);
            if !CloseCode::from(code).is_allowed() {
                return Err(WireError::Protocol("a close code that may not be sent"));
            }
            let reason = std::str::from_utf8(reason)
                .map_err(|_| WireError::Protocol("a close reason that is not UTF-8"))?;
            Ok(Message::Close(Some((code, reason.to_owned()))))
        }
    }
}

/// The writing half: messages as frames, with no buffer of its own (only the
/// messages being written, until they are).
///
/// Cancel-safe: the frames being written and how much of them the
/// connection took stay here, and every later write, flush or shutdown first
/// writes the rest. A side whose write to a slow peer is given up (4014, a
/// shutdown) so still ends its stream with whole frames, then the close.
pub(crate) struct WireWriter<W> {
    io: W,
    pending: Option<Outgoing>,
}

/// Frames on their way: each header with its payload, and how many bytes of
/// them all the connection took.
struct Outgoing {
    heads: Vec<([u8; MAX_OUT_HEADER], usize)>,
    payloads: Vec<Bytes>,
    written: usize,
}

impl<W: AsyncWrite + Unpin> WireWriter<W> {
    fn new(io: W) -> WireWriter<W> {
        WireWriter { io, pending: None }
    }

    /// Sends one message and flushes it.
    pub(crate) async fn send(&mut self, message: Message) -> io::Result<()> {
        let (opcode, payload) = match message {
            Message::Text(text) => (OpCode::Data(Data::Text), Bytes::from(text)),
            Message::Binary(bytes) => (OpCode::Data(Data::Binary), bytes),
            Message::Ping(bytes) => (OpCode::Control(Control::Ping), bytes),
            Message::Pong(bytes) => (OpCode::Control(Control::Pong), bytes),
            Message::Close(frame) => (
                OpCode::Control(Control::Close),
                Bytes::from(close_payload(frame.as_ref())),
            ),
        };
        self.write(opcode, vec![payload]).await
    }

    /// Sends every message of `messages` as one binary frame each, in
    /// vectored writes (TLS packs them into records together), then flushes
    /// once.
    pub(crate) async fn send_binary(&mut self, messages: Vec<Bytes>) -> io::Result<()> {
        self.write(OpCode::Data(Data::Binary), messages).await
    }

    /// Ends the connection's writing (TLS's close_notify, then the socket's),
    /// after whatever was on its way.
    pub(crate) async fn shutdown(&mut self) -> io::Result<()> {
        self.write_pending().await?;
        self.io.shutdown().await
    }

    /// Writes one unmasked, unfragmented frame of `opcode` per payload, after
    /// whatever was on its way, and flushes.
    async fn write(&mut self, opcode: OpCode, payloads: Vec<Bytes>) -> io::Result<()> {
        self.write_pending().await?;
        let header = FrameHeader {
            opcode,
            ..FrameHeader::default()
        };
        let mut heads = Vec::with_capacity(payloads.len());
        for payload in &payloads {
            let mut head = [0u8; MAX_OUT_HEADER];
            let mut out = &mut head[..];
            header
                .format(payload.len() as u64, &mut out)
                .map_err(|_| io::Error::other("a frame header that does not fit"))?;
            let used = MAX_OUT_HEADER - out.len();
            heads.push((head, used));
        }
        self.pending = Some(Outgoing {
            heads,
            payloads,
            written: 0,
        });
        self.write_pending().await?;
        self.io.flush().await
    }

    /// Writes the rest of the frames on their way, if any.
    async fn write_pending(&mut self) -> io::Result<()> {
        let WireWriter { io, pending } = self;
        let Some(outgoing) = pending.as_mut() else {
            return Ok(());
        };
        loop {
            let mut slices: Vec<IoSlice<'_>> = outgoing
                .heads
                .iter()
                .zip(&outgoing.payloads)
                .flat_map(|((head, used), payload)| {
                    [IoSlice::new(&head[..*used]), IoSlice::new(payload)]
                })
                .collect();
            let mut rest = &mut slices[..];
            IoSlice::advance_slices(&mut rest, outgoing.written);
            if rest.is_empty() {
                break;
            }
            // A write that completes was taken whole; one cancelled took
            // nothing (AsyncWrite), so `written` is always true.
            let n = io.write_vectored(rest).await?;
            if n == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            outgoing.written += n;
        }
        *pending = None;
        Ok(())
    }
}

/// Ends a connection from the server's side (RFC 6455 7.1.2): the close
/// frame with `code` and `reason` (given up after `write_timeout`), the
/// peer's close read for at most [`CLOSE_ANSWER_WAIT`], then the end of the
/// connection's writing. A login's refusal and a side's end both end so.
pub(crate) async fn close<W, R>(
    writer: &mut WireWriter<W>,
    reader: &mut WireReader<R>,
    code: u16,
    reason: String,
    write_timeout: Duration,
) where
    W: AsyncWrite + Unpin,
    R: AsyncRead + Unpin,
{
    let frame = Message::Close(Some((code, reason)));
    if let Ok(Ok(())) = tokio::time::timeout(write_timeout, writer.send(frame)).await {
        read_to_close(reader, CLOSE_ANSWER_WAIT).await;
        let _ = tokio::time::timeout(write_timeout, writer.shutdown()).await;
    }
}

/// Reads and drops messages until the peer's close frame or the end of the
/// connection, at most `limit` long.
pub(crate) async fn read_to_close<R: AsyncRead + Unpin>(
    reader: &mut WireReader<R>,
    limit: Duration,
) {
    let _ = tokio::time::timeout(limit, async {
        while let Some(Ok(message)) = reader.recv().await {
            if matches!(message, Message::Close(_)) {
                return;
            }
        }
    })
    .await;
}

/// A close frame's payload: the code and the reason, cut to fit a control
/// frame at a character's boundary.
fn close_payload(frame: Option<&(u16, String)>) -> Vec<u8> {
    let Some((code, reason)) = frame else {
        return Vec::new();
    };
    let mut end = reason.len().min(MAX_CONTROL - 2);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    let mut payload = Vec::with_capacity(2 + end);
    payload.extend_from_slice(&code.to_be_bytes());
    payload.extend_from_slice(&reason.as_bytes()[..end]);
    payload
}

#[cfg(test)]
mod tests;
