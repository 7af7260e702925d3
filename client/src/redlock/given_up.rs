//! The owners whose grants a handle gave up, remembered on request: a
//! round that failed or was dropped releases its grants, and those
//! releases may still be on their way (sent, retried for an unanswered
//! server, or a late grant released by its wait's task). A caller that
//! takes over holds by their owner (`redlock serve`, which extends a hold
//! of its client's that it finds on the servers) must never take over one
//! of these: it would extend the hold on a quorum and answer that it holds,
//! and the releases arriving after would end it under the caller.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How many lease lengths a given-up owner is remembered: its releases
/// are sent again for at most one ttl, and a late grant (a wait's, which
/// its task releases) leases at most one ttl from when it came.
const REMEMBERED_TTLS: u32 = 2;

/// Entries are looked through for ended ones once there are this many, and
/// then whenever their number doubled since: amortised, so that a handle
/// giving many rounds up pays no scan per round.
const FIRST_PURGE: usize = 256;

#[derive(Default)]
pub(crate) struct GivenUp {
    /// Off until a caller asks: a plain client's rounds pay one relaxed
    /// load for it.
    remembering: AtomicBool,
    owners: Mutex<Owners>,
}

#[derive(Default)]
struct Owners {
    /// Each owner, with when it may be forgotten.
    until: HashMap<String, Instant>,
    next_purge: usize,
}

impl GivenUp {
    pub(crate) fn remember(&self) {
        self.remembering.store(true, Ordering::Relaxed);
    }

    /// `owner`'s grants, leased for `ttl`, are being given up.
    pub(crate) fn note(&self, owner: &str, ttl: Duration) {
        if !self.remembering.load(Ordering::Relaxed) {
            return;
        }
        let now = Instant::now();
        let Some(until) = now.checked_add(ttl.saturating_mul(REMEMBERED_TTLS)) else { return };
        let Ok(mut owners) = self.owners.lock() else { return };
        if owners.until.len() >= owners.next_purge.max(FIRST_PURGE) {
            owners.until.retain(|_, until| *until > now);
            owners.next_purge = owners.until.len().saturating_mul(2);
        }
        let kept = owners.until.entry(owner.to_string()).or_insert(until);
        *kept = (*kept).max(until);
    }

    /// Whether `owner`'s grants were given up lately (see `REMEMBERED_TTLS`).
    /// A poisoned registry answers yes: a hold is then never taken over,
    /// which only costs its owner a wait.
    pub(crate) fn contains(&self, owner: &str) -> bool {
        match self.owners.lock() {
            Ok(owners) => owners.until.get(owner).is_some_and(|until| *until > Instant::now()),
            Err(_) => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_remembered_until_asked() {
        let g = GivenUp::default();
        g.note("a:1", Duration::from_secs(10));
        assert!(!g.contains("a:1"));
        g.remember();
        g.note("a:1", Duration::from_secs(10));
        assert!(g.contains("a:1"));
        assert!(!g.contains("a:2"), "another round's owner");
    }

    #[test]
    fn an_owner_is_forgotten_after_twice_its_ttl() {
        let g = GivenUp::default();
        g.remember();
        g.note("a:1", Duration::ZERO);
        assert!(!g.contains("a:1"), "a zero ttl leaves nothing to remember");
        g.note("a:2", Duration::from_secs(3600));
        assert!(g.contains("a:2"));
    }

    #[test]
    fn ended_entries_are_purged_as_the_registry_grows() {
        let g = GivenUp::default();
        g.remember();
        for i in 0..FIRST_PURGE * 4 {
            g.note(&format!("gone:{i}"), Duration::ZERO);
        }
        g.note("kept", Duration::from_secs(3600));
        let len = g.owners.lock().map(|o| o.until.len()).unwrap_or(0);
        assert!(len < FIRST_PURGE * 2, "ended entries were never purged: {len}");
        assert!(g.contains("kept"));
    }
}
