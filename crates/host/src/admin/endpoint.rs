//! The admin endpoint `admin.sock` in the state directory (D-M2-42-4; 2.2
//! "Output on the host"): `bothy-host doctor`, run by root while the service
//! runs, asks the service over it to do the full run; the service prints
//! nothing itself, it answers the lines of the local output, and when the run
//! refuses the start (except HD6, HD10 and HD11, which have their own
//! consequence during operation) it reports the result and exits like a
//! refused start, ending its sessions as every restart does.
//!
//! The socket belongs to the service user with mode 0600; the service admits
//! only root as the peer (SO_PEERCRED), checked before it reads a byte.
//! Messages are one line of strict JSON each way:
//! `{"op":"doctor"}` → `{"lines":[...],"failed":bool,"exits":bool}`.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;

use bothy_proto::json::{self, Object};
use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader as AsyncBufReader};
use tokio::net::{UnixListener, UnixStream};

use super::doctor_answer::MAX_LINE;
pub use super::doctor_answer::{DoctorAnswer, ask_doctor, print_answer};
use crate::host::Host;

/// Whether `bytes` is exactly the request `{"op":"doctor"}`.
fn is_doctor_request(bytes: &[u8]) -> bool {
    let Ok(value) = json::parse(bytes, MAX_LINE) else {
        return false;
    };
    Object::root(&value, &["op"])
        .and_then(|o| o.str("op").map(|op| op == "doctor"))
        .unwrap_or(false)
}

/// Why `admin.sock` was not opened.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    /// Binding the socket failed: `bothy-host doctor` then checks by itself
    /// (the service runs on).
    #[error("admin.sock cannot be bound")]
    Unavailable(#[source] std::io::Error),
    /// The socket could not be given mode 0600: it is removed, and the
    /// service does not start (D-333).
    #[error("admin.sock cannot be given mode 0600")]
    Unprotected(#[source] std::io::Error),
}

/// Binds `admin.sock` at `path` (an old one is removed) and gives it mode
/// 0600; a socket whose mode cannot be set is removed again.
pub fn bind(path: &Path) -> Result<UnixListener, EndpointError> {
    let _ = std::fs::remove_file(path);
    let listener = UnixListener::bind(path).map_err(EndpointError::Unavailable)?;
    if let Err(error) = protect(path) {
        drop(listener);
        let _ = std::fs::remove_file(path);
        return Err(EndpointError::Unprotected(error));
    }
    Ok(listener)
}

/// `chmod 0600` of the socket at `path`, then a look that it took.
fn protect(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::FileTypeExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    let metadata = std::fs::symlink_metadata(path)?;
    if !metadata.file_type().is_socket() || metadata.permissions().mode() & 0o777 != 0o600 {
        return Err(std::io::Error::other(
            "admin.sock is not a socket of mode 0600",
        ));
    }
    Ok(())
}

/// Serves `admin.sock` until the service stops.
pub async fn serve(host: Arc<Host>, listener: UnixListener) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let root = getsockopt(&stream, PeerCredentials).is_ok_and(|c| c.uid() == 0);
        if !root {
            tracing::warn!(
                code = "admin_peer_refused",
                "a connection to admin.sock that is not root was closed"
            );
            continue;
        }
        let host = Arc::clone(&host);
        tokio::spawn(async move { answer(host, stream).await });
    }
}

async fn answer(host: Arc<Host>, stream: UnixStream) {
    let (read, mut write) = stream.into_split();
    let mut reader = AsyncBufReader::new(read).take(MAX_LINE as u64);
    let mut line = Vec::new();
    if reader.read_until(b'\n', &mut line).await.is_err() || !is_doctor_request(line.trim_ascii()) {
        let _ = write.write_all(b"{\"error\":\"invalid_request\"}\n").await;
        return;
    }
    let answer = host.doctor_on_request().await;
    let mut text = answer.to_json();
    text.push('\n');
    let _ = write.write_all(text.as_bytes()).await;
    let _ = write.shutdown().await;
    if answer.exits {
        host.stop_refused();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::ADMIN_SOCKET;

    #[test]
    fn messages_round_trip_and_refuse_anything_else() {
        let answer = DoctorAnswer {
            lines: vec!["hd1_user: ok".into()],
            failed: true,
            exits: false,
        };
        assert_eq!(
            DoctorAnswer::decode(answer.to_json().as_bytes()),
            Some(answer)
        );
        assert!(DoctorAnswer::decode(b"{\"lines\":[],\"failed\":true}").is_none());
        assert!(DoctorAnswer::decode(b"{\"lines\":[1],\"failed\":true,\"exits\":false}").is_none());
        assert!(is_doctor_request(b"{\"op\":\"doctor\"}"));
        assert!(!is_doctor_request(b"{\"op\":\"doctor\",\"x\":1}"));
        assert!(!is_doctor_request(b"{\"op\":\"restart\"}"));
        assert!(!is_doctor_request(b"doctor"));
    }

    #[tokio::test]
    async fn the_endpoint_is_bound_with_mode_0600_or_not_at_all() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(ADMIN_SOCKET);
        // A stale file at the path goes first.
        std::fs::write(&path, b"stale").expect("write");
        let listener = bind(&path).expect("bound");
        let mode = std::fs::symlink_metadata(&path)
            .expect("socket")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        drop(listener);
        // The chmod step fails for a path with nothing at it (the typed
        // error the service refuses its start with). A failure of the chmod
        // of the service's own new socket cannot be made in a test: the
        // owner of a file may always change its mode on a local file system.
        assert!(protect(&dir.path().join("missing")).is_err());
        assert!(matches!(
            bind(&dir.path().join("no-folder").join(ADMIN_SOCKET)),
            Err(EndpointError::Unavailable(_))
        ));
    }
}
