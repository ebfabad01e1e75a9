//! The accept loop: plain HTTP or TLS (rustls) on a given listener, HTTP/1.1
//! and HTTP/2 with WebSocket upgrades, and a graceful shutdown (STYLE 9: the
//! shutdown is an argument; connections drain before `serve` returns).
//!
//! # Slow and idle clients (docs/decisions.md D-350, D-351)
//! Every HTTP connection has a watchdog (what nginx's `client_header_timeout`
//! and `keepalive_timeout`, Go's `ReadHeaderTimeout` and `IdleTimeout` do):
//! - the first request's head must arrive within `server.header_read_timeout`
//!   of the accept, the TLS handshake included: a TLS connection that sends
//!   nothing, an HTTP/2 connection without its preface and a slow header are
//!   closed;
//! - a connection without a request in flight (HTTP/1.1 keep-alive, HTTP/2
//!   without a stream) is closed `server.idle_timeout` after its last
//!   response ended, whatever it sends meanwhile (a slow second header
//!   included);
//! - a request in flight (its body read, its handler running, its response
//!   written) ends the connection when no byte moved either way for
//!   `server.idle_timeout` (a stalled body or a reader that stopped).
//!
//! A WebSocket upgrade ends hyper's connection: its future completes and
//! hands the socket to the handler, so neither the watchdog nor the
//! per-address count follow the socket any further; the WebSocket tasks keep
//! their own deadlines (heartbeats, `gateway.write_timeout`, the relay's
//! timers).
//!
//! One client address holds at most `server.max_connections_per_address`
//! HTTP connections (from accept until they end or become a WebSocket);
//! another one is closed at once, and the refusal is logged at most once a
//! minute per address. Running out of file descriptors (`EMFILE`, `ENFILE`)
//! or kernel memory at accept backs off exponentially up to
//! [`ACCEPT_BACKOFF_MAX`] instead of spinning, with one log line per burst.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::ConnectInfo;
use axum::http::Request;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;
use tower::ServiceExt;

use super::tls_stream::{self, TlsStream};
use crate::config::ServerConfig;
use crate::metrics::{TlsHandshakeKind, TlsHandshakes};

/// How long open connections may take to finish after the shutdown signal.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a client may take for the TLS handshake (and never longer than
/// `server.header_read_timeout`, which counts from the accept).
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The first pause after a failed accept for want of resources.
const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(10);

/// The longest pause after failed accepts.
pub const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// A refused address is logged again after this long at the earliest.
const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(60);

/// Addresses whose last refusal is remembered for [`REFUSAL_LOG_INTERVAL`].
const REFUSAL_LOG_ADDRESSES: usize = 1024;

/// The limits of HTTP connections (`server.*`, D-350 and D-351).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// `server.header_read_timeout`.
    pub header_read_timeout: Duration,
    /// `server.idle_timeout`.
    pub idle_timeout: Duration,
    /// `server.max_connections_per_address`.
    pub max_per_address: usize,
}

impl From<&ServerConfig> for ConnectionLimits {
    fn from(server: &ServerConfig) -> Self {
        ConnectionLimits {
            header_read_timeout: server.header_read_timeout,
            idle_timeout: server.idle_timeout,
            max_per_address: server.max_connections_per_address,
        }
    }
}

