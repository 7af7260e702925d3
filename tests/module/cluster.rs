//! Locks on a real Redis Cluster: 3 masters and 3 replicas with the module
//! on every node, started by each test and torn down with it.
//!
//! The promise under test: a lock has one holder across resharding and
//! failover. Waiters whose key leaves a node are told to retry (TRYAGAIN,
//! or Redis's own UNBLOCKED when their node becomes a replica) and are
//! never granted there; the node that receives the lock keeps owner,
//! token and exact deadline, and issues only larger tokens after it.

use crate::common;

use std::process::Command;
use std::sync::{Mutex, MutexGuard};

use common::cluster::{key_in_slot, key_slot, node_id, Cluster, FAILOVER_DEADLINE};
use common::*;
use redis::{Connection, Value};

/// Six servers and a bus each: one cluster at a time is plenty for 2 cores.
static ONE_CLUSTER: Mutex<()> = Mutex::new(());

pub(crate) fn one_cluster_at_a_time() -> MutexGuard<'static, ()> {
    ONE_CLUSTER.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn setslot(c: &mut Connection, slot: u16, how: &str, id: &str) {
    ok_cmd(c, cmd("CLUSTER").arg("SETSLOT").arg(slot).arg(how).arg(id));
}

fn count_keys_in_slot(c: &mut Connection, slot: u16) -> i64 {
    int_of(&ok_cmd(c, cmd("CLUSTER").arg("COUNTKEYSINSLOT").arg(slot)), "COUNTKEYSINSLOT")
}

fn role(c: &mut Connection) -> String {
    info_field(c, "replication", "role")
}

/// Sends a waiting ACQUIRE on its own connection (the reply is read later).
fn start_waiter(server: &common::Server, key: &str, owner: &str) -> Connection {
    let mut c = server.conn();
    send_cmd(&mut c, cmd("LOCK.ACQUIRE").arg(key).arg(owner).arg(10_000).arg("WAIT").arg(20_000));
    c
}

fn assert_turned_away(c: &mut Connection, who: &str) -> String {
    match recv_reply(c, who) {
        Err(text) => text,
        Ok(v) => panic!("{who} was answered {v:?} by a node its key had left: a second holder"),
    }
}

#[test]
fn every_command_routes_through_a_cluster_client_and_hash_tags_keep_keys_together() {
    let _serial = one_cluster_at_a_time();
    let cluster = Cluster::start(3, 1);
    let client = redis::cluster::ClusterClient::new(cluster.urls()).expect("cluster client");
    let mut con = client.get_connection().expect("cluster connection");

    let mut owners = std::collections::BTreeSet::new();
    for i in 0..48 {
        let key = format!("route:{i}");
        let token: i64 = cmd("LOCK.ACQUIRE").arg(&key).arg("me").arg(60_000).query(&mut con).expect("ACQUIRE routed");
        let extended: i64 = cmd("LOCK.EXTEND").arg(&key).arg("me").arg(90_000).query(&mut con).expect("EXTEND routed");
        assert_eq!(extended, 1, "EXTEND {key}");
        let info = parse_info(cmd("LOCK.INFO").arg(&key).query(&mut con).expect("INFO routed")).expect("lock exists");
        assert_eq!((info.owner.as_slice(), info.token), (&b"me"[..], token), "INFO {key}");
        // The lock lives on the slot's master, and only there.
        let owner = cluster.owner_of(0, key_slot(key.as_bytes()));
        owners.insert(owner);
        assert!(exists(&mut cluster.nodes[owner].conn(), key.as_bytes()), "{key} on its slot's master");
        let released: i64 = cmd("LOCK.RELEASE").arg(&key).arg("me").query(&mut con).expect("RELEASE routed");
        assert_eq!(released, 1, "RELEASE {key}");
    }
    assert_eq!(owners.len(), 3, "48 keys spread over all three masters");

    // A node that does not serve the key redirects LOCK.* like any command.
    let key = "route:0";
    let owner = cluster.owner_of(0, key_slot(key.as_bytes()));
    let elsewhere = cluster.other_master(owner);
    let err = expect_err(&mut cluster.nodes[elsewhere].conn(), cmd("LOCK.ACQUIRE").arg(key).arg("me").arg(1000));
    assert_eq!(err, format!("MOVED {} 127.0.0.1:{}", key_slot(key.as_bytes()), cluster.nodes[owner].port));
    let err = expect_err(&mut cluster.nodes[elsewhere].conn(), cmd("LOCK.INFO").arg(key));
    assert!(err.starts_with("MOVED "), "LOCK.INFO redirected too: {err}");

    // Hash tags: a row lock and its job lock share a slot, so one node.
    let (a, b) = ("{order:42}:row", "{order:42}:job");
    let ta: i64 = cmd("LOCK.ACQUIRE").arg(a).arg("me").arg(60_000).query(&mut con).expect("ACQUIRE a");
    let tb: i64 = cmd("LOCK.ACQUIRE").arg(b).arg("me").arg(60_000).query(&mut con).expect("ACQUIRE b");
    assert!(tb > ta, "same node, one counter: {tb} > {ta}");
    let node = cluster.owner_of(0, key_slot(a.as_bytes()));
    let mut direct = cluster.nodes[node].conn();
    assert!(exists(&mut direct, a.as_bytes()) && exists(&mut direct, b.as_bytes()), "both on one node");
}

