//! API errors as `application/problem+json` (RFC 9457; DESIGN 3.4; STYLE 6).
//!
//! What the client reads — `code` (the chapter's problem code), `reason`,
//! `errors[] {pointer, code}`, `retry_after`, `attempts_remaining` — is built
//! from typed values only. The cause, if any, is logged once on the server and
//! never reaches the client.
//!
//! The domain modules (identity, hosts, permissions, terminal) return their own
//! errors and know nothing of HTTP; `domain` holds every `From` of those errors
//! into [`ApiError`].

mod domain;

use std::fmt;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

/// The media type of every error body.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// The problem codes of the API (chapter 13 and DESIGN 3.4), each with its status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProblemCode {
    /// 400: the body or a parameter breaks a rule; `errors[]` says where.
    ValidationFailed,
    /// 401: no or no valid credential.
    Unauthenticated,
    /// 401: the action needs a fresh step-up (reason e.g. `passkey_required`).
    StepUpRequired,
    /// 403: the principal may not do this (reason e.g. `subject_kind_not_allowed`).
    Forbidden,
    /// 403: permission present, but a guard rule or a limit blocks (13).
    TerminalDenied,
    /// 404: no such resource, or no read permission on it.
    NotFound,
    /// 405: the route exists, the method does not.
    MethodNotAllowed,
    /// 409: a uniqueness or ownership conflict (reason names it).
    Conflict,
    /// 409: the state machine does not allow this transition.
    InvalidStateTransition,
    /// 409: host not active or host service not connected.
    HostUnavailable,
    /// 409: confirmation with a wrong fingerprint prefix.
    FingerprintMismatch,
    /// 409: the change would violate I6.
    I6Violation,
    /// 412: `If-Match` does not match the current version.
    PreconditionFailed,
    /// 413: the body is larger than the server accepts.
    PayloadTooLarge,
    /// 415: the body is not `application/json`.
    UnsupportedMediaType,
    /// 422: the `Idempotency-Key` was used with another request.
    IdempotencyKeyReused,
    /// 428: the route requires `If-Match`.
    PreconditionRequired,
    /// 429: a rate limit is exhausted; `retry_after` says for how long.
    RateLimited,
    /// 500: an internal error; the cause is only in the server log.
    Internal,
    /// 503: a dependency (the database) is not available.
    Unavailable,
}

