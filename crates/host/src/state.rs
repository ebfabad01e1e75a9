//! The state directory `host_service.state_dir` (4.2, D-M2-42-4): the host's
//! private keys (`keys`), the pairing record (`pairing.json`), the bindings of
//! session users to people (`bindings.json`), the last declaration from `ready`
//! (`declaration.json`), the organization API key (`claude_api_key`, written by
//! the operator) and the admin endpoint (`admin.sock`).
//!
//! The directory has mode 0700 and every file mode 0600, both owned by the
//! service user; a file is replaced atomically (a new file in the same folder,
//! fsync, rename, fsync of the folder), so a crash leaves the old or the new
//! content, never half of it. When a command runs as root (`pair`), what it
//! writes is handed to the service user. No session user can read any of it
//! (HD4, HD8 check that).

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use bothy_noise::StaticKeypair;
use bothy_proto::b64;
use bothy_proto::control::LlmCredentials;
use bothy_proto::fingerprint::{KeyFingerprint, key_fingerprint};
use bothy_proto::json::{self, Object};
use bothy_proto::jws::Ed25519SigningKey;
use serde_json::{Map, Value, json};
use uuid::Uuid;
use zeroize::Zeroizing;

/// The file of the private keys.
pub const KEYS_FILE: &str = "keys";
/// The pairing record.
pub const PAIRING_FILE: &str = "pairing.json";
/// The bindings of session users to people.
pub const BINDINGS_FILE: &str = "bindings.json";
/// The last declaration from `ready`.
pub const DECLARATION_FILE: &str = "declaration.json";
/// The API key of the profile claude with `organization`.
pub const CLAUDE_API_KEY_FILE: &str = "claude_api_key";
/// The admin endpoint of the running service.
pub const ADMIN_SOCKET: &str = "admin.sock";

/// Largest state file read (they are all small).
const MAX_FILE_BYTES: usize = 64 * 1024;

/// Why the state directory could not be used. Never carries a key or a value
/// from a file.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// The operating system refused (names the file, not its content).
    #[error("state directory: {file}: {error}")]
    Io {
        /// The file or folder.
        file: String,
        /// The reason.
        error: io::Error,
    },
    /// A file is not what this version writes.
    #[error("state directory: {0} is damaged")]
    Damaged(&'static str),
    /// The host is not paired.
    #[error("this host is not paired: run bothy-host pair --server URL --code CODE")]
    NotPaired,
}

/// The user and group that own the state (the service user).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    /// User ID.
    pub uid: u32,
    /// Group ID.
    pub gid: u32,
}

/// The host's two private keys (4.1).
pub struct HostKeys {
    /// The static X25519 key of the Noise pattern NK.
    pub noise: StaticKeypair,
    /// The Ed25519 key that signs the proofs of the control and data connections.
    pub auth: Ed25519SigningKey,
}

impl std::fmt::Debug for HostKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostKeys").finish_non_exhaustive()
    }
}

impl HostKeys {
    /// Two fresh key pairs (3.2 step 2: `pair` creates both anew every time).
    pub fn generate() -> Result<HostKeys, StateError> {
        let noise = StaticKeypair::generate().map_err(|_| StateError::Io {
            file: "keys".into(),
            error: io::Error::other("no random source"),
        })?;
        let auth = Ed25519SigningKey::generate().map_err(|_| StateError::Io {
            file: "keys".into(),
            error: io::Error::other("no random source"),
        })?;
        Ok(HostKeys { noise, auth })
    }

    /// The fingerprint of the public halves (4.3).
    pub fn fingerprint(&self) -> KeyFingerprint {
        key_fingerprint(&self.noise.public(), &self.auth.public_jwk().raw())
    }
}

/// The pairing record (`pairing.json`): no secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pairing {
    /// The server, `https://host:port`.
    pub server_url: String,
    /// This host's ID at the server.
    pub host_id: Uuid,
    /// The server's instance ID.
    pub instance_id: Uuid,
    /// The fingerprint of the stored keys.
    pub fingerprint: String,
}

/// The state directory.
#[derive(Debug)]
pub struct StateDir {
    path: PathBuf,
    owner: Option<Owner>,
    /// Serialises the read-modify-write of `bindings.json` in this process
    /// (step 11 of the check order: two first openings never both bind).
    bindings_lock: Mutex<()>,
}

impl StateDir {
    /// The directory at `path`; files written are handed to `owner` when the
    /// process runs as root and `owner` is given.
    pub fn new(path: &Path, owner: Option<Owner>) -> StateDir {
        StateDir {
            path: path.to_owned(),
            owner,
            bindings_lock: Mutex::new(()),
        }
    }

