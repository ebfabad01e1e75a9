//! The host pairing code `bothy_hpc_<random>_<checksum>` (spec 24, section 3.2
//! "Code", ADR 0061).
//!
//! # Format
//!
//! ```text
//! bothy_hpc_<random>_<checksum>
//! ```
//!
//! - `bothy_hpc_`: the literal prefix (10 ASCII characters).
//! - `<random>`: 160 bits (20 bytes) from the operating system's CSPRNG, written as
//!   32 characters of lower-case Crockford base32
//!   (`0123456789abcdefghjkmnpqrstvwxyz`), 5-bit groups from the most significant
//!   bit (160 = 32 × 5, so there are no padding bits).
//! - `_`: a separator.
//! - `<checksum>`: the CRC-32 (IEEE 802.3 / ISO-HDLC, as zlib's `crc32`:
//!   polynomial 0x04C11DB7 reflected, initial value and final XOR 0xFFFFFFFF) of
//!   the ASCII string `bothy_hpc_<random>`, written as a 7-digit base-32 number in
//!   the same lower-case alphabet, most significant digit first: 35 bits, of which
//!   the top 3 are zero, so the first digit is one of `0`–`3`.
//!
//! The whole code is exactly 50 ASCII characters. Example (random bytes all zero):
//! `bothy_hpc_00000000000000000000000000000000_3bj6nby` (CRC-32 0xd723557e).
//!
//! Parsing accepts exactly this form and nothing else: no trimming, no case
//! folding, no mapping of look-alike characters (upper case is refused, because the
//! code is shown once and copied, not typed from a display). Refusals are checked in
//! this order: prefix, length, separator, characters, checksum.
//!
//! # Why this design
//!
//! - 160 bits exceed the 128 bits ADR 0061 requires; the server stores only an
//!   HMAC of the whole string, so the code itself is the secret.
//! - The checksum lets the server refuse a malformed or mistyped code without any
//!   database access (3.2: every failing code is 401 with the same body). CRC-32
//!   detects every burst error of up to 32 bits. Changing one character changes
//!   bits within one byte, and swapping two adjacent characters changes bits
//!   within two consecutive bytes (a burst of at most 16 bits), so every
//!   single-character substitution and every adjacent transposition in the random
//!   part is caught; in the checksum part any change alters the stated value. A
//!   random string passes with a probability of 2^-32.
//! - The checksum is not a security control (anyone can compute it); it only
//!   keeps junk and typos away from the database and the HMAC.
//! - The checksum covers the prefix too, so a code of another `bothy_*` kind with
//!   the same body does not pass.
//! - Lower-case Crockford base32 has no look-alike pairs (no i, l, o, u) and needs
//!   no escaping in URLs, shells or JSON.

use std::fmt;
use std::sync::LazyLock;

use data_encoding::{Encoding, Specification};
use subtle::ConstantTimeEq;

/// The literal prefix.
pub const PREFIX: &str = "bothy_hpc_";

/// Bytes of randomness: 160 bits.
pub const RANDOM_BYTES: usize = 20;

/// Characters of the random part: 160 bits in 5-bit groups.
pub const RANDOM_CHARS: usize = 32;

/// Characters of the checksum: CRC-32 as 7 base-32 digits.
pub const CHECKSUM_CHARS: usize = 7;

/// The length of every pairing code: prefix, random, `_`, checksum.
pub const CODE_LEN: usize = PREFIX.len() + RANDOM_CHARS + 1 + CHECKSUM_CHARS;

/// The lower-case Crockford base32 alphabet.
const ALPHABET: &[u8; 32] = b"0123456789abcdefghjkmnpqrstvwxyz";

/// Byte offset of the separator between random and checksum.
const SEPARATOR_AT: usize = PREFIX.len() + RANDOM_CHARS;

