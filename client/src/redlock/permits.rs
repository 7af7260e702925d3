//! The keys of a quorum semaphore's permits and what one hold of them
//! takes: below both the waiting line (`line`, which waits in the
//! permits' lines) and the semaphore (`crate::semaphore`, which asks for
//! them), so that the line never calls up into the semaphore. Why a permit
//! is a lock of its own and what the limit record is: see the semaphore's
//! module doc.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::Lock;
use crate::outcome::{InstanceOutcome, Outcome};
use crate::resources::Resources;
use crate::settings::Mode;
use crate::transport::{semaphore_terms, Ask, Share};

/// The most permits one semaphore may have: each is a key on every
/// instance and, when all are taken, a quorum round per attempt.
pub const MAX_PERMITS: u32 = 1024;

/// The key of permit `slot` of semaphore `resource`.
pub fn permit_key(resource: &str, slot: u32) -> String {
    format!("{resource}:permit:{slot}")
}

/// The key of semaphore `resource`'s limit record (see the semaphore's
/// module doc).
pub fn limit_key(resource: &str) -> String {
    format!("{resource}:permits")
}

/// The `count` consecutive permits of `resource` from permit `first` on
/// (wrapping at `limit`), the keys whose lines a hold of them waits in.
pub(crate) fn permit_set(resource: &str, limit: u32, count: u32, first: u32) -> Result<Resources, String> {
    let limit = limit.max(1);
    let slots: Vec<String> = (0..count).map(|k| permit_key(resource, first.wrapping_add(k) % limit)).collect();
    Resources::of(&slots)
}

/// How many times one acquisition asks again under terms a refusal named:
/// a resize or two while it asks; more means the records disagree (a
/// resize that reached some servers only), and it goes on under the terms
/// it learned last (an attempt ends not granted).
pub(crate) const MAX_TERMS_LEARNED: u32 = 3;

/// The limit a request for permits asks under: the limit in force and the
/// largest limit in force since the semaphore's record was created (equal
/// until a resize shrank it). Every module-mode request names both, and a
/// record whose own differ refuses it, naming them (see the semaphore's
/// module doc, "Resizing").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Terms {
    pub limit: u32,
    pub largest: u32,
}

impl Terms {
    /// A semaphore never resized (what a caller's limit means).
    pub(crate) fn of(limit: u32) -> Terms {
        Terms { limit, largest: limit }
    }

    /// The terms most of the servers that refused a round under `self`
    /// named (`LIMIT K M`), when they are not `self` and more servers
    /// named them than answered under `self` (granted, or held by
    /// another): the ones to ask under next. A server whose record missed
    /// a resize (paused, or cut off, while it was made) names the old
    /// terms alone: learning from it would flip every client to terms the
    /// others refuse, and back, round after round.
    pub(crate) fn learned(self, outcomes: &[InstanceOutcome]) -> Option<Terms> {
        let agreeing = outcomes.iter().filter(|o| matches!(o.outcome, Outcome::Granted { .. } | Outcome::Refused)).count();
        let mut named: Vec<(Terms, usize)> = Vec::new();
        for (limit, largest) in outcomes.iter().filter_map(|o| semaphore_terms(&o.outcome)) {
            let terms = Terms { limit, largest };
            match named.iter_mut().find(|(t, _)| *t == terms) {
                Some((_, n)) => *n += 1,
                None => named.push((terms, 1)),
            }
        }
        // The most named; between as many, the larger largest (more slots
        // asked shared: the safe side).
        let (terms, n) = named.into_iter().max_by_key(|&(t, n)| (n, t.largest, t.limit))?;
        (terms != self && n > agreeing).then_some(terms)
    }
}

/// How many semaphores a handle remembers learned terms of; beyond, those
/// whose time has passed are forgotten (all of them, if none has).
const LEARNED_MAX: usize = 1024;

/// The terms a handle's acquisitions of each semaphore learned from
/// refusals, kept while they are used: the next acquisition asks under
/// them at once instead of under its caller's limit and learning again
/// (a round, and a place in line given up, each time). An entry is for
/// the limit its caller asked under, lasts twice the ttl of the last hold
/// granted or refused under it, and goes when a hold is granted under the
/// caller's own limit: so a resize is kept by the clients that use the
/// semaphore while they use it (their requests make its records anew
/// under the learned terms), and forgotten once they stopped for a while.
#[derive(Default)]
pub(crate) struct LearnedTerms(Mutex<HashMap<String, Learned>>);

struct Learned {
    /// The limit the acquisitions that learned it asked under.
    asked: u32,
    terms: Terms,
    until: Instant,
}

