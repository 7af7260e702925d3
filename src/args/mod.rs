//! Command argument parsing: typed requests or a clear error.
//!
//! Pure functions over byte strings, so every rule is unit tested without
//! a server. Nothing here allocates unless it builds an error message.

use std::borrow::Cow;
use std::ffi::{CStr, CString};

use crate::api::Arg;
use crate::core::grant::{Mode, Request};
use crate::core::token::Token;

/// Anything that exposes an argument's bytes.
pub trait ArgBytes {
    fn bytes(&self) -> &[u8];
}

impl ArgBytes for Arg {
    fn bytes(&self) -> &[u8] {
        Arg::bytes(self)
    }
}

impl ArgBytes for &[u8] {
    fn bytes(&self) -> &[u8] {
        self
    }
}

#[derive(Debug, PartialEq, Eq)]
pub enum ArgError {
    /// Wrong argument count; carries the full error text.
    Arity(&'static CStr),
    EmptyOwner,
    /// Carries `redislock.max-owner-len`.
    OwnerTooLong(i64),
    BadTtl,
    TtlAboveMax(i64),
    UnknownOption(Vec<u8>),
    MissingValue(&'static str),
    Repeated(&'static str),
    BadToken,
    /// Beyond 2^63-1: no token can be, so none this server could issue.
    TokenTooLarge,
    BadTimeout,
    TimeoutTooLarge,
    BadDeadline,
    /// `LIMIT` without `SHARED`.
    LimitWithoutShared,
    /// `DELAY` without `SESSION`.
    DelayWithoutSession,
    /// `LOCK.WAITERS ... COUNT` not a non-negative integer.
    BadCount,
    /// Carries `redislock.max-ttl`.
    BadDelay(i64),
    BadLimit,
    /// `numkeys` not a positive integer, or more than the arguments given.
    BadNumkeys,
    /// `numkeys` above `redislock.max-set-keys` (carried).
    TooManyKeys(i64),
    /// A key named twice in one set.
    KeyTwice(Vec<u8>),
    /// `LIMIT` in `LOCK.MACQUIRE`: a set's members are locks.
    LimitInSet,
    /// `PERMITS` without `LIMIT`.
    PermitsWithoutLimit,
    /// `PERMITS` not an integer from 1 to the LIMIT.
    BadPermits,
    /// A value longer than `redislock.max-owner-len` (carried).
    ValueTooLong(i64),
    /// `VALUE` in `LOCK.MACQUIRE`.
    ValueInSet,
    /// `SEMAPHORE` outside `LOCK.MACQUIRE`.
    SemaphoreOutsideSet,
    /// `SEMAPHORE` in a set of one key: no lock beside the semaphore.
    SemaphoreAlone,
    /// `SEMAPHORE` with `SHARED`: a permit hold takes its locks alone.
    SemaphoreWithShared,
    /// `SEMAPHORE` not an integer from 1 to `MAX_LIMIT`.
    BadSemaphoreLimit,
    /// `LARGEST` without `SEMAPHORE` (or outside LOCK.MACQUIRE).
    LargestWithoutSemaphore,
    /// `LARGEST m` not an integer from the SEMAPHORE limit to `MAX_LIMIT`.
    BadLargest,
    /// `SHARED n` outside LOCK.MACQUIRE.
    SharedCountOutsideSet,
    /// `SHARED n` not from 1 to the number of lock keys less one.
    BadSharedCount,
    /// A malformed option line; carries the full `ERR syntax error: ...`.
    Syntax(Cow<'static, CStr>),
}

pub use crate::core::grant::MAX_LIMIT;

impl ArgError {
    pub fn message(&self) -> Cow<'static, CStr> {
        match self {
            ArgError::Arity(msg) => Cow::Borrowed(msg),
            ArgError::Syntax(msg) => msg.clone(),
            ArgError::EmptyOwner => Cow::Borrowed(c"ERR owner must not be empty"),
            ArgError::BadTtl => Cow::Borrowed(c"ERR ttl must be a positive integer (milliseconds)"),
            ArgError::BadToken => Cow::Borrowed(c"ERR token must be a non-negative integer"),
            ArgError::BadTimeout => Cow::Borrowed(c"ERR timeout must be a non-negative integer (milliseconds)"),
            ArgError::TokenTooLarge => Cow::Borrowed(c"ERR token is too large (at most 9223372036854775807)"),
            ArgError::TimeoutTooLarge => {
                Cow::Borrowed(c"ERR timeout is too large (at most 9223372036854775807 milliseconds; 0 waits without limit)")
            }
            ArgError::BadDeadline => Cow::Borrowed(c"ERR deadline must be a non-negative integer (Unix time in milliseconds)"),
            ArgError::LimitWithoutShared => Cow::Borrowed(c"ERR syntax error: LIMIT needs SHARED"),
            ArgError::DelayWithoutSession => Cow::Borrowed(c"ERR syntax error: DELAY needs SESSION"),
            ArgError::BadCount => Cow::Borrowed(c"ERR COUNT must be a non-negative integer"),
            ArgError::BadDelay(max) => {
                owned(format!("ERR DELAY must be an integer from 0 to redislock.max-ttl ({max} ms): how long a lock stays held past its holder's disconnect"))
            }
            ArgError::BadLimit => Cow::Borrowed(c"ERR LIMIT must be an integer from 1 to 100000"),
            ArgError::OwnerTooLong(max) => owned(format!("ERR owner is longer than redislock.max-owner-len ({max} bytes)")),
            ArgError::TtlAboveMax(max) => owned(format!("ERR ttl exceeds redislock.max-ttl ({max} ms)")),
            ArgError::UnknownOption(name) => owned(format!("ERR unknown option '{}'", printable(name))),
            ArgError::MissingValue(option) => owned(format!("ERR {option} needs {}", value_name(option))),
            ArgError::Repeated(option) => owned(format!("ERR {option} given more than once")),
            ArgError::BadNumkeys => Cow::Borrowed(c"ERR numkeys must be a positive integer, at most the number of keys given"),
            ArgError::TooManyKeys(max) => owned(format!("ERR numkeys exceeds redislock.max-set-keys ({max} keys)")),
            ArgError::KeyTwice(key) => owned(format!("ERR key '{}' is named twice", printable(key))),
            ArgError::PermitsWithoutLimit => Cow::Borrowed(c"ERR syntax error: PERMITS needs SHARED LIMIT"),
            ArgError::BadPermits => Cow::Borrowed(c"ERR PERMITS must be between 1 and LIMIT"),
            ArgError::ValueTooLong(max) => owned(format!("ERR value is longer than redislock.max-owner-len ({max} bytes)")),
            ArgError::ValueInSet => Cow::Borrowed(c"ERR LOCK.MACQUIRE takes no VALUE: a value belongs to one lock (LOCK.ACQUIRE)"),
            ArgError::LimitInSet => {
                Cow::Borrowed(c"ERR LOCK.MACQUIRE takes no LIMIT: each key of a set is a lock, exclusive or SHARED")
            }
            ArgError::SemaphoreOutsideSet => Cow::Borrowed(c"ERR SEMAPHORE belongs to LOCK.MACQUIRE (one key's semaphore: SHARED LIMIT n)"),
            ArgError::SemaphoreAlone => Cow::Borrowed(c"ERR SEMAPHORE needs two keys at least: the set's locks, then the semaphore"),
            ArgError::BadSemaphoreLimit => Cow::Borrowed(c"ERR SEMAPHORE must be an integer from 1 to 100000"),
            ArgError::SemaphoreWithShared => Cow::Borrowed(c"ERR SEMAPHORE takes no SHARED: the set's locks are exclusive"),
            ArgError::LargestWithoutSemaphore => Cow::Borrowed(c"ERR syntax error: LARGEST needs SEMAPHORE (LOCK.MACQUIRE)"),
            ArgError::BadLargest => Cow::Borrowed(c"ERR LARGEST must be an integer from the SEMAPHORE limit to 100000"),
            ArgError::SharedCountOutsideSet => Cow::Borrowed(c"ERR SHARED n belongs to LOCK.MACQUIRE (one key: SHARED)"),
            ArgError::BadSharedCount => Cow::Borrowed(
                c"ERR SHARED n must be from 1 to the number of lock keys less one: at least one key is held exclusively",
            ),
        }
    }
}

fn value_name(option: &str) -> &'static str {
    match option {
        "FENCE" => "a token",
        "WAIT" => "a timeout",
        "LIMIT" => "a number of holders",
        "DELAY" => "milliseconds",
        "PERMITS" => "a number of permits",
        "VALUE" => "a text",
        "SEMAPHORE" => "a limit",
        "LARGEST" => "a limit",
        _ => "a value",
    }
}

fn owned(s: String) -> Cow<'static, CStr> {
    // The texts built above contain no NUL (`printable` maps it away).
    match CString::new(s) {
        Ok(c) => Cow::Owned(c),
        Err(_) => Cow::Borrowed(c"ERR invalid arguments"),
    }
}

/// A short, protocol-safe rendering of user bytes for an error message:
/// an error reply must not contain CR, LF or NUL.
fn printable(bytes: &[u8]) -> String {
    const LIMIT: usize = 64;
    let mut s: String = bytes.iter().take(LIMIT).map(|&b| if (0x20..0x7f).contains(&b) { b as char } else { '?' }).collect();
    if bytes.len() > LIMIT {
        s.push_str("...");
    }
    s
}

/// Why an argument is not a 64-bit integer.
#[derive(Debug, PartialEq, Eq)]
pub enum IntError {
    /// Not an integer at all.
    Invalid,
    /// Digits only, beyond 2^63-1: "too large" says more than "not an
    /// integer".
    TooLarge,
    /// Digits only, below -2^63.
    TooSmall,
}

/// Parses a Redis integer strictly: an optional '-', then "0" or digits
/// without a leading zero; no spaces, no '+'. Beyond 64 bits is told apart
/// from what is not a number.
pub fn parse_int(bytes: &[u8]) -> Result<i64, IntError> {
    let (negative, digits) = match bytes.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, bytes),
    };
    match digits {
        [] => return Err(IntError::Invalid),
        [b'0'] => return if negative { Err(IntError::Invalid) } else { Ok(0) },
        [b'0', ..] => return Err(IntError::Invalid),
        _ => {}
    }
    if !digits.iter().all(u8::is_ascii_digit) {
        return Err(IntError::Invalid);
    }
    let overflow = || if negative { IntError::TooSmall } else { IntError::TooLarge };
    let mut n: i64 = 0;
    for &b in digits {
        let d = i64::from(b.wrapping_sub(b'0'));
        n = n.checked_mul(10).ok_or_else(overflow)?;
        n = if negative { n.checked_sub(d) } else { n.checked_add(d) }.ok_or_else(overflow)?;
    }
    Ok(n)
}

