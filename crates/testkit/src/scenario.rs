//! The scenario harness of the host service: the real `bothy-server` in this
//! process (port 0, TLS with its own CA, SQLite or PostgreSQL), real OS users
//! made for the test (a service user and session users), the real
//! `bothy-host` binary paired with `bothy-host pair` and run under
//! `bothy-host supervise` (which starts the PTY helpers as the session users
//! and the service as the service user), and a test device that speaks the
//! real protocol: the open route, the device stream, Noise NK as initiator,
//! and the frames of 5.4.
//!
//! The server's clock is a manual clock that starts at the real time and moves
//! at the real rate (a task adds the real time that passed every 50 ms),
//! because the host service checks tokens and proofs against its own clock;
//! the TOTP of a step-up moves it ahead by one step more, which
//! `auth.clock_leeway: 1h` covers.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use bothy_noise::{EphemeralKey, Initiator, Transport};
use bothy_proto::b64;
use bothy_proto::frame::{Direction, Frame, TerminalSize};
use bothy_proto::jws::ephemeral_key_hash;
use bothy_server::clock::ManualClock;
use bothy_server::db::Engine;
use futures_util::SinkExt;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use uuid::Uuid;

use crate::hosts::{Person, confirm, create_host, owner_person, step_up};
use crate::identity::{Reply, post};
use crate::server::TestServer;
use crate::terminal::device;
use crate::terminal::host_data::{Frame as WsFrame, next_frame};
use crate::users::TestUser;
use crate::wait::{eventually, try_eventually};
use crate::ws::Ws;

pub mod bench;
pub mod bulk;
pub mod cluster;
pub use crate::machine::{ScenarioDir, bothy_host, close_foreign_homes};

/// The configuration every scenario server gets on top of the defaults.
/// The heartbeat interval is an hour because every TOTP step-up moves the
/// server's clock ahead by a step: with the default the server would count the
/// jumps as missed heartbeats (4009). Heartbeats are the server tests' subject.
pub const SERVER_YAML: &str = "auth:\n  clock_leeway: 1h\nrl:\n  public_auth: {burst: 1000, refill_per_minute: 1000}\n  terminal: {burst: 1000, refill_per_minute: 1000}\n  host: {burst: 1000, refill_per_minute: 1000}\nterminal:\n  host_heartbeat_interval: 1h\n";

/// The safety net of every wait for the host service.
pub const WAIT: Duration = Duration::from_secs(60);

/// Real time in Unix milliseconds.
pub fn real_now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The options of a scenario.
#[derive(Debug, Clone)]
pub struct Options {
    /// Session users to create (the owner is assigned the first).
    pub session_users: usize,
    /// Extra `host_service` keys (YAML lines, indented by two spaces).
    pub extra_host_yaml: String,
    /// Extra keys of the server's `terminal` section (YAML lines indented by
    /// two spaces).
    pub extra_terminal_yaml: String,
    /// Extra top-level sections of the server's configuration (not `auth`,
    /// `rl` or `terminal`, which [`SERVER_YAML`] has).
    pub extra_server_yaml: String,
    /// The declaration at the confirmation.
    pub llm_credentials: &'static str,
    /// `HTTPS_PROXY` for `pair` and the service (through supervise).
    pub https_proxy: Option<String>,
    /// Extra environment of supervise (test seams `BOTHY_HOST_TEST_*`, which
    /// supervise hands to the service).
    pub extra_env: Vec<(String, PathBuf)>,
    /// Run `pair`, `supervise` and every `bothy-host` command in a network
    /// namespace of their own ([`HostNetwork`]): the server is then another
    /// machine for the host (not the server host of 2.3, so non-owners may
    /// open), and the test can cut the host's network without a reset.
    pub own_network: bool,
    /// Three server nodes with `cluster.mode: multi` behind a real nginx
    /// ([`cluster`]): the host pairs and connects through the edge (its
    /// control connection lands on node B), device streams go through the
    /// edge (node C), and [`Scenario::server`] is node A, which serves the
    /// openings. PostgreSQL only.
    pub cluster: bool,
    /// With [`Options::cluster`]: a fourth node as its own `bothy-server`
    /// process, which the edge prefers for the control connection (node B
    /// its backup), so a test can kill it (TM-T16).
    pub control_process: bool,
    /// With [`Options::cluster`]: a fourth node as its own `bothy-server`
    /// process, which the edge prefers for both stream paths (node C its
    /// backup), so a test can kill the node that relays a session (TM-T16).
    pub streams_process: bool,
    /// The server on `127.0.0.1:443`, the port of its `public_url`
    /// (`https://localhost`), instead of a free port: a browser then reaches
    /// it directly (the console's benchmark; root).
    pub server_on_public_port: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            session_users: 1,
            extra_host_yaml: String::new(),
            extra_terminal_yaml: String::new(),
            extra_server_yaml: String::new(),
            llm_credentials: "none",
            https_proxy: None,
            extra_env: Vec::new(),
            own_network: false,
            cluster: false,
            control_process: false,
            streams_process: false,
            server_on_public_port: false,
        }
    }
}

/// A network namespace for the host service with a veth pair to this one:
/// `10.231.X.(4k+2)` inside, `10.231.X.(4k+1)` here, and a TCP forwarder
/// here from that address and the server's port to the server's loopback
/// listener. Inside, `/etc/hosts` (`/etc/netns/<name>/hosts`, mounted over
/// it, [`HostNetwork::command`]) resolves `localhost` to the outer address, so the
/// host service reaches the server under the name of its certificate while
/// the name resolves to no address of its own (HD5 passes: not the server
/// host). Removed on drop.
#[derive(Debug)]
pub struct HostNetwork {
    name: String,
    outer_link: String,
    forwarder: tokio::task::JoinHandle<()>,
}

