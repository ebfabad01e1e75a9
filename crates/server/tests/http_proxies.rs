//! `server.trusted_proxies` (issue 18, D-506) against the real server on both
//! engines: behind a trusted edge, failed logins of two forwarded client
//! addresses land in two `rl.public_auth` buckets; from a peer that is not a
//! trusted proxy a forged `X-Forwarded-For` or `Forwarded` is ignored and the
//! TCP peer's bucket counts. The edge is the test's client on 127.0.0.1; the
//! untrusted peer the same client bound to 127.0.0.2.

#![allow(clippy::unwrap_used)] // test bodies are plain fns called by the generated #[test]s

use bothy_testkit as support;
use bothy_testkit::identity as identity_common;

use bothy_server::db::Engine;
use identity_common::owner;
use serde_json::{Value, json};
use support::both_engines;
use support::server::TestServer;

const LIMITS: &str = "rl:\n  public_auth: {burst: 2, refill_per_minute: 1}\n";

async fn failed_login(
    client: &reqwest::Client,
    server: &TestServer,
    body: &Value,
    header: Option<(&str, &str)>,
) -> u16 {
    let mut request = client.post(server.url("/api/v1/auth/login")).json(body);
    if let Some((name, value)) = header {
        request = request.header(name, value);
    }
    request.send().await.unwrap().status().as_u16()
}

fn wrong_login(server: &TestServer, alice: &identity_common::Enrolled) -> Value {
    let mut body = alice.login_body(server, 1);
    body["password"] = json!("wrong wrong wrong");
    body
}

async fn forwarded_clients_get_their_own_buckets(engine: Engine) {
    let yaml = format!("server:\n  trusted_proxies: '127.0.0.1, 10.0.0.0/8'\n{LIMITS}");
    let server = TestServer::start_with(engine, &yaml).await;
    let alice = owner(&server, "alice").await;
    let wrong = wrong_login(&server, &alice);
    let edge = server.client_from("127.0.0.1".parse().unwrap());
    let first = ("x-forwarded-for", "203.0.113.1");
    // A client-written hop on the left does not choose the bucket: the
    // rightmost address that is no trusted proxy does.
    let first_again = ("x-forwarded-for", "198.51.100.77, 203.0.113.1, 10.0.0.5");
    let second = ("forwarded", "for=\"[2001:db8::2]:5000\";proto=https");

    for header in [first, first_again] {
        assert_eq!(
            failed_login(&edge, &server, &wrong, Some(header)).await,
            401
        );
    }
    assert_eq!(failed_login(&edge, &server, &wrong, Some(first)).await, 429);
    // Another forwarded client still has its own bucket.
    for _ in 0..2 {
        assert_eq!(
            failed_login(&edge, &server, &wrong, Some(second)).await,
            401
        );
    }
    assert_eq!(
        failed_login(&edge, &server, &wrong, Some(second)).await,
        429
    );
    // The edge's own address (no header) is a third bucket.
    assert_eq!(failed_login(&edge, &server, &wrong, None).await, 401);
}

async fn a_forged_header_from_an_untrusted_peer_is_ignored(engine: Engine) {
    let yaml = format!("server:\n  trusted_proxies: '127.0.0.1'\n{LIMITS}");
    let server = TestServer::start_with(engine, &yaml).await;
    let alice = owner(&server, "alice").await;
    let wrong = wrong_login(&server, &alice);
    let untrusted = server.client_from("127.0.0.2".parse().unwrap());
    // Each attempt claims another client; all count against 127.0.0.2.
    let forged = [
        ("x-forwarded-for", "203.0.113.1"),
        ("forwarded", "for=203.0.113.2"),
        ("x-forwarded-for", "203.0.113.3"),
    ];
    assert_eq!(
        failed_login(&untrusted, &server, &wrong, Some(forged[0])).await,
        401
    );
    assert_eq!(
        failed_login(&untrusted, &server, &wrong, Some(forged[1])).await,
        401
    );
    assert_eq!(
        failed_login(&untrusted, &server, &wrong, Some(forged[2])).await,
        429
    );
    // The trusted edge forwarding 203.0.113.1 is untouched by the forgeries.
    let edge = server.client_from("127.0.0.1".parse().unwrap());
    assert_eq!(
        failed_login(&edge, &server, &wrong, Some(forged[0])).await,
        401
    );
}

/// Without `server.trusted_proxies` (the default) no header is read.
async fn no_trusted_proxy_by_default(engine: Engine) {
    let server = TestServer::start_with(engine, LIMITS).await;
    let alice = owner(&server, "alice").await;
    let wrong = wrong_login(&server, &alice);
    let edge = server.client_from("127.0.0.1".parse().unwrap());
    for (value, status) in [
        ("203.0.113.1", 401),
        ("203.0.113.2", 401),
        ("203.0.113.3", 429),
    ] {
        let reply = failed_login(&edge, &server, &wrong, Some(("x-forwarded-for", value))).await;
        assert_eq!(reply, status);
    }
}

both_engines!(
    forwarded_clients_get_their_own_buckets,
    a_forged_header_from_an_untrusted_peer_is_ignored,
    no_trusted_proxy_by_default,
);
