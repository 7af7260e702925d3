//! What the connections of `redlock serve` share, and what a request
//! leaves its connection to do.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use redlock::{Redlock, Resources};
use tokio_util::sync::CancellationToken;

/// What the connections share: the quorum client, the endpoint, and what
/// `INFO` counts.
pub struct Shared {
    pub redlock: Redlock,
    pub users: super::users::Users,
    pub next_id: AtomicU64,
    pub connected: AtomicUsize,
    /// Acquisitions waiting (`WAIT`) now.
    pub waiting: AtomicUsize,
    pub granted: AtomicU64,
    pub refused: AtomicU64,
    /// Holds bound to a connection (`SESSION`).
    pub bindings: Bindings,
    /// The exclusive holds of one key this endpoint granted (`own`).
    pub own: super::own::Own,
    /// Connections subscribed to a channel now (`observe`).
    pub subscribers: AtomicUsize,
    /// Observer tasks running now, one per subscribed channel.
    pub observers: AtomicUsize,
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

/// What one hold takes on the servers: a lock's key, a semaphore's
/// permits (its name and limit: the quorum client's permit slots and
/// limit record), or a set of keys taken whole (`LOCK.MACQUIRE`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Taken {
    Key(String),
    Permits(String, u32),
    Set(Resources),
}

/// One hold: what it takes, and the owner it is held under on the
/// servers (a round's, `Redlock::lock_as`).
pub type Held = (Taken, String);

/// What the endpoint keeps of a bound hold.
pub struct Binding {
    /// The connection it is bound to.
    pub conn: u64,
    /// The lease each extension asks for (`LOCK.EXTEND` changes it).
    pub ttl: Duration,
    /// The lock-delay after the connection closes (0: released at once).
    pub delay: Duration,
    /// Until when the last grant or extension is sure to stand.
    pub valid_until: Instant,
    /// Cancelled when the hold may be lost: its connection closes.
    pub lost: CancellationToken,
    /// Which binding of the hold this is (a re-grant binds it anew).
    pub generation: u64,
}

/// Every bound hold of the endpoint.
#[derive(Default)]
pub struct Bindings(Mutex<HashMap<Held, Binding>>);

impl Bindings {
    pub fn with<R>(&self, f: impl FnOnce(&mut HashMap<Held, Binding>) -> R) -> R {
        // A panic elsewhere while locked leaves the map as it was: still usable.
        let mut map = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut map)
    }

    /// Holds bound now (for INFO).
    pub fn count(&self) -> usize {
        self.with(|m| m.len())
    }

    /// Ends the binding of `held` (a release, or a re-grant without
    /// `SESSION`): its extensions stop, and nothing is closed.
    pub fn unbind(&self, held: &Held) {
        self.with(|m| m.remove(held));
    }

    /// A `LOCK.EXTEND` of a bound hold: later extensions ask for `ttl`.
    pub fn extended(&self, held: &Held, ttl: Duration, valid_until: Instant) {
        self.with(|m| {
            if let Some(b) = m.get_mut(held) {
                b.ttl = ttl;
                b.valid_until = valid_until;
            }
        });
    }
}
