//! bothy-bench: reproducible benchmarks of bothy terminal (DESIGN §6). Each
//! bench target prints one figure per line, `name: value unit`.
//!
//! # Layout
//! - this file: the pieces the targets share —
//!   - [`BenchServer`]: the real `bothy-server` in the process, on 127.0.0.1
//!     port 0 with TLS (`server.tls: auto`, its own local CA) and SQLite in a
//!     temporary data directory, on a manual clock (as the tests'
//!     `TestServer`; no deadline moves while a benchmark runs);
//!   - [`Account`]: a person logged in on a device and an active host with the
//!     person's session user, made through the real API (bootstrap, enroll,
//!     login with TOTP, createHost, host.pair, confirmHost);
//!   - session rows in state `active` ([`BenchServer::insert_sessions`]), the
//!     way the relay tests make them: the relay does not care how a row came
//!     to be;
//!   - the two sides of the relay as WebSocket clients ([`Clients`]): the
//!     device stream (`identify` with the access token) and the host's data
//!     connection (`hello`, `identify` with the host proof);
//!   - [`direct_pair`]: the same client stack connected directly, without the
//!     relay (TLS WebSocket with a certificate of its own), for the baseline.
//! - `benches/relay.rs`: relay throughput and latency side by side with the
//!   direct connection, and the memory of idle paired sessions.

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use bothy_proto::control::Identify;
use bothy_proto::data::{self, HostMessage};
use bothy_proto::jws::{Ed25519SigningKey, HostAuthClaims};
use bothy_proto::stream::{self, DeviceMessage};
use bothy_server::app::App;
use bothy_server::clock::{Clock, ManualClock, SystemClock};
use bothy_server::config::Config;
use bothy_server::state::AppState;
use futures_util::{SinkExt, StreamExt};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio_rustls::{TlsAcceptor, TlsConnector};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::{WebSocketStream, client_async};
use uuid::Uuid;

/// The password of the benchmark's person.
pub const PASSWORD: &str = "correct horse battery staple";

/// The session user of the benchmark's person on its host.
const OS_USER: &str = "bench";

/// The seed of the host's login key (Ed25519).
pub const HOST_AUTH_SEED: [u8; 32] = [0x5a; 32];

/// A client WebSocket over TLS (the relay's sides).
pub type ClientWs = WebSocketStream<tokio_rustls::client::TlsStream<TcpStream>>;

/// A server-side WebSocket over TLS (the direct baseline's receiving end).
pub type ServerWs = WebSocketStream<tokio_rustls::server::TlsStream<TcpStream>>;

/// The real server, in this process.
pub struct BenchServer {
    /// Its state (database, relay).
    pub state: AppState,
    /// Its clock (moved only for the TOTP steps of the setup).
    pub clock: Arc<ManualClock>,
    /// The port on 127.0.0.1.
    pub port: u16,
    /// The CA the clients trust.
    pub ca_file: PathBuf,
    client: reqwest::Client,
    shutdown: Option<oneshot::Sender<()>>,
    _data_dir: tempfile::TempDir,
}

impl std::fmt::Debug for BenchServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BenchServer")
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

impl BenchServer {
    /// Starts the server with `extra_yaml` (whole top-level sections other
    /// than `server`) added to its configuration.
    pub async fn start(extra_yaml: &str) -> anyhow::Result<BenchServer> {
        BenchServer::start_with_server_keys("", extra_yaml).await
    }

