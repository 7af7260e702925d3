//! A revocation (`LOCK.REVOKE`): an operator ends a hold its owner did
//! not give back, under a token issued for it. One owner's hold ends as
//! its release would (the same decision, `release::end_of`); every hold
//! ends with the key. Each is unbound from its connection and remembered
//! (`server::revoked`) so its owner's LOCK.EXTEND can answer `REVOKED`.
//! The command is never propagated itself (a replica would issue its own
//! token): a holder that leaves others travels as the `LOCK.RELEASE key
//! owner` a client would send, a key that goes as DEL. The caller serves
//! the key's line.

use super::binding::unbind;
use super::release::{end_of, Ending};
use crate::api::{Arg, Ctx, Key};
use crate::core::lease::{Lease, Now};
use crate::core::token::Token;
use crate::keys::grants::{slot, Look, Slot};
use crate::keys::value;
use crate::replication::propagate::{self, Event};
use crate::server::{revoked, stats};

/// What a revocation came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Revoked {
    /// This many holds ended (0: nobody, or not that owner, held it).
    Ended(usize),
    WrongType,
}

/// Ends the hold of `owner` (`None`: every hold) at `key` (open for
/// writing, named `key_name`, a lock Redis removed put back by the
/// caller), revoked under `token`.
pub fn revoke(ctx: Ctx, key: &Key, key_name: &Arg, owner: Option<&[u8]>, token: Token, now: Now) -> Revoked {
    super::ended::expire_ended_holders(ctx, key, key_name, now);
    // Who holds it now, with when each lease ends.
    let held: Vec<(Box<[u8]>, i64)> = match slot(key, now, Look::Held) {
        Slot::WrongType => return Revoked::WrongType,
        Slot::Free => Vec::new(),
        Slot::Held(lock) => vec![(Box::from(&*lock.owner()), lock.lease().end)],
        Slot::Shared(group) => group.live(now).map(|h| (Box::from(&*h.owner), h.end)).collect(),
        Slot::PlainString(holder) => vec![(Box::from(holder), Lease::until(key.deadline_ms(), now).end)],
    };
    let ended: Vec<(&[u8], i64)> = match owner {
        // One holder: as its release would end it.
        Some(owner) => held
            .iter()
            .filter(|(holder, _)| **holder == *owner)
            .filter(|(holder, _)| end_hold(ctx, key, key_name, holder, now))
            .map(|(holder, end)| (&**holder, *end))
            .collect(),
        // Every holder: the key goes at once (a release per holder would
        // look the group up again for each, quadratic in its holders).
        None if held.is_empty() => Vec::new(),
        None => {
            for (holder, _) in &held {
                stats::HOLDS_REVOKED.bump();
                unbind(ctx, key_name, holder);
            }
            value::delete(key);
            propagate::revoked_last(ctx, key_name);
            held.iter().map(|(holder, end)| (&**holder, *end)).collect()
        }
    };
    for (holder, _) in &ended {
        propagate::event(ctx, key_name, Event::Revoke, holder, token, b"");
    }
    if !ended.is_empty() {
        revoked::remember(ctx.selected_db(), key_name.bytes(), ended.iter().copied(), token, now.mono);
        propagate::revoked(ctx, key_name);
    }
    Revoked::Ended(ended.len())
}

/// Ends `holder`'s hold as a release would, and sends its effect on.
fn end_hold(ctx: Ctx, key: &Key, key_name: &Arg, holder: &[u8], now: Now) -> bool {
    let ending = end_of(key, holder, now, Look::Held);
    if matches!(ending, Ending::NotHeld | Ending::WrongType) {
        return false;
    }
    stats::HOLDS_REVOKED.bump();
    // Unbound first: a SESSION hold's connection closing later ends
    // nothing (and a release unbinds before deleting too).
    unbind(ctx, key_name, holder);
    match ending {
        Ending::Shared { last: false, .. } => propagate::revoked_holder(ctx, key_name, holder),
        // The key goes: as DEL, which removes it on a replica whatever
        // holders it still stores there.
        _ => {
            value::delete(key);
            propagate::revoked_last(ctx, key_name);
        }
    }
    true
}
