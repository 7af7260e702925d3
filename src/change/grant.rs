//! The grant itself, one for whoever asks: LOCK.ACQUIRE (through
//! `acquire`) and the handoff to the head of a line (`handoff`, which the
//! waiters call). The rules are the core's (`grant::acquire_exclusive` on
//! a key free or held exclusively, `Holding::acquire` on a key held
//! shared); this reads the key, asks the core and carries out its
//! decision: the value stored, the key's TTL, the propagation, the
//! binding. It serves no line (the waiters sit above it).

use std::ffi::{c_int, CStr, CString};

use super::binding::{bind, binds};
use super::{Line, NOT_STORED, NO_LEASE};
use crate::api::{Arg, Ctx, Key};
use crate::core::grant::{self, Grant, Holder, Kind, Mode, OneHolder, Outcome, Refusal, Request};
use crate::core::lease::{self, Lease, Now};
use crate::core::token::Token;
use crate::keys::grants::{slot, Look, Slot};
use crate::keys::group::{self, Group};
use crate::keys::value::{self, Exclusive};
use crate::replication::propagate::{self, Event, SharedTerms};
use crate::server::config;
use crate::server::fencing::COUNTER;

/// The handoff of the lock at `key` (open for writing in database `db`)
/// to the head of its line, `owner` asking `ask`: nobody waits ahead of
/// it. `client`: the waiter's connection, which a SESSION hold is bound
/// to.
pub fn handoff(ctx: Ctx, key: &Key, db: c_int, key_name: &Arg, owner: &Arg, ask: Ask<'_>, client: Option<u64>) -> Attempt {
    let attempt = try_acquire(ctx, key, key_name, owner, ask, false, By::Handoff);
    if let Attempt::Granted(granted) = &attempt {
        if binds(ask.request) {
            bind(db, key_name.bytes(), owner.bytes(), ask.request, client, granted.end);
        }
    }
    attempt
}

/// What one grant asks for: the core's request (mode, lease, fence,
/// session: what its rules decide on) and the value the hold stores,
/// exclusive or shared (`VALUE`; `None` keeps a re-granted holder's, a new
/// hold has none). `V` is how the value is at hand: bytes for the grant (the
/// default), the command's argument (`Arg`) for a request that goes on to
/// wait, which keeps it without a copy. Both are borrowed: asking copies
/// nothing.
pub struct Ask<'a, V: ?Sized = [u8]> {
    pub request: &'a Request,
    pub value: Option<&'a V>,
}

impl<'a, V: ?Sized> Ask<'a, V> {
    /// `request` with no value.
    pub fn new(request: &'a Request) -> Self {
        Ask { request, value: None }
    }
}

impl<'a> Ask<'a, Arg> {
    /// The same ask, its value as bytes.
    pub fn bytes(self) -> Ask<'a> {
        Ask { request: self.request, value: self.value.map(Arg::bytes) }
    }
}

// By hand: a derive would ask `V: Copy`, which `[u8]` is not.
impl<V: ?Sized> Clone for Ask<'_, V> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<V: ?Sized> Copy for Ask<'_, V> {}

/// A grant made: its token, what it was, when the new lease ends
/// (monotonic ms), and when the first lease at the key ends now (the new
/// one for an exclusive hold, the earliest holder's for a group): when its
/// line may move next, known here so that nobody reads the key again for
/// it. `None` for a set, whose members each have their own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Granted {
    pub token: Token,
    pub how: Grant,
    pub end: i64,
    pub first_end: Option<i64>,
}

impl Granted {
    /// What the grant asks of the key's line: the lease changed, and a
    /// downgrade also lets in the readers waiting behind the writer.
    pub fn line(&self) -> Line {
        match self.how {
            Grant::Downgrade => Line::Freed,
            Grant::New | Grant::Regrant | Grant::Upgrade => Line::LeaseChanged,
        }
    }
}

