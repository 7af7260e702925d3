//! A key's line of waiters, as plain data, and the order it is served in.
//!
//! - Waiters join at the tail and are served from the head only, in the
//!   order they joined: a waiter is never granted while one that joined
//!   before it still waits (no overtaking).
//! - Serving offers the lock to the head; a head that is granted (or
//!   turned away) leaves and the next head is offered it at once, so
//!   consecutive shared requests at the head are granted together. The
//!   first head that must still wait stays first, and serving stops there:
//!   an exclusive request at the head holds back every later shared one
//!   until it has had its turn.
//! - A waiter may leave from anywhere (its WAIT timed out, its client
//!   disconnected); when the head leaves with others behind it, the new
//!   head may fit beside the holders and must be offered the lock.
//!
//! - LOCK.TOP lists lines busiest first: most waiters, then the longest
//!   wait, then by key (`busiest`).
//!
//! Whether a head fits is the grant rules' decision (`grant::Holding`);
//! a newcomer finding others in line is not granted ahead of them (the
//! `waiting_ahead` of `Holding::acquire`). The module keeps each line in
//! its registry and serves it through `serve`, taking the head out while
//! it asks Redis to grant (see `waiters`); the property tests below drive
//! the same functions with the grant core.

use std::collections::VecDeque;

/// One key's waiters, oldest first.
#[derive(Debug)]
pub struct Line<W> {
    waiting: VecDeque<W>,
}

impl<W> Default for Line<W> {
    fn default() -> Self {
        Line { waiting: VecDeque::new() }
    }
}

impl<W> Line<W> {
    /// A waiter joins at the tail.
    pub fn join(&mut self, waiter: W) {
        self.waiting.push_back(waiter);
    }

    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// The head: the next to be offered the lock.
    pub fn first(&self) -> Option<&W> {
        self.waiting.front()
    }

    #[cfg(test)]
    pub fn iter(&self) -> impl Iterator<Item = &W> {
        self.waiting.iter()
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut W> {
        self.waiting.iter_mut()
    }

    /// Takes the head out to offer it the lock (see `serve`).
    pub fn take_head(&mut self) -> Option<W> {
        self.waiting.pop_front()
    }

    /// Puts a head that must still wait back where it was: first.
    pub fn put_back(&mut self, head: W) {
        self.waiting.push_front(head);
    }

    /// The first waiter `is` picks leaves the line, from wherever it is;
    /// with it, whether it was the head and others wait behind it (the new
    /// head must then be offered the lock).
    pub fn leave(&mut self, is: impl Fn(&W) -> bool) -> Option<(W, bool)> {
        let position = self.waiting.iter().position(is)?;
        let waiter = self.waiting.remove(position)?;
        Some((waiter, position == 0 && !self.waiting.is_empty()))
    }
}

/// What offering the lock to a head came to.
pub enum Offer<W> {
    /// Granted, or turned away (an error, a refusal): it left the line.
    Left,
    /// It must still wait.
    Waits(W),
}

/// Serves a line from its head: `take` takes the head out of the line,
/// `offer` offers it the lock, and a head that must still wait goes back
/// first through `put_back`, where serving stops. The caller holds none of
/// the line while `offer` runs (it may call into Redis, which may call
/// back). True if serving stopped at a head that waits.
pub fn serve<W>(mut take: impl FnMut() -> Option<W>, mut offer: impl FnMut(W) -> Offer<W>, put_back: impl FnOnce(W)) -> bool {
    while let Some(head) = take() {
        if let Offer::Waits(head) = offer(head) {
            put_back(head);
            return true;
        }
    }
    false
}

/// How busy a waited key's line is, as LOCK.TOP orders them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Busy<K> {
    pub waiters: usize,
    /// How long its head has waited, ms.
    pub oldest_wait_ms: i64,
    pub key: K,
}

