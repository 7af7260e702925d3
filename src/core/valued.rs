//! A shared holder's owner with the value its hold stores (`VALUE`,
//! `LOCK.PROCLAIM`): a group member's address, say, readable with the
//! group's holders in one call. The value is the holder's own: a re-grant
//! with a value replaces it, one without keeps it, and it leaves with the
//! hold; no rule of `grant` looks at it, so it travels inside the owner
//! the rules already carry (`Holding<ValuedOwner>`), compared by the owner
//! alone.
//!
//! A holder without a value pays one byte for the possibility, in the
//! owner's own allocation (a tag after the owner), and nothing else: the
//! holder is as large as before and no allocation is added. Most shared
//! holds (readers, permits) carry none.

use std::borrow::Borrow;
use std::ops::Deref;

use super::grant::{Holding, Outcome, Request};
use super::token::Token;

/// The tag after an owner without a value.
const BARE: u8 = 0;
/// The tag after `owner, value, owner length (8 bytes, little-endian)`.
const VALUED: u8 = 1;
const LEN_BYTES: usize = std::mem::size_of::<u64>();

/// An owner, compared, hashed and borrowed as its bytes alone, and the
/// value stored with its hold (empty: none), in one allocation laid out
/// as `owner 0`, or `owner value owner-length 1` with a value.
#[derive(Clone, Debug)]
pub struct ValuedOwner(Box<[u8]>);

impl ValuedOwner {
    /// `owner` holding `value` (empty: none).
    pub fn with_value(owner: &[u8], value: &[u8]) -> ValuedOwner {
        if value.is_empty() {
            return ValuedOwner::from(owner);
        }
        let mut bytes = Vec::with_capacity(owner.len() + value.len() + LEN_BYTES + 1);
        bytes.extend_from_slice(owner);
        bytes.extend_from_slice(value);
        bytes.extend_from_slice(&(owner.len() as u64).to_le_bytes());
        bytes.push(VALUED);
        ValuedOwner(bytes.into_boxed_slice())
    }

    /// The owner and the value (empty: none), read from the layout above;
    /// a tag or length no constructor wrote reads as what fits.
    fn parts(&self) -> (&[u8], &[u8]) {
        match self.0.split_last() {
            Some((&VALUED, rest)) if rest.len() >= LEN_BYTES => {
                let (body, len) = rest.split_at(rest.len() - LEN_BYTES);
                let owner_len = len.try_into().map(u64::from_le_bytes).unwrap_or(0);
                let owner_len = usize::try_from(owner_len).unwrap_or(usize::MAX).min(body.len());
                body.split_at(owner_len)
            }
            Some((_, rest)) => (rest, &[]),
            None => (&[], &[]),
        }
    }

    pub fn owner(&self) -> &[u8] {
        self.parts().0
    }

    /// The value (empty: none).
    pub fn value(&self) -> &[u8] {
        self.parts().1
    }

    pub fn has_value(&self) -> bool {
        self.0.last() == Some(&VALUED)
    }

    /// Replaces the value; empty removes it.
    pub fn set_value(&mut self, value: &[u8]) {
        if self.value() != value {
            *self = ValuedOwner::with_value(self.owner(), value);
        }
    }

    /// Bytes allocated beside the holder for the owner and the value.
    pub fn heap_bytes(&self) -> usize {
        self.0.len()
    }
}

impl From<&[u8]> for ValuedOwner {
    fn from(owner: &[u8]) -> ValuedOwner {
        let mut bytes = Vec::with_capacity(owner.len() + 1);
        bytes.extend_from_slice(owner);
        bytes.push(BARE);
        ValuedOwner(bytes.into_boxed_slice())
    }
}

impl From<Box<[u8]>> for ValuedOwner {
    fn from(owner: Box<[u8]>) -> ValuedOwner {
        ValuedOwner::from(&owner[..])
    }
}

impl PartialEq for ValuedOwner {
    fn eq(&self, other: &ValuedOwner) -> bool {
        self.owner() == other.owner()
    }
}

impl Eq for ValuedOwner {}

impl std::hash::Hash for ValuedOwner {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.owner().hash(state);
    }
}

impl Borrow<[u8]> for ValuedOwner {
    fn borrow(&self) -> &[u8] {
        self.owner()
    }
}

impl Deref for ValuedOwner {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.owner()
    }
}

