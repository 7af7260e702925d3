//! A history of holds and its checker, for every Rust test that checks
//! mutual exclusion from the clients' side (the client tests' scenarios,
//! the module's hammer). Every hold is recorded with the client, the
//! token, when the grant's reply arrived and when its release started, all
//! on one clock (this process's monotonic `Instant`). The checker counts
//! overlapping holds and token inversions in grant order. (The module's
//! lock-family history, with shared holds and limits, checks more on its
//! own: `tests/module/lock_family.rs`.)

use std::sync::{Arc, Mutex};
use std::time::Instant;

#[derive(Clone, Debug)]
pub struct Hold {
    pub client: String,
    pub token: i64,
    /// The grant's reply arrived.
    pub granted: Instant,
    /// The release started (or the holder stopped using the lock).
    pub released: Instant,
}

/// Shared by the clients of one scenario.
#[derive(Clone, Default)]
pub struct History(Arc<Mutex<Vec<Hold>>>);

impl History {
    pub fn new() -> History {
        History::default()
    }

    pub fn record(&self, client: impl Into<String>, token: i64, granted: Instant, released: Instant) {
        assert!(released >= granted, "a hold released before it was granted");
        let hold = Hold { client: client.into(), token, granted, released };
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push(hold);
    }

    pub fn holds(&self) -> Vec<Hold> {
        let mut holds = self.0.lock().unwrap_or_else(|p| p.into_inner()).clone();
        holds.sort_by_key(|h| h.granted);
        holds
    }

    pub fn check(&self) -> Verdict {
        check(&self.holds())
    }
}

/// What the checker found.
#[derive(Debug, Default)]
pub struct Verdict {
    pub grants: usize,
    /// Pairs (earlier, later) where the later was granted before the
    /// earlier's release started.
    pub overlaps: Vec<(Hold, Hold)>,
    /// Consecutive grants whose token did not increase.
    pub inversions: Vec<(Hold, Hold)>,
}

impl Verdict {
    pub fn assert_exclusive(&self, scenario: &str) {
        assert!(self.grants > 0, "{scenario}: no grants at all");
        self.assert_exclusive_if_any(scenario);
    }

    /// As `assert_exclusive`, where no grant at all is a possible outcome.
    pub fn assert_exclusive_if_any(&self, scenario: &str) {
        assert!(self.overlaps.is_empty(), "{scenario}: {} overlapping holds, first {:?}", self.overlaps.len(), self.overlaps[0]);
        assert!(self.inversions.is_empty(), "{scenario}: token order broken: {:?}", self.inversions[0]);
    }
}

/// Holds sorted by grant time: each is checked against the hold released
/// last among those granted before it (so one long hold overlapping many
/// later ones counts once per later one).
pub fn check(holds: &[Hold]) -> Verdict {
    let mut sorted = holds.to_vec();
    sorted.sort_by_key(|h| h.granted);
    let mut v = Verdict { grants: sorted.len(), ..Verdict::default() };
    let mut latest: Option<&Hold> = None;
    for (i, h) in sorted.iter().enumerate() {
        if let Some(prev) = latest {
            if h.granted < prev.released {
                v.overlaps.push((prev.clone(), h.clone()));
            }
        }
        if i > 0 && sorted[i - 1].token >= h.token {
            v.inversions.push((sorted[i - 1].clone(), h.clone()));
        }
        if latest.is_none_or(|p| h.released > p.released) {
            latest = Some(h);
        }
    }
    v
}
