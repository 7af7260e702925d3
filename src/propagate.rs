//! How a change leaves a command: replication and the AOF, WATCH and
//! client-side caching, keyspace notifications. And the receiving side of
//! replication, `LOCK.APPLY`.
//!
//! A command that changes nothing calls none of this, so it leaves no
//! trace, as a failed `SET NX` does not.
//!
//! A grant travels as `LOCK.APPLY key owner token deadline` with the
//! absolute deadline: replaying a relative ttl would restart the lease on
//! the replica or at AOF load. An extension travels as `PEXPIREAT` with the
//! absolute deadline. A release travels as itself, verbatim: given the same
//! lock state it has the same effect anywhere (on a replica, commands from
//! the master see keys their lease has passed, and at AOF load nothing
//! expires), and it avoids RM_Replicate's per-call command lookup.

use std::ffi::c_int;

use redis_module::raw;

use crate::api::{self, unix_millis, Arg, Ctx, Key, KeyMode};
use crate::args;
use crate::fencing::{Token, COUNTER};
use crate::lease::{Lease, Now};
use crate::lock::{self, Lock};

pub const APPLY: &std::ffi::CStr = c"LOCK.APPLY";

/// A lock was granted or re-granted to `owner` with `token`, its key set to
/// expire at `deadline_ms` (the lease's wall-clock mirror).
pub fn granted(ctx: Ctx, key: &Arg, owner: &Arg, token: Token, deadline_ms: i64) {
    ctx.replicate_grant(APPLY, key, owner, token, deadline_ms);
    ctx.signal_modified(key);
    ctx.notify(c"lock.acquire", key);
}

/// A lease now ends at `deadline_ms`.
pub fn extended(ctx: Ctx, key: &Arg, deadline_ms: i64) {
    ctx.replicate_key_integer(c"PEXPIREAT", key, deadline_ms);
    ctx.signal_modified(key);
    ctx.notify(c"lock.extend", key);
}

/// A lock was released (its key deleted) by the command being executed.
pub fn released(ctx: Ctx, key: &Arg) {
    ctx.replicate_verbatim();
    ctx.signal_modified(key);
    ctx.notify(c"lock.release", key);
}

/// Sets a replayed deadline exactly, also one already past. Redis 7.0 can
/// only express that through PEXPIREAT itself (a module ttl cannot be
/// negative); it keeps such a key on a replica and while loading.
fn set_replayed_deadline(ctx: Ctx, key: &Key, key_name: &Arg, deadline_ms: i64) -> bool {
    // A margin of a tick: `expire_at` must not see the deadline pass.
    if api::sets_past_deadlines() || deadline_ms > unix_millis().saturating_add(1) {
        key.expire_at(deadline_ms)
    } else {
        ctx.pexpireat_via_call(key_name, deadline_ms)
    }
}

/// `LOCK.APPLY key owner token deadline`: sets the key to exactly the lock
/// its master granted. Accepted only from the master link or the AOF, so
/// no client can forge an owner, a token or a deadline; and never refused
/// for its token.
pub fn apply(ctx: Ctx, argv: &[Arg]) -> c_int {
    if !ctx.has_flags(raw::REDISMODULE_CTX_FLAGS_REPLICATED | raw::REDISMODULE_CTX_FLAGS_LOADING) {
        return ctx.reply_error(c"ERR LOCK.APPLY is accepted only from the master link or while loading the AOF");
    }
    let req = match args::parse_apply(argv) {
        Ok(req) => req,
        Err(e) => return ctx.reply_error(&e.message()),
    };
    // This server's own data (its AOF) or its master's grant: the master
    // bounded the token when a client brought it, and a token at clock +
    // lead is normal after a FENCE write-back or a promotion. Refusing it
    // here for the local clock would drop a lock a client holds.
    COUNTER.observe(req.token);
    // The lock is stored whatever the local clock says: this replays what
    // the master did at this offset. A deadline that has passed here is
    // stored as it is (Redis expires the key on the master's DEL, or once
    // loading ends), so a later PEXPIREAT from an extension still finds it.
    let key = ctx.open_key(req.key, KeyMode::Write);
    // The lease runs on this server's monotonic clock from its wall-clock
    // deadline read now; an AOF rewrite's form (0) is followed by Redis's
    // PEXPIREAT, and the lease is taken from that TTL.
    let lease = if req.deadline_ms != 0 { Lease::until(Some(req.deadline_ms), Now::read()) } else { Lease::UNKNOWN };
    if !Lock::new(req.owner, req.token, lease).is_some_and(|lock| lock::store(&key, lock)) {
        return ctx.reply_error(c"ERR could not store the lock");
    }
    if req.deadline_ms != 0 && !set_replayed_deadline(ctx, &key, req.key, req.deadline_ms) {
        return ctx.reply_error(c"ERR could not set the lease");
    }
    ctx.replicate_verbatim();
    ctx.signal_modified(req.key);
    ctx.notify(c"lock.acquire", req.key);
    ctx.reply_ok()
}
