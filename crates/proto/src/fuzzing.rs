//! The properties the fuzz targets (`fuzz/fuzz_targets/`) check, in one place so
//! that the regression test (`tests/fuzz_regressions.rs`) runs every kept input
//! through exactly the same code on the stable toolchain. Not part of the API:
//! every function panics when a property does not hold, which is what a fuzzer
//! and a test want.
#![allow(clippy::expect_used, clippy::panic)]

use std::sync::LazyLock;

use ed25519_dalek::Signer;

use crate::frame::{Direction, Frame};
use crate::jwk::{Jwks, JwksKey};
use crate::jws::{Ed25519SigningKey, decode_host_auth, decode_terminal_session};
use crate::pairing::PairingCode;
use crate::report::{ReportContext, ReportLimits, validate};
use crate::{b64, control, data, stream};

/// Frame decoding (5.4) in both directions: an accepted frame encodes back to
/// exactly the bytes it came from.
pub fn frame_decode(input: &[u8]) {
    for direction in [Direction::DeviceToHost, Direction::HostToDevice] {
        if let Ok(frame) = Frame::decode(input, direction) {
            let encoded = frame.to_vec(direction).expect("a decoded frame encodes");
            assert_eq!(encoded, input);
        }
    }
}

/// Pairing-code parsing (3.2): an accepted code is exactly the input.
pub fn pairing_parse(input: &[u8]) {
    if let Ok(text) = std::str::from_utf8(input)
        && let Ok(code) = PairingCode::parse(text)
    {
        assert_eq!(code.as_str(), text);
    }
}

const SEED: [u8; 32] = [7; 32];
static KEY: LazyLock<Ed25519SigningKey> = LazyLock::new(|| Ed25519SigningKey::from_seed(&SEED));
static JWKS: LazyLock<Jwks> = LazyLock::new(|| {
    Jwks::new(vec![JwksKey::from_jwk(KEY.public_jwk())]).expect("one key is a valid set")
});

fn jws_check(token: &str) {
    if let Ok(claims) = decode_terminal_session(token, &JWKS) {
        assert!(decode_terminal_session(&claims.sign(&KEY), &JWKS).is_ok());
    }
    if let Ok(claims) = decode_host_auth(token, &KEY.public_jwk()) {
        assert!(decode_host_auth(&claims.sign(&KEY), &KEY.public_jwk()).is_ok());
    }
}

/// JWS verification (5.3 step 1, 3.5 step 4), twice per input: the input as a
/// compact token against a fixed JWKS and login key; then the input split at the
/// first 0xff into header and payload, encoded and signed with that key, so the
/// header rules and the strict claim decoders behind the signature are reached
/// too. Accepted claims sign back to a token that verifies.
pub fn jws_verify(input: &[u8]) {
    if let Ok(token) = std::str::from_utf8(input) {
        jws_check(token);
    }
    let (header, payload) = match input.iter().position(|b| *b == 0xff) {
        Some(at) => (&input[..at], &input[at + 1..]),
        None => (input, &b"{}"[..]),
    };
    let signing_input = format!("{}.{}", b64::encode(header), b64::encode(payload));
    let signature = ed25519_dalek::SigningKey::from_bytes(&SEED).sign(signing_input.as_bytes());
    jws_check(&format!(
        "{signing_input}.{}",
        b64::encode(&signature.to_bytes())
    ));
}

/// Roughly `sync.ws_max_frame_bytes`; the decoders take the limit as an argument.
const MAX: usize = 64 * 1024;

macro_rules! round_trip {
    ($ty:ty, $input:expr) => {
        <$ty>::decode($input, MAX).ok().inspect(|message| {
            let again = <$ty>::decode(message.to_json().as_bytes(), MAX)
                .expect("an encoded message decodes");
            assert_eq!(&again, message);
        })
    };
}

/// Decoding of every `{op, d}` message (3.5, 6.1, 6.2) and the report validation
/// behind `report`: an accepted message encodes to JSON that decodes to it again.
pub fn control_decode(input: &[u8]) {
    if let Some(control::HostMessage::Report(report)) = round_trip!(control::HostMessage, input) {
        validate(
            &report.parts(),
            &ReportLimits::default(),
            ReportContext::Control,
        );
    }
    round_trip!(control::ServerMessage, input);
    round_trip!(data::HostMessage, input);
    round_trip!(data::ServerMessage, input);
    round_trip!(stream::DeviceMessage, input);
    round_trip!(stream::ServerMessage, input);
}

/// A property check over one fuzz input.
pub type Check = fn(&[u8]);

/// The checks by fuzz target name, for the regression test.
pub const TARGETS: [(&str, Check); 4] = [
    ("frame_decode", frame_decode),
    ("pairing_parse", pairing_parse),
    ("jws_verify", jws_verify),
    ("control_decode", control_decode),
];
