//! How long the longest current hold has lasted, for `INFO redislock`
//! (`longest_hold_ms`): the stale lock an operator wants to see, a holder
//! that has kept extending for hours.
//!
//! Finding it at INFO time would scan the keyspace in one go, and keeping
//! an ordered index of holds would cost every grant and release. Instead a
//! timer walks the keyspace in small batches (a bounded number of SCAN
//! steps per tick, as `realign` does) while any lock is in memory, and
//! keeps the earliest start of a hold whose lease runs. Each pass publishes
//! it when it ends; INFO reports the time since then. So the figure is
//! exact for a hold the last pass saw, and a hold released since shows
//! until the next pass ends: a pass starts `PAUSE_MS` after the last and
//! visits `SCAN_STEPS_PER_TICK` buckets of the keyspace every `TICK_MS`.
//!
//! The walk only reads (the scan's key handles, no expiry, no write), so it
//! is the same on a master, a replica and a node that refuses writes.

use std::ffi::{c_int, c_void};
use std::ptr;
use std::sync::atomic::{AtomicI32, AtomicI64, Ordering::Relaxed};
use std::sync::{LazyLock, Mutex};

use redis_module::raw;

use crate::api::{rm, Ctx, Key, RedisModuleCtx, RedisModuleString};
use crate::core::lease::Now;
use crate::value;

/// SCAN steps per tick: each visits one bucket of the keyspace (a few
/// keys), so a tick costs some tens of microseconds.
const SCAN_STEPS_PER_TICK: usize = 200;
/// Between the ticks of a pass: the walk takes under 1 % of the server's
/// time (40,000 buckets a second).
const TICK_MS: i64 = 5;
/// Between passes, and between looks while no lock is in memory.
const PAUSE_MS: i64 = 1_000;
/// No hold seen.
const NONE: i64 = i64::MAX;

/// When the earliest hold the last pass found began (monotonic ms), or
/// `NONE`.
static EARLIEST_START: AtomicI64 = AtomicI64::new(NONE);
/// The server's `databases`, read once (it cannot change while it runs;
/// reading it is a CONFIG GET, which would show in the command stats).
static DATABASES: AtomicI32 = AtomicI32::new(0);

struct Pass {
    db: c_int,
    databases: c_int,
    cursor: *mut raw::RedisModuleScanCursor,
    earliest: i64,
}

#[derive(Default)]
struct State {
    pass: Option<Pass>,
}

// SAFETY: only touched on Redis's main thread (timers).
unsafe impl Send for State {}

static STATE: LazyLock<Mutex<State>> = LazyLock::new(|| Mutex::new(State::default()));

fn with_state<R>(f: impl FnOnce(&mut State) -> R) -> Option<R> {
    crate::reentry::with(&STATE, f)
}

/// Starts the walk (at the module's load).
pub fn start() {
    arm(PAUSE_MS);
}

/// How long the longest current hold has lasted, ms, as of the last pass
/// (0: none).
pub fn longest_hold_ms() -> i64 {
    match EARLIEST_START.load(Relaxed) {
        NONE => 0,
        start => crate::clock::mono_ms().saturating_sub(start).max(0),
    }
}

fn arm(ms: i64) {
    rm!(RedisModule_CreateTimer(crate::api::timer_ctx(), ms, Some(on_tick), ptr::null_mut()) else 0);
}

fn end_pass(s: &mut State) -> Option<i64> {
    let pass = s.pass.take()?;
    rm!(RedisModule_ScanCursorDestroy(pass.cursor) else ());
    Some(pass.earliest)
}

unsafe extern "C" fn on_tick(raw_ctx: *mut RedisModuleCtx, _data: *mut c_void) {
    let ctx = Ctx::new(raw_ctx);
    let next = with_state(|s| {
        if s.pass.is_none() {
            if crate::stats::LOCKS.load(Relaxed) <= 0 {
                EARLIEST_START.store(NONE, Relaxed);
                return PAUSE_MS;
            }
            let cursor = rm!(RedisModule_ScanCursorCreate() else ptr::null_mut());
            if cursor.is_null() {
                return PAUSE_MS;
            }
            if DATABASES.load(Relaxed) <= 0 {
                DATABASES.store(ctx.databases(), Relaxed);
            }
            s.pass = Some(Pass { db: 0, databases: DATABASES.load(Relaxed), cursor, earliest: NONE });
        }
        step(ctx, s)
    })
    .unwrap_or(PAUSE_MS);
    arm(next);
}

/// One tick of the pass; when to tick again.
fn step(ctx: Ctx, s: &mut State) -> i64 {
    let Some(pass) = s.pass.as_mut() else { return PAUSE_MS };
    if !ctx.select_db(pass.db) {
        end_pass(s);
        return PAUSE_MS;
    }
    let mut seen = Seen { now: crate::clock::now(), earliest: pass.earliest };
    let mut more = true;
    for _ in 0..SCAN_STEPS_PER_TICK {
        let data = (&mut seen as *mut Seen).cast::<c_void>();
        if rm!(RedisModule_Scan(ctx.raw(), pass.cursor, Some(visit), data) else 0) == 0 {
            more = false;
            break;
        }
    }
    pass.earliest = seen.earliest;
    if more {
        return TICK_MS;
    }
    pass.db += 1;
    rm!(RedisModule_ScanCursorRestart(pass.cursor) else ());
    if pass.db < pass.databases {
        return TICK_MS;
    }
    if let Some(earliest) = end_pass(s) {
        EARLIEST_START.store(earliest, Relaxed);
    }
    PAUSE_MS
}

struct Seen {
    now: Now,
    earliest: i64,
}

/// Notes when the holds of one lock key began, if their leases run (the
/// scan's key handle is read-only).
unsafe extern "C" fn visit(_ctx: *mut RedisModuleCtx, _name: *mut RedisModuleString, key: *mut raw::RedisModuleKey, data: *mut c_void) {
    let Some(seen) = data.cast::<Seen>().as_mut() else { return };
    let key = std::mem::ManuallyDrop::new(Key::from_raw(key));
    let now = seen.now;
    if let Some(lock) = value::at(&key) {
        if lock.lease().left(now).is_running() {
            seen.earliest = seen.earliest.min(lock.since());
        }
    } else if let Some(group) = value::group_at(&key) {
        if let Some(since) = group.live(now).map(|h| h.since).min() {
            seen.earliest = seen.earliest.min(since);
        }
    }
}