/// The `count` busiest lines, busiest first: most waiters, then the
/// longest wait, then by key. Only the ones kept are sorted: the rest is
/// passed over with a partial selection, so many lines cost one look each.
pub fn busiest<K: Ord>(mut lines: Vec<Busy<K>>, count: usize) -> Vec<Busy<K>> {
    let order =
        |a: &Busy<K>, b: &Busy<K>| b.waiters.cmp(&a.waiters).then(b.oldest_wait_ms.cmp(&a.oldest_wait_ms)).then_with(|| a.key.cmp(&b.key));
    if count == 0 {
        return Vec::new();
    }
    if lines.len() > count {
        lines.select_nth_unstable_by(count - 1, order);
        lines.truncate(count);
    }
    lines.sort_unstable_by(order);
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaving_from_the_head_with_others_behind_names_a_new_head() {
        let mut line = Line::default();
        for w in [1, 2, 3] {
            line.join(w);
        }
        assert_eq!(line.leave(|w| *w == 2), Some((2, false)), "from the middle");
        assert_eq!(line.leave(|w| *w == 1), Some((1, true)), "the head, 3 behind it");
        assert_eq!(line.leave(|w| *w == 3), Some((3, false)), "the last one");
        assert_eq!(line.leave(|w| *w == 3), None);
        assert!(line.is_empty());
    }

    #[test]
    fn serving_stops_at_the_first_head_that_waits_and_keeps_it_first() {
        let line = std::cell::RefCell::new(Line::default());
        for w in [1, 2, 3, 4] {
            line.borrow_mut().join(w);
        }
        let mut offered = Vec::new();
        let stopped = serve(
            || line.borrow_mut().take_head(),
            |w| {
                offered.push(w);
                if w == 3 {
                    Offer::Waits(w)
                } else {
                    Offer::Left
                }
            },
            |w| line.borrow_mut().put_back(w),
        );
        assert!(stopped);
        assert_eq!(offered, [1, 2, 3], "4 is never offered while 3 waits");
        assert_eq!(line.borrow_mut().take_head(), Some(3));
        assert_eq!(line.borrow().len(), 1);
    }
}

/// The line and the grant rules together, as the module drives them:
/// random joins, departures, releases and passing time, with the line
/// served after every change.
#[cfg(test)]
mod properties {
    use std::cell::RefCell;

    use proptest::prelude::*;

    use super::*;
    use crate::core::grant::{Holding, Kind, Mode, Outcome, Request};
    use crate::core::token::Token;

