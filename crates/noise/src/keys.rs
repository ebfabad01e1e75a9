//! The host's static X25519 key pair (spec 4.2, 5.2) and the key material
//! helpers the handshake shares with it.

use core::fmt;

use curve25519_dalek::montgomery::MontgomeryPoint;
use zeroize::Zeroizing;

use crate::{KEY_LEN, NoiseError};

/// An X25519 private key; zeroized when dropped.
pub(crate) type PrivateKey = Zeroizing<[u8; KEY_LEN]>;

/// The host's static Noise key pair.
///
/// The private part is zeroized on drop and never shown by `Debug`. The host
/// service stores [`StaticKeypair::private_bytes`] in its state directory and
/// rebuilds the pair with [`StaticKeypair::from_private_bytes`].
pub struct StaticKeypair {
    private: PrivateKey,
    public: [u8; KEY_LEN],
}

impl StaticKeypair {
    /// Draws a new key pair from the operating system's random number generator.
    ///
    /// # Errors
    /// [`NoiseError::Rng`] if the random number generator fails.
    pub fn generate() -> Result<Self, NoiseError> {
        Ok(Self::from_private(random_private_key()?))
    }

    /// Rebuilds the key pair from the stored 32-byte private key.
    #[must_use]
    pub fn from_private_bytes(private: [u8; KEY_LEN]) -> Self {
        Self::from_private(Zeroizing::new(private))
    }

    fn from_private(private: PrivateKey) -> Self {
        let public = public_key(&private);
        Self { private, public }
    }

    /// The public key: the devices receive it at pairing (`noise_public_key`).
    #[must_use]
    pub fn public(&self) -> [u8; KEY_LEN] {
        self.public
    }

    /// The private key, for writing it to the state directory (spec 4.2).
    #[must_use]
    pub fn private_bytes(&self) -> &[u8; KEY_LEN] {
        &self.private
    }
}

impl fmt::Debug for StaticKeypair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StaticKeypair")
            .field("public", &self.public)
            .field("private", &"<redacted>")
            .finish()
    }
}

/// 32 bytes from the operating system's random number generator.
pub(crate) fn random_private_key() -> Result<PrivateKey, NoiseError> {
    let mut key = Zeroizing::new([0_u8; KEY_LEN]);
    getrandom::fill(&mut key[..]).map_err(|_| NoiseError::Rng)?;
    Ok(key)
}

/// The X25519 public key of `private` (RFC 7748: the clamped scalar times the base point).
pub(crate) fn public_key(private: &PrivateKey) -> [u8; KEY_LEN] {
    MontgomeryPoint::mul_base_clamped(**private).to_bytes()
}
