//! Client settings, with the defaults documented in README.md.

use std::time::Duration;

/// How the client talks to the servers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `LOCK.*` commands of the redislock module, with fencing tokens.
    Module,
    /// `SET NX PX` and Lua scripts, for plain Redis servers (no tokens).
    Script,
}

#[derive(Clone, Debug)]
pub struct Settings {
    /// Per-request timeout, much smaller than any ttl. Default 50 ms.
    pub request_timeout: Duration,
    /// Timeout to (re)connect to a server. Default 200 ms.
    pub connect_timeout: Duration,
    /// Attempts after the first one. Default 3.
    pub retry_count: u32,
    /// Random delay between attempts, uniform in this range. Default 100–200 ms.
    pub retry_delay: (Duration, Duration),
    /// Clock drift factor: drift = ttl × factor + 2 ms. Default 0.01.
    pub drift_factor: f64,
    /// Instances that must agree; `None` for a majority (N/2 + 1).
    pub quorum: Option<usize>,
    pub mode: Mode,
    /// A guard extends its lock after this fraction of the ttl. Default 1/3.
    pub extend_fraction: f64,
    /// Holds end with this client's connection to each server
    /// (`LOCK.ACQUIRE ... SESSION`): a process that dies, or loses its
    /// connection, frees its locks `lock_delay` after the server sees the
    /// connection close, not when the lease runs out. A hold whose
    /// connection closed counts as lost on that server, never silently
    /// taken again. Module mode only. Default off.
    pub release_on_disconnect: bool,
    /// With `release_on_disconnect`: how long a server keeps the lock held
    /// after the connection closed (`DELAY`), for a holder cut off by the
    /// network that may still be running. Default 0.
    pub lock_delay: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            request_timeout: Duration::from_millis(50),
            connect_timeout: Duration::from_millis(200),
            retry_count: 3,
            retry_delay: (Duration::from_millis(100), Duration::from_millis(200)),
            drift_factor: 0.01,
            quorum: None,
            mode: Mode::Module,
            extend_fraction: 1.0 / 3.0,
            release_on_disconnect: false,
            lock_delay: Duration::ZERO,
        }
    }
}
