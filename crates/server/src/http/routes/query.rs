//! Query parameters, read as strictly as the JSON bodies ([`super::body`]):
//! each known parameter at most once, an unknown one refused, values checked by
//! the route. Every refusal is `400 validation_failed` with `errors[] {pointer,
//! code}`, the pointer `/query/<name>` (RFC 6901 escaped), never the value.
//! Codes: `invalid_query`, `unknown_parameter`, `duplicate_parameter`, and the
//! routes' own (`invalid`, `out_of_range`).

use axum::extract::Query;
use axum::http::Uri;
use uuid::Uuid;

use crate::http::{ApiError, ProblemCode};

/// The decoded parameters of one request.
#[derive(Debug)]
pub struct QueryParams {
    pairs: Vec<(String, String)>,
}

/// A 400 for the parameter `name`.
pub fn invalid(name: &str, code: &'static str) -> ApiError {
    ApiError::new(ProblemCode::ValidationFailed).with_error(pointer(name), code)
}

fn pointer(name: &str) -> String {
    format!("/query/{}", name.replace('~', "~0").replace('/', "~1"))
}

impl QueryParams {
    /// Decodes the query of `uri` (`application/x-www-form-urlencoded`) and
    /// refuses unknown and repeated parameters.
    pub fn parse(uri: &Uri, known: &[&str]) -> Result<QueryParams, ApiError> {
        let Query(pairs) = Query::<Vec<(String, String)>>::try_from_uri(uri).map_err(|_| {
            ApiError::new(ProblemCode::ValidationFailed).with_error("/query", "invalid_query")
        })?;
        for (index, (name, _)) in pairs.iter().enumerate() {
            if !known.contains(&name.as_str()) {
                return Err(invalid(name, "unknown_parameter"));
            }
            if pairs[..index].iter().any(|(earlier, _)| earlier == name) {
                return Err(invalid(name, "duplicate_parameter"));
            }
        }
        Ok(QueryParams { pairs })
    }

    /// The value of `name`, if present.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }

    /// `name` as a non-negative integer in `min..=max` (decimal digits only: no
    /// sign, no spaces, no exponent); `invalid` or `out_of_range` otherwise.
    pub fn integer(&self, name: &str, min: i64, max: i64) -> Result<Option<i64>, ApiError> {
        let Some(text) = self.get(name) else {
            return Ok(None);
        };
        if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
            return Err(invalid(name, "invalid"));
        }
        // Only digits: a parse error can only be an overflow.
        let value: i64 = text.parse().map_err(|_| invalid(name, "out_of_range"))?;
        if value < min || value > max {
            return Err(invalid(name, "out_of_range"));
        }
        Ok(Some(value))
    }

    /// `name` as a UUID (hyphenated form); `invalid` otherwise.
    pub fn uuid(&self, name: &str) -> Result<Option<Uuid>, ApiError> {
        self.get(name)
            .map(|text| bothy_proto::ids::parse_uuid(text).map_err(|_| invalid(name, "invalid")))
            .transpose()
    }

    /// `name` parsed by `parse` (a closed list of codes); `invalid` otherwise.
    pub fn code<T>(
        &self,
        name: &str,
        parse: impl Fn(&str) -> Option<T>,
    ) -> Result<Option<T>, ApiError> {
        self.get(name)
            .map(|text| parse(text).ok_or_else(|| invalid(name, "invalid")))
            .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(query: &str, known: &[&str]) -> Result<QueryParams, ApiError> {
        let uri: Uri = format!("/x?{query}").parse().unwrap_or_default();
        QueryParams::parse(&uri, known)
    }

    fn refusal(result: Result<impl std::fmt::Debug, ApiError>) -> serde_json::Value {
        match result {
            Err(error) => error.body()["errors"][0].clone(),
            Ok(value) => panic!("accepted: {value:?}"),
        }
    }

    #[test]
    fn strict_names_and_values() {
        let known = ["after", "limit"];
        assert_eq!(
            refusal(params("after=1&after=2", &known)),
            serde_json::json!({"pointer": "/query/after", "code": "duplicate_parameter"})
        );
        assert_eq!(
            refusal(params("a/b~c=1", &known)),
            serde_json::json!({"pointer": "/query/a~1b~0c", "code": "unknown_parameter"})
        );
        let ok = params("after=17&limit=", &known).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(ok.integer("after", 0, i64::MAX).ok().flatten(), Some(17));
        assert_eq!(
            refusal(ok.integer("limit", 1, 500))["code"],
            serde_json::json!("invalid")
        );
        for bad in ["-1", "+1", "1.5", " 1", "1e3", "x"] {
            let query = format!("after={}", bad.replace('+', "%2B").replace(' ', "%20"));
            let parsed = params(&query, &known).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(
                refusal(parsed.integer("after", 0, i64::MAX))["code"],
                "invalid",
                "{bad}"
            );
        }
        let big = params("after=99999999999999999999", &known).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            refusal(big.integer("after", 0, i64::MAX))["code"],
            "out_of_range"
        );
        let zero = params("limit=0", &known).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            refusal(zero.integer("limit", 1, 500))["code"],
            "out_of_range"
        );
    }
}
