//! The logins of the relay's two WebSocket sides (spec 24 sections 6.1 steps
//! 4–7, 6.2, 6.3, 9, 13; DESIGN 3.4 "Device stream login" and "Host data
//! connection login"), run on the socket the routes of
//! `http/routes/terminal_streams.rs` upgraded; then the side joins the relay.
//!
//! # Data connection login
//! 1. The server sends `hello {challenge, jwks, clock_leeway_ms,
//!    idle_timeout_ms, detach_grace_ms, server_time}`.
//! 2. No frame within `terminal.host_auth_timeout` (on the server's clock):
//!    4113. A frame that does not decode as `identify` (or a binary frame):
//!    4002.
//! 3. `protocol_version` other than 1: 4114; the data shape
//!    ([`Identify::check_data_shape`]: `session_id` of the path, no
//!    `live_sessions`, SemVer `host_version`): 4002.
//! 4. The proof, exactly as on the control connection
//!    ([`host_auth::verify_host_proof`]): 4110 or 4113; then one token of
//!    `rl.host` (4008); then [`host_auth::check_host_may_connect`]: 4111 (or
//!    4110). Before the proof an empty `rl.public_auth` bucket of the client
//!    address closes with 4008, and a refused proof takes one token of it
//!    (6.3, [`crate::terminal::channel_limits`]).
//! 5. The session: unknown, or of another host: 4100 `access_revoked` (fail
//!    closed for IDs the server does not give this host, like `session.close`
//!    on the control connection); closed: 4100 with its `close_reason`.
//!
//! # Device stream login
//! 1. The device sends `identify {access_token?}` within
//!    `terminal.host_auth_timeout` (on the server's clock; else 4004); a frame
//!    that does not decode: 4002.
//! 2. The credential: the `access_token` of a CLI login (the same lookup as
//!    `Authorization: Bearer`), or — without a token — the web console's
//!    cookie `bothy_session` sent with the upgrade, taken only when the
//!    upgrade's `Origin` is the origin of `server.public_url` (a browser
//!    sends its page's origin with every WebSocket upgrade, so another site
//!    cannot use the cookie; docs/decisions.md D-84). No credential at all:
//!    4004. While the client address's `rl.public_auth` bucket is empty, a
//!    presented credential is not checked: 4008.
//! 3. The check: an unknown token, the token of an agent or app, a console
//!    token as `access_token`, or a CLI token as the cookie: 4004; a login
//!    session that exists but is ended, expired, of a disabled person or of a
//!    revoked device: 4012. The session must exist and be the login's: a CLI
//!    login's device is the session's `device_id`; a console login is the
//!    session's login session and the session has no device (D-73). Else
//!    4004 and a `terminal.stream` deny entry with `session_id`, `device_id`
//!    (CLI) and `reason` (`session_unknown`, `device_mismatch`)
//!    (docs/decisions.md D-81). Each 4004 and 4012 of a presented credential
//!    takes one token of `rl.public_auth` of the client address.
//! 4. One token of the person's `rl.terminal` (4008), then a closed session:
//!    4100 with its `close_reason`.
//! 5. `ready {session_id}`.
//!
//! # After the login
//! See [`crate::terminal::relay`]: 4100 (ended, `close_reason` as text), 4102
//! (no counterpart within `terminal.open_timeout`, or the host went away),
//! 4103 (a newer device stream), 4014 (slow receiver), 4013 (shutdown), 1000
//! (a data connection replaced by a newer one), and 4101/4104 handed from the
//! host service to the device unchanged — also when the host reported the
//! refusal through `session.ended`
//! ([`crate::terminal::relay::stream_code_for_end`]).

use std::net::IpAddr;
use std::time::Duration;

use bothy_proto::codes::{CloseCode, CloseReason};
use bothy_proto::data::{self, Hello};
use bothy_proto::jwk::Jwks;
use bothy_proto::stream::{self, DeviceMessage, Ready};
use sqlx::Row;
use uuid::Uuid;

