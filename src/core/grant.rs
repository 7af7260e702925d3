//! The grant rules of every lock kind, in one place that knows no Redis
//! types: who may hold a key at once, when a request is granted, refused
//! or must wait, and what re-grants, downgrades and upgrades do. The
//! module's commands, data type callbacks and timers are the glue around
//! it (as redis-cell keeps its rate limiter apart from its commands).
//!
//! A key is one of two kinds, fixed by the grant that created it:
//! - a **read-write lock** (`LOCK.ACQUIRE` without `LIMIT`): one exclusive
//!   holder, or any number of shared ones (`SHARED`); a mutex is a
//!   read-write lock nobody asks `SHARED` of;
//! - a **semaphore** (`SHARED LIMIT n`): holders taking at most `n`
//!   permits in all, each hold `PERMITS k` of them (1 unless asked).
//!
//! Every holder has its own owner, token and lease. Requests are served in
//! one FIFO line per key across modes: a request finding others waiting is
//! not granted ahead of them (no barging), the head is granted as soon as
//! it is compatible, and consecutive shared requests at the head go
//! together; an exclusive request at the head holds back every later
//! shared one until it has had its turn, so writers do not starve.
//!
//! Time is a monotonic millisecond count chosen by the caller; tokens come
//! from the caller's counter.

use std::borrow::Borrow;
use std::fmt;

pub use super::token::Token;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    Exclusive,
    Shared,
}

/// What a key is, from the grant that created it until its last holder
/// leaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    ReadWrite,
    /// `resized`: LOCK.RESIZE set `limit`, and a request with any LIMIT is
    /// served under it until the last holder leaves (its holders may take
    /// more than `limit` after a shrink). `largest`: the largest limit in
    /// force since the group was created (`>= limit`; equal while never
    /// resized), which a strict request (`LARGEST m`) must name: the quorum
    /// client's safety rests on it never decreasing while the group lives.
    Semaphore {
        limit: u32,
        resized: bool,
        largest: u32,
    },
}

/// The largest `SHARED LIMIT`: a semaphore's holders live in its value
/// and LOCK.INFO lists them all.
pub const MAX_LIMIT: u32 = 100_000;

impl Kind {
    /// The kind a request creates when the key is free.
    pub fn of(limit: Option<u32>) -> Kind {
        limit.map_or(Kind::ReadWrite, |limit| Kind::Semaphore { limit, resized: false, largest: limit })
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Kind::ReadWrite => f.write_str("a lock (exclusive or SHARED, no LIMIT)"),
            Kind::Semaphore { limit, resized: false, .. } => write!(f, "a semaphore (SHARED LIMIT {limit})"),
            Kind::Semaphore { limit, resized: true, .. } => write!(f, "a semaphore (SHARED LIMIT {limit}, resized)"),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder<O> {
    pub owner: O,
    pub token: Token,
    /// When the lease ends (monotonic ms; `lease::NO_END`).
    pub end: i64,
    /// When the hold began (monotonic ms): a re-grant, a downgrade or an
    /// upgrade continues it.
    pub since: i64,
    /// How many of a semaphore's permits the hold takes (`PERMITS k`); 1
    /// for every other hold.
    pub permits: u32,
}

/// What a LOCK.ACQUIRE asks for, from its parsing through its wait in
/// line to its grant: the one request type of the module. Its owner
/// travels beside it (the command's argument, a waiter's copy, a holder's
/// owner), so asking costs no copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    pub mode: Mode,
    /// `SHARED LIMIT n`; `None` without LIMIT.
    pub limit: Option<u32>,
    /// `PERMITS k`: how many of the semaphore's permits one hold takes;
    /// 1 without PERMITS (and for every request without LIMIT).
    pub permits: u32,
    pub ttl_ms: i64,
    /// `FENCE`: the token granted must be at least this (0: none).
    pub fence: Token,
    /// `SESSION [DELAY ms]`: the hold ends with the connection granted it,
    /// `DELAY` ms after it closes (`Some(0)` without DELAY). The grant
    /// rules do not depend on it; the glue binds the hold (`session`).
    pub session: Option<i64>,
}

/// Why a request is refused outright (an error, not "held").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The request does not fit the key's kind (another LIMIT, LIMIT on a
    /// lock, exclusive on a semaphore).
    WrongKind(Kind),
    /// A shared holder asked for exclusive while others hold it too.
    UpgradeWithOthers,
    /// `PERMITS k` outside 1..=LIMIT (or above 1 without LIMIT).
    Permits,
    /// `PERMITS k` above the limit of a resized semaphore, which serves
    /// the request under that limit (its own LIMIT may be higher).
    PermitsAboveResized(u32),
    /// The holder asked again with another `PERMITS` than the k it holds:
    /// one hold, one size.
    OtherPermits(u32),
    /// The token counter cannot go further.
    TokensExhausted,
    /// A strict request (`SEMAPHORE n LARGEST m`) whose (n, m) is not the
    /// held semaphore's (limit in force, largest): the ones to ask with.
    Limit { limit: u32, largest: u32 },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Grant {
    /// A new holder.
    New,
    /// The owner already held it in this mode: new lease, same token
    /// (a new one only when FENCE asks for more).
    Regrant,
    /// The exclusive holder now holds it shared, with a new token.
    Downgrade,
    /// The only shared holder now holds it exclusively, with a new token.
    Upgrade,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Granted(Token, Grant),
    /// Not now: held incompatibly, or others wait first.
    Held,
    Refused(Refusal),
}

/// The holders of one key. Empty means free (the caller then deletes it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holding<O> {
    pub kind: Kind,
    pub mode: Mode,
    pub holders: Vec<Holder<O>>,
}

impl<O: PartialEq + Clone> Holding<O> {
    /// A key nobody holds, of the kind `req` would create.
    pub fn free_for(req: &Request) -> Holding<O> {
        Holding { kind: Kind::of(req.limit), mode: req.mode, holders: Vec::new() }
    }

    pub fn is_free(&self) -> bool {
        self.holders.is_empty()
    }

    pub fn holder<Q: PartialEq + ?Sized>(&self, owner: &Q) -> Option<&Holder<O>>
    where
        O: Borrow<Q>,
    {
        self.holders.iter().find(|h| h.owner.borrow() == owner)
    }

