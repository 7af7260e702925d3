//! `redislock.node`: Node.js bindings of the `redlock` crate, the Redlock
//! quorum client. The algorithm lives in the crate only; this crate
//! converts arguments, results and errors, and runs the crate's futures on
//! one tokio runtime per process (`runtime`). The package's JavaScript
//! (`index.js`, `lib/`) wraps these classes in the public API: error
//! classes, `AbortSignal`, `using`, `Symbol.asyncDispose`.
//!
//! - `NativeRedlock`: a client; `acquire` returns a Promise of a `NativeLock`
//! - `NativeLock`: one hold of a lock (the crate's `hold::Hold`), plain or
//!   kept by a guard
//! - `Cancel`: the native end of an `AbortSignal`
//! - `election`: `NativeElection`, `NativeLeadership`, `NativeObserver`
//! - `metrics`: the client's metrics as a plain object (`NativeRedlock.metrics`)
//! - `watch`: `NativeWatch`, a lock's changes as a quorum announced them
//! - `asks`: `NativeAsks`, the asks a held lock hears, and what an ask reached
//! - `members`: `NativeGroup`, `NativeMembership`, `NativeMember`
//! - `config`, `errors`, `runtime`, `settle`

use std::sync::Arc;

use napi::bindgen_prelude::{BigInt, Either, Object, ToNapiValue};
use napi::{sys, Env, Result};
use napi_derive::napi;
use redlock::hold::{self, Hold, Work};
use redlock::Redlock;
use tokio_util::sync::CancellationToken;

mod asks;
mod config;
mod election;
mod errors;
mod members;
mod metrics;
mod runtime;
mod settle;
mod watch;

/// mimalloc, not the process's malloc: see node/Cargo.toml.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use config::Options;
use errors::{Failure, ServerOutcome};

/// Where a hold dropped unreleased (its JavaScript object collected)
/// releases its lock: on the runtime, when there is one.
fn background(work: Work) {
    if let Ok(rt) = runtime::runtime() {
        rt.spawn(work);
    }
}

/// A Redlock client over a list of servers. Cheap to share: every
/// acquisition is a new owner, so callers sharing one exclude each other
/// like separate processes.
#[napi]
pub struct NativeRedlock {
    inner: Redlock,
}

/// Cancels an acquisition's wait (the native end of an `AbortSignal`).
#[napi]
pub struct Cancel {
    token: CancellationToken,
}

#[napi]
impl Cancel {
    #[napi(constructor)]
    #[allow(clippy::new_without_default)]
    pub fn new() -> Cancel {
        Cancel { token: CancellationToken::new() }
    }

    /// Stops the wait: the acquisition leaves the resource's line and its
    /// Promise resolves with an `ABORTED` failure.
    #[napi]
    pub fn cancel(&self) {
        self.token.cancel();
    }
}

/// The `Content-Type` of the text `NativeRedlock.metricsText()` returns
/// (the package's `METRICS_CONTENT_TYPE`).
#[napi]
pub fn metrics_content_type() -> &'static str {
    redlock::metrics::CONTENT_TYPE
}

/// What a release did.
#[napi(object)]
pub struct Released {
    /// Servers that released the lock.
    pub released: u32,
}

#[napi]
impl NativeRedlock {
    /// `urls`: `redis://host:port` (or `redis+cluster://...`) per server,
    /// or one URL as a string.
    #[napi(constructor)]
    pub fn new(env: Env, urls: Either<String, Vec<String>>, options: Option<Options>) -> Result<NativeRedlock> {
        // The crate's transport makes its clients here, with no I/O.
        let inner = config::new_redlock(&env, config::server_list(urls)?, options.unwrap_or_default())?;
        Ok(NativeRedlock { inner })
    }

    /// Servers that must agree.
    #[napi(getter)]
    pub fn quorum(&self) -> u32 {
        u32::try_from(self.inner.quorum()).unwrap_or(u32::MAX)
    }

    /// The servers, as `host:port`.
    #[napi(getter)]
    pub fn servers(&self) -> Vec<String> {
        self.inner.servers()
    }

