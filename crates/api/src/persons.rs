//! The bodies of the person routes (owners; DESIGN 3.1):
//! `POST /api/v1/persons` (invite), `GET /api/v1/persons`,
//! `POST /api/v1/persons/{id}/disable`, `POST /api/v1/persons/{id}/enable`,
//! `POST /api/v1/persons/{id}/role`.
//!
//! A request's `role` is text: the server refuses an unknown one with
//! `/role` `invalid`, so a client passes on what was typed; the schema names
//! [`Role`].

use serde::{Deserialize, Serialize};

use crate::auth::debug_redacted;

/// The role of a person.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Role {
    // Administers the server.
    Owner,
    // Everyone else.
    Member,
}

impl Role {
    /// The wire text.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Owner => "owner",
            Role::Member => "member",
        }
    }
}

/// The status of a person; only `active` persons log in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum PersonStatus {
    // Logs in.
    Active,
    // Disabled by an owner.
    Disabled,
    // Gone.
    Deleted,
}

impl PersonStatus {
    /// The wire text.
    pub fn as_str(self) -> &'static str {
        match self {
            PersonStatus::Active => "active",
            PersonStatus::Disabled => "disabled",
            PersonStatus::Deleted => "deleted",
        }
    }
}

/// `POST /api/v1/persons/{id}/disable` (doc-only; the handler reads exactly
/// these members).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DisablePersonRequest {
    /// Why (1 to 500 characters; kept in the audit).
    pub reason: String,
    /// A fresh step-up of the caller's login session, consumed by the call.
    #[cfg_attr(feature = "openapi", schema(format = "uuid"))]
    pub step_up_id: String,
}

/// `200` of `POST /api/v1/persons/{id}/disable` (doc-only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DisabledPerson {
    /// The person, disabled.
    pub person: Person,
    /// Whether the status changed (false: disabled already).
    pub changed: bool,
    /// The login sessions this ended (`user_disabled`); their terminal
    /// sessions ended with them.
    pub sessions_ended: u64,
}

/// `POST /api/v1/persons/{id}/role` (doc-only; the handler reads exactly
/// these members).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SetRoleRequest {
    /// `owner` or `member`.
    #[cfg_attr(feature = "openapi", schema(value_type = Role))]
    pub role: String,
    /// Why (1 to 500 characters; kept in the audit).
    pub reason: String,
    /// A fresh step-up of the caller's login session, consumed by the change.
    #[cfg_attr(feature = "openapi", schema(format = "uuid"))]
    pub step_up_id: String,
}

/// `200` of `POST /api/v1/persons/{id}/role` (doc-only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RoleSet {
    /// The person, with the new role.
    pub person: Person,
    /// Whether the role changed (false: it was that role already).
    pub changed: bool,
    /// The terminal sessions the removed owner role ended (`access_revoked`).
    pub sessions_ended: u64,
}

/// `200` of `POST /api/v1/persons/{id}/enable` (doc-only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EnabledPerson {
    /// The person, active.
    pub person: Person,
    /// Whether the status changed (false: active already).
    pub changed: bool,
}

/// `POST /api/v1/persons` (doc-only; the handler reads exactly these members).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct InvitePersonRequest {
    /// 1 to 32 ASCII letters, digits, `.`, `_`, `-`, starting with a letter;
    /// folded to lower case (`400` `invalid_username` otherwise).
    #[cfg_attr(feature = "openapi", schema(example = "alice"))]
    pub username: String,
    /// `owner` or `member`.
    #[cfg_attr(feature = "openapi", schema(value_type = Role))]
    pub role: String,
}

/// `201` of `POST /api/v1/persons` (doc-only).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct InvitedPerson {
    /// The new person (not yet enrolled).
    pub person: Person,
    /// The one-time enrollment code `bothy_ec_...` (shown only now).
    pub enrollment_code: String,
    /// When the code expires (Unix ms).
    pub enrollment_expires_at: i64,
}

debug_redacted!(InvitedPerson { person, enrollment_expires_at } hide { enrollment_code });

/// `GET /api/v1/persons` (doc-only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PersonList {
    /// Every person.
    pub persons: Vec<Person>,
}

/// A person (doc-only; `persons::Person::to_json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Person {
    /// The person's principal ID.
    #[cfg_attr(feature = "openapi", schema(format = "uuid"))]
    pub id: String,
    /// The username (lower case).
    pub username: String,
    /// `owner` or `member`.
    pub role: Role,
    /// `active`, `disabled` or `deleted`.
    pub status: PersonStatus,
    /// Whether the person has a password and a confirmed TOTP secret.
    pub enrolled: bool,
    /// When the person was created (Unix ms).
    pub created_at: i64,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn codes_are_their_wire_text() {
        for role in [Role::Owner, Role::Member] {
            assert_eq!(serde_json::to_value(role).unwrap(), role.as_str());
        }
        for status in [
            PersonStatus::Active,
            PersonStatus::Disabled,
            PersonStatus::Deleted,
        ] {
            assert_eq!(serde_json::to_value(status).unwrap(), status.as_str());
        }
    }

    #[test]
    fn the_enrollment_code_stays_out_of_debug() {
        let invited = InvitedPerson {
            person: Person {
                id: "i".into(),
                username: "bob".into(),
                role: Role::Member,
                status: PersonStatus::Active,
                enrolled: false,
                created_at: 1,
            },
            enrollment_code: "canary-code-9".into(),
            enrollment_expires_at: 2,
        };
        assert!(!format!("{invited:?}").contains("canary-code-9"));
    }
}
