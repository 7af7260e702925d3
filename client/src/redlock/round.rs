//! One quorum round: every instance asked at once, the grants counted,
//! their tokens reconciled, and whatever a refused round took undone.

use super::*;

/// A grant in reconciliation: (instance index, token).
type Grant = (usize, i64);

/// How many of `outcomes` are grants.
fn granted(outcomes: &[InstanceOutcome]) -> usize {
    outcomes.iter().filter(|o| matches!(o.outcome, Outcome::Granted { .. })).count()
}

/// The waits of one round of the head of the line, shared with the tasks
/// that run them.
struct HeadRound {
    state: std::sync::Mutex<RoundState>,
    changed: tokio::sync::Notify,
    /// The lock's `ended`: set when the round is given up or the lock
    /// released.
    ended: Arc<AtomicBool>,
}

struct RoundState {
    /// Each instance's answer, `None` while its wait runs.
    outcomes: Vec<Option<InstanceOutcome>>,
    /// The round was decided: answers that come now are late.
    decided: bool,
}

impl HeadRound {
    /// Records instance `i`'s answer; `false` if it came after the decision.
    fn report(&self, i: usize, outcome: InstanceOutcome) -> bool {
        let on_time = match self.state.lock() {
            Ok(mut state) if !state.decided => {
                if let Some(slot) = state.outcomes.get_mut(i) {
                    *slot = Some(outcome);
                }
                true
            }
            _ => false,
        };
        self.changed.notify_one();
        on_time
    }

    /// Waits until `quorum` instances granted or the waits left cannot make
    /// it, and returns every instance's answer: decided the moment the
    /// answers that decide it are in, with no wait for the others (the
    /// handoff is on the critical path of every waiter behind). Those
    /// still waiting are `Refused`, late from now on: the lock was held
    /// there, or the server slow to answer. A late grant while the lock is
    /// held is harmless (extensions and the release go to every instance);
    /// one after it ended is released by its task.
    async fn decide(&self, quorum: usize, instances: &[Instance]) -> Vec<InstanceOutcome> {
        loop {
            let notified = self.changed.notified();
            if let Some(outcomes) = self.try_decide(quorum, instances) {
                return outcomes;
            }
            notified.await;
        }
    }

    fn try_decide(&self, quorum: usize, instances: &[Instance]) -> Option<Vec<InstanceOutcome>> {
        let mut state = match self.state.lock() {
            Ok(state) => state,
            Err(poisoned) => poisoned.into_inner(),
        };
        let granted = state.outcomes.iter().flatten().filter(|o| matches!(o.outcome, Outcome::Granted { .. })).count();
        let waiting = state.outcomes.iter().filter(|o| o.is_none()).count();
        if granted < quorum && granted + waiting >= quorum {
            return None;
        }
        state.decided = true;
        Some(
            state
                .outcomes
                .iter_mut()
                .zip(instances)
                .map(|(o, instance)| {
                    o.take().unwrap_or_else(|| InstanceOutcome {
                        server: instance.name.clone(),
                        outcome: Outcome::Refused,
                        latency: Duration::ZERO,
                        connection: None,
                    })
                })
                .collect(),
        )
    }

    /// Decides the round as given up: every grant from now on is released.
    fn abandon(&self) {
        self.ended.store(true, Ordering::SeqCst);
        if let Ok(mut state) = self.state.lock() {
            state.decided = true;
        }
    }
}

/// Gives a head round up if its decision is dropped unfinished.
struct Abandon<'a> {
    redlock: &'a Redlock,
    round: &'a HeadRound,
    resource: &'a Resources,
    owner: String,
    ttl: Duration,
    armed: bool,
}

impl Drop for Abandon<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        self.round.abandon();
        self.redlock.inner.given_up.note(&self.owner, self.ttl);
        // The waits leave the servers' queues now, and grants that came
        // before are released after that (see `Instance::abandon_waits`);
        // any later one (a wait that could not be ended) by its task.
        let (me, resource, owner) = (self.redlock.clone(), self.resource.clone(), std::mem::take(&mut self.owner));
        self.redlock.depart(async move {
            join_all(me.inner.instances.iter().map(|i| i.abandon_waits(&resource, &owner))).await;
        });
    }
}

