//! `LOCK.REVOKE key [OWNER owner] [FENCE register [register ...]]`: FENCE
//! comes last, and every argument after it is a register.

use std::ffi::CStr;

use super::{parse_owner, ArgBytes, ArgError};

/// `LOCK.REVOKE key [OWNER owner] [FENCE register [register ...]]`
#[derive(Debug)]
pub struct Revoke<'a, A> {
    pub key: &'a A,
    /// The one holder to end; `None`: every holder.
    pub owner: Option<&'a [u8]>,
    /// The registers to raise to the revocation's token.
    pub registers: &'a [A],
}

/// Where LOCK.REVOKE's registers begin in its arguments (the command name
/// at 0), for the keys Redis asks the command for; `None` when the
/// arguments do not parse, or name no register.
pub fn revoke_registers_at<A: ArgBytes>(args: &[A]) -> Option<usize> {
    let parsed = parse_revoke(args).ok()?;
    (!parsed.registers.is_empty()).then(|| args.len() - parsed.registers.len())
}

pub fn parse_revoke<A: ArgBytes>(args: &[A]) -> Result<Revoke<'_, A>, ArgError> {
    let [_, key, rest @ ..] = args else {
        return Err(ArgError::Arity(c"ERR wrong number of arguments for 'lock.revoke' command"));
    };
    let mut owner = None;
    let mut rest = rest;
    while let [word, tail @ ..] = rest {
        let word = word.bytes();
        if word.eq_ignore_ascii_case(b"OWNER") {
            let [value, tail @ ..] = tail else { return Err(syntax(c"ERR syntax error: OWNER needs an owner")) };
            if owner.is_some() {
                return Err(syntax(c"ERR syntax error: OWNER given more than once"));
            }
            owner = Some(parse_owner(value.bytes())?);
            rest = tail;
        } else if word.eq_ignore_ascii_case(b"FENCE") {
            if tail.is_empty() {
                return Err(syntax(c"ERR syntax error: FENCE needs at least one register"));
            }
            return Ok(Revoke { key, owner, registers: tail });
        } else {
            return Err(ArgError::Syntax(super::owned(format!(
                "ERR syntax error: unknown option '{}' (LOCK.REVOKE key [OWNER owner] [FENCE register [register ...]])",
                super::printable(word)
            ))));
        }
    }
    Ok(Revoke { key, owner, registers: &[] })
}

fn syntax(msg: &'static CStr) -> ArgError {
    ArgError::Syntax(std::borrow::Cow::Borrowed(msg))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse<'a>(args: &'a [&'a [u8]]) -> Result<Revoke<'a, &'a [u8]>, ArgError> {
        parse_revoke(args)
    }

    fn message(args: &[&[u8]]) -> String {
        match parse_revoke(args) {
            Ok(_) => String::from("parsed"),
            Err(e) => e.message().to_string_lossy().into_owned(),
        }
    }

    #[test]
    fn key_alone_revokes_every_holder() {
        let r = parse(&[b"LOCK.REVOKE", b"k"]).expect("parses");
        assert_eq!(r.key, &&b"k"[..]);
        assert_eq!(r.owner, None);
        assert!(r.registers.is_empty());
    }

    #[test]
    fn owner_and_registers() {
        let args: [&[u8]; 7] = [b"LOCK.REVOKE", b"k", b"owner", b"o", b"fence", b"r1", b"OWNER"];
        let r = parse(&args).expect("parses");
        assert_eq!(r.owner, Some(&b"o"[..]));
        // Everything after FENCE is a register, OWNER included.
        assert_eq!(r.registers, &[&b"r1"[..], &b"OWNER"[..]]);
        assert_eq!(revoke_registers_at(&args), Some(5));
        assert_eq!(revoke_registers_at(&[&b"LOCK.REVOKE"[..], b"k"]), None);
    }

    #[test]
    fn each_malformed_line_gets_its_error() {
        assert!(message(&[b"LOCK.REVOKE"]).contains("wrong number of arguments"));
        assert_eq!(message(&[b"LOCK.REVOKE", b"k", b"OWNER"]), "ERR syntax error: OWNER needs an owner");
        assert_eq!(message(&[b"LOCK.REVOKE", b"k", b"FENCE"]), "ERR syntax error: FENCE needs at least one register");
        assert_eq!(message(&[b"LOCK.REVOKE", b"k", b"OWNER", b"a", b"OWNER", b"b"]), "ERR syntax error: OWNER given more than once");
        assert!(message(&[b"LOCK.REVOKE", b"k", b"BOGUS"]).starts_with("ERR syntax error: unknown option 'BOGUS'"));
        assert_eq!(message(&[b"LOCK.REVOKE", b"k", b"OWNER", b""]), "ERR owner must not be empty");
        assert!(message(&[b"LOCK.REVOKE", b"k", b"\r\n"]).starts_with("ERR syntax error: unknown option '??'"));
    }
}
