//! Devices (DESIGN 3.1): a CLI login registers the device's Ed25519 public key;
//! the same key of the same person again is the same device. Quick reattach
//! (6.2) will check a signature of this key over a server nonce.
//!
//! Revoking a device ends its login sessions and every terminal session whose
//! current device it is at once, in the same unit of work (8.3:
//! `device_revoked`), and
//! its key stays revoked: a later login with it is `403 forbidden` with reason
//! `device_revoked` (after the password and TOTP passed), so a lost device
//! cannot come back even with the person's credentials; the person logs in
//! with a new key instead.

use bothy_proto::codes::CloseReason;
use bothy_proto::jwk::Ed25519PublicJwk;
use sqlx::any::AnyRow;
use sqlx::{AnyConnection, Row};
use uuid::Uuid;

use super::login_sessions::{self, EndReason, Ending};
use super::principal::PersonPrincipal;
use super::{AuthFailure, IdentityError, count, deny};
use crate::audit::{AuditAction, AuditDetails, AuditEntry, TargetKind};
use crate::clock::UnixMillis;
use crate::db::{self, Db, DbError, UnitOfWork};
use crate::revocation::{self, EndScope};

/// The longest device name, in characters.
pub const DEVICE_NAME_MAX_CHARS: usize = 64;

/// A device name: 1 to 64 characters, no control characters, not only spaces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceName(String);

impl DeviceName {
    /// The name, if it follows the rule.
    pub fn parse(text: &str) -> Option<DeviceName> {
        let ok = !text.trim().is_empty()
            && text.chars().count() <= DEVICE_NAME_MAX_CHARS
            && !text.chars().any(char::is_control);
        ok.then(|| DeviceName(text.to_owned()))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A device as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    /// Its ID (`device_id`).
    pub id: Uuid,
    /// The person it belongs to.
    pub person_id: Uuid,
    /// The name given at the last login.
    pub name: String,
    /// The raw Ed25519 public key, base64url.
    pub public_key: String,
    /// First login.
    pub created_at: UnixMillis,
    /// Last login.
    pub last_login_at: UnixMillis,
    /// When it was revoked.
    pub revoked_at: Option<UnixMillis>,
}

const COLUMNS: &str = "id, person_id, name, public_key, created_at, last_login_at, revoked_at";

fn decode(row: &AnyRow) -> Result<Device, IdentityError> {
    let stored = |_| IdentityError::Stored("devices row");
    Ok(Device {
        id: db::get_uuid(row, "id")?,
        person_id: db::get_uuid(row, "person_id")?,
        name: row.try_get("name").map_err(stored)?,
        public_key: row.try_get("public_key").map_err(stored)?,
        created_at: row.try_get("created_at").map_err(stored)?,
        last_login_at: row.try_get("last_login_at").map_err(stored)?,
        revoked_at: row.try_get("revoked_at").map_err(stored)?,
    })
}

/// A registered device at login.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Registered {
    pub(crate) id: Uuid,
    pub(crate) new: bool,
}

/// Registers `key` for `person_id` in `uow` (or finds it, renaming it), unless
/// that key was revoked.
pub(crate) async fn register(
    uow: &mut UnitOfWork,
    person_id: Uuid,
    key: &Ed25519PublicJwk,
    name: &DeviceName,
) -> Result<Result<Registered, AuthFailure>, IdentityError> {
    let now = uow.now_ms();
    let public_key = bothy_proto::b64::encode(&key.raw());
    let person = db::id_text(&person_id);
    // ON CONFLICT: two first logins with one key at once make one device.
    let inserted = sqlx::query(
        "INSERT INTO devices (id, person_id, name, public_key, created_at, last_login_at, revoked_at) \
         VALUES ($1, $2, $3, $4, $5, $5, NULL) ON CONFLICT (person_id, public_key) DO NOTHING",
    )
    .bind(db::id_text(&db::new_id(now)?))
    .bind(&person)
    .bind(name.as_str())
    .bind(&public_key)
    .bind(now)
    .execute(uow.conn())
    .await
    .map_err(DbError::from)?;
    let row = sqlx::query(&format!(
        "SELECT {COLUMNS} FROM devices WHERE person_id = $1 AND public_key = $2"
    ))
    .bind(&person)
    .bind(&public_key)
    .fetch_one(uow.conn())
    .await
    .map_err(DbError::from)?;
    let device = decode(&row)?;
    if device.revoked_at.is_some() {
        return Ok(Err(AuthFailure::DeviceRevoked));
    }
    let new = inserted.rows_affected() == 1;
    if !new {
        sqlx::query("UPDATE devices SET name = $1, last_login_at = $2 WHERE id = $3")
            .bind(name.as_str())
            .bind(now)
            .bind(db::id_text(&device.id))
            .execute(uow.conn())
            .await
            .map_err(DbError::from)?;
    }
    Ok(Ok(Registered { id: device.id, new }))
}

