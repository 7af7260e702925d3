//! Locks whose key Redis removed while their lease still ran, kept until
//! the lease ends.
//!
//! Two ordinary events remove a held lock's key without anyone releasing
//! it: a forward step of the wall clock (Redis expires keys by it, see
//! `lease`), and eviction under `maxmemory` (`volatile-*` policies pick
//! lock keys, which carry a TTL; `allkeys-*` pick any key). Neither may
//! hand the lock to someone else. There is no hook to veto either, so the
//! data type's unlink callback, which still sees the value, remembers
//! owner, token, lease end and the value stored with the hold here:
//! - after a clock step at once (the wall clock has passed the key's TTL
//!   while the monotonic lease runs), and the key is put back by a timer
//!   right away, replicated as the grant it was, so replicas and the AOF
//!   have it again;
//! - after an eviction once the `evicted` keyspace event, which Redis sends
//!   right after the deletion, says so (a DEL or an overwrite ends a lock
//!   by intent and sends no such event). The key is put back only when a
//!   lock command or a handoff touches it: memory was short.
//!
//! Until then every lock command and every handoff looks here first, so a
//! waiter is never served before the kept lease has ended.

use std::collections::HashMap;
use std::ffi::c_int;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{LazyLock, Mutex};

use crate::api::{Key, KeyKind};
use crate::core::grant::Holder;
use crate::core::lease::{Lease, Left, Now, NO_TTL};
use crate::keys::group::{Group, Owner};
use crate::keys::value::{self, Exclusive};
use crate::replication::{propagate, writable};
use crate::server::fencing::Token;
use crate::server::stats;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Why {
    ClockStep,
    Evicted,
}

/// A lock kept here: what `change::restore_rescued` puts back.
pub struct Kept {
    /// One for an exclusive lock, every holder of a shared one (each with
    /// its own value, kept in its owner).
    pub holders: Vec<Holder<Owner>>,
    /// `None`: an exclusive lock; a group's limit (0: a read-write lock).
    pub shared: Option<u32>,
    /// The group was a semaphore LOCK.RESIZE resized (`Kind::Semaphore`):
    /// the largest limit in force since it was created.
    pub resized: Option<u32>,
    /// An exclusive lock's value (`VALUE`, `LOCK.PROCLAIM`); empty: none.
    pub value: Box<[u8]>,
    why: Why,
}

impl Kept {
    /// When the last kept lease ends, on the monotonic clock.
    fn end(&self) -> i64 {
        self.holders.iter().map(|h| h.end).max().unwrap_or(i64::MIN)
    }
}

/// A kept lock's database and key.
pub type Name = (c_int, Box<[u8]>);

#[derive(Default)]
struct State {
    kept: HashMap<Name, Kept>,
    /// The last lock removed with its lease running, for no reason known
    /// yet: an `evicted` event for it makes it kept.
    unexplained: Option<(Name, Kept)>,
    restore_armed: bool,
}

// SAFETY: only touched on Redis's main thread (callbacks, commands, timers).
unsafe impl Send for State {}

static STATE: LazyLock<Mutex<State>> = LazyLock::new(|| Mutex::new(State::default()));
/// Kept locks: lets every command skip the map while there are none.
static KEPT: AtomicUsize = AtomicUsize::new(0);

fn with_state<R>(f: impl FnOnce(&mut State) -> R) -> Option<R> {
    crate::server::reentry::with(&STATE, f)
}

fn recount(state: &State) {
    KEPT.store(state.kept.len(), Ordering::Relaxed);
}

/// The unlink callback saw a lock leave the keyspace. True when a clock
/// step removed it and the timer that puts such locks back is to be armed
/// (`change::restore_stepped`, above this).
#[must_use]
pub fn lock_removed(db: c_int, key: &[u8], lock: &Exclusive) -> bool {
    if !may_keep() {
        return false;
    }
    if !running(lock.lease(), crate::server::clock::now()) {
        propagate::removed_after_lease(db, key, &mut std::iter::once((&*lock.owner(), lock.token())));
        return false;
    }
    let holder = Holder { owner: (*lock.owner()).into(), token: lock.token(), end: lock.lease().end, since: lock.since(), permits: 1 };
    removed(db, key, lock.lease(), vec![holder], (None, None), lock.value().into())
}

