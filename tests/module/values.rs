//! A value stored with an exclusive hold (`LOCK.ACQUIRE ... VALUE`,
//! `LOCK.PROCLAIM`), what an election advertises as its leader: set,
//! replaced, owner-checked, bounded, and the same on a replica, after
//! DEBUG RELOAD, after a restart from the AOF and after a failover.

use crate::common;

use common::*;
use redis::{Connection, Value};

fn acquire_valued(c: &mut Connection, key: &str, owner: &str, ttl: i64, value: &[u8]) -> Option<i64> {
    match ok_cmd(c, cmd("LOCK.ACQUIRE").arg(key).arg(owner).arg(ttl).arg("VALUE").arg(value)) {
        Value::Int(t) => Some(t),
        Value::Nil => None,
        other => panic!("LOCK.ACQUIRE: unexpected reply {other:?}"),
    }
}

fn proclaim(c: &mut Connection, key: &str, owner: &str, value: &[u8]) -> i64 {
    int_of(&ok_cmd(c, cmd("LOCK.PROCLAIM").arg(key).arg(owner).arg(value)), "LOCK.PROCLAIM")
}

/// Owner, token, value and PEXPIRETIME: what must survive exactly.
fn whole(c: &mut Connection, key: &str) -> (Vec<u8>, i64, Option<Vec<u8>>, i64) {
    let i = info(c, key.as_bytes()).unwrap_or_else(|| panic!("lock {key} missing"));
    (i.owner, i.token, value_of(c, key), pexpiretime(c, key.as_bytes()))
}

#[test]
fn a_value_is_set_replaced_proclaimed_and_owner_checked() {
    let s = Server::start();
    let mut c = s.conn();
    let t = acquire_valued(&mut c, "k", "alice", 60_000, b"host-a:1").expect("granted");
    assert_eq!(value_of(&mut c, "k").as_deref(), Some(&b"host-a:1"[..]));
    // Another owner's VALUE changes nothing.
    assert_eq!(acquire_valued(&mut c, "k", "bob", 60_000, b"host-b:1"), None);
    assert_eq!(proclaim(&mut c, "k", "bob", b"host-b:2"), 0, "only the holder proclaims");
    assert_eq!(value_of(&mut c, "k").as_deref(), Some(&b"host-a:1"[..]));
    // A re-grant without VALUE keeps it; with VALUE replaces it; the token stays.
    assert_eq!(acquire(&mut c, b"k", b"alice", 60_000), Some(t));
    assert_eq!(value_of(&mut c, "k").as_deref(), Some(&b"host-a:1"[..]));
    assert_eq!(acquire_valued(&mut c, "k", "alice", 60_000, b"host-a:2"), Some(t));
    assert_eq!(value_of(&mut c, "k").as_deref(), Some(&b"host-a:2"[..]));
    // PROCLAIM replaces it, keeping token and deadline; binary-safe.
    let deadline = pexpiretime(&mut c, b"k");
    assert_eq!(proclaim(&mut c, "k", "alice", b"bin\x00\xff\r\n"), 1);
    assert_eq!(value_of(&mut c, "k").as_deref(), Some(&b"bin\x00\xff\r\n"[..]));
    assert_eq!(info(&mut c, b"k").expect("held").token, t, "PROCLAIM keeps the token");
    assert_eq!(pexpiretime(&mut c, b"k"), deadline, "PROCLAIM keeps the lease");
    // An empty value clears it.
    assert_eq!(proclaim(&mut c, "k", "alice", b""), 1);
    assert_eq!(value_of(&mut c, "k"), None);
    // Nothing held, a free key, a lock held shared, another type.
    assert_eq!(proclaim(&mut c, "free", "alice", b"x"), 0);
    assert!(!exists(&mut c, b"free"), "a refused PROCLAIM creates nothing");
    ok_cmd(&mut c, cmd("LOCK.ACQUIRE").arg("rw").arg("alice").arg(60_000).arg("SHARED"));
    // A shared holder stores its own value (see members.rs); another
    // owner has none to set.
    assert_eq!(proclaim(&mut c, "rw", "alice", b"x"), 1);
    assert_eq!(proclaim(&mut c, "rw", "bob", b"x"), 0);
    ok_cmd(&mut c, cmd("SET").arg("str").arg("alice").arg("PX").arg(60_000));
    assert_eq!(proclaim(&mut c, "str", "alice", b"x"), 0, "a plain-string lock has no value");
    ok_cmd(&mut c, cmd("LPUSH").arg("list").arg("x"));
    assert!(expect_err(&mut c, cmd("LOCK.PROCLAIM").arg("list").arg("alice").arg("x")).starts_with("WRONGTYPE"));
    // The value leaves with the hold: the next holder starts without one.
    assert_eq!(release(&mut c, b"k", b"alice"), 1);
    assert!(acquire(&mut c, b"k", b"bob", 60_000).is_some());
    assert_eq!(value_of(&mut c, "k"), None);
}

