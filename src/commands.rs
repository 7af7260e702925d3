//! LOCK.ACQUIRE, LOCK.RELEASE, LOCK.EXTEND, LOCK.INFO, LOCK.WAITERS and
//! LOCK.TOP.
//!
//! Each is one key lookup, an owner check and, only when something
//! changes, the write and its propagation. A key holding a plain string is
//! a lock held by the owner equal to its value (the `SET key owner NX PX`
//! pattern), so services can move to these commands one at a time.

use std::ffi::c_int;

use crate::api::{ctx_flags, Arg, Ctx, Key, KeyMode};
use crate::core::grant;
use crate::core::lease::{Lease, Now};
use crate::core::token::Token;
use crate::grants::{one_holder, restore_rescued, slot, try_acquire, Attempt, By, Grant, Look, Slot, WRONGTYPE};
use crate::group::Group;
use crate::stats::{self, Cause, HoldKind};
use crate::{args, config, fencing, propagate, quarantine, rescue, session, value, waiters, writable};

/// Whether the command replays the master's stream or the AOF.
fn replays(ctx: Ctx) -> bool {
    ctx.has_flags(ctx_flags::REPLICATED | ctx_flags::LOADING)
}

/// A replica answers a client's lock write as the server answers writes
/// on a read-only replica (see `writable::refuses_client_write`).
macro_rules! refuse_on_replica {
    ($ctx:expr) => {
        if writable::refuses_client_write($ctx) {
            return $ctx.reply_error(writable::READONLY);
        }
    };
}

macro_rules! parse_or_reply {
    ($ctx:expr, $parsed:expr) => {
        match $parsed {
            Ok(req) => req,
            Err(e) => return $ctx.reply_error(&e.message()),
        }
    };
}

/// `LOCK.ACQUIRE key owner ttl-ms [SHARED [LIMIT n]] [FENCE min-token] [WAIT timeout-ms]`
/// → token, or nil (held incompatibly, or others wait first; or the wait
/// timed out).
pub fn acquire(ctx: Ctx, argv: &[Arg]) -> c_int {
    refuse_on_replica!(ctx);
    let req = parse_or_reply!(ctx, args::parse_acquire(argv, config::max_ttl(), config::max_owner_len()));
    if let Some(left) = quarantine::remaining_ms() {
        stats::QUARANTINE_REFUSED.bump();
        return ctx.reply_error_text(&format!("TRYAGAIN restart quarantine: {left} ms left"));
    }
    if req.request.fence != 0 {
        if let Err(ceiling) = fencing::check_lead(req.request.fence) {
            return ctx.reply_error_text(&fencing::lead_error("FENCE token", ceiling));
        }
    }
    if req.request.session.is_some() && ctx.has_flags(ctx_flags::LUA) {
        return ctx.reply_error(NO_SESSION_IN_SCRIPTS);
    }
    let key = ctx.open_key(req.key, KeyMode::Write);
    restore_rescued(ctx, &key, req.key);
    if let Some(db) = waiters::queued_in(ctx, req.key.bytes()) {
        // Whoever waits comes first, even if the lease just ran out.
        waiters::serve(ctx, &key, db, req.key, Cause::Expiry);
    }
    let waiting_ahead = waiters::count_in(ctx, req.key.bytes()) > 0;
    match try_acquire(ctx, &key, req.key, req.owner, &req.request, waiting_ahead, By::Command) {
        Attempt::Granted(token, how) => {
            // Its waiters, if any, are served when the new lease ends.
            waiters::lease_changed(ctx, &key, req.key);
            if req.request.session.is_some() || session::any() {
                let binding = req.request.session.map(|delay| (ctx.client_id(), delay));
                let end = crate::clock::mono_ms().saturating_add(req.request.ttl_ms);
                session::granted(ctx.selected_db(), req.key.bytes(), req.owner.bytes(), binding, end);
            }
            match how {
                Grant::Regrant => stats::ACQUIRE_REGRANT.bump(),
                Grant::New | Grant::Upgrade => stats::ACQUIRE_NEW.bump(),
                Grant::Downgrade => {
                    stats::ACQUIRE_NEW.bump();
                    // Readers waiting behind the writer may join it now.
                    if let Some(db) = waiters::queued_in(ctx, req.key.bytes()) {
                        waiters::serve(ctx, &key, db, req.key, Cause::Release);
                    }
                }
            }
            ctx.reply_integer(token)
        }
        Attempt::WrongType => ctx.reply_error(WRONGTYPE),
        Attempt::Failed(msg) => ctx.reply_error(msg),
        Attempt::Refused(msg) => ctx.reply_error(&msg),
        Attempt::Held => match req.wait {
            Some(timeout) if may_block(ctx) => waiters::enqueue(ctx, &key, req.key, req.owner, req.request, timeout),
            _ => {
                stats::ACQUIRE_REFUSED.bump();
                ctx.reply_null()
            }
        },
    }
}

