//! The thin boundary to the Redis Module API.
//!
//! The `redis-module` crate's high-level wrappers allocate on every call
//! (argument vectors, `CString`s for replies and replication) and unwrap
//! the API function pointers. Lock commands run inside Redis's single
//! thread, so the hot path goes through these small wrappers instead: no
//! allocation, no panic. Every function pointer used here is checked once
//! at load (`missing_functions`); the `None` arm below is therefore never
//! taken in a loaded module, and it degrades to a harmless default rather
//! than a panic.

use std::ffi::{c_char, c_int, c_long, c_void, CStr};
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};

use redis_module::raw;

pub use raw::{RedisModuleBlockedClient, RedisModuleCtx, RedisModuleIO, RedisModuleKey, RedisModuleString, RedisModuleType};

/// Calls a Redis Module API function through its pointer.
macro_rules! rm {
    ($name:ident($($arg:expr),* $(,)?) else $default:expr) => {
        // SAFETY: the pointers are filled by RedisModule_Init before any of
        // our code runs; callers uphold the C API's contract for arguments.
        match unsafe { raw::$name } {
            Some(f) => unsafe { f($($arg),*) },
            None => $default,
        }
    };
}
pub(crate) use rm;

/// The API functions this module calls, checked at load.
macro_rules! required_functions {
    ($($name:ident),* $(,)?) => {
        /// Names of required API functions the server did not provide.
        pub fn missing_functions() -> Vec<&'static str> {
            let mut missing = Vec::new();
            $(
                // SAFETY: reading a function pointer filled at init.
                if unsafe { raw::$name }.is_none() {
                    missing.push(stringify!($name));
                }
            )*
            missing
        }
    };
}

required_functions!(
    RedisModule_CreateCommand,
    RedisModule_SetModuleOptions,
    RedisModule_RegisterNumericConfig,
    RedisModule_LoadConfigs,
    RedisModule_OpenKey,
    RedisModule_CloseKey,
    RedisModule_KeyType,
    RedisModule_ModuleTypeGetType,
    RedisModule_ModuleTypeGetValue,
    RedisModule_ModuleTypeSetValue,
    RedisModule_DeleteKey,
    RedisModule_SetExpire,
    RedisModule_GetExpire,
    RedisModule_StringPtrLen,
    RedisModule_ReplyWithError,
    RedisModule_ReplyWithSimpleString,
    RedisModule_ReplyWithLongLong,
    RedisModule_ReplyWithNull,
    RedisModule_ReplyWithMap,
    RedisModule_ReplyWithStringBuffer,
    RedisModule_Replicate,
    RedisModule_ReplicateVerbatim,
    RedisModule_CreateStringFromLongLong,
    RedisModule_CreateString,
    RedisModule_SubscribeToKeyspaceEvents,
    RedisModule_ScanCursorCreate,
    RedisModule_ScanCursorDestroy,
    RedisModule_Scan,
    RedisModule_ScanCursorRestart,
    RedisModule_FreeString,
    RedisModule_SignalModifiedKey,
    RedisModule_NotifyKeyspaceEvent,
    RedisModule_GetContextFlags,
    RedisModule_Milliseconds,
    RedisModule_EmitAOF,
    RedisModule_SaveStringBuffer,
    RedisModule_LoadStringBuffer,
    RedisModule_SaveSigned,
    RedisModule_LoadSigned,
    RedisModule_SaveUnsigned,
    RedisModule_LoadUnsigned,
    RedisModule_ReplyWithArray,
    RedisModule_IsIOError,
    RedisModule_GetContextFromIO,
    RedisModule_Free,
    RedisModule_MallocSize,
    RedisModule_DigestAddStringBuffer,
    RedisModule_DigestAddLongLong,
    RedisModule_DigestEndSequence,
    RedisModule_GetSelectedDb,
    RedisModule_SelectDb,
    RedisModule_StringDMA,
    RedisModule_HoldString,
    RedisModule_BlockClient,
    RedisModule_UnblockClient,
    RedisModule_GetBlockedClientPrivateData,
    RedisModule_GetBlockedClientHandle,
    RedisModule_SetDisconnectCallback,
    RedisModule_CreateTimer,
    RedisModule_StopTimer,
    RedisModule_GetDetachedThreadSafeContext,
    RedisModule_GetDbIdFromOptCtx,
    RedisModule_GetKeyNameFromOptCtx,
    RedisModule_SubscribeToServerEvent,
    RedisModule_AvoidReplicaTraffic,
    RedisModule_Call,
    RedisModule_FreeCallReply,
    RedisModule_CallReplyType,
    RedisModule_CallReplyStringPtr,
    RedisModule_CallReplyArrayElement,
    RedisModule_GetServerInfo,
    RedisModule_FreeServerInfo,
    RedisModule_ServerInfoGetFieldSigned,
    RedisModule_ServerInfoGetFieldC,
    RedisModule_GetCommand,
    RedisModule_SetCommandInfo,
    RedisModule_RegisterInfoFunc,
    RedisModule_InfoAddSection,
    RedisModule_InfoAddFieldLongLong,
    RedisModule_InfoAddFieldCString,
    RedisModule_Log,
    RedisModule_RegisterCommandFilter,
    RedisModule_CommandFilterArgsCount,
    RedisModule_CommandFilterArgGet,
);

