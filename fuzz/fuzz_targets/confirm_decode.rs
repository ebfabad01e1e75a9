//! Fuzz target `confirm_decode`: the property lives in
//! `bothy_host::fuzzing::confirm_decode`, shared with the regression test that
//! replays fuzz/seeds and fuzz/regressions.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| bothy_host::fuzzing::confirm_decode(data));
