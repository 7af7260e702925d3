//! Which changes of a lock a quorum of servers announced: a change is
//! delivered once a quorum said it of the same hold (owner), grants in
//! token order, each once. Pure: `watch` feeds it what each server says
//! and passes the barriers it asks for.
//!
//! Why barriers: each server's announcements arrive in the order it made
//! them, but the servers' connections are read independently. A hold
//! granted after another on a quorum may be heard from a quorum first
//! (the earlier hold's announcements still queued on other connections),
//! and grants go out in token order. So a grant (or an end) found ready
//! waits until a barrier started after that passes: every subscribed
//! server confirms that what it published before is in (see
//! `transport::Barrier`). Whatever happened before the change on any
//! server is then counted, and delivered first.

use std::collections::HashMap;

use super::{Change, ChangeKind};

/// At most this many holds are remembered at once (pending grants that no
/// quorum announced yet, and delivered holds whose end is pending): the
/// ones with the smallest tokens are forgotten first, as the election's
/// tally does.
pub const MAX_PENDING: usize = 64;

/// What one server said of one hold.
#[derive(Clone, Debug, Default)]
struct Said {
    /// Its first grant: token and kind (`Grant` or `Handoff`).
    first: Option<(i64, ChangeKind)>,
    /// The largest token it granted the hold (a write-back raises it).
    token: i64,
    /// The smallest token a grant raised the hold to while it held it:
    /// the client's write-back (`FENCE T`, answered with T, or a fresh
    /// token above it), so T is known.
    raised: Option<i64>,
    /// The value announced with its latest grant.
    value: Option<String>,
    /// How the hold ended there, if it did.
    ended: Option<ChangeKind>,
    /// The deadline a cut lease ends at there (Unix ms).
    cut: Option<i64>,
    /// The value it proclaimed last.
    proclaimed: Option<Option<String>>,
}

impl Said {
    fn holds(&self) -> bool {
        self.first.is_some() && self.ended.is_none()
    }
}

/// One hold (owner) as every server said it.
#[derive(Clone, Debug)]
struct Hold {
    servers: Vec<Said>,
    /// The token its grant was delivered with; `None` before.
    delivered: Option<i64>,
    cut_delivered: bool,
    /// The value of its last proclamation delivered.
    proclaimed: Option<Option<String>>,
    /// How many barriers had passed when its grant was first found ready:
    /// it is delivered once one more has (or with a later grant that has).
    grant_seen: Option<u64>,
}

/// What `settle` found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Settled {
    /// The changes to deliver now, in order.
    pub changes: Vec<Change>,
    /// Whether a change is ready but waits for a barrier: pass one
    /// (`barrier_passed`) and settle again.
    pub waiting: bool,
}

/// Every server's announcements of one lock, counted.
pub struct Count {
    quorum: usize,
    servers: usize,
    holds: HashMap<String, Hold>,
    /// The token of the latest grant delivered.
    last_token: Option<i64>,
    /// Per limit announced by a resize, the servers that announced it
    /// since it was last delivered.
    resizes: HashMap<String, Vec<bool>>,
    /// How many barriers passed.
    barriers: u64,
}

impl Count {
    pub fn new(servers: usize, quorum: usize) -> Count {
        Count { quorum: quorum.max(1), servers, holds: HashMap::new(), last_token: None, resizes: HashMap::new(), barriers: 0 }
    }

    /// A barrier started after the last `settle` passed: every server
    /// still subscribed was heard up to it.
    pub fn barrier_passed(&mut self) {
        self.barriers += 1;
    }

    /// Server `server` announced `kind` of `owner`'s hold. Returns the
    /// changes that now reached a quorum, in the order to deliver them,
    /// with every barrier asked for passed at once (nothing more heard).
    #[cfg(test)]
    pub fn hear(&mut self, server: usize, kind: ChangeKind, token: i64, owner: &str, value: Option<String>) -> Vec<Change> {
        let mut out = self.note(server, kind, token, owner, value);
        out.extend(self.settle_through_barriers());
        out
    }

    #[cfg(test)]
    fn settle_through_barriers(&mut self) -> Vec<Change> {
        let mut out = Vec::new();
        loop {
            let settled = self.settle();
            out.extend(settled.changes);
            if !settled.waiting {
                return out;
            }
            self.barrier_passed();
        }
    }

