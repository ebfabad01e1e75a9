//! The stored login (`login.json`) and this device's Ed25519 key
//! (`device_key`), both in the config folder with mode 0600.
//!
//! The device key stays when the person logs out: it is the identity of this
//! device (a key seen before is the same device, DESIGN §3.1), like an SSH
//! key. Logout ends the login session on the server and removes `login.json`.

use serde::{Deserialize, Serialize};
use zeroize::Zeroize;

use bothy_proto::b64;
use bothy_proto::jws::Ed25519SigningKey;

use crate::dirs::{self, Dirs};
use crate::error::ClientError;

/// What `bothy login` stores.
#[derive(Clone, Serialize, Deserialize)]
pub struct StoredLogin {
    /// `https://host:port` of the server.
    pub server: String,
    /// The person's username.
    pub username: String,
    /// The bearer token of the login session.
    pub access_token: String,
    /// The login session.
    pub login_session_id: String,
    /// This device on the server.
    pub device_id: String,
    /// When the login session ends (Unix ms).
    pub expires_at: i64,
}

impl std::fmt::Debug for StoredLogin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredLogin")
            .field("server", &self.server)
            .field("login_session_id", &self.login_session_id)
            .field("device_id", &self.device_id)
            .finish_non_exhaustive()
    }
}

impl Drop for StoredLogin {
    fn drop(&mut self) {
        self.access_token.zeroize();
    }
}

const LOGIN_FILE: &str = "login.json";
const DEVICE_KEY_FILE: &str = "device_key";

impl StoredLogin {
    /// The stored login, or [`ClientError::NotLoggedIn`].
    pub fn load(dirs: &Dirs) -> Result<StoredLogin, ClientError> {
        let path = dirs.config.join(LOGIN_FILE);
        let bytes = dirs::read_private(&path)?.ok_or(ClientError::NotLoggedIn)?;
        serde_json::from_slice(&bytes).map_err(|_| ClientError::Damaged(path.display().to_string()))
    }

    /// Stores the login (0600).
    pub fn store(&self, dirs: &Dirs) -> Result<(), ClientError> {
        let mut bytes =
            serde_json::to_vec_pretty(self).map_err(|_| ClientError::Damaged(LOGIN_FILE.into()))?;
        let result = dirs::write_private(&dirs.config.join(LOGIN_FILE), &bytes);
        bytes.zeroize();
        result
    }

    /// Removes the stored login.
    pub fn remove(dirs: &Dirs) -> Result<(), ClientError> {
        dirs::remove(&dirs.config.join(LOGIN_FILE))
    }
}

/// This device's key: loaded, or made and stored on first use.
pub fn device_key(dirs: &Dirs) -> Result<Ed25519SigningKey, ClientError> {
    let path = dirs.config.join(DEVICE_KEY_FILE);
    if let Some(mut bytes) = dirs::read_private(&path)? {
        let text = String::from_utf8_lossy(&bytes).trim().to_owned();
        bytes.zeroize();
        let mut seed: [u8; 32] = b64::decode_array(&text)
            .map_err(|_| ClientError::Damaged(path.display().to_string()))?;
        let key = Ed25519SigningKey::from_seed(&seed);
        seed.zeroize();
        return Ok(key);
    }
    let key = Ed25519SigningKey::generate()
        .map_err(|_| ClientError::Protocol("no randomness for a device key".into()))?;
    let mut text = b64::encode(key.seed());
    text.push('\n');
    let result = dirs::write_private(&path, text.as_bytes());
    text.zeroize();
    result?;
    Ok(key)
}

/// The public key as the login route takes it (base64url, 32 bytes).
pub fn device_public_key(key: &Ed25519SigningKey) -> String {
    b64::encode(&key.public_jwk().raw())
}
