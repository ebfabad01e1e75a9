//! The REST routes under `/api/v1` (DESIGN 3.4), one file per resource; each
//! handler decodes its body strictly ([`body`]), calls one library function and
//! maps its typed error to `application/problem+json` through `From` into
//! [`ApiError`](super::ApiError).
//!
//! Layout:
//! - [`body`]: the strict JSON body extractor, the client address, path IDs.
//! - [`auth`]: enroll, confirm, login, whoami, logout, login sessions, step-up.
//! - [`persons`]: invitations and the list of persons (owners).
//! - [`devices`]: the caller's devices (owners: everyone's) and their revocation.
//! - [`tokens`]: API tokens of agents and apps (owners).
//! - [`audit`]: `GET /api/v1/audit`, the audit log with filters and paging (owners).
//! - [`events`]: `GET /api/v1/events`, the event stream WebSocket.
//! - [`grants`]: grants terminal on hosts (owners).
//! - [`groups`]: groups of persons and their members (owners).
//! - [`host_connect`]: `GET /api/v1/hosts/connect`, the control connection
//!   WebSocket of a host service.
//! - [`host_manage`]: updateHost and setHostLlmCredentials (owners).
//! - [`hosts`]: createHost, issueHostPairingCode, host.pair, confirmHost, and
//!   reading hosts (host.read).
//! - [`terminal_streams`]: the relay's data connection and device stream WebSockets.
//! - [`query`]: strict query parameters (`/query/<name>` pointers).
//! - [`terminal_sessions`]: openTerminalSession, attachTerminalSession (and its
//!   quick-reattach challenge), closeTerminalSession, reading sessions.

pub mod audit;
pub mod auth;
pub mod body;
pub mod devices;
pub mod events;
pub mod grants;
pub mod groups;
pub mod host_connect;
pub mod host_manage;
pub mod hosts;
pub mod passkeys;
pub mod persons;
pub mod query;
pub mod terminal_sessions;
pub mod terminal_streams;
pub mod tokens;

use utoipa_axum::router::OpenApiRouter;

use crate::state::AppState;

/// Every route of this module, with its OpenAPI operations.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .merge(auth::router())
        .merge(passkeys::router())
        .merge(persons::router())
        .merge(devices::router())
        .merge(tokens::router())
        .merge(terminal_streams::router())
        .merge(audit::router())
        .merge(events::router())
        .merge(grants::router())
        .merge(groups::router())
        .merge(host_connect::router())
        .merge(host_manage::router())
        .merge(hosts::router())
        .merge(terminal_sessions::router())
}
