//! Promises settled from the runtime's threads through one threadsafe
//! function per Node environment.
//!
//! napi-rs's `JsDeferred` makes a threadsafe function for every Promise:
//! each call created one on the JavaScript thread (an async handle, a
//! cleanup hook, global handles) and closed it when settled, and each
//! settle woke the event loop on a handle of its own. With many callers
//! that bookkeeping was a large part of the JavaScript thread, the
//! package's bottleneck. Here an environment has one function, made at
//! its first call and kept until it tears down; settles from any thread
//! are queued on it, and the event loop drains the queue in one wake-up.
//!
//! The function keeps the event loop alive while a Promise of its
//! environment is pending (referenced then, unreferenced when none is),
//! as a pending network call should. When the environment tears down (a
//! worker thread ending), the function is released before Node frees it,
//! under the lock that every settle takes: a settle that comes later
//! drops its result (a lock in it releases itself) instead of calling
//! into freed memory.

use std::cell::RefCell;
use std::ffi::c_void;
use std::ptr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use napi::bindgen_prelude::ToNapiValue;
use napi::{check_status, sys, Error, Result, Status};

/// An environment's threadsafe function. The pointer is Node's; calling it
/// from any thread is what it is for, and `Settler::function` guards its
/// lifetime.
#[derive(Clone, Copy)]
struct Function(sys::napi_threadsafe_function);

// SAFETY: a threadsafe function is made to be called from any thread; it
// is only used under `Settler::function`'s lock, which teardown empties
// before Node frees it.
unsafe impl Send for Function {}
unsafe impl Sync for Function {}

/// A Promise's deferred: settled on its environment's thread only (in
/// `settle_on_js_thread`), carried there from the runtime.
struct Deferred(sys::napi_deferred);

// SAFETY: the runtime's threads only carry it; it is used on the
// environment's thread, by `settle_on_js_thread`.
unsafe impl Send for Deferred {}

/// How a Promise settles, run on its environment's thread.
type Conclude = Box<dyn FnOnce(sys::napi_env) -> Result<sys::napi_value> + Send>;

/// One queued settle.
struct Item {
    deferred: Deferred,
    conclude: Conclude,
}

/// One environment's way back to its JavaScript thread.
pub struct Settler {
    /// The threadsafe function; `None` once the environment tore down.
    function: RwLock<Option<Function>>,
    /// Promises made and not yet settled (counted on the JavaScript
    /// thread): the function keeps the event loop alive while any is.
    pending: AtomicUsize,
}

thread_local! {
    /// This thread's environment and its settler. One Node environment
    /// runs on a thread at a time (the main thread's, or a worker's).
    static SETTLER: RefCell<Option<(usize, Arc<Settler>)>> = const { RefCell::new(None) };
}

impl Settler {
    /// The settler of the environment `env`, made at its first call.
    fn of(env: sys::napi_env) -> Result<Arc<Settler>> {
        SETTLER.with(|cell| {
            let mut cell = cell.borrow_mut();
            if let Some((owner, settler)) = cell.as_ref() {
                if *owner == env as usize {
                    return Ok(Arc::clone(settler));
                }
            }
            let settler = Settler::new(env)?;
            *cell = Some((env as usize, Arc::clone(&settler)));
            Ok(settler)
        })
    }