    /// Drops the holders whose lease has ended by `now`; true if any.
    pub fn expire(&mut self, now: i64) -> bool {
        let before = self.holders.len();
        self.holders.retain(|h| h.end > now);
        self.holders.len() != before
    }

    /// The permits the holders take, ended leases included (see `expire`).
    fn taken(&self) -> u64 {
        self.holders.iter().map(|h| u64::from(h.permits)).sum()
    }

    /// Whether `req` fits this key's kind. A free key takes any kind; a
    /// request's PERMITS must fit its own LIMIT whatever the key. A
    /// resized semaphore takes a shared request with any LIMIT, served
    /// under its own (a newcomer's PERMITS above it: `fits_newcomer`).
    pub fn fits(&self, req: &Request) -> Result<(), Refusal> {
        if req.permits == 0 || req.permits > req.limit.unwrap_or(1) {
            return Err(Refusal::Permits);
        }
        if self.is_free() {
            return Ok(());
        }
        let fits = match self.kind {
            Kind::ReadWrite => req.limit.is_none(),
            Kind::Semaphore { limit, resized: false, .. } => req.mode == Mode::Shared && req.limit == Some(limit),
            Kind::Semaphore { resized: true, .. } => req.mode == Mode::Shared && req.limit.is_some(),
        };
        if fits {
            Ok(())
        } else {
            Err(Refusal::WrongKind(self.kind))
        }
    }

    /// Whether a new holder's `PERMITS k` could ever be granted: on a
    /// resized semaphore, not above the limit in force (a holder that
    /// already takes more after a shrink keeps, and may re-grant, its k).
    pub fn fits_newcomer(&self, req: &Request) -> Result<(), Refusal> {
        match self.kind {
            Kind::Semaphore { limit, resized: true, .. } if !self.is_free() && req.permits > limit => {
                Err(Refusal::PermitsAboveResized(limit))
            }
            _ => Ok(()),
        }
    }

    /// LOCK.RESIZE: a semaphore's limit becomes `limit`, and requests with
    /// any LIMIT are served under it from now on (`fits`). The holders
    /// keep their permits, also beyond a smaller limit: admission compares
    /// with the new limit, so nobody joins until they fall under it. False
    /// (nothing changed) for any other kind or a free key.
    /// The largest limit in force never decreases while the group lives.
    pub fn resize(&mut self, limit: u32) -> bool {
        let Kind::Semaphore { largest, .. } = self.kind else { return false };
        if self.is_free() {
            return false;
        }
        self.kind = Kind::Semaphore { limit, resized: true, largest: largest.max(limit) };
        true
    }

    /// Whether a strict request (`SEMAPHORE limit LARGEST largest`) may be
    /// served here: on a free key, or a semaphore whose limit in force and
    /// largest are exactly those. A resized semaphore, or one of the same
    /// limit, refuses any other, naming its own (the terms to ask under);
    /// a semaphore never resized whose limit is another is left to `fits`,
    /// which refuses it as the wrong kind: holds of two limits side by side
    /// are a mistake to report, not terms to learn (issue 55). A key of
    /// another kind is left to `fits` too.
    pub fn fits_strictly(&self, limit: u32, largest: u32) -> Result<(), Refusal> {
        match self.kind {
            Kind::Semaphore { limit: held, resized, largest: held_largest }
                if !self.is_free() && (held, held_largest) != (limit, largest) && (resized || held == limit) =>
            {
                Err(Refusal::Limit { limit: held, largest: held_largest })
            }
            _ => Ok(()),
        }
    }

    /// A semaphore a strict request created (it was free): its largest is
    /// the one asked, and above the limit it is marked resized, so that
    /// plain requests with any LIMIT are served under it as under any
    /// resized group.
    pub fn created_with_largest(&mut self, largest: u32) {
        if let Kind::Semaphore { limit, .. } = self.kind {
            if largest > limit {
                self.kind = Kind::Semaphore { limit, resized: true, largest };
            }
        }
    }

    /// Marks a semaphore whose holders take more than its limit as
    /// resized: only a shrink leaves holders over the limit, and a group
    /// stored over its limit without the mark is one no load accepts
    /// (`stored::check_group`). A replayed holder (LOCK.APPLY) may arrive
    /// before the resize that made it possible (an AOF rewrite writes the
    /// holders first), or from a client's LOCK.APPLY.
    pub fn mark_if_over_limit(&mut self) {
        if let Kind::Semaphore { limit, resized: false, largest } = self.kind {
            if self.taken() > u64::from(limit) {
                self.kind = Kind::Semaphore { limit, resized: true, largest };
            }
        }
    }

    /// Whether a new holder asking `req` may join the holders now.
    pub(super) fn admits(&self, req: &Request) -> bool {
        self.admits_beside(self.holders.len(), self.taken(), req)
    }

    /// Whether a new holder asking `req` may join `holding` running
    /// holders that take `taken` permits: on a semaphore, only when its k
    /// permits are free (a request for more than are free waits, whatever
    /// smaller requests might fit).
    fn admits_beside(&self, holding: usize, taken: u64, req: &Request) -> bool {
        if holding == 0 {
            return true;
        }
        match (self.mode, req.mode) {
            (Mode::Shared, Mode::Shared) => match self.kind {
                Kind::ReadWrite => true,
                Kind::Semaphore { limit, .. } => taken + u64::from(req.permits) <= u64::from(limit),
            },
            _ => false,
        }
    }

    /// Whether `owner` would get past the holders at `now` if it were the
    /// head of the line, without granting anything: it holds the key
    /// already (a re-grant, a downgrade, or an upgrade the grant may still
    /// refuse), or `req` fits the key and there is room beside its running
    /// holders. What a waiter's rights are checked for before a handoff.
    pub fn may_admit<Q: PartialEq + ?Sized>(&self, owner: &Q, req: &Request, now: i64) -> bool
    where
        O: Borrow<Q>,
    {
        let running = || self.holders.iter().filter(|h| h.end > now);
        if running().any(|h| h.owner.borrow() == owner) {
            return true;
        }
        let holding = running().count();
        let taken = running().map(|h| u64::from(h.permits)).sum();
        holding == 0 || (self.fits(req).is_ok() && self.admits_beside(holding, taken, req))
    }