/// Serves `router` on `listener` until `shutdown` completes, then stops
/// accepting and waits up to [`DRAIN_TIMEOUT`] for open connections.
///
/// With `tls` every connection is a TLS connection (rustls); without it the
/// server speaks plain HTTP (`server.tls: off`, behind an edge that terminates
/// TLS). Each request carries `ConnectInfo<SocketAddr>` of the peer, which the
/// rate limits of unauthenticated calls key on.
pub async fn serve(
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    router: Router,
    limits: ConnectionLimits,
    handshakes: TlsHandshakes,
    shutdown: impl Future<Output = ()> + Send,
) -> std::io::Result<()> {
    let graceful = GracefulShutdown::new();
    let addresses = Arc::new(AddressCounts::default());
    let refusals = RefusalLog::default();
    let mut backoff = AcceptBackoff::default();
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => {
                    backoff.accepted();
                    accepted
                }
                Err(error) => {
                    if let Some(pause) = backoff.failed(&error) {
                        tokio::select! {
                            () = tokio::time::sleep(pause) => {}
                            () = &mut shutdown => break,
                        }
                    }
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // Interactive traffic (keystrokes, their echo, relay messages written
        // one at a time) must not wait for Nagle's algorithm: every write of
        // the server is a whole frame or response (docs/decisions.md D-450).
        let _ = stream.set_nodelay(true);
        let address = peer.ip().to_canonical();
        let Some(slot) = addresses.take(address, limits.max_per_address) else {
            refusals.refused(address, limits.max_per_address);
            drop(stream);
            continue;
        };
        let router = router.clone();
        let tls = tls.clone();
        let handshakes = handshakes.clone();
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let _slot = slot;
            let activity = Arc::new(Activity::new());
            let service = {
                let activity = Arc::clone(&activity);
                hyper::service::service_fn(move |request: Request<Incoming>| {
                    let in_flight = activity.request_started();
                    let mut request = request.map(Body::new);
                    request.extensions_mut().insert(ConnectInfo(peer));
                    let response = router.clone().oneshot(request);
                    async move {
                        let response = response.await?;
                        Ok::<_, Infallible>(response.map(|body| {
                            Body::new(InFlightBody {
                                body,
                                _in_flight: in_flight,
                            })
                        }))
                    }
                })
            };
            let builder = auto::Builder::new(TokioExecutor::new());
            let stream = QuickAck::new(stream);
            let result = match tls {
                Some(config) => {
                    let handshake = TLS_HANDSHAKE_TIMEOUT.min(limits.header_read_timeout);
                    let Some(tls) = tls_accept(&config, stream, peer, handshake).await else {
                        return;
                    };
                    if let Some(kind) = tls.handshake_kind() {
                        handshakes.count(TlsHandshakeKind::of(kind));
                    }
                    let io = TokioIo::new(Tracked::new(tls, Arc::clone(&activity)));
                    let connection = builder.serve_connection_with_upgrades(io, service);
                    watch(
                        watcher.watch(connection.into_owned()),
                        &activity,
                        limits,
                        peer,
                    )
                    .await
                }
                None => {
                    let io = TokioIo::new(Tracked::new(stream, Arc::clone(&activity)));
                    let connection = builder.serve_connection_with_upgrades(io, service);
                    watch(
                        watcher.watch(connection.into_owned()),
                        &activity,
                        limits,
                        peer,
                    )
                    .await
                }
            };
            if let Err(error) = result {
                tracing::debug!(%error, "connection ended with an error");
            }
        });
    }
    drop(listener);
    tokio::select! {
        () = graceful.shutdown() => {}
        () = tokio::time::sleep(DRAIN_TIMEOUT) => {
            tracing::warn!("connections still open after the drain timeout; stopping anyway");
        }
    }
    Ok(())
}

/// Runs `connection` until it ends (or is upgraded), closing it when the
/// watchdog's deadline passes (module documentation).
async fn watch<E>(
    connection: impl Future<Output = Result<(), E>>,
    activity: &Activity,
    limits: ConnectionLimits,
    peer: SocketAddr,
) -> Result<(), E> {
    tokio::pin!(connection);
    // Deadlines only move later with activity, except when the shorter
    // timeout takes over; waking at least this often sees that in time.
    let step = limits.header_read_timeout.min(limits.idle_timeout);
    loop {
        let now = Instant::now();
        let deadline = activity.deadline(limits);
        if now >= deadline {
            tracing::debug!(
                peer = %peer.ip(),
                first_request = !activity.seen_request(),
                "closing an HTTP connection after its header or idle timeout"
            );
            return Ok(());
        }
        tokio::select! {
            result = &mut connection => return result,
            () = tokio::time::sleep_until(deadline.min(now + step)) => {}
        }
    }
}

