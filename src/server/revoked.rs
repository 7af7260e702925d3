//! The holds `LOCK.REVOKE` took away, remembered in this module's memory
//! (`core::revoked`) so that the revoked owner's `LOCK.EXTEND` answers
//! `REVOKED` instead of 0 while its lease would still have run. Not in the
//! keyspace, not in RDB or the AOF, not on replicas: after a restart or a
//! failover the revoked owner just sees 0, as for any hold it lost.
//! At most `CAP` holds are remembered, the oldest dropped first.

use std::ffi::c_int;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{LazyLock, Mutex};

use crate::core::revoked::Revocations;
use crate::core::token::Token;

/// The most revoked holds remembered (docs/commands.md).
pub const CAP: usize = 10_000;

/// A hold: its database, key and owner.
type Hold = (c_int, Box<[u8]>, Box<[u8]>);

static STATE: LazyLock<Mutex<Revocations<Hold>>> = LazyLock::new(|| Mutex::new(Revocations::new(CAP)));
/// Holds remembered: lets LOCK.EXTEND's refusal skip the map while there
/// are none.
static COUNT: AtomicUsize = AtomicUsize::new(0);

fn with_state<R>(f: impl FnOnce(&mut Revocations<Hold>) -> R) -> Option<R> {
    crate::server::reentry::with(&STATE, |s| {
        let r = f(s);
        COUNT.store(s.len(), Ordering::Relaxed);
        r
    })
}

/// Remembers that each of `owners`' holds of `key` in `db` (with when its
/// lease would have ended, monotonic ms) was revoked under `token`.
pub fn remember<'a>(db: c_int, key: &[u8], owners: impl IntoIterator<Item = (&'a [u8], i64)>, token: Token, now: i64) {
    with_state(|s| {
        s.prune(now);
        for (owner, until) in owners {
            s.insert((db, key.into(), owner.into()), token, until, now);
        }
    });
}

/// The token `owner`'s hold of `key` in `db` was revoked under, while its
/// lease would still have run.
pub fn revoked(db: c_int, key: &[u8], owner: &[u8], now: i64) -> Option<Token> {
    if COUNT.load(Ordering::Relaxed) == 0 {
        return None;
    }
    with_state(|s| if s.is_empty() { None } else { s.revoked(&(db, key.into(), owner.into()), now) }).flatten()
}

/// `owner` holds `key` in `db` again: its earlier revocation is no answer
/// to a later refusal.
pub fn regranted(db: c_int, key: &[u8], owner: &[u8]) {
    if COUNT.load(Ordering::Relaxed) == 0 {
        return;
    }
    with_state(|s| s.forget(&(db, Box::from(key), Box::from(owner))));
}

/// Holds remembered (for INFO).
pub fn remembered() -> i64 {
    i64::try_from(COUNT.load(Ordering::Relaxed)).unwrap_or(i64::MAX)
}

/// FLUSHDB/FLUSHALL (`db` -1: all) forget the holds of the keys they remove.
pub fn flushed(db: c_int) {
    if COUNT.load(Ordering::Relaxed) == 0 {
        return;
    }
    with_state(|s| s.retain(|(d, _, _)| db >= 0 && *d != db));
}

/// SWAPDB moves the remembered holds with their databases.
pub fn swapped(a: c_int, b: c_int) {
    if COUNT.load(Ordering::Relaxed) == 0 {
        return;
    }
    let swap = |d: c_int| {
        if d == a {
            b
        } else if d == b {
            a
        } else {
            d
        }
    };
    with_state(|s| s.rekey(|(d, k, o)| (swap(d), k, o)));
}