impl HostNetwork {
    async fn create(server_port: u16) -> HostNetwork {
        // Unique among the scenarios of this machine: the process and a count.
        static COUNT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let count = COUNT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let pid = std::process::id();
        let name = format!("bt{:06x}{:02x}", pid & 0xff_ffff, count & 0xff);
        let outer_link = format!("{name}a");
        let inner_link = format!("{name}b");
        let (x, k) = (pid % 256, (pid / 256 + count) % 64);
        let outer = format!("10.231.{x}.{}", k * 4 + 1);
        let inner = format!("10.231.{x}.{}", k * 4 + 2);
        let ip = |args: &[&str]| {
            let out = Command::new("ip").args(args).output().expect("ip runs");
            assert!(out.status.success(), "ip {args:?}: {out:?}");
        };
        ip(&["netns", "add", &name]);
        // Owns what exists from here on, so a failed step below cleans up.
        let mut network = HostNetwork {
            name: name.clone(),
            outer_link: outer_link.clone(),
            forwarder: tokio::spawn(async {}),
        };
        ip(&[
            "link",
            "add",
            &outer_link,
            "type",
            "veth",
            "peer",
            "name",
            &inner_link,
        ]);
        ip(&["link", "set", &inner_link, "netns", &name]);
        ip(&["addr", "add", &format!("{outer}/30"), "dev", &outer_link]);
        ip(&["link", "set", &outer_link, "up"]);
        ip(&[
            "netns",
            "exec",
            &name,
            "ip",
            "addr",
            "add",
            &format!("{inner}/30"),
            "dev",
            &inner_link,
        ]);
        ip(&[
            "netns",
            "exec",
            &name,
            "ip",
            "link",
            "set",
            &inner_link,
            "up",
        ]);
        ip(&["netns", "exec", &name, "ip", "link", "set", "lo", "up"]);
        let etc = PathBuf::from("/etc/netns").join(&name);
        fs::create_dir_all(&etc).expect("netns etc");
        fs::write(etc.join("hosts"), format!("{outer} localhost\n")).expect("netns hosts");
        let listener = tokio::net::TcpListener::bind((
            outer.parse::<std::net::Ipv4Addr>().expect("address"),
            server_port,
        ))
        .await
        .expect("forwarder binds");
        network.forwarder = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                tokio::spawn(async move {
                    if let Ok(mut outbound) =
                        tokio::net::TcpStream::connect(("127.0.0.1", server_port)).await
                    {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
        });
        network
    }

    /// `program` inside the namespace. Not `ip netns exec`, which mounts a
    /// fresh /sys and so hides the cgroup2 mount that supervise needs: only
    /// the network namespace is entered (`nsenter`), and a private mount
    /// namespace (`unshare`) bind-mounts the namespace's hosts file over
    /// /etc/hosts. Every step execs, so the PID is the program's.
    fn command(&self, program: &std::path::Path) -> Command {
        let hosts = PathBuf::from("/etc/netns").join(&self.name).join("hosts");
        let mut command = Command::new("nsenter");
        command
            .arg(format!("--net=/run/netns/{}", self.name))
            .args(["--", "unshare", "--mount", "--propagation", "private", "--"])
            .args(["sh", "-c", "mount --bind \"$0\" /etc/hosts && exec \"$@\""])
            .arg(hosts)
            .arg(program);
        command
    }

    /// Cuts (or restores) the host's network without a reset: the outer end
    /// of the veth pair goes down, so packets are dropped and no side learns
    /// of it from a RST or a FIN.
    pub fn set_up(&self, up: bool) {
        let state = if up { "up" } else { "down" };
        let out = Command::new("ip")
            .args(["link", "set", &self.outer_link, state])
            .output()
            .expect("ip runs");
        assert!(out.status.success(), "ip link set {state}: {out:?}");
    }
}

impl Drop for HostNetwork {
    fn drop(&mut self) {
        self.forwarder.abort();
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
        let _ = Command::new("ip")
            .args(["link", "del", &self.outer_link])
            .output();
        let _ = fs::remove_dir_all(PathBuf::from("/etc/netns").join(&self.name));
    }
}

/// A server, an owner, a paired and confirmed host with its service running
/// under `bothy-host supervise`.
pub struct Scenario {
    pub server: TestServer,
    pub owner: Person,
    pub service_user: TestUser,
    pub users: Vec<TestUser>,
    pub host_id: String,
    pub dir: ScenarioDir,
    pub config_path: PathBuf,
    pub state_dir: PathBuf,
    pub runtime_dir: PathBuf,
    pub log_path: PathBuf,
    https_proxy: Option<String>,
    extra_env: Vec<(String, PathBuf)>,
    /// The host's own network namespace ([`Options::own_network`]).
    pub network: Option<HostNetwork>,
    /// Nodes B and C and the edge ([`Options::cluster`]).
    pub cluster: Option<cluster::Cluster>,
    supervise: Option<Child>,
    follower: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for Scenario {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scenario")
            .field("host_id", &self.host_id)
            .finish_non_exhaustive()
    }
}

/// Moves the manual clock forward with the real time: every 50 ms by the real
/// time that passed. A TOTP step-up of the test moves it ahead by one more
/// step, so it runs ahead of the real time by the steps taken, at the real
/// rate (deadlines of the relay and the sweep pass as they would).
fn follow_real_time(clock: Arc<ManualClock>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut last = std::time::Instant::now();
        loop {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let now = std::time::Instant::now();
            clock.advance(now - last);
            last = now;
        }
    })
}

