//! The Redlock algorithm over N independent instances.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::join_all;
use rand::Rng;

use crate::error::Error;
use crate::outcome::{InstanceOutcome, Outcome};
use crate::quorum::{self, NotGranted};
use crate::settings::{Mode, Settings};
use crate::transport::{Identities, Instance, InstanceStatus, InstanceSummary, InstanceTop, Share};

/// A lock held on a quorum.
#[derive(Clone, Debug)]
pub struct Lock {
    pub resource: String,
    /// The random owner value of this acquisition.
    pub owner: String,
    /// The fencing token (module mode): larger than every earlier holder's.
    pub token: Option<i64>,
    /// How long the lock is safe to use, from `acquired_at`.
    pub validity: Duration,
    pub acquired_at: Instant,
    pub ttl: Duration,
    /// Each instance's answer to the acquisition (after any write-back).
    pub instances: Vec<InstanceOutcome>,
    /// Instances whose smaller token was raised to `token` (FENCE).
    pub fenced: usize,
    /// A shared hold (`LOCK.ACQUIRE ... SHARED`) of a read-write lock:
    /// other shared holders may hold it too, an exclusive one may not.
    pub shared: bool,
    /// Holds of this acquisition, shared by its copies: 1 at the grant,
    /// one more per `reenter`, one less per release; the servers release
    /// the lock when it reaches 0.
    holds: Arc<AtomicUsize>,
    /// Set once the lock is released (or its acquisition given up): a
    /// waiting request of the head of the line that is granted after that
    /// is released at once (see `attempt_at_head`).
    ended: Arc<AtomicBool>,
}

/// What asking for a place in line came to.
enum Joined {
    Place(Ticket),
    /// The line instance did not answer in time: ask again.
    Again,
    /// No place: the line instance does not serve it, stopped answering
    /// while we waited, or the deadline came.
    Without,
}

/// What the first round of a waiting acquisition came to (`first_try`).
enum FirstTry {
    Lock(Lock),
    /// Others are in line: wait behind them.
    Behind,
    /// Neither (the lock is held, nobody in line): take a place.
    Again,
}

/// A release that did not reach an instance is sent again after this
/// pause, doubled each time up to `RELEASE_RETRY_LAST` (`release_later`).
const RELEASE_RETRY_FIRST: Duration = Duration::from_millis(20);
const RELEASE_RETRY_LAST: Duration = Duration::from_millis(250);

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
/// the lock itself during the hold.
#[derive(Clone, Debug)]
struct Ticket {
    instance: usize,
    key: String,
    /// The mode the place is held in (the request's own).
    share: Share,
    owner: String,
    /// The line instance's token for the ticket, a floor for the lock's.
    token: Option<i64>,
}

impl Lock {
    /// Validity left now; zero once it ran out.
    pub fn remaining(&self) -> Duration {
        self.validity.saturating_sub(self.acquired_at.elapsed())
    }

    /// Re-enters the lock: its holder takes it once more, at once and
    /// without asking the servers, and must release it once more. Every
    /// `Redlock::release` of this lock or of a copy drops one hold; the
    /// last one releases it on the servers. Reentrancy belongs to the
    /// holder of the lock, never to a handle or a resource name: another
    /// task, even on the same handle, that asks for the resource waits
    /// like any other client.
    ///
    /// `Error::Expired` when the validity of this copy ran out (re-enter
    /// the latest copy, e.g. `LockGuard::lock()`, or the one `extend`
    /// returned) or every hold was released already.
    pub fn reenter(&self) -> Result<Lock, Error> {
        let expired = || Error::Expired { resource: self.resource.clone() };
        if self.remaining().is_zero() {
            return Err(expired());
        }
        self.holds.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| (n > 0).then(|| n + 1)).map_err(|_| expired())?;
        Ok(self.clone())
    }

    /// Holds not yet released (0 once the lock was released).
    pub fn holds(&self) -> usize {
        self.holds.load(Ordering::SeqCst)
    }

    /// Drops one hold; returns the holds left (0: release on the servers).
    pub(crate) fn drop_hold(&self) -> usize {
        match self.holds.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)) {
            Ok(before) => before.saturating_sub(1),
            Err(_) => 0,
        }
    }
}

pub(crate) struct Inner {
    pub(crate) instances: Vec<Instance>,
    pub(crate) settings: Settings,
    quorum: usize,
    /// Instance indexes in server-name order, for `line_instance`.
    line_order: Vec<usize>,
    /// The largest token any instance issued to this handle: the head of
    /// a line asks for more (FENCE), so that the instances, which have
    /// mostly issued no token since, agree on one and need no write-back.
    highest_token: AtomicI64,
    /// Places in line being given up in the background (`settle`).
    departures: Departures,
    /// The servers by what they are (`run_id`), to refuse one listed twice.
    identities: Arc<Identities>,
    /// Set once every server was contacted (and so identified) or failed
    /// to be, before the first request of this handle.
    first_contact: tokio::sync::OnceCell<()>,
}

/// Background work of a handle that a process about to exit waits for.
#[derive(Default)]
struct Departures {
    running: AtomicUsize,
    idle: tokio::sync::Notify,
}

/// A Redlock client. Cheap to clone; clones share connections. Every
/// `lock`, `try_lock`, `lock_until` and `guard` is a new acquisition with
/// its own owner, so tasks sharing a handle exclude each other like
/// separate processes; a holder re-enters with `Lock::reenter` or
/// `LockGuard::reenter`.
#[derive(Clone)]
pub struct Redlock {
    pub(crate) inner: Arc<Inner>,
}