#[test]
fn bad_values_get_clear_errors() {
    let s = Server::start();
    let mut c = s.conn();
    let long = vec![b'v'; 257];
    let e = expect_err(&mut c, cmd("LOCK.ACQUIRE").arg("k").arg("alice").arg(1000).arg("VALUE").arg(&long[..]));
    assert_eq!(e, "ERR value is longer than redislock.max-owner-len (256 bytes)");
    assert!(!exists(&mut c, b"k"));
    grant(&mut c, "k", "alice", 60_000);
    let e = expect_err(&mut c, cmd("LOCK.PROCLAIM").arg("k").arg("alice").arg(&long[..]));
    assert_eq!(e, "ERR value is longer than redislock.max-owner-len (256 bytes)");
    assert!(expect_err(&mut c, cmd("LOCK.MACQUIRE").arg(1).arg("m").arg("a").arg(1000).arg("VALUE").arg("x"))
        .starts_with("ERR LOCK.MACQUIRE takes no VALUE"));
    assert_eq!(expect_err(&mut c, cmd("LOCK.ACQUIRE").arg("k2").arg("a").arg(1000).arg("VALUE")), "ERR VALUE needs a text");
    assert!(expect_err(&mut c, cmd("LOCK.PROCLAIM").arg("k").arg("alice")).contains("wrong number of arguments"));
    // The limit is the owner's: raising it admits a longer value.
    ok_cmd(&mut c, cmd("CONFIG").arg("SET").arg("redislock.max-owner-len").arg(300));
    assert_eq!(proclaim(&mut c, "k", "alice", &long), 1);
    assert_eq!(value_of(&mut c, "k"), Some(long));
}

#[test]
fn a_waiter_s_value_is_set_at_its_grant() {
    let s = Server::start();
    let mut c = s.conn();
    let mut w = s.conn();
    grant(&mut c, "k", "alice", 60_000);
    send_cmd(&mut w, cmd("LOCK.ACQUIRE").arg("k").arg("bob").arg(60_000).arg("WAIT").arg(0).arg("VALUE").arg("host-b"));
    wait_waiters(&mut c, b"k", 1);
    assert_eq!(value_of(&mut c, "k"), None, "alice's lock has no value while bob waits");
    assert_eq!(release(&mut c, b"k", b"alice"), 1);
    let token = int_of(&recv_reply(&mut w, "bob's grant").expect("granted"), "token");
    assert_eq!(info(&mut c, b"k").expect("held").token, token);
    assert_eq!(value_of(&mut c, "k").as_deref(), Some(&b"host-b"[..]));
}

#[test]
fn a_session_hold_is_proclaimed_from_its_own_connection_only() {
    let s = Server::start();
    let mut c = s.conn();
    let mut other = s.conn();
    ok_cmd(&mut c, cmd("LOCK.ACQUIRE").arg("k").arg("alice").arg(60_000).arg("SESSION").arg("VALUE").arg("v1"));
    assert_eq!(proclaim(&mut other, "k", "alice", b"v2"), 0, "another connection may not speak for a session hold");
    assert_eq!(proclaim(&mut c, "k", "alice", b"v2"), 1);
    assert_eq!(value_of(&mut other, "k").as_deref(), Some(&b"v2"[..]));
    // Its connection closed: cut to its lock-delay, it speaks no more.
    ok_cmd(&mut c, cmd("LOCK.ACQUIRE").arg("d").arg("bob").arg(60_000).arg("SESSION").arg("DELAY").arg(30_000).arg("VALUE").arg("b1"));
    drop(c);
    wait_until(std::time::Duration::from_secs(10), "bob's hold cut to its lock-delay", || pttl(&mut other, b"d") <= 30_000);
    assert_eq!(proclaim(&mut other, "d", "bob", b"b2"), 0, "a hold whose connection closed is not proclaimed for");
    assert_eq!(value_of(&mut other, "d").as_deref(), Some(&b"b1"[..]));
}

