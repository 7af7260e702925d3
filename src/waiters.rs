//! Fair server-side waiting: `LOCK.ACQUIRE ... WAIT timeout-ms`.
//!
//! Each waited key has a FIFO queue of blocked clients. Whenever the lock
//! may have become free, `serve` hands it to the oldest waiter within the
//! same execution unit, so no other command runs in between and a newcomer
//! cannot barge in:
//! - RELEASE and ACQUIRE (a newcomer finding the lease expired) serve
//!   inline, and the handoff is replicated right after their own effect;
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

use std::collections::HashMap;
use std::ffi::{c_int, c_void, CStr};
use std::ptr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{LazyLock, Mutex};

use redis_module::raw;

use crate::api::{
    self as api, rm, Arg, Ctx, HeldString, Key, KeyKind, KeyMode, RedisModuleBlockedClient, RedisModuleCtx, RedisModuleString,
};
use crate::clock;
use crate::core::grant::Request;
use crate::core::lease::Left;
use crate::core::line::{self, Line, Offer};
use crate::core::token::Token;
use crate::grants::{self, try_acquire, Attempt, By};
use crate::stats::{self, Cause};
use crate::writable;

/// Waiters across all keys: lets the hot path skip the registry.
static WAITING: AtomicUsize = AtomicUsize::new(0);

struct Waiter {
    client: *mut RedisModuleBlockedClient,
    owner: HeldString,
    request: Request,
    /// Its connection's id, when the hold it waits for is to be bound to
    /// it (`SESSION`).
    session_client: Option<u64>,
    /// The module timer that ends the wait (`WAIT 0`: none).
    deadline: Option<raw::RedisModuleTimerID>,
    /// When it joined the line, on the monotonic clock.
    joined_mono_ms: i64,
    /// When the wait ends, on the monotonic clock (`clock::mono_ms`): the
    /// timer is only a wake-up, since Redis keys timers to the wall clock.
    due_mono_ms: i64,
    /// The ACL user it waits as, checked again at handoff (see `acl`).
    user: Option<HeldString>,
}

struct Timer {
    id: raw::RedisModuleTimerID,
    due_ms: i64,
    generation: u64,
}

struct Queue {
    key: HeldString,
    waiters: Line<Waiter>,
    timer: Option<Timer>,
    /// What freed the lock, when an event (not the lease timer) said so.
    freed_by: Option<Cause>,
    /// When the lease last seen ends (just past it), as armed for it; an
    /// earlier check (after a command that named the key) is no lease end.
    lease_due_ms: Option<i64>,
    /// A command named the key since the last EXEC (it may be queued in a
    /// MULTI and change the lease only then).
    touched: bool,
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
    /// Blocked client → the queue it waits in.
    clients: HashMap<usize, (c_int, Box<[u8]>)>,
    timer_generation: u64,
    /// Queues whose handoff the server's state refused (see `writable`): one
    /// timer retries them all, so a long pause costs one check per tick.
    deferred: Vec<(c_int, Box<[u8]>)>,
    retry_timer: Option<raw::RedisModuleTimerID>,
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
    crate::reentry::with(&REGISTRY, f)
}

impl Registry {
    fn queue_mut(&mut self, db: c_int, key: &[u8]) -> Option<&mut Queue> {
        self.queues.get_mut(&db)?.get_mut(key)
    }

    fn pop_head(&mut self, db: c_int, key: &[u8]) -> Option<Waiter> {
        let waiter = self.queue_mut(db, key)?.waiters.take_head()?;
        self.clients.remove(&(waiter.client as usize));
        WAITING.fetch_sub(1, Ordering::Relaxed);
        Some(waiter)
    }

    /// Puts a head back first in its line; the waiter again when its line
    /// is gone.
    fn push_front(&mut self, db: c_int, key: &[u8], waiter: Waiter) -> Option<Waiter> {
        let client = waiter.client as usize;
        let Some(queue) = self.queue_mut(db, key) else {
            return Some(waiter);
        };
        queue.waiters.put_back(waiter);
        self.clients.insert(client, (db, key.into()));
        WAITING.fetch_add(1, Ordering::Relaxed);
        None
    }

