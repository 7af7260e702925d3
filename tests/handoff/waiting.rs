//! `LOCK.ACQUIRE ... WAIT timeout-ms`: fair (FIFO) server-side waiting,
//! handoff on release / expiry / DEL / FLUSH / overwrite, timeouts,
//! disconnects, CLIENT UNBLOCK, transactions and scripts, replication.
//!
//! A blocked client occupies its connection, so every waiter has its own
//! connection: the command is sent with `send_cmd` and its reply read later
//! with `recv_reply`. Whether a client is blocked is learnt by polling
//! `LOCK.INFO key` `waiters` (bounded deadlines), never by sleeping.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use redis::{Connection, Value};

const E_WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

/// `LOCK.ACQUIRE key owner ttl WAIT wait`.
fn acq_wait(key: &str, owner: &str, ttl: i64, wait: i64) -> redis::Cmd {
    let mut c = cmd("LOCK.ACQUIRE");
    c.arg(key).arg(owner).arg(ttl).arg("WAIT").arg(wait);
    c
}

fn owner_of(con: &mut Connection, key: &[u8]) -> Option<Vec<u8>> {
    info_any(con, key).map(|i| i.owner)
}

fn s(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

// ---------------------------------------------------------------------------
// FIFO and atomic handoff
// ---------------------------------------------------------------------------

#[test]
fn fifo_three_waiters_served_in_order_with_increasing_tokens() {
    let srv = Server::start();
    let mut h = srv.conn();
    let mut o = srv.conn();
    let th = grant(&mut h, "k", "h", 60_000);

    let mut ws: Vec<Connection> = Vec::new();
    for (i, name) in ["w1", "w2", "w3"].iter().enumerate() {
        let mut w = waiter(&srv, Duration::from_secs(10));
        send_cmd(&mut w, &acq_wait("k", name, 60_000, 10_000));
        wait_waiters(&mut o, b"k", i as i64 + 1);
        ws.push(w);
    }
    let i = info(&mut o, b"k").expect("held by h");
    assert_eq!((i.owner.as_slice(), i.token, i.waiters), (&b"h"[..], th, 3));

    assert_eq!(release(&mut h, b"k", b"h"), 1, "h releases");
    let mut prev = th;
    for (idx, name) in ["w1", "w2", "w3"].iter().enumerate() {
        // The handoff happened within the release: visible at once.
        let i = info(&mut o, b"k").unwrap_or_else(|| panic!("key free instead of held by {name}"));
        assert_eq!(s(&i.owner), *name, "FIFO: the lock must go to {name}");
        assert_eq!(i.waiters, 2 - idx as i64, "queue length after handing to {name}");
        let t = recv_token(&mut ws[idx], name).unwrap_or_else(|| panic!("{name} got nil"));
        assert!(t > prev, "{name}'s token {t} must exceed the previous holder's {prev}");
        assert_eq!(i.token, t, "LOCK.INFO token is {name}'s token");
        let p = pttl(&mut o, b"k");
        assert!(p > 50_000 && p <= 60_000, "{name}'s lease is its own ttl 60000: PTTL {p}");
        assert_eq!(release(&mut ws[idx], b"k", name.as_bytes()), 1, "{name} releases");
        prev = t;
    }
    assert_eq!(info_any(&mut o, b"k"), None, "last release leaves the key free");
    assert_eq!(blocked_clients(&mut o), 0);
}

#[test]
fn handoff_on_release_is_immediate_and_atomic() {
    let srv = Server::start();
    let mut h = srv.conn();
    let mut o = srv.conn();

    // (a) RELEASE returns 1; the very next command from a third connection
    // already sees the waiter as owner.
    let th = grant(&mut h, "k", "h", 60_000);
    let mut w = waiter(&srv, Duration::from_secs(10));
    send_cmd(&mut w, &acq_wait("k", "w", 60_000, 10_000));
    wait_waiters(&mut o, b"k", 1);
    assert_eq!(release(&mut h, b"k", b"h"), 1);
    let i = info(&mut o, b"k").expect("key must be held by the waiter right after RELEASE");
    assert_eq!(i.owner, b"w", "owner right after RELEASE");
    assert_eq!(i.waiters, 0);
    let tw = recv_token(&mut w, "w").expect("w granted");
    assert!(tw > th);
    assert_eq!(i.token, tw);

    // (b) RELEASE and LOCK.INFO pipelined in one write on the releasing
    // connection: the INFO (next command, same read) shows the new owner.
    let mut w2 = waiter(&srv, Duration::from_secs(10));
    send_cmd(&mut w2, &acq_wait("k", "w2", 60_000, 10_000));
    wait_waiters(&mut o, b"k", 1);
    let mut p = redis::pipe();
    p.cmd("LOCK.RELEASE").arg("k").arg("w");
    p.cmd("LOCK.INFO").arg("k");
    w.send_packed_command(&p.get_packed_pipeline()).expect("send pipeline");
    assert_eq!(recv_reply(&mut w, "RELEASE"), Ok(Value::Int(1)));
    let i = parse_info(recv_reply(&mut w, "pipelined LOCK.INFO").expect("LOCK.INFO reply"))
        .expect("pipelined LOCK.INFO: key must be held by w2");
    assert_eq!(i.owner, b"w2");
    let tw2 = recv_token(&mut w2, "w2").expect("w2 granted");
    assert_eq!(i.token, tw2);
    assert!(tw2 > tw);
}

#[test]
fn no_barging_after_release_two_connections_pipelined() {
    let srv = Server::start();
    let mut h = srv.conn();
    let mut n = srv.conn();
    let mut o = srv.conn();
    let mut prev = 0;
    for round in 0..20 {
        let th = grant(&mut h, "k", "h", 60_000);
        assert!(th > prev);
        let mut w = waiter(&srv, Duration::from_secs(10));
        send_cmd(&mut w, &acq_wait("k", "w", 60_000, 10_000));
        wait_waiters(&mut o, b"k", 1);
        // RELEASE and the newcomer's ACQUIRE hit the server back to back.
        send_cmd(&mut h, cmd("LOCK.RELEASE").arg("k").arg("h"));
        send_cmd(&mut n, cmd("LOCK.ACQUIRE").arg("k").arg("n").arg(60_000));
        assert_eq!(recv_reply(&mut h, "RELEASE"), Ok(Value::Int(1)), "round {round}");
        assert_eq!(
            recv_reply(&mut n, "newcomer ACQUIRE"),
            Ok(Value::Nil),
            "round {round}: a newcomer without WAIT must not barge in ahead of the waiter"
        );
        let tw = recv_token(&mut w, "w").unwrap_or_else(|| panic!("round {round}: waiter got nil"));
        assert!(tw > th);
        assert_eq!(owner_of(&mut o, b"k").as_deref(), Some(&b"w"[..]), "round {round}");
        assert_eq!(release(&mut w, b"k", b"w"), 1);
        prev = tw;
    }

    // Inside one transaction: RELEASE, then a newcomer's ACQUIRE. The queue
    // has priority even there.
    grant(&mut h, "t", "h", 60_000);
    let mut w = waiter(&srv, Duration::from_secs(10));
    send_cmd(&mut w, &acq_wait("t", "w", 60_000, 10_000));
    wait_waiters(&mut o, b"t", 1);
    let mut p = redis::pipe();
    p.atomic();
    p.cmd("LOCK.RELEASE").arg("t").arg("h");
    p.cmd("LOCK.ACQUIRE").arg("t").arg("n").arg(60_000);
    let r: Vec<Value> = p.query(&mut n).expect("MULTI RELEASE; ACQUIRE newcomer; EXEC");
    assert_eq!(r, vec![Value::Int(1), Value::Nil], "newcomer inside the releasing transaction");
    let tw = recv_token(&mut w, "w on t").expect("waiter granted after the transaction");
    let i = info(&mut o, b"t").expect("t held");
    assert_eq!((i.owner, i.token), (b"w".to_vec(), tw));
}

#[test]
fn no_barging_on_an_expired_lease_before_the_timer_fires() {
    // DEBUG SLEEP and the newcomer's commands are pipelined in one write:
    // the server runs them back to back in one event-loop pass, so the
    // ACQUIREs run after the lease has expired but before any timer can
    // hand the lock to the waiter. The newcomer must still get nil, and a
    // newcomer with WAIT must queue behind the older waiter.
    let srv = Server::start();
    let mut h = srv.conn();
    let mut o = srv.conn();
    let mut n = waiter(&srv, Duration::from_secs(10));
    for round in 0..3 {
        let key = format!("k{round}");
        // A second for the waiter to get in line while h holds the lock.
        let th = grant(&mut h, &key, "h", 1_000);
        let deadline = pexpiretime(&mut o, key.as_bytes());
        let mut w = waiter(&srv, Duration::from_secs(10));
        send_cmd(&mut w, &acq_wait(&key, "w", 60_000, 10_000));
        wait_waiters(&mut o, key.as_bytes(), 1);
        // The sleep starts after this instant, so it ends at least 100 ms
        // after the deadline however slowly this test runs.
        let sleep_ms = deadline - now_unix_ms() + 100;
        assert!(sleep_ms > 100, "setup too slow: the waiter got in line after the lease ended");
        let mut p = redis::pipe();
        p.cmd("DEBUG").arg("SLEEP").arg(format!("{:.3}", sleep_ms as f64 / 1000.0));
        p.cmd("LOCK.ACQUIRE").arg(&key).arg("n").arg(60_000);
        p.cmd("LOCK.ACQUIRE").arg(&key).arg("n").arg(60_000).arg("WAIT").arg(10_000);
        n.send_packed_command(&p.get_packed_pipeline()).expect("send pipeline");
        assert_eq!(recv_reply(&mut n, "DEBUG SLEEP"), Ok(Value::Okay));
        assert_eq!(
            recv_reply(&mut n, "newcomer ACQUIRE after the deadline"),
            Ok(Value::Nil),
            "round {round}: newcomer barged in on an expired lease ahead of the waiter"
        );
        let tw = recv_token(&mut w, "w").unwrap_or_else(|| panic!("round {round}: waiter got nil"));
        assert!(tw > th);
        let i = info(&mut o, key.as_bytes()).expect("held by w");
        assert_eq!(i.owner, b"w", "round {round}: the older waiter gets the lock");
        assert_eq!(i.waiters, 1, "round {round}: the newcomer with WAIT queues at the tail");
        assert_eq!(release(&mut w, key.as_bytes(), b"w"), 1);
        let tn = recv_token(&mut n, "newcomer with WAIT").unwrap_or_else(|| panic!("round {round}: queued newcomer got nil"));
        assert!(tn > tw, "newcomer token {tn} after waiter's {tw}");
        assert_eq!(release(&mut n, key.as_bytes(), b"n"), 1);
    }
}

// ---------------------------------------------------------------------------
// Handoff on expiry
// ---------------------------------------------------------------------------

/// Keys `{prefix}0..` (`MEASURED_KEYS` of them), each granted to `h` with
/// the ttl `lease(i)`; then a waiter on each (ttl `MEASURED_WAITER_TTL`,
/// WAIT 10 s, far beyond every lease of these tests), in the queue before
/// this returns. Returns the keys, h's tokens and the waiters.
fn held_and_awaited(
    srv: &Server,
    h: &mut Connection,
    o: &mut Connection,
    prefix: &str,
    lease: impl Fn(i64) -> i64,
) -> (Vec<String>, Vec<i64>, Vec<Connection>) {
    let keys: Vec<String> = (0..MEASURED_KEYS).map(|i| format!("{prefix}{i}")).collect();
    let mut ws: Vec<Connection> = keys.iter().map(|_| waiter(srv, Duration::from_secs(20))).collect();
    let tokens: Vec<i64> = keys.iter().enumerate().map(|(i, k)| grant(h, k, "h", lease(i as i64))).collect();
    for (w, key) in ws.iter_mut().zip(&keys) {
        send_cmd(w, &acq_wait(key, "w", MEASURED_WAITER_TTL, 10_000));
        wait_waiters(o, key.as_bytes(), 1);
    }
    (keys, tokens, ws)
}

/// Reads each waiter's grant, in the order of `keys`, and returns how long
/// after `deadlines` (PEXPIRETIME, ms) each was granted, by the server's
/// clock (`granted_at`).
fn grant_delays(o: &mut Connection, keys: &[String], tokens: &[i64], ws: &mut [Connection], deadlines: &[i64]) -> Vec<i64> {
    let mut delays = Vec::new();
    for (i, (w, key)) in ws.iter_mut().zip(keys).enumerate() {
        let tw = recv_token(w, key)
            .unwrap_or_else(|| panic!("{key}: the waiter's WAIT ran out (nil) instead of getting the lock at its lease's end"));
        assert!(tw > tokens[i], "{key}: token {tw} after h's {}", tokens[i]);
        let info = info(o, key.as_bytes()).expect("held by w");
        assert_eq!((info.owner.as_slice(), info.token), (&b"w"[..], tw), "{key}");
        delays.push(granted_at(o, key.as_bytes()) - deadlines[i]);
    }
    delays
}

/// Redis's own expiry off (DEBUG SET-ACTIVE-EXPIRE 0): an expired key
/// stays until something touches it, and nothing does here until its
/// waiter is answered; only the module's timer can hand it over. A module
/// without one leaves each waiter to its WAIT timeout (nil).
fn no_active_expiry(o: &mut Connection) {
    assert_eq!(ok_cmd(o, cmd("DEBUG").arg("SET-ACTIVE-EXPIRE").arg(0)), Value::Okay);
}

/// Nine leases ending 2 s after their grant and `DEADLINE_STEP_MS` apart,
/// a waiter on each; the grants must follow each lease's end promptly
/// (`assert_prompt_handoffs`).
fn expiry_handoff_delay(extra_args: &[&str], active_expiry: bool) {
    let srv = Server::start_with(extra_args);
    let mut h = srv.conn();
    let mut o = srv.conn();
    if !active_expiry {
        no_active_expiry(&mut o);
    }
    // Two seconds for setting up nine waiters: each waits in line before
    // its key's lease ends.
    let (keys, tokens, mut ws) = held_and_awaited(&srv, &mut h, &mut o, "k", |i| 2_000 + i * DEADLINE_STEP_MS);
    let deadlines: Vec<i64> = keys.iter().map(|k| pexpiretime(&mut o, k.as_bytes())).collect();
    assert!(now_unix_ms() < deadlines[0], "setup too slow: the waiters were enqueued after the first lease ended");
    let delays = grant_delays(&mut o, &keys, &tokens, &mut ws, &deadlines);
    assert_prompt_handoffs(&format!("handoff on expiry {extra_args:?}, active expiry {active_expiry}"), &delays);
}

#[test]
fn handoff_on_expiry_is_prompt() {
    // The defaults (hz 10, Redis's active expiry on): the expiry may come
    // from either side; the handoff must still follow promptly.
    expiry_handoff_delay(&[], true);
}

#[test]
fn handoff_on_expiry_is_prompt_with_hz_1() {
    // hz 1 and Redis's active expiry off: only the module's own timer can
    // hand over; a poll by the cron (once a second) fails the median.
    expiry_handoff_delay(&["--hz", "1"], false);
}

#[test]
fn extend_and_pexpire_while_waiting_move_the_handoff() {
    // hz 1, Redis's active expiry off: only the module's timer can hand
    // over, and only if it follows the lease's changes.
    let srv = Server::start_with(&["--hz", "1"]);
    let mut h = srv.conn();
    let mut o = srv.conn();
    no_active_expiry(&mut o);

    // EXTEND pushes each deadline out (1 s leases, extended to end 2 s and
    // more from now): every grant comes after the new deadline, none at
    // the old one (that would be a delay near -1000 ms), and promptly (a
    // timer left at the old deadline, leaving the handoff to the cron or to
    // the WAIT timeout, fails the median or answers nil).
    let (keys, tokens, mut ws) = held_and_awaited(&srv, &mut h, &mut o, "x", |_| 1_000);
    let old: Vec<i64> = keys.iter().map(|k| pexpiretime(&mut o, k.as_bytes())).collect();
    for (i, key) in keys.iter().enumerate() {
        assert_eq!(extend(&mut h, key.as_bytes(), b"h", 2_000 + i as i64 * DEADLINE_STEP_MS), 1, "{key}: h extends");
    }
    let new: Vec<i64> = keys.iter().map(|k| pexpiretime(&mut o, k.as_bytes())).collect();
    for i in 0..keys.len() {
        assert!(new[i] > old[i] + 500, "{}: EXTEND moved the deadline from {} to {}", keys[i], old[i], new[i]);
    }
    let delays = grant_delays(&mut o, &keys, &tokens, &mut ws, &new);
    assert_prompt_handoffs("handoff after EXTEND", &delays);

    // PEXPIRE shortens each 60 s lease to a second and more: the handoff
    // follows the new deadline (a timer left at 60 s answers nil at the
    // WAIT timeout, 10 s).
    let (keys, tokens, mut ws) = held_and_awaited(&srv, &mut h, &mut o, "p", |_| 60_000);
    for (i, key) in keys.iter().enumerate() {
        assert_eq!(ok_cmd(&mut o, cmd("PEXPIRE").arg(key).arg(1_000 + i as i64 * DEADLINE_STEP_MS)), Value::Int(1));
    }
    let deadlines: Vec<i64> = keys.iter().map(|k| pexpiretime(&mut o, k.as_bytes())).collect();
    let delays = grant_delays(&mut o, &keys, &tokens, &mut ws, &deadlines);
    assert_prompt_handoffs("handoff after PEXPIRE", &delays);
}

// ---------------------------------------------------------------------------
// Timeouts, WAIT 0, same owner
// ---------------------------------------------------------------------------

#[test]
fn wait_timeout_returns_nil_and_leaves_the_queue() {
    let srv = Server::start();
    let mut h = srv.conn();
    let mut o = srv.conn();
    let th = grant(&mut h, "k", "h", 60_000);
    let deadline = pexpiretime(&mut o, b"k");
    let mut w = waiter(&srv, Duration::from_secs(5));
    let t0 = Instant::now();
    send_cmd(&mut w, &acq_wait("k", "w", 60_000, 200));
    let r = recv_token(&mut w, "WAIT 200");
    let el = t0.elapsed();
    eprintln!("WAIT 200 answered after {el:?}");
    assert_eq!(r, None, "WAIT 200 on a held lock must time out with nil");
    assert!(el >= Duration::from_millis(180) && el < Duration::from_millis(2000), "WAIT 200 answered after {el:?}");
    let i = info(&mut o, b"k").expect("still held");
    assert_eq!((i.owner.as_slice(), i.token, i.waiters), (&b"h"[..], th, 0));
    assert_eq!(pexpiretime(&mut o, b"k"), deadline, "lease untouched");
    assert_eq!(blocked_clients(&mut o), 0);
    // A later release leaves the key free: nobody is queued any more.
    assert_eq!(release(&mut h, b"k", b"h"), 1);
    assert_eq!(info_any(&mut o, b"k"), None);
    // The connection of the timed-out waiter is usable.
    assert_eq!(acquire(&mut w, b"k", b"w", 1000).map(|t| t > th), Some(true));
}

#[test]
fn wait_zero_waits_without_limit() {
    let srv = Server::start();
    let mut h = srv.conn();
    let mut o = srv.conn();
    let th = grant(&mut h, "k", "h", 60_000);
    let mut w = waiter(&srv, Duration::from_secs(10));
    send_cmd(&mut w, &acq_wait("k", "w", 60_000, 0));
    wait_waiters(&mut o, b"k", 1);
    // Time is the subject here: still blocked a second later.
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(waiters(&mut o, b"k"), 1, "WAIT 0 must not time out");
    assert_eq!(blocked_clients(&mut o), 1);
    assert_eq!(release(&mut h, b"k", b"h"), 1);
    let tw = recv_token(&mut w, "WAIT 0").expect("WAIT 0 waiter granted on release");
    assert!(tw > th);
    assert_eq!(owner_of(&mut o, b"k").as_deref(), Some(&b"w"[..]));
}

#[test]
fn huge_wait_timeout_blocks_instead_of_overflowing() {
    // 2^63-1 ms is a non-negative integer: it must wait (not time out at once
    // through an overflow of now + timeout).
    let srv = Server::start();
    let mut h = srv.conn();
    let mut o = srv.conn();
    grant(&mut h, "k", "h", 60_000);
    let mut w = waiter(&srv, Duration::from_secs(5));
    send_cmd(&mut w, &acq_wait("k", "w", 60_000, i64::MAX));
    let deadline = Instant::now() + Duration::from_secs(3);
    while waiters(&mut o, b"k") != 1 {
        if Instant::now() > deadline {
            let r = recv_reply(&mut w, "WAIT 9223372036854775807");
            panic!("WAIT 9223372036854775807 did not block; it answered {r:?}");
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    // Give a wrapped-around deadline a chance to fire.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(waiters(&mut o, b"k"), 1, "huge WAIT timed out");
    assert_eq!(release(&mut h, b"k", b"h"), 1);
    assert!(recv_token(&mut w, "huge WAIT").is_some());
}

#[test]
fn same_owner_with_wait_is_regranted_at_once() {
    let srv = Server::start();
    let mut h = srv.conn();
    let mut o = srv.conn();
    let th = grant(&mut h, "k", "h", 10_000);
    // WAIT 0 waits without limit: were the owner queued behind itself, no
    // one would ever release, and the read timeout would fail the test.
    let mut h2 = waiter(&srv, Duration::from_secs(5));
    let r = ok_cmd(&mut h2, &acq_wait("k", "h", 60_000, 0));
    assert_eq!(r, Value::Int(th), "same owner with WAIT: re-grant, token unchanged");
    let p = pttl(&mut o, b"k");
    assert!(p > 10_000, "re-grant restarts the lease at 60000: PTTL {p}");
    let i = info(&mut o, b"k").expect("held");
    assert_eq!((i.owner.as_slice(), i.token, i.waiters), (&b"h"[..], th, 0));
    assert_eq!(blocked_clients(&mut o), 0);
    // And on a free key, WAIT grants at once.
    let t = ok_cmd(&mut h2, &acq_wait("free", "x", 1000, 0));
    assert!(matches!(t, Value::Int(x) if x > th), "WAIT on a free key: {t:?}");
}

// ---------------------------------------------------------------------------
// Leaving the queue: disconnect, CLIENT UNBLOCK
// ---------------------------------------------------------------------------

#[test]
fn disconnected_waiter_leaves_the_queue_and_gets_nothing() {
    let srv = Server::start();
    let mut h = srv.conn();
    let mut o = srv.conn();
    grant(&mut h, "k", "h", 60_000);
    let mut w = waiter(&srv, Duration::from_secs(10));
    send_cmd(&mut w, &acq_wait("k", "w", 60_000, 0));
    wait_waiters(&mut o, b"k", 1);
    drop(w); // closes the socket
    wait_waiters(&mut o, b"k", 0);
    wait_until(Duration::from_secs(10), "blocked_clients == 0", || blocked_clients(&mut o) == 0);
    assert_eq!(release(&mut h, b"k", b"h"), 1);
    assert_eq!(info_any(&mut o, b"k"), None, "release after the waiter disconnected must leave the key free");
    assert!(!exists(&mut o, b"k"));
}

#[test]
fn client_unblock_does_not_apply_to_lock_waiters() {
    // Lock waiters end only by grant, their own timeout or disconnect, all
    // decided by the module; CLIENT UNBLOCK (which could race a handoff and
    // leave the client without a reply on Redis 7.0) answers 0.
    let srv = Server::start();
    let mut h = srv.conn();
    let mut o = srv.conn();
    let th = grant(&mut h, "k", "h", 60_000);
    let mut w = waiter(&srv, Duration::from_secs(10));
    let id = client_id(&mut w);
    send_cmd(&mut w, &acq_wait("k", "w", 60_000, 0));
    wait_waiters(&mut o, b"k", 1);
    assert_eq!(ok_cmd(&mut o, cmd("CLIENT").arg("UNBLOCK").arg(id)), Value::Int(0), "CLIENT UNBLOCK of a lock waiter");
    assert_eq!(waiters(&mut o, b"k"), 1, "still waiting");
    assert_eq!(blocked_clients(&mut o), 1);
    assert_eq!(release(&mut h, b"k", b"h"), 1);
    let tw = recv_token(&mut w, "waiter after release").expect("granted");
    assert!(tw > th);
    assert_eq!(waiters(&mut o, b"k"), 0);
    assert_eq!(blocked_clients(&mut o), 0);
}

#[test]
fn churn_200_waiters_no_leak() {
    let srv = Server::start();
    let mut h = srv.conn();
    let mut o = srv.conn();
    let th = grant(&mut h, "k", "h", 60_000);
    // The baseline is this test's own two connections: the harness's
    // readiness check may still be counted for a moment after the start,
    // and a baseline that includes it is never reached again.
    let base_clients = 2;
    wait_until(Duration::from_secs(10), "only this test's two connections", || {
        info_field_i64(&mut o, "clients", "connected_clients") == base_clients
    });
    let mem_before = info_field_i64(&mut o, "memory", "used_memory");
    let t0 = Instant::now();

    // Three batches of 50 with short timeouts; every 5th disconnects.
    let mut timed_out = 0;
    for batch in 0..3 {
        let mut conns = Vec::new();
        for i in 0..50i64 {
            let mut c = waiter(&srv, Duration::from_secs(5));
            let wait = 50 + (i * 37 + batch * 11) % 101;
            send_cmd(&mut c, &acq_wait("k", &format!("w{batch}-{i}"), 60_000, wait));
            conns.push(c);
        }
        for (i, mut c) in conns.into_iter().enumerate() {
            if i % 5 == 0 {
                drop(c);
            } else {
                assert_eq!(recv_token(&mut c, "churn waiter"), None, "batch {batch} waiter {i}: held lock must time out");
                timed_out += 1;
            }
        }
    }

    // Last batch: 50 waiters without limit; every 3rd disconnects; then
    // the lock travels through the live ones only.
    let mut conns: Vec<Option<Connection>> = Vec::new();
    for i in 0..50 {
        let mut c = waiter(&srv, Duration::from_secs(5));
        send_cmd(&mut c, &acq_wait("k", &format!("z{i}"), 60_000, 0));
        conns.push(Some(c));
    }
    wait_waiters(&mut o, b"k", 50);
    let mut live = 0;
    for (i, c) in conns.iter_mut().enumerate() {
        if i % 3 == 0 {
            *c = None;
        } else {
            live += 1;
        }
    }
    wait_waiters(&mut o, b"k", live);
    assert_eq!(release(&mut h, b"k", b"h"), 1);
    let mut prev = th;
    let mut granted = 0;
    while let Some(i) = info(&mut o, b"k") {
        let name = s(&i.owner);
        let idx: usize =
            name.strip_prefix('z').and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("lock handed to unexpected owner {name:?}"));
        let c = conns[idx].as_mut().unwrap_or_else(|| panic!("lock handed to disconnected waiter {name}"));
        let t = recv_token(c, &name).unwrap_or_else(|| panic!("{name} got nil"));
        assert_eq!(t, i.token);
        assert!(t > prev, "tokens increase along the queue");
        prev = t;
        assert_eq!(release(c, b"k", name.as_bytes()), 1);
        granted += 1;
        assert!(granted <= live, "more grants than live waiters");
    }
    assert_eq!(granted, live, "every live waiter got the lock once");
    drop(conns);

    wait_until(Duration::from_secs(10), "clients to go away", || info_field_i64(&mut o, "clients", "connected_clients") == base_clients);
    assert_eq!(blocked_clients(&mut o), 0, "blocked_clients after the churn");
    grant(&mut h, "k", "h", 60_000);
    assert_eq!(waiters(&mut o, b"k"), 0, "no stale waiters on the key");
    // Redis 7.0 keeps the helper clients of unblocked module clients in a
    // pool that serverCron trims gradually (~25 per run at hz 10), so the
    // memory comes back over about a second: wait until used_memory has
    // not moved for 400 ms (4 cron runs), 10 s at most.
    let mem_peak = info_field_i64(&mut o, "memory", "used_memory");
    let t_mem = Instant::now();
    let mut mem_after = mem_peak;
    let mut stable_since = Instant::now();
    while stable_since.elapsed() < Duration::from_millis(400) && t_mem.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
        let m = info_field_i64(&mut o, "memory", "used_memory");
        if m != mem_after {
            mem_after = m;
            stable_since = Instant::now();
        }
    }
    eprintln!(
        "churn: {timed_out} timed out, {granted} granted, {:?}; used_memory before {mem_before}, right after {mem_peak}, {:?} later {mem_after} (delta {})",
        t0.elapsed(),
        t_mem.elapsed(),
        mem_after - mem_before
    );
    assert!(
        mem_after - mem_before < 1024 * 1024,
        "used_memory still {} bytes above the start 10 s after 200 waiters came and went",
        mem_after - mem_before
    );
}

// ---------------------------------------------------------------------------
// No blocking in transactions and scripts
// ---------------------------------------------------------------------------

#[test]
fn wait_in_multi_and_script_does_not_block() {
    let srv = Server::start();
    let mut h = srv.conn();
    let th = grant(&mut h, "k", "h", 60_000);
    let mut c = waiter(&srv, Duration::from_secs(3));

    let t0 = Instant::now();
    assert_eq!(ok_cmd(&mut c, &cmd("MULTI")), Value::Okay);
    assert_eq!(ok_cmd(&mut c, &acq_wait("k", "other", 1000, 0)), Value::SimpleString("QUEUED".into()));
    let r = ok_cmd(&mut c, &cmd("EXEC"));
    assert_eq!(r, Value::Array(vec![Value::Nil]), "WAIT inside MULTI/EXEC");
    assert!(t0.elapsed() < Duration::from_secs(1), "EXEC took {:?}", t0.elapsed());

    // Free key inside MULTI: granted as without WAIT.
    let mut p = redis::pipe();
    p.atomic();
    p.add_command(acq_wait("free", "other", 1000, 0));
    let r: Vec<Value> = p.query(&mut c).expect("MULTI ACQUIRE free WAIT 0 EXEC");
    assert!(matches!(r.as_slice(), [Value::Int(t)] if *t > th), "{r:?}");

    let script = "return redis.call('LOCK.ACQUIRE', KEYS[1], ARGV[1], 1000, 'WAIT', 0)";
    let t0 = Instant::now();
    let r = ok_cmd(&mut c, cmd("EVAL").arg(script).arg(1).arg("k").arg("other"));
    assert_eq!(r, Value::Nil, "WAIT in a script on a held lock");
    assert!(t0.elapsed() < Duration::from_secs(1), "EVAL took {:?}", t0.elapsed());
    let r = ok_cmd(&mut c, cmd("EVAL").arg(script).arg(1).arg("free2").arg("other"));
    assert!(matches!(r, Value::Int(t) if t > th), "WAIT in a script on a free key: {r:?}");

    let i = info(&mut c, b"k").expect("k still held");
    assert_eq!((i.owner.as_slice(), i.token, i.waiters), (&b"h"[..], th, 0));
    assert_eq!(blocked_clients(&mut c), 0);
}

// ---------------------------------------------------------------------------
// FENCE, DEL/FLUSH/overwrite handoffs, type change, per-db queues
// ---------------------------------------------------------------------------

#[test]
fn fence_with_wait_applies_at_handoff() {
    let srv = Server::start();
    let mut h = srv.conn();
    let mut o = srv.conn();
    let th = grant(&mut h, "k", "h", 60_000);
    let f = far_future_token();
    assert!(th < f);
    let mut w = waiter(&srv, Duration::from_secs(10));
    let mut c = acq_wait("k", "w", 60_000, 10_000);
    c.arg("FENCE").arg(f);
    send_cmd(&mut w, &c);
    wait_waiters(&mut o, b"k", 1);
    // Queued, not granted: the FENCE has not raised the counter yet.
    assert_eq!(grant(&mut o, "other", "x", 1000), th + 1, "a waiting FENCE raised the counter");
    assert_eq!(release(&mut h, b"k", b"h"), 1);
    let tw = recv_token(&mut w, "w with FENCE").expect("granted");
    assert_eq!(tw, f, "handoff token must be max(counter + 1, FENCE)");
    assert_eq!(info(&mut o, b"k").expect("held").token, f);
    assert_eq!(grant(&mut o, "next", "x", 1000), f + 1, "counter raised to the FENCE");
}

#[test]
fn del_unlink_flushdb_flushall_hand_over() {
    let srv = Server::start();
    let mut h = srv.conn();
    let mut o = srv.conn();
    let mut x = srv.conn();
    for how in ["DEL", "UNLINK", "FLUSHDB", "FLUSHALL", "FLUSHALL ASYNC"] {
        let th = grant(&mut h, "k", "h", 60_000);
        let mut w = waiter(&srv, Duration::from_secs(5));
        send_cmd(&mut w, &acq_wait("k", "w", 60_000, 10_000));
        wait_waiters(&mut o, b"k", 1);
        let c = match how {
            "DEL" | "UNLINK" => {
                let mut c = cmd(how);
                c.arg("k");
                c
            }
            _ => {
                let mut words = how.split(' ');
                let mut c = cmd(words.next().expect("command word"));
                for wd in words {
                    c.arg(wd);
                }
                c
            }
        };
        let t0 = Instant::now();
        ok_cmd(&mut x, &c);
        let tw = recv_token(&mut w, how).unwrap_or_else(|| panic!("{how}: waiter got nil"));
        let el = t0.elapsed();
        assert!(el < Duration::from_secs(1), "{how}: handoff took {el:?}");
        assert!(tw > th, "{how}: token {tw} must exceed {th}");
        let i = info(&mut o, b"k").unwrap_or_else(|| panic!("{how}: key free, waiter not granted"));
        assert_eq!((i.owner.as_slice(), i.token, i.waiters), (&b"w"[..], tw, 0), "{how}");
        let p = pttl(&mut o, b"k");
        assert!(p > 50_000 && p <= 60_000, "{how}: waiter's lease PTTL {p}");
        assert_eq!(release(&mut w, b"k", b"w"), 1, "{how}");
    }
}

#[test]
fn overwrite_with_plain_string_hands_over_only_to_the_same_owner() {
    let srv = Server::start();
    let mut h = srv.conn();
    let mut o = srv.conn();
    let th = grant(&mut h, "k", "h", 60_000);
    let mut w = waiter(&srv, Duration::from_secs(5));
    send_cmd(&mut w, &acq_wait("k", "w", 60_000, 10_000));
    wait_waiters(&mut o, b"k", 1);

    // Overwritten with a string held by someone else: still waiting.
    ok_cmd(&mut o, cmd("SET").arg("k").arg("someone-else"));
    let i = info_any(&mut o, b"k").expect("plain-string lock");
    assert_eq!(i.owner, b"someone-else");
    assert_eq!(i.token, None);
    assert_eq!(i.waiters, 1, "the waiter must stay queued on a string held by another owner");
    ok_cmd(&mut o, cmd("DEL").arg("k"));
    let tw = recv_token(&mut w, "w after DEL of the string").expect("granted after DEL");
    assert!(tw > th);
    assert_eq!(owner_of(&mut o, b"k").as_deref(), Some(&b"w"[..]));

    // Overwritten with a plain string equal to the waiter's owner: the
    // waiter is granted (same owner converts the string).
    let mut w2 = waiter(&srv, Duration::from_secs(5));
    send_cmd(&mut w2, &acq_wait("k", "w2", 60_000, 10_000));
    wait_waiters(&mut o, b"k", 1);
    let t0 = Instant::now();
    ok_cmd(&mut o, cmd("SET").arg("k").arg("w2"));
    let t2 = recv_token(&mut w2, "w2 after SET k w2").expect("w2 granted after SET k w2");
    assert!(t0.elapsed() < Duration::from_secs(1), "took {:?}", t0.elapsed());
    assert!(t2 > tw, "new token {t2} after {tw}");
    let ty: String = cmd("TYPE").arg("k").query(&mut o).expect("TYPE");
    assert_eq!(ty, "redislock", "the string became a module lock");
    let i = info(&mut o, b"k").expect("held by w2");
    assert_eq!((i.owner.as_slice(), i.token, i.waiters), (&b"w2"[..], t2, 0));
    let p = pttl(&mut o, b"k");
    assert!(p > 50_000 && p <= 60_000, "string had no TTL: lease is ttl-ms; PTTL {p}");
}

#[test]
fn key_becoming_another_type_gives_waiters_wrongtype() {
    let srv = Server::start();
    let mut h = srv.conn();
    let mut o = srv.conn();
    grant(&mut h, "k", "h", 60_000);
    let mut w1 = waiter(&srv, Duration::from_secs(5));
    let mut w2 = waiter(&srv, Duration::from_secs(5));
    send_cmd(&mut w1, &acq_wait("k", "w1", 60_000, 10_000));
    wait_waiters(&mut o, b"k", 1);
    send_cmd(&mut w2, &acq_wait("k", "w2", 60_000, 0));
    wait_waiters(&mut o, b"k", 2);
    let mut p = redis::pipe();
    p.atomic();
    p.cmd("DEL").arg("k");
    p.cmd("RPUSH").arg("k").arg("x");
    let r: Vec<Value> = p.query(&mut o).expect("MULTI DEL RPUSH EXEC");
    assert_eq!(r, vec![Value::Int(1), Value::Int(1)]);
    for (name, w) in [("w1", &mut w1), ("w2", &mut w2)] {
        let e = recv_reply(w, name);
        assert_eq!(e, Err(E_WRONGTYPE.to_string()), "{name} when the key became a list");
    }
    let l: Vec<String> = cmd("LRANGE").arg("k").arg(0).arg(-1).query(&mut o).expect("LRANGE");
    assert_eq!(l, vec!["x"], "list untouched");
    assert_eq!(blocked_clients(&mut o), 0);
}

#[test]
fn queues_are_per_database() {
    let srv = Server::start();
    let mut h0 = srv.conn();
    let mut h1 = srv.conn();
    let mut o1 = srv.conn();
    ok_cmd(&mut h1, cmd("SELECT").arg(1));
    ok_cmd(&mut o1, cmd("SELECT").arg(1));
    grant(&mut h0, "k", "h0", 60_000);
    let t1 = grant(&mut h1, "k", "h1", 60_000);
    let mut w = waiter(&srv, Duration::from_secs(5));
    ok_cmd(&mut w, cmd("SELECT").arg(1));
    send_cmd(&mut w, &acq_wait("k", "w", 60_000, 10_000));
    wait_waiters(&mut o1, b"k", 1);
    assert_eq!(waiters(&mut h0, b"k"), 0, "db 0's k has no waiters");
    assert_eq!(release(&mut h0, b"k", b"h0"), 1);
    assert_eq!(info_any(&mut h0, b"k"), None, "db 0's k must stay free");
    assert_eq!(waiters(&mut o1, b"k"), 1, "db 1's waiter still queued");
    assert_eq!(release(&mut h1, b"k", b"h1"), 1);
    let tw = recv_token(&mut w, "w in db 1").expect("granted in db 1");
    assert!(tw > t1);
    assert_eq!(owner_of(&mut o1, b"k").as_deref(), Some(&b"w"[..]));
    assert_eq!(info_any(&mut h0, b"k"), None);
}

// ---------------------------------------------------------------------------
// Replication
// ---------------------------------------------------------------------------

const MASTER_ARGS: &[&str] = &["--repl-ping-replica-period", "3600", "--repl-diskless-sync-delay", "0"];

fn pair() -> (Server, Server) {
    let master = Server::start_with(MASTER_ARGS);
    let replica = Server::start();
    attach_replica(&master, &replica);
    (master, replica)
}

/// Poll replica then master until the master shows `owner` on `key`; the
/// replica may lag but must never be ahead, and never has waiters.
fn follow_until_master_owner(m: &mut Connection, r: &mut Connection, key: &[u8], owner: &[u8]) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let ri = info_any(r, key);
        let mi = info_any(m, key);
        if let Some(ri) = &ri {
            assert_eq!(ri.waiters, 0, "a replica has no waiters: {ri:?}");
            if ri.owner == owner {
                assert_eq!(mi.as_ref().map(|i| i.owner.as_slice()), Some(owner), "replica showed {} before the master did", s(owner));
            }
        }
        if mi.map(|i| i.owner == owner).unwrap_or(false) {
            return;
        }
        assert!(Instant::now() < deadline, "master never handed {} the lock", s(owner));
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn handoff_on_release_and_expiry_replicates() {
    let (master, replica) = pair();
    let mut m = master.conn();
    let mut r = replica.conn();
    let mut h = master.conn();

    // A replica refuses to queue a waiter (it is a write command).
    let mut rw = waiter(&replica, Duration::from_secs(3));
    let e = expect_err(&mut rw, &acq_wait("k", "w", 60_000, 0));
    assert!(e.starts_with("READONLY"), "ACQUIRE WAIT on a replica: {e}");

    for (case, ttl) in [("release", 60_000), ("expiry", 500), ("DEL", 60_000), ("FLUSHALL", 60_000)] {
        let th = grant(&mut h, "k", "h", ttl);
        // WAIT waits for the calling connection's own last write on Valkey
        // 8 (not the server's offset): ask it on the connection that wrote.
        wait1(&mut h);
        let mut w = waiter(&master, Duration::from_secs(10));
        send_cmd(&mut w, &acq_wait("k", "w", 60_000, 10_000));
        wait_waiters(&mut m, b"k", 1);
        let ri = info(&mut r, b"k").expect("replica has h's lock");
        assert_eq!((ri.owner.as_slice(), ri.token, ri.waiters), (&b"h"[..], th, 0), "{case}");
        match case {
            "release" => assert_eq!(release(&mut h, b"k", b"h"), 1),
            "DEL" => assert_eq!(ok_cmd(&mut h, cmd("DEL").arg("k")), Value::Int(1)),
            "FLUSHALL" => assert_eq!(ok_cmd(&mut h, &cmd("FLUSHALL")), Value::Okay),
            _ => {}
        }
        follow_until_master_owner(&mut m, &mut r, b"k", b"w");
        let tw = recv_token(&mut w, case).unwrap_or_else(|| panic!("{case}: waiter got nil"));
        assert!(tw > th);
        wait1(&mut m);
        let mi = info(&mut m, b"k").expect("master lock");
        let ri = info(&mut r, b"k").unwrap_or_else(|| panic!("{case}: replica lacks w's lock"));
        assert_eq!(ri.owner, b"w", "{case}: replica owner");
        assert_eq!(ri.token, tw, "{case}: replica token");
        assert_eq!(mi.token, tw);
        let (mp, rp) = (pexpiretime(&mut m, b"k"), pexpiretime(&mut r, b"k"));
        assert!(mp > now_unix_ms() + 50_000, "{case}: w's lease");
        assert_eq!(mp, rp, "{case}: PEXPIRETIME master vs replica");
        assert_eq!(release(&mut w, b"k", b"w"), 1);
        wait1(&mut w);
        assert!(!exists(&mut r, b"k"), "{case}: release replicated");
    }
}

#[test]
fn handoffs_persist_in_the_aof_in_order() {
    // Every handoff reaches the AOF after the command that freed the lock
    // (DEL k then LOCK.APPLY k w ..., never the other way round), so a
    // restart from the AOF shows the waiters' locks.
    let mut srv = Server::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let mut h = srv.conn();
    let mut o = srv.conn();
    let mut expected = Vec::new();
    for (key, how) in [("r", "release"), ("e", "expiry"), ("d", "DEL"), ("o", "overwrite")] {
        let th = grant(&mut h, key, "h", if how == "expiry" { 300 } else { 60_000 });
        let mut w = waiter(&srv, Duration::from_secs(10));
        send_cmd(&mut w, &acq_wait(key, "w", 600_000, 10_000));
        wait_waiters(&mut o, key.as_bytes(), 1);
        match how {
            "release" => assert_eq!(release(&mut h, key.as_bytes(), b"h"), 1),
            "DEL" => assert_eq!(ok_cmd(&mut h, cmd("DEL").arg(key)), Value::Int(1)),
            "overwrite" => assert_eq!(ok_cmd(&mut h, cmd("SET").arg(key).arg("w")), Value::Okay),
            _ => {}
        }
        let tw = recv_token(&mut w, how).unwrap_or_else(|| panic!("{how}: waiter got nil"));
        assert!(tw > th);
        expected.push((key, tw, pexpiretime(&mut o, key.as_bytes())));
    }
    wait_aof_flushed(&mut o);
    drop((h, o));
    srv.kill9();
    srv.start_again();
    let mut c = srv.conn();
    for (key, tw, deadline) in expected {
        let i = info(&mut c, key.as_bytes()).unwrap_or_else(|| panic!("{key}: the waiter's lock is missing after an AOF restart"));
        assert_eq!((i.owner.as_slice(), i.token), (&b"w"[..], tw), "{key} after AOF restart");
        assert_eq!(pexpiretime(&mut c, key.as_bytes()), deadline, "{key}: deadline after AOF restart");
    }
}

/// The waiter's reply must agree with LOCK.INFO: granted → it holds the lock
/// with that token; nil → it does not hold it. No reply at all is a hang.
fn assert_reply_agrees_with_owner(w: &mut Connection, o: &mut Connection, th: i64, what: &str) {
    let r = try_recv_reply(w);
    let i = info_any(o, b"k");
    eprintln!("{what}: waiter got {r:?}; LOCK.INFO {i:?}");
    match (&r, &i) {
        (Some(Ok(Value::Int(t))), Some(i)) => {
            assert_eq!((i.owner.as_slice(), i.token), (&b"w"[..], Some(*t)), "{what}: granted, must hold");
            assert!(*t > th);
        }
        (Some(Ok(Value::Nil)), i) => assert!(
            i.as_ref().map(|i| i.owner != b"w").unwrap_or(true),
            "{what}: the waiter was told nil but LOCK.INFO shows it holding the lock: {i:?}"
        ),
        (None, i) => {
            let flags: String = cmd("CLIENT").arg("LIST").query(o).expect("CLIENT LIST");
            panic!(
                "{what}: the waiter got NO reply within 2 s (it hangs) while LOCK.INFO shows {i:?}; blocked_clients {}\n{flags}",
                blocked_clients(o)
            )
        }
        (r, i) => panic!("{what}: waiter got {r:?}, LOCK.INFO {i:?}"),
    }
    assert_eq!(blocked_clients(o), 0);
}

#[test]
fn wait_timeout_due_in_the_same_turn_as_a_handoff_still_gets_a_reply() {
    // The waiter's timeout passes while the server sleeps; the RELEASE runs
    // right after the sleep (same read), before Redis processes timeouts.
    let srv = Server::start();
    let mut h = srv.conn();
    let mut o = srv.conn();
    let th = grant(&mut h, "k", "h", 60_000);
    let mut w = waiter(&srv, Duration::from_secs(2));
    send_cmd(&mut w, &acq_wait("k", "w", 60_000, 100));
    wait_waiters(&mut o, b"k", 1);
    let mut p = redis::pipe();
    p.cmd("DEBUG").arg("SLEEP").arg("0.3");
    p.cmd("LOCK.RELEASE").arg("k").arg("h");
    h.send_packed_command(&p.get_packed_pipeline()).expect("send");
    assert_eq!(recv_reply(&mut h, "DEBUG SLEEP"), Ok(Value::Okay));
    assert_eq!(recv_reply(&mut h, "RELEASE"), Ok(Value::Int(1)));
    assert_reply_agrees_with_owner(&mut w, &mut o, th, "timeout due with the handoff");
}

#[test]
fn client_unblock_right_after_a_handoff_still_gets_a_reply() {
    // CLIENT UNBLOCK runs right behind the RELEASE that granted the waiter
    // (same read), before the grant's reply went out.
    let srv = Server::start();
    let mut h = srv.conn();
    let mut o = srv.conn();
    let th = grant(&mut h, "k", "h", 60_000);
    let mut w = waiter(&srv, Duration::from_secs(2));
    let id = client_id(&mut w);
    send_cmd(&mut w, &acq_wait("k", "w", 60_000, 0));
    wait_waiters(&mut o, b"k", 1);
    let mut p = redis::pipe();
    p.cmd("LOCK.RELEASE").arg("k").arg("h");
    p.cmd("CLIENT").arg("UNBLOCK").arg(id);
    h.send_packed_command(&p.get_packed_pipeline()).expect("send");
    assert_eq!(recv_reply(&mut h, "RELEASE"), Ok(Value::Int(1)));
    let unblocked = recv_reply(&mut h, "CLIENT UNBLOCK");
    eprintln!("CLIENT UNBLOCK replied {unblocked:?}");
    assert_reply_agrees_with_owner(&mut w, &mut o, th, "CLIENT UNBLOCK behind the handoff");
}

#[test]
fn waited_key_leaving_by_rename_move_or_pexpire_0_frees_the_waiter() {
    // The lock under the waited name is gone: the oldest waiter gets the
    // name (otherwise a newcomer without WAIT would take it first).
    let srv = Server::start();
    let mut h = srv.conn();
    let mut o = srv.conn();
    for how in ["RENAME", "MOVE", "PEXPIRE 0", "RESTORE REPLACE"] {
        ok_cmd(&mut o, &cmd("FLUSHALL"));
        let th = grant(&mut h, "k", "h", 60_000);
        let mut w = waiter(&srv, Duration::from_secs(5));
        send_cmd(&mut w, &acq_wait("k", "w", 60_000, 3000));
        wait_waiters(&mut o, b"k", 1);
        let t0 = Instant::now();
        match how {
            "RENAME" => assert_eq!(ok_cmd(&mut h, cmd("RENAME").arg("k").arg("k2")), Value::Okay),
            "MOVE" => assert_eq!(ok_cmd(&mut h, cmd("MOVE").arg("k").arg(1)), Value::Int(1)),
            "PEXPIRE 0" => assert_eq!(ok_cmd(&mut h, cmd("PEXPIRE").arg("k").arg(0)), Value::Int(1)),
            _ => {
                // Replaced by a list: waiters get WRONGTYPE, checked below.
                ok_cmd(&mut h, cmd("RPUSH").arg("l").arg("x"));
                let dump: Vec<u8> = cmd("DUMP").arg("l").query(&mut h).expect("DUMP");
                ok_cmd(&mut h, cmd("RESTORE").arg("k").arg(0).arg(dump).arg("REPLACE"));
            }
        }
        let r = recv_reply(&mut w, how);
        let el = t0.elapsed();
        if how == "RESTORE REPLACE" {
            assert_eq!(r, Err(E_WRONGTYPE.to_string()), "{how}: key replaced by a list");
            continue;
        }
        let tw = match r {
            Ok(Value::Int(t)) => t,
            other => panic!("{how}: waiter got {other:?} instead of the lock"),
        };
        eprintln!("{how}: waiter granted after {el:?}");
        assert!(el < Duration::from_secs(1), "{how}: handoff took {el:?}");
        assert!(tw > th);
        let i = info(&mut o, b"k").expect("held by w");
        assert_eq!((i.owner.as_slice(), i.token), (&b"w"[..], tw), "{how}");
    }
}

#[test]
fn handoffs_emit_lock_acquire_after_the_freeing_event() {
    let srv = Server::start();
    let mut h = srv.conn();
    let mut o = srv.conn();
    ok_cmd(&mut o, cmd("CONFIG").arg("SET").arg("notify-keyspace-events").arg("KEA"));
    let mut subcon = srv.conn();
    let mut ps = subcon.as_pubsub();
    ps.psubscribe("__keyspace@0__:*").expect("PSUBSCRIBE keyspace");
    ps.set_read_timeout(Some(Duration::from_secs(5))).expect("pubsub read timeout");

    let mut ws = Vec::new();
    for (key, how) in [("r", "release"), ("e", "expiry"), ("d", "DEL")] {
        grant(&mut h, key, "h", if how == "expiry" { 200 } else { 60_000 });
        let mut w = waiter(&srv, Duration::from_secs(10));
        send_cmd(&mut w, &acq_wait(key, "w", 60_000, 10_000));
        wait_waiters(&mut o, key.as_bytes(), 1);
        match how {
            "release" => assert_eq!(release(&mut h, key.as_bytes(), b"h"), 1),
            "DEL" => assert_eq!(ok_cmd(&mut h, cmd("DEL").arg(key)), Value::Int(1)),
            _ => {}
        }
        assert!(recv_token(&mut w, how).is_some(), "{how}: waiter granted");
        ws.push(w);
    }
    ok_cmd(&mut o, cmd("SET").arg("marker").arg("1"));
    let mut events: Vec<(String, String)> = Vec::new();
    loop {
        let m = ps.get_message().unwrap_or_else(|e| panic!("no keyspace message within 5 s (so far {events:?}): {e}"));
        let ch: String = m.get_channel_name().to_string();
        let payload: String = m.get_payload().expect("payload");
        if ch == "__keyspace@0__:marker" {
            break;
        }
        events.push((ch.trim_start_matches("__keyspace@0__:").to_string(), payload));
        assert!(events.len() < 100, "runaway events: {events:?}");
    }
    for (key, freeing) in [("r", "lock.release"), ("e", "expired"), ("d", "del")] {
        let on_key: Vec<&str> = events.iter().filter(|(k, _)| k == key).map(|(_, e)| e.as_str()).collect();
        assert_eq!(
            on_key,
            vec!["lock.acquire", freeing, "lock.acquire"],
            "events on {key}: h's grant, the freeing event, then the handoff's grant (all: {events:?})"
        );
    }
}

#[test]
fn master_demoted_to_replica_unblocks_its_waiters() {
    let master = Server::start();
    let other = Server::start_with(MASTER_ARGS);
    let mut m = master.conn();
    grant(&mut m, "k", "h", 300);
    let mut w = waiter(&master, Duration::from_secs(5));
    send_cmd(&mut w, &acq_wait("k", "w", 60_000, 0));
    wait_waiters(&mut m, b"k", 1);
    ok_cmd(&mut m, cmd("REPLICAOF").arg("127.0.0.1").arg(other.port));
    match try_recv_reply(&mut w) {
        Some(Err(e)) => assert!(e.starts_with("UNBLOCKED"), "waiter on a demoted master: {e}"),
        other => {
            panic!("waiter on a master turned replica: expected an UNBLOCKED error, got {other:?}")
        }
    }
    wait_replica_synced(&other, &master);
    // Past h's deadline, after the sync: nothing granted on the demoted node.
    while now_unix_ms() < pexpiretime(&mut m, b"k").max(0) + 100 {
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut oc = other.conn();
    assert_eq!(info_any(&mut oc, b"k"), None, "the new master has no k");
    assert_eq!(info_any(&mut m, b"k"), None, "the demoted node granted k on its own");
    let keys: Vec<String> = cmd("KEYS").arg("*").query(&mut m).expect("KEYS");
    assert!(keys.is_empty(), "demoted node has keys the master does not: {keys:?}");
}

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

#[test]
fn wait_option_errors() {
    let srv = Server::start();
    let mut c = srv.conn();
    let th = grant(&mut c, "k", "h", 60_000);
    let deadline = pexpiretime(&mut c, b"k");
    let e_needs = "ERR WAIT needs a timeout";
    let e_timeout = "ERR timeout must be a non-negative integer (milliseconds)";
    let e_twice = "ERR WAIT given more than once";
    let e_too_large = "ERR timeout is too large (at most 9223372036854775807 milliseconds; 0 waits without limit)";
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["k", "w", "1000", "WAIT"], e_needs),
        (vec!["free", "w", "1000", "WAIT"], e_needs),
        (vec!["k", "w", "1000", "FENCE", "5", "WAIT"], e_needs),
        (vec!["k", "w", "1000", "WAIT", "-1"], e_timeout),
        (vec!["k", "w", "1000", "WAIT", "abc"], e_timeout),
        (vec!["k", "w", "1000", "WAIT", ""], e_timeout),
        (vec!["k", "w", "1000", "WAIT", "1.5"], e_timeout),
        (vec!["k", "w", "1000", "WAIT", "9223372036854775808"], e_too_large),
        (vec!["free", "w", "1000", "wait", "-5"], e_timeout),
        (vec!["k", "w", "1000", "WAIT", "1", "WAIT", "2"], e_twice),
        (vec!["k", "w", "1000", "wait", "1", "FENCE", "3", "Wait", "2"], e_twice),
        (vec!["free", "w", "1000", "WAIT", "0", "WAIT", "0"], e_twice),
    ];
    for (args, want) in &cases {
        let mut cm = cmd("LOCK.ACQUIRE");
        for a in args {
            cm.arg(*a);
        }
        let e = expect_err(&mut c, &cm);
        assert_eq!(e, *want, "LOCK.ACQUIRE {}", args.join(" "));
    }
    let i = info(&mut c, b"k").expect("k");
    assert_eq!((i.owner.as_slice(), i.token, i.waiters), (&b"h"[..], th, 0));
    assert_eq!(pexpiretime(&mut c, b"k"), deadline);
    assert!(!exists(&mut c, b"free"), "an erroring ACQUIRE created a key");
    // Case-insensitive WAIT, valid: a free key is granted at once.
    let t = ok_cmd(&mut c, cmd("LOCK.ACQUIRE").arg("free").arg("w").arg(1000).arg("wAiT").arg(5));
    assert!(matches!(t, Value::Int(x) if x > th), "{t:?}");
    // WRONGTYPE at once, not a wait, on another type.
    ok_cmd(&mut c, cmd("RPUSH").arg("lst").arg("a"));
    let t0 = Instant::now();
    assert_eq!(expect_err(&mut c, &acq_wait("lst", "w", 1000, 0)), E_WRONGTYPE);
    assert!(t0.elapsed() < Duration::from_secs(1));
    assert_eq!(grant(&mut c, "after", "x", 1000), th + 2, "errors consumed no token");
}

