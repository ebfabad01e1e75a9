//! Strict base64url without padding (RFC 4648 section 5), the encoding of every
//! binary value on the wire: keys, challenges, `cek`, JWS parts (3.2, 3.5, 5.3).
//!
//! Strict means: only the URL-safe alphabet, no `=` padding, no whitespace, and
//! the unused low bits of the last character must be zero, so every byte string
//! has exactly one accepted text form (data-encoding checks trailing bits).

use data_encoding::BASE64URL_NOPAD;

/// A value that is not strict base64url, or not of the expected length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum B64Error {
    /// A character outside the alphabet, padding, or non-zero trailing bits.
    #[error("not strict base64url without padding")]
    Malformed,
    /// Decoded fine, but to the wrong number of bytes.
    #[error("decodes to {actual} bytes, expected {expected}")]
    WrongLength {
        /// Bytes the value must decode to.
        expected: usize,
        /// Bytes it decoded to.
        actual: usize,
    },
}

/// Encodes bytes as base64url without padding.
pub fn encode(bytes: &[u8]) -> String {
    BASE64URL_NOPAD.encode(bytes)
}

/// Decodes strict base64url without padding.
pub fn decode(text: &str) -> Result<Vec<u8>, B64Error> {
    BASE64URL_NOPAD
        .decode(text.as_bytes())
        .map_err(|_| B64Error::Malformed)
}

/// Decodes strict base64url that must give exactly `N` bytes (a key, a hash).
pub fn decode_array<const N: usize>(text: &str) -> Result<[u8; N], B64Error> {
    let bytes = decode(text)?;
    <[u8; N]>::try_from(bytes.as_slice()).map_err(|_| B64Error::WrongLength {
        expected: N,
        actual: bytes.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_all_lengths() {
        for len in 0..70 {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 37 + 11) as u8).collect();
            let text = encode(&bytes);
            assert!(!text.contains('='));
            assert_eq!(decode(&text).unwrap(), bytes);
        }
    }

    #[test]
    fn refusals() {
        let cases = [
            "AA==", // padding
            "A",    // impossible length
            "AB",   // trailing bits not zero (AB -> 0x00 with 4 bits 0001 left over)
            "a+b/", // standard alphabet, not URL-safe
            "ab c", // whitespace
            "ab\n", // newline
            "ä",    // non-ASCII
        ];
        for case in cases {
            assert_eq!(decode(case), Err(B64Error::Malformed), "{case:?}");
        }
        assert_eq!(decode("AA").unwrap(), vec![0]);
        assert_eq!(decode("_-8").unwrap(), vec![0xff, 0xef]);
    }

    #[test]
    fn exact_length() {
        let key = [7u8; 32];
        assert_eq!(decode_array::<32>(&encode(&key)).unwrap(), key);
        assert_eq!(
            decode_array::<32>(&encode(&[7u8; 31])),
            Err(B64Error::WrongLength {
                expected: 32,
                actual: 31
            })
        );
        assert_eq!(decode_array::<32>("A"), Err(B64Error::Malformed));
    }
}