/// The result of a release.
#[derive(Clone, Debug)]
pub struct Released {
    /// Instances that released the lock.
    pub released: usize,
    /// Holds of the lock still open (see `Lock::reenter`); 0 when released.
    pub remaining_holds: usize,
    pub instances: Vec<InstanceOutcome>,
}

/// A failed attempt of `lock_until_observed`, reported before its retry.
#[derive(Debug)]
pub struct Retry<'a> {
    /// Attempts made so far (1 for the first).
    pub attempt: u32,
    /// Why this attempt got no quorum.
    pub why: NotGranted,
    /// Each instance's answer to it.
    pub outcomes: &'a [InstanceOutcome],
    /// The wait before the next attempt.
    pub delay: Duration,
}

/// While restart quarantines stand in the way, attempts are at most this
/// far apart (and one comes right when enough quarantines end).
const QUARANTINE_POLL: Duration = Duration::from_secs(1);

fn new_owner() -> String {
    let mut bytes = [0u8; 20];
    rand::rng().fill(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Redlock {
    /// A client for the servers at `urls` (`redis://host:port`). Connections
    /// are made on first use and remade after a server comes back.
    pub fn new<S: AsRef<str>>(urls: &[S], settings: Settings) -> Result<Redlock, Error> {
        if urls.is_empty() {
            return Err(Error::Config("no servers given".into()));
        }
        settings.validate(urls.len())?;
        let identities = Arc::new(Identities::default());
        // The TLS settings' files are read here, once, for every rediss://
        // server; set without one, they would be silently unused.
        let tls = if urls.iter().any(|u| crate::transport::is_tls_url(u.as_ref())) {
            Some(crate::tls::Tls::load(&settings.tls).map_err(Error::Config)?)
        } else if settings.tls.is_set() {
            return Err(Error::Config(
                "TLS settings (a CA certificate, a client certificate or key, or insecure) are given, but no server is \
                 rediss://: use rediss://host:port for servers that speak TLS, or leave the TLS settings out"
                    .into(),
            ));
        } else {
            None
        };
        let instances = urls
            .iter()
            .enumerate()
            .map(|(i, u)| {
                let url = u.as_ref();
                if let Some(servers) = servers_in_one(url) {
                    return Err(Error::Config(format!(
                        "{url:?} names {} servers in one entry: give each its own entry of the list ({})",
                        servers.len(),
                        servers.iter().map(|s| format!("{s:?}")).collect::<Vec<_>>().join(", ")
                    )));
                }
                crate::transport::check_url(url).map_err(|e| Error::Config(format!("{url}: {e}")))?;
                Instance::in_list(url, &settings, i, Arc::clone(&identities), tls.as_ref())
                    .map_err(|e| Error::Config(format!("{url}: {e}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        spelled_once(urls, &instances)?;
        let quorum = settings.quorum.unwrap_or_else(|| quorum::majority(instances.len()));
        let names: Vec<String> = instances.iter().map(|i| i.name.clone()).collect();
        let line_order = by_name(&names);
        Ok(Redlock {
            inner: Arc::new(Inner {
                instances,
                settings,
                quorum,
                line_order,
                highest_token: AtomicI64::new(0),
                departures: Departures::default(),
                identities,
                first_contact: tokio::sync::OnceCell::new(),
            }),
        })
    }

    pub fn quorum(&self) -> usize {
        self.inner.quorum
    }

    /// Checks that no two entries of the server list are one server: the
    /// first call contacts every server (each connection is identified by
    /// the `run_id` of `INFO server` when it is made, before any other
    /// command is sent on it), later calls only look, and ask an entry
    /// found repeating another again. A server that could not be reached
    /// is identified when it is, and refused then if it repeats another.
    /// Every acquisition and extension calls it first; `Error::Config`
    /// names the repeated server.
    pub async fn verify_servers(&self) -> Result<(), Error> {
        self.inner
            .first_contact
            .get_or_init(|| async {
                join_all(self.inner.instances.iter().map(|i| i.contact())).await;
            })
            .await;
        // An entry found to repeat another (at the first contact, or since:
        // an address that moved) is asked again who it is: moved back, it
        // counts again.
        let repeated: Vec<String> = self.inner.identities.duplicates().into_iter().map(|(entry, _, _)| entry).collect();
        if !repeated.is_empty() {
            join_all(self.inner.instances.iter().filter(|i| repeated.contains(&i.name)).map(|i| i.contact())).await;
        }
        match self.inner.identities.duplicates().first() {
            None => Ok(()),
            Some((entry, other, run_id)) => Err(duplicate_server(entry, other, run_id, self.insecure())),
        }
    }

    /// Whether any server is reached with TLS certificate checks off
    /// (`TlsSettings::insecure`): errors that could come of it say so.
    fn insecure(&self) -> bool {
        self.inner.instances.iter().any(Instance::insecure)
    }

    pub fn servers(&self) -> Vec<String> {
        self.inner.instances.iter().map(|i| i.name.clone()).collect()
    }

    pub fn settings(&self) -> &Settings {
        &self.inner.settings
    }

    /// Takes `resource` for `ttl`, retrying as configured. It polls: while
    /// others wait in the resource's line (`lock_until`, `guard`), the
    /// servers serve them first, as they serve a single server's queue.
    pub async fn lock(&self, resource: &str, ttl: Duration) -> Result<Lock, Error> {
        self.lock_until(resource, ttl, None).await
    }

    /// One attempt, no retry.
    pub async fn try_lock(&self, resource: &str, ttl: Duration) -> Result<Lock, Error> {
        self.verify_servers().await?;
        self.attempt(resource, ttl, false).await.map_err(|outcomes| self.not_acquired(resource, 1, outcomes))
    }

    /// One attempt at a shared hold of `resource`, a read-write lock: any
    /// number of shared holders at once, never beside an exclusive one.
    /// Safe by majority like the mutex, since a writer's majority and every
    /// reader's share an instance, which grants only one of the two kinds.
    pub async fn try_lock_shared(&self, resource: &str, ttl: Duration) -> Result<Lock, Error> {
        self.verify_servers().await?;
        self.attempt(resource, ttl, true).await.map_err(|outcomes| self.not_acquired(resource, 1, outcomes))
    }

    /// A shared hold of `resource`, retried until granted, the retries are
    /// used up or `deadline` passes. With a deadline (module mode) the
    /// reader takes a place in the resource's line like a writer, held
    /// shared (see `lock_until`): readers and writers are served in
    /// arrival order, consecutive readers together.
    pub async fn lock_shared_until(&self, resource: &str, ttl: Duration, deadline: Option<Instant>) -> Result<Lock, Error> {
        self.acquire_until(resource, ttl, deadline, Kind::Shared, |_| {}).await
    }

    /// Takes `resource`, retrying until it is granted, the retries are used
    /// up, or (with `deadline`) the deadline passes, whichever comes first.
    /// With a deadline the retry count does not limit the attempts.
    ///
    /// With a deadline in module mode, clients first take a place in the
    /// resource's line: a module lock on a key derived from the resource,
    /// on one instance chosen by hashing the resource, held in the
    /// request's own mode (`Kind::line`), taken at once when nobody is
    /// ahead, else waited for in the module's first-come, first-served
    /// queue (`LOCK.ACQUIRE ... WAIT`) for the whole wait, and renewed
    /// while held. The head of the line
    /// waits on the lock itself, on every instance at once (`LOCK.ACQUIRE
    /// resource ... WAIT`), so that each instance hands the lock over the
    /// moment the holder's release reaches it, without a round trip of the
    /// client in between; it gives its place up as soon as a quorum
    /// granted, and the next in line starts waiting on the lock during the
    /// hold. Waiters are so served in turn instead of polling after random
    /// delays, and only one of them waits on the lock, so they never split
    /// a vote. The line only orders the waiters: the lock is still the
    /// quorum's, so a line instance that is down or frozen costs fairness
    /// (a waiter queued there gives up its position once the instance
    /// stops answering), never safety.
    ///
    /// Servers in restart quarantine (`TRYAGAIN restart quarantine`) never
    /// count as granting. When their quarantine alone stands between the
    /// client and a quorum, attempts come at most a second apart and right
    /// when enough quarantines end; without a deadline, a quarantine that
    /// outlasts the retries left ends the attempts at once
    /// (`Error::NotAcquired` with `NotGranted::Quarantine`).
    pub async fn lock_until(&self, resource: &str, ttl: Duration, deadline: Option<Instant>) -> Result<Lock, Error> {
        self.lock_until_observed(resource, ttl, deadline, |_| {}).await
    }

    /// `lock_until`, calling `observe` after each failed attempt that will
    /// be retried (e.g. to show why it waits).
    pub async fn lock_until_observed<F>(&self, resource: &str, ttl: Duration, deadline: Option<Instant>, observe: F) -> Result<Lock, Error>
    where
        F: FnMut(&Retry<'_>) + Send,
    {
        self.acquire_until(resource, ttl, deadline, Kind::Exclusive, observe).await
    }

    /// The acquisition loop of every kind: rounds until granted, the
    /// retries are used up or `deadline` passes. With a deadline in module
    /// mode the request keeps a place in the resource's line for its whole
    /// wait (see `lock_until`), whatever its kind.
    pub(crate) async fn acquire_until<F>(
        &self,
        resource: &str,
        ttl: Duration,
        deadline: Option<Instant>,
        kind: Kind,
        mut observe: F,
    ) -> Result<Lock, Error>
    where
        F: FnMut(&Retry<'_>) + Send,
    {
        self.verify_servers().await?;
        let hi = self.inner.settings.retry_delay.1;
        let lined = self.inner.settings.mode == Mode::Module;
        // Given up at the grant, when the wait ends, or when this future is
        // dropped (the caller gave up): never left behind for a whole ttl.
        let mut place = Place { redlock: self.clone(), ticket: None, renewed: Instant::now() };
        let mut head_delay = Duration::from_millis(1);
        let mut attempts = 0u32;
        // The head asks for a token above the ticket's and every one this
        // handle saw, unless an instance refused that as too far ahead.
        let mut ask_floor = true;
        // First the lock, and whether anyone is in line, at once: nobody in
        // line and the lock free, it is ours in one round trip; others in
        // line, what we took goes back and we wait behind them.
        let mut behind = false;
        if let (true, Some(_), Kind::Exclusive | Kind::Shared) = (lined, deadline, kind) {
            match self.first_try(resource, kind, ttl).await {
                FirstTry::Lock(lock) => return Ok(lock),
                FirstTry::Behind => behind = true,
                FirstTry::Again => {}
            }
        }
        loop {
            attempts += 1;
            // Not in line (yet, or any more: the line instance did not answer,
            // or the place was lost): take a place, never poll behind the line.
            if let (true, None, Some(d)) = (lined, &place.ticket, deadline) {
                // A request that timed out (a busy machine, a slow reply) is
                // asked again at once, a few times: falling back to polling
                // would leave this waiter behind everyone in line.
                for _ in 0..=JOIN_RETRIES {
                    match self.join_line(resource, kind, ttl, d, !std::mem::take(&mut behind)).await {
                        Joined::Place(ticket) => place.ticket = Some(ticket),
                        Joined::Again if Instant::now() < d => continue,
                        Joined::Again | Joined::Without => {}
                    }
                    break;
                }
                place.renewed = Instant::now();
                head_delay = Duration::from_millis(1);
            }
            let round_started = Instant::now();
            // A place held across rounds is renewed before its ttl runs out.
            let renew = place.ticket.as_ref().filter(|_| place.renewed.elapsed() >= ttl / 3);
            let renewal = async {
                match renew {
                    Some(t) => Some(self.renew_ticket(t, ttl).await),
                    None => None,
                }
            };
            let round = async {
                match (&place.ticket, deadline, kind) {
                    (Some(t), Some(d), Kind::Exclusive | Kind::Shared) => {
                        // A window well inside the ttl: the validity counts
                        // from the moment the waits were sent.
                        let window = (ttl / 3).min(d.saturating_duration_since(round_started)).max(Duration::from_millis(1));
                        let floor =
                            ask_floor.then(|| t.token.unwrap_or(0).max(self.inner.highest_token.load(Ordering::Relaxed)).saturating_add(1));
                        (self.attempt_at_head(resource, ttl, window, floor, kind == Kind::Shared).await, Some(window))
                    }
                    (_, _, Kind::Permit(limit)) => (self.attempt_permit(resource, limit, ttl).await, None),
                    _ => (self.attempt(resource, ttl, kind == Kind::Shared).await, None),
                }
            };
            let (renewed, (taken, window)) = futures::join!(renewal, round);
            match renewed {
                Some(true) => place.renewed = Instant::now(),
                // The place is gone (the line instance restarted, or it ran
                // out): a new one next round.
                Some(false) => place.drop_ticket(),
                None => {}
            }
            let outcomes = match taken {
                Ok(lock) => {
                    if let Some(t) = place.ticket.take() {
                        self.leave_line_soon(t);
                    }
                    return Ok(lock);
                }
                Err(outcomes) => outcomes,
            };
            if outcomes.iter().any(|o| matches!(&o.outcome, Outcome::Failed(m) if m.contains("max-token-lead"))) {
                ask_floor = false;
            }
            let why = quorum::not_granted(&outcomes, self.inner.quorum);
            // No retry changes a refusal of the request itself.
            let hopeless = matches!(why, NotGranted::Rejected { rejection, .. } if rejection.is_configuration())
                || repeated_server(&outcomes, self.insecure()).is_some();
            if hopeless {
                place.leave().await;
                return Err(self.not_acquired(resource, attempts, outcomes));
            }
            let delay = match window {
                // The window passed with the lock held: wait on at once.
                Some(w) if round_started.elapsed() >= w => Duration::ZERO,
                // First in line: the resource frees up any moment now.
                _ if place.ticket.is_some() => {
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
                return Err(self.not_acquired(resource, attempts, outcomes));
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
            Some(instance) => instance.acquire_as(&t.key, &t.owner, ttl, None, t.share, PLACE_SESSION).await.outcome != Outcome::Refused,
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

    /// The error of an acquisition that ended without a lock: a server
    /// found listed twice (`Error::Config`), the request refused
    /// (`Error::Rejected`), or not acquired.
    pub(crate) fn not_acquired(&self, resource: &str, attempts: u32, outcomes: Vec<InstanceOutcome>) -> Error {
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

    /// Takes the head of `resource`'s line, in the request's own mode
    /// (`Kind::line`): at once when nobody is ahead, else by waiting in the
    /// module's first-come, first-served queue on the line instance until
    /// `deadline`, whatever the ttl. `Again` when the line instance did not
    /// answer the first request in time (ask again), `Without` if it does
    /// not serve the line, or stops answering while we wait (watched: a
    /// frozen line instance must not hold its waiters until their
    /// deadlines).
    async fn join_line(&self, resource: &str, kind: Kind, ttl: Duration, deadline: Instant, ask_first: bool) -> Joined {
        let index = line_instance(resource, &self.inner.line_order);
        let Some(instance) = self.inner.instances.get(index) else { return Joined::Without };
        let (key, share) = kind.line(resource);
        let owner = new_owner();
        // Without `ask_first` the caller just found others in line: straight
        // to the queue (which grants at once if the line emptied since).
        if ask_first {
            match instance.acquire_as(&key, &owner, ttl, None, share, PLACE_SESSION).await.outcome {
                Outcome::Granted { token } => return Joined::Place(Ticket { instance: index, key, share, owner, token }),
                Outcome::Refused => {}
                Outcome::Timeout => {
                    // It may have granted just after the timeout: not left held.
                    self.leave_line_soon(Ticket { instance: index, key, share, owner, token: None });
                    return Joined::Again;
                }
                _ => return Joined::Without,
            }
        }
        let wait = deadline.saturating_duration_since(Instant::now());
        if wait.is_zero() {
            return Joined::Without;
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
        tokio::select! {
            waited = instance.wait_for(&key, &owner, ttl, wait, None, share, PLACE_SESSION) => match waited.outcome {
                Outcome::Granted { token } => Joined::Place(Ticket { instance: index, key, share, owner, token }),
                _ => {
                    // A grant that raced the timeout must not block the line.
                    instance.release(&key, &owner).await;
                    Joined::Without
                }
            },
            () = watch => {
                // The wait's connection is closed (which leaves the queue);
                // a grant that raced it is undone when the server answers.
                self.leave_line_soon(Ticket { instance: index, key, share, owner, token: None });
                Joined::Without
            }
        }
    }

    /// The first round of a waiting acquisition: a plain round on the lock,
    /// and in the same round trip a look at `resource`'s line (whether its
    /// place is held: someone is first in line). Taking no place here keeps
    /// the line instance's token counter in step with the others, so an
    /// uncontended grant needs no write-back round. A lock taken while
    /// someone is in line is given back at once: it was free on the servers
    /// only between two holders of the line, and a newcomer must not
    /// overtake them.
    async fn first_try(&self, resource: &str, kind: Kind, ttl: Duration) -> FirstTry {
        let index = line_instance(resource, &self.inner.line_order);
        let Some(instance) = self.inner.instances.get(index) else { return FirstTry::Again };
        let (key, _) = kind.line(resource);
        let (someone_in_line, taken) = futures::join!(instance.exists(&key), self.attempt(resource, ttl, kind == Kind::Shared));
        match (someone_in_line, taken) {
            (Some(true), taken) => {
                if let Ok(lock) = taken {
                    // Nothing to report: the release reaches every instance
                    // or runs out with the ttl.
                    let _ = self.release_on_servers(&lock).await;
                }
                FirstTry::Behind
            }
            // Nobody in line; or the line instance cannot tell, when a lock
            // taken stands as a plain round's would (the line's fallback).
            (_, Ok(lock)) => FirstTry::Lock(lock),
            (_, Err(_)) => FirstTry::Again,
        }
    }

    /// Gives the place in line up in the background, right after the
    /// grant: the next in line starts waiting on the lock during the hold.
    fn leave_line_soon(&self, ticket: Ticket) {
        let me = self.clone();
        // Outside a runtime (not reachable from the async API) the ticket's
        // ttl ends it.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            self.inner.departures.running.fetch_add(1, Ordering::SeqCst);
            runtime.spawn(async move {
                me.leave_line(Some(ticket)).await;
                if me.inner.departures.running.fetch_sub(1, Ordering::SeqCst) == 1 {
                    me.inner.departures.idle.notify_waiters();
                }
            });
        }
    }

    /// Waits until the places in line this handle gives up in the
    /// background after a grant are given up. A process that exits right
    /// after taking a lock calls it first: otherwise its place would stay
    /// taken until its ttl, and the next in line would wait that long.
    pub async fn settle(&self) {
        loop {
            let idle = self.inner.departures.idle.notified();
            if self.inner.departures.running.load(Ordering::SeqCst) == 0 {
                return;
            }
            idle.await;
        }
    }

    async fn leave_line(&self, ticket: Option<Ticket>) {
        if let Some(t) = ticket {
            if let Some(instance) = self.inner.instances.get(t.instance) {
                instance.release(&t.key, &t.owner).await;
            }
        }
    }

    /// One Redlock round. `Err(outcomes)` when not granted (and nothing is
    /// left behind). Only grants count: an instance that failed in any way
    /// (unreachable, timed out, in quarantine, without the module, ...)
    /// is one that did not grant.
    pub(crate) async fn attempt(&self, resource: &str, ttl: Duration, shared: bool) -> Result<Lock, Vec<InstanceOutcome>> {
        let owner = new_owner();
        let started = Instant::now();
        let session = self.inner.settings.session_delay_ms(ttl);
        let outcomes = join_all(self.inner.instances.iter().map(|i| i.acquire(resource, &owner, ttl, None, shared, session))).await;
        self.conclude(resource, owner, ttl, shared, started, outcomes, Arc::new(AtomicBool::new(false)), false).await
    }

    /// One round of the head of the line: `LOCK.ACQUIRE resource owner ttl
    /// [FENCE floor] WAIT window` on every instance at once. Each instance
    /// grants the moment the lock is free there, first in its queue, so
    /// the holder's release hands the lock over on the servers themselves.
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
    async fn attempt_at_head(
        &self,
        resource: &str,
        ttl: Duration,
        window: Duration,
        floor: Option<i64>,
        shared: bool,
    ) -> Result<Lock, Vec<InstanceOutcome>> {
        // The waits run as tasks of their own (see "late" above); without a
        // tokio runtime to run them, a plain round.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return self.attempt(resource, ttl, shared).await;
        };
        let owner = new_owner();
        let sent = Instant::now();
        let n = self.inner.instances.len();
        let round = Arc::new(HeadRound {
            state: std::sync::Mutex::new(RoundState { outcomes: vec![None; n], decided: false }),
            changed: tokio::sync::Notify::new(),
            ended: Arc::new(AtomicBool::new(false)),
        });
        for i in 0..n {
            let (me, round, resource, owner) = (self.clone(), Arc::clone(&round), resource.to_string(), owner.clone());
            runtime.spawn(async move {
                let Some(instance) = me.inner.instances.get(i) else { return };
                let share = if shared { Share::Shared } else { Share::Exclusive };
                let session = me.inner.settings.session_delay_ms(ttl);
                let outcome = instance.wait_for(&resource, &owner, ttl, window, floor, share, session).await;
                let granted = matches!(outcome.outcome, Outcome::Granted { .. });
                if !round.report(i, outcome) && granted && round.ended.load(Ordering::SeqCst) {
                    instance.release(&resource, &owner).await;
                }
            });
        }
        // Dropped before the decision (the caller gave up the acquisition):
        // nothing may stay granted.
        let mut abandon = Abandon { redlock: self, round: &round, resource, owner: owner.clone(), armed: true };
        let outcomes = round.decide(self.inner.quorum, &self.inner.instances).await;
        abandon.armed = false;
        self.conclude(resource, owner, ttl, shared, sent, outcomes, Arc::clone(&round.ended), true).await
    }

    /// The end of a round with these `outcomes`, its requests sent at
    /// `started`: with a quorum of grants, the tokens reconciled and the
    /// validity left, the lock; otherwise `ended` set first (see
    /// `attempt_at_head`) and every grant released: everywhere when
    /// `late_grants` (waits still running may be granted), else wherever
    /// the answer was not a plain refusal.
    #[allow(clippy::too_many_arguments)]
    async fn conclude(
        &self,
        resource: &str,
        owner: String,
        ttl: Duration,
        shared: bool,
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
            let undone = join_all(undo.map(|(i, instance)| async move { (i, instance.release(resource, owner).await.outcome) })).await;
            self.release_later(resource, owner, ttl, undone);
            Err(outcomes)
        };
        // A server found listed twice: its entries make the count wrong.
        if granted.len() < self.inner.quorum || repeated_server(&outcomes, self.insecure()).is_some() {
            return give_up(outcomes).await;
        }
        let (token, fenced) = match self.inner.settings.mode {
            Mode::Script => (None, 0),
            Mode::Module => match self.reconcile(resource, &owner, ttl, shared, &granted, &mut outcomes).await {
                Some((token, fenced)) => (Some(token), fenced),
                None => return give_up(outcomes).await,
            },
        };
        let drift = quorum::drift(ttl, self.inner.settings.drift_factor);
        let Some(validity) = quorum::validity(ttl, started.elapsed(), drift) else {
            return give_up(outcomes).await;
        };
        if let Some(t) = token {
            self.inner.highest_token.fetch_max(t, Ordering::Relaxed);
        }
        Ok(Lock {
            resource: resource.to_string(),
            owner,
            token,
            validity,
            acquired_at: started,
            ttl,
            instances: outcomes,
            fenced,
            shared,
            holds: Arc::new(AtomicUsize::new(1)),
            ended,
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
        resource: &str,
        owner: &str,
        ttl: Duration,
        shared: bool,
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
                // holder asking without SHARED would be asking to upgrade.
                let session = self.inner.settings.session_delay_ms(ttl);
                Some(async move { (i, instance.acquire(resource, owner, ttl, Some(plan.token), shared, session).await) })
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

    /// Releases on every instance, including those that did not answer.
    async fn release_everywhere(&self, resource: &str, owner: &str) -> Vec<InstanceOutcome> {
        join_all(self.inner.instances.iter().map(|i| i.release(resource, owner))).await
    }

    /// Makes the lease `ttl` from now on a quorum, within the validity
    /// left; returns the lock with its new validity.
    pub async fn extend(&self, lock: &Lock, ttl: Duration) -> Result<Lock, Error> {
        if lock.remaining().is_zero() {
            return Err(Error::Expired { resource: lock.resource.clone() });
        }
        self.verify_servers().await?;
        let started = Instant::now();
        // A hold bound to its connection is extended on that connection only
        // (see `Settings::release_on_disconnect`).
        let bound = |i: usize| lock.instances.get(i).and_then(|o| o.connection);
        let outcomes = join_all(
            self.inner.instances.iter().enumerate().map(|(i, inst)| inst.extend_bound(&lock.resource, &lock.owner, ttl, bound(i))),
        )
        .await;
        let extended = outcomes.iter().filter(|o| o.outcome == Outcome::Done).count();
        let drift = quorum::drift(ttl, self.inner.settings.drift_factor);
        let validity = quorum::validity(ttl, started.elapsed(), drift);
        if let Some(e) = repeated_server(&outcomes, self.insecure()) {
            return Err(e);
        }
        match validity {
            Some(validity) if extended >= self.inner.quorum && !lock.remaining().is_zero() => {
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
        self.release_owner_within(&lock.resource, &lock.owner, Some(lock.ttl)).await
    }

    /// Sends the release of `owner`'s hold of `resource` again, in the
    /// background, to every instance of `sent` (index, outcome of the
    /// release) that it did not reach (timed out, unreachable: a reset or
    /// a link that went down), until it lands there or the lease it may
    /// still hold there (at most `ttl` from now) has run out. Otherwise a
    /// lock whose release was lost in a blip stays held for its whole ttl,
    /// and every waiter waits that long. Owner-checked and never taking
    /// anything, a late release can only end this very hold: each lock has
    /// an owner of its own. Outside a runtime, the lease ends it.
    fn release_later(&self, resource: &str, owner: &str, ttl: Duration, sent: Vec<(usize, Outcome)>) {
        let mut pending: Vec<usize> =
            sent.into_iter().filter(|(_, o)| matches!(o, Outcome::Timeout | Outcome::Unreachable { .. })).map(|(i, _)| i).collect();
        if pending.is_empty() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let (me, resource, owner) = (self.clone(), resource.to_string(), owner.to_string());
        let until = Instant::now() + ttl;
        runtime.spawn(async move {
            let mut pause = RELEASE_RETRY_FIRST;
            loop {
                let left = until.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return;
                }
                tokio::time::sleep(pause.min(left)).await;
                pause = pause.saturating_mul(2).min(RELEASE_RETRY_LAST);
                let sent =
                    join_all(pending.iter().filter_map(|&i| me.inner.instances.get(i).map(|inst| inst.release(&resource, &owner)))).await;
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
        self.release_owner_within(resource, owner, None).await
    }

    /// `release_owner`; with `ttl`, the lease a server may still hold, an
    /// instance the release could not reach is sent it again in the
    /// background (`release_later`).
    async fn release_owner_within(&self, resource: &str, owner: &str, ttl: Option<Duration>) -> Result<Released, Error> {
        let verified = self.verify_servers().await;
        let instances = self.release_everywhere(resource, owner).await;
        if let Some(ttl) = ttl {
            self.release_later(resource, owner, ttl, instances.iter().map(|o| o.outcome.clone()).enumerate().collect());
        }
        verified?;
        let released = instances.iter().filter(|o| o.outcome == Outcome::Done).count();
        Ok(Released { released, remaining_holds: 0, instances })
    }

    /// Extends `resource` held by `owner` (for locks taken elsewhere).
    pub async fn extend_owner(&self, resource: &str, owner: &str, ttl: Duration) -> Result<Lock, Error> {
        let lock = Lock {
            resource: resource.to_string(),
            owner: owner.to_string(),
            token: None,
            validity: ttl,
            acquired_at: Instant::now(),
            ttl,
            instances: Vec::new(),
            fenced: 0,
            shared: false,
            holds: Arc::new(AtomicUsize::new(1)),
            ended: Arc::new(AtomicBool::new(false)),
        };
        self.extend(&lock, ttl).await
    }

    /// Each instance's view of `resource`.
    pub async fn status(&self, resource: &str) -> Vec<InstanceStatus> {
        join_all(self.inner.instances.iter().map(|i| i.status(resource))).await
    }

    /// Every instance's `count` most contended locks (`LOCK.TOP`), most
    /// waiters first.
    pub async fn top(&self, count: usize) -> Vec<InstanceTop> {
        join_all(self.inner.instances.iter().map(|i| i.top(count))).await
    }

    /// Every instance's lock service as a whole: reachable, quarantine,
    /// locks held, waiters, highest token (`INFO redislock`).
    pub async fn summary(&self) -> Vec<InstanceSummary> {
        join_all(self.inner.instances.iter().map(|i| i.summary())).await
    }
}

/// A grant in reconciliation: (instance index, token).
type Grant = (usize, i64);

/// What an acquisition asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Exclusive,
    /// A shared hold of a read-write lock.
    Shared,
    /// One of the `n` permits of a semaphore.
    Permit(u32),
}

impl Kind {
    /// The line's key and how a place in it is held: in the request's own
    /// mode, so that the line instance's FIFO orders every kind, batches
    /// consecutive readers (shared places) and never lets a reader pass a
    /// writer ahead of it; a semaphore's line admits `n` at once, one per
    /// permit. Readers and writers of one resource share one line; a
    /// semaphore has a line of its own.
    fn line(self, resource: &str) -> (String, Share) {
        match self {
            Kind::Exclusive => (format!("redlock:line:{resource}"), Share::Exclusive),
            Kind::Shared => (format!("redlock:line:{resource}"), Share::Shared),
            Kind::Permit(n) => (format!("redlock:permit-line:{resource}"), Share::Limit(n)),
        }
    }
}

/// An acquisition's place in line, given up however the acquisition ends.
struct Place {
    redlock: Redlock,
    ticket: Option<Ticket>,
    /// When the place's lease was last set.
    renewed: Instant,
}

impl Place {
    /// Gives the place up now (the wait ended without a grant).
    async fn leave(&mut self) {
        let ticket = self.ticket.take();
        self.redlock.leave_line(ticket).await;
    }

    /// Forgets a place found gone, releasing it in case it is not.
    fn drop_ticket(&mut self) {
        if let Some(t) = self.ticket.take() {
            self.redlock.leave_line_soon(t);
        }
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        // The acquisition was dropped while in line: give the place up in
        // the background (settle waits for it), not after a whole ttl.
        self.drop_ticket();
    }
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
    resource: &'a str,
    owner: String,
    armed: bool,
}

impl Drop for Abandon<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        self.round.abandon();
        // Grants that came before are released here, later ones by their task.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (me, resource, owner) = (self.redlock.clone(), self.resource.to_string(), std::mem::take(&mut self.owner));
            runtime.spawn(async move {
                me.release_everywhere(&resource, &owner).await;
            });
        }
    }
}

/// The servers one entry of a server list names when it names several: a
/// list written as one string, its URLs joined by commas (outside a
/// `redis+cluster://` seed list or a `redis+sentinel://` list of
/// sentinels), spaces or semicolons. `None` for an entry
/// that names one server (a cluster's seed list is one), and for anything
/// else the URL check should judge: a piece after a separator counts as
/// another server only if it has a scheme (`redis://...`) or is a bare
/// `host:port`, so a password with a space or a semicolon stays one URL.
pub fn servers_in_one(entry: &str) -> Option<Vec<String>> {
    let mut servers: Vec<String> = Vec::new();
    let mut after_comma = false;
    for piece in entry.split_inclusive(|c: char| c == ',' || c == ';' || c.is_whitespace()) {
        let sep_comma = after_comma;
        after_comma = piece.ends_with(',');
        let piece = piece.trim_end_matches(|c: char| c == ',' || c == ';' || c.is_whitespace());
        if piece.is_empty() {
            // A run of separators: a comma anywhere in it is a comma.
            after_comma |= sep_comma;
            continue;
        }
        let seed = sep_comma && servers.last().is_some_and(|last| crate::transport::takes_more_hosts(last));
        if servers.is_empty() || piece.contains("://") || (!seed && is_host_port(piece)) {
            servers.push(piece.to_string());
        } else if let Some(cluster) = servers.last_mut().filter(|_| seed) {
            // One more seed node of the cluster before it.
            cluster.push(',');
            cluster.push_str(piece);
        } else {
            return None;
        }
    }
    (servers.len() > 1).then_some(servers)
}

/// `host:port` or `[v6]:port`, nothing more (no credentials, no path).
fn is_host_port(s: &str) -> bool {
    let Some((host, port)) = s.rsplit_once(':') else {
        return false;
    };
    let host_ok = match host.strip_prefix('[') {
        Some(v6) => v6.strip_suffix(']').is_some_and(|a| !a.is_empty() && a.chars().all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.')),
        None => !host.is_empty() && host.chars().all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-' || c == '_'),
    };
    host_ok && !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit())
}

/// Refuses a server list whose entries spell one server twice: the same
/// `host:port` (the same URL, another db number of it, `host:port` and
/// `redis://host:port`, a cluster seed listed as a server too).
fn spelled_once<S: AsRef<str>>(urls: &[S], instances: &[Instance]) -> Result<(), Error> {
    let mut seen: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for (i, instance) in instances.iter().enumerate() {
        for address in &instance.addresses {
            match seen.get(address.as_str()) {
                Some(&j) if j != i => {
                    let (first, second) = (urls.get(j).map_or("", |u| u.as_ref()), urls.get(i).map_or("", |u| u.as_ref()));
                    return Err(Error::Config(format!(
                        "{first:?} and {second:?} are the same server ({address}): list each server once; \
                         a server listed twice would count twice toward the quorum"
                    )));
                }
                _ => {
                    seen.insert(address, i);
                }
            }
        }
    }
    Ok(())
}

/// `Error::Config` when a round found an entry to repeat another server.
fn repeated_server(outcomes: &[InstanceOutcome], insecure: bool) -> Option<Error> {
    outcomes.iter().find_map(|o| match &o.outcome {
        Outcome::Duplicate { of, run_id } => Some(duplicate_server(&o.server, of, run_id, insecure)),
        _ => None,
    })
}

/// The error for an entry found to be the same server as another
/// (`insecure`: reached with certificate checks off, which would have told
/// a server posing as another).
fn duplicate_server(entry: &str, other: &str, run_id: &str, insecure: bool) -> Error {
    let note = if insecure { format!(" {}", crate::tls::INSECURE_NOTE) } else { String::new() };
    Error::Config(format!(
        "{entry} and {other} are the same server (run_id {run_id}): list each server once; \
         a server listed twice would count twice toward the quorum{note}"
    ))
}

/// The instance that keeps `resource`'s line: the same for every client
/// whatever the order of its server list (FNV-1a over the resource, among
/// the servers sorted by name).
fn line_instance(resource: &str, by_name: &[usize]) -> usize {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in resource.bytes() {
        hash = (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    let pick = usize::try_from(hash % by_name.len().max(1) as u64).unwrap_or(0);
    by_name.get(pick).copied().unwrap_or(0)
}

/// Indexes of `servers` in name order: the same for every client.
fn by_name(servers: &[String]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..servers.len()).collect();
    order.sort_by(|&a, &b| servers[a].cmp(&servers[b]));
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_naming_several_servers_is_told_from_one_server() {
        let several = |entry: &str| servers_in_one(entry);
        let v = |list: &[&str]| Some(list.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(several("redis://a:1,redis://b:2"), v(&["redis://a:1", "redis://b:2"]));
        assert_eq!(several("redis://a:1, redis://b:2 ,redis://c:3"), v(&["redis://a:1", "redis://b:2", "redis://c:3"]));
        assert_eq!(several("redis://a:1 redis://b:2"), v(&["redis://a:1", "redis://b:2"]));
        assert_eq!(several("redis://a:1;redis://b:2"), v(&["redis://a:1", "redis://b:2"]));
        assert_eq!(several("a:1 b:2\tc:3"), v(&["a:1", "b:2", "c:3"]));
        assert_eq!(several("redis://a:1 [::1]:2"), v(&["redis://a:1", "[::1]:2"]));
        // A cluster's seed list is one server; a URL after it is another.
        assert_eq!(several("redis+cluster://a:1,b:2"), None);
        assert_eq!(several("redis+cluster://a:1,b:2,redis://c:3"), v(&["redis+cluster://a:1,b:2", "redis://c:3"]));
        assert_eq!(several("redis+cluster://a:1,b:2 redis+cluster://c:3,d:4"), v(&["redis+cluster://a:1,b:2", "redis+cluster://c:3,d:4"]));
        // So is a Sentinel member's list of sentinels, up to its master's name.
        assert_eq!(several("redis+sentinel://s1:26379,s2:26379,s3:26379/m"), None);
        assert_eq!(
            several("redis+sentinel://s1:26379,s2:26379/m,redis://c:3"),
            v(&["redis+sentinel://s1:26379,s2:26379/m", "redis://c:3"])
        );
        // One server, or something the URL check judges.
        for one in ["redis://a:1", " redis://a:1 ", "a:1", "redis://:pa ss@a:1", "redis://:p;w@a:1", "redis://a:1 x", "", "redis://a:1,"] {
            assert_eq!(several(one), None, "{one:?}");
        }
    }

    #[test]
    fn the_library_refuses_an_entry_naming_several_servers() {
        let Err(Error::Config(message)) = Redlock::new(&["redis://127.0.0.1:1,redis://127.0.0.1:2"], Settings::default()) else {
            panic!("accepted");
        };
        assert!(message.contains("names 2 servers in one entry"), "{message}");
        assert!(!message.contains("missing port"), "{message}");
    }

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
