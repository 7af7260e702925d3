//! The unit tests of the session bookkeeping (`Sessions`).

use super::*;

fn h(db: c_int, key: &str, owner: &str) -> Hold {
    hold(db, key.as_bytes(), owner.as_bytes())
}

/// Ends every closed connection's hold the way `disconnect` would:
/// released when its end has come by `now`, cut otherwise.
fn end_closed(s: &mut Sessions, now: i64) -> Vec<(Hold, i64)> {
    let mut ended = Vec::new();
    loop {
        let slice = s.closing_slice(10);
        if slice.is_empty() && !s.closing_left() {
            return ended;
        }
        for e in slice {
            ended.push(((*e.hold).clone(), e.end));
            s.closed_hold_ended(&e, if e.end <= now { Ended::Gone } else { Ended::Cut });
        }
    }
}

/// Sweeps as `disconnect` does, the key saying the hold ended.
fn sweep(s: &mut Sessions, now: i64) -> usize {
    let due = s.due(now, usize::MAX);
    for hold in &due {
        s.verified(hold, None, now);
    }
    due.len()
}

/// Every internal list agrees with the entries.
fn consistent(s: &Sessions) {
    let listed: usize = s.by_client.values().map(Vec::len).sum();
    assert_eq!(listed, s.live, "live counts the lists");
    for (client, list) in &s.by_client {
        for (i, hold) in list.iter().enumerate() {
            let e = &s.entries[hold];
            assert_eq!((e.client, e.listed_at, e.status), (*client, i, Status::Bound));
        }
    }
    assert!(s.ends.len() <= s.entries.len());
    for (at, hold) in &s.ends {
        assert_eq!(s.entries[hold].queued, *at, "queued where its entry says");
    }
}

// The global functions share one state: one test for them.
#[test]
fn a_binding_follows_the_latest_grant_and_ends_only_with_its_own_connection() {
    forget_all();
    granted(0, b"k", b"a", Some((7, 0)), 10_000);
    granted(0, b"j", b"a", Some((7, 500)), 10_000);
    assert!(is_bound(0, b"k", b"a") && bound() == 2);
    // Re-granted on connection 8: closing 7 leaves it alone.
    granted(0, b"k", b"a", Some((8, 0)), 10_000);
    // Re-granted without SESSION: bound to nothing.
    granted(0, b"j", b"a", None, 10_000);
    assert!(!is_bound(0, b"j", b"a"));
    assert!(!connection_closed(7, 1_000), "7 holds nothing bound any more");
    assert!(closing_slice(100).is_empty());
    assert!(connection_closed(8, 1_000));
    assert_eq!(bound(), 0, "8 closed");
    assert!(!extending(0, b"k", b"a", 9, 10_000), "closed, not ended yet: nobody extends it");
    // A grant between the disconnect and its handling wins.
    granted(0, b"k", b"a", Some((9, 0)), 10_000);
    assert!(closing_slice(100).is_empty());
    assert!(is_bound(0, b"k", b"a") && extending(0, b"k", b"a", 9, 10_000) && !extending(0, b"k", b"a", 10, 10_000));
    granted(1, b"k", b"b", Some((9, 250)), 10_000);
    released(0, b"k", b"a");
    assert!(connection_closed(9, 2_000));
    let closed = closing_slice(100);
    assert_eq!(closed.len(), 1, "only the hold still bound: {:?}", closed.iter().map(|e| e.hold.0).collect::<Vec<_>>());
    assert_eq!(closed[0].end, 2_250, "the disconnect plus its lock-delay");
    closed_hold_ended(&closed[0], Ended::Cut);
    assert!(!extending(1, b"k", b"b", 9, 10_000) && !extending(1, b"k", b"b", 11, 10_000), "cut: nobody extends it");
    assert_eq!(bound(), 0);
    assert!(any(), "the cut mark stays until its end");
    assert!(!has_work(2_249) && has_work(2_250));
    for hold in due(2_250, 100) {
        verified(&hold, None, 2_250);
    }
    assert!(!any() && extending(1, b"k", b"b", 11, 10_000));
    forget_all();
}

