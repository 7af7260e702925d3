//! The lock value and its data type callbacks (RDB, AOF, memory, copy,
//! digest, and the fencing counter as RDB aux data).
//!
//! The lease is not stored here: it is the key's Redis TTL, so PTTL,
//! EXPIRE, PERSIST and Redis's own expiry work on a lock as on any key.

use std::ffi::{c_char, c_int, c_void};
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};

use redis_module::{native_types::RedisType, raw};

use crate::api::{self, rm, RedisModuleIO, RedisModuleString, RedisModuleType};
use crate::fencing::{Token, COUNTER};

/// The data type's name: exactly 9 characters, as Redis requires.
pub const TYPE_NAME: &str = "redislock";

/// RDB encoding of a lock: owner (string buffer), token (signed).
const ENCODING_VERSION: c_int = 1;

pub struct Lock {
    pub token: Token,
    pub owner: Box<[u8]>,
}

impl Lock {
    pub fn new(owner: &[u8], token: Token) -> Self {
        Lock { token, owner: owner.into() }
    }

    pub fn is_held_by(&self, owner: &[u8]) -> bool {
        *self.owner == *owner
    }

    pub fn into_raw(self) -> *mut c_void {
        Box::into_raw(Box::new(self)).cast()
    }
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
        unlink2: None,
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

/// Borrows the lock behind a module value pointer.
///
/// # Safety
/// `value` must be a pointer stored by this module's type (a `Box<Lock>`).
pub unsafe fn from_value<'a>(value: *mut c_void) -> Option<&'a mut Lock> {
    value.cast::<Lock>().as_mut()
}

unsafe extern "C" fn free(value: *mut c_void) {
    if !value.is_null() {
        drop(Box::from_raw(value.cast::<Lock>()));
    }
}

unsafe extern "C" fn copy(
    _from: *mut RedisModuleString,
    _to: *mut RedisModuleString,
    value: *const c_void,
) -> *mut c_void {
    match value.cast::<Lock>().as_ref() {
        Some(lock) => Lock::new(&lock.owner, lock.token).into_raw(),
        None => ptr::null_mut(),
    }
}

/// Bytes this lock holds in the allocator, as the allocator counts them.
unsafe extern "C" fn mem_usage(value: *const c_void) -> usize {
    let Some(lock) = value.cast::<Lock>().as_ref() else {
        return 0;
    };
    let own = rm!(RedisModule_MallocSize(value.cast_mut()) else std::mem::size_of::<Lock>());
    let owner = rm!(RedisModule_MallocSize(lock.owner.as_ptr().cast_mut().cast()) else lock.owner.len());
    own + owner
}

unsafe extern "C" fn digest(md: *mut raw::RedisModuleDigest, value: *mut c_void) {
    if let Some(lock) = from_value(value) {
        rm!(RedisModule_DigestAddStringBuffer(md, lock.owner.as_ptr().cast::<c_char>(), lock.owner.len()) else ());
        rm!(RedisModule_DigestAddLongLong(md, lock.token) else ());
        rm!(RedisModule_DigestEndSequence(md) else ());
    }
}

unsafe extern "C" fn rdb_save(rdb: *mut RedisModuleIO, value: *mut c_void) {
    if let Some(lock) = from_value(value) {
        rm!(RedisModule_SaveStringBuffer(rdb, lock.owner.as_ptr().cast::<c_char>(), lock.owner.len()) else ());
        rm!(RedisModule_SaveSigned(rdb, lock.token) else ());
    }
}

/// Loads a lock (RDB, DEBUG RELOAD, RESTORE, full sync). Raises the
/// counter to its token so this instance never issues that token again.
unsafe extern "C" fn rdb_load(rdb: *mut RedisModuleIO, encver: c_int) -> *mut c_void {
    if encver != ENCODING_VERSION {
        return ptr::null_mut();
    }
    let Some(owner) = load_buffer(rdb) else {
        return ptr::null_mut();
    };
    let token = rm!(RedisModule_LoadSigned(rdb) else 0);
    if io_failed(rdb) || owner.is_empty() || token < 0 {
        return ptr::null_mut();
    }
    COUNTER.observe(token);
    Lock { token, owner }.into_raw()
}

/// Emits the lock as its replicated form with no deadline; Redis follows
/// every key's rewrite with its own `PEXPIREAT`.
unsafe extern "C" fn aof_rewrite(aof: *mut RedisModuleIO, key: *mut RedisModuleString, value: *mut c_void) {
    if let Some(lock) = from_value(value) {
        rm!(RedisModule_EmitAOF(
            aof,
            c"LOCK.APPLY".as_ptr(),
            c"sbll".as_ptr(),
            key,
            lock.owner.as_ptr().cast::<c_char>(),
            lock.owner.len(),
            lock.token,
            0i64,
        ) else ());
    }
}

unsafe extern "C" fn aux_save(rdb: *mut RedisModuleIO, when: c_int) {
    if when == raw::REDISMODULE_AUX_BEFORE_RDB as c_int {
        rm!(RedisModule_SaveSigned(rdb, COUNTER.current()) else ());
    }
}

unsafe extern "C" fn aux_load(rdb: *mut RedisModuleIO, encver: c_int, when: c_int) -> c_int {
    if encver != ENCODING_VERSION || when != raw::REDISMODULE_AUX_BEFORE_RDB as c_int {
        return api::ERR;
    }
    let counter = rm!(RedisModule_LoadSigned(rdb) else 0);
    if io_failed(rdb) {
        return api::ERR;
    }
    COUNTER.observe(counter);
    api::OK
}

unsafe fn io_failed(rdb: *mut RedisModuleIO) -> bool {
    rm!(RedisModule_IsIOError(rdb) else 1) != 0
}

/// Copies a string buffer out of the RDB into our own allocation.
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
