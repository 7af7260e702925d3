//! Holds bound to a client's connection (`LOCK.ACQUIRE ... SESSION [DELAY
//! ms]`): the endpoint keeps such a hold extended to its ttl (every third
//! of it) while the connection lives, and when the connection closes it
//! releases the hold, or with `DELAY` cuts its lease to the delay (a
//! lock-delay, as the module's). The ttl is then the short lease a dead
//! endpoint leaves behind: nobody extends it any more, and the servers
//! free the lock when it ends.
//!
//! An extension that fails (no quorum extended it) means the hold may be
//! lost: the connection is closed at once, the only signal a Redis client
//! hears unasked, as when a module server ends a `SESSION` hold. A release
//! through this endpoint (from any connection) ends the binding first, so
//! its failed extension closes nothing.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redlock::{Error, Lock, Redlock, Released};
use tokio_util::sync::CancellationToken;

use super::state::{Binding, Held, Shared, Taken};

/// Tells one binding of a hold from a later one.
static GENERATION: AtomicU64 = AtomicU64::new(1);

/// Binds `held`, granted for `ttl` and sure to stand until `valid_until`,
/// to connection `conn`, whose `lost` is cancelled if an extension fails;
/// starts its extensions.
pub fn bind(shared: &Arc<Shared>, conn: u64, held: Held, ttl: Duration, delay: Duration, valid_until: Instant, lost: &CancellationToken) {
    let generation = GENERATION.fetch_add(1, Ordering::Relaxed);
    let binding = Binding { conn, ttl, delay, valid_until, lost: lost.clone(), generation };
    shared.bindings.with(|m| m.insert(held.clone(), binding));
    tokio::spawn(keep(Arc::clone(shared), held, lost.clone(), generation));
}

/// Extends `held` while it is bound and its connection lives: every third
/// of its ttl, and early enough that a request still fits before its
/// validity ends (`extension_due`). The hold counts as lost when an
/// extension fails, and also when its validity ends before an extension
/// came back (a server that stalls, a link that drops its packets): the
/// connection is closed then, before any server may give the lock to
/// another, however late the extension's own failure would come (as the
/// quorum client's guard fires its lost signal).
async fn keep(shared: Arc<Shared>, held: Held, lost: CancellationToken, generation: u64) {
    let request_timeout = shared.redlock.settings().request_timeout;
    let mut last = Instant::now();
    loop {
        let Some((ttl, valid_until)) = bound(&shared, &held, generation) else { return };
        tokio::select! {
            () = tokio::time::sleep_until(extension_due(last, ttl, valid_until, request_timeout).into()) => {}
            () = lost.cancelled() => return,
        }
        let Some((ttl, valid_until)) = bound(&shared, &held, generation) else { return };
        last = Instant::now();
        let extended = tokio::select! {
            extended = extend(&shared.redlock, &held, ttl) => extended.ok(),
            // Sent, maybe landed, but not known in time: the hold may be
            // lost by the time anyone hears more.
            () = tokio::time::sleep_until(valid_until.into()) => None,
        };
        let next = shared.bindings.with(|m| match m.get_mut(&held) {
            Some(b) if b.generation == generation => match &extended {
                Some(lock) => {
                    b.valid_until = lock.acquired_at.checked_add(lock.validity).unwrap_or(lock.acquired_at);
                    Next::Keep
                }
                None => {
                    m.remove(&held);
                    Next::Lost
                }
            },
            // Released or bound anew meanwhile: no longer this task's.
            _ => Next::Stop,
        });
        match next {
            Next::Keep => {}
            Next::Stop => return,
            Next::Lost => {
                lost.cancel();
                return;
            }
        }
    }
}

/// The ttl and validity of `held` while this binding (`generation`) is
/// its own.
fn bound(shared: &Shared, held: &Held, generation: u64) -> Option<(Duration, Instant)> {
    shared.bindings.with(|m| m.get(held).filter(|b| b.generation == generation).map(|b| (b.ttl, b.valid_until)))
}

/// When the extension after one at `last` (or the grant) is due: a third
/// of the ttl later, or earlier when the validity would not leave a
/// request's time after that (a grant that came late in a slow round or
/// a wait); never sooner than a sixth of the ttl, so that a validity
/// shorter than a request does not make extensions follow back to back.
fn extension_due(last: Instant, ttl: Duration, valid_until: Instant, request_timeout: Duration) -> Instant {
    let after = |part: Duration| last.checked_add(part).unwrap_or(last);
    let latest = valid_until.checked_sub(request_timeout).unwrap_or(last);
    after(ttl / 3).min(latest).max(after(ttl / 6))
}

/// What `keep` does after an extension.
enum Next {
    Keep,
    Stop,
    /// It failed while the hold was this task's: the hold may be lost.
    Lost,
}

/// Connection `conn` closed: each hold bound to it is released, or with a
/// delay its lease is cut to the delay (when less is left, it ends on its
/// own), in the background.
pub fn closed(shared: &Arc<Shared>, conn: u64) {
    let ended: Vec<(Held, Binding)> = shared.bindings.with(|m| {
        let mine: Vec<Held> = m.iter().filter(|(_, b)| b.conn == conn).map(|(h, _)| h.clone()).collect();
        mine.into_iter().filter_map(|h| m.remove(&h).map(|b| (h, b))).collect()
    });
    for (held, binding) in ended {
        binding.lost.cancel();
        let shared = Arc::clone(shared);
        tokio::spawn(async move {
            let left = binding.valid_until.saturating_duration_since(Instant::now());
            if binding.delay.is_zero() {
                let _ = release(&shared.redlock, &held).await;
            } else if binding.delay < left {
                let _ = extend(&shared.redlock, &held, binding.delay).await;
            }
        });
    }
}

/// Extends `held` to `ttl` from now on a quorum: a key, every permit of
/// the semaphore its owner holds (with its limit record), or the whole
/// set (a server counts only when it extended every key).
pub async fn extend(redlock: &Redlock, held: &Held, ttl: Duration) -> Result<Lock, Error> {
    let (taken, owner) = held;
    match taken {
        Taken::Key(key) => redlock.extend_owner(key, owner, ttl).await,
        Taken::Permits(name, limit) => redlock.extend_permit(name, *limit, owner, ttl).await,
        Taken::Set(keys) => redlock.extend_owner_all(keys, owner, ttl).await,
    }
}

/// Releases `held` on every server (see `extend`).
pub async fn release(redlock: &Redlock, held: &Held) -> Result<Released, Error> {
    let (taken, owner) = held;
    match taken {
        Taken::Key(key) => redlock.release_owner(key, owner).await,
        Taken::Permits(name, limit) => redlock.release_permit(name, *limit, owner).await.map(|(_, released)| released),
        Taken::Set(keys) => redlock.release_owner_all(keys, owner).await,
    }
}
