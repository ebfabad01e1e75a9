//! `/metrics` against the real server on port 0 over TLS, on both engines
//! (DESIGN §3 "Observability"; spec 24 section 10.4): the Prometheus text
//! format parses, the counters move with requests and event deliveries, and a
//! canary — a username, its token, IDs, a path and a query — used in requests
//! never reaches the metrics.

#![allow(clippy::unwrap_used)] // test bodies are plain fns called by the generated #[test]s

use bothy_testkit as support;
use bothy_testkit::identity as identity_common;

use std::collections::BTreeMap;
use std::sync::Arc;

use bothy_server::clock::Clock;
use bothy_server::db::Engine;
use bothy_server::events::{Audience, DurableEvent, EventKind};
use bothy_server::metrics::TlsHandshakeKind;
use identity_common::*;
use rustls::pki_types::ServerName;
use serde_json::{Value, json};
use support::both_engines;
use support::server::TestServer;
use support::ws;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use uuid::Uuid;

/// One scrape: `name{labels}` → value, and the declared type of each family.
#[derive(Debug, Default)]
struct Scrape {
    samples: BTreeMap<String, f64>,
    types: BTreeMap<String, String>,
    text: String,
}

impl Scrape {
    fn value(&self, series: &str) -> f64 {
        *self
            .samples
            .get(series)
            .unwrap_or_else(|| panic!("no series {series} in\n{}", self.text))
    }
}

fn is_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// Parses the text format (version 0.0.4) strictly enough to catch a broken
/// exposition: HELP/TYPE lines, names, label sets, values.
fn parse(text: &str) -> Scrape {
    let mut scrape = Scrape {
        text: text.to_owned(),
        ..Scrape::default()
    };
    for line in text.lines() {
        if line.is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap();
            assert!(is_name(name), "{line}");
            assert!(!help.is_empty(), "{line}");
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            assert!(is_name(name), "{line}");
            assert!(
                ["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind),
                "{line}"
            );
            scrape.types.insert(name.to_owned(), kind.to_owned());
            continue;
        }
        assert!(!line.starts_with('#'), "unknown comment: {line}");
        let (series, value) = line.rsplit_once(' ').unwrap();
        let name = series.split('{').next().unwrap();
        assert!(is_name(name), "{line}");
        if let Some(labels) = series.strip_prefix(name) {
            if !labels.is_empty() {
                let inner = labels
                    .strip_prefix('{')
                    .and_then(|l| l.strip_suffix('}'))
                    .unwrap_or_else(|| panic!("label set: {line}"));
                for pair in inner.split(',') {
                    let (key, quoted) = pair.split_once('=').unwrap();
                    assert!(is_name(key), "{line}");
                    assert!(
                        quoted.len() >= 2 && quoted.starts_with('"') && quoted.ends_with('"'),
                        "{line}"
                    );
                }
            }
        }
        assert!(
            scrape.types.contains_key(name),
            "a sample before its TYPE: {line}"
        );
        let value: f64 = value.parse().unwrap_or_else(|_| panic!("value: {line}"));
        assert!(
            scrape.samples.insert(series.to_owned(), value).is_none(),
            "duplicate series: {line}"
        );
    }
    scrape
}

