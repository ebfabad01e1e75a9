//! Where the client keeps its files (XDG Base Directory): the login and the
//! device key in `$XDG_CONFIG_HOME/bothy` (default `~/.config/bothy`), the
//! host key pins in `$XDG_DATA_HOME/bothy` (default `~/.local/share/bothy`).
//! Folders are 0700, files 0600, written whole through a temporary file and a
//! rename; a file that others can read is refused, like OpenSSH refuses a
//! private key of mode 0644 (docs/decisions.md D-222).

use std::fs;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::error::ClientError;

/// The two folders of the client.
#[derive(Debug, Clone)]
pub struct Dirs {
    /// The login and the device key.
    pub config: PathBuf,
    /// The pins.
    pub data: PathBuf,
}

/// An XDG variable: only an absolute path counts (the specification says a
/// relative one is invalid and ignored).
fn xdg(var: &str) -> Option<PathBuf> {
    std::env::var_os(var)
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
}

impl Dirs {
    /// The folders from the environment.
    pub fn from_env() -> Result<Dirs, ClientError> {
        let home = || {
            std::env::var_os("HOME")
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
                .ok_or_else(|| ClientError::Usage("neither XDG_CONFIG_HOME nor HOME is set".into()))
        };
        let config = match xdg("XDG_CONFIG_HOME") {
            Some(path) => path,
            None => home()?.join(".config"),
        };
        let data = match xdg("XDG_DATA_HOME") {
            Some(path) => path,
            None => home()?.join(".local").join("share"),
        };
        Ok(Dirs {
            config: config.join("bothy"),
            data: data.join("bothy"),
        })
    }
}

fn storage(what: &Path, source: std::io::Error) -> ClientError {
    ClientError::Storage {
        what: what.display().to_string(),
        source,
    }
}

/// Reads a private file: `None` when it does not exist; refused when group
/// or others may read or write it, or when another user owns it.
pub fn read_private(path: &Path) -> Result<Option<Vec<u8>>, ClientError> {
    let meta = match fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(storage(path, e)),
    };
    if meta.permissions().mode() & 0o077 != 0 || meta.uid() != nix::unistd::geteuid().as_raw() {
        return Err(ClientError::InsecureFile(path.display().to_string()));
    }
    fs::read(path).map(Some).map_err(|e| storage(path, e))
}

/// Writes a private file whole (mode 0600, folder 0700): a temporary file in
/// the same folder, synced, then renamed over the old one.
pub fn write_private(path: &Path, bytes: &[u8]) -> Result<(), ClientError> {
    let folder = path
        .parent()
        .ok_or_else(|| ClientError::Usage("a file without a folder".into()))?;
    fs::create_dir_all(folder).map_err(|e| storage(folder, e))?;
    fs::set_permissions(folder, fs::Permissions::from_mode(0o700))
        .map_err(|e| storage(folder, e))?;
    let mut random = [0u8; 6];
    getrandom::fill(&mut random)
        .map_err(|_| storage(folder, std::io::Error::other("no randomness")))?;
    let suffix: String = random.iter().map(|b| format!("{b:02x}")).collect();
    let temporary = folder.join(format!(".tmp-{suffix}"));
    let result = (|| {
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temporary)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        fs::rename(&temporary, path)
    })();
    if let Err(e) = result {
        let _ = fs::remove_file(&temporary);
        return Err(storage(path, e));
    }
    Ok(())
}

/// Removes a file; a missing one is fine.
pub fn remove(path: &Path) -> Result<(), ClientError> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(storage(path, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_files_are_0600_and_others_readable_ones_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("sub").join("file.json");
        assert!(read_private(&path).expect("missing is fine").is_none());
        write_private(&path, b"secret").expect("written");
        let meta = fs::metadata(&path).expect("meta");
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        let folder = fs::metadata(path.parent().expect("folder")).expect("meta");
        assert_eq!(folder.permissions().mode() & 0o777, 0o700);
        assert_eq!(
            read_private(&path).expect("read").as_deref(),
            Some(&b"secret"[..])
        );
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).expect("chmod");
        assert!(matches!(
            read_private(&path),
            Err(ClientError::InsecureFile(_))
        ));
        remove(&path).expect("removed");
        remove(&path).expect("removing twice is fine");
    }
}