impl ProblemCode {
    /// Every code (the `code` enum of the OpenAPI document's `Problem`).
    pub const ALL: &'static [ProblemCode] = &[
        ProblemCode::ValidationFailed,
        ProblemCode::Unauthenticated,
        ProblemCode::StepUpRequired,
        ProblemCode::Forbidden,
        ProblemCode::TerminalDenied,
        ProblemCode::NotFound,
        ProblemCode::MethodNotAllowed,
        ProblemCode::Conflict,
        ProblemCode::InvalidStateTransition,
        ProblemCode::HostUnavailable,
        ProblemCode::FingerprintMismatch,
        ProblemCode::I6Violation,
        ProblemCode::PreconditionFailed,
        ProblemCode::PayloadTooLarge,
        ProblemCode::UnsupportedMediaType,
        ProblemCode::IdempotencyKeyReused,
        ProblemCode::PreconditionRequired,
        ProblemCode::RateLimited,
        ProblemCode::Internal,
        ProblemCode::Unavailable,
    ];

    /// The code as it appears in `code`.
    pub const fn as_str(self) -> &'static str {
        match self {
            ProblemCode::ValidationFailed => "validation_failed",
            ProblemCode::Unauthenticated => "unauthenticated",
            ProblemCode::StepUpRequired => "step_up_required",
            ProblemCode::Forbidden => "forbidden",
            ProblemCode::TerminalDenied => "terminal_denied",
            ProblemCode::NotFound => "not_found",
            ProblemCode::MethodNotAllowed => "method_not_allowed",
            ProblemCode::Conflict => "conflict",
            ProblemCode::InvalidStateTransition => "invalid_state_transition",
            ProblemCode::HostUnavailable => "host_unavailable",
            ProblemCode::FingerprintMismatch => "fingerprint_mismatch",
            ProblemCode::I6Violation => "i6_violation",
            ProblemCode::PreconditionFailed => "precondition_failed",
            ProblemCode::PayloadTooLarge => "payload_too_large",
            ProblemCode::UnsupportedMediaType => "unsupported_media_type",
            ProblemCode::IdempotencyKeyReused => "idempotency_key_reused",
            ProblemCode::PreconditionRequired => "precondition_required",
            ProblemCode::RateLimited => "rate_limited",
            ProblemCode::Internal => "internal",
            ProblemCode::Unavailable => "unavailable",
        }
    }

    /// The HTTP status of the code.
    pub const fn status(self) -> StatusCode {
        match self {
            ProblemCode::ValidationFailed => StatusCode::BAD_REQUEST,
            ProblemCode::Unauthenticated | ProblemCode::StepUpRequired => StatusCode::UNAUTHORIZED,
            ProblemCode::Forbidden | ProblemCode::TerminalDenied => StatusCode::FORBIDDEN,
            ProblemCode::NotFound => StatusCode::NOT_FOUND,
            ProblemCode::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ProblemCode::Conflict
            | ProblemCode::InvalidStateTransition
            | ProblemCode::HostUnavailable
            | ProblemCode::FingerprintMismatch
            | ProblemCode::I6Violation => StatusCode::CONFLICT,
            ProblemCode::PreconditionFailed => StatusCode::PRECONDITION_FAILED,
            ProblemCode::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ProblemCode::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ProblemCode::IdempotencyKeyReused => StatusCode::UNPROCESSABLE_ENTITY,
            ProblemCode::PreconditionRequired => StatusCode::PRECONDITION_REQUIRED,
            ProblemCode::RateLimited => StatusCode::TOO_MANY_REQUESTS,
            ProblemCode::Internal => StatusCode::INTERNAL_SERVER_ERROR,
            ProblemCode::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        }
    }
}

impl fmt::Display for ProblemCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One finding of `errors[]`: a JSON pointer into the request and a code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldProblem {
    /// RFC 6901 pointer into the request body.
    pub pointer: String,
    /// The finding's code (e.g. `session_user_not_on_host`, `too_long`).
    pub code: &'static str,
}

