//! The server's layering rule (issue 17, docs/ARCHITECTURE.md "Rules the crates
//! keep"): the domain modules — `identity`, `hosts`, `permissions`, `terminal`
//! and the one end function in `revocation.rs` — know nothing of HTTP. They
//! return domain errors; `http/problem` maps them to problems, `http/extract.rs`
//! authenticates requests, and idempotency is stored under `db/`.

use std::fs;
use std::path::{Path, PathBuf};

/// What a line of domain code may not name: the web layer and its error types.
const FORBIDDEN: &[&str] = &[
    "crate::http",
    "ApiError",
    "ProblemCode",
    "StatusCode",
    "IntoResponse",
    "FromRequestParts",
];

fn rust_files(path: &Path, out: &mut Vec<PathBuf>) {
    if path.is_file() {
        out.push(path.to_path_buf());
        return;
    }
    let mut entries: Vec<_> = fs::read_dir(path)
        .expect("a domain folder")
        .map(|entry| entry.expect("a directory entry").path())
        .collect();
    entries.sort();
    for entry in entries {
        if entry.is_dir() || entry.extension().is_some_and(|ext| ext == "rs") {
            rust_files(&entry, out);
        }
    }
}

/// The offending `file:line: text` of `files`; doc and line comments may name
/// the web layer (they explain where a route lives), code may not.
fn offences(files: &[PathBuf]) -> Vec<String> {
    let mut found = Vec::new();
    for file in files {
        let text = fs::read_to_string(file).expect("a source file");
        for (number, line) in text.lines().enumerate() {
            let code = line.trim_start();
            if code.starts_with("//") {
                continue;
            }
            if FORBIDDEN.iter().any(|name| code.contains(name)) {
                found.push(format!("{}:{}: {}", file.display(), number + 1, code));
            }
        }
    }
    found
}

#[test]
fn the_domain_modules_know_no_http() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    for domain in [
        "identity",
        "hosts",
        "permissions",
        "terminal",
        "revocation.rs",
    ] {
        rust_files(&src.join(domain), &mut files);
    }
    // The walk found the domain (a renamed folder must not empty the check).
    assert!(files.len() >= 40, "only {} domain files found", files.len());
    let found = offences(&files);
    assert!(
        found.is_empty(),
        "the domain names the web layer:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_check_sees_an_import_of_the_web_layer() {
    let dir = std::env::temp_dir().join(format!("bothy-layers-{}", std::process::id()));
    fs::create_dir_all(&dir).expect("a temporary folder");
    let file = dir.join("domain.rs");
    fs::write(
        &file,
        "//! crate::http in a comment is fine\nuse crate::http::ApiError;\n",
    )
    .expect("a file");
    let found = offences(std::slice::from_ref(&file));
    fs::remove_dir_all(&dir).expect("the folder removed");
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].ends_with(":2: use crate::http::ApiError;"),
        "{found:?}"
    );
}