/// One waiter as LOCK.WAITERS lists it: position, owner, mode, limit,
/// waited ms, ms left of its WAIT.
fn waiter_rows(c: &mut Connection, key: &str, count: Option<i64>) -> Vec<(i64, String, String, Option<i64>, i64, i64)> {
    let mut q = cmd("LOCK.WAITERS");
    q.arg(key);
    if let Some(n) = count {
        q.arg("COUNT").arg(n);
    }
    let Value::Array(rows) = ok_cmd(c, &q) else { panic!("LOCK.WAITERS must be an array") };
    rows.into_iter()
        .map(|row| {
            let Value::Array(f) = row else { panic!("a waiter must be a field/value array (RESP2): {row:?}") };
            let names: Vec<String> = f.iter().step_by(2).map(|v| String::from_utf8_lossy(&bulk_bytes(v)).into_owned()).collect();
            assert_eq!(names, ["position", "owner", "mode", "limit", "waited_ms", "wait_left_ms"], "{f:?}");
            let text = |v: &Value| String::from_utf8_lossy(&bulk_bytes(v)).into_owned();
            let limit = match &f[7] {
                Value::Nil => None,
                v => Some(int_of(v, "limit")),
            };
            (int_of(&f[1], "position"), text(&f[3]), text(&f[5]), limit, int_of(&f[9], "waited_ms"), int_of(&f[11], "wait_left_ms"))
        })
        .collect()
}

