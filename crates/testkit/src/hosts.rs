//! Helpers of the host tests (`hosts_*.rs`), on top of [`crate::identity`]: an
//! owner (or member) logged in through the real routes, step-ups with fresh
//! TOTP codes, the two key pairs of a host service ([`HostKeys`]), the bodies
//! of createHost, host.pair and confirmHost, and one call per route that
//! returns the [`Reply`] as it came.
//!
//! Time moves only through the server's manual clock; every step-up takes a
//! fresh TOTP code, which moves it one TOTP step (30 s) forward.

use bothy_proto::fingerprint::{KeyFingerprint, key_fingerprint};
use bothy_proto::jwk::Ed25519PublicJwk;
use bothy_proto::jws::Ed25519SigningKey;
use reqwest::Method;
use reqwest::header::{HeaderName, HeaderValue};
use serde_json::{Value, json};
use sha2::{Digest, Sha512};
use sqlx::Row;

use crate::identity::{Enrolled, Reply, Session, get, invite, owner, post};
use crate::server::TestServer;

/// The default `terminal.fingerprint_confirm_chars`.
pub const CONFIRM_CHARS: usize = 8;

/// The `reason` every helper sends.
pub const REASON: &str = "pairing test host";

/// A person logged in on the CLI: what the helpers need to act for them.
#[derive(Debug)]
pub struct Person {
    /// The enrolled person (username, TOTP).
    pub enrolled: Enrolled,
    /// Their login session.
    pub session: Session,
}

impl Person {
    /// The bearer token.
    pub fn token(&self) -> &str {
        &self.session.token
    }

    /// The person's ID.
    pub fn id(&self) -> &str {
        &self.enrolled.person_id
    }
}

/// Bootstraps the first owner `username`, enrolls and logs them in (device 1).
pub async fn owner_person(server: &TestServer, username: &str) -> Person {
    let enrolled = owner(server, username).await;
    let session = enrolled.login(server, 1).await;
    Person { enrolled, session }
}

/// The owner invites `username` with `role` (`owner` or `member`); the person
/// enrolls and logs in from device `device_seed`.
pub async fn invited_person(
    server: &TestServer,
    by: &Person,
    username: &str,
    role: &str,
    device_seed: u8,
) -> Person {
    let enrolled = invite(server, by.token(), username, role).await;
    let session = enrolled.login(server, device_seed).await;
    Person { enrolled, session }
}

/// A fresh TOTP step-up of the person's login session; its `step_up_id`.
pub async fn step_up(server: &TestServer, person: &Person) -> String {
    let code = person.enrolled.fresh_code(server);
    let reply = post(
        server,
        "/api/v1/auth/step-up",
        Some(person.token()),
        json!({"method": "totp", "code": code}),
    )
    .await;
    assert_eq!(reply.status, 200, "step-up: {:?}", reply.body);
    reply.body["step_up_id"]
        .as_str()
        .expect("step_up_id")
        .to_owned()
}

/// The two key pairs a host service makes at `bothy-host pair` (4.1), derived
/// from one seed so a test can make the same keys again.
///
/// The Noise key is the X25519 form of an Ed25519 key (RFC 7748 / libsodium's
/// `ed25519_sk_to_curve25519`): private scalar = clamped first half of
/// SHA-512 of the seed, public = the Montgomery form of the Ed25519 public key.
/// So tests need no X25519 crate of their own, and the private part is there
/// for a test that runs the host side of a Noise handshake.
#[derive(Debug)]
pub struct HostKeys {
    /// The X25519 private key (clamped scalar).
    pub noise_private: [u8; 32],
    /// The X25519 public key (`noise_public_key`).
    pub noise_public: [u8; 32],
    /// The Ed25519 login key (`auth_public_jwk`, signs host-auth+jwt).
    pub auth: Ed25519SigningKey,
}

