//! LOCK.RESIZE: a held semaphore's limit changes while its holders keep
//! their permits; a larger limit grants whoever waits at once, in line
//! order, as far as they fit.

use std::ffi::c_int;

use crate::api::{Arg, Ctx, KeyMode};
use crate::change::{self, Resized};
use crate::core::grant::Kind;
use crate::keys::grants::WRONGTYPE;
use crate::replication::writable;
use crate::server::stats;
use crate::{args, waiters};

/// `LOCK.RESIZE key limit` → the number of waiters granted, or nil for a
/// free key (a semaphore exists only while held).
pub fn resize(ctx: Ctx, argv: &[Arg]) -> c_int {
    refuse_on_replica!(ctx);
    let req = parse_or_reply!(ctx, args::parse_resize(argv));
    let key = ctx.open_key(req.key, KeyMode::Write);
    let (resized, granted) = waiters::resize(ctx, &key, req.key, req.limit);
    match resized {
        Resized::Done => {
            if !change::replays(ctx) {
                stats::RESIZE_CALLS.bump();
            }
            ctx.reply_integer(i64::try_from(granted).unwrap_or(i64::MAX))
        }
        Resized::Free => ctx.reply_null(),
        Resized::Lock => ctx.reply_error_text(&format!("ERR wrong lock kind: the key is {}", Kind::ReadWrite)),
        Resized::PlainString => ctx.reply_error(c"ERR wrong lock kind: the key is a plain-string lock (exclusive only)"),
        Resized::WrongType => ctx.reply_error(WRONGTYPE),
    }
}
