//! The hosts as the person sees them: `bothy hosts`, `host show`, the
//! lookup of a host by ID or name, the pin check of 5.5 and the 8.4 warning.

use serde_json::Value;

use super::common::{logged_in, print_json, uuid_of};
use crate::api::Api;
use crate::dirs::Dirs;
use crate::display::{format_time, short_fingerprint};
use crate::error::{ClientError, EXIT_OK};
use crate::pins::{Pin, PinCheck, Pins};
use crate::prompt::Tty;

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

pub(super) async fn hosts(dirs: &Dirs, as_json: bool) -> Result<i32, ClientError> {
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
