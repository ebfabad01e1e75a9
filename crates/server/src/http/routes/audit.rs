//! `GET /api/v1/audit`: the audit log (spec 24 section 10.1; DESIGN 3.3), for
//! owners; a member gets `403 forbidden` (`owner_required`), an agent or app
//! `403 forbidden` (`subject_kind_not_allowed`), both audited as `audit.read`
//! denials.
//!
//! | Query parameter | Value |
//! |---|---|
//! | `action` | an action name of [`AuditAction`] (`host.manage`, `auth.login`, ...) |
//! | `decision` | `allow` or `deny` |
//! | `actor_id`, `target_id` | UUIDs |
//! | `from`, `until` | Unix milliseconds: `from <= at < until` |
//! | `before` | the cursor: the `next` of the previous page (an audit entry's ID) |
//! | `limit` | 1..=500, default 100 |
//!
//! Anything else, a repeated parameter or a value outside its list is `400
//! validation_failed` with the pointer `/query/<name>` ([`super::query`]).
//!
//! Response: `{"entries": [{id, at, action, decision, actor: {kind, id?},
//! target?: {kind, id}, details}], "next"?: <cursor>}`, newest first; `next` is
//! absent on the last page.

use axum::extract::State;
use axum::http::Uri;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{Map, Value, json};

use super::query::QueryParams;
use crate::audit::{
    self, AuditAction, AuditError, AuditFilter, AuditRecord, Decision, PageRequest,
};
use crate::db::{self, DbError};
use crate::http::{ApiError, AppState, ProblemCode};
use crate::identity::principal::Principal;

/// The page size without `limit`.
pub const DEFAULT_LIMIT: u32 = 100;

const PARAMETERS: &[&str] = &[
    "action",
    "decision",
    "actor_id",
    "target_id",
    "from",
    "until",
    "before",
    "limit",
];

/// The routes of this file.
pub fn router() -> Router<AppState> {
    Router::new().route("/api/v1/audit", get(list))
}

async fn list(
    State(state): State<AppState>,
    principal: Principal,
    uri: Uri,
) -> Result<Json<Value>, ApiError> {
    let now = state.clock().now_ms();
    let actor = principal
        .require_person(state.db(), now, AuditAction::AuditRead)
        .await?;
    actor
        .require_owner(state.db(), now, AuditAction::AuditRead)
        .await?;
    let (filter, page) = parse(&uri)?;
    let found = audit::list(state.db(), &filter, page)
        .await
        .map_err(audit_error)?;
    let entries: Vec<Value> = found.entries.iter().map(entry_json).collect();
    let mut body = Map::new();
    body.insert("entries".into(), Value::Array(entries));
    if let Some(next) = found.next {
        body.insert("next".into(), Value::from(db::id_text(&next)));
    }
    Ok(Json(Value::Object(body)))
}

/// The filter and page of a request.
fn parse(uri: &Uri) -> Result<(AuditFilter, PageRequest), ApiError> {
    let query = QueryParams::parse(uri, PARAMETERS)?;
    let filter = AuditFilter {
        action: query.code("action", AuditAction::parse)?,
        decision: query.code("decision", Decision::parse)?,
        actor_id: query.uuid("actor_id")?,
        target_id: query.uuid("target_id")?,
        from_ms: query.integer("from", 0, i64::MAX)?,
        until_ms: query.integer("until", 0, i64::MAX)?,
    };
    let limit = match query.integer("limit", 1, i64::from(audit::PAGE_MAX))? {
        // In 1..=PAGE_MAX, so it fits.
        Some(limit) => u32::try_from(limit).unwrap_or(audit::PAGE_MAX),
        None => DEFAULT_LIMIT,
    };
    let page = PageRequest {
        before: query.uuid("before")?,
        limit,
    };
    Ok((filter, page))
}

fn entry_json(record: &AuditRecord) -> Value {
    let mut actor = Map::new();
    actor.insert("kind".into(), Value::from(record.actor.kind().as_str()));
    if let Some(id) = record.actor.id() {
        actor.insert("id".into(), Value::from(db::id_text(&id)));
    }
    let mut entry = Map::new();
    entry.insert("id".into(), Value::from(db::id_text(&record.id)));
    entry.insert("at".into(), Value::from(record.at));
    entry.insert("action".into(), Value::from(record.action.as_str()));
    entry.insert("decision".into(), Value::from(record.decision.as_str()));
    entry.insert("actor".into(), Value::Object(actor));
    if let Some(target) = record.target {
        entry.insert(
            "target".into(),
            json!({"kind": target.kind.as_str(), "id": db::id_text(&target.id)}),
        );
    }
    entry.insert("details".into(), record.details.clone());
    Value::Object(entry)
}

fn audit_error(error: AuditError) -> ApiError {
    match error {
        AuditError::Db(DbError::Busy(source)) => {
            ApiError::new(ProblemCode::Unavailable).caused_by(source)
        }
        other => ApiError::internal(other),
    }
}
