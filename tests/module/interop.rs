//! Plain-string locks: a key holding a string (`SET key owner NX PX ttl`,
//! the classic Redis lock) is a lock held by the owner equal to its value.

use crate::common;

use std::time::Duration;

use common::*;
use redis::{Connection, Value};

fn set_px(c: &mut Connection, key: &str, val: &str, px: i64) {
    let r = ok_cmd(c, cmd("SET").arg(key).arg(val).arg("NX").arg("PX").arg(px));
    assert_eq!(r, Value::Okay, "SET {key} {val} NX PX {px}");
}

fn type_of(c: &mut Connection, key: &str) -> String {
    cmd("TYPE").arg(key).query(c).expect("TYPE")
}

#[test]
fn acquire_by_another_owner_is_refused_and_the_string_kept() {
    let srv = Server::start();
    let mut c = srv.conn();
    set_px(&mut c, "k", "alice", 30_000);
    let deadline = pexpiretime(&mut c, b"k");
    assert_eq!(acquire(&mut c, b"k", b"bob", 10_000), None, "ACQUIRE k bob");
    let refused = far_future_token();
    assert_eq!(acquire_fence(&mut c, b"k", b"bob", 10_000, refused), None);
    assert_eq!(acquire(&mut c, b"k", b"alic", 10_000), None, "prefix of the value");
    assert_eq!(acquire(&mut c, b"k", b"alice\0", 10_000), None, "value plus NUL");
    assert_eq!(type_of(&mut c, "k"), "string");
    assert_eq!(get_text(&mut c, "k").as_deref(), Some("alice"));
    assert_eq!(pexpiretime(&mut c, b"k"), deadline, "TTL untouched");
    // The refused FENCE did not raise the counter.
    let t = grant(&mut c, "other", "x", 1000);
    assert!(t < refused, "refused FENCE raised the counter: {t}");
}

#[test]
fn acquire_by_the_same_owner_converts_and_keeps_the_remaining_lease() {
    let srv = Server::start();
    let mut c = srv.conn();
    let t0 = grant(&mut c, "before", "x", 100_000);

    set_px(&mut c, "k", "alice", 30_000);
    let deadline = pexpiretime(&mut c, b"k");
    let t = acquire(&mut c, b"k", b"alice", 10_000).expect("same owner converts the string");
    assert!(t > t0, "conversion issues a new token: {t} after {t0}");
    assert_eq!(type_of(&mut c, "k"), "redislock");
    let i = info(&mut c, b"k").expect("converted lock");
    assert_eq!((i.owner.as_slice(), i.token, i.waiters), (&b"alice"[..], t, 0));
    let p = pttl(&mut c, b"k");
    assert!(p > 10_000 && p <= 30_000, "the lease is the string's remaining TTL (~30000), not ttl-ms 10000: PTTL {p}");
    assert_eq!(pexpiretime(&mut c, b"k"), deadline, "deadline kept exactly");
    // Now a module lock: a second ACQUIRE is an ordinary re-grant.
    assert_eq!(acquire(&mut c, b"k", b"alice", 10_000), Some(t));
    assert!(pttl(&mut c, b"k") <= 10_000, "re-grant restarts the lease at 10000");

    // A string without TTL: the lease becomes ttl-ms.
    ok_cmd(&mut c, cmd("SET").arg("n").arg("alice"));
    let tn = acquire(&mut c, b"n", b"alice", 10_000).expect("convert string without TTL");
    assert!(tn > t);
    let p = pttl(&mut c, b"n");
    assert!(p > 9_000 && p <= 10_000, "string without TTL: lease = ttl-ms; PTTL {p}");
    assert_eq!(type_of(&mut c, "n"), "redislock");

    // FENCE applies to the conversion's new token.
    set_px(&mut c, "f", "alice", 30_000);
    let f = tn + 1_000_000;
    assert_eq!(acquire_fence(&mut c, b"f", b"alice", 10_000, f), Some(f));
    assert_eq!(info(&mut c, b"f").expect("f").token, f);
}

#[test]
fn release_of_a_plain_string_lock() {
    let srv = Server::start();
    let mut c = srv.conn();
    set_px(&mut c, "k", "alice", 30_000);
    assert_eq!(release(&mut c, b"k", b"bob"), 0, "RELEASE k bob");
    assert_eq!(get_text(&mut c, "k").as_deref(), Some("alice"), "string kept");
    assert_eq!(type_of(&mut c, "k"), "string");
    assert_eq!(release(&mut c, b"k", b"alice"), 1, "RELEASE k alice");
    assert!(!exists(&mut c, b"k"), "released string deleted");
    assert_eq!(release(&mut c, b"k", b"alice"), 0, "second release");
}

