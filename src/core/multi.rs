//! Several keys at once: a set request granted all or nothing, and the
//! lines of several keys in which a set waits (`docs/design-multi.md`).
//!
//! - `acquire_set`: the grant rule over a set's members, each an ordinary
//!   `Holding`: granted only when every member admits the request and
//!   nobody waits ahead of it in any member's line, with one token for the
//!   whole set; otherwise nothing changes.
//! - `Lines`: the lines of every key, a waiter standing in the line of
//!   each key it asks for. A waiter joins all its lines at once, at their
//!   tails, so every line is the one order of arrival restricted to its
//!   waiters; it is offered the grant only when it is first in all of
//!   them, and until then it stops each line it heads (nobody behind it on
//!   a key it waits for is granted).
//!
//! No deadlock, no starvation: the oldest waiter of all is first in every
//! line it stands in, since every line keeps the order of arrival; once
//! its keys' holders leave (every hold has a lease) it is granted, and the
//! next oldest is then the oldest. Nobody holds part of a set while waiting
//! for the rest, so no cycle of holders waiting for each other can form.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use super::grant::{Grant, Holder, Holding, Mode, Outcome, Refusal, Request};
use super::line::Line;
use super::token::Token;

/// What a set asks of its members: `request` of each, but of the last
/// one when `semaphore` gives a limit n: one permit of a semaphore of n
/// (`SHARED LIMIT n PERMITS 1`, `LOCK.MACQUIRE ... SEMAPHORE n`), whose
/// kind then refuses a set of another limit as it refuses a single
/// request; and of the last `shared` lock members (`SHARED n`) the
/// request held shared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SetRequest {
    pub request: Request,
    pub semaphore: Option<u32>,
    /// `SEMAPHORE n LARGEST m`: the semaphore member is granted only free
    /// or where its (limit in force, largest limit) is (n, m), and a free
    /// one is created with largest m (`Holding::fits_strictly`).
    pub largest: Option<u32>,
    /// `SHARED n`: how many of the last lock members (the semaphore member
    /// not counted) are held shared, the others exclusive; 0 for none.
    pub shared: u32,
}

impl SetRequest {
    /// What the semaphore member asks: a permit with the set's lease,
    /// fence and session.
    pub fn permit(&self) -> Option<Request> {
        self.semaphore.map(|limit| Request { mode: Mode::Shared, limit: Some(limit), permits: 1, ..self.request })
    }

    /// What member `i` of `n` asks.
    pub fn member(&self, i: usize, n: usize) -> Request {
        let locks = if self.semaphore.is_some() { n.saturating_sub(1) } else { n };
        match self.permit() {
            Some(permit) if i.saturating_add(1) == n => permit,
            _ if self.shared > 0 && i.saturating_add(self.shared as usize) >= locks => Request { mode: Mode::Shared, ..self.request },
            _ => self.request,
        }
    }

    /// How many of `locks` lock members (the semaphore member not
    /// counted) are the semaphore's guards: in a strict request
    /// (`SEMAPHORE n LARGEST m`), its `SHARED` members, while at least one
    /// member is left exclusive. They are a quorum semaphore's permits from
    /// the limit in force up to the largest, held shared only to keep out
    /// anyone granted above the limit. A waiting set stands in no guard's
    /// line, as in no semaphore member's: standing there, a set waiting
    /// for one permit still held would hold back every other permit's
    /// request, all of them asking the guards too.
    pub fn guards(&self, locks: usize) -> usize {
        match (self.semaphore, self.largest) {
            (Some(_), Some(_)) if (self.shared as usize) < locks => self.shared as usize,
            _ => 0,
        }
    }

    /// Whether member `i` of `n` stands in its key's line when the set
    /// waits, and counts those waiting there ahead of it: neither the
    /// semaphore member nor a guard (`guards`) does.
    pub fn lined(&self, i: usize, n: usize) -> bool {
        let locks = if self.semaphore.is_some() { n.saturating_sub(1) } else { n };
        i.saturating_add(self.guards(locks)) < locks
    }

    /// The strict demand on member `i` of `n`: the semaphore member's
    /// (limit, largest) with `LARGEST`.
    pub fn strict(&self, i: usize, n: usize) -> Option<(u32, u32)> {
        match (self.semaphore, self.largest) {
            (Some(limit), Some(largest)) if i.saturating_add(1) == n => Some((limit, largest)),
            _ => None,
        }
    }
}

/// One key of a set request: its holders, what the set asks of it, and
/// whether others wait in its line before the request (a newcomer finding
/// anyone there; the head of all its lines asks with `false`).
pub struct Member<'a, O> {
    pub holding: &'a mut Holding<O>,
    pub req: Request,
    pub waiting_ahead: bool,
    /// `(limit, largest)` a strict semaphore request demands of this
    /// member (`SetRequest::strict`).
    pub strict: Option<(u32, u32)>,
}