fn bulk_bytes(v: &Value) -> Vec<u8> {
    match v {
        Value::BulkString(b) => b.clone(),
        Value::SimpleString(s) => s.as_bytes().to_vec(),
        other => panic!("expected a string, got {other:?}"),
    }
}

/// One lock as LOCK.TOP lists it: key, waiters, oldest wait, mode,
/// holders, longest hold.
type TopRow = (String, i64, i64, Option<String>, i64, Option<i64>);

fn top_rows(c: &mut Connection, count: Option<i64>) -> Vec<TopRow> {
    let mut q = cmd("LOCK.TOP");
    if let Some(n) = count {
        q.arg("COUNT").arg(n);
    }
    let Value::Array(rows) = ok_cmd(c, &q) else { panic!("LOCK.TOP must be an array") };
    let text = |v: &Value| String::from_utf8_lossy(&bulk_bytes(v)).into_owned();
    let opt_int = |v: &Value| match v {
        Value::Nil => None,
        v => Some(int_of(v, "a number")),
    };
    rows.into_iter()
        .map(|row| {
            let Value::Array(f) = row else { panic!("a lock must be a field/value array (RESP2): {row:?}") };
            let names: Vec<String> = f.iter().step_by(2).map(text).collect();
            assert_eq!(names, ["key", "waiters", "oldest_wait_ms", "mode", "holders", "longest_hold_ms"], "{f:?}");
            let mode = match &f[7] {
                Value::Nil => None,
                v => Some(text(v)),
            };
            (text(&f[1]), int_of(&f[3], "waiters"), int_of(&f[5], "oldest_wait_ms"), mode, int_of(&f[9], "holders"), opt_int(&f[11]))
        })
        .collect()
}