    /// Sets `owner`'s hold exactly as given (a replica replaying its
    /// master's grant): its token, lease end and permits replaced, or a
    /// new holder since `now` (the owner copied only then). No rule is
    /// checked: the grant was decided where it was made.
    pub fn replay<'q, Q: PartialEq + ?Sized>(&mut self, owner: &'q Q, token: Token, end: i64, permits: u32, now: i64)
    where
        O: Borrow<Q>,
        &'q Q: Into<O>,
    {
        match self.holders.iter_mut().find(|h| h.owner.borrow() == owner) {
            Some(holder) => {
                holder.token = token;
                holder.end = end;
                holder.permits = permits;
            }
            None => self.holders.push(Holder { owner: owner.into(), token, end, since: now, permits }),
        }
    }

    /// Tries to grant `req` to `owner` at `now`. `waiting_ahead`: others wait in the
    /// key's line before this request (a newcomer is then not granted; the
    /// line's head asks with `false`). `issue(min)` hands out a fresh
    /// token of at least `min`.
    pub fn acquire(
        &mut self,
        owner: &O,
        req: &Request,
        now: i64,
        waiting_ahead: bool,
        mut issue: impl FnMut(Token) -> Option<Token>,
    ) -> Outcome {
        self.expire(now);
        if let Err(refusal) = self.fits(req) {
            return Outcome::Refused(refusal);
        }
        let end = now.saturating_add(req.ttl_ms);
        let sole = self.holders.len() == 1;
        if let Some((current, permits)) = self.holder(owner).map(|h| (h.token, h.permits)) {
            if permits != req.permits {
                return Outcome::Refused(Refusal::OtherPermits(permits));
            }
            let how = match (self.mode, req.mode) {
                (held, asked) if held == asked => Grant::Regrant,
                (Mode::Exclusive, Mode::Shared) => Grant::Downgrade,
                (_, _) if sole => Grant::Upgrade,
                _ => return Outcome::Refused(Refusal::UpgradeWithOthers),
            };
            // A change of mode is a new grant: its token must exceed every
            // token the key's earlier holders had.
            let token = if how == Grant::Regrant && req.fence <= current {
                current
            } else {
                match issue(req.fence) {
                    Some(t) => t,
                    None => return Outcome::Refused(Refusal::TokensExhausted),
                }
            };
            self.mode = req.mode;
            if let Some(h) = self.holders.iter_mut().find(|h| h.owner == *owner) {
                h.token = token;
                h.end = end;
            }
            return Outcome::Granted(token, how);
        }
        if let Err(refusal) = self.fits_newcomer(req) {
            return Outcome::Refused(refusal);
        }
        if waiting_ahead || !self.admits(req) {
            return Outcome::Held;
        }
        let Some(token) = issue(req.fence) else {
            return Outcome::Refused(Refusal::TokensExhausted);
        };
        if self.is_free() {
            *self = Holding::free_for(req);
        }
        self.holders.push(Holder { owner: owner.clone(), token, end, since: now, permits: req.permits });
        Outcome::Granted(token, Grant::New)
    }

    /// Ends `owner`'s hold; false if it held nothing (or its lease ended).
    pub fn release<Q: PartialEq + ?Sized>(&mut self, owner: &Q, now: i64) -> bool
    where
        O: Borrow<Q>,
    {
        self.expire(now);
        self.remove(owner)
    }

    /// Ends `owner`'s hold as stored, whatever its lease: a replica and an
    /// AOF replay what the master decided, on leases their own clock may
    /// see otherwise. False if it held nothing.
    pub fn remove<Q: PartialEq + ?Sized>(&mut self, owner: &Q) -> bool
    where
        O: Borrow<Q>,
    {
        let before = self.holders.len();
        self.holders.retain(|h| h.owner.borrow() != owner);
        self.holders.len() != before
    }

    /// Cuts `owner`'s running hold short to end at `end` (its connection
    /// closed, with a lock-delay); its token if it was cut, `None` if it
    /// holds nothing or ends by then anyway. Never lengthens a hold.
    pub fn cut_short<Q: PartialEq + ?Sized>(&mut self, owner: &Q, end: i64, now: i64) -> Option<Token>
    where
        O: Borrow<Q>,
    {
        let holder = self.holders.iter_mut().find(|h| h.owner.borrow() == owner && h.end > now && end < h.end)?;
        holder.end = end;
        Some(holder.token)
    }

    /// Gives `owner`'s hold a lease of `ttl_ms` from `now`; its token if
    /// it held the key (a running lease), `None` otherwise.
    pub fn extend<Q: PartialEq + ?Sized>(&mut self, owner: &Q, ttl_ms: i64, now: i64) -> Option<Token>
    where
        O: Borrow<Q>,
    {
        self.expire(now);
        let holder = self.holders.iter_mut().find(|h| h.owner.borrow() == owner)?;
        holder.end = now.saturating_add(ttl_ms);
        Some(holder.token)
    }
}

/// Who holds a key that is free or held exclusively, as the exclusive
/// path sees it without building a `Holding` (no allocation on the hot path):
/// the one holder's running lease, if any.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OneHolder {
    Free,
    /// Held exclusively, by the asking owner (`mine`) or another, with
    /// this token.
    Held {
        mine: bool,
        token: Token,
    },
}

/// `Holding::acquire` for an exclusive request without a LIMIT on a key that
/// is free or held exclusively (`held`), at the same rules: the holder's
/// own request is a re-grant that keeps its token unless FENCE asks for
/// more; another holder's key is held; a free key goes to the request
/// unless others wait ahead of it. The property test `one_holder_view`
/// checks it against `Holding::acquire` on the same one-holder lock.
pub fn acquire_exclusive(held: OneHolder, fence: Token, waiting_ahead: bool, mut issue: impl FnMut(Token) -> Option<Token>) -> Outcome {
    match held {
        OneHolder::Held { mine: true, token } => {
            if fence <= token {
                return Outcome::Granted(token, Grant::Regrant);
            }
            match issue(fence) {
                Some(t) => Outcome::Granted(t, Grant::Regrant),
                None => Outcome::Refused(Refusal::TokensExhausted),
            }
        }
        OneHolder::Held { mine: false, .. } => Outcome::Held,
        OneHolder::Free if waiting_ahead => Outcome::Held,
        OneHolder::Free => match issue(fence) {
            Some(t) => Outcome::Granted(t, Grant::New),
            None => Outcome::Refused(Refusal::TokensExhausted),
        },
    }
}

