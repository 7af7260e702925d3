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

/// The fixed part of a lock allocation; the owner's bytes follow it.
#[repr(C)]
struct Header {
    token: Token,
    owner_len: usize,
    lease: Lease,
    /// When the hold began (monotonic ms), for LOCK.INFO and INFO's
    /// hold times; a re-grant continues it.
    since: i64,
}

/// A lock value: token and owner in a single allocation, so a grant costs
/// one allocation and a held lock 16 bytes less than a token plus a boxed
/// owner. The data type stores it as a thin pointer.
pub struct Exclusive(NonNull<Header>);

impl Exclusive {
    fn layout(owner_len: usize) -> Option<Layout> {
        let size = size_of::<Header>().checked_add(owner_len)?;
        Layout::from_size_align(size, align_of::<Header>()).ok()
    }

    /// `None` only for an owner too large to allocate.
    pub fn new(owner: &[u8], token: Token, lease: Lease, since: i64) -> Option<Exclusive> {
        let layout = Self::layout(owner.len())?;
        // SAFETY: the layout has a non-zero size (the header).
        let raw = unsafe { alloc(layout) }.cast::<Header>();
        let Some(header) = NonNull::new(raw) else {
            handle_alloc_error(layout);
        };
        // SAFETY: freshly allocated for a header plus `owner.len()` bytes.
        unsafe {
            header.as_ptr().write(Header { token, owner_len: owner.len(), lease, since });
            ptr::copy_nonoverlapping(owner.as_ptr(), header.as_ptr().add(1).cast::<u8>(), owner.len());
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
            let len = self.0.as_ref().owner_len;
            std::slice::from_raw_parts(self.0.as_ptr().add(1).cast::<u8>(), len)
        }
    }

    /// What the allocation holds: the header and the owner.
    pub fn bytes(&self) -> usize {
        size_of::<Header>() + self.owner().len()
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
            if let Some(layout) = Self::layout(self.0.as_ref().owner_len) {
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
        let mut lock = Exclusive::new(b"owner\0\xff", 42, Lease::UNKNOWN, 0).expect("allocates");
        assert_eq!(lock.owner(), b"owner\0\xff");
        assert_eq!(lock.token(), 42);
        lock.set_token(43);
        assert_eq!(lock.token(), 43);
        assert!(lock.is_held_by(b"owner\0\xff"));
        assert!(!lock.is_held_by(b"owner\0"));
    }

    #[test]
    fn a_raw_value_round_trips_and_borrows_without_freeing() {
        let raw = Exclusive::new(b"me", 7, Lease::UNKNOWN, 0).expect("allocates").into_raw();
        // SAFETY: `raw` came from `into_raw` just above.
        unsafe {
            Exclusive::borrow(raw).expect("non-null").set_token(8);
            let lock = Exclusive::from_raw(raw).expect("non-null");
            assert_eq!((lock.owner(), lock.token()), (&b"me"[..], 8));
        }
    }
}