impl HostKeys {
    /// The keys of `seed` (different seeds, different keys).
    pub fn generate(seed: u8) -> HostKeys {
        let noise_seed = [seed; 32];
        let mut auth_seed = [seed; 32];
        auth_seed[0] ^= 0xa5;
        let digest = Sha512::digest(noise_seed);
        let mut noise_private = [0u8; 32];
        noise_private.copy_from_slice(&digest[..32]);
        noise_private[0] &= 248;
        noise_private[31] &= 127;
        noise_private[31] |= 64;
        let noise_public = Ed25519SigningKey::from_seed(&noise_seed)
            .verifying_key()
            .to_montgomery()
            .to_bytes();
        HostKeys {
            noise_private,
            noise_public,
            auth: Ed25519SigningKey::from_seed(&auth_seed),
        }
    }

    /// `noise_public_key` as host.pair sends it.
    pub fn noise_public_b64(&self) -> String {
        bothy_proto::b64::encode(&self.noise_public)
    }

    /// The public login key as a JWK.
    pub fn auth_jwk(&self) -> Ed25519PublicJwk {
        self.auth.public_jwk()
    }

    /// `auth_public_jwk` as host.pair sends it.
    pub fn auth_jwk_value(&self) -> Value {
        self.auth_jwk().to_value()
    }

    /// The RFC 7638 thumbprint of the login key (`hosts.auth_jkt`, the `kid`).
    pub fn auth_jkt(&self) -> String {
        self.auth_jwk().thumbprint()
    }

    /// The fingerprint of both keys (4.3).
    pub fn fingerprint(&self) -> KeyFingerprint {
        key_fingerprint(&self.noise_public, &self.auth_jwk().raw())
    }

    /// The first `terminal.fingerprint_confirm_chars` (default) characters of
    /// the fingerprint, as the owner types them.
    pub fn prefix(&self) -> String {
        fingerprint_prefix(&self.fingerprint(), CONFIRM_CHARS)
    }

    /// A well-formed prefix that does not match.
    pub fn wrong_prefix(&self) -> String {
        let right = self.prefix();
        let first = if right.starts_with('0') { "1" } else { "0" };
        format!("{first}{}", &right[1..])
    }
}

/// The first `chars` characters of a fingerprint without hyphens.
pub fn fingerprint_prefix(fingerprint: &KeyFingerprint, chars: usize) -> String {
    fingerprint.compact()[..chars].to_owned()
}

/// The prefix of the `key_fingerprint` a host.pair reply carries.
pub fn reply_prefix(reply: &Reply) -> String {
    let text = reply.body["key_fingerprint"]
        .as_str()
        .expect("key_fingerprint");
    text.replace('-', "")[..CONFIRM_CHARS].to_owned()
}

/// A session user of a host.pair report: its name and the display names of its
/// working directories.
pub fn session_user(name: &str, workdirs: &[&str]) -> Value {
    let workdirs: Vec<Value> = workdirs
        .iter()
        .map(|name| json!({"display_name": name}))
        .collect();
    json!({"name": name, "workdirs": workdirs})
}

/// A complete host.pair body (DESIGN 3.4): the keys, a shell and a claude
/// profile, the session users named (each without working directories).
pub fn pair_body(code: &str, keys: &HostKeys, session_users: &[&str]) -> Value {
    let users: Vec<Value> = session_users
        .iter()
        .map(|name| session_user(name, &[]))
        .collect();
    json!({
        "code": code,
        "noise_public_key": keys.noise_public_b64(),
        "auth_public_jwk": keys.auth_jwk_value(),
        "host_version": "1.4.0",
        "platform": "linux",
        "os_version": "Debian 12",
        "profiles": [
            {"name": "shell", "display_name": "Shell", "kind": "shell"},
            {"name": "claude", "display_name": "Claude Code", "kind": "claude"},
        ],
        "session_users": users,
        "require_local_confirm": false,
        "is_server_host": false,
    })
}

/// `POST /api/v1/hosts` with a body as given.
pub async fn create_host_with(server: &TestServer, by: &Person, body: Value) -> Reply {
    post(server, "/api/v1/hosts", Some(by.token()), body).await
}

/// The createHost body with a fresh step-up.
pub async fn create_body(
    server: &TestServer,
    by: &Person,
    name: &str,
    assignee: Option<&str>,
) -> Value {
    let step_up_id = step_up(server, by).await;
    let mut body = json!({"name": name, "reason": REASON, "step_up_id": step_up_id});
    if let Some(assignee) = assignee {
        body["assigned_user_id"] = json!(assignee);
    }
    body
}

