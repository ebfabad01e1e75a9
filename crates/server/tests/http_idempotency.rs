//! Idempotency keys on both engines: a stored response is replayed for the same
//! request, another request under the same key is 422, an expired entry is
//! replaced, a rolled-back change stores nothing, and two concurrent first
//! requests cannot both store.

#![allow(clippy::unwrap_used)] // test bodies are plain fns called by the generated #[test]s

use bothy_testkit as support;

use axum::http::{HeaderMap, HeaderValue, StatusCode};
use bothy_server::db::Engine;
use bothy_server::db::idempotency::{
    IdempotencyKey, RETENTION_MS, StoredResponse, lookup, request_hash, store,
};
use bothy_server::http::idempotency::{HEADER, key_from_headers};
use bothy_server::http::{ApiError, ProblemCode};
use support::{TestDb, both_engines};
use uuid::Uuid;

fn key(text: &'static str) -> IdempotencyKey {
    let mut headers = HeaderMap::new();
    headers.insert(HEADER, HeaderValue::from_static(text));
    key_from_headers(&headers).unwrap().unwrap()
}

fn response(body: &str) -> StoredResponse {
    StoredResponse {
        status: StatusCode::CONFLICT.as_u16(),
        body: body.to_owned(),
    }
}

async fn replay_and_reuse(engine: Engine) {
    let t = TestDb::new(engine).await;
    let principal = Uuid::from_u128(1);
    let other = Uuid::from_u128(2);
    let k = key("retry-1");
    let hash = request_hash("POST", "/api/v1/hosts/x/confirm", b"{\"a\":1}");
    let now = 1_000_000_000;

    let mut uow = t.db.begin(now).await.unwrap();
    assert_eq!(
        lookup(&mut uow, principal, &k, "/confirm", &hash)
            .await
            .unwrap(),
        None
    );
    store(
        &mut uow,
        principal,
        &k,
        "/confirm",
        &hash,
        &response("{\"n\":1}"),
    )
    .await
    .unwrap();
    uow.commit().await.unwrap();

    let mut uow = t.db.begin(now + 1).await.unwrap();
    let stored = lookup(&mut uow, principal, &k, "/confirm", &hash)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored, response("{\"n\":1}"));
    // Another body or another route under the same key.
    let other_hash = request_hash("POST", "/api/v1/hosts/x/confirm", b"{\"a\":2}");
    let error = lookup(&mut uow, principal, &k, "/confirm", &other_hash)
        .await
        .unwrap_err();
    assert_eq!(
        ApiError::from(error).code(),
        ProblemCode::IdempotencyKeyReused
    );
    let error = lookup(&mut uow, principal, &k, "/other", &hash)
        .await
        .unwrap_err();
    assert_eq!(
        ApiError::from(error).code(),
        ProblemCode::IdempotencyKeyReused
    );
    // Keys are per principal.
    assert_eq!(
        lookup(&mut uow, other, &k, "/confirm", &hash)
            .await
            .unwrap(),
        None
    );
    uow.rollback().await.unwrap();

    // After the retention the key is free again and a new response replaces the old.
    let later = now + RETENTION_MS + 1;
    let mut uow = t.db.begin(later).await.unwrap();
    assert_eq!(
        lookup(&mut uow, principal, &k, "/other", &hash)
            .await
            .unwrap(),
        None
    );
    store(
        &mut uow,
        principal,
        &k,
        "/other",
        &hash,
        &response("{\"n\":2}"),
    )
    .await
    .unwrap();
    uow.commit().await.unwrap();
    assert_eq!(t.count("idempotency_keys").await, 1);
}

async fn rollback_stores_nothing(engine: Engine) {
    let t = TestDb::new(engine).await;
    let k = key("retry-2");
    let mut uow = t.db.begin(5).await.unwrap();
    store(&mut uow, Uuid::from_u128(1), &k, "/r", "h", &response("{}"))
        .await
        .unwrap();
    drop(uow);
    assert_eq!(t.count("idempotency_keys").await, 0);
}

async fn concurrent_first_requests_store_once(engine: Engine) {
    let t = TestDb::new(engine).await;
    let second = t.connect_again().await;
    let k = key("retry-3");
    let principal = Uuid::from_u128(9);
    let mut a = t.db.begin(5).await.unwrap();
    store(&mut a, principal, &k, "/r", "h", &response("{\"a\":1}"))
        .await
        .unwrap();
    // On SQLite the second writer waits for the first (BEGIN IMMEDIATE), so let
    // the first commit before the second begins; on PostgreSQL both run at once
    // and the second blocks on the key until the first commits.
    let first = tokio::spawn(async move { a.commit().await });
    let outcome = async {
        let mut b = second.begin(6).await.unwrap();
        let stored = lookup(&mut b, principal, &k, "/r", "h").await;
        match stored {
            Ok(Some(stored)) => Ok(stored),
            Ok(None) => {
                let error = store(&mut b, principal, &k, "/r", "h", &response("{\"b\":1}")).await;
                Err(ApiError::from(error.map(|()| "stored twice").unwrap_err()).code())
            }
            Err(error) => Err(ApiError::from(error).code()),
        }
    }
    .await;
    first.await.unwrap().unwrap();
    match outcome {
        Ok(stored) => assert_eq!(stored, response("{\"a\":1}")),
        Err(code) => assert_eq!(code, ProblemCode::Conflict),
    }
    assert_eq!(t.count("idempotency_keys").await, 1);
}

both_engines!(
    replay_and_reuse,
    rollback_stores_nothing,
    concurrent_first_requests_store_once,
);
