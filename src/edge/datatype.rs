//! The lock data type as Redis sees it: its registration and every
//! callback (RDB save and load, AOF rewrite, memory usage, digest, copy,
//! free, unlink, and the fencing counter as RDB aux data). The values
//! themselves are `value::Exclusive` and `group::Group`; this is where
//! Redis hands them over as raw pointers, and the only place that does.

use std::ffi::{c_char, c_int, c_void};
use std::fmt;
use std::mem::size_of;
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};

use redis_module::{native_types::RedisType, raw};

use crate::api::{self, rm, Piece, RedisModuleIO, RedisModuleString, ServerInfo};
use crate::args::{self, ApplyShared};
use crate::core::grant::Holder;
use crate::core::lease::{Lease, Now, NO_TTL};
use crate::core::stored::{self, Origin, StoredHolder};
use crate::keys::group::Group;
use crate::keys::value::Exclusive;
use crate::server::fencing::{Token, COUNTER};
use crate::{change, keys::rescue, server::clock, server::fencing, server::quarantine, waiters};

/// The data type's name: exactly 9 characters, as Redis requires.
const TYPE_NAME: &str = "redislock";

/// RDB encoding of a lock. Version 1: owner (string buffer), token
/// (signed). Version 2: a shape (unsigned) first; 0 is an exclusive lock
/// as in version 1, 1 a shared group: limit (0 for a read-write lock),
/// holder count, then owner, token and wall-clock deadline (0: none) per
/// holder (the running ones, or the one whose lease ended last when none
/// runs: earlier versions saved such a group without holders); 2 a
/// semaphore some holder of which takes several permits (`PERMITS k`), as
/// 1 with each holder's permits after its deadline. A new shape rather
/// than a new version: a module that knows only shapes 0 and 1 still
/// loads every file in which nobody holds several permits.
/// 3: an exclusive lock with a value (`VALUE`, `LOCK.PROCLAIM`), as 0
/// with the value after the token; a lock without one is still saved as
/// 0, so a module that knows no values loads every file without them.
/// 4: a semaphore LOCK.RESIZE resized (group encoding 3): as 2 (each
/// holder with its permits), the shape itself the resized mark; its
/// holders may take more than the limit. A shape, not a version: Redis
/// stamps one encoding version per data type on every value and on the
/// aux field, so a version 3 would make every file unreadable to a module
/// that knows 2, where this leaves it every file without a resized
/// semaphore.
/// 5: a group some holder of which stores a value (`SHARED ... VALUE`, a
/// group's members): limit, resized mark (0 or 1), holder count, then per
/// holder owner, token, deadline, permits and value (empty: none). Written
/// only then, for the same reason: a group without values is saved as 1, 2
/// or 4, and a module that knows no shape 5 refuses one by its number.
/// The resized mark (shapes 5 and 6, `stored::resized_mark`) keeps the
/// largest limit in force since the group was created: 0 not resized, 1
/// resized with the largest its limit (what every file before held), and
/// m from 2 up resized with largest m (above the limit).
/// 6: a resized semaphore whose largest limit is above its limit, without
/// values: as 4 with the mark after the limit. Written only then: a
/// resized semaphore whose largest is its limit is still shape 4, which a
/// module that knows no largest limit loads.
const ENCODING_VERSION: c_int = 2;
const SHAPE_EXCLUSIVE: u64 = 0;
const SHAPE_SHARED: u64 = 1;
const SHAPE_WEIGHTED: u64 = 2;
const SHAPE_VALUED: u64 = 3;
const SHAPE_RESIZED: u64 = 4;
const SHAPE_MEMBERS: u64 = 5;
const SHAPE_LARGEST: u64 = 6;

pub static LOCK_TYPE: RedisType = RedisType::new(
    TYPE_NAME,
    ENCODING_VERSION,
    raw::RedisModuleTypeMethods {
        // Version 4 is what Redis 7.0 knows; the fields used are all older.
        version: 4,
        rdb_load: Some(rdb_load),
        rdb_save: Some(rdb_save),
        aof_rewrite: Some(aof_rewrite),
        mem_usage: Some(mem_usage),
        digest: Some(digest),
        free: Some(free),
        aux_load: Some(aux_load),
        aux_save: Some(aux_save),
        aux_save_triggers: raw::REDISMODULE_AUX_BEFORE_RDB as c_int,
        free_effort: None,
        unlink: None,
        copy: Some(copy),
        defrag: None,
        mem_usage2: None,
        free_effort2: None,
        unlink2: Some(unlink),
        copy2: None,
        aux_save2: None,
    },
);

