//! A WebSocket client for the tests: TCP to the [`TestServer`]'s port, TLS with
//! rustls (ring) trusting exactly the server's CA — as the reqwest client does —
//! then the RFC 6455 handshake of tokio-tungstenite (HTTP/1.1).
//!
//! Waiting is on the socket, with [`WAIT`] only as the safety net of a test that
//! would otherwise hang.

use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::Value;
use tokio::net::{TcpSocket, TcpStream};
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::{Error, Message};

use crate::server::TestServer;

/// The safety net of every wait on a socket.
pub const WAIT: Duration = Duration::from_secs(30);

/// A client socket.
pub type Ws = WebSocketStream<TlsStream<TcpStream>>;

/// An upgrade the server refused: its status and problem body.
#[derive(Debug)]
pub struct Refused {
    pub status: u16,
    pub content_type: String,
    pub body: Value,
}

/// Options of [`connect_with`].
#[derive(Debug, Default, Clone, Copy)]
pub struct Options {
    /// `SO_RCVBUF` of the client socket (a small one makes a reader that does
    /// not read fill up fast).
    pub recv_buffer: Option<u32>,
}

/// Opens `path` (with its query) with an optional bearer token.
pub async fn connect(server: &TestServer, path: &str, token: Option<&str>) -> Result<Ws, Refused> {
    connect_with(server, path, token, Options::default()).await
}

/// [`connect`] with [`Options`].
pub async fn connect_with(
    server: &TestServer,
    path: &str,
    token: Option<&str>,
    options: Options,
) -> Result<Ws, Refused> {
    connect_with_headers(server, path, token, options, &[]).await
}

/// [`connect_with`] with extra request headers (`Cookie`, `Origin`, ...).
pub async fn connect_with_headers(
    server: &TestServer,
    path: &str,
    token: Option<&str>,
    options: Options,
    headers: &[(&str, &str)],
) -> Result<Ws, Refused> {
    connect_to(server.port, &server.ca_file, path, token, options, headers).await
}

/// [`connect_with_headers`] to `localhost:port` trusting `ca_file`: a server
/// that is no [`TestServer`] of this process (an edge in front of nodes).
pub async fn connect_to(
    port: u16,
    ca_file: &std::path::Path,
    path: &str,
    token: Option<&str>,
    options: Options,
    headers: &[(&str, &str)],
) -> Result<Ws, Refused> {
    let socket = TcpSocket::new_v4().expect("socket");
    if let Some(size) = options.recv_buffer {
        socket.set_recv_buffer_size(size).expect("SO_RCVBUF");
    }
    let tcp = socket
        .connect(([127, 0, 0, 1], port).into())
        .await
        .expect("connect");
    let name = ServerName::try_from("localhost").expect("server name");
    let tls = TlsConnector::from(tls_config(ca_file))
        .connect(name, tcp)
        .await
        .expect("TLS handshake");

    let mut request = format!("wss://localhost:{port}{path}")
        .into_client_request()
        .expect("request");
    if let Some(token) = token {
        request.headers_mut().insert(
            "authorization",
            HeaderValue::from_str(&format!("Bearer {token}")).expect("header"),
        );
    }
    for (name, value) in headers {
        request.headers_mut().insert(
            tokio_tungstenite::tungstenite::http::HeaderName::from_bytes(name.as_bytes())
                .expect("header name"),
            HeaderValue::from_str(value).expect("header value"),
        );
    }
    match tokio::time::timeout(WAIT, tokio_tungstenite::client_async(request, tls))
        .await
        .expect("upgrade answered in time")
    {
        Ok((ws, response)) => {
            assert_eq!(response.status(), 101);
            Ok(ws)
        }
        Err(Error::Http(response)) => {
            let content_type = response
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            let body = response
                .body()
                .as_deref()
                .map(|bytes| serde_json::from_slice(bytes).expect("problem JSON"))
                .unwrap_or(Value::Null);
            Err(Refused {
                status: response.status().as_u16(),
                content_type,
                body,
            })
        }
        Err(other) => panic!("WebSocket handshake failed: {other}"),
    }
}

