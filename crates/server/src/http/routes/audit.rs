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

use axum::Json;
use axum::extract::State;
use axum::http::Uri;
use bothy_api::audit::{AuditActor, AuditEntry, AuditPage, AuditTarget};
use utoipa::IntoParams;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::query::QueryParams;
use crate::audit::{
    self, AuditAction, AuditError, AuditFilter, AuditRecord, Decision, PageRequest,
};
use crate::db::{self, DbError};
use crate::http::api_doc::{Internal, Problem, Unauthenticated, Unavailable};
use crate::http::problem::PROBLEM_JSON;
use crate::http::{ApiError, ProblemCode};
use crate::identity::principal::Principal;
use crate::state::AppState;

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
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list))
}

/// The audit log, newest first, filtered and paged (owners).
///
/// Denials of this call are audited as `audit.read`.
#[utoipa::path(
    get,
    path = "/api/v1/audit",
    operation_id = "listAuditEntries",
    tag = "audit",
    params(AuditQuery),
    security(("bearer" = []), ("console_cookie" = [])),
    responses(
        (status = 200, description = "One page of entries.", body = AuditPage),
        (status = 400, description = "`validation_failed` at `/query/<name>`: \
            `unknown_parameter`, `duplicate_parameter`, `invalid_query` (at `/query`), \
            `invalid` (not a value of the parameter's list or form) or `out_of_range`.",
            body = Problem, content_type = PROBLEM_JSON),
        Unauthenticated,
        (status = 403, description = "`forbidden` reason `subject_kind_not_allowed` (an agent \
            or app) or `owner_required` (a member); both audited.", body = Problem,
            content_type = PROBLEM_JSON),
        Internal,
        Unavailable,
    )
)]
async fn list(
    State(state): State<AppState>,
    principal: Principal,
    uri: Uri,
) -> Result<Json<AuditPage>, ApiError> {
    let now = state.clock().now_ms();
    principal
        .require_owner_person(state.db(), now, AuditAction::AuditRead)
        .await?;
    let (filter, page) = parse(&uri)?;
    let found = audit::list(state.db(), &filter, page)
        .await
        .map_err(audit_error)?;
    Ok(Json(AuditPage {
        entries: found.entries.iter().map(entry).collect(),
        next: found.next.as_ref().map(db::id_text),
    }))
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

fn entry(record: &AuditRecord) -> AuditEntry {
    AuditEntry {
        id: db::id_text(&record.id),
        at: record.at,
        action: record.action.as_str().to_owned(),
        decision: record.decision.as_str().to_owned(),
        actor: AuditActor {
            kind: record.actor.kind().as_str().to_owned(),
            id: record.actor.id().as_ref().map(db::id_text),
        },
        target: record.target.map(|target| AuditTarget {
            kind: target.kind.as_str().to_owned(),
            id: db::id_text(&target.id),
        }),
        details: record.details.clone(),
    }
}

fn audit_error(error: AuditError) -> ApiError {
    match error {
        AuditError::Db(DbError::Busy(source)) => {
            ApiError::new(ProblemCode::Unavailable).caused_by(source)
        }
        other => ApiError::internal(other),
    }
}

/// The query parameters of `GET /api/v1/audit` (doc-only: [`PARAMETERS`] is
/// what the handler accepts; each at most once, nothing else).
#[derive(Debug, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AuditQuery {
    /// Only entries of this action.
    #[param(required = false)]
    pub action: AuditAction,
    /// Only allowed or only denied actions.
    #[param(required = false)]
    pub decision: Decision,
    /// Only entries of this actor.
    #[param(required = false, format = "uuid")]
    pub actor_id: String,
    /// Only entries about this target.
    #[param(required = false, format = "uuid")]
    pub target_id: String,
    /// Only entries at or after this time (Unix ms).
    #[param(required = false, minimum = 0)]
    pub from: i64,
    /// Only entries before this time (Unix ms).
    #[param(required = false, minimum = 0)]
    pub until: i64,
    /// The cursor: `next` of the previous page.
    #[param(required = false, format = "uuid")]
    pub before: String,
    /// The page size, 1 to 500; default 100.
    #[param(required = false, minimum = 1, maximum = 500)]
    pub limit: u32,
}
