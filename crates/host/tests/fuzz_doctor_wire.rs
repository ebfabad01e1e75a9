//! Replays the kept inputs of the `doctor_wire` fuzz target — fuzz/seeds and
//! fuzz/regressions — through the same property function the target runs
//! (`bothy_host::doctor::fuzzing::doctor_wire`) on stable, in every `cargo
//! test`. Missing seeds fail the test.

#![allow(clippy::unwrap_used)]

use std::fs;
use std::path::{Path, PathBuf};

use bothy_host::doctor::acl::Acl;
use bothy_host::doctor::wire::{CheckAnswer, CheckRequest};

const TARGET: &str = "doctor_wire";

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
fn doctor_wire_inputs_hold_the_property() {
    let seeds = files(&fuzz_dir().join("seeds").join(TARGET));
    assert!(!seeds.is_empty(), "fuzz/seeds/{TARGET} has no inputs");
    let regressions = files(&fuzz_dir().join("regressions").join(TARGET));
    for path in seeds.iter().chain(&regressions) {
        let bytes = fs::read(path).unwrap();
        let outcome = std::panic::catch_unwind(|| bothy_host::doctor::fuzzing::doctor_wire(&bytes));
        assert!(outcome.is_ok(), "{} breaks the property", path.display());
    }
    // The seeds are accepted messages, so the round trips really ran.
    for path in &seeds {
        let bytes = fs::read(path).unwrap();
        assert!(
            CheckRequest::decode(&bytes).is_ok()
                || CheckAnswer::decode(&bytes).is_ok()
                || Acl::decode(&bytes).is_ok(),
            "{} should decode",
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
