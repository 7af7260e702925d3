//! One hold of a lock as a binding hands it out: a plain `Lock` (extended
//! only when asked) or a `LockGuard` that keeps extending it and signals
//! its loss; re-entered holds share the lock and its fate.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{Failure, Spawn};
use crate::error::Error;
use crate::guard::{loss_cause, LockGuard};
use crate::metrics::LossCause;
use crate::redlock::{Lock, Redlock, Released};
use crate::resources::Resources;

/// A poisoned mutex still holds valid data here: every critical section
/// only reads or replaces a value.
fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
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
    /// Why, when an extension of a plain hold failed (a kept one's guard
    /// knows its own).
    cause: Mutex<Option<LossCause>>,
    /// Fires the moment the lock is lost: a kept lock's guard's own
    /// signal; for a plain one, fired here when an extension fails.
    signal: CancellationToken,
    /// Cancelled at the last release, or when the last hold is gone.
    done: CancellationToken,
}

impl Drop for Group {
    fn drop(&mut self) {
        self.done.cancel();
    }
}

/// One hold of a lock.
pub struct Hold {
    redlock: Redlock,
    /// As asked (a permit's semaphore, not its slot key).
    /// The resources as asked for, and their name (`resource()`).
    resources: Resources,
    resource: String,
    state: State,
    released: AtomicBool,
    group: Arc<Group>,
    /// Cancelled when this hold is released or dropped (a child of the
    /// group's): ends its `when_lost`.
    done: CancellationToken,
    /// Not yet handed to its caller (`Acquired`): dropped, even a plain
    /// lock is released.
    fresh: bool,
    spawn: Spawn,
}

const LOST_BY_GUARD: &str = "the guard could not extend it in time; another client may hold it now, with a larger token";
const LOST_PLAIN: &str = "its validity ran out or an extension reached no quorum; another client may hold it now, with a larger token";

impl Hold {
    pub(super) fn plain(redlock: Redlock, resource: Resources, lock: Lock, spawn: Spawn) -> Hold {
        let cell = Cell { lock: Mutex::new(lock), extending: tokio::sync::Mutex::new(()) };
        Hold::new(redlock, resource, State::Plain(Arc::new(cell)), CancellationToken::new(), spawn)
    }

    pub(super) fn keeping(redlock: Redlock, resource: Resources, guard: LockGuard, spawn: Spawn) -> Hold {
        let signal = guard.lost_token();
        let state = State::Kept { last: Mutex::new(guard.lock()), guard: Mutex::new(Some(guard)) };
        Hold::new(redlock, resource, state, signal, spawn)
    }

    fn new(redlock: Redlock, resources: Resources, state: State, signal: CancellationToken, spawn: Spawn) -> Hold {
        let group = Arc::new(Group { lost: AtomicBool::new(false), cause: Mutex::new(None), signal, done: CancellationToken::new() });
        let done = group.done.child_token();
        Hold {
            redlock,
            resource: resources.to_string(),
            resources,
            state,
            released: AtomicBool::new(false),
            group,
            done,
            fresh: true,
            spawn,
        }
    }

    pub(super) fn hand_over(&mut self) {
        self.fresh = false;
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

    /// The resource as asked for (a permit's semaphore name); a set's
    /// names joined with `", "`.
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// The resources as asked for: one, or a set held whole.
    pub fn resources(&self) -> &Resources {
        &self.resources
    }

    /// Kept by a guard that extends it.
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

    /// Why the lock was lost (`LossCause::label`: `expired`, `refused`,
    /// `unreachable`, `revoked`), `None` while it is not.
    pub fn loss_cause(&self) -> Option<&'static str> {
        if !self.lost() {
            return None;
        }
        let failed = *locked(&self.group.cause);
        let kept = match &self.state {
            State::Kept { guard, .. } => locked(guard).as_ref().and_then(LockGuard::loss_cause),
            State::Plain(_) => None,
        };
        // Lost with no failed extension: its validity ran out.
        Some(failed.or(kept).unwrap_or(LossCause::Expired).label())
    }

