//! The changes of the keys' life cycle (the module docs of [`super`]): the
//! first key ([`ensure_active`]), a rotation ([`rotate`]) and what time has
//! done ([`promote_due`]), each one unit of work, tried again when it lost a
//! race.

use super::sealing::NewKey;
use super::*;

/// Whether a failure may go away when the whole change is tried again.
fn retryable(error: &KeyError) -> bool {
    matches!(error, KeyError::Db(DbError::Conflict(_) | DbError::Busy(_)))
}

/// One attempt of a change: done, or lost a race and to be tried again.
enum Attempt<T> {
    Done(T),
    Again,
}

/// Runs `attempt` until it is done, at most [`MAX_ATTEMPTS`] times.
macro_rules! with_retries {
    ($attempt:expr) => {{
        let mut outcome = Err(KeyError::Contended {
            attempts: MAX_ATTEMPTS,
        });
        for _ in 0..MAX_ATTEMPTS {
            match $attempt.await {
                Ok(Attempt::Done(value)) => {
                    outcome = Ok(value);
                    break;
                }
                Ok(Attempt::Again) => {}
                Err(error) if retryable(&error) => {}
                Err(error) => {
                    outcome = Err(error);
                    break;
                }
            }
        }
        outcome
    }};
}

/// Creates the first key of purpose terminal, active at once, unless an
/// active key exists. Safe to call from every process at start: concurrent
/// callers on one database end up with one key.
pub async fn ensure_active(
    db: &Db,
    pepper: &Pepper,
    now: UnixMillis,
) -> Result<EnsuredKey, KeyError> {
    with_retries!(ensure_active_once(db, pepper, now))
}

async fn ensure_active_once(
    db: &Db,
    pepper: &Pepper,
    now: UnixMillis,
) -> Result<Attempt<EnsuredKey>, KeyError> {
    // The usual case reads only.
    let mut conn = db.pool().acquire().await.map_err(DbError::from)?;
    if let Some(active) = find(&live(&mut conn).await?, KeyStatus::Active) {
        return Ok(Attempt::Done(EnsuredKey {
            kid: active.kid.clone(),
            created: false,
        }));
    }
    drop(conn);

    let mut uow = db.begin(now).await?;
    // Again inside the unit of work: on SQLite another process may have
    // committed while we waited for the write lock. On PostgreSQL a concurrent
    // insert is not visible yet; the unique index refuses the second one.
    if let Some(active) = find(&live(uow.conn()).await?, KeyStatus::Active) {
        return Ok(Attempt::Done(EnsuredKey {
            kid: active.kid.clone(),
            created: false,
        }));
    }
    let new = NewKey::generate(pepper, now)?;
    new.insert(&mut uow, KeyStatus::Active, now, now).await?;
    uow.audit(rotation_entry(step_details(RotationStep::First, &new.jwk)));
    uow.commit().await?;
    tracing::info!(kid = %new.kid, "created the first terminal signing key; it signs now");
    Ok(Attempt::Done(EnsuredKey {
        kid: new.kid,
        created: true,
    }))
}

/// Rotates the keys of purpose terminal (module docs): first [`promote_due`],
/// then a scheduled rotation publishes a `next` key (or reports the one that
/// is pending), an emergency rotation makes a new key sign at once. On a
/// database without keys either mode creates the first key.
pub async fn rotate(
    db: &Db,
    pepper: &Pepper,
    policy: &KeyPolicy,
    mode: RotationMode,
    now: UnixMillis,
) -> Result<Rotation, KeyError> {
    promote_due(db, policy, now).await?;
    with_retries!(rotate_once(db, pepper, policy, mode, now))
}

