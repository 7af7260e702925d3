//! The module's lock commands, with the module's syntax and reply shapes,
//! each run through the quorum: `LOCK.ACQUIRE` (exclusive or `SHARED`,
//! a semaphore's permits with `SHARED LIMIT n [PERMITS k]`, `FENCE`,
//! `WAIT`, `SESSION [DELAY ms]`: see `binding`, `VALUE`),
//! `LOCK.RELEASE`, `LOCK.EXTEND` (sets: `sets`; `LOCK.INFO`,
//! `LOCK.WAITERS`: `view`).
//!
//! Each acquisition is held on the servers under an owner of its own: the
//! client's, then `:` and 16 random hex digits, new for each round of the
//! acquisition (`Redlock::lock_as`). A round that fails undoes its grants
//! by owner, and a release that did not land is sent again for a while:
//! under the client's owner alone, a holder's
//! refresh (`LOCK.ACQUIRE` again) whose round failed would release the
//! hold it already had on the servers that re-granted it, and another
//! client could then be granted while it still works. So a client's
//! holds are found on the servers by its owner (`lookup`): asking again
//! while one may stand on a quorum extends it (which never releases),
//! and release and extend act on it. What the endpoint remembers of the
//! holds it granted (`own`) only spares that look-up; the answer is the
//! servers'. A
//! semaphore's hold is found the same way on the semaphore's limit record
//! (`redlock::semaphore::limit_key`), which every hold of its permits
//! takes under its owner, and a set's on its first key.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use redlock::semaphore::limit_key;
use redlock::transport::{Ask, Share};
use redlock::{Error, Lock, Mode, Resources};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio_util::sync::CancellationToken;

use super::args::{failed, owner_of, parse_acquire, text, ttl_of, Acquire};
use super::binding;
use super::resp::{printable, wrong_arity, Reply, MAX_PENDING};
use super::state::{Held, Next, Shared, Taken};

/// The connection a command came on: its id, and what is cancelled when
/// a hold bound to it may be lost (`binding`).
pub struct Client<'a> {
    pub id: u64,
    pub lost: &'a CancellationToken,
}

/// Runs `command` (`lock.acquire`, `lock.release` or `lock.extend`) with
/// `args`.
pub async fn run<R: AsyncRead + Unpin>(
    shared: &Arc<Shared>,
    client: Client<'_>,
    command: &str,
    args: &[Vec<u8>],
    reader: &mut R,
    pending: &mut Vec<u8>,
) -> (Option<Reply>, Next) {
    let reply = match command {
        "lock.acquire" => {
            let ask = match parse_acquire(args) {
                Ok(ask) => ask,
                Err(e) => return (Some(e), Next::Serve),
            };
            let acquisition = async {
                match ask.limit {
                    Some(limit) => take_or_refresh_permits(shared, &ask, limit).await,
                    None => take_or_refresh(shared, &ask).await,
                }
            };
            return acquire(shared, client, &ask, acquisition, reader, pending).await;
        }
        "lock.release" => release(shared, args).await,
        _ => extend(shared, args).await,
    };
    (Some(reply.unwrap_or_else(|e| e)), Next::Serve)
}