/// `parse_int` for callers that only need a valid number.
pub fn parse_i64(bytes: &[u8]) -> Option<i64> {
    parse_int(bytes).ok()
}

fn parse_ttl(bytes: &[u8], max_ttl: i64) -> Result<i64, ArgError> {
    match parse_int(bytes) {
        Ok(ttl) if ttl > 0 && ttl <= max_ttl => Ok(ttl),
        // Beyond 64 bits is above max-ttl too: one error for both.
        Ok(ttl) if ttl > max_ttl => Err(ArgError::TtlAboveMax(max_ttl)),
        Err(IntError::TooLarge) => Err(ArgError::TtlAboveMax(max_ttl)),
        _ => Err(ArgError::BadTtl),
    }
}

fn parse_token(bytes: &[u8]) -> Result<Token, ArgError> {
    match parse_int(bytes) {
        Ok(t) if t >= 0 => Ok(t),
        Err(IntError::TooLarge) => Err(ArgError::TokenTooLarge),
        _ => Err(ArgError::BadToken),
    }
}

fn parse_timeout(bytes: &[u8]) -> Result<i64, ArgError> {
    match parse_int(bytes) {
        Ok(t) if t >= 0 => Ok(t),
        Err(IntError::TooLarge) => Err(ArgError::TimeoutTooLarge),
        _ => Err(ArgError::BadTimeout),
    }
}

