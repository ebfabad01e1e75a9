//! `bothy-net`: the client side of the network, shared by the host service
//! (`bothy-host`, 3.5 "Host service") and the command-line client (`bothy`).
//! Only outgoing, only `https://` and `wss://`: TLS by rustls (ring) with the
//! system's root certificates (`rustls-native-certs`, which honours
//! `SSL_CERT_FILE` and `SSL_CERT_DIR`), through the proxy the environment
//! names (`HTTPS_PROXY`, `NO_PROXY`, via hyper-util's matcher and its CONNECT
//! tunnel), HTTP/1.1 by hyper and WebSockets by tokio-tungstenite. There is no
//! option to skip the verification of the server's certificate
//! (docs/decisions.md D-270).
#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::connect::proxy::Tunnel;
use hyper_util::client::proxy::matcher::Matcher;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tower_service::Service;

/// The HTTP method of [`Connector::request`].
pub use hyper::Method;

/// How long one connection attempt (TCP, proxy, TLS, upgrade) may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);

/// Why the server could not be reached. No variant carries a token or a body.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    /// The server URL is not `https://host[:port]`.
    #[error("the server URL must be https://host or https://host:port (no path, no user)")]
    BadUrl,
    /// The system has no usable root certificate.
    #[error("no trusted root certificates found (set SSL_CERT_FILE to a CA bundle)")]
    NoRoots,
    /// The proxy setting of the environment is not usable.
    #[error("the proxy of the environment is not usable: {0}")]
    Proxy(String),
    /// Nothing accepts TCP connections at the server's address and port
    /// (connection refused): the server does not run, or not there.
    #[error("the server refused the connection (nothing listens at its address and port)")]
    Refused,
    /// TCP, proxy, TLS or WebSocket failed.
    #[error("cannot reach the server: {0}")]
    Connect(String),
    /// The server's certificate failed verification (not signed by a trusted
    /// root, another name, expired): never skipped, never retried around.
    #[error("the server's certificate is not trusted: {0}")]
    Certificate(String),
    /// The attempt took longer than [`CONNECT_TIMEOUT`].
    #[error("the server did not answer within {}s", CONNECT_TIMEOUT.as_secs())]
    Timeout,
    /// The WebSocket upgrade was refused with this HTTP status.
    #[error("the server refused the WebSocket upgrade with HTTP {0}")]
    UpgradeRefused(u16),
}

/// A failed TLS handshake: [`NetError::Certificate`] when rustls refused the
/// server's certificate, else [`NetError::Connect`].
fn handshake_error(error: std::io::Error) -> NetError {
    let refused_certificate = error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        .is_some_and(|e| {
            matches!(
                e,
                rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented
            )
        });
    if refused_certificate {
        NetError::Certificate(error.to_string())
    } else {
        NetError::Connect(error.to_string())
    }
}

/// The server: `https://host[:port]`, normalized without a trailing slash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerUrl {
    host: String,
    port: u16,
}

impl ServerUrl {
    /// Parses `https://host[:port]` (a trailing `/` is allowed). `http://` is
    /// refused: the host service and the client speak only TLS (3.5).
    pub fn parse(text: &str) -> Result<ServerUrl, NetError> {
        let rest = text
            .strip_prefix("https://")
            .or_else(|| text.strip_prefix("HTTPS://"))
            .ok_or(NetError::BadUrl)?;
        let authority = rest.strip_suffix('/').unwrap_or(rest);
        if authority.is_empty()
            || authority.chars().any(|c| {
                matches!(c, '/' | '?' | '#' | '@' | '\\') || c.is_whitespace() || c.is_control()
            })
        {
            return Err(NetError::BadUrl);
        }
        let uri: hyper::Uri = format!("https://{authority}/")
            .parse()
            .map_err(|_| NetError::BadUrl)?;
        let host = uri.host().ok_or(NetError::BadUrl)?.to_ascii_lowercase();
        let port = uri.port_u16().unwrap_or(443);
        if port == 0 {
            return Err(NetError::BadUrl);
        }
        Ok(ServerUrl { host, port })
    }

