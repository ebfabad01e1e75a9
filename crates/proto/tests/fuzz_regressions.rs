//! Replays every kept fuzz input — the seeds in `fuzz/seeds/<target>/` and the
//! crash inputs in `fuzz/regressions/<target>/` — through the same property
//! functions the fuzz targets run (`bothy_proto::fuzzing`), on stable, in every
//! `cargo test`. A seed folder that is missing or empty fails the test, so the
//! replay can never quietly check nothing.

use std::fs;
use std::path::{Path, PathBuf};

use bothy_proto::fuzzing::TARGETS;

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

fn inputs(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<(PathBuf, Vec<u8>)> = entries
        .map(|entry| entry.expect("readable directory entry").path())
        .filter(|path| path.is_file())
        .map(|path| {
            let bytes = fs::read(&path).expect("readable input");
            (path, bytes)
        })
        .collect();
    files.sort();
    files
}

#[test]
fn every_target_has_seeds_and_every_kept_input_holds_its_property() {
    let mut total = 0;
    for (target, check) in TARGETS {
        let seeds = inputs(&fuzz_dir().join("seeds").join(target));
        assert!(!seeds.is_empty(), "fuzz/seeds/{target} has no inputs");
        let regressions = inputs(&fuzz_dir().join("regressions").join(target));
        for (path, bytes) in seeds.iter().chain(&regressions) {
            let outcome = std::panic::catch_unwind(|| check(bytes));
            assert!(
                outcome.is_ok(),
                "{target}: {} breaks the property",
                path.display()
            );
            total += 1;
        }
        println!(
            "{target}: {} seeds, {} regressions",
            seeds.len(),
            regressions.len()
        );
    }
    assert!(total >= TARGETS.len());
}

#[test]
fn the_target_list_matches_the_fuzz_crate() {
    let manifest = fs::read_to_string(fuzz_dir().join("Cargo.toml")).expect("fuzz/Cargo.toml");
    for (target, _) in TARGETS {
        assert!(
            manifest.contains(&format!("name = \"{target}\"")),
            "{target} is not a target of fuzz/Cargo.toml"
        );
        assert!(
            fuzz_dir()
                .join(format!("fuzz_targets/{target}.rs"))
                .is_file()
        );
    }
}
