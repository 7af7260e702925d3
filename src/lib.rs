//! redislock: native distributed locks for Redis.
//!
//! `LOCK.ACQUIRE / LOCK.RELEASE / LOCK.EXTEND / LOCK.INFO` on a lock data
//! type. A lease runs on the module's monotonic clock; the key's Redis TTL
//! only mirrors its wall-clock deadline, for PTTL, persistence and
//! replication. Every grant carries a fencing token from a per-instance
//! monotonic counter.
//!
//! The order is checked by `scripts/lint-layers.py` (no two files import
//! each other, round about or directly; the FFI stays in `edge` and `api`)
//! and described the same way in docs/architecture.md.
//!
//! The layers, highest first, each importing only from those below it:
//! - `edge/`: what Redis calls into: the module's load and the command
//!   table, the data type and its callbacks, every server event.
//! - `commands/` and `session/`, side by side (neither imports the other):
//!   a client's command parsed, run and answered; and a closed connection's
//!   session-bound holds ended from a timer, a slice at a time.
//! - `waiters/`: fair server-side waiting and the handoff, and every change
//!   a command asks for run with the serving of its key's line
//!   (`waiters::changes`, `waiters::multi`): a lease that ran out goes to
//!   whoever waits before a newcomer, a release hands the lock to the head
//!   of the line in the same command.
//! - `change/`: the only code that changes a hold, one executor per change;
//!   it answers with what changed (the token, the lease end, and what that
//!   asks of the key's line: `change::Line`) and serves no line: the layers
//!   above serve it. It also puts back locks `keys::rescue` keeps.
//! - `keys/`: what a key holds and keeping it whatever Redis does to keys
//!   (values, groups, a key read as the core sees it, TTLs realigned after a
//!   clock step, locks Redis removed kept until their lease ends).
//! - `replication/`: leaving a command: LOCK.APPLY and the other effects
//!   propagated, whether anything receives them, whether the module may write.
//! - `server/`: the server's state: the holds bound to a connection
//!   (`server::bindings`), the monotonic clock, the configuration, the token
//!   counter, the restart quarantine, what INFO shows.
//! - `args/`: command syntax, parsed into the core's requests.
//! - `api/`: the thin, allocation-free boundary to the Redis Module API, and
//!   the only other place with `extern "C"` functions (the trampolines of
//!   timers, keyspace scans, blocked clients and the INFO section).
//! - `core/`: the rules, free of Redis: grant, release, extension and
//!   admission of every kind, the wait line, the lease, tokens;
//!   property-tested, and what the glue runs.
//!
//! Why this order: a line is served by whoever knows the change is done:
//! the command, the disconnect timer or the handoff, one layer above the
//! executors, so the executors never call back up into the waiters. The
//! bindings are state the executors consult and keep inside a change
//! (`SESSION` holds), so they sit below them with the server's other state,
//! while ending a closed connection's holds is a flow above them. Keeping a
//! removed lock is the keys' business; putting it back is a change.

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
use edge::{datatype::LOCK_TYPE, init, register::REGISTER_TYPE};

#[cfg(not(test))]
redis_module::redis_module! {
    name: "redislock",
    version: MODULE_VERSION,
    allocator: (redis_module::alloc::RedisAlloc, redis_module::alloc::RedisAlloc),
    data_types: [LOCK_TYPE, REGISTER_TYPE],
    init: init,
}