fn parse_owner(bytes: &[u8]) -> Result<&[u8], ArgError> {
    if bytes.is_empty() {
        Err(ArgError::EmptyOwner)
    } else {
        Ok(bytes)
    }
}

type ValueParser = fn(&[u8]) -> Result<i64, ArgError>;

/// `LOCK.ACQUIRE key owner ttl-ms [SHARED [LIMIT n [PERMITS k]]] [FENCE min-token] [WAIT timeout-ms] [SESSION [DELAY ms]] [VALUE text]`
#[derive(Debug)]
pub struct Acquire<'a, A> {
    pub key: &'a A,
    /// The owner argument itself, shared with replication.
    pub owner: &'a A,
    /// Mode, limit, lease and FENCE floor: what is asked, as the core and
    /// the line take it.
    pub request: Request,
    /// How long to wait for a held lock, in ms (0: no limit); `None`
    /// answers at once.
    pub wait: Option<i64>,
    /// `VALUE text`: stored with the hold (exclusive or shared: each
    /// holder its own), replacing the holder's earlier value; `None` keeps
    /// what a re-grant had.
    pub value: Option<&'a A>,
}

/// Checks a value against `max_len` (`redislock.max-owner-len`, which
/// bounds every text a grant stores).
fn check_value(value: &[u8], max_len: i64) -> Result<(), ArgError> {
    if i64::try_from(value.len()).is_ok_and(|len| len <= max_len) {
        Ok(())
    } else {
        Err(ArgError::ValueTooLong(max_len))
    }
}

