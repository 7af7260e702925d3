//! redislock: native distributed locks for Redis.
//!
//! `LOCK.ACQUIRE / LOCK.RELEASE / LOCK.EXTEND / LOCK.INFO` on a lock data
//! type whose lease is the key's TTL and whose every grant carries a
//! fencing token from a per-instance monotonic counter.
//!
//! - `args`: command argument parsing
//! - `commands`: the lock commands
//! - `lock`: the lock value and its data type callbacks
//! - `fencing`: the token counter
//! - `propagate`: replication, AOF, WATCH and keyspace events; LOCK.APPLY
//! - `waiters`: fair server-side waiting (WAIT) and the handoff
//! - `quarantine`: the restart quarantine
//! - `config`: module configuration
//! - `api`: the thin, allocation-free boundary to the Redis Module API

// Under `cargo test` the module entry point is not compiled (the unit tests
// use the system allocator, not Redis's), so its helpers look unused.
#![cfg_attr(test, allow(dead_code))]

pub mod api;
pub mod args;
pub mod commands;
pub mod config;
pub mod fencing;
pub mod lock;
pub mod propagate;
pub mod quarantine;
pub mod waiters;

use std::ffi::{c_int, CStr};

use redis_module::{raw, Context, RedisString, Status};

use api::{rm, Arg, Ctx, RedisModuleCtx, RedisModuleString};
#[cfg(not(test))]
use lock::LOCK_TYPE;

type Handler = fn(Ctx, &[Arg]) -> c_int;

/// A command as Redis sees it: flags and key positions make Cluster
/// routing, COMMAND INFO/GETKEYS and ACL key patterns work.
struct Command {
    name: &'static CStr,
    flags: &'static CStr,
    first_key: c_int,
    last_key: c_int,
    key_step: c_int,
    handler: raw::RedisModuleCmdFunc,
}

/// Adapts a handler to the C calling convention.
macro_rules! command {
    ($name:literal, $handler:path, $flags:literal) => {{
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
        Command { name: $name, flags: $flags, first_key: 1, last_key: 1, key_step: 1, handler: Some(call) }
    }};
}

fn command_table() -> [Command; 5] {
    [
        command!(c"lock.acquire", commands::acquire, c"write deny-oom fast"),
        command!(c"lock.release", commands::release, c"write fast"),
        command!(c"lock.extend", commands::extend, c"write fast"),
        command!(c"lock.info", commands::info, c"readonly fast"),
        command!(c"lock.apply", propagate::apply, c"write"),
    ]
}

fn fail(ctx: &Context, message: &str) -> Status {
    ctx.log_warning(&format!("redislock: {message}"));
    Status::Err
}

fn init(ctx: &Context, args: &[RedisString]) -> Status {
    let missing = api::missing_functions();
    if !missing.is_empty() {
        return fail(ctx, &format!("this Redis lacks module API functions: {}", missing.join(", ")));
    }
    if let Err(e) = config::register(ctx, args) {
        return fail(ctx, &e);
    }
    if !lock::remember_registered_type() {
        return fail(ctx, "the lock data type was not registered");
    }
    // Keys opened for writing are not implicitly "modified": a failed
    // acquire must not break WATCH or client-side caching. Effects signal
    // themselves (see `propagate`).
    let options = (raw::REDISMODULE_OPTIONS_HANDLE_IO_ERRORS
        | raw::REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED) as c_int;
    rm!(RedisModule_SetModuleOptions(ctx.ctx, options) else ());
    for c in command_table() {
        let status = rm!(RedisModule_CreateCommand(
            ctx.ctx,
            c.name.as_ptr(),
            c.handler,
            c.flags.as_ptr(),
            c.first_key,
            c.last_key,
            c.key_step,
        ) else api::ERR);
        if status != api::OK {
            return fail(ctx, &format!("could not create command {}", c.name.to_string_lossy()));
        }
    }
    if !waiters::init(Ctx::new(ctx.ctx)) || !quarantine::subscribe(Ctx::new(ctx.ctx)) {
        return fail(ctx, "could not subscribe to server events");
    }
    quarantine::start();
    fencing::COUNTER.seed_from_clock();
    Status::Ok
}

#[cfg(not(test))]
redis_module::redis_module! {
    name: "redislock",
    version: 1,
    allocator: (redis_module::alloc::RedisAlloc, redis_module::alloc::RedisAlloc),
    data_types: [LOCK_TYPE],
    init: init,
}
