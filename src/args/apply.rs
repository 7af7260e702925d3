//! `LOCK.APPLY`, the replicated form of a grant: what the master or this
//! server's AOF sets exactly, parsed as strictly as a client's command.

use std::ffi::CStr;

use super::{parse_i64, parse_int, parse_limit, parse_owner, parse_permits, parse_token, ArgBytes, ArgError};
use crate::api::{Piece, MAX_PIECES};
use crate::core::token::Token;

/// The command, and its keywords: the parser below and the encoder
/// (`encode_apply`) both read them from here.
pub const APPLY: &CStr = c"LOCK.APPLY";
const SHARED: &CStr = c"SHARED";
const PERMITS: &CStr = c"PERMITS";
const VALUE: &CStr = c"VALUE";

/// LOCK.APPLY's arguments after the key, as `encode_apply` lays them out.
pub struct Encoded<'a> {
    pieces: [Piece<'a>; MAX_PIECES],
    len: usize,
}

impl<'a> Encoded<'a> {
    pub fn pieces(&self) -> &[Piece<'a>] {
        self.pieces.get(..self.len).unwrap_or_default()
    }

    fn push(&mut self, piece: Piece<'a>) {
        if let Some(slot) = self.pieces.get_mut(self.len) {
            *slot = piece;
            self.len += 1;
        }
    }
}

/// The one encoder of LOCK.APPLY's layout, the mirror of `parse_apply`:
/// `owner token deadline`, then `SHARED limit key-deadline [PERMITS k]
/// [VALUE value]` for one shared holder (its permits only above 1, its
/// value only when it has one, so a stream without weighted or valued
/// holds reads as before), or `VALUE value` for an exclusive lock with a
/// value (empty: none, and no option). Replication
/// (`replication::propagate`) and the AOF rewrite (`edge::datatype`) both
/// write what this lays out.
pub fn encode_apply<'a>(owner: Piece<'a>, token: Token, deadline_ms: i64, shared: Option<ApplyShared>, value: &'a [u8]) -> Encoded<'a> {
    let mut out = Encoded { pieces: [Piece::Int(0); MAX_PIECES], len: 0 };
    out.push(owner);
    out.push(Piece::Int(token));
    out.push(Piece::Int(deadline_ms));
    match shared {
        Some(terms) => {
            out.push(Piece::Word(SHARED));
            out.push(Piece::Int(i64::from(terms.limit)));
            out.push(Piece::Int(terms.key_deadline_ms));
            if terms.permits > 1 {
                out.push(Piece::Word(PERMITS));
                out.push(Piece::Int(i64::from(terms.permits)));
            }
            if !value.is_empty() {
                out.push(Piece::Word(VALUE));
                out.push(Piece::Bytes(value));
            }
        }
        None if !value.is_empty() => {
            out.push(Piece::Word(VALUE));
            out.push(Piece::Bytes(value));
        }
        None => {}
    }
    out
}

/// `LOCK.APPLY key owner token deadline-unix-ms [SHARED limit key-deadline [PERMITS k] [VALUE text] | VALUE text]`
/// (replicated form). With `SHARED`, one shared holder of a read-write
/// lock (`limit` 0) or a semaphore, and the key's own deadline; 0 is no
/// end for either; `PERMITS k`, a semaphore holder's permits above 1.
/// With `VALUE`, the holder's value, exclusive or shared (any length: what
/// the master stored); without, it has none.
#[derive(Debug)]
pub struct Apply<'a, A> {
    pub key: &'a A,
    pub owner: &'a [u8],
    pub token: Token,
    /// Absolute Unix time in ms; 0 for no expiry.
    pub deadline_ms: i64,
    pub shared: Option<ApplyShared>,
    /// The holder's value (exclusive or shared); empty: none.
    pub value: &'a [u8],
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApplyShared {
    /// 0: a read-write lock held shared.
    pub limit: u32,
    pub key_deadline_ms: i64,
    /// 1 without PERMITS.
    pub permits: u32,
}

pub fn parse_apply<A: ArgBytes>(args: &[A]) -> Result<Apply<'_, A>, ArgError> {
    let mut value: &[u8] = b"";
    let (key, owner, token, deadline, shared) = match args {
        [_, key, owner, token, deadline] => (key, owner, token, deadline, None),
        [_, key, owner, token, deadline, word, text] if word.bytes().eq_ignore_ascii_case(VALUE.to_bytes()) => {
            value = text.bytes();
            (key, owner, token, deadline, None)
        }
        [_, key, owner, token, deadline, word, limit, key_deadline, weighted @ ..]
            if word.bytes().eq_ignore_ascii_case(SHARED.to_bytes()) =>
        {
            let limit = match parse_int(limit.bytes()) {
                Ok(0) => 0,
                _ => u32::try_from(parse_limit(limit.bytes())?).map_err(|_| ArgError::BadLimit)?,
            };
            let (weighted, valued) = match weighted {
                [rest @ .., word, text] if word.bytes().eq_ignore_ascii_case(VALUE.to_bytes()) => (rest, Some(text)),
                rest => (rest, None),
            };
            if let Some(text) = valued {
                value = text.bytes();
            }
            let permits = match weighted {
                [] => 1,
                // A semaphore's holder may take more than its limit after
                // LOCK.RESIZE shrank it (the resize travelled first): any
                // k a LIMIT allows; a lock without LIMIT none.
                [word, k] if word.bytes().eq_ignore_ascii_case(PERMITS.to_bytes()) => {
                    u32::try_from(parse_permits(k.bytes())?).ok().filter(|_| limit > 0).ok_or(ArgError::BadPermits)?
                }
                _ => return Err(ArgError::Arity(c"ERR wrong number of arguments for 'lock.apply' command")),
            };
            (key, owner, token, deadline, Some((limit, key_deadline, permits)))
        }
        _ => return Err(ArgError::Arity(c"ERR wrong number of arguments for 'lock.apply' command")),
    };
    let owner = parse_owner(owner.bytes())?;
    let token = parse_token(token.bytes())?;
    let deadline_ms = parse_deadline(deadline.bytes())?;
    let shared = match shared {
        Some((limit, key_deadline, permits)) => {
            Some(ApplyShared { limit, key_deadline_ms: parse_deadline(key_deadline.bytes())?, permits })
        }
        None => None,
    };
    Ok(Apply { key, owner, token, deadline_ms, shared, value })
}

fn parse_deadline(bytes: &[u8]) -> Result<i64, ArgError> {
    match parse_i64(bytes) {
        Some(d) if d >= 0 => Ok(d),
        _ => Err(ArgError::BadDeadline),
    }
}
