//! The asyncio API: `AsyncRedlock`, `AsyncLock`, `AsyncLockRequest`. Each
//! network operation returns an awaitable (an asyncio future, through
//! `aio`) whose work runs on the shared runtime: the event loop never
//! blocks.

use std::future::Future;
use std::sync::{Arc, Mutex};

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use redlock::hold::{Failure, Hold};
use redlock::Released;

use crate::aio;
use crate::bases::{client_methods, PyClient, PyLockState};
use crate::config::{self, Kwargs};
use crate::errors::py;
use crate::exit;
use crate::hold::{Acquisition, Fresh, Pending};
use crate::runtime;
use crate::sync::locked;

type Slot = Arc<Mutex<Option<Py<PyAsyncLock>>>>;

/// A lock acquired for asyncio, made into an `AsyncLock` only when handed
/// to the awaiting task. If that task was cancelled meanwhile, this is
/// dropped unconverted, and `Fresh` releases the lock.
struct Acquired {
    fresh: Fresh,
    /// Where `AsyncLockRequest` keeps the lock for its `__aexit__`.
    slot: Option<Slot>,
}

impl<'py> IntoPyObject<'py> for Acquired {
    type Target = PyAsyncLock;
    type Output = Bound<'py, PyAsyncLock>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, PyAsyncLock>> {
        let hold = self.fresh.hold()?;
        let lock = Bound::new(py, PyLockState::init(hold, PyAsyncLock))?;
        if let Some(slot) = self.slot {
            *locked(&slot) = Some(lock.clone().unbind());
        }
        Ok(lock)
    }
}

/// Runs `work` (an acquisition) on a task of its own: cancelling the
/// awaiting asyncio task must not cut an acquisition in the middle (a grant
/// on the servers without a lock to release). Its result, if nobody takes
/// it, is dropped and so released (`hold::Fresh`).
fn acquire<'py>(py: Python<'py>, work: impl Acquisition, slot: Option<Slot>) -> PyResult<Bound<'py, PyAny>> {
    aio::future(py, async move {
        let fresh =
            tokio::spawn(work).await.map_err(|e| PyRuntimeError::new_err(format!("redislock: the acquisition's task failed: {e}")))??;
        Ok(Acquired { fresh, slot })
    })
}

/// Starts `work` (a release) now, on a task of its own: cancelling the
/// awaiting asyncio task (a timeout, asyncio.run's teardown) must not cut
/// a release asked for, nor keep it from starting.
/// Counted from now: the interpreter's exit waits for it.
pub fn started<T: Send + 'static>(
    work: impl Future<Output = Result<T, Failure>> + Send + 'static,
) -> PyResult<impl Future<Output = PyResult<()>> + Send + 'static> {
    let task = runtime::runtime()?.spawn(exit::release(work));
    Ok(async move {
        let done = task.await.map_err(|e| PyRuntimeError::new_err(format!("redislock: the release's task failed: {e}")))?;
        done.map(drop).map_err(py)
    })
}

/// The asyncio twin of `Redlock`: the same servers and settings, its
/// operations awaitable. Share one between tasks; each acquisition is a
/// new owner, so tasks exclude each other like separate processes.
#[pyclass(extends = PyClient, frozen, module = "redislock", name = "AsyncRedlock")]
pub struct PyAsyncRedlock;

client_methods! {
    PyAsyncRedlock, acquire(None) => PyAny, AsyncLockRequest(Arc::new(Mutex::new(None))),
    try_lock:
    /// Awaitable: one attempt round, as `Redlock.try_lock`; an `AsyncLock`.
    lock:
    /// An async context manager, as `Redlock.lock`::
    ///
    ///     async with rl.lock("orders:42", ttl=10.0, wait=5.0) as lock:
    ///         ...
    guard:
    /// Awaitable: a kept `AsyncLock`, as `Redlock.guard`.
    extra: {
        /// An async iterator of `Change`: the lock's changes as a quorum of
        /// servers announced them (their `redislock.notify` must name it).
        fn watch(slf: &Bound<'_, Self>, resource: &str) -> crate::watch::PyAsyncWatch {
            crate::watch::PyAsyncWatch::new(PyClient::inner(slf), resource)
        }

        /// Awaitable: asks every holder of `resource` to let it go, with
        /// `message` (why), as `Redlock.ask`; an `Asked`.
        #[pyo3(signature = (resource, message=None))]
        fn ask<'py>(slf: &Bound<'py, Self>, resource: String, message: Option<String>) -> PyResult<Bound<'py, PyAny>> {
            aio::future(slf.py(), crate::ask::ask(PyClient::inner(slf), resource, message))
        }

        /// Awaitable: gives the semaphore `resource` the limit `limit` on
        /// every server, as `Redlock.resize`; a `Resized`.
        fn resize<'py>(slf: &Bound<'py, Self>, resource: String, limit: u32) -> PyResult<Bound<'py, PyAny>> {
            aio::future(slf.py(), crate::resize::resize(PyClient::inner(slf), resource, limit))
        }
    }
}

