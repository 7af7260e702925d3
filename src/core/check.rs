//! Whether a hold is current: the one rule behind LOCK.CHECK and
//! LOCK.GUARD (the fence enforced where the data lives). A caller names
//! the owner and the token it was granted; the hold is current when the
//! key's holders include that owner under that token with its lease still
//! running. Otherwise the answer says why, so a refused write can be told
//! apart from a lost lock: nobody holds it, someone else does, the owner
//! holds it again under a newer token (this one was released and granted
//! anew), or the owner's lease under this token has ended.
//!
//! The glue lists the holders as the key stores them (ended leases
//! included, so an ended lease is told apart from a free key) and reads
//! the monotonic clock; a plain-string lock is one holder under token 0.

use super::lease::{NO_END, UNKNOWN};
use super::token::Token;

/// Why a hold is not current.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stale {
    /// Nobody holds the key with a running lease, and the owner holds
    /// nothing there.
    NotHeld,
    /// Others hold it (with a running lease); the owner does not.
    OtherOwner,
    /// The owner holds it under a newer token (`held`) than the one given:
    /// the hold the caller knows has ended and a new one began.
    NewerToken { held: Token },
    /// The owner holds it under another, older token (`held`) than the one
    /// given: the given token was never this hold's.
    OtherToken { held: Token },
    /// The owner's hold under this token is still stored but its lease has
    /// ended (`ended_ms_ago` ms ago; 0 when unknown).
    LeaseEnded { ended_ms_ago: i64 },
}

/// One holder as the key stores it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Held<'a> {
    pub owner: &'a [u8],
    pub token: Token,
    /// When its lease ends (monotonic ms; `lease::NO_END`, `lease::UNKNOWN`).
    pub end: i64,
}

/// Whether a lease ending at `end` still runs at `now` (monotonic ms).
/// An unknown end counts as ended, as `Lease::left` has it.
pub fn running(end: i64, now: i64) -> bool {
    end == NO_END || (end != UNKNOWN && end > now)
}

/// Whether `owner` holds the key under `token` at `now` (monotonic ms),
/// given its `holders`: `Ok(())`, or why not.
pub fn current<'a>(holders: impl IntoIterator<Item = Held<'a>>, owner: &[u8], token: Token, now: i64) -> Result<(), Stale> {
    let mut others_running = false;
    let mut mine: Option<Held<'a>> = None;
    for h in holders {
        if h.owner == owner {
            if h.token == token && running(h.end, now) {
                return Ok(());
            }
            // An owner holds a key once; should a value list it twice,
            // the hold under the given token is the one to explain.
            if mine.is_none_or(|m| m.token != token) {
                mine = Some(h);
            }
        } else if running(h.end, now) {
            others_running = true;
        }
    }
    match mine {
        Some(h) if h.token == token => {
            let ago = if h.end == UNKNOWN { 0 } else { now.saturating_sub(h.end) };
            Err(Stale::LeaseEnded { ended_ms_ago: ago.max(0) })
        }
        Some(h) if h.token > token => Err(Stale::NewerToken { held: h.token }),
        Some(h) => Err(Stale::OtherToken { held: h.token }),
        None if others_running => Err(Stale::OtherOwner),
        None => Err(Stale::NotHeld),
    }
}