impl Scenario {
    /// Everything up to a connected host.
    pub async fn start(engine: Engine, options: Options) -> Scenario {
        if !bothy_host::seams::ENABLED {
            panic!(
                "the scenario tests need bothy-host built with --features bothy-host/test-seams \
                 (scripts/test does this): this kernel has no Yama, and HD10 refuses the start \
                 without the test seam"
            );
        }
        close_foreign_homes();
        let mut yaml = format!(
            "{SERVER_YAML}{}{}",
            options.extra_terminal_yaml, options.extra_server_yaml
        );
        if options.cluster {
            assert_eq!(engine, Engine::Postgres, "several nodes need PostgreSQL");
            yaml.push_str("cluster:\n  mode: multi\n");
        }
        let port = if options.server_on_public_port {
            443
        } else {
            0
        };
        let server = TestServer::start_at_port(engine, &yaml, real_now_ms(), port).await;
        let follower = follow_real_time(Arc::clone(&server.clock));
        let cluster = if options.cluster {
            Some(
                cluster::Cluster::start(
                    &server,
                    &yaml,
                    real_now_ms(),
                    match (options.control_process, options.streams_process) {
                        (false, false) => None,
                        (true, false) => Some(cluster::Role::Control),
                        (false, true) => Some(cluster::Role::Streams),
                        (true, true) => panic!("one process node: control or streams"),
                    },
                )
                .await,
            )
        } else {
            None
        };
        let base = cluster
            .as_ref()
            .map_or_else(|| server.base.clone(), |c| c.edge.base());
        let owner = owner_person(&server, "owner").await;
        let service_user = TestUser::create("svc");
        let users: Vec<TestUser> = (0..options.session_users)
            .map(|i| TestUser::create(&format!("u{i}")))
            .collect();
        let dir = ScenarioDir::new();
        let state_dir = dir.path.join("state");
        let runtime_dir = dir.path.join("run");
        let log_path = dir.path.join("host.log");
        let yama = dir.path.join("ptrace_scope");
        fs::write(&yama, "1\n").expect("test ptrace_scope");
        let names: Vec<&str> = users.iter().map(|u| u.name.as_str()).collect();
        let config = format!(
            "host_service:\n  state_dir: {}\n  runtime_dir: {}\n  service_user: {}\n  session_users: [{}]\n  reconnect_backoff_base: 100ms\n  reconnect_backoff_cap: 2s\n  credential_check_interval: 1h\n{}",
            state_dir.display(),
            runtime_dir.display(),
            service_user.name,
            names.join(", "),
            options.extra_host_yaml,
        );
        // The server's CA for the host's TLS client, readable by the service user.
        let ca_file = dir.path.join("ca.pem");
        fs::copy(&server.ca_file, &ca_file).expect("CA copy");
        fs::set_permissions(&ca_file, fs::Permissions::from_mode(0o644)).expect("chmod");
        let config_path = dir.path.join("config.yaml");
        fs::write(&config_path, config).expect("config");
        fs::set_permissions(&config_path, fs::Permissions::from_mode(0o644)).expect("chmod");
        let network = if options.own_network {
            let port = server
                .base
                .rsplit_once(':')
                .and_then(|(_, port)| port.parse().ok())
                .expect("the server's port");
            Some(HostNetwork::create(port).await)
        } else {
            None
        };
        // createHost, bothy-host pair, confirmHost with the owner's assignment.
        let (host_id, code) = create_host(&server, &owner, "scenario host", None).await;
        let mut pair = host_program(network.as_ref());
        pair.arg("--config")
            .arg(&config_path)
            .args(["pair", "--server", &base, "--code", &code])
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("SSL_CERT_FILE", &ca_file);
        if let Some(proxy) = &options.https_proxy {
            pair.env("HTTPS_PROXY", proxy);
        }
        let paired = pair.output().expect("bothy-host pair runs");
        let stdout = String::from_utf8_lossy(&paired.stdout).into_owned();
        assert!(
            paired.status.success(),
            "bothy-host pair failed: {stdout}{}",
            String::from_utf8_lossy(&paired.stderr)
        );
        let fingerprint = stdout
            .lines()
            .map(str::trim)
            .find(|line| line.len() == 64 && line.matches('-').count() == 12)
            .expect("pair prints the fingerprint in groups of four")
            .to_owned();
        let prefix: String = fingerprint.chars().filter(|c| *c != '-').take(8).collect();
        let reply = confirm(
            &server,
            &owner,
            &host_id,
            &prefix,
            options.llm_credentials,
            None,
            false,
            &[(owner.id(), names[0])],
        )
        .await;
        assert_eq!(reply.status, 200, "confirm: {:?}", reply.body);
        let mut scenario = Scenario {
            server,
            owner,
            service_user,
            users,
            host_id,
            dir,
            config_path,
            state_dir,
            runtime_dir,
            log_path,
            https_proxy: options.https_proxy.clone(),
            extra_env: options.extra_env.clone(),
            network,
            cluster,
            supervise: None,
            follower,
        };
        scenario.start_service();
        scenario.wait_connected().await;
        scenario
    }

    /// Starts `bothy-host supervise` (as root), logging to [`Scenario::log_path`].
    pub fn start_service(&mut self) {
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .expect("log file");
        let mut command = host_program(self.network.as_ref());
        command
            .arg("--config")
            .arg(&self.config_path)
            .arg("supervise")
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("SSL_CERT_FILE", self.dir.path.join("ca.pem"))
            .env("BOTHY_HOST_LOG", "debug")
            .env(
                "BOTHY_HOST_TEST_PTRACE_SCOPE_FILE",
                self.dir.path.join("ptrace_scope"),
            );
        if let Some(proxy) = &self.https_proxy {
            command.env("HTTPS_PROXY", proxy);
        }
        for (name, value) in &self.extra_env {
            command.env(name, value);
        }
        let child = command
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("bothy-host supervise starts");
        self.supervise = Some(child);
    }