/// LOCK.TOP lists the waited locks busiest first (most waiters, then the
/// oldest wait), with their holders and how long the longest has held.
#[test]
fn lock_top_lists_the_most_contended_locks_first() {
    let s = Server::start();
    let mut c = s.conn();
    assert!(top_rows(&mut c, None).is_empty(), "nothing waits");
    let held_from = Instant::now();
    grant(&mut c, "one-waiter-old", "h", 60_000);
    grant(&mut c, "one-waiter-new", "h", 60_000);
    grant(&mut c, "busy", "h", 60_000);
    for r in ["r1", "r2"] {
        int_of(&ok_cmd(&mut c, cmd("LOCK.ACQUIRE").arg("readers").arg(r).arg(60_000).arg("SHARED")), "reader");
    }
    grant(&mut c, "nobody-waits", "h", 60_000);
    let mut conns = Vec::new();
    let mut queue = |key: &str, owner: &str, n: i64| {
        let mut w = waiter(&s, Duration::from_secs(30));
        send_cmd(&mut w, cmd("LOCK.ACQUIRE").arg(key).arg(owner).arg(60_000).arg("WAIT").arg(20_000));
        wait_waiters(&mut c, key.as_bytes(), n);
        conns.push(w);
        // Waits apart by more than the millisecond the server counts in.
        std::thread::sleep(Duration::from_millis(20));
    };
    queue("one-waiter-old", "w", 1);
    queue("readers", "writer", 1);
    queue("busy", "b1", 1);
    queue("busy", "b2", 2);
    queue("busy", "b3", 3);
    queue("one-waiter-new", "w", 1);
    let rows = top_rows(&mut c, None);
    let keys: Vec<&str> = rows.iter().map(|r| r.0.as_str()).collect();
    assert_eq!(keys, ["busy", "one-waiter-old", "readers", "one-waiter-new"], "most waiters, then the oldest wait: {rows:?}");
    let held_for = held_from.elapsed().as_millis() as i64;
    let busy = &rows[0];
    assert_eq!((busy.1, busy.3.as_deref(), busy.4), (3, Some("exclusive"), 1), "{busy:?}");
    assert!(busy.5.is_some_and(|ms| ms >= 0 && ms <= held_for + 5), "held for at most {held_for} ms: {busy:?}");
    assert!(rows[1].2 >= rows[2].2 && rows[2].2 >= rows[3].2, "older waits first among ties: {rows:?}");
    let readers = &rows[2];
    assert_eq!((readers.3.as_deref(), readers.4), (Some("shared"), 2), "two readers hold it: {readers:?}");
    let first_two: Vec<String> = top_rows(&mut c, Some(2)).into_iter().map(|r| r.0).collect();
    assert_eq!(first_two, ["busy", "one-waiter-old"], "COUNT 2: the first two of the whole order");
    assert!(top_rows(&mut c, Some(0)).is_empty(), "COUNT 0");
    // Another database has its own locks.
    let mut other = s.conn();
    ok_cmd(&mut other, cmd("SELECT").arg(1));
    assert!(top_rows(&mut other, None).is_empty(), "db 1 has no waiters");
    // The line moves: busy's holder goes, b1 holds, two wait.
    assert_eq!(release(&mut c, b"busy", b"h"), 1);
    let rows = top_rows(&mut c, Some(1));
    assert_eq!((rows[0].0.as_str(), rows[0].1, rows[0].4), ("busy", 2, 1), "{rows:?}");
    // No key: routing and COMMAND GETKEYS see none.
    let e = expect_err(&mut c, cmd("COMMAND").arg("GETKEYS").arg("LOCK.TOP").arg("COUNT").arg(1));
    assert!(e.contains("no key arguments"), "{e}");
    for (args, expected) in [
        (&["COUNT", "-1"][..], "ERR COUNT must be a non-negative integer"),
        (&["LIMIT", "1"][..], "ERR unknown option 'LIMIT'"),
        (&["COUNT"][..], "ERR wrong number of arguments for 'lock.top' command"),
    ] {
        let mut q = cmd("LOCK.TOP");
        for a in args {
            q.arg(*a);
        }
        assert_eq!(expect_err(&mut c, &q), expected, "{args:?}");
    }
}

