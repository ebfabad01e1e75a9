//! Persons: the `person` principal (DESIGN 3.1) — username, role, status.
//!
//! # The username rule
//! 1 to 32 characters: ASCII letters, digits, `.`, `_` and `-`, starting with a
//! letter. Usernames are case-insensitive: the server folds them to lower case
//! on input and stores only the folded form (a `CHECK` in the schema holds it),
//! so `Alice` and `alice` are one account and the unique index compares folded
//! names. The rule keeps names free of `:`, `@`, `/` and whitespace, so a
//! username is safe in an `otpauth://` label, a log field and a path.

use std::fmt;

use sqlx::any::AnyRow;
use sqlx::{AnyConnection, Row};
use uuid::Uuid;

use super::{ConflictReason, IdentityError, PersonStatus, PrincipalKind, Role};
use crate::clock::UnixMillis;
use crate::db::{self, DbError, UnitOfWork};

/// The longest username, in characters.
pub const USERNAME_MAX_CHARS: usize = 32;

/// A username that follows the rule of the module docs, folded to lower case.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Username(String);

impl Username {
    /// Folds `input` to lower case and checks the rule.
    pub fn parse(input: &str) -> Option<Username> {
        let folded = input.to_ascii_lowercase();
        let mut chars = folded.chars();
        let first_ok = chars.next().is_some_and(|c| c.is_ascii_lowercase());
        let rest_ok = chars
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-'));
        (first_ok && rest_ok && folded.len() <= USERNAME_MAX_CHARS).then_some(Username(folded))
    }

    /// The folded name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Username {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Username({})", self.0)
    }
}

impl fmt::Display for Username {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A person as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Person {
    /// The principal ID.
    pub id: Uuid,
    /// The folded username.
    pub username: Username,
    /// Owner or member.
    pub role: Role,
    /// Active, disabled or deleted.
    pub status: PersonStatus,
    /// Whether enrollment finished (a password and an active TOTP credential).
    pub enrolled: bool,
    /// When the person was created.
    pub created_at: UnixMillis,
}

const PERSON_COLUMNS: &str = "p.principal_id, p.username, p.role, p.status, p.created_at, \
     (p.password_hash IS NOT NULL AND EXISTS (SELECT 1 FROM totp_credentials t \
       WHERE t.person_id = p.principal_id AND t.status = 'active')) AS enrolled";

fn decode(row: &AnyRow) -> Result<Person, IdentityError> {
    let stored = |_| IdentityError::Stored("persons row");
    Ok(Person {
        id: db::get_uuid(row, "principal_id")?,
        username: Username::parse(&row.try_get::<String, _>("username").map_err(stored)?)
            .ok_or(IdentityError::Stored("persons.username"))?,
        role: Role::parse(&row.try_get::<String, _>("role").map_err(stored)?)
            .ok_or(IdentityError::Stored("persons.role"))?,
        status: PersonStatus::parse(&row.try_get::<String, _>("status").map_err(stored)?)
            .ok_or(IdentityError::Stored("persons.status"))?,
        enrolled: db::get_bool(row, "enrolled")?,
        created_at: row.try_get("created_at").map_err(stored)?,
    })
}

/// Creates a person (a principal of kind `person`) in `uow`; `409 conflict
/// username_taken` when the folded name exists.
pub async fn create(
    uow: &mut UnitOfWork,
    username: &Username,
    role: Role,
) -> Result<Uuid, IdentityError> {
    let now = uow.now_ms();
    let id = db::new_id(now)?;
    sqlx::query("INSERT INTO principals (id, kind, label, created_at) VALUES ($1, $2, NULL, $3)")
        .bind(db::id_text(&id))
        .bind(PrincipalKind::Person.as_str())
        .bind(now)
        .execute(uow.conn())
        .await
        .map_err(DbError::from)?;
    let inserted = sqlx::query(
        "INSERT INTO persons (principal_id, username, role, status, password_hash, created_at, updated_at) \
         VALUES ($1, $2, $3, $4, NULL, $5, $5)",
    )
    .bind(db::id_text(&id))
    .bind(username.as_str())
    .bind(role.as_str())
    .bind(PersonStatus::Active.as_str())
    .bind(now)
    .execute(uow.conn())
    .await
    .map_err(DbError::from);
    match inserted {
        Ok(_) => Ok(id),
        Err(DbError::Conflict(_)) => Err(IdentityError::Conflict(ConflictReason::UsernameTaken)),
        Err(other) => Err(other.into()),
    }
}

/// The person with this username.
pub async fn find_by_username(
    conn: &mut AnyConnection,
    username: &Username,
) -> Result<Option<Person>, IdentityError> {
    let row = sqlx::query(&format!(
        "SELECT {PERSON_COLUMNS} FROM persons p WHERE p.username = $1"
    ))
    .bind(username.as_str())
    .fetch_optional(conn)
    .await
    .map_err(DbError::from)?;
    row.as_ref().map(decode).transpose()
}

/// The person with this ID.
pub async fn get(conn: &mut AnyConnection, id: Uuid) -> Result<Option<Person>, IdentityError> {
    let row = sqlx::query(&format!(
        "SELECT {PERSON_COLUMNS} FROM persons p WHERE p.principal_id = $1"
    ))
    .bind(db::id_text(&id))
    .fetch_optional(conn)
    .await
    .map_err(DbError::from)?;
    row.as_ref().map(decode).transpose()
}

/// Every person, oldest first.
pub async fn list(conn: &mut AnyConnection) -> Result<Vec<Person>, IdentityError> {
    let rows = sqlx::query(&format!(
        "SELECT {PERSON_COLUMNS} FROM persons p ORDER BY p.principal_id"
    ))
    .fetch_all(conn)
    .await
    .map_err(DbError::from)?;
    rows.iter().map(decode).collect()
}

/// Whether an owner exists who is not deleted (`admin bootstrap` refuses then).
pub async fn owner_exists(conn: &mut AnyConnection) -> Result<bool, IdentityError> {
    let count: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM persons WHERE role = 'owner' AND status <> 'deleted'",
    )
    .fetch_one(conn)
    .await
    .map_err(DbError::from)?;
    Ok(count > 0)
}

