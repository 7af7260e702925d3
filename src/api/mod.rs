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

//!
//! By job: this file holds the calls themselves (`rm!`, the functions
//! checked at load), command arguments and strings, and the context's
//! replies; `keys` opens and reads keys, `replicate` propagates and
//! notifies, `calls` asks the server (INFO fields, RM_Call, the log),
//! `timers` runs plain Rust functions from module timers, `scan` walks
//! the keyspace with a closure per key, `blocked` and `info` call the
//! Rust functions behind a blocked client's and INFO's callbacks. Every
//! `extern "C"` function outside `edge` is one of these trampolines.
//! `users` asks about ACL users.

mod blocked;
mod calls;
mod info;
mod keys;
mod replicate;
mod scan;
mod timers;
mod users;

use std::ffi::{c_char, c_int, c_long, CStr};
use std::ptr;

use redis_module::raw;

pub use blocked::{block, unblock, Blocking};
pub use calls::{errno, log, ServerInfo};
pub use info::{register_info, InfoCtx};
pub use keys::{Key, KeyKind, KeyMode};
pub use raw::{RedisModuleBlockedClient, RedisModuleCtx, RedisModuleIO, RedisModuleKey, RedisModuleString, RedisModuleType};
pub use replicate::{emit_aof, Piece, MAX_PIECES};
pub use scan::{scan_keys, ScanCursor};
pub use timers::{after, after_with, detached_ctx, init_timer_ctx, TimerId, TimerWith};
pub use users::{acl_available, AclUser};

/// Calls a Redis Module API function through its pointer.
macro_rules! rm {
    ($name:ident($($arg:expr),* $(,)?) else $default:expr) => {
        // SAFETY: the pointers are filled by RedisModule_Init before any of
        // our code runs; callers uphold the C API's contract for arguments.
        match unsafe { ::redis_module::raw::$name } {
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
                if unsafe { ::redis_module::raw::$name }.is_none() {
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
    RedisModule_ModuleTypeReplaceValue,
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
    RedisModule_PublishMessage,
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
    RedisModule_ReplyWithCallReply,
    RedisModule_CallReplyStringPtr,
    RedisModule_CallReplyProto,
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
    RedisModule_IsKeysPositionRequest,
    RedisModule_KeyAtPosWithFlags,
);

/// Whether the server has an optional API function (newer than Redis 7.0).
macro_rules! has {
    ($name:ident) => {
        // SAFETY: reading a function pointer filled at init.
        unsafe { ::redis_module::raw::$name }.is_some()
    };
}
pub(crate) use has;

/// The context flags the glue asks about (`Ctx::has_flags`).
pub mod ctx_flags {
    use redis_module::raw;

    pub const AOF: u32 = raw::REDISMODULE_CTX_FLAGS_AOF;
    pub const CLUSTER: u32 = raw::REDISMODULE_CTX_FLAGS_CLUSTER;
    pub const DENY_BLOCKING: u32 = raw::REDISMODULE_CTX_FLAGS_DENY_BLOCKING;
    pub const LOADING: u32 = raw::REDISMODULE_CTX_FLAGS_LOADING;
    pub const LUA: u32 = raw::REDISMODULE_CTX_FLAGS_LUA;
    pub const MASTER: u32 = raw::REDISMODULE_CTX_FLAGS_MASTER;
    pub const MULTI: u32 = raw::REDISMODULE_CTX_FLAGS_MULTI;
    pub const OOM: u32 = raw::REDISMODULE_CTX_FLAGS_OOM;
    pub const REPLICATED: u32 = raw::REDISMODULE_CTX_FLAGS_REPLICATED;
    pub const SLAVE: u32 = raw::REDISMODULE_CTX_FLAGS_SLAVE;
}

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

    /// Whether Redis calls a `getkeys-api` command only to learn where its
    /// keys are (Cluster routing, COMMAND GETKEYS, ACL key patterns).
    pub fn is_keys_position_request(self) -> bool {
        rm!(RedisModule_IsKeysPositionRequest(self.0) else 0) != 0
    }

    /// Answers that request: the argument at `pos` is a key, accessed as
    /// `flags` (`REDISMODULE_CMD_KEY_*`).
    pub fn key_at(self, pos: c_int, flags: u32) {
        rm!(RedisModule_KeyAtPosWithFlags(self.0, pos, flags as c_int) else ());
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

/// At load, once every configuration is registered: applies the values
/// of the `loadmodule` line and the config file.
pub fn load_configs(ctx: Ctx) -> bool {
    rm!(RedisModule_LoadConfigs(ctx.0) else ERR) == OK
}

/// Unix time in milliseconds, as Redis reads it.
pub fn unix_millis() -> i64 {
    rm!(RedisModule_Milliseconds() else 0)
}