    /// [`BenchServer::start`] with `server_keys` (indented member lines such
    /// as `"  max_connections_per_address: 1000\n"`) added to `server`.
    pub async fn start_with_server_keys(
        server_keys: &str,
        extra_yaml: &str,
    ) -> anyhow::Result<BenchServer> {
        let data_dir = tempfile::tempdir().context("temporary data directory")?;
        let yaml = format!(
            "server:\n  listen: 127.0.0.1:0\n  public_url: https://localhost\n  data_dir: \"{}\"\n{server_keys}{extra_yaml}",
            data_dir.path().display()
        );
        let config = Config::from_yaml_str(&yaml).map_err(|e| anyhow!("configuration: {e}"))?;
        let clock = ManualClock::new(SystemClock.now_ms());
        let app = App::open(config, clock.clone())
            .await
            .map_err(|e| anyhow!("the server does not open: {e}"))?;
        let ca_file = app
            .ca_file()
            .ok_or_else(|| anyhow!("tls auto has a CA"))?
            .to_path_buf();
        let state = app.state().clone();
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let (shutdown, stopped) = oneshot::channel::<()>();
        tokio::spawn(app.serve(listener, async {
            let _ = stopped.await;
        }));
        Ok(BenchServer {
            state,
            clock,
            port,
            client: https_client(&ca_file)?,
            ca_file,
            shutdown: Some(shutdown),
            _data_dir: data_dir,
        })
    }

    fn url(&self, path: &str) -> String {
        format!("https://localhost:{}{path}", self.port)
    }

    /// `POST path` with a JSON body; an error unless the answer is a success.
    pub async fn post(
        &self,
        path: &str,
        token: Option<&str>,
        body: Value,
    ) -> anyhow::Result<Value> {
        let mut request = self.client.post(self.url(path)).json(&body);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await?;
        let status = response.status();
        let text = response.text().await?;
        if !status.is_success() {
            bail!("POST {path}: {status} {text}");
        }
        Ok(serde_json::from_str(&text)?)
    }

    /// Inserts `count` sessions of `account` in state `active`; their IDs.
    pub async fn insert_sessions(
        &self,
        account: &Account,
        count: usize,
    ) -> anyhow::Result<Vec<Uuid>> {
        let now = self.clock.now_ms();
        let mut ids = Vec::with_capacity(count);
        // One transaction: 10,000 rows are one commit, not 10,000.
        let mut transaction = self.state.db().pool().begin().await?;
        for _ in 0..count {
            let id = bothy_proto::ids::uuid_v7(u64::try_from(now)?)?;
            sqlx::query(
                "INSERT INTO terminal_sessions (id, host_id, person_id, login_session_id, \
                     device_id, host_session_user_id, profile, state, created_at, started_at, \
                     version) \
                 VALUES ($1, $2, $3, $4, $5, $6, 'shell', 'active', $7, $7, 1)",
            )
            .bind(id.hyphenated().to_string())
            .bind(account.host_id.hyphenated().to_string())
            .bind(&account.person_id)
            .bind(&account.login_session_id)
            .bind(&account.device_id)
            .bind(&account.session_user_id)
            .bind(now)
            .execute(&mut *transaction)
            .await?;
            ids.push(id);
        }
        transaction.commit().await?;
        Ok(ids)
    }

