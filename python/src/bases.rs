//! The base classes of the blocking and the asyncio classes, with what
//! reads the same for both: `_Client` (of `Redlock` and `AsyncRedlock`)
//! holds the crate's client, `_LockState` (of `Lock` and `AsyncLock`) the
//! crate's `Hold` and the properties. The subclasses add what differs
//! (blocking or awaitable operations, `with` or `async with`).

use std::sync::Arc;

use pyo3::prelude::*;

use pyo3::PyClass;
use redlock::hold::Hold;
use redlock::Redlock;

use crate::config::Kwargs;
use crate::hold::{self, Acquisition, Pending};
use crate::{config, errors};

/// The client of `Redlock` and `AsyncRedlock`: the servers and settings.
/// Not made directly; they derive from it.
#[pyclass(subclass, frozen, module = "redislock", name = "_Client")]
pub struct PyClient {
    inner: Redlock,
}

impl PyClient {
    /// A new `Redlock` or `AsyncRedlock` (`class`) over `inner`.
    pub fn init<T: PyClass<BaseType = PyClient>>(inner: Redlock, class: T) -> PyClassInitializer<T> {
        PyClassInitializer::from(PyClient { inner }).add_subclass(class)
    }

    /// `Redlock(servers, **options)` or `AsyncRedlock(...)` (`class`).
    pub fn from_arguments<T: PyClass<BaseType = PyClient>>(
        servers: &Bound<'_, PyAny>,
        options: Option<Kwargs<'_, '_>>,
        class: T,
    ) -> PyResult<PyClassInitializer<T>> {
        Ok(PyClient::init(config::new_redlock(T::NAME, servers, options)?, class))
    }

    /// The client of a `Redlock` or `AsyncRedlock`.
    pub fn inner<'a, T: PyClass<BaseType = PyClient>>(client: &'a Bound<'_, T>) -> &'a Redlock {
        &client.as_super().get().inner
    }

    /// The acquisition of `try_lock` (one round, plain) or `guard` (kept),
    /// for the blocking or the asyncio class to wait for.
    pub fn acquisition<T: PyClass<BaseType = PyClient>>(
        client: &Bound<'_, T>,
        method: &str,
        (resource, ttl, wait): (String, f64, Option<f64>),
        options: Option<Kwargs<'_, '_>>,
    ) -> PyResult<impl Acquisition> {
        let (req, on_lost) = config::request(method, resource, ttl, wait, options)?;
        Ok(hold::acquire(PyClient::inner(client).clone(), req, method == "guard", on_lost))
    }

    /// What `lock` keeps for its entry.
    pub fn pending<T: PyClass<BaseType = PyClient>>(
        client: &Bound<'_, T>,
        (resource, ttl, wait): (String, f64, Option<f64>),
        options: Option<Kwargs<'_, '_>>,
    ) -> PyResult<Pending> {
        let (req, on_lost) = config::request("lock", resource, ttl, wait, options)?;
        Ok(Pending::new(PyClient::inner(client).clone(), req, on_lost))
    }
}

#[pymethods]
impl PyClient {
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

    /// ``Redlock([...], quorum=N)``, named after the object's own class.
    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        let inner = &slf.get().inner;
        Ok(format!("{}({:?}, quorum={})", slf.get_type().name()?, inner.servers(), inner.quorum()))
    }
}

/// The state of one hold of a lock: the properties `Lock` and `AsyncLock`
/// share. Not made directly; they derive from it.
#[pyclass(subclass, frozen, module = "redislock", name = "_LockState")]
pub struct PyLockState {
    hold: Arc<Hold>,
}

impl PyLockState {
    /// A new `Lock` or `AsyncLock` (`class`) over `hold`.
    pub fn init<T>(hold: Hold, class: T) -> PyClassInitializer<T>
    where
        T: PyClass<BaseType = PyLockState>,
    {
        PyClassInitializer::from(PyLockState { hold: Arc::new(hold) }).add_subclass(class)
    }

    /// The hold of a `Lock` or `AsyncLock`. Their methods reach it through
    /// here: their own structs are empty, the hold lives in this base.
    pub fn hold<'a, T>(lock: &'a Bound<'_, T>) -> &'a Arc<Hold>
    where
        T: PyClass<BaseType = PyLockState>,
    {
        &lock.as_super().get().hold
    }
}

#[pymethods]
impl PyLockState {
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

    /// ``<Lock "resource" token=N state validity=Xs>``, named after the
    /// object's own class (`Lock` or `AsyncLock`).
    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        let class = slf.get_type().name()?;
        let hold = &slf.get().hold;
        let token = hold.lock().token.map_or("None".to_string(), |t| t.to_string());
        let state = hold.state();
        Ok(format!("<{class} {:?} token={token} {state} validity={:.3}s>", hold.resource(), hold.validity().as_secs_f64()))
    }
}
