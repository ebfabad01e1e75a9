//! The bodies of the grant routes (spec 8.1, 8.3, 7.3):
//! `POST /api/v1/grants`, `GET /api/v1/grants`,
//! `POST /api/v1/grants/{id}/revoke`.
//!
//! `recipient_kind` and `hint` are closed lists of the server's enums; their
//! schema (`enum`) is supplied by the server (`api_doc`), the members here are
//! strings.

use serde::{Deserialize, Serialize};

/// `POST /api/v1/grants` (doc-only; the handler reads exactly these members).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CreateGrantRequest {
    /// The host.
    #[cfg_attr(feature = "openapi", schema(format = "uuid"))]
    pub host_id: String,
    /// `person` or `group`.
    pub recipient_kind: String,
    /// The person's or the group's ID.
    #[cfg_attr(feature = "openapi", schema(format = "uuid"))]
    pub recipient_id: String,
    /// When the grant expires (Unix ms, exclusive); after now. Without it, never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = i64))]
    pub expires_at: Option<i64>,
}

/// `201` of `POST /api/v1/grants` (doc-only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CreatedGrant {
    /// The grant.
    pub grant: Grant,
    /// Whether it takes effect.
    pub preview: GrantPreview,
}

/// `200` of `POST /api/v1/grants/{id}/revoke` (doc-only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RevokedGrant {
    /// The grant, revoked.
    pub grant: Grant,
    /// How many terminal sessions this ended.
    pub sessions_ended: u64,
}

/// `GET /api/v1/grants` (doc-only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GrantList {
    /// Oldest first.
    pub grants: Vec<Grant>,
}

/// A grant (doc-only; `permissions::grants::Grant::to_json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Grant {
    /// The grant's ID.
    #[cfg_attr(feature = "openapi", schema(format = "uuid"))]
    pub id: String,
    /// Always `host`.
    #[cfg_attr(feature = "openapi", schema(example = "host"))]
    pub target_kind: String,
    /// The host.
    #[cfg_attr(feature = "openapi", schema(format = "uuid"))]
    pub host_id: String,
    /// Always `terminal`.
    #[cfg_attr(feature = "openapi", schema(example = "terminal"))]
    pub capability: String,
    /// `person` or `group`.
    pub recipient_kind: String,
    /// The person's or the group's ID.
    #[cfg_attr(feature = "openapi", schema(format = "uuid"))]
    pub recipient_id: String,
    /// The owner who created it.
    #[cfg_attr(feature = "openapi", schema(format = "uuid"))]
    pub created_by: String,
    /// When (Unix ms).
    pub created_at: i64,
    /// When it expires (Unix ms, exclusive); absent: never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = i64))]
    pub expires_at: Option<i64>,
    /// The owner who revoked it; absent while it is not revoked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = "uuid"))]
    pub revoked_by: Option<String>,
    /// When it was revoked (Unix ms); absent while it is not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = i64))]
    pub revoked_at: Option<i64>,
    /// Whether it holds now: not revoked, not expired.
    pub valid: bool,
}

/// The preview of a new grant (doc-only; `permissions::grants::Preview`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GrantPreview {
    /// Whether SR10 lets it give a terminal: to its person, or to at least one
    /// current member of its group.
    pub effective: bool,
    /// `terminal_not_effective` when `effective` is false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub hint: Option<String>,
    /// A group grant: each current member and whether it is effective for them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<GrantPreviewMember>))]
    pub members: Option<Vec<GrantPreviewMember>>,
}

/// One member in the preview of a group grant (doc-only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GrantPreviewMember {
    /// The member.
    #[cfg_attr(feature = "openapi", schema(format = "uuid"))]
    pub person_id: String,
    /// Whether the grant gives them a terminal (SR10).
    pub effective: bool,
}
