//! Leader election: `Election` and `AsyncElection` (over a `Redlock` and
//! an `AsyncRedlock`), the `Leadership` and `AsyncLeadership` a campaign
//! returns, `Leader`, and the iterators of `observe`. What an election is
//! lives in the crate (`redlock::election`, its `SharedLeadership` for a
//! leadership several Python threads or tasks share); here it gets
//! Python's names, seconds, exceptions, `on_lost` and context managers.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use pyo3::exceptions::{PyRuntimeError, PyStopAsyncIteration};
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use pyo3::PyClass;
use redlock::election::{Election, Leader, SharedLeadership};
use redlock::hold::{Failure, Span};
use redlock::Released;

use crate::aio;
use crate::async_api::{aexit, started, PyAsyncRedlock};
use crate::bases::PyClient;
use crate::config;
use crate::errors::py;
use crate::exit;
use crate::hold::{background, watch, NAMES};
use crate::runtime;
use crate::sync::locked;
use crate::sync_api::PyRedlock;

/// `redlock::Error` as the package's exception.
fn failed(e: redlock::Error) -> PyErr {
    py(e.into())
}

/// A campaign's deadline: `timeout` (seconds, a timedelta or a duration
/// string) from now; none for `None` or `math.inf`.
fn deadline(timeout: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Instant>> {
    match config::optional_span("campaign() argument 'timeout'", timeout)? {
        None => Ok(None),
        Some(Span::Number(t)) if t == f64::INFINITY => Ok(None),
        Some(t) => Ok(Instant::now().checked_add(NAMES.span("timeout", t).map_err(py)?)),
    }
}

/// A campaign's leadership, with `on_lost` called (from another thread)
/// the moment it is lost.
fn leading(shared: SharedLeadership, on_lost: Option<Py<PyAny>>) -> PyResult<SharedLeadership> {
    let rt = runtime::runtime()?;
    if let Some(callback) = on_lost {
        watch(rt, shared.when_lost(), callback);
    }
    Ok(shared)
}

/// The leader a quorum of servers agrees on: `value` and `term` (its
/// fencing token). Compared by both.
#[pyclass(frozen, eq, hash, module = "redislock", name = "Leader")]
#[derive(PartialEq, Eq, Hash)]
pub struct PyLeader {
    /// What the leader advertises ("" when nothing).
    #[pyo3(get)]
    value: String,
    /// The leader's term: larger than every earlier leader's.
    #[pyo3(get)]
    term: i64,
}

impl From<Leader> for PyLeader {
    fn from(l: Leader) -> PyLeader {
        PyLeader { value: l.value, term: l.term }
    }
}

#[pymethods]
impl PyLeader {
    #[new]
    fn new(value: String, term: i64) -> PyLeader {
        PyLeader { value, term }
    }

    fn __repr__(&self) -> String {
        format!("Leader(value={:?}, term={})", self.value, self.term)
    }
}

/// What `Election` and `AsyncElection` share: the crate's election and
/// its properties. Not made directly.
#[pyclass(subclass, frozen, module = "redislock", name = "_ElectionState")]
pub struct PyElectionState {
    inner: Election,
}

impl PyElectionState {
    /// `Election(redlock, name, value, ttl, observe_interval)` of `client`
    /// (the crate's checks: a ConfigError for settings an election cannot
    /// keep its promises with).
    fn init<T: PyClass<BaseType = PyElectionState>>(
        client: &redlock::Redlock,
        name: &str,
        value: &str,
        ttl: Option<&Bound<'_, PyAny>>,
        observe_interval: Option<&Bound<'_, PyAny>>,
        class: T,
    ) -> PyResult<PyClassInitializer<T>> {
        let ttl = ttl.filter(|t| !t.is_none()).map(|t| config::ttl("Election", t)).transpose()?;
        let mut inner = Election::named(client.clone(), name, value, ttl, &NAMES).map_err(failed)?;
        if let Some(every) = config::optional_span("Election() argument 'observe_interval'", observe_interval)? {
            inner = inner.with_observe_interval(NAMES.span("observe_interval", every).map_err(py)?);
        }
        Ok(PyClassInitializer::from(PyElectionState { inner }).add_subclass(class))
    }

    fn inner<'a, T: PyClass<BaseType = PyElectionState>>(e: &'a Bound<'_, T>) -> &'a Election {
        &e.as_super().get().inner
    }
}

#[pymethods]
impl PyElectionState {
    /// The election's name.
    #[getter]
    fn name(&self) -> String {
        self.inner.name().to_string()
    }

    /// What this candidate advertises when it leads.
    #[getter]
    fn value(&self) -> String {
        self.inner.value().to_string()
    }

    /// The leader's lease, in seconds: extended every third of it.
    #[getter]
    fn ttl(&self) -> f64 {
        self.inner.ttl().as_secs_f64()
    }

    /// Seconds the servers keep a leader's hold after its connection
    /// closed: how long a dead leader's successor waits.
    #[getter]
    fn lock_delay(&self) -> f64 {
        self.inner.lock_delay().as_secs_f64()
    }

    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        let e = &slf.get().inner;
        Ok(format!("<{} {:?} value={:?} ttl={}s>", slf.get_type().name()?, e.name(), e.value(), e.ttl().as_secs_f64()))
    }
}

