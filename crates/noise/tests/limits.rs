//! Size rules of spec 5.2: every message at most 65535 bytes, checked before
//! snow sees the input; truncated messages fail; empty payloads work.

mod common;

use bothy_noise::{
    MAX_MESSAGE_LEN, MAX_MESSAGE1_PAYLOAD_LEN, MAX_MESSAGE2_PAYLOAD_LEN,
    MAX_TRANSPORT_PLAINTEXT_LEN, NoiseError,
};
use common::{HOST_JSON, TOKEN, connected, start};

#[test]
fn limits_follow_from_65535() {
    assert_eq!(MAX_MESSAGE_LEN, 65535);
    assert_eq!(MAX_TRANSPORT_PLAINTEXT_LEN, 65519);
    // e (32 bytes) and the payload's tag (16 bytes).
    assert_eq!(MAX_MESSAGE1_PAYLOAD_LEN, 65487);
    assert_eq!(MAX_MESSAGE2_PAYLOAD_LEN, 65487);
}

#[test]
fn largest_handshake_payloads_fill_a_message_exactly() {
    let (mut device, mut host) = start().unwrap();
    let token = vec![b't'; MAX_MESSAGE1_PAYLOAD_LEN];
    let message1 = device.write_message1(&token).unwrap();
    assert_eq!(message1.len(), MAX_MESSAGE_LEN);
    assert_eq!(host.read_message1(&message1).unwrap().payload, token);

    let json = vec![b'j'; MAX_MESSAGE2_PAYLOAD_LEN];
    let (message2, _) = host.write_message2(&json).unwrap();
    assert_eq!(message2.len(), MAX_MESSAGE_LEN);
    assert_eq!(device.read_message2(&message2).unwrap().0, json);
}

#[test]
fn oversize_message1_payload_is_refused() {
    let (mut device, _) = start().unwrap();
    let token = vec![0; MAX_MESSAGE1_PAYLOAD_LEN + 1];
    assert!(matches!(
        device.write_message1(&token),
        Err(NoiseError::PayloadTooLong {
            len: 65488,
            max: 65487
        })
    ));
    // A failed handshake step poisons, even this local one.
    assert!(matches!(
        device.write_message1(TOKEN),
        Err(NoiseError::Poisoned)
    ));
}

#[test]
fn oversize_message2_payload_is_refused() {
    let (mut device, mut host) = start().unwrap();
    host.read_message1(&device.write_message1(TOKEN).unwrap())
        .unwrap();
    let json = vec![0; MAX_MESSAGE2_PAYLOAD_LEN + 1];
    assert!(matches!(
        host.write_message2(&json),
        Err(NoiseError::PayloadTooLong {
            len: 65488,
            max: 65487
        })
    ));
    assert!(matches!(
        host.write_message2(HOST_JSON),
        Err(NoiseError::Poisoned)
    ));
}

#[test]
fn largest_transport_plaintext_fills_a_message_exactly() {
    let (mut device, mut host) = connected().unwrap();
    let data = vec![0xa5; MAX_TRANSPORT_PLAINTEXT_LEN];
    let message = device.write_message(&data).unwrap();
    assert_eq!(message.len(), MAX_MESSAGE_LEN);
    assert_eq!(host.read_message(&message).unwrap(), data);
}

#[test]
fn oversize_transport_plaintext_is_refused_without_poisoning() {
    let (mut device, mut host) = connected().unwrap();
    assert!(matches!(
        device.write_message(&vec![0; MAX_TRANSPORT_PLAINTEXT_LEN + 1]),
        Err(NoiseError::PayloadTooLong {
            len: 65520,
            max: 65519
        })
    ));
    // Nothing was encrypted and no nonce used: the next message is the first one.
    let message = device.write_message(b"next").unwrap();
    assert_eq!(host.read_message(&message).unwrap(), b"next");
}

/// A message one byte over the limit: refused before snow sees it.
fn too_long() -> Vec<u8> {
    vec![0; MAX_MESSAGE_LEN + 1]
}

