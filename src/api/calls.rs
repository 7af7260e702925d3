//! Asking the server: INFO fields, commands run through RM_Call, and
//! the server log.

use std::ffi::{c_int, CStr};
use std::ptr;

use redis_module::raw;

use super::{rm, Arg, Ctx, RedisModuleCtx, ERR, OK};

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

/// A command run for a client (`Ctx::call_for_client`): its reply, to
/// pass back as it is (`Ctx::reply_with_call`).
pub struct Called(CallReply);

impl Called {
    /// Whether it is the error Redis 7.0 answers a call the caller's ACL
    /// user may not make (later servers answer `NOPERM ...`). Read from
    /// the reply's raw protocol: asking its type would parse the whole
    /// reply (every element of an array), which passes on unparsed.
    pub fn is_acl_refusal(&self) -> bool {
        let mut len = 0usize;
        let p = rm!(RedisModule_CallReplyProto(self.0 .0, &mut len) else ptr::null());
        if p.is_null() {
            return false;
        }
        // SAFETY: the reply owns `len` bytes at `p` while it lives.
        unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) }.starts_with(b"-ERR acl verification failed")
    }
}

/// The longest command name `call_for_client` passes (a stack copy, to
/// end it with NUL): longer than any command a server has.
const MAX_COMMAND_NAME: usize = 128;

/// The RM_Call flags of a command run for a client: as the client's ACL
/// user (`C`: its command, key and channel rules), refused out of memory
/// if it may grow memory (`M`), errors as replies (`E`), its effects
/// propagated to replicas and the AOF (`!`), the reply in the client's
/// protocol (`0`); and in script mode (`S`): what a script may not run is
/// refused (SHUTDOWN, MONITOR, ...), and so is a write a script could not
/// make (too few good replicas, a failing disk).
const FOR_CLIENT: &CStr = c"vCSME!0";

/// The same for a script (EVAL, EVALSHA, FCALL and their `_RO` forms),
/// which script mode refuses outright: the script's own calls get the
/// script rules from the server.
const SCRIPT_FOR_CLIENT: &CStr = c"vCME!0";

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

    /// Runs `command args...` for the calling client (`FOR_CLIENT`; a
    /// script, `SCRIPT_FOR_CLIENT`):
    /// `Err(errno)` when the server refuses it before it runs and says so
    /// only by errno (EACCES: the ACL; ENOENT: no such command; EINVAL: its
    /// arity; ESPIPE: not in a script; ENOSPC: out of memory; EPERM,
    /// ENETDOWN: the Cluster); errors of its own are in the reply.
    pub fn call_for_client(self, command: &Arg, args: &[Arg], script: bool) -> Result<Called, i32> {
        let name = command.bytes();
        let mut c_name = [0u8; MAX_COMMAND_NAME];
        match c_name.get_mut(..name.len()) {
            // Shorter than the buffer (its last byte stays NUL) and no NUL
            // inside: any other name is no command.
            Some(dst) if name.len() < MAX_COMMAND_NAME && !name.contains(&0) => dst.copy_from_slice(name),
            _ => return Err(errno::ENOENT),
        }
        let reply = CallReply(rm!(RedisModule_Call(
            self.0,
            c_name.as_ptr().cast::<std::ffi::c_char>(),
            if script { SCRIPT_FOR_CLIENT } else { FOR_CLIENT }.as_ptr(),
            // `Arg` is a transparent wrapper of the `argv` pointers.
            args.as_ptr().cast_mut().cast::<*mut raw::RedisModuleString>(),
            args.len()
        ) else ptr::null_mut()));
        if reply.0.is_null() {
            return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
        }
        Ok(Called(reply))
    }

    /// Answers the client with a command's reply as it is; false when it
    /// cannot be passed on (a RESP3 reply to a RESP2 client).
    pub fn reply_with_call(self, called: &Called) -> bool {
        rm!(RedisModule_ReplyWithCallReply(self.0, called.0 .0) else ERR) == OK
    }

    /// The keys of a command line `argv` (its name first), as the server
    /// finds them: `f(position in argv, REDISMODULE_CMD_KEY_* flags)` for
    /// each; `default_flags` where the server cannot say (before Redis
    /// 7.2). Nothing for an unknown command or a wrong argument count.
    pub fn command_keys(self, argv: &[Arg], default_flags: u32, mut f: impl FnMut(c_int, u32)) {
        let Ok(argc) = c_int::try_from(argv.len()) else {
            return;
        };
        // `Arg` is a transparent wrapper of the `argv` pointers; the
        // server only reads them.
        let argvp = argv.as_ptr().cast_mut().cast::<*mut raw::RedisModuleString>();
        let mut n: c_int = 0;
        let mut flags: *mut c_int = ptr::null_mut();
        let keys = if super::has!(RedisModule_GetCommandKeysWithFlags) {
            rm!(RedisModule_GetCommandKeysWithFlags(self.0, argvp, argc, &mut n, &mut flags) else ptr::null_mut())
        } else {
            rm!(RedisModule_GetCommandKeys(self.0, argvp, argc, &mut n) else ptr::null_mut())
        };
        if !keys.is_null() {
            for i in 0..usize::try_from(n).unwrap_or(0) {
                // SAFETY: the server returned `n` positions (and as many
                // flags, when it returned flags), ours until freed below.
                let pos = unsafe { *keys.add(i) };
                let key_flags = if flags.is_null() { default_flags } else { (unsafe { *flags.add(i) }) as u32 };
                f(pos, key_flags);
            }
            rm!(RedisModule_Free(keys.cast()) else ());
        }
        if !flags.is_null() {
            rm!(RedisModule_Free(flags.cast()) else ());
        }
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

/// The errno values RM_Call leaves (Linux's; the module is built for it).
pub mod errno {
    pub const EPERM: i32 = 1;
    pub const ENOENT: i32 = 2;
    pub const EACCES: i32 = 13;
    pub const EINVAL: i32 = 22;
    pub const ENOSPC: i32 = 28;
    pub const ESPIPE: i32 = 29;
    pub const EROFS: i32 = 30;
    pub const ENETDOWN: i32 = 100;
}