    /// The host as written (an IPv6 literal keeps its brackets).
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The host without the brackets of an IPv6 literal (for TLS and resolving).
    pub fn host_name(&self) -> &str {
        self.host.trim_start_matches('[').trim_end_matches(']')
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `https://host:port`
    pub fn https_base(&self) -> String {
        format!("https://{}:{}", self.host, self.port)
    }

    fn uri(&self, scheme: &str, path: &str) -> String {
        format!("{scheme}://{}:{}{path}", self.host, self.port)
    }
}

impl std::fmt::Display for ServerUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.https_base())
    }
}

/// Opens TLS connections to the server; one per process, cheap to clone.
#[derive(Clone)]
pub struct Connector {
    tls: TlsConnector,
    proxy: Arc<Matcher>,
}

impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connector").finish_non_exhaustive()
    }
}

/// Where an open connection leads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerInfo {
    /// The address of the TCP peer when no proxy is in between.
    pub direct_peer: Option<SocketAddr>,
}

/// An HTTP answer.
#[derive(Debug, Clone)]
pub struct HttpReply {
    /// The status.
    pub status: u16,
    /// The `ETag` header (the version of a host, for `If-Match`).
    pub etag: Option<String>,
    /// The body.
    pub body: Vec<u8>,
}

/// A WebSocket to the server over TLS.
pub type ServerSocket = WebSocketStream<TlsStream<TcpStream>>;

