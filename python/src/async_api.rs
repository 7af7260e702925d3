//! The asyncio API: `AsyncRedlock`, `AsyncLock`, `AsyncLockRequest`. Each
//! network operation returns an awaitable (an asyncio future, through
//! `aio`) whose work runs on the shared runtime: the event loop never
//! blocks.

use std::future::Future;
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use redlock::Redlock;

use crate::aio;
use crate::config::{self, Request};
use crate::errors::Failure;
use crate::hold::{self, Acquisition, Fresh, Hold, Pending};
use crate::lock_state::PyLockState;
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
        let hold = Hold::from_fresh(self.fresh)?;
        let lock = Bound::new(py, PyLockState::init(hold, PyAsyncLock))?;
        if let Some(slot) = self.slot {
            *locked(&slot) = Some(lock.clone().unbind());
        }
        Ok(lock)
    }
}

/// An awaitable for `work`, run on the shared runtime.
fn awaitable<'py, T, F>(py: Python<'py>, work: F) -> PyResult<Bound<'py, PyAny>>
where
    T: for<'a> IntoPyObject<'a> + Send + 'static,
    F: Future<Output = Result<T, Failure>> + Send + 'static,
{
    aio::future(py, async move { work.await.map_err(PyErr::from) })
}

/// Runs `work` (an acquisition) on a task of its own: cancelling the
/// awaiting asyncio task must not cut an acquisition in the middle (a grant
/// on the servers without a lock to release). Its result, if nobody takes
/// it, is dropped and so released (`hold::Fresh`).
fn acquire<'py>(py: Python<'py>, work: impl Acquisition, slot: Option<Slot>) -> PyResult<Bound<'py, PyAny>> {
    awaitable(py, async move {
        let fresh = tokio::spawn(work).await.map_err(|e| Failure::Runtime(format!("redislock: the acquisition's task failed: {e}")))??;
        Ok(Acquired { fresh, slot })
    })
}

/// Starts `work` (a release) now, on a task of its own: cancelling the
/// awaiting asyncio task (a timeout, asyncio.run's teardown) must not cut
/// a release asked for, nor keep it from starting.
fn started(
    work: impl Future<Output = Result<(), Failure>> + Send + 'static,
) -> PyResult<impl Future<Output = Result<(), Failure>> + Send + 'static> {
    let task = runtime::runtime()?.spawn(work);
    Ok(async move { task.await.map_err(|e| Failure::Runtime(format!("redislock: the release's task failed: {e}")))? })
}

/// The asyncio twin of `Redlock`: the same servers and settings, its
/// operations awaitable. Share one between tasks; each acquisition is a
/// new owner, so tasks exclude each other like separate processes.
#[pyclass(frozen, module = "redislock", name = "AsyncRedlock")]
pub struct PyAsyncRedlock {
    inner: Redlock,
}

impl PyAsyncRedlock {
    /// Over an existing client (`Redlock.asyncio()`).
    pub fn from_client(inner: Redlock) -> PyAsyncRedlock {
        PyAsyncRedlock { inner }
    }
}

