//! The bodies of the API token routes (owners; DESIGN 3.1):
//! `POST /api/v1/tokens`, `GET /api/v1/tokens`
//! (`POST /api/v1/tokens/{id}/revoke` answers `204` without a body).
//!
//! A request's `kind` is text: the server refuses one that is not `agent` or
//! `app` with `/kind` `not_allowed`; the schema names [`ServiceKind`].

use serde::{Deserialize, Serialize};

use crate::auth::debug_redacted;

/// The kind of a principal with API tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum ServiceKind {
    // An agent.
    Agent,
    // An app.
    App,
}

impl ServiceKind {
    /// The wire text.
    pub fn as_str(self) -> &'static str {
        match self {
            ServiceKind::Agent => "agent",
            ServiceKind::App => "app",
        }
    }
}

/// `POST /api/v1/tokens` (doc-only; the handler reads exactly these members).
/// Either `kind` and `name` (a new principal) or `principal_id` alone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CreateApiTokenRequest {
    /// `agent` or `app`: the kind of the new principal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = ServiceKind))]
    pub kind: Option<String>,
    /// The new principal's name: 1 to 64 ASCII letters, digits, `.`, `_`, `-`,
    /// starting with a letter or digit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, example = "ci-runner"))]
    pub name: Option<String>,
    /// An existing agent or app.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = "uuid"))]
    pub principal_id: Option<String>,
}

/// `201` of `POST /api/v1/tokens` (doc-only).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CreatedApiToken {
    /// The API token `bothy_tk_...` (shown only now); use it as `Bearer`.
    pub token: String,
    /// The token's ID.
    #[cfg_attr(feature = "openapi", schema(format = "uuid"))]
    pub token_id: String,
    /// The agent or app.
    #[cfg_attr(feature = "openapi", schema(format = "uuid"))]
    pub principal_id: String,
    /// `agent` or `app`.
    pub kind: ServiceKind,
    /// The principal's name.
    pub name: String,
    /// When the token was created (Unix ms).
    pub created_at: i64,
}

debug_redacted!(CreatedApiToken { token_id, principal_id, kind, name, created_at } hide { token });

/// `GET /api/v1/tokens` (doc-only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ApiTokenList {
    /// Oldest first.
    pub tokens: Vec<ApiToken>,
}

/// An API token without its value (doc-only; `api_tokens::ApiToken::to_json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ApiToken {
    /// The token's ID.
    #[cfg_attr(feature = "openapi", schema(format = "uuid"))]
    pub id: String,
    /// The agent or app.
    #[cfg_attr(feature = "openapi", schema(format = "uuid"))]
    pub principal_id: String,
    /// `agent` or `app`.
    pub kind: ServiceKind,
    /// The principal's name.
    pub name: String,
    /// The owner who created it.
    #[cfg_attr(feature = "openapi", schema(format = "uuid"))]
    pub created_by: String,
    /// When it was created (Unix ms).
    pub created_at: i64,
    /// When it was revoked (Unix ms); `null` while it is not.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub revoked_at: Option<i64>,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_request_names_only_what_it_has_and_the_token_stays_out_of_debug() {
        let request = CreateApiTokenRequest {
            kind: None,
            name: None,
            principal_id: Some("p".into()),
        };
        assert_eq!(
            serde_json::to_string(&request).unwrap(),
            r#"{"principal_id":"p"}"#
        );
        for kind in [ServiceKind::Agent, ServiceKind::App] {
            assert_eq!(serde_json::to_value(kind).unwrap(), kind.as_str());
        }
        let created = CreatedApiToken {
            token: "canary-token-5".into(),
            token_id: "t".into(),
            principal_id: "p".into(),
            kind: ServiceKind::App,
            name: "n".into(),
            created_at: 1,
        };
        assert!(!format!("{created:?}").contains("canary-token-5"));
    }
}
