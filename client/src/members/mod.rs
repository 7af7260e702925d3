//! Group membership on the quorum, the shared counterpart of the
//! election: a member `join`s a group with a value (its address) as a
//! session-bound shared hold of the group's key that carries it, kept by
//! a guard (extended, with a lost signal) until it `leave`s or dies; any
//! reader lists the members a quorum of servers agree on (`members`).
//! docs/client.md, "Group membership", says what is listed when.
//!
//! A member's hold follows the election's rules (`Settings::
//! member_lock_delay`): bound to its connections with a lock-delay past
//! an extension interval plus a request, so a member that dies is listed
//! no more a lock-delay later, and one cut off from a server learns it
//! (its lost signal) before that server drops it.

use std::time::{Duration, Instant};

use futures::future::join_all;
use futures::Stream;
use tokio_util::sync::CancellationToken;

use crate::election::valued::ValuedHold;
use crate::error::Error;
use crate::outcome::{InstanceOutcome, Outcome};
use crate::redlock::{Redlock, Released};
use crate::resources::Resources;
use crate::settings::Names;
use crate::transport::{Ask, Share};
use crate::watch::Change;

mod shared;
mod tally;

pub use shared::SharedMembership;

/// The lease of a member's hold unless `with_ttl` says otherwise; it is
/// extended every third of it, and a member that dies is listed no more
/// about a lock-delay (a little over a third of it) later.
pub const DEFAULT_TTL: Duration = crate::election::DEFAULT_TTL;

/// The lock a group named `name` is: its own key space, apart from the
/// locks an application takes by name and from elections.
pub fn resource_of(name: &str) -> String {
    format!("redlock:group:{name}")
}

/// A member as a quorum of servers list it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// The hold's owner as the servers store it (the member's own name,
    /// `:` and 16 hex digits).
    pub owner: String,
    /// The hold's fencing token as the client reconciled it (the largest
    /// t such that a quorum of servers list the member with tokens >= t):
    /// larger than every member's that joined before it left.
    pub token: i64,
    /// The value most of those servers store with it (empty when none).
    pub value: String,
}

/// A group: its name and how its members hold. Cheap to clone; clones
/// share the client's connections.
#[derive(Clone)]
pub struct Group {
    redlock: Redlock,
    name: String,
    resource: String,
    /// `resource` as the acquisition takes it.
    lock: Resources,
    ttl: Duration,
}

impl Group {
    /// The group `name` on `redlock`'s servers, for a member that joins
    /// it. `redlock` must bind holds to the connection as an election's
    /// (`Election::new`); other settings are an `Error::Config` naming what
    /// to change. A reader that only lists the members: `members_of`.
    pub fn new(redlock: Redlock, name: &str) -> Result<Group, Error> {
        Group::named(redlock, name, None, &Names::RUST)
    }

    /// `new`, then `with_ttl` when `ttl` is given, with what the checks
    /// refuse named in a binding's words.
    pub fn named(redlock: Redlock, name: &str, ttl: Option<Duration>, names: &Names) -> Result<Group, Error> {
        Group {
            redlock,
            name: name.to_string(),
            resource: resource_of(name),
            lock: Resources::one(&resource_of(name)),
            ttl: ttl.unwrap_or(DEFAULT_TTL),
        }
        .checked_in(names)
    }

    /// The same group with a member's lease of `ttl`, checked as `new`.
    pub fn with_ttl(self, ttl: Duration) -> Result<Group, Error> {
        Group { ttl, ..self }.checked_in(&Names::RUST)
    }

