//! Replays the kept inputs of the `config_yaml` fuzz target — fuzz/seeds and
//! fuzz/regressions — through the same property function the target runs
//! (`bothy_server::config::fuzzing::config_yaml`) on stable, in every `cargo
//! test`. Missing seeds fail the test.

#![allow(clippy::unwrap_used)]

use std::fs;
use std::path::{Path, PathBuf};

const TARGET: &str = "config_yaml";

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

#[test]
fn config_inputs_hold_the_property() {
    let seeds = files(&fuzz_dir().join("seeds").join(TARGET));
    assert!(!seeds.is_empty(), "fuzz/seeds/{TARGET} has no inputs");
    let regressions = files(&fuzz_dir().join("regressions").join(TARGET));
    for path in seeds.iter().chain(&regressions) {
        let bytes = fs::read(path).unwrap();
        let outcome =
            std::panic::catch_unwind(|| bothy_server::config::fuzzing::config_yaml(&bytes));
        assert!(outcome.is_ok(), "{} breaks the property", path.display());
    }
    // The seeds are accepted configurations, so the round trip really ran.
    for path in &seeds {
        let text = fs::read_to_string(path).unwrap();
        assert!(
            bothy_server::config::Config::from_yaml_str(&text).is_ok(),
            "{} should be a valid configuration",
            path.display()
        );
    }
}

#[test]
fn the_target_is_in_the_fuzz_crate() {
    let manifest = fs::read_to_string(fuzz_dir().join("Cargo.toml")).unwrap();
    assert!(manifest.contains(&format!("name = \"{TARGET}\"")));
    assert!(
        fuzz_dir()
            .join(format!("fuzz_targets/{TARGET}.rs"))
            .is_file()
    );
}
