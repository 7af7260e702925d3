//! Extending and releasing a lock on every instance; a release that did
//! not reach an instance is sent again while its lease could stand.

use super::*;

/// A release that did not reach an instance is sent again after this
/// pause, doubled each time up to `RELEASE_RETRY_LAST` (`release_later`).
const RELEASE_RETRY_FIRST: Duration = Duration::from_millis(20);
const RELEASE_RETRY_LAST: Duration = Duration::from_millis(250);

impl Redlock {
    /// Releases on every instance, including those that did not answer.
    pub(super) async fn release_everywhere(&self, resource: &Resources, owner: &str) -> Vec<InstanceOutcome> {
        join_all(self.inner.instances.iter().map(|i| i.release(resource, owner).traced(traces::call(&i.name, "release")))).await
    }

    /// Makes the lease `ttl` from now on a quorum, within the validity
    /// left; returns the lock with its new validity.
    pub async fn extend(&self, lock: &Lock, ttl: Duration) -> Result<Lock, Error> {
        let extended = self.extend_uncounted(lock, ttl).traced(traces::keeping(&lock.resources, false)).await;
        self.inner.metrics.extended(extended.is_ok());
        extended
    }

    async fn extend_uncounted(&self, lock: &Lock, ttl: Duration) -> Result<Lock, Error> {
        if lock.remaining().is_zero() {
            return Err(Error::Expired { resource: lock.resource.clone() });
        }
        self.verify_servers().await?;
        let started = Instant::now();
        // A hold bound to its connection is extended on that connection only
        // (see `Settings::release_on_disconnect`).
        let bound = |i: usize| lock.instances.get(i).and_then(|o| o.connection);
        let outcomes = join_all(self.inner.instances.iter().enumerate().map(|(i, inst)| {
            inst.extend_bound((&lock.resources).into(), &lock.owner, ttl, bound(i)).traced(traces::call(&inst.name, "extend"))
        }))
        .await;
        let extended = outcomes.iter().filter(|o| o.outcome == Outcome::Done).count();
        traces::kept(extended);
        let drift = quorum::drift(ttl, self.inner.settings.drift_factor);
        let elapsed = started.elapsed();
        let validity = quorum::session_validity(quorum::validity(ttl, elapsed, drift), lock.session_window, elapsed);
        if let Some(e) = repeated_server(&outcomes, self.insecure()) {
            return Err(e);
        }
        match validity {
            Some(validity) if extended >= self.inner.quorum && !lock.remaining().is_zero() => {
                if let (Some(held), Some(end)) = (&lock.held, started.checked_add(validity)) {
                    held.valid_until(end);
                }
                Ok(Lock { validity, acquired_at: started, ttl, instances: outcomes, ..lock.clone() })
            }
            _ => match quorum::rejections(&outcomes) {
                // The request was refused, not the lock: its lease is as it was.
                Some((rejection, n)) if extended < self.inner.quorum && extended + n >= self.inner.quorum => {
                    Err(Error::Rejected { resource: lock.resource.clone(), what: "extension", rejection, outcomes })
                }
                _ => Err(Error::QuorumLost { resource: lock.resource.clone(), outcomes }),
            },
        }
    }

    /// Drops one hold of `lock`; the last one (see `Lock::reenter`)
    /// releases it on every instance.
    pub async fn release(&self, lock: &Lock) -> Result<Released, Error> {
        let remaining_holds = lock.drop_hold();
        if remaining_holds > 0 {
            return Ok(Released { released: 0, remaining_holds, instances: Vec::new() });
        }
        self.release_on_servers(lock).await
    }

    /// Releases `lock` on every instance, whatever its holds.
    pub(crate) async fn release_on_servers(&self, lock: &Lock) -> Result<Released, Error> {
        lock.ended.store(true, Ordering::SeqCst);
        if let Some(held) = &lock.held {
            held.end();
        }
        self.release_owner_within(&lock.resources, &lock.owner, Some(lock.ttl)).await
    }

