//! Administration for owners (3.1–3.3, 7.2, 2.2, DESIGN §3.2): create a host
//! and get its pairing code once, confirm it after `bothy-host pair`, pair it
//! again, disable, enable or retire it, assign or end session users (each
//! with a step-up and a reason; updates carry the host's `ETag` as
//! `If-Match`); grant and revoke terminal on a host; invite, disable (with a
//! step-up and a reason) and enable persons.

use bothy_api::auth::SessionResponse;
use bothy_api::grants::{CreateGrantRequest, CreatedGrant, GrantList, RevokedGrant};
use bothy_api::groups::GroupList;
use bothy_api::hosts::{
    ConfirmAssignment, ConfirmHostRequest, CreateHostRequest, HostReply, HostWithCode,
    IssuePairingCodeRequest, ManagedHostReply, SessionUserAssignment, SetHostLlmCredentialsRequest,
    UpdateHostRequest,
};
use bothy_api::persons::{
    DisablePersonRequest, DisabledPerson, EnabledPerson, InvitePersonRequest, InvitedPerson,
    PersonList,
};
use bothy_net::Method;

use super::common::{logged_in, print_json, step_up};
use super::hosts::{
    host_named, host_show, host_uuid, json_of, list_hosts, list_of_host, reported_session_users,
    resolve_host,
};
use crate::api::Api;
use crate::cli::{HostAction, PersonAction};
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
            let change = UpdateHostRequest {
                assign_session_users: Some(vec![SessionUserAssignment {
                    user_id: person_id,
                    os_user: os_user.clone(),
                }]),
                ..UpdateHostRequest::default()
            };
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
            let change = UpdateHostRequest {
                end_session_users: Some(vec![person_id]),
                ..UpdateHostRequest::default()
            };
            update(&api, &host, change, &reason).await?;
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
    let list: GroupList = api.get_as("/api/v1/groups").await?;
    list.groups
        .into_iter()
        .find(|group| group.name == name)
        .map(|group| group.id)
        .ok_or_else(|| ClientError::UnknownGroup(name.to_owned()))
}

