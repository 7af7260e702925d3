//! The crate's errors as the package's exceptions (python/redislock/_errors.py).
//!
//! The exception classes are Python classes, so that `ConfigError` can be a
//! `ValueError` too and the attributes are plain ones; they are imported
//! from the package on first raise. Every `PyErr` here is lazy: it is built
//! from Rust values without the GIL, on whichever thread the work failed.

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::PyErr;
use redlock::{Error, InstanceOutcome, NotGranted};

pyo3::import_exception!(redislock, RedlockError);
pyo3::import_exception!(redislock, NotAcquired);
pyo3::import_exception!(redislock, QuorumUnreachable);
pyo3::import_exception!(redislock, LockLost);
pyo3::import_exception!(redislock, ConfigError);
pyo3::import_exception!(redislock, LockReleased);

/// What went wrong, on either side of the binding.
#[derive(Debug)]
pub enum Failure {
    Redlock(Error),
    /// The lock was lost before this operation asked for it.
    Lost {
        resource: String,
        why: &'static str,
    },
    /// This hold was released already.
    Released {
        resource: String,
    },
    /// A bad argument.
    Value(String),
    /// A task of the runtime ended without a result (a panic in it).
    Runtime(String),
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        Failure::Redlock(e)
    }
}

/// `[(server, outcome text), ...]`, as exceptions and `Lock.outcomes` show them.
pub fn outcome_pairs(outcomes: &[InstanceOutcome]) -> Vec<(String, String)> {
    outcomes.iter().map(|o| (o.server.clone(), o.outcome.to_string())).collect()
}

impl From<Failure> for PyErr {
    fn from(f: Failure) -> PyErr {
        match f {
            Failure::Redlock(e) => redlock_error(e),
            Failure::Lost { resource, why } => {
                let message = format!("lock {resource:?} lost: {why}");
                LockLost::new_err((message, resource, Vec::<(String, String)>::new()))
            }
            Failure::Released { resource } => {
                LockReleased::new_err((format!("this hold of lock {resource:?} was released already"), resource))
            }
            Failure::Value(message) => PyValueError::new_err(message),
            Failure::Runtime(message) => PyRuntimeError::new_err(message),
        }
    }
}

fn redlock_error(e: Error) -> PyErr {
    let message = e.to_string();
    match e {
        Error::NotAcquired { resource, attempts, why, outcomes } => {
            let reason = redlock::error::Why(&why).to_string();
            let args = (message, resource, attempts, reason, why.kind(), outcome_pairs(&outcomes));
            // Too few servers answered at all: nothing was decided about
            // the lock, unlike a refusal by a quorum.
            if why == NotGranted::NoQuorum {
                QuorumUnreachable::new_err(args)
            } else {
                NotAcquired::new_err(args)
            }
        }
        Error::QuorumLost { resource, outcomes } => LockLost::new_err((message, resource, outcome_pairs(&outcomes))),
        Error::Expired { resource } => LockLost::new_err((message, resource, Vec::<(String, String)>::new())),
        Error::Config(_) => ConfigError::new_err(message),
        // The request itself was refused: a ttl over max-ttl, a server
        // listed twice, NOPERM, ... are configuration, not an outage.
        Error::Rejected { rejection, .. } if rejection.is_configuration() => ConfigError::new_err(message),
        Error::Rejected { .. } => RedlockError::new_err(message),
        Error::Server { .. } => RedlockError::new_err(message),
    }
}
