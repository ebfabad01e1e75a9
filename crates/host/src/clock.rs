//! The host service's clock, injected like the server's (STYLE 10): the
//! service reads the time only through [`Host::clock`](crate::host::Host)
//! — the `iat` of its proofs, the expiry checks of message 1 (5.3), the
//! deadlines of an opening and the replay window of token IDs — so a test can
//! hand in a [`ManualClock`] instead of the operating system's.

use std::time::{SystemTime, UNIX_EPOCH};

pub use bothy_proto::clock::{Clock, ManualClock, SharedClock, UnixMillis};

/// The operating system's clock, the one `bothy-host run` uses.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> UnixMillis {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
    }
}
