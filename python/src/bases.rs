//! The base classes of the blocking and the asyncio classes, with what
//! reads the same for both: `_Client` (of `Redlock` and `AsyncRedlock`)
//! holds the crate's client, `_LockState` (of `Lock` and `AsyncLock`) the
//! crate's `Hold` and the properties. `client_methods!` writes the methods
//! both clients have (constructor, `try_lock`, `lock`, `guard`) once, for
//! each to wait in its own way. The subclasses add what differs (blocking
//! or awaitable operations, `with` or `async with`).

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

use pyo3::PyClass;
use redlock::hold::Hold;
use redlock::Redlock;

use crate::errors;
use crate::metrics;

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

    /// The client of a `Redlock` or `AsyncRedlock`.
    pub fn inner<'a, T: PyClass<BaseType = PyClient>>(client: &'a Bound<'_, T>) -> &'a Redlock {
        &client.as_super().get().inner
    }
}

/// The methods of `Redlock` and `AsyncRedlock`, written once: the
/// constructor, `try_lock`, `lock` and `guard`. Each class gives the docs
/// of the last three, how it waits for an acquisition (`$acquire`, making
/// a `$lock`), what its `lock` returns (`$request`, its entry kept in
/// `$entered`) and its own other methods (`$extra`).
macro_rules! client_methods {
    (
        $class:ident, $acquire:ident($($more:expr),*) => $lock:ident, $request:ident($entered:expr),
        try_lock: $(#[$try_doc:meta])* lock: $(#[$lock_doc:meta])* guard: $(#[$guard_doc:meta])* extra: { $($extra:tt)* }
    ) => {
        #[pymethods]
        impl $class {
            /// `servers`, and the keyword arguments of docs/python.md (see the
            /// stubs), each left out the Rust client's default.
            #[new]
            #[pyo3(signature = (servers, **options))]
            fn new(servers: &Bound<'_, PyAny>, options: Option<Kwargs<'_, '_>>) -> PyResult<PyClassInitializer<Self>> {
                let inner = $crate::config::new_redlock(<Self as pyo3::PyClass>::NAME, servers, options)?;
                Ok(PyClient::init(inner, $class))
            }

            $(#[$try_doc])*
            #[pyo3(signature = (resource, ttl, **options))]
            fn try_lock<'py>(slf: &Bound<'py, Self>, resource: &Bound<'py, PyAny>, ttl: &Bound<'py, PyAny>, options: Option<Kwargs<'_, 'py>>) -> PyResult<Bound<'py, $lock>> {
                let (req, on_lost) = $crate::config::request("try_lock", resource, ttl, None, options)?;
                $acquire(slf.py(), $crate::hold::acquire(PyClient::inner(slf).clone(), req, false, on_lost) $(, $more)*)
            }

            $(#[$lock_doc])*
            #[pyo3(signature = (resource, ttl, wait=None, **options))]
            fn lock(slf: &Bound<'_, Self>, resource: &Bound<'_, PyAny>, ttl: &Bound<'_, PyAny>, wait: Option<&Bound<'_, PyAny>>, options: Option<Kwargs<'_, '_>>) -> PyResult<$request> {
                let (req, on_lost) = $crate::config::request("lock", resource, ttl, wait, options)?;
                Ok($request { pending: $crate::hold::Pending::new(PyClient::inner(slf).clone(), req, on_lost), entered: $entered })
            }

            $(#[$guard_doc])*
            #[pyo3(signature = (resource, ttl, wait=None, **options))]
            fn guard<'py>(slf: &Bound<'py, Self>, resource: &Bound<'py, PyAny>, ttl: &Bound<'py, PyAny>, wait: Option<&Bound<'py, PyAny>>, options: Option<Kwargs<'_, 'py>>) -> PyResult<Bound<'py, $lock>> {
                let (req, on_lost) = $crate::config::request("guard", resource, ttl, wait, options)?;
                $acquire(slf.py(), $crate::hold::acquire(PyClient::inner(slf).clone(), req, true, on_lost) $(, $more)*)
            }

            $($extra)*
        }
    };
}

pub(crate) use client_methods;

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

    /// This client's metrics now, counted by the Rust client for every
    /// acquisition through it (and its `asyncio()` twin, its elections):
    /// a dict of the snapshot's fields (docs/python.md, Metrics), e.g.
    /// ``m["acquisitions"]["exclusive"]["granted"]["count"]``. Times in
    /// seconds.
    fn metrics<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        metrics::snapshot(py, &self.inner.metrics())
    }

    /// The same counts in Prometheus's text format (0.0.4), each series
    /// with its HELP and TYPE, as ``redlock run --metrics`` serves them:
    /// serve it with ``redislock.METRICS_CONTENT_TYPE``.
    fn metrics_text(&self) -> String {
        self.inner.metrics().to_prometheus()
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
    pub fn init<T: PyClass<BaseType = PyLockState>>(hold: Hold, class: T) -> PyClassInitializer<T> {
        PyClassInitializer::from(PyLockState { hold: Arc::new(hold) }).add_subclass(class)
    }

    /// The hold of a `Lock` or `AsyncLock`. Their methods reach it through
    /// here: their own structs are empty, the hold lives in this base.
    pub fn hold<'a, T: PyClass<BaseType = PyLockState>>(lock: &'a Bound<'_, T>) -> &'a Arc<Hold> {
        &lock.as_super().get().hold
    }
}

/// `LOCK.GUARD key owner token`: the words before the guarded command.
const GUARD_WORDS: usize = 4;

/// The crate's words before a command, then `command`'s own objects.
fn words<'py, const N: usize>(py: Python<'py>, prefix: [String; N], command: &Bound<'py, PyTuple>) -> PyResult<Bound<'py, PyList>> {
    let list = PyList::new(py, prefix)?;
    for arg in command {
        list.append(arg)?;
    }
    Ok(list)
}

/// `_LockState`'s methods: those in the leading block, and its
/// properties, each `name: Type = |hold| value` read from the crate's hold.
macro_rules! lock_state_methods {
    ({ $($extra:tt)* } $($(#[$doc:meta])* $name:ident: $ty:ty = |$hold:ident| $value:expr;)*) => {
        #[pymethods]
        impl PyLockState {
            $($(#[$doc])* #[getter] fn $name(&self) -> $ty { let $hold = &self.hold; $value })*
            $($extra)*
        }
    };
}

lock_state_methods! {
    {
        /// ``<Lock "resource" token=N state validity=Xs>``, named after the
        /// object's own class (`Lock` or `AsyncLock`).
        fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
            let class = slf.get_type().name()?;
            let hold = &slf.get().hold;
            let token = hold.lock().token.map_or("None".to_string(), |t| t.to_string());
            let state = hold.state();
            Ok(format!("<{class} {:?} token={token} {state} validity={:.3}s>", hold.resource(), hold.validity().as_secs_f64()))
        }

        /// ``["LOCK.FENCED", register, "<token>", *command]``: the write
        /// `command` fenced by this hold's token, for the caller's own
        /// client of the Redis that keeps the data, e.g. redis-py's
        /// ``data.execute_command(*lock.fenced("orders:fence", "SET", "k", "v"))``.
        /// The arguments of `command` are passed on as given. Raises
        /// `ConfigError` for a hold whose token does not fence (script
        /// mode, a shared hold, permits), `LockLost` or `LockReleased`
        /// once it is no longer held.
        #[pyo3(signature = (register, *command))]
        fn fenced<'py>(&self, register: &str, command: &Bound<'py, PyTuple>) -> PyResult<Bound<'py, PyList>> {
            let prefix = self.hold.fenced_prefix(register).map_err(errors::py)?;
            words(command.py(), prefix, command)
        }

        /// ``["LOCK.GUARD", key, owner, "<token>", command, *args]``: the
        /// command guarded by this hold, for data in a Redis that holds
        /// the lock. Raises as `fenced` does, but takes shared holds and
        /// permits too.
        #[pyo3(signature = (command, *args))]
        fn guarded<'py>(&self, command: &Bound<'py, PyAny>, args: &Bound<'py, PyTuple>) -> PyResult<Bound<'py, PyList>> {
            let prefix = self.hold.guarded_prefix().map_err(errors::py)?;
            let list = words(command.py(), prefix, args)?;
            list.insert(GUARD_WORDS, command)?;
            Ok(list)
        }
    }
    /// The resource as asked for (a permit's semaphore name); several
    /// resources locked together, their names joined with ", ".
    resource: String = |hold| hold.resource().to_string();
    /// Each resource locked, in the order given: one name, or the names of
    /// a list locked all or nothing.
    resources: Vec<String> = |hold| hold.resources().names().to_vec();
    /// The key held on the servers: the resource, or a permit's own key.
    key: String = |hold| hold.lock().resource;
    /// The random owner value of this acquisition.
    owner: String = |hold| hold.lock().owner;
    /// The fencing token: larger than every earlier holder's (None in script mode).
    token: Option<i64> = |hold| hold.lock().token;
    /// The lease asked for, in seconds.
    ttl: f64 = |hold| hold.lock().ttl.as_secs_f64();
    /// Seconds the lock is still safe to use; 0 once lost or released.
    validity: f64 = |hold| hold.validity().as_secs_f64();
    /// True once the lock is lost: an extension reached no quorum, or its
    /// validity ran out before one did.
    lost: bool = |hold| hold.lost();
    /// Why the lock was lost: ``"expired"``, ``"refused"``,
    /// ``"unreachable"`` or ``"revoked"`` (an operator took it away); None
    /// while it is not.
    loss_cause: Option<&'static str> = |hold| hold.loss_cause();
    /// True once this hold was released.
    released: bool = |hold| hold.released();
    /// True for a shared hold of a read-write lock.
    shared: bool = |hold| hold.lock().shared;
    /// True when a guard keeps extending it (`lock`, `guard`).
    kept: bool = |hold| hold.kept();
    /// Holds of this acquisition not yet released (see `reenter`).
    holds: usize = |hold| hold.lock().holds();
    /// Each server's answer to the acquisition (or latest extension): a
    /// list of ``(server, outcome)``.
    outcomes: Vec<(String, String)> = |hold| errors::outcome_pairs(&hold.lock().instances);
}
