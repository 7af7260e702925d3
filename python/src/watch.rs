//! `AsyncRedlock.watch(resource)`: the crate's `Redlock::watch` as an
//! async iterator of `Change`, driven on the shared runtime. What is
//! delivered when is the crate's (docs/client.md, "Watching a lock").

use std::pin::Pin;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use pyo3::exceptions::PyStopAsyncIteration;
use pyo3::prelude::*;
use redlock::{Change, Error};

use crate::aio;

/// One change of a lock a quorum of servers announced: `kind` (``"grant"``,
/// ``"handoff"``, ``"release"``, ``"expire"``, ``"cut"``, ``"session"``,
/// ``"revoke"``, ``"resize"``, ``"proclaim"``), `token`, `owner`, `value`
/// (``None`` when none). Compared by all four.
#[pyclass(frozen, eq, hash, module = "redislock", name = "Change")]
#[derive(PartialEq, Eq, Hash)]
pub struct PyChange {
    /// What happened: "grant", "handoff", "release", "expire", "cut",
    /// "session", "revoke", "resize" or "proclaim".
    #[pyo3(get)]
    kind: &'static str,
    /// The hold's fencing token (a grant's: the lock's); 0 for a resize.
    #[pyo3(get)]
    token: i64,
    /// The hold's owner as the servers store it; "" for a resize.
    #[pyo3(get)]
    owner: String,
    /// A grant's or proclamation's value, a cut's deadline (Unix ms), a
    /// resize's limit; None when none.
    #[pyo3(get)]
    value: Option<String>,
}

impl From<Change> for PyChange {
    fn from(c: Change) -> PyChange {
        PyChange { kind: c.kind.as_str(), token: c.token, owner: c.owner, value: c.value }
    }
}

#[pymethods]
impl PyChange {
    fn __repr__(&self) -> String {
        format!("Change(kind={:?}, token={}, owner={:?}, value={:?})", self.kind, self.token, self.owner, self.value)
    }
}

type Changes = Arc<tokio::sync::Mutex<Pin<Box<dyn Stream<Item = Result<Change, Error>> + Send>>>>;

/// What `AsyncRedlock.watch` returns: an async iterator, each step
/// awaiting the next change. It never ends by itself. A server whose
/// `redislock.notify` names no such key is skipped over here (the crate
/// reports it once; Python gets the changes only).
#[pyclass(frozen, module = "redislock", name = "AsyncWatch")]
pub struct PyAsyncWatch {
    changes: Changes,
}

impl PyAsyncWatch {
    pub fn new(redlock: &redlock::Redlock, resource: &str) -> PyAsyncWatch {
        PyAsyncWatch { changes: Arc::new(tokio::sync::Mutex::new(Box::pin(redlock.watch(resource)))) }
    }
}

/// The next change. Dropped while it waits (a cancelled task), the change
/// it was reading is read again by the next call: none is lost.
async fn next(changes: Changes) -> Option<PyChange> {
    let mut changes = changes.lock().await;
    loop {
        match changes.next().await? {
            Ok(change) => return Some(PyChange::from(change)),
            Err(_) => continue,
        }
    }
}

#[pymethods]
impl PyAsyncWatch {
    fn __aiter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __anext__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let changes = Arc::clone(&self.changes);
        aio::future(py, async move { next(changes).await.ok_or_else(|| PyStopAsyncIteration::new_err(())) })
    }
}
