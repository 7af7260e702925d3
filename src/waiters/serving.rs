//! Queueing a waiter, serving the head of a key's queue, and ending a
//! wait: what a blocked client is answered, and what its disconnect does
//! (`Wait`, whose functions `api`'s blocked-client trampolines call).

use super::*;
use crate::core::lease::{Lease, Now, NO_TTL};

/// A command changed the lease of the lock at `key` (open, named
/// `key_name`): its waiters, if any, are served when the new lease ends,
/// not at the old end.
pub fn lease_changed(ctx: Ctx, key: &Key, key_name: &Arg) {
    if let Some(db) = queued_in(ctx, key_name.bytes()) {
        arm_lease(db, key_name.bytes(), next_check(key));
    }
}

/// `lease_changed` by a change that knows when the first lease at the key
/// now ends (`first_end`, monotonic ms: a grant's `Granted::first_end`),
/// so the key is not read again for it.
pub fn lease_changed_to(ctx: Ctx, key_name: &Arg, first_end: i64) {
    if let Some(db) = queued_in(ctx, key_name.bytes()) {
        arm_lease(db, key_name.bytes(), check_at(first_end, crate::server::clock::now()));
    }
}

/// Blocks the calling client at the tail of `key`'s queue, asking `ask`;
/// `held` is the open key, held by someone else.
///
/// The wait's timeout is a module timer, not Redis's: every way a wait
/// ends (grant, timeout, error) is then decided here, once, and answered
/// through `on_reply`. With Redis's timeout, a grant and the timeout
/// falling in the same event-loop turn left the client with no reply at
/// all on Redis 7.0 (it skips both callbacks once a client is unblocked).
/// For the same reason there is no timeout callback, so CLIENT UNBLOCK
/// does not apply to lock waiters (CLIENT KILL does).
pub fn enqueue(ctx: Ctx, held: &Key, key: &Arg, owner: &Arg, ask: Ask<'_, Arg>, timeout_ms: i64) -> c_int {
    let db = ctx.selected_db();
    let keep = || Some(key.hold()).filter(HeldString::is_valid);
    let joined = block_in_line(ctx, owner, ask, timeout_ms, keep, |r, waiter, key_held| {
        let client = waiter.client as usize;
        let queue = r.queues.entry(db).or_default().entry(key.bytes().into()).or_insert_with(|| Queue::new(key_held));
        queue.waiters.join(Place::One(waiter));
        r.clients.insert(client, (db, key.bytes().into()));
    });
    if let Err(answered) = joined {
        return answered;
    }
    arm_lease(db, key.bytes(), next_check(held));
    crate::api::OK
}

/// Blocks the calling client for the set of keys `names` (each once, in
/// this database): its one place joins the tail of every member's line at
/// once, so it waits behind exactly those who came before it on each
/// member. It is handed the set once it heads them all (`serve`); its
/// timeout and disconnect take it out of every line, as `enqueue`'s. A
/// semaphore member (`set.semaphore`, the last name) and a strict
/// request's guards (`SetRequest::guards`) have no line: while one holds
/// the set back, the set's first line is looked at again when its lease
/// ends.
pub fn enqueue_set(ctx: Ctx, names: &[Arg], owner: &Arg, set: SetRequest, timeout_ms: i64) -> c_int {
    let db = ctx.selected_db();
    let (locks, semaphore) = match (set.semaphore, names.split_last()) {
        (Some(limit), Some((record, locks))) => (locks, Some((record, limit))),
        _ => (names, None),
    };
    let (lined, guards) = locks.split_at(locks.len().saturating_sub(set.guards(locks.len())));
    let keep = || {
        let keys: Vec<HeldString> = lined.iter().map(Arg::hold).collect();
        let guards: Vec<HeldString> = guards.iter().map(Arg::hold).collect();
        let semaphore = semaphore.map(|(record, limit)| (record.hold(), limit));
        let valid = keys.iter().chain(&guards).all(HeldString::is_valid) && semaphore.as_ref().is_none_or(|(record, _)| record.is_valid());
        valid.then_some((keys, guards, semaphore))
    };
    let joined = block_in_line(ctx, owner, Ask::new(&set.request), timeout_ms, keep, |r, waiter, (keys, guards, semaphore)| {
        let id = waiter.client as usize;
        for name in lined {
            let queue = r.queues.entry(db).or_default().entry(name.bytes().into()).or_insert_with(|| Queue::new(name.hold()));
            queue.waiters.join(Place::Set(id));
        }
        r.sets.insert(id, SetWaiter { waiter, db, keys, guards, semaphore, largest: set.largest, shared: set.shared });
    });
    if let Err(answered) = joined {
        return answered;
    }
    for name in lined {
        arm_held(&ctx.open_key(name, KeyMode::Write), db, name.bytes());
    }
    if let Some(first) = lined.first() {
        let n = names.len();
        let unlined = guards.iter().enumerate().map(|(i, guard)| (guard, Some(set.member(lined.len().saturating_add(i), n))));
        for (name, asked) in unlined.chain(semaphore.map(|(record, _)| (record, set.permit()))) {
            arm_for_unlined(&ctx.open_key(name, KeyMode::Write), owner.bytes(), asked, db, first.bytes());
        }
    }
    crate::api::OK
}

