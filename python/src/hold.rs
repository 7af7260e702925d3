//! The crate's holds (`redlock::hold`) for the blocking `Lock` and the
//! asyncio `AsyncLock` alike: what Python adds is the `on_lost` callback,
//! a request entered once (`Pending`), and where releases of what is
//! dropped go (`background`: counted, so the interpreter's exit waits for
//! them).

use std::future::Future;
use std::sync::Mutex;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use redlock::hold::{self, Acquired, Hold, Request, Work};
use redlock::{Names, Redlock, Unit};
use tokio::runtime::Runtime;

use crate::errors::py;
use crate::exit;
use crate::runtime;
use crate::sync::locked;

/// Python's names are the crate's (`request_timeout`); times are seconds.
pub const NAMES: Names = Names { unit: Unit::Seconds, ..Names::RUST };

/// Where a hold or an acquisition dropped unreleased releases its lock:
/// on the runtime, counted (`exit::shutdown` waits for it). In a child
/// forked after the runtime started, nowhere: the parent's runtime is not
/// there to stop the keeper on, and the parent still holds the lock.
pub fn background(work: Work) {
    match runtime::usable() {
        Some(rt) => {
            rt.spawn(exit::release(work));
        }
        None => std::mem::forget(work),
    }
}

/// A lock just acquired, on its way to Python with its `on_lost`
/// callback; dropped before it gets there, it releases the lock.
pub struct Fresh {
    acquired: Acquired,
    on_lost: Option<Py<PyAny>>,
}

impl Fresh {
    /// The hold, handed over; with `on_lost`, a task on the runtime calls
    /// it (from a thread of its blocking pool) when the lock is lost.
    pub fn hold(self) -> PyResult<Hold> {
        let rt = runtime::runtime()?;
        let hold = self.acquired.hold();
        if let Some(callback) = self.on_lost {
            watch(rt, hold.when_acquisition_lost(), callback);
        }
        Ok(hold)
    }
}

/// An acquisition under way, for the runtime to run: the blocking and the
/// asyncio API take it, whatever started it.
pub trait Acquisition: Future<Output = PyResult<Fresh>> + Send + 'static {}

impl<F: Future<Output = PyResult<Fresh>> + Send + 'static> Acquisition for F {}

/// Acquires as `req` asks, kept by a guard (`keep`) or not.
pub fn acquire(redlock: Redlock, req: Request, keep: bool, on_lost: Option<Py<PyAny>>) -> impl Acquisition {
    async move {
        let acquired = hold::acquire(redlock, req, keep, background).await.map_err(|e| py(e.into()))?;
        Ok(Fresh { acquired, on_lost })
    }
}

/// What `Redlock.lock` and `AsyncRedlock.lock` return keeps for its entry:
/// an acquisition as `guard` makes, to start once.
pub struct Pending {
    redlock: Redlock,
    req: Request,
    /// The on_lost callback until entered, `None` after: a second entry is
    /// refused, since the first one's exit would not release its lock.
    unused: Mutex<Option<Option<Py<PyAny>>>>,
}

impl Pending {
    pub fn new(redlock: Redlock, req: Request, on_lost: Option<Py<PyAny>>) -> Pending {
        Pending { redlock, req, unused: Mutex::new(Some(on_lost)) }
    }

    /// The acquisition, the first time; a RuntimeError after. `client`
    /// names the class whose `lock()` to call again.
    pub fn start(&self, client: &str) -> PyResult<impl Acquisition> {
        let on_lost = locked(&self.unused)
            .take()
            .ok_or_else(|| PyRuntimeError::new_err(format!("a lock request is entered once: call {client}.lock() again")))?;
        Ok(acquire(self.redlock.clone(), self.req.clone(), true, on_lost))
    }

    /// ``<LockRequest "resource" ttl=Xs>``, with `class` for the name.
    pub fn repr(&self, class: &str) -> String {
        format!("<{class} {:?} ttl={}s>", self.req.resources.to_string(), self.req.ttl.as_secs_f64())
    }
}

/// Calls `callback` once if `lost` comes to `true`.
pub fn watch(rt: &Runtime, lost: impl Future<Output = bool> + Send + 'static, callback: Py<PyAny>) {
    rt.spawn(async move {
        if !lost.await {
            return;
        }
        // Not on the thread driving the runtime, which must never wait for
        // the GIL (`runtime`: a Python thread in a call may be driving it).
        let _ = tokio::task::spawn_blocking(move || {
            // None once the interpreter exits: nobody left to tell.
            exit::attach(|py| {
                if let Err(e) = callback.call0(py) {
                    e.write_unraisable(py, Some(callback.bind(py)));
                }
            })
        })
        .await;
    });
}
