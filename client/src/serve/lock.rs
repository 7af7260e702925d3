//! The module's lock commands, with the module's syntax and reply shapes,
//! each run through the quorum: `LOCK.ACQUIRE` (exclusive or `SHARED`,
//! `FENCE`, `WAIT`, `SESSION [DELAY ms]`: see `binding`), `LOCK.RELEASE`,
//! `LOCK.EXTEND`, `LOCK.INFO`.
//!
//! Each acquisition is held on the servers under an owner of its own: the
//! client's, then `:` and 16 random hex digits (`round_owner`). A round
//! that fails undoes its grants by owner, and a release that did not land
//! is sent again for a while: under the client's owner alone, a holder's
//! refresh (`LOCK.ACQUIRE` again) whose round failed would release the
//! hold it already had on the servers that re-granted it, and another
//! client could then be granted while it still works. So a client's
//! holds are found on the servers by its owner (`lookup`): asking again
//! while one may stand on a quorum extends it (which never releases),
//! and release and extend act on it; the endpoint keeps no state.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::Rng;
use redlock::transport::HolderState;
use redlock::{Error, InstanceStatus, Resources};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio_util::sync::CancellationToken;

use super::binding;
use super::resp::{printable, wrong_arity, Reply, MAX_PENDING};
use super::state::{Held, Next, Shared};

/// The longest ttl, and the longest wait (also `WAIT 0`'s), served: a
/// year, the longest `redislock.max-ttl` (the servers refuse what is over
/// their own setting).
const LONGEST: Duration = Duration::from_secs(365 * 24 * 3600);

/// The connection a command came on: its id, and what is cancelled when
/// a hold bound to it may be lost (`binding`).
pub struct Client<'a> {
    pub id: u64,
    pub lost: &'a CancellationToken,
}

/// Runs `command` (`lock.*`, lower case) with `args`.
pub async fn run<R: AsyncRead + Unpin>(
    shared: &Arc<Shared>,
    client: Client<'_>,
    command: &str,
    args: &[Vec<u8>],
    reader: &mut R,
    pending: &mut Vec<u8>,
) -> (Option<Reply>, Next) {
    let reply = match command {
        "lock.acquire" => return acquire(shared, client, args, reader, pending).await,
        "lock.release" => release(shared, args).await,
        "lock.extend" => extend(shared, args).await,
        _ => info(shared, args).await,
    };
    (Some(reply.unwrap_or_else(|e| e)), Next::Serve)
}

/// What `LOCK.ACQUIRE` asks for.
struct Acquire {
    key: String,
    owner: String,
    ttl: Duration,
    shared: bool,
    fence: Option<i64>,
    wait: Option<Duration>,
    /// `SESSION [DELAY ms]`: bound to the connection, with this delay.
    session: Option<Duration>,
}

fn parse_acquire(args: &[Vec<u8>]) -> Result<Acquire, Reply> {
    let [key, owner, ttl, options @ ..] = args else { return Err(wrong_arity("lock.acquire")) };
    let (key, owner) = (text(key, "key")?, owner_of(owner)?);
    let ttl = ttl_of(ttl)?;
    let (mut shared, mut fence, mut wait) = (false, None, None);
    let (mut session, mut delay) = (false, None);
    let mut rest = options;
    while let Some((option, more)) = rest.split_first() {
        let name = option.to_ascii_uppercase();
        rest = more;
        match name.as_slice() {
            b"SHARED" if shared => return Err(twice("SHARED")),
            b"SHARED" => shared = true,
            b"FENCE" | b"WAIT" => {
                let Some((value, more)) = rest.split_first() else {
                    return Err(Reply::error(if name == b"FENCE" { "ERR FENCE needs a token" } else { "ERR WAIT needs a timeout" }));
                };
                rest = more;
                if name == b"FENCE" {
                    if fence.is_some() {
                        return Err(twice("FENCE"));
                    }
                    let token = number(value).ok_or_else(|| Reply::error("ERR token must be a non-negative integer"))?;
                    fence = Some(i64::try_from(token).map_err(|_| Reply::error("ERR token is too large (at most 9223372036854775807)"))?);
                } else {
                    if wait.is_some() {
                        return Err(twice("WAIT"));
                    }
                    let ms = number(value).ok_or_else(|| Reply::error("ERR timeout must be a non-negative integer (milliseconds)"))?;
                    // `WAIT 0` waits without limit, as the module's.
                    wait = Some(if ms == 0 { LONGEST } else { Duration::from_millis(ms).min(LONGEST) });
                }
            }
            b"SESSION" if session => return Err(twice("SESSION")),
            b"SESSION" => session = true,
            b"DELAY" => {
                let Some((value, more)) = rest.split_first() else { return Err(Reply::error("ERR DELAY needs a delay")) };
                rest = more;
                if delay.is_some() {
                    return Err(twice("DELAY"));
                }
                let ms = number(value).filter(|&ms| Duration::from_millis(ms) <= LONGEST).ok_or_else(|| {
                    Reply::error(format!(
                        "ERR DELAY must be an integer from 0 to {} ms: how long a lock stays held past its holder's disconnect",
                        LONGEST.as_millis()
                    ))
                })?;
                delay = Some(Duration::from_millis(ms));
            }
            b"LIMIT" | b"PERMITS" | b"VALUE" | b"SEMAPHORE" => {
                return Err(not_served(&String::from_utf8_lossy(&name)));
            }
            _ => return Err(Reply::error(format!("ERR unknown option '{}'", printable(option)))),
        }
    }
    if fence.is_some() && wait.is_some() {
        return Err(not_served("FENCE with WAIT"));
    }
    if delay.is_some() && !session {
        return Err(Reply::error("ERR syntax error: DELAY needs SESSION"));
    }
    let session = session.then(|| delay.unwrap_or_default());
    Ok(Acquire { key, owner, ttl, shared, fence, wait, session })
}

