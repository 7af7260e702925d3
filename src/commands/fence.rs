//! LOCK.CHECK and LOCK.GUARD: the fence enforced where the data lives.
//! Both ask one question of a key, whether `owner` holds it under `token`
//! now (`core::check`); LOCK.GUARD then runs the caller's command with
//! nothing in between, or nothing at all.
//!
//! A refusal is an error with its own prefix, `FENCED`, then the reason:
//! `not held`, `held by another owner`, `newer token`, `other token`,
//! `lease ended` (docs/commands.md).

use std::ffi::c_int;

use crate::api::{ctx_flags, errno, Arg, Ctx, KeyMode};
use crate::args::{self, Check, Unguardable};
use crate::core::check::{self, Held, Stale};
use crate::core::lease::{Lease, Left, NO_END};
use crate::keys::grants::{slot, Look, Slot, WRONGTYPE};
use crate::keys::register::{self, Register};
use crate::keys::{rescue, value};
use crate::server::{clock, fencing};

/// What the key says of the hold.
enum Verdict {
    Current,
    Stale(Stale),
    WrongType,
}

/// Whether `hold.owner` holds `hold.key` under `hold.token` now. The key
/// is open only inside this function: a guarded command may change it.
/// A lock is looked at as RELEASE and EXTEND do (`Look::Held`): a lease
/// running on the monotonic clock is held, its TTL unread (the key is
/// there, so the TTL has not passed); a TTL someone else set decides only
/// once that lease has ended. The answer is the one `Look::Exact` gives,
/// without the second lookup in the server's table of TTLs (a twentieth
/// of LOCK.CHECK's server time, docs/benchmarks.md).
fn judge(ctx: Ctx, hold: &Check<'_, Arg>) -> Verdict {
    let key = ctx.open_key(hold.key, KeyMode::Read);
    let now = clock::now();
    let verdict = |r: Result<(), Stale>| r.map_or_else(Verdict::Stale, |()| Verdict::Current);
    let (owner, token) = (hold.owner, hold.token);
    match slot(&key, now, Look::Held) {
        Slot::WrongType => Verdict::WrongType,
        Slot::Held(lock) => {
            let (holder, end) = (lock.owner(), lock.lease().end);
            verdict(check::current([Held { owner: &holder, token: lock.token(), end }], owner, token, now.mono))
        }
        Slot::Shared(group) => {
            let holders = group.holding.holders.iter().map(|h| Held { owner: &h.owner, token: h.token, end: h.end });
            verdict(check::current(holders, owner, token, now.mono))
        }
        // A `SET key owner NX PX` lock: its one holder, under token 0.
        Slot::PlainString(holder) => {
            let end = Lease::until(key.deadline_ms(), now).end;
            verdict(check::current([Held { owner: holder, token: 0, end }], owner, token, now.mono))
        }
        Slot::Free => {
            // A lock whose lease ended while its key stays (Redis has not
            // expired it yet): its holders, to tell an ended lease apart.
            if let Some(lock) = value::at(&key) {
                let (holder, end) = (lock.owner(), lock.lease().end);
                return verdict(check::current([Held { owner: &holder, token: lock.token(), end }], owner, token, now.mono));
            }
            if let Some(group) = value::group_at(&key) {
                let holders = group.holding.holders.iter().map(|h| Held { owner: &h.owner, token: h.token, end: h.end });
                return verdict(check::current(holders, owner, token, now.mono));
            }
            // A lock Redis removed that the module keeps until its lease
            // ends is held, as LOCK.INFO shows it.
            let kept = rescue::any().then(|| {
                rescue::peek(ctx.selected_db(), hold.key.bytes(), now, |peek| {
                    let holders = peek.holders.iter().map(|h| Held { owner: h.owner, token: h.token, end: end_of(h.left, now.mono) });
                    verdict(check::current(holders, owner, token, now.mono))
                })
            });
            kept.flatten().unwrap_or(Verdict::Stale(Stale::NotHeld))
        }
    }
}

fn end_of(left: Left, now: i64) -> i64 {
    match left {
        Left::Ms(ms) => now.saturating_add(ms),
        Left::Forever => NO_END,
        Left::Ended => now,
    }
}

const NOPERM: &std::ffi::CStr = c"NOPERM this user has no permissions to run the guarded command or to access one of its keys or channels";