/// The steps `redis-cli --cluster reshard` takes, one by one, with the
/// waiters' replies checked between them.
#[test]
fn a_slot_moved_by_hand_takes_its_lock_along_and_turns_its_waiters_away() {
    let _serial = one_cluster_at_a_time();
    let cluster = Cluster::start(3, 1);
    let key = "reshard:lock";
    let slot = key_slot(key.as_bytes());
    let src = cluster.owner_of(0, slot);
    let dst = cluster.other_master(src);
    let (src_id, dst_id) = (node_id(&cluster.nodes[src]), node_id(&cluster.nodes[dst]));
    let mut s = cluster.nodes[src].conn();
    let mut d = cluster.nodes[dst].conn();

    // A holder with a token far above the target's own counter, so the
    // target's next grant shows whether RESTORE raised it.
    let token = acquire_fence(&mut s, key.as_bytes(), b"holder", 60_000, far_future_token()).expect("holder granted");
    let deadline = pexpiretime(&mut s, key.as_bytes());
    let mut w1 = start_waiter(&cluster.nodes[src], key, "w1");
    let mut w2 = start_waiter(&cluster.nodes[src], key, "w2");
    // A third waiter through a cluster client, which retries TRYAGAIN and
    // follows the redirections to wherever the lock went.
    let urls = cluster.urls();
    let follower = std::thread::spawn(move || -> redis::RedisResult<Value> {
        let client = redis::cluster::ClusterClient::new(urls)?;
        let mut con = client.get_connection()?;
        cmd("LOCK.ACQUIRE").arg(key).arg("w3").arg(10_000).arg("WAIT").arg(20_000).query(&mut con)
    });
    wait_waiters(&mut s, key.as_bytes(), 3);

    setslot(&mut d, slot, "IMPORTING", &src_id);
    setslot(&mut s, slot, "MIGRATING", &dst_id);
    let migrated =
        ok_cmd(&mut s, cmd("MIGRATE").arg("127.0.0.1").arg(cluster.nodes[dst].port).arg("").arg(0).arg(5000).arg("KEYS").arg(key));
    assert_eq!(migrated, Value::Okay);

    // The key left: its waiters hear TRYAGAIN, and nothing is granted or
    // created on the old node, although the slot is still its own.
    for (c, who) in [(&mut w1, "w1"), (&mut w2, "w2")] {
        let err = assert_turned_away(c, who);
        assert!(err.starts_with("TRYAGAIN"), "{who}: {err}");
    }
    assert_eq!(count_keys_in_slot(&mut s, slot), 0, "no key re-created on the source");
    let err = expect_err(&mut cluster.nodes[src].conn(), cmd("LOCK.ACQUIRE").arg(key).arg("newcomer").arg(1000));
    assert!(err.starts_with("ASK "), "a newcomer is sent to the importing node: {err}");

    for node in 0..cluster.nodes.len() {
        let mut c = cluster.nodes[node].conn();
        if role(&mut c) == "master" {
            setslot(&mut c, slot, "NODE", &dst_id);
        }
    }

    // Same lock on the new node: owner, token, exact deadline.
    let moved = info(&mut d, key.as_bytes()).expect("the lock moved with its slot");
    assert_eq!((moved.owner.as_slice(), moved.token), (&b"holder"[..], token));
    // MIGRATE sends the remaining ttl, which the target adds to its own
    // (later) clock: the lease can only grow, by the transfer time.
    let moved_deadline = pexpiretime(&mut d, key.as_bytes());
    assert!(
        (deadline..=deadline + 100).contains(&moved_deadline),
        "deadline {moved_deadline} on the new node, {deadline} before: never earlier, at most the transfer later"
    );
    assert_eq!(count_keys_in_slot(&mut s, slot), 0, "nothing left behind on the source");
    assert_eq!(acquire(&mut d, key.as_bytes(), b"w1", 10_000), None, "w1 retrying finds it held");

    // RESTORE raised the new node's counter past the moved token.
    let other = key_in_slot("reshard:other:", cluster.first_slot(dst));
    let next = acquire(&mut d, other.as_bytes(), b"someone", 10_000).expect("free key granted");
    assert!(next > token, "token after receiving the lock ({next}) above the moved one ({token})");

    // The following waiter ends up queued on the new node and gets the lock
    // when the holder releases it there: one holder at a time.
    wait_waiters(&mut d, key.as_bytes(), 1);
    assert_eq!(release(&mut d, key.as_bytes(), b"holder"), 1);
    let granted = follower.join().expect("follower thread").expect("w3 granted through redirections");
    let w3 = int_of(&granted, "w3's token");
    assert!(w3 > next, "w3's token {w3} above every earlier one ({next})");
    assert_eq!(info(&mut d, key.as_bytes()).map(|i| i.owner), Some(b"w3".to_vec()));
}

