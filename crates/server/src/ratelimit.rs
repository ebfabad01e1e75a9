//! Token buckets per key (`rl.*` of the configuration), on the injected clock.
//!
//! A bucket holds at most `burst` tokens and gains `refill_per_minute` tokens per
//! minute, continuously. [`RateLimiter::try_take`] takes one token or says when
//! the next one arrives ([`RetryAfter`], whole seconds for `Retry-After`);
//! [`RateLimiter::check`] only looks, for the calls that charge failures only
//! (`rl.public_auth`: a login is refused with 429 *before* any check once the
//! bucket is empty, and only a failed check takes a token).
//!
//! Arithmetic is in integers: one token is [`UNITS_PER_TOKEN`] units, and a
//! bucket gains `refill_per_minute` units per millisecond, so no rounding drifts.
//!
//! Memory is bounded: at most `max_keys` buckets. A bucket that has refilled to
//! `burst` is the same as no bucket, so when the map is full those are dropped
//! first; if none is full, the one with the most tokens goes (the client that
//! needed the limit least). The clock never moves backwards for a bucket: a time
//! before its last update counts as its last update.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Mutex, PoisonError};

use crate::clock::UnixMillis;
use crate::config::RateLimit;

/// Units of one token: a minute in milliseconds, so `refill_per_minute` tokens
/// per minute are exactly `refill_per_minute` units per millisecond.
pub const UNITS_PER_TOKEN: u64 = 60_000;

/// How many buckets a limiter keeps by default.
pub const DEFAULT_MAX_KEYS: usize = 16_384;

/// The bucket is empty; the next token arrives after this many whole seconds (≥ 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryAfter {
    /// Seconds until one token is back, rounded up.
    pub seconds: u64,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    units: u64,
    updated_at: UnixMillis,
}

/// Token buckets keyed by `K` (a client address, a person, a host).
#[derive(Debug)]
pub struct RateLimiter<K> {
    capacity_units: u64,
    refill_units_per_ms: u64,
    max_keys: usize,
    buckets: Mutex<HashMap<K, Bucket>>,
}

impl<K: Hash + Eq + Clone> RateLimiter<K> {
    /// A limiter with the configured bucket and [`DEFAULT_MAX_KEYS`].
    pub fn new(limit: RateLimit) -> Self {
        RateLimiter::with_max_keys(limit, DEFAULT_MAX_KEYS)
    }

