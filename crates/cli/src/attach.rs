//! Opening and attaching a session, and keeping it attached (6.1, 6.2):
//! `bothy open`, `bothy attach` (by ID, by the start of one, or the only
//! detached session), the quick reattach with the device key's proof, and
//! the reattach by itself after a lost connection, a server that stopped
//! answering pings, or a server restart (4013).
//!
//! # The quick path (6.2, docs/decisions.md D-375)
//! From the same device in the same login within
//! `terminal.quick_reattach_window` after the loss, an attach needs no
//! step-up: the client signs the server's nonce with its device key. The
//! client does not know the window nor whether the server still counts it
//! as the session's device, so it tries the quick path for every detached
//! session and falls back to a step-up when the server asks for one. A
//! closed session is said before anything is asked.
//!
//! # Reattach by itself (D-376)
//! After a loss the client keeps trying for [`RETRY_FOR`] (the default of
//! `terminal.quick_reattach_window`): a server that does not answer yet (it
//! restarts), a host that is not connected yet (409 `host_unavailable` while
//! the host service reconnects to a restarted server) and a connection that
//! breaks again are all expected, with a pause growing to 2 s, and said once
//! each on stderr. After that time it gives up and says how to attach.

use std::time::Duration;

use uuid::Uuid;

use bothy_api::terminal::{
    AttachChallenge, AttachTerminalSessionRequest, DeviceProof, OpenTerminalSessionRequest,
    TerminalSession, TerminalSessionGrant,
};
use bothy_noise::EphemeralKey;
use bothy_proto::b64;
use bothy_proto::jws::ephemeral_key_hash;
use bothy_proto::stream;

use crate::api::Api;
use crate::cli::Alive;
use crate::close::Reaction;
use crate::commands::common::{TRIES, color_enabled, logged_in, step_up, totp_form, totp_step_up};
use crate::commands::hosts::{
    check_foreign_assignee, check_pin, host_uuid, offered_pin, resolve_host,
};
use crate::commands::sessions::{list_sessions, resolve_session, session_uuid};
use crate::dirs::Dirs;
use crate::error::{ClientError, EXIT_SESSION_FAILURE};
use crate::login::{self, StoredLogin};
use crate::pins::{Pin, PinCheck, Pins};
use crate::progress::Spinner;
use crate::terminal::{self, Connected, Ended, Grant, LocalInput};

/// How long the client tries to reattach by itself after a loss (the
/// default of `terminal.quick_reattach_window`).
pub const RETRY_FOR: Duration = Duration::from_secs(60);

/// The longest pause between two tries of a reattach.
const RETRY_PAUSE_MAX: Duration = Duration::from_secs(2);

/// `bothy open HOST`.
pub async fn open(
    dirs: &Dirs,
    wanted: &str,
    profile: &str,
    workdir: Option<u32>,
    alive: Alive,
) -> Result<i32, ClientError> {
    let (stored, api) = logged_in(dirs)?;
    let host = resolve_host(&api, wanted).await?;
    let host_id = host_uuid(&host)?;
    let offered = offered_pin(&host)?;
    let pin_changed = pin_check(dirs, &stored, host_id, &offered)?;
    check_foreign_assignee(&api, &host).await?;
    let step_up_id = step_up(&api).await?;
    let ephemeral = new_ephemeral()?;
    let size = crate::tty::window_size();
    let body = OpenTerminalSessionRequest {
        profile: profile.to_owned(),
        columns: size.columns().into(),
        rows: size.rows().into(),
        client_ephemeral_key_hash: ephemeral_hash(&ephemeral),
        workdir_index: workdir,
        step_up_id: Some(step_up_id),
        pin_changed: pin_changed.then_some(true),
    };
    let spinner = Spinner::start("opening the session");
    let answer: Result<TerminalSessionGrant, _> = api
        .post_as(&format!("/api/v1/hosts/{host_id}/terminal/sessions"), &body)
        .await;
    drop(spinner);
    let grant = Grant::from_api(&answer?)?;
    let session = Session {
        dirs,
        stored: &stored,
        api: &api,
        host_id,
        session_id: grant.session_id,
        expected: offered,
        alive,
    };
    session.run(grant, ephemeral).await
}

