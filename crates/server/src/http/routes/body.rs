//! What every route reads from a request besides the principal: a strict JSON
//! body ([`JsonBody`], decoded by `bothy_proto::json`: no duplicate members, no
//! `null`, then exact member lists per route), the client address
//! ([`ClientAddr`], the key of `rl.public_auth`), and path IDs ([`path_id`]).
//!
//! Refusals: a body that is not `application/json` is `415
//! unsupported_media_type`; one over [`BODY_MAX_BYTES`] is `413
//! payload_too_large`; anything else is `400 validation_failed` with `errors[]
//! {pointer, code}` — the pointer of the member, never its value. Codes:
//! `invalid_json`, `duplicate_member`, `null_not_allowed`, `unknown_member`,
//! `required`, `wrong_type`, `invalid`.

use std::net::{IpAddr, SocketAddr};

use axum::extract::{ConnectInfo, FromRequest, FromRequestParts, Request};
use axum::http::header::CONTENT_TYPE;
use axum::http::request::Parts;
use bothy_proto::json::JsonError;
use serde_json::Value;
use uuid::Uuid;

use crate::db::DbError;
use crate::http::{ApiError, ProblemCode};
use crate::identity::IdentityError;
use crate::state::AppState;

/// The largest request body these routes read.
pub const BODY_MAX_BYTES: usize = 16 * 1024;

/// A request body parsed as one strict JSON value.
#[derive(Debug)]
pub struct JsonBody(pub Value);

impl<S: Send + Sync> FromRequest<S> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(request: Request, _state: &S) -> Result<Self, Self::Rejection> {
        let is_json = request
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.split(';').next())
            .is_some_and(|media| media.trim().eq_ignore_ascii_case("application/json"));
        if !is_json {
            return Err(ApiError::new(ProblemCode::UnsupportedMediaType));
        }
        // An error here is a body over the limit or a connection that broke
        // while sending it; for the latter nobody reads the answer.
        let bytes = axum::body::to_bytes(request.into_body(), BODY_MAX_BYTES)
            .await
            .map_err(|_| ApiError::new(ProblemCode::PayloadTooLarge))?;
        Ok(JsonBody(bothy_proto::json::parse(&bytes, BODY_MAX_BYTES)?))
    }
}

impl From<JsonError> for ApiError {
    fn from(error: JsonError) -> Self {
        let code = match &error {
            JsonError::TooLarge { .. } => return ApiError::new(ProblemCode::PayloadTooLarge),
            JsonError::InvalidUtf8 | JsonError::Syntax => "invalid_json",
            JsonError::DuplicateMember { .. } => "duplicate_member",
            JsonError::NullMember { .. } => "null_not_allowed",
            JsonError::UnknownMember { .. } => "unknown_member",
            JsonError::MissingMember { .. } => "required",
            JsonError::WrongType { .. } => "wrong_type",
            JsonError::InvalidValue { .. } => "invalid",
        };
        ApiError::new(ProblemCode::ValidationFailed).with_error(error.pointer().unwrap_or(""), code)
    }
}

/// The address of the client: the TCP peer (set on every request by
/// [`crate::http::serve`]), or for a peer of `server.trusted_proxies` the
/// client its `Forwarded`/`X-Forwarded-For` names ([`crate::proxies`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientAddr(pub IpAddr);

impl FromRequestParts<AppState> for ClientAddr {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            // An IPv4 client of a `[::]` listener is one address, not two.
            .map(|ConnectInfo(addr)| {
                ClientAddr(
                    state
                        .config()
                        .server
                        .trusted_proxies
                        .client(addr.ip(), &parts.headers),
                )
            })
            .ok_or_else(|| ApiError::new(ProblemCode::Internal))
    }
}

/// An ID from the path: a malformed one names no resource, so it is `404`.
pub fn path_id(text: &str) -> Result<Uuid, ApiError> {
    bothy_proto::ids::parse_uuid(text).map_err(|_| ApiError::new(ProblemCode::NotFound))
}

/// A pooled connection for reads outside a unit of work.
pub async fn read_conn(
    state: &AppState,
) -> Result<sqlx::pool::PoolConnection<sqlx::Any>, ApiError> {
    state
        .db()
        .pool()
        .acquire()
        .await
        .map_err(|error| IdentityError::Db(DbError::from(error)).into())
}