    #[derive(Clone, Debug)]
    enum Op {
        /// A request that finds the key held and waits (if it may).
        Join {
            owner: u8,
            shared: bool,
            /// On a semaphore, `1 + permits % limit` permits.
            permits: u32,
        },
        Leave(u8),
        Release(u8),
        Advance(i64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u8..8, any::<bool>(), 0u32..4).prop_map(|(owner, shared, permits)| Op::Join { owner, shared, permits }),
            1 => (0u8..8).prop_map(Op::Leave),
            2 => (0u8..8).prop_map(Op::Release),
            1 => (0i64..400).prop_map(Op::Advance),
        ]
    }

    #[derive(Clone, Copy, Debug)]
    struct Waiter {
        owner: u8,
        mode: Mode,
        permits: u32,
        /// When it joined: the order it must be served in.
        joined: u64,
    }

    struct Run {
        limit: Option<u32>,
        holding: Holding<u8>,
        line: RefCell<Line<Waiter>>,
        now: i64,
        counter: Token,
        next_join: u64,
        /// Granted from the line, in order.
        granted: Vec<Waiter>,
        /// Waiters that left the line or were turned away.
        gone: u64,
    }

    impl Run {
        fn request(&self, mode: Mode, permits: u32) -> Request {
            let mode = if self.limit.is_some() { Mode::Shared } else { mode };
            Request { mode, limit: self.limit, ttl_ms: 300, fence: 0, permits, session: None }
        }

        /// `waiters::serve` in miniature: the same `serve`, each head
        /// offered the lock as the line's head (nobody waits ahead of it).
        fn serve(&mut self) {
            let (line, holding, counter, granted, gone) =
                (&self.line, &mut self.holding, &mut self.counter, &mut self.granted, &mut self.gone);
            let (now, limit) = (self.now, self.limit);
            let stopped = serve(
                || line.borrow_mut().take_head(),
                |head| {
                    let mode = if limit.is_some() { Mode::Shared } else { head.mode };
                    let req = Request { mode, limit, ttl_ms: 300, fence: 0, permits: head.permits, session: None };
                    let issue = |min: Token| {
                        *counter = (*counter + 1).max(min);
                        Some(*counter)
                    };
                    match holding.acquire(&head.owner, &req, now, false, issue) {
                        Outcome::Granted(..) => {
                            granted.push(head);
                            Offer::Left
                        }
                        Outcome::Refused(_) => {
                            *gone += 1;
                            Offer::Left
                        }
                        Outcome::Held => Offer::Waits(head),
                    }
                },
                |head| line.borrow_mut().put_back(head),
            );
            // Batching: serving went on while heads fitted, so the head left
            // waiting does not fit beside the holders now.
            if stopped {
                let head = line.borrow_mut().take_head().expect("a head that waits");
                let req = self.request(head.mode, head.permits);
                let mut probe = self.holding.clone();
                assert_eq!(probe.acquire(&head.owner, &req, now, false, |m| Some(m.max(1))), Outcome::Held, "head {head:?} fits but waits");
                line.borrow_mut().put_back(head);
            }
        }

        fn apply(&mut self, op: &Op) {
            match *op {
                Op::Join { owner, shared, permits } => {
                    if self.holding.holder(&owner).is_some() || self.line.borrow().iter().any(|w| w.owner == owner) {
                        return;
                    }
                    let mode = if shared { Mode::Shared } else { Mode::Exclusive };
                    let permits = self.limit.map_or(1, |limit| 1 + permits % limit);
                    let req = self.request(mode, permits);
                    let waiting_ahead = !self.line.borrow().is_empty();
                    let counter = &mut self.counter;
                    let issue = |min: Token| {
                        *counter = (*counter + 1).max(min);
                        Some(*counter)
                    };
                    match self.holding.acquire(&owner, &req, self.now, waiting_ahead, issue) {
                        // No overtaking by newcomers: nobody is granted past a line.
                        Outcome::Granted(..) => assert!(!waiting_ahead, "a newcomer was granted past {} waiters", self.line.borrow().len()),
                        Outcome::Held => {
                            self.line.borrow_mut().join(Waiter { owner, mode, permits, joined: self.next_join });
                            self.next_join += 1;
                        }
                        Outcome::Refused(_) => {}
                    }
                }
                Op::Leave(owner) => {
                    if self.line.borrow_mut().leave(|w| w.owner == owner).is_some() {
                        self.gone += 1;
                    }
                }
                Op::Release(owner) => {
                    self.holding.release(&owner, self.now);
                }
                Op::Advance(ms) => {
                    self.now += ms;
                    self.holding.expire(self.now);
                }
            }
            self.serve();
        }

        /// FIFO: every waiter that joined is granted, gone (left or turned
        /// away) or still waiting; each grant's join number exceeds every
        /// earlier grant's, and no waiter that joined before a granted one
        /// still waits.
        fn check(&self) {
            let waiting = self.line.borrow().len() as u64;
            assert_eq!(self.granted.len() as u64 + self.gone + waiting, self.next_join, "a waiter vanished from the line");
            let joined: Vec<u64> = self.granted.iter().map(|w| w.joined).collect();
            assert!(joined.windows(2).all(|p| p[0] < p[1]), "served out of order: {joined:?}");
            if let Some(last) = joined.last() {
                let overtaken: Vec<u64> = self.line.borrow().iter().map(|w| w.joined).filter(|j| j < last).collect();
                assert!(overtaken.is_empty(), "{overtaken:?} still wait behind a later waiter {last} that was granted");
            }
            if let Kind::Semaphore { limit, .. } = self.holding.kind {
                let taken: u32 = self.holding.holders.iter().filter(|h| h.end > self.now).map(|h| h.permits).sum();
                assert!(taken <= limit, "{taken} permits of {limit}");
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        /// The selection lists what sorting every line and keeping the
        /// first `count` would, in the same order (ties on waiters and wait
        /// are common: small ranges).
        #[test]
        fn busiest_is_the_head_of_the_full_order(
            lines in proptest::collection::btree_map(0u16..400, (0usize..4, 0i64..4), 0..60),
            count in 0usize..70,
        ) {
            let lines: Vec<Busy<u16>> = lines.into_iter().map(|(key, (waiters, oldest_wait_ms))| Busy { waiters, oldest_wait_ms, key }).collect();
            let mut sorted = lines.clone();
            sorted.sort_by(|a, b| (b.waiters, b.oldest_wait_ms, a.key).cmp(&(a.waiters, a.oldest_wait_ms, b.key)));
            sorted.truncate(count);
            prop_assert_eq!(busiest(lines, count), sorted);
        }

        #[test]
        fn the_line_is_served_in_order_and_in_batches(
            limit in prop_oneof![Just(None), (1u32..4).prop_map(Some)],
            ops in proptest::collection::vec(op(), 1..100),
        ) {
            let mut run = Run {
                limit,
                holding: Holding::free_for(&Request { mode: Mode::Exclusive, limit, ttl_ms: 300, fence: 0, permits: 1, session: None }),
                line: RefCell::new(Line::default()),
                now: 0,
                counter: 0,
                next_join: 0,
                granted: Vec::new(),
                gone: 0,
            };
            for op in &ops {
                run.apply(op);
                run.check();
            }
        }

        /// Consecutive shared requests at the head go together, up to an
        /// exclusive one: on a lock held shared, a line of shared requests,
        /// an exclusive one and more shared ones is served up to the
        /// exclusive one, which holds the rest back.
        #[test]
        fn shared_heads_go_together_up_to_an_exclusive_one(before in 0usize..5, after in 1usize..5) {
            let shared = Request { mode: Mode::Shared, limit: None, ttl_ms: 300, fence: 0, permits: 1, session: None };
            let mut holding: Holding<u8> = Holding::free_for(&shared);
            let mut counter = 0;
            let mut issue = |min: Token| { counter = (counter + 1).max(min); Some(counter) };
            prop_assert!(matches!(holding.acquire(&100, &shared, 0, false, &mut issue), Outcome::Granted(..)));
            let line = RefCell::new(Line::default());
            let modes: Vec<Mode> = std::iter::repeat_n(Mode::Shared, before)
                .chain([Mode::Exclusive])
                .chain(std::iter::repeat_n(Mode::Shared, after))
                .collect();
            for (i, mode) in modes.iter().enumerate() {
                line.borrow_mut().join((u8::try_from(i).unwrap_or(u8::MAX), *mode));
            }
            let mut granted = Vec::new();
            serve(
                || line.borrow_mut().take_head(),
                |(owner, mode)| match holding.acquire(&owner, &Request { mode, ..shared }, 0, false, &mut issue) {
                    Outcome::Granted(..) => { granted.push(owner); Offer::Left }
                    _ => Offer::Waits((owner, mode)),
                },
                |head| line.borrow_mut().put_back(head),
            );
            let expected: Vec<u8> = (0..before).map(|i| u8::try_from(i).unwrap_or(u8::MAX)).collect();
            prop_assert_eq!(granted, expected);
            prop_assert_eq!(line.borrow().len(), 1 + after, "the exclusive head and everyone behind it wait");
        }
    }
}