    /// `hear` without `settle`: a resize that reached a quorum is
    /// returned, every other change waits for `settle`.
    pub fn note(&mut self, server: usize, kind: ChangeKind, token: i64, owner: &str, value: Option<String>) -> Vec<Change> {
        if server >= self.servers {
            return Vec::new();
        }
        if kind == ChangeKind::Resize {
            return self.resized(server, value);
        }
        // An ask changes no hold (and must not make one up for its owner).
        if kind == ChangeKind::Ask {
            return Vec::new();
        }
        let Some(said) = self.said(owner, server) else { return Vec::new() };
        match kind {
            ChangeKind::Grant | ChangeKind::Handoff => {
                if said.holds() && token > said.token {
                    said.raised = Some(said.raised.map_or(token, |r| r.min(token)));
                }
                if said.first.is_none() || said.ended.is_some() {
                    said.first.get_or_insert((token, kind));
                    said.ended = None;
                    said.cut = None;
                }
                said.token = said.token.max(token);
                said.value = value;
            }
            ChangeKind::Proclaim => {
                if said.first.is_none() {
                    said.first = Some((token, ChangeKind::Grant));
                    said.token = said.token.max(token);
                }
                said.proclaimed = Some(value);
            }
            ChangeKind::Cut => said.cut = value.and_then(|v| v.parse().ok()),
            ChangeKind::Release | ChangeKind::Expire | ChangeKind::Session | ChangeKind::Revoke => {
                said.ended.get_or_insert(kind);
            }
            ChangeKind::Resize | ChangeKind::Ask => {}
        }
        Vec::new()
    }

    /// Server `server` was subscribed (again) and holds `holders` (owner,
    /// token) now: a hold it no longer has ended there while it was not
    /// heard (counted as `Expire`), a holder it has is granted there.
    #[cfg(test)]
    pub fn read(&mut self, server: usize, holders: &[(String, i64)]) -> Vec<Change> {
        self.note_reading(server, holders);
        self.settle_through_barriers()
    }

    /// `read` without `settle`.
    pub fn note_reading(&mut self, server: usize, holders: &[(String, i64)]) {
        if server >= self.servers {
            return;
        }
        for (owner, hold) in self.holds.iter_mut() {
            if holders.iter().any(|(o, _)| o == owner) {
                continue;
            }
            if let Some(said) = hold.servers.get_mut(server).filter(|s| s.first.is_some() && s.ended.is_none()) {
                said.ended = Some(ChangeKind::Expire);
            }
        }
        for (owner, token) in holders {
            let Some(said) = self.said(owner, server) else { continue };
            if said.first.is_none() || said.ended.is_some() {
                said.first = Some((*token, ChangeKind::Grant));
                said.ended = None;
            }
            said.token = said.token.max(*token);
        }
    }

    /// What `server` said of `owner`'s hold, the hold remembered (making
    /// room for it) if it was not.
    fn said(&mut self, owner: &str, server: usize) -> Option<&mut Said> {
        if !self.holds.contains_key(owner) {
            self.forget_beyond(MAX_PENDING.saturating_sub(1));
            let hold = Hold {
                servers: vec![Said::default(); self.servers],
                delivered: None,
                cut_delivered: false,
                proclaimed: None,
                grant_seen: None,
            };
            self.holds.insert(owner.to_string(), hold);
        }
        self.holds.get_mut(owner)?.servers.get_mut(server)
    }

    fn resized(&mut self, server: usize, value: Option<String>) -> Vec<Change> {
        let limit = value.unwrap_or_default();
        if !self.resizes.contains_key(&limit) && self.resizes.len() >= MAX_PENDING {
            self.resizes.clear();
        }
        let servers = self.servers;
        let heard = self.resizes.entry(limit.clone()).or_insert_with(|| vec![false; servers]);
        if let Some(slot) = heard.get_mut(server) {
            *slot = true;
        }
        if heard.iter().filter(|h| **h).count() < self.quorum {
            return Vec::new();
        }
        self.resizes.remove(&limit);
        vec![Change { kind: ChangeKind::Resize, token: 0, owner: String::new(), value: Some(limit) }]
    }