/// A script runs as a client of its own that never disconnects: a hold
/// bound to it would end with nothing.
const NO_SESSION_IN_SCRIPTS: &std::ffi::CStr =
    c"ERR SESSION is not allowed in scripts: the hold would be bound to the script, not to a connection; call LOCK.ACQUIRE directly";

/// Inside MULTI/EXEC, a script or another context that cannot block, WAIT
/// answers as if it were not given.
fn may_block(ctx: Ctx) -> bool {
    let no_blocking = ctx_flags::MULTI | ctx_flags::LUA | ctx_flags::DENY_BLOCKING;
    !ctx.has_flags(no_blocking)
}

/// `LOCK.RELEASE key owner` → 1 if released, 0 otherwise. The oldest
/// waiter, if any, gets the lock in the same command.
pub fn release(ctx: Ctx, argv: &[Arg]) -> c_int {
    refuse_on_replica!(ctx);
    let req = parse_or_reply!(ctx, args::parse_release(argv));
    let key = ctx.open_key(req.key, KeyMode::Write);
    let now = crate::clock::now();
    let look = if replays(ctx) { Look::AsStored } else { Look::Held };
    if look != Look::AsStored {
        restore_rescued(ctx, &key, req.key);
    }
    if let Slot::Shared(group) = slot(&key, now, look) {
        return release_shared(ctx, &key, req.key, req.owner, group, now, look);
    }
    let held = slot(&key, now, look);
    let since = match &held {
        Slot::Held(lock) => Some(lock.since()),
        _ => None,
    };
    match one_holder(&held, req.owner).map(grant::release_exclusive) {
        None => return ctx.reply_error(WRONGTYPE),
        Some(false) => {
            stats::RELEASE_REFUSED.bump();
            return ctx.reply_integer(0);
        }
        Some(true) => {}
    }
    stats::RELEASE_DONE.bump();
    // How long it was held (a replica replaying its master's release saw
    // the hold start only when it applied it).
    if let Some(since) = since.filter(|_| look != Look::AsStored) {
        stats::holds(HoldKind::Exclusive).record(now.mono.saturating_sub(since));
    }
    unbind(ctx, req.key, req.owner);
    value::delete(&key);
    propagate::released(ctx, req.key);
    serve_after_release(ctx, &key, req.key);
    ctx.reply_integer(1)
}

/// A released hold is bound to no connection any more.
fn unbind(ctx: Ctx, key_name: &Arg, owner: &[u8]) {
    if session::any() {
        session::released(ctx.selected_db(), key_name.bytes(), owner);
    }
}

fn serve_after_release(ctx: Ctx, key: &Key, key_name: &Arg) {
    if let Some(db) = waiters::queued_in(ctx, key_name.bytes()) {
        // RELEASE frees memory and runs under OOM; the handoff is a grant,
        // which ACQUIRE (deny-oom) could not make now.
        if ctx.has_flags(ctx_flags::OOM) {
            waiters::defer(db, key_name.bytes(), writable::Refusal::OutOfMemory);
        } else {
            waiters::serve(ctx, key, db, key_name, Cause::Release);
        }
    }
}

/// Ends one shared holder's hold. The key goes with the last holder, and
/// that travels as DEL: holders whose lease ended here may still be
/// stored on a replica, which must drop the key all the same.
fn release_shared(ctx: Ctx, key: &Key, key_name: &Arg, owner: &[u8], group: &mut Group, now: Now, look: Look) -> c_int {
    let since = group.holding.holder(owner).filter(|h| h.end > now.mono).map(|h| h.since);
    let released = match look {
        Look::AsStored => group.holding.remove(owner),
        _ => group.holding.release(owner, now.mono),
    };
    if !released {
        stats::RELEASE_REFUSED.bump();
        return ctx.reply_integer(0);
    }
    stats::RELEASE_DONE.bump();
    if let Some(since) = since.filter(|_| look != Look::AsStored) {
        stats::holds(HoldKind::of_group(group.holding.kind)).record(now.mono.saturating_sub(since));
    }
    unbind(ctx, key_name, owner);
    if group.holding.holders.is_empty() {
        value::delete(key);
        propagate::released_last(ctx, key_name);
    } else {
        propagate::released(ctx, key_name);
    }
    serve_after_release(ctx, key, key_name);
    ctx.reply_integer(1)
}

