//! What the connections of `redlock serve` share, and what a request
//! leaves its connection to do.

use std::sync::atomic::{AtomicU64, AtomicUsize};

use redlock::Redlock;

/// What the connections share: the quorum client, the endpoint, and what
/// `INFO` counts.
pub struct Shared {
    pub redlock: Redlock,
    pub requirepass: Option<String>,
    pub next_id: AtomicU64,
    pub connected: AtomicUsize,
    /// Acquisitions waiting (`WAIT`) now.
    pub waiting: AtomicUsize,
    pub granted: AtomicU64,
    pub refused: AtomicU64,
}

/// What the connection does after a request.
#[derive(Debug, PartialEq, Eq)]
pub enum Next {
    Serve,
    /// Close after this reply (QUIT, a broken request).
    Close,
    /// The client went away: nothing more to write.
    Gone,
}
