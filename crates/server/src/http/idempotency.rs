//! `Idempotency-Key` on state-changing POSTs (DESIGN 3.4; spec 3.2 "Failed
//! attempts": a retry with the same key gets the stored response and does not
//! count again).
//!
//! A route that accepts the header calls [`lookup`] first, inside its unit of
//! work: a stored response for the same principal, key, route and request body
//! is replayed as it was; the same key with another route or body is `422
//! idempotency_key_reused`. Otherwise the route does its work and calls
//! [`store`] in the same unit of work, so the change and its stored response
//! commit together or not at all. Two concurrent first requests with one key
//! meet at the primary key: the loser's commit fails with a conflict and the
//! client's retry gets the stored response.
//!
//! Keys are 1 to 255 visible ASCII characters; they are scoped per principal, so
//! one principal cannot read another's stored response. Stored responses live
//! for [`RETENTION_MS`].

use axum::http::{HeaderMap, StatusCode};
use sha2::{Digest, Sha256};
use sqlx::Row;
use uuid::Uuid;

use super::problem::{ApiError, ProblemCode};
use crate::clock::UnixMillis;
use crate::db::{DbError, UnitOfWork, id_text};

/// The header.
pub const HEADER: &str = "idempotency-key";

/// How long a stored response is replayed: 24 hours.
pub const RETENTION_MS: i64 = 24 * 60 * 60 * 1000;

/// Longest accepted key.
pub const KEY_MAX_LEN: usize = 255;

/// A valid `Idempotency-Key`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    /// The key of the request, if it sent one; a malformed key is `400
    /// validation_failed` (pointer `/headers/idempotency-key`).
    pub fn from_headers(headers: &HeaderMap) -> Result<Option<IdempotencyKey>, ApiError> {
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
        let bytes = value.as_bytes();
        if bytes.is_empty()
            || bytes.len() > KEY_MAX_LEN
            || !bytes.iter().all(|b| b.is_ascii_graphic())
        {
            return Err(malformed());
        }
        let text = value.to_str().map_err(|_| malformed())?;
        Ok(Some(IdempotencyKey(text.to_owned())))
    }

    /// The key.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A response stored for a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredResponse {
    /// Its status.
    pub status: StatusCode,
    /// Its JSON body.
    pub body: String,
}

/// The hash that tells a retry from another request under the same key.
pub fn request_hash(method: &str, route: &str, body: &[u8]) -> String {
    let mut hash = Sha256::new();
    hash.update(method.as_bytes());
    hash.update([0]);
    hash.update(route.as_bytes());
    hash.update([0]);
    hash.update(body);
    bothy_proto::b64::encode(&hash.finalize())
}

/// The stored response for this key, if a younger-than-retention one exists for
/// the same route and request; `422 idempotency_key_reused` for another request.
pub async fn lookup(
    uow: &mut UnitOfWork,
    principal_id: Uuid,
    key: &IdempotencyKey,
    route: &str,
    request_hash: &str,
) -> Result<Option<StoredResponse>, ApiError> {
    let since: UnixMillis = uow.now_ms().saturating_sub(RETENTION_MS);
    let row = sqlx::query(
        "SELECT route, request_hash, response_status, response_body FROM idempotency_keys \
         WHERE principal_id = $1 AND key = $2 AND created_at >= $3",
    )
    .bind(id_text(&principal_id))
    .bind(key.as_str())
    .bind(since)
    .fetch_optional(uow.conn())
    .await
    .map_err(|e| ApiError::internal(DbError::from(e)))?;
    let Some(row) = row else {
        return Ok(None);
    };
    let read = |e: sqlx::Error| ApiError::internal(DbError::from(e));
    let stored_route: String = row.try_get("route").map_err(read)?;
    let stored_hash: String = row.try_get("request_hash").map_err(read)?;
    if stored_route != route || stored_hash != request_hash {
        return Err(ApiError::new(ProblemCode::IdempotencyKeyReused));
    }
    let status: i64 = row.try_get("response_status").map_err(read)?;
    let status = u16::try_from(status)
        .ok()
        .and_then(|s| StatusCode::from_u16(s).ok())
        .ok_or_else(|| {
            ApiError::internal(DbError::Decode {
                column: "response_status",
            })
        })?;
    Ok(Some(StoredResponse {
        status,
        body: row.try_get("response_body").map_err(read)?,
    }))
}

/// Stores the response of the first request under this key, in the unit of work
/// of the change it answers. An expired entry of the same key is replaced.
pub async fn store(
    uow: &mut UnitOfWork,
    principal_id: Uuid,
    key: &IdempotencyKey,
    route: &str,
    request_hash: &str,
    response: &StoredResponse,
) -> Result<(), ApiError> {
    let now = uow.now_ms();
    let principal = id_text(&principal_id);
    let internal = |e: sqlx::Error| ApiError::internal(DbError::from(e));
    sqlx::query(
        "DELETE FROM idempotency_keys WHERE principal_id = $1 AND key = $2 AND created_at < $3",
    )
    .bind(&principal)
    .bind(key.as_str())
    .bind(now.saturating_sub(RETENTION_MS))
    .execute(uow.conn())
    .await
    .map_err(internal)?;
    sqlx::query(
        "INSERT INTO idempotency_keys \
         (principal_id, key, route, request_hash, response_status, response_body, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(&principal)
    .bind(key.as_str())
    .bind(route)
    .bind(request_hash)
    .bind(i64::from(response.status.as_u16()))
    .bind(&response.body)
    .bind(now)
    .execute(uow.conn())
    .await
    .map_err(|e| match DbError::from(e) {
        // The same key raced in a concurrent first request: the client retries.
        DbError::Conflict(source) => ApiError::new(ProblemCode::Conflict)
            .with_reason("idempotency_key_in_flight")
            .caused_by(DbError::Conflict(source)),
        other => ApiError::internal(other),
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    #[test]
    fn key_rules() {
        let mut headers = HeaderMap::new();
        assert_eq!(IdempotencyKey::from_headers(&headers).unwrap(), None);
        headers.insert(HEADER, HeaderValue::from_static("k-1"));
        assert_eq!(
            IdempotencyKey::from_headers(&headers)
                .unwrap()
                .unwrap()
                .as_str(),
            "k-1"
        );
        for bad in ["", "a b", &"x".repeat(256)] {
            let mut headers = HeaderMap::new();
            headers.insert(HEADER, HeaderValue::from_str(bad).unwrap());
            let error = IdempotencyKey::from_headers(&headers).unwrap_err();
            assert_eq!(error.code(), ProblemCode::ValidationFailed, "{bad:?}");
        }
    }

    #[test]
    fn hash_separates_route_and_body() {
        let a = request_hash("POST", "/a", b"{}");
        assert_eq!(a, request_hash("POST", "/a", b"{}"));
        assert_ne!(a, request_hash("POST", "/b", b"{}"));
        assert_ne!(a, request_hash("POST", "/a", b"{ }"));
        assert_ne!(
            request_hash("POST", "/ab", b""),
            request_hash("POST", "/a", b"b")
        );
    }
}
