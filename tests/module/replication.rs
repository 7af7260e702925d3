//! Master/replica behaviour: what is replicated (LOCK.APPLY, PEXPIREAT, LOCK.RELEASE),
//! what is not (failed operations), and the counter after failover.

use crate::common;

use common::*;
use redis::Connection;
use std::time::Duration;

const MASTER_ARGS: &[&str] = &[
    // No periodic PINGs into the replication stream, so master_repl_offset
    // only moves when a command is propagated.
    "--repl-ping-replica-period",
    "3600",
    "--repl-diskless-sync-delay",
    "0",
];

fn pair() -> (Server, Server) {
    let master = Server::start_with(MASTER_ARGS);
    let replica = Server::start();
    attach_replica(&master, &replica);
    (master, replica)
}

/// `cmdstat_<name>` calls from INFO commandstats, 0 when absent.
fn calls(c: &mut Connection, name: &str) -> i64 {
    let text: String = cmd("INFO").arg("commandstats").query(c).expect("INFO commandstats");
    let prefix = format!("cmdstat_{name}:calls=");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map(|rest| rest.split(',').next().expect("calls value").parse().expect("calls is an integer"))
        .unwrap_or(0)
}

/// The master replicates the absolute deadline it stored, so both sides
/// hold the very same millisecond.
fn assert_same_deadline(a: i64, b: i64, what: &str) {
    assert_eq!(a, b, "{what}: deadlines differ");
}

#[test]
fn grant_extend_release_and_fence_propagate() {
    let (master, replica) = pair();
    let mut m = master.conn();
    let mut r = replica.conn();

    let t = grant(&mut m, "k", "alice", 600_000);
    wait1(&mut m);
    let ri = info(&mut r, b"k").expect("replica must have the lock");
    assert_eq!(ri.owner, b"alice");
    assert_eq!(ri.token, t);
    let mp = pexpiretime(&mut m, b"k");
    let rp = pexpiretime(&mut r, b"k");
    assert!(mp > 0, "master PEXPIRETIME {mp}");
    assert_same_deadline(mp, rp, "PEXPIRETIME master vs replica after grant");

    // Re-grant restarts the lease on the replica too.
    assert_eq!(acquire(&mut m, b"k", b"alice", 1_200_000), Some(t));
    wait1(&mut m);
    let mp2 = pexpiretime(&mut m, b"k");
    assert!(mp2 >= mp + 500_000, "master lease restarted");
    assert_same_deadline(mp2, pexpiretime(&mut r, b"k"), "PEXPIRETIME after re-grant");
    assert_eq!(info(&mut r, b"k").expect("replica lock").token, t);

    // EXTEND propagates as PEXPIREAT.
    assert_eq!(extend(&mut m, b"k", b"alice", 2_400_000), 1);
    wait1(&mut m);
    let mp3 = pexpiretime(&mut m, b"k");
    assert!(mp3 >= mp2 + 1_000_000, "master lease extended");
    assert_same_deadline(mp3, pexpiretime(&mut r, b"k"), "PEXPIRETIME after extend");
    assert_eq!(info(&mut r, b"k").expect("replica lock").token, t, "extend keeps token");

    // FENCE-raised tokens propagate, including a re-grant raise.
    let f = far_future_token();
    assert_eq!(acquire_fence(&mut m, b"f", b"bob", 600_000, f), Some(f));
    wait1(&mut m);
    assert_eq!(info(&mut r, b"f").expect("replica f").token, f);
    assert_eq!(acquire_fence(&mut m, b"f", b"bob", 600_000, f + 5), Some(f + 5));
    wait1(&mut m);
    assert_eq!(info(&mut r, b"f").expect("replica f").token, f + 5);

    // RELEASE propagates: the key is gone on the replica.
    assert_eq!(release(&mut m, b"k", b"alice"), 1);
    wait1(&mut m);
    assert!(!exists(&mut r, b"k"), "released lock must be gone on the replica");

    // What the replica received: LOCK.APPLY and PEXPIREAT with absolute
    // deadlines, and the release verbatim (deterministic given the same
    // state); never the time-relative ACQUIRE or EXTEND.
    // At least: grant k, grant f, re-grant f with a raised token.
    assert!(calls(&mut r, "lock.apply") >= 3, "replica must execute LOCK.APPLY");
    assert!(calls(&mut r, "pexpireat") >= 1, "extend must arrive as PEXPIREAT");
    assert!(calls(&mut r, "lock.release") >= 1, "release must arrive verbatim");
    for c in ["lock.acquire", "lock.extend"] {
        assert_eq!(calls(&mut r, c), 0, "replica must not receive {c}");
    }

    // The replica refuses writes from clients but serves LOCK.INFO.
    let e = expect_err(&mut r, cmd("LOCK.ACQUIRE").arg("x").arg("o").arg(1000));
    assert!(e.starts_with("READONLY"), "LOCK.ACQUIRE on a replica: {e}");
}

