//! LOCK.REVOKE (issue 61): an operator takes a hold away under a new
//! token T, raises the FENCE registers to T and serves the line. The
//! revoked holder's fenced writes, checks and guards are refused from the
//! revocation on, its EXTEND says REVOKED (in memory only: not after a
//! restart), a SESSION hold is unbound, only the named OWNER ends, the
//! effect replicates and persists exactly, ACL keeps it to operators, and
//! malformed lines get their errors.

use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::cluster::{key_in_slot, key_slot, Cluster};
use common::*;
use redis::{Connection, Value};

/// `LOCK.REVOKE key [OWNER owner] [FENCE register ...]` → (T, revoked).
fn revoke(c: &mut Connection, key: &str, owner: Option<&str>, registers: &[&str]) -> (i64, i64) {
    let mut r = cmd("LOCK.REVOKE");
    r.arg(key);
    if let Some(o) = owner {
        r.arg("OWNER").arg(o);
    }
    if !registers.is_empty() {
        r.arg("FENCE");
        for reg in registers {
            r.arg(*reg);
        }
    }
    pair_of(&ok_cmd(c, &r))
}

fn pair_of(v: &Value) -> (i64, i64) {
    match v {
        Value::Array(items) => match items.as_slice() {
            [Value::Int(t), Value::Int(n)] => (*t, *n),
            other => panic!("LOCK.REVOKE replied {other:?}, not [T, revoked]"),
        },
        other => panic!("LOCK.REVOKE replied {other:?}, not [T, revoked]"),
    }
}

fn fenceinfo(c: &mut Connection, register: &str) -> Option<i64> {
    match ok_cmd(c, cmd("LOCK.FENCEINFO").arg(register)) {
        Value::Int(t) => Some(t),
        Value::Nil => None,
        other => panic!("LOCK.FENCEINFO {register}: {other:?}"),
    }
}

fn try_extend(c: &mut Connection, key: &str, owner: &str) -> Result<Value, String> {
    try_cmd(c, cmd("LOCK.EXTEND").arg(key).arg(owner).arg(60_000))
}

fn session_holds(c: &mut Connection) -> i64 {
    info_field_i64(c, "redislock", "redislock_session_holds")
}

/// An exclusive hold revoked with FENCE: the token is new, the holder's
/// EXTEND says REVOKED naming it, its CHECK, GUARD and fenced write are
/// refused, the register takes T, and the waiter got the lock within the
/// revocation, under a token above T.
#[test]
fn revoking_an_exclusive_hold_raises_the_fence_and_serves_the_line() {
    let s = Server::start();
    let mut c = s.conn();
    let t = grant(&mut c, "k", "a", 60_000);
    assert_eq!(ok_cmd(&mut c, cmd("LOCK.FENCED").arg("reg").arg(t)), Value::Int(t));
    let mut w = waiter(&s, Duration::from_secs(10));
    send_cmd(&mut w, cmd("LOCK.ACQUIRE").arg("k").arg("b").arg(60_000).arg("WAIT").arg(10_000));
    wait_waiters(&mut c, b"k", 1);

    let (revoked_at, n) = revoke(&mut c, "k", None, &["reg"]);
    assert_eq!(n, 1, "one hold ended");
    assert!(revoked_at > t, "T {revoked_at} above the holder's token {t}");
    // Served in the same command: the next holder is there at once.
    let now = info(&mut c, b"k").expect("the waiter holds the lock right after the revocation");
    assert_eq!(now.owner, b"b");
    assert!(now.token > revoked_at, "the next holder's token {} above T {revoked_at}", now.token);
    assert_eq!(recv_token(&mut w, "the waiter"), Some(now.token));

    assert_eq!(try_extend(&mut c, "k", "a"), Err(format!("REVOKED the hold was revoked (token {revoked_at})")));
    assert_refused(try_cmd(&mut c, cmd("LOCK.CHECK").arg("k").arg("a").arg(t)), "FENCED", "CHECK with the revoked token");
    let guarded = try_cmd(&mut c, cmd("LOCK.GUARD").arg("k").arg("a").arg(t).arg("SET").arg("data").arg("stale"));
    assert_refused(guarded, "FENCED", "GUARD with the revoked token");
    assert_eq!(get_text(&mut c, "data"), None, "the guarded write did not run");
    assert_eq!(fenceinfo(&mut c, "reg"), Some(revoked_at));
    let stale = try_cmd(&mut c, cmd("LOCK.FENCED").arg("reg").arg(t).arg("SET").arg("data").arg("stale"));
    assert_eq!(stale, Err(format!("FENCED older token: register reg has accepted token {revoked_at}, not {t}")));
    assert_eq!(get_text(&mut c, "data"), None);
    assert_eq!(ok_cmd(&mut c, cmd("LOCK.FENCED").arg("reg").arg(revoked_at)), Value::Int(revoked_at), "T itself passes");
    assert_eq!(release(&mut c, b"k", b"a"), 0, "the revoked owner releases nothing");
    assert_eq!(info(&mut c, b"k").expect("still b's").owner, b"b");
    // The new holder's own extension is untouched.
    assert_eq!(extend(&mut c, b"k", b"b", 60_000), 1);
}

