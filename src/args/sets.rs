//! The set commands' lines (`LOCK.MACQUIRE`, `LOCK.MRELEASE`,
//! `LOCK.MEXTEND`): Redis's `numkeys key [key ...]` at position 1, then
//! what each command takes after its keys.

use std::ffi::CStr;

use super::{parse_i64, parse_int, parse_one, parse_owner, parse_ttl, ArgBytes, ArgError, IntError};
use crate::core::grant::Mode;
use crate::core::multi::SetRequest;

/// `LOCK.MACQUIRE numkeys key [key ...] owner ttl-ms [SHARED] [FENCE min-token] [WAIT timeout-ms] [SESSION [DELAY ms]] [SEMAPHORE limit]`:
/// several keys, all or nothing, with LOCK.ACQUIRE's options but LIMIT;
/// `SEMAPHORE n` makes the last key one permit of a semaphore of n.
#[derive(Debug)]
pub struct MAcquire<'a, A> {
    /// Each named once (the semaphore last).
    pub keys: &'a [A],
    pub owner: &'a A,
    pub set: SetRequest,
    pub wait: Option<i64>,
}

/// `max_keys` (`redislock.max-set-keys`) bounds every numkeys command.
pub fn parse_macquire<A: ArgBytes>(args: &[A], max_ttl: i64, max_owner_len: i64, max_keys: i64) -> Result<MAcquire<'_, A>, ArgError> {
    let (keys, tail) = split_keys(args, max_keys, c"ERR wrong number of arguments for 'lock.macquire' command", |after| after >= 2)?;
    // What follows the keys is LOCK.ACQUIRE's `owner ttl-ms [options]`,
    // parsed by the same code over the arguments from the one before the
    // last key on: `[_, last key, owner, ttl-ms, options...]`.
    let from = args.len() - tail.len() - 2;
    let (one, options) = parse_one(&args[from..], max_ttl, max_owner_len)?;
    if one.request.limit.is_some() {
        return Err(ArgError::LimitInSet);
    }
    if one.value.is_some() {
        return Err(ArgError::ValueInSet);
    }
    let semaphore = match options.semaphore.map(u32::try_from) {
        None => None,
        Some(Ok(limit)) => Some(limit),
        Some(Err(_)) => return Err(ArgError::BadSemaphoreLimit),
    };
    if semaphore.is_some() && keys.len() < 2 {
        return Err(ArgError::SemaphoreAlone);
    }
    if semaphore.is_some() && one.request.mode == Mode::Shared {
        return Err(ArgError::SemaphoreWithShared);
    }
    let largest = match (options.largest, semaphore) {
        (None, _) => None,
        (Some(_), None) => return Err(ArgError::LargestWithoutSemaphore),
        (Some(m), Some(limit)) => Some(u32::try_from(m).ok().filter(|m| *m >= limit).ok_or(ArgError::BadLargest)?),
    };
    let locks = keys.len().saturating_sub(usize::from(semaphore.is_some()));
    let shared = match options.shared {
        None => 0,
        Some(n) => u32::try_from(n).ok().filter(|n| *n >= 1 && (*n as usize) < locks).ok_or(ArgError::BadSharedCount)?,
    };
    let set = SetRequest { request: one.request, semaphore, largest, shared };
    Ok(MAcquire { keys, owner: one.owner, set, wait: one.wait })
}

/// `LOCK.MRELEASE numkeys key [key ...] owner`
#[derive(Debug)]
pub struct MRelease<'a, A> {
    pub keys: &'a [A],
    pub owner: &'a [u8],
}

pub fn parse_mrelease<A: ArgBytes>(args: &[A], max_keys: i64) -> Result<MRelease<'_, A>, ArgError> {
    let (keys, tail) = split_keys(args, max_keys, c"ERR wrong number of arguments for 'lock.mrelease' command", |after| after == 1)?;
    let [owner] = tail else {
        return Err(ArgError::Arity(c"ERR wrong number of arguments for 'lock.mrelease' command"));
    };
    Ok(MRelease { keys, owner: parse_owner(owner.bytes())? })
}

/// `LOCK.MEXTEND numkeys key [key ...] owner ttl-ms`
#[derive(Debug)]
pub struct MExtend<'a, A> {
    pub keys: &'a [A],
    pub owner: &'a [u8],
    pub ttl_ms: i64,
}

pub fn parse_mextend<A: ArgBytes>(args: &[A], max_ttl: i64, max_keys: i64) -> Result<MExtend<'_, A>, ArgError> {
    let (keys, tail) = split_keys(args, max_keys, c"ERR wrong number of arguments for 'lock.mextend' command", |after| after == 2)?;
    let [owner, ttl] = tail else {
        return Err(ArgError::Arity(c"ERR wrong number of arguments for 'lock.mextend' command"));
    };
    Ok(MExtend { keys, owner: parse_owner(owner.bytes())?, ttl_ms: parse_ttl(ttl.bytes(), max_ttl)? })
}

/// How many keys a numkeys command names from position 2 on, if its
/// `numkeys` is valid and within `max_keys`: where Redis finds the keys
/// (see `split_keys` for the command's own parsing, which then answers
/// the error).
pub fn numkeys<A: ArgBytes>(args: &[A], max_keys: i64) -> Option<usize> {
    let [_, numkeys, rest @ ..] = args else { return None };
    let n = parse_i64(numkeys.bytes()).filter(|&n| n <= max_keys)?;
    let n = usize::try_from(n).ok()?;
    (1..=rest.len()).contains(&n).then_some(n)
}

/// Splits `_ numkeys key [key ...] rest...` into the keys, each named
/// once, and the rest, whose length `after_ok` accepts. A numkeys above
/// `max_keys` is refused before anything else is looked at.
fn split_keys<'a, A: ArgBytes>(
    args: &'a [A],
    max_keys: i64,
    arity: &'static CStr,
    after_ok: impl Fn(usize) -> bool,
) -> Result<(&'a [A], &'a [A]), ArgError> {
    let [_, numkeys, rest @ ..] = args else {
        return Err(ArgError::Arity(arity));
    };
    let n = match parse_int(numkeys.bytes()) {
        Ok(n) if n > max_keys => return Err(ArgError::TooManyKeys(max_keys)),
        Ok(n) if n >= 1 => usize::try_from(n).map_err(|_| ArgError::BadNumkeys)?,
        Err(IntError::TooLarge) => return Err(ArgError::TooManyKeys(max_keys)),
        _ => return Err(ArgError::BadNumkeys),
    };
    if n > rest.len() {
        return Err(ArgError::BadNumkeys);
    }
    let (keys, tail) = rest.split_at(n);
    if !after_ok(tail.len()) {
        return Err(ArgError::Arity(arity));
    }
    let mut seen = std::collections::HashSet::with_capacity(keys.len());
    for key in keys {
        if !seen.insert(key.bytes()) {
            return Err(ArgError::KeyTwice(key.bytes().to_vec()));
        }
    }
    Ok((keys, tail))
}
