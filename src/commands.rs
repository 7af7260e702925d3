//! LOCK.ACQUIRE, LOCK.RELEASE, LOCK.EXTEND and LOCK.INFO.
//!
//! Each is one key lookup, an owner check and, only when something
//! changes, the write and its propagation. A key holding a plain string is
//! a lock held by the owner equal to its value (the `SET key owner NX PX`
//! pattern), so services can move to these commands one at a time.

use std::ffi::{c_int, CStr, CString};

use redis_module::raw;

use crate::api::{Arg, Ctx, Key, KeyKind, KeyMode};
use crate::args;
use crate::config;
use crate::core::grant::{self, Holder, Kind, Mode, OneHolder, Outcome, Refusal};
use crate::core::lease::{self, Lease, Now};
use crate::fencing::{self, Token, COUNTER};
use crate::gate;
use crate::group::{self, Group};
use crate::kept;
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
    /// Held shared (a read-write lock's readers, a semaphore's holders).
    Shared(&'a mut Group),
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
        KeyKind::Module(t) if t == lock::registered_type() && Group::is_tagged(key.module_value()) => {
            // SAFETY: the value belongs to our type and is tagged: a `Group`.
            match unsafe { Group::borrow(key.module_value()) } {
                Some(group) if look == Look::AsStored => {
                    if group.lock.holders.is_empty() {
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
/// A key that is free or held exclusively, as the core's one-holder
/// rules see it for `owner`; `None` for another type. (A key held shared
/// is the core's `Lock`; it reads as held by another here.)
fn one_holder(slot: &Slot<'_>, owner: &[u8]) -> Option<OneHolder> {
    match slot {
        Slot::WrongType => None,
        Slot::Held(lock) => Some(OneHolder::Held { mine: lock.is_held_by(owner), token: lock.token() }),
        Slot::PlainString(value) => Some(OneHolder::Held { mine: *value == owner, token: 0 }),
        Slot::Shared(_) => Some(OneHolder::Held { mine: false, token: 0 }),
        Slot::Free => Some(OneHolder::Free),
    }
}

/// What a request asks for beyond its owner and lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Want {
    pub shared: bool,
    /// `SHARED LIMIT n`.
    pub limit: Option<u32>,
}

impl Want {
    fn mode(self) -> Mode {
        if self.shared {
            Mode::Shared
        } else {
            Mode::Exclusive
        }
    }
}

/// Whether a grant to `owner` may succeed now (free, already theirs, their
/// plain string, or room beside shared holders); a key of another type
/// counts as free, its waiters get WRONGTYPE from the grant.
pub fn may_grant(key: &Key, owner: &[u8], want: Want) -> bool {
    let now = crate::clock::now();
    match slot(key, now, Look::Held) {
        Slot::Held(lock) => lock.is_held_by(owner),
        Slot::Shared(group) => {
            let room = match group.lock.kind {
                Kind::ReadWrite => want.shared && want.limit.is_none(),
                Kind::Semaphore { limit } => want.limit == Some(limit) && group.live(now).count() < limit as usize,
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

/// Whether the command replays the master's stream or the AOF.
fn replays(ctx: Ctx) -> bool {
    ctx.has_flags(raw::REDISMODULE_CTX_FLAGS_REPLICATED | raw::REDISMODULE_CTX_FLAGS_LOADING)
}

/// Puts back a lock Redis removed while its lease ran (see `kept`), so
/// the command finds it where it was. One load when nothing is kept: the
/// clocks are read only when something is.
pub fn restore_kept(ctx: Ctx, key: &Key, key_name: &Arg) {
    if kept::any() {
        kept::restore(ctx, key, key_name, ctx.selected_db(), crate::clock::now());
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
    /// The request does not fit the key (its kind, an upgrade beside
    /// other holders): an error naming why.
    Refused(CString),
}

pub use crate::core::grant::Grant;

/// Gives the lock at `key` to `owner` if `want` fits what holds it now,
/// and propagates the grant. `waiting_ahead`: others wait in the key's
/// line before this request, which then gets no new hold (a holder's own
/// re-grant, downgrade or upgrade is not new). Shared by ACQUIRE and by
/// the waiters' handoff.
#[allow(clippy::too_many_arguments)]
pub fn try_acquire(
    ctx: Ctx,
    key: &Key,
    key_name: &Arg,
    owner_arg: &Arg,
    ttl_ms: i64,
    fence: Token,
    want: Want,
    waiting_ahead: bool,
    by: By,
) -> Attempt {
    let owner = owner_arg.bytes();
    let now = crate::clock::now();
    let slot = slot(key, now, Look::Held);
    if want.shared || matches!(slot, Slot::Shared(_)) {
        return try_shared(ctx, key, key_name, owner_arg, Request { ttl_ms, fence, want, waiting_ahead }, slot, now);
    }
    // The rules are the core's (`grant::acquire_exclusive`, checked against
    // `grant::Lock`); what follows only reads the key and carries out the
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
            let deadline = key.deadline_ms().map_or_else(|| now.wall.saturating_add(ttl_ms), |at| at.min(longest));
            converted = Some(Lease::until(Some(deadline), now));
            OneHolder::Free
        }
        Slot::Free => OneHolder::Free,
    };
    let ahead = waiting_ahead && converted.is_none();
    let token = match grant::acquire_exclusive(held, fence, ahead, |min| COUNTER.issue(min)) {
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
            let lease = Lease::starting(now, ttl_ms);
            if !key.expire_at(lease.mirror) {
                return Attempt::Failed(c"ERR could not set the lease");
            }
            lock.set_lease(lease);
            propagate::granted(ctx, key_name, owner_arg, token, lease.mirror);
            waiters::lease_changed(ctx, key_name.bytes(), lease.end);
            return Attempt::Granted(token, Grant::Regrant);
        }
        Outcome::Granted(token, _) => token,
    };
    let lease = converted.unwrap_or_else(|| Lease::starting(now, ttl_ms));
    if !Lock::new(owner, token, lease).is_some_and(|lock| lock::store(key, lock)) {
        return Attempt::Failed(c"ERR could not store the lock");
    }
    if !key.expire_at(lease.mirror) {
        lock::delete(key);
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

/// A request's terms, as `try_acquire` takes them.
#[derive(Clone, Copy)]
struct Request {
    ttl_ms: i64,
    fence: Token,
    want: Want,
    waiting_ahead: bool,
}

const TOKENS_EXHAUSTED: &CStr = c"ERR fencing token space exhausted";

/// The error for a request that does not fit the key's kind.
fn wrong_kind(what: &str) -> Attempt {
    Attempt::Refused(CString::new(format!("ERR wrong lock kind: the key is {what}")).unwrap_or_default())
}

/// A shared request, or any request on a key held shared: the grant core
/// decides; this stores, sets the key's TTL and propagates.
fn try_shared(ctx: Ctx, key: &Key, key_name: &Arg, owner_arg: &Arg, req: Request, slot: Slot<'_>, now: Now) -> Attempt {
    let owner = owner_arg.bytes();
    match slot {
        Slot::WrongType => Attempt::WrongType,
        Slot::PlainString(_) => wrong_kind("a plain-string lock (exclusive only)"),
        Slot::Held(_) if req.want.limit.is_some() => wrong_kind(&Kind::ReadWrite.to_string()),
        Slot::Held(lock) if !lock.is_held_by(owner) => Attempt::Held,
        Slot::Free if req.waiting_ahead => Attempt::Held,
        // A downgrade, or a new group: either way one holder, a new token.
        Slot::Held(_) | Slot::Free => {
            let downgrade = !matches!(slot, Slot::Free);
            let Some(token) = COUNTER.issue(req.fence) else {
                return Attempt::Failed(TOKENS_EXHAUSTED);
            };
            let kind = if downgrade { Kind::ReadWrite } else { Kind::of(req.want.limit) };
            let mut fresh = Group::new(kind);
            fresh.lock.holders.push(Holder { owner: owner.into(), token, end: now.mono.saturating_add(req.ttl_ms) });
            let deadline = fresh.key_deadline(now);
            fresh.mirrored(deadline);
            if !lock::store_group(key, fresh) {
                return Attempt::Failed(c"ERR could not store the lock");
            }
            if deadline != lease::NO_TTL && !key.expire_at(deadline) {
                lock::delete(key);
                return Attempt::Failed(c"ERR could not set the lease");
            }
            let limit = if downgrade { 0 } else { req.want.limit.unwrap_or(0) };
            let holder_deadline = now.wall.saturating_add(req.ttl_ms);
            propagate::shared_granted(ctx, key_name, owner, token, holder_deadline, limit, deadline);
            Attempt::Granted(token, if downgrade { Grant::Downgrade } else { Grant::New })
        }
        Slot::Shared(group) => {
            let owner_box: group::Owner = owner.into();
            let ask = grant::Ask { owner: &owner_box, mode: req.want.mode(), limit: req.want.limit, ttl_ms: req.ttl_ms, fence: req.fence };
            match group.lock.acquire(&ask, now.mono, req.waiting_ahead, |min| COUNTER.issue(min)) {
                Outcome::Held => Attempt::Held,
                Outcome::Refused(Refusal::WrongKind(kind)) => wrong_kind(&kind.to_string()),
                Outcome::Refused(Refusal::UpgradeWithOthers) => Attempt::Refused(
                    c"ERR upgrade refused: other holders share the lock; release the shared hold and ask again, exclusive".into(),
                ),
                Outcome::Refused(Refusal::TokensExhausted) => Attempt::Failed(TOKENS_EXHAUSTED),
                Outcome::Granted(token, Grant::Upgrade) => {
                    let lease = Lease::starting(now, req.ttl_ms);
                    if !Lock::new(owner, token, lease).is_some_and(|lock| lock::store(key, lock)) {
                        return Attempt::Failed(c"ERR could not store the lock");
                    }
                    if !key.expire_at(lease.mirror) {
                        lock::delete(key);
                        return Attempt::Failed(c"ERR could not set the lease");
                    }
                    propagate::granted(ctx, key_name, owner_arg, token, lease.mirror);
                    waiters::lease_changed(ctx, key_name.bytes(), lease.end);
                    Attempt::Granted(token, Grant::Upgrade)
                }
                Outcome::Granted(token, how) => {
                    let deadline = group.key_deadline(now);
                    if deadline != group.key_mirror() && deadline != lease::NO_TTL && !key.expire_at(deadline) {
                        if how == Grant::New {
                            group.lock.release(&owner_box, now.mono);
                        }
                        return Attempt::Failed(c"ERR could not set the lease");
                    }
                    group.mirrored(deadline);
                    let holder_deadline = now.wall.saturating_add(req.ttl_ms);
                    propagate::shared_granted(ctx, key_name, owner, token, holder_deadline, group.limit(), deadline);
                    if let Some(end) = group.earliest_end(now) {
                        waiters::lease_changed(ctx, key_name.bytes(), end);
                    }
                    Attempt::Granted(token, how)
                }
            }
        }
    }
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
    let want = Want { shared: req.shared, limit: req.limit };
    let waiting_ahead = waiters::count_in(ctx, req.key.bytes()) > 0;
    match try_acquire(ctx, &key, req.key, req.owner_arg, req.ttl_ms, req.fence, want, waiting_ahead, By::Command) {
        Attempt::Granted(token, how) => {
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
            Some(timeout) if may_block(ctx) => waiters::enqueue(ctx, &key, req.key, req.owner_arg, req.ttl_ms, req.fence, want, timeout),
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
        restore_kept(ctx, &key, req.key);
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
    lock::delete(&key);
    propagate::released(ctx, req.key);
    serve_after_release(ctx, &key, req.key);
    ctx.reply_integer(1)
}

fn serve_after_release(ctx: Ctx, key: &Key, key_name: &Arg) {
    if let Some(db) = waiters::queued_in(ctx, key_name.bytes()) {
        // RELEASE frees memory and runs under OOM; the handoff is a grant,
        // which ACQUIRE (deny-oom) could not make now.
        if ctx.has_flags(raw::REDISMODULE_CTX_FLAGS_OOM) {
            waiters::defer(db, key_name.bytes(), gate::Refusal::OutOfMemory);
        } else {
            waiters::serve(ctx, key, db, key_name, Cause::Release);
        }
    }
}

/// Ends one shared holder's hold. The key goes with the last holder, and
/// that travels as DEL: holders whose lease ended here may still be
/// stored on a replica, which must drop the key all the same.
fn release_shared(ctx: Ctx, key: &Key, key_name: &Arg, owner: &[u8], group: &mut Group, now: Now, look: Look) -> c_int {
    if look != Look::AsStored {
        group.lock.expire(now.mono);
    }
    let before = group.lock.holders.len();
    group.lock.holders.retain(|h| *h.owner != *owner);
    if group.lock.holders.len() == before {
        stats::RELEASE_REFUSED.bump();
        return ctx.reply_integer(0);
    }
    stats::RELEASE_DONE.bump();
    if group.lock.holders.is_empty() {
        lock::delete(key);
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
    restore_kept(ctx, &key, req.key);
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
    waiters::lease_changed(ctx, req.key.bytes(), lease.end);
    stats::EXTEND_DONE.bump();
    ctx.reply_integer(1)
}

/// One shared holder's new lease. The key's TTL grows with it, never
/// shrinks (see `group`); the extension travels as that holder's grant.
fn extend_shared(ctx: Ctx, key: &Key, key_name: &Arg, owner: &[u8], ttl_ms: i64, group: &mut Group, now: Now) -> c_int {
    let Some(holder) = group.lock.holders.iter_mut().find(|h| *h.owner == *owner && h.end > now.mono) else {
        stats::EXTEND_REFUSED.bump();
        return ctx.reply_integer(0);
    };
    holder.end = now.mono.saturating_add(ttl_ms);
    let token = holder.token;
    let deadline = group.key_deadline(now);
    if deadline != group.key_mirror() && deadline != lease::NO_TTL && !key.expire_at(deadline) {
        return ctx.reply_error(c"ERR could not set the lease");
    }
    group.mirrored(deadline);
    propagate::shared_granted(ctx, key_name, owner, token, now.wall.saturating_add(ttl_ms), group.limit(), deadline);
    if let Some(end) = group.earliest_end(now) {
        waiters::lease_changed(ctx, key_name.bytes(), end);
    }
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
            let kept = kept::any().then(|| {
                kept::peek(ctx.selected_db(), key_name.bytes(), now, |peek| {
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
