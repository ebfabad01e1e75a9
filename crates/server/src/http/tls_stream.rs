//! The server's side of TLS on every accepted connection, over rustls's
//! unbuffered API: the buffers are this stream's, and a connection that
//! waits for its peer holds none (issue 20; docs/decisions.md D-721).
//!
//! Why not `tokio-rustls`: rustls's buffered connection keeps a receive
//! buffer of at least 4 KiB from its first read for as long as it lives,
//! whether anything arrives or not. An idle relay side is two such
//! connections' worth per paired session (the host's and the device's), a
//! third of what an idle session costs the server. Here the bytes read wait
//! in a buffer that is given back once the connection has processed them and
//! finds the socket empty; records on their way out and decrypted data not
//! yet read are given back as soon as they are gone.
//!
//! What stays rustls's: the whole of TLS (handshake, record protection, key
//! updates, session tickets, alerts, close_notify), driven through
//! [`UnbufferedServerConnection::process_tls_records`]. What is this
//! module's: moving bytes between the socket, those three buffers and the
//! caller, in the order the connection asks for.

use std::future::poll_fn;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::{Buf, BytesMut};
use rustls::ServerConfig;
use rustls::server::UnbufferedServerConnection;
use rustls::unbuffered::{ConnectionState, EncodeError, EncryptError, UnbufferedStatus};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_util::io::poll_read_buf;

/// The most data encrypted per write: a caller's larger write is taken in
/// parts, so the records on their way stay bounded. One WebSocket frame of
/// the largest relay message (65,535 bytes, D-718) with its header (at most
/// 14 bytes) fits in one.
const MAX_WRITE: usize = 0xffff + 14;
/// The most data one record carries (TLS's limit; rustls cuts what it
/// encrypts into records of this size).
const RECORD_DATA: usize = 16 * 1024;
/// The most bytes read from the socket at once: the records of one write of
/// [`MAX_WRITE`] from a peer like this one (five records, each with its
/// header and the most protection overhead TLS 1.3 allows), so a frame of
/// the largest relay message comes in one read, not one per record
/// (D-728). It holds one record of the largest size TLS 1.2 allows, too.
const READ_CHUNK: usize = MAX_WRITE + 5 * (5 + 256);
/// The most unprocessed bytes kept from the peer: a handshake message may
/// span records up to 64 KiB (rustls's own bound for its buffered API),
/// anything else is at most one record and what one read brought.
const MAX_INCOMING: usize = 0xffff + READ_CHUNK;
/// Room for the records' headers and tags beyond the data, per record of at
/// most 16 KiB, and for a key update that goes first.
const RECORD_OVERHEAD: usize = 64;

/// An accepted TLS connection over `IO` (the client's socket).
pub(crate) struct TlsStream<IO> {
    io: IO,
    conn: UnbufferedServerConnection,
    /// TLS bytes from the peer not processed yet (a record in part); no
    /// room kept while the connection waits.
    incoming: BytesMut,
    /// Records on their way to the peer, and how many bytes of them the
    /// socket took.
    outgoing: Vec<u8>,
    sent: usize,
    /// Decrypted data not read yet (what did not fit the reader's buffer, or
    /// came while a write needed the connection), and how much was read.
    plaintext: Vec<u8>,
    taken: usize,
    /// The peer's close_notify came: reads end after the data before it.
    peer_closed: bool,
    /// A shutdown asked for our close_notify.
    closing: bool,
    /// Our close_notify is queued.
    close_queued: bool,
}

/// What the connection needs once it has done what it could without I/O.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Driven {
    /// More bytes from the peer (the handshake or a record is incomplete).
    Blocked,
    /// Nothing to do; application data may be sent.
    Writable,
    /// This many bytes of the caller's data were encrypted.
    Wrote(usize),
    /// The reader's buffer is full, or decrypted data waits beside it: the
    /// records after it stay encrypted in `incoming` until the next read.
    Filled,
    /// Both close_notify alerts went: nothing more moves.
    Closed,
}

/// Accepts a TLS connection on `io`: the handshake, to its end.
pub(crate) async fn accept<IO>(config: Arc<ServerConfig>, io: IO) -> io::Result<TlsStream<IO>>
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    let conn = UnbufferedServerConnection::new(config).map_err(tls_error)?;
    let mut stream = TlsStream {
        io,
        conn,
        incoming: BytesMut::new(),
        outgoing: Vec::new(),
        sent: 0,
        plaintext: Vec::new(),
        taken: 0,
        peer_closed: false,
        closing: false,
        close_queued: false,
    };
    poll_fn(|cx| stream.poll_handshake(cx)).await?;
    Ok(stream)
}

