//! The blocking API: `Redlock`, `Lock`, `LockRequest`. Every network wait
//! runs on the shared runtime with the GIL released (`runtime::block`).

use std::sync::{Arc, Mutex};

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use redlock::Redlock;

use crate::config::{self, Request};
use crate::errors::{self, Failure};
use crate::hold::{self, Hold};
use crate::runtime;

/// A Redlock client over independent Redis servers that run the redislock
/// module (or plain Redis with `mode="script"`, without fencing tokens).
///
/// `servers` are URLs such as ``"redis://127.0.0.1:7001"``. Times are in
/// seconds. `quorum` defaults to a majority. Connections are made on first
/// use and shared by every thread using this object; it is safe to share.
/// Each acquisition is a new owner: threads sharing one `Redlock` exclude
/// each other like separate processes.
#[pyclass(frozen, module = "redislock", name = "Redlock")]
pub struct PyRedlock {
    pub(crate) inner: Redlock,
}

#[pymethods]
impl PyRedlock {
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
        Ok(PyRedlock { inner })
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

    /// One attempt round at `resource` for `ttl` seconds, without automatic
    /// extension. Raises `NotAcquired` (`QuorumUnreachable` when too few
    /// servers answered). `shared=True`: a shared hold of a read-write
    /// lock; `limit=N`: a permit of a semaphore of N. Release it with
    /// `release()` or a `with` block; one never released ends with its ttl.
    #[pyo3(signature = (resource, ttl, *, shared=false, limit=None))]
    fn try_lock(
        &self,
        py: Python<'_>,
        resource: String,
        ttl: f64,
        shared: bool,
        limit: Option<i64>,
    ) -> PyResult<PyLock> {
        let req = Request::new(resource, ttl, None, shared, limit)?;
        acquire(py, &self.inner, req, true, false, None)
    }

    /// A context manager that takes `resource` on entry, keeps it extended
    /// while the block runs and releases it on exit::
    ///
    ///     with rl.lock("orders:42", ttl=10.0, wait=5.0) as lock:
    ///         ...
    ///
    /// `wait`: seconds to wait for it, in the resource's first-come,
    /// first-served line (``math.inf``: no limit); `None` for the
    /// configured retries. `on_lost`: called once, with no arguments and
    /// from another thread, if the lock is lost. Leaving the block raises
    /// `LockLost` if it was lost (unless the block raised).
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
    ) -> PyResult<LockRequest> {
        let req = Request::new(resource, ttl, wait, shared, limit)?;
        Ok(LockRequest {
            redlock: self.inner.clone(),
            req,
            on_lost: Mutex::new(on_lost),
            entered: Mutex::new(None),
            used: Mutex::new(false),
        })
    }

    /// Takes `resource` (waiting as `lock` does) and returns it kept: a
    /// background task extends it every ttl × extend_fraction until it is
    /// released, and marks it `lost` if an extension fails. Usable with or
    /// without `with`.
    #[pyo3(signature = (resource, ttl, wait=None, *, shared=false, limit=None, on_lost=None))]
    #[allow(clippy::too_many_arguments)]
    fn guard(
        &self,
        py: Python<'_>,
        resource: String,
        ttl: f64,
        wait: Option<f64>,
        shared: bool,
        limit: Option<i64>,
        on_lost: Option<Py<PyAny>>,
    ) -> PyResult<PyLock> {
        let req = Request::new(resource, ttl, wait, shared, limit)?;
        acquire(py, &self.inner, req, false, true, on_lost)
    }

    fn __repr__(&self) -> String {
        format!(
            "Redlock({:?}, quorum={})",
            self.inner.servers(),
            self.inner.quorum()
        )
    }
}

fn acquire(
    py: Python<'_>,
    redlock: &Redlock,
    req: Request,
    once: bool,
    keep: bool,
    on_lost: Option<Py<PyAny>>,
) -> PyResult<PyLock> {
    let work = hold::acquire(redlock.clone(), req, once, keep, on_lost);
    let fresh = runtime::block(py, work)?.map_err(Failure::from)?;
    let hold = Hold::from_fresh(runtime::runtime()?, fresh)
        .ok_or_else(|| PyRuntimeError::new_err("acquired lock went missing"))?;
    Ok(PyLock {
        hold: Arc::new(hold),
    })
}

/// A held lock (one hold of it). From `Redlock.try_lock` it is plain: it
/// lasts its ttl unless extended. From `Redlock.lock` or `Redlock.guard`
/// it is kept: extended in the background until released.
///
/// As a context manager it releases the lock on exit.
#[pyclass(frozen, module = "redislock", name = "Lock")]
pub struct PyLock {
    pub(crate) hold: Arc<Hold>,
}

#[pymethods]
impl PyLock {
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

    /// True once the lock is lost: an extension reached no quorum, or its
    /// validity ran out before one did.
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

