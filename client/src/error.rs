//! Typed errors. Each names every instance's outcome, so an operator sees
//! which server answered what.

use std::fmt;

use crate::outcome::{InstanceOutcome, Rejection};
use crate::quorum::NotGranted;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No quorum granted the lock within the attempts allowed; `why` (of
    /// the last attempt, whose outcomes these are) tells a held lock from
    /// servers in quarantine and from too few servers answering.
    #[error("lock {resource:?} not acquired after {attempts} attempt(s) ({}): {}", Why(.why), Outcomes(.outcomes))]
    NotAcquired { resource: String, attempts: u32, why: NotGranted, outcomes: Vec<InstanceOutcome> },
    /// An extension did not reach a quorum in time: the lock is lost.
    #[error("lock {resource:?} lost: extension reached no quorum: {}", Outcomes(.outcomes))]
    QuorumLost { resource: String, outcomes: Vec<InstanceOutcome> },
    /// The servers refused the request itself (an error reply that no
    /// retry fixes) and so no quorum could agree: a ttl over
    /// `redislock.max-ttl`, WRONGTYPE, NOPERM, READONLY, no module, ...
    /// `rejection.is_configuration()` tells a usage or configuration error
    /// from a server in trouble. Not a loss: an extension refused this way
    /// leaves the lease as it was.
    #[error("lock {resource:?}: {what} refused: {}: {}", .rejection.describe(), Outcomes(.outcomes))]
    Rejected { resource: String, what: &'static str, rejection: Rejection, outcomes: Vec<InstanceOutcome> },
    /// A request about a lock that is neither an acquisition nor an
    /// extension reached no quorum: a leader's new value
    /// (`Leadership::proclaim`, which observers may then still read as the
    /// old one), or a look at who leads (`Election::leader`, with too few
    /// servers answering to tell). Not a loss by itself.
    #[error("lock {resource:?}: {what} reached no quorum: {}", Outcomes(.outcomes))]
    NoQuorum { resource: String, what: &'static str, outcomes: Vec<InstanceOutcome> },
    /// The validity of the lock ran out before the operation.
    #[error("lock {resource:?} already expired")]
    Expired { resource: String },
    /// A server answered in a way that no retry can fix. (A single
    /// instance's failure, e.g. one without the module, is not one: it
    /// counts as an instance that did not grant.)
    /// A fenced or guarded command asked of a hold that cannot give one
    /// (`Lock::fenced`, `Lock::guarded`): no token (script mode), a
    /// shared hold or a permit for a register, no command to guard.
    #[error("lock {resource:?} cannot fence a write: {why}")]
    Unfenced { resource: String, why: &'static str },
    #[error("{server}: {message}")]
    Server { server: String, message: String },
    #[error("configuration: {0}")]
    Config(String),
}

/// Renders outcomes as `127.0.0.1:7001 granted (token 42), 127.0.0.1:7002 timeout, ...`.
pub struct Outcomes<'a>(pub &'a [InstanceOutcome]);

impl fmt::Display for Outcomes<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, o) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{o}")?;
        }
        Ok(())
    }
}

/// Renders why no quorum granted.
pub struct Why<'a>(pub &'a NotGranted);

impl fmt::Display for Why<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            NotGranted::Held => f.write_str("held by another owner"),
            NotGranted::Quarantine { ms_left, instances } => {
                write!(f, "{instances} server(s) in restart quarantine, {} left", crate::outcome::seconds_left(*ms_left))
            }
            NotGranted::NoQuorum => f.write_str("too few servers answered for a quorum"),
            NotGranted::NoValidity => f.write_str("granted too late: no validity left"),
            NotGranted::Rejected { rejection, instances } => {
                write!(f, "{instances} server(s) refused the request: {}", rejection.describe())
            }
        }
    }
}
