//! `LOCK.MACQUIRE ... WAIT timeout-ms` (issue 42): a set waits in every
//! member's line at once, is granted whole (one token) once it is first in
//! all of them, holds back every later waiter on the members it waits for,
//! and leaves every line when its wait times out or its client goes.
//!
//! As in `waiting.rs`, each blocked client has its own connection (the
//! command sent with `send_cmd`, its reply read with `recv_reply`), and who
//! stands in a line is learnt by polling, never by sleeping.

use crate::common;

use std::collections::BTreeMap;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use common::*;
use redis::{Connection, Value};

/// `LOCK.MACQUIRE numkeys keys… owner ttl WAIT wait`.
fn mwait(keys: &[&str], owner: &str, ttl: i64, wait: i64) -> redis::Cmd {
    let mut c = cmd("LOCK.MACQUIRE");
    c.arg(keys.len()).arg(keys).arg(owner).arg(ttl).arg("WAIT").arg(wait);
    c
}

/// How long a waiter's reply may take before the test fails.
const WAITER_READ: Duration = Duration::from_secs(20);

/// The owners in `key`'s line, first first (LOCK.WAITERS, which answers
/// for a free key too).
fn line(con: &mut Connection, key: &str) -> Vec<String> {
    let Value::Array(entries) = ok_cmd(con, cmd("LOCK.WAITERS").arg(key)) else { panic!("LOCK.WAITERS {key}: not an array") };
    entries
        .into_iter()
        .map(|entry| {
            let fields: Vec<Value> = match entry {
                Value::Map(pairs) => pairs.into_iter().flat_map(|(k, v)| [k, v]).collect(),
                Value::Array(flat) => flat,
                other => panic!("LOCK.WAITERS {key}: entry {other:?}"),
            };
            let owner = fields.chunks(2).find(|kv| matches!(&kv[0], Value::BulkString(b) if b == b"owner")).map(|kv| kv[1].clone());
            match owner {
                Some(Value::BulkString(b)) => String::from_utf8_lossy(&b).into_owned(),
                other => panic!("LOCK.WAITERS {key}: owner {other:?}"),
            }
        })
        .collect()
}

