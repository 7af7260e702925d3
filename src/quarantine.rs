//! Restart quarantine: a node that restarted without every grant it made
//! may have granted locks, before it lost them, that clients still hold.
//! Until the longest lease could have run out, it must not grant again
//! (the delayed restart the Redlock design asks for, built in).
//!
//! The quarantine starts when the module loads and is lifted early only
//! by data that cannot have lost a grant or an extension, loaded while the
//! server starts:
//! - an AOF, with `appendfsync always` (every write is on disk before its
//!   reply leaves);
//! - data written by a clean shutdown that this module recorded: at the
//!   SHUTDOWN event (after Redis's final save and AOF fsync) it writes a
//!   marker file beside the data, naming the fencing counter when the RDB
//!   holds every write, and whether the AOF was fsynced. The marker is
//!   read and deleted at the next load, so it speaks for one start only;
//!   an RDB is trusted only if its saved counter is the marker's.
//!
//! A stale RDB (saved, then more grants, then a crash), an AOF with
//! `everysec` after a crash, and any load once the server runs (DEBUG
//! RELOAD, a replica's sync) lift nothing.

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU8, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use redis_module::raw;

use crate::api::{rm, Ctx, RedisModuleCtx, ServerInfo};
use crate::fencing::COUNTER;

pub const QUARANTINE_DEFAULT: i64 = 0;

/// `redislock.quarantine`, in milliseconds.
pub static QUARANTINE_MS: AtomicI64 = AtomicI64::new(QUARANTINE_DEFAULT);

/// Monotonic ms (since `EPOCH`) until which ACQUIRE is refused; 0 = off.
static UNTIL: AtomicI64 = AtomicI64::new(0);
static EPOCH: OnceLock<Instant> = OnceLock::new();

/// The server is still starting: its event loop has not run yet.
static STARTING: AtomicBool = AtomicBool::new(true);

/// Any load (RDB, AOF, a replica's sync, DEBUG RELOAD) is running.
static LOADING: AtomicBool = AtomicBool::new(false);

/// What the load running at startup reads.
static STARTUP_LOAD: AtomicU8 = AtomicU8::new(NO_LOAD);
const NO_LOAD: u8 = 0;
const RDB_LOAD: u8 = 1;
const AOF_LOAD: u8 = 2;

/// The fencing counter saved in the RDB being loaded (aux data).
static LOADED_COUNTER: AtomicI64 = AtomicI64::new(-1);

/// The marker of the previous clean shutdown, read at load.
static MARKER: Mutex<Option<Marker>> = Mutex::new(None);

/// The marker file, in Redis's working directory (its `dir`, beside
/// dump.rdb and the AOF directory).
const MARKER_FILE: &str = "redislock-clean-shutdown";

fn monotonic_ms() -> i64 {
    let epoch = EPOCH.get_or_init(Instant::now);
    i64::try_from(epoch.elapsed().as_millis()).unwrap_or(i64::MAX)
}

/// What a clean shutdown recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Marker {
    /// The fencing counter, when the last RDB held every write.
    rdb_counter: Option<i64>,
    /// The AOF was on and written without error, and fsynced at exit.
    aof: bool,
}

impl Marker {
    fn render(&self) -> String {
        let rdb = self.rdb_counter.map_or_else(|| "none".to_string(), |c| c.to_string());
        format!("redislock clean shutdown v1 rdb-counter={rdb} aof={}\n", u8::from(self.aof))
    }

    fn parse(text: &str) -> Option<Marker> {
        let rest = text.strip_suffix('\n')?.strip_prefix("redislock clean shutdown v1 ")?;
        let (rdb, aof) = rest.split_once(' ')?;
        let rdb_counter = match rdb.strip_prefix("rdb-counter=")? {
            "none" => None,
            n => Some(crate::args::parse_i64(n.as_bytes())?),
        };
        let aof = match aof.strip_prefix("aof=")? {
            "0" => false,
            "1" => true,
            _ => return None,
        };
        Some(Marker { rdb_counter, aof })
    }
}

/// At module load: consumes the previous shutdown's marker, starts the
/// quarantine if configured, and notes when startup ends.
pub fn start(ctx: Ctx) {
    let marker = std::fs::read_to_string(MARKER_FILE).ok().and_then(|text| Marker::parse(&text));
    // A marker speaks for this start only; if it cannot be removed it
    // could vouch for data after a later crash, so it is not used.
    let removed = matches!(std::fs::remove_file(MARKER_FILE), Ok(()))
        || !std::path::Path::new(MARKER_FILE).exists();
    if let Ok(mut slot) = MARKER.lock() {
        *slot = marker.filter(|_| removed);
    }
    let ms = QUARANTINE_MS.load(Ordering::Relaxed);
    if ms > 0 {
        UNTIL.store(monotonic_ms().saturating_add(ms).max(1), Ordering::Relaxed);
    }
    // Timers run only in the event loop, after the startup load.
    rm!(RedisModule_CreateTimer(ctx.raw(), 0, Some(on_started), std::ptr::null_mut()) else 0);
}

unsafe extern "C" fn on_started(_ctx: *mut RedisModuleCtx, _data: *mut c_void) {
    STARTING.store(false, Ordering::Relaxed);
}

/// Milliseconds left, or `None` when ACQUIRE may grant. When a quarantine
/// runs out, the counter is raised to the clock: tokens issued before the
/// restart may lead the clock by up to `max-token-lead`, which a
/// quarantine at least that long has now passed.
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
        COUNTER.seed_from_clock();
        None
    }
}

