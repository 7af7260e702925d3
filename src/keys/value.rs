//! The values the lock data type stores: an exclusive lock (`Exclusive`,
//! here) or a lock held shared (`Group`, in `group`), and how the glue
//! reads, stores and deletes them at an open key. The data type's
//! callbacks (RDB, AOF, memory, copy, digest, unlink) are the edge's
//! (`edge::datatype`).
//!
//! An exclusive value carries its lease on the monotonic clock beside the
//! key's Redis TTL (see `core::lease`): the TTL is what persistence,
//! replication and PTTL see, the monotonic end is what decides.

use std::alloc::{alloc, dealloc, handle_alloc_error, Layout};
use std::ffi::c_void;
use std::marker::PhantomData;
use std::mem::{align_of, size_of, ManuallyDrop};
use std::ops::{Deref, DerefMut};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};

use crate::api::{self, Key, RedisModuleType};
use crate::core::lease::{self, Lease, Now};
use crate::core::token::Token;
use crate::keys::group::Group;
pub use crate::keys::packing::OwnerBytes;
use crate::keys::packing::{decode_mirror, encode_mirror, hex_bytes, hex_digits, Meta, HEX, HEX_OWNER_MAX, VALUE_SHIFT, WIDE, WIDE_PREFIX};

/// The fixed part of a lock allocation, 28 bytes; the owner's bytes
/// follow it, then the value's (`LOCK.ACQUIRE ... VALUE`,
/// `LOCK.PROCLAIM`), if any. 28 and not 40 so that a lock with an owner of
/// up to 20 bytes fits the allocator's 48-byte class (the 40-byte header
/// took it to 64): the lease's mirror is kept as a 32-bit distance
/// (`encode_mirror`), and the start and both lengths share one word
/// (`Meta`). A lock whose start or lengths do not fit that word (`WIDE`)
/// keeps them in full in 16 bytes before the owner. An owner in lowercase
/// hex (what the quorum client and the bindings send: 40 digits) is kept
/// as the bytes it spells, half its length (`HEX`), so that one fits the
/// 48-byte class too.
#[repr(C, packed(4))]
struct Header {
    token: Token,
    /// The lease's end (monotonic ms, `lease::NO_END`, `lease::UNKNOWN`).
    end: i64,
    /// The lease's mirror (`encode_mirror`).
    mirror: i32,
    /// When the hold began, the owner's and the value's length (`Meta`).
    meta: u64,
}

/// A lock value: token, owner and value in a single allocation, so a
/// grant costs one allocation and a held lock 16 bytes less than a token
/// plus a boxed owner. The data type stores it as a thin pointer.
pub struct Exclusive(NonNull<Header>);

impl Exclusive {
    fn layout(prefix: usize, owner_len: usize, value_len: usize) -> Option<Layout> {
        let size = size_of::<Header>().checked_add(prefix)?.checked_add(owner_len)?.checked_add(value_len)?;
        Layout::from_size_align(size, align_of::<Header>()).ok()
    }

    /// A lock with `value` (empty: none). `None` only for an owner or a
    /// value too large to allocate (or beyond 4 GiB).
    pub fn with_value(owner: &[u8], value: &[u8], token: Token, lease: Lease, since: i64) -> Option<Exclusive> {
        let mut spelled = [0u8; HEX_OWNER_MAX / 2];
        let (owner, hex) = match hex_bytes(owner, &mut spelled) {
            Some(bytes) => (bytes, HEX),
            None => (owner, 0),
        };
        let meta = Meta { owner_len: owner.len(), value_len: value.len(), since };
        let (word, prefix) = match meta.packed() {
            Some(word) => (word, None),
            None => (WIDE << VALUE_SHIFT, Some(meta.wide_prefix()?)),
        };
        let prefix_len = prefix.map_or(0, |p| p.len());
        let layout = Self::layout(prefix_len, owner.len(), value.len())?;
        // SAFETY: the layout has a non-zero size (the header).
        let raw = unsafe { alloc(layout) }.cast::<Header>();
        let Some(header) = NonNull::new(raw) else {
            handle_alloc_error(layout);
        };
        let mirror = encode_mirror(lease);
        // SAFETY: freshly allocated for a header plus `prefix_len`,
        // `owner.len()` and `value.len()` bytes; the header's alignment is
        // the layout's.
        unsafe {
            header.as_ptr().write(Header { token, end: lease.end, mirror, meta: word | hex });
            let tail = header.as_ptr().add(1).cast::<u8>();
            if let Some(prefix) = prefix {
                ptr::copy_nonoverlapping(prefix.as_ptr(), tail, prefix_len);
            }
            let owner_at = tail.add(prefix_len);
            ptr::copy_nonoverlapping(owner.as_ptr(), owner_at, owner.len());
            ptr::copy_nonoverlapping(value.as_ptr(), owner_at.add(owner.len()), value.len());
        }
        crate::server::stats::LOCKS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Some(Exclusive(header))
    }

