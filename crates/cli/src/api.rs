//! The REST calls of the client (DESIGN §3.4): one [`Api`] per server, with
//! or without a login; answers as JSON or as types of `bothy-api`, refusals
//! as [`crate::problem::Problem`].

use bothy_net::{Connector, Method, NetError, ServerUrl};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::ClientError;
use crate::problem::{Call, Problem};

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
            connector: Connector::from_env().map_err(ClientError::from)?,
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

    /// A network error of a call to this server (names the URL it tried).
    pub fn unreachable(&self, error: NetError) -> ClientError {
        ClientError::Net {
            server: Some(self.server.https_base()),
            error,
        }
    }

    /// `GET path`.
    pub async fn get(&self, path: &str) -> Result<Value, ClientError> {
        Ok(self.call(Method::GET, path, &[], None).await?.0)
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

    /// `GET path`, the answer read as a type of `bothy-api`.
    pub async fn get_as<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        typed(self.get(path).await?)
    }

    /// `POST path` with a body of `bothy-api`, the answer read as `T`.
    pub async fn post_as<T: DeserializeOwned>(
        &self,
        path: &str,
        body: &impl Serialize,
    ) -> Result<T, ClientError> {
        let body = serde_json::to_value(body)
            .map_err(|_| ClientError::Protocol("a request that does not encode".into()))?;
        typed(self.post(path, &body).await?)
    }

    /// `POST path` without a body, the answer read as `T`.
    pub async fn post_empty_as<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        typed(self.post_empty(path).await?)
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

    /// `method path` with a body of `bothy-api` and `If-Match: etag`, the
    /// answer read as `T`.
    pub async fn send_if_match_as<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: &impl Serialize,
        etag: &str,
    ) -> Result<T, ClientError> {
        let body = serde_json::to_value(body)
            .map_err(|_| ClientError::Protocol("a request that does not encode".into()))?;
        typed(self.send_if_match(method, path, &body, etag).await?)
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<String>,
    ) -> Result<(Value, Option<String>), ClientError> {
        let call = Call::of(&method, path);
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
            .await
            .map_err(|e| self.unreachable(e))?;
        if !(200..300).contains(&reply.status) {
            return Err(ClientError::Problem(Problem::from_body(
                call,
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

/// An answer read as a type of `bothy-api`. The error names what is wrong
/// with the form, never a value of the answer (it may hold a token).
fn typed<T: DeserializeOwned>(value: Value) -> Result<T, ClientError> {
    serde_json::from_value(value).map_err(|error| {
        ClientError::Protocol(format!(
            "an answer of the wrong form ({:?})",
            error.classify()
        ))
    })
}