/// The unlink callback saw a lock held shared leave the keyspace. True as
/// for `lock_removed`.
#[must_use]
pub fn group_removed(db: c_int, key: &[u8], group: &Group) -> bool {
    if !may_keep() {
        return false;
    }
    let now = crate::server::clock::now();
    let latest = group.holding.holders.iter().map(|h| h.end).max();
    if latest.is_some_and(|end| !running(Lease { end, mirror: group.key_mirror() }, now)) {
        // Every hold it still stored ended (those pruned before were
        // announced then).
        propagate::removed_after_lease(db, key, &mut group.holding.holders.iter().map(|h| (&*h.owner, h.token)));
        return false;
    }
    let holders: Vec<_> = group.live(now).cloned().collect();
    let Some(end) = holders.iter().map(|h| h.end).max() else { return false };
    let shared = (Some(group.limit()), group.resized_largest());
    removed(db, key, Lease { end, mirror: group.key_mirror() }, holders, shared, Box::default())
}

/// Whether a removal now may lose a lock: not this module's decision, nor
/// the master's (its DEL), nor the data being loaded.
fn may_keep() -> bool {
    !value::OwnRemoval::in_progress() && !writable::is_replica() && !crate::server::quarantine::loading()
}

/// `lease`: the latest holder's lease, with the key's TTL as its mirror.
/// True when the restore timer is to be armed.
fn removed(db: c_int, key: &[u8], lease: Lease, holders: Vec<Holder<Owner>>, shared: (Option<u32>, Option<u32>), value: Box<[u8]>) -> bool {
    let (shared, resized) = shared;
    let now = crate::server::clock::now();
    if !running(lease, now) {
        return false;
    }
    let kept = |why| Kept { holders, shared, resized, value, why };
    if crate::core::lease::removed_by_step(lease, now) {
        let arm = with_state(|s| {
            s.kept.insert((db, key.into()), kept(Why::ClockStep));
            recount(s);
            !std::mem::replace(&mut s.restore_armed, true)
        });
        stats::KEPT_AFTER_CLOCK_STEP.bump();
        arm == Some(true)
    } else {
        with_state(|s| s.unexplained = Some(((db, key.into()), kept(Why::Evicted))));
        false
    }
}

/// Whether a removed lock's `lease` still ran at `now`: one that ends
/// within a clock step's margin ended with its key's TTL, as Redis's own
/// expiry of it (and is announced as `expire`).
fn running(lease: Lease, now: Now) -> bool {
    match lease.left(now) {
        Left::Ms(ms) => ms > crate::server::clock::STEP_MS,
        Left::Forever => true,
        Left::Ended => false,
    }
}

/// The `evicted` keyspace event for `key` in `db`, sent right after the
/// unlink callback.
pub fn evicted(db: c_int, key: &[u8]) {
    with_state(|s| {
        if s.unexplained.as_ref().is_some_and(|((d, k), _)| *d == db && **k == *key) {
            if let Some((name, kept)) = s.unexplained.take() {
                s.kept.insert(name, kept);
                stats::LOCKS_EVICTED.bump();
                let now = crate::server::clock::mono_ms();
                s.kept.retain(|_, k| k.end() > now);
                recount(s);
            }
        }
    });
}

/// Whether any lock is kept: one load on the hot path.
#[inline]
pub fn any() -> bool {
    KEPT.load(Ordering::Relaxed) > 0
}

/// Takes the lock kept for `key` (open for writing, named `key_name`, in
/// database `db`) to put it back (`change::restore_rescued`) if its lease
/// still runs and the key is empty; a lease that ended, or a key someone
/// wrote meanwhile, ends the keeping.
pub fn take(key: &Key, key_name: &[u8], db: c_int, now: Now) -> Option<Kept> {
    let kept = with_state(|s| {
        let kept = s.kept.remove(&(db, key_name.into()));
        recount(s);
        kept
    })??;
    (kept.end() > now.mono && key.kind() == KeyKind::Empty).then_some(kept)
}

