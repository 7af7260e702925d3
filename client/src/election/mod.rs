//! Leader election on the quorum, modelled on etcd's
//! `concurrency.Election`: candidates `campaign` in the fair line of one
//! lock per election, the holder leads with its fencing token as its term
//! and advertises a value stored with the hold (`LOCK.PROCLAIM`, once the
//! term is settled), so every observer reads the leader a quorum of servers
//! agrees on (`leader`; `observe` through the servers' announcements of the
//! lock's changes). docs/election.md says what it
//! guarantees and what the term (the fence) is still needed for.
//!
//! The hold is bound to the leader's connections with a lock-delay longer
//! than an extension interval plus a request (`Settings::election_lock_delay`):
//! a leader that dies leaves the line to the next candidate a lock-delay
//! later, and one that is cut off from a server learns it at its next
//! extension (its lost signal) before that server can grant the next term.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::join_all;
use futures::{Stream, StreamExt};
use tokio_util::sync::CancellationToken;

use crate::error::Error;
use crate::hold::Failure;
use crate::outcome::{InstanceOutcome, Outcome};
use crate::quorum;
use crate::redlock::{Redlock, Released};
use crate::resources::Resources;
use crate::settings::Names;
use crate::transport::Holding;

mod observe;
mod shared;
mod tally;
pub(crate) mod valued;

pub use shared::{SharedValued, Valued};
use valued::ValuedHold;

/// The lease of a leader's hold unless `with_ttl` says otherwise; it is
/// extended every third of it, and a leader that dies is followed about a
/// lock-delay (a little over a third of it) later.
pub const DEFAULT_TTL: Duration = Duration::from_secs(10);

/// How often `observe` subscribes again to a server it lost (and reads the
/// leader while fewer than a quorum are subscribed) unless
/// `with_observe_interval` says otherwise.
pub const DEFAULT_OBSERVE_INTERVAL: Duration = Duration::from_millis(200);

/// The lock an election named `name` is: its own key space, apart from
/// the locks an application takes by name.
pub fn resource_of(name: &str) -> String {
    format!("redlock:election:{name}")
}

/// An election: its name, this candidate's value, and how its leader
/// holds. Cheap to clone; clones share the client's connections.
#[derive(Clone)]
pub struct Election {
    redlock: Redlock,
    name: String,
    resource: String,
    /// `resource` as the acquisition takes it.
    lock: Resources,
    value: String,
    ttl: Duration,
    observe_every: Duration,
}

/// A leader as a quorum of servers agree on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leader {
    /// What the leader advertises (empty when nothing).
    pub value: String,
    /// The leader's fencing token: larger than every earlier leader's.
    pub term: i64,
}

impl Election {
    /// The election `name` on `redlock`'s servers, for a candidate that
    /// advertises `value` when it leads. `redlock` must bind holds to the
    /// connection (`Settings::release_on_disconnect`, module mode) with a
    /// lock-delay past an extension interval plus a request: other
    /// settings are an `Error::Config` naming what to change.
    pub fn new(redlock: Redlock, name: &str, value: &str) -> Result<Election, Error> {
        Election::named(redlock, name, value, None, &Names::RUST)
    }

    /// `new`, then `with_ttl` when `ttl` is given, with what the checks
    /// refuse named in a binding's words (`names`: `options.lockDelay`,
    /// seconds).
    pub fn named(redlock: Redlock, name: &str, value: &str, ttl: Option<Duration>, names: &Names) -> Result<Election, Error> {
        Election {
            redlock,
            name: name.to_string(),
            resource: resource_of(name),
            lock: Resources::one(&resource_of(name)),
            value: value.to_string(),
            ttl: ttl.unwrap_or(DEFAULT_TTL),
            observe_every: DEFAULT_OBSERVE_INTERVAL,
        }
        .checked_in(names)
    }

    /// The same election with a leader's lease of `ttl`, checked as `new`.
    pub fn with_ttl(self, ttl: Duration) -> Result<Election, Error> {
        Election { ttl, ..self }.checked()
    }

    /// The same election, `observe` subscribing again (or reading the
    /// leader, see `observe`) every `every`.
    pub fn with_observe_interval(self, every: Duration) -> Election {
        Election { observe_every: every.max(Duration::from_millis(1)), ..self }
    }

    fn checked(self) -> Result<Election, Error> {
        self.checked_in(&Names::RUST)
    }