/// `Holding::release` for a key that is free or held exclusively (`held`):
/// whether the asking owner's hold ends. Only a running hold of its own
/// does; a holder whose lease ended is `OneHolder::Free`.
pub fn release_exclusive(held: OneHolder) -> bool {
    matches!(held, OneHolder::Held { mine: true, .. })
}

/// `Holding::extend` for a key that is free or held exclusively: whether the
/// asking owner's hold takes the new lease (the same rule as a release:
/// its own running hold only).
pub fn extend_exclusive(held: OneHolder) -> bool {
    matches!(held, OneHolder::Held { mine: true, .. })
}

/// `LOCK.PROCLAIM` on a key that is free or held exclusively: whether the
/// asking owner may replace the value stored with the hold (its own
/// running hold only, as an extension; the lease and token stay).
pub fn proclaim_exclusive(held: OneHolder) -> bool {
    matches!(held, OneHolder::Held { mine: true, .. })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_running_holder_proclaims() {
        assert!(proclaim_exclusive(OneHolder::Held { mine: true, token: 4 }));
        assert!(!proclaim_exclusive(OneHolder::Held { mine: false, token: 4 }));
        assert!(!proclaim_exclusive(OneHolder::Free));
    }

    fn ask(owner: &'static str, mode: Mode, limit: Option<u32>) -> (&'static &'static str, Request) {
        static OWNERS: [&str; 8] = ["a", "b", "c", "d", "e", "f", "g", "h"];
        let owner = OWNERS.iter().find(|o| **o == owner).expect("known owner");
        (owner, Request { mode, limit, ttl_ms: 1_000, fence: 0, permits: 1, session: None })
    }

    fn grant(
        l: &mut Holding<&'static str>,
        (owner, req): (&'static &'static str, Request),
        now: i64,
        waiting_ahead: bool,
        issue: impl FnMut(Token) -> Option<Token>,
    ) -> Outcome {
        l.acquire(owner, &req, now, waiting_ahead, issue)
    }

    fn counter() -> impl FnMut(Token) -> Option<Token> {
        let mut last = 0;
        move |min| {
            last = (last + 1).max(min);
            Some(last)
        }
    }

    #[test]
    fn readers_share_and_a_writer_waits_for_all_of_them() {
        let mut issue = counter();
        let mut l = Holding::free_for(&ask("a", Mode::Shared, None).1);
        assert!(matches!(grant(&mut l, ask("a", Mode::Shared, None), 0, false, &mut issue), Outcome::Granted(1, Grant::New)));
        assert!(matches!(grant(&mut l, ask("b", Mode::Shared, None), 0, false, &mut issue), Outcome::Granted(2, Grant::New)));
        assert_eq!(grant(&mut l, ask("c", Mode::Exclusive, None), 0, false, &mut issue), Outcome::Held);
        assert!(l.release(&"a", 0));
        assert_eq!(grant(&mut l, ask("c", Mode::Exclusive, None), 0, false, &mut issue), Outcome::Held);
        assert!(l.release(&"b", 0));
        assert!(l.is_free());
        assert!(matches!(grant(&mut l, ask("c", Mode::Exclusive, None), 0, false, &mut issue), Outcome::Granted(3, Grant::New)));
        assert_eq!(grant(&mut l, ask("a", Mode::Shared, None), 0, false, &mut issue), Outcome::Held);
    }

    #[test]
    fn a_semaphore_admits_up_to_its_limit_and_only_its_own_kind() {
        let mut issue = counter();
        let sem = |o| ask(o, Mode::Shared, Some(2));
        let mut l = Holding::free_for(&sem("a").1);
        assert!(matches!(grant(&mut l, sem("a"), 0, false, &mut issue), Outcome::Granted(..)));
        assert!(matches!(grant(&mut l, sem("b"), 0, false, &mut issue), Outcome::Granted(..)));
        assert_eq!(grant(&mut l, sem("c"), 0, false, &mut issue), Outcome::Held);
        let wrong = Outcome::Refused(Refusal::WrongKind(Kind::Semaphore { limit: 2, resized: false, largest: 2 }));
        assert_eq!(grant(&mut l, ask("c", Mode::Shared, Some(3)), 0, false, &mut issue), wrong);
        assert_eq!(grant(&mut l, ask("c", Mode::Shared, None), 0, false, &mut issue), wrong);
        assert_eq!(grant(&mut l, ask("c", Mode::Exclusive, None), 0, false, &mut issue), wrong);
        // A lease that ends frees a permit.
        assert!(l.extend(&"a", 5_000, 0).is_some());
        assert!(matches!(grant(&mut l, sem("c"), 1_000, false, &mut issue), Outcome::Granted(..)));
        assert_eq!(l.holders.len(), 2);
    }

    /// LOCK.RESIZE: holders keep their permits; admission compares with
    /// the new limit; requests with any LIMIT are served under it, PERMITS
    /// above it refused; the mark goes with the last holder.
    #[test]
    fn a_resized_semaphore_admits_under_its_new_limit() {
        let mut issue = counter();
        let sem = |o, limit| ask(o, Mode::Shared, Some(limit));
        let mut l = Holding::free_for(&sem("a", 3).1);
        for o in ["a", "b", "c"] {
            assert!(matches!(grant(&mut l, sem(o, 3), 0, false, &mut issue), Outcome::Granted(..)));
        }
        assert!(l.resize(1), "shrunk below what is taken");
        assert_eq!(l.kind, Kind::Semaphore { limit: 1, resized: true, largest: 3 }, "the largest limit stays");
        assert_eq!(l.holders.len(), 3, "the holders keep their permits");
        assert_eq!(grant(&mut l, sem("d", 3), 0, false, &mut issue), Outcome::Held, "the old LIMIT, served under 1");
        assert!(l.release(&"a", 0) && l.release(&"b", 0));
        assert_eq!(grant(&mut l, sem("d", 7), 0, false, &mut issue), Outcome::Held, "1 of 1 taken");
        assert!(l.resize(4));
        assert!(matches!(grant(&mut l, sem("d", 7), 0, false, &mut issue), Outcome::Granted(..)), "any LIMIT");
        let (owner, req) = sem("e", 9);
        assert_eq!(
            l.acquire(owner, &Request { permits: 5, ..req }, 0, false, &mut issue),
            Outcome::Refused(Refusal::PermitsAboveResized(4))
        );
        assert!(!l.may_admit(owner, &Request { permits: 5, ..req }, 0));
        let wrong = Outcome::Refused(Refusal::WrongKind(Kind::Semaphore { limit: 4, resized: true, largest: 4 }));
        assert_eq!(grant(&mut l, ask("e", Mode::Shared, None), 0, false, &mut issue), wrong);
        assert_eq!(grant(&mut l, ask("e", Mode::Exclusive, None), 0, false, &mut issue), wrong);
        assert!(l.release(&"c", 0) && l.release(&"d", 0));
        assert!(!l.resize(2), "a free key has nothing to resize");
        assert!(matches!(grant(&mut l, sem("f", 2), 0, false, &mut issue), Outcome::Granted(..)));
        assert_eq!(l.kind, Kind::Semaphore { limit: 2, resized: false, largest: 2 }, "the mark went with the last holder");
        let mut lock = Holding::free_for(&ask("a", Mode::Shared, None).1);
        assert!(matches!(grant(&mut lock, ask("a", Mode::Shared, None), 0, false, &mut issue), Outcome::Granted(..)));
        assert!(!lock.resize(2), "a read-write lock is no semaphore");
    }

    #[test]
    fn weighted_permits_take_k_of_n_and_a_large_head_holds_back_smaller_ones() {
        let mut issue = counter();
        let take = |o, k| {
            let (owner, req) = ask(o, Mode::Shared, Some(5));
            (owner, Request { permits: k, ..req })
        };
        let mut l = Holding::free_for(&take("a", 3).1);
        assert!(matches!(grant(&mut l, take("a", 3), 0, false, &mut issue), Outcome::Granted(..)));
        assert_eq!(grant(&mut l, take("b", 3), 0, false, &mut issue), Outcome::Held, "3 + 3 of 5");
        assert!(matches!(grant(&mut l, take("b", 2), 0, false, &mut issue), Outcome::Granted(..)), "3 + 2 of 5");
        assert!(l.release(&"b", 0));
        // 2 are free: a head asking 3 waits, and a later request for 1,
        // which would fit, does not pass it.
        assert_eq!(grant(&mut l, take("c", 3), 0, false, &mut issue), Outcome::Held);
        assert_eq!(grant(&mut l, take("d", 1), 0, true, &mut issue), Outcome::Held, "no barging past the head for 3");
        assert!(l.may_admit(&"d", &take("d", 1).1, 0));
        assert!(!l.may_admit(&"c", &take("c", 3).1, 0));
        // One hold, one size.
        assert_eq!(grant(&mut l, take("a", 2), 0, false, &mut issue), Outcome::Refused(Refusal::OtherPermits(3)));
        assert!(matches!(grant(&mut l, take("a", 3), 0, false, &mut issue), Outcome::Granted(_, Grant::Regrant)));
        assert!(l.release(&"a", 0));
        assert!(matches!(grant(&mut l, take("c", 3), 0, false, &mut issue), Outcome::Granted(..)));
        assert_eq!(l.holder(&"c").map(|h| h.permits), Some(3));
    }

    #[test]
    fn permits_outside_one_to_the_limit_are_refused() {
        let mut issue = counter();
        let (a, sem) = ask("a", Mode::Shared, Some(2));
        let mut l = Holding::free_for(&sem);
        for permits in [0, 3] {
            assert_eq!(l.acquire(a, &Request { permits, ..sem }, 0, false, &mut issue), Outcome::Refused(Refusal::Permits));
        }
        let (b, lock) = ask("b", Mode::Shared, None);
        assert_eq!(l.acquire(b, &Request { permits: 2, ..lock }, 0, false, &mut issue), Outcome::Refused(Refusal::Permits));
        assert!(l.is_free(), "a refusal takes nothing");
    }

    #[test]
    fn a_lock_refuses_a_limit() {
        let mut issue = counter();
        let mut l = Holding::free_for(&ask("a", Mode::Exclusive, None).1);
        grant(&mut l, ask("a", Mode::Exclusive, None), 0, false, &mut issue);
        assert_eq!(
            grant(&mut l, ask("b", Mode::Shared, Some(2)), 0, false, &mut issue),
            Outcome::Refused(Refusal::WrongKind(Kind::ReadWrite))
        );
    }

    #[test]
    fn nobody_barges_past_the_line() {
        let mut issue = counter();
        let mut l = Holding::free_for(&ask("a", Mode::Shared, None).1);
        grant(&mut l, ask("a", Mode::Shared, None), 0, false, &mut issue);
        assert_eq!(grant(&mut l, ask("b", Mode::Shared, None), 0, true, &mut issue), Outcome::Held, "others wait first");
        assert!(matches!(grant(&mut l, ask("a", Mode::Shared, None), 0, true, &mut issue), Outcome::Granted(_, Grant::Regrant)));
    }

    #[test]
    fn downgrade_and_upgrade_take_new_tokens() {
        let mut issue = counter();
        let mut l = Holding::free_for(&ask("a", Mode::Exclusive, None).1);
        assert_eq!(grant(&mut l, ask("a", Mode::Exclusive, None), 0, false, &mut issue), Outcome::Granted(1, Grant::New));
        assert_eq!(grant(&mut l, ask("a", Mode::Shared, None), 0, false, &mut issue), Outcome::Granted(2, Grant::Downgrade));
        assert!(matches!(grant(&mut l, ask("b", Mode::Shared, None), 0, false, &mut issue), Outcome::Granted(3, Grant::New)));
        assert_eq!(grant(&mut l, ask("a", Mode::Exclusive, None), 0, false, &mut issue), Outcome::Refused(Refusal::UpgradeWithOthers));
        assert!(l.release(&"b", 0));
        assert_eq!(grant(&mut l, ask("a", Mode::Exclusive, None), 0, false, &mut issue), Outcome::Granted(4, Grant::Upgrade));
        assert_eq!(l.mode, Mode::Exclusive);
    }

    #[test]
    fn a_hold_is_cut_short_never_lengthened() {
        let mut issue = counter();
        let mut l = Holding::free_for(&ask("a", Mode::Shared, None).1);
        grant(&mut l, ask("a", Mode::Shared, None), 0, false, &mut issue);
        grant(&mut l, ask("b", Mode::Shared, None), 0, false, &mut issue);
        assert_eq!(l.cut_short(&"a", 2_000, 0), None, "ends at 1000 anyway");
        assert_eq!(l.cut_short(&"a", 400, 0), Some(1));
        assert_eq!(l.holder(&"a").map(|h| h.end), Some(400));
        assert_eq!(l.holder(&"b").map(|h| h.end), Some(1_000), "the others keep their lease");
        assert_eq!(l.cut_short(&"c", 10, 0), None);
        assert_eq!(l.cut_short(&"a", 10, 500), None, "a hold that has ended");
    }

    /// `may_admit` answers yes exactly when the head of the line would be
    /// granted, or already holds the key (its request may still be refused).
    #[test]
    fn may_admit_agrees_with_acquire() {
        let owners = ["a", "b", "c"];
        let requests = [(Mode::Exclusive, None), (Mode::Shared, None), (Mode::Shared, Some(2)), (Mode::Shared, Some(3))];
        let mut checked = 0;
        for first in requests {
            for second in requests {
                for holders in 0..=2 {
                    let mut issue = counter();
                    let mut l = Holding::free_for(&ask("a", first.0, first.1).1);
                    for (i, req) in [first, second].into_iter().take(holders).enumerate() {
                        let _ = grant(&mut l, ask(owners[i], req.0, req.1), 0, false, &mut issue);
                    }
                    for owner in owners {
                        for asked in requests {
                            let (o, req) = ask(owner, asked.0, asked.1);
                            let holds = l.holder(o).is_some();
                            let granted = matches!(l.clone().acquire(o, &req, 0, false, counter()), Outcome::Granted(..));
                            assert_eq!(l.may_admit(o, &req, 0), holds || granted, "{l:?} {owner} {asked:?}");
                            // A lease that ended leaves room.
                            assert!(l.may_admit(o, &req, 1_000));
                            checked += 1;
                        }
                    }
                }
            }
        }
        assert_eq!(checked, 4 * 4 * 3 * 3 * 4);
    }

    #[test]
    fn a_replay_sets_a_holder_exactly() {
        let mut l: Holding<String> = Holding::free_for(&ask("a", Mode::Shared, None).1);
        l.replay("a", 7, 100, 1, 1);
        l.replay("b", 3, 50, 2, 2);
        l.replay("a", 9, 40, 3, 5);
        let holder = |owner: &str, token, end, since, permits| Holder { owner: owner.to_string(), token, end, since, permits };
        assert_eq!(l.holders, vec![holder("a", 9, 40, 1, 3), holder("b", 3, 50, 2, 2)]);
    }

    #[test]
    fn a_regrant_keeps_its_token_unless_fence_asks_more() {
        let mut issue = counter();
        let mut l = Holding::free_for(&ask("a", Mode::Exclusive, None).1);
        grant(&mut l, ask("a", Mode::Exclusive, None), 0, false, &mut issue);
        assert_eq!(grant(&mut l, ask("a", Mode::Exclusive, None), 10, false, &mut issue), Outcome::Granted(1, Grant::Regrant));
        let (a, plain) = ask("a", Mode::Exclusive, None);
        let fenced = (a, Request { fence: 50, ..plain });
        assert_eq!(grant(&mut l, fenced, 10, false, &mut issue), Outcome::Granted(50, Grant::Regrant));
        assert_eq!(l.holder(&"a").map(|h| h.end), Some(1_010));
    }
}

