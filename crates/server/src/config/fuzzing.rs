//! The property the `config_yaml` fuzz target checks (`fuzz/fuzz_targets/`),
//! shared with the regression test that replays every kept input
//! (`tests/fuzz_regressions.rs`). Not part of the API: it panics when the
//! property does not hold.
#![allow(clippy::expect_used, clippy::panic)]

use super::Config;

/// Configuration decoding (D-15): never a panic on any input, and an accepted
/// configuration whose database URL carries no password prints (`config check`)
/// to YAML that decodes to the same configuration.
pub fn config_yaml(input: &[u8]) {
    let Ok(text) = std::str::from_utf8(input) else {
        return;
    };
    if let Ok(config) = Config::from_yaml_str(text) {
        let printed = config.to_redacted_yaml();
        if !printed.contains("***") {
            let again = Config::from_yaml_str(&printed).expect("printed configuration decodes");
            assert_eq!(again, config);
        }
    }
}
