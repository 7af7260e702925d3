//! What a stored lock may be: the states the commands make, and the check
//! a decoded value passes before it becomes a key (RESTORE, MIGRATE, an
//! RDB load, a replica's full sync). A payload crafted with a valid
//! checksum made locks no command can make: token 0, a group nobody holds,
//! one owner twice in a semaphore (one release freed both), two readers
//! with one token, a holder without a deadline (held for ever).
//!
//! The rules, as the commands keep them:
//! - a token is at least 1: `token::next_token` counts up from a counter
//!   that is never negative;
//! - an owner is never empty, and neither it nor a holder's value (an
//!   exclusive lock's, or a shared holder's: `check_member_value`) is
//!   longer than `MAX_TEXT_LEN`, the most `redislock.max-owner-len`
//!   allows (a lock stored under a higher setting stays valid);
//! - a lock held shared (a group) has a holder: the release of the last
//!   one deletes the key, and a holder whose lease ended stays stored
//!   until then (a save writes one, see `holders_to_save`);
//! - each holder of a group holds once (a second grant to its owner is a
//!   re-grant of the same hold), with a token of its own (a new holder
//!   gets a new token), and a deadline: every grant and extension has a
//!   ttl, at most `lease::LONGEST_LEASE_MS` (the most `redislock.max-ttl`
//!   allows); a deadline further ahead of this server's clock than that,
//!   plus `CLOCK_SLACK_MS` for the clocks of two servers, no command gave;
//! - a semaphore's limit is 1 to `grant::MAX_LIMIT`, each holder takes at
//!   least one permit and all of them at most the limit; a read-write
//!   lock's holders take one each.
//!
//! A load of the server's own data (`Origin::OwnData`) also takes two
//! states earlier versions of the module saved, so that a server upgraded
//! in place still starts: a group whose leases had all ended was saved
//! without holders (it loads as the free key it was), and 0.1.0 bounded no
//! owner.

use std::collections::HashSet;
use std::fmt;

use super::grant::{Holder, Kind, MAX_LIMIT};
use super::lease::LONGEST_LEASE_MS;
use super::token::Token;

/// The longest owner or value a lock stores: the most
/// `redislock.max-owner-len` allows.
pub const MAX_TEXT_LEN: usize = 1 << 20;

/// How far the clocks of the server that saved a lock and the one loading
/// it may disagree for a deadline to be still one a command gave.
pub const CLOCK_SLACK_MS: i64 = 86_400_000;

/// Where a decoded value comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// A client's RESTORE (MIGRATE's too): every rule.
    Client,
    /// This server's own files or its master's (a load at startup, DEBUG
    /// RELOAD, a full sync): also what earlier versions saved (see above).
    OwnData,
}

/// One holder of a group as a save writes it: the deadline is Unix ms
/// (0: none), the permits as read, before any conversion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredHolder<O> {
    pub owner: O,
    pub token: Token,
    pub deadline_ms: i64,
    pub permits: u64,
}

/// Why a decoded lock is none a command can make; its `Display` is the
/// reason the log gives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unsound {
    EmptyOwner,
    OwnerTooLong(usize),
    ValueTooLong(usize),
    /// 0 or negative.
    Token(Token),
    NoHolders,
    /// Above `MAX_LIMIT`.
    Limit(u64),
    /// A read-write lock (limit 0) marked resized.
    ResizedLock,
    /// A resized mark naming a largest limit (2 and up) not above the
    /// limit, or above `MAX_LIMIT`.
    Largest {
        largest: u64,
        limit: u32,
    },
    /// 0, or above 1 on a read-write lock.
    Permits {
        permits: u64,
        limit: u32,
    },
    /// More permits taken than the semaphore has.
    Taken {
        taken: u64,
        limit: u32,
    },
    OwnerTwice,
    TokenTwice(Token),
    NoDeadline,
    /// Negative, or further ahead than any lease (see `CLOCK_SLACK_MS`).
    Deadline(i64),
}

