//! Every server event the module listens to, in one place: forks, role
//! changes, loading, shutdown, configuration changes, FLUSHDB/FLUSHALL and
//! SWAPDB, the server's cron, client disconnects, evictions (a keyspace event) and every
//! command before it runs (a command filter). Each callback only tells the
//! glue what happened; the glue decides what it means.

use std::ffi::{c_char, c_int, c_void};
use std::ptr;
use std::sync::Mutex;

use redis_module::raw;

use crate::api::{self, rm, Ctx, RedisModuleCtx, RedisModuleString};
use crate::server::clock::{self, StepDetector};
use crate::server::fencing::COUNTER;
use crate::server::quarantine::Load;
use crate::{
    keys::realign, keys::register, keys::rescue, keys::value, replication::audience, replication::writable, server::bindings,
    server::quarantine, server::reentry, session::disconnect, waiters,
};

type Callback = unsafe extern "C" fn(*mut RedisModuleCtx, raw::RedisModuleEvent, u64, *mut c_void);

/// Subscribes to every event; false if the server refused one.
pub fn subscribe(ctx: Ctx) -> bool {
    // One callback per event and module: where several parts of the glue
    // care about an event, its callback tells each.
    let events: [(u64, Callback); 9] = [
        (raw::REDISMODULE_EVENT_FORK_CHILD, on_fork),
        (raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED, on_role_changed),
        (raw::REDISMODULE_EVENT_LOADING, on_loading),
        (raw::REDISMODULE_EVENT_SHUTDOWN, on_shutdown),
        (raw::REDISMODULE_EVENT_CONFIG, on_config_change),
        (raw::REDISMODULE_EVENT_FLUSHDB, on_dataset_event),
        (raw::REDISMODULE_EVENT_SWAPDB, on_dataset_event),
        (raw::REDISMODULE_EVENT_CRON_LOOP, on_cron),
        (raw::REDISMODULE_EVENT_CLIENT_CHANGE, on_client_change),
    ];
    for (id, callback) in events {
        let event = raw::RedisModuleEvent { id, dataver: 1 };
        if rm!(RedisModule_SubscribeToServerEvent(ctx.raw(), event, Some(callback)) else 1) != 0 {
            return false;
        }
    }
    let evicted = rm!(RedisModule_SubscribeToKeyspaceEvents(ctx.raw(), raw::REDISMODULE_NOTIFY_EVICTED, Some(on_evicted)) else api::ERR);
    let noself = raw::REDISMODULE_CMDFILTER_NOSELF as c_int;
    let filtered = !rm!(RedisModule_RegisterCommandFilter(ctx.raw(), Some(on_command), noself) else ptr::null_mut()).is_null();
    evicted == api::OK && filtered
}

/// A child was forked (RDB, AOF rewrite, a replica's sync, a module's
/// fork): what is propagated from now on may be heard.
unsafe extern "C" fn on_fork(_ctx: *mut RedisModuleCtx, _event: raw::RedisModuleEvent, sub: u64, _data: *mut c_void) {
    if sub == raw::REDISMODULE_SUBEVENT_FORK_CHILD_BORN {
        audience::heard_from_now_on();
    }
}

/// This instance became a master (REPLICAOF NO ONE, a Cluster or Sentinel
/// failover), or a replica.
unsafe extern "C" fn on_role_changed(_ctx: *mut RedisModuleCtx, _event: raw::RedisModuleEvent, sub: u64, _data: *mut c_void) {
    audience::heard_from_now_on();
    if sub == raw::REDISMODULE_EVENT_REPLROLECHANGED_NOW_MASTER {
        writable::set_replica(false);
        COUNTER.seed_for_promotion();
        quarantine::promoted();
    } else if sub == raw::REDISMODULE_EVENT_REPLROLECHANGED_NOW_REPLICA {
        writable::set_replica(true);
        waiters::demoted();
        bindings::forget_all();
    }
}

/// Loading started, ended or failed.
unsafe extern "C" fn on_loading(ctx: *mut RedisModuleCtx, _event: raw::RedisModuleEvent, sub: u64, _data: *mut c_void) {
    match sub {
        raw::REDISMODULE_SUBEVENT_LOADING_RDB_START => quarantine::loading_started(Load::Rdb),
        raw::REDISMODULE_SUBEVENT_LOADING_AOF_START => quarantine::loading_started(Load::Aof),
        raw::REDISMODULE_SUBEVENT_LOADING_REPL_START => quarantine::loading_started(Load::Other),
        raw::REDISMODULE_SUBEVENT_LOADING_FAILED => quarantine::loading_failed(),
        raw::REDISMODULE_SUBEVENT_LOADING_ENDED => {
            let ctx = Ctx::new(ctx);
            quarantine::loading_ended(ctx);
            audience::loaded(ctx);
            value::learn_loaded_leases(ctx);
        }
        _ => {}
    }
}

/// A clean shutdown, after the final save and AOF fsync.
unsafe extern "C" fn on_shutdown(ctx: *mut RedisModuleCtx, _event: raw::RedisModuleEvent, _sub: u64, _data: *mut c_void) {
    quarantine::shutting_down(Ctx::new(ctx));
}