#[test]
fn extend_of_a_plain_string_lock_keeps_it_a_string() {
    let srv = Server::start();
    let mut c = srv.conn();
    set_px(&mut c, "k", "alice", 30_000);
    let deadline = pexpiretime(&mut c, b"k");
    assert_eq!(extend(&mut c, b"k", b"bob", 5000), 0, "EXTEND k bob");
    assert_eq!(pexpiretime(&mut c, b"k"), deadline, "refused EXTEND kept the TTL");
    assert_eq!(extend(&mut c, b"k", b"alice", 90_000), 1, "EXTEND k alice");
    assert_eq!(type_of(&mut c, "k"), "string", "EXTEND does not convert");
    assert_eq!(get_text(&mut c, "k").as_deref(), Some("alice"));
    let p = pttl(&mut c, b"k");
    assert!(p > 85_000 && p <= 90_000, "PTTL after EXTEND 90000: {p}");
    // A string without TTL gets one.
    ok_cmd(&mut c, cmd("SET").arg("n").arg("alice"));
    assert_eq!(extend(&mut c, b"n", b"alice", 5000), 1);
    let p = pttl(&mut c, b"n");
    assert!(p > 4000 && p <= 5000, "PTTL {p}");
    // Shortening works too (the lease ends ttl-ms from now).
    assert_eq!(extend(&mut c, b"k", b"alice", 1000), 1);
    assert!(pttl(&mut c, b"k") <= 1000);
    // The ttl bound applies as for module locks.
    let e = expect_err(&mut c, cmd("LOCK.EXTEND").arg("k").arg("alice").arg(0));
    assert_eq!(e, "ERR ttl must be a positive integer (milliseconds)");
}

#[test]
fn info_on_a_plain_string_resp2_and_resp3() {
    let srv = Server::start();
    let mut c = srv.conn();
    set_px(&mut c, "k", "alice", 30_000);
    ok_cmd(&mut c, cmd("SET").arg("n").arg("alice"));
    let v = ok_cmd(&mut c, cmd("LOCK.INFO").arg("k"));
    match &v {
        Value::Array(items) => {
            assert_eq!(items.len(), 18, "{v:?}");
            assert_eq!(items[9], Value::BulkString(b"exclusive".to_vec()), "a plain-string lock is exclusive");
            assert_eq!(
                items[13],
                Value::Array(vec![Value::Array(vec![
                    Value::BulkString(b"alice".to_vec()),
                    Value::Nil,
                    items[5].clone(),
                    Value::Nil,
                    Value::Int(0),
                    Value::Int(1)
                ])])
            );
            assert_eq!(items[0], Value::BulkString(b"owner".to_vec()));
            assert_eq!(items[1], Value::BulkString(b"alice".to_vec()));
            assert_eq!(items[2], Value::BulkString(b"token".to_vec()));
            assert_eq!(items[3], Value::Nil, "token of a plain-string lock is nil");
            assert_eq!(items[4], Value::BulkString(b"pttl".to_vec()));
            let p = int_of(&items[5], "pttl");
            assert!(p > 25_000 && p <= 30_000, "pttl {p}");
            assert_eq!(items[6], Value::BulkString(b"waiters".to_vec()));
            assert_eq!(items[7], Value::Int(0));
        }
        other => panic!("RESP2 LOCK.INFO must be a flat array, got {other:?}"),
    }
    let mut c3 = srv.conn_resp3();
    let v3 = ok_cmd(&mut c3, cmd("LOCK.INFO").arg("k"));
    assert!(matches!(v3, Value::Map(_)), "RESP3 LOCK.INFO must be a map: {v3:?}");
    let i = parse_info_any(v3).expect("RESP3 info");
    assert_eq!(i.owner, b"alice");
    assert_eq!(i.token, None);
    assert!(i.pttl > 25_000 && i.pttl <= 30_000);
    assert_eq!(i.waiters, 0);
    let n = info_any(&mut c3, b"n").expect("string without TTL");
    assert_eq!((n.owner.as_slice(), n.token, n.pttl), (&b"alice"[..], None, -1));
    // Binary value round-trips.
    let bin: &[u8] = b"a\x00\xff";
    ok_cmd(&mut c, cmd("SET").arg("b").arg(bin));
    assert_eq!(info_any(&mut c, b"b").expect("b").owner, bin);
    assert_eq!(type_of(&mut c, "k"), "string", "INFO does not convert");
}

