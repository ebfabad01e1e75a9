//! The commands: each reads the stored login, calls the server and prints a
//! result; errors come back to [`run`], which prints them once and turns
//! them into the exit status of the scheme in [`crate::error`].

use std::io::IsTerminal;

use serde_json::{Value, json};
use uuid::Uuid;

use bothy_api::terminal::{ClosedTerminalSession, TerminalSession, TerminalSessionList};
use bothy_net::ServerUrl;

use crate::api::Api;
use crate::cli::{Cli, Command};
use crate::dirs::Dirs;
use crate::display::{self, format_duration, format_time, short_fingerprint, short_id};
use crate::error::{ClientError, EXIT_OK};
use crate::login::{self, StoredLogin};
use crate::pins::{Pin, PinCheck, Pins};
use crate::progress::Spinner;
use crate::prompt::Tty;

pub use crate::error::{EXIT_FAILURE, EXIT_SESSION_FAILURE, EXIT_USAGE};

/// The server's password rule (at least this many characters; the server
/// checks it too).
pub const PASSWORD_MIN_CHARS: usize = 12;

/// How many times a question whose answer the server refused is asked
/// (like sudo's three password tries).
pub const TRIES: u32 = 3;

/// Whether stderr may carry colour: a terminal, and `NO_COLOR` unset or empty.
pub fn color_enabled() -> bool {
    std::io::stderr().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|value| value.is_empty())
}

/// Runs a command; returns the process's exit status (D-371).
pub fn run(cli: Cli) -> i32 {
    let session_command = matches!(cli.command, Command::Open { .. } | Command::Attach { .. });
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("bothy: runtime: {e}");
            return if session_command {
                EXIT_SESSION_FAILURE
            } else {
                EXIT_FAILURE
            };
        }
    };
    match runtime.block_on(dispatch(cli.command)) {
        Ok(code) => code,
        Err(error) => {
            error.print(color_enabled());
            error.exit_code(session_command)
        }
    }
}

async fn dispatch(command: Command) -> Result<i32, ClientError> {
    if let Command::Completions { shell } = command {
        let mut command = <Cli as clap::CommandFactory>::command();
        clap_complete::generate(shell, &mut command, "bothy", &mut std::io::stdout());
        return Ok(EXIT_OK);
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
            alive,
        } => crate::attach::open(&dirs, &host, &profile, workdir, alive).await,
        Command::Sessions {
            host,
            all,
            json,
            page_size,
        } => sessions(&dirs, host.as_deref(), all, json, page_size).await,
        Command::Attach {
            session,
            host,
            alive,
        } => crate::attach::attach(&dirs, session.as_deref(), host.as_deref(), alive).await,
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
        Command::Completions { .. } => Ok(EXIT_OK),
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

/// A TOTP code as typed (spaces, as some apps show them, removed) when it
/// has the form of one: six digits. `None` for a typo, which is said at once
/// and never sent (a refused code would take a try of the rate limit).
pub fn totp_form(typed: &str) -> Option<String> {
    let code: String = typed.chars().filter(|c| !c.is_whitespace()).collect();
    (code.len() == 6 && code.bytes().all(|b| b.is_ascii_digit())).then_some(code)
}

/// Asks for a TOTP code until it has the form of one (a typo is said and
/// asked again, without a try of the server).
pub(crate) fn ask_totp(tty: &mut Tty, question: &str) -> Result<String, ClientError> {
    loop {
        let typed = tty.ask(question)?;
        match totp_form(&typed) {
            Some(code) => return Ok(code),
            None => tty.say("That is not a 6-digit code; type the code your app shows.\n")?,
        }
    }
}

/// `bothy login`: password and TOTP code, asked again (up to [`TRIES`]
/// times) when the server refuses them — its answer never says which part
/// was wrong, so both are asked again (D-374).
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
    let device_name = device_name.unwrap_or_else(|| format!("bothy on {}", hostname()));
    let mut tries = 0;
    let answer = loop {
        tries += 1;
        let password = tty.ask_secret("Password: ")?;
        let totp = ask_totp(&mut tty, "TOTP code: ")?;
        let body = json!({
            "username": username,
            "password": password.as_str(),
            "totp": totp,
            "device_public_key": login::device_public_key(&key),
            "device_name": device_name,
        });
        drop(password);
        let spinner = Spinner::start("logging in");
        let answer = api.post("/api/v1/auth/login", &body).await;
        drop(spinner);
        drop(body);
        match answer {
            Ok(answer) => break answer,
            Err(ClientError::Problem(problem))
                if tries < TRIES && problem.is("unauthenticated", None) =>
            {
                tty.say(
                    "Not accepted: the username, password or TOTP code is wrong, or the code was \
                     used already (each code works once: wait for the next one). Try again.\n",
                )?;
            }
            Err(e) => return Err(e),
        }
    };
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
    Ok(EXIT_OK)
}

