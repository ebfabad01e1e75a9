//! The server pepper (DESIGN 3.1): 32 random bytes in `auth.token_pepper_file`
//! (default `<data_dir>/token_pepper`, [`crate::config::Config::token_pepper_path`]),
//! the key of every HMAC-SHA-256 the server stores instead of a secret — access
//! tokens, API tokens, enrollment codes, and later pairing codes (3.2) — and of
//! the key that seals TOTP secrets at rest.
//!
//! - Created on first start with mode 0600 (`create_new`, so two processes
//!   starting at once cannot both write one); a file that exists with any
//!   permission for group or others, or that does not hold exactly 32 bytes, stops
//!   the start: a pepper others could read turns every stored hash into a
//!   guessable value, and a short one is no key.
//! - Every use names a [`PepperPurpose`], which is mixed into the HMAC input, so a
//!   value computed for one purpose never equals one for another.
//! - The bytes never leave this type: no accessor, `Debug` prints `Pepper(***)`,
//!   and they are wiped on drop.
//!
//! Losing the file invalidates every access token, API token, enrollment code and
//! TOTP credential: people reset their second factor (`admin reset-second-factor`).

use std::fmt;
use std::fs;
use std::io::{self, Read, Write as _};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use hmac::digest::KeyInit;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use zeroize::Zeroizing;

/// Length of the pepper in bytes.
pub const PEPPER_LEN: usize = 32;

/// Why the pepper file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum PepperError {
    /// Reading, creating or inspecting the file failed.
    #[error("cannot use the token pepper file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The file grants a permission to group or others.
    #[error(
        "the token pepper file {path} has mode {mode:04o}; it must not be accessible to group or others (chmod 600)"
    )]
    TooOpen {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The file is not a regular file of exactly [`PEPPER_LEN`] bytes.
    #[error("the token pepper file {path} must be a regular file of exactly 32 bytes")]
    Malformed {
        /// The file.
        path: PathBuf,
    },
    /// The OS random source failed while creating the pepper.
    #[error("the operating system's random source failed")]
    Random,
}

/// What an HMAC of the pepper is for; the label is part of the HMAC input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PepperPurpose {
    /// `login_sessions.token_hash` (`bothy_at_...`).
    AccessToken,
    /// `api_tokens.token_hash` (`bothy_tk_...`).
    ApiToken,
    /// `enrollment_codes.code_hash` (`bothy_ec_...`).
    EnrollmentCode,
    /// The key that seals TOTP secrets (`totp_credentials.secret_sealed`).
    TotpSealKey,
    /// `login_sessions.csrf_hash` (`bothy_csrf_...`, console sessions).
    CsrfToken,
    /// The credential ID of the decoy a console login of an unknown username gets.
    PasskeyDecoy,
    /// `hosts.pairing_code_hash` (`bothy_hpc_...`, 3.2).
    PairingCode,
    /// The key that seals the private server signing keys of purpose terminal
    /// (`server_signing_keys.private_sealed`).
    TerminalKeySealKey,
    /// The MAC of a quick-reattach nonce (6.2; `terminal::sessions`).
    ReattachNonce,
}

impl PepperPurpose {
    const fn label(self) -> &'static [u8] {
        match self {
            PepperPurpose::AccessToken => b"bothy.v1.access_token",
            PepperPurpose::ApiToken => b"bothy.v1.api_token",
            PepperPurpose::EnrollmentCode => b"bothy.v1.enrollment_code",
            PepperPurpose::TotpSealKey => b"bothy.v1.totp_seal_key",
            PepperPurpose::CsrfToken => b"bothy.v1.csrf_token",
            PepperPurpose::PasskeyDecoy => b"bothy.v1.passkey_decoy",
            PepperPurpose::PairingCode => b"bothy.v1.pairing_code",
            PepperPurpose::TerminalKeySealKey => b"bothy.v1.terminal_key_seal_key",
            PepperPurpose::ReattachNonce => b"bothy.v1.reattach_nonce",
        }
    }
}

/// The pepper. Cheap to clone (one `Arc`).
#[derive(Clone)]
pub struct Pepper {
    key: Arc<Zeroizing<[u8; PEPPER_LEN]>>,
}

impl fmt::Debug for Pepper {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Pepper(***)")
    }
}

impl Pepper {
    /// Reads the pepper from `path`, or creates it there (mode 0600) when the
    /// file does not exist. See the module docs for what is refused.
    pub fn load_or_create(path: &Path) -> Result<Pepper, PepperError> {
        match Pepper::load(path) {
            Err(PepperError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
                match Pepper::create(path) {
                    // Another process created it between our read and our create.
                    Err(PepperError::Io { source, .. })
                        if source.kind() == io::ErrorKind::AlreadyExists =>
                    {
                        Pepper::load(path)
                    }
                    other => other,
                }
            }
            other => other,
        }
    }