use super::wire::{self, Io, Message, WireSocket};

use super::store::{self, SessionRow};
use super::{Side, TICK, side};
use crate::audit::{Actor, AuditAction, AuditDetails, AuditEntry, TargetKind};
use crate::clock::millis;
use crate::codes::code_enum;
use crate::db;
use crate::identity::login_sessions::ClientComponent;
use crate::identity::opaque::{OpaqueSecret, SecretKind};
use crate::identity::principal::{self, PersonPrincipal, Principal};
use crate::ratelimit::RetryAfter;
use crate::shutdown::ShutdownGuard;
use crate::state::AppState;
use crate::terminal::host_auth::{self, HostAuthRefusal};
use crate::terminal::{channel_limits, keys};

/// The protocol versions of the data connection this server speaks.
const PROTOCOL_VERSIONS: &[u32] = &[1];

code_enum! {
    /// Why a device stream's identify was refused (`terminal.stream` deny, 10.1).
    pub enum StreamDenial {
        /// No session with the ID of the path.
        SessionUnknown => "session_unknown",
        /// The session belongs to another device (or person).
        DeviceMismatch => "device_mismatch",
    }
}

/// What the upgrade of a device stream brought besides the socket.
pub(crate) struct DevicePeer {
    /// The client's address (the key of `rl.public_auth`).
    pub(crate) client: IpAddr,
    /// The console's cookie, if the upgrade carried one from the origin of
    /// `server.public_url` (D-84).
    pub(crate) cookie: Option<String>,
}

/// A refused login: the close code and its text.
struct Refusal(u16, String);

impl Refusal {
    fn code(code: CloseCode) -> Refusal {
        Refusal(code.as_u16(), code.name().to_owned())
    }

    /// 4008 with `retry_after=<seconds>` (6.3).
    fn limited(retry: RetryAfter) -> Refusal {
        Refusal(
            CloseCode::RateLimited.as_u16(),
            channel_limits::close_text(retry),
        )
    }

    fn closed(reason: Option<&str>) -> Refusal {
        Refusal(
            CloseCode::TerminalClosed.as_u16(),
            reason
                .unwrap_or(CloseReason::AccessRevoked.as_str())
                .to_owned(),
        )
    }

    fn internal() -> Refusal {
        Refusal::code(CloseCode::UnknownError)
    }
}

/// The first text frame within `limit` of the server's clock (looked at every
/// [`TICK`]); `Ok(None)` if the peer left.
async fn first_text(
    state: &AppState,
    websocket: &mut WireSocket<Io>,
    limit: Duration,
    late: CloseCode,
) -> Result<Option<String>, Refusal> {
    let deadline = state.clock().now_ms().saturating_add(millis(limit));
    let mut ticks = tokio::time::interval(TICK);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let frame = loop {
        tokio::select! {
            // Pings are answered by the socket itself.
            frame = websocket.recv() => break frame,
            _ = ticks.tick() => {
                if state.clock().now_ms() >= deadline {
                    return Err(Refusal::code(late));
                }
            }
        }
    };
    match frame {
        Some(Ok(Message::Text(text))) => Ok(Some(text)),
        Some(Ok(Message::Close(_))) | None => Ok(None),
        Some(Ok(_)) | Some(Err(_)) => Err(Refusal::code(CloseCode::InvalidMessage)),
    }
}

pub(crate) async fn run_host(
    state: AppState,
    session_id: Uuid,
    client: IpAddr,
    mut websocket: WireSocket<Io>,
    mut guard: ShutdownGuard,
) {
    state.relay().ensure_started(&state);
    let login = tokio::select! {
        login = host_login(&state, session_id, client, &mut websocket) => login,
        () = guard.triggered() => Err(Refusal::code(CloseCode::ServerShutdown)),
    };
    match login {
        Ok(Some(row)) => join(state, session_id, Side::Host, websocket, row, guard).await,
        Ok(None) => {}
        Err(Refusal(code, reason)) => refuse(&state, websocket, code, reason).await,
    }
}

