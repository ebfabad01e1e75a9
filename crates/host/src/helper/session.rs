//! One session connection: the PTY of one session from start to end (6.5).
//!
//! Two tasks per session. The control task reads the connection (input, size,
//! end), writes input into the PTY, and watches the leader's pidfd and the main
//! connection. The output task reads the PTY and sends output chunks; it reads
//! the next chunk only after the previous one was written to the connection,
//! so a slow service holds back its PTY and nothing else (backpressure).
//!
//! Every end — `End`, the session connection lost, a broken message, the
//! leader's exit, the main connection lost — kills the whole cgroup at once
//! (`cgroup.kill`, no grace, D-M2-45-13), waits for it to be empty, removes it,
//! reaps the leader, and sweeps the helper's subtree for processes that left
//! the session's cgroup (`Helper::sweep`, D-331). Then the output task sends what the PTY still holds
//! and `Exited`: the leader's status (or 128 + signal), `None` after the main
//! connection was lost (the service ends those sessions without exit code,
//! 6.2 "Broken channel"). A lost session connection gets nothing more.

use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::unix::AsyncFd;
use tokio::sync::oneshot;
use tracing::{info, warn};

use crate::channel::link::{HelperReader, HelperWriter};
use crate::channel::message::MAX_CHUNK_BYTES;
use crate::channel::{FromHelper, PtyStart, StartFailure, ToHelper};

use super::cgroup::{Cgroup, EMPTY_BOUND};
use super::profile::{StartContext, spawn_spec};
use super::pty::{self, Child};
use super::{Helper, SESSION_PREFIX};

/// Input accepted from the service but not yet written to the PTY; above this
/// the connection is no longer read until the program reads its input.
const MAX_PENDING_INPUT: usize = 1 << 20;

/// How long the output task may take for the last output and `Exited`.
const FINISH_BOUND: Duration = Duration::from_secs(10);

/// Why a session ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reason {
    End,
    ConnectionLost,
    Refused,
    LeaderExited,
    MainLost,
}

impl Reason {
    fn code(self) -> &'static str {
        match self {
            Reason::End => "end",
            Reason::ConnectionLost => "session_connection_lost",
            Reason::Refused => "session_message_invalid",
            Reason::LeaderExited => "process_exited",
            Reason::MainLost => "main_connection_lost",
        }
    }
}

pub(super) async fn run(
    helper: Arc<Helper>,
    start: PtyStart,
    mut reader: HelperReader,
    mut writer: HelperWriter,
) {
    let session_id = start.session_id;
    let Some(mut main_alive) = helper.subscribe_main() else {
        warn!(code = "no_main_connection", %session_id, "pty_failed");
        let _ = writer
            .send(&FromHelper::StartFailed(StartFailure::PtyFailed))
            .await;
        return;
    };
    let name = format!("{SESSION_PREFIX}{session_id}");
    // Claimed before the cgroup exists, so a sweep of another session's end
    // never takes it for a stray one.
    let claim = helper.claim(name.clone());
    let cgroup = match helper.base.create_child(&name, false) {
        Ok(c) => c,
        Err(e) => {
            warn!(code = "session_cgroup_refused", %session_id, error = %e, "pty_failed");
            let _ = writer
                .send(&FromHelper::StartFailed(StartFailure::PtyFailed))
                .await;
            return;
        }
    };
    let started = {
        let helper = helper.clone();
        let cgroup = cgroup.clone();
        tokio::task::spawn_blocking(move || {
            let ctx = StartContext {
                user: &helper.user,
                helper_env: &helper.helper_env,
                state: &helper.state,
            };
            let spec = spawn_spec(&start, &ctx)?;
            let dir = cgroup.open_dir().map_err(|e| {
                warn!(code = "session_cgroup_refused", error = %e, "pty_failed");
                StartFailure::PtyFailed
            })?;
            pty::spawn(&spec, std::os::fd::AsFd::as_fd(&dir)).map_err(|e| {
                warn!(code = "pty_spawn_failed", error = %e, "pty_failed");
                StartFailure::PtyFailed
            })
        })
        .await
        .unwrap_or(Err(StartFailure::PtyFailed))
    };
    let pty = match started {
        Ok(pty) => pty,
        Err(failure) => {
            finish_cgroup(cgroup).await;
            let _ = writer.send(&FromHelper::StartFailed(failure)).await;
            return;
        }
    };
    let (master, leader) = match (
        pty::register_master(pty.master),
        pty::register_child(pty.child),
    ) {
        (Ok(master), Ok(leader)) => (Arc::new(master), leader),
        (master, leader) => {
            warn!(code = "pty_registration_failed", %session_id);
            // Dropping both closes them; the tree still has to go.
            drop((master, leader));
            finish_cgroup(cgroup).await;
            helper.release(claim).await;
            let _ = writer
                .send(&FromHelper::StartFailed(StartFailure::PtyFailed))
                .await;
            return;
        }
    };
    if writer.send(&FromHelper::Started).await.is_err() {
        end_tree(&cgroup, &leader).await;
        finish_cgroup(cgroup).await;
        helper.release(claim).await;
        return;
    }
    info!(code = "session_started", %session_id);

    let (finish, finished) = oneshot::channel();
    let output = tokio::spawn(output_task(master.clone(), writer, finished));
    let mut pending: Vec<u8> = Vec::new();
    let reason = loop {
        tokio::select! {
            _ = main_alive.changed() => break Reason::MainLost,
            _ = leader.readable() => break Reason::LeaderExited,
            message = reader.recv(), if pending.len() < MAX_PENDING_INPUT => match message {
                Ok(Some(ToHelper::Input(bytes))) => pending.extend_from_slice(&bytes),
                Ok(Some(ToHelper::Resize(size))) => {
                    if let Err(e) = pty::set_size(master.get_ref(), size) {
                        warn!(code = "resize_failed", %session_id, error = %e);
                    }
                }
                Ok(Some(ToHelper::End)) => break Reason::End,
                Ok(Some(_)) => break Reason::Refused,
                Ok(None) => break Reason::ConnectionLost,
                Err(e) => {
                    warn!(code = "channel_message_refused", %session_id, error = %e);
                    break Reason::ConnectionLost;
                }
            },
            writable = master.writable(), if !pending.is_empty() => {
                let Ok(mut guard) = writable else { pending.clear(); continue };
                match guard.try_io(|fd| {
                    nix::unistd::write(fd.get_ref(), &pending).map_err(std::io::Error::from)
                }) {
                    Ok(Ok(n)) => {
                        pending.drain(..n);
                    }
                    // The program closed its terminal: the input has no reader.
                    Ok(Err(_)) => pending.clear(),
                    Err(_would_block) => {}
                }
            }
        }
    };
    let status = end_tree(&cgroup, &leader).await;
    finish_cgroup(cgroup).await;
    // What left the session's cgroup ends before the end is reported (D-331).
    helper.release(claim).await;
    info!(code = "session_ended", %session_id, reason = reason.code());
    match reason {
        Reason::ConnectionLost => output.abort(),
        Reason::MainLost => {
            let _ = finish.send(None);
            let _ = tokio::time::timeout(FINISH_BOUND, output).await;
        }
        Reason::End | Reason::Refused | Reason::LeaderExited => {
            let _ = finish.send(status);
            let _ = tokio::time::timeout(FINISH_BOUND, output).await;
        }
    }
}