/// `LOCK.EXTEND key owner ttl-ms` → 1 if the lease now ends ttl-ms from
/// now, 0 otherwise (not the holder; a session-bound hold, from another
/// connection than its own). The token does not change.
pub fn extend(ctx: Ctx, argv: &[Arg]) -> c_int {
    refuse_on_replica!(ctx);
    let req = parse_or_reply!(ctx, args::parse_extend(argv, config::max_ttl()));
    let key = ctx.open_key(req.key, KeyMode::Write);
    restore_rescued(ctx, &key, req.key);
    let now = crate::clock::now();
    let lease = Lease::starting(now, req.ttl_ms);
    let slot = slot(&key, now, Look::Held);
    let Some(view) = one_holder(&slot, req.owner) else {
        return ctx.reply_error(WRONGTYPE);
    };
    match slot {
        Slot::Shared(group) => return extend_shared(ctx, &key, req.key, req.owner, req.ttl_ms, group, now),
        _ if !grant::extend_exclusive(view) => {
            stats::EXTEND_REFUSED.bump();
            return ctx.reply_integer(0);
        }
        _ if session::any() && !may_extend_here(ctx, req.key, req.owner, lease.end) => {
            stats::EXTEND_REFUSED.bump();
            return ctx.reply_integer(0);
        }
        Slot::Held(mut lock) => {
            if !key.expire_at(lease.mirror) {
                return ctx.reply_error(c"ERR could not set the lease");
            }
            lock.set_lease(lease);
        }
        // A plain-string lock's lease is its TTL alone.
        _ => {
            if !key.expire_at(lease.mirror) {
                return ctx.reply_error(c"ERR could not set the lease");
            }
        }
    }
    propagate::extended(ctx, req.key, lease.mirror);
    waiters::lease_changed(ctx, &key, req.key);
    stats::EXTEND_DONE.bump();
    ctx.reply_integer(1)
}

/// Whether this connection may extend `owner`'s hold to `end`
/// (monotonic): a hold bound to a connection only from there, and one
/// whose connection closed from nowhere until its lease ends, so that a
/// reconnected holder cannot revive a lease cut to its lock-delay (see
/// `session`); a bound hold's binding then lasts as long as its new lease.
/// The master's stream and the AOF replay what was decided. Out of line:
/// EXTEND's hot path only tests whether any hold is bound.
#[cold]
#[inline(never)]
fn may_extend_here(ctx: Ctx, key_name: &Arg, owner: &[u8], end: i64) -> bool {
    replays(ctx) || session::extending(ctx.selected_db(), key_name.bytes(), owner, ctx.client_id(), end)
}

/// One shared holder's new lease. The key's TTL grows with it, never
/// shrinks (see `group`); the extension travels as that holder's grant.
fn extend_shared(ctx: Ctx, key: &Key, key_name: &Arg, owner: &[u8], ttl_ms: i64, group: &mut Group, now: Now) -> c_int {
    if session::any() && !may_extend_here(ctx, key_name, owner, now.mono.saturating_add(ttl_ms)) {
        stats::EXTEND_REFUSED.bump();
        return ctx.reply_integer(0);
    }
    let Some(token) = group.holding.extend(owner, ttl_ms, now.mono) else {
        stats::EXTEND_REFUSED.bump();
        return ctx.reply_integer(0);
    };
    let deadline = group.key_deadline(now);
    if deadline != group.key_mirror() && deadline != crate::core::lease::NO_TTL && !key.expire_at(deadline) {
        return ctx.reply_error(c"ERR could not set the lease");
    }
    group.mirrored(deadline);
    propagate::shared_granted(ctx, key_name, owner, token, now.wall.saturating_add(ttl_ms), group.limit(), deadline);
    waiters::lease_changed(ctx, key, key_name);
    stats::EXTEND_DONE.bump();
    ctx.reply_integer(1)
}