    /// Stops `bothy-host supervise` with SIGTERM and waits for it.
    pub fn stop_service(&mut self) {
        if let Some(mut child) = self.supervise.take() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid")),
                nix::sys::signal::Signal::SIGTERM,
            );
            let _ = child.wait();
        }
    }

    /// Kills `bothy-host supervise` with SIGKILL (a crash of the service
    /// manager, 3.4) and reaps it; its PID. Nothing else is touched.
    pub fn kill_supervise(&mut self) -> u32 {
        let mut child = self.supervise.take().expect("supervise runs");
        let pid = child.id();
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(i32::try_from(pid).expect("pid")),
            nix::sys::signal::Signal::SIGKILL,
        )
        .expect("SIGKILL to supervise");
        let _ = child.wait();
        pid
    }

    /// The host's state as the server stores it.
    pub async fn host_state(&self) -> (String, Option<String>) {
        sqlx::query_as("SELECT state, disabled_reason FROM hosts WHERE id = $1")
            .bind(&self.host_id)
            .fetch_one(self.server.db().db.pool())
            .await
            .expect("the host row")
    }

    /// Waits (bounded) until the server no longer counts the host as connected.
    pub async fn wait_disconnected(&self) {
        eventually(
            "the server to count the host as no longer connected",
            WAIT,
            || async move { (!self.connected()).then_some(()) },
        )
        .await;
    }

    /// The host's ID.
    pub fn host_uuid(&self) -> Uuid {
        Uuid::parse_str(&self.host_id).expect("host ID")
    }

    /// Whether the server counts the host as connected now.
    pub fn connected(&self) -> bool {
        self.server
            .state
            .control_links()
            .is_connected(self.host_uuid())
    }

    /// Waits until the server counts the host as connected (a report applied).
    pub async fn wait_connected(&self) {
        let connected =
            try_eventually(WAIT, || async move { self.connected().then_some(()) }).await;
        assert!(
            connected.is_some(),
            "the host service never connected; its log:\n{}",
            self.log()
        );
    }

    /// The host service's log so far.
    pub fn log(&self) -> String {
        fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// Opens a session of `profile` as `person` with a fresh step-up; the reply.
    pub async fn open_reply(&self, person: &Person, profile: &str, cek: &[u8; 32]) -> Reply {
        self.open_reply_with_index(person, profile, None, cek).await
    }

    /// [`Scenario::open_reply`] with `workdir_index` when given.
    pub async fn open_reply_with_index(
        &self,
        person: &Person,
        profile: &str,
        workdir_index: Option<u32>,
        cek: &[u8; 32],
    ) -> Reply {
        let step_up_id = step_up(&self.server, person).await;
        let mut body = json!({
            "profile": profile,
            "columns": 100,
            "rows": 30,
            "client_ephemeral_key_hash": b64::encode(cek),
            "step_up_id": step_up_id,
        });
        if let Some(index) = workdir_index {
            body["workdir_index"] = json!(index);
        }
        post(
            &self.server,
            &format!("/api/v1/hosts/{}/terminal/sessions", self.host_id),
            Some(person.token()),
            body,
        )
        .await
    }

    /// Opens a shell as the owner and completes the handshake and `start`.
    pub async fn open_shell(&self) -> DeviceSession {
        self.open_as(
            &self.owner,
            "shell",
            TerminalSize::new(100, 30).expect("size"),
        )
        .await
    }

    /// Opens `profile` as `person` and completes the handshake and `start`.
    pub async fn open_as(
        &self,
        person: &Person,
        profile: &str,
        size: TerminalSize,
    ) -> DeviceSession {
        let host = self.host_uuid();
        let ephemeral = EphemeralKey::generate().expect("ephemeral key");
        let cek = ephemeral_key_hash(&ephemeral.public());
        let reply = self.open_reply(person, profile, &cek).await;
        assert_eq!(reply.status, 201, "open: {:?}", reply.body);
        let session_id =
            Uuid::parse_str(reply.body["session_id"].as_str().expect("id")).expect("uuid");
        let token = reply.body["token"].as_str().expect("token").to_owned();
        let noise_key: [u8; 32] =
            b64::decode_array(reply.body["noise_public_key"].as_str().expect("key")).expect("key");
        let initiator =
            Initiator::with_ephemeral(session_id, host, &noise_key, ephemeral).expect("initiator");
        let mut device = DeviceSession::connect(self, person, session_id, initiator, &token).await;
        device.start(size).await;
        device
    }
}

impl Scenario {
    /// The main PID of the helper of session user `index`, as supervise records it.
    pub fn helper_pid(&self, index: usize) -> u32 {
        self.recorded_helper_pid(index)
            .expect("the helper's PID record")
    }

    /// The PID record of the helper of session user `index`, if supervise
    /// runs one (none after `session-user remove`).
    fn recorded_helper_pid(&self, index: usize) -> Option<u32> {
        let record = self
            .runtime_dir
            .join("pids")
            .join(format!("helper@{}.pid", self.users[index].name));
        fs::read_to_string(&record).ok()?.trim().parse().ok()
    }

