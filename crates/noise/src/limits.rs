//! Size limits of spec 5.2 ("Size"): one WebSocket binary frame carries
//! exactly one Noise message of at most 65535 bytes.

/// Length of an X25519 public or private key.
pub const KEY_LEN: usize = 32;

/// Length of the ChaChaPoly authentication tag.
pub const TAG_LEN: usize = 16;

/// Largest Noise message, handshake or transport (section 3 of the Noise specification).
pub const MAX_MESSAGE_LEN: usize = 65535;

/// Largest plaintext of one transport message: the message minus the tag.
pub const MAX_TRANSPORT_PLAINTEXT_LEN: usize = MAX_MESSAGE_LEN - TAG_LEN;

/// Bytes that message 1 (`e, es`) and message 2 (`e, ee`) add to their payload:
/// the sender's ephemeral key in clear and the tag of the encrypted payload.
pub const HANDSHAKE_OVERHEAD: usize = KEY_LEN + TAG_LEN;

/// Largest payload of message 1 (the terminal session token).
pub const MAX_MESSAGE1_PAYLOAD_LEN: usize = MAX_MESSAGE_LEN - HANDSHAKE_OVERHEAD;

/// Largest payload of message 2 (the host's JSON).
pub const MAX_MESSAGE2_PAYLOAD_LEN: usize = MAX_MESSAGE_LEN - HANDSHAKE_OVERHEAD;

/// Checks the length of a received message before snow sees it.
pub(crate) fn check_received(len: usize, min: usize) -> Result<(), crate::NoiseError> {
    if len > MAX_MESSAGE_LEN {
        Err(crate::NoiseError::MessageTooLong {
            len,
            max: MAX_MESSAGE_LEN,
        })
    } else if len < min {
        Err(crate::NoiseError::MessageTooShort { len, min })
    } else {
        Ok(())
    }
}

/// Checks the length of a payload to write before snow sees it.
pub(crate) fn check_payload(len: usize, max: usize) -> Result<(), crate::NoiseError> {
    if len > max {
        Err(crate::NoiseError::PayloadTooLong { len, max })
    } else {
        Ok(())
    }
}