async fn acquire<R: AsyncRead + Unpin>(
    shared: &Arc<Shared>,
    client: Client<'_>,
    args: &[Vec<u8>],
    reader: &mut R,
    pending: &mut Vec<u8>,
) -> (Option<Reply>, Next) {
    let ask = match parse_acquire(args) {
        Ok(ask) => ask,
        Err(e) => return (Some(e), Next::Serve),
    };
    let acquisition = take_or_refresh(shared, &ask);
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
type Granted = Option<(Held, Instant)>;

/// `ask` served: a hold of the client's owner that may stand on a quorum
/// extended (the module's re-grant: its token kept, nil when no quorum
/// extended it, and nothing released either way); otherwise a new
/// acquisition under an owner of its own, whose failed round can undo
/// only its own grants. With the reply, the hold granted or extended.
async fn take_or_refresh(shared: &Shared, ask: &Acquire) -> (Reply, Granted) {
    let redlock = &shared.redlock;
    let found = lookup(shared, &ask.key, &ask.owner).await;
    if let Some(hold) = found.holds.first().filter(|h| h.servers + found.unanswered >= redlock.quorum()) {
        if hold.exclusive == ask.shared {
            let (held, asked) = if hold.exclusive { ("exclusive", "shared") } else { ("shared", "exclusive") };
            let text = format!(
                "ERR {} holds {} {held}: release it before asking for it {asked}",
                printable(ask.owner.as_bytes()),
                printable(ask.key.as_bytes())
            );
            return (Reply::error(text), None);
        }
        if let (Some(min), Some(token)) = (ask.fence, hold.token) {
            if token < min {
                let text = format!(
                    "ERR {} holds {} with token {token}, below FENCE {min}: release it first",
                    printable(ask.owner.as_bytes()),
                    printable(ask.key.as_bytes())
                );
                return (Reply::error(text), None);
            }
        }
        return match redlock.extend_owner(&ask.key, &hold.stored, ask.ttl).await {
            // Script mode has no tokens: OK, as SET NX answers.
            Ok(lock) => {
                let reply = hold.token.map_or_else(Reply::ok, Reply::Int);
                (reply, Some(((ask.key.clone(), hold.stored.clone()), lock.acquired_at + lock.validity)))
            }
            Err(e) if not_held(&e) => (Reply::Nil, None),
            Err(e) => (failed(&e), None),
        };
    }
    let deadline = ask.wait.and_then(|w| Instant::now().checked_add(w));
    let owner = round_owner(&ask.owner);
    match redlock.lock_as(&Resources::one(&ask.key), &owner, ask.ttl, ask.shared, ask.fence, deadline).await {
        Ok(lock) => {
            let valid_until = lock.acquired_at + lock.validity;
            (lock.token.map_or_else(Reply::ok, Reply::Int), Some(((ask.key.clone(), owner), valid_until)))
        }
        Err(Error::NotAcquired { .. }) => (Reply::Nil, None),
        Err(e) => (failed(&e), None),
    }
}

/// Whether `e` says the lock is not (or no longer) held on a quorum.
fn not_held(e: &Error) -> bool {
    matches!(e, Error::QuorumLost { .. } | Error::Expired { .. } | Error::NoQuorum { .. } | Error::NotAcquired { .. })
}

/// The owner one acquisition of the client's `owner` holds the lock under
/// on the servers: `owner`, `:`, 16 random hex digits.
fn round_owner(owner: &str) -> String {
    format!("{owner}:{:016x}", rand::rng().random::<u64>())
}

/// The client's owner of an owner the servers list, when it is a
/// `round_owner`'s; `None` for any other.
fn client_owner(stored: &str) -> Option<&str> {
    let (owner, suffix) = stored.rsplit_once(':')?;
    let random = suffix.len() == 16 && suffix.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    random.then_some(owner)
}

/// The owner to show for `stored`: the client's when it is a `round_owner`.
pub(super) fn shown(stored: &str) -> &str {
    client_owner(stored).unwrap_or(stored)
}

/// One of a client's holds of a key, as the servers that answered list it.
pub(super) struct Found {
    /// The owner it is held under there (a `round_owner`).
    pub stored: String,
    /// Servers that list it.
    servers: usize,
    /// The highest token they give it: the quorum's token of the grant.
    /// A round grants under each server's own token and then raises the
    /// lower ones to the highest (`FENCE`); a server the raise did not
    /// reach keeps its lower one, so the lowest could answer a refresh
    /// with a token below the one the grant answered, and below an earlier
    /// holder's. None is above the grant's.
    token: Option<i64>,
    pub exclusive: bool,
}

/// A client's holds of a key, most listed first, and the servers that did
/// not answer (any of which may hold one too).
pub(super) struct Holds {
    pub holds: Vec<Found>,
    unanswered: usize,
}

/// `owner`'s holds of `key` (every `round_owner` of `owner` the servers
/// list).
pub(super) async fn lookup(shared: &Shared, key: &str, owner: &str) -> Holds {
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
            if client_owner(stored) != Some(owner) {
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
                None => holds.push(Found { stored: stored.to_string(), servers: 1, token, exclusive }),
            }
        }
    }
    holds.sort_by_key(|h| std::cmp::Reverse(h.servers));
    Holds { holds, unanswered }
}

