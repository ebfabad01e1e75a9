//! The commands: each reads the stored login, calls the server and prints a
//! result; errors come back to [`run`], which prints them once.

use std::io::IsTerminal;

use serde_json::{Value, json};
use uuid::Uuid;

use bothy_net::ServerUrl;
use bothy_noise::EphemeralKey;
use bothy_proto::b64;
use bothy_proto::jws::ephemeral_key_hash;

use crate::api::Api;
use crate::cli::{Cli, Command};
use crate::close::Reaction;
use crate::dirs::Dirs;
use crate::error::ClientError;
use crate::login::{self, StoredLogin};
use crate::pins::{Pin, PinCheck, Pins};
use crate::progress::Spinner;
use crate::prompt::Tty;
use crate::terminal::{self, Connected, Ended, Grant, LocalInput};

/// The exit code of a failed command, and of a session that ended without
/// an exit code of its own (like ssh's 255).
pub const EXIT_FAILURE: i32 = 1;
/// The exit code of `open` and `attach` when the session did not end with
/// the program's exit code.
pub const EXIT_SESSION_FAILURE: i32 = 255;

/// Whether stderr may carry colour: a terminal, and `NO_COLOR` unset or empty.
pub fn color_enabled() -> bool {
    std::io::stderr().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|value| value.is_empty())
}

/// Runs a command; returns the process's exit code.
pub fn run(cli: Cli) -> i32 {
    let session_command = matches!(cli.command, Command::Open { .. } | Command::Attach { .. });
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("bothy: runtime: {e}");
            return EXIT_FAILURE;
        }
    };
    match runtime.block_on(dispatch(cli.command)) {
        Ok(code) => code,
        Err(error) => {
            error.print(color_enabled());
            if session_command {
                EXIT_SESSION_FAILURE
            } else {
                EXIT_FAILURE
            }
        }
    }
}

async fn dispatch(command: Command) -> Result<i32, ClientError> {
    if let Command::Completions { shell } = command {
        let mut command = <Cli as clap::CommandFactory>::command();
        clap_complete::generate(shell, &mut command, "bothy", &mut std::io::stdout());
        return Ok(0);
    }
    let dirs = Dirs::from_env()?;
    match command {
        Command::Login {
            server,
            username,
            device_name,
        } => login(&dirs, &server, username, device_name).await,
        Command::Enroll { server } => enroll(&server).await,
        Command::Logout => logout(&dirs).await,
        Command::Whoami { json } => whoami(&dirs, json).await,
        Command::Hosts { json } => hosts(&dirs, json).await,
        Command::Open {
            host,
            profile,
            workdir,
        } => open(&dirs, &host, &profile, workdir).await,
        Command::Sessions { host, json } => sessions(&dirs, host.as_deref(), json).await,
        Command::Attach { session } => attach(&dirs, &session).await,
        Command::Close { session } => close(&dirs, &session).await,
        Command::Host { action } => crate::host_admin::run(&dirs, action).await,
        Command::Grant {
            host,
            person,
            group,
        } => crate::host_admin::grant(&dirs, &host, person.as_deref(), group.as_deref()).await,
        Command::Grants { host, json } => {
            crate::host_admin::grants(&dirs, host.as_deref(), json).await
        }
        Command::Revoke { grant } => crate::host_admin::revoke(&dirs, &grant).await,
        Command::Person { action } => crate::host_admin::person(&dirs, action).await,
        // Answered above, before the folders are needed.
        Command::Completions { .. } => Ok(0),
    }
}

/// The stored login and an API client with its token.
pub(crate) fn logged_in(dirs: &Dirs) -> Result<(StoredLogin, Api), ClientError> {
    let stored = StoredLogin::load(dirs)?;
    let server = ServerUrl::parse(&stored.server)?;
    let api = Api::new(server, Some(stored.access_token.clone()))?;
    Ok((stored, api))
}

fn hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|name| name.into_string().ok())
        .unwrap_or_else(|| "this computer".into())
}