/// `LOCK.WAITERS key [COUNT n]` → the key's line, oldest first: per waiter
/// its position (1 is the head), owner, mode (`exclusive` or `shared`),
/// limit (a semaphore's, else nil), how long it has waited and what is
/// left of its WAIT (-1: no limit), in ms.
pub fn waiters_of(ctx: Ctx, argv: &[Arg]) -> c_int {
    let (key_name, count) = parse_or_reply!(ctx, args::parse_waiters(argv));
    let line = waiters::list(ctx.selected_db(), key_name.bytes(), count.unwrap_or(usize::MAX));
    ctx.reply_array(line.len() as std::ffi::c_long);
    for (i, w) in line.iter().enumerate() {
        ctx.reply_map(6);
        ctx.reply_bulk(b"position");
        ctx.reply_integer(i64::try_from(i).unwrap_or(i64::MAX).saturating_add(1));
        ctx.reply_bulk(b"owner");
        ctx.reply_bulk(&w.owner);
        ctx.reply_bulk(b"mode");
        ctx.reply_bulk(if w.request.mode == grant::Mode::Shared { b"shared" } else { b"exclusive" });
        ctx.reply_bulk(b"limit");
        match w.request.limit {
            Some(limit) => ctx.reply_integer(i64::from(limit)),
            None => ctx.reply_null(),
        };
        ctx.reply_bulk(b"waited_ms");
        ctx.reply_integer(w.waited_ms);
        ctx.reply_bulk(b"wait_left_ms");
        ctx.reply_integer(w.left_ms.unwrap_or(-1));
    }
    crate::api::OK
}

/// `LOCK.TOP [COUNT n]` → the most contended locks of the database, most
/// waiters first (then the longest wait): per lock its key, how many wait,
/// how long the oldest has waited, its mode (nil when free), how many hold
/// it and how long the longest of them has (nil when unknown or free).
pub fn top(ctx: Ctx, argv: &[Arg]) -> c_int {
    let count = parse_or_reply!(ctx, args::parse_top(argv));
    let busiest = waiters::busiest(ctx.selected_db(), count);
    let now = crate::clock::now();
    ctx.reply_array(busiest.len() as std::ffi::c_long);
    for c in &busiest {
        let name = crate::api::HeldString::from_bytes(&c.key);
        let (mode, holders, longest) = if name.is_valid() {
            let key = ctx.open_key(Arg::of(&name), KeyMode::Read);
            match slot(&key, now, Look::Exact) {
                Slot::Held(lock) => (Some(&b"exclusive"[..]), 1, Some(now.mono.saturating_sub(lock.since()))),
                Slot::Shared(group) => {
                    let longest = group.live(now).map(|h| now.mono.saturating_sub(h.since)).max();
                    (Some(&b"shared"[..]), group.live(now).count(), longest)
                }
                Slot::PlainString(_) => (Some(&b"exclusive"[..]), 1, None),
                Slot::Free | Slot::WrongType => (None, 0, None),
            }
        } else {
            (None, 0, None)
        };
        ctx.reply_map(6);
        ctx.reply_bulk(b"key");
        ctx.reply_bulk(&c.key);
        ctx.reply_bulk(b"waiters");
        ctx.reply_integer(i64::try_from(c.waiters).unwrap_or(i64::MAX));
        ctx.reply_bulk(b"oldest_wait_ms");
        ctx.reply_integer(c.oldest_wait_ms);
        ctx.reply_bulk(b"mode");
        match mode {
            Some(m) => ctx.reply_bulk(m),
            None => ctx.reply_null(),
        };
        ctx.reply_bulk(b"holders");
        ctx.reply_integer(i64::try_from(holders).unwrap_or(i64::MAX));
        ctx.reply_bulk(b"longest_hold_ms");
        match longest {
            Some(ms) => ctx.reply_integer(ms),
            None => ctx.reply_null(),
        };
    }
    crate::api::OK
}

/// One holder as LOCK.INFO lists it.
struct HolderRow<'a> {
    owner: &'a [u8],
    /// `None` for a plain-string lock.
    token: Option<Token>,
    pttl: i64,
    /// How long it has held the lock; `None` when unknown (a plain-string
    /// lock).
    held_ms: Option<i64>,
    /// Bound to its connection (`SESSION`).
    session: bool,
}

