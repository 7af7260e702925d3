//! One hold of a lock, shared by the blocking `Lock` and the asyncio
//! `AsyncLock`: a plain `redlock::Lock` (try_lock) or a `redlock::LockGuard`
//! that keeps extending it (lock, guard).

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use redlock::{Error, Lock, LockGuard, Redlock};
use tokio::runtime::Runtime;
use tokio_util::sync::CancellationToken;

use crate::config::{Kind, Request};
use crate::errors::Failure;
use crate::exit;
use crate::runtime;
use crate::sync::locked;

pub enum Held {
    Plain(Lock),
    Kept(LockGuard),
}

/// A lock just acquired, on its way to Python. Until it gets there (an
/// asyncio task cancelled at the wrong moment, a Ctrl-C during a blocking
/// wait), dropping it releases the lock instead of leaving it held for a
/// whole ttl.
pub struct Fresh {
    redlock: Redlock,
    /// As asked (a permit's semaphore, not its slot key).
    resource: String,
    held: Option<Held>,
    on_lost: Option<Py<PyAny>>,
}

impl Drop for Fresh {
    fn drop(&mut self) {
        let Some(held) = self.held.take() else { return };
        let Some(rt) = runtime::usable() else {
            std::mem::forget(held);
            return;
        };
        // Counted: the interpreter's exit waits for it (`exit::shutdown`).
        match held {
            Held::Kept(guard) => {
                rt.spawn(exit::release(async move {
                    let _ = guard.release().await;
                }));
            }
            Held::Plain(lock) => {
                let redlock = self.redlock.clone();
                rt.spawn(exit::release(async move {
                    let _ = redlock.release(&lock).await;
                }));
            }
        }
    }
}

/// Acquires as `req` asks: one round (`once`) or retried as configured /
/// until its deadline; kept by a guard (`keep`) or not.
pub async fn acquire(redlock: Redlock, req: Request, once: bool, keep: bool, on_lost: Option<Py<PyAny>>) -> Result<Fresh, Error> {
    let deadline = req.deadline();
    let (resource, ttl) = (req.resource.as_str(), req.ttl);
    let lock = match (req.kind, once) {
        (Kind::Exclusive, true) => redlock.try_lock(resource, ttl).await?,
        (Kind::Shared, true) => redlock.try_lock_shared(resource, ttl).await?,
        (Kind::Permit(limit), true) => redlock.try_permit(resource, limit, ttl).await?,
        (Kind::Exclusive, false) => redlock.lock_until(resource, ttl, deadline).await?,
        (Kind::Shared, false) => redlock.lock_shared_until(resource, ttl, deadline).await?,
        (Kind::Permit(limit), false) => redlock.permit_until(resource, limit, ttl, deadline).await?,
    };
    let held = if keep { Held::Kept(redlock.keep(lock)) } else { Held::Plain(lock) };
    Ok(Fresh { redlock, resource: req.resource, held: Some(held), on_lost })
}

/// An acquisition under way (`acquire`), for the runtime to run: the
/// blocking and the asyncio API take it, whatever started it.
pub trait Acquisition: Future<Output = Result<Fresh, Error>> + Send + 'static {}

impl<F: Future<Output = Result<Fresh, Error>> + Send + 'static> Acquisition for F {}

/// What `Redlock.lock` and `AsyncRedlock.lock` return keeps for its entry:
/// an acquisition as `guard` makes, to start once.
pub struct Pending {
    redlock: Redlock,
    req: Request,
    /// The on_lost callback until entered, `None` after: a second entry is
    /// refused, since the first one's exit would not release its lock.
    unused: Mutex<Option<Option<Py<PyAny>>>>,
}

impl Pending {
    pub fn new(redlock: Redlock, req: Request, on_lost: Option<Py<PyAny>>) -> Pending {
        Pending { redlock, req, unused: Mutex::new(Some(on_lost)) }
    }

    /// The acquisition, the first time; a RuntimeError after. `client`
    /// names the class whose `lock()` to call again.
    pub fn start(&self, client: &str) -> PyResult<impl Acquisition> {
        let on_lost = locked(&self.unused)
            .take()
            .ok_or_else(|| PyRuntimeError::new_err(format!("a lock request is entered once: call {client}.lock() again")))?;
        let (redlock, req) = (self.redlock.clone(), self.req.clone());
        Ok(acquire(redlock, req, false, true, on_lost))
    }

    /// ``<LockRequest "resource" ttl=Xs>``, with `class` for the name.
    pub fn repr(&self, class: &str) -> String {
        format!("<{class} {:?} ttl={}s>", self.req.resource, self.req.ttl.as_secs_f64())
    }
}

/// A plain lock's state, shared by its re-entered holds.
struct Cell {
    lock: Mutex<Lock>,
    /// One extension at a time: two racing with different ttls could
    /// leave the state of the one that started first but landed last.
    extending: tokio::sync::Mutex<()>,
}

