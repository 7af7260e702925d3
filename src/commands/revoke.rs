//! LOCK.REVOKE: an operator takes a hold away and raises the fence. A new
//! token T is issued from the instance's counter, the hold (of one owner,
//! or every hold of the key) ends as a release would, each named
//! LOCK.FENCED register is raised to at least T, and the key's line is
//! served, all in one command: the next holder gets a token above T, and
//! a register refuses the revoked holder's token from then on.

use std::ffi::c_int;

use crate::api::{Arg, Ctx, KeyMode};
use crate::change::Revoked;
use crate::keys::grants::{slot, Look, Slot, WRONGTYPE};
use crate::keys::register::{self, Register};
use crate::replication::{propagate, writable};
use crate::server::{clock, fencing, stats};
use crate::{args, waiters};

/// `LOCK.REVOKE key [OWNER owner] [FENCE register [register ...]]` →
/// `[T, revoked]`: the token issued and how many holds ended.
pub fn revoke(ctx: Ctx, argv: &[Arg]) -> c_int {
    refuse_on_replica!(ctx);
    let req = parse_or_reply!(ctx, args::parse_revoke(argv));
    let db = ctx.selected_db();
    // Every key is checked before anything changes: a wrong type changes
    // nothing and issues no token.
    for name in req.registers {
        let register = ctx.open_key(name, KeyMode::Read);
        if register::read(&register, db, name.bytes()) == Register::WrongType {
            return ctx.reply_error(WRONGTYPE);
        }
    }
    let key = ctx.open_key(req.key, KeyMode::Write);
    if matches!(slot(&key, clock::now(), Look::Exact), Slot::WrongType) {
        return ctx.reply_error(WRONGTYPE);
    }
    let Some(token) = fencing::COUNTER.issue(0) else {
        return ctx.reply_error(c"ERR fencing token space exhausted");
    };
    stats::REVOKE_CALLS.bump();
    let mut raised = true;
    let revoked = waiters::revoke(ctx, &key, req.key, req.owner, token, || raised = raise_all(ctx, req.registers, token));
    let ended = match revoked {
        Revoked::Ended(n) => n,
        // Checked above; nothing in between changes the key's type.
        Revoked::WrongType => return ctx.reply_error(WRONGTYPE),
    };
    if !raised {
        return ctx.reply_error(c"ERR LOCK.REVOKE could not store a register");
    }
    ctx.reply_array(2);
    ctx.reply_integer(token);
    ctx.reply_integer(i64::try_from(ended).unwrap_or(i64::MAX))
}

/// Raises every register to at least `token`, as `LOCK.FENCED register
/// token` without a command does. False when one could not be stored.
fn raise_all(ctx: Ctx, registers: &[Arg], token: i64) -> bool {
    let db = ctx.selected_db();
    let mut all = true;
    for name in registers {
        let key = ctx.open_key(name, KeyMode::Write);
        let (highest, stored) = match register::read(&key, db, name.bytes()) {
            Register::WrongType => {
                all = false;
                continue;
            }
            Register::Absent => (None, false),
            Register::Highest(h) => (Some(h), true),
            // Written again: it is put back.
            Register::Evicted(h) => (Some(h), false),
        };
        if stored && highest.is_some_and(|h| h >= token) {
            continue;
        }
        if register::raise(&key, db, name.bytes(), token) {
            propagate::register_raised(ctx, name, token);
        } else {
            all = false;
        }
    }
    all
}
