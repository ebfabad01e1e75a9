//! The audit of refused pairing codes: at most one entry per client address
//! and window, with the count of the refusals it stands for.

use super::*;

/// The aggregation window of host.pair refusals.
pub const REFUSAL_WINDOW_MS: i64 = 60_000;

/// Most client addresses [`RefusalAudit`] tracks; beyond that, new addresses
/// share one overflow entry.
pub const REFUSAL_MAX_ADDRESSES: usize = 4096;

#[derive(Debug, Clone, Copy)]
struct Window {
    /// When the last entry for this address was written.
    written_at: UnixMillis,
    /// Refusals since then, not yet in an entry.
    pending: i64,
}

/// The aggregation of host.pair code refusals in the audit (3.2 "Code",
/// docs/decisions.md D-23), in memory per process: per client address at most
/// one deny entry (`reason_code = unauthenticated`, actor system) per
/// [`REFUSAL_WINDOW_MS`]. The first refusal after a quiet window writes an
/// entry at once; later ones in the window are counted and go into the next
/// entry of that address, whose `count` is the number of refusals since the
/// previous entry, itself included. At most [`REFUSAL_MAX_ADDRESSES`]
/// addresses are tracked: idle ones are dropped first, then new addresses
/// share one overflow entry.
#[derive(Debug, Default)]
pub struct RefusalAudit {
    windows: Mutex<HashMap<Option<IpAddr>, Window>>,
}

impl RefusalAudit {
    /// An empty aggregation.
    pub fn new() -> RefusalAudit {
        RefusalAudit::default()
    }

    /// Counts one refusal from `client` at `now`; the count of the entry to
    /// write now, if one is due.
    pub fn record(&self, client: IpAddr, now: UnixMillis) -> Option<i64> {
        // A poisoned lock only means another request panicked mid-update; the
        // counters are still usable.
        let mut windows = self
            .windows
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut key = Some(client);
        if !windows.contains_key(&key) && windows.len() >= REFUSAL_MAX_ADDRESSES {
            windows.retain(|_, w| w.pending > 0 || now - w.written_at < REFUSAL_WINDOW_MS);
            if windows.len() >= REFUSAL_MAX_ADDRESSES {
                key = None;
            }
        }
        match windows.get_mut(&key) {
            Some(window) if now - window.written_at < REFUSAL_WINDOW_MS => {
                window.pending = window.pending.saturating_add(1);
                None
            }
            Some(window) => {
                let count = window.pending.saturating_add(1);
                *window = Window {
                    written_at: now,
                    pending: 0,
                };
                Some(count)
            }
            None => {
                windows.insert(
                    key,
                    Window {
                        written_at: now,
                        pending: 0,
                    },
                );
                Some(1)
            }
        }
    }

    /// Counts a refusal and writes its entry when one is due (in its own
    /// unit of work: the refused request changed nothing).
    pub async fn refused(&self, db: &Db, client: IpAddr, now: UnixMillis) -> Result<(), DbError> {
        let Some(count) = self.record(client, now) else {
            return Ok(());
        };
        let mut uow = db.begin(now).await?;
        uow.audit(
            AuditEntry::deny(AuditAction::HostPair, Actor::System).details(
                AuditDetails::new()
                    .code("reason_code", PairRefusal::Unauthenticated)
                    .count("count", count),
            ),
        );
        uow.commit().await.map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn address(n: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, n])
    }

    #[test]
    fn refusals_write_at_most_one_entry_per_address_and_window() {
        let audit = RefusalAudit::new();
        let t = 1_000_000;
        assert_eq!(audit.record(address(1), t), Some(1));
        assert_eq!(audit.record(address(1), t + 1), None);
        assert_eq!(audit.record(address(1), t + REFUSAL_WINDOW_MS - 1), None);
        // Another address has its own window.
        assert_eq!(audit.record(address(2), t + 5), Some(1));
        // The next entry carries the two counted in the window and itself.
        assert_eq!(audit.record(address(1), t + REFUSAL_WINDOW_MS), Some(3));
        assert_eq!(audit.record(address(1), t + REFUSAL_WINDOW_MS + 1), None);
        // A quiet address writes its first refusal at once.
        assert_eq!(
            audit.record(address(2), t + 10 * REFUSAL_WINDOW_MS),
            Some(1)
        );
    }

    #[test]
    fn many_addresses_share_an_overflow_entry() {
        let audit = RefusalAudit::new();
        let t = 5_000_000;
        for i in 0..REFUSAL_MAX_ADDRESSES {
            let ip = IpAddr::from(u32::try_from(i).unwrap().to_be_bytes());
            assert_eq!(audit.record(ip, t), Some(1));
        }
        let late = IpAddr::from([192, 168, 1, 1]);
        assert_eq!(audit.record(late, t), Some(1));
        assert_eq!(audit.record(IpAddr::from([192, 168, 1, 2]), t), None);
        // After the window the idle addresses are dropped for new ones.
        assert_eq!(audit.record(late, t + REFUSAL_WINDOW_MS), Some(1));
        assert!(audit.windows.lock().unwrap().len() <= REFUSAL_MAX_ADDRESSES);
    }
}
