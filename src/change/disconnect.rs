//! Ending the hold of a connection that closed (see `server::bindings`
//! and the timer of `crate::session::disconnect`), as a client's command
//! could: only a hold still held by its owner. Without a lock-delay it is
//! released, replicated as LOCK.RELEASE, and its line is to be served at
//! once; with one its lease is cut to the disconnect plus the delay,
//! replicated like any lease change, and the line is served when it ends.

use super::release::{end_of, Ending};
use super::Line;
use crate::api::{Arg, Ctx, Key};
use crate::core::lease::Now;
use crate::keys::grants::{slot, Look, Slot};
use crate::keys::value;
use crate::replication::propagate::{self, Event, SharedTerms};
use crate::server::bindings;

/// Ends the closed connection's hold `ending` at `key` (open for writing,
/// named `key_name`, a lock Redis removed put back by the caller), tells
/// `bindings` how that went, and answers what that asks of the key's
/// line, which the caller serves.
pub fn end_closed(ctx: Ctx, key: &Key, key_name: &Arg, ending: &bindings::Ending, now: Now) -> Line {
    let owner = &ending.hold.2;
    let ended = end_hold(ctx, key, key_name, owner, ending.end, now);
    // Told before the line is served: the next holder may be this owner
    // on a new connection, whose binding must stand.
    let left = match ended {
        Ended::Released | Ended::NotHeld => bindings::Ended::Gone,
        Ended::CutShort | Ended::Kept => bindings::Ended::Cut,
    };
    bindings::closed_hold_ended(ending, left);
    match ended {
        Ended::Released => Line::Freed,
        Ended::CutShort => Line::LeaseChanged,
        Ended::NotHeld | Ended::Kept => Line::Untouched,
    }
}

enum Ended {
    Released,
    CutShort,
    /// Still held, its lease not cut: it ends by then anyway (or the key's
    /// TTL could not be set).
    Kept,
    /// Not held by `owner` any more.
    NotHeld,
}

/// Ends `owner`'s hold at `key` at `end` (monotonic): now, or by cutting
/// its lease short.
fn end_hold(ctx: Ctx, key: &Key, key_name: &Arg, owner: &[u8], end: i64, now: Now) -> Ended {
    if end <= now.mono {
        // Released as its owner's release would be (the same decision),
        // but only a hold of this module's type: a plain-string lock is
        // never a connection's hold.
        super::ended::expire_ended_holders(ctx, key, key_name, now);
        let ending = end_of(key, owner, now, Look::Held);
        ending.record(now);
        if !matches!(ending, Ending::PlainString | Ending::NotHeld | Ending::WrongType) {
            propagate::event(ctx, key_name, Event::Session, owner, ending.token(), b"");
        }
        match ending {
            Ending::Exclusive { .. } => {
                value::delete(key);
                propagate::released_by_server(ctx, key_name, owner);
            }
            // The key goes with the last holder as DEL, as a command's
            // release of it: holders whose lease ended here may still be
            // stored on a replica.
            Ending::Shared { last: true, .. } => {
                value::delete(key);
                propagate::released_last(ctx, key_name);
            }
            Ending::Shared { last: false, .. } => propagate::released_by_server(ctx, key_name, owner),
            Ending::PlainString | Ending::NotHeld | Ending::WrongType => return Ended::NotHeld,
        }
        return Ended::Released;
    }
    match slot(key, now, Look::Held) {
        Slot::Held(mut lock) if lock.is_held_by(owner) => {
            let Some(lease) = lock.lease().cut_to(end, now) else { return Ended::Kept };
            if !key.expire_at(lease.mirror) {
                return Ended::Kept;
            }
            lock.set_lease(lease);
            propagate::cut_short(ctx, key_name, lease.mirror);
            if propagate::watched(ctx, key_name) {
                propagate::event(ctx, key_name, Event::Cut, owner, lock.token(), lease.mirror.to_string().as_bytes());
            }
            Ended::CutShort
        }
        Slot::Shared(g) => {
            let Some(token) = g.holding.cut_short(owner, end, now.mono) else {
                let held = g.holding.holder(owner).is_some_and(|h| h.end > now.mono);
                return if held { Ended::Kept } else { Ended::NotHeld };
            };
            // The key's TTL never shrinks for one holder (see `group`).
            let deadline = crate::core::lease::wall_deadline(end, now);
            let permits = g.holding.holder(owner).map_or(1, |h| h.permits);
            let terms = SharedTerms { limit: g.limit(), key_deadline_ms: g.key_mirror(), permits };
            propagate::shared_granted(ctx, key_name, owner, token, deadline, terms, g.holding.value_of(owner));
            if propagate::watched(ctx, key_name) {
                propagate::event(ctx, key_name, Event::Cut, owner, token, deadline.to_string().as_bytes());
            }
            Ended::CutShort
        }
        _ => Ended::NotHeld,
    }
}