/// `bothy attach [SESSION] [--host HOST]` (D-375): the session by its ID or
/// the start of it, or without one the person's only detached session (on
/// HOST). A closed session is said at once; a detached one is tried on the
/// quick path first.
pub async fn attach(
    dirs: &Dirs,
    typed: Option<&str>,
    host: Option<&str>,
    alive: Alive,
) -> Result<i32, ClientError> {
    let (stored, api) = logged_in(dirs)?;
    let row = match (typed, host) {
        (Some(typed), None) => resolve_session(&api, typed).await?,
        (None, host) => only_detached(&api, host).await?,
        (Some(_), Some(_)) => {
            return Err(ClientError::Usage(
                "name a session or --host, not both".into(),
            ));
        }
    };
    let session_id = session_uuid(&row)?;
    if row.is_closed() {
        return Err(ClientError::Stream(closed_end(&row)));
    }
    let host_id = Uuid::parse_str(&row.host_id)
        .map_err(|_| ClientError::Protocol("a host_id that is no UUID".into()))?;
    let host: bothy_api::hosts::Host = api.get_as(&format!("/api/v1/hosts/{host_id}")).await?;
    let offered = offered_pin(&host)?;
    let pin_changed = pin_check(dirs, &stored, host_id, &offered)?;
    let session = Session {
        dirs,
        stored: &stored,
        api: &api,
        host_id,
        session_id,
        expected: offered,
        alive,
    };
    let ephemeral = new_ephemeral()?;
    let mut body = attach_body(&ephemeral, pin_changed);
    let mut grant = None;
    if row.state == "detached" {
        session.prove(&mut body, &ephemeral).await?;
        match session.attach_grant(&body).await {
            Ok(quick) => grant = Some(quick),
            // Not the same device and login, or the window has passed.
            Err(ClientError::Problem(problem)) if problem.is("step_up_required", None) => {
                body.device_proof = None;
            }
            Err(e) => return Err(e),
        }
    }
    let grant = match grant {
        Some(grant) => grant,
        None => {
            body.step_up_id = Some(step_up(&api).await?);
            session.attach_grant(&body).await?
        }
    };
    session.run(grant, ephemeral).await
}

/// How long `bothy attach` without a session looks again while the
/// person's sessions are still active (the server notices a gone device
/// within moments).
const DETACH_NOTICE: Duration = Duration::from_secs(3);

/// The person's only detached session (on the host `host`, when named).
async fn only_detached(api: &Api, host: Option<&str>) -> Result<TerminalSession, ClientError> {
    let host_id = match host {
        Some(wanted) => Some(host_uuid(&resolve_host(api, wanted).await?)?),
        None => None,
    };
    // A client that was just killed (or lost its connection) leaves its
    // session active until the server has seen the stream end, a moment
    // later: while sessions are still active, look again for a little while
    // before saying there is none (as the reattach waits, D-376).
    let deadline = tokio::time::Instant::now() + DETACH_NOTICE;
    let mut pause = Duration::from_millis(50);
    let detached: Vec<TerminalSession> = loop {
        let open = list_sessions(api, host_id, false, 200).await?;
        let still_active = open.iter().any(|s| s.state == "active");
        let detached: Vec<TerminalSession> =
            open.into_iter().filter(|s| s.state == "detached").collect();
        if !detached.is_empty() || !still_active || tokio::time::Instant::now() >= deadline {
            break detached;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(500));
    };
    match detached.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err(ClientError::NoSession(match host {
            Some(host) => format!("you have no detached session on {host}"),
            None => "you have no detached session".into(),
        })),
        several => {
            let ids: Vec<&str> = several
                .iter()
                .map(|s| crate::display::short_id(&s.session_id))
                .collect();
            Err(ClientError::Usage(format!(
                "you have {} detached sessions ({}): name one (bothy attach SESSION)",
                several.len(),
                ids.join(", ")
            )))
        }
    }
}

/// The end of a closed session's row, as the stream would have said it.
fn closed_end(row: &TerminalSession) -> crate::close::StreamEnd {
    crate::close::StreamEnd {
        code: bothy_proto::codes::CloseCode::TerminalClosed.as_u16(),
        reason: row.close_reason.clone().unwrap_or_default(),
    }
}

fn new_ephemeral() -> Result<EphemeralKey, ClientError> {
    EphemeralKey::generate()
        .map_err(|_| ClientError::Protocol("no randomness for the ephemeral key".into()))
}

/// `client_ephemeral_key_hash` and, after a confirmed key change, `pin_changed`.
/// base64url of SHA-256 of the ephemeral key (6.1 step 1).
fn ephemeral_hash(ephemeral: &EphemeralKey) -> String {
    b64::encode(&ephemeral_key_hash(&ephemeral.public()))
}

/// The body of an attach with the new ephemeral key; the step-up or the
/// device's proof is added by the caller.
fn attach_body(ephemeral: &EphemeralKey, pin_changed: bool) -> AttachTerminalSessionRequest {
    AttachTerminalSessionRequest {
        client_ephemeral_key_hash: ephemeral_hash(ephemeral),
        step_up_id: None,
        device_proof: None,
        pin_changed: pin_changed.then_some(true),
    }
}