    /// The processes of session user `index` other than its helper: what its
    /// sessions run (every process of the user when it has no helper).
    pub fn session_processes(&self, index: usize) -> Vec<u32> {
        let uid = self.users[index].uid;
        let helper = self.recorded_helper_pid(index).unwrap_or(0);
        let mut out = Vec::new();
        let Ok(entries) = fs::read_dir("/proc") else {
            return out;
        };
        for entry in entries.flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            if pid == helper {
                continue;
            }
            let Ok(status) = fs::read_to_string(entry.path().join("status")) else {
                continue;
            };
            let real_uid = status
                .lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|u| u.parse::<u32>().ok());
            let zombie = status
                .lines()
                .any(|l| l.starts_with("State:") && l.contains('Z'));
            if real_uid == Some(uid) && !zombie {
                out.push(pid);
            }
        }
        out
    }

    /// Waits until at least `count` processes of session user `index` run.
    pub async fn wait_session_processes(&self, index: usize, count: usize) {
        let enough = try_eventually(WAIT, || async move {
            (self.session_processes(index).len() >= count).then_some(())
        })
        .await;
        assert!(
            enough.is_some(),
            "fewer than {count} processes of the session user: {:?}",
            self.session_processes(index)
        );
    }

    /// The processes of session user `index` once the job of
    /// [`start_background`] has settled (sorted): the shell and exactly the
    /// two sleeps. `setsid` forks once more inside the job, so a count alone
    /// can catch its parent, and a listing of /proc can miss the parent that
    /// just left and the child that just came.
    pub async fn background_settled(&self, index: usize) -> Vec<u32> {
        let settled = try_eventually(WAIT, || async move {
            let mut processes = self.session_processes(index);
            processes.sort_unstable();
            let sleeps: Vec<String> = processes
                .iter()
                .filter_map(|pid| fs::read(format!("/proc/{pid}/cmdline")).ok())
                .map(|cmdline| String::from_utf8_lossy(&cmdline).replace('\0', " "))
                .filter(|cmdline| cmdline.trim_end().starts_with("sleep 100"))
                .collect();
            let both = ["sleep 1000", "sleep 1001"]
                .iter()
                .all(|want| sleeps.iter().any(|s| s.trim_end() == *want));
            (processes.len() == 3 && sleeps.len() == 2 && both).then_some(processes)
        })
        .await;
        settled.unwrap_or_else(|| {
            panic!(
                "the background job never settled: {:?}",
                self.session_processes(index)
            )
        })
    }

    /// Waits (bounded) until the record of the helper of session user `index`
    /// names a process other than `old` (supervise started it again); its PID.
    pub async fn wait_new_helper(&self, index: usize, old: u32) -> u32 {
        let record = self
            .runtime_dir
            .join("pids")
            .join(format!("helper@{}.pid", self.users[index].name));
        let record = &record;
        let started = try_eventually(WAIT, || async move {
            fs::read_to_string(record)
                .ok()
                .and_then(|t| t.trim().parse::<u32>().ok())
                .filter(|pid| *pid != old)
        })
        .await;
        started.unwrap_or_else(|| {
            panic!(
                "the helper was never started again; host log:\n{}",
                self.log()
            )
        })
    }

    /// Waits (bounded) until session user `index` runs nothing but its helper.
    pub async fn wait_no_session_processes(&self, index: usize) {
        let gone = try_eventually(WAIT, || async move {
            self.session_processes(index).is_empty().then_some(())
        })
        .await;
        assert!(
            gone.is_some(),
            "processes of the session user survive: {:?}",
            self.session_processes(index)
        );
    }

    /// The state and close_reason/close_detail of a session row.
    pub async fn session_row(&self, session_id: Uuid) -> (String, Option<String>, Option<String>) {
        sqlx::query_as(
            "SELECT state, close_reason, close_detail FROM terminal_sessions WHERE id = $1",
        )
        .bind(session_id.to_string())
        .fetch_one(self.server.db().db.pool())
        .await
        .expect("the session row")
    }

    /// Waits (bounded) until the session has `state`.
    pub async fn wait_state(&self, session_id: Uuid, state: &str) {
        let reached = try_eventually(WAIT, || async move {
            (self.session_row(session_id).await.0 == state).then_some(())
        })
        .await;
        if reached.is_none() {
            panic!(
                "the session never reached {state}: {:?}; host log:\n{}",
                self.session_row(session_id).await,
                self.log()
            );
        }
    }

    /// Waits until the session is closed; its close_reason and close_detail.
    pub async fn closed(&self, session_id: Uuid) -> (String, Option<String>) {
        self.wait_state(session_id, "closed").await;
        let (_, reason, detail) = self.session_row(session_id).await;
        (reason.expect("a closed session has a reason"), detail)
    }

    /// An opening by `person` without a handshake: the answer of the route and
    /// the ephemeral key whose hash it carries.
    pub async fn open_raw(&self, person: &Person, profile: &str) -> (RawGrant, EphemeralKey) {
        self.open_raw_with_index(person, profile, None).await
    }

    /// [`Scenario::open_raw`] with `workdir_index` when given.
    pub async fn open_raw_with_index(
        &self,
        person: &Person,
        profile: &str,
        workdir_index: Option<u32>,
    ) -> (RawGrant, EphemeralKey) {
        let ephemeral = EphemeralKey::generate().expect("ephemeral key");
        let cek = ephemeral_key_hash(&ephemeral.public());
        let reply = self
            .open_reply_with_index(person, profile, workdir_index, &cek)
            .await;
        assert_eq!(
            reply.status,
            201,
            "open: {:?}; host log:\n{}",
            reply.body,
            self.log()
        );
        (RawGrant::from_reply(&reply.body), ephemeral)
    }

    /// An attach by `person` with a fresh step-up: the grant and its key.
    pub async fn attach_raw(&self, person: &Person, session_id: Uuid) -> (RawGrant, EphemeralKey) {
        let ephemeral = EphemeralKey::generate().expect("ephemeral key");
        let cek = ephemeral_key_hash(&ephemeral.public());
        let reply = self.attach_reply(person, session_id, &cek).await;
        assert_eq!(reply.status, 200, "attach: {:?}", reply.body);
        (RawGrant::from_reply(&reply.body), ephemeral)
    }

    /// The answer of attachTerminalSession by `person` with a fresh step-up
    /// and `cek` as the hash of the device's ephemeral key.
    pub async fn attach_reply(&self, person: &Person, session_id: Uuid, cek: &[u8; 32]) -> Reply {
        let step_up_id = step_up(&self.server, person).await;
        post(
            &self.server,
            &format!("/api/v1/terminal/sessions/{session_id}/attach"),
            Some(person.token()),
            json!({
                "client_ephemeral_key_hash": b64::encode(cek),
                "step_up_id": step_up_id,
            }),
        )
        .await
    }

    /// Asserts that a correct attach of the closed `session_id` is refused as
    /// closed: 409 `invalid_state_transition`, never a handshake refusal.
    pub async fn assert_attach_refused_as_closed(&self, person: &Person, session_id: Uuid) {
        let reply = self.attach_reply(person, session_id, &[7; 32]).await;
        assert_eq!(
            (reply.status.as_u16(), reply.body["code"].as_str()),
            (409, Some("invalid_state_transition")),
            "attach of a closed session: {:?}",
            reply.body
        );
    }

    /// Attaches with a full handshake and `start`; the caller reads the replay.
    pub async fn attach(
        &self,
        person: &Person,
        session_id: Uuid,
        size: TerminalSize,
    ) -> DeviceSession {
        let (grant, ephemeral) = self.attach_raw(person, session_id).await;
        let initiator = grant.initiator(self.host_uuid(), ephemeral);
        let mut device =
            DeviceSession::connect(self, person, session_id, initiator, &grant.token).await;
        device.start(size).await;
        device
    }

    /// A device stream of `session_id` after `ready`, before message 1.
    pub async fn device_stream(&self, person: &Person, session_id: Uuid) -> Ws {
        device::login(&self.server, session_id, person.token()).await
    }

    /// Message 1 of the handshake with `grant`'s host key and `key`,
    /// carrying `token`, sent as `person` on a new device stream of `grant`'s
    /// session; how the host refuses it (close code and text, [`refused`]).
    pub async fn refused_message1(
        &self,
        person: &Person,
        grant: &RawGrant,
        key: EphemeralKey,
        token: &str,
    ) -> (u16, String) {
        let mut ws = self.device_stream(person, grant.session_id).await;
        let message1 = grant
            .initiator(self.host_uuid(), key)
            .write_message1(token.as_bytes())
            .expect("m1");
        refused(&mut ws, message1).await
    }
}

