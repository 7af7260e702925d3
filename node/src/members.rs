//! Group membership: `NativeGroup` (of a `NativeRedlock`), the
//! `NativeMembership` a join resolves to, and `NativeMember`, a member as
//! `members` lists it. What a group is lives in the crate
//! (`redlock::members`, its `SharedMembership` for a membership shared by
//! JavaScript's callers); `index.js` makes these `Group` and `Membership`.

use napi::bindgen_prelude::{BigInt, Either, Object};
use napi::{Env, Result};
use napi_derive::napi;
use redlock::hold;
use redlock::members::{self, Group, Member, SharedMembership};

use crate::errors::{thrown, thrown_in, Failure};
use crate::{config, runtime, watch, Cancel, Released};

/// A member as a quorum of servers list it.
#[napi(object)]
pub struct NativeMember {
    /// The hold's owner as the servers store it.
    pub owner: String,
    /// The hold's fencing token as the client reconciled it.
    pub token: BigInt,
    /// The value most of those servers store with it.
    pub value: String,
}

impl From<Member> for NativeMember {
    fn from(m: Member) -> NativeMember {
        NativeMember { owner: m.owner, token: BigInt::from(m.token), value: m.value }
    }
}

fn failure(e: redlock::Error) -> Failure {
    Failure::from(hold::Failure::from(e))
}

/// A Promise of the members of `name` on `redlock`'s servers (the crate's
/// `members_of`), or of a `Failure`: what `NativeGroup.members` and
/// `NativeRedlock.members` share.
pub fn members_of<'env>(env: &'env Env, redlock: redlock::Redlock, name: String) -> Result<Object<'env>> {
    runtime::promise(env, move || async move {
        Ok(match members::members_of(&redlock, &name).await {
            Ok(list) => Either::A(list.into_iter().map(NativeMember::from).collect::<Vec<_>>()),
            Err(e) => Either::B(failure(e)),
        })
    })
}

/// A group on a client's servers.
#[napi]
pub struct NativeGroup {
    inner: Group,
    redlock: redlock::Redlock,
}

#[napi]
impl NativeGroup {
    /// Checked now (a `ConfigError` thrown at once): the client must bind
    /// holds to the connection, as an election's.
    #[napi(constructor)]
    pub fn new(env: Env, redlock: &crate::NativeRedlock, name: String, ttl: Option<config::Duration>) -> Result<NativeGroup> {
        let ttl = ttl.map(|t| config::NAMES.ttl(config::span(t))).transpose().map_err(|f| thrown_in(&env, f))?;
        let inner = Group::named(redlock.inner.clone(), &name, ttl, &config::NAMES).map_err(|e| thrown(hold::Failure::from(e)))?;
        Ok(NativeGroup { inner, redlock: redlock.inner.clone() })
    }

    #[napi(getter)]
    pub fn name(&self) -> String {
        self.inner.name().to_string()
    }

    /// The group's key (`redlock:group:NAME`).
    #[napi(getter)]
    pub fn resource(&self) -> String {
        self.inner.resource().to_string()
    }

    /// A member's lease (ms).
    #[napi(getter)]
    pub fn ttl(&self) -> f64 {
        self.inner.ttl().as_secs_f64() * 1000.0
    }

    /// How long (ms) the servers keep listing a member after its connection closed.
    #[napi(getter)]
    pub fn lock_delay(&self) -> f64 {
        self.inner.lock_delay().as_secs_f64() * 1000.0
    }

    /// A Promise of a `NativeMembership` once joined with `value`, or of
    /// a `Failure`; `cancel` gives the wait up (`ABORTED`).
    #[napi(ts_return_type = "Promise<NativeMembership | Failure>")]
    pub fn join<'env>(&self, env: &'env Env, value: String, cancel: Option<&Cancel>) -> Result<Object<'env>> {
        let group = self.inner.clone();
        let cancel = cancel.map(|c| c.token.clone()).unwrap_or_default();
        runtime::promise(env, move || async move {
            // Dropped (cancelled), the join holds nothing.
            let joined = tokio::select! {
                joined = group.join(&value) => joined,
                () = cancel.cancelled() => {
                    return Ok(Either::B(Failure::from(hold::Failure::Aborted { resource: group.resource().to_string() })));
                }
            };
            Ok(match joined {
                Ok(m) => Either::A(NativeMembership { shared: SharedMembership::new(m, crate::background) }),
                Err(e) => Either::B(failure(e)),
            })
        })
    }

    /// A Promise of the members now, in join order, or of a `Failure`.
    #[napi(ts_return_type = "Promise<NativeMember[] | Failure>")]
    pub fn members<'env>(&self, env: &'env Env) -> Result<Object<'env>> {
        members_of(env, self.redlock.clone(), self.inner.name().to_string())
    }

    /// The group key's changes a quorum of servers announced.
    #[napi]
    pub fn watch(&self) -> watch::NativeWatch {
        watch::NativeWatch::of(self.inner.watch())
    }
}

/// This member's place in its group.
#[napi]
pub struct NativeMembership {
    shared: SharedMembership,
}

#[napi]
impl NativeMembership {
    /// The hold's fencing token (as `members` lists it).
    #[napi(getter)]
    pub fn token(&self) -> BigInt {
        BigInt::from(self.shared.token())
    }

    /// The owner the servers list this member under.
    #[napi(getter)]
    pub fn owner(&self) -> String {
        self.shared.owner().to_string()
    }

    #[napi(getter)]
    pub fn value(&self) -> String {
        self.shared.value()
    }

    /// The group's name.
    #[napi(getter)]
    pub fn group(&self) -> String {
        self.shared.group().to_string()
    }

    /// The group's key.
    #[napi(getter)]
    pub fn resource(&self) -> String {
        self.shared.resource().to_string()
    }

    #[napi(getter)]
    pub fn lost(&self) -> bool {
        self.shared.is_lost()
    }

    #[napi(getter)]
    pub fn left(&self) -> bool {
        self.shared.has_left()
    }

    /// A Promise of `null` once a quorum stored `value`, or of a `Failure`.
    #[napi(ts_return_type = "Promise<Failure | null>")]
    pub fn proclaim<'env>(&self, env: &'env Env, value: String) -> Result<Object<'env>> {
        let proclamation = self.shared.proclaim(value);
        runtime::promise(env, move || async move {
            Ok(match proclamation {
                Ok(work) => work.await.err().map(Failure::from),
                Err(f) => Some(Failure::from(f)),
            })
        })
    }

    /// A Promise of `Released`, or of a `Failure` (`LOCK_LOST` after
    /// leaving a membership lost before, `RELEASED` the second time).
    #[napi(ts_return_type = "Promise<Released | Failure>")]
    pub fn leave<'env>(&self, env: &'env Env) -> Result<Object<'env>> {
        let leaving = self.shared.leave();
        runtime::promise(env, move || async move {
            let done = match leaving {
                Ok(work) => work.await,
                Err(f) => Err(f),
            };
            Ok(match done {
                Ok(r) => Either::A(Released { released: u32::try_from(r.released).unwrap_or(u32::MAX) }),
                Err(f) => Either::B(Failure::from(f)),
            })
        })
    }

    /// A Promise of `true` the moment the membership is lost, `false` once
    /// it left first. Pending, it keeps the event loop alive.
    #[napi(ts_return_type = "Promise<boolean>")]
    pub fn when_lost<'env>(&self, env: &'env Env) -> Result<Object<'env>> {
        let lost = self.shared.when_lost();
        runtime::promise(env, move || async move { Ok(lost.await) })
    }
}