/// Polls until `key`'s line is exactly `owners` (10 s deadline).
fn wait_line(con: &mut Connection, key: &str, owners: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let last = line(con, key);
        if last == owners {
            return;
        }
        assert!(Instant::now() < deadline, "{key}'s line stayed {last:?}, expected {owners:?}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn owner_of(con: &mut Connection, key: &str) -> Option<(String, i64)> {
    info(con, key.as_bytes()).map(|i| (String::from_utf8_lossy(&i.owner).into_owned(), i.token))
}

#[test]
fn a_set_is_granted_the_moment_its_last_member_frees() {
    let srv = Server::start();
    let mut h = srv.conn();
    let mut o = srv.conn();
    let ta = grant(&mut h, "a", "ha", 60_000);
    let tb = grant(&mut h, "b", "hb", 60_000);
    let mut s = waiter(&srv, WAITER_READ);
    send_cmd(&mut s, &mwait(&["a", "b"], "S", 60_000, 10_000));
    wait_waiters(&mut o, b"a", 1);
    assert_eq!(waiters(&mut o, b"b"), 1, "the set stands in b's line too");
    assert_eq!(line(&mut o, "b"), ["S"]);

    // a frees: the set still waits for b, and takes nothing meanwhile.
    assert_eq!(release(&mut h, b"a", b"ha"), 1);
    assert_eq!(owner_of(&mut o, "a"), None, "no member is granted alone");
    assert_eq!(line(&mut o, "a"), ["S"]);
    assert_eq!(line(&mut o, "b"), ["S"]);

    // b frees: the set is granted within that release, whole, one token.
    assert_eq!(release(&mut h, b"b", b"hb"), 1);
    let a = owner_of(&mut o, "a").expect("a granted to the set within the release");
    let b = owner_of(&mut o, "b").expect("b granted to the set within the release");
    assert_eq!((a.0.as_str(), b.0.as_str()), ("S", "S"));
    assert_eq!(a.1, b.1, "one token for the whole set");
    let t = recv_token(&mut s, "the set").expect("the set granted, not nil");
    assert_eq!(t, a.1, "the blocked client is answered with the set's token");
    assert!(t > ta && t > tb, "the token {t} is above the members' earlier ones");
    assert!(line(&mut o, "a").is_empty() && line(&mut o, "b").is_empty(), "the set left both lines");
    assert_eq!(mrelease(&mut o, &["a", "b"], "S"), 2);
}

#[test]
fn a_later_single_key_waiter_never_overtakes_a_waiting_set() {
    let srv = Server::start();
    let mut h = srv.conn();
    let mut o = srv.conn();
    grant(&mut h, "b", "hb", 60_000);
    // The set waits for b; a is free, but the set stands in its line.
    let mut s = waiter(&srv, WAITER_READ);
    send_cmd(&mut s, &mwait(&["a", "b"], "S", 60_000, 10_000));
    wait_line(&mut o, "a", &["S"]);
    assert_eq!(acquire(&mut o, b"a", b"newcomer", 60_000), None, "a free member waited for by a set is not granted past it");
    let mut x = waiter(&srv, WAITER_READ);
    send_cmd(&mut x, &cmd("LOCK.ACQUIRE").arg("a").arg("X").arg(60_000).arg("WAIT").arg(10_000).clone());
    wait_line(&mut o, "a", &["S", "X"]);
    assert_eq!(owner_of(&mut o, "a"), None, "X waits behind the set although a is free");

    assert_eq!(release(&mut h, b"b", b"hb"), 1);
    let ts = recv_token(&mut s, "the set").expect("the set granted");
    assert_eq!(owner_of(&mut o, "a").map(|(owner, _)| owner).as_deref(), Some("S"));
    assert_eq!(line(&mut o, "a"), ["X"], "X still waits, now behind the set's hold");

    assert_eq!(mrelease(&mut o, &["a", "b"], "S"), 2);
    let tx = recv_token(&mut x, "X").expect("X granted once the set released");
    assert!(tx > ts);
    assert_eq!(owner_of(&mut o, "a").map(|(owner, _)| owner).as_deref(), Some("X"));
}

#[test]
fn overlapping_sets_are_granted_in_arrival_order() {
    // P = {a, b} then Q = {b, c}, then R = {c}: the picture of
    // docs/design-multi.md.
    let srv = Server::start();
    let mut h = srv.conn();
    let mut o = srv.conn();
    grant(&mut h, "b", "hb", 60_000);
    let mut p = waiter(&srv, WAITER_READ);
    send_cmd(&mut p, &mwait(&["a", "b"], "P", 60_000, 10_000));
    wait_line(&mut o, "b", &["P"]);
    let mut q = waiter(&srv, WAITER_READ);
    send_cmd(&mut q, &mwait(&["b", "c"], "Q", 60_000, 10_000));
    wait_line(&mut o, "b", &["P", "Q"]);
    let mut r = waiter(&srv, WAITER_READ);
    send_cmd(&mut r, &cmd("LOCK.ACQUIRE").arg("c").arg("R").arg(60_000).arg("WAIT").arg(10_000).clone());
    wait_line(&mut o, "c", &["Q", "R"]);
    assert_eq!((owner_of(&mut o, "a"), owner_of(&mut o, "c")), (None, None), "nobody is granted while b is held");

    assert_eq!(release(&mut h, b"b", b"hb"), 1);
    let tp = recv_token(&mut p, "P").expect("P first");
    assert_eq!(line(&mut o, "b"), ["Q"]);
    assert_eq!(line(&mut o, "c"), ["Q", "R"], "R still behind Q, c free");
    assert_eq!(owner_of(&mut o, "c"), None);

    assert_eq!(mrelease(&mut o, &["a", "b"], "P"), 2);
    let tq = recv_token(&mut q, "Q").expect("Q second");
    assert_eq!(owner_of(&mut o, "c").map(|(owner, _)| owner).as_deref(), Some("Q"));
    assert_eq!(line(&mut o, "c"), ["R"]);

    assert_eq!(mrelease(&mut o, &["b", "c"], "Q"), 2);
    let tr = recv_token(&mut r, "R").expect("R last");
    assert!(tp < tq && tq < tr, "tokens in arrival order: {tp} {tq} {tr}");
}

#[test]
fn a_set_s_wait_times_out_with_nil_and_leaves_no_place() {
    let srv = Server::start();
    let mut h = srv.conn();
    let mut o = srv.conn();
    grant(&mut h, "a", "ha", 60_000);
    grant(&mut h, "b", "hb", 60_000);
    // d is free: the set stands first in its line, and X behind it.
    let mut s = waiter(&srv, WAITER_READ);
    send_cmd(&mut s, &mwait(&["a", "b", "d"], "S", 60_000, 300));
    wait_line(&mut o, "d", &["S"]);
    let mut x = waiter(&srv, WAITER_READ);
    send_cmd(&mut x, &cmd("LOCK.ACQUIRE").arg("d").arg("X").arg(60_000).arg("WAIT").arg(10_000).clone());
    wait_line(&mut o, "d", &["S", "X"]);

    assert_eq!(recv_token(&mut s, "the set"), None, "the set's WAIT ran out: nil");
    // Its places are gone from every line, and the line it headed moved.
    let tx = recv_token(&mut x, "X").expect("X granted d once the set left its line");
    assert!(tx > 0);
    assert_eq!((waiters(&mut o, b"a"), waiters(&mut o, b"b"), waiters(&mut o, b"d")), (0, 0, 0));
    assert!(line(&mut o, "a").is_empty() && line(&mut o, "b").is_empty());
    assert_eq!(info_field_i64(&mut o, "clients", "blocked_clients"), 0);
    // Nothing of the set was taken.
    assert_eq!(owner_of(&mut o, "a").map(|(owner, _)| owner).as_deref(), Some("ha"));
    assert_eq!(owner_of(&mut o, "b").map(|(owner, _)| owner).as_deref(), Some("hb"));
}

#[test]
fn a_set_whose_client_leaves_leaves_every_line() {
    let srv = Server::start();
    let mut h = srv.conn();
    let mut o = srv.conn();
    grant(&mut h, "a", "ha", 60_000);
    let mut s = waiter(&srv, WAITER_READ);
    send_cmd(&mut s, &mwait(&["a", "d"], "S", 60_000, 0));
    wait_line(&mut o, "d", &["S"]);
    let mut x = waiter(&srv, WAITER_READ);
    send_cmd(&mut x, &cmd("LOCK.ACQUIRE").arg("d").arg("X").arg(60_000).arg("WAIT").arg(10_000).clone());
    wait_line(&mut o, "d", &["S", "X"]);

    drop(s);
    let tx = recv_token(&mut x, "X").expect("X granted d once the set's client left");
    assert!(tx > 0);
    assert_eq!(waiters(&mut o, b"a"), 0, "no place left in a's line");
    assert!(line(&mut o, "a").is_empty());
    assert_eq!(waiters(&mut o, b"d"), 0);
    // Releasing a now grants nobody: nothing of the set is left to serve.
    assert_eq!(release(&mut h, b"a", b"ha"), 1);
    assert_eq!(owner_of(&mut o, "a"), None);
}

#[test]
fn a_set_is_granted_when_its_last_member_s_lease_runs_out() {
    let srv = Server::start();
    let mut h = srv.conn();
    let mut o = srv.conn();
    grant(&mut h, "a", "ha", 60_000);
    grant(&mut h, "b", "hb", 300);
    let mut s = waiter(&srv, WAITER_READ);
    send_cmd(&mut s, &mwait(&["a", "b"], "S", 60_000, 10_000));
    wait_line(&mut o, "b", &["S"]);
    assert_eq!(release(&mut h, b"a", b"ha"), 1);
    assert_eq!(owner_of(&mut o, "a"), None, "still waiting for b's lease");
    // Nobody releases b: its lease's end hands the set over.
    let t = recv_token(&mut s, "the set").expect("granted at b's lease end");
    assert_eq!(owner_of(&mut o, "a"), Some(("S".to_string(), t)));
    assert_eq!(owner_of(&mut o, "b"), Some(("S".to_string(), t)));
}

#[test]
fn consecutive_shared_sets_are_granted_together() {
    let srv = Server::start();
    let mut h = srv.conn();
    let mut o = srv.conn();
    grant(&mut h, "b", "writer", 60_000);
    let shared = |owner: &str| {
        let mut c = mwait(&["a", "b"], owner, 60_000, 10_000);
        c.arg("SHARED");
        c
    };
    let mut r1 = waiter(&srv, WAITER_READ);
    send_cmd(&mut r1, &shared("R1"));
    wait_line(&mut o, "b", &["R1"]);
    let mut r2 = waiter(&srv, WAITER_READ);
    send_cmd(&mut r2, &shared("R2"));
    wait_line(&mut o, "a", &["R1", "R2"]);
    let mut w = waiter(&srv, WAITER_READ);
    send_cmd(&mut w, &mwait(&["a"], "W", 60_000, 10_000));
    wait_line(&mut o, "a", &["R1", "R2", "W"]);

    assert_eq!(release(&mut h, b"b", b"writer"), 1);
    let t1 = recv_token(&mut r1, "R1").expect("R1 granted");
    let t2 = recv_token(&mut r2, "R2").expect("R2 granted beside R1");
    assert!(t1 < t2);
    assert_eq!(line(&mut o, "a"), ["W"], "the exclusive one waits for both readers");
    assert_eq!(mrelease(&mut o, &["a", "b"], "R1"), 2);
    assert_eq!(line(&mut o, "a"), ["W"]);
    assert_eq!(mrelease(&mut o, &["a", "b"], "R2"), 2);
    assert!(recv_token(&mut w, "W").is_some_and(|t| t > t2));
}

#[test]
fn a_set_that_cannot_block_answers_as_without_wait() {
    let srv = Server::start();
    let mut h = srv.conn();
    let mut c = srv.conn();
    grant(&mut h, "b", "hb", 60_000);
    ok_cmd(&mut c, &cmd("MULTI"));
    ok_cmd(&mut c, &mwait(&["a", "b"], "S", 60_000, 10_000));
    let replies = ok_cmd(&mut c, &cmd("EXEC"));
    assert_eq!(replies, Value::Array(vec![Value::Nil]), "inside MULTI a held set answers nil at once");
    assert!(line(&mut c, "a").is_empty() && line(&mut c, "b").is_empty(), "and stands in no line");
    assert_eq!(blocked_clients(&mut c), 0);
}

/// Five philosophers, five forks: philosopher i needs forks i and i+1
/// (mod 5), takes both with one `LOCK.MACQUIRE ... WAIT`, eats briefly and
/// puts both down, for about three seconds. Every meal is recorded from
/// the client's side: from the grant's reply to just before MRELEASE is
/// sent, an interval inside the server's own hold, so two recorded meals
/// on one fork that overlap mean the fork was held twice at once.
#[test]
fn dining_philosophers_share_the_forks_fairly_and_never_twice_at_once() {
    const N: usize = 5;
    const RUN: Duration = Duration::from_secs(3);
    let srv = Server::start();
    let start = Arc::new(Barrier::new(N));
    let meals: Vec<Vec<(Instant, Instant, i64)>> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..N)
            .map(|i| {
                let mut con = srv.conn();
                con.set_read_timeout(Some(Duration::from_secs(30))).expect("read timeout");
                let start = Arc::clone(&start);
                scope.spawn(move || {
                    let forks = [format!("fork:{i}"), format!("fork:{}", (i + 1) % N)];
                    let forks: Vec<&str> = forks.iter().map(String::as_str).collect();
                    let me = format!("philosopher:{i}");
                    let mut meals = Vec::new();
                    start.wait();
                    let until = Instant::now() + RUN;
                    while Instant::now() < until {
                        // A WAIT far beyond the run: one running out is a
                        // starved philosopher, which the test fails on.
                        let token = match ok_cmd(&mut con, &mwait(&forks, &me, 30_000, 20_000)) {
                            Value::Int(t) => t,
                            other => panic!("{me}: a wait for its forks ended with {other:?}"),
                        };
                        let from = Instant::now();
                        std::thread::sleep(Duration::from_millis(1));
                        let to = Instant::now();
                        assert_eq!(mrelease(&mut con, &forks, &me), 2, "{me} held both forks to the end");
                        meals.push((from, to, token));
                    }
                    meals
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().expect("a philosopher panicked")).collect()
    });

    // No fork held twice at once: per fork, its meals sorted by start
    // never overlap, and its tokens rise meal after meal.
    let mut per_fork: BTreeMap<usize, Vec<(Instant, Instant, i64)>> = BTreeMap::new();
    for (i, eaten) in meals.iter().enumerate() {
        for meal in eaten {
            per_fork.entry(i).or_default().push(*meal);
            per_fork.entry((i + 1) % N).or_default().push(*meal);
        }
    }
    for (fork, mut held) in per_fork {
        held.sort_by_key(|m| m.0);
        for pair in held.windows(2) {
            assert!(pair[0].1 <= pair[1].0, "fork {fork} held twice at once: {pair:?}");
            assert!(pair[0].2 < pair[1].2, "fork {fork}'s tokens must rise meal after meal");
        }
    }
    // Fairness, not speed. Each philosopher's next request joins the tail
    // of both its forks' lines, behind whatever its neighbours already
    // asked; since a line is served in arrival order and a set is granted
    // only when it heads both its lines, a neighbour eats at most once
    // while a philosopher waits, so neighbours' counts differ by about one
    // and any two philosophers' by a few, whatever the load. What remains
    // is the client side: a thread the OS does not run for a while asks
    // less often, and a quarter leaves room for that on two shared cores,
    // while a server that let requests overtake (a philosopher starved
    // between its two neighbours) falls far below it.
    let counts: Vec<usize> = meals.iter().map(Vec::len).collect();
    eprintln!("meals per philosopher: {counts:?}");
    let (least, most) = (counts.iter().copied().min().unwrap_or(0), counts.iter().copied().max().unwrap_or(0));
    assert!(least >= 1, "a philosopher never ate: {counts:?}");
    assert!(least * 4 >= most, "the least fed ate {least} times, the most fed {most}: {counts:?}");
}

#[test]
fn a_set_handed_over_at_a_lease_end_reaches_a_replica_whole() {
    let master = Server::start_with(&["--repl-diskless-sync-delay", "0"]);
    let replica = Server::start();
    attach_replica(&master, &replica);
    let mut m = master.conn();
    let mut r = replica.conn();
    grant(&mut m, "b", "hb", 300);
    let mut s = waiter(&master, WAITER_READ);
    send_cmd(&mut s, &mwait(&["a", "b", "c"], "S", 60_000, 10_000));
    wait_line(&mut m, "b", &["S"]);
    wait1(&mut m);
    let execs = exec_calls(&mut r);
    // The lease timer's handoff: three grants in one execution unit.
    let t = recv_token(&mut s, "the set").expect("granted at b's lease end");
    wait1(&mut m);
    assert_eq!(exec_calls(&mut r), execs + 1, "the set reached the replica as one transaction");
    for k in ["a", "b", "c"] {
        assert_eq!(owner_of(&mut r, k), Some(("S".to_string(), t)), "{k} on the replica");
    }
}

#[test]
fn a_master_demoted_while_a_set_waits_unblocks_it_and_grants_nothing() {
    let master = Server::start();
    let other = Server::start_with(&["--repl-ping-replica-period", "3600", "--repl-diskless-sync-delay", "0"]);
    let mut m = master.conn();
    grant(&mut m, "k", "h", 300);
    let mut s = waiter(&master, WAITER_READ);
    send_cmd(&mut s, &mwait(&["k", "d"], "S", 60_000, 0));
    wait_line(&mut m, "d", &["S"]);
    ok_cmd(&mut m, cmd("REPLICAOF").arg("127.0.0.1").arg(other.port));
    match try_recv_reply(&mut s) {
        Some(Err(e)) => assert!(e.starts_with("UNBLOCKED"), "a set waiting on a demoted master: {e}"),
        other => panic!("a set waiting on a master turned replica: expected an UNBLOCKED error, got {other:?}"),
    }
    wait_replica_synced(&other, &master);
    assert!(line(&mut m, "k").is_empty() && line(&mut m, "d").is_empty(), "the set left both lines");
    // Past h's deadline, after the sync: nothing granted on the demoted node.
    while now_unix_ms() < pexpiretime(&mut m, b"k").max(0) + 100 {
        std::thread::sleep(Duration::from_millis(10));
    }
    let keys: Vec<String> = cmd("KEYS").arg("*").query(&mut m).expect("KEYS");
    assert!(keys.is_empty(), "the demoted node has keys its master does not: {keys:?}");
}
