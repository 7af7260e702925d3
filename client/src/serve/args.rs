//! The arguments of the module's commands, read as the module reads them
//! (`src/args`): the same order of checks and the same error texts, so a
//! client's mistake is answered as a module server answers it. What the
//! quorum client cannot do is refused after the module's own checks, with
//! an error that names it.

use std::time::Duration;

use redlock::{Error, Resources};

use super::resp::{printable, wrong_arity, Reply};

/// The longest ttl, and the longest wait (also `WAIT 0`'s), served: a
/// year, the longest `redislock.max-ttl` (the servers refuse what is over
/// their own setting).
pub const LONGEST: Duration = Duration::from_secs(365 * 24 * 3600);

/// The module's largest `LIMIT` (`SHARED LIMIT n`).
const MODULE_MAX_LIMIT: u64 = 100_000;

/// The most keys of a set, as the module's default
/// `redislock.max-set-keys` and the quorum client's `MAX_RESOURCES`.
const MAX_SET_KEYS: usize = redlock::resources::MAX_RESOURCES;

/// What `LOCK.ACQUIRE` (or, without `limit` and `value`, `LOCK.MACQUIRE`)
/// asks for.
pub struct Acquire {
    pub key: String,
    pub owner: String,
    pub ttl: Duration,
    pub shared: bool,
    /// `SHARED LIMIT n`: a permit hold of a semaphore of `n`.
    pub limit: Option<u32>,
    /// `PERMITS k`: permits in the hold (1 without it).
    pub permits: u32,
    pub fence: Option<i64>,
    pub wait: Option<Duration>,
    /// `SESSION [DELAY ms]`: bound to the connection, with this delay.
    pub session: Option<Duration>,
    /// `VALUE text`: stored with an exclusive hold.
    pub value: Option<String>,
}

/// `LOCK.ACQUIRE key owner ttl-ms [SHARED [LIMIT n [PERMITS k]]] [FENCE
/// min-token] [WAIT timeout-ms] [SESSION [DELAY ms]] [VALUE text]`.
pub fn parse_acquire(args: &[Vec<u8>]) -> Result<Acquire, Reply> {
    let [key, owner, ttl, options @ ..] = args else { return Err(wrong_arity("lock.acquire")) };
    let (ask, semaphore) = parse_one(key, owner, ttl, options)?;
    if semaphore.is_some() {
        return Err(Reply::error("ERR SEMAPHORE belongs to LOCK.MACQUIRE (one key's semaphore: SHARED LIMIT n)"));
    }
    if ask.limit.is_some_and(|n| n > redlock::semaphore::MAX_PERMITS) {
        return Err(Reply::error(format!(
            "ERR LIMIT above {} is not served by this endpoint (redlock serve): the quorum client's semaphore takes a \
             key per permit, at most {} of them",
            redlock::semaphore::MAX_PERMITS,
            redlock::semaphore::MAX_PERMITS
        )));
    }
    Ok(ask)
}

