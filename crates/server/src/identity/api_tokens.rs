//! API tokens for agents and apps (DESIGN 3.1): an owner creates an `agent` or
//! `app` principal and a token for it (`POST /api/v1/tokens`); the token —
//! `bothy_tk_` and 256 random bits, stored as the pepper's HMAC — is shown once
//! and authenticates API calls as that principal until an owner revokes it.
//! Tokens exist so that TM-T17 is real: every terminal action of such a
//! principal is refused (`403 forbidden`, `subject_kind_not_allowed`).
//!
//! The name of an agent or app: 1 to 64 characters, ASCII letters, digits, `.`,
//! `_` and `-`, starting with a letter or digit (a label for people, not unique).

use sqlx::any::AnyRow;
use sqlx::{AnyConnection, Row};
use uuid::Uuid;

use super::opaque::{OpaqueSecret, SecretKind};
use super::principal::{PersonPrincipal, ServicePrincipal};
use super::{IdentityError, PrincipalKind};
use crate::audit::{AuditAction, AuditDetails, AuditEntry, TargetKind};
use crate::clock::UnixMillis;
use crate::db::{self, Db, DbError};
use crate::pepper::Pepper;

/// The longest agent or app name.
pub const SERVICE_NAME_MAX_CHARS: usize = 64;

/// The name of an agent or app (module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceName(String);

impl ServiceName {
    /// The name, if it follows the rule.
    pub fn parse(text: &str) -> Option<ServiceName> {
        let mut chars = text.chars();
        let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphanumeric());
        let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
        (first_ok && rest_ok && text.len() <= SERVICE_NAME_MAX_CHARS)
            .then(|| ServiceName(text.to_owned()))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// For whom a token is created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenFor {
    /// A new agent or app principal with this name.
    New(PrincipalKind, ServiceName),
    /// An existing agent or app principal.
    Existing(Uuid),
}

/// A token just created: show [`CreatedToken::token`] once.
#[derive(Debug)]
pub struct CreatedToken {
    /// The token.
    pub token: OpaqueSecret,
    /// Its metadata.
    pub info: ApiToken,
}

/// An API token as the API lists it (never its value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiToken {
    /// The token's ID.
    pub id: Uuid,
    /// The agent or app.
    pub principal_id: Uuid,
    /// Agent or app.
    pub kind: PrincipalKind,
    /// The principal's name.
    pub name: String,
    /// The owner who created it.
    pub created_by: Uuid,
    /// When.
    pub created_at: UnixMillis,
    /// When it was revoked.
    pub revoked_at: Option<UnixMillis>,
}

const COLUMNS: &str =
    "t.id, t.principal_id, pr.kind, pr.label, t.created_by, t.created_at, t.revoked_at";

fn decode(row: &AnyRow) -> Result<ApiToken, IdentityError> {
    let stored = |_| IdentityError::Stored("api_tokens row");
    Ok(ApiToken {
        id: db::get_uuid(row, "id")?,
        principal_id: db::get_uuid(row, "principal_id")?,
        kind: PrincipalKind::parse(&row.try_get::<String, _>("kind").map_err(stored)?)
            .ok_or(IdentityError::Stored("principals.kind"))?,
        name: row.try_get("label").map_err(stored)?,
        created_by: db::get_uuid(row, "created_by")?,
        created_at: row.try_get("created_at").map_err(stored)?,
        revoked_at: row.try_get("revoked_at").map_err(stored)?,
    })
}

/// `POST /api/v1/tokens` (the caller checked that `actor` is an owner).
pub async fn create(
    db: &Db,
    pepper: &Pepper,
    now: UnixMillis,
    actor: &PersonPrincipal,
    target: TokenFor,
) -> Result<CreatedToken, IdentityError> {
    let mut uow = db.begin(now).await?;
    let (principal_id, new_principal) = match target {
        TokenFor::New(kind, name) => {
            if kind == PrincipalKind::Person {
                return Err(IdentityError::invalid("/kind", "not_allowed"));
            }
            let id = db::new_id(now)?;
            sqlx::query(
                "INSERT INTO principals (id, kind, label, created_at) VALUES ($1, $2, $3, $4)",
            )
            .bind(db::id_text(&id))
            .bind(kind.as_str())
            .bind(name.as_str())
            .bind(now)
            .execute(uow.conn())
            .await
            .map_err(DbError::from)?;
            (id, true)
        }
        TokenFor::Existing(id) => {
            let kind: Option<String> =
                sqlx::query_scalar("SELECT kind FROM principals WHERE id = $1")
                    .bind(db::id_text(&id))
                    .fetch_optional(uow.conn())
                    .await
                    .map_err(DbError::from)?;
            match kind.as_deref().and_then(PrincipalKind::parse) {
                Some(PrincipalKind::Agent | PrincipalKind::App) => (id, false),
                _ => return Err(IdentityError::invalid("/principal_id", "unknown_principal")),
            }
        }
    };
    let token = OpaqueSecret::generate(SecretKind::ApiToken)?;
    let token_id = db::new_id(now)?;
    sqlx::query(
        "INSERT INTO api_tokens (id, principal_id, token_hash, created_by, created_at, expires_at, revoked_at) \
         VALUES ($1, $2, $3, $4, $5, NULL, NULL)",
    )
    .bind(db::id_text(&token_id))
    .bind(db::id_text(&principal_id))
    .bind(token.hash(pepper))
    .bind(db::id_text(&actor.person_id))
    .bind(now)
    .execute(uow.conn())
    .await
    .map_err(DbError::from)?;
    let info = get(uow.conn(), token_id)
        .await?
        .ok_or(IdentityError::Stored("api_tokens row"))?;
    uow.audit(
        AuditEntry::allow(AuditAction::ApiTokenCreate, actor.actor())
            .target(TargetKind::ApiToken, token_id)
            .details(
                AuditDetails::new()
                    .id("principal_id", principal_id)
                    .code("principal_kind", info.kind)
                    .flag("new_principal", new_principal),
            ),
    );
    uow.commit().await?;
    Ok(CreatedToken { token, info })
}

