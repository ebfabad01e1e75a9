//! The socketpair handover and the peer check of the local channel
//! (D-M2-42-11), and the listening socket the service manager hands the helper.
//!
//! With socket activation the kernel names the service manager as the peer of a
//! connection to the endpoint, not the helper. So the helper creates a
//! socketpair *after* accepting, and sends one end over the accepted connection
//! with SCM_RIGHTS ([`hand_over`]); the credentials of a socketpair end are
//! those of the process that created the pair, so SO_PEERCRED on the received
//! end names the helper process. The service ([`receive`]) connects, receives
//! that end and compares its peer's user ID and process ID with what it expects
//! ([`PeerExpectation`]) before it writes a single byte anywhere; the accepted
//! connection itself carries only the handover byte.
//!
//! Handover (D-131): the helper sends exactly one byte, [`HANDOVER_BYTE`], with
//! exactly one descriptor, a Unix stream socket. Anything else (no descriptor,
//! two descriptors, another byte, another kind of socket) is not the helper:
//! [`ChannelError::PeerMismatch`]. A connection that fails, closes or stays
//! silent for [`HANDOVER_TIMEOUT`] is [`ChannelError::Unreachable`].

#![allow(unsafe_code)]

use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixListener as StdUnixListener;
use std::path::Path;
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::socket::{
    AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags, SockFlag, SockType, UnixAddr,
    getsockname, getsockopt, recvmsg, sendmsg, socketpair, sockopt,
};
use tokio::io::Interest;
use tokio::net::UnixStream;

use super::ChannelError;

/// The one byte that travels with the descriptor.
pub const HANDOVER_BYTE: u8 = 0xb7;

/// How long the service waits for the handover after connecting.
pub const HANDOVER_TIMEOUT: Duration = Duration::from_secs(5);

/// The most descriptors one SCM_RIGHTS message can carry on Linux
/// (`SCM_MAX_FD`); the receive buffer has room for all, so none is dropped by
/// truncation and every one received can be closed.
const SCM_MAX_FD: usize = 253;

/// What the peer of a channel must be: the session user, and the main process
/// of its helper service as the service manager reports it
/// ([`crate::manager::helper_main_pid`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerExpectation {
    /// User ID of the session user.
    pub uid: u32,
    /// Main PID of the helper service of that user.
    pub main_pid: u32,
}

/// The credentials the kernel reports for the peer of a socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerCredentials {
    /// Process ID (0 when the peer lives in another PID namespace).
    pub pid: u32,
    /// User ID.
    pub uid: u32,
}

/// SO_PEERCRED of `socket`. `ENOPROTOOPT`/`EOPNOTSUPP` (a platform without the
/// option) is [`ChannelError::PeerCheckUnavailable`].
pub fn peer_credentials(socket: &impl AsFd) -> Result<PeerCredentials, ChannelError> {
    match getsockopt(socket, sockopt::PeerCredentials) {
        Ok(credentials) => Ok(PeerCredentials {
            pid: u32::try_from(credentials.pid()).unwrap_or(0),
            uid: credentials.uid(),
        }),
        Err(Errno::ENOPROTOOPT | Errno::EOPNOTSUPP) => Err(ChannelError::PeerCheckUnavailable),
        Err(errno) => Err(ChannelError::Unreachable(errno.into())),
    }
}

/// The service's side: connects to `endpoint`, receives the helper's end of the
/// socketpair and checks its peer against `expected`. Nothing is written to
/// either socket here; on a mismatch both are closed unwritten.
pub async fn receive(
    endpoint: &Path,
    expected: PeerExpectation,
) -> Result<UnixStream, ChannelError> {
    let connection = UnixStream::connect(endpoint)
        .await
        .map_err(ChannelError::Unreachable)?;
    let end = tokio::time::timeout(HANDOVER_TIMEOUT, receive_end(&connection))
        .await
        .map_err(|_| ChannelError::Unreachable(io::ErrorKind::TimedOut.into()))??;
    drop(connection);
    check_end(&end, expected)?;
    end.set_nonblocking(true)
        .map_err(ChannelError::Unreachable)?;
    UnixStream::from_std(end).map_err(ChannelError::Unreachable)
}

