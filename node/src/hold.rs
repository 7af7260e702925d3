//! One held lock: a plain `redlock::Lock` (extended only when asked) or a
//! `redlock::LockGuard` that keeps extending it and signals its loss.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use redlock::{Error, Lock, LockGuard, Redlock};
use tokio_util::sync::CancellationToken;

use crate::config::{Kind, Patience, Request};
use crate::errors::Fault;
use crate::runtime;

/// A poisoned mutex still holds valid data here: every critical section
/// only reads or replaces a value.
pub fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

enum State {
    Plain {
        lock: Mutex<Lock>,
        /// One extension at a time: two racing with different ttls could
        /// leave the state of the one that started first but landed last.
        extending: tokio::sync::Mutex<()>,
    },
    Kept {
        /// `None` once released.
        guard: Mutex<Option<LockGuard>>,
        /// The lock as it was when released, for the properties after.
        last: Mutex<Lock>,
        /// The guard's lost signal.
        lost: CancellationToken,
    },
}

pub struct Hold {
    redlock: Redlock,
    /// As asked (a permit's semaphore, not its slot key).
    resource: String,
    state: State,
    released: AtomicBool,
    /// An explicit extension failed.
    lost: AtomicBool,
    /// Fired with `lost` for a plain lock (a kept one has its guard's).
    lost_plain: CancellationToken,
    /// Cancelled at the release: ends `when_lost`.
    done: CancellationToken,
}

const LOST_BY_GUARD: &str = "the guard could not extend it in time; another client may hold it now, with a larger token";
const LOST_PLAIN: &str = "its validity ran out or an extension reached no quorum; another client may hold it now, with a larger token";

/// Acquires as `req` asks; kept by a guard (`keep`) or not. Runs on the
/// runtime (a guard's keeper is a task of it).
pub async fn acquire(redlock: Redlock, req: Request, keep: bool) -> Result<Hold, Error> {
    let deadline = req.deadline();
    let (resource, ttl) = (req.resource.as_str(), req.ttl);
    let lock = match (req.kind, req.patience) {
        (Kind::Exclusive, Patience::Once) => redlock.try_lock(resource, ttl).await?,
        (Kind::Shared, Patience::Once) => redlock.try_lock_shared(resource, ttl).await?,
        (Kind::Permit(limit), Patience::Once) => redlock.try_permit(resource, limit, ttl).await?,
        (Kind::Exclusive, _) => redlock.lock_until(resource, ttl, deadline).await?,
        (Kind::Shared, _) => redlock.lock_shared_until(resource, ttl, deadline).await?,
        (Kind::Permit(limit), _) => redlock.permit_until(resource, limit, ttl, deadline).await?,
    };
    let state = if keep {
        let guard = redlock.keep(lock);
        State::Kept { lost: guard.lost_token(), last: Mutex::new(guard.lock()), guard: Mutex::new(Some(guard)) }
    } else {
        State::Plain { lock: Mutex::new(lock), extending: tokio::sync::Mutex::new(()) }
    };
    Ok(Hold {
        redlock,
        resource: req.resource,
        state,
        released: AtomicBool::new(false),
        lost: AtomicBool::new(false),
        lost_plain: CancellationToken::new(),
        done: CancellationToken::new(),
    })
}

