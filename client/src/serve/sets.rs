//! Sets of keys taken whole, through the quorum client's sets
//! (`redlock::Resources`, each server granting all or nothing):
//! `LOCK.MACQUIRE`, `LOCK.MRELEASE`, `LOCK.MEXTEND`, with the module's
//! syntax and replies. A set is held under an owner of its own per
//! acquisition, as a lock is (see `lock`), and found again on its first
//! key. The quorum counts a set whole (a server counts only when it
//! released or extended every key), so `LOCK.MRELEASE` and
//! `LOCK.MEXTEND` reply `numkeys` when a quorum did it to the whole set,
//! else 0: a set a quorum no longer holds whole is lost as one lock.

use std::sync::Arc;
use std::time::Instant;

use redlock::transport::{Ask, Share};
use redlock::Error;
use tokio::io::AsyncRead;

use super::args::{failed, not_served, parse_macquire, parse_mextend, parse_mrelease, MAcquire};
use super::binding;
use super::lock::{self, granted, lookup, not_held, refresh_refused, Client, Granted};
use super::resp::Reply;
use super::state::{Next, Shared, Taken};

/// `LOCK.MACQUIRE numkeys key [key ...] owner ttl-ms [SHARED] [FENCE
/// min-token] [WAIT timeout-ms] [SESSION [DELAY ms]]`: one token for the
/// whole set, or nil.
pub async fn macquire<R: AsyncRead + Unpin>(
    shared: &Arc<Shared>,
    client: Client<'_>,
    args: &[Vec<u8>],
    reader: &mut R,
    pending: &mut Vec<u8>,
) -> (Option<Reply>, Next) {
    let set = match parse_macquire(args) {
        Ok(set) => set,
        Err(e) => return (Some(e), Next::Serve),
    };
    lock::acquire(shared, client, &set.ask, take_or_refresh_set(shared, &set), reader, pending).await
}

/// The set served as `lock::take_or_refresh` serves one key: the
/// client's hold of it (found on its first key) extended whole, or the
/// set taken under an owner of its own.
async fn take_or_refresh_set(shared: &Shared, set: &MAcquire) -> (Reply, Granted) {
    let redlock = &shared.redlock;
    let (keys, ask) = (&set.keys, &set.ask);
    let Some(first) = keys.names().first() else { return (not_served("an empty set"), None) };
    let found = lookup(shared, first, &ask.owner).await;
    if let Some(hold) = found.holds.first().filter(|h| h.servers + found.unanswered >= redlock.quorum()) {
        if let Some(refused) = refresh_refused(ask, hold) {
            return (refused, None);
        }
        let held = (Taken::Set(keys.clone()), hold.stored.clone());
        return match binding::extend(redlock, &held, ask.ttl).await {
            Ok(lock) => granted(&lock, held.0, held.1, hold.token),
            Err(e) if not_held(&e) => (Reply::Nil, None),
            Err(e) => (failed(&e), None),
        };
    }
    let deadline = ask.wait.and_then(|w| Instant::now().checked_add(w));
    // Each round under an owner of its own, `ask.owner:16hex`: the lock's.
    match redlock.lock_as(keys, &ask.owner, ask.ttl, Ask::new(Share::of(ask.shared)).fence(ask.fence), deadline).await {
        Ok(lock) => {
            let token = lock.token;
            granted(&lock, Taken::Set(keys.clone()), lock.owner.clone(), token)
        }
        Err(Error::NotAcquired { .. }) => (Reply::Nil, None),
        Err(e) => (failed(&e), None),
    }
}

/// `LOCK.MRELEASE numkeys key [key ...] owner`: `numkeys` when a quorum
/// released the whole set of every hold of `owner` found on its first
/// key, else 0.
pub async fn mrelease(shared: &Shared, args: &[Vec<u8>]) -> Result<Reply, Reply> {
    let (keys, owner) = parse_mrelease(args)?;
    let redlock = &shared.redlock;
    let Some(first) = keys.names().first() else { return Ok(Reply::Int(0)) };
    let mut released = false;
    for hold in lookup(shared, first, &owner).await.holds {
        let held = (Taken::Set(keys.clone()), hold.stored);
        // Unbound first, as a release of one key (see `lock`).
        shared.bindings.unbind(&held);
        released |= binding::release(redlock, &held).await.map_err(|e| failed(&e))?.released >= redlock.quorum();
    }
    Ok(Reply::Int(if released { whole(&keys) } else { 0 }))
}

/// `LOCK.MEXTEND numkeys key [key ...] owner ttl-ms`: `numkeys` when a
/// quorum extended the whole set, else 0.
pub async fn mextend(shared: &Shared, args: &[Vec<u8>]) -> Result<Reply, Reply> {
    let (keys, owner, ttl) = parse_mextend(args)?;
    let Some(first) = keys.names().first() else { return Ok(Reply::Int(0)) };
    let Some(hold) = lookup(shared, first, &owner).await.holds.into_iter().next() else { return Ok(Reply::Int(0)) };
    let held = (Taken::Set(keys.clone()), hold.stored);
    match binding::extend(&shared.redlock, &held, ttl).await {
        Ok(lock) => {
            shared.bindings.extended(&held, ttl, lock.acquired_at + lock.validity);
            Ok(Reply::Int(whole(&keys)))
        }
        Err(e) if not_held(&e) => Ok(Reply::Int(0)),
        Err(e) => Err(failed(&e)),
    }
}

fn whole(keys: &redlock::Resources) -> i64 {
    i64::try_from(keys.len()).unwrap_or(i64::MAX)
}