    /// The changes that reached a quorum, in order: holds by token, each
    /// hold's grant before its cut, proclamation and end. A grant is
    /// delivered once a quorum announced the hold's token (see `ready`)
    /// and a barrier passed since (or with a later grant that did), so
    /// every hold granted before it is delivered first. An end is
    /// delivered once fewer than a quorum still hold a delivered hold:
    /// it needs no barrier of its own, since whatever came before it came
    /// before its grant, or belongs to a hold with a smaller token.
    pub fn settle(&mut self) -> Settled {
        let (quorum, barriers) = (self.quorum, self.barriers);
        for hold in self.holds.values_mut() {
            if hold.delivered.is_none() && hold.grant_seen.is_none() && ready(hold, quorum) {
                hold.grant_seen = Some(barriers);
            }
        }
        let passed = |seen: Option<u64>| seen.is_some_and(|seen| seen < barriers);
        // The largest token of a hold whose grant passed its barrier: every
        // pending grant a quorum announced below it is delivered first.
        let bound = self
            .holds
            .values()
            .filter(|h| h.delivered.is_none() && passed(h.grant_seen) && ready(h, quorum))
            .filter_map(|h| token_of(h, quorum))
            .max();
        let mut order: Vec<(i64, String)> = self.holds.iter().map(|(o, h)| (key_of(h, quorum), o.clone())).collect();
        order.sort();
        let mut out = Vec::new();
        for (_, owner) in order {
            let Some(hold) = self.holds.get_mut(&owner) else { continue };
            if hold.delivered.is_none() {
                let Some(token) = token_of(hold, quorum).filter(|t| bound.is_some_and(|b| *t <= b)) else { continue };
                if self.last_token.is_some_and(|last| token <= last) {
                    // A hold that reached a quorum after a later one was
                    // delivered: grants go in token order, so it never is.
                    self.holds.remove(&owner);
                    continue;
                }
                let kind = first_kind(&hold.servers);
                let value = most_said(hold.servers.iter().filter(|s| s.first.is_some()).map(|s| &s.value)).cloned().flatten();
                hold.delivered = Some(token);
                self.last_token = Some(token);
                out.push(Change { kind, token, owner: owner.clone(), value });
            }
            let Some(token) = hold.delivered else { continue };
            if !hold.cut_delivered {
                let mut cuts: Vec<i64> = hold.servers.iter().filter_map(|s| s.cut).collect();
                if cuts.len() >= quorum {
                    // The lease of a quorum ends at the quorum-th largest deadline.
                    cuts.sort_unstable_by(|a, b| b.cmp(a));
                    let at = cuts.get(quorum - 1).copied().unwrap_or_default();
                    hold.cut_delivered = true;
                    out.push(Change { kind: ChangeKind::Cut, token, owner: owner.clone(), value: Some(at.to_string()) });
                }
            }
            let live = hold.servers.iter().filter(|s| s.ended.is_none());
            let proclaimed = most_said(live.clone().filter_map(|s| s.proclaimed.as_ref()))
                .filter(|v| hold.proclaimed.as_ref() != Some(*v))
                .filter(|v| live.clone().filter(|s| s.proclaimed.as_ref() == Some(*v)).count() >= quorum)
                .cloned();
            if let Some(value) = proclaimed {
                hold.proclaimed = Some(value.clone());
                out.push(Change { kind: ChangeKind::Proclaim, token, owner: owner.clone(), value });
            }
            if hold.servers.iter().filter(|s| s.holds()).count() < quorum {
                let ends: Vec<ChangeKind> = hold.servers.iter().filter_map(|s| s.ended).collect();
                let kind = ENDS
                    .into_iter()
                    .max_by_key(|k| (ends.iter().filter(|e| *e == k).count(), std::cmp::Reverse(end_rank(*k))))
                    .unwrap_or(ChangeKind::Expire);
                out.push(Change { kind, token, owner: owner.clone(), value: None });
                self.holds.remove(&owner);
            }
        }
        // A pending hold no server holds any more, whose every token heard
        // is at or below the last grant delivered, never will be. (Not
        // judged by the token it would be delivered with now: a server
        // whose counter lags announces a small first token, and the
        // write-back that raises it to the lock's token is still to come.)
        if let Some(last) = self.last_token {
            self.holds.retain(|_, h| h.delivered.is_some() || h.servers.iter().any(Said::holds) || highest(h) > last);
        }
        let waiting = self.holds.values().any(|h| h.delivered.is_none() && !passed(h.grant_seen) && ready(h, quorum));
        Settled { changes: out, waiting }
    }

