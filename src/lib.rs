//! redislock: native distributed locks for Redis.
//!
//! `LOCK.ACQUIRE / LOCK.RELEASE / LOCK.EXTEND / LOCK.INFO` on a lock data
//! type. A lease runs on the module's monotonic clock; the key's Redis TTL
//! only mirrors its wall-clock deadline, for PTTL, persistence and
//! replication. Every grant carries a fencing token from a per-instance
//! monotonic counter.
//!
//! The layers, each importing only from those below it:
//! - `edge`: what Redis calls into: the command table and the module's
//!   load (`edge`), the data type and its callbacks (`edge::datatype`),
//!   every server event (`edge::events`).
//! - the glue, in the order it depends on itself:
//!   - commands: `commands` (LOCK.ACQUIRE, RELEASE, EXTEND, INFO, WAITERS,
//!     TOP: parse, the change, reply), `info` (INFO redislock), `census`
//!     (the longest current hold, from a walk of the keyspace);
//!   - ending the holds of a closed connection, a slice at a time, and
//!     forgetting the bindings of holds that ended: `disconnect`;
//!   - waiting: `waiters` (fair server-side waiting and the handoff),
//!     `acl` (a waiter's rights, checked again when served);
//!   - changing a lock: `change`, the only code that changes a hold, one
//!     executor per change (acquire and the handoff, release, extend,
//!     apply, disconnect): the core's decision, the value stored, the
//!     session bound or unbound, the propagation, the counters. Besides
//!     the commands, `waiters`' handoff, `disconnect`'s timer, `rescue`'s
//!     put-back and LOCK.APPLY (`propagate::apply`) call it;
//!   - reading a lock: `grants` (what a key holds, as the core sees it);
//!   - keeping leases whatever Redis does to keys: `rescue` (locks Redis
//!     evicted or a clock step expired, put back), `realign` (TTLs after a
//!     clock step);
//!   - leaving a command: `propagate` (replication and the AOF through one
//!     LOCK.APPLY builder, WATCH, keyspace events; LOCK.APPLY itself),
//!     `audience` (whether anything receives what is propagated);
//!   - the stored values: `value` (an exclusive lock, and reading and
//!     storing values at a key), `group` (a lock held shared);
//!   - the server's state: `session` (holds bound to a connection),
//!     `quarantine` (the restart quarantine), `fencing`
//!     (the token counter), `writable` (whether the module may write
//!     outside a client's command), `config`, `args` (command syntax),
//!     `clock` (the monotonic clock), `stats` and `histogram` (what INFO
//!     shows), `reentry`.
//! - `api`: the thin, allocation-free boundary to the Redis Module API
//!   that the glue calls, and the only other place with `extern "C"`
//!   functions: the trampolines of timers (`api::after`), keyspace scans
//!   (`api::scan_keys`), blocked clients (`api::Blocking`) and the INFO
//!   section, which call the glue's plain Rust functions. The glue calls
//!   no `RedisModule_*` function itself.
//! - `core`: the rules, free of Redis: grant, release, extension and
//!   admission of every kind (`core::grant`), the wait line
//!   (`core::line`), the lease (`core::lease`), tokens (`core::token`);
//!   property-tested, and what the glue runs.

// Under `cargo test` the module entry point is not compiled (the unit tests
// use the system allocator, not Redis's), so its helpers look unused.
#![cfg_attr(test, allow(dead_code))]

mod acl;
mod api;
mod args;
mod audience;
mod census;
mod change;
mod clock;
mod commands;
mod config;
mod core;
mod disconnect;
mod edge;
mod fencing;
mod grants;
mod group;
mod histogram;
mod info;
mod propagate;
mod quarantine;
mod realign;
mod reentry;
mod rescue;
mod session;
mod stats;
mod value;
mod waiters;
mod writable;

/// A decimal component of the crate version, parsed at compile time.
const fn version_part(text: &str) -> i32 {
    let bytes = text.as_bytes();
    let mut n = 0;
    let mut i = 0;
    while i < bytes.len() {
        n = n * 10 + (bytes[i] - b'0') as i32;
        i += 1;
    }
    n
}

/// `MODULE LIST`'s `ver`: the crate version as major·10000 + minor·100 +
/// patch (0.1.0 is 100, 1.2.3 is 10203), the convention of Redis's own
/// modules.
const MODULE_VERSION: i32 = version_part(env!("CARGO_PKG_VERSION_MAJOR")) * 10_000
    + version_part(env!("CARGO_PKG_VERSION_MINOR")) * 100
    + version_part(env!("CARGO_PKG_VERSION_PATCH"));

#[cfg(not(test))]
use edge::{datatype::LOCK_TYPE, init};

#[cfg(not(test))]
redis_module::redis_module! {
    name: "redislock",
    version: MODULE_VERSION,
    allocator: (redis_module::alloc::RedisAlloc, redis_module::alloc::RedisAlloc),
    data_types: [LOCK_TYPE],
    init: init,
}
