//! The reconnect delays of the control connection (3.5 "Host service"):
//! exponential backoff with full jitter from `host_service.reconnect_backoff_base`
//! to `host_service.reconnect_backoff_cap`, reset after a `ready`.
//!
//! After a connection that reached `ready` (a healthy one) breaks, the
//! ceiling stays at most [`HEALTHY_CAP`] for the first
//! `reconnect_backoff_cap` of the outage, and only then grows to the cap: a
//! server restart or a short network loss is over within seconds, and a host
//! that waited up to the full cap (5 minutes) after a 30-second outage would
//! stay away from its people for no reason (docs/decisions.md D-325). A host
//! that never got `ready` (refused logins, an unreachable server from the
//! start) backs off to the full cap as before.

use std::time::Duration;

use tokio::time::Instant;

/// The ceiling of the delays in the first part of an outage that follows a
/// healthy connection (at most the configured cap, at least the base).
pub const HEALTHY_CAP: Duration = Duration::from_secs(10);

/// The state of the backoff.
#[derive(Debug, Clone)]
pub struct Backoff {
    base: Duration,
    cap: Duration,
    attempt: u32,
    /// The last connection reached `ready`.
    healthy: bool,
    /// When the first delay of the current outage was asked for.
    outage_since: Option<Instant>,
}

impl Backoff {
    /// A fresh backoff.
    pub fn new(base: Duration, cap: Duration) -> Backoff {
        Backoff {
            base,
            cap: cap.max(base),
            attempt: 0,
            healthy: false,
            outage_since: None,
        }
    }

    /// After a `ready`: the next failure starts from the base again, and the
    /// outage after this healthy connection is capped low at first.
    pub fn reset(&mut self) {
        self.attempt = 0;
        self.healthy = true;
        self.outage_since = None;
    }

    /// The ceiling of the next delay at `now`: `base * 2^attempt`, at most
    /// the cap of the outage's phase.
    pub fn ceiling_at(&self, now: Instant) -> Duration {
        let factor = 1u32.checked_shl(self.attempt.min(31)).unwrap_or(u32::MAX);
        self.base.saturating_mul(factor).min(self.cap_at(now))
    }

    /// The ceiling of the next delay now.
    pub fn ceiling(&self) -> Duration {
        self.ceiling_at(Instant::now())
    }

    fn cap_at(&self, now: Instant) -> Duration {
        let young = self
            .outage_since
            .is_none_or(|since| now.saturating_duration_since(since) < self.cap);
        if self.healthy && young {
            self.cap.min(HEALTHY_CAP.max(self.base))
        } else {
            self.cap
        }
    }

    /// The next delay at `now`: uniformly random from zero to the ceiling
    /// ("full jitter"); the ceiling doubles for the attempt after.
    pub fn next_delay_at(&mut self, now: Instant) -> Duration {
        self.outage_since.get_or_insert(now);
        let ceiling = self.ceiling_at(now);
        self.attempt = self.attempt.saturating_add(1);
        random_below(ceiling)
    }

    /// The next delay now.
    pub fn next_delay(&mut self) -> Duration {
        self.next_delay_at(Instant::now())
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

    /// Issue 15 item 10: after a healthy connection the outage is capped at
    /// HEALTHY_CAP for the first `cap` of it (a 30-second server restart costs
    /// at most ten more seconds, not a minute), then the full cap; without a
    /// ready before, the full cap at once.
    #[test]
    fn an_outage_after_a_healthy_connection_is_capped_low_at_first() {
        let cap = Duration::from_secs(300);
        let mut b = Backoff::new(Duration::from_secs(1), cap);
        let start = Instant::now();
        let mut ceilings = Vec::new();
        for _ in 0..8 {
            ceilings.push(b.ceiling_at(start).as_secs());
            b.next_delay_at(start);
        }
        assert_eq!(
            ceilings,
            [1, 2, 4, 8, 16, 32, 64, 128],
            "never ready: to the cap"
        );
        b.reset();
        let mut ceilings = Vec::new();
        for i in 0..8 {
            let now = start + Duration::from_secs(5 * i);
            ceilings.push(b.ceiling_at(now).as_secs());
            b.next_delay_at(now);
        }
        assert_eq!(ceilings, [1, 2, 4, 8, 10, 10, 10, 10]);
        // Past `cap` of outage the ceiling grows to the cap again.
        let late = start + cap + Duration::from_secs(5);
        assert_eq!(b.ceiling_at(late), Duration::from_secs(256));
        for _ in 0..4 {
            b.next_delay_at(late);
        }
        assert_eq!(b.ceiling_at(late), cap);
        // A new ready starts a new, young outage.
        b.reset();
        b.next_delay_at(late);
        b.next_delay_at(late);
        assert_eq!(b.ceiling_at(late), Duration::from_secs(4));
        // A cap below HEALTHY_CAP stays the cap.
        let mut small = Backoff::new(Duration::from_secs(1), Duration::from_secs(3));
        small.reset();
        for _ in 0..4 {
            small.next_delay_at(start);
        }
        assert_eq!(small.ceiling_at(start), Duration::from_secs(3));
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