/// Grants each member what it asks (`Member::req`, a set's lease and
/// fence alike) to `owner` at `now`, all or nothing. The refusals of a
/// single key (a member of another kind or limit, an upgrade beside
/// others, another size of hold) refuse the whole set; a member held by
/// others (a semaphore member without a permit free), or waited for ahead
/// of this request, holds the whole set back. The owner's own holds are
/// re-granted: when it holds every member in the mode asked with one
/// token `t` and FENCE asks no more, the set keeps `t` (a retry whose
/// reply was lost); otherwise one fresh token from `issue(min)`, larger
/// than every earlier token of each member, goes to every member, those it
/// held included. `members` has at least one key, each once.
pub fn acquire_set<O: PartialEq + Clone>(
    members: &mut [Member<'_, O>],
    owner: &O,
    now: i64,
    issue: impl FnOnce(Token) -> Option<Token>,
) -> Outcome {
    // Refusals first, as for one key, before anything may hold the set back.
    for member in members.iter_mut() {
        let (holding, req) = (&mut *member.holding, &member.req);
        holding.expire(now);
        if let Some((limit, largest)) = member.strict {
            if let Err(refusal) = holding.fits_strictly(limit, largest) {
                return Outcome::Refused(refusal);
            }
        }
        if let Err(refusal) = holding.fits(req) {
            return Outcome::Refused(refusal);
        }
        if let Some(holder) = holding.holder(owner) {
            if holder.permits != req.permits {
                return Outcome::Refused(Refusal::OtherPermits(holder.permits));
            }
            if holding.mode == Mode::Shared && req.mode == Mode::Exclusive && holding.holders.len() > 1 {
                return Outcome::Refused(Refusal::UpgradeWithOthers);
            }
        } else if let Err(refusal) = holding.fits_newcomer(req) {
            return Outcome::Refused(refusal);
        }
    }
    let held_back = members.iter().any(|m| m.holding.holder(owner).is_none() && (m.waiting_ahead || !m.holding.admits(&m.req)));
    if held_back {
        return Outcome::Held;
    }
    let fence = members.iter().map(|m| m.req.fence).max().unwrap_or(0);
    let mut kept = members.iter().map(|m| m.holding.holder(owner).filter(|_| m.holding.mode == m.req.mode).map(|h| h.token));
    let first = kept.next().flatten();
    let kept = first.filter(|t| fence <= *t && kept.all(|other| other == Some(*t)));
    let token = match kept {
        Some(token) => token,
        None => match issue(fence) {
            Some(token) => token,
            None => return Outcome::Refused(Refusal::TokensExhausted),
        },
    };
    for member in members.iter_mut() {
        let (holding, req) = (&mut *member.holding, &member.req);
        let end = now.saturating_add(req.ttl_ms);
        if holding.is_free() {
            *holding = Holding::free_for(req);
            if let Some((_, largest)) = member.strict {
                holding.created_with_largest(largest);
            }
        }
        holding.mode = req.mode;
        match holding.holders.iter_mut().find(|h| h.owner == *owner) {
            Some(holder) => {
                holder.token = token;
                holder.end = end;
            }
            None => holding.holders.push(Holder { owner: owner.clone(), token, end, since: now, permits: req.permits }),
        }
    }
    Outcome::Granted(token, if kept.is_some() { Grant::Regrant } else { Grant::New })
}

/// A waiter's number: the order of arrival across every line.
pub type Id = u64;

struct Waiting<K, W> {
    keys: Vec<K>,
    waiter: W,
}

/// What offering the grant to a waiter first in all its lines came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Served {
    /// Granted, or turned away: it leaves every line.
    Left,
    /// It must still wait, and stops every line it heads.
    Waits,
}

/// Every key's line of waiters, a waiter standing in several.
pub struct Lines<K, W> {
    lines: BTreeMap<K, Line<Id>>,
    waiting: BTreeMap<Id, Waiting<K, W>>,
    next: Id,
}

impl<K, W> Default for Lines<K, W> {
    fn default() -> Self {
        Lines { lines: BTreeMap::new(), waiting: BTreeMap::new(), next: 0 }
    }
}

impl<K: Ord + Clone, W> Lines<K, W> {
    /// A waiter joins the tail of every line of `keys` at once (each key
    /// once); its number.
    pub fn join(&mut self, keys: &[K], waiter: W) -> Id {
        let id = self.next;
        self.next += 1;
        for key in keys {
            self.lines.entry(key.clone()).or_default().join(id);
        }
        self.waiting.insert(id, Waiting { keys: keys.to_vec(), waiter });
        id
    }

