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
//! for argon2id). Hashing runs on [`CONCURRENT_HASHES`] dedicated threads of
//! their own (`bothy-argon2-N`), each with one argon2 memory block allocated
//! at its first job and reused for every later one, so a burst of logins
//! neither stalls the async workers nor takes more than `CONCURRENT_HASHES ×
//! ARGON2_MEMORY_KIB` for hashing, ever: on tokio's blocking pool every thread
//! that ran a hash kept the freed 19 MiB in its own malloc arena (issue 15:
//! 300 concurrent failed logins took the server from 36 MiB to 700 MiB, and it
//! stayed there; docs/decisions.md D-355). Jobs wait in one queue, in order.
//! A login for an unknown username verifies against a dummy hash, so its
//! answer takes as long as a wrong password's.

use std::fmt;
use std::sync::mpsc;
use std::sync::{Arc, LazyLock, Mutex, OnceLock, PoisonError};

use argon2::password_hash::{Output, ParamsString, PasswordHash, SaltString};
use argon2::{Algorithm, Argon2, Block, Params, Version};
use tokio::sync::oneshot;
use zeroize::Zeroizing;

use super::IdentityError;

/// The password rule, shared with the clients through `bothy-api`.
pub use bothy_api::auth::{PASSWORD_MAX_CHARS, PASSWORD_MIN_CHARS};
/// argon2 memory cost in KiB.
pub const ARGON2_MEMORY_KIB: u32 = 19_456;
/// argon2 passes.
pub const ARGON2_PASSES: u32 = 2;
/// Hashes computed at once: the number of hashing threads (each holds
/// [`ARGON2_MEMORY_KIB`] of memory for the life of the process).
pub const CONCURRENT_HASHES: usize = 2;

/// The hash's length in bytes (argon2's default, as before).
const OUTPUT_BYTES: usize = 32;

/// The queue of the hashing threads, started at the first use.
static HASHERS: LazyLock<Result<Hashers, String>> = LazyLock::new(Hashers::start);

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
    let params = Params::new(ARGON2_MEMORY_KIB, ARGON2_PASSES, 1, Some(OUTPUT_BYTES))
        .map_err(|_| IdentityError::Crypto("argon2 parameters"))?;
    Ok(Argon2::new(Algorithm::Argon2id, Version::V0x13, params))
}

/// The memory of one hashing thread: argon2's blocks, reused by every job.
struct Memory(Vec<Block>);

impl Memory {
    /// The blocks for `params`: this thread's own when they are large enough
    /// (always, for the hashes this server writes); a larger stored hash
    /// (parameters raised by hand) gets a block of its own for this job.
    fn run(
        &mut self,
        params: &Params,
        f: impl FnOnce(&mut [Block]) -> Result<(), argon2::Error>,
    ) -> Result<(), argon2::Error> {
        let needed = params.block_count();
        if needed > self.0.len() {
            if self.0.is_empty() && needed <= default_block_count() {
                self.0 = vec![Block::default(); needed];
            } else {
                return f(&mut vec![Block::default(); needed]);
            }
        }
        f(&mut self.0)
    }
}

fn default_block_count() -> usize {
    argon2().map_or(0, |a| a.params().block_count())
}

fn hash_with(memory: &mut Memory, password: &[u8]) -> Result<String, IdentityError> {
    let mut salt = [0u8; 16];
    getrandom::fill(&mut salt).map_err(|_| IdentityError::Crypto("the random source failed"))?;
    let argon2 = argon2()?;
    let mut out = [0u8; OUTPUT_BYTES];
    memory
        .run(argon2.params(), |blocks| {
            argon2.hash_password_into_with_memory(password, &salt, &mut out, blocks)
        })
        .map_err(|_| IdentityError::Crypto("argon2 hashing"))?;
    let salt = SaltString::encode_b64(&salt).map_err(|_| IdentityError::Crypto("argon2 salt"))?;
    let hash = PasswordHash {
        algorithm: Algorithm::Argon2id.ident(),
        version: Some(Version::V0x13.into()),
        params: ParamsString::try_from(argon2.params())
            .map_err(|_| IdentityError::Crypto("argon2 parameters"))?,
        salt: Some(salt.as_salt()),
        hash: Some(Output::new(&out).map_err(|_| IdentityError::Crypto("argon2 hashing"))?),
    };
    Ok(hash.to_string())
}

/// What `PasswordVerifier::verify_password` does, with this thread's memory:
/// the stored string's algorithm, version, parameters and salt, and a
/// constant-time comparison (password-hash's `Output` equality).
fn verify_with(memory: &mut Memory, password: &[u8], stored: &str) -> Result<bool, IdentityError> {
    let malformed = || IdentityError::Stored("persons.password_hash");
    let parsed = PasswordHash::new(stored).map_err(|_| malformed())?;
    let algorithm = Algorithm::try_from(parsed.algorithm).map_err(|_| malformed())?;
    let version = parsed
        .version
        .map(Version::try_from)
        .transpose()
        .map_err(|_| malformed())?
        .unwrap_or_default();
    let params = Params::try_from(&parsed).map_err(|_| malformed())?;
    let (Some(salt), Some(expected)) = (parsed.salt, parsed.hash) else {
        return Err(malformed());
    };
    let mut salt_bytes = [0u8; 64];
    let salt = salt.decode_b64(&mut salt_bytes).map_err(|_| malformed())?;
    let argon2 = Argon2::new(algorithm, version, params);
    let mut out = Zeroizing::new(vec![0u8; expected.len()]);
    memory
        .run(argon2.params(), |blocks| {
            argon2.hash_password_into_with_memory(password, salt, &mut out, blocks)
        })
        .map_err(|_| IdentityError::Crypto("argon2 hashing"))?;
    let computed = Output::new(&out).map_err(|_| malformed())?;
    Ok(computed == expected)
}