/// OWNER ends that holder alone (of a semaphore, of a read-write lock held
/// shared); without OWNER every holder ends and the key goes.
#[test]
fn owner_ends_one_holder_and_none_ends_them_all() {
    let s = Server::start();
    let mut c = s.conn();
    for o in ["x", "y", "z"] {
        ok_cmd(&mut c, cmd("LOCK.ACQUIRE").arg("sem").arg(o).arg(60_000).arg("SHARED").arg("LIMIT").arg(3));
    }
    let (t1, n) = revoke(&mut c, "sem", Some("y"), &[]);
    assert_eq!(n, 1);
    let mut left: Vec<Vec<u8>> = holder_rows(&mut c, "sem").into_iter().map(|h| h.owner).collect();
    left.sort();
    assert_eq!(left, vec![b"x".to_vec(), b"z".to_vec()], "only y ended");
    assert_eq!(try_extend(&mut c, "sem", "y"), Err(format!("REVOKED the hold was revoked (token {t1})")));
    assert_eq!(try_extend(&mut c, "sem", "x"), Ok(Value::Int(1)), "x keeps its permit");
    // y takes a permit again and loses it: that is a lost hold, not the
    // revoked one.
    let again = int_of(&ok_cmd(&mut c, cmd("LOCK.ACQUIRE").arg("sem").arg("y").arg(100).arg("SHARED").arg("LIMIT").arg(3)), "y again");
    wait_until(Duration::from_secs(5), "y's new lease to end", || {
        try_cmd(&mut c, cmd("LOCK.CHECK").arg("sem").arg("y").arg(again)).is_err()
    });
    assert_eq!(try_extend(&mut c, "sem", "y"), Ok(Value::Int(0)), "a re-grant forgets the revocation");
    let (t2, n) = revoke(&mut c, "sem", Some("nobody"), &[]);
    assert_eq!((n, t2 > t1), (0, true), "not that owner: nothing ends, a token is still issued");
    assert_eq!(holder_rows(&mut c, "sem").len(), 2);
    let (_, n) = revoke(&mut c, "sem", None, &[]);
    assert_eq!(n, 2, "every holder ends");
    assert!(!exists(&mut c, b"sem"), "the key goes with its last holder");

    for o in ["r1", "r2"] {
        ok_cmd(&mut c, cmd("LOCK.ACQUIRE").arg("rw").arg(o).arg(60_000).arg("SHARED"));
    }
    // A writer waits behind the readers: it is served once both are gone.
    let mut w = waiter(&s, Duration::from_secs(10));
    send_cmd(&mut w, cmd("LOCK.ACQUIRE").arg("rw").arg("writer").arg(60_000).arg("WAIT").arg(10_000));
    wait_waiters(&mut c, b"rw", 1);
    assert_eq!(revoke(&mut c, "rw", Some("r1"), &[]).1, 1);
    assert_eq!(waiters(&mut c, b"rw"), 1, "r2 still holds: the writer waits");
    let (t, n) = revoke(&mut c, "rw", Some("r2"), &[]);
    assert_eq!(n, 1, "the last reader ends");
    let granted = recv_token(&mut w, "the writer").expect("granted");
    assert!(granted > t);
    assert_eq!(info(&mut c, b"rw").expect("the writer's").owner, b"writer");
}