#[test]
fn failed_ops_do_not_advance_replication_offset() {
    let (master, replica) = pair();
    let mut m = master.conn();
    let mut r = replica.conn();
    grant(&mut m, "k", "holder", 600_000);
    wait1(&mut m);
    let off0 = info_field_i64(&mut m, "replication", "master_repl_offset");

    assert_eq!(acquire(&mut m, b"k", b"other", 1000), None);
    assert_eq!(acquire_fence(&mut m, b"k", b"other", 1000, far_future_token()), None);
    assert_eq!(release(&mut m, b"k", b"other"), 0);
    assert_eq!(extend(&mut m, b"k", b"other", 1000), 0);
    assert_eq!(release(&mut m, b"missing", b"other"), 0);
    assert_eq!(extend(&mut m, b"missing", b"other", 1000), 0);
    let _ = expect_err(&mut m, cmd("LOCK.ACQUIRE").arg("k").arg("holder").arg(0));
    let _ = expect_err(&mut m, cmd("LOCK.ACQUIRE").arg("k").arg("holder").arg(1000).arg("FENCE"));
    let _ = expect_err(&mut m, cmd("LOCK.ACQUIRE").arg("n").arg("").arg(1000));
    let _ = expect_err(&mut m, cmd("LOCK.APPLY").arg("n").arg("o").arg(1).arg(0));
    let _ = info(&mut m, b"k");
    let off1 = info_field_i64(&mut m, "replication", "master_repl_offset");
    assert_eq!(off1, off0, "failed lock operations were propagated to replicas");

    assert_eq!(extend(&mut m, b"k", b"holder", 600_000), 1);
    let off2 = info_field_i64(&mut m, "replication", "master_repl_offset");
    assert!(off2 > off1, "a successful extend must be propagated");
    wait1(&mut m);
    assert_same_deadline(pexpiretime(&mut m, b"k"), pexpiretime(&mut r, b"k"), "PEXPIRETIME after extend");
}

#[test]
fn promoted_replica_continues_above_master_tokens() {
    let (master, replica) = pair();
    let mut m = master.conn();
    let mut max = 0;
    for i in 0..20 {
        max = max.max(grant(&mut m, &format!("k{i}"), "o", 600_000));
    }
    // The highest token lives on no key by the time of failover.
    let f = far_future_token();
    assert_eq!(acquire_fence(&mut m, b"gone", b"o", 600_000, f), Some(f));
    assert_eq!(release(&mut m, b"gone", b"o"), 1);
    max = max.max(f);
    wait1(&mut m);

    let mut r = replica.conn();
    ok_cmd(&mut r, cmd("REPLICAOF").arg("NO").arg("ONE"));
    assert_eq!(info_field(&mut r, "replication", "role"), "master");
    let next = grant(&mut r, "new", "o", 1000);
    assert!(next > max, "promoted replica's next token {next} must exceed every master token ({max})");
    // Existing locks survived the failover with their owners.
    assert_eq!(acquire(&mut r, b"k0", b"mallory", 1000), None);
}

/// A grant the replica never received (its link was down) is outnumbered
/// by the promoted replica's first token: promotion raises the counter past
/// anything the old master could issue (clock floor plus the allowed lead).
#[test]
fn promoted_replica_exceeds_a_grant_it_never_received() {
    let (mut master, replica) = pair();
    let mut m = master.conn();
    let seen = grant(&mut m, "seen", "o", 600_000);
    wait1(&mut m);
    replica.sigstop();
    let killed = int_of(&ok_cmd(&mut m, cmd("CLIENT").arg("KILL").arg("TYPE").arg("replica")), "CLIENT KILL");
    assert_eq!(killed, 1, "the replica's link dropped");
    let plain = grant(&mut m, "lost", "o", 600_000);
    let fenced = acquire_fence(&mut m, b"lost-fenced", b"o", 600_000, far_future_token()).expect("granted");
    master.kill9();
    replica.sigcont();

    let mut r = replica.conn();
    ok_cmd(&mut r, cmd("REPLICAOF").arg("NO").arg("ONE"));
    assert_eq!(info(&mut r, b"seen").map(|i| i.token), Some(seen));
    assert!(info(&mut r, b"lost").is_none(), "the replica never had the lost grant");
    let next = grant(&mut r, "lost", "other", 1000);
    assert!(next > plain && next > fenced, "promoted token {next} must exceed the lost grants {plain} and {fenced}");
}