/// How soon a set held back by a member in no line (its semaphore member,
/// or a guard) is looked at again at the latest. A semaphore's permits run
/// out only for a moment (a connection's holds ended one key after the
/// other, its lock's line served before its permit is given back) or when
/// a member was released alone; a guard is held exclusively only by a
/// holder granted above a semaphore's limit, until it leaves: no line
/// moves that would serve the set.
const UNLINED_RECHECK_MS: i64 = 20;

/// When the member `unlined`, in no line (a semaphore member, a guard),
/// keeps `owner`'s set (asking `asked` of it) out, looks at the set's
/// line named `first` again when it may not: when the first lease there
/// ends, and within `UNLINED_RECHECK_MS`.
fn arm_for_unlined(unlined: &Key, owner: &[u8], asked: Option<Request>, db: c_int, first: &[u8]) {
    let Some(asked) = asked else { return };
    let now = crate::server::clock::now();
    if !grants::may_grant(unlined, owner, &asked) && !matches!(grants::lease_left(unlined, now), Left::Ended) {
        let soon = now.mono.saturating_add(UNLINED_RECHECK_MS);
        arm(db, first, next_check(unlined).map_or(soon, |due| due.min(soon)));
    }
}

/// What every wait shares: blocks the calling client, keeps what it asks
/// (the owner, the request and its value, and what `keep` holds for its
/// line: its key names, `None` if they could not be kept), arms its
/// timeout and puts it in line with `join`. `Err` with the command's
/// return when it did not join: the client is answered already.
fn block_in_line<T>(
    ctx: Ctx,
    owner: &Arg,
    ask: Ask<'_, Arg>,
    timeout_ms: i64,
    keep: impl FnOnce() -> Option<T>,
    join: impl FnOnce(&mut Registry, Waiter, T),
) -> Result<(), c_int> {
    let client = api::block::<Wait>(ctx);
    if client.is_null() {
        return Err(ctx.reply_error(c"ERR could not block the client"));
    }
    let (owner_held, value) = (owner.hold(), ask.value.map(Arg::hold));
    let kept = keep();
    let Some(kept) = kept.filter(|_| owner_held.is_valid() && value.as_ref().is_none_or(HeldString::is_valid)) else {
        unblock(client, Outcome::Error(c"ERR could not keep the request"));
        return Err(crate::api::OK);
    };
    // Beyond a year is forever; it also keeps Redis's timer arithmetic
    // (microseconds) from overflowing.
    let deadline = (timeout_ms > 0 && timeout_ms <= crate::server::config::DURATION_LIMIT)
        .then(|| api::after_with(timeout_ms, on_wait_timeout, client as usize))
        .flatten();
    let joined_mono_ms = clock::mono_ms();
    let due_mono_ms = joined_mono_ms.saturating_add(timeout_ms);
    let user = crate::waiters::acl::current_user(ctx);
    let request = *ask.request;
    let session_client = request.session.map(|_| ctx.client_id());
    let waiter = Waiter { client, owner: owner_held, request, value, session_client, deadline, joined_mono_ms, due_mono_ms, user };
    let queued = with_registry(move |r| {
        join(r, waiter, kept);
        WAITING.fetch_add(1, Ordering::Relaxed);
        stats::WAIT_STARTED.bump();
    });
    if queued.is_none() {
        if let Some(id) = deadline {
            id.stop();
        }
        unblock(client, Outcome::Error(QUEUE_BUSY));
        return Err(crate::api::OK);
    }
    Ok(())
}

