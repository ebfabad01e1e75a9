//! The host key fingerprint (spec 24, section 4.3, D-M2-38-11) and the check of the
//! confirmation prefix that the owner types (3.2 "Prefix").
//!
//! `key_fingerprint = base32_crockford(SHA-256("bothy-host-fp/1" || noise_public_key
//! || auth_public_key_raw))`: the raw 32-byte X25519 key and the raw 32-byte Ed25519
//! key (the decoded `x` of the JWK). Crockford base32 with the alphabet
//! `0123456789ABCDEFGHJKMNPQRSTVWXYZ`, 5-bit groups from the most significant bit,
//! the last group padded on the right with zero bits, upper case, no padding and no
//! check characters: 52 characters, shown as 13 groups of four joined with `-`.
//! Both keys are hashed because a change of either is a re-pairing.
//!
//! The prefix check upper-cases the typed text (ASCII only), requires exactly
//! `terminal.fingerprint_confirm_chars` characters of the alphabet (I, L, O and U
//! are not reinterpreted, they are invalid) and compares with the start of the
//! fingerprint without hyphens in constant time.

use std::fmt;
use std::sync::LazyLock;

use data_encoding::{Encoding, Specification};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The domain separation prefix of the hash.
const DOMAIN: &[u8] = b"bothy-host-fp/1";

/// The Crockford base32 alphabet in upper case, without I, L, O and U.
pub const CROCKFORD_ALPHABET: &str = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/// Characters of a fingerprint without hyphens: 256 bits in 5-bit groups.
pub const FINGERPRINT_CHARS: usize = 52;

/// Characters per displayed group.
const GROUP_CHARS: usize = 4;

/// Crockford base32 as D-M2-38-11 defines it: most significant bit first, no
/// padding, trailing bits zero.
static CROCKFORD: LazyLock<Encoding> = LazyLock::new(|| {
    let mut spec = Specification::new();
    spec.symbols.push_str(CROCKFORD_ALPHABET);
    // A constant specification: 32 distinct ASCII symbols, no padding. The unit
    // tests build it, so this cannot fail at run time.
    spec.encoding()
        .expect("the Crockford base32 specification is valid")
});

/// Every refusal of this module.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FingerprintError {
    /// The typed prefix does not have exactly `terminal.fingerprint_confirm_chars`
    /// characters of the Crockford alphabet (after upper-casing): 400
    /// `validation_failed` with `errors[].code = invalid_format` under
    /// `/fingerprint_prefix`; the attempt does not count.
    #[error("fingerprint_prefix has an invalid format")]
    InvalidFormat,
    /// The configured length `terminal.fingerprint_confirm_chars` is 0 or larger
    /// than the 52 characters of a fingerprint: a fault of the configuration, not
    /// of the person's input. It is checked before the prefix.
    #[error("terminal.fingerprint_confirm_chars is outside 1..=52")]
    ConfirmCharsOutOfRange,
}

/// The outcome of a well-formed prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrefixMatch {
    /// The prefix equals the start of the fingerprint.
    Match,
    /// The prefix differs: 409 `fingerprint_mismatch`, the attempt counts.
    Mismatch,
}

/// The fingerprint of a host's two public keys (4.3).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KeyFingerprint {
    /// 13 groups of four characters joined with `-` (64 characters).
    grouped: String,
}

/// The fingerprint of a host's Noise key and authentication key (4.3).
pub fn key_fingerprint(
    noise_public_key: &[u8; 32],
    auth_public_key_raw: &[u8; 32],
) -> KeyFingerprint {
    let digest = Sha256::new()
        .chain_update(DOMAIN)
        .chain_update(noise_public_key)
        .chain_update(auth_public_key_raw)
        .finalize();
    let compact = CROCKFORD.encode(&digest);
    let mut grouped = String::with_capacity(FINGERPRINT_CHARS + FINGERPRINT_CHARS / GROUP_CHARS);
    for (i, c) in compact.chars().enumerate() {
        if i > 0 && i % GROUP_CHARS == 0 {
            grouped.push('-');
        }
        grouped.push(c);
    }
    KeyFingerprint { grouped }
}

