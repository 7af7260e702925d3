//! `LOCK.WAITERS` and `LOCK.TOP`: how much of a line, or of the most
//! contended locks, to list.

use super::{parse_int, ArgBytes, ArgError};

/// `LOCK.WAITERS key [COUNT n]`: the key and how many waiters to list
/// (`None`: all).
pub fn parse_waiters<A: ArgBytes>(args: &[A]) -> Result<(&A, Option<usize>), ArgError> {
    match args {
        [_, key] => Ok((key, None)),
        [_, key, word, n] if word.bytes().eq_ignore_ascii_case(b"COUNT") => match parse_int(n.bytes()) {
            Ok(n) if n >= 0 => Ok((key, Some(usize::try_from(n).unwrap_or(usize::MAX)))),
            _ => Err(ArgError::BadCount),
        },
        [_, _, word, ..] if !word.bytes().eq_ignore_ascii_case(b"COUNT") => Err(ArgError::UnknownOption(word.bytes().to_vec())),
        _ => Err(ArgError::Arity(c"ERR wrong number of arguments for 'lock.waiters' command")),
    }
}

/// `LOCK.TOP [COUNT n]`: how many of the most contended locks to list
/// (`TOP_DEFAULT_COUNT` without COUNT).
pub fn parse_top<A: ArgBytes>(args: &[A]) -> Result<usize, ArgError> {
    match args {
        [_] => Ok(TOP_DEFAULT_COUNT),
        [_, word, n] if word.bytes().eq_ignore_ascii_case(b"COUNT") => match parse_int(n.bytes()) {
            Ok(n) if n >= 0 => Ok(usize::try_from(n).unwrap_or(usize::MAX)),
            _ => Err(ArgError::BadCount),
        },
        [_, word, ..] if !word.bytes().eq_ignore_ascii_case(b"COUNT") => Err(ArgError::UnknownOption(word.bytes().to_vec())),
        _ => Err(ArgError::Arity(c"ERR wrong number of arguments for 'lock.top' command")),
    }
}

/// What LOCK.TOP lists without COUNT.
pub const TOP_DEFAULT_COUNT: usize = 10;