/// Random sequences of requests, releases, extensions, waits, timeouts
/// and the passing of time, driven the way the module drives the core
/// (one line per key, served from its head after every change), checked
/// after every step against rules computed apart from the core.
#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;
    use std::collections::{HashMap, VecDeque};

    const OWNERS: u8 = 6;

    #[derive(Clone, Debug)]
    enum Op {
        Ask {
            owner: u8,
            shared: bool,
            wait: bool,
            ttl: i64,
            /// On a semaphore, `1 + permits % limit` permits.
            permits: u32,
        },
        Release(u8),
        Extend(u8, i64),
        Advance(i64),
        /// The waiter leaves the line (its WAIT timed out, it disconnected).
        Leave(u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0..OWNERS, any::<bool>(), any::<bool>(), 1i64..2_000, 0u32..4)
                .prop_map(|(owner, shared, wait, ttl, permits)| Op::Ask { owner, shared, wait, ttl, permits }),
            2 => (0..OWNERS).prop_map(Op::Release),
            1 => (0..OWNERS, 1i64..2_000).prop_map(|(o, t)| Op::Extend(o, t)),
            2 => (0i64..1_500).prop_map(Op::Advance),
            1 => (0..OWNERS).prop_map(Op::Leave),
        ]
    }

    struct Waiter {
        owner: u8,
        mode: Mode,
        ttl: i64,
        permits: u32,
    }

    struct Run {
        limit: Option<u32>,
        lock: Holding<u8>,
        line: VecDeque<Waiter>,
        now: i64,
        last_token: Token,
        /// The mode and permits each live holder was granted, kept by the
        /// harness.
        modes: HashMap<u8, (Mode, u32)>,
    }

    impl Run {
        fn issue(last: &mut Token) -> impl FnMut(Token) -> Option<Token> + '_ {
            move |min| {
                *last = (*last + 1).max(min);
                Some(*last)
            }
        }

        fn ask(&self, mode: Mode, ttl: i64, permits: u32) -> Request {
            Request { mode, limit: self.limit, ttl_ms: ttl, fence: 0, permits, session: None }
        }

        fn granted(&mut self, owner: u8, mode: Mode, permits: u32, token: Token, how: Grant) {
            if how != Grant::Regrant {
                assert_eq!(token, self.last_token, "a new grant takes the counter's next token");
            }
            self.modes.insert(owner, (mode, permits));
        }

        /// Serves the line from its head while the head is granted.
        fn serve(&mut self) {
            while let Some(head) = self.line.front() {
                let (owner, mode, ttl, permits) = (head.owner, head.mode, head.ttl, head.permits);
                let req = self.ask(mode, ttl, permits);
                let outcome = self.lock.acquire(&owner, &req, self.now, false, Self::issue(&mut self.last_token));
                match outcome {
                    Outcome::Granted(token, how) => {
                        self.line.pop_front();
                        self.granted(owner, mode, permits, token, how);
                    }
                    Outcome::Held => break,
                    Outcome::Refused(_) => {
                        self.line.pop_front();
                    }
                }
            }
        }

        fn apply(&mut self, op: &Op) {
            match *op {
                Op::Ask { owner, shared, wait, ttl, permits } => {
                    if self.line.iter().any(|w| w.owner == owner) {
                        return; // one wait per client
                    }
                    let mode = if shared || self.limit.is_some() { Mode::Shared } else { Mode::Exclusive };
                    let permits = self.limit.map_or(1, |limit| 1 + permits % limit);
                    let waiting_ahead = !self.line.is_empty();
                    let held_before = self.modes.get(&owner).copied().filter(|_| self.lock.holder(&owner).is_some());
                    let req = self.ask(mode, ttl, permits);
                    match self.lock.acquire(&owner, &req, self.now, waiting_ahead, Self::issue(&mut self.last_token)) {
                        Outcome::Granted(token, how) => {
                            assert!(!waiting_ahead || held_before.is_some(), "owner {owner} barged past {} waiters", self.line.len());
                            if let Some((_, held)) = held_before {
                                assert_eq!(held, permits, "a re-grant changed the size of a hold");
                            }
                            self.granted(owner, mode, permits, token, how);
                            // A downgrade may admit waiters.
                            self.serve();
                        }
                        Outcome::Refused(Refusal::OtherPermits(held)) => {
                            assert_eq!(held_before.map(|(_, k)| k), Some(held), "refused for a size it does not hold");
                            assert_ne!(held, permits);
                        }
                        Outcome::Held if wait => self.line.push_back(Waiter { owner, mode, ttl, permits }),
                        Outcome::Held | Outcome::Refused(_) => {}
                    }
                }
                Op::Release(owner) => {
                    self.lock.release(&owner, self.now);
                    self.serve();
                }
                Op::Extend(owner, ttl) => {
                    self.lock.extend(&owner, ttl, self.now);
                }
                Op::Advance(ms) => {
                    self.now += ms;
                    self.lock.expire(self.now);
                    self.serve();
                }
                Op::Leave(owner) => {
                    self.line.retain(|w| w.owner != owner);
                    self.serve();
                }
            }
            self.modes.retain(|o, _| self.lock.holder(o).is_some());
        }

        /// The rules, computed from the holders' own modes.
        fn check(&self) {
            let live: Vec<&Holder<u8>> = self.lock.holders.iter().filter(|h| h.end > self.now).collect();
            let exclusive = live.iter().filter(|h| self.modes.get(&h.owner).map(|m| m.0) == Some(Mode::Exclusive)).count();
            // The permits taken, as the harness granted them.
            let taken: u32 = live.iter().filter_map(|h| self.modes.get(&h.owner).map(|m| m.1)).sum();
            assert!(exclusive == 0 || live.len() == 1, "an exclusive holder beside others: {:?}", self.lock);
            if let Some(limit) = self.limit {
                assert!(taken <= limit, "{taken} permits taken of {limit}");
                assert_eq!(exclusive, 0, "exclusive hold on a semaphore");
            }
            let mut tokens: Vec<Token> = live.iter().map(|h| h.token).collect();
            tokens.sort_unstable();
            tokens.dedup();
            assert_eq!(tokens.len(), live.len(), "two live holders with one token: {:?}", self.lock);
            // No compatible head is left waiting.
            if let Some(head) = self.line.front() {
                let fits = live.is_empty()
                    || (head.mode == Mode::Shared && exclusive == 0 && self.limit.is_none_or(|l| taken + head.permits <= l));
                assert!(!fits, "head {} ({:?}) waits though compatible: {:?}", head.owner, head.mode, self.lock);
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        #[test]
        fn the_rules_hold_for_every_sequence(limit in prop_oneof![Just(None), (1u32..4).prop_map(Some)], ops in proptest::collection::vec(op(), 1..80)) {
            let mut run = Run {
                limit,
                lock: Holding { kind: Kind::of(limit), mode: Mode::Shared, holders: Vec::new() },
                line: VecDeque::new(),
                now: 0,
                last_token: 0,
                modes: HashMap::new(),
            };
            for op in &ops {
                run.apply(op);
                run.check();
            }
        }
    }
}