    fn header(&self) -> &Header {
        // SAFETY: the header is initialised for the lock's whole life.
        unsafe { self.0.as_ref() }
    }

    fn header_mut(&mut self) -> &mut Header {
        // SAFETY: as above; `&mut self` makes the access exclusive.
        unsafe { self.0.as_mut() }
    }

    /// The start and both lengths, from the header or the wide prefix.
    fn meta(&self) -> Meta {
        let word = self.header().meta;
        Meta::unpacked(word).unwrap_or_else(|| {
            let mut prefix = [0u8; WIDE_PREFIX];
            // SAFETY: a wide lock was allocated with the prefix right after
            // the header, written in `with_value`; bytes have no alignment.
            unsafe { ptr::copy_nonoverlapping(self.0.as_ptr().add(1).cast::<u8>(), prefix.as_mut_ptr(), WIDE_PREFIX) };
            Meta::from_wide_prefix(prefix)
        })
    }

    /// Where the owner's bytes begin.
    fn owner_ptr(&self) -> *const u8 {
        // SAFETY: within the allocation: the prefix (if any) follows the
        // header, the owner follows it.
        unsafe { self.0.as_ptr().add(1).cast::<u8>().add(Meta::prefix_len(self.header().meta)) }
    }

    pub fn token(&self) -> Token {
        self.header().token
    }

    pub fn set_token(&mut self, token: Token) {
        self.header_mut().token = token;
    }

    pub fn lease(&self) -> Lease {
        let header = self.header();
        let end = header.end;
        Lease { end, mirror: decode_mirror(end, header.mirror) }
    }

    pub fn set_lease(&mut self, lease: Lease) {
        let mirror = encode_mirror(lease);
        let header = self.header_mut();
        header.end = lease.end;
        header.mirror = mirror;
    }

    pub fn since(&self) -> i64 {
        self.meta().since
    }

    /// The owner's bytes as stored: spelled by its hex digits when `HEX`.
    fn stored_owner(&self) -> &[u8] {
        let len = self.meta().owner_len;
        // SAFETY: `owner_len` bytes at `owner_ptr`, written in `with_value`.
        unsafe { std::slice::from_raw_parts(self.owner_ptr(), len) }
    }

    fn owner_is_hex(&self) -> bool {
        self.header().meta & HEX != 0
    }