// One per hold, never in bulk: boxing the larger variant would buy nothing.
#[allow(clippy::large_enum_variant)]
enum State {
    Plain(Arc<Cell>),
    Kept {
        /// `None` once released.
        guard: Mutex<Option<LockGuard>>,
        /// The lock as it was when released, for the properties after.
        last: Mutex<Lock>,
    },
}

/// What the holds of one acquisition share (re-entered ones included).
struct Group {
    /// An extension of one of them failed: lost for all.
    lost: AtomicBool,
    /// Ends the on_lost watcher: cancelled at the last release, or when the
    /// last hold is gone.
    done: CancellationToken,
}

impl Drop for Group {
    fn drop(&mut self) {
        self.done.cancel();
    }
}

pub struct Hold {
    redlock: Redlock,
    resource: String,
    state: State,
    released: AtomicBool,
    group: Arc<Group>,
}

const LOST_BY_GUARD: &str = "the guard could not extend it in time; another client may hold it now, with a larger token";
const LOST_PLAIN: &str = "its validity ran out or an extension reached no quorum; another client may hold it now, with a larger token";

impl Hold {
    /// Takes the lock from `fresh`; with `on_lost`, a task on the runtime
    /// calls it (from a thread of its blocking pool) when the guard fires.
    pub fn from_fresh(mut fresh: Fresh) -> PyResult<Hold> {
        let rt = runtime::runtime()?;
        // A `Fresh` loses its lock only here, and is not used after.
        let held = fresh.held.take().ok_or_else(|| PyRuntimeError::new_err("acquired lock went missing"))?;
        let group = Arc::new(Group { lost: AtomicBool::new(false), done: CancellationToken::new() });
        let state = match held {
            Held::Plain(lock) => State::Plain(Arc::new(Cell { lock: Mutex::new(lock), extending: tokio::sync::Mutex::new(()) })),
            Held::Kept(guard) => {
                if let Some(callback) = fresh.on_lost.take() {
                    watch(rt, guard.lost_token(), group.done.clone(), callback);
                }
                State::Kept { last: Mutex::new(guard.lock()), guard: Mutex::new(Some(guard)) }
            }
        };
        Ok(Hold {
            redlock: fresh.redlock.clone(),
            resource: std::mem::take(&mut fresh.resource),
            state,
            released: AtomicBool::new(false),
            group,
        })
    }

    /// The lock as of now (its latest extension).
    pub fn lock(&self) -> Lock {
        match &self.state {
            State::Plain(cell) => locked(&cell.lock).clone(),
            State::Kept { guard, last } => match locked(guard).as_ref() {
                Some(g) => g.lock(),
                None => locked(last).clone(),
            },
        }
    }

    pub fn resource(&self) -> &str {
        &self.resource
    }

    pub fn kept(&self) -> bool {
        matches!(self.state, State::Kept { .. })
    }

    pub fn released(&self) -> bool {
        self.released.load(Ordering::SeqCst)
    }

    /// Lost: an extension failed, the guard fired, or (while held) its
    /// validity ran out.
    pub fn lost(&self) -> bool {
        if self.group.lost.load(Ordering::SeqCst) {
            return true;
        }
        match &self.state {
            // The guard notices a validity run out when its task next
            // wakes (late, after a pause of the process): this does at once.
            State::Kept { guard, .. } => locked(guard).as_ref().is_some_and(|g| g.is_lost() || g.lock().remaining().is_zero()),
            State::Plain(cell) => !self.released() && locked(&cell.lock).remaining().is_zero(),
        }
    }

    /// Seconds of validity left; 0 once lost or released.
    pub fn validity(&self) -> Duration {
        if self.released() || self.lost() {
            return Duration::ZERO;
        }
        self.lock().remaining()
    }

    fn lost_failure(&self) -> Failure {
        let why = if self.kept() { LOST_BY_GUARD } else { LOST_PLAIN };
        Failure::Lost { resource: self.resource.clone(), why }
    }

    fn check_held(&self) -> Result<(), Failure> {
        if self.released() {
            return Err(Failure::Released { resource: self.resource.clone() });
        }
        if self.lost() {
            return Err(self.lost_failure());
        }
        Ok(())
    }

