//! Server signing keys of purpose terminal (spec 5.3 "Terminal session token"
//! and "JWKS refresh", 3.5 hello; DESIGN 3.3 `server_signing_keys`): the Ed25519
//! keys that sign terminal session tokens ([`super::token`]), and their public
//! JWKS, which hello and heartbeat_ack carry to the host services.
//!
//! # Life cycle (docs/decisions.md D-50)
//! `next` → `active` → `retiring` → `retired`, at most one `next` and one
//! `active` key (two unique partial indexes).
//! - [`ensure_active`] creates the first key of a fresh database, `active` at
//!   once: no host service knows any key yet, so there is nothing to publish
//!   ahead of. Race-safe: of two processes or nodes, the second insert hits the
//!   unique index on the active key and reads the winner's key instead.
//! - [`rotate`] with [`RotationMode::Scheduled`] (what `bothy-server admin
//!   rotate-terminal-key` does) publishes a `next` key whose `activates_at` is
//!   `agent.jwks_max_age` after its creation: from its commit it is in the JWKS,
//!   and it signs nothing before `activates_at` (the chapter's "publishes the
//!   next key agent.jwks_max_age before it signs").
//! - [`signer`] returns the key that signs at `now`: the `next` key once its
//!   `activates_at` has passed, else the `active` one. So the switch happens on
//!   time on every node, whether or not [`promote_due`] has run yet.
//! - [`promote_due`] (the sweep's step; [`rotate`] runs it first) records what
//!   time has done: a due `next` key becomes `active`, the previous `active`
//!   one `retiring`, with `published_until = now + retire_after`
//!   ([`KeyPolicy`]: `terminal.session_token_ttl` rounded up to seconds as `exp`
//!   is, plus `auth.clock_leeway`, plus `signing_key.cache_ttl` for a node that
//!   still signs with a cached key). A `retiring` key whose `published_until`
//!   has passed becomes `retired`.
//! - [`jwks`] is every key of purpose terminal that is `next`, `active`, or
//!   `retiring` with `published_until` still ahead (also before [`promote_due`]
//!   marked it `retired`), ordered by creation time and kid. The order depends
//!   only on the set, so two JWKS compare equal exactly when they hold the same
//!   keys (heartbeat_ack sends jwks when the set differs).
//! - [`RotationMode::Emergency`] (`--now`) creates a key that is `active` at
//!   once; the previous active key becomes `retiring` as above (its tokens stay
//!   verifiable until they expire) and a pending `next` key is withdrawn
//!   (`retired` straight away: it never signed). The chapter's limit applies: a
//!   host service may refuse new tokens for one heartbeat interval plus
//!   `signing_key.cache_ttl`, until it has the new JWKS.
//!
//! Every change writes one audit entry `terminal.key_rotate` (actor system)
//! with a `step` code and kids only.
//!
//! # Secrets
//! The private key (the 32-byte Ed25519 seed) is sealed at rest like the TOTP
//! secrets (`identity::totp`): ChaCha20-Poly1305 (ring) under a key derived from
//! the pepper ([`PepperPurpose::TerminalKeySealKey`]), a random 96-bit nonce,
//! and associated data binding the row's ID, the purpose and the kid, so a
//! sealed value copied into another row does not open. It is unsealed only
//! into a [`TerminalSigner`], which has no accessor for it and a redacted
//! `Debug`; only [`super::token`] signs with it. It is dropped from the row
//! (`private_sealed = NULL`) as soon as the key stops signing. Logs, audit
//! entries and errors name keys by kid, the RFC 7638 thumbprint of the public
//! key, never by anything secret.
//!
//! # Layout
//! - this module: the records, the signer, the reads ([`jwks`], [`signer`],
//!   [`list`]);
//! - `rotation`: the changes of the life cycle ([`ensure_active`],
//!   [`rotate`], [`promote_due`]) with their retries and audit entries;
//! - `sealing`: a new key sealed for its row, and the unsealing.

use std::fmt;
use std::time::Duration;

use bothy_proto::b64;
use bothy_proto::ids::RandomError;
use bothy_proto::jwk::{Ed25519PublicJwk, JWKS_MAX_KEYS, Jwks, JwksKey};
use bothy_proto::jws::{self, Ed25519SigningKey, TYP_TERMINAL_SESSION, TerminalSessionClaims};
use ring::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use sqlx::any::AnyRow;
use sqlx::{AnyConnection, Row};
use uuid::Uuid;
use zeroize::Zeroizing;