/// The `bothy-host` binary as a command, inside the host's own network
/// namespace when it has one.
fn host_program(network: Option<&HostNetwork>) -> Command {
    match network {
        Some(network) => network.command(std::path::Path::new(bothy_host())),
        None => Command::new(bothy_host()),
    }
}

/// What open and attach answer.
#[derive(Debug, Clone)]
pub struct RawGrant {
    pub session_id: Uuid,
    pub token: String,
    pub noise_public_key: [u8; 32],
}

impl RawGrant {
    fn from_reply(body: &Value) -> RawGrant {
        RawGrant {
            session_id: Uuid::parse_str(body["session_id"].as_str().expect("session_id"))
                .expect("uuid"),
            token: body["token"].as_str().expect("token").to_owned(),
            noise_public_key: b64::decode_array(
                body["noise_public_key"].as_str().expect("noise_public_key"),
            )
            .expect("32 bytes"),
        }
    }

    /// The initiator of a handshake with the host `host` for this grant,
    /// with `key` as the device's ephemeral key.
    pub fn initiator(&self, host: Uuid, key: EphemeralKey) -> Initiator {
        Initiator::with_ephemeral(self.session_id, host, &self.noise_public_key, key)
            .expect("initiator")
    }
}

/// Sends `message` as message 1 on `ws` and returns how the stream ends
/// (close code and text), skipping anything before the close.
pub async fn refused(ws: &mut Ws, message: Vec<u8>) -> (u16, String) {
    ws.send(Message::binary(message)).await.expect("sent");
    loop {
        match next_frame(ws).await {
            WsFrame::Close(code, reason) => return (code, reason),
            WsFrame::Ended => panic!("the stream ended without a close frame"),
            _ => {}
        }
    }
}

impl Drop for Scenario {
    fn drop(&mut self) {
        self.stop_service();
        self.follower.abort();
    }
}

/// A device with an open, started session.
#[derive(Debug)]
pub struct DeviceSession {
    pub session_id: Uuid,
    pub ws: Ws,
    /// Message 1 as sent (a replaying relay sends it again, TM-T03).
    pub message1: Vec<u8>,
    transport: Transport,
    /// Output of the PTY received so far (data frames), in order.
    pub output: Vec<u8>,
}

/// What the device received next.
#[derive(Debug, PartialEq, Eq)]
pub enum Received {
    Data(Vec<u8>),
    Exit(i32),
    ReplayBegin,
    ReplayEnd,
    Closed(u16, String),
}

impl DeviceSession {
    /// A device after the handshake of `grant` with `key`, before `start`.
    pub async fn connect_grant(
        scenario: &Scenario,
        person: &Person,
        grant: &RawGrant,
        key: EphemeralKey,
    ) -> DeviceSession {
        let initiator = grant.initiator(scenario.host_uuid(), key);
        DeviceSession::connect(scenario, person, grant.session_id, initiator, &grant.token).await
    }

    async fn connect(
        scenario: &Scenario,
        person: &Person,
        session_id: Uuid,
        mut initiator: Initiator,
        token: &str,
    ) -> DeviceSession {
        let mut ws = match &scenario.cluster {
            Some(cluster) => cluster.edge.device_login(session_id, person.token()).await,
            None => device::login(&scenario.server, session_id, person.token()).await,
        };
        let message1 = initiator
            .write_message1(token.as_bytes())
            .expect("message 1");
        ws.send(Message::binary(message1.clone()))
            .await
            .expect("sent");
        let message2 = match next_frame(&mut ws).await {
            WsFrame::Binary(bytes) => bytes,
            other => panic!(
                "expected message 2, got {other:?}; host log:\n{}",
                scenario.log()
            ),
        };
        let (payload, transport) = initiator.read_message2(&message2).expect("message 2");
        let payload: Value = serde_json::from_slice(&payload).expect("JSON payload");
        assert_eq!(payload["v"], 1);
        DeviceSession {
            session_id,
            ws,
            message1,
            transport,
            output: Vec::new(),
        }
    }

    /// Sends a frame.
    pub async fn send(&mut self, frame: Frame<'_>) {
        let plain = frame.to_vec(Direction::DeviceToHost).expect("frame");
        let message = self.transport.write_message(&plain).expect("encrypt");
        self.ws.send(Message::binary(message)).await.expect("sent");
    }

    /// Sends `start`.
    pub async fn start(&mut self, size: TerminalSize) {
        self.send(Frame::Start(size)).await;
    }

    /// Types `text` (a data frame).
    pub async fn type_text(&mut self, text: &str) {
        self.send(Frame::Data(text.as_bytes())).await;
    }

    /// The next thing the device receives.
    pub async fn recv(&mut self) -> Received {
        match next_frame(&mut self.ws).await {
            WsFrame::Binary(bytes) => {
                let plain = self.transport.read_message(&bytes).expect("decrypt");
                match Frame::decode(&plain, Direction::HostToDevice).expect("frame") {
                    Frame::Data(bytes) => {
                        self.output.extend_from_slice(bytes);
                        Received::Data(bytes.to_vec())
                    }
                    Frame::Exit(code) => Received::Exit(code),
                    Frame::ReplayBegin => Received::ReplayBegin,
                    Frame::ReplayEnd => Received::ReplayEnd,
                    other => panic!("unexpected frame {other:?}"),
                }
            }
            WsFrame::Close(code, reason) => Received::Closed(code, reason),
            other => panic!("unexpected message {other:?}"),
        }
    }

    /// Reads until the output contains `needle`; panics on an exit or close.
    pub async fn expect_output(&mut self, needle: &str) {
        while !String::from_utf8_lossy(&self.output).contains(needle) {
            match self.recv().await {
                // A replay is output too.
                Received::Data(_) | Received::ReplayBegin | Received::ReplayEnd => {}
                other => panic!(
                    "expected {needle:?}, got {other:?}; output so far: {:?}",
                    String::from_utf8_lossy(&self.output)
                ),
            }
        }
    }

    /// Reads replay_begin, the replayed output and replay_end (6.2); the
    /// replayed bytes.
    pub async fn expect_replay(&mut self) -> Vec<u8> {
        assert_eq!(self.recv().await, Received::ReplayBegin);
        let mut replay = Vec::new();
        loop {
            match self.recv().await {
                Received::Data(bytes) => replay.extend_from_slice(&bytes),
                Received::ReplayEnd => return replay,
                other => panic!("unexpected {other:?} in the replay"),
            }
        }
    }

