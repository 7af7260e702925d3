//! What went wrong with a request or a hold, in one `Category` each: the
//! bindings turn the category into their exception class or error code,
//! and read the rest (message, resource, attempts, reason, outcomes) from
//! here.

use std::fmt;

use crate::error::{Error, Why};
use crate::outcome::InstanceOutcome;
use crate::quorum::NotGranted;

/// What went wrong.
#[derive(Debug)]
pub enum Failure {
    /// What the quorum client reported.
    Redlock(Error),
    /// The lock was lost before this operation asked for it.
    Lost { resource: String, why: &'static str },
    /// This hold was released already.
    Released { resource: String },
    /// The wait was cancelled by its caller.
    Aborted { resource: String },
    /// A bad argument (a negative ttl, shared with a limit, ...).
    Invalid(String),
    /// A bare number of time implausible in the caller's unit (a ttl of
    /// 10 from Node, 10 ms; a request timeout of 50 from Python, 50 s):
    /// most likely meant in another unit (`Names::span`). A bad argument
    /// too, which a binding may raise as its own kind (Node: a RangeError).
    WrongUnit(String),
}

/// The one category of a failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Category {
    /// No quorum granted: the lock is held, servers are in quarantine, ...
    NotAcquired,
    /// Too few servers answered at all: nothing was decided about the
    /// lock, unlike a refusal by a quorum.
    QuorumUnreachable,
    /// The lock was lost, or no quorum extended it.
    LockLost,
    /// The configuration or the request must change: a bad server list or
    /// setting, or a request the servers refuse as configured (a ttl over
    /// max-ttl, a server listed twice, NOPERM, ...).
    Config,
    /// This hold was released already.
    Released,
    /// The wait was cancelled.
    Aborted,
    /// A bad argument.
    Invalid,
    /// Anything else: a server in trouble.
    Other,
}

impl Category {
    /// A stable name: `NOT_ACQUIRED`, `QUORUM_UNREACHABLE`, `LOCK_LOST`,
    /// `CONFIG` (a bad argument too), `RELEASED`, `ABORTED`, `REDLOCK`.
    pub fn code(self) -> &'static str {
        match self {
            Category::NotAcquired => "NOT_ACQUIRED",
            Category::QuorumUnreachable => "QUORUM_UNREACHABLE",
            Category::LockLost => "LOCK_LOST",
            Category::Config | Category::Invalid => "CONFIG",
            Category::Released => "RELEASED",
            Category::Aborted => "ABORTED",
            Category::Other => "REDLOCK",
        }
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        Failure::Redlock(e)
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Redlock(e) => write!(f, "{e}"),
            Failure::Lost { resource, why } => write!(f, "lock {resource:?} lost: {why}"),
            Failure::Released { resource } => write!(f, "this hold of lock {resource:?} was released already"),
            Failure::Aborted { resource } => write!(f, "the wait for lock {resource:?} was aborted"),
            Failure::Invalid(message) | Failure::WrongUnit(message) => f.write_str(message),
        }
    }
}

impl Failure {
    pub fn category(&self) -> Category {
        match self {
            Failure::Redlock(Error::NotAcquired { why: NotGranted::NoQuorum, .. }) => Category::QuorumUnreachable,
            Failure::Redlock(Error::NotAcquired { .. }) => Category::NotAcquired,
            Failure::Redlock(Error::QuorumLost { .. } | Error::Expired { .. }) | Failure::Lost { .. } => Category::LockLost,
            Failure::Redlock(Error::Config(_) | Error::Unfenced { .. }) => Category::Config,
            Failure::Redlock(Error::Rejected { rejection, .. }) if rejection.is_configuration() => Category::Config,
            Failure::Redlock(Error::Rejected { .. } | Error::Server { .. } | Error::NoQuorum { .. }) => Category::Other,
            Failure::Released { .. } => Category::Released,
            Failure::Aborted { .. } => Category::Aborted,
            Failure::Invalid(_) | Failure::WrongUnit(_) => Category::Invalid,
        }
    }