#[test]
fn a_replica_sees_the_value_and_keeps_it_after_failover() {
    let master = Server::start();
    let replica = Server::start();
    attach_replica(&master, &replica);
    let mut m = master.conn();
    let mut r = replica.conn();
    let t = acquire_valued(&mut m, "k", "alice", 600_000, b"v1").expect("granted");
    wait1(&mut m);
    assert_eq!(whole(&mut r, "k"), whole(&mut m, "k"), "replica after the grant");
    assert_eq!(proclaim(&mut m, "k", "alice", b"v2"), 1);
    // A re-grant without VALUE travels with the value the lock keeps.
    acquire_valued(&mut m, "w", "bob", 600_000, b"vb").expect("granted");
    assert!(acquire(&mut m, b"w", b"bob", 600_000).is_some(), "bob's re-grant");
    wait1(&mut m);
    assert_eq!(whole(&mut r, "k"), whole(&mut m, "k"), "replica after PROCLAIM");
    assert_eq!(whole(&mut r, "w"), whole(&mut m, "w"), "replica after a re-grant without VALUE");
    assert_eq!(value_of(&mut r, "k").as_deref(), Some(&b"v2"[..]));
    // A replica refuses a client's PROCLAIM.
    assert!(expect_err(&mut r, cmd("LOCK.PROCLAIM").arg("k").arg("alice").arg("v3")).starts_with("READONLY"));
    // A replica attached later gets the value by full sync (RDB).
    let late = Server::start();
    let mut l = late.conn();
    ok_cmd(&mut l, cmd("REPLICAOF").arg("127.0.0.1").arg(master.port));
    wait_until(std::time::Duration::from_secs(20), "the late replica's link up", || {
        info_field(&mut l, "replication", "master_link_status") == "up"
    });
    assert_eq!(int_of(&ok_cmd(&mut m, cmd("WAIT").arg(2).arg(5000)), "WAIT"), 2, "both replicas acknowledge");
    assert_eq!(whole(&mut l, "k"), whole(&mut m, "k"), "a full sync carries the value");
    // Failover: the promoted replica has the value and its holder keeps proclaiming.
    ok_cmd(&mut r, cmd("REPLICAOF").arg("NO").arg("ONE"));
    assert_eq!(info(&mut r, b"k").expect("held").token, t);
    assert_eq!(proclaim(&mut r, "k", "alice", b"v4"), 1);
    assert_eq!(value_of(&mut r, "k").as_deref(), Some(&b"v4"[..]));
}

#[test]
fn a_value_survives_debug_reload_and_an_aof_restart() {
    let mut s = Server::start_with(&["--appendonly", "yes", "--aof-use-rdb-preamble", "no"]);
    let mut c = s.conn();
    wait_aof_rewrite_idle(&mut c);
    acquire_valued(&mut c, "a", "alice", 600_000, b"va\x00\xff").expect("granted");
    grant(&mut c, "plain", "carol", 600_000);
    ok_cmd(&mut c, cmd("DEBUG").arg("RELOAD"));
    assert_eq!(value_of(&mut c, "a").as_deref(), Some(&b"va\x00\xff"[..]), "after DEBUG RELOAD (RDB shape 3)");
    assert_eq!(value_of(&mut c, "plain"), None);
    // The rewrite emits LOCK.APPLY ... VALUE; what follows lands in the
    // incremental file as LOCK.APPLY too.
    bgrewriteaof(&mut c);
    acquire_valued(&mut c, "b", "bob", 600_000, b"vb").expect("granted");
    assert_eq!(proclaim(&mut c, "a", "alice", b"va2"), 1);
    wait_aof_flushed(&mut c);
    let keys = ["a", "b", "plain"];
    let before: Vec<_> = keys.iter().map(|k| whole(&mut c, k)).collect();
    drop(c);
    s.restart();
    let mut c = s.conn();
    let after: Vec<_> = keys.iter().map(|k| whole(&mut c, k)).collect();
    assert_eq!(after, before, "after a restart from the AOF");
    // And a rewrite of what was loaded, with an RDB preamble this time.
    ok_cmd(&mut c, cmd("CONFIG").arg("SET").arg("aof-use-rdb-preamble").arg("yes"));
    bgrewriteaof(&mut c);
    drop(c);
    s.restart();
    let mut c = s.conn();
    let again: Vec<_> = keys.iter().map(|k| whole(&mut c, k)).collect();
    assert_eq!(again, before, "after a restart from a preamble AOF");
}

