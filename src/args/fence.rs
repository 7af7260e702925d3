//! `LOCK.CHECK` and `LOCK.GUARD`: a hold named by key, owner and token,
//! and for the guard the command it runs; `LOCK.FENCED` and
//! `LOCK.FENCEINFO`: a token register, a token and the command.

use super::{parse_owner, parse_token, ArgBytes, ArgError};
use crate::core::token::Token;

/// `LOCK.CHECK key owner token`, and the head of `LOCK.GUARD`.
#[derive(Debug)]
pub struct Check<'a, A> {
    pub key: &'a A,
    pub owner: &'a [u8],
    pub token: Token,
}

/// `LOCK.GUARD key owner token command [arg ...]`
#[derive(Debug)]
pub struct Guard<'a, A> {
    pub hold: Check<'a, A>,
    /// The command to run and its arguments, as given.
    pub command: &'a A,
    pub command_args: &'a [A],
}

pub fn parse_check<A: ArgBytes>(args: &[A]) -> Result<Check<'_, A>, ArgError> {
    let [_, key, owner, token] = args else {
        return Err(ArgError::Arity(c"ERR wrong number of arguments for 'lock.check' command"));
    };
    Ok(Check { key, owner: parse_owner(owner.bytes())?, token: parse_token(token.bytes())? })
}

pub fn parse_guard<A: ArgBytes>(args: &[A]) -> Result<Guard<'_, A>, ArgError> {
    let [_, key, owner, token, command, command_args @ ..] = args else {
        return Err(ArgError::Arity(c"ERR wrong number of arguments for 'lock.guard' command"));
    };
    let hold = Check { key, owner: parse_owner(owner.bytes())?, token: parse_token(token.bytes())? };
    Ok(Guard { hold, command, command_args })
}

/// `LOCK.FENCED register token [command [arg ...]]`
#[derive(Debug)]
pub struct Fenced<'a, A> {
    pub register: &'a A,
    /// At least 0 (`parse_token`); the command refuses 0, which no lock
    /// issues and a register cannot hold.
    pub token: Token,
    /// The command to run and its arguments; `None`: only raise the
    /// register.
    pub command: Option<(&'a A, &'a [A])>,
}

pub fn parse_fenced<A: ArgBytes>(args: &[A]) -> Result<Fenced<'_, A>, ArgError> {
    let [_, register, token, command @ ..] = args else {
        return Err(ArgError::Arity(c"ERR wrong number of arguments for 'lock.fenced' command"));
    };
    Ok(Fenced { register, token: parse_token(token.bytes())?, command: command.split_first() })
}

/// `LOCK.FENCEINFO register`
pub fn parse_fenceinfo<A: ArgBytes>(args: &[A]) -> Result<&A, ArgError> {
    let [_, register] = args else {
        return Err(ArgError::Arity(c"ERR wrong number of arguments for 'lock.fenceinfo' command"));
    };
    Ok(register)
}

/// Why LOCK.GUARD will not run a command, whatever the hold: it would
/// not run atomically under the guard, or could not run there at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unguardable {
    /// MULTI, EXEC, DISCARD, WATCH, UNWATCH: the guard is one command; a
    /// transaction goes around it (`MULTI` ... `LOCK.GUARD` ... `EXEC`).
    Transaction,
    /// A subscription: it changes the connection, not the data.
    Subscription,
    /// A command that blocks the client (BLPOP, WAIT, XREAD ... BLOCK):
    /// it cannot wait under the guard, and would silently not block.
    Blocking,
    /// The module's own LOCK.* commands: a lock is changed by its own
    /// commands, not under another lock's guard.
    LockCommand,
}

/// Whether `command` (with `args`) may run under the guard; names are
/// compared as Redis does, without case. Anything else is left to the
/// server, which runs it as the caller would (ACL, arity, script rules).
pub fn unguardable<A: ArgBytes>(command: &[u8], args: &[A]) -> Option<Unguardable> {
    const TRANSACTION: [&[u8]; 5] = [b"multi", b"exec", b"discard", b"watch", b"unwatch"];
    const SUBSCRIPTION: [&[u8]; 6] = [b"subscribe", b"psubscribe", b"ssubscribe", b"unsubscribe", b"punsubscribe", b"sunsubscribe"];
    const BLOCKING: [&[u8]; 10] =
        [b"blpop", b"brpop", b"brpoplpush", b"blmove", b"blmpop", b"bzpopmin", b"bzpopmax", b"bzmpop", b"wait", b"waitaof"];
    let is = |names: &[&[u8]]| names.iter().any(|n| command.eq_ignore_ascii_case(n));
    if is(&TRANSACTION) {
        Some(Unguardable::Transaction)
    } else if is(&SUBSCRIPTION) {
        Some(Unguardable::Subscription)
    } else if is(&BLOCKING) || (is(&[b"xread", b"xreadgroup"]) && blocks_stream_read(args)) {
        Some(Unguardable::Blocking)
    } else if command.len() > 5 && command.get(..5).is_some_and(|p| p.eq_ignore_ascii_case(b"lock.")) {
        Some(Unguardable::LockCommand)
    } else {
        None
    }
}

/// Whether `command` runs a script (EVAL, EVALSHA, FCALL and their
/// `_RO` forms): the server gives its calls the script rules itself.
pub fn runs_script(command: &[u8]) -> bool {
    const SCRIPT: [&[u8]; 6] = [b"eval", b"evalsha", b"eval_ro", b"evalsha_ro", b"fcall", b"fcall_ro"];
    SCRIPT.iter().any(|n| command.eq_ignore_ascii_case(n))
}

