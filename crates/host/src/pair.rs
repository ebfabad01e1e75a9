//! `bothy-host pair --server URL --code CODE` (3.2 step 2, 4.2): generate the
//! X25519 and Ed25519 key pairs locally, redeem the pairing code with host.pair
//! (`POST /api/v1/hosts/pair`) with the public keys, the profiles and the
//! session users, store the keys only after the server accepted them, and print
//! the fingerprint in groups of four for the owner to type.
//!
//! The lists sent are the configured ones; the report after the first login
//! sends them again after HD7 (the server stores every report's lists).

use std::path::Path;

use bothy_net::{Connector, Method, ServerUrl};
use bothy_proto::b64;
use bothy_proto::json::{self, Object};
use bothy_proto::report::{ReportedProfile, ReportedSessionUser, ReportedWorkdir};
use serde_json::{Value, json};

use crate::config::HostServiceConfig;
use crate::doctor::is_own_address;
use crate::state::{HostKeys, Owner, Pairing, StateDir};

/// The route of host.pair.
pub const PAIR_PATH: &str = "/api/v1/hosts/pair";

/// Runs the command; returns the exit code.
pub fn command(config_path: &Path, server: &str, code: &str) -> i32 {
    let config = match crate::config::load_or_refuse(config_path) {
        Ok(config) => config,
        Err(code) => return code,
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("bothy-host pair: cannot start: {error}");
            return 1;
        }
    };
    match runtime.block_on(pair(&config.host_service, server, code)) {
        Ok(paired) => {
            println!(
                "Paired with {} as host {}.",
                paired.server_url, paired.host_id
            );
            println!();
            println!("Fingerprint of this host's keys:");
            println!();
            println!("    {}", paired.fingerprint);
            println!();
            println!(
                "The owner confirms the host by typing the first characters of this \
                 fingerprint in bothy (bothy host confirm)."
            );
            0
        }
        Err(error) => {
            eprintln!("bothy-host pair: {error}");
            1
        }
    }
}

/// Why pairing failed; no variant carries the code or a key.
#[derive(Debug, thiserror::Error)]
pub enum PairError {
    /// Network or TLS.
    #[error(transparent)]
    Net(#[from] bothy_net::NetError),
    /// The state directory.
    #[error(transparent)]
    State(#[from] crate::state::StateError),
    /// The code was refused (401): unknown, used, replaced, expired or mistyped.
    #[error(
        "the pairing code was not accepted (unknown, used, expired or mistyped); ask the owner \
         for a new code"
    )]
    CodeRefused,
    /// The server refused the request with a problem.
    #[error("the server refused the pairing: {0}")]
    Refused(String),
    /// The server answered something this version does not understand.
    #[error("the server's answer is not a host.pair response")]
    BadAnswer,
    /// The server computed a different fingerprint than this host.
    #[error(
        "the server reports a different key fingerprint than this host computed; nothing was stored"
    )]
    FingerprintDiffers,
    /// The service user of the configuration does not exist.
    #[error("the service user of host_service.service_user does not exist")]
    NoServiceUser,
}

/// Pairs with `server`; returns what was stored.
pub async fn pair(
    config: &HostServiceConfig,
    server: &str,
    code: &str,
) -> Result<Pairing, PairError> {
    let server = ServerUrl::parse(server)?;
    let owner = if nix::unistd::geteuid().is_root() {
        let user = nix::unistd::User::from_name(&config.service_user)
            .ok()
            .flatten()
            .ok_or(PairError::NoServiceUser)?;
        Some(Owner {
            uid: user.uid.as_raw(),
            gid: user.gid.as_raw(),
        })
    } else {
        None
    };
    let state = StateDir::new(&config.state_dir, owner);
    let connector = Connector::from_env()?;
    let keys = HostKeys::generate()?;
    let is_server_host = resolves_to_this_host(&server).await;
    let body = pair_body(config, &keys, code, is_server_host);
    let reply = connector
        .request(
            &server,
            Method::POST,
            PAIR_PATH,
            None,
            &[],
            Some(body.to_string()),
        )
        .await?;
    let (status, answer) = (reply.status, reply.body);
    match status {
        200 | 201 => {}
        401 => return Err(PairError::CodeRefused),
        _ => return Err(PairError::Refused(describe_problem(status, &answer))),
    }
    let value = json::parse(&answer, 1 << 20).map_err(|_| PairError::BadAnswer)?;
    let object = Object::root(&value, &["host_id", "instance_id", "key_fingerprint"])
        .map_err(|_| PairError::BadAnswer)?;
    let host_id = object.uuid("host_id").map_err(|_| PairError::BadAnswer)?;
    let instance_id = object
        .uuid("instance_id")
        .map_err(|_| PairError::BadAnswer)?;
    let fingerprint = keys.fingerprint();
    if object
        .str("key_fingerprint")
        .map_err(|_| PairError::BadAnswer)?
        != fingerprint.as_str()
    {
        return Err(PairError::FingerprintDiffers);
    }
    state.ensure()?;
    state.store_keys(&keys)?;
    let pairing = Pairing {
        server_url: server.https_base(),
        host_id,
        instance_id,
        fingerprint: fingerprint.as_str().to_owned(),
    };
    state.store_pairing(&pairing)?;
    Ok(pairing)
}