impl Connector {
    /// Trusts exactly the system's root certificates and reads the proxy
    /// settings of the environment.
    pub fn from_env() -> Result<Connector, NetError> {
        let loaded = rustls_native_certs::load_native_certs();
        let mut roots = rustls::RootCertStore::empty();
        for cert in loaded.certs {
            let _ = roots.add(cert);
        }
        if roots.is_empty() {
            return Err(NetError::NoRoots);
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| NetError::Connect(e.to_string()))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Connector {
            tls: TlsConnector::from(Arc::new(config)),
            proxy: Arc::new(Matcher::from_env()),
        })
    }

    /// A verified TLS stream to the server (through the proxy when the
    /// environment names one for it).
    pub async fn tls_stream(
        &self,
        server: &ServerUrl,
    ) -> Result<(TlsStream<TcpStream>, PeerInfo), NetError> {
        tokio::time::timeout(CONNECT_TIMEOUT, self.tls_stream_inner(server))
            .await
            .map_err(|_| NetError::Timeout)?
    }

    async fn tls_stream_inner(
        &self,
        server: &ServerUrl,
    ) -> Result<(TlsStream<TcpStream>, PeerInfo), NetError> {
        let dst: hyper::Uri = server
            .uri("https", "/")
            .parse()
            .map_err(|_| NetError::BadUrl)?;
        let (tcp, peer) = match self.proxy.intercept(&dst) {
            None => {
                let tcp = TcpStream::connect((server.host_name(), server.port()))
                    .await
                    .map_err(|e| match e.kind() {
                        std::io::ErrorKind::ConnectionRefused => NetError::Refused,
                        kind => NetError::Connect(kind.to_string()),
                    })?;
                let peer = tcp.peer_addr().ok();
                (tcp, PeerInfo { direct_peer: peer })
            }
            Some(intercept) => {
                let proxy_uri = intercept.uri().clone();
                if proxy_uri.scheme_str() != Some("http") {
                    return Err(NetError::Proxy(
                        "only http:// proxies are supported for CONNECT".into(),
                    ));
                }
                let mut tunnel = Tunnel::new(proxy_uri, HttpConnector::new());
                if let Some(auth) = intercept.basic_auth() {
                    tunnel = tunnel.with_auth(auth.clone());
                }
                let io = tunnel
                    .call(dst)
                    .await
                    .map_err(|e| NetError::Proxy(e.to_string()))?;
                (io.into_inner(), PeerInfo { direct_peer: None })
            }
        };
        let _ = tcp.set_nodelay(true);
        let name =
            ServerName::try_from(server.host_name().to_owned()).map_err(|_| NetError::BadUrl)?;
        let tls = self.tls.connect(name, tcp).await.map_err(handshake_error)?;
        Ok((tls, peer))
    }

    /// A WebSocket to `path` of the server; `max_message` bounds what it reads.
    pub async fn websocket(
        &self,
        server: &ServerUrl,
        path: &str,
        max_message: usize,
    ) -> Result<(ServerSocket, PeerInfo), NetError> {
        let (tls, peer) = self.tls_stream(server).await?;
        let request = server
            .uri("wss", path)
            .into_client_request()
            .map_err(|_| NetError::BadUrl)?;
        let config = WebSocketConfig::default()
            .max_message_size(Some(max_message))
            .max_frame_size(Some(max_message));
        let upgrade = tokio_tungstenite::client_async_with_config(request, tls, Some(config));
        match tokio::time::timeout(CONNECT_TIMEOUT, upgrade).await {
            Err(_) => Err(NetError::Timeout),
            Ok(Ok((ws, _response))) => Ok((ws, peer)),
            Ok(Err(tokio_tungstenite::tungstenite::Error::Http(response))) => {
                Err(NetError::UpgradeRefused(response.status().as_u16()))
            }
            Ok(Err(e)) => Err(NetError::Connect(e.to_string())),
        }
    }

    /// `method path` with an optional JSON body, bearer token and extra
    /// headers; returns the status, the `ETag` and the body (at most 1 MiB).
    pub async fn request(
        &self,
        server: &ServerUrl,
        method: hyper::Method,
        path: &str,
        bearer: Option<&str>,
        headers: &[(&str, &str)],
        body: Option<String>,
    ) -> Result<HttpReply, NetError> {
        let (tls, _) = self.tls_stream(server).await?;
        let exchange = async {
            let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
                .await
                .map_err(|e| NetError::Connect(e.to_string()))?;
            tokio::spawn(connection);
            let mut request = hyper::Request::builder()
                .method(method)
                .uri(path)
                .header(
                    hyper::header::HOST,
                    format!("{}:{}", server.host(), server.port()),
                )
                .header(
                    hyper::header::ACCEPT,
                    "application/json, application/problem+json",
                );
            if body.is_some() {
                request = request.header(hyper::header::CONTENT_TYPE, "application/json");
            }
            if let Some(token) = bearer {
                request = request.header(hyper::header::AUTHORIZATION, format!("Bearer {token}"));
            }
            for (name, value) in headers {
                request = request.header(*name, *value);
            }
            let request = request
                .body(Full::new(Bytes::from(body.unwrap_or_default())))
                .map_err(|_| NetError::BadUrl)?;
            let response = sender
                .send_request(request)
                .await
                .map_err(|e| NetError::Connect(e.to_string()))?;
            let status = response.status().as_u16();
            let etag = response
                .headers()
                .get(hyper::header::ETAG)
                .and_then(|value| value.to_str().ok())
                .map(str::to_owned);
            let limited = http_body_util::Limited::new(response.into_body(), 1 << 20);
            let bytes = limited
                .collect()
                .await
                .map_err(|e| NetError::Connect(e.to_string()))?
                .to_bytes();
            Ok(HttpReply {
                status,
                etag,
                body: bytes.to_vec(),
            })
        };
        tokio::time::timeout(CONNECT_TIMEOUT, exchange)
            .await
            .map_err(|_| NetError::Timeout)?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_urls() {
        let u = ServerUrl::parse("https://Bothy.Example.org:8443/").expect("valid");
        assert_eq!(u.https_base(), "https://bothy.example.org:8443");
        assert_eq!(
            u.uri("wss", "/api/v1/hosts/connect"),
            "wss://bothy.example.org:8443/api/v1/hosts/connect"
        );
        assert_eq!(u.to_string(), "https://bothy.example.org:8443");
        assert_eq!(ServerUrl::parse("https://x").expect("valid").port(), 443);
        let v6 = ServerUrl::parse("https://[::1]:9000").expect("valid");
        assert_eq!(
            (v6.host(), v6.host_name(), v6.port()),
            ("[::1]", "::1", 9000)
        );
        for bad in [
            "http://x",
            "x",
            "https://",
            "https://x/path",
            "https://u@x",
            "https://x?q",
            "https://x:0",
            "https://x y",
            "wss://x",
        ] {
            assert!(ServerUrl::parse(bad).is_err(), "{bad}");
        }
    }
}