/// The result of trying to give a lock to an owner.
pub enum Attempt {
    Granted(Granted),
    Held,
    WrongType,
    Failed(&'static CStr),
    /// The request does not fit the key (its kind, an upgrade beside
    /// other holders): an error naming why.
    Refused(CString),
}

/// Gives the lock at `key` to `owner` if what it asks (`ask`) fits what
/// holds it now, and propagates the grant. `waiting_ahead`: others wait in
/// the key's line before this request, which then gets no new hold (a
/// holder's own re-grant, downgrade or upgrade is not new). The value
/// asked is stored with the hold (a shared holder its own), replacing a re-granted
/// holder's. Shared by ACQUIRE, by the waiters' handoff and by each member
/// of a set.
pub(super) fn try_acquire(ctx: Ctx, key: &Key, key_name: &Arg, owner_arg: &Arg, ask: Ask<'_>, waiting_ahead: bool, by: By) -> Attempt {
    let attempt = grant_if_fits(ctx, key, key_name, owner_arg, ask, waiting_ahead, by);
    if matches!(attempt, Attempt::Granted(_)) {
        // An owner that holds the key again was not revoked from this
        // hold (one load while nothing was revoked).
        crate::server::revoked::regranted(ctx.selected_db(), key_name.bytes(), owner_arg.bytes());
    }
    attempt
}

/// `try_acquire`'s grant.
fn grant_if_fits(ctx: Ctx, key: &Key, key_name: &Arg, owner_arg: &Arg, ask: Ask<'_>, waiting_ahead: bool, by: By) -> Attempt {
    let (req, value) = (ask.request, ask.value);
    let owner = owner_arg.bytes();
    let now = crate::server::clock::now();
    super::ended::expire_ended_holders(ctx, key, key_name, now);
    let slot = slot(key, now, Look::Held);
    if req.mode == Mode::Shared || matches!(slot, Slot::Shared(_)) {
        return try_shared(ctx, key, key_name, owner_arg, ask, waiting_ahead, slot, now, by);
    }
    // The rules are the core's (`grant::acquire_exclusive`, checked against
    // `grant::Holding`); what follows only reads the key and carries out the
    // decision.
    let mut held_lock = None;
    let mut converted = None;
    let held = match slot {
        Slot::Shared(_) => return Attempt::Held,
        Slot::WrongType => return Attempt::WrongType,
        Slot::Held(lock) => {
            let view = OneHolder::Held { mine: lock.is_held_by(owner), token: lock.token() };
            held_lock = Some(lock);
            view
        }
        // Another owner's plain-string lock: held (it has no token).
        Slot::PlainString(value) if value != owner => OneHolder::Held { mine: false, token: 0 },
        // The owner of a plain-string lock converts it and keeps its
        // remaining lease, up to the longest lease a lock may have: a new
        // grant, which the line does not hold back (it is already held).
        Slot::PlainString(_) => {
            let longest = now.wall.saturating_add(config::max_ttl());
            let deadline = key.deadline_ms().map_or_else(|| now.wall.saturating_add(req.ttl_ms), |at| at.min(longest));
            converted = Some(Lease::until(Some(deadline), now));
            OneHolder::Free
        }
        Slot::Free => OneHolder::Free,
    };
    let ahead = waiting_ahead && converted.is_none();
    let token = match grant::acquire_exclusive(held, req.fence, ahead, |min| by.issue(min)) {
        Outcome::Held => return Attempt::Held,
        Outcome::Refused(_) => return Attempt::Failed(TOKENS_EXHAUSTED),
        Outcome::Granted(token, Grant::Regrant) => {
            // Re-grant to the same owner: a retry after a lost reply, with
            // a new token only when FENCE asked for more.
            let Some(mut lock) = held_lock else {
                return Attempt::Failed(NOT_STORED);
            };
            if token != lock.token() {
                lock.set_token(token);
            }
            let lease = Lease::starting(now, req.ttl_ms);
            if !key.expire_at(lease.mirror) {
                return Attempt::Failed(NO_LEASE);
            }
            lock.set_lease(lease);
            // A new value replaces the old in a new allocation (the key and
            // its TTL stay); the lock borrowed above is not used after.
            let lock = match value {
                Some(text) if text != lock.value() => {
                    let Some(revalued) = lock.revalued(text) else {
                        return Attempt::Failed(NOT_STORED);
                    };
                    if !value::replace(key, revalued) {
                        return Attempt::Failed(NOT_STORED);
                    }
                    match value::at(key) {
                        Some(lock) => lock,
                        None => return Attempt::Failed(NOT_STORED),
                    }
                }
                _ => lock,
            };
            propagate::granted(ctx, key_name, owner_arg, token, lease.mirror, lock.value(), by.event() == Event::Handoff);
            return Attempt::Granted(Granted { token, how: Grant::Regrant, end: lease.end, first_end: Some(lease.end) });
        }
        Outcome::Granted(token, _) => token,
    };
    let lease = converted.unwrap_or_else(|| Lease::starting(now, req.ttl_ms));
    let text = value.unwrap_or_default();
    if converted.is_none() {
        super::ended::expire_overwritten(ctx, key, key_name, now);
    }
    if !Exclusive::with_value(owner, text, token, lease, now.mono).is_some_and(|lock| value::store(key, lock)) {
        return Attempt::Failed(NOT_STORED);
    }
    if !key.expire_at(lease.mirror) {
        value::delete(key);
        return Attempt::Failed(NO_LEASE);
    }
    match by {
        By::Command => propagate::granted_by_command(ctx, key_name, owner_arg, token, lease.mirror, text),
        By::Handoff => propagate::granted(ctx, key_name, owner_arg, token, lease.mirror, text, true),
        By::Set { handoff, .. } => propagate::granted(ctx, key_name, owner_arg, token, lease.mirror, text, handoff),
    }
    Attempt::Granted(Granted { token, how: Grant::New, end: lease.end, first_end: Some(lease.end) })
}

/// Who asks `try_acquire`: the `LOCK.ACQUIRE` being executed, the
/// handoff to a waiter (in another command's context, or a timer's), or a
/// member of a set `LOCK.MACQUIRE` was granted, with the set's token
/// (`set`: every member's grant leaves as its own LOCK.APPLY).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum By {
    Command,
    Handoff,
    /// `handoff`: the set waited and its line was served.
    Set {
        token: Token,
        handoff: bool,
    },
}

