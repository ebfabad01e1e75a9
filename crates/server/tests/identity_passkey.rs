//! Passkeys and the web console against the real server on port 0 over TLS, on
//! both engines (DESIGN 3.1; spec 24 6.2 "Step-up", 12, 13, TM-T07, TM-T12),
//! driven by the software authenticator of the webauthn-rs project: enrollment
//! with a passkey, console login (password + passkey) with the cookie and CSRF
//! token, a console's TOTP step-up refused with `passkey_required`, a passkey
//! step-up consumed once, login failures that all look alike, replayed and
//! expired challenges, a CLI person adding a passkey after a TOTP step-up,
//! logout, and a canary that no credential, cookie or CSRF value reaches the
//! audit or the event log.
//!
//! Time moves only through the server's manual clock.

#![allow(clippy::unwrap_used)] // test bodies are plain fns called by the generated #[test]s

use bothy_testkit as support;
use bothy_testkit::identity as identity_common;

use std::time::Duration;

use bothy_server::clock::Clock;
use bothy_server::db::Engine;
use bothy_server::identity::IdentityError;
use bothy_server::identity::step_up;
use identity_common::*;
use serde_json::{Value, json};
use support::both_engines;
use support::server::TestServer;
use webauthn_authenticator_rs::WebauthnAuthenticator;
use webauthn_authenticator_rs::softpasskey::SoftPasskey;
use webauthn_rs::prelude::{CreationChallengeResponse, RequestChallengeResponse, Url};

fn origin() -> Url {
    Url::parse("https://localhost").unwrap()
}

fn unauthenticated_body() -> Value {
    json!({"type": "about:blank", "title": "Unauthorized", "status": 401, "code": "unauthenticated"})
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
    let options: CreationChallengeResponse = serde_json::from_value(options.clone()).unwrap();
    assert_eq!(
        serde_json::to_value(&options).unwrap()["publicKey"]["authenticatorSelection"]["userVerification"],
        "required"
    );
    without_nulls(serde_json::to_value(key.do_registration(origin(), options).unwrap()).unwrap())
}

fn assert_with(key: &mut SoftPasskey, options: &Value) -> Value {
    let options: RequestChallengeResponse = serde_json::from_value(options.clone()).unwrap();
    without_nulls(serde_json::to_value(key.do_authentication(origin(), options).unwrap()).unwrap())
}

/// Enrolls the person of `code` with a password, a passkey of `key` and TOTP.
async fn enroll_with_passkey(server: &TestServer, code: &str, key: &mut SoftPasskey) -> Enrolled {
    let started = post(
        server,
        "/api/v1/auth/enroll",
        None,
        json!({"code": code, "password": PASSWORD}),
    )
    .await;
    assert_eq!(started.status, 200, "{:?}", started.body);
    let start = post(
        server,
        "/api/v1/auth/enroll/passkey/start",
        None,
        json!({"code": code}),
    )
    .await;
    assert_eq!(start.status, 200, "{:?}", start.body);
    let credential = register(key, &start.body["options"]);
    let finish = post(
        server,
        "/api/v1/auth/enroll/passkey/finish",
        None,
        json!({"code": code, "challenge_id": start.body["challenge_id"], "credential": credential}),
    )
    .await;
    assert_eq!(finish.status, 200, "{:?}", finish.body);
    let uri = started.body["otpauth_uri"].as_str().unwrap().to_owned();
    let enrolled = Enrolled {
        username: started.body["username"].as_str().unwrap().to_owned(),
        password: PASSWORD.to_owned(),
        person_id: started.body["person_id"].as_str().unwrap().to_owned(),
        totp: totp_rs::TOTP::from_url(&uri).unwrap(),
        otpauth_uri: uri,
    };
    let confirmed = post(
        server,
        "/api/v1/auth/enroll/confirm",
        None,
        json!({"code": code, "totp": enrolled.code_now(server)}),
    )
    .await;
    assert_eq!(confirmed.status, 200, "{:?}", confirmed.body);
    enrolled
}