/// A master turned replica while clients wait: they are told to retry
/// (Redis: its own UNBLOCKED; servers that keep blocked clients across the
/// demotion: the module's TRYAGAIN), promptly, and never granted there.
#[test]
fn waiters_of_a_demoted_master_are_told_to_retry() {
    let master = Server::start_with(MASTER_ARGS);
    let other = Server::start();
    let mut m = master.conn();
    grant(&mut m, "k", "holder", 600_000);
    let mut w = master.conn();
    w.set_read_timeout(Some(std::time::Duration::from_secs(10))).expect("read timeout");
    send_cmd(&mut w, cmd("LOCK.ACQUIRE").arg("k").arg("w").arg(10_000).arg("WAIT").arg(60_000));
    wait_waiters(&mut m, b"k", 1);
    let started = std::time::Instant::now();
    ok_cmd(&mut m, cmd("REPLICAOF").arg("127.0.0.1").arg(other.port));
    let reply = recv_reply(&mut w, "the demoted master's waiter");
    eprintln!("waiter after demotion: {reply:?} after {:?}", started.elapsed());
    let err = reply.expect_err("an error, not a grant or a nil");
    assert!(err.starts_with("UNBLOCKED") || err.starts_with("TRYAGAIN"), "{err}");
}

#[test]
fn late_replica_full_sync_gets_locks_and_counter() {
    let master = Server::start_with(&["--repl-ping-replica-period", "3600", "--repl-diskless-sync", "no"]);
    let mut m = master.conn();
    let t1 = grant(&mut m, "a", "alice", 600_000);
    let f = far_future_token();
    assert_eq!(acquire_fence(&mut m, b"b", b"bob", 900_000, f), Some(f));
    let bin: &[u8] = b"bin\x00\xff";
    acquire(&mut m, b"c", bin, 700_000).expect("grant c");
    // Highest token on no key: the replica can only learn it from aux data.
    let f2 = f + 1_000_000;
    assert_eq!(acquire_fence(&mut m, b"gone", b"o", 600_000, f2), Some(f2));
    assert_eq!(release(&mut m, b"gone", b"o"), 1);

    let replica = Server::start();
    attach_replica(&master, &replica);
    let mut r = replica.conn();
    assert!(info_field_i64(&mut m, "stats", "sync_full") >= 1, "replica was expected to full-sync");
    for (k, owner, token) in [("a", &b"alice"[..], t1), ("b", &b"bob"[..], f), ("c", bin, f + 1)] {
        let i = info(&mut r, k.as_bytes()).unwrap_or_else(|| panic!("replica lacks {k}"));
        assert_eq!(i.owner, owner, "owner of {k} on replica");
        assert_eq!(i.token, token, "token of {k} on replica");
        assert_eq!(pexpiretime(&mut r, k.as_bytes()), pexpiretime(&mut m, k.as_bytes()), "PEXPIRETIME of {k} after full sync");
    }
    assert!(!exists(&mut r, b"gone"));

    ok_cmd(&mut r, cmd("REPLICAOF").arg("NO").arg("ONE"));
    let next = grant(&mut r, "new", "o", 1000);
    assert!(next > f2, "promoted late replica's next token {next} must exceed {f2} (counter via RDB aux)");
}

