//! A lock held shared: the readers of a read-write lock, or the holders
//! of a semaphore's permits. Who may join, wait or leave is `grant`'s
//! decision; this is the value Redis stores for such a key, and how its
//! holders' leases meet the key's TTL.
//!
//! Each holder's lease ends on the monotonic clock, as the exclusive
//! lock's does (see `lease`). The key's Redis TTL is the latest deadline
//! any holder has had while the key lived: it never shrinks, so the key
//! lives while any holder does and Redis reclaims it after the last. A key
//! whose holders have all gone is free, as an exclusive lock's key is
//! after a backward step.
//!
//! A TTL this module did not set (PEXPIRE, EXPIRE, a load that knows only
//! the TTL) caps every holder's lease: an operator can end shared holds
//! early, as on an exclusive lock, but a longer TTL lengthens none of them
//! (one TTL cannot say which holder it meant), and PERSIST lifts only the
//! cap. A master and its replicas apply the same rule to the same stream.
//!
//! Redis stores the value as a pointer with its lowest bit set, which an
//! exclusive lock's (8-byte aligned) never has: one data type, two shapes,
//! and the exclusive lock's hot path pays nothing for the other.

use std::ffi::c_void;
use std::mem::size_of;

use crate::core::grant::{self, Holder, Kind, Mode};
use crate::core::lease::{self, Lease, Now, NO_TTL};

/// The key's TTL is not known yet (a load): the first look adopts it.
const UNKNOWN_MIRROR: i64 = i64::MIN;

const TAG: usize = 1;

/// A holder's owner with the value its hold stores (`VALUE`).
pub type Owner = crate::core::valued::ValuedOwner;

pub struct Group {
    pub holding: grant::Holding<Owner>,
    /// The key's TTL as this module last set or saw it (Unix ms, or
    /// `NO_TTL`), or `UNKNOWN_MIRROR`.
    key_mirror: i64,
}

impl Group {
    pub fn new(kind: Kind) -> Group {
        crate::server::stats::LOCKS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Group { holding: grant::Holding { kind, mode: Mode::Shared, holders: Vec::new() }, key_mirror: NO_TTL }
    }

    /// A group loaded with its holders; the key's TTL comes after it.
    pub fn loaded(kind: Kind, holders: Vec<Holder<Owner>>) -> Group {
        let mut group = Group::new(kind);
        group.holding.holders = holders;
        group.key_mirror = UNKNOWN_MIRROR;
        group
    }

    /// 0 for a read-write lock held shared.
    pub fn limit(&self) -> u32 {
        match self.holding.kind {
            Kind::ReadWrite => 0,
            Kind::Semaphore { limit, .. } => limit,
        }
    }

    /// The largest limit in force since the group was created, when
    /// LOCK.RESIZE resized it (see `Kind::Semaphore`).
    pub fn resized_largest(&self) -> Option<u32> {
        match self.holding.kind {
            Kind::Semaphore { resized: true, largest, .. } => Some(largest),
            _ => None,
        }
    }

    pub fn kind_of_limit(limit: u32) -> Kind {
        Group::kind_of(limit, None)
    }

    /// The kind a stored limit (0: a read-write lock) and, for a resized
    /// semaphore, its largest limit make.
    pub fn kind_of(limit: u32, resized_largest: Option<u32>) -> Kind {
        match (limit, resized_largest) {
            (0, _) => Kind::ReadWrite,
            (limit, None) => Kind::Semaphore { limit, resized: false, largest: limit },
            (limit, Some(largest)) => Kind::Semaphore { limit, resized: true, largest: largest.max(limit) },
        }
    }

    /// Takes the key's TTL (`ttl`, Unix ms) into account: one this module
    /// did not set caps every holder's lease from now on.
    pub fn judge(&mut self, now: Now, ttl: Option<i64>) {
        let current = ttl.unwrap_or(NO_TTL);
        if self.key_mirror == UNKNOWN_MIRROR {
            self.key_mirror = current;
            return;
        }
        if current == self.key_mirror {
            return;
        }
        self.key_mirror = current;
        if ttl.is_some() {
            let cap = Lease::until(ttl, now).end;
            for holder in &mut self.holding.holders {
                holder.end = holder.end.min(cap);
            }
        }
    }

    /// The key's TTL as last set or seen (`NO_TTL` when unknown or none).
    pub fn key_mirror(&self) -> i64 {
        if self.key_mirror == UNKNOWN_MIRROR {
            NO_TTL
        } else {
            self.key_mirror
        }
    }

    /// Records the TTL this module just set on the key.
    pub fn mirrored(&mut self, key_deadline_ms: i64) {
        self.key_mirror = key_deadline_ms;
    }

    /// Any holder whose lease runs at `now`.
    pub fn is_held(&self, now: Now) -> bool {
        self.holding.holders.iter().any(|h| h.end > now.mono)
    }

    pub fn live(&self, now: Now) -> impl Iterator<Item = &Holder<Owner>> {
        self.holding.holders.iter().filter(move |h| h.end > now.mono)
    }

    /// When the first running lease ends (monotonic ms): the earliest time
    /// the line may move without a command.
    pub fn earliest_end(&self, now: Now) -> Option<i64> {
        self.live(now).map(|h| h.end).min()
    }