/// LOCK.WAITERS lists a line of mixed waiters in order, with their modes,
/// how long each has waited and what is left of its WAIT.
#[test]
fn lock_waiters_lists_the_line_in_order() {
    let s = Server::start();
    let mut c = s.conn();
    assert!(waiter_rows(&mut c, "rw", None).is_empty(), "no line on a missing key");
    grant(&mut c, "rw", "holder", 60_000);
    let started = Instant::now();
    let mut conns = Vec::new();
    for (i, (owner, extra, wait)) in
        [("w1", None, 0), ("r1", Some("SHARED"), 10_000), ("r2", Some("SHARED"), 5_000)].into_iter().enumerate()
    {
        let mut w = waiter(&s, Duration::from_secs(30));
        let mut q = cmd("LOCK.ACQUIRE");
        q.arg("rw").arg(owner).arg(60_000);
        if let Some(e) = extra {
            q.arg(e);
        }
        q.arg("WAIT").arg(wait);
        send_cmd(&mut w, &q);
        wait_waiters(&mut c, b"rw", i as i64 + 1);
        conns.push(w);
    }
    let rows = waiter_rows(&mut c, "rw", None);
    let elapsed = started.elapsed().as_millis() as i64;
    let who: Vec<(i64, &str, &str)> = rows.iter().map(|(p, o, m, _, _, _)| (*p, o.as_str(), m.as_str())).collect();
    assert_eq!(who, [(1, "w1", "exclusive"), (2, "r1", "shared"), (3, "r2", "shared")]);
    assert!(rows.iter().all(|r| r.3.is_none()), "a read-write lock has no limit: {rows:?}");
    let waited: Vec<i64> = rows.iter().map(|r| r.4).collect();
    assert!(waited[0] >= waited[1] && waited[1] >= waited[2] && waited[2] >= 0, "older waiters waited longer: {waited:?}");
    assert!(waited[0] <= elapsed + 5, "{waited:?} within {elapsed} ms");
    assert_eq!(rows[0].5, -1, "WAIT 0 has no limit");
    assert!(rows[1].5 > 0 && rows[1].5 <= 10_000 && rows[2].5 > 0 && rows[2].5 <= 5_000, "{rows:?}");
    assert_eq!(waiter_rows(&mut c, "rw", Some(2)).len(), 2, "COUNT 2");
    assert!(waiter_rows(&mut c, "rw", Some(0)).is_empty(), "COUNT 0");
    // The line moves: w1 gets the lock, the readers stay behind it.
    assert_eq!(release(&mut c, b"rw", b"holder"), 1);
    recv_reply(&mut conns[0], "w1").expect("w1 granted");
    let owners: Vec<String> = waiter_rows(&mut c, "rw", None).into_iter().map(|r| r.1).collect();
    assert_eq!(owners, ["r1", "r2"]);

    // A semaphore's waiters show its limit.
    let mut p = s.conn();
    int_of(&ok_cmd(&mut p, cmd("LOCK.ACQUIRE").arg("sem").arg("p1").arg(60_000).arg("SHARED").arg("LIMIT").arg(1)), "p1");
    let mut w = waiter(&s, Duration::from_secs(30));
    send_cmd(&mut w, cmd("LOCK.ACQUIRE").arg("sem").arg("p2").arg(60_000).arg("SHARED").arg("LIMIT").arg(1).arg("WAIT").arg(10_000));
    wait_waiters(&mut c, b"sem", 1);
    let rows = waiter_rows(&mut c, "sem", None);
    assert_eq!((rows[0].1.as_str(), rows[0].2.as_str(), rows[0].3), ("p2", "shared", Some(1)));

    for (args, expected) in [
        (&["rw", "COUNT", "-1"][..], "ERR COUNT must be a non-negative integer"),
        (&["rw", "COUNT", "x"][..], "ERR COUNT must be a non-negative integer"),
        (&["rw", "LIMIT", "1"][..], "ERR unknown option 'LIMIT'"),
        (&["rw", "COUNT"][..], "ERR wrong number of arguments for 'lock.waiters' command"),
    ] {
        let mut q = cmd("LOCK.WAITERS");
        for a in args {
            q.arg(*a);
        }
        assert_eq!(expect_err(&mut c, &q), expected, "{args:?}");
    }
}
