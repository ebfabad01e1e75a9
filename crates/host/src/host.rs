//! The state the tasks of the host service share ([`Host`]): the
//! configuration and state directory read at start, the doctor and what its
//! last run offers, the helpers' channels, the sessions and the control
//! connection's outbox; the gate and the start of a PTY. `bothy-host run`
//! ([`crate::service`]) makes it and starts the tasks; the control and data
//! connections and admin.sock use it.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use bothy_net::{Connector, ServerUrl};
use bothy_proto::codes::CloseDetail;
use bothy_proto::control::{LlmCredentials, Ready};
use bothy_proto::frame::TerminalSize;
use bothy_proto::jwk::Jwks;
use bothy_proto::jws::TerminalSessionClaims;
use bothy_proto::report::{ProfileKind, Report};
use tokio::sync::watch;
use uuid::Uuid;

use crate::EXIT_REFUSED_START;
use crate::admin::doctor_answer::DoctorAnswer;
use crate::channel::link::{Channel, ChannelError, PeerExpectation};
use crate::channel::{FromHelper, PtyStart, StartFailure, StartProgram, ToHelper};
use crate::clock::SharedClock;
use crate::config::HostServiceConfig;
use crate::confirm::endpoint::ConfirmHub;
use crate::confirm::peer::PeerRule;
use crate::confirm::protocol::Kind as ConfirmKind;
use crate::control::outbox::ControlHandle;
use crate::data::checks::{BindFailed, CheckState, LivePty};
use crate::doctor::{Doctor, HelperFault, HelperPort, RunKind, Scope, ServiceContext};
use crate::sessions::Sessions;
use crate::sessions::core::PtyIo;
use crate::state::{HostKeys, StateDir};

/// What the doctor's last run offers, read without waiting by the check order.
#[derive(Debug, Default, Clone)]
struct Offer {
    profiles: Vec<(String, ProfileKind)>,
    workdirs: HashMap<String, Vec<std::path::PathBuf>>,
    server_host_detected: bool,
}

/// Everything the tasks of the service share.
pub struct Host {
    /// The configuration read at start.
    pub config: HostServiceConfig,
    /// The state directory.
    pub state: StateDir,
    /// The host's keys.
    pub keys: HostKeys,
    /// This host's ID.
    pub host_id: Uuid,
    /// The server.
    pub server: ServerUrl,
    /// The TLS client.
    pub connector: Connector,
    /// The live sessions.
    pub sessions: Arc<Sessions>,
    /// The control connection's outbox.
    pub control: Arc<ControlHandle>,
    /// The keys of purpose terminal from the last hello or heartbeat_ack.
    pub jwks: Mutex<Jwks>,
    /// Where the service reads the time.
    pub clock: SharedClock,
    config_path: PathBuf,
    doctor: tokio::sync::Mutex<Doctor>,
    helpers: Helpers,
    offer: Mutex<Offer>,
    declaration: Mutex<Option<LlmCredentials>>,
    control_peer: Mutex<Option<IpAddr>>,
    /// The local confirmation (6.4); `None` without
    /// `host_service.require_local_confirm`.
    confirm: Option<Arc<ConfirmHub>>,
    /// Set when a run asked for through admin.sock refuses the start: the
    /// service reports, closes and exits 78.
    refused: std::sync::atomic::AtomicBool,
    stop: watch::Sender<bool>,
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("host_id", &self.host_id)
            .finish_non_exhaustive()
    }
}

