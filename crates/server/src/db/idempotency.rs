//! The storage of `Idempotency-Key`s (DESIGN 3.4; spec 3.2 "Failed attempts":
//! a retry with the same key gets the stored response and does not count
//! again). The header itself is the HTTP layer's (`http::idempotency`).
//!
//! A use case that accepts a key calls [`lookup`] first, inside its unit of
//! work: a stored response for the same principal, key, route and request
//! body is replayed as it was; the same key with another route or body is
//! [`IdempotencyError::Reused`]. Otherwise the use case does its work and
//! calls [`store`] in the same unit of work, so the change and its stored
//! response commit together or not at all. Two concurrent first requests
//! with one key meet at the primary key: the loser's commit fails with
//! [`IdempotencyError::InFlight`] and the client's retry gets the stored
//! response.
//!
//! Keys are 1 to 255 visible ASCII characters; they are scoped per
//! principal, so one principal cannot read another's stored response. Stored
//! responses live for [`RETENTION_MS`].

use sha2::{Digest, Sha256};
use sqlx::Row;
use uuid::Uuid;

use crate::clock::UnixMillis;
use crate::db::{DbError, UnitOfWork, id_text};

/// How long a stored response is replayed: 24 hours.
pub const RETENTION_MS: i64 = 24 * 60 * 60 * 1000;

/// Longest accepted key.
pub const KEY_MAX_LEN: usize = 255;

/// A valid idempotency key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyKey(String);

/// A key that is empty, too long or not visible ASCII.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("an idempotency key is 1 to 255 visible ASCII characters")]
pub struct InvalidKey;

impl IdempotencyKey {
    /// The key of `bytes`, when they are 1 to [`KEY_MAX_LEN`] visible ASCII
    /// characters.
    pub fn parse(bytes: &[u8]) -> Result<IdempotencyKey, InvalidKey> {
        if bytes.is_empty() || bytes.len() > KEY_MAX_LEN || !bytes.iter().all(u8::is_ascii_graphic)
        {
            return Err(InvalidKey);
        }
        let text = std::str::from_utf8(bytes).map_err(|_| InvalidKey)?;
        Ok(IdempotencyKey(text.to_owned()))
    }

    /// The key.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A response stored for a key: its status code and its JSON body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredResponse {
    /// Its status code (100..=599).
    pub status: u16,
    /// Its JSON body.
    pub body: String,
}

/// Why a key could not be looked up or stored.
#[derive(Debug, thiserror::Error)]
pub enum IdempotencyError {
    /// The key was used for another route or request body.
    #[error("the idempotency key was used for another request")]
    Reused,
    /// A concurrent first request with the same key committed first.
    #[error("a request with the same idempotency key is in flight")]
    InFlight(#[source] DbError),
    /// The database failed.
    #[error(transparent)]
    Db(#[from] DbError),
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

/// The stored response for this key, if a younger-than-retention one exists
/// for the same route and request; [`IdempotencyError::Reused`] for another
/// request.
pub async fn lookup(
    uow: &mut UnitOfWork,
    principal_id: Uuid,
    key: &IdempotencyKey,
    route: &str,
    request_hash: &str,
) -> Result<Option<StoredResponse>, IdempotencyError> {
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
    .map_err(DbError::from)?;
    let Some(row) = row else {
        return Ok(None);
    };
    let stored_route: String = row.try_get("route").map_err(DbError::from)?;
    let stored_hash: String = row.try_get("request_hash").map_err(DbError::from)?;
    if stored_route != route || stored_hash != request_hash {
        return Err(IdempotencyError::Reused);
    }
    let status: i64 = row.try_get("response_status").map_err(DbError::from)?;
    let status = u16::try_from(status)
        .ok()
        .filter(|s| (100..=599).contains(s))
        .ok_or(DbError::Decode {
            column: "response_status",
        })?;
    Ok(Some(StoredResponse {
        status,
        body: row.try_get("response_body").map_err(DbError::from)?,
    }))
}

/// Stores the response of the first request under this key, in the unit of
/// work of the change it answers. An expired entry of the same key is
/// replaced.
pub async fn store(
    uow: &mut UnitOfWork,
    principal_id: Uuid,
    key: &IdempotencyKey,
    route: &str,
    request_hash: &str,
    response: &StoredResponse,
) -> Result<(), IdempotencyError> {
    let now = uow.now_ms();
    let principal = id_text(&principal_id);
    sqlx::query(
        "DELETE FROM idempotency_keys WHERE principal_id = $1 AND key = $2 AND created_at < $3",
    )
    .bind(&principal)
    .bind(key.as_str())
    .bind(now.saturating_sub(RETENTION_MS))
    .execute(uow.conn())
    .await
    .map_err(DbError::from)?;
    sqlx::query(
        "INSERT INTO idempotency_keys \
         (principal_id, key, route, request_hash, response_status, response_body, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(&principal)
    .bind(key.as_str())
    .bind(route)
    .bind(request_hash)
    .bind(i64::from(response.status))
    .bind(&response.body)
    .bind(now)
    .execute(uow.conn())
    .await
    .map_err(|e| match DbError::from(e) {
        // The same key raced in a concurrent first request: the client retries.
        conflict @ DbError::Conflict(_) => IdempotencyError::InFlight(conflict),
        other => IdempotencyError::Db(other),
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_rules() {
        assert_eq!(IdempotencyKey::parse(b"k-1").unwrap().as_str(), "k-1");
        for bad in [&b""[..], b"a b", "x".repeat(256).as_bytes(), b"\xff"] {
            assert_eq!(IdempotencyKey::parse(bad), Err(InvalidKey), "{bad:?}");
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
