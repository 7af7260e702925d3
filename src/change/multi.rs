//! Several keys at once (`LOCK.MACQUIRE`, `MRELEASE`, `MEXTEND`): the
//! core decides the set all or nothing (`core::multi::acquire_set`, over
//! what each member holds), then every member is granted as an ordinary
//! lock with the set's one token (`grant::try_acquire`, `By::Set`), each
//! leaving as its own LOCK.APPLY: Redis wraps what one command propagates
//! in MULTI/EXEC, so a replica and the AOF see the set whole. A released
//! or extended member is an ordinary release or extension.
//!
//! Waiting (`WAIT`) in every member's line at once comes with the
//! waiters' registry of sets (see `docs/design-multi.md`).

use super::binding::{bind, binds};
use super::grant::{refused, try_acquire, Attempt, By, Granted};
use super::rescued::restore_rescued;
use super::{extend, release_member, Extended, Released};
use crate::api::{Arg, Ctx, Key};
use crate::core::grant::{Grant, Holder, Holding, Kind, Mode, Outcome, Request};
use crate::core::lease::Now;
use crate::core::multi::{self, Member};
use crate::keys::grants::{slot, Look, Slot};
use crate::keys::group;
use crate::server::fencing::COUNTER;
use crate::server::stats::{self, Cause};
use crate::waiters;

/// A set's grant to `owner`: every member (open for writing, with its
/// name) or none. Whoever waits in a member's line is served first (a
/// lease that just ran out goes to them), and a member anyone waits for
/// holds the set back. `Attempt::Held` leaves the set to the caller.
pub fn acquire_set(ctx: Ctx, members: &[(Key, &Arg)], owner: &Arg, req: &Request) -> Attempt {
    for (key, key_name) in members {
        restore_rescued(ctx, key, key_name);
        if let Some(db) = waiters::queued_in(ctx, key_name.bytes()) {
            waiters::serve(ctx, key, db, key_name, Cause::Expiry);
        }
    }
    let now = crate::server::clock::now();
    let mut views = Vec::with_capacity(members.len());
    for (key, _) in members {
        match view(key, owner.bytes(), req, now) {
            Ok(view) => views.push(view),
            Err(attempt) => return attempt,
        }
    }
    // Which members the owner holds already (a failure gives back only
    // the others).
    let held_before: Vec<bool> = views.iter().map(|view| view.holder(owner.bytes()).is_some_and(|h| h.end > now.mono)).collect();
    let mut asked: Vec<Member<'_, group::Owner>> = views
        .iter_mut()
        .zip(members)
        .map(|(holding, (_, key_name))| Member { holding, waiting_ahead: waiters::count_in(ctx, key_name.bytes()) > 0 })
        .collect();
    let owner_box: group::Owner = owner.bytes().into();
    let (token, how) = match multi::acquire_set(&mut asked, &owner_box, req, now.mono, |min| COUNTER.issue(min)) {
        Outcome::Granted(token, how) => (token, how),
        Outcome::Held => return Attempt::Held,
        Outcome::Refused(refusal) => return refused(refusal),
    };
    // Decided: each member is now an ordinary grant of the set's token
    // (FENCE at the token, so a member the owner held takes it too).
    let member_req = Request { fence: token, ..*req };
    let mut end = now.mono;
    for (i, (key, key_name)) in members.iter().enumerate() {
        let failed = match try_acquire(ctx, key, key_name, owner, &member_req, false, By::Set(token)) {
            Attempt::Granted(granted) if granted.token == token => {
                end = granted.end;
                None
            }
            Attempt::Granted(_) => Some(Attempt::Failed(c"ERR a member of the set took another token")),
            // Only a failure to store can differ from the decision.
            other => Some(other),
        };
        if let Some(failed) = failed {
            // All or nothing: the members this set took are given back
            // (those the owner held before keep the set's token).
            for ((key, key_name), held) in members[..i].iter().zip(&held_before) {
                if !held {
                    release_member(ctx, key, key_name, owner.bytes());
                }
            }
            return failed;
        }
        waiters::lease_changed(ctx, key, key_name);
        if binds(req) {
            bind(ctx.selected_db(), key_name.bytes(), owner.bytes(), req, req.session.map(|_| ctx.client_id()));
        }
    }
    match how {
        Grant::Regrant => stats::ACQUIRE_REGRANT.bump(),
        _ => stats::ACQUIRE_NEW.bump(),
    }
    Attempt::Granted(Granted { token, how, end })
}

/// What `key` holds, as the core's rules see it for a set: an exclusive
/// lock as its one holder, a group as its holders; an error for a key of
/// another type, or a plain-string lock of the owner's own (a set does not
/// convert it: LOCK.ACQUIRE does).
fn view(key: &Key, owner: &[u8], req: &Request, now: Now) -> Result<Holding<group::Owner>, Attempt> {
    let exclusive = |owner: &[u8], token, end, since| Holding {
        kind: Kind::ReadWrite,
        mode: Mode::Exclusive,
        holders: vec![Holder { owner: owner.into(), token, end, since, permits: 1 }],
    };
    Ok(match slot(key, now, Look::Held) {
        Slot::WrongType => return Err(Attempt::WrongType),
        Slot::Free => Holding { kind: Kind::ReadWrite, mode: req.mode, holders: Vec::new() },
        Slot::Held(lock) => exclusive(lock.owner(), lock.token(), lock.lease().end, lock.since()),
        Slot::Shared(group) => group.holding.clone(),
        Slot::PlainString(value) if value == owner => {
            return Err(Attempt::Refused(c"ERR a key of the set is the owner's plain-string lock; take it with LOCK.ACQUIRE first".into()))
        }
        // Another owner's plain-string lock: held, with no token and no end.
        Slot::PlainString(value) => exclusive(value, 0, i64::MAX, now.mono),
    })
}

/// `LOCK.MRELEASE`: how many members `owner` held and no longer holds;
/// `None` when a member is of another type (nothing is released then).
pub fn release_set(ctx: Ctx, members: &[(Key, &Arg)], owner: &[u8]) -> Option<i64> {
    let now = crate::server::clock::now();
    if members.iter().any(|(key, _)| matches!(slot(key, now, Look::AsStored), Slot::WrongType)) {
        return None;
    }
    let released = members.iter().filter(|(key, key_name)| release_member(ctx, key, key_name, owner) == Released::Done).count();
    Some(i64::try_from(released).unwrap_or(i64::MAX))
}

/// What `LOCK.MEXTEND` came to.
pub enum ExtendedSet {
    /// How many members took the new lease.
    Done(i64),
    WrongType,
    Failed(&'static std::ffi::CStr),
}

/// `LOCK.MEXTEND`: every member `owner` holds takes a lease of `ttl_ms`
/// from now, as LOCK.EXTEND gives it.
pub fn extend_set(ctx: Ctx, members: &[(Key, &Arg)], owner: &[u8], ttl_ms: i64) -> ExtendedSet {
    let now = crate::server::clock::now();
    if members.iter().any(|(key, _)| matches!(slot(key, now, Look::AsStored), Slot::WrongType)) {
        return ExtendedSet::WrongType;
    }
    let mut extended = 0;
    for (key, key_name) in members {
        match extend(ctx, key, key_name, owner, ttl_ms) {
            Extended::Done { .. } => extended += 1,
            Extended::Refused | Extended::WrongType => {}
            Extended::Failed(msg) => return ExtendedSet::Failed(msg),
        }
    }
    ExtendedSet::Done(extended)
}
