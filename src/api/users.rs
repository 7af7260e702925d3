//! ACL users: who a client runs as, and what a user may do now.

use std::ffi::{c_int, CStr};
use std::ptr;

use redis_module::raw;

use super::{has, rm, Arg, Ctx, HeldString, RedisModuleString, OK};

/// Whether the server can check a user's permissions for the module
/// (Redis 7.0+, Valkey).
pub fn acl_available() -> bool {
    has!(RedisModule_GetClientId)
        && has!(RedisModule_GetClientUserNameById)
        && has!(RedisModule_GetModuleUserFromUserName)
        && has!(RedisModule_FreeModuleUser)
        && has!(RedisModule_ACLCheckCommandPermissions)
        && has!(RedisModule_ACLCheckKeyPermissions)
}

impl Ctx {
    /// A string this module keeps for its whole life (never freed); null
    /// if Redis made none.
    pub fn lasting_string(self, s: &CStr) -> *mut RedisModuleString {
        rm!(RedisModule_CreateString(self.0, s.as_ptr(), s.count_bytes()) else ptr::null_mut())
    }

    /// The name of the ACL user the calling client runs as; `None` for a
    /// client without one.
    pub fn client_user_name(self) -> Option<HeldString> {
        let id = rm!(RedisModule_GetClientId(self.0) else 0);
        if id == 0 {
            return None;
        }
        let held = HeldString::own(rm!(RedisModule_GetClientUserNameById(self.0, id) else ptr::null_mut()));
        held.is_valid().then_some(held)
    }
}

/// A user found by name, freed on drop.
pub struct AclUser(*mut raw::RedisModuleUser);

impl AclUser {
    /// The user of that name now; `None` when there is none (deleted).
    pub fn find(name: &HeldString) -> Option<AclUser> {
        let found = rm!(RedisModule_GetModuleUserFromUserName(name.raw()) else ptr::null_mut());
        (!found.is_null()).then_some(AclUser(found))
    }

    /// Whether the user may run the command `argv` (its name first) now.
    /// On a refusal, errno says why (ENOENT: no such command, nothing was
    /// checked).
    pub fn may_run(&self, argv: &mut [*mut RedisModuleString]) -> bool {
        let argc = c_int::try_from(argv.len()).unwrap_or(c_int::MAX);
        rm!(RedisModule_ACLCheckCommandPermissions(self.0, argv.as_mut_ptr(), argc) else OK) == OK
    }

    /// Whether the user may read and update `key`.
    pub fn may_update_key(&self, key: &Arg) -> bool {
        let access = (raw::REDISMODULE_CMD_KEY_ACCESS | raw::REDISMODULE_CMD_KEY_UPDATE) as c_int;
        rm!(RedisModule_ACLCheckKeyPermissions(self.0, key.raw(), access) else OK) == OK
    }
}

impl Drop for AclUser {
    fn drop(&mut self) {
        rm!(RedisModule_FreeModuleUser(self.0) else ());
    }
}