    /// Forgets holds, those with the smallest tokens first, until `keep`
    /// are left.
    fn forget_beyond(&mut self, keep: usize) {
        while self.holds.len() > keep {
            let quorum = self.quorum;
            // Holds nobody holds any more first, then pending ones, then
            // delivered ones (whose ends are still to come).
            let rank = |h: &Hold| (h.delivered.is_some(), h.servers.iter().any(Said::holds), key_of(h, quorum));
            let Some(oldest) = self.holds.iter().min_by_key(|(_, h)| rank(h)).map(|(o, _)| o.clone()) else { break };
            self.holds.remove(&oldest);
        }
    }
}

/// The ends of a hold; a tie between kinds goes to the earlier here.
const ENDS: [ChangeKind; 4] = [ChangeKind::Revoke, ChangeKind::Release, ChangeKind::Session, ChangeKind::Expire];

fn end_rank(kind: ChangeKind) -> usize {
    ENDS.iter().position(|k| *k == kind).unwrap_or(ENDS.len())
}

/// The token a hold's grant is delivered with: the largest t such that a
/// quorum of servers announced tokens >= t (the quorum-th largest);
/// `None` while fewer than a quorum announced its grant.
fn token_of(hold: &Hold, quorum: usize) -> Option<i64> {
    crate::quorum::agreed_token(hold.servers.iter().filter(|s| s.first.is_some()).map(|s| s.token), quorum)
}

/// Whether a hold's grant is ready, its token the lock's: once a quorum
/// announced it and
/// - a quorum announced tokens at or above the largest first grant of a
///   server that still holds it (then no write-back is still to come), or
/// - a quorum announced tokens at or above the smallest a write-back
///   raised a server to (the lock's token T: a write-back asks for T), or
/// - some server ended it (its client had long finished acquiring).
///
/// A server may grant after the client decided ("late", kept uncounted
/// while the lock is held) with a first token above T: without a
/// write-back to show T, such a hold waits for its first end.
fn ready(hold: &Hold, quorum: usize) -> bool {
    let Some(token) = token_of(hold, quorum) else { return false };
    let target = hold.servers.iter().filter(|s| s.ended.is_none()).filter_map(|s| s.first.map(|(t, _)| t)).max();
    let written_back = hold.servers.iter().filter_map(|s| s.raised).min();
    target.is_none_or(|target| token >= target)
        || written_back.is_some_and(|t| token >= t)
        || hold.servers.iter().any(|s| s.first.is_some() && s.ended.is_some())
}

/// The largest token any server announced for a hold.
fn highest(hold: &Hold) -> i64 {
    hold.servers.iter().filter(|s| s.first.is_some()).map(|s| s.token).max().unwrap_or(i64::MIN)
}

/// Where a hold stands in token order: its delivered token, else the one
/// it would be delivered with, else the largest any server announced.
fn key_of(hold: &Hold, quorum: usize) -> i64 {
    hold.delivered
        .or_else(|| token_of(hold, quorum))
        .or_else(|| hold.servers.iter().filter(|s| s.first.is_some()).map(|s| s.token).max())
        .unwrap_or(i64::MIN)
}

/// `Handoff` when more servers first granted the hold by serving their
/// line than by a command; a tie is a `Grant`.
fn first_kind(servers: &[Said]) -> ChangeKind {
    let firsts = servers.iter().filter_map(|s| s.first.map(|(_, k)| k));
    let (handoffs, grants) = firsts.fold((0, 0), |(h, g), k| if k == ChangeKind::Handoff { (h + 1, g) } else { (h, g + 1) });
    if handoffs > grants {
        ChangeKind::Handoff
    } else {
        ChangeKind::Grant
    }
}