use crate::audit::{Actor, AuditAction, AuditDetails, AuditEntry};
use crate::clock::{UnixMillis, millis};
use crate::codes::code_enum;
use crate::config::Config;
use crate::db::{self, Db, DbError, UnitOfWork};
use crate::pepper::{Pepper, PepperPurpose};

mod rotation;
mod sealing;
#[cfg(test)]
mod tests;

pub use rotation::{ensure_active, promote_due, rotate};
use sealing::unseal;

/// `server_signing_keys.purpose` of the keys that sign terminal session tokens.
pub const PURPOSE_TERMINAL: &str = "terminal";

/// Attempts of a change that lost a race (a unique index, a conditional update,
/// a busy database) before [`KeyError::Contended`].
const MAX_ATTEMPTS: u32 = 5;

/// Bytes of an Ed25519 private key (the seed).
const SEED_LEN: usize = 32;

/// The columns of [`KeyRecord`], in the order of the table.
const COLUMNS: &str = "id, kid, public_jwk, status, created_at, activates_at, activated_at, \
                       retiring_at, published_until, retired_at";

code_enum! {
    /// The life-cycle state of a key (`server_signing_keys.status`).
    pub enum KeyStatus {
        /// Published in the JWKS; signs from `activates_at` on.
        Next => "next",
        /// Signs (unless a due `next` key has taken over, see [`signer`]).
        Active => "active",
        /// No longer signs; published until `published_until`.
        Retiring => "retiring",
        /// Neither signs nor is published; kept as history.
        Retired => "retired",
    }
}

code_enum! {
    /// The `step` of a `terminal.key_rotate` audit entry.
    pub enum RotationStep {
        /// The first key of a fresh database, active at once (`kid`).
        First => "first",
        /// A scheduled rotation published a next key (`kid`; `active_kid`, the
        /// key that keeps signing until then).
        Scheduled => "scheduled",
        /// A next key became the active key (`kid`; `previous_kid`, now retiring).
        Activated => "activated",
        /// An emergency rotation: a new key active at once (`kid`;
        /// `previous_kid`, now retiring; `withdrawn_kid`, a withdrawn next key).
        Emergency => "emergency",
        /// A retiring key left the JWKS: every token it signed has expired (`kid`).
        Retired => "retired",
    }
}

/// How a rotation publishes its new key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RotationMode {
    /// Publish a `next` key now; it signs after `agent.jwks_max_age`.
    Scheduled,
    /// A new key signs at once (`--now`): for a suspected compromise.
    Emergency,
}

/// The durations of the life cycle, from the configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyPolicy {
    /// `agent.jwks_max_age`: how long a scheduled `next` key is published
    /// before it signs.
    pub publish_ahead: Duration,
    /// How long a key stays in the JWKS after it stopped signing: the token
    /// lifetime as `exp` rounds it (`terminal.session_token_ttl` up to whole
    /// seconds) plus `auth.clock_leeway` (hosts accept until `exp` plus the
    /// leeway) plus `signing_key.cache_ttl` (a node may sign with a cached
    /// key that long after the switch).
    pub retire_after: Duration,
}

impl KeyPolicy {
    /// The policy of `config`.
    pub fn from_config(config: &Config) -> KeyPolicy {
        let token_lifetime = Duration::from_secs(
            u64::try_from(super::token::lifetime_secs(
                config.terminal.session_token_ttl,
            ))
            .unwrap_or(u64::MAX),
        );
        KeyPolicy {
            publish_ahead: config.agent.jwks_max_age,
            retire_after: token_lifetime
                .saturating_add(config.auth.clock_leeway)
                .saturating_add(config.signing_key.cache_ttl),
        }
    }
}

/// Why a key operation failed. Messages name keys by kid only.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The database failed.
    #[error(transparent)]
    Db(#[from] DbError),
    /// No key signs: [`ensure_active`] has not run on this database.
    #[error("there is no active terminal signing key (ensure_active creates the first one)")]
    NoActiveKey,
    /// A stored value does not decode, or the kid is not the thumbprint of the
    /// stored public key.
    #[error("the stored value of server_signing_keys.{column} cannot be used")]
    Stored {
        /// The column.
        column: &'static str,
    },
    /// The sealed private key does not open: another token pepper than the
    /// one that sealed it, or a changed row.
    #[error(
        "the private key of the terminal signing key {kid} cannot be unsealed (another token \
         pepper, or a changed row)"
    )]
    Unseal {
        /// The key's kid.
        kid: String,
    },
    /// The change would put more than [`JWKS_MAX_KEYS`] keys into the JWKS
    /// (emergency rotations in quick succession); retiring keys leave it when
    /// their tokens have expired.
    #[error(
        "the JWKS of purpose terminal would hold more than {max} keys; try again once retiring \
         keys have left it"
    )]
    TooManyPublishedKeys {
        /// The bound.
        max: usize,
    },
    /// The OS random source failed.
    #[error("the operating system's random source failed")]
    Random,
    /// ring refused to seal (never expected).
    #[error("sealing a terminal signing key failed")]
    Seal,
    /// Concurrent changes won every attempt.
    #[error("the terminal signing keys changed concurrently {attempts} times in a row")]
    Contended {
        /// How often it was tried.
        attempts: u32,
    },
}