pub(crate) async fn run_device(
    state: AppState,
    session_id: Uuid,
    peer: DevicePeer,
    mut websocket: WireSocket<Io>,
    mut guard: ShutdownGuard,
) {
    state.relay().ensure_started(&state);
    let login = tokio::select! {
        login = device_login(&state, session_id, &peer, &mut websocket) => login,
        () = guard.triggered() => Err(Refusal::code(CloseCode::ServerShutdown)),
    };
    match login {
        Ok(Some(row)) => join(state, session_id, Side::Device, websocket, row, guard).await,
        Ok(None) => {}
        Err(Refusal(code, reason)) => refuse(&state, websocket, code, reason).await,
    }
}

/// Joins the relay, checks once more that the session was not closed
/// meanwhile (an end committed before the relay's tail could see this side),
/// then starts the side's own task.
///
/// An end found here closes every side of the session exactly as the tail's
/// delivery of that end will (the device with its code of 5.3, the host with
/// 4100), and this side then finds that close first in its queue. Leaving
/// quietly instead would tell a paired counterpart 4102 before the tail
/// arrives.
async fn join(
    state: AppState,
    session_id: Uuid,
    side_kind: Side,
    websocket: WireSocket<Io>,
    row: SessionRow,
    guard: ShutdownGuard,
) {
    let joined = state
        .relay()
        .join(&state, session_id, side_kind, row.limits());
    if let Ok(Some(now)) = store::load(&state, session_id).await {
        if now.is_closed() {
            state.relay().closed_at_join(&state, session_id, &now);
        }
    }
    // A task of its own, sized for the side's loop: the upgrade's task, sized
    // for the login as well, ends here and gives its memory back (issue 20:
    // what an idle side keeps, D-706).
    tokio::spawn(side::run(
        state, session_id, side_kind, websocket, joined, guard,
    ));
}

/// Sends the close frame of a refused login and waits for the answer.
async fn refuse(state: &AppState, websocket: WireSocket<Io>, code: u16, reason: String) {
    let (mut writer, mut reader) = websocket.split();
    let write_timeout = state.config().gateway.write_timeout;
    wire::close(&mut writer, &mut reader, code, reason, write_timeout).await;
}

/// The data connection's login; `Ok(None)` if the host left.
async fn host_login(
    state: &AppState,
    session_id: Uuid,
    client: IpAddr,
    websocket: &mut WireSocket<Io>,
) -> Result<Option<SessionRow>, Refusal> {
    let config = state.config();
    let hello_time = state.clock().now_ms();
    let mut challenge = [0u8; 32];
    getrandom::fill(&mut challenge).map_err(|_| Refusal::internal())?;
    let jwks = published_jwks(state, hello_time).await?;
    let hello = data::ServerMessage::Hello(Hello {
        challenge,
        jwks,
        clock_leeway_ms: millis(config.auth.clock_leeway),
        idle_timeout_ms: millis(config.terminal.idle_timeout),
        detach_grace_ms: millis(config.terminal.detach_grace),
        server_time: u64::try_from(hello_time).unwrap_or(0),
    });
    if websocket
        .send(Message::Text(hello.to_json()))
        .await
        .is_err()
    {
        return Ok(None);
    }
    let Some(text) = first_text(
        state,
        websocket,
        config.terminal.host_auth_timeout,
        CloseCode::HostAuthFailed,
    )
    .await?
    else {
        return Ok(None);
    };
    let data::HostMessage::Identify(identify) =
        data::HostMessage::decode(text.as_bytes(), config.sync.ws_max_frame_bytes)
            .map_err(|_| Refusal::code(CloseCode::InvalidMessage))?;
    if !PROTOCOL_VERSIONS.contains(&identify.protocol_version) {
        return Err(Refusal::code(CloseCode::HostVersionUnsupported));
    }
    identify
        .check_data_shape(session_id)
        .map_err(|_| Refusal::code(CloseCode::InvalidMessage))?;
    let now = state.clock().now_ms();
    channel_limits::gate(state, client, now).map_err(Refusal::limited)?;
    let host = {
        let mut conn = state
            .db()
            .pool()
            .acquire()
            .await
            .map_err(|_| Refusal::internal())?;
        host_auth::verify_host_proof(
            &mut conn,
            identify.host_id,
            &identify.proof,
            &challenge,
            hello_time,
            now,
            config.auth.clock_leeway,
        )
        .await
        .map_err(|refusal| {
            if matches!(
                refusal,
                HostAuthRefusal::Unpaired | HostAuthRefusal::AuthFailed
            ) {
                channel_limits::charge_failed_check(state, client, now);
            }
            Refusal::code(refusal.close_code())
        })?
    };
    channel_limits::take_host(state, host.id, now).map_err(Refusal::limited)?;
    host_auth::check_host_may_connect(&host)
        .map_err(|refusal| Refusal::code(refusal.close_code()))?;
    let row = store::load(state, session_id)
        .await
        .map_err(|_| Refusal::internal())?;
    match row {
        Some(row) if row.host_id == identify.host_id => {
            if row.is_closed() {
                Err(Refusal::closed(row.close_reason.as_deref()))
            } else {
                Ok(Some(row))
            }
        }
        _ => Err(Refusal::closed(None)),
    }
}