    /// The lock it is about, when there is one.
    pub fn resource(&self) -> Option<&str> {
        match self {
            Failure::Redlock(
                Error::NotAcquired { resource, .. }
                | Error::QuorumLost { resource, .. }
                | Error::Rejected { resource, .. }
                | Error::NoQuorum { resource, .. }
                | Error::Expired { resource }
                | Error::Unfenced { resource, .. },
            )
            | Failure::Lost { resource, .. }
            | Failure::Released { resource }
            | Failure::Aborted { resource } => Some(resource),
            Failure::Redlock(Error::Config(_) | Error::Server { .. }) | Failure::Invalid(_) | Failure::WrongUnit(_) => None,
        }
    }

    /// A stable name of why: why no quorum granted (`held`, `quarantine`,
    /// `no_quorum`, ...), or what the servers refused (`max_ttl`, ...).
    pub fn reason(&self) -> Option<&'static str> {
        match self {
            Failure::Redlock(Error::NotAcquired { why, .. }) => Some(why.kind()),
            Failure::Redlock(Error::Rejected { rejection, .. }) => Some(rejection.kind()),
            _ => None,
        }
    }

    /// Why no quorum granted, in words (`held by another owner`, ...).
    pub fn why_not_granted(&self) -> Option<String> {
        match self {
            Failure::Redlock(Error::NotAcquired { why, .. }) => Some(Why(why).to_string()),
            _ => None,
        }
    }

    /// Attempts made, for a lock not acquired.
    pub fn attempts(&self) -> Option<u32> {
        match self {
            Failure::Redlock(Error::NotAcquired { attempts, .. }) => Some(*attempts),
            _ => None,
        }
    }

    /// Until enough servers leave their restart quarantine.
    pub fn quarantine_ms_left(&self) -> Option<u64> {
        match self {
            Failure::Redlock(Error::NotAcquired { why: NotGranted::Quarantine { ms_left, .. }, .. }) => Some(*ms_left),
            _ => None,
        }
    }

    /// Each server's answer, where the failure has them.
    pub fn outcomes(&self) -> &[InstanceOutcome] {
        match self {
            Failure::Redlock(
                Error::NotAcquired { outcomes, .. } | Error::QuorumLost { outcomes, .. } | Error::Rejected { outcomes, .. },
            ) => outcomes,
            _ => &[],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::Rejection;

    #[test]
    fn each_failure_has_one_category() {
        let not = |why| Failure::Redlock(Error::NotAcquired { resource: "r".into(), attempts: 2, why, outcomes: Vec::new() });
        assert_eq!(not(NotGranted::NoQuorum).category(), Category::QuorumUnreachable);
        assert_eq!(not(NotGranted::Held).category(), Category::NotAcquired);
        assert_eq!(not(NotGranted::Held).attempts(), Some(2));
        assert_eq!(not(NotGranted::Quarantine { ms_left: 5, instances: 3 }).quarantine_ms_left(), Some(5));
        let rejected =
            |rejection| Failure::Redlock(Error::Rejected { resource: "r".into(), what: "acquire", rejection, outcomes: Vec::new() });
        assert_eq!(rejected(Rejection::MaxTtl).category(), Category::Config);
        assert_eq!(rejected(Rejection::MaxTtl).reason(), Some("max_ttl"));
        assert_eq!(rejected(Rejection::Other).category(), Category::Other);
        assert_eq!(Failure::Redlock(Error::Expired { resource: "r".into() }).category(), Category::LockLost);
        let released = Failure::Released { resource: "r".into() };
        assert_eq!((released.category().code(), released.resource()), ("RELEASED", Some("r")));
        assert_eq!(Failure::Invalid("bad".into()).category().code(), "CONFIG");
    }
}