impl Host {
    /// Reads the state directory (keys, pairing, stored declaration) and makes
    /// the service's shared state before any run; `Err` is the exit code of a
    /// refused start (logged). `stop` stops the service when it sends `true`.
    pub(crate) fn open(
        config: HostServiceConfig,
        config_path: PathBuf,
        clock: SharedClock,
        stop: watch::Sender<bool>,
    ) -> Result<Host, i32> {
        let state = StateDir::new(&config.state_dir, None);
        let (keys, pairing) = match (state.load_keys(), state.load_pairing()) {
            (Ok(Some(keys)), Ok(Some(pairing))) => (keys, pairing),
            (Err(error), _) | (_, Err(error)) => {
                tracing::error!(%error, "the state directory cannot be read");
                return Err(EXIT_REFUSED_START);
            }
            _ => {
                tracing::error!(
                    "this host is not paired: run bothy-host pair --server URL --code CODE"
                );
                return Err(EXIT_REFUSED_START);
            }
        };
        let server = match ServerUrl::parse(&pairing.server_url) {
            Ok(server) => server,
            Err(error) => {
                tracing::error!(%error, "pairing.json names no usable server");
                return Err(EXIT_REFUSED_START);
            }
        };
        let connector = match Connector::from_env() {
            Ok(connector) => connector,
            Err(error) => {
                tracing::error!(%error, "no TLS client");
                return Err(EXIT_REFUSED_START);
            }
        };
        let declaration = state.load_declaration().unwrap_or_else(|error| {
            tracing::warn!(%error, "the stored declaration is unreadable; it counts as unknown");
            None
        });
        let control = Arc::new(ControlHandle::default());
        let sessions = Arc::new(Sessions::new(control.clone()));
        let confirm = config.require_local_confirm.then(|| {
            Arc::new(ConfirmHub::new(
                PeerRule::new(
                    &config.service_user,
                    &config.session_users,
                    &config.state_dir,
                ),
                config.local_confirm_timeout,
            ))
        });
        Ok(Host {
            helpers: Helpers::new(&config),
            config,
            config_path,
            state,
            keys,
            host_id: pairing.host_id,
            server,
            connector,
            sessions,
            control,
            jwks: Mutex::new(Jwks::default()),
            clock,
            doctor: tokio::sync::Mutex::new(Doctor::new()),
            offer: Mutex::new(Offer::default()),
            declaration: Mutex::new(declaration),
            control_peer: Mutex::new(None),
            confirm,
            refused: std::sync::atomic::AtomicBool::new(false),
            stop,
        })
    }

    /// Whether the last run refuses the start; then the checks not passed and
    /// the refusal are logged.
    pub(crate) async fn refuses_start(&self) -> bool {
        if !self.doctor.lock().await.refuses_start() {
            return false;
        }
        for entry in self.doctor.lock().await.entries() {
            if !entry.ok {
                tracing::error!(
                    check = entry.check.as_str(),
                    code = entry.code.map_or("", |c| c.as_str()),
                    "doctor: not passed"
                );
            }
        }
        tracing::error!(
            "doctor refuses the start; the result is reported to the server, then the service exits"
        );
        true
    }

    /// A sender that stops the service.
    pub(crate) fn stopper(&self) -> watch::Sender<bool> {
        self.stop.clone()
    }

    /// The local confirmation, with `host_service.require_local_confirm`.
    pub(crate) fn confirm_hub(&self) -> Option<&Arc<ConfirmHub>> {
        self.confirm.as_ref()
    }

    /// The full run that `bothy-host doctor` asks for over admin.sock.
    pub async fn doctor_on_request(&self) -> DoctorAnswer {
        self.doctor_run(RunKind::Full, Scope::All).await;
        let doctor = self.doctor.lock().await;
        DoctorAnswer {
            lines: doctor.local_output(),
            failed: doctor.entries().iter().any(|e| !e.ok),
            exits: doctor.refuses_running_service(),
        }
    }

    /// The run of admin.sock refused the start: report, close, exit 78.
    pub fn stop_refused(&self) {
        self.refused
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let _ = self.stop.send(true);
    }

