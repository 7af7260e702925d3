//! Asking the server: INFO fields, commands run through RM_Call, and
//! the server log.

use std::ffi::{c_int, CStr};
use std::ptr;

use redis_module::raw;

use super::{rm, Arg, Ctx, RedisModuleCtx};

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
