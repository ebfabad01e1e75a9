//! Several server nodes behind a real nginx (issue 18, spec 24 section 9):
//! node A is the scenario's own [`TestServer`]; [`Cluster::start`] adds nodes
//! B and C in this process on the same PostgreSQL database with
//! `cluster.mode: multi` (each its own pool, listener, relay, registry and
//! clock), with A's token pepper and local CA copied into their data
//! directories as an operator copies them to a second machine
//! (deploy/README.md), and starts Debian's nginx with a generated
//! configuration on a free loopback port.
//!
//! The generated configuration is the one of `deploy/nginx/bothy.conf`
//! (WebSocket upgrade, long timeouts, `X-Forwarded-For`, both stream paths
//! hashed by `$session_id consistent`) with its upstreams pinned so a test
//! knows where each connection lands: the control connection
//! (`/api/v1/hosts/connect`) on B, both stream paths on C (a hash upstream of
//! one node), everything else round-robin over A, B and C; with a process
//! node P ([`Role`]) the edge prefers P for the control connection or for
//! the streams, with B or C as its backup, so a test can kill the node that
//! holds them. `deploy/nginx/bothy.conf` itself, unchanged but for its
//! addresses, runs in [`Edge::start_shipped`]. nginx terminates
//! TLS with a certificate for `localhost` issued by `openssl` from the same
//! CA, and verifies the nodes' certificates against it.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use bothy_proto::stream::{self, DeviceMessage, Identify};
use tokio_tungstenite::tungstenite::Message;
use uuid::Uuid;

use crate::server::TestServer;
use crate::terminal::host_data::{Frame as WsFrame, next_frame};
use crate::ws::{self, Ws};

/// Nodes B and C and the edge.
pub struct Cluster {
    /// Node B (the control connection's node) and node C (the streams').
    pub nodes: Vec<TestServer>,
    followers: Vec<tokio::task::JoinHandle<()>>,
    /// Node P ([`super::Options::control_process`] or
    /// [`super::Options::streams_process`]): a real `bothy-server` process
    /// that the edge prefers for the control connection (B its backup) or
    /// for both stream paths (C its backup).
    pub process: Option<ServerProcess>,
    /// nginx in front of A, B and C (and P).
    pub edge: Edge,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("edge", &self.edge.port)
            .finish_non_exhaustive()
    }
}

/// What the edge prefers the process node P for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The host's control connection (node B its backup).
    Control,
    /// Both stream paths (node C its backup).
    Streams,
}

impl Cluster {
    /// Starts B and C beside `a` with `yaml` (which names `cluster.mode:
    /// multi`), P if `process` names its role, and the edge in front.
    pub async fn start(
        a: &TestServer,
        yaml: &str,
        start_ms: i64,
        process: Option<Role>,
    ) -> Cluster {
        let mut nodes = Vec::new();
        let mut followers = Vec::new();
        for _ in 0..2 {
            let data_dir = tempfile::tempdir().expect("data directory");
            copy_secret(
                &a.data_dir().join("token_pepper"),
                &data_dir.path().join("token_pepper"),
            );
            fs::create_dir(data_dir.path().join("tls")).expect("tls directory");
            fs::set_permissions(
                data_dir.path().join("tls"),
                fs::Permissions::from_mode(0o700),
            )
            .expect("chmod");
            copy_secret(
                &a.data_dir().join("tls/ca.key"),
                &data_dir.path().join("tls/ca.key"),
            );
            fs::copy(
                a.data_dir().join("tls/ca.pem"),
                data_dir.path().join("tls/ca.pem"),
            )
            .expect("CA certificate");
            let node =
                TestServer::start_on_at(a.db().share().await, data_dir, yaml, start_ms).await;
            followers.push(super::follow_real_time(Arc::clone(&node.clock)));
            nodes.push(node);
        }
        let node = match process {
            Some(_) => Some(ServerProcess::start(a, yaml).await),
            None => None,
        };
        // A preferred node with a backup, or one node.
        let pinned = |role: Role, own: u16| match (&node, process) {
            (Some(p), Some(r)) if r == role => format!(
                "        server 127.0.0.1:{};\n        server 127.0.0.1:{own} backup;\n",
                p.port
            ),
            _ => format!("        server 127.0.0.1:{own};\n"),
        };
        // The hash of the shipped configuration where one node serves the
        // streams (nginx allows no backup server beside `hash`).
        let streams = match process {
            Some(Role::Streams) => pinned(Role::Streams, nodes[1].port),
            _ => format!(
                "        hash $bothy_session_id consistent;\n{}",
                pinned(Role::Streams, nodes[1].port)
            ),
        };
        let edge = Edge::start(
            &a.data_dir().join("tls"),
            &[a.port, nodes[0].port, nodes[1].port],
            &pinned(Role::Control, nodes[0].port),
            &streams,
        )
        .await;
        Cluster {
            nodes,
            followers,
            process: node,
            edge,
        }
    }

