//! The token register data type (`LOCK.FENCED`) as Redis sees it: its
//! registration and callbacks. A register is one token (`keys::register`);
//! it is saved as that token (RDB, DUMP), rewritten into the AOF as the
//! `LOCK.FENCED register token` that raises it, and a load checks it as a
//! lock's token is checked: at least 1, and from a client's RESTORE not
//! beyond the bound on tokens (`redislock.max-token-lead`), which keeps
//! one payload from raising a register past every token to come.

use std::ffi::{c_int, c_void};
use std::mem::size_of;
use std::ptr;

use redis_module::{native_types::RedisType, raw};

use crate::api::{self, rm, Piece, RedisModuleIO, RedisModuleString};
use crate::keys::register;

/// The data type's name: exactly 9 characters, as Redis requires.
const TYPE_NAME: &str = "lockfence";

/// RDB encoding of a register. Version 1: the token (signed).
const ENCODING_VERSION: c_int = 1;

pub static REGISTER_TYPE: RedisType = RedisType::new(
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
        aux_load: None,
        aux_save: None,
        aux_save_triggers: 0,
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
    // SAFETY: Redis frees a value of this type once no key holds it.
    unsafe { register::free_value(value) };
}

unsafe extern "C" fn copy(_from: *mut RedisModuleString, _to: *mut RedisModuleString, value: *const c_void) -> *mut c_void {
    // SAFETY: a live value of this type.
    register::new_value(unsafe { register::token_of(value) })
}

/// The server's wrapper around a module value and the object holding it,
/// as for a lock (`datatype::mem_usage`), with the boxed token.
unsafe extern "C" fn mem_usage(_value: *const c_void) -> usize {
    size_of::<i64>() + 2 * size_of::<*mut c_void>()
}

unsafe extern "C" fn digest(md: *mut raw::RedisModuleDigest, value: *mut c_void) {
    // SAFETY: a live value of this type.
    let token = unsafe { register::token_of(value) };
    rm!(RedisModule_DigestAddLongLong(md, token) else ());
    rm!(RedisModule_DigestEndSequence(md) else ());
}

unsafe extern "C" fn rdb_save(rdb: *mut RedisModuleIO, value: *mut c_void) {
    // SAFETY: a live value of this type.
    let token = unsafe { register::token_of(value) };
    rm!(RedisModule_SaveSigned(rdb, token) else ());
}

/// Loads a register (RDB, DEBUG RELOAD, RESTORE, MIGRATE, full sync) if
/// its token is one a register can hold; Redis answers RESTORE `Bad data
/// format` otherwise, and the log says why.
unsafe extern "C" fn rdb_load(rdb: *mut RedisModuleIO, encver: c_int) -> *mut c_void {
    if encver != ENCODING_VERSION {
        api::log(None, c"warning", &format!("refused a token register of encoding version {encver}, which this module does not know"));
        return ptr::null_mut();
    }
    let token = rm!(RedisModule_LoadSigned(rdb) else 0);
    if rm!(RedisModule_IsIOError(rdb) else 1) != 0 {
        api::log(None, c"warning", "refused a truncated or malformed token register");
        return ptr::null_mut();
    }
    if token < 1 {
        api::log(None, c"warning", &format!("refused a token register holding token {token} (tokens start at 1)"));
        return ptr::null_mut();
    }
    // A client's RESTORE is held to the bound a client's token is; this
    // server's own files and its master's stream are not client input.
    if !super::datatype::within_lead(rdb, token, "the token register's token") {
        return ptr::null_mut();
    }
    register::new_value(token)
}

/// Emits the register as the command that raises it to its token.
unsafe extern "C" fn aof_rewrite(aof: *mut RedisModuleIO, key: *mut RedisModuleString, value: *mut c_void) {
    // SAFETY: a live value of this type.
    let token = unsafe { register::token_of(value) };
    // SAFETY: the handles of this callback.
    unsafe { api::emit_aof(aof, c"LOCK.FENCED", key, &[Piece::Int(token)]) };
}

/// The key left the keyspace: remembered until the `evicted` event says
/// whether Redis evicted it (`keys::register`).
unsafe extern "C" fn unlink(ctx: *mut raw::RedisModuleKeyOptCtx, value: *const c_void) {
    let db = rm!(RedisModule_GetDbIdFromOptCtx(ctx) else -1);
    let key = rm!(RedisModule_GetKeyNameFromOptCtx(ctx) else ptr::null());
    if db >= 0 && !key.is_null() {
        // SAFETY: Redis hands a live key name and value for the callback.
        let (name, token) = unsafe { (api::string_bytes(key.cast_mut()), register::token_of(value)) };
        register::removed(db, name, token);
    }
}

/// At load, after Redis registered `REGISTER_TYPE`: hands the registered
/// type to the glue; false if Redis did not register it.
pub fn remember_registered() -> bool {
    let registered = REGISTER_TYPE.raw_type.try_borrow().map(|t| *t).unwrap_or(ptr::null_mut());
    register::remember_registered_type(registered)
}