/// `LOCK.RELEASE key owner`: 1 when a quorum released `owner`'s hold.
async fn release(shared: &Shared, args: &[Vec<u8>]) -> Result<Reply, Reply> {
    let [key, owner] = args else { return Err(wrong_arity("lock.release")) };
    let (key, owner) = (text(key, "key")?, owner_of(owner)?);
    let redlock = &shared.redlock;
    let mut released = false;
    for hold in lookup(shared, &key, &owner).await.holds {
        // Unbound first: the binding's extensions stop, and one that fails
        // now closes nothing.
        shared.bindings.unbind(&(key.clone(), hold.stored.clone()));
        released |= redlock.release_owner(&key, &hold.stored).await.map_err(|e| failed(&e))?.released >= redlock.quorum();
    }
    Ok(Reply::Int(i64::from(released)))
}

/// `LOCK.EXTEND key owner ttl-ms`: 1 when a quorum extended it.
async fn extend(shared: &Shared, args: &[Vec<u8>]) -> Result<Reply, Reply> {
    let [key, owner, ttl] = args else { return Err(wrong_arity("lock.extend")) };
    let (key, owner, ttl) = (text(key, "key")?, owner_of(owner)?, ttl_of(ttl)?);
    let Some(hold) = lookup(shared, &key, &owner).await.holds.into_iter().next() else { return Ok(Reply::Int(0)) };
    match shared.redlock.extend_owner(&key, &hold.stored, ttl).await {
        Ok(lock) => {
            shared.bindings.extended(&(key, hold.stored), ttl, lock.acquired_at + lock.validity);
            Ok(Reply::Int(1))
        }
        Err(e) if not_held(&e) => Ok(Reply::Int(0)),
        Err(e) => Err(failed(&e)),
    }
}

/// `LOCK.INFO key`: what a quorum of the servers agrees on: nil when no
/// holder is held on a quorum; otherwise the module's fields, each
/// holder's lease the shortest a quorum gives it.
async fn info(shared: &Shared, args: &[Vec<u8>]) -> Result<Reply, Reply> {
    let [key] = args else { return Err(wrong_arity("lock.info")) };
    let key = text(key, "key")?;
    let redlock = &shared.redlock;
    let statuses = redlock.status(&key).await;
    let answered: Vec<&InstanceStatus> = statuses.iter().filter(|s| s.reachable && s.error.is_none()).collect();
    let quorum = redlock.quorum();
    if answered.len() < quorum {
        return Err(Reply::error(format!(
            "ERR LOCK.INFO: {} of {} servers answered, fewer than the quorum of {quorum}",
            answered.len(),
            statuses.len()
        )));
    }
    let holders = agreed(&answered, quorum);
    let Some(first) = holders.first() else { return Ok(Reply::Nil) };
    let exclusive = holders.len() == 1 && answered.iter().any(|s| s.owner.as_deref() == Some(first.owner.as_str()));
    let waiters = answered.iter().filter_map(|s| s.waiters).max().unwrap_or(0);
    let pttl = holders.iter().map(|h| h.pttl).max().unwrap_or(0);
    let (owner, token) = match exclusive {
        true => (Reply::bulk(shown(&first.owner)), first.token.map_or(Reply::Nil, Reply::Int)),
        false => (Reply::Nil, Reply::Nil),
    };
    let listed = holders
        .iter()
        .map(|h| {
            Reply::Array(vec![
                Reply::bulk(shown(&h.owner)),
                h.token.map_or(Reply::Nil, Reply::Int),
                Reply::Int(h.pttl),
                h.held_ms.map_or(Reply::Nil, Reply::Int),
                Reply::Int(i64::from(h.session)),
                Reply::Int(1),
            ])
        })
        .collect();
    Ok(Reply::Map(vec![
        (Reply::bulk("owner"), owner),
        (Reply::bulk("token"), token),
        (Reply::bulk("pttl"), Reply::Int(pttl)),
        (Reply::bulk("waiters"), Reply::Int(waiters)),
        (Reply::bulk("mode"), Reply::bulk(if exclusive { "exclusive" } else { "shared" })),
        (Reply::bulk("limit"), Reply::Nil),
        (Reply::bulk("holders"), Reply::Array(listed)),
        (Reply::bulk("taken"), Reply::Nil),
        (Reply::bulk("value"), Reply::Nil),
    ]))
}