/// The TOTP secret of an `otpauth://` URI (its `secret` parameter).
fn otpauth_secret(uri: &str) -> Option<&str> {
    let query = uri.split_once('?')?.1;
    query
        .split('&')
        .find_map(|pair| pair.strip_prefix("secret="))
}

/// The URI as a QR code of Unicode half blocks, light modules drawn (like
/// `qrencode -t UTF8`: right on a dark terminal; scanners read both).
fn qr_code(uri: &str) -> Option<String> {
    use qrcode::render::unicode::Dense1x2;
    let code = qrcode::QrCode::new(uri.as_bytes()).ok()?;
    Some(
        code.render::<Dense1x2>()
            .dark_color(Dense1x2::Light)
            .light_color(Dense1x2::Dark)
            .quiet_zone(true)
            .build(),
    )
}

/// `bothy enroll`: the code is checked first (a mistyped one is said before
/// any password is asked), then the password rule is stated and checked
/// here before the server does, then the TOTP secret as a QR code, its
/// base32 text and the URI, and the first code of the app (D-372, D-378).
async fn enroll(server: &str) -> Result<i32, ClientError> {
    let server = ServerUrl::parse(server)?;
    let api = Api::new(server.clone(), None)?;
    let mut tty = Tty::open("the enrollment")?;
    let mut tries = 0;
    let (code, username) = loop {
        tries += 1;
        let code = tty.ask_secret("Enrollment code: ")?;
        let code = code.trim().to_owned();
        match api
            .post("/api/v1/auth/enroll/check", &json!({"code": code}))
            .await
        {
            Ok(checked) => {
                let username = checked
                    .get("username")
                    .and_then(Value::as_str)
                    .unwrap_or("-")
                    .to_owned();
                break (zeroize::Zeroizing::new(code), username);
            }
            Err(ClientError::Problem(problem))
                if tries < TRIES && problem.is("unauthenticated", None) =>
            {
                tty.say(
                    "That code is wrong, used or expired: check it, or ask an owner for a new one.\n",
                )?;
            }
            Err(e) => return Err(e),
        }
    };
    tty.say(&format!(
        "Enrolling {username}. Choose a password of at least {PASSWORD_MIN_CHARS} characters \
         (any characters; several words are easy to remember).\n"
    ))?;
    let password = loop {
        let first = tty.ask_secret("New password: ")?;
        let length = first.chars().count();
        if length < PASSWORD_MIN_CHARS {
            tty.say(&format!(
                "Too short: {length} characters, at least {PASSWORD_MIN_CHARS}; once more.\n"
            ))?;
            continue;
        }
        let again = tty.ask_secret("The password again: ")?;
        if *first == *again {
            break first;
        }
        tty.say("The two passwords differ; once more.\n")?;
    };
    let started = api
        .post(
            "/api/v1/auth/enroll",
            &json!({"code": code.as_str(), "password": password.as_str()}),
        )
        .await?;
    drop(password);
    let uri = started
        .get("otpauth_uri")
        .and_then(Value::as_str)
        .ok_or_else(|| ClientError::Protocol("no otpauth_uri in the answer".into()))?;
    tty.say(
        "Add your TOTP secret to your authenticator app: scan this code, or type the secret \
         below. It is a secret: show it to no one.\n",
    )?;
    if let Some(qr) = qr_code(uri) {
        tty.say(&format!("{qr}\n"))?;
    }
    if let Some(secret) = otpauth_secret(uri) {
        tty.say(&format!("Secret (base32):\n  {secret}\n"))?;
    }
    tty.say(&format!("As a URI:\n  {uri}\n"))?;
    let mut tries = 0;
    loop {
        tries += 1;
        let totp = ask_totp(&mut tty, "The code your app shows now: ")?;
        match api
            .post(
                "/api/v1/auth/enroll/confirm",
                &json!({"code": code.as_str(), "totp": totp}),
            )
            .await
        {
            Ok(_) => break,
            Err(ClientError::Problem(problem))
                if tries < TRIES && problem.is("unauthenticated", None) =>
            {
                tty.say(
                    "That code was not accepted: check the app's entry for this server and \
                     type the code it shows now.\n",
                )?;
            }
            Err(e) => return Err(e),
        }
    }
    println!("Enrolled as {username}. Now: bothy login --server {server} --username {username}");
    Ok(EXIT_OK)
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
    Ok(EXIT_OK)
}

