//! The Redlock algorithm over N independent instances: the handle and its
//! lock, and the acquisitions callers make. Its jobs, each in a file:
//! `round` (one quorum round), `line` (the waiting line and the waiting
//! acquisition), `release` (extend and release), `entries` (the server
//! list), `permits` (a semaphore's permit keys, which the line waits on).

mod ask;
mod contended;
mod counted;
mod entries;
mod first;
mod given_up;
mod line;
mod permit_wait;
pub(crate) mod permits;
mod release;
mod revoke;
mod round;

pub use ask::Asked;
pub use entries::servers_in_one;
use entries::{duplicate_server, repeated_server, spelled_once};
use line::by_name;
pub use revoke::Revoked;

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::join_all;
use rand::Rng;

use crate::error::Error;
use crate::outcome::{InstanceOutcome, Outcome};
use crate::quorum::{self, NotGranted};
use crate::resources::Resources;
use crate::settings::{Mode, Settings};
use crate::traces::{self, Traced};
use crate::transport::{Ask, Identities, Instance, InstanceStatus, InstanceSummary, InstanceTop, Recoveries, Share};

/// A lock held on a quorum.
#[derive(Clone, Debug)]
pub struct Lock {
    /// The resource's name; a set's names joined with `", "`.
    pub resource: String,
    /// What the lock holds: one resource, or a set held whole.
    pub resources: Resources,
    /// The random owner value of this acquisition.
    pub owner: String,
    /// The fencing token (module mode): larger than every earlier holder's.
    pub token: Option<i64>,
    /// How long the lock is safe to use, from `acquired_at`: what is left
    /// of the lease after the round and the clock drift, and for a hold
    /// bound to its connections never past `session_window`.
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
    /// A semaphore's permits (`Redlock::try_permit`): held beside the
    /// other permits' holders, its token orders it among its own
    /// permits' holders only.
    pub permit: bool,
    /// A hold bound to its connections (`Settings::session_window`): how
    /// long after the start of a round that confirmed it (its grant, each
    /// extension) the holder may still believe it holds it, however its
    /// connections fare; fixed at the grant, whose lock-delay the servers
    /// keep. `None` for other holds.
    pub session_window: Option<Duration>,
    /// Holds of this acquisition, shared by its copies: 1 at the grant,
    /// one more per `reenter`, one less per release; the servers release
    /// the lock when it reaches 0.
    pub(crate) holds: Arc<AtomicUsize>,
    /// Set once the lock is released (or its acquisition given up): a
    /// waiting request of the head of the line that is granted after that
    /// is released at once (see `attempt_at_head`).
    pub(crate) ended: Arc<AtomicBool>,
    /// Counted as held in its handle's metrics until released, lost or
    /// dropped (`None`: a lock made other than by an acquisition).
    pub(crate) held: Option<Arc<crate::metrics::Held>>,
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
    /// Resources this handle's waits lately found held: its next waits for
    /// one join the line without a first round.
    contended: contended::Contended,
    /// The terms its acquisitions of each semaphore learned lately.
    pub(crate) learned_terms: permits::LearnedTerms,
    /// Its entries' recoveries from failed connections (see `Recoveries`).
    recoveries: Arc<Recoveries>,
    /// What its acquisitions, holds and servers did (`Redlock::metrics`).
    metrics: Arc<crate::metrics::Metrics>,
    /// Owners whose grants it gave up, when asked to remember them
    /// (`remember_given_up`).
    given_up: given_up::GivenUp,
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

/// The owner one round holds under for a caller that named its hold
/// `name` (`lock_as`, `permits_as`): `name`, `:`, and 16 random hex
/// digits. Each round has its own, as each round of `lock` has its own
/// random owner: a failed round's undoing, sent again later to a server
/// that did not answer (`release_later`), or a late grant of a head
/// round's wait released by its task, can then only end that round's
/// own grant, never a later round's grant of the same acquisition, which
/// the lock would still count on that server while another holder could
/// be granted there.
fn round_owner(name: &str) -> String {
    format!("{name}:{:016x}", rand::rng().random::<u64>())
}

/// What an acquisition asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Exclusive,
    /// A shared hold of a read-write lock.
    Shared,
    /// `count` of the `limit` permits of a semaphore, in one hold.
    Permit {
        limit: u32,
        count: u32,
    },
}

impl Kind {
    /// The kind of hold `share` asks for.
    fn of_share(share: Share) -> Kind {
        match share {
            // A set of slots and a limit record is a permit hold's round,
            // never what an acquisition asks for.
            Share::Exclusive | Share::Slots { .. } => Kind::Exclusive,
            Share::Shared => Kind::Shared,
            Share::Permits(limit, count) => Kind::Permit { limit, count },
        }
    }

