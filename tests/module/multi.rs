//! Several keys at once (issue 42): LOCK.MACQUIRE all or nothing with one
//! token above each key's earlier tokens, MRELEASE and MEXTEND counts,
//! each member an ordinary lock, a replica seeing the whole set, and
//! CROSSSLOT for keys of several slots in a Cluster.

use crate::common;

use std::time::Duration;

use crate::cluster::one_cluster_at_a_time;
use common::cluster::{key_slot, Cluster};
use common::*;
use redis::{Connection, Value};

fn macquire(con: &mut Connection, keys: &[&str], owner: &str, ttl: i64, options: &[&str]) -> Option<i64> {
    let mut c = cmd("LOCK.MACQUIRE");
    c.arg(keys.len()).arg(keys).arg(owner).arg(ttl).arg(options);
    match ok_cmd(con, &c) {
        Value::Nil => None,
        Value::Int(t) => Some(t),
        other => panic!("LOCK.MACQUIRE replied neither integer nor nil: {other:?}"),
    }
}

fn mextend(con: &mut Connection, keys: &[&str], owner: &str, ttl: i64) -> i64 {
    int_of(&ok_cmd(con, cmd("LOCK.MEXTEND").arg(keys.len()).arg(keys).arg(owner).arg(ttl)), "LOCK.MEXTEND")
}

/// Owner and token of each key (`None`: nobody holds it).
fn holders(con: &mut Connection, keys: &[&str]) -> Vec<Option<(Vec<u8>, i64)>> {
    keys.iter().map(|k| info(con, k.as_bytes()).map(|i| (i.owner, i.token))).collect()
}

#[test]
fn a_set_is_granted_whole_with_one_token_above_each_key_s_earlier_tokens_or_takes_nothing() {
    let server = Server::start();
    let mut c = server.conn();
    // Earlier tokens: a's from the counter, c's raised far by FENCE.
    let ta = grant(&mut c, "a", "z", 60_000);
    assert_eq!(release(&mut c, b"a", b"z"), 1);
    let far = far_future_token();
    let tc = acquire_fence(&mut c, b"c", b"z", 60_000, far).expect("c granted");
    assert_eq!(release(&mut c, b"c", b"z"), 1);
    assert!(tc >= far && ta < tc);

    // b is held by another: the set takes nothing, a and c stay free.
    let tb = grant(&mut c, "b", "other", 60_000);
    assert_eq!(macquire(&mut c, &["a", "b", "c"], "me", 60_000, &[]), None);
    assert_eq!(holders(&mut c, &["a", "c"]), [None, None], "a refused set takes nothing");

    assert_eq!(release(&mut c, b"b", b"other"), 1);
    let t = macquire(&mut c, &["a", "b", "c"], "me", 60_000, &[]).expect("the whole set is free");
    assert!(t > ta && t > tb && t > tc, "the set's token {t} is above every earlier token ({ta}, {tb}, {tc})");
    let me = Some((b"me".to_vec(), t));
    assert_eq!(holders(&mut c, &["a", "b", "c"]), [me.clone(), me.clone(), me.clone()]);
    // Asking again is a re-grant of the same token (a lost reply's retry).
    assert_eq!(macquire(&mut c, &["a", "b", "c"], "me", 60_000, &[]), Some(t));
    // Another owner gets nothing, not even the keys nobody holds.
    assert_eq!(macquire(&mut c, &["c", "d"], "you", 60_000, &[]), None);
    assert_eq!(holders(&mut c, &["d"]), [None]);
    // A set over keys the owner partly holds takes one fresh token for all.
    let t2 = macquire(&mut c, &["c", "d"], "me", 60_000, &[]).expect("me holds c, d is free");
    assert!(t2 > t);
    assert_eq!(holders(&mut c, &["c", "d"]), [Some((b"me".to_vec(), t2)), Some((b"me".to_vec(), t2))]);
}