/// One job of a hashing thread.
enum Job {
    Hash {
        password: Zeroizing<String>,
        reply: oneshot::Sender<Result<String, IdentityError>>,
    },
    Verify {
        password: Zeroizing<String>,
        stored: Option<String>,
        reply: oneshot::Sender<Result<bool, IdentityError>>,
    },
}

impl Job {
    fn run(self, memory: &mut Memory) {
        // A caller that went away (its request was dropped) needs no answer.
        match self {
            Job::Hash { password, reply } => {
                let _ = reply.send(hash_with(memory, password.as_bytes()));
            }
            Job::Verify {
                password,
                stored,
                reply,
            } => {
                let _ = reply.send(verify_job(memory, password.as_bytes(), stored));
            }
        }
    }
}

fn verify_job(
    memory: &mut Memory,
    password: &[u8],
    stored: Option<String>,
) -> Result<bool, IdentityError> {
    match stored {
        Some(stored) => verify_with(memory, password, &stored),
        None => {
            let dummy = match DUMMY_HASH.get() {
                Some(dummy) => dummy,
                None => {
                    let mut random = Zeroizing::new([0u8; 32]);
                    getrandom::fill(random.as_mut_slice())
                        .map_err(|_| IdentityError::Crypto("the random source failed"))?;
                    let dummy = hash_with(memory, random.as_slice())?;
                    DUMMY_HASH.get_or_init(|| dummy)
                }
            };
            verify_with(memory, password, dummy).map(|_| false)
        }
    }
}

/// The queue in front of the hashing threads.
struct Hashers {
    jobs: mpsc::Sender<Job>,
}

impl Hashers {
    fn start() -> Result<Hashers, String> {
        let (jobs, queue) = mpsc::channel::<Job>();
        let queue = Arc::new(Mutex::new(queue));
        for n in 0..CONCURRENT_HASHES {
            let queue = Arc::clone(&queue);
            std::thread::Builder::new()
                .name(format!("bothy-argon2-{n}"))
                .spawn(move || {
                    let mut memory = Memory(Vec::new());
                    loop {
                        // One thread waits on the queue at a time; the other
                        // waits for the lock, or works.
                        let job = queue.lock().unwrap_or_else(PoisonError::into_inner).recv();
                        match job {
                            Ok(job) => job.run(&mut memory),
                            Err(mpsc::RecvError) => return,
                        }
                    }
                })
                .map_err(|error| error.to_string())?;
        }
        Ok(Hashers { jobs })
    }

    async fn run<T>(
        job: impl FnOnce(oneshot::Sender<Result<T, IdentityError>>) -> Job,
    ) -> Result<T, IdentityError> {
        let hashers = HASHERS.as_ref().map_err(|error| {
            tracing::error!(%error, "the password hashing threads cannot start");
            IdentityError::Crypto("the hashing threads cannot start")
        })?;
        let (reply, answer) = oneshot::channel();
        hashers
            .jobs
            .send(job(reply))
            .map_err(|_| IdentityError::Crypto("the hashing threads are gone"))?;
        answer
            .await
            .map_err(|_| IdentityError::Crypto("the hashing job failed"))?
    }
}

/// The argon2id hash of `password` (PHC string).
pub async fn hash(password: &Password) -> Result<String, IdentityError> {
    let password = password.0.clone();
    Hashers::run(|reply| Job::Hash { password, reply }).await
}

/// Whether `password` matches `stored`. Without a stored hash (unknown username,
/// not enrolled) it verifies against a dummy hash and answers `false`, taking
/// as long as a real check.
pub async fn verify(password: &Password, stored: Option<String>) -> Result<bool, IdentityError> {
    let password = password.0.clone();
    Hashers::run(|reply| Job::Verify {
        password,
        stored,
        reply,
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

    /// Hashes stored before the hashing threads (argon2's own
    /// `PasswordHasher`) verify, and the threads' hashes verify with argon2's
    /// own `PasswordVerifier`: one format.
    #[tokio::test]
    async fn the_stored_format_is_argon2s_own() {
        use argon2::password_hash::{PasswordHasher, PasswordVerifier};
        let password = Password::new("correct horse battery", "/password").unwrap();
        let salt = SaltString::encode_b64(&[7u8; 16]).unwrap();
        let old = argon2()
            .unwrap()
            .hash_password(b"correct horse battery", &salt)
            .unwrap()
            .to_string();
        assert!(verify(&password, Some(old.clone())).await.unwrap());
        let wrong = Password::presented("correct horse battery?").unwrap();
        assert!(!verify(&wrong, Some(old)).await.unwrap());
        let new = hash(&password).await.unwrap();
        let parsed = PasswordHash::new(&new).unwrap();
        assert!(
            argon2()
                .unwrap()
                .verify_password(b"correct horse battery", &parsed)
                .is_ok()
        );
        assert!(
            argon2()
                .unwrap()
                .verify_password(b"correct horse battery?", &parsed)
                .is_err()
        );
        // Other parameters (a smaller block than the threads' own) verify too.
        let small = Argon2::new(
            Algorithm::Argon2id,
            Version::V0x13,
            Params::new(1024, 1, 1, None).unwrap(),
        )
        .hash_password(b"correct horse battery", &salt)
        .unwrap()
        .to_string();
        assert!(verify(&password, Some(small)).await.unwrap());
        assert!(matches!(
            verify(&password, Some("$argon2id$v=19$nonsense".into())).await,
            Err(IdentityError::Stored(_))
        ));
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
