//! A counting semaphore across the quorum: `limit` permits, each one a
//! slot lock (`<resource>:permit:<i>`) that a client takes on a majority
//! exactly like the mutex.
//!
//! Counting holders per instance and asking a majority of instances is not
//! enough: with limit 2 on five instances, A can hold on {1,2,3}, B on
//! {3,4,5} and C on {1,2,4}; no instance sees more than two holders, and
//! three clients hold. With one lock per permit, two holders of the same
//! permit would need two majorities that do not intersect, which do not
//! exist; so at most `limit` clients hold, and, like the mutex, permits
//! are granted with any minority of instances down. The cost is up to
//! `limit` quorum rounds when the first permits tried are taken; each
//! client starts at a random permit to spread them.
//!
//! A permit is an ordinary [`Lock`] whose resource is its slot key:
//! extend, release, guards and reentrancy work on it unchanged, and its
//! fencing token orders it among that permit's holders.
//!
//! One limit per semaphore: in module mode every hold also takes, in the
//! same all-or-nothing grant on each server, a permit of the semaphore's
//! limit record `<resource>:permits`, a module semaphore of `limit`
//! (`LOCK.MACQUIRE ... SEMAPHORE limit`). A server where a hold of limit
//! L runs refuses a request of limit M != L as one server's semaphore
//! does (`ERR wrong lock kind`), so two holds of different limits never
//! both hold a majority: the majorities share a server, which refuses one.
//! The record never holds back a hold of its own limit: each hold takes at
//! least one of the `limit` slots alone, so at most `limit` hold it. The
//! record travels with the hold's keys (extended and released with them)
//! but is no line to wait in. Script mode has no record, and so no check
//! of the limit.
//!
//! Resizing: `resize` sets the limit record's limit on every server
//! (`LOCK.RESIZE`); the record also keeps the largest limit in force since
//! it was created. Every request names both (`SEMAPHORE K LARGEST M`), and
//! takes its permits below K exclusively and every permit from K to M-1
//! shared: a record whose terms differ refuses it, naming its own, and the
//! request is asked again under them (`Terms::learned`); a holder granted
//! under a larger limit on a permit at or above K refuses every new
//! request until it leaves. So a holder sits on each permit below K at
//! most, nothing is granted while one sits above K, and a client that has
//! not learned the new limit is refused, not let in. The handle keeps the
//! terms it learned while it uses the semaphore (`LearnedTerms`: twice the
//! ttl after its last use); once nobody holds the semaphore its records
//! are gone, and its limit is the one the next request names, as on one
//! server (docs/design-control.md, "Resize a semaphore while held").

use std::time::{Duration, Instant};

use futures::future::join_all;
use rand::Rng;

use crate::error::Error;
use crate::guard::LockGuard;
use crate::outcome::{InstanceOutcome, Outcome};
use crate::quorum::{self, NotGranted};
use crate::redlock::permits::{named_after, permit_set, PermitHold, Terms, MAX_TERMS_LEARNED};
use crate::redlock::{Lock, Redlock, Released};
use crate::resources::Resources;
use crate::settings::Mode;
use crate::transport::{Ask, Share};

// The permits' keys sit below the quorum (the waiting line needs them
// too); named here as well, where callers have always found them.
pub use crate::redlock::permits::{limit_key, permit_key, MAX_PERMITS};

/// What a resize came to.
#[derive(Clone, Debug)]
pub struct Resized {
    /// A quorum resized it; false when a quorum answered that nobody holds
    /// the semaphore (nothing to resize: its next holder's limit is the
    /// one it asks).
    pub held: bool,
    /// The servers that resized it.
    pub resized: usize,
    /// Each server's answer: `Done` (resized), `Refused` (nobody holds it
    /// there), or why it did not.
    pub instances: Vec<InstanceOutcome>,
}

impl Redlock {
    /// One attempt at each of the `limit` permits of `resource`, from a
    /// random one on; the first one granted is returned.
    pub async fn try_permit(&self, resource: &str, limit: u32, ttl: Duration) -> Result<Lock, Error> {
        self.try_permits(resource, limit, 1, ttl).await
    }

    /// One attempt at `count` of the `limit` permits of `resource` at once
    /// (see `permits_until`).
    pub async fn try_permits(&self, resource: &str, limit: u32, count: u32, ttl: Duration) -> Result<Lock, Error> {
        Self::check_limit(limit, count)?;
        self.counted(&Resources::one(resource), Share::Permits(limit, count), None, async {
            self.verify_servers().await?;
            self.attempt_permit(resource, limit, count, ttl, Ask::exclusive())
                .await
                .map_err(|outcomes| self.not_acquired(resource, limit, outcomes))
        })
        .await
    }

