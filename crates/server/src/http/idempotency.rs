//! The `Idempotency-Key` header on state-changing POSTs (DESIGN 3.4): its
//! reading, and the problems of a key the storage refuses. The storage and
//! its rules are [`crate::db::idempotency`].

use axum::http::HeaderMap;

use super::problem::{ApiError, ProblemCode};
use crate::db::idempotency::{IdempotencyError, IdempotencyKey};

/// The header.
pub const HEADER: &str = "idempotency-key";

/// The key of the request, if it sent one; a malformed key (or two) is `400
/// validation_failed` (pointer `/headers/idempotency-key`).
pub fn key_from_headers(headers: &HeaderMap) -> Result<Option<IdempotencyKey>, ApiError> {
    let mut values = headers.get_all(HEADER).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    let malformed = || {
        ApiError::new(ProblemCode::ValidationFailed)
            .with_error("/headers/idempotency-key", "invalid_format")
    };
    if values.next().is_some() {
        return Err(malformed());
    }
    IdempotencyKey::parse(value.as_bytes())
        .map(Some)
        .map_err(|_| malformed())
}

impl From<IdempotencyError> for ApiError {
    fn from(error: IdempotencyError) -> Self {
        match error {
            IdempotencyError::Reused => ApiError::new(ProblemCode::IdempotencyKeyReused),
            IdempotencyError::InFlight(source) => ApiError::new(ProblemCode::Conflict)
                .with_reason("idempotency_key_in_flight")
                .caused_by(source),
            IdempotencyError::Db(error) => ApiError::internal(error),
        }
    }
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    #[test]
    fn key_rules() {
        let mut headers = HeaderMap::new();
        assert_eq!(key_from_headers(&headers).unwrap(), None);
        headers.insert(HEADER, HeaderValue::from_static("k-1"));
        assert_eq!(key_from_headers(&headers).unwrap().unwrap().as_str(), "k-1");
        for bad in ["", "a b", &"x".repeat(256)] {
            let mut headers = HeaderMap::new();
            headers.insert(HEADER, HeaderValue::from_str(bad).unwrap());
            let error = key_from_headers(&headers).unwrap_err();
            assert_eq!(error.code(), ProblemCode::ValidationFailed, "{bad:?}");
        }
    }
}