/// Nobody holds it: a token all the same, and the registers raised (a
/// register already above T stays); a wrong type anywhere changes nothing.
#[test]
fn revoking_a_free_lock_still_raises_the_registers() {
    let s = Server::start();
    let mut c = s.conn();
    let far = far_future_token();
    ok_cmd(&mut c, cmd("LOCK.FENCED").arg("high").arg(far));
    let (t, n) = revoke(&mut c, "free", None, &["r1", "r2", "high"]);
    assert_eq!(n, 0);
    assert_eq!((fenceinfo(&mut c, "r1"), fenceinfo(&mut c, "r2")), (Some(t), Some(t)));
    assert_eq!(fenceinfo(&mut c, "high"), Some(far), "a register above T is not lowered");
    assert!(!exists(&mut c, b"free"), "no key made for the lock");
    let (t2, n) = revoke(&mut c, "free", Some("a"), &["r1"]);
    assert_eq!((n, fenceinfo(&mut c, "r1")), (0, Some(t2)));
    assert!(t2 > t);

    let held = grant(&mut c, "k", "a", 60_000);
    ok_cmd(&mut c, cmd("RPUSH").arg("list").arg("x"));
    let before = info_field_i64(&mut c, "redislock", "redislock_highest_token");
    assert_refused(try_cmd(&mut c, cmd("LOCK.REVOKE").arg("list")), "WRONGTYPE", "a list as the lock");
    assert_refused(try_cmd(&mut c, cmd("LOCK.REVOKE").arg("k").arg("FENCE").arg("r1").arg("list")), "WRONGTYPE", "a list as a register");
    assert_refused(try_cmd(&mut c, cmd("LOCK.REVOKE").arg("k").arg("FENCE").arg("k")), "WRONGTYPE", "the lock as a register");
    assert_eq!(info(&mut c, b"k").map(|i| i.token), Some(held), "still held");
    assert_eq!(fenceinfo(&mut c, "r1"), Some(t2), "no register raised");
    assert_eq!(info_field_i64(&mut c, "redislock", "redislock_highest_token"), before, "no token issued");
}

/// A SESSION hold revoked is unbound: its connection closing later ends
/// nothing of it, and whoever took the lock in between keeps it. (The
/// connection's other SESSION hold, not revoked, shows when the close has
/// been handled.)
#[test]
fn a_revoked_session_hold_is_unbound_from_its_connection() {
    let s = Server::start();
    let mut c = s.conn();
    for delay in [None, Some(5_000)] {
        let mut holder = s.conn();
        let mut acq = cmd("LOCK.ACQUIRE");
        acq.arg("k").arg("a").arg(60_000).arg("SESSION");
        if let Some(d) = delay {
            acq.arg("DELAY").arg(d);
        }
        int_of(&ok_cmd(&mut holder, &acq), "token");
        int_of(&ok_cmd(&mut holder, cmd("LOCK.ACQUIRE").arg("ctl").arg("a").arg(60_000).arg("SESSION")), "ctl");
        assert_eq!(session_holds(&mut c), 2);
        assert_eq!(revoke(&mut c, "k", None, &[]).1, 1);
        assert_eq!(session_holds(&mut c), 1, "k unbound by the revocation ({delay:?})");
        let info_k = ok_cmd(&mut c, cmd("LOCK.INFO").arg("k"));
        assert_eq!(info_k, Value::Nil, "k is free");
        let other = grant(&mut c, "k", "b", 60_000);
        let releases = info_field_i64(&mut c, "redislock", "redislock_session_releases");
        let delays = info_field_i64(&mut c, "redislock", "redislock_session_delays");
        drop(holder);
        wait_until(Duration::from_secs(10), "the close released ctl", || {
            info_field_i64(&mut c, "redislock", "redislock_session_releases") == releases + 1
        });
        assert!(!exists(&mut c, b"ctl"));
        assert_eq!(info(&mut c, b"k").map(|i| (i.owner, i.token)), Some((b"b".to_vec(), other)), "b keeps k ({delay:?})");
        assert_eq!(info_field_i64(&mut c, "redislock", "redislock_session_delays"), delays, "nothing cut short");
        assert_eq!(session_holds(&mut c), 0);
        assert_eq!(release(&mut c, b"k", b"b"), 1);
    }
}

