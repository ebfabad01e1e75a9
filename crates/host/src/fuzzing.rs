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

/// A property check over one fuzz input.
pub type Check = fn(&[u8]);

/// The checks by fuzz target name, for the regression test.
pub const TARGETS: [(&str, Check); 1] = [("channel_decode", channel_decode)];
