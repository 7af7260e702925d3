//! The process's one tokio runtime, and Promises settled from it.
//!
//! Every network operation runs here, never on the JavaScript thread: a
//! native method checks its arguments, starts the work on this runtime and
//! returns a Promise at once; the work settles it through a threadsafe
//! function (napi's `JsDeferred`), and the JavaScript thread only converts
//! the result. The runtime is the binding's own, not napi-rs's: napi-rs
//! shuts its runtime down when a Node environment exits (a worker thread
//! ending), and the crate's connections, guards and background releases
//! must outlive that; a lease nobody released ends with its ttl when the
//! process exits.

use std::future::Future;
use std::sync::OnceLock;

use napi::bindgen_prelude::{Object, ToNapiValue};
use napi::{Env, Error, JsDeferred, Result, Status};
use tokio::runtime::Runtime;

static RUNTIME: OnceLock<std::result::Result<Runtime, String>> = OnceLock::new();

/// The runtime, made on first use. Two workers: enough for the I/O of
/// many locks, and the machines this runs on are often small.
pub fn runtime() -> Result<&'static Runtime> {
    let made = RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("redislock")
            .enable_all()
            .build()
            .map_err(|e| format!("redislock: could not start its runtime: {e}"))
    });
    made.as_ref().map_err(|e| Error::new(Status::GenericFailure, e.clone()))
}

type Resolver<T> = Box<dyn FnOnce(Env) -> Result<T> + Send>;

/// Settles a Promise exactly once: with the work's result, or, if the
/// work's task ends without one (a panic, the runtime going away), with an
/// error. A Promise never settled would keep the event loop alive forever.
struct Settle<T: ToNapiValue + Send + 'static>(Option<JsDeferred<T, Resolver<T>>>);

impl<T: ToNapiValue + Send + 'static> Settle<T> {
    fn finish(&mut self, result: Result<T>) {
        if let Some(deferred) = self.0.take() {
            match result {
                Ok(value) => deferred.resolve(Box::new(move |_env| Ok(value))),
                Err(e) => deferred.reject(e),
            }
        }
    }
}

impl<T: ToNapiValue + Send + 'static> Drop for Settle<T> {
    fn drop(&mut self) {
        self.finish(Err(Error::new(Status::GenericFailure, "redislock: the operation's task ended without a result".to_string())));
    }
}

/// A Promise of `work`'s result; the work runs on the runtime.
pub fn promise<'env, T, F>(env: &'env Env, work: F) -> Result<Object<'env>>
where
    T: ToNapiValue + Send + 'static,
    F: Future<Output = Result<T>> + Send + 'static,
{
    let rt = runtime()?;
    let (deferred, promise) = env.create_deferred::<T, Resolver<T>>()?;
    let mut settle = Settle(Some(deferred));
    rt.spawn(async move {
        let result = work.await;
        settle.finish(result);
    });
    Ok(promise)
}