async fn login(
    dirs: &Dirs,
    server: &str,
    username: Option<String>,
    device_name: Option<String>,
) -> Result<i32, ClientError> {
    let server = ServerUrl::parse(server)?;
    let api = Api::new(server.clone(), None)?;
    let key = login::device_key(dirs)?;
    let mut tty = Tty::open("the login")?;
    let username = match username {
        Some(name) => name,
        None => tty.ask("Username: ")?.trim().to_owned(),
    };
    let password = tty.ask_secret("Password: ")?;
    let totp = tty.ask("TOTP code: ")?;
    let device_name = device_name.unwrap_or_else(|| format!("bothy on {}", hostname()));
    let body = json!({
        "username": username,
        "password": password.as_str(),
        "totp": totp.trim(),
        "device_public_key": login::device_public_key(&key),
        "device_name": device_name,
    });
    let answer = api.post("/api/v1/auth/login", &body).await;
    drop(body);
    let answer = answer?;
    let field = |key: &str| {
        answer
            .get(key)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| ClientError::Protocol(format!("the login answer lacks {key}")))
    };
    let stored = StoredLogin {
        server: server.https_base(),
        username: username.clone(),
        access_token: field("access_token")?,
        login_session_id: field("login_session_id")?,
        device_id: field("device_id")?,
        expires_at: answer
            .get("expires_at")
            .and_then(Value::as_i64)
            .unwrap_or(0),
    };
    stored.store(dirs)?;
    println!(
        "Logged in as {username} on {server} (device {}).",
        stored.device_id
    );
    Ok(0)
}

async fn enroll(server: &str) -> Result<i32, ClientError> {
    let server = ServerUrl::parse(server)?;
    let api = Api::new(server.clone(), None)?;
    let mut tty = Tty::open("the enrollment")?;
    let code = tty.ask_secret("Enrollment code: ")?;
    let password = loop {
        let first = tty.ask_secret("New password: ")?;
        let again = tty.ask_secret("The password again: ")?;
        if *first == *again {
            break first;
        }
        tty.say("The two passwords differ; once more.\n")?;
    };
    let started = api
        .post(
            "/api/v1/auth/enroll",
            &json!({"code": code.trim(), "password": password.as_str()}),
        )
        .await?;
    drop(password);
    let uri = started
        .get("otpauth_uri")
        .and_then(Value::as_str)
        .ok_or_else(|| ClientError::Protocol("no otpauth_uri in the answer".into()))?;
    let username = started
        .get("username")
        .and_then(Value::as_str)
        .unwrap_or("-")
        .to_owned();
    tty.say(&format!(
        "Add this to your authenticator app (it holds your TOTP secret; show it to no one):\n  {uri}\n"
    ))?;
    let totp = tty.ask("The code your app shows now: ")?;
    api.post(
        "/api/v1/auth/enroll/confirm",
        &json!({"code": code.trim(), "totp": totp.trim()}),
    )
    .await?;
    println!("Enrolled as {username}. Now: bothy login --server {server} --username {username}");
    Ok(0)
}

async fn logout(dirs: &Dirs) -> Result<i32, ClientError> {
    let (stored, api) = logged_in(dirs)?;
    match api.post_empty("/api/v1/auth/logout").await {
        Ok(_) => {}
        // Ended on the server already: forget it here as well.
        Err(ClientError::Problem(problem)) if problem.code == "unauthenticated" => {}
        Err(e) => return Err(e),
    }
    StoredLogin::remove(dirs)?;
    println!("Logged out of {}.", stored.server);
    Ok(0)
}

async fn whoami(dirs: &Dirs, as_json: bool) -> Result<i32, ClientError> {
    let (stored, api) = logged_in(dirs)?;
    let mut me = api.get("/api/v1/auth/session").await?;
    if as_json {
        if let Some(object) = me.as_object_mut() {
            object.insert("server".into(), json!(stored.server));
        }
        println!("{me}");
        return Ok(0);
    }
    let text = |key: &str| {
        me.get(key)
            .and_then(Value::as_str)
            .unwrap_or("-")
            .to_owned()
    };
    println!(
        "{} ({}) on {}",
        text("username"),
        text("role"),
        stored.server
    );
    println!("device {}", text("device_id"));
    Ok(0)
}

/// The badge of the LLM login (12, "Every client shows").
fn llm_badge(host: &Value) -> &'static str {
    match host.get("llm_credentials").and_then(Value::as_str) {
        Some("personal") => "Personal",
        Some("organization") => "Organization",
        _ => "None",
    }
}

pub(crate) async fn list_hosts(api: &Api) -> Result<Vec<Value>, ClientError> {
    api.list("/api/v1/hosts", "hosts").await
}