/// What the watchdog of one connection knows: when it started, when a byte
/// last moved, and its requests.
#[derive(Debug)]
struct Activity {
    start: Instant,
    /// Microseconds since `start` of the last byte read or written, or of the
    /// last request's start or end. (Microseconds, not milliseconds: a time
    /// cut down to whole milliseconds put a deadline up to 1 ms early.)
    last_us: AtomicU64,
    /// Requests whose response has not been written in full.
    in_flight: AtomicUsize,
    /// Whether the first request's head arrived.
    seen_request: AtomicBool,
    /// Microseconds since `start` when the last request in flight ended.
    waiting_since_us: AtomicU64,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            start: Instant::now(),
            last_us: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            seen_request: AtomicBool::new(false),
            waiting_since_us: AtomicU64::new(0),
        }
    }

    fn elapsed_us(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    fn touch(&self) {
        self.last_us.fetch_max(self.elapsed_us(), Ordering::Relaxed);
    }

    fn seen_request(&self) -> bool {
        self.seen_request.load(Ordering::Relaxed)
    }

    fn request_started(self: &Arc<Self>) -> InFlight {
        self.seen_request.store(true, Ordering::Relaxed);
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        self.touch();
        InFlight(Arc::clone(self))
    }

    /// When the connection is to be closed, as things stand now.
    fn deadline(&self, limits: ConnectionLimits) -> Instant {
        let at = |us: u64, timeout: Duration| {
            self.start + Duration::from_micros(us).saturating_add(timeout)
        };
        if self.in_flight.load(Ordering::SeqCst) > 0 {
            at(self.last_us.load(Ordering::Relaxed), limits.idle_timeout)
        } else if !self.seen_request() {
            at(0, limits.header_read_timeout)
        } else {
            at(
                self.waiting_since_us.load(Ordering::SeqCst),
                limits.idle_timeout,
            )
        }
    }
}

/// One request in flight, until its response body is written or dropped.
#[derive(Debug)]
struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        // The time first, so the watchdog never sees no request in flight
        // together with an older time.
        let now = self.0.elapsed_us();
        self.0.waiting_since_us.store(now, Ordering::SeqCst);
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
        self.0.touch();
    }
}

/// A response body that keeps its request in flight until it is done.
struct InFlightBody {
    body: Body,
    _in_flight: InFlight,
}

impl hyper::body::Body for InFlightBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// A client's TCP connection that acknowledges at once what it read when the
/// read emptied the socket (`TCP_QUICKACK`, docs/decisions.md D-710).
///
/// A client that sends with Nagle's algorithm (Chromium's fetch sends a
/// request's headers and its body as two TLS records) holds its second write
/// until the first is acknowledged, and Linux delays the acknowledgement of
/// a connection it sees as interactive by up to 40 ms: the body waited for
/// that timer. A read that did not fill the buffer took everything the peer
/// had sent, so the peer may be waiting for its acknowledgement; a full read
/// (a bulk transfer) leaves more queued and costs no extra call.
struct QuickAck {
    inner: TcpStream,
}

impl QuickAck {
    fn new(inner: TcpStream) -> Self {
        QuickAck { inner }
    }
}

impl AsyncRead for QuickAck {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let result = Pin::new(&mut this.inner).poll_read(cx, buf);
        if buf.filled().len() > before && buf.remaining() > 0 {
            // Linux leaves quick-ack mode by itself; asked again per short
            // read. A failure only costs the delay this avoids.
            let _ = socket2::SockRef::from(&this.inner).set_tcp_quickack(true);
        }
        result
    }
}

impl AsyncWrite for QuickAck {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// The socket under hyper, telling [`Activity`] of every byte that moves.
struct Tracked<T> {
    inner: T,
    activity: Arc<Activity>,
}

impl<T> Tracked<T> {
    fn new(inner: T, activity: Arc<Activity>) -> Self {
        Tracked { inner, activity }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Tracked<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let result = Pin::new(&mut this.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            this.activity.touch();
        }
        result
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Tracked<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.inner).poll_write(cx, buf);
        if matches!(result, Poll::Ready(Ok(n)) if n > 0) {
            this.activity.touch();
        }
        result
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        if matches!(result, Poll::Ready(Ok(n)) if n > 0) {
            this.activity.touch();
        }
        result
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// The HTTP connections of every client address.
#[derive(Debug, Default)]
struct AddressCounts {
    counts: Mutex<HashMap<IpAddr, usize>>,
}

impl AddressCounts {
    /// One more connection of `address`, unless it holds `max` already.
    fn take(self: &Arc<Self>, address: IpAddr, max: usize) -> Option<AddressSlot> {
        let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        let count = counts.entry(address).or_insert(0);
        if *count >= max {
            return None;
        }
        *count += 1;
        Some(AddressSlot {
            counts: Arc::clone(self),
            address,
        })
    }
}

/// One counted connection; dropping it lets the address have another.
#[derive(Debug)]
struct AddressSlot {
    counts: Arc<AddressCounts>,
    address: IpAddr,
}

impl Drop for AddressSlot {
    fn drop(&mut self) {
        let mut counts = self
            .counts
            .counts
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = counts.get_mut(&self.address) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                counts.remove(&self.address);
            }
        }
    }
}

