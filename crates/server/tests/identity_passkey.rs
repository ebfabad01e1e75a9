//! Passkeys and the web console against the real server on port 0 over TLS, on
//! both engines (DESIGN 3.1; spec 24 6.2 "Step-up", 12, 13, TM-T07, TM-T12),
//! driven by the software authenticator of the webauthn-rs project: enrollment
//! with a passkey, console login (password + passkey) with the cookie and CSRF
//! token, a console's TOTP step-up refused with `passkey_required`, a passkey
//! step-up consumed once, login failures that all look alike, replayed and
//! expired challenges, a CLI person adding a passkey after a TOTP step-up,
//! logout, a CLI-enrolled person adding a first passkey with password and
//! TOTP only (D-408) and its refusals, and a canary that no credential,
//! cookie or CSRF value reaches the audit or the event log.
//!
//! Time moves only through the server's manual clock.

#![allow(clippy::unwrap_used)] // test bodies are plain fns called by the generated #[test]s

use bothy_testkit as support;
use bothy_testkit::identity as identity_common;

use std::time::Duration;

use bothy_server::clock::Clock;
use bothy_server::db::Engine;
use bothy_server::identity::IdentityError;
use bothy_server::identity::admin::{self, PersonRef, RoleAuthority};
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

// ---------------------------------------------- a first passkey (D-408)

async fn first_start(server: &TestServer, username: &str, password: &str, totp: &str) -> Reply {
    post(
        server,
        "/api/v1/auth/passkeys/first/start",
        None,
        json!({"username": username, "password": password, "totp": totp}),
    )
    .await
}

async fn first_finish(
    server: &TestServer,
    username: &str,
    password: &str,
    challenge_id: &Value,
    credential: &Value,
) -> Reply {
    post(
        server,
        "/api/v1/auth/passkeys/first/finish",
        None,
        json!({"username": username, "password": password, "challenge_id": challenge_id, "credential": credential}),
    )
    .await
}

async fn login_session_count(server: &TestServer) -> i64 {
    sqlx::query_scalar("SELECT COUNT(*) FROM login_sessions")
        .fetch_one(server.state.db().pool())
        .await
        .unwrap()
}

/// The `reason_code`s of the denied first-passkey entries, oldest first.
async fn first_denials(server: &TestServer) -> Vec<String> {
    audit_of(server, "auth.enroll", "deny")
        .await
        .into_iter()
        .filter(|row| row.details["operation"] == "passkey_register_first")
        .map(|row| row.details["reason_code"].as_str().unwrap().to_owned())
        .collect()
}

