//! A child process with a deadline (`claude auth status`, the login-shell probe,
//! `sudo -n true`, a `doctor-probe`): its own process group, standard error
//! closed, standard input closed or fed from a buffer,
//! at most a bounded part of standard output kept, and the whole group killed
//! at the deadline and after the child ended (so nothing it started outlives
//! the check). Blocking: callers are on a blocking thread.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// How long the end of a killed child is awaited before giving up on it.
const REAP_BOUND: Duration = Duration::from_secs(5);

/// Why a bounded run gave no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RunError {
    /// The program could not be started.
    #[error("the program could not be started")]
    Spawn,
    /// The deadline passed; the process group was killed.
    #[error("the program did not end in time")]
    Timeout,
}

/// A child that ended in time.
#[derive(Debug)]
pub struct Finished {
    /// How it ended.
    pub status: ExitStatus,
    /// The first `max_stdout` bytes of its standard output.
    pub stdout: Vec<u8>,
    /// Whether it wrote more than that.
    pub truncated: bool,
}

/// Runs `command` until it ends or `timeout` passes.
pub fn run(
    command: &mut Command,
    timeout: Duration,
    max_stdout: usize,
) -> Result<Finished, RunError> {
    run_with_input(command, None, timeout, max_stdout)
}

/// [`run`] with `input` written to the child's standard input (then closed).
pub fn run_with_input(
    command: &mut Command,
    input: Option<Vec<u8>>,
    timeout: Duration,
    max_stdout: usize,
) -> Result<Finished, RunError> {
    let deadline = Instant::now() + timeout;
    command
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stderr(Stdio::null())
        .stdout(Stdio::piped())
        .process_group(0);
    let mut child = command.spawn().map_err(|_| RunError::Spawn)?;
    if let (Some(input), Some(mut stdin)) = (input, child.stdin.take()) {
        // A child that does not read gets EPIPE or blocks this thread only.
        std::thread::spawn(move || {
            use std::io::Write;
            let _ = stdin.write_all(&input);
        });
    }
    let group = i32::try_from(child.id())
        .map(Pid::from_raw)
        .map_err(|_| RunError::Spawn)?;
    let Some(mut stdout) = child.stdout.take() else {
        let _ = killpg(group, Signal::SIGKILL);
        let _ = child.wait();
        return Err(RunError::Spawn);
    };
    let (out_tx, out_rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut kept = Vec::new();
        let mut truncated = false;
        let mut buffer = [0u8; 8192];
        loop {
            match stdout.read(&mut buffer) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let room = max_stdout.saturating_sub(kept.len());
                    kept.extend_from_slice(&buffer[..n.min(room)]);
                    truncated |= n > room;
                }
            }
        }
        let _ = out_tx.send((kept, truncated));
    });
    let (status_tx, status_rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = status_tx.send(child.wait());
    });
    let remaining = deadline.saturating_duration_since(Instant::now());
    let status = match status_rx.recv_timeout(remaining) {
        Ok(Ok(status)) => status,
        Ok(Err(_)) => {
            let _ = killpg(group, Signal::SIGKILL);
            return Err(RunError::Spawn);
        }
        Err(_) => {
            let _ = killpg(group, Signal::SIGKILL);
            let _ = status_rx.recv_timeout(REAP_BOUND);
            return Err(RunError::Timeout);
        }
    };
    // Whatever the child left running in its group ends with the check.
    let _ = killpg(group, Signal::SIGKILL);
    let remaining = deadline
        .saturating_duration_since(Instant::now())
        .max(REAP_BOUND);
    match out_rx.recv_timeout(remaining) {
        Ok((stdout, truncated)) => Ok(Finished {
            status,
            stdout,
            truncated,
        }),
        Err(_) => Err(RunError::Timeout),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_and_status() {
        let done = run(
            Command::new("/bin/sh").args(["-c", "printf hello; exit 3"]),
            Duration::from_secs(10),
            3,
        )
        .expect("ends");
        assert_eq!(done.status.code(), Some(3));
        assert_eq!(done.stdout, b"hel");
        assert!(done.truncated);
    }

    #[test]
    fn input_reaches_the_child() {
        let done = run_with_input(
            &mut Command::new("/bin/cat"),
            Some(b"request".to_vec()),
            Duration::from_secs(10),
            64,
        )
        .expect("ends");
        assert_eq!(done.stdout, b"request");
        assert!(done.status.success());
    }

    #[test]
    fn a_child_past_its_deadline_is_killed_with_its_group() {
        let started = Instant::now();
        let outcome = run(
            Command::new("/bin/sh").args(["-c", "sleep 30 & sleep 30"]),
            Duration::from_millis(200),
            16,
        );
        assert_eq!(outcome.err(), Some(RunError::Timeout));
        assert!(started.elapsed() < Duration::from_secs(10));
        assert_eq!(
            run(
                &mut Command::new("/nonexistent/program"),
                Duration::from_secs(1),
                1
            )
            .err(),
            Some(RunError::Spawn)
        );
    }
}
