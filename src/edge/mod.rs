//! The edge: what Redis calls into. The command table (`init` registers
//! it with its docs, key specs and ACL categories), the data type and its
//! callbacks (`datatype`), and every server event (`events`). Each hands
//! over to the glue at once; the rest of the FFI is `api`, whose generic
//! trampolines are the callbacks the glue asks for at run time (timers,
//! keyspace scans, blocked clients, the INFO section) and call its plain
//! Rust functions.

pub mod datatype;
mod events;
pub mod register;

use std::ffi::{c_int, CStr};

use redis_module::{raw, Context, RedisString, Status};

use crate::api::{self, rm, Arg, Ctx, RedisModuleCtx, RedisModuleString};
use crate::{
    args, commands, commands::info, replication::audience, replication::writable, server::clock, server::config, server::fencing,
    server::quarantine, waiters::acl,
};

type Handler = fn(Ctx, &[Arg]) -> c_int;

/// A command as Redis sees it. Flags and the key position make Cluster
/// routing, COMMAND GETKEYS and ACL key patterns work on every server; the
/// command info (arity, a key spec with its access flags, docs) and the
/// ACL categories are declared where the server supports them.
struct Command {
    name: &'static CStr,
    flags: &'static CStr,
    handler: raw::RedisModuleCmdFunc,
    arity: c_int,
    /// `REDISMODULE_CMD_KEY_*` of the key at position 1 (of every key,
    /// for a numkeys command); 0 for a command without a key.
    key_flags: u32,
    /// Redis's numkeys convention: position 1 says how many keys follow
    /// (LMPOP, SINTERCARD); otherwise the one key is at position 1.
    numkeys: bool,
    /// ACL categories (Redis 7.2+, Valkey 8.1+).
    acl: &'static CStr,
    summary: &'static CStr,
    complexity: &'static CStr,
    /// Its arguments after the name, for COMMAND DOCS.
    args: &'static [ArgDoc],
    /// Keys beside the one at position 1: every argument after this word
    /// (LOCK.REVOKE's FENCE registers), with their access flags, as a
    /// second key spec.
    keys_after: Option<(&'static CStr, u32)>,
    /// Also in the module's own ACL category (`ADMIN_CATEGORY`) where the
    /// server lets a module add one.
    admin: bool,
}

/// One argument as COMMAND DOCS lists it.
struct ArgDoc {
    name: &'static CStr,
    kind: raw::RedisModuleCommandArgType,
    /// The word that precedes the value (`FENCE 7`).
    token: Option<&'static CStr>,
    optional: bool,
    /// One or more of it (a numkeys command's keys).
    multiple: bool,
}

const fn arg(name: &'static CStr, kind: raw::RedisModuleCommandArgType) -> ArgDoc {
    ArgDoc { name, kind, token: None, optional: false, multiple: false }
}

/// One or more of an argument (`key [key ...]`).
const fn many(name: &'static CStr, kind: raw::RedisModuleCommandArgType) -> ArgDoc {
    ArgDoc { name, kind, token: None, optional: false, multiple: true }
}

/// An optional argument without a word before it (`[command]`).
const fn optional(name: &'static CStr, kind: raw::RedisModuleCommandArgType) -> ArgDoc {
    ArgDoc { name, kind, token: None, optional: true, multiple: false }
}

/// Any number of an argument (`[arg ...]`).
const fn optional_many(name: &'static CStr, kind: raw::RedisModuleCommandArgType) -> ArgDoc {
    ArgDoc { name, kind, token: None, optional: true, multiple: true }
}

/// An optional `TOKEN value` pair; LOCK.ACQUIRE takes its options in any order.
const fn option(token: &'static CStr, name: &'static CStr, kind: raw::RedisModuleCommandArgType) -> ArgDoc {
    ArgDoc { name, kind, token: Some(token), optional: true, multiple: false }
}

/// An optional word on its own (`SHARED`).
const fn flag(token: &'static CStr, name: &'static CStr) -> ArgDoc {
    ArgDoc { name, kind: PURE_TOKEN, token: Some(token), optional: true, multiple: false }
}

const PURE_TOKEN: raw::RedisModuleCommandArgType = raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_PURE_TOKEN;
const KEY: raw::RedisModuleCommandArgType = raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_KEY;
const STRING: raw::RedisModuleCommandArgType = raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING;
const INTEGER: raw::RedisModuleCommandArgType = raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER;
const UNIX_TIME: raw::RedisModuleCommandArgType = raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_UNIX_TIME;

const ACQUIRE_ARGS: [ArgDoc; 11] = [
    arg(c"key", KEY),
    arg(c"owner", STRING),
    arg(c"ttl-ms", INTEGER),
    flag(c"SHARED", c"shared"),
    option(c"LIMIT", c"holders", INTEGER),
    option(c"PERMITS", c"permits", INTEGER),
    option(c"FENCE", c"min-token", INTEGER),
    option(c"WAIT", c"timeout-ms", INTEGER),
    flag(c"SESSION", c"session"),
    option(c"DELAY", c"lock-delay-ms", INTEGER),
    option(c"VALUE", c"value", STRING),
];
const RELEASE_ARGS: [ArgDoc; 2] = [arg(c"key", KEY), arg(c"owner", STRING)];
const EXTEND_ARGS: [ArgDoc; 3] = [arg(c"key", KEY), arg(c"owner", STRING), arg(c"ttl-ms", INTEGER)];
const PROCLAIM_ARGS: [ArgDoc; 3] = [arg(c"key", KEY), arg(c"owner", STRING), arg(c"value", STRING)];
const INFO_ARGS: [ArgDoc; 1] = [arg(c"key", KEY)];
const CHECK_ARGS: [ArgDoc; 3] = [arg(c"key", KEY), arg(c"owner", STRING), arg(c"token", INTEGER)];
const GUARD_ARGS: [ArgDoc; 5] =
    [arg(c"key", KEY), arg(c"owner", STRING), arg(c"token", INTEGER), arg(c"command", STRING), optional_many(c"arg", STRING)];
const FENCED_ARGS: [ArgDoc; 4] =
    [arg(c"register", KEY), arg(c"token", INTEGER), optional(c"command", STRING), optional_many(c"arg", STRING)];
const FENCEINFO_ARGS: [ArgDoc; 1] = [arg(c"register", KEY)];
const WAITERS_ARGS: [ArgDoc; 2] = [arg(c"key", KEY), option(c"COUNT", c"count", INTEGER)];
const TOP_ARGS: [ArgDoc; 1] = [option(c"COUNT", c"count", INTEGER)];
const MACQUIRE_ARGS: [ArgDoc; 10] = [
    arg(c"numkeys", INTEGER),
    many(c"key", KEY),
    arg(c"owner", STRING),
    arg(c"ttl-ms", INTEGER),
    flag(c"SHARED", c"shared"),
    option(c"FENCE", c"min-token", INTEGER),
    option(c"WAIT", c"timeout-ms", INTEGER),
    flag(c"SESSION", c"session"),
    option(c"DELAY", c"lock-delay-ms", INTEGER),
    option(c"SEMAPHORE", c"limit", INTEGER),
];
const MRELEASE_ARGS: [ArgDoc; 3] = [arg(c"numkeys", INTEGER), many(c"key", KEY), arg(c"owner", STRING)];
const MEXTEND_ARGS: [ArgDoc; 4] = [arg(c"numkeys", INTEGER), many(c"key", KEY), arg(c"owner", STRING), arg(c"ttl-ms", INTEGER)];
const REVOKE_ARGS: [ArgDoc; 3] = [
    arg(c"key", KEY),
    option(c"OWNER", c"owner", STRING),
    ArgDoc { name: c"register", kind: KEY, token: Some(c"FENCE"), optional: true, multiple: true },
];
const ASK_ARGS: [ArgDoc; 2] = [arg(c"key", KEY), option(c"MESSAGE", c"text", STRING)];
const RESIZE_ARGS: [ArgDoc; 2] = [arg(c"key", KEY), arg(c"limit", INTEGER)];
const APPLY_ARGS: [ArgDoc; 4] = [arg(c"key", KEY), arg(c"owner", STRING), arg(c"token", INTEGER), arg(c"deadline-unix-ms", UNIX_TIME)];

/// Adapts a handler to the C calling convention.
macro_rules! command {
    ($name:literal, $handler:expr, $flags:literal, $($field:ident: $value:expr),* $(,)?) => {{
        unsafe extern "C" fn call(
            ctx: *mut RedisModuleCtx,
            argv: *mut *mut RedisModuleString,
            argc: c_int,
        ) -> c_int {
            let handler: Handler = $handler;
            // SAFETY: Redis passes `argc` arguments that live for the call.
            handler(Ctx::new(ctx), unsafe { Arg::slice(argv, argc) });
            api::OK
        }
        Command { name: $name, flags: $flags, handler: Some(call), $($field: $value),* }
    }};
}

const RW: u32 = raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_ACCESS;

/// A numkeys command's handler that first answers Redis's request for
/// its keys (`getkeys-api`): Redis 7.0 routes a Cluster command and
/// answers CROSSSLOT from that, not from the key spec, for a command
/// with no legacy key range.
macro_rules! with_keys {
    ($handler:path, $key_flags:expr) => {
        |ctx: Ctx, argv: &[Arg]| -> c_int {
            if ctx.is_keys_position_request() {
                report_keys(ctx, argv, $key_flags);
                return api::OK;
            }
            $handler(ctx, argv)
        }
    };
}

/// The keys of a numkeys command, from position 2 on; none when its
/// numkeys is not valid or above `redislock.max-set-keys` (the command
/// then answers the error itself, having touched no key).
fn report_keys(ctx: Ctx, argv: &[Arg], key_flags: u32) {
    for pos in 2..args::numkeys(argv, config::max_set_keys()).map_or(0, |n| n + 2) {
        ctx.key_at(c_int::try_from(pos).unwrap_or(c_int::MAX), key_flags);
    }
}

/// LOCK.GUARD's keys for Redis's request (`getkeys-api`): the lock's,
/// then the guarded command's as the server finds them, so that a Cluster
/// routes the whole command by all of them and answers CROSSSLOT for keys
/// of several slots. (ACL key patterns go by the key spec, the lock's key:
/// the guarded command's keys are checked as it runs, as the caller's.)
/// A command the guard refuses reports no keys of its own (nor does a
/// LOCK.* one: no nested request).
fn report_guard_keys(ctx: Ctx, argv: &[Arg]) {
    ctx.key_at(1, READ);
    report_run_keys(ctx, argv, GUARDED_AT);
}

/// LOCK.FENCED's keys, as LOCK.GUARD's: the register's (written), then
/// the command's.
fn report_fenced_keys(ctx: Ctx, argv: &[Arg]) {
    ctx.key_at(1, RW | raw::REDISMODULE_CMD_KEY_UPDATE);
    report_run_keys(ctx, argv, FENCED_AT);
}

/// The keys of the command that starts at `at` in `argv`, as the server
/// finds them.
fn report_run_keys(ctx: Ctx, argv: &[Arg], at: c_int) {
    // None, or an empty line, when Redis asks with too few arguments (or
    // LOCK.FENCED has no command): the server is not asked about a command
    // line without a name.
    let Some(guarded) = argv.get(at as usize..).filter(|g| !g.is_empty()) else {
        return;
    };
    if let Some(name) = guarded.first() {
        if args::unguardable(name.bytes(), guarded.get(1..).unwrap_or_default()).is_some() {
            return;
        }
    }
    ctx.command_keys(guarded, RW, |pos, flags| ctx.key_at(pos.saturating_add(at), flags));
}

/// LOCK.REVOKE's keys: the lock's, then its registers (none when the
/// arguments do not parse: the command then answers the error itself).
fn report_revoke_keys(ctx: Ctx, argv: &[Arg]) {
    ctx.key_at(1, RW | raw::REDISMODULE_CMD_KEY_DELETE);
    if let Some(at) = args::revoke_registers_at(argv) {
        for pos in at..argv.len() {
            ctx.key_at(c_int::try_from(pos).unwrap_or(c_int::MAX), RW | raw::REDISMODULE_CMD_KEY_UPDATE);
        }
    }
}

const READ: u32 = raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS;
/// Where LOCK.GUARD's guarded command begins (`key owner token command`).
const GUARDED_AT: c_int = 4;
/// Where LOCK.FENCED's command begins (`register token command`).
const FENCED_AT: c_int = 3;

fn command_table() -> [Command; 18] {
    [
        // `blocking`: WAIT blocks the client (Redis puts it in @blocking
        // and knows it may block, as for BLPOP); `fast`: the command itself
        // is O(1) and returns at once, also when the client then waits.
        command!(c"lock.acquire", commands::acquire, c"write deny-oom fast blocking",
            arity: -4, key_flags: RW | raw::REDISMODULE_CMD_KEY_UPDATE, numkeys: false, acl: c"write fast blocking",
            summary: c"Takes a lock (exclusive, SHARED, or a permit of a SHARED LIMIT semaphore) for an owner with a lease, or waits in line (WAIT), optionally bound to the connection (SESSION); replies the fencing token",
            complexity: c"O(1)", args: &ACQUIRE_ARGS, keys_after: None, admin: false),
        command!(c"lock.release", commands::release, c"write fast",
            arity: 3, key_flags: RW | raw::REDISMODULE_CMD_KEY_DELETE, numkeys: false, acl: c"write fast",
            summary: c"Releases a lock if the owner holds it; the oldest waiter gets it",
            complexity: c"O(1)", args: &RELEASE_ARGS, keys_after: None, admin: false),
        command!(c"lock.extend", commands::extend, c"write fast",
            arity: 4, key_flags: RW | raw::REDISMODULE_CMD_KEY_UPDATE, numkeys: false, acl: c"write fast",
            summary: c"Restarts the lease of a lock the owner holds (a SESSION hold: from its own connection only)",
            complexity: c"O(1)", args: &EXTEND_ARGS, keys_after: None, admin: false),
        // `deny-oom`: a new value may take more memory than the old.
        command!(c"lock.proclaim", commands::proclaim, c"write deny-oom fast",
            arity: 4, key_flags: RW | raw::REDISMODULE_CMD_KEY_UPDATE, numkeys: false, acl: c"write fast",
            summary: c"Replaces the value stored with the owner's hold: an exclusive lock's (an election's advertised leader) or a shared holder's own (a group member's); lease and token stay",
            complexity: c"O(N) where N is the length of the value", args: &PROCLAIM_ARGS, keys_after: None, admin: false),
        // Publishes and changes nothing: a read, allowed on a replica
        // (whose own subscribers hear it).
        command!(c"lock.ask", commands::ask, c"readonly fast",
            arity: -2, key_flags: raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS, numkeys: false, acl: c"read fast pubsub",
            summary: c"Asks each holder of a lock to let it go: an 'ask' announcement with its token and owner on the lock's channel",
            complexity: c"O(N) where N is the number of holders", args: &ASK_ARGS, keys_after: None, admin: false),
        command!(c"lock.info", commands::info, c"readonly fast",
            arity: 2, key_flags: raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS, numkeys: false, acl: c"read fast",
            summary: c"Mode, holders (owner, fencing token, remaining lease, a shared holder's value), limit, waiters and value of a lock",
            complexity: c"O(1)", args: &INFO_ARGS, keys_after: None, admin: false),
        // The fence: whether a hold is current (a GET-class read) ...
        command!(c"lock.check", commands::check, c"readonly fast",
            arity: 4, key_flags: raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS, numkeys: false, acl: c"read fast",
            summary: c"Whether owner holds the lock under token with its lease running: 1, or a FENCED error saying why not",
            complexity: c"O(1) for an exclusive lock, O(N) for N shared holders", args: &CHECK_ARGS, keys_after: None, admin: false),
        // ... and a command run only while it is. `write`: the guard is a
        // write as a script is, whatever it runs (refused on a read-only
        // replica; inside MULTI and scripts it works as any write). Not
        // `deny-oom`: the guarded command's own flags decide (RM_Call's
        // script mode). The key spec is the lock's key; the guarded
        // command's keys are added for Cluster routing (`getkeys-api`,
        // `report_guard_keys`) and checked for ACL as it runs.
        command!(c"lock.guard", |ctx: Ctx, argv: &[Arg]| -> c_int {
                if ctx.is_keys_position_request() {
                    report_guard_keys(ctx, argv);
                    return api::OK;
                }
                commands::guard(ctx, argv)
            }, c"write getkeys-api",
            arity: -5, key_flags: READ, numkeys: false, acl: c"write slow",
            summary: c"Runs a command atomically only while owner holds the lock under token; otherwise runs nothing and answers a FENCED error saying why",
            complexity: c"O(1) plus the guarded command's", args: &GUARD_ARGS, keys_after: None, admin: false),
        // The store-side fence for data kept apart from the locks (the
        // quorum's): a token register, raised by each write it lets
        // through. Flags and keys as LOCK.GUARD's, the register written.
        command!(c"lock.fenced", |ctx: Ctx, argv: &[Arg]| -> c_int {
                if ctx.is_keys_position_request() {
                    report_fenced_keys(ctx, argv);
                    return api::OK;
                }
                commands::fenced(ctx, argv)
            }, c"write getkeys-api",
            arity: -3, key_flags: RW | raw::REDISMODULE_CMD_KEY_UPDATE, numkeys: false, acl: c"write slow",
            summary: c"Runs a command only if token is at least every token the register has accepted, raising the register to it; an older token runs nothing and gets a FENCED error",
            complexity: c"O(1) plus the command's", args: &FENCED_ARGS, keys_after: None, admin: false),
        command!(c"lock.fenceinfo", commands::fenceinfo, c"readonly fast",
            arity: 2, key_flags: READ, numkeys: false, acl: c"read fast",
            summary: c"The highest token a register (LOCK.FENCED) has accepted, or nil",
            complexity: c"O(1)", args: &FENCEINFO_ARGS, keys_after: None, admin: false),
        command!(c"lock.waiters", commands::waiters_of, c"readonly",
            arity: -2, key_flags: raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS, numkeys: false, acl: c"read",
            summary: c"The line of clients waiting for a lock, oldest first: owner, mode, how long each has waited and has left",
            complexity: c"O(N) where N is the number of waiters listed", args: &WAITERS_ARGS, keys_after: None, admin: false),
        // No key: each node lists its own locks (in a Cluster, ask every
        // master). It names keys whatever the user's key patterns, as
        // SCAN does, so it is in @keyspace with it.
        command!(c"lock.top", commands::top, c"readonly",
            arity: -1, key_flags: 0, numkeys: false, acl: c"read slow keyspace",
            summary: c"The most contended locks of the database, most waiters first: key, waiters, oldest wait, mode, holders, longest hold",
            complexity: c"O(N log N) where N is the number of locks with waiters", args: &TOP_ARGS, keys_after: None, admin: false),
        // Several keys (numkeys): no legacy (first, last, step) triple can
        // say where they are. The key spec (KEYNUM) says it to clients
        // (COMMAND INFO); the server asks the command itself (`getkeys-api`,
        // `with_keys!`) for ACL key patterns and Cluster routing, where
        // keys of several slots get CROSSSLOT (Redis 7.0 routes a module
        // command by that, not by its key spec).
        command!(c"lock.macquire", with_keys!(commands::macquire, RW | raw::REDISMODULE_CMD_KEY_UPDATE), c"write deny-oom fast blocking getkeys-api",
            arity: -5, key_flags: RW | raw::REDISMODULE_CMD_KEY_UPDATE, numkeys: true, acl: c"write fast blocking",
            summary: c"Takes several locks at once, all or nothing, for one owner with one lease and one fencing token for the whole set (exclusive or SHARED, optionally bound to the connection with SESSION)",
            complexity: c"O(N) where N is the number of keys", args: &MACQUIRE_ARGS, keys_after: None, admin: false),
        command!(c"lock.mrelease", with_keys!(commands::mrelease, RW | raw::REDISMODULE_CMD_KEY_DELETE), c"write fast getkeys-api",
            arity: -4, key_flags: RW | raw::REDISMODULE_CMD_KEY_DELETE, numkeys: true, acl: c"write fast",
            summary: c"Releases the locks of a set the owner holds; replies how many were released",
            complexity: c"O(N) where N is the number of keys", args: &MRELEASE_ARGS, keys_after: None, admin: false),
        command!(c"lock.mextend", with_keys!(commands::mextend, RW | raw::REDISMODULE_CMD_KEY_UPDATE), c"write fast getkeys-api",
            arity: -5, key_flags: RW | raw::REDISMODULE_CMD_KEY_UPDATE, numkeys: true, acl: c"write fast",
            summary: c"Restarts the leases of the locks of a set the owner holds; replies how many were extended",
            complexity: c"O(N) where N is the number of keys", args: &MEXTEND_ARGS, keys_after: None, admin: false),
        // An operator's command: it ends others' holds (`dangerous`, as
        // CLIENT KILL), and is not O(1) (every holder, every register).
        // Keys: the lock's, then each register after FENCE, as the
        // command parses them (`getkeys-api`), so a Cluster refuses
        // registers of another slot (CROSSSLOT).
        command!(c"lock.revoke", |ctx: Ctx, argv: &[Arg]| -> c_int {
                if ctx.is_keys_position_request() {
                    report_revoke_keys(ctx, argv);
                    return api::OK;
                }
                commands::revoke(ctx, argv)
            }, c"write getkeys-api",
            arity: -2, key_flags: RW | raw::REDISMODULE_CMD_KEY_DELETE, numkeys: false, acl: c"write slow dangerous",
            summary: c"Takes a lock's hold away (one OWNER's, or every hold) under a new fencing token, raises the FENCE registers to it and serves the line; replies the token and the number of holds ended",
            complexity: c"O(N + R) where N is the number of holders and R the number of registers", args: &REVOKE_ARGS,
            keys_after: Some((c"FENCE", RW | raw::REDISMODULE_CMD_KEY_UPDATE)), admin: true),
        // An operator's command too (`dangerous`: it changes how many may
        // hold a semaphore others use); deny-oom, as a resize may grant.
        command!(c"lock.resize", commands::resize, c"write deny-oom",
            arity: -3, key_flags: RW | raw::REDISMODULE_CMD_KEY_UPDATE, numkeys: false, acl: c"write slow dangerous",
            summary: c"Sets a held semaphore's limit: holders keep their permits, whoever waits is granted as far as the new limit allows; replies the number of waiters granted, or nil for a free key",
            complexity: c"O(N) where N is the number of waiters granted", args: &RESIZE_ARGS, keys_after: None, admin: true),
        command!(c"lock.apply", commands::apply, c"write",
            arity: -5, key_flags: raw::REDISMODULE_CMD_KEY_OW | raw::REDISMODULE_CMD_KEY_UPDATE, numkeys: false, acl: c"write",
            summary: c"Internal: the replicated form of a grant; accepted only from the master link or the AOF",
            complexity: c"O(1)", args: &APPLY_ARGS, keys_after: None, admin: false),
    ]
}

/// Declares arity, key spec and docs (Redis 7.0+), and the ACL categories
/// where the server has them. Redis copies what it is given.
fn describe(ctx: &Context, c: &Command) -> Result<(), String> {
    let name = c.name.to_string_lossy();
    let cmd = rm!(RedisModule_GetCommand(ctx.ctx, c.name.as_ptr()) else std::ptr::null_mut());
    if cmd.is_null() {
        return Err(format!("could not find command {name} after creating it"));
    }
    let version = raw::RedisModuleCommandInfoVersion {
        version: 1,
        sizeof_historyentry: std::mem::size_of::<raw::RedisModuleCommandHistoryEntry>(),
        sizeof_keyspec: std::mem::size_of::<raw::RedisModuleCommandKeySpec>(),
        sizeof_arg: std::mem::size_of::<raw::RedisModuleCommandArg>(),
    };
    let (find_keys_type, fk) = if c.numkeys {
        // The count at position 1 (0 from the search's start), the keys
        // from the next one on.
        (
            raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_KEYNUM,
            raw::RedisModuleCommandKeySpec__bindgen_ty_2 {
                keynum: raw::RedisModuleCommandKeySpec__bindgen_ty_2__bindgen_ty_2 { keynumidx: 0, firstkey: 1, keystep: 1 },
            },
        )
    } else {
        (
            raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE,
            raw::RedisModuleCommandKeySpec__bindgen_ty_2 {
                range: raw::RedisModuleCommandKeySpec__bindgen_ty_2__bindgen_ty_1 { lastkey: 0, keystep: 1, limit: 0 },
            },
        )
    };
    let key = raw::RedisModuleCommandKeySpec {
        notes: std::ptr::null(),
        flags: u64::from(c.key_flags),
        begin_search_type: raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX,
        bs: raw::RedisModuleCommandKeySpec__bindgen_ty_1 { index: raw::RedisModuleCommandKeySpec__bindgen_ty_1__bindgen_ty_1 { pos: 1 } },
        find_keys_type,
        fk,
    };
    // SAFETY: an all-zero key spec is the array's terminator.
    let terminator: raw::RedisModuleCommandKeySpec = unsafe { std::mem::zeroed() };
    let mut key_specs = vec![key];
    if let Some((word, flags)) = c.keys_after {
        // Every argument after the word, to the end.
        key_specs.push(raw::RedisModuleCommandKeySpec {
            notes: std::ptr::null(),
            flags: u64::from(flags),
            begin_search_type: raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_KEYWORD,
            bs: raw::RedisModuleCommandKeySpec__bindgen_ty_1 {
                keyword: raw::RedisModuleCommandKeySpec__bindgen_ty_1__bindgen_ty_2 { keyword: word.as_ptr(), startfrom: 2 },
            },
            find_keys_type: raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE,
            fk: raw::RedisModuleCommandKeySpec__bindgen_ty_2 {
                range: raw::RedisModuleCommandKeySpec__bindgen_ty_2__bindgen_ty_1 { lastkey: -1, keystep: 1, limit: 0 },
            },
        });
    }
    key_specs.push(terminator);
    // A command without a key has no key spec: the terminator alone.
    let key_specs = if c.key_flags == 0 { key_specs.get_mut(1..).unwrap_or_default() } else { &mut key_specs[..] };
    let mut args: Vec<raw::RedisModuleCommandArg> = c
        .args
        .iter()
        .map(|a| raw::RedisModuleCommandArg {
            name: a.name.as_ptr(),
            type_: a.kind,
            // The first key argument is spec 0, the next (LOCK.REVOKE's
            // registers) spec 1; -1 for the rest.
            key_spec_index: if a.kind != KEY {
                -1
            } else if a.token.is_some() {
                1
            } else {
                0
            },
            token: a.token.map_or(std::ptr::null(), CStr::as_ptr),
            summary: std::ptr::null(),
            since: std::ptr::null(),
            flags: (if a.optional { raw::REDISMODULE_CMD_ARG_OPTIONAL as c_int } else { 0 })
                | (if a.multiple { raw::REDISMODULE_CMD_ARG_MULTIPLE as c_int } else { 0 }),
            deprecated_since: std::ptr::null(),
            subargs: std::ptr::null_mut(),
            display_text: std::ptr::null(),
        })
        .collect();
    // SAFETY: an all-zero argument (no name) is the array's terminator.
    args.push(unsafe { std::mem::zeroed() });
    let info = raw::RedisModuleCommandInfo {
        version: &version,
        summary: c.summary.as_ptr(),
        complexity: c.complexity.as_ptr(),
        since: c"0.1.0".as_ptr(),
        history: std::ptr::null_mut(),
        tips: std::ptr::null(),
        arity: c.arity,
        key_specs: key_specs.as_mut_ptr(),
        args: args.as_mut_ptr(),
    };
    if rm!(RedisModule_SetCommandInfo(cmd, &info) else api::ERR) != api::OK {
        return Err(format!("Redis refused the command info of {name}"));
    }
    let admin = c.admin && ADMIN_ADDED.load(std::sync::atomic::Ordering::Relaxed);
    let acl = if admin { std::borrow::Cow::Owned(with_admin(c.acl)) } else { std::borrow::Cow::Borrowed(c.acl) };
    if api::has!(RedisModule_SetCommandACLCategories)
        && rm!(RedisModule_SetCommandACLCategories(cmd, acl.as_ptr()) else api::ERR) != api::OK
    {
        return Err(format!("Redis refused the ACL categories of {name}"));
    }
    Ok(())
}

/// The module's own ACL category, for its administrative commands
/// (LOCK.REVOKE, LOCK.RESIZE): `ACL SETUSER ops +@redislock-admin`. Added where the
/// server lets a module add one (RedisModule_AddACLCategory: Redis 7.4+);
/// elsewhere the command is named (`-lock.revoke`).
const ADMIN_CATEGORY: &CStr = c"redislock-admin";
/// Whether the server took `ADMIN_CATEGORY` at load.
static ADMIN_ADDED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// `categories` plus the module's own.
fn with_admin(categories: &CStr) -> std::ffi::CString {
    let mut all = categories.to_bytes().to_vec();
    all.push(b' ');
    all.extend_from_slice(ADMIN_CATEGORY.to_bytes());
    // Neither part holds a NUL.
    std::ffi::CString::new(all).unwrap_or_else(|_| categories.to_owned())
}

fn fail(ctx: &Context, message: &str) -> Status {
    ctx.log_warning(&format!("redislock: {message}"));
    Status::Err
}

/// The module's load: configuration, commands, the data type, server
/// events, INFO, and the state learnt from the server.
pub fn init(ctx: &Context, args: &[RedisString]) -> Status {
    let missing = api::missing_functions();
    if !missing.is_empty() {
        return fail(ctx, &format!("this Redis lacks module API functions: {}", missing.join(", ")));
    }
    if let Err(e) = config::register(ctx, args) {
        return fail(ctx, &e);
    }
    if !datatype::remember_registered() {
        return fail(ctx, "the lock data type was not registered");
    }
    if !register::remember_registered() {
        return fail(ctx, "the token register data type was not registered");
    }
    // Keys opened for writing are not implicitly "modified": a failed
    // acquire must not break WATCH or client-side caching. Effects signal
    // themselves (see `propagate`).
    let options = (raw::REDISMODULE_OPTIONS_HANDLE_IO_ERRORS | raw::REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED) as c_int;
    rm!(RedisModule_SetModuleOptions(ctx.ctx, options) else ());
    if api::has!(RedisModule_AddACLCategory) {
        if rm!(RedisModule_AddACLCategory(ctx.ctx, ADMIN_CATEGORY.as_ptr()) else api::ERR) != api::OK {
            return fail(ctx, "Redis refused the ACL category redislock-admin");
        }
        ADMIN_ADDED.store(true, std::sync::atomic::Ordering::Relaxed);
    }
    for c in command_table() {
        // No legacy triple for a command without a key or with numkeys.
        let key_step = if c.key_flags == 0 || c.numkeys { 0 } else { 1 };
        let status = rm!(RedisModule_CreateCommand(ctx.ctx, c.name.as_ptr(), c.handler, c.flags.as_ptr(), key_step, key_step, key_step) else api::ERR);
        if status != api::OK {
            return fail(ctx, &format!("could not create command {}", c.name.to_string_lossy()));
        }
        if let Err(e) = describe(ctx, &c) {
            return fail(ctx, &e);
        }
    }
    // The monotonic clock's origin, before any lease is measured on it.
    clock::mono_ms();
    let module = Ctx::new(ctx.ctx);
    if !api::init_timer_ctx(module) {
        return fail(ctx, "could not get a context for timers");
    }
    if !events::subscribe(module) {
        return fail(ctx, "could not subscribe to server events");
    }
    writable::learn_role(module);
    audience::learn(module);
    if !info::register(module) {
        return fail(ctx, "could not register the INFO section");
    }
    let server = api::ServerInfo::read(module, c"server");
    datatype::learn_memory_accounting(&server);
    acl::init(module, &server);
    drop(server);
    quarantine::start(module);
    fencing::COUNTER.seed_from_clock();
    Status::Ok
}