    /// The owner as it was given (a hex one spelled out again on the stack).
    pub fn owner(&self) -> OwnerBytes<'_> {
        let stored = self.stored_owner();
        if !self.owner_is_hex() {
            return OwnerBytes::Stored(stored);
        }
        let mut digits = [0u8; HEX_OWNER_MAX];
        for (pair, byte) in digits.chunks_exact_mut(2).zip(stored) {
            pair.copy_from_slice(&hex_digits(*byte));
        }
        OwnerBytes::Spelled(digits, stored.len() * 2)
    }

    /// The value stored with the hold; empty when none.
    pub fn value(&self) -> &[u8] {
        let meta = self.meta();
        // SAFETY: `value_len` bytes follow the owner's, written in
        // `with_value`.
        unsafe { std::slice::from_raw_parts(self.owner_ptr().add(meta.owner_len), meta.value_len) }
    }

    /// The same hold (token, lease, start) with another value.
    pub fn revalued(&self, value: &[u8]) -> Option<Exclusive> {
        Self::with_value(&self.owner(), value, self.token(), self.lease(), self.since())
    }

    /// A copy of the whole lock (COPY).
    pub fn duplicate(&self) -> Option<Exclusive> {
        self.revalued(self.value())
    }

    /// What the allocation holds: the header, the wide prefix (if any),
    /// the owner and the value.
    pub fn bytes(&self) -> usize {
        let meta = self.meta();
        size_of::<Header>() + Meta::prefix_len(self.header().meta) + meta.owner_len + meta.value_len
    }

    pub fn is_held_by(&self, owner: &[u8]) -> bool {
        let stored = self.stored_owner();
        if !self.owner_is_hex() {
            return stored == owner;
        }
        owner.len() == stored.len() * 2 && owner.chunks_exact(2).zip(stored).all(|(pair, byte)| pair == hex_digits(*byte))
    }

    /// Hands the allocation to Redis as a module value.
    pub fn into_raw(self) -> *mut c_void {
        let raw = self.0.as_ptr().cast::<c_void>();
        std::mem::forget(self);
        raw
    }

    /// Takes back a value made by `into_raw`.
    ///
    /// # Safety
    /// `value` must come from `into_raw` and not be owned by anyone else.
    pub unsafe fn from_raw(value: *mut c_void) -> Option<Exclusive> {
        if Group::is_tagged(value) {
            return None;
        }
        NonNull::new(value.cast::<Header>()).map(Exclusive)
    }

    /// Borrows a value owned by Redis.
    ///
    /// # Safety
    /// `value` must be a lock stored by this module's type and outlive `'a`.
    pub unsafe fn borrow<'a>(value: *mut c_void) -> Option<ExclusiveRef<'a>> {
        Self::from_raw(value).map(|lock| ExclusiveRef(ManuallyDrop::new(lock), PhantomData))
    }
}

impl Drop for Exclusive {
    fn drop(&mut self) {
        crate::server::stats::LOCKS.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        let meta = self.meta();
        if let Some(layout) = Self::layout(Meta::prefix_len(self.header().meta), meta.owner_len, meta.value_len) {
            // SAFETY: allocated in `with_value` with this very layout.
            unsafe { dealloc(self.0.as_ptr().cast::<u8>(), layout) };
        }
    }
}

/// A lock that Redis owns, borrowed for the length of a callback.
pub struct ExclusiveRef<'a>(ManuallyDrop<Exclusive>, PhantomData<&'a mut Exclusive>);

impl Deref for ExclusiveRef<'_> {
    type Target = Exclusive;
    fn deref(&self) -> &Exclusive {
        &self.0
    }
}

impl DerefMut for ExclusiveRef<'_> {
    fn deref_mut(&mut self) -> &mut Exclusive {
        &mut self.0
    }
}

/// The lock stored at an open key; `None` for any other value.
pub fn at(key: &Key) -> Option<ExclusiveRef<'_>> {
    if key.kind() != api::KeyKind::Module(registered_type()) {
        return None;
    }
    // SAFETY: the value belongs to our type, so it is an `Exclusive` or
    // a tagged `Group` (`borrow` answers `None` for a group), owned by the
    // key for as long as it is open.
    unsafe { Exclusive::borrow(key.module_value()) }
}

/// The group stored at an open key (a lock held shared). Redis owns the
/// value for as long as the key is open; the key API lends it through a
/// shared handle, as it does the exclusive lock's (`at`).
#[allow(clippy::mut_from_ref)]
pub fn group_at(key: &Key) -> Option<&mut Group> {
    if key.kind() != api::KeyKind::Module(registered_type()) {
        return None;
    }
    // SAFETY: the value belongs to our type; a tagged one is a `Group`,
    // owned by the key for as long as it is open.
    unsafe { Group::borrow(key.module_value()) }
}

/// Stores a group at an open key, replacing what it held (and its TTL).
pub fn store_group(key: &Key, group: Group) -> bool {
    let value = Box::new(group).into_raw();
    let _own = OwnRemoval::begin();
    // SAFETY: `value` is a tagged `Group` and the type is ours.
    if unsafe { key.set_module_value(registered_type(), value) } {
        return true;
    }
    // SAFETY: Redis did not take the value; it is still ours.
    drop(unsafe { Group::from_raw(value) });
    false
}