unsafe extern "C" fn free(value: *mut c_void) {
    if Group::is_tagged(value) {
        drop(Group::from_raw(value));
    } else {
        drop(Exclusive::from_raw(value));
    }
}

/// The key left the keyspace (DEL, UNLINK, overwrite, expiry, eviction):
/// whoever waits for it may go ahead, unless the lock is kept because its
/// lease still runs (see `rescue`).
unsafe extern "C" fn unlink(ctx: *mut raw::RedisModuleKeyOptCtx, value: *const c_void) {
    let db = rm!(RedisModule_GetDbIdFromOptCtx(ctx) else -1);
    let key = rm!(RedisModule_GetKeyNameFromOptCtx(ctx) else ptr::null());
    if db >= 0 && !key.is_null() {
        // SAFETY: Redis hands a live key name for the callback's duration.
        let name = unsafe { api::string_bytes(key.cast_mut()) };
        let stepped = if let Some(lock) = Exclusive::borrow(value.cast_mut()) {
            rescue::lock_removed(db, name, &lock)
        } else if let Some(group) = Group::borrow(value.cast_mut()) {
            rescue::group_removed(db, name, group)
        } else {
            false
        };
        if stepped {
            change::restore_stepped();
        }
        waiters::key_unlinked(db, name);
    }
}

unsafe extern "C" fn copy(_from: *mut RedisModuleString, _to: *mut RedisModuleString, value: *const c_void) -> *mut c_void {
    if let Some(group) = Group::borrow(value.cast_mut()) {
        return Box::new(group.duplicate()).into_raw();
    }
    match Exclusive::borrow(value.cast_mut()).and_then(|lock| lock.duplicate()) {
        Some(copy) => copy.into_raw(),
        None => ptr::null_mut(),
    }
}

/// The allocation every server makes around a module value (its type and
/// value pointers) and leaves out of MEMORY USAGE.
const MODULE_VALUE_WRAPPER: usize = 2 * size_of::<*mut c_void>();

/// The server's object header (`robj`: type, encoding, lru, refcount,
/// pointer) that holds the module value in the keyspace.
const VALUE_OBJECT_HEADER: usize = 16;

/// Whether MEMORY USAGE leaves out the object holding a module value.
/// Redis before 8 counts a string's object (its embstr allocation) but
/// only `mem_usage` for a module value; Redis 8 and Valkey 8 count the
/// object themselves. Decided once at load from INFO server.
static OBJECT_UNCOUNTED: AtomicBool = AtomicBool::new(false);

/// Records, from the server's name and version, whether `mem_usage` must
/// add the object header for MEMORY USAGE to show what a lock costs.
pub fn learn_memory_accounting(info: &ServerInfo) {
    let valkey = info.text(c"valkey_version").is_some();
    let redis_major = info.text(c"redis_version").and_then(|v| v.split('.').next().and_then(|m| m.parse::<u32>().ok()));
    OBJECT_UNCOUNTED.store(!valkey && redis_major.is_some_and(|m| m < 8), Ordering::Relaxed);
}

/// Bytes this lock costs beyond the key: its allocation, as the allocator
/// counts it, the server's wrapper around it and, where MEMORY USAGE
/// leaves it out, the object holding that wrapper. Without them a lock
/// looked cheaper next to the same plain string than it is.
unsafe extern "C" fn mem_usage(value: *const c_void) -> usize {
    let object = if OBJECT_UNCOUNTED.load(Ordering::Relaxed) { VALUE_OBJECT_HEADER } else { 0 };
    if let Some(group) = Group::borrow(value.cast_mut()) {
        return group.bytes() + MODULE_VALUE_WRAPPER + object;
    }
    match Exclusive::borrow(value.cast_mut()) {
        Some(lock) => {
            let own = rm!(RedisModule_MallocSize(value.cast_mut()) else lock.bytes());
            own + MODULE_VALUE_WRAPPER + object
        }
        None => 0,
    }
}

