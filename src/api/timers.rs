//! Timers: a plain Rust function run after a delay, with or without data.
//!
//! Redis calls one C function per timer with one data pointer. A timer
//! without data passes the handler itself as that pointer (no allocation);
//! one with data boxes the handler beside it, and the box is freed when
//! the timer fires (the handler gets the data by value) or is stopped.
//! Both are created through the module's detached context, so they can be
//! armed where Redis hands the module none (an unlink callback, a server
//! event). The only `extern "C"` functions are the two trampolines here.

use std::ffi::c_void;
use std::marker::PhantomData;
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};

use redis_module::raw;

use super::{rm, Ctx, RedisModuleCtx, ERR, OK};

/// A detached context of this module for timers, usable where Redis hands
/// the module none (an unlink callback, a server event).
static TIMER_CTX: AtomicPtr<RedisModuleCtx> = AtomicPtr::new(ptr::null_mut());

/// At load: takes the timers' context; false if Redis gave none.
pub fn init_timer_ctx(ctx: Ctx) -> bool {
    let own = rm!(RedisModule_GetDetachedThreadSafeContext(ctx.raw()) else ptr::null_mut());
    TIMER_CTX.store(own, Ordering::Relaxed);
    !own.is_null()
}

/// The module's detached context, for a call Redis makes without one (a
/// publication from the unlink callback); `None` before the load took it.
pub fn detached_ctx() -> Option<Ctx> {
    let ctx = timer_ctx();
    (!ctx.is_null()).then(|| Ctx::new(ctx))
}

fn timer_ctx() -> *mut RedisModuleCtx {
    TIMER_CTX.load(Ordering::Relaxed)
}

type Trampoline = unsafe extern "C" fn(*mut RedisModuleCtx, *mut c_void);

/// Creates a timer; `None` if Redis made none.
fn create(ms: i64, fire: Trampoline, data: *mut c_void) -> Option<raw::RedisModuleTimerID> {
    let id = rm!(RedisModule_CreateTimer(timer_ctx(), ms, Some(fire), data) else 0);
    (id != 0).then_some(id)
}

/// Stops a pending timer and hands back its data pointer; `None` when it
/// was no longer pending (it fired or was stopped).
fn stop(id: raw::RedisModuleTimerID) -> Option<*mut c_void> {
    let mut data: *mut c_void = ptr::null_mut();
    (rm!(RedisModule_StopTimer(timer_ctx(), id, &mut data) else ERR) == OK).then_some(data)
}

/// A pending timer that runs a plain `fn(Ctx)`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct TimerId(raw::RedisModuleTimerID);

/// Arms a timer that runs `handler` in `ms` milliseconds; `None` if Redis
/// made none.
pub fn after(ms: i64, handler: fn(Ctx)) -> Option<TimerId> {
    create(ms, fire, handler as *mut c_void).map(TimerId)
}

unsafe extern "C" fn fire(ctx: *mut RedisModuleCtx, data: *mut c_void) {
    if data.is_null() {
        return;
    }
    // SAFETY: `after` passed a `fn(Ctx)` as the data pointer.
    let handler = unsafe { std::mem::transmute::<*mut c_void, fn(Ctx)>(data) };
    handler(Ctx::new(ctx));
}

impl TimerId {
    /// Stops the timer; false when it was no longer pending.
    pub fn stop(self) -> bool {
        stop(self.0).is_some()
    }

    /// Stops the timer and arms it again `ms` from now with the same
    /// handler; `None` when it was no longer pending.
    pub fn restart(self, ms: i64) -> Option<TimerId> {
        let data = stop(self.0)?;
        create(ms.max(0), fire, data).map(TimerId)
    }

    /// The id as a number, to keep in an atomic.
    pub fn to_bits(self) -> u64 {
        self.0
    }

    /// An id kept by `to_bits`.
    pub fn from_bits(bits: u64) -> TimerId {
        TimerId(bits)
    }
}

/// What a timer with data carries while it is pending.
struct Armed<T> {
    handler: fn(Ctx, T),
    data: T,
}

/// A pending timer that runs a `fn(Ctx, T)` with the `T` it was armed
/// with; the `T` is dropped if the timer is stopped.
pub struct TimerWith<T>(raw::RedisModuleTimerID, PhantomData<fn(T)>);

impl<T> Clone for TimerWith<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for TimerWith<T> {}

impl<T> std::fmt::Debug for TimerWith<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("TimerWith").field(&self.0).finish()
    }
}

/// Arms a timer that runs `handler(ctx, data)` in `ms` milliseconds;
/// `None` (and `data` dropped) if Redis made none.
pub fn after_with<T>(ms: i64, handler: fn(Ctx, T), data: T) -> Option<TimerWith<T>> {
    let armed = Box::into_raw(Box::new(Armed { handler, data }));
    match create(ms, fire_with::<T>, armed.cast()) {
        Some(id) => Some(TimerWith(id, PhantomData)),
        None => {
            // SAFETY: Redis did not take the box.
            drop(unsafe { Box::from_raw(armed) });
            None
        }
    }
}

unsafe extern "C" fn fire_with<T>(ctx: *mut RedisModuleCtx, data: *mut c_void) {
    if data.is_null() {
        return;
    }
    // SAFETY: `after_with::<T>` boxed an `Armed<T>`; a timer fires once.
    let armed = unsafe { Box::from_raw(data.cast::<Armed<T>>()) };
    let Armed { handler, data } = *armed;
    handler(Ctx::new(ctx), data);
}

impl<T> TimerWith<T> {
    /// Stops the timer and drops its data; false when it was no longer
    /// pending (it fired: its handler took the data).
    pub fn stop(self) -> bool {
        match stop(self.0) {
            Some(data) => {
                if !data.is_null() {
                    // SAFETY: this timer's data is a boxed `Armed<T>`, now
                    // no longer Redis's.
                    drop(unsafe { Box::from_raw(data.cast::<Armed<T>>()) });
                }
                true
            }
            None => false,
        }
    }

    /// Stops the timer and arms it again `ms` from now with the same
    /// handler and data (no allocation); `None` when it was no longer
    /// pending.
    pub fn restart(self, ms: i64) -> Option<TimerWith<T>> {
        let data = stop(self.0)?;
        match create(ms.max(0), fire_with::<T>, data) {
            Some(id) => Some(TimerWith(id, PhantomData)),
            None => {
                if !data.is_null() {
                    // SAFETY: as in `stop`; Redis did not take it again.
                    drop(unsafe { Box::from_raw(data.cast::<Armed<T>>()) });
                }
                None
            }
        }
    }
}