impl From<RandomError> for KeyError {
    fn from(_: RandomError) -> Self {
        KeyError::Random
    }
}

/// One stored key, without its private part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRecord {
    /// The row's ID (UUIDv7 of its creation).
    pub id: Uuid,
    /// The RFC 7638 thumbprint of `public_jwk`.
    pub kid: String,
    /// The public key.
    pub public_jwk: Ed25519PublicJwk,
    /// The state.
    pub status: KeyStatus,
    /// Created and published.
    pub created_at: UnixMillis,
    /// The earliest time it signs.
    pub activates_at: UnixMillis,
    /// When it became the signing key (`None` for a next key, also a withdrawn one).
    pub activated_at: Option<UnixMillis>,
    /// From when it no longer signs.
    pub retiring_at: Option<UnixMillis>,
    /// Until when it is published after it stopped signing.
    pub published_until: Option<UnixMillis>,
    /// When it was retired.
    pub retired_at: Option<UnixMillis>,
}

impl KeyRecord {
    /// Whether the key is in the JWKS at `now`.
    pub fn is_published(&self, now: UnixMillis) -> bool {
        match self.status {
            KeyStatus::Next | KeyStatus::Active => true,
            KeyStatus::Retiring => self.published_until.is_some_and(|until| until > now),
            KeyStatus::Retired => false,
        }
    }
}

/// What [`ensure_active`] found or did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnsuredKey {
    /// The kid of the active key.
    pub kid: String,
    /// Whether this call created it.
    pub created: bool,
}

/// What [`rotate`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rotation {
    /// There was no key: the first one, active at once.
    First {
        /// Its kid.
        kid: String,
    },
    /// A next key was published.
    Scheduled {
        /// Its kid.
        kid: String,
        /// When it starts to sign.
        activates_at: UnixMillis,
    },
    /// A next key was already published; nothing changed.
    AlreadyScheduled {
        /// Its kid.
        kid: String,
        /// When it starts to sign.
        activates_at: UnixMillis,
    },
    /// A new key signs now.
    Emergency {
        /// Its kid.
        kid: String,
        /// The key that signed until now.
        previous_kid: String,
        /// Until when the previous key stays in the JWKS.
        previous_published_until: UnixMillis,
        /// A pending next key that was withdrawn.
        withdrawn_kid: Option<String>,
    },
}

/// What [`promote_due`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Promotion {
    /// The kid of the next key that became active.
    pub activated: Option<String>,
    /// The kid of the key that stopped signing with it.
    pub retiring: Option<String>,
    /// The kids of the keys that left the JWKS.
    pub retired: Vec<String>,
}

impl Promotion {
    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.activated.is_none() && self.retiring.is_none() && self.retired.is_empty()
    }
}

/// The key that signs terminal session tokens now, unsealed. Its private key
/// has no accessor; `Debug` shows the kid only; it is wiped when dropped.
pub struct TerminalSigner {
    kid: String,
    key: Ed25519SigningKey,
}

impl fmt::Debug for TerminalSigner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TerminalSigner")
            .field("kid", &self.kid)
            .field("private", &"<redacted>")
            .finish()
    }
}

impl TerminalSigner {
    /// The kid the tokens carry.
    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// The public key.
    pub fn public_jwk(&self) -> Ed25519PublicJwk {
        self.key.public_jwk()
    }

    /// Signs `claims` as `terminal-session+jwt` under this key's kid; only
    /// [`super::token::issue`] calls it, after building every claim.
    pub(crate) fn sign(&self, claims: &TerminalSessionClaims) -> String {
        jws::sign(TYP_TERMINAL_SESSION, &self.kid, claims, &self.key)
    }

    /// A signer of a key that is not stored (unit tests of the token module).
    #[cfg(test)]
    pub(crate) fn for_tests(key: Ed25519SigningKey) -> TerminalSigner {
        TerminalSigner {
            kid: key.kid(),
            key,
        }
    }
}

