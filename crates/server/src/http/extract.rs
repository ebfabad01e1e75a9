//! The extractors of the HTTP layer that are not body decoding: the
//! authenticated [`Principal`] of a request (DESIGN 3.1, 3.4).
//!
//! `Authorization: Bearer <token>` with an access token (`bothy_at_`, a person
//! in a login session on a device) or an API token (`bothy_tk_`, an agent or
//! app); the web console authenticates with the cookie `bothy_session`
//! instead, and every request that is not GET or HEAD must then carry the
//! session's `X-CSRF-Token`, else `403 forbidden` (`csrf_token_invalid`). A
//! console session's token is refused as a bearer token. A handler that takes
//! a [`Principal`] gets only authenticated requests.

use axum::extract::FromRequestParts;
use axum::http::Method;
use axum::http::header::{AUTHORIZATION, COOKIE};
use axum::http::request::Parts;

use crate::http::ApiError;
use crate::identity::console;
use crate::identity::login_sessions::ClientComponent;
use crate::identity::principal::{Principal, authenticate};
use crate::identity::{AuthFailure, ForbiddenReason, IdentityError};
use crate::state::AppState;

/// The token of `Authorization: Bearer <token>` (scheme case-insensitive).
fn bearer(parts: &Parts) -> Option<&str> {
    let value = parts.headers.get(AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

impl FromRequestParts<AppState> for Principal {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let unauthenticated =
            || ApiError::from(IdentityError::Unauthenticated(AuthFailure::TokenInvalid));
        let now = state.clock().now_ms();
        if let Some(token) = bearer(parts) {
            return match authenticate(state.db(), state.pepper(), token, now).await? {
                // A console session's token travels only as its cookie, where
                // the CSRF check below applies.
                Some(Principal::Person(person))
                    if person.client_component == ClientComponent::Console =>
                {
                    Err(unauthenticated())
                }
                Some(principal) => Ok(principal),
                None => Err(unauthenticated()),
            };
        }
        let Some(token) = parts
            .headers
            .get_all(COOKIE)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .find_map(console::cookie_value)
        else {
            return Err(unauthenticated());
        };
        let person = match authenticate(state.db(), state.pepper(), token, now).await? {
            Some(Principal::Person(person))
                if person.client_component == ClientComponent::Console =>
            {
                person
            }
            _ => return Err(unauthenticated()),
        };
        if parts.method != Method::GET && parts.method != Method::HEAD {
            let presented = parts
                .headers
                .get(console::CSRF_HEADER)
                .and_then(|value| value.to_str().ok());
            if !console::check_csrf(
                state.db(),
                state.pepper(),
                person.login_session_id,
                presented,
            )
            .await?
            {
                return Err(IdentityError::Forbidden(ForbiddenReason::CsrfTokenInvalid).into());
            }
        }
        Ok(Principal::Person(person))
    }
}
