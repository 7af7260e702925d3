//! LOCK.ACQUIRE's grant (`acquire`): the grant (`grant`) is made, its
//! binding and counters recorded. Whoever waits in the key's line is
//! served by the caller, before (`waiting_ahead`) and after (`Granted`
//! says what the grant asks of the line).

use super::binding::{bind, binds};
use super::grant::{try_acquire, Ask, Attempt, By};
use crate::api::{Arg, Ctx, Key};
use crate::core::grant::Grant;
use crate::server::stats;

/// `LOCK.ACQUIRE`'s grant of what `owner` asks (`ask`) at `key` (open for
/// writing, named `key_name`), once the caller served whoever waits in the
/// key's line: the request gets no new hold while anyone still waits
/// (`waiting_ahead`). `Attempt::Held` leaves the request to the caller:
/// wait in line, or answer nil.
pub fn acquire(ctx: Ctx, key: &Key, key_name: &Arg, owner: &Arg, ask: Ask<'_>, waiting_ahead: bool) -> Attempt {
    let attempt = try_acquire(ctx, key, key_name, owner, ask, waiting_ahead, By::Command);
    if let Attempt::Granted(granted) = &attempt {
        let req = ask.request;
        if binds(req) {
            bind(ctx.selected_db(), key_name.bytes(), owner.bytes(), req, req.session.map(|_| ctx.client_id()), granted.end);
        }
        match granted.how {
            Grant::Regrant => stats::ACQUIRE_REGRANT.bump(),
            Grant::New | Grant::Upgrade | Grant::Downgrade => stats::ACQUIRE_NEW.bump(),
        }
    }
    attempt
}
