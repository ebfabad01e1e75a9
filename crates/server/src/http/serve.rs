//! The accept loop: plain HTTP or TLS (rustls) on a given listener, HTTP/1.1
//! and HTTP/2 with WebSocket upgrades, and a graceful shutdown (STYLE 9: the
//! shutdown is an argument; connections drain before `serve` returns).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::Request;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;

/// How long open connections may take to finish after the shutdown signal.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a client may take for the TLS handshake.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

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
    shutdown: impl Future<Output = ()> + Send,
) -> std::io::Result<()> {
    let acceptor = tls.map(TlsAcceptor::from);
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Running out of file descriptors and the like: keep serving
                    // the connections we have, and retry after a pause.
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let router = router.clone();
        let acceptor = acceptor.clone();
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let service = router.map_request(move |request: Request<Incoming>| {
                let mut request = request.map(Body::new);
                request.extensions_mut().insert(ConnectInfo(peer));
                request
            });
            let service = TowerToHyperService::new(service);
            let builder = auto::Builder::new(TokioExecutor::new());
            let result = match acceptor {
                Some(acceptor) => match tls_accept(&acceptor, stream, peer).await {
                    Some(tls) => {
                        let connection =
                            builder.serve_connection_with_upgrades(TokioIo::new(tls), service);
                        watcher.watch(connection.into_owned()).await
                    }
                    None => return,
                },
                None => {
                    let connection =
                        builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
                    watcher.watch(connection.into_owned()).await
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

async fn tls_accept(
    acceptor: &TlsAcceptor,
    stream: TcpStream,
    peer: SocketAddr,
) -> Option<tokio_rustls::server::TlsStream<TcpStream>> {
    match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
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
