//! The blocking API: `Redlock`, `Lock`, `LockRequest`. Every network wait
//! runs on the shared runtime with the GIL released (`runtime::block`).

use std::sync::Mutex;

use crate::async_api::PyAsyncRedlock;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::bases::{client_methods, PyClient, PyLockState};
use crate::config::{self, Kwargs};
use crate::errors::py;
use crate::exit;
use crate::hold::{Acquisition, Pending};
use crate::runtime;
use crate::sync::locked;

/// A Redlock client over independent Redis servers that run the redislock
/// module (or plain Redis with `mode="script"`, without fencing tokens).
///
/// `servers` are URLs such as ``"redis://127.0.0.1:7001"``. Times are in
/// seconds. `quorum` defaults to a majority. Connections are made on first
/// use and shared by every thread using this object; it is safe to share.
/// Each acquisition is a new owner: threads sharing one `Redlock` exclude
/// each other like separate processes.
///
/// ``rediss://`` servers speak TLS, checked against the system's roots, or
/// the CA of `ssl_ca_certs` (a PEM file); `ssl_certfile` and `ssl_keyfile`
/// are this client's certificate and key for servers that check clients;
/// ``ssl_cert_reqs="none"`` turns certificate checks off (tests only).
/// The files are read here: a bad one raises `ConfigError` naming it.
#[pyclass(extends = PyClient, frozen, module = "redislock", name = "Redlock")]
pub struct PyRedlock;

client_methods! {
    PyRedlock, acquire() => PyLock, LockRequest(Mutex::new(None)),
    try_lock:
    /// One attempt round at `resource` for `ttl` seconds, without automatic
    /// extension. Raises `NotAcquired` (`QuorumUnreachable` when too few
    /// servers answered). `resource`: one name, or a list (or tuple) of
    /// names locked all or nothing, with one token, released together.
    /// `shared=True`: a shared hold of a read-write lock; `limit=N`: a
    /// permit of a semaphore of N (`permits=K`: K of its N permits in one
    /// hold). Release it with `release()` or a `with` block; one never
    /// released ends with its ttl.
    lock:
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
    guard:
    /// Takes `resource` (waiting as `lock` does) and returns it kept: a
    /// background task extends it every ttl × extend_fraction until it is
    /// released, and marks it `lost` if an extension fails. Usable with or
    /// without `with`.
    extra: {
        /// An `AsyncRedlock` on this same client: the same connections,
        /// settings and waiting lines, for asyncio code beside threads.
        fn asyncio<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAsyncRedlock>> {
            Bound::new(slf.py(), PyClient::init(PyClient::inner(slf).clone(), PyAsyncRedlock))
        }

        /// Asks every holder of `resource` to let it go, with `message`
        /// (why, for the holder to log or weigh): each server announces it
        /// to its holders, and a holder iterating its lock's `asks()` hears
        /// it once. Nothing is released here: the holder decides. Returns
        /// an `Asked`; raises `RedlockError` unless a quorum answered.
        #[pyo3(signature = (resource, message=None))]
        fn ask(slf: &Bound<'_, Self>, resource: String, message: Option<String>) -> PyResult<crate::ask::PyAsked> {
            runtime::block(slf.py(), crate::ask::ask(PyClient::inner(slf), resource, message))?
        }

        /// Gives the semaphore `resource` (the name `try_lock(..., limit=)`
        /// takes) the limit `limit` on every server, while it is held:
        /// holders keep their permits, a larger limit lets waiters in at
        /// once, a smaller one lets nobody in until the holders above it
        /// left. Returns a `Resized` (`held` False: nobody holds it,
        /// nothing resized); raises `ValueError` for a limit outside 1 to
        /// 1024, `RedlockError` unless a quorum answered alike.
        fn resize(slf: &Bound<'_, Self>, resource: String, limit: u32) -> PyResult<crate::resize::PyResized> {
            runtime::block(slf.py(), crate::resize::resize(PyClient::inner(slf), resource, limit))?
        }
    }
}

/// Waits for `work` (an acquisition) and makes its lock a `Lock`.
fn acquire<'py>(py: Python<'py>, work: impl Acquisition) -> PyResult<Bound<'py, PyLock>> {
    let hold = runtime::block(py, work)??.hold()?;
    Bound::new(py, PyLockState::init(hold, PyLock))
}