    fn checked_in(self, names: &Names) -> Result<Election, Error> {
        if self.name.is_empty() {
            return Err(Error::Config("an election needs a name".into()));
        }
        if self.ttl.is_zero() {
            return Err(Error::Config("an election's ttl must be more than 0 ms".into()));
        }
        self.redlock.settings().election_lock_delay(self.ttl, names)?;
        Ok(self)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn value(&self) -> &str {
        &self.value
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// How long a server keeps a leader's hold after its connection
    /// closed: the bound of a dead leader's successor's wait.
    pub fn lock_delay(&self) -> Duration {
        self.redlock.settings().lock_delay_for(self.ttl)
    }

    /// Waits, in the election lock's fair line and without a deadline,
    /// until this candidate leads, and returns its leadership (kept by a
    /// guard: extended, with a lost signal). Its value is stored once the
    /// term is settled (the tokens of every server written back): the
    /// hold is taken without one, then `proclaim`ed, so no server ever
    /// shows the leader's value with a token other than its term, and
    /// `leader` and `observe` name a leader only once a quorum stored its
    /// value. Dropping the future gives the place in line up and leaves
    /// nothing held. Each call is a candidate of its own: a leader that
    /// campaigns again waits behind itself. `Error::Config` for a
    /// candidate without a value (one that only observes).
    pub async fn campaign(&self) -> Result<Leadership, Error> {
        self.campaign_until(None).await
    }

    /// `campaign` that gives up at `deadline` (`None`: never) with
    /// `Error::NotAcquired`, its place in line given up: the bindings'
    /// `campaign(timeout=...)`.
    pub async fn campaign_until(&self, deadline: Option<Instant>) -> Result<Leadership, Error> {
        if self.value.is_empty() {
            return Err(Error::Config("a candidate needs a value to campaign: observers know the leader by it".into()));
        }
        let now = Instant::now();
        let deadline = deadline.unwrap_or_else(|| now.checked_add(crate::hold::FOREVER).unwrap_or(now));
        let lock = self.redlock.acquire_until(&self.lock, self.ttl, Some(deadline), crate::transport::Ask::exclusive(), |_| {}).await?;
        // Module mode (checked): every grant has a token.
        let term = lock.token.unwrap_or(0);
        let guard = self.redlock.keep(lock);
        let leading = Leading::start(Arc::clone(self.redlock.registry()), term, guard.lost_token());
        let leadership = Leadership { election: self.clone(), hold: ValuedHold::new(guard, String::new()), term, _leading: leading };
        match leadership.proclaim(&self.value).await {
            Ok(()) => Ok(leadership),
            // Too few servers stored it: the leadership stands (its lease
            // and lost signal are the guard's); observers name it once a
            // later proclamation reaches a quorum.
            Err(Error::NoQuorum { .. }) => {
                leadership.hold.set_value(&self.value);
                Ok(leadership)
            }
            Err(e) => {
                let _ = leadership.resign().await;
                Err(e)
            }
        }
    }

    /// The leader now: LOCK.INFO on every server, and a leader only when a
    /// quorum of them name the same holder, term and value. `Ok(None)` when
    /// they do not (nobody leads, or a handover or a new value is on its
    /// way); `Error::NoQuorum` when too few servers answered to tell.
    pub async fn leader(&self) -> Result<Option<Leader>, Error> {
        Ok(self.holder().await?.map(|(_, leader)| leader))
    }

    /// `leader`, with its holder (the owner the servers store the hold
    /// under).
    async fn holder(&self) -> Result<Option<(String, Leader)>, Error> {
        self.redlock.verify_servers().await?;
        let instances = &self.redlock.inner.instances;
        let answers = join_all(instances.iter().map(|i| async move {
            let started = Instant::now();
            (i.name.clone(), started, i.holding(&self.resource).await)
        }))
        .await;
        let quorum = self.redlock.quorum();
        let readings: Vec<Option<Holding>> = answers.iter().map(|(_, _, a)| a.as_ref().ok().cloned().flatten()).collect();
        if let Some(holder) = tally::leader_of(&readings, quorum) {
            return Ok(Some(holder));
        }
        let answered = answers.iter().filter(|(_, _, a)| a.is_ok()).count();
        if answered >= quorum {
            return Ok(None);
        }
        let outcomes = answers
            .into_iter()
            .map(|(server, started, a)| InstanceOutcome {
                server,
                outcome: a.err().unwrap_or(Outcome::Done),
                latency: started.elapsed(),
                connection: None,
            })
            .collect();
        Err(Error::NoQuorum { resource: self.resource.clone(), what: "a look at the leader", outcomes })
    }

    /// Every change of leader: each new term, and each new value a leader
    /// proclaims, in term order (never a lower term after a higher one),
    /// none twice. It subscribes to the election lock's changes on every
    /// server (the module announces each grant and new value of a hold
    /// with a value) and names a leader once a quorum of servers announced
    /// the same holder, term and value, so a term is seen however short it
    /// was. A server whose subscription is lost is subscribed again (and
    /// read at once) every `observe_interval` until it answers; while
    /// fewer than a quorum are subscribed it reads the leader every
    /// `observe_interval` instead, and then misses what begins and ends
    /// between two reads. It never ends by itself.
    pub fn observe(&self) -> impl Stream<Item = Leader> + Send + 'static {
        let metrics = Arc::clone(self.redlock.registry());
        observe::changes_of_leader(self.clone(), None).map(move |(_, leader)| {
            metrics.leader_seen(leader.term);
            leader
        })
    }
}

/// `Election::observe` of any lock `key` (its own name, not an election's):
/// each change of its holder as a quorum of servers announced it (a hold
/// that carries a value, [`Leader`]: its token as the term), in term order,
/// none twice, with the holder's owner as the servers store it. Each
/// server is subscribed again every `every` once lost (and the holder read
/// while fewer than a quorum are subscribed). `subscribed` is cancelled
/// once a quorum of servers are subscribed (while the stream is polled),
/// from when on no change is missed. It never ends by itself; dropping it
/// closes its connections. `redlock serve` serves its `SUBSCRIBE
/// __redislock@0__:KEY` with it.
pub fn observe_lock(
    redlock: &Redlock,
    key: &str,
    every: Duration,
    subscribed: CancellationToken,
) -> impl Stream<Item = (String, Leader)> + Send + 'static {
    // Observing takes no hold: the checks a candidate's settings need
    // (`Election::new`) do not apply.
    let observer = Election {
        redlock: redlock.clone(),
        name: key.to_string(),
        resource: key.to_string(),
        lock: Resources::one(key),
        value: String::new(),
        ttl: DEFAULT_TTL,
        observe_every: every.max(Duration::from_millis(1)),
    };
    observe::changes_of_leader(observer, Some(subscribed))
}

