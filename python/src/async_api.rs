//! The asyncio API: `AsyncRedlock`, `AsyncLock`, `AsyncLockRequest`. Each
//! network operation returns an awaitable (an asyncio future, through
//! pyo3-async-runtimes) whose work runs on the shared runtime: the event
//! loop never blocks.

use std::future::Future;
use std::sync::{Arc, Mutex};

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use redlock::Redlock;

use crate::config::{self, Request};
use crate::errors::{self, Failure};
use crate::hold::{self, Fresh, Hold};
use crate::runtime;
use crate::sync_api::repr;

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
        let hold = Hold::from_fresh(runtime::runtime()?, self.fresh)
            .ok_or_else(|| PyRuntimeError::new_err("acquired lock went missing"))?;
        let lock = Bound::new(
            py,
            PyAsyncLock {
                hold: Arc::new(hold),
            },
        )?;
        if let Some(slot) = self.slot {
            *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(lock.clone().unbind());
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
    runtime::runtime()?;
    pyo3_async_runtimes::tokio::future_into_py(py, async move { work.await.map_err(PyErr::from) })
}

/// Acquires on a task of its own: cancelling the awaiting asyncio task
/// must not cut an acquisition in the middle (a grant on the servers
/// without a lock to release). Its result, if nobody takes it, is dropped
/// and so released (`hold::Fresh`).
fn acquire<'py>(
    py: Python<'py>,
    redlock: &Redlock,
    req: Request,
    once: bool,
    keep: bool,
    on_lost: Option<Py<PyAny>>,
    slot: Option<Slot>,
) -> PyResult<Bound<'py, PyAny>> {
    let work = hold::acquire(redlock.clone(), req, once, keep, on_lost);
    awaitable(py, async move {
        let fresh = tokio::spawn(work).await.map_err(|e| {
            Failure::Runtime(format!("redislock: the acquisition's task failed: {e}"))
        })??;
        Ok(Acquired { fresh, slot })
    })
}

/// The asyncio twin of `Redlock`: the same servers and settings, its
/// operations awaitable. Share one between tasks; each acquisition is a
/// new owner, so tasks exclude each other like separate processes.
#[pyclass(frozen, module = "redislock", name = "AsyncRedlock")]
pub struct PyAsyncRedlock {
    inner: Redlock,
}

#[pymethods]
impl PyAsyncRedlock {
    #[new]
    #[pyo3(signature = (servers, *, quorum=None, request_timeout=0.05, connect_timeout=0.2, retry_count=3, retry_delay=(0.1, 0.2), drift_factor=0.01, extend_fraction=1.0/3.0, mode="module"))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        servers: Vec<String>,
        quorum: Option<i64>,
        request_timeout: f64,
        connect_timeout: f64,
        retry_count: i64,
        retry_delay: (f64, f64),
        drift_factor: f64,
        extend_fraction: f64,
        mode: &str,
    ) -> PyResult<Self> {
        let inner = config::new_redlock(
            servers,
            quorum,
            request_timeout,
            connect_timeout,
            retry_count,
            retry_delay,
            drift_factor,
            extend_fraction,
            mode,
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
    fn try_lock<'py>(
        &self,
        py: Python<'py>,
        resource: String,
        ttl: f64,
        shared: bool,
        limit: Option<i64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let req = Request::new(resource, ttl, None, shared, limit)?;
        acquire(py, &self.inner, req, true, false, None, None)
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
        Ok(AsyncLockRequest {
            redlock: self.inner.clone(),
            req,
            on_lost: Mutex::new(on_lost),
            entered: Arc::new(Mutex::new(None)),
            used: Mutex::new(false),
        })
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
        acquire(py, &self.inner, req, false, true, on_lost, None)
    }

    fn __repr__(&self) -> String {
        format!(
            "AsyncRedlock({:?}, quorum={})",
            self.inner.servers(),
            self.inner.quorum()
        )
    }
}

/// The asyncio twin of `Lock`: the same properties; `extend` and
/// `release` are awaitable. As an async context manager it releases the
/// lock on exit.
#[pyclass(frozen, module = "redislock", name = "AsyncLock")]
pub struct PyAsyncLock {
    hold: Arc<Hold>,
}

#[pymethods]
impl PyAsyncLock {
    /// The resource as asked for (a permit's semaphore name).
    #[getter]
    fn resource(&self) -> String {
        self.hold.resource().to_string()
    }