/// Logs refused connections at most once per [`REFUSAL_LOG_INTERVAL`] and
/// address, with the number left unsaid since; remembers a bounded number of
/// addresses.
#[derive(Debug, Default)]
struct RefusalLog {
    last: Mutex<HashMap<IpAddr, (Instant, u64)>>,
}

impl RefusalLog {
    fn refused(&self, address: IpAddr, max: usize) {
        let now = Instant::now();
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((at, unsaid)) = last.get_mut(&address) {
            if now.duration_since(*at) < REFUSAL_LOG_INTERVAL {
                *unsaid += 1;
                return;
            }
        }
        if !last.contains_key(&address) && last.len() >= REFUSAL_LOG_ADDRESSES {
            last.retain(|_, (at, _)| now.duration_since(*at) < REFUSAL_LOG_INTERVAL);
            if last.len() >= REFUSAL_LOG_ADDRESSES {
                return;
            }
        }
        let unsaid = last
            .insert(address, (now, 0))
            .map_or(0, |(_, unsaid)| unsaid);
        tracing::warn!(
            %address,
            max_connections_per_address = max,
            refused_before = unsaid,
            "refused a connection: the address holds server.max_connections_per_address \
             HTTP connections already"
        );
    }
}

/// The pause after failed accepts: none for an error of one connection, an
/// exponential one while the process lacks resources (D-351).
#[derive(Debug, Default)]
pub struct AcceptBackoff {
    /// The pause of the next failure; zero outside a burst.
    next: Duration,
    /// Failures of the current burst.
    failures: u64,
}

impl AcceptBackoff {
    /// An accept failed with `error`: how long to pause (`None`: go on).
    pub fn failed(&mut self, error: &std::io::Error) -> Option<Duration> {
        if !lacks_resources(error) {
            tracing::debug!(%error, "accept failed for one connection");
            return None;
        }
        if self.failures == 0 {
            tracing::warn!(
                %error,
                "accept failed: the process lacks file descriptors or memory; backing off \
                 (open connections are served on)"
            );
        }
        self.failures += 1;
        let pause = self.next.max(ACCEPT_BACKOFF_MIN);
        self.next = pause.saturating_mul(2).min(ACCEPT_BACKOFF_MAX);
        Some(pause)
    }

    /// An accept succeeded: a burst of failures is over.
    pub fn accepted(&mut self) {
        if self.failures > 0 {
            tracing::info!(
                failed_accepts = self.failures,
                "accepting connections again"
            );
        }
        self.failures = 0;
        self.next = Duration::ZERO;
    }
}

/// `EMFILE`, `ENFILE`, `ENOBUFS`, `ENOMEM`: the process or the system is out
/// of something, and retrying at once only spins.
fn lacks_resources(error: &std::io::Error) -> bool {
    use nix::errno::Errno;
    error.raw_os_error().is_some_and(|code| {
        [Errno::EMFILE, Errno::ENFILE, Errno::ENOBUFS, Errno::ENOMEM]
            .into_iter()
            .any(|errno| errno as i32 == code)
    })
}