/// This candidate leads: its term, its lost signal, and what it may do as
/// the leader. Dropping it resigns in the background.
pub struct Leadership {
    election: Election,
    hold: ValuedHold,
    term: i64,
    /// Counted as leading in the handle's metrics while it lasts.
    _leading: Leading,
}

/// A leadership counted in its handle's metrics
/// (`redlock_election_leading`) until it is lost or ends (resigned or
/// dropped), whichever comes first.
struct Leading {
    ended: CancellationToken,
}

impl Leading {
    fn start(metrics: Arc<crate::metrics::Metrics>, term: i64, lost: CancellationToken) -> Leading {
        metrics.leads(term);
        let ended = CancellationToken::new();
        let over = ended.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = lost.cancelled() => {}
                () = over.cancelled() => {}
            }
            metrics.leads_no_more();
        });
        Leading { ended }
    }
}

impl Drop for Leading {
    fn drop(&mut self) {
        self.ended.cancel();
    }
}

impl Leadership {
    /// The term: the leader's fencing token, larger than every earlier
    /// leader's. Pass it with every write the leader makes, and have the
    /// resource refuse a term lower than one it saw.
    pub fn term(&self) -> i64 {
        self.term
    }

    pub fn election(&self) -> &Election {
        &self.election
    }

    /// The value this leader advertises now.
    pub fn value(&self) -> String {
        self.hold.value()
    }

    /// Completes the moment the leadership is lost (an extension reached
    /// no quorum, or the validity ran out): stop acting as the leader.
    pub async fn lost(&self) {
        self.hold.guard().lost().await
    }

    /// Whether the leadership is lost, checked now.
    pub fn is_lost(&self) -> bool {
        self.hold.guard().is_lost()
    }

    /// When the leadership stopped being safely held; `None` while held.
    pub fn lost_at(&self) -> Option<Instant> {
        self.hold.guard().lost_at()
    }

    /// A token cancelled when the leadership is lost, for other tasks.
    pub fn lost_token(&self) -> CancellationToken {
        self.hold.guard().lost_token()
    }

    /// Its lost signal and when the leader's work must have stopped, for a
    /// supervisor (see `LockGuard::watch`).
    pub fn watch(&self) -> crate::guard::Watch {
        self.hold.guard().watch()
    }

    /// Advertises `value` instead (`LOCK.PROCLAIM` on every server, on the
    /// connection the hold is bound to there); term and lease stay. `Ok`
    /// only when a quorum stored it: then every `leader` reads it.
    /// `Error::NoQuorum` otherwise (observers may read the old value, or no
    /// agreed leader, until the leader proclaims again); `Error::Rejected`
    /// when the servers refuse the value itself (longer than
    /// `redislock.max-owner-len`); `Error::Expired` once the leadership is
    /// lost.
    pub async fn proclaim(&self, value: &str) -> Result<(), Error> {
        if value.is_empty() {
            return Err(Error::Config("a leader's value cannot be empty: observers know the leader by it".into()));
        }
        self.hold.proclaim(&self.election.redlock, value).await
    }

