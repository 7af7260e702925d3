//! A lock kept alive for long work: extended before the lease runs out,
//! with a signal that fires the moment it is lost.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

use tokio_util::sync::CancellationToken;

use crate::error::Error;
use crate::metrics::{LossCause, Metrics};
use crate::outcome::Outcome;
use crate::redlock::{Lock, Redlock, Released};
use crate::settings::{Settings, SESSION_MARGIN};

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
    keeping: Arc<Keeping>,
    keeper: Mutex<Option<JoinHandle<()>>>,
}

/// What the guards and their keeper task share.
struct Keeping {
    /// The lock as of its latest extension (the keeper's or an explicit one).
    lock: Mutex<Lock>,
    lost: CancellationToken,
    /// When the lock stopped being safely held, once it did (the moment an
    /// extension failed, or the end of the validity when that came first),
    /// and why.
    lost_at: Mutex<Option<(Instant, LossCause)>>,
    /// One extension at a time: the keeper's and an explicit `extend` racing
    /// could land in either order on the servers, and the older ttl win.
    extending: tokio::sync::Mutex<()>,
    /// An explicit `extend` changed the ttl: the keeper plans anew.
    rescheduled: tokio::sync::Notify,
    /// Its handle's metrics: a loss counts there once, by cause.
    metrics: Arc<Metrics>,
    /// Cancelled once the last hold is released or dropped: what listens
    /// for this hold (`asks`) stops.
    done: CancellationToken,
}