#[test]
fn a_value_costs_nothing_when_absent_and_its_length_when_present() {
    let s = Server::start();
    let mut c = s.conn();
    grant(&mut c, "plain", "alice", 600_000);
    acquire_valued(&mut c, "valued", "alice", 600_000, &[b'v'; 200]).expect("granted");
    let usage = |c: &mut Connection, k: &str| int_of(&ok_cmd(c, cmd("MEMORY").arg("USAGE").arg(k)), "MEMORY USAGE");
    let (plain, valued) = (usage(&mut c, "plain"), usage(&mut c, "valued"));
    // Counted as the allocator sizes each allocation, which rounds either
    // up by less than 16 bytes (jemalloc's classes, glibc's chunks).
    assert!(valued >= plain + 200 - 16, "a 200-byte value must be counted: {plain} vs {valued}");
    // COPY carries the value, DUMP/RESTORE too.
    ok_cmd(&mut c, cmd("COPY").arg("valued").arg("copied"));
    assert_eq!(value_of(&mut c, "copied"), value_of(&mut c, "valued"));
}

/// A lock with a value announces each grant and new value on its channel
/// (`__redislock@DB__:KEY`), with token, owner (by its length) and value,
/// including a handoff to a waiter and a re-grant; a lock without a value
/// announces nothing, and a proclamation that changes nothing neither.
#[test]
fn a_lock_with_a_value_announces_its_grants_and_values() {
    let s = Server::start();
    let mut c = s.conn();
    let mut sub = s.conn();
    sub.set_read_timeout(Some(std::time::Duration::from_secs(5))).expect("timeout");
    let mut sub = sub.as_pubsub();
    sub.subscribe("__redislock@0__:job").expect("subscribe");
    sub.subscribe("__redislock@0__:plain").expect("subscribe");
    let mut next = || -> (String, String) {
        let m = sub.get_message().expect("an announcement");
        (m.get_channel_name().to_string(), String::from_utf8_lossy(m.get_payload_bytes()).into_owned())
    };

    // Nothing for a lock without a value: the next message is job's.
    acquire(&mut c, b"plain", b"carol", 60_000).expect("granted");
    let t = acquire_valued(&mut c, "job", "a b", 60_000, b"host a:1").expect("granted");
    assert_eq!(next(), ("__redislock@0__:job".into(), format!("grant {t} 3 a b host a:1")));
    assert_eq!(proclaim(&mut c, "job", "a b", b"host a:1"), 1, "the same value");
    assert_eq!(proclaim(&mut c, "job", "a b", b"host a:2"), 1);
    assert_eq!(next().1, format!("proclaim {t} 3 a b host a:2"), "a change, not the unchanged proclamation");
    let t2 = acquire_fence(&mut c, b"job", b"a b", 60_000, t + 10).expect("re-granted higher");
    assert_eq!(next().1, format!("grant {t2} 3 a b host a:2"), "a re-grant with a new token");

    // A waiter carrying a value is granted at the release: announced.
    let mut w = s.conn();
    w.send_packed_command(
        &cmd("LOCK.ACQUIRE").arg("job").arg("dave").arg(60_000).arg("WAIT").arg(5_000).arg("VALUE").arg("host d").get_packed_command(),
    )
    .expect("sent");
    wait_until(std::time::Duration::from_secs(5), "dave waiting", || waiters(&mut c, b"job") == 1);
    assert_eq!(release(&mut c, b"job", b"a b"), 1);
    let token = int_of(&w.recv_response().expect("a reply"), "the waiter's grant");
    assert_eq!(next().1, format!("grant {token} 4 dave host d"));
    assert_eq!(proclaim(&mut c, "job", "dave", b""), 1);
    assert_eq!(next().1, format!("proclaim {token} 4 dave "), "a value cleared is announced empty");
}