#[test]
fn only_the_bound_connection_extends_and_a_cut_hold_stays_cut_until_it_ends() {
    let mut s = Sessions::default();
    let k = h(0, "k", "a");
    s.granted(k.clone(), Some((7, 1_500)), 10_000);
    assert!(s.may_extend(&k, 7) && !s.may_extend(&k, 8));
    assert!(s.may_extend(&h(0, "k", "b"), 8) && s.may_extend(&h(1, "k", "a"), 8), "other holds are not bound");
    s.extended(&k, 8, 99_000);
    assert_eq!(s.entries[&k].end, 10_000, "an extension from elsewhere changes nothing");
    s.extended(&k, 7, 12_000);
    assert_eq!(s.entries[&k].end, 12_000);

    assert!(s.connection_closed(7, 3_000));
    assert!(!s.may_extend(&k, 7) && !s.may_extend(&k, 8), "closed: nobody extends it");
    assert_eq!(end_closed(&mut s, 3_000), [(k.clone(), 4_500)]);
    assert!(!s.may_extend(&k, 8) && !s.is_bound(&k), "cut: nobody extends it, and it is not bound");
    assert_eq!(s.live(), 0);
    assert_eq!(s.tracked(), 1);
    assert_eq!(sweep(&mut s, 4_499), 0, "cut until the delay ends");
    assert_eq!(sweep(&mut s, 4_500), 1);
    assert_eq!(s.tracked(), 0, "forgotten once its lease ended");
    consistent(&s);

    // A re-grant clears the cut mark, on the new connection or none.
    for rebind in [Some((9, 0)), None] {
        s.granted(k.clone(), Some((7, 1_500)), 10_000);
        s.connection_closed(7, 3_000);
        end_closed(&mut s, 3_000);
        assert!(!s.may_extend(&k, 9));
        s.granted(k.clone(), rebind, 20_000);
        assert!(s.may_extend(&k, 9), "{rebind:?}");
        assert_eq!(s.is_bound(&k), rebind.is_some());
        consistent(&s);
        s.released(&k);
    }
    // The key may say the hold runs on (a PEXPIRE): the mark stays.
    s.granted(k.clone(), Some((7, 1_500)), 10_000);
    s.connection_closed(7, 3_000);
    end_closed(&mut s, 3_000);
    let due = s.due(5_000, 10);
    assert_eq!(due.len(), 1);
    s.verified(&due[0], Some(8_000), 5_000);
    assert!(!s.may_extend(&k, 9) && s.due(7_999, 10).is_empty());
    assert_eq!(sweep(&mut s, 8_000), 1);
    assert!(s.may_extend(&k, 9) && s.tracked() == 0);
}

#[test]
fn a_binding_is_forgotten_when_its_lease_ends_and_not_before() {
    let mut s = Sessions::default();
    for i in 0..1_000 {
        s.granted(h(0, &format!("k{i}"), "a"), Some((7, 0)), 1_000 + i);
    }
    assert_eq!((s.live(), s.tracked()), (1_000, 1_000));
    // Extended on its connection: due later.
    s.extended(&h(0, "k0", "a"), 7, 5_000);
    // Re-granted shorter: due earlier.
    s.granted(h(0, "k999", "a"), Some((7, 0)), 500);
    assert_eq!(sweep(&mut s, 499), 0);
    assert_eq!(sweep(&mut s, 500), 1, "the shorter re-grant");
    assert_eq!(sweep(&mut s, 1_499), 499, "k1..k499 (k0 was extended)");
    assert!(s.is_bound(&h(0, "k0", "a")) && s.is_bound(&h(0, "k500", "a")) && !s.is_bound(&h(0, "k499", "a")));
    consistent(&s);
    assert_eq!(sweep(&mut s, 4_999), 499, "k500..k998");
    assert_eq!((s.live(), s.tracked()), (1, 1));
    assert_eq!(sweep(&mut s, 5_000), 1);
    assert_eq!((s.live(), s.tracked(), s.by_client.len(), s.ends.len()), (0, 0, 0, 0), "nothing left");
    assert!(s.entries.capacity() <= 2 * KEPT_ROOM, "memory given back: {}", s.entries.capacity());
    assert!(!s.connection_closed(7, 6_000), "the connection has nothing left to end");
    consistent(&s);
}

#[test]
fn a_closed_connection_is_handed_over_whole_and_ended_in_slices() {
    let mut s = Sessions::default();
    let n = 10_000;
    for i in 0..n {
        s.granted(h(0, &format!("k{i}"), "a"), Some((7, 0)), 60_000);
    }
    s.granted(h(0, "other", "a"), Some((8, 0)), 60_000);
    assert!(s.connection_closed(7, 1_000));
    assert_eq!(s.live(), 1, "only 8's hold is bound to an open connection");
    assert!(!s.is_bound(&h(0, "k0", "a")) && !s.may_extend(&h(0, "k0", "a"), 8));
    // Granted again (elsewhere) or released before its turn: the grant wins.
    s.granted(h(0, "k1", "a"), Some((8, 0)), 60_000);
    s.released(&h(0, "k2", "a"));
    let mut slices = 0;
    let mut ended = 0;
    while s.closing_left() {
        let slice = s.closing_slice(1_000);
        assert!(slice.len() <= 1_000);
        slices += 1;
        for e in &slice {
            assert_eq!(e.end, 1_000);
            s.closed_hold_ended(e, Ended::Gone);
        }
        ended += slice.len();
    }
    assert_eq!(ended, n - 2);
    assert!(slices >= 10, "{slices} slices");
    assert_eq!((s.live(), s.tracked()), (2, 2), "k1 and other, bound to 8");
    consistent(&s);
    // A connection closing while another's holds are still being ended.
    assert!(s.connection_closed(8, 2_000));
    let first = s.closing_slice(1);
    assert_eq!(first.len(), 1);
    s.granted((*first[0].hold).clone(), None, 60_000);
    s.closed_hold_ended(&first[0], Ended::Cut);
    assert!(s.may_extend(&first[0].hold, 9), "granted again before its end was applied: the grant wins");
    assert_eq!(s.closing_slice(10).len(), 1);
    assert!(!s.closing_left());
}