impl Keeping {
    fn lock(&self) -> Lock {
        self.lock.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn set(&self, lock: Lock) {
        *self.lock.lock().unwrap_or_else(|p| p.into_inner()) = lock;
    }

    /// Fires the lost signal, recording `at` and counting the loss by
    /// `cause` unless a loss was recorded.
    fn lose(&self, at: Instant, cause: LossCause) {
        let first = {
            let mut lost_at = self.lost_at.lock().unwrap_or_else(|p| p.into_inner());
            let first = lost_at.is_none();
            lost_at.get_or_insert((at, cause));
            first
        };
        // Counted before the signal fires: whoever wakes on it reads the
        // loss in the metrics (a few atomic additions, no wait).
        if first {
            self.metrics.lost(cause);
            if let Some(held) = &self.lock().held {
                held.end();
            }
        }
        self.lost.cancel();
    }

    /// Loses the lock because its extension failed with `e`.
    fn extension_failed(&self, e: &Error, quorum: usize) {
        self.lose(Instant::now(), loss_cause(e, quorum));
    }

    /// When and why the lock was lost, once it was (checked now, as
    /// `is_lost`).
    fn lost(&self) -> Option<(Instant, LossCause)> {
        if !self.is_lost() {
            return None;
        }
        *self.lost_at.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The end of the current validity, when it is over.
    fn validity_over(&self) -> Option<Instant> {
        let lock = self.lock();
        let end = lock.acquired_at.checked_add(lock.validity)?;
        (Instant::now() >= end).then_some(end)
    }

    /// Lost: the signal fired, or the validity ran out (noticed here at
    /// once, even when the keeper has not woken yet, e.g. after the
    /// process was paused).
    fn is_lost(&self) -> bool {
        if self.lost.is_cancelled() {
            return true;
        }
        match self.validity_over() {
            Some(end) => {
                self.lose(end, LossCause::Expired);
                true
            }
            None => false,
        }
    }
}

/// Why a lock whose extension failed with `e` is lost, with `quorum`
/// servers needed to keep it.
pub fn loss_cause(e: &Error, quorum: usize) -> LossCause {
    match e {
        // A server says an operator took it away (`LOCK.REVOKE`): the one
        // cause its holder cannot find out otherwise.
        Error::QuorumLost { outcomes, .. } if outcomes.iter().any(|o| matches!(o.outcome, Outcome::Revoked { .. })) => LossCause::Revoked,
        // Refusals alone leave too few servers to extend it: the servers
        // no longer keep it for this owner.
        Error::QuorumLost { outcomes, .. }
            if outcomes.iter().filter(|o| o.outcome == Outcome::Refused).count() > outcomes.len().saturating_sub(quorum) =>
        {
            LossCause::Refused
        }
        Error::QuorumLost { .. } => LossCause::Unreachable,
        _ => LossCause::Expired,
    }
}

/// The lost signal of a guard and the instant by which the work its lock
/// protects must have stopped, for a supervisor (`redlock run` and `elect`
/// stop their command by it). Cheap to clone; it is not a hold: the lock
/// is released as if it were not there.
#[derive(Clone)]
pub struct Watch {
    keeping: Arc<Keeping>,
}

impl Watch {
    /// Cancelled the moment the lock is lost (`LockGuard::lost`).
    pub fn lost_token(&self) -> CancellationToken {
        self.keeping.lost.clone()
    }

    /// When the lock was lost, once it was (`LockGuard::lost_at`).
    pub fn lost_at(&self) -> Option<Instant> {
        self.keeping.lost().map(|(at, _)| at)
    }

    /// Why the lock was lost, once it was (`LockGuard::loss_cause`).
    pub fn loss_cause(&self) -> Option<LossCause> {
        self.keeping.lost().map(|(_, cause)| cause)
    }

    /// The instant by which the work the lock protects must have stopped,
    /// as of the latest round that confirmed the lock: the end of its
    /// validity, which for a hold bound to its connections already keeps
    /// `SESSION_MARGIN` before any server could free it; for any other
    /// hold, that margin before the end of the validity (whose lease the
    /// servers keep a clock drift longer).
    pub fn stop_by(&self) -> Instant {
        let lock = self.keeping.lock();
        let end = far(lock.acquired_at, lock.validity);
        match lock.session_window {
            Some(_) => end,
            None => end.checked_sub(SESSION_MARGIN).unwrap_or(lock.acquired_at),
        }
    }
}

impl Shared {
    fn lock(&self) -> Lock {
        self.keeping.lock()
    }

    fn stop(&self) {
        self.keeping.done.cancel();
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

/// The guards a `Redlock` hands out (here, so that the algorithm does not
/// depend on its keeper).
impl Redlock {
    /// Takes `resource` and keeps it: extends it before the lease runs out
    /// and signals when it is lost. Dropping the guard releases the lock.
    pub async fn guard(&self, resource: &str, ttl: Duration, deadline: Option<Instant>) -> Result<LockGuard, Error> {
        let lock = self.lock_until(resource, ttl, deadline).await?;
        Ok(self.keep(lock))
    }

    /// `guard` for a shared hold.
    pub async fn guard_shared(&self, resource: &str, ttl: Duration, deadline: Option<Instant>) -> Result<LockGuard, Error> {
        let lock = self.lock_shared_until(resource, ttl, deadline).await?;
        Ok(self.keep(lock))
    }

    /// Keeps `lock` (e.g. from `lock_until_observed`) as `guard` does:
    /// extended before its lease runs out, released when the guard goes.
    pub fn keep(&self, lock: Lock) -> LockGuard {
        LockGuard::start(self.clone(), lock)
    }
}

impl LockGuard {
    fn start(redlock: Redlock, lock: Lock) -> LockGuard {
        let keeping = Arc::new(Keeping {
            lock: Mutex::new(lock),
            lost: CancellationToken::new(),
            lost_at: Mutex::new(None),
            extending: tokio::sync::Mutex::new(()),
            rescheduled: tokio::sync::Notify::new(),
            metrics: Arc::clone(redlock.registry()),
            done: CancellationToken::new(),
        });
        let keeper = tokio::spawn(keep(redlock.clone(), keeping.clone()));
        LockGuard { shared: Arc::new(Shared { redlock, keeping, keeper: Mutex::new(Some(keeper)) }), released: false }
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

    /// Extends the lease to `ttl` from now on a quorum, and makes `ttl`
    /// the one the guard keeps extending to from now on (longer or
    /// shorter than before). `validity` follows. A failed extension fires
    /// the lost signal, as the guard's own would; one the servers refuse
    /// as asked (`Error::Rejected`, e.g. over max-ttl) changes nothing.
    /// The future holds no borrow of the guard.
    pub fn extend(&self, ttl: Duration) -> impl std::future::Future<Output = Result<Lock, Error>> + Send + 'static {
        let shared = Arc::clone(&self.shared);
        async move {
            let keeping = &shared.keeping;
            let _one = keeping.extending.lock().await;
            let current = keeping.lock();
            if keeping.is_lost() || current.holds() == 0 {
                return Err(Error::Expired { resource: current.resource });
            }
            match shared.redlock.extend(&current, ttl).await {
                Ok(extended) => {
                    keeping.set(extended.clone());
                    keeping.rescheduled.notify_one();
                    Ok(extended)
                }
                // Refused as asked (a ttl over max-ttl, ...): the lease and
                // the guard's ttl are as they were.
                Err(e @ Error::Rejected { .. }) => Err(e),
                Err(e) => {
                    keeping.extension_failed(&e, shared.redlock.quorum());
                    Err(e)
                }
            }
        }
    }

    /// Completes the moment an extension failed to reach a quorum or the
    /// validity ran out: stop touching the resource.
    pub async fn lost(&self) {
        self.shared.keeping.lost.cancelled().await
    }

    /// Whether the lock is lost: an extension failed, or its validity ran
    /// out (checked now, not only when the keeper next wakes).
    pub fn is_lost(&self) -> bool {
        self.shared.keeping.is_lost()
    }

    /// When the lock stopped being safely held (an extension failed, or
    /// the validity ran out), `None` while it is held.
    pub fn lost_at(&self) -> Option<Instant> {
        self.shared.keeping.lost().map(|(at, _)| at)
    }

    /// Why the lock was lost, `None` while it is held: its validity ran
    /// out (`Expired`), the servers no longer keep it (`Refused`), too few
    /// answered (`Unreachable`), or an operator revoked it (`Revoked`).
    pub fn loss_cause(&self) -> Option<LossCause> {
        self.shared.keeping.lost().map(|(_, cause)| cause)
    }

    /// A token that is cancelled when the lock is lost, for other tasks.
    pub fn lost_token(&self) -> CancellationToken {
        self.shared.keeping.lost.clone()
    }

    /// The asks for this hold (`Redlock::ask`), each heard once although
    /// every server announces it: subscribes to the lock's channel on
    /// every server (a connection of its own per server) when first
    /// polled, so an ask sent before that is not heard; nothing is
    /// subscribed for a guard that never calls this. An ask is for this
    /// hold when it names the hold's owner (an ask for an earlier or later
    /// hold of the same name is not). The k-th ask is delivered when the
    /// first server's k-th arrives; a server that missed asks lags and
    /// never causes a repeat (docs/client.md, "Asking a holder to let
    /// go"). Ends once the lock is lost or its last hold released. The
    /// holder decides what to do: release, or not.
    pub fn asks(&self) -> impl futures::Stream<Item = crate::watch::AskRequest> + Send + 'static {
        let lock = self.lock();
        let keeping = &self.shared.keeping;
        let (lost, done) = (keeping.lost.clone(), keeping.done.clone());
        let ended = async move {
            tokio::select! {
                () = lost.cancelled() => {}
                () = done.cancelled() => {}
            }
        };
        crate::watch::asks_for(&self.shared.redlock, lock.resources.names(), &lock.owner, ended)
    }

    /// What a supervisor of the work this lock protects watches (its lost
    /// signal, and when the work must have stopped), for another task.
    pub fn watch(&self) -> Watch {
        Watch { keeping: Arc::clone(&self.shared.keeping) }
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

/// An instant `by` after `from`, or a year after it when `by` is too long
/// to add (a ttl near `Duration::MAX` must not overflow an `Instant`).
fn far(from: Instant, by: Duration) -> Instant {
    from.checked_add(by).unwrap_or(from + Duration::from_secs(86_400 * 365))
}

/// When `lock`'s next extension is due: every `ttl × extend_fraction` of
/// the current ttl (an explicit `extend` may change it), and early enough
/// that a request and `SESSION_MARGIN` still fit before the end of its
/// validity: a hold bound to its connections has a validity no longer than
/// its session window (after an `extend` to a longer ttl, the interval may
/// outgrow it), and any hold may have been granted with little validity
/// left (a slow round, a grant that came late in a wait), which must not
/// run out an interval before its first extension is even tried.
fn extension_due(settings: &Settings, lock: &Lock) -> Instant {
    let every = settings.extension_interval(lock.ttl);
    let interval = far(lock.acquired_at, every);
    let margin = settings.request_timeout.saturating_add(SESSION_MARGIN);
    let latest = far(lock.acquired_at, lock.validity.saturating_sub(margin));
    // Never sooner than half an interval: a validity barely past an
    // interval and a request (a ttl of a few hundred ms) must not make the
    // extensions follow one another back to back.
    interval.min(latest).max(far(lock.acquired_at, every / 2))
}

/// Extends the lock when due (`extension_due`); fires `lost` when an
/// extension fails, and at the end of the validity by this process's own
/// clock, whether or not an extension is still under way then (a server
/// that stalls, a link that drops its packets): the holder is told before
/// any server can give the lock to another, however late the extension's
/// failure would come. Ends quietly once every hold was released (e.g. the
/// last through `Redlock::release` of a `Lock` re-entered from the
/// guard's).
async fn keep(redlock: Redlock, keeping: Arc<Keeping>) {
    loop {
        let due = extension_due(redlock.settings(), &keeping.lock());
        tokio::select! {
            biased;
            () = validity_runs_out(&keeping) => return,
            // Extended explicitly: plan from its ttl and validity.
            () = keeping.rescheduled.notified() => continue,
            () = tokio::time::sleep_until(due.into()) => {}
        }
        let go_on = tokio::select! {
            biased;
            () = validity_runs_out(&keeping) => return,
            go_on = extend_when_due(&redlock, &keeping) => go_on,
        };
        if !go_on {
            return;
        }
    }
}

/// Completes when the lock is lost: at once if it is, else at the end of
/// its validity (the lost signal fired with that instant), following any
/// extension that moved the end meanwhile.
async fn validity_runs_out(keeping: &Keeping) {
    loop {
        if keeping.is_lost() {
            return;
        }
        let current = keeping.lock();
        let end = far(current.acquired_at, current.validity);
        tokio::select! {
            () = tokio::time::sleep_until(end.into()) => {}
            () = keeping.lost.cancelled() => return,
        }
    }
}

/// One extension by the keeper, unless an explicit one landed while it
/// waited its turn; `false` once there is nothing more to keep (released,
/// or lost: the extension failed).
async fn extend_when_due(redlock: &Redlock, keeping: &Keeping) -> bool {
    let _one = keeping.extending.lock().await;
    let current = keeping.lock();
    if current.holds() == 0 || keeping.is_lost() {
        return false;
    }
    if Instant::now() < extension_due(redlock.settings(), &current) {
        return true;
    }
    match redlock.extend(&current, current.ttl).await {
        Ok(extended) => {
            keeping.set(extended);
            true
        }
        Err(_) if current.holds() == 0 => false,
        Err(e) => {
            keeping.extension_failed(&e, redlock.quorum());
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::Resources;
    use std::sync::atomic::{AtomicBool, AtomicUsize};

    fn lock(ttl_ms: u64, validity_ms: u64, session_window: Option<Duration>) -> Lock {
        Lock {
            resource: "r".to_string(),
            resources: Resources::one("r"),
            owner: "o".to_string(),
            token: Some(1),
            validity: Duration::from_millis(validity_ms),
            acquired_at: Instant::now(),
            ttl: Duration::from_millis(ttl_ms),
            instances: Vec::new(),
            fenced: 0,
            shared: false,
            permit: false,
            session_window,
            holds: Arc::new(AtomicUsize::new(1)),
            ended: Arc::new(AtomicBool::new(false)),
            held: None,
        }
    }

    fn due_after(settings: &Settings, lock: &Lock) -> Duration {
        extension_due(settings, lock).duration_since(lock.acquired_at)
    }

    #[test]
    fn an_extension_is_due_every_interval_while_the_validity_allows() {
        let settings = Settings { request_timeout: Duration::from_millis(50), ..Settings::default() };
        let interval = settings.extension_interval(Duration::from_secs(3));
        assert_eq!(due_after(&settings, &lock(3_000, 2_900, None)), interval);
    }

    #[test]
    fn a_hold_granted_with_little_validity_is_extended_before_it_runs_out() {
        let settings = Settings { request_timeout: Duration::from_millis(50), ..Settings::default() };
        let interval = settings.extension_interval(Duration::from_secs(3));
        // 700 ms of validity, an interval of 1 s: the request and the margin
        // still fit before the end (700 - 50 - 100), with or without a session.
        for window in [None, Some(Duration::from_millis(700))] {
            let due = due_after(&settings, &lock(3_000, 700, window));
            assert_eq!(due, Duration::from_millis(550), "window {window:?}");
            assert!(due < interval);
        }
        // Never sooner than half an interval.
        assert_eq!(due_after(&settings, &lock(3_000, 300, None)), interval / 2);
    }
}
