//! Fair server-side waiting: `LOCK.ACQUIRE ... WAIT timeout-ms`.
//!
//! Each waited key has a FIFO queue of blocked clients. Whenever the lock
//! may have become free, `serve` hands it to the oldest waiter within the
//! same execution unit, so no other command runs in between and a newcomer
//! cannot barge in:
//! - RELEASE and ACQUIRE (a newcomer finding the lease expired) serve
//!   inline, and the handoff is replicated right after their own effect
//!   (a release's own deletion of the key arms no timer for the line);
//! - a lease running out is caught by a timer per waited key set to the
//!   deadline, so the handoff follows within a few milliseconds rather
//!   than whenever Redis's background expiry samples the key;
//! - DEL, UNLINK, overwrites and expiry of a lock key are seen by the data
//!   type's unlink callback, FLUSHDB/FLUSHALL/SWAPDB as server events; it
//!   is unsafe to write there (the grant would be replicated before the
//!   command that caused it), so they schedule an immediate timer. (A
//!   keyspace-event subscription would see them too, but Redis then builds
//!   a module context for every event of every command, about 600
//!   instructions each, whether anyone waits or not.)
//!
//! Redis's own blocking on keys (RM_BlockClientOnKeys) was considered: it
//! serves in arrival order after the signalling command, but the handoff
//! would then be written from a blocked-client callback whose propagation
//! Redis 7.0 orders separately from the command that freed the lock, and
//! expiry and deletion do not signal keys there; LOCK.INFO needs the queue
//! length anyway. An explicit queue keeps every handoff in one place.
//!
//! Its jobs, each in a file: this one, the registry of queues and timers;
//! `changes` and `multi` (a client's change, `change`, and the serving of
//! the line it asks for: the changes sit below and serve no line);
//! `serving` (queueing, the handoff, ending a wait); `timers` (timeouts,
//! lease ends, deferred retries); `events` (what server events mean for
//! waiters); `views` (what LOCK.WAITERS, LOCK.TOP, LOCK.INFO and INFO
//! show).

pub mod acl;
mod changes;
mod events;
mod multi;
mod serving;
mod timers;
mod views;

pub use changes::{acquire, extend, release, resize, revoke};
pub use events::{
    anyone_waits, clock_stepped, command_names, dataset_changed, deleting_before_handoff, demoted, exec_starting, key_unlinked,
};
pub use multi::{acquire_set, extend_set, release_set, ExtendedSet};
use serving::{cancel, refuse_stale_sets, unblock, LEASE_END_MARGIN_MS};
pub use serving::{enqueue, enqueue_set, lease_changed, lease_changed_to, serve};
pub use timers::defer;
use timers::{arm, arm_lease, left_lines, on_wait_timeout};
pub use views::{busiest, count_in, gauges, list, oldest_wait_ms, queued_in};

use std::collections::HashMap;
use std::ffi::{c_int, CStr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{LazyLock, Mutex};

use crate::api::{self as api, Arg, Ctx, HeldString, Key, KeyKind, KeyMode, RedisModuleBlockedClient};
use crate::change::{self, Ask, Attempt};
use crate::core::grant::Request;
use crate::core::lease::Left;
use crate::core::line::{self, Line, Offer};
use crate::core::multi::SetRequest;
use crate::core::token::Token;
use crate::keys::grants;
use crate::replication::writable;
use crate::server::clock;
use crate::server::stats::{self, Cause};

/// Waiters across all keys: lets the hot path skip the registry.
static WAITING: AtomicUsize = AtomicUsize::new(0);

struct Waiter {
    client: *mut RedisModuleBlockedClient,
    owner: HeldString,
    request: Request,
    /// `VALUE`: stored with the hold at the grant.
    value: Option<HeldString>,
    /// Its connection's id, when the hold it waits for is to be bound to
    /// it (`SESSION`).
    session_client: Option<u64>,
    /// The module timer that ends the wait (`WAIT 0`: none).
    deadline: Option<WaitTimer>,
    /// When it joined the line, on the monotonic clock.
    joined_mono_ms: i64,
    /// When the wait ends, on the monotonic clock (`clock::mono_ms`): the
    /// timer is only a wake-up, since Redis keys timers to the wall clock.
    due_mono_ms: i64,
    /// The ACL user it waits as, checked again at handoff (see `acl`).
    user: Option<HeldString>,
}

impl Waiter {
    /// What it asks the grant for when it heads its line.
    fn ask(&self) -> Ask<'_> {
        Ask { request: &self.request, value: self.value.as_ref().map(HeldString::bytes) }
    }
}

/// A place in a key's line: a single-key waiter, or a set's (the set
/// itself is kept once, in `Registry::sets`, by its blocked client's
/// address, and stands in the line of each of its members).
enum Place {
    One(Waiter),
    Set(usize),
}

impl Place {
    fn is_set(&self, id: usize) -> bool {
        matches!(self, Place::Set(set) if *set == id)
    }

    /// The blocked client's address.
    fn client(&self) -> usize {
        match self {
            Place::One(waiter) => waiter.client as usize,
            Place::Set(id) => *id,
        }
    }
}

