//! LOCK.ACQUIRE, LOCK.RELEASE, LOCK.EXTEND, LOCK.PROCLAIM, LOCK.INFO,
//! LOCK.WAITERS and LOCK.TOP; LOCK.CHECK and LOCK.GUARD (`fence`);
//! LOCK.REVOKE (`revoke`); LOCK.RESIZE (`resize`).
//!
//! Each parses, opens its key and replies; a change (ACQUIRE, RELEASE,
//! EXTEND) is made by its executor in `change`, which writes and
//! propagates only when something changes, through `waiters`, which serves
//! the key's line around it (PROCLAIM and LOCK.APPLY ask nothing of the
//! line: `change` directly). A key holding a plain string is
//! a lock held by the owner equal to its value (the `SET key owner NX PX`
//! pattern), so services can move to these commands one at a time.

pub mod census;
pub mod info;

use std::ffi::c_int;

use crate::api::{ctx_flags, Arg, Ctx, KeyMode};
use crate::change::{self, Ask, Attempt, Extended, Proclaimed, Released};
use crate::core::grant;
use crate::core::token::Token;
use crate::keys::grants::{slot, Look, Slot, WRONGTYPE};
use crate::server::bindings;
use crate::server::stats;
use crate::server::{clock, revoked};
use crate::{args, keys::rescue, replication::writable, server::config, server::fencing, server::quarantine, waiters};

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

// After the macros, which it uses.
mod ask;
mod fence;
mod multi;
mod resize;
mod revoke;
pub use ask::ask;
pub use fence::{check, fenced, fenceinfo, guard};
pub use multi::{macquire, mextend, mrelease};
pub use resize::resize;
pub use revoke::revoke;

/// `LOCK.ACQUIRE key owner ttl-ms [SHARED [LIMIT n]] [FENCE min-token] [WAIT timeout-ms]`
/// → token, or nil (held incompatibly, or others wait first; or the wait
/// timed out).
pub fn acquire(ctx: Ctx, argv: &[Arg]) -> c_int {
    refuse_on_replica!(ctx);
    let req = parse_or_reply!(ctx, args::parse_acquire(argv, config::max_ttl(), config::max_owner_len()));
    if let Some(refused) = refuse_grant(ctx, &req.request) {
        return refused;
    }
    let key = ctx.open_key(req.key, KeyMode::Write);
    let ask = Ask { request: &req.request, value: req.value };
    match waiters::acquire(ctx, &key, req.key, req.owner, ask.bytes()) {
        Attempt::Granted(granted) => ctx.reply_integer(granted.token),
        Attempt::WrongType => ctx.reply_error(WRONGTYPE),
        Attempt::Failed(msg) => ctx.reply_error(msg),
        Attempt::Refused(msg) => ctx.reply_error(&msg),
        Attempt::Held => match req.wait {
            Some(timeout) if may_block(ctx) => waiters::enqueue(ctx, &key, req.key, req.owner, ask, timeout),
            _ => {
                stats::ACQUIRE_REFUSED.bump();
                ctx.reply_null()
            }
        },
    }
}

/// A script runs as a client of its own that never disconnects: a hold
/// bound to it would end with nothing.
/// What refuses any grant before a key is looked at (LOCK.ACQUIRE and
/// LOCK.MACQUIRE alike): the restart quarantine, a FENCE beyond the
/// allowed lead, SESSION inside a script. `Some(reply)` when refused.
fn refuse_grant(ctx: Ctx, request: &grant::Request) -> Option<c_int> {
    if let Some(left) = quarantine::remaining_ms() {
        stats::QUARANTINE_REFUSED.bump();
        return Some(ctx.reply_error_text(&format!("TRYAGAIN restart quarantine: {left} ms left")));
    }
    if request.fence != 0 {
        if let Err(ceiling) = fencing::check_lead(request.fence) {
            return Some(ctx.reply_error_text(&fencing::lead_error("FENCE token", ceiling)));
        }
    }
    if request.session.is_some() && ctx.has_flags(ctx_flags::LUA) {
        return Some(ctx.reply_error(NO_SESSION_IN_SCRIPTS));
    }
    None
}

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
    match waiters::release(ctx, &key, req.key, req.owner) {
        Released::Done => ctx.reply_integer(1),
        Released::NotHeld => ctx.reply_integer(0),
        Released::WrongType => ctx.reply_error(WRONGTYPE),
    }
}