#[test]
fn mrelease_and_mextend_count_the_members_and_each_member_is_an_ordinary_lock() {
    let server = Server::start();
    let mut c = server.conn();
    let t = macquire(&mut c, &["x", "y", "z"], "me", 60_000, &[]).expect("free set");
    // Each member on its own: LOCK.RELEASE, LOCK.EXTEND, LOCK.INFO.
    assert_eq!(release(&mut c, b"y", b"me"), 1);
    assert_eq!(extend(&mut c, b"x", b"me", 120_000), 1);
    assert!(pttl(&mut c, b"x") > 90_000);
    assert_eq!(info(&mut c, b"z").map(|i| i.token), Some(t));
    // Others count nothing.
    assert_eq!(mextend(&mut c, &["x", "z"], "other", 10_000), 0);
    assert_eq!(mrelease(&mut c, &["x", "z"], "other"), 0);
    // Two of three are still held.
    assert_eq!(mextend(&mut c, &["x", "y", "z"], "me", 300_000), 2);
    assert!(pttl(&mut c, b"z") > 200_000, "the members held took the new lease");
    assert!(!exists(&mut c, b"y"));
    assert_eq!(mrelease(&mut c, &["x", "y", "z"], "me"), 2);
    assert_eq!(holders(&mut c, &["x", "y", "z"]), [None, None, None]);
    assert_eq!(mrelease(&mut c, &["x", "y", "z"], "me"), 0);

    // A member's lease ends on its own, as any lock's does.
    macquire(&mut c, &["p", "q"], "me", 60_000, &[]).expect("free set");
    assert_eq!(extend(&mut c, b"q", b"me", 50), 1);
    wait_until(Duration::from_secs(10), "q's short lease to end", || info(&mut c, b"q").is_none());
    assert!(info(&mut c, b"p").is_some(), "p keeps its own lease");
    assert_eq!(mextend(&mut c, &["p", "q"], "me", 60_000), 1, "the set is partly lost");
}

#[test]
fn a_released_member_goes_to_its_waiter_and_shared_sets_share() {
    let server = Server::start();
    let mut c = server.conn();
    macquire(&mut c, &["m", "n"], "me", 60_000, &[]).expect("free set");
    let mut waiter = server.conn();
    send_cmd(&mut waiter, cmd("LOCK.ACQUIRE").arg("n").arg("w").arg(60_000).arg("WAIT").arg(30_000));
    wait_waiters(&mut c, b"n", 1);
    assert_eq!(mrelease(&mut c, &["m", "n"], "me"), 2);
    let token = int_of(&recv_reply(&mut waiter, "the waiter for n").expect("granted"), "waiter's token");
    assert_eq!(info(&mut c, b"n").map(|i| (i.owner, i.token)), Some((b"w".to_vec(), token)));

    // Shared sets hold together; an exclusive set beside them gets nothing.
    let r1 = macquire(&mut c, &["s1", "s2"], "r1", 60_000, &["SHARED"]).expect("free");
    let r2 = macquire(&mut c, &["s2", "s3"], "r2", 60_000, &["SHARED"]).expect("s2 shared");
    assert!(r2 > r1);
    assert_eq!(macquire(&mut c, &["s3", "s4"], "w", 60_000, &[]), None);
    assert!(!exists(&mut c, b"s4"));
    assert_eq!(mrelease(&mut c, &["s1", "s2"], "r1"), 2);
    assert_eq!(mrelease(&mut c, &["s2", "s3"], "r2"), 2);
    assert!(macquire(&mut c, &["s3", "s4"], "w", 60_000, &[]).is_some());
}