    pub fn latest_end(&self, now: Now) -> Option<i64> {
        self.live(now).map(|h| h.end).max()
    }

    /// The key's TTL after a change: the latest holder's deadline, never
    /// earlier than the TTL the key had. `NO_TTL` only while a holder has
    /// no end.
    pub fn key_deadline(&self, now: Now) -> i64 {
        let mut deadline = if self.key_mirror > 0 { self.key_mirror } else { 0 };
        for holder in self.live(now) {
            match lease::wall_deadline(holder.end, now) {
                NO_TTL => return NO_TTL,
                at => deadline = deadline.max(at),
            }
        }
        deadline
    }

    /// What MEMORY USAGE should count for the value itself.
    pub fn bytes(&self) -> usize {
        size_of::<Group>()
            + self.holding.holders.capacity() * size_of::<Holder<Owner>>()
            + self.holding.holders.iter().map(|h| h.owner.heap_bytes()).sum::<usize>()
    }

    pub fn duplicate(&self) -> Group {
        let mut copy = Group::new(self.holding.kind);
        copy.holding.holders = self.holding.holders.clone();
        copy.key_mirror = self.key_mirror;
        copy
    }

    /// Hands the group to Redis as a module value (tagged, see above).
    pub fn into_raw(self: Box<Group>) -> *mut c_void {
        Box::into_raw(self).map_addr(|a| a | TAG).cast::<c_void>()
    }

    pub fn is_tagged(value: *const c_void) -> bool {
        value.addr() & TAG != 0
    }

    /// Takes back a value made by `into_raw`; `None` for any other value.
    ///
    /// # Safety
    /// A tagged `value` must come from `into_raw` and be owned by nobody else.
    pub unsafe fn from_raw(value: *mut c_void) -> Option<Box<Group>> {
        if !Self::is_tagged(value) {
            return None;
        }
        let raw = value.map_addr(|a| a & !TAG).cast::<Group>();
        (!raw.is_null()).then(|| Box::from_raw(raw))
    }

    /// Borrows a value Redis owns; `None` unless it is a group.
    ///
    /// # Safety
    /// A tagged `value` must be a group stored by this module's type and
    /// outlive `'a`, with no other reference to it.
    pub unsafe fn borrow<'a>(value: *mut c_void) -> Option<&'a mut Group> {
        if !Self::is_tagged(value) {
            return None;
        }
        value.map_addr(|a| a & !TAG).cast::<Group>().as_mut()
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        crate::server::stats::LOCKS.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: Now = Now { wall: 1_700_000_000_000, mono: 5_000 };

    fn holder(owner: &str, token: i64, end: i64) -> Holder<Owner> {
        Holder { owner: owner.as_bytes().into(), token, end, since: 0, permits: 1 }
    }

    #[test]
    fn a_foreign_ttl_caps_every_holder_and_never_lengthens_one() {
        let mut g = Group::new(Kind::ReadWrite);
        g.holding.holders = vec![holder("a", 1, T0.mono + 1_000), holder("b", 2, T0.mono + 9_000)];
        g.mirrored(T0.wall + 9_000);
        g.judge(T0, Some(T0.wall + 9_000));
        assert_eq!(g.earliest_end(T0), Some(T0.mono + 1_000), "its own TTL changes nothing");
        g.judge(T0, Some(T0.wall + 60_000));
        assert_eq!(g.latest_end(T0), Some(T0.mono + 9_000), "a longer TTL lengthens nobody");
        g.judge(T0, Some(T0.wall + 500));
        assert_eq!((g.earliest_end(T0), g.latest_end(T0)), (Some(T0.mono + 500), Some(T0.mono + 500)));
        g.judge(T0, None);
        assert_eq!(g.latest_end(T0), Some(T0.mono + 500), "PERSIST lifts the cap only");
    }

    #[test]
    fn a_loaded_group_adopts_the_ttl_it_is_loaded_with() {
        let mut g = Group::loaded(Kind::Semaphore { limit: 3, resized: false, largest: 3 }, vec![holder("a", 1, T0.mono + 1_000)]);
        g.judge(T0, Some(T0.wall + 5_000));
        assert_eq!(g.latest_end(T0), Some(T0.mono + 1_000));
        assert_eq!(g.key_deadline(T0), T0.wall + 5_000, "the key's TTL never shrinks");
    }

    #[test]
    fn the_key_lives_until_the_latest_holder_and_is_free_after_all() {
        let mut g = Group::new(Kind::ReadWrite);
        g.holding.holders = vec![holder("a", 1, T0.mono + 1_000), holder("b", 2, T0.mono + 3_000)];
        assert_eq!(g.key_deadline(T0), T0.wall + 3_000);
        let later = Now { wall: T0.wall + 3_000, mono: T0.mono + 3_000 };
        assert!(g.is_held(T0) && !g.is_held(later));
    }

    #[test]
    fn a_group_round_trips_through_a_tagged_pointer() {
        let raw = Box::new(Group::new(Kind::Semaphore { limit: 2, resized: false, largest: 2 })).into_raw();
        assert!(Group::is_tagged(raw));
        // SAFETY: `raw` came from `into_raw` just above.
        unsafe {
            assert_eq!(Group::borrow(raw).expect("a group").limit(), 2);
            drop(Group::from_raw(raw).expect("a group"));
        }
    }
}
