//! LOCK.ACQUIRE's grant (`acquire`): whoever waits in the key's line is
//! served first, then the grant (`grant`) is made, its binding and
//! counters recorded.

use super::binding::{bind, binds};
use super::grant::{try_acquire, Ask, Attempt, By};
use super::rescued::restore_rescued;
use crate::api::{Arg, Ctx, Key};
use crate::core::grant::Grant;
use crate::server::stats::{self, Cause};
use crate::waiters;

/// `LOCK.ACQUIRE`'s grant of what `owner` asks (`ask`) at `key` (open for
/// writing, named `key_name`): whoever waits in the key's line is served
/// first (a lease that just ran out goes to them), and the request gets no
/// new hold while anyone still waits. `Attempt::Held` leaves the request
/// to the caller: wait in line, or answer nil.
pub fn acquire(ctx: Ctx, key: &Key, key_name: &Arg, owner: &Arg, ask: Ask<'_>) -> Attempt {
    restore_rescued(ctx, key, key_name);
    if let Some(db) = waiters::queued_in(ctx, key_name.bytes()) {
        // Whoever waits comes first, even if the lease just ran out.
        waiters::serve(ctx, key, db, key_name, Cause::Expiry);
    }
    let waiting_ahead = waiters::count_in(ctx, key_name.bytes()) > 0;
    let attempt = try_acquire(ctx, key, key_name, owner, ask, waiting_ahead, By::Command);
    if let Attempt::Granted(granted) = &attempt {
        // Its waiters, if any, are served when the new lease ends.
        waiters::lease_changed(ctx, key, key_name);
        let req = ask.request;
        if binds(req) {
            bind(ctx.selected_db(), key_name.bytes(), owner.bytes(), req, req.session.map(|_| ctx.client_id()));
        }
        match granted.how {
            Grant::Regrant => stats::ACQUIRE_REGRANT.bump(),
            Grant::New | Grant::Upgrade => stats::ACQUIRE_NEW.bump(),
            Grant::Downgrade => {
                stats::ACQUIRE_NEW.bump();
                // Readers waiting behind the writer may join it now.
                if let Some(db) = waiters::queued_in(ctx, key_name.bytes()) {
                    waiters::serve(ctx, key, db, key_name, Cause::Release);
                }
            }
        }
    }
    attempt
}
