//! Administration for owners (3.1–3.3, 7.2, 2.2, DESIGN §3.2): create a host
//! and get its pairing code once, confirm it after `bothy-host pair`, pair it
//! again, disable, enable or retire it, assign or end session users (each
//! with a step-up and a reason; updates carry the host's `ETag` as
//! `If-Match`); grant and revoke terminal on a host; invite, disable (with a
//! step-up and a reason) and enable persons.

use bothy_net::Method;
use serde_json::{Value, json};

use crate::api::Api;
use crate::cli::{HostAction, PersonAction};
use crate::commands::{
    id_typed, list_hosts, list_of_host, logged_in, resolve_host, step_up, uuid_of,
};
use crate::dirs::Dirs;
use crate::error::ClientError;
use crate::prompt::Tty;

/// How many characters of the fingerprint the owner types (the default of
/// terminal.fingerprint_confirm_chars; the server checks the real value).
const CONFIRM_CHARS: usize = 8;

/// Runs one host action.
pub async fn run(dirs: &Dirs, action: HostAction) -> Result<i32, ClientError> {
    let (stored, api) = logged_in(dirs)?;
    match action {
        HostAction::Create {
            name,
            assignee,
            reason,
        } => create(&api, &stored.server, &name, assignee.as_deref(), &reason).await,
        HostAction::Confirm { host, reason } => confirm(&api, &host, &reason).await,
        HostAction::PairAgain { host, reason } => {
            pair_again(&api, &stored.server, &host, &reason).await
        }
        HostAction::Disable { host, reason } => set_state(&api, &host, "disabled", &reason).await,
        HostAction::Enable { host, reason } => set_state(&api, &host, "active", &reason).await,
        HostAction::Retire { host, reason } => set_state(&api, &host, "retired", &reason).await,
        HostAction::Llm {
            host,
            credentials,
            holder,
            reason,
        } => llm(&api, &host, &credentials, holder.as_deref(), &reason).await,
        HostAction::Assign {
            host,
            person,
            os_user,
            reason,
        } => {
            let person_id = person_id(&api, &person).await?;
            let change =
                json!({"assign_session_users": [{"user_id": person_id, "os_user": os_user}]});
            update(&api, &host, change, &reason).await?;
            println!("Session user {os_user} assigned to {person}.");
            Ok(0)
        }
        HostAction::Unassign {
            host,
            person,
            reason,
        } => {
            let person_id = person_id(&api, &person).await?;
            update(
                &api,
                &host,
                json!({"end_session_users": [person_id]}),
                &reason,
            )
            .await?;
            println!("The session user of {person} on this host is no longer assigned.");
            Ok(0)
        }
    }
}

/// The ID of the person `username` (GET /api/v1/persons; usernames are
/// stored in lower case).
async fn person_id(api: &Api, username: &str) -> Result<String, ClientError> {
    id_named(api, "person", "username", &username.to_ascii_lowercase())
        .await?
        .ok_or_else(|| ClientError::UnknownPerson(username.to_owned()))
}

/// The ID of the group `name` (GET /api/v1/groups).
async fn group_id(api: &Api, name: &str) -> Result<String, ClientError> {
    id_named(api, "group", "name", name)
        .await?
        .ok_or_else(|| ClientError::Usage(format!("no group named {name:?}")))
}

/// The `id` of the `kind` (person, group) whose `name_key` is `name`, from
/// `GET /api/v1/{kind}s`; `None` when there is none.
async fn id_named(
    api: &Api,
    kind: &str,
    name_key: &str,
    name: &str,
) -> Result<Option<String>, ClientError> {
    let list = format!("{kind}s");
    let answer = api.get(&format!("/api/v1/{list}")).await?;
    Ok(answer
        .get(&list)
        .and_then(Value::as_array)
        .and_then(|items| {
            items
                .iter()
                .find(|item| item.get(name_key).and_then(Value::as_str) == Some(name))
        })
        .and_then(|item| item.get("id").and_then(Value::as_str))
        .map(str::to_owned))
}

/// The ID of the person logged in (GET /api/v1/auth/session).
async fn my_id(api: &Api) -> Result<String, ClientError> {
    api.get("/api/v1/auth/session")
        .await?
        .get("principal_id")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| ClientError::Protocol("no principal_id".into()))
}

/// The pairing code of an answer (createHost, a new pairing code).
fn pairing_code(answer: &Value) -> Result<&str, ClientError> {
    answer
        .get("pairing_code")
        .and_then(Value::as_str)
        .ok_or_else(|| ClientError::Protocol("no pairing_code in the answer".into()))
}

