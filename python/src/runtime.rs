//! The process's one tokio runtime, and waiting on it from Python threads.
//!
//! The runtime has one scheduler (tokio's current-thread flavour), driven
//! by whichever thread needs it. A Python thread blocked in a call, alone,
//! drives it itself for the length of the call (its work, the connections'
//! tasks, any other task), so that a server's reply wakes that very thread:
//! no hand-over between threads on the way. Calls that overlap (several
//! Python threads) leave their work to the thread that drives it and wait
//! for the result. The rest of the time the binding's own thread (`drive`)
//! drives it, for the asyncio API and the background work (keepers,
//! releases of dropped locks, on_lost watchers). Why, with the figures:
//! docs/design-binding-calls.md.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Mutex, OnceLock};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use tokio::runtime::{Builder, Runtime};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::exit;
use crate::sync::locked;

/// How often a blocked call looks for signals: Ctrl-C must interrupt a
/// `lock(..., wait=60)` promptly, and the check needs the GIL.
const SIGNAL_POLL: Duration = Duration::from_millis(100);

/// How long the driving thread stays out after a blocking call drove the
/// runtime: it takes the runtime back once no call has started for this
/// long, so that a thread making calls back to back (the Python code
/// between them takes microseconds) drives every one of them without a
/// hand-over. Tasks that no call drives meanwhile (asyncio work started
/// then) wait about this long at most.
const IDLE: Duration = Duration::from_millis(1);

/// How long after calls last overlapped a call still leaves its work to
/// the driving thread instead of driving the runtime itself: with several
/// Python threads calling, taking the runtime in turns costs more
/// hand-overs than it saves.
const OVERLAP: Duration = Duration::from_millis(10);

/// The scheduler's ticks between looks at the work other threads hand it
/// (tokio's default: 31). With many Python threads handing work over, the
/// shorter interval serves theirs sooner: 32 threads on keys of their own
/// made 1.2-1.6 times the cycles per second with it, 32 on one key (whose
/// rate its line's hand-overs between servers bound) 0.8-0.9 times, in
/// runs too noisy to tell 2 from 8 (docs/design-binding-calls.md).
const GLOBAL_QUEUE_INTERVAL: u32 = 2;

/// The process that first used the runtime. A child forked after that has
/// the runtime's memory but none of its threads: every wait would hang.
static RUNTIME_PID: OnceLock<u32> = OnceLock::new();

/// The runtime, its driving thread started; or why either could not be.
static RUNTIME: OnceLock<Result<&'static Runtime, String>> = OnceLock::new();

/// The driving thread, unparked when work waits and no call drives.
static DRIVER: OnceLock<Thread> = OnceLock::new();

/// Whether a blocking call drives the runtime now (one at most).
static DRIVING: AtomicBool = AtomicBool::new(false);

/// Blocking calls started so far: whether one started while the driving
/// thread was out.
static CALLS: AtomicU64 = AtomicU64::new(0);

/// Blocking calls waiting for work that another thread drives.
static WAITERS: AtomicUsize = AtomicUsize::new(0);

/// When calls last overlapped, in microseconds after `EPOCH` (0: never).
static OVERLAPPED_AT: AtomicU64 = AtomicU64::new(0);
static EPOCH: OnceLock<Instant> = OnceLock::new();

/// Tells the driving thread that a call is about to drive the runtime.
static ARRIVED: Notify = Notify::const_new();

/// The runtime, made on first use. It is pyo3-async-runtimes' own (built
/// as `start` asks), so the asyncio API and the blocking one share one
/// runtime per process (and `Redlock` handles, whose connections live on
/// it, work with both).
pub fn runtime() -> PyResult<&'static Runtime> {
    let pid = *RUNTIME_PID.get_or_init(std::process::id);
    if pid != std::process::id() {
        return Err(PyRuntimeError::new_err(
            "redislock was used in this process before it forked: the child has none of the parent's \
             runtime threads; use redislock only after fork (or the 'spawn' start method)",
        ));
    }
    RUNTIME.get_or_init(start).clone().map_err(PyRuntimeError::new_err)
}

/// The runtime, unless this is a child forked after its first use (or the
/// runtime could not be made).
pub fn usable() -> Option<&'static Runtime> {
    runtime().ok()
}

/// Makes the runtime and starts the thread that drives it between calls.
fn start() -> Result<&'static Runtime, String> {
    let mut builder = Builder::new_current_thread();
    builder.enable_all().global_queue_interval(GLOBAL_QUEUE_INTERVAL);
    pyo3_async_runtimes::tokio::init(builder);
    let rt = pyo3_async_runtimes::tokio::get_runtime();
    let driver = thread::Builder::new()
        .name("redislock-runtime".into())
        .spawn(move || drive(rt))
        .map_err(|e| format!("redislock: cannot start the runtime's thread: {e}"))?;
    // Set once: `start` runs once per process.
    let _ = DRIVER.set(driver.thread().clone());
    Ok(rt)
}

/// The driving thread: drives the runtime until a blocking call is about
/// to drive it, then stays out until none has started for `IDLE`, or
/// until work waits that no call drives.
fn drive(rt: &'static Runtime) -> ! {
    loop {
        rt.block_on(async {
            loop {
                let arrived = ARRIVED.notified();
                if DRIVING.load(Ordering::SeqCst) {
                    return;
                }
                arrived.await;
            }
        });
        loop {
            let seen = CALLS.load(Ordering::SeqCst);
            thread::park_timeout(IDLE);
            if !DRIVING.load(Ordering::SeqCst) && (WAITERS.load(Ordering::SeqCst) > 0 || CALLS.load(Ordering::SeqCst) == seen) {
                break;
            }
        }
    }
}

