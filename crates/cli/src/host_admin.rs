//! Administration for owners (3.1–3.3, 7.2, 2.2, DESIGN §3.2): create a host
//! and get its pairing code once, confirm it after `bothy-host pair`, pair it
//! again, disable, enable or retire it, assign or end session users (each
//! with a step-up and a reason; updates carry the host's `ETag` as
//! `If-Match`); grant and revoke terminal on a host; invite, disable (with a
//! step-up and a reason) and enable persons.

use bothy_api::auth::SessionResponse;
use bothy_api::persons::{
    DisablePersonRequest, DisabledPerson, EnabledPerson, InvitePersonRequest, InvitedPerson,
    PersonList,
};
use bothy_net::Method;
use serde_json::{Value, json};

use crate::api::Api;
use crate::cli::{HostAction, PersonAction};
use crate::commands::common::{logged_in, print_json, step_up, uuid_of};
use crate::commands::hosts::{host_show, list_hosts, list_of_host, resolve_host};
use crate::dirs::Dirs;
use crate::error::ClientError;
use crate::prompt::Tty;

/// How many characters of the fingerprint the owner types (the default of
/// terminal.fingerprint_confirm_chars; the server checks the real value).
const CONFIRM_CHARS: usize = 8;

/// The alphabet of a fingerprint (Crockford's base32; 4.3).
const CROCKFORD: &str = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/// What the owner typed as the fingerprint's start, in the form the server
/// compares (hyphens and spaces removed, upper case) when it has the form of
/// one: [`CONFIRM_CHARS`] characters of the alphabet. I, L, O and U are not
/// reinterpreted (3.2 "Prefix"), they are refused.
pub fn prefix_form(typed: &str) -> Option<String> {
    let prefix: String = typed
        .chars()
        .filter(|c| *c != '-' && !c.is_whitespace())
        .map(|c| c.to_ascii_uppercase())
        .collect();
    (prefix.chars().count() == CONFIRM_CHARS && prefix.chars().all(|c| CROCKFORD.contains(c)))
        .then_some(prefix)
}

/// The ID of a grant typed on the command line.
fn grant_typed(text: &str) -> Result<uuid::Uuid, ClientError> {
    uuid::Uuid::parse_str(text)
        .map_err(|_| ClientError::Usage(format!("{text:?} is not a grant ID (bothy grants)")))
}

/// Runs one host action.
pub async fn run(dirs: &Dirs, action: HostAction) -> Result<i32, ClientError> {
    let (stored, api) = logged_in(dirs)?;
    match action {
        HostAction::Create {
            name,
            assignee,
            reason,
        } => create(&api, &stored.server, &name, assignee.as_deref(), &reason).await,
        HostAction::Show { host, json } => host_show(&api, &host, json).await,
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
    let folded = username.to_ascii_lowercase();
    let list: PersonList = api.get_as("/api/v1/persons").await?;
    list.persons
        .into_iter()
        .find(|person| person.username == folded)
        .map(|person| person.id)
        .ok_or_else(|| ClientError::UnknownPerson(username.to_owned()))
}

/// The ID of the group `name` (GET /api/v1/groups).
async fn group_id(api: &Api, name: &str) -> Result<String, ClientError> {
    id_named(api, "group", "name", name)
        .await?
        .ok_or_else(|| ClientError::UnknownGroup(name.to_owned()))
}

/// The `id` of the `kind` (a group) whose `name_key` is `name`, from
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
    Ok(match api.get_as("/api/v1/auth/session").await? {
        SessionResponse::Person(person) => person.principal_id,
        SessionResponse::Service(service) => service.principal_id,
    })
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

/// Asks for the fingerprint's start until it has the form of one (a typo is
/// said at once and costs no attempt, D-373).
fn ask_prefix(tty: &mut Tty) -> Result<String, ClientError> {
    loop {
        let typed = tty.ask(&format!(
            "Type the first {CONFIRM_CHARS} characters of the fingerprint that bothy-host pair showed: "
        ))?;
        match prefix_form(&typed) {
            Some(prefix) => return Ok(prefix),
            None => tty.say(&format!(
                "That is not the start of a fingerprint: {CONFIRM_CHARS} characters of 0-9 and \
                 A-Z without I, L, O and U. Once more.\n"
            ))?,
        }
    }
}

/// `bothy host confirm HOST` (3.2): the fingerprint's start first (its form
/// checked here), the declarations, the step-up; a wrong start says how many
/// attempts are left and asks again with a new step-up, keeping the other
/// answers (D-373).
async fn confirm(api: &Api, wanted: &str, reason: &str) -> Result<i32, ClientError> {
    let host = resolve_host(api, wanted).await?;
    let host_id = uuid_of(&host, "id")?;
    if host.get("state").and_then(Value::as_str) != Some("confirming") {
        return Err(ClientError::HostState(format!(
            "the host is {}, not waiting for a confirmation (it is confirming after bothy-host pair)",
            host.get("state").and_then(Value::as_str).unwrap_or("-")
        )));
    }
    let my_id = my_id(api).await?;
    let mut tty = Tty::open("the confirmation of a host")?;
    // Nothing of the fingerprint is shown here: the owner types what the
    // host itself printed (3.2 step 3).
    let mut prefix = ask_prefix(&mut tty)?;
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
        "llm_credentials": llm,
        "declared_server_host": server_host,
        "session_users": session_users,
        "reason": reason,
    });
    if llm == "personal" {
        body["credential_holder_id"] = json!(my_id);
    }
    body["step_up_id"] = json!(step_up(api).await?);
    let answer = loop {
        body["fingerprint_prefix"] = json!(prefix);
        match api
            .post(&format!("/api/v1/hosts/{host_id}/confirm"), &body)
            .await
        {
            Ok(answer) => break answer,
            // A wrong start counted (3.2); its step-up is spent.
            Err(ClientError::Problem(problem))
                if problem.is("fingerprint_mismatch", None)
                    && problem.attempts_remaining.is_some_and(|n| n > 0) =>
            {
                let mut tty = Tty::open("the confirmation of a host")?;
                tty.say(&format!("{}.\n", capitalized(&problem.summary())))?;
                prefix = ask_prefix(&mut tty)?;
                drop(tty);
                body["step_up_id"] = json!(step_up(api).await?);
            }
            // Another length than this client's default (the server's
            // terminal.fingerprint_confirm_chars): not counted, the step-up
            // stays unspent.
            Err(ClientError::Problem(problem))
                if problem.is("validation_failed", None)
                    && problem
                        .errors
                        .iter()
                        .any(|(pointer, _)| pointer == "/fingerprint_prefix") =>
            {
                let mut tty = Tty::open("the confirmation of a host")?;
                tty.say(
                    "The server wants another number of characters \
                     (terminal.fingerprint_confirm_chars of its configuration).\n",
                )?;
                let typed = tty.ask("The fingerprint's start as the server wants it: ")?;
                prefix = typed
                    .chars()
                    .filter(|c| *c != '-' && !c.is_whitespace())
                    .collect();
            }
            Err(e) => return Err(e),
        }
    };
    let state = answer["host"]
        .get("state")
        .and_then(Value::as_str)
        .unwrap_or("-");
    println!("Host {host_id} confirmed: {state}.");
    Ok(0)
}