/// The token with this ID.
pub async fn get(conn: &mut AnyConnection, id: Uuid) -> Result<Option<ApiToken>, IdentityError> {
    let row = sqlx::query(&format!(
        "SELECT {COLUMNS} FROM api_tokens t JOIN principals pr ON pr.id = t.principal_id WHERE t.id = $1"
    ))
    .bind(db::id_text(&id))
    .fetch_optional(conn)
    .await
    .map_err(DbError::from)?;
    row.as_ref().map(decode).transpose()
}

/// Every token, oldest first.
pub async fn list(conn: &mut AnyConnection) -> Result<Vec<ApiToken>, IdentityError> {
    let rows = sqlx::query(&format!(
        "SELECT {COLUMNS} FROM api_tokens t JOIN principals pr ON pr.id = t.principal_id ORDER BY t.id"
    ))
    .fetch_all(conn)
    .await
    .map_err(DbError::from)?;
    rows.iter().map(decode).collect()
}

/// `POST /api/v1/tokens/{id}/revoke` (owners). Whether it was live.
pub async fn revoke(
    db: &Db,
    now: UnixMillis,
    actor: &PersonPrincipal,
    token_id: Uuid,
) -> Result<bool, IdentityError> {
    let mut uow = db.begin(now).await?;
    let Some(token) = get(uow.conn(), token_id).await? else {
        return Err(IdentityError::NotFound);
    };
    let done =
        sqlx::query("UPDATE api_tokens SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL")
            .bind(now)
            .bind(db::id_text(&token_id))
            .execute(uow.conn())
            .await
            .map_err(DbError::from)?;
    let changed = done.rows_affected() == 1;
    uow.audit(
        AuditEntry::allow(AuditAction::ApiTokenRevoke, actor.actor())
            .target(TargetKind::ApiToken, token_id)
            .details(
                AuditDetails::new()
                    .id("principal_id", token.principal_id)
                    .flag("no_change", !changed),
            ),
    );
    uow.commit().await?;
    Ok(changed)
}

/// The agent or app of a live API token.
pub(crate) async fn authenticate(
    conn: &mut AnyConnection,
    pepper: &Pepper,
    token: &OpaqueSecret,
    now: UnixMillis,
) -> Result<Option<ServicePrincipal>, IdentityError> {
    let row = sqlx::query(
        "SELECT t.id, t.principal_id, pr.kind, pr.label FROM api_tokens t \
         JOIN principals pr ON pr.id = t.principal_id \
         WHERE t.token_hash = $1 AND t.revoked_at IS NULL \
           AND (t.expires_at IS NULL OR t.expires_at > $2) AND pr.kind IN ('agent', 'app')",
    )
    .bind(token.hash(pepper))
    .bind(now)
    .fetch_optional(conn)
    .await
    .map_err(DbError::from)?;
    let Some(row) = row else { return Ok(None) };
    let stored = |_| IdentityError::Stored("api_tokens row");
    Ok(Some(ServicePrincipal {
        principal_id: db::get_uuid(&row, "principal_id")?,
        kind: PrincipalKind::parse(&row.try_get::<String, _>("kind").map_err(stored)?)
            .ok_or(IdentityError::Stored("principals.kind"))?,
        name: row.try_get("label").map_err(stored)?,
        token_id: db::get_uuid(&row, "id")?,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_names() {
        assert!(ServiceName::parse("ci-bot").is_some());
        assert!(ServiceName::parse("Claude.Agent_2").is_some());
        assert!(ServiceName::parse(&"a".repeat(64)).is_some());
        for bad in ["", "-bot", "a b", "a/b", &"a".repeat(65)] {
            assert!(ServiceName::parse(bad).is_none(), "{bad:?}");
        }
    }
}