/// Whether a token register (LOCK.FENCED) that has accepted `highest`
/// (`None`: no token yet) admits a write under `token`: one at least as
/// high as every token accepted before, so the holder that wrote last
/// writes again and a newer holder's first write shuts out every older
/// one. `Err` carries the highest accepted.
pub fn admits(highest: Option<Token>, token: Token) -> Result<(), Token> {
    match highest {
        Some(h) if token < h => Err(h),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn held(owner: &[u8], token: Token, end: i64) -> Held<'_> {
        Held { owner, token, end }
    }

    #[test]
    fn the_owner_under_its_token_with_a_running_lease_is_current() {
        assert_eq!(current([held(b"a", 7, 100)], b"a", 7, 99), Ok(()));
        assert_eq!(current([held(b"a", 7, NO_END)], b"a", 7, i64::MAX - 1), Ok(()));
        // A shared holder among others, or a semaphore's.
        assert_eq!(current([held(b"b", 3, 50), held(b"a", 7, 100), held(b"c", 9, 10)], b"a", 7, 60), Ok(()));
    }

    #[test]
    fn each_reason_is_told_apart() {
        assert_eq!(current([], b"a", 7, 0), Err(Stale::NotHeld));
        assert_eq!(current([held(b"b", 8, 100)], b"a", 7, 0), Err(Stale::OtherOwner));
        assert_eq!(current([held(b"a", 9, 100)], b"a", 7, 0), Err(Stale::NewerToken { held: 9 }));
        assert_eq!(current([held(b"a", 5, 100)], b"a", 7, 0), Err(Stale::OtherToken { held: 5 }));
        assert_eq!(current([held(b"a", 7, 100)], b"a", 7, 100), Err(Stale::LeaseEnded { ended_ms_ago: 0 }));
        assert_eq!(current([held(b"a", 7, 100)], b"a", 7, 130), Err(Stale::LeaseEnded { ended_ms_ago: 30 }));
        assert_eq!(current([held(b"a", 7, UNKNOWN)], b"a", 7, 130), Err(Stale::LeaseEnded { ended_ms_ago: 0 }));
    }

    #[test]
    fn holders_whose_lease_ended_hold_nothing() {
        // Someone else's ended lease: the key is free.
        assert_eq!(current([held(b"b", 8, 10)], b"a", 7, 20), Err(Stale::NotHeld));
        // The owner's own ended lease beside a running one of another.
        assert_eq!(current([held(b"a", 7, 10), held(b"b", 8, 100)], b"a", 7, 20), Err(Stale::LeaseEnded { ended_ms_ago: 10 }));
    }

    #[test]
    fn owners_are_compared_as_bytes() {
        assert_eq!(current([held(b"A", 7, 100)], b"a", 7, 0), Err(Stale::OtherOwner));
        assert_eq!(current([held(b"a\0", 7, 100)], b"a", 7, 0), Err(Stale::OtherOwner));
        assert_eq!(current([held(b"", 7, 100)], b"", 7, 0), Ok(()));
    }

    #[test]
    fn a_register_admits_its_highest_token_and_above_only() {
        assert_eq!(admits(None, 1), Ok(()));
        assert_eq!(admits(Some(7), 7), Ok(()));
        assert_eq!(admits(Some(7), 8), Ok(()));
        assert_eq!(admits(Some(7), 6), Err(7));
        assert_eq!(admits(Some(i64::MAX), 0), Err(i64::MAX));
    }

    fn holder() -> impl Strategy<Value = (u8, Token, i64)> {
        (0u8..4, 0i64..6, prop_oneof![Just(NO_END), Just(UNKNOWN), 0i64..20])
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

        /// Against the definition: current exactly when one holder is the
        /// owner under the token with a running lease; otherwise the
        /// reason matches what the holders are.
        #[test]
        fn the_answer_is_the_definitions(holders in proptest::collection::vec(holder(), 0..5), owner in 0u8..4, token in 0i64..6, now in 0i64..20) {
            let names: Vec<[u8; 1]> = holders.iter().map(|(o, _, _)| [*o]).collect();
            let list: Vec<Held<'_>> = holders.iter().zip(&names).map(|((_, t, e), n)| held(n, *t, *e)).collect();
            let mine: Vec<&Held<'_>> = list.iter().filter(|h| h.owner == [owner]).collect();
            let answer = current(list.iter().copied(), &[owner], token, now);
            let is_current = mine.iter().any(|h| h.token == token && running(h.end, now));
            prop_assert_eq!(answer.is_ok(), is_current);
            match answer {
                Ok(()) => {}
                Err(Stale::NotHeld) => {
                    prop_assert!(mine.is_empty());
                    prop_assert!(!list.iter().any(|h| running(h.end, now)));
                }
                Err(Stale::OtherOwner) => {
                    prop_assert!(mine.is_empty());
                    prop_assert!(list.iter().any(|h| running(h.end, now)));
                }
                Err(Stale::NewerToken { held }) => {
                    prop_assert!(held > token);
                    prop_assert!(mine.iter().all(|h| h.token != token) && mine.iter().any(|h| h.token == held));
                }
                Err(Stale::OtherToken { held }) => {
                    prop_assert!(held < token);
                    prop_assert!(mine.iter().all(|h| h.token != token) && mine.iter().any(|h| h.token == held));
                }
                Err(Stale::LeaseEnded { ended_ms_ago }) => {
                    prop_assert!(ended_ms_ago >= 0);
                    prop_assert!(mine.iter().any(|h| h.token == token && !running(h.end, now)));
                }
            }
        }
    }
}