#[test]
fn integer_encoded_string_is_owner_by_its_digits() {
    let srv = Server::start();
    let mut c = srv.conn();
    ok_cmd(&mut c, cmd("SET").arg("k").arg("12345"));
    let enc: String = cmd("OBJECT").arg("ENCODING").arg("k").query(&mut c).expect("OBJECT ENCODING");
    assert_eq!(enc, "int", "the value must be integer-encoded for this test");
    let i = info_any(&mut c, b"k").expect("info");
    assert_eq!((i.owner.as_slice(), i.token), (&b"12345"[..], None));
    assert_eq!(acquire(&mut c, b"k", b"1234", 1000), None);
    assert_eq!(acquire(&mut c, b"k", b"012345", 1000), None, "not numeric equality");
    assert_eq!(release(&mut c, b"k", b"12346"), 0);
    assert_eq!(extend(&mut c, b"k", b"12345", 50_000), 1);
    let p = pttl(&mut c, b"k");
    assert!(p > 45_000 && p <= 50_000, "PTTL {p}");
    assert_eq!(release(&mut c, b"k", b"12345"), 1);
    assert!(!exists(&mut c, b"k"));
    ok_cmd(&mut c, cmd("SET").arg("k").arg("12345"));
    let t = acquire(&mut c, b"k", b"12345", 10_000).expect("convert an int-encoded string");
    let i = info(&mut c, b"k").expect("converted");
    assert_eq!((i.owner.as_slice(), i.token), (&b"12345"[..], t));
    // Negative and large integers are compared as their text.
    ok_cmd(&mut c, cmd("SET").arg("neg").arg("-7"));
    assert_eq!(release(&mut c, b"neg", b"-7"), 1);
}

#[test]
fn waiting_on_a_plain_string_lock() {
    // hz 1 so the expiry handoff must come from the module's timer.
    let srv = Server::start_with(&["--hz", "1"]);
    let mut c = srv.conn();
    let mut o = srv.conn();
    let t0 = grant(&mut o, "counter", "x", 100_000);

    // DEL of the string hands it over.
    set_px(&mut c, "k", "alice", 30_000);
    let mut w = srv.conn();
    w.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
    send_cmd(&mut w, cmd("LOCK.ACQUIRE").arg("k").arg("bob").arg(60_000).arg("WAIT").arg(10_000));
    wait_waiters(&mut o, b"k", 1);
    let i = info_any(&mut o, b"k").expect("string lock");
    assert_eq!((i.owner.as_slice(), i.token), (&b"alice"[..], None));
    ok_cmd(&mut c, cmd("DEL").arg("k"));
    let r = recv_reply(&mut w, "bob after DEL");
    let tb = match r {
        Ok(Value::Int(t)) => t,
        other => panic!("bob waiting on a plain-string lock, after DEL: {other:?}"),
    };
    assert!(tb > t0);
    let i = info(&mut o, b"k").expect("bob's lock");
    assert_eq!((i.owner.as_slice(), i.token), (&b"bob"[..], tb));
    assert_eq!(type_of(&mut o, "k"), "redislock");

    // The string's own expiry hands it over too, promptly: nine strings
    // whose leases end 2 s from now and `DEADLINE_STEP_MS` apart, a waiter
    // on each. Redis's own expiry is off, so only the module's timer can
    // notice them end (see `assert_prompt_handoffs` for the bound).
    assert_eq!(ok_cmd(&mut o, cmd("DEBUG").arg("SET-ACTIVE-EXPIRE").arg(0)), Value::Okay);
    let keys: Vec<String> = (0..MEASURED_KEYS).map(|i| format!("e{i}")).collect();
    let mut ws: Vec<Connection> = keys.iter().map(|_| srv.conn()).collect();
    for (i, key) in keys.iter().enumerate() {
        set_px(&mut c, key, "alice", 2_000 + i as i64 * DEADLINE_STEP_MS);
    }
    let deadlines: Vec<i64> = keys.iter().map(|k| pexpiretime(&mut c, k.as_bytes())).collect();
    for (w, key) in ws.iter_mut().zip(&keys) {
        w.set_read_timeout(Some(Duration::from_secs(20))).expect("timeout");
        send_cmd(w, cmd("LOCK.ACQUIRE").arg(key).arg("bob").arg(MEASURED_WAITER_TTL).arg("WAIT").arg(10_000));
        wait_waiters(&mut o, key.as_bytes(), 1);
    }
    assert!(now_unix_ms() < deadlines[0], "setup too slow: the waiters got in line after the first string expired");
    let mut delays = Vec::new();
    let mut te = tb;
    for ((w, key), deadline) in ws.iter_mut().zip(&keys).zip(&deadlines) {
        let t = match recv_reply(w, "bob after the string's expiry") {
            Ok(Value::Int(t)) => t,
            other => panic!("bob waiting on the expiring plain-string lock {key}: {other:?}"),
        };
        assert!(t > te, "{key}: tokens grow with each grant");
        te = t;
        assert_eq!(info(&mut o, key.as_bytes()).expect("bob's lock").owner, b"bob");
        delays.push(granted_at(&mut o, key.as_bytes()) - deadline);
    }
    assert_prompt_handoffs("handoff of expired plain-string locks", &delays);

    // WAIT by the string's own owner converts at once, no blocking.
    set_px(&mut c, "own", "bob", 30_000);
    let t_own = match ok_cmd(&mut w, cmd("LOCK.ACQUIRE").arg("own").arg("bob").arg(10_000).arg("WAIT").arg(0)) {
        Value::Int(t) => t,
        other => panic!("WAIT by the string's owner: {other:?}"),
    };
    assert!(t_own > te);
    assert_eq!(type_of(&mut o, "own"), "redislock");
    assert!(pttl(&mut o, b"own") > 10_000, "kept the string's remaining lease");

    // RELEASE of the string by its owner hands it over as well.
    set_px(&mut c, "r", "alice", 30_000);
    send_cmd(&mut w, cmd("LOCK.ACQUIRE").arg("r").arg("bob").arg(60_000).arg("WAIT").arg(5000));
    wait_waiters(&mut o, b"r", 1);
    assert_eq!(release(&mut c, b"r", b"alice"), 1);
    assert!(matches!(recv_reply(&mut w, "bob after RELEASE of string"), Ok(Value::Int(t)) if t > t_own));
    assert_eq!(info(&mut o, b"r").expect("bob's lock").owner, b"bob");
}

