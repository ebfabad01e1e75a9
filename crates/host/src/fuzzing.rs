//! The properties the fuzz targets of `bothy-host` (`fuzz/fuzz_targets/`)
//! check, in one place so that the regression test
//! (`tests/fuzz_regressions.rs`) runs every kept input through exactly the same
//! code on the stable toolchain. Not part of the API: every function panics
//! when a property does not hold, which is what a fuzzer and a test want.
#![allow(clippy::expect_used, clippy::panic)]

use crate::channel::message::{FromHelper, LENGTH_BYTES, Message, ToHelper, body_length};

/// Decoding of the local channel (2.2, D-M2-42-11): the input as one frame in
/// each direction, and as a stream of frames. An accepted message encodes to
/// exactly the bytes it came from (one encoding per message); no input panics.
pub fn channel_decode(input: &[u8]) {
    round_trip::<ToHelper>(input);
    round_trip::<FromHelper>(input);
    // The input as a stream: frame after frame while the prefixes allow.
    let mut rest = input;
    while rest.len() >= LENGTH_BYTES {
        let Ok(length) = body_length(rest) else { break };
        let Some(frame) = rest.get(..LENGTH_BYTES + length) else {
            break;
        };
        round_trip::<ToHelper>(frame);
        round_trip::<FromHelper>(frame);
        rest = &rest[LENGTH_BYTES + length..];
    }
}

fn round_trip<M: Message + std::fmt::Debug + PartialEq>(frame: &[u8]) {
    if let Ok(message) = M::decode_frame(frame) {
        let encoded = message.encode().expect("a decoded message encodes");
        assert_eq!(encoded, frame, "{message:?} has another encoding");
        let again = M::decode_frame(&encoded).expect("an encoded message decodes");
        assert_eq!(again, message);
    }
}

/// Decoding of the confirmation protocol (6.4): the input as one line in
/// each direction, and as a stream split into lines. An accepted message
/// encodes to a line that decodes to the same message; no input panics, and
/// a stream never yields a line longer than the limit.
pub fn confirm_decode(input: &[u8]) {
    use crate::confirm::protocol::{FromAgent, MAX_LINE, ToAgent, take_lines};
    let check = |line: &[u8]| {
        if let Ok(message) = ToAgent::decode(line) {
            let encoded = message.encode();
            let again = ToAgent::decode(encoded.trim_end_matches('\n').as_bytes())
                .expect("an encoded request decodes");
            assert_eq!(again, message);
        }
        if let Ok(message) = FromAgent::decode(line) {
            let encoded = message.encode();
            let again = FromAgent::decode(encoded.trim_end_matches('\n').as_bytes())
                .expect("an encoded answer decodes");
            assert_eq!(again, message);
        }
    };
    check(input);
    let mut buffer = Vec::new();
    for chunk in input.chunks(7) {
        buffer.extend_from_slice(chunk);
        let Ok(lines) = take_lines(&mut buffer) else {
            return;
        };
        for line in lines {
            assert!(line.len() <= MAX_LINE);
            check(&line);
        }
    }
}

/// A property check over one fuzz input.
pub type Check = fn(&[u8]);

/// The checks by fuzz target name, for the regression test.
pub const TARGETS: [(&str, Check); 2] = [
    ("channel_decode", channel_decode),
    ("confirm_decode", confirm_decode),
];
