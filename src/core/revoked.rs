//! The memory of revoked holds (`LOCK.REVOKE`): which owner's hold was
//! taken away under which token, until that hold's lease would have ended,
//! so that its holder's `LOCK.EXTEND` can answer "revoked" instead of
//! "not held". Bounded: every insert first drops the entries whose lease
//! end has passed, and at `cap` entries the oldest insert is dropped.
//! Nothing here reads a clock: the caller passes `now` (monotonic ms).

use std::borrow::Borrow;
use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;

use super::token::Token;

/// What is remembered of one revoked hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    /// The token the revocation issued.
    token: Token,
    /// When the revoked hold's lease would have ended (monotonic ms).
    until: i64,
    /// Insert order, for dropping the oldest at the cap.
    seq: u64,
}

/// Revoked holds by `K` (a database, key and owner), each until its lease
/// would have ended.
#[derive(Debug)]
pub struct Revocations<K> {
    entries: HashMap<K, Entry>,
    /// Insert order: `seq` to the entry's key.
    order: BTreeMap<u64, K>,
    next_seq: u64,
    cap: usize,
}

impl<K: Hash + Eq + Clone> Revocations<K> {
    pub fn new(cap: usize) -> Self {
        Revocations { entries: HashMap::new(), order: BTreeMap::new(), next_seq: 0, cap }
    }

    /// Drops every entry whose lease end has passed at `now`.
    pub fn prune(&mut self, now: i64) {
        let before = self.entries.len();
        self.entries.retain(|_, e| e.until > now);
        if self.entries.len() != before {
            let entries = &self.entries;
            self.order.retain(|seq, k| entries.get(k).is_some_and(|e| e.seq == *seq));
        }
    }

    /// Remembers that `key`'s hold, whose lease would have ended at
    /// `until`, was revoked under `token` (replacing what was remembered
    /// of it). A lease already ended at `now` is not remembered. Call
    /// `prune` first (once for a batch).
    pub fn insert(&mut self, key: K, token: Token, until: i64, now: i64) {
        if until <= now || self.cap == 0 {
            return;
        }
        if let Some(old) = self.entries.get(&key) {
            self.order.remove(&old.seq);
        }
        while self.entries.len() >= self.cap && !self.entries.contains_key(&key) {
            let Some((_, oldest)) = self.order.pop_first() else { break };
            self.entries.remove(&oldest);
        }
        let seq = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(1);
        self.order.insert(seq, key.clone());
        self.entries.insert(key, Entry { token, until, seq });
    }

    /// The token `key`'s hold was revoked under, while its lease would
    /// still have run at `now`.
    pub fn revoked<Q>(&self, key: &Q, now: i64) -> Option<Token>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.entries.get(key).filter(|e| e.until > now).map(|e| e.token)
    }

    /// Forgets `key` (its owner holds the key again).
    pub fn forget<Q>(&mut self, key: &Q)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        if let Some(e) = self.entries.remove(key) {
            self.order.remove(&e.seq);
        }
    }

    /// Keeps only the entries `keep` says to.
    pub fn retain(&mut self, mut keep: impl FnMut(&K) -> bool) {
        self.entries.retain(|k, _| keep(k));
        let entries = &self.entries;
        self.order.retain(|seq, k| entries.get(k).is_some_and(|e| e.seq == *seq));
    }

    /// Takes every entry out, to put them back under new keys (SWAPDB).
    pub fn rekey(&mut self, mut rename: impl FnMut(K) -> K) {
        let entries = std::mem::take(&mut self.entries);
        self.order.clear();
        let mut all: Vec<(K, Entry)> = entries.into_iter().collect();
        all.sort_by_key(|(_, e)| e.seq);
        for (k, e) in all {
            let k = rename(k);
            self.order.insert(e.seq, k.clone());
            self.entries.insert(k, e);
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_revoked_hold_is_remembered_until_its_lease_would_have_ended() {
        let mut r = Revocations::new(10);
        r.insert("a", 7, 100, 0);
        assert_eq!(r.revoked("a", 99), Some(7));
        assert_eq!(r.revoked("a", 100), None);
        assert_eq!(r.revoked("b", 0), None);
    }

    #[test]
    fn an_ended_lease_is_not_remembered() {
        let mut r = Revocations::new(10);
        r.insert("a", 7, 100, 100);
        assert!(r.is_empty());
    }

    #[test]
    fn prune_drops_ended_entries() {
        let mut r = Revocations::new(10);
        r.insert("a", 1, 100, 0);
        r.insert("b", 2, 200, 0);
        r.prune(150);
        assert_eq!(r.len(), 1);
        assert_eq!(r.revoked("b", 150), Some(2));
    }

    #[test]
    fn at_the_cap_the_oldest_goes_first() {
        let mut r = Revocations::new(2);
        r.insert("a", 1, 100, 0);
        r.insert("b", 2, 100, 0);
        r.insert("c", 3, 100, 0);
        assert_eq!(r.len(), 2);
        assert_eq!(r.revoked("a", 0), None);
        assert_eq!(r.revoked("b", 0), Some(2));
        assert_eq!(r.revoked("c", 0), Some(3));
        // Replacing an entry makes it the newest, and drops nothing.
        r.insert("b", 4, 100, 0);
        r.insert("d", 5, 100, 0);
        assert_eq!(r.revoked("c", 0), None);
        assert_eq!(r.revoked("b", 0), Some(4));
    }

    #[test]
    fn forget_retain_and_rekey() {
        let mut r = Revocations::new(4);
        r.insert((0, "a"), 1, 100, 0);
        r.insert((1, "b"), 2, 100, 0);
        r.forget(&(0, "a"));
        assert_eq!(r.revoked(&(0, "a"), 0), None);
        r.insert((0, "c"), 3, 100, 0);
        r.rekey(|(db, k)| (1 - db, k));
        assert_eq!(r.revoked(&(0, "b"), 0), Some(2));
        assert_eq!(r.revoked(&(1, "c"), 0), Some(3));
        r.retain(|(db, _)| *db != 0);
        assert_eq!(r.len(), 1);
    }

    proptest! {
        /// Against a model: never more than the cap, and what is answered
        /// is the last token inserted for the key, while its lease runs,
        /// unless dropped by the cap (never a token that was not inserted
        /// for that key).
        #[test]
        fn bounded_and_answers_only_what_was_inserted(
            ops in prop::collection::vec((0u8..6, 1i64..1000, 0i64..50, any::<bool>()), 1..200),
            cap in 1usize..5,
        ) {
            let mut r = Revocations::new(cap);
            let mut model: HashMap<u8, (Token, i64)> = HashMap::new();
            let mut now = 0i64;
            for (key, token, ttl, prune) in ops {
                now += 1;
                if prune {
                    r.prune(now);
                }
                r.insert(key, token, now + ttl, now);
                if ttl > 0 {
                    model.insert(key, (token, now + ttl));
                }
                prop_assert!(r.len() <= cap);
                for k in 0u8..6 {
                    if let Some(t) = r.revoked(&k, now) {
                        let (mt, until) = model.get(&k).copied().unwrap_or((0, 0));
                        prop_assert_eq!(t, mt);
                        prop_assert!(until > now);
                    }
                }
                // The newest insert with a running lease is always there.
                if ttl > 0 {
                    prop_assert_eq!(r.revoked(&key, now), Some(token));
                }
            }
        }
    }
}
