//! Leaving a command: marking a key changed, keyspace notifications and
//! propagation to replicas and the AOF.

use std::ffi::{c_char, CStr};
use std::ptr;

use redis_module::raw;

use super::{rm, Arg, Ctx, RedisModuleCtx, RedisModuleString, ERR};

impl Ctx {
    /// Marks a key as changed: WATCH and client-side caching see it.
    pub fn signal_modified(self, key: &Arg) {
        rm!(RedisModule_SignalModifiedKey(self.0, key.raw()) else ERR);
    }

    /// A keyspace notification of the generic class (`g`).
    pub fn notify(self, event: &CStr, key: &Arg) {
        rm!(RedisModule_NotifyKeyspaceEvent(self.0, raw::REDISMODULE_NOTIFY_GENERIC, event.as_ptr(), key.raw()) else ERR);
    }

    /// `PUBLISH channel message` (in a cluster, to every node), from a
    /// command or outside one: Redis's publication needs no client.
    pub fn publish(self, channel: &[u8], message: &[u8]) {
        let create = |bytes: &[u8]| {
            OwnedString(rm!(RedisModule_CreateString(self.0, bytes.as_ptr().cast::<c_char>(), bytes.len()) else ptr::null_mut()), self.0)
        };
        let (channel, message) = (create(channel), create(message));
        if channel.0.is_null() || message.0.is_null() {
            return;
        }
        rm!(RedisModule_PublishMessage(self.0, channel.0, message.0) else ERR);
    }

    /// Propagates the command exactly as received.
    pub fn replicate_verbatim(self) {
        rm!(RedisModule_ReplicateVerbatim(self.0) else ERR);
    }

    /// Propagates `cmd key owner token deadline`. Key and owner are the
    /// caller's argument strings, shared rather than copied.
    pub fn replicate_grant(self, cmd: &CStr, key: &Arg, owner: &Arg, token: i64, deadline_ms: i64) {
        let (token_s, deadline_s) = (self.integer_string(token), self.integer_string(deadline_ms));
        if token_s.0.is_null() || deadline_s.0.is_null() {
            rm!(RedisModule_Replicate(self.0, cmd.as_ptr(), c"ssll".as_ptr(), key.raw(), owner.raw(), token, deadline_ms) else ERR);
            return;
        }
        rm!(RedisModule_Replicate(
            self.0,
            cmd.as_ptr(),
            c"ssss".as_ptr(),
            key.raw(),
            owner.raw(),
            token_s.0,
            deadline_s.0,
        ) else ERR);
    }

    /// Propagates `cmd key owner token deadline` for an owner this module
    /// keeps as bytes (not on the hot path).
    pub fn replicate_grant_bytes(self, cmd: &CStr, key: &Arg, owner: &[u8], token: i64, deadline_ms: i64) {
        rm!(RedisModule_Replicate(
            self.0,
            cmd.as_ptr(),
            c"sbll".as_ptr(),
            key.raw(),
            owner.as_ptr().cast::<c_char>(),
            owner.len(),
            token as std::ffi::c_longlong,
            deadline_ms as std::ffi::c_longlong,
        ) else ERR);
    }

    /// Propagates `cmd key owner token deadline VALUE value`: an exclusive
    /// lock with a value (not on the hot path: a lock without a value
    /// travels without the option).
    pub fn replicate_valued_grant(self, cmd: &CStr, key: &Arg, owner: &[u8], token: i64, deadline_ms: i64, value: &[u8]) {
        rm!(RedisModule_Replicate(
            self.0,
            cmd.as_ptr(),
            c"sbllcb".as_ptr(),
            key.raw(),
            owner.as_ptr().cast::<c_char>(),
            owner.len(),
            token as std::ffi::c_longlong,
            deadline_ms as std::ffi::c_longlong,
            c"VALUE".as_ptr(),
            value.as_ptr().cast::<c_char>(),
            value.len(),
        ) else ERR);
    }

    /// Propagates `cmd key owner token deadline SHARED limit key-deadline
    /// [PERMITS k]`: one shared holder (not on the hot path of the
    /// exclusive lock), its permits only when above 1 (a stream without
    /// weighted holds reads as before).
    #[allow(clippy::too_many_arguments)]
    pub fn replicate_shared_grant(
        self,
        cmd: &CStr,
        key: &Arg,
        owner: &[u8],
        token: i64,
        deadline_ms: i64,
        limit: u32,
        key_deadline_ms: i64,
        permits: u32,
    ) {
        if permits > 1 {
            rm!(RedisModule_Replicate(
                self.0,
                cmd.as_ptr(),
                c"sbllcllcl".as_ptr(),
                key.raw(),
                owner.as_ptr().cast::<c_char>(),
                owner.len(),
                token as std::ffi::c_longlong,
                deadline_ms as std::ffi::c_longlong,
                c"SHARED".as_ptr(),
                std::ffi::c_longlong::from(limit),
                key_deadline_ms as std::ffi::c_longlong,
                c"PERMITS".as_ptr(),
                std::ffi::c_longlong::from(permits),
            ) else ERR);
            return;
        }
        rm!(RedisModule_Replicate(
            self.0,
            cmd.as_ptr(),
            c"sbllcll".as_ptr(),
            key.raw(),
            owner.as_ptr().cast::<c_char>(),
            owner.len(),
            token as std::ffi::c_longlong,
            deadline_ms as std::ffi::c_longlong,
            c"SHARED".as_ptr(),
            std::ffi::c_longlong::from(limit),
            key_deadline_ms as std::ffi::c_longlong,
        ) else ERR);
    }

    /// Propagates `cmd key bytes`, e.g. `LOCK.RELEASE key owner` for a
    /// release the module makes outside a command.
    pub fn replicate_key_bytes(self, cmd: &CStr, key: &Arg, bytes: &[u8]) {
        rm!(RedisModule_Replicate(self.0, cmd.as_ptr(), c"sb".as_ptr(), key.raw(), bytes.as_ptr().cast::<c_char>(), bytes.len()) else ERR);
    }

    /// Propagates `cmd key`, e.g. `DEL key`.
    pub fn replicate_key(self, cmd: &CStr, key: &Arg) {
        rm!(RedisModule_Replicate(self.0, cmd.as_ptr(), c"s".as_ptr(), key.raw()) else ERR);
    }

    /// Propagates `cmd key n`, e.g. `PEXPIREAT key deadline`.
    pub fn replicate_key_integer(self, cmd: &CStr, key: &Arg, n: i64) {
        let n_s = self.integer_string(n);
        if n_s.0.is_null() {
            rm!(RedisModule_Replicate(self.0, cmd.as_ptr(), c"sl".as_ptr(), key.raw(), n) else ERR);
            return;
        }
        rm!(RedisModule_Replicate(self.0, cmd.as_ptr(), c"ss".as_ptr(), key.raw(), n_s.0) else ERR);
    }

    /// An integer as a Redis string. Cheaper for replication than the
    /// `l` format, which builds a fresh sds and shrinks it per number.
    fn integer_string(self, n: i64) -> OwnedString {
        OwnedString(rm!(RedisModule_CreateStringFromLongLong(self.0, n) else ptr::null_mut()), self.0)
    }
}

/// A string this module created, freed on drop.
struct OwnedString(*mut RedisModuleString, *mut RedisModuleCtx);

impl Drop for OwnedString {
    fn drop(&mut self) {
        if !self.0.is_null() {
            rm!(RedisModule_FreeString(self.1, self.0) else ());
        }
    }
}
