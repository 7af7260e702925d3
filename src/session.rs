//! Holds bound to the connection that was granted them: `LOCK.ACQUIRE ...
//! SESSION [DELAY ms]`.
//!
//! A binding names the hold (database, key, owner) and the client id of
//! the connection that was granted it, by the command itself or by a
//! WAIT handoff. When that connection closes (the client quits, is
//! killed, times out, CLIENT KILL), every hold still bound to it ends:
//! at once, or `DELAY` ms after the disconnect (a lock-delay, as in
//! Chubby: a holder cut off by the network may still be running, so the
//! lock stays unavailable that long and the fencing token covers the
//! rest). The lease still bounds every hold.
//!
//! The binding is this server's memory of a connection, so it never
//! outlives it: it is not persisted or replicated, and after a restart, an
//! AOF load or a failover the lease alone governs the hold. A grant to the
//! same owner since (a re-grant on any connection, with SESSION or not)
//! replaces the binding; a release by owner ends it. So a disconnect never
//! ends a hold that was granted again on another connection, and never one
//! that moved to another owner (`disconnect` checks the owner before it
//! ends anything).
//!
//! Nothing here costs a grant without SESSION anything but one load while
//! no hold is bound.

use std::collections::HashMap;
use std::ffi::c_int;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{LazyLock, Mutex};

/// A held lock: database, key, owner.
pub type Hold = (c_int, Box<[u8]>, Box<[u8]>);

struct Binding {
    client: u64,
    delay_ms: i64,
    /// When its connection closed (monotonic ms), once it has.
    closed_at: Option<i64>,
}

#[derive(Default)]
struct State {
    bindings: HashMap<Hold, Binding>,
    by_client: HashMap<u64, Vec<Hold>>,
    /// Holds whose connection closed, for `disconnect` to end.
    closed: Vec<Hold>,
}

static STATE: LazyLock<Mutex<State>> = LazyLock::new(|| Mutex::new(State::default()));
/// Bound holds: lets every grant and release skip the map while none is.
static BOUND: AtomicUsize = AtomicUsize::new(0);

fn with_state<R>(f: impl FnOnce(&mut State) -> R) -> Option<R> {
    crate::reentry::with(&STATE, f)
}

impl State {
    fn recount(&self) {
        BOUND.store(self.bindings.len(), Ordering::Relaxed);
    }

    fn unlist(&mut self, client: u64, hold: &Hold) {
        if let Some(holds) = self.by_client.get_mut(&client) {
            holds.retain(|h| h != hold);
            if holds.is_empty() {
                self.by_client.remove(&client);
            }
        }
    }

    fn unbind(&mut self, hold: &Hold) {
        if let Some(old) = self.bindings.remove(hold) {
            if old.closed_at.is_none() {
                self.unlist(old.client, hold);
            }
        }
    }
}

/// Holds bound to a connection now (for INFO).
pub fn bound() -> i64 {
    i64::try_from(BOUND.load(Ordering::Relaxed)).unwrap_or(i64::MAX)
}

fn hold(db: c_int, key: &[u8], owner: &[u8]) -> Hold {
    (db, key.into(), owner.into())
}

/// `owner` was granted the lock at `key` in `db`: bound to connection
/// `client` with a lock-delay of `delay_ms` (`SESSION`), or to none
/// (`None`: a grant without SESSION ends an earlier binding, since a
/// re-grant's terms are the hold's).
pub fn granted(db: c_int, key: &[u8], owner: &[u8], session: Option<(u64, i64)>) {
    if session.is_none() && BOUND.load(Ordering::Relaxed) == 0 {
        return;
    }
    with_state(|s| {
        let hold = hold(db, key, owner);
        s.unbind(&hold);
        if let Some((client, delay_ms)) = session {
            s.by_client.entry(client).or_default().push(hold.clone());
            s.bindings.insert(hold, Binding { client, delay_ms, closed_at: None });
        }
        s.recount();
    });
}

