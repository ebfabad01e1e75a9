//! The one error type of the crate.

/// Why a Noise call was refused.
///
/// Every handshake failure and every failed read of a transport message also
/// poisons the object it happened on: from then on each call on it returns
/// [`NoiseError::Poisoned`] (spec 5.2, "After a failure"). For the host, every
/// variant met during the handshake is the close detail `handshake_failed`.
/// No variant carries message content or key material.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NoiseError {
    /// The payload to write does not fit into one Noise message.
    #[error("payload of {len} bytes exceeds the limit of {max} bytes for this message")]
    PayloadTooLong {
        /// Length of the refused payload.
        len: usize,
        /// Largest payload this message can carry.
        max: usize,
    },
    /// A received message is longer than a Noise message may be (65535 bytes).
    #[error("message of {len} bytes exceeds the Noise limit of {max} bytes")]
    MessageTooLong {
        /// Length of the refused message.
        len: usize,
        /// [`crate::MAX_MESSAGE_LEN`].
        max: usize,
    },
    /// A received message is shorter than its fixed parts (keys and tag).
    #[error("message of {len} bytes is shorter than the minimum of {min} bytes")]
    MessageTooShort {
        /// Length of the refused message.
        len: usize,
        /// Smallest valid length of this message.
        min: usize,
    },
    /// A Diffie-Hellman result was 32 zero bytes: the peer's public key has
    /// small order, so the shared secret would not depend on our private key
    /// (D-M2-38-9).
    #[error("Diffie-Hellman result is all zero: the peer's public key has small order")]
    SmallOrderPublicKey,
    /// Authentication of a message failed: wrong host key, wrong prologue
    /// (session ID or host ID), or a message altered on the way.
    #[error("message authentication failed")]
    Decrypt,
    /// This direction has used every nonce; 2^64 - 1 is never used (spec 5.1
    /// of the Noise specification, D-M2-38-8).
    #[error("the nonces of this direction are used up")]
    NonceExhausted,
    /// An earlier handshake step or read failed; the object refuses every
    /// further call in both directions (D-M2-38-8).
    #[error("an earlier failure poisoned this Noise object")]
    Poisoned,
    /// A handshake method was called out of turn (for example message 2
    /// before message 1), or after the handshake finished.
    #[error("handshake step called out of order")]
    OutOfOrder,
    /// The operating system's random number generator failed.
    #[error("the operating system's random number generator failed")]
    Rng,
    /// snow refused the call for a reason the checks above do not cover
    /// (a bug in this crate, not something a peer can cause).
    #[error("the Noise library refused the call")]
    Library(#[source] snow::Error),
}

impl From<snow::Error> for NoiseError {
    fn from(error: snow::Error) -> Self {
        match error {
            // Only our checked X25519 returns `Error::Dh`, and only for an all-zero result.
            snow::Error::Dh => Self::SmallOrderPublicKey,
            snow::Error::Decrypt => Self::Decrypt,
            snow::Error::Rng => Self::Rng,
            snow::Error::State(snow::error::StateProblem::Exhausted) => Self::NonceExhausted,
            other => Self::Library(other),
        }
    }
}
