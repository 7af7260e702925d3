//! What an open key holds now (`Slot`), as the core's rules see it
//! (`one_holder`), and what follows from that without changing it:
//! whether a grant may succeed, the lease left, when a hold ends. Every
//! change is made by `change`.

use std::ffi::CStr;

use crate::api::{Key, KeyKind};
use crate::core::grant::{self, OneHolder, Outcome, Request};
use crate::core::lease::{self, Lease, Now};
use crate::keys::group::Group;
use crate::keys::value::{self, Exclusive, ExclusiveRef};

pub const WRONGTYPE: &CStr = c"WRONGTYPE Operation against a key holding the wrong kind of value";

/// What an open key holds.
pub enum Slot<'a> {
    Free,
    Held(ExclusiveRef<'a>),
    /// Held shared (a read-write lock's readers, a semaphore's holders).
    Shared(&'a mut Group),
    /// A plain-string lock: the value is its owner.
    PlainString(&'a [u8]),
    WrongType,
}

/// How a command looks at a lock's lease.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Look {
    /// Held or not (`lease::held`): no TTL read while the lease runs.
    Held,
    /// The exact lease left, a TTL someone set included (`lease::judge`).
    Exact,
    /// As stored: commands from the master or the AOF replay what the
    /// master decided.
    AsStored,
}

/// What `key` holds at `now`. A lock whose lease has ended is free, key
/// or no key (after a backward step of the wall clock the key outlives
/// the lease).
pub fn slot(key: &Key, now: Now, look: Look) -> Slot<'_> {
    match key.kind() {
        KeyKind::Empty => Slot::Free,
        KeyKind::Module(t) if t == value::registered_type() && Group::is_tagged(key.module_value()) => {
            // SAFETY: the value belongs to our type and is tagged: a `Group`.
            match unsafe { Group::borrow(key.module_value()) } {
                Some(group) if look == Look::AsStored => {
                    if group.holding.holders.is_empty() {
                        Slot::Free
                    } else {
                        Slot::Shared(group)
                    }
                }
                Some(group) => {
                    group.judge(now, key.deadline_ms());
                    if group.is_held(now) {
                        Slot::Shared(group)
                    } else {
                        Slot::Free
                    }
                }
                None => Slot::WrongType,
            }
        }
        KeyKind::Module(t) if t == value::registered_type() => {
            // SAFETY: the value belongs to our type, so it is an `Exclusive` or a
            // tagged `Group` (`borrow` answers `None` for a group).
            match unsafe { Exclusive::borrow(key.module_value()) } {
                Some(lock) if look == Look::AsStored => Slot::Held(lock),
                Some(mut lock) => {
                    let ttl = || key.deadline_ms();
                    let (left, taken) = match look {
                        Look::Held => lease::held(lock.lease(), now, ttl),
                        _ => lease::judge(lock.lease(), now, ttl),
                    };
                    if let Some(taken) = taken {
                        lock.set_lease(taken);
                    }
                    if left.is_running() {
                        Slot::Held(lock)
                    } else {
                        Slot::Free
                    }
                }
                None => Slot::WrongType,
            }
        }
        KeyKind::String => match key.string_value() {
            Some(owner) => Slot::PlainString(owner),
            None => Slot::WrongType,
        },
        _ => Slot::WrongType,
    }
}

/// A key that is free or held exclusively, as the core's one-holder
/// rules see it for `owner`; `None` for another type. (A key held shared
/// is the core's `Lock`; it reads as held by another here.)
pub fn one_holder(slot: &Slot<'_>, owner: &[u8]) -> Option<OneHolder> {
    match slot {
        Slot::WrongType => None,
        Slot::Held(lock) => Some(OneHolder::Held { mine: lock.is_held_by(owner), token: lock.token() }),
        Slot::PlainString(value) => Some(OneHolder::Held { mine: *value == owner, token: 0 }),
        Slot::Shared(_) => Some(OneHolder::Held { mine: false, token: 0 }),
        Slot::Free => Some(OneHolder::Free),
    }
}

/// Whether a grant to `owner` may succeed now, as the core admits the
/// head of a line (`grant::acquire_exclusive` on a key free or held
/// exclusively, `Holding::may_admit` on a key held shared): free, already
/// theirs, or room beside shared holders. A key of another type counts as
/// free, its waiters get WRONGTYPE from the grant.
pub fn may_grant(key: &Key, owner: &[u8], req: &Request) -> bool {
    let now = crate::server::clock::now();
    let slot = slot(key, now, Look::Held);
    match (&slot, one_holder(&slot, owner)) {
        (Slot::Shared(group), _) => group.holding.may_admit(owner, req, now.mono),
        // Asked without a token counter: nothing is issued.
        (_, Some(held)) => grant::acquire_exclusive(held, req.fence, false, Some) != Outcome::Held,
        (_, None) => true,
    }
}

/// The limit in force and the largest limit of the semaphore held at
/// `key`; `None` when it holds none.
pub fn semaphore_terms(key: &Key) -> Option<(u32, u32)> {
    let Slot::Shared(group) = slot(key, crate::server::clock::now(), Look::Held) else { return None };
    match group.holding.kind {
        grant::Kind::Semaphore { limit, largest, .. } => Some((limit, largest)),
        _ => None,
    }
}

/// What is left of the lease of the lock at `key` (ended when none).
pub fn lease_left(key: &Key, now: Now) -> lease::Left {
    match slot(key, now, Look::Exact) {
        Slot::Held(lock) => lock.lease().left(now),
        // The line may move when the first shared lease ends.
        Slot::Shared(group) => match group.earliest_end(now) {
            Some(end) => Lease { end, mirror: lease::NO_TTL }.left(now),
            None => lease::Left::Ended,
        },
        Slot::PlainString(_) => match key.deadline_ms() {
            Some(at) => lease::Lease::until(Some(at), now).left(now),
            None => lease::Left::Forever,
        },
        Slot::Free | Slot::WrongType => lease::Left::Ended,
    }
}

/// When `owner`'s hold at `key` ends (monotonic ms; `lease::NO_END` for
/// none), if `owner` holds the lock at `now`.
pub fn hold_end(key: &Key, owner: &[u8], now: Now) -> Option<i64> {
    match slot(key, now, Look::Exact) {
        Slot::Held(lock) if lock.is_held_by(owner) => Some(lock.lease().end),
        Slot::Shared(group) => group.live(now).find(|h| *h.owner == *owner).map(|h| h.end),
        Slot::PlainString(value) if value == owner => Some(Lease::until(key.deadline_ms(), now).end),
        _ => None,
    }
}
