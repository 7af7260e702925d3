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

/// The fixed part of a lock allocation; the owner's bytes follow it, then
/// the value's (`LOCK.ACQUIRE ... VALUE`, `LOCK.PROCLAIM`), if any. The two
/// lengths share the word one length took before values existed, so a lock
/// without a value costs what it did.
#[repr(C)]
struct Header {
    token: Token,
    owner_len: u32,
    /// 0: no value.
    value_len: u32,
    lease: Lease,
    /// When the hold began (monotonic ms), for LOCK.INFO and INFO's
    /// hold times; a re-grant continues it.
    since: i64,
}

/// A lock value: token, owner and value in a single allocation, so a
/// grant costs one allocation and a held lock 16 bytes less than a token
/// plus a boxed owner. The data type stores it as a thin pointer.
pub struct Exclusive(NonNull<Header>);

impl Exclusive {
    fn layout(owner_len: u32, value_len: u32) -> Option<Layout> {
        let tail = usize::try_from(owner_len).ok()?.checked_add(usize::try_from(value_len).ok()?)?;
        let size = size_of::<Header>().checked_add(tail)?;
        Layout::from_size_align(size, align_of::<Header>()).ok()
    }

    /// A lock with `value` (empty: none). `None` only for an owner or a
    /// value too large to allocate (or beyond 4 GiB).
    pub fn with_value(owner: &[u8], value: &[u8], token: Token, lease: Lease, since: i64) -> Option<Exclusive> {
        let owner_len = u32::try_from(owner.len()).ok()?;
        let value_len = u32::try_from(value.len()).ok()?;
        let layout = Self::layout(owner_len, value_len)?;
        // SAFETY: the layout has a non-zero size (the header).
        let raw = unsafe { alloc(layout) }.cast::<Header>();
        let Some(header) = NonNull::new(raw) else {
            handle_alloc_error(layout);
        };
        // SAFETY: freshly allocated for a header plus `owner.len()` and
        // `value.len()` bytes.
        unsafe {
            header.as_ptr().write(Header { token, owner_len, value_len, lease, since });
            let tail = header.as_ptr().add(1).cast::<u8>();
            ptr::copy_nonoverlapping(owner.as_ptr(), tail, owner.len());
            ptr::copy_nonoverlapping(value.as_ptr(), tail.add(owner.len()), value.len());
        }
        crate::server::stats::LOCKS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Some(Exclusive(header))
    }

    pub fn token(&self) -> Token {
        // SAFETY: the header is initialised for the lock's whole life.
        unsafe { self.0.as_ref().token }
    }

    pub fn set_token(&mut self, token: Token) {
        // SAFETY: as above; `&mut self` makes the write exclusive.
        unsafe { self.0.as_mut().token = token }
    }

    pub fn lease(&self) -> Lease {
        // SAFETY: as above.
        unsafe { self.0.as_ref().lease }
    }

    pub fn set_lease(&mut self, lease: Lease) {
        // SAFETY: as above.
        unsafe { self.0.as_mut().lease = lease }
    }

    pub fn since(&self) -> i64 {
        // SAFETY: as above.
        unsafe { self.0.as_ref().since }
    }

    pub fn owner(&self) -> &[u8] {
        // SAFETY: `owner_len` bytes follow the header, written in `new`.
        unsafe {
            let len = self.0.as_ref().owner_len as usize;
            std::slice::from_raw_parts(self.0.as_ptr().add(1).cast::<u8>(), len)
        }
    }

    /// The value stored with the hold; empty when none.
    pub fn value(&self) -> &[u8] {
        // SAFETY: `value_len` bytes follow the owner's, written in
        // `with_value`.
        unsafe {
            let header = self.0.as_ref();
            let tail = self.0.as_ptr().add(1).cast::<u8>().add(header.owner_len as usize);
            std::slice::from_raw_parts(tail, header.value_len as usize)
        }
    }

    /// The same hold (token, lease, start) with another value.
    pub fn revalued(&self, value: &[u8]) -> Option<Exclusive> {
        Self::with_value(self.owner(), value, self.token(), self.lease(), self.since())
    }

    /// A copy of the whole lock (COPY).
    pub fn duplicate(&self) -> Option<Exclusive> {
        self.revalued(self.value())
    }

    /// What the allocation holds: the header, the owner and the value.
    pub fn bytes(&self) -> usize {
        size_of::<Header>() + self.owner().len() + self.value().len()
    }

    pub fn is_held_by(&self, owner: &[u8]) -> bool {
        self.owner() == owner
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
        // SAFETY: allocated in `new` with this very layout.
        unsafe {
            let header = self.0.as_ref();
            if let Some(layout) = Self::layout(header.owner_len, header.value_len) {
                dealloc(self.0.as_ptr().cast::<u8>(), layout);
            }
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

    #[test]
    fn a_lock_keeps_owner_and_token_in_one_allocation() {
        let mut lock = Exclusive::with_value(b"owner\0\xff", b"", 42, Lease::UNKNOWN, 0).expect("allocates");
        assert_eq!(lock.owner(), b"owner\0\xff");
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
        // Token, two lengths in one word, lease (two words), start.
        assert_eq!(size_of::<Header>(), 40);
        assert_eq!(plain.bytes(), 40 + 5);
        let valued = Exclusive::with_value(b"owner", b"host:1\0", 9, Lease::UNKNOWN, 3).expect("allocates");
        assert_eq!((valued.owner(), valued.value(), valued.token(), valued.since()), (&b"owner"[..], &b"host:1\0"[..], 9, 3));
        assert_eq!(valued.bytes(), 40 + 5 + 7);
        let again = valued.revalued(b"other").expect("allocates");
        assert_eq!((again.owner(), again.value(), again.token()), (&b"owner"[..], &b"other"[..], 9));
        assert_eq!(again.duplicate().expect("allocates").value(), b"other");
    }

    #[test]
    fn a_raw_value_round_trips_and_borrows_without_freeing() {
        let raw = Exclusive::with_value(b"me", b"", 7, Lease::UNKNOWN, 0).expect("allocates").into_raw();
        // SAFETY: `raw` came from `into_raw` just above.
        unsafe {
            Exclusive::borrow(raw).expect("non-null").set_token(8);
            let lock = Exclusive::from_raw(raw).expect("non-null");
            assert_eq!((lock.owner(), lock.token()), (&b"me"[..], 8));
        }
    }
}