/// Serves `acquisition`, what `ask` asks for (one key, a semaphore's
/// permits or a set), on the client's connection: waited for while the
/// client stays, given up when it goes, and its grant bound to the
/// connection with `SESSION`.
pub async fn acquire<R: AsyncRead + Unpin>(
    shared: &Arc<Shared>,
    client: Client<'_>,
    ask: &Acquire,
    acquisition: impl Future<Output = (Reply, Granted)>,
    reader: &mut R,
    pending: &mut Vec<u8>,
) -> (Option<Reply>, Next) {
    tokio::pin!(acquisition);
    let waits = usize::from(ask.wait.is_some());
    shared.waiting.fetch_add(waits, Ordering::Relaxed);
    // The client's input is read on meanwhile: a client that closes gives
    // its acquisition up at once (dropping it leaves the line), and one
    // that sends more than a request may hold is cut off.
    let mut chunk = [0u8; 4096];
    let result = loop {
        tokio::select! {
            result = &mut acquisition => break Ok(result),
            read = reader.read(&mut chunk) => match read {
                Ok(0) | Err(_) => break Err(Next::Gone),
                Ok(n) => {
                    pending.extend_from_slice(chunk.get(..n).unwrap_or_default());
                    if pending.len() > MAX_PENDING {
                        break Err(Next::Close);
                    }
                }
            },
        }
    };
    shared.waiting.fetch_sub(waits, Ordering::Relaxed);
    let (reply, held) = match result {
        Err(Next::Close) => return (Some(Reply::error("ERR Protocol error: request too large")), Next::Close),
        Err(next) => return (None, next),
        Ok(granted) => granted,
    };
    if let Some((held, valid_until)) = held {
        if let (Taken::Key(key), stored) = &held {
            shared.own.record(key, &ask.owner, stored, valid_until);
        }
        // The module's rule: a grant with SESSION binds the hold to this
        // connection, a re-grant without it to none.
        match ask.session {
            Some(delay) => binding::bind(shared, client.id, held, ask.ttl, delay, valid_until, client.lost),
            None => shared.bindings.unbind(&held),
        }
    }
    let counter = match reply {
        Reply::Int(_) | Reply::Status(_) => &shared.granted,
        Reply::Nil => &shared.refused,
        _ => return (Some(reply), Next::Serve),
    };
    counter.fetch_add(1, Ordering::Relaxed);
    (Some(reply), Next::Serve)
}

/// A grant's hold and until when it is sure to stand.
pub type Granted = Option<(Held, Instant)>;

/// The reply and hold of a grant (or a refresh) of `taken` under `stored`.
pub fn granted(lock: &Lock, taken: Taken, stored: String, token: Option<i64>) -> (Reply, Granted) {
    // Script mode has no tokens: OK, as SET NX answers.
    (token.map_or_else(Reply::ok, Reply::Int), Some(((taken, stored), lock.acquired_at + lock.validity)))
}

/// `ask` served: a hold of the client's owner that may stand on a quorum
/// extended (the module's re-grant: its token kept, nil when no quorum
/// extended it, and nothing released either way); otherwise a new
/// acquisition under an owner of its own, whose failed round can undo
/// only its own grants. With the reply, the hold granted or extended.
async fn take_or_refresh(shared: &Shared, ask: &Acquire) -> (Reply, Granted) {
    let redlock = &shared.redlock;
    // An exclusive hold asked without `WAIT` that this endpoint does not
    // know the client to hold is asked for at once, the look-up saved: a
    // hold of the client's that stands on a quorum (granted through
    // another endpoint, or before a restart) refuses it there, and is then
    // looked up and refreshed. Never so with `WAIT` (the client would wait
    // behind its own hold), nor for a shared hold (a second one would be
    // granted beside the client's first).
    let at_once = !ask.shared && ask.wait.is_none() && shared.own.find(&ask.key, &ask.owner).is_none();
    if at_once {
        let taken = take(shared, ask).await;
        if !matches!(taken.0, Reply::Nil) {
            return taken;
        }
    }
    let found = lookup(shared, &ask.key, &ask.owner).await;
    if let Some(hold) = found.holds.first().filter(|h| h.servers + found.unanswered >= redlock.quorum()) {
        if let Some(refused) = refresh_refused(ask, hold) {
            return (refused, None);
        }
        if ask.value.is_some() {
            // The module replaces the holder's value; the quorum client
            // stores one at a grant only.
            return (super::args::not_served("VALUE on a holder's LOCK.ACQUIRE again"), None);
        }
        let held = (Taken::Key(ask.key.clone()), hold.stored.clone());
        return match binding::extend(redlock, &held, ask.ttl).await {
            Ok(lock) => granted(&lock, held.0, held.1, hold.token),
            Err(e) if not_held(&e) => (Reply::Nil, None),
            Err(e) => (failed(&e), None),
        };
    }
    if at_once {
        // Refused above, and no hold of the client's found: the answer.
        return (Reply::Nil, None);
    }
    take(shared, ask).await
}

