//! The lock value and its data type callbacks (RDB, AOF, memory, copy,
//! digest, and the fencing counter as RDB aux data).
//!
//! The value carries its lease on the monotonic clock beside the key's
//! Redis TTL (see `lease`): the TTL is what persistence, replication and
//! PTTL see, the monotonic end is what decides.

use std::alloc::{alloc, dealloc, handle_alloc_error, Layout};
use std::ffi::{c_char, c_int, c_void};
use std::marker::PhantomData;
use std::mem::{align_of, size_of, ManuallyDrop};
use std::ops::{Deref, DerefMut};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};

use redis_module::{native_types::RedisType, raw};

use crate::api::{self, rm, Key, RedisModuleIO, RedisModuleString, RedisModuleType};
use crate::core::lease::Lease;
use crate::fencing::{Token, COUNTER};
use crate::group::{self, Group};

/// The data type's name: exactly 9 characters, as Redis requires.
pub const TYPE_NAME: &str = "redislock";

/// RDB encoding of a lock. Version 1: owner (string buffer), token
/// (signed). Version 2: a shape (unsigned) first; 0 is an exclusive lock
/// as in version 1, 1 a shared group: limit (0 for a read-write lock),
/// holder count, then owner, token and wall-clock deadline (0: none) per
/// holder.
const ENCODING_VERSION: c_int = 2;
const SHAPE_EXCLUSIVE: u64 = 0;
const SHAPE_SHARED: u64 = 1;
/// Holders one loaded group may bring: LOCK.ACQUIRE lets a read-write lock
/// have any number, this only bounds what a corrupt payload can allocate.
const MAX_LOADED_HOLDERS: u64 = 1 << 24;

/// The fixed part of a lock allocation; the owner's bytes follow it.
#[repr(C)]
struct Header {
    token: Token,
    owner_len: usize,
    lease: Lease,
}

/// A lock value: token and owner in a single allocation, so a grant costs
/// one allocation and a held lock 16 bytes less than a token plus a boxed
/// owner. The data type stores it as a thin pointer.
pub struct Lock(NonNull<Header>);

impl Lock {
    fn layout(owner_len: usize) -> Option<Layout> {
        let size = size_of::<Header>().checked_add(owner_len)?;
        Layout::from_size_align(size, align_of::<Header>()).ok()
    }

    /// `None` only for an owner too large to allocate.
    pub fn new(owner: &[u8], token: Token, lease: Lease) -> Option<Lock> {
        let layout = Self::layout(owner.len())?;
        // SAFETY: the layout has a non-zero size (the header).
        let raw = unsafe { alloc(layout) }.cast::<Header>();
        let Some(header) = NonNull::new(raw) else {
            handle_alloc_error(layout);
        };
        // SAFETY: freshly allocated for a header plus `owner.len()` bytes.
        unsafe {
            header.as_ptr().write(Header { token, owner_len: owner.len(), lease });
            ptr::copy_nonoverlapping(owner.as_ptr(), header.as_ptr().add(1).cast::<u8>(), owner.len());
        }
        crate::stats::LOCKS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Some(Lock(header))
    }

    pub fn token(&self) -> Token {
        // SAFETY: the header is initialised for the lock's whole life.
        unsafe { self.0.as_ref().token }
    }

    pub fn set_token(&mut self, token: Token) {
        // SAFETY: as above; `&mut self` makes the write exclusive.
        unsafe { self.0.as_mut().token = token }
    }

    pub fn lease(&self) -> Lease {
        // SAFETY: as above.
        unsafe { self.0.as_ref().lease }
    }

    pub fn set_lease(&mut self, lease: Lease) {
        // SAFETY: as above.
        unsafe { self.0.as_mut().lease = lease }
    }

    pub fn owner(&self) -> &[u8] {
        // SAFETY: `owner_len` bytes follow the header, written in `new`.
        unsafe {
            let len = self.0.as_ref().owner_len;
            std::slice::from_raw_parts(self.0.as_ptr().add(1).cast::<u8>(), len)
        }
    }

    pub fn is_held_by(&self, owner: &[u8]) -> bool {
        self.owner() == owner
    }

    /// Hands the allocation to Redis as a module value.
    pub fn into_raw(self) -> *mut c_void {
        let raw = self.0.as_ptr().cast::<c_void>();
        std::mem::forget(self);
        raw
    }