/// A replica never takes, extends or releases a lock for a client, also
/// with `replica-read-only no`: a lock it granted is unknown to its
/// master, which grants it to someone else and later overwrites it. It
/// answers as a read-only replica does, still serves LOCK.INFO, and still
/// applies its master's grants and releases.
#[test]
fn a_writable_replica_refuses_lock_writes_and_follows_its_master() {
    let (master, replica) = pair();
    let mut m = master.conn();
    let mut r = replica.conn();
    ok_cmd(&mut r, cmd("CONFIG").arg("SET").arg("replica-read-only").arg("no"));
    let t = grant(&mut m, "k", "alice", 600_000);
    wait1(&mut m);
    let deadline = pexpiretime(&mut r, b"k");
    let readonly = "READONLY You can't write against a read only replica.";
    for c in [
        cmd("LOCK.ACQUIRE").arg("free").arg("bob").arg(60_000).clone(),
        cmd("LOCK.ACQUIRE").arg("k").arg("bob").arg(60_000).arg("WAIT").arg(100).clone(),
        cmd("LOCK.ACQUIRE").arg("k").arg("alice").arg(60_000).clone(),
        cmd("LOCK.EXTEND").arg("k").arg("alice").arg(900_000).clone(),
        cmd("LOCK.RELEASE").arg("k").arg("alice").clone(),
    ] {
        assert_eq!(expect_err(&mut r, &c), readonly, "{}", describe(&c.get_packed_command()));
    }
    // The same inside MULTI and a script: only the master link writes.
    ok_cmd(&mut r, &cmd("MULTI"));
    ok_cmd(&mut r, cmd("LOCK.ACQUIRE").arg("free").arg("bob").arg(60_000));
    let exec = format!("{:?}", ok_cmd(&mut r, &cmd("EXEC")));
    assert!(exec.to_ascii_lowercase().contains("readonly"), "{exec}");
    let script = expect_err(&mut r, cmd("EVAL").arg("return redis.call('LOCK.ACQUIRE', 'free', 'bob', 60000)").arg(0));
    assert!(script.contains("READONLY"), "{script}");
    assert!(!exists(&mut r, b"free"), "the replica granted a lock of its own");
    let i = info(&mut r, b"k").expect("LOCK.INFO answers on the replica");
    assert_eq!((i.owner.as_slice(), i.token), (&b"alice"[..], t));
    assert_eq!(pexpiretime(&mut r, b"k"), deadline, "the refused EXTEND changed the lease");
    // What the master does still arrives.
    assert_eq!(extend(&mut m, b"k", b"alice", 900_000), 1);
    let t2 = grant(&mut m, "free", "carol", 60_000);
    assert_eq!(release(&mut m, b"k", b"alice"), 1);
    wait1(&mut m);
    assert!(!exists(&mut r, b"k"), "the master's release applied on the replica");
    assert_eq!(info(&mut r, b"free").expect("the master's grant").token, t2);
    // Promoted, it grants again.
    ok_cmd(&mut r, cmd("REPLICAOF").arg("NO").arg("ONE"));
    assert!(grant(&mut r, "mine", "dave", 1000) > t2);
}

/// While nothing can receive propagated commands (no AOF, no replica, no
/// backlog), a grant is not built into a LOCK.APPLY (Redis would drop it),
/// but it still counts as a change for the `save` rules, as SET does.
#[test]
fn a_grant_nobody_listens_to_still_counts_for_the_save_rules() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(info_field_i64(&mut c, "replication", "repl_backlog_active"), 0, "no backlog to begin with");
    let before = info_field_i64(&mut c, "persistence", "rdb_changes_since_last_save");
    grant(&mut c, "counted:1", "o", 60_000);
    grant(&mut c, "counted:2", "o", 60_000);
    assert_eq!(acquire(&mut c, b"counted:1", b"other", 60_000), None, "a refusal changes nothing");
    let after = info_field_i64(&mut c, "persistence", "rdb_changes_since_last_save");
    assert_eq!(after - before, 2, "one change per grant");
}