async fn tls_accept(
    config: &Arc<rustls::ServerConfig>,
    stream: QuickAck,
    peer: SocketAddr,
    timeout: Duration,
) -> Option<TlsStream<QuickAck>> {
    match tokio::time::timeout(timeout, tls_stream::accept(Arc::clone(config), stream)).await {
        Ok(Ok(tls)) => Some(tls),
        Ok(Err(error)) => {
            tracing::debug!(%error, peer = %peer.ip(), "TLS handshake failed");
            None
        }
        Err(_) => {
            tracing::debug!(peer = %peer.ip(), "TLS handshake timed out");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A connected pair whose server end Linux treats as interactive (in
    /// "ping-pong" mode it delays acknowledgements): five request/answer
    /// exchanges, read on the bare socket.
    async fn interactive_pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let mut client = TcpStream::connect(listener.local_addr().expect("address"))
            .await
            .expect("connect");
        let (mut server, _) = listener.accept().await.expect("accept");
        let mut buf = [0u8; 16];
        for _ in 0..5 {
            client.write_all(b"ping").await.expect("client writes");
            server
                .read_exact(&mut buf[..4])
                .await
                .expect("server reads");
            server.write_all(b"pong").await.expect("server writes");
            client
                .read_exact(&mut buf[..4])
                .await
                .expect("client reads");
        }
        (client, server)
    }

    fn quickack(stream: &TcpStream) -> bool {
        socket2::SockRef::from(stream)
            .tcp_quickack()
            .expect("TCP_QUICKACK")
    }

    #[tokio::test]
    async fn a_read_that_empties_the_socket_is_acknowledged_at_once() {
        let (mut client, server) = interactive_pair().await;
        assert!(
            !quickack(&server),
            "the kernel delays acknowledgements here"
        );
        let mut server = QuickAck::new(server);
        client.write_all(b"body").await.expect("client writes");
        let mut buf = [0u8; 64];
        let read = server.read(&mut buf).await.expect("server reads");
        assert_eq!(&buf[..read], b"body");
        assert!(quickack(&server.inner), "a short read asks for quick acks");
    }

    /// Linux's delayed acknowledgement fires after at least 40 ms and then
    /// leaves the delaying mode by itself; a check that took longer than
    /// this from the write says nothing and is made again.
    const CONCLUSIVE: Duration = Duration::from_millis(20);

    /// Whether the server end asks for quick acks after the client wrote
    /// `sent` and the server read `read_len` bytes of it; `None` when the
    /// kernel's own timer may have decided it.
    async fn quickack_after(sent: &[u8], read_len: usize, wrapped: bool) -> Option<bool> {
        let (mut client, server) = interactive_pair().await;
        let mut buf = vec![0u8; read_len];
        let started = std::time::Instant::now();
        client.write_all(sent).await.expect("client writes");
        let quick = if wrapped {
            let mut server = QuickAck::new(server);
            server.read_exact(&mut buf).await.expect("server reads");
            quickack(&server.inner)
        } else {
            let mut server = server;
            server.read_exact(&mut buf).await.expect("server reads");
            quickack(&server)
        };
        (started.elapsed() < CONCLUSIVE).then_some(quick)
    }

    async fn conclusive(sent: &[u8], read_len: usize, wrapped: bool) -> bool {
        for _ in 0..20 {
            if let Some(quick) = quickack_after(sent, read_len, wrapped).await {
                return quick;
            }
        }
        panic!("no check ended within {CONCLUSIVE:?} of its write");
    }

    #[tokio::test]
    async fn a_bare_socket_and_a_full_read_keep_delaying_acknowledgements() {
        assert!(
            !conclusive(b"body", 4, false).await,
            "without QuickAck the delay stays"
        );
        // A read that fills the buffer (more is queued: a bulk transfer)
        // makes no call.
        assert!(
            !conclusive(&[7u8; 128], 16, true).await,
            "a full read makes no call"
        );
    }

    fn os_error(errno: nix::errno::Errno) -> std::io::Error {
        std::io::Error::from_raw_os_error(errno as i32)
    }

    #[test]
    fn accept_backs_off_exponentially_while_resources_lack() {
        let mut backoff = AcceptBackoff::default();
        let emfile = os_error(nix::errno::Errno::EMFILE);
        let pauses: Vec<u64> = (0..10)
            .map(|_| backoff.failed(&emfile).map_or(0, |d| d.as_millis() as u64))
            .collect();
        assert_eq!(
            pauses,
            [10, 20, 40, 80, 160, 320, 640, 1000, 1000, 1000],
            "from 10 ms, doubling, at most 1 s"
        );
        assert_eq!(backoff.failures, 10);
        backoff.accepted();
        assert_eq!(
            backoff.failed(&os_error(nix::errno::Errno::ENFILE)),
            Some(ACCEPT_BACKOFF_MIN),
            "a new burst starts small"
        );
        // An error of one connection is no reason to pause.
        let mut backoff = AcceptBackoff::default();
        assert_eq!(
            backoff.failed(&os_error(nix::errno::Errno::ECONNABORTED)),
            None
        );
        assert_eq!(backoff.failures, 0);
    }

    #[test]
    fn address_slots_count_and_free() {
        let counts = Arc::new(AddressCounts::default());
        let a: IpAddr = [127, 0, 0, 1].into();
        let b: IpAddr = [127, 0, 0, 2].into();
        let first = counts.take(a, 2).expect("first");
        let second = counts.take(a, 2).expect("second");
        assert!(counts.take(a, 2).is_none(), "a third is refused");
        let other = counts.take(b, 2).expect("another address has its own");
        drop(first);
        let again = counts.take(a, 2).expect("one closed: one more");
        drop((second, again, other));
        assert!(
            counts
                .counts
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .is_empty(),
            "nothing kept for addresses without connections"
        );
    }
}