#[test]
fn redis_cli_reshard_moves_a_locked_slot_with_waiters_cleanly() {
    let _serial = one_cluster_at_a_time();
    let cluster = Cluster::start(3, 1);
    let src = cluster.owner_of(0, 0);
    let dst = cluster.other_master(src);
    let slot = cluster.first_slot(src);
    let key = key_in_slot("resharded:", slot);
    let mut s = cluster.nodes[src].conn();
    let token = grant(&mut s, &key, "holder", 60_000);
    let mut w1 = start_waiter(&cluster.nodes[src], &key, "w1");
    let mut w2 = start_waiter(&cluster.nodes[src], &key, "w2");
    wait_waiters(&mut s, key.as_bytes(), 2);

    // Moves the lowest slot of the source: ours.
    let out = Command::new("redis-cli")
        .args(["--cluster", "reshard", &format!("127.0.0.1:{}", cluster.nodes[src].port)])
        .args(["--cluster-from", &node_id(&cluster.nodes[src]), "--cluster-to", &node_id(&cluster.nodes[dst])])
        .args(["--cluster-slots", "1", "--cluster-yes"])
        .output()
        .expect("run redis-cli --cluster reshard");
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "reshard failed:\n{text}");
    assert!(text.contains(&format!("Moving slot {slot} ")), "reshard moved our slot:\n{text}");

    for (c, who) in [(&mut w1, "w1"), (&mut w2, "w2")] {
        let err = assert_turned_away(c, who);
        assert!(err.starts_with("TRYAGAIN"), "{who}: {err}");
    }
    let mut d = cluster.nodes[dst].conn();
    let moved = info(&mut d, key.as_bytes()).expect("lock on the new node");
    assert_eq!((moved.owner.as_slice(), moved.token), (&b"holder"[..], token));
    assert_eq!(count_keys_in_slot(&mut s, slot), 0, "source keeps no key of the moved slot");
    assert_eq!(acquire(&mut d, key.as_bytes(), b"w1", 10_000), None, "still one holder");

    let check = Command::new("redis-cli")
        .args(["--cluster", "check", &format!("127.0.0.1:{}", cluster.nodes[dst].port)])
        .output()
        .expect("run redis-cli --cluster check");
    let text = String::from_utf8_lossy(&check.stdout).into_owned();
    assert!(check.status.success() && !text.contains("[WARNING]"), "cluster check after reshard:\n{text}");
}