/// The list `key` at `path`, of the host named `host` only where one is
/// named (`?host_id=`).
pub(crate) async fn list_of_host(
    api: &Api,
    path: &str,
    key: &str,
    host: Option<&str>,
) -> Result<Vec<Value>, ClientError> {
    let path = match host {
        Some(wanted) => {
            let host = resolve_host(api, wanted).await?;
            format!("{path}?host_id={}", uuid_of(&host, "id")?)
        }
        None => path.to_owned(),
    };
    api.list(&path, key).await
}

/// The host named `wanted` (an ID, or a name that only one host has).
pub(crate) async fn resolve_host(api: &Api, wanted: &str) -> Result<Value, ClientError> {
    let hosts = list_hosts(api).await?;
    let by_id = hosts
        .iter()
        .find(|h| h.get("id").and_then(Value::as_str) == Some(wanted));
    if let Some(host) = by_id {
        return Ok(host.clone());
    }
    let named: Vec<&Value> = hosts
        .iter()
        .filter(|h| h.get("name").and_then(Value::as_str) == Some(wanted))
        .collect();
    match named.as_slice() {
        [one] => Ok((*one).clone()),
        [] => Err(ClientError::UnknownHost(wanted.to_owned())),
        _ => Err(ClientError::Usage(format!(
            "several hosts are named {wanted:?}: give the host's ID (bothy hosts)"
        ))),
    }
}

async fn hosts(dirs: &Dirs, as_json: bool) -> Result<i32, ClientError> {
    let (_, api) = logged_in(dirs)?;
    let hosts = list_hosts(&api).await?;
    if as_json {
        println!("{}", Value::Array(hosts));
        return Ok(0);
    }
    println!(
        "{:<36}  {:<20}  {:<10}  {:<9}  {:<12}  FINGERPRINT",
        "ID", "NAME", "STATE", "CONNECTED", "LLM"
    );
    for host in &hosts {
        let text = |key: &str| host.get(key).and_then(Value::as_str).unwrap_or("-");
        let connected = host.get("connected").and_then(Value::as_bool) == Some(true);
        println!(
            "{:<36}  {:<20}  {:<10}  {:<9}  {:<12}  {}",
            text("id"),
            text("name"),
            text("state"),
            if connected { "yes" } else { "no" },
            llm_badge(host),
            text("key_fingerprint"),
        );
    }
    Ok(0)
}

/// The key the host list names for the host, as a pin.
fn offered_pin(host: &Value) -> Result<Pin, ClientError> {
    let key = host
        .get("noise_public_key")
        .and_then(Value::as_str)
        .ok_or_else(|| ClientError::Protocol("the host has no key: it is not paired".into()))?;
    Ok(Pin {
        noise_public_key: key.to_owned(),
        key_generation: host
            .get("key_generation")
            .and_then(Value::as_i64)
            .unwrap_or(0),
        key_fingerprint: host
            .get("key_fingerprint")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned(),
    })
}

/// The pin check of 5.5 before the step-up: a changed key needs the typed
/// confirmation; the answer is `pin_changed` for the request.
fn check_pin(
    pins: &Pins,
    server: &str,
    host_id: &str,
    offered: &Pin,
    color: bool,
) -> Result<bool, ClientError> {
    match pins.check(server, host_id, offered) {
        PinCheck::New | PinCheck::Same => Ok(false),
        PinCheck::Changed(old) => {
            let mut tty = Tty::open("the confirmation of a changed host key")?;
            let (start, end) = if color {
                ("\x1b[1;31m", "\x1b[0m")
            } else {
                ("", "")
            };
            tty.say(&format!(
                "{start}WARNING: THE HOST KEY HAS CHANGED!{end}\n\
                 The server delivers another key for this host than the one this device pinned.\n\
                 That is expected only after the host was paired again; otherwise someone,\n\
                 possibly the server itself, may be listening in.\n\
                 pinned fingerprint: {} (generation {})\n\
                 new fingerprint:    {} (generation {})\n",
                old.key_fingerprint,
                old.key_generation,
                offered.key_fingerprint,
                offered.key_generation
            ))?;
            if tty.confirm_word("Connect and pin the new key?", "yes")? {
                Ok(true)
            } else {
                Err(ClientError::PinRefused)
            }
        }
    }
}