unsafe extern "C" fn digest(md: *mut raw::RedisModuleDigest, value: *mut c_void) {
    if let Some(group) = Group::borrow(value) {
        rm!(RedisModule_DigestAddLongLong(md, i64::from(group.limit())) else ());
        if let Some(largest) = group.resized_largest() {
            // No limit is negative: the mark cannot be taken for one.
            rm!(RedisModule_DigestAddLongLong(md, -1) else ());
            if largest > group.limit() {
                rm!(RedisModule_DigestAddLongLong(md, -i64::from(largest)) else ());
            }
        }
        for holder in &group.holding.holders {
            rm!(RedisModule_DigestAddStringBuffer(md, holder.owner.as_ptr().cast::<c_char>(), holder.owner.len()) else ());
            rm!(RedisModule_DigestAddLongLong(md, holder.token) else ());
            if holder.permits != 1 {
                rm!(RedisModule_DigestAddLongLong(md, i64::from(holder.permits)) else ());
            }
            let text = holder.owner.value();
            if !text.is_empty() {
                rm!(RedisModule_DigestAddStringBuffer(md, text.as_ptr().cast::<c_char>(), text.len()) else ());
            }
        }
        rm!(RedisModule_DigestEndSequence(md) else ());
    } else if let Some(lock) = Exclusive::borrow(value) {
        let owner = lock.owner();
        rm!(RedisModule_DigestAddStringBuffer(md, owner.as_ptr().cast::<c_char>(), owner.len()) else ());
        rm!(RedisModule_DigestAddLongLong(md, lock.token()) else ());
        let text = lock.value();
        if !text.is_empty() {
            rm!(RedisModule_DigestAddStringBuffer(md, text.as_ptr().cast::<c_char>(), text.len()) else ());
        }
        rm!(RedisModule_DigestEndSequence(md) else ());
    }
}

unsafe extern "C" fn rdb_save(rdb: *mut RedisModuleIO, value: *mut c_void) {
    if let Some(group) = Group::borrow(value) {
        let now = clock::now();
        let saved: Vec<_> = stored::holders_to_save(&group.holding.holders, now.mono).collect();
        let resized = group.resized_largest();
        let mark = stored::resized_mark(resized.is_some(), group.limit(), resized.unwrap_or(0));
        let valued = saved.iter().any(|h| h.owner.has_value());
        let weighted = valued || resized.is_some() || saved.iter().any(|h| h.permits > 1);
        let shape = match (valued, resized.is_some(), weighted) {
            (true, _, _) => SHAPE_MEMBERS,
            (false, true, _) if mark > 1 => SHAPE_LARGEST,
            (false, true, _) => SHAPE_RESIZED,
            (false, false, true) => SHAPE_WEIGHTED,
            (false, false, false) => SHAPE_SHARED,
        };
        rm!(RedisModule_SaveUnsigned(rdb, shape) else ());
        rm!(RedisModule_SaveUnsigned(rdb, u64::from(group.limit())) else ());
        if valued || shape == SHAPE_LARGEST {
            rm!(RedisModule_SaveUnsigned(rdb, mark) else ());
        }
        rm!(RedisModule_SaveUnsigned(rdb, saved.len() as u64) else ());
        for holder in saved {
            rm!(RedisModule_SaveStringBuffer(rdb, holder.owner.as_ptr().cast::<c_char>(), holder.owner.len()) else ());
            rm!(RedisModule_SaveSigned(rdb, holder.token) else ());
            rm!(RedisModule_SaveSigned(rdb, saved_deadline(holder.end, now)) else ());
            if weighted {
                rm!(RedisModule_SaveUnsigned(rdb, u64::from(holder.permits)) else ());
            }
            if valued {
                let text = holder.owner.value();
                rm!(RedisModule_SaveStringBuffer(rdb, text.as_ptr().cast::<c_char>(), text.len()) else ());
            }
        }
    } else if let Some(lock) = Exclusive::borrow(value) {
        let text = lock.value();
        rm!(RedisModule_SaveUnsigned(rdb, if text.is_empty() { SHAPE_EXCLUSIVE } else { SHAPE_VALUED }) else ());
        let owner = lock.owner();
        rm!(RedisModule_SaveStringBuffer(rdb, owner.as_ptr().cast::<c_char>(), owner.len()) else ());
        rm!(RedisModule_SaveSigned(rdb, lock.token()) else ());
        if !text.is_empty() {
            rm!(RedisModule_SaveStringBuffer(rdb, text.as_ptr().cast::<c_char>(), text.len()) else ());
        }
    }
}