/// `owner` released the lock at `key` in `db`.
pub fn released(db: c_int, key: &[u8], owner: &[u8]) {
    if BOUND.load(Ordering::Relaxed) == 0 {
        return;
    }
    with_state(|s| {
        s.unbind(&hold(db, key, owner));
        s.recount();
    });
}

/// Connection `client` closed at `now_mono`: its holds are marked for
/// `disconnect` to end. True if any was.
pub fn connection_closed(client: u64, now_mono: i64) -> bool {
    if BOUND.load(Ordering::Relaxed) == 0 {
        return false;
    }
    with_state(|s| {
        let Some(holds) = s.by_client.remove(&client) else { return false };
        for hold in holds {
            if let Some(binding) = s.bindings.get_mut(&hold).filter(|b| b.client == client) {
                binding.closed_at = Some(now_mono);
                s.closed.push(hold);
            }
        }
        !s.closed.is_empty()
    })
    .unwrap_or(false)
}

/// The holds whose connection closed and that no grant has bound again
/// since, each with when it must end (monotonic ms: the disconnect plus
/// its lock-delay); their bindings are gone.
pub fn take_closed() -> Vec<(Hold, i64)> {
    with_state(|s| {
        let closed = std::mem::take(&mut s.closed);
        let ended: Vec<(Hold, i64)> = closed
            .into_iter()
            .filter_map(|hold| {
                let binding = s.bindings.get(&hold).filter(|b| b.closed_at.is_some())?;
                let end = binding.closed_at.unwrap_or(0).saturating_add(binding.delay_ms);
                s.bindings.remove(&hold);
                Some((hold, end))
            })
            .collect();
        s.recount();
        ended
    })
    .unwrap_or_default()
}

/// Whether any closed connection's hold waits to be ended.
pub fn any_closed() -> bool {
    with_state(|s| !s.closed.is_empty()).unwrap_or(false)
}

/// This node became a replica, or its data was replaced: no binding
/// stands (a replica grants nothing to its own clients).
pub fn forget_all() {
    with_state(|s| {
        *s = State::default();
        s.recount();
    });
}

/// Whether `owner`'s hold at `key` in `db` is bound to a connection (for
/// LOCK.INFO).
pub fn is_bound(db: c_int, key: &[u8], owner: &[u8]) -> bool {
    BOUND.load(Ordering::Relaxed) != 0
        && with_state(|s| s.bindings.get(&hold(db, key, owner)).is_some_and(|b| b.closed_at.is_none())).unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    // One test: the state is the process's, shared by every test thread.
    #[test]
    fn a_binding_follows_the_latest_grant_and_ends_only_with_its_own_connection() {
        forget_all();
        granted(0, b"k", b"a", Some((7, 0)));
        granted(0, b"j", b"a", Some((7, 500)));
        assert!(is_bound(0, b"k", b"a") && bound() == 2);
        // Re-granted on connection 8: closing 7 leaves it alone.
        granted(0, b"k", b"a", Some((8, 0)));
        // Re-granted without SESSION: bound to nothing.
        granted(0, b"j", b"a", None);
        assert!(!is_bound(0, b"j", b"a"));
        assert!(!connection_closed(7, 1_000), "7 holds nothing bound any more");
        assert!(take_closed().is_empty());
        assert!(connection_closed(8, 1_000));
        // A grant between the disconnect and its handling wins.
        granted(0, b"k", b"a", Some((9, 0)));
        assert!(take_closed().is_empty());
        assert!(is_bound(0, b"k", b"a"));
        granted(1, b"k", b"b", Some((9, 250)));
        released(0, b"k", b"a");
        assert!(connection_closed(9, 2_000));
        let closed = take_closed();
        assert_eq!(closed.len(), 1, "only the hold still bound: {:?}", closed.iter().map(|(h, _)| h.0).collect::<Vec<_>>());
        assert_eq!(closed[0].1, 2_250, "the disconnect plus its lock-delay");
        assert_eq!(bound(), 0);
        forget_all();
    }
}
