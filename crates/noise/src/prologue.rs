//! The prologue of spec 5.2: `"bothy-terminal/1" || session ID || host ID`,
//! each ID as its 16 bytes in RFC 9562 order (D-M2-38-7). A different prologue
//! makes message 1 fail to authenticate, which binds the handshake to the
//! protocol version, the session and the host.

use uuid::Uuid;

/// The protocol label at the start of the prologue.
pub const PROLOGUE_LABEL: &[u8; 16] = b"bothy-terminal/1";

/// Length of the prologue: label and two UUIDs.
const PROLOGUE_LEN: usize = PROLOGUE_LABEL.len() + 16 + 16;

/// The prologue for `session_id` on the host `host_id`.
pub(crate) fn prologue(session_id: Uuid, host_id: Uuid) -> [u8; PROLOGUE_LEN] {
    let mut prologue = [0_u8; PROLOGUE_LEN];
    let (label, ids) = prologue.split_at_mut(PROLOGUE_LABEL.len());
    let (session, host) = ids.split_at_mut(16);
    label.copy_from_slice(PROLOGUE_LABEL);
    session.copy_from_slice(session_id.as_bytes());
    host.copy_from_slice(host_id.as_bytes());
    prologue
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_in_text_order_after_label() {
        let session = Uuid::parse_str("01234567-89ab-cdef-0123-456789abcdef").unwrap();
        let host = Uuid::parse_str("fedcba98-7654-3210-fedc-ba9876543210").unwrap();
        let bytes = prologue(session, host);
        assert_eq!(&bytes[..16], b"bothy-terminal/1");
        assert_eq!(
            bytes[16..32],
            [
                0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab,
                0xcd, 0xef
            ]
        );
        assert_eq!(
            bytes[32..],
            [
                0xfe, 0xdc, 0xba, 0x98, 0x76, 0x54, 0x32, 0x10, 0xfe, 0xdc, 0xba, 0x98, 0x76, 0x54,
                0x32, 0x10
            ]
        );
    }
}
