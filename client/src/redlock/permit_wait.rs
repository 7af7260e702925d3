//! What a waiting acquisition of permits asks (`Semaphore`) and how its
//! head round looks at every permit now and then (`looking_around`).

use std::time::Duration;

use rand::Rng;

use super::permits::Terms;
use super::{Lock, Redlock};
use crate::outcome::InstanceOutcome;
use crate::transport::Ask;

/// How often a semaphore's waiter at the head of its permits' lines,
/// while it waits on them, asks every permit once: a permit that freed up
/// while nobody was in its line is taken within this, not when the one
/// waited on frees up.
pub(super) const LOOK_AROUND: Duration = Duration::from_millis(250);

/// The semaphore a waiting acquisition of permits asks (see
/// `acquire_until`): its name, the terms it asks under (the caller's
/// limit, or the limit and largest a resized record named) and permits
/// per hold, and the owner the caller named (`Redlock::permits_as`;
/// `None`: a new one per round).
pub(super) struct Semaphore {
    pub(super) name: String,
    /// The caller's limit.
    pub(super) limit: u32,
    pub(super) terms: Terms,
    pub(super) count: u32,
    pub(super) owner: Option<String>,
    /// The least token asked (`FENCE`).
    pub(super) fence: Option<i64>,
}

impl Redlock {
    /// `head`, the round of the head of a permit's line (a semaphore's
    /// waiter, `semaphore` given), with every permit asked once each
    /// `LOOK_AROUND` meanwhile: the first granted ends the round, and the
    /// waits of `head`, dropped, leave the servers' queues (a grant that
    /// raced them is released). Without a semaphore, `head` alone.
    pub(super) async fn looking_around(
        &self,
        head: impl std::future::Future<Output = Result<Lock, Vec<InstanceOutcome>>>,
        semaphore: Option<&Semaphore>,
        ttl: Duration,
    ) -> Result<Lock, Vec<InstanceOutcome>> {
        let Some(Semaphore { name, limit, terms, count, owner, fence }) = semaphore else { return head.await };
        let around = async {
            loop {
                tokio::time::sleep(LOOK_AROUND).await;
                let named = Ask::exclusive().owner(owner.as_deref()).fence(*fence);
                let first = rand::rng().random_range(0..terms.limit.max(1));
                if let Ok(lock) = self.attempt_permit_from(name, *limit, *terms, *count, ttl, first, named).await {
                    return lock;
                }
            }
        };
        tokio::select! {
            taken = head => taken,
            lock = around => Ok(lock),
        }
    }
}
