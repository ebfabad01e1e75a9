//! The body of `GET /api/v1/audit` (spec 24 section 10.1): one page of entries,
//! newest first.
//!
//! `action`, `decision` and the kinds are closed lists of the server's enums;
//! the members here are strings, and the server's document names its own
//! schemas (`AuditAction`, `Decision`, `ActorKind`, `TargetKind`) for them.
//! `details` stays a JSON object: its members depend on the action.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `GET /api/v1/audit` (doc-only).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AuditPage {
    /// Newest first.
    pub entries: Vec<AuditEntry>,
    /// The cursor of the next page (pass it as `before`); absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = "uuid"))]
    pub next: Option<String>,
}

/// One audit entry (spec 24 section 10.1; doc-only).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AuditEntry {
    /// The entry's ID.
    #[cfg_attr(feature = "openapi", schema(format = "uuid"))]
    pub id: String,
    /// When (Unix ms).
    pub at: i64,
    /// What was done.
    pub action: String,
    /// `allow` or `deny`.
    pub decision: String,
    /// Who acted.
    pub actor: AuditActor,
    /// What it was done to; absent when nothing in particular.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = AuditTarget))]
    pub target: Option<AuditTarget>,
    /// Typed details of the action (codes, IDs, counts, flags; never content).
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub details: Value,
}

/// The actor of an audit entry (doc-only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AuditActor {
    /// The actor's kind.
    pub kind: String,
    /// The actor's ID; absent for `system`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = "uuid"))]
    pub id: Option<String>,
}

/// The target of an audit entry (doc-only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AuditTarget {
    /// The target's kind.
    pub kind: String,
    /// The target's ID.
    #[cfg_attr(feature = "openapi", schema(format = "uuid"))]
    pub id: String,
}