/// Replaces the lock at an open key with `lock` (the same hold with
/// another value), keeping the key and its TTL: nothing is unlinked, so
/// nobody waiting or rescuing sees the key leave. False when the key holds
/// no lock of this type, which leaves it as it was.
pub fn replace(key: &Key, lock: Exclusive) -> bool {
    let value = lock.into_raw();
    // SAFETY: `value` is an untagged `Exclusive` and the type is ours.
    match unsafe { key.replace_module_value(registered_type(), value) } {
        Some(old) => {
            // SAFETY: Redis handed the old value back to us; it was a lock
            // of ours (the caller found one at the key).
            unsafe {
                if Group::is_tagged(old) {
                    drop(Group::from_raw(old));
                } else {
                    drop(Exclusive::from_raw(old));
                }
            }
            true
        }
        None => {
            // SAFETY: Redis did not take the value; it is still ours.
            drop(unsafe { Exclusive::from_raw(value) });
            false
        }
    }
}

/// Stores `lock` at an open key, replacing what it held (and its TTL).
/// The value it replaces leaves by this module's decision, not as a lock
/// lost while its lease ran (see `rescue`).
pub fn store(key: &Key, lock: Exclusive) -> bool {
    let value = lock.into_raw();
    let _own = OwnRemoval::begin();
    // SAFETY: `value` is an untagged `Exclusive` and the type is ours.
    if unsafe { key.set_module_value(registered_type(), value) } {
        return true;
    }
    // SAFETY: Redis did not take the value; it is still ours.
    drop(unsafe { Exclusive::from_raw(value) });
    false
}

/// The registered type, copied out of the edge's `LOCK_TYPE` once at load
/// so the hot path compares a plain pointer.
static REGISTERED: AtomicPtr<RedisModuleType> = AtomicPtr::new(ptr::null_mut());

/// At load: the data type Redis registered; false if it did not.
pub fn remember_registered_type(registered: *mut RedisModuleType) -> bool {
    REGISTERED.store(registered, Ordering::Relaxed);
    !registered.is_null()
}

pub fn registered_type() -> *mut RedisModuleType {
    REGISTERED.load(Ordering::Relaxed)
}

/// Deletes an open lock key by this module's decision (a release).
pub fn delete(key: &Key) -> bool {
    let _own = OwnRemoval::begin();
    key.delete()
}

/// Set while this module itself deletes or overwrites a lock.
static OWN_REMOVALS: AtomicU32 = AtomicU32::new(0);

/// Marks a deletion or overwrite as this module's own (a release, a grant
/// over an ended lease, a replayed LOCK.APPLY) for as long as it lives:
/// the lock leaves by decision, not as one lost while its lease ran (see
/// `rescue`).
pub struct OwnRemoval;

impl OwnRemoval {
    pub fn begin() -> OwnRemoval {
        OWN_REMOVALS.fetch_add(1, Ordering::Relaxed);
        OwnRemoval
    }

    /// Whether the module is removing a lock of its own now.
    pub fn in_progress() -> bool {
        OWN_REMOVALS.load(Ordering::Relaxed) != 0
    }
}

impl Drop for OwnRemoval {
    fn drop(&mut self) {
        OWN_REMOVALS.fetch_sub(1, Ordering::Relaxed);
    }
}

/// After a load (RDB, AOF with an RDB preamble, a replica's full sync):
/// a loaded lock knows its lease only as the key's TTL, which Redis sets
/// beside the value. Each one's lease is read from that TTL now, as the
/// wall clock of the writer meant it, so a clock step or an eviction
/// before anyone touches the lock finds it running (see `rescue`). One pass
/// over the keyspace, once per load.
pub fn learn_loaded_leases(ctx: api::Ctx) {
    let selected = ctx.selected_db();
    let now = crate::server::clock::now();
    for db in 0..ctx.databases() {
        if !ctx.select_db(db) {
            continue;
        }
        if !api::scan_keys(ctx, |_, key| learn_lease(key, now)) {
            break;
        }
    }
    ctx.select_db(selected);
}