    /// The key held on the servers: the resource, or a permit's own key.
    #[getter]
    fn key(&self) -> String {
        self.hold.lock().resource
    }

    /// The random owner value of this acquisition.
    #[getter]
    fn owner(&self) -> String {
        self.hold.lock().owner
    }

    /// The fencing token: larger than every earlier holder's (None in script mode).
    #[getter]
    fn token(&self) -> Option<i64> {
        self.hold.lock().token
    }

    /// The lease asked for, in seconds.
    #[getter]
    fn ttl(&self) -> f64 {
        self.hold.lock().ttl.as_secs_f64()
    }

    /// Seconds the lock is still safe to use; 0 once lost or released.
    #[getter]
    fn validity(&self) -> f64 {
        self.hold.validity().as_secs_f64()
    }

    /// True once the lock is lost (see `Lock.lost`).
    #[getter]
    fn lost(&self) -> bool {
        self.hold.lost()
    }

    /// True once this hold was released.
    #[getter]
    fn released(&self) -> bool {
        self.hold.released()
    }

    /// True for a shared hold of a read-write lock.
    #[getter]
    fn shared(&self) -> bool {
        self.hold.lock().shared
    }

    /// True when a guard keeps extending it.
    #[getter]
    fn kept(&self) -> bool {
        self.hold.kept()
    }

    /// Holds of this acquisition not yet released (see `reenter`).
    #[getter]
    fn holds(&self) -> usize {
        self.hold.lock().holds()
    }

    /// Each server's answer to the acquisition (or latest extension).
    #[getter]
    fn outcomes(&self) -> Vec<(String, String)> {
        errors::outcome_pairs(&self.hold.lock().instances)
    }

    /// Awaitable: extends the lease, as `Lock.extend`.
    #[pyo3(signature = (ttl=None))]
    fn extend<'py>(&self, py: Python<'py>, ttl: Option<f64>) -> PyResult<Bound<'py, PyAny>> {
        let ttl = ttl.map(config::ttl).transpose()?;
        let work = self.hold.extend(ttl)?;
        awaitable(py, work)
    }

    /// Awaitable: releases this hold, as `Lock.release`.
    fn release<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let work = self.hold.release()?;
        awaitable(py, work)
    }

    /// Another hold of the same acquisition, at once (see `Lock.reenter`).
    fn reenter(&self) -> PyResult<PyAsyncLock> {
        Ok(PyAsyncLock {
            hold: Arc::new(self.hold.reenter()?),
        })
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
        &self,
        py: Python<'py>,
        exc_type: Option<Bound<'py, PyAny>>,
        _exc: Option<Bound<'py, PyAny>>,
        _tb: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        aexit(py, &self.hold, exc_type.is_some_and(|t| !t.is_none()))
    }

    fn __repr__(&self) -> String {
        repr("AsyncLock", &self.hold)
    }
}

fn aexit<'py>(py: Python<'py>, hold: &Arc<Hold>, raised: bool) -> PyResult<Bound<'py, PyAny>> {
    let work = if hold.released() {
        None
    } else {
        hold.release().ok()
    };
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
    redlock: Redlock,
    req: Request,
    on_lost: Mutex<Option<Py<PyAny>>>,
    entered: Slot,
    used: Mutex<bool>,
}

#[pymethods]
impl AsyncLockRequest {
    /// Awaitable: acquires the lock and returns the kept `AsyncLock`.
    fn __aenter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        {
            let mut used = self.used.lock().unwrap_or_else(|p| p.into_inner());
            if *used {
                return Err(PyRuntimeError::new_err(
                    "a lock request is entered once: call AsyncRedlock.lock() again",
                ));
            }
            *used = true;
        }
        let on_lost = self
            .on_lost
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        acquire(
            py,
            &self.redlock,
            self.req.clone(),
            false,
            true,
            on_lost,
            Some(Arc::clone(&self.entered)),
        )
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
        let raised = exc_type.is_some_and(|t| !t.is_none());
        let lock = self
            .entered
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        match lock {
            Some(lock) => aexit(py, &lock.get().hold, raised),
            None => awaitable(py, async { Ok(false) }),
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "<AsyncLockRequest {:?} ttl={}s>",
            self.req.resource,
            self.req.ttl.as_secs_f64()
        )
    }
}
