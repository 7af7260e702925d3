//! LOCK.MACQUIRE, LOCK.MRELEASE and LOCK.MEXTEND: several keys at once
//! (Redis's numkeys convention), each member an ordinary lock. In a
//! Cluster, Redis itself answers CROSSSLOT for keys of several slots, from
//! the commands' key specs.

use std::ffi::c_int;

use super::WRONGTYPE;
use crate::api::{Arg, Ctx, Key, KeyMode};
use crate::change::multi::{self, ExtendedSet};
use crate::change::Attempt;
use crate::server::stats;
use crate::{args, replication::writable, server::config};

/// Every key of the set, open for writing, with its name.
fn open_all(ctx: Ctx, keys: &[Arg]) -> Vec<(Key, &Arg)> {
    keys.iter().map(|name| (ctx.open_key(name, KeyMode::Write), name)).collect()
}

/// `LOCK.MACQUIRE numkeys key [key ...] owner ttl-ms [SHARED] [FENCE min-token] [SESSION [DELAY ms]]`
/// → one token for the whole set, or nil (a member held incompatibly, or
/// waited for by others).
pub fn macquire(ctx: Ctx, argv: &[Arg]) -> c_int {
    refuse_on_replica!(ctx);
    let req = parse_or_reply!(ctx, args::parse_macquire(argv, config::max_ttl(), config::max_owner_len()));
    if req.wait.is_some() {
        return ctx.reply_error(c"ERR LOCK.MACQUIRE does not take WAIT yet");
    }
    if let Some(refused) = super::refuse_grant(ctx, &req.request) {
        return refused;
    }
    let members = open_all(ctx, req.keys);
    match multi::acquire_set(ctx, &members, req.owner, &req.request) {
        Attempt::Granted(granted) => ctx.reply_integer(granted.token),
        Attempt::WrongType => ctx.reply_error(WRONGTYPE),
        Attempt::Failed(msg) => ctx.reply_error(msg),
        Attempt::Refused(msg) => ctx.reply_error(&msg),
        Attempt::Held => {
            stats::ACQUIRE_REFUSED.bump();
            ctx.reply_null()
        }
    }
}

/// `LOCK.MRELEASE numkeys key [key ...] owner` → how many members the
/// owner held and no longer holds. Each member's oldest waiter gets it in
/// the same command.
pub fn mrelease(ctx: Ctx, argv: &[Arg]) -> c_int {
    refuse_on_replica!(ctx);
    let req = parse_or_reply!(ctx, args::parse_mrelease(argv));
    let members = open_all(ctx, req.keys);
    match multi::release_set(ctx, &members, req.owner) {
        Some(released) => ctx.reply_integer(released),
        None => ctx.reply_error(WRONGTYPE),
    }
}

/// `LOCK.MEXTEND numkeys key [key ...] owner ttl-ms` → how many members
/// now have a lease of ttl-ms from now (fewer than numkeys: the set is
/// partly lost).
pub fn mextend(ctx: Ctx, argv: &[Arg]) -> c_int {
    refuse_on_replica!(ctx);
    let req = parse_or_reply!(ctx, args::parse_mextend(argv, config::max_ttl()));
    let members = open_all(ctx, req.keys);
    match multi::extend_set(ctx, &members, req.owner, req.ttl_ms) {
        ExtendedSet::Done(extended) => ctx.reply_integer(extended),
        ExtendedSet::WrongType => ctx.reply_error(WRONGTYPE),
        ExtendedSet::Failed(msg) => ctx.reply_error(msg),
    }
}
