//! A resize (`LOCK.RESIZE`): a held semaphore's limit changes, and the
//! group is marked resized so that requests with any LIMIT are served
//! under the new one while the key lives (`Holding::resize`). The holders
//! keep their permits. The resize travels as itself, `LOCK.RESIZE key
//! limit` (deterministic: a replica or the AOF sets the same limit on the
//! same group, and grants nothing there), before the grants the caller
//! then makes to the key's line, which travel as their own LOCK.APPLY.

use crate::api::{Ctx, Key};
use crate::args::RESIZE;
use crate::core::lease::Now;
use crate::keys::grants::{slot, Look, Slot};
use crate::replication::propagate;

use super::replays;

/// What a resize came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resized {
    /// The semaphore's limit is the new one.
    Done,
    /// Nobody holds the key: there is no semaphore to resize.
    Free,
    /// A lock without LIMIT (exclusive, or held SHARED).
    Lock,
    /// A plain-string lock.
    PlainString,
    WrongType,
}

/// A semaphore a strict request (`SEMAPHORE n LARGEST m`) created at
/// `key` keeps `largest` as its largest limit (resized when above its
/// limit). It travels, after the grant's LOCK.APPLY, as `LOCK.RESIZE key
/// largest` then `LOCK.RESIZE key limit` (a resize keeps the largest), only
/// when the largest is above the limit; a replica and the AOF grant
/// nothing on a resize.
pub fn created_with_largest(ctx: Ctx, key: &Key, key_name: &crate::api::Arg, largest: u32, now: Now) {
    let Slot::Shared(group) = slot(key, now, Look::Held) else { return };
    let limit = group.limit();
    if largest <= limit {
        return;
    }
    group.holding.created_with_largest(largest);
    propagate::resize_restored(ctx, key_name, RESIZE, largest);
    propagate::resize_restored(ctx, key_name, RESIZE, limit);
}

/// Sets the limit of the semaphore at `key` (open for writing, named
/// `key_name`) to `limit` at `now`. The master's stream and the AOF
/// resize what is stored.
pub fn resize(ctx: Ctx, key: &Key, key_name: &crate::api::Arg, limit: u32, now: Now) -> Resized {
    let look = if replays(ctx) { Look::AsStored } else { Look::Held };
    super::ended::expire_ended_holders(ctx, key, key_name, now);
    match slot(key, now, look) {
        Slot::WrongType => Resized::WrongType,
        Slot::Free => Resized::Free,
        Slot::Held(_) => Resized::Lock,
        Slot::PlainString(_) => Resized::PlainString,
        Slot::Shared(group) => {
            if !group.holding.resize(limit) {
                return Resized::Lock;
            }
            propagate::resized(ctx, key_name, RESIZE, limit);
            Resized::Done
        }
    }
}