/// The ID of the person logged in (GET /api/v1/auth/session).
async fn my_id(api: &Api) -> Result<String, ClientError> {
    Ok(match api.get_as("/api/v1/auth/session").await? {
        SessionResponse::Person(person) => person.principal_id,
        SessionResponse::Service(service) => service.principal_id,
    })
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
    let assigned_user_id = match assignee {
        Some(username) => Some(person_id(api, username).await?),
        None => None,
    };
    let body = CreateHostRequest {
        name: name.to_owned(),
        assigned_user_id,
        reason: reason.to_owned(),
        step_up_id: step_up(api).await?,
    };
    let answer: HostWithCode = api.post_as("/api/v1/hosts", &body).await?;
    let code = answer.pairing_code.as_str();
    let id = answer.host.id.as_str();
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
    let host_id = host_uuid(&host)?;
    let body = IssuePairingCodeRequest {
        reason: reason.to_owned(),
        step_up_id: step_up(api).await?,
    };
    let answer: HostWithCode = api
        .post_as(&format!("/api/v1/hosts/{host_id}/pairing-code"), &body)
        .await?;
    let code = answer.pairing_code.as_str();
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
    let host_id = host_uuid(&host)?;
    if host.state != "confirming" {
        return Err(ClientError::HostState(format!(
            "the host is {}, not waiting for a confirmation (it is confirming after bothy-host pair)",
            host.state
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
    let reported = reported_session_users(&host);
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
            session_users.push(ConfirmAssignment {
                user_id: my_id.clone(),
                os_user: own.clone(),
            });
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
                            session_users.push(ConfirmAssignment {
                                user_id: id,
                                os_user: os_user.clone(),
                            });
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
    let mut body = ConfirmHostRequest {
        fingerprint_prefix: String::new(),
        credential_holder_id: (llm == "personal").then(|| my_id.clone()),
        llm_credentials: llm,
        declared_server_host: server_host,
        session_users,
        reason: reason.to_owned(),
        step_up_id: step_up(api).await?,
    };
    let answer: HostReply = loop {
        body.fingerprint_prefix.clone_from(&prefix);
        match api
            .post_as(&format!("/api/v1/hosts/{host_id}/confirm"), &body)
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
                body.step_up_id = step_up(api).await?;
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
    println!("Host {host_id} confirmed: {}.", answer.host.state);
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
    mut change: UpdateHostRequest,
    reason: &str,
) -> Result<ManagedHostReply, ClientError> {
    let host = resolve_host(api, wanted).await?;
    let host_id = host_uuid(&host)?;
    let path = format!("/api/v1/hosts/{host_id}");
    let step_up_id = step_up(api).await?;
    let (_, etag) = api.get_versioned(&path).await?;
    reason.clone_into(&mut change.reason);
    change.step_up_id = step_up_id;
    api.send_if_match_as(Method::PATCH, &path, &change, &etag)
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
    let host_id = host_uuid(&host)?;
    let credential_holder_id = if credentials == "personal" {
        Some(match holder {
            Some(username) => person_id(api, username).await?,
            None => my_id(api).await?,
        })
    } else if holder.is_some() {
        return Err(ClientError::Usage(
            "--holder goes only with personal".into(),
        ));
    } else {
        None
    };
    let path = format!("/api/v1/hosts/{host_id}");
    let body = SetHostLlmCredentialsRequest {
        llm_credentials: credentials.to_owned(),
        credential_holder_id,
        reason: reason.to_owned(),
        step_up_id: step_up(api).await?,
    };
    let (_, etag) = api.get_versioned(&path).await?;
    let _: ManagedHostReply = api
        .send_if_match_as(
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
    let change = UpdateHostRequest {
        state: Some(state.to_owned()),
        ..UpdateHostRequest::default()
    };
    let host = update(api, wanted, change, reason).await?.host;
    let now = host.state.as_str();
    println!("Host {wanted}: {now}.");
    let connected = host.connected == Some(true);
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
    let host_id = host_uuid(&host)?;
    let (kind, id, who) = match (person, group) {
        (Some(username), None) => ("person", person_id(&api, username).await?, username),
        (None, Some(name)) => ("group", group_id(&api, name).await?, name),
        _ => {
            return Err(ClientError::Usage(
                "name exactly one of --person and --group".into(),
            ));
        }
    };
    let body = CreateGrantRequest {
        host_id: host_id.to_string(),
        recipient_kind: kind.to_owned(),
        recipient_id: id,
        expires_at: None,
    };
    let answer: CreatedGrant = api.post_as("/api/v1/grants", &body).await?;
    let id = answer.grant.id;
    println!("Grant {id}: {kind} {who} has terminal on {wanted}.");
    if !answer.preview.effective {
        println!(
            "Note: it has no effect yet (a person needs a session user on the host, and the host's rules must allow it)."
        );
    }
    Ok(0)
}

/// `bothy grants [--host HOST] [--json]`.
pub async fn grants(dirs: &Dirs, host: Option<&str>, as_json: bool) -> Result<i32, ClientError> {
    let (_, api) = logged_in(dirs)?;
    let grants = list_of_host::<GrantList>(&api, "/api/v1/grants", host)
        .await?
        .grants;
    if as_json {
        print_json(json_of(&grants));
        return Ok(0);
    }
    let hosts = list_hosts(&api).await?;
    println!(
        "{:<36}  {:<20}  {:<7}  {:<36}  VALID",
        "GRANT", "HOST", "KIND", "RECIPIENT"
    );
    for grant in &grants {
        let host_name = host_named(&hosts, &grant.host_id).map_or("-", |h| h.name.as_str());
        println!(
            "{:<36}  {:<20}  {:<7}  {:<36}  {}",
            grant.id,
            host_name,
            grant.recipient_kind,
            grant.recipient_id,
            if grant.valid { "yes" } else { "no" }
        );
    }
    Ok(0)
}

/// `bothy revoke GRANT`.
pub async fn revoke(dirs: &Dirs, grant: &str) -> Result<i32, ClientError> {
    let grant = grant_typed(grant)?;
    let (_, api) = logged_in(dirs)?;
    let answer: RevokedGrant = api
        .post_empty_as(&format!("/api/v1/grants/{grant}/revoke"))
        .await?;
    let ended = answer.sessions_ended;
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