impl fmt::Display for Unsound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unsound::EmptyOwner => f.write_str("an empty owner"),
            Unsound::OwnerTooLong(len) => write!(f, "an owner of {len} bytes (at most {MAX_TEXT_LEN})"),
            Unsound::ValueTooLong(len) => write!(f, "a value of {len} bytes (at most {MAX_TEXT_LEN})"),
            Unsound::Token(token) => write!(f, "token {token} (tokens start at 1)"),
            Unsound::NoHolders => f.write_str("a shared lock without holders"),
            Unsound::Limit(limit) => write!(f, "LIMIT {limit} (at most {MAX_LIMIT})"),
            Unsound::ResizedLock => f.write_str("a lock without LIMIT marked resized"),
            Unsound::Largest { largest, limit } => {
                write!(f, "largest limit {largest} of LIMIT {limit} (above the limit, at most {MAX_LIMIT})")
            }
            Unsound::Permits { permits, limit: 0 } => write!(f, "a holder taking {permits} permits of a lock without LIMIT"),
            Unsound::Permits { permits, limit } => write!(f, "a holder taking {permits} permits of LIMIT {limit}"),
            Unsound::Taken { taken, limit } => write!(f, "{taken} permits taken of LIMIT {limit}"),
            Unsound::OwnerTwice => f.write_str("one owner holding twice"),
            Unsound::TokenTwice(token) => write!(f, "token {token} held twice"),
            Unsound::NoDeadline => f.write_str("a holder without a deadline"),
            Unsound::Deadline(at) => write!(f, "deadline {at} (Unix ms), which no lease of at most a year from now reaches"),
        }
    }
}

/// A shared holder's value (`VALUE`; empty: none): bounded as an
/// exclusive lock's, whatever the origin (no version stored a longer one).
pub fn check_member_value(value: &[u8]) -> Result<(), Unsound> {
    if value.len() > MAX_TEXT_LEN {
        return Err(Unsound::ValueTooLong(value.len()));
    }
    Ok(())
}

fn check_owner(owner: &[u8], origin: Origin) -> Result<(), Unsound> {
    if owner.is_empty() {
        return Err(Unsound::EmptyOwner);
    }
    if owner.len() > MAX_TEXT_LEN && origin == Origin::Client {
        return Err(Unsound::OwnerTooLong(owner.len()));
    }
    Ok(())
}

fn check_token(token: Token) -> Result<(), Unsound> {
    if token < 1 {
        return Err(Unsound::Token(token));
    }
    Ok(())
}

/// An exclusive lock as decoded: its owner, token and value (empty: none).
/// Its deadline is the key's TTL, which Redis loads beside it (and PERSIST
/// may lift, as on any key).
pub fn check_exclusive(owner: &[u8], token: Token, value: &[u8], origin: Origin) -> Result<(), Unsound> {
    check_owner(owner, origin)?;
    check_token(token)?;
    if value.len() > MAX_TEXT_LEN {
        return Err(Unsound::ValueTooLong(value.len()));
    }
    Ok(())
}

/// The stored resized mark of a semaphore of `limit`: 0, not resized
/// (its largest limit is its limit); 1, resized, largest == limit; m >= 2,
/// resized with largest m (> limit). 1 is what every file written before
/// the largest limit was kept holds, and it reads as it was written.
pub fn resized_mark(resized: bool, limit: u32, largest: u32) -> u64 {
    match (resized, largest > limit) {
        (false, _) => 0,
        (true, false) => 1,
        (true, true) => u64::from(largest),
    }
}