#[test]
fn refusals_take_nothing() {
    let server = Server::start();
    let mut c = server.conn();
    ok_cmd(&mut c, cmd("LPUSH").arg("list").arg("x"));
    assert!(expect_err(&mut c, cmd("LOCK.MACQUIRE").arg(2).arg("k1").arg("list").arg("me").arg(1000)).starts_with("WRONGTYPE"));
    assert!(expect_err(&mut c, cmd("LOCK.MRELEASE").arg(2).arg("k1").arg("list").arg("me")).starts_with("WRONGTYPE"));
    assert!(expect_err(&mut c, cmd("LOCK.MEXTEND").arg(2).arg("k1").arg("list").arg("me").arg(1000)).starts_with("WRONGTYPE"));
    // A member that is a semaphore refuses the set.
    ok_cmd(&mut c, cmd("LOCK.ACQUIRE").arg("sem").arg("o").arg(60_000).arg("SHARED").arg("LIMIT").arg(3));
    let err = expect_err(&mut c, cmd("LOCK.MACQUIRE").arg(2).arg("k1").arg("sem").arg("me").arg(1000).arg("SHARED"));
    assert!(err.starts_with("ERR wrong lock kind"), "{err}");
    assert!(!exists(&mut c, b"k1"), "a refused set takes nothing");
    let err = expect_err(&mut c, cmd("LOCK.MACQUIRE").arg(2).arg("k1").arg("k1").arg("me").arg(1000));
    assert_eq!(err, "ERR key 'k1' is named twice");
    let err = expect_err(&mut c, cmd("LOCK.MACQUIRE").arg(0).arg("k1").arg("me").arg(1000));
    assert!(err.starts_with("ERR numkeys"), "{err}");
    assert!(!exists(&mut c, b"k1"));
    // Redis finds the keys from the key spec.
    let keys = ok_cmd(&mut c, cmd("COMMAND").arg("GETKEYS").arg("LOCK.MACQUIRE").arg(2).arg("k1").arg("k2").arg("me").arg(1000));
    assert_eq!(keys, Value::Array(vec![Value::BulkString(b"k1".to_vec()), Value::BulkString(b"k2".to_vec())]));
    let keys = ok_cmd(&mut c, cmd("COMMAND").arg("GETKEYS").arg("LOCK.MRELEASE").arg(1).arg("k3").arg("me"));
    assert_eq!(keys, Value::Array(vec![Value::BulkString(b"k3".to_vec())]));
}

#[test]
fn a_replica_sees_the_whole_set_and_its_release() {
    let master = Server::start_with(&["--repl-diskless-sync-delay", "0"]);
    let replica = Server::start();
    attach_replica(&master, &replica);
    let mut m = master.conn();
    let mut r = replica.conn();
    let keys = ["ra", "rb", "rc"];
    let execs = exec_calls(&mut r);
    let t = macquire(&mut m, &keys, "me", 600_000, &[]).expect("free set");
    wait1(&mut m);
    assert_eq!(exec_calls(&mut r), execs + 1, "the set reached the replica as one transaction");
    let me = Some((b"me".to_vec(), t));
    assert_eq!(holders(&mut r, &keys), [me.clone(), me.clone(), me.clone()]);
    for k in keys {
        assert_eq!(pexpiretime(&mut r, k.as_bytes()), pexpiretime(&mut m, k.as_bytes()), "{k}'s deadline on the replica");
    }
    assert_eq!(mextend(&mut m, &keys, "me", 900_000), 3);
    wait1(&mut m);
    for k in keys {
        assert_eq!(pexpiretime(&mut r, k.as_bytes()), pexpiretime(&mut m, k.as_bytes()), "{k}'s extended deadline on the replica");
    }
    assert_eq!(mrelease(&mut m, &keys, "me"), 3);
    wait1(&mut m);
    assert_eq!(holders(&mut r, &keys), [None, None, None]);
    // The replica refuses the commands from clients, as every lock write.
    assert!(expect_err(&mut r, cmd("LOCK.MACQUIRE").arg(1).arg("ra").arg("me").arg(1000)).starts_with("READONLY"));
}