async fn login_start(server: &TestServer, username: &str) -> Reply {
    let reply = post(
        server,
        "/api/v1/auth/console/login/start",
        None,
        json!({"username": username}),
    )
    .await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    reply
}

async fn login_finish(
    server: &TestServer,
    username: &str,
    password: &str,
    challenge_id: &Value,
    credential: &Value,
) -> Reply {
    post(
        server,
        "/api/v1/auth/console/login/finish",
        None,
        json!({"username": username, "password": password, "challenge_id": challenge_id, "credential": credential}),
    )
    .await
}

/// A console session: the cookie value and the CSRF token.
struct Console {
    cookie: String,
    csrf: String,
    login_session_id: String,
}

async fn console_login(server: &TestServer, person: &Enrolled, key: &mut SoftPasskey) -> Console {
    let start = login_start(server, &person.username).await;
    let credential = assert_with(key, &start.body["options"]);
    let reply = login_finish(
        server,
        &person.username,
        &person.password,
        &start.body["challenge_id"],
        &credential,
    )
    .await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    let set_cookie = reply.headers["set-cookie"].to_str().unwrap().to_owned();
    let attributes: Vec<&str> = set_cookie.split(';').map(str::trim).collect();
    for attribute in ["HttpOnly", "Secure", "SameSite=Strict", "Path=/"] {
        assert!(attributes.contains(&attribute), "{set_cookie}");
    }
    let cookie = attributes[0]
        .strip_prefix("bothy_session=")
        .unwrap()
        .to_owned();
    assert!(cookie.starts_with("bothy_at_"));
    Console {
        cookie,
        csrf: reply.body["csrf_token"].as_str().unwrap().to_owned(),
        login_session_id: reply.body["login_session_id"].as_str().unwrap().to_owned(),
    }
}

async fn send(request: reqwest::RequestBuilder) -> Reply {
    let response = request.send().await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let text = response.text().await.unwrap();
    let body = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap()
    };
    Reply {
        status,
        headers,
        body,
    }
}

