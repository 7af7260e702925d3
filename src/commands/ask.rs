//! LOCK.ASK: a cooperative release request. Each current holder of a
//! lock is asked to let it go, on the lock's channel, with its own token
//! and owner, so that its client (subscribed while it holds) tells an
//! ask for its hold from one meant for a hold before it. Nothing changes:
//! the holder decides.

use std::ffi::c_int;

use crate::api::{Arg, Ctx, KeyMode};
use crate::args;
use crate::keys::grants::{slot, Look, Slot, WRONGTYPE};
use crate::replication::propagate;
use crate::server::{clock, config};

/// `LOCK.ASK key [MESSAGE text]` → how many holders were asked (0: the
/// lock is free, or a plain-string lock, whose holder hears nothing).
pub fn ask(ctx: Ctx, argv: &[Arg]) -> c_int {
    let req = parse_or_reply!(ctx, args::parse_ask(argv, config::max_owner_len()));
    let key = ctx.open_key(req.key, KeyMode::Read);
    let now = clock::now();
    let asked: i64 = match slot(&key, now, Look::Held) {
        Slot::WrongType => return ctx.reply_error(WRONGTYPE),
        Slot::Free | Slot::PlainString(_) => 0,
        Slot::Held(lock) => {
            propagate::asked(ctx, req.key, &lock.owner(), lock.token(), req.message);
            1
        }
        Slot::Shared(group) => {
            let mut n = 0;
            for holder in group.live(now) {
                propagate::asked(ctx, req.key, &holder.owner, holder.token, req.message);
                n += 1;
            }
            n
        }
    };
    ctx.reply_integer(asked)
}