/// A new acquisition of `ask`'s key, each round under an owner of its
/// own (`ask.owner:16hex`, the lock's).
async fn take(shared: &Shared, ask: &Acquire) -> (Reply, Granted) {
    let redlock = &shared.redlock;
    let deadline = ask.wait.and_then(|w| Instant::now().checked_add(w));
    let one = Resources::one(&ask.key);
    let asked = Ask::new(Share::of(ask.shared)).fence(ask.fence).value(ask.value.as_deref());
    match redlock.lock_as(&one, &ask.owner, ask.ttl, asked, deadline).await {
        Ok(lock) => {
            let token = lock.token;
            granted(&lock, Taken::Key(ask.key.clone()), lock.owner.clone(), token)
        }
        Err(Error::NotAcquired { .. }) => (Reply::Nil, None),
        Err(e) => (failed(&e), None),
    }
}

/// The module's refusal of a holder asking again in another mode, or
/// with a `FENCE` above its token; `None` when the refresh may go on.
pub fn refresh_refused(ask: &Acquire, hold: &Found) -> Option<Reply> {
    if hold.exclusive == ask.shared {
        let (held, asked) = if hold.exclusive { ("exclusive", "shared") } else { ("shared", "exclusive") };
        let text = format!(
            "ERR {} holds {} {held}: release it before asking for it {asked}",
            printable(ask.owner.as_bytes()),
            printable(ask.key.as_bytes())
        );
        return Some(Reply::error(text));
    }
    fence_refused(ask, hold)
}

/// The module's refusal of a holder asking again with a `FENCE` above its
/// token.
fn fence_refused(ask: &Acquire, hold: &Found) -> Option<Reply> {
    if let (Some(min), Some(token)) = (ask.fence, hold.token) {
        if token < min {
            let text = format!(
                "ERR {} holds {} with token {token}, below FENCE {min}: release it first",
                printable(ask.owner.as_bytes()),
                printable(ask.key.as_bytes())
            );
            return Some(Reply::error(text));
        }
    }
    None
}

/// `ask` (`SHARED LIMIT limit [PERMITS k]`) served as `take_or_refresh`
/// serves a lock: the client's hold found on the semaphore's limit record
/// and extended (every permit it holds, with the record), or `k` permits
/// taken through the quorum client's semaphore under an owner of their
/// own. The reply is the hold's token, as for a lock.
async fn take_or_refresh_permits(shared: &Shared, ask: &Acquire, limit: u32) -> (Reply, Granted) {
    let redlock = &shared.redlock;
    if redlock.settings().mode == Mode::Script {
        // No limit record to find a hold on: it could be neither released
        // nor extended through the endpoint.
        return (super::args::not_served("SHARED LIMIT in --mode script"), None);
    }
    let found = lookup(shared, &limit_key(&ask.key), &ask.owner).await;
    if let Some(hold) = found.holds.first().filter(|h| h.servers + found.unanswered >= redlock.quorum()) {
        let held_limit = hold.limit.and_then(|l| u32::try_from(l).ok()).unwrap_or(limit);
        if held_limit != limit {
            return (Reply::error(format!("ERR wrong lock kind: the key is a semaphore (SHARED LIMIT {held_limit})")), None);
        }
        if let Some(refused) = fence_refused(ask, hold) {
            return (refused, None);
        }
        let held = (Taken::Permits(ask.key.clone(), limit), hold.stored.clone());
        return match binding::extend(redlock, &held, ask.ttl).await {
            // The permits held are known once extended: another number
            // asked is refused then, as the module refuses it (the lease
            // is extended all the same; a binding is left as it was).
            Ok(lock) if lock.resources.len() != ask.permits as usize => {
                let text = format!("ERR the owner holds {} permits; release and ask again for another number", lock.resources.len());
                (Reply::error(text), None)
            }
            Ok(lock) => granted(&lock, held.0, held.1, hold.token),
            Err(e) if not_held(&e) => (Reply::Nil, None),
            Err(e) => (failed(&e), None),
        };
    }
    let deadline = ask.wait.and_then(|w| Instant::now().checked_add(w));
    match redlock.permits_as(&ask.key, &ask.owner, limit, ask.permits, ask.ttl, ask.fence, deadline).await {
        Ok(lock) => {
            let token = lock.token;
            granted(&lock, Taken::Permits(ask.key.clone(), limit), lock.owner.clone(), token)
        }
        Err(Error::NotAcquired { .. }) => (Reply::Nil, None),
        Err(e) => (failed(&e), None),
    }
}