/// The effect travels exactly: the replica drops the lock and the one
/// holder, and raises the register; the AOF replays the same; the command
/// itself never travels. After a restart the revocation is forgotten.
#[test]
fn the_effect_replicates_and_persists_and_the_memory_does_not() {
    let mut master = Server::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let replica = Server::start();
    attach_replica(&master, &replica);
    let mut m = master.conn();
    let mut r = replica.conn();
    grant(&mut m, "k", "a", 600_000);
    for o in ["x", "y"] {
        ok_cmd(&mut m, cmd("LOCK.ACQUIRE").arg("sem").arg(o).arg(600_000).arg("SHARED").arg("LIMIT").arg(2));
    }
    let (t, _) = revoke(&mut m, "k", None, &["reg"]);
    assert_eq!(revoke(&mut m, "sem", Some("x"), &["reg2"]).1, 1);
    wait1(&mut m);
    for (side, c) in [("master", &mut m), ("replica", &mut r)] {
        assert!(!exists(c, b"k"), "{side}: the revoked lock is gone");
        let owners: Vec<Vec<u8>> = holder_rows(c, "sem").into_iter().map(|h| h.owner).collect();
        assert_eq!(owners, vec![b"y".to_vec()], "{side}: only x ended");
        assert_eq!(fenceinfo(c, "reg"), Some(t), "{side}: the register raised");
    }
    let stats: String = cmd("INFO").arg("commandstats").query(&mut r).expect("INFO commandstats");
    assert!(!stats.contains("cmdstat_lock.revoke"), "the command never travels: {stats}");
    assert_refused(try_cmd(&mut r, cmd("LOCK.REVOKE").arg("sem")), "READONLY", "LOCK.REVOKE on a replica");

    assert_eq!(try_extend(&mut m, "k", "a"), Err(format!("REVOKED the hold was revoked (token {t})")));
    let sem = holder_rows(&mut m, "sem");
    wait_aof_flushed(&mut m);
    master.restart();
    let mut m = master.conn();
    assert!(!exists(&mut m, b"k"), "after the AOF: no lock");
    let after: Vec<(Vec<u8>, Option<i64>)> = holder_rows(&mut m, "sem").into_iter().map(|h| (h.owner, h.token)).collect();
    assert_eq!(after, sem.into_iter().map(|h| (h.owner, h.token)).collect::<Vec<_>>(), "after the AOF: y alone");
    assert_eq!(fenceinfo(&mut m, "reg"), Some(t), "after the AOF: the register");
    assert_eq!(try_extend(&mut m, "k", "a"), Ok(Value::Int(0)), "the memory of revocations is not persisted");
    assert_eq!(try_extend(&mut m, "sem", "x"), Ok(Value::Int(0)));
}