/// The pin check of 5.5 for `host_id` (before any step-up).
fn pin_check(
    dirs: &Dirs,
    stored: &StoredLogin,
    host_id: Uuid,
    offered: &Pin,
) -> Result<bool, ClientError> {
    let pins = Pins::load(dirs)?;
    check_pin(
        &pins,
        &stored.server,
        &host_id.hyphenated().to_string(),
        offered,
        color_enabled(),
    )
}

/// One session of this client and what it needs to keep it attached.
struct Session<'a> {
    dirs: &'a Dirs,
    stored: &'a StoredLogin,
    api: &'a Api,
    host_id: Uuid,
    session_id: Uuid,
    /// The host key the pin check saw.
    expected: Pin,
    alive: Alive,
}

impl Session<'_> {
    /// Adds `device_proof` for the quick path: the server's nonce signed
    /// with this device's key.
    async fn prove(
        &self,
        body: &mut AttachTerminalSessionRequest,
        ephemeral: &EphemeralKey,
    ) -> Result<(), ClientError> {
        let session_id = self.session_id;
        let challenge: AttachChallenge = self
            .api
            .post_empty_as(&format!(
                "/api/v1/terminal/sessions/{session_id}/attach-challenge"
            ))
            .await?;
        let nonce = challenge.nonce.as_str();
        let device_key = login::device_key(self.dirs)?;
        let signing = ed25519_dalek::SigningKey::from_bytes(device_key.seed());
        let cek = b64::encode(&ephemeral_key_hash(&ephemeral.public()));
        use ed25519_dalek::Signer;
        let signature = signing.sign(&stream::quick_reattach_proof_message(
            session_id, nonce, &cek,
        ));
        body.device_proof = Some(DeviceProof {
            nonce: nonce.to_owned(),
            signature: b64::encode(&signature.to_bytes()),
        });
        Ok(())
    }

    /// terminal.attach (6.2) with `body`; the grant.
    async fn attach_grant(
        &self,
        body: &AttachTerminalSessionRequest,
    ) -> Result<Grant, ClientError> {
        let answer: TerminalSessionGrant = self
            .api
            .post_as(
                &format!("/api/v1/terminal/sessions/{}/attach", self.session_id),
                body,
            )
            .await?;
        Grant::from_api(&answer)
    }

    /// Checks the grant's key against the one the pin check saw, runs the
    /// handshake and pins the key (5.5: the first successful opening pins
    /// it; a confirmed change replaces the pin).
    async fn connect(
        &self,
        grant: &Grant,
        ephemeral: EphemeralKey,
    ) -> Result<Connected, ClientError> {
        if grant.pin.noise_public_key != self.expected.noise_public_key
            || grant.pin.key_generation != self.expected.key_generation
        {
            return Err(ClientError::Protocol(
                "the host key changed while the session was being opened; run the command again"
                    .into(),
            ));
        }
        let connected = terminal::connect(
            self.api,
            &self.stored.access_token,
            self.host_id,
            grant,
            ephemeral,
        )
        .await?;
        let mut pins = Pins::load(self.dirs)?;
        let host_text = self.host_id.hyphenated().to_string();
        if pins.check(&self.stored.server, &host_text, &grant.pin) != PinCheck::Same {
            pins.pin(&self.stored.server, &host_text, grant.pin.clone());
            pins.store(self.dirs)?;
        }
        Ok(connected)
    }

    /// Connects a grant, runs the session and turns its end into the exit
    /// status; a loss is reattached by itself (module docs).
    async fn run(&self, grant: Grant, ephemeral: EphemeralKey) -> Result<i32, ClientError> {
        let session_id = self.session_id;
        let mut connected = self.connect(&grant, ephemeral).await?;
        let mut input = LocalInput::start();
        let interval = Duration::from_secs(self.alive.server_alive_interval);
        loop {
            let why = match connected.run(&mut input, interval).await? {
                Ended::Exited(code) => return Ok(code),
                Ended::Detached => {
                    eprintln!(
                        "Session {session_id} is detached and runs on; bothy attach {session_id} takes it back."
                    );
                    return Ok(EXIT_SESSION_FAILURE);
                }
                Ended::Closed { end, by_escape } => {
                    if by_escape && end.reaction() == Reaction::Ended {
                        eprintln!("Session {session_id} closed.");
                        return Ok(EXIT_SESSION_FAILURE);
                    }
                    if !end.reattachable() {
                        return Err(ClientError::Stream(end));
                    }
                    format!("the server closed the connection ({})", end.code_name())
                }
                Ended::Lost(None) => "the connection was lost".to_owned(),
                Ended::Lost(Some(seconds)) => {
                    format!("the server has not answered for {seconds} s")
                }
            };
            eprintln!("bothy: {why}; reattaching session {session_id} ...");
            connected = self.reattach(&mut input).await?;
            eprintln!("bothy: reattached.");
        }
    }

    /// Attaches the session again after a loss (module docs): the quick
    /// path, or a step-up typed on the session's input once the server wants
    /// one; transient failures are tried again for [`RETRY_FOR`].
    async fn reattach(&self, input: &mut LocalInput) -> Result<Connected, ClientError> {
        let mut spinner = Some(Spinner::start("reattaching"));
        let deadline = tokio::time::Instant::now() + RETRY_FOR;
        let mut pause = Duration::from_millis(250);
        let mut step_up: Option<String> = None;
        let mut said: Vec<&'static str> = Vec::new();
        loop {
            let ephemeral = new_ephemeral()?;
            let result = async {
                self.wait_detached(deadline).await?;
                let mut body = attach_body(&ephemeral, false);
                match &step_up {
                    Some(id) => body.step_up_id = Some(id.clone()),
                    None => self.prove(&mut body, &ephemeral).await?,
                }
                let grant = self.attach_grant(&body).await?;
                self.connect(&grant, ephemeral).await
            }
            .await;
            let error = match result {
                Ok(connected) => return Ok(connected),
                Err(error) => error,
            };
            let transient = match &error {
                ClientError::Problem(problem)
                    if problem.is("step_up_required", None) && step_up.is_none() =>
                {
                    drop(spinner.take());
                    eprintln!("bothy: the quick reattach window has passed; a step-up is needed.");
                    step_up = Some(self.step_up_on(input).await?);
                    continue;
                }
                ClientError::Problem(problem) if problem.is("host_unavailable", None) => {
                    Some("the host is not connected yet (it reconnects by itself); still trying")
                }
                ClientError::Problem(problem)
                    if matches!(problem.status, 502..=504) || problem.code == "unavailable" =>
                {
                    Some("the server is not ready yet; still trying")
                }
                ClientError::Net { .. } => Some("the server does not answer yet; still trying"),
                ClientError::Stream(end) if end.reattachable() => {
                    Some("the connection broke again; still trying")
                }
                _ => None,
            };
            let Some(what) = transient else {
                return Err(error);
            };
            if tokio::time::Instant::now() >= deadline {
                drop(spinner.take());
                eprintln!(
                    "bothy: {} is still not reachable after {} s.",
                    self.api.server(),
                    RETRY_FOR.as_secs()
                );
                return Err(ClientError::Detached {
                    session_id: self.session_id,
                    why: "the reattach gave up",
                });
            }
            if !said.contains(&what) {
                said.push(what);
                drop(spinner.take());
                eprintln!("bothy: {what}");
                spinner = Some(Spinner::start("reattaching"));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(RETRY_PAUSE_MAX);
        }
    }

    /// Waits until the server has noticed the loss too (the session is
    /// detached), at most until `deadline`; a session that ended meanwhile
    /// ends with its close_reason. Only a detached session is reattached
    /// without a step-up (6.2).
    async fn wait_detached(&self, deadline: tokio::time::Instant) -> Result<(), ClientError> {
        let mut pause = Duration::from_millis(50);
        loop {
            let row: TerminalSession = self
                .api
                .get_as(&format!("/api/v1/terminal/sessions/{}", self.session_id))
                .await?;
            match row.state.as_str() {
                "detached" => return Ok(()),
                "closed" => return Err(ClientError::Stream(closed_end(&row))),
                _ if tokio::time::Instant::now() >= deadline => return Ok(()),
                _ => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(1));
                }
            }
        }
    }

    /// A TOTP step-up whose code is typed on the session's input (the
    /// terminal is out of raw mode while the session waits).
    async fn step_up_on(&self, input: &mut LocalInput) -> Result<String, ClientError> {
        let mut tries = 0;
        loop {
            eprint!("TOTP code for the step-up: ");
            let typed = input.read_line().await.ok_or(ClientError::Cancelled)?;
            let Some(code) = totp_form(&typed) else {
                eprintln!("That is not a 6-digit code; type the code your app shows.");
                continue;
            };
            tries += 1;
            match totp_step_up(self.api, code).await {
                Ok(step_up_id) => return Ok(step_up_id),
                Err(ClientError::Problem(problem))
                    if tries < TRIES && problem.is("step_up_required", Some("totp_invalid")) =>
                {
                    eprintln!("That code was wrong or used already; wait for the next one.");
                }
                Err(e) => return Err(e),
            }
        }
    }
}
