//! A lock kept alive for long work: extended before the lease runs out,
//! with a signal that fires the moment it is lost.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::error::Error;
use crate::redlock::{Lock, Redlock, Released};

pub struct LockGuard {
    redlock: Redlock,
    lock: Arc<Mutex<Lock>>,
    lost: CancellationToken,
    keeper: Option<JoinHandle<()>>,
    released: bool,
}

impl LockGuard {
    pub(crate) fn start(redlock: Redlock, lock: Lock) -> LockGuard {
        let shared = Arc::new(Mutex::new(lock));
        let lost = CancellationToken::new();
        let keeper = tokio::spawn(keep(redlock.clone(), shared.clone(), lost.clone()));
        LockGuard { redlock, lock: shared, lost, keeper: Some(keeper), released: false }
    }

    /// The lock as of its latest extension.
    pub fn lock(&self) -> Lock {
        self.lock.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn token(&self) -> Option<i64> {
        self.lock().token
    }

    /// Completes the moment an extension failed to reach a quorum or the
    /// validity ran out: stop touching the resource.
    pub async fn lost(&self) {
        self.lost.cancelled().await
    }

    pub fn is_lost(&self) -> bool {
        self.lost.is_cancelled()
    }

    /// A token that is cancelled when the lock is lost, for other tasks.
    pub fn lost_token(&self) -> CancellationToken {
        self.lost.clone()
    }

    /// Stops extending and releases the lock on every instance.
    pub async fn release(mut self) -> Result<Released, Error> {
        self.stop();
        self.released = true;
        let lock = self.lock();
        self.redlock.release(&lock).await
    }

    fn stop(&mut self) {
        if let Some(keeper) = self.keeper.take() {
            keeper.abort();
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        self.stop();
        if self.released {
            return;
        }
        // Best effort: release in the background if a runtime is there.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let redlock = self.redlock.clone();
            let lock = self.lock();
            runtime.spawn(async move {
                let _ = redlock.release(&lock).await;
            });
        }
    }
}

/// Extends every `ttl × extend_fraction`; fires `lost` when an extension
/// fails or the validity runs out before one succeeds.
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
        if Instant::now() >= valid_until {
            lost.cancel();
            return;
        }
        match redlock.extend(&current, current.ttl).await {
            Ok(extended) => *shared.lock().unwrap_or_else(|p| p.into_inner()) = extended,
            Err(_) => {
                lost.cancel();
                return;
            }
        }
    }
}
