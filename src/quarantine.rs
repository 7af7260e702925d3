//! Restart quarantine: a node that restarted without its persisted state
//! may have granted locks, before it lost its memory, that clients still
//! hold. Until the longest lease could have run out, it must not grant
//! again (the delayed restart the Redlock design asks for, built in).

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

use redis_module::raw;

use crate::api::{rm, Ctx, RedisModuleCtx};

pub const QUARANTINE_DEFAULT: i64 = 0;

/// `redislock.quarantine`, in milliseconds.
pub static QUARANTINE_MS: AtomicI64 = AtomicI64::new(QUARANTINE_DEFAULT);

/// Monotonic ms (since `EPOCH`) until which ACQUIRE is refused; 0 = off.
static UNTIL: AtomicI64 = AtomicI64::new(0);
/// A load of persisted state (RDB or AOF, not a replica's sync) is running.
static LOADING_PERSISTED: AtomicBool = AtomicBool::new(false);
static EPOCH: OnceLock<Instant> = OnceLock::new();

fn monotonic_ms() -> i64 {
    let epoch = EPOCH.get_or_init(Instant::now);
    i64::try_from(epoch.elapsed().as_millis()).unwrap_or(i64::MAX)
}

/// Starts the quarantine at module load if it is configured; a successful
/// load of persisted state that follows lifts it.
pub fn start() {
    let ms = QUARANTINE_MS.load(Ordering::Relaxed);
    if ms > 0 {
        UNTIL.store(monotonic_ms().saturating_add(ms).max(1), Ordering::Relaxed);
    }
}

/// Milliseconds left, or `None` when ACQUIRE may grant.
pub fn remaining_ms() -> Option<i64> {
    let until = UNTIL.load(Ordering::Relaxed);
    if until == 0 {
        return None;
    }
    let left = until - monotonic_ms();
    if left > 0 {
        Some(left)
    } else {
        UNTIL.store(0, Ordering::Relaxed);
        None
    }
}

/// Server event: loading started, ended or failed.
unsafe extern "C" fn on_loading(_ctx: *mut RedisModuleCtx, _event: raw::RedisModuleEvent, sub: u64, _data: *mut c_void) {
    match sub {
        raw::REDISMODULE_SUBEVENT_LOADING_RDB_START | raw::REDISMODULE_SUBEVENT_LOADING_AOF_START => {
            LOADING_PERSISTED.store(true, Ordering::Relaxed)
        }
        raw::REDISMODULE_SUBEVENT_LOADING_REPL_START | raw::REDISMODULE_SUBEVENT_LOADING_FAILED => {
            LOADING_PERSISTED.store(false, Ordering::Relaxed)
        }
        raw::REDISMODULE_SUBEVENT_LOADING_ENDED if LOADING_PERSISTED.swap(false, Ordering::Relaxed) => {
            UNTIL.store(0, Ordering::Relaxed)
        }
        _ => {}
    }
}

pub fn subscribe(ctx: Ctx) -> bool {
    let event = raw::RedisModuleEvent { id: raw::REDISMODULE_EVENT_LOADING, dataver: 1 };
    rm!(RedisModule_SubscribeToServerEvent(ctx.raw(), event, Some(on_loading)) else 1 as c_int) == 0
}
