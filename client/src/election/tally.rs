//! Which leader the servers name, from what each says its holder is: a
//! leader is a holder (owner) that a quorum of servers name with the same
//! term (fencing token) and value. `leader()` counts one reading of every
//! server; `observe()` counts what each server announced since it
//! subscribed, so a term is seen even when it ended on some servers before
//! another announced it.

use std::collections::HashMap;

use super::Leader;
use crate::transport::Holding;

/// At most this many holders are remembered that have not (yet) been
/// named by a quorum (failed rounds of candidates in a contest): the ones
/// with the smallest tokens are forgotten first.
const MAX_PENDING: usize = 64;

/// What one server said last of a holder: its token and value.
type Said = Option<(i64, Option<String>)>;

/// What each server said last of each holder it named.
pub struct Tally {
    quorum: usize,
    servers: usize,
    /// Per holder (owner): per server, the token and value it said last.
    heard: HashMap<String, Vec<Said>>,
    last: Option<Leader>,
    /// The holder (owner) of `last`, as the servers store it.
    last_owner: String,
}

impl Tally {
    pub fn new(servers: usize, quorum: usize) -> Tally {
        Tally { quorum, servers, heard: HashMap::new(), last: None, last_owner: String::new() }
    }

    /// The latest leader this tally reported.
    #[cfg(test)]
    pub fn last(&self) -> Option<&Leader> {
        self.last.as_ref()
    }

    /// Server `server` says `holding` holds the lock (now, or since the
    /// last thing it said of that holder). Returns the leader when this
    /// makes news: a later term than the last reported, or a new value of
    /// its term; never an earlier term.
    pub fn hear(&mut self, server: usize, holding: Holding) -> Option<Leader> {
        let token = holding.token?;
        // A hold without a value is a term being settled (see
        // `Election::campaign`), or no election's.
        holding.value.as_ref()?;
        if server >= self.servers {
            return None;
        }
        if !self.heard.contains_key(&holding.owner) {
            self.forget_beyond(MAX_PENDING.saturating_sub(1));
        }
        let slots = self.heard.entry(holding.owner.clone()).or_insert_with(|| vec![None; self.servers]);
        *slots.get_mut(server)? = Some((token, holding.value));
        let leader = agreed(slots, self.quorum)?;
        self.report(&holding.owner, leader)
    }

    /// `leader`, held by `owner`, as news, or `None` when it is not (see
    /// `is_news`).
    pub fn report(&mut self, owner: &str, leader: Leader) -> Option<Leader> {
        if !is_news(self.last.as_ref(), &leader) {
            return None;
        }
        self.last = Some(leader.clone());
        owner.clone_into(&mut self.last_owner);
        self.forget_before(leader.term);
        Some(leader)
    }

    /// The holder (owner) of the latest leader reported; empty before one.
    pub fn last_owner(&self) -> &str {
        &self.last_owner
    }

    /// Forgets the holders whose tokens are all below `term`: earlier
    /// terms, and rounds that lost.
    fn forget_before(&mut self, term: i64) {
        self.heard.retain(|_, slots| newest(slots) >= term);
    }

    /// Forgets the holders with the smallest tokens until `keep` are left.
    fn forget_beyond(&mut self, keep: usize) {
        while self.heard.len() > keep {
            let Some(oldest) = self.heard.iter().min_by_key(|(_, slots)| newest(slots)).map(|(owner, _)| owner.clone()) else { break };
            self.heard.remove(&oldest);
        }
    }
}

/// The largest token a holder's servers named.
fn newest(slots: &[Said]) -> i64 {
    slots.iter().flatten().map(|(t, _)| *t).max().unwrap_or(i64::MIN)
}

/// The leader a quorum of `slots` (one holder, per server) agree on: the
/// same token and value.
fn agreed(slots: &[Said], quorum: usize) -> Option<Leader> {
    let said: Vec<&(i64, Option<String>)> = slots.iter().flatten().collect();
    let (term, value) = said.iter().find(|s| said.iter().filter(|o| o == s).count() >= quorum)?;
    Some(Leader { value: value.clone().unwrap_or_default(), term: *term })
}

/// The leader one reading of every server names, and its holder (owner)
/// (`None` per server: nobody holds it there, or it did not answer).
pub fn leader_of(readings: &[Option<Holding>], quorum: usize) -> Option<(String, Leader)> {
    let mut tally = Tally::new(readings.len(), quorum);
    let leader = readings.iter().enumerate().filter_map(|(i, h)| tally.hear(i, h.clone()?)).last()?;
    Some((tally.last_owner, leader))
}