/// The key, owner, ttl and options of an acquisition, read as the
/// module's `parse_one`; with `SEMAPHORE n` when given (LOCK.MACQUIRE's).
fn parse_one(key: &[u8], owner: &[u8], ttl: &[u8], options: &[Vec<u8>]) -> Result<(Acquire, Option<u32>), Reply> {
    let owner = owner_of(owner)?;
    let ttl = ttl_of(ttl)?;
    let key = text(key, "key")?;
    let (mut shared, mut session) = (false, false);
    let (mut fence, mut wait, mut limit, mut delay, mut permits, mut semaphore) = (None, None, None, None, None, None);
    let mut value = None;
    let mut rest = options;
    while let Some((option, more)) = rest.split_first() {
        let name = option.to_ascii_uppercase();
        rest = more;
        let flag = match name.as_slice() {
            b"SHARED" => Some(("SHARED", &mut shared)),
            b"SESSION" => Some(("SESSION", &mut session)),
            _ => None,
        };
        if let Some((option, set)) = flag {
            if *set {
                return Err(twice(option));
            }
            *set = true;
            continue;
        }
        let option = match name.as_slice() {
            b"VALUE" => "VALUE",
            b"FENCE" => "FENCE",
            b"WAIT" => "WAIT",
            b"LIMIT" => "LIMIT",
            b"DELAY" => "DELAY",
            b"PERMITS" => "PERMITS",
            b"SEMAPHORE" => "SEMAPHORE",
            _ => return Err(Reply::error(format!("ERR unknown option '{}'", printable(option)))),
        };
        let Some((given, more)) = rest.split_first() else {
            return Err(Reply::error(format!("ERR {option} needs {}", value_name(option))));
        };
        rest = more;
        let repeated = match option {
            "VALUE" => value.is_some(),
            "FENCE" => fence.is_some(),
            "WAIT" => wait.is_some(),
            "LIMIT" => limit.is_some(),
            "DELAY" => delay.is_some(),
            "PERMITS" => permits.is_some(),
            _ => semaphore.is_some(),
        };
        if repeated {
            return Err(twice(option));
        }
        match option {
            "VALUE" => value = Some(text(given, "value")?),
            "FENCE" => {
                let token = number(given).ok_or_else(|| Reply::error("ERR token must be a non-negative integer"))?;
                fence = Some(i64::try_from(token).map_err(|_| Reply::error("ERR token is too large (at most 9223372036854775807)"))?);
            }
            "WAIT" => {
                let ms = number(given).ok_or_else(|| Reply::error("ERR timeout must be a non-negative integer (milliseconds)"))?;
                // `WAIT 0` waits without limit, as the module's.
                wait = Some(if ms == 0 { LONGEST } else { Duration::from_millis(ms).min(LONGEST) });
            }
            "LIMIT" => limit = Some(limit_of(given).ok_or_else(|| Reply::error("ERR LIMIT must be an integer from 1 to 100000"))?),
            "PERMITS" => permits = Some(limit_of(given).ok_or_else(|| Reply::error("ERR PERMITS must be between 1 and LIMIT"))?),
            "SEMAPHORE" => {
                semaphore = Some(limit_of(given).ok_or_else(|| Reply::error("ERR SEMAPHORE must be an integer from 1 to 100000"))?);
            }
            _ => {
                let ms = number(given).filter(|&ms| Duration::from_millis(ms) <= LONGEST).ok_or_else(|| {
                    Reply::error(format!(
                        "ERR DELAY must be an integer from 0 to {} ms: how long a lock stays held past its holder's disconnect",
                        LONGEST.as_millis()
                    ))
                })?;
                delay = Some(Duration::from_millis(ms));
            }
        }
    }
    if limit.is_some() && !shared {
        return Err(Reply::error("ERR syntax error: LIMIT needs SHARED"));
    }
    // A semaphore through the quorum is its permits' locks and a limit
    // record (`SHARED LIMIT`): no one hold a value could be stored with.
    if value.is_some() && limit.is_some() {
        return Err(Reply::error("ERR VALUE is not served with SHARED LIMIT: a semaphore's permits are locks of their own here"));
    }
    if delay.is_some() && !session {
        return Err(Reply::error("ERR syntax error: DELAY needs SESSION"));
    }
    let permits = match (permits, limit) {
        (None, _) => 1,
        (Some(_), None) => return Err(Reply::error("ERR syntax error: PERMITS needs SHARED LIMIT")),
        (Some(k), Some(n)) if k <= n => k,
        (Some(_), Some(_)) => return Err(Reply::error("ERR PERMITS must be between 1 and LIMIT")),
    };
    let session = session.then(|| delay.unwrap_or_default());
    Ok((Acquire { key, owner, ttl, shared, limit, permits, fence, wait, session, value }, semaphore))
}

fn value_name(option: &str) -> &'static str {
    match option {
        "FENCE" => "a token",
        "WAIT" => "a timeout",
        "LIMIT" => "a number of holders",
        "DELAY" => "milliseconds",
        "PERMITS" => "a number of permits",
        "VALUE" => "a text",
        _ => "a limit",
    }
}

/// A limit (or a number of permits) as the module takes it: 1 to 100000.
fn limit_of(bytes: &[u8]) -> Option<u32> {
    number(bytes).filter(|n| (1..=MODULE_MAX_LIMIT).contains(n)).and_then(|n| u32::try_from(n).ok())
}

/// What `LOCK.MACQUIRE` asks for: its keys, and the rest as
/// `LOCK.ACQUIRE`'s (`key` the last of them).
pub struct MAcquire {
    pub keys: Resources,
    pub ask: Acquire,
}

/// `LOCK.MACQUIRE numkeys key [key ...] owner ttl-ms [SHARED] [FENCE
/// min-token] [WAIT timeout-ms] [SESSION [DELAY ms]] [SEMAPHORE limit]`.
pub fn parse_macquire(args: &[Vec<u8>]) -> Result<MAcquire, Reply> {
    let (keys, tail) = split_keys(args, "lock.macquire", |after| after >= 2)?;
    let (Some(last), [owner, ttl, options @ ..]) = (keys.names().last(), tail) else { return Err(wrong_arity("lock.macquire")) };
    let (ask, semaphore) = parse_one(last.as_bytes(), owner, ttl, options)?;
    if ask.limit.is_some() {
        return Err(Reply::error("ERR LOCK.MACQUIRE takes no LIMIT: each key of a set is a lock, exclusive or SHARED"));
    }
    if ask.value.is_some() {
        return Err(Reply::error("ERR LOCK.MACQUIRE takes no VALUE: a value belongs to one lock (LOCK.ACQUIRE)"));
    }
    if semaphore.is_some() && keys.len() < 2 {
        return Err(Reply::error("ERR SEMAPHORE needs two keys at least: the set's locks, then the semaphore"));
    }
    if semaphore.is_some() && ask.shared {
        return Err(Reply::error("ERR SEMAPHORE takes no SHARED: the set's locks are exclusive"));
    }
    if semaphore.is_some() {
        return Err(not_served("LOCK.MACQUIRE ... SEMAPHORE"));
    }
    Ok(MAcquire { keys, ask })
}

