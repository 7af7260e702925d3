//! Ending the holds of a connection that closed, and forgetting the
//! bindings of holds that ended (see `session`).
//!
//! The disconnect itself is a server event (`edge::events`), raised while
//! Redis frees the client: no place to write keys or propagate, nor to
//! walk the connection's holds (ending 10^5 of them in one callback
//! stalled the server for over 100 ms). It only hands the connection's
//! holds over (`session::connection_closed`, O(1)) and arms a timer here,
//! which ends them a slice at a time: at most `SLICE_HOLDS` holds or
//! `SLICE_MS` per tick, then armed again at 0 ms, so Redis serves its
//! clients between slices. Each hold is ended as a client's command could:
//! only where the server lets the module write (`writable`), only on the
//! node that serves the key's slot, and only a hold still held by its
//! owner and not granted again since. A hold without a lock-delay is
//! released, replicated as LOCK.RELEASE, and its line served at once; one
//! with a lock-delay has its lease cut to the disconnect plus the delay,
//! replicated like any lease change, and the line is served when it ends.
//!
//! The same timer forgets bindings and cut marks whose lease end has
//! passed, once the key confirms that the hold ended, within the same
//! budget per tick. The server's cron starts it when one is due, so it
//! runs only while there is work.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::api::{Arg, Ctx, HeldString, Key, KeyMode};
use crate::core::lease::Now;
use crate::grants::{self, Look, Slot};
use crate::session::{self, Hold};
use crate::stats::{self, Cause, HoldKind};
use crate::{clock, group, propagate, value, waiters, writable};

/// Holds a tick looks at, at most: ending one costs about a microsecond
/// (a release, its propagation, its line), so a tick takes a millisecond
/// or two.
pub const SLICE_HOLDS: usize = 1_000;
/// A tick stops after this long whatever it has left (a hold whose line
/// is served costs more).
const SLICE_MS: i64 = 3;
/// Holds taken from `session` at a time, between looks at the clock.
const BATCH: usize = 100;

/// The timer is armed.
static ARMED: AtomicBool = AtomicBool::new(false);
/// Its id, while armed.
static TIMER: AtomicU64 = AtomicU64::new(0);

/// Connection `client` closed: end its session-bound holds soon.
pub fn closed(client: u64) {
    if session::connection_closed(client, clock::mono_ms()) {
        arm(0);
    }
}