impl By {
    /// A fresh token of at least `min`: the counter's, or the set's.
    fn issue(self, min: Token) -> Option<Token> {
        match self {
            By::Set { token, .. } => Some(token),
            By::Command | By::Handoff => COUNTER.issue(min),
        }
    }

    /// How its grant is announced (see `propagate::event`).
    fn event(self) -> Event {
        match self {
            By::Handoff | By::Set { handoff: true, .. } => Event::Handoff,
            By::Command | By::Set { handoff: false, .. } => Event::Grant,
        }
    }
}

/// The error of a request the core refused.
pub(super) fn refused(refusal: Refusal) -> Attempt {
    match refusal {
        Refusal::WrongKind(kind) => wrong_kind(&kind.to_string()),
        Refusal::UpgradeWithOthers => {
            Attempt::Refused(c"ERR upgrade refused: other holders share the lock; release the shared hold and ask again, exclusive".into())
        }
        Refusal::TokensExhausted => Attempt::Failed(TOKENS_EXHAUSTED),
        Refusal::Permits => Attempt::Refused(c"ERR PERMITS must be between 1 and LIMIT".into()),
        Refusal::PermitsAboveResized(limit) => Attempt::Refused(
            CString::new(format!("ERR PERMITS must be between 1 and LIMIT (the semaphore was resized to LIMIT {limit})"))
                .unwrap_or_default(),
        ),
        // Its own error code, so that a client can parse the two numbers.
        Refusal::Limit { limit, largest } => Attempt::Refused(limit_refused(limit, largest)),
        Refusal::OtherPermits(k) => Attempt::Refused(
            CString::new(format!("ERR the owner holds {k} permits; release and ask again for another number")).unwrap_or_default(),
        ),
    }
}

/// The refusal of a strict semaphore request (`SEMAPHORE n LARGEST m`)
/// by a semaphore whose terms are `limit` and `largest`: its own error
/// code, so that a client can parse the two numbers.
pub fn limit_refused(limit: u32, largest: u32) -> CString {
    CString::new(format!("LIMIT {limit} {largest} semaphore resized: ask with SEMAPHORE {limit} LARGEST {largest}")).unwrap_or_default()
}

const TOKENS_EXHAUSTED: &CStr = c"ERR fencing token space exhausted";

/// The error for a request that does not fit the key's kind.
fn wrong_kind(what: &str) -> Attempt {
    Attempt::Refused(CString::new(format!("ERR wrong lock kind: the key is {what}")).unwrap_or_default())
}