    /// Steps down now: the hold is released on every server, which hands it
    /// to the next candidate in line at once (no lease to wait out).
    pub async fn resign(self) -> Result<Released, Error> {
        self.hold.release().await
    }
}

impl Redlock {
    /// `LOCK.PROCLAIM`: `value` (empty: none) stored with the hold of
    /// `resource` by `owner` (exclusive, or one shared holder's) (taken elsewhere, e.g. through `redlock
    /// serve`) on every server; token and lease stay. `Ok` only when a
    /// quorum stored it; `Error::Rejected` when the servers refuse the value
    /// itself, `Error::NoQuorum` otherwise (not held
    /// by `owner` on a quorum, or too few answered). A server announces the
    /// new value on the lock's channel (`observe_lock`).
    pub async fn proclaim_owner(&self, resource: &str, owner: &str, value: &str) -> Result<(), Error> {
        self.proclaim_on(resource, owner, value, |_| None).await
    }

    /// `proclaim_owner`, sent to server `i` on its connection `bound(i)`
    /// (the one a hold is bound to there; `None`: any).
    pub(crate) async fn proclaim_on(
        &self,
        resource: &str,
        owner: &str,
        value: &str,
        bound: impl Fn(usize) -> Option<u64>,
    ) -> Result<(), Error> {
        let instances = &self.inner.instances;
        let outcomes = join_all(instances.iter().enumerate().map(|(i, inst)| inst.proclaim(resource, owner, value, bound(i)))).await;
        let done = outcomes.iter().filter(|o| o.outcome == Outcome::Done).count();
        let quorum = self.quorum();
        if done >= quorum {
            return Ok(());
        }
        match quorum::rejections(&outcomes) {
            Some((rejection, n)) if done + n >= quorum => {
                Err(Error::Rejected { resource: resource.to_string(), what: "proclamation", rejection, outcomes })
            }
            _ => Err(Error::NoQuorum { resource: resource.to_string(), what: "the new value", outcomes }),
        }
    }
}

/// A leadership as a binding hands it out (Python's and Node's
/// `Leadership`): shared by the caller's tasks, resigned once, resigned in
/// the background when dropped unresigned (see `SharedValued`).
pub type SharedLeadership = SharedValued<Leadership>;

impl Valued for Leadership {
    type Fixed = i64;
    const LOST: &'static str =
        "an extension reached no quorum in time or its validity ran out; another candidate may lead now, with a larger term";

    fn fixed(&self) -> i64 {
        self.term
    }

    fn resource(&self) -> String {
        self.hold.guard().lock().resource
    }

    fn value(&self) -> String {
        self.value()
    }

    fn is_lost(&self) -> bool {
        self.is_lost()
    }

    fn lost_token(&self) -> CancellationToken {
        self.lost_token()
    }

    fn proclaim(&self, value: &str) -> impl Future<Output = Result<(), Error>> + Send {
        self.proclaim(value)
    }

    fn end(self) -> impl Future<Output = Result<Released, Error>> + Send {
        self.resign()
    }
}

impl SharedLeadership {
    pub fn term(&self) -> i64 {
        *self.fixed()
    }

    pub fn is_resigned(&self) -> bool {
        self.has_ended()
    }

    /// `Leadership::resign`, once the proclamations under way are over;
    /// `Failure::Released` if asked before, and `Failure::Lost` (after
    /// resigning) when the leadership had been lost, as a lock's release.
    pub fn resign(&self) -> Result<impl Future<Output = Result<Released, Failure>> + Send + 'static, Failure> {
        self.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_election_is_refused_settings_that_break_its_lock_delay() {
        let settings = crate::Settings { release_on_disconnect: true, ..crate::Settings::default() };
        let redlock = Redlock::new(&["redis://127.0.0.1:1"], settings).expect("client");
        assert!(Election::new(redlock.clone(), "jobs", "me").is_ok());
        assert!(matches!(Election::new(redlock.clone(), "", "me"), Err(Error::Config(_))));
        let plain = Redlock::new(&["redis://127.0.0.1:1"], crate::Settings::default()).expect("client");
        assert!(matches!(Election::new(plain, "jobs", "me"), Err(Error::Config(m)) if m.contains("release_on_disconnect")));
        let election = Election::new(redlock, "jobs", "me").expect("election");
        assert!(matches!(election.with_ttl(Duration::ZERO), Err(Error::Config(_))));
        assert_eq!(resource_of("jobs"), "redlock:election:jobs");
    }
}