/// [`connect`] that must succeed.
pub async fn open(server: &TestServer, path: &str, token: &str) -> Ws {
    connect(server, path, Some(token))
        .await
        .unwrap_or_else(|refused| panic!("upgrade refused: {refused:?}"))
}

/// A raw TLS connection to the server from `local` (a loopback address; the
/// server's per-address limits count it), offering `alpn` (`h2`,
/// `http/1.1`, or nothing), for tests of the HTTP connection itself;
/// `Err` when the server closed it during the handshake.
pub async fn raw_tls(
    server: &TestServer,
    local: std::net::IpAddr,
    alpn: &[&str],
) -> std::io::Result<TlsStream<TcpStream>> {
    let socket = TcpSocket::new_v4()?;
    socket.bind((local, 0).into())?;
    let tcp = socket.connect(([127, 0, 0, 1], server.port).into()).await?;
    let mut config = (*tls_config(&server.ca_file)).clone();
    config.alpn_protocols = alpn.iter().map(|p| p.as_bytes().to_vec()).collect();
    let name = ServerName::try_from("localhost").expect("server name");
    tokio::time::timeout(
        WAIT,
        TlsConnector::from(Arc::new(config)).connect(name, tcp),
    )
    .await
    .map_err(|_| std::io::Error::other("the TLS handshake did not finish in time"))?
}

fn tls_config(ca_file: &std::path::Path) -> Arc<rustls::ClientConfig> {
    Arc::new(client_tls_config(ca_file))
}

/// The TLS configuration of the test's clients: trusts the server's CA
/// (`ca_file`), and never resumes a session, so every resumed handshake the
/// server counts in a scenario is the host service's (or the CLI's) own.
pub fn client_tls_config(ca_file: &std::path::Path) -> rustls::ClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca_file).expect("CA file") {
        roots
            .add(cert.expect("CA certificate"))
            .expect("CA accepted");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.resumption = rustls::client::Resumption::disabled();
    config
}

/// What the server sent next.
#[derive(Debug, PartialEq)]
pub enum Next {
    /// A text frame, as JSON.
    Json(Value),
    /// A close frame with this code and reason.
    Close(u16, String),
    /// The connection ended without a close frame.
    Ended,
}

/// The next frame the server sent (pings and pongs skipped).
pub async fn next(ws: &mut Ws) -> Next {
    loop {
        let frame = tokio::time::timeout(WAIT, ws.next())
            .await
            .expect("the server sent something in time");
        match frame {
            Some(Ok(Message::Text(text))) => {
                return Next::Json(serde_json::from_str(&text).expect("JSON text frame"));
            }
            Some(Ok(Message::Close(Some(frame)))) => {
                // Reading on sends tungstenite's answering close frame and
                // ends with the server's end of the connection.
                let _ = tokio::time::timeout(WAIT, ws.next()).await;
                return Next::Close(u16::from(frame.code), frame.reason.to_string());
            }
            Some(Ok(Message::Close(None))) | None | Some(Err(_)) => return Next::Ended,
            Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => {}
            Some(Ok(Message::Binary(_))) => panic!("the events stream sends text frames only"),
        }
    }
}

/// The next text frame, as JSON.
pub async fn next_json(ws: &mut Ws) -> Value {
    match next(ws).await {
        Next::Json(value) => value,
        other => panic!("expected a text frame, got {other:?}"),
    }
}

/// Reads until the server's close frame; returns its code.
pub async fn close_code(ws: &mut Ws) -> u16 {
    loop {
        match next(ws).await {
            Next::Json(_) => {}
            Next::Close(code, _) => return code,
            Next::Ended => panic!("the connection ended without a close frame"),
        }
    }
}

/// Sends a frame.
pub async fn send(ws: &mut Ws, message: Message) {
    tokio::time::timeout(WAIT, ws.send(message))
        .await
        .expect("sent in time")
        .expect("send");
}