    /// Takes back a value made by `into_raw`.
    ///
    /// # Safety
    /// `value` must come from `into_raw` and not be owned by anyone else.
    pub unsafe fn from_raw(value: *mut c_void) -> Option<Lock> {
        if Group::is_tagged(value) {
            return None;
        }
        NonNull::new(value.cast::<Header>()).map(Lock)
    }

    /// Borrows a value owned by Redis.
    ///
    /// # Safety
    /// `value` must be a lock stored by this module's type and outlive `'a`.
    pub unsafe fn borrow<'a>(value: *mut c_void) -> Option<LockRef<'a>> {
        Self::from_raw(value).map(|lock| LockRef(ManuallyDrop::new(lock), PhantomData))
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        crate::stats::LOCKS.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        // SAFETY: allocated in `new` with this very layout.
        unsafe {
            if let Some(layout) = Self::layout(self.0.as_ref().owner_len) {
                dealloc(self.0.as_ptr().cast::<u8>(), layout);
            }
        }
    }
}

/// A lock that Redis owns, borrowed for the length of a callback.
pub struct LockRef<'a>(ManuallyDrop<Lock>, PhantomData<&'a mut Lock>);

impl Deref for LockRef<'_> {
    type Target = Lock;
    fn deref(&self) -> &Lock {
        &self.0
    }
}

impl DerefMut for LockRef<'_> {
    fn deref_mut(&mut self) -> &mut Lock {
        &mut self.0
    }
}

/// The lock stored at an open key; `None` for any other value.
pub fn at(key: &Key) -> Option<LockRef<'_>> {
    if key.kind() != api::KeyKind::Module(registered_type()) {
        return None;
    }
    // SAFETY: the value belongs to our type, so it is a `Lock`, owned by
    // the key for as long as it is open.
    unsafe { Lock::borrow(key.module_value()) }
}

/// The group stored at an open key (a lock held shared). Redis owns the
/// value for as long as the key is open; the key API lends it through a
/// shared handle, as it does the exclusive lock's (`at`).
#[allow(clippy::mut_from_ref)]
pub fn group_at(key: &Key) -> Option<&mut Group> {
    if key.kind() != api::KeyKind::Module(registered_type()) {
        return None;
    }
    // SAFETY: the value belongs to our type; a tagged one is a `Group`,
    // owned by the key for as long as it is open.
    unsafe { Group::borrow(key.module_value()) }
}

/// Stores a group at an open key, replacing what it held (and its TTL).
pub fn store_group(key: &Key, group: Group) -> bool {
    let value = Box::new(group).into_raw();
    let _own = crate::kept::OwnRemoval::begin();
    // SAFETY: `value` is a tagged `Group` and the type is ours.
    if unsafe { key.set_module_value(registered_type(), value) } {
        return true;
    }
    // SAFETY: Redis did not take the value; it is still ours.
    drop(unsafe { Group::from_raw(value) });
    false
}

/// Stores `lock` at an open key, replacing what it held (and its TTL).
/// The value it replaces leaves by this module's decision, not as a lock
/// lost while its lease ran (see `kept`).
pub fn store(key: &Key, lock: Lock) -> bool {
    let value = lock.into_raw();
    let _own = crate::kept::OwnRemoval::begin();
    // SAFETY: `value` is a `Lock` and the type is ours.
    if unsafe { key.set_module_value(registered_type(), value) } {
        return true;
    }
    // SAFETY: Redis did not take the value; it is still ours.
    drop(unsafe { Lock::from_raw(value) });
    false
}

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

/// The registered type, copied out of `LOCK_TYPE` once at load so the hot
/// path compares a plain pointer.
static REGISTERED: AtomicPtr<RedisModuleType> = AtomicPtr::new(ptr::null_mut());

pub fn remember_registered_type() -> bool {
    let registered = LOCK_TYPE.raw_type.try_borrow().map(|t| *t).unwrap_or(ptr::null_mut());
    REGISTERED.store(registered, Ordering::Relaxed);
    !registered.is_null()
}

pub fn registered_type() -> *mut RedisModuleType {
    REGISTERED.load(Ordering::Relaxed)
}

unsafe extern "C" fn free(value: *mut c_void) {
    if Group::is_tagged(value) {
        drop(Group::from_raw(value));
    } else {
        drop(Lock::from_raw(value));
    }
}

