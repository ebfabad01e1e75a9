//! Fuzz target `jws_verify`: the property lives in `bothy_proto::fuzzing::jws_verify`, shared
//! with the regression test that replays fuzz/seeds and fuzz/regressions.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| bothy_proto::fuzzing::jws_verify(data));