/// Whether the server has an optional API function (newer than Redis 7.0).
macro_rules! has {
    ($name:ident) => {
        // SAFETY: reading a function pointer filled at init.
        unsafe { raw::$name }.is_some()
    };
}
pub(crate) use has;

pub const OK: c_int = raw::REDISMODULE_OK as c_int;
pub const ERR: c_int = raw::REDISMODULE_ERR as c_int;

/// A command argument, binary safe. Same layout as the `argv` entries.
#[repr(transparent)]
pub struct Arg(*mut RedisModuleString);

impl Arg {
    /// Views `argv` as a slice of arguments.
    ///
    /// # Safety
    /// `argv` must point to `argc` strings that outlive the returned slice
    /// (true for a command's arguments during the command call).
    pub unsafe fn slice<'a>(argv: *mut *mut RedisModuleString, argc: c_int) -> &'a [Arg] {
        match usize::try_from(argc) {
            Ok(n) if n > 0 && !argv.is_null() => std::slice::from_raw_parts(argv.cast::<Arg>(), n),
            _ => &[],
        }
    }

    /// An argument view of a string this module holds.
    pub fn of(s: &HeldString) -> &Arg {
        // SAFETY: `Arg` is a transparent wrapper of the same pointer.
        unsafe { &*(&s.0 as *const *mut RedisModuleString).cast::<Arg>() }
    }

    pub fn raw(&self) -> *mut RedisModuleString {
        self.0
    }

    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `argv` entries are valid strings for the command call.
        unsafe { string_bytes(self.0) }
    }

    /// Keeps the string alive beyond the command (shared, or copied when
    /// Redis cannot share it).
    pub fn hold(&self) -> HeldString {
        HeldString(rm!(RedisModule_HoldString(ptr::null_mut(), self.0) else ptr::null_mut()))
    }
}

/// A string this module keeps across callbacks; freed on drop.
pub struct HeldString(*mut RedisModuleString);

impl HeldString {
    /// A string of `bytes` this module owns (a key name kept as bytes,
    /// opened again from a timer); check `is_valid`.
    pub fn from_bytes(bytes: &[u8]) -> HeldString {
        HeldString::own(rm!(RedisModule_CreateString(ptr::null_mut(), bytes.as_ptr().cast::<c_char>(), bytes.len()) else ptr::null_mut()))
    }

    /// Takes ownership of a string the server created for this module
    /// (null allowed: not valid).
    pub fn own(s: *mut RedisModuleString) -> HeldString {
        HeldString(s)
    }

    pub fn raw(&self) -> *mut RedisModuleString {
        self.0
    }

