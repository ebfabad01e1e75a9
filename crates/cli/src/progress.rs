//! A spinner on stderr for the long waits (step-up, opening, the host
//! connecting, a reattach) — only when stderr is a terminal, and cleared
//! before anything else is written there.

use std::io::{IsTerminal, Write};
use std::time::Duration;

/// A running spinner; it stops and clears its line when dropped.
#[derive(Debug)]
pub struct Spinner {
    task: Option<tokio::task::JoinHandle<()>>,
}

const FRAMES: [char; 4] = ['|', '/', '-', '\\'];

impl Spinner {
    /// Starts a spinner with `message`, or nothing when stderr is no terminal.
    pub fn start(message: &str) -> Spinner {
        if !std::io::stderr().is_terminal() {
            return Spinner { task: None };
        }
        let message = message.to_owned();
        let task = tokio::spawn(async move {
            let mut frame = 0;
            loop {
                {
                    let mut stderr = std::io::stderr().lock();
                    let _ = write!(stderr, "\r{} {message}", FRAMES[frame % FRAMES.len()]);
                    let _ = stderr.flush();
                }
                frame += 1;
                tokio::time::sleep(Duration::from_millis(120)).await;
            }
        });
        Spinner { task: Some(task) }
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
            let mut stderr = std::io::stderr().lock();
            let _ = write!(stderr, "\r\x1b[K");
            let _ = stderr.flush();
        }
    }
}