/// `max_owner_len` bounds only the owner a grant stores: RELEASE, EXTEND
/// and replay take any length, so a lock stored before a lower limit still
/// works.
pub fn parse_acquire<A: ArgBytes>(args: &[A], max_ttl: i64, max_owner_len: i64) -> Result<Acquire<'_, A>, ArgError> {
    match parse_one(args, max_ttl, max_owner_len)? {
        (_, SetOptions { semaphore: Some(_), .. }) => Err(ArgError::SemaphoreOutsideSet),
        (_, SetOptions { largest: Some(_), .. }) => Err(ArgError::LargestWithoutSemaphore),
        (_, SetOptions { shared: Some(_), .. }) => Err(ArgError::SharedCountOutsideSet),
        (one, _) => Ok(one),
    }
}

/// LOCK.MACQUIRE's own options, as given: `SEMAPHORE n`, `LARGEST m`,
/// `SHARED n`.
#[derive(Default)]
struct SetOptions {
    semaphore: Option<i64>,
    largest: Option<i64>,
    shared: Option<i64>,
}

/// `parse_acquire`, with LOCK.MACQUIRE's options (`SetOptions`) taken too.
fn parse_one<A: ArgBytes>(args: &[A], max_ttl: i64, max_owner_len: i64) -> Result<(Acquire<'_, A>, SetOptions), ArgError> {
    let [_, key, owner_arg, ttl, options @ ..] = args else {
        return Err(ArgError::Arity(c"ERR wrong number of arguments for 'lock.acquire' command"));
    };
    let owner = parse_owner(owner_arg.bytes())?;
    if !i64::try_from(owner.len()).is_ok_and(|len| len <= max_owner_len) {
        return Err(ArgError::OwnerTooLong(max_owner_len));
    }
    let ttl_ms = parse_ttl(ttl.bytes(), max_ttl)?;
    let (mut fence, mut wait, mut limit, mut delay, mut permits) = (None, None, None, None, None);
    let mut set = SetOptions::default();
    let (mut shared, mut session) = (false, false);
    let mut value = None;
    let mut rest = options;
    while let [name, tail @ ..] = rest {
        let name = name.bytes();
        if name.eq_ignore_ascii_case(b"VALUE") {
            let [text, tail @ ..] = tail else {
                return Err(ArgError::MissingValue("VALUE"));
            };
            if value.is_some() {
                return Err(ArgError::Repeated("VALUE"));
            }
            check_value(text.bytes(), max_owner_len)?;
            value = Some(text);
            rest = tail;
            continue;
        }
        // `SHARED n` (a set's last n keys): SHARED followed by a number,
        // which no option name is.
        if let (true, [count, tail @ ..]) = (name.eq_ignore_ascii_case(b"SHARED"), tail) {
            let count = match parse_int(count.bytes()) {
                Ok(count) => Some(count),
                Err(IntError::Invalid) => None,
                // Digits beyond any count: no option either.
                Err(_) => Some(-1),
            };
            if let Some(count) = count {
                if shared || set.shared.is_some() {
                    return Err(ArgError::Repeated("SHARED"));
                }
                set.shared = Some(count);
                rest = tail;
                continue;
            }
        }
        let flag = if name.eq_ignore_ascii_case(b"SHARED") {
            if set.shared.is_some() {
                return Err(ArgError::Repeated("SHARED"));
            }
            Some(("SHARED", &mut shared))
        } else if name.eq_ignore_ascii_case(b"SESSION") {
            Some(("SESSION", &mut session))
        } else {
            None
        };
        if let Some((option, set)) = flag {
            if *set {
                return Err(ArgError::Repeated(option));
            }
            *set = true;
            rest = tail;
            continue;
        }
        let (option, slot, parse): (_, &mut Option<i64>, ValueParser) = if name.eq_ignore_ascii_case(b"FENCE") {
            ("FENCE", &mut fence, parse_token)
        } else if name.eq_ignore_ascii_case(b"WAIT") {
            ("WAIT", &mut wait, parse_timeout)
        } else if name.eq_ignore_ascii_case(b"LIMIT") {
            ("LIMIT", &mut limit, parse_limit)
        } else if name.eq_ignore_ascii_case(b"DELAY") {
            ("DELAY", &mut delay, parse_timeout)
        } else if name.eq_ignore_ascii_case(b"PERMITS") {
            ("PERMITS", &mut permits, parse_permits)
        } else if name.eq_ignore_ascii_case(b"SEMAPHORE") {
            ("SEMAPHORE", &mut set.semaphore, parse_limit)
        } else if name.eq_ignore_ascii_case(b"LARGEST") {
            ("LARGEST", &mut set.largest, parse_limit)
        } else {
            return Err(ArgError::UnknownOption(name.to_vec()));
        };
        let [value, tail @ ..] = tail else {
            return Err(ArgError::MissingValue(option));
        };
        if slot.is_some() {
            return Err(ArgError::Repeated(option));
        }
        *slot = Some(match (option, parse(value.bytes())) {
            ("DELAY", Ok(ms)) if ms <= max_ttl => ms,
            ("DELAY", _) => return Err(ArgError::BadDelay(max_ttl)),
            ("SEMAPHORE", Err(_)) => return Err(ArgError::BadSemaphoreLimit),
            ("LARGEST", Err(_)) => return Err(ArgError::BadLargest),
            (_, parsed) => parsed?,
        });
        rest = tail;
    }
    if limit.is_some() && !shared {
        return Err(ArgError::LimitWithoutShared);
    }
    if delay.is_some() && !session {
        return Err(ArgError::DelayWithoutSession);
    }
    let session = session.then(|| delay.unwrap_or(0));
    let limit = limit.and_then(|n| u32::try_from(n).ok());
    let permits = match (permits, limit) {
        (None, _) => 1,
        (Some(_), None) => return Err(ArgError::PermitsWithoutLimit),
        (Some(k), Some(n)) => u32::try_from(k).ok().filter(|k| *k <= n).ok_or(ArgError::BadPermits)?,
    };
    let mode = if shared { Mode::Shared } else { Mode::Exclusive };
    let request = Request { mode, limit, ttl_ms, fence: fence.unwrap_or(0), permits, session };
    Ok((Acquire { key, owner: owner_arg, request, wait, value }, set))
}