/// A request with the console cookie and, if given, an `X-CSRF-Token`.
async fn console_post(
    server: &TestServer,
    path: &str,
    console: &Console,
    csrf: Option<&str>,
    body: Option<Value>,
) -> Reply {
    let mut request = server
        .client
        .post(server.url(path))
        .header("cookie", format!("bothy_session={}", console.cookie));
    if let Some(csrf) = csrf {
        request = request.header("x-csrf-token", csrf);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    send(request).await
}

async fn console_get(server: &TestServer, path: &str, console: &Console) -> Reply {
    send(server.client.get(server.url(path)).header(
        "cookie",
        format!("other=1; bothy_session={}", console.cookie),
    ))
    .await
}

async fn consume(server: &TestServer, session: &str, step_up: &str) -> Result<(), IdentityError> {
    let now = server.clock.now_ms();
    let mut uow = server.state.db().begin(now).await.unwrap();
    let parse = |text: &str| bothy_proto::ids::parse_uuid(text).unwrap();
    let result = step_up::consume(&mut uow, parse(session), parse(step_up), now).await;
    uow.commit().await.unwrap();
    result.map(|_| ())
}

// ------------------------------------------------------------ the happy path

async fn console_login_csrf_step_up_logout(engine: Engine) {
    let server = TestServer::start(engine).await;
    let mut key = SoftPasskey::new(true);
    let code = bootstrap(&server, "alice").await;
    let alice = enroll_with_passkey(&server, &code, &mut key).await;
    let console = console_login(&server, &alice, &mut key).await;

    // whoami with the cookie (GET: no CSRF token needed).
    let whoami = console_get(&server, "/api/v1/auth/session", &console).await;
    assert_eq!(whoami.status, 200, "{:?}", whoami.body);
    assert_eq!(whoami.body["client_component"], "console");
    assert_eq!(whoami.body["device_id"], Value::Null);
    assert_eq!(
        whoami.body["login_session_id"],
        console.login_session_id.as_str()
    );

    // The cookie's token is no bearer token.
    let bearer = get(&server, "/api/v1/auth/session", Some(&console.cookie)).await;
    assert_eq!(bearer.status, 401);

    // State changes need the CSRF token.
    let path = "/api/v1/auth/step-up/passkey/start";
    for csrf in [
        None,
        Some("bothy_csrf_wrong"),
        Some(alice.password.as_str()),
    ] {
        let reply = console_post(&server, path, &console, csrf, None).await;
        assert_eq!(reply.status, 403, "{:?}", reply.body);
        assert_eq!(reply.body["reason"], "csrf_token_invalid");
    }
    let other = console_login(&server, &alice, &mut key).await;
    let reply = console_post(&server, path, &console, Some(&other.csrf), None).await;
    assert_eq!(reply.status, 403, "another session's CSRF token");

    // TOTP is not a console step-up.
    let totp = console_post(
        &server,
        "/api/v1/auth/step-up",
        &console,
        Some(&console.csrf),
        Some(json!({"method": "totp", "code": alice.fresh_code(&server)})),
    )
    .await;
    assert_eq!(totp.status, 401, "{:?}", totp.body);
    assert_eq!(totp.body["code"], "step_up_required");
    assert_eq!(totp.body["reason"], "passkey_required");

    // A passkey step-up, consumable once.
    let start = console_post(&server, path, &console, Some(&console.csrf), None).await;
    assert_eq!(start.status, 200, "{:?}", start.body);
    assert_eq!(
        start.body["options"]["publicKey"]["userVerification"],
        "required"
    );
    let credential = assert_with(&mut key, &start.body["options"]);
    let step_up_body = json!({"method": "webauthn", "challenge_id": start.body["challenge_id"], "credential": credential});
    let created = console_post(
        &server,
        "/api/v1/auth/step-up",
        &console,
        Some(&console.csrf),
        Some(step_up_body.clone()),
    )
    .await;
    assert_eq!(created.status, 200, "{:?}", created.body);
    let step_up_id = created.body["step_up_id"].as_str().unwrap().to_owned();
    consume(&server, &console.login_session_id, &step_up_id)
        .await
        .unwrap();
    assert!(
        consume(&server, &console.login_session_id, &step_up_id)
            .await
            .is_err()
    );
    // The challenge was single use.
    let replayed = console_post(
        &server,
        "/api/v1/auth/step-up",
        &console,
        Some(&console.csrf),
        Some(step_up_body),
    )
    .await;
    assert_eq!(replayed.status, 401);
    assert_eq!(replayed.body["reason"], "passkey_invalid");

    // Logout clears the cookie and ends the session.
    let logout = console_post(
        &server,
        "/api/v1/auth/logout",
        &console,
        Some(&console.csrf),
        None,
    )
    .await;
    assert_eq!(logout.status, 204, "{:?}", logout.body);
    let cleared = logout.headers["set-cookie"].to_str().unwrap();
    assert!(cleared.starts_with("bothy_session=;"), "{cleared}");
    assert!(cleared.contains("Max-Age=0"), "{cleared}");
    let after = console_get(&server, "/api/v1/auth/session", &console).await;
    assert_eq!(after.status, 401);

    // Canary: no cookie, CSRF token or credential in the audit or the events.
    let text = audit_and_event_text(&server).await;
    for secret in [&console.cookie, &console.csrf, &other.cookie, &other.csrf] {
        assert!(!text.contains(secret.as_str()));
    }
    assert!(!text.contains(credential["id"].as_str().unwrap()));
    assert!(
        !text.contains(
            start.body["options"]["publicKey"]["challenge"]
                .as_str()
                .unwrap()
        )
    );
    assert!(!audit_of(&server, "auth.login", "allow").await.is_empty());
    assert!(
        audit_of(&server, "auth.step_up", "allow")
            .await
            .iter()
            .any(|row| row.details["method"] == "webauthn")
    );
}

// ------------------------------------------------------------ failures

async fn console_login_failures_look_alike(engine: Engine) {
    let server = TestServer::start(engine).await;
    let mut alice_key = SoftPasskey::new(true);
    let mut bob_key = SoftPasskey::new(true);
    let code = bootstrap(&server, "alice").await;
    let alice = enroll_with_passkey(&server, &code, &mut alice_key).await;
    let owner_session = alice.login(&server, 1).await;
    let invited = post(
        &server,
        "/api/v1/persons",
        Some(&owner_session.token),
        json!({"username": "bob", "role": "member"}),
    )
    .await;
    assert_eq!(invited.status, 201, "{:?}", invited.body);
    let bob_code = invited.body["enrollment_code"].as_str().unwrap().to_owned();
    let bob = enroll_with_passkey(&server, &bob_code, &mut bob_key).await;

    // Wrong password with a good assertion.
    let start = login_start(&server, &alice.username).await;
    let credential = assert_with(&mut alice_key, &start.body["options"]);
    let wrong = login_finish(
        &server,
        &alice.username,
        "not the password at all",
        &start.body["challenge_id"],
        &credential,
    )
    .await;
    assert_eq!(wrong.status, 401);
    assert_eq!(wrong.body, unauthenticated_body());

    // An assertion of another credential (bob's key over alice's challenge).
    let start = login_start(&server, &alice.username).await;
    let bob_start = login_start(&server, &bob.username).await;
    let mut options = start.body["options"].clone();
    options["publicKey"]["allowCredentials"] =
        bob_start.body["options"]["publicKey"]["allowCredentials"].clone();
    let foreign = assert_with(&mut bob_key, &options);
    let reply = login_finish(
        &server,
        &alice.username,
        &alice.password,
        &start.body["challenge_id"],
        &foreign,
    )
    .await;
    assert_eq!(reply.status, 401);
    assert_eq!(reply.body, unauthenticated_body());

    // An unknown username: options of the same shape, the same failure.
    let unknown = login_start(&server, "mallory").await;
    let keys = |value: &Value| {
        let mut keys: Vec<String> = value["options"]["publicKey"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        keys.sort();
        keys
    };
    assert_eq!(
        keys(&unknown.body),
        keys(&start.body),
        "{:?} {:?}",
        unknown.body,
        start.body
    );
    for member in ["timeout", "rpId", "userVerification"] {
        assert_eq!(
            unknown.body["options"]["publicKey"][member],
            start.body["options"]["publicKey"][member]
        );
    }
    assert_eq!(
        unknown.body["options"]["publicKey"]["allowCredentials"][0]["id"],
        login_start(&server, "mallory").await.body["options"]["publicKey"]["allowCredentials"][0]["id"],
        "the decoy is stable"
    );
    let reply = login_finish(
        &server,
        "mallory",
        PASSWORD,
        &unknown.body["challenge_id"],
        &credential,
    )
    .await;
    assert_eq!(reply.body, unauthenticated_body());

    // A replayed challenge: good once, refused the second time.
    let start = login_start(&server, &alice.username).await;
    let credential = assert_with(&mut alice_key, &start.body["options"]);
    let first = login_finish(
        &server,
        &alice.username,
        &alice.password,
        &start.body["challenge_id"],
        &credential,
    )
    .await;
    assert_eq!(first.status, 200, "{:?}", first.body);
    let again = login_finish(
        &server,
        &alice.username,
        &alice.password,
        &start.body["challenge_id"],
        &credential,
    )
    .await;
    assert_eq!(again.body, unauthenticated_body());

    // An expired challenge.
    let start = login_start(&server, &alice.username).await;
    let credential = assert_with(&mut alice_key, &start.body["options"]);
    server.clock.advance(Duration::from_secs(5 * 60 + 1));
    let late = login_finish(
        &server,
        &alice.username,
        &alice.password,
        &start.body["challenge_id"],
        &credential,
    )
    .await;
    assert_eq!(late.body, unauthenticated_body());

    // An enrollment challenge is bound to its code: bob's code with alice's
    // challenge is refused (alice's code is used up; bob re-enrolls after a reset).
    let state = &server.state;
    let reset = bothy_server::identity::admin::reset_second_factor(
        state.db(),
        state.pepper(),
        &state.config().auth,
        server.clock.now_ms(),
        "bob",
    )
    .await
    .unwrap();
    let bob_code = reset.issued.code.expose().to_owned();
    // The reset removed bob's passkey.
    let left: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM passkeys WHERE person_id = $1")
        .bind(&bob.person_id)
        .fetch_one(state.db().pool())
        .await
        .unwrap();
    assert_eq!(left, 0);
    let mut fresh = SoftPasskey::new(true);
    let bob_start = post(
        &server,
        "/api/v1/auth/enroll/passkey/start",
        None,
        json!({"code": bob_code}),
    )
    .await;
    assert_eq!(bob_start.status, 200, "{:?}", bob_start.body);
    let credential = register(&mut fresh, &bob_start.body["options"]);
    let wrong_code = post(
        &server,
        "/api/v1/auth/enroll/passkey/finish",
        None,
        json!({"code": code, "challenge_id": bob_start.body["challenge_id"], "credential": credential}),
    )
    .await;
    assert_eq!(wrong_code.body, unauthenticated_body());

    let deny = audit_of(&server, "auth.login", "deny").await;
    assert!(deny.len() >= 5);
    let text = audit_and_event_text(&server).await;
    assert!(!text.contains(credential["id"].as_str().unwrap()));
    assert!(!text.contains("not the password at all"));
}

// ------------------------------------------------------------ CLI adds a passkey

async fn cli_person_adds_passkey_after_totp_step_up(engine: Engine) {
    let server = TestServer::start(engine).await;
    let alice = owner(&server, "alice").await;
    let session = alice.login(&server, 1).await;
    let token = Some(session.token.as_str());

    // Without a fresh step-up: refused.
    let missing = post(
        &server,
        "/api/v1/auth/passkeys/start",
        token,
        json!({"step_up_id": "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"}),
    )
    .await;
    assert_eq!(missing.status, 401, "{:?}", missing.body);
    assert_eq!(missing.body["code"], "step_up_required");

    let step_up = post(
        &server,
        "/api/v1/auth/step-up",
        token,
        json!({"method": "totp", "code": alice.fresh_code(&server)}),
    )
    .await;
    assert_eq!(step_up.status, 200, "{:?}", step_up.body);
    let body = json!({"step_up_id": step_up.body["step_up_id"]});
    let start = post(&server, "/api/v1/auth/passkeys/start", token, body.clone()).await;
    assert_eq!(start.status, 200, "{:?}", start.body);
    let again = post(&server, "/api/v1/auth/passkeys/start", token, body).await;
    assert_eq!(again.status, 401, "the step-up was consumed");

    let mut key = SoftPasskey::new(true);
    let credential = register(&mut key, &start.body["options"]);
    let finish = post(
        &server,
        "/api/v1/auth/passkeys/finish",
        token,
        json!({"challenge_id": start.body["challenge_id"], "credential": credential}),
    )
    .await;
    assert_eq!(finish.status, 200, "{:?}", finish.body);
    let replay = post(
        &server,
        "/api/v1/auth/passkeys/finish",
        token,
        json!({"challenge_id": start.body["challenge_id"], "credential": credential}),
    )
    .await;
    assert_eq!(replay.status, 401);

    // A CLI session cannot claim a webauthn step-up without a challenge of its own.
    let bogus = post(
        &server,
        "/api/v1/auth/step-up",
        token,
        json!({"method": "webauthn", "challenge_id": start.body["challenge_id"], "credential": credential}),
    )
    .await;
    assert_eq!(bogus.status, 401);
    assert_eq!(bogus.body["code"], "step_up_required");

    // The new passkey logs in to the console.
    let console = console_login(&server, &alice, &mut key).await;
    assert!(!console.csrf.is_empty());
    let text = audit_and_event_text(&server).await;
    assert!(!text.contains(credential["id"].as_str().unwrap()));
    assert!(!text.contains(&session.token));
}

both_engines!(
    console_login_csrf_step_up_logout,
    console_login_failures_look_alike,
    cli_person_adds_passkey_after_totp_step_up,
);