#[test]
fn message1_one_byte_too_long_is_refused() {
    let (_, mut host) = start().unwrap();
    assert!(matches!(
        host.read_message1(&too_long()),
        Err(NoiseError::MessageTooLong {
            len: 65536,
            max: 65535
        })
    ));
}

#[test]
fn message2_one_byte_too_long_is_refused() {
    let (mut device, _) = start().unwrap();
    device.write_message1(TOKEN).unwrap();
    assert!(matches!(
        device.read_message2(&too_long()),
        Err(NoiseError::MessageTooLong {
            len: 65536,
            max: 65535
        })
    ));
}

#[test]
fn transport_message_one_byte_too_long_is_refused() {
    let (_, mut host) = connected().unwrap();
    assert!(matches!(
        host.read_message(&too_long()),
        Err(NoiseError::MessageTooLong {
            len: 65536,
            max: 65535
        })
    ));
}

#[test]
fn truncated_message1_fails() {
    let (mut device, _) = start().unwrap();
    let message1 = device.write_message1(TOKEN).unwrap();
    for (cut, shorter) in [
        (47, true),
        (32, true),
        (0, true),
        (message1.len() - 1, false),
    ] {
        let (_, mut host) = start().unwrap();
        let result = host.read_message1(&message1[..cut]);
        if shorter {
            assert!(
                matches!(result, Err(NoiseError::MessageTooShort { min: 48, .. })),
                "{cut}: {result:?}"
            );
        } else {
            assert!(
                matches!(result, Err(NoiseError::Decrypt)),
                "{cut}: {result:?}"
            );
        }
    }
}

#[test]
fn truncated_message2_fails() {
    for cut in [0, 31, 47, 48 + HOST_JSON.len() - 1] {
        let (mut device, mut host) = start().unwrap();
        host.read_message1(&device.write_message1(TOKEN).unwrap())
            .unwrap();
        let (message2, _) = host.write_message2(HOST_JSON).unwrap();
        let result = device.read_message2(&message2[..cut]);
        if cut < 48 {
            assert!(
                matches!(result, Err(NoiseError::MessageTooShort { min: 48, .. })),
                "{cut}"
            );
        } else {
            assert!(matches!(result, Err(NoiseError::Decrypt)), "{cut}");
        }
    }
}

#[test]
fn truncated_transport_message_fails() {
    for cut in [0, 15, 16, 20] {
        let (mut device, mut host) = connected().unwrap();
        let message = device.write_message(b"some terminal output").unwrap();
        let result = host.read_message(&message[..cut]);
        if cut < 16 {
            assert!(
                matches!(result, Err(NoiseError::MessageTooShort { min: 16, .. })),
                "{cut}"
            );
        } else {
            assert!(matches!(result, Err(NoiseError::Decrypt)), "{cut}");
        }
    }
}

/// Documented behaviour: an empty transport plaintext is allowed both ways and
/// gives a 16-byte message (the tag alone), authenticated like any other.
#[test]
fn empty_transport_payload_works_both_ways() {
    let (mut device, mut host) = connected().unwrap();
    let to_host = device.write_message(b"").unwrap();
    assert_eq!(to_host.len(), 16);
    assert_eq!(host.read_message(&to_host).unwrap(), b"");
    let to_device = host.write_message(b"").unwrap();
    assert_eq!(to_device.len(), 16);
    assert_eq!(device.read_message(&to_device).unwrap(), b"");
    // ...and it used a nonce: the next message still decrypts in order.
    let next = device.write_message(b"after").unwrap();
    assert_eq!(host.read_message(&next).unwrap(), b"after");
}

#[test]
fn empty_handshake_payloads_work() {
    let (mut device, mut host) = start().unwrap();
    let message1 = device.write_message1(b"").unwrap();
    assert_eq!(message1.len(), 48);
    assert_eq!(host.read_message1(&message1).unwrap().payload, b"");
    let (message2, _) = host.write_message2(b"").unwrap();
    assert_eq!(message2.len(), 48);
    assert_eq!(device.read_message2(&message2).unwrap().0, b"");
}
