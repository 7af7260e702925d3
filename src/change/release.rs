//! A release by its owner (`LOCK.RELEASE`, also as the master's stream or
//! the AOF replays it): the hold ends, the key goes with its last holder,
//! and the caller serves the oldest waiters in the same command.

use super::binding::unbind;
use super::{replays, Line};
use crate::api::{Arg, Ctx, Key};
use crate::core::grant;
use crate::core::lease::Now;
use crate::core::token::Token;
use crate::keys::grants::{one_holder, slot, Look, Slot};
use crate::keys::value;
use crate::replication::propagate::{self, Event};
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
    super::ended::expire_ended_holders(ctx, key, key_name, now);
    let ending = end_of(key, owner, now, look);
    match ending {
        Ending::WrongType => return Released::WrongType,
        Ending::NotHeld => {
            stats::RELEASE_REFUSED.bump();
            return Released::NotHeld;
        }
        Ending::Exclusive { .. } | Ending::PlainString | Ending::Shared { .. } => {}
    }
    stats::RELEASE_DONE.bump();
    // How long it was held (a replica replaying its master's release saw
    // the hold start only when it applied it).
    if look != Look::AsStored {
        ending.record(now);
    }
    unbind(ctx, key_name, owner);
    propagate::event(ctx, key_name, Event::Release, owner, ending.token(), b"");
    match ending {
        // The key goes with the last holder, and that travels as DEL:
        // holders whose lease ended here may still be stored on a
        // replica, which must drop the key all the same.
        Ending::Shared { last: true, .. } => {
            value::delete(key);
            propagate::released_last(ctx, key_name);
        }
        Ending::Shared { last: false, .. } => propagate_release(ctx, key_name, owner, by),
        _ => {
            value::delete(key);
            propagate_release(ctx, key_name, owner, by);
        }
    }
    Released::Done
}

/// What ending `owner`'s hold at a key decided: the one release decision
/// (`end_of`), for a release by its owner and for a closed connection's
/// hold (`disconnect`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Ending {
    WrongType,
    /// `owner` holds nothing running there (another owner does, or nobody).
    NotHeld,
    /// Its exclusive hold, held since `since` (monotonic), ends: the key
    /// goes.
    Exclusive {
        since: i64,
        token: Token,
    },
    /// A plain-string lock whose value is `owner` ends: the key goes. (Its
    /// owner's release ends it; a closed connection's hold never is one.)
    PlainString,
    /// One holder of a group left, held since `since` if its lease still
    /// ran; `last`: nobody holds the group now, the key goes.
    Shared {
        since: Option<i64>,
        kind: HoldKind,
        last: bool,
        token: Token,
    },
}

impl Ending {
    /// The token of the hold that ended (0: a plain-string lock's, or
    /// nothing ended).
    pub(super) fn token(self) -> Token {
        match self {
            Ending::Exclusive { token, .. } | Ending::Shared { token, .. } => token,
            Ending::PlainString | Ending::NotHeld | Ending::WrongType => 0,
        }
    }
}

impl Ending {
    /// Records how long the hold that ended was held (what INFO shows).
    pub(super) fn record(self, now: Now) {
        match self {
            Ending::Exclusive { since, .. } => stats::holds(HoldKind::Exclusive).record(now.mono.saturating_sub(since)),
            Ending::Shared { since: Some(since), kind, .. } => stats::holds(kind).record(now.mono.saturating_sub(since)),
            _ => {}
        }
    }
}

/// Whether `owner`'s hold at `key` ends now, and ends it in a group: the
/// one decision of a release, by the core's rules (`grant::release_exclusive`
/// over the one-holder view; `Holding::release`, or `remove` as stored,
/// for a group). `look`: leases as a command judges them, or as stored
/// (the master's stream and the AOF replay what the master decided).
pub(super) fn end_of(key: &Key, owner: &[u8], now: Now, look: Look) -> Ending {
    match slot(key, now, look) {
        Slot::Shared(group) => {
            let since = group.holding.holder(owner).filter(|h| h.end > now.mono).map(|h| h.since);
            let token = group.holding.holder(owner).map_or(0, |h| h.token);
            let released = match look {
                Look::AsStored => group.holding.remove(owner),
                _ => group.holding.release(owner, now.mono),
            };
            if !released {
                return Ending::NotHeld;
            }
            Ending::Shared { since, kind: HoldKind::of_group(group.holding.kind), last: group.holding.is_free(), token }
        }
        held => match (one_holder(&held, owner).map(grant::release_exclusive), &held) {
            (None, _) => Ending::WrongType,
            (Some(false), _) => Ending::NotHeld,
            (Some(true), Slot::Held(lock)) => Ending::Exclusive { since: lock.since(), token: lock.token() },
            (Some(true), _) => Ending::PlainString,
        },
    }
}
