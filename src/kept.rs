//! Locks whose key Redis removed while their lease still ran, kept until
//! the lease ends.
//!
//! Two ordinary events remove a held lock's key without anyone releasing
//! it: a forward step of the wall clock (Redis expires keys by it, see
//! `lease`), and eviction under `maxmemory` (`volatile-*` policies pick
//! lock keys, which carry a TTL; `allkeys-*` pick any key). Neither may
//! hand the lock to someone else. There is no hook to veto either, so the
//! data type's unlink callback, which still sees the value, remembers
//! owner, token and lease end here:
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
use std::ffi::{c_char, c_int, c_void};
use std::ptr;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{LazyLock, Mutex};

use redis_module::raw;

use crate::api::{rm, Arg, Ctx, Key, KeyKind, KeyMode, RedisModuleCtx, RedisModuleString};
use crate::fencing::Token;
use crate::gate;
use crate::lease::{Lease, Left, Now, NO_TTL};
use crate::lock::{self, Lock};
use crate::stats;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Why {
    ClockStep,
    Evicted,
}

struct Kept {
    owner: Box<[u8]>,
    token: Token,
    /// On the monotonic clock.
    end: i64,
    why: Why,
}

type Name = (c_int, Box<[u8]>);

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
/// Set while this module itself deletes or overwrites a lock.
static OWN_REMOVALS: AtomicU32 = AtomicU32::new(0);

fn with_state<R>(f: impl FnOnce(&mut State) -> R) -> Option<R> {
    crate::reentry::with(&STATE, f)
}

fn recount(state: &State) {
    KEPT.store(state.kept.len(), Ordering::Relaxed);
}

/// Marks a deletion or overwrite as this module's own (a release, a grant
/// over an ended lease, a replayed LOCK.APPLY) for as long as it lives.
pub struct OwnRemoval;

impl OwnRemoval {
    pub fn begin() -> OwnRemoval {
        OWN_REMOVALS.fetch_add(1, Ordering::Relaxed);
        OwnRemoval
    }
}

