//! LOCK.ACQUIRE, LOCK.RELEASE, LOCK.EXTEND and LOCK.INFO.
//!
//! Each is one key lookup, an owner check and, only when something
//! changes, the write and its propagation. A key holding a plain string is
//! a lock held by the owner equal to its value (the `SET key owner NX PX`
//! pattern), so services can move to these commands one at a time.

use std::ffi::{c_int, CStr};

use redis_module::raw;

use crate::api::{Arg, Ctx, Key, KeyKind, KeyMode};
use crate::args;
use crate::config;
use crate::fencing::{self, Token, COUNTER};
use crate::gate;
use crate::kept;
use crate::lease::{self, Lease, Now};
use crate::lock::{self, Lock, LockRef};
use crate::propagate;
use crate::quarantine;
use crate::stats::{self, Cause};
use crate::waiters;

pub const WRONGTYPE: &CStr = c"WRONGTYPE Operation against a key holding the wrong kind of value";

/// What an open key holds.
enum Slot<'a> {
    Free,
    Held(LockRef<'a>),
    /// A plain-string lock: the value is its owner.
    PlainString(&'a [u8]),
    WrongType,
}

/// How a command looks at a lock's lease.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Look {
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
fn slot(key: &Key, now: Now, look: Look) -> Slot<'_> {
    match key.kind() {
        KeyKind::Empty => Slot::Free,
        KeyKind::Module(t) if t == lock::registered_type() => {
            // SAFETY: the value belongs to our type, so it is a `Lock`.
            match unsafe { Lock::borrow(key.module_value()) } {
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

/// Whether `owner` holds the lock at `key` (a module lock or a
/// plain-string one); `None` when the key holds another type.
fn holds(key: &Key, owner: &[u8], now: Now, look: Look) -> Option<bool> {
    match slot(key, now, look) {
        Slot::WrongType => None,
        Slot::Held(lock) => Some(lock.is_held_by(owner)),
        Slot::PlainString(value) => Some(value == owner),
        Slot::Free => Some(false),
    }
}

/// Whether a grant to `owner` would succeed now (free, already theirs, or
/// their plain string); a key of another type counts as free, its
/// waiters get WRONGTYPE from the grant.
pub fn free_for(key: &Key, owner: &[u8]) -> bool {
    match slot(key, Now::read(), Look::Held) {
        Slot::Held(lock) => lock.is_held_by(owner),
        Slot::PlainString(value) => value == owner,
        Slot::Free | Slot::WrongType => true,
    }
}

/// What is left of the lease of the lock at `key` (ended when none).
pub fn lease_left(key: &Key, now: Now) -> lease::Left {
    match slot(key, now, Look::Exact) {
        Slot::Held(lock) => lock.lease().left(now),
        Slot::PlainString(_) => match key.deadline_ms() {
            Some(at) => lease::Lease::until(Some(at), now).left(now),
            None => lease::Left::Forever,
        },
        Slot::Free | Slot::WrongType => lease::Left::Ended,
    }
}

/// Whether the command replays the master's stream or the AOF.
fn replays(ctx: Ctx) -> bool {
    ctx.has_flags(raw::REDISMODULE_CTX_FLAGS_REPLICATED | raw::REDISMODULE_CTX_FLAGS_LOADING)
}

/// Puts back a lock Redis removed while its lease ran (see `kept`), so
/// the command finds it where it was. One load when nothing is kept: the
/// clocks are read only when something is.
pub fn restore_kept(ctx: Ctx, key: &Key, key_name: &Arg) {
    if kept::any() {
        kept::restore(ctx, key, key_name, ctx.selected_db(), Now::read());
    }
}

/// A replica answers a client's lock write as the server answers writes
/// on a read-only replica (see `gate::refuses_client_write`).
macro_rules! refuse_on_replica {
    ($ctx:expr) => {
        if gate::refuses_client_write($ctx) {
            return $ctx.reply_error(gate::READONLY);
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

/// The result of trying to give a lock to an owner.
pub enum Attempt {
    Granted(Token, Grant),
    Held,
    WrongType,
    Failed(&'static CStr),
}

/// How a lock was granted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Grant {
    /// It was free (or the owner's plain string).
    New,
    /// The owner already held it: same token, new lease.
    Regrant,
}

/// Gives the lock at `key` to `owner` if it is free or already theirs, and
/// propagates the grant. Shared by ACQUIRE and by the waiters' handoff.
pub fn try_acquire(ctx: Ctx, key: &Key, key_name: &Arg, owner_arg: &Arg, ttl_ms: i64, fence: Token) -> Attempt {
    let owner = owner_arg.bytes();
    let now = Now::read();
    let lease = match slot(key, now, Look::Held) {
        Slot::WrongType => return Attempt::WrongType,
        Slot::Held(lock) if !lock.is_held_by(owner) => return Attempt::Held,
        Slot::PlainString(value) if value != owner => return Attempt::Held,
        Slot::Held(mut lock) => {
            // Re-grant to the same owner: a retry after a lost reply. A
            // FENCE above its token takes a token from the counter, like a
            // new grant: `fence` itself may be another lock's token already.
            if fence > lock.token() {
                let Some(token) = COUNTER.issue(fence) else {
                    return Attempt::Failed(c"ERR fencing token space exhausted");
                };
                lock.set_token(token);
            }
            let lease = Lease::starting(now, ttl_ms);
            if !key.expire_at(lease.mirror) {
                return Attempt::Failed(c"ERR could not set the lease");
            }
            lock.set_lease(lease);
            propagate::granted(ctx, key_name, owner_arg, lock.token(), lease.mirror);
            waiters::lease_changed(ctx, key_name.bytes(), lease.end);
            return Attempt::Granted(lock.token(), Grant::Regrant);
        }
        // The owner of a plain-string lock converts it and keeps its
        // remaining lease, up to the longest lease a lock may have.
        Slot::PlainString(_) => {
            let longest = now.wall.saturating_add(config::max_ttl());
            let deadline = key.deadline_ms().map_or_else(|| now.wall.saturating_add(ttl_ms), |at| at.min(longest));
            Lease::until(Some(deadline), now)
        }
        Slot::Free => Lease::starting(now, ttl_ms),
    };
    let Some(token) = COUNTER.issue(fence) else {
        return Attempt::Failed(c"ERR fencing token space exhausted");
    };
    if !Lock::new(owner, token, lease).is_some_and(|lock| lock::store(key, lock)) {
        return Attempt::Failed(c"ERR could not store the lock");
    }
    if !key.expire_at(lease.mirror) {
        lock::delete(key);
        return Attempt::Failed(c"ERR could not set the lease");
    }
    propagate::granted(ctx, key_name, owner_arg, token, lease.mirror);
    Attempt::Granted(token, Grant::New)
}

/// `LOCK.ACQUIRE key owner ttl-ms [FENCE min-token] [WAIT timeout-ms]`
/// → token, or nil (held by another owner; or the wait timed out).
pub fn acquire(ctx: Ctx, argv: &[Arg]) -> c_int {
    refuse_on_replica!(ctx);
    let req = parse_or_reply!(ctx, args::parse_acquire(argv, config::max_ttl(), config::max_owner_len()));
    if let Some(left) = quarantine::remaining_ms() {
        stats::QUARANTINE_REFUSED.bump();
        return ctx.reply_error_text(&format!("TRYAGAIN restart quarantine: {left} ms left"));
    }
    if req.fence != 0 {
        if let Err(ceiling) = fencing::check_lead(req.fence) {
            return ctx.reply_error_text(&fencing::lead_error("FENCE token", ceiling));
        }
    }
    let key = ctx.open_key(req.key, KeyMode::Write);
    restore_kept(ctx, &key, req.key);
    if let Some(db) = waiters::queued_in(ctx, req.key.bytes()) {
        // Whoever waits comes first, even if the lease just ran out.
        waiters::serve(ctx, &key, db, req.key, Cause::Expiry);
    }
    match try_acquire(ctx, &key, req.key, req.owner_arg, req.ttl_ms, req.fence) {
        Attempt::Granted(token, how) => {
            match how {
                Grant::New => stats::ACQUIRE_NEW.bump(),
                Grant::Regrant => stats::ACQUIRE_REGRANT.bump(),
            }
            ctx.reply_integer(token)
        }
        Attempt::WrongType => ctx.reply_error(WRONGTYPE),
        Attempt::Failed(msg) => ctx.reply_error(msg),
        Attempt::Held => match req.wait {
            Some(timeout) if may_block(ctx) => {
                waiters::enqueue(ctx, &key, req.key, req.owner_arg, req.ttl_ms, req.fence, timeout)
            }
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
    let no_blocking =
        raw::REDISMODULE_CTX_FLAGS_MULTI | raw::REDISMODULE_CTX_FLAGS_LUA | raw::REDISMODULE_CTX_FLAGS_DENY_BLOCKING;
    !ctx.has_flags(no_blocking)
}

/// `LOCK.RELEASE key owner` → 1 if released, 0 otherwise. The oldest
/// waiter, if any, gets the lock in the same command.
pub fn release(ctx: Ctx, argv: &[Arg]) -> c_int {
    refuse_on_replica!(ctx);
    let req = parse_or_reply!(ctx, args::parse_release(argv));
    let key = ctx.open_key(req.key, KeyMode::Write);
    let now = Now::read();
    let look = if replays(ctx) { Look::AsStored } else { Look::Held };
    if look != Look::AsStored {
        restore_kept(ctx, &key, req.key);
    }
    match holds(&key, req.owner, now, look) {
        None => return ctx.reply_error(WRONGTYPE),
        Some(false) => {
            stats::RELEASE_REFUSED.bump();
            return ctx.reply_integer(0);
        }
        Some(true) => {}
    }
    stats::RELEASE_DONE.bump();
    lock::delete(&key);
    propagate::released(ctx, req.key);
    if let Some(db) = waiters::queued_in(ctx, req.key.bytes()) {
        // RELEASE frees memory and runs under OOM; the handoff is a grant,
        // which ACQUIRE (deny-oom) could not make now.
        if ctx.has_flags(raw::REDISMODULE_CTX_FLAGS_OOM) {
            waiters::defer(db, req.key.bytes(), gate::Refusal::OutOfMemory);
        } else {
            waiters::serve(ctx, &key, db, req.key, Cause::Release);
        }
    }
    ctx.reply_integer(1)
}

/// `LOCK.EXTEND key owner ttl-ms` → 1 if the lease now ends ttl-ms from
/// now, 0 otherwise. The token does not change.
pub fn extend(ctx: Ctx, argv: &[Arg]) -> c_int {
    refuse_on_replica!(ctx);
    let req = parse_or_reply!(ctx, args::parse_extend(argv, config::max_ttl()));
    let key = ctx.open_key(req.key, KeyMode::Write);
    restore_kept(ctx, &key, req.key);
    let now = Now::read();
    let lease = Lease::starting(now, req.ttl_ms);
    match slot(&key, now, Look::Held) {
        Slot::WrongType => return ctx.reply_error(WRONGTYPE),
        Slot::Held(mut lock) if lock.is_held_by(req.owner) => {
            if !key.expire_at(lease.mirror) {
                return ctx.reply_error(c"ERR could not set the lease");
            }
            lock.set_lease(lease);
        }
        // A plain-string lock's lease is its TTL alone.
        Slot::PlainString(value) if value == req.owner => {
            if !key.expire_at(lease.mirror) {
                return ctx.reply_error(c"ERR could not set the lease");
            }
        }
        _ => {
            stats::EXTEND_REFUSED.bump();
            return ctx.reply_integer(0);
        }
    }
    propagate::extended(ctx, req.key, lease.mirror);
    waiters::lease_changed(ctx, req.key.bytes(), lease.end);
    stats::EXTEND_DONE.bump();
    ctx.reply_integer(1)
}

/// `LOCK.INFO key` → nil, or owner, token (nil for a plain-string lock),
/// remaining lease (pttl) and the number of waiters.
pub fn info(ctx: Ctx, argv: &[Arg]) -> c_int {
    let key_name = parse_or_reply!(ctx, args::parse_info(argv));
    let key = ctx.open_key(key_name, KeyMode::Read);
    let waiting = || waiters::count_in(ctx, key_name.bytes());
    let now = Now::read();
    match slot(&key, now, Look::Exact) {
        Slot::WrongType => ctx.reply_error(WRONGTYPE),
        Slot::Free => {
            let kept = kept::any().then(|| {
                kept::peek(ctx.selected_db(), key_name.bytes(), now, |owner, token, left| {
                    reply_info(ctx, owner, Some(token), left.pttl(), waiting())
                })
            });
            kept.flatten().unwrap_or_else(|| ctx.reply_null())
        }
        Slot::Held(lock) => reply_info(ctx, lock.owner(), Some(lock.token()), lock.lease().left(now).pttl(), waiting()),
        Slot::PlainString(value) => reply_info(ctx, value, None, key.pttl(), waiting()),
    }
}

fn reply_info(ctx: Ctx, owner: &[u8], token: Option<Token>, pttl: i64, waiting: usize) -> c_int {
    ctx.reply_map(4);
    ctx.reply_bulk(b"owner");
    ctx.reply_bulk(owner);
    ctx.reply_bulk(b"token");
    match token {
        Some(token) => ctx.reply_integer(token),
        None => ctx.reply_null(),
    };
    ctx.reply_bulk(b"pttl");
    ctx.reply_integer(pttl);
    ctx.reply_bulk(b"waiters");
    ctx.reply_integer(i64::try_from(waiting).unwrap_or(i64::MAX))
}
