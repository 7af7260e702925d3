//! Test support shared by the workspace's Rust test programs and benches:
//! the one launcher of real `redis-server` (or Valkey) processes
//! ([`server`]) and the one checker of lock histories ([`history`]).
//!
//! The module tests (`tests/common`), the client tests
//! (`client/tests/common`) and the benches (`client/benches/support`,
//! `benches/contended.rs`) wrap these in their own thin `Server` types,
//! which add their connections and defaults.

pub mod history;
pub mod server;

use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

pub use server::{Ports, Process, Spec, StartError, Tls};

/// Path of the module under test: `$REDISLOCK_MODULE`, else the workspace's
/// release build, made absolute (the server runs in its temp dir). `Err`
/// names the fix when the file does not exist.
pub fn try_module_path() -> Result<PathBuf, String> {
    let p = match std::env::var_os("REDISLOCK_MODULE") {
        Some(v) if !v.is_empty() => PathBuf::from(v),
        _ => PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../target/release/libredislock.so")),
    };
    if !p.is_file() {
        return Err(format!(
            "redislock module not found at {}: build it with `cargo build --release -p redislock` \
             in the workspace, or point REDISLOCK_MODULE at the .so",
            p.display()
        ));
    }
    p.canonicalize().map_err(|e| format!("module {}: {e}", p.display()))
}

/// As [`try_module_path`], panicking with its message (tests).
pub fn module_path() -> PathBuf {
    try_module_path().unwrap_or_else(|e| panic!("{e}"))
}

/// The server binary the module suite runs against: `$REDISLOCK_SERVER`
/// (e.g. Valkey's, from `make test`), else `redis-server` from PATH.
pub fn server_binary() -> PathBuf {
    match std::env::var_os("REDISLOCK_SERVER") {
        Some(v) if !v.is_empty() => PathBuf::from(v),
        _ => PathBuf::from("redis-server"),
    }
}

/// Valkey 8.1's server, for tests that must also run there (libfaketime
/// works with it, not with Debian's jemalloc redis-server):
/// `$REDISLOCK_VALKEY` (set by `make test`), else
/// `<workspace>/.servers/valkey-8.1/redis-server`; `None` when neither exists.
pub fn valkey_binary() -> Option<PathBuf> {
    let p = match std::env::var_os("REDISLOCK_VALKEY") {
        Some(v) if !v.is_empty() => PathBuf::from(v),
        _ => PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.servers/valkey-8.1/redis-server")),
    };
    p.is_file().then_some(p)
}

/// libfaketime's preload library (Debian's `faketime` package, which
/// `make test` installs), if present.
pub fn libfaketime() -> Option<PathBuf> {
    ["/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1", "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
}

/// Microseconds since the Unix epoch, from the system clock.
pub fn now_unix_us() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_micros() as i64).unwrap_or(0)
}

/// Raises this process's soft limit of open files to its hard limit (at
/// most 2^20), as `redlock serve` and redis-server do for themselves; a
/// child started afterwards inherits it. The limit now; 1024 when it
/// cannot be read.
pub fn raise_open_files() -> u64 {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit and setrlimit with a valid pointer to a local.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return 1024;
        }
        if limit.rlim_cur < limit.rlim_max {
            let wanted = libc::rlimit { rlim_cur: limit.rlim_max.min(1 << 20), rlim_max: limit.rlim_max };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &wanted) == 0 {
                limit = wanted;
            }
        }
    }
    limit.rlim_cur
}
