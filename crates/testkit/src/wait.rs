//! Waiting on a condition with a deadline, for facts that give no event to
//! wait for (the process table, files, a log, a row or a map another task
//! writes): one place instead of a polling loop in every test. A condition
//! that never holds fails the test with what it waited for, never hangs it.
//! The deadline is real time (a safety net, not a timer the test measures).

use std::future::Future;
use std::time::{Duration, Instant};

/// How often a condition is asked again.
const STEP: Duration = Duration::from_millis(10);

/// Asks `probe` until it gives a value; `None` when `within` passed first.
pub async fn try_eventually<T, Fut>(within: Duration, mut probe: impl FnMut() -> Fut) -> Option<T>
where
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        if let Some(value) = probe().await {
            return Some(value);
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(STEP).await;
    }
}

/// Asks `probe` until it gives a value and returns that value; panics naming
/// `what` when `within` passed first.
pub async fn eventually<T, Fut>(what: &str, within: Duration, probe: impl FnMut() -> Fut) -> T
where
    Fut: Future<Output = Option<T>>,
{
    match try_eventually(within, probe).await {
        Some(value) => value,
        None => panic!("timed out after {within:?} waiting for {what}"),
    }
}

/// [`try_eventually`] for a caller without a runtime: the thread sleeps
/// between the questions.
pub fn try_eventually_blocking<T>(
    within: Duration,
    mut probe: impl FnMut() -> Option<T>,
) -> Option<T> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(value) = probe() {
            return Some(value);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(STEP);
    }
}

/// [`eventually`] for a caller without a runtime.
#[track_caller]
pub fn eventually_blocking<T>(what: &str, within: Duration, probe: impl FnMut() -> Option<T>) -> T {
    match try_eventually_blocking(within, probe) {
        Some(value) => value,
        None => panic!("timed out after {within:?} waiting for {what}"),
    }
}
