//! The release request (issue 61): `Redlock.ask` / `AsyncRedlock.ask`
//! (the crate's `Redlock::ask`) and a held lock's `asks()` (the crate's
//! `Hold::asks`) as an iterator (`Lock`) or async iterator (`AsyncLock`)
//! of `AskRequest`. Which asks are heard when is the crate's
//! (docs/client.md, "Asking a holder to let go").

use std::pin::Pin;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use pyo3::exceptions::PyStopAsyncIteration;
use pyo3::prelude::*;
use redlock::{AskRequest, Asked};

use crate::aio;
use crate::errors::{outcome_pairs, py};
use crate::runtime;

/// What an ask came to: `answered` (servers that answered), `holders`
/// (the most holders one server asked; 0: nobody holds it) and
/// `outcomes` (``(server, outcome)`` pairs).
#[pyclass(frozen, module = "redislock", name = "Asked")]
pub struct PyAsked {
    /// The servers that answered.
    #[pyo3(get)]
    answered: usize,
    /// The most holders one server asked (not a sum: every server asks
    /// the same holders); 0 when nobody holds the lock.
    #[pyo3(get)]
    holders: i64,
    /// Each server's answer, ``(server, outcome)``.
    #[pyo3(get)]
    outcomes: Vec<(String, String)>,
}

impl From<Asked> for PyAsked {
    fn from(a: Asked) -> PyAsked {
        PyAsked { answered: a.answered, holders: a.holders, outcomes: outcome_pairs(&a.instances) }
    }
}

#[pymethods]
impl PyAsked {
    fn __repr__(&self) -> String {
        format!("Asked(answered={}, holders={})", self.answered, self.holders)
    }
}

/// The crate's ask, for the runtime to run.
pub fn ask(
    redlock: &redlock::Redlock,
    resource: String,
    message: Option<String>,
) -> impl std::future::Future<Output = PyResult<PyAsked>> + Send + 'static {
    let redlock = redlock.clone();
    async move {
        let asked = redlock.ask(&resource, message.as_deref()).await.map_err(|e| py(e.into()))?;
        Ok(PyAsked::from(asked))
    }
}

/// An ask heard by the holder: `resource` (one of a set's) and `message`
/// (None when the asker gave none). Compared by both.
#[pyclass(frozen, eq, hash, module = "redislock", name = "AskRequest")]
#[derive(PartialEq, Eq, Hash)]
pub struct PyAskRequest {
    /// The resource asked for (one of a set's, for a set held whole).
    #[pyo3(get)]
    resource: String,
    /// Why, as the asker said it; None when it gave no message.
    #[pyo3(get)]
    message: Option<String>,
}

impl From<AskRequest> for PyAskRequest {
    fn from(a: AskRequest) -> PyAskRequest {
        PyAskRequest { resource: a.resource, message: a.message }
    }
}

#[pymethods]
impl PyAskRequest {
    fn __repr__(&self) -> String {
        format!("AskRequest(resource={:?}, message={:?})", self.resource, self.message)
    }
}

type Requests = Arc<tokio::sync::Mutex<Pin<Box<dyn Stream<Item = AskRequest> + Send>>>>;

pub fn requests(hold: &redlock::hold::Hold) -> Requests {
    Arc::new(tokio::sync::Mutex::new(Box::pin(hold.asks())))
}

/// The next ask; `None` once the lock is lost or released. Dropped while
/// it waits, the ask it was reading is read again by the next call.
async fn next(requests: Requests) -> Option<PyAskRequest> {
    requests.lock().await.next().await.map(PyAskRequest::from)
}

/// What `Lock.asks` returns: each step blocks until the next ask (Ctrl-C
/// ends the wait); it ends once the lock is lost or released.
#[pyclass(frozen, module = "redislock", name = "Asks")]
pub struct PyAsks {
    requests: Requests,
}

impl PyAsks {
    pub fn new(hold: &redlock::hold::Hold) -> PyAsks {
        PyAsks { requests: requests(hold) }
    }
}

#[pymethods]
impl PyAsks {
    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<PyAskRequest>> {
        runtime::block_or_drop(py, next(Arc::clone(&self.requests)))
    }
}

/// What `AsyncLock.asks` returns: an async iterator, each step awaiting
/// the next ask; it ends once the lock is lost or released.
#[pyclass(frozen, module = "redislock", name = "AsyncAsks")]
pub struct PyAsyncAsks {
    requests: Requests,
}

impl PyAsyncAsks {
    pub fn new(hold: &redlock::hold::Hold) -> PyAsyncAsks {
        PyAsyncAsks { requests: requests(hold) }
    }
}

#[pymethods]
impl PyAsyncAsks {
    fn __aiter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __anext__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let requests = Arc::clone(&self.requests);
        aio::future(py, async move { next(requests).await.ok_or_else(|| PyStopAsyncIteration::new_err(())) })
    }
}