/// A held lock (one hold of it). From `Redlock.try_lock` it is plain: it
/// lasts its ttl unless extended. From `Redlock.lock` or `Redlock.guard`
/// it is kept: extended in the background until released.
///
/// As a context manager it releases the lock on exit.
#[pyclass(extends = PyLockState, frozen, module = "redislock", name = "Lock")]
pub struct PyLock;

#[pymethods]
impl PyLock {
    /// Sets the lease to `ttl` seconds (default: the lock's ttl) from now
    /// on a quorum. Raises `LockLost` if it is lost, or the extension
    /// reaches no quorum (it is then lost), and `LockReleased` after its
    /// release. On a kept lock `ttl` becomes the guard's: it goes on
    /// extending to it, longer or shorter.
    #[pyo3(signature = (ttl=None))]
    fn extend(slf: &Bound<'_, Self>, ttl: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        let ttl = ttl.filter(|t| !t.is_none()).map(|t| config::ttl("extend", t)).transpose()?;
        let work = PyLockState::hold(slf).extend(ttl).map_err(py)?;
        runtime::block(slf.py(), work)?.map_err(py)
    }

    /// Releases this hold; the last hold releases the lock on every server.
    /// Raises `LockLost` (after releasing) if the lock had been lost, and
    /// `LockReleased` if this hold was released already.
    fn release(slf: &Bound<'_, Self>) -> PyResult<()> {
        // Counted from now: the interpreter's exit waits for it.
        let work = exit::release(PyLockState::hold(slf).release().map_err(py)?);
        runtime::block(slf.py(), work)?.map(drop).map_err(py)
    }

    /// An iterator of `AskRequest`: the asks for this hold
    /// (`Redlock.ask`), each heard once. It subscribes on its first step
    /// (an ask sent before that is not heard); each step blocks until the
    /// next ask, and it ends once the lock is lost or released. The holder
    /// decides what to do: release, or not.
    fn asks(slf: &Bound<'_, Self>) -> crate::ask::PyAsks {
        crate::ask::PyAsks::new(PyLockState::hold(slf))
    }

    /// Holds the lock once more, at once and without asking the servers:
    /// returns another `Lock` of the same acquisition. Each is released
    /// once; the last release releases the lock on the servers.
    fn reenter<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyLock>> {
        let hold = PyLockState::hold(slf).reenter().map_err(py)?;
        Bound::new(slf.py(), PyLockState::init(hold, PyLock))
    }

    /// Returns the lock itself: a `with` block releases it at the end.
    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Releases this hold, unless released already. If the block raised,
    /// its exception goes on and a failed release is not reported.
    #[pyo3(signature = (exc_type=None, *_rest))]
    fn __exit__(slf: &Bound<'_, Self>, exc_type: Option<Bound<'_, PyAny>>, _rest: &Bound<'_, PyTuple>) -> PyResult<bool> {
        if PyLockState::hold(slf).released() {
            return Ok(false);
        }
        match Self::release(slf) {
            Err(e) if !config::raised(exc_type.as_ref()) => Err(e),
            _ => Ok(false),
        }
    }
}

/// What `Redlock.lock` returns: a context manager that acquires on entry
/// (as `Redlock.guard`) and releases on exit. Enter it once.
#[pyclass(frozen, module = "redislock", name = "LockRequest")]
pub struct LockRequest {
    pending: Pending,
    entered: Mutex<Option<Py<PyLock>>>,
}

#[pymethods]
impl LockRequest {
    /// Acquires the lock (waiting as asked) and returns the kept `Lock`.
    fn __enter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyLock>> {
        let lock = acquire(py, self.pending.start("Redlock")?)?;
        *locked(&self.entered) = Some(lock.clone().unbind());
        Ok(lock)
    }

    /// Releases the lock (see `Lock.__exit__`).
    #[pyo3(signature = (exc_type=None, *rest))]
    fn __exit__(&self, py: Python<'_>, exc_type: Option<Bound<'_, PyAny>>, rest: &Bound<'_, PyTuple>) -> PyResult<bool> {
        match locked(&self.entered).take() {
            Some(lock) => PyLock::__exit__(lock.bind(py), exc_type, rest),
            None => Ok(false),
        }
    }

    fn __repr__(&self) -> String {
        self.pending.repr("LockRequest")
    }
}