/// Operators only: `@dangerous` where the server has categories (and the
/// module's own `redislock-admin` where it can add one); by name
/// everywhere. COMMAND GETKEYS names the registers.
#[test]
fn acl_keeps_revocation_to_operators() {
    let mut categorised = Vec::new();
    for (name, bin) in crate::acl::servers() {
        let srv = Server::start_binary(&bin, &[], &[]);
        let mut admin = srv.conn();
        grant(&mut admin, "k", "owner", 60_000);
        let keys = ok_cmd(
            &mut admin,
            cmd("COMMAND").arg("GETKEYS").arg("LOCK.REVOKE").arg("k").arg("OWNER").arg("o").arg("FENCE").arg("r1").arg("r2"),
        );
        assert_eq!(keys, Value::Array(["k", "r1", "r2"].iter().map(|k| Value::BulkString(k.as_bytes().to_vec())).collect()), "{name}");
        let mut by_name = crate::acl::user(&srv, "byname", &["~*", "+@all", "-lock.revoke"]);
        assert_refused(try_cmd(&mut by_name, cmd("LOCK.REVOKE").arg("k")), "NOPERM", "-lock.revoke");
        assert_eq!(release(&mut by_name, b"k", b"nobody"), 0, "{name}: other lock commands still run");
        let info_text = format!("{:?}", ok_cmd(&mut admin, cmd("COMMAND").arg("INFO").arg("lock.revoke")));
        if !info_text.contains("@write") {
            continue; // Redis 7.0: no categories for module commands.
        }
        categorised.push(name.clone());
        assert!(info_text.contains("@dangerous") && info_text.contains("@slow"), "{name}: {info_text}");
        let mut no_danger = crate::acl::user(&srv, "nodanger", &["~*", "+@all", "-@dangerous"]);
        assert_refused(try_cmd(&mut no_danger, cmd("LOCK.REVOKE").arg("k")), "NOPERM", "-@dangerous");
        assert_eq!(extend(&mut no_danger, b"k", b"owner", 60_000), 1, "{name}: the holder's commands still run");
        let cats: Vec<String> = cmd("ACL").arg("CAT").query(&mut admin).expect("ACL CAT");
        if cats.iter().any(|c| c == "redislock-admin") {
            let mut in_it: Vec<String> = cmd("ACL").arg("CAT").arg("redislock-admin").query(&mut admin).expect("ACL CAT redislock-admin");
            in_it.sort();
            assert_eq!(in_it, vec!["lock.resize".to_string(), "lock.revoke".to_string()], "{name}");
            let mut ops = crate::acl::user(&srv, "ops", &["~*", "-@all", "+@redislock-admin"]);
            assert_eq!(revoke(&mut ops, "k", None, &[]).1, 1, "{name}: +@redislock-admin revokes");
        }
        assert_eq!(info(&mut admin, b"k").map(|i| i.owner), None, "{name}");
    }
    assert!(categorised.iter().any(|n| n == "valkey-8.1"), "Valkey 8.1 categorises module commands: {categorised:?}");
}