    /// Extends the lease to `ttl` (default: the lock's) from now on a
    /// quorum. The checks run now; the future does the I/O.
    ///
    /// On a kept lock `ttl` becomes the guard's: it goes on extending to
    /// it, longer or shorter than before, and `validity` follows.
    pub fn extend(self: &Arc<Self>, ttl: Option<Duration>) -> Result<impl Future<Output = Result<(), Failure>> + Send + 'static, Failure> {
        self.check_held()?;
        let kept = match &self.state {
            State::Kept { guard, .. } => match locked(guard).as_ref() {
                Some(g) => Some(g.extend(ttl.unwrap_or_else(|| g.lock().ttl))),
                None => return Err(Failure::Released { resource: self.resource.clone() }),
            },
            State::Plain(_) => None,
        };
        let this = Arc::clone(self);
        Ok(async move {
            if let Some(extension) = kept {
                return match extension.await {
                    Ok(_) => Ok(()),
                    // Refused as asked (e.g. over max-ttl): the lease and
                    // the guard's schedule are as they were.
                    Err(e @ Error::Rejected { .. }) => Err(e.into()),
                    Err(e) => {
                        // The guard fired its own signal: on_lost runs.
                        this.group.lost.store(true, Ordering::SeqCst);
                        Err(e.into())
                    }
                };
            }
            let State::Plain(cell) = &this.state else {
                return Ok(());
            };
            let _one = cell.extending.lock().await;
            let lock = locked(&cell.lock).clone();
            match this.redlock.extend(&lock, ttl.unwrap_or(lock.ttl)).await {
                Ok(extended) => {
                    *locked(&cell.lock) = extended;
                    Ok(())
                }
                Err(e @ Error::Rejected { .. }) => Err(e.into()),
                Err(e) => {
                    this.group.lost.store(true, Ordering::SeqCst);
                    Err(e.into())
                }
            }
        })
    }

    /// Releases this hold; the last hold of the lock releases it on the
    /// servers. The future fails with `Lost` after releasing when the lock
    /// had been lost before.
    pub fn release(self: &Arc<Self>) -> Result<impl Future<Output = Result<(), Failure>> + Send + 'static, Failure> {
        let was_lost = self.lost();
        if self.released.swap(true, Ordering::SeqCst) {
            return Err(Failure::Released { resource: self.resource.clone() });
        }
        let guard = match &self.state {
            State::Kept { guard, last } => {
                let g = locked(guard).take();
                if let Some(g) = &g {
                    *locked(last) = g.lock();
                }
                g
            }
            State::Plain(_) => None,
        };
        if was_lost {
            self.group.lost.store(true, Ordering::SeqCst);
        }
        let this = Arc::clone(self);
        // Counted from now: the interpreter's exit waits for it.
        Ok(exit::release(async move {
            let remaining = match (&this.state, guard) {
                (State::Kept { .. }, Some(g)) => g.release().await?.remaining_holds,
                (State::Kept { .. }, None) => 0,
                (State::Plain(cell), _) => {
                    let lock = locked(&cell.lock).clone();
                    this.redlock.release(&lock).await?.remaining_holds
                }
            };
            if remaining == 0 {
                this.group.done.cancel();
            }
            if was_lost {
                return Err(this.lost_failure());
            }
            Ok(())
        }))
    }

    /// Another hold of the same acquisition (see `Lock::reenter` in the crate).
    pub fn reenter(&self) -> Result<Hold, Failure> {
        self.check_held()?;
        let state = match &self.state {
            State::Plain(cell) => {
                locked(&cell.lock).reenter()?;
                State::Plain(Arc::clone(cell))
            }
            State::Kept { guard, .. } => {
                let again = match locked(guard).as_ref() {
                    Some(g) => g.reenter()?,
                    None => return Err(Failure::Released { resource: self.resource.clone() }),
                };
                State::Kept { last: Mutex::new(again.lock()), guard: Mutex::new(Some(again)) }
            }
        };
        Ok(Hold {
            redlock: self.redlock.clone(),
            resource: self.resource.clone(),
            state,
            released: AtomicBool::new(false),
            group: Arc::clone(&self.group),
        })
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        // A plain lock not released stays held until its lease ends, as the
        // crate's `Lock` does. A guard dropped releases its hold (the last
        // one the lock) in the background, as the crate's Drop would, but
        // counted: the interpreter's exit waits for it.
        let State::Kept { guard, .. } = &mut self.state else {
            return;
        };
        let Some(g) = guard.get_mut().unwrap_or_else(|p| p.into_inner()).take() else {
            return;
        };
        match runtime::usable() {
            Some(rt) => {
                rt.spawn(exit::release(async move {
                    let _ = g.release().await;
                }));
            }
            // A forked child: the parent's runtime is not there to abort
            // the keeper on, and the parent still holds the lock.
            None => std::mem::forget(g),
        }
    }
}

/// Calls `callback` once when `lost` fires, unless `done` comes first.
fn watch(rt: &Runtime, lost: CancellationToken, done: CancellationToken, callback: Py<PyAny>) {
    rt.spawn(async move {
        tokio::select! {
            _ = lost.cancelled() => {}
            _ = done.cancelled() => return,
        }
        // Not on a worker thread: those must never wait for the GIL.
        let _ = tokio::task::spawn_blocking(move || {
            // None once the interpreter exits: nobody left to tell.
            exit::attach(|py| {
                if let Err(e) = callback.call0(py) {
                    e.write_unraisable(py, Some(callback.bind(py)));
                }
            })
        })
        .await;
    });
}
