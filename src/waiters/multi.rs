//! Several keys at once (`LOCK.MACQUIRE`, `MRELEASE`, `MEXTEND`), with
//! what each asks of its members' lines: the core decides the set all or
//! nothing (`core::multi::acquire_set`, over what each member holds), then
//! every member is granted as an ordinary lock with the set's one token
//! (`change::set::grant_set`), each
//! leaving as its own LOCK.APPLY: Redis wraps what one command propagates
//! in MULTI/EXEC, so a replica and the AOF see the set whole. A released
//! or extended member is an ordinary release or extension.
//!
//! Waiting (`WAIT`): a set held back takes its place in every member's
//! line at once (`enqueue_set`); the waiters hand it the set through the
//! same grant (`grant_set`) once it is first in all of them (see
//! `docs/design-multi.md`).
//!
//! A set's semaphore member (`SEMAPHORE n`: the last key, one permit of a
//! semaphore of n) is a limit record, not a lock waited for: its kind
//! refuses a set of another limit, but it stands in no set's line and
//! waiting for it holds no set back. Every set that takes it also holds
//! at least one of its locks exclusively, so its permits run out only when
//! a member was released alone; a set held back by that waits in its
//! locks' lines (and is looked at again when one of them moves) or until
//! its WAIT ends.
//!
//! Keys are opened here, one member at a time where a member's line may be
//! served: serving one member's line may grant a waiting set, which writes
//! its other members through handles of its own, and a handle opened
//! earlier would still point at the value it replaced.

use super::changes::{extend, release_unserved, serve_freed};
use super::*;
use crate::change::set::SetAttempt;
use crate::change::{self, Extended, Released};
use crate::core::grant::Grant;
use crate::keys::grants::{slot, Look, Slot};

/// A set's grant to `owner` over the keys named `names` (the last one a
/// semaphore's permit when `set` says `SEMAPHORE`): every member or none.
/// Whoever waits in a member's line is served first (a lease that just ran
/// out goes to them), and a lock anyone waits for holds the set back.
/// `Attempt::Held` leaves the set to the caller.
pub fn acquire_set(ctx: Ctx, names: &[Arg], owner: &Arg, set: &SetRequest) -> Attempt {
    for name in names {
        let key = ctx.open_key(name, KeyMode::Write);
        change::restore_rescued(ctx, &key, name);
        if let Some(db) = queued_in(ctx, name.bytes()) {
            serve(ctx, &key, db, name, Cause::Expiry);
        }
    }
    let keys = open_all(ctx, names);
    let members: Vec<(&Key, &Arg)> = keys.iter().zip(names).collect();
    let waiting_ahead = |name: &Arg| count_in(ctx, name.bytes()) > 0;
    let attempt = grant_set(ctx, &members, owner, set, waiting_ahead, set.request.session.map(|_| ctx.client_id()), false);
    if let Attempt::Granted(granted) = &attempt {
        for (key, name) in &members {
            lease_changed(ctx, key, name);
        }
        match granted.how {
            Grant::Regrant => stats::ACQUIRE_REGRANT.bump(),
            _ => stats::ACQUIRE_NEW.bump(),
        }
    }
    attempt
}

/// Every key named, open for writing.
fn open_all(ctx: Ctx, names: &[Arg]) -> Vec<Key> {
    names.iter().map(|name| ctx.open_key(name, KeyMode::Write)).collect()
}

/// Whether a key named is of another type than a lock (the whole command
/// then changes nothing).
fn any_wrong_type(ctx: Ctx, names: &[Arg]) -> bool {
    let now = crate::server::clock::now();
    names.iter().any(|name| matches!(slot(&ctx.open_key(name, KeyMode::Write), now, Look::AsStored), Slot::WrongType))
}

/// `LOCK.MRELEASE`: how many members `owner` held and no longer holds;
/// `None` when a member is of another type (nothing is released then).
pub fn release_set(ctx: Ctx, names: &[Arg], owner: &[u8]) -> Option<i64> {
    if any_wrong_type(ctx, names) {
        return None;
    }
    // Every member first, then their lines: a set waiting for one of them
    // finds all this one frees free (a semaphore member's permit with its
    // locks).
    let mut released = 0usize;
    let mut freed = Vec::new();
    for name in names {
        let (done, queued) = release_unserved(ctx, &ctx.open_key(name, KeyMode::Write), name, owner, change::release_member);
        if done == Released::Done {
            released = released.saturating_add(1);
        }
        if let Some(db) = queued {
            freed.push((name, db));
        }
    }
    for (name, db) in freed {
        // Through a handle opened now: serving an earlier member's line
        // may have granted a set that wrote this one.
        serve_freed(ctx, &ctx.open_key(name, KeyMode::Write), name, Some(db));
    }
    Some(i64::try_from(released).unwrap_or(i64::MAX))
}

/// What `LOCK.MEXTEND` came to.
pub enum ExtendedSet {
    /// How many members took the new lease.
    Done(i64),
    WrongType,
    Failed(&'static std::ffi::CStr),
}

/// `LOCK.MEXTEND`: every member `owner` holds takes a lease of `ttl_ms`
/// from now, as LOCK.EXTEND gives it.
pub fn extend_set(ctx: Ctx, names: &[Arg], owner: &[u8], ttl_ms: i64) -> ExtendedSet {
    if any_wrong_type(ctx, names) {
        return ExtendedSet::WrongType;
    }
    let mut extended = 0;
    for name in names {
        match extend(ctx, &ctx.open_key(name, KeyMode::Write), name, owner, ttl_ms) {
            Extended::Done { .. } => extended += 1,
            Extended::Refused | Extended::WrongType => {}
            Extended::Failed(msg) => return ExtendedSet::Failed(msg),
        }
    }
    ExtendedSet::Done(extended)
}

/// A set's grant (`change::set::grant_set`, which see), all or nothing:
/// the members taken before one failed are given back here, each an
/// ordinary release whose line is served at once.
pub(super) fn grant_set(
    ctx: Ctx,
    members: &[(&Key, &Arg)],
    owner: &Arg,
    set: &SetRequest,
    waiting_ahead: impl Fn(&Arg) -> bool,
    client: Option<u64>,
    handoff: bool,
) -> Attempt {
    let SetAttempt { attempt, give_back } = change::set::grant_set(ctx, members, owner, set, waiting_ahead, client, handoff);
    for (key, key_name) in give_back.into_iter().filter_map(|i| members.get(i)) {
        let (_, queued) = release_unserved(ctx, key, key_name, owner.bytes(), change::release_member);
        serve_freed(ctx, key, key_name, queued);
    }
    attempt
}
