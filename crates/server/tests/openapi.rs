//! The OpenAPI document (docs/decisions.md D-22): the committed
//! `docs/api/openapi.json` is exactly what the handlers generate; the real
//! server routes exactly the documented paths and methods and serves the same
//! document at `GET /api/v1/openapi.json`, and `bothy-server openapi` prints it
//! without a configuration; every operation has an operationId
//! (DESIGN 3.4's names where it names one), a declared tag, and its problem
//! responses.

#![allow(clippy::unwrap_used)] // test bodies

use bothy_testkit as support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use bothy_server::db::Engine;
use bothy_server::http::{self, api_doc};
use serde_json::Value;
use support::both_engines;
use support::server::TestServer;

const REGENERATE: &str = "cargo run -p bothy-server -- openapi > docs/api/openapi.json";

/// The methods an OpenAPI path item can hold that the API might route (HEAD
/// follows GET in axum and is not listed separately).
const METHODS: &[&str] = &["get", "put", "post", "delete", "options", "patch", "trace"];

/// Operations whose handler cannot fail: no problem response is required.
const INFALLIBLE: &[&str] = &[
    "healthz",
    "getConsolePage",
    "getConsoleScript",
    "getConsoleStyle",
    "getConsoleStreamWorker",
];

/// The operations that take no credential.
const PUBLIC_OPERATIONS: &[&str] = &[
    "healthz",
    "getConsolePage",
    "getConsoleScript",
    "getConsoleStyle",
    "getConsoleStreamWorker",
    "readyz",
    "metrics",
    "getOpenApi",
    "checkEnrollmentCode",
    "enroll",
    "confirmEnrollment",
    "login",
    "startPasskeyEnrollment",
    "finishPasskeyEnrollment",
    "startConsoleLogin",
    "finishConsoleLogin",
    "startFirstPasskey",
    "finishFirstPasskey",
];

/// The host service's routes (DESIGN 3.4): pairing is public, the host's
/// WebSockets authenticate with the host's own proof, not a person's credential.
const PUBLIC_HOST_PATHS: &[&str] = &[
    "/api/v1/hosts/pair",
    "/api/v1/hosts/connect",
    "/api/v1/hosts/sessions/{session_id}/stream",
    // The device stream authenticates in its first frame (identify with the
    // access token), not at the upgrade (DESIGN 3.4 "Device stream login").
    "/api/v1/terminal/sessions/{session_id}/stream",
];

/// The operation names DESIGN 3.4 fixes (and `login`, `stepUp` of its pinned
/// members table): when the route exists, its operationId is this name.
const DESIGN_NAMES: &[(&str, &str, &str)] = &[
    ("createHost", "post", "/api/v1/hosts"),
    (
        "issueHostPairingCode",
        "post",
        "/api/v1/hosts/{host_id}/pairing-code",
    ),
    ("confirmHost", "post", "/api/v1/hosts/{host_id}/confirm"),
    ("updateHost", "patch", "/api/v1/hosts/{host_id}"),
    (
        "setHostLlmCredentials",
        "put",
        "/api/v1/hosts/{host_id}/llm-credentials",
    ),
    (
        "openTerminalSession",
        "post",
        "/api/v1/hosts/{host_id}/terminal/sessions",
    ),
    (
        "attachTerminalSession",
        "post",
        "/api/v1/terminal/sessions/{session_id}/attach",
    ),
    (
        "closeTerminalSession",
        "post",
        "/api/v1/terminal/sessions/{session_id}/close",
    ),
    ("login", "post", "/api/v1/auth/login"),
    ("stepUp", "post", "/api/v1/auth/step-up"),
];

fn generated() -> String {
    api_doc::to_json(&http::openapi()).unwrap()
}

fn document() -> Value {
    serde_json::from_str(&generated()).unwrap()
}

fn committed_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/api/openapi.json")
}

/// `(method, path, operation)` of every operation of `document`.
fn operations(document: &Value) -> Vec<(String, String, Value)> {
    let mut found = Vec::new();
    for (path, item) in document["paths"].as_object().unwrap() {
        for method in METHODS {
            if let Some(operation) = item.get(*method) {
                found.push((method.to_string(), path.clone(), operation.clone()));
            }
        }
    }
    found
}