async fn rotate_once(
    db: &Db,
    pepper: &Pepper,
    policy: &KeyPolicy,
    mode: RotationMode,
    now: UnixMillis,
) -> Result<Attempt<Rotation>, KeyError> {
    let mut uow = db.begin(now).await?;
    let live = live(uow.conn()).await?;
    let Some(active) = find(&live, KeyStatus::Active) else {
        let new = NewKey::generate(pepper, now)?;
        new.insert(&mut uow, KeyStatus::Active, now, now).await?;
        uow.audit(rotation_entry(step_details(RotationStep::First, &new.jwk)));
        uow.commit().await?;
        tracing::info!(kid = %new.kid, "created the first terminal signing key; it signs now");
        return Ok(Attempt::Done(Rotation::First { kid: new.kid }));
    };
    let next = find(&live, KeyStatus::Next);
    let published = live.iter().filter(|key| key.is_published(now)).count();

    match mode {
        RotationMode::Scheduled => {
            if let Some(next) = next {
                return Ok(Attempt::Done(Rotation::AlreadyScheduled {
                    kid: next.kid.clone(),
                    activates_at: next.activates_at,
                }));
            }
            if published + 1 > JWKS_MAX_KEYS {
                return Err(KeyError::TooManyPublishedKeys { max: JWKS_MAX_KEYS });
            }
            let activates_at = now.saturating_add(millis(policy.publish_ahead));
            let new = NewKey::generate(pepper, now)?;
            new.insert(&mut uow, KeyStatus::Next, activates_at, now)
                .await?;
            uow.audit(rotation_entry(
                step_details(RotationStep::Scheduled, &new.jwk)
                    .kid("active_kid", &active.public_jwk),
            ));
            uow.commit().await?;
            tracing::info!(
                kid = %new.kid,
                activates_at,
                "published the next terminal signing key"
            );
            Ok(Attempt::Done(Rotation::Scheduled {
                kid: new.kid,
                activates_at,
            }))
        }
        RotationMode::Emergency => {
            // The new key adds one to the JWKS, a withdrawn next key takes one out.
            if published + 1 - usize::from(next.is_some()) > JWKS_MAX_KEYS {
                return Err(KeyError::TooManyPublishedKeys { max: JWKS_MAX_KEYS });
            }
            let published_until = now.saturating_add(millis(policy.retire_after));
            if !stop_signing(&mut uow, active, now, published_until).await? {
                return Ok(Attempt::Again);
            }
            if let Some(next) = next {
                if !withdraw(&mut uow, next, now).await? {
                    return Ok(Attempt::Again);
                }
            }
            let new = NewKey::generate(pepper, now)?;
            new.insert(&mut uow, KeyStatus::Active, now, now).await?;
            let mut details = step_details(RotationStep::Emergency, &new.jwk)
                .kid("previous_kid", &active.public_jwk);
            if let Some(next) = next {
                details = details.kid("withdrawn_kid", &next.public_jwk);
            }
            uow.audit(rotation_entry(details));
            uow.commit().await?;
            tracing::warn!(
                kid = %new.kid,
                previous_kid = %active.kid,
                previous_published_until = published_until,
                withdrawn_kid = next.map(|k| k.kid.as_str()),
                "emergency rotation: a new terminal signing key signs now"
            );
            Ok(Attempt::Done(Rotation::Emergency {
                kid: new.kid,
                previous_kid: active.kid.clone(),
                previous_published_until: published_until,
                withdrawn_kid: next.map(|k| k.kid.clone()),
            }))
        }
    }
}

/// Records what time has done (module docs): a due `next` key becomes
/// `active` and the previous one `retiring`; `retiring` keys whose
/// `published_until` has passed become `retired`. Reads only when nothing is
/// due; run it from the sweep (and [`rotate`] runs it first).
pub async fn promote_due(
    db: &Db,
    policy: &KeyPolicy,
    now: UnixMillis,
) -> Result<Promotion, KeyError> {
    with_retries!(promote_once(db, policy, now))
}

fn due_next(live: &[KeyRecord], now: UnixMillis) -> Option<&KeyRecord> {
    live.iter()
        .find(|key| key.status == KeyStatus::Next && key.activates_at <= now)
}

fn due_retirements(live: &[KeyRecord], now: UnixMillis) -> impl Iterator<Item = &KeyRecord> {
    live.iter().filter(move |key| {
        key.status == KeyStatus::Retiring && key.published_until.is_some_and(|until| until <= now)
    })
}