/// Each malformed line gets its error and changes nothing; a barrage of
/// odd arguments gets errors or [T, n], and the server lives on.
#[test]
fn malformed_revocations_get_their_errors() {
    let mut s = Server::start();
    let mut c = s.conn();
    let t = grant(&mut c, "k", "a", 60_000);
    let cases: [(&[&str], &str); 7] = [
        (&[], "ERR wrong number of arguments for 'lock.revoke' command"),
        (&["k", "OWNER"], "ERR syntax error: OWNER needs an owner"),
        (&["k", "FENCE"], "ERR syntax error: FENCE needs at least one register"),
        (&["k", "OWNER", "a", "OWNER", "b"], "ERR syntax error: OWNER given more than once"),
        (&["k", "BOGUS"], "ERR syntax error: unknown option 'BOGUS' (LOCK.REVOKE key [OWNER owner] [FENCE register [register ...]])"),
        (
            &["k", "OWNER", "a", "extra"],
            "ERR syntax error: unknown option 'extra' (LOCK.REVOKE key [OWNER owner] [FENCE register [register ...]])",
        ),
        (&["k", "OWNER", ""], "ERR owner must not be empty"),
    ];
    for (args, error) in cases {
        let mut r = cmd("LOCK.REVOKE");
        for a in args {
            r.arg(*a);
        }
        assert_eq!(try_cmd(&mut c, &r), Err(error.to_string()), "LOCK.REVOKE {args:?}");
    }
    assert_eq!(info(&mut c, b"k").map(|i| i.token), Some(t), "no malformed line ended the hold");

    let values: [&[u8]; 12] =
        [b"", b"OWNER", b"owner", b"FENCE", b"fence", b"k", b"\r\n", b"\x00", b"\xff\xfe", b"-1", b"9223372036854775808", b"reg"];
    let mut seed = 0x5eed_0061_u64;
    let mut next = |n: usize| {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((seed >> 33) % n as u64) as usize
    };
    for _ in 0..400 {
        let mut r = cmd("LOCK.REVOKE");
        for _ in 0..next(7) {
            r.arg(values[next(values.len())]);
        }
        match try_cmd(&mut c, &r) {
            Ok(v) => {
                pair_of(&v);
            }
            Err(e) => assert!(e.starts_with("ERR ") || e.starts_with("WRONGTYPE"), "{}: {e}", describe(&r.get_packed_command())),
        }
    }
    assert!(s.is_alive(), "the server lives");
    assert!(grant(&mut s.conn(), "after", "me", 1_000) > 0);
}

/// Holders loop acquire (WAIT) → a write fenced by their token → release,
/// while an operator revokes with FENCE at random moments. In the server's
/// own order (a list the fenced writes and the operator append to),
/// accepted tokens only go up, and every write after a revocation's reply
/// carries a token above its T: a revoked holder's write never lands.
#[test]
fn revocations_amid_fenced_writers_never_let_a_revoked_write_through() {
    let s = Server::start();
    let stop = Arc::new(AtomicBool::new(false));
    let mut writers = Vec::new();
    for i in 0..3 {
        let mut c = waiter(&s, Duration::from_secs(10));
        let stop = stop.clone();
        writers.push(thread::spawn(move || {
            let owner = format!("w{i}");
            let (mut accepted, mut refused) = (0, 0);
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let reply = ok_cmd(&mut c, cmd("LOCK.ACQUIRE").arg("k").arg(&owner).arg(5_000).arg("WAIT").arg(2_000));
                let Value::Int(token) = reply else { continue };
                if n.is_multiple_of(2) {
                    thread::sleep(Duration::from_micros(300));
                }
                let entry = format!("W {token}");
                match try_cmd(&mut c, cmd("LOCK.FENCED").arg("reg").arg(token).arg("RPUSH").arg("log").arg(&entry)) {
                    Ok(_) => accepted += 1,
                    Err(e) if e.starts_with("FENCED older token") => refused += 1,
                    Err(e) => panic!("{owner}: fenced write: {e}"),
                }
                release(&mut c, b"k", owner.as_bytes());
            }
            (accepted, refused)
        }));
    }
    let mut op = s.conn();
    let (mut revocations, mut ended) = (0, 0);
    let mut seed = 0x0061_u64;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(4) {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        thread::sleep(Duration::from_micros(200 + (seed >> 33) % 3_000));
        let (t, n) = revoke(&mut op, "k", None, &["reg"]);
        ok_cmd(&mut op, cmd("RPUSH").arg("log").arg(format!("R {t}")));
        revocations += 1;
        ended += n;
    }
    stop.store(true, Ordering::Relaxed);
    let (mut accepted, mut refused) = (0, 0);
    for w in writers {
        let (a, r) = w.join().expect("a writer panicked");
        accepted += a;
        refused += r;
    }
    let log: Vec<String> = cmd("LRANGE").arg("log").arg(0).arg(-1).query(&mut op).expect("LRANGE");
    let (mut last_write, mut floor) = (0i64, 0i64);
    for (i, entry) in log.iter().enumerate() {
        let (kind, token) = entry.split_once(' ').expect("an entry");
        let token: i64 = token.parse().expect("a token");
        match kind {
            "W" => {
                assert!(token > last_write, "entry {i}: write under {token} after one under {last_write}");
                assert!(token > floor, "entry {i}: write under {token} after the revocation under {floor}");
                last_write = token;
            }
            _ => floor = floor.max(token),
        }
    }
    eprintln!("revoke overlap: {revocations} revocations ending {ended} holds, {accepted} writes accepted, {refused} refused");
    assert_eq!(accepted, log.iter().filter(|e| e.starts_with('W')).count());
    assert!(ended > 10 && accepted > 10, "the holders and the operator overlapped: {ended} ended, {accepted} accepted");
    assert!(refused > 0, "some revoked holder tried to write ({revocations} revocations)");
}