/// Arms a set member's line for its lease's end while it is held; a free
/// member needs no timer (its line moves when a waiter ahead leaves).
fn arm_held(key: &Key, db: c_int, name: &[u8]) {
    if !matches!(grants::lease_left(key, crate::server::clock::now()), Left::Ended) {
        arm_lease(db, name, next_check(key));
    }
}

/// Hands the lock at `key` (open for writing in `ctx`'s database `db`) to
/// the oldest waiters while it is free for them; arms the lease timer when
/// it stays held. `cause` is what freed it, for INFO.
pub fn serve(ctx: Ctx, key: &Key, db: c_int, key_name: &Arg, cause: Cause) {
    let name = key_name.bytes();
    // A lock Redis removed while its lease runs is still held.
    crate::change::restore_rescued(ctx, key, key_name);
    // In the line's order (`core::line::serve`), each head taken out of the
    // registry while Redis is called (replication and notifications may
    // re-enter this module). The head is first in line: nobody waits ahead
    // of it. Shared heads are granted one after the other until one does
    // not fit.
    // Whether the head that stopped serving needs this key's lease timer:
    // a single-key waiter does; a set arms its own held members, and a set
    // blocked in another line waits for that line to move.
    let arm_here = std::cell::Cell::new(true);
    let offer = |head: Taken| {
        let head = match head {
            Taken::One(head) => head,
            Taken::Set(set) => {
                arm_here.set(false);
                return offer_set(ctx, key, db, key_name, set, cause);
            }
            Taken::Blocked => {
                arm_here.set(false);
                return Offer::Waits(Taken::Blocked);
            }
        };
        arm_here.set(true);
        // Only a waiter the lock would go to now is checked: its rights
        // then, not while it waits, decide.
        let refused = match &head.user {
            Some(user) if grants::may_grant(key, head.owner.bytes(), &head.request) => crate::waiters::acl::refusal(user, key_name),
            _ => None,
        };
        if let Some(msg) = refused {
            cancel(head, Outcome::Refused(msg));
            return Offer::Left;
        }
        match change::handoff(ctx, key, db, key_name, Arg::of(&head.owner), head.ask(), head.session_client) {
            Attempt::Granted(granted) => {
                granted_after_wait(&head, cause);
                unblock_waiter(head, Outcome::Token(granted.token));
            }
            Attempt::WrongType => cancel(head, Outcome::WrongType),
            Attempt::Failed(msg) => cancel(head, Outcome::Error(msg)),
            Attempt::Refused(msg) => cancel(head, Outcome::Refused(msg)),
            Attempt::Held => return Offer::Waits(Taken::One(head)),
        }
        Offer::Left
    };
    let put_back = |head: Taken| {
        match head {
            Taken::Blocked => {}
            Taken::Set(set) => {
                let mut unplaced = Some(set);
                with_registry(|r| {
                    if let Some(set) = unplaced.take() {
                        r.put_back_set(set);
                    }
                });
                if let Some(set) = unplaced {
                    cancel(set.waiter, Outcome::Error(QUEUE_BUSY));
                }
            }
            Taken::One(head) => {
                // Back to the front of the line; if that fails, never leave
                // a client blocked with nobody to serve it.
                let mut unplaced = Some(head);
                with_registry(|r| {
                    if let Some(waiter) = unplaced.take() {
                        unplaced = r.push_front(db, name, waiter);
                    }
                });
                if let Some(waiter) = unplaced {
                    cancel(waiter, Outcome::Error(QUEUE_BUSY));
                }
            }
        }
    };
    if line::serve(|| with_registry(|r| r.take_head(db, name)).flatten(), offer, put_back) && arm_here.get() {
        arm_lease(db, name, next_check(key));
    }
    if let Some(Some(timer)) = with_registry(|r| r.drop_if_empty(db, name)) {
        timer.id.stop();
    }
}

/// Counts a grant to a waiter.
fn granted_after_wait(head: &Waiter, cause: Cause) {
    let waited = clock::mono_ms().saturating_sub(head.joined_mono_ms);
    stats::waits(stats::HoldKind::of_request(&head.request)).record(waited);
    stats::WAIT_GRANTED.bump();
    cause.counter().bump();
}