/// Whether `now` is a change after `last`: a later term, or a new value of
/// the same term; never an earlier term.
pub fn is_news(last: Option<&Leader>, now: &Leader) -> bool {
    match last {
        None => true,
        Some(last) => now.term > last.term || (now.term == last.term && now.value != last.value),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(owner: &str, token: i64, value: &str) -> Holding {
        Holding { owner: owner.into(), token: Some(token), value: Some(value.into()) }
    }

    fn leader(value: &str, term: i64) -> Leader {
        Leader { value: value.into(), term }
    }

    #[test]
    fn only_a_later_term_or_a_new_value_is_news() {
        let at = |term: i64, value: &str| Leader { value: value.into(), term };
        assert!(is_news(None, &at(5, "a")));
        assert!(is_news(Some(&at(5, "a")), &at(6, "a")));
        assert!(is_news(Some(&at(5, "a")), &at(5, "b")));
        assert!(!is_news(Some(&at(5, "a")), &at(5, "a")));
        assert!(!is_news(Some(&at(6, "a")), &at(5, "b")), "never a lower term after a higher one");
    }

    #[test]
    fn a_term_counts_once_a_quorum_names_it_with_its_written_back_token() {
        let mut t = Tally::new(5, 3);
        // First round: the servers' own tokens; the lock's is the largest.
        assert_eq!(t.hear(0, held("a", 5, "x")), None);
        assert_eq!(t.hear(1, held("a", 9, "x")), None);
        assert_eq!(t.hear(2, held("a", 7, "x")), None);
        // Written back to 9 one by one: the quorum names 9, never 5.
        assert_eq!(t.hear(0, held("a", 9, "x")), None);
        assert_eq!(t.hear(2, held("a", 9, "x")), Some(leader("x", 9)));
        assert_eq!(t.hear(3, held("a", 9, "x")), None, "no change is reported twice");
    }

    #[test]
    fn a_short_term_is_seen_although_the_next_overtook_it_on_some_servers() {
        let mut t = Tally::new(5, 3);
        // Servers 0 and 1 announce a's term and then b's before server 2's
        // announcement of a's term arrives.
        for s in [0, 1] {
            assert_eq!(t.hear(s, held("a", 10, "x")), None);
            assert_eq!(t.hear(s, held("b", 11, "y")), None);
        }
        assert_eq!(t.hear(2, held("a", 10, "x")), Some(leader("x", 10)));
        assert_eq!(t.hear(2, held("b", 11, "y")), Some(leader("y", 11)));
    }

    #[test]
    fn values_change_within_a_term_and_terms_never_go_back() {
        let mut t = Tally::new(3, 2);
        t.hear(0, held("a", 10, "x"));
        assert_eq!(t.hear(1, held("a", 10, "x")), Some(leader("x", 10)));
        assert_eq!(t.hear(0, held("a", 10, "z")), None, "one server of a quorum");
        assert_eq!(t.hear(1, held("a", 10, "z")), Some(leader("z", 10)));
        t.hear(0, held("b", 12, "y"));
        assert_eq!(t.hear(1, held("b", 12, "y")), Some(leader("y", 12)));
        // A quorum naming an earlier term later (slow announcements) is old news.
        t.hear(0, held("c", 11, "w"));
        assert_eq!(t.hear(2, held("c", 11, "w")), None);
        assert_eq!(t.last(), Some(&leader("y", 12)));
    }

    #[test]
    fn holders_without_a_quorum_are_forgotten_and_bounded() {
        let mut t = Tally::new(5, 3);
        for i in 0..200 {
            t.hear(0, held(&format!("loser{i}"), i, "v"));
        }
        assert!(t.heard.len() <= MAX_PENDING);
        for s in 0..3 {
            t.hear(s, held("w", 1_000, "v"));
        }
        assert_eq!(t.last(), Some(&leader("v", 1_000)));
        assert_eq!(t.heard.len(), 1, "every earlier holder forgotten");
    }

    #[test]
    fn a_hold_without_a_value_names_no_leader() {
        let mut t = Tally::new(3, 2);
        let bare = |token| Holding { owner: "a".into(), token: Some(token), value: None };
        assert_eq!(t.hear(0, bare(5)), None);
        assert_eq!(t.hear(1, bare(5)), None, "a term being settled");
        t.hear(0, held("a", 6, "x"));
        assert_eq!(t.hear(1, held("a", 6, "x")), Some(leader("x", 6)));
    }

    #[test]
    fn one_reading_names_the_leader_a_quorum_agrees_on() {
        let r = |v: &[Option<Holding>]| leader_of(v, 3).map(|(_, l)| l);
        let a = Some(held("a", 9, "x"));
        assert_eq!(r(&[a.clone(), a.clone(), a.clone(), None, None]), Some(leader("x", 9)));
        assert_eq!(leader_of(&[a.clone(), a.clone(), a.clone()], 2).map(|(owner, _)| owner).as_deref(), Some("a"), "with its holder");
        assert_eq!(r(&[a.clone(), a.clone(), Some(held("a", 12, "x")), None, None]), None, "tokens differ");
        assert_eq!(r(&[a.clone(), a.clone(), Some(held("a", 9, "y")), None, None]), None, "values differ");
        assert_eq!(r(&[a.clone(), a.clone(), Some(held("b", 9, "x")), None, None]), None, "owners differ");
    }
}