    /// This client's metrics now (`metrics::Metrics`), counted by the
    /// crate for every acquisition through it and its elections.
    #[napi]
    pub fn metrics(&self) -> metrics::Metrics {
        metrics::snapshot(&self.inner.metrics())
    }

    /// The same counts in Prometheus's text format (0.0.4).
    #[napi]
    pub fn metrics_text(&self) -> String {
        self.inner.metrics().to_prometheus()
    }

    /// The changes of `resource` a quorum of servers announced (the
    /// crate's `Redlock::watch`), read one at a time.
    #[napi]
    pub fn watch(&self, resource: String) -> watch::NativeWatch {
        watch::NativeWatch::new(&self.inner, &resource)
    }

    /// A Promise of `NativeAsked`, or of a `Failure` (too few servers
    /// answered): every holder of `resource` asked to let it go, with
    /// `message` (the crate's `Redlock::ask`). Nothing is released here.
    #[napi(ts_return_type = "Promise<NativeAsked | Failure>")]
    pub fn ask<'env>(&self, env: &'env Env, resource: String, message: Option<String>) -> Result<Object<'env>> {
        let redlock = self.inner.clone();
        runtime::promise(env, move || async move {
            Ok(match redlock.ask(&resource, message.as_deref()).await {
                Ok(asked) => Either::A(asks::NativeAsked::from(asked)),
                Err(e) => Either::B(Failure::from(hold::Failure::from(e))),
            })
        })
    }

    /// A Promise of `NativeResized`, or of a `Failure` (too few servers
    /// answered alike): the semaphore `resource` given the limit `limit`
    /// on every server (the crate's `Redlock::resize`). `limit` is checked
    /// now (a `ConfigError` thrown at once): a whole number from 1 to 1024.
    #[napi(ts_return_type = "Promise<NativeResized | Failure>")]
    pub fn resize<'env>(&self, env: &'env Env, resource: String, limit: f64) -> Result<Object<'env>> {
        let limit = config::NAMES.limit(limit).map_err(|f| errors::thrown_in(env, f))?;
        let redlock = self.inner.clone();
        runtime::promise(env, move || async move {
            Ok(match redlock.resize(&resource, limit).await {
                Ok(resized) => Either::A(asks::NativeResized::from(resized)),
                Err(e) => Either::B(Failure::from(hold::Failure::from(e))),
            })
        })
    }

    /// A Promise of group `name`'s members now, or of a `Failure` (too
    /// few servers answered): any client reads them, none is joined.
    #[napi(ts_return_type = "Promise<NativeMember[] | Failure>")]
    pub fn members<'env>(&self, env: &'env Env, group: String) -> Result<Object<'env>> {
        members::members_of(env, self.inner.clone(), group)
    }

    /// A Promise of a `NativeLock`, or of a `Failure`. Arguments are
    /// checked now (a `ConfigError` thrown at once); `resource`: one name
    /// or an array locked all or nothing; `ttl`; `wait` (or `retry`) as in
    /// `config::request`; `permits` of a semaphore of `limit`; `keep`:
    /// kept by a guard that extends it; `cancel` stops the wait.
    #[napi(ts_return_type = "Promise<NativeLock | Failure>")]
    #[allow(clippy::too_many_arguments)]
    pub fn acquire<'env>(
        &self,
        env: &'env Env,
        resource: Either<String, Vec<String>>,
        ttl: config::Duration,
        wait: Option<config::Duration>,
        retry: bool,
        shared: bool,
        limit: Option<f64>,
        permits: Option<f64>,
        keep: bool,
        cancel: Option<&Cancel>,
    ) -> Result<Object<'env>> {
        let req = config::request(env, resource, ttl, wait, retry, shared, limit, permits)?;
        let cancel = cancel.map(|c| c.token.clone()).unwrap_or_default();
        let redlock = self.inner.clone();
        runtime::promise(env, move || async move {
            let name = req.resources.to_string();
            // Dropping the acquisition (cancelled) gives its place in line
            // up and releases whatever a round in flight was granted.
            let acquired = tokio::select! {
                acquired = hold::acquire(redlock, req, keep, background) => acquired,
                () = cancel.cancelled() => return Ok(Acquisition::Failed(Failure::from(hold::Failure::Aborted { resource: name }))),
            };
            Ok(match acquired {
                Ok(acquired) => Acquisition::Granted(acquired),
                Err(e) => Acquisition::Failed(Failure::from(hold::Failure::from(e))),
            })
        })
    }

    /// A Promise that resolves once the places in line this client gives
    /// up in the background after a grant are given up: call it before
    /// the process exits right after an acquisition, or the next in line
    /// waits for the place's lease to end.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn settle<'env>(&self, env: &'env Env) -> Result<Object<'env>> {
        let redlock = self.inner.clone();
        runtime::promise(env, move || async move {
            redlock.settle().await;
            Ok(())
        })
    }
}

