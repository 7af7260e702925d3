//! The exclusive holds this endpoint granted, by key and client owner:
//! where a client's `LOCK.RELEASE` or `LOCK.EXTEND` goes on the servers
//! without asking them first (`lock::lookup`, a round of its own), and
//! whether its `LOCK.ACQUIRE` may be a refresh.
//!
//! Only a shortcut, never the truth: a hold that is not here (granted
//! through another endpoint, or before this one restarted), or that the
//! servers no longer hold under the owner recorded, is looked up on the
//! servers as before. What is recorded is the owner a hold stands under
//! on the servers (a round's, unique to one round), so acting
//! on a stale record changes nothing but that acquisition's own hold.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

/// One hold: the owner it stands under on the servers, and when its
/// lease ends at the latest.
struct Hold {
    stored: String,
    until: Instant,
}

#[derive(Default)]
pub struct Own {
    holds: Mutex<Table>,
}

#[derive(Default)]
struct Table {
    /// By key, then by client owner: looked up by `&str`, with nothing
    /// allocated for a look-up.
    holds: HashMap<String, HashMap<String, Hold>>,
    /// Holds in `holds`.
    len: usize,
    /// How many holds the table kept after it last dropped ended ones.
    kept: usize,
}

/// The table is swept of ended holds once it has doubled since the last
/// sweep, and not below this size: each sweep costs in proportion to the
/// holds it keeps.
const SWEEP_FROM: usize = 1024;

impl Own {
    /// `owner`'s hold of `key` stands under `stored` until `until` at the
    /// latest (granted, refreshed or extended).
    pub fn record(&self, key: &str, owner: &str, stored: &str, until: Instant) {
        let Ok(mut table) = self.holds.lock() else { return };
        let hold = Hold { stored: stored.to_string(), until };
        let owners = table.holds.entry(key.to_string()).or_default();
        let added = match owners.get_mut(owner) {
            Some(h) => {
                *h = hold;
                0
            }
            None => {
                owners.insert(owner.to_string(), hold);
                1
            }
        };
        table.len += added;
        if table.len >= SWEEP_FROM.max(2 * table.kept) {
            let now = Instant::now();
            table.holds.retain(|_, owners| {
                owners.retain(|_, h| h.until > now);
                !owners.is_empty()
            });
            table.len = table.holds.values().map(HashMap::len).sum();
            table.kept = table.len;
        }
    }

    /// The owner `owner`'s hold of `key` stands under, when this endpoint
    /// granted one whose lease may still run.
    pub fn find(&self, key: &str, owner: &str) -> Option<String> {
        let table = self.holds.lock().ok()?;
        let hold = table.holds.get(key)?.get(owner)?;
        (hold.until > Instant::now()).then(|| hold.stored.clone())
    }

    /// Forgets `owner`'s hold of `key` when it stands under `stored`
    /// (released, or no longer held there).
    pub fn forget(&self, key: &str, owner: &str, stored: &str) {
        let Ok(mut table) = self.holds.lock() else { return };
        let Some(owners) = table.holds.get_mut(key) else { return };
        if owners.get(owner).is_none_or(|h| h.stored != stored) {
            return;
        }
        owners.remove(owner);
        if owners.is_empty() {
            table.holds.remove(key);
        }
        table.len = table.len.saturating_sub(1);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.holds.lock().map(|t| t.len).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_hold_is_found_until_its_lease_ends_or_it_is_forgotten() {
        let own = Own::default();
        let later = Instant::now() + Duration::from_secs(60);
        own.record("k", "a", "a:fedcba9876543210", later);
        own.record("k", "a", "a:0123456789abcdef", later);
        assert_eq!(own.len(), 1, "the client's later hold of the key replaces the earlier");
        assert_eq!(own.find("k", "a").as_deref(), Some("a:0123456789abcdef"));
        assert_eq!(own.find("k", "b"), None, "another owner's");
        assert_eq!(own.find("other", "a"), None, "another key's");
        own.forget("k", "a", "a:fedcba9876543210");
        assert!(own.find("k", "a").is_some(), "forgetting another acquisition's hold leaves this one");
        own.forget("k", "a", "a:0123456789abcdef");
        assert_eq!(own.find("k", "a"), None);
        own.record("k", "a", "a:0123456789abcdef", Instant::now());
        assert_eq!(own.find("k", "a"), None, "a lease that has ended");
    }

    #[test]
    fn ended_holds_are_swept_as_the_table_grows() {
        let own = Own::default();
        let ended = Instant::now();
        for i in 0..SWEEP_FROM - 1 {
            own.record(&format!("k{i}"), "a", "a:0123456789abcdef", ended);
        }
        assert_eq!(own.len(), SWEEP_FROM - 1);
        own.record("live", "a", "a:0123456789abcdef", Instant::now() + Duration::from_secs(60));
        assert_eq!(own.len(), 1, "the ended ones are dropped, the running one kept");
        assert!(own.find("live", "a").is_some());
    }
}
