//! An extension (`LOCK.EXTEND`): the owner's running hold takes a new
//! lease from now; the token does not change.

use std::ffi::CStr;

use super::rescued::restore_rescued;
use super::{replays, Line, NO_LEASE};
use crate::api::{Arg, Ctx, Key};
use crate::core::grant;
use crate::core::lease::{Lease, Now};
use crate::keys::grants::{one_holder, slot, Look, Slot};
use crate::keys::group::Group;
use crate::replication::propagate::{self, SharedTerms};
use crate::server::{bindings, stats};

/// What an extension came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Extended {
    /// The lease now ends at `end` (monotonic ms); the first lease at the
    /// key ends at `first_end` (the holder's own for an exclusive lock, the
    /// earliest holder's for a group): when its line may move next, known
    /// here so that nobody reads the key again for it. `None` for a
    /// plain-string lock, whose lease is its TTL.
    Done {
        end: i64,
        first_end: Option<i64>,
    },
    /// Not the holder; or a session-bound hold, from another connection
    /// than its own.
    Refused,
    WrongType,
    /// The key's TTL could not be set.
    Failed(&'static CStr),
}

impl Extended {
    /// What the extension asks of the key's line: its waiters are served
    /// when the new lease ends.
    pub fn line(self) -> Line {
        match self {
            Extended::Done { .. } => Line::LeaseChanged,
            Extended::Refused | Extended::WrongType | Extended::Failed(_) => Line::Untouched,
        }
    }
}

/// Gives `owner`'s hold at `key` (open for writing, named `key_name`) a
/// lease of `ttl_ms` from now.
pub fn extend(ctx: Ctx, key: &Key, key_name: &Arg, owner: &[u8], ttl_ms: i64) -> Extended {
    restore_rescued(ctx, key, key_name);
    let now = crate::server::clock::now();
    // Members that stopped extending end as the others extend: announced
    // here, not dropped unheard by the extension's own prune.
    super::ended::expire_ended_holders(ctx, key, key_name, now);
    let lease = Lease::starting(now, ttl_ms);
    let slot = slot(key, now, Look::Held);
    let Some(view) = one_holder(&slot, owner) else {
        return Extended::WrongType;
    };
    let first_end = match slot {
        Slot::Shared(group) => return extend_shared(ctx, key, key_name, owner, ttl_ms, group, now),
        _ if !grant::extend_exclusive(view) => {
            stats::EXTEND_REFUSED.bump();
            return Extended::Refused;
        }
        _ if bindings::any() && !may_extend_here(ctx, key_name, owner, lease.end) => {
            stats::EXTEND_REFUSED.bump();
            return Extended::Refused;
        }
        Slot::Held(mut lock) => {
            if !key.expire_at(lease.mirror) {
                return Extended::Failed(NO_LEASE);
            }
            lock.set_lease(lease);
            Some(lease.end)
        }
        // A plain-string lock's lease is its TTL alone.
        _ => {
            if !key.expire_at(lease.mirror) {
                return Extended::Failed(NO_LEASE);
            }
            None
        }
    };
    propagate::extended(ctx, key_name, lease.mirror);
    stats::EXTEND_DONE.bump();
    Extended::Done { end: lease.end, first_end }
}

/// Whether this connection may extend `owner`'s hold to `end`
/// (monotonic): a hold bound to a connection only from there, and one
/// whose connection closed from nowhere until its lease ends, so that a
/// reconnected holder cannot revive a lease cut to its lock-delay (see
/// `server::bindings`); a bound hold's binding then lasts as long as its new lease.
/// The master's stream and the AOF replay what was decided. Out of line:
/// EXTEND's hot path only tests whether any hold is bound.
#[cold]
#[inline(never)]
fn may_extend_here(ctx: Ctx, key_name: &Arg, owner: &[u8], end: i64) -> bool {
    replays(ctx) || bindings::extending(ctx.selected_db(), key_name.bytes(), owner, ctx.client_id(), end)
}

/// One shared holder's new lease (`Holding::extend`). The key's TTL grows
/// with it, never shrinks (see `group`); the extension travels as that
/// holder's grant.
fn extend_shared(ctx: Ctx, key: &Key, key_name: &Arg, owner: &[u8], ttl_ms: i64, group: &mut Group, now: Now) -> Extended {
    // The holder's lease as `Holding::extend` sets it.
    let lease = Lease::starting(now, ttl_ms);
    let end = lease.end;
    if bindings::any() && !may_extend_here(ctx, key_name, owner, end) {
        stats::EXTEND_REFUSED.bump();
        return Extended::Refused;
    }
    let permits = group.holding.holder(owner).map_or(1, |h| h.permits);
    let Some(token) = group.holding.extend(owner, ttl_ms, now.mono) else {
        stats::EXTEND_REFUSED.bump();
        return Extended::Refused;
    };
    let deadline = group.key_deadline(now);
    if deadline != group.key_mirror() && deadline != crate::core::lease::NO_TTL && !key.expire_at(deadline) {
        return Extended::Failed(NO_LEASE);
    }
    group.mirrored(deadline);
    let terms = SharedTerms { limit: group.limit(), key_deadline_ms: deadline, permits };
    // The holder's value travels with it: the replayed grant sets exactly
    // what it holds.
    propagate::shared_granted(ctx, key_name, owner, token, lease.mirror, terms, group.holding.value_of(owner));
    stats::EXTEND_DONE.bump();
    Extended::Done { end, first_end: Some(group.earliest_end(now).unwrap_or(end)) }
}