    /// `count` of the `limit` permits of `resource` held by `owner`, the
    /// name the caller gives its hold (as the module's `LOCK.ACQUIRE key
    /// owner ttl SHARED LIMIT n PERMITS k [FENCE min]`): with a deadline
    /// waited for in line until then (see `permits_until`), else one round
    /// over the permits (see `try_permits`). Each round holds under
    /// `owner`, `:` and 16 random hex digits of its own, as for `lock_as`,
    /// and for the same reasons; `fence`, the least token of every round
    /// (each permit's and the limit record's, as `Ask::fence`).
    #[allow(clippy::too_many_arguments)] // the module's LOCK.ACQUIRE, one argument each
    pub async fn permits_as(
        &self,
        resource: &str,
        owner: &str,
        limit: u32,
        count: u32,
        ttl: Duration,
        fence: Option<i64>,
        deadline: Option<Instant>,
    ) -> Result<Lock, Error> {
        Self::check_limit(limit, count)?;
        let ask = Ask::new(Share::Permits(limit, count)).owner(Some(owner)).fence(fence);
        match deadline {
            Some(_) => self.acquire_until(&Resources::one(resource), ttl, deadline, ask, |_| {}).await,
            None => {
                self.counted(&Resources::one(resource), Share::Permits(limit, count), None, async {
                    self.verify_servers().await?;
                    self.attempt_permit(resource, limit, count, ttl, ask)
                        .await
                        .map_err(|outcomes| self.not_acquired(resource, limit, outcomes))
                })
                .await
            }
        }
    }

    /// One round over the permits: `count` consecutive permits (from `i`
    /// to `i + count - 1`, wrapping) asked as one set, for each `i` from a
    /// random one on, until a set is granted. `Err` with the outcomes of
    /// the last set asked (or of the first refused as a request, which
    /// every set would be). Of `named`, only its `owner` (the name each
    /// set's owner is made from, `permits_as`; `None`, a new random one
    /// per set) and its `fence` (the least token) count: the share is the
    /// permits'.
    pub(crate) async fn attempt_permit(
        &self,
        resource: &str,
        limit: u32,
        count: u32,
        ttl: Duration,
        named: Ask<'_>,
    ) -> Result<Lock, Vec<InstanceOutcome>> {
        let terms = self.inner.learned_terms.start(resource, limit);
        let first = rand::rng().random_range(0..terms.limit.max(1));
        self.attempt_permit_from(resource, limit, terms, count, ttl, first, named).await
    }

    /// `attempt_permit` for a caller asking under `limit`, starting at
    /// permit `first`, asked under `terms` first; a round refused by
    /// records resized to other terms (`LIMIT K M`) is asked again at once
    /// under the terms most of them name, at most `MAX_TERMS_LEARNED`
    /// times, and the handle remembers them (see "Resizing" above).
    #[allow(clippy::too_many_arguments)] // attempt_permit's, and where it starts
    pub(crate) async fn attempt_permit_from(
        &self,
        resource: &str,
        limit: u32,
        mut terms: Terms,
        count: u32,
        ttl: Duration,
        first: u32,
        named: Ask<'_>,
    ) -> Result<Lock, Vec<InstanceOutcome>> {
        let mut learned = 0;
        let mut first = first;
        loop {
            match self.attempt_permit_under(resource, terms, count, ttl, first, named).await {
                Ok(lock) => {
                    self.inner.learned_terms.used(resource, limit, terms, ttl);
                    return Ok(lock);
                }
                Err(outcomes) => match terms.learned(&outcomes) {
                    Some(next) if learned < MAX_TERMS_LEARNED && count <= next.limit => {
                        learned += 1;
                        terms = next;
                        self.inner.learned_terms.used(resource, limit, terms, ttl);
                        first = rand::rng().random_range(0..terms.limit.max(1));
                    }
                    _ => return Err(outcomes),
                },
            }
        }
    }