/// The error a stale hold is answered with.
fn refuse(ctx: Ctx, stale: Stale, token: i64) -> c_int {
    match stale {
        Stale::NotHeld => ctx.reply_error(c"FENCED not held: nobody holds the lock"),
        Stale::OtherOwner => ctx.reply_error(c"FENCED held by another owner"),
        Stale::NewerToken { held } => {
            ctx.reply_error_text(&format!("FENCED newer token: the owner holds the lock under token {held}, not {token}"))
        }
        Stale::OtherToken { held } => {
            ctx.reply_error_text(&format!("FENCED other token: the owner holds the lock under token {held}, not {token}"))
        }
        Stale::LeaseEnded { ended_ms_ago } => {
            ctx.reply_error_text(&format!("FENCED lease ended: the hold under token {token} ended {ended_ms_ago} ms ago"))
        }
    }
}

/// `LOCK.CHECK key owner token` → 1 when `owner` holds `key` under
/// `token` with its lease running (exclusive, shared, a permit, a member
/// of a set); otherwise a `FENCED` error saying why.
pub fn check(ctx: Ctx, argv: &[Arg]) -> c_int {
    let hold = parse_or_reply!(ctx, args::parse_check(argv));
    match judge(ctx, &hold) {
        Verdict::Current => ctx.reply_integer(1),
        Verdict::Stale(stale) => refuse(ctx, stale, hold.token),
        Verdict::WrongType => ctx.reply_error(WRONGTYPE),
    }
}

/// `LOCK.GUARD key owner token command [arg ...]` → the command's own
/// reply, when `owner` holds `key` under `token` now; otherwise nothing
/// runs and a `FENCED` error says why. The command runs as the caller
/// would run it (its ACL user, script rules) and its effects are
/// propagated as its own; LOCK.GUARD itself is never propagated, so a
/// replica or the AOF never checks the hold again.
pub fn guard(ctx: Ctx, argv: &[Arg]) -> c_int {
    let req = parse_or_reply!(ctx, args::parse_guard(argv));
    if let Some(refused) = refuse_unrunnable(ctx, Runner::Guard, req.command, req.command_args) {
        return refused;
    }
    match judge(ctx, &req.hold) {
        Verdict::Current => {}
        Verdict::Stale(stale) => return refuse(ctx, stale, req.hold.token),
        Verdict::WrongType => return ctx.reply_error(WRONGTYPE),
    }
    run_for_client(ctx, Runner::Guard, req.command, req.command_args)
}

/// `LOCK.FENCED register token [command [arg ...]]` → the command's own
/// reply (without a command: the register's token), when `token` is at
/// least every token the register has accepted; the register is raised to
/// it first. An older token runs nothing and gets a `FENCED older token`
/// error naming both. The rise is propagated as `LOCK.FENCED register
/// token` (no command), the command's effects as its own; a replica or
/// the AOF replays the rise and never refuses it.
pub fn fenced(ctx: Ctx, argv: &[Arg]) -> c_int {
    let req = parse_or_reply!(ctx, args::parse_fenced(argv));
    if req.token < 1 {
        return ctx.reply_error(c"ERR LOCK.FENCED: the token must be at least 1 (a fencing token)");
    }
    let (db, name) = (ctx.selected_db(), req.register.bytes());
    if crate::change::replays(ctx) {
        // What the master accepted, or the AOF recorded, is raised again
        // as it was: the check was the master's.
        let key = ctx.open_key(req.register, KeyMode::Write);
        register::raise(&key, db, name, req.token);
        return ctx.reply_integer(req.token);
    }
    if let Some((command, command_args)) = req.command {
        if let Some(refused) = refuse_unrunnable(ctx, Runner::Fenced, command, command_args) {
            return refused;
        }
    }
    if let Err(ceiling) = fencing::check_lead(req.token) {
        return ctx.reply_error_text(&fencing::lead_error("LOCK.FENCED: the token", ceiling));
    }
    {
        // Open only here: the command may change the key.
        let key = ctx.open_key(req.register, KeyMode::Write);
        let (highest, stored) = match register::read(&key, db, name) {
            Register::WrongType => return ctx.reply_error(WRONGTYPE),
            Register::Absent => (None, false),
            Register::Highest(h) => (Some(h), true),
            // Written again below: it is put back.
            Register::Evicted(h) => (Some(h), false),
        };
        if let Err(h) = check::admits(highest, req.token) {
            let register_name = String::from_utf8_lossy(name);
            return ctx
                .reply_error_text(&format!("FENCED older token: register {register_name} has accepted token {h}, not {}", req.token));
        }
        if !stored || highest.is_some_and(|h| h < req.token) {
            if !register::raise(&key, db, name, req.token) {
                return ctx.reply_error(c"ERR LOCK.FENCED could not store the register");
            }
            ctx.signal_modified(req.register);
            ctx.replicate_key_integer(c"LOCK.FENCED", req.register, req.token);
        }
    }
    match req.command {
        Some((command, command_args)) => run_for_client(ctx, Runner::Fenced, command, command_args),
        None => ctx.reply_integer(req.token),
    }
}