    /// Reads until the exit frame; its code.
    pub async fn expect_exit(&mut self) -> i32 {
        loop {
            match self.recv().await {
                Received::Data(_) => {}
                Received::Exit(code) => return code,
                other => panic!("expected the exit frame, got {other:?}"),
            }
        }
    }

    /// Reads until the close frame; its code and text.
    pub async fn expect_close(&mut self) -> (u16, String) {
        loop {
            if let Received::Closed(code, reason) = self.recv().await {
                return (code, reason);
            }
        }
    }
}

/// Additions for the policy scenarios (issue 7: TM-T21, T24–T27, T29).
impl Scenario {
    /// Waits (bounded) until the host's log contains `needle`.
    pub async fn wait_log(&self, needle: &str) {
        let seen = try_eventually(
            WAIT,
            || async move { self.log().contains(needle).then_some(()) },
        )
        .await;
        assert!(
            seen.is_some(),
            "{needle} never appeared in the host log:\n{}",
            self.log()
        );
    }

    /// Waits (bounded) until the host's log contains `needle` at least
    /// `count` times.
    pub async fn wait_log_count(&self, needle: &str, count: usize) {
        let seen = try_eventually(WAIT, || async move {
            (self.log().matches(needle).count() >= count).then_some(())
        })
        .await;
        assert!(
            seen.is_some(),
            "{needle} never appeared {count} times in the host log:\n{}",
            self.log()
        );
    }

    /// Waits until supervise logs the service's exit 78 (a refused start),
    /// and asserts that it did not restart the service and that the doctor
    /// refused exactly one start.
    pub async fn wait_refused_start(&self) {
        self.wait_log("status=78").await;
        let log = self.log();
        assert!(log.contains("not restarted"), "{log}");
        assert_eq!(
            log.matches("doctor refuses the start;").count(),
            1,
            "exactly one refused start, one report, no restart: {log}"
        );
    }

    /// The doctor entries the server stored for the host (`reported_doctor`).
    pub async fn reported_doctor(&self) -> Vec<Value> {
        self.reported("reported_doctor")
            .await
            .map(|text| serde_json::from_str::<Vec<Value>>(&text).expect("doctor entries"))
            .unwrap_or_default()
    }

    /// The column `column` (`reported_doctor`, `reported_profiles`,
    /// `reported_session_users`) of the host's row as the server stored it:
    /// JSON text, none before a report.
    pub async fn reported(&self, column: &str) -> Option<String> {
        sqlx::query_scalar(&format!("SELECT {column} FROM hosts WHERE id = $1"))
            .bind(&self.host_id)
            .fetch_one(self.server.db().db.pool())
            .await
            .expect(column)
    }

    /// The session users the server stored for the host
    /// (`reported_session_users`).
    pub async fn reported_session_users(&self) -> Value {
        let stored = self.reported("reported_session_users").await;
        serde_json::from_str(&stored.expect("reported_session_users")).expect("JSON")
    }

    /// Waits (bounded) until the stored doctor entries satisfy `test`; them.
    pub async fn wait_doctor(&self, what: &str, test: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let test = &test;
        let stored = try_eventually(WAIT, || async move {
            let entries = self.reported_doctor().await;
            test(&entries).then_some(entries)
        })
        .await;
        match stored {
            Some(entries) => entries,
            None => panic!(
                "the server never stored a report with {what}: {:?}; host log:\n{}",
                self.reported_doctor().await,
                self.log()
            ),
        }
    }

    /// Stops the service, rewrites the configuration file with `edit`, and
    /// starts the service again (it reads the configuration only at start).
    /// The caller waits for what it expects (connected, or a refused start).
    pub fn reconfigure(&mut self, edit: impl FnOnce(String) -> String) {
        self.stop_service();
        let text = fs::read_to_string(&self.config_path).expect("config");
        fs::write(&self.config_path, edit(text)).expect("config");
        self.start_service();
    }

    /// `bothy-host session-user ARGS` with the scenario's unit folder.
    pub fn session_user(&self, args: &[&str]) -> std::process::Output {
        let units = self.dir.path.join("units");
        let mut all = vec!["session-user"];
        all.extend(args);
        all.extend(["--unit-dir", units.to_str().expect("UTF-8")]);
        self.host_command(&all)
    }

    /// `bothy-host <args>` with this scenario's configuration, as root, with
    /// the same test seam as the service (this kernel has no Yama: a
    /// `doctor` that checks by itself reads the scenario's ptrace_scope).
    pub fn host_command(&self, args: &[&str]) -> std::process::Output {
        host_program(self.network.as_ref())
            .arg("--config")
            .arg(&self.config_path)
            .args(args)
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env(
                "BOTHY_HOST_TEST_PTRACE_SCOPE_FILE",
                self.dir.path.join("ptrace_scope"),
            )
            .output()
            .expect("bothy-host runs")
    }

    /// `bothy-host restart` ([`Scenario::host_command`]), which must succeed;
    /// the caller waits for what it expects (connected, or a refused start).
    pub fn restart(&self) {
        let restarted = self.host_command(&["restart"]);
        assert!(restarted.status.success(), "restart: {restarted:?}");
    }

    /// A host change by the first owner with a fresh step-up and the current
    /// `If-Match`: `method /api/v1/hosts/{id}{path}` with `body` plus `reason`
    /// and `step_up_id`; the reply.
    ///
    /// The host's version also moves with its reports (a changed declaration
    /// makes the host service report again), so a 412 between reading the
    /// ETag and sending is read again and sent again, as a client would;
    /// the If-Match check comes before the step-up is consumed.
    pub async fn host_change(&self, method: reqwest::Method, path: &str, mut body: Value) -> Reply {
        let owner = &self.owner;
        body["reason"] = json!("test");
        body["step_up_id"] = json!(step_up(&self.server, owner).await);
        let mut attempts = 0;
        loop {
            let host = crate::hosts::get_host(&self.server, owner.token(), &self.host_id).await;
            let etag = crate::hosts::etag_of(&host);
            let reply = crate::hosts::send(
                &self.server,
                method.clone(),
                &format!("/api/v1/hosts/{}{path}", self.host_id),
                Some(owner.token()),
                Some(&body),
                &[("If-Match", &etag)],
            )
            .await;
            attempts += 1;
            if reply.status.as_u16() != 412 || attempts == 5 {
                return reply;
            }
        }
    }