/// A set waiting in every member's line (`LOCK.MACQUIRE ... WAIT`).
struct SetWaiter {
    waiter: Waiter,
    db: c_int,
    /// Its members that it waits in line for, each once, in the order
    /// given.
    keys: Vec<HeldString>,
    /// A strict request's guards (`SetRequest::guards`): lock members
    /// after `keys`, in no line.
    guards: Vec<HeldString>,
    /// `SEMAPHORE n`: its last member, one permit of a semaphore of n,
    /// in no line (see `multi`).
    semaphore: Option<(HeldString, u32)>,
    /// `LARGEST m` and `SHARED n` as asked (see `SetRequest`).
    largest: Option<u32>,
    shared: u32,
}

impl SetWaiter {
    /// What it asks of its members.
    fn set_request(&self) -> SetRequest {
        let semaphore = self.semaphore.as_ref().map(|(_, limit)| *limit);
        SetRequest { request: self.waiter.request, semaphore, largest: self.largest, shared: self.shared }
    }
}

/// The waiter at a place.
fn waiter_at<'a>(sets: &'a HashMap<usize, SetWaiter>, place: &'a Place) -> Option<&'a Waiter> {
    match place {
        Place::One(waiter) => Some(waiter),
        Place::Set(id) => sets.get(id).map(|set| &set.waiter),
    }
}

/// What serving a line takes from its head.
enum Taken {
    One(Waiter),
    /// A set first in all its lines, out of every one of them.
    Set(SetWaiter),
    /// A set that still waits behind others in another member's line: it
    /// stays, and stops this line.
    Blocked,
}

/// A wait's timeout: the timer carries the blocked client's address.
type WaitTimer = api::TimerWith<usize>;

struct Timer {
    id: api::TimerWith<TimerTarget>,
    due_ms: i64,
    generation: u64,
}

struct Queue {
    key: HeldString,
    waiters: Line<Place>,
    timer: Option<Timer>,
    /// What freed the lock, when an event (not the lease timer) said so.
    freed_by: Option<Cause>,
    /// When the lease last seen ends (just past it), as armed for it; an
    /// earlier check (after a command that named the key) is no lease end.
    lease_due_ms: Option<i64>,
    /// A command named the key since the last EXEC (it may be queued in a
    /// MULTI and change the lease only then).
    touched: bool,
    /// A change is deleting the key, and the same command serves this
    /// line right after it (`deleting_before_handoff`): the unlink
    /// arms no timer for it.
    handoff_follows: bool,
}

impl Queue {
    fn new(key: HeldString) -> Queue {
        Queue { key, waiters: Line::default(), timer: None, freed_by: None, lease_due_ms: None, touched: false, handoff_follows: false }
    }
}

/// A queue: its database and key.
type QueueName = (c_int, Box<[u8]>);

/// What a timer carries: which queue to serve.
struct TimerTarget {
    db: c_int,
    key: Box<[u8]>,
    generation: u64,
}

#[derive(Default)]
struct Registry {
    queues: HashMap<c_int, HashMap<Box<[u8]>, Queue>>,
    /// Blocked client → the queue it waits in (a single-key waiter).
    clients: HashMap<usize, (c_int, Box<[u8]>)>,
    /// Blocked client → the set it waits for, standing in each member's
    /// queue as `Place::Set`.
    sets: HashMap<usize, SetWaiter>,
    timer_generation: u64,
    /// Queues whose handoff the server's state refused (see `writable`): one
    /// timer retries them all, so a long pause costs one check per tick.
    deferred: Vec<(c_int, Box<[u8]>)>,
    retry_timer: Option<api::TimerId>,
    /// Queues marked `touched`, looked at after the next EXEC.
    touched: Vec<(c_int, Box<[u8]>)>,
}

// SAFETY: the registry is only touched with Redis's global lock held (the
// main thread, or a module thread holding the GIL); the raw pointers in it
// are Redis handles that are valid under that lock.
unsafe impl Send for Registry {}

static REGISTRY: LazyLock<Mutex<Registry>> = LazyLock::new(|| Mutex::new(Registry::default()));

/// Runs `f` on the registry. `None` if it is already in use further up the
/// stack (a Redis call re-entered us): callers then skip, never block.
fn with_registry<R>(f: impl FnOnce(&mut Registry) -> R) -> Option<R> {
    crate::server::reentry::with(&REGISTRY, f)
}

impl Registry {
    fn queue_mut(&mut self, db: c_int, key: &[u8]) -> Option<&mut Queue> {
        self.queues.get_mut(&db)?.get_mut(key)
    }

    /// Takes the head of a line out to offer it the lock: a single-key
    /// waiter, or a set first in all its lines (out of all of them);
    /// `Blocked` for a set that is not.
    fn take_head(&mut self, db: c_int, key: &[u8]) -> Option<Taken> {
        let queue = self.queue_mut(db, key)?;
        if let Some(id) = queue.waiters.first().and_then(|p| if let Place::Set(id) = p { Some(*id) } else { None }) {
            if !self.first_in_all(id) {
                return Some(Taken::Blocked);
            }
            return self.take_set(id).map(|(set, _)| Taken::Set(set));
        }
        let Place::One(waiter) = queue.waiters.take_head()? else { return None };
        self.clients.remove(&(waiter.client as usize));
        WAITING.fetch_sub(1, Ordering::Relaxed);
        Some(Taken::One(waiter))
    }

