//! Whether anything can receive what this server propagates: an AOF,
//! replicas, or a replication backlog a replica may resume from.
//!
//! Redis drops a propagated command when none of them is there (its
//! `shouldPropagate`: AOF off, and no backlog nor replica). Building the
//! exact `LOCK.APPLY` of a grant then costs more than the grant itself (a
//! command lookup by name and an argument vector per call), for nothing.
//! While nothing listens, a grant made by the `LOCK.ACQUIRE` being
//! executed is therefore propagated verbatim, which Redis drops just the
//! same, and which still counts the change for the `save` rules.
//!
//! "Nothing listens" must never be believed one command too long. It is
//! learnt at load, and given up for good (until a restart) at the first of:
//! - a fork: every full sync of a replica snapshots the data in a child,
//!   and the commands after the fork are what the replica is sent; an AOF
//!   switched on at runtime starts with a rewrite in a child too, or after
//!   the child running then;
//! - a role change: a replica keeps its backlog when promoted, and its own
//!   replicas resume from it;
//! - the end of a load that left an AOF on, a backlog (a master restarted
//!   from an RDB with its replication offsets lets its replicas resume),
//!   replicas or the replica role.
//!
//! Between a replica's SYNC and its fork, Redis fills the new backlog
//! without us: no replica can resume from there, since the first one's
//! offset starts at the fork and those commands are in its snapshot.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::api::{ctx_flags, Ctx, ServerInfo};

/// Nothing can receive propagated commands. False, the safe answer, until
/// `learn` has looked.
static UNHEARD: AtomicBool = AtomicBool::new(false);

/// Whether a propagated command can reach an AOF or a replica now.
#[inline]
pub fn heard() -> bool {
    !UNHEARD.load(Ordering::Relaxed)
}

/// At load: nothing listens if the AOF is off and this master has no
/// backlog and no replica.
pub fn learn(ctx: Ctx) {
    UNHEARD.store(!listened_to(ctx), Ordering::Relaxed);
}

/// At the end of a load, which can restore a backlog: heard from now on if
/// anything listens.
pub fn loaded(ctx: Ctx) {
    if listened_to(ctx) {
        heard_from_now_on();
    }
}

/// A fork or a role change: heard from now on.
pub fn heard_from_now_on() {
    UNHEARD.store(false, Ordering::Relaxed);
}

fn listened_to(ctx: Ctx) -> bool {
    if ctx.has_flags(ctx_flags::AOF | ctx_flags::SLAVE) {
        return true;
    }
    let replication = ServerInfo::read(ctx, c"replication");
    // Unknown counts as listened to.
    let backlog = replication.integer(c"repl_backlog_active").unwrap_or(1);
    let replicas = replication.integer(c"connected_slaves").unwrap_or(1);
    backlog != 0 || replicas != 0
}