/// Prints `value` as the JSON of a listing (times in RFC 3339).
pub(crate) fn print_json(mut value: Value) {
    display::json_times(&mut value);
    println!("{value}");
}

async fn whoami(dirs: &Dirs, as_json: bool) -> Result<i32, ClientError> {
    let (stored, api) = logged_in(dirs)?;
    let mut me = api.get("/api/v1/auth/session").await?;
    if as_json {
        if let Some(object) = me.as_object_mut() {
            object.insert("server".into(), json!(stored.server));
        }
        print_json(me);
        return Ok(EXIT_OK);
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
    Ok(EXIT_OK)
}

/// The badge of the LLM login (12, "Every client shows").
pub(crate) fn llm_badge(host: &Value) -> &'static str {
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
        print_json(Value::Array(hosts));
        return Ok(EXIT_OK);
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
            short_fingerprint(text("key_fingerprint")),
        );
    }
    Ok(EXIT_OK)
}

/// `bothy host show HOST`: everything the server says about the host, the
/// whole fingerprint included.
pub(crate) async fn host_show(api: &Api, wanted: &str, as_json: bool) -> Result<i32, ClientError> {
    let host = resolve_host(api, wanted).await?;
    let host_id = uuid_of(&host, "id")?;
    let host = api.get(&format!("/api/v1/hosts/{host_id}")).await?;
    let host = host.get("host").cloned().unwrap_or(host);
    if as_json {
        print_json(host);
        return Ok(EXIT_OK);
    }
    let text = |key: &str| host.get(key).and_then(Value::as_str).unwrap_or("-");
    let connected = host.get("connected").and_then(Value::as_bool) == Some(true);
    println!("name          {}", text("name"));
    println!("id            {}", text("id"));
    println!("state         {}", text("state"));
    println!("connected     {}", if connected { "yes" } else { "no" });
    println!("LLM login     {}", llm_badge(&host));
    println!("fingerprint   {}", text("key_fingerprint"));
    if let Some(generation) = host.get("key_generation").and_then(Value::as_i64) {
        println!("key generation {generation}");
    }
    if let Some(users) = host.get("reported_session_users").and_then(Value::as_array) {
        let names: Vec<&str> = users
            .iter()
            .filter_map(|u| u.get("name").and_then(Value::as_str))
            .collect();
        println!("session users {}", names.join(", "));
    }
    if let Some(seen) = host.get("last_seen_at").and_then(Value::as_i64) {
        println!("last seen     {} UTC", format_time(seen));
    }
    Ok(EXIT_OK)
}

