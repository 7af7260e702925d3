//! The process's one tokio runtime, and waiting on it from Python threads.

use std::future::Future;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use tokio::runtime::Runtime;
use tokio_util::sync::CancellationToken;

use crate::sync::locked;

/// How often a blocked call looks for signals: Ctrl-C must interrupt a
/// `lock(..., wait=60)` promptly, and the check needs the GIL.
const SIGNAL_POLL: Duration = Duration::from_millis(100);

/// The process that first used the runtime. A child forked after that has
/// the runtime's memory but none of its threads: every wait would hang.
static RUNTIME_PID: OnceLock<u32> = OnceLock::new();

/// The runtime, made on first use. It is pyo3-async-runtimes' own, so the
/// asyncio API and the blocking one share one runtime per process (and
/// `Redlock` handles, whose connections live on it, work with both).
pub fn runtime() -> PyResult<&'static Runtime> {
    usable().ok_or_else(|| {
        PyRuntimeError::new_err(
            "redislock was used in this process before it forked: the child has none of the parent's \
             runtime threads; use redislock only after fork (or the 'spawn' start method)",
        )
    })
}

/// The runtime, unless this is a child forked after its first use.
pub fn usable() -> Option<&'static Runtime> {
    let pid = *RUNTIME_PID.get_or_init(std::process::id);
    (pid == std::process::id()).then(pyo3_async_runtimes::tokio::get_runtime)
}

/// Runs `work` on the runtime and waits for its result with the GIL
/// released, so that other Python threads run meanwhile. A signal handler
/// that raises (KeyboardInterrupt) ends the wait, not the work: it finishes
/// on the runtime and its result is dropped there (an acquisition's result
/// releases itself when dropped, see `hold::Fresh`).
pub fn block<T, F>(py: Python<'_>, work: F) -> PyResult<T>
where
    T: Send + 'static,
    F: Future<Output = T> + Send + 'static,
{
    let rt = runtime()?;
    let (tx, rx) = mpsc::sync_channel(1);
    rt.spawn(async move {
        let _ = tx.send(work.await);
    });
    // The receiver is not Sync: a mutex lets the detached closure borrow it.
    let rx = Mutex::new(rx);
    loop {
        match py.detach(|| locked(&rx).recv_timeout(SIGNAL_POLL)) {
            Ok(value) => return Ok(value),
            Err(RecvTimeoutError::Timeout) => py.check_signals()?,
            Err(RecvTimeoutError::Disconnected) => {
                return Err(PyRuntimeError::new_err("redislock: the operation's task ended without a result"))
            }
        }
    }
}

/// `block`, but a wait that a signal ends drops `work` too, instead of
/// leaving it to finish: for work that may never finish by itself (a
/// campaign without a timeout, an observer's next change), which must not
/// keep a place in line or a read going for a caller that is gone.
pub fn block_or_drop<T, F>(py: Python<'_>, work: F) -> PyResult<T>
where
    T: Send + 'static,
    F: Future<Output = T> + Send + 'static,
{
    let cancel = CancellationToken::new();
    // Cancelled when this returns, by a signal's exception too.
    let _drop_work = cancel.clone().drop_guard();
    let done = block(py, async move {
        tokio::select! {
            value = work => Some(value),
            () = cancel.cancelled() => None,
        }
    })?;
    done.ok_or_else(|| PyRuntimeError::new_err("redislock: the operation was cancelled"))
}