#[cfg(test)]
mod one_holder_view {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The exclusive path's decision is `Holding::acquire`'s on the same
        /// one-holder lock, for every holder, FENCE, line and counter.
        #[test]
        fn agrees_with_the_lock(
            held in prop_oneof![Just(None), (any::<bool>(), 0i64..1_000).prop_map(Some)],
            fence in prop_oneof![Just(0i64), 0i64..2_000, Just(i64::MAX)],
            waiting_ahead in any::<bool>(),
            counter in prop_oneof![0i64..1_500, Just(i64::MAX)],
        ) {
            let (me, other) = (1u8, 2u8);
            let now = 100;
            let mut lock = Holding { kind: Kind::ReadWrite, mode: Mode::Exclusive, holders: Vec::new() };
            let view = match held {
                None => OneHolder::Free,
                Some((mine, token)) => {
                    lock.holders.push(Holder { owner: if mine { me } else { other }, token, end: now + 1_000, since: 0, permits: 1 });
                    OneHolder::Held { mine, token }
                }
            };
            let req = Request { mode: Mode::Exclusive, limit: None, ttl_ms: 500, fence, permits: 1, session: None };
            let issue = |c: &mut i64| { let mut c = *c; move |min: Token| { let t = super::super::token::next_token(c, min)?; c = t; Some(t) } };
            let by_lock = lock.acquire(&me, &req, now, waiting_ahead, issue(&mut counter.clone()));
            let by_view = acquire_exclusive(view, fence, waiting_ahead, issue(&mut counter.clone()));
            prop_assert_eq!(by_view, by_lock);
        }