    pub fn is_valid(&self) -> bool {
        !self.0.is_null()
    }

    pub fn bytes(&self) -> &[u8] {
        // SAFETY: a held string lives until this value is dropped.
        unsafe { string_bytes(self.0) }
    }
}

impl Drop for HeldString {
    fn drop(&mut self) {
        if !self.0.is_null() {
            rm!(RedisModule_FreeString(ptr::null_mut(), self.0) else ());
        }
    }
}

/// The bytes of a Redis string, valid while the string lives.
///
/// # Safety
/// `s` must be null or a live Redis string that outlives `'a`.
pub unsafe fn string_bytes<'a>(s: *mut RedisModuleString) -> &'a [u8] {
    let mut len = 0usize;
    let p = rm!(RedisModule_StringPtrLen(s, &mut len) else ptr::null());
    if p.is_null() || len == 0 {
        return &[];
    }
    // SAFETY: Redis returned a pointer to `len` bytes owned by `s`.
    unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) }
}

/// A command's context: replies, replication, notifications.
#[derive(Clone, Copy)]
pub struct Ctx(*mut RedisModuleCtx);

impl Ctx {
    pub fn new(ctx: *mut RedisModuleCtx) -> Self {
        Ctx(ctx)
    }

    pub fn raw(self) -> *mut RedisModuleCtx {
        self.0
    }

    pub fn reply_error(self, msg: &CStr) -> c_int {
        rm!(RedisModule_ReplyWithError(self.0, msg.as_ptr()) else ERR)
    }

    pub fn reply_ok(self) -> c_int {
        rm!(RedisModule_ReplyWithSimpleString(self.0, c"OK".as_ptr()) else ERR)
    }

    pub fn reply_integer(self, n: i64) -> c_int {
        rm!(RedisModule_ReplyWithLongLong(self.0, n) else ERR)
    }

    pub fn reply_null(self) -> c_int {
        rm!(RedisModule_ReplyWithNull(self.0) else ERR)
    }

    /// Starts a map of `pairs` entries (a flat array of twice that in RESP2).
    pub fn reply_map(self, pairs: c_long) -> c_int {
        rm!(RedisModule_ReplyWithMap(self.0, pairs) else ERR)
    }

    pub fn reply_array(self, len: c_long) -> c_int {
        rm!(RedisModule_ReplyWithArray(self.0, len) else ERR)
    }

    pub fn reply_bulk(self, bytes: &[u8]) -> c_int {
        rm!(RedisModule_ReplyWithStringBuffer(self.0, bytes.as_ptr().cast::<c_char>(), bytes.len()) else ERR)
    }

    pub fn flags(self) -> c_int {
        rm!(RedisModule_GetContextFlags(self.0) else 0)
    }

    pub fn has_flags(self, flags: u32) -> bool {
        self.flags() & flags as c_int != 0
    }

    /// The calling client's id (`CLIENT ID`); 0 when there is none.
    pub fn client_id(self) -> u64 {
        rm!(RedisModule_GetClientId(self.0) else 0)
    }

    pub fn selected_db(self) -> c_int {
        rm!(RedisModule_GetSelectedDb(self.0) else 0)
    }

    pub fn select_db(self, db: c_int) -> bool {
        rm!(RedisModule_SelectDb(self.0, db) else ERR) == OK
    }

    pub fn reply_error_text(self, msg: &str) -> c_int {
        match std::ffi::CString::new(msg) {
            Ok(c) => self.reply_error(&c),
            Err(_) => self.reply_error(c"ERR"),
        }
    }

    /// Marks a key as changed: WATCH and client-side caching see it.
    pub fn signal_modified(self, key: &Arg) {
        rm!(RedisModule_SignalModifiedKey(self.0, key.raw()) else ERR);
    }

