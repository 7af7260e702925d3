//! The grant of a whole set, one for whoever asks: `LOCK.MACQUIRE`
//! (`multi`, which serves its members' lines first) and the handoff to a
//! set first in all its lines (`waiters`). The core decides the set all or
//! nothing (`core::multi::acquire_set`, over what each member holds), then
//! every member is granted as an ordinary lock with the set's one token
//! (`grant::try_acquire`, `By::Set`). It serves no line and arms no timer,
//! nor gives back what a failed set took: its callers do (`SetAttempt`).

use super::binding::{bind, binds};
use super::grant::{refused, try_acquire, Ask, Attempt, By, Granted};
use crate::api::{Arg, Ctx, Key};
use crate::core::grant::{Holder, Holding, Kind, Mode, Outcome, Request};
use crate::core::lease::Now;
use crate::core::multi::{self, Member, SetRequest};
use crate::keys::grants::{slot, Look, Slot};
use crate::keys::group;
use crate::server::fencing::COUNTER;

/// What a set's grant came to, and the members it took before one
/// failed (by their place in the set), which the caller gives back
/// (`release_member`) and whose lines it serves: all or nothing. Those the
/// owner held before keep the set's token.
pub struct SetAttempt {
    pub attempt: Attempt,
    pub give_back: Vec<usize>,
}

impl From<Attempt> for SetAttempt {
    fn from(attempt: Attempt) -> Self {
        SetAttempt { attempt, give_back: Vec::new() }
    }
}

/// A set's grant to `owner`: every member (open for writing, with its
/// name) or none, each asked what `set` asks of it (the last one a
/// semaphore's permit with `SEMAPHORE`). `waiting_ahead`: whether others
/// wait before this request in a member's line (a set first in all its
/// lines answers false); the semaphore member and a strict request's
/// guards are in no set's line and hold none back (`SetRequest::lined`,
/// see `multi`). `client`: the connection a SESSION hold
/// is bound to. `handoff`: the set waited, and serving its line grants it
/// (how its members' grants are announced).
#[allow(clippy::too_many_arguments)]
pub fn grant_set(
    ctx: Ctx,
    members: &[(&Key, &Arg)],
    owner: &Arg,
    set: &SetRequest,
    waiting_ahead: impl Fn(&Arg) -> bool,
    client: Option<u64>,
    handoff: bool,
) -> SetAttempt {
    let now = crate::server::clock::now();
    let n = members.len();
    let mut views = Vec::with_capacity(n);
    for (i, (key, _)) in members.iter().enumerate() {
        match view(key, owner.bytes(), &set.member(i, n), now) {
            Ok(view) => views.push(view),
            Err(attempt) => return attempt.into(),
        }
    }
    // A strict semaphore member found free (or every lease there ended) is
    // created with its largest limit (below).
    let record_free = views.last().is_some_and(|view| view.holders.iter().all(|h| h.end <= now.mono));
    let created_strict = record_free && set.strict(n.saturating_sub(1), n).is_some();
    // Which members the owner holds already (a failure gives back only
    // the others).
    let held_before: Vec<bool> = views.iter().map(|view| view.holder(owner.bytes()).is_some_and(|h| h.end > now.mono)).collect();
    let mut asked: Vec<Member<'_, group::Owner>> = views
        .iter_mut()
        .zip(members)
        .enumerate()
        .map(|(i, (holding, (_, key_name)))| Member {
            holding,
            req: set.member(i, n),
            waiting_ahead: set.lined(i, n) && waiting_ahead(key_name),
            strict: set.strict(i, n),
        })
        .collect();
    let owner_box: group::Owner = owner.bytes().into();
    let (token, how) = match multi::acquire_set(&mut asked, &owner_box, now.mono, |min| COUNTER.issue(min)) {
        Outcome::Granted(token, how) => (token, how),
        Outcome::Held => return Attempt::Held.into(),
        Outcome::Refused(refusal) => return refused(refusal).into(),
    };
    // Decided: each member is now an ordinary grant of the set's token
    // (FENCE at the token, so a member the owner held takes it too).
    let mut end = now.mono;
    for (i, (key, key_name)) in members.iter().enumerate() {
        let member_req = Request { fence: token, ..set.member(i, n) };
        let failed = match try_acquire(ctx, key, key_name, owner, Ask::new(&member_req), false, By::Set { token, handoff }) {
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
            let give_back = held_before.iter().take(i).enumerate().filter(|(_, held)| !**held).map(|(j, _)| j).collect();
            return SetAttempt { attempt: failed, give_back };
        }
        if binds(&member_req) {
            bind(ctx.selected_db(), key_name.bytes(), owner.bytes(), &member_req, client, end);
        }
    }
    if let (true, Some((key, key_name)), Some((_, largest))) = (created_strict, members.last(), set.strict(n.saturating_sub(1), n)) {
        super::resize::created_with_largest(ctx, key, key_name, largest, now);
    }
    Attempt::Granted(Granted { token, how, end, first_end: None }).into()
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
        Slot::Held(lock) => exclusive(&lock.owner(), lock.token(), lock.lease().end, lock.since()),
        Slot::Shared(group) => group.holding.clone(),
        Slot::PlainString(value) if value == owner => {
            return Err(Attempt::Refused(c"ERR a key of the set is the owner's plain-string lock; take it with LOCK.ACQUIRE first".into()))
        }
        // Another owner's plain-string lock: held, with no token and no end.
        Slot::PlainString(value) => exclusive(value, 0, i64::MAX, now.mono),
    })
}