/// The changes of leader `observe` yields, for the two iterators.
type Changes = Arc<tokio::sync::Mutex<Pin<Box<dyn Stream<Item = Leader> + Send>>>>;

fn changes(election: &Election) -> Changes {
    Arc::new(tokio::sync::Mutex::new(Box::pin(election.observe())))
}

/// The next change. Dropped while it waits (Ctrl-C, a cancelled task),
/// the change it was reading is read again by the next call: none is lost.
async fn next(changes: Changes) -> Option<PyLeader> {
    changes.lock().await.next().await.map(PyLeader::from)
}

/// A leader election on a `Redlock`'s servers, modelled on etcd's: this
/// candidate `campaign`s (waits in the election's fair line until it
/// leads), anyone reads the `leader` or `observe`s each change.
///
/// `redlock` must bind holds to the connection
/// (``Redlock(servers, release_on_disconnect=True)``), so that a leader
/// that dies is followed a lock-delay later; other settings raise
/// `ConfigError` naming what to change. `ttl`: the leader's lease in
/// seconds (default 10), `observe_interval`: how often `observe`
/// subscribes again to a server it lost, and reads the leader while fewer
/// than a quorum can be heard (default 0.2). See docs/election.md.
#[pyclass(extends = PyElectionState, frozen, module = "redislock", name = "Election")]
pub struct PyElection;

#[pymethods]
impl PyElection {
    #[new]
    #[pyo3(signature = (redlock, name, value, ttl=None, observe_interval=None))]
    fn new(
        redlock: &Bound<'_, PyRedlock>,
        name: &str,
        value: &str,
        ttl: Option<&Bound<'_, PyAny>>,
        observe_interval: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyClassInitializer<Self>> {
        PyElectionState::init(PyClient::inner(redlock), name, value, ttl, observe_interval, PyElection)
    }

    /// Waits in the election's line until this candidate leads, and
    /// returns its `Leadership` (kept: extended in the background). With
    /// `timeout` (seconds), raises `NotAcquired` when it has not led by
    /// then. Ctrl-C ends the wait and gives the place in line up.
    /// `on_lost`: called once, with no arguments and from another thread,
    /// if the leadership is lost. A ``with`` block resigns at its end::
    ///
    ///     with election.campaign() as lead:
    ///         serve(term=lead.term)
    #[pyo3(signature = (timeout=None, *, on_lost=None))]
    fn campaign<'py>(
        slf: &Bound<'py, Self>,
        timeout: Option<&Bound<'_, PyAny>>,
        on_lost: Option<Py<PyAny>>,
    ) -> PyResult<Bound<'py, PyLeadership>> {
        let py = slf.py();
        let (election, deadline) = (PyElectionState::inner(slf).clone(), deadline(timeout)?);
        let shared =
            runtime::block_or_drop(
                py,
                async move { election.campaign_until(deadline).await.map(|l| SharedLeadership::new(l, background)) },
            )?
            .map_err(failed)?;
        let state = PyLeadershipState::new(slf.as_super().get(), leading(shared, on_lost.filter(|c| !c.is_none(py)))?);
        Bound::new(py, PyClassInitializer::from(state).add_subclass(PyLeadership))
    }

    /// The leader now, as a quorum of servers agree on it: a `Leader`, or
    /// None (nobody leads, or a handover is under way). Raises
    /// `RedlockError` when too few servers answered to tell.
    fn leader(slf: &Bound<'_, Self>) -> PyResult<Option<PyLeader>> {
        let election = PyElectionState::inner(slf).clone();
        let leader = runtime::block(slf.py(), async move { election.leader().await })?.map_err(failed)?;
        Ok(leader.map(PyLeader::from))
    }

    /// An iterator of `Leader`: each new term and each new value, in term
    /// order (never a lower term after a higher one). It never ends by
    /// itself; each step blocks until the next change (Ctrl-C ends it).
    fn observe(slf: &Bound<'_, Self>) -> PyObserver {
        PyObserver { changes: changes(PyElectionState::inner(slf)) }
    }
}

