//! Every change to a lock, one executor per kind of change: `acquire` (a
//! grant, by LOCK.ACQUIRE or by the handoff to a waiter), `release`,
//! `extend`, `proclaim` (the holder's value replaced), `apply` (a lock set exactly as given: LOCK.APPLY replaying
//! the master's grant, a lock Redis removed put back), `disconnect`
//! (ending the hold of a connection that closed) and `multi` (several
//! keys at once: LOCK.MACQUIRE, MRELEASE, MEXTEND, each member an
//! ordinary grant, release or extension).
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
pub mod apply;
mod binding;
mod disconnect;
mod extend;
pub mod grant;
pub mod multi;
mod proclaim;
mod release;
pub mod rescued;
pub mod set;

pub use acquire::acquire;
pub use disconnect::end_closed;
pub use extend::{extend, Extended};
pub use grant::{Ask, Attempt};
pub use proclaim::{proclaim, Proclaimed};
pub use release::{release, release_member, release_member_unserved, serve_released, Released};

use std::ffi::c_int;

use crate::api::{ctx_flags, Arg, Ctx, Key};
use crate::server::stats::Cause;
use crate::{keys::value, replication::writable, waiters};

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
    ctx.has_flags(ctx_flags::OOM)
}

/// Whether the command replays the master's stream or the AOF.
fn replays(ctx: Ctx) -> bool {
    ctx.has_flags(ctx_flags::REPLICATED | ctx_flags::LOADING)
}