/// A group as decoded (`limit` 0: a read-write lock held shared; `mark`:
/// the resized mark, see `resized_mark`), read at `now_wall` (Unix ms);
/// its kind when it is one the commands make.
pub fn check_group<O: AsRef<[u8]>>(
    limit: u64,
    mark: u64,
    holders: &[StoredHolder<O>],
    now_wall: i64,
    origin: Origin,
) -> Result<Kind, Unsound> {
    let kind = match u32::try_from(limit) {
        Ok(0) if mark != 0 => return Err(Unsound::ResizedLock),
        Ok(0) => Kind::ReadWrite,
        Ok(limit) if limit <= MAX_LIMIT => match mark {
            0 => Kind::Semaphore { limit, resized: false, largest: limit },
            1 => Kind::Semaphore { limit, resized: true, largest: limit },
            largest => match u32::try_from(largest) {
                Ok(largest) if largest > limit && largest <= MAX_LIMIT => Kind::Semaphore { limit, resized: true, largest },
                _ => return Err(Unsound::Largest { largest, limit }),
            },
        },
        _ => return Err(Unsound::Limit(limit)),
    };
    if holders.is_empty() && origin == Origin::Client {
        return Err(Unsound::NoHolders);
    }
    let farthest = now_wall.saturating_add(LONGEST_LEASE_MS).saturating_add(CLOCK_SLACK_MS);
    // The permits one holder may take, and the limit a refusal names (0:
    // none).
    let (room, named) = match kind {
        Kind::ReadWrite => (1, 0),
        Kind::Semaphore { limit, resized: false, .. } => (limit, limit),
        // A shrink kept what its holders took (see above).
        Kind::Semaphore { resized: true, .. } => (MAX_LIMIT, MAX_LIMIT),
    };
    let mut taken = 0u64;
    for holder in holders {
        check_owner(holder.owner.as_ref(), origin)?;
        check_token(holder.token)?;
        match holder.deadline_ms {
            0 => return Err(Unsound::NoDeadline),
            at if at < 0 || at > farthest => return Err(Unsound::Deadline(at)),
            _ => {}
        }
        if holder.permits == 0 || holder.permits > u64::from(room) {
            return Err(Unsound::Permits { permits: holder.permits, limit: named });
        }
        taken = taken.saturating_add(holder.permits);
        if kind != Kind::ReadWrite && taken > u64::from(room) {
            return Err(Unsound::Taken { taken, limit: room });
        }
    }
    if holders.len() > 1 {
        let mut owners = HashSet::with_capacity(holders.len());
        let mut tokens = HashSet::with_capacity(holders.len());
        for holder in holders {
            if !owners.insert(holder.owner.as_ref()) {
                return Err(Unsound::OwnerTwice);
            }
            if !tokens.insert(holder.token) {
                return Err(Unsound::TokenTwice(holder.token));
            }
        }
    }
    Ok(kind)
}

