//! Every change to a lock, one executor per kind of change: `acquire` (a
//! grant, by LOCK.ACQUIRE or by the handoff to a waiter), `release`,
//! `extend`, `apply` (a lock set exactly as given: LOCK.APPLY replaying
//! the master's grant, a lock Redis removed put back) and `disconnect`
//! (ending the hold of a connection that closed).
//!
//! Each takes the opened key and the request, asks `core` for the
//! decision (`core::grant`), stores the value (`value`, `group`), binds or
//! unbinds the hold (`session`), propagates it (`propagate`), counts it
//! (`stats`) and serves the key's line when the change freed it
//! (`waiters`); it answers with the change: what happened, the token, the
//! new lease end. This is the only code that changes a hold: the commands
//! parse and reply around it, the timers of `disconnect` and `rescue` and
//! the handoff of `waiters` call it. What a key holds is read by
//! `grants`.
//!
//! A lock command runs in Redis's single thread: the exclusive path
//! allocates nothing, logs nothing and makes no system call beyond the
//! Redis calls its change needs.

mod acquire;
mod apply;
mod disconnect;
mod extend;
mod release;

pub use acquire::{acquire, handoff, Attempt};
pub use apply::{replicated, restore};
pub use disconnect::end_closed;
pub use extend::{extend, Extended};
pub use release::{release, Released};

use std::ffi::c_int;

use redis_module::raw;

use crate::api::{Arg, Ctx, Key};
use crate::core::grant::Request;
use crate::stats::Cause;
use crate::{clock, session, value, waiters, writable};

/// Whether a grant of `req` binds its hold, or replaces a binding: one
/// load on the hot path, before anything `bind` needs is read.
#[inline]
fn binds(req: &Request) -> bool {
    req.session.is_some() || session::any()
}

/// Binds a hold just granted to `owner` to connection `client` when it
/// asked for SESSION (and replaces any binding its owner's earlier hold
/// had): the one place a hold is bound, whoever granted it. Called when
/// `binds`.
fn bind(db: c_int, key_name: &[u8], owner: &[u8], req: &Request, client: Option<u64>) {
    let binding = req.session.zip(client).map(|(delay, client)| (client, delay));
    let end = clock::mono_ms().saturating_add(req.ttl_ms);
    session::granted(db, key_name, owner, binding, end);
}

/// A released hold is bound to no connection any more.
fn unbind(ctx: Ctx, key_name: &Arg, owner: &[u8]) {
    if session::any() {
        session::released(ctx.selected_db(), key_name.bytes(), owner);
    }
}

/// Who waits for the key a release is about to free, in the command's
/// database: read before the key is deleted, so that the deletion arms no
/// timer for a line the release serves itself (`serve_freed`).
fn line_of(ctx: Ctx, key_name: &Arg) -> Option<c_int> {
    waiters::queued_in(ctx, key_name.bytes())
}

/// Deletes a released lock's key. When its line (`queued`) is served by
/// the release itself right after (`serve_freed`), the unlink callback
/// arms no timer to serve it: the handoff is inline, and the timer would
/// only find the lock handed off. (Under OOM the line is deferred, and
/// nobody is served on a replica: the timer stays as it was.)
fn delete(ctx: Ctx, key: &Key, queued: Option<c_int>) {
    if queued.is_some() && !out_of_memory(ctx) && !replays(ctx) {
        waiters::deleting_before_handoff(|| value::delete(key));
    } else {
        value::delete(key);
    }
}

/// Serves the line of the key a release freed, in the same command.
fn serve_freed(ctx: Ctx, key: &Key, key_name: &Arg, queued: Option<c_int>) {
    if let Some(db) = queued {
        // RELEASE frees memory and runs under OOM; the handoff is a grant,
        // which ACQUIRE (deny-oom) could not make now.
        if out_of_memory(ctx) {
            waiters::defer(db, key_name.bytes(), writable::Refusal::OutOfMemory);
        } else {
            waiters::serve(ctx, key, db, key_name, Cause::Release);
        }
    }
}

fn out_of_memory(ctx: Ctx) -> bool {
    ctx.has_flags(raw::REDISMODULE_CTX_FLAGS_OOM)
}

/// Whether the command replays the master's stream or the AOF.
fn replays(ctx: Ctx) -> bool {
    ctx.has_flags(raw::REDISMODULE_CTX_FLAGS_REPLICATED | raw::REDISMODULE_CTX_FLAGS_LOADING)
}