#[test]
fn a_set_takes_fence_and_session_as_one_lock_does() {
    let server = Server::start();
    let mut c = server.conn();
    let far = far_future_token();
    let t = macquire(&mut c, &["fa", "fb"], "me", 60_000, &["FENCE", &far.to_string()]).expect("free set");
    assert!(t >= far, "FENCE {far}: the set's token {t}");
    // A set bound to its connection ends with it, every member.
    let mut bound = server.conn();
    macquire(&mut bound, &["sa", "sb"], "me", 60_000, &["SESSION"]).expect("free set");
    assert!(info(&mut c, b"sa").is_some() && info(&mut c, b"sb").is_some());
    drop(bound);
    wait_until(Duration::from_secs(10), "the closed connection's set to end", || {
        info(&mut c, b"sa").is_none() && info(&mut c, b"sb").is_none()
    });
    // SESSION DELAY: held on for the delay, as each lock would be.
    let mut bound = server.conn();
    macquire(&mut bound, &["da", "db"], "me", 600_000, &["SESSION", "DELAY", "60000"]).expect("free set");
    assert!(["da", "db"].iter().all(|k| info(&mut c, k.as_bytes()).is_some_and(|i| i.pttl > 500_000)));
    drop(bound);
    wait_until(Duration::from_secs(10), "the delay to cut both leases", || {
        ["da", "db"].iter().all(|k| info(&mut c, k.as_bytes()).is_some_and(|i| i.pttl <= 60_000))
    });
}

#[test]
fn acl_key_patterns_cover_every_key_of_a_set() {
    let server = Server::start();
    let mut admin = server.conn();
    ok_cmd(&mut admin, cmd("ACL").arg("SETUSER").arg("app").arg("reset").arg("on").arg(">pw").arg("~app:*").arg("+@all"));
    let mut app = server.conn();
    ok_cmd(&mut app, cmd("AUTH").arg("app").arg("pw"));
    assert!(macquire(&mut app, &["app:a", "app:b"], "me", 60_000, &[]).is_some());
    let err = expect_err(&mut app, cmd("LOCK.MACQUIRE").arg(2).arg("app:c").arg("other:d").arg("me").arg(60_000));
    assert!(err.starts_with("NOPERM"), "{err}");
    assert!(!exists(&mut admin, b"app:c"));
    let err = expect_err(&mut app, cmd("LOCK.MRELEASE").arg(2).arg("app:a").arg("other:d").arg("me"));
    assert!(err.starts_with("NOPERM"), "{err}");
    assert_eq!(mrelease(&mut app, &["app:a", "app:b"], "me"), 2);
}

/// Where `needle` occurs in `hay`, in order.
fn positions(hay: &[u8], needle: &[u8]) -> Vec<usize> {
    hay.windows(needle.len()).enumerate().filter(|(_, w)| *w == needle).map(|(i, _)| i).collect()
}

#[test]
fn the_aof_holds_a_set_as_one_transaction_and_replays_it_whole() {
    let mut s = Server::start_with(&["--appendonly", "yes", "--appendfsync", "always", "--aof-use-rdb-preamble", "yes"]);
    let mut c = s.conn();
    wait_aof_rewrite_idle(&mut c);
    let keys = ["fa", "fb", "fc"];
    let t = macquire(&mut c, &keys, "me", 600_000, &[]).expect("free set");
    let aof: Vec<u8> = read_all_files(&s.dir.join("appendonlydir")).into_iter().flat_map(|(_, bytes)| bytes).collect();
    let applies = positions(&aof, b"LOCK.APPLY");
    assert_eq!(applies.len(), 3, "one LOCK.APPLY per member");
    let (first, last) = (applies[0], applies[2]);
    let multi = positions(&aof, b"MULTI").into_iter().filter(|p| *p < first).max().expect("a MULTI before the grants");
    let exec = positions(&aof, b"EXEC").into_iter().filter(|p| *p > last).min().expect("an EXEC after the grants");
    assert!(positions(&aof, b"EXEC").iter().all(|p| *p < multi || *p > last), "the set is one transaction");
    assert!(multi < first && last < exec);
    drop(c);
    s.kill9();
    s.start_again();
    let mut c = s.conn();
    let me = Some((b"me".to_vec(), t));
    assert_eq!(holders(&mut c, &keys), [me.clone(), me.clone(), me.clone()], "replayed whole");
}