/// The holders that a quorum of `answered` lists (by owner, first seen
/// first), each with the lowest token and the shortest lease among them.
fn agreed(answered: &[&InstanceStatus], quorum: usize) -> Vec<HolderState> {
    let mut seen: Vec<(HolderState, usize)> = Vec::new();
    for holder in answered.iter().flat_map(|s| s.holders.iter()) {
        match seen.iter_mut().find(|(h, _)| h.owner == holder.owner) {
            Some((h, count)) => {
                *count += 1;
                h.pttl = h.pttl.min(holder.pttl);
                h.token = h.token.min(holder.token);
            }
            None => seen.push((holder.clone(), 1)),
        }
    }
    seen.into_iter().filter(|(_, count)| *count >= quorum).map(|(h, _)| h).collect()
}

/// The error reply of a request the quorum could not serve.
pub(super) fn failed(e: &Error) -> Reply {
    Reply::error(format!("ERR {e}"))
}

fn not_served(what: &str) -> Reply {
    Reply::error(format!("ERR {what} is not served yet by this endpoint (redlock serve); see docs/serve.md"))
}

fn twice(option: &str) -> Reply {
    Reply::error(format!("ERR {option} given more than once"))
}

pub(super) fn text(bytes: &[u8], what: &str) -> Result<String, Reply> {
    String::from_utf8(bytes.to_vec()).map_err(|_| Reply::error(format!("ERR redlock serve takes a UTF-8 {what}")))
}

pub(super) fn owner_of(bytes: &[u8]) -> Result<String, Reply> {
    if bytes.is_empty() {
        return Err(Reply::error("ERR owner must not be empty"));
    }
    text(bytes, "owner")
}

/// A ttl in ms as the module takes it: digits, no sign or leading zero,
/// positive; at most `LONGEST`.
fn ttl_of(bytes: &[u8]) -> Result<Duration, Reply> {
    let ms = number(bytes).filter(|&ms| ms > 0).ok_or_else(|| Reply::error("ERR ttl must be a positive integer (milliseconds)"))?;
    let ttl = Duration::from_millis(ms);
    if ttl > LONGEST {
        return Err(Reply::error(format!("ERR ttl exceeds the longest redlock serve takes ({} ms)", LONGEST.as_millis())));
    }
    Ok(ttl)
}

/// A non-negative integer written as the module takes it (digits only,
/// no leading zero); `None` otherwise, or beyond 64 bits.
fn number(bytes: &[u8]) -> Option<u64> {
    let plain = !bytes.is_empty() && bytes.iter().all(u8::is_ascii_digit) && (bytes.len() == 1 || bytes.first() != Some(&b'0'));
    plain.then(|| std::str::from_utf8(bytes).ok()?.parse().ok()).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_acquisitions_owner_names_its_client_and_no_other_owner_does() {
        let stored = round_owner("worker:1");
        assert_ne!(stored, round_owner("worker:1"), "each acquisition has an owner of its own");
        assert_eq!(client_owner(&stored), Some("worker:1"));
        assert_eq!(shown(&stored), "worker:1");
        for other in ["worker", "worker:1", "w:0123456789ABCDEF", "w:0123456789abcde", "w:0123456789abcdefa", "w:0123456789abcdeg"] {
            assert_eq!(client_owner(other), None, "{other:?}");
            assert_eq!(shown(other), other);
        }
        assert_eq!(client_owner(":0123456789abcdef"), Some(""), "a name no client can send (owner_of refuses it)");
    }
}
