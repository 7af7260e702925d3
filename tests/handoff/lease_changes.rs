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
/// A handoff later than this after the lease's end counts as missed. The
/// target is 10 ms; the margin is for a loaded 2-core machine.
const LATE_MS: u64 = 250;

fn padded_server(args: &[&str]) -> Server {
    let server = Server::start_with(args);
    let mut c = server.conn();
    let pad: i64 = cmd("EVAL")
        .arg("for i = 1, tonumber(ARGV[1]) do redis.call('SET', 'pad:' .. i, 'x', 'PX', 3600000) end return tonumber(ARGV[1])")
        .arg(0)
        .arg(300_000)
        .query(&mut c)
        .expect("300,000 volatile keys");
    assert_eq!(pad, 300_000);
    server
}

/// A holds `key` for an hour and B waits for it; `shorten` cuts A's lease
/// to SHORT_MS. Returns how long after the shortening B was granted, or
/// what B got instead.
fn try_handoff_after(server: &Server, key: &str, shorten: impl FnOnce(&mut Connection)) -> Result<Duration, String> {
    let mut a = server.conn();
    grant(&mut a, key, "A", 3_600_000);
    let mut b = server.conn();
    b.set_read_timeout(Some(Duration::from_millis(WAIT_MS + 10_000))).expect("read timeout");
    send_cmd(&mut b, cmd("LOCK.ACQUIRE").arg(key).arg("B").arg(10_000).arg("WAIT").arg(WAIT_MS));
    wait_waiters(&mut a, key.as_bytes(), 1);
    let shortened = Instant::now();
    shorten(&mut a);
    let reply = recv_reply(&mut b, "B's WAIT");
    let took = shortened.elapsed();
    match reply {
        Ok(Value::Int(_)) => {}
        other => return Err(format!("B got {other:?} after {took:?}")),
    }
    assert_eq!(info(&mut a, key.as_bytes()).map(|i| i.owner), Some(b"B".to_vec()), "{key}: B holds it");
    Ok(took)
}

fn handoff_after(server: &Server, key: &str, shorten: impl FnOnce(&mut Connection)) -> Duration {
    try_handoff_after(server, key, shorten).unwrap_or_else(|e| panic!("{key}: {e}"))
}

fn assert_prompt(what: &str, took: Duration) {
    eprintln!("{what}: handed over {took:?} after the lease was cut to {SHORT_MS} ms");
    assert!(took >= Duration::from_millis(SHORT_MS - 5), "{what}: handed over before the lease ended ({took:?})");
    assert!(took <= Duration::from_millis(SHORT_MS + LATE_MS), "{what}: handed over {took:?} after the cut");
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
    type Shorten = Box<dyn FnOnce(&mut Connection)>;
    let cases: Vec<(&str, Shorten)> = vec![
        ("LOCK.EXTEND", Box::new(move |a| assert_eq!(extend(a, b"k1", b"A", short), 1))),
        ("same-owner LOCK.ACQUIRE", Box::new(move |a| assert!(acquire(a, b"k2", b"A", short).is_some()))),
        (
            "PEXPIREAT in MULTI/EXEC",
            Box::new(move |a| {
                // Separate round trips: the command is queued well before EXEC.
                ok_cmd(a, &cmd("MULTI"));
                ok_cmd(a, cmd("PEXPIREAT").arg("k3").arg(now_unix_ms() + short + 50));
                std::thread::sleep(Duration::from_millis(50));
                let v: Vec<i64> = cmd("EXEC").query(a).expect("EXEC");
                assert_eq!(v, vec![1]);
            }),
        ),
        ("renamed PEXPIRE", Box::new(move |a| assert_eq!(int_of(&ok_cmd(a, cmd("CUT-LEASE").arg("k4").arg(short)), "CUT-LEASE"), 1))),
        (
            "EXPIREAT in MULTI/EXEC",
            Box::new(move |a| {
                // EXPIREAT takes seconds: cut to the next whole second or so.
                let at = now_unix_ms() / 1000 + 1;
                let v: Vec<i64> = redis::pipe().atomic().cmd("EXPIREAT").arg("k5").arg(at).query(a).expect("MULTI/EXEC");
                assert_eq!(v, vec![1]);
            }),
        ),
        (
            "EVAL PEXPIRE",
            Box::new(move |a| {
                let v: i64 =
                    cmd("EVAL").arg("return redis.call('CUT-LEASE', KEYS[1], ARGV[1])").arg(1).arg("k6").arg(short).query(a).expect("EVAL");
                assert_eq!(v, 1);
            }),
        ),
        (
            "FCALL PEXPIREAT",
            Box::new(move |a| {
                let v: i64 = cmd("FCALL").arg("cut").arg(1).arg("k7").arg(now_unix_ms() + short).query(a).expect("FCALL");
                assert_eq!(v, 1);
            }),
        ),
    ];
    let mut failures = Vec::new();
    for (i, (what, shorten)) in cases.into_iter().enumerate() {
        let key = format!("k{}", i + 1);
        let took = match try_handoff_after(&server, &key, shorten) {
            Ok(took) => took,
            Err(e) => {
                eprintln!("{what}: {e}");
                failures.push(format!("{what}: {e}"));
                continue;
            }
        };
        if what.starts_with("EXPIREAT") {
            // Whole seconds: served within LATE_MS of the second it names.
            eprintln!("{what}: handed over {took:?} after the cut");
            if took > Duration::from_millis(1000 + LATE_MS) {
                failures.push(format!("{what}: {took:?}"));
            }
            continue;
        }
        eprintln!("{what}: handed over {took:?} after the lease was cut to {SHORT_MS} ms");
        if took < Duration::from_millis(SHORT_MS - 5) || took > Duration::from_millis(SHORT_MS + LATE_MS) {
            failures.push(format!("{what}: {took:?}"));
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
    let took = handoff_after(&server, "k", |a| {
        assert_eq!(int_of(&ok_cmd(a, cmd("PEXPIRE").arg("k").arg(SHORT_MS)), "PEXPIRE"), 1);
    });
    assert_prompt("PEXPIRE", took);
}
