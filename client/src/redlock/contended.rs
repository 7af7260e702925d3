//! What a handle remembers of the resources it found held: its waiting
//! acquisitions of one found held lately skip the first round (see
//! `Contended`).

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long a resource stays contended for a handle after one of its
/// waiting acquisitions found it held (`Contended`).
const CONTENDED_FOR: Duration = Duration::from_secs(1);

/// How many resources a handle remembers as contended; beyond, those whose
/// second has passed are forgotten (all of them, if none has).
const CONTENDED_MAX: usize = 1024;

/// The resources a handle's waiting acquisitions lately found held (a
/// semaphore's by its name). For `CONTENDED_FOR` after one did, the next
/// ones join the line at once, without the first round (`first_try`):
/// under contention that round is refused everywhere, ten of a grant's
/// messages for nothing, and a semaphore's round may take a permit freed
/// for a moment, ahead of the waiter its release is handing it to, so
/// that neither has a quorum (a semaphore of 2 at 16 contenders through
/// 0.25 ms one way made 1.61-1.62x the lock's grants/s with the round,
/// 1.78-1.80x without; the lock's own rate did not move). When the
/// contention ends, the acquisitions of at most that second pay one more
/// round trip: a place, then the lock. One of them each second asks first
/// again, and finds out.
#[derive(Default)]
pub(crate) struct Contended(Mutex<HashMap<String, Instant>>);

impl Contended {
    fn entries(&self) -> MutexGuard<'_, HashMap<String, Instant>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn lately(&self, resource: &str) -> bool {
        self.entries().get(resource).is_some_and(|at| at.elapsed() < CONTENDED_FOR)
    }

    pub(super) fn found_held(&self, resource: &str) {
        let now = Instant::now();
        let mut entries = self.entries();
        if let Some(at) = entries.get_mut(resource) {
            *at = now;
            return;
        }
        if entries.len() >= CONTENDED_MAX {
            entries.retain(|_, at| at.elapsed() < CONTENDED_FOR);
            if entries.len() >= CONTENDED_MAX {
                entries.clear();
            }
        }
        entries.insert(resource.to_string(), now);
    }

    pub(super) fn found_free(&self, resource: &str) {
        self.entries().remove(resource);
    }
}