    /// Whether the service stops as a refused start.
    pub fn is_refused(&self) -> bool {
        self.refused.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Runs the doctor; on a change sends report and applies what the running
    /// sessions must suffer (7.4 "Gate in operation").
    pub(crate) async fn doctor_run(&self, kind: RunKind, scope: Scope<'_>) {
        let former = self.former_session_users();
        let declaration = *self.declaration.lock().unwrap_or_else(|p| p.into_inner());
        let server_url = self.server.https_base();
        let control_peer = *self.control_peer.lock().unwrap_or_else(|p| p.into_inner());
        let ctx = ServiceContext {
            config: &self.config,
            config_path: Some(&self.config_path),
            declaration,
            server_url: Some(&server_url),
            control_peer,
            former_session_users: former,
        };
        let mut doctor = self.doctor.lock().await;
        let changed = doctor.run(&ctx, &self.helpers, kind, scope).await;
        if changed {
            // What the report now says failed, for the operator (check and
            // code only, never a name).
            for entry in doctor.entries().iter().filter(|e| !e.ok) {
                tracing::warn!(
                    check = entry.check.as_str(),
                    code = entry.code.map_or("", |c| c.as_str()),
                    "doctor: not passed"
                );
            }
        }
        tracing::debug!(
            code = "doctor_run_done",
            full = kind == RunKind::Full,
            "a doctor run finished"
        );
        let enforcement = doctor.enforcement();
        *self.offer.lock().unwrap_or_else(|p| p.into_inner()) = Offer {
            profiles: doctor
                .reported_profiles()
                .into_iter()
                .map(|p| (p.name, p.kind))
                .collect(),
            workdirs: doctor
                .reported_session_users()
                .into_iter()
                .map(|u| {
                    let paths = (0..u.workdirs.len())
                        .filter_map(|i| doctor.workdir(&u.name, i))
                        .collect();
                    (u.name, paths)
                })
                .collect(),
            server_host_detected: doctor.server_host_detected(),
        };
        drop(doctor);
        if let Some(detail) = enforcement.end_all {
            self.sessions.enforce(None, detail);
        }
        for (user, detail) in &enforcement.end_users {
            self.sessions.enforce(Some(user), *detail);
        }
        if changed {
            self.control.request_report();
        }
    }

    fn former_session_users(&self) -> Vec<String> {
        self.state
            .load_bindings()
            .map(|bindings| {
                bindings
                    .into_keys()
                    .filter(|name| !self.config.session_users.contains(name))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The report of now (3.5).
    pub async fn report(&self) -> Report {
        let doctor = self.doctor.lock().await;
        Report {
            platform: "linux".to_owned(),
            os_version: crate::pair::os_version(),
            profiles: doctor.reported_profiles(),
            session_users: doctor.reported_session_users(),
            doctor: doctor.entries(),
            is_server_host: self.is_server_host(),
            require_local_confirm: self.config.require_local_confirm,
        }
    }

    /// A `ready` (login, or a changed declaration): the declaration is stored,
    /// and a change evaluates HD6 again and sends report (D-M2-42-15).
    pub async fn apply_ready(&self, ready: &Ready) {
        let changed = {
            let mut declaration = self.declaration.lock().unwrap_or_else(|p| p.into_inner());
            let changed = *declaration != Some(ready.llm_credentials);
            *declaration = Some(ready.llm_credentials);
            changed
        };
        if changed {
            if let Err(error) = self.state.store_declaration(ready.llm_credentials) {
                tracing::warn!(%error, "the declaration could not be stored");
            }
            self.doctor_run(RunKind::Light, Scope::All).await;
            self.control.request_report();
        }
    }

    /// The direct peer of the control connection (`None` through a proxy or
    /// while disconnected).
    pub fn set_control_peer(&self, peer: Option<IpAddr>) {
        *self.control_peer.lock().unwrap_or_else(|p| p.into_inner()) = peer;
    }

    /// HD5, or the server of the control connection is this machine (2.3).
    pub fn is_server_host(&self) -> bool {
        let peer_local = self
            .control_peer
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some_and(crate::doctor::is_own_address);
        peer_local
            || self
                .offer
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .server_host_detected
    }

    /// The state the check order reads and writes.
    pub fn check_state(&self) -> HostCheckState<'_> {
        HostCheckState {
            host: self,
            offer: self.offer.lock().unwrap_or_else(|p| p.into_inner()).clone(),
        }
    }

    /// The gate before a PTY of `osu` (7.4): a light run of its helper plus
    /// the service's checks, then the doctor's verdict.
    pub async fn gate(&self, osu: &str) -> Result<(), CloseDetail> {
        self.doctor_run(RunKind::Light, Scope::User(osu)).await;
        self.doctor.lock().await.gate(osu)
    }

    /// The local confirmation (6.4) before a PTY start or the replay of an
    /// attach: with `host_service.require_local_confirm`, consent of the
    /// person at the machine through an accepted agent within
    /// `host_service.local_confirm_timeout`, else `local_confirm_denied`.
    pub async fn confirm_locally(
        &self,
        kind: ConfirmKind,
        claims: &TerminalSessionClaims,
    ) -> Result<(), CloseDetail> {
        let Some(hub) = &self.confirm else {
            return Ok(());
        };
        match hub.confirm(kind, &claims.prf, &claims.osu).await {
            Ok(()) => {
                tracing::info!(
                    code = "local_confirm_allowed",
                    kind = kind.as_str(),
                    "the person at the machine allowed it"
                );
                Ok(())
            }
            Err(reason) => {
                tracing::warn!(
                    code = "local_confirm_denied",
                    kind = kind.as_str(),
                    reason = reason.as_str(),
                    "the local confirmation was not given"
                );
                Err(CloseDetail::LocalConfirmDenied)
            }
        }
    }

    /// The gate, the local confirmation and the PTY of a token's opening
    /// (6.1 step 7). Without a local confirmation the session connection to
    /// the helper is made and checked while the gate runs (D-707): nothing
    /// starts on it before the gate passed. The gate always runs to its end;
    /// a refusal drops the connection at once, even one still waiting for a
    /// restarted helper. With a local confirmation the connection is made
    /// after it, so it never waits idle for the person at the machine.
    pub async fn open_pty(
        &self,
        claims: &TerminalSessionClaims,
        size: TerminalSize,
    ) -> Result<PtyIo, CloseDetail> {
        if self.confirm.is_some() {
            self.gate(&claims.osu).await?;
            self.confirm_locally(ConfirmKind::Open, claims).await?;
            let program = self.program_of(claims)?;
            let channel = self.session_channel(&claims.osu).await?;
            return self.start_pty_on(channel, program, claims.sid, size).await;
        }
        let gate = self.gate(&claims.osu);
        let connecting = self.session_channel(&claims.osu);
        tokio::pin!(gate, connecting);
        let mut channel = None;
        let gate = loop {
            tokio::select! {
                gate = &mut gate => break gate,
                connected = &mut connecting, if channel.is_none() => channel = Some(connected),
            }
        };
        gate?;
        let channel = match channel {
            Some(channel) => channel,
            None => connecting.await,
        };
        let program = self.program_of(claims)?;
        self.start_pty_on(channel?, program, claims.sid, size).await
    }

    /// A new session connection to the helper of `osu`, its peer checked.
    /// Nothing starts on it until [`Host::start_pty_on`]; dropped unused, it
    /// closes without a message and the helper starts nothing.
    async fn session_channel(&self, osu: &str) -> Result<Channel, CloseDetail> {
        self.helpers.session_channel(osu).await.map_err(|fault| {
            tracing::warn!(code = %fault, "the session channel to the helper failed its check");
            if matches!(
                fault,
                HelperFault::PeerMismatch | HelperFault::PeerCheckUnavailable
            ) {
                // A failed peer check of a session channel: no new session, all
                // running sessions end (7.4 "Gate in operation").
                self.sessions.enforce(None, CloseDetail::HelperUntrusted);
                CloseDetail::HelperUntrusted
            } else {
                CloseDetail::PtyFailed
            }
        })
    }

    /// Starts `program` ([`Host::program_of`]) for session `session_id` on
    /// `channel`, a session connection from [`Host::session_channel`] to the
    /// helper of the token's `osu`.
    async fn start_pty_on(
        &self,
        mut channel: Channel,
        program: StartProgram,
        session_id: Uuid,
        size: TerminalSize,
    ) -> Result<PtyIo, CloseDetail> {
        let start = ToHelper::Start(Box::new(PtyStart {
            session_id,
            size,
            program,
        }));
        channel
            .send(&start)
            .await
            .map_err(|_| CloseDetail::PtyFailed)?;
        match channel.recv().await {
            Ok(Some(FromHelper::Started)) => {}
            Ok(Some(FromHelper::StartFailed(StartFailure::SharedLocation))) => {
                return Err(CloseDetail::SharedLocation);
            }
            _ => return Err(CloseDetail::PtyFailed),
        }
        let (from_helper, to_helper) = channel.into_split();
        Ok(PtyIo {
            from_helper,
            to_helper,
        })
    }

    /// The program of the token's profile (11.1); with organization, the API
    /// key read from the state directory for this start (7.4).
    fn program_of(&self, claims: &TerminalSessionClaims) -> Result<StartProgram, CloseDetail> {
        let profile = self
            .config
            .profile(&claims.prf)
            .ok_or(CloseDetail::ProfileUnknown)?;
        match profile.kind {
            ProfileKind::Shell => Ok(StartProgram::Shell),
            ProfileKind::Command => {
                let command = profile
                    .command
                    .as_ref()
                    .ok_or(CloseDetail::ProfileUnknown)?;
                Ok(StartProgram::Command {
                    program: command.program.clone(),
                    args: command.args.clone(),
                })
            }
            ProfileKind::Claude => {
                let index = claims.wdi.ok_or(CloseDetail::ProfileUnknown)? as usize;
                let workdir = self
                    .offer
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .workdirs
                    .get(&claims.osu)
                    .and_then(|list| list.get(index).cloned())
                    .ok_or(CloseDetail::SharedLocation)?;
                let declaration = *self.declaration.lock().unwrap_or_else(|p| p.into_inner());
                match declaration {
                    Some(LlmCredentials::Organization) => {
                        let api_key = self
                            .state
                            .claude_api_key()
                            .ok()
                            .flatten()
                            .ok_or(CloseDetail::PtyFailed)?;
                        Ok(StartProgram::ClaudeOrganization { workdir, api_key })
                    }
                    Some(LlmCredentials::Personal) => Ok(StartProgram::ClaudePersonal { workdir }),
                    _ => Err(CloseDetail::ProfileUnknown),
                }
            }
        }
    }
}

/// [`CheckState`] over the service (5.3 steps 6–12).
#[derive(Debug)]
pub struct HostCheckState<'a> {
    host: &'a Host,
    offer: Offer,
}

impl CheckState for HostCheckState<'_> {
    fn remember_jti(&mut self, jti: Uuid, until_ms: i64) -> bool {
        self.host
            .sessions
            .remember_jti(jti, until_ms, self.host.clock.now_ms())
    }

    fn live_pty(&self, session_id: Uuid) -> Option<LivePty> {
        self.host.sessions.pty(session_id).map(|pty| pty.owner)
    }

    fn offered_profile(&self, name: &str) -> Option<ProfileKind> {
        self.offer
            .profiles
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, kind)| *kind)
    }

    fn is_session_user(&self, osu: &str) -> bool {
        self.host.config.session_users.iter().any(|u| u == osu)
    }

    fn bind(&mut self, osu: &str, sub: Uuid) -> Result<bool, BindFailed> {
        self.host.state.bind(osu, sub).map_err(|error| {
            tracing::error!(%error, "bindings.json could not be written");
            BindFailed
        })
    }

    fn workdir_count(&self, osu: &str) -> usize {
        self.offer.workdirs.get(osu).map_or(0, Vec::len)
    }
}

