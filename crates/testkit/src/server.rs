//! A real `bothy-server` in the test process: [`TestServer::start`] opens the
//! configured database of one engine (a [`TestDb`]), a temporary data directory
//! with the server's own local CA (`server.tls: auto`), and serves on
//! 127.0.0.1 port 0 with a [`ManualClock`]. The client trusts exactly that CA —
//! there is no way to skip verification, in tests either. Dropping the value
//! shuts the server down; [`TestServer::stop`] waits for it.
//! [`TestServer::start_with`] adds configuration (YAML sections other than
//! `database`, e.g. a tiny `sync.outbound_queue_max`; the members of a
//! `server:` section join the test server's own).
//!
//! The job terminal.sweep runs its passes on the server's clock
//! (docs/decisions.md D-88). Unless a test sets `terminal.sweep_interval`
//! itself, a test server runs it with the longest interval there is, so the
//! clock moves of a test (a TOTP step is 30 s) never let a pass end sessions
//! behind the test's back; the tests of the sweep call it or set it.

use std::sync::Arc;

use bothy_server::app::{App, StartError};
use bothy_server::clock::ManualClock;
use bothy_server::config::Config;
use bothy_server::db::Engine;
use bothy_server::state::AppState;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::TestDb;

/// 2026-12-01T00:00:00Z, where the manual clock of a test server starts.
pub const TEST_START_MS: i64 = 1_796_083_200_000;

/// A running server.
#[derive(Debug)]
pub struct TestServer {
    /// `https://localhost:<port>`.
    pub base: String,
    /// A client that trusts the server's CA.
    pub client: reqwest::Client,
    /// The server's clock.
    pub clock: Arc<ManualClock>,
    /// The server's state (database, configuration).
    pub state: AppState,
    /// The CA file the clients trust (for other clients, e.g. WebSockets).
    pub ca_file: std::path::PathBuf,
    /// The port on 127.0.0.1.
    pub port: u16,
    db: Option<TestDb>,
    data_dir: Option<tempfile::TempDir>,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), StartError>>>,
    /// The configuration it started with (for [`TestServer::restart`]).
    yaml: String,
}

impl TestServer {
    /// Starts a server on a fresh database of `engine`.
    pub async fn start(engine: Engine) -> TestServer {
        TestServer::start_with(engine, "").await
    }

    /// Starts a server on a fresh database of `engine`, with `extra_yaml`
    /// (whole top-level sections other than `database`; a `server:` section adds its members to the test server's own) added to
    /// its configuration.
    pub async fn start_with(engine: Engine, extra_yaml: &str) -> TestServer {
        let db = TestDb::fresh(engine).await;
        let data_dir = tempfile::tempdir().expect("temporary data directory");
        TestServer::start_on_with(db, data_dir, extra_yaml).await
    }

    /// Starts a server on a fresh database of `engine` whose manual clock
    /// starts at `start_ms` (the host service's scenario tests start it at the
    /// real time, because the host checks tokens against its own clock).
    pub async fn start_at(engine: Engine, extra_yaml: &str, start_ms: i64) -> TestServer {
        TestServer::start_at_port(engine, extra_yaml, start_ms, 0).await
    }

    /// [`TestServer::start_at`] on `127.0.0.1:port` (0: a free port). A
    /// benchmark serves on 443, the port of the `public_url`
    /// `https://localhost`, so a browser reaches the server without a
    /// forwarder of the benchmark's own in between.
    pub async fn start_at_port(
        engine: Engine,
        extra_yaml: &str,
        start_ms: i64,
        port: u16,
    ) -> TestServer {
        let db = TestDb::fresh(engine).await;
        let data_dir = tempfile::tempdir().expect("temporary data directory");
        TestServer::start_on_at_port(db, data_dir, extra_yaml, start_ms, port).await
    }

    /// Starts a server on an existing database and data directory (a restart).
    pub async fn start_on(db: TestDb, data_dir: tempfile::TempDir) -> TestServer {
        TestServer::start_on_with(db, data_dir, "").await
    }

    /// [`TestServer::start_on`] with `extra_yaml` as for [`TestServer::start_with`].
    pub async fn start_on_with(
        db: TestDb,
        data_dir: tempfile::TempDir,
        extra_yaml: &str,
    ) -> TestServer {
        TestServer::start_on_at(db, data_dir, extra_yaml, TEST_START_MS).await
    }

    /// [`TestServer::start_on_with`] with the clock starting at `start_ms`.
    pub async fn start_on_at(
        db: TestDb,
        data_dir: tempfile::TempDir,
        extra_yaml: &str,
        start_ms: i64,
    ) -> TestServer {
        TestServer::start_on_at_port(db, data_dir, extra_yaml, start_ms, 0).await
    }

    /// [`TestServer::start_on_at`] on `127.0.0.1:port` (0: a free port).
    async fn start_on_at_port(
        db: TestDb,
        data_dir: tempfile::TempDir,
        extra_yaml: &str,
        start_ms: i64,
        port: u16,
    ) -> TestServer {
        let (server_keys, extra_yaml) = split_server_section(extra_yaml);
        let extra_yaml = with_quiet_sweep(&extra_yaml);
        let yaml = format!(
            "server:\n  listen: 127.0.0.1:0\n  public_url: https://localhost\n  data_dir: \"{}\"\n{server_keys}database:\n  url: \"{}\"\n{extra_yaml}",
            data_dir.path().display(),
            db.url()
        );
        let clock = ManualClock::new(start_ms);
        let listener = TcpListener::bind(("127.0.0.1", port))
            .await
            .unwrap_or_else(|e| panic!("bind 127.0.0.1:{port}: {e}"));
        let (app, task, shutdown) = serve(&yaml, clock.clone(), listener).await;
        let ca_file = app.0;
        let port = app.2;
        TestServer {
            base: format!("https://localhost:{port}"),
            client: client_trusting(&ca_file),
            clock,
            state: app.1,
            ca_file,
            port,
            db: Some(db),
            data_dir: Some(data_dir),
            shutdown: Some(shutdown),
            task: Some(task),
            yaml,
        }
    }

