//! The timers of waiting: each wait's timeout, each waited key's lease
//! end, and the deferred retries of what may not write where it is seen.

use super::*;

/// A wait's timer fired: the timeout passed (leave the queue, answer nil),
/// or the wall clock stepped forward and fired it early (wait again for
/// what is left on the monotonic clock).
pub(super) fn on_wait_timeout(_ctx: Ctx, address: usize) {
    let rearmed = with_registry(|r| {
        let waiter = r.waiter_mut(address)?;
        let left = waiter.due_mono_ms.saturating_sub(clock::mono_ms());
        if left <= 0 {
            return None;
        }
        waiter.deadline = api::after_with(left, on_wait_timeout, address);
        Some(())
    });
    if matches!(rearmed, Some(Some(()))) {
        return;
    }
    let client = address as *mut RedisModuleBlockedClient;
    if let Some(Some((_waiter, stopped, new_heads))) = with_registry(|r| r.remove_client(client)) {
        left_lines(stopped, new_heads);
        // This timer is the one firing: nothing to stop for the waiter.
        stats::WAIT_TIMED_OUT.bump();
        unblock(client, Outcome::TimedOut);
    }
}

/// After a waiter left its lines: their timers stop where nobody is left,
/// and the lines it headed are served again.
pub(super) fn left_lines(stopped: Vec<Timer>, new_heads: Vec<QueueName>) {
    for timer in stopped {
        timer.id.stop();
    }
    let now = clock::mono_ms();
    for (db, key) in new_heads {
        arm(db, &key, now);
    }
}

/// Arms `key`'s queue for the end of the lease at `due_ms` (none: a lease
/// without end, which only events can free), and records that end: a
/// deletion from then on is the lease running out.
pub(super) fn arm_lease(db: c_int, key: &[u8], due_ms: Option<i64>) {
    with_registry(|r| r.queue_mut(db, key).map(|q| q.lease_due_ms = due_ms));
    if let Some(due) = due_ms {
        arm(db, key, due);
    }
}

/// Makes sure `key`'s queue is served no later than `due_ms` (on the
/// monotonic clock; the timer is a wake-up, see `on_cron`).
pub(super) fn arm(db: c_int, key: &[u8], due_ms: i64) {
    let replaced = with_registry(|r| {
        r.timer_generation = r.timer_generation.wrapping_add(1);
        let generation = r.timer_generation;
        let queue = r.queue_mut(db, key)?;
        if queue.timer.as_ref().is_some_and(|t| t.due_ms <= due_ms) {
            return None;
        }
        let target = TimerTarget { db, key: key.into(), generation };
        let period = due_ms.saturating_sub(clock::mono_ms()).max(0);
        let id = api::after_with(period, on_timer, target)?;
        queue.timer.replace(Timer { id, due_ms, generation })
    });
    if let Some(Some(old)) = replaced {
        old.id.stop();
    }
}

/// A waited key's timer: its lease may have run out, or an event may have
/// freed it.
fn on_timer(ctx: Ctx, target: TimerTarget) {
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

/// Answers every waiter of a queue with `msg` and drops the queue (a set
/// leaves every line: the others are served again).
fn turn_away(db: c_int, key: &[u8], msg: &'static CStr) {
    let head = || with_registry(|r| r.queue_mut(db, key).and_then(|q| q.waiters.first().map(Place::client))).flatten();
    while let Some(client) = head() {
        let client = client as *mut RedisModuleBlockedClient;
        let Some(Some((waiter, stopped, new_heads))) = with_registry(|r| r.remove_client(client)) else { break };
        left_lines(stopped, new_heads);
        cancel(waiter, Outcome::Error(msg));
    }
    if let Some(Some(timer)) = with_registry(|r| r.drop_if_empty(db, key)) {
        timer.id.stop();
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
        let id = api::after(refusal.retry_ms(), on_retry);
        with_registry(|r| r.retry_timer = id);
    }
}

/// The deferred queues' timer: still refused, wait again; else hand them
/// to their own timers. A node that became a replica will not become
/// writable for them: `on_timer` turns their waiters away.
fn on_retry(ctx: Ctx) {
    with_registry(|r| r.retry_timer = None);
    if let Some(refusal) = writable::refusal(ctx).filter(|r| *r != writable::Refusal::Replica) {
        let id = api::after(refusal.retry_ms(), on_retry);
        with_registry(|r| r.retry_timer = id);
        return;
    }
    let deferred = with_registry(|r| std::mem::take(&mut r.deferred)).unwrap_or_default();
    let now = clock::mono_ms();
    for (db, key) in deferred {
        arm(db, &key, now);
    }
}
