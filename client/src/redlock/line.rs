//! The resource's waiting line across the quorum: a place on one
//! designated instance, kept while its owner waits at the head, given up at
//! the grant; the waiting acquisition built on it (`acquire_until`).

use super::permit_wait::Semaphore;
use super::permits::{named_after, permit_set, PermitHold, Terms, MAX_TERMS_LEARNED};
use super::*;

/// What asking for a place in line came to.
enum Joined {
    /// A place in each line asked for (one ticket per line instance).
    Place(Vec<Ticket>),
    /// The line instance did not answer in time: ask again.
    Again,
    /// No place: the line instance does not serve it, stopped answering
    /// while we waited, or the deadline came.
    Without,
}

/// What the first round of a waiting acquisition came to (`first_try`).
// One per acquisition, returned at once and never stored: boxing the lock
// would allocate on every grant for nothing.
#[allow(clippy::large_enum_variant)]
pub(super) enum FirstTry {
    Lock(Lock),
    /// Others are in line: wait behind them.
    Behind,
    /// Neither (the lock is held, nobody in line): take a place.
    Again,
}

/// A place in line ends with the connection that holds it, at once
/// (`SESSION DELAY 0`): a waiter that dies, or whose connection to the
/// line instance is reset, leaves the line then, not a ttl later. The
/// place only orders waiters (the lock is the quorum's), so no lock-delay
/// is needed for safety; a waiter whose connection was reset finds its
/// place gone at its next renewal and queues again.
const PLACE_SESSION: Option<u64> = Some(0);

/// How many times a place in line is asked for again at once after a
/// request that timed out, before this round goes without one.
const JOIN_RETRIES: usize = 3;

/// A place in a resource's waiting line: a module lock on one designated
/// instance, held while its owner waits at the head of the line and given
/// up the moment the lock is granted, so that the next in line waits on
/// the lock itself during the hold. A set's places on one line instance
/// are one ticket, taken and given up together (`LOCK.MACQUIRE`).
#[derive(Clone, Debug)]
struct Ticket {
    instance: usize,
    /// The line keys held here.
    keys: Vec<String>,
    /// The mode the place is held in (the request's own).
    share: Share,
    owner: String,
    /// The line instance's token for the ticket, a floor for the lock's.
    token: Option<i64>,
    /// The place's lease as asked: how long a release that cannot reach
    /// the line instance is sent again (`leave_line`).
    ttl: Duration,
    /// Bound to the shared connection (`PLACE_SESSION`). A place granted
    /// by a wait in the queue is not: the wait's connection goes back to a
    /// pool. It is bound by a renewal in the first round, beside the head's
    /// wait on the lock, not before it: moving the binding first cost a
    /// round trip between the place's grant and that wait, on the path of
    /// every handoff.
    bound: bool,
}

/// An acquisition's place in line (in every member's line, for a set),
/// given up however the acquisition ends.
struct Place {
    redlock: Redlock,
    /// Empty while not in line.
    tickets: Vec<Ticket>,
    /// When the place's lease was last set.
    renewed: Instant,
}

impl Place {
    fn in_line(&self) -> bool {
        !self.tickets.is_empty()
    }

    /// Gives the place up now (the wait ended without a grant).
    async fn leave(&mut self) {
        let tickets = std::mem::take(&mut self.tickets);
        join_all(tickets.into_iter().map(|t| self.redlock.leave_line(t))).await;
    }

    /// Forgets a place found gone (or given up at the grant), releasing it
    /// in the background in case it is not.
    fn drop_tickets(&mut self) {
        for t in std::mem::take(&mut self.tickets) {
            self.redlock.leave_line_soon(t);
        }
    }

    /// The floor of the head's token: above every ticket's.
    fn token(&self) -> i64 {
        self.tickets.iter().filter_map(|t| t.token).max().unwrap_or(0)
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        // The acquisition was dropped while in line: give the place up in
        // the background (settle waits for it), not after a whole ttl.
        self.drop_tickets();
    }
}