    /// Kills node P with SIGKILL ([`ServerProcess::kill`]).
    pub fn kill_process_node(&mut self) {
        self.process.as_mut().expect("a process node").kill();
    }

    /// Node B, which holds the host's control connection.
    pub fn b(&self) -> &TestServer {
        &self.nodes[0]
    }

    /// Node C, where the edge hashes both stream paths.
    pub fn c(&self) -> &TestServer {
        &self.nodes[1]
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for follower in &self.followers {
            follower.abort();
        }
    }
}

/// A node as its own `bothy-server serve` process (the binary beside the
/// test's, `<target>/<profile>/bothy-server`), on a free loopback port with
/// A's token pepper and CA, so a test can kill it with SIGKILL (TM-T16).
#[derive(Debug)]
pub struct ServerProcess {
    /// Its port on 127.0.0.1.
    pub port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl ServerProcess {
    /// Starts a node beside `a` on its database with `yaml` (top-level
    /// sections other than `server` and `database`; a `terminal:` section
    /// gets `sweep_interval: 365d` unless it names one) and waits until it
    /// listens. Its clock is the real one.
    pub async fn start(a: &TestServer, yaml: &str) -> ServerProcess {
        let dir = tempfile::tempdir().expect("process node directory");
        let data = dir.path().join("data");
        fs::create_dir(&data).expect("data directory");
        fs::set_permissions(&data, fs::Permissions::from_mode(0o700)).expect("chmod");
        fs::create_dir(data.join("tls")).expect("tls directory");
        fs::set_permissions(data.join("tls"), fs::Permissions::from_mode(0o700)).expect("chmod");
        copy_secret(
            &a.data_dir().join("token_pepper"),
            &data.join("token_pepper"),
        );
        copy_secret(&a.data_dir().join("tls/ca.key"), &data.join("tls/ca.key"));
        fs::copy(a.data_dir().join("tls/ca.pem"), data.join("tls/ca.pem")).expect("CA");
        let port = free_port();
        // As every test server: no sweep pass behind the test's back.
        let yaml = if yaml.contains("sweep_interval:") {
            yaml.to_owned()
        } else {
            yaml.replacen("terminal:\n", "terminal:\n  sweep_interval: 365d\n", 1)
        };
        let config = dir.path().join("server.yaml");
        fs::write(
            &config,
            format!(
                "server:\n  listen: 127.0.0.1:{port}\n  public_url: https://localhost\n  data_dir: \"{}\"\ndatabase:\n  url: \"{}\"\n{yaml}",
                data.display(),
                a.db().url()
            ),
        )
        .expect("config");
        let log = fs::File::create(dir.path().join("server.log")).expect("log");
        let child = Command::new(server_binary())
            .arg("--config")
            .arg(&config)
            .arg("serve")
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("bothy-server starts");
        let mut process = ServerProcess {
            port,
            dir,
            child: Some(child),
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            if let Some(Ok(Some(status))) = process.child.as_mut().map(Child::try_wait) {
                panic!("bothy-server ended with {status}: {}", process.log());
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "bothy-server does not listen: {}",
                process.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        process
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    /// SIGKILL, and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid")),
                nix::sys::signal::Signal::SIGKILL,
            )
            .expect("SIGKILL");
            let _ = child.wait();
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `<target>/<profile>/bothy-server` beside `<target>/<profile>/deps/<test>`.
fn server_binary() -> PathBuf {
    let test = std::env::current_exe().expect("the test binary's path");
    let path = test
        .parent()
        .and_then(Path::parent)
        .expect("the test binary lives in <target>/<profile>/deps")
        .join("bothy-server");
    assert!(
        path.is_file(),
        "{} is missing: run the tests with `cargo test --workspace` (it builds bothy-server)",
        path.display()
    );
    path
}

fn copy_secret(from: &Path, to: &Path) {
    fs::copy(from, to).unwrap_or_else(|e| panic!("copy {}: {e}", from.display()));
    fs::set_permissions(to, fs::Permissions::from_mode(0o600)).expect("chmod 0600");
}

/// A free TCP port on 127.0.0.1 (bound and released; nginx binds it next).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// One request in the edge's access log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Access {
    /// `$remote_addr`: the client's address as the edge saw it.
    pub client: String,
    /// `$status`.
    pub status: u16,
    /// `$upstream_addr`: the node that answered (`-` for none).
    pub upstream: String,
    /// `$uri`.
    pub uri: String,
}

/// Debian's nginx, started by the test.
#[derive(Debug)]
pub struct Edge {
    /// Its TLS port on 127.0.0.1.
    pub port: u16,
    /// The CA its certificate (and the nodes') chains to.
    pub ca_file: PathBuf,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl Edge {
    /// Issues a certificate for `localhost` from the CA in `ca_dir` and starts
    /// nginx: `control` for the control connection, `streams` for both stream
    /// paths (its server lines, with or without `hash`), `api` round-robin
    /// for everything else.
    pub async fn start(ca_dir: &Path, api: &[u16], control: &str, streams: &str) -> Edge {
        let (dir, ca_file, port) = Edge::prepare(ca_dir);
        let path = dir.path();
        let upstream = |ports: &[u16]| {
            ports
                .iter()
                .map(|p| format!("        server 127.0.0.1:{p};\n"))
                .collect::<String>()
        };
        let config = format!(
            include_str!("edge.conf.in"),
            dir = path.display(),
            port = port,
            api = upstream(api),
            control = control,
            streams = streams,
        );
        Edge::spawn(dir, port, ca_file, &config).await
    }

    /// `deploy/nginx/bothy.conf` exactly as shipped in front of `nodes` (on
    /// 127.0.0.1): only its node addresses, its listen line (127.0.0.1 and a
    /// free port instead of port 443 on every address) and its certificate
    /// paths are replaced, each of them checked to be there, so a change of
    /// the shipped file reaches the tests or fails them. The main
    /// configuration around it is what Debian's `nginx.conf` gives (an
    /// `http` block that includes it), with a test's own paths and an access
    /// log of `$remote_addr $status $upstream_addr $uri`
    /// ([`Edge::access_log`]).
    pub async fn start_shipped(ca_dir: &Path, nodes: &[u16]) -> Edge {
        let (dir, ca_file, port) = Edge::prepare(ca_dir);
        let path = dir.path();
        let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/nginx/bothy.conf");
        let shipped =
            fs::read_to_string(&shipped).unwrap_or_else(|e| panic!("{}: {e}", shipped.display()));
        let servers: String = nodes
            .iter()
            .map(|p| format!("    server 127.0.0.1:{p};\n"))
            .collect();
        let in_dir = |name: &str| path.join(name).display().to_string();
        let mut site = shipped;
        for (from, to, times) in [
            (
                "    server 10.0.0.11:8443;\n    server 10.0.0.12:8443;\n",
                servers,
                2,
            ),
            (
                "    listen 443 ssl http2;\n",
                format!("    listen 127.0.0.1:{port} ssl http2;\n"),
                1,
            ),
            ("    listen [::]:443 ssl http2;\n", String::new(), 1),
            ("/etc/ssl/bothy/fullchain.pem", in_dir("edge.pem"), 1),
            ("/etc/ssl/bothy/privkey.pem", in_dir("edge.key"), 1),
            ("/etc/ssl/bothy/nodes-ca.pem", in_dir("ca.pem"), 1),
        ] {
            assert_eq!(
                site.matches(from).count(),
                times,
                "deploy/nginx/bothy.conf no longer has {from:?} {times} time(s): update Edge::start_shipped"
            );
            site = site.replace(from, &to);
        }
        fs::write(path.join("bothy.conf"), site).expect("bothy.conf");
        let config = format!(
            "user root;\nworker_processes 1;\npid {dir}/nginx.pid;\nerror_log {dir}/logs/error.log info;\n\
             events {{\n    worker_connections 1024;\n}}\n\
             http {{\n    log_format bothy_test '$remote_addr $status $upstream_addr $uri';\n    \
             access_log {dir}/logs/access.log bothy_test;\n    \
             client_body_temp_path {dir}/tmp/body;\n    proxy_temp_path {dir}/tmp/proxy;\n    \
             include {dir}/bothy.conf;\n}}\n",
            dir = path.display()
        );
        Edge::spawn(dir, port, ca_file, &config).await
    }

    /// The edge's folder (its CA, a certificate for `localhost` from the CA
    /// in `ca_dir`, the folders nginx writes) and a free port.
    fn prepare(ca_dir: &Path) -> (tempfile::TempDir, PathBuf, u16) {
        let dir = tempfile::tempdir().expect("edge directory");
        let path = dir.path();
        let ca_file = path.join("ca.pem");
        fs::copy(ca_dir.join("ca.pem"), &ca_file).expect("CA copy");
        issue_certificate(ca_dir, path);
        fs::create_dir_all(path.join("tmp")).expect("tmp");
        fs::create_dir_all(path.join("logs")).expect("logs");
        (dir, ca_file, free_port())
    }

    /// Writes `config` as the main configuration into `dir` and starts nginx.
    async fn spawn(dir: tempfile::TempDir, port: u16, ca_file: PathBuf, config: &str) -> Edge {
        let path = dir.path();
        fs::write(path.join("nginx.conf"), config).expect("nginx.conf");
        let child = Command::new("nginx")
            .arg("-p")
            .arg(path)
            .arg("-c")
            .arg(path.join("nginx.conf"))
            .args(["-g", "daemon off;"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("nginx starts (Debian package nginx; .ci/run installs it)");
        let mut edge = Edge {
            port,
            ca_file,
            dir,
            child: Some(child),
        };
        edge.wait_listening().await;
        edge
    }

    async fn wait_listening(&mut self) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            if tokio::net::TcpStream::connect(("127.0.0.1", self.port))
                .await
                .is_ok()
            {
                return;
            }
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    panic!(
                        "nginx ended with {status}: {}",
                        fs::read_to_string(self.dir.path().join("logs/error.log"))
                            .unwrap_or_default()
                    );
                }
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "nginx does not listen"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `https://localhost:<port>`.
    pub fn base(&self) -> String {
        format!("https://localhost:{}", self.port)
    }

    /// The access log so far, one [`Access`] a request (the log format of
    /// [`Edge::start_shipped`]; empty for [`Edge::start`]).
    pub fn access_log(&self) -> Vec<Access> {
        fs::read_to_string(self.dir.path().join("logs/access.log"))
            .unwrap_or_default()
            .lines()
            .filter_map(|line| {
                let mut fields = line.split(' ');
                Some(Access {
                    client: fields.next()?.to_owned(),
                    status: fields.next()?.parse().ok()?,
                    upstream: fields.next()?.to_owned(),
                    uri: fields.next()?.to_owned(),
                })
            })
            .collect()
    }

    /// A client of the edge from `from` (a loopback address such as
    /// 127.0.0.2: another client as the edge sees it), trusting its CA.
    pub fn client_from(&self, from: std::net::IpAddr) -> reqwest::Client {
        crate::server::client_builder_trusting(&self.ca_file)
            .local_address(from)
            .resolve(
                "localhost",
                std::net::SocketAddr::from(([127, 0, 0, 1], self.port)),
            )
            .build()
            .expect("client")
    }

    /// nginx's error log so far.
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.path().join("logs/error.log")).unwrap_or_default()
    }

    /// The device stream of `session_id` through the edge, after `identify`
    /// with `token` and `ready`.
    pub async fn device_login(&self, session_id: Uuid, token: &str) -> Ws {
        let mut ws = ws::connect_to(
            self.port,
            &self.ca_file,
            &stream::stream_path(&session_id),
            None,
            ws::Options::default(),
            &[],
        )
        .await
        .unwrap_or_else(|refused| panic!("upgrade refused at the edge: {refused:?}"));
        let text = DeviceMessage::Identify(Identify {
            access_token: Some(token.to_owned()),
        })
        .to_json();
        ws::send(&mut ws, Message::text(text)).await;
        match next_frame(&mut ws).await {
            WsFrame::Text(text) => {
                let ready: serde_json::Value = serde_json::from_str(&text).expect("JSON");
                assert_eq!(ready["op"], "ready", "{text}");
            }
            other => panic!("expected ready through the edge, got {other:?}"),
        }
        ws
    }
}

impl Drop for Edge {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid")),
                nix::sys::signal::Signal::SIGQUIT,
            );
            let _ = child.wait();
        }
    }
}

/// `edge.pem` and `edge.key` in `out` for `localhost` and 127.0.0.1, issued
/// with `openssl` by the CA in `ca_dir`.
fn issue_certificate(ca_dir: &Path, out: &Path) {
    let ext = out.join("edge.ext");
    fs::write(
        &ext,
        "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName=DNS:localhost,IP:127.0.0.1\n",
    )
    .expect("extensions");
    let run = |args: &[&str]| {
        let output = Command::new("openssl")
            .args(args)
            .current_dir(out)
            .output()
            .expect("openssl runs");
        assert!(
            output.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    };
    run(&[
        "req",
        "-new",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        "edge.key",
        "-subj",
        "/CN=localhost",
        "-out",
        "edge.csr",
    ]);
    let ca_pem = ca_dir.join("ca.pem");
    let ca_key = ca_dir.join("ca.key");
    run(&[
        "x509",
        "-req",
        "-in",
        "edge.csr",
        "-CA",
        ca_pem.to_str().expect("path"),
        "-CAkey",
        ca_key.to_str().expect("path"),
        "-CAcreateserial",
        "-CAserial",
        "edge.srl",
        "-days",
        "2",
        "-extfile",
        "edge.ext",
        "-out",
        "edge.pem",
    ]);
}
