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
    loop {
        tokio::select! {
            biased;
            status = &mut finish => {
                let status = status.unwrap_or(None);
                if !hung_up {
                    drain(&master, &mut writer).await;
                }
                let _ = writer.send(&FromHelper::Exited(status)).await;
                let _ = writer.shutdown().await;
                return;
            }
            chunk = read_chunk(&master), if !hung_up => match chunk {
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

/// The next chunk of output (at most 64 KiB). Cancel-safe: the read happens
/// only once the master is ready, inside one poll.
async fn read_chunk(master: &AsyncFd<OwnedFd>) -> std::io::Result<Vec<u8>> {
    loop {
        let mut guard = master.readable().await?;
        let mut buf = vec![0u8; MAX_CHUNK_BYTES];
        match guard
            .try_io(|fd| nix::unistd::read(fd.get_ref(), &mut buf).map_err(std::io::Error::from))
        {
            Ok(Ok(0)) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(Ok(n)) => {
                buf.truncate(n);
                return Ok(buf);
            }
            Ok(Err(e)) => return Err(e),
            Err(_would_block) => continue,
        }
    }
}

/// Sends what the PTY still holds after the tree was killed (the terminal
/// answers the buffered bytes, then EIO).
async fn drain(master: &AsyncFd<OwnedFd>, writer: &mut HelperWriter) {
    loop {
        let mut buf = vec![0u8; MAX_CHUNK_BYTES];
        match nix::unistd::read(master.get_ref(), &mut buf) {
            Ok(n) if n > 0 => {
                buf.truncate(n);
                if writer.send(&FromHelper::Output(buf)).await.is_err() {
                    return;
                }
            }
            _ => return,
        }
    }
}
