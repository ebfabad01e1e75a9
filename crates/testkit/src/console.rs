//! The web console in the terminal tests: a passkey of the webauthn-rs
//! project's software authenticator, the console login (password + passkey)
//! with its cookie and CSRF token, passkey step-ups, and requests that carry
//! the cookie — the same routes `identity_passkey.rs` tests.

use serde_json::{Value, json};
use webauthn_authenticator_rs::WebauthnAuthenticator;
use webauthn_authenticator_rs::softpasskey::SoftPasskey;
use webauthn_rs::prelude::{CreationChallengeResponse, RequestChallengeResponse, Url};

use crate::hosts::{Person, step_up};
use crate::identity::{Reply, post};
use crate::server::TestServer;

/// The origin of the test server's `server.public_url`.
pub const ORIGIN: &str = "https://localhost";

fn origin() -> Url {
    Url::parse(ORIGIN).expect("origin")
}

/// The JSON a browser sends: absent members are left out (the strict body
/// decoder refuses `null`).
fn without_nulls(value: Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .filter(|(_, value)| !value.is_null())
                .map(|(key, value)| (key, without_nulls(value)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(without_nulls).collect()),
        other => other,
    }
}

fn register(key: &mut SoftPasskey, options: &Value) -> Value {
    let options: CreationChallengeResponse =
        serde_json::from_value(options.clone()).expect("creation options");
    let credential = key
        .do_registration(origin(), options)
        .expect("the authenticator registers");
    without_nulls(serde_json::to_value(credential).expect("JSON"))
}

fn assert_with(key: &mut SoftPasskey, options: &Value) -> Value {
    let options: RequestChallengeResponse =
        serde_json::from_value(options.clone()).expect("request options");
    let assertion = key
        .do_authentication(origin(), options)
        .expect("the authenticator asserts");
    without_nulls(serde_json::to_value(assertion).expect("JSON"))
}

/// A console session: the cookie value, the CSRF token, the login session.
#[derive(Debug, Clone)]
pub struct Console {
    /// The value of the cookie `bothy_session`.
    pub cookie: String,
    /// `X-CSRF-Token`.
    pub csrf: String,
    /// The console's login session (its `dev`, D-73).
    pub login_session_id: String,
}

/// A CLI person adds a passkey (after a TOTP step-up), as
/// `cli_person_adds_passkey_after_totp_step_up` does.
pub async fn add_passkey(server: &TestServer, person: &Person) -> SoftPasskey {
    let step_up_id = step_up(server, person).await;
    let start = post(
        server,
        "/api/v1/auth/passkeys/start",
        Some(person.token()),
        json!({"step_up_id": step_up_id}),
    )
    .await;
    assert_eq!(start.status, 200, "{:?}", start.body);
    let mut key = SoftPasskey::new(true);
    let credential = register(&mut key, &start.body["options"]);
    let finish = post(
        server,
        "/api/v1/auth/passkeys/finish",
        Some(person.token()),
        json!({"challenge_id": start.body["challenge_id"], "credential": credential}),
    )
    .await;
    assert_eq!(finish.status, 200, "{:?}", finish.body);
    key
}

/// Logs `person` in to the console with password and passkey.
pub async fn console_login(server: &TestServer, person: &Person, key: &mut SoftPasskey) -> Console {
    let username = &person.enrolled.username;
    let start = post(
        server,
        "/api/v1/auth/console/login/start",
        None,
        json!({"username": username}),
    )
    .await;
    assert_eq!(start.status, 200, "{:?}", start.body);
    let credential = assert_with(key, &start.body["options"]);
    let reply = post(
        server,
        "/api/v1/auth/console/login/finish",
        None,
        json!({
            "username": username,
            "password": person.enrolled.password,
            "challenge_id": start.body["challenge_id"],
            "credential": credential,
        }),
    )
    .await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    let set_cookie = reply.headers["set-cookie"]
        .to_str()
        .expect("cookie text")
        .to_owned();
    let cookie = set_cookie
        .split(';')
        .next()
        .and_then(|pair| pair.trim().strip_prefix("bothy_session="))
        .expect("the session cookie")
        .to_owned();
    Console {
        cookie,
        csrf: reply.body["csrf_token"].as_str().expect("csrf").to_owned(),
        login_session_id: reply.body["login_session_id"]
            .as_str()
            .expect("login session")
            .to_owned(),
    }
}

async fn reply(response: reqwest::Response) -> Reply {
    let status = response.status();
    let headers = response.headers().clone();
    let text = response.text().await.expect("body");
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

/// `POST path` with the console's cookie, its CSRF token and a JSON body.
pub async fn console_post(
    server: &TestServer,
    console: &Console,
    path: &str,
    body: Option<Value>,
) -> Reply {
    let mut request = server
        .client
        .post(server.url(path))
        .header("cookie", format!("bothy_session={}", console.cookie))
        .header("x-csrf-token", &console.csrf);
    if let Some(body) = body {
        request = request.json(&body);
    }
    reply(request.send().await.expect("request")).await
}

/// A passkey step-up of the console session; its `step_up_id`.
pub async fn console_step_up(
    server: &TestServer,
    console: &Console,
    key: &mut SoftPasskey,
) -> String {
    let start = console_post(server, console, "/api/v1/auth/step-up/passkey/start", None).await;
    assert_eq!(start.status, 200, "{:?}", start.body);
    let credential = assert_with(key, &start.body["options"]);
    let created = console_post(
        server,
        console,
        "/api/v1/auth/step-up",
        Some(json!({
            "method": "webauthn",
            "challenge_id": start.body["challenge_id"],
            "credential": credential,
        })),
    )
    .await;
    assert_eq!(created.status, 200, "{:?}", created.body);
    created.body["step_up_id"]
        .as_str()
        .expect("step_up_id")
        .to_owned()
}