#[test]
fn cluster_failover_keeps_locks_exact_and_unblocks_waiters_of_the_old_master() {
    let _serial = one_cluster_at_a_time();
    let cluster = Cluster::start(3, 1);
    let key = "{failover}:lock";
    let master = cluster.owner_of(0, key_slot(key.as_bytes()));
    let replica = cluster.replica_of(master);
    let mut m = cluster.nodes[master].conn();
    let token = grant(&mut m, key, "holder", 60_000);
    let deadline = pexpiretime(&mut m, key.as_bytes());
    let mut waiter = start_waiter(&cluster.nodes[master], key, "waiter");
    wait_waiters(&mut m, key.as_bytes(), 1);
    wait1(&mut m);

    let mut r = cluster.nodes[replica].conn();
    assert_eq!(ok_cmd(&mut r, cmd("CLUSTER").arg("FAILOVER")), Value::Okay);
    wait_until(FAILOVER_DEADLINE, "replica promoted, old master demoted", || {
        role(&mut cluster.nodes[replica].conn()) == "master" && role(&mut cluster.nodes[master].conn()) == "slave"
    });

    let err = assert_turned_away(&mut waiter, "the old master's waiter");
    eprintln!("the old master's waiter heard: {err}");
    assert!(err.starts_with("UNBLOCKED") || err.starts_with("TRYAGAIN"), "waiter: {err}");

    let kept = info(&mut r, key.as_bytes()).expect("the lock survived the failover");
    assert_eq!((kept.owner.as_slice(), kept.token), (&b"holder"[..], token));
    assert_eq!(pexpiretime(&mut r, key.as_bytes()), deadline, "deadline kept to the millisecond");
    assert_eq!(acquire(&mut r, key.as_bytes(), b"waiter", 10_000), None, "still held by the holder");
    let next = acquire(&mut r, b"{failover}:other", b"someone", 10_000).expect("free key granted");
    assert!(next > token, "first token of the new master ({next}) above the old one ({token})");
    assert_eq!(release(&mut r, key.as_bytes(), b"holder"), 1, "the holder releases on the new master");
}