/// A place being waited for, given up if its wait is dropped unfinished.
struct AbandonPlace<'a> {
    redlock: &'a Redlock,
    /// The place asked for; `None` once the wait ended.
    ticket: Option<Ticket>,
}

impl Drop for AbandonPlace<'_> {
    fn drop(&mut self) {
        if let Some(t) = self.ticket.take() {
            let me = self.redlock.clone();
            self.redlock.depart(async move {
                if let Some(instance) = me.inner.instances.get(t.instance) {
                    let sent = instance.abandon_waits(t.keys.as_slice(), &t.owner).await.outcome;
                    me.release_later(&t.keys, &t.owner, t.ttl, vec![(t.instance, sent)]);
                }
            });
        }
    }
}

/// The instance that keeps `resource`'s line: the same for every client
/// whatever the order of its server list (FNV-1a over the resource, among
/// the servers sorted by name).
pub(super) fn line_instance(resource: &str, by_name: &[usize]) -> usize {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in resource.bytes() {
        hash = (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    let pick = usize::try_from(hash % by_name.len().max(1) as u64).unwrap_or(0);
    by_name.get(pick).copied().unwrap_or(0)
}

/// The lines of `resources`, by line instance (`line_instance`), the
/// instances in name order: the order every client takes a set's places
/// in, so that two sets never each hold a place the other waits for.
fn lines_by_instance<'a>(resources: &'a Resources, by_name: &[usize]) -> Vec<(usize, Vec<&'a str>)> {
    let mut groups: Vec<(usize, Vec<&str>)> = Vec::new();
    for name in resources.names() {
        let instance = line_instance(name, by_name);
        match groups.iter_mut().find(|(i, _)| *i == instance) {
            Some((_, names)) => names.push(name),
            None => groups.push((instance, vec![name])),
        }
    }
    let rank = |instance: usize| by_name.iter().position(|&i| i == instance).unwrap_or(usize::MAX);
    groups.sort_by_key(|&(instance, _)| rank(instance));
    groups
}

/// Indexes of `servers` in name order: the same for every client.
pub(super) fn by_name(servers: &[String]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..servers.len()).collect();
    order.sort_by(|&a, &b| servers[a].cmp(&servers[b]));
    order
}