impl Holding<ValuedOwner> {
    /// `Holding::acquire`, then the value of a shared holder granted: `value`
    /// replaces its own (empty clears it), `None` keeps it; a new holder
    /// without one has none. An upgrade leaves the group, and its value
    /// with it: the caller stores the exclusive hold's.
    pub fn acquire_valued(
        &mut self,
        owner: &ValuedOwner,
        value: Option<&[u8]>,
        req: &Request,
        now: i64,
        waiting_ahead: bool,
        issue: impl FnMut(Token) -> Option<Token>,
    ) -> Outcome {
        let outcome = self.acquire(owner, req, now, waiting_ahead, issue);
        if let (Outcome::Granted(..), Some(value)) = (outcome, value) {
            if let Some(holder) = self.holders.iter_mut().find(|h| h.owner == *owner) {
                holder.owner.set_value(value);
            }
        }
        outcome
    }

    /// `LOCK.PROCLAIM` on a shared hold: `owner`'s running hold stores
    /// `value` (empty: none); its token, or `None` if it holds nothing at
    /// `now`. Token, lease and start stay.
    pub fn proclaim(&mut self, owner: &[u8], value: &[u8], now: i64) -> Option<Token> {
        let holder = self.holders.iter_mut().find(|h| *h.owner == *owner && h.end > now)?;
        holder.owner.set_value(value);
        Some(holder.token)
    }

    /// `Holding::replay` with the holder's value exactly as given (empty:
    /// none): a replica sets what its master stored.
    pub fn replay_valued(&mut self, owner: &[u8], value: &[u8], token: Token, end: i64, permits: u32, now: i64) {
        self.replay(owner, token, end, permits, now);
        if let Some(holder) = self.holders.iter_mut().find(|h| *h.owner == *owner) {
            holder.owner.set_value(value);
        }
    }

    /// The value `owner` stores (empty: none, or not a holder).
    pub fn value_of(&self, owner: &[u8]) -> &[u8] {
        self.holder(owner).map_or(&[], |h| h.owner.value())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::grant::{Grant, Holder, Kind, Mode};

    fn shared(ttl_ms: i64) -> Request {
        Request { mode: Mode::Shared, limit: None, permits: 1, ttl_ms, fence: 0, session: None }
    }

    #[test]
    fn a_value_is_kept_by_a_regrant_without_one_and_replaced_by_one_with() {
        let mut lock: Holding<ValuedOwner> = Holding { kind: Kind::ReadWrite, mode: Mode::Shared, holders: Vec::new() };
        let mut counter = 0;
        let mut issue = |_| {
            counter += 1;
            Some(counter)
        };
        let a = ValuedOwner::from(&b"a"[..]);
        assert_eq!(lock.acquire_valued(&a, Some(b"10.0.0.1"), &shared(1_000), 0, false, &mut issue), Outcome::Granted(1, Grant::New));
        assert_eq!(lock.value_of(b"a"), b"10.0.0.1");
        assert_eq!(lock.acquire_valued(&a, None, &shared(1_000), 10, false, &mut issue), Outcome::Granted(1, Grant::Regrant));
        assert_eq!(lock.value_of(b"a"), b"10.0.0.1", "a re-grant without VALUE keeps it");
        lock.acquire_valued(&a, Some(b"10.0.0.2"), &shared(1_000), 20, false, &mut issue);
        assert_eq!(lock.value_of(b"a"), b"10.0.0.2");
        lock.acquire_valued(&a, Some(b""), &shared(1_000), 30, false, &mut issue);
        assert!(!lock.holders[0].owner.has_value(), "an empty VALUE clears it");
        assert_eq!(lock.proclaim(b"a", b"x", 40), Some(1));
        assert_eq!(lock.value_of(b"a"), b"x");
        assert_eq!(lock.proclaim(b"a", b"y", 5_000), None, "an ended hold proclaims nothing");
        assert_eq!(lock.proclaim(b"b", b"y", 40), None);
    }

    #[test]
    fn a_holder_without_a_value_is_as_large_as_before_and_its_owner_one_byte_longer() {
        use std::mem::size_of;
        assert_eq!(size_of::<Holder<ValuedOwner>>(), size_of::<Holder<Box<[u8]>>>());
        let bare = ValuedOwner::from(&b"owner"[..]);
        assert_eq!((bare.heap_bytes(), bare.owner(), bare.value(), bare.has_value()), (6, &b"owner"[..], &b""[..], false));
        let valued = ValuedOwner::with_value(b"owner", b"addr");
        assert_eq!(valued.heap_bytes(), 5 + 4 + 8 + 1);
        assert_eq!((valued.owner(), valued.value(), valued.has_value()), (&b"owner"[..], &b"addr"[..], true));
        assert_eq!(bare, valued, "compared by the owner alone");
        assert_eq!(&*valued, b"owner");
        // Owners and values that look like the layout's own bytes.
        for (owner, value) in [(&b"\x01"[..], &b"\x00"[..]), (b"", b"\x01"), (b"\x00\x00\x00\x00\x00\x00\x00\x00\x01", b"v")] {
            let v = ValuedOwner::with_value(owner, value);
            assert_eq!((v.owner(), v.value()), (owner, value));
            let b = ValuedOwner::from(owner);
            assert_eq!((b.owner(), b.value()), (owner, &b""[..]));
        }
        let mut v = ValuedOwner::from(&b"o"[..]);
        v.set_value(b"x");
        v.set_value(b"");
        assert_eq!(v.heap_bytes(), 2, "a value cleared leaves the bare layout");
    }
}

/// Values survive re-grants, prunes and handoffs, and never move to
/// another holder: the holding driven at random against a model of who
/// stores what.
#[cfg(test)]
mod properties {
    use std::collections::HashMap;