impl Redlock {
    /// The error of an acquisition that ended without a lock: a server
    /// found listed twice (`Error::Config`), the request refused
    /// (`Error::Rejected`), or not acquired.
    pub(crate) fn not_acquired(&self, resource: impl ToString, attempts: u32, outcomes: Vec<InstanceOutcome>) -> Error {
        if let Some(e) = repeated_server(&outcomes, self.insecure()) {
            return e;
        }
        match quorum::not_granted(&outcomes, self.inner.quorum) {
            NotGranted::Rejected { rejection, .. } => {
                Error::Rejected { resource: resource.to_string(), what: "acquisition", rejection, outcomes }
            }
            why => Error::NotAcquired { resource: resource.to_string(), attempts, why, outcomes },
        }
    }

    /// One Redlock round. `Err(outcomes)` when not granted (and nothing is
    /// left behind). Only grants count: an instance that failed in any way
    /// (unreachable, timed out, in quarantine, without the module, ...)
    /// is one that did not grant. `ask`: exclusive or shared, with its
    /// value (see `acquire_until`); the round binds the hold to its
    /// connection as the settings say.
    pub(crate) async fn attempt(&self, resource: &Resources, ttl: Duration, ask: Ask<'_>) -> Result<Lock, Vec<InstanceOutcome>> {
        async {
            let owner = ask.owner.map_or_else(new_owner, round_owner);
            let started = Instant::now();
            let ask = ask.session(self.inner.settings.session_delay_ms(ttl));
            let asked =
                self.inner.instances.iter().map(|i| i.acquire_as(resource, &owner, ttl, ask).traced(traces::call(&i.name, "acquire")));
            let outcomes = join_all(asked).await;
            let granted = granted(&outcomes);
            let concluded =
                self.conclude(resource, owner, ttl, ask.share, started, outcomes, Arc::new(AtomicBool::new(false)), false).await;
            traces::round_ended(granted, concluded.is_ok());
            concluded
        }
        .traced(traces::round(resource, false))
        .await
    }