/// Receives the handover: one byte, one descriptor.
async fn receive_end(
    connection: &UnixStream,
) -> Result<std::os::unix::net::UnixStream, ChannelError> {
    let (bytes, byte, mut fds) = connection
        .async_io(Interest::READABLE, || {
            let mut byte = [0u8; 1];
            let mut iov = [IoSliceMut::new(&mut byte)];
            let mut space = nix::cmsg_space!([RawFd; SCM_MAX_FD]);
            let message = recvmsg::<UnixAddr>(
                connection.as_raw_fd(),
                &mut iov,
                Some(&mut space),
                MsgFlags::MSG_CMSG_CLOEXEC,
            )
            .map_err(io::Error::from)?;
            let mut fds: Vec<OwnedFd> = Vec::new();
            // The buffer holds SCM_MAX_FD descriptors, so it is never truncated.
            for cmsg in message.cmsgs().map_err(io::Error::from)? {
                if let ControlMessageOwned::ScmRights(raw) = cmsg {
                    for fd in raw {
                        // SAFETY: the kernel just installed `fd` in this
                        // process for this message; nothing else owns it, so
                        // taking ownership here closes it exactly once.
                        fds.push(unsafe { OwnedFd::from_raw_fd(fd) });
                    }
                }
            }
            Ok((message.bytes, byte[0], fds))
        })
        .await
        .map_err(ChannelError::Unreachable)?;
    if bytes == 0 && fds.is_empty() {
        return Err(ChannelError::Unreachable(
            io::ErrorKind::UnexpectedEof.into(),
        ));
    }
    // Every descriptor is dropped (closed) on each refusal below.
    if bytes != 1 || byte != HANDOVER_BYTE || fds.len() != 1 {
        return Err(ChannelError::PeerMismatch);
    }
    let Some(fd) = fds.pop() else {
        return Err(ChannelError::PeerMismatch);
    };
    let is_unix_stream = matches!(getsockopt(&fd, sockopt::SockType), Ok(SockType::Stream))
        && getsockname::<UnixAddr>(fd.as_raw_fd())
            .is_ok_and(|a| nix::sys::socket::SockaddrLike::family(&a) == Some(AddressFamily::Unix));
    if !is_unix_stream {
        return Err(ChannelError::PeerMismatch);
    }
    Ok(std::os::unix::net::UnixStream::from(fd))
}

/// Compares the peer of the received end with the expectation.
fn check_end(
    end: &std::os::unix::net::UnixStream,
    expected: PeerExpectation,
) -> Result<(), ChannelError> {
    let peer = peer_credentials(end)?;
    if peer.uid != expected.uid || peer.pid != expected.main_pid || peer.pid == 0 {
        return Err(ChannelError::PeerMismatch);
    }
    Ok(())
}

/// The helper's side, for one accepted `connection`: creates a socketpair,
/// sends one end over the connection and returns the other. The accepted
/// connection is closed afterwards. Run it in its own task, so a client that
/// does not read holds up only itself.
pub async fn hand_over(connection: UnixStream) -> io::Result<UnixStream> {
    let (ours, theirs) = socketpair(
        AddressFamily::Unix,
        SockType::Stream,
        None,
        SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
    )?;
    let sent = tokio::time::timeout(
        HANDOVER_TIMEOUT,
        connection.async_io(Interest::WRITABLE, || {
            let byte = [HANDOVER_BYTE];
            let iov = [IoSlice::new(&byte)];
            let fds = [theirs.as_raw_fd()];
            sendmsg::<UnixAddr>(
                connection.as_raw_fd(),
                &iov,
                &[ControlMessage::ScmRights(&fds)],
                MsgFlags::MSG_NOSIGNAL,
                None,
            )
            .map_err(io::Error::from)
        }),
    )
    .await
    .map_err(|_| io::Error::from(io::ErrorKind::TimedOut))??;
    if sent != 1 {
        return Err(io::ErrorKind::WriteZero.into());
    }
    drop(theirs);
    drop(connection);
    UnixStream::from_std(std::os::unix::net::UnixStream::from(ours))
}

/// Why the helper has no listening socket from its service manager.
#[derive(Debug, thiserror::Error)]
pub enum ListenFdError {
    /// `LISTEN_FDS`/`LISTEN_PID` are missing or name another process or count.
    #[error("no socket from the service manager (LISTEN_FDS=1 and LISTEN_PID of this process)")]
    NotActivated,
    /// Descriptor 3 is not a listening Unix stream socket.
    #[error("descriptor 3 is not a listening Unix stream socket")]
    NotAListener,
}

/// The first descriptor of socket activation (`SD_LISTEN_FDS_START`).
pub const LISTEN_FDS_START: RawFd = 3;

