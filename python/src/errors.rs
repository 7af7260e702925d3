//! The crate's failures as the package's exceptions
//! (python/redislock/_errors.py), one class per category.
//!
//! The exception classes are Python classes, so that `ConfigError` can be a
//! `ValueError` too and the attributes are plain ones; they are imported
//! from the package on first raise. Every `PyErr` here is lazy: it is built
//! from Rust values without the GIL, on whichever thread the work failed.

use pyo3::exceptions::PyValueError;
use pyo3::PyErr;
use redlock::hold::{Category, Failure};
use redlock::InstanceOutcome;

pyo3::import_exception!(redislock, RedlockError);
pyo3::import_exception!(redislock, NotAcquired);
pyo3::import_exception!(redislock, QuorumUnreachable);
pyo3::import_exception!(redislock, LockLost);
pyo3::import_exception!(redislock, ConfigError);
pyo3::import_exception!(redislock, LockReleased);

/// `[(server, outcome text), ...]`, as exceptions and `Lock.outcomes` show them.
pub fn outcome_pairs(outcomes: &[InstanceOutcome]) -> Vec<(String, String)> {
    outcomes.iter().map(|o| (o.server.clone(), o.outcome.to_string())).collect()
}

/// `f` as the exception of its category.
pub fn py(f: Failure) -> PyErr {
    let message = f.to_string();
    let resource = f.resource().unwrap_or_default().to_string();
    match f.category() {
        category @ (Category::NotAcquired | Category::QuorumUnreachable) => {
            let (attempts, why, kind) = (f.attempts().unwrap_or(0), f.why_not_granted().unwrap_or_default(), f.reason().unwrap_or(""));
            let args = (message, resource, attempts, why, kind, outcome_pairs(f.outcomes()));
            if category == Category::QuorumUnreachable {
                QuorumUnreachable::new_err(args)
            } else {
                NotAcquired::new_err(args)
            }
        }
        Category::LockLost => LockLost::new_err((message, resource, outcome_pairs(f.outcomes()))),
        Category::Config => ConfigError::new_err(message),
        Category::Released => LockReleased::new_err((message, resource)),
        Category::Invalid => PyValueError::new_err(message),
        Category::Aborted | Category::Other => RedlockError::new_err(message),
    }
}