/// XREAD/XREADGROUP with `BLOCK` among its options (before `STREAMS`,
/// after which come key names and IDs).
fn blocks_stream_read<A: ArgBytes>(args: &[A]) -> bool {
    args.iter().map(ArgBytes::bytes).take_while(|a| !a.eq_ignore_ascii_case(b"streams")).any(|a| a.eq_ignore_ascii_case(b"block"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<&[u8]> {
        s.split(' ').map(str::as_bytes).collect()
    }

    #[test]
    fn check_takes_exactly_key_owner_token() {
        let argv = words("LOCK.CHECK k o 7");
        let c = parse_check(&argv).expect("valid");
        assert_eq!((*c.key, c.owner, c.token), (&b"k"[..], &b"o"[..], 7));
        for bad in ["LOCK.CHECK k o", "LOCK.CHECK k o 7 8"] {
            assert_eq!(parse_check(&words(bad)).unwrap_err(), ArgError::Arity(c"ERR wrong number of arguments for 'lock.check' command"));
        }
        assert_eq!(parse_check(&words("LOCK.CHECK k o -1")).unwrap_err(), ArgError::BadToken);
        assert_eq!(parse_check(&words("LOCK.CHECK k o x")).unwrap_err(), ArgError::BadToken);
        assert_eq!(parse_check(&words("LOCK.CHECK k o 9223372036854775808")).unwrap_err(), ArgError::TokenTooLarge);
        let empty_owner: Vec<&[u8]> = vec![b"LOCK.CHECK", b"k", b"", b"1"];
        assert_eq!(parse_check(&empty_owner).unwrap_err(), ArgError::EmptyOwner);
    }

    #[test]
    fn guard_takes_the_command_and_its_arguments_as_given() {
        let argv = words("LOCK.GUARD k o 7 SET data v");
        let g = parse_guard(&argv).expect("valid");
        assert_eq!((*g.hold.key, g.hold.owner, g.hold.token), (&b"k"[..], &b"o"[..], 7));
        assert_eq!(*g.command, &b"SET"[..]);
        assert_eq!(g.command_args, &[&b"data"[..], &b"v"[..]]);
        let bare = words("LOCK.GUARD k o 7 PING");
        assert!(parse_guard(&bare).expect("valid").command_args.is_empty());
        assert_eq!(
            parse_guard(&words("LOCK.GUARD k o 7")).unwrap_err(),
            ArgError::Arity(c"ERR wrong number of arguments for 'lock.guard' command")
        );
        assert_eq!(parse_guard(&words("LOCK.GUARD k o x SET a b")).unwrap_err(), ArgError::BadToken);
    }

    #[test]
    fn fenced_takes_a_register_a_token_and_maybe_a_command() {
        let argv = words("LOCK.FENCED reg 7 SET data v");
        let f = parse_fenced(&argv).expect("valid");
        assert_eq!((*f.register, f.token), (&b"reg"[..], 7));
        let (command, args) = f.command.expect("a command");
        assert_eq!((*command, args), (&b"SET"[..], &[&b"data"[..], &b"v"[..]][..]));
        let bare = words("LOCK.FENCED reg 7");
        assert!(parse_fenced(&bare).expect("valid").command.is_none());
        assert_eq!(
            parse_fenced(&words("LOCK.FENCED reg")).unwrap_err(),
            ArgError::Arity(c"ERR wrong number of arguments for 'lock.fenced' command")
        );
        assert_eq!(parse_fenced(&words("LOCK.FENCED reg x SET a b")).unwrap_err(), ArgError::BadToken);
        assert_eq!(parse_fenced(&words("LOCK.FENCED reg -3")).unwrap_err(), ArgError::BadToken);
        assert_eq!(**parse_fenceinfo(&words("LOCK.FENCEINFO reg")).expect("valid"), b"reg"[..]);
        assert!(parse_fenceinfo(&words("LOCK.FENCEINFO")).is_err() && parse_fenceinfo(&words("LOCK.FENCEINFO a b")).is_err());
    }

    #[test]
    fn what_cannot_run_under_the_guard_is_named() {
        let none: [&[u8]; 0] = [];
        for (name, why) in [
            ("MULTI", Unguardable::Transaction),
            ("exec", Unguardable::Transaction),
            ("Watch", Unguardable::Transaction),
            ("SUBSCRIBE", Unguardable::Subscription),
            ("ssubscribe", Unguardable::Subscription),
            ("BLPOP", Unguardable::Blocking),
            ("bzmpop", Unguardable::Blocking),
            ("WAIT", Unguardable::Blocking),
            ("LOCK.ACQUIRE", Unguardable::LockCommand),
            ("lock.guard", Unguardable::LockCommand),
        ] {
            assert_eq!(unguardable(name.as_bytes(), &none), Some(why), "{name}");
        }
        for name in ["SET", "EVALSHA", "FCALL", "LPOP", "lock", "lock.", "XADD", "MULTIX"] {
            assert_eq!(unguardable(name.as_bytes(), &none), None, "{name}");
        }
        assert_eq!(unguardable(b"XREAD", &words("COUNT 1 BLOCK 0 STREAMS s 0")), Some(Unguardable::Blocking));
        assert_eq!(unguardable(b"xreadgroup", &words("GROUP g c block 10 STREAMS s >")), Some(Unguardable::Blocking));
        assert_eq!(unguardable(b"XREAD", &words("COUNT 1 STREAMS block 0")), None, "a stream named BLOCK");
        assert!(runs_script(b"EVALSHA") && runs_script(b"fcall_ro") && !runs_script(b"SCRIPT") && !runs_script(b"evals"));
    }
}
