//! Ending the holds of a connection that closed (see `session`).
//!
//! The disconnect itself is a server event (`edge::events`), raised while
//! Redis frees the client: no place to write keys or propagate. It only
//! marks the connection's holds and arms a timer here, which then ends
//! each hold as a client's command could: only where the server lets the
//! module write (`writable`), only on the node that serves the key's slot,
//! and only a hold still held by its owner and not granted again since.
//! A hold without a lock-delay is released, replicated as LOCK.RELEASE,
//! and its line served at once; one with a lock-delay has its lease cut to
//! the disconnect plus the delay, replicated like any lease change, and
//! the line is served when it ends.

use std::ffi::c_void;
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};

use redis_module::raw;

use crate::api::{rm, Arg, Ctx, HeldString, Key, KeyMode, RedisModuleCtx};
use crate::core::lease::Now;
use crate::grants::{self, Look, Slot};
use crate::stats::{self, Cause, HoldKind};
use crate::{clock, group, propagate, session, value, waiters, writable};

/// The timer is armed.
static ARMED: AtomicBool = AtomicBool::new(false);

/// Connection `client` closed: end its session-bound holds soon.
pub fn closed(client: u64) {
    if session::connection_closed(client, clock::mono_ms()) {
        arm(0);
    }
}

fn arm(ms: i64) {
    if !ARMED.swap(true, Ordering::Relaxed) {
        rm!(RedisModule_CreateTimer(crate::api::timer_ctx(), ms, Some(on_timer), ptr::null_mut()) else 0);
    }
}

unsafe extern "C" fn on_timer(raw_ctx: *mut RedisModuleCtx, _data: *mut c_void) {
    ARMED.store(false, Ordering::Relaxed);
    let ctx = Ctx::new(raw_ctx);
    match writable::refusal(ctx) {
        // A replica grants nothing to its clients: no binding stands there.
        Some(writable::Refusal::Replica) => return session::forget_all(),
        Some(refusal) => return arm(refusal.retry_ms()),
        None => {}
    }
    let now = clock::now();
    for ((db, key, owner), end) in session::take_closed() {
        let name = HeldString::from_bytes(&key);
        if !name.is_valid() || !ctx.select_db(db) {
            continue;
        }
        let key_name = Arg::of(&name);
        // The slot moved to another node: the lease alone governs there.
        if writable::placement(ctx, key_name) != writable::Placement::Local {
            continue;
        }
        let key = ctx.open_key(key_name, KeyMode::Write);
        grants::restore_rescued(ctx, &key, key_name);
        match end_hold(ctx, &key, key_name, &owner, end, now) {
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
            Ended::Nothing => {}
        }
    }
    // More closed while this ran (a re-entered call skipped its marks).
    if session::any_closed() {
        arm(0);
    }
}

enum Ended {
    Released,
    CutShort,
    /// Not held by `owner` any more, or it ends by then anyway.
    Nothing,
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
            let Some(lease) = lock.lease().cut_to(end, now) else { return Ended::Nothing };
            if !key.expire_at(lease.mirror) {
                return Ended::Nothing;
            }
            lock.set_lease(lease);
            propagate::cut_short(ctx, key_name, lease.mirror);
            Ended::CutShort
        }
        Slot::Shared(g) if release_now => {
            let since = g.holding.holder(owner).filter(|h| h.end > now.mono).map(|h| h.since);
            if !g.holding.release(owner, now.mono) {
                return Ended::Nothing;
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
            let Some(token) = g.holding.cut_short(owner, end, now.mono) else { return Ended::Nothing };
            // The key's TTL never shrinks for one holder (see `group`).
            let deadline = group::wall_deadline(end, now);
            propagate::shared_granted(ctx, key_name, owner, token, deadline, g.limit(), g.key_mirror());
            Ended::CutShort
        }
        _ => Ended::Nothing,
    }
}