async fn scrape(server: &TestServer) -> Scrape {
    let response = server
        .client
        .get(server.url("/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-type"],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    parse(&response.text().await.unwrap())
}

fn requests(group: &str, class: &str) -> String {
    format!("bothy_http_requests_total{{route_group=\"{group}\",status_class=\"{class}\"}}")
}

async fn the_text_format_parses_and_counters_move(engine: Engine) {
    let server = TestServer::start(engine).await;
    let before = scrape(&server).await;
    for (family, kind) in [
        ("bothy_http_requests_total", "counter"),
        ("bothy_events_sockets", "gauge"),
        ("bothy_events_delivered_total", "counter"),
        ("bothy_events_dropped_slow_total", "counter"),
        ("bothy_tls_handshakes_total", "counter"),
    ] {
        assert_eq!(
            before.types.get(family).map(String::as_str),
            Some(kind),
            "{family}"
        );
    }
    // Every series exists from the start: 4 route groups × 5 status classes.
    let http_series = before
        .samples
        .keys()
        .filter(|k| k.starts_with("bothy_http_requests_total{"))
        .count();
    assert_eq!(http_series, 20);
    assert_eq!(before.value("bothy_events_sockets"), 0.0);

    // Requests of each group.
    for path in ["/healthz", "/readyz", "/healthz"] {
        let reply = get(&server, path, None).await;
        assert_eq!(reply.status, 200);
    }
    let reply = get(&server, "/api/v1/auth/session", None).await;
    assert_eq!(reply.status, 401);
    let reply = get(&server, "/nowhere", None).await;
    assert_eq!(reply.status, 404);

    let after = scrape(&server).await;
    let moved = |series: String| after.value(&series) - before.value(&series);
    assert_eq!(moved(requests("health", "2xx")), 3.0);
    assert_eq!(moved(requests("api", "4xx")), 1.0);
    assert_eq!(moved(requests("other", "4xx")), 1.0);
    // A scrape is counted once it is answered: the first one shows here.
    assert_eq!(moved(requests("metrics", "2xx")), 1.0);
    assert_eq!(moved(requests("api", "2xx")), 0.0);

    // An event socket: the upgrade (1xx), the gauge, deliveries.
    let alice = owner(&server, "alice").await;
    let token = alice.login(&server, 1).await.token;
    let mut socket = ws::open(&server, "/api/v1/events", &token).await;
    assert_eq!(ws::next_json(&mut socket).await["op"], "ready");
    let person = bothy_proto::ids::parse_uuid(&alice.person_id).unwrap();
    for n in 0..2 {
        let mut uow = server
            .state
            .db()
            .begin(server.clock.now_ms())
            .await
            .unwrap();
        uow.event(DurableEvent::new(
            EventKind::TerminalSessionChanged,
            Audience::Person(person),
            serde_json::from_value(json!({"n": n})).unwrap(),
        ));
        uow.commit().await.unwrap();
        assert_eq!(ws::next_json(&mut socket).await["d"]["payload"]["n"], n);
    }
    let live = scrape(&server).await;
    assert_eq!(live.value("bothy_events_sockets"), 1.0);
    assert_eq!(live.value(&requests("api", "1xx")), 1.0);
    // The first message is counted before the second one is written.
    assert!(live.value("bothy_events_delivered_total") >= 1.0);

    drop(socket);
    server.stop().await;
}

async fn no_canary_reaches_the_metrics(engine: Engine) {
    let server = TestServer::start(engine).await;
    let canary = "canaryzq7";
    let alice = owner(&server, canary).await;
    let session = alice.login(&server, 1).await;
    let host = Uuid::from_u128(0x00c0_ffee);

    // The canary in a username, a token, IDs, a path, a query and a header.
    let whoami = get(&server, "/api/v1/auth/session", Some(&session.token)).await;
    assert_eq!(whoami.status, 200);
    let paths = [
        format!("/api/v1/{canary}/hosts/{host}"),
        format!("/api/v1/persons?{canary}=1"),
        format!("/{canary}"),
        format!("/api/v1/terminal/sessions/{}", session.login_session_id),
    ];
    for path in &paths {
        let reply = get(&server, path, Some(&session.token)).await;
        assert!(
            reply.status.is_client_error() || reply.status.is_success(),
            "{path}"
        );
    }
    let bogus = format!("bothy_at_{canary}");
    let reply = get(&server, "/api/v1/auth/session", Some(&bogus)).await;
    assert_eq!(reply.status, 401);
    let refused = ws::connect(
        &server,
        &format!("/api/v1/events?{canary}=1"),
        Some(&session.token),
    )
    .await
    .unwrap_err();
    assert_eq!(refused.status, 400);

    let text = scrape(&server).await.text;
    for secret in [
        canary,
        session.token.as_str(),
        session.login_session_id.as_str(),
        session.device_id.as_str(),
        alice.person_id.as_str(),
        &host.to_string(),
        "c0ffee",
    ] {
        assert!(!text.contains(secret), "{secret} in\n{text}");
    }
    // Only the fixed label values appear.
    let labels: Vec<Value> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once('{').map(|(_, rest)| Value::from(rest)))
        .collect();
    for label in labels {
        let label = label.as_str().unwrap();
        assert!(
            ["api", "health", "metrics", "other"]
                .iter()
                .any(|g| label.starts_with(&format!("route_group=\"{g}\"")))
                // bothy_terminal_relay_unpaired_total (section 9).
                || ["client", "host"]
                    .iter()
                    .any(|s| label.starts_with(&format!("side=\"{s}\"}}")))
                // bothy_tls_handshakes_total.
                || ["full", "resumed"]
                    .iter()
                    .any(|k| label.starts_with(&format!("kind=\"{k}\"}}"))),
            "{label}"
        );
    }
    server.stop().await;
}

