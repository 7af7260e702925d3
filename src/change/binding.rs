//! The one place a hold is bound to its connection or unbound from it,
//! whoever granted or released it.

use std::ffi::c_int;

use crate::api::{Arg, Ctx};
use crate::core::grant::Request;
use crate::server::bindings;

/// Whether a grant of `req` binds its hold, or replaces a binding: one
/// load on the hot path, before anything `bind` needs is read.
#[inline]
pub(super) fn binds(req: &Request) -> bool {
    req.session.is_some() || bindings::any()
}

/// Binds a hold just granted to `owner` to connection `client` when it
/// asked for SESSION (and replaces any binding its owner's earlier hold
/// had): the one place a hold is bound, whoever granted it. `end`: when
/// the grant's lease ends, as the grant computed it from its one clock
/// read. Called when `binds`.
pub(super) fn bind(db: c_int, key_name: &[u8], owner: &[u8], req: &Request, client: Option<u64>, end: i64) {
    let binding = req.session.zip(client).map(|(delay, client)| (client, delay));
    bindings::granted(db, key_name, owner, binding, end);
}

/// A released hold is bound to no connection any more.
pub(super) fn unbind(ctx: Ctx, key_name: &Arg, owner: &[u8]) {
    if bindings::any() {
        bindings::released(ctx.selected_db(), key_name.bytes(), owner);
    }
}