/// `LOCK.FENCEINFO register` → the highest token the register has
/// accepted, or nil when there is no register.
pub fn fenceinfo(ctx: Ctx, argv: &[Arg]) -> c_int {
    let name = parse_or_reply!(ctx, args::parse_fenceinfo(argv));
    let key = ctx.open_key(name, KeyMode::Read);
    match register::read(&key, ctx.selected_db(), name.bytes()) {
        Register::WrongType => ctx.reply_error(WRONGTYPE),
        Register::Absent => ctx.reply_null(),
        Register::Highest(h) | Register::Evicted(h) => ctx.reply_integer(h),
    }
}

/// The commands that run another for the caller once a fence lets them.
#[derive(Clone, Copy)]
enum Runner {
    Guard,
    Fenced,
}

impl Runner {
    fn name(self) -> &'static str {
        match self {
            Runner::Guard => "LOCK.GUARD",
            Runner::Fenced => "LOCK.FENCED",
        }
    }
}

/// The refusal of a command that cannot run under a fence (`None`: it
/// may run).
fn refuse_unrunnable(ctx: Ctx, runner: Runner, command: &Arg, command_args: &[Arg]) -> Option<c_int> {
    let name = runner.name();
    if let Some(why) = args::unguardable(command.bytes(), command_args) {
        let text = match why {
            Unguardable::Transaction => {
                format!("ERR {name} cannot run MULTI, EXEC, DISCARD, WATCH or UNWATCH: put {name} inside the transaction instead")
            }
            Unguardable::Subscription => format!("ERR {name} cannot run a subscription command"),
            Unguardable::Blocking => {
                format!("ERR {name} cannot run a blocking command (BLPOP, WAIT, XREAD BLOCK ...): it cannot wait under the guard")
            }
            Unguardable::LockCommand => format!("ERR {name} cannot run LOCK.* commands: change a lock with its own commands"),
        };
        return Some(ctx.reply_error_text(&text));
    }
    // The server runs one script at a time: a script started from inside
    // another (a script or function calling LOCK.GUARD ... EVAL) fails
    // its assertion and takes the server down.
    if args::runs_script(command.bytes()) && ctx.has_flags(ctx_flags::LUA) {
        return Some(ctx.reply_error_text(&format!("ERR {name} cannot run a script or function from inside a script or function")));
    }
    None
}

/// Runs `command` for the caller (`Ctx::call_for_client`) and answers with
/// its reply, or with why the server would not run it.
fn run_for_client(ctx: Ctx, runner: Runner, command: &Arg, command_args: &[Arg]) -> c_int {
    let name = runner.name();
    match ctx.call_for_client(command, command_args, args::runs_script(command.bytes())) {
        Ok(called) => {
            if called.is_acl_refusal() {
                // Redis 7.0 words an ACL refusal of a module's call as
                // `ERR acl verification failed`: answered as the server
                // answers the client's own command.
                ctx.reply_error(NOPERM)
            } else if ctx.reply_with_call(&called) {
                crate::api::OK
            } else {
                ctx.reply_error_text(&format!("ERR {name} could not pass the command's reply on (a RESP3 reply to a RESP2 client)"))
            }
        }
        Err(e) => {
            let text = match e {
                errno::EACCES => return ctx.reply_error(NOPERM),
                errno::ENOSPC => return ctx.reply_error(c"OOM command not allowed when used memory > 'maxmemory'"),
                errno::ENETDOWN => return ctx.reply_error(c"CLUSTERDOWN the cluster is down"),
                errno::ENOENT => format!("ERR {name}: unknown command"),
                errno::EINVAL => format!("ERR {name}: wrong number of arguments for the guarded command"),
                errno::ESPIPE => format!("ERR {name}: this command is not allowed under the guard (as in a script)"),
                errno::EPERM => format!("ERR {name}: a key of the guarded command is not served by this node"),
                errno::EROFS => format!("READONLY {name}: the guarded command writes and this server does not take writes now"),
                _ => format!("ERR {name}: the server refused to run the guarded command"),
            };
            ctx.reply_error_text(&text)
        }
    }
}