async fn promote_once(
    db: &Db,
    policy: &KeyPolicy,
    now: UnixMillis,
) -> Result<Attempt<Promotion>, KeyError> {
    let mut conn = db.pool().acquire().await.map_err(DbError::from)?;
    let live_now = live(&mut conn).await?;
    if due_next(&live_now, now).is_none() && due_retirements(&live_now, now).next().is_none() {
        return Ok(Attempt::Done(Promotion::default()));
    }
    drop(conn);

    let mut uow = db.begin(now).await?;
    let live = live(uow.conn()).await?;
    let mut promotion = Promotion::default();
    if let Some(next) = due_next(&live, now) {
        let previous = find(&live, KeyStatus::Active);
        if let Some(previous) = previous {
            // It stopped signing at the next key's activates_at (signer); its
            // tokens are verifiable for retire_after from now, which is later.
            let published_until = now.saturating_add(millis(policy.retire_after));
            if !stop_signing(&mut uow, previous, next.activates_at, published_until).await? {
                return Ok(Attempt::Again);
            }
            promotion.retiring = Some(previous.kid.clone());
        }
        let done = sqlx::query(
            "UPDATE server_signing_keys SET status = 'active', activated_at = activates_at \
             WHERE id = $1 AND status = 'next'",
        )
        .bind(db::id_text(&next.id))
        .execute(uow.conn())
        .await
        .map_err(DbError::from)?;
        if done.rows_affected() != 1 {
            return Ok(Attempt::Again);
        }
        let mut details = step_details(RotationStep::Activated, &next.public_jwk);
        if let Some(previous) = previous {
            details = details.kid("previous_kid", &previous.public_jwk);
        }
        uow.audit(rotation_entry(details));
        promotion.activated = Some(next.kid.clone());
    }
    for key in due_retirements(&live, now) {
        let done = sqlx::query(
            "UPDATE server_signing_keys SET status = 'retired', retired_at = $1 \
             WHERE id = $2 AND status = 'retiring'",
        )
        .bind(now)
        .bind(db::id_text(&key.id))
        .execute(uow.conn())
        .await
        .map_err(DbError::from)?;
        if done.rows_affected() != 1 {
            return Ok(Attempt::Again);
        }
        uow.audit(rotation_entry(step_details(
            RotationStep::Retired,
            &key.public_jwk,
        )));
        promotion.retired.push(key.kid.clone());
    }
    uow.commit().await?;
    if let Some(kid) = &promotion.activated {
        tracing::info!(
            kid = %kid,
            previous_kid = promotion.retiring.as_deref(),
            "the next terminal signing key is now the active one"
        );
    }
    for kid in &promotion.retired {
        tracing::info!(kid = %kid, "a retired terminal signing key left the JWKS");
    }
    Ok(Attempt::Done(promotion))
}

/// `active` → `retiring`: stops signing at `retiring_at`, published until
/// `published_until`; the private key is dropped from the row. Whether the
/// key was still active.
async fn stop_signing(
    uow: &mut UnitOfWork,
    key: &KeyRecord,
    retiring_at: UnixMillis,
    published_until: UnixMillis,
) -> Result<bool, KeyError> {
    let done = sqlx::query(
        "UPDATE server_signing_keys SET status = 'retiring', retiring_at = $1, \
         published_until = $2, private_sealed = NULL WHERE id = $3 AND status = 'active'",
    )
    .bind(retiring_at)
    .bind(published_until)
    .bind(db::id_text(&key.id))
    .execute(uow.conn())
    .await
    .map_err(DbError::from)?;
    Ok(done.rows_affected() == 1)
}

/// `next` → `retired` at once (an emergency rotation): it never signed, so no
/// token needs it. Whether the key was still next.
async fn withdraw(
    uow: &mut UnitOfWork,
    key: &KeyRecord,
    now: UnixMillis,
) -> Result<bool, KeyError> {
    let done = sqlx::query(
        "UPDATE server_signing_keys SET status = 'retired', published_until = $1, \
         retired_at = $1, private_sealed = NULL WHERE id = $2 AND status = 'next'",
    )
    .bind(now)
    .bind(db::id_text(&key.id))
    .execute(uow.conn())
    .await
    .map_err(DbError::from)?;
    Ok(done.rows_affected() == 1)
}

fn step_details(step: RotationStep, kid: &Ed25519PublicJwk) -> AuditDetails {
    AuditDetails::new().code("step", step).kid("kid", kid)
}

fn rotation_entry(details: AuditDetails) -> AuditEntry {
    AuditEntry::allow(AuditAction::TerminalKeyRotate, Actor::System).details(details)
}