/// Kills the tree (the whole cgroup) and reaps the leader; its exit code.
async fn end_tree(cgroup: &Cgroup, leader: &AsyncFd<Child>) -> Option<i32> {
    let killing = cgroup.clone();
    match tokio::task::spawn_blocking(move || killing.kill()).await {
        Ok(Ok(())) => {}
        _ => warn!(code = "session_kill_failed"),
    }
    // SIGKILL cannot be blocked: the leader's pidfd turns readable.
    if tokio::time::timeout(EMPTY_BOUND, leader.readable())
        .await
        .is_err()
    {
        warn!(code = "session_leader_not_ended");
        return None;
    }
    pty::try_reap(leader.get_ref()).flatten()
}

/// Waits until the cgroup is empty (killing again if needed) and removes it.
async fn finish_cgroup(cgroup: Cgroup) {
    let removed = tokio::task::spawn_blocking(move || cgroup.kill_and_remove(EMPTY_BOUND)).await;
    if !matches!(removed, Ok(Ok(()))) {
        warn!(code = "session_cgroup_not_removed");
    }
}

/// Reads the PTY and sends output until told to finish; then sends what is
/// left and `Exited`.
async fn output_task(
    master: Arc<AsyncFd<OwnedFd>>,
    mut writer: HelperWriter,
    mut finish: oneshot::Receiver<Option<i32>>,
) {
    // After EIO (no process holds the terminal any more) the PTY stays
    // readable for ever; it is not read again until the finish.
    let mut hung_up = false;
    let mut buf = vec![0u8; MAX_CHUNK_BYTES];
    loop {
        tokio::select! {
            biased;
            status = &mut finish => {
                let status = status.unwrap_or(None);
                if !hung_up {
                    drain(&master, &mut writer, &mut buf).await;
                }
                let _ = writer.send(&FromHelper::Exited(status)).await;
                let _ = writer.shutdown().await;
                return;
            }
            chunk = read_chunk(&master, &mut buf), if !hung_up => match chunk {
                Ok(chunk) => {
                    if writer.send(&FromHelper::Output(chunk)).await.is_err() {
                        return;
                    }
                }
                Err(_) => hung_up = true,
            }
        }
    }
}