    /// One round of the head of the line: `LOCK.ACQUIRE resource owner ttl
    /// [FENCE floor] WAIT window` on every instance at once, asking `ask`
    /// (its fence the floor). Each instance grants the moment the lock is
    /// free there, first in its queue, so the holder's release hands the
    /// lock over on the servers themselves.
    ///
    /// The round is decided as soon as a quorum granted, or when the waits
    /// still running could no longer make one. A wait still running then
    /// may be granted later ("late"):
    /// - while the lock is held, the instance holds it too, uncounted, which
    ///   is harmless, and the lock's release reaches it like the others;
    /// - after the lock was released or the round given up (`ended`), the
    ///   task that ran the wait releases it at once, so no instance keeps
    ///   a hold nobody will release.
    ///
    /// The validity counts from the moment the waits were sent: no
    /// instance can have started its lease before.
    pub(super) async fn attempt_at_head(
        &self,
        resource: &Resources,
        ttl: Duration,
        window: Duration,
        ask: Ask<'_>,
    ) -> Result<Lock, Vec<InstanceOutcome>> {
        // The waits run as tasks of their own (see "late" above); without a
        // tokio runtime to run them, a plain round.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return self.attempt(resource, ttl, ask.fence(None)).await;
        };
        self.attempt_waiting(runtime, resource, ttl, window, ask).traced(traces::round(resource, true)).await
    }

    /// `attempt_at_head` on `runtime`.
    async fn attempt_waiting(
        &self,
        runtime: tokio::runtime::Handle,
        resource: &Resources,
        ttl: Duration,
        window: Duration,
        ask: Ask<'_>,
    ) -> Result<Lock, Vec<InstanceOutcome>> {
        let ask = ask.session(self.inner.settings.session_delay_ms(ttl));
        let owner = ask.owner.map_or_else(new_owner, round_owner);
        let sent = Instant::now();
        let n = self.inner.instances.len();
        let round = Arc::new(HeadRound {
            state: std::sync::Mutex::new(RoundState { outcomes: vec![None; n], decided: false }),
            changed: tokio::sync::Notify::new(),
            ended: Arc::new(AtomicBool::new(false)),
        });
        for i in 0..n {
            let (me, round, resource, owner) = (self.clone(), Arc::clone(&round), resource.clone(), owner.clone());
            let value = ask.value.map(str::to_string);
            let Ask { share, fence, session, .. } = ask;
            // In the round's span: a task starts outside every span.
            let within = traces::current();
            runtime.spawn(
                async move {
                    let Some(instance) = me.inner.instances.get(i) else { return };
                    let ask = Ask { share, fence, session, value: value.as_deref(), owner: None };
                    let outcome = instance.wait_for(&resource, &owner, ttl, window, ask).traced(traces::call(&instance.name, "wait")).await;
                    let granted = matches!(outcome.outcome, Outcome::Granted { .. });
                    if !round.report(i, outcome) && granted && round.ended.load(Ordering::SeqCst) {
                        instance.release(&resource, &owner).traced(traces::call(&instance.name, "release")).await;
                    }
                }
                .traced(within),
            );
        }
        // Dropped before the lock is ours (the caller gave up the
        // acquisition, or a semaphore's waiter took another permit; also
        // while the tokens are reconciled): nothing may stay granted.
        let mut abandon = Abandon { redlock: self, round: &round, resource, owner: owner.clone(), ttl, armed: true };
        let outcomes = round.decide(self.inner.quorum, &self.inner.instances).await;
        let granted = granted(&outcomes);
        let concluded = self.conclude(resource, owner, ttl, ask.share, sent, outcomes, Arc::clone(&round.ended), true).await;
        abandon.armed = false;
        traces::round_ended(granted, concluded.is_ok());
        concluded
    }

    /// The end of a round with these `outcomes`, its requests sent at
    /// `started`: with a quorum of grants, the tokens reconciled and the
    /// validity left, the lock; otherwise `ended` set first (see
    /// `attempt_at_head`) and every grant released: everywhere when
    /// `late_grants` (waits still running may be granted), else wherever
    /// the answer was not a plain refusal. `share`: how the round asked,
    /// which the write-back of its tokens asks again.
    #[allow(clippy::too_many_arguments)]
    async fn conclude(
        &self,
        resource: &Resources,
        owner: String,
        ttl: Duration,
        share: Share,
        started: Instant,
        mut outcomes: Vec<InstanceOutcome>,
        ended: Arc<AtomicBool>,
        late_grants: bool,
    ) -> Result<Lock, Vec<InstanceOutcome>> {
        let granted: Vec<(usize, Option<i64>)> = outcomes
            .iter()
            .enumerate()
            .filter_map(|(i, o)| match o.outcome {
                Outcome::Granted { token } => Some((i, token)),
                _ => None,
            })
            .collect();
        let give_up = |outcomes: Vec<InstanceOutcome>| async {
            ended.store(true, Ordering::SeqCst);
            // Noted before the first release is sent: one in flight when
            // this future is dropped still lands.
            self.inner.given_up.note(&owner, ttl);
            // A plain round's nil is the server's own answer: nothing to
            // undo there (under contention most are). A head round's waits
            // may still be granted: released everywhere.
            let undo = self
                .inner
                .instances
                .iter()
                .enumerate()
                .filter(|&(i, _)| late_grants || outcomes.get(i).is_none_or(|o| o.outcome != Outcome::Refused));
            let owner = owner.as_str();
            let undone = join_all(undo.map(|(i, instance)| async move {
                (i, instance.release(resource, owner).traced(traces::call(&instance.name, "release")).await.outcome)
            }))
            .await;
            self.release_later(resource.names(), owner, ttl, undone);
            Err(outcomes)
        };
        // A server found listed twice: its entries make the count wrong.
        if granted.len() < self.inner.quorum || repeated_server(&outcomes, self.insecure()).is_some() {
            return give_up(outcomes).await;
        }
        let (token, fenced) = match self.inner.settings.mode {
            Mode::Script => (None, 0),
            Mode::Module => match self.reconcile(resource, &owner, ttl, share, &granted, &mut outcomes).await {
                Some((token, fenced)) => (Some(token), fenced),
                None => return give_up(outcomes).await,
            },
        };
        let drift = quorum::drift(ttl, self.inner.settings.drift_factor);
        let elapsed = started.elapsed();
        let session_window = self.inner.settings.session_window(ttl);
        let Some(validity) = quorum::session_validity(quorum::validity(ttl, elapsed, drift), session_window, elapsed) else {
            return give_up(outcomes).await;
        };
        if let Some(t) = token {
            self.inner.highest_token.fetch_max(t, Ordering::Relaxed);
        }
        Ok(Lock {
            resource: resource.to_string(),
            resources: resource.clone(),
            owner,
            token,
            validity,
            acquired_at: started,
            ttl,
            instances: outcomes,
            fenced,
            shared: share == Share::Shared,
            permit: matches!(share, Share::Slots { .. } | Share::Permits(..)),
            session_window,
            holds: Arc::new(AtomicUsize::new(1)),
            ended,
            held: None,
        })
    }

    /// Raises the granting instances that issued smaller tokens to the
    /// largest one, T (see `quorum::reconcile` for why). Returns T and how
    /// many were raised, or `None` when fewer than a quorum hold T or more.
    ///
    /// An instance that issued T or more to other locks between its grant
    /// and the write-back answers it with a fresh token above T (it never
    /// gives two locks one token). It still holds a token of at least T,
    /// which is all the ordering argument needs, so it counts, and the
    /// lock's token stays T. (Raising the others to that answer instead
    /// races every other client's grants on the same instances: with 32
    /// workers on keys of their own it failed about one acquisition in
    /// twenty, reported as "no validity".)
    ///
    /// A token the others refuse as too far ahead of their clocks
    /// (`max-token-lead`: an instance whose clock or counter runs far
    /// ahead) would otherwise fail every acquisition it takes part in. Its
    /// granter is then counted out, as if it had failed, its grant released,
    /// and the rest agree among themselves: ordering still holds, since two
    /// quorums of the rest share an instance of the rest.
    async fn reconcile(
        &self,
        resource: &Resources,
        owner: &str,
        ttl: Duration,
        share: Share,
        granted: &[(usize, Option<i64>)],
        outcomes: &mut [InstanceOutcome],
    ) -> Option<(i64, usize)> {
        let mut candidates: Vec<Grant> = granted.iter().filter_map(|&(i, t)| Some((i, t?))).collect();
        let mut fenced: Vec<usize> = Vec::new();
        loop {
            let tokens: Vec<i64> = candidates.iter().map(|&(_, t)| t).collect();
            let plan = quorum::reconcile(&tokens)?;
            let behind: Vec<usize> = plan.behind.iter().filter_map(|&g| candidates.get(g).map(|&(i, _)| i)).collect();
            let raised = join_all(behind.iter().filter_map(|&i| {
                let instance = self.inner.instances.get(i)?;
                // The write-back is a re-grant in the same mode: a shared
                // holder asking without SHARED would be asking to upgrade,
                // a permit hold without SEMAPHORE for its limit record's
                // lock.
                let ask = Ask::new(share).fence(Some(plan.token)).session(self.inner.settings.session_delay_ms(ttl));
                Some(async move { (i, instance.acquire_as(resource, owner, ttl, ask).await) })
            }))
            .await;
            let mut too_far_ahead = false;
            for (i, outcome) in raised {
                match outcome.outcome {
                    Outcome::Granted { token: Some(t) } if t >= plan.token => {
                        if !fenced.contains(&i) {
                            fenced.push(i);
                        }
                        if let Some(c) = candidates.iter_mut().find(|c| c.0 == i) {
                            c.1 = t;
                        }
                    }
                    Outcome::Failed(ref msg) if msg.contains("max-token-lead") => {
                        // Still holds the lock with its own token.
                        too_far_ahead = true;
                        continue;
                    }
                    _ => candidates.retain(|c| c.0 != i),
                }
                if let Some(slot) = outcomes.get_mut(i) {
                    *slot = outcome;
                }
            }
            let holding = candidates.iter().filter(|&&(_, t)| t >= plan.token).count();
            if holding >= self.inner.quorum {
                return Some((plan.token, fenced.len()));
            }
            if !too_far_ahead {
                return None;
            }
            let (ahead, rest): (Vec<Grant>, Vec<Grant>) = candidates.into_iter().partition(|&(_, t)| t >= plan.token);
            candidates = rest;
            for (i, _) in ahead {
                if let Some(instance) = self.inner.instances.get(i) {
                    instance.release(resource, owner).await;
                }
                if let Some(slot) = outcomes.get_mut(i) {
                    slot.outcome = Outcome::Failed(format!(
                        "token {} is too far ahead for the other instances' max-token-lead; not counted",
                        plan.token
                    ));
                }
            }
            if candidates.len() < self.inner.quorum {
                return None;
            }
        }
    }
}