    /// A restart of the server in place: shuts it down as SIGTERM does (the
    /// streams get 4013 `server_shutdown`), waits until it has stopped, and
    /// starts it again on the same port, database, data directory, clock and
    /// configuration. Clients and the host service see the same address.
    pub async fn restart(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(task) = self.task.take() {
            task.await
                .expect("server task does not panic")
                .expect("server stops cleanly");
        }
        let listener = TcpListener::bind(("127.0.0.1", self.port))
            .await
            .expect("the same port again");
        let (app, task, shutdown) = serve(&self.yaml, self.clock.clone(), listener).await;
        self.state = app.1;
        self.task = Some(task);
        self.shutdown = Some(shutdown);
    }

    /// A client like [`TestServer::client`] whose connections come from
    /// `address` (another loopback address such as 127.0.0.2: another client
    /// address for the server's per-address limits).
    pub fn client_from(&self, address: std::net::IpAddr) -> reqwest::Client {
        client_builder_trusting(&self.ca_file)
            .local_address(address)
            .build()
            .expect("client")
    }

    /// The database (alive as long as the server).
    pub fn db(&self) -> &TestDb {
        self.db.as_ref().expect("present until stop")
    }

    /// The data directory.
    pub fn data_dir(&self) -> &std::path::Path {
        self.data_dir.as_ref().expect("present until stop").path()
    }

    /// The URL of a path.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Shuts the server down and waits until it has stopped; returns the
    /// database and data directory for a restart.
    pub async fn stop(mut self) -> (TestDb, tempfile::TempDir) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(task) = self.task.take() {
            task.await
                .expect("server task does not panic")
                .expect("server stops cleanly");
        }
        let db = self.db.take().expect("present until stop");
        let data_dir = self.data_dir.take().expect("present until stop");
        (db, data_dir)
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
    }
}

type Served = (
    (std::path::PathBuf, AppState, u16),
    JoinHandle<Result<(), StartError>>,
    oneshot::Sender<()>,
);

/// Opens the app of `yaml` on `clock` and serves it on `listener`: (its CA
/// file, state and port), the task, and the shutdown trigger.
async fn serve(yaml: &str, clock: Arc<ManualClock>, listener: TcpListener) -> Served {
    let config = Config::from_yaml_str(yaml).expect("test configuration");
    let app = App::open(config, clock).await.expect("server opens");
    let ca_file = app.ca_file().expect("tls auto has a CA").to_path_buf();
    let state = app.state().clone();
    let port = listener.local_addr().expect("local address").port();
    let (shutdown, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(app.serve(listener, async {
        let _ = stopped.await;
    }));
    ((ca_file, state, port), task, shutdown)
}

/// The member lines of a top-level `server:` section of `extra_yaml` (keys
/// such as `server.idle_timeout`, added to the test server's own), and the
/// rest of `extra_yaml`.
fn split_server_section(extra_yaml: &str) -> (String, String) {
    let mut server = String::new();
    let mut rest = String::new();
    let mut inside = false;
    for line in extra_yaml.split_inclusive('\n') {
        if line.trim_end() == "server:" {
            inside = true;
            continue;
        }
        if inside && !line.starts_with(' ') {
            inside = false;
        }
        if inside {
            server.push_str(line);
            if !line.ends_with('\n') {
                server.push('\n');
            }
        } else {
            rest.push_str(line);
        }
    }
    (server, rest)
}

/// `extra_yaml` with `terminal.sweep_interval: 365d` unless it names the key.
fn with_quiet_sweep(extra_yaml: &str) -> String {
    const QUIET: &str = "  sweep_interval: 365d\n";
    if extra_yaml.contains("sweep_interval:") {
        return extra_yaml.to_owned();
    }
    let mut out = String::new();
    let mut placed = false;
    for line in extra_yaml.split_inclusive('\n') {
        out.push_str(line);
        if line.trim_end() == "terminal:" {
            out.push_str(QUIET);
            placed = true;
        }
    }
    if !placed {
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        out.push_str("terminal:\n");
        out.push_str(QUIET);
    }
    out
}

/// A reqwest client whose only trust anchor is the CA in `ca_file`.
pub fn client_trusting(ca_file: &std::path::Path) -> reqwest::Client {
    client_builder_trusting(ca_file).build().expect("client")
}

/// [`client_trusting`] as a builder, for more options (a local address).
pub fn client_builder_trusting(ca_file: &std::path::Path) -> reqwest::ClientBuilder {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca_file).expect("CA file") {
        roots
            .add(cert.expect("CA certificate"))
            .expect("CA accepted");
    }
    builder_with_roots(roots)
}

/// A client for plain HTTP (`server.tls: off`); it trusts no certificate.
pub fn plain_http_client() -> reqwest::Client {
    builder_with_roots(rustls::RootCertStore::empty())
        .build()
        .expect("client")
}

fn builder_with_roots(roots: rustls::RootCertStore) -> reqwest::ClientBuilder {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    // As the test's WebSocket clients (`ws::client_tls_config`): a resumed
    // handshake in a scenario is the host service's.
    tls.resumption = rustls::client::Resumption::disabled();
    reqwest::Client::builder().tls_backend_preconfigured(tls)
}
