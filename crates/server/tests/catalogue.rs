//! tests/catalogue.yaml stays readable and complete: every test ID of section
//! 14 (TM-T01 to TM-T29) once, with a status of the closed list and the
//! members that status needs (runs for runs/partial, missing for partial,
//! reason for not_yet/cannot).

use std::collections::BTreeMap;

use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    title: String,
    status: String,
    runs: Option<Vec<String>>,
    missing: Option<String>,
    reason: Option<String>,
}

#[test]
fn every_test_id_has_a_valid_entry() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/catalogue.yaml");
    let text = std::fs::read_to_string(path).expect("tests/catalogue.yaml");
    let entries: BTreeMap<String, Entry> =
        serde_saphyr::from_str(&text).expect("tests/catalogue.yaml is valid YAML of entries");
    let expected: Vec<String> = (1..=29).map(|n| format!("TM-T{n:02}")).collect();
    assert_eq!(entries.keys().cloned().collect::<Vec<_>>(), expected);
    for (id, entry) in &entries {
        assert!(!entry.title.trim().is_empty(), "{id}: title");
        let runs = entry.runs.as_ref().is_some_and(|runs| !runs.is_empty());
        match entry.status.as_str() {
            "runs" => assert!(runs && entry.missing.is_none(), "{id}: runs"),
            "partial" => assert!(runs && entry.missing.is_some(), "{id}: partial"),
            "not_yet" | "cannot" => {
                assert!(entry.reason.is_some() && !runs, "{id}: {}", entry.status)
            }
            other => panic!("{id}: unknown status {other}"),
        }
    }
}