    fn new(env: sys::napi_env) -> Result<Arc<Settler>> {
        // The runtime's threads run this addon's code and may outlive a
        // worker's environment: the addon must stay loaded.
        napi::bindgen_prelude::retain_current_module_for_unload_safety();
        let settler = Arc::new(Settler { function: RwLock::new(None), pending: AtomicUsize::new(0) });
        let mut name = ptr::null_mut();
        // SAFETY: on the environment's thread, with a valid environment.
        check_status!(
            unsafe { sys::napi_create_string_utf8(env, c"redislock".as_ptr(), 9, &mut name) },
            "redislock: naming the settle queue failed"
        )?;
        // One reference, owned by the function: freed by `finalized`.
        let context = Arc::into_raw(Arc::clone(&settler)) as *mut c_void;
        let mut function = ptr::null_mut();
        // SAFETY: as above; `context` stays valid until `finalized` runs.
        let made = check_status!(
            unsafe {
                sys::napi_create_threadsafe_function(
                    env,
                    ptr::null_mut(),
                    ptr::null_mut(),
                    name,
                    0,
                    1,
                    context,
                    Some(finalized),
                    context,
                    Some(settle_on_js_thread),
                    &mut function,
                )
            },
            "redislock: making the settle queue failed"
        );
        if let Err(e) = made {
            // SAFETY: the function was not made, so nothing else owns it.
            drop(unsafe { Arc::from_raw(context as *const Settler) });
            return Err(e);
        }
        // Referenced only while a Promise is pending (see `expect`).
        // SAFETY: a function just made on this environment's thread.
        unsafe { sys::napi_unref_threadsafe_function(env, function) };
        *settler.function.write().unwrap_or_else(|p| p.into_inner()) = Some(Function(function));
        // One reference, owned by the cleanup hook: freed by `torn_down`.
        let hook = Arc::into_raw(Arc::clone(&settler)) as *mut c_void;
        // SAFETY: on the environment's thread. Cleanup hooks run in the
        // reverse order of their registration, and Node registered the
        // function's own teardown when it was made: `torn_down` runs first.
        let hooked = check_status!(
            unsafe { sys::napi_add_env_cleanup_hook(env, Some(torn_down), hook) },
            "redislock: watching the environment's end failed"
        );
        if let Err(e) = hooked {
            // SAFETY: the hook was not registered; `torn_down` releases
            // the function, which then frees its own reference.
            unsafe { torn_down(hook) };
            return Err(e);
        }
        Ok(settler)
    }

    /// Counts a Promise about to be made pending, keeping the event loop
    /// alive for it. On the environment's thread.
    fn expect(&self, env: sys::napi_env) {
        if self.pending.fetch_add(1, Ordering::Relaxed) == 0 {
            if let Some(Function(f)) = *self.function.read().unwrap_or_else(|p| p.into_inner()) {
                // SAFETY: a live function of this environment, on its thread.
                unsafe { sys::napi_ref_threadsafe_function(env, f) };
            }
        }
    }

    /// Counts a Promise settled; the last lets the event loop end.
    fn settled(&self, env: sys::napi_env) {
        if self.pending.fetch_sub(1, Ordering::Relaxed) == 1 {
            if let Some(Function(f)) = *self.function.read().unwrap_or_else(|p| p.into_inner()) {
                // SAFETY: as in `expect`.
                unsafe { sys::napi_unref_threadsafe_function(env, f) };
            }
        }
    }

    /// Queues `item` for the environment's thread, from any thread; with
    /// the environment gone, drops it.
    fn send(&self, item: Item) {
        let function = self.function.read().unwrap_or_else(|p| p.into_inner());
        let Some(Function(f)) = *function else {
            return;
        };
        let data = Box::into_raw(Box::new(item));
        // SAFETY: `f` is live while the read lock is held (teardown takes
        // it for writing before releasing the function); nonblocking on an
        // unbounded queue never waits.
        let status = unsafe { sys::napi_call_threadsafe_function(f, data.cast(), sys::ThreadsafeFunctionCallMode::nonblocking) };
        if status != sys::Status::napi_ok {
            // Not queued (the function closing): the item is still ours.
            // SAFETY: made by `Box::into_raw` above and not handed over.
            drop(unsafe { Box::from_raw(data) });
        }
    }
}