    /// The folder.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The path of a file of the folder.
    pub fn file(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// Creates the folder with mode 0700 (owned by the service user) when it is
    /// missing; an existing one is left as it is (HD4 judges it).
    pub fn ensure(&self) -> Result<(), StateError> {
        if !self.path.exists() {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&self.path)
                .map_err(|error| io_error(&self.path, error))?;
            fs::set_permissions(&self.path, fs::Permissions::from_mode(0o700))
                .map_err(|error| io_error(&self.path, error))?;
            self.hand_over(&self.path)?;
        }
        Ok(())
    }

    /// Replaces `name` atomically with `bytes`, mode 0600.
    pub fn write_atomic(&self, name: &str, bytes: &[u8]) -> Result<(), StateError> {
        let target = self.file(name);
        let mut random = [0u8; 8];
        getrandom::fill(&mut random).map_err(|_| io_error(&target, io::Error::other("random")))?;
        let temp = self
            .path
            .join(format!(".{name}.{}.tmp", b64::encode(&random)));
        let result = (|| {
            let mut file = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&temp)?;
            file.write_all(bytes)?;
            file.sync_all()?;
            Ok::<(), io::Error>(())
        })();
        if let Err(error) = result {
            let _ = fs::remove_file(&temp);
            return Err(io_error(&target, error));
        }
        if let Err(e) = self.hand_over(&temp) {
            let _ = fs::remove_file(&temp);
            return Err(e);
        }
        fs::rename(&temp, &target).map_err(|error| {
            let _ = fs::remove_file(&temp);
            io_error(&target, error)
        })?;
        if let Ok(dir) = File::open(&self.path) {
            let _ = dir.sync_all();
        }
        Ok(())
    }

    /// Reads `name`; `None` when it does not exist.
    pub fn read(&self, name: &str) -> Result<Option<Zeroizing<Vec<u8>>>, StateError> {
        let path = self.file(name);
        match fs::read(&path) {
            Ok(bytes) if bytes.len() > MAX_FILE_BYTES => {
                Err(StateError::Damaged(static_name(name)))
            }
            Ok(bytes) => Ok(Some(Zeroizing::new(bytes))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(io_error(&path, error)),
        }
    }

    fn hand_over(&self, path: &Path) -> Result<(), StateError> {
        if let Some(owner) = self.owner {
            if nix::unistd::geteuid().is_root() {
                nix::unistd::chown(
                    path,
                    Some(nix::unistd::Uid::from_raw(owner.uid)),
                    Some(nix::unistd::Gid::from_raw(owner.gid)),
                )
                .map_err(|e| io_error(path, io::Error::from(e)))?;
            }
        }
        Ok(())
    }

    /// The stored keys; `None` before the first pairing.
    pub fn load_keys(&self) -> Result<Option<HostKeys>, StateError> {
        let Some(bytes) = self.read(KEYS_FILE)? else {
            return Ok(None);
        };
        let damaged = || StateError::Damaged("keys");
        let value = json::parse(&bytes, MAX_FILE_BYTES).map_err(|_| damaged())?;
        let object = Object::root(&value, &["v", "noise", "auth"]).map_err(|_| damaged())?;
        if object.uint::<u64>("v").map_err(|_| damaged())? != 1 {
            return Err(damaged());
        }
        let noise = Zeroizing::new(
            b64::decode_array::<32>(object.str("noise").map_err(|_| damaged())?)
                .map_err(|_| damaged())?,
        );
        let auth = Zeroizing::new(
            b64::decode_array::<32>(object.str("auth").map_err(|_| damaged())?)
                .map_err(|_| damaged())?,
        );
        Ok(Some(HostKeys {
            noise: StaticKeypair::from_private_bytes(*noise),
            auth: Ed25519SigningKey::from_seed(&auth),
        }))
    }

    /// Stores both private keys (only after the server accepted them, 4.2).
    pub fn store_keys(&self, keys: &HostKeys) -> Result<(), StateError> {
        let text = Zeroizing::new(
            json!({
                "v": 1,
                "noise": b64::encode(keys.noise.private_bytes()),
                "auth": b64::encode(keys.auth.seed()),
            })
            .to_string(),
        );
        self.write_atomic(KEYS_FILE, text.as_bytes())
    }

    /// The pairing record; `None` before the first pairing.
    pub fn load_pairing(&self) -> Result<Option<Pairing>, StateError> {
        let Some(bytes) = self.read(PAIRING_FILE)? else {
            return Ok(None);
        };
        let damaged = || StateError::Damaged("pairing.json");
        let value = json::parse(&bytes, MAX_FILE_BYTES).map_err(|_| damaged())?;
        let object = Object::root(
            &value,
            &["v", "server_url", "host_id", "instance_id", "fingerprint"],
        )
        .map_err(|_| damaged())?;
        if object.uint::<u64>("v").map_err(|_| damaged())? != 1 {
            return Err(damaged());
        }
        Ok(Some(Pairing {
            server_url: object.str("server_url").map_err(|_| damaged())?.to_owned(),
            host_id: object.uuid("host_id").map_err(|_| damaged())?,
            instance_id: object.uuid("instance_id").map_err(|_| damaged())?,
            fingerprint: object.str("fingerprint").map_err(|_| damaged())?.to_owned(),
        }))
    }

    /// Stores the pairing record.
    pub fn store_pairing(&self, pairing: &Pairing) -> Result<(), StateError> {
        let text = json!({
            "v": 1,
            "server_url": pairing.server_url,
            "host_id": pairing.host_id.to_string(),
            "instance_id": pairing.instance_id.to_string(),
            "fingerprint": pairing.fingerprint,
        })
        .to_string();
        self.write_atomic(PAIRING_FILE, text.as_bytes())
    }

    /// The declaration from the last `ready`; `None` = unknown (D-M2-42-15).
    pub fn load_declaration(&self) -> Result<Option<LlmCredentials>, StateError> {
        let Some(bytes) = self.read(DECLARATION_FILE)? else {
            return Ok(None);
        };
        let damaged = || StateError::Damaged("declaration.json");
        let value = json::parse(&bytes, MAX_FILE_BYTES).map_err(|_| damaged())?;
        let object = Object::root(&value, &["v", "llm_credentials"]).map_err(|_| damaged())?;
        if object.uint::<u64>("v").map_err(|_| damaged())? != 1 {
            return Err(damaged());
        }
        LlmCredentials::parse(object.str("llm_credentials").map_err(|_| damaged())?)
            .map(Some)
            .ok_or_else(damaged)
    }

    /// Stores the declaration of a `ready`.
    pub fn store_declaration(&self, declaration: LlmCredentials) -> Result<(), StateError> {
        let text = json!({"v": 1, "llm_credentials": declaration.as_str()}).to_string();
        self.write_atomic(DECLARATION_FILE, text.as_bytes())
    }

    /// Every binding: session user → person (`sub`) it was first given to.
    pub fn load_bindings(&self) -> Result<BTreeMap<String, Uuid>, StateError> {
        let _guard = self.bindings_lock.lock().unwrap_or_else(|p| p.into_inner());
        self.read_bindings()
    }

    fn read_bindings(&self) -> Result<BTreeMap<String, Uuid>, StateError> {
        let Some(bytes) = self.read(BINDINGS_FILE)? else {
            return Ok(BTreeMap::new());
        };
        let damaged = || StateError::Damaged("bindings.json");
        let value = json::parse(&bytes, MAX_FILE_BYTES).map_err(|_| damaged())?;
        let object = Object::root(&value, &["v", "bindings"]).map_err(|_| damaged())?;
        if object.uint::<u64>("v").map_err(|_| damaged())? != 1 {
            return Err(damaged());
        }
        let Ok(Value::Object(map)) = object.member("bindings").map(|m| m.value().clone()) else {
            return Err(damaged());
        };
        let mut out = BTreeMap::new();
        for (user, sub) in map {
            let Value::String(sub) = sub else {
                return Err(damaged());
            };
            out.insert(user, Uuid::parse_str(&sub).map_err(|_| damaged())?);
        }
        Ok(out)
    }

    /// Step 11 of the check order (5.3): `osu` unbound → bound to `sub` now
    /// (written before returning); bound to `sub` → fine; bound to another →
    /// `Ok(false)`. The binding is kept even when a later step fails.
    pub fn bind(&self, osu: &str, sub: Uuid) -> Result<bool, StateError> {
        let _guard = self.bindings_lock.lock().unwrap_or_else(|p| p.into_inner());
        let mut bindings = self.read_bindings()?;
        match bindings.get(osu) {
            Some(bound) => Ok(*bound == sub),
            None => {
                bindings.insert(osu.to_owned(), sub);
                let map: Map<String, Value> = bindings
                    .iter()
                    .map(|(u, s)| (u.clone(), Value::String(s.to_string())))
                    .collect();
                let text = json!({"v": 1, "bindings": map}).to_string();
                self.write_atomic(BINDINGS_FILE, text.as_bytes())?;
                Ok(true)
            }
        }
    }

    /// The organization API key (7.4): read for each start; a missing or empty
    /// file is `None` (the start fails with pty_failed).
    pub fn claude_api_key(&self) -> Result<Option<Zeroizing<String>>, StateError> {
        let Some(bytes) = self.read(CLAUDE_API_KEY_FILE)? else {
            return Ok(None);
        };
        let text =
            std::str::from_utf8(&bytes).map_err(|_| StateError::Damaged("claude_api_key"))?;
        let key = text.trim();
        Ok((!key.is_empty()).then(|| Zeroizing::new(key.to_owned())))
    }
}