    /// A limiter that keeps at most `max_keys` buckets (at least 1).
    pub fn with_max_keys(limit: RateLimit, max_keys: usize) -> Self {
        RateLimiter {
            capacity_units: u64::from(limit.burst.max(1)) * UNITS_PER_TOKEN,
            refill_units_per_ms: u64::from(limit.refill_per_minute.max(1)),
            max_keys: max_keys.max(1),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Takes one token of `key`'s bucket at `now`, or says when one is back.
    pub fn try_take(&self, key: &K, now: UnixMillis) -> Result<(), RetryAfter> {
        self.with_bucket(key, now, |bucket| {
            if bucket.units >= UNITS_PER_TOKEN {
                bucket.units -= UNITS_PER_TOKEN;
                Ok(())
            } else {
                Err(self.retry_after(bucket.units))
            }
        })
    }

    /// Whether `key`'s bucket holds a token at `now`, without taking it.
    pub fn check(&self, key: &K, now: UnixMillis) -> Result<(), RetryAfter> {
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        match buckets.get_mut(key) {
            None => Ok(()),
            Some(bucket) => {
                self.refill(bucket, now);
                if bucket.units >= UNITS_PER_TOKEN {
                    Ok(())
                } else {
                    Err(self.retry_after(bucket.units))
                }
            }
        }
    }

    /// The number of buckets held (for tests of the bound).
    pub fn len(&self) -> usize {
        self.buckets
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Whether no bucket is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn with_bucket<T>(&self, key: &K, now: UnixMillis, f: impl FnOnce(&mut Bucket) -> T) -> T {
        // A panic elsewhere while holding the lock leaves consistent buckets
        // (every update is a few integer stores), so a poisoned lock is used as is.
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        if !buckets.contains_key(key) && buckets.len() >= self.max_keys {
            self.evict(&mut buckets, now);
        }
        let bucket = buckets.entry(key.clone()).or_insert(Bucket {
            units: self.capacity_units,
            updated_at: now,
        });
        self.refill(bucket, now);
        f(bucket)
    }

    fn refill(&self, bucket: &mut Bucket, now: UnixMillis) {
        let elapsed = u64::try_from(now.saturating_sub(bucket.updated_at)).unwrap_or(0);
        bucket.units = bucket
            .units
            .saturating_add(elapsed.saturating_mul(self.refill_units_per_ms))
            .min(self.capacity_units);
        bucket.updated_at = bucket.updated_at.max(now);
    }

    fn retry_after(&self, units: u64) -> RetryAfter {
        let missing = UNITS_PER_TOKEN.saturating_sub(units);
        let ms = missing.div_ceil(self.refill_units_per_ms);
        RetryAfter {
            seconds: ms.div_ceil(1000).max(1),
        }
    }

    /// Makes room for one more bucket: drops every full one, else the fullest.
    fn evict(&self, buckets: &mut HashMap<K, Bucket>, now: UnixMillis) {
        for bucket in buckets.values_mut() {
            self.refill(bucket, now);
        }
        buckets.retain(|_, bucket| bucket.units < self.capacity_units);
        if buckets.len() >= self.max_keys {
            let fullest = buckets
                .iter()
                .max_by_key(|(_, bucket)| bucket.units)
                .map(|(key, _)| key.clone());
            if let Some(key) = fullest {
                buckets.remove(&key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(burst: u32, refill_per_minute: u32) -> RateLimit {
        RateLimit {
            burst,
            refill_per_minute,
        }
    }

    #[test]
    fn burst_then_refill() {
        let rl = RateLimiter::new(limit(3, 6)); // one token per 10 s
        for _ in 0..3 {
            rl.try_take(&"a", 0).unwrap();
        }
        assert_eq!(rl.try_take(&"a", 0), Err(RetryAfter { seconds: 10 }));
        assert_eq!(rl.check(&"a", 0), Err(RetryAfter { seconds: 10 }));
        // Another key has its own bucket.
        rl.try_take(&"b", 0).unwrap();
        // 9.001 s later: still missing 999 ms, rounded up to one second.
        assert_eq!(rl.try_take(&"a", 9_001), Err(RetryAfter { seconds: 1 }));
        assert_eq!(rl.check(&"a", 10_000), Ok(()));
        rl.try_take(&"a", 10_000).unwrap();
        assert!(rl.try_take(&"a", 10_000).is_err());
        // Never more than the burst, however long the pause.
        for _ in 0..3 {
            rl.try_take(&"a", 10_000_000).unwrap();
        }
        assert!(rl.try_take(&"a", 10_000_000).is_err());
    }

    #[test]
    fn check_does_not_take_and_unknown_keys_are_full() {
        let rl = RateLimiter::new(limit(1, 1));
        assert_eq!(rl.check(&1, 0), Ok(()));
        assert!(rl.is_empty(), "a look creates no bucket");
        rl.try_take(&1, 0).unwrap();
        assert_eq!(rl.check(&1, 0), Err(RetryAfter { seconds: 60 }));
    }

    #[test]
    fn a_clock_going_back_gives_nothing() {
        let rl = RateLimiter::new(limit(1, 60));
        rl.try_take(&1, 5_000).unwrap();
        assert!(rl.try_take(&1, 0).is_err());
        assert!(rl.try_take(&1, 5_999).is_err());
        rl.try_take(&1, 6_000).unwrap();
    }

    #[test]
    fn memory_is_bounded_and_full_buckets_go_first() {
        let rl = RateLimiter::with_max_keys(limit(2, 1), 3);
        rl.try_take(&1, 0).unwrap();
        rl.try_take(&1, 0).unwrap(); // empty
        rl.try_take(&2, 0).unwrap(); // half
        rl.try_take(&3, 0).unwrap(); // half
        rl.try_take(&4, 0).unwrap(); // evicts 2 or 3 (fullest), never 1
        assert_eq!(rl.len(), 3);
        assert!(rl.try_take(&1, 0).is_err(), "the empty bucket was kept");
        // Much later every bucket is full again; a new key drops them all.
        rl.try_take(&5, 10_000_000).unwrap();
        assert_eq!(rl.len(), 1);
    }
}
