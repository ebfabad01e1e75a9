//! docs/configuration.md stays true: it names every key of the configuration,
//! and its example is a valid configuration.

#![allow(clippy::unwrap_used)]

use bothy_server::config::Config;

fn reference() -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/configuration.md");
    std::fs::read_to_string(path).unwrap()
}

#[test]
fn every_key_is_documented() {
    let doc = reference();
    let keys = Config::keys();
    assert!(keys.len() > 40, "the schema lists its keys");
    for key in keys {
        // server.tls.cert_file is documented as part of `server.tls`.
        let documented = doc.contains(&format!("`{key}`"))
            || key.starts_with("server.tls.")
            || key.starts_with("rl.");
        assert!(documented, "{key} is missing from docs/configuration.md");
    }
    for limit in ["rl.public_auth", "rl.terminal", "rl.host"] {
        assert!(doc.contains(&format!("`{limit}`")), "{limit}");
    }
}

#[test]
fn the_example_is_a_valid_configuration() {
    let doc = reference();
    let start = doc.find("```yaml\n").unwrap() + "```yaml\n".len();
    let end = start + doc[start..].find("```").unwrap();
    let config = Config::from_yaml_str(&doc[start..end]).unwrap();
    assert_eq!(config.terminal.idle_timeout.as_secs(), 45 * 60);
}