/// The device with this ID.
pub async fn get(conn: &mut AnyConnection, id: Uuid) -> Result<Option<Device>, IdentityError> {
    let row = sqlx::query(&format!("SELECT {COLUMNS} FROM devices WHERE id = $1"))
        .bind(db::id_text(&id))
        .fetch_optional(conn)
        .await
        .map_err(DbError::from)?;
    row.as_ref().map(decode).transpose()
}

/// The devices of `person_id`, or of everyone with `None`, oldest first.
pub async fn list(
    conn: &mut AnyConnection,
    person_id: Option<Uuid>,
) -> Result<Vec<Device>, IdentityError> {
    let rows = match person_id {
        Some(person) => {
            sqlx::query(&format!(
                "SELECT {COLUMNS} FROM devices WHERE person_id = $1 ORDER BY id"
            ))
            .bind(db::id_text(&person))
            .fetch_all(conn)
            .await
        }
        None => {
            sqlx::query(&format!("SELECT {COLUMNS} FROM devices ORDER BY id"))
                .fetch_all(conn)
                .await
        }
    }
    .map_err(DbError::from)?;
    rows.iter().map(decode).collect()
}

/// The outcome of a revocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revoked {
    /// Whether this call revoked it (false: it was revoked already).
    pub changed: bool,
    /// The login sessions this ended.
    pub sessions_ended: Vec<Uuid>,
}

/// `POST /api/v1/devices/{id}/revoke`: a person revokes their own device, an
/// owner anyone's; others get 404. Ends the device's login sessions.
pub async fn revoke(
    db: &Db,
    now: UnixMillis,
    actor: &PersonPrincipal,
    device_id: Uuid,
) -> Result<Revoked, IdentityError> {
    let mut uow = db.begin(now).await?;
    let Some(device) = get(uow.conn(), device_id).await? else {
        return Err(IdentityError::NotFound);
    };
    if device.person_id != actor.person_id && !actor.is_owner() {
        let entry = AuditEntry::deny(AuditAction::DeviceRevoke, actor.actor())
            .target(TargetKind::Device, device_id)
            .details(AuditDetails::new().code("reason_code", AuthFailure::OwnerRequired));
        return Err(deny(uow, entry, IdentityError::NotFound).await);
    }
    let done =
        sqlx::query("UPDATE devices SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL")
            .bind(now)
            .bind(db::id_text(&device_id))
            .execute(uow.conn())
            .await
            .map_err(DbError::from)?;
    let sessions_ended = login_sessions::end(
        &mut uow,
        Ending::Device(device_id),
        EndReason::DeviceRevoked,
    )
    .await?;
    // identity.DeviceRevoked (8.3, M2-46): the terminal sessions whose current
    // device is this one, also those of another login session (an attach from
    // this device), end in this unit of work.
    revocation::end(
        &mut uow,
        EndScope::Device(device_id),
        CloseReason::DeviceRevoked,
        None,
    )
    .await
    .map_err(login_sessions::terminal_end_error)?;
    let changed = done.rows_affected() == 1;
    uow.audit(
        AuditEntry::allow(AuditAction::DeviceRevoke, actor.actor())
            .target(TargetKind::Device, device_id)
            .details(
                AuditDetails::new()
                    .id("person_id", device.person_id)
                    .count("sessions_ended", count(&sessions_ended))
                    .flag("no_change", !changed),
            ),
    );
    uow.commit().await?;
    Ok(Revoked {
        changed,
        sessions_ended,
    })
}
