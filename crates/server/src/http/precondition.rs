//! Versions of mutable resources as `ETag`, and `If-Match` on updates (DESIGN
//! 3.4): a resource with a `version` column answers with `ETag: "<version>"`;
//! an update must send `If-Match` with that value — missing: `428
//! precondition_required`, stale or malformed: `412 precondition_failed`.

use axum::http::{HeaderMap, HeaderValue, header};

use crate::hosts::IfMatchRefusal;

/// The `ETag` of a resource version (a strong entity tag).
pub fn etag(version: i64) -> HeaderValue {
    // Quotes, digits and a minus sign always form a valid header value.
    HeaderValue::try_from(format!("\"{version}\"")).unwrap_or(HeaderValue::from_static("\"\""))
}

/// Checks `If-Match` against the current version. `*` is not accepted: an
/// update must name the version it was built on.
pub fn check_if_match(headers: &HeaderMap, current_version: i64) -> Result<(), IfMatchRefusal> {
    let mut values = headers.get_all(header::IF_MATCH).iter();
    let Some(value) = values.next() else {
        return Err(IfMatchRefusal::Missing);
    };
    if values.next().is_some() {
        return Err(IfMatchRefusal::Stale);
    }
    let Some(version) = parse_entity_tag(value) else {
        return Err(IfMatchRefusal::Stale);
    };
    if version == current_version {
        Ok(())
    } else {
        Err(IfMatchRefusal::Stale)
    }
}

/// `"<digits>"` → the number; weak tags (`W/`), lists and anything else → None.
fn parse_entity_tag(value: &HeaderValue) -> Option<i64> {
    let text = value.to_str().ok()?;
    let inner = text.strip_prefix('"')?.strip_suffix('"')?;
    if inner.is_empty() || !inner.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    inner.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(values: &[&str]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for v in values {
            map.append(header::IF_MATCH, HeaderValue::from_str(v).unwrap());
        }
        map
    }

    #[test]
    fn etag_is_the_quoted_version() {
        assert_eq!(etag(7), "\"7\"");
    }

    #[test]
    fn if_match_rules() {
        assert!(check_if_match(&headers(&["\"7\""]), 7).is_ok());
        let code = |h: &[&str]| {
            crate::http::ApiError::from(check_if_match(&headers(h), 7).unwrap_err()).code()
        };
        use crate::http::ProblemCode;
        assert_eq!(code(&[]), ProblemCode::PreconditionRequired);
        for stale in [
            "\"6\"",
            "W/\"7\"",
            "*",
            "7",
            "\"7\", \"8\"",
            "\"\"",
            "\"-7\"",
            "\"7a\"",
        ] {
            assert_eq!(code(&[stale]), ProblemCode::PreconditionFailed, "{stale}");
        }
        assert_eq!(code(&["\"7\"", "\"7\""]), ProblemCode::PreconditionFailed);
    }
}