/// The asyncio twin of `Election`, over an `AsyncRedlock`: `campaign`,
/// `leader` are awaitable, `observe` an async iterator.
#[pyclass(extends = PyElectionState, frozen, module = "redislock", name = "AsyncElection")]
pub struct PyAsyncElection;

#[pymethods]
impl PyAsyncElection {
    #[new]
    #[pyo3(signature = (redlock, name, value, ttl=None, observe_interval=None))]
    fn new(
        redlock: &Bound<'_, PyAsyncRedlock>,
        name: &str,
        value: &str,
        ttl: Option<&Bound<'_, PyAny>>,
        observe_interval: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyClassInitializer<Self>> {
        PyElectionState::init(PyClient::inner(redlock), name, value, ttl, observe_interval, PyAsyncElection)
    }

    /// Awaitable: an `AsyncLeadership`, as `Election.campaign`. Cancelling
    /// the awaiting task gives the place in line up. Also an async
    /// context manager that resigns at its end::
    ///
    ///     async with election.campaign() as lead:
    ///         await serve(term=lead.term)
    #[pyo3(signature = (timeout=None, *, on_lost=None))]
    fn campaign(slf: &Bound<'_, Self>, timeout: Option<&Bound<'_, PyAny>>, on_lost: Option<Py<PyAny>>) -> PyResult<AsyncCampaign> {
        let timeout = match config::optional_span("campaign() argument 'timeout'", timeout)? {
            None => None,
            Some(Span::Number(t)) if t == f64::INFINITY => None,
            Some(t) => Some(NAMES.span("timeout", t).map_err(py)?),
        };
        let on_lost = on_lost.filter(|c| !c.is_none(slf.py()));
        Ok(AsyncCampaign {
            election: slf.clone().into_super().unbind(),
            timeout,
            unused: Mutex::new(Some(on_lost)),
            entered: Arc::new(Mutex::new(None)),
        })
    }

    /// Awaitable: the leader now, as `Election.leader`.
    fn leader<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let election = PyElectionState::inner(slf).clone();
        aio::future(slf.py(), async move { Ok(election.leader().await.map_err(failed)?.map(PyLeader::from)) })
    }

    /// An async iterator of `Leader`, as `Election.observe`.
    fn observe(slf: &Bound<'_, Self>) -> PyAsyncObserver {
        PyAsyncObserver { changes: changes(PyElectionState::inner(slf)) }
    }
}

type Slot = Arc<Mutex<Option<Py<PyAsyncLeadership>>>>;

/// What `AsyncElection.campaign` returns: awaitable once (an
/// `AsyncLeadership`), or entered once as an async context manager that
/// resigns at its end.
#[pyclass(frozen, module = "redislock", name = "AsyncCampaign")]
pub struct AsyncCampaign {
    election: Py<PyElectionState>,
    timeout: Option<Duration>,
    /// The on_lost callback until started, `None` after.
    unused: Mutex<Option<Option<Py<PyAny>>>>,
    entered: Slot,
}

/// A campaign won, made an `AsyncLeadership` only when handed to the
/// awaiting task; dropped unconverted (the task was cancelled), the
/// leadership resigns in the background.
struct Campaigned {
    state: PyLeadershipState,
    slot: Option<Slot>,
}

impl<'py> IntoPyObject<'py> for Campaigned {
    type Target = PyAsyncLeadership;
    type Output = Bound<'py, PyAsyncLeadership>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, PyAsyncLeadership>> {
        let lead = Bound::new(py, PyClassInitializer::from(self.state).add_subclass(PyAsyncLeadership))?;
        if let Some(slot) = self.slot {
            *locked(&slot) = Some(lead.clone().unbind());
        }
        Ok(lead)
    }
}

