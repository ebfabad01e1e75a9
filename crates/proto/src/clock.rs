//! The clock as a value handed in: the trait every part that decides by time
//! reads (`bothy-server` and `bothy-host`), and a clock that moves only when
//! told to, for tests of expiry and limits (STYLE 10). Nothing here reads the
//! system's time: each binary hands in its own `SystemClock`.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

/// Milliseconds since the Unix epoch, the one time representation in the
/// database and on the wire (docs/decisions.md D-13).
pub type UnixMillis = i64;

/// Where a service reads the time.
pub trait Clock: Send + Sync + std::fmt::Debug + 'static {
    /// Now, in milliseconds since the Unix epoch.
    fn now_ms(&self) -> UnixMillis;
}

/// A shared clock.
pub type SharedClock = Arc<dyn Clock>;

/// A clock that moves only when told to; for tests of expiry and limits.
#[derive(Debug)]
pub struct ManualClock {
    now: AtomicI64,
}

impl ManualClock {
    /// A clock standing at `now`.
    pub fn new(now: UnixMillis) -> Arc<Self> {
        Arc::new(ManualClock {
            now: AtomicI64::new(now),
        })
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        self.now.fetch_add(millis(by), Ordering::SeqCst);
    }

    /// Sets the clock.
    pub fn set(&self, now: UnixMillis) {
        self.now.store(now, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> UnixMillis {
        self.now.load(Ordering::SeqCst)
    }
}

/// A duration in milliseconds, saturating (configuration values are durations).
pub fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told() {
        let clock = ManualClock::new(1_000);
        assert_eq!(clock.now_ms(), 1_000);
        clock.advance(Duration::from_secs(2));
        assert_eq!(clock.now_ms(), 3_000);
        clock.set(5);
        assert_eq!(clock.now_ms(), 5);
    }
}