    /// Whether the set `id` heads the line of each of its members.
    fn first_in_all(&self, id: usize) -> bool {
        let Some(set) = self.sets.get(&id) else { return false };
        let per_db = self.queues.get(&set.db);
        set.keys
            .iter()
            .all(|key| per_db.and_then(|keys| keys.get(key.bytes())).and_then(|q| q.waiters.first()).is_some_and(|p| p.is_set(id)))
    }

    /// Takes the set `id` out of every line it stands in (its queues stay,
    /// even empty: see `drop_if_empty`); with it, the members whose line it
    /// headed with others behind it.
    fn take_set(&mut self, id: usize) -> Option<(SetWaiter, Vec<Box<[u8]>>)> {
        let set = self.sets.remove(&id)?;
        WAITING.fetch_sub(1, Ordering::Relaxed);
        let mut headed = Vec::new();
        for key in &set.keys {
            let Some(queue) = self.queue_mut(set.db, key.bytes()) else { continue };
            if let Some((_, true)) = queue.waiters.leave(|p| p.is_set(id)) {
                headed.push(key.bytes().into());
            }
        }
        Some((set, headed))
    }

    /// Puts a set that was first in all its lines back first in each.
    fn put_back_set(&mut self, set: SetWaiter) {
        let id = set.waiter.client as usize;
        for key in &set.keys {
            let queue = self
                .queues
                .entry(set.db)
                .or_default()
                .entry(key.bytes().into())
                .or_insert_with(|| Queue::new(HeldString::from_bytes(key.bytes())));
            queue.waiters.put_back(Place::Set(id));
        }
        self.sets.insert(id, set);
        WAITING.fetch_add(1, Ordering::Relaxed);
    }

    /// Puts a head back first in its line; the waiter again when its line
    /// is gone.
    fn push_front(&mut self, db: c_int, key: &[u8], waiter: Waiter) -> Option<Waiter> {
        let client = waiter.client as usize;
        let Some(queue) = self.queue_mut(db, key) else {
            return Some(waiter);
        };
        queue.waiters.put_back(Place::One(waiter));
        self.clients.insert(client, (db, key.into()));
        WAITING.fetch_add(1, Ordering::Relaxed);
        None
    }

    /// Takes a client out of its queue, or a set out of every line; also
    /// returns the queues' timers to stop when nobody is left in them, and
    /// the queues to look at again where it was the head and others wait
    /// behind it (an exclusive request leaving may let the readers behind
    /// it in beside the holders; a set leaving may unblock another).
    fn remove_client(&mut self, client: *mut RedisModuleBlockedClient) -> Option<(Waiter, Vec<Timer>, Vec<QueueName>)> {
        if self.sets.contains_key(&(client as usize)) {
            let (set, headed) = self.take_set(client as usize)?;
            let stopped = set.keys.iter().filter_map(|key| self.drop_if_empty(set.db, key.bytes())).collect();
            let new_heads = headed.into_iter().map(|key| (set.db, key)).collect();
            return Some((set.waiter, stopped, new_heads));
        }
        let (db, key) = self.clients.remove(&(client as usize))?;
        let queue = self.queue_mut(db, &key)?;
        let (place, new_head) = queue.waiters.leave(|p| p.client() == client as usize)?;
        let Place::One(waiter) = place else { return None };
        WAITING.fetch_sub(1, Ordering::Relaxed);
        let stopped = self.drop_if_empty(db, &key).into_iter().collect();
        Some((waiter, stopped, if new_head { vec![(db, key)] } else { Vec::new() }))
    }

    fn waiter_mut(&mut self, client: usize) -> Option<&mut Waiter> {
        if let Some(set) = self.sets.get_mut(&client) {
            return Some(&mut set.waiter);
        }
        // Disjoint fields: the key is borrowed from `clients`, not copied.
        let (db, key) = self.clients.get(&client)?;
        self.queues.get_mut(db)?.get_mut(key)?.waiters.iter_mut().find_map(|p| match p {
            Place::One(w) if w.client as usize == client => Some(w),
            _ => None,
        })
    }

    /// Drops the queue when nobody waits in it; returns its timer to stop.
    fn drop_if_empty(&mut self, db: c_int, key: &[u8]) -> Option<Timer> {
        let per_db = self.queues.get_mut(&db)?;
        if !per_db.get(key)?.waiters.is_empty() {
            return None;
        }
        let timer = per_db.remove(key).and_then(|q| q.timer);
        if per_db.is_empty() {
            self.queues.remove(&db);
        }
        timer
    }
}

/// How a wait ended, handed to the blocked client's reply callback.
enum Outcome {
    Token(Token),
    TimedOut,
    WrongType,
    Error(&'static CStr),
    /// Its user may no longer take the lock: the server's NOPERM text.
    Refused(std::ffi::CString),
}
