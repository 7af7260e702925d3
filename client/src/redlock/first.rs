//! The first round of a waiting acquisition (`acquire_until`): the lock
//! asked for and, in the same round trip, a look at its line, so that an
//! uncontended grant takes no place in line and a newcomer never overtakes
//! those already waiting.

use super::line::{line_instance, FirstTry};
use super::permit_wait::Semaphore;
use super::*;

impl Redlock {
    /// The first round of a waiting acquisition: a plain round on the lock,
    /// and in the same round trip a look at `resource`'s line (whether its
    /// place is held: someone is first in line; for a set, in any member's
    /// line). Taking no place here keeps the line instance's token counter
    /// in step with the others, so an uncontended grant needs no
    /// write-back round. A lock taken while someone is in line is given
    /// back at once: it was free on the servers only between two holders
    /// of the line, and a newcomer must not overtake them.
    pub(super) async fn first_try(&self, resource: &Resources, kind: Kind, ttl: Duration, ask: Ask<'_>) -> FirstTry {
        self.first_round(resource, kind, self.attempt(resource, ttl, ask)).await
    }

    /// `first_try` for permits: the round over the permits
    /// (`attempt_permit`, from permit `first` on) and a look at the line of
    /// the first permits it asks, `slots`. Permits granted further on are
    /// kept: their line was not looked at, and is empty but for a moment
    /// (its head waits on them in the servers' queues).
    pub(super) async fn first_permit(&self, semaphore: &Semaphore, slots: &Resources, ttl: Duration, first: u32) -> FirstTry {
        let Semaphore { name, limit, terms, count, owner, fence } = semaphore;
        let named = Ask::exclusive().owner(owner.as_deref()).fence(*fence);
        self.first_round(slots, Kind::Exclusive, self.attempt_permit_from(name, *limit, *terms, *count, ttl, first, named)).await
    }

    /// The first round: `attempt` and, at once, a look at `resource`'s line
    /// (see `first_try`).
    async fn first_round(
        &self,
        resource: &Resources,
        kind: Kind,
        attempt: impl std::future::Future<Output = Result<Lock, Vec<InstanceOutcome>>>,
    ) -> FirstTry {
        let look = resource.names().iter().map(|name| async move {
            let instance = self.inner.instances.get(line_instance(name, &self.inner.line_order))?;
            instance.exists(&kind.line_key(name)).await
        });
        let (in_line, taken) = futures::join!(join_all(look), attempt);
        let someone_in_line = in_line.contains(&Some(true));
        match (someone_in_line, taken) {
            // By name: a permit hold's lock is named after its slots, and
            // holds its limit record too.
            (true, Ok(lock)) if lock.resource == resource.to_string() => {
                // Nothing to report: the release reaches every instance
                // or runs out with the ttl.
                let _ = self.release_on_servers(&lock).await;
                FirstTry::Behind
            }
            (true, Err(_)) => FirstTry::Behind,
            // Nobody in line (or another line's permits); or the line
            // instance cannot tell, when a lock taken stands as a plain
            // round's would (the line's fallback).
            (_, Ok(lock)) => FirstTry::Lock(lock),
            (false, Err(_)) => FirstTry::Again,
        }
    }
}
