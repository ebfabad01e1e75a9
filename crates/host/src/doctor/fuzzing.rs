//! The property of the fuzz target `doctor_wire` (`fuzz/fuzz_targets/`), in one
//! place so that the regression test (`tests/fuzz_doctor_wire.rs`) runs every
//! kept input through exactly the same code on the stable toolchain. Not part
//! of the API: it panics when the property does not hold, which is what a
//! fuzzer and a test want.
#![allow(clippy::expect_used, clippy::panic)]

use super::acl::Acl;
use super::wire::{CheckAnswer, CheckRequest};

/// The doctor's decoders of bytes from another process: a request (in the
/// helper), an answer (in the service) and an ACL attribute. Whatever decodes
/// encodes to bytes that decode to the same value; nothing panics.
pub fn doctor_wire(input: &[u8]) {
    if let Ok(request) = CheckRequest::decode(input) {
        let again = CheckRequest::decode(&request.encode()).expect("an encoded request decodes");
        assert_eq!(again, request);
    }
    if let Ok(answer) = CheckAnswer::decode(input) {
        let again = CheckAnswer::decode(&answer.encode()).expect("an encoded answer decodes");
        assert_eq!(again, answer);
    }
    if let Ok(acl) = Acl::decode(input) {
        assert_eq!(acl.encode(), input, "an ACL encodes to its attribute");
    }
}