impl<IO: AsyncRead + AsyncWrite + Unpin> TlsStream<IO> {
    /// How the handshake went (full or resumed), once it is done.
    pub(crate) fn handshake_kind(&self) -> Option<rustls::HandshakeKind> {
        self.conn.handshake_kind()
    }

    fn poll_handshake(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            let driven = self
                .drive(None, None)
                .inspect_err(|_| self.send_alert(cx))?;
            ready!(self.poll_send(cx))?;
            match driven {
                // The server may send once its flight is out; the handshake
                // ends with the client's Finished.
                Driven::Writable if !self.conn.is_handshaking() => return Poll::Ready(Ok(())),
                Driven::Blocked | Driven::Writable => {
                    if ready!(self.poll_fill(cx))? == 0 {
                        return Poll::Ready(Err(io::ErrorKind::UnexpectedEof.into()));
                    }
                }
                Driven::Closed | Driven::Wrote(_) | Driven::Filled => {
                    return Poll::Ready(Err(io::ErrorKind::UnexpectedEof.into()));
                }
            }
        }
    }

    /// Runs the connection over the bytes read until it needs I/O: records
    /// it wants sent go to `outgoing`, decrypted data to `read_to` (while
    /// nothing read earlier waits) or to `plaintext`, and `data`, once the
    /// connection may send, is encrypted (at most [`MAX_WRITE`] of it).
    fn drive(
        &mut self,
        mut read_to: Option<&mut ReadBuf<'_>>,
        data: Option<&[u8]>,
    ) -> io::Result<Driven> {
        loop {
            let UnbufferedStatus { discard, state } =
                self.conn.process_tls_records(&mut self.incoming[..]);
            let state = state.map_err(tls_error)?;
            let driven = match state {
                ConnectionState::ReadTraffic(mut traffic) => {
                    while let Some(record) = traffic.next_record() {
                        let payload = record.map_err(tls_error)?.payload;
                        let waiting = self.plaintext.len() > self.taken;
                        match read_to.as_deref_mut() {
                            Some(buf) if !waiting => {
                                let fits = payload.len().min(buf.remaining());
                                buf.put_slice(&payload[..fits]);
                                self.plaintext.extend_from_slice(&payload[fits..]);
                            }
                            _ => self.plaintext.extend_from_slice(payload),
                        }
                    }
                    // rustls decrypts one record per call: a reader whose
                    // buffer is full leaves the next ones encrypted where
                    // they are, rather than copied twice (D-728).
                    match read_to.as_deref() {
                        Some(buf) if buf.remaining() == 0 || self.plaintext.len() > self.taken => {
                            Some(Driven::Filled)
                        }
                        _ => None,
                    }
                }
                ConnectionState::EncodeTlsData(mut encode) => {
                    // Asked with no room, the connection says how much it needs.
                    append(&mut self.outgoing, 0, |room| encode.encode(room))?;
                    None
                }
                // What was encoded goes out, in the connection's order, with
                // the handshake's own loop or the next write or flush.
                ConnectionState::TransmitTlsData(transmit) => {
                    transmit.done();
                    None
                }
                ConnectionState::BlockedHandshake => Some(Driven::Blocked),
                ConnectionState::WriteTraffic(mut traffic) => match data {
                    Some(data) if !data.is_empty() => {
                        let data = &data[..data.len().min(MAX_WRITE)];
                        let room = data.len() + (data.len() / (16 * 1024) + 2) * RECORD_OVERHEAD;
                        append(&mut self.outgoing, room, |room| traffic.encrypt(data, room))?;
                        Some(Driven::Wrote(data.len()))
                    }
                    _ if self.closing && !self.close_queued => {
                        append(&mut self.outgoing, RECORD_OVERHEAD, |room| {
                            traffic.queue_close_notify(room)
                        })?;
                        self.close_queued = true;
                        None
                    }
                    _ => Some(Driven::Writable),
                },
                ConnectionState::PeerClosed => {
                    self.peer_closed = true;
                    None
                }
                ConnectionState::Closed => Some(Driven::Closed),
                // No early data is accepted (the configuration's default),
                // and no other state exists in this rustls.
                _ => return Err(io::Error::other("unexpected TLS connection state")),
            };
            if discard > 0 {
                self.incoming.advance(discard);
            }
            if let Some(driven) = driven {
                return Ok(driven);
            }
        }
    }

    /// After a TLS error: the alert the connection queued goes to the peer
    /// if the socket takes it now; the connection is over either way (so a
    /// writer's wake-up taken here no longer matters).
    fn send_alert(&mut self, cx: &mut Context<'_>) {
        for _ in 0..4 {
            let UnbufferedStatus { state, .. } = self.conn.process_tls_records(&mut []);
            match state {
                Ok(ConnectionState::EncodeTlsData(mut encode)) => {
                    let mut room = [0u8; 64];
                    if let Ok(written) = encode.encode(&mut room) {
                        self.outgoing.extend_from_slice(&room[..written]);
                    }
                }
                Ok(ConnectionState::TransmitTlsData(transmit)) => {
                    transmit.done();
                    break;
                }
                _ => break,
            }
        }
        let _ = self.poll_send(cx);
    }

    /// Writes the records on their way until the socket took them all;
    /// their buffer is given back then.
    fn poll_send(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.sent < self.outgoing.len() {
            let written =
                ready!(Pin::new(&mut self.io).poll_write(cx, &self.outgoing[self.sent..]))?;
            if written == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.sent += written;
        }
        self.outgoing = Vec::new();
        self.sent = 0;
        Poll::Ready(Ok(()))
    }

    /// Reads what the socket has (room for at least [`READ_CHUNK`], not
    /// zeroed first) after the bytes not processed yet; 0 at its end. Room
    /// is made only for the read: a read that finds nothing leaves no buffer
    /// behind.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        if self.incoming.len() >= MAX_INCOMING {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "a TLS message over the size limit",
            )));
        }
        self.incoming.reserve(READ_CHUNK);
        let result = poll_read_buf(Pin::new(&mut self.io), cx, &mut self.incoming);
        if self.incoming.is_empty() {
            self.incoming = BytesMut::new();
        }
        result
    }

    /// Hands decrypted data that waits to `buf`; `true` if there was some.
    fn take_plaintext(&mut self, buf: &mut ReadBuf<'_>) -> bool {
        let waiting = &self.plaintext[self.taken..];
        if waiting.is_empty() {
            return false;
        }
        let fits = waiting.len().min(buf.remaining());
        buf.put_slice(&waiting[..fits]);
        self.taken += fits;
        if self.taken == self.plaintext.len() {
            self.plaintext = Vec::new();
            self.taken = 0;
        }
        true
    }

    /// Encrypts up to [`MAX_WRITE`] bytes of `bufs`, in order, into the
    /// records on their way; how many it took. Bytes that share a record
    /// with another buffer's are gathered in one buffer first; the whole
    /// records of a large buffer, and all of the last buffer that nothing
    /// gathered precedes, are encrypted from the caller's buffer, so the
    /// records are those of all the bytes written at once.
    fn encrypt_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        let total = bufs.iter().map(|b| b.len()).sum::<usize>().min(MAX_WRITE);
        let mut gathered: Vec<u8> = Vec::new();
        let gather = |gathered: &mut Vec<u8>, bytes: &[u8]| {
            if gathered.capacity() == 0 {
                gathered.reserve_exact(total.min(RECORD_DATA));
            }
            gathered.extend_from_slice(bytes);
        };
        let mut taken = 0;
        for slice in bufs {
            let slice = &slice[..slice.len().min(total - taken)];
            taken += slice.len();
            let last = taken == total;
            // What completes the record the gathered bytes began.
            let fill = match gathered.len() % RECORD_DATA {
                0 => 0,
                used => (RECORD_DATA - used).min(slice.len()),
            };
            let whole = (slice.len() - fill) / RECORD_DATA * RECORD_DATA;
            if whole == 0 && !(last && gathered.is_empty()) {
                gather(&mut gathered, slice);
                continue;
            }
            gather(&mut gathered, &slice[..fill]);
            self.encrypt_all(&gathered)?;
            gathered.clear();
            // The last buffer's end is the last record either way.
            let direct = if last { slice.len() - fill } else { whole };
            self.encrypt_all(&slice[fill..fill + direct])?;
            gather(&mut gathered, &slice[fill + direct..]);
        }
        self.encrypt_all(&gathered)?;
        Ok(taken)
    }

    /// Encrypts all of `data` (at most [`MAX_WRITE`]) into the records on
    /// their way.
    fn encrypt_all(&mut self, data: &[u8]) -> io::Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        match self.drive(None, Some(data))? {
            Driven::Wrote(taken) if taken == data.len() => Ok(()),
            Driven::Closed => Err(io::ErrorKind::BrokenPipe.into()),
            _ => Err(io::Error::other("the TLS connection cannot send")),
        }
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> AsyncRead for TlsStream<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.take_plaintext(buf) || this.peer_closed || buf.remaining() == 0 {
                return Poll::Ready(Ok(()));
            }
            let before = buf.filled().len();
            let driven = this
                .drive(Some(buf), None)
                .inspect_err(|_| this.send_alert(cx))?;
            let delivered = buf.filled().len() > before || this.plaintext.len() > this.taken;
            // Records the connection made while reading (a key update's
            // answer) wait for the next write or flush: a reader that wrote
            // would take the socket's one write wake-up from a writer
            // waiting on it (the halves of a split stream are two tasks).
            if delivered || driven == Driven::Closed {
                return Poll::Ready(Ok(()));
            }
            if this.peer_closed {
                continue;
            }
            // The socket's end without close_notify ends the reads as well
            // (HTTP sees a body cut short by its own framing).
            if ready!(this.poll_fill(cx))? == 0 {
                return Poll::Ready(Ok(()));
            }
        }
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> AsyncWrite for TlsStream<IO> {
    /// One buffer is a vectored write of one: its records are encrypted
    /// from it, without a copy.
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[IoSlice::new(data)])
    }

    /// Several buffers go out as one write (a WebSocket frame's header with
    /// its payload in one record, not a record of its own): up to
    /// [`MAX_WRITE`] of them, in the records one write of them all joined
    /// would make. Only what fills a record beside another buffer's bytes
    /// is copied together first (D-728).
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        // Records written earlier go first: a socket that takes nothing
        // holds the writer back here, not in a growing buffer.
        ready!(this.poll_send(cx))?;
        let taken = this.encrypt_vectored(bufs)?;
        // The records are this stream's now; what the socket does not take
        // yet goes with the next write or the flush.
        if let Poll::Ready(Err(error)) = this.poll_send(cx) {
            return Poll::Ready(Err(error));
        }
        Poll::Ready(Ok(taken))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_send(cx))?;
        Pin::new(&mut this.io).poll_flush(cx)
    }

    /// Sends close_notify after everything written, then ends the socket's
    /// writing.
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.close_queued {
            this.closing = true;
            // A connection that can no longer send ends without it.
            let _ = this.drive(None, None);
        }
        ready!(this.poll_send(cx))?;
        Pin::new(&mut this.io).poll_shutdown(cx)
    }
}

