//! Leader election: `NativeElection` (of a `NativeRedlock`), the
//! `NativeLeadership` a campaign resolves to, and `NativeObserver`, the
//! changes `observe` yields. What an election is lives in the crate
//! (`redlock::election`, its `SharedLeadership` for a leadership shared by
//! JavaScript's callers); `index.js` makes these `Election`, `Leadership`
//! and an async iterator.

use std::pin::Pin;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use napi::bindgen_prelude::{BigInt, Either, Object};
use napi::{Env, Result};
use napi_derive::napi;
use redlock::election::{resource_of, Election, Leader, SharedLeadership};
use redlock::hold;
use tokio_util::sync::CancellationToken;

use crate::errors::{thrown, thrown_in, Failure};
use crate::{config, runtime, Cancel, NativeRedlock, Released};

/// A leader as a quorum of servers agree on it.
#[napi(object)]
pub struct NativeLeader {
    pub value: String,
    /// The leader's fencing token.
    pub term: BigInt,
}

impl From<Leader> for NativeLeader {
    fn from(l: Leader) -> NativeLeader {
        NativeLeader { value: l.value, term: BigInt::from(l.term) }
    }
}

fn failure(e: redlock::Error) -> Failure {
    Failure::from(hold::Failure::from(e))
}

/// An election on a client's servers.
#[napi]
pub struct NativeElection {
    inner: Election,
}

#[napi]
impl NativeElection {
    /// Checked now (a `ConfigError` thrown at once): the client must bind
    /// holds to the connection, with a lock-delay past an extension
    /// interval plus a request.
    #[napi(constructor)]
    pub fn new(
        env: Env,
        redlock: &NativeRedlock,
        name: String,
        value: String,
        ttl: Option<config::Duration>,
        observe_interval: Option<config::Duration>,
    ) -> Result<NativeElection> {
        let ttl = ttl.map(|t| config::NAMES.ttl(config::span(t))).transpose().map_err(|f| thrown_in(&env, f))?;
        let mut inner =
            Election::named(redlock.inner.clone(), &name, &value, ttl, &config::NAMES).map_err(|e| thrown(hold::Failure::from(e)))?;
        if let Some(every) = observe_interval {
            let every = config::NAMES.span("observe_interval", config::span(every)).map_err(|f| thrown_in(&env, f))?;
            inner = inner.with_observe_interval(every);
        }
        Ok(NativeElection { inner })
    }

    #[napi(getter)]
    pub fn name(&self) -> String {
        self.inner.name().to_string()
    }

    #[napi(getter)]
    pub fn value(&self) -> String {
        self.inner.value().to_string()
    }

    /// The leader's lease (ms).
    #[napi(getter)]
    pub fn ttl(&self) -> f64 {
        self.inner.ttl().as_secs_f64() * 1000.0
    }

    /// How long (ms) the servers keep a leader's hold after its connection closed.
    #[napi(getter)]
    pub fn lock_delay(&self) -> f64 {
        self.inner.lock_delay().as_secs_f64() * 1000.0
    }

