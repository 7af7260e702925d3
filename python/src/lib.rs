//! `redislock._redislock`: Python bindings of the `redlock` crate, the
//! Redlock quorum client. The algorithm lives in the crate only; this
//! crate converts arguments, results and errors, and runs the crate's
//! futures on one tokio runtime per process.
//!
//! - `sync_api`: `Redlock`, `Lock`, `LockRequest` (blocking, GIL released)
//! - `async_api`: `AsyncRedlock`, `AsyncLock`, `AsyncLockRequest` (asyncio)
//! - `election`: `Election`, `AsyncElection`, `Leadership`,
//!   `AsyncLeadership`, `Leader` and the iterators of `observe`
//! - `ask`: `Asked`, `AskRequest` and the iterators of `asks` (the
//!   release request)
//! - `members`: `Group`, `AsyncGroup`, `Membership`, `AsyncMembership`,
//!   `Member` (group membership)
//! - `hold`: the crate's holds (`redlock::hold`) with Python's `on_lost`
//!   and its releases counted at exit
//! - `bases`: `_Client`, the base class of `Redlock` and `AsyncRedlock`,
//!   and `_LockState`, of `Lock` and `AsyncLock` (their properties); and
//!   `client_methods!`, the constructor and acquisitions both clients share
//! - `metrics`: the client's metrics as a dict (`_Client.metrics`)
//! - `aio`: Rust futures as asyncio awaitables
//! - `exit`: the atexit hook, after which no runtime thread touches Python
//!   and no blocked call waits
//! - `config`, `errors`, `runtime`

use pyo3::prelude::*;

mod aio;
mod ask;
mod async_api;
mod bases;
mod config;
mod election;
mod errors;
mod exit;
mod hold;
mod members;
mod metrics;
mod resize;
mod runtime;
mod sync;
mod sync_api;
mod watch;

/// Native part of the `redislock` package; import from `redislock`.
#[pymodule]
fn _redislock(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("_DEFAULTS", config::defaults(m.py())?)?;
    m.add("METRICS_CONTENT_TYPE", redlock::metrics::CONTENT_TYPE)?;
    m.add_class::<bases::PyClient>()?;
    m.add_class::<bases::PyLockState>()?;
    m.add_class::<sync_api::PyRedlock>()?;
    m.add_class::<sync_api::PyLock>()?;
    m.add_class::<sync_api::LockRequest>()?;
    m.add_class::<async_api::PyAsyncRedlock>()?;
    m.add_class::<async_api::PyAsyncLock>()?;
    m.add_class::<async_api::AsyncLockRequest>()?;
    m.add_class::<election::PyLeader>()?;
    m.add_class::<election::PyElectionState>()?;
    m.add_class::<election::PyElection>()?;
    m.add_class::<election::PyAsyncElection>()?;
    m.add_class::<election::AsyncCampaign>()?;
    m.add_class::<election::PyLeadershipState>()?;
    m.add_class::<election::PyLeadership>()?;
    m.add_class::<election::PyAsyncLeadership>()?;
    m.add_class::<election::PyObserver>()?;
    m.add_class::<election::PyAsyncObserver>()?;
    m.add_class::<ask::PyAsked>()?;
    m.add_class::<ask::PyAskRequest>()?;
    m.add_class::<ask::PyAsks>()?;
    m.add_class::<ask::PyAsyncAsks>()?;
    m.add_class::<resize::PyResized>()?;
    m.add_class::<members::PyMember>()?;
    m.add_class::<members::PyGroupState>()?;
    m.add_class::<members::PyGroup>()?;
    m.add_class::<members::PyAsyncGroup>()?;
    m.add_class::<members::PyMembershipState>()?;
    m.add_class::<members::PyMembership>()?;
    m.add_class::<members::PyAsyncMembership>()?;
    m.add_class::<watch::PyChange>()?;
    m.add_class::<watch::PyAsyncWatch>()?;
    // Before finalization: no runtime thread may attach during it.
    let shutdown = wrap_pyfunction!(exit::shutdown, m)?;
    m.py().import("atexit")?.call_method1("register", (shutdown,))?;
    Ok(())
}
