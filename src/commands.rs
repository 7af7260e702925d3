//! LOCK.ACQUIRE, LOCK.RELEASE, LOCK.EXTEND and LOCK.INFO.
//!
//! Each is one key lookup, an owner check and, only when something
//! changes, the write and its propagation.

use std::ffi::{c_int, CStr};

use crate::api::{Arg, Ctx, Key, KeyKind, KeyMode};
use crate::args;
use crate::config;
use crate::fencing::COUNTER;
use crate::lock::{self, Lock, LockRef};
use crate::propagate;

const WRONGTYPE: &CStr = c"WRONGTYPE Operation against a key holding the wrong kind of value";

/// What an open key holds.
enum Slot<'a> {
    Free,
    Held(LockRef<'a>),
    WrongType,
}

fn slot(key: &Key) -> Slot<'_> {
    match key.kind() {
        KeyKind::Empty => Slot::Free,
        KeyKind::Module(t) if t == lock::registered_type() => {
            // SAFETY: the value belongs to our type, so it is a `Lock`.
            match unsafe { Lock::borrow(key.module_value()) } {
                Some(lock) => Slot::Held(lock),
                None => Slot::WrongType,
            }
        }
        _ => Slot::WrongType,
    }
}

macro_rules! parse_or_reply {
    ($ctx:expr, $parsed:expr) => {
        match $parsed {
            Ok(req) => req,
            Err(e) => return $ctx.reply_error(&e.message()),
        }
    };
}

/// `LOCK.ACQUIRE key owner ttl-ms [FENCE min-token]` → token or nil.
pub fn acquire(ctx: Ctx, argv: &[Arg]) -> c_int {
    let req = parse_or_reply!(ctx, args::parse_acquire(argv, config::max_ttl()));
    let key = ctx.open_key(req.key, KeyMode::Write);
    match slot(&key) {
        Slot::WrongType => ctx.reply_error(WRONGTYPE),
        Slot::Held(lock) if !lock.is_held_by(req.owner) => ctx.reply_null(),
        Slot::Held(mut lock) => {
            // Re-grant to the same owner: a retry after a lost reply.
            if req.fence > lock.token() {
                lock.set_token(req.fence);
                COUNTER.observe(req.fence);
            }
            let deadline = propagate::deadline_after(req.ttl_ms);
            if !key.expire_at(deadline) {
                return ctx.reply_error(c"ERR could not set the lease");
            }
            propagate::granted(ctx, req.key, req.owner_arg, lock.token(), deadline);
            ctx.reply_integer(lock.token())
        }
        Slot::Free => {
            let Some(token) = COUNTER.issue(req.fence) else {
                return ctx.reply_error(c"ERR fencing token space exhausted");
            };
            if !Lock::new(req.owner, token).is_some_and(|lock| lock::store(&key, lock)) {
                return ctx.reply_error(c"ERR could not store the lock");
            }
            let deadline = propagate::deadline_after(req.ttl_ms);
            if !key.expire_at(deadline) {
                key.delete();
                return ctx.reply_error(c"ERR could not set the lease");
            }
            propagate::granted(ctx, req.key, req.owner_arg, token, deadline);
            ctx.reply_integer(token)
        }
    }
}

/// `LOCK.RELEASE key owner` → 1 if released, 0 otherwise.
pub fn release(ctx: Ctx, argv: &[Arg]) -> c_int {
    let req = parse_or_reply!(ctx, args::parse_release(argv));
    let key = ctx.open_key(req.key, KeyMode::Write);
    match slot(&key) {
        Slot::WrongType => ctx.reply_error(WRONGTYPE),
        Slot::Held(lock) if lock.is_held_by(req.owner) => {
            key.delete();
            propagate::released(ctx, req.key);
            ctx.reply_integer(1)
        }
        Slot::Held(_) | Slot::Free => ctx.reply_integer(0),
    }
}

/// `LOCK.EXTEND key owner ttl-ms` → 1 if the lease now ends ttl-ms from
/// now, 0 otherwise. The token does not change.
pub fn extend(ctx: Ctx, argv: &[Arg]) -> c_int {
    let req = parse_or_reply!(ctx, args::parse_extend(argv, config::max_ttl()));
    let key = ctx.open_key(req.key, KeyMode::Write);
    match slot(&key) {
        Slot::WrongType => ctx.reply_error(WRONGTYPE),
        Slot::Held(lock) if lock.is_held_by(req.owner) => {
            let deadline = propagate::deadline_after(req.ttl_ms);
            if !key.expire_at(deadline) {
                return ctx.reply_error(c"ERR could not set the lease");
            }
            propagate::extended(ctx, req.key, deadline);
            ctx.reply_integer(1)
        }
        Slot::Held(_) | Slot::Free => ctx.reply_integer(0),
    }
}

/// `LOCK.INFO key` → nil, or owner, token and remaining lease (pttl).
pub fn info(ctx: Ctx, argv: &[Arg]) -> c_int {
    let key_name = parse_or_reply!(ctx, args::parse_info(argv));
    let key = ctx.open_key(key_name, KeyMode::Read);
    match slot(&key) {
        Slot::WrongType => ctx.reply_error(WRONGTYPE),
        Slot::Free => ctx.reply_null(),
        Slot::Held(lock) => {
            ctx.reply_map(3);
            ctx.reply_bulk(b"owner");
            ctx.reply_bulk(lock.owner());
            ctx.reply_bulk(b"token");
            ctx.reply_integer(lock.token());
            ctx.reply_bulk(b"pttl");
            ctx.reply_integer(key.remaining_ms())
        }
    }
}
