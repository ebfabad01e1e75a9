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

pub mod auth;
pub mod body;
pub mod devices;
pub mod persons;
pub mod tokens;

use axum::Router;

use super::AppState;

/// Every route of this module.
pub fn router() -> Router<AppState> {
    Router::new()
        .merge(auth::router())
        .merge(persons::router())
        .merge(devices::router())
        .merge(tokens::router())
}
