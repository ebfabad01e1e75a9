//! Fuzz target `doctor_wire`: the property lives in
//! `bothy_host::doctor::fuzzing::doctor_wire`, shared with the regression test
//! that replays fuzz/seeds and fuzz/regressions.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| bothy_host::doctor::fuzzing::doctor_wire(data));