/// D-408: a person enrolled with the CLI (password and TOTP, no passkey)
/// registers a first passkey with password and TOTP, which opens no login
/// session; every wrong part is the same 401, audited with its reason; a used
/// code, a disabled person, a challenge of another kind and a second passkey
/// are refused; then the passkey logs in to the console.
async fn first_passkey_with_password_and_totp(engine: Engine) {
    let server = TestServer::start(engine).await;
    let alice = owner(&server, "alice").await;
    let session = alice.login(&server, 1).await;
    let bob = invite(&server, &session.token, "bob", "member").await;
    let sessions_before = login_session_count(&server).await;

    // Wrong password, wrong code, unknown username: the same 401.
    let wrong = first_start(
        &server,
        &alice.username,
        "not the password at all",
        &alice.fresh_code(&server),
    )
    .await;
    assert_eq!(wrong.status, 401);
    assert_eq!(wrong.body, unauthenticated_body());
    let code = alice.fresh_code(&server);
    let other = if code == "000000" { "000001" } else { "000000" };
    let wrong = first_start(&server, &alice.username, &alice.password, other).await;
    assert_eq!(wrong.body, unauthenticated_body());
    let wrong = first_start(&server, "mallory", PASSWORD, &code).await;
    assert_eq!(wrong.body, unauthenticated_body());

    // The right three: a registration challenge, and the code's step is used.
    let start = first_start(&server, &alice.username, &alice.password, &code).await;
    assert_eq!(start.status, 200, "{:?}", start.body);
    assert_eq!(
        start.body["options"]["publicKey"]["authenticatorSelection"]["userVerification"],
        "required"
    );
    let replayed = first_start(&server, &alice.username, &alice.password, &code).await;
    assert_eq!(replayed.body, unauthenticated_body(), "a used code");

    // The finish wants the password again; a wrong one spends the challenge.
    let mut key = SoftPasskey::new(true);
    let credential = register(&mut key, &start.body["options"]);
    let wrong = first_finish(
        &server,
        &alice.username,
        "not the password at all",
        &start.body["challenge_id"],
        &credential,
    )
    .await;
    assert_eq!(wrong.body, unauthenticated_body());
    let spent = first_finish(
        &server,
        &alice.username,
        &alice.password,
        &start.body["challenge_id"],
        &credential,
    )
    .await;
    assert_eq!(
        spent.body,
        unauthenticated_body(),
        "the challenge was spent"
    );

    // A registration challenge of a logged-in session is not one of these.
    let step_up = post(
        &server,
        "/api/v1/auth/step-up",
        Some(&session.token),
        json!({"method": "totp", "code": alice.fresh_code(&server)}),
    )
    .await;
    assert_eq!(step_up.status, 200, "{:?}", step_up.body);
    let logged_in = post(
        &server,
        "/api/v1/auth/passkeys/start",
        Some(&session.token),
        json!({"step_up_id": step_up.body["step_up_id"]}),
    )
    .await;
    assert_eq!(logged_in.status, 200, "{:?}", logged_in.body);
    let mut other_key = SoftPasskey::new(true);
    let credential = register(&mut other_key, &logged_in.body["options"]);
    let foreign = first_finish(
        &server,
        &alice.username,
        &alice.password,
        &logged_in.body["challenge_id"],
        &credential,
    )
    .await;
    assert_eq!(foreign.body, unauthenticated_body());

    // A challenge of bob's is not alice's.
    let bob_start = first_start(
        &server,
        &bob.username,
        &bob.password,
        &bob.fresh_code(&server),
    )
    .await;
    assert_eq!(bob_start.status, 200, "{:?}", bob_start.body);
    let credential = register(&mut other_key, &bob_start.body["options"]);
    let crossed = first_finish(
        &server,
        &alice.username,
        &alice.password,
        &bob_start.body["challenge_id"],
        &credential,
    )
    .await;
    assert_eq!(crossed.body, unauthenticated_body());

    // The whole way: no login session comes of it.
    let start = first_start(
        &server,
        &alice.username,
        &alice.password,
        &alice.fresh_code(&server),
    )
    .await;
    assert_eq!(start.status, 200, "{:?}", start.body);
    let credential = register(&mut key, &start.body["options"]);
    let finish = first_finish(
        &server,
        &alice.username,
        &alice.password,
        &start.body["challenge_id"],
        &credential,
    )
    .await;
    assert_eq!(finish.status, 200, "{:?}", finish.body);
    assert!(finish.headers.get("set-cookie").is_none());
    assert_eq!(
        finish.body.as_object().unwrap().len(),
        1,
        "{:?}",
        finish.body
    );
    assert_eq!(login_session_count(&server).await, sessions_before);
    let allowed: Vec<_> = audit_of(&server, "auth.enroll", "allow")
        .await
        .into_iter()
        .filter(|row| row.details["operation"] == "passkey_register_first")
        .collect();
    assert_eq!(allowed.len(), 1);
    assert_eq!(
        allowed[0].actor_id.as_deref(),
        Some(alice.person_id.as_str())
    );
    assert_eq!(allowed[0].details["passkey_id"], finish.body["passkey_id"]);

    // A second passkey this way: refused once the password and code are right.
    let again = first_start(
        &server,
        &alice.username,
        &alice.password,
        &alice.fresh_code(&server),
    )
    .await;
    assert_eq!(again.status, 409, "{:?}", again.body);
    assert_eq!(again.body["code"], "conflict");
    assert_eq!(again.body["reason"], "passkey_exists");
    let wrong = first_start(
        &server,
        &alice.username,
        "not the password at all",
        &alice.fresh_code(&server),
    )
    .await;
    assert_eq!(
        wrong.status, 401,
        "the conflict is said only to the right password and code"
    );

    // A disabled person: the same 401.
    let state = &server.state;
    admin::disable(
        state.db(),
        server.clock.now_ms(),
        PersonRef::Username("bob"),
        RoleAuthority::Operator,
    )
    .await
    .unwrap();
    let disabled = first_start(
        &server,
        &bob.username,
        &bob.password,
        &bob.fresh_code(&server),
    )
    .await;
    assert_eq!(disabled.body, unauthenticated_body());

    // The audit's order within one millisecond of the manual clock is not
    // the order of the calls: compare the reasons as a multiset.
    let mut denials = first_denials(&server).await;
    denials.sort();
    let mut expected = vec![
        "wrong_password",
        "wrong_totp",
        "unknown_username",
        "totp_replayed",
        "wrong_password",
        "challenge_invalid",
        "challenge_invalid",
        "challenge_invalid",
        "passkey_exists",
        "wrong_password",
        "person_inactive",
    ];
    expected.sort_unstable();
    assert_eq!(denials, expected);
    // The passkey logs in to the console; the step-up stays passkey-only.
    let console = console_login(&server, &alice, &mut key).await;
    let totp = console_post(
        &server,
        "/api/v1/auth/step-up",
        &console,
        Some(&console.csrf),
        Some(json!({"method": "totp", "code": alice.fresh_code(&server)})),
    )
    .await;
    assert_eq!(totp.status, 401);
    assert_eq!(totp.body["reason"], "passkey_required");

    let text = audit_and_event_text(&server).await;
    assert!(!text.contains(credential["id"].as_str().unwrap()));
    assert!(!text.contains("not the password at all"));
    assert!(!text.contains("mallory"));
    server.stop().await;
}

/// The first-passkey calls share `rl.public_auth` with the logins: failures
/// take tokens, an empty bucket is 429 before any check.
async fn first_passkey_is_rate_limited(engine: Engine) {
    let server = TestServer::start(engine).await;
    let alice = owner(&server, "alice").await;
    let code = alice.fresh_code(&server);
    let mut failures = 0;
    loop {
        let reply = first_start(&server, &alice.username, "wrong wrong wrong", &code).await;
        if reply.status == 429 {
            assert_eq!(reply.body["code"], "rate_limited");
            break;
        }
        assert_eq!(reply.status, 401);
        failures += 1;
        assert!(failures <= 10, "rl.public_auth holds ten tokens");
    }
    assert_eq!(failures, 10);
    let right = first_start(&server, &alice.username, &alice.password, &code).await;
    assert_eq!(right.status, 429, "before any check");
    let finish = first_finish(
        &server,
        &alice.username,
        &alice.password,
        &json!("0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"),
        &json!({}),
    )
    .await;
    assert_eq!(finish.status, 429);
    assert_eq!(first_denials(&server).await.len(), 10);
    server.stop().await;
}

both_engines!(
    first_passkey_with_password_and_totp,
    first_passkey_is_rate_limited,
    console_login_csrf_step_up_logout,
    console_login_failures_look_alike,
    cli_person_adds_passkey_after_totp_step_up,
);