/// An acquisition's result on its way to JavaScript. The lock is handed
/// to its caller when converted there, on the JavaScript thread: one whose
/// Promise is gone (its worker thread ended meanwhile) is dropped before
/// that, and so released at once (`hold::Acquired`), not left held for
/// its whole lease.
enum Acquisition {
    Granted(hold::Acquired),
    Failed(Failure),
}

impl ToNapiValue for Acquisition {
    unsafe fn to_napi_value(env: sys::napi_env, val: Self) -> Result<sys::napi_value> {
        let value = match val {
            Acquisition::Granted(acquired) => Either::A(NativeLock { hold: Arc::new(acquired.hold()) }),
            Acquisition::Failed(failure) => Either::B(failure),
        };
        // SAFETY: called by napi on the environment's thread, as this is.
        unsafe { Either::<NativeLock, Failure>::to_napi_value(env, value) }
    }
}

/// One held lock.
#[napi]
pub struct NativeLock {
    hold: Arc<Hold>,
}

#[napi]
impl NativeLock {
    /// The resource as asked for (a permit's semaphore name); several
    /// resources' names joined with ", ".
    #[napi(getter)]
    pub fn resource(&self) -> String {
        self.hold.resource().to_string()
    }

    /// Each resource locked, in the order given: one name, or the names
    /// of an array locked all or nothing.
    #[napi(getter)]
    pub fn resources(&self) -> Vec<String> {
        self.hold.resources().names().to_vec()
    }

    /// The key held on the servers: the resource, or a permit's own key.
    #[napi(getter)]
    pub fn key(&self) -> String {
        self.hold.lock().resource
    }

    /// The random owner value of this acquisition.
    #[napi(getter)]
    pub fn owner(&self) -> String {
        self.hold.lock().owner
    }

    /// The fencing token; `null` in script mode.
    #[napi(getter)]
    pub fn token(&self) -> Option<BigInt> {
        self.hold.lock().token.map(BigInt::from)
    }

    /// The lease (ms) of the latest acquisition or extension.
    #[napi(getter)]
    pub fn ttl(&self) -> f64 {
        self.hold.lock().ttl.as_secs_f64() * 1000.0
    }

    /// Milliseconds the lock is still safe to use; 0 once lost or released.
    #[napi(getter)]
    pub fn validity(&self) -> f64 {
        self.hold.validity().as_secs_f64() * 1000.0
    }

    #[napi(getter)]
    pub fn lost(&self) -> bool {
        self.hold.lost()
    }

