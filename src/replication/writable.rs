//! Whether the module may write on its own, outside a client's command.
//!
//! A handoff driven by a timer, an unlink callback or a server event is a
//! write no client asked for at that moment. It must do only what a
//! client's `LOCK.ACQUIRE` could do then: Redis refuses that command on a
//! replica, while writes are paused, under OOM (it is `deny-oom`), when
//! `min-replicas-to-write` is unmet, and while a disk error stops writes.
//! Writing during a pause is worse than unfair: Redis does not delete
//! expired keys then, so a lock that looks absent is still stored, and
//! storing a new one over it trips Redis's own assertion.
//!
//! This runs only on those rare paths (never on a command's hot path), so
//! it reads the server's state through INFO and CONFIG.

use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::api::{self, ctx_flags, Ctx, ServerInfo};

/// This instance is a replica. Kept from the role-change event (and read
/// once at load), so a write command on a master pays one load for it
/// instead of the server's whole context-flags computation.
static REPLICA: AtomicBool = AtomicBool::new(false);

/// At load: a server started with `replicaof` is a replica before any
/// role-change event.
pub fn learn_role(ctx: Ctx) {
    set_replica(ctx.has_flags(ctx_flags::SLAVE));
}

pub fn is_replica() -> bool {
    REPLICA.load(Ordering::Relaxed)
}

pub fn set_replica(replica: bool) {
    REPLICA.store(replica, Ordering::Relaxed);
}

/// What a client hears when it asks a replica to take, extend or release
/// a lock: the server's own reply to a write on a read-only replica.
pub const READONLY: &CStr = c"READONLY You can't write against a read only replica.";

/// A replica never changes a lock for a client, not even with
/// `replica-read-only no`: a lock it granted is unknown to its master,
/// which can grant it to someone else, and the master's stream later
/// overwrites it anyway. Only its master's stream and loading change
/// locks there.
pub fn refuses_client_write(ctx: Ctx) -> bool {
    REPLICA.load(Ordering::Relaxed) && !ctx.has_flags(ctx_flags::REPLICATED | ctx_flags::LOADING)
}

/// Why the module may not write now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    Replica,
    Paused,
    OutOfMemory,
    NoReplicas,
    DiskError,
    ClusterDown,
}

impl Refusal {
    /// How soon to ask again. A pause is usually short and its end should
    /// be noticed at once; the others last longer.
    pub fn retry_ms(self) -> i64 {
        match self {
            Refusal::Paused => 10,
            _ => 100,
        }
    }
}

/// `None` when a grant may be written now.
pub fn refusal(ctx: Ctx) -> Option<Refusal> {
    let flags = ctx.flags();
    if flags & ctx_flags::MASTER as i32 == 0 {
        return Some(Refusal::Replica);
    }
    if api::writes_paused() {
        return Some(Refusal::Paused);
    }
    if flags & ctx_flags::OOM as i32 != 0 {
        return Some(Refusal::OutOfMemory);
    }
    if too_few_good_replicas(ctx) {
        return Some(Refusal::NoReplicas);
    }
    if disk_error_stops_writes(ctx) {
        return Some(Refusal::DiskError);
    }
    None
}

/// `min-replicas-to-write` unmet. INFO shows the count of good replicas
/// only when the setting is on, so nothing more is read otherwise.
fn too_few_good_replicas(ctx: Ctx) -> bool {
    let Some(good) = ServerInfo::read(ctx, c"replication").integer(c"min_slaves_good_slaves") else {
        return false;
    };
    let wanted = ctx.config_get(c"min-replicas-to-write", crate::args::parse_i64).flatten().unwrap_or(0);
    good < wanted
}

/// The disk errors for which Redis refuses write commands (MISCONF).
fn disk_error_stops_writes(ctx: Ctx) -> bool {
    let persistence = ServerInfo::read(ctx, c"persistence");
    if persistence.integer(c"aof_enabled") == Some(1) && persistence.text_is(c"aof_last_write_status", c"err") {
        return true;
    }
    persistence.text_is(c"rdb_last_bgsave_status", c"err")
        && ctx.config_get(c"stop-writes-on-bgsave-error", |v| v == b"yes").unwrap_or(true)
        && !ctx.config_get(c"save", |v| v.is_empty()).unwrap_or(false)
}

/// Where a waited key is served from this node's point of view.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Here (always, outside Cluster).
    Local,
    /// Another node serves its slot (resharded, migrating without the
    /// key, reassigned): its waiters must go there.
    Elsewhere,
    /// The cluster is down: nobody may write; wait.
    ClusterDown,
}

/// Whether this node may hand over `key` in a Cluster. Redis answers with
/// its own redirection rules (a key of a MIGRATING slot that has left is
/// elsewhere, an IMPORTING slot is not served yet).
pub fn placement(ctx: Ctx, key: &crate::api::Arg) -> Placement {
    if ctx.flags() & ctx_flags::CLUSTER as i32 == 0 {
        return Placement::Local;
    }
    match ctx.probe_key(key) {
        Ok(()) => Placement::Local,
        Err(EPERM) => Placement::Elsewhere,
        Err(_) => Placement::ClusterDown,
    }
}

/// errno for "operation not permitted" (Linux and the BSDs agree).
const EPERM: i32 = 1;
