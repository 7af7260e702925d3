//! The Redis protocol as `redlock serve` speaks it: requests (arrays of
//! bulk strings, and inline commands as redis-server accepts them), parsed
//! within bounds, and replies in RESP2 or RESP3.

/// The longest bulk string a request may carry: lock names and owners are
/// short, and a client sending more is not speaking to a lock endpoint.
pub const MAX_BULK: usize = 1024 * 1024;

/// The most arguments one request may carry (LOCK.* take a handful).
pub const MAX_ARGS: usize = 1024;

/// The longest inline command, as redis-server's 64 KB.
pub const MAX_INLINE: usize = 64 * 1024;

/// The most bytes of requests buffered and not yet complete: the largest
/// request allowed, with room for its framing.
pub const MAX_PENDING: usize = MAX_BULK + MAX_INLINE;

/// One request: its arguments, the command name first.
pub type Request = Vec<Vec<u8>>;

/// The first complete request at the start of `buf` and the bytes it
/// took; `Ok(None)` while it is incomplete; `Err` (the text of a
/// `Protocol error`) when `buf` is no request, or one over the bounds.
/// An empty inline line is skipped as redis-server skips it (an empty
/// request, which the caller ignores).
pub fn parse(buf: &[u8]) -> Result<Option<(Request, usize)>, String> {
    match buf.first() {
        None => Ok(None),
        Some(b'*') => parse_array(buf),
        Some(_) => parse_inline(buf),
    }
}

fn parse_array(buf: &[u8]) -> Result<Option<(Request, usize)>, String> {
    let Some((count, mut at)) = line_number(buf, 1, "multibulk length")? else { return Ok(None) };
    if count > MAX_ARGS as i64 {
        return Err(format!("invalid multibulk length (at most {MAX_ARGS} arguments)"));
    }
    // `*0` and `*-1` are empty requests, as redis-server has them.
    let count = usize::try_from(count).unwrap_or(0);
    let mut args = Vec::with_capacity(count);
    for _ in 0..count {
        match buf.get(at) {
            None => return Ok(None),
            Some(b'$') => {}
            Some(&other) => return Err(format!("expected '$', got '{}'", char::from(other).escape_default())),
        }
        let Some((len, start)) = line_number(buf, at + 1, "bulk length")? else { return Ok(None) };
        let len = usize::try_from(len).map_err(|_| "invalid bulk length".to_string())?;
        if len > MAX_BULK {
            return Err(format!("invalid bulk length (at most {MAX_BULK} bytes)"));
        }
        let end = start.saturating_add(len);
        let Some(after) = buf.get(end..end.saturating_add(2)) else { return Ok(None) };
        if after != b"\r\n" {
            return Err("bulk string not followed by CRLF".to_string());
        }
        args.push(buf.get(start..end).unwrap_or_default().to_vec());
        at = end + 2;
    }
    Ok(Some((args, at)))
}

/// The number on the line starting at `from`, and where the next line
/// starts; `Ok(None)` while the line is incomplete.
fn line_number(buf: &[u8], from: usize, what: &str) -> Result<Option<(i64, usize)>, String> {
    let rest = buf.get(from..).unwrap_or_default();
    let Some(end) = rest.iter().position(|&b| b == b'\n') else {
        return if rest.len() > 32 { Err(format!("too big {what}")) } else { Ok(None) };
    };
    let line = rest.get(..end).unwrap_or_default();
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let number = std::str::from_utf8(line).ok().and_then(|s| s.parse::<i64>().ok()).ok_or_else(|| format!("invalid {what}"))?;
    Ok(Some((number, from + end + 1)))
}

fn parse_inline(buf: &[u8]) -> Result<Option<(Request, usize)>, String> {
    let Some(end) = buf.iter().position(|&b| b == b'\n') else {
        return if buf.len() > MAX_INLINE { Err("too big inline request".to_string()) } else { Ok(None) };
    };
    if end > MAX_INLINE {
        return Err("too big inline request".to_string());
    }
    let line = buf.get(..end).unwrap_or_default();
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    Ok(Some((split_inline(line)?, end + 1)))
}