impl KeyFingerprint {
    /// A fingerprint in its displayed form as [`KeyFingerprint::as_str`] writes
    /// it (e.g. `hosts.key_fingerprint` read back): 13 groups of four upper-case
    /// characters of [`CROCKFORD_ALPHABET`] joined with `-`, whose last
    /// character carries zero padding bits (`0` or `G`). Anything else is `None`.
    pub fn parse(grouped: &str) -> Option<KeyFingerprint> {
        let bytes = grouped.as_bytes();
        if bytes.len() != FINGERPRINT_CHARS + FINGERPRINT_CHARS / GROUP_CHARS - 1 {
            return None;
        }
        let alphabet = CROCKFORD_ALPHABET.as_bytes();
        let well_formed = bytes.iter().enumerate().all(|(i, byte)| {
            if i % (GROUP_CHARS + 1) == GROUP_CHARS {
                *byte == b'-'
            } else {
                alphabet.contains(byte)
            }
        });
        // 52 characters carry 260 bits, the hash 256: the last one ends in 4 zero bits.
        if !well_formed || !matches!(bytes.last(), Some(b'0' | b'G')) {
            return None;
        }
        Some(KeyFingerprint {
            grouped: grouped.to_owned(),
        })
    }

    /// The displayed form: `XXXX-XXXX-…-XXXX`, 13 groups (the form of
    /// `key_fingerprint` in openapi.yaml).
    pub fn as_str(&self) -> &str {
        &self.grouped
    }

    /// The 52 characters without hyphens, upper case.
    pub fn compact(&self) -> String {
        self.grouped.chars().filter(|&c| c != '-').collect()
    }

    /// The audit form of 10.1: lower case without hyphens.
    pub fn audit_form(&self) -> String {
        self.grouped
            .chars()
            .filter(|&c| c != '-')
            .map(|c| c.to_ascii_lowercase())
            .collect()
    }

    /// Checks the prefix the owner typed (3.2 "Prefix") against this fingerprint.
    ///
    /// `confirm_chars` is `terminal.fingerprint_confirm_chars` (server config). The
    /// prefix is upper-cased (ASCII only, so no Unicode case mapping can turn
    /// another character into a valid one) and must then be exactly
    /// `confirm_chars` characters of [`CROCKFORD_ALPHABET`], else
    /// [`FingerprintError::InvalidFormat`]. A well-formed prefix is compared with
    /// the start of [`KeyFingerprint::compact`] in constant time.
    ///
    /// `confirm_chars` of 0 (an empty prefix would always match) or above 52 (no
    /// prefix could ever match) is refused with
    /// [`FingerprintError::ConfirmCharsOutOfRange`] whatever was typed.
    pub fn check_prefix(
        &self,
        prefix: &str,
        confirm_chars: usize,
    ) -> Result<PrefixMatch, FingerprintError> {
        if confirm_chars == 0 || confirm_chars > FINGERPRINT_CHARS {
            return Err(FingerprintError::ConfirmCharsOutOfRange);
        }
        // Every valid character is one ASCII byte, so a prefix with any other
        // character is refused by the length or by the alphabet check.
        let typed = prefix.as_bytes();
        if typed.len() != confirm_chars {
            return Err(FingerprintError::InvalidFormat);
        }
        let mut upper = [0u8; FINGERPRINT_CHARS];
        for (slot, &byte) in upper.iter_mut().zip(typed) {
            let byte = byte.to_ascii_uppercase();
            if !CROCKFORD_ALPHABET.as_bytes().contains(&byte) {
                return Err(FingerprintError::InvalidFormat);
            }
            *slot = byte;
        }
        let compact: Vec<u8> = self.grouped.bytes().filter(|&b| b != b'-').collect();
        let (Some(expected), Some(typed)) =
            (compact.get(..confirm_chars), upper.get(..confirm_chars))
        else {
            return Err(FingerprintError::ConfirmCharsOutOfRange);
        };
        if bool::from(typed.ct_eq(expected)) {
            Ok(PrefixMatch::Match)
        } else {
            Ok(PrefixMatch::Mismatch)
        }
    }
}

