//! Fuzz target `frame_decode`: the property lives in `bothy_proto::fuzzing::frame_decode`, shared
//! with the regression test that replays fuzz/seeds and fuzz/regressions.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| bothy_proto::fuzzing::frame_decode(data));