/// One TLS connection with `config`: a request, its whole answer read (the
/// session tickets of TLS 1.3 come after the handshake, so a client stores
/// one only once it reads), then the end. How the handshake went, as the
/// client saw it.
async fn request_over_tls(
    server: &TestServer,
    config: &Arc<rustls::ClientConfig>,
) -> rustls::HandshakeKind {
    let tcp = TcpStream::connect(("127.0.0.1", server.port))
        .await
        .unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    let mut tls = TlsConnector::from(Arc::clone(config))
        .connect(name, tcp)
        .await
        .unwrap();
    let kind = tls.get_ref().1.handshake_kind().unwrap();
    tls.write_all(b"GET /healthz HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    tls.read_to_end(&mut answer).await.unwrap();
    assert!(answer.starts_with(b"HTTP/1.1 200"), "{answer:?}");
    kind
}

/// `bothy_tls_handshakes_total`: a client that keeps its session resumes it
/// on its next connection (the server keeps sessions by default; the host
/// service reconnects so, issue 20) and is counted `resumed`; a client
/// without a stored session is counted `full`.
#[tokio::test]
async fn tls_handshakes_are_counted_full_or_resumed() {
    let server = TestServer::start(Engine::Sqlite).await;
    let handshakes = server.state.metrics().tls_handshakes();
    let (full, resumed) = (
        handshakes.get(TlsHandshakeKind::Full),
        handshakes.get(TlsHandshakeKind::Resumed),
    );
    let mut keeping = ws::client_tls_config(&server.ca_file);
    keeping.resumption = rustls::client::Resumption::default();
    let keeping = Arc::new(keeping);
    assert_eq!(
        request_over_tls(&server, &keeping).await,
        rustls::HandshakeKind::Full
    );
    assert_eq!(
        request_over_tls(&server, &keeping).await,
        rustls::HandshakeKind::Resumed
    );
    // The test's own clients never resume (ws::client_tls_config).
    let fresh = Arc::new(ws::client_tls_config(&server.ca_file));
    assert_eq!(
        request_over_tls(&server, &fresh).await,
        rustls::HandshakeKind::Full
    );
    assert_eq!(
        request_over_tls(&server, &fresh).await,
        rustls::HandshakeKind::Full
    );
    assert_eq!(handshakes.get(TlsHandshakeKind::Resumed), resumed + 1);
    assert_eq!(handshakes.get(TlsHandshakeKind::Full), full + 3);
    let scraped = scrape(&server).await;
    assert_eq!(scraped.types["bothy_tls_handshakes_total"], "counter");
    assert!(scraped.value("bothy_tls_handshakes_total{kind=\"resumed\"}") >= (resumed + 1) as f64);
    assert!(scraped.value("bothy_tls_handshakes_total{kind=\"full\"}") >= (full + 3) as f64);
    server.stop().await;
}

both_engines!(
    the_text_format_parses_and_counters_move,
    no_canary_reaches_the_metrics,
);
