//! Queueing a waiter, serving the head of a key's queue, and ending a
//! wait: what a blocked client is answered, and what its disconnect does
//! (`Wait`, whose functions `api`'s blocked-client trampolines call).

use super::*;

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
    let client = api::block::<Wait>(ctx);
    if client.is_null() {
        return ctx.reply_error(c"ERR could not block the client");
    }
    let db = ctx.selected_db();
    let (key_held, owner_held) = (key.hold(), owner.hold());
    if !key_held.is_valid() || !owner_held.is_valid() {
        unblock(client, Outcome::Error(c"ERR could not keep the request"));
        return crate::api::OK;
    }
    // Beyond a year is forever; it also keeps Redis's timer arithmetic
    // (microseconds) from overflowing.
    let deadline = (timeout_ms > 0 && timeout_ms <= crate::server::config::DURATION_LIMIT)
        .then(|| api::after_with(timeout_ms, on_wait_timeout, client as usize))
        .flatten();
    let joined_mono_ms = clock::mono_ms();
    let due_mono_ms = joined_mono_ms.saturating_add(timeout_ms);
    let user = crate::waiters::acl::current_user(ctx);
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
            id.stop();
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
    crate::change::rescued::restore_rescued(ctx, key, key_name);
    // In the line's order (`core::line::serve`), each head taken out of the
    // registry while Redis is called (replication and notifications may
    // re-enter this module). The head is first in line: nobody waits ahead
    // of it. Shared heads are granted one after the other until one does
    // not fit.
    let offer = |head: Waiter| {
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
        match change::handoff(ctx, key, db, key_name, Arg::of(&head.owner), &head.request, head.session_client) {
            Attempt::Granted(granted) => {
                let waited = clock::mono_ms().saturating_sub(head.joined_mono_ms);
                stats::waits(stats::HoldKind::of_request(&head.request)).record(waited);
                stats::WAIT_GRANTED.bump();
                cause.counter().bump();
                unblock_waiter(head, Outcome::Token(granted.token));
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
        timer.id.stop();
    }
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
    if let Some(Some((waiter, stopped, new_head))) = with_registry(|r| r.remove_client(client)) {
        if let Some(timer) = stopped {
            timer.id.stop();
        }
        if let Some((db, key)) = new_head {
            arm(db, &key, clock::mono_ms());
        }
        if let Some(id) = waiter.deadline {
            id.stop();
        }
        stats::WAIT_CANCELLED.bump();
        api::unblock::<Wait>(client, None);
    }
}