/// createHost; asserts 201 and returns `(host_id, pairing_code)`.
pub async fn create_host(
    server: &TestServer,
    by: &Person,
    name: &str,
    assignee: Option<&str>,
) -> (String, String) {
    let body = create_body(server, by, name, assignee).await;
    let reply = create_host_with(server, by, body).await;
    assert_eq!(reply.status, 201, "createHost: {:?}", reply.body);
    (
        reply.body["host"]["id"]
            .as_str()
            .expect("host.id")
            .to_owned(),
        reply.body["pairing_code"]
            .as_str()
            .expect("pairing_code")
            .to_owned(),
    )
}

/// `POST /api/v1/hosts/pair` (public) with a body as given.
pub async fn pair_with(server: &TestServer, body: Value) -> Reply {
    post(server, "/api/v1/hosts/pair", None, body).await
}

/// host.pair with [`pair_body`].
pub async fn pair(server: &TestServer, code: &str, keys: &HostKeys, users: &[&str]) -> Reply {
    pair_with(server, pair_body(code, keys, users)).await
}

/// issueHostPairingCode with a fresh step-up.
pub async fn issue_pairing_code(server: &TestServer, by: &Person, host_id: &str) -> Reply {
    let step_up_id = step_up(server, by).await;
    post(
        server,
        &format!("/api/v1/hosts/{host_id}/pairing-code"),
        Some(by.token()),
        json!({"reason": REASON, "step_up_id": step_up_id}),
    )
    .await
}

/// The new pairing code of an issueHostPairingCode that must succeed.
pub async fn new_pairing_code(server: &TestServer, by: &Person, host_id: &str) -> String {
    let reply = issue_pairing_code(server, by, host_id).await;
    assert_eq!(reply.status, 200, "issueHostPairingCode: {:?}", reply.body);
    reply.body["pairing_code"]
        .as_str()
        .expect("pairing_code")
        .to_owned()
}

/// One requested assignment of confirmHost: `(user_id, os_user)`.
pub type Assignment<'a> = (&'a str, &'a str);

