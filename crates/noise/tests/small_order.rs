//! D-M2-38-9: a Diffie-Hellman result of 32 zero bytes fails the handshake,
//! whichever key has small order: the host's static key as the device holds it
//! (DH `es` on the device), `e` in message 1 (`es` on the host), or `e` in
//! message 2 (`ee` on the device).

mod common;

use bothy_noise::{Initiator, NoiseError, StaticKeypair};
use common::{HOST_ID, HOST_JSON, SESSION_ID, TOKEN, start};
use curve25519_dalek::montgomery::MontgomeryPoint;

/// The u-coordinates of small order on curve25519 and its twist, as libsodium's
/// `has_small_order` lists them (crypto_scalarmult/curve25519/ref10/x25519_ref10.c).
const CANONICAL: [[u8; 32]; 7] = [
    // 0 (order 4)
    [0; 32],
    // 1 (order 1)
    [
        1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        0, 0,
    ],
    // 325606250916557431795983626356110631294008115727848805560023387167927233504 (order 8)
    [
        0xe0, 0xeb, 0x7a, 0x7c, 0x3b, 0x41, 0xb8, 0xae, 0x16, 0x56, 0xe3, 0xfa, 0xf1, 0x9f, 0xc4,
        0x6a, 0xda, 0x09, 0x8d, 0xeb, 0x9c, 0x32, 0xb1, 0xfd, 0x86, 0x62, 0x05, 0x16, 0x5f, 0x49,
        0xb8, 0x00,
    ],
    // 39382357235489614581723060781553021112529911719440698176882885853963445705823 (order 8)
    [
        0x5f, 0x9c, 0x95, 0xbc, 0xa3, 0x50, 0x8c, 0x24, 0xb1, 0xd0, 0xb1, 0x55, 0x9c, 0x83, 0xef,
        0x5b, 0x04, 0x44, 0x5c, 0xc4, 0x58, 0x1c, 0x8e, 0x86, 0xd8, 0x22, 0x4e, 0xdd, 0xd0, 0x9f,
        0x11, 0x57,
    ],
    // p - 1 (order 2)
    [
        0xec, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        0xff, 0x7f,
    ],
    // p, the non-canonical encoding of 0
    [
        0xed, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        0xff, 0x7f,
    ],
    // p + 1, the non-canonical encoding of 1
    [
        0xee, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        0xff, 0x7f,
    ],
];

/// The canonical list and the same seven with bit 255 set: X25519 ignores that
/// bit (RFC 7748, section 5), so a peer could send either form.
fn small_order_keys() -> Vec<[u8; 32]> {
    let high_bit = CANONICAL.iter().map(|key| {
        let mut key = *key;
        key[31] |= 0x80;
        key
    });
    CANONICAL.iter().copied().chain(high_bit).collect()
}

/// Guards the list itself: each entry gives 32 zero bytes with any private key.
#[test]
fn every_listed_key_has_small_order() {
    for _ in 0..4 {
        let private = *StaticKeypair::generate().unwrap().private_bytes();
        for key in small_order_keys() {
            assert_eq!(
                MontgomeryPoint(key).mul_clamped(private).to_bytes(),
                [0; 32],
                "{key:02x?}"
            );
        }
    }
}

#[test]
fn small_order_host_static_key_fails_message1() {
    for key in small_order_keys() {
        let mut device = Initiator::new(SESSION_ID, HOST_ID, &key).unwrap();
        assert!(
            matches!(
                device.write_message1(TOKEN),
                Err(NoiseError::SmallOrderPublicKey)
            ),
            "{key:02x?}"
        );
        assert!(matches!(
            device.write_message1(TOKEN),
            Err(NoiseError::Poisoned)
        ));
        assert!(matches!(
            device.read_message2(&[0; 64]),
            Err(NoiseError::Poisoned)
        ));
    }
}

#[test]
fn small_order_e_in_message1_fails_on_the_host() {
    for key in small_order_keys() {
        let (mut device, mut host) = start().unwrap();
        let genuine = device.write_message1(TOKEN).unwrap();
        let mut crafted = genuine.clone();
        crafted[..32].copy_from_slice(&key);
        assert!(
            matches!(
                host.read_message1(&crafted),
                Err(NoiseError::SmallOrderPublicKey)
            ),
            "{key:02x?}"
        );
        assert!(matches!(
            host.read_message1(&genuine),
            Err(NoiseError::Poisoned)
        ));
        assert!(matches!(
            host.write_message2(HOST_JSON),
            Err(NoiseError::Poisoned)
        ));
    }
}

#[test]
fn small_order_e_in_message2_fails_on_the_device() {
    for key in small_order_keys() {
        let (mut device, mut host) = start().unwrap();
        host.read_message1(&device.write_message1(TOKEN).unwrap())
            .unwrap();
        let (genuine, _) = host.write_message2(HOST_JSON).unwrap();
        let mut crafted = genuine.clone();
        crafted[..32].copy_from_slice(&key);
        assert!(
            matches!(
                device.read_message2(&crafted),
                Err(NoiseError::SmallOrderPublicKey)
            ),
            "{key:02x?}"
        );
        assert!(matches!(
            device.read_message2(&genuine),
            Err(NoiseError::Poisoned)
        ));
        assert!(matches!(
            device.write_message1(TOKEN),
            Err(NoiseError::Poisoned)
        ));
    }
}