/// Takes the listening socket of the endpoint that the service manager passed
/// (D-132): `LISTEN_FDS=1`, `LISTEN_PID` = this process, descriptor 3 — the
/// form of systemd socket activation, which `bothy-host supervise` uses too.
/// Call once, early, before any other descriptor is opened by a thread.
pub fn listener_from_service_manager() -> Result<StdUnixListener, ListenFdError> {
    let pid_matches = std::env::var("LISTEN_PID")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .is_some_and(|pid| pid == std::process::id());
    let one = std::env::var("LISTEN_FDS").ok().as_deref() == Some("1");
    if !pid_matches || !one {
        return Err(ListenFdError::NotActivated);
    }
    // Check descriptor 3 before taking ownership of it.
    // SAFETY: descriptor 3 stays open for the call; borrowing it only reads
    // its socket options.
    let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(LISTEN_FDS_START) };
    let listening = getsockopt(&borrowed, sockopt::AcceptConn).unwrap_or(false);
    let stream = matches!(
        getsockopt(&borrowed, sockopt::SockType),
        Ok(SockType::Stream)
    );
    let unix = getsockname::<UnixAddr>(LISTEN_FDS_START)
        .is_ok_and(|a| nix::sys::socket::SockaddrLike::family(&a) == Some(AddressFamily::Unix));
    if !(listening && stream && unix) {
        return Err(ListenFdError::NotAListener);
    }
    // SAFETY: socket activation gives this process descriptor 3 and nothing in
    // it has claimed it (this runs once at start); from here the listener owns it.
    let owned = unsafe { OwnedFd::from_raw_fd(LISTEN_FDS_START) };
    // No child may inherit the listener.
    let _ = nix::fcntl::fcntl(
        &owned,
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
    );
    Ok(StdUnixListener::from(owned))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use tokio::net::UnixListener;

    fn me() -> PeerExpectation {
        PeerExpectation {
            uid: nix::unistd::getuid().as_raw(),
            main_pid: std::process::id(),
        }
    }

    #[tokio::test]
    async fn the_handed_over_end_names_the_creating_process() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let helper = tokio::spawn(async move {
            let (connection, _) = listener.accept().await.unwrap();
            hand_over(connection).await.unwrap()
        });
        let end = receive(&path, me()).await.unwrap();
        let ours = helper.await.unwrap();
        let peer = peer_credentials(&end).unwrap();
        assert_eq!(peer.pid, std::process::id());
        drop(ours);
        drop(end);
    }

    #[tokio::test]
    async fn another_pid_or_uid_is_a_mismatch_and_gets_no_byte() {
        use tokio::io::AsyncReadExt;
        for expected in [
            PeerExpectation {
                main_pid: 1,
                ..me()
            },
            PeerExpectation {
                uid: me().uid + 1,
                ..me()
            },
        ] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("h.sock");
            let listener = UnixListener::bind(&path).unwrap();
            let helper = tokio::spawn(async move {
                let (connection, _) = listener.accept().await.unwrap();
                hand_over(connection).await.unwrap()
            });
            let result = receive(&path, expected).await;
            assert!(
                matches!(result, Err(ChannelError::PeerMismatch)),
                "{result:?}"
            );
            let mut ours = helper.await.unwrap();
            let mut buf = Vec::new();
            ours.read_to_end(&mut buf).await.unwrap();
            assert!(buf.is_empty(), "the peer received {} bytes", buf.len());
        }
    }

    #[tokio::test]
    async fn no_listener_is_unreachable_and_a_silent_peer_without_descriptor_is_a_mismatch() {
        use tokio::io::AsyncWriteExt;
        let dir = tempfile::tempdir().unwrap();
        let missing = receive(&dir.path().join("none.sock"), me()).await;
        assert!(
            matches!(missing, Err(ChannelError::Unreachable(_))),
            "{missing:?}"
        );

        let path = dir.path().join("closes.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let closer = tokio::spawn(async move { drop(listener.accept().await.unwrap()) });
        let closed = receive(&path, me()).await;
        closer.await.unwrap();
        assert!(
            matches!(closed, Err(ChannelError::Unreachable(_))),
            "{closed:?}"
        );

        let path = dir.path().join("talks.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let talker = tokio::spawn(async move {
            let (mut c, _) = listener.accept().await.unwrap();
            c.write_all(&[HANDOVER_BYTE]).await.unwrap();
            c
        });
        let talked = receive(&path, me()).await;
        drop(talker.await.unwrap());
        assert!(
            matches!(talked, Err(ChannelError::PeerMismatch)),
            "{talked:?}"
        );
    }
}