/// Whether `e` says the lock is not (or no longer) held on a quorum.
pub fn not_held(e: &Error) -> bool {
    matches!(e, Error::QuorumLost { .. } | Error::Expired { .. } | Error::NoQuorum { .. } | Error::NotAcquired { .. })
}

/// The client's owner of an owner the servers list, when it is a
/// round's (`Redlock::lock_as`); `None` for any other.
fn client_owner(stored: &str) -> Option<&str> {
    let (owner, suffix) = stored.rsplit_once(':')?;
    let random = suffix.len() == 16 && suffix.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    random.then_some(owner)
}

/// The owner to show for `stored`: the client's when it is a round's.
pub fn shown(stored: &str) -> &str {
    client_owner(stored).unwrap_or(stored)
}

/// One of a client's holds of a key, as the servers that answered list it.
pub struct Found {
    /// The owner it is held under there (a round's).
    pub stored: String,
    /// Servers that list it.
    pub servers: usize,
    /// The highest token they give it: the quorum's token of the grant.
    /// A round grants under each server's own token and then raises the
    /// lower ones to the highest (`FENCE`); a server the raise did not
    /// reach keeps its lower one, so the lowest could answer a refresh
    /// with a token below the one the grant answered, and below an earlier
    /// holder's. None is above the grant's.
    pub token: Option<i64>,
    pub exclusive: bool,
    /// A semaphore's limit, as the servers give it (its limit record's).
    pub limit: Option<i64>,
}

/// A client's holds of a key, most listed first, and the servers that did
/// not answer (any of which may hold one too).
pub struct Holds {
    pub holds: Vec<Found>,
    pub unanswered: usize,
}

/// `owner`'s holds of `key` (every round's owner made from `owner` that
/// the servers list).
pub async fn lookup(shared: &Shared, key: &str, owner: &str) -> Holds {
    let statuses = shared.redlock.holders(key).await;
    let mut holds: Vec<Found> = Vec::new();
    let mut unanswered = 0usize;
    for status in &statuses {
        if !status.reachable || status.error.is_some() {
            unanswered += 1;
            continue;
        }
        // Script mode lists no holders: its one owner is the key's value.
        let script_owner = status.holders.is_empty().then_some(status.owner.as_ref()).flatten().map(|o| (o.as_str(), status.token));
        let listed = status.holders.iter().map(|h| (h.owner.as_str(), h.token)).chain(script_owner);
        for (stored, token) in listed {
            // A hold this endpoint gave up (its acquisition failed or was
            // dropped when the client left) is being released: extended and
            // answered as held, it would end under the client.
            if client_owner(stored) != Some(owner) || shared.redlock.gave_up(stored) {
                continue;
            }
            let exclusive = status.owner.as_deref() == Some(stored);
            match holds.iter_mut().find(|h| h.stored == stored) {
                Some(h) => {
                    h.servers += 1;
                    h.token = match (h.token, token) {
                        (Some(a), Some(b)) => Some(a.max(b)),
                        (a, b) => a.or(b),
                    };
                }
                None => holds.push(Found { stored: stored.to_string(), servers: 1, token, exclusive, limit: status.limit }),
            }
        }
    }
    holds.sort_by_key(|h| std::cmp::Reverse(h.servers));
    Holds { holds, unanswered }
}