    /// Sends the release of `owner`'s hold of `keys` again, in the
    /// background, to every instance of `sent` (index, outcome of the
    /// release) that it did not reach (timed out, unreachable: a reset or
    /// a link that went down), until it lands there or the lease it may
    /// still hold there (at most `ttl` from now) has run out. Otherwise a
    /// lock whose release was lost in a blip stays held for its whole ttl,
    /// and every waiter waits that long. Owner-checked and never taking
    /// anything, a late release can only end this very hold: each lock has
    /// an owner of its own. Outside a runtime, the lease ends it.
    pub(super) fn release_later(&self, keys: &[String], owner: &str, ttl: Duration, sent: Vec<(usize, Outcome)>) {
        let mut pending: Vec<usize> =
            sent.into_iter().filter(|(_, o)| matches!(o, Outcome::Timeout | Outcome::Unreachable { .. })).map(|(i, _)| i).collect();
        if pending.is_empty() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let (me, keys, owner) = (self.clone(), keys.to_vec(), owner.to_string());
        let until = Instant::now() + ttl;
        runtime.spawn(async move {
            let mut pause = RELEASE_RETRY_FIRST;
            loop {
                let left = until.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return;
                }
                // An entry backing off from failed connections takes the
                // release as its next attempt, the moment it may (the pause
                // spaces out the connections, not this wait); any entry of
                // the list found back wakes it sooner.
                let backing_off = pending.iter().filter_map(|&i| me.inner.instances.get(i)?.paused_for()).min();
                let wait = backing_off.map_or(pause, |p| p.min(pause)).max(Duration::from_millis(1)).min(left);
                let recovered = me.inner.recoveries.next();
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = recovered => {}
                }
                pause = pause.saturating_mul(2).min(RELEASE_RETRY_LAST);
                let sent =
                    join_all(pending.iter().filter_map(|&i| me.inner.instances.get(i).map(|inst| inst.release(keys.as_slice(), &owner))))
                        .await;
                pending = pending.into_iter().zip(sent).filter(|(_, o)| !o.outcome.answered()).map(|(i, _)| i).collect();
                if pending.is_empty() {
                    return;
                }
            }
        });
    }

    /// Releases `resource` held by `owner` on every instance (no
    /// hold counting: for locks taken elsewhere).
    /// A release goes out even while an entry repeats another (an address
    /// that moved after the grant): nothing is sent to that entry, which
    /// no connection of its reaches until it is identified as itself, and
    /// the real servers let the lock go; the repeated entry is reported
    /// after.
    pub async fn release_owner(&self, resource: &str, owner: &str) -> Result<Released, Error> {
        self.release_owner_all(&Resources::one(resource), owner).await
    }

    /// Releases the set `resources` held by `owner` on every instance, as
    /// `release_owner` does one resource (for a set taken elsewhere, e.g.
    /// `redlock acquire a b`): an instance counts as released only when it
    /// released every member.
    pub async fn release_owner_all(&self, resources: &Resources, owner: &str) -> Result<Released, Error> {
        self.release_owner_within(resources, owner, None).await
    }

    /// `release_owner`; with `ttl`, the lease a server may still hold, an
    /// instance the release could not reach is sent it again in the
    /// background (`release_later`).
    async fn release_owner_within(&self, resource: &Resources, owner: &str, ttl: Option<Duration>) -> Result<Released, Error> {
        async {
            if let Some(ttl) = ttl {
                // Sent again later where unanswered: never to be taken over.
                self.inner.given_up.note(owner, ttl);
            }
            let verified = self.verify_servers().await;
            let instances = self.release_everywhere(resource, owner).await;
            if let Some(ttl) = ttl {
                self.release_later(resource.names(), owner, ttl, instances.iter().map(|o| o.outcome.clone()).enumerate().collect());
            }
            verified?;
            let released = instances.iter().filter(|o| o.outcome == Outcome::Done).count();
            traces::kept(released);
            Ok(Released { released, remaining_holds: 0, instances })
        }
        .traced(traces::keeping(resource, true))
        .await
    }

    /// Extends `resource` held by `owner` (for locks taken elsewhere).
    pub async fn extend_owner(&self, resource: &str, owner: &str, ttl: Duration) -> Result<Lock, Error> {
        self.extend_owner_all(&Resources::one(resource), owner, ttl).await
    }

    /// Extends the set `resources` held by `owner` to `ttl` from now on a
    /// quorum (for a set taken elsewhere): an instance counts only when it
    /// extended every member, as for `extend`.
    pub async fn extend_owner_all(&self, resources: &Resources, owner: &str, ttl: Duration) -> Result<Lock, Error> {
        let lock = Lock {
            resource: resources.to_string(),
            resources: resources.clone(),
            owner: owner.to_string(),
            token: None,
            validity: ttl,
            acquired_at: Instant::now(),
            ttl,
            instances: Vec::new(),
            fenced: 0,
            shared: false,
            permit: false,
            // Taken elsewhere: its connections are not this client's.
            session_window: None,
            holds: Arc::new(AtomicUsize::new(1)),
            ended: Arc::new(AtomicBool::new(false)),
            held: None,
        };
        self.extend(&lock, ttl).await
    }
}
