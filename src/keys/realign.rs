//! After a step of the wall clock, every lock key's TTL is off by the
//! step: the lease runs on the monotonic clock, but Redis would reclaim a
//! key a step late (backward) or expire it a step early (forward, where
//! `rescue` puts it back), and PTTL would show the wrong time. One pass over
//! the keyspace sets each running lease's TTL at the new wall clock, and
//! deletes the keys whose lease has ended, as Redis's expiry would have.
//!
//! The pass runs from a timer in small batches (a bounded number of SCAN
//! steps per tick), so a large keyspace does not stall the server; a step
//! during a pass starts it again.

use std::ffi::c_int;
use std::sync::{LazyLock, Mutex};

use crate::api::{Arg, Ctx, HeldString, Key, KeyMode, ScanCursor};
use crate::core::lease::{self, Left, Now};
use crate::replication::writable;
use crate::{keys::value, replication::propagate};

/// SCAN steps per tick: each visits one bucket of the keyspace (a few
/// keys), so a tick costs well under a millisecond.
const SCAN_STEPS_PER_TICK: usize = 100;

struct Pass {
    db: c_int,
    databases: c_int,
    cursor: ScanCursor,
}

#[derive(Default)]
struct State {
    pass: Option<Pass>,
    armed: bool,
}

// SAFETY: only touched on Redis's main thread (cron event and timers).
unsafe impl Send for State {}

static STATE: LazyLock<Mutex<State>> = LazyLock::new(|| Mutex::new(State::default()));

fn with_state<R>(f: impl FnOnce(&mut State) -> R) -> Option<R> {
    crate::server::reentry::with(&STATE, f)
}

/// The server's cron saw the wall clock step: (re)start the pass.
pub fn clock_stepped(ctx: Ctx) {
    if crate::server::stats::LOCKS.load(std::sync::atomic::Ordering::Relaxed) <= 0 {
        return;
    }
    let databases = ctx.databases();
    let arm = with_state(|s| {
        // Dropping a pass destroys its cursor.
        let Some(cursor) = ScanCursor::new() else {
            s.pass = None;
            return false;
        };
        s.pass = Some(Pass { db: 0, databases, cursor });
        !std::mem::replace(&mut s.armed, true)
    });
    if arm == Some(true) {
        arm_tick(0);
    }
}

fn arm_tick(ms: i64) {
    crate::api::after(ms, on_tick);
}

fn end_pass(s: &mut State) {
    s.pass = None;
}

fn on_tick(ctx: Ctx) {
    match writable::refusal(ctx) {
        // A replica's keys follow its master's pass.
        Some(writable::Refusal::Replica) => {
            with_state(|s| {
                end_pass(s);
                s.armed = false;
            });
            return;
        }
        Some(refusal) => return arm_tick(refusal.retry_ms()),
        None => {}
    }
    let batch = with_state(|s| {
        let pass = s.pass.as_mut()?;
        if !ctx.select_db(pass.db) {
            end_pass(s);
            return None;
        }
        let mut names: Vec<Box<[u8]>> = Vec::new();
        let mut collect = |name: &Arg, key: &Key| collect(&mut names, name, key);
        let mut more = true;
        for _ in 0..SCAN_STEPS_PER_TICK {
            if !pass.cursor.step(ctx, &mut collect) {
                more = false;
                break;
            }
        }
        let db = pass.db;
        if !more {
            pass.db += 1;
            pass.cursor.restart();
            if pass.db >= pass.databases {
                end_pass(s);
            }
        }
        Some((db, names))
    })
    .flatten();
    if let Some((db, names)) = batch {
        if ctx.select_db(db) {
            let now = crate::server::clock::now();
            for name in names {
                realign(ctx, &name, now);
            }
        }
    }
    let again = with_state(|s| {
        s.armed = s.pass.is_some();
        s.armed
    });
    if again == Some(true) {
        arm_tick(1);
    }
}

/// Collects the names of lock keys (the scan's key handle is read-only).
fn collect(names: &mut Vec<Box<[u8]>>, name: &Arg, key: &Key) {
    if value::at(key).is_some() || value::group_at(key).is_some() {
        names.push(name.bytes().into());
    }
}

/// Sets one lock key's TTL at the wall clock of now, or deletes it when
/// its lease has ended.
fn realign(ctx: Ctx, name: &[u8], now: Now) {
    let held = HeldString::from_bytes(name);
    if !held.is_valid() {
        return;
    }
    let key_name = Arg::of(&held);
    let key = ctx.open_key(key_name, KeyMode::Write);
    if let Some(group) = value::group_at(&key) {
        return realign_group(ctx, &key, key_name, group, now);
    }
    let Some(mut lock) = value::at(&key) else { return };
    let (left, taken) = lease::judge(lock.lease(), now, || key.deadline_ms());
    if let Some(taken) = taken {
        lock.set_lease(taken);
    }
    match left {
        Left::Ended => {
            if value::delete(&key) {
                propagate::expired(ctx, key_name);
            }
        }
        Left::Ms(_) => {
            let lease = lock.lease().remirrored(now);
            if lease.mirror.saturating_sub(lock.lease().mirror).saturating_abs() > crate::server::clock::STEP_MS
                && key.expire_at(lease.mirror)
            {
                lock.set_lease(lease);
                propagate::remirrored(ctx, key_name, lease.mirror);
            }
        }
        Left::Forever => {}
    }
}

/// A group's key: deleted once no holder's lease runs, else its TTL set
/// at the latest holder's deadline read now (a TTL at or beyond every
/// holder's caps nobody, here or on a replica).
fn realign_group(ctx: Ctx, key: &Key, key_name: &Arg, group: &mut crate::keys::group::Group, now: Now) {
    group.judge(now, key.deadline_ms());
    let Some(latest) = group.latest_end(now) else {
        if value::delete(key) {
            propagate::expired(ctx, key_name);
        }
        return;
    };
    let deadline = crate::core::lease::wall_deadline(latest, now);
    let mirror = group.key_mirror();
    if deadline != lease::NO_TTL
        && deadline.saturating_sub(mirror).saturating_abs() > crate::server::clock::STEP_MS
        && key.expire_at(deadline)
    {
        group.mirrored(deadline);
        propagate::remirrored(ctx, key_name, deadline);
    }
}
