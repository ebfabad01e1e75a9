//! The HTTP connections themselves under slow, idle and many clients (issue
//! 15, item 5; docs/decisions.md D-350, D-351), against the real server on
//! port 0 with TLS and small configured timeouts: a half header, an idle
//! keep-alive connection, a TLS or HTTP/2 connection that never sends a
//! request, and the cap of connections per client address. The WebSocket
//! side (a paired relay session outliving these timeouts) is in
//! `terminal_relay.rs`.
//!
//! Each wait is for the server's close (end of stream) with [`WAIT`] as the
//! safety net; where a test says "after the timeout", it checks the lower
//! bound only, which no load can break.

#![allow(clippy::unwrap_used)] // test bodies are plain fns called by the generated #[test]s

use bothy_testkit as support;

use std::net::IpAddr;
use std::time::{Duration, Instant};

use bothy_server::db::Engine;
use bothy_testkit::eventually;
use support::both_engines;
use support::server::TestServer;
use support::ws::{WAIT, raw_tls};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

const LOCALHOST: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 1));

const HEADER_TIMEOUT: Duration = Duration::from_millis(800);
const IDLE_TIMEOUT: Duration = Duration::from_millis(1600);

fn timeouts() -> String {
    format!(
        "server:\n  header_read_timeout: {}ms\n  idle_timeout: {}ms\n",
        HEADER_TIMEOUT.as_millis(),
        IDLE_TIMEOUT.as_millis()
    )
}

/// Reads until the server ends the connection; returns what it sent.
async fn read_to_end(stream: &mut (impl AsyncRead + Unpin)) -> Vec<u8> {
    let mut received = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let read = tokio::time::timeout(WAIT, stream.read(&mut buf))
            .await
            .expect("the server ends the connection in time");
        match read {
            Ok(0) | Err(_) => return received,
            Ok(n) => received.extend_from_slice(&buf[..n]),
        }
    }
}

/// Reads one HTTP/1.1 response to `GET /healthz` (its head and a body of
/// `Content-Length` bytes).
async fn read_response(stream: &mut (impl AsyncRead + Unpin)) -> String {
    let mut received = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&received).into_owned();
        if let Some(end) = text.find("\r\n\r\n") {
            let length: usize = text[..end]
                .lines()
                .find_map(|line| {
                    let (name, value) = line.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse().ok())?
                })
                .expect("Content-Length");
            if received.len() >= end + 4 + length {
                return text;
            }
        }
        let n = tokio::time::timeout(WAIT, stream.read(&mut buf))
            .await
            .expect("a response in time")
            .expect("read");
        assert!(n > 0, "the connection ended before the response: {text}");
        received.extend_from_slice(&buf[..n]);
    }
}

const HEALTHZ: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n";

/// A client that sends half a request head is closed after
/// `server.header_read_timeout`, without an answer; a whole head in time is
/// answered.
async fn half_a_header_is_closed_after_the_header_timeout(engine: Engine) {
    let server = TestServer::start_with(engine, &timeouts()).await;
    let started = Instant::now();
    let mut slow = raw_tls(&server, LOCALHOST, &["http/1.1"]).await.unwrap();
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: loc")
        .await
        .unwrap();
    let answer = read_to_end(&mut slow).await;
    assert!(
        started.elapsed() >= HEADER_TIMEOUT,
        "not before the timeout"
    );
    assert!(
        answer.is_empty(),
        "no answer: {}",
        String::from_utf8_lossy(&answer)
    );

    let mut quick = raw_tls(&server, LOCALHOST, &["http/1.1"]).await.unwrap();
    quick.write_all(HEALTHZ).await.unwrap();
    assert!(read_response(&mut quick).await.starts_with("HTTP/1.1 200"));
    server.stop().await;
}

