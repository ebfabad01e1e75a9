//! The WebSocket upgrade of the relay's two routes (issue 20, D-718): the
//! checks axum's `WebSocketUpgrade` makes of an HTTP/1.1 upgrade request, as
//! an extractor, and the 101 that hands hyper's upgraded connection to the
//! relay's own WebSocket (`crate::terminal::relay::wire`), which keeps no
//! buffer while a side is idle.

use std::future::Future;

use axum::body::Body;
use axum::extract::FromRequestParts;
use axum::http::header::{
    CONNECTION, SEC_WEBSOCKET_ACCEPT, SEC_WEBSOCKET_KEY, SEC_WEBSOCKET_VERSION, UPGRADE,
};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Version};
use axum::response::{IntoResponse, Response};
use hyper_util::rt::TokioIo;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;

use crate::http::{ApiError, ProblemCode};
use crate::terminal::relay::wire::{Io, WireSocket};

/// The upgrade of a relay route: what axum's `WebSocketUpgrade` checks of
/// an HTTP/1.1 upgrade request, taken as an extractor.
pub(crate) struct WireUpgrade {
    key: HeaderValue,
    on_upgrade: hyper::upgrade::OnUpgrade,
}

/// The request is not a WebSocket upgrade the server can take: 400
/// `validation_failed`, `websocket_upgrade_required` at `/headers/upgrade`.
#[derive(Debug)]
pub(crate) struct NotAnUpgrade;

impl From<NotAnUpgrade> for ApiError {
    fn from(_: NotAnUpgrade) -> ApiError {
        ApiError::new(ProblemCode::ValidationFailed)
            .with_error("/headers/upgrade", "websocket_upgrade_required")
    }
}

impl IntoResponse for NotAnUpgrade {
    fn into_response(self) -> Response {
        ApiError::from(self).into_response()
    }
}

impl<S: Send + Sync> FromRequestParts<S> for WireUpgrade {
    type Rejection = NotAnUpgrade;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let key = upgrade_key(&parts.method, parts.version, &parts.headers)?;
        let on_upgrade = parts
            .extensions
            .remove::<hyper::upgrade::OnUpgrade>()
            .ok_or(NotAnUpgrade)?;
        Ok(WireUpgrade { key, on_upgrade })
    }
}

/// The `Sec-WebSocket-Key` of a valid upgrade request (RFC 6455 4.2.1).
fn upgrade_key(
    method: &Method,
    version: Version,
    headers: &HeaderMap,
) -> Result<HeaderValue, NotAnUpgrade> {
    let has_token = |name, token: &str| {
        headers.get_all(name).iter().any(|value| {
            value.to_str().is_ok_and(|value| {
                value
                    .split(',')
                    .any(|part| part.trim().eq_ignore_ascii_case(token))
            })
        })
    };
    let valid = *method == Method::GET
        && version == Version::HTTP_11
        && has_token(CONNECTION, "upgrade")
        && has_token(UPGRADE, "websocket")
        && headers
            .get(SEC_WEBSOCKET_VERSION)
            .is_some_and(|value| value.as_bytes() == b"13");
    match headers.get(SEC_WEBSOCKET_KEY) {
        Some(key) if valid => Ok(key.clone()),
        _ => Err(NotAnUpgrade),
    }
}

impl WireUpgrade {
    /// Answers 101 and runs `callback` with the socket once the connection
    /// is upgraded; every frame and message is limited to `max` bytes.
    pub(crate) fn on_upgrade<F, Fut>(self, max: usize, callback: F) -> Response
    where
        F: FnOnce(WireSocket<Io>) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let WireUpgrade { key, on_upgrade } = self;
        tokio::spawn(async move {
            // A client that went away before the upgrade: nothing to run.
            let Ok(upgraded) = on_upgrade.await else {
                return;
            };
            callback(WireSocket::new(TokioIo::new(upgraded), max)).await;
        });
        let accept = derive_accept_key(key.as_bytes());
        let mut response = Response::new(Body::empty());
        *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
        let headers = response.headers_mut();
        headers.insert(CONNECTION, HeaderValue::from_static("upgrade"));
        headers.insert(UPGRADE, HeaderValue::from_static("websocket"));
        if let Ok(accept) = HeaderValue::from_str(&accept) {
            headers.insert(SEC_WEBSOCKET_ACCEPT, accept);
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_upgrade_needs_what_rfc_6455_asks() {
        let valid = || {
            let mut headers = HeaderMap::new();
            headers.insert(CONNECTION, HeaderValue::from_static("keep-alive, Upgrade"));
            headers.insert(UPGRADE, HeaderValue::from_static("WebSocket"));
            headers.insert(SEC_WEBSOCKET_VERSION, HeaderValue::from_static("13"));
            headers.insert(
                SEC_WEBSOCKET_KEY,
                HeaderValue::from_static("dGhlIHNhbXBsZSBub25jZQ=="),
            );
            headers
        };
        let key = upgrade_key(&Method::GET, Version::HTTP_11, &valid()).expect("an upgrade");
        assert_eq!(
            derive_accept_key(key.as_bytes()),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=",
            "RFC 6455's example"
        );
        assert!(upgrade_key(&Method::POST, Version::HTTP_11, &valid()).is_err());
        assert!(upgrade_key(&Method::GET, Version::HTTP_10, &valid()).is_err());
        assert!(upgrade_key(&Method::GET, Version::HTTP_2, &valid()).is_err());
        for (name, value) in [
            (CONNECTION, "keep-alive"),
            (UPGRADE, "h2c"),
            (SEC_WEBSOCKET_VERSION, "8"),
        ] {
            let mut headers = valid();
            headers.insert(name.clone(), HeaderValue::from_static(value));
            assert!(
                upgrade_key(&Method::GET, Version::HTTP_11, &headers).is_err(),
                "{name}: {value}"
            );
        }
        let mut headers = valid();
        headers.remove(SEC_WEBSOCKET_KEY);
        assert!(upgrade_key(&Method::GET, Version::HTTP_11, &headers).is_err());
    }
}