impl AsyncCampaign {
    fn start<'py>(&self, py: Python<'py>, slot: Option<Slot>) -> PyResult<Bound<'py, PyAny>> {
        let on_lost = locked(&self.unused)
            .take()
            .ok_or_else(|| PyRuntimeError::new_err("a campaign is awaited or entered once: call AsyncElection.campaign() again"))?;
        let state = self.election.get();
        let (election, name) = (state.inner.clone(), state.inner.name().to_string());
        let deadline = self.timeout.and_then(|t| Instant::now().checked_add(t));
        aio::future(py, async move {
            let leadership = election.campaign_until(deadline).await.map_err(failed)?;
            let shared = leading(SharedLeadership::new(leadership, background), on_lost)?;
            Ok(Campaigned { state: PyLeadershipState { name, shared }, slot })
        })
    }
}

#[pymethods]
impl AsyncCampaign {
    fn __await__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        slf.get().start(slf.py(), None)?.call_method0("__await__")
    }

    /// Awaitable: campaigns and returns the `AsyncLeadership`.
    fn __aenter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.start(py, Some(Arc::clone(&self.entered)))
    }

    /// Awaitable: resigns (see `AsyncLeadership.__aexit__`).
    #[pyo3(signature = (exc_type=None, *_rest))]
    fn __aexit__<'py>(
        &self,
        py: Python<'py>,
        exc_type: Option<Bound<'py, PyAny>>,
        _rest: &Bound<'py, PyTuple>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let raised = config::raised(exc_type.as_ref());
        match locked(&self.entered).take() {
            Some(lead) => aexit(py, unresigned(&lead.bind(py).as_super().get().shared), raised),
            None => aio::future(py, async { Ok(false) }),
        }
    }
}

/// What `Leadership` and `AsyncLeadership` share: the crate's shared
/// leadership and its properties. Not made directly.
#[pyclass(subclass, frozen, module = "redislock", name = "_LeadershipState")]
pub struct PyLeadershipState {
    name: String,
    shared: SharedLeadership,
}

impl PyLeadershipState {
    fn new(election: &PyElectionState, shared: SharedLeadership) -> PyLeadershipState {
        PyLeadershipState { name: election.inner.name().to_string(), shared }
    }

    fn shared<'a, T: PyClass<BaseType = PyLeadershipState>>(lead: &'a Bound<'_, T>) -> &'a SharedLeadership {
        &lead.as_super().get().shared
    }
}

#[pymethods]
impl PyLeadershipState {
    /// The election's name.
    #[getter]
    fn name(&self) -> String {
        self.name.clone()
    }

    /// The term: this leader's fencing token, larger than every earlier
    /// leader's. Pass it with every write the leader makes.
    #[getter]
    fn term(&self) -> i64 {
        self.shared.term()
    }

    /// What this leader advertises now (see `proclaim`).
    #[getter]
    fn value(&self) -> String {
        self.shared.value()
    }

    /// True once the leadership is lost: an extension reached no quorum,
    /// or its validity ran out. Stop acting as the leader.
    #[getter]
    fn lost(&self) -> bool {
        self.shared.is_lost()
    }

    /// True once `resign` was called.
    #[getter]
    fn resigned(&self) -> bool {
        self.shared.is_resigned()
    }

    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        let me = slf.get();
        let state = if me.shared.is_resigned() {
            "resigned"
        } else if me.shared.is_lost() {
            "lost"
        } else {
            "leading"
        };
        Ok(format!("<{} {:?} term={} value={:?} {state}>", slf.get_type().name()?, me.name, me.shared.term(), me.shared.value()))
    }
}

/// This candidate leads: its `term`, `value`, `lost`. Extended in the
/// background until it resigns. A ``with`` block resigns at its end.
#[pyclass(extends = PyLeadershipState, frozen, module = "redislock", name = "Leadership")]
pub struct PyLeadership;

#[pymethods]
impl PyLeadership {
    /// Advertises `value` instead; term and lease stay. Returns once a
    /// quorum stored it (every `leader` then reads it); raises
    /// `RedlockError` when no quorum did, `LockLost` once the leadership
    /// is lost, `LockReleased` after `resign`.
    fn proclaim(slf: &Bound<'_, Self>, value: String) -> PyResult<()> {
        let work = PyLeadershipState::shared(slf).proclaim(value).map_err(py)?;
        runtime::block(slf.py(), work)?.map_err(py)
    }