/// A load of any kind is running: data comes from this server's own files
/// or its master, not from a client.
pub fn loading() -> bool {
    LOADING.load(Ordering::Relaxed)
}

/// The RDB being loaded saved this fencing counter.
pub fn loaded_counter(counter: i64) {
    LOADED_COUNTER.store(counter, Ordering::Relaxed);
}

/// Server event: loading started, ended or failed.
unsafe extern "C" fn on_loading(ctx: *mut RedisModuleCtx, _event: raw::RedisModuleEvent, sub: u64, _data: *mut c_void) {
    let starting = STARTING.load(Ordering::Relaxed);
    match sub {
        raw::REDISMODULE_SUBEVENT_LOADING_RDB_START
        | raw::REDISMODULE_SUBEVENT_LOADING_AOF_START
        | raw::REDISMODULE_SUBEVENT_LOADING_REPL_START => {
            LOADING.store(true, Ordering::Relaxed);
            LOADED_COUNTER.store(-1, Ordering::Relaxed);
            let load = match sub {
                raw::REDISMODULE_SUBEVENT_LOADING_RDB_START => RDB_LOAD,
                raw::REDISMODULE_SUBEVENT_LOADING_AOF_START => AOF_LOAD,
                _ => NO_LOAD,
            };
            STARTUP_LOAD.store(if starting { load } else { NO_LOAD }, Ordering::Relaxed);
        }
        raw::REDISMODULE_SUBEVENT_LOADING_FAILED => {
            LOADING.store(false, Ordering::Relaxed);
            STARTUP_LOAD.store(NO_LOAD, Ordering::Relaxed);
        }
        raw::REDISMODULE_SUBEVENT_LOADING_ENDED => {
            LOADING.store(false, Ordering::Relaxed);
            let load = STARTUP_LOAD.swap(NO_LOAD, Ordering::Relaxed);
            if starting && load != NO_LOAD && loaded_everything(Ctx::new(ctx), load) {
                UNTIL.store(0, Ordering::Relaxed);
            }
        }
        _ => {}
    }
}

/// Whether the data just loaded at startup holds every grant and
/// extension this server acknowledged before it stopped.
fn loaded_everything(ctx: Ctx, load: u8) -> bool {
    let marker = MARKER.lock().ok().and_then(|m| *m);
    match load {
        AOF_LOAD => marker.is_some_and(|m| m.aof) || ctx.config_get(c"appendfsync", |v| v == b"always").unwrap_or(false),
        RDB_LOAD => marker.and_then(|m| m.rdb_counter).is_some_and(|c| c == LOADED_COUNTER.load(Ordering::Relaxed)),
        _ => false,
    }
}

/// Server event: a clean shutdown, after the final save and AOF fsync.
unsafe extern "C" fn on_shutdown(ctx: *mut RedisModuleCtx, _event: raw::RedisModuleEvent, _sub: u64, _data: *mut c_void) {
    let ctx = Ctx::new(ctx);
    let persistence = ServerInfo::read(ctx, c"persistence");
    let rdb_complete = persistence.integer(c"rdb_changes_since_last_save") == Some(0);
    let aof = persistence.integer(c"aof_enabled") == Some(1) && persistence.text_is(c"aof_last_write_status", c"ok");
    drop(persistence);
    if !rdb_complete && !aof {
        return;
    }
    let marker = Marker { rdb_counter: rdb_complete.then(|| COUNTER.current()), aof };
    if let Err(e) = write_marker(&marker) {
        ctx.log_warning(&format!("could not record the clean shutdown in {MARKER_FILE}: {e}; the next start will quarantine"));
    }
}

fn write_marker(marker: &Marker) -> std::io::Result<()> {
    use std::io::Write;
    let mut file = std::fs::File::create(MARKER_FILE)?;
    file.write_all(marker.render().as_bytes())?;
    file.sync_all()
}

pub fn subscribe(ctx: Ctx) -> bool {
    let loading = raw::RedisModuleEvent { id: raw::REDISMODULE_EVENT_LOADING, dataver: 1 };
    let shutdown = raw::RedisModuleEvent { id: raw::REDISMODULE_EVENT_SHUTDOWN, dataver: 1 };
    rm!(RedisModule_SubscribeToServerEvent(ctx.raw(), loading, Some(on_loading)) else 1 as c_int) == 0
        && rm!(RedisModule_SubscribeToServerEvent(ctx.raw(), shutdown, Some(on_shutdown)) else 1 as c_int) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marker_round_trips_and_rejects_anything_else() {
        for m in [
            Marker { rdb_counter: Some(1_795_000_000_000_123), aof: false },
            Marker { rdb_counter: None, aof: true },
            Marker { rdb_counter: Some(0), aof: true },
        ] {
            assert_eq!(Marker::parse(&m.render()), Some(m));
        }
        for bad in [
            "",
            "redislock clean shutdown v1 rdb-counter=12 aof=1",
            "redislock clean shutdown v2 rdb-counter=12 aof=1\n",
            "redislock clean shutdown v1 rdb-counter=+12 aof=1\n",
            "redislock clean shutdown v1 rdb-counter=12 aof=2\n",
            "redislock clean shutdown v1 rdb-counter=12\n",
        ] {
            assert_eq!(Marker::parse(bad), None, "{bad:?}");
        }
    }
}