        /// A release and an extension through the view end or lengthen a
        /// hold exactly when `Holding::release` and `Holding::extend` do, for a
        /// holder whose lease runs or has ended.
        #[test]
        fn release_and_extend_agree_with_the_lock(
            held in prop_oneof![Just(None), (any::<bool>(), 0i64..1_000, any::<bool>()).prop_map(Some)],
        ) {
            let (me, other) = (1u8, 2u8);
            let now = 100;
            let mut lock = Holding { kind: Kind::ReadWrite, mode: Mode::Exclusive, holders: Vec::new() };
            let view = match held {
                None => OneHolder::Free,
                Some((mine, token, running)) => {
                    let end = if running { now + 1_000 } else { now };
                    lock.holders.push(Holder { owner: if mine { me } else { other }, token, end, since: 0, permits: 1 });
                    // The glue sees an ended lease as a free key.
                    if running { OneHolder::Held { mine, token } } else { OneHolder::Free }
                }
            };
            prop_assert_eq!(release_exclusive(view), lock.clone().release(&me, now));
            prop_assert_eq!(extend_exclusive(view), lock.clone().extend(&me, 500, now).is_some());
        }
    }
}

/// Random asks (with or without a wait), releases, resizes and the
/// passing of time on one semaphore, its line served after each change as
/// the module serves it: a new holder's grant never leaves more permits
/// taken than the limit in force, whatever LIMIT it asked with; a resize
/// takes no holder's permits and refuses nothing; the line is served in
/// order.
#[cfg(test)]
mod resize_properties {
    use super::*;
    use proptest::prelude::*;
    use std::collections::VecDeque;

