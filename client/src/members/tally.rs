//! Which members a group has, from one reading of every server's holders
//! of its key: a member is an owner a quorum of servers list; its token
//! the quorum-th largest they list (`quorum::agreed_token`, the rule of
//! a watch's grant), its value the one most of them list. Pure.

use std::collections::HashMap;

use super::Member;
use crate::quorum::agreed_token;
use crate::transport::Holding;

/// The members a quorum of `readings` list (one per server; `None`: it did
/// not answer), in join order (by token, then owner).
pub fn members_of(readings: &[Option<Vec<Holding>>], quorum: usize) -> Vec<Member> {
    // Per owner, what each server listing it says: (token, value), in
    // server order.
    let mut listed: HashMap<&str, Vec<(i64, &str)>> = HashMap::new();
    for holders in readings.iter().flatten() {
        for h in holders {
            let Some(token) = h.token else { continue };
            listed.entry(h.owner.as_str()).or_default().push((token, h.value.as_deref().unwrap_or("")));
        }
    }
    let mut members: Vec<Member> = listed
        .into_iter()
        .filter_map(|(owner, said)| {
            let token = agreed_token(said.iter().map(|&(t, _)| t), quorum)?;
            Some(Member { owner: owner.to_string(), token, value: most_said(&said).to_string() })
        })
        .collect();
    members.sort_by(|a, b| a.token.cmp(&b.token).then_with(|| a.owner.cmp(&b.owner)));
    members
}

/// The value most servers list; between values listed as often, the one
/// the earliest server (in the configured order) lists, so every reader
/// of the same answers names the same.
fn most_said<'a>(said: &[(i64, &'a str)]) -> &'a str {
    let count = |v: &str| said.iter().filter(|&&(_, o)| o == v).count();
    let mut best: Option<(&str, usize)> = None;
    for &(_, value) in said {
        let n = count(value);
        if best.is_none_or(|(_, m)| n > m) {
            best = Some((value, n));
        }
    }
    best.map_or("", |(v, _)| v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(owner: &str, token: i64, value: &str) -> Holding {
        Holding { owner: owner.into(), token: Some(token), value: Some(value.into()) }
    }

    fn member(owner: &str, token: i64, value: &str) -> Member {
        Member { owner: owner.into(), token, value: value.into() }
    }

    #[test]
    fn a_member_is_listed_once_a_quorum_lists_it_with_the_quorum_th_largest_token() {
        let a = |t: i64| held("a", t, "x");
        // a on three of five servers, tokens not yet written back: 7 is the
        // largest a quorum holds at or above.
        let readings = vec![Some(vec![a(5)]), Some(vec![a(9)]), Some(vec![a(7)]), Some(vec![]), None];
        assert_eq!(members_of(&readings, 3), vec![member("a", 5, "x")]);
        let written = vec![Some(vec![a(9)]), Some(vec![a(9)]), Some(vec![a(7)]), Some(vec![a(9)]), None];
        assert_eq!(members_of(&written, 3), vec![member("a", 9, "x")]);
        // On two servers only: not a member (it joined on too few, or left).
        let two = vec![Some(vec![a(9)]), Some(vec![a(9)]), Some(vec![]), Some(vec![]), None];
        assert_eq!(members_of(&two, 3), vec![]);
    }

    #[test]
    fn members_come_in_join_order_with_the_value_most_servers_list() {
        let readings = vec![
            Some(vec![held("b", 12, "new"), held("a", 10, "x")]),
            Some(vec![held("a", 10, "x"), held("b", 12, "new")]),
            Some(vec![held("a", 10, "x"), held("b", 12, "old"), held("c", 3, "lone")]),
            Some(vec![held("b", 12, "old"), held("a", 10, "x")]),
            Some(vec![held("b", 12, "new")]),
        ];
        assert_eq!(members_of(&readings, 3), vec![member("a", 10, "x"), member("b", 12, "new")]);
        // As often: the earliest server's value.
        let tie = vec![
            Some(vec![held("b", 1, "q")]),
            Some(vec![held("b", 1, "p")]),
            Some(vec![held("b", 1, "p")]),
            Some(vec![held("b", 1, "q")]),
        ];
        assert_eq!(members_of(&tie, 3), vec![member("b", 1, "q")]);
        // A holder without a value has the empty one; one without a token
        // (a plain-string lock) is nobody's member.
        let bare = Holding { owner: "d".into(), token: Some(4), value: None };
        let untokened = Holding { owner: "e".into(), token: None, value: Some("v".into()) };
        let readings = vec![Some(vec![bare.clone(), untokened.clone()]); 3];
        assert_eq!(members_of(&readings, 2), vec![member("d", 4, "")]);
    }
}