/// How long a connection to a helper waits for the service manager to start
/// it (again): a helper that ended — a crash, or `kill -9` by its own session
/// user — is started again by the service manager after its restart pause
/// (supervise: at most 5 s; systemd: `RestartSec=`), and this bound covers
/// that pause plus the start (issue 15, D-330).
pub const HELPER_RESTART_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Pause between two looks at what the service manager reports.
const HELPER_RESTART_POLL: std::time::Duration = std::time::Duration::from_millis(50);

/// The helpers' channels: one main connection per session user for the
/// checks, and a new session connection per PTY, each checked against what the
/// service manager reports (D-M2-42-11).
///
/// A broken channel ends only that helper's sessions (6.2): the next use
/// connects again, waiting up to [`HELPER_RESTART_WAIT`] for the helper the
/// service manager starts again, and checks its peer against the main PID the
/// service manager reports then. Only a helper that stays away that long is
/// `helper_unreachable`, and only a peer that is not that process is
/// `peer_mismatch` (HD10, D-330).
#[derive(Debug)]
pub struct Helpers {
    config: HostServiceConfig,
    /// One main connection per session user, each behind its own lock so a
    /// long check of one helper (the entry scan) holds up no other.
    main: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Option<Channel>>>>>,
}

impl Helpers {
    fn new(config: &HostServiceConfig) -> Helpers {
        Helpers {
            config: config.clone(),
            main: Mutex::new(HashMap::new()),
        }
    }

