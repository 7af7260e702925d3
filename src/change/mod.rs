//! Every change to a lock, one executor per kind of change: `acquire` (a
//! grant, by LOCK.ACQUIRE or by the handoff to a waiter), `release`,
//! `extend`, `proclaim` (the holder's value replaced), `apply` (a lock set exactly as given: LOCK.APPLY replaying
//! the master's grant, a lock Redis removed put back), `disconnect`
//! (ending the hold of a connection that closed), `revoke` (an operator
//! taking holds away, LOCK.REVOKE), `resize` (a held semaphore's limit
//! changed, LOCK.RESIZE) and `set` (several keys granted at once, each
//! member an ordinary grant).
//!
//! Each takes the opened key and the request, asks `core` for the
//! decision (`core::grant`), stores the value (`value`, `group`), binds or
//! unbinds the hold (`server::bindings`), propagates it (`propagate`),
//! counts it (`stats`) and answers with the change: what happened, the
//! token, the new lease end, and what that asks of the key's line
//! (`Line`). This is the only code that changes a hold, and it serves no
//! line: the waiters sit above it (`waiters::changes` runs each change a
//! client's command asks for and serves the line after it; `waiters`'
//! handoff and `session::disconnect` call it too). What a key holds is
//! read by `grants`.
//!
//! A lock command runs in Redis's single thread: the exclusive path
//! allocates nothing, logs nothing and makes no system call beyond the
//! Redis calls its change needs.

mod acquire;
pub mod apply;
mod binding;
mod disconnect;
mod ended;
mod extend;
pub mod grant;
mod proclaim;
mod release;
mod rescued;
mod resize;
mod revoke;
pub mod set;

pub use acquire::acquire;
pub use disconnect::end_closed;
pub use extend::{extend, Extended};
pub use grant::handoff;
pub use grant::{Ask, Attempt};
pub use proclaim::{proclaim, Proclaimed};
pub use release::{release, release_member, Released};
pub use rescued::{restore_rescued, restore_stepped};
pub use resize::{resize, Resized};
pub use revoke::{revoke, Revoked};

use std::ffi::CStr;

use crate::api::{ctx_flags, Ctx};

/// What a change asks of its key's line, which it never serves itself:
/// the waiters sit above the changes, and whoever called the change serves
/// the line (`waiters`), in the same command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Line {
    /// Nothing changed that a waiter could use.
    Untouched,
    /// The lease changed (granted, extended or cut short): its waiters are
    /// served when the new lease ends.
    LeaseChanged,
    /// A hold ended (or was downgraded): whoever waits may go ahead now.
    Freed,
}

/// A change's value could not be written to its key (out of memory
/// inside Redis's allocator, or a key Redis refused to open for it).
pub const NOT_STORED: &CStr = c"ERR could not store the lock";
/// A change's key could not take its TTL (the lease's mirror).
pub const NO_LEASE: &CStr = c"ERR could not set the lease";

/// Whether the command replays the master's stream or the AOF.
pub fn replays(ctx: Ctx) -> bool {
    ctx.has_flags(ctx_flags::REPLICATED | ctx_flags::LOADING)
}