/// A replica that attaches while grants and extensions pour in gets every
/// one of them, exactly: those before its sync's fork through the
/// snapshot, every one after it as LOCK.APPLY or PEXPIREAT, none as the
/// client's relative command. Both sync kinds (an RDB file, diskless).
#[test]
fn a_replica_attached_under_a_stream_of_grants_gets_each_one_exactly() {
    for diskless in ["no", "yes"] {
        let master = Server::start_with(&["--repl-diskless-sync", diskless, "--repl-diskless-sync-delay", "0"]);
        let replica = Server::start();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let granter = {
            let (stop, mut m) = (stop.clone(), master.conn());
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(std::sync::atomic::Ordering::SeqCst) || n < 2_000 {
                    let key = format!("stream:{n}");
                    assert!(acquire(&mut m, key.as_bytes(), b"owner", 600_000).is_some(), "grant {key}");
                    if n % 2 == 1 {
                        let earlier = format!("stream:{}", n - 1);
                        assert_eq!(extend(&mut m, earlier.as_bytes(), b"owner", 900_000), 1, "extend {earlier}");
                    }
                    n += 1;
                }
                n
            })
        };
        // Grants before, during and after the sync.
        let mut watch = master.conn();
        wait_until(Duration::from_secs(10), "grants under way", || int_of(&ok_cmd(&mut watch, &cmd("DBSIZE")), "DBSIZE") > 500);
        let mut r = replica.conn();
        ok_cmd(&mut r, cmd("REPLICAOF").arg("127.0.0.1").arg(master.port));
        wait_until(Duration::from_secs(20), "replica link up", || info_field(&mut r, "replication", "master_link_status") == "up");
        std::thread::sleep(Duration::from_millis(100));
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let granted = granter.join().expect("granter");
        wait_replica_synced(&master, &replica);
        let mut m = master.conn();
        let master_keys: i64 = int_of(&ok_cmd(&mut m, &cmd("DBSIZE")), "DBSIZE");
        assert_eq!(master_keys as u64, granted, "diskless {diskless}: every grant on the master");
        assert_eq!(int_of(&ok_cmd(&mut r, &cmd("DBSIZE")), "DBSIZE"), master_keys, "diskless {diskless}: key count");
        for n in (0..granted).step_by(3) {
            let key = format!("stream:{n}");
            let (mi, ri) = (info(&mut m, key.as_bytes()).expect("on master"), info(&mut r, key.as_bytes()));
            let ri = ri.unwrap_or_else(|| panic!("diskless {diskless}: replica lacks {key}"));
            assert_eq!((ri.owner, ri.token), (mi.owner, mi.token), "diskless {diskless}: {key}");
            assert_eq!(pexpiretime(&mut r, key.as_bytes()), pexpiretime(&mut m, key.as_bytes()), "diskless {diskless}: deadline of {key}");
        }
        assert_eq!(calls(&mut r, "lock.acquire"), 0, "diskless {diskless}: the client's command never reached the replica");
        assert_eq!(calls(&mut r, "lock.extend"), 0, "diskless {diskless}: nor an extension as the client sent it");
    }
}

/// An AOF switched on at runtime starts with a rewrite in a child; every
/// grant after it is written as LOCK.APPLY, never as the client's command.
#[test]
fn an_aof_switched_on_at_runtime_records_grants_exactly() {
    let server = Server::start();
    let mut c = server.conn();
    grant(&mut c, "before", "o", 600_000);
    ok_cmd(&mut c, cmd("CONFIG").arg("SET").arg("appendonly").arg("yes"));
    wait_aof_rewrite_idle(&mut c);
    let token = grant(&mut c, "after-aof-on", "o", 600_000);
    wait_aof_flushed(&mut c);
    let files = read_all_files(&server.dir);
    let aof: Vec<u8> = files.iter().filter(|(p, _)| p.to_string_lossy().contains(".incr.aof")).flat_map(|(_, b)| b.clone()).collect();
    assert!(contains_ci(&aof, b"LOCK.APPLY") && contains_ci(&aof, b"after-aof-on"), "the grant is in the AOF as LOCK.APPLY");
    assert!(contains_ci(&aof, token.to_string().as_bytes()), "with its token");
    assert!(!contains_ci(&aof, b"LOCK.ACQUIRE"), "never as the client's command");
}

/// A master restarted from its RDB may keep its replication offsets and
/// let its replicas resume (PSYNC) from a backlog made at load, without a
/// fork: its grants after the restart must still reach them.
#[test]
fn a_master_restarted_from_its_rdb_replicates_grants_to_its_replicas() {
    let mut master = Server::start_with(MASTER_ARGS);
    let replica = Server::start();
    attach_replica(&master, &replica);
    let mut m = master.conn();
    grant(&mut m, "before-restart", "o", 600_000);
    wait1(&mut m);
    ok_cmd(&mut m, &cmd("SAVE"));
    drop(m);
    master.kill9();
    master.start_again();
    let mut m = master.conn();
    wait_replica_synced(&master, &replica);
    let token = grant(&mut m, "after-restart", "o", 600_000);
    wait1(&mut m);
    let mut r = replica.conn();
    let ri = info(&mut r, b"after-restart").expect("the replica has the grant made after the restart");
    assert_eq!((ri.owner.as_slice(), ri.token), (&b"o"[..], token));
    assert_eq!(pexpiretime(&mut r, b"after-restart"), pexpiretime(&mut m, b"after-restart"));
    println!(
        "restart: sync_full {} sync_partial_ok {}",
        info_field_i64(&mut m, "stats", "sync_full"),
        info_field_i64(&mut m, "stats", "sync_partial_ok")
    );
}