/// Offers its set to a set first in all its lines, taken out of every one
/// of them, while `key` (open, named `key_name`) is one of its members:
/// the set is granted whole through the same grant as LOCK.MACQUIRE's,
/// with nobody waiting ahead of it. Granted (or turned away), it has left
/// every line, and the others it headed are served again; held, it goes
/// back first in all of them, and each member still held is looked at when
/// its lease ends.
fn offer_set(ctx: Ctx, key: &Key, db: c_int, key_name: &Arg, set: SetWaiter, cause: Cause) -> Offer<Taken> {
    // The user's rights to every member, now (see `acl`).
    let refused = set.waiter.user.as_ref().and_then(|user| {
        let record = set.semaphore.as_ref().map(|(record, _)| record);
        set.keys.iter().chain(&set.guards).chain(record).find_map(|k| crate::waiters::acl::refusal(user, Arg::of(k)))
    });
    if let Some(msg) = refused {
        let keys = others(&set, key_name);
        cancel(set.waiter, Outcome::Refused(msg));
        set_left(db, keys);
        return Offer::Left;
    }
    // This member through the handle the caller holds; the others opened
    // here (a second handle to the same key would miss what the first
    // writes).
    // The guards and the semaphore member, last, are never the line served.
    let record = set.semaphore.as_ref().map(|(record, _)| record);
    let named: Vec<&HeldString> = set.keys.iter().chain(&set.guards).chain(record).collect();
    let opened: Vec<Option<Key>> =
        named.iter().map(|k| (k.bytes() != key_name.bytes()).then(|| ctx.open_key(Arg::of(k), KeyMode::Write))).collect();
    let members: Vec<(&Key, &Arg)> = named.iter().zip(&opened).map(|(k, o)| (o.as_ref().unwrap_or(key), Arg::of(k))).collect();
    for (member, name) in &members {
        if name.bytes() != key_name.bytes() {
            crate::change::restore_rescued(ctx, member, name);
        }
    }
    let waiter = &set.waiter;
    let attempt =
        super::multi::grant_set(ctx, &members, Arg::of(&waiter.owner), &set.set_request(), |_| false, waiter.session_client, true);
    let outcome = match attempt {
        Attempt::Granted(granted) => {
            for (member, name) in &members {
                lease_changed(ctx, member, name);
            }
            granted_after_wait(waiter, cause);
            Outcome::Token(granted.token)
        }
        Attempt::Held => {
            let lined = set.keys.len().min(members.len());
            for (member, name) in &members[..lined] {
                arm_held(member, db, name.bytes());
            }
            if let Some(first) = set.keys.first() {
                let (asked, n) = (set.set_request(), members.len());
                for (i, (member, _)) in members.iter().enumerate().skip(lined) {
                    arm_for_unlined(member, waiter.owner.bytes(), Some(asked.member(i, n)), db, first.bytes());
                }
            }
            drop(members);
            return Offer::Waits(Taken::Set(set));
        }
        Attempt::WrongType => Outcome::WrongType,
        Attempt::Failed(msg) => Outcome::Error(msg),
        Attempt::Refused(msg) => Outcome::Refused(msg),
    };
    drop(members);
    let keys = others(&set, key_name);
    match outcome {
        Outcome::Token(_) => unblock_waiter(set.waiter, outcome),
        _ => cancel(set.waiter, outcome),
    }
    set_left(db, keys);
    Offer::Left
}

/// The sets waiting strictly (`SEMAPHORE n LARGEST m`) for a permit of
/// the semaphore `record` (open, named `record_name`) under terms a
/// resize just changed: each is answered at once with the refusal naming
/// the new terms (`LIMIT K M`, as a request asked now would be), out of
/// every line, so that its client asks again under them. Left in line, it
/// would hold back the requests asked under the new terms behind it until
/// its locks moved or its WAIT ended, and be refused only then. A resize
/// is an operator's command: looking at every set waiting is its cost, not
/// a grant's.
pub(super) fn refuse_stale_sets(ctx: Ctx, record: &Key, record_name: &Arg) {
    let Some((limit, largest)) = grants::semaphore_terms(record) else { return };
    let db = ctx.selected_db();
    let stale = with_registry(|r| {
        let asks_here = |set: &SetWaiter| {
            let on_record = set.semaphore.as_ref().is_some_and(|(name, _)| name.bytes() == record_name.bytes());
            set.db == db && on_record
        };
        r.sets
            .iter()
            .filter(|(_, set)| asks_here(set))
            .filter(|(_, set)| matches!((&set.semaphore, set.largest), (Some((_, l)), Some(m)) if (*l, m) != (limit, largest)))
            .map(|(id, _)| *id)
            .collect::<Vec<usize>>()
    });
    for id in stale.unwrap_or_default() {
        let client = id as *mut RedisModuleBlockedClient;
        if let Some(Some((waiter, stopped, new_heads))) = with_registry(|r| r.remove_client(client)) {
            left_lines(stopped, new_heads);
            cancel(waiter, Outcome::Refused(change::grant::limit_refused(limit, largest)));
        }
    }
}