    /// Whether anyone waits in `key`'s line: a newcomer asking for `key`
    /// is then not granted ahead of them.
    pub fn is_waited_for(&self, key: &K) -> bool {
        self.lines.get(key).is_some_and(|line| !line.is_empty())
    }

    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// The waiters, oldest first.
    pub fn ids(&self) -> impl Iterator<Item = Id> + '_ {
        self.waiting.keys().copied()
    }

    pub fn waiter(&self, id: Id) -> Option<(&[K], &W)> {
        self.waiting.get(&id).map(|w| (w.keys.as_slice(), &w.waiter))
    }

    /// Whether `id` heads every line it stands in: only then may it be
    /// granted.
    pub fn first_in_all(&self, id: Id) -> bool {
        self.waiting.get(&id).is_some_and(|w| w.keys.iter().all(|key| self.lines.get(key).and_then(Line::first) == Some(&id)))
    }

    /// `id` leaves every line (its WAIT timed out, its client left); with
    /// it, the keys whose line it headed with others behind it, to be
    /// served (see `serve`).
    pub fn leave(&mut self, id: Id) -> Option<(W, Vec<K>)> {
        let waiting = self.waiting.remove(&id)?;
        let mut headed = Vec::new();
        for key in &waiting.keys {
            let Some(line) = self.lines.get_mut(key) else { continue };
            if let Some((_, new_head)) = line.leave(|w| *w == id) {
                if new_head {
                    headed.push(key.clone());
                }
            }
            if line.is_empty() {
                self.lines.remove(key);
            }
        }
        Some((waiting.waiter, headed))
    }

    /// Serves the lines of `keys` (their heads may have changed, or their
    /// keys been freed): while a line's head is first in all its lines it
    /// is offered the grant; one that leaves leaves every line, and each
    /// line it headed is served in turn. A head still waiting in another
    /// line, or told to wait, stops its line; one told to wait is not
    /// offered again in the same serving (a grant to another only takes
    /// room). The waiters that left, in the order they left.
    pub fn serve(&mut self, keys: impl IntoIterator<Item = K>, mut offer: impl FnMut(Id, &[K], &W) -> Served) -> Vec<(Id, W)> {
        let mut todo: VecDeque<K> = VecDeque::new();
        let mut queued: BTreeSet<K> = BTreeSet::new();
        for key in keys {
            if queued.insert(key.clone()) {
                todo.push_back(key);
            }
        }
        let mut left = Vec::new();
        let mut told_to_wait: BTreeSet<Id> = BTreeSet::new();
        while let Some(key) = todo.pop_front() {
            queued.remove(&key);
            while let Some(&head) = self.lines.get(&key).and_then(Line::first) {
                if told_to_wait.contains(&head) || !self.first_in_all(head) {
                    break;
                }
                let Some(waiting) = self.waiting.get(&head) else { break };
                if offer(head, &waiting.keys, &waiting.waiter) == Served::Waits {
                    told_to_wait.insert(head);
                    break;
                }
                let Some((waiter, headed)) = self.leave(head) else { break };
                left.push((head, waiter));
                for other in headed {
                    if other != key && queued.insert(other.clone()) {
                        todo.push_back(other);
                    }
                }
            }
        }
        left
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::grant::Kind;

    fn request(mode: Mode) -> Request {
        Request { mode, limit: None, ttl_ms: 1_000, fence: 0, permits: 1, session: None }
    }

    fn free() -> Holding<&'static str> {
        Holding { kind: Kind::ReadWrite, mode: Mode::Exclusive, holders: Vec::new() }
    }

    fn counter() -> impl FnMut(Token) -> Option<Token> {
        let mut last = 0;
        move |min| {
            last = (last + 1).max(min);
            Some(last)
        }
    }

    fn ask(keys: &mut [Holding<&'static str>], owner: &'static str, mode: Mode, issue: &mut impl FnMut(Token) -> Option<Token>) -> Outcome {
        ask_set(keys, owner, &SetRequest { request: request(mode), semaphore: None, largest: None, shared: 0 }, issue)
    }

    fn ask_set(
        keys: &mut [Holding<&'static str>],
        owner: &'static str,
        set: &SetRequest,
        issue: &mut impl FnMut(Token) -> Option<Token>,
    ) -> Outcome {
        let n = keys.len();
        let mut members: Vec<Member<'_, &str>> = keys
            .iter_mut()
            .enumerate()
            .map(|(i, holding)| Member { holding, req: set.member(i, n), waiting_ahead: false, strict: None })
            .collect();
        acquire_set(&mut members, &owner, 0, issue)
    }

    #[test]
    fn a_set_is_granted_whole_with_one_token_or_takes_nothing() {
        let mut issue = counter();
        let mut keys = [free(), free(), free()];
        assert_eq!(ask(&mut keys[1..2], "b", Mode::Exclusive, &mut issue), Outcome::Granted(1, Grant::New));
        let before = keys.clone();
        assert_eq!(ask(&mut keys, "a", Mode::Exclusive, &mut issue), Outcome::Held);
        assert_eq!(keys, before, "a refused set takes nothing");
        assert!(keys[1].release(&"b", 0));
        assert_eq!(ask(&mut keys, "a", Mode::Exclusive, &mut issue), Outcome::Granted(2, Grant::New));
        for key in &keys {
            assert_eq!(key.holder(&"a").map(|h| h.token), Some(2));
        }
        // The same set again keeps its token; FENCE above it takes a new one.
        assert_eq!(ask(&mut keys, "a", Mode::Exclusive, &mut issue), Outcome::Granted(2, Grant::Regrant));
        let fenced = Request { fence: 9, ..request(Mode::Exclusive) };
        let mut members: Vec<Member<'_, &str>> =
            keys.iter_mut().map(|holding| Member { holding, req: fenced, waiting_ahead: false, strict: None }).collect();
        assert_eq!(acquire_set(&mut members, &"a", 0, &mut issue), Outcome::Granted(9, Grant::New));
    }

    #[test]
    fn a_set_over_keys_the_owner_partly_holds_takes_one_fresh_token_for_all() {
        let mut issue = counter();
        let mut keys = [free(), free()];
        assert_eq!(ask(&mut keys[..1], "a", Mode::Exclusive, &mut issue), Outcome::Granted(1, Grant::New));
        assert_eq!(ask(&mut keys, "a", Mode::Exclusive, &mut issue), Outcome::Granted(2, Grant::New));
        assert_eq!(keys[0].holder(&"a").map(|h| h.token), Some(2));
    }

    #[test]
    fn a_member_of_another_kind_refuses_the_set() {
        let mut issue = counter();
        let mut keys = [free(), free()];
        let permit = Request { limit: Some(2), ..request(Mode::Shared) };
        let mut members = vec![Member { holding: &mut keys[1], req: permit, waiting_ahead: false, strict: None }];
        assert!(matches!(acquire_set(&mut members, &"b", 0, &mut issue), Outcome::Granted(..)));
        assert_eq!(
            ask(&mut keys, "a", Mode::Shared, &mut issue),
            Outcome::Refused(Refusal::WrongKind(Kind::Semaphore { limit: 2, resized: false, largest: 2 }))
        );
        assert!(keys[0].is_free());
    }

    #[test]
    fn anyone_waiting_ahead_on_one_member_holds_the_set_back() {
        let mut keys = [free(), free()];
        let [first, second] = &mut keys;
        let req = request(Mode::Exclusive);
        let mut members = [
            Member { holding: first, req, waiting_ahead: false, strict: None },
            Member { holding: second, req, waiting_ahead: true, strict: None },
        ];
        assert_eq!(acquire_set(&mut members, &"a", 0, counter()), Outcome::Held);
    }

    #[test]
    fn a_semaphore_member_takes_one_permit_and_refuses_another_limit() {
        let mut issue = counter();
        let two = SetRequest { request: request(Mode::Exclusive), semaphore: Some(2), largest: None, shared: 0 };
        let four = SetRequest { semaphore: Some(4), ..two };
        // Slots 0 and 1, and the semaphore last.
        let mut keys = [free(), free(), free()];
        {
            let [slot0, _, record] = &mut keys;
            let mut members = [
                Member { holding: slot0, req: two.member(0, 2), waiting_ahead: false, strict: None },
                Member { holding: record, req: two.member(1, 2), waiting_ahead: false, strict: None },
            ];
            assert_eq!(acquire_set(&mut members, &"a", 0, &mut issue), Outcome::Granted(1, Grant::New));
        }
        assert_eq!(keys[2].kind, Kind::Semaphore { limit: 2, resized: false, largest: 2 });
        assert_eq!(keys[2].holder(&"a").map(|h| (h.token, h.permits)), Some((1, 1)));
        assert_eq!(keys[0].mode, Mode::Exclusive);
        // Another limit is refused outright, taking nothing; the same limit
        // shares the semaphore on another slot.
        let [_, slot1, record] = &mut keys;
        let before = (slot1.clone(), record.clone());
        let mut members = [
            Member { holding: slot1, req: four.member(0, 2), waiting_ahead: false, strict: None },
            Member { holding: record, req: four.member(1, 2), waiting_ahead: false, strict: None },
        ];
        assert_eq!(
            acquire_set(&mut members, &"b", 0, &mut issue),
            Outcome::Refused(Refusal::WrongKind(Kind::Semaphore { limit: 2, resized: false, largest: 2 }))
        );
        assert_eq!((members[0].holding.clone(), members[1].holding.clone()), before);
        members[0].req = two.member(0, 2);
        members[1].req = two.member(1, 2);
        assert_eq!(acquire_set(&mut members, &"b", 0, &mut issue), Outcome::Granted(2, Grant::New));
        // Full: a third holder is held back, whatever its slot.
        let mut slot = free();
        let mut members = [
            Member { holding: &mut slot, req: two.member(0, 2), waiting_ahead: false, strict: None },
            Member { holding: record, req: two.member(1, 2), waiting_ahead: false, strict: None },
        ];
        assert_eq!(acquire_set(&mut members, &"c", 0, &mut issue), Outcome::Held);
        assert!(slot.is_free());
        // A read-write lock as the semaphore member refuses the set.
        let mut lock = free();
        assert!(matches!(ask(std::slice::from_mut(&mut lock), "d", Mode::Exclusive, &mut issue), Outcome::Granted(..)));
        let mut slot = free();
        let mut members = [
            Member { holding: &mut slot, req: two.member(0, 2), waiting_ahead: false, strict: None },
            Member { holding: &mut lock, req: two.member(1, 2), waiting_ahead: false, strict: None },
        ];
        assert_eq!(acquire_set(&mut members, &"e", 0, &mut issue), Outcome::Refused(Refusal::WrongKind(Kind::ReadWrite)));
    }

    /// `SEMAPHORE n LARGEST m`: granted on a free record (created with
    /// largest m, resized when m > n) or one whose (limit, largest) is (n,
    /// m); any other semaphore refuses it naming its own, taking nothing.
    #[test]
    fn a_strict_semaphore_member_names_the_limit_and_largest_in_force() {
        let mut issue = counter();
        let strict =
            |limit, largest| SetRequest { request: request(Mode::Exclusive), semaphore: Some(limit), largest: Some(largest), shared: 0 };
        let ask = |slot: &mut Holding<&'static str>, record: &mut Holding<&'static str>, owner, set: SetRequest, issue: &mut _| {
            let mut members = [
                Member { holding: slot, req: set.member(0, 2), waiting_ahead: false, strict: set.strict(0, 2) },
                Member { holding: record, req: set.member(1, 2), waiting_ahead: false, strict: set.strict(1, 2) },
            ];
            acquire_set(&mut members, &owner, 0, issue)
        };
        let (mut slot0, mut slot1, mut record) = (free(), free(), free());
        assert!(matches!(ask(&mut slot0, &mut record, "a", strict(2, 5), &mut issue), Outcome::Granted(..)));
        assert_eq!(record.kind, Kind::Semaphore { limit: 2, resized: true, largest: 5 });
        let before = (slot1.clone(), record.clone());
        let named = Outcome::Refused(Refusal::Limit { limit: 2, largest: 5 });
        assert_eq!(ask(&mut slot1, &mut record, "b", strict(2, 2), &mut issue), named);
        assert_eq!(ask(&mut slot1, &mut record, "b", strict(5, 5), &mut issue), named);
        assert_eq!((slot1.clone(), record.clone()), before, "a refused set takes nothing");
        assert!(matches!(ask(&mut slot1, &mut record, "b", strict(2, 5), &mut issue), Outcome::Granted(..)));
        // A plain request is served under the resized record, any limit.
        let plain = SetRequest { largest: None, ..strict(3, 3) };
        let mut slot2 = free();
        assert_eq!(ask(&mut slot2, &mut record, "c", plain, &mut issue), Outcome::Held, "2 of 2 taken");
        // An unresized record of another limit is the wrong kind; of the
        // same limit with another largest, it names itself.
        let (mut slot, mut other) = (free(), free());
        assert!(matches!(ask(&mut slot, &mut other, "a", strict(3, 3), &mut issue), Outcome::Granted(..)));
        assert_eq!(other.kind, Kind::Semaphore { limit: 3, resized: false, largest: 3 });
        let mut slot = free();
        assert_eq!(ask(&mut slot, &mut other, "b", strict(4, 4), &mut issue), Outcome::Refused(Refusal::WrongKind(other.kind)));
        let mut slot = free();
        assert_eq!(ask(&mut slot, &mut other, "b", strict(3, 4), &mut issue), Outcome::Refused(Refusal::Limit { limit: 3, largest: 3 }));
    }

    #[test]
    fn only_a_strict_semaphore_requests_shared_members_are_guards_in_no_line() {
        let set = |semaphore, largest, shared| SetRequest { request: request(Mode::Exclusive), semaphore, largest, shared };
        // slot 1, guards 2 and 3, the record: only slot 1 is lined.
        let strict = set(Some(2), Some(4), 2);
        assert_eq!(strict.guards(3), 2);
        assert_eq!((0..4).map(|i| strict.lined(i, 4)).collect::<Vec<_>>(), [true, false, false, false]);
        // Without LARGEST, or without a semaphore, shared members wait in
        // their lines as any lock's readers do; the record never does.
        let plain = set(Some(2), None, 2);
        assert_eq!(plain.guards(3), 0);
        assert_eq!((0..4).map(|i| plain.lined(i, 4)).collect::<Vec<_>>(), [true, true, true, false]);
        let readers = set(None, None, 2);
        assert_eq!((0..3).map(|i| readers.lined(i, 3)).collect::<Vec<_>>(), [true, true, true]);
        // A set with no member left exclusive has no guards: it waits in
        // every lock's line rather than in none.
        let all_shared = set(Some(2), Some(4), 2);
        assert_eq!(all_shared.guards(2), 0);
        assert_eq!((0..3).map(|i| all_shared.lined(i, 3)).collect::<Vec<_>>(), [true, true, false]);
    }

    #[test]
    fn a_later_single_key_waiter_never_overtakes_a_waiting_set() {
        // P = {a, b} then Q = {b, c}, then R = {c}: Q stops c's line.
        let mut lines: Lines<char, &str> = Lines::default();
        let p = lines.join(&['a', 'b'], "P");
        let q = lines.join(&['b', 'c'], "Q");
        let r = lines.join(&['c'], "R");
        assert!(lines.first_in_all(p));
        assert!(!lines.first_in_all(q), "behind P on b");
        assert!(!lines.first_in_all(r), "behind Q on c, although c is free");
        // b is held: P waits, and nothing else is offered.
        let mut offered = Vec::new();
        let left = lines.serve(['a', 'b', 'c'], |id, _, _| {
            offered.push(id);
            Served::Waits
        });
        assert!(left.is_empty());
        assert_eq!(offered, [p]);
        // Everything free: P, then Q, then R, in that order.
        let left = lines.serve(['c', 'b', 'a'], |_, _, _| Served::Left);
        assert_eq!(left, [(p, "P"), (q, "Q"), (r, "R")]);
        assert!(lines.is_empty());
    }

    #[test]
    fn a_set_leaving_serves_the_lines_it_headed() {
        let mut lines: Lines<char, &str> = Lines::default();
        let p = lines.join(&['a', 'b'], "P");
        lines.join(&['a'], "X");
        lines.join(&['c'], "Y");
        assert_eq!(lines.leave(p), Some(("P", vec!['a'])), "b has nobody left, a has X");
        assert!(!lines.is_waited_for(&'b'));
        assert_eq!(lines.leave(p), None);
    }
}

/// Sets and single keys over a few keys, as the module would drive them:
/// random asks (waiting or not), releases, departures and passing time,
/// the lines served after every change, checked against the holds the
/// harness itself granted. Some sets also take a permit of a semaphore
/// member (`SetRequest::semaphore`), of limit 2 or 4, as the quorum
/// client's permit holds do: slots among the first `limit` keys, and the
/// semaphore in no line.
#[cfg(test)]
mod properties {
    use proptest::prelude::*;

    use super::*;
    use crate::core::grant::Kind;

    const KEYS: u8 = 4;
    const CLIENTS: u8 = 6;
    /// The semaphore member: the limit record of every permit hold.
    const RECORD: u8 = KEYS;
    const LIMITS: [Option<u32>; 3] = [None, Some(2), Some(4)];

    #[derive(Clone, Debug)]
    enum Op {
        Ask {
            client: u8,
            /// The keys asked for, as bits (at least one).
            keys: u8,
            /// How many of the keys are held shared (plain `SHARED` when
            /// all of them, `SHARED n` when some; see `apply`).
            shared: u8,
            wait: bool,
            ttl: i64,
            /// Which of `LIMITS`.
            limit: usize,
        },
        Release(u8),
        Leave(u8),
        Advance(i64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0..CLIENTS, 1u8..(1 << KEYS), 0..=KEYS, prop::bool::weighted(0.8), 1i64..1_000, 0..LIMITS.len())
                .prop_map(|(client, keys, shared, wait, ttl, limit)| Op::Ask { client, keys, shared, wait, ttl, limit }),
            2 => (0..CLIENTS).prop_map(Op::Release),
            1 => (0..CLIENTS).prop_map(Op::Leave),
            1 => (0i64..600).prop_map(Op::Advance),
        ]
    }

    #[derive(Clone, Copy, Debug)]
    struct Ask {
        client: u8,
        mode: Mode,
        /// `SHARED n`: the last n keys shared.
        shared: u32,
        ttl: i64,
        semaphore: Option<u32>,
    }

    impl Ask {
        fn set(&self) -> SetRequest {
            let request = Request { mode: self.mode, limit: None, ttl_ms: self.ttl, fence: 0, permits: 1, session: None };
            SetRequest { request, semaphore: self.semaphore, largest: None, shared: self.shared }
        }
    }

    /// A hold as the harness granted it: `keys` its slots (the lines it
    /// stood in), and the semaphore's permit when `semaphore`.
    #[derive(Clone, Debug)]
    struct Hold {
        keys: Vec<u8>,
        mode: Mode,
        /// `SHARED n`: the last n of `keys` held shared.
        shared: u32,
        token: Token,
        end: i64,
        semaphore: Option<u32>,
    }

    impl Hold {
        /// How it holds `key`, one of its slots.
        fn mode_on(&self, key: u8) -> Mode {
            let at = self.keys.iter().position(|k| *k == key).unwrap_or(0);
            if self.mode == Mode::Shared || at + self.shared as usize >= self.keys.len() {
                Mode::Shared
            } else {
                Mode::Exclusive
            }
        }

        fn on(&self, key: u8) -> bool {
            if key == RECORD {
                self.semaphore.is_some()
            } else {
                self.keys.contains(&key)
            }
        }
    }

    struct Run {
        holdings: BTreeMap<u8, Holding<u8>>,
        lines: Lines<u8, Ask>,
        holds: BTreeMap<u8, Hold>,
        now: i64,
        counter: Token,
        /// Granted from the lines, in order: the waiter's number and keys.
        served: Vec<(Id, Vec<u8>)>,
    }

    /// The members of `ask` over `keys`, in key order: the semaphore,
    /// the largest key, last.
    fn members<'a>(
        holdings: &'a mut BTreeMap<u8, Holding<u8>>,
        keys: &[u8],
        ask: &Ask,
        lines: Option<&Lines<u8, Ask>>,
    ) -> Vec<Member<'a, u8>> {
        let set = ask.set();
        let n = keys.len() + usize::from(ask.semaphore.is_some());
        holdings
            .iter_mut()
            .filter(|(key, _)| keys.contains(key) || (**key == RECORD && ask.semaphore.is_some()))
            .enumerate()
            .map(|(i, (key, holding))| Member {
                holding,
                req: set.member(i, n),
                waiting_ahead: *key != RECORD && lines.is_some_and(|l| l.is_waited_for(key)),
                strict: set.strict(i, n),
            })
            .collect()
    }

    impl Run {
        fn new() -> Run {
            let holdings =
                (0..=RECORD).map(|k| (k, Holding { kind: Kind::ReadWrite, mode: Mode::Exclusive, holders: Vec::new() })).collect();
            Run { holdings, lines: Lines::default(), holds: BTreeMap::new(), now: 0, counter: 0, served: Vec::new() }
        }

        /// The only refusal here: a semaphore member held with another
        /// limit than the one asked.
        fn refusal_expected(&self, ask: &Ask, refusal: Refusal) {
            let record = self.holdings.get(&RECORD).filter(|h| h.holders.iter().any(|h| h.end > self.now));
            let held_with = record.map(|h| h.kind);
            match (refusal, ask.semaphore, held_with) {
                (
                    Refusal::WrongKind(Kind::Semaphore { limit, .. }),
                    Some(asked),
                    Some(Kind::Semaphore { limit: held, resized: false, .. }),
                ) => {
                    assert_eq!(limit, held);
                    assert_ne!(limit, asked, "the semaphore's own limit was refused");
                }
                other => panic!("{other:?}: only another limit is refused"),
            }
        }

        /// `waiters::serve` across keys in miniature.
        fn serve(&mut self, keys: impl IntoIterator<Item = u8>) {
            let Run { holdings, lines, now, counter, .. } = self;
            let now = *now;
            let mut granted = Vec::new();
            let mut refused = Vec::new();
            lines.serve(keys, |id, keys, ask| {
                let before = holdings.clone();
                let mut members = members(holdings, keys, ask, None);
                let issue = |min: Token| {
                    *counter = (*counter + 1).max(min);
                    Some(*counter)
                };
                match acquire_set(&mut members, &ask.client, now, issue) {
                    Outcome::Granted(token, _) => {
                        let hold = Hold {
                            keys: keys.to_vec(),
                            mode: ask.mode,
                            shared: ask.shared,
                            token,
                            end: now + ask.ttl,
                            semaphore: ask.semaphore,
                        };
                        granted.push((id, ask.client, hold));
                        Served::Left
                    }
                    Outcome::Held => Served::Waits,
                    Outcome::Refused(refusal) => {
                        drop(members);
                        refused.push((*ask, refusal, before));
                        Served::Left
                    }
                }
            });
            for (ask, refusal, before) in refused {
                // Judged on what the keys held when it was refused.
                let now_holdings = std::mem::replace(&mut self.holdings, before);
                self.refusal_expected(&ask, refusal);
                self.holdings = now_holdings;
            }
            for (id, client, hold) in granted {
                self.served.push((id, hold.keys.clone()));
                self.holds.insert(client, hold);
            }
        }

        fn waits(&self, client: u8) -> Option<Id> {
            self.lines.ids().find(|id| self.lines.waiter(*id).is_some_and(|(_, ask)| ask.client == client))
        }

        fn apply(&mut self, op: &Op) {
            match *op {
                Op::Ask { client, keys, shared, wait, ttl, limit } => {
                    if self.holds.contains_key(&client) || self.waits(client).is_some() {
                        return;
                    }
                    let semaphore = LIMITS.get(limit).copied().flatten();
                    // A permit hold takes its slots among the first `limit`
                    // keys, as the client's do, at least one exclusive
                    // (`SHARED n` beside `SEMAPHORE`, as after a shrink).
                    let keys = match semaphore {
                        Some(limit) => match keys & ((1 << limit) - 1) {
                            0 => 1,
                            some => some,
                        },
                        None => keys,
                    };
                    let keys: Vec<u8> = (0..KEYS).filter(|k| keys & (1 << k) != 0).collect();
                    let count = u32::try_from(keys.len()).unwrap_or(1);
                    let shared = u32::from(shared).min(count);
                    let (mode, shared) = match semaphore {
                        Some(_) => (Mode::Exclusive, shared.min(count - 1)),
                        None if shared == count => (Mode::Shared, 0),
                        None => (Mode::Exclusive, shared),
                    };
                    let ask = Ask { client, mode, shared, ttl, semaphore };
                    let waited_for = keys.iter().any(|k| self.lines.is_waited_for(k));
                    let before = self.holdings.clone();
                    let Run { holdings, lines, counter, now, .. } = self;
                    let mut members = members(holdings, &keys, &ask, Some(lines));
                    let issue = |min: Token| {
                        *counter = (*counter + 1).max(min);
                        Some(*counter)
                    };
                    match acquire_set(&mut members, &client, *now, issue) {
                        Outcome::Granted(token, _) => {
                            assert!(!waited_for, "client {client} was granted {keys:?} past their waiters");
                            assert_eq!(token, self.counter, "a new set takes one fresh token");
                            self.holds
                                .insert(client, Hold { keys, mode: ask.mode, shared: ask.shared, token, end: self.now + ttl, semaphore });
                        }
                        Outcome::Held if wait => {
                            self.lines.join(&keys, ask);
                        }
                        Outcome::Held => {}
                        Outcome::Refused(refusal) => {
                            assert_eq!(self.holdings, before, "a refused set takes nothing");
                            self.refusal_expected(&ask, refusal);
                        }
                    }
                }
                Op::Release(client) => {
                    if let Some(hold) = self.holds.remove(&client) {
                        for key in (0..=RECORD).filter(|k| hold.on(*k)) {
                            if let Some(holding) = self.holdings.get_mut(&key) {
                                holding.release(&client, self.now);
                            }
                        }
                        self.serve(hold.keys);
                    }
                }
                Op::Leave(client) => {
                    if let Some((_, headed)) = self.waits(client).and_then(|id| self.lines.leave(id)) {
                        self.serve(headed);
                    }
                }
                Op::Advance(ms) => {
                    self.now += ms;
                    for holding in self.holdings.values_mut() {
                        holding.expire(self.now);
                    }
                    let now = self.now;
                    self.holds.retain(|_, hold| hold.end > now);
                    self.serve(0..KEYS);
                }
            }
        }

        fn check(&self) {
            // Every key's holders are exactly the holds granted on it: never
            // two where one holds exclusively, one token per set.
            for (key, holding) in &self.holdings {
                let mut core: Vec<(u8, Token)> = holding.holders.iter().filter(|h| h.end > self.now).map(|h| (h.owner, h.token)).collect();
                core.sort_unstable();
                let granted: Vec<(u8, &Hold)> = self.holds.iter().filter(|(_, h)| h.on(*key)).map(|(c, h)| (*c, h)).collect();
                let expected: Vec<(u8, Token)> = granted.iter().map(|(c, h)| (*c, h.token)).collect();
                assert_eq!(core, expected, "key {key}: {holding:?}");
                if *key != RECORD && granted.iter().any(|(_, h)| h.mode_on(*key) == Mode::Exclusive) {
                    assert_eq!(granted.len(), 1, "key {key} held exclusively beside others: {granted:?}");
                }
            }
            // One limit at a time: every permit hold running has the
            // semaphore's own limit, and there are at most that many.
            let limits: BTreeSet<u32> = self.holds.values().filter_map(|h| h.semaphore).collect();
            assert!(limits.len() <= 1, "permit holds of several limits at once: {limits:?}");
            if let (Some(&limit), Some(record)) = (limits.first(), self.holdings.get(&RECORD)) {
                assert_eq!(record.kind, Kind::Semaphore { limit, resized: false, largest: limit });
                let holders = self.holds.values().filter(|h| h.semaphore.is_some()).count();
                assert!(u32::try_from(holders).is_ok_and(|n| n <= limit), "{holders} holders of a semaphore of {limit}");
            }
            // Arrival order across keys: waiters sharing a key are served in
            // the order they came, and nobody served waits behind an earlier
            // waiter on a key both asked for.
            let shares = |a: &[u8], b: &[u8]| a.iter().any(|k| b.contains(k));
            for (i, (first, first_keys)) in self.served.iter().enumerate() {
                for (later, later_keys) in &self.served[i + 1..] {
                    assert!(!shares(first_keys, later_keys) || first < later, "{later} was served before {first} on a shared key");
                }
            }
            for id in self.lines.ids() {
                let Some((keys, _)) = self.lines.waiter(id) else { continue };
                let overtaken = self.served.iter().find(|(served, served_keys)| *served > id && shares(keys, served_keys));
                assert!(overtaken.is_none(), "{overtaken:?} was served past {id}, still waiting for {keys:?}");
                // Nobody first in all its lines is left waiting when its set
                // would be granted.
                if self.lines.first_in_all(id) {
                    let mut holdings = self.holdings.clone();
                    let Some((keys, ask)) = self.lines.waiter(id) else { continue };
                    let mut members = members(&mut holdings, keys, ask, None);
                    let outcome = acquire_set(&mut members, &ask.client, self.now, |m| Some(m.max(1)));
                    assert!(!matches!(outcome, Outcome::Granted(..)), "{id} is first in all its lines and would be granted, yet waits");
                }
            }
        }

        /// Holders keep releasing and nobody new comes: every round
        /// grants someone (or turns away a set of another limit), so every
        /// waiter leaves.
        fn drain(&mut self) {
            while !self.lines.is_empty() {
                let before = self.lines.len();
                let clients: Vec<u8> = self.holds.keys().copied().collect();
                for client in clients {
                    self.apply(&Op::Release(client));
                }
                self.check();
                assert!(self.lines.len() < before, "nobody was granted once every holder left: a deadlock");
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        #[test]
        fn sets_are_granted_whole_in_arrival_order_and_none_starves(ops in proptest::collection::vec(op(), 1..120)) {
            let mut run = Run::new();
            for op in &ops {
                run.apply(op);
                run.check();
            }
            run.drain();
        }
    }
}
