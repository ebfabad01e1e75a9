//! `GET /api/v1/hosts/connect` (WebSocket): the control connection of a host
//! service (spec 24 sections 3.4, 3.5; asyncapi `hostControl`). The upgrade
//! needs no credential: the host proves itself in-band (identify with the
//! proof over the challenge of hello). The connection itself is
//! [`crate::terminal::control`].

use axum::extract::State;
use axum::extract::ws::WebSocketUpgrade;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::response::Response;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::body::ClientAddr;
use crate::http::api_doc::{Internal, Problem};
use crate::http::problem::PROBLEM_JSON;
use crate::http::{ApiError, ProblemCode};
use crate::state::AppState;
use crate::terminal::control;

/// The routes of this file.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(connect))
}

/// The control connection of a host service (WebSocket; no credential on the
/// upgrade, the host logs in with identify).
///
/// JSON text frames `{op, d}` of at most `sync.ws_max_frame_bytes`. The server
/// sends `hello` {protocol_versions, challenge, server_time,
/// heartbeat_interval_ms, heartbeat_miss_limit, jwks}; the host answers
/// `identify` {protocol_version, host_id, proof, host_version, live_sessions}
/// within `terminal.host_auth_timeout`; the server sends `ready` {host_id,
/// state, llm_credentials}, then `heartbeat_ack`, `session.open`,
/// `session.close` and `error`; the host sends `report`, `heartbeat`,
/// `session.started` and `session.ended`. Close codes: 4000 `unknown_error`,
/// 4002 `invalid_message`, 4008 `rate_limited` (close text
/// `retry_after=<seconds>`: `rl.public_auth` of the client address after
/// failed proofs, or `rl.host` of the host), 4009 `heartbeat_timeout`, 4013
/// `server_shutdown`, 4014 `slow_consumer`, 4110 `host_unpaired`, 4111
/// `host_disabled` (also at once when the host leaves active), 4112
/// `host_duplicate`, 4113 `host_auth_failed`, 4114 `host_version_unsupported`.
#[utoipa::path(
    get,
    path = "/api/v1/hosts/connect",
    operation_id = "connectHost",
    tag = "hosts",
    responses(
        (status = 101, description = "Switching Protocols: the WebSocket is open; the server \
            sends hello."),
        (status = 400, description = "`validation_failed`: `/headers/upgrade` \
            `websocket_upgrade_required` (not a WebSocket upgrade).", body = Problem,
            content_type = PROBLEM_JSON),
        Internal,
    )
)]
async fn connect(
    State(state): State<AppState>,
    client: ClientAddr,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    let upgrade = upgrade.map_err(|_| {
        ApiError::new(ProblemCode::ValidationFailed)
            .with_error("/headers/upgrade", "websocket_upgrade_required")
    })?;
    // Tracked from before the `101`, so a shutdown that begins while the
    // upgrade completes still closes this socket with 4013.
    let guard = state.shutdown().track();
    let max_frame = state.config().sync.ws_max_frame_bytes;
    Ok(upgrade
        .max_frame_size(max_frame)
        .max_message_size(max_frame)
        .on_upgrade(move |websocket| control::serve(state, guard, websocket, client.0)))
}