/// The server's cron: a binding's or cut mark's lease end has passed, or
/// a closed connection's holds wait: start the timer. One load while no
/// hold is bound or cut.
pub fn cron() {
    if session::any() && !ARMED.load(Ordering::Relaxed) && session::has_work(clock::mono_ms()) {
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
    let refusal = if session::closing_left() { writable::refusal(ctx) } else { None };
    // A replica grants nothing to its clients: no binding stands there.
    if refusal == Some(writable::Refusal::Replica) {
        return session::forget_all();
    }
    let started = clock::mono_ms();
    let in_time = || clock::mono_ms().saturating_sub(started) < SLICE_MS;
    let mut left = SLICE_HOLDS;
    if refusal.is_none() {
        while left > 0 && in_time() && session::closing_left() {
            let n = BATCH.min(left);
            left -= n;
            let now = clock::now();
            for ending in session::closing_slice(n) {
                end_one(ctx, &ending, now);
            }
        }
    }
    while left > 0 && in_time() && session::has_due(clock::mono_ms()) {
        let n = BATCH.min(left);
        left -= n;
        let now = clock::now();
        for hold in session::due(now.mono, n) {
            let end = hold_end(ctx, &hold, now);
            session::verified(&hold, end, now.mono);
        }
    }
    let closing = session::closing_left();
    match refusal {
        None if closing => {
            // The slice is used up: clients are served before the next.
            stats::SESSION_END_YIELDS.bump();
            arm(0);
        }
        _ if session::has_due(clock::mono_ms()) => arm(0),
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

/// Ends one closed connection's hold, and tells `session` how that went.
fn end_one(ctx: Ctx, ending: &session::Ending, now: Now) {
    // Granted again while an earlier hold of the slice was ended (its
    // line served): the grant wins.
    if !session::is_closing(ending) {
        return;
    }
    let (db, key, owner) = &*ending.hold;
    let name = HeldString::from_bytes(key);
    if !name.is_valid() || !ctx.select_db(*db) {
        return session::closed_hold_ended(ending, session::Ended::Gone);
    }
    let key_name = Arg::of(&name);
    // The slot moved to another node: the lease alone governs there.
    if writable::placement(ctx, key_name) != writable::Placement::Local {
        return session::closed_hold_ended(ending, session::Ended::Gone);
    }
    let key = ctx.open_key(key_name, KeyMode::Write);
    grants::restore_rescued(ctx, &key, key_name);
    let ended = end_hold(ctx, &key, key_name, owner, ending.end, now);
    // Told before the line is served: the next holder may be this owner
    // on a new connection, whose binding must stand.
    let left = match ended {
        Ended::Released | Ended::NotHeld => session::Ended::Gone,
        Ended::CutShort | Ended::Kept => session::Ended::Cut,
    };
    session::closed_hold_ended(ending, left);
    match ended {
        Ended::Released => {
            stats::SESSION_RELEASES.bump();
            if let Some(db) = waiters::queued_in(ctx, key_name.bytes()) {
                waiters::serve(ctx, &key, db, key_name, Cause::Release);
            }
        }
        Ended::CutShort => {
            stats::SESSION_DELAYS.bump();
            waiters::lease_changed(ctx, &key, key_name);
        }
        Ended::NotHeld | Ended::Kept => {}
    }
}

enum Ended {
    Released,
    CutShort,
    /// Still held, its lease not cut: it ends by then anyway (or the key's
    /// TTL could not be set).
    Kept,
    /// Not held by `owner` any more.
    NotHeld,
}

/// Ends `owner`'s hold at `key` at `end` (monotonic): now, or by cutting
/// its lease short.
fn end_hold(ctx: Ctx, key: &Key, key_name: &Arg, owner: &[u8], end: i64, now: Now) -> Ended {
    let release_now = end <= now.mono;
    match grants::slot(key, now, Look::Held) {
        Slot::Held(mut lock) if lock.is_held_by(owner) => {
            if release_now {
                stats::holds(HoldKind::Exclusive).record(now.mono.saturating_sub(lock.since()));
                value::delete(key);
                propagate::released_by_server(ctx, key_name, owner);
                return Ended::Released;
            }
            let Some(lease) = lock.lease().cut_to(end, now) else { return Ended::Kept };
            if !key.expire_at(lease.mirror) {
                return Ended::Kept;
            }
            lock.set_lease(lease);
            propagate::cut_short(ctx, key_name, lease.mirror);
            Ended::CutShort
        }
        Slot::Shared(g) if release_now => {
            let since = g.holding.holder(owner).filter(|h| h.end > now.mono).map(|h| h.since);
            if !g.holding.release(owner, now.mono) {
                return Ended::NotHeld;
            }
            if let Some(since) = since {
                stats::holds(HoldKind::of_group(g.holding.kind)).record(now.mono.saturating_sub(since));
            }
            // The key goes with the last holder as DEL, as a command's release
            // of it: holders whose lease ended here may still be stored on a
            // replica.
            if g.holding.is_free() {
                value::delete(key);
                propagate::released_last(ctx, key_name);
            } else {
                propagate::released_by_server(ctx, key_name, owner);
            }
            Ended::Released
        }
        Slot::Shared(g) => {
            let Some(token) = g.holding.cut_short(owner, end, now.mono) else {
                let held = g.holding.holder(owner).is_some_and(|h| h.end > now.mono);
                return if held { Ended::Kept } else { Ended::NotHeld };
            };
            // The key's TTL never shrinks for one holder (see `group`).
            let deadline = group::wall_deadline(end, now);
            propagate::shared_granted(ctx, key_name, owner, token, deadline, g.limit(), g.key_mirror());
            Ended::CutShort
        }
        _ => Ended::NotHeld,
    }
}