/// A holder's deadline as a save writes it (Unix ms): an ended lease's in
/// the past but never 0, which says "no deadline" (for a holder without an
/// end, which no command makes).
fn saved_deadline(end: i64, now: Now) -> i64 {
    match crate::core::lease::wall_deadline(end, now) {
        NO_TTL => 0,
        at => at.max(1),
    }
}

/// Loads a lock (RDB, DEBUG RELOAD, RESTORE, MIGRATE, full sync) if it is
/// one the commands make (`stored`; a load of this server's own data also
/// takes what earlier versions saved), and logs why not otherwise: Redis
/// then answers RESTORE `Bad data format`. Raises the counter to its token
/// so this instance never issues that token again. A RESTORE from a
/// client (not a load of this server's own files, nor its master's) may
/// not bring a token beyond the lead bound.
unsafe extern "C" fn rdb_load(rdb: *mut RedisModuleIO, encver: c_int) -> *mut c_void {
    let origin = if quarantine::loading() { Origin::OwnData } else { Origin::Client };
    match load(rdb, encver, origin) {
        Some(value) => value,
        None => {
            // A refusal for what the value says was logged where it was
            // made; this is one the reads themselves could not complete.
            if io_failed(rdb) {
                refuse("a truncated or malformed value", origin);
            }
            ptr::null_mut()
        }
    }
}

/// `rdb_load`'s work: the value, or `None` (logged, unless the reads
/// failed).
unsafe fn load(rdb: *mut RedisModuleIO, encver: c_int, origin: Origin) -> Option<*mut c_void> {
    let shape = match encver {
        1 => SHAPE_EXCLUSIVE,
        ENCODING_VERSION => {
            let shape = rm!(RedisModule_LoadUnsigned(rdb) else u64::MAX);
            if io_failed(rdb) {
                return None;
            }
            shape
        }
        _ => return refused(format_args!("encoding version {encver}, which this module does not know"), origin),
    };
    let layout = match shape {
        SHAPE_SHARED => Some(Layout::Plain),
        SHAPE_WEIGHTED => Some(Layout::Weighted { resized: false }),
        SHAPE_RESIZED => Some(Layout::Weighted { resized: true }),
        SHAPE_MEMBERS => Some(Layout::Members),
        SHAPE_LARGEST => Some(Layout::Marked),
        _ => None,
    };
    if let Some(layout) = layout {
        return load_group(rdb, layout, origin).map(|group| Box::new(group).into_raw());
    }
    if shape != SHAPE_EXCLUSIVE && shape != SHAPE_VALUED {
        return refused(format_args!("shape {shape}, which this module does not know"), origin);
    }
    let lock = load_lock(rdb, shape == SHAPE_VALUED, origin)?;
    if !within_lead(rdb, lock.token(), "the lock's token") {
        return None;
    }
    COUNTER.observe(lock.token());
    Some(lock.into_raw())
}

/// Whether a loaded value whose highest token is `token` may enter: this
/// server's own data and its master's always; a client's RESTORE only
/// within the bound on tokens (`fencing::check_lead`), logged otherwise
/// as `what` (`"the lock's token"`).
pub(super) unsafe fn within_lead(rdb: *mut RedisModuleIO, token: Token, what: &str) -> bool {
    if quarantine::loading() {
        return true;
    }
    match fencing::check_lead(token) {
        Ok(()) => true,
        // Asked only past the bound: the context it takes costs an
        // ordinary RESTORE nothing.
        Err(_) if restored_by_master(rdb) => true,
        Err(ceiling) => {
            api::log(None, c"warning", &fencing::lead_error(&format!("RESTORE refused: {what}"), ceiling));
            false
        }
    }
}

/// Whether a RESTORE outside loading came from this replica's master,
/// which bounded the token when its client brought it. Redis tells a
/// data type callback nothing about the client, but a read-only replica
/// runs RESTORE for its master alone. A writable replica cannot tell its
/// master from a client here, so it keeps the bound (and its log says so).
/// Only reached for a token beyond the bound: the context this allocates
/// costs nothing on an ordinary RESTORE.
unsafe fn restored_by_master(rdb: *mut RedisModuleIO) -> bool {
    let ctx = rm!(RedisModule_GetContextFromIO(rdb) else ptr::null_mut());
    if ctx.is_null() {
        return false;
    }
    let flags = rm!(RedisModule_GetContextFlags(ctx) else 0);
    let read_only_replica = (raw::REDISMODULE_CTX_FLAGS_SLAVE | raw::REDISMODULE_CTX_FLAGS_READONLY) as c_int;
    flags & read_only_replica == read_only_replica
}

