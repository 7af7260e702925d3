//! The process's one tokio runtime, and Promises settled from it.
//!
//! Every network operation runs here, never on the JavaScript thread: a
//! native method checks its arguments, starts the work on this runtime and
//! returns a Promise at once; the work settles it through its
//! environment's threadsafe function (`settle`), and the JavaScript thread
//! only converts the result. The runtime is the binding's own, not napi-rs's: napi-rs
//! shuts its runtime down when a Node environment exits (a worker thread
//! ending), and the crate's connections, guards and background releases
//! must outlive that; a lease nobody released ends with its ttl when the
//! process exits.

use std::future::Future;
use std::sync::OnceLock;

use napi::bindgen_prelude::{Object, ToNapiValue};
use napi::{Env, Error, Result, Status};
use tokio::runtime::Runtime;

use crate::settle::Settle;

static RUNTIME: OnceLock<std::result::Result<Runtime, String>> = OnceLock::new();

/// The runtime, made on first use, with one worker per core beside the
/// JavaScript thread's, at most two: enough for the I/O of many locks.
///
/// On two cores one worker, not two: the JavaScript thread keeps the other
/// core, and a second worker only stole tasks and woke the first. With
/// 32 callers on five local servers one worker made 15,300–18,600 cycles
/// per second against 14,100–14,800 for two, interleaved
/// (docs/design-binding-calls.md); one caller the same.
pub fn runtime() -> Result<&'static Runtime> {
    let made = RUNTIME.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(cores.saturating_sub(1).clamp(1, 2))
            .thread_name("redislock")
            .enable_all()
            .build()
            .map_err(|e| format!("redislock: could not start its runtime: {e}"))
    });
    made.as_ref().map_err(|e| Error::new(Status::GenericFailure, e.clone()))
}

/// A Promise of the result of the work `start` makes; the work is made
/// and runs on the runtime.
///
/// Made there, not here: the crate's futures are large (an acquisition's
/// is about 15 KB), and a future made on the JavaScript thread was copied
/// into its task there and freed on a runtime thread, in another malloc
/// arena. With 32 callers the copies and the page faults of the heap they
/// grew took about 15 % of the JavaScript thread's samples (`perf`), and
/// that thread is the package's bottleneck. The task spawned here holds
/// only `start`'s captures; the work is boxed when the task first runs.
pub fn promise<'env, T, F, S>(env: &'env Env, start: S) -> Result<Object<'env>>
where
    T: ToNapiValue + Send + 'static,
    F: Future<Output = Result<T>> + Send + 'static,
    S: FnOnce() -> F + Send + 'static,
{
    let rt = runtime()?;
    let (mut settle, promise) = Settle::new(env.raw())?;
    rt.spawn(async move {
        let result = Box::pin(start()).await;
        settle.finish(result);
    });
    Ok(Object::from_raw(env.raw(), promise))
}
