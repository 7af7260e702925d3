//! Every change of a waited lock's lease end reaches the handoff: the
//! oldest waiter is served when the shortened lease runs out, whatever
//! form the change took (LOCK.EXTEND, a same-owner re-grant, PEXPIRE and
//! friends directly, inside MULTI/EXEC, from Lua or a function, or under a
//! renamed command name).
//!
//! The server holds 300,000 other volatile keys, so Redis's own expiry
//! (which samples volatile keys) would find the lock late: only the
//! module's own timer makes the handoff prompt.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use redis::{Connection, Value};

/// The shortened lease.
const SHORT_MS: u64 = 100;
/// How long the waiter waits at most: a handoff missed means nil after it.
const WAIT_MS: u64 = 6_000;
/// B's ttl: its lease starts at its grant, so PEXPIRETIME less this is
/// when it was granted, by the server's clock.
const B_TTL: i64 = 10_000;
/// A median handoff (of `TRIALS`) later than this after the lease's end,
/// by the server's clock, counts as missed. What a handoff's delay is made
/// of: the module's timer firing late in the event loop (1 ms idle) plus
/// redis-server waiting for a CPU on a loaded 2-core machine (tens of ms);
/// the test's own scheduling is not in it. Redis's own expiry, sampling 300,000 volatile keys, finds the lock
/// hundreds of ms late or later; a change the module missed leaves B to
/// its WAIT (nil after 6 s).
const LATE_MS: i64 = 250;

fn padded_server(args: &[&str]) -> Server {
    let server = Server::start_with(args);
    let mut c = server.conn();
    // In 30 scripts of 10,000: one of 300,000 could outlast the read
    // timeout on a loaded machine.
    for batch in 0..30 {
        let pad: i64 = cmd("EVAL")
            .arg("for i = tonumber(ARGV[1]), tonumber(ARGV[1]) + 9999 do redis.call('SET', 'pad:' .. i, 'x', 'PX', 3600000) end return 10000")
            .arg(0)
            .arg(batch * 10_000)
            .query(&mut c)
            .expect("10,000 volatile keys");
        assert_eq!(pad, 10_000);
    }
    assert_eq!(int_of(&ok_cmd(&mut c, &cmd("DBSIZE")), "DBSIZE"), 300_000);
    server
}

/// `cut` on `key` and PEXPIRETIME of `key` in one write: the server runs
/// them back to back, so no handoff comes between, however slowly this
/// test runs. Returns the reply to `cut` and the lease's new end.
fn cut_and_end(a: &mut Connection, cut: &redis::Cmd, key: &str) -> (Value, i64) {
    let mut p = redis::pipe();
    p.add_command(cut.clone());
    p.cmd("PEXPIRETIME").arg(key);
    let (reply, end): (Value, i64) = p.query(a).expect("the cut and PEXPIRETIME");
    (reply, end)
}

/// A holds `key` for an hour and B waits for it; `shorten` cuts A's lease
/// (to SHORT_MS, or a whole second) and returns its new end (ms since the
/// epoch). Returns how many ms after that end B was granted, by the
/// server's clock, or what B got instead.
fn try_handoff_after(server: &Server, key: &str, shorten: impl FnOnce(&mut Connection) -> i64) -> Result<i64, String> {
    let mut a = server.conn();
    grant(&mut a, key, "A", 3_600_000);
    let mut b = server.conn();
    b.set_read_timeout(Some(Duration::from_millis(WAIT_MS + 10_000))).expect("read timeout");
    send_cmd(&mut b, cmd("LOCK.ACQUIRE").arg(key).arg("B").arg(B_TTL).arg("WAIT").arg(WAIT_MS));
    wait_waiters(&mut a, key.as_bytes(), 1);
    let shortened = Instant::now();
    let lease_end = shorten(&mut a);
    let reply = recv_reply(&mut b, "B's WAIT");
    match reply {
        Ok(Value::Int(_)) => {}
        other => return Err(format!("B got {other:?} after {:?}", shortened.elapsed())),
    }
    assert_eq!(info(&mut a, key.as_bytes()).map(|i| i.owner), Some(b"B".to_vec()), "{key}: B holds it");
    Ok(pexpiretime(&mut a, key.as_bytes()) - B_TTL - lease_end)
}

/// Handoffs measured per way of cutting a lease: their median is what is
/// asserted, so one handoff held up by a busy machine does not decide.
const TRIALS: usize = 5;

/// `TRIALS` handoffs, of keys `{prefix}-0`, `{prefix}-1`..., each lease cut
/// by `shorten` (given the key): how many ms after each cut lease's end
/// its waiter was granted (server clock), or the first that went wrong.
fn handoffs(server: &Server, prefix: &str, shorten: &dyn Fn(&mut Connection, &str) -> i64) -> Result<Vec<i64>, String> {
    (0..TRIALS)
        .map(|trial| {
            let key = format!("{prefix}-{trial}");
            try_handoff_after(server, &key, |a| shorten(a, &key)).map_err(|e| format!("{key}: {e}"))
        })
        .collect()
}

/// Order, every time: no handoff before the lease's end (that would be a
/// handoff of a lease still running). Promptness, as a median: within
/// LATE_MS of it.
fn prompt(lates: &[i64]) -> Result<i64, String> {
    if let Some(early) = lates.iter().find(|late| **late < 0) {
        return Err(format!("handed over {early} ms after the lease ended, before its end: {lates:?}"));
    }
    let median = median_i64(lates);
    if median > LATE_MS {
        return Err(format!("median handoff {median} ms after the lease ended (bound {LATE_MS}): {lates:?}"));
    }
    Ok(median)
}