/// `LOCK.EXTEND key owner ttl-ms` → 1 if the lease now ends ttl-ms from
/// now, 0 otherwise (not the holder; a session-bound hold, from another
/// connection than its own), or a `REVOKED` error while a hold LOCK.REVOKE
/// took from `owner` would still have run. The token does not change.
pub fn extend(ctx: Ctx, argv: &[Arg]) -> c_int {
    refuse_on_replica!(ctx);
    let req = parse_or_reply!(ctx, args::parse_extend(argv, config::max_ttl()));
    let key = ctx.open_key(req.key, KeyMode::Write);
    match waiters::extend(ctx, &key, req.key, req.owner, req.ttl_ms) {
        Extended::Done { .. } => ctx.reply_integer(1),
        Extended::Refused => match revoked::revoked(ctx.selected_db(), req.key.bytes(), req.owner, clock::now().mono) {
            // Its client can tell a revoked hold from a lost one.
            Some(token) => ctx.reply_error_text(&format!("REVOKED the hold was revoked (token {token})")),
            None => ctx.reply_integer(0),
        },
        Extended::WrongType => ctx.reply_error(WRONGTYPE),
        Extended::Failed(msg) => ctx.reply_error(msg),
    }
}

/// `LOCK.PROCLAIM key owner text` → 1 if `owner` holds the exclusive lock
/// and `text` is now its value (empty: none), 0 otherwise (not the
/// holder; a session-bound hold, from another connection than its own).
/// Lease and token do not change.
pub fn proclaim(ctx: Ctx, argv: &[Arg]) -> c_int {
    refuse_on_replica!(ctx);
    let req = parse_or_reply!(ctx, args::parse_proclaim(argv, config::max_owner_len()));
    let key = ctx.open_key(req.key, KeyMode::Write);
    match change::proclaim(ctx, &key, req.key, req.owner, req.value) {
        Proclaimed::Done => ctx.reply_integer(1),
        Proclaimed::Refused => ctx.reply_integer(0),
        Proclaimed::WrongType => ctx.reply_error(WRONGTYPE),
        Proclaimed::Failed => ctx.reply_error(c"ERR could not store the value"),
    }
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
    let now = crate::server::clock::now();
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

/// One holder as LOCK.INFO lists it (an exclusive lock's value is
/// `reply_info`'s; a shared holder's is its row's).
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
    /// A semaphore's permits it takes (`PERMITS k`); 1 for every other hold.
    permits: u32,
    /// A shared holder's value (empty: none, and the row has no 7th item).
    value: &'a [u8],
}

