//! Group membership (issue 61): `Group` and `AsyncGroup` (over a `Redlock`
//! and an `AsyncRedlock`), the `Membership` and `AsyncMembership` a `join`
//! returns, and `Member`. What a group is lives in the crate
//! (`redlock::members`); here it gets Python's names, seconds, exceptions
//! and context managers; a membership several Python threads or tasks
//! share (proclaim side by side, leave once) is the crate's
//! `SharedMembership`, as a leadership is its `SharedLeadership`.

use std::future::Future;
use std::time::Instant;

use pyo3::prelude::*;
use pyo3::types::PyTuple;
use pyo3::PyClass;
use redlock::hold::{Failure, Span};
use redlock::{Group, Member, Membership, Released, SharedMembership};

use crate::aio;
use crate::async_api::{aexit, started, PyAsyncRedlock};
use crate::bases::PyClient;
use crate::config;
use crate::errors::py;
use crate::exit;
use crate::hold::{background, NAMES};
use crate::runtime;
use crate::sync_api::PyRedlock;

fn failed(e: redlock::Error) -> PyErr {
    py(e.into())
}

/// A join's deadline: `timeout` (seconds, a timedelta or a duration
/// string) from now; none for `None` or `math.inf`.
fn deadline(timeout: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Instant>> {
    match config::optional_span("join() argument 'timeout'", timeout)? {
        None => Ok(None),
        Some(Span::Number(t)) if t == f64::INFINITY => Ok(None),
        Some(t) => Ok(Instant::now().checked_add(NAMES.span("timeout", t).map_err(py)?)),
    }
}

/// A member as a quorum of servers list it: `owner`, `token`, `value`.
/// Compared by all three.
#[pyclass(frozen, eq, hash, module = "redislock", name = "Member")]
#[derive(PartialEq, Eq, Hash)]
pub struct PyMember {
    /// The hold's owner as the servers store it.
    #[pyo3(get)]
    owner: String,
    /// The member's fencing token: larger than every member's that joined
    /// before it left.
    #[pyo3(get)]
    token: i64,
    /// What the member advertises.
    #[pyo3(get)]
    value: String,
}

impl From<Member> for PyMember {
    fn from(m: Member) -> PyMember {
        PyMember { owner: m.owner, token: m.token, value: m.value }
    }
}

#[pymethods]
impl PyMember {
    fn __repr__(&self) -> String {
        format!("Member(owner={:?}, token={}, value={:?})", self.owner, self.token, self.value)
    }
}

async fn members(group: Group) -> PyResult<Vec<PyMember>> {
    Ok(group.members().await.map_err(failed)?.into_iter().map(PyMember::from).collect())
}

/// What `Group` and `AsyncGroup` share: the crate's group and its
/// properties. Not made directly.
#[pyclass(subclass, frozen, module = "redislock", name = "_GroupState")]
pub struct PyGroupState {
    inner: Group,
}

impl PyGroupState {
    fn init<T: PyClass<BaseType = PyGroupState>>(
        client: &redlock::Redlock,
        name: &str,
        ttl: Option<&Bound<'_, PyAny>>,
        class: T,
    ) -> PyResult<PyClassInitializer<T>> {
        let ttl = ttl.filter(|t| !t.is_none()).map(|t| config::ttl("Group", t)).transpose()?;
        let inner = Group::named(client.clone(), name, ttl, &NAMES).map_err(failed)?;
        Ok(PyClassInitializer::from(PyGroupState { inner }).add_subclass(class))
    }

    fn inner<'a, T: PyClass<BaseType = PyGroupState>>(group: &'a Bound<'_, T>) -> &'a Group {
        &group.as_super().get().inner
    }
}

#[pymethods]
impl PyGroupState {
    /// The group's name.
    #[getter]
    fn name(&self) -> String {
        self.inner.name().to_string()
    }

    /// The group's key on the servers (``redlock:group:NAME``).
    #[getter]
    fn resource(&self) -> String {
        self.inner.resource().to_string()
    }

    /// A member's lease, in seconds.
    #[getter]
    fn ttl(&self) -> f64 {
        self.inner.ttl().as_secs_f64()
    }

    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        Ok(format!("<{} {:?}>", slf.get_type().name()?, slf.get().inner.name()))
    }
}

/// A group of members on a `Redlock`'s servers: each `join`s with a value
/// (its address), anyone lists the `members` a quorum agrees on.
///
/// `redlock` must bind holds to the connection
/// (``Redlock(servers, release_on_disconnect=True)``), so that a member
/// that dies is listed no more a lock-delay later; other settings raise
/// `ConfigError` naming what to change. `ttl`: a member's lease in
/// seconds (default 10). See docs/python.md, Group membership.
#[pyclass(extends = PyGroupState, frozen, module = "redislock", name = "Group")]
pub struct PyGroup;

