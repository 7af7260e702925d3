//! A proclamation (`LOCK.PROCLAIM`): the holder of an exclusive lock
//! stores a new value with its hold; token, lease and start stay. It is
//! the value an election's observers read as the leader's.

use super::replays;
use super::rescued::restore_rescued;
use crate::api::{Arg, Ctx, Key};
use crate::core::grant;
use crate::keys::grants::{one_holder, slot, Look, Slot};
use crate::keys::value;
use crate::replication::propagate;
use crate::server::bindings;

/// What a proclamation came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proclaimed {
    Done,
    /// Not the holder (or the lease ended); or a session-bound hold, from
    /// another connection than its own or after its connection closed.
    Refused,
    /// The key holds a lock held shared, which has no single value.
    Shared,
    WrongType,
    /// The new value could not be stored.
    Failed,
}

/// Stores `text` (empty: none) with `owner`'s exclusive hold at `key`
/// (open for writing, named `key_name`).
pub fn proclaim(ctx: Ctx, key: &Key, key_name: &Arg, owner: &[u8], text: &[u8]) -> Proclaimed {
    restore_rescued(ctx, key, key_name);
    let now = crate::server::clock::now();
    let slot = slot(key, now, Look::Held);
    let Some(view) = one_holder(&slot, owner) else {
        return Proclaimed::WrongType;
    };
    let lock = match slot {
        Slot::Shared(_) => return Proclaimed::Shared,
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
    propagate::proclaimed(ctx, key_name, owner, token, key.deadline_ms().unwrap_or(0), text);
    Proclaimed::Done
}
