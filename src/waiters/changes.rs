//! The changes a client's command asks for (`change`), with what each asks
//! of its key's line: the changes sit below the waiters and serve no line,
//! so the line is served here, in the same command, right after the change
//! (or before it: a grant first serves whoever waits, since a lease that
//! just ran out goes to them).

use super::*;
use crate::api::ctx_flags;
use crate::change::{self, Extended, Line, Released, Resized, Revoked};

/// `LOCK.ACQUIRE`'s grant of what `owner` asks (`ask`) at `key` (open for
/// writing, named `key_name`): whoever waits in the key's line is served
/// first (a lease that just ran out goes to them), and the request gets no
/// new hold while anyone still waits. `Attempt::Held` leaves the request
/// to the caller: wait in line, or answer nil.
pub fn acquire(ctx: Ctx, key: &Key, key_name: &Arg, owner: &Arg, ask: Ask<'_>) -> Attempt {
    change::restore_rescued(ctx, key, key_name);
    if let Some(db) = queued_in(ctx, key_name.bytes()) {
        // Whoever waits comes first, even if the lease just ran out.
        serve(ctx, key, db, key_name, Cause::Expiry);
    }
    let waiting_ahead = count_in(ctx, key_name.bytes()) > 0;
    let attempt = change::acquire(ctx, key, key_name, owner, ask, waiting_ahead);
    if let Attempt::Granted(granted) = &attempt {
        // Its waiters, if any, are served when the new lease ends.
        match granted.first_end {
            Some(first_end) => lease_changed_to(ctx, key_name, first_end),
            None => lease_changed(ctx, key, key_name),
        }
        // A downgrade: readers waiting behind the writer may join it now.
        if granted.line() == Line::Freed {
            if let Some(db) = queued_in(ctx, key_name.bytes()) {
                serve(ctx, key, db, key_name, Cause::Release);
            }
        }
    }
    attempt
}

/// Ends `owner`'s hold at `key` (open for writing, named `key_name`), by
/// the LOCK.RELEASE being executed; the oldest waiters get the lock in the
/// same command.
pub fn release(ctx: Ctx, key: &Key, key_name: &Arg, owner: &[u8]) -> Released {
    let (released, queued) = release_unserved(ctx, key, key_name, owner, change::release);
    serve_freed(ctx, key, key_name, queued);
    released
}

/// A release (`change::release`, or `change::release_member`: one member
/// of a set), and the database of the line it freed, if anyone waits
/// there, left for the caller to serve (`serve_freed`).
pub(super) fn release_unserved(
    ctx: Ctx,
    key: &Key,
    key_name: &Arg,
    owner: &[u8],
    release: fn(Ctx, &Key, &Arg, &[u8]) -> Released,
) -> (Released, Option<c_int>) {
    // The master's stream and the AOF release what is stored.
    if !change::replays(ctx) {
        change::restore_rescued(ctx, key, key_name);
    }
    let queued = queued_in(ctx, key_name.bytes());
    let released = deleting_before_handoff(ctx, key_name, queued, || release(ctx, key, key_name, owner));
    (released, queued.filter(|_| released.line() == Line::Freed))
}

/// Gives `owner`'s hold at `key` a lease of `ttl_ms` from now; its waiters
/// are served when the new lease ends.
pub fn extend(ctx: Ctx, key: &Key, key_name: &Arg, owner: &[u8], ttl_ms: i64) -> Extended {
    let extended = change::extend(ctx, key, key_name, owner, ttl_ms);
    match extended {
        Extended::Done { first_end: Some(first_end), .. } => lease_changed_to(ctx, key_name, first_end),
        _ if extended.line() == Line::LeaseChanged => lease_changed(ctx, key, key_name),
        _ => {}
    }
    extended
}

/// Serves the line of the key a release freed (in database `queued`, if
/// anyone waits there), in the same command.
pub(super) fn serve_freed(ctx: Ctx, key: &Key, key_name: &Arg, queued: Option<c_int>) {
    if let Some(db) = queued {
        // RELEASE frees memory and runs under OOM; the handoff is a grant,
        // which ACQUIRE (deny-oom) could not make now.
        if out_of_memory(ctx) {
            defer(db, key_name.bytes(), writable::Refusal::OutOfMemory);
        } else {
            serve(ctx, key, db, key_name, Cause::Release);
        }
    }
}

/// Whether the line of a key a change may delete (`queued`: someone waits
/// there) is served by the same command right after it: not under OOM
/// (the line is deferred), nor on a replica (nobody is served there).
pub(super) fn served_inline(ctx: Ctx, queued: Option<c_int>) -> bool {
    queued.is_some() && !out_of_memory(ctx) && !change::replays(ctx)
}

fn out_of_memory(ctx: Ctx) -> bool {
    ctx.has_flags(ctx_flags::OOM)
}

/// Revokes the hold of `owner` (`None`: every hold) at `key` (open for
/// writing, named `key_name`) under `token`; `then` runs once the holds
/// have ended (the revocation's registers are raised there), and the
/// key's line is served after it, in the same command, as after a
/// release.
pub fn revoke(ctx: Ctx, key: &Key, key_name: &Arg, owner: Option<&[u8]>, token: Token, then: impl FnOnce()) -> Revoked {
    change::restore_rescued(ctx, key, key_name);
    let queued = queued_in(ctx, key_name.bytes());
    let now = crate::server::clock::now();
    let revoked = deleting_before_handoff(ctx, key_name, queued, || change::revoke(ctx, key, key_name, owner, token, now));
    then();
    if matches!(revoked, Revoked::Ended(n) if n > 0) {
        serve_freed(ctx, key, key_name, queued);
    }
    revoked
}

/// Resizes the semaphore at `key` (open for writing, named `key_name`) to
/// `limit`; a larger limit grants the line's heads at once, in line
/// order, as far as they fit (as after a release, and counted as its
/// handoffs); sets waiting for a permit under the terms it changed are
/// refused first, naming the new ones (`refuse_stale_sets`). With the
/// resize, the number of waiters granted.
pub fn resize(ctx: Ctx, key: &Key, key_name: &Arg, limit: u32) -> (Resized, usize) {
    change::restore_rescued(ctx, key, key_name);
    let resized = change::resize(ctx, key, key_name, limit, crate::server::clock::now());
    if resized != Resized::Done || change::replays(ctx) {
        return (resized, 0);
    }
    refuse_stale_sets(ctx, key, key_name);
    let before = crate::server::stats::WAIT_GRANTED.get();
    serve_freed(ctx, key, key_name, queued_in(ctx, key_name.bytes()));
    let granted = crate::server::stats::WAIT_GRANTED.get().saturating_sub(before);
    (resized, usize::try_from(granted).unwrap_or(0))
}
