//! A lock set exactly as given, decided elsewhere: `replicated` (LOCK.APPLY,
//! the master's grant or this server's AOF, never refused for its token)
//! and `restore` (a lock Redis removed while its lease ran, put back, see
//! `rescue`). No grant rule is asked; the holders are set as they were
//! granted (`Holding::replay`, `Holding::expire`).

use std::ffi::CStr;

use crate::api::{self, unix_millis, Arg, Ctx, Key};
use crate::args;
use crate::core::grant::Holder;
use crate::core::lease::{self, Lease, Now, NO_TTL};
use crate::keys::group::{self, Group};
use crate::keys::value::{self, Exclusive};
use crate::replication::propagate::{self, SharedTerms};
use crate::server::fencing::COUNTER;
use crate::server::stats;

use super::{NOT_STORED, NO_LEASE};

/// Sets `key` (open for writing) to exactly the lock `req` carries, as
/// its master granted it, and passes it on. The lock is stored whatever
/// the local clock says: this replays what the master did at this offset.
/// A deadline that has passed here is stored as it is (Redis expires the
/// key on the master's DEL, or once loading ends), so a later PEXPIREAT
/// from an extension still finds it.
pub fn replicated(ctx: Ctx, key: &Key, req: &args::Apply<'_, Arg>) -> Result<(), &'static CStr> {
    // This server's own data (its AOF) or its master's grant: the master
    // bounded the token when a client brought it, and a token at clock +
    // lead is normal after a FENCE write-back or a promotion. Refusing it
    // here for the local clock would drop a lock a client holds.
    COUNTER.observe(req.token);
    if let Some(shared) = req.shared {
        replicated_shared(ctx, key, req, shared)?;
    } else {
        // The lease runs on this server's monotonic clock from its
        // wall-clock deadline read now; an AOF rewrite's form (0) is
        // followed by Redis's PEXPIREAT, and the lease is taken from that TTL.
        let lease = if req.deadline_ms != 0 { Lease::until(Some(req.deadline_ms), crate::server::clock::now()) } else { Lease::UNKNOWN };
        let lock = Exclusive::with_value(req.owner, req.value, req.token, lease, crate::server::clock::mono_ms());
        if !lock.is_some_and(|lock| value::store(key, lock)) {
            return Err(NOT_STORED);
        }
        if req.deadline_ms != 0 && !set_replayed_deadline(ctx, key, req.key, req.deadline_ms) {
            return Err(NO_LEASE);
        }
    }
    propagate::applied(ctx, req.key);
    Ok(())
}

/// One shared holder as its master has it: added to the key's group, or
/// its lease and token replaced; a key holding anything else (the
/// exclusive lock it was downgraded from) becomes a new group. The key's
/// TTL is the master's.
fn replicated_shared(ctx: Ctx, key: &Key, req: &args::Apply<'_, Arg>, shared: args::ApplyShared) -> Result<(), &'static CStr> {
    let now = crate::server::clock::now();
    let end = if req.deadline_ms == 0 { lease::NO_END } else { Lease::until(Some(req.deadline_ms), now).end };
    let fits = value::group_at(key).is_some_and(|g| g.limit() == shared.limit);
    if !fits && !value::store_group(key, Group::new(Group::kind_of_limit(shared.limit))) {
        return Err(NOT_STORED);
    }
    let group = value::group_at(key).ok_or(NOT_STORED)?;
    group.holding.replay_valued(req.owner, req.value, req.token, end, shared.permits, now.mono);
    group.holding.mark_if_over_limit();
    group.mirrored(if shared.key_deadline_ms == 0 { NO_TTL } else { shared.key_deadline_ms });
    if shared.key_deadline_ms != 0 && !set_replayed_deadline(ctx, key, req.key, shared.key_deadline_ms) {
        return Err(NO_LEASE);
    }
    Ok(())
}

/// Sets a replayed deadline exactly, also one already past. Redis 7.0 can
/// only express that through PEXPIREAT itself (a module ttl cannot be
/// negative); it keeps such a key on a replica and while loading.
fn set_replayed_deadline(ctx: Ctx, key: &Key, key_name: &Arg, deadline_ms: i64) -> bool {
    // A margin of a tick: `expire_at` must not see the deadline pass.
    if api::sets_past_deadlines() || deadline_ms > unix_millis().saturating_add(1) {
        key.expire_at(deadline_ms)
    } else {
        ctx.pexpireat_via_call(key_name, deadline_ms)
    }
}

/// Puts back at `key` (open for writing, empty) the lock Redis removed
/// while its lease ran: `holders` as they held it (`shared`: a group's
/// limit, else the one exclusive holder, with `text`, its value), those
/// whose lease still runs at `now`; each travels as the grant it was (and
/// a resized semaphore's mark, `shared.1` (its largest limit), as
/// LOCK.RESIZE after them: to the largest, then to the limit, when they
/// differ).
/// False when the key could not be written, which leaves it as it was.
#[allow(clippy::too_many_arguments)]
pub fn restore(
    ctx: Ctx,
    key: &Key,
    key_name: &Arg,
    holders: &[Holder<group::Owner>],
    shared: (Option<u32>, Option<u32>),
    text: &[u8],
    now: Now,
) -> bool {
    let (shared, resized) = shared;
    let (stored, mirror) = match shared {
        None => {
            let Some(holder) = holders.first() else { return false };
            let lease = Lease { end: holder.end, mirror: NO_TTL }.remirrored(now);
            let lock = Exclusive::with_value(&holder.owner, text, holder.token, lease, holder.since);
            (lock.is_some_and(|lock| value::store(key, lock)), lease.mirror)
        }
        Some(limit) => {
            let mut restored = Group::new(Group::kind_of(limit, resized));
            restored.holding.holders = holders.to_vec();
            restored.holding.expire(now.mono);
            let mirror = restored.key_deadline(now);
            restored.mirrored(mirror);
            (value::store_group(key, restored), mirror)
        }
    };
    // Without its TTL the key would stay forever.
    if !stored || (mirror != NO_TTL && !key.expire_at(mirror)) {
        if stored {
            value::delete(key);
        }
        return false;
    }
    stats::LOCKS_RESTORED.bump();
    for holder in holders.iter().filter(|h| h.end > now.mono) {
        let (deadline, terms) = match shared {
            None => (mirror, None),
            Some(limit) => {
                let terms = SharedTerms { limit, key_deadline_ms: mirror, permits: holder.permits };
                (lease::wall_deadline(holder.end, now), Some(terms))
            }
        };
        // A shared holder's value is its own; an exclusive one's is `text`.
        let value = if shared.is_some() { holder.owner.value() } else { text };
        propagate::holder_restored(ctx, key_name, &holder.owner, holder.token, deadline, terms, value);
    }
    if let (Some(limit), Some(largest)) = (shared, resized) {
        if largest > limit {
            propagate::resize_restored(ctx, key_name, crate::args::RESIZE, largest);
        }
        propagate::resize_restored(ctx, key_name, crate::args::RESIZE, limit);
    }
    propagate::restored(ctx, key_name);
    true
}