/// The key the host list names for the host, as a pin.
pub(crate) fn offered_pin(host: &Value) -> Result<Pin, ClientError> {
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
pub(crate) fn check_pin(
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
pub(crate) async fn check_foreign_assignee(api: &Api, host: &Value) -> Result<(), ClientError> {
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

/// A TOTP step-up (up to [`TRIES`] codes; a typo is said at once and not
/// counted); its `step_up_id`.
pub(crate) async fn step_up(api: &Api) -> Result<String, ClientError> {
    let mut tty = Tty::open("the step-up")?;
    let mut tries = 0;
    loop {
        tries += 1;
        let code = ask_totp(&mut tty, "TOTP code for the step-up: ")?;
        let spinner = Spinner::start("checking the code");
        let answer = api
            .post(
                "/api/v1/auth/step-up",
                &json!({"method": "totp", "code": code}),
            )
            .await;
        drop(spinner);
        match answer {
            Ok(answer) => return step_up_id(&answer),
            Err(ClientError::Problem(problem))
                if tries < TRIES && problem.is("step_up_required", Some("totp_invalid")) =>
            {
                tty.say("That code was wrong or used already; wait for the next one.\n")?;
            }
            Err(e) => return Err(e),
        }
    }
}

/// The `step_up_id` of a step-up's answer.
pub(crate) fn step_up_id(answer: &Value) -> Result<String, ClientError> {
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

/// Characters an abbreviated session ID needs at least (as git asks for
/// four of a commit's name).
pub const MIN_PREFIX_CHARS: usize = 4;

/// `GET /api/v1/terminal/sessions` with every page (`state=open` unless
/// `all`), of the host `host_id` only when named.
pub(crate) async fn list_sessions(
    api: &Api,
    host_id: Option<Uuid>,
    all: bool,
    page_size: u32,
) -> Result<Vec<TerminalSession>, ClientError> {
    let mut path = format!("/api/v1/terminal/sessions?limit={page_size}");
    if !all {
        path.push_str("&state=open");
    }
    if let Some(host_id) = host_id {
        path.push_str(&format!("&host_id={host_id}"));
    }
    // Every page, by the cursor (`next` in the answer, `after=` in the next
    // request), in order.
    let mut all = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page_path = match &after {
            Some(cursor) => format!("{path}&after={cursor}"),
            None => path.clone(),
        };
        let page: TerminalSessionList = api.get_as(&page_path).await?;
        all.extend(page.sessions);
        match page.next {
            // A cursor that does not move would loop for ever.
            Some(next) if after.as_deref() != Some(next.as_str()) => after = Some(next),
            _ => return Ok(all),
        }
    }
}

/// The ID of a session of an answer.
pub(crate) fn session_uuid(session: &TerminalSession) -> Result<Uuid, ClientError> {
    Uuid::parse_str(&session.session_id)
        .map_err(|_| ClientError::Protocol("a session_id that is no UUID".into()))
}

/// The session a person named on the command line: a whole ID (any session
/// the person may read), or the start of the ID of one of their open
/// sessions (at least [`MIN_PREFIX_CHARS`], one match only).
pub(crate) async fn resolve_session(
    api: &Api,
    typed: &str,
) -> Result<TerminalSession, ClientError> {
    let typed = typed.trim();
    if let Ok(id) = Uuid::parse_str(typed) {
        return api.get_as(&format!("/api/v1/terminal/sessions/{id}")).await;
    }
    let is_prefix = typed.len() >= MIN_PREFIX_CHARS
        && typed.len() < 36
        && typed.chars().all(|c| c.is_ascii_hexdigit() || c == '-');
    if !is_prefix {
        return Err(ClientError::Usage(format!(
            "{typed:?} is not a session ID, nor the start of one ({MIN_PREFIX_CHARS} characters at least)"
        )));
    }
    let wanted = typed.to_ascii_lowercase();
    let sessions = list_sessions(api, None, false, 200).await?;
    let matching: Vec<&TerminalSession> = sessions
        .iter()
        .filter(|s| s.session_id.starts_with(&wanted))
        .collect();
    match matching.as_slice() {
        [one] => Ok((*one).clone()),
        [] => Err(ClientError::NoSession(format!(
            "none of your open sessions starts with {typed}"
        ))),
        several => {
            let ids: Vec<&str> = several.iter().map(|s| s.session_id.as_str()).collect();
            Err(ClientError::Usage(format!(
                "{typed} is the start of several sessions ({}): type more of the ID",
                ids.join(", ")
            )))
        }
    }
}

/// `bothy sessions`: per host (12, "Every client shows") the host with its
/// LLM badge and the start of its fingerprint, then its sessions: the start
/// of the ID, state, profile, start and the time left; with `--all` closed
/// ones too, with how they ended. `--json` adds `host_name`.
async fn sessions(
    dirs: &Dirs,
    host: Option<&str>,
    all: bool,
    as_json: bool,
    page_size: u32,
) -> Result<i32, ClientError> {
    let (_, api) = logged_in(dirs)?;
    let hosts = list_hosts(&api).await?;
    let host_id = match host {
        Some(wanted) => Some(uuid_of(&resolve_host(&api, wanted).await?, "id")?),
        None => None,
    };
    let sessions = list_sessions(&api, host_id, all, page_size).await?;
    if as_json {
        let named: Vec<Value> = sessions
            .iter()
            .map(|session| {
                let name = hosts
                    .iter()
                    .find(|h| h.get("id").and_then(Value::as_str) == Some(&session.host_id))
                    .and_then(|h| h.get("name").and_then(Value::as_str));
                let mut row = serde_json::to_value(session).unwrap_or(Value::Null);
                if let Some(object) = row.as_object_mut() {
                    object.insert("host_name".into(), json!(name));
                }
                row
            })
            .collect();
        print_json(Value::Array(named));
        return Ok(EXIT_OK);
    }
    if sessions.is_empty() {
        let which = if all { "" } else { "open " };
        println!("No {which}sessions.");
        return Ok(EXIT_OK);
    }
    let mut host_ids: Vec<&str> = Vec::new();
    for session in &sessions {
        let id = session.host_id.as_str();
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
            short_fingerprint(&text("key_fingerprint"))
        );
        let ended_column = if all { "  ENDED" } else { "" };
        println!(
            "  {:<8}  {:<8}  {:<8}  {:<19}  {:<6}{ended_column}",
            "SESSION", "STATE", "PROFILE", "STARTED (UTC)", "LEFT"
        );
        for session in sessions.iter().filter(|s| s.host_id == host_id) {
            let started = format_time(session.started_at.unwrap_or(session.created_at));
            let closed = session.is_closed();
            let left = if closed {
                "-".to_owned()
            } else {
                format_duration(session.remaining_ms)
            };
            let ended = if all && closed {
                format!("  {}", session.close_reason.as_deref().unwrap_or("-"))
            } else {
                String::new()
            };
            println!(
                "  {:<8}  {:<8}  {:<8}  {:<19}  {:<6}{ended}",
                short_id(&session.session_id),
                session.state,
                session.profile,
                started,
                left,
            );
        }
    }
    Ok(EXIT_OK)
}

async fn close(dirs: &Dirs, session: &str) -> Result<i32, ClientError> {
    let (_, api) = logged_in(dirs)?;
    let row = resolve_session(&api, session).await?;
    let session_id = session_uuid(&row)?;
    let closed: ClosedTerminalSession = api
        .post_empty_as(&format!("/api/v1/terminal/sessions/{session_id}/close"))
        .await?;
    println!("Session {session_id} closed ({}).", closed.close_reason);
    Ok(EXIT_OK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totp_codes_have_six_digits() {
        assert_eq!(totp_form("123456").as_deref(), Some("123456"));
        assert_eq!(totp_form(" 123 456 ").as_deref(), Some("123456"));
        for typo in ["12345", "1234567", "12a456", "", "one"] {
            assert_eq!(totp_form(typo), None, "{typo}");
        }
    }

    #[test]
    fn the_secret_of_an_otpauth_uri() {
        let uri = "otpauth://totp/bothy:alice?secret=ABCDEFGH234567&issuer=bothy&period=30";
        assert_eq!(otpauth_secret(uri), Some("ABCDEFGH234567"));
        let qr = qr_code(uri).expect("a QR code");
        assert!(qr.contains('█') || qr.contains('▀') || qr.contains('▄'));
        assert!(qr.lines().count() > 10);
    }
}