    use super::*;
    use crate::core::grant::{Kind, Mode};
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Op {
        /// `value`: 0 none (keep), 1 empty (clear), else that byte.
        Ask {
            owner: u8,
            value: u8,
            ttl: i64,
            waiting_ahead: bool,
        },
        Release(u8),
        Extend(u8, i64),
        Proclaim(u8, u8),
        Advance(i64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u8..5, 0u8..5, 1i64..3_000, any::<bool>())
                .prop_map(|(owner, value, ttl, waiting_ahead)| Op::Ask { owner, value, ttl, waiting_ahead }),
            2 => (0u8..5).prop_map(Op::Release),
            1 => (0u8..5, 1i64..3_000).prop_map(|(o, t)| Op::Extend(o, t)),
            1 => (0u8..5, 0u8..5).prop_map(|(o, v)| Op::Proclaim(o, v)),
            2 => (0i64..2_000).prop_map(Op::Advance),
        ]
    }

    fn value_bytes(owner: u8, value: u8) -> Vec<u8> {
        match value {
            1 => Vec::new(),
            v => vec![b'v', owner, v],
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        #[test]
        fn values_stay_with_their_holder(
            limit in prop_oneof![Just(None), (1u32..4).prop_map(Some)],
            ops in proptest::collection::vec(op(), 1..80),
        ) {
            let mut lock: Holding<ValuedOwner> = Holding { kind: Kind::of(limit), mode: Mode::Shared, holders: Vec::new() };
            // What each holder stores, by owner: the model.
            let mut model: HashMap<u8, Vec<u8>> = HashMap::new();
            let (mut now, mut counter) = (0i64, 0i64);
            for op in &ops {
                match *op {
                    Op::Ask { owner, value, ttl, waiting_ahead } => {
                        let req = Request { mode: Mode::Shared, limit, permits: 1, ttl_ms: ttl, fence: 0, session: None };
                        let asked = (value != 0).then(|| value_bytes(owner, value));
                        let issue = |min| {
                            counter = crate::core::token::next_token(counter, min)?;
                            Some(counter)
                        };
                        let me = ValuedOwner::from(&[owner][..]);
                        let outcome = lock.acquire_valued(&me, asked.as_deref(), &req, now, waiting_ahead, issue);
                        if let Outcome::Granted(_, how) = outcome {
                            match (how, asked) {
                                (_, Some(v)) => { model.insert(owner, v); }
                                (crate::core::grant::Grant::New, None) => { model.remove(&owner); }
                                (_, None) => {}
                            }
                        }
                        if lock.is_free() {
                            lock = Holding { kind: Kind::of(limit), mode: Mode::Shared, holders: Vec::new() };
                        }
                    }
                    Op::Release(owner) => {
                        if lock.release(&[owner][..], now) {
                            model.remove(&owner);
                        }
                    }
                    Op::Extend(owner, ttl) => {
                        lock.extend(&[owner][..], ttl, now);
                    }
                    Op::Proclaim(owner, value) => {
                        let v = value_bytes(owner, value);
                        if lock.proclaim(&[owner][..], &v, now).is_some() {
                            model.insert(owner, v);
                        }
                    }
                    Op::Advance(ms) => now += ms,
                }
                // Prunes (`expire`) drop ended holders, values included.
                lock.expire(now);
                model.retain(|o, _| lock.holder(&[*o][..]).is_some());
                for holder in &lock.holders {
                    let o = holder.owner[0];
                    let expected = model.get(&o).map_or(&[][..], |v| v.as_slice());
                    prop_assert_eq!(holder.owner.value(), expected, "owner {}", o);
                    // A value names its own holder: none ever moved.
                    if holder.owner.has_value() {
                        prop_assert_eq!(holder.owner.value().get(1), Some(&o));
                    }
                }
            }
        }
    }
}