    /// Validity left; zero once lost or released.
    pub fn validity(&self) -> Duration {
        if self.released() || self.lost() {
            return Duration::ZERO;
        }
        self.lock().remaining()
    }

    /// `released`, `lost`, `kept` or `held`: for a binding's repr.
    pub fn state(&self) -> &'static str {
        if self.released() {
            "released"
        } else if self.lost() {
            "lost"
        } else if self.kept() {
            "kept"
        } else {
            "held"
        }
    }

    fn lost_failure(&self) -> Failure {
        let why = if self.kept() { LOST_BY_GUARD } else { LOST_PLAIN };
        Failure::Lost { resource: self.resource.clone(), why }
    }

    fn released_failure(&self) -> Failure {
        Failure::Released { resource: self.resource.clone() }
    }

    /// Marks the lock lost for every hold and fires the signal.
    fn lose(&self) {
        self.group.lost.store(true, Ordering::SeqCst);
        self.group.signal.cancel();
    }

    fn check_held(&self) -> Result<(), Failure> {
        if self.released() {
            return Err(self.released_failure());
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
    /// it, longer or shorter than before, and `validity` follows. An
    /// extension that fails (other than refused as asked, e.g. over
    /// max-ttl) loses the lock.
    pub fn extend(self: &Arc<Self>, ttl: Option<Duration>) -> Result<impl Future<Output = Result<(), Failure>> + Send + 'static, Failure> {
        self.check_held()?;
        let kept = match &self.state {
            State::Kept { guard, .. } => match locked(guard).as_ref() {
                Some(g) => Some(g.extend(ttl.unwrap_or_else(|| g.lock().ttl))),
                None => return Err(self.released_failure()),
            },
            State::Plain(_) => None,
        };
        let this = Arc::clone(self);
        Ok(async move {
            let result = match (kept, &this.state) {
                (Some(extension), _) => extension.await.map(|_| ()),
                (None, State::Plain(cell)) => {
                    let _one = cell.extending.lock().await;
                    let current = locked(&cell.lock).clone();
                    this.redlock.extend(&current, ttl.unwrap_or(current.ttl)).await.map(|extended| *locked(&cell.lock) = extended)
                }
                (None, State::Kept { .. }) => Ok(()),
            };
            match result {
                Ok(()) => Ok(()),
                // Refused as asked: the lease (and the guard's schedule)
                // are as they were.
                Err(e @ Error::Rejected { .. }) => Err(e.into()),
                Err(e) => {
                    locked(&this.group.cause).get_or_insert(loss_cause(&e, this.redlock.quorum()));
                    this.lose();
                    Err(e.into())
                }
            }
        })
    }

    /// Releases this hold; the last hold of the lock releases it on the
    /// servers. The checks run now; the future does the I/O, and fails
    /// with `Lost` after releasing when the lock had been lost before.
    pub fn release(self: &Arc<Self>) -> Result<impl Future<Output = Result<Released, Failure>> + Send + 'static, Failure> {
        let was_lost = self.lost();
        if self.released.swap(true, Ordering::SeqCst) {
            return Err(self.released_failure());
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
            self.lose();
        }
        let this = Arc::clone(self);
        Ok(async move {
            let result = match (&this.state, guard) {
                (State::Kept { .. }, Some(g)) => g.release().await,
                (State::Kept { .. }, None) => Ok(Released { released: 0, remaining_holds: 0, instances: Vec::new() }),
                (State::Plain(cell), _) => {
                    let lock = locked(&cell.lock).clone();
                    this.redlock.release(&lock).await
                }
            };
            this.done.cancel();
            let released = result?;
            if released.remaining_holds == 0 {
                this.group.done.cancel();
            }
            if was_lost {
                return Err(this.lost_failure());
            }
            Ok(released)
        })
    }

    /// Another hold of the same acquisition, at once and without asking
    /// the servers (see `Lock::reenter`): each is released once, the last
    /// release releases the lock.
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
                    None => return Err(self.released_failure()),
                };
                State::Kept { last: Mutex::new(again.lock()), guard: Mutex::new(Some(again)) }
            }
        };
        Ok(Hold {
            redlock: self.redlock.clone(),
            resource: self.resource.clone(),
            resources: self.resources.clone(),
            state,
            released: AtomicBool::new(false),
            group: Arc::clone(&self.group),
            done: self.group.done.child_token(),
            fresh: false,
            spawn: self.spawn,
        })
    }

    /// The words before the caller's command of its fenced write to the
    /// Redis that keeps its data: `["LOCK.FENCED", register, token]`
    /// (`Lock::fenced_prefix`), for the binding to append the command to.
    /// `Released` or `Lost` once this hold is no longer held (checked now:
    /// a holder paused after building the command is refused by the
    /// register itself); `Unfenced` for a hold without a token that orders
    /// it among every holder (script mode, shared, permits).
    pub fn fenced_prefix(&self, register: &str) -> Result<[String; 3], Failure> {
        self.check_held()?;
        Ok(self.lock().fenced_prefix(register)?)
    }

    /// The words before the caller's command of its guarded one:
    /// `["LOCK.GUARD", key, owner, token]` (`Lock::guarded_prefix`); fails
    /// as `fenced_prefix` does, but for shared holds and permits, which
    /// each server checks on their own.
    pub fn guarded_prefix(&self) -> Result<[String; 4], Failure> {
        self.check_held()?;
        Ok(self.lock().guarded_prefix()?)
    }

    /// Completes with `true` the moment the lock is lost, or `false` once
    /// this hold was released (or dropped) first.
    pub fn when_lost(&self) -> impl Future<Output = bool> + Send + 'static {
        lost_or(self.group.signal.clone(), self.done.clone(), self.group.lost.load(Ordering::SeqCst))
    }

    /// The asks for this hold's lock (`LockGuard::asks`, for a plain hold
    /// too: a binding's handle is a `Hold`, not a guard): subscribes when
    /// first polled; ends once the lock is lost or its last hold released.
    pub fn asks(&self) -> impl futures::Stream<Item = crate::watch::AskRequest> + Send + 'static {
        let lock = self.lock();
        let (lost, done) = (self.group.signal.clone(), self.group.done.clone());
        let ended = async move {
            tokio::select! {
                () = lost.cancelled() => {}
                () = done.cancelled() => {}
            }
        };
        crate::watch::asks_for(&self.redlock, lock.resources.names(), &lock.owner, ended)
    }

    /// `when_lost` of the acquisition: `false` only once every hold of it
    /// was released (or dropped).
    pub fn when_acquisition_lost(&self) -> impl Future<Output = bool> + Send + 'static {
        lost_or(self.group.signal.clone(), self.group.done.clone(), self.group.lost.load(Ordering::SeqCst))
    }
}

/// `true` once `signal` fires (or `already`), `false` once `done` comes first.
async fn lost_or(signal: CancellationToken, done: CancellationToken, already: bool) -> bool {
    if already {
        return true;
    }
    tokio::select! {
        biased;
        () = signal.cancelled() => true,
        () = done.cancelled() => false,
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.done.cancel();
        // Handed over, a plain lock not released stays held until its
        // lease ends, as the crate's `Lock` does. A guard dropped releases
        // its hold (the last one the lock) in the background, as the
        // crate's own Drop would on a runtime; `spawn` says where.
        match &mut self.state {
            State::Kept { guard, .. } => {
                if let Some(g) = guard.get_mut().unwrap_or_else(|p| p.into_inner()).take() {
                    (self.spawn)(Box::pin(async move {
                        let _ = g.release().await;
                    }));
                }
            }
            State::Plain(cell) if self.fresh => {
                let (redlock, lock) = (self.redlock.clone(), locked(&cell.lock).clone());
                (self.spawn)(Box::pin(async move {
                    let _ = redlock.release(&lock).await;
                }));
            }
            State::Plain(_) => {}
        }
    }
}
