//! LOCK.MACQUIRE, LOCK.MRELEASE and LOCK.MEXTEND: several keys at once
//! (Redis's numkeys convention), each member an ordinary lock. In a
//! Cluster, Redis itself answers CROSSSLOT for keys of several slots, from
//! the commands' key specs.

use std::ffi::c_int;

use super::{may_block, WRONGTYPE};
use crate::api::{Arg, Ctx};
use crate::change::Attempt;
use crate::server::stats;
use crate::waiters::ExtendedSet;
use crate::{args, replication::writable, server::config, waiters};

/// `LOCK.MACQUIRE numkeys key [key ...] owner ttl-ms [SHARED] [FENCE min-token] [WAIT timeout-ms] [SESSION [DELAY ms]] [SEMAPHORE limit]`
/// → one token for the whole set, or nil (a member held incompatibly, or
/// waited for by others; with WAIT, the wait timed out). A set that waits
/// stands in every member's line at once (but a semaphore member's).
/// `SEMAPHORE n`: the last key is one permit of a semaphore of n.
pub fn macquire(ctx: Ctx, argv: &[Arg]) -> c_int {
    refuse_on_replica!(ctx);
    let req = parse_or_reply!(ctx, args::parse_macquire(argv, config::max_ttl(), config::max_owner_len(), config::max_set_keys()));
    if let Some(refused) = super::refuse_grant(ctx, &req.set.request) {
        return refused;
    }
    match waiters::acquire_set(ctx, req.keys, req.owner, &req.set) {
        Attempt::Granted(granted) => ctx.reply_integer(granted.token),
        Attempt::WrongType => ctx.reply_error(WRONGTYPE),
        Attempt::Failed(msg) => ctx.reply_error(msg),
        Attempt::Refused(msg) => ctx.reply_error(&msg),
        Attempt::Held => match req.wait {
            Some(timeout) if may_block(ctx) => waiters::enqueue_set(ctx, req.keys, req.owner, req.set, timeout),
            _ => {
                stats::ACQUIRE_REFUSED.bump();
                ctx.reply_null()
            }
        },
    }
}

/// `LOCK.MRELEASE numkeys key [key ...] owner` → how many members the
/// owner held and no longer holds. Each member's oldest waiter gets it in
/// the same command.
pub fn mrelease(ctx: Ctx, argv: &[Arg]) -> c_int {
    refuse_on_replica!(ctx);
    let req = parse_or_reply!(ctx, args::parse_mrelease(argv, config::max_set_keys()));
    match waiters::release_set(ctx, req.keys, req.owner) {
        Some(released) => ctx.reply_integer(released),
        None => ctx.reply_error(WRONGTYPE),
    }
}

/// `LOCK.MEXTEND numkeys key [key ...] owner ttl-ms` → how many members
/// now have a lease of ttl-ms from now (fewer than numkeys: the set is
/// partly lost).
pub fn mextend(ctx: Ctx, argv: &[Arg]) -> c_int {
    refuse_on_replica!(ctx);
    let req = parse_or_reply!(ctx, args::parse_mextend(argv, config::max_ttl(), config::max_set_keys()));
    match waiters::extend_set(ctx, req.keys, req.owner, req.ttl_ms) {
        ExtendedSet::Done(extended) => ctx.reply_integer(extended),
        ExtendedSet::WrongType => ctx.reply_error(WRONGTYPE),
        ExtendedSet::Failed(msg) => ctx.reply_error(msg),
    }
}
