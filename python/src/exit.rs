//! Interpreter exit. The runtime's threads outlive the interpreter: a
//! thread of theirs that attaches to Python while it finalizes can crash
//! the process ("PyGILState_Release: thread state ... must be current").
//! So every attach from a runtime thread goes through `attach`, and an
//! `atexit` hook (`shutdown`, registered at import) closes that gate before
//! finalization starts: it waits, with the GIL released and for a bounded
//! time, for the attaches under way and for the releases already asked
//! for, then no runtime thread touches Python again.

use std::future::Future;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use pyo3::prelude::*;

use crate::sync::locked;

/// The most `shutdown` waits, in all: attaches under way (an asyncio
/// completion, an on_lost callback) and releases (a few server round
/// trips, each bounded by the client's timeouts).
const DRAIN: Duration = Duration::from_secs(2);

#[derive(Default)]
struct Counts {
    /// Set by `shutdown`: no attach from a runtime thread after.
    closed: bool,
    /// Runtime threads inside `attach` now.
    attached: usize,
    /// Releases asked for and not finished (`release`).
    releases: usize,
}

static COUNTS: Mutex<Counts> = Mutex::new(Counts { closed: false, attached: 0, releases: 0 });
static CHANGED: Condvar = Condvar::new();

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

/// The atexit hook: closes the gate and waits (GIL released, at most
/// `DRAIN`) for the attaches under way and the releases asked for. A lock
/// still held after (never released, or its release not done in time)
/// ends with its ttl. Idempotent.
#[pyfunction]
pub fn shutdown(py: Python<'_>) {
    py.detach(|| {
        let deadline = Instant::now() + DRAIN;
        let mut counts = locked(&COUNTS);
        counts.closed = true;
        while counts.attached > 0 || counts.releases > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            counts = CHANGED.wait_timeout(counts, left).unwrap_or_else(|p| p.into_inner()).0;
        }
    });
}