#[test]
fn the_committed_document_is_the_generated_one() {
    let generated = generated();
    let path = committed_path();
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if committed == generated {
        return;
    }
    let first_difference = committed
        .lines()
        .zip(generated.lines())
        .position(|(a, b)| a != b)
        .unwrap_or_else(|| committed.lines().count().min(generated.lines().count()));
    panic!(
        "docs/api/openapi.json ({}) is not the document the handlers generate (first \
         difference at line {}: committed {:?}, generated {:?}). Regenerate it from the \
         workspace root with `{REGENERATE}` and commit it.",
        path.display(),
        first_difference + 1,
        committed.lines().nth(first_difference).unwrap_or("<end>"),
        generated.lines().nth(first_difference).unwrap_or("<end>"),
    );
}

/// `bothy-server openapi` prints the same bytes and reads no configuration: a
/// configuration file that does not exist and an unknown override change nothing.
#[test]
fn the_cli_prints_the_document_without_configuration() {
    let home = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_bothy-server"))
        .arg("openapi")
        .env_clear()
        .env("HOME", home.path())
        .env("BOTHY_CONFIG", home.path().join("no-such-config.yaml"))
        .env("BOTHY_NO_SUCH__KEY", "1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8(out.stdout).unwrap(), generated());
}

#[test]
fn the_document_is_openapi_3_1_and_deterministic() {
    let document = document();
    assert_eq!(document["openapi"], "3.1.0");
    assert_eq!(generated(), generated(), "two builds give the same bytes");
    assert!(
        generated().ends_with("}\n"),
        "pretty JSON with a trailing newline"
    );
}

#[test]
fn every_operation_is_named_tagged_and_has_its_problems() {
    let document = document();
    let declared_tags: BTreeSet<&str> = document["tags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tag| tag["name"].as_str().unwrap())
        .collect();
    let schemes: BTreeSet<&str> = document["components"]["securitySchemes"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let mut ids = BTreeMap::new();
    for (method, path, operation) in operations(&document) {
        let at = format!("{} {path}", method.to_uppercase());
        let id = operation["operationId"]
            .as_str()
            .unwrap_or_else(|| panic!("{at}: no operationId"));
        let camel_case = id.chars().next().is_some_and(|c| c.is_ascii_lowercase())
            && id.chars().all(|c| c.is_ascii_alphanumeric());
        assert!(camel_case, "{at}: operationId {id:?} is not camelCase");
        if let Some(other) = ids.insert(id.to_owned(), at.clone()) {
            panic!("operationId {id:?} is used by {other} and {at}");
        }

        let tags = operation["tags"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        assert!(!tags.is_empty(), "{at}: no tag");
        for tag in tags {
            let tag = tag.as_str().unwrap();
            assert!(
                declared_tags.contains(tag),
                "{at}: tag {tag:?} is not declared in api_doc's tags"
            );
        }
        assert!(
            operation["summary"].as_str().is_some_and(|s| !s.is_empty()),
            "{at}: no summary (the handler's doc comment)"
        );

        // Every 4xx and 5xx answer is a Problem, and a handler that can fail
        // lists at least one.
        let responses = operation["responses"].as_object().unwrap();
        let mut problems = 0;
        for (status, response) in responses {
            let Some(class) = status.chars().next() else {
                continue;
            };
            if class != '4' && class != '5' {
                continue;
            }
            let schema = &response["content"]["application/problem+json"]["schema"]["$ref"];
            assert_eq!(
                schema, "#/components/schemas/Problem",
                "{at}: the {status} response is not application/problem+json with Problem"
            );
            problems += 1;
        }
        if !INFALLIBLE.contains(&id) {
            assert!(problems > 0, "{at}: no 4xx/5xx problem response");
        }

        // What the shared extractors refuse is listed where they run.
        let has = |status: &str| responses.contains_key(status);
        if operation.get("requestBody").is_some() {
            let body = &operation["requestBody"];
            assert!(
                body["content"]["application/json"].is_object(),
                "{at}: the request body is not application/json"
            );
            for status in ["400", "413", "415"] {
                assert!(has(status), "{at}: takes a body but lists no {status}");
            }
        }
        match operation.get("security").and_then(Value::as_array) {
            Some(requirements) => {
                assert!(has("401"), "{at}: authenticated but lists no 401");
                for requirement in requirements {
                    for scheme in requirement.as_object().unwrap().keys() {
                        assert!(
                            schemes.contains(scheme.as_str()),
                            "{at}: unknown security scheme {scheme:?}"
                        );
                    }
                }
            }
            None => assert!(
                PUBLIC_OPERATIONS.contains(&id) || PUBLIC_HOST_PATHS.contains(&path.as_str()),
                "{at}: no security requirement, and it is not one of the public routes \
                 (a route that takes a credential names it in `security(...)`)"
            ),
        }
    }

    for (name, method, path) in DESIGN_NAMES {
        if let Some(operation) = document["paths"][path].get(*method) {
            assert_eq!(
                operation["operationId"],
                *name,
                "{} {path}: DESIGN 3.4 names it {name}",
                method.to_uppercase()
            );
        }
    }
}

#[test]
fn every_reference_resolves() {
    let document = document();
    let schemas = document["components"]["schemas"].as_object().unwrap();
    let mut stack = vec![&document];
    while let Some(value) = stack.pop() {
        match value {
            Value::Object(members) => {
                if let Some(Value::String(target)) = members.get("$ref") {
                    let name = target
                        .strip_prefix("#/components/schemas/")
                        .unwrap_or_else(|| panic!("unexpected $ref {target}"));
                    assert!(schemas.contains_key(name), "unresolved $ref {target}");
                }
                stack.extend(members.values());
            }
            Value::Array(items) => stack.extend(items),
            _ => {}
        }
    }
}

/// Routing only through `routes!`: a `.route(...)` (or a nested service) in the
/// HTTP module would serve a path the document does not have.
#[test]
fn the_router_is_built_only_from_documented_handlers() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src/http");
    let mut files = vec![root];
    let mut offenders = Vec::new();
    while let Some(path) = files.pop() {
        if path.is_dir() {
            files.extend(
                std::fs::read_dir(&path)
                    .unwrap()
                    .map(|entry| entry.unwrap().path()),
            );
            continue;
        }
        if path.extension().is_none_or(|ext| ext != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for (number, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for call in [".route(", ".route_service(", ".nest(", ".nest_service("] {
                if code.contains(call) {
                    offenders.push(format!(
                        "{}:{}: {}",
                        path.display(),
                        number + 1,
                        line.trim()
                    ));
                }
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "register routes with `.routes(routes!(handler))` so they are documented:\n{}",
        offenders.join("\n")
    );
}

/// A concrete URL for a templated path: every `{param}` becomes a fresh UUID.
fn concrete(path: &str) -> String {
    let mut url = String::new();
    let mut rest = path;
    while let Some(start) = rest.find('{') {
        url.push_str(&rest[..start]);
        let end = rest[start..].find('}').unwrap() + start;
        url.push_str("0190a5b8-0000-7000-8000-000000000000");
        rest = &rest[end + 1..];
    }
    url.push_str(rest);
    url
}

async fn the_server_routes_and_serves_exactly_the_document(engine: Engine) {
    let server = TestServer::start(engine).await;

    let served = server
        .client
        .get(server.url("/api/v1/openapi.json"))
        .send()
        .await
        .unwrap();
    assert_eq!(served.status(), 200);
    assert_eq!(served.headers()["content-type"], "application/json");
    let text = served.text().await.unwrap();
    assert_eq!(
        text,
        generated(),
        "the server serves the generated document"
    );

    // Every documented method of a documented path reaches a handler; every
    // other method of it is the router's 405.
    let document = document();
    for (path, item) in document["paths"].as_object().unwrap() {
        let url = server.url(&concrete(path));
        for method in METHODS {
            let request = server
                .client
                .request(method.to_uppercase().parse().unwrap(), &url)
                .send()
                .await
                .unwrap();
            let status = request.status().as_u16();
            let body: Value = request.json().await.unwrap_or(Value::Null);
            if item.get(*method).is_some() {
                assert_ne!(status, 405, "{method} {path} is documented but not routed");
            } else {
                assert_eq!(status, 405, "{method} {path} is routed but not documented");
                assert_eq!(body["code"], "method_not_allowed");
            }
        }
    }
    server.stop().await;
}

both_engines!(the_server_routes_and_serves_exactly_the_document);