/// `LOCK.RELEASE key owner`: 1 when a quorum released `owner`'s hold of
/// the lock `key`, or else of the semaphore `key` (looked up only when
/// the lock is not held: a lock's release costs no more than before).
async fn release(shared: &Shared, args: &[Vec<u8>]) -> Result<Reply, Reply> {
    let [key, owner] = args else { return Err(wrong_arity("lock.release")) };
    let (key, owner) = (text(key, "key")?, owner_of(owner)?);
    let redlock = &shared.redlock;
    // A hold this endpoint granted is released where it stands, without a
    // look-up; one no quorum released there is looked for as any other
    // (the client may hold the key under another round's owner).
    if let Some(stored) = shared.own.find(&key, &owner) {
        let held = (Taken::Key(key.clone()), stored);
        // Unbound first: the binding's extensions stop, and one that fails
        // now closes nothing.
        shared.bindings.unbind(&held);
        let released = binding::release(redlock, &held).await.map_err(|e| failed(&e))?.released >= redlock.quorum();
        shared.own.forget(&key, &owner, &held.1);
        if released {
            return Ok(Reply::Int(1));
        }
    }
    let mut released = false;
    for held in holds_of(shared, &key, &owner).await {
        shared.bindings.unbind(&held);
        released |= binding::release(redlock, &held).await.map_err(|e| failed(&e))?.released >= redlock.quorum();
        shared.own.forget(&key, &owner, &held.1);
    }
    Ok(Reply::Int(i64::from(released)))
}

/// `LOCK.EXTEND key owner ttl-ms`: 1 when a quorum extended it (a lock,
/// or else every permit of the semaphore `key` the owner holds).
async fn extend(shared: &Shared, args: &[Vec<u8>]) -> Result<Reply, Reply> {
    let [key, owner, ttl] = args else { return Err(wrong_arity("lock.extend")) };
    let (key, owner, ttl) = (text(key, "key")?, owner_of(owner)?, ttl_of(ttl)?);
    // A hold this endpoint granted is extended where it stands; one no
    // quorum extended there is looked for as any other.
    if let Some(stored) = shared.own.find(&key, &owner) {
        let held = (Taken::Key(key.clone()), stored);
        match binding::extend(&shared.redlock, &held, ttl).await {
            Ok(lock) => {
                let valid_until = lock.acquired_at + lock.validity;
                shared.bindings.extended(&held, ttl, valid_until);
                shared.own.record(&key, &owner, &held.1, valid_until);
                return Ok(Reply::Int(1));
            }
            Err(e) if not_held(&e) => shared.own.forget(&key, &owner, &held.1),
            Err(e) => return Err(failed(&e)),
        }
    }
    let Some(held) = holds_of(shared, &key, &owner).await.into_iter().next() else { return Ok(Reply::Int(0)) };
    match binding::extend(&shared.redlock, &held, ttl).await {
        Ok(lock) => {
            shared.bindings.extended(&held, ttl, lock.acquired_at + lock.validity);
            Ok(Reply::Int(1))
        }
        Err(e) if not_held(&e) => Ok(Reply::Int(0)),
        Err(e) => Err(failed(&e)),
    }
}

/// `owner`'s holds of the lock `key`, most listed first; when it holds
/// none, its holds of the semaphore `key`.
async fn holds_of(shared: &Shared, key: &str, owner: &str) -> Vec<Held> {
    let locks = lookup(shared, key, owner).await.holds;
    if !locks.is_empty() {
        return locks.into_iter().map(|h| (Taken::Key(key.to_string()), h.stored)).collect();
    }
    let permits = lookup(shared, &limit_key(key), owner).await.holds;
    permits
        .into_iter()
        .filter_map(|h| {
            let limit = u32::try_from(h.limit?).ok()?;
            Some((Taken::Permits(key.to_string(), limit), h.stored))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_acquisitions_owner_names_its_client_and_no_other_owner_does() {
        // As `Redlock::lock_as` makes a round's owner.
        let stored = "worker:1:9f2c41d07a5be683";
        assert_eq!(client_owner(stored), Some("worker:1"));
        assert_eq!(shown(stored), "worker:1");
        for other in ["worker", "worker:1", "w:0123456789ABCDEF", "w:0123456789abcde", "w:0123456789abcdefa", "w:0123456789abcdeg"] {
            assert_eq!(client_owner(other), None, "{other:?}");
            assert_eq!(shown(other), other);
        }
        assert_eq!(client_owner(":0123456789abcdef"), Some(""), "a name no client can send (owner_of refuses it)");
    }
}
