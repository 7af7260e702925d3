//! Replaying the AOF or the replication stream reproduces the master's
//! locks exactly (owner, token, absolute deadline), whatever the local
//! clock says at replay time: a grant whose first lease has passed but was
//! then extended, re-granted, FENCEd, handed off, PEXPIREd or PERSISTed
//! must come back as it is on the master.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use redis::{Connection, Value};

/// What a lock looks like from outside: owner, token, PEXPIRETIME.
#[derive(Debug, PartialEq)]
struct Seen {
    owner: Vec<u8>,
    token: i64,
    pexpiretime: i64,
}

fn seen(c: &mut Connection, key: &str) -> Option<Seen> {
    let i = info(c, key.as_bytes())?;
    Some(Seen { owner: i.owner, token: i.token, pexpiretime: pexpiretime(c, key.as_bytes()) })
}

const KEYS: [&str; 7] = ["extended", "regranted", "fenced", "handed", "expired-handoff", "persisted", "pexpired"];

/// Grants with a 1 s first lease, then the change that keeps each lock
/// alive beyond it. Returns when every first lease is over (1.3 s after
/// the first grant), so replaying the grants alone would lose them all.
fn make_locks(srv: &Server, c: &mut Connection) {
    let first = Instant::now();
    grant(c, "extended", "o", 1000);
    assert_eq!(extend(c, b"extended", b"o", 600_000), 1);

    grant(c, "regranted", "o", 1000);
    grant(c, "regranted", "o", 600_000);

    let t = grant(c, "fenced", "o", 1000);
    let raised = t + 1000;
    assert_eq!(acquire_fence(c, b"fenced", b"o", 600_000, raised), Some(raised));

    grant(c, "handed", "a", 1000);
    let mut w = srv.conn();
    send_cmd(&mut w, cmd("LOCK.ACQUIRE").arg("handed").arg("b").arg(600_000).arg("WAIT").arg(5000));
    wait_waiters(c, b"handed", 1);
    assert_eq!(release(c, b"handed", b"a"), 1);
    assert!(matches!(recv_reply(&mut w, "handoff"), Ok(Value::Int(_))));

    grant(c, "expired-handoff", "a", 300);
    send_cmd(&mut w, cmd("LOCK.ACQUIRE").arg("expired-handoff").arg("b").arg(600_000).arg("WAIT").arg(5000));
    assert!(matches!(recv_reply(&mut w, "expiry handoff"), Ok(Value::Int(_))));

    grant(c, "persisted", "o", 1000);
    assert_eq!(int_of(&ok_cmd(c, cmd("PERSIST").arg("persisted")), "PERSIST"), 1);

    grant(c, "pexpired", "o", 1000);
    assert_eq!(int_of(&ok_cmd(c, cmd("PEXPIRE").arg("pexpired").arg(600_000)), "PEXPIRE"), 1);

    let over = Duration::from_millis(1300);
    if let Some(rest) = over.checked_sub(first.elapsed()) {
        std::thread::sleep(rest);
    }
}

fn snapshot(c: &mut Connection) -> Vec<(&'static str, Seen)> {
    KEYS.iter().map(|k| (*k, seen(c, k).unwrap_or_else(|| panic!("{k} is held on the master")))).collect()
}