#[test]
fn keys_of_several_slots_get_crossslot_in_a_cluster() {
    let _serial = one_cluster_at_a_time();
    let cluster = Cluster::start(3, 0);
    let (a, b) = ("{set}:a", "{set}:b");
    assert_eq!(key_slot(a.as_bytes()), key_slot(b.as_bytes()));
    let owner = cluster.owner_of(0, key_slot(a.as_bytes()));
    let mut c = cluster.nodes[owner].conn();
    let t = macquire(&mut c, &[a, b], "me", 60_000, &[]).expect("one slot, its master");
    assert_eq!(info(&mut c, a.as_bytes()).map(|i| i.token), Some(t));
    let other =
        (0..1000).map(|i| format!("other:{i}")).find(|k| key_slot(k.as_bytes()) != key_slot(a.as_bytes())).expect("a key elsewhere");
    let err = expect_err(&mut c, cmd("LOCK.MACQUIRE").arg(2).arg(a).arg(&other).arg("me").arg(60_000));
    assert!(err.starts_with("CROSSSLOT"), "{err}");
    let err = expect_err(&mut c, cmd("LOCK.MRELEASE").arg(2).arg(a).arg(&other).arg("me"));
    assert!(err.starts_with("CROSSSLOT"), "{err}");
    assert_eq!(mrelease(&mut c, &[a, b], "me"), 2);
}

/// `LOCK.ACQUIRE key owner ttl SHARED LIMIT 5 PERMITS k`: Some(token) or None.
fn permits(con: &mut Connection, key: &str, owner: &str, k: u32) -> Option<i64> {
    match ok_cmd(con, cmd("LOCK.ACQUIRE").arg(key).arg(owner).arg(600_000).arg("SHARED").arg("LIMIT").arg(5).arg("PERMITS").arg(k)) {
        Value::Nil => None,
        Value::Int(t) => Some(t),
        other => panic!("LOCK.ACQUIRE ... PERMITS replied neither integer nor nil: {other:?}"),
    }
}

/// With 3 of 5 permits taken by `a`: 3 more do not fit, 2 do (taken by a
/// probe that leaves again).
fn assert_three_of_five_taken(con: &mut Connection, key: &str, when: &str) {
    assert_eq!(permits(con, key, "probe3", 3), None, "{when}: 3 + 3 of 5");
    assert!(permits(con, key, "probe2", 2).is_some(), "{when}: 3 + 2 of 5");
    assert_eq!(release(con, key.as_bytes(), b"probe2"), 1);
}

#[test]
fn weighted_permits_take_k_of_n_and_a_waiter_for_k_holds_back_smaller_requests() {
    let server = Server::start();
    let mut c = server.conn();
    assert!(permits(&mut c, "pool", "a", 3).is_some());
    assert_eq!(permits(&mut c, "pool", "b", 3), None, "3 + 3 of 5");
    assert!(permits(&mut c, "pool", "b", 2).is_some(), "3 + 2 of 5");
    // LOCK.INFO: the permits taken, and each holder's.
    let fields = info_fields(ok_cmd(&mut c, cmd("LOCK.INFO").arg("pool"))).expect("held");
    assert_eq!(fields[5].1, Value::Int(5), "limit");
    assert_eq!(fields[7].1, Value::Int(5), "taken: 3 + 2");
    let taken: Vec<i64> = holder_rows_of(&fields).iter().map(|h| h.permits).collect();
    assert_eq!(taken, [3, 2]);
    // One hold, one size.
    let err =
        expect_err(&mut c, cmd("LOCK.ACQUIRE").arg("pool").arg("a").arg(1000).arg("SHARED").arg("LIMIT").arg(5).arg("PERMITS").arg(2));
    assert!(err.contains("holds 3 permits"), "{err}");
    let err =
        expect_err(&mut c, cmd("LOCK.ACQUIRE").arg("pool").arg("z").arg(1000).arg("SHARED").arg("LIMIT").arg(5).arg("PERMITS").arg(6));
    assert_eq!(err, "ERR PERMITS must be between 1 and LIMIT");

    // A waiter for 3 while 2 are free: it waits, and a later request for
    // 1, which would fit, does not pass it.
    let mut w3 = server.conn();
    send_cmd(
        &mut w3,
        cmd("LOCK.ACQUIRE")
            .arg("pool")
            .arg("w3")
            .arg(600_000)
            .arg("SHARED")
            .arg("LIMIT")
            .arg(5)
            .arg("PERMITS")
            .arg(3)
            .arg("WAIT")
            .arg(30_000),
    );
    wait_waiters(&mut c, b"pool", 1);
    assert_eq!(release(&mut c, b"pool", b"b"), 1);
    assert_eq!(waiters(&mut c, b"pool"), 1, "2 free: the waiter for 3 still waits");
    assert_eq!(permits(&mut c, "pool", "one", 1), None, "no barging past the waiter for 3");
    assert_eq!(release(&mut c, b"pool", b"a"), 1);
    let token = int_of(&recv_reply(&mut w3, "the waiter for 3").expect("granted"), "w3's token");
    assert!(token > 0);
    assert!(permits(&mut c, "pool", "one", 1).is_some(), "3 + 1 of 5 once the waiter has its turn");
}

