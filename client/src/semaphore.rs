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

use std::time::{Duration, Instant};

use futures::future::join_all;
use rand::Rng;

use crate::error::Error;
use crate::guard::LockGuard;
use crate::outcome::{InstanceOutcome, Outcome};
use crate::quorum::{self, NotGranted};
use crate::redlock::permits::{named_after, permit_set, PermitHold};
use crate::redlock::{Lock, Redlock, Released};
use crate::resources::Resources;
use crate::settings::Mode;
use crate::transport::{Ask, Share};

// The permits' keys sit below the quorum (the waiting line needs them
// too); named here as well, where callers have always found them.
pub use crate::redlock::permits::{limit_key, permit_key, MAX_PERMITS};

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
        let first = rand::rng().random_range(0..limit.max(1));
        self.attempt_permit_from(resource, limit, count, ttl, first, named).await
    }

    /// `attempt_permit`, starting at permit `first`.
    pub(crate) async fn attempt_permit_from(
        &self,
        resource: &str,
        limit: u32,
        count: u32,
        ttl: Duration,
        first: u32,
        named: Ask<'_>,
    ) -> Result<Lock, Vec<InstanceOutcome>> {
        let mut last = Vec::new();
        for i in 0..limit {
            let Ok(slots) = permit_set(resource, limit, count, first.wrapping_add(i)) else { break };
            let Ok(hold) = PermitHold::of(&slots, resource, limit, self.inner.settings.mode) else { break };
            match self.attempt(&hold.keys, ttl, hold.ask.owner(named.owner).fence(named.fence)).await {
                Ok(lock) => return Ok(named_after(lock, &slots)),
                Err(outcomes) => {
                    let rejected = matches!(quorum::not_granted(&outcomes, self.quorum()), NotGranted::Rejected { .. });
                    last = outcomes;
                    if rejected {
                        break;
                    }
                }
            }
        }
        Err(last)
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
