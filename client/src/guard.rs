//! A lock kept alive for long work: extended before the lease runs out,
//! with a signal that fires the moment it is lost.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::error::Error;
use crate::redlock::{Lock, Redlock, Released};

/// One hold of a lock that a background task keeps extending. Guards made
/// by `reenter` share the lock, its extension and its lost signal; the
/// last guard released (or dropped) stops the extension and releases the
/// lock on the servers.
pub struct LockGuard {
    shared: Arc<Shared>,
    released: bool,
}

/// What the guards of one lock share.
struct Shared {
    redlock: Redlock,
    lock: Arc<Mutex<Lock>>,
    lost: CancellationToken,
    keeper: Mutex<Option<JoinHandle<()>>>,
}

impl Shared {
    fn lock(&self) -> Lock {
        self.lock.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn stop(&self) {
        if let Some(keeper) = self.keeper.lock().unwrap_or_else(|p| p.into_inner()).take() {
            keeper.abort();
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.stop();
    }
}

impl LockGuard {
    pub(crate) fn start(redlock: Redlock, lock: Lock) -> LockGuard {
        let shared = Arc::new(Mutex::new(lock));
        let lost = CancellationToken::new();
        let keeper = tokio::spawn(keep(redlock.clone(), shared.clone(), lost.clone()));
        LockGuard {
            shared: Arc::new(Shared { redlock, lock: shared, lost, keeper: Mutex::new(Some(keeper)) }),
            released: false,
        }
    }

    /// The lock as of its latest extension.
    pub fn lock(&self) -> Lock {
        self.shared.lock()
    }

    pub fn token(&self) -> Option<i64> {
        self.lock().token
    }

    /// Re-enters the lock (see `Lock::reenter`): one more hold, as a guard
    /// of its own that shares this one's extension and lost signal. Each
    /// guard is released (or dropped) once; the last releases the lock.
    /// `Error::Expired` once the lock was lost or its validity ran out.
    pub fn reenter(&self) -> Result<LockGuard, Error> {
        let lock = self.lock();
        if self.is_lost() {
            return Err(Error::Expired { resource: lock.resource });
        }
        lock.reenter()?;
        Ok(LockGuard { shared: self.shared.clone(), released: false })
    }

    /// Completes the moment an extension failed to reach a quorum or the
    /// validity ran out: stop touching the resource.
    pub async fn lost(&self) {
        self.shared.lost.cancelled().await
    }

    pub fn is_lost(&self) -> bool {
        self.shared.lost.is_cancelled()
    }

    /// A token that is cancelled when the lock is lost, for other tasks.
    pub fn lost_token(&self) -> CancellationToken {
        self.shared.lost.clone()
    }

    /// Drops this hold; the last one stops extending and releases the lock
    /// on every instance.
    pub async fn release(mut self) -> Result<Released, Error> {
        self.released = true;
        let lock = self.lock();
        let remaining_holds = lock.drop_hold();
        if remaining_holds > 0 {
            return Ok(Released { released: 0, remaining_holds, instances: Vec::new() });
        }
        self.shared.stop();
        self.shared.redlock.release_on_servers(&lock).await
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let lock = self.lock();
        if lock.drop_hold() > 0 {
            return;
        }
        self.shared.stop();
        // Best effort: release in the background if a runtime is there.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let redlock = self.shared.redlock.clone();
            runtime.spawn(async move {
                let _ = redlock.release_on_servers(&lock).await;
            });
        }
    }
}

/// Extends every `ttl × extend_fraction`; fires `lost` when an extension
/// fails or the validity runs out before one succeeds. Ends quietly once
/// every hold was released (e.g. the last through `Redlock::release` of a
/// `Lock` re-entered from the guard's).
async fn keep(redlock: Redlock, shared: Arc<Mutex<Lock>>, lost: CancellationToken) {
    let fraction = redlock.settings().extend_fraction.clamp(0.05, 0.9);
    loop {
        let current = shared.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let every = Duration::try_from_secs_f64(current.ttl.as_secs_f64() * fraction).unwrap_or(current.ttl);
        // Checked: a ttl near Duration::MAX must not overflow an Instant.
        let far = |from: Instant, by: Duration| from.checked_add(by).unwrap_or(from + Duration::from_secs(86_400 * 365));
        let valid_until = far(current.acquired_at, current.validity);
        let next = far(Instant::now(), every).min(valid_until);
        tokio::time::sleep_until(next.into()).await;
        if current.holds() == 0 {
            return;
        }
        if Instant::now() >= valid_until {
            lost.cancel();
            return;
        }
        match redlock.extend(&current, current.ttl).await {
            Ok(extended) => *shared.lock().unwrap_or_else(|p| p.into_inner()) = extended,
            Err(_) if current.holds() == 0 => return,
            Err(_) => {
                lost.cancel();
                return;
            }
        }
    }
}