/// An inline line's arguments: separated by blanks, each plain or quoted
/// ("..." with backslash escapes, or '...'), as redis-server splits them.
fn split_inline(line: &[u8]) -> Result<Request, String> {
    let unbalanced = || "unbalanced quotes in request".to_string();
    let mut args = Vec::new();
    let mut bytes = line.iter().copied().peekable();
    loop {
        while bytes.next_if(u8::is_ascii_whitespace).is_some() {}
        let Some(first) = bytes.next() else { return Ok(args) };
        let mut arg = Vec::new();
        match first {
            b'"' => loop {
                match bytes.next().ok_or_else(unbalanced)? {
                    b'"' => break,
                    b'\\' => arg.push(match bytes.next().ok_or_else(unbalanced)? {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'a' => 7,
                        b'b' => 8,
                        other => other,
                    }),
                    other => arg.push(other),
                }
            },
            b'\'' => loop {
                match bytes.next().ok_or_else(unbalanced)? {
                    b'\'' => break,
                    other => arg.push(other),
                }
            },
            other => {
                arg.push(other);
                while let Some(b) = bytes.next_if(|b| !b.is_ascii_whitespace()) {
                    arg.push(b);
                }
            }
        }
        // A closing quote must end the argument, as redis-server wants.
        if matches!(first, b'"' | b'\'') && bytes.peek().is_some_and(|b| !b.is_ascii_whitespace()) {
            return Err(unbalanced());
        }
        if args.len() >= MAX_ARGS {
            return Err(format!("too many arguments (at most {MAX_ARGS})"));
        }
        args.push(arg);
    }
}

/// A reply, written in the connection's protocol.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    Status(String),
    Error(String),
    Int(i64),
    Bulk(Vec<u8>),
    Nil,
    Array(Vec<Reply>),
    /// A map in RESP3; a flat key/value array in RESP2.
    Map(Vec<(Reply, Reply)>),
    /// Out-of-band data (pub/sub): a push in RESP3; an array in RESP2.
    Push(Vec<Reply>),
    /// Several replies, one after another, to one request (`SUBSCRIBE a
    /// b` confirms each channel).
    Several(Vec<Reply>),
}

impl Reply {
    pub fn ok() -> Reply {
        Reply::Status("OK".to_string())
    }

    pub fn bulk(text: impl Into<Vec<u8>>) -> Reply {
        Reply::Bulk(text.into())
    }

    pub fn error(text: impl Into<String>) -> Reply {
        Reply::Error(text.into())
    }

    /// Appends the reply to `out`, in RESP3 when `resp3`.
    pub fn write(&self, resp3: bool, out: &mut Vec<u8>) {
        match self {
            Reply::Status(s) => line(out, b'+', &one_line(s)),
            Reply::Error(s) => line(out, b'-', &one_line(s)),
            Reply::Int(n) => line(out, b':', &n.to_string()),
            Reply::Bulk(b) => {
                line(out, b'$', &b.len().to_string());
                out.extend_from_slice(b);
                out.extend_from_slice(b"\r\n");
            }
            Reply::Nil if resp3 => out.extend_from_slice(b"_\r\n"),
            Reply::Nil => out.extend_from_slice(b"$-1\r\n"),
            Reply::Array(items) => {
                line(out, b'*', &items.len().to_string());
                items.iter().for_each(|i| i.write(resp3, out));
            }
            Reply::Push(items) => {
                line(out, if resp3 { b'>' } else { b'*' }, &items.len().to_string());
                items.iter().for_each(|i| i.write(resp3, out));
            }
            Reply::Several(replies) => replies.iter().for_each(|r| r.write(resp3, out)),
            Reply::Map(pairs) => {
                if resp3 {
                    line(out, b'%', &pairs.len().to_string());
                } else {
                    line(out, b'*', &pairs.len().saturating_mul(2).to_string());
                }
                for (k, v) in pairs {
                    k.write(resp3, out);
                    v.write(resp3, out);
                }
            }
        }
    }
}