#[pymethods]
impl PyGroup {
    #[new]
    #[pyo3(signature = (redlock, name, ttl=None))]
    fn new(redlock: &Bound<'_, PyRedlock>, name: &str, ttl: Option<&Bound<'_, PyAny>>) -> PyResult<PyClassInitializer<Self>> {
        PyGroupState::init(PyClient::inner(redlock), name, ttl, PyGroup)
    }

    /// Joins the group with `value` (not empty) and returns the
    /// `Membership`, kept (extended in the background) until it leaves.
    /// Waits behind an exclusive holder of the group's key, if any; with
    /// `timeout` (seconds), raises `NotAcquired` when it has not joined by
    /// then. A ``with`` block leaves at its end.
    #[pyo3(signature = (value, timeout=None))]
    fn join<'py>(slf: &Bound<'py, Self>, value: String, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<Bound<'py, PyMembership>> {
        let (group, deadline) = (PyGroupState::inner(slf).clone(), deadline(timeout)?);
        let joined = runtime::block_or_drop(slf.py(), async move { group.join_until(&value, deadline).await })?.map_err(failed)?;
        Bound::new(slf.py(), PyClassInitializer::from(PyMembershipState::new(joined)).add_subclass(PyMembership))
    }

    /// The members now, in join order: a list of `Member`. Raises
    /// `RedlockError` when too few servers answered to tell.
    fn members(slf: &Bound<'_, Self>) -> PyResult<Vec<PyMember>> {
        runtime::block(slf.py(), members(PyGroupState::inner(slf).clone()))?
    }
}

/// The asyncio twin of `Group`, over an `AsyncRedlock`: `join` and
/// `members` are awaitable.
#[pyclass(extends = PyGroupState, frozen, module = "redislock", name = "AsyncGroup")]
pub struct PyAsyncGroup;

#[pymethods]
impl PyAsyncGroup {
    #[new]
    #[pyo3(signature = (redlock, name, ttl=None))]
    fn new(redlock: &Bound<'_, PyAsyncRedlock>, name: &str, ttl: Option<&Bound<'_, PyAny>>) -> PyResult<PyClassInitializer<Self>> {
        PyGroupState::init(PyClient::inner(redlock), name, ttl, PyAsyncGroup)
    }

    /// Awaitable: an `AsyncMembership`, as `Group.join`. Cancelling the
    /// awaiting task gives the join up.
    #[pyo3(signature = (value, timeout=None))]
    fn join<'py>(slf: &Bound<'py, Self>, value: String, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<Bound<'py, PyAny>> {
        let (group, deadline) = (PyGroupState::inner(slf).clone(), deadline(timeout)?);
        aio::future(slf.py(), async move {
            let joined = group.join_until(&value, deadline).await.map_err(failed)?;
            Ok(Joined(PyMembershipState::new(joined)))
        })
    }

    /// Awaitable: the members now, as `Group.members`.
    fn members<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        aio::future(slf.py(), members(PyGroupState::inner(slf).clone()))
    }
}

/// A join, made an `AsyncMembership` only when handed to the awaiting
/// task; dropped unconverted (the task was cancelled), it leaves in the
/// background.
struct Joined(PyMembershipState);

impl<'py> IntoPyObject<'py> for Joined {
    type Target = PyAsyncMembership;
    type Output = Bound<'py, PyAsyncMembership>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, PyAsyncMembership>> {
        Bound::new(py, PyClassInitializer::from(self.0).add_subclass(PyAsyncMembership))
    }
}

/// What `Membership` and `AsyncMembership` share: the crate's shared
/// membership (proclamations side by side, left once, after the
/// proclamations under way; dropped without leaving, it leaves in the
/// background) and its properties. Not made directly.
#[pyclass(subclass, frozen, module = "redislock", name = "_MembershipState")]
pub struct PyMembershipState {
    shared: SharedMembership,
}

impl PyMembershipState {
    fn new(m: Membership) -> PyMembershipState {
        PyMembershipState { shared: SharedMembership::new(m, background) }
    }

    fn shared<'a, T: PyClass<BaseType = PyMembershipState>>(m: &'a Bound<'_, T>) -> &'a SharedMembership {
        &m.as_super().get().shared
    }
}

/// The leave an `async with` block of a membership ends with: none once
/// it left.
fn unleft(shared: &SharedMembership) -> Option<impl Future<Output = Result<Released, Failure>> + Send + 'static> {
    if shared.has_left() {
        None
    } else {
        shared.leave().ok()
    }
}

#[pymethods]
impl PyMembershipState {
    /// The group's name.
    #[getter]
    fn group(&self) -> String {
        self.shared.group().to_string()
    }