fn pair_command(server: &str, code: &str) -> String {
    format!("sudo bothy-host pair --server {server} --code {code}")
}

async fn create(
    api: &Api,
    server: &str,
    name: &str,
    assignee: Option<&str>,
    reason: &str,
) -> Result<i32, ClientError> {
    let mut body = json!({"name": name, "reason": reason});
    if let Some(username) = assignee {
        body["assigned_user_id"] = json!(person_id(api, username).await?);
    }
    body["step_up_id"] = json!(step_up(api).await?);
    let answer = api.post("/api/v1/hosts", &body).await?;
    let code = pairing_code(&answer)?;
    let id = answer["host"]
        .get("id")
        .and_then(Value::as_str)
        .unwrap_or("-");
    println!("Host {name} created ({id}).");
    println!("Pairing code (shown only now): {code}");
    println!("On the host, run:");
    println!("  {}", pair_command(server, code));
    println!("then: bothy host confirm {id} --reason ...");
    Ok(0)
}

async fn pair_again(
    api: &Api,
    server: &str,
    wanted: &str,
    reason: &str,
) -> Result<i32, ClientError> {
    let host = resolve_host(api, wanted).await?;
    let host_id = uuid_of(&host, "id")?;
    let step_up_id = step_up(api).await?;
    let answer = api
        .post(
            &format!("/api/v1/hosts/{host_id}/pairing-code"),
            &json!({"reason": reason, "step_up_id": step_up_id}),
        )
        .await?;
    let code = pairing_code(&answer)?;
    println!("New pairing code (shown only now): {code}");
    println!("The host's sessions ended and its old keys are refused. On the host, run:");
    println!("  {}", pair_command(server, code));
    println!("then: bothy host confirm {host_id} --reason ...");
    Ok(0)
}

