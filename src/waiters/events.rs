//! What server events mean for the waiters: keys unlinked, MULTI/EXEC,
//! clock steps, dataset changes, demotion.

use super::*;

/// A lock key was deleted, overwritten or expired: serve its waiters soon.
/// A deletion at or after the lease's end last seen is the lease running
/// out; before it, a delete. A release that serves the line itself right
/// after its deletion (`deleting_before_handoff`) needs no timer.
pub fn key_unlinked(db: c_int, key: &[u8]) {
    if WAITING.load(Ordering::Relaxed) == 0 {
        return;
    }
    let now = clock::mono_ms();
    let waited = with_registry(|r| {
        let queue = r.queue_mut(db, key).filter(|q| !q.waiters.is_empty() && !q.handoff_follows)?;
        let lease_over = queue.lease_due_ms.is_some_and(|due| due <= now.saturating_add(LEASE_END_MARGIN_MS));
        queue.freed_by = Some(if lease_over { Cause::Expiry } else { Cause::Delete });
        Some(())
    })
    .flatten();
    if waited.is_some() {
        arm(db, key, now);
    }
}

/// Runs `change`, a change that may delete the lock key `key_name` whose
/// line (`queued`: someone waits there) the same command serves right
/// after (`serve`): the unlink callback then arms no timer to serve it,
/// which would only find the lock handed off already. The line itself is
/// marked for as long as the change runs (`Queue::handoff_follows`), by
/// the caller that knows the handoff follows. (Under OOM the line is
/// deferred, and nobody is served on a replica: the timer stays as it
/// was.)
pub fn deleting_before_handoff<R>(ctx: Ctx, key_name: &Arg, queued: Option<c_int>, change: impl FnOnce() -> R) -> R {
    let Some(db) = queued.filter(|_| super::changes::served_inline(ctx, queued)) else {
        return change();
    };
    let mark = |follows: bool| {
        with_registry(|r| {
            if let Some(queue) = r.queue_mut(db, key_name.bytes()) {
                queue.handoff_follows = follows;
            }
        })
    };
    mark(true);
    let done = change();
    mark(false);
    done
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
    let restart = |waiter: &mut Waiter| {
        if let Some(id) = waiter.deadline {
            if let Some(id) = id.restart(waiter.due_mono_ms.saturating_sub(now)) {
                waiter.deadline = Some(id);
            }
        }
    };
    with_registry(|r| {
        for keys in r.queues.values_mut() {
            for queue in keys.values_mut() {
                if let Some(timer) = queue.timer.as_mut() {
                    if let Some(id) = timer.id.restart(timer.due_ms.saturating_sub(now)) {
                        timer.id = id;
                    }
                }
                for place in queue.waiters.iter_mut() {
                    if let Place::One(waiter) = place {
                        restart(waiter);
                    }
                }
            }
        }
        for set in r.sets.values_mut() {
            restart(&mut set.waiter);
        }
        if let Some(id) = r.retry_timer {
            if let Some(id) = id.restart(0) {
                r.retry_timer = Some(id);
            }
        }
    });
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
