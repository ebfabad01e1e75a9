//! Replays every kept input of the fuzz targets of `bothy_host::fuzzing` —
//! the seeds in `fuzz/seeds/<target>/` and the crash inputs in
//! `fuzz/regressions/<target>/` — through the same property functions the
//! targets run, on stable, in every `cargo test`. A seed folder that is missing
//! or empty fails the test, so the replay can never quietly check nothing.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::path::{Path, PathBuf};

use bothy_host::channel::message::{FromHelper, Message, ToHelper};
use bothy_host::fuzzing::TARGETS;

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

fn inputs(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<(PathBuf, Vec<u8>)> = entries
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.is_file())
        .map(|path| {
            let bytes = fs::read(&path).unwrap();
            (path, bytes)
        })
        .collect();
    files.sort();
    files
}

#[test]
fn every_target_has_seeds_and_every_kept_input_holds_its_property() {
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
        }
    }
}

#[test]
fn the_channel_seeds_are_messages_so_the_round_trip_really_runs() {
    let seeds = inputs(&fuzz_dir().join("seeds/channel_decode"));
    assert!(!seeds.is_empty());
    for (path, bytes) in &seeds {
        let length = bothy_host::channel::message::body_length(bytes).unwrap() + 4;
        let first = &bytes[..length];
        assert!(
            ToHelper::decode_frame(first).is_ok() || FromHelper::decode_frame(first).is_ok(),
            "{} is no message",
            path.display()
        );
    }
}

#[test]
fn the_targets_are_in_the_fuzz_crate() {
    let manifest = fs::read_to_string(fuzz_dir().join("Cargo.toml")).unwrap();
    for (target, _) in TARGETS {
        assert!(
            manifest.contains(&format!("name = \"{target}\"")),
            "{target}"
        );
        assert!(
            fuzz_dir()
                .join(format!("fuzz_targets/{target}.rs"))
                .is_file()
        );
    }
}
