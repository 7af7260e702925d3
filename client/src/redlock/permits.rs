//! The keys of a quorum semaphore's permits and what one hold of them
//! takes: below both the waiting line (`line`, which waits in the
//! permits' lines) and the semaphore (`crate::semaphore`, which asks for
//! them), so that the line never calls up into the semaphore. Why a permit
//! is a lock of its own and what the limit record is: see the semaphore's
//! module doc.

use super::Lock;
use crate::resources::Resources;
use crate::settings::Mode;
use crate::transport::{Ask, Share};

/// The most permits one semaphore may have: each is a key on every
/// instance and, when all are taken, a quorum round per attempt.
pub const MAX_PERMITS: u32 = 1024;

/// The key of permit `slot` of semaphore `resource`.
pub fn permit_key(resource: &str, slot: u32) -> String {
    format!("{resource}:permit:{slot}")
}

/// The key of semaphore `resource`'s limit record (see the semaphore's
/// module doc).
pub fn limit_key(resource: &str) -> String {
    format!("{resource}:permits")
}

/// The `count` consecutive permits of `resource` from permit `first` on
/// (wrapping at `limit`), the keys whose lines a hold of them waits in.
pub(crate) fn permit_set(resource: &str, limit: u32, count: u32, first: u32) -> Result<Resources, String> {
    let limit = limit.max(1);
    let slots: Vec<String> = (0..count).map(|k| permit_key(resource, first.wrapping_add(k) % limit)).collect();
    Resources::of(&slots)
}

/// What one hold of permits takes: its slots (`slots`, see `permit_set`)
/// and, in module mode, the semaphore's limit record, the last key (see
/// the semaphore's module doc); and how it asks for them.
pub(crate) struct PermitHold {
    pub keys: Resources,
    pub ask: Ask<'static>,
}

impl PermitHold {
    pub(crate) fn of(slots: &Resources, resource: &str, limit: u32, mode: Mode) -> Result<PermitHold, String> {
        if mode == Mode::Script {
            return Ok(PermitHold { keys: slots.clone(), ask: Ask::exclusive() });
        }
        let mut keys = slots.names().to_vec();
        keys.push(limit_key(resource));
        Ok(PermitHold { keys: Resources::of(&keys)?, ask: Ask::new(Share::Slots(limit)) })
    }
}

/// A permit hold's lock, named after its slots (`REDLOCK_PERMIT`, what the
/// CLI prints), not its limit record.
pub(crate) fn named_after(mut lock: Lock, slots: &Resources) -> Lock {
    lock.resource = slots.to_string();
    lock
}