#[pymethods]
impl PyAsyncRedlock {
    #[new]
    #[pyo3(signature = (servers, *, quorum=None, request_timeout=0.05, connect_timeout=0.2, retry_count=3, retry_delay=(0.1, 0.2), drift_factor=0.01, extend_fraction=1.0/3.0, mode="module", release_on_disconnect=false, lock_delay=None, ssl_ca_certs=None, ssl_certfile=None, ssl_keyfile=None, ssl_cert_reqs=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        servers: &Bound<'_, PyAny>,
        quorum: Option<i64>,
        request_timeout: f64,
        connect_timeout: f64,
        retry_count: i64,
        retry_delay: (f64, f64),
        drift_factor: f64,
        extend_fraction: f64,
        mode: &str,
        release_on_disconnect: bool,
        lock_delay: Option<f64>,
        ssl_ca_certs: Option<std::path::PathBuf>,
        ssl_certfile: Option<std::path::PathBuf>,
        ssl_keyfile: Option<std::path::PathBuf>,
        ssl_cert_reqs: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let inner = config::new_redlock(
            config::server_list(servers)?,
            quorum,
            request_timeout,
            connect_timeout,
            retry_count,
            retry_delay,
            drift_factor,
            extend_fraction,
            mode,
            (release_on_disconnect, lock_delay),
            config::tls(ssl_ca_certs, ssl_certfile, ssl_keyfile, ssl_cert_reqs)?,
        )?;
        Ok(PyAsyncRedlock { inner })
    }

    /// The servers, as ``host:port``.
    #[getter]
    fn servers(&self) -> Vec<String> {
        self.inner.servers()
    }

    /// How many servers must agree.
    #[getter]
    fn quorum(&self) -> usize {
        self.inner.quorum()
    }

    /// Awaitable: one attempt round, as `Redlock.try_lock`; an `AsyncLock`.
    #[pyo3(signature = (resource, ttl, *, shared=false, limit=None))]
    fn try_lock<'py>(&self, py: Python<'py>, resource: String, ttl: f64, shared: bool, limit: Option<i64>) -> PyResult<Bound<'py, PyAny>> {
        let req = Request::new(resource, ttl, None, shared, limit)?;
        let work = hold::acquire(self.inner.clone(), req, true, false, None);
        acquire(py, work, None)
    }

    /// An async context manager, as `Redlock.lock`::
    ///
    ///     async with rl.lock("orders:42", ttl=10.0, wait=5.0) as lock:
    ///         ...
    #[pyo3(signature = (resource, ttl, wait=None, *, shared=false, limit=None, on_lost=None))]
    #[allow(clippy::too_many_arguments)]
    fn lock(
        &self,
        resource: String,
        ttl: f64,
        wait: Option<f64>,
        shared: bool,
        limit: Option<i64>,
        on_lost: Option<Py<PyAny>>,
    ) -> PyResult<AsyncLockRequest> {
        let req = Request::new(resource, ttl, wait, shared, limit)?;
        Ok(AsyncLockRequest { pending: Pending::new(self.inner.clone(), req, on_lost), entered: Arc::new(Mutex::new(None)) })
    }

    /// Awaitable: a kept `AsyncLock`, as `Redlock.guard`.
    #[pyo3(signature = (resource, ttl, wait=None, *, shared=false, limit=None, on_lost=None))]
    #[allow(clippy::too_many_arguments)]
    fn guard<'py>(
        &self,
        py: Python<'py>,
        resource: String,
        ttl: f64,
        wait: Option<f64>,
        shared: bool,
        limit: Option<i64>,
        on_lost: Option<Py<PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let req = Request::new(resource, ttl, wait, shared, limit)?;
        let work = hold::acquire(self.inner.clone(), req, false, true, on_lost);
        acquire(py, work, None)
    }

    fn __repr__(&self) -> String {
        format!("AsyncRedlock({:?}, quorum={})", self.inner.servers(), self.inner.quorum())
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
    fn extend<'py>(slf: &Bound<'py, Self>, ttl: Option<f64>) -> PyResult<Bound<'py, PyAny>> {
        let ttl = ttl.map(config::ttl).transpose()?;
        let work = PyLockState::hold(slf).extend(ttl)?;
        awaitable(slf.py(), work)
    }

    /// Awaitable: releases this hold, as `Lock.release`.
    fn release<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let work = started(PyLockState::hold(slf).release()?)?;
        awaitable(slf.py(), work)
    }

    /// Another hold of the same acquisition, at once (see `Lock.reenter`).
    fn reenter<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAsyncLock>> {
        let hold = PyLockState::hold(slf).reenter()?;
        Bound::new(slf.py(), PyLockState::init(hold, PyAsyncLock))
    }

    /// Awaitable: the lock itself; an `async with` block releases it at the end.
    fn __aenter__<'py>(slf: Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let me = slf.unbind();
        awaitable(py, async move { Ok(me) })
    }

    /// Awaitable: releases this hold unless released already; if the block
    /// raised, its exception goes on and a failed release is not reported.
    #[pyo3(signature = (exc_type=None, _exc=None, _tb=None))]
    fn __aexit__<'py>(
        slf: &Bound<'py, Self>,
        exc_type: Option<Bound<'py, PyAny>>,
        _exc: Option<Bound<'py, PyAny>>,
        _tb: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let raised = config::raised(exc_type.as_ref());
        aexit(slf.py(), PyLockState::hold(slf), raised)
    }
}

fn aexit<'py>(py: Python<'py>, hold: &Arc<Hold>, raised: bool) -> PyResult<Bound<'py, PyAny>> {
    let work = if hold.released() { None } else { hold.release().ok().map(started).transpose()? };
    awaitable(py, async move {
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
    #[pyo3(signature = (exc_type=None, _exc=None, _tb=None))]
    fn __aexit__<'py>(
        &self,
        py: Python<'py>,
        exc_type: Option<Bound<'py, PyAny>>,
        _exc: Option<Bound<'py, PyAny>>,
        _tb: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let raised = config::raised(exc_type.as_ref());
        match locked(&self.entered).take() {
            Some(lock) => aexit(py, PyLockState::hold(lock.bind(py)), raised),
            None => awaitable(py, async { Ok(false) }),
        }
    }

    fn __repr__(&self) -> String {
        self.pending.repr("AsyncLockRequest")
    }
}
