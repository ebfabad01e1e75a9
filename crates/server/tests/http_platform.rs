//! The HTTP platform against the real server on port 0 over TLS, on both
//! engines: health, readiness (also when the database is gone), problem+json for
//! unknown routes and methods, the local CA kept across restarts, and a graceful
//! shutdown.

#![allow(clippy::unwrap_used)] // test bodies are plain fns called by the generated #[test]s

use bothy_testkit as support;

use bothy_server::db::Engine;
use support::both_engines;
use support::server::TestServer;

const PROBLEM_JSON: &str = "application/problem+json";

/// Issue 15 (item 17): `server.tls: off` beyond a loopback address is refused
/// at start with the reason, before anything is created or connected, unless
/// the operator acknowledges it with `server.tls_off_beyond_loopback`.
#[tokio::test]
async fn plain_http_beyond_loopback_is_refused_at_start() {
    for listen in [
        "0.0.0.0:8443",
        "[::]:0",
        "192.0.2.7:80",
        "[2001:db8::1]:8080",
    ] {
        let dir = tempfile::tempdir().unwrap();
        let yaml = format!(
            "server: {{data_dir: '{}', tls: off, listen: '{listen}'}}\n\
             database: {{url: 'postgres://bothy@127.0.0.1:1/none'}}\n",
            dir.path().join("data").display()
        );
        let config = bothy_server::config::Config::from_yaml_str(&yaml).unwrap();
        let error = bothy_server::app::App::open(config, system_clock())
            .await
            .unwrap_err();
        assert!(
            matches!(
                error,
                bothy_server::app::StartError::TlsOffBeyondLoopback { .. }
            ),
            "{listen}: {error}"
        );
        let text = error.to_string();
        for part in [
            "server.tls",
            "loopback",
            "in clear",
            "server.tls_off_beyond_loopback: true",
        ] {
            assert!(text.contains(part), "{part} not in {text}");
        }
        assert!(!dir.path().join("data").exists(), "nothing was created");
    }
}

/// The loopback addresses need no acknowledgement; beyond loopback the
/// acknowledgement lets the server start, and it serves plain HTTP.
async fn plain_http_on_loopback_or_acknowledged(engine: Engine) {
    for (listen, acknowledged) in [
        ("127.0.0.1:0", false),
        ("[::1]:0", false),
        ("127.0.0.2:0", false),
        ("0.0.0.0:0", true),
    ] {
        let db = support::TestDb::new(engine).await;
        let dir = tempfile::tempdir().unwrap();
        let yaml = format!(
            "server: {{data_dir: '{}', tls: off, listen: '{listen}', \
             tls_off_beyond_loopback: {acknowledged}}}\n\
             database: {{url: '{}'}}\n",
            dir.path().display(),
            db.url()
        );
        let config = bothy_server::config::Config::from_yaml_str(&yaml).unwrap();
        let app = bothy_server::app::App::open(config, system_clock())
            .await
            .unwrap_or_else(|e| panic!("{listen}: {e}"));
        assert!(!app.is_tls());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(app.serve(listener, async {
            let _ = stopped.await;
        }));
        let health = support::server::plain_http_client()
            .get(format!("http://127.0.0.1:{port}/healthz"))
            .send()
            .await
            .unwrap();
        assert_eq!(health.status(), 200);
        stop.send(()).unwrap();
        task.await.unwrap().unwrap();
    }
}

fn system_clock() -> bothy_server::clock::SharedClock {
    std::sync::Arc::new(bothy_server::clock::SystemClock)
}

async fn health_and_readiness(engine: Engine) {
    let server = TestServer::start(engine).await;
    let health = server
        .client
        .get(server.url("/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    assert_eq!(
        health.json::<serde_json::Value>().await.unwrap()["status"],
        "ok"
    );
    let ready = server
        .client
        .get(server.url("/readyz"))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status(), 200);

    // The database goes away: ready no longer, healthy still.
    server.state.db().close().await;
    let ready = server
        .client
        .get(server.url("/readyz"))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status(), 503);
    assert_eq!(ready.headers()["content-type"], PROBLEM_JSON);
    let body: serde_json::Value = ready.json().await.unwrap();
    assert_eq!(body["code"], "unavailable");
    assert_eq!(body["status"], 503);
    let health = server
        .client
        .get(server.url("/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    server.stop().await;
}

async fn unknown_routes_and_methods_are_problems(engine: Engine) {
    let server = TestServer::start(engine).await;
    let missing = server
        .client
        .get(server.url("/api/v1/nothing"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    assert_eq!(missing.headers()["content-type"], PROBLEM_JSON);
    let body: serde_json::Value = missing.json().await.unwrap();
    assert_eq!(body["code"], "not_found");

    let wrong = server
        .client
        .delete(server.url("/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 405);
    let body: serde_json::Value = wrong.json().await.unwrap();
    assert_eq!(body["code"], "method_not_allowed");
    server.stop().await;
}

async fn restart_keeps_the_ca_and_stops_gracefully(engine: Engine) {
    let server = TestServer::start(engine).await;
    let ca_path = server.data_dir().join("tls/ca.pem");
    let ca = std::fs::read(&ca_path).unwrap();
    let base = server.base.clone();
    let client = server.client.clone();
    let (db, data_dir) = server.stop().await;
    // Stopped: nothing listens any more.
    assert!(client.get(format!("{base}/healthz")).send().await.is_err());

    let again = TestServer::start_on(db, data_dir).await;
    assert_eq!(
        std::fs::read(&ca_path).unwrap(),
        ca,
        "the CA survives a restart"
    );
    // A client that trusted the CA before trusts the new server certificate too.
    let health = support::server::client_trusting(&ca_path)
        .get(again.url("/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    again.stop().await;
}

both_engines!(
    plain_http_on_loopback_or_acknowledged,
    health_and_readiness,
    unknown_routes_and_methods_are_problems,
    restart_keeps_the_ca_and_stops_gracefully,
);