/// The item said most often (the first of a tie); `None` when none.
fn most_said<'a, T: PartialEq + 'a>(items: impl Iterator<Item = &'a T> + Clone) -> Option<&'a T> {
    let mut best: Option<(&T, usize)> = None;
    for item in items.clone() {
        let n = items.clone().filter(|i| *i == item).count();
        if best.is_none_or(|(_, b)| n > b) {
            best = Some((item, n));
        }
    }
    best.map(|(item, _)| item)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ChangeKind::*;

    fn change(kind: ChangeKind, token: i64, owner: &str) -> Change {
        Change { kind, token, owner: owner.into(), value: None }
    }

    fn kinds(changes: &[Change]) -> Vec<(ChangeKind, i64, &str)> {
        changes.iter().map(|c| (c.kind, c.token, c.owner.as_str())).collect()
    }

    #[test]
    fn asks_change_nothing_a_watch_counts() {
        let mut c = Count::new(3, 2);
        // Asks of a hold never heard granted: no hold made up for the owner.
        for server in 0..3 {
            assert!(c.hear(server, Ask, 4, "a", Some("go".into())).is_empty());
        }
        assert!(c.hear(0, Release, 4, "a", None).is_empty(), "no grant was heard: nothing to end");
        assert!(c.hear(1, Release, 4, "a", None).is_empty());
        assert!(c.hear(0, Grant, 5, "b", None).is_empty());
        assert_eq!(c.hear(1, Grant, 5, "b", None), vec![change(Grant, 5, "b")]);
        assert!(c.hear(2, Grant, 5, "b", None).is_empty());
        // Asks of a held lock end nothing either.
        for server in 0..3 {
            assert!(c.hear(server, Ask, 5, "b", None).is_empty());
        }
        assert_eq!(c.hear(0, Release, 5, "b", None), vec![], "two servers still hold it");
        assert_eq!(c.hear(2, Release, 5, "b", None), vec![change(Release, 5, "b")]);
    }

    #[test]
    fn a_grant_is_delivered_once_a_quorum_holds_the_written_back_token() {
        let mut c = Count::new(5, 3);
        assert!(c.hear(0, Grant, 5, "a", None).is_empty());
        assert!(c.hear(1, Grant, 9, "a", None).is_empty());
        assert!(c.hear(2, Grant, 7, "a", None).is_empty(), "tokens 5, 9, 7: not written back yet");
        // Written back with FENCE 9: server 0 counts 10, server 2 exactly 9.
        assert!(c.hear(0, Grant, 10, "a", None).is_empty());
        assert_eq!(c.hear(2, Grant, 9, "a", None), vec![change(Grant, 9, "a")]);
        assert!(c.hear(3, Grant, 11, "a", None).is_empty(), "never twice");
        // Four servers hold it: it ends once two of them no longer do.
        assert!(c.hear(0, Release, 10, "a", None).is_empty());
        assert_eq!(c.hear(1, Release, 9, "a", None), vec![change(Release, 9, "a")], "the end carries the hold's token");
        assert!(c.hear(2, Release, 9, "a", None).is_empty(), "never twice");
        assert!(c.hear(4, Expire, 11, "a", None).is_empty(), "a late end of a hold already ended");
    }

    #[test]
    fn an_end_waits_for_its_grant_and_a_short_hold_is_still_delivered() {
        let mut c = Count::new(5, 3);
        // Servers 0 and 1 announce a's grant and end, then b's grant, before
        // server 2 announces a's: a then ended on all but one server of the
        // three that granted it.
        for s in [0, 1] {
            c.hear(s, Grant, 10, "a", None);
            c.hear(s, Release, 10, "a", None);
            assert!(c.hear(s, Handoff, 11, "b", None).is_empty());
        }
        assert_eq!(kinds(&c.hear(2, Grant, 10, "a", None)), vec![(Grant, 10, "a"), (Release, 10, "a")]);
        assert!(c.hear(2, Release, 10, "a", None).is_empty(), "never twice");
        assert_eq!(kinds(&c.hear(2, Handoff, 11, "b", None)), vec![(Handoff, 11, "b")]);
    }

    #[test]
    fn the_end_kind_is_the_one_most_servers_said() {
        let mut c = Count::new(5, 3);
        for s in 0..5 {
            c.hear(s, Grant, 4, "a", None);
        }
        c.hear(0, Expire, 4, "a", None);
        c.hear(1, Revoke, 4, "a", None);
        assert_eq!(kinds(&c.hear(2, Expire, 4, "a", None)), vec![(Expire, 4, "a")]);
        for s in 0..5 {
            c.hear(s, Grant, 6, "b", None);
        }
        c.hear(0, Expire, 6, "b", None);
        c.hear(1, Revoke, 6, "b", None);
        assert_eq!(kinds(&c.hear(2, Session, 6, "b", None)), vec![(Revoke, 6, "b")], "a tie goes to the first of ENDS");
    }

    #[test]
    fn a_reading_after_a_reconnect_ends_what_the_server_no_longer_holds() {
        let mut c = Count::new(5, 3);
        for s in 0..5 {
            c.hear(s, Grant, 4, "a", None);
        }
        c.hear(0, Release, 4, "a", None);
        c.hear(1, Release, 4, "a", None);
        // Server 2 was not heard while a ended and b was granted there.
        c.hear(0, Handoff, 5, "b", None);
        c.hear(1, Handoff, 5, "b", None);
        let read = c.read(2, &[("b".into(), 5)]);
        assert_eq!(kinds(&read), vec![(Release, 4, "a"), (Handoff, 5, "b")], "two servers handed it over");
        assert!(c.read(2, &[("b".into(), 5)]).is_empty(), "nothing twice");
        assert!(c.read(3, &[("b".into(), 5)]).is_empty());
    }

    #[test]
    fn a_grant_below_the_last_delivered_is_never_delivered() {
        let mut c = Count::new(3, 2);
        c.hear(0, Grant, 8, "b", None);
        assert_eq!(kinds(&c.hear(1, Grant, 8, "b", None)), vec![(Grant, 8, "b")]);
        c.hear(0, Grant, 7, "a", None);
        assert!(c.hear(1, Grant, 7, "a", None).is_empty(), "token order");
        assert!(c.hear(0, Release, 7, "a", None).is_empty());
        assert!(c.hear(1, Release, 7, "a", None).is_empty(), "no end without its grant");
    }

    #[test]
    fn cuts_proclamations_and_resizes_count_by_quorum() {
        let mut c = Count::new(3, 2);
        c.hear(0, Grant, 3, "a", Some("v".into()));
        assert_eq!(
            c.hear(1, Grant, 3, "a", Some("v".into())),
            vec![Change { kind: Grant, token: 3, owner: "a".into(), value: Some("v".into()) }]
        );
        c.hear(0, Proclaim, 3, "a", Some("w".into()));
        assert_eq!(
            c.hear(1, Proclaim, 3, "a", Some("w".into())),
            vec![Change { kind: Proclaim, token: 3, owner: "a".into(), value: Some("w".into()) }]
        );
        assert!(c.hear(2, Proclaim, 3, "a", Some("w".into())).is_empty(), "never twice");
        c.hear(0, Cut, 3, "a", Some("2000".into()));
        assert_eq!(
            c.hear(1, Cut, 3, "a", Some("1000".into())),
            vec![Change { kind: Cut, token: 3, owner: "a".into(), value: Some("1000".into()) }]
        );
        assert!(c.hear(0, Resize, 0, "", Some("4".into())).is_empty());
        assert_eq!(kinds(&c.hear(2, Resize, 0, "", Some("4".into()))), vec![(Resize, 0, "")]);
        assert!(c.hear(1, Resize, 0, "", Some("4".into())).is_empty(), "the third server's is the same resize");
    }

    #[test]
    fn a_ready_grant_waits_for_a_barrier_and_what_it_brings_in_goes_first() {
        let mut c = Count::new(5, 3);
        // a (token 11) held servers 0, 1 and 2 and was released there, then
        // b (12) was granted on 2, 3 and 4. Servers 2, 3 and 4 are heard
        // first; a's announcements on 0 and 1 are still on their way.
        c.note(2, Grant, 11, "a", None);
        c.note(2, Release, 11, "a", None);
        for s in 2..5 {
            c.note(s, Grant, 12, "b", None);
        }
        let settled = c.settle();
        assert!(settled.changes.is_empty() && settled.waiting, "b is ready but waits for a barrier: {settled:?}");
        assert_eq!(c.settle(), Settled { changes: vec![], waiting: true }, "still waiting: no barrier passed");
        // The barrier brings a's grant and end in from servers 0 and 1.
        for s in [0, 1] {
            c.note(s, Grant, 11, "a", None);
            c.note(s, Release, 11, "a", None);
        }
        c.barrier_passed();
        let settled = c.settle();
        assert_eq!(kinds(&settled.changes), vec![(Grant, 11, "a"), (Release, 11, "a"), (Grant, 12, "b")]);
        assert!(!settled.waiting);

        // A grant found ready before a barrier started waits for that one,
        // not an earlier.
        c.note(0, Grant, 13, "c", None);
        c.note(1, Grant, 13, "c", None);
        c.barrier_passed();
        c.note(2, Grant, 13, "c", None);
        assert!(c.settle().waiting, "ready only after the last barrier");
        c.barrier_passed();
        assert_eq!(kinds(&c.settle().changes), vec![(Grant, 13, "c")]);
    }

    #[test]
    fn a_grant_with_tokens_not_yet_written_back_waits_for_them() {
        let mut c = Count::new(5, 3);
        // Servers 0 and 1 were written back to the lock's token 11 (issued
        // by server 3, not heard yet), server 2 still says 7: the tokens
        // heard (11, 11, 7) would make it 7.
        for (s, first) in [(0, 5), (1, 6)] {
            c.note(s, Grant, first, "a", None);
            c.note(s, Grant, 11, "a", None);
        }
        c.note(2, Grant, 7, "a", None);
        let settled = c.settle();
        assert!(settled.waiting && settled.changes.is_empty());
        // The barrier brings server 3's grant in.
        c.note(3, Grant, 11, "a", None);
        c.barrier_passed();
        assert_eq!(kinds(&c.settle().changes), vec![(Grant, 11, "a")], "a quorum holds 11 or more");
        c.note(2, Grant, 11, "a", None);
        assert!(c.settle().changes.is_empty(), "never twice");
    }

    #[test]
    fn a_hold_heard_first_from_a_lagging_server_is_still_delivered() {
        let mut c = Count::new(5, 3);
        for s in 0..5 {
            c.hear(s, Grant, 100, "a", None);
        }
        for s in 0..5 {
            c.hear(s, Release, 100, "a", None);
        }
        // b's lock token is 101 (servers 0, 1, 2). Server 3's counter lags:
        // it issued 50, and is heard before the write-back raises it.
        c.hear(0, Handoff, 101, "b", None);
        c.hear(1, Handoff, 101, "b", None);
        assert!(c.hear(3, Handoff, 50, "b", None).is_empty(), "101, 101, 50: not ready, and not forgotten");
        assert_eq!(kinds(&c.hear(2, Handoff, 101, "b", None)), vec![(Handoff, 101, "b")]);
    }

    #[test]
    fn a_late_grant_above_the_lock_token_does_not_hold_the_grant_back() {
        let mut c = Count::new(5, 3);
        // The client decided on servers 0, 1, 2 (5704, 5665, 4308: T 5704)
        // and wrote 5704 back to 1 and 2; server 3 granted late, 6153,
        // uncounted and never written back.
        c.hear(0, Grant, 5704, "a", None);
        c.hear(1, Grant, 5665, "a", None);
        c.hear(2, Grant, 4308, "a", None);
        assert!(c.hear(3, Grant, 6153, "a", None).is_empty(), "nothing written back yet");
        // The write-back to server 1 shows T; 0, 1 and the late 3 hold it or more.
        assert_eq!(kinds(&c.hear(1, Grant, 5704, "a", None)), vec![(Grant, 5704, "a")]);
        assert!(c.hear(2, Grant, 5704, "a", None).is_empty(), "never twice");
        // No write-back needed (0, 1, 2 agree on 10), a late grant of 20:
        // the grant waits for the hold's first end.
        for s in 0..5 {
            c.hear(s, Release, 5704, "a", None);
        }
        assert!(c.hear(3, Grant, 20_000, "b", None).is_empty());
        for s in 0..3 {
            assert!(c.hear(s, Grant, 10_000, "b", None).is_empty(), "server 3 might be the one whose token is to be written back");
        }
        assert_eq!(kinds(&c.hear(3, Release, 20_000, "b", None)), vec![(Grant, 10_000, "b")], "still held by a quorum");
        assert_eq!(kinds(&c.hear(0, Release, 10_000, "b", None)), vec![(Release, 10_000, "b")]);
    }

    #[test]
    fn pending_holds_are_bounded() {
        let mut c = Count::new(5, 3);
        // Rounds that got one server each and gave up (released there).
        for i in 0..500 {
            c.hear(0, Grant, i, &format!("loser{i}"), None);
            c.hear(0, Release, i, &format!("loser{i}"), None);
        }
        assert!(c.holds.len() <= MAX_PENDING);
        for s in 0..3 {
            c.hear(s, Grant, 1_000, "w", None);
        }
        assert_eq!(c.holds.len(), 1, "every ended pending hold below the delivered grant forgotten");
        // Rounds still holding their one server: kept until they end, and
        // bounded, the delivered hold (whose end is to come) kept last.
        for i in 0..500 {
            c.hear(1, Grant, 1_001 + i, &format!("late{i}"), None);
        }
        assert!(c.holds.len() <= MAX_PENDING);
        assert!(c.holds.contains_key("w"));
    }
}