/// An error of the API. Build it with [`ApiError::new`] and the `with_*` methods;
/// attach the internal cause with [`ApiError::caused_by`] (logged, never sent).
#[derive(Debug)]
pub struct ApiError {
    code: ProblemCode,
    reason: Option<&'static str>,
    errors: Vec<FieldProblem>,
    retry_after_s: Option<u64>,
    attempts_remaining: Option<u32>,
    cause: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl ApiError {
    /// An error with its problem code.
    pub fn new(code: ProblemCode) -> Self {
        ApiError {
            code,
            reason: None,
            errors: Vec::new(),
            retry_after_s: None,
            attempts_remaining: None,
            cause: None,
        }
    }

    /// 500 with a cause that only the log sees; `503 unavailable` when the
    /// cause is a database that cannot take the work now (busy, unwritable,
    /// unreachable: [`crate::db::is_transient_in_chain`]), which another try
    /// may get past.
    pub fn internal(cause: impl std::error::Error + Send + Sync + 'static) -> Self {
        let code = if crate::db::is_transient_in_chain(&cause) {
            ProblemCode::Unavailable
        } else {
            ProblemCode::Internal
        };
        ApiError::new(code).caused_by(cause)
    }

    /// The `reason` member (a code of the chapter, e.g. `session_user_taken`).
    pub fn with_reason(mut self, reason: &'static str) -> Self {
        self.reason = Some(reason);
        self
    }

    /// Adds one finding to `errors[]`.
    pub fn with_error(mut self, pointer: impl Into<String>, code: &'static str) -> Self {
        self.errors.push(FieldProblem {
            pointer: pointer.into(),
            code,
        });
        self
    }

    /// `retry_after` in the body and the `Retry-After` header, in whole seconds.
    pub fn with_retry_after(mut self, seconds: u64) -> Self {
        self.retry_after_s = Some(seconds);
        self
    }

    /// `attempts_remaining` (fingerprint confirmation, 3.2).
    pub fn with_attempts_remaining(mut self, attempts: u32) -> Self {
        self.attempts_remaining = Some(attempts);
        self
    }

    /// The internal cause, logged once when the response is written.
    pub fn caused_by(mut self, cause: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.cause = Some(Box::new(cause));
        self
    }

    /// The problem code.
    pub fn code(&self) -> ProblemCode {
        self.code
    }

    /// The problem body (`bothy_api::problem::Problem`).
    pub fn problem(&self) -> bothy_api::problem::Problem {
        let status = self.code.status();
        bothy_api::problem::Problem {
            kind: "about:blank".to_owned(),
            title: status.canonical_reason().unwrap_or("Error").to_owned(),
            status: status.as_u16(),
            code: self.code.as_str().to_owned(),
            reason: self.reason.map(str::to_owned),
            errors: self
                .errors
                .iter()
                .map(|e| bothy_api::problem::FieldProblem {
                    pointer: e.pointer.clone(),
                    code: e.code.to_owned(),
                })
                .collect(),
            retry_after: self.retry_after_s,
            attempts_remaining: self.attempts_remaining,
        }
    }

    /// The problem body as JSON.
    pub fn body(&self) -> Value {
        serde_json::to_value(self.problem()).unwrap_or(Value::Null)
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.reason {
            Some(reason) => write!(f, "{} ({reason})", self.code),
            None => write!(f, "{}", self.code),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let Some(cause) = &self.cause {
            // The cause may name internals (a database error); it stays in the
            // log, with its sources (never a value: `db::error_chain`).
            let error = crate::db::error_chain(cause.as_ref());
            if self.code == ProblemCode::Unavailable {
                tracing::warn!(code = self.code.as_str(), %error, "request failed");
            } else {
                tracing::error!(code = self.code.as_str(), %error, "request failed");
            }
        }
        let mut response = (self.code.status(), self.body().to_string()).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        if let Some(seconds) = self.retry_after_s {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_carries_typed_members_only() {
        let error = ApiError::new(ProblemCode::ValidationFailed)
            .with_error("/session_users/0/os_user", "session_user_not_on_host")
            .caused_by(std::io::Error::other("canary-internal-cause"));
        let body = error.body();
        assert_eq!(body["status"], 400);
        assert_eq!(body["code"], "validation_failed");
        assert_eq!(body["errors"][0]["code"], "session_user_not_on_host");
        assert!(!body.to_string().contains("canary-internal-cause"));
    }

    #[test]
    fn rate_limited_sets_retry_after() {
        let response = ApiError::new(ProblemCode::RateLimited)
            .with_retry_after(7)
            .into_response();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers()[header::RETRY_AFTER], "7");
        assert_eq!(response.headers()[header::CONTENT_TYPE], PROBLEM_JSON);
    }

    #[test]
    fn every_code_has_a_distinct_name_and_an_error_status() {
        use ProblemCode::*;
        let all = [
            ValidationFailed,
            Unauthenticated,
            StepUpRequired,
            Forbidden,
            TerminalDenied,
            NotFound,
            MethodNotAllowed,
            Conflict,
            InvalidStateTransition,
            HostUnavailable,
            FingerprintMismatch,
            I6Violation,
            PreconditionFailed,
            PayloadTooLarge,
            UnsupportedMediaType,
            IdempotencyKeyReused,
            PreconditionRequired,
            RateLimited,
            Internal,
            Unavailable,
        ];
        assert_eq!(ProblemCode::ALL, &all[..], "ALL lists every code");
        let names: std::collections::HashSet<_> = all.iter().map(|c| c.as_str()).collect();
        assert_eq!(names.len(), all.len());
        assert!(
            all.iter()
                .all(|c| c.status().is_client_error() || c.status().is_server_error())
        );
    }
}
