//! Interpreter exit. The runtime's threads outlive the interpreter: a
//! thread of theirs that attaches to Python while it finalizes can crash
//! the process ("PyGILState_Release: thread state ... must be current").
//! So every attach from a runtime thread goes through `attach`, and an
//! `atexit` hook (`shutdown`, registered at import) closes that gate before
//! finalization starts: it waits, with the GIL released and for a bounded
//! time, for the attaches under way and for the releases already asked
//! for, then no runtime thread touches Python again.
//!
//! Python threads blocked in a call (the GIL released, `runtime::block`)
//! are the other way in: a daemon thread still inside `observe()` or a
//! `lock(..., wait=...)` when the interpreter finalizes takes the GIL
//! back from inside the binding, and CPython then ends that thread with
//! `pthread_exit()` (3.9 to 3.13), a forced unwind through the binding's
//! Rust frames, which Rust does not allow: what it does depends on the
//! build (seen: SIGSEGV at exit, issue 55). So each such wait is counted
//! (`detach`), `shutdown` wakes them all (`exiting`) and waits until they
//! are back in Python, where the call raises `SystemExit` (which ends a
//! thread quietly); a call made after raises it at once. A wait that
//! does not come back within the bound never returns to Python at all.

use std::future::Future;
use std::sync::{Condvar, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use pyo3::exceptions::PySystemExit;
use pyo3::prelude::*;
use tokio_util::sync::CancellationToken;

use crate::sync::locked;

/// The most `shutdown` waits, in all: attaches under way (an asyncio
/// completion, an on_lost callback), releases (a few server round trips,
/// each bounded by the client's timeouts) and blocked calls leaving (at
/// once: they are woken).
const DRAIN: Duration = Duration::from_secs(2);

/// How long `shutdown` waits, after `DRAIN`, for blocked calls already on
/// their way back into Python: they only need the GIL, which it released.
const RETURN: Duration = Duration::from_secs(1);

#[derive(Default)]
struct Counts {
    /// Set by `shutdown`: no attach from a runtime thread after.
    closed: bool,
    /// Runtime threads inside `attach` now.
    attached: usize,
    /// Releases asked for and not finished (`release`).
    releases: usize,
    /// Python threads waiting in a blocking call, the GIL released
    /// (`Detached`).
    detached: usize,
    /// Of those, the ones taking the GIL back (`Returning`).
    returning: usize,
    /// Set by `shutdown` when blocked calls did not leave within `DRAIN`:
    /// they never return to Python.
    abandoned: bool,
}

static COUNTS: Mutex<Counts> = Mutex::new(Counts { closed: false, attached: 0, releases: 0, detached: 0, returning: 0, abandoned: false });
static CHANGED: Condvar = Condvar::new();

/// Cancelled by `shutdown`: wakes every blocked call.
static EXITING: OnceLock<CancellationToken> = OnceLock::new();

fn exiting_token() -> &'static CancellationToken {
    EXITING.get_or_init(CancellationToken::new)
}

/// Whether `shutdown` ran: new asyncio operations are refused.
pub fn closed() -> bool {
    locked(&COUNTS).closed
}

/// One of `COUNTS`' counts of work under way, held while alive: `shutdown`
/// waits until none is.
struct Counted(fn(&mut Counts) -> &mut usize);

impl Drop for Counted {
    fn drop(&mut self) {
        *(self.0)(&mut locked(&COUNTS)) -= 1;
        CHANGED.notify_all();
    }
}

/// Resolves once the interpreter exits (`shutdown` ran): a blocked call
/// waits for it beside its work.
pub async fn exiting() {
    exiting_token().cancelled().await
}

/// What a blocking call raises once the interpreter exits: `SystemExit`,
/// which ends a (daemon) thread without a traceback.
pub fn exiting_error() -> PyErr {
    PySystemExit::new_err("redislock: the interpreter is exiting; no blocking call waits any more")
}

/// A Python thread's wait in a blocking call with the GIL released,
/// counted while alive: `shutdown` waits until it has ended. Leave it with
/// `leave`, as the last thing before the GIL is taken back.
pub struct Detached(());

/// A blocking call's wait, counted (`Detached`); `SystemExit` once the
/// interpreter exits.
pub fn detach() -> PyResult<Detached> {
    let mut counts = locked(&COUNTS);
    if counts.closed {
        return Err(exiting_error());
    }
    counts.detached += 1;
    Ok(Detached(()))
}

impl Detached {
    /// The wait is over: the thread takes the GIL back next, counted until
    /// it has it (drop the `Returning` then). If `shutdown` gave up waiting
    /// for it, the interpreter may be finalizing: this never returns, and
    /// the thread stays here (with nothing of the runtime's) until the
    /// process ends.
    pub fn leave(self) -> Returning {
        let mut counts = locked(&COUNTS);
        if counts.abandoned {
            drop(counts);
            std::mem::forget(self);
            loop {
                thread::park();
            }
        }
        counts.detached -= 1;
        counts.returning += 1;
        std::mem::forget(self);
        Returning(())
    }
}

impl Drop for Detached {
    /// Dropped without `leave` (a panic in the wait).
    fn drop(&mut self) {
        locked(&COUNTS).detached -= 1;
        CHANGED.notify_all();
    }
}

/// A blocked call taking the GIL back; drop it once it has.
pub struct Returning(());

impl Drop for Returning {
    fn drop(&mut self) {
        locked(&COUNTS).returning -= 1;
        CHANGED.notify_all();
    }
}

/// Runs `f` attached to Python, from a thread of the runtime; `None`
/// (without running it) once the interpreter exits.
pub fn attach<R>(f: impl FnOnce(Python<'_>) -> R) -> Option<R> {
    let _counted = {
        let mut counts = locked(&COUNTS);
        if counts.closed {
            return None;
        }
        counts.attached += 1;
        Counted(|c| &mut c.attached)
    };
    Python::try_attach(f)
}

/// `work` (a release) counted by `shutdown` until it ends or is dropped.
pub fn release<F: Future>(work: F) -> impl Future<Output = F::Output> {
    locked(&COUNTS).releases += 1;
    let counted = Counted(|c| &mut c.releases);
    async move {
        let out = work.await;
        drop(counted);
        out
    }
}

/// The atexit hook: closes the gate, wakes the blocked calls and waits
/// (GIL released, at most `DRAIN`) for the attaches under way, the
/// releases asked for and the blocked calls, which take the GIL back
/// meanwhile and raise `SystemExit`. A blocked call still waiting then
/// never returns (`Detached::leave`); one already taking the GIL back is
/// waited for up to `RETURN` more. A lock still held after (never
/// released, or its release not done in time) ends with its ttl.
/// Idempotent.
#[pyfunction]
pub fn shutdown(py: Python<'_>) {
    py.detach(|| {
        let now = Instant::now();
        let (deadline, last) = (now + DRAIN, now + DRAIN + RETURN);
        let mut counts = locked(&COUNTS);
        counts.closed = true;
        exiting_token().cancel();
        loop {
            let busy = counts.attached > 0 || counts.releases > 0 || counts.detached > 0;
            if counts.returning == 0 && (!busy || counts.abandoned) {
                break;
            }
            let now = Instant::now();
            if now >= deadline {
                counts.abandoned = true;
            }
            let until = if counts.abandoned { last } else { deadline };
            let left = until.saturating_duration_since(now);
            if left.is_zero() {
                break;
            }
            counts = CHANGED.wait_timeout(counts, left).unwrap_or_else(|p| p.into_inner()).0;
        }
    });
}