    /// A Promise of a `NativeLeadership` once this candidate leads, or of
    /// a `Failure`; `cancel` gives the place in line up (`ABORTED`).
    #[napi(ts_return_type = "Promise<NativeLeadership | Failure>")]
    pub fn campaign<'env>(&self, env: &'env Env, cancel: Option<&Cancel>) -> Result<Object<'env>> {
        let election = self.inner.clone();
        let cancel = cancel.map(|c| c.token.clone()).unwrap_or_default();
        runtime::promise(env, move || async move {
            // Dropped (cancelled), the campaign leaves the line and holds nothing.
            let campaigned = tokio::select! {
                campaigned = election.campaign() => campaigned,
                () = cancel.cancelled() => {
                    return Ok(Either::B(Failure::from(hold::Failure::Aborted { resource: resource_of(election.name()) })));
                }
            };
            Ok(match campaigned {
                Ok(l) => Either::A(NativeLeadership { shared: SharedLeadership::new(l, crate::background) }),
                Err(e) => Either::B(failure(e)),
            })
        })
    }

    /// A Promise of the leader (`null`: none agreed on), or of a `Failure`.
    #[napi(ts_return_type = "Promise<NativeLeader | null | Failure>")]
    pub fn leader<'env>(&self, env: &'env Env) -> Result<Object<'env>> {
        let election = self.inner.clone();
        runtime::promise(env, move || async move {
            Ok(match election.leader().await {
                Ok(leader) => Either::A(leader.map(NativeLeader::from)),
                Err(e) => Either::B(failure(e)),
            })
        })
    }

    /// Each change of leader, from now on.
    #[napi]
    pub fn observe(&self) -> NativeObserver {
        NativeObserver { changes: Arc::new(tokio::sync::Mutex::new(Box::pin(self.inner.observe()))), closed: CancellationToken::new() }
    }
}

type Changes = Arc<tokio::sync::Mutex<Pin<Box<dyn Stream<Item = Leader> + Send>>>>;

/// The changes of leader `observe` yields.
#[napi]
pub struct NativeObserver {
    changes: Changes,
    closed: CancellationToken,
}

#[napi]
impl NativeObserver {
    /// A Promise of the next change; `null` once closed (a pending one
    /// too). The stream itself never ends.
    #[napi(ts_return_type = "Promise<NativeLeader | null>")]
    pub fn next<'env>(&self, env: &'env Env) -> Result<Object<'env>> {
        let (changes, closed) = (Arc::clone(&self.changes), self.closed.clone());
        runtime::promise(env, move || async move {
            // Dropped when closed: a change being read is read again by
            // the next call, none is lost.
            Ok(tokio::select! {
                biased;
                () = closed.cancelled() => None,
                leader = async { changes.lock().await.next().await } => leader.map(NativeLeader::from),
            })
        })
    }

    /// Stops reading: pending and later `next` calls resolve to `null`.
    #[napi]
    pub fn close(&self) {
        self.closed.cancel();
    }
}

/// This candidate leads.
#[napi]
pub struct NativeLeadership {
    shared: SharedLeadership,
}

#[napi]
impl NativeLeadership {
    /// The term: the leader's fencing token.
    #[napi(getter)]
    pub fn term(&self) -> BigInt {
        BigInt::from(self.shared.term())
    }

    #[napi(getter)]
    pub fn value(&self) -> String {
        self.shared.value()
    }

    #[napi(getter)]
    pub fn lost(&self) -> bool {
        self.shared.is_lost()
    }

    #[napi(getter)]
    pub fn resigned(&self) -> bool {
        self.shared.is_resigned()
    }

    /// The election's lock.
    #[napi(getter)]
    pub fn resource(&self) -> String {
        self.shared.resource().to_string()
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
    /// resigning a leadership lost before, `RELEASED` the second time).
    #[napi(ts_return_type = "Promise<Released | Failure>")]
    pub fn resign<'env>(&self, env: &'env Env) -> Result<Object<'env>> {
        let resignation = self.shared.resign();
        runtime::promise(env, move || async move {
            let done = match resignation {
                Ok(work) => work.await,
                Err(f) => Err(f),
            };
            Ok(match done {
                Ok(r) => Either::A(Released { released: u32::try_from(r.released).unwrap_or(u32::MAX) }),
                Err(f) => Either::B(Failure::from(f)),
            })
        })
    }

    /// A Promise of `true` the moment the leadership is lost, `false` once
    /// it resigned first. Pending, it keeps the event loop alive.
    #[napi(ts_return_type = "Promise<boolean>")]
    pub fn when_lost<'env>(&self, env: &'env Env) -> Result<Object<'env>> {
        let lost = self.shared.when_lost();
        runtime::promise(env, move || async move { Ok(lost.await) })
    }
}