impl<'a> HolderRow<'a> {
    fn of(owner: &'a [u8], token: Token, pttl: i64, held_ms: i64, session: bool, permits: u32) -> HolderRow<'a> {
        HolderRow { owner, token: Some(token), pttl, held_ms: Some(held_ms), session, permits, value: b"" }
    }
}

/// `LOCK.INFO key` → nil, or owner, token (nil for a plain-string lock or
/// a lock held shared), remaining lease (pttl, the longest for shared
/// holders), the number of waiters, the mode, the limit (a semaphore's)
/// every holder as [owner, token, pttl, held-ms, session, permits], with
/// its value as a 7th item when a shared holder has one (a row without
/// one is as it always was, so no reader of six items breaks), the
/// permits taken (a semaphore's) and the value stored with an exclusive
/// hold (nil when none).
pub fn info(ctx: Ctx, argv: &[Arg]) -> c_int {
    let key_name = parse_or_reply!(ctx, args::parse_info(argv));
    let key = ctx.open_key(key_name, KeyMode::Read);
    let waiting = || waiters::count_in(ctx, key_name.bytes());
    let now = crate::server::clock::now();
    let db = ctx.selected_db();
    let bound = |owner: &[u8]| bindings::is_bound(db, key_name.bytes(), owner);
    match slot(&key, now, Look::Exact) {
        Slot::WrongType => ctx.reply_error(WRONGTYPE),
        Slot::Free => {
            let kept = rescue::any().then(|| {
                rescue::peek(db, key_name.bytes(), now, |peek| {
                    let holders: Vec<_> = peek
                        .holders
                        .iter()
                        .map(|h| HolderRow {
                            value: h.value,
                            ..HolderRow::of(h.owner, h.token, h.left.pttl(), now.mono - h.since, bound(h.owner), h.permits)
                        })
                        .collect();
                    reply_info(ctx, peek.shared, &holders, waiting(), peek.value)
                })
            });
            kept.flatten().unwrap_or_else(|| ctx.reply_null())
        }
        Slot::Held(lock) => {
            let (owner, since) = (lock.owner(), lock.since());
            let holder = [HolderRow::of(&owner, lock.token(), lock.lease().left(now).pttl(), now.mono - since, bound(&owner), 1)];
            reply_info(ctx, None, &holder, waiting(), lock.value())
        }
        Slot::Shared(group) => {
            let holders: Vec<_> = group
                .live(now)
                .map(|h| HolderRow {
                    value: h.owner.value(),
                    ..HolderRow::of(&h.owner, h.token, h.end - now.mono, now.mono - h.since, bound(&h.owner), h.permits)
                })
                .collect();
            reply_info(ctx, Some(group.limit()), &holders, waiting(), b"")
        }
        Slot::PlainString(value) => {
            let holder = HolderRow { owner: value, token: None, pttl: key.pttl(), held_ms: None, session: false, permits: 1, value: b"" };
            reply_info(ctx, None, &[holder], waiting(), b"")
        }
    }
}

/// `shared`: `None` for an exclusive lock, else a group's limit (0: none).
/// `value`: the exclusive hold's (empty: none).
fn reply_info(ctx: Ctx, shared: Option<u32>, holders: &[HolderRow<'_>], waiting: usize, value: &[u8]) -> c_int {
    let reply_option = |n: Option<i64>| match n {
        Some(n) => ctx.reply_integer(n),
        None => ctx.reply_null(),
    };
    ctx.reply_map(9);
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
        ctx.reply_array(if h.value.is_empty() { 6 } else { 7 });
        ctx.reply_bulk(h.owner);
        reply_option(h.token);
        ctx.reply_integer(h.pttl);
        reply_option(h.held_ms);
        ctx.reply_integer(i64::from(h.session));
        ctx.reply_integer(i64::from(h.permits));
        if !h.value.is_empty() {
            ctx.reply_bulk(h.value);
        }
    }
    // A semaphore's permits taken (its free ones: limit - taken).
    ctx.reply_bulk(b"taken");
    match shared {
        Some(limit) if limit > 0 => ctx.reply_integer(holders.iter().map(|h| i64::from(h.permits)).sum()),
        _ => ctx.reply_null(),
    };
    ctx.reply_bulk(b"value");
    if value.is_empty() {
        ctx.reply_null();
    } else {
        ctx.reply_bulk(value);
    }
    crate::api::OK
}

/// `LOCK.APPLY key owner token deadline [SHARED limit key-deadline]`: sets
/// the key to exactly the lock its master granted (`change::apply::replicated`).
/// Accepted only from the master link or the AOF, so no client can forge
/// an owner, a token or a deadline; and never refused for its token.
pub fn apply(ctx: Ctx, argv: &[Arg]) -> c_int {
    if !ctx.has_flags(ctx_flags::REPLICATED | ctx_flags::LOADING) {
        return ctx.reply_error(c"ERR LOCK.APPLY is accepted only from the master link or while loading the AOF");
    }
    let req = match args::parse_apply(argv) {
        Ok(req) => req,
        Err(e) => return ctx.reply_error(&e.message()),
    };
    let key = ctx.open_key(req.key, KeyMode::Write);
    match change::apply::replicated(ctx, &key, &req) {
        Ok(()) => ctx.reply_ok(),
        Err(msg) => ctx.reply_error(msg),
    }
}