impl Drop for OwnRemoval {
    fn drop(&mut self) {
        OWN_REMOVALS.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The unlink callback saw a lock leave the keyspace.
pub fn lock_removed(db: c_int, key: &[u8], lock: &Lock) {
    if OWN_REMOVALS.load(Ordering::Relaxed) > 0 || gate::is_replica() || crate::quarantine::loading() {
        // This module's decision; or the master's (its DEL), or the data
        // being loaded: none of them loses a lock.
        return;
    }
    let now = Now::read();
    let lease = lock.lease();
    let running = match lease.left(now) {
        Left::Ms(ms) => ms > crate::clock::STEP_MS,
        Left::Forever => true,
        Left::Ended => false,
    };
    if !running {
        return;
    }
    let kept = |why| Kept { owner: lock.owner().into(), token: lock.token(), end: lease.end, why };
    if crate::lease::removed_by_step(lease, now) {
        let arm = with_state(|s| {
            s.kept.insert((db, key.into()), kept(Why::ClockStep));
            recount(s);
            !std::mem::replace(&mut s.restore_armed, true)
        });
        stats::KEPT_AFTER_CLOCK_STEP.bump();
        if arm == Some(true) {
            arm_restore(0);
        }
    } else {
        with_state(|s| s.unexplained = Some(((db, key.into()), kept(Why::Evicted))));
    }
}

/// The `evicted` keyspace event, sent right after the unlink callback.
unsafe extern "C" fn on_evicted(ctx: *mut RedisModuleCtx, _type: c_int, _event: *const c_char, key: *mut RedisModuleString) -> c_int {
    let db = Ctx::new(ctx).selected_db();
    // SAFETY: Redis hands the live key name for the callback's duration.
    let name = unsafe { crate::api::string_bytes(key) };
    with_state(|s| {
        if s.unexplained.as_ref().is_some_and(|((d, k), _)| *d == db && **k == *name) {
            if let Some((name, kept)) = s.unexplained.take() {
                s.kept.insert(name, kept);
                stats::LOCKS_EVICTED.bump();
                let now = crate::clock::mono_ms();
                s.kept.retain(|_, k| k.end > now);
                recount(s);
            }
        }
    });
    crate::api::OK
}

/// Whether any lock is kept: one load on the hot path.
#[inline]
pub fn any() -> bool {
    KEPT.load(Ordering::Relaxed) > 0
}

/// Puts back the lock kept for `key` (open for writing, in database `db`)
/// if its lease still runs and the key is empty, as the grant it was; a
/// lease that ended, or a key someone wrote meanwhile, ends the keeping.
pub fn restore(ctx: Ctx, key: &Key, key_name: &Arg, db: c_int, now: Now) {
    let Some(Some(kept)) = with_state(|s| {
        let kept = s.kept.remove(&(db, key_name.bytes().into()));
        recount(s);
        kept
    }) else {
        return;
    };
    if kept.end <= now.mono || key.kind() != KeyKind::Empty {
        return;
    }
    let lease = Lease { end: kept.end, mirror: NO_TTL }.remirrored(now);
    let stored = Lock::new(&kept.owner, kept.token, lease).is_some_and(|lock| lock::store(key, lock));
    // Without its TTL the key would stay forever.
    if !stored || (lease.mirror != NO_TTL && !key.expire_at(lease.mirror)) {
        // The key could not be written: the lock stays kept here, held.
        if stored {
            lock::delete(key);
        }
        with_state(|s| {
            s.kept.insert((db, key_name.bytes().into()), kept);
            recount(s);
        });
        return;
    }
    stats::LOCKS_RESTORED.bump();
    ctx.replicate_grant_bytes(crate::propagate::APPLY, key_name, &kept.owner, kept.token, lease.mirror.max(0));
    ctx.signal_modified(key_name);
    ctx.notify(c"lock.restore", key_name);
}

/// For LOCK.INFO: owner, token and what is left of a kept lock, without
/// putting it back (INFO writes nothing).
pub fn peek<R>(db: c_int, key: &[u8], now: Now, f: impl FnOnce(&[u8], Token, Left) -> R) -> Option<R> {
    with_state(|s| {
        let kept = s.kept.get(&(db, key.into()))?;
        let left = Lease { end: kept.end, mirror: NO_TTL }.left(now);
        left.is_running().then(|| f(&kept.owner, kept.token, left))
    })
    .flatten()
}

/// Evicted locks kept now (for INFO).
pub fn evicted_kept() -> i64 {
    if !any() {
        return 0;
    }
    let now = crate::clock::mono_ms();
    let n = with_state(|s| s.kept.values().filter(|k| k.why == Why::Evicted && k.end > now).count()).unwrap_or(0);
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn arm_restore(ms: i64) {
    rm!(RedisModule_CreateTimer(crate::waiters::timer_ctx(), ms, Some(on_restore), ptr::null_mut()) else 0);
}

/// Puts back the locks a clock step removed, as soon as the server lets
/// this module write.
unsafe extern "C" fn on_restore(raw_ctx: *mut RedisModuleCtx, _data: *mut c_void) {
    let ctx = Ctx::new(raw_ctx);
    if let Some(refusal) = gate::refusal(ctx) {
        if refusal == gate::Refusal::Replica {
            with_state(|s| s.restore_armed = false);
        } else {
            arm_restore(refusal.retry_ms());
        }
        return;
    }
    let names: Vec<Name> = with_state(|s| {
        s.restore_armed = false;
        s.kept.iter().filter(|(_, k)| k.why == Why::ClockStep).map(|(n, _)| n.clone()).collect()
    })
    .unwrap_or_default();
    let now = Now::read();
    for (db, key) in names {
        let name = crate::api::HeldString::own(rm!(RedisModule_CreateString(ptr::null_mut(), key.as_ptr().cast::<c_char>(), key.len()) else ptr::null_mut()));
        if !name.is_valid() || !ctx.select_db(db) {
            continue;
        }
        if gate::placement(ctx, Arg::of(&name)) == gate::Placement::Elsewhere {
            with_state(|s| {
                s.kept.remove(&(db, key.clone()));
                recount(s);
            });
            continue;
        }
        let open = ctx.open_key(Arg::of(&name), KeyMode::Write);
        restore(ctx, &open, Arg::of(&name), db, now);
    }
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
        s.kept = all
            .into_iter()
            .map(|((d, k), v)| ((if d == a { b } else if d == b { a } else { d }, k), v))
            .collect();
    });
}

pub fn init(ctx: Ctx) -> bool {
    rm!(RedisModule_SubscribeToKeyspaceEvents(ctx.raw(), raw::REDISMODULE_NOTIFY_EVICTED, Some(on_evicted)) else crate::api::ERR)
        == crate::api::OK
}