    /// A checked connection to the helper of `user`, waiting (bounded) while
    /// the service manager starts it again.
    async fn connect(&self, user: &str) -> Result<Channel, HelperFault> {
        let deadline = tokio::time::Instant::now() + HELPER_RESTART_WAIT;
        loop {
            match self.connect_once(user).await {
                Err(HelperFault::Unreachable) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(HELPER_RESTART_POLL).await;
                }
                outcome => return outcome,
            }
        }
    }

    /// One attempt: the main PID the service manager reports now, the
    /// connection, the peer check.
    async fn connect_once(&self, user: &str) -> Result<Channel, HelperFault> {
        // The account database may be a network service (NSS): looked up on
        // the blocking thread that asks the service manager anyway, as the
        // service runs on one thread (D-705).
        let config = self.config.clone();
        let name = user.to_owned();
        let (account, main_pid) = tokio::task::spawn_blocking(move || {
            let account = nix::unistd::User::from_name(&name)
                .ok()
                .flatten()
                .ok_or(HelperFault::Unreachable)?;
            let main_pid = crate::manager::helper_main_pid(&config, &name)?;
            Ok::<_, HelperFault>((account, main_pid))
        })
        .await
        .map_err(|_| HelperFault::Unreachable)??;
        let expected = PeerExpectation {
            uid: account.uid.as_raw(),
            main_pid,
        };
        match Channel::connect(&self.config.helper_endpoint(user), expected).await {
            Ok(channel) => Ok(channel),
            Err(ChannelError::PeerMismatch) => {
                // The service manager may have started a new helper between
                // the read of its main PID and the handover (a restart): then
                // it reports another PID now, and the attempt counts as not
                // reached (the loop tries again with the new PID). The same
                // PID means the peer is not the helper it reports: HD10.
                match self.main_pid(user).await {
                    Ok(now) if now == main_pid => Err(HelperFault::PeerMismatch),
                    Ok(_) | Err(HelperFault::Unreachable) => Err(HelperFault::Unreachable),
                    Err(fault) => Err(fault),
                }
            }
            Err(error) => Err(HelperFault::from(error)),
        }
    }

    /// The main PID of the helper of `user` as the service manager reports it
    /// (a file read or `systemctl`: on a blocking thread).
    async fn main_pid(&self, user: &str) -> Result<u32, HelperFault> {
        let config = self.config.clone();
        let user = user.to_owned();
        tokio::task::spawn_blocking(move || crate::manager::helper_main_pid(&config, &user))
            .await
            .map_err(|_| HelperFault::Unreachable)?
            .map_err(HelperFault::from)
    }

    /// A new, checked session connection to the helper of `user`.
    async fn session_channel(&self, user: &str) -> Result<Channel, HelperFault> {
        self.connect(user).await
    }
}

