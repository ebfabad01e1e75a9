//! The output filter (11.2, TM-T14) against the shared cases of
//! `tests/filter-cases.json`, which the console's TypeScript filter
//! (`web/console/test/filter.test.ts`) reads too, so the two cannot drift.
//! Every case runs whole and split into two frames at every position.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use bothy::filter::OutputFilter;
use serde_json::Value;

fn bytes(text: &str, encoding: &str) -> Vec<u8> {
    match encoding {
        "utf8" => text.as_bytes().to_vec(),
        "bytes" => text
            .chars()
            .map(|c| u8::try_from(u32::from(c)).expect("a byte case holds U+0000..U+00FF only"))
            .collect(),
        other => panic!("unknown encoding {other}"),
    }
}

fn run(parts: &[&[u8]]) -> Vec<u8> {
    let mut filter = OutputFilter::new();
    let mut out = Vec::new();
    for part in parts {
        filter.filter(part, &mut out);
    }
    filter.finish(&mut out);
    out
}

#[test]
fn shared_filter_cases() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/filter-cases.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("the shared cases {}: {e}", path.display()));
    let document: Value = serde_json::from_str(&text).unwrap();
    let cases = document["cases"].as_array().expect("a cases array");
    assert!(cases.len() >= 30, "the shared file holds its cases");
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let encoding = case["encoding"].as_str().unwrap();
        let input = bytes(case["input"].as_str().unwrap(), encoding);
        let expected = bytes(case["output"].as_str().unwrap(), encoding);
        assert_eq!(
            String::from_utf8_lossy(&run(&[&input])),
            String::from_utf8_lossy(&expected),
            "{name}"
        );
        assert_eq!(run(&[&input]), expected, "{name}");
        for cut in 0..=input.len() {
            assert_eq!(
                run(&[&input[..cut], &input[cut..]]),
                expected,
                "{name}, split at {cut}"
            );
        }
    }
    println!("filter cases: {} shared cases", cases.len());
}