    /// Gives `person` the session user `index` (the owner keeps the first).
    pub async fn assign_user(&self, person: &Person, index: usize) {
        let users = json!([{"user_id": person.id(), "os_user": self.users[index].name}]);
        let reply = self
            .host_change(
                reqwest::Method::PATCH,
                "",
                json!({"assign_session_users": users}),
            )
            .await;
        assert_eq!(reply.status.as_u16(), 200, "assign: {:?}", reply.body);
    }

    /// Ends the assignment of `person` (updateHost `end_session_users`).
    pub async fn end_assignment_of(&self, person: &Person) {
        let reply = self
            .host_change(
                reqwest::Method::PATCH,
                "",
                json!({"end_session_users": [person.id()]}),
            )
            .await;
        assert_eq!(reply.status.as_u16(), 200, "end: {:?}", reply.body);
    }

    /// Opens `profile` as `person` (with `workdir_index` when given) and
    /// completes the handshake and `start`; the route's reply when it
    /// refuses.
    pub async fn open_with_index(
        &self,
        person: &Person,
        profile: &str,
        workdir_index: Option<u32>,
    ) -> Result<DeviceSession, Reply> {
        let ephemeral = EphemeralKey::generate().expect("ephemeral key");
        let cek = ephemeral_key_hash(&ephemeral.public());
        let reply = self
            .open_reply_with_index(person, profile, workdir_index, &cek)
            .await;
        if reply.status != 201 {
            return Err(reply);
        }
        let grant = RawGrant::from_reply(&reply.body);
        let initiator = grant.initiator(self.host_uuid(), ephemeral);
        let mut device =
            DeviceSession::connect(self, person, grant.session_id, initiator, &grant.token).await;
        device
            .start(TerminalSize::new(100, 30).expect("size"))
            .await;
        Ok(device)
    }

    /// The PID of the host service (`bothy-host run` as the service user).
    pub fn service_pid(&self) -> u32 {
        let record = self.runtime_dir.join("pids").join("service.pid");
        fs::read_to_string(&record)
            .expect("the service's PID record")
            .trim()
            .parse()
            .expect("a PID")
    }
}

/// Whether process `pid` is gone (or a zombie nobody reaped yet).
pub fn process_gone(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/status")) {
        Ok(status) => status
            .lines()
            .any(|l| l.starts_with("State:") && l.contains('Z')),
        Err(_) => true,
    }
}

/// Waits (bounded) until every process of `pids` is gone.
pub async fn wait_processes_gone(pids: &[u32]) {
    let left = || -> Vec<u32> { pids.iter().copied().filter(|p| !process_gone(*p)).collect() };
    let gone = try_eventually(WAIT, || async move { left().is_empty().then_some(()) }).await;
    assert!(gone.is_some(), "processes survive: {:?}", left());
}

/// Runs `script` with `/bin/sh -c` as `user` (its UID, GID and HOME); the output.
pub fn as_user(user: &TestUser, script: &str) -> std::process::Output {
    use std::os::unix::process::CommandExt;
    Command::new("/bin/sh")
        .arg("-c")
        .arg(script)
        .uid(user.uid)
        .gid(user.gid)
        .env_clear()
        .env("HOME", &user.home)
        .env("PATH", "/usr/bin:/bin")
        .current_dir("/")
        .output()
        .expect("sh runs")
}

/// Whether `entries` hold a failed entry of `check` with `code` naming `user`
/// (`None`: an entry without a name).
pub fn has_entry(entries: &[Value], check: &str, code: &str, user: Option<&str>) -> bool {
    entries.iter().any(|e| {
        e["check"] == check
            && e["ok"] == false
            && e["code"] == code
            && e["session_user"].as_str() == user
    })
}

/// Whether every entry of `check` in `entries` passed (also when there is none).
pub fn all_passed(entries: &[Value], check: &str) -> bool {
    entries
        .iter()
        .filter(|e| e["check"] == check)
        .all(|e| e["ok"] == true)
}

/// The entries of `check`.
pub fn entries_of<'a>(entries: &'a [Value], check: &str) -> Vec<&'a Value> {
    entries.iter().filter(|e| e["check"] == check).collect()
}

/// What a subscription login leaves in a session user's account (7.4: the
/// login location `~/.claude/.credentials.json`), written by the user itself;
/// it goes with the user's home.
pub fn subscription_login(user: &TestUser) {
    let out = as_user(
        user,
        "mkdir -p \"$HOME/.claude\" && umask 077 && printf '{}' > \"$HOME/.claude/.credentials.json\"",
    );
    assert!(out.status.success(), "{out:?}");
}

/// Starts two background processes that leave the shell's session and
/// process group (`setsid`, `nohup ... &`) and waits until they run.
pub async fn start_background(device: &mut DeviceSession) {
    device
        .type_text("setsid sleep 1000 & nohup sleep 1001 >/dev/null 2>&1 & echo BG\"\"OK\n")
        .await;
    device.expect_output("BGOK").await;
}

/// Opens a shell as `person` (session user `index`) with two background
/// processes, runs `revoke`, and checks the device's 4100 with `reason`, the
/// stored close_reason, and that nothing of the session survives.
pub async fn revoked<F, Fut>(
    scenario: &Scenario,
    person: &Person,
    index: usize,
    reason: &str,
    revoke: F,
) where
    F: FnOnce(uuid::Uuid) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut device = scenario
        .open_as(person, "shell", TerminalSize::new(100, 30).expect("size"))
        .await;
    start_background(&mut device).await;
    // `setsid` forks once more inside the background job: wait for it.
    scenario.wait_session_processes(index, 3).await;
    revoke(device.session_id).await;
    assert_eq!(
        device.expect_close().await,
        (4100, reason.to_owned()),
        "{reason}"
    );
    assert_eq!(scenario.closed(device.session_id).await.0, reason);
    scenario.wait_no_session_processes(index).await;
}
