//! Locks Redis removed while their lease ran (`rescue` keeps them), put
//! back before a command looks at their key. Above `rescue`, which puts
//! them back through `apply::restore`.

use crate::api::{Arg, Ctx, Key};
use crate::keys::rescue;

/// Puts back a lock Redis removed while its lease ran (see `rescue`), so
/// the command finds it where it was. One load when nothing is kept: the
/// clocks are read only when something is.
pub fn restore_rescued(ctx: Ctx, key: &Key, key_name: &Arg) {
    if rescue::any() {
        rescue::restore(ctx, key, key_name, ctx.selected_db(), crate::server::clock::now());
    }
}
