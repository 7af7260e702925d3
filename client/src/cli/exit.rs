//! Exit statuses (also listed in `redlock --help`) and the one-line failure
//! that main prints on stderr.

use redlock::Error;

pub const OK: i32 = 0;
/// A server answered with an error, too few servers reachable, I/O.
pub const FAILURE: i32 = 1;
/// Bad arguments or configuration (clap's own usage errors are 2 too).
pub const USAGE: i32 = 2;
/// acquire: no quorum granted the lock.
pub const NOT_ACQUIRED: i32 = 3;
/// release: released on fewer than a quorum.
pub const NOT_RELEASED: i32 = 4;
/// extend: the extension reached no quorum.
pub const QUORUM_LOST: i32 = 5;
/// run: the lock was not taken; the command did not run (EX_TEMPFAIL).
pub const RUN_NOT_LOCKED: i32 = 75;
/// run: the lock was lost and the command was stopped.
pub const RUN_LOCK_LOST: i32 = 76;
/// run: the command exists but could not be executed (as in sh).
pub const CANNOT_EXECUTE: i32 = 126;
/// run: the command was not found (as in sh).
pub const NOT_FOUND: i32 = 127;

/// What went wrong, for one line on stderr, and the exit status.
#[derive(Debug)]
pub struct Failure {
    pub code: i32,
    pub message: String,
}

impl Failure {
    pub fn new(code: i32, message: impl Into<String>) -> Failure {
        Failure { code, message: message.into() }
    }

    pub fn usage(message: impl Into<String>) -> Failure {
        Failure::new(USAGE, message)
    }

    pub fn general(message: impl Into<String>) -> Failure {
        Failure::new(FAILURE, message)
    }

    /// A library error; `not_done` is the status for "no quorum" outcomes
    /// (not acquired, quorum lost) of the command at hand.
    pub fn from_lock_error(e: &Error, not_done: i32) -> Failure {
        let code = match e {
            Error::Config(_) => USAGE,
            Error::Server { .. } => FAILURE,
            Error::NotAcquired { .. } | Error::QuorumLost { .. } | Error::Expired { .. } => not_done,
        };
        Failure::new(code, e.to_string())
    }
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Failure {
        Failure::general(format!("writing output: {e}"))
    }
}
