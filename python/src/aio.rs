//! Rust futures as asyncio awaitables. In place of pyo3-async-runtimes'
//! `future_into_py`, whose completion attaches to Python from a runtime
//! thread at any time, the interpreter's finalization included: here that
//! attach goes through `exit::attach`, and a cancelled awaitable's result
//! is dropped without touching Python.

use std::future::Future;
use std::sync::Mutex;

use pyo3::exceptions::PyRuntimeError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyModule;
use pyo3::IntoPyObjectExt;
use tokio_util::sync::CancellationToken;

use crate::exit;
use crate::runtime;
use crate::sync::locked;

type Convert = Box<dyn FnOnce(Python<'_>) -> PyResult<Py<PyAny>> + Send>;

/// An asyncio future of the running loop, done with `work`'s result. The
/// work runs on the shared runtime; cancelling the future drops it.
pub fn future<'py, T, F>(py: Python<'py>, work: F) -> PyResult<Bound<'py, PyAny>>
where
    T: for<'a> IntoPyObject<'a> + Send + 'static,
    F: Future<Output = PyResult<T>> + Send + 'static,
{
    let rt = runtime::runtime()?;
    if exit::closed() {
        return Err(PyRuntimeError::new_err("redislock: the interpreter is exiting; no new asyncio operation"));
    }
    let event_loop = PyModule::import(py, intern!(py, "asyncio"))?.call_method0(intern!(py, "get_running_loop"))?;
    let fut = event_loop.call_method0(intern!(py, "create_future"))?;
    let cancel = CancellationToken::new();
    fut.call_method1(intern!(py, "add_done_callback"), (OnDone { cancel: cancel.clone() },))?;
    let (event_loop, target) = (event_loop.unbind(), fut.clone().unbind());
    rt.spawn(async move {
        let result = tokio::select! {
            result = work => result,
            // Dropped here, off the interpreter; the awaiting side is gone.
            _ = cancel.cancelled() => return,
        };
        // Not on the thread driving the runtime, which must never wait for
        // the GIL (`runtime`: a Python thread in a call may be driving it).
        tokio::task::spawn_blocking(move || {
            let convert: Convert = Box::new(move |py| result.and_then(|value| value.into_py_any(py)));
            // `None` once the interpreter exits: everything is dropped
            // without it (an acquired lock is then released, `hold::Fresh`).
            exit::attach(move |py| resolve(py, event_loop, target, convert));
        });
    });
    Ok(fut)
}

/// Hands the result to the loop's thread, where `Resolve` sets it.
fn resolve(py: Python<'_>, event_loop: Py<PyAny>, target: Py<PyAny>, convert: Convert) {
    let event_loop = event_loop.into_bound(py);
    let resolve = Resolve { target, convert: Mutex::new(Some(convert)) };
    if let Err(e) = event_loop.call_method1(intern!(py, "call_soon_threadsafe"), (resolve,)) {
        // A closed loop: nobody is waiting (its result is dropped, so an
        // acquired lock is released).
        let closed = event_loop.call_method0(intern!(py, "is_closed")).and_then(|c| c.is_truthy()).unwrap_or(false);
        if !closed {
            e.write_unraisable(py, Some(&event_loop));
        }
    }
}

/// Sets the future's result on the loop's thread, converting it there: a
/// future cancelled meanwhile drops it unconverted.
#[pyclass(frozen)]
struct Resolve {
    target: Py<PyAny>,
    convert: Mutex<Option<Convert>>,
}

#[pymethods]
impl Resolve {
    fn __call__(&self, py: Python<'_>) -> PyResult<()> {
        let Some(convert) = locked(&self.convert).take() else {
            return Ok(());
        };
        let target = self.target.bind(py);
        if target.call_method0(intern!(py, "done"))?.is_truthy()? {
            return Ok(());
        }
        match convert(py) {
            Ok(value) => target.call_method1(intern!(py, "set_result"), (value,))?,
            Err(e) => target.call_method1(intern!(py, "set_exception"), (e.into_value(py),))?,
        };
        Ok(())
    }
}

/// The future's done callback: a cancelled future cancels its work.
#[pyclass(frozen)]
struct OnDone {
    cancel: CancellationToken,
}

#[pymethods]
impl OnDone {
    fn __call__(&self, fut: &Bound<'_, PyAny>) -> PyResult<()> {
        if fut.call_method0(intern!(fut.py(), "cancelled"))?.is_truthy()? {
            self.cancel.cancel();
        }
        Ok(())
    }
}