/// Lower-case Crockford base32, most significant bit first, no padding.
static CROCKFORD_LOWER: LazyLock<Encoding> = LazyLock::new(|| {
    let mut spec = Specification::new();
    for &symbol in ALPHABET {
        spec.symbols.push(char::from(symbol));
    }
    // A constant specification: 32 distinct ASCII symbols, no padding. The unit
    // tests build it, so this cannot fail at run time.
    spec.encoding()
        .expect("the Crockford base32 specification is valid")
});

/// Every refusal of this module. No variant carries any part of the code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PairingCodeError {
    /// The input does not start with `bothy_hpc_`.
    #[error("pairing code does not start with bothy_hpc_")]
    WrongPrefix,
    /// The input is not exactly 50 bytes long.
    #[error("pairing code has the wrong length")]
    WrongLength,
    /// No `_` between the random part and the checksum.
    #[error("pairing code has no separator before the checksum")]
    MissingSeparator,
    /// A character of the random part or the checksum outside the lower-case
    /// Crockford alphabet (upper case included).
    #[error("pairing code has a character outside the alphabet")]
    InvalidCharacter,
    /// The checksum does not match the code.
    #[error("pairing code checksum does not match")]
    BadChecksum,
    /// Generation only: the operating system's random source failed.
    #[error("the operating system's random source failed: {0}")]
    RandomUnavailable(getrandom::Error),
}

/// A well-formed pairing code. It is a secret: `Debug` redacts it and there is no
/// `Display`; use [`PairingCode::as_str`] only to show it once or to hash it.
#[derive(Clone)]
pub struct PairingCode {
    code: String,
}

impl PairingCode {
    /// A fresh code with 160 bits from the operating system's CSPRNG.
    pub fn generate() -> Result<Self, PairingCodeError> {
        let mut random = [0u8; RANDOM_BYTES];
        getrandom::fill(&mut random).map_err(PairingCodeError::RandomUnavailable)?;
        Ok(Self::from_random(&random))
    }

    fn from_random(random: &[u8; RANDOM_BYTES]) -> Self {
        let mut code = String::with_capacity(CODE_LEN);
        code.push_str(PREFIX);
        CROCKFORD_LOWER.encode_append(random, &mut code);
        let checksum = checksum(code.as_bytes());
        code.push('_');
        code.extend(checksum.iter().map(|&digit| char::from(digit)));
        Self { code }
    }

    /// Parses a code exactly as given; see the module docs for the format and the
    /// order of the refusals. Never panics, whatever the input.
    pub fn parse(input: &str) -> Result<Self, PairingCodeError> {
        let bytes = input.as_bytes();
        if !bytes.starts_with(PREFIX.as_bytes()) {
            return Err(PairingCodeError::WrongPrefix);
        }
        if bytes.len() != CODE_LEN {
            return Err(PairingCodeError::WrongLength);
        }
        let (body, rest) = bytes
            .split_at_checked(SEPARATOR_AT)
            .ok_or(PairingCodeError::WrongLength)?;
        let (&separator, stated) = rest.split_first().ok_or(PairingCodeError::WrongLength)?;
        if separator != b'_' {
            return Err(PairingCodeError::MissingSeparator);
        }
        let random = body
            .get(PREFIX.len()..)
            .ok_or(PairingCodeError::WrongLength)?;
        if !random
            .iter()
            .chain(stated)
            .all(|byte| ALPHABET.contains(byte))
        {
            return Err(PairingCodeError::InvalidCharacter);
        }
        if stated != checksum(body) {
            return Err(PairingCodeError::BadChecksum);
        }
        Ok(Self {
            code: input.to_owned(),
        })
    }

    /// The code, to show once to the owner or to compute its HMAC.
    pub fn as_str(&self) -> &str {
        &self.code
    }
}

/// CRC-32 of `body` (`bothy_hpc_<random>`) as 7 base-32 digits, most significant
/// first.
fn checksum(body: &[u8]) -> [u8; CHECKSUM_CHARS] {
    let crc = u64::from(crc32fast::hash(body));
    let mut digits = [0u8; CHECKSUM_CHARS];
    for (i, digit) in digits.iter_mut().enumerate() {
        let shift = 5 * (CHECKSUM_CHARS - 1 - i);
        *digit = ALPHABET[((crc >> shift) & 0x1f) as usize];
    }
    digits
}

