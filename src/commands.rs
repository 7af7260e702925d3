//! LOCK.ACQUIRE, LOCK.RELEASE, LOCK.EXTEND and LOCK.INFO.
//!
//! Each is one key lookup, an owner check and, only when something
//! changes, the write and its propagation. A key holding a plain string is
//! a lock held by the owner equal to its value (the `SET key owner NX PX`
//! pattern), so services can move to these commands one at a time.

use std::ffi::c_int;

use redis_module::raw;

use crate::api::{Arg, Ctx, Key, KeyMode};
use crate::core::grant;
use crate::core::lease::{Lease, Now};
use crate::core::token::Token;
use crate::grants::{one_holder, restore_rescued, slot, try_acquire, Attempt, By, Grant, Look, Slot, WRONGTYPE};
use crate::group::Group;
use crate::stats::{self, Cause};
use crate::{args, config, fencing, propagate, quarantine, rescue, value, waiters, writable};

/// Whether the command replays the master's stream or the AOF.
fn replays(ctx: Ctx) -> bool {
    ctx.has_flags(raw::REDISMODULE_CTX_FLAGS_REPLICATED | raw::REDISMODULE_CTX_FLAGS_LOADING)
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

/// Inside MULTI/EXEC, a script or another context that cannot block, WAIT
/// answers as if it were not given.
fn may_block(ctx: Ctx) -> bool {
    let no_blocking = raw::REDISMODULE_CTX_FLAGS_MULTI | raw::REDISMODULE_CTX_FLAGS_LUA | raw::REDISMODULE_CTX_FLAGS_DENY_BLOCKING;
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
    match one_holder(&slot(&key, now, look), req.owner).map(grant::release_exclusive) {
        None => return ctx.reply_error(WRONGTYPE),
        Some(false) => {
            stats::RELEASE_REFUSED.bump();
            return ctx.reply_integer(0);
        }
        Some(true) => {}
    }
    stats::RELEASE_DONE.bump();
    value::delete(&key);
    propagate::released(ctx, req.key);
    serve_after_release(ctx, &key, req.key);
    ctx.reply_integer(1)
}

fn serve_after_release(ctx: Ctx, key: &Key, key_name: &Arg) {
    if let Some(db) = waiters::queued_in(ctx, key_name.bytes()) {
        // RELEASE frees memory and runs under OOM; the handoff is a grant,
        // which ACQUIRE (deny-oom) could not make now.
        if ctx.has_flags(raw::REDISMODULE_CTX_FLAGS_OOM) {
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
    let released = match look {
        Look::AsStored => group.holding.remove(owner),
        _ => group.holding.release(owner, now.mono),
    };
    if !released {
        stats::RELEASE_REFUSED.bump();
        return ctx.reply_integer(0);
    }
    stats::RELEASE_DONE.bump();
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
/// now, 0 otherwise. The token does not change.
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

/// One shared holder's new lease. The key's TTL grows with it, never
/// shrinks (see `group`); the extension travels as that holder's grant.
fn extend_shared(ctx: Ctx, key: &Key, key_name: &Arg, owner: &[u8], ttl_ms: i64, group: &mut Group, now: Now) -> c_int {
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

/// `LOCK.INFO key` → nil, or owner, token (nil for a plain-string lock or
/// a lock held shared), remaining lease (pttl, the longest for shared
/// holders), the number of waiters, the mode, the limit (a semaphore's)
/// and every holder as [owner, token, pttl].
pub fn info(ctx: Ctx, argv: &[Arg]) -> c_int {
    let key_name = parse_or_reply!(ctx, args::parse_info(argv));
    let key = ctx.open_key(key_name, KeyMode::Read);
    let waiting = || waiters::count_in(ctx, key_name.bytes());
    let now = crate::clock::now();
    match slot(&key, now, Look::Exact) {
        Slot::WrongType => ctx.reply_error(WRONGTYPE),
        Slot::Free => {
            let kept = rescue::any().then(|| {
                rescue::peek(ctx.selected_db(), key_name.bytes(), now, |peek| {
                    let holders: Vec<_> = peek.holders.iter().map(|(o, t, left)| (*o, Some(*t), left.pttl())).collect();
                    match peek.shared {
                        None => reply_info(ctx, None, &holders, waiting()),
                        Some(limit) => reply_info(ctx, Some(limit), &holders, waiting()),
                    }
                })
            });
            kept.flatten().unwrap_or_else(|| ctx.reply_null())
        }
        Slot::Held(lock) => {
            let holder = [(lock.owner(), Some(lock.token()), lock.lease().left(now).pttl())];
            reply_info(ctx, None, &holder, waiting())
        }
        Slot::Shared(group) => {
            let holders: Vec<_> = group.live(now).map(|h| (&h.owner[..], Some(h.token), h.end - now.mono)).collect();
            reply_info(ctx, Some(group.limit()), &holders, waiting())
        }
        Slot::PlainString(value) => reply_info(ctx, None, &[(value, None, key.pttl())], waiting()),
    }
}

/// `shared`: `None` for an exclusive lock, else a group's limit (0: none).
fn reply_info(ctx: Ctx, shared: Option<u32>, holders: &[(&[u8], Option<Token>, i64)], waiting: usize) -> c_int {
    let reply_token = |token: Option<Token>| match token {
        Some(token) => ctx.reply_integer(token),
        None => ctx.reply_null(),
    };
    ctx.reply_map(7);
    let exclusive = if shared.is_none() { holders.first() } else { None };
    ctx.reply_bulk(b"owner");
    match exclusive {
        Some((owner, _, _)) => ctx.reply_bulk(owner),
        None => ctx.reply_null(),
    };
    ctx.reply_bulk(b"token");
    reply_token(exclusive.and_then(|(_, token, _)| *token));
    ctx.reply_bulk(b"pttl");
    let longest = holders.iter().map(|(_, _, pttl)| *pttl).max().unwrap_or(0);
    ctx.reply_integer(if holders.iter().any(|(_, _, pttl)| *pttl < 0) { -1 } else { longest });
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
    for (owner, token, pttl) in holders {
        ctx.reply_array(3);
        ctx.reply_bulk(owner);
        reply_token(*token);
        ctx.reply_integer(*pttl);
    }
    crate::api::OK
}
