//! Keys: opening one, what it holds, its module value and its expiry.

use std::ffi::{c_int, c_void};
use std::ptr;

use redis_module::raw;

use super::{has, rm, sets_past_deadlines, unix_millis, Arg, Ctx, RedisModuleKey, RedisModuleType, ERR, OK};

impl Ctx {
    pub fn open_key(self, key: &Arg, mode: KeyMode) -> Key {
        let raw_mode = match mode {
            KeyMode::Read => raw::REDISMODULE_READ,
            KeyMode::Write => raw::REDISMODULE_READ | raw::REDISMODULE_WRITE,
        } as c_int;
        Key(rm!(RedisModule_OpenKey(self.0, key.raw(), raw_mode) else ptr::null_mut()))
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum KeyMode {
    Read,
    Write,
}

/// What a key holds, as far as this module cares.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum KeyKind {
    Empty,
    Module(*mut RedisModuleType),
    String,
    Other,
}

/// An open key, closed on drop.
pub struct Key(pub(super) *mut RedisModuleKey);

impl Key {
    pub fn kind(&self) -> KeyKind {
        if self.0.is_null() {
            return KeyKind::Empty;
        }
        let t = rm!(RedisModule_KeyType(self.0) else raw::REDISMODULE_KEYTYPE_EMPTY as c_int);
        if t == raw::REDISMODULE_KEYTYPE_EMPTY as c_int {
            KeyKind::Empty
        } else if t == raw::REDISMODULE_KEYTYPE_MODULE as c_int {
            KeyKind::Module(rm!(RedisModule_ModuleTypeGetType(self.0) else ptr::null_mut()))
        } else if t == raw::REDISMODULE_KEYTYPE_STRING as c_int {
            KeyKind::String
        } else {
            KeyKind::Other
        }
    }

    /// The module value stored at the key (null when none).
    pub fn module_value(&self) -> *mut c_void {
        if self.0.is_null() {
            return ptr::null_mut();
        }
        rm!(RedisModule_ModuleTypeGetValue(self.0) else ptr::null_mut())
    }

    /// Replaces whatever the key holds with a module value (its TTL is
    /// cleared). On failure ownership of `value` stays with the caller.
    ///
    /// # Safety
    /// `ty` must be a registered type and `value` a value of that type.
    pub unsafe fn set_module_value(&self, ty: *mut RedisModuleType, value: *mut c_void) -> bool {
        !self.0.is_null() && rm!(RedisModule_ModuleTypeSetValue(self.0, ty, value) else ERR) == OK
    }

    /// Replaces the module value at the key, which keeps its TTL; the old
    /// value is handed back to the caller, who owns it now (`None`: nothing
    /// replaced, and `value` stays the caller's).
    ///
    /// # Safety
    /// `ty` must be a registered type, `value` a value of that type, and
    /// the key must hold a value of that type.
    pub unsafe fn replace_module_value(&self, ty: *mut RedisModuleType, value: *mut c_void) -> Option<*mut c_void> {
        if self.0.is_null() {
            return None;
        }
        let mut old: *mut c_void = ptr::null_mut();
        (rm!(RedisModule_ModuleTypeReplaceValue(self.0, ty, value, &mut old) else ERR) == OK).then_some(old)
    }

    /// Sets the TTL in milliseconds from now.
    fn set_expire_ms(&self, ttl_ms: i64) -> bool {
        !self.0.is_null() && rm!(RedisModule_SetExpire(self.0, ttl_ms) else ERR) == OK
    }

    /// Makes the key expire exactly at `deadline_ms` (Unix ms), the value
    /// replicas and the AOF receive.
    ///
    /// Redis 7.2+ and Valkey take the absolute deadline (RM_SetAbsExpire).
    /// Redis 7.0 only takes a ttl, which it adds to its own fresh clock
    /// read; when the clock reads the same millisecond before and after,
    /// that read is known, so the stored deadline is exact (a tick in
    /// between is retried). A deadline already past cannot be expressed as
    /// a ttl there: the key then expires now (see `sets_past_deadlines`).
    pub fn expire_at(&self, deadline_ms: i64) -> bool {
        if self.0.is_null() {
            return false;
        }
        if sets_past_deadlines() {
            return rm!(RedisModule_SetAbsExpire(self.0, deadline_ms) else ERR) == OK;
        }
        for _ in 0..4 {
            let now = unix_millis();
            if !self.set_expire_ms(deadline_ms.saturating_sub(now).max(0)) {
                return false;
            }
            if unix_millis() == now {
                break;
            }
        }
        true
    }

    /// The key's absolute expiry in Unix ms, or `None` without a TTL.
    /// Exact: the server's absolute value where it has RM_GetAbsExpire;
    /// on Redis 7.0 the remaining ttl (against a fresh clock read)
    /// bracketed by reads of the same millisecond.
    pub fn deadline_ms(&self) -> Option<i64> {
        if self.0.is_null() {
            return None;
        }
        if has!(RedisModule_GetAbsExpire) {
            let at = rm!(RedisModule_GetAbsExpire(self.0) else raw::REDISMODULE_NO_EXPIRE as i64);
            return (at != raw::REDISMODULE_NO_EXPIRE as i64).then_some(at);
        }
        let mut deadline = None;
        for _ in 0..4 {
            let before = unix_millis();
            let remaining = self.remaining_ms();
            if remaining < 0 {
                return None;
            }
            deadline = Some(before.saturating_add(remaining));
            if unix_millis() == before {
                break;
            }
        }
        deadline
    }

    /// Remaining lease in ms against a fresh clock read (-1: no TTL).
    /// Redis 8.x and Valkey count RM_GetExpire from the command's start
    /// time, so it is derived from the absolute deadline where exact.
    pub fn pttl(&self) -> i64 {
        if has!(RedisModule_GetAbsExpire) {
            return self.deadline_ms().map_or(-1, |at| at.saturating_sub(unix_millis()).max(0));
        }
        self.remaining_ms()
    }

    /// The value of a string key (`None` for other types). Redis's DMA
    /// read turns an embedded or integer string into a raw one in place.
    pub fn string_value(&self) -> Option<&[u8]> {
        if self.0.is_null() {
            return None;
        }
        let mut len = 0usize;
        let p = rm!(RedisModule_StringDMA(self.0, &mut len, raw::REDISMODULE_READ as c_int) else ptr::null_mut());
        if p.is_null() {
            return None;
        }
        if len == 0 {
            return Some(&[]);
        }
        // SAFETY: Redis returned `len` readable bytes owned by the key.
        Some(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) })
    }

    /// Remaining TTL in milliseconds, or -1 when the key has none.
    fn remaining_ms(&self) -> i64 {
        if self.0.is_null() {
            return -1;
        }
        let ms = rm!(RedisModule_GetExpire(self.0) else raw::REDISMODULE_NO_EXPIRE as i64);
        if ms == raw::REDISMODULE_NO_EXPIRE as i64 {
            -1
        } else {
            ms.max(0)
        }
    }

    pub fn delete(&self) -> bool {
        !self.0.is_null() && rm!(RedisModule_DeleteKey(self.0) else ERR) == OK
    }
}

impl Drop for Key {
    fn drop(&mut self) {
        if !self.0.is_null() {
            rm!(RedisModule_CloseKey(self.0) else ());
        }
    }
}