    /// Why the lock was lost (`expired`, `refused`, `unreachable`,
    /// `revoked`); null while it is not.
    #[napi(getter)]
    pub fn loss_cause(&self) -> Option<&'static str> {
        self.hold.loss_cause()
    }

    #[napi(getter)]
    pub fn released(&self) -> bool {
        self.hold.released()
    }

    #[napi(getter)]
    pub fn shared(&self) -> bool {
        self.hold.lock().shared
    }

    /// Kept by a guard that extends it.
    #[napi(getter)]
    pub fn kept(&self) -> bool {
        self.hold.kept()
    }

    /// Each server's answer to the acquisition (or latest extension).
    #[napi(getter)]
    pub fn outcomes(&self) -> Vec<ServerOutcome> {
        errors::outcomes(&self.hold.lock().instances)
    }

    /// A Promise of `null`, or of a `Failure`. `ttl`: the new lease
    /// (default the lock's); a kept lock keeps extending to it.
    #[napi(ts_return_type = "Promise<Failure | null>")]
    pub fn extend<'env>(&self, env: &'env Env, ttl: Option<config::Duration>) -> Result<Object<'env>> {
        let ttl = ttl.map(|t| config::NAMES.ttl(config::span(t))).transpose().map_err(|f| errors::thrown_in(env, f))?;
        let extension = self.hold.extend(ttl);
        runtime::promise(env, move || async move {
            Ok(match extension {
                Ok(work) => work.await.err().map(Failure::from),
                Err(f) => Some(Failure::from(f)),
            })
        })
    }

    /// A Promise of `Released`, or of a `Failure`. The last hold of the
    /// lock releases it on the servers.
    #[napi(ts_return_type = "Promise<Released | Failure>")]
    pub fn release<'env>(&self, env: &'env Env) -> Result<Object<'env>> {
        let release = self.hold.release();
        runtime::promise(env, move || async move {
            let done = match release {
                Ok(work) => work.await,
                Err(f) => Err(f),
            };
            Ok(match done {
                Ok(r) => Either::A(Released { released: u32::try_from(r.released).unwrap_or(u32::MAX) }),
                Err(f) => Either::B(Failure::from(f)),
            })
        })
    }

    /// Another hold of the same acquisition, at once and without asking
    /// the servers: each is released once, the last release releases the
    /// lock. A `Failure` (`RELEASED`, `LOCK_LOST`) for a hold no longer
    /// held, which the package throws.
    #[napi(ts_return_type = "NativeLock | Failure")]
    pub fn reenter(&self) -> Either<NativeLock, Failure> {
        match self.hold.reenter() {
            Ok(hold) => Either::A(NativeLock { hold: Arc::new(hold) }),
            Err(f) => Either::B(Failure::from(f)),
        }
    }

    /// `["LOCK.FENCED", register, token]`: the words before the command
    /// of a write fenced by this hold's token, which the package appends
    /// its caller's command to. A `Failure` (`CONFIG` for a hold whose
    /// token cannot fence: script mode, shared, permits; `RELEASED`,
    /// `LOCK_LOST`), which the package throws.
    #[napi(ts_return_type = "string[] | Failure")]
    pub fn fenced_prefix(&self, register: String) -> Either<Vec<String>, Failure> {
        match self.hold.fenced_prefix(&register) {
            Ok(words) => Either::A(words.to_vec()),
            Err(f) => Either::B(Failure::from(f)),
        }
    }

    /// `["LOCK.GUARD", key, owner, token]`: the words before a command
    /// guarded by this hold; a `Failure` as `fencedPrefix` gives, but for
    /// shared holds and permits, which the servers check on their own.
    #[napi(ts_return_type = "string[] | Failure")]
    pub fn guarded_prefix(&self) -> Either<Vec<String>, Failure> {
        match self.hold.guarded_prefix() {
            Ok(words) => Either::A(words.to_vec()),
            Err(f) => Either::B(Failure::from(f)),
        }
    }

    /// Holds of this acquisition not yet released (see `reenter`).
    #[napi(getter)]
    pub fn holds(&self) -> u32 {
        u32::try_from(self.hold.lock().holds()).unwrap_or(u32::MAX)
    }

    /// The asks for this lock (`NativeRedlock.ask`), each once; the
    /// reader ends when the lock is lost or this hold released.
    #[napi]
    pub fn asks(&self) -> asks::NativeAsks {
        asks::NativeAsks::new(self.hold.asks())
    }

    /// A Promise of `true` the moment the lock is lost, `false` once this
    /// hold was released first. Pending, it keeps the event loop alive.
    #[napi(ts_return_type = "Promise<boolean>")]
    pub fn when_lost<'env>(&self, env: &'env Env) -> Result<Object<'env>> {
        let lost = self.hold.when_lost();
        runtime::promise(env, move || async move { Ok(lost.await) })
    }
}
