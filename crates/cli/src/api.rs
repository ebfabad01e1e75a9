//! The REST calls of the client (DESIGN §3.4) and the server's problems
//! (`application/problem+json` with `code`, `reason`, `errors[]`,
//! `attempts_remaining`, `retry_after`).

use bothy_net::{Connector, Method, ServerUrl};
use serde_json::Value;

use crate::error::ClientError;

/// A refusal of the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The HTTP status.
    pub status: u16,
    /// The problem code (section 13 and DESIGN §3.4), e.g. `step_up_required`.
    pub code: String,
    /// The `reason`, where the server names one.
    pub reason: Option<String>,
    /// The codes of `errors[]` with their pointers.
    pub errors: Vec<(String, String)>,
    /// Seconds to wait (`retry_after`), for rate limits.
    pub retry_after: Option<u64>,
    /// The server's title.
    pub title: Option<String>,
}

impl Problem {
    /// Reads a problem body; a body that is not one becomes `http_<status>`.
    pub fn from_body(status: u16, body: &[u8]) -> Problem {
        let value: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        let text = |key: &str| value.get(key).and_then(Value::as_str).map(str::to_owned);
        let errors = value
            .get("errors")
            .and_then(Value::as_array)
            .map(|errors| {
                errors
                    .iter()
                    .map(|e| {
                        (
                            e.get("pointer")
                                .and_then(Value::as_str)
                                .unwrap_or("")
                                .to_owned(),
                            e.get("code")
                                .and_then(Value::as_str)
                                .unwrap_or("")
                                .to_owned(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        Problem {
            status,
            code: text("code").unwrap_or_else(|| format!("http_{status}")),
            reason: text("reason"),
            errors,
            retry_after: value.get("retry_after").and_then(Value::as_u64),
            title: text("title"),
        }
    }

    /// The one-line message: the title, the reason and the field codes.
    pub fn summary(&self) -> String {
        let mut line = self
            .title
            .clone()
            .unwrap_or_else(|| format!("the server refused (HTTP {})", self.status));
        if let Some(reason) = &self.reason {
            line.push_str(&format!(" (reason: {reason})"));
        }
        for (pointer, code) in &self.errors {
            line.push_str(&format!(" [{pointer}: {code}]"));
        }
        line
    }

    /// What to do about it, per code and reason (section 13, DESIGN §3.1).
    pub fn hint(&self) -> String {
        match (self.code.as_str(), self.reason.as_deref()) {
            ("unauthenticated", _) => {
                "log in again: bothy login (username, password and TOTP code must all match)".into()
            }
            ("step_up_required", Some("totp_invalid")) => {
                "the TOTP code was wrong or used already: wait for the next code and try again"
                    .into()
            }
            ("step_up_required", _) => "a fresh step-up is needed: run the command again".into(),
            ("terminal_denied", Some("no_session_user")) => {
                "an owner must assign you a session user on this host (bothy host assign)".into()
            }
            ("terminal_denied", Some("session_limit")) => {
                "close a session first: bothy sessions, bothy close SESSION".into()
            }
            ("terminal_denied", Some("profile_unknown")) => {
                "the host does not offer this profile: see bothy hosts".into()
            }
            ("terminal_denied", Some("not_host_assignee")) => {
                "this host is assigned to another person".into()
            }
            ("terminal_denied", Some("i6_holder_only")) => {
                "this host's LLM login is personal to another person (I6)".into()
            }
            ("terminal_denied", Some("server_host_owner_only")) => {
                "on the server's own host only owners open terminals".into()
            }
            ("terminal_denied", _) => "a rule of the host blocks this".into(),
            ("host_unavailable", _) => {
                "the host is not active or its host service is not connected; try again later"
                    .into()
            }
            ("forbidden", Some("device_revoked")) => {
                "this device was revoked: bothy logout, then bothy login (a new key)".into()
            }
            ("forbidden", _) => "you lack the permission for this".into(),
            ("not_found", _) => "no such thing, or you may not see it".into(),
            ("rate_limited", _) => match self.retry_after {
                Some(seconds) => format!("too many attempts: wait {seconds} s"),
                None => "too many attempts: wait a little".into(),
            },
            ("invalid_state_transition", _) => "the session is closed already".into(),
            ("validation_failed", _) => "check the values named above".into(),
            ("fingerprint_mismatch", _) => {
                "type the first characters shown by bothy-host pair exactly".into()
            }
            ("conflict", Some("last_owner")) => {
                "the last active owner stays: make another person an owner first".into()
            }
            ("conflict", Some("session_user_taken")) => {
                "a session user belongs to one person for good (T12): assign another one".into()
            }
            ("conflict", _) => {
                "the host's state changed meanwhile: look again (bothy hosts)".into()
            }
            ("i6_violation", _) => {
                "the host's LLM login is personal: only its holder may have terminal there".into()
            }
            ("precondition_failed", _) => {
                "the host changed meanwhile: run the command again".into()
            }
            ("unavailable", _) => "the server is busy or its database is down; retry".into(),
            _ => "see the server's documentation for this code".into(),
        }
    }
}

/// The REST API of one server, with or without a login.
#[derive(Debug, Clone)]
pub struct Api {
    server: ServerUrl,
    connector: Connector,
    token: Option<String>,
}

impl Api {
    /// An API client for `server`; `token` authenticates the calls.
    pub fn new(server: ServerUrl, token: Option<String>) -> Result<Api, ClientError> {
        Ok(Api {
            server,
            connector: Connector::from_env()?,
            token,
        })
    }

    /// The server.
    pub fn server(&self) -> &ServerUrl {
        &self.server
    }

    /// The TLS connector (for the device stream).
    pub fn connector(&self) -> &Connector {
        &self.connector
    }

    /// `GET path`.
    pub async fn get(&self, path: &str) -> Result<Value, ClientError> {
        Ok(self.call(Method::GET, path, &[], None).await?.0)
    }

    /// `GET path` and the list `key` of its answer (`hosts`, `sessions`,
    /// `grants`).
    pub async fn list(&self, path: &str, key: &str) -> Result<Vec<Value>, ClientError> {
        let answer = self.get(path).await?;
        answer
            .get(key)
            .and_then(Value::as_array)
            .cloned()
            .ok_or_else(|| {
                let item = key.strip_suffix('s').unwrap_or(key);
                ClientError::Protocol(format!("the {item} list lacks {key}"))
            })
    }

    /// `GET path` with the `ETag` of the answer (a host's version).
    pub async fn get_versioned(&self, path: &str) -> Result<(Value, String), ClientError> {
        let (value, etag) = self.call(Method::GET, path, &[], None).await?;
        let etag = etag.ok_or_else(|| ClientError::Protocol("an answer without ETag".into()))?;
        Ok((value, etag))
    }

    /// `POST path` with a JSON body.
    pub async fn post(&self, path: &str, body: &Value) -> Result<Value, ClientError> {
        Ok(self
            .call(Method::POST, path, &[], Some(body.to_string()))
            .await?
            .0)
    }

    /// `POST path` without a body.
    pub async fn post_empty(&self, path: &str) -> Result<Value, ClientError> {
        Ok(self.call(Method::POST, path, &[], None).await?.0)
    }

    /// `method path` with a JSON body and `If-Match: etag`.
    pub async fn send_if_match(
        &self,
        method: Method,
        path: &str,
        body: &Value,
        etag: &str,
    ) -> Result<Value, ClientError> {
        Ok(self
            .call(method, path, &[("if-match", etag)], Some(body.to_string()))
            .await?
            .0)
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<String>,
    ) -> Result<(Value, Option<String>), ClientError> {
        let reply = self
            .connector
            .request(
                &self.server,
                method,
                path,
                self.token.as_deref(),
                headers,
                body,
            )
            .await?;
        if !(200..300).contains(&reply.status) {
            return Err(ClientError::Problem(Problem::from_body(
                reply.status,
                &reply.body,
            )));
        }
        if reply.body.is_empty() {
            return Ok((Value::Null, reply.etag));
        }
        let value = serde_json::from_slice(&reply.body).map_err(|_| {
            ClientError::Protocol(format!("a body that is not JSON (HTTP {})", reply.status))
        })?;
        Ok((value, reply.etag))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn problems_are_read_with_their_parts() {
        let body = br#"{"type":"about:blank","title":"Step-up required","status":401,
            "code":"step_up_required","reason":"totp_invalid"}"#;
        let problem = Problem::from_body(401, body);
        assert_eq!(problem.code, "step_up_required");
        assert_eq!(problem.reason.as_deref(), Some("totp_invalid"));
        assert!(problem.hint().contains("TOTP code was wrong"));
        let problem = Problem::from_body(400, br#"{"code":"validation_failed","errors":[{"pointer":"/columns","code":"out_of_range"}]}"#);
        assert_eq!(
            problem.errors,
            vec![("/columns".into(), "out_of_range".into())]
        );
        assert!(problem.summary().contains("/columns: out_of_range"));
        let problem = Problem::from_body(502, b"<html>bad gateway</html>");
        assert_eq!(problem.code, "http_502");
    }
}
