//! Clients this module blocks (RM_BlockClient): the reply, disconnect and
//! free callbacks Redis calls are generic trampolines here, calling the
//! plain Rust functions of a `Blocking` implementation.

use std::ffi::{c_int, c_void};
use std::ptr;

use super::{rm, Ctx, RedisModuleBlockedClient, RedisModuleCtx, RedisModuleString, ERR, OK};

/// What this module does with a client it blocked.
pub trait Blocking {
    /// What a client is unblocked with, handed to `reply`.
    type Outcome;

    /// Answers the client with the outcome it was unblocked with (`None`:
    /// unblocked without one, e.g. by the server itself).
    fn reply(ctx: Ctx, outcome: Option<&Self::Outcome>) -> c_int;

    /// The client's connection went away, or the server unblocked it: the
    /// client is still blocked until `unblock` is called for it.
    fn disconnected(client: *mut RedisModuleBlockedClient);
}

/// Blocks the calling client without a server-side timeout; null if Redis
/// refused.
pub fn block<B: Blocking>(ctx: Ctx) -> *mut RedisModuleBlockedClient {
    let client = rm!(RedisModule_BlockClient(ctx.raw(), Some(on_reply::<B>), None, Some(free_outcome::<B>), 0) else ptr::null_mut());
    if !client.is_null() {
        rm!(RedisModule_SetDisconnectCallback(client, Some(on_disconnect::<B>)) else ());
    }
    client
}

/// Unblocks `client`, which `B::reply` then answers with `outcome`; the
/// outcome is freed once answered (or here if Redis does not take it).
pub fn unblock<B: Blocking>(client: *mut RedisModuleBlockedClient, outcome: Option<B::Outcome>) {
    let data = outcome.map_or(ptr::null_mut(), |o| Box::into_raw(Box::new(o)));
    if rm!(RedisModule_UnblockClient(client, data.cast()) else ERR) != OK && !data.is_null() {
        // SAFETY: Redis did not take the outcome.
        drop(unsafe { Box::from_raw(data) });
    }
}

unsafe extern "C" fn on_reply<B: Blocking>(ctx: *mut RedisModuleCtx, _argv: *mut *mut RedisModuleString, _argc: c_int) -> c_int {
    let data = rm!(RedisModule_GetBlockedClientPrivateData(ctx) else ptr::null_mut());
    // SAFETY: the private data is what `unblock::<B>` boxed, or null.
    B::reply(Ctx::new(ctx), unsafe { data.cast::<B::Outcome>().as_ref() })
}

unsafe extern "C" fn on_disconnect<B: Blocking>(_ctx: *mut RedisModuleCtx, client: *mut RedisModuleBlockedClient) {
    B::disconnected(client);
}

unsafe extern "C" fn free_outcome<B: Blocking>(_ctx: *mut RedisModuleCtx, data: *mut c_void) {
    if !data.is_null() {
        // SAFETY: the private data is what `unblock::<B>` boxed.
        drop(unsafe { Box::from_raw(data.cast::<B::Outcome>()) });
    }
}