#[test]
fn every_way_of_cutting_a_waited_lease_hands_over_when_it_ends() {
    let server = padded_server(&["--rename-command", "PEXPIRE", "CUT-LEASE"]);
    let mut fcall = server.conn();
    let _: String = cmd("FUNCTION")
        .arg("LOAD")
        .arg("#!lua name=leases\nredis.register_function('cut', function(keys, args) return redis.call('pexpireat', keys[1], args[1]) end)")
        .query(&mut fcall)
        .expect("FUNCTION LOAD");
    let short = SHORT_MS as i64;
    type Shorten = Box<dyn Fn(&mut Connection, &str) -> i64>;
    let cases: Vec<(&str, Shorten)> = vec![
        (
            "LOCK.EXTEND",
            Box::new(move |a, key| {
                let (reply, end) = cut_and_end(a, cmd("LOCK.EXTEND").arg(key).arg("A").arg(short), key);
                assert_eq!(reply, Value::Int(1));
                end
            }),
        ),
        (
            "same-owner LOCK.ACQUIRE",
            Box::new(move |a, key| {
                let (reply, end) = cut_and_end(a, cmd("LOCK.ACQUIRE").arg(key).arg("A").arg(short), key);
                assert!(matches!(reply, Value::Int(_)), "{reply:?}");
                end
            }),
        ),
        (
            "PEXPIREAT in MULTI/EXEC",
            Box::new(|a, key| {
                // Separate round trips: the command is queued well before EXEC.
                ok_cmd(a, &cmd("MULTI"));
                // A second ahead: still ahead when EXEC runs, however
                // slowly this test runs (a past time would delete at once).
                let at = now_unix_ms() + 1_000;
                ok_cmd(a, cmd("PEXPIREAT").arg(key).arg(at));
                std::thread::sleep(Duration::from_millis(50));
                let v: Vec<i64> = cmd("EXEC").query(a).expect("EXEC");
                assert_eq!(v, vec![1]);
                at
            }),
        ),
        (
            "renamed PEXPIRE",
            Box::new(move |a, key| {
                let (reply, end) = cut_and_end(a, cmd("CUT-LEASE").arg(key).arg(short), key);
                assert_eq!(reply, Value::Int(1));
                end
            }),
        ),
        (
            "EXPIREAT in MULTI/EXEC",
            Box::new(|a, key| {
                // EXPIREAT takes seconds: cut to a whole second, at least
                // one ahead.
                let at = now_unix_ms() / 1000 + 2;
                let v: Vec<i64> = redis::pipe().atomic().cmd("EXPIREAT").arg(key).arg(at).query(a).expect("MULTI/EXEC");
                assert_eq!(v, vec![1]);
                at * 1000
            }),
        ),
        (
            "EVAL PEXPIRE",
            Box::new(move |a, key| {
                let (reply, end) =
                    cut_and_end(a, cmd("EVAL").arg("return redis.call('CUT-LEASE', KEYS[1], ARGV[1])").arg(1).arg(key).arg(short), key);
                assert_eq!(reply, Value::Int(1));
                end
            }),
        ),
        (
            "FCALL PEXPIREAT",
            Box::new(|a, key| {
                let at = now_unix_ms() + 1_000;
                let v: i64 = cmd("FCALL").arg("cut").arg(1).arg(key).arg(at).query(a).expect("FCALL");
                assert_eq!(v, 1);
                at
            }),
        ),
    ];
    let mut failures = Vec::new();
    for (i, (what, shorten)) in cases.into_iter().enumerate() {
        match handoffs(&server, &format!("k{}", i + 1), &*shorten).and_then(|lates| prompt(&lates).map(|median| (median, lates))) {
            Ok((median, lates)) => eprintln!("{what}: handed over {lates:?} ms after the cut leases ended (median {median}; server clock)"),
            Err(e) => {
                eprintln!("{what}: {e}");
                failures.push(format!("{what}: {e}"));
            }
        }
    }
    assert!(failures.is_empty(), "handoffs out of time: {failures:?}");
}

/// A lengthened lease is not handed over at the old end.
#[test]
fn a_lengthened_lease_keeps_its_waiter_waiting() {
    let server = Server::start();
    let mut a = server.conn();
    grant(&mut a, "k", "A", 300);
    let mut b = server.conn();
    b.set_read_timeout(Some(Duration::from_secs(10))).expect("read timeout");
    send_cmd(&mut b, cmd("LOCK.ACQUIRE").arg("k").arg("B").arg(10_000).arg("WAIT").arg(1_500));
    wait_waiters(&mut a, b"k", 1);
    assert_eq!(extend(&mut a, b"k", b"A", 60_000), 1);
    assert!(matches!(recv_reply(&mut b, "B's WAIT"), Ok(Value::Nil)), "B timed out: A still holds k");
    assert_eq!(info(&mut a, b"k").map(|i| i.owner), Some(b"A".to_vec()));
}

#[test]
fn a_plain_pexpire_still_hands_over_promptly() {
    let server = padded_server(&[]);
    let lates = handoffs(&server, "k", &|a, key| {
        let (reply, end) = cut_and_end(a, cmd("PEXPIRE").arg(key).arg(SHORT_MS), key);
        assert_eq!(reply, Value::Int(1));
        end
    })
    .unwrap_or_else(|e| panic!("PEXPIRE: {e}"));
    eprintln!("PEXPIRE: handed over {lates:?} ms after the cut leases ended (server clock)");
    prompt(&lates).unwrap_or_else(|e| panic!("PEXPIRE: {e}"));
}