/// Deletes an open lock key by this module's decision (a release).
pub fn delete(key: &Key) -> bool {
    let _own = crate::kept::OwnRemoval::begin();
    key.delete()
}

/// The key left the keyspace (DEL, UNLINK, overwrite, expiry, eviction):
/// whoever waits for it may go ahead, unless the lock is kept because its
/// lease still runs (see `kept`).
unsafe extern "C" fn unlink(ctx: *mut raw::RedisModuleKeyOptCtx, value: *const c_void) {
    let db = rm!(RedisModule_GetDbIdFromOptCtx(ctx) else -1);
    let key = rm!(RedisModule_GetKeyNameFromOptCtx(ctx) else ptr::null());
    if db >= 0 && !key.is_null() {
        // SAFETY: Redis hands a live key name for the callback's duration.
        let name = unsafe { api::string_bytes(key.cast_mut()) };
        if let Some(lock) = Lock::borrow(value.cast_mut()) {
            crate::kept::lock_removed(db, name, &lock);
        } else if let Some(group) = Group::borrow(value.cast_mut()) {
            crate::kept::group_removed(db, name, group);
        }
        crate::waiters::key_unlinked(db, name);
    }
}

unsafe extern "C" fn copy(_from: *mut RedisModuleString, _to: *mut RedisModuleString, value: *const c_void) -> *mut c_void {
    if let Some(group) = Group::borrow(value.cast_mut()) {
        return Box::new(group.duplicate()).into_raw();
    }
    match Lock::borrow(value.cast_mut()).and_then(|lock| Lock::new(lock.owner(), lock.token(), lock.lease())) {
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
pub fn learn_memory_accounting(info: &crate::api::ServerInfo) {
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
    match Lock::borrow(value.cast_mut()) {
        Some(lock) => {
            let own = rm!(RedisModule_MallocSize(value.cast_mut()) else size_of::<Header>() + lock.owner().len());
            own + MODULE_VALUE_WRAPPER + object
        }
        None => 0,
    }
}

unsafe extern "C" fn digest(md: *mut raw::RedisModuleDigest, value: *mut c_void) {
    if let Some(group) = Group::borrow(value) {
        rm!(RedisModule_DigestAddLongLong(md, i64::from(group.limit())) else ());
        for holder in &group.lock.holders {
            rm!(RedisModule_DigestAddStringBuffer(md, holder.owner.as_ptr().cast::<c_char>(), holder.owner.len()) else ());
            rm!(RedisModule_DigestAddLongLong(md, holder.token) else ());
        }
        rm!(RedisModule_DigestEndSequence(md) else ());
    } else if let Some(lock) = Lock::borrow(value) {
        let owner = lock.owner();
        rm!(RedisModule_DigestAddStringBuffer(md, owner.as_ptr().cast::<c_char>(), owner.len()) else ());
        rm!(RedisModule_DigestAddLongLong(md, lock.token()) else ());
        rm!(RedisModule_DigestEndSequence(md) else ());
    }
}

unsafe extern "C" fn rdb_save(rdb: *mut RedisModuleIO, value: *mut c_void) {
    if let Some(group) = Group::borrow(value) {
        let now = crate::clock::now();
        rm!(RedisModule_SaveUnsigned(rdb, SHAPE_SHARED) else ());
        rm!(RedisModule_SaveUnsigned(rdb, u64::from(group.limit())) else ());
        let live: Vec<_> = group.live(now).collect();
        rm!(RedisModule_SaveUnsigned(rdb, live.len() as u64) else ());
        for holder in live {
            rm!(RedisModule_SaveStringBuffer(rdb, holder.owner.as_ptr().cast::<c_char>(), holder.owner.len()) else ());
            rm!(RedisModule_SaveSigned(rdb, holder.token) else ());
            rm!(RedisModule_SaveSigned(rdb, group::wall_deadline(holder.end, now).max(0)) else ());
        }
    } else if let Some(lock) = Lock::borrow(value) {
        rm!(RedisModule_SaveUnsigned(rdb, SHAPE_EXCLUSIVE) else ());
        let owner = lock.owner();
        rm!(RedisModule_SaveStringBuffer(rdb, owner.as_ptr().cast::<c_char>(), owner.len()) else ());
        rm!(RedisModule_SaveSigned(rdb, lock.token()) else ());
    }
}

/// Loads a lock (RDB, DEBUG RELOAD, RESTORE, MIGRATE, full sync). Raises
/// the counter to its token so this instance never issues that token
/// again. A RESTORE from a client (not a load of this server's own files,
/// nor its master's) may not bring a token beyond the lead bound.
unsafe extern "C" fn rdb_load(rdb: *mut RedisModuleIO, encver: c_int) -> *mut c_void {
    let shape = match encver {
        1 => SHAPE_EXCLUSIVE,
        ENCODING_VERSION => {
            let shape = rm!(RedisModule_LoadUnsigned(rdb) else u64::MAX);
            if io_failed(rdb) {
                return ptr::null_mut();
            }
            shape
        }
        _ => return ptr::null_mut(),
    };
    if shape == SHAPE_SHARED {
        return load_group(rdb).map_or(ptr::null_mut(), |group| Box::new(group).into_raw());
    }
    if shape != SHAPE_EXCLUSIVE {
        return ptr::null_mut();
    }
    let Some(lock) = load_lock(rdb) else {
        return ptr::null_mut();
    };
    if !crate::quarantine::loading() {
        if let Err(ceiling) = crate::fencing::check_lead(lock.token()) {
            if !restored_by_master(rdb) {
                let reason = crate::fencing::lead_error("RESTORE refused: the lock's token", ceiling);
                api::log(None, c"warning", &reason);
                return ptr::null_mut();
            }
        }
    }
    COUNTER.observe(lock.token());
    lock.into_raw()
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
        let now = crate::clock::now();
        let key_deadline = group.key_deadline(now).max(0);
        for holder in group.live(now) {
            rm!(RedisModule_EmitAOF(
                aof,
                c"LOCK.APPLY".as_ptr(),
                c"sbllcll".as_ptr(),
                key,
                holder.owner.as_ptr().cast::<c_char>(),
                holder.owner.len(),
                holder.token,
                group::wall_deadline(holder.end, now).max(0),
                c"SHARED".as_ptr(),
                i64::from(group.limit()),
                key_deadline,
            ) else ());
        }
    } else if let Some(lock) = Lock::borrow(value) {
        let owner = lock.owner();
        rm!(RedisModule_EmitAOF(
            aof,
            c"LOCK.APPLY".as_ptr(),
            c"sbll".as_ptr(),
            key,
            owner.as_ptr().cast::<c_char>(),
            owner.len(),
            lock.token(),
            0i64,
        ) else ());
    }
}

/// After a load (RDB, AOF with an RDB preamble, a replica's full sync):
/// a loaded lock knows its lease only as the key's TTL, which Redis sets
/// beside the value. Each one's lease is read from that TTL now, as the
/// wall clock of the writer meant it, so a clock step or an eviction
/// before anyone touches the lock finds it running (see `kept`). One pass
/// over the keyspace, once per load.
pub fn learn_loaded_leases(ctx: api::Ctx) {
    let selected = ctx.selected_db();
    let now = crate::clock::now();
    for db in 0..ctx.databases() {
        if !ctx.select_db(db) {
            continue;
        }
        let cursor = rm!(RedisModule_ScanCursorCreate() else ptr::null_mut());
        if cursor.is_null() {
            break;
        }
        let mut now_data = now;
        while rm!(RedisModule_Scan(ctx.raw(), cursor, Some(learn_lease), (&mut now_data as *mut crate::core::lease::Now).cast()) else 0)
            != 0
        {}
        rm!(RedisModule_ScanCursorDestroy(cursor) else ());
    }
    ctx.select_db(selected);
}

unsafe extern "C" fn learn_lease(
    _ctx: *mut raw::RedisModuleCtx,
    _name: *mut RedisModuleString,
    key: *mut raw::RedisModuleKey,
    data: *mut c_void,
) {
    let Some(now) = data.cast::<crate::core::lease::Now>().as_ref() else { return };
    // The scan owns the key handle: borrowed, never closed here.
    let key = ManuallyDrop::new(Key::from_raw(key));
    if let Some(mut lock) = at(&key) {
        if lock.lease().end == crate::core::lease::UNKNOWN {
            lock.set_lease(Lease::until(key.deadline_ms(), *now));
        }
    } else if let Some(group) = group_at(&key) {
        group.judge(*now, key.deadline_ms());
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
    crate::quarantine::loaded_counter(counter);
    api::OK
}

unsafe fn io_failed(rdb: *mut RedisModuleIO) -> bool {
    rm!(RedisModule_IsIOError(rdb) else 1) != 0
}

/// Reads owner and token; `None` on an I/O error or invalid values.
unsafe fn load_lock(rdb: *mut RedisModuleIO) -> Option<Lock> {
    let mut len = 0usize;
    let p = rm!(RedisModule_LoadStringBuffer(rdb, &mut len) else ptr::null_mut());
    if io_failed(rdb) || p.is_null() {
        return None;
    }
    let owner = std::slice::from_raw_parts(p.cast::<u8>(), len);
    let token = rm!(RedisModule_LoadSigned(rdb) else 0);
    // The lease is the key's TTL, which Redis loads beside the value.
    let lock = if io_failed(rdb) || owner.is_empty() || token < 0 { None } else { Lock::new(owner, token, Lease::UNKNOWN) };
    rm!(RedisModule_Free(p.cast()) else ());
    lock
}

/// Reads a group's holders, raising the counter to each token (as for an
/// exclusive lock, with the same bound on a client's RESTORE); `None` on
/// an I/O error or invalid values.
unsafe fn load_group(rdb: *mut RedisModuleIO) -> Option<Group> {
    let limit = rm!(RedisModule_LoadUnsigned(rdb) else u64::MAX);
    let count = rm!(RedisModule_LoadUnsigned(rdb) else u64::MAX);
    if io_failed(rdb) || limit > u64::from(crate::args::MAX_LIMIT) || count > MAX_LOADED_HOLDERS {
        return None;
    }
    let limit = u32::try_from(limit).ok()?;
    if limit != 0 && count > u64::from(limit) {
        return None;
    }
    let now = crate::clock::now();
    let mut holders = Vec::new();
    for _ in 0..count {
        let mut len = 0usize;
        let p = rm!(RedisModule_LoadStringBuffer(rdb, &mut len) else ptr::null_mut());
        if io_failed(rdb) || p.is_null() {
            return None;
        }
        let owner: Box<[u8]> = std::slice::from_raw_parts(p.cast::<u8>(), len).into();
        rm!(RedisModule_Free(p.cast()) else ());
        let token = rm!(RedisModule_LoadSigned(rdb) else -1);
        let deadline = rm!(RedisModule_LoadSigned(rdb) else -1);
        if io_failed(rdb) || owner.is_empty() || token < 0 || deadline < 0 {
            return None;
        }
        let at = (deadline != 0).then_some(deadline);
        holders.push(crate::core::grant::Holder { owner, token, end: Lease::until(at, now).end });
    }
    if !crate::quarantine::loading() {
        let highest = holders.iter().map(|h| h.token).max().unwrap_or(0);
        if let Err(ceiling) = crate::fencing::check_lead(highest) {
            if !restored_by_master(rdb) {
                let reason = crate::fencing::lead_error("RESTORE refused: the lock's token", ceiling);
                api::log(None, c"warning", &reason);
                return None;
            }
        }
    }
    for holder in &holders {
        COUNTER.observe(holder.token);
    }
    Some(Group::loaded(Group::kind_of_limit(limit), holders))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_keeps_owner_and_token_in_one_allocation() {
        let mut lock = Lock::new(b"owner\0\xff", 42, Lease::UNKNOWN).expect("allocates");
        assert_eq!(lock.owner(), b"owner\0\xff");
        assert_eq!(lock.token(), 42);
        lock.set_token(43);
        assert_eq!(lock.token(), 43);
        assert!(lock.is_held_by(b"owner\0\xff"));
        assert!(!lock.is_held_by(b"owner\0"));
    }

    #[test]
    fn a_raw_value_round_trips_and_borrows_without_freeing() {
        let raw = Lock::new(b"me", 7, Lease::UNKNOWN).expect("allocates").into_raw();
        // SAFETY: `raw` came from `into_raw` just above.
        unsafe {
            Lock::borrow(raw).expect("non-null").set_token(8);
            let lock = Lock::from_raw(raw).expect("non-null");
            assert_eq!((lock.owner(), lock.token()), (&b"me"[..], 8));
        }
    }
}