/// The holders a save writes of a group at `now` (monotonic ms): those
/// whose lease runs or, when none does (the key outlives them: its TTL is
/// the latest deadline any holder had), the one whose lease ended last,
/// so that the key loads as the free key it is here and no save writes a
/// group without holders.
pub fn holders_to_save<O>(holders: &[Holder<O>], now: i64) -> impl Iterator<Item = &Holder<O>> {
    let last_ended = if holders.iter().any(|h| h.end > now) { None } else { holders.iter().max_by_key(|h| h.end) };
    holders.iter().filter(move |h| h.end > now).chain(last_ended)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_700_000_000_000;

    fn holder(owner: &str, token: Token, deadline_ms: i64, permits: u64) -> StoredHolder<&[u8]> {
        StoredHolder { owner: owner.as_bytes(), token, deadline_ms, permits }
    }

    #[test]
    fn an_exclusive_lock_needs_an_owner_a_token_and_texts_within_the_bound() {
        let long = vec![b'o'; MAX_TEXT_LEN + 1];
        assert_eq!(check_exclusive(b"o", 1, b"", Origin::Client), Ok(()));
        assert_eq!(check_exclusive(&long[1..], 1, &long[1..], Origin::Client), Ok(()));
        assert_eq!(check_exclusive(b"o", 0, b"", Origin::Client), Err(Unsound::Token(0)));
        assert_eq!(check_exclusive(b"o", -3, b"", Origin::OwnData), Err(Unsound::Token(-3)));
        assert_eq!(check_exclusive(b"", 1, b"", Origin::OwnData), Err(Unsound::EmptyOwner));
        assert_eq!(check_exclusive(&long, 1, b"", Origin::Client), Err(Unsound::OwnerTooLong(MAX_TEXT_LEN + 1)));
        assert_eq!(check_exclusive(&long, 1, b"", Origin::OwnData), Ok(()), "0.1.0 bounded no owner");
        assert_eq!(check_exclusive(b"o", 1, &long, Origin::OwnData), Err(Unsound::ValueTooLong(MAX_TEXT_LEN + 1)));
        assert_eq!(Unsound::Token(0).to_string(), "token 0 (tokens start at 1)");
    }

    #[test]
    fn a_group_the_commands_make_passes() {
        let readers = [holder("a", 1, NOW + 1_000, 1), holder("b", 2, NOW - 5_000, 1)];
        assert_eq!(check_group(0, 0, &readers, NOW, Origin::Client), Ok(Kind::ReadWrite));
        let permits = [holder("a", 7, NOW + LONGEST_LEASE_MS, 3), holder("b", 9, 1, 2)];
        assert_eq!(check_group(5, 0, &permits, NOW, Origin::Client), Ok(Kind::Semaphore { limit: 5, resized: false, largest: 5 }));
        let top = [holder("a", 1, NOW + 1, u64::from(MAX_LIMIT))];
        assert_eq!(
            check_group(u64::from(MAX_LIMIT), 0, &top, NOW, Origin::Client),
            Ok(Kind::Semaphore { limit: MAX_LIMIT, resized: false, largest: MAX_LIMIT })
        );
    }

    /// Each state the fuzzing found, and each other break of a rule, on
    /// its own: refused with the reason the log gives.
    #[test]
    fn each_broken_rule_is_refused_with_its_reason() {
        let far = NOW + LONGEST_LEASE_MS + CLOCK_SLACK_MS;
        type Case<'a> = (u64, Vec<StoredHolder<&'a [u8]>>, Unsound, &'a str);
        let cases: Vec<Case<'_>> = vec![
            (0, vec![], Unsound::NoHolders, "a shared lock without holders"),
            (3, vec![holder("a", 0, NOW, 1)], Unsound::Token(0), "token 0 (tokens start at 1)"),
            (3, vec![holder("a", 1, NOW, 1), holder("a", 2, NOW, 1)], Unsound::OwnerTwice, "one owner holding twice"),
            (0, vec![holder("a", 4, NOW, 1), holder("b", 4, NOW, 1)], Unsound::TokenTwice(4), "token 4 held twice"),
            (0, vec![holder("a", 1, 0, 1)], Unsound::NoDeadline, "a holder without a deadline"),
            (
                0,
                vec![holder("a", 1, -1, 1)],
                Unsound::Deadline(-1),
                "deadline -1 (Unix ms), which no lease of at most a year from now reaches",
            ),
            (0, vec![holder("a", 1, far + 1, 1)], Unsound::Deadline(far + 1), ""),
            (0, vec![holder("a", 1, i64::MAX, 1)], Unsound::Deadline(i64::MAX), ""),
            (100_001, vec![holder("a", 1, NOW, 1)], Unsound::Limit(100_001), "LIMIT 100001 (at most 100000)"),
            (1 << 40, vec![holder("a", 1, NOW, 1)], Unsound::Limit(1 << 40), ""),
            (3, vec![holder("a", 1, NOW, 0)], Unsound::Permits { permits: 0, limit: 3 }, "a holder taking 0 permits of LIMIT 3"),
            (3, vec![holder("a", 1, NOW, 4)], Unsound::Permits { permits: 4, limit: 3 }, ""),
            (
                0,
                vec![holder("a", 1, NOW, 2)],
                Unsound::Permits { permits: 2, limit: 0 },
                "a holder taking 2 permits of a lock without LIMIT",
            ),
            (3, vec![holder("a", 1, NOW, 2), holder("b", 2, NOW, 2)], Unsound::Taken { taken: 4, limit: 3 }, "4 permits taken of LIMIT 3"),
            (2, vec![holder("a", 1, NOW, 1), holder("b", 2, NOW, 1), holder("c", 3, NOW, 1)], Unsound::Taken { taken: 3, limit: 2 }, ""),
            (0, vec![holder("", 1, NOW, 1)], Unsound::EmptyOwner, "an empty owner"),
        ];
        for (limit, holders, unsound, reason) in cases {
            assert_eq!(check_group(limit, 0, &holders, NOW, Origin::Client), Err(unsound.clone()), "{holders:?}");
            if !reason.is_empty() {
                assert_eq!(unsound.to_string(), reason);
            }
            if unsound != Unsound::NoHolders {
                assert_eq!(check_group(limit, 0, &holders, NOW, Origin::OwnData), Err(unsound), "{holders:?}: own data too");
            }
        }
        assert_eq!(check_group(0, 0, &[holder("a", 1, far, 1)], NOW, Origin::Client), Ok(Kind::ReadWrite), "the farthest deadline");
    }

    /// A resized semaphore's holders may take more than its limit (a
    /// shrink kept them), never more than any limit allows; unmarked, the
    /// same group is refused, and a lock without LIMIT is never resized.
    #[test]
    fn a_resized_semaphore_may_hold_more_than_its_limit() {
        let over = [holder("a", 1, NOW + 1_000, 3), holder("b", 2, NOW + 1_000, 2)];
        assert_eq!(check_group(2, 1, &over, NOW, Origin::Client), Ok(Kind::Semaphore { limit: 2, resized: true, largest: 2 }));
        assert_eq!(check_group(2, 0, &over, NOW, Origin::Client), Err(Unsound::Permits { permits: 3, limit: 2 }));
        let spread = [holder("a", 1, NOW + 1_000, 1), holder("b", 2, NOW + 1_000, 1)];
        assert_eq!(check_group(1, 0, &spread, NOW, Origin::OwnData), Err(Unsound::Taken { taken: 2, limit: 1 }));
        assert_eq!(check_group(1, 1, &spread, NOW, Origin::OwnData), Ok(Kind::Semaphore { limit: 1, resized: true, largest: 1 }));
        let beyond = [holder("a", 1, NOW + 1_000, u64::from(MAX_LIMIT)), holder("b", 2, NOW + 1_000, 1)];
        assert_eq!(
            check_group(1, 1, &beyond, NOW, Origin::Client),
            Err(Unsound::Taken { taken: u64::from(MAX_LIMIT) + 1, limit: MAX_LIMIT })
        );
        let one = [holder("a", 1, NOW + 1_000, u64::from(MAX_LIMIT) + 1)];
        assert!(matches!(check_group(1, 1, &one, NOW, Origin::Client), Err(Unsound::Permits { .. })));
        assert_eq!(check_group(0, 1, &spread, NOW, Origin::OwnData), Err(Unsound::ResizedLock));
        assert_eq!(Unsound::ResizedLock.to_string(), "a lock without LIMIT marked resized");
        assert_eq!(check_group(0, 5, &spread, NOW, Origin::OwnData), Err(Unsound::ResizedLock));
    }

    /// The mark keeps the largest limit: 0 and 1 read as every earlier
    /// file wrote them (largest == limit), m >= 2 a largest above the
    /// limit, and a mark that names none (not above the limit, or above
    /// MAX_LIMIT) is refused.
    #[test]
    fn the_resized_mark_carries_the_largest_limit() {
        let two = [holder("a", 1, NOW + 1_000, 1), holder("b", 2, NOW + 1_000, 1)];
        for (limit, resized, largest) in [(2, false, 2), (2, true, 2), (2, true, 5), (1, true, 2), (3, true, MAX_LIMIT)] {
            let mark = resized_mark(resized, limit, largest);
            assert_eq!(mark == 0, !resized);
            let kind = Kind::Semaphore { limit, resized, largest };
            assert_eq!(check_group(u64::from(limit), mark, &two, NOW, Origin::Client), Ok(kind), "mark {mark}");
        }
        assert_eq!(resized_mark(true, 4, 4), 1, "what files written before hold");
        assert_eq!(check_group(3, 3, &two, NOW, Origin::Client), Err(Unsound::Largest { largest: 3, limit: 3 }));
        assert_eq!(check_group(3, 2, &two, NOW, Origin::Client), Err(Unsound::Largest { largest: 2, limit: 3 }));
        let beyond = u64::from(MAX_LIMIT) + 1;
        assert_eq!(check_group(3, beyond, &two, NOW, Origin::Client), Err(Unsound::Largest { largest: beyond, limit: 3 }));
        assert_eq!(check_group(3, u64::MAX, &two, NOW, Origin::OwnData), Err(Unsound::Largest { largest: u64::MAX, limit: 3 }));
    }

    #[test]
    fn own_data_also_takes_what_earlier_versions_saved() {
        let none: [StoredHolder<&[u8]>; 0] = [];
        assert_eq!(check_group(3, 0, &none, NOW, Origin::OwnData), Ok(Kind::Semaphore { limit: 3, resized: false, largest: 3 }));
        let long = vec![b'o'; MAX_TEXT_LEN + 1];
        let holders = [StoredHolder { owner: &long[..], token: 1, deadline_ms: NOW, permits: 1 }];
        assert_eq!(check_group(0, 0, &holders, NOW, Origin::Client), Err(Unsound::OwnerTooLong(MAX_TEXT_LEN + 1)));
        assert_eq!(check_group(0, 0, &holders, NOW, Origin::OwnData), Ok(Kind::ReadWrite));
    }

    #[test]
    fn a_save_writes_the_running_holders_or_the_last_to_end() {
        let h = |owner: u8, end: i64| Holder { owner, token: i64::from(owner), end, since: 0, permits: 1 };
        let holders = [h(1, 10), h(2, 50), h(3, 30)];
        let saved = |now| holders_to_save(&holders, now).map(|h| h.owner).collect::<Vec<_>>();
        assert_eq!(saved(0), [1, 2, 3]);
        assert_eq!(saved(20), [2, 3]);
        assert_eq!(saved(50), [2], "none runs: the last to end");
        assert_eq!(saved(1_000), [2]);
        assert_eq!(holders_to_save::<u8>(&[], 0).count(), 0);
    }
}