/// The environment is tearing down: release its function before Node
/// frees it; settles from now on drop their results.
unsafe extern "C" fn torn_down(hook: *mut c_void) {
    // SAFETY: the reference `Settler::new` gave the hook, taken back once.
    let settler = unsafe { Arc::from_raw(hook as *const Settler) };
    let function = settler.function.write().unwrap_or_else(|p| p.into_inner()).take();
    if let Some(Function(f)) = function {
        // SAFETY: a live function; `abort` closes it: queued items are
        // dropped by `settle_on_js_thread` with no environment.
        unsafe { sys::napi_release_threadsafe_function(f, sys::ThreadsafeFunctionReleaseMode::abort) };
    }
    let _ = SETTLER.try_with(|cell| {
        if let Ok(mut cell) = cell.try_borrow_mut() {
            if cell.as_ref().is_some_and(|(_, s)| Arc::ptr_eq(s, &settler)) {
                *cell = None;
            }
        }
    });
}

/// Node finalizes the function (after `torn_down`): its reference goes.
unsafe extern "C" fn finalized(_env: sys::napi_env, data: *mut c_void, _hint: *mut c_void) {
    // SAFETY: the reference `Settler::new` gave the function, taken back
    // once, here.
    let settler = unsafe { Arc::from_raw(data as *const Settler) };
    settler.function.write().unwrap_or_else(|p| p.into_inner()).take();
}

/// Settles one queued Promise, on the environment's thread (in a handle
/// scope Node opened). With no environment (a queue drained at teardown,
/// after `finalized`), the item is only dropped: `context` may be freed.
unsafe extern "C" fn settle_on_js_thread(env: sys::napi_env, _js: sys::napi_value, context: *mut c_void, data: *mut c_void) {
    // SAFETY: made by `Settler::send` with `Box::into_raw`, queued once.
    let item = unsafe { Box::from_raw(data as *mut Item) };
    if env.is_null() {
        return;
    }
    // SAFETY: with an environment, the function (which owns a reference
    // to `context`) is not finalized yet.
    let settler = unsafe { &*(context as *const Settler) };
    settler.settled(env);
    let Item { deferred, conclude } = *item;
    match conclude(env) {
        // SAFETY: the deferred of a Promise of this environment, settled once.
        Ok(value) => unsafe {
            sys::napi_resolve_deferred(env, deferred.0, value);
        },
        Err(e) => {
            // SAFETY: as above.
            let reason = unsafe { ToNapiValue::to_napi_value(env, e) }.unwrap_or(ptr::null_mut());
            unsafe { sys::napi_reject_deferred(env, deferred.0, reason) };
        }
    }
}

/// Settles one Promise exactly once: with the work's result, or, if it is
/// dropped first (a task ending in a panic, the runtime going away), with
/// an error. A Promise never settled would keep the event loop alive
/// forever.
pub struct Settle(Option<(Arc<Settler>, Deferred)>);

impl Settle {
    /// A pending Promise of the environment `env` (on its thread), and
    /// what settles it (on any).
    pub fn new(env: sys::napi_env) -> Result<(Settle, sys::napi_value)> {
        let settler = Settler::of(env)?;
        let mut deferred = ptr::null_mut();
        let mut promise = ptr::null_mut();
        // SAFETY: on the environment's thread.
        check_status!(unsafe { sys::napi_create_promise(env, &mut deferred, &mut promise) }, "redislock: making a Promise failed")?;
        settler.expect(env);
        Ok((Settle(Some((settler, Deferred(deferred)))), promise))
    }

    /// Resolves with `result`'s value or rejects with its error.
    pub fn finish<T: ToNapiValue + Send + 'static>(&mut self, result: Result<T>) {
        let conclude: Conclude = match result {
            // SAFETY: run on the environment's thread, in a handle scope.
            Ok(value) => Box::new(move |env| unsafe { T::to_napi_value(env, value) }),
            Err(e) => Box::new(move |_| Err(e)),
        };
        if let Some((settler, deferred)) = self.0.take() {
            settler.send(Item { deferred, conclude });
        }
    }
}

impl Drop for Settle {
    fn drop(&mut self) {
        self.finish::<()>(Err(Error::new(Status::GenericFailure, "redislock: the operation's task ended without a result".to_string())));
    }
}