/// The body of host.pair (DESIGN §3.4).
fn pair_body(
    config: &HostServiceConfig,
    keys: &HostKeys,
    code: &str,
    is_server_host: bool,
) -> Value {
    let profiles: Vec<Value> = config
        .profiles
        .iter()
        .map(|p| {
            ReportedProfile {
                name: p.name.clone(),
                display_name: p.display_name.clone(),
                kind: p.kind,
            }
            .to_value()
        })
        .collect();
    let session_users: Vec<Value> = config
        .session_users
        .iter()
        .map(|name| {
            ReportedSessionUser {
                name: name.clone(),
                workdirs: config
                    .workdirs_of(name)
                    .iter()
                    .map(|w| ReportedWorkdir {
                        display_name: w.display_name.clone(),
                    })
                    .collect(),
            }
            .to_value()
        })
        .collect();
    json!({
        "code": code,
        "noise_public_key": b64::encode(&keys.noise.public()),
        "auth_public_jwk": keys.auth.public_jwk().to_value(),
        "host_version": crate::HOST_VERSION,
        "platform": "linux",
        "os_version": os_version(),
        "profiles": profiles,
        "session_users": session_users,
        "require_local_confirm": config.require_local_confirm,
        "is_server_host": is_server_host,
    })
}

/// Whether the server's name resolves to an address of this host (2.3).
pub async fn resolves_to_this_host(server: &ServerUrl) -> bool {
    match tokio::net::lookup_host((server.host_name(), server.port())).await {
        Ok(addrs) => addrs.into_iter().any(|a| is_own_address(a.ip())),
        Err(_) => false,
    }
}

/// `PRETTY_NAME` of /etc/os-release (cut to 100 characters, control characters
/// dropped), or `Linux`.
pub fn os_version() -> String {
    let text = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
    let pretty = text
        .lines()
        .find_map(|line| line.strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim().trim_matches('"').to_owned())
        .unwrap_or_default();
    let clean: String = pretty
        .chars()
        .filter(|c| !c.is_control())
        .take(100)
        .collect();
    if clean.trim().is_empty() {
        "Linux".to_owned()
    } else {
        clean
    }
}

/// `code` (`reason`) and the `errors[]` of a problem, for the operator.
fn describe_problem(status: u16, body: &[u8]) -> String {
    let Ok(value) = serde_json::from_slice::<Value>(body) else {
        return format!("HTTP {status}");
    };
    let mut out = format!("HTTP {status}");
    if let Some(code) = value.get("code").and_then(Value::as_str) {
        out.push_str(&format!(" {code}"));
    }
    if let Some(reason) = value.get("reason").and_then(Value::as_str) {
        out.push_str(&format!(" ({reason})"));
    }
    if let Some(errors) = value.get("errors").and_then(Value::as_array) {
        for error in errors.iter().take(20) {
            let pointer = error.get("pointer").and_then(Value::as_str).unwrap_or("");
            let code = error.get("code").and_then(Value::as_str).unwrap_or("");
            out.push_str(&format!("; {pointer}: {code}"));
        }
    }
    if let Some(retry) = value.get("retry_after").and_then(Value::as_u64) {
        out.push_str(&format!("; retry after {retry}s"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn problems_are_described_by_code_and_pointer() {
        let body = br#"{"type":"about:blank","status":400,"code":"validation_failed","errors":[{"pointer":"/session_users","code":"required"}]}"#;
        assert_eq!(
            describe_problem(400, body),
            "HTTP 400 validation_failed; /session_users: required"
        );
        assert_eq!(describe_problem(502, b"<html>"), "HTTP 502");
    }

    #[test]
    fn the_body_carries_public_keys_only() {
        let keys = HostKeys::generate().expect("keys");
        let config = HostServiceConfig {
            session_users: vec!["alice".into()],
            ..HostServiceConfig::default()
        };
        let body = pair_body(&config, &keys, "bothy_hpc_x", false);
        let text = body.to_string();
        assert!(!text.contains(&b64::encode(keys.noise.private_bytes())));
        assert!(!text.contains(&b64::encode(keys.auth.seed())));
        assert_eq!(body["session_users"][0]["name"], "alice");
        assert_eq!(body["profiles"][0]["kind"], "shell");
        assert_eq!(body["host_version"], crate::HOST_VERSION);
    }
}