async fn published_jwks(state: &AppState, now: i64) -> Result<Jwks, Refusal> {
    // The first key of purpose terminal, as the control connection's login does.
    keys::ensure_active(state.db(), state.pepper(), now)
        .await
        .map_err(|error| {
            tracing::warn!(%error, "the data connection cannot ensure a terminal key");
            Refusal::internal()
        })?;
    let mut conn = state
        .db()
        .pool()
        .acquire()
        .await
        .map_err(|_| Refusal::internal())?;
    keys::jwks(&mut conn, now).await.map_err(|error| {
        tracing::warn!(%error, "the data connection cannot read the terminal keys");
        Refusal::internal()
    })
}

/// The credential a device stream presented.
enum Credential<'a> {
    /// `access_token` of identify (a CLI login).
    Token(&'a str),
    /// The console's cookie of the upgrade (identify without a token).
    Cookie(&'a str),
}

impl Credential<'_> {
    fn text(&self) -> &str {
        match self {
            Credential::Token(text) | Credential::Cookie(text) => text,
        }
    }

    /// The client component whose logins this credential may carry: a
    /// console token travels only as its cookie, a CLI token only as
    /// `access_token` (as on the REST routes).
    fn component(&self) -> ClientComponent {
        match self {
            Credential::Token(_) => ClientComponent::Cli,
            Credential::Cookie(_) => ClientComponent::Console,
        }
    }
}

/// Whether the login of `person` is the one a stream of `row` belongs to: a
/// CLI login's device is the session's device; a console login (no device
/// key) is the session's login session, and the session has no device
/// (docs/decisions.md D-73).
fn login_matches(person: &PersonPrincipal, row: &SessionRow) -> bool {
    if row.person_id != person.person_id {
        return false;
    }
    match person.client_component {
        ClientComponent::Console => {
            row.device_id.is_none() && row.login_session_id == person.login_session_id
        }
        ClientComponent::Cli => row.device_id.is_some() && row.device_id == person.device_id,
    }
}

