//! The web console (`web/console`, spec 24 section 12 "Web console"; DESIGN
//! 3.1): the page at `/` and its bundle under `/assets/`, on the same origin as
//! the API so that the console's cookie, `connect-src 'self'` and the device
//! stream WebSocket need nothing else.
//!
//! The bundle is built by esbuild into `web/console/dist` and committed; this
//! module embeds those files with `include_bytes!`, so a fresh clone's
//! `cargo run -p bothy-server -- serve` serves the console without Node.js
//! (docs/decisions.md D-400; CI rebuilds the bundle and fails if it differs).
//!
//! Every response to a console path — the page, the assets and an unknown
//! asset's 404 (the router's problem) — carries [`SECURITY_HEADERS`], put on by
//! the layer [`security_headers`]: a strict Content-Security-Policy (no
//! inline script, no `eval`, `connect-src 'self'`, `frame-ancestors 'none'`),
//! `X-Content-Type-Options: nosniff`, `Referrer-Policy: no-referrer` and the
//! rest of the list.

use axum::extract::Request;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::http::{HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// One embedded file of the bundle.
#[derive(Debug, Clone, Copy)]
pub struct Asset {
    /// The URL path it is served at.
    pub path: &'static str,
    /// Its path under `web/console/dist`.
    pub file: &'static str,
    /// Its media type.
    pub content_type: &'static str,
    /// Its bytes.
    pub bytes: &'static [u8],
}

macro_rules! asset {
    ($path:literal, $file:literal, $content_type:literal) => {
        Asset {
            path: $path,
            file: $file,
            content_type: $content_type,
            // Relative to this file, not to `CARGO_MANIFEST_DIR`: Cargo keeps
            // a dependency below the package's folder (as this path is,
            // textually) relative to it, and an absolute one as it is, so a
            // target folder shared by two clones would not see the bundle of
            // the one it builds change (D-712).
            bytes: include_bytes!(concat!("../../../../web/console/dist/", $file)),
        }
    };
}

/// Every file of `web/console/dist` (a test checks the folder holds exactly
/// these, so a new output of the build cannot go unserved).
pub const ASSETS: [Asset; 4] = [
    asset!("/", "index.html", "text/html; charset=utf-8"),
    asset!(
        "/assets/console.js",
        "assets/console.js",
        "text/javascript; charset=utf-8"
    ),
    asset!(
        "/assets/console.css",
        "assets/console.css",
        "text/css; charset=utf-8"
    ),
    asset!(
        "/assets/stream-worker.js",
        "assets/stream-worker.js",
        "text/javascript; charset=utf-8"
    ),
];

/// The Content-Security-Policy of every console response. `style-src` allows
/// inline styles because xterm.js writes `<style>` elements and style
/// attributes for its cells (D-401); script stays `'self'` only, no `eval`.
/// `worker-src 'self'`: the stream worker of each session (D-700), and no
/// other (the worker's own response carries this policy too; it opens no
/// connection, the page holds the device stream's WebSocket).
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; \
     script-src 'self'; \
     worker-src 'self'; \
     style-src 'self' 'unsafe-inline'; \
     img-src 'self' data:; \
     font-src 'self'; \
     connect-src 'self'; \
     manifest-src 'self'; \
     base-uri 'none'; \
     form-action 'none'; \
     frame-ancestors 'none'; \
     object-src 'none'";

/// The headers on every console response.
pub const SECURITY_HEADERS: [(&str, &str); 7] = [
    ("content-security-policy", CONTENT_SECURITY_POLICY),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
    ("x-frame-options", "DENY"),
    ("cross-origin-opener-policy", "same-origin"),
    ("cross-origin-resource-policy", "same-origin"),
    (
        "permissions-policy",
        "camera=(), microphone=(), geolocation=(), payment=(), usb=(), \
         publickey-credentials-get=(self), publickey-credentials-create=(self)",
    ),
];

/// The web console's page.
#[utoipa::path(
    get,
    path = "/",
    operation_id = "getConsolePage",
    tag = "console",
    responses((status = 200, description = "The console's page, with the security headers \
        (D-401).", body = String, content_type = "text/html; charset=utf-8"))
)]
pub async fn page() -> Response {
    serve(ASSETS[0])
}

/// The web console's script bundle.
#[utoipa::path(
    get,
    path = "/assets/console.js",
    operation_id = "getConsoleScript",
    tag = "console",
    responses((status = 200, description = "The console's script, built by esbuild and \
        embedded at build time (D-400).", body = String,
        content_type = "text/javascript; charset=utf-8"))
)]
pub async fn script() -> Response {
    serve(ASSETS[1])
}

/// The web console's style sheet.
#[utoipa::path(
    get,
    path = "/assets/console.css",
    operation_id = "getConsoleStyle",
    tag = "console",
    responses((status = 200, description = "The console's style sheet (xterm.js's \
        included).", body = String, content_type = "text/css; charset=utf-8"))
)]
pub async fn style() -> Response {
    serve(ASSETS[2])
}

/// The stream worker of a session in the console (D-700).
#[utoipa::path(
    get,
    path = "/assets/stream-worker.js",
    operation_id = "getConsoleStreamWorker",
    tag = "console",
    responses((status = 200, description = "The stream worker of a console session: Noise \
        NK, the frames and the output filter of its device stream, beside the page's thread \
        (D-700).",
        body = String, content_type = "text/javascript; charset=utf-8"))
)]
pub async fn stream_worker() -> Response {
    serve(ASSETS[3])
}

fn serve(asset: Asset) -> Response {
    let mut response = asset.bytes.into_response();
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(asset.content_type));
    // The page and its bundle change together with the server: never a
    // stale bundle beside a new page.
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// Whether `path` is the console's: the page or anything under `/assets/`.
fn is_console_path(path: &str) -> bool {
    path == "/" || path.starts_with("/assets/")
}

/// The layer that puts [`SECURITY_HEADERS`] on every response to a console
/// path, the 404 of an unknown asset included (installed on the whole
/// router, fallbacks included).
pub async fn security_headers(request: Request, next: Next) -> Response {
    let console = is_console_path(request.uri().path());
    let mut response = next.run(request).await;
    if console {
        let headers = response.headers_mut();
        for (name, value) in SECURITY_HEADERS {
            headers.insert(
                HeaderName::from_static(name),
                HeaderValue::from_static(value),
            );
        }
    }
    response
}
