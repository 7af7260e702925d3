//! Lifecycle events (issue 61): a key `redislock.notify` matches announces
//! every change on its channel (`__redislock@DB__:KEY`), in the order the
//! server made them, as `KIND TOKEN OWNER-LENGTH OWNER VALUE`; any other
//! key only its valued grants and proclamations, as before; a replica
//! announces nothing of what it replays.

use crate::common;

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use redis::{Connection, PubSub, Value};

/// Every lock channel of database 0, read in order.
struct Events<'a> {
    sub: PubSub<'a>,
}

impl<'a> Events<'a> {
    fn on(con: &'a mut Connection) -> Events<'a> {
        con.set_read_timeout(Some(Duration::from_secs(10))).expect("read timeout");
        let mut sub = con.as_pubsub();
        sub.psubscribe("__redislock@0__:*").expect("psubscribe");
        Events { sub }
    }

    /// The next announcement: its key and message.
    fn next(&mut self) -> (String, String) {
        let m = self.sub.get_message().expect("an announcement within 10 s");
        let channel = m.get_channel_name().to_string();
        let key = channel.strip_prefix("__redislock@0__:").unwrap_or(&channel).to_string();
        (key, String::from_utf8_lossy(m.get_payload_bytes()).into_owned())
    }

    /// The next announcement, which must be on `key`.
    fn on_key(&mut self, key: &str) -> String {
        let (k, m) = self.next();
        assert_eq!(k, key, "an announcement on {key}, got {m:?} on {k}");
        m
    }
}

fn set_notify(c: &mut Connection, patterns: &str) {
    ok_cmd(c, cmd("CONFIG").arg("SET").arg("redislock.notify").arg(patterns));
}

fn notify_setting(c: &mut Connection) -> String {
    match ok_cmd(c, cmd("CONFIG").arg("GET").arg("redislock.notify")) {
        Value::Array(items) => match items.as_slice() {
            [_, Value::BulkString(v)] => String::from_utf8_lossy(v).into_owned(),
            other => panic!("CONFIG GET replied {other:?}"),
        },
        other => panic!("CONFIG GET replied {other:?}"),
    }
}

/// `LOCK.ACQUIRE key owner ttl WAIT 10000 [extra...]` sent, not read.
fn send_waiting(c: &mut Connection, key: &str, owner: &str, ttl: i64, extra: &[&str]) {
    let mut acq = cmd("LOCK.ACQUIRE");
    acq.arg(key).arg(owner).arg(ttl).arg("WAIT").arg(10_000);
    for a in extra {
        acq.arg(*a);
    }
    c.send_packed_command(&acq.get_packed_command()).expect("sent");
}

fn token_reply(c: &mut Connection) -> i64 {
    int_of(&c.recv_response().expect("a reply"), "the waiter's grant")
}

fn acquire_with(c: &mut Connection, key: &str, owner: &str, ttl: i64, extra: &[&str]) -> i64 {
    let mut acq = cmd("LOCK.ACQUIRE");
    acq.arg(key).arg(owner).arg(ttl);
    for a in extra {
        acq.arg(*a);
    }
    int_of(&ok_cmd(c, &acq), "a grant")
}

/// `KIND TOKEN OWNER-LENGTH OWNER VALUE`.
fn msg(kind: &str, token: i64, owner: &str, value: &str) -> String {
    format!("{kind} {token} {} {owner} {value}", owner.len())
}

/// Every kind on matched keys, in the server's order, with the token and
/// owner of the hold it concerns: a grant, a release before the handoff
/// it makes, a lease that ran out with and without a waiter, a closed
/// connection's hold released and one cut short, a revocation under its
/// own token, shared and semaphore holders, a value proclaimed.
#[test]
fn every_kind_is_announced_in_order_with_its_token_and_owner() {
    let s = Server::start();
    let mut c = s.conn();
    set_notify(&mut c, "jobs:* other:[ab]");
    assert_eq!(notify_setting(&mut c), "jobs:* other:[ab]");
    let mut sc = s.conn();
    let mut ev = Events::on(&mut sc);

    // grant, then release before the handoff it makes to a waiter.
    let t1 = grant(&mut c, "jobs:a", "alice", 60_000);
    assert_eq!(ev.on_key("jobs:a"), msg("grant", t1, "alice", ""));
    let mut w = s.conn();
    send_waiting(&mut w, "jobs:a", "bob", 60_000, &[]);
    wait_until(Duration::from_secs(5), "bob waiting", || waiters(&mut c, b"jobs:a") == 1);
    assert_eq!(release(&mut c, b"jobs:a", b"alice"), 1);
    let t2 = token_reply(&mut w);
    assert_eq!(ev.on_key("jobs:a"), msg("release", t1, "alice", ""));
    assert_eq!(ev.on_key("jobs:a"), msg("handoff", t2, "bob", ""));
    // A second pattern matches too; a release by the wrong owner is no change.
    assert_eq!(release(&mut c, b"jobs:a", b"alice"), 0);
    let tb = grant(&mut c, "other:b", "ann", 60_000);
    assert_eq!(ev.on_key("other:b"), msg("grant", tb, "ann", ""));

    // A lease that runs out while someone waits: expire, then the handoff.
    // Long enough for dave to be queued first on a busy machine.
    let t3 = grant(&mut c, "jobs:b", "carol", 2_000);
    assert_eq!(ev.on_key("jobs:b"), msg("grant", t3, "carol", ""));
    send_waiting(&mut w, "jobs:b", "dave", 60_000, &["VALUE", "host d"]);
    let t4 = token_reply(&mut w);
    assert_eq!(ev.on_key("jobs:b"), msg("expire", t3, "carol", ""));
    assert_eq!(ev.on_key("jobs:b"), msg("handoff", t4, "dave", "host d"));

    // And with nobody waiting: Redis's expiry of the key tells.
    let t5 = grant(&mut c, "jobs:c", "erin", 100);
    assert_eq!(ev.on_key("jobs:c"), msg("grant", t5, "erin", ""));
    assert_eq!(ev.on_key("jobs:c"), msg("expire", t5, "erin", ""));

    // A closed connection's SESSION hold: released (session), or cut to
    // the delay (cut, with the new deadline).
    let mut bound = s.conn();
    let t6 = acquire_with(&mut bound, "jobs:d", "frank", 60_000, &["SESSION"]);
    assert_eq!(ev.on_key("jobs:d"), msg("grant", t6, "frank", ""));
    drop(bound);
    assert_eq!(ev.on_key("jobs:d"), msg("session", t6, "frank", ""));
    let mut bound = s.conn();
    let t7 = acquire_with(&mut bound, "jobs:e", "gina", 600_000, &["SESSION", "DELAY", "60000"]);
    assert_eq!(ev.on_key("jobs:e"), msg("grant", t7, "gina", ""));
    let closed = now_unix_ms();
    drop(bound);
    let cut = ev.on_key("jobs:e");
    let prefix = msg("cut", t7, "gina", "");
    let deadline: i64 = cut.strip_prefix(&prefix).unwrap_or_else(|| panic!("a cut, got {cut:?}")).parse().expect("a deadline");
    assert!((closed + 59_000..closed + 61_000).contains(&deadline), "cut to the close plus the delay: {deadline} vs {closed}");
    assert_eq!(pexpiretime(&mut c, b"jobs:e"), deadline, "the deadline announced is the key's");

    // A revocation: the revocation's token, the revoked owner.
    let t8 = grant(&mut c, "jobs:f", "hank", 60_000);
    assert_eq!(ev.on_key("jobs:f"), msg("grant", t8, "hank", ""));
    let revoked = ok_cmd(&mut c, cmd("LOCK.REVOKE").arg("jobs:f"));
    let Value::Array(reply) = revoked else { panic!("LOCK.REVOKE replied {revoked:?}") };
    let t_rev = int_of(&reply[0], "T");
    assert!(t_rev > t8);
    assert_eq!(ev.on_key("jobs:f"), msg("revoke", t_rev, "hank", ""));

    // Shared holders and a semaphore's permits, each its own grant and release.
    let r1 = acquire_with(&mut c, "jobs:g", "r1", 60_000, &["SHARED"]);
    let r2 = acquire_with(&mut c, "jobs:g", "r2", 60_000, &["SHARED"]);
    assert_eq!(ev.on_key("jobs:g"), msg("grant", r1, "r1", ""));
    assert_eq!(ev.on_key("jobs:g"), msg("grant", r2, "r2", ""));
    assert_eq!(release(&mut c, b"jobs:g", b"r1"), 1);
    assert_eq!(ev.on_key("jobs:g"), msg("release", r1, "r1", ""));
    assert_eq!(release(&mut c, b"jobs:g", b"r2"), 1);
    assert_eq!(ev.on_key("jobs:g"), msg("release", r2, "r2", ""));
    let p1 = acquire_with(&mut c, "jobs:h", "p1", 60_000, &["SHARED", "LIMIT", "2"]);
    assert_eq!(ev.on_key("jobs:h"), msg("grant", p1, "p1", ""));
    // A semaphore's permit that ran out is announced when the group is next touched.
    let p2 = acquire_with(&mut c, "jobs:h", "p2", 100, &["SHARED", "LIMIT", "2"]);
    assert_eq!(ev.on_key("jobs:h"), msg("grant", p2, "p2", ""));
    wait_until(Duration::from_secs(5), "p2's lease over", || holder_rows(&mut c, "jobs:h").len() == 1);
    assert_eq!(release(&mut c, b"jobs:h", b"p1"), 1);
    assert_eq!(ev.on_key("jobs:h"), msg("expire", p2, "p2", ""));
    assert_eq!(ev.on_key("jobs:h"), msg("release", p1, "p1", ""));

    // A resize: the new limit (no hold: token 0, no owner), then the
    // waiter it lets in, as a handoff.
    let q1 = acquire_with(&mut c, "jobs:r", "q1", 60_000, &["SHARED", "LIMIT", "1"]);
    assert_eq!(ev.on_key("jobs:r"), msg("grant", q1, "q1", ""));
    send_waiting(&mut w, "jobs:r", "q2", 60_000, &["SHARED", "LIMIT", "1"]);
    wait_until(Duration::from_secs(5), "q2 waiting", || waiters(&mut c, b"jobs:r") == 1);
    assert_eq!(ok_cmd(&mut c, cmd("LOCK.RESIZE").arg("jobs:r").arg(2)), Value::Int(1), "the resize grants q2");
    let q2 = token_reply(&mut w);
    assert_eq!(ev.on_key("jobs:r"), msg("resize", 0, "", "2"));
    assert_eq!(ev.on_key("jobs:r"), msg("handoff", q2, "q2", ""));

    // A holder whose lease ended under the group key's later TTL (which
    // never shrinks for one holder): announced when a grant replaces it.
    let a = acquire_with(&mut c, "jobs:s", "sa", 60_000, &["SHARED"]);
    // Long enough to outlast sa's release on a busy machine (its end
    // comes after that release).
    let b = acquire_with(&mut c, "jobs:s", "sb", 1_500, &["SHARED"]);
    assert_eq!(ev.on_key("jobs:s"), msg("grant", a, "sa", ""));
    assert_eq!(ev.on_key("jobs:s"), msg("grant", b, "sb", ""));
    assert_eq!(release(&mut c, b"jobs:s", b"sa"), 1);
    assert_eq!(ev.on_key("jobs:s"), msg("release", a, "sa", ""));
    wait_until(Duration::from_secs(5), "sb's lease over", || holder_rows(&mut c, "jobs:s").is_empty());
    assert!(exists(&mut c, b"jobs:s"), "the key outlives its last lease");
    let x = grant(&mut c, "jobs:s", "sx", 60_000);
    assert_eq!(ev.on_key("jobs:s"), msg("expire", b, "sb", ""));
    assert_eq!(ev.on_key("jobs:s"), msg("grant", x, "sx", ""));

    // A set: each member its own grant and release.
    let set = int_of(&ok_cmd(&mut c, cmd("LOCK.MACQUIRE").arg(2).arg("jobs:m1").arg("jobs:m2").arg("ivy").arg(60_000)), "set");
    assert_eq!(ev.on_key("jobs:m1"), msg("grant", set, "ivy", ""));
    assert_eq!(ev.on_key("jobs:m2"), msg("grant", set, "ivy", ""));
    ok_cmd(&mut c, cmd("LOCK.MRELEASE").arg(2).arg("jobs:m1").arg("jobs:m2").arg("ivy"));
    assert_eq!(ev.on_key("jobs:m1"), msg("release", set, "ivy", ""));
    assert_eq!(ev.on_key("jobs:m2"), msg("release", set, "ivy", ""));

    // A value, and its holder's new one.
    let tv = acquire_with(&mut c, "jobs:v", "joe", 60_000, &["VALUE", "one"]);
    assert_eq!(ev.on_key("jobs:v"), msg("grant", tv, "joe", "one"));
    ok_cmd(&mut c, cmd("LOCK.PROCLAIM").arg("jobs:v").arg("joe").arg("two"));
    assert_eq!(ev.on_key("jobs:v"), msg("proclaim", tv, "joe", "two"));
}

/// A key no pattern matches: a lock without a value announces nothing,
/// one with a value only its grants (a handoff among them, as `grant`)
/// and proclamations, as before `notify`. A change on a matched key
/// after them shows nothing else came first.
#[test]
fn keys_outside_the_patterns_announce_only_valued_grants() {
    let s = Server::start();
    let mut c = s.conn();
    set_notify(&mut c, "jobs:*");
    let mut sc = s.conn();
    let mut ev = Events::on(&mut sc);

    let plain = grant(&mut c, "elsewhere", "alice", 60_000);
    let mut w = s.conn();
    send_waiting(&mut w, "elsewhere", "bob", 60_000, &[]);
    wait_until(Duration::from_secs(5), "bob waiting", || waiters(&mut c, b"elsewhere") == 1);
    assert_eq!(release(&mut c, b"elsewhere", b"alice"), 1);
    assert!(token_reply(&mut w) > plain);
    assert_eq!(release(&mut c, b"elsewhere", b"bob"), 1);
    let marker = grant(&mut c, "jobs:marker", "m", 60_000);
    assert_eq!(ev.next(), ("jobs:marker".into(), msg("grant", marker, "m", "")), "nothing from a plain lock");

    let tv = acquire_with(&mut c, "valued", "alice", 60_000, &["VALUE", "va"]);
    assert_eq!(ev.next(), ("valued".into(), msg("grant", tv, "alice", "va")));
    send_waiting(&mut w, "valued", "bob", 60_000, &["VALUE", "vb"]);
    wait_until(Duration::from_secs(5), "bob waiting", || waiters(&mut c, b"valued") == 1);
    assert_eq!(release(&mut c, b"valued", b"alice"), 1);
    let tb = token_reply(&mut w);
    assert_eq!(ev.next(), ("valued".into(), msg("grant", tb, "bob", "vb")), "a handoff as a grant, no release");
    assert_eq!(release(&mut c, b"valued", b"bob"), 1);
    assert_eq!(release(&mut c, b"jobs:marker", b"m"), 1);
    assert_eq!(ev.next(), ("jobs:marker".into(), msg("release", marker, "m", "")), "no release of the valued lock");
}

/// The setting: given on the loadmodule line, shown by CONFIG GET (and
/// its count by INFO); a list
/// over its bounds is refused with its reason and the old one stays.
#[test]
fn a_notify_setting_over_its_bounds_is_refused_and_the_old_one_kept() {
    let s = Server::start_full(&["notify", "jobs:* el*"], &[]);
    let mut c = s.conn();
    assert_eq!(notify_setting(&mut c), "jobs:* el*");
    let too_many = vec!["k*"; 65].join(" ");
    let e = expect_err(&mut c, cmd("CONFIG").arg("SET").arg("redislock.notify").arg(&too_many));
    assert!(e.contains("notify has 65 patterns, more than 64"), "{e}");
    let too_long = "k".repeat(4097);
    let e = expect_err(&mut c, cmd("CONFIG").arg("SET").arg("redislock.notify").arg(&too_long));
    assert!(e.contains("longer than 4096"), "{e}");
    assert_eq!(notify_setting(&mut c), "jobs:* el*");
    assert_eq!(info_field_i64(&mut c, "redislock", "redislock_notify_patterns"), 2);
    let mut sc = s.conn();
    let mut ev = Events::on(&mut sc);
    let t = grant(&mut c, "election", "a", 60_000);
    assert_eq!(ev.next(), ("election".into(), msg("grant", t, "a", "")), "the old patterns still match");
    set_notify(&mut c, "");
    assert_eq!(info_field_i64(&mut c, "redislock", "redislock_notify_patterns"), 0);
    assert_eq!(release(&mut c, b"election", b"a"), 1);
    let tv = acquire_with(&mut c, "election", "a", 60_000, &["VALUE", "x"]);
    assert_eq!(ev.next(), ("election".into(), msg("grant", tv, "a", "x")), "nothing once the setting is empty");
    let bad = Server::try_start_full(&["notify", &too_many], &[]);
    assert!(bad.is_err(), "a loadmodule line over the bounds fails the load");
}

/// A replica replaying its master's grants, releases and expiries
/// announces nothing, whatever its own setting: subscribers hear each
/// change once, from the master that made it.
#[test]
fn a_replica_announces_nothing_it_replays() {
    let master = Server::start();
    let replica = Server::start();
    attach_replica(&master, &replica);
    let (mut m, mut r) = (master.conn(), replica.conn());
    set_notify(&mut m, "jobs:*");
    set_notify(&mut r, "jobs:*");
    let mut rs = replica.conn();
    let mut on_replica = Events::on(&mut rs);
    let mut ms = master.conn();
    let mut on_master = Events::on(&mut ms);

    let t = grant(&mut m, "jobs:r", "alice", 60_000);
    assert_eq!(release(&mut m, b"jobs:r", b"alice"), 1);
    let tv = acquire_with(&mut m, "jobs:v", "bob", 60_000, &["VALUE", "x"]);
    let te = grant(&mut m, "jobs:e", "carol", 100);
    for expected in [
        ("jobs:r", msg("grant", t, "alice", "")),
        ("jobs:r", msg("release", t, "alice", "")),
        ("jobs:v", msg("grant", tv, "bob", "x")),
        ("jobs:e", msg("grant", te, "carol", "")),
        ("jobs:e", msg("expire", te, "carol", "")),
    ] {
        assert_eq!(on_master.next(), (expected.0.to_string(), expected.1));
    }
    wait_replica_synced(&master, &replica);
    assert!(!exists(&mut r, b"jobs:e") && exists(&mut r, b"jobs:v"), "the replica applied it all");
    ok_cmd(&mut r, cmd("PUBLISH").arg("__redislock@0__:jobs:marker").arg("end"));
    assert_eq!(on_replica.next(), ("jobs:marker".into(), "end".into()), "nothing from replication before the marker");
}

/// Clients contend on one matched key, some releasing, some letting
/// their lease run out: the announcements alternate strictly (each grant
/// or handoff followed by the end of that hold, same token and owner,
/// before the next), and tokens rise.
#[test]
fn contended_announcements_alternate_grant_and_end() {
    const THREADS: usize = 6;
    let _heavy = one_heavy_at_a_time();
    let s = Server::start();
    let mut c = s.conn();
    set_notify(&mut c, "jobs:*");
    let mut sc = s.conn();
    let mut ev = Events::on(&mut sc);
    let port = s.port;
    let barrier = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|id| {
            let barrier = barrier.clone();
            thread::spawn(move || {
                let client = redis::Client::open(format!("redis://127.0.0.1:{port}/").as_str()).expect("client");
                let mut con = client.get_connection_with_timeout(Duration::from_secs(5)).expect("connect");
                con.set_read_timeout(Some(Duration::from_secs(30))).expect("read timeout");
                barrier.wait();
                let end = Instant::now() + Duration::from_millis(1500);
                let mut n = 0u32;
                while Instant::now() < end {
                    n += 1;
                    // A new owner each time: a re-grant is a grant too.
                    let owner = format!("c{id}-{n}");
                    let lets_expire = (id + n as usize).is_multiple_of(4);
                    let ttl = if lets_expire { 20 } else { 5_000 };
                    let reply = ok_cmd(&mut con, cmd("LOCK.ACQUIRE").arg("jobs:hot").arg(&owner).arg(ttl).arg("WAIT").arg(5_000));
                    if matches!(reply, Value::Int(_)) && !lets_expire {
                        assert_eq!(release(&mut con, b"jobs:hot", owner.as_bytes()), 1);
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("a contender");
    }
    wait_until(Duration::from_secs(10), "the last lease over", || !exists(&mut c, b"jobs:hot"));
    ok_cmd(&mut c, cmd("PUBLISH").arg("__redislock@0__:jobs:hot").arg("end"));
    let mut held: Option<(i64, String)> = None;
    let (mut grants, mut expiries, mut last_token) = (0, 0, 0);
    loop {
        let m = ev.on_key("jobs:hot");
        if m == "end" {
            break;
        }
        let mut fields = m.splitn(4, ' ');
        let (kind, token, _len, rest) = (fields.next(), fields.next(), fields.next(), fields.next());
        let token: i64 = token.and_then(|t| t.parse().ok()).unwrap_or_else(|| panic!("a token in {m:?}"));
        let owner = rest.and_then(|r| r.strip_suffix(' ')).unwrap_or_else(|| panic!("an owner in {m:?}")).to_string();
        match kind {
            Some("grant" | "handoff") => {
                assert!(held.is_none(), "{m:?} while {held:?} still held");
                assert!(token > last_token, "tokens rise: {m:?} after {last_token}");
                last_token = token;
                grants += 1;
                held = Some((token, owner));
            }
            Some(end @ ("release" | "expire")) => {
                assert_eq!(held.take(), Some((token, owner)), "{m:?} ends the hold announced last");
                if end == "expire" {
                    expiries += 1;
                }
            }
            _ => panic!("unexpected announcement {m:?}"),
        }
    }
    assert!(held.is_none(), "the last hold's end was announced");
    assert!(grants > 20 && expiries > 0, "contention with expiries: {grants} grants, {expiries} expiries");
}

/// LOCK.ASK asks each holder to let go, on the lock's channel, with its
/// own token and owner and the message, whatever `redislock.notify` says
/// (nothing is set here); it changes nothing, and a free key, a
/// plain-string lock or a wrong type ask nobody.
#[test]
fn an_ask_reaches_each_holder_with_its_token_and_changes_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    let mut sc = s.conn();
    let mut ev = Events::on(&mut sc);
    let ask = |c: &mut Connection, args: &[&str]| {
        let mut a = cmd("LOCK.ASK");
        for x in args {
            a.arg(*x);
        }
        try_cmd(c, &a)
    };

    let t = grant(&mut c, "job", "alice", 60_000);
    assert_eq!(ask(&mut c, &["job", "MESSAGE", "deploy at 10:00"]), Ok(Value::Int(1)));
    assert_eq!(ev.on_key("job"), msg("ask", t, "alice", "deploy at 10:00"));
    assert_eq!(ask(&mut c, &["job"]), Ok(Value::Int(1)));
    assert_eq!(ev.on_key("job"), msg("ask", t, "alice", ""));
    assert_eq!(holder_rows(&mut c, "job").len(), 1, "the holder still holds");
    assert_eq!(release(&mut c, b"job", b"alice"), 1);

    let r1 = acquire_with(&mut c, "readers", "r1", 60_000, &["SHARED"]);
    let r2 = acquire_with(&mut c, "readers", "r2", 60_000, &["SHARED"]);
    assert_eq!(ask(&mut c, &["readers", "MESSAGE", "x"]), Ok(Value::Int(2)));
    let mut heard = vec![ev.on_key("readers"), ev.on_key("readers")];
    heard.sort();
    assert_eq!(heard, vec![msg("ask", r1, "r1", "x"), msg("ask", r2, "r2", "x")]);

    assert_eq!(ask(&mut c, &["free"]), Ok(Value::Int(0)));
    ok_cmd(&mut c, cmd("SET").arg("plain").arg("owner"));
    assert_eq!(ask(&mut c, &["plain"]), Ok(Value::Int(0)));
    ok_cmd(&mut c, cmd("LPUSH").arg("list").arg("x"));
    assert!(ask(&mut c, &["list"]).is_err_and(|e| e.contains("WRONGTYPE")));
    assert!(ask(&mut c, &["job", "NOW", "x"]).is_err_and(|e| e.contains("unknown option")));
    assert!(ask(&mut c, &["job", "MESSAGE"]).is_err_and(|e| e.contains("wrong number of arguments")));
    let long = "x".repeat(257);
    assert!(ask(&mut c, &["readers", "MESSAGE", &long]).is_err_and(|e| e.contains("max-owner-len")));
    // Nothing was announced for those: the next message is this grant's.
    let marker = grant(&mut c, "marker", "m", 60_000);
    assert_eq!(release(&mut c, b"marker", b"m"), 1);
    ok_cmd(&mut c, cmd("LOCK.ACQUIRE").arg("marker2").arg("m").arg(60_000).arg("VALUE").arg("v"));
    let (k, m) = ev.next();
    assert_eq!(k, "marker2", "nothing announced before the valued grant: {m:?} (marker's token {marker})");
}

/// 2,000 LOCK.ASK lines of odd arguments (a seeded mix of keys, options,
/// empty, binary and long words): each gets a count or a documented
/// error, none makes a key, and the server lives.
#[test]
fn a_barrage_of_odd_asks_gets_counts_or_errors() {
    let s = Server::start();
    let mut c = s.conn();
    let held = grant(&mut c, "k", "owner", 600_000);
    assert!(held > 0);
    let pool: Vec<Vec<u8>> = vec![
        b"k".to_vec(),
        b"MESSAGE".to_vec(),
        b"message".to_vec(),
        b"".to_vec(),
        b"OWNER".to_vec(),
        vec![0x00, 0xff, 0x80],
        vec![b'x'; 300],
        b"free".to_vec(),
        b"-1".to_vec(),
    ];
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = |n: usize| {
        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        usize::try_from(seed >> 33).unwrap_or(0) % n
    };
    for _ in 0..2000 {
        let mut a = cmd("LOCK.ASK");
        for _ in 0..next(5) {
            a.arg(pool[next(pool.len())].as_slice());
        }
        match try_cmd(&mut c, &a) {
            Ok(Value::Int(n)) => assert!((0..=1).contains(&n), "{n} holders asked"),
            Ok(other) => panic!("LOCK.ASK replied {other:?}"),
            Err(e) => assert!(
                e.contains("wrong number of arguments for 'lock.ask'")
                    || e.contains("unknown option")
                    || e.contains("max-owner-len")
                    || e.contains("WRONGTYPE"),
                "undocumented error {e}"
            ),
        }
    }
    assert_eq!(ok_cmd(&mut c, &cmd("DBSIZE")), Value::Int(1), "no key made");
    assert_eq!(holder_rows(&mut c, "k").len(), 1, "the holder still holds");
}

/// A member that stops extending ends as the others extend: its expiry is
/// announced by the first extension that finds its lease over (the
/// extension's own prune used to drop it unheard), once, before the
/// extension's holder is touched.
#[test]
fn a_member_whose_lease_ran_out_is_announced_when_another_extends() {
    let s = Server::start();
    let mut c = s.conn();
    set_notify(&mut c, "group:*");
    let mut sc = s.conn();
    let mut ev = Events::on(&mut sc);
    let ta = acquire_with(&mut c, "group:g", "a", 200, &["SHARED", "VALUE", "10.0.0.1"]);
    assert_eq!(ev.on_key("group:g"), msg("grant", ta, "a", "10.0.0.1"));
    let tb = acquire_with(&mut c, "group:g", "b", 60_000, &["SHARED", "VALUE", "10.0.0.2"]);
    assert_eq!(ev.on_key("group:g"), msg("grant", tb, "b", "10.0.0.2"));
    // Past a's 200 ms lease (counted from its grant, before this sleep
    // began); nothing touches the group meanwhile.
    thread::sleep(Duration::from_millis(300));
    assert_eq!(int_of(&ok_cmd(&mut c, cmd("LOCK.EXTEND").arg("group:g").arg("b").arg(60_000)), "extended"), 1);
    assert_eq!(ev.on_key("group:g"), msg("expire", ta, "a", ""));
    assert_eq!(int_of(&ok_cmd(&mut c, cmd("LOCK.EXTEND").arg("group:g").arg("b").arg(60_000)), "extended"), 1);
    assert_eq!(int_of(&ok_cmd(&mut c, cmd("LOCK.RELEASE").arg("group:g").arg("b")), "released"), 1);
    assert_eq!(ev.on_key("group:g"), msg("release", tb, "b", ""), "a's expiry announced once");
}
