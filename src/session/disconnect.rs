//! Ending the holds of a connection that closed, and forgetting the
//! bindings of holds that ended (see `server::bindings`).
//!
//! The disconnect itself is a server event (`edge::events`), raised while
//! Redis frees the client: no place to write keys or propagate, nor to
//! walk the connection's holds (ending 10^5 of them in one callback
//! stalled the server for over 100 ms). It only hands the connection's
//! holds over (`bindings::connection_closed`, O(1)) and arms a timer here,
//! which ends them a slice at a time: at most `SLICE_HOLDS` holds or
//! `SLICE_MS` per tick, then armed again at 0 ms, so Redis serves its
//! clients between slices. Each hold is ended as a client's command could:
//! only where the server lets the module write (`writable`), only on the
//! node that serves the key's slot, and only a hold still held by its
//! owner and not granted again since (`change::end_closed`, which ends or
//! cuts it short), and the key's line served when that freed it, or
//! looked at again when it cut the lease (`waiters`).
//!
//! The same timer forgets bindings and cut marks whose lease end has
//! passed, once the key confirms that the hold ended, within the same
//! budget per tick. The server's cron starts it when one is due, so it
//! runs only while there is work.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::api::{Arg, Ctx, HeldString, KeyMode};
use crate::change::{self, Line};
use crate::core::lease::Now;
use crate::keys::grants;
use crate::server::bindings::{self, Hold};
use crate::server::stats::{self, Cause};
use crate::{replication::writable, server::clock, waiters};

/// Holds a tick looks at, at most: ending one costs about a microsecond
/// (a release, its propagation, its line), so a tick takes a millisecond
/// or two.
pub const SLICE_HOLDS: usize = 1_000;
/// A tick stops after this long whatever it has left (a hold whose line
/// is served costs more).
const SLICE_MS: i64 = 3;
/// Holds taken from `bindings` at a time, between looks at the clock.
const BATCH: usize = 100;

/// The timer is armed.
static ARMED: AtomicBool = AtomicBool::new(false);
/// Its id, while armed.
static TIMER: AtomicU64 = AtomicU64::new(0);

/// Connection `client` closed: end its session-bound holds soon.
pub fn closed(client: u64) {
    if bindings::connection_closed(client, clock::mono_ms()) {
        arm(0);
    }
}

/// The server's cron: a binding's or cut mark's lease end has passed, or
/// a closed connection's holds wait: start the timer. One load while no
/// hold is bound or cut.
pub fn cron() {
    if bindings::any() && !ARMED.load(Ordering::Relaxed) && bindings::has_work(clock::mono_ms()) {
        arm(0);
    }
}

/// The wall clock stepped: module timers run on it, so an armed one may
/// fire late by the step (see `clock`); it is armed again.
pub fn clock_stepped() {
    if !ARMED.load(Ordering::Relaxed) {
        return;
    }
    if crate::api::TimerId::from_bits(TIMER.load(Ordering::Relaxed)).stop() {
        ARMED.store(false, Ordering::Relaxed);
        arm(0);
    }
}

fn arm(ms: i64) {
    if !ARMED.swap(true, Ordering::Relaxed) {
        let id = crate::api::after(ms, on_timer);
        TIMER.store(id.map_or(0, crate::api::TimerId::to_bits), Ordering::Relaxed);
        if id.is_none() {
            // No timer: the cron tries again.
            ARMED.store(false, Ordering::Relaxed);
        }
    }
}

fn on_timer(ctx: Ctx) {
    ARMED.store(false, Ordering::Relaxed);
    // Ending holds writes: only when a client's command could (asked only
    // then: it reads INFO). Forgetting ended ones only reads.
    let refusal = if bindings::closing_left() { writable::refusal(ctx) } else { None };
    // A replica grants nothing to its clients: no binding stands there.
    if refusal == Some(writable::Refusal::Replica) {
        return bindings::forget_all();
    }
    let started = clock::mono_ms();
    let in_time = || clock::mono_ms().saturating_sub(started) < SLICE_MS;
    let mut left = SLICE_HOLDS;
    if refusal.is_none() {
        while left > 0 && in_time() && bindings::closing_left() {
            let n = BATCH.min(left);
            left -= n;
            let now = clock::now();
            for ending in bindings::closing_slice(n) {
                end_one(ctx, &ending, now);
            }
        }
    }
    while left > 0 && in_time() && bindings::has_due(clock::mono_ms()) {
        let n = BATCH.min(left);
        left -= n;
        let now = clock::now();
        for hold in bindings::due(now.mono, n) {
            let end = hold_end(ctx, &hold, now);
            bindings::verified(&hold, end, now.mono);
        }
    }
    let closing = bindings::closing_left();
    match refusal {
        None if closing => {
            // The slice is used up: clients are served before the next.
            stats::SESSION_END_YIELDS.bump();
            arm(0);
        }
        _ if bindings::has_due(clock::mono_ms()) => arm(0),
        Some(refusal) if closing => arm(refusal.retry_ms()),
        _ => {}
    }
}

/// When `hold` ends, if it is held (read-only: the key's lease as a
/// command would judge it).
fn hold_end(ctx: Ctx, hold: &Hold, now: Now) -> Option<i64> {
    let (db, key, owner) = hold;
    let name = HeldString::from_bytes(key);
    if !name.is_valid() || !ctx.select_db(*db) {
        return None;
    }
    let key = ctx.open_key(Arg::of(&name), KeyMode::Read);
    grants::hold_end(&key, owner, now)
}

/// Ends one closed connection's hold where its key is served here (see
/// `change::end_closed`).
fn end_one(ctx: Ctx, ending: &bindings::Ending, now: Now) {
    // Granted again while an earlier hold of the slice was ended (its
    // line served): the grant wins.
    if !bindings::is_closing(ending) {
        return;
    }
    let (db, key, _) = &*ending.hold;
    let name = HeldString::from_bytes(key);
    if !name.is_valid() || !ctx.select_db(*db) {
        return bindings::closed_hold_ended(ending, bindings::Ended::Gone);
    }
    let key_name = Arg::of(&name);
    // The slot moved to another node: the lease alone governs there.
    if writable::placement(ctx, key_name) != writable::Placement::Local {
        return bindings::closed_hold_ended(ending, bindings::Ended::Gone);
    }
    let key = ctx.open_key(key_name, KeyMode::Write);
    change::restore_rescued(ctx, &key, key_name);
    let queued = waiters::queued_in(ctx, key_name.bytes());
    let line = waiters::deleting_before_handoff(ctx, key_name, queued, || change::end_closed(ctx, &key, key_name, ending, now));
    match line {
        Line::Freed => {
            stats::SESSION_RELEASES.bump();
            if let Some(db) = queued {
                waiters::serve(ctx, &key, db, key_name, Cause::Release);
            }
        }
        Line::LeaseChanged => {
            stats::SESSION_DELAYS.bump();
            waiters::lease_changed(ctx, &key, key_name);
        }
        Line::Untouched => {}
    }
}
