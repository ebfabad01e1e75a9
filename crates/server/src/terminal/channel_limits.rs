//! Rate limits of the terminal channels (spec 24 6.3 "Rate limits of the
//! terminal channels", M2-46; docs/decisions.md D-83): the token buckets of
//! the configuration (`rl.*`, [`crate::ratelimit`]) as the three WebSocket
//! channels use them.
//!
//! | Bucket | Key | Taken by |
//! |---|---|---|
//! | `rl.public_auth` | client address | a failed check of presented credentials: device stream 4004 or 4012, host proof 4110 or 4113 ([`charge_failed_check`]) |
//! | `rl.terminal` | person | the device stream's identify, after the credential check ([`take_person`]); openTerminalSession and attachTerminalSession take from the same bucket |
//! | `rl.host` | host | the control and the data connection, after the proof check ([`take_host`]) |
//!
//! While the client's `rl.public_auth` bucket is empty, a connection that
//! presents credentials is closed before they are checked ([`gate`]). Every
//! empty bucket closes the channel with 4008 `rate_limited` and the close
//! text [`close_text`] (`retry_after=<seconds>`), which the host service
//! waits out (3.5) and a client shows.

use std::net::IpAddr;

use uuid::Uuid;

use crate::clock::UnixMillis;
use crate::ratelimit::RetryAfter;
use crate::state::AppState;

/// The close text of 4008: `retry_after=<seconds>` (whole seconds, at least 1).
pub fn close_text(retry: RetryAfter) -> String {
    format!("retry_after={}", retry.seconds)
}

/// Whether a connection from `client` may present credentials now: `Err`
/// while the address's `rl.public_auth` bucket is empty (nothing is taken).
pub fn gate(state: &AppState, client: IpAddr, now: UnixMillis) -> Result<(), RetryAfter> {
    state.public_auth_limit().check(&client, now)
}

/// A check of credentials that `client` presented failed: one token of its
/// `rl.public_auth` bucket. An empty bucket here (a concurrent failure took
/// the last token) changes nothing: the answer is the refusal either way.
pub fn charge_failed_check(state: &AppState, client: IpAddr, now: UnixMillis) {
    let _ = state.public_auth_limit().try_take(&client, now);
}

/// One token of the person's `rl.terminal` bucket (the device stream's
/// identify, after the credential check).
pub fn take_person(state: &AppState, person_id: Uuid, now: UnixMillis) -> Result<(), RetryAfter> {
    state.terminal_limit().try_take(&person_id, now)
}

/// One token of the host's `rl.host` bucket (a control or data connection,
/// after the proof check).
pub fn take_host(state: &AppState, host_id: Uuid, now: UnixMillis) -> Result<(), RetryAfter> {
    state.host_limit().try_take(&host_id, now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_close_text_names_whole_seconds() {
        assert_eq!(close_text(RetryAfter { seconds: 1 }), "retry_after=1");
        assert_eq!(close_text(RetryAfter { seconds: 60 }), "retry_after=60");
    }
}