impl PartialEq for PairingCode {
    /// Constant time: a code is a secret.
    fn eq(&self, other: &Self) -> bool {
        bool::from(self.code.as_bytes().ct_eq(other.code.as_bytes()))
    }
}

impl Eq for PairingCode {}

impl fmt::Debug for PairingCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PairingCode(<redacted>)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Random bytes all zero, checked against zlib's crc32 (Python `zlib.crc32`).
    const ZERO_VECTOR: &str = "bothy_hpc_00000000000000000000000000000000_3bj6nby";
    /// Random bytes 0x00..=0x13.
    const COUNTING_VECTOR: &str = "bothy_hpc_000g40r40m30e209185gr38e1w8124gk_1sm7n3j";
    /// Random bytes all 0xff.
    const ONES_VECTOR: &str = "bothy_hpc_zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz_20pgvq4";

    fn codes() -> Vec<String> {
        let mut codes = vec![
            ZERO_VECTOR.to_owned(),
            COUNTING_VECTOR.to_owned(),
            ONES_VECTOR.to_owned(),
        ];
        for _ in 0..8 {
            codes.push(PairingCode::generate().unwrap().as_str().to_owned());
        }
        codes
    }

    #[test]
    fn known_vectors() {
        assert_eq!(PairingCode::from_random(&[0; 20]).as_str(), ZERO_VECTOR);
        let counting: [u8; 20] = std::array::from_fn(|i| i as u8);
        assert_eq!(
            PairingCode::from_random(&counting).as_str(),
            COUNTING_VECTOR
        );
        assert_eq!(PairingCode::from_random(&[0xff; 20]).as_str(), ONES_VECTOR);
        for vector in [ZERO_VECTOR, COUNTING_VECTOR, ONES_VECTOR] {
            assert_eq!(PairingCode::parse(vector).unwrap().as_str(), vector);
        }
        assert_eq!(crc32fast::hash(&ZERO_VECTOR.as_bytes()[..42]), 0xd723_557e);
    }

    #[test]
    fn generate_then_parse_round_trips() {
        let mut seen = std::collections::HashSet::new();
        for _ in 0..2000 {
            let code = PairingCode::generate().unwrap();
            let text = code.as_str();
            assert_eq!(text.len(), CODE_LEN);
            assert!(text.starts_with(PREFIX));
            assert!(matches!(text.as_bytes()[SEPARATOR_AT + 1], b'0'..=b'3'));
            let parsed = PairingCode::parse(text).unwrap();
            assert_eq!(parsed, code);
            assert_eq!(parsed.as_str(), text);
            assert!(seen.insert(text.to_owned()), "a repeated code");
        }
    }

    #[test]
    fn every_single_character_substitution_fails() {
        for code in codes() {
            let original = code.as_bytes();
            for position in 0..CODE_LEN {
                // Every other ASCII byte, and every other symbol of the alphabet.
                for replacement in 0u8..0x80 {
                    if replacement == original[position] {
                        continue;
                    }
                    let mut changed = original.to_vec();
                    changed[position] = replacement;
                    let changed = String::from_utf8(changed).unwrap();
                    let result = PairingCode::parse(&changed);
                    let want = if position < PREFIX.len() {
                        PairingCodeError::WrongPrefix
                    } else if position == SEPARATOR_AT {
                        PairingCodeError::MissingSeparator
                    } else if ALPHABET.contains(&replacement) {
                        PairingCodeError::BadChecksum
                    } else {
                        PairingCodeError::InvalidCharacter
                    };
                    assert_eq!(
                        result,
                        Err(want),
                        "position {position}, byte {replacement:#04x}"
                    );
                }
            }
        }
    }

    #[test]
    fn every_adjacent_transposition_fails() {
        for code in codes() {
            let original = code.as_bytes();
            for position in 0..CODE_LEN - 1 {
                if original[position] == original[position + 1] {
                    continue;
                }
                let mut swapped = original.to_vec();
                swapped.swap(position, position + 1);
                let swapped = String::from_utf8(swapped).unwrap();
                assert!(PairingCode::parse(&swapped).is_err(), "position {position}");
                let in_code = position >= PREFIX.len()
                    && position + 1 != SEPARATOR_AT
                    && position != SEPARATOR_AT;
                if in_code {
                    assert_eq!(
                        PairingCode::parse(&swapped),
                        Err(PairingCodeError::BadChecksum)
                    );
                }
            }
        }
    }

    #[test]
    fn every_refusal() {
        let valid = ZERO_VECTOR;
        let upper_random = valid.replacen("00000000", "0000000A", 1);
        let upper_checksum = valid.replace("3bj6nby", "3BJ6NBY");
        let truncated = &valid[..CODE_LEN - 1];
        let extended = format!("{valid}0");
        let cases: Vec<(&str, String, PairingCodeError)> = vec![
            ("empty", String::new(), PairingCodeError::WrongPrefix),
            (
                "prefix only",
                PREFIX.to_owned(),
                PairingCodeError::WrongLength,
            ),
            (
                "part of the prefix",
                "bothy_hp".to_owned(),
                PairingCodeError::WrongPrefix,
            ),
            (
                "upper-case prefix",
                valid.replace("bothy_hpc_", "BOTHY_HPC_"),
                PairingCodeError::WrongPrefix,
            ),
            (
                "other kind",
                valid.replace("bothy_hpc_", "bothy_hpk_"),
                PairingCodeError::WrongPrefix,
            ),
            (
                "leading space",
                format!(" {valid}"),
                PairingCodeError::WrongPrefix,
            ),
            (
                "trailing space",
                format!("{valid} "),
                PairingCodeError::WrongLength,
            ),
            (
                "trailing newline",
                format!("{valid}\n"),
                PairingCodeError::WrongLength,
            ),
            (
                "truncated by one",
                truncated.to_owned(),
                PairingCodeError::WrongLength,
            ),
            (
                "truncated checksum",
                valid[..SEPARATOR_AT + 1].to_owned(),
                PairingCodeError::WrongLength,
            ),
            (
                "no checksum",
                valid[..SEPARATOR_AT].to_owned(),
                PairingCodeError::WrongLength,
            ),
            ("extended by one", extended, PairingCodeError::WrongLength),
            (
                "twice",
                format!("{valid}{valid}"),
                PairingCodeError::WrongLength,
            ),
            (
                "separator moved one to the left",
                format!(
                    "{}_{}{}",
                    &valid[..SEPARATOR_AT - 1],
                    &valid[SEPARATOR_AT - 1..SEPARATOR_AT],
                    &valid[SEPARATOR_AT + 1..]
                ),
                PairingCodeError::MissingSeparator,
            ),
            (
                "hyphen separator",
                valid.replace("0_3", "0-3"),
                PairingCodeError::MissingSeparator,
            ),
            (
                "upper case in random",
                upper_random,
                PairingCodeError::InvalidCharacter,
            ),
            (
                "upper case in checksum",
                upper_checksum,
                PairingCodeError::InvalidCharacter,
            ),
            (
                "i in random",
                valid.replacen("00000000", "0000000i", 1),
                PairingCodeError::InvalidCharacter,
            ),
            (
                "l in random",
                valid.replacen("00000000", "0000000l", 1),
                PairingCodeError::InvalidCharacter,
            ),
            (
                "o in random",
                valid.replacen("00000000", "0000000o", 1),
                PairingCodeError::InvalidCharacter,
            ),
            (
                "u in random",
                valid.replacen("00000000", "0000000u", 1),
                PairingCodeError::InvalidCharacter,
            ),
            (
                "underscore in random",
                valid.replacen("00000000", "0000000_", 1),
                PairingCodeError::InvalidCharacter,
            ),
            (
                "checksum above 32 bits",
                valid.replace("_3bj6nby", "_4bj6nby"),
                PairingCodeError::BadChecksum,
            ),
            (
                "checksum of another code",
                valid.replace("_3bj6nby", "_1sm7n3j"),
                PairingCodeError::BadChecksum,
            ),
            (
                "checksum all zero",
                valid.replace("_3bj6nby", "_0000000"),
                PairingCodeError::BadChecksum,
            ),
            (
                "random changed",
                valid.replacen("00000000", "00000001", 1),
                PairingCodeError::BadChecksum,
            ),
        ];
        for (name, input, want) in &cases {
            assert_eq!(PairingCode::parse(input), Err(*want), "{name}");
        }
    }

    #[test]
    fn non_ascii_and_multibyte_input_is_refused_without_panic() {
        let valid = ZERO_VECTOR;
        // Same byte length (50) with a 2-byte character at the separator or in the code.
        let at_separator = format!("{}é{}", &valid[..SEPARATOR_AT], &valid[SEPARATOR_AT + 2..]);
        assert_eq!(at_separator.len(), CODE_LEN);
        let in_random = format!("{}é{}", &valid[..20], &valid[22..]);
        assert_eq!(in_random.len(), CODE_LEN);
        let straddling = format!(
            "{}€{}",
            &valid[..SEPARATOR_AT - 1],
            &valid[SEPARATOR_AT + 2..]
        );
        assert_eq!(straddling.len(), CODE_LEN);
        let in_checksum = format!("{}🙂", &valid[..CODE_LEN - 4]);
        assert_eq!(in_checksum.len(), CODE_LEN);
        let cases: Vec<(&str, String, PairingCodeError)> = vec![
            (
                "2-byte char at the separator",
                at_separator,
                PairingCodeError::MissingSeparator,
            ),
            (
                "2-byte char in random",
                in_random,
                PairingCodeError::InvalidCharacter,
            ),
            (
                "3-byte char over the separator",
                straddling,
                PairingCodeError::MissingSeparator,
            ),
            (
                "4-byte char in checksum",
                in_checksum,
                PairingCodeError::InvalidCharacter,
            ),
            (
                "full-width prefix",
                valid.replacen('b', "ｂ", 1),
                PairingCodeError::WrongPrefix,
            ),
            (
                "only multibyte",
                "ééééééééééééééééééééééééé".to_owned(),
                PairingCodeError::WrongPrefix,
            ),
            (
                "NUL in random",
                valid.replacen('0', "\0", 1),
                PairingCodeError::InvalidCharacter,
            ),
            (
                "full-width digit, longer",
                valid.replacen("00", "０", 1),
                PairingCodeError::WrongLength,
            ),
        ];
        for (name, input, want) in &cases {
            assert_eq!(PairingCode::parse(input), Err(*want), "{name}");
        }
        // Every single byte position replaced by a multibyte character, whatever length follows.
        for position in 0..CODE_LEN {
            for ch in ["é", "€", "🙂"] {
                let input = format!("{}{ch}{}", &valid[..position], &valid[position + 1..]);
                assert!(PairingCode::parse(&input).is_err());
            }
        }
    }

    #[test]
    fn debug_and_errors_do_not_contain_the_code() {
        let code = PairingCode::generate().unwrap();
        let debug = format!("{code:?}");
        let random = &code.as_str()[PREFIX.len()..SEPARATOR_AT];
        assert!(!debug.contains(random), "{debug}");
        assert!(!debug.contains(PREFIX));
        assert_eq!(debug, "PairingCode(<redacted>)");
        let debug = format!("{:?}", Some(&code));
        assert!(!debug.contains(random));
        let bad = format!("{}x", code.as_str());
        let err = PairingCode::parse(&bad).unwrap_err();
        assert!(!format!("{err} {err:?}").contains(random));
    }

    #[test]
    fn equality_compares_the_whole_code() {
        let a = PairingCode::parse(ZERO_VECTOR).unwrap();
        let b = PairingCode::parse(COUNTING_VECTOR).unwrap();
        assert_eq!(a, a.clone());
        assert_ne!(a, b);
    }
}