async fn confirm(api: &Api, wanted: &str, reason: &str) -> Result<i32, ClientError> {
    let host = resolve_host(api, wanted).await?;
    let host_id = uuid_of(&host, "id")?;
    if host.get("state").and_then(Value::as_str) != Some("confirming") {
        return Err(ClientError::Usage(
            "the host is not waiting for a confirmation (run bothy-host pair first)".into(),
        ));
    }
    let my_id = my_id(api).await?;
    let mut tty = Tty::open("the confirmation of a host")?;
    // Nothing of the fingerprint is shown here: the owner types what the
    // host itself printed (3.2 step 3).
    let prefix = tty.ask(&format!(
        "Type the first {CONFIRM_CHARS} characters of the fingerprint that bothy-host pair showed: "
    ))?;
    let prefix: String = prefix
        .chars()
        .filter(|c| *c != '-' && !c.is_whitespace())
        .collect();
    let server_host = loop {
        let answer = tty.ask("Is this host the machine the bothy server runs on? (yes/no): ")?;
        match answer.trim() {
            "yes" => break true,
            "no" => break false,
            _ => tty.say("Please answer yes or no.\n")?,
        }
    };
    let llm = loop {
        let answer = tty.ask("LLM login on this host (none/organization/personal): ")?;
        match answer.trim() {
            value @ ("none" | "organization" | "personal") => break value.to_owned(),
            _ => tty.say("Please answer none, organization or personal.\n")?,
        }
    };
    let reported: Vec<String> = host
        .get("reported_session_users")
        .and_then(Value::as_array)
        .map(|users| {
            users
                .iter()
                .filter_map(|u| u.get("name").and_then(Value::as_str).map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let mut session_users = Vec::new();
    if !reported.is_empty() {
        let own = loop {
            let answer = tty.ask(&format!(
                "Your own session user on this host ({}; empty for none): ",
                reported.join(", ")
            ))?;
            let answer = answer.trim().to_owned();
            if answer.is_empty() || reported.contains(&answer) {
                break answer;
            }
            tty.say("That name is not one the host reported.\n")?;
        };
        let mut taken: Vec<String> = Vec::new();
        if !own.is_empty() {
            session_users.push(json!({"user_id": my_id, "os_user": own}));
            taken.push(own);
        }
        // The others' session users: one person and one name per line.
        loop {
            let answer = tty.ask(
                "Assign a session user to another person (USERNAME SESSION_USER; empty to finish): ",
            )?;
            let words: Vec<&str> = answer.split_whitespace().collect();
            match words.as_slice() {
                [] => break,
                [username, os_user] => {
                    let os_user = (*os_user).to_owned();
                    if !reported.contains(&os_user) || taken.contains(&os_user) {
                        tty.say("That name is not one the host reported, or it is taken.\n")?;
                        continue;
                    }
                    match person_id(api, username).await {
                        Ok(id) => {
                            session_users.push(json!({"user_id": id, "os_user": os_user}));
                            taken.push(os_user);
                        }
                        Err(_) => tty.say("No person has that username.\n")?,
                    }
                }
                _ => tty.say("Give a username and a session user, or nothing.\n")?,
            }
        }
    }
    drop(tty);
    let mut body = json!({
        "fingerprint_prefix": prefix,
        "llm_credentials": llm,
        "declared_server_host": server_host,
        "session_users": session_users,
        "reason": reason,
    });
    if llm == "personal" {
        body["credential_holder_id"] = json!(my_id);
    }
    body["step_up_id"] = json!(step_up(api).await?);
    let answer = api
        .post(&format!("/api/v1/hosts/{host_id}/confirm"), &body)
        .await?;
    let state = answer["host"]
        .get("state")
        .and_then(Value::as_str)
        .unwrap_or("-");
    println!("Host {host_id} confirmed: {state}.");
    Ok(0)
}

/// updateHost with the host's current version.
async fn update(
    api: &Api,
    wanted: &str,
    mut change: Value,
    reason: &str,
) -> Result<Value, ClientError> {
    let host = resolve_host(api, wanted).await?;
    let host_id = uuid_of(&host, "id")?;
    let path = format!("/api/v1/hosts/{host_id}");
    let step_up_id = step_up(api).await?;
    let (_, etag) = api.get_versioned(&path).await?;
    change["reason"] = json!(reason);
    change["step_up_id"] = json!(step_up_id);
    api.send_if_match(Method::PATCH, &path, &change, &etag)
        .await
}

/// setHostLlmCredentials (7.2) with the host's version.
async fn llm(
    api: &Api,
    wanted: &str,
    credentials: &str,
    holder: Option<&str>,
    reason: &str,
) -> Result<i32, ClientError> {
    let host = resolve_host(api, wanted).await?;
    let host_id = uuid_of(&host, "id")?;
    let mut body = json!({"llm_credentials": credentials, "reason": reason});
    if credentials == "personal" {
        let holder_id = match holder {
            Some(username) => person_id(api, username).await?,
            None => my_id(api).await?,
        };
        body["credential_holder_id"] = json!(holder_id);
    } else if holder.is_some() {
        return Err(ClientError::Usage(
            "--holder goes only with personal".into(),
        ));
    }
    let path = format!("/api/v1/hosts/{host_id}");
    body["step_up_id"] = json!(step_up(api).await?);
    let (_, etag) = api.get_versioned(&path).await?;
    api.send_if_match(
        Method::PUT,
        &format!("{path}/llm-credentials"),
        &body,
        &etag,
    )
    .await?;
    println!("Host {wanted}: LLM login {credentials}.");
    Ok(0)
}

async fn set_state(api: &Api, wanted: &str, state: &str, reason: &str) -> Result<i32, ClientError> {
    let answer = update(api, wanted, json!({"state": state}), reason).await?;
    let now = answer
        .get("host")
        .unwrap_or(&answer)
        .get("state")
        .and_then(Value::as_str)
        .unwrap_or(state);
    println!("Host {wanted}: {now}.");
    Ok(0)
}

/// `bothy grant HOST --person USER | --group NAME`.
pub async fn grant(
    dirs: &Dirs,
    wanted: &str,
    person: Option<&str>,
    group: Option<&str>,
) -> Result<i32, ClientError> {
    let (_, api) = logged_in(dirs)?;
    let host = resolve_host(&api, wanted).await?;
    let host_id = uuid_of(&host, "id")?;
    let (kind, id, who) = match (person, group) {
        (Some(username), None) => ("person", person_id(&api, username).await?, username),
        (None, Some(name)) => ("group", group_id(&api, name).await?, name),
        _ => {
            return Err(ClientError::Usage(
                "name exactly one of --person and --group".into(),
            ));
        }
    };
    let answer = api
        .post(
            "/api/v1/grants",
            &json!({"host_id": host_id.to_string(), "recipient_kind": kind, "recipient_id": id}),
        )
        .await?;
    let id = answer["grant"]
        .get("id")
        .and_then(Value::as_str)
        .unwrap_or("-");
    println!("Grant {id}: {kind} {who} has terminal on {wanted}.");
    if answer["preview"].get("effective").and_then(Value::as_bool) == Some(false) {
        println!(
            "Note: it has no effect yet (a person needs a session user on the host, and the host's rules must allow it)."
        );
    }
    Ok(0)
}

/// `bothy grants [--host HOST] [--json]`.
pub async fn grants(dirs: &Dirs, host: Option<&str>, as_json: bool) -> Result<i32, ClientError> {
    let (_, api) = logged_in(dirs)?;
    let grants = list_of_host(&api, "/api/v1/grants", "grants", host).await?;
    if as_json {
        println!("{}", Value::Array(grants));
        return Ok(0);
    }
    let hosts = list_hosts(&api).await?;
    println!(
        "{:<36}  {:<20}  {:<7}  {:<36}  VALID",
        "GRANT", "HOST", "KIND", "RECIPIENT"
    );
    for grant in &grants {
        let text = |key: &str| grant.get(key).and_then(Value::as_str).unwrap_or("-");
        let host_name = hosts
            .iter()
            .find(|h| h.get("id").and_then(Value::as_str) == Some(text("host_id")))
            .and_then(|h| h.get("name").and_then(Value::as_str))
            .unwrap_or("-");
        let valid = grant.get("valid").and_then(Value::as_bool) == Some(true);
        println!(
            "{:<36}  {:<20}  {:<7}  {:<36}  {}",
            text("id"),
            host_name,
            text("recipient_kind"),
            text("recipient_id"),
            if valid { "yes" } else { "no" }
        );
    }
    Ok(0)
}

/// `bothy revoke GRANT`.
pub async fn revoke(dirs: &Dirs, grant: &str) -> Result<i32, ClientError> {
    let grant = id_typed(grant, "grant")?;
    let (_, api) = logged_in(dirs)?;
    let answer = api
        .post_empty(&format!("/api/v1/grants/{grant}/revoke"))
        .await?;
    let ended = answer
        .get("sessions_ended")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    println!("Grant {grant} revoked; {ended} session(s) ended.");
    Ok(0)
}

/// `bothy person ...`.
pub async fn person(dirs: &Dirs, action: PersonAction) -> Result<i32, ClientError> {
    let (_, api) = logged_in(dirs)?;
    match action {
        PersonAction::Invite { username, role } => {
            let answer = api
                .post(
                    "/api/v1/persons",
                    &json!({"username": username, "role": role}),
                )
                .await?;
            let code = answer
                .get("enrollment_code")
                .and_then(Value::as_str)
                .ok_or_else(|| ClientError::Protocol("no enrollment_code in the answer".into()))?;
            println!("{username} invited as {role}.");
            println!("Enrollment code (shown only now; give it to {username} privately): {code}");
            Ok(0)
        }
        PersonAction::Disable { username, reason } => {
            // The username first: an unknown one asks for no TOTP code.
            let id = person_id(&api, &username).await?;
            let step_up_id = step_up(&api).await?;
            let answer = api
                .post(
                    &format!("/api/v1/persons/{id}/disable"),
                    &json!({"reason": reason, "step_up_id": step_up_id}),
                )
                .await?;
            let name = answered_username(&answer, &username);
            if changed(&answer) {
                let ended = answer
                    .get("sessions_ended")
                    .and_then(Value::as_u64)
                    .unwrap_or(0);
                println!("{name} disabled; {ended} login session(s) ended.");
            } else {
                println!("{name} was disabled already.");
            }
            Ok(0)
        }
        PersonAction::Enable { username } => {
            let id = person_id(&api, &username).await?;
            let answer = api
                .post_empty(&format!("/api/v1/persons/{id}/enable"))
                .await?;
            let name = answered_username(&answer, &username);
            if changed(&answer) {
                println!("{name} enabled.");
            } else {
                println!("{name} was active already.");
            }
            Ok(0)
        }
    }
}

/// The username of the answer's `person` (as stored), else as typed.
fn answered_username<'a>(answer: &'a Value, typed: &'a str) -> &'a str {
    answer["person"]
        .get("username")
        .and_then(Value::as_str)
        .unwrap_or(typed)
}

/// The answer's `changed`, which a person route always has.
fn changed(answer: &Value) -> bool {
    answer.get("changed").and_then(Value::as_bool) == Some(true)
}