impl fmt::Display for KeyFingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.grouped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VECTOR: &str = "F0CC-6QS6-RF5D-3BSH-CAZQ-PXMR-J8RA-AHK5-1HF0-9S02-1GW6-BW3J-HK90";

    fn vector_fingerprint() -> KeyFingerprint {
        let noise: [u8; 32] = std::array::from_fn(|i| i as u8);
        let auth: [u8; 32] = std::array::from_fn(|i| 0x20 + i as u8);
        key_fingerprint(&noise, &auth)
    }

    #[test]
    fn known_vector() {
        let fp = vector_fingerprint();
        assert_eq!(fp.as_str(), VECTOR);
        assert_eq!(fp.to_string(), VECTOR);
        assert_eq!(fp.compact(), VECTOR.replace('-', ""));
        assert_eq!(fp.audit_form(), VECTOR.replace('-', "").to_lowercase());
    }

    #[test]
    fn vector_matches_an_independent_base32_of_the_hash() {
        // 5-bit groups from the most significant bit, written out by hand here
        // only to cross-check the data-encoding specification.
        let mut input = Vec::new();
        input.extend_from_slice(DOMAIN);
        input.extend((0u8..0x40).collect::<Vec<_>>());
        let digest = Sha256::digest(&input);
        let alphabet = CROCKFORD_ALPHABET.as_bytes();
        let mut bits: Vec<u8> = digest
            .iter()
            .flat_map(|byte| (0..8).rev().map(move |i| (byte >> i) & 1))
            .collect();
        bits.resize(FINGERPRINT_CHARS * 5, 0);
        let expected: String = bits
            .chunks(5)
            .map(|group| alphabet[group.iter().fold(0usize, |v, &b| v * 2 + b as usize)] as char)
            .collect();
        assert_eq!(vector_fingerprint().compact(), expected);
    }

    #[test]
    fn parse_takes_exactly_the_displayed_form() {
        let fp = vector_fingerprint();
        assert_eq!(KeyFingerprint::parse(VECTOR), Some(fp.clone()));
        for seed in 0u8..32 {
            let other = key_fingerprint(&[seed; 32], &[seed ^ 0x5a; 32]);
            assert_eq!(KeyFingerprint::parse(other.as_str()), Some(other));
        }
        for bad in [
            String::new(),
            VECTOR.to_lowercase(),
            VECTOR.replace('-', ""),
            VECTOR[..VECTOR.len() - 1].to_owned(),
            format!("{VECTOR}0"),
            format!(" {}", &VECTOR[1..]),
            VECTOR.replacen('F', "I", 1),
            VECTOR.replacen('-', "_", 1),
            // A last character with padding bits set.
            format!("{}1", &VECTOR[..VECTOR.len() - 1]),
            VECTOR.replacen("F0CC-", "F0C-C", 1),
        ] {
            assert_eq!(KeyFingerprint::parse(&bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_form_is_13_groups_of_4_and_each_key_counts() {
        let fp = key_fingerprint(&[7; 32], &[9; 32]);
        let groups: Vec<&str> = fp.as_str().split('-').collect();
        assert_eq!(groups.len(), 13);
        assert!(groups.iter().all(|g| g.len() == 4));
        assert!(
            fp.compact()
                .bytes()
                .all(|b| CROCKFORD_ALPHABET.as_bytes().contains(&b))
        );
        assert_eq!(fp.compact().len(), FINGERPRINT_CHARS);
        // The last character carries 1 bit of the hash and 4 zero bits.
        let last = fp.compact().bytes().last().unwrap();
        assert!(matches!(last, b'0' | b'G'), "{}", last as char);
        assert_ne!(key_fingerprint(&[8; 32], &[9; 32]), fp);
        assert_ne!(key_fingerprint(&[7; 32], &[8; 32]), fp);
        // The keys are not interchangeable.
        assert_ne!(key_fingerprint(&[9; 32], &[7; 32]), fp);
    }

    #[test]
    fn right_prefix_matches_in_either_case() {
        let fp = vector_fingerprint();
        for (prefix, n) in [
            ("F0CC6QS6", 8),
            ("f0cc6qs6", 8),
            ("F0cC6qS6", 8),
            ("F", 1),
            ("f0cc", 4),
            ("F0CC6QS6RF5D", 12),
        ] {
            assert_eq!(
                fp.check_prefix(prefix, n),
                Ok(PrefixMatch::Match),
                "{prefix}"
            );
        }
        let all = fp.compact();
        assert_eq!(fp.check_prefix(&all, 52), Ok(PrefixMatch::Match));
        assert_eq!(
            fp.check_prefix(&all.to_lowercase(), 52),
            Ok(PrefixMatch::Match)
        );
    }

    #[test]
    fn wrong_prefix_mismatches() {
        let fp = vector_fingerprint();
        for prefix in [
            "F0CC6QS7", "00000000", "ZZZZZZZZ", "0F0CC6QS", "f0cc6qs7", "G0CC6QS6",
        ] {
            assert_eq!(
                fp.check_prefix(prefix, 8),
                Ok(PrefixMatch::Mismatch),
                "{prefix}"
            );
        }
        let mut all = fp.compact();
        all.replace_range(51.., "1");
        assert_eq!(fp.check_prefix(&all, 52), Ok(PrefixMatch::Mismatch));
    }

    #[test]
    fn malformed_prefixes_are_invalid_format() {
        let fp = vector_fingerprint();
        for (name, prefix) in [
            ("empty", ""),
            ("too short", "F0CC6QS"),
            ("too long", "F0CC6QS6R"),
            ("hyphen (grouped form)", "F0CC-6QS"),
            ("grouped form of 8", "F0CC-6QS6"),
            ("I", "F0CC6QSI"),
            ("L", "F0CC6QSL"),
            ("O instead of 0", "FOCC6QS6"),
            ("U", "F0CC6QSU"),
            ("lower i", "f0cc6qsi"),
            ("lower l", "f0cc6qsl"),
            ("lower o", "focc6qs6"),
            ("lower u", "f0cc6qsu"),
            ("space", "F0CC 6QS"),
            ("leading space", " F0CC6QS6"),
            ("trailing space", "F0CC6QS6 "),
            ("trailing newline", "F0CC6QS6\n"),
            ("NUL", "F0CC6QS\0"),
            ("non-ASCII letter", "F0CC6QSé"),
            ("non-ASCII of 8 bytes", "F0CC6Qé"),
            ("full-width digit", "F０CC6QS6"),
            ("dotless i (upper-cases to I in Unicode)", "F0CC6QSı"),
            ("dotless i in 8 bytes", "F0CC6Qı"),
            ("long s (upper-cases to S in Unicode)", "F0CC6Qſ6"),
            ("long s in 8 bytes", "F0CC6Qſ"),
            ("emoji", "F0CC🙂"),
            ("punctuation", "F0CC6QS*"),
        ] {
            assert_eq!(
                fp.check_prefix(prefix, 8),
                Err(FingerprintError::InvalidFormat),
                "{name}"
            );
        }
    }

    #[test]
    fn confirm_chars_outside_1_to_52_is_refused_whatever_was_typed() {
        let fp = vector_fingerprint();
        let all = fp.compact();
        let longer = format!("{all}0");
        for (prefix, n) in [
            ("", 0),
            ("F0CC6QS6", 0),
            (longer.as_str(), 53),
            (all.as_str(), 53),
            ("F0CC6QS6", 53),
            ("", usize::MAX),
            ("F0CC6QS6", usize::MAX),
        ] {
            assert_eq!(
                fp.check_prefix(prefix, n),
                Err(FingerprintError::ConfirmCharsOutOfRange),
                "{n}"
            );
        }
    }
}