/// A set's members other than `key_name`.
fn others(set: &SetWaiter, key_name: &Arg) -> Vec<Box<[u8]>> {
    set.keys.iter().filter(|k| k.bytes() != key_name.bytes()).map(|k| k.bytes().into()).collect()
}

/// A set left its other members' lines (it headed them all): each is
/// dropped when empty, else served again (the next head may be another
/// set now first in all its lines, or a reader beside a shared set).
fn set_left(db: c_int, keys: Vec<Box<[u8]>>) {
    let mut stopped = Vec::new();
    let mut waited = Vec::new();
    with_registry(|r| {
        for key in keys {
            match r.drop_if_empty(db, &key) {
                Some(timer) => stopped.push(timer),
                None if r.queue_mut(db, &key).is_some() => waited.push((db, key)),
                None => {}
            }
        }
    });
    left_lines(stopped, waited);
}

/// How long after a lease's end its waiters are served. Both clocks are
/// read in whole milliseconds, so the wall clock may show the key's TTL
/// reached but not passed one millisecond after the monotonic end; Redis
/// expires a key only once its TTL has passed. Two milliseconds later the
/// key is always expired when the handoff opens it, so the `expired` event
/// comes before the grant, as for any other expiry.
pub(super) const LEASE_END_MARGIN_MS: i64 = 2;

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
    let now = crate::server::clock::now();
    if key.kind() != KeyKind::String {
        return check_due(grants::lease_left(key, now), now);
    }
    let poll = now.mono.saturating_add(PLAIN_STRING_POLL_MS);
    let deadline = key.deadline_ms().map(|d| now.mono.saturating_add(d.saturating_sub(now.wall)).saturating_add(1));
    Some(deadline.map_or(poll, |d| d.min(poll)))
}

/// When to look at a line whose first lease (of a lock of this module's
/// type) ends at `end`: just past it.
fn check_at(end: i64, now: Now) -> Option<i64> {
    check_due(Lease { end, mirror: NO_TTL }.left(now), now)
}

fn check_due(left: Left, now: Now) -> Option<i64> {
    match left {
        Left::Ms(ms) => Some(now.mono.saturating_add(ms).saturating_add(LEASE_END_MARGIN_MS)),
        Left::Forever => None,
        Left::Ended => Some(now.mono),
    }
}

/// A waiter that could not be put back in its line (its registry in use
/// further up the stack) is answered this rather than left blocked.
const QUEUE_BUSY: &CStr = c"ERR lock queue busy, retry";

/// Ends a wait without a grant or a timeout.
pub(super) fn cancel(waiter: Waiter, outcome: Outcome) {
    stats::WAIT_CANCELLED.bump();
    unblock_waiter(waiter, outcome);
}

/// Ends a wait that is out of the registry: its timer goes, its answer is
/// handed to Redis.
fn unblock_waiter(waiter: Waiter, outcome: Outcome) {
    if let Some(id) = waiter.deadline {
        id.stop();
    }
    unblock(waiter.client, outcome);
}

pub(super) fn unblock(client: *mut RedisModuleBlockedClient, outcome: Outcome) {
    api::unblock::<Wait>(client, Some(outcome));
}

/// A waiter's blocked client.
struct Wait;

impl api::Blocking for Wait {
    type Outcome = Outcome;

    fn reply(ctx: Ctx, outcome: Option<&Outcome>) -> c_int {
        on_reply(ctx, outcome)
    }

    fn disconnected(client: *mut RedisModuleBlockedClient) {
        on_disconnect(client);
    }
}

fn on_reply(ctx: Ctx, outcome: Option<&Outcome>) -> c_int {
    match outcome {
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
fn on_disconnect(client: *mut RedisModuleBlockedClient) {
    if let Some(Some((waiter, stopped, new_heads))) = with_registry(|r| r.remove_client(client)) {
        left_lines(stopped, new_heads);
        if let Some(id) = waiter.deadline {
            id.stop();
        }
        stats::WAIT_CANCELLED.bump();
        api::unblock::<Wait>(client, None);
    }
}