/// A configuration change, possibly of the AOF's policy.
unsafe extern "C" fn on_config_change(ctx: *mut RedisModuleCtx, _event: raw::RedisModuleEvent, _sub: u64, _data: *mut c_void) {
    quarantine::config_changed(Ctx::new(ctx));
}

/// FLUSHDB/FLUSHALL and SWAPDB change keys without per-key events: kept
/// locks follow their database, and every waited key is looked at soon.
unsafe extern "C" fn on_dataset_event(_ctx: *mut RedisModuleCtx, event: raw::RedisModuleEvent, sub: u64, data: *mut c_void) {
    if event.id == raw::REDISMODULE_EVENT_FLUSHDB && sub == raw::REDISMODULE_SUBEVENT_FLUSHDB_START {
        if let Some(info) = data.cast::<raw::RedisModuleFlushInfo>().as_ref() {
            rescue::flushed(info.dbnum);
            register::flushed(info.dbnum);
            crate::server::revoked::flushed(info.dbnum);
        }
    } else if event.id == raw::REDISMODULE_EVENT_SWAPDB {
        if let Some(info) = data.cast::<raw::RedisModuleSwapDbInfo>().as_ref() {
            rescue::swapped(info.dbnum_first, info.dbnum_second);
            register::swapped(info.dbnum_first, info.dbnum_second);
            crate::server::revoked::swapped(info.dbnum_first, info.dbnum_second);
        }
    }
    waiters::dataset_changed();
}

/// A client connected or disconnected: a disconnect ends the holds bound
/// to its connection (`SESSION`).
unsafe extern "C" fn on_client_change(_ctx: *mut RedisModuleCtx, _event: raw::RedisModuleEvent, sub: u64, data: *mut c_void) {
    if sub != raw::REDISMODULE_SUBEVENT_CLIENT_CHANGE_DISCONNECTED || bindings::bound() == 0 {
        return;
    }
    if let Some(client) = data.cast::<raw::RedisModuleClientInfo>().as_ref() {
        disconnect::closed(client.id);
    }
}

/// The wall clock's offset from the monotonic clock, as last seen.
static STEPS: Mutex<StepDetector> = Mutex::new(StepDetector::new());

/// The server's cron (an event-loop timer on the monotonic clock, `hz`
/// times a second) notices steps of the wall clock, which move every
/// module timer and every key's TTL by the step (see `clock`), and starts
/// the forgetting of session bindings whose hold ended (`disconnect`).
unsafe extern "C" fn on_cron(ctx: *mut RedisModuleCtx, _event: raw::RedisModuleEvent, _sub: u64, _data: *mut c_void) {
    let stepped = reentry::with(&STEPS, |steps| steps.stepped(api::unix_millis(), clock::mono_ms())).unwrap_or(false);
    if stepped {
        realign::clock_stepped(Ctx::new(ctx));
        waiters::clock_stepped();
        disconnect::clock_stepped();
    }
    // Bindings whose hold ended are forgotten (one load while none is).
    disconnect::cron();
}

/// The `evicted` keyspace event, sent right after the unlink callback.
unsafe extern "C" fn on_evicted(ctx: *mut RedisModuleCtx, _type: c_int, _event: *const c_char, key: *mut RedisModuleString) -> c_int {
    let db = Ctx::new(ctx).selected_db();
    // SAFETY: Redis hands the live key name for the callback's duration.
    let name = unsafe { api::string_bytes(key) };
    rescue::evicted(db, name);
    register::evicted(db, name);
    api::OK
}

/// The command filter: every command, before it runs. It matters only
/// while someone waits: a command may change a waited key's lease (see
/// `waiters::command_names`), one load otherwise.
unsafe extern "C" fn on_command(fctx: *mut raw::RedisModuleCommandFilterCtx) {
    let arg = |pos: c_int| {
        let s = rm!(RedisModule_CommandFilterArgGet(fctx, pos) else ptr::null_mut());
        // SAFETY: Redis hands the command's live argument for the call.
        (!s.is_null()).then(|| unsafe { api::string_bytes(s) })
    };
    let count = rm!(RedisModule_CommandFilterArgsCount(fctx) else 0);
    // CONFIG RESETSTAT empties the module's distributions with the
    // server's statistics (Redis tells a module nothing else of it).
    if count == 2
        && arg(0).is_some_and(|name| name.eq_ignore_ascii_case(b"config"))
        && arg(1).is_some_and(|sub| sub.eq_ignore_ascii_case(b"resetstat"))
    {
        crate::server::stats::reset_distributions();
        return;
    }
    if !waiters::anyone_waits() {
        return;
    }
    if count == 1 {
        if arg(0).is_some_and(|name| name.eq_ignore_ascii_case(b"exec")) {
            waiters::exec_starting();
        }
        return;
    }
    // LOCK.* commands serve and re-arm their queues themselves.
    if count < 2 || arg(0).is_some_and(|name| name.len() > 5 && name[..5].eq_ignore_ascii_case(b"lock.")) {
        return;
    }
    if let Some(key) = arg(1) {
        waiters::command_names(key);
    }
}