impl<'a> HolderRow<'a> {
    fn of(owner: &'a [u8], token: Token, pttl: i64, held_ms: i64, session: bool) -> HolderRow<'a> {
        HolderRow { owner, token: Some(token), pttl, held_ms: Some(held_ms), session }
    }
}

/// `LOCK.INFO key` → nil, or owner, token (nil for a plain-string lock or
/// a lock held shared), remaining lease (pttl, the longest for shared
/// holders), the number of waiters, the mode, the limit (a semaphore's)
/// and every holder as [owner, token, pttl, held-ms, session].
pub fn info(ctx: Ctx, argv: &[Arg]) -> c_int {
    let key_name = parse_or_reply!(ctx, args::parse_info(argv));
    let key = ctx.open_key(key_name, KeyMode::Read);
    let waiting = || waiters::count_in(ctx, key_name.bytes());
    let now = crate::clock::now();
    let db = ctx.selected_db();
    let bound = |owner: &[u8]| session::is_bound(db, key_name.bytes(), owner);
    match slot(&key, now, Look::Exact) {
        Slot::WrongType => ctx.reply_error(WRONGTYPE),
        Slot::Free => {
            let kept = rescue::any().then(|| {
                rescue::peek(db, key_name.bytes(), now, |peek| {
                    let holders: Vec<_> = peek
                        .holders
                        .iter()
                        .map(|(o, t, left, since)| HolderRow::of(o, *t, left.pttl(), now.mono - since, bound(o)))
                        .collect();
                    reply_info(ctx, peek.shared, &holders, waiting())
                })
            });
            kept.flatten().unwrap_or_else(|| ctx.reply_null())
        }
        Slot::Held(lock) => {
            let (owner, since) = (lock.owner(), lock.since());
            let holder = [HolderRow::of(owner, lock.token(), lock.lease().left(now).pttl(), now.mono - since, bound(owner))];
            reply_info(ctx, None, &holder, waiting())
        }
        Slot::Shared(group) => {
            let holders: Vec<_> =
                group.live(now).map(|h| HolderRow::of(&h.owner, h.token, h.end - now.mono, now.mono - h.since, bound(&h.owner))).collect();
            reply_info(ctx, Some(group.limit()), &holders, waiting())
        }
        Slot::PlainString(value) => {
            let holder = HolderRow { owner: value, token: None, pttl: key.pttl(), held_ms: None, session: false };
            reply_info(ctx, None, &[holder], waiting())
        }
    }
}

/// `shared`: `None` for an exclusive lock, else a group's limit (0: none).
fn reply_info(ctx: Ctx, shared: Option<u32>, holders: &[HolderRow<'_>], waiting: usize) -> c_int {
    let reply_option = |n: Option<i64>| match n {
        Some(n) => ctx.reply_integer(n),
        None => ctx.reply_null(),
    };
    ctx.reply_map(7);
    let exclusive = if shared.is_none() { holders.first() } else { None };
    ctx.reply_bulk(b"owner");
    match exclusive {
        Some(h) => ctx.reply_bulk(h.owner),
        None => ctx.reply_null(),
    };
    ctx.reply_bulk(b"token");
    reply_option(exclusive.and_then(|h| h.token));
    ctx.reply_bulk(b"pttl");
    let longest = holders.iter().map(|h| h.pttl).max().unwrap_or(0);
    ctx.reply_integer(if holders.iter().any(|h| h.pttl < 0) { -1 } else { longest });
    ctx.reply_bulk(b"waiters");
    ctx.reply_integer(i64::try_from(waiting).unwrap_or(i64::MAX));
    ctx.reply_bulk(b"mode");
    ctx.reply_bulk(if shared.is_some() { b"shared" } else { b"exclusive" });
    ctx.reply_bulk(b"limit");
    match shared {
        Some(limit) if limit > 0 => ctx.reply_integer(i64::from(limit)),
        _ => ctx.reply_null(),
    };
    ctx.reply_bulk(b"holders");
    ctx.reply_array(holders.len() as std::ffi::c_long);
    for h in holders {
        ctx.reply_array(5);
        ctx.reply_bulk(h.owner);
        reply_option(h.token);
        ctx.reply_integer(h.pttl);
        reply_option(h.held_ms);
        ctx.reply_integer(i64::from(h.session));
    }
    crate::api::OK
}
