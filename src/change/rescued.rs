//! Locks Redis removed while their lease ran (`rescue` keeps them), put
//! back: before a command looks at their key (`restore_rescued`), and
//! right after a clock step removed them (`restore_stepped`, a timer).
//! Above `rescue`, which only keeps them: they are put back through
//! `apply::restore`.

use std::ffi::c_int;

use super::apply;
use crate::api::{Arg, Ctx, HeldString, Key, KeyMode};
use crate::core::lease::Now;
use crate::keys::rescue;
use crate::replication::writable;

/// Puts back a lock Redis removed while its lease ran (see `rescue`), so
/// the command finds it where it was. One load when nothing is kept: the
/// clocks are read only when something is.
pub fn restore_rescued(ctx: Ctx, key: &Key, key_name: &Arg) {
    if rescue::any() {
        restore(ctx, key, key_name, ctx.selected_db(), crate::server::clock::now());
    }
}

/// Puts back the lock kept for `key` (open for writing, in database `db`)
/// if its lease still runs and the key is empty, as the grant it was
/// (`apply::restore`); one that cannot be written stays kept.
fn restore(ctx: Ctx, key: &Key, key_name: &Arg, db: c_int, now: Now) {
    let Some(kept) = rescue::take(key, key_name.bytes(), db, now) else { return };
    if !apply::restore(ctx, key, key_name, &kept.holders, (kept.shared, kept.resized), &kept.value, now) {
        rescue::keep_again(db, key_name.bytes(), kept);
    }
}

/// A clock step removed locks whose lease still runs (`rescue` said so
/// when it kept one): they are put back by a timer right away, replicated
/// as the grants they were.
pub fn restore_stepped() {
    crate::api::after(0, on_restore);
}

/// Puts back the locks a clock step removed, as soon as the server lets
/// this module write.
fn on_restore(ctx: Ctx) {
    if let Some(refusal) = writable::refusal(ctx) {
        if refusal == writable::Refusal::Replica {
            rescue::restore_disarmed();
        } else {
            crate::api::after(refusal.retry_ms(), on_restore);
        }
        return;
    }
    let names = rescue::stepped();
    let now = crate::server::clock::now();
    for name in names {
        let (db, key) = &name;
        let held = HeldString::from_bytes(key);
        if !held.is_valid() || !ctx.select_db(*db) {
            continue;
        }
        if writable::placement(ctx, Arg::of(&held)) == writable::Placement::Elsewhere {
            rescue::forget(&name);
            continue;
        }
        let open = ctx.open_key(Arg::of(&held), KeyMode::Write);
        restore(ctx, &open, Arg::of(&held), *db, now);
    }
}
