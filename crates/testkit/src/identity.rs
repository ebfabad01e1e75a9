//! Helpers of the identity tests (`identity_*.rs`): requests with literal
//! bodies, persons enrolled through the real routes, TOTP codes computed by an
//! independent implementation (`totp-rs` from the `otpauth://` URI the server
//! returned), device keys, and raw reads of the audit and event tables.
//!
//! Time moves only through the server's manual clock: every TOTP use first
//! moves it one step (30 s) forward, so no code is ever the one used before.

use std::time::Duration;

use bothy_server::clock::Clock;
use reqwest::StatusCode;
use reqwest::header::HeaderMap;
use serde_json::{Value, json};
use sqlx::Row;

use crate::server::TestServer;

/// A password that follows the rule.
pub const PASSWORD: &str = "correct horse battery staple";

/// The default TOTP step.
pub const STEP: Duration = Duration::from_secs(30);

/// A response: status, headers, JSON body (`Null` when empty).
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Value,
}

async fn reply(response: reqwest::Response) -> Reply {
    let status = response.status();
    let headers = response.headers().clone();
    let text = response.text().await.expect("response body");
    let body = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("JSON body ({e}): {text}"))
    };
    Reply {
        status,
        headers,
        body,
    }
}

/// `POST path` with a JSON body and an optional bearer token.
pub async fn post(server: &TestServer, path: &str, token: Option<&str>, body: Value) -> Reply {
    let mut request = server.client.post(server.url(path)).json(&body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    reply(request.send().await.expect("request")).await
}

/// `POST path` with a JSON body and an optional bearer token, sent by `client`
/// (e.g. [`TestServer::client_from`] another address).
pub async fn post_by(
    client: &reqwest::Client,
    server: &TestServer,
    path: &str,
    token: Option<&str>,
    body: Value,
) -> Reply {
    let mut request = client.post(server.url(path)).json(&body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    reply(request.send().await.expect("request")).await
}

/// `POST path` without a body.
pub async fn post_empty(server: &TestServer, path: &str, token: &str) -> Reply {
    let request = server.client.post(server.url(path)).bearer_auth(token);
    reply(request.send().await.expect("request")).await
}

/// `GET path` with an optional bearer token.
pub async fn get(server: &TestServer, path: &str, token: Option<&str>) -> Reply {
    let mut request = server.client.get(server.url(path));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    reply(request.send().await.expect("request")).await
}

/// The base64url public key of a device seeded with `seed`.
pub fn device_key(seed: u8) -> String {
    let key = bothy_proto::jws::Ed25519SigningKey::from_seed(&[seed; 32]);
    bothy_proto::b64::encode(&key.public_jwk().raw())
}

/// A person who finished enrollment.
#[derive(Debug)]
pub struct Enrolled {
    pub username: String,
    pub password: String,
    pub person_id: String,
    pub otpauth_uri: String,
    pub totp: totp_rs::TOTP,
}

impl Enrolled {
    /// Moves the clock one step and returns the code of the new step.
    pub fn fresh_code(&self, server: &TestServer) -> String {
        server.clock.advance(STEP);
        self.code_now(server)
    }

    /// The code of the current step (may be used already).
    pub fn code_now(&self, server: &TestServer) -> String {
        let seconds = u64::try_from(server.clock.now_ms() / 1000).expect("after 1970");
        self.totp.generate(seconds)
    }

    /// A login body with a fresh code.
    pub fn login_body(&self, server: &TestServer, device_seed: u8) -> Value {
        json!({
            "username": self.username,
            "password": self.password,
            "totp": self.fresh_code(server),
            "device_public_key": device_key(device_seed),
            "device_name": format!("laptop {device_seed}"),
        })
    }

    /// Logs in with a fresh code from the device `device_seed`; the response.
    pub async fn login(&self, server: &TestServer, device_seed: u8) -> Session {
        let body = self.login_body(server, device_seed);
        let reply = post(server, "/api/v1/auth/login", None, body).await;
        if reply.status != 200 {
            // Every refusal answers the same body; the audit says which, and
            // whether a login of this request's got through before it.
            let denied = audit_of(server, "auth.login", "deny").await;
            let allowed = audit_of(server, "auth.login", "allow").await;
            panic!(
                "login {}: {:?}; audit of the refusal: {:?}; logins allowed before: {}",
                reply.status,
                reply.body,
                denied.last().map(|row| &row.details),
                allowed.len()
            );
        }
        Session {
            token: reply.body["access_token"]
                .as_str()
                .expect("token")
                .to_owned(),
            login_session_id: reply.body["login_session_id"]
                .as_str()
                .expect("session")
                .to_owned(),
            device_id: reply.body["device_id"].as_str().expect("device").to_owned(),
            expires_at: reply.body["expires_at"].as_i64().expect("expires_at"),
        }
    }
}

/// A logged-in session.
#[derive(Debug, Clone)]
pub struct Session {
    pub token: String,
    pub login_session_id: String,
    pub device_id: String,
    pub expires_at: i64,
}

/// The first owner, created through the library function `admin bootstrap` calls;
/// returns the enrollment code.
pub async fn bootstrap(server: &TestServer, username: &str) -> String {
    let state = &server.state;
    let owner = bothy_server::identity::admin::bootstrap(
        state.db(),
        state.pepper(),
        &state.config().auth,
        server.clock.now_ms(),
        username,
    )
    .await
    .expect("bootstrap");
    owner.issued.code.expose().to_owned()
}

/// Enrolls through the routes with `code`: start, then confirm with the current
/// code of the returned URI.
pub async fn enroll(server: &TestServer, code: &str, password: &str) -> Enrolled {
    let started = post(
        server,
        "/api/v1/auth/enroll",
        None,
        json!({"code": code, "password": password}),
    )
    .await;
    assert_eq!(started.status, 200, "{:?}", started.body);
    let uri = started.body["otpauth_uri"]
        .as_str()
        .expect("uri")
        .to_owned();
    let totp = totp_rs::TOTP::from_url(&uri).expect("the URI is a valid otpauth URI");
    let username = started.body["username"]
        .as_str()
        .expect("username")
        .to_owned();
    let enrolled = Enrolled {
        username,
        password: password.to_owned(),
        person_id: started.body["person_id"].as_str().expect("id").to_owned(),
        otpauth_uri: uri,
        totp,
    };
    let confirmed = post(
        server,
        "/api/v1/auth/enroll/confirm",
        None,
        json!({"code": code, "totp": enrolled.code_now(server)}),
    )
    .await;
    assert_eq!(confirmed.status, 200, "{:?}", confirmed.body);
    assert_eq!(confirmed.body["username"], enrolled.username);
    enrolled
}

/// Bootstraps `username` as the first owner and enrolls them.
pub async fn owner(server: &TestServer, username: &str) -> Enrolled {
    let code = bootstrap(server, username).await;
    enroll(server, &code, PASSWORD).await
}

/// An owner invites `username` with `role` and the person enrolls.
pub async fn invite(
    server: &TestServer,
    owner_token: &str,
    username: &str,
    role: &str,
) -> Enrolled {
    let invited = post(
        server,
        "/api/v1/persons",
        Some(owner_token),
        json!({"username": username, "role": role}),
    )
    .await;
    assert_eq!(invited.status, 201, "{:?}", invited.body);
    let code = invited.body["enrollment_code"]
        .as_str()
        .expect("code")
        .to_owned();
    enroll(server, &code, PASSWORD).await
}

/// One audit row, as stored.
#[derive(Debug, Clone)]
pub struct AuditRow {
    pub action: String,
    pub decision: String,
    pub actor_kind: String,
    pub actor_id: Option<String>,
    pub target_kind: Option<String>,
    pub target_id: Option<String>,
    pub details: Value,
}

/// Every audit row, oldest first.
pub async fn audit_rows(server: &TestServer) -> Vec<AuditRow> {
    sqlx::query(
        "SELECT action, decision, actor_kind, actor_id, target_kind, target_id, details \
         FROM audit ORDER BY id",
    )
    .fetch_all(server.state.db().pool())
    .await
    .expect("read audit")
    .iter()
    .map(|row| AuditRow {
        action: row.get("action"),
        decision: row.get("decision"),
        actor_kind: row.get("actor_kind"),
        actor_id: row.get("actor_id"),
        target_kind: row.get("target_kind"),
        target_id: row.get("target_id"),
        details: serde_json::from_str(&row.get::<String, _>("details")).expect("details JSON"),
    })
    .collect()
}

/// The audit rows of one action and decision.
pub async fn audit_of(server: &TestServer, action: &str, decision: &str) -> Vec<AuditRow> {
    audit_rows(server)
        .await
        .into_iter()
        .filter(|row| row.action == action && row.decision == decision)
        .collect()
}

/// Every audit and event row as one text (for canary checks).
pub async fn audit_and_event_text(server: &TestServer) -> String {
    let pool = server.state.db().pool();
    let mut text = String::new();
    for row in sqlx::query(
        "SELECT id, action, decision, actor_kind, actor_id, target_kind, target_id, details FROM audit",
    )
    .fetch_all(pool)
    .await
    .expect("read audit")
    {
        for column in ["id", "action", "decision", "actor_kind", "details"] {
            text.push_str(&row.get::<String, _>(column));
            text.push('\n');
        }
        for column in ["actor_id", "target_kind", "target_id"] {
            text.push_str(&row.get::<Option<String>, _>(column).unwrap_or_default());
            text.push('\n');
        }
    }
    for row in sqlx::query("SELECT kind, audience_kind, audience_id, payload FROM events")
        .fetch_all(pool)
        .await
        .expect("read events")
    {
        for column in ["kind", "audience_kind", "payload"] {
            text.push_str(&row.get::<String, _>(column));
            text.push('\n');
        }
        text.push_str(
            &row.get::<Option<String>, _>("audience_id")
                .unwrap_or_default(),
        );
        text.push('\n');
    }
    text
}
