//! A proclamation (`LOCK.PROCLAIM`): a holder stores a new value with its
//! hold; token, lease and start stay. An exclusive holder's is the value
//! an election's observers read as the leader's; a shared holder's is its
//! own, beside the others' (a group member's address).

use super::replays;
use super::rescued::restore_rescued;
use crate::api::{Arg, Ctx, Key};
use crate::core::grant;
use crate::core::lease::{self, Now};
use crate::keys::grants::{one_holder, slot, Look, Slot};
use crate::keys::group::Group;
use crate::keys::value;
use crate::replication::propagate::{self, SharedTerms};
use crate::server::bindings;

/// What a proclamation came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proclaimed {
    Done,
    /// Not the holder (or the lease ended); or a session-bound hold, from
    /// another connection than its own or after its connection closed.
    Refused,
    WrongType,
    /// The new value could not be stored.
    Failed,
}

/// Stores `text` (empty: none) with `owner`'s hold at `key` (open for
/// writing, named `key_name`), exclusive or shared.
pub fn proclaim(ctx: Ctx, key: &Key, key_name: &Arg, owner: &[u8], text: &[u8]) -> Proclaimed {
    restore_rescued(ctx, key, key_name);
    let now = crate::server::clock::now();
    let slot = slot(key, now, Look::Held);
    let Some(view) = one_holder(&slot, owner) else {
        return Proclaimed::WrongType;
    };
    let lock = match slot {
        Slot::Shared(group) => return proclaim_shared(ctx, key_name, group, owner, text, now),
        _ if !grant::proclaim_exclusive(view) => return Proclaimed::Refused,
        Slot::Held(lock) => lock,
        // A plain-string lock (`SET key owner NX PX`) has nowhere to keep a
        // value: ACQUIRE converts it first.
        _ => return Proclaimed::Refused,
    };
    if bindings::any() && !replays(ctx) && !bindings::may_act(ctx.selected_db(), key_name.bytes(), owner, ctx.client_id()) {
        return Proclaimed::Refused;
    }
    if lock.value() == text {
        // Nothing changes: nothing travels.
        return Proclaimed::Done;
    }
    let token = lock.token();
    let Some(revalued) = lock.revalued(text) else {
        return Proclaimed::Failed;
    };
    if !value::replace(key, revalued) {
        return Proclaimed::Failed;
    }
    propagate::proclaimed(ctx, key_name, owner, token, key.deadline_ms().unwrap_or(0), None, text);
    Proclaimed::Done
}

/// `proclaim` on a key held shared: the holder's own value replaced (the
/// core's `proclaim`), travelling as its whole grant, as an exclusive
/// holder's does.
fn proclaim_shared(ctx: Ctx, key_name: &Arg, group: &mut Group, owner: &[u8], text: &[u8], now: Now) -> Proclaimed {
    let Some(holder) = group.holding.holder(owner).filter(|h| h.end > now.mono) else {
        return Proclaimed::Refused;
    };
    if bindings::any() && !replays(ctx) && !bindings::may_act(ctx.selected_db(), key_name.bytes(), owner, ctx.client_id()) {
        return Proclaimed::Refused;
    }
    if holder.owner.value() == text {
        return Proclaimed::Done;
    }
    let (end, permits) = (holder.end, holder.permits);
    let Some(token) = group.holding.proclaim(owner, text, now.mono) else {
        return Proclaimed::Refused;
    };
    let terms = SharedTerms { limit: group.limit(), key_deadline_ms: group.key_mirror(), permits };
    propagate::proclaimed(ctx, key_name, owner, token, lease::wall_deadline(end, now), Some(terms), text);
    Proclaimed::Done
}