fn assert_reproduced(c: &mut Connection, expected: &[(&'static str, Seen)], what: &str) {
    for (key, want) in expected {
        assert_eq!(seen(c, key).as_ref(), Some(want), "{what}: {key}");
        let intruder = acquire(c, key.as_bytes(), b"intruder", 10_000);
        assert_eq!(intruder, None, "{what}: {key} was granted to an intruder");
    }
}

fn aof_restart(preamble: &str, rewrite: bool) {
    let what = format!("aof-use-rdb-preamble {preamble}, rewrite {rewrite}");
    let mut srv = Server::start_with(&["--appendonly", "yes", "--appendfsync", "always", "--aof-use-rdb-preamble", preamble]);
    let mut c = srv.conn();
    make_locks(&srv, &mut c);
    if rewrite {
        bgrewriteaof(&mut c);
    }
    let expected = snapshot(&mut c);
    wait_aof_flushed(&mut c);
    drop(c);
    srv.kill9();
    srv.start_again();
    let mut c = srv.conn();
    assert_reproduced(&mut c, &expected, &what);
}

#[test]
fn aof_replay_without_rewrite_with_preamble() {
    aof_restart("yes", false);
}

#[test]
fn aof_replay_without_rewrite_without_preamble() {
    aof_restart("no", false);
}

#[test]
fn aof_replay_after_rewrite_with_preamble() {
    aof_restart("yes", true);
}

#[test]
fn aof_replay_after_rewrite_without_preamble() {
    aof_restart("no", true);
}

#[test]
fn a_replica_that_lagged_past_the_first_leases_keeps_them_and_after_promotion() {
    let master = Server::start();
    let replica = Server::start();
    attach_replica(&master, &replica);
    let mut m = master.conn();
    replica.sigstop();
    make_locks(&master, &mut m);
    let expected = snapshot(&mut m);
    replica.sigcont();
    wait_replica_synced(&master, &replica);
    let mut r = replica.conn();
    for (key, want) in &expected {
        assert_eq!(seen(&mut r, key).as_ref(), Some(want), "replica: {key}");
    }
    let highest = expected.iter().map(|(_, s)| s.token).max().unwrap_or(0);
    drop(master);
    ok_cmd(&mut r, cmd("REPLICAOF").arg("NO").arg("ONE"));
    assert_reproduced(&mut r, &expected, "promoted replica");
    assert!(grant(&mut r, "next", "o", 1000) > highest, "tokens keep increasing after promotion");
}

/// The tokens of this server's own AOF, rewritten so that the grant's token
/// is `to` instead of `from` (the same number of digits, so every RESP
/// length stays right). Panics unless exactly one file held it.
fn rewrite_token_in_aof(srv: &Server, from: i64, to: i64) {
    let (from, to) = (from.to_string(), to.to_string());
    assert_eq!(from.len(), to.len(), "a token of another length would need new RESP lengths");
    let mut rewritten = 0;
    for (path, bytes) in read_all_files(&srv.dir.join("appendonlydir")) {
        let hits = bytes.windows(from.len()).filter(|w| *w == from.as_bytes()).count();
        if hits == 0 {
            continue;
        }
        assert_eq!(hits, 1, "{}: the token appears once, in its LOCK.APPLY", path.display());
        let text = String::from_utf8(bytes).expect("an AOF tail is text");
        std::fs::write(&path, text.replace(&from, &to)).expect("rewrite the AOF");
        rewritten += 1;
    }
    assert_eq!(rewritten, 1, "one AOF file held the grant");
}

/// A restart whose clock is 2 minutes behind the tokens in its AOF (as
/// after a FENCE write-back or a promotion, whose tokens lead the clock):
/// the grant replays as written. Before, replay refused the LOCK.APPLY for
/// max-token-lead, the lock vanished and another client was granted it.
#[test]
fn own_aof_replays_a_token_ahead_of_the_clock_and_the_counter_follows() {
    let mut srv = Server::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let mut c = srv.conn();
    wait_aof_rewrite_idle(&mut c);
    let issued = grant(&mut c, "k", "A", 60_000);
    let deadline = pexpiretime(&mut c, b"k");
    wait_aof_flushed(&mut c);
    drop(c);
    srv.kill9();
    let ahead = now_unix_us() + 120_000_000;
    rewrite_token_in_aof(&srv, issued, ahead);
    srv.start_again();
    let mut c = srv.conn();
    let i = info(&mut c, b"k").expect("k was replayed");
    assert_eq!((i.owner.as_slice(), i.token), (&b"A"[..], ahead));
    assert_eq!(pexpiretime(&mut c, b"k"), deadline);
    assert_eq!(acquire(&mut c, b"k", b"B", 60_000), None, "B was granted a lock A holds");
    assert!(grant(&mut c, "other", "C", 1000) > ahead, "the counter was raised to the replayed token");
    assert!(!srv.log_text().contains("max-token-lead"), "replay refused something:\n{}", srv.log_tail(20));
}
