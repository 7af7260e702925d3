//! Grants on an open key: what the key holds now (`Slot`), and the grant
//! a request gets there. The rules are the core's (`core::grant`); this
//! reads the key, asks the core, and carries out its decision: the value
//! stored, the key's TTL, the propagation. Shared by LOCK.ACQUIRE and the
//! waiters' handoff, so a grant happens in one place whoever asks.

use std::ffi::{CStr, CString};

use crate::api::{Arg, Ctx, Key, KeyKind};
use crate::config;
use crate::core::grant::{self, Holder, Kind, Mode, OneHolder, Outcome, Refusal, Request};
use crate::core::lease::{self, Lease, Now};
use crate::core::token::Token;
use crate::fencing::COUNTER;
use crate::group::{self, Group};
use crate::propagate;
use crate::rescue;
use crate::value::{self, Exclusive, ExclusiveRef};

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

/// Whether a grant to `owner` may succeed now (free, already theirs, their
/// plain string, or room beside shared holders); a key of another type
/// counts as free, its waiters get WRONGTYPE from the grant.
pub fn may_grant(key: &Key, owner: &[u8], req: &Request) -> bool {
    let now = crate::clock::now();
    match slot(key, now, Look::Held) {
        Slot::Held(lock) => lock.is_held_by(owner),
        Slot::Shared(group) => {
            let room = match group.holding.kind {
                Kind::ReadWrite => req.mode == Mode::Shared && req.limit.is_none(),
                Kind::Semaphore { limit } => req.limit == Some(limit) && group.live(now).count() < limit as usize,
            };
            room || group.live(now).any(|h| *h.owner == *owner)
        }
        Slot::PlainString(value) => value == owner,
        Slot::Free | Slot::WrongType => true,
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

/// Puts back a lock Redis removed while its lease ran (see `rescue`), so
/// the command finds it where it was. One load when nothing is kept: the
/// clocks are read only when something is.
pub fn restore_rescued(ctx: Ctx, key: &Key, key_name: &Arg) {
    if rescue::any() {
        rescue::restore(ctx, key, key_name, ctx.selected_db(), crate::clock::now());
    }
}

/// The result of trying to give a lock to an owner.
pub enum Attempt {
    Granted(Token, Grant),
    Held,
    WrongType,
    Failed(&'static CStr),
    /// The request does not fit the key (its kind, an upgrade beside
    /// other holders): an error naming why.
    Refused(CString),
}

pub use crate::core::grant::Grant;

/// Gives the lock at `key` to `owner` if `req` fits what holds it now,
/// and propagates the grant. `waiting_ahead`: others wait in the key's
/// line before this request, which then gets no new hold (a holder's own
/// re-grant, downgrade or upgrade is not new). Shared by ACQUIRE and by
/// the waiters' handoff.
pub fn try_acquire(ctx: Ctx, key: &Key, key_name: &Arg, owner_arg: &Arg, req: &Request, waiting_ahead: bool, by: By) -> Attempt {
    let owner = owner_arg.bytes();
    let now = crate::clock::now();
    let slot = slot(key, now, Look::Held);
    if req.mode == Mode::Shared || matches!(slot, Slot::Shared(_)) {
        return try_shared(ctx, key, key_name, owner_arg, req, waiting_ahead, slot, now);
    }
    // The rules are the core's (`grant::acquire_exclusive`, checked against
    // `grant::Holding`); what follows only reads the key and carries out the
    // decision.
    let mut held_lock = None;
    let mut converted = None;
    let held = match slot {
        Slot::Shared(_) => return Attempt::Held,
        Slot::WrongType => return Attempt::WrongType,
        Slot::Held(lock) => {
            let view = OneHolder::Held { mine: lock.is_held_by(owner), token: lock.token() };
            held_lock = Some(lock);
            view
        }
        // Another owner's plain-string lock: held (it has no token).
        Slot::PlainString(value) if value != owner => OneHolder::Held { mine: false, token: 0 },
        // The owner of a plain-string lock converts it and keeps its
        // remaining lease, up to the longest lease a lock may have: a new
        // grant, which the line does not hold back (it is already held).
        Slot::PlainString(_) => {
            let longest = now.wall.saturating_add(config::max_ttl());
            let deadline = key.deadline_ms().map_or_else(|| now.wall.saturating_add(req.ttl_ms), |at| at.min(longest));
            converted = Some(Lease::until(Some(deadline), now));
            OneHolder::Free
        }
        Slot::Free => OneHolder::Free,
    };
    let ahead = waiting_ahead && converted.is_none();
    let token = match grant::acquire_exclusive(held, req.fence, ahead, |min| COUNTER.issue(min)) {
        Outcome::Held => return Attempt::Held,
        Outcome::Refused(_) => return Attempt::Failed(c"ERR fencing token space exhausted"),
        Outcome::Granted(token, Grant::Regrant) => {
            // Re-grant to the same owner: a retry after a lost reply, with
            // a new token only when FENCE asked for more.
            let Some(mut lock) = held_lock else {
                return Attempt::Failed(c"ERR could not store the lock");
            };
            if token != lock.token() {
                lock.set_token(token);
            }
            let lease = Lease::starting(now, req.ttl_ms);
            if !key.expire_at(lease.mirror) {
                return Attempt::Failed(c"ERR could not set the lease");
            }
            lock.set_lease(lease);
            propagate::granted(ctx, key_name, owner_arg, token, lease.mirror);
            return Attempt::Granted(token, Grant::Regrant);
        }
        Outcome::Granted(token, _) => token,
    };
    let lease = converted.unwrap_or_else(|| Lease::starting(now, req.ttl_ms));
    if !Exclusive::new(owner, token, lease, now.mono).is_some_and(|lock| value::store(key, lock)) {
        return Attempt::Failed(c"ERR could not store the lock");
    }
    if !key.expire_at(lease.mirror) {
        value::delete(key);
        return Attempt::Failed(c"ERR could not set the lease");
    }
    match by {
        By::Command => propagate::granted_by_command(ctx, key_name, owner_arg, token, lease.mirror),
        By::Handoff => propagate::granted(ctx, key_name, owner_arg, token, lease.mirror),
    }
    Attempt::Granted(token, Grant::New)
}

/// Who asks `try_acquire`: the `LOCK.ACQUIRE` being executed, or the
/// handoff to a waiter (in another command's context, or a timer's).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum By {
    Command,
    Handoff,
}

const TOKENS_EXHAUSTED: &CStr = c"ERR fencing token space exhausted";

/// The error for a request that does not fit the key's kind.
fn wrong_kind(what: &str) -> Attempt {
    Attempt::Refused(CString::new(format!("ERR wrong lock kind: the key is {what}")).unwrap_or_default())
}

/// A shared request, or any request on a key held shared: the grant core
/// decides; this stores, sets the key's TTL and propagates.
#[allow(clippy::too_many_arguments)]
fn try_shared(
    ctx: Ctx,
    key: &Key,
    key_name: &Arg,
    owner_arg: &Arg,
    req: &Request,
    waiting_ahead: bool,
    slot: Slot<'_>,
    now: Now,
) -> Attempt {
    let owner = owner_arg.bytes();
    match slot {
        Slot::WrongType => Attempt::WrongType,
        Slot::PlainString(_) => wrong_kind("a plain-string lock (exclusive only)"),
        Slot::Held(_) if req.limit.is_some() => wrong_kind(&Kind::ReadWrite.to_string()),
        Slot::Held(lock) if !lock.is_held_by(owner) => Attempt::Held,
        Slot::Free if waiting_ahead => Attempt::Held,
        // A downgrade, or a new group: either way one holder, a new token.
        Slot::Held(_) | Slot::Free => {
            // A downgrade continues the exclusive hold.
            let since = match &slot {
                Slot::Held(lock) => lock.since(),
                _ => now.mono,
            };
            let downgrade = !matches!(slot, Slot::Free);
            let Some(token) = COUNTER.issue(req.fence) else {
                return Attempt::Failed(TOKENS_EXHAUSTED);
            };
            let kind = if downgrade { Kind::ReadWrite } else { Kind::of(req.limit) };
            let mut fresh = Group::new(kind);
            fresh.holding.holders.push(Holder { owner: owner.into(), token, end: now.mono.saturating_add(req.ttl_ms), since });
            let deadline = fresh.key_deadline(now);
            fresh.mirrored(deadline);
            if !value::store_group(key, fresh) {
                return Attempt::Failed(c"ERR could not store the lock");
            }
            if deadline != lease::NO_TTL && !key.expire_at(deadline) {
                value::delete(key);
                return Attempt::Failed(c"ERR could not set the lease");
            }
            let limit = if downgrade { 0 } else { req.limit.unwrap_or(0) };
            let holder_deadline = now.wall.saturating_add(req.ttl_ms);
            propagate::shared_granted(ctx, key_name, owner, token, holder_deadline, limit, deadline);
            Attempt::Granted(token, if downgrade { Grant::Downgrade } else { Grant::New })
        }
        Slot::Shared(group) => {
            let owner_box: group::Owner = owner.into();
            match group.holding.acquire(&owner_box, req, now.mono, waiting_ahead, |min| COUNTER.issue(min)) {
                Outcome::Held => Attempt::Held,
                Outcome::Refused(Refusal::WrongKind(kind)) => wrong_kind(&kind.to_string()),
                Outcome::Refused(Refusal::UpgradeWithOthers) => Attempt::Refused(
                    c"ERR upgrade refused: other holders share the lock; release the shared hold and ask again, exclusive".into(),
                ),
                Outcome::Refused(Refusal::TokensExhausted) => Attempt::Failed(TOKENS_EXHAUSTED),
                Outcome::Granted(token, Grant::Upgrade) => {
                    let lease = Lease::starting(now, req.ttl_ms);
                    // An upgrade continues the shared hold.
                    let since = group.holding.holder(owner).map_or(now.mono, |h| h.since);
                    if !Exclusive::new(owner, token, lease, since).is_some_and(|lock| value::store(key, lock)) {
                        return Attempt::Failed(c"ERR could not store the lock");
                    }
                    if !key.expire_at(lease.mirror) {
                        value::delete(key);
                        return Attempt::Failed(c"ERR could not set the lease");
                    }
                    propagate::granted(ctx, key_name, owner_arg, token, lease.mirror);
                    Attempt::Granted(token, Grant::Upgrade)
                }
                Outcome::Granted(token, how) => {
                    let deadline = group.key_deadline(now);
                    if deadline != group.key_mirror() && deadline != lease::NO_TTL && !key.expire_at(deadline) {
                        if how == Grant::New {
                            group.holding.remove(owner);
                        }
                        return Attempt::Failed(c"ERR could not set the lease");
                    }
                    group.mirrored(deadline);
                    let holder_deadline = now.wall.saturating_add(req.ttl_ms);
                    propagate::shared_granted(ctx, key_name, owner, token, holder_deadline, group.limit(), deadline);
                    Attempt::Granted(token, how)
                }
            }
        }
    }
}