/// `text` with its first letter in upper case.
fn capitalized(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
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
    let host = answer.get("host").unwrap_or(&answer);
    let now = host.get("state").and_then(Value::as_str).unwrap_or(state);
    println!("Host {wanted}: {now}.");
    let connected = host.get("connected").and_then(Value::as_bool) == Some(true);
    if now == "active" && !connected {
        // Issue 15 item 4: a disabled host's service waits its longest
        // backoff before each new attempt (4111, 3.5).
        println!(
            "Its host service is not connected yet: after a disable it tries again only after \
             its longest backoff, host_service.reconnect_backoff_cap (5 minutes by default). \
             To connect it now, run bothy-host restart on the host; bothy hosts shows when it is \
             connected."
        );
    }
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
        print_json(Value::Array(grants));
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
    let grant = grant_typed(grant)?;
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
            let request = InvitePersonRequest {
                username: username.clone(),
                role: role.clone(),
            };
            let answer: InvitedPerson = api.post_as("/api/v1/persons", &request).await?;
            let code = &answer.enrollment_code;
            println!("{username} invited as {role}.");
            println!("Enrollment code (shown only now; give it to {username} privately): {code}");
            Ok(0)
        }
        PersonAction::Disable { username, reason } => {
            // The username first: an unknown one asks for no TOTP code.
            let id = person_id(&api, &username).await?;
            let step_up_id = step_up(&api).await?;
            let request = DisablePersonRequest { reason, step_up_id };
            let answer: DisabledPerson = api
                .post_as(&format!("/api/v1/persons/{id}/disable"), &request)
                .await?;
            let name = &answer.person.username;
            if answer.changed {
                let ended = answer.sessions_ended;
                println!("{name} disabled; {ended} login session(s) ended.");
            } else {
                println!("{name} was disabled already.");
            }
            Ok(0)
        }
        PersonAction::Enable { username } => {
            let id = person_id(&api, &username).await?;
            let answer: EnabledPerson = api
                .post_empty_as(&format!("/api/v1/persons/{id}/enable"))
                .await?;
            let name = &answer.person.username;
            if answer.changed {
                println!("{name} enabled.");
            } else {
                println!("{name} was active already.");
            }
            Ok(0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_has_eight_characters_of_the_alphabet() {
        assert_eq!(prefix_form("abcd-efgh").as_deref(), Some("ABCDEFGH"));
        assert_eq!(prefix_form(" 0123 4567 ").as_deref(), Some("01234567"));
        // I, L, O, U are not in the alphabet (3.2: not reinterpreted).
        for typo in ["ILOU1234", "ABCDEFG", "ABCDEFGHJ", "ABCD_EFG", ""] {
            assert_eq!(prefix_form(typo), None, "{typo}");
        }
    }
}