/// Sends one check request on the main connection; the answer, or `None`
/// when the connection broke.
async fn ask(channel: &mut Channel, request: Vec<u8>) -> Option<Vec<u8>> {
    channel.send(&ToHelper::Checks(request)).await.ok()?;
    match channel.recv().await {
        Ok(Some(FromHelper::CheckResults(bytes))) => Some(bytes),
        _ => None,
    }
}

impl HelperPort for Helpers {
    async fn checks(&self, user: &str, request: Vec<u8>) -> Result<Vec<u8>, HelperFault> {
        let slot = Arc::clone(
            self.main
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .entry(user.to_owned())
                .or_default(),
        );
        let mut main = slot.lock().await;
        // A main connection that broke means the helper ended (its PTYs ended
        // with it, 6.2) or dropped the connection: one new connection, to the
        // helper the service manager reports now, asks again.
        for _ in 0..2 {
            if main.is_none() {
                let mut channel = self.connect(user).await?;
                channel
                    .send(&ToHelper::Main)
                    .await
                    .map_err(|_: ChannelError| HelperFault::Unreachable)?;
                *main = Some(channel);
            }
            let Some(channel) = main.as_mut() else {
                return Err(HelperFault::Unreachable);
            };
            if let Some(bytes) = ask(channel, request.clone()).await {
                return Ok(bytes);
            }
            *main = None;
            tracing::info!(
                code = "helper_channel_lost",
                "the main connection to a helper broke; connecting again"
            );
        }
        Err(HelperFault::Unreachable)
    }
}
