//! Passwords (DESIGN 3.1): argon2id, stored as a PHC string (`$argon2id$v=19$...`),
//! which carries its parameters, so raising them later keeps old hashes usable.
//!
//! # The password rule
//! At least [`PASSWORD_MIN_CHARS`] (12) and at most [`PASSWORD_MAX_CHARS`] (256)
//! characters (Unicode scalar values); nothing else — no composition rules,
//! which push people to predictable patterns (NIST SP 800-63B 5.1.1). A
//! password that breaks the rule is refused with `400 validation_failed`,
//! `errors[] {pointer: "/password", code: "too_short" | "too_long"}`.
//!
//! # Cost
//! Parameters: 19 MiB of memory, 2 passes, 1 lane (the OWASP recommendation
//! for argon2id). Hashing runs on tokio's blocking pool, at most
//! [`CONCURRENT_HASHES`] at a time, so a burst of logins neither stalls the async
//! workers nor takes unbounded memory. A login for an unknown username verifies
//! against a dummy hash, so its answer takes as long as a wrong password's.

use std::fmt;
use std::sync::{LazyLock, OnceLock};

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::{Algorithm, Argon2, Params, Version};
use tokio::sync::Semaphore;
use zeroize::Zeroizing;

use super::IdentityError;

/// Shortest password, in characters.
pub const PASSWORD_MIN_CHARS: usize = 12;
/// Longest password, in characters.
pub const PASSWORD_MAX_CHARS: usize = 256;
/// argon2 memory cost in KiB.
pub const ARGON2_MEMORY_KIB: u32 = 19_456;
/// argon2 passes.
pub const ARGON2_PASSES: u32 = 2;
/// Hashes computed at once (each holds [`ARGON2_MEMORY_KIB`] of memory).
pub const CONCURRENT_HASHES: usize = 2;

static HASHING: LazyLock<Semaphore> = LazyLock::new(|| Semaphore::new(CONCURRENT_HASHES));

/// A hash of a random password, for the timing of unknown usernames.
static DUMMY_HASH: OnceLock<String> = OnceLock::new();

/// A password as received; wiped on drop, `Debug` redacted.
#[derive(Clone)]
pub struct Password(Zeroizing<String>);

impl fmt::Debug for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Password(***)")
    }
}

impl Password {
    /// A new password, checked against the rule (`pointer` names the member).
    pub fn new(text: &str, pointer: &str) -> Result<Password, IdentityError> {
        let chars = text.chars().count();
        if chars < PASSWORD_MIN_CHARS {
            return Err(IdentityError::invalid(pointer, "too_short"));
        }
        if chars > PASSWORD_MAX_CHARS {
            return Err(IdentityError::invalid(pointer, "too_long"));
        }
        Ok(Password(Zeroizing::new(text.to_owned())))
    }

    /// A password to check at login: no rule applies (a rule that changed must
    /// not lock anyone out), only the length bound, beyond which no stored
    /// password can match.
    pub fn presented(text: &str) -> Option<Password> {
        (text.chars().count() <= PASSWORD_MAX_CHARS)
            .then(|| Password(Zeroizing::new(text.to_owned())))
    }
}

fn argon2() -> Result<Argon2<'static>, IdentityError> {
    let params = Params::new(ARGON2_MEMORY_KIB, ARGON2_PASSES, 1, None)
        .map_err(|_| IdentityError::Crypto("argon2 parameters"))?;
    Ok(Argon2::new(Algorithm::Argon2id, Version::V0x13, params))
}

fn hash_blocking(password: &[u8]) -> Result<String, IdentityError> {
    let mut salt = [0u8; 16];
    getrandom::fill(&mut salt).map_err(|_| IdentityError::Crypto("the random source failed"))?;
    let salt = SaltString::encode_b64(&salt).map_err(|_| IdentityError::Crypto("argon2 salt"))?;
    let hash = argon2()?
        .hash_password(password, &salt)
        .map_err(|_| IdentityError::Crypto("argon2 hashing"))?;
    Ok(hash.to_string())
}

fn verify_blocking(password: &[u8], stored: &str) -> Result<bool, IdentityError> {
    let parsed =
        PasswordHash::new(stored).map_err(|_| IdentityError::Stored("persons.password_hash"))?;
    // The comparison inside is constant-time (password-hash's `Output` equality).
    Ok(argon2()?.verify_password(password, &parsed).is_ok())
}

async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, IdentityError> + Send + 'static,
) -> Result<T, IdentityError> {
    let _permit = HASHING
        .acquire()
        .await
        .map_err(|_| IdentityError::Crypto("the hashing pool is closed"))?;
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|_| IdentityError::Crypto("the hashing task failed"))?
}

/// The argon2id hash of `password` (PHC string).
pub async fn hash(password: &Password) -> Result<String, IdentityError> {
    let password = password.0.clone();
    blocking(move || hash_blocking(password.as_bytes())).await
}

/// Whether `password` matches `stored`. Without a stored hash (unknown username,
/// not enrolled) it verifies against a dummy hash and answers `false`, taking
/// as long as a real check.
pub async fn verify(password: &Password, stored: Option<String>) -> Result<bool, IdentityError> {
    let password = password.0.clone();
    blocking(move || match stored {
        Some(stored) => verify_blocking(password.as_bytes(), &stored),
        None => {
            let dummy = match DUMMY_HASH.get() {
                Some(dummy) => dummy.clone(),
                None => {
                    let mut random = Zeroizing::new([0u8; 32]);
                    getrandom::fill(random.as_mut_slice())
                        .map_err(|_| IdentityError::Crypto("the random source failed"))?;
                    let dummy = hash_blocking(random.as_slice())?;
                    DUMMY_HASH.get_or_init(|| dummy).clone()
                }
            };
            verify_blocking(password.as_bytes(), &dummy).map(|_| false)
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_password_rule() {
        assert!(Password::new("eleven char", "/password").is_err());
        assert!(Password::new("twelve chars", "/password").is_ok());
        // Characters, not bytes: 12 umlauts are 24 bytes and pass; 11 do not.
        assert!(Password::new(&"ä".repeat(12), "/password").is_ok());
        match Password::new(&"ä".repeat(11), "/password") {
            Err(IdentityError::Invalid(invalid)) => {
                assert_eq!(invalid.pointer, "/password");
                assert_eq!(invalid.code, "too_short");
            }
            other => panic!("{other:?}"),
        }
        match Password::new(&"x".repeat(257), "/password") {
            Err(IdentityError::Invalid(invalid)) => assert_eq!(invalid.code, "too_long"),
            other => panic!("{other:?}"),
        }
        assert!(Password::presented(&"x".repeat(257)).is_none());
        assert_eq!(
            format!("{:?}", Password::new("a secret phrase", "/p").unwrap()),
            "Password(***)"
        );
    }

    #[tokio::test]
    async fn hash_and_verify() {
        let password = Password::new("correct horse battery", "/password").unwrap();
        let stored = hash(&password).await.unwrap();
        assert!(
            stored.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"),
            "{stored}"
        );
        assert!(!stored.contains("correct horse"));
        assert!(verify(&password, Some(stored.clone())).await.unwrap());
        let wrong = Password::presented("correct horse battery!").unwrap();
        assert!(!verify(&wrong, Some(stored)).await.unwrap());
        assert!(!verify(&password, None).await.unwrap());
    }
}
