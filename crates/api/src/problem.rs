//! The body of every refusal of the API (RFC 9457, `application/problem+json`;
//! DESIGN 3.4): the server writes it for each problem code, a client reads
//! it. `code` is one of the server's problem codes; the OpenAPI document
//! names their closed list (the server supplies it, as for the other codes).

use serde::{Deserialize, Serialize};

/// An error of the API (RFC 9457, `application/problem+json`; D-18). Only typed
/// values: the internal cause of a failure stays in the server log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Problem {
    /// Always `about:blank`.
    // A client reads a problem without `type`, `title` or `status` too: it
    // has the HTTP status and never shows the title (the server always sends
    // all three).
    #[serde(rename = "type", default)]
    #[cfg_attr(feature = "openapi", schema(example = "about:blank", required = true))]
    pub kind: String,
    /// The status text (`Bad Request`, ...).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub title: String,
    /// The HTTP status.
    #[serde(default)]
    #[cfg_attr(
        feature = "openapi",
        schema(minimum = 400, maximum = 599, required = true)
    )]
    pub status: u16,
    /// The problem code; each has one status.
    pub code: String,
    /// Refines `code` (e.g. `owner_required`, `username_taken`, `totp_invalid`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, required = false))]
    pub reason: Option<String>,
    /// `validation_failed`: where the request breaks a rule; absent when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "openapi", schema(required = false))]
    pub errors: Vec<FieldProblem>,
    /// `rate_limited`: seconds until a retry can succeed (also `Retry-After`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = u64, required = false))]
    pub retry_after: Option<u64>,
    /// The attempts left (fingerprint confirmation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = u32, required = false))]
    pub attempts_remaining: Option<u32>,
}

/// One finding of `errors[]`: a pointer, never the value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FieldProblem {
    /// RFC 6901 pointer into the body (`/username`), the query
    /// (`/query/<name>`) or the headers (`/headers/<name>`).
    #[cfg_attr(feature = "openapi", schema(example = "/username"))]
    pub pointer: String,
    /// The finding (`required`, `unknown_member`, `wrong_type`, `invalid`,
    /// `too_short`, ...).
    #[cfg_attr(feature = "openapi", schema(example = "required"))]
    pub code: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absent_members_stay_absent_and_type_is_the_member_name() {
        let problem = Problem {
            kind: "about:blank".into(),
            title: "Not Found".into(),
            status: 404,
            code: "not_found".into(),
            reason: None,
            errors: Vec::new(),
            retry_after: None,
            attempts_remaining: None,
        };
        let text = serde_json::to_string(&problem).expect("JSON");
        assert_eq!(
            text,
            r#"{"type":"about:blank","title":"Not Found","status":404,"code":"not_found"}"#
        );
        assert_eq!(
            serde_json::from_str::<Problem>(&text).expect("back"),
            problem
        );
    }
}