/// `LOCK.MRELEASE numkeys key [key ...] owner`.
pub fn parse_mrelease(args: &[Vec<u8>]) -> Result<(Resources, String), Reply> {
    let (keys, tail) = split_keys(args, "lock.mrelease", |after| after == 1)?;
    let [owner] = tail else { return Err(wrong_arity("lock.mrelease")) };
    Ok((keys, owner_of(owner)?))
}

/// `LOCK.MEXTEND numkeys key [key ...] owner ttl-ms`.
pub fn parse_mextend(args: &[Vec<u8>]) -> Result<(Resources, String, Duration), Reply> {
    let (keys, tail) = split_keys(args, "lock.mextend", |after| after == 2)?;
    let [owner, ttl] = tail else { return Err(wrong_arity("lock.mextend")) };
    let owner = owner_of(owner)?;
    Ok((keys, owner, ttl_of(ttl)?))
}

/// `numkeys key [key ...] rest...`: the keys, each named once, and the
/// rest, whose length `after_ok` accepts; checked in the module's order.
fn split_keys<'a>(args: &'a [Vec<u8>], command: &str, after_ok: impl Fn(usize) -> bool) -> Result<(Resources, &'a [Vec<u8>]), Reply> {
    let Some((numkeys, rest)) = args.split_first() else { return Err(wrong_arity(command)) };
    let too_many = || Reply::error(format!("ERR numkeys exceeds redislock.max-set-keys ({MAX_SET_KEYS} keys)"));
    let bad = || Reply::error("ERR numkeys must be a positive integer, at most the number of keys given");
    let digits = !numkeys.is_empty() && numkeys.iter().all(u8::is_ascii_digit) && (numkeys.len() == 1 || numkeys.first() != Some(&b'0'));
    if !digits {
        return Err(bad());
    }
    let n = match std::str::from_utf8(numkeys).ok().and_then(|n| n.parse::<u64>().ok()) {
        None => return Err(too_many()),
        Some(n) if n > MAX_SET_KEYS as u64 => return Err(too_many()),
        Some(0) => return Err(bad()),
        Some(n) => usize::try_from(n).map_err(|_| bad())?,
    };
    if n > rest.len() {
        return Err(bad());
    }
    let (keys, tail) = rest.split_at(n);
    if !after_ok(tail.len()) {
        return Err(wrong_arity(command));
    }
    let mut seen = std::collections::HashSet::with_capacity(keys.len());
    for key in keys {
        if !seen.insert(key.as_slice()) {
            return Err(Reply::error(format!("ERR key '{}' is named twice", printable(key))));
        }
    }
    let names = keys.iter().map(|k| text(k, "key")).collect::<Result<Vec<String>, Reply>>()?;
    let keys = Resources::of(&names).map_err(|e| Reply::error(format!("ERR {e}")))?;
    Ok((keys, tail))
}

/// `LOCK.WAITERS key [COUNT n]`: the key and how many to list (`None`:
/// all).
pub fn parse_waiters(args: &[Vec<u8>]) -> Result<(String, Option<usize>), Reply> {
    match args {
        [key] => Ok((text(key, "key")?, None)),
        [key, word, n] if word.eq_ignore_ascii_case(b"COUNT") => match number(n) {
            Some(count) => Ok((text(key, "key")?, Some(usize::try_from(count).unwrap_or(usize::MAX)))),
            None => Err(Reply::error("ERR COUNT must be a non-negative integer")),
        },
        [_, word, ..] if !word.eq_ignore_ascii_case(b"COUNT") => Err(Reply::error(format!("ERR unknown option '{}'", printable(word)))),
        _ => Err(wrong_arity("lock.waiters")),
    }
}

/// The error reply of a request the quorum could not serve.
pub fn failed(e: &Error) -> Reply {
    Reply::error(format!("ERR {e}"))
}

/// The error of something the module does that this endpoint does not.
pub fn not_served(what: &str) -> Reply {
    Reply::error(format!("ERR {what} is not served by this endpoint (redlock serve); see docs/serve.md"))
}

fn twice(option: &str) -> Reply {
    Reply::error(format!("ERR {option} given more than once"))
}

pub fn text(bytes: &[u8], what: &str) -> Result<String, Reply> {
    String::from_utf8(bytes.to_vec()).map_err(|_| Reply::error(format!("ERR redlock serve takes a UTF-8 {what}")))
}

pub fn owner_of(bytes: &[u8]) -> Result<String, Reply> {
    if bytes.is_empty() {
        return Err(Reply::error("ERR owner must not be empty"));
    }
    text(bytes, "owner")
}

/// A ttl in ms as the module takes it: digits, no sign or leading zero,
/// positive; at most `LONGEST`.
pub fn ttl_of(bytes: &[u8]) -> Result<Duration, Reply> {
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
