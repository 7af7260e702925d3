//! A release by its owner (`LOCK.RELEASE`, also as the master's stream or
//! the AOF replays it): the hold ends, the key goes with its last holder,
//! and the oldest waiters get the lock in the same command.

use super::binding::unbind;
use super::rescued::restore_rescued;
use super::{delete, line_of, replays, serve_freed};
use crate::api::{Arg, Ctx, Key};
use crate::core::grant;
use crate::core::lease::Now;
use crate::keys::grants::{one_holder, slot, Look, Slot};
use crate::keys::group::Group;
use crate::replication::propagate;
use crate::server::stats::{self, HoldKind};

/// What a release came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Released {
    /// The hold ended.
    Done,
    /// `owner` holds nothing there (another owner does, or nobody).
    NotHeld,
    WrongType,
}

/// Ends `owner`'s hold at `key` (open for writing, named `key_name`).
pub fn release(ctx: Ctx, key: &Key, key_name: &Arg, owner: &[u8]) -> Released {
    let now = crate::server::clock::now();
    let look = if replays(ctx) { Look::AsStored } else { Look::Held };
    if look != Look::AsStored {
        restore_rescued(ctx, key, key_name);
    }
    if let Slot::Shared(group) = slot(key, now, look) {
        return release_shared(ctx, key, key_name, owner, group, now, look);
    }
    let held = slot(key, now, look);
    let since = match &held {
        Slot::Held(lock) => Some(lock.since()),
        _ => None,
    };
    match one_holder(&held, owner).map(grant::release_exclusive) {
        None => return Released::WrongType,
        Some(false) => {
            stats::RELEASE_REFUSED.bump();
            return Released::NotHeld;
        }
        Some(true) => {}
    }
    stats::RELEASE_DONE.bump();
    // How long it was held (a replica replaying its master's release saw
    // the hold start only when it applied it).
    if let Some(since) = since.filter(|_| look != Look::AsStored) {
        stats::holds(HoldKind::Exclusive).record(now.mono.saturating_sub(since));
    }
    unbind(ctx, key_name, owner);
    let queued = line_of(ctx, key_name);
    delete(ctx, key, queued);
    propagate::released(ctx, key_name);
    serve_freed(ctx, key, key_name, queued);
    Released::Done
}

/// Ends one shared holder's hold (`Holding::release`, or `remove` as
/// stored). The key goes with the last holder, and that travels as DEL:
/// holders whose lease ended here may still be stored on a replica, which
/// must drop the key all the same.
fn release_shared(ctx: Ctx, key: &Key, key_name: &Arg, owner: &[u8], group: &mut Group, now: Now, look: Look) -> Released {
    let since = group.holding.holder(owner).filter(|h| h.end > now.mono).map(|h| h.since);
    let released = match look {
        Look::AsStored => group.holding.remove(owner),
        _ => group.holding.release(owner, now.mono),
    };
    if !released {
        stats::RELEASE_REFUSED.bump();
        return Released::NotHeld;
    }
    stats::RELEASE_DONE.bump();
    if let Some(since) = since.filter(|_| look != Look::AsStored) {
        stats::holds(HoldKind::of_group(group.holding.kind)).record(now.mono.saturating_sub(since));
    }
    unbind(ctx, key_name, owner);
    let queued = line_of(ctx, key_name);
    if group.holding.holders.is_empty() {
        delete(ctx, key, queued);
        propagate::released_last(ctx, key_name);
    } else {
        propagate::released(ctx, key_name);
    }
    serve_freed(ctx, key, key_name, queued);
    Released::Done
}