/// The device stream's login; `Ok(None)` if the device left.
async fn device_login(
    state: &AppState,
    session_id: Uuid,
    peer: &DevicePeer,
    websocket: &mut WireSocket<Io>,
) -> Result<Option<SessionRow>, Refusal> {
    let config = state.config();
    let Some(text) = first_text(
        state,
        websocket,
        config.terminal.host_auth_timeout,
        CloseCode::CredentialInvalid,
    )
    .await?
    else {
        return Ok(None);
    };
    let DeviceMessage::Identify(identify) =
        DeviceMessage::decode(text.as_bytes(), config.sync.ws_max_frame_bytes)
            .map_err(|_| Refusal::code(CloseCode::InvalidMessage))?;
    let credential = match (identify.access_token.as_deref(), peer.cookie.as_deref()) {
        (Some(token), _) => Credential::Token(token),
        (None, Some(cookie)) => Credential::Cookie(cookie),
        // Nothing presented: nothing to check, nothing to charge.
        (None, None) => return Err(Refusal::code(CloseCode::CredentialInvalid)),
    };
    let now = state.clock().now_ms();
    channel_limits::gate(state, peer.client, now).map_err(Refusal::limited)?;
    // Every refusal of the presented credential from here on takes one token
    // of the client address's rl.public_auth (6.3).
    let failed = |code: CloseCode| {
        channel_limits::charge_failed_check(state, peer.client, now);
        Refusal::code(code)
    };
    let authenticated =
        principal::authenticate(state.db(), state.pepper(), credential.text(), now).await;
    let person = match authenticated {
        Ok(Some(Principal::Person(person)))
            if person.client_component == credential.component() =>
        {
            person
        }
        Ok(Some(_)) => return Err(failed(CloseCode::CredentialInvalid)),
        Ok(None) => {
            let code = if known_login(state, credential.text()).await? {
                CloseCode::CredentialRevoked
            } else {
                CloseCode::CredentialInvalid
            };
            return Err(failed(code));
        }
        Err(error) => {
            tracing::warn!(%error, "the device stream cannot authenticate");
            return Err(Refusal::internal());
        }
    };
    let row = store::load(state, session_id)
        .await
        .map_err(|_| Refusal::internal())?;
    let denial = match &row {
        None => Some(StreamDenial::SessionUnknown),
        Some(row) if !login_matches(&person, row) => Some(StreamDenial::DeviceMismatch),
        Some(_) => None,
    };
    if let Some(denial) = denial {
        let mut details = AuditDetails::new().id("session_id", session_id);
        if let Some(device_id) = person.device_id {
            details = details.id("device_id", device_id);
        }
        let entry = AuditEntry::deny(AuditAction::TerminalStream, Actor::Person(person.person_id))
            .target(TargetKind::TerminalSession, session_id)
            .details(details.code("reason", denial));
        let written: Result<(), db::DbError> = async {
            let mut uow = state.db().begin(now).await?;
            uow.audit(entry);
            uow.commit().await?;
            Ok(())
        }
        .await;
        if let Err(error) = written {
            tracing::warn!(%error, "the device stream cannot write its denial");
            return Err(Refusal::internal());
        }
        return Err(failed(CloseCode::CredentialInvalid));
    }
    let Some(row) = row else {
        return Err(failed(CloseCode::CredentialInvalid));
    };
    channel_limits::take_person(state, person.person_id, now).map_err(Refusal::limited)?;
    if row.is_closed() {
        return Err(Refusal::closed(row.close_reason.as_deref()));
    }
    let ready = stream::ServerMessage::Ready(Ready { session_id });
    if websocket
        .send(Message::Text(ready.to_json()))
        .await
        .is_err()
    {
        return Ok(None);
    }
    Ok(Some(row))
}

/// Whether an access token names a login session that exists but no longer
/// authenticates (ended, expired, person disabled, device revoked): 4012.
async fn known_login(state: &AppState, token: &str) -> Result<bool, Refusal> {
    let Some(secret) = OpaqueSecret::parse(SecretKind::AccessToken, token) else {
        return Ok(false);
    };
    let mut conn = state
        .db()
        .pool()
        .acquire()
        .await
        .map_err(|_| Refusal::internal())?;
    let row = sqlx::query("SELECT id FROM login_sessions WHERE token_hash = $1")
        .bind(secret.hash(state.pepper()))
        .fetch_optional(&mut *conn)
        .await
        .map_err(|_| Refusal::internal())?;
    Ok(row.is_some_and(|row| row.try_get::<String, _>("id").is_ok()))
}