    /// A pepper from given bytes (tests of the hashing).
    pub fn from_bytes(bytes: [u8; PEPPER_LEN]) -> Pepper {
        Pepper {
            key: Arc::new(Zeroizing::new(bytes)),
        }
    }

    fn load(path: &Path) -> Result<Pepper, PepperError> {
        let io_error = |source| PepperError::Io {
            path: path.to_path_buf(),
            source,
        };
        let mut file = fs::File::open(path).map_err(io_error)?;
        let metadata = file.metadata().map_err(io_error)?;
        if !metadata.is_file() {
            return Err(PepperError::Malformed {
                path: path.to_path_buf(),
            });
        }
        let mode = metadata.permissions().mode() & 0o7777;
        if mode & 0o077 != 0 {
            return Err(PepperError::TooOpen {
                path: path.to_path_buf(),
                mode,
            });
        }
        // One byte more than a pepper tells a longer file from a good one.
        let mut bytes = Zeroizing::new(Vec::with_capacity(PEPPER_LEN + 1));
        Read::by_ref(&mut file)
            .take(PEPPER_LEN as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(io_error)?;
        let key: [u8; PEPPER_LEN] =
            bytes
                .as_slice()
                .try_into()
                .map_err(|_| PepperError::Malformed {
                    path: path.to_path_buf(),
                })?;
        Ok(Pepper::from_bytes(key))
    }

    fn create(path: &Path) -> Result<Pepper, PepperError> {
        let io_error = |source| PepperError::Io {
            path: path.to_path_buf(),
            source,
        };
        let mut key = Zeroizing::new([0u8; PEPPER_LEN]);
        getrandom::fill(key.as_mut_slice()).map_err(|_| PepperError::Random)?;
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(io_error)?;
        // The umask can only remove bits; set the mode explicitly anyway.
        file.set_permissions(fs::Permissions::from_mode(0o600))
            .map_err(io_error)?;
        file.write_all(key.as_slice()).map_err(io_error)?;
        file.sync_all().map_err(io_error)?;
        Ok(Pepper::from_bytes(*key))
    }

    /// HMAC-SHA-256 with the pepper over `purpose`'s label, a zero byte and `input`.
    pub fn mac(&self, purpose: PepperPurpose, input: &[u8]) -> [u8; 32] {
        let mut mac = keyed(&self.key);
        mac.update(purpose.label());
        mac.update(&[0]);
        mac.update(input);
        mac.finalize().into_bytes().into()
    }
}

/// HMAC-SHA-256 keyed with the 32-byte pepper. RFC 2104 pads a key shorter than
/// the block (64 bytes for SHA-256) with zeros, so the padded block is the same
/// key — and the fixed-size constructor has no error case to handle.
fn keyed(key: &[u8; PEPPER_LEN]) -> Hmac<Sha256> {
    let mut block = Zeroizing::new([0u8; 64]);
    block[..PEPPER_LEN].copy_from_slice(key);
    <Hmac<Sha256> as KeyInit>::new(&(*block).into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_with_mode_0600_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token_pepper");
        let created = Pepper::load_or_create(&path).unwrap();
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(fs::read(&path).unwrap().len(), PEPPER_LEN);
        let loaded = Pepper::load_or_create(&path).unwrap();
        assert_eq!(
            created.mac(PepperPurpose::AccessToken, b"x"),
            loaded.mac(PepperPurpose::AccessToken, b"x")
        );
        assert_eq!(format!("{created:?}"), "Pepper(***)");
    }

    #[test]
    fn refuses_open_permissions_and_wrong_lengths() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token_pepper");
        fs::write(&path, [7u8; PEPPER_LEN]).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o640)).unwrap();
        assert!(matches!(
            Pepper::load_or_create(&path),
            Err(PepperError::TooOpen { mode: 0o640, .. })
        ));
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        assert!(Pepper::load_or_create(&path).is_ok());
        for len in [0, 31, 33] {
            fs::write(&path, vec![7u8; len]).unwrap();
            assert!(
                matches!(
                    Pepper::load_or_create(&path),
                    Err(PepperError::Malformed { .. })
                ),
                "{len}"
            );
        }
    }

    #[test]
    fn padded_key_is_the_rfc_2104_key() {
        let key = [9u8; PEPPER_LEN];
        let mut by_slice = <Hmac<Sha256> as Mac>::new_from_slice(&key).unwrap();
        by_slice.update(b"data");
        let mut padded = keyed(&key);
        padded.update(b"data");
        assert_eq!(
            by_slice.finalize().into_bytes(),
            padded.finalize().into_bytes()
        );
    }

    #[test]
    fn purposes_separate_the_values() {
        let pepper = Pepper::from_bytes([1; PEPPER_LEN]);
        let a = pepper.mac(PepperPurpose::AccessToken, b"same");
        let b = pepper.mac(PepperPurpose::ApiToken, b"same");
        assert_ne!(a, b);
        let other = Pepper::from_bytes([2; PEPPER_LEN]);
        assert_ne!(a, other.mac(PepperPurpose::AccessToken, b"same"));
    }
}