/// Emits the lock as its replicated form with no deadline; Redis follows
/// every key's rewrite with its own `PEXPIREAT`.
unsafe extern "C" fn aof_rewrite(aof: *mut RedisModuleIO, key: *mut RedisModuleString, value: *mut c_void) {
    if let Some(group) = Group::borrow(value) {
        // Each holder with its own deadline; Redis's PEXPIREAT for the key
        // that follows is the group's own TTL, which caps nobody.
        let now = clock::now();
        let key_deadline_ms = group.key_deadline(now).max(0);
        for holder in group.live(now) {
            let deadline = crate::core::lease::wall_deadline(holder.end, now).max(0);
            let terms = ApplyShared { limit: group.limit(), key_deadline_ms, permits: holder.permits };
            let encoded = args::encode_apply(Piece::Bytes(&holder.owner), holder.token, deadline, Some(terms), holder.owner.value());
            // SAFETY: the handles of this callback.
            unsafe { api::emit_aof(aof, args::APPLY, key, encoded.pieces()) };
        }
        if let Some(largest) = group.resized_largest() {
            // After its holders: the resize marks the group they made, and
            // keeps the permits they take. A largest limit above the limit
            // goes first as a resize to it (a resize keeps the largest).
            if largest > group.limit() {
                // SAFETY: the handles of this callback.
                unsafe { api::emit_aof(aof, args::RESIZE, key, &[Piece::Int(i64::from(largest))]) };
            }
            // SAFETY: the handles of this callback.
            unsafe { api::emit_aof(aof, args::RESIZE, key, &[Piece::Int(i64::from(group.limit()))]) };
        }
    } else if let Some(lock) = Exclusive::borrow(value) {
        let (owner, text) = (lock.owner(), lock.value());
        let encoded = args::encode_apply(Piece::Bytes(&owner), lock.token(), 0, None, text);
        // SAFETY: the handles of this callback.
        unsafe { api::emit_aof(aof, args::APPLY, key, encoded.pieces()) };
    }
}

unsafe extern "C" fn aux_save(rdb: *mut RedisModuleIO, when: c_int) {
    if when == raw::REDISMODULE_AUX_BEFORE_RDB as c_int {
        rm!(RedisModule_SaveSigned(rdb, COUNTER.current()) else ());
    }
}

unsafe extern "C" fn aux_load(rdb: *mut RedisModuleIO, encver: c_int, when: c_int) -> c_int {
    if !(1..=ENCODING_VERSION).contains(&encver) || when != raw::REDISMODULE_AUX_BEFORE_RDB as c_int {
        return api::ERR;
    }
    let counter = rm!(RedisModule_LoadSigned(rdb) else 0);
    if io_failed(rdb) {
        return api::ERR;
    }
    COUNTER.observe(counter);
    quarantine::loaded_counter(counter);
    api::OK
}

unsafe fn io_failed(rdb: *mut RedisModuleIO) -> bool {
    rm!(RedisModule_IsIOError(rdb) else 1) != 0
}

/// Logs why a value was refused: Redis then answers RESTORE `Bad data
/// format` (or, loading its own files, stops).
fn refuse(why: impl fmt::Display, origin: Origin) {
    let how = match origin {
        Origin::Client => "restored",
        Origin::OwnData => "loaded",
    };
    api::log(None, c"warning", &format!("refused a {how} lock value: {why}"));
}

/// `refuse`, and `None` for the loader to return.
fn refused<T>(why: impl fmt::Display, origin: Origin) -> Option<T> {
    refuse(why, origin);
    None
}

/// Reads owner and token, and the value when `valued`; `None` on an I/O
/// error or a lock no command makes (`stored::check_exclusive`).
unsafe fn load_lock(rdb: *mut RedisModuleIO, valued: bool, origin: Origin) -> Option<Exclusive> {
    let owner = load_buffer(rdb)?;
    let token = rm!(RedisModule_LoadSigned(rdb) else 0);
    if io_failed(rdb) {
        return None;
    }
    let text = if valued { load_buffer(rdb)? } else { Box::default() };
    if let Err(why) = stored::check_exclusive(&owner, token, &text, origin) {
        return refused(why, origin);
    }
    // The lease is the key's TTL, which Redis loads beside the value.
    Exclusive::with_value(&owner, &text, token, Lease::UNKNOWN, clock::mono_ms())
}