impl Hold {
    /// The lock as of now (its latest extension).
    pub fn lock(&self) -> Lock {
        match &self.state {
            State::Plain { lock, .. } => locked(lock).clone(),
            State::Kept { guard, last, .. } => match locked(guard).as_ref() {
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
        if self.lost.load(Ordering::SeqCst) {
            return true;
        }
        match &self.state {
            // The guard notices a validity run out when its task next
            // wakes (late, after a pause of the process): this does at once.
            State::Kept { guard, .. } => locked(guard).as_ref().is_some_and(|g| g.is_lost() || g.lock().remaining().is_zero()),
            State::Plain { lock, .. } => !self.released() && locked(lock).remaining().is_zero(),
        }
    }

    /// Validity left; zero once lost or released.
    pub fn validity(&self) -> Duration {
        if self.released() || self.lost() {
            return Duration::ZERO;
        }
        self.lock().remaining()
    }

    fn lost_fault(&self) -> Fault {
        let why = if self.kept() { LOST_BY_GUARD } else { LOST_PLAIN };
        Fault::Lost { resource: self.resource.clone(), why }
    }

    fn lose(&self) {
        self.lost.store(true, Ordering::SeqCst);
        self.lost_plain.cancel();
    }

    fn check_held(&self) -> Result<(), Fault> {
        if self.released() {
            return Err(Fault::Released { resource: self.resource.clone() });
        }
        if self.lost() {
            return Err(self.lost_fault());
        }
        Ok(())
    }

    /// Extends the lease to `ttl` (default: the lock's) from now on a
    /// quorum. On a kept lock `ttl` becomes the guard's from then on.
    pub async fn extend(self: Arc<Self>, ttl: Option<Duration>) -> Result<(), Fault> {
        self.check_held()?;
        let kept = match &self.state {
            State::Kept { guard, .. } => match locked(guard).as_ref() {
                Some(g) => Some(g.extend(ttl.unwrap_or_else(|| g.lock().ttl))),
                None => return Err(Fault::Released { resource: self.resource.clone() }),
            },
            State::Plain { .. } => None,
        };
        let result = match (kept, &self.state) {
            (Some(extension), _) => extension.await.map(|_| ()),
            (None, State::Plain { lock, extending }) => {
                let _one = extending.lock().await;
                let current = locked(lock).clone();
                match self.redlock.extend(&current, ttl.unwrap_or(current.ttl)).await {
                    Ok(extended) => {
                        *locked(lock) = extended;
                        Ok(())
                    }
                    Err(e) => Err(e),
                }
            }
            (None, State::Kept { .. }) => Ok(()),
        };
        match result {
            Ok(()) => Ok(()),
            // Refused as asked (e.g. over max-ttl): the lease (and the
            // guard's schedule) are as they were.
            Err(e @ Error::Rejected { .. }) => Err(e.into()),
            Err(e) => {
                // A kept lock's guard fired its own signal.
                self.lose();
                Err(e.into())
            }
        }
    }

    /// Releases the lock on the servers. Fails with `Lost` after releasing
    /// when the lock had been lost before.
    pub async fn release(self: Arc<Self>) -> Result<usize, Fault> {
        let was_lost = self.lost();
        if self.released.swap(true, Ordering::SeqCst) {
            return Err(Fault::Released { resource: self.resource.clone() });
        }
        if was_lost {
            self.lose();
        }
        let result = match &self.state {
            State::Kept { guard, last, .. } => {
                let g = locked(guard).take();
                match g {
                    Some(g) => {
                        *locked(last) = g.lock();
                        g.release().await.map(|r| r.released)
                    }
                    None => Ok(0),
                }
            }
            State::Plain { lock, .. } => {
                let current = locked(lock).clone();
                self.redlock.release(&current).await.map(|r| r.released)
            }
        };
        self.done.cancel();
        let released = result?;
        if was_lost {
            return Err(self.lost_fault());
        }
        Ok(released)
    }

    /// Completes with `true` the moment the lock is lost, or `false` when
    /// it was released first.
    pub fn when_lost(&self) -> impl Future<Output = bool> + Send + 'static {
        let lost = match &self.state {
            State::Kept { lost, .. } => lost.clone(),
            State::Plain { .. } => self.lost_plain.clone(),
        };
        let done = self.done.clone();
        let already = self.lost.load(Ordering::SeqCst);
        async move {
            if already {
                return true;
            }
            tokio::select! {
                biased;
                () = lost.cancelled() => true,
                () = done.cancelled() => false,
            }
        }
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.done.cancel();
        // A plain lock not released stays held until its lease ends, as
        // the crate's `Lock` does. A kept one (its JavaScript object
        // collected unreleased) is released in the background, as the
        // crate's guard would if it were dropped on the runtime.
        let State::Kept { guard, .. } = &mut self.state else {
            return;
        };
        let Some(g) = guard.get_mut().unwrap_or_else(|p| p.into_inner()).take() else {
            return;
        };
        if let Ok(rt) = runtime::runtime() {
            rt.spawn(async move {
                let _ = g.release().await;
            });
        }
    }
}
