//! `LOCK.RESIZE key limit`: a semaphore's new limit, bounded as LIMIT is.

use std::ffi::CStr;

use super::{parse_limit, ArgBytes, ArgError};

/// The command's name, as a resize of a rewritten AOF replays it.
pub const RESIZE: &CStr = c"LOCK.RESIZE";

/// `LOCK.RESIZE key limit`
#[derive(Debug)]
pub struct Resize<'a, A> {
    pub key: &'a A,
    /// 1 to `MAX_LIMIT`.
    pub limit: u32,
}

pub fn parse_resize<A: ArgBytes>(args: &[A]) -> Result<Resize<'_, A>, ArgError> {
    match args {
        [_, key, limit] => {
            let limit = parse_limit(limit.bytes())?;
            // `parse_limit` bounded it by MAX_LIMIT.
            let limit = u32::try_from(limit).map_err(|_| ArgError::BadLimit)?;
            Ok(Resize { key, limit })
        }
        [_, _, _, extra, ..] => Err(ArgError::Syntax(super::owned(format!(
            "ERR syntax error: unexpected '{}' (LOCK.RESIZE key limit)",
            super::printable(extra.bytes())
        )))),
        _ => Err(ArgError::Arity(c"ERR wrong number of arguments for 'lock.resize' command")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(args: &[&[u8]]) -> String {
        match parse_resize(args) {
            Ok(r) => format!("limit {}", r.limit),
            Err(e) => e.message().to_string_lossy().into_owned(),
        }
    }

    #[test]
    fn a_key_and_a_limit_from_1_to_100000() {
        let args: [&[u8]; 3] = [b"LOCK.RESIZE", b"k", b"7"];
        let r = parse_resize(&args).expect("parses");
        assert_eq!((r.key, r.limit), (&&b"k"[..], 7));
        assert_eq!(message(&[b"LOCK.RESIZE", b"k", b"100000"]), "limit 100000");
        for bad in [&b"0"[..], b"100001", b"-1", b"x", b"", b"1.5", b"99999999999999999999999"] {
            assert_eq!(message(&[b"LOCK.RESIZE", b"k", bad]), "ERR LIMIT must be an integer from 1 to 100000", "{bad:?}");
        }
        assert_eq!(message(&[b"LOCK.RESIZE", b"k"]), "ERR wrong number of arguments for 'lock.resize' command");
        assert_eq!(message(&[b"LOCK.RESIZE"]), "ERR wrong number of arguments for 'lock.resize' command");
        assert_eq!(message(&[b"LOCK.RESIZE", b"k", b"2", b"PERMITS"]), "ERR syntax error: unexpected 'PERMITS' (LOCK.RESIZE key limit)");
        assert!(message(&[b"LOCK.RESIZE", b"k", b"2", b"\r\n"]).starts_with("ERR syntax error: unexpected '??'"));
    }
}