/// Asynchronous replication can lose a grant at failover; the promoted
/// replica must then never reissue its token.
#[test]
fn a_grant_that_never_reached_the_replica_is_outnumbered_after_failover() {
    let _serial = one_cluster_at_a_time();
    let mut cluster = Cluster::start(3, 1);
    let key = "{lost}:grant";
    let master = cluster.owner_of(0, key_slot(key.as_bytes()));
    let replica = cluster.replica_of(master);
    let mut m = cluster.nodes[master].conn();
    let replicated = grant(&mut m, "{lost}:kept", "early", 60_000);
    wait1(&mut m);

    // Cut the replica off (frozen, its link dropped), grant, kill the
    // master: the grant exists nowhere else. FENCE puts it as far ahead of
    // the clock as the module allows.
    cluster.nodes[replica].sigstop();
    let killed = int_of(&ok_cmd(&mut m, cmd("CLIENT").arg("KILL").arg("TYPE").arg("replica")), "CLIENT KILL");
    assert_eq!(killed, 1, "the replica's link dropped");
    let lost = acquire_fence(&mut m, key.as_bytes(), b"lost", 60_000, far_future_token()).expect("granted on the master");
    cluster.nodes[master].kill9();
    cluster.nodes[replica].sigcont();

    let mut r = cluster.nodes[replica].conn();
    wait_until(FAILOVER_DEADLINE, "replica promoted after its master died", || role(&mut r) == "master");
    assert_eq!(info(&mut r, b"{lost}:kept").map(|i| i.token), Some(replicated), "replicated lock kept");
    assert!(info(&mut r, key.as_bytes()).is_none(), "the unreplicated grant is gone, as asynchronous replication allows");
    let next = acquire(&mut r, key.as_bytes(), b"next", 10_000).expect("granted on the promoted replica");
    assert!(next > lost, "promoted replica's token {next} must exceed the lost grant's {lost}");
}

/// A semaphore's key moved to another node by hand (MIGRATE, as a
/// reshard does) arrives with every holder, token and limit: the new node
/// refuses a permit beyond the limit, and its counter is past the moved
/// tokens.
#[test]
fn a_semaphore_moved_by_hand_keeps_every_holder() {
    let _serial = one_cluster_at_a_time();
    let cluster = Cluster::start(3, 0);
    let key = "reshard:sem";
    let slot = key_slot(key.as_bytes());
    let src = cluster.owner_of(0, slot);
    let dst = cluster.other_master(src);
    let (src_id, dst_id) = (node_id(&cluster.nodes[src]), node_id(&cluster.nodes[dst]));
    let mut s = cluster.nodes[src].conn();
    let mut d = cluster.nodes[dst].conn();
    let permit = |c: &mut redis::Connection, owner: &str| -> Value {
        ok_cmd(c, cmd("LOCK.ACQUIRE").arg(key).arg(owner).arg(60_000).arg("SHARED").arg("LIMIT").arg(2))
    };
    let ta = int_of(&permit(&mut s, "a"), "a's permit");
    let tb = int_of(&permit(&mut s, "b"), "b's permit");
    setslot(&mut d, slot, "IMPORTING", &src_id);
    setslot(&mut s, slot, "MIGRATING", &dst_id);
    let migrated =
        ok_cmd(&mut s, cmd("MIGRATE").arg("127.0.0.1").arg(cluster.nodes[dst].port).arg("").arg(0).arg(5000).arg("KEYS").arg(key));
    assert_eq!(migrated, Value::Okay);
    for node in 0..cluster.nodes.len() {
        setslot(&mut cluster.nodes[node].conn(), slot, "NODE", &dst_id);
    }
    assert_eq!(count_keys_in_slot(&mut s, slot), 0, "nothing left behind on the source");
    let fields = info_fields(ok_cmd(&mut d, cmd("LOCK.INFO").arg(key))).expect("the semaphore moved with its slot");
    assert_eq!(fields[4].1, Value::BulkString(b"shared".to_vec()));
    assert_eq!(fields[5].1, Value::Int(2), "its limit moved along");
    let holders: Vec<(Vec<u8>, Option<i64>)> = holder_rows_of(&fields).into_iter().map(|h| (h.owner, h.token)).collect();
    assert_eq!(holders, vec![(b"a".to_vec(), Some(ta)), (b"b".to_vec(), Some(tb))]);
    assert_eq!(permit(&mut d, "c"), Value::Nil, "both permits are held on the new node");
    assert_eq!(release(&mut d, key.as_bytes(), b"a"), 1);
    let tc = int_of(&permit(&mut d, "c"), "c's permit after a's release");
    assert!(tc > tb, "the new node's counter passed the moved tokens: {tc} <= {tb}");
}
