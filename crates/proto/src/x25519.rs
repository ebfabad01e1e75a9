//! The host's static X25519 public key as it travels in host.pair
//! (`noise_public_key`, spec 24, 3.2 "Details of the pairing", bullet "Keys"):
//! strict base64url without padding of exactly 32 bytes, and not a point of
//! small order (`errors[].code = invalid_key`).
//!
//! # Small order
//!
//! X25519 (RFC 7748) reads the key as a u-coordinate with the top bit of the
//! last byte ignored. A point of small order — order 1, 2, 4 or 8, on the curve
//! or its twist — makes every Diffie-Hellman result with it 32 zero bytes,
//! because every X25519 scalar is a multiple of 8 (clamping). Modulo
//! p = 2^255 − 19 there are exactly five such u-coordinates: 0, 1, p − 1 and
//! the two of order 8; together with p and p + 1, the non-canonical encodings
//! of 0 and of 1, that are seven 255-bit values, the list libsodium refuses in
//! `crypto_scalarmult_curve25519`. Every other u has a prime-order component
//! of about 2^252 or more, which no clamped scalar kills. `bothy-noise` refuses
//! the all-zero result in the handshake itself (D-5); this check refuses such
//! a key before the server stores it, so no device ever pins one.
//!
//! The comparison runs over all seven values without an early exit (a public
//! key is no secret, but there is no reason to branch on it either).

use subtle::{Choice, ConstantTimeEq};

use crate::b64;

/// Bytes of an X25519 public key.
pub const KEY_LEN: usize = 32;

/// The seven 255-bit encodings of small-order u-coordinates (little endian,
/// top bit clear): 0, 1, the two points of order 8, p − 1, p, p + 1.
const SMALL_ORDER: [[u8; KEY_LEN]; 7] = [
    [0; KEY_LEN],
    [
        0x01, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        0, 0, 0,
    ],
    [
        0xe0, 0xeb, 0x7a, 0x7c, 0x3b, 0x41, 0xb8, 0xae, 0x16, 0x56, 0xe3, 0xfa, 0xf1, 0x9f, 0xc4,
        0x6a, 0xda, 0x09, 0x8d, 0xeb, 0x9c, 0x32, 0xb1, 0xfd, 0x86, 0x62, 0x05, 0x16, 0x5f, 0x49,
        0xb8, 0x00,
    ],
    [
        0x5f, 0x9c, 0x95, 0xbc, 0xa3, 0x50, 0x8c, 0x24, 0xb1, 0xd0, 0xb1, 0x55, 0x9c, 0x83, 0xef,
        0x5b, 0x04, 0x44, 0x5c, 0xc4, 0x58, 0x1c, 0x8e, 0x86, 0xd8, 0x22, 0x4e, 0xdd, 0xd0, 0x9f,
        0x11, 0x57,
    ],
    [
        0xec, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        0xff, 0x7f,
    ],
    [
        0xed, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        0xff, 0x7f,
    ],
    [
        0xee, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        0xff, 0x7f,
    ],
];

/// Why a `noise_public_key` was refused. No variant carries the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum X25519KeyError {
    /// Not strict base64url without padding, or not exactly 32 bytes.
    #[error("not strict base64url of 32 bytes")]
    Malformed,
    /// A point of small order (module docs).
    #[error("a public key of small order")]
    SmallOrder,
}

/// Whether `public` is a u-coordinate of small order (module docs), with the
/// top bit ignored as X25519 ignores it.
pub fn is_small_order(public: &[u8; KEY_LEN]) -> bool {
    let mut masked = *public;
    masked[KEY_LEN - 1] &= 0x7f;
    let mut found = Choice::from(0);
    for candidate in &SMALL_ORDER {
        found |= masked.ct_eq(candidate);
    }
    bool::from(found)
}

/// Decodes a `noise_public_key`: strict base64url of exactly 32 bytes that is
/// not of small order.
pub fn decode_public_key(text: &str) -> Result<[u8; KEY_LEN], X25519KeyError> {
    let key = b64::decode_array::<KEY_LEN>(text).map_err(|_| X25519KeyError::Malformed)?;
    if is_small_order(&key) {
        return Err(X25519KeyError::SmallOrder);
    }
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jws::Ed25519SigningKey;

    /// A Montgomery point of the real curve arithmetic (through ed25519-dalek,
    /// which converts Edwards keys): its field `0` can be set to any bytes, and
    /// `mul_clamped` is the X25519 function.
    fn montgomery_of(seed: u8) -> impl FnMut([u8; KEY_LEN], [u8; KEY_LEN]) -> [u8; KEY_LEN] {
        let mut point = Ed25519SigningKey::from_seed(&[seed; 32])
            .verifying_key()
            .to_montgomery();
        move |u, scalar| {
            point.0 = u;
            point.mul_clamped(scalar).to_bytes()
        }
    }

    #[test]
    fn every_listed_value_gives_an_all_zero_result_with_any_scalar() {
        let mut x25519 = montgomery_of(1);
        for candidate in SMALL_ORDER {
            assert!(is_small_order(&candidate));
            for scalar_seed in [0u8, 1, 7, 0x55, 0xff] {
                assert_eq!(x25519(candidate, [scalar_seed; 32]), [0; KEY_LEN]);
            }
            // X25519 ignores the top bit, and so does the check.
            let mut high = candidate;
            high[KEY_LEN - 1] |= 0x80;
            assert!(is_small_order(&high));
            assert_eq!(x25519(high, [3; 32]), [0; KEY_LEN]);
        }
    }

    #[test]
    fn ordinary_keys_pass_and_give_a_non_zero_result() {
        let mut x25519 = montgomery_of(2);
        for seed in 0u8..64 {
            let public = Ed25519SigningKey::from_seed(&[seed; 32])
                .verifying_key()
                .to_montgomery()
                .to_bytes();
            assert!(!is_small_order(&public), "seed {seed}");
            assert_ne!(x25519(public, [9; 32]), [0; KEY_LEN]);
        }
        // Values next to the listed ones are ordinary.
        for value in [2u8, 3, 18, 0xeb, 0xef] {
            let mut key = [0u8; KEY_LEN];
            key[0] = value;
            if value >= 0xeb {
                key[1..].fill(0xff);
                key[KEY_LEN - 1] = 0x7f;
            }
            assert!(!is_small_order(&key), "{value:#x}");
            assert_ne!(x25519(key, [9; 32]), [0; KEY_LEN], "{value:#x}");
        }
    }

    #[test]
    fn decoding() {
        let public = Ed25519SigningKey::from_seed(&[4; 32])
            .verifying_key()
            .to_montgomery()
            .to_bytes();
        let text = b64::encode(&public);
        assert_eq!(decode_public_key(&text), Ok(public));
        assert_eq!(
            decode_public_key(&b64::encode(&[0; 32])),
            Err(X25519KeyError::SmallOrder)
        );
        assert_eq!(
            decode_public_key(&b64::encode(&SMALL_ORDER[2])),
            Err(X25519KeyError::SmallOrder)
        );
        for bad in [
            String::new(),
            b64::encode(&[7; 31]),
            b64::encode(&[7; 33]),
            format!("{text}="),
            format!(" {text}"),
            text.replace('-', "+").replace('_', "/") + "x",
        ] {
            assert_eq!(
                decode_public_key(&bad),
                Err(X25519KeyError::Malformed),
                "{bad:?}"
            );
        }
    }
}