/// The states the commands make pass, and each break of a rule the
/// fuzzing found, made in one of them, is refused.
#[cfg(test)]
mod properties {
    use super::*;
    use crate::core::grant::{Holding, Mode, Request};
    use proptest::prelude::*;

    const WALL: i64 = 1_700_000_000_000;

    #[derive(Clone, Debug)]
    enum Op {
        Ask { owner: u8, shared: bool, ttl: i64, permits: u32, fence: i64 },
        Release(u8),
        Extend(u8, i64),
        Advance(i64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u8..6, any::<bool>(), 1i64..5_000, 1u32..4, prop_oneof![Just(0i64), 0i64..100])
                .prop_map(|(owner, shared, ttl, permits, fence)| Op::Ask { owner, shared, ttl, permits, fence }),
            2 => (0u8..6).prop_map(Op::Release),
            1 => (0u8..6, 1i64..5_000).prop_map(|(o, t)| Op::Extend(o, t)),
            2 => (0i64..3_000).prop_map(Op::Advance),
        ]
    }

    /// The holding the ops leave, driven as the module does, with the
    /// time they end at.
    fn drive(limit: Option<u32>, ops: &[Op]) -> (Holding<u8>, i64) {
        let mut lock = Holding { kind: Kind::of(limit), mode: Mode::Shared, holders: Vec::new() };
        let (mut now, mut counter) = (0i64, 0i64);
        for op in ops {
            match *op {
                Op::Ask { owner, shared, ttl, permits, fence } => {
                    let mode = if shared || limit.is_some() { Mode::Shared } else { Mode::Exclusive };
                    let permits = limit.map_or(1, |l| 1 + (permits - 1) % l);
                    let req = Request { mode, limit, permits, ttl_ms: ttl, fence, session: None };
                    let issue = |min| {
                        counter = crate::core::token::next_token(counter, min)?;
                        Some(counter)
                    };
                    let _ = lock.acquire(&owner, &req, now, false, issue);
                    if lock.is_free() {
                        lock = Holding { kind: Kind::of(limit), mode: Mode::Shared, holders: Vec::new() };
                    }
                }
                Op::Release(owner) => {
                    lock.release(&owner, now);
                }
                Op::Extend(owner, ttl) => {
                    lock.extend(&owner, ttl, now);
                }
                Op::Advance(ms) => now += ms,
            }
        }
        (lock, now)
    }

    /// What a save writes of the holding at `now`, read back at the wall
    /// clock it was saved at.
    fn saved(lock: &Holding<u8>, now: i64) -> Vec<StoredHolder<[u8; 1]>> {
        holders_to_save(&lock.holders, now)
            .map(|h| StoredHolder {
                owner: [h.owner],
                token: h.token,
                deadline_ms: (WALL + h.end - now).max(1),
                permits: u64::from(h.permits),
            })
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        #[test]
        fn what_the_commands_make_passes_and_each_break_is_refused(
            limit in prop_oneof![Just(None), (1u32..5).prop_map(Some)],
            ops in proptest::collection::vec(op(), 1..60),
            break_at in any::<prop::sample::Index>(),
            how in 0u8..5,
        ) {
            let (lock, now) = drive(limit, &ops);
            // A key still held shared (an exclusive holder is saved as an
            // exclusive lock, checked by `check_exclusive`).
            prop_assume!(lock.mode == Mode::Shared && !lock.is_free());
            let stored_limit = u64::from(limit.unwrap_or(0));
            let mut holders = saved(&lock, now);
            prop_assert_eq!(check_group(stored_limit, 0, &holders, WALL, Origin::Client), Ok(lock.kind));
            for h in &holders {
                prop_assert_eq!(check_exclusive(&h.owner, h.token, b"", Origin::Client), Ok(()));
            }
            let i = break_at.index(holders.len());
            let other = (i + 1) % holders.len();
            let expected = match how {
                0 => { holders[i].token = 0; Unsound::Token(0) }
                1 => { holders[i].deadline_ms = 0; Unsound::NoDeadline }
                2 if holders.len() > 1 => { holders[i].owner = holders[other].owner; Unsound::OwnerTwice }
                3 if holders.len() > 1 => { holders[i].token = holders[other].token; Unsound::TokenTwice(holders[other].token) }
                _ => {
                    // One more holder taking the last free permit and one
                    // more, or a second permit of a read-write lock.
                    let taken: u64 = holders.iter().map(|h| h.permits).sum();
                    let room = u64::from(limit.unwrap_or(1));
                    match limit {
                        // Room left: a newcomer taking it and one more.
                        Some(l) if taken < room => {
                            holders.push(StoredHolder { owner: [99], token: 1 << 40, deadline_ms: WALL, permits: room - taken + 1 });
                            Unsound::Taken { taken: room + 1, limit: l }
                        }
                        Some(l) => {
                            holders[i].permits += 1;
                            if holders[i].permits > room { Unsound::Permits { permits: holders[i].permits, limit: l } } else { Unsound::Taken { taken: taken + 1, limit: l } }
                        }
                        None => { holders[i].permits = 2; Unsound::Permits { permits: 2, limit: 0 } }
                    }
                }
            };
            prop_assert_eq!(check_group(stored_limit, 0, &holders, WALL, Origin::Client), Err(expected));
        }
    }
}