    /// A keyspace notification of the generic class (`g`).
    pub fn notify(self, event: &CStr, key: &Arg) {
        rm!(RedisModule_NotifyKeyspaceEvent(self.0, raw::REDISMODULE_NOTIFY_GENERIC, event.as_ptr(), key.raw()) else ERR);
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

    /// Propagates `cmd key owner token deadline SHARED limit key-deadline`:
    /// one shared holder (not on the hot path of the exclusive lock).
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
    ) {
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

    pub fn open_key(self, key: &Arg, mode: KeyMode) -> Key {
        let raw_mode = match mode {
            KeyMode::Read => raw::REDISMODULE_READ,
            KeyMode::Write => raw::REDISMODULE_READ | raw::REDISMODULE_WRITE,
        } as c_int;
        Key(rm!(RedisModule_OpenKey(self.0, key.raw(), raw_mode) else ptr::null_mut()))
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

/// Whether `Key::expire_at` stores a deadline that has already passed as
/// it is (Redis 7.2+, Valkey), rather than as "now" (Redis 7.0).
pub fn sets_past_deadlines() -> bool {
    has!(RedisModule_SetAbsExpire)
}

/// Clients are paused (CLIENT PAUSE WRITE/ALL, FAILOVER, SHUTDOWN waiting
/// for replicas, a Cluster manual failover): nothing may be written, and
/// Redis keeps expired keys in place until the pause ends.
pub fn writes_paused() -> bool {
    rm!(RedisModule_AvoidReplicaTraffic() else 1) != 0
}

/// Unix time in milliseconds, as Redis reads it.
pub fn unix_millis() -> i64 {
    rm!(RedisModule_Milliseconds() else 0)
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
pub struct Key(*mut RedisModuleKey);

impl Key {
    /// Wraps a key handle Redis opened (a scan's); the caller must not let
    /// it drop if the handle is not its own to close.
    pub fn from_raw(key: *mut RedisModuleKey) -> Key {
        Key(key)
    }

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

/// A section of INFO, read through the module API; freed on drop.
pub struct ServerInfo(*mut raw::RedisModuleServerInfoData, *mut RedisModuleCtx);

impl ServerInfo {
    pub fn read(ctx: Ctx, section: &CStr) -> ServerInfo {
        ServerInfo(rm!(RedisModule_GetServerInfo(ctx.0, section.as_ptr()) else ptr::null_mut()), ctx.0)
    }

    /// An integer field; `None` when absent or not an integer.
    pub fn integer(&self, field: &CStr) -> Option<i64> {
        if self.0.is_null() {
            return None;
        }
        let mut err: c_int = 0;
        let n = rm!(RedisModule_ServerInfoGetFieldSigned(self.0, field.as_ptr(), &mut err) else 0);
        (err == 0).then_some(n)
    }

    /// A text field, copied (for load-time decisions, not the hot path).
    pub fn text(&self, field: &CStr) -> Option<String> {
        if self.0.is_null() {
            return None;
        }
        let p = rm!(RedisModule_ServerInfoGetFieldC(self.0, field.as_ptr()) else ptr::null());
        // SAFETY: Redis returns a NUL-terminated string owned by the info data.
        (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    }

    /// A text field, compared without allocating.
    pub fn text_is(&self, field: &CStr, expected: &CStr) -> bool {
        if self.0.is_null() {
            return false;
        }
        let p = rm!(RedisModule_ServerInfoGetFieldC(self.0, field.as_ptr()) else ptr::null());
        // SAFETY: Redis returns a NUL-terminated string owned by the info data.
        !p.is_null() && unsafe { CStr::from_ptr(p) } == expected
    }
}

impl Drop for ServerInfo {
    fn drop(&mut self) {
        if !self.0.is_null() {
            rm!(RedisModule_FreeServerInfo(self.1, self.0) else ());
        }
    }
}

/// A reply of RM_Call; freed on drop.
struct CallReply(*mut raw::RedisModuleCallReply);

impl Drop for CallReply {
    fn drop(&mut self) {
        if !self.0.is_null() {
            rm!(RedisModule_FreeCallReply(self.0) else ());
        }
    }
}

impl Ctx {
    /// `CONFIG GET name` → the value's bytes passed to `f` (`None` when
    /// the server has no such setting).
    pub fn config_get<R>(self, name: &CStr, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
        let reply = CallReply(
            rm!(RedisModule_Call(self.0, c"CONFIG".as_ptr(), c"cc".as_ptr(), c"GET".as_ptr(), name.as_ptr()) else ptr::null_mut()),
        );
        if reply.0.is_null() {
            return None;
        }
        let value = rm!(RedisModule_CallReplyArrayElement(reply.0, 1) else ptr::null_mut());
        if value.is_null() {
            return None;
        }
        let mut len = 0usize;
        let p = rm!(RedisModule_CallReplyStringPtr(value, &mut len) else ptr::null());
        if p.is_null() {
            return None;
        }
        // SAFETY: the reply owns `len` bytes at `p` until it is freed below.
        Some(f(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) }))
    }

    /// How many databases the server has (`databases`; 16 if unreadable).
    pub fn databases(self) -> c_int {
        let parse = |v: &[u8]| std::str::from_utf8(v).ok().and_then(|v| v.parse::<c_int>().ok());
        self.config_get(c"databases", parse).flatten().unwrap_or(16)
    }

    /// Asks Redis to run `EXISTS key` as a module call, which applies
    /// Cluster redirection like a client's command: `Err(errno)` when Redis
    /// refuses (EPERM: the key is served by another node; ENETDOWN/EROFS:
    /// the cluster is down).
    pub fn probe_key(self, key: &Arg) -> Result<(), i32> {
        let reply = CallReply(rm!(RedisModule_Call(self.0, c"EXISTS".as_ptr(), c"s".as_ptr(), key.raw()) else ptr::null_mut()));
        if reply.0.is_null() {
            return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
        }
        Ok(())
    }

    /// `PEXPIREAT key deadline` through the server, for a deadline that
    /// may have passed: on a replica (from its master) and while loading,
    /// Redis stores such a deadline as given instead of deleting the key.
    /// Not propagated (the caller propagates its own command).
    pub fn pexpireat_via_call(self, key: &Arg, deadline_ms: i64) -> bool {
        let reply = CallReply(
            rm!(RedisModule_Call(self.0, c"PEXPIREAT".as_ptr(), c"sl".as_ptr(), key.raw(), deadline_ms as std::ffi::c_longlong) else ptr::null_mut()),
        );
        !reply.0.is_null() && rm!(RedisModule_CallReplyType(reply.0) else -1) == raw::REDISMODULE_REPLY_INTEGER as c_int
    }

    /// Logs a warning line in the server log, prefixed `redislock:`.
    pub fn log_warning(self, message: &str) {
        log(Some(self), c"warning", message);
    }
}

/// Logs a line in the server log (without a context where Redis hands us
/// none, e.g. in a data type callback), prefixed `redislock:`.
pub fn log(ctx: Option<Ctx>, level: &CStr, message: &str) {
    let ctx = ctx.map_or(ptr::null_mut(), |c| c.0);
    if let Ok(text) = std::ffi::CString::new(message.replace('\0', "?")) {
        rm!(RedisModule_Log(ctx, level.as_ptr(), c"redislock: %s".as_ptr(), text.as_ptr()) else ());
    }
}

/// A detached context of this module for timers, usable where Redis hands
/// the module none (an unlink callback, a server event).
static TIMER_CTX: AtomicPtr<RedisModuleCtx> = AtomicPtr::new(ptr::null_mut());

/// At load: takes the timers' context; false if Redis gave none.
pub fn init_timer_ctx(ctx: Ctx) -> bool {
    let own = rm!(RedisModule_GetDetachedThreadSafeContext(ctx.raw()) else ptr::null_mut());
    TIMER_CTX.store(own, Ordering::Relaxed);
    !own.is_null()
}

pub fn timer_ctx() -> *mut RedisModuleCtx {
    TIMER_CTX.load(Ordering::Relaxed)
}