impl LearnedTerms {
    fn entries(&self) -> MutexGuard<'_, HashMap<String, Learned>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The terms to ask `resource`'s permits under for a caller asking
    /// under `limit`.
    pub(crate) fn start(&self, resource: &str, limit: u32) -> Terms {
        match self.entries().get(resource) {
            Some(l) if l.asked == limit && l.until > Instant::now() => l.terms,
            _ => Terms::of(limit),
        }
    }

    /// A round under `terms` came to an end (`granted` or refused naming
    /// them) for a caller asking under `limit`, its holds leased `ttl`.
    pub(crate) fn used(&self, resource: &str, limit: u32, terms: Terms, ttl: Duration) {
        let mut entries = self.entries();
        if terms == Terms::of(limit) {
            entries.remove(resource);
            return;
        }
        let now = Instant::now();
        let Some(until) = now.checked_add(ttl.saturating_mul(2)) else { return };
        if entries.len() >= LEARNED_MAX && !entries.contains_key(resource) {
            entries.retain(|_, l| l.until > now);
            if entries.len() >= LEARNED_MAX {
                entries.clear();
            }
        }
        entries.insert(resource.to_string(), Learned { asked: limit, terms, until });
    }
}

/// What one hold of permits takes: its slots (`slots`, see `permit_set`)
/// and, in module mode, the slots from the limit to the largest (shared:
/// while a holder granted under a larger limit sits on one of them,
/// nothing is granted) and the semaphore's limit record, the last key (see
/// the semaphore's module doc); and how it asks for them.
pub(crate) struct PermitHold {
    pub keys: Resources,
    pub ask: Ask<'static>,
}

impl PermitHold {
    pub(crate) fn of(slots: &Resources, resource: &str, terms: Terms, mode: Mode) -> Result<PermitHold, String> {
        if mode == Mode::Script {
            return Ok(PermitHold { keys: slots.clone(), ask: Ask::exclusive() });
        }
        let Terms { limit, largest } = terms;
        let mut keys = slots.names().to_vec();
        keys.extend((limit..largest).map(|slot| permit_key(resource, slot)));
        keys.push(limit_key(resource));
        Ok(PermitHold { keys: Resources::of(&keys)?, ask: Ask::new(Share::Slots { limit, largest }) })
    }
}

/// A permit hold's lock, named after its slots (`REDLOCK_PERMIT`, what the
/// CLI prints), not its limit record.
pub(crate) fn named_after(mut lock: Lock, slots: &Resources) -> Lock {
    lock.resource = slots.to_string();
    lock
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answered(outcomes: &[Outcome]) -> Vec<InstanceOutcome> {
        let answer = |(i, outcome): (usize, &Outcome)| InstanceOutcome {
            server: format!("s{i}"),
            outcome: outcome.clone(),
            latency: Duration::ZERO,
            connection: None,
        };
        outcomes.iter().enumerate().map(answer).collect()
    }

    fn limit(k: u32, m: u32) -> Outcome {
        Outcome::Failed(format!("LIMIT {k} {m} semaphore resized: ask with SEMAPHORE {k} LARGEST {m}"))
    }

    #[test]
    fn terms_are_learned_from_more_servers_than_answered_under_the_asked_ones() {
        let asked = Terms { limit: 3, largest: 4 };
        let held = Outcome::Refused;
        let granted = Outcome::Granted { token: Some(7) };
        // Every server resized: learned.
        assert_eq!(asked.learned(&answered(&[limit(2, 4), limit(2, 4), limit(2, 4)])), Some(Terms { limit: 2, largest: 4 }));
        // Three name them, two answer under ours.
        let three = [limit(2, 4), limit(2, 4), limit(2, 4), held.clone(), granted.clone()];
        assert_eq!(asked.learned(&answered(&three)), Some(Terms { limit: 2, largest: 4 }));
        // One server that missed a resize names the old terms alone: kept.
        let stale = [limit(2, 4), held.clone(), held.clone(), granted.clone(), Outcome::Timeout];
        assert_eq!(asked.learned(&answered(&stale)), None);
        // As many naming them as answering under ours: kept.
        let even = [limit(2, 4), limit(2, 4), held.clone(), granted, Outcome::Timeout];
        assert_eq!(asked.learned(&answered(&even)), None);
        // Our own terms named back teach nothing.
        assert_eq!(asked.learned(&answered(&[limit(3, 4), limit(3, 4), limit(3, 4)])), None);
        // Between two named as often, the larger largest.
        let split = [limit(2, 4), limit(2, 5), Outcome::Timeout];
        assert_eq!(asked.learned(&answered(&split)), Some(Terms { limit: 2, largest: 5 }));
    }
}