fn wake_driver() {
    if let Some(driver) = DRIVER.get() {
        driver.unpark();
    }
}

fn micros() -> u64 {
    u64::try_from(EPOCH.get_or_init(Instant::now).elapsed().as_micros()).unwrap_or(u64::MAX)
}

/// Whether calls overlapped within `OVERLAP`.
fn overlapped_lately() -> bool {
    let at = OVERLAPPED_AT.load(Ordering::Relaxed);
    at != 0 && micros().saturating_sub(at) < OVERLAP.as_micros() as u64
}

/// A blocking call waiting for its work, counted while alive.
struct Waiting;

impl Waiting {
    fn enter() -> Self {
        WAITERS.fetch_add(1, Ordering::SeqCst);
        Waiting
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        WAITERS.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The blocking call that drives the runtime, while alive.
struct Driving;

impl Driving {
    /// `None` when another call drives it.
    fn enter() -> Option<Self> {
        DRIVING.compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst).ok()?;
        ARRIVED.notify_one();
        Some(Driving)
    }
}

impl Drop for Driving {
    fn drop(&mut self) {
        DRIVING.store(false, Ordering::SeqCst);
        // Their work is on the runtime, which nobody may drive now.
        if WAITERS.load(Ordering::SeqCst) > 0 {
            wake_driver();
        }
    }
}

/// Runs `work` on the runtime and waits for its result with the GIL
/// released, so that other Python threads run meanwhile: a call alone
/// drives the runtime itself; one that overlaps others hands its work over.
/// A signal handler that raises (KeyboardInterrupt) ends the wait, not the
/// work: it finishes on the runtime and its result is dropped there (an
/// acquisition's result releases itself when dropped, see `hold::Fresh`).
/// The interpreter's exit ends it the same way, with `SystemExit`
/// (`exit`: a thread must not be inside a wait when the interpreter
/// finalizes).
pub fn block<T, F>(py: Python<'_>, work: F) -> PyResult<T>
where
    T: Send + 'static,
    F: Future<Output = T> + Send + 'static,
{
    let rt = runtime()?;
    // Refused before anything starts once the interpreter exits.
    if exit::closed() {
        return Err(exit::exiting_error());
    }
    let mut work = Box::pin(work);
    loop {
        let Ok(detached) = exit::detach() else {
            return exited(rt, work);
        };
        CALLS.fetch_add(1, Ordering::SeqCst);
        // Counted first: a call that stops driving meanwhile sees this one
        // and wakes the driving thread for it.
        let waiting = Waiting::enter();
        // A call from a thread in the runtime's context (a callback run on
        // its blocking pool, such as an on_lost handler that locks again)
        // must not drive it: it hands its work over.
        let in_runtime = tokio::runtime::Handle::try_current().is_ok();
        let alone = !in_runtime && WAITERS.load(Ordering::SeqCst) == 1 && !overlapped_lately();
        let Some(driving) = alone.then(Driving::enter).flatten() else {
            drop(detached);
            return hand_over(py, rt, work, waiting);
        };
        drop(waiting);
        let (done, returning) = py.detach(|| {
            let driving = driving;
            let done = rt.block_on(async {
                tokio::select! {
                    biased;
                    value = &mut work => Some(value),
                    () = tokio::time::sleep(SIGNAL_POLL) => None,
                    () = exit::exiting() => None,
                }
            });
            drop(driving);
            (done, detached.leave())
        });
        drop(returning);
        if let Some(value) = done {
            return Ok(value);
        }
        if exit::closed() {
            return exited(rt, work);
        }
        if let Err(e) = py.check_signals() {
            rt.spawn(work);
            return Err(e);
        }
    }
}

/// The end of a blocking call at the interpreter's exit: its work goes on
/// on the runtime, as after a signal, while the process lasts.
fn exited<T, F>(rt: &'static Runtime, work: F) -> PyResult<T>
where
    T: Send + 'static,
    F: Future<Output = T> + Send + 'static,
{
    rt.spawn(work);
    Err(exit::exiting_error())
}

/// Leaves `work` to the thread driving the runtime and waits for its
/// result.
fn hand_over<T, F>(py: Python<'_>, rt: &'static Runtime, work: F, _waiting: Waiting) -> PyResult<T>
where
    T: Send + 'static,
    F: Future<Output = T> + Send + 'static,
{
    OVERLAPPED_AT.store(micros().max(1), Ordering::Relaxed);
    let (tx, rx) = mpsc::sync_channel(1);
    rt.spawn(async move {
        let mut work = std::pin::pin!(work);
        tokio::select! {
            biased;
            value = &mut work => {
                let _ = tx.send(value);
                return;
            }
            () = exit::exiting() => {}
        }
        // The interpreter exits: the waiting thread is told (the channel
        // closes), the work goes on, as in `block`.
        drop(tx);
        work.await;
    });
    if !DRIVING.load(Ordering::SeqCst) {
        wake_driver();
    }
    // The receiver is not Sync: a mutex lets the detached closure borrow it.
    let rx = Mutex::new(rx);
    loop {
        let detached = exit::detach()?;
        let (got, returning) = py.detach(|| {
            let got = locked(&rx).recv_timeout(SIGNAL_POLL);
            (got, detached.leave())
        });
        drop(returning);
        match got {
            Ok(value) => return Ok(value),
            Err(RecvTimeoutError::Timeout) => py.check_signals()?,
            Err(RecvTimeoutError::Disconnected) if exit::closed() => return Err(exit::exiting_error()),
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
