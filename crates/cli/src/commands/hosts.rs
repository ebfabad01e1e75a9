//! The hosts as the person sees them: `bothy hosts`, `host show`, the
//! lookup of a host by ID or name, the pin check of 5.5 and the 8.4 warning.

use bothy_api::auth::SessionResponse;
use bothy_api::hosts::{Host, HostList};
use bothy_api::persons::Role;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use uuid::Uuid;

use super::common::{logged_in, print_json};
use crate::api::Api;
use crate::dirs::Dirs;
use crate::display::{format_time, short_fingerprint};
use crate::error::{ClientError, EXIT_OK};
use crate::pins::{Pin, PinCheck, Pins};
use crate::prompt::Tty;

/// The badge of the LLM login (12, "Every client shows").
pub(crate) fn llm_badge(host: &Host) -> &'static str {
    match host.llm_credentials.as_str() {
        "personal" => "Personal",
        "organization" => "Organization",
        _ => "None",
    }
}

pub(crate) async fn list_hosts(api: &Api) -> Result<Vec<Host>, ClientError> {
    Ok(api.get_as::<HostList>("/api/v1/hosts").await?.hosts)
}

/// The host's ID as a UUID.
pub(crate) fn host_uuid(host: &Host) -> Result<Uuid, ClientError> {
    Uuid::parse_str(&host.id).map_err(|_| ClientError::Protocol("no id in the answer".into()))
}

/// The host of `hosts` with the ID `host_id`.
pub(crate) fn host_named<'h>(hosts: &'h [Host], host_id: &str) -> Option<&'h Host> {
    hosts.iter().find(|host| host.id == host_id)
}

/// A typed answer as JSON for `--json` (the members the server sent).
pub(crate) fn json_of(value: &impl Serialize) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

/// The names of the session users the host reported last.
pub(crate) fn reported_session_users(host: &Host) -> Vec<String> {
    host.reported_session_users
        .as_ref()
        .and_then(Value::as_array)
        .map(|users| {
            users
                .iter()
                .filter_map(|u| u.get("name").and_then(Value::as_str).map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// The answer of the list at `path`, of the host named `host` only where one
/// is named (`?host_id=`).
pub(crate) async fn list_of_host<T: DeserializeOwned>(
    api: &Api,
    path: &str,
    host: Option<&str>,
) -> Result<T, ClientError> {
    let path = match host {
        Some(wanted) => {
            let host = resolve_host(api, wanted).await?;
            format!("{path}?host_id={}", host_uuid(&host)?)
        }
        None => path.to_owned(),
    };
    api.get_as(&path).await
}

/// The host named `wanted` (an ID, or a name that only one host has).
pub(crate) async fn resolve_host(api: &Api, wanted: &str) -> Result<Host, ClientError> {
    let hosts = list_hosts(api).await?;
    if let Some(host) = host_named(&hosts, wanted) {
        return Ok(host.clone());
    }
    let named: Vec<&Host> = hosts.iter().filter(|h| h.name == wanted).collect();
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
        print_json(json_of(&hosts));
        return Ok(EXIT_OK);
    }
    println!(
        "{:<36}  {:<20}  {:<10}  {:<9}  {:<12}  FINGERPRINT",
        "ID", "NAME", "STATE", "CONNECTED", "LLM"
    );
    for host in &hosts {
        let connected = host.connected == Some(true);
        println!(
            "{:<36}  {:<20}  {:<10}  {:<9}  {:<12}  {}",
            host.id,
            host.name,
            host.state,
            if connected { "yes" } else { "no" },
            llm_badge(host),
            short_fingerprint(host.key_fingerprint.as_deref().unwrap_or("-")),
        );
    }
    Ok(EXIT_OK)
}

/// `bothy host show HOST`: everything the server says about the host, the
/// whole fingerprint included.
pub(crate) async fn host_show(api: &Api, wanted: &str, as_json: bool) -> Result<i32, ClientError> {
    let host = resolve_host(api, wanted).await?;
    let host_id = host_uuid(&host)?;
    let host: Host = api.get_as(&format!("/api/v1/hosts/{host_id}")).await?;
    if as_json {
        print_json(json_of(&host));
        return Ok(EXIT_OK);
    }
    let connected = host.connected == Some(true);
    println!("name          {}", host.name);
    println!("id            {}", host.id);
    println!("state         {}", host.state);
    println!("connected     {}", if connected { "yes" } else { "no" });
    println!("LLM login     {}", llm_badge(&host));
    println!(
        "fingerprint   {}",
        host.key_fingerprint.as_deref().unwrap_or("-")
    );
    println!("key generation {}", host.key_generation);
    if host
        .reported_session_users
        .as_ref()
        .is_some_and(Value::is_array)
    {
        println!("session users {}", reported_session_users(&host).join(", "));
    }
    if let Some(seen) = host.last_seen_at {
        println!("last seen     {} UTC", format_time(seen));
    }
    Ok(EXIT_OK)
}

/// The key the host list names for the host, as a pin.
pub(crate) fn offered_pin(host: &Host) -> Result<Pin, ClientError> {
    let key = host
        .noise_public_key
        .as_deref()
        .ok_or_else(|| ClientError::Protocol("the host has no key: it is not paired".into()))?;
    Ok(Pin {
        noise_public_key: key.to_owned(),
        key_generation: host.key_generation,
        key_fingerprint: host.key_fingerprint.clone().unwrap_or_default(),
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
pub(crate) async fn check_foreign_assignee(api: &Api, host: &Host) -> Result<(), ClientError> {
    let Some(assignee) = host.assigned_user_id.as_deref() else {
        return Ok(());
    };
    // Only a person can be an owner; an agent or app is neither.
    let SessionResponse::Person(me) = api.get_as("/api/v1/auth/session").await? else {
        return Ok(());
    };
    if me.role != Role::Owner || me.principal_id == assignee {
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