/// Reads a string buffer; `None` on an I/O error.
unsafe fn load_buffer(rdb: *mut RedisModuleIO) -> Option<Box<[u8]>> {
    let mut len = 0usize;
    let p = rm!(RedisModule_LoadStringBuffer(rdb, &mut len) else ptr::null_mut());
    if io_failed(rdb) || p.is_null() {
        return None;
    }
    let bytes: Box<[u8]> = std::slice::from_raw_parts(p.cast::<u8>(), len).into();
    rm!(RedisModule_Free(p.cast()) else ());
    Some(bytes)
}

/// How a group's shape lays out its holders.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// Shape 1: owner, token, deadline.
    Plain,
    /// Shapes 2 and 4 (`resized`): each holder with its permits.
    Weighted { resized: bool },
    /// Shape 5: the resized mark after the limit, each holder with its
    /// permits and value.
    Members,
    /// Shape 6: the resized mark after the limit, each holder with its
    /// permits.
    Marked,
}

/// Reads a group's holders as `layout` lays them out, raising
/// the counter to each token (as for an exclusive lock, with the same
/// bound on a client's RESTORE); `None` on an I/O error or a group no
/// command makes (`stored::check_group`, and each value bounded by
/// `stored::check_member_value`). The holders are read as the
/// count says until the payload ends, which bounds what they allocate.
unsafe fn load_group(rdb: *mut RedisModuleIO, layout: Layout, origin: Origin) -> Option<Group> {
    let limit = rm!(RedisModule_LoadUnsigned(rdb) else u64::MAX);
    // The resized mark, bounded by `check_group` (see `stored::resized_mark`).
    let mark = match layout {
        Layout::Plain => 0,
        Layout::Weighted { resized } => u64::from(resized),
        Layout::Members | Layout::Marked => rm!(RedisModule_LoadUnsigned(rdb) else u64::MAX),
    };
    let count = rm!(RedisModule_LoadUnsigned(rdb) else u64::MAX);
    if io_failed(rdb) {
        return None;
    }
    let mut decoded = Vec::new();
    let mut values = Vec::new();
    for _ in 0..count {
        let owner = load_buffer(rdb)?;
        let token = rm!(RedisModule_LoadSigned(rdb) else -1);
        let deadline_ms = rm!(RedisModule_LoadSigned(rdb) else -1);
        let permits = if layout == Layout::Plain { 1 } else { rm!(RedisModule_LoadUnsigned(rdb) else 0) };
        if io_failed(rdb) {
            return None;
        }
        if layout == Layout::Members {
            let text = load_buffer(rdb)?;
            if let Err(why) = stored::check_member_value(&text) {
                return refused(why, origin);
            }
            values.push(text);
        }
        decoded.push(StoredHolder { owner, token, deadline_ms, permits });
    }
    let now = clock::now();
    let kind = match stored::check_group(limit, mark, &decoded, now.wall, origin) {
        Ok(kind) => kind,
        Err(why) => return refused(why, origin),
    };
    let highest = decoded.iter().map(|h| h.token).max().unwrap_or(0);
    if !within_lead(rdb, highest, "the lock's token") {
        return None;
    }
    let mut holders = Vec::with_capacity(decoded.len());
    let mut values = values.into_iter();
    for holder in decoded {
        COUNTER.observe(holder.token);
        // `check_group` bounded the permits (by MAX_LIMIT at most).
        let permits = u32::try_from(holder.permits).ok()?;
        let end = Lease::until(Some(holder.deadline_ms), now).end;
        let mut owner = crate::keys::group::Owner::from(holder.owner);
        if let Some(text) = values.next() {
            owner.set_value(&text);
        }
        holders.push(Holder { owner, token: holder.token, end, since: now.mono, permits });
    }
    Some(Group::loaded(kind, holders))
}

/// At load, after Redis registered `LOCK_TYPE`: hands the registered type
/// to the glue (`value`); false if Redis did not register it.
pub fn remember_registered() -> bool {
    let registered = LOCK_TYPE.raw_type.try_borrow().map(|t| *t).unwrap_or(ptr::null_mut());
    crate::keys::value::remember_registered_type(registered)
}