fn line(out: &mut Vec<u8>, kind: u8, text: &str) {
    out.push(kind);
    out.extend_from_slice(text.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// A status or error line cannot hold a line break.
fn one_line(text: &str) -> String {
    text.replace(['\r', '\n'], " ")
}

pub fn wrong_arity(command: &str) -> Reply {
    Reply::error(format!("ERR wrong number of arguments for '{command}' command"))
}

/// A client's word in an error: its first 64 bytes, any byte outside
/// printable ASCII as `?` (as the module quotes unknown options).
pub fn printable(word: &[u8]) -> String {
    word.iter().take(64).map(|&b| if (b' '..=b'~').contains(&b) && b != b'\'' { char::from(b) } else { '?' }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Request {
        list.iter().map(|a| a.as_bytes().to_vec()).collect()
    }

    #[test]
    fn arrays_parse_whole_or_wait_for_more() {
        let req = b"*2\r\n$4\r\nPING\r\n$2\r\nhi\r\n*1\r\n$4\r\nPING\r\n";
        assert_eq!(parse(req), Ok(Some((args(&["PING", "hi"]), 22))));
        for cut in 1..22 {
            assert_eq!(parse(&req[..cut]), Ok(None), "cut at {cut}");
        }
    }

    #[test]
    fn bounds_and_garbage_are_protocol_errors() {
        assert!(parse(b"*2000\r\n").is_err());
        assert!(parse(format!("*1\r\n${}\r\n", MAX_BULK + 1).as_bytes()).is_err());
        assert!(parse(b"*1\r\n$-3\r\n").is_err());
        assert!(parse(b"*1\r\n+PING\r\n").is_err());
        assert!(parse(b"*x\r\n").is_err());
        assert!(parse(b"*1\r\n$4\r\nPINGxx").is_err());
        assert!(parse(&vec![b'a'; MAX_INLINE + 1]).is_err());
        assert!(parse(b"*99999999999999999999999999999999999").is_err());
    }

    #[test]
    fn inline_commands_split_like_redis_server() {
        assert_eq!(parse(b"PING\r\n"), Ok(Some((args(&["PING"]), 6))));
        assert_eq!(parse(b"  echo \"a b\\n\" 'c d'\n"), Ok(Some((args(&["echo", "a b\n", "c d"]), 21))));
        assert_eq!(parse(b"\r\n"), Ok(Some((Vec::new(), 2))));
        assert!(parse(b"echo \"ab\n").is_err());
        assert!(parse(b"echo \"ab\"c\n").is_err());
        assert_eq!(parse(b"PIN"), Ok(None));
    }

    #[test]
    fn replies_in_both_protocols() {
        let mut two = Vec::new();
        let mut three = Vec::new();
        let reply = Reply::Map(vec![(Reply::bulk("a"), Reply::Int(1)), (Reply::bulk("b"), Reply::Nil)]);
        reply.write(false, &mut two);
        reply.write(true, &mut three);
        assert_eq!(two, b"*4\r\n$1\r\na\r\n:1\r\n$1\r\nb\r\n$-1\r\n");
        assert_eq!(three, b"%2\r\n$1\r\na\r\n:1\r\n$1\r\nb\r\n_\r\n");
        let (mut two, mut three) = (Vec::new(), Vec::new());
        let pushes = Reply::Several(vec![Reply::Push(vec![Reply::bulk("m"), Reply::Int(1)]), Reply::Int(2)]);
        pushes.write(false, &mut two);
        pushes.write(true, &mut three);
        assert_eq!(two, b"*2\r\n$1\r\nm\r\n:1\r\n:2\r\n");
        assert_eq!(three, b">2\r\n$1\r\nm\r\n:1\r\n:2\r\n");
    }
}