/// In a Cluster the registers go with the lock's slot: a register of
/// another slot is refused with CROSSSLOT and nothing changes; another
/// node redirects the whole command.
#[test]
fn in_a_cluster_the_registers_share_the_locks_slot() {
    let _serial = crate::cluster::one_cluster_at_a_time();
    let cluster = Cluster::start(3, 0);
    let lock = "{job:7}:lock";
    let slot = key_slot(lock.as_bytes());
    let node = cluster.owner_of(0, slot);
    let mut c = cluster.nodes[node].conn();
    let t = grant(&mut c, lock, "a", 60_000);
    let first = cluster.first_slot(node);
    let here = key_in_slot("here", if first == slot { first + 1 } else { first });
    let refused = try_cmd(&mut c, cmd("LOCK.REVOKE").arg(lock).arg("FENCE").arg("{job:7}:fence").arg(&here));
    assert_refused(refused, "CROSSSLOT", "a register in another slot");
    assert_eq!(info(&mut c, lock.as_bytes()).map(|i| i.token), Some(t), "nothing revoked");
    assert!(!exists(&mut c, here.as_bytes()) && !exists(&mut c, b"{job:7}:fence"), "no register raised");
    let mut elsewhere = cluster.nodes[cluster.other_master(node)].conn();
    let e = try_cmd(&mut elsewhere, cmd("LOCK.REVOKE").arg(lock).arg("FENCE").arg("{job:7}:fence")).expect_err("redirected");
    assert_eq!(e, format!("MOVED {slot} 127.0.0.1:{}", cluster.nodes[node].port));
    let (revoked_at, n) = revoke(&mut c, lock, None, &["{job:7}:fence"]);
    assert_eq!((n, fenceinfo(&mut c, "{job:7}:fence")), (1, Some(revoked_at)));
}

/// Watchers hear `lock.revoke` on the key (class `g`) when a hold ended
/// (and nothing else: the module's own deletion sends no `del`, as for a
/// release); a revocation that ended nothing says nothing of the key.
#[test]
fn a_revocation_is_announced_on_the_key() {
    let s = Server::start();
    let mut c = s.conn();
    ok_cmd(&mut c, cmd("CONFIG").arg("SET").arg("notify-keyspace-events").arg("Kg"));
    grant(&mut c, "k", "a", 60_000);
    let mut subcon = s.conn();
    let mut ps = subcon.as_pubsub();
    ps.psubscribe("__keyspace@0__:*").expect("PSUBSCRIBE");
    ps.set_read_timeout(Some(Duration::from_secs(5))).expect("read timeout");
    revoke(&mut c, "free", None, &[]);
    revoke(&mut c, "k", None, &[]);
    ok_cmd(&mut c, cmd("DEL").arg("marker"));
    ok_cmd(&mut c, cmd("SET").arg("marker").arg("1"));
    ok_cmd(&mut c, cmd("DEL").arg("marker"));
    let events = keyspace_events_until(&mut ps, "marker");
    assert_eq!(events, vec![("__keyspace@0__:k".to_string(), "lock.revoke".to_string())], "nothing for the free key");
}