    /// The key of `resource`'s line: readers and writers of one resource
    /// share one line. A semaphore has none of its own: a waiter for
    /// permits waits in its permits' lines, as an exclusive lock's waiter
    /// (see `acquire_until`).
    pub fn line_key(self, resource: &str) -> String {
        format!("redlock:line:{resource}")
    }

    /// How a place in line is held: in the request's own mode, so that
    /// the line instance's FIFO orders every kind, batches consecutive
    /// readers (shared places) and never lets a reader pass a writer ahead
    /// of it. Permits are waited for as the exclusive locks they are.
    fn place_share(self) -> Share {
        match self {
            Kind::Exclusive | Kind::Permit { .. } => Share::Exclusive,
            Kind::Shared => Share::Shared,
        }
    }
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
        let recoveries = Arc::new(Recoveries::default());
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
                Instance::in_list(url, &settings, i, Arc::clone(&identities), Arc::clone(&recoveries), tls.as_ref())
                    .map_err(|e| Error::Config(format!("{url}: {e}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        spelled_once(urls, &instances)?;
        let quorum = settings.quorum.unwrap_or_else(|| quorum::majority(instances.len()));
        let names: Vec<String> = instances.iter().map(|i| i.name.clone()).collect();
        let line_order = by_name(&names);
        let metrics = Arc::new(crate::metrics::Metrics::new(instances.iter().map(|i| Arc::clone(&i.metrics)).collect(), settings.metrics));
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
                contended: contended::Contended::default(),
                learned_terms: permits::LearnedTerms::default(),
                recoveries,
                metrics,
                given_up: given_up::GivenUp::default(),
            }),
        })
    }

    /// From now on, remembers the owners whose grants this handle gives up
    /// (a round that failed or was dropped), for twice their ttl: their
    /// releases may still be on their way to the servers. For a caller
    /// that takes holds over by their owner (see `gave_up`); off by
    /// default.
    pub fn remember_given_up(&self) {
        self.inner.given_up.remember();
    }

    /// Whether this handle gave `owner`'s grants up lately (see
    /// `remember_given_up`): a hold of `owner` found on the servers may be
    /// released at any moment, and must not be extended and answered as
    /// held.
    pub fn gave_up(&self, owner: &str) -> bool {
        self.inner.given_up.contains(owner)
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

    /// The error of a server found listed twice among `outcomes`' servers,
    /// whose answers then count wrong.
    pub(crate) fn server_repeated(&self, outcomes: &[InstanceOutcome]) -> Option<Error> {
        repeated_server(outcomes, self.insecure())
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
        self.try_acquire(&Resources::one(resource), ttl, false).await
    }

    /// One attempt at every resource of `resources` at once, all or
    /// nothing: each instance grants the whole set or none of it
    /// (`LOCK.MACQUIRE`), and the set is held when a quorum granted it
    /// whole, with one fencing token larger than every earlier token of
    /// each member. Extended, released and lost as one lock (an instance
    /// counts for an extension only when it extended every member). In a
    /// Cluster the members share a hash tag (`{order:42}:lines`,
    /// `{order:42}:stock`), as a set is one request to one slot.
    pub async fn try_lock_all(&self, resources: &Resources, ttl: Duration) -> Result<Lock, Error> {
        self.try_acquire(resources, ttl, false).await
    }

    /// Every resource of `resources` at once (see `try_lock_all`), retried
    /// until granted, the retries are used up or `deadline` passes. With a
    /// deadline (module mode) the set waits in every member's line, as
    /// `lock_until` waits in one: its places are taken on each line
    /// instance at once and the instances in one order for every client,
    /// so sets that share members never deadlock, and a later waiter on a
    /// member never passes a set waiting for it.
    pub async fn lock_all_until(&self, resources: &Resources, ttl: Duration, deadline: Option<Instant>) -> Result<Lock, Error> {
        self.acquire_until(resources, ttl, deadline, Ask::exclusive(), |_| {}).await
    }

    /// One attempt round at `resources`, shared or not.
    pub(crate) async fn try_acquire(&self, resources: &Resources, ttl: Duration, shared: bool) -> Result<Lock, Error> {
        let share = Share::of(shared);
        self.counted(resources, share, None, async {
            self.verify_servers().await?;
            self.attempt(resources, ttl, Ask::new(share)).await.map_err(|outcomes| self.not_acquired(resources, 1, outcomes))
        })
        .await
    }

    /// One attempt at a shared hold of `resource`, a read-write lock: any
    /// number of shared holders at once, never beside an exclusive one.
    /// Safe by majority like the mutex, since a writer's majority and every
    /// reader's share an instance, which grants only one of the two kinds.
    pub async fn try_lock_shared(&self, resource: &str, ttl: Duration) -> Result<Lock, Error> {
        self.try_acquire(&Resources::one(resource), ttl, true).await
    }

    /// A shared hold of `resource`, retried until granted, the retries are
    /// used up or `deadline` passes. With a deadline (module mode) the
    /// reader takes a place in the resource's line like a writer, held
    /// shared (see `lock_until`): readers and writers are served in
    /// arrival order, consecutive readers together.
    pub async fn lock_shared_until(&self, resource: &str, ttl: Duration, deadline: Option<Instant>) -> Result<Lock, Error> {
        self.acquire_until(&Resources::one(resource), ttl, deadline, Ask::new(Share::Shared), |_| {}).await
    }

    /// `resources` held by `owner`, the name the caller gives its hold (as
    /// the module's `LOCK.ACQUIRE key owner`), as `ask` asks (exclusive or
    /// shared, `Ask::value` stored with an exclusive hold on every server,
    /// `Ask::fence` the least token of a round without a deadline): with a
    /// deadline waited for in line until then (see `lock_until`), else one
    /// round. A semaphore's permits: `permits_as`.
    ///
    /// Each round holds under an owner of its own: `owner`, `:`, and 16
    /// random hex digits (the granted lock's `owner`), so that a failed
    /// round's undoing, sent again later, can end no other round's grant,
    /// and no round is ever re-granted a hold `owner` had before (its
    /// failed round would release that hold on the servers that
    /// re-granted it). A caller finds its holds again by that form, as
    /// `redlock serve` does; one that asks again for a hold it may have
    /// extends it instead.
    pub async fn lock_as(
        &self,
        resources: &Resources,
        owner: &str,
        ttl: Duration,
        ask: Ask<'_>,
        deadline: Option<Instant>,
    ) -> Result<Lock, Error> {
        if !matches!(ask.share, Share::Exclusive | Share::Shared) {
            return Err(Error::Config("lock_as takes an exclusive or a shared hold; a semaphore's permits: permits_as".to_string()));
        }
        let ask = ask.owner(Some(owner));
        match deadline {
            Some(_) => self.acquire_until(resources, ttl, deadline, ask, |_| {}).await,
            None => {
                self.counted(resources, ask.share, None, async {
                    self.verify_servers().await?;
                    self.attempt(resources, ttl, ask).await.map_err(|outcomes| self.not_acquired(resources, 1, outcomes))
                })
                .await
            }
        }
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
        self.acquire_until(&Resources::one(resource), ttl, deadline, Ask::exclusive(), observe).await
    }

    /// `call` (an operator's request, traced as `what`) on every instance
    /// at once: each one's outcome (`Done` when it answered) and timing,
    /// with what it answered, in server order.
    pub(crate) async fn answers_everywhere<'a, T, F, Fut>(&'a self, what: &'static str, call: F) -> Vec<(InstanceOutcome, Option<T>)>
    where
        F: Fn(&'a Instance) -> Fut,
        Fut: std::future::Future<Output = Result<T, Outcome>>,
    {
        join_all(self.inner.instances.iter().map(|instance| {
            let asked = call(instance);
            async move {
                let started = Instant::now();
                let (outcome, answer) = match asked.traced(traces::call(&instance.name, what)).await {
                    Ok(answer) => (Outcome::Done, Some(answer)),
                    Err(e) => (e, None),
                };
                (InstanceOutcome { server: instance.name.clone(), outcome, latency: started.elapsed(), connection: None }, answer)
            }
        }))
        .await
    }

    /// Each instance's view of `resource`.
    pub async fn status(&self, resource: &str) -> Vec<InstanceStatus> {
        join_all(self.inner.instances.iter().map(|i| i.status(resource))).await
    }

    /// Each instance's holders of `resource`, one request each (`status`
    /// without the quarantine and the line).
    pub async fn holders(&self, resource: &str) -> Vec<InstanceStatus> {
        join_all(self.inner.instances.iter().map(|i| i.holders(resource))).await
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

    /// Every instance's `INFO redislock` fields, read now through this
    /// handle's connections: the module's numbers beside the client's
    /// (`metrics::render_server_info`); empty in script mode.
    pub async fn server_info(&self) -> Vec<crate::metrics::ServerInfo> {
        if self.inner.settings.mode != Mode::Module {
            return Vec::new();
        }
        join_all(self.inner.instances.iter().enumerate().map(|(index, i)| async move {
            let nodes = i.module_info().await.map(|texts| {
                texts.into_iter().map(|(node, text)| crate::metrics::NodeInfo { node, fields: crate::metrics::fields(&text) }).collect()
            });
            crate::metrics::ServerInfo { index, address: crate::metrics::redacted(&i.name), nodes }
        }))
        .await
    }
}
