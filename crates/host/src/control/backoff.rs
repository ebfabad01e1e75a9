//! The reconnect delays of the control connection (3.5 "Host service"):
//! exponential backoff with full jitter from `host_service.reconnect_backoff_base`
//! to `host_service.reconnect_backoff_cap`, reset after a `ready`.

use std::time::Duration;

/// The state of the backoff.
#[derive(Debug, Clone)]
pub struct Backoff {
    base: Duration,
    cap: Duration,
    attempt: u32,
}

impl Backoff {
    /// A fresh backoff.
    pub fn new(base: Duration, cap: Duration) -> Backoff {
        Backoff {
            base,
            cap: cap.max(base),
            attempt: 0,
        }
    }

    /// After a `ready`: the next failure starts from the base again.
    pub fn reset(&mut self) {
        self.attempt = 0;
    }

    /// The ceiling of the next delay: `base * 2^attempt`, at most the cap.
    pub fn ceiling(&self) -> Duration {
        let factor = 1u32.checked_shl(self.attempt.min(31)).unwrap_or(u32::MAX);
        self.base.saturating_mul(factor).min(self.cap)
    }

    /// The next delay: uniformly random from zero to the ceiling ("full
    /// jitter"); the ceiling doubles for the attempt after.
    pub fn next_delay(&mut self) -> Duration {
        let ceiling = self.ceiling();
        self.attempt = self.attempt.saturating_add(1);
        random_below(ceiling)
    }

    /// The cap (4111 waits it before each attempt; 4008 without retry_after).
    pub fn cap(&self) -> Duration {
        self.cap
    }

    /// A random delay below the base (4013: the server shuts down).
    pub fn below_base(&self) -> Duration {
        random_below(self.base)
    }
}

/// Uniformly random in `[0, ceiling]` at millisecond resolution.
pub fn random_below(ceiling: Duration) -> Duration {
    let max = u64::try_from(ceiling.as_millis()).unwrap_or(u64::MAX);
    if max == 0 {
        return Duration::ZERO;
    }
    let mut bytes = [0u8; 8];
    if getrandom::fill(&mut bytes).is_err() {
        return ceiling;
    }
    Duration::from_millis(u64::from_le_bytes(bytes) % (max + 1))
}

/// The `retry_after=<seconds>` of a 4008 close text.
pub fn retry_after(reason: &str) -> Option<Duration> {
    let seconds = reason.trim().strip_prefix("retry_after=")?;
    seconds.parse::<u64>().ok().map(Duration::from_secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ceiling_doubles_to_the_cap_and_resets() {
        let mut b = Backoff::new(Duration::from_secs(1), Duration::from_secs(5));
        let mut ceilings = Vec::new();
        for _ in 0..5 {
            ceilings.push(b.ceiling().as_secs());
            let delay = b.next_delay();
            assert!(delay <= Duration::from_secs(5));
        }
        assert_eq!(ceilings, [1, 2, 4, 5, 5]);
        b.reset();
        assert_eq!(b.ceiling(), Duration::from_secs(1));
        for _ in 0..100 {
            b.next_delay();
        }
        assert_eq!(b.ceiling(), Duration::from_secs(5), "no overflow");
    }

    #[test]
    fn jitter_stays_in_range_and_varies() {
        let ceiling = Duration::from_millis(1000);
        let delays: Vec<_> = (0..64).map(|_| random_below(ceiling)).collect();
        assert!(delays.iter().all(|d| *d <= ceiling));
        assert!(delays.iter().any(|d| *d != delays[0]), "full jitter varies");
        assert_eq!(random_below(Duration::ZERO), Duration::ZERO);
    }

    #[test]
    fn retry_after_is_read_from_the_close_text() {
        assert_eq!(retry_after("retry_after=7"), Some(Duration::from_secs(7)));
        assert_eq!(retry_after("rate_limited"), None);
        assert_eq!(retry_after("retry_after=-1"), None);
    }
}