/// The warning of 8.4: an owner on a host assigned to another person.
async fn check_foreign_assignee(api: &Api, host: &Value) -> Result<(), ClientError> {
    let Some(assignee) = host.get("assigned_user_id").and_then(Value::as_str) else {
        return Ok(());
    };
    let me = api.get("/api/v1/auth/session").await?;
    let is_owner = me.get("role").and_then(Value::as_str) == Some("owner");
    let is_me = me.get("principal_id").and_then(Value::as_str) == Some(assignee);
    if !is_owner || is_me {
        return Ok(());
    }
    let mut tty = Tty::open("the confirmation for a host of another person")?;
    tty.say(
        "This host is assigned to another person. Your session runs as your own session user,\n\
         but that person sets up and uses this host: with a local privilege escalation their\n\
         processes could read along and control your session (spec 8.4).\n",
    )?;
    if tty.confirm_word("Open a session there anyway?", "yes")? {
        Ok(())
    } else {
        Err(ClientError::Cancelled)
    }
}

/// A TOTP step-up (up to three codes); its `step_up_id`.
pub(crate) async fn step_up(api: &Api) -> Result<String, ClientError> {
    let mut tty = Tty::open("the step-up")?;
    let mut attempts = 0;
    loop {
        attempts += 1;
        let code = tty.ask("TOTP code for the step-up: ")?;
        let spinner = Spinner::start("checking the code");
        let answer = api
            .post(
                "/api/v1/auth/step-up",
                &json!({"method": "totp", "code": code.trim()}),
            )
            .await;
        drop(spinner);
        match answer {
            Ok(answer) => {
                return answer
                    .get("step_up_id")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .ok_or_else(|| ClientError::Protocol("the step-up lacks step_up_id".into()));
            }
            Err(ClientError::Problem(problem))
                if attempts < 3
                    && problem.code == "step_up_required"
                    && problem.reason.as_deref() == Some("totp_invalid") =>
            {
                tty.say("That code was not accepted; wait for the next one.\n")?;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Connects a grant, pins the key after the handshake, runs the session and
/// turns its end into the exit code. A connection lost without a close is
/// reattached by itself (6.2): within terminal.quick_reattach_window with
/// the device key's proof and no step-up, after it with a step-up.
async fn run_grant(
    dirs: &Dirs,
    stored: &StoredLogin,
    api: &Api,
    host_id: Uuid,
    grant: Grant,
    ephemeral: EphemeralKey,
    expected: &Pin,
) -> Result<i32, ClientError> {
    let session_id = grant.session_id;
    let mut connected =
        connect_grant(dirs, stored, api, host_id, &grant, ephemeral, expected).await?;
    let mut input = LocalInput::start();
    loop {
        let ended = connected.run(&mut input).await?;
        match ended {
            Ended::Exited(code) => return Ok(code),
            Ended::Closed { end, by_escape } => {
                if by_escape && end.reaction() == Reaction::Ended {
                    eprintln!("Session {session_id} closed.");
                    return Ok(EXIT_SESSION_FAILURE);
                }
                return Err(ClientError::Stream(end));
            }
            Ended::Lost => {
                eprintln!("bothy: the connection was lost; reattaching session {session_id} ...");
                connected =
                    reattach(dirs, stored, api, host_id, session_id, expected, &mut input).await?;
                eprintln!("bothy: reattached.");
            }
        }
    }
}

/// Checks the grant's key against the one the pin check saw, runs the
/// handshake and pins the key (5.5: the first successful opening pins it; a
/// confirmed change replaces the pin).
async fn connect_grant(
    dirs: &Dirs,
    stored: &StoredLogin,
    api: &Api,
    host_id: Uuid,
    grant: &Grant,
    ephemeral: EphemeralKey,
    expected: &Pin,
) -> Result<Connected, ClientError> {
    if grant.pin.noise_public_key != expected.noise_public_key
        || grant.pin.key_generation != expected.key_generation
    {
        return Err(ClientError::Protocol(
            "the host key changed while the session was being opened; run the command again".into(),
        ));
    }
    let connected = terminal::connect(api, &stored.access_token, host_id, grant, ephemeral).await?;
    let mut pins = Pins::load(dirs)?;
    let host_text = host_id.hyphenated().to_string();
    if pins.check(&stored.server, &host_text, &grant.pin) != PinCheck::Same {
        pins.pin(&stored.server, &host_text, grant.pin.clone());
        pins.store(dirs)?;
    }
    Ok(connected)
}

/// The text the device key signs for a quick reattach (the server's
/// `proof_message`): a label, the session, the nonce and the new
/// `client_ephemeral_key_hash`, one per line.
pub fn proof_message(session_id: Uuid, nonce: &str, client_ephemeral_key_hash: &str) -> Vec<u8> {
    format!(
        "bothy.v1.quick_reattach\n{}\n{nonce}\n{client_ephemeral_key_hash}",
        session_id.hyphenated()
    )
    .into_bytes()
}

/// How many times a reattach tries to reach the server before it gives up.
const REATTACH_ATTEMPTS: u32 = 8;

/// Attaches the session again after a lost connection: first as a quick
/// reattach (attach-challenge, the device key's signature, no step-up); when
/// the server wants a step-up (the window passed), with one, asked on the
/// session's own input. A server that cannot be reached is tried again with
/// a growing pause.
async fn reattach(
    dirs: &Dirs,
    stored: &StoredLogin,
    api: &Api,
    host_id: Uuid,
    session_id: Uuid,
    expected: &Pin,
    input: &mut LocalInput,
) -> Result<Connected, ClientError> {
    let mut spinner = Some(Spinner::start("reattaching"));
    let device_key = login::device_key(dirs)?;
    let signing = ed25519_dalek::SigningKey::from_bytes(device_key.seed());
    let mut pause = std::time::Duration::from_millis(250);
    let mut step_up_id: Option<String> = None;
    let mut attempt = 0;
    loop {
        attempt += 1;
        let ephemeral = EphemeralKey::generate()
            .map_err(|_| ClientError::Protocol("no randomness for the ephemeral key".into()))?;
        let cek = b64::encode(&ephemeral_key_hash(&ephemeral.public()));
        let result = async {
            wait_detached(api, session_id).await?;
            let mut body = json!({"client_ephemeral_key_hash": cek});
            match &step_up_id {
                Some(id) => body["step_up_id"] = json!(id),
                None => {
                    let challenge = api
                        .post_empty(&format!(
                            "/api/v1/terminal/sessions/{session_id}/attach-challenge"
                        ))
                        .await?;
                    let nonce = challenge
                        .get("nonce")
                        .and_then(Value::as_str)
                        .ok_or_else(|| ClientError::Protocol("a challenge without nonce".into()))?;
                    use ed25519_dalek::Signer;
                    let signature = signing.sign(&proof_message(session_id, nonce, &cek));
                    body["device_proof"] =
                        json!({"nonce": nonce, "signature": b64::encode(&signature.to_bytes())});
                }
            }
            let grant = attach_grant(api, session_id, &body).await?;
            connect_grant(dirs, stored, api, host_id, &grant, ephemeral, expected).await
        }
        .await;
        match result {
            Ok(connected) => return Ok(connected),
            Err(ClientError::Problem(problem))
                if problem.code == "step_up_required" && step_up_id.is_none() =>
            {
                drop(spinner.take());
                eprintln!("bothy: the quick reattach window has passed; a step-up is needed.");
                step_up_id = Some(step_up_on(api, input).await?);
            }
            // The network again, or a connection lost without a close frame.
            Err(
                ClientError::Net(_)
                | ClientError::Stream(crate::close::StreamEnd { code: 1006, .. }),
            ) if attempt < REATTACH_ATTEMPTS => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(std::time::Duration::from_secs(5));
            }
            Err(e) => return Err(e),
        }
    }
}

/// Waits until the server has noticed the loss too (the session is
/// detached); a session that ended meanwhile ends with its close_reason.
/// Only a detached session can be reattached without a step-up (6.2).
async fn wait_detached(api: &Api, session_id: Uuid) -> Result<(), ClientError> {
    let mut pause = std::time::Duration::from_millis(50);
    for _ in 0..20 {
        let row = api
            .get(&format!("/api/v1/terminal/sessions/{session_id}"))
            .await?;
        match row.get("state").and_then(Value::as_str) {
            Some("detached") => return Ok(()),
            Some("closed") => {
                return Err(ClientError::Stream(crate::close::StreamEnd {
                    code: bothy_proto::codes::CloseCode::TerminalClosed.as_u16(),
                    reason: row
                        .get("close_reason")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_owned(),
                }));
            }
            _ => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(std::time::Duration::from_secs(1));
            }
        }
    }
    Ok(())
}

/// A TOTP step-up whose code is typed on the session's input (the terminal
/// is out of raw mode while the session waits).
async fn step_up_on(api: &Api, input: &mut LocalInput) -> Result<String, ClientError> {
    eprint!("TOTP code for the step-up: ");
    let code = input.read_line().await.ok_or(ClientError::Cancelled)?;
    let answer = api
        .post(
            "/api/v1/auth/step-up",
            &json!({"method": "totp", "code": code}),
        )
        .await?;
    answer
        .get("step_up_id")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| ClientError::Protocol("the step-up lacks step_up_id".into()))
}

pub(crate) fn uuid_of(host: &Value, key: &str) -> Result<Uuid, ClientError> {
    host.get(key)
        .and_then(Value::as_str)
        .and_then(|text| Uuid::parse_str(text).ok())
        .ok_or_else(|| ClientError::Protocol(format!("no {key} in the answer")))
}

async fn open(
    dirs: &Dirs,
    wanted: &str,
    profile: &str,
    workdir: Option<u32>,
) -> Result<i32, ClientError> {
    let (stored, api) = logged_in(dirs)?;
    let host = resolve_host(&api, wanted).await?;
    let host_id = uuid_of(&host, "id")?;
    let Request {
        offered,
        ephemeral,
        mut body,
    } = request_grant(dirs, &stored, &api, host_id, &host).await?;
    let size = crate::tty::window_size();
    body["profile"] = json!(profile);
    body["columns"] = json!(size.columns());
    body["rows"] = json!(size.rows());
    if let Some(index) = workdir {
        body["workdir_index"] = json!(index);
    }
    let spinner = Spinner::start("opening the session");
    let answer = api
        .post(&format!("/api/v1/hosts/{host_id}/terminal/sessions"), &body)
        .await;
    drop(spinner);
    let answer = answer?;
    let grant = Grant::from_json(&answer)?;
    run_grant(dirs, &stored, &api, host_id, grant, ephemeral, &offered).await
}

async fn sessions(dirs: &Dirs, host: Option<&str>, as_json: bool) -> Result<i32, ClientError> {
    let (_, api) = logged_in(dirs)?;
    let hosts = list_hosts(&api).await?;
    let sessions = list_of_host(&api, "/api/v1/terminal/sessions", "sessions", host).await?;
    if as_json {
        println!("{}", Value::Array(sessions));
        return Ok(0);
    }
    // Per host (12, "Every client shows"): the host with its LLM badge and
    // fingerprint, then its sessions with state, profile, start and the
    // time left until the maximum duration.
    let mut host_ids: Vec<&str> = Vec::new();
    for session in &sessions {
        let id = session
            .get("host_id")
            .and_then(Value::as_str)
            .unwrap_or("-");
        if !host_ids.contains(&id) {
            host_ids.push(id);
        }
    }
    for host_id in host_ids {
        let host = hosts
            .iter()
            .find(|h| h.get("id").and_then(Value::as_str) == Some(host_id));
        let text = |key: &str| {
            host.and_then(|h| h.get(key))
                .and_then(Value::as_str)
                .unwrap_or("-")
                .to_owned()
        };
        println!(
            "{}  ({host_id})  LLM: {}  fingerprint {}",
            text("name"),
            host.map_or("None", llm_badge),
            text("key_fingerprint")
        );
        println!(
            "  {:<36}  {:<8}  {:<8}  {:<19}  LEFT",
            "SESSION", "STATE", "PROFILE", "STARTED (UTC)"
        );
        for session in sessions
            .iter()
            .filter(|s| s.get("host_id").and_then(Value::as_str) == Some(host_id))
        {
            let text = |key: &str| session.get(key).and_then(Value::as_str).unwrap_or("-");
            let started = session
                .get("started_at")
                .or_else(|| session.get("created_at"))
                .and_then(Value::as_i64)
                .map(format_time)
                .unwrap_or_else(|| "-".into());
            let left = session
                .get("remaining_ms")
                .and_then(Value::as_i64)
                .map(format_duration)
                .unwrap_or_else(|| "-".into());
            println!(
                "  {:<36}  {:<8}  {:<8}  {:<19}  {}",
                text("session_id"),
                text("state"),
                text("profile"),
                started,
                left
            );
        }
    }
    Ok(0)
}

/// `YYYY-MM-DD HH:MM:SS` of Unix milliseconds (UTC; civil from days, Howard
/// Hinnant's algorithm).
pub fn format_time(unix_ms: i64) -> String {
    let seconds = unix_ms.div_euclid(1000);
    let days = seconds.div_euclid(86_400);
    let rest = seconds.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// `1h05m` / `4m` / `0m` of milliseconds.
pub fn format_duration(ms: i64) -> String {
    let minutes = ms.max(0) / 60_000;
    if minutes >= 60 {
        format!("{}h{:02}m", minutes / 60, minutes % 60)
    } else {
        format!("{minutes}m")
    }
}

/// What `open` and `attach` send besides their own members, and what they
/// keep for the session.
struct Request {
    /// The host key the server hands out (checked against the pin).
    offered: Pin,
    /// This session's ephemeral key; the body carries its hash.
    ephemeral: EphemeralKey,
    /// `client_ephemeral_key_hash`, `step_up_id` and, after a confirmed key
    /// change, `pin_changed`.
    body: Value,
}

/// The steps `open` and `attach` share before their request: the host's key
/// against the pin (5.5), the warning about another person's host (8.4),
/// the step-up, and a fresh ephemeral key.
async fn request_grant(
    dirs: &Dirs,
    stored: &StoredLogin,
    api: &Api,
    host_id: Uuid,
    host: &Value,
) -> Result<Request, ClientError> {
    let offered = offered_pin(host)?;
    let pins = Pins::load(dirs)?;
    let pin_changed = check_pin(
        &pins,
        &stored.server,
        &host_id.hyphenated().to_string(),
        &offered,
        color_enabled(),
    )?;
    check_foreign_assignee(api, host).await?;
    let step_up_id = step_up(api).await?;
    let ephemeral = EphemeralKey::generate()
        .map_err(|_| ClientError::Protocol("no randomness for the ephemeral key".into()))?;
    let mut body = json!({
        "client_ephemeral_key_hash": b64::encode(&ephemeral_key_hash(&ephemeral.public())),
        "step_up_id": step_up_id,
    });
    if pin_changed {
        body["pin_changed"] = json!(true);
    }
    Ok(Request {
        offered,
        ephemeral,
        body,
    })
}

/// The ID of a `what` (session, grant) typed on the command line.
pub(crate) fn id_typed(text: &str, what: &str) -> Result<Uuid, ClientError> {
    Uuid::parse_str(text).map_err(|_| ClientError::Usage(format!("{text:?} is not a {what} ID")))
}

/// terminal.attach (6.2) with `body`; the grant.
async fn attach_grant(api: &Api, session_id: Uuid, body: &Value) -> Result<Grant, ClientError> {
    let answer = api
        .post(
            &format!("/api/v1/terminal/sessions/{session_id}/attach"),
            body,
        )
        .await?;
    Grant::from_json(&answer)
}

async fn attach(dirs: &Dirs, session: &str) -> Result<i32, ClientError> {
    let session_id = id_typed(session, "session")?;
    let (stored, api) = logged_in(dirs)?;
    let row = api
        .get(&format!("/api/v1/terminal/sessions/{session_id}"))
        .await?;
    let host_id = uuid_of(&row, "host_id")?;
    let host = api.get(&format!("/api/v1/hosts/{host_id}")).await?;
    let Request {
        offered,
        ephemeral,
        body,
    } = request_grant(dirs, &stored, &api, host_id, &host).await?;
    let grant = attach_grant(&api, session_id, &body).await?;
    run_grant(dirs, &stored, &api, host_id, grant, ephemeral, &offered).await
}

async fn close(dirs: &Dirs, session: &str) -> Result<i32, ClientError> {
    let session_id = id_typed(session, "session")?;
    let (_, api) = logged_in(dirs)?;
    let answer = api
        .post_empty(&format!("/api/v1/terminal/sessions/{session_id}/close"))
        .await?;
    let reason = answer
        .get("close_reason")
        .and_then(Value::as_str)
        .unwrap_or("-");
    println!("Session {session_id} closed ({reason}).");
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_and_durations() {
        assert_eq!(format_time(0), "1970-01-01 00:00:00");
        assert_eq!(format_time(1_796_083_200_000), "2026-12-01 00:00:00");
        assert_eq!(
            format_time(951_782_400_000 + 3_723_000),
            "2000-02-29 01:02:03"
        );
        assert_eq!(format_duration(3_900_000), "1h05m");
        assert_eq!(format_duration(59_999), "0m");
        assert_eq!(format_duration(-5), "0m");
    }
}