    /// Waits until the relay has paired both sides of every session of `ids`.
    pub async fn wait_paired(&self, ids: &[Uuid]) -> anyhow::Result<()> {
        tokio::time::timeout(Duration::from_secs(300), async {
            loop {
                let relay = self.state.relay();
                if ids.iter().all(|id| {
                    let sides = relay.sides(*id);
                    sides.device && sides.host
                }) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .map_err(|_| anyhow!("the relay did not pair every session"))
    }

    /// Waits until the relay holds no side of any session of `ids`.
    pub async fn wait_unpaired(&self, ids: &[Uuid]) -> anyhow::Result<()> {
        tokio::time::timeout(Duration::from_secs(300), async {
            loop {
                let relay = self.state.relay();
                if ids.iter().all(|id| {
                    let sides = relay.sides(*id);
                    !sides.device && !sides.host
                }) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .map_err(|_| anyhow!("the relay still holds sides of the sessions"))
    }

    /// Waits until no session is `active` in the database any more: the
    /// relay writes the detach of every session whose sides left in tasks of
    /// its own, and a run measured while thousands of them still commit
    /// would share the machine with them.
    pub async fn wait_settled(&self) -> anyhow::Result<()> {
        tokio::time::timeout(Duration::from_secs(300), async {
            loop {
                let active: i64 = sqlx::query_scalar(
                    "SELECT COUNT(*) FROM terminal_sessions WHERE state = 'active'",
                )
                .fetch_one(self.state.db().pool())
                .await?;
                if active == 0 {
                    return Ok::<(), anyhow::Error>(());
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await
        .map_err(|_| anyhow!("sessions were still active in the database"))?
    }

    /// The TOTP code of the next 30 s step (the clock moves there).
    fn fresh_code(&self, totp: &totp_rs::TOTP) -> anyhow::Result<String> {
        self.clock.advance(Duration::from_secs(30));
        let seconds = u64::try_from(self.clock.now_ms() / 1000)?;
        Ok(totp.generate(seconds))
    }
}

impl Drop for BenchServer {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
    }
}

/// A reqwest client whose only trust anchor is the CA in `ca_file`.
pub fn https_client(ca_file: &Path) -> anyhow::Result<reqwest::Client> {
    let config = tls_client_config(&roots(ca_file)?)?;
    Ok(reqwest::Client::builder()
        .tls_backend_preconfigured((*config).clone())
        .build()?)
}

fn roots(ca_file: &Path) -> anyhow::Result<rustls::RootCertStore> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca_file)? {
        roots.add(cert?)?;
    }
    Ok(roots)
}

fn tls_client_config(roots: &rustls::RootCertStore) -> anyhow::Result<Arc<rustls::ClientConfig>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots.clone())
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// A person on a device and an active host with their session user.
#[derive(Debug, Clone)]
pub struct Account {
    /// The device's access token.
    pub token: String,
    /// The person.
    pub person_id: String,
    /// The login session.
    pub login_session_id: String,
    /// The device.
    pub device_id: String,
    /// The host.
    pub host_id: Uuid,
    /// The person's session user on the host (`host_session_users.id`).
    pub session_user_id: String,
}

impl Account {
    /// Makes the account through the real API (see the module docs).
    pub async fn create(server: &BenchServer) -> anyhow::Result<Account> {
        let state = &server.state;
        let owner = bothy_server::identity::admin::bootstrap(
            state.db(),
            state.pepper(),
            &state.config().auth,
            server.clock.now_ms(),
            "bench",
        )
        .await
        .map_err(|e| anyhow!("bootstrap: {e}"))?;
        let code = owner.issued.code.expose().to_owned();
        let started = server
            .post(
                "/api/v1/auth/enroll",
                None,
                json!({"code": code, "password": PASSWORD}),
            )
            .await?;
        let uri = started["otpauth_uri"].as_str().context("otpauth_uri")?;
        let totp = totp_rs::TOTP::from_url(uri).map_err(|e| anyhow!("otpauth URI: {e}"))?;
        let seconds = u64::try_from(server.clock.now_ms() / 1000)?;
        server
            .post(
                "/api/v1/auth/enroll/confirm",
                None,
                json!({"code": code, "totp": totp.generate(seconds)}),
            )
            .await?;
        let person_id = started["person_id"]
            .as_str()
            .context("person_id")?
            .to_owned();
        let device_key = Ed25519SigningKey::from_seed(&[1; 32]);
        let login = server
            .post(
                "/api/v1/auth/login",
                None,
                json!({
                    "username": "bench",
                    "password": PASSWORD,
                    "totp": server.fresh_code(&totp)?,
                    "device_public_key": bothy_proto::b64::encode(&device_key.public_jwk().raw()),
                    "device_name": "bench",
                }),
            )
            .await?;
        let token = login["access_token"]
            .as_str()
            .context("access_token")?
            .to_owned();
        let step_up_id = step_up(server, &totp, &token).await?;
        let created = server
            .post(
                "/api/v1/hosts",
                Some(&token),
                json!({"name": "bench host", "reason": "benchmark", "step_up_id": step_up_id}),
            )
            .await?;
        let host_id = created["host"]["id"]
            .as_str()
            .context("host.id")?
            .to_owned();
        let pairing_code = created["pairing_code"].as_str().context("pairing_code")?;
        let auth = Ed25519SigningKey::from_seed(&HOST_AUTH_SEED);
        let noise = Ed25519SigningKey::from_seed(&[0x6b; 32])
            .verifying_key()
            .to_montgomery()
            .to_bytes();
        let paired = server
            .post(
                "/api/v1/hosts/pair",
                None,
                json!({
                    "code": pairing_code,
                    "noise_public_key": bothy_proto::b64::encode(&noise),
                    "auth_public_jwk": auth.public_jwk().to_value(),
                    "host_version": "1.0.0",
                    "platform": "linux",
                    "os_version": "bench",
                    "profiles": [{"name": "shell", "display_name": "Shell", "kind": "shell"}],
                    "session_users": [{"name": OS_USER, "workdirs": []}],
                    "require_local_confirm": false,
                    "is_server_host": false,
                }),
            )
            .await?;
        let prefix: String = paired["key_fingerprint"]
            .as_str()
            .context("key_fingerprint")?
            .replace('-', "")
            .chars()
            .take(8)
            .collect();
        let step_up_id = step_up(server, &totp, &token).await?;
        server
            .post(
                &format!("/api/v1/hosts/{host_id}/confirm"),
                Some(&token),
                json!({
                    "fingerprint_prefix": prefix,
                    "llm_credentials": "none",
                    "declared_server_host": false,
                    "session_users": [{"user_id": person_id, "os_user": OS_USER}],
                    "reason": "benchmark",
                    "step_up_id": step_up_id,
                }),
            )
            .await?;
        let session_user_id: String = sqlx::query_scalar(
            "SELECT id FROM host_session_users WHERE host_id = $1 AND person_id = $2 \
             AND ended_at IS NULL",
        )
        .bind(&host_id)
        .bind(&person_id)
        .fetch_one(state.db().pool())
        .await?;
        Ok(Account {
            token,
            person_id,
            login_session_id: login["login_session_id"]
                .as_str()
                .context("login_session_id")?
                .to_owned(),
            device_id: login["device_id"].as_str().context("device_id")?.to_owned(),
            host_id: bothy_proto::ids::parse_uuid(&host_id).map_err(|_| anyhow!("host ID"))?,
            session_user_id,
        })
    }
}

/// A TOTP step-up of the login session of `token`; its ID.
async fn step_up(
    server: &BenchServer,
    totp: &totp_rs::TOTP,
    token: &str,
) -> anyhow::Result<String> {
    let code = server.fresh_code(totp)?;
    let reply = server
        .post(
            "/api/v1/auth/step-up",
            Some(token),
            json!({"method": "totp", "code": code}),
        )
        .await?;
    Ok(reply["step_up_id"]
        .as_str()
        .context("step_up_id")?
        .to_owned())
}

/// What a client needs to reach the server's relay (also handed to a child
/// process as JSON).
#[derive(Debug, Clone)]
pub struct Clients {
    /// The server's port on 127.0.0.1.
    pub port: u16,
    /// The TLS client configuration trusting the server's CA.
    pub tls: Arc<rustls::ClientConfig>,
    /// The device's access token.
    pub token: String,
    /// The host.
    pub host_id: Uuid,
}

impl Clients {
    /// The clients of `server` for `account`.
    pub fn new(server: &BenchServer, account: &Account) -> anyhow::Result<Clients> {
        Clients::from_parts(
            server.port,
            &server.ca_file,
            &account.token,
            account.host_id,
        )
    }

    /// The clients of a server on `port` whose CA is `ca_file`.
    pub fn from_parts(
        port: u16,
        ca_file: &Path,
        token: &str,
        host_id: Uuid,
    ) -> anyhow::Result<Clients> {
        Ok(Clients {
            port,
            tls: tls_client_config(&roots(ca_file)?)?,
            token: token.to_owned(),
            host_id,
        })
    }

    async fn connect(&self, path: &str) -> anyhow::Result<ClientWs> {
        let tcp = TcpStream::connect(("127.0.0.1", self.port)).await?;
        tcp.set_nodelay(true)?;
        let tls = TlsConnector::from(Arc::clone(&self.tls))
            .connect(ServerName::try_from("localhost")?, tcp)
            .await?;
        let request = format!("wss://localhost:{}{path}", self.port).into_client_request()?;
        let (ws, _) = client_async(request, tls).await?;
        Ok(ws)
    }

    /// The device stream of `session_id`, past `ready`.
    pub async fn device(&self, session_id: Uuid) -> anyhow::Result<ClientWs> {
        let mut ws = self.connect(&stream::stream_path(&session_id)).await?;
        let identify = DeviceMessage::Identify(stream::Identify {
            access_token: Some(self.token.clone()),
        })
        .to_json();
        ws.send(Message::text(identify)).await?;
        match ws.next().await {
            Some(Ok(Message::Text(text))) if text.contains("\"ready\"") => Ok(ws),
            other => bail!("the device stream did not get ready: {other:?}"),
        }
    }

    /// The host's data connection of `session_id`, identified (the server
    /// answers nothing on success). `now_ms` is the server's time (the proof's
    /// `iat`).
    pub async fn host(&self, session_id: Uuid, now_ms: i64) -> anyhow::Result<ClientWs> {
        let mut ws = self.connect(&data::stream_path(&session_id)).await?;
        let hello = match ws.next().await {
            Some(Ok(Message::Text(text))) => text,
            other => bail!("no hello: {other:?}"),
        };
        let data::ServerMessage::Hello(hello) =
            data::ServerMessage::decode(hello.as_bytes(), 1 << 20)
                .map_err(|e| anyhow!("hello: {e}"))?;
        let proof = HostAuthClaims {
            challenge: hello.challenge,
            host_id: self.host_id,
            iat: now_ms.div_euclid(1000),
        }
        .sign(&Ed25519SigningKey::from_seed(&HOST_AUTH_SEED));
        let identify = HostMessage::Identify(Identify {
            protocol_version: 1,
            host_id: self.host_id,
            proof,
            host_version: "1.0.0".into(),
            live_sessions: None,
            session_id: Some(session_id),
        })
        .to_json();
        ws.send(Message::text(identify)).await?;
        Ok(ws)
    }
}

/// Two clients of the same stack connected directly (no relay): the sender
/// connects over TLS to a WebSocket listener of its own with a self-signed
/// certificate; returns `(sender, receiver)`.
pub async fn direct_pair() -> anyhow::Result<(ClientWs, ServerWs)> {
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()])?;
    let cert = certified.cert.der().clone();
    let key = PrivateKeyDer::try_from(certified.signing_key.serialize_der())
        .map_err(|e| anyhow!("key: {e}"))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let server_config = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(vec![cert.clone()], key)?;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert)?;
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    let acceptor = TlsAcceptor::from(Arc::new(server_config));
    let accepting = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await?;
        tcp.set_nodelay(true)?;
        let tls = acceptor.accept(tcp).await?;
        Ok::<ServerWs, anyhow::Error>(tokio_tungstenite::accept_async(tls).await?)
    });
    let clients = Clients {
        port,
        tls: tls_client_config(&roots)?,
        token: String::new(),
        host_id: Uuid::nil(),
    };
    let sender = clients.connect("/direct").await?;
    let receiver = accepting.await??;
    Ok((sender, receiver))
}

/// The resident set of this process, in KiB (`VmRSS` of /proc/self/status).
pub fn rss_kib() -> anyhow::Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let line = status
        .lines()
        .find(|line| line.starts_with("VmRSS:"))
        .ok_or_else(|| anyhow!("no VmRSS in /proc/self/status"))?;
    Ok(line
        .split_whitespace()
        .nth(1)
        .ok_or_else(|| anyhow!("VmRSS without a value"))?
        .parse()?)
}

/// The `q`-quantile of sorted `values` (nearest rank).
pub fn quantile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}