fn parse_permits(bytes: &[u8]) -> Result<i64, ArgError> {
    match parse_int(bytes) {
        Ok(k) if k >= 1 && k <= i64::from(MAX_LIMIT) => Ok(k),
        _ => Err(ArgError::BadPermits),
    }
}

fn parse_limit(bytes: &[u8]) -> Result<i64, ArgError> {
    match parse_int(bytes) {
        Ok(n) if n >= 1 && n <= i64::from(MAX_LIMIT) => Ok(n),
        _ => Err(ArgError::BadLimit),
    }
}

/// `LOCK.RELEASE key owner`
#[derive(Debug)]
pub struct Release<'a, A> {
    pub key: &'a A,
    pub owner: &'a [u8],
}

pub fn parse_release<A: ArgBytes>(args: &[A]) -> Result<Release<'_, A>, ArgError> {
    let [_, key, owner] = args else {
        return Err(ArgError::Arity(c"ERR wrong number of arguments for 'lock.release' command"));
    };
    Ok(Release { key, owner: parse_owner(owner.bytes())? })
}

/// `LOCK.EXTEND key owner ttl-ms`
#[derive(Debug)]
pub struct Extend<'a, A> {
    pub key: &'a A,
    pub owner: &'a [u8],
    pub ttl_ms: i64,
}