/// Appends to `outgoing` what `encode` writes into the room after it:
/// `room` bytes first and, where the connection asks for more, as much as it
/// asks. Nothing is appended when it fails.
fn append<E: NeedsRoom>(
    outgoing: &mut Vec<u8>,
    room: usize,
    mut encode: impl FnMut(&mut [u8]) -> Result<usize, E>,
) -> io::Result<()> {
    let start = outgoing.len();
    outgoing.resize(start + room, 0);
    let result = match encode(&mut outgoing[start..]) {
        Err(error) => match error.required_size() {
            Some(required) => {
                outgoing.resize(start + required, 0);
                encode(&mut outgoing[start..])
            }
            None => Err(error),
        },
        written => written,
    };
    match result {
        Ok(written) => {
            outgoing.truncate(start + written);
            Ok(())
        }
        Err(error) => {
            outgoing.truncate(start);
            Err(io::Error::other(error))
        }
    }
}

/// The errors of rustls's encoders that say how much room they need.
trait NeedsRoom: std::error::Error + Send + Sync + 'static {
    fn required_size(&self) -> Option<usize>;
}

impl NeedsRoom for EncodeError {
    fn required_size(&self) -> Option<usize> {
        match self {
            EncodeError::InsufficientSize(size) => Some(size.required_size),
            _ => None,
        }
    }
}

impl NeedsRoom for EncryptError {
    fn required_size(&self) -> Option<usize> {
        match self {
            EncryptError::InsufficientSize(size) => Some(size.required_size),
            _ => None,
        }
    }
}

fn tls_error(error: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, error)
}

#[cfg(test)]
mod tests;
