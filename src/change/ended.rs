//! Holds whose lease ended without a release, announced as `expire`
//! where a change finds them, before it changes the key (see
//! `propagate::event`): a group's holders the core prunes when the group
//! is next touched, and an exclusive lock a grant overwrites before Redis
//! expired its key. A key Redis deletes is announced by the data type's
//! unlink callback (`keys::rescue`). Only for a key `redislock.notify`
//! matches: any other key pays one test.

use crate::api::{Arg, Ctx, Key};
use crate::core::lease::Now;
use crate::keys::grants::{slot, Look, Slot};
use crate::replication::propagate::{self, Event};

/// Announces and drops the holders of the group at `key` whose lease has
/// ended by `now` while others still hold it, as the core would drop them
/// in the change that follows (`Holding::expire`): each is announced
/// once. A group nobody holds any more stays as it is (a group is never
/// stored empty): a grant over it (`expire_overwritten`) or Redis's
/// expiry of its key announces its holders.
pub(super) fn expire_ended_holders(ctx: Ctx, key: &Key, key_name: &Arg, now: Now) {
    if !propagate::watched(ctx, key_name) {
        return;
    }
    if let Slot::Shared(group) = slot(key, now, Look::Held) {
        for holder in group.holding.holders.iter().filter(|h| h.end <= now.mono) {
            propagate::event(ctx, key_name, Event::Expire, &holder.owner, holder.token, b"");
        }
        group.holding.expire(now.mono);
    }
}

/// Announces the holds of the lock at `key`, whose leases have all ended
/// (the caller found the key free), before a grant overwrites it: its
/// key's TTL had not passed yet, so no unlink will tell.
pub(super) fn expire_overwritten(ctx: Ctx, key: &Key, key_name: &Arg, now: Now) {
    if !propagate::watched(ctx, key_name) {
        return;
    }
    match slot(key, now, Look::AsStored) {
        Slot::Held(lock) => propagate::event(ctx, key_name, Event::Expire, &lock.owner(), lock.token(), b""),
        Slot::Shared(group) => {
            for holder in &group.holding.holders {
                propagate::event(ctx, key_name, Event::Expire, &holder.owner, holder.token, b"");
            }
        }
        Slot::Free | Slot::PlainString(_) | Slot::WrongType => {}
    }
}