/// The confirmHost body with a fresh step-up.
#[allow(clippy::too_many_arguments)]
pub async fn confirm_body(
    server: &TestServer,
    by: &Person,
    prefix: &str,
    llm_credentials: &str,
    credential_holder_id: Option<&str>,
    declared_server_host: bool,
    assignments: &[Assignment<'_>],
) -> Value {
    let step_up_id = step_up(server, by).await;
    let session_users: Vec<Value> = assignments
        .iter()
        .map(|(user_id, os_user)| json!({"user_id": user_id, "os_user": os_user}))
        .collect();
    let mut body = json!({
        "fingerprint_prefix": prefix,
        "llm_credentials": llm_credentials,
        "declared_server_host": declared_server_host,
        "session_users": session_users,
        "reason": REASON,
        "step_up_id": step_up_id,
    });
    if let Some(holder) = credential_holder_id {
        body["credential_holder_id"] = json!(holder);
    }
    body
}

/// Any request: `method path` with an optional bearer token, an optional
/// JSON body and extra headers (`Idempotency-Key`, `If-Match`, ...).
pub async fn send(
    server: &TestServer,
    method: Method,
    path: &str,
    token: Option<&str>,
    body: Option<&Value>,
    headers: &[(&str, &str)],
) -> Reply {
    let mut request = server.client.request(method, server.url(path));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(body) = body {
        request = request.json(body);
    }
    for (name, value) in headers {
        request = request.header(
            HeaderName::from_bytes(name.as_bytes()).expect("header name"),
            HeaderValue::from_str(value).expect("header value"),
        );
    }
    let response = request.send().await.expect("request");
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

/// `POST /api/v1/hosts/{host_id}/confirm` with a body and extra headers
/// (`Idempotency-Key`, `If-Match`) as given.
pub async fn confirm_with(
    server: &TestServer,
    by: &Person,
    host_id: &str,
    body: &Value,
    headers: &[(&str, &str)],
) -> Reply {
    send(
        server,
        Method::POST,
        &format!("/api/v1/hosts/{host_id}/confirm"),
        Some(by.token()),
        Some(body),
        headers,
    )
    .await
}

/// confirmHost with a fresh step-up and no extra headers.
#[allow(clippy::too_many_arguments)]
pub async fn confirm(
    server: &TestServer,
    by: &Person,
    host_id: &str,
    prefix: &str,
    llm_credentials: &str,
    credential_holder_id: Option<&str>,
    declared_server_host: bool,
    assignments: &[Assignment<'_>],
) -> Reply {
    let body = confirm_body(
        server,
        by,
        prefix,
        llm_credentials,
        credential_holder_id,
        declared_server_host,
        assignments,
    )
    .await;
    confirm_with(server, by, host_id, &body, &[]).await
}

/// `GET /api/v1/hosts/{host_id}`.
pub async fn get_host(server: &TestServer, token: &str, host_id: &str) -> Reply {
    get(server, &format!("/api/v1/hosts/{host_id}"), Some(token)).await
}

/// An active host, made through every step of 3.2.
#[derive(Debug)]
pub struct ActiveHost {
    /// Its ID.
    pub host_id: String,
    /// The keys it paired with.
    pub keys: HostKeys,
    /// The host after the confirmation (`host` of confirmHost).
    pub host: Value,
}

/// createHost (assignee as given), host.pair with `keys_seed` and the session
/// users `users`, confirmHost with the right prefix, `llm_credentials` none,
/// `declared_server_host` false and `assignments`; asserts every step.
pub async fn active_host(
    server: &TestServer,
    by: &Person,
    name: &str,
    assignee: Option<&str>,
    keys_seed: u8,
    users: &[&str],
    assignments: &[Assignment<'_>],
) -> ActiveHost {
    active_host_declared(
        server,
        by,
        name,
        assignee,
        keys_seed,
        users,
        ("none", None),
        assignments,
    )
    .await
}

/// [`active_host`] with a declaration `(llm_credentials, credential_holder_id)`.
#[allow(clippy::too_many_arguments)]
pub async fn active_host_declared(
    server: &TestServer,
    by: &Person,
    name: &str,
    assignee: Option<&str>,
    keys_seed: u8,
    users: &[&str],
    declaration: (&str, Option<&str>),
    assignments: &[Assignment<'_>],
) -> ActiveHost {
    let (host_id, code) = create_host(server, by, name, assignee).await;
    let keys = HostKeys::generate(keys_seed);
    let paired = pair(server, &code, &keys, users).await;
    assert_eq!(paired.status, 200, "host.pair: {:?}", paired.body);
    assert_eq!(paired.body["host_id"], host_id.as_str());
    let confirmed = confirm(
        server,
        by,
        &host_id,
        &reply_prefix(&paired),
        declaration.0,
        declaration.1,
        false,
        assignments,
    )
    .await;
    assert_eq!(confirmed.status, 200, "confirmHost: {:?}", confirmed.body);
    assert_eq!(confirmed.body["host"]["state"], "active");
    ActiveHost {
        host_id,
        keys,
        host: confirmed.body["host"].clone(),
    }
}

/// The `ETag` of a reply.
pub fn etag_of(reply: &Reply) -> String {
    reply
        .headers
        .get("etag")
        .expect("ETag")
        .to_str()
        .expect("ETag text")
        .to_owned()
}

/// The payloads of every `host.updated` of `host_id`, oldest first.
pub async fn host_updated_events(server: &TestServer, host_id: &str) -> Vec<Value> {
    sqlx::query(
        "SELECT audience_kind, audience_id, payload FROM events \
         WHERE kind = 'host.updated' ORDER BY position",
    )
    .fetch_all(server.state.db().pool())
    .await
    .expect("read events")
    .iter()
    .filter(|row| row.get::<Option<String>, _>("audience_id").as_deref() == Some(host_id))
    .map(|row| {
        assert_eq!(row.get::<String, _>("audience_kind"), "host_readers");
        serde_json::from_str(&row.get::<String, _>("payload")).expect("payload JSON")
    })
    .collect()
}

/// The permission version.
pub async fn permission_version(server: &TestServer) -> i64 {
    sqlx::query_scalar("SELECT version FROM permission_version WHERE id = 1")
        .fetch_one(server.state.db().pool())
        .await
        .expect("permission version")
}
