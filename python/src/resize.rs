//! Resizing a quorum semaphore (issue 61): `Redlock.resize` /
//! `AsyncRedlock.resize`, the crate's `Redlock::resize`. What a resize
//! does to holders and waiters is the crate's (docs/client.md,
//! "Resizing across the quorum").

use pyo3::prelude::*;
use redlock::Resized;

use crate::errors::{outcome_pairs, py};

/// What a resize came to: `held` (a quorum resized it; False when a
/// quorum answered that nobody holds the semaphore: nothing resized, its
/// next holder's limit is the one that request names), `resized` (the
/// servers that resized it) and `outcomes` (``(server, outcome)`` pairs).
#[pyclass(frozen, module = "redislock", name = "Resized")]
pub struct PyResized {
    /// A quorum resized it; False when nobody holds it.
    #[pyo3(get)]
    held: bool,
    /// The servers that resized it.
    #[pyo3(get)]
    resized: usize,
    /// Each server's answer, ``(server, outcome)``.
    #[pyo3(get)]
    outcomes: Vec<(String, String)>,
}

impl From<Resized> for PyResized {
    fn from(r: Resized) -> PyResized {
        PyResized { held: r.held, resized: r.resized, outcomes: outcome_pairs(&r.instances) }
    }
}

#[pymethods]
impl PyResized {
    fn __repr__(&self) -> String {
        format!("Resized(held={}, resized={})", if self.held { "True" } else { "False" }, self.resized)
    }
}

/// The crate's resize, for the runtime to run.
pub fn resize(
    redlock: &redlock::Redlock,
    resource: String,
    limit: u32,
) -> impl std::future::Future<Output = PyResult<PyResized>> + Send + 'static {
    let redlock = redlock.clone();
    async move {
        let resized = redlock.resize(&resource, limit).await.map_err(|e| py(e.into()))?;
        Ok(PyResized::from(resized))
    }
}