/// A shared request, or any request on a key held shared: the grant core
/// decides; this stores, sets the key's TTL and propagates.
#[allow(clippy::too_many_arguments)]
fn try_shared(
    ctx: Ctx,
    key: &Key,
    key_name: &Arg,
    owner_arg: &Arg,
    ask: Ask<'_>,
    waiting_ahead: bool,
    slot: Slot<'_>,
    now: Now,
    by: By,
) -> Attempt {
    let (owner, req) = (owner_arg.bytes(), ask.request);
    match slot {
        Slot::WrongType => Attempt::WrongType,
        Slot::PlainString(_) => wrong_kind("a plain-string lock (exclusive only)"),
        Slot::Held(_) if req.limit.is_some() => wrong_kind(&Kind::ReadWrite.to_string()),
        Slot::Held(lock) if !lock.is_held_by(owner) => Attempt::Held,
        Slot::Free if waiting_ahead => Attempt::Held,
        // A downgrade, or a new group: either way one holder, a new token.
        Slot::Held(_) | Slot::Free => {
            // A downgrade continues the exclusive hold.
            let since = match &slot {
                Slot::Held(lock) => lock.since(),
                _ => now.mono,
            };
            let downgrade = !matches!(slot, Slot::Free);
            // A downgrade without VALUE keeps the exclusive hold's value
            // (copied before the group replaces the lock; empty: no
            // allocation).
            let text: Box<[u8]> = match (&slot, ask.value) {
                (_, Some(text)) => text.into(),
                (Slot::Held(lock), None) => lock.value().into(),
                _ => Box::default(),
            };
            let Some(token) = by.issue(req.fence) else {
                return Attempt::Failed(TOKENS_EXHAUSTED);
            };
            let kind = if downgrade { Kind::ReadWrite } else { Kind::of(req.limit) };
            let lease = Lease::starting(now, req.ttl_ms);
            if !downgrade {
                super::ended::expire_overwritten(ctx, key, key_name, now);
            }
            let mut fresh = Group::new(kind);
            let member = group::Owner::with_value(owner, &text);
            fresh.holding.holders.push(Holder { owner: member, token, end: lease.end, since, permits: req.permits });
            let deadline = fresh.key_deadline(now);
            fresh.mirrored(deadline);
            if !value::store_group(key, fresh) {
                return Attempt::Failed(NOT_STORED);
            }
            if deadline != lease::NO_TTL && !key.expire_at(deadline) {
                value::delete(key);
                return Attempt::Failed(NO_LEASE);
            }
            let limit = if downgrade { 0 } else { req.limit.unwrap_or(0) };
            let terms = SharedTerms { limit, key_deadline_ms: deadline, permits: req.permits };
            propagate::shared_granted(ctx, key_name, owner, token, lease.mirror, terms, &text);
            propagate::shared_grant_event(ctx, key_name, owner, token, &text, by.event() == Event::Handoff);
            let how = if downgrade { Grant::Downgrade } else { Grant::New };
            Attempt::Granted(Granted { token, how, end: lease.end, first_end: Some(lease.end) })
        }
        Slot::Shared(group) => {
            let owner_box: group::Owner = owner.into();
            match group.holding.acquire_valued(&owner_box, ask.value, req, now.mono, waiting_ahead, |min| by.issue(min)) {
                Outcome::Held => Attempt::Held,
                Outcome::Refused(refusal) => refused(refusal),
                Outcome::Granted(token, Grant::Upgrade) => {
                    let lease = Lease::starting(now, req.ttl_ms);
                    // An upgrade continues the shared hold.
                    let since = group.holding.holder(owner).map_or(now.mono, |h| h.since);
                    // An upgrade without VALUE keeps the shared hold's,
                    // copied: storing the lock frees the group.
                    let text: Box<[u8]> = ask.value.unwrap_or_else(|| group.holding.value_of(owner)).into();
                    if !Exclusive::with_value(owner, &text, token, lease, since).is_some_and(|lock| value::store(key, lock)) {
                        return Attempt::Failed(NOT_STORED);
                    }
                    if !key.expire_at(lease.mirror) {
                        value::delete(key);
                        return Attempt::Failed(NO_LEASE);
                    }
                    propagate::granted(ctx, key_name, owner_arg, token, lease.mirror, &text, by.event() == Event::Handoff);
                    Attempt::Granted(Granted { token, how: Grant::Upgrade, end: lease.end, first_end: Some(lease.end) })
                }
                Outcome::Granted(token, how) => {
                    let deadline = group.key_deadline(now);
                    if deadline != group.key_mirror() && deadline != lease::NO_TTL && !key.expire_at(deadline) {
                        if how == Grant::New {
                            group.holding.remove(owner);
                        }
                        return Attempt::Failed(NO_LEASE);
                    }
                    group.mirrored(deadline);
                    // The holder's lease as `Holding::acquire` set it.
                    let lease = Lease::starting(now, req.ttl_ms);
                    let terms = SharedTerms { limit: group.limit(), key_deadline_ms: deadline, permits: req.permits };
                    let text = group.holding.value_of(owner);
                    propagate::shared_granted(ctx, key_name, owner, token, lease.mirror, terms, text);
                    propagate::shared_grant_event(ctx, key_name, owner, token, text, by.event() == Event::Handoff);
                    let first_end = group.earliest_end(now).unwrap_or(lease.end);
                    Attempt::Granted(Granted { token, how, end: lease.end, first_end: Some(first_end) })
                }
            }
        }
    }
}
