//! The web console served by the real server (issue 19): the page and its
//! bundle at `/` and `/assets/`, byte for byte the committed build in
//! `web/console/dist`, each with the strict Content-Security-Policy and the
//! other security headers, an unknown asset a 404 with the same headers.

#![allow(clippy::unwrap_used)]

use bothy_testkit as support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use bothy_server::db::Engine;
use bothy_server::http::console::{ASSETS, CONTENT_SECURITY_POLICY, SECURITY_HEADERS};
use support::server::TestServer;

fn dist() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../web/console/dist")
}

fn assert_security_headers(response: &reqwest::Response, what: &str) {
    for (name, value) in SECURITY_HEADERS {
        assert_eq!(
            response.headers().get(name).map(|v| v.to_str().unwrap()),
            Some(value),
            "{what}: header {name}"
        );
    }
    let csp = response.headers()["content-security-policy"]
        .to_str()
        .unwrap();
    let directives: Vec<&str> = csp.split(';').map(str::trim).collect();
    for required in [
        "default-src 'none'",
        "script-src 'self'",
        "worker-src 'self'",
        "connect-src 'self'",
        "frame-ancestors 'none'",
        "object-src 'none'",
        "base-uri 'none'",
    ] {
        assert!(
            directives.contains(&required),
            "{what}: {required} in {csp}"
        );
    }
    assert!(!csp.contains("unsafe-eval"), "{what}: no eval: {csp}");
    let script = directives
        .iter()
        .find(|d| d.starts_with("script-src"))
        .unwrap();
    assert!(!script.contains("unsafe-inline"), "{what}: {script}");
    assert_eq!(response.headers()["x-content-type-options"], "nosniff");
    assert_eq!(response.headers()["referrer-policy"], "no-referrer");
}

#[tokio::test]
async fn the_console_and_its_assets_are_served_with_the_security_headers() {
    let server = TestServer::start(Engine::Sqlite).await;
    for asset in ASSETS {
        let response = server
            .client
            .get(server.url(asset.path))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{}", asset.path);
        assert_security_headers(&response, asset.path);
        assert_eq!(response.headers()["content-type"], asset.content_type);
        let on_disk = std::fs::read(dist().join(asset.file)).unwrap();
        assert!(!on_disk.is_empty(), "{} is empty", asset.file);
        let body = response.bytes().await.unwrap();
        assert_eq!(
            body.as_ref(),
            on_disk.as_slice(),
            "{} is the committed build (rebuild the server after npm run build)",
            asset.path
        );

        let head = server
            .client
            .head(server.url(asset.path))
            .send()
            .await
            .unwrap();
        assert_eq!(head.status(), 200, "HEAD {}", asset.path);
        assert_security_headers(&head, asset.path);
    }

    let missing = server
        .client
        .get(server.url("/assets/../index.html.map"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    let missing = server
        .client
        .get(server.url("/assets/other.js"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    assert_security_headers(&missing, "unknown asset");

    // The API keeps its own answers: JSON problems, not the page.
    let api = server
        .client
        .get(server.url("/api/v1/nothing"))
        .send()
        .await
        .unwrap();
    assert_eq!(api.status(), 404);
    assert_eq!(api.headers()["content-type"], "application/problem+json");
    server.stop().await;
}

/// `web/console/dist` holds exactly the files the server embeds: a new output
/// of the build cannot go unserved, a removed one cannot linger.
#[test]
fn the_embedded_files_are_the_whole_build() {
    fn walk(dir: &Path, base: &Path, out: &mut BTreeSet<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, base, out);
            } else {
                let relative = path.strip_prefix(base).unwrap();
                out.insert(relative.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    let mut on_disk = BTreeSet::new();
    walk(&dist(), &dist(), &mut on_disk);
    let embedded: BTreeSet<String> = ASSETS.iter().map(|a| a.file.to_owned()).collect();
    assert_eq!(on_disk, embedded);
}

/// The page loads only its own files: no inline script, no inline event
/// handler, nothing from another origin — what the CSP would refuse anyway.
#[test]
fn the_page_has_no_inline_script() {
    let page = std::fs::read_to_string(dist().join("index.html")).unwrap();
    let lower = page.to_ascii_lowercase();
    let mut rest = lower.as_str();
    let mut scripts = 0;
    while let Some(at) = rest.find("<script") {
        let tag_end = rest[at..].find('>').unwrap() + at;
        let tag = &rest[at..tag_end];
        assert!(tag.contains("src=\"/assets/"), "inline script: {tag}");
        let close = rest[tag_end..].find("</script>").unwrap() + tag_end;
        assert_eq!(close, tag_end + 1, "a script with a body: {tag}");
        scripts += 1;
        rest = &rest[close..];
    }
    assert_eq!(scripts, 1);
    for handler in [" onload=", " onclick=", " onerror=", "javascript:"] {
        assert!(!lower.contains(handler), "{handler} in the page");
    }
    assert!(!lower.contains("http://") && !lower.contains("https://"));
    assert!(CONTENT_SECURITY_POLICY.contains("script-src 'self';"));
}
