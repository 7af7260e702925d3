//! The `INFO redislock` section: what an operator or an exporter needs to
//! see of the lock service without scripts. Redis prefixes each field with
//! the module's name: `redislock_quarantine_ms_left`.

use std::ffi::{c_int, CStr};

use redis_module::raw;

use crate::api::rm;
use crate::config;
use crate::fencing::COUNTER;
use crate::quarantine;

fn field(ctx: *mut raw::RedisModuleInfoCtx, name: &CStr, value: i64) {
    rm!(RedisModule_InfoAddFieldLongLong(ctx, name.as_ptr(), value) else 0);
}

unsafe extern "C" fn section(ctx: *mut raw::RedisModuleInfoCtx, _for_crash_report: c_int) {
    // The default section: named after the module, `INFO redislock`.
    if rm!(RedisModule_InfoAddSection(ctx, std::ptr::null()) else crate::api::ERR) != crate::api::OK {
        return;
    }
    field(ctx, c"quarantine_ms_left", quarantine::remaining_ms().unwrap_or(0));
    field(ctx, c"highest_token", COUNTER.current());
    field(ctx, c"max_ttl_ms", config::max_ttl());
    field(ctx, c"max_token_lead_ms", config::max_token_lead());
    field(ctx, c"quarantine_ms", quarantine::QUARANTINE_MS.load(std::sync::atomic::Ordering::Relaxed));
}

pub fn register(ctx: *mut raw::RedisModuleCtx) -> bool {
    rm!(RedisModule_RegisterInfoFunc(ctx, Some(section)) else crate::api::ERR) == crate::api::OK
}