/// Keeps again a lock `take` gave that could not be put back (the key
/// could not be written): it stays kept here, held.
pub fn keep_again(db: c_int, key_name: &[u8], kept: Kept) {
    with_state(|s| {
        s.kept.insert((db, key_name.into()), kept);
        recount(s);
    });
}

/// What LOCK.INFO shows of a kept lock.
pub struct Peek<'a> {
    /// `None`: exclusive; a group's limit (0: a read-write lock).
    pub shared: Option<u32>,
    /// Each holder still running.
    pub holders: Vec<PeekHolder<'a>>,
    /// An exclusive lock's value; empty: none.
    pub value: &'a [u8],
}

/// One holder of a kept lock, as LOCK.INFO and LOCK.CHECK see it.
pub struct PeekHolder<'a> {
    pub owner: &'a [u8],
    pub token: Token,
    pub left: Left,
    /// When the hold began (monotonic ms).
    pub since: i64,
    pub permits: u32,
    /// A shared holder's value; empty: none.
    pub value: &'a [u8],
}

/// For LOCK.INFO: the holders of a kept lock, without putting it back
/// (INFO writes nothing).
pub fn peek<R>(db: c_int, key: &[u8], now: Now, f: impl FnOnce(Peek<'_>) -> R) -> Option<R> {
    with_state(|s| {
        let kept = s.kept.get(&(db, key.into()))?;
        let holders: Vec<_> = kept
            .holders
            .iter()
            .map(|h| PeekHolder {
                owner: &h.owner[..],
                token: h.token,
                left: Lease { end: h.end, mirror: NO_TTL }.left(now),
                since: h.since,
                permits: h.permits,
                value: h.owner.value(),
            })
            .filter(|h| h.left.is_running())
            .collect();
        (!holders.is_empty()).then(|| f(Peek { shared: kept.shared, holders, value: &kept.value }))
    })
    .flatten()
}

/// Evicted locks kept now (for INFO).
pub fn evicted_kept() -> i64 {
    if !any() {
        return 0;
    }
    let now = crate::server::clock::mono_ms();
    let n = with_state(|s| s.kept.values().filter(|k| k.why == Why::Evicted && k.end() > now).count()).unwrap_or(0);
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The restore timer will not run again until a clock step arms it (this
/// node is a replica: its master puts the locks back).
pub fn restore_disarmed() {
    with_state(|s| s.restore_armed = false);
}

/// The locks a clock step removed, for the restore timer to put back
/// (`change::restore_stepped`); it is disarmed.
pub fn stepped() -> Vec<Name> {
    with_state(|s| {
        s.restore_armed = false;
        s.kept.iter().filter(|(_, k)| k.why == Why::ClockStep).map(|(n, _)| n.clone()).collect()
    })
    .unwrap_or_default()
}

/// Forgets a kept lock whose slot another node serves now.
pub fn forget(name: &Name) {
    with_state(|s| {
        s.kept.remove(name);
        recount(s);
    });
}

/// FLUSHDB/FLUSHALL (`db` -1: all) take kept locks with the keys.
pub fn flushed(db: c_int) {
    with_state(|s| {
        s.kept.retain(|(d, _), _| db >= 0 && *d != db);
        s.unexplained = None;
        recount(s);
    });
}

/// SWAPDB moves kept locks with their databases.
pub fn swapped(a: c_int, b: c_int) {
    with_state(|s| {
        let all = std::mem::take(&mut s.kept);
        s.kept = all.into_iter().map(|((d, k), v)| ((after_swap(d, a, b), k), v)).collect();
    });
}

/// Where database `d` is after `SWAPDB a b`.
pub fn after_swap(d: c_int, a: c_int, b: c_int) -> c_int {
    if d == a {
        b
    } else if d == b {
        a
    } else {
        d
    }
}

#[cfg(test)]
mod tests {
    use super::after_swap;

    #[test]
    fn swapdb_exchanges_the_two_databases_and_leaves_the_others() {
        assert_eq!((after_swap(0, 0, 3), after_swap(3, 0, 3), after_swap(1, 0, 3)), (3, 0, 1));
        assert_eq!(after_swap(2, 2, 2), 2);
    }
}