    /// Takes a client out of its queue; also returns the queue's timer to
    /// stop when nobody is left in it, or the queue to look at again when
    /// the client was its head and others wait behind it (an exclusive
    /// request leaving may let the readers behind it in beside the holders).
    fn remove_client(&mut self, client: *mut RedisModuleBlockedClient) -> Option<(Waiter, Option<Timer>, Option<QueueName>)> {
        let (db, key) = self.clients.remove(&(client as usize))?;
        let queue = self.queue_mut(db, &key)?;
        let (waiter, new_head) = queue.waiters.leave(|w| w.client == client)?;
        WAITING.fetch_sub(1, Ordering::Relaxed);
        let stopped = self.drop_if_empty(db, &key);
        Some((waiter, stopped, new_head.then_some((db, key))))
    }

    fn waiter_mut(&mut self, client: usize) -> Option<&mut Waiter> {
        // Disjoint fields: the key is borrowed from `clients`, not copied.
        let (db, key) = self.clients.get(&client)?;
        self.queues.get_mut(db)?.get_mut(key)?.waiters.iter_mut().find(|w| w.client as usize == client)
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

/// One waiter as LOCK.WAITERS lists it.
pub struct WaiterView {
    pub owner: Box<[u8]>,
    pub request: Request,
    /// How long it has waited, ms.
    pub waited_ms: i64,
    /// What is left of its WAIT, ms; `None` without a limit (`WAIT 0`).
    pub left_ms: Option<i64>,
}

/// The first `count` waiters of `key` in `db`, in line order.
pub fn list(db: c_int, key: &[u8], count: usize) -> Vec<WaiterView> {
    if WAITING.load(Ordering::Relaxed) == 0 {
        return Vec::new();
    }
    let now = clock::mono_ms();
    with_registry(|r| {
        let Some(queue) = r.queue_mut(db, key) else { return Vec::new() };
        queue
            .waiters
            .iter_mut()
            .take(count)
            .map(|w| WaiterView {
                owner: w.owner.bytes().into(),
                request: w.request,
                waited_ms: now.saturating_sub(w.joined_mono_ms),
                left_ms: w.deadline.map(|_| w.due_mono_ms.saturating_sub(now).max(0)),
            })
            .collect()
    })
    .unwrap_or_default()
}

/// One waited key as LOCK.TOP lists it.
pub struct Contended {
    pub key: Box<[u8]>,
    pub waiters: usize,
    /// How long its head has waited, ms.
    pub oldest_wait_ms: i64,
}

/// The waited keys of `db`, most waiters first, then the longest wait,
/// then by name; at most `count`.
pub fn busiest(db: c_int, count: usize) -> Vec<Contended> {
    if WAITING.load(Ordering::Relaxed) == 0 || count == 0 {
        return Vec::new();
    }
    let now = clock::mono_ms();
    let mut all = with_registry(|r| {
        r.queues.get(&db).map_or_else(Vec::new, |keys| {
            keys.iter()
                .map(|(key, q)| Contended {
                    key: key.clone(),
                    waiters: q.waiters.len(),
                    oldest_wait_ms: q.waiters.first().map_or(0, |w| now.saturating_sub(w.joined_mono_ms)),
                })
                .collect()
        })
    })
    .unwrap_or_default();
    all.sort_by(|a, b| b.waiters.cmp(&a.waiters).then(b.oldest_wait_ms.cmp(&a.oldest_wait_ms)).then_with(|| a.key.cmp(&b.key)));
    all.truncate(count);
    all
}

/// How long the longest-waiting client has waited, ms (0: nobody waits).
pub fn oldest_wait_ms() -> i64 {
    if WAITING.load(Ordering::Relaxed) == 0 {
        return 0;
    }
    let now = clock::mono_ms();
    let oldest = with_registry(|r| {
        r.queues.values().flat_map(|keys| keys.values()).filter_map(|q| q.waiters.first().map(|w| w.joined_mono_ms)).min()
    });
    oldest.flatten().map_or(0, |joined| now.saturating_sub(joined))
}

/// Clients waiting now, and the keys they wait for (for INFO).
pub fn gauges() -> (i64, i64) {
    let clients = i64::try_from(WAITING.load(Ordering::Relaxed)).unwrap_or(i64::MAX);
    if clients == 0 {
        return (0, 0);
    }
    let keys = with_registry(|r| r.queues.values().map(HashMap::len).sum::<usize>()).unwrap_or(0);
    (clients, i64::try_from(keys).unwrap_or(i64::MAX))
}

/// How many wait for `key` in `db`. Free when nobody waits anywhere.
fn waiter_count(db: c_int, key: &[u8]) -> usize {
    if WAITING.load(Ordering::Relaxed) == 0 {
        return 0;
    }
    with_registry(|r| r.queue_mut(db, key).map_or(0, |q| q.waiters.len())).unwrap_or(0)
}

/// How many wait for `key` in the command's database. Nothing is looked
/// up (not even the database) when nobody waits anywhere.
pub fn count_in(ctx: Ctx, key: &[u8]) -> usize {
    if WAITING.load(Ordering::Relaxed) == 0 {
        return 0;
    }
    waiter_count(ctx.selected_db(), key)
}

/// The command's database when someone waits for `key` there.
pub fn queued_in(ctx: Ctx, key: &[u8]) -> Option<c_int> {
    if WAITING.load(Ordering::Relaxed) == 0 {
        return None;
    }
    let db = ctx.selected_db();
    (waiter_count(db, key) > 0).then_some(db)
}

/// A command changed the lease of the lock at `key` (open, named
/// `key_name`): its waiters, if any, are served when the new lease ends,
/// not at the old end.
pub fn lease_changed(ctx: Ctx, key: &Key, key_name: &Arg) {
    if let Some(db) = queued_in(ctx, key_name.bytes()) {
        arm_lease(db, key_name.bytes(), next_check(key));
    }
}

/// Blocks the calling client at the tail of `key`'s queue; `held` is the
/// open key, held by someone else.
///
/// The wait's timeout is a module timer, not Redis's: every way a wait
/// ends (grant, timeout, error) is then decided here, once, and answered
/// through `on_reply`. With Redis's timeout, a grant and the timeout
/// falling in the same event-loop turn left the client with no reply at
/// all on Redis 7.0 (it skips both callbacks once a client is unblocked).
/// For the same reason there is no timeout callback, so CLIENT UNBLOCK
/// does not apply to lock waiters (CLIENT KILL does).
pub fn enqueue(ctx: Ctx, held: &Key, key: &Arg, owner: &Arg, request: Request, timeout_ms: i64) -> c_int {
    let client = rm!(RedisModule_BlockClient(ctx.raw(), Some(on_reply), None, Some(free_outcome), 0) else ptr::null_mut());
    if client.is_null() {
        return ctx.reply_error(c"ERR could not block the client");
    }
    rm!(RedisModule_SetDisconnectCallback(client, Some(on_disconnect)) else ());
    let db = ctx.selected_db();
    let (key_held, owner_held) = (key.hold(), owner.hold());
    if !key_held.is_valid() || !owner_held.is_valid() {
        unblock(client, Outcome::Error(c"ERR could not keep the request"));
        return crate::api::OK;
    }
    // Beyond a year is forever; it also keeps Redis's timer arithmetic
    // (microseconds) from overflowing.
    let deadline = (timeout_ms > 0 && timeout_ms <= crate::config::DURATION_LIMIT).then(|| {
        let data = Box::into_raw(Box::new(client as usize));
        rm!(RedisModule_CreateTimer(api::timer_ctx(), timeout_ms, Some(on_wait_timeout), data.cast()) else 0)
    });
    let joined_mono_ms = clock::mono_ms();
    let due_mono_ms = joined_mono_ms.saturating_add(timeout_ms);
    let user = crate::acl::current_user(ctx);
    let session_client = request.session.map(|_| ctx.client_id());
    let waiter = Waiter { client, owner: owner_held, request, session_client, deadline, joined_mono_ms, due_mono_ms, user };
    let queued = with_registry(move |r| {
        let queue = r.queues.entry(db).or_default().entry(key.bytes().into()).or_insert_with(|| Queue {
            key: key_held,
            waiters: Line::default(),
            timer: None,
            freed_by: None,
            lease_due_ms: None,
            touched: false,
        });
        queue.waiters.join(waiter);
        r.clients.insert(client as usize, (db, key.bytes().into()));
        WAITING.fetch_add(1, Ordering::Relaxed);
        stats::WAIT_STARTED.bump();
    });
    if queued.is_none() {
        if let Some(id) = deadline {
            stop_wait_timer(id);
        }
        unblock(client, Outcome::Error(c"ERR lock queue busy, retry"));
        return crate::api::OK;
    }
    arm_lease(db, key.bytes(), next_check(held));
    crate::api::OK
}

/// Hands the lock at `key` (open for writing in `ctx`'s database `db`) to
/// the oldest waiters while it is free for them; arms the lease timer when
/// it stays held. `cause` is what freed it, for INFO.
pub fn serve(ctx: Ctx, key: &Key, db: c_int, key_name: &Arg, cause: Cause) {
    let name = key_name.bytes();
    // A lock Redis removed while its lease runs is still held.
    grants::restore_rescued(ctx, key, key_name);
    // In the line's order (`core::line::serve`), each head taken out of the
    // registry while Redis is called (replication and notifications may
    // re-enter this module). The head is first in line: nobody waits ahead
    // of it. Shared heads are granted one after the other until one does
    // not fit.
    let offer = |head: Waiter| {
        // Only a waiter the lock would go to now is checked: its rights
        // then, not while it waits, decide.
        let refused = match &head.user {
            Some(user) if grants::may_grant(key, head.owner.bytes(), &head.request) => crate::acl::refusal(user, key_name),
            _ => None,
        };
        if let Some(msg) = refused {
            cancel(head, Outcome::Refused(msg));
            return Offer::Left;
        }
        match try_acquire(ctx, key, key_name, Arg::of(&head.owner), &head.request, false, By::Handoff) {
            Attempt::Granted(token, _) => {
                let waited = clock::mono_ms().saturating_sub(head.joined_mono_ms);
                stats::waits(stats::HoldKind::of_request(&head.request)).record(waited);
                if head.request.session.is_some() || crate::session::any() {
                    let binding = head.request.session.zip(head.session_client).map(|(delay, client)| (client, delay));
                    let end = clock::mono_ms().saturating_add(head.request.ttl_ms);
                    crate::session::granted(db, name, head.owner.bytes(), binding, end);
                }
                stats::WAIT_GRANTED.bump();
                cause.counter().bump();
                unblock_waiter(head, Outcome::Token(token));
            }
            Attempt::WrongType => cancel(head, Outcome::WrongType),
            Attempt::Failed(msg) => cancel(head, Outcome::Error(msg)),
            Attempt::Refused(msg) => cancel(head, Outcome::Refused(msg)),
            Attempt::Held => return Offer::Waits(head),
        }
        Offer::Left
    };
    let put_back = |head: Waiter| {
        // Back to the front of the line; if that fails, never leave a
        // client blocked with nobody to serve it.
        let mut unplaced = Some(head);
        with_registry(|r| {
            if let Some(waiter) = unplaced.take() {
                unplaced = r.push_front(db, name, waiter);
            }
        });
        if let Some(waiter) = unplaced {
            cancel(waiter, Outcome::Error(c"ERR lock queue busy, retry"));
        }
    };
    if line::serve(|| with_registry(|r| r.pop_head(db, name)).flatten(), offer, put_back) {
        arm_lease(db, name, next_check(key));
    }
    if let Some(Some(timer)) = with_registry(|r| r.drop_if_empty(db, name)) {
        stop_timer(timer.id);
    }
}

/// How long after a lease's end its waiters are served. Both clocks are
/// read in whole milliseconds, so the wall clock may show the key's TTL
/// reached but not passed one millisecond after the monotonic end; Redis
/// expires a key only once its TTL has passed. Two milliseconds later the
/// key is always expired when the handoff opens it, so the `expired` event
/// comes before the grant, as for any other expiry.
const LEASE_END_MARGIN_MS: i64 = 2;

/// How often a waited-for plain-string lock (`SET key owner NX PX`) is
/// looked at besides its deadline: Redis tells a module nothing when a
/// string is deleted.
const PLAIN_STRING_POLL_MS: i64 = 50;

/// When to look at a held, waited-for key again, if ever, on the
/// monotonic clock: just past its lease's end. A module lock needs nothing
/// else, so an idle wait costs nothing: whatever frees it earlier
/// (RELEASE, DEL, an overwrite, expiry after a shortening PEXPIRE,
/// FLUSHALL, SWAPDB) reaches the data type's unlink callback or a server
/// event, and a lengthened lease is found held at the old end and
/// re-armed. A persisted lock waits for those events. A plain-string lock
/// is also polled: its lease is its TTL, on the wall clock.
fn next_check(key: &Key) -> Option<i64> {
    let now = crate::clock::now();
    if key.kind() != KeyKind::String {
        return match grants::lease_left(key, now) {
            Left::Ms(ms) => Some(now.mono.saturating_add(ms).saturating_add(LEASE_END_MARGIN_MS)),
            Left::Forever => None,
            Left::Ended => Some(now.mono),
        };
    }
    let poll = now.mono.saturating_add(PLAIN_STRING_POLL_MS);
    let deadline = key.deadline_ms().map(|d| now.mono.saturating_add(d.saturating_sub(now.wall)).saturating_add(1));
    Some(deadline.map_or(poll, |d| d.min(poll)))
}

/// Ends a wait without a grant or a timeout.
fn cancel(waiter: Waiter, outcome: Outcome) {
    stats::WAIT_CANCELLED.bump();
    unblock_waiter(waiter, outcome);
}

/// Ends a wait that is out of the registry: its timer goes, its answer is
/// handed to Redis.
fn unblock_waiter(waiter: Waiter, outcome: Outcome) {
    if let Some(id) = waiter.deadline {
        stop_wait_timer(id);
    }
    unblock(waiter.client, outcome);
}

fn unblock(client: *mut RedisModuleBlockedClient, outcome: Outcome) {
    let data = Box::into_raw(Box::new(outcome));
    if rm!(RedisModule_UnblockClient(client, data.cast()) else crate::api::ERR) != crate::api::OK {
        // SAFETY: Redis did not take the outcome.
        drop(unsafe { Box::from_raw(data) });
    }
}

fn stop_wait_timer(id: raw::RedisModuleTimerID) {
    let mut data: *mut c_void = ptr::null_mut();
    if rm!(RedisModule_StopTimer(api::timer_ctx(), id, &mut data) else crate::api::ERR) == crate::api::OK && !data.is_null() {
        // SAFETY: a wait timer's data is a boxed client address.
        drop(unsafe { Box::from_raw(data.cast::<usize>()) });
    }
}

/// A wait's timer fired: the timeout passed (leave the queue, answer nil),
/// or the wall clock stepped forward and fired it early (wait again for
/// what is left on the monotonic clock).
unsafe extern "C" fn on_wait_timeout(_ctx: *mut RedisModuleCtx, data: *mut c_void) {
    if data.is_null() {
        return;
    }
    let address = *data.cast::<usize>();
    let rearmed = with_registry(|r| {
        let waiter = r.waiter_mut(address)?;
        let left = waiter.due_mono_ms.saturating_sub(clock::mono_ms());
        if left <= 0 {
            return None;
        }
        waiter.deadline = Some(rm!(RedisModule_CreateTimer(api::timer_ctx(), left, Some(on_wait_timeout), data) else 0));
        Some(())
    });
    if matches!(rearmed, Some(Some(()))) {
        return;
    }
    let client = *Box::from_raw(data.cast::<usize>()) as *mut RedisModuleBlockedClient;
    if let Some(Some((_waiter, stopped, new_head))) = with_registry(|r| r.remove_client(client)) {
        if let Some(timer) = stopped {
            stop_timer(timer.id);
        }
        if let Some((db, key)) = new_head {
            arm(db, &key, clock::mono_ms());
        }
        // This timer is the one firing: nothing to stop for the waiter.
        stats::WAIT_TIMED_OUT.bump();
        unblock(client, Outcome::TimedOut);
    }
}

/// Arms `key`'s queue for the end of the lease at `due_ms` (none: a lease
/// without end, which only events can free), and records that end: a
/// deletion from then on is the lease running out.
fn arm_lease(db: c_int, key: &[u8], due_ms: Option<i64>) {
    with_registry(|r| r.queue_mut(db, key).map(|q| q.lease_due_ms = due_ms));
    if let Some(due) = due_ms {
        arm(db, key, due);
    }
}

/// Makes sure `key`'s queue is served no later than `due_ms` (on the
/// monotonic clock; the timer is a wake-up, see `on_cron`).
fn arm(db: c_int, key: &[u8], due_ms: i64) {
    let replaced = with_registry(|r| {
        r.timer_generation = r.timer_generation.wrapping_add(1);
        let generation = r.timer_generation;
        let queue = r.queue_mut(db, key)?;
        if queue.timer.as_ref().is_some_and(|t| t.due_ms <= due_ms) {
            return None;
        }
        let target = Box::into_raw(Box::new(TimerTarget { db, key: key.into(), generation }));
        let period = due_ms.saturating_sub(clock::mono_ms()).max(0);
        let id = rm!(RedisModule_CreateTimer(api::timer_ctx(), period, Some(on_timer), target.cast()) else 0);
        queue.timer.replace(Timer { id, due_ms, generation })
    });
    if let Some(Some(old)) = replaced {
        stop_timer(old.id);
    }
}

fn stop_timer(id: raw::RedisModuleTimerID) {
    let mut data: *mut c_void = ptr::null_mut();
    if rm!(RedisModule_StopTimer(api::timer_ctx(), id, &mut data) else crate::api::ERR) == crate::api::OK && !data.is_null() {
        // SAFETY: every timer's data is a boxed `TimerTarget`.
        drop(unsafe { Box::from_raw(data.cast::<TimerTarget>()) });
    }
}

/// A waited key's timer: its lease may have run out, or an event may have
/// freed it.
unsafe extern "C" fn on_timer(raw_ctx: *mut RedisModuleCtx, data: *mut c_void) {
    if data.is_null() {
        return;
    }
    let target = Box::from_raw(data.cast::<TimerTarget>());
    let ctx = Ctx::new(raw_ctx);
    let queued = with_registry(|r| {
        let queue = r.queue_mut(target.db, &target.key)?;
        if queue.timer.as_ref().is_some_and(|t| t.generation == target.generation) {
            queue.timer = None;
        }
        Some((Arg::of(&queue.key).hold(), queue.freed_by))
    })
    .flatten();
    let Some((key_name, freed_by)) = queued.filter(|(name, _)| name.is_valid()) else {
        return;
    };
    if !ctx.select_db(target.db) {
        return;
    }
    // A handoff here is a write no client asked for now: only what a
    // client's ACQUIRE could do may happen (see `writable`), and only on the
    // node that serves the key's slot.
    match writable::placement(ctx, Arg::of(&key_name)) {
        writable::Placement::Local => {}
        writable::Placement::ClusterDown => return defer(target.db, &target.key, writable::Refusal::ClusterDown),
        writable::Placement::Elsewhere => return turn_away(target.db, &target.key, MOVED_AWAY),
    }
    match writable::refusal(ctx) {
        // A replica never grants: whoever still waits here (a server that
        // keeps blocked clients across a demotion) must ask the master.
        Some(writable::Refusal::Replica) => return turn_away(target.db, &target.key, NOW_A_REPLICA),
        Some(refusal) => return defer(target.db, &target.key, refusal),
        None => {}
    }
    if freed_by.is_some() {
        with_registry(|r| r.queue_mut(target.db, &target.key).map(|q| q.freed_by = None));
    }
    let key = ctx.open_key(Arg::of(&key_name), KeyMode::Write);
    serve(ctx, &key, target.db, Arg::of(&key_name), freed_by.unwrap_or(Cause::Expiry));
}

/// What waiters hear when their key's slot left this node. Redis cannot
/// redirect clients blocked by a module, and a grant here would make a
/// second holder beside the lock on its new node; a cluster client retries
/// TRYAGAIN and is then redirected by Redis itself.
const MOVED_AWAY: &CStr =
    c"TRYAGAIN redislock: the lock's slot is no longer served by this node (resharding or failover); retry the command";

const NOW_A_REPLICA: &CStr = c"TRYAGAIN redislock: this node became a replica while you waited; retry the command on the master";

/// Answers every waiter of a queue with `msg` and drops the queue.
fn turn_away(db: c_int, key: &[u8], msg: &'static CStr) {
    while let Some(head) = with_registry(|r| r.pop_head(db, key)).flatten() {
        cancel(head, Outcome::Error(msg));
    }
    if let Some(Some(timer)) = with_registry(|r| r.drop_if_empty(db, key)) {
        stop_timer(timer.id);
    }
}

/// Parks a queue whose handoff the server refused; the retry timer serves
/// it once writes are allowed again.
pub fn defer(db: c_int, key: &[u8], refusal: writable::Refusal) {
    let arm_retry = with_registry(|r| {
        if !r.deferred.iter().any(|(d, k)| *d == db && **k == *key) {
            r.deferred.push((db, key.into()));
        }
        r.retry_timer.is_none()
    });
    if arm_retry == Some(true) {
        let id = rm!(RedisModule_CreateTimer(api::timer_ctx(), refusal.retry_ms(), Some(on_retry), ptr::null_mut()) else 0);
        with_registry(|r| r.retry_timer = Some(id));
    }
}

/// The deferred queues' timer: still refused, wait again; else hand them
/// to their own timers. A node that became a replica will not become
/// writable for them: `on_timer` turns their waiters away.
unsafe extern "C" fn on_retry(raw_ctx: *mut RedisModuleCtx, _data: *mut c_void) {
    with_registry(|r| r.retry_timer = None);
    if let Some(refusal) = writable::refusal(Ctx::new(raw_ctx)).filter(|r| *r != writable::Refusal::Replica) {
        let id = rm!(RedisModule_CreateTimer(api::timer_ctx(), refusal.retry_ms(), Some(on_retry), ptr::null_mut()) else 0);
        with_registry(|r| r.retry_timer = Some(id));
        return;
    }
    let deferred = with_registry(|r| std::mem::take(&mut r.deferred)).unwrap_or_default();
    let now = clock::mono_ms();
    for (db, key) in deferred {
        arm(db, &key, now);
    }
}

/// A lock key was deleted, overwritten or expired: serve its waiters soon.
/// A deletion at or after the lease's end last seen is the lease running
/// out; before it, a delete.
pub fn key_unlinked(db: c_int, key: &[u8]) {
    if WAITING.load(Ordering::Relaxed) == 0 {
        return;
    }
    let now = clock::mono_ms();
    let waited = with_registry(|r| {
        let queue = r.queue_mut(db, key).filter(|q| !q.waiters.is_empty())?;
        let lease_over = queue.lease_due_ms.is_some_and(|due| due <= now.saturating_add(LEASE_END_MARGIN_MS));
        queue.freed_by = Some(if lease_over { Cause::Expiry } else { Cause::Delete });
        Some(())
    })
    .flatten();
    if waited.is_some() {
        arm(db, key, now);
    }
}

/// Any command may change a waited key's lease: PEXPIRE and its kin
/// under any name (rename-command), inside MULTI, from Lua or a function,
/// GETEX, SET ... KEEPTTL on a plain-string lock. Redis tells a module
/// nothing when a TTL changes, and a keyspace-event subscription would
/// cost every DEL and EXPIRE in the server a module context; a command
/// filter sees each command before it runs, for one load while nobody
/// waits. A command naming a waited key at position 1 (where every
/// command that sets a TTL takes its key) gets the key looked at right
/// after it: the check is a timer, which runs once the command, and the
/// event-loop turn that ran it, are done. A command queued in MULTI runs
/// only at EXEC, so the key is marked and looked at again after EXEC.
///
/// So a command is about to run on `key` (in a database the filter does not
/// know): look at each waited queue of that name right after it, and
/// again after the next EXEC.
pub fn command_names(key: &[u8]) {
    let dbs: Vec<c_int> = with_registry(|r| {
        let mut dbs = Vec::new();
        for (db, keys) in r.queues.iter_mut() {
            if let Some(queue) = keys.get_mut(key) {
                if !queue.touched {
                    queue.touched = true;
                    r.touched.push((*db, key.into()));
                }
                dbs.push(*db);
            }
        }
        dbs
    })
    .unwrap_or_default();
    let now = clock::mono_ms();
    for db in dbs {
        arm(db, key, now);
    }
}

/// An EXEC is about to run: the queues a command named since the last
/// EXEC are looked at once it is done.
pub fn exec_starting() {
    let touched: Vec<(c_int, Box<[u8]>)> = with_registry(|r| {
        let touched = std::mem::take(&mut r.touched);
        for (db, key) in &touched {
            if let Some(queue) = r.queue_mut(*db, key) {
                queue.touched = false;
            }
        }
        touched
    })
    .unwrap_or_default();
    let now = clock::mono_ms();
    for (db, key) in touched {
        arm(db, &key, now);
    }
}

/// The wall clock stepped, which moved every module timer by the step. A
/// forward step fires wait and lease timers early, which they notice
/// themselves (a lease found running is re-armed); a backward one holds
/// them back by the whole step, so every wait timer, every lease timer and
/// the retry timer is re-created from what is left on the monotonic clock.
pub fn clock_stepped() {
    if WAITING.load(Ordering::Relaxed) == 0 {
        return;
    }
    let now = clock::mono_ms();
    with_registry(|r| {
        for keys in r.queues.values_mut() {
            for queue in keys.values_mut() {
                if let Some(timer) = queue.timer.as_mut() {
                    if let Some(id) = restart_timer(timer.id, timer.due_ms.saturating_sub(now), on_timer) {
                        timer.id = id;
                    }
                }
                for waiter in queue.waiters.iter_mut() {
                    if let Some(id) = waiter.deadline {
                        if let Some(id) = restart_timer(id, waiter.due_mono_ms.saturating_sub(now), on_wait_timeout) {
                            waiter.deadline = Some(id);
                        }
                    }
                }
            }
        }
        if let Some(id) = r.retry_timer {
            if let Some(id) = restart_timer(id, 0, on_retry) {
                r.retry_timer = Some(id);
            }
        }
    });
}

/// Stops a pending timer and creates it again `period_ms` from now with
/// the same data; `None` when it was no longer pending (it fired).
fn restart_timer(
    id: raw::RedisModuleTimerID,
    period_ms: i64,
    callback: unsafe extern "C" fn(*mut RedisModuleCtx, *mut c_void),
) -> Option<raw::RedisModuleTimerID> {
    let mut data: *mut c_void = ptr::null_mut();
    if rm!(RedisModule_StopTimer(api::timer_ctx(), id, &mut data) else crate::api::ERR) != crate::api::OK {
        return None;
    }
    Some(rm!(RedisModule_CreateTimer(api::timer_ctx(), period_ms.max(0), Some(callback), data) else 0))
}

/// FLUSHDB/FLUSHALL or SWAPDB changed keys without per-key events: serve
/// every queue soon.
pub fn dataset_changed() {
    look_at_every_queue(Some(Cause::Delete));
}

/// Whether anyone waits anywhere: one load.
#[inline]
pub fn anyone_waits() -> bool {
    WAITING.load(Ordering::Relaxed) != 0
}

/// This node became a replica: its waiters are turned away (see
/// `on_timer`) unless the server already unblocked them (Redis does).
pub fn demoted() {
    look_at_every_queue(None);
}

fn look_at_every_queue(freed_by: Option<Cause>) {
    if WAITING.load(Ordering::Relaxed) == 0 {
        return;
    }
    let queued: Vec<(c_int, Box<[u8]>)> = with_registry(|r| {
        let mut all = Vec::new();
        for (db, keys) in r.queues.iter_mut() {
            for (key, queue) in keys.iter_mut() {
                if freed_by.is_some() {
                    queue.freed_by = freed_by;
                }
                all.push((*db, key.clone()));
            }
        }
        all
    })
    .unwrap_or_default();
    let now = clock::mono_ms();
    for (db, key) in queued {
        arm(db, &key, now);
    }
}

unsafe extern "C" fn on_reply(raw_ctx: *mut RedisModuleCtx, _argv: *mut *mut RedisModuleString, _argc: c_int) -> c_int {
    let ctx = Ctx::new(raw_ctx);
    let data = rm!(RedisModule_GetBlockedClientPrivateData(raw_ctx) else ptr::null_mut());
    match data.cast::<Outcome>().as_ref() {
        Some(Outcome::Token(token)) => ctx.reply_integer(*token),
        Some(Outcome::WrongType) => ctx.reply_error(grants::WRONGTYPE),
        Some(Outcome::Error(msg)) => ctx.reply_error(msg),
        Some(Outcome::Refused(msg)) => ctx.reply_error(msg),
        Some(Outcome::TimedOut) => ctx.reply_null(),
        // Not answered by this module: the server ended the wait itself and
        // the client is still there (Valkey 9 on becoming a replica calls the
        // disconnect callback of a client it keeps). Nil would read as "held
        // by another"; this says retry, like Redis's own UNBLOCKED.
        None => ctx.reply_error(SERVER_ENDED_WAIT),
    }
}

const SERVER_ENDED_WAIT: &CStr = c"UNBLOCKED redislock: the server ended the wait (e.g. this node became a replica); retry the command";

/// The waiter's connection went away (or Redis unblocked it, e.g. on
/// becoming a replica): leave the queue and free Redis's handle (a client
/// blocked with RM_BlockClient is freed only by RM_UnblockClient).
unsafe extern "C" fn on_disconnect(_ctx: *mut RedisModuleCtx, client: *mut RedisModuleBlockedClient) {
    if let Some(Some((waiter, stopped, new_head))) = with_registry(|r| r.remove_client(client)) {
        if let Some(timer) = stopped {
            stop_timer(timer.id);
        }
        if let Some((db, key)) = new_head {
            arm(db, &key, clock::mono_ms());
        }
        if let Some(id) = waiter.deadline {
            stop_wait_timer(id);
        }
        stats::WAIT_CANCELLED.bump();
        rm!(RedisModule_UnblockClient(client, ptr::null_mut()) else crate::api::ERR);
    }
}

unsafe extern "C" fn free_outcome(_ctx: *mut RedisModuleCtx, data: *mut c_void) {
    if !data.is_null() {
        drop(Box::from_raw(data.cast::<Outcome>()));
    }
}
