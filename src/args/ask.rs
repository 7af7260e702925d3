//! `LOCK.ASK key [MESSAGE text]`: a cooperative request to a lock's
//! holders to let it go.

use super::{check_value, ArgBytes, ArgError};

/// `LOCK.ASK key [MESSAGE text]`
#[derive(Debug)]
pub struct AskRelease<'a, A> {
    pub key: &'a A,
    /// Why the holders are asked (empty: no reason given), at most as long
    /// as a value.
    pub message: &'a [u8],
}

pub fn parse_ask<A: ArgBytes>(args: &[A], max_len: i64) -> Result<AskRelease<'_, A>, ArgError> {
    match args {
        [_, key] => Ok(AskRelease { key, message: b"" }),
        [_, key, word, message] if word.bytes().eq_ignore_ascii_case(b"MESSAGE") => {
            check_value(message.bytes(), max_len)?;
            Ok(AskRelease { key, message: message.bytes() })
        }
        [_, _, word, ..] if !word.bytes().eq_ignore_ascii_case(b"MESSAGE") => Err(ArgError::Syntax(super::owned(format!(
            "ERR syntax error: unknown option '{}' (LOCK.ASK key [MESSAGE text])",
            super::printable(word.bytes())
        )))),
        _ => Err(ArgError::Arity(c"ERR wrong number of arguments for 'lock.ask' command")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Vec<u8>, String> {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        parse_ask(&args, 8).map(|a| a.message.to_vec()).map_err(|e| e.message().to_string_lossy().into_owned())
    }

    #[test]
    fn a_message_is_optional_and_bounded() {
        assert_eq!(parse(&["LOCK.ASK", "k"]), Ok(vec![]));
        assert_eq!(parse(&["LOCK.ASK", "k", "message", "deploy"]), Ok(b"deploy".to_vec()));
        assert!(parse(&["LOCK.ASK", "k", "MESSAGE", "far too long"]).is_err());
        assert!(parse(&["LOCK.ASK"]).unwrap_err().contains("wrong number of arguments"));
        assert!(parse(&["LOCK.ASK", "k", "MESSAGE"]).unwrap_err().contains("wrong number of arguments"));
        assert!(parse(&["LOCK.ASK", "k", "MESSAGE", "a", "b"]).unwrap_err().contains("wrong number of arguments"));
        assert!(parse(&["LOCK.ASK", "k", "NOW", "a"]).unwrap_err().contains("unknown option 'NOW'"));
    }
}
