//! The sessions as the person sees them: `bothy sessions`, `close`, the
//! paged list and the lookup of a session by ID, its start or the only one.

use serde_json::{Value, json};
use uuid::Uuid;

use bothy_api::terminal::{ClosedTerminalSession, TerminalSession, TerminalSessionList};

use super::common::{logged_in, print_json};
use super::hosts::{host_named, host_uuid, list_hosts, llm_badge, resolve_host};
use crate::api::Api;
use crate::dirs::Dirs;
use crate::display::{format_duration, format_time, short_fingerprint, short_id};
use crate::error::{ClientError, EXIT_OK};

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
pub(super) async fn sessions(
    dirs: &Dirs,
    host: Option<&str>,
    all: bool,
    as_json: bool,
    page_size: u32,
) -> Result<i32, ClientError> {
    let (_, api) = logged_in(dirs)?;
    let hosts = list_hosts(&api).await?;
    let host_id = match host {
        Some(wanted) => Some(host_uuid(&resolve_host(&api, wanted).await?)?),
        None => None,
    };
    let sessions = list_sessions(&api, host_id, all, page_size).await?;
    if as_json {
        let named: Vec<Value> = sessions
            .iter()
            .map(|session| {
                let name = host_named(&hosts, &session.host_id).map(|h| h.name.as_str());
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
        let host = host_named(&hosts, host_id);
        println!(
            "{}  ({host_id})  LLM: {}  fingerprint {}",
            host.map_or("-", |h| h.name.as_str()),
            host.map_or("None", llm_badge),
            short_fingerprint(
                host.and_then(|h| h.key_fingerprint.as_deref())
                    .unwrap_or("-")
            )
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

pub(super) async fn close(dirs: &Dirs, session: &str) -> Result<i32, ClientError> {
    let (_, api) = logged_in(dirs)?;
    let row = resolve_session(&api, session).await?;
    let session_id = session_uuid(&row)?;
    let closed: ClosedTerminalSession = api
        .post_empty_as(&format!("/api/v1/terminal/sessions/{session_id}/close"))
        .await?;
    println!("Session {session_id} closed ({}).", closed.close_reason);
    Ok(EXIT_OK)
}