/// The next chunk of output: what the PTY holds when it turns readable, up to
/// 64 KiB, read into `buf` (the task's own, reused) and copied out at its
/// length. A PTY answers a read with at most one line-discipline buffer (4
/// KiB); reading on until it has no more makes one chunk, one message to the
/// service, of what a burst of output left there (D-717). Cancel-safe: the
/// reads happen only once the master is ready, inside one poll.
async fn read_chunk(master: &AsyncFd<OwnedFd>, buf: &mut [u8]) -> std::io::Result<Vec<u8>> {
    loop {
        let mut guard = master.readable().await?;
        let read = read_available(master.get_ref(), buf);
        if read.emptied {
            guard.clear_ready();
        }
        if read.filled > 0 {
            return Ok(buf[..read.filled].to_vec());
        }
        match read.end {
            Some(error) => return Err(error),
            None if read.emptied => continue,
            None => return Err(std::io::ErrorKind::UnexpectedEof.into()),
        }
    }
}

/// What [`read_available`] read.
struct Available {
    /// Bytes read into the buffer.
    filled: usize,
    /// The PTY said it has nothing more for now (EAGAIN).
    emptied: bool,
    /// The read that ended the run failed (EIO once nothing holds the
    /// terminal); with bytes read before it, the next call meets it again.
    end: Option<std::io::Error>,
}

/// Reads `fd` into `buf` until it has nothing more for now, the buffer is
/// full, or a read fails or ends.
fn read_available(fd: &OwnedFd, buf: &mut [u8]) -> Available {
    let mut filled = 0;
    while filled < buf.len() {
        match nix::unistd::read(fd, &mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(nix::errno::Errno::EAGAIN) => {
                return Available {
                    filled,
                    emptied: true,
                    end: None,
                };
            }
            Err(nix::errno::Errno::EINTR) => {}
            Err(error) => {
                return Available {
                    filled,
                    emptied: false,
                    end: Some(error.into()),
                };
            }
        }
    }
    Available {
        filled,
        emptied: false,
        end: None,
    }
}

/// Sends what the PTY still holds after the tree was killed (the terminal
/// answers the buffered bytes, then EIO).
async fn drain(master: &AsyncFd<OwnedFd>, writer: &mut HelperWriter, buf: &mut [u8]) {
    loop {
        let read = read_available(master.get_ref(), buf);
        if read.filled == 0 {
            return;
        }
        let chunk = buf[..read.filled].to_vec();
        if writer.send(&FromHelper::Output(chunk)).await.is_err() || read.end.is_some() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use nix::fcntl::OFlag;

    use super::*;

    /// A non-blocking pipe: its read end (what the PTY master is to the
    /// output task) and its write end.
    fn pipe() -> (OwnedFd, std::fs::File) {
        let (read, write) = nix::unistd::pipe2(OFlag::O_NONBLOCK | OFlag::O_CLOEXEC).unwrap();
        (read, std::fs::File::from(write))
    }

    #[test]
    fn a_read_takes_everything_waiting_in_one_run_and_says_when_it_emptied() {
        let (read, mut write) = pipe();
        for piece in 0..5u8 {
            write.write_all(&[piece; 3000]).unwrap();
        }
        let mut buf = vec![0u8; MAX_CHUNK_BYTES];
        let got = read_available(&read, &mut buf);
        assert_eq!(got.filled, 15_000);
        assert!(got.emptied);
        assert!(got.end.is_none());
        assert!(buf[..3000].iter().all(|b| *b == 0) && buf[12_000..15_000].iter().all(|b| *b == 4));
        // Nothing waiting: nothing read, emptied.
        let again = read_available(&read, &mut buf);
        assert_eq!((again.filled, again.emptied), (0, true));
    }

    #[test]
    fn a_read_stops_at_a_full_buffer_and_at_the_end() {
        let (read, mut write) = pipe();
        write.write_all(&[7u8; 100]).unwrap();
        let mut small = [0u8; 64];
        let first = read_available(&read, &mut small);
        assert_eq!((first.filled, first.emptied), (64, false));
        drop(write);
        // The rest, then the end of the stream (read 0): neither emptied nor
        // failed; the next read finds nothing more at all.
        let rest = read_available(&read, &mut small);
        assert_eq!((rest.filled, rest.emptied), (36, false));
        assert!(rest.end.is_none());
        let end = read_available(&read, &mut small);
        assert_eq!((end.filled, end.emptied), (0, false));
    }

    #[test]
    fn a_failed_read_ends_the_run_and_keeps_what_came_before() {
        // A descriptor that is not open for reading: the error of the read.
        let path =
            std::env::temp_dir().join(format!("bothy-read-available-{}", std::process::id()));
        let fd = OwnedFd::from(std::fs::File::create(&path).unwrap());
        std::fs::remove_file(&path).unwrap();
        let mut buf = [0u8; 16];
        let got = read_available(&fd, &mut buf);
        assert_eq!(got.filled, 0);
        assert_eq!(
            got.end.map(|e| e.raw_os_error()),
            Some(Some(nix::libc::EBADF))
        );
    }
}