/// The asyncio twin of `Lock`: the same properties; `extend` and
/// `release` are awaitable. As an async context manager it releases the
/// lock on exit.
#[pyclass(extends = PyLockState, frozen, module = "redislock", name = "AsyncLock")]
pub struct PyAsyncLock;

#[pymethods]
impl PyAsyncLock {
    /// Awaitable: extends the lease, as `Lock.extend`.
    #[pyo3(signature = (ttl=None))]
    fn extend<'py>(slf: &Bound<'py, Self>, ttl: Option<&Bound<'_, PyAny>>) -> PyResult<Bound<'py, PyAny>> {
        let ttl = ttl.filter(|t| !t.is_none()).map(|t| config::ttl("extend", t)).transpose()?;
        let work = PyLockState::hold(slf).extend(ttl).map_err(py)?;
        aio::future(slf.py(), async move { work.await.map_err(py) })
    }

    /// Awaitable: releases this hold, as `Lock.release`.
    fn release<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let work = started(PyLockState::hold(slf).release().map_err(py)?)?;
        aio::future(slf.py(), work)
    }

    /// An async iterator of `AskRequest`: the asks for this hold, as
    /// `Lock.asks`.
    fn asks(slf: &Bound<'_, Self>) -> crate::ask::PyAsyncAsks {
        crate::ask::PyAsyncAsks::new(PyLockState::hold(slf))
    }

    /// Another hold of the same acquisition, at once (see `Lock.reenter`).
    fn reenter<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAsyncLock>> {
        let hold = PyLockState::hold(slf).reenter().map_err(py)?;
        Bound::new(slf.py(), PyLockState::init(hold, PyAsyncLock))
    }

    /// Awaitable: the lock itself; an `async with` block releases it at the end.
    fn __aenter__<'py>(slf: Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let me = slf.unbind();
        aio::future(py, async move { Ok(me) })
    }

    /// Awaitable: releases this hold unless released already; if the block
    /// raised, its exception goes on and a failed release is not reported.
    #[pyo3(signature = (exc_type=None, *_rest))]
    fn __aexit__<'py>(
        slf: &Bound<'py, Self>,
        exc_type: Option<Bound<'py, PyAny>>,
        _rest: &Bound<'py, PyTuple>,
    ) -> PyResult<Bound<'py, PyAny>> {
        aexit(slf.py(), unreleased(PyLockState::hold(slf)), config::raised(exc_type.as_ref()))
    }
}

/// The release an `async with` block of a lock ends with: none once the
/// hold was released.
fn unreleased(hold: &Arc<Hold>) -> Option<impl Future<Output = Result<Released, Failure>> + Send + 'static> {
    if hold.released() {
        None
    } else {
        hold.release().ok()
    }
}

/// What `__aexit__` answers, for a lock and a leadership alike: an
/// awaitable of False that makes `release` (a lock's release or a
/// leadership's resignation; `None` when there is none to make), started
/// now (`started`). Its failure is raised only when the block did not
/// raise (`raised`); otherwise the block's exception goes on.
pub fn aexit<'py, T: Send + 'static>(
    py: Python<'py>,
    release: Option<impl Future<Output = Result<T, Failure>> + Send + 'static>,
    raised: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let work = release.map(started).transpose()?;
    aio::future(py, async move {
        if let Some(work) = work {
            match work.await {
                Err(e) if !raised => return Err(e),
                _ => {}
            }
        }
        Ok(false)
    })
}

/// What `AsyncRedlock.lock` returns: an async context manager that
/// acquires on entry (as `AsyncRedlock.guard`) and releases on exit.
#[pyclass(frozen, module = "redislock", name = "AsyncLockRequest")]
pub struct AsyncLockRequest {
    pending: Pending,
    entered: Slot,
}

#[pymethods]
impl AsyncLockRequest {
    /// Awaitable: acquires the lock and returns the kept `AsyncLock`.
    fn __aenter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let work = self.pending.start("AsyncRedlock")?;
        acquire(py, work, Some(Arc::clone(&self.entered)))
    }

    /// Awaitable: releases the lock (see `AsyncLock.__aexit__`).
    #[pyo3(signature = (exc_type=None, *_rest))]
    fn __aexit__<'py>(
        &self,
        py: Python<'py>,
        exc_type: Option<Bound<'py, PyAny>>,
        _rest: &Bound<'py, PyTuple>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let raised = config::raised(exc_type.as_ref());
        match locked(&self.entered).take() {
            Some(lock) => aexit(py, unreleased(PyLockState::hold(lock.bind(py))), raised),
            None => aio::future(py, async { Ok(false) }),
        }
    }

    fn __repr__(&self) -> String {
        self.pending.repr("AsyncLockRequest")
    }
}
