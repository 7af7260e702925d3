//! redislock: native distributed locks for Redis.
//!
//! `LOCK.ACQUIRE / LOCK.RELEASE / LOCK.EXTEND / LOCK.INFO` on a lock data
//! type. A lease runs on the module's monotonic clock; the key's Redis TTL
//! only mirrors its wall-clock deadline, for PTTL, persistence and
//! replication. Every grant carries a fencing token from a per-instance
//! monotonic counter.
//!
//! The layers, each importing only from those below it
//! (`scripts/lint-layers.py` checks that no two files import each other,
//! round about or directly, and that the FFI stays in `edge` and `api`):
//! - `edge`: what Redis calls into: the command table and the module's
//!   load (`edge`), the data type and its callbacks (`edge::datatype`),
//!   every server event (`edge::events`).
//! - the glue, in folders by flow, highest first:
//!   - `commands/`: a client's command: parse, the change, reply
//!     (LOCK.ACQUIRE, RELEASE, EXTEND, INFO, WAITERS, TOP and LOCK.APPLY
//!     from the master), `info` (INFO redislock), `census` (the longest
//!     current hold, from a walk of the keyspace);
//!   - `session/`: holds bound to the connection that was granted them
//!     (`session`), and ending a closed connection's holds a slice at a
//!     time (`session::disconnect`);
//!   - `change/`: the only code that changes a hold, one executor per
//!     change (`acquire`, `release`, `extend`, `apply`, `disconnect`): the
//!     core's decision, the value stored, the session bound or unbound
//!     (`change::binding`), the propagation, the counters. The grant itself
//!     and the handoff to a waiter (`change::grant`) and the replayed or
//!     put-back lock (`change::apply`) sit below the line; the executors
//!     that free a lock serve its line, above it;
//!   - `waiters/`: fair server-side waiting and the handoff (registry,
//!     serving, timers, events, views), `waiters::acl` (a waiter's rights,
//!     checked again when served);
//!   - `keys/`: what a key holds and keeping it whatever Redis does to
//!     keys: `value` (an exclusive lock, reading and storing values),
//!     `group` (a lock held shared), `grants` (a key read as the core sees
//!     it), `rescue` (locks Redis evicted or a clock step expired, put
//!     back through `change::apply`), `realign` (TTLs after a clock step);
//!   - `replication/`: leaving a command: `propagate` (replication and the
//!     AOF through one LOCK.APPLY builder, WATCH, keyspace events),
//!     `audience` (whether anything receives it), `writable` (whether the
//!     module may write outside a client's command);
//!   - `server/`: the server's state: `quarantine` (the restart
//!     quarantine), `fencing` (the token counter), `config`, `clock` (the
//!     monotonic clock), `stats` and `histogram` (what INFO shows),
//!     `reentry`;
//!   - `args/`: command syntax, parsed into the core's requests.
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

mod api;
mod args;
mod change;
mod commands;
mod core;
mod edge;
mod keys;
mod replication;
mod server;
mod session;
mod waiters;

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
