//! The two WebSocket routes of the relay (spec 24 sections 6.1 steps 4–7, 6.2,
//! 6.3, 9, 13; DESIGN 3.4 "Device stream login" and "Host data connection
//! login"):
//!
//! - `GET /api/v1/hosts/sessions/{session_id}/stream`: the host service's data
//!   connection of one grant;
//! - `GET /api/v1/terminal/sessions/{session_id}/stream`: the device stream.
//!
//! Both logins are JSON text frames (`bothy_proto::data`, `bothy_proto::stream`);
//! after the login only binary frames flow, each one Noise message, forwarded
//! unchanged by [`crate::terminal::relay`]. A text frame after the login is
//! 4002. A frame larger than a Noise message (65535 bytes) or than
//! `sync.ws_max_frame_bytes` during the login is refused by the WebSocket layer
//! and closes with 4002.
//!
//! The routes only take the upgrade (path, client address, the console's
//! cookie from the page's own origin, the WebSocket limits); the logins and
//! what follows them are the relay's ([`crate::terminal::relay::login`]).
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::http::header::{COOKIE, ORIGIN};
use axum::response::Response;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::body::{ClientAddr, path_id};
use crate::config::Config;
use crate::http::ApiError;
use crate::http::api_doc::{NotFound, Problem, ValidationFailed};
use crate::http::problem::PROBLEM_JSON;
use crate::http::upgrade::{NotAnUpgrade, WireUpgrade};
use crate::identity::console;
use crate::state::AppState;
use crate::terminal::relay::login::{DevicePeer, run_device, run_host};

/// The largest binary message: one Noise message (5.2).
pub const MAX_NOISE_MESSAGE: usize = 65_535;

/// The routes of this file.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(host_stream))
        .routes(routes!(device_stream))
}

/// The host service's data connection of one session (WebSocket).
///
/// Server first: `{"op":"hello","d":{"challenge","jwks","clock_leeway_ms",
/// "idle_timeout_ms","detach_grace_ms","server_time"}}`; the host answers
/// `{"op":"identify","d":{"protocol_version","host_id","proof","host_version",
/// "session_id"}}` with the same proof as the control connection. Then binary
/// frames only, each one Noise message, relayed unchanged. Close codes: 4002
/// `invalid_message`, 4008 `rate_limited` (close text `retry_after=<seconds>`:
/// `rl.public_auth` of the client address after failed proofs, or `rl.host`),
/// 4110 `host_unpaired`, 4111 `host_disabled`, 4113
/// `host_auth_failed`, 4114 `host_version_unsupported`, 4100 `terminal_closed`
/// (close text: the `close_reason`), 4102 `terminal_host_unavailable` (an
/// opening without a device within `terminal.open_timeout`), 4014
/// `slow_consumer`, 4013 `server_shutdown`, 1000 (replaced by a newer data
/// connection).
#[utoipa::path(
    get,
    path = "/api/v1/hosts/sessions/{session_id}/stream",
    operation_id = "hostDataStream",
    tag = "terminal",
    params(("session_id" = String, Path, format = "uuid", description = "The session.")),
    responses(
        (status = 101, description = "Switching Protocols: the WebSocket is open."),
        (status = 400, description = "`validation_failed`: `/headers/upgrade` \
            `websocket_upgrade_required` (not a WebSocket upgrade).",
            body = Problem, content_type = PROBLEM_JSON),
        (status = 404, description = "`not_found`: the path's session ID is not a UUID.",
            body = Problem, content_type = PROBLEM_JSON),
    )
)]
async fn host_stream(
    State(state): State<AppState>,
    Path(session_id): Path<String>,
    client: ClientAddr,
    upgrade: Result<WireUpgrade, NotAnUpgrade>,
) -> Result<Response, ApiError> {
    let session_id = path_id(&session_id)?;
    let upgrade = require_upgrade(upgrade)?;
    let guard = state.shutdown().track();
    let max = max_message(&state);
    Ok(upgrade.on_upgrade(max, move |websocket| {
        run_host(state, session_id, client.0, websocket, guard)
    }))
}

/// The device stream of one session (WebSocket).
///
/// The device first: `{"op":"identify","d":{"access_token"}}` (the CLI), or
/// `{"op":"identify","d":{}}` from the web console, which authenticates with
/// its cookie `bothy_session` on this upgrade (honoured only with the
/// `Origin` of `server.public_url`); the server answers
/// `{"op":"ready","d":{"session_id"}}`. Then binary frames only, each one
/// Noise message, relayed unchanged. Close codes: 4002 `invalid_message`,
/// 4004 `credential_invalid` (also a login of another device, audited as a
/// `terminal.stream` denial), 4008 `rate_limited` (close text
/// `retry_after=<seconds>`: `rl.public_auth` of the client address after
/// failed credentials, or the person's `rl.terminal`), 4012
/// `credential_revoked`, 4100 `terminal_closed` (close text: the
/// `close_reason`), 4101 and 4104 with the `close_detail` of a handshake the
/// host service refused, 4102 `terminal_host_unavailable`, 4103
/// `terminal_replaced`, 4014 `slow_consumer`, 4013 `server_shutdown`.
#[utoipa::path(
    get,
    path = "/api/v1/terminal/sessions/{session_id}/stream",
    operation_id = "terminalStream",
    tag = "terminal",
    params(("session_id" = String, Path, format = "uuid", description = "The session.")),
    responses(
        (status = 101, description = "Switching Protocols: the WebSocket is open."),
        ValidationFailed,
        NotFound,
    )
)]
async fn device_stream(
    State(state): State<AppState>,
    Path(session_id): Path<String>,
    client: ClientAddr,
    headers: HeaderMap,
    upgrade: Result<WireUpgrade, NotAnUpgrade>,
) -> Result<Response, ApiError> {
    let session_id = path_id(&session_id)?;
    let upgrade = require_upgrade(upgrade)?;
    let peer = DevicePeer {
        client: client.0,
        cookie: console_cookie(state.config(), &headers),
    };
    let guard = state.shutdown().track();
    let max = max_message(&state);
    Ok(upgrade.on_upgrade(max, move |websocket| {
        run_device(state, session_id, peer, websocket, guard)
    }))
}

/// The value of the console's cookie on an upgrade whose `Origin` is the
/// origin of `server.public_url`; `None` for any other origin or none.
fn console_cookie(config: &Config, headers: &HeaderMap) -> Option<String> {
    let expected = webauthn_rs::prelude::Url::parse(config.server.public_url.as_str())
        .ok()?
        .origin()
        .ascii_serialization();
    let origin = headers.get(ORIGIN)?.to_str().ok()?;
    if origin != expected {
        return None;
    }
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .find_map(console::cookie_value)
        .map(str::to_owned)
}

fn require_upgrade(upgrade: Result<WireUpgrade, NotAnUpgrade>) -> Result<WireUpgrade, ApiError> {
    upgrade.map_err(ApiError::from)
}

/// The largest frame and message of a relay socket: a Noise message, or a
/// login's JSON up to `sync.ws_max_frame_bytes`.
fn max_message(state: &AppState) -> usize {
    MAX_NOISE_MESSAGE.max(state.config().sync.ws_max_frame_bytes)
}
