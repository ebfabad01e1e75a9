//! Permissions on hosts (spec 8.1–8.2, 7.3; DESIGN 3.2, standing in for chapter
//! 07): grants with target host and capability terminal, the one
//! [`authorize`](authorize::authorize) every entry point calls (SR10, SR11 = I6,
//! SR12, agents and apps refused), the transactional I6 check of every rights
//! change, and the permission version.
//!
//! # Layout
//! - this file: [`bump_version`] and [`current_version`] (the permission version).
//! - [`grants`]: create, revoke, list and the preview (`terminal_not_effective`).
//! - [`authorize`]: `authorize(principal, action, host)` with the reasons of 13.
//! - [`i6`]: the I6 check inside a unit of work (7.3 item 1).

pub mod authorize;
pub mod grants;
pub mod i6;

use sqlx::{AnyConnection, Row};

use crate::db::{DbError, UnitOfWork};

/// Raises the permission version (every change of effective permissions:
/// grants, roles, assignments, host states, declarations) in `uow`; returns
/// the new value. Sessions that the change revokes end in the same unit of
/// work ([`crate::revocation::end`]).
pub async fn bump_version(uow: &mut UnitOfWork) -> Result<i64, DbError> {
    let row = sqlx::query(
        "UPDATE permission_version SET version = version + 1 WHERE id = 1 RETURNING version",
    )
    .fetch_one(uow.conn())
    .await
    .map_err(DbError::from)?;
    row.try_get::<i64, _>("version").map_err(DbError::from)
}

/// The current permission version.
pub async fn current_version(conn: &mut AnyConnection) -> Result<i64, DbError> {
    let row = sqlx::query("SELECT version FROM permission_version WHERE id = 1")
        .fetch_one(conn)
        .await
        .map_err(DbError::from)?;
    row.try_get::<i64, _>("version").map_err(DbError::from)
}