#[test]
fn weighted_permits_reach_a_replica_and_survive_reload_rdb_and_aof() {
    let master = Server::start_with(&["--repl-diskless-sync-delay", "0"]);
    let replica = Server::start();
    attach_replica(&master, &replica);
    let mut m = master.conn();
    assert!(permits(&mut m, "pool", "a", 3).is_some());
    assert!(permits(&mut m, "pool", "b", 1).is_some());
    wait1(&mut m);
    // The promoted replica knows a holds 3 of them.
    let mut r = replica.conn();
    ok_cmd(&mut r, cmd("REPLICAOF").arg("NO").arg("ONE"));
    assert_eq!(permits(&mut r, "pool", "probe", 2), None, "on the replica: 3 + 1 + 2 of 5");
    assert!(permits(&mut r, "pool", "probe", 1).is_some());
    drop(r);

    assert_eq!(release(&mut m, b"pool", b"b"), 1);
    ok_cmd(&mut m, cmd("DEBUG").arg("RELOAD"));
    assert_three_of_five_taken(&mut m, "pool", "after DEBUG RELOAD");

    let mut s = Server::start_with(&["--appendonly", "yes", "--aof-use-rdb-preamble", "no"]);
    let mut c = s.conn();
    wait_aof_rewrite_idle(&mut c);
    assert!(permits(&mut c, "pool", "a", 3).is_some());
    bgrewriteaof(&mut c);
    assert!(permits(&mut c, "other", "x", 4).is_some(), "after the rewrite: the incremental file");
    wait_aof_flushed(&mut c);
    drop(c);
    s.restart();
    let mut c = s.conn();
    assert_three_of_five_taken(&mut c, "pool", "after an AOF restart (rewritten)");
    assert_eq!(permits(&mut c, "other", "probe", 2), None, "after an AOF restart (incremental): 4 + 2 of 5");
    ok_cmd(&mut c, &cmd("SAVE"));
    drop(c);
    // Without the AOF, the restart loads the RDB file.
    s.set_extra_args(&["--appendonly", "no"]);
    s.restart();
    let mut c = s.conn();
    assert_three_of_five_taken(&mut c, "pool", "after an RDB restart");
}

/// A semaphore's limit and its holders' owners and tokens.
type Permits = (i64, Vec<(Vec<u8>, i64)>);

/// The semaphore member of a set (`SEMAPHORE n`, its last key) as
/// LOCK.INFO shows it.
fn semaphore_holders(con: &mut Connection, key: &str) -> Option<Permits> {
    let fields = info_fields(ok_cmd(con, cmd("LOCK.INFO").arg(key)))?;
    assert_eq!(fields[4].1, Value::BulkString(b"shared".to_vec()), "{fields:?}");
    let limit = int_of(&fields[5].1, "limit");
    let holders = holder_rows_of(&fields)
        .into_iter()
        .map(|h| {
            assert_eq!(h.permits, 1, "a set takes one permit: {h:?}");
            (h.owner, h.token.expect("a module lock's holder has a token"))
        })
        .collect();
    Some((limit, holders))
}

