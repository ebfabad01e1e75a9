//! Identifiers: UUIDv7 for everything we create (RFC 9562 section 5.7) and a
//! strict parser for UUIDs that arrive as text.
//!
//! The clock is an argument: callers pass the time (injected in tests), and the
//! 74 random bits come from the OS CSPRNG.

use uuid::Uuid;

/// Text that is not a UUID in its hyphenated form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("not a UUID in hyphenated form")]
pub struct UuidError;

/// The OS random source failed; nothing sensible can be created without it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the operating system's random source failed")]
pub struct RandomError;

/// A new UUIDv7 for the given Unix time in milliseconds.
pub fn uuid_v7(unix_millis: u64) -> Result<Uuid, RandomError> {
    let mut random = [0u8; 10];
    getrandom::fill(&mut random).map_err(|_| RandomError)?;
    Ok(uuid::Builder::from_unix_timestamp_millis(unix_millis, &random).into_uuid())
}

/// The Unix time in milliseconds of a UUIDv7, `None` for any other version.
/// The sweep uses it to read the grant time from `token_jti` (6.3).
pub fn v7_unix_millis(id: &Uuid) -> Option<u64> {
    if id.get_version_num() != 7 {
        return None;
    }
    let bytes = id.as_bytes();
    let mut millis = [0u8; 8];
    millis[2..].copy_from_slice(&bytes[..6]);
    Some(u64::from_be_bytes(millis))
}

/// Parses exactly the hyphenated form `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`
/// (hex digits in either case, RFC 9562 section 4). Braces, `urn:uuid:` and the
/// simple 32-digit form are refused, so one ID has one spelling on the wire.
pub fn parse_uuid(text: &str) -> Result<Uuid, UuidError> {
    let bytes = text.as_bytes();
    if bytes.len() != 36 {
        return Err(UuidError);
    }
    for (i, b) in bytes.iter().enumerate() {
        let ok = match i {
            8 | 13 | 18 | 23 => *b == b'-',
            _ => b.is_ascii_hexdigit(),
        };
        if !ok {
            return Err(UuidError);
        }
    }
    Uuid::try_parse(text).map_err(|_| UuidError)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v7_carries_the_time() {
        let id = uuid_v7(1_764_000_000_123).unwrap();
        assert_eq!(id.get_version_num(), 7);
        assert_eq!(v7_unix_millis(&id), Some(1_764_000_000_123));
        assert_ne!(uuid_v7(1).unwrap(), uuid_v7(1).unwrap());
        assert_eq!(v7_unix_millis(&Uuid::nil()), None);
    }

    #[test]
    fn v7_sorts_by_time() {
        let a = uuid_v7(1000).unwrap();
        let b = uuid_v7(1001).unwrap();
        assert!(a < b);
    }

    #[test]
    fn strict_text_form() {
        let id = "0192f5c4-7d3a-7b2e-9f00-1234567890ab";
        assert_eq!(parse_uuid(id).unwrap().to_string(), id);
        assert!(parse_uuid(&id.to_uppercase()).is_ok());
        for bad in [
            "",
            "0192f5c47d3a7b2e9f001234567890ab",
            "{0192f5c4-7d3a-7b2e-9f00-1234567890ab}",
            "urn:uuid:0192f5c4-7d3a-7b2e-9f00-1234567890ab",
            "0192f5c4-7d3a-7b2e-9f00-1234567890a",
            "0192f5c4-7d3a-7b2e-9f00-1234567890abc",
            "0192f5c4_7d3a-7b2e-9f00-1234567890ab",
            "0192f5c4-7d3a-7b2e-9f00-1234567890ag",
            "0192f5c4-7d3a-7b2e-9f00-1234567890a\u{e9}",
        ] {
            assert_eq!(parse_uuid(bad), Err(UuidError), "{bad:?}");
        }
    }
}