/// An HTTP/1.1 keep-alive connection is closed `server.idle_timeout` after
/// its last response, and not at the (shorter) header timeout; requests
/// before that are served on the same connection.
async fn an_idle_keep_alive_connection_is_closed_after_the_idle_timeout(engine: Engine) {
    let server = TestServer::start_with(engine, &timeouts()).await;
    let mut conn = raw_tls(&server, LOCALHOST, &["http/1.1"]).await.unwrap();
    conn.write_all(HEALTHZ).await.unwrap();
    assert!(read_response(&mut conn).await.starts_with("HTTP/1.1 200"));
    // The server's idle time starts after it read the request: after `sent`.
    let sent = Instant::now();
    conn.write_all(HEALTHZ).await.unwrap();
    assert!(read_response(&mut conn).await.starts_with("HTTP/1.1 200"));
    let rest = read_to_end(&mut conn).await;
    assert!(rest.is_empty());
    let idle = sent.elapsed();
    assert!(
        idle >= IDLE_TIMEOUT,
        "not before the idle timeout (nor at the header timeout): {idle:?}"
    );

    // A second request head that never ends does not keep it open either.
    let mut conn = raw_tls(&server, LOCALHOST, &["http/1.1"]).await.unwrap();
    let sent = Instant::now();
    conn.write_all(HEALTHZ).await.unwrap();
    assert!(read_response(&mut conn).await.starts_with("HTTP/1.1 200"));
    for byte in b"GET /healthz HTTP/1.1\r\n" {
        if conn.write_all(&[*byte]).await.is_err() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let rest = read_to_end(&mut conn).await;
    assert!(rest.is_empty());
    assert!(sent.elapsed() >= IDLE_TIMEOUT);
    server.stop().await;
}

/// A TLS connection that never sends a request, one that offers HTTP/2 and
/// never sends the preface, one that sends half the preface, and a TCP
/// connection without a TLS handshake: all closed after the header timeout.
async fn silent_connections_are_closed(engine: Engine) {
    let server = TestServer::start_with(engine, &timeouts()).await;
    for alpn in [&[][..], &["h2"][..], &["http/1.1"][..]] {
        let started = Instant::now();
        let mut silent = raw_tls(&server, LOCALHOST, alpn).await.unwrap();
        assert!(read_to_end(&mut silent).await.is_empty(), "{alpn:?}");
        assert!(started.elapsed() >= HEADER_TIMEOUT, "{alpn:?}");
    }
    let mut half = raw_tls(&server, LOCALHOST, &["h2"]).await.unwrap();
    half.write_all(b"PRI * HTTP/2.0\r\n").await.unwrap();
    assert!(read_to_end(&mut half).await.is_empty());

    let mut tcp = tokio::net::TcpStream::connect(("127.0.0.1", server.port))
        .await
        .unwrap();
    assert!(read_to_end(&mut tcp).await.is_empty());

    // HTTP/2 with its preface and a request is served.
    let h2 = support::server::client_builder_trusting(&server.ca_file)
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let reply = h2.get(server.url("/healthz")).send().await.unwrap();
    assert_eq!(reply.version(), reqwest::Version::HTTP_2);
    assert_eq!(reply.status(), 200);
    server.stop().await;
}

/// `server.max_connections_per_address`: with 3 open from 127.0.0.1, a 4th
/// from there is closed at once, one from 127.0.0.2 is served, and after one
/// of the 3 closes 127.0.0.1 gets a connection again.
async fn connections_per_address_are_capped(engine: Engine) {
    let server =
        TestServer::start_with(engine, "server:\n  max_connections_per_address: 3\n").await;
    let mut open = Vec::new();
    for _ in 0..3 {
        open.push(raw_tls(&server, LOCALHOST, &["http/1.1"]).await.unwrap());
    }
    assert!(
        raw_tls(&server, LOCALHOST, &["http/1.1"]).await.is_err(),
        "the 4th connection of the address is refused"
    );
    let other: IpAddr = [127, 0, 0, 2].into();
    let mut elsewhere = raw_tls(&server, other, &["http/1.1"]).await.unwrap();
    elsewhere.write_all(HEALTHZ).await.unwrap();
    assert!(
        read_response(&mut elsewhere)
            .await
            .starts_with("HTTP/1.1 200")
    );

    // The open ones are served.
    open[0].write_all(HEALTHZ).await.unwrap();
    assert!(
        read_response(&mut open[0])
            .await
            .starts_with("HTTP/1.1 200")
    );

    // One closes: once the server has seen it, the address has room again.
    let mut closing = open.pop().unwrap();
    closing.shutdown().await.unwrap();
    drop(closing);
    let running = &server;
    let mut again = eventually("a connection again after one closed", WAIT, || async move {
        raw_tls(running, LOCALHOST, &["http/1.1"]).await.ok()
    })
    .await;
    again.write_all(HEALTHZ).await.unwrap();
    assert!(read_response(&mut again).await.starts_with("HTTP/1.1 200"));
    server.stop().await;
}

both_engines!(
    half_a_header_is_closed_after_the_header_timeout,
    an_idle_keep_alive_connection_is_closed_after_the_idle_timeout,
    silent_connections_are_closed,
    connections_per_address_are_capped,
);