/// `LOCK.MACQUIRE numkeys slots... record owner 60000 SEMAPHORE limit`.
fn permit_set(slots: &[&str], record: &str, owner: &str, limit: u32) -> redis::Cmd {
    let mut c = cmd("LOCK.MACQUIRE");
    c.arg(slots.len() + 1).arg(slots).arg(record).arg(owner).arg(60_000).arg("SEMAPHORE").arg(limit);
    c
}

#[test]
fn a_semaphore_member_takes_a_permit_with_the_set_and_refuses_another_limit() {
    let server = Server::start();
    let mut c = server.conn();
    let t1 = macquire(&mut c, &["s0", "rec"], "one", 60_000, &["SEMAPHORE", "2"]).expect("free");
    assert_eq!(holders(&mut c, &["s0"]), [Some((b"one".to_vec(), t1))], "the locks are exclusive");
    assert_eq!(semaphore_holders(&mut c, "rec"), Some((2, vec![(b"one".to_vec(), t1)])));
    let t2 = macquire(&mut c, &["s1", "rec"], "two", 60_000, &["SEMAPHORE", "2"]).expect("a second permit of 2");
    assert_eq!(semaphore_holders(&mut c, "rec").map(|(_, h)| h.len()), Some(2));

    // Another limit is refused as one key's LOCK.ACQUIRE is, taking nothing.
    let err = expect_err(&mut c, &permit_set(&["s2"], "rec", "four", 4));
    assert_eq!(err, "ERR wrong lock kind: the key is a semaphore (SHARED LIMIT 2)");
    assert!(!exists(&mut c, b"s2"), "a refused set takes nothing");
    let err = expect_err(&mut c, cmd("LOCK.ACQUIRE").arg("rec").arg("four").arg(1000).arg("SHARED").arg("LIMIT").arg(4));
    assert_eq!(err, "ERR wrong lock kind: the key is a semaphore (SHARED LIMIT 2)");
    // Its own limit, full: held back (nil), taking nothing.
    assert_eq!(macquire(&mut c, &["s2", "rec"], "three", 60_000, &["SEMAPHORE", "2"]), None);
    assert!(!exists(&mut c, b"s2"));
    // A read-write lock as the semaphore member refuses the set too.
    grant(&mut c, "plain", "x", 60_000);
    let err = expect_err(&mut c, &permit_set(&["s3"], "plain", "y", 2));
    assert!(err.starts_with("ERR wrong lock kind: the key is a lock"), "{err}");
    assert!(!exists(&mut c, b"s3"));

    // MEXTEND and MRELEASE reach the semaphore member as any other.
    assert_eq!(mextend(&mut c, &["s0", "rec"], "one", 600_000), 2);
    assert!(pttl(&mut c, b"s0") > 500_000 && pttl(&mut c, b"rec") > 500_000);
    assert_eq!(mrelease(&mut c, &["s0", "rec"], "one"), 2);
    assert_eq!(semaphore_holders(&mut c, "rec"), Some((2, vec![(b"two".to_vec(), t2)])));
    assert_eq!(mrelease(&mut c, &["s1", "rec"], "two"), 2);
    assert!(!exists(&mut c, b"rec"), "the last permit's release frees the semaphore");
    // Free, it takes the next limit asked.
    assert!(macquire(&mut c, &["s2", "rec"], "four", 60_000, &["SEMAPHORE", "4"]).is_some());
    assert_eq!(semaphore_holders(&mut c, "rec").map(|(limit, _)| limit), Some(4));
}

