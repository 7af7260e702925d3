//! What `INFO redislock` counts. Counters change only on Redis's main
//! thread, so a relaxed load and store (no locked instruction on the hot
//! path) counts exactly; the live-lock gauge is also lowered by lazy-free
//! threads freeing values, so it uses atomic add and sub.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};

use crate::core::grant::{Kind, Mode, Request};
use crate::server::histogram::Histogram;

#[derive(Default)]
pub struct Counter(AtomicU64);

impl Counter {
    pub const fn new() -> Counter {
        Counter(AtomicU64::new(0))
    }

    #[inline]
    pub fn bump(&self) {
        self.0.store(self.0.load(Relaxed).wrapping_add(1), Relaxed);
    }

    pub fn get(&self) -> i64 {
        i64::try_from(self.0.load(Relaxed)).unwrap_or(i64::MAX)
    }
}

/// ACQUIRE granted a free lock (or converted the owner's plain string).
pub static ACQUIRE_NEW: Counter = Counter::new();
/// ACQUIRE by the current owner: the lease restarted, same token.
pub static ACQUIRE_REGRANT: Counter = Counter::new();
/// ACQUIRE answered nil (held by another), without waiting.
pub static ACQUIRE_REFUSED: Counter = Counter::new();
/// ACQUIRE refused by the restart quarantine.
pub static QUARANTINE_REFUSED: Counter = Counter::new();
pub static RELEASE_DONE: Counter = Counter::new();
pub static RELEASE_REFUSED: Counter = Counter::new();
pub static EXTEND_DONE: Counter = Counter::new();
pub static EXTEND_REFUSED: Counter = Counter::new();
/// LOCK.REVOKE calls that issued a token (whether or not a hold ended).
pub static REVOKE_CALLS: Counter = Counter::new();
/// Holds LOCK.REVOKE ended.
pub static HOLDS_REVOKED: Counter = Counter::new();
/// LOCK.RESIZE calls that resized a held semaphore (by a client, not
/// replayed from the master or the AOF).
pub static RESIZE_CALLS: Counter = Counter::new();
pub static WAIT_STARTED: Counter = Counter::new();
/// Waits ended by a grant: every one is a handoff.
pub static WAIT_GRANTED: Counter = Counter::new();
pub static WAIT_TIMED_OUT: Counter = Counter::new();
/// Waits ended otherwise: disconnect, unblocked by the server, the key's
/// slot moved away, an error.
pub static WAIT_CANCELLED: Counter = Counter::new();
pub static HANDOFF_RELEASE: Counter = Counter::new();
pub static HANDOFF_EXPIRY: Counter = Counter::new();
pub static HANDOFF_DELETE: Counter = Counter::new();

/// Held locks Redis evicted under maxmemory, kept until their lease ends.
pub static LOCKS_EVICTED: Counter = Counter::new();
/// Held locks Redis expired early because the wall clock stepped forward.
pub static KEPT_AFTER_CLOCK_STEP: Counter = Counter::new();
/// Kept locks put back into the keyspace.
pub static LOCKS_RESTORED: Counter = Counter::new();

/// Session-bound holds released because their connection closed.
pub static SESSION_RELEASES: Counter = Counter::new();
/// Session-bound holds whose lease was cut to their lock-delay because
/// their connection closed.
pub static SESSION_DELAYS: Counter = Counter::new();

/// Times the ending of closed connections' holds stopped after a slice
/// (`disconnect::SLICE_HOLDS` holds, or a few ms) to let clients in
/// before going on.
pub static SESSION_END_YIELDS: Counter = Counter::new();

/// Lock values in memory: held locks, plus leases that ran out and that
/// Redis has not reclaimed yet.
pub static LOCKS: AtomicI64 = AtomicI64::new(0);

/// The kinds of hold INFO tells apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HoldKind {
    Exclusive,
    /// A shared hold of a read-write lock.
    Shared,
    /// One of a semaphore's permits.
    Permit,
}

impl HoldKind {
    pub const ALL: [HoldKind; 3] = [HoldKind::Exclusive, HoldKind::Shared, HoldKind::Permit];

    pub fn name(self) -> &'static str {
        match self {
            HoldKind::Exclusive => "exclusive",
            HoldKind::Shared => "shared",
            HoldKind::Permit => "permit",
        }
    }

    pub fn of_request(req: &Request) -> HoldKind {
        match (req.mode, req.limit) {
            (_, Some(_)) => HoldKind::Permit,
            (Mode::Shared, None) => HoldKind::Shared,
            (Mode::Exclusive, None) => HoldKind::Exclusive,
        }
    }

    /// A holder of a key held shared, of this kind.
    pub fn of_group(kind: Kind) -> HoldKind {
        match kind {
            Kind::ReadWrite => HoldKind::Shared,
            Kind::Semaphore { .. } => HoldKind::Permit,
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// How long clients waited in line before their grant (ms), per kind.
static WAITS: [Histogram; 3] = [const { Histogram::new() }; 3];
/// How long holders held a lock they released (LOCK.RELEASE, or their
/// connection closing with SESSION), per kind (ms).
static HOLDS: [Histogram; 3] = [const { Histogram::new() }; 3];

pub fn waits(kind: HoldKind) -> &'static Histogram {
    &WAITS[kind.index()]
}

pub fn holds(kind: HoldKind) -> &'static Histogram {
    &HOLDS[kind.index()]
}

/// `CONFIG RESETSTAT`: the distributions start again.
pub fn reset_distributions() {
    for h in WAITS.iter().chain(HOLDS.iter()) {
        h.reset();
    }
}

/// What freed a lock that was handed to a waiter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    Release,
    /// The lease ran out (or was shortened with PEXPIRE).
    Expiry,
    /// DEL, UNLINK, an overwrite, FLUSHDB/FLUSHALL, SWAPDB.
    Delete,
}

impl Cause {
    pub fn counter(self) -> &'static Counter {
        match self {
            Cause::Release => &HANDOFF_RELEASE,
            Cause::Expiry => &HANDOFF_EXPIRY,
            Cause::Delete => &HANDOFF_DELETE,
        }
    }
}