    /// True when a guard keeps extending it (`lock`, `guard`).
    #[getter]
    fn kept(&self) -> bool {
        self.hold.kept()
    }

    /// Holds of this acquisition not yet released (see `reenter`).
    #[getter]
    fn holds(&self) -> usize {
        self.hold.lock().holds()
    }

    /// Each server's answer to the acquisition (or latest extension): a
    /// list of ``(server, outcome)``.
    #[getter]
    fn outcomes(&self) -> Vec<(String, String)> {
        errors::outcome_pairs(&self.hold.lock().instances)
    }

    /// Sets the lease to `ttl` seconds (default: the lock's ttl) from now
    /// on a quorum. Raises `LockLost` if it is lost, or the extension
    /// reaches no quorum (it is then lost). A kept lock goes on being
    /// extended by its guard; its ttl is the least `ttl` may be.
    #[pyo3(signature = (ttl=None))]
    fn extend(&self, py: Python<'_>, ttl: Option<f64>) -> PyResult<()> {
        let ttl = ttl.map(config::ttl).transpose()?;
        let work = self.hold.extend(ttl)?;
        Ok(runtime::block(py, work)??)
    }

    /// Releases this hold; the last hold releases the lock on every server.
    /// Raises `LockLost` (after releasing) if the lock had been lost, and
    /// RuntimeError if this hold was released already.
    fn release(&self, py: Python<'_>) -> PyResult<()> {
        let work = self.hold.release()?;
        Ok(runtime::block(py, work)??)
    }

    /// Holds the lock once more, at once and without asking the servers:
    /// returns another `Lock` of the same acquisition. Each is released
    /// once; the last release releases the lock on the servers.
    fn reenter(&self) -> PyResult<PyLock> {
        Ok(PyLock {
            hold: Arc::new(self.hold.reenter()?),
        })
    }

    /// Returns the lock itself: a `with` block releases it at the end.
    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Releases this hold, unless released already. If the block raised,
    /// its exception goes on and a failed release is not reported.
    #[pyo3(signature = (exc_type=None, _exc=None, _tb=None))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<Bound<'_, PyAny>>,
        _exc: Option<Bound<'_, PyAny>>,
        _tb: Option<Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        if self.hold.released() {
            return Ok(false);
        }
        match self.release(py) {
            Err(e) if exc_type.as_ref().is_none_or(|t| t.is_none()) => Err(e),
            _ => Ok(false),
        }
    }

    fn __repr__(&self) -> String {
        repr("Lock", &self.hold)
    }
}

pub(crate) fn repr(class: &str, hold: &Hold) -> String {
    let lock = hold.lock();
    let token = lock.token.map_or("None".to_string(), |t| t.to_string());
    let state = if hold.released() {
        "released"
    } else if hold.lost() {
        "lost"
    } else if hold.kept() {
        "kept"
    } else {
        "held"
    };
    format!(
        "<{class} {:?} token={token} {state} validity={:.3}s>",
        hold.resource(),
        hold.validity().as_secs_f64()
    )
}

/// What `Redlock.lock` returns: a context manager that acquires on entry
/// (as `Redlock.guard`) and releases on exit. Enter it once.
#[pyclass(frozen, module = "redislock", name = "LockRequest")]
pub struct LockRequest {
    redlock: Redlock,
    req: Request,
    on_lost: Mutex<Option<Py<PyAny>>>,
    entered: Mutex<Option<Py<PyLock>>>,
    used: Mutex<bool>,
}

#[pymethods]
impl LockRequest {
    /// Acquires the lock (waiting as asked) and returns the kept `Lock`.
    fn __enter__(&self, py: Python<'_>) -> PyResult<Py<PyLock>> {
        {
            let mut used = self.used.lock().unwrap_or_else(|p| p.into_inner());
            if *used {
                return Err(PyRuntimeError::new_err(
                    "a lock request is entered once: call Redlock.lock() again",
                ));
            }
            *used = true;
        }
        let on_lost = self
            .on_lost
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        let lock = Py::new(
            py,
            acquire(py, &self.redlock, self.req.clone(), false, true, on_lost)?,
        )?;
        *self.entered.lock().unwrap_or_else(|p| p.into_inner()) = Some(lock.clone_ref(py));
        Ok(lock)
    }

    /// Releases the lock (see `Lock.__exit__`).
    #[pyo3(signature = (exc_type=None, exc=None, tb=None))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<Bound<'_, PyAny>>,
        exc: Option<Bound<'_, PyAny>>,
        tb: Option<Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let lock = self
            .entered
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        match lock {
            Some(lock) => lock.get().__exit__(py, exc_type, exc, tb),
            None => Ok(false),
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "<LockRequest {:?} ttl={}s>",
            self.req.resource,
            self.req.ttl.as_secs_f64()
        )
    }
}