fn io_error(path: &Path, error: io::Error) -> StateError {
    StateError::Io {
        file: path.file_name().map_or_else(
            || path.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        ),
        error,
    }
}

fn static_name(name: &str) -> &'static str {
    match name {
        KEYS_FILE => "keys",
        PAIRING_FILE => "pairing.json",
        BINDINGS_FILE => "bindings.json",
        DECLARATION_FILE => "declaration.json",
        CLAUDE_API_KEY_FILE => "claude_api_key",
        _ => "a state file",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn dir() -> (tempfile::TempDir, StateDir) {
        let temp = tempfile::tempdir().expect("temp");
        let state = StateDir::new(&temp.path().join("state"), None);
        state.ensure().expect("created");
        (temp, state)
    }

    #[test]
    fn files_are_0600_in_a_0700_folder_and_round_trip() {
        let (_t, state) = dir();
        assert_eq!(
            fs::metadata(state.path()).expect("dir").mode() & 0o777,
            0o700
        );
        let keys = HostKeys::generate().expect("keys");
        state.store_keys(&keys).expect("stored");
        let back = state.load_keys().expect("read").expect("present");
        assert_eq!(back.noise.public(), keys.noise.public());
        assert_eq!(back.fingerprint(), keys.fingerprint());
        assert_eq!(
            fs::metadata(state.file(KEYS_FILE)).expect("file").mode() & 0o777,
            0o600
        );
        let pairing = Pairing {
            server_url: "https://localhost:8443".into(),
            host_id: Uuid::from_u128(1),
            instance_id: Uuid::from_u128(2),
            fingerprint: keys.fingerprint().as_str().to_owned(),
        };
        state.store_pairing(&pairing).expect("stored");
        assert_eq!(state.load_pairing().expect("read"), Some(pairing));
        assert_eq!(state.load_declaration().expect("read"), None);
        state
            .store_declaration(LlmCredentials::Organization)
            .expect("stored");
        assert_eq!(
            state.load_declaration().expect("read"),
            Some(LlmCredentials::Organization)
        );
        // No temporary file is left behind.
        let names: Vec<_> = fs::read_dir(state.path())
            .expect("list")
            .map(|e| e.expect("entry").file_name().into_string().expect("utf8"))
            .collect();
        assert!(names.iter().all(|n| !n.ends_with(".tmp")), "{names:?}");
    }

    #[test]
    fn bindings_bind_once_and_keep() {
        let (_t, state) = dir();
        let a = Uuid::from_u128(10);
        let b = Uuid::from_u128(11);
        assert!(state.bind("alice", a).expect("bound"));
        assert!(state.bind("alice", a).expect("same person"));
        assert!(!state.bind("alice", b).expect("another person"));
        assert!(state.bind("bob", b).expect("bound"));
        let all = state.load_bindings().expect("read");
        assert_eq!(all.get("alice"), Some(&a));
        assert_eq!(all.get("bob"), Some(&b));
    }

    #[test]
    fn damaged_files_are_refused_without_their_content() {
        let (_t, state) = dir();
        state
            .write_atomic(KEYS_FILE, b"{\"v\":1,\"noise\":\"s3cret\"}")
            .expect("written");
        let e = state.load_keys().expect_err("damaged");
        assert!(!e.to_string().contains("s3cret"), "{e}");
        state
            .write_atomic(DECLARATION_FILE, b"{\"v\":1,\"llm_credentials\":\"maybe\"}")
            .expect("written");
        assert!(state.load_declaration().is_err());
        state
            .write_atomic(CLAUDE_API_KEY_FILE, b"  \n")
            .expect("written");
        assert!(state.claude_api_key().expect("read").is_none());
        state
            .write_atomic(CLAUDE_API_KEY_FILE, b"sk-test\n")
            .expect("written");
        assert_eq!(
            state
                .claude_api_key()
                .expect("read")
                .as_deref()
                .map(String::as_str),
            Some("sk-test")
        );
    }
}