    /// One round over the permits under `terms`: `count` consecutive
    /// permits below the limit in force, from `first` on (wrapping), each
    /// set asked with the slots from the limit to the largest (shared) and
    /// the limit record.
    pub(crate) async fn attempt_permit_under(
        &self,
        resource: &str,
        terms: Terms,
        count: u32,
        ttl: Duration,
        first: u32,
        named: Ask<'_>,
    ) -> Result<Lock, Vec<InstanceOutcome>> {
        let limit = terms.limit;
        let mut last = Vec::new();
        for i in 0..limit {
            let Ok(slots) = permit_set(resource, limit, count, first.wrapping_add(i)) else { break };
            let Ok(hold) = PermitHold::of(&slots, resource, terms, self.inner.settings.mode) else { break };
            match self.attempt(&hold.keys, ttl, hold.ask.owner(named.owner).fence(named.fence)).await {
                Ok(lock) => return Ok(named_after(lock, &slots)),
                Err(outcomes) => {
                    let rejected = matches!(quorum::not_granted(&outcomes, self.quorum()), NotGranted::Rejected { .. });
                    // Refused under other terms: every set would be.
                    let other_terms = terms.learned(&outcomes).is_some();
                    last = outcomes;
                    if rejected || other_terms {
                        break;
                    }
                }
            }
        }
        Err(last)
    }

    /// Gives the held semaphore `resource` the limit `limit` on every
    /// server (`LOCK.RESIZE` of its limit record): its holders keep their
    /// permits; a larger limit lets waiters in at once, a smaller one lets
    /// nobody in until no holder sits on a permit at or above it (see
    /// "Resizing" above). Ok once a quorum of servers resized it;
    /// `Resized::held` false when a quorum answered that nobody holds it
    /// (a semaphore nobody holds has no limit but the one each request
    /// names). An error when fewer than a quorum answered either way.
    pub async fn resize(&self, resource: &str, limit: u32) -> Result<Resized, Error> {
        Self::check_limit(limit, 1)?;
        if self.inner.settings.mode == Mode::Script {
            return Err(Error::Config("resizing a semaphore needs the redislock module (script mode has none)".into()));
        }
        self.verify_servers().await?;
        let record = limit_key(resource);
        let answers = self.answers_everywhere("resize", |instance| instance.resize(&record, limit)).await;
        let resized = answers.iter().filter(|(_, r)| matches!(r, Some(Some(_)))).count();
        let free = answers.iter().filter(|(_, r)| matches!(r, Some(None))).count();
        // Answered nil: nobody holds it there.
        let instances: Vec<InstanceOutcome> = answers
            .into_iter()
            .map(|(o, r)| match r {
                Some(None) => InstanceOutcome { outcome: Outcome::Refused, ..o },
                _ => o,
            })
            .collect();
        if let Some(e) = self.server_repeated(&instances) {
            return Err(e);
        }
        match (resized >= self.quorum(), free >= self.quorum()) {
            (true, _) => Ok(Resized { held: true, resized, instances }),
            (false, true) => Ok(Resized { held: false, resized, instances }),
            (false, false) => match quorum::rejections(&instances) {
                Some((rejection, n)) if n + resized >= self.quorum() => {
                    Err(Error::Rejected { resource: resource.to_string(), what: "resize", rejection, outcomes: instances })
                }
                _ => Err(Error::NoQuorum { resource: resource.to_string(), what: "resize", outcomes: instances }),
            },
        }
    }

    fn check_limit(limit: u32, count: u32) -> Result<(), Error> {
        if limit == 0 || limit > MAX_PERMITS {
            return Err(Error::Config(format!("a semaphore's limit must be 1 to {MAX_PERMITS}, not {limit}")));
        }
        if count == 0 || count > limit {
            return Err(Error::Config(format!("permits taken at once must be 1 to the limit ({limit}), not {count}")));
        }
        Ok(())
    }

    /// Takes a permit of `resource`, retrying until one is granted, the
    /// retries are used up or (with `deadline`) the deadline passes. With
    /// a deadline (module mode), a request that finds no permit free keeps
    /// a place for its whole wait in the line of one permit (from a random
    /// one on), and at its head waits on that permit in the servers' own
    /// queues: its holder's release hands it over there, as a lock's does,
    /// and each permit's waiters are served in arrival order. Meanwhile it
    /// asks every permit now and then (every 250 ms), so one that frees up
    /// with nobody in its line does not stay idle.
    pub async fn permit_until(&self, resource: &str, limit: u32, ttl: Duration, deadline: Option<Instant>) -> Result<Lock, Error> {
        self.permits_until(resource, limit, 1, ttl, deadline).await
    }

    /// `count` of the `limit` permits of `resource` in one hold (one
    /// owner, one token, one lease), retried as `permit_until`: `count`
    /// permit slots taken whole as a set, each on a majority, so the
    /// permits held never exceed `limit`. Waiting, the request stands in
    /// the line of each of its `count` permits (consecutive from a random
    /// one) and at their heads waits on all of them at once: a later
    /// request for any of those permits waits behind it, never passing it;
    /// one for other permits may be served first.
    pub async fn permits_until(
        &self,
        resource: &str,
        limit: u32,
        count: u32,
        ttl: Duration,
        deadline: Option<Instant>,
    ) -> Result<Lock, Error> {
        Self::check_limit(limit, count)?;
        self.acquire_until(&Resources::one(resource), ttl, deadline, Ask::new(Share::Permits(limit, count)), |_| {}).await
    }