impl Redlock {
    /// The acquisition loop of every kind: rounds until granted, the
    /// retries are used up or `deadline` passes. With a deadline in module
    /// mode the request keeps a place in the resource's line for its whole
    /// wait (see `lock_until`), whatever its kind. `ask`: the kind of hold
    /// (its share), and the value stored with an exclusive hold on every
    /// instance (an election's, see `election`), and the least token
    /// (`Ask::fence`, the module's `FENCE`: the head's rounds ask for the
    /// higher of it and the line's floor); the rounds set the session.
    pub(crate) async fn acquire_until<F>(
        &self,
        resource: &Resources,
        ttl: Duration,
        deadline: Option<Instant>,
        ask: Ask<'_>,
        observe: F,
    ) -> Result<Lock, Error>
    where
        F: FnMut(&Retry<'_>) + Send,
    {
        self.counted(resource, ask.share, deadline, self.acquire_waiting(resource, ttl, deadline, ask, observe)).await
    }

    /// `acquire_until`, uncounted. A waiter for permits whose round a
    /// resized record refused, naming other terms, gives its place up and
    /// starts again under them (at most `MAX_TERMS_LEARNED` times; then the
    /// terms it last learned are kept).
    async fn acquire_waiting<F>(
        &self,
        resource: &Resources,
        ttl: Duration,
        deadline: Option<Instant>,
        ask: Ask<'_>,
        mut observe: F,
    ) -> Result<Lock, Error>
    where
        F: FnMut(&Retry<'_>) + Send,
    {
        let mut terms = None;
        let mut learned = 0;
        loop {
            let learning = learned < MAX_TERMS_LEARNED;
            match self.acquire_waiting_under(resource, ttl, deadline, ask, terms, learning, &mut observe).await? {
                Ok(lock) => return Ok(lock),
                Err(next) => {
                    learned += 1;
                    terms = Some(next);
                }
            }
        }
    }

    /// `acquire_waiting` under `terms` (a semaphore's; `None`: the
    /// caller's limit): `Ok(Err(terms))` when a round was refused under
    /// other terms and `learning`.
    #[allow(clippy::too_many_arguments)] // acquire_until's, and what a restart learned
    async fn acquire_waiting_under<F>(
        &self,
        resource: &Resources,
        ttl: Duration,
        deadline: Option<Instant>,
        ask: Ask<'_>,
        terms: Option<Terms>,
        learning: bool,
        mut observe: F,
    ) -> Result<Result<Lock, Terms>, Error>
    where
        F: FnMut(&Retry<'_>) + Send,
    {
        let kind = Kind::of_share(ask.share);
        // The least token the caller asked for (`FENCE`), asked of every
        // round; the head's rounds ask more when the line knows more.
        let least = ask.fence;
        let ask = ask.fence(least).session(None);
        self.verify_servers().await?;
        let hi = self.inner.settings.retry_delay.1;
        let lined = self.inner.settings.mode == Mode::Module;
        // Errors name what was asked for (a semaphore, not its permits).
        let named = resource.to_string();
        // Given up at the grant, when the wait ends, or when this future is
        // dropped (the caller gave up): never left behind for a whole ttl.
        let mut place = Place { redlock: self.clone(), tickets: Vec::new(), renewed: Instant::now() };
        let mut head_delay = Duration::from_millis(1);
        let mut attempts = 0u32;
        // The head asks for a token above the ticket's and every one this
        // handle saw, unless an instance refused that as too far ahead.
        let mut ask_floor = true;
        // First the lock (or a permit), and whether anyone is in line, at
        // once: nobody in line and the lock free, it is ours in one round
        // trip, with no place taken and given up; others in line, what we
        // took goes back and we wait behind them.
        let mut behind = false;
        // A waiter for permits waits in the line of the permits it asks
        // (`count` consecutive ones from a random one), an exclusive lock's
        // line, and at its head on those permits in the servers' queues:
        // each holder's release hands its permit over on the servers, so
        // `limit` handoffs run side by side. While it waits there, it asks
        // every permit now and then (`LOOK_AROUND`).
        let slots: Resources;
        // What the rounds take: the resource, or a permit hold's slots and
        // limit record (`PermitHold`), named after its slots.
        let hold: PermitHold;
        let mut held: Option<&Resources> = None;
        let mut semaphore = None;
        // Found held lately: straight into the line (`Contended`).
        let contended = &self.inner.contended;
        let skip_first = lined && deadline.is_some() && contended.lately(&named);
        let mut after_first = |tried: FirstTry| -> Option<Lock> {
            match tried {
                FirstTry::Lock(lock) => {
                    contended.found_free(&named);
                    return Some(lock);
                }
                FirstTry::Behind => behind = true,
                FirstTry::Again => {}
            }
            // A round skipped says nothing: the mark runs out in its time.
            if !skip_first {
                contended.found_held(&named);
            }
            None
        };
        let (resource, kind, ask) = match (lined, deadline, kind) {
            (true, Some(_), Kind::Permit { limit, count }) => {
                let terms = terms.filter(|t| count <= t.limit).unwrap_or_else(|| self.inner.learned_terms.start(&named, limit));
                let first = rand::rng().random_range(0..terms.limit.max(1));
                slots = permit_set(&named, terms.limit, count, first).map_err(Error::Config)?;
                hold = PermitHold::of(&slots, &named, terms, self.inner.settings.mode).map_err(Error::Config)?;
                let asked = Semaphore { name: named.clone(), limit, terms, count, owner: ask.owner.map(str::to_string), fence: least };
                let tried = match skip_first {
                    true => FirstTry::Behind,
                    false => self.first_permit(&asked, &slots, ttl, first).await,
                };
                if let Some(lock) = after_first(tried) {
                    return Ok(Ok(lock));
                }
                semaphore = Some(asked);
                held = Some(&hold.keys);
                (&slots, Kind::Exclusive, hold.ask.owner(ask.owner).fence(least))
            }
            (true, Some(_), _) => {
                let tried = match skip_first {
                    true => FirstTry::Behind,
                    false => self.first_try(resource, kind, ttl, ask).await,
                };
                if let Some(lock) = after_first(tried) {
                    return Ok(Ok(lock));
                }
                (resource, kind, ask)
            }
            _ => (resource, kind, ask),
        };
        loop {
            attempts += 1;
            // Not in line (yet, or any more: the line instance did not answer,
            // or the place was lost): take a place, never poll behind the line.
            if let (true, false, Some(d)) = (lined, place.in_line(), deadline) {
                // A request that timed out (a busy machine, a slow reply) is
                // asked again at once, a few times: falling back to polling
                // would leave this waiter behind everyone in line.
                for _ in 0..=JOIN_RETRIES {
                    match self.join_line(resource, kind, ttl, d, !std::mem::take(&mut behind)).await {
                        Joined::Place(tickets) => place.tickets = tickets,
                        Joined::Again if Instant::now() < d => continue,
                        Joined::Again | Joined::Without => {}
                    }
                    break;
                }
                place.renewed = Instant::now();
                head_delay = Duration::from_millis(1);
            }
            let round_started = Instant::now();
            // A place held across rounds is renewed before its ttl runs out;
            // one granted by a wait, at once (`Ticket::bound`).
            let renew = place.in_line() && (place.renewed.elapsed() >= ttl / 3 || place.tickets.iter().any(|t| !t.bound));
            let renewal = async {
                match renew {
                    true => Some(join_all(place.tickets.iter().map(|t| self.renew_ticket(t, ttl))).await.into_iter().all(|kept| kept)),
                    false => None,
                }
            };
            let round = async {
                match (place.in_line(), deadline, kind) {
                    (true, Some(d), Kind::Exclusive | Kind::Shared) => {
                        // A window well inside the ttl: the validity counts
                        // from the moment the waits were sent.
                        let window = (ttl / 3).min(d.saturating_duration_since(round_started)).max(Duration::from_millis(1));
                        let floor =
                            ask_floor.then(|| place.token().max(self.inner.highest_token.load(Ordering::Relaxed)).saturating_add(1));
                        let floor = match (floor, least) {
                            (Some(f), Some(l)) => Some(f.max(l)),
                            (f, l) => f.or(l),
                        };
                        let head = self.attempt_at_head(held.unwrap_or(resource), ttl, window, ask.fence(floor));
                        (self.looking_around(head, semaphore.as_ref(), ttl).await, Some(window))
                    }
                    (_, _, Kind::Permit { limit, count }) => {
                        let terms = terms.filter(|t| count <= t.limit).unwrap_or_else(|| self.inner.learned_terms.start(&named, limit));
                        let first = rand::rng().random_range(0..terms.limit.max(1));
                        (self.attempt_permit_from(&named, limit, terms, count, ttl, first, ask).await, None)
                    }
                    _ => (self.attempt(held.unwrap_or(resource), ttl, ask).await, None),
                }
            };
            let (renewed, (taken, window)) = futures::join!(renewal, round);
            match renewed {
                Some(true) => {
                    place.renewed = Instant::now();
                    place.tickets.iter_mut().for_each(|t| t.bound = true);
                }
                // The place is gone (the line instance restarted, or it ran
                // out): a new one next round.
                Some(false) => place.drop_tickets(),
                None => {}
            }
            let outcomes = match taken {
                // A permit hold's lock is named after its slots.
                Ok(lock) if held.is_some_and(|keys| lock.resources == *keys) => {
                    place.drop_tickets();
                    if let Some(asked) = semaphore.as_ref() {
                        self.inner.learned_terms.used(&asked.name, asked.limit, asked.terms, ttl);
                    }
                    return Ok(Ok(named_after(lock, resource)));
                }
                Ok(lock) => {
                    place.drop_tickets();
                    return Ok(Ok(lock));
                }
                Err(outcomes) => outcomes,
            };
            // Refused by resized records naming other terms: asked again
            // under them, from a new place (its slots change).
            if let (true, Some(asked)) = (learning, semaphore.as_ref()) {
                if let Some(next) = asked.terms.learned(&outcomes) {
                    self.inner.learned_terms.used(&asked.name, asked.limit, next, ttl);
                    place.leave().await;
                    return Ok(Err(next));
                }
            }
            let too_far_ahead = outcomes.iter().any(|o| matches!(&o.outcome, Outcome::Failed(m) if m.contains("max-token-lead")));
            // Asked without the line's floor, the caller's own `FENCE` is
            // what a server refused as too far ahead: no round will do.
            let least_refused = too_far_ahead && !ask_floor && least.is_some();
            if too_far_ahead {
                ask_floor = false;
            }
            let why = quorum::not_granted(&outcomes, self.inner.quorum);
            // No retry changes a refusal of the request itself.
            let hopeless = matches!(why, NotGranted::Rejected { rejection, .. } if rejection.is_configuration())
                || repeated_server(&outcomes, self.insecure()).is_some()
                || least_refused;
            if hopeless {
                place.leave().await;
                return Err(self.not_acquired(&named, attempts, outcomes));
            }
            let delay = match window {
                // The window passed with the lock held: wait on at once.
                Some(w) if round_started.elapsed() >= w => Duration::ZERO,
                // First in line: the resource frees up any moment now.
                _ if place.in_line() => {
                    head_delay = head_delay.saturating_mul(2).min(hi.max(Duration::from_millis(1)));
                    head_delay / 2
                }
                _ => self.retry_pause(),
            };
            // Nothing is granted before enough quarantines end: no point
            // asking more often than once a second, nor long after they end.
            let quarantine = match why {
                NotGranted::Quarantine { ms_left, .. } => Some(Duration::from_millis(ms_left)),
                _ => None,
            };
            let wait = quarantine.map_or(delay, |q| delay.max(q.min(QUARANTINE_POLL)));
            let out_of_time = match deadline {
                Some(d) => Instant::now().checked_add(delay).is_none_or(|t| t >= d),
                None => {
                    let retries_left = self.inner.settings.retry_count.saturating_add(1).saturating_sub(attempts);
                    attempts > self.inner.settings.retry_count || quarantine.is_some_and(|q| q > hi.saturating_mul(retries_left))
                }
            };
            if out_of_time {
                place.leave().await;
                return Err(self.not_acquired(&named, attempts, outcomes));
            }
            let wait = match deadline {
                Some(d) => wait.min(d.saturating_duration_since(Instant::now())),
                None => wait,
            };
            observe(&Retry { attempt: attempts, why, outcomes: &outcomes, delay: wait });
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
        }
    }

    /// The server that keeps `resource`'s waiting line (the same for
    /// every client whatever the order of its server list), as listed.
    pub fn line_server(&self, resource: &str) -> String {
        let index = line_instance(resource, &self.inner.line_order);
        self.inner.instances.get(index).map(|i| i.name.clone()).unwrap_or_default()
    }

    /// Sets the place's lease to `ttl` again; `false` when the line
    /// instance answered that the place is not ours any more. A server
    /// that did not answer may still hold it: kept.
    ///
    /// The renewal is a re-grant to the place's owner, not an extension:
    /// the place is bound to the connection that took it, and a
    /// connection remade since (a reset, a link that flapped) may not
    /// extend it. The re-grant binds it to the connection of now, so a
    /// waiter on a flaky link keeps its turn, and no place stays bound to
    /// a connection the server has not yet found dead, holding up the
    /// line. A place already ended is not taken anew past anyone waiting:
    /// the server serves its queue first.
    async fn renew_ticket(&self, t: &Ticket, ttl: Duration) -> bool {
        match self.inner.instances.get(t.instance) {
            Some(instance) => {
                instance.acquire_as(t.keys.as_slice(), &t.owner, ttl, Ask::new(t.share).session(PLACE_SESSION)).await.outcome
                    != Outcome::Refused
            }
            None => false,
        }
    }

    /// A random pause within the configured `retry_delay`, between
    /// attempts that poll.
    pub(crate) fn retry_pause(&self) -> Duration {
        let (lo, hi) = self.inner.settings.retry_delay;
        if hi > lo {
            rand::rng().random_range(lo..=hi)
        } else {
            lo
        }
    }

    /// Takes the head of `resource`'s line, in the request's own mode
    /// (`Kind::line`): at once when nobody is ahead, else by waiting in the
    /// module's first-come, first-served queue on the line instance until
    /// `deadline`, whatever the ttl. `Again` when the line instance did not
    /// answer the first request in time (ask again), `Without` if it does
    /// not serve the line, or stops answering while we wait (watched: a
    /// frozen line instance must not hold its waiters until their
    /// deadlines).
    ///
    /// A set takes the head of every member's line: on each line instance
    /// its members' places at once (`LOCK.MACQUIRE ... WAIT`), the
    /// instances one after the other in name order, the same order for
    /// every client: a set holding places on some instances waits only on
    /// instances later in that order, so no two waiters can each hold a
    /// place the other waits for. Places taken are given up when a later
    /// instance's cannot be had.
    async fn join_line(&self, resource: &Resources, kind: Kind, ttl: Duration, deadline: Instant, ask_first: bool) -> Joined {
        let mut tickets: Vec<Ticket> = Vec::new();
        for (index, names) in lines_by_instance(resource, &self.inner.line_order) {
            let keys: Vec<String> = names.iter().map(|name| kind.line_key(name)).collect();
            let join = self.join_line_on(index, keys, kind.place_share(), ttl, deadline, ask_first);
            // The places taken on earlier instances are renewed while this
            // one is waited for, which may take longer than their ttl.
            let keep_taken = async {
                loop {
                    tokio::time::sleep(ttl / 3).await;
                    join_all(tickets.iter().map(|t| self.renew_ticket(t, ttl))).await;
                }
            };
            let joined = tokio::select! {
                joined = join => joined,
                never = keep_taken => never,
            };
            match joined {
                Ok(ticket) => tickets.push(ticket),
                Err(joined) => {
                    for t in tickets {
                        self.leave_line_soon(t);
                    }
                    return joined;
                }
            }
        }
        Joined::Place(tickets)
    }

    /// The places `keys` on line instance `index` (see `join_line`).
    async fn join_line_on(
        &self,
        index: usize,
        keys: Vec<String>,
        share: Share,
        ttl: Duration,
        deadline: Instant,
        ask_first: bool,
    ) -> Result<Ticket, Joined> {
        let Some(instance) = self.inner.instances.get(index) else { return Err(Joined::Without) };
        let owner = new_owner();
        let ticket = |token, bound| Ticket { instance: index, keys: keys.clone(), share, owner: owner.clone(), token, ttl, bound };
        // Without `ask_first` the caller just found others in line: straight
        // to the queue (which grants at once if the line emptied since).
        if ask_first {
            match instance.acquire_as(keys.as_slice(), &owner, ttl, Ask::new(share).session(PLACE_SESSION)).await.outcome {
                Outcome::Granted { token } => return Ok(ticket(token, true)),
                Outcome::Refused => {}
                Outcome::Timeout => {
                    // It may have granted just after the timeout: not left held.
                    self.leave_line_soon(ticket(None, true));
                    return Err(Joined::Again);
                }
                _ => return Err(Joined::Without),
            }
        }
        let wait = deadline.saturating_duration_since(Instant::now());
        if wait.is_zero() {
            return Err(Joined::Without);
        }
        let watch = async {
            let every = (ttl / 3).clamp(Duration::from_millis(100), Duration::from_secs(1));
            let mut silent = 0;
            loop {
                tokio::time::sleep(every).await;
                silent = if instance.ping().await == Outcome::Done { 0 } else { silent + 1 };
                // Twice: one slow reply on a busy machine is no outage.
                if silent >= 2 {
                    return;
                }
            }
        };
        // Dropped while it waits (the caller gave the acquisition up): the
        // wait leaves the line instance's queue at once, and a grant that
        // raced it is released (see `Instance::abandon_waits`).
        let mut abandoned = AbandonPlace { redlock: self, ticket: Some(ticket(None, true)) };
        tokio::select! {
            // Not bound: see `Ticket::bound`.
            waited = instance.wait_for(keys.as_slice(), &owner, ttl, wait, Ask::new(share)) => match waited.outcome {
                Outcome::Granted { token } => {
                    abandoned.ticket = None;
                    Ok(ticket(token, false))
                }
                _ => {
                    // A grant that raced the timeout (or a reset) must not
                    // block the line.
                    abandoned.ticket = None;
                    self.leave_line(ticket(None, false)).await;
                    Err(Joined::Without)
                }
            },
            () = watch => {
                // The wait's connection is closed (which leaves the queue);
                // a grant that raced it is undone when the server answers.
                abandoned.ticket = None;
                self.leave_line_soon(ticket(None, true));
                Err(Joined::Without)
            }
        }
    }

    /// Gives the place in line up in the background, right after the
    /// grant: the next in line starts waiting on the lock during the hold.
    fn leave_line_soon(&self, ticket: Ticket) {
        let me = self.clone();
        self.depart(async move { me.leave_line(ticket).await });
    }

    /// Runs `leaving` in the background, counted for `settle`: giving up
    /// a place in line, or what an acquisition dropped at the head left
    /// (its waits, a grant). Outside a runtime (not reachable from the
    /// async API) the ttl ends what it would have.
    pub(super) fn depart(&self, leaving: impl std::future::Future<Output = ()> + Send + 'static) {
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let me = self.clone();
            self.inner.departures.running.fetch_add(1, Ordering::SeqCst);
            runtime.spawn(async move {
                leaving.await;
                if me.inner.departures.running.fetch_sub(1, Ordering::SeqCst) == 1 {
                    me.inner.departures.idle.notify_waiters();
                }
            });
        }
    }

    /// Waits until what this handle gives up in the background is given
    /// up: places in line after a grant, and the waits and grants of an
    /// acquisition dropped at the head of the line. A process that exits
    /// right after taking a lock (or giving an acquisition up) calls it
    /// first: otherwise its place would stay taken until its ttl, and the
    /// next in line would wait that long.
    pub async fn settle(&self) {
        loop {
            let idle = self.inner.departures.idle.notified();
            if self.inner.departures.running.load(Ordering::SeqCst) == 0 {
                return;
            }
            idle.await;
        }
    }

    /// Gives a place up; a release that did not reach the line instance
    /// (a reset, a link down) is sent again while the place could stand:
    /// otherwise the next in line would wait for its whole ttl.
    async fn leave_line(&self, t: Ticket) {
        if let Some(instance) = self.inner.instances.get(t.instance) {
            let sent = instance.release(t.keys.as_slice(), &t.owner).await.outcome;
            self.release_later(&t.keys, &t.owner, t.ttl, vec![(t.instance, sent)]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_client_picks_the_same_line_instance_whatever_its_server_order() {
        let a = vec!["h:1".to_string(), "h:2".to_string(), "h:3".to_string()];
        let b = vec!["h:3".to_string(), "h:1".to_string(), "h:2".to_string()];
        for r in ["orders:42", "x", "", "nightly-report"] {
            assert_eq!(a[line_instance(r, &by_name(&a))], b[line_instance(r, &by_name(&b))], "{r}");
        }
        assert_eq!(line_instance("r", &by_name(&[])), 0);
    }
}
