//! The module's lock commands, with the module's syntax and reply shapes,
//! each run through the quorum: `LOCK.ACQUIRE` (exclusive or `SHARED`,
//! `FENCE`, `WAIT`), `LOCK.RELEASE`, `LOCK.EXTEND`, `LOCK.INFO`.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use redlock::transport::HolderState;
use redlock::{Error, InstanceStatus, Resources};
use tokio::io::{AsyncRead, AsyncReadExt};

use super::resp::{printable, wrong_arity, Reply, MAX_PENDING};
use super::state::{Next, Shared};

/// The longest ttl, and the longest wait (also `WAIT 0`'s), served: a
/// year, the longest `redislock.max-ttl` (the servers refuse what is over
/// their own setting).
const LONGEST: Duration = Duration::from_secs(365 * 24 * 3600);

/// Runs `command` (`lock.*`, lower case) with `args`.
pub async fn run<R: AsyncRead + Unpin>(
    shared: &Shared,
    command: &str,
    args: &[Vec<u8>],
    reader: &mut R,
    pending: &mut Vec<u8>,
) -> (Option<Reply>, Next) {
    let reply = match command {
        "lock.acquire" => return acquire(shared, args, reader, pending).await,
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
}

fn parse_acquire(args: &[Vec<u8>]) -> Result<Acquire, Reply> {
    let [key, owner, ttl, options @ ..] = args else { return Err(wrong_arity("lock.acquire")) };
    let (key, owner) = (text(key, "key")?, owner_of(owner)?);
    let ttl = ttl_of(ttl)?;
    let (mut shared, mut fence, mut wait) = (false, None, None);
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
            b"LIMIT" | b"PERMITS" | b"SESSION" | b"DELAY" | b"VALUE" | b"SEMAPHORE" => {
                return Err(not_served(&String::from_utf8_lossy(&name)));
            }
            _ => return Err(Reply::error(format!("ERR unknown option '{}'", printable(option)))),
        }
    }
    if fence.is_some() && wait.is_some() {
        return Err(not_served("FENCE with WAIT"));
    }
    Ok(Acquire { key, owner, ttl, shared, fence, wait })
}

async fn acquire<R: AsyncRead + Unpin>(shared: &Shared, args: &[Vec<u8>], reader: &mut R, pending: &mut Vec<u8>) -> (Option<Reply>, Next) {
    let ask = match parse_acquire(args) {
        Ok(ask) => ask,
        Err(e) => return (Some(e), Next::Serve),
    };
    let deadline = ask.wait.and_then(|w| Instant::now().checked_add(w));
    let resources = Resources::one(&ask.key);
    let acquisition = shared.redlock.lock_as(&resources, &ask.owner, ask.ttl, ask.shared, ask.fence, deadline);
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
    let reply = match result {
        Err(Next::Close) => return (Some(Reply::error("ERR Protocol error: request too large")), Next::Close),
        Err(next) => return (None, next),
        Ok(Ok(lock)) => {
            shared.granted.fetch_add(1, Ordering::Relaxed);
            // Script mode has no tokens: OK, as SET NX answers.
            lock.token.map_or_else(Reply::ok, Reply::Int)
        }
        Ok(Err(Error::NotAcquired { .. })) => {
            shared.refused.fetch_add(1, Ordering::Relaxed);
            Reply::Nil
        }
        Ok(Err(e)) => failed(&e),
    };
    (Some(reply), Next::Serve)
}

/// `LOCK.RELEASE key owner`: 1 when a quorum released `owner`'s hold.
async fn release(shared: &Shared, args: &[Vec<u8>]) -> Result<Reply, Reply> {
    let [key, owner] = args else { return Err(wrong_arity("lock.release")) };
    let (key, owner) = (text(key, "key")?, owner_of(owner)?);
    let redlock = &shared.redlock;
    let released = redlock.release_owner(&key, &owner).await.map_err(|e| failed(&e))?;
    Ok(Reply::Int(i64::from(released.released >= redlock.quorum())))
}

/// `LOCK.EXTEND key owner ttl-ms`: 1 when a quorum extended it.
async fn extend(shared: &Shared, args: &[Vec<u8>]) -> Result<Reply, Reply> {
    let [key, owner, ttl] = args else { return Err(wrong_arity("lock.extend")) };
    let (key, owner, ttl) = (text(key, "key")?, owner_of(owner)?, ttl_of(ttl)?);
    match shared.redlock.extend_owner(&key, &owner, ttl).await {
        Ok(_) => Ok(Reply::Int(1)),
        Err(Error::QuorumLost { .. } | Error::Expired { .. } | Error::NoQuorum { .. } | Error::NotAcquired { .. }) => Ok(Reply::Int(0)),
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
        true => (Reply::bulk(first.owner.clone()), first.token.map_or(Reply::Nil, Reply::Int)),
        false => (Reply::Nil, Reply::Nil),
    };
    let listed = holders
        .iter()
        .map(|h| {
            Reply::Array(vec![
                Reply::bulk(h.owner.clone()),
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
fn failed(e: &Error) -> Reply {
    Reply::error(format!("ERR {e}"))
}

fn not_served(what: &str) -> Reply {
    Reply::error(format!("ERR {what} is not served yet by this endpoint (redlock serve); see docs/serve.md"))
}

fn twice(option: &str) -> Reply {
    Reply::error(format!("ERR {option} given more than once"))
}

fn text(bytes: &[u8], what: &str) -> Result<String, Reply> {
    String::from_utf8(bytes.to_vec()).map_err(|_| Reply::error(format!("ERR redlock serve takes a UTF-8 {what}")))
}

fn owner_of(bytes: &[u8]) -> Result<String, Reply> {
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