    fn checked_in(self, names: &Names) -> Result<Group, Error> {
        if self.name.is_empty() {
            return Err(Error::Config("a group needs a name".into()));
        }
        if self.ttl.is_zero() {
            return Err(Error::Config("a group member's ttl must be more than 0 ms".into()));
        }
        self.redlock.settings().member_lock_delay(self.ttl, names)?;
        Ok(self)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The group's key (`redlock:group:NAME`).
    pub fn resource(&self) -> &str {
        &self.resource
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// How long a server keeps listing a member after its connection
    /// closed.
    pub fn lock_delay(&self) -> Duration {
        self.redlock.settings().lock_delay_for(self.ttl)
    }

    /// Joins the group with `value` (a shared hold of the group's key on a
    /// quorum, bound to this handle's connections, storing `value` on each
    /// server), waiting without a deadline behind an exclusive holder of
    /// the key if there is one. Every call is a member of its own.
    /// `Error::Config` for an empty value (readers know a member by it);
    /// `Error::Rejected` when the servers refuse the value (longer than
    /// `redislock.max-owner-len`).
    pub async fn join(&self, value: &str) -> Result<Membership, Error> {
        self.join_until(value, None).await
    }

    /// `join` that gives up at `deadline` (`None`: never) with
    /// `Error::NotAcquired`, nothing left held.
    pub async fn join_until(&self, value: &str, deadline: Option<Instant>) -> Result<Membership, Error> {
        if value.is_empty() {
            return Err(Error::Config("a member needs a value to join: readers know a member by it".into()));
        }
        let now = Instant::now();
        let deadline = deadline.unwrap_or_else(|| now.checked_add(crate::hold::FOREVER).unwrap_or(now));
        let ask = Ask::new(Share::Shared).value(Some(value));
        let lock = self.redlock.acquire_until(&self.lock, self.ttl, Some(deadline), ask, |_| {}).await?;
        // Module mode (checked): every grant has a token.
        let token = lock.token.unwrap_or(0);
        let owner = lock.owner.clone();
        let guard = self.redlock.keep(lock);
        Ok(Membership { group: self.clone(), hold: ValuedHold::new(guard, value.to_string()), token, owner })
    }

    /// The members now (`members_of` this group).
    pub async fn members(&self) -> Result<Vec<Member>, Error> {
        members_of(&self.redlock, &self.name).await
    }

    /// The group key's changes a quorum of servers announced
    /// (`Redlock::watch`): a `Grant` or `Handoff` is a member joining with
    /// its value, a `Proclaim` a new value, a `Release`, `Expire`,
    /// `Session` or `Revoke` a member leaving (announced only where
    /// `redislock.notify` names the key, e.g. `redlock:group:*`).
    pub fn watch(&self) -> impl Stream<Item = Result<Change, Error>> + Send + 'static {
        self.redlock.watch(&self.resource)
    }
}

/// The members of group `name` now: `LOCK.INFO` of its key on every
/// server; a member is an owner a quorum of them list, with the token and
/// value they agree on (see `Member`), in join order (by token).
/// `Error::NoQuorum` when too few servers answered to tell. Takes no hold:
/// any handle reads it.
pub async fn members_of(redlock: &Redlock, name: &str) -> Result<Vec<Member>, Error> {
    let resource = resource_of(name);
    redlock.verify_servers().await?;
    let instances = &redlock.inner.instances;
    let answers = join_all(instances.iter().map(|i| {
        let resource = &resource;
        async move {
            let started = Instant::now();
            (i.name.clone(), started, i.holdings(resource).await)
        }
    }))
    .await;
    let quorum = redlock.quorum();
    let answered = answers.iter().filter(|(_, _, a)| a.is_ok()).count();
    if answered >= quorum {
        let readings: Vec<_> = answers.into_iter().map(|(_, _, a)| a.ok()).collect();
        return Ok(tally::members_of(&readings, quorum));
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
    Err(Error::NoQuorum { resource, what: "a look at the members", outcomes })
}

/// This member's place in its group: its token, its value, its lost
/// signal. Dropping it leaves the group in the background.
pub struct Membership {
    group: Group,
    hold: ValuedHold,
    token: i64,
    owner: String,
}

impl Membership {
    /// The hold's fencing token (see `Member::token`).
    pub fn token(&self) -> i64 {
        self.token
    }

    /// The owner the servers list this member under (`Member::owner`).
    pub fn owner(&self) -> &str {
        &self.owner
    }

    pub fn group(&self) -> &Group {
        &self.group
    }

    /// The value this member advertises now.
    pub fn value(&self) -> String {
        self.hold.value()
    }

    /// The connection the hold is bound to on each server (`None` where it
    /// is not held), as `CLIENT LIST` shows its id.
    pub fn connections(&self) -> Vec<Option<u64>> {
        self.hold.guard().lock().instances.iter().map(|o| o.connection).collect()
    }

    /// Completes the moment the membership is lost (an extension reached
    /// no quorum, or the validity ran out): readers may list it no more.
    pub async fn lost(&self) {
        self.hold.guard().lost().await
    }

    /// Whether the membership is lost, checked now.
    pub fn is_lost(&self) -> bool {
        self.hold.guard().is_lost()
    }

    /// When the membership stopped being safely held; `None` while held.
    pub fn lost_at(&self) -> Option<Instant> {
        self.hold.guard().lost_at()
    }

    /// A token cancelled when the membership is lost, for other tasks.
    pub fn lost_token(&self) -> CancellationToken {
        self.hold.guard().lost_token()
    }

    /// Advertises `value` instead (`LOCK.PROCLAIM` of this holder on every
    /// server, on the connection its hold is bound to there); token and
    /// lease stay. `Ok` only when a quorum stored it: then `members` lists
    /// it. `Error::NoQuorum` otherwise, `Error::Rejected` when the servers
    /// refuse the value itself, `Error::Expired` once the membership is
    /// lost, `Error::Config` for an empty value.
    pub async fn proclaim(&self, value: &str) -> Result<(), Error> {
        if value.is_empty() {
            return Err(Error::Config("a member's value cannot be empty: readers know a member by it".into()));
        }
        self.hold.proclaim(&self.group.redlock, value).await
    }

    /// Leaves the group now: the hold is released on every server.
    pub async fn leave(self) -> Result<Released, Error> {
        self.hold.release().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_is_refused_settings_that_break_its_lock_delay() {
        let settings = crate::Settings { release_on_disconnect: true, ..crate::Settings::default() };
        let redlock = Redlock::new(&["redis://127.0.0.1:1"], settings).expect("client");
        assert!(Group::new(redlock.clone(), "web").is_ok());
        assert!(matches!(Group::new(redlock.clone(), ""), Err(Error::Config(_))));
        let plain = Redlock::new(&["redis://127.0.0.1:1"], crate::Settings::default()).expect("client");
        assert!(
            matches!(Group::new(plain, "web"), Err(Error::Config(m)) if m.contains("release_on_disconnect") && m.starts_with("a group"))
        );
        let group = Group::new(redlock, "web").expect("group");
        assert!(matches!(group.with_ttl(Duration::ZERO), Err(Error::Config(_))));
        assert_eq!(resource_of("web"), "redlock:group:web");
    }
}
