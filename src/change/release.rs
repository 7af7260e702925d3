//! A release by its owner (`LOCK.RELEASE`, also as the master's stream or
//! the AOF replays it): the hold ends, the key goes with its last holder,
//! and the caller serves the oldest waiters in the same command.

use super::binding::unbind;
use super::{replays, Line};
use crate::api::{Arg, Ctx, Key};
use crate::core::grant;
use crate::core::lease::Now;
use crate::keys::grants::{one_holder, slot, Look, Slot};
use crate::keys::group::Group;
use crate::keys::value;
use crate::replication::propagate;
use crate::server::stats::{self, HoldKind};

/// What a release came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Released {
    /// The hold ended.
    Done,
    /// `owner` holds nothing there (another owner does, or nobody).
    NotHeld,
    WrongType,
}

impl Released {
    /// What the release asks of the key's line: a hold that ended lets
    /// whoever waits go ahead.
    pub fn line(self) -> Line {
        match self {
            Released::Done => Line::Freed,
            Released::NotHeld | Released::WrongType => Line::Untouched,
        }
    }
}

/// Ends `owner`'s hold at `key` (open for writing, named `key_name`), by
/// the LOCK.RELEASE being executed (it travels verbatim). A lock Redis
/// removed while its lease ran is put back first by the caller
/// (`restore_rescued`), and `Released::Done` asks it to serve the key's
/// line (`Released::line`).
pub fn release(ctx: Ctx, key: &Key, key_name: &Arg, owner: &[u8]) -> Released {
    release_by(ctx, key, key_name, owner, By::Command)
}

/// `release` of one member of a set (`LOCK.MRELEASE`, or a set's grant
/// given back): it travels as the `LOCK.RELEASE key owner` of that
/// member, all of them in the command's one MULTI/EXEC.
pub fn release_member(ctx: Ctx, key: &Key, key_name: &Arg, owner: &[u8]) -> Released {
    release_by(ctx, key, key_name, owner, By::Member)
}

/// Who releases: the command being executed, or one member of a set.
#[derive(Clone, Copy, PartialEq, Eq)]
enum By {
    Command,
    Member,
}

/// A hold that ended (not the group's last holder) leaves the command.
fn propagate_release(ctx: Ctx, key_name: &Arg, owner: &[u8], by: By) {
    match by {
        By::Command => propagate::released(ctx, key_name),
        By::Member => propagate::released_by_server(ctx, key_name, owner),
    }
}

/// The release.
fn release_by(ctx: Ctx, key: &Key, key_name: &Arg, owner: &[u8], by: By) -> Released {
    let now = crate::server::clock::now();
    let look = if replays(ctx) { Look::AsStored } else { Look::Held };
    if let Slot::Shared(group) = slot(key, now, look) {
        return release_shared(ctx, key, key_name, owner, group, now, look, by);
    }
    let held = slot(key, now, look);
    let since = match &held {
        Slot::Held(lock) => Some(lock.since()),
        _ => None,
    };
    match one_holder(&held, owner).map(grant::release_exclusive) {
        None => return Released::WrongType,
        Some(false) => {
            stats::RELEASE_REFUSED.bump();
            return Released::NotHeld;
        }
        Some(true) => {}
    }
    stats::RELEASE_DONE.bump();
    // How long it was held (a replica replaying its master's release saw
    // the hold start only when it applied it).
    if let Some(since) = since.filter(|_| look != Look::AsStored) {
        stats::holds(HoldKind::Exclusive).record(now.mono.saturating_sub(since));
    }
    unbind(ctx, key_name, owner);
    value::delete(key);
    propagate_release(ctx, key_name, owner, by);
    Released::Done
}

/// Ends one shared holder's hold (`Holding::release`, or `remove` as
/// stored). The key goes with the last holder, and that travels as DEL:
/// holders whose lease ended here may still be stored on a replica, which
/// must drop the key all the same.
#[allow(clippy::too_many_arguments)]
fn release_shared(ctx: Ctx, key: &Key, key_name: &Arg, owner: &[u8], group: &mut Group, now: Now, look: Look, by: By) -> Released {
    let since = group.holding.holder(owner).filter(|h| h.end > now.mono).map(|h| h.since);
    let released = match look {
        Look::AsStored => group.holding.remove(owner),
        _ => group.holding.release(owner, now.mono),
    };
    if !released {
        stats::RELEASE_REFUSED.bump();
        return Released::NotHeld;
    }
    stats::RELEASE_DONE.bump();
    if let Some(since) = since.filter(|_| look != Look::AsStored) {
        stats::holds(HoldKind::of_group(group.holding.kind)).record(now.mono.saturating_sub(since));
    }
    unbind(ctx, key_name, owner);
    if group.holding.holders.is_empty() {
        value::delete(key);
        propagate::released_last(ctx, key_name);
    } else {
        propagate_release(ctx, key_name, owner, by);
    }
    Released::Done
}