    /// A permit of `resource` (as `permit_until`) kept by a guard that
    /// extends it and signals its loss, like `Redlock::guard`.
    pub async fn guard_permit(&self, resource: &str, limit: u32, ttl: Duration, deadline: Option<Instant>) -> Result<LockGuard, Error> {
        let permit = self.permit_until(resource, limit, ttl, deadline).await?;
        Ok(self.keep(permit))
    }

    /// Releases whichever permit of `resource` `owner` holds, for a permit
    /// taken elsewhere (`redlock acquire --limit N` printed its owner).
    /// Owners are random per acquisition, so the permits `owner` holds are
    /// those of one acquisition (one, or `count` of `try_permits`);
    /// releasing on every permit at once costs one round trip, and a
    /// permit `owner` does not hold is left as it is (the servers check the
    /// owner). The hold's permit of the limit record goes with them (module
    /// mode). Returns the keys of the permits any server held (joined with
    /// `", "`), with every server's outcome at the first of them.
    pub async fn release_permit(&self, resource: &str, limit: u32, owner: &str) -> Result<(Option<String>, Released), Error> {
        Self::check_limit(limit, 1)?;
        let keys: Vec<String> = (0..limit).map(|slot| permit_key(resource, slot)).collect();
        let record = async {
            if self.inner.settings.mode == Mode::Module {
                // Its outcome says nothing the slots' do not.
                let _ = self.release_owner(&limit_key(resource), owner).await;
            }
        };
        let (all, ()) = futures::join!(join_all(keys.iter().map(|key| self.release_owner(key, owner))), record);
        let (mut held, mut first, mut last) = (Vec::new(), None, None);
        for (key, released) in keys.into_iter().zip(all) {
            let released = released?;
            if released.released > 0 {
                held.push(key);
                first.get_or_insert(released);
            } else {
                last = Some(released);
            }
        }
        match first {
            Some(released) => Ok((Some(held.join(", ")), released)),
            None => Ok((None, last.unwrap_or(Released { released: 0, remaining_holds: 0, instances: Vec::new() }))),
        }
    }

    /// Extends whichever permits of `resource` `owner` holds to `ttl` from
    /// now on a quorum (see `release_permit`), with its permit of the limit
    /// record (module mode); the lock returned is the first one's, named
    /// after every permit extended. When none is extended, the error is
    /// that of the permit extended on the most servers.
    pub async fn extend_permit(&self, resource: &str, limit: u32, owner: &str, ttl: Duration) -> Result<Lock, Error> {
        Self::check_limit(limit, 1)?;
        let keys: Vec<String> = (0..limit).map(|slot| permit_key(resource, slot)).collect();
        let record = async {
            if self.inner.settings.mode == Mode::Module {
                // The slots' outcomes tell whether the hold was kept.
                let _ = self.extend_owner(&limit_key(resource), owner, ttl).await;
            }
        };
        let (all, ()) = futures::join!(join_all(keys.iter().map(|key| self.extend_owner(key, owner, ttl))), record);
        let mut best: Option<(usize, Error)> = None;
        let mut extended: Vec<Lock> = Vec::new();
        for result in all {
            let e = match result {
                Ok(lock) => {
                    extended.push(lock);
                    continue;
                }
                Err(e) => e,
            };
            let done = match &e {
                Error::QuorumLost { outcomes, .. } => outcomes.iter().filter(|o| o.outcome == Outcome::Done).count(),
                _ => 0,
            };
            if best.as_ref().is_none_or(|(most, _)| done > *most) {
                best = Some((done, e));
            }
        }
        if let Some(first) = extended.first() {
            let mut lock = first.clone();
            let keys: Vec<&str> = extended.iter().map(|l| l.resource.as_str()).collect();
            if let Ok(set) = Resources::of(&keys) {
                lock.resource = set.to_string();
                lock.resources = set;
            }
            return Ok(lock);
        }
        match best {
            // Held nowhere: the error names the semaphore, not permit 0.
            Some((0, Error::QuorumLost { outcomes, .. })) => Err(Error::QuorumLost { resource: resource.to_string(), outcomes }),
            Some((_, e)) => Err(e),
            None => Err(Error::Config("no permit to extend".to_string())),
        }
    }
}