pub fn parse_extend<A: ArgBytes>(args: &[A], max_ttl: i64) -> Result<Extend<'_, A>, ArgError> {
    let [_, key, owner, ttl] = args else {
        return Err(ArgError::Arity(c"ERR wrong number of arguments for 'lock.extend' command"));
    };
    let owner = parse_owner(owner.bytes())?;
    Ok(Extend { key, owner, ttl_ms: parse_ttl(ttl.bytes(), max_ttl)? })
}

/// `LOCK.PROCLAIM key owner text`
#[derive(Debug)]
pub struct Proclaim<'a, A> {
    pub key: &'a A,
    pub owner: &'a [u8],
    /// The new value (empty: none).
    pub value: &'a [u8],
}

pub fn parse_proclaim<A: ArgBytes>(args: &[A], max_len: i64) -> Result<Proclaim<'_, A>, ArgError> {
    let [_, key, owner, value] = args else {
        return Err(ArgError::Arity(c"ERR wrong number of arguments for 'lock.proclaim' command"));
    };
    let owner = parse_owner(owner.bytes())?;
    check_value(value.bytes(), max_len)?;
    Ok(Proclaim { key, owner, value: value.bytes() })
}

/// `LOCK.INFO key`
pub fn parse_info<A: ArgBytes>(args: &[A]) -> Result<&A, ArgError> {
    let [_, key] = args else {
        return Err(ArgError::Arity(c"ERR wrong number of arguments for 'lock.info' command"));
    };
    Ok(key)
}

mod apply;
mod ask;
mod fence;
mod resize;
mod revoke;
mod sets;
mod views;
pub use apply::{encode_apply, parse_apply, Apply, ApplyShared, APPLY};
pub use ask::parse_ask;
pub use fence::{parse_check, parse_fenced, parse_fenceinfo, parse_guard, runs_script, unguardable, Check, Unguardable};
pub use resize::{parse_resize, RESIZE};
pub use revoke::{parse_revoke, revoke_registers_at};
pub use sets::{numkeys, parse_macquire, parse_mextend, parse_mrelease};
#[cfg(test)]
use views::TOP_DEFAULT_COUNT;
pub use views::{parse_top, parse_waiters};

#[cfg(test)]
mod tests;