/// Sets the status of a person; whether the row changed.
pub async fn set_status(
    uow: &mut UnitOfWork,
    id: Uuid,
    status: PersonStatus,
) -> Result<bool, IdentityError> {
    let now = uow.now_ms();
    let done = sqlx::query(
        "UPDATE persons SET status = $1, updated_at = $2 WHERE principal_id = $3 AND status <> $1",
    )
    .bind(status.as_str())
    .bind(now)
    .bind(db::id_text(&id))
    .execute(uow.conn())
    .await
    .map_err(DbError::from)?;
    Ok(done.rows_affected() == 1)
}

/// The stored password hash (PHC string) of a person, if one is set.
pub(crate) async fn password_hash(
    conn: &mut AnyConnection,
    id: Uuid,
) -> Result<Option<String>, IdentityError> {
    let hash: Option<Option<String>> =
        sqlx::query_scalar("SELECT password_hash FROM persons WHERE principal_id = $1")
            .bind(db::id_text(&id))
            .fetch_optional(conn)
            .await
            .map_err(DbError::from)?;
    Ok(hash.flatten())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_username_rule() {
        assert_eq!(Username::parse("Alice").unwrap().as_str(), "alice");
        assert_eq!(Username::parse("a").unwrap().as_str(), "a");
        assert_eq!(
            Username::parse("bob.smith_2-x").unwrap().as_str(),
            "bob.smith_2-x"
        );
        assert!(Username::parse(&"a".repeat(32)).is_some());
        for bad in [
            "",
            "1alice",
            "_alice",
            "al ice",
            "al:ice",
            "al@ice",
            "al/ice",
            "älice",
            "alice\n",
            &"a".repeat(33),
        ] {
            assert!(Username::parse(bad).is_none(), "{bad:?}");
        }
    }
}