    /// This member's fencing token (see `Member.token`).
    #[getter]
    fn token(&self) -> i64 {
        self.shared.token()
    }

    /// The owner the servers list this member under (`Member.owner`).
    #[getter]
    fn owner(&self) -> String {
        self.shared.owner().to_string()
    }

    /// What this member advertises now (see `proclaim`).
    #[getter]
    fn value(&self) -> String {
        self.shared.value()
    }

    /// True once the membership is lost: an extension reached no quorum,
    /// or its validity ran out (readers may list it no more).
    #[getter]
    fn lost(&self) -> bool {
        self.shared.is_lost()
    }

    /// True once `leave` was called.
    #[getter]
    fn left(&self) -> bool {
        self.shared.has_left()
    }

    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        let me = &slf.get().shared;
        let state = if me.has_left() {
            "left"
        } else if me.is_lost() {
            "lost"
        } else {
            "member"
        };
        Ok(format!("<{} {:?} token={} value={:?} {state}>", slf.get_type().name()?, me.group(), me.token(), me.value()))
    }
}

/// This member's place in its group: `token`, `owner`, `value`, `lost`.
/// Extended in the background until it leaves. A ``with`` block leaves at
/// its end.
#[pyclass(extends = PyMembershipState, frozen, module = "redislock", name = "Membership")]
pub struct PyMembership;

#[pymethods]
impl PyMembership {
    /// Advertises `value` instead (not empty); token and lease stay.
    /// Returns once a quorum stored it (`members` then lists it); raises
    /// `RedlockError` when no quorum did, `LockReleased` after `leave`.
    fn proclaim(slf: &Bound<'_, Self>, value: String) -> PyResult<()> {
        let work = PyMembershipState::shared(slf).proclaim(value).map_err(py)?;
        runtime::block(slf.py(), work)?.map_err(py)
    }

    /// Leaves the group now: the hold is released on every server. Raises
    /// `LockLost` (after leaving) if the membership had been lost, as
    /// `Leadership.resign` does, and `LockReleased` if it left already.
    fn leave(slf: &Bound<'_, Self>) -> PyResult<()> {
        // Counted from now: the interpreter's exit waits for it.
        let work = exit::release(PyMembershipState::shared(slf).leave().map_err(py)?);
        runtime::block(slf.py(), work)?.map(drop).map_err(py)
    }

    /// Returns the membership itself: a `with` block leaves at its end.
    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Leaves, unless left already. If the block raised, its exception
    /// goes on and a failed leave is not reported.
    #[pyo3(signature = (exc_type=None, *_rest))]
    fn __exit__(slf: &Bound<'_, Self>, exc_type: Option<Bound<'_, PyAny>>, _rest: &Bound<'_, PyTuple>) -> PyResult<bool> {
        if PyMembershipState::shared(slf).has_left() {
            return Ok(false);
        }
        match Self::leave(slf) {
            Err(e) if !config::raised(exc_type.as_ref()) => Err(e),
            _ => Ok(false),
        }
    }
}

/// The asyncio twin of `Membership`: `proclaim` and `leave` are
/// awaitable; an ``async with`` block leaves at its end.
#[pyclass(extends = PyMembershipState, frozen, module = "redislock", name = "AsyncMembership")]
pub struct PyAsyncMembership;

#[pymethods]
impl PyAsyncMembership {
    /// Awaitable: advertises `value` instead, as `Membership.proclaim`.
    fn proclaim<'py>(slf: &Bound<'py, Self>, value: String) -> PyResult<Bound<'py, PyAny>> {
        let work = PyMembershipState::shared(slf).proclaim(value).map_err(py)?;
        aio::future(slf.py(), async move { work.await.map_err(py) })
    }

    /// Awaitable: leaves the group, as `Membership.leave` (`LockLost`
    /// after leaving a lost membership).
    fn leave<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let work = started(PyMembershipState::shared(slf).leave().map_err(py)?)?;
        aio::future(slf.py(), work)
    }

    /// Awaitable: the membership itself; an `async with` block leaves at its end.
    fn __aenter__<'py>(slf: Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let me = slf.unbind();
        aio::future(py, async move { Ok(me) })
    }

    /// Awaitable: leaves unless left already; if the block raised, its
    /// exception goes on and a failed leave is not reported.
    #[pyo3(signature = (exc_type=None, *_rest))]
    fn __aexit__<'py>(
        slf: &Bound<'py, Self>,
        exc_type: Option<Bound<'py, PyAny>>,
        _rest: &Bound<'py, PyTuple>,
    ) -> PyResult<Bound<'py, PyAny>> {
        aexit(slf.py(), unleft(PyMembershipState::shared(slf)), config::raised(exc_type.as_ref()))
    }
}