    #[derive(Clone, Debug)]
    enum Op {
        Ask { owner: u8, limit: u32, permits: u32, wait: bool },
        Release(u8),
        Resize(u32),
        Advance(i64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u8..8, 1u32..6, 1u32..4, any::<bool>()).prop_map(|(owner, limit, permits, wait)| Op::Ask { owner, limit, permits, wait }),
            3 => (0u8..8).prop_map(Op::Release),
            2 => (1u32..6).prop_map(Op::Resize),
            1 => (0i64..1_500).prop_map(Op::Advance),
        ]
    }

    fn largest_of(lock: &Holding<u8>) -> Option<u32> {
        match lock.kind {
            Kind::Semaphore { largest, .. } if !lock.is_free() => Some(largest),
            _ => None,
        }
    }

    fn running_taken(lock: &Holding<u8>, now: i64) -> u64 {
        lock.holders.iter().filter(|h| h.end > now).map(|h| u64::from(h.permits)).sum()
    }

    fn limit_of(lock: &Holding<u8>) -> Option<u32> {
        match lock.kind {
            Kind::Semaphore { limit, .. } if !lock.is_free() => Some(limit),
            _ => None,
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        #[test]
        fn grants_fit_the_limit_in_force(ops in proptest::collection::vec(op(), 1..80)) {
            let mut lock: Holding<u8> = Holding { kind: Kind::ReadWrite, mode: Mode::Shared, holders: Vec::new() };
            let mut line: VecDeque<(u8, Request)> = VecDeque::new();
            let (mut now, mut last) = (0i64, 0i64);
            let mut issue = |min: Token| { last = (last + 1).max(min); Some(last) };
            let mut granted_order: Vec<u64> = Vec::new();
            let mut joined = 0u64;
            let mut joins: VecDeque<u64> = VecDeque::new();
            let mut seen_largest: Option<u32> = None;
            for op in &ops {
                // A group whose every lease ended is gone: the next grant
                // makes a new one.
                if !lock.holders.iter().any(|h| h.end > now) {
                    seen_largest = None;
                }
                let mut serve = false;
                match *op {
                    Op::Ask { owner, limit, permits, wait } => {
                        let req = Request { mode: Mode::Shared, limit: Some(limit), permits: permits.min(limit), ttl_ms: 1_000, fence: 0, session: None };
                        let before = lock.holder(&owner).is_none();
                        match lock.acquire(&owner, &req, now, !line.is_empty(), &mut issue) {
                            Outcome::Granted(_, Grant::New) => {
                                prop_assert!(before);
                                let limit = limit_of(&lock).expect("held");
                                prop_assert!(running_taken(&lock, now) <= u64::from(limit), "{lock:?}");
                            }
                            Outcome::Held if wait && before && !line.iter().any(|(o, _)| *o == owner) => {
                                line.push_back((owner, req));
                                joins.push_back(joined);
                                joined += 1;
                            }
                            _ => {}
                        }
                        if lock.is_free() {
                            lock = Holding { kind: Kind::ReadWrite, mode: Mode::Shared, holders: Vec::new() };
                        }
                    }
                    Op::Release(owner) => serve = lock.release(&owner, now),
                    Op::Resize(limit) => {
                        let holders = lock.holders.clone();
                        let was_semaphore = limit_of(&lock).is_some() && lock.holders.iter().any(|h| h.end > now);
                        let before = largest_of(&lock);
                        let resized = was_semaphore && lock.resize(limit);
                        prop_assert_eq!(&lock.holders, &holders, "a resize takes no permit");
                        if resized {
                            let largest = before.map_or(limit, |b| b.max(limit));
                            prop_assert_eq!(lock.kind, Kind::Semaphore { limit, resized: true, largest });
                            serve = true;
                        }
                    }
                    Op::Advance(ms) => { now += ms; serve = true; }
                }
                if lock.is_free() || lock.expire(now) && lock.is_free() {
                    lock = Holding { kind: Kind::ReadWrite, mode: Mode::Shared, holders: Vec::new() };
                    seen_largest = None;
                }
                if serve {
                    while let Some((owner, req)) = line.front().copied() {
                        match lock.acquire(&owner, &req, now, false, &mut issue) {
                            Outcome::Granted(_, how) => {
                                // A holder a shrink left over the limit may
                                // re-grant its own permits.
                                let limit = limit_of(&lock).expect("held");
                                let within = running_taken(&lock, now) <= u64::from(limit);
                                prop_assert!(how != Grant::New || within, "a handoff over LIMIT {limit}: {lock:?}");
                                line.pop_front();
                                granted_order.extend(joins.pop_front());
                            }
                            Outcome::Held => break,
                            Outcome::Refused(_) => { line.pop_front(); joins.pop_front(); }
                        }
                    }
                }
                prop_assert!(granted_order.windows(2).all(|p| p[0] < p[1]), "served out of order: {granted_order:?}");
                // The largest limit: at least the limit in force, equal
                // to it until a resize, never lower while the group lives.
                match lock.kind {
                    Kind::Semaphore { limit, resized, largest } if !lock.is_free() => {
                        prop_assert!(largest >= limit && (resized || largest == limit), "{lock:?}");
                        prop_assert!(seen_largest.is_none_or(|seen| largest >= seen), "largest fell below {seen_largest:?}: {lock:?}");
                        seen_largest = Some(largest);
                    }
                    _ => seen_largest = None,
                }
            }
        }
    }
}
