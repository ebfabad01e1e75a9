//! The bodies of the group routes (owners): `POST /api/v1/groups`,
//! `GET /api/v1/groups`, `POST /api/v1/groups/{id}/members`,
//! `POST /api/v1/groups/{id}/members/{person_id}/remove`.

use serde::{Deserialize, Serialize};

/// `POST /api/v1/groups` (doc-only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CreateGroupRequest {
    /// The name: the username rule (1 to 32 ASCII letters, digits, `.`, `_`,
    /// `-`, starting with a letter), folded to lower case, unique.
    #[cfg_attr(feature = "openapi", schema(example = "developers"))]
    pub name: String,
}

/// `POST /api/v1/groups/{id}/members` (doc-only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AddGroupMemberRequest {
    /// The person who joins.
    #[cfg_attr(feature = "openapi", schema(format = "uuid"))]
    pub person_id: String,
}

/// A group (doc-only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GroupView {
    /// The group's ID.
    #[cfg_attr(feature = "openapi", schema(format = "uuid"))]
    pub id: String,
    /// Its folded name.
    pub name: String,
    /// Its members' person IDs.
    pub members: Vec<String>,
}

/// `201` of `POST /api/v1/groups` (doc-only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GroupAnswer {
    /// The group.
    pub group: GroupView,
}

/// `GET /api/v1/groups` (doc-only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GroupList {
    /// By name.
    pub groups: Vec<GroupView>,
}

/// `200` of `POST /api/v1/groups/{id}/members` (doc-only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MemberAdded {
    /// The group now.
    pub group: GroupView,
    /// Whether the person was not a member before.
    pub added: bool,
}

/// `200` of `POST /api/v1/groups/{id}/members/{person_id}/remove` (doc-only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MemberRemoved {
    /// The group now.
    pub group: GroupView,
    /// Whether the person was a member.
    pub removed: bool,
    /// How many terminal sessions this ended.
    pub sessions_ended: u64,
}