#[test]
fn plain_string_conversion_extend_and_release_replicate() {
    let master = Server::start_with(&["--repl-ping-replica-period", "3600", "--repl-diskless-sync-delay", "0"]);
    let replica = Server::start();
    attach_replica(&master, &replica);
    let mut m = master.conn();
    let mut r = replica.conn();

    set_px(&mut m, "k", "alice", 30_000);
    let t = acquire(&mut m, b"k", b"alice", 10_000).expect("conversion on the master");
    wait1(&mut m);
    assert_eq!(type_of(&mut r, "k"), "redislock", "conversion replicated");
    let ri = info(&mut r, b"k").expect("replica lock");
    assert_eq!((ri.owner.as_slice(), ri.token), (&b"alice"[..], t));
    assert_eq!(pexpiretime(&mut r, b"k"), pexpiretime(&mut m, b"k"), "same deadline");

    ok_cmd(&mut m, cmd("SET").arg("s").arg("alice"));
    assert_eq!(extend(&mut m, b"s", b"alice", 50_000), 1);
    wait1(&mut m);
    assert_eq!(type_of(&mut r, "s"), "string");
    assert_eq!(pexpiretime(&mut r, b"s"), pexpiretime(&mut m, b"s"), "EXTEND of a string replicated");
    assert_eq!(release(&mut m, b"s", b"alice"), 1);
    wait1(&mut m);
    assert!(!exists(&mut r, b"s"), "release of a plain-string lock replicated");
    assert!(exists(&mut r, b"k"));

    // Refused operations on a plain-string lock propagate nothing.
    ok_cmd(&mut m, cmd("SET").arg("q").arg("alice"));
    wait1(&mut m);
    let off0 = info_field_i64(&mut m, "replication", "master_repl_offset");
    assert_eq!(acquire(&mut m, b"q", b"bob", 1000), None);
    assert_eq!(release(&mut m, b"q", b"bob"), 0);
    assert_eq!(extend(&mut m, b"q", b"bob", 1000), 0);
    let _ = info_any(&mut m, b"q");
    assert_eq!(
        info_field_i64(&mut m, "replication", "master_repl_offset"),
        off0,
        "refused operations on a plain-string lock were propagated"
    );
}