/// The public JWKS of purpose terminal at `now` (for hello and
/// heartbeat_ack): `next`, `active` and still-published `retiring` keys,
/// ordered by creation time, then kid.
pub async fn jwks(conn: &mut AnyConnection, now: UnixMillis) -> Result<Jwks, KeyError> {
    let keys = live(conn)
        .await?
        .into_iter()
        .filter(|key| key.is_published(now))
        .map(|key| JwksKey::from_jwk(key.public_jwk))
        .collect();
    Jwks::new(keys).map_err(|_| KeyError::TooManyPublishedKeys { max: JWKS_MAX_KEYS })
}

/// The key that signs at `now`, unsealed: the `next` key once its
/// `activates_at` has passed, else the `active` one.
pub async fn signer(db: &Db, pepper: &Pepper, now: UnixMillis) -> Result<TerminalSigner, KeyError> {
    let mut conn = db.pool().acquire().await.map_err(DbError::from)?;
    let row = sqlx::query(&format!(
        "SELECT {COLUMNS}, private_sealed FROM server_signing_keys \
         WHERE purpose = $1 AND (status = 'active' OR (status = 'next' AND activates_at <= $2)) \
         ORDER BY activates_at DESC, kid DESC LIMIT 1"
    ))
    .bind(PURPOSE_TERMINAL)
    .bind(now)
    .fetch_optional(&mut *conn)
    .await
    .map_err(DbError::from)?
    .ok_or(KeyError::NoActiveKey)?;
    let record = decode(&row)?;
    let sealed: Option<String> = row
        .try_get("private_sealed")
        .map_err(|_| KeyError::Stored {
            column: "private_sealed",
        })?;
    let sealed = sealed.ok_or(KeyError::Stored {
        column: "private_sealed",
    })?;
    let key = unseal(pepper, &record.id, &record.kid, &sealed)?;
    if key.public_jwk() != record.public_jwk {
        return Err(KeyError::Stored {
            column: "public_jwk",
        });
    }
    Ok(TerminalSigner {
        kid: record.kid,
        key,
    })
}

/// Every key of purpose terminal, retired ones too, ordered by creation time,
/// then kid.
pub async fn list(conn: &mut AnyConnection) -> Result<Vec<KeyRecord>, KeyError> {
    let rows = sqlx::query(&format!(
        "SELECT {COLUMNS} FROM server_signing_keys WHERE purpose = $1 \
         ORDER BY created_at, kid"
    ))
    .bind(PURPOSE_TERMINAL)
    .fetch_all(conn)
    .await
    .map_err(DbError::from)?;
    rows.iter().map(decode).collect()
}

/// The keys that are not retired (a handful), ordered like [`list`].
async fn live(conn: &mut AnyConnection) -> Result<Vec<KeyRecord>, KeyError> {
    let rows = sqlx::query(&format!(
        "SELECT {COLUMNS} FROM server_signing_keys WHERE purpose = $1 AND status <> 'retired' \
         ORDER BY created_at, kid"
    ))
    .bind(PURPOSE_TERMINAL)
    .fetch_all(conn)
    .await
    .map_err(DbError::from)?;
    rows.iter().map(decode).collect()
}

fn find(keys: &[KeyRecord], status: KeyStatus) -> Option<&KeyRecord> {
    keys.iter().find(|key| key.status == status)
}

fn decode(row: &AnyRow) -> Result<KeyRecord, KeyError> {
    let stored = |column| KeyError::Stored { column };
    let time = |column: &'static str| row.try_get::<i64, _>(column).map_err(|_| stored(column));
    let opt_time = |column: &'static str| {
        row.try_get::<Option<i64>, _>(column)
            .map_err(|_| stored(column))
    };
    let text = |column: &'static str| row.try_get::<String, _>(column).map_err(|_| stored(column));
    let id = db::get_uuid(row, "id").map_err(|_| stored("id"))?;
    let kid = text("kid")?;
    let public_jwk = Ed25519PublicJwk::from_json(text("public_jwk")?.as_bytes())
        .map_err(|_| stored("public_jwk"))?;
    if public_jwk.thumbprint() != kid {
        return Err(stored("kid"));
    }
    let status = KeyStatus::parse(&text("status")?).ok_or(stored("status"))?;
    Ok(KeyRecord {
        id,
        kid,
        public_jwk,
        status,
        created_at: time("created_at")?,
        activates_at: time("activates_at")?,
        activated_at: opt_time("activated_at")?,
        retiring_at: opt_time("retiring_at")?,
        published_until: opt_time("published_until")?,
        retired_at: opt_time("retired_at")?,
    })
}