#[test]
fn a_set_waits_in_its_locks_lines_only_and_gets_the_permit_with_them() {
    let server = Server::start();
    let mut c = server.conn();
    macquire(&mut c, &["w0", "wrec"], "holder", 60_000, &["SEMAPHORE", "2"]).expect("free");
    let mut waiter = server.conn();
    waiter.set_read_timeout(Some(Duration::from_secs(20))).expect("read timeout");
    send_cmd(&mut waiter, permit_set(&["w0"], "wrec", "waiter", 2).arg("WAIT").arg(30_000));
    wait_waiters(&mut c, b"w0", 1);
    // The semaphore has no line: a set for another of its locks is not
    // held back by the waiter, and a waiter of another limit is refused.
    assert_eq!(waiters(&mut c, b"wrec"), 0, "nobody stands in the semaphore's line");
    let t = macquire(&mut c, &["w1", "wrec"], "newcomer", 60_000, &["SEMAPHORE", "2"]);
    assert!(t.is_some(), "a free lock and a free permit are granted past a waiter for another lock");
    let mut other = server.conn();
    send_cmd(&mut other, permit_set(&["w0"], "wrec", "four", 4).arg("WAIT").arg(30_000));
    let err = recv_reply(&mut other, "a waiter of another limit").expect_err("refused");
    assert!(err.to_string().contains("wrong lock kind"), "{err}");
    // The holder leaves: its lock and its permit go to the waiter together.
    assert_eq!(mrelease(&mut c, &["w0", "wrec"], "holder"), 2);
    let token = int_of(&recv_reply(&mut waiter, "the waiting set").expect("granted"), "the set's token");
    assert_eq!(holders(&mut c, &["w0"]), [Some((b"waiter".to_vec(), token))]);
    let (limit, held) = semaphore_holders(&mut c, "wrec").expect("held");
    assert_eq!(limit, 2);
    assert!(held.contains(&(b"waiter".to_vec(), token)), "{held:?}");
    assert_eq!(held.len(), 2, "the newcomer and the waiter: {held:?}");
}

#[test]
fn a_replica_holds_the_semaphore_member_with_its_limit() {
    let master = Server::start_with(&["--repl-diskless-sync-delay", "0"]);
    let replica = Server::start();
    attach_replica(&master, &replica);
    let mut m = master.conn();
    let t = macquire(&mut m, &["ra", "rrec"], "me", 600_000, &["SEMAPHORE", "3"]).expect("free");
    wait1(&mut m);
    let mut r = replica.conn();
    assert_eq!(semaphore_holders(&mut r, "rrec"), Some((3, vec![(b"me".to_vec(), t)])));
    assert_eq!(holders(&mut r, &["ra"]), [Some((b"me".to_vec(), t))]);
    assert_eq!(pexpiretime(&mut r, b"rrec"), pexpiretime(&mut m, b"rrec"));
    // Promoted, it refuses another limit as its master did.
    ok_cmd(&mut r, cmd("REPLICAOF").arg("NO").arg("ONE"));
    let err = expect_err(&mut r, &permit_set(&["rb"], "rrec", "you", 5));
    assert_eq!(err, "ERR wrong lock kind: the key is a semaphore (SHARED LIMIT 3)");
    assert!(macquire(&mut r, &["rb", "rrec"], "you", 60_000, &["SEMAPHORE", "3"]).is_some());
}

#[test]
fn a_set_held_back_by_a_full_semaphore_is_served_once_a_permit_is_given_back() {
    let server = Server::start();
    let mut c = server.conn();
    macquire(&mut c, &["fa", "frec"], "holder", 600_000, &["SEMAPHORE", "1"]).expect("free");
    // Its lock free, its semaphore full: the set waits in its lock's line.
    let mut waiter = server.conn();
    waiter.set_read_timeout(Some(Duration::from_secs(20))).expect("read timeout");
    send_cmd(&mut waiter, permit_set(&["fb"], "frec", "waiter", 1).arg("WAIT").arg(60_000));
    wait_until(
        Duration::from_secs(10),
        "the set to stand in fb's line",
        || matches!(ok_cmd(&mut c, cmd("LOCK.WAITERS").arg("fb")), Value::Array(line) if line.len() == 1),
    );
    // The permit alone given back (no line of the semaphore to serve): the
    // set is looked at again soon, not at the end of its wait.
    assert_eq!(release(&mut c, b"frec", b"holder"), 1);
    let started = std::time::Instant::now();
    let token = int_of(&recv_reply(&mut waiter, "the set held back by its semaphore").expect("granted"), "token");
    assert!(started.elapsed() < Duration::from_secs(10), "served after {:?}", started.elapsed());
    assert_eq!(semaphore_holders(&mut c, "frec"), Some((1, vec![(b"waiter".to_vec(), token)])));
}