    /// Steps down: the next candidate in line leads at once. Raises
    /// `LockLost` (after resigning) if the leadership had been lost, and
    /// `LockReleased` if it resigned already.
    fn resign(slf: &Bound<'_, Self>) -> PyResult<()> {
        // Counted from now: the interpreter's exit waits for it.
        let work = exit::release(PyLeadershipState::shared(slf).resign().map_err(py)?);
        runtime::block(slf.py(), work)?.map(drop).map_err(py)
    }

    /// Returns the leadership itself: a `with` block resigns at its end.
    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Resigns, unless resigned already. If the block raised, its
    /// exception goes on and a failed resignation is not reported.
    #[pyo3(signature = (exc_type=None, *_rest))]
    fn __exit__(slf: &Bound<'_, Self>, exc_type: Option<Bound<'_, PyAny>>, _rest: &Bound<'_, PyTuple>) -> PyResult<bool> {
        if PyLeadershipState::shared(slf).is_resigned() {
            return Ok(false);
        }
        match Self::resign(slf) {
            Err(e) if !config::raised(exc_type.as_ref()) => Err(e),
            _ => Ok(false),
        }
    }
}

/// The asyncio twin of `Leadership`: `proclaim` and `resign` are
/// awaitable; an ``async with`` block resigns at its end.
#[pyclass(extends = PyLeadershipState, frozen, module = "redislock", name = "AsyncLeadership")]
pub struct PyAsyncLeadership;

#[pymethods]
impl PyAsyncLeadership {
    /// Awaitable: advertises `value` instead, as `Leadership.proclaim`.
    fn proclaim<'py>(slf: &Bound<'py, Self>, value: String) -> PyResult<Bound<'py, PyAny>> {
        let work = PyLeadershipState::shared(slf).proclaim(value).map_err(py)?;
        aio::future(slf.py(), async move { work.await.map_err(py) })
    }

    /// Awaitable: steps down, as `Leadership.resign`.
    fn resign<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let work = started(PyLeadershipState::shared(slf).resign().map_err(py)?)?;
        aio::future(slf.py(), work)
    }

    /// Awaitable: the leadership itself; an `async with` block resigns at its end.
    fn __aenter__<'py>(slf: Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let me = slf.unbind();
        aio::future(py, async move { Ok(me) })
    }

    /// Awaitable: resigns unless resigned already; if the block raised,
    /// its exception goes on and a failed resignation is not reported.
    #[pyo3(signature = (exc_type=None, *_rest))]
    fn __aexit__<'py>(
        slf: &Bound<'py, Self>,
        exc_type: Option<Bound<'py, PyAny>>,
        _rest: &Bound<'py, PyTuple>,
    ) -> PyResult<Bound<'py, PyAny>> {
        aexit(slf.py(), unresigned(PyLeadershipState::shared(slf)), config::raised(exc_type.as_ref()))
    }
}

/// The resignation an `async with` block of a leadership ends with: none
/// once it resigned.
fn unresigned(shared: &SharedLeadership) -> Option<impl Future<Output = Result<Released, Failure>> + Send + 'static> {
    if shared.is_resigned() {
        None
    } else {
        shared.resign().ok()
    }
}

/// What `Election.observe` returns: each step blocks until the leader
/// changes. It never ends by itself.
#[pyclass(frozen, module = "redislock", name = "Observer")]
pub struct PyObserver {
    changes: Changes,
}

#[pymethods]
impl PyObserver {
    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<PyLeader>> {
        runtime::block_or_drop(py, next(Arc::clone(&self.changes)))
    }
}

/// What `AsyncElection.observe` returns: an async iterator, each step
/// awaiting the next change. It never ends by itself.
#[pyclass(frozen, module = "redislock", name = "AsyncObserver")]
pub struct PyAsyncObserver {
    changes: Changes,
}

#[pymethods]
impl PyAsyncObserver {
    fn __aiter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __anext__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let changes = Arc::clone(&self.changes);
        aio::future(py, async move { next(changes).await.ok_or_else(|| PyStopAsyncIteration::new_err(())) })
    }
}
