//! A waiter's permissions, checked again when it is served.
//!
//! Redis checks ACLs when a command starts, and a waiter's LOCK.ACQUIRE
//! started before it blocked. A user whose rights to the key or the
//! command are taken away meanwhile (`ACL SETUSER u resetkeys -@all`)
//! would still be handed the lock; BLPOP's waiter, re-checked when served,
//! is refused. So the handoff checks the waiter's user as the server would
//! check its command now, and a refused waiter gets the NOPERM error that
//! command would get, leaves the line, and the next one is considered.
//!
//! The ACL API (RM_GetModuleUserFromUserName, RM_ACLCheck*Permissions) is
//! in Redis 7.0 and Valkey; the module still loads on a server without it
//! and there serves waiters without this check, as before.

use std::ffi::{CStr, CString};
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};

use crate::api::{acl_available, AclUser, Arg, Ctx, HeldString, RedisModuleString, ServerInfo};

/// "lock.acquire" as the first argument of a permission check; created at
/// load and kept for the module's life (a module with a data type is
/// never unloaded).
static COMMAND_NAME: AtomicPtr<RedisModuleString> = AtomicPtr::new(ptr::null_mut());

/// Redis 7.2+ and Valkey word ACL refusals differently from Redis 7.0.
static NAMES_THE_USER: AtomicBool = AtomicBool::new(true);

const ACQUIRE: &CStr = c"lock.acquire";

/// errno for "no such entry" (Linux and the BSDs agree).
const ENOENT: i32 = 2;

/// At load: the command name for the checks, and the server's wording.
pub fn init(ctx: Ctx, server: &ServerInfo) {
    if acl_available() {
        COMMAND_NAME.store(ctx.lasting_string(ACQUIRE), Ordering::Relaxed);
    }
    let valkey = server.text(c"valkey_version").is_some();
    let redis = server.text(c"redis_version").and_then(|v| {
        let mut parts = v.split('.').map(|p| p.parse::<u32>().ok());
        Some((parts.next()??, parts.next()??))
    });
    NAMES_THE_USER.store(valkey || redis.is_none_or(|version| version >= (7, 2)), Ordering::Relaxed);
}

/// The ACL user the calling client runs as, to check again at handoff;
/// `None` when there is nothing to check (a client without an ACL user
/// has every permission) or the server cannot check.
pub fn current_user(ctx: Ctx) -> Option<HeldString> {
    if COMMAND_NAME.load(Ordering::Relaxed).is_null() {
        return None;
    }
    ctx.client_user_name()
}

/// `None` when `user` may run `LOCK.ACQUIRE key` now; otherwise the
/// error its command would get.
pub fn refusal(user: &HeldString, key: &Arg) -> Option<CString> {
    let name = COMMAND_NAME.load(Ordering::Relaxed);
    if name.is_null() {
        return None;
    }
    let Some(found) = AclUser::find(user) else {
        // Deleted since (its clients are normally disconnected with it):
        // it may run nothing.
        return Some(command_refused(user.bytes()));
    };
    // The command with its key, as the server checks it: the command (or
    // its first argument) and the key with the key spec's access flags.
    let mut argv = [name, key.raw()];
    if found.may_run(&mut argv) {
        return None;
    }
    // ENOENT: the server did not find the command, so it checked nothing;
    // refusing then would turn every waiter away, not the unauthorised.
    if std::io::Error::last_os_error().raw_os_error() == Some(ENOENT) {
        return None;
    }
    // Which one: the server names the command when both are refused.
    let mut alone = [name];
    let command_allowed = found.may_run(&mut alone);
    let key_allowed = found.may_update_key(key);
    if command_allowed && !key_allowed {
        Some(key_refused())
    } else {
        Some(command_refused(user.bytes()))
    }
}

fn command_refused(user: &[u8]) -> CString {
    let text = if NAMES_THE_USER.load(Ordering::Relaxed) {
        format!("NOPERM User {} has no permissions to run the 'lock.acquire' command", printable(user))
    } else {
        "NOPERM this user has no permissions to run the 'lock.acquire' command".to_string()
    };
    CString::new(text).unwrap_or_else(|_| c"NOPERM".to_owned())
}

fn key_refused() -> CString {
    let text: &CStr = if NAMES_THE_USER.load(Ordering::Relaxed) {
        c"NOPERM No permissions to access a key"
    } else {
        c"NOPERM this user has no permissions to access one of the keys used as arguments"
    };
    text.to_owned()
}

/// A user name in an error reply: no CR, LF or NUL (ACL names have no
/// spaces, but a reply must never carry protocol bytes).
fn printable(bytes: &[u8]) -> String {
    bytes.iter().map(|&b| if (0x21..0x7f).contains(&b) { b as char } else { '?' }).collect()
}
