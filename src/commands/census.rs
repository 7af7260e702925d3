//! How long the longest current hold has lasted, for `INFO redislock`
//! (`longest_hold_ms`): the stale lock an operator wants to see, a holder
//! that has kept extending for hours.
//!
//! Finding it at INFO time would scan the keyspace in one go, and keeping
//! an ordered index of holds would cost every grant and release. Instead
//! an INFO starts a walk of the keyspace by a timer, in small batches (a
//! bounded number of SCAN steps per tick, as `realign` does), at most one
//! a second and only while a lock is in memory; the walk keeps the
//! earliest start of a hold whose lease runs and publishes it when it
//! ends. INFO reports the time since the earliest start the last finished
//! walk found: exact for a hold that walk saw, while a hold released since
//! shows until a later walk ends. Nobody asking, nothing runs: the
//! commands and an unobserved server pay nothing for it.
//!
//! The walk only reads (the scan's key handles, no expiry, no write), so it
//! is the same on a master, a replica and a node that refuses writes.

use std::ffi::c_int;
use std::sync::atomic::{AtomicI32, AtomicI64, Ordering::Relaxed};
use std::sync::{LazyLock, Mutex};

use crate::api::{Arg, Ctx, Key, ScanCursor};
use crate::core::lease::Now;
use crate::keys::value;

/// SCAN steps per tick: each visits one bucket of the keyspace (a few
/// keys), so a tick costs some tens of microseconds.
const SCAN_STEPS_PER_TICK: usize = 200;
/// Between the ticks of a pass: a walk takes under 1 % of the server's
/// time while it runs (40,000 buckets a second).
const TICK_MS: i64 = 5;
/// The least time from the start of one walk to the start of the next.
const MIN_GAP_MS: i64 = 1_000;
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
    cursor: ScanCursor,
    earliest: i64,
}

#[derive(Default)]
struct State {
    pass: Option<Pass>,
    /// A timer is armed or a walk runs.
    busy: bool,
    /// When the last walk started (monotonic ms).
    started_ms: Option<i64>,
}

// SAFETY: only touched on Redis's main thread (timers).
unsafe impl Send for State {}

static STATE: LazyLock<Mutex<State>> = LazyLock::new(|| Mutex::new(State::default()));

fn with_state<R>(f: impl FnOnce(&mut State) -> R) -> Option<R> {
    crate::server::reentry::with(&STATE, f)
}

/// How long the longest current hold has lasted, ms, as of the last walk
/// (0: none); with `walk_again`, a new walk starts unless one runs or
/// started less than `MIN_GAP_MS` ago.
pub fn longest_hold_ms(walk_again: bool) -> i64 {
    let now = crate::server::clock::mono_ms();
    if walk_again {
        let start = with_state(|s| {
            let due = !s.busy && s.started_ms.is_none_or(|t| now.saturating_sub(t) >= MIN_GAP_MS);
            if due {
                s.busy = true;
            }
            due
        });
        if start == Some(true) && !arm(0) {
            let _ = with_state(|s| s.busy = false);
        }
    }
    match EARLIEST_START.load(Relaxed) {
        NONE => 0,
        start => now.saturating_sub(start).max(0),
    }
}

/// Arms the walk's next tick; false if Redis made no timer.
fn arm(ms: i64) -> bool {
    crate::api::after(ms, on_tick).is_some()
}

fn end_pass(s: &mut State) -> Option<i64> {
    // Dropping the pass destroys its cursor.
    s.pass.take().map(|pass| pass.earliest)
}

fn on_tick(ctx: Ctx) {
    let next = with_state(|s| {
        let next = begin(ctx, s).and_then(|()| step(ctx, s));
        if next.is_none() {
            s.busy = false;
        }
        next
    });
    let armed = match next {
        Some(Some(ms)) => arm(ms),
        Some(None) => true,
        // The state was in use further up the stack (never expected here).
        None => false,
    };
    if !armed {
        // Nothing runs now: the next INFO starts a walk again.
        let _ = with_state(|s| {
            end_pass(s);
            s.busy = false;
        });
    }
}

/// Starts a walk unless one runs; `None` when there is nothing to walk
/// (no lock in memory: no hold either).
fn begin(ctx: Ctx, s: &mut State) -> Option<()> {
    if s.pass.is_some() {
        return Some(());
    }
    s.started_ms = Some(crate::server::clock::mono_ms());
    if crate::server::stats::LOCKS.load(Relaxed) <= 0 {
        EARLIEST_START.store(NONE, Relaxed);
        return None;
    }
    let cursor = ScanCursor::new()?;
    if DATABASES.load(Relaxed) <= 0 {
        DATABASES.store(ctx.databases(), Relaxed);
    }
    s.pass = Some(Pass { db: 0, databases: DATABASES.load(Relaxed), cursor, earliest: NONE });
    Some(())
}

/// One tick of the walk; when to tick again, `None` when it ended.
fn step(ctx: Ctx, s: &mut State) -> Option<i64> {
    let pass = s.pass.as_mut()?;
    if !ctx.select_db(pass.db) {
        end_pass(s);
        return None;
    }
    let now = crate::server::clock::now();
    let mut earliest = pass.earliest;
    let mut visit = |_: &Arg, key: &Key| note_holds(key, now, &mut earliest);
    let mut more = true;
    for _ in 0..SCAN_STEPS_PER_TICK {
        if !pass.cursor.step(ctx, &mut visit) {
            more = false;
            break;
        }
    }
    pass.earliest = earliest;
    if more {
        return Some(TICK_MS);
    }
    pass.db += 1;
    pass.cursor.restart();
    if pass.db < pass.databases {
        return Some(TICK_MS);
    }
    if let Some(earliest) = end_pass(s) {
        EARLIEST_START.store(earliest, Relaxed);
    }
    None
}

/// Notes when the holds of one lock key began, if their leases run (the
/// scan's key handle is read-only).
fn note_holds(key: &Key, now: Now, earliest: &mut i64) {
    if let Some(lock) = value::at(key) {
        if lock.lease().left(now).is_running() {
            *earliest = (*earliest).min(lock.since());
        }
    } else if let Some(group) = value::group_at(key) {
        if let Some(since) = group.live(now).map(|h| h.since).min() {
            *earliest = (*earliest).min(since);
        }
    }
}