/// Reads the lease of a loaded lock from its key's TTL (the scan's key
/// handle, read-only).
fn learn_lease(key: &Key, now: Now) {
    if let Some(mut lock) = at(key) {
        if lock.lease().end == lease::UNKNOWN {
            lock.set_lease(Lease::until(key.deadline_ms(), now));
        }
    } else if let Some(group) = group_at(key) {
        group.judge(now, key.deadline_ms());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::packing::{CLOCK_ANCHOR, OFF_SCALE};

    #[test]
    fn a_lock_keeps_owner_and_token_in_one_allocation() {
        let mut lock = Exclusive::with_value(b"owner\0\xff", b"", 42, Lease::UNKNOWN, 0).expect("allocates");
        assert_eq!(&*lock.owner(), b"owner\0\xff");
        assert_eq!(lock.token(), 42);
        lock.set_token(43);
        assert_eq!(lock.token(), 43);
        assert!(lock.is_held_by(b"owner\0\xff"));
        assert!(!lock.is_held_by(b"owner\0"));
        assert_eq!(lock.value(), b"");
    }

    #[test]
    fn a_value_follows_the_owner_and_a_lock_without_one_costs_what_it_did() {
        let plain = Exclusive::with_value(b"owner", b"", 1, Lease::UNKNOWN, 0).expect("allocates");
        // Token, lease end, mirror distance, and start with both lengths
        // in one word: a 20-byte owner fits the allocator's 48-byte class.
        assert_eq!((size_of::<Header>(), align_of::<Header>()), (28, 4));
        assert_eq!(plain.bytes(), 28 + 5);
        let valued = Exclusive::with_value(b"owner", b"host:1\0", 9, Lease::UNKNOWN, 3).expect("allocates");
        assert_eq!((&*valued.owner(), valued.value(), valued.token(), valued.since()), (&b"owner"[..], &b"host:1\0"[..], 9, 3));
        assert_eq!(valued.bytes(), 28 + 5 + 7);
        let again = valued.revalued(b"other").expect("allocates");
        assert_eq!((&*again.owner(), again.value(), again.token()), (&b"owner"[..], &b"other"[..], 9));
        assert_eq!(again.duplicate().expect("allocates").value(), b"other");
    }

    #[test]
    fn what_the_packed_word_cannot_hold_goes_to_the_wide_prefix() {
        let long_owner = vec![b'o'; 1 << 15];
        let long_value = vec![b'v'; 255];
        let cases: [(&[u8], &[u8], i64); 6] = [
            (b"me", b"", (1 << 40) - 1),
            (b"me", b"", 1 << 40),
            (b"me", b"", -1),
            (&long_owner[..(1 << 15) - 1], &long_value[..254], 7),
            (&long_owner, b"", 7),
            (b"me", &long_value, i64::MAX),
        ];
        for (i, (owner, value, since)) in cases.into_iter().enumerate() {
            let lease = Lease { end: 5_000 + i as i64, mirror: lease::NO_TTL };
            let lock = Exclusive::with_value(owner, value, 40 + i as i64, lease, since).expect("allocates");
            let wide = if i < 1 || i == 3 { 0 } else { WIDE_PREFIX };
            assert_eq!((&*lock.owner(), lock.value(), lock.since()), (owner, value, since), "case {i}");
            assert_eq!((lock.token(), lock.lease()), (40 + i as i64, lease), "case {i}");
            assert_eq!(lock.bytes(), 28 + wide + owner.len() + value.len(), "case {i}");
            let copy = lock.duplicate().expect("allocates");
            assert_eq!((&*copy.owner(), copy.value(), copy.since(), copy.lease()), (owner, value, since, lease), "case {i}");
        }
    }

    #[test]
    fn a_lowercase_hex_owner_is_kept_as_the_bytes_it_spells() {
        let client = b"5f0c3a9e4b7d21f86a0e9c3d7b1f4a2e6c8d0b13";
        let lock = Exclusive::with_value(client, b"v", 3, Lease::UNKNOWN, 11).expect("allocates");
        assert_eq!((&*lock.owner(), lock.value(), lock.since()), (&client[..], &b"v"[..], 11));
        assert_eq!(lock.bytes(), 28 + 20 + 1, "a 40-digit owner fits the 48-byte class");
        assert!(lock.is_held_by(client));
        for other in [&b"5F0C3A9E4B7D21F86A0E9C3D7B1F4A2E6C8D0B13"[..], &client[..38], b"5f0c3a9e4b7d21f86a0e9c3d7b1f4a2e6c8d0b14", b""] {
            assert!(!lock.is_held_by(other), "{}", String::from_utf8_lossy(other));
        }
        assert_eq!(&*lock.duplicate().expect("allocates").owner(), &client[..]);
        // Anything else is kept as given: uppercase, odd length, other
        // bytes, too long; and the longest hex owner kept spelled.
        let longest = [b'e'; HEX_OWNER_MAX];
        let too_long = [b'e'; HEX_OWNER_MAX + 2];
        for (owner, stored) in [
            (&b"ABCD"[..], 4),
            (b"abc", 3),
            (b"ab-d", 4),
            (b"0g", 2),
            (b"00", 1),
            (&longest[..], HEX_OWNER_MAX / 2),
            (&too_long[..], HEX_OWNER_MAX + 2),
        ] {
            let lock = Exclusive::with_value(owner, b"", 1, Lease::UNKNOWN, 0).expect("allocates");
            assert_eq!(&*lock.owner(), owner);
            assert_eq!(lock.bytes(), 28 + stored, "{}", String::from_utf8_lossy(owner));
            assert!(lock.is_held_by(owner));
        }
    }

    #[test]
    fn a_lease_reads_back_as_stored_within_24_days_of_clock_moves() {
        let mut lock = Exclusive::with_value(b"me", b"", 1, Lease::UNKNOWN, 0).expect("allocates");
        assert_eq!(lock.lease(), Lease::UNKNOWN);
        for lease in [Lease { end: lease::NO_END, mirror: lease::NO_TTL }, Lease { end: 9, mirror: lease::NO_TTL }] {
            lock.set_lease(lease);
            assert_eq!(lock.lease(), lease);
        }
        // Whichever test anchors first, leases near the anchor read back
        // exactly, and the end alone moves the mirror with it.
        lock.set_lease(Lease { end: 1_000, mirror: 1_700_000_001_000 });
        let anchor = CLOCK_ANCHOR.load(Ordering::Relaxed);
        let day = 86_400_000;
        for (end, moved) in [(0, 0), (30_000, 1), (-5, -1), (1 << 41, 24 * day), (77, -24 * day), (i64::MAX / 2, 0)] {
            let lease = Lease { end, mirror: end + anchor + moved };
            lock.set_lease(lease);
            assert_eq!(lock.lease(), lease, "end {end}, clocks moved {moved}");
        }
        for (end, moved) in [(10, 25 * day), (10, -25 * day), (lease::NO_END, 0), (lease::UNKNOWN, 0)] {
            lock.set_lease(Lease { end, mirror: end.saturating_add(anchor).saturating_add(moved) });
            assert_eq!(lock.lease(), Lease { end, mirror: OFF_SCALE });
        }
        // Off the scale: never the key's TTL, so the TTL decides; never a
        // step's removal.
        let now = lease::Now { wall: 1_700_000_000_000, mono: 0 };
        lock.set_lease(Lease { end: 30_000, mirror: now.wall + 30_000 + 25 * day });
        assert_eq!(lease::judge(lock.lease(), now, || Some(now.wall + 500)).0, lease::Left::Ms(500));
        assert!(!lease::removed_by_step(lock.lease(), lease::Now { wall: i64::MAX / 2, mono: 0 }));
    }

    #[test]
    fn a_raw_value_round_trips_and_borrows_without_freeing() {
        let raw = Exclusive::with_value(b"me", b"", 7, Lease::UNKNOWN, 0).expect("allocates").into_raw();
        // SAFETY: `raw` came from `into_raw` just above.
        unsafe {
            Exclusive::borrow(raw).expect("non-null").set_token(8);
            let lock = Exclusive::from_raw(raw).expect("non-null");
            assert_eq!((&*lock.owner(), lock.token()), (&b"me"[..], 8));
        }
    }
}
