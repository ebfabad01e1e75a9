//! Fuzz target `config_yaml`: the property lives in
//! `bothy_server::config::fuzzing::config_yaml`, shared with the regression test
//! that replays fuzz/seeds and fuzz/regressions.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| bothy_server::config::fuzzing::config_yaml(data));
