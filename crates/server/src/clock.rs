//! The clock, injected everywhere time decides something (expiry, TOTP, rate
//! limits, the sweep), so that tests move time instead of sleeping (STYLE 10).
//! The trait and the manual clock are `bothy_proto::clock`, shared with the
//! host service; the operating system's clock is this binary's.

use std::time::{SystemTime, UNIX_EPOCH};

pub use bothy_proto::clock::{Clock, ManualClock, SharedClock, UnixMillis, millis};

/// The operating system's clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> UnixMillis {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_clock_is_after_2025() {
        assert!(SystemClock.now_ms() > 1_735_689_600_000);
    }
}
