//! Locks and the fencing counter across DEBUG RELOAD, RDB and AOF restarts,
//! DUMP/RESTORE and COPY.

use crate::common;

use common::*;
use redis::{Connection, Value};

/// An owner as the quorum client makes them: 40 lowercase hex digits.
const CLIENT_OWNER: &[u8] = b"5f0c3a9e4b7d21f86a0e9c3d7b1f4a2e6c8d0b13";

#[derive(Debug, PartialEq)]
struct Snapshot {
    owner: Vec<u8>,
    token: i64,
    pexpiretime: i64,
}

fn snap(c: &mut Connection, key: &str) -> Snapshot {
    let i = info(c, key.as_bytes()).unwrap_or_else(|| panic!("lock {key} missing"));
    Snapshot { owner: i.owner, token: i.token, pexpiretime: pexpiretime(c, key.as_bytes()) }
}

#[test]
fn debug_reload_keeps_locks_and_counter() {
    let s = Server::start();
    let mut c = s.conn();
    let t1 = grant(&mut c, "plain", "alice", 600_000);
    let f1 = far_future_token();
    assert_eq!(acquire_fence(&mut c, b"fenced", b"bob", 600_000, f1), Some(f1));
    ok_cmd(&mut c, cmd("PERSIST").arg("fenced"));
    // The highest token lives on no key: only the counter remembers it.
    let f2 = f1 + 1_000_000;
    assert_eq!(acquire_fence(&mut c, b"gone", b"carol", 600_000, f2), Some(f2));
    assert_eq!(release(&mut c, b"gone", b"carol"), 1);
    let before_plain = snap(&mut c, "plain");
    let before_fenced = snap(&mut c, "fenced");
    assert_eq!(before_plain.token, t1);
    assert_eq!(before_fenced.pexpiretime, -1);

    ok_cmd(&mut c, cmd("DEBUG").arg("RELOAD"));

    assert_eq!(snap(&mut c, "plain"), before_plain, "plain lock after DEBUG RELOAD");
    assert_eq!(snap(&mut c, "fenced"), before_fenced, "fenced lock after DEBUG RELOAD");
    assert!(!exists(&mut c, b"gone"));
    let ty: String = cmd("TYPE").arg("plain").query(&mut c).expect("TYPE");
    assert_eq!(ty, "redislock");
    let next = grant(&mut c, "next", "dave", 1000);
    assert!(next > f2, "next token {next} after DEBUG RELOAD must exceed the released FENCE token {f2}");
    // Locks still behave as locks.
    assert_eq!(acquire(&mut c, b"plain", b"mallory", 1000), None);
    assert_eq!(release(&mut c, b"plain", b"alice"), 1);
}

#[test]
fn rdb_restart_keeps_locks_exactly() {
    let mut s = Server::start();
    let mut c = s.conn();
    let t1 = grant(&mut c, "a", "alice", 600_000);
    let t2 = grant(&mut c, "b", "bob", 900_000);
    let owner_bin: &[u8] = b"bin\x00\xff";
    acquire(&mut c, b"c", owner_bin, 700_000).expect("grant c");
    // The quorum client's owner (kept as the bytes its digits spell) and
    // two that look like it but are kept as given.
    let hex_owners: [&[u8]; 3] = [CLIENT_OWNER, b"5F0C3A9E4B7D21F86A0E9C3D7B1F4A2E6C8D0B13", b"5f0c3a9e4b7d21f86a0e9c3d7b1f4a2e6c8d0b1"];
    for (key, owner) in ["h1", "h2", "h3"].iter().zip(hex_owners) {
        acquire(&mut c, key.as_bytes(), owner, 800_000).expect("grant a hex owner");
    }
    let keys = ["a", "b", "c", "h1", "h2", "h3"];
    let before: Vec<Snapshot> = keys.iter().map(|k| snap(&mut c, k)).collect();
    for (snapshot, owner) in before[3..].iter().zip(hex_owners) {
        assert_eq!(snapshot.owner, owner);
    }
    assert_eq!(before[0].token, t1);
    assert_eq!(before[1].token, t2);
    ok_cmd(&mut c, &cmd("SAVE"));
    drop(c);
    s.restart();
    let mut c = s.conn();
    let after: Vec<Snapshot> = keys.iter().map(|k| snap(&mut c, k)).collect();
    assert_eq!(after, before, "locks after restart from RDB");
    assert_eq!(acquire(&mut c, b"h1", hex_owners[1], 1000), None, "an uppercase spelling is another owner");
    assert_eq!(release(&mut c, b"h1", hex_owners[2]), 0, "so is a prefix");
    assert_eq!(release(&mut c, b"h1", CLIENT_OWNER), 1);
    let next = grant(&mut c, "d", "o", 1000);
    let max = before.iter().map(|s| s.token).max().expect("tokens");
    assert!(next > max, "next token {next} must exceed {max}");
    assert_eq!(acquire(&mut c, b"a", b"mallory", 1000), None, "a still held by alice");
    assert_eq!(acquire(&mut c, b"a", b"alice", 600_000), Some(t1), "alice re-grant keeps token");
}

#[test]
fn rdb_restart_counter_survives_in_aux_data() {
    let mut s = Server::start();
    let mut c = s.conn();
    let mut last = 0;
    for i in 0..300 {
        let k = format!("k{i}");
        let t = grant(&mut c, &k, "o", 600_000);
        assert!(t > last);
        last = t;
        assert_eq!(release(&mut c, k.as_bytes(), b"o"), 1);
    }
    // The latest token (raised far beyond the load-time clock) is on no key.
    let f = far_future_token();
    assert_eq!(acquire_fence(&mut c, b"top", b"o", 600_000, f), Some(f));
    assert_eq!(release(&mut c, b"top", b"o"), 1);
    let dbsize = int_of(&ok_cmd(&mut c, &cmd("DBSIZE")), "DBSIZE");
    assert_eq!(dbsize, 0, "no live key holds the latest token");
    ok_cmd(&mut c, &cmd("SAVE"));
    drop(c);
    s.restart();
    let mut c = s.conn();
    let next = grant(&mut c, "after", "o", 1000);
    assert!(next > f, "after RDB restart the next token {next} must exceed the last issued {f} (aux data)");
}

fn aof_files(s: &Server) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let files = read_all_files(&s.dir.join("appendonlydir"));
    assert!(!files.is_empty(), "no files in {}/appendonlydir", s.dir.display());
    files
}

fn assert_no_acquire_in_aof(s: &Server, when: &str) {
    for (p, b) in aof_files(s) {
        assert!(!contains_ci(&b, b"LOCK.ACQUIRE"), "{when}: {} contains LOCK.ACQUIRE", p.display());
    }
}

fn aof_roundtrip(preamble: bool) {
    let pre = if preamble { "yes" } else { "no" };
    let mut s = Server::start_with(&["--appendonly", "yes", "--aof-use-rdb-preamble", pre]);
    let mut c = s.conn();
    wait_aof_rewrite_idle(&mut c);

    // Before the rewrite.
    let t1 = grant(&mut c, "k1", "alice", 600_000);
    let f1 = far_future_token();
    assert_eq!(acquire_fence(&mut c, b"k2", b"bob", 600_000, f1), Some(f1));
    let bin_owner: &[u8] = b"o\x00\xff\r\n";
    let t3 = acquire(&mut c, b"k3", bin_owner, 700_000).expect("grant k3");
    assert_eq!(t3, f1 + 1);
    grant(&mut c, "nottl", "erin", 600_000);
    ok_cmd(&mut c, cmd("PERSIST").arg("nottl"));
    acquire(&mut c, b"hex", CLIENT_OWNER, 600_000).expect("grant hex");

    bgrewriteaof(&mut c);
    wait_aof_flushed(&mut c);
    assert_no_acquire_in_aof(&s, "after BGREWRITEAOF");
    let files = aof_files(&s);
    if preamble {
        assert!(
            files.iter().any(|(p, _)| p.to_string_lossy().ends_with(".base.rdb")),
            "preamble yes: expected an RDB base file, got {:?}",
            files.iter().map(|(p, _)| p.clone()).collect::<Vec<_>>()
        );
    } else {
        let base: Vec<_> = files.iter().filter(|(p, _)| p.to_string_lossy().ends_with(".base.aof")).collect();
        assert_eq!(base.len(), 1, "preamble no: exactly one .base.aof expected");
        assert!(
            contains_ci(&base[0].1, b"LOCK.APPLY"),
            "rewritten AOF base must contain LOCK.APPLY:\n{}",
            String::from_utf8_lossy(&base[0].1)
        );
        assert!(
            contains_ci(&base[0].1, b"PEXPIREAT"),
            "rewritten AOF base must carry the lease as PEXPIREAT:\n{}",
            String::from_utf8_lossy(&base[0].1)
        );
    }

    // After the rewrite: these land in the incremental file.
    assert_eq!(extend(&mut c, b"k1", b"alice", 900_000), 1);
    let f2 = f1 + 2_000_000;
    assert_eq!(acquire_fence(&mut c, b"k4", b"dave", 600_000, f2), Some(f2));
    assert_eq!(release(&mut c, b"k2", b"bob"), 1);
    let f3 = f2 + 1_000_000;
    assert_eq!(acquire_fence(&mut c, b"k5", b"frank", 600_000, f3), Some(f3));
    assert_eq!(release(&mut c, b"k5", b"frank"), 1);
    // A re-grant with a larger FENCE after the rewrite.
    let f4 = f3 + 10;
    assert_eq!(acquire_fence(&mut c, b"k3", bin_owner, 700_000, f4), Some(f4));
    wait_aof_flushed(&mut c);
    assert_no_acquire_in_aof(&s, "after post-rewrite commands");
    assert!(
        aof_files(&s).iter().any(|(p, b)| p.to_string_lossy().ends_with(".incr.aof") && contains_ci(b, b"LOCK.APPLY")),
        "incremental AOF must contain LOCK.APPLY for post-rewrite grants"
    );

    let keys = ["k1", "k3", "k4", "nottl", "hex"];
    let before: Vec<Snapshot> = keys.iter().map(|k| snap(&mut c, k)).collect();
    assert_eq!(before[0].token, t1);
    assert_eq!(before[1].owner, bin_owner);
    assert_eq!(before[4].owner, CLIENT_OWNER);
    assert_eq!(before[3].pexpiretime, -1);
    drop(c);
    s.restart();
    let mut c = s.conn();
    assert!(info_field(&mut c, "persistence", "aof_enabled") == "1", "AOF still enabled after restart");
    // PEXPIRETIME must be identical (docs: the replicated deadline is the
    // lease). A 1 ms difference here means the module's propagated deadline
    // (LOCK.APPLY / PEXPIREAT) was computed from a different clock reading
    // than the expire it set locally.
    let after: Vec<Snapshot> = keys.iter().map(|k| snap(&mut c, k)).collect();
    for ((k, b), a) in keys.iter().zip(&before).zip(&after) {
        assert_eq!(a, b, "lock {k} after AOF restart (preamble {pre})");
    }
    assert!(!exists(&mut c, b"k2"), "k2 was released after the rewrite");
    assert!(!exists(&mut c, b"k5"), "k5 was released after the rewrite");
    let next = grant(&mut c, "next", "o", 1000);
    assert!(next > f4, "next token {next} after AOF restart must exceed every issued token ({f4})");
    // Loaded locks still enforce ownership.
    assert_eq!(acquire(&mut c, b"k4", b"mallory", 1000), None);
    assert_eq!(acquire(&mut c, b"k4", b"dave", 600_000), Some(f2));
}

#[test]
fn aof_restart_after_rewrite_with_rdb_preamble() {
    aof_roundtrip(true);
}

#[test]
fn aof_restart_after_rewrite_without_rdb_preamble() {
    aof_roundtrip(false);
}

#[test]
fn aof_preamble_carries_counter_of_released_locks() {
    let mut s = Server::start_with(&["--appendonly", "yes", "--aof-use-rdb-preamble", "yes"]);
    let mut c = s.conn();
    wait_aof_rewrite_idle(&mut c);
    let f = far_future_token();
    assert_eq!(acquire_fence(&mut c, b"gone", b"o", 600_000, f), Some(f));
    assert_eq!(release(&mut c, b"gone", b"o"), 1);
    // After the rewrite the only record of `f` is the counter in the preamble.
    bgrewriteaof(&mut c);
    drop(c);
    s.restart();
    let mut c = s.conn();
    let next = grant(&mut c, "next", "o", 1000);
    assert!(next > f, "next token {next} must exceed {f} (counter in the RDB preamble)");
}

#[test]
fn aof_fsync_always_survives_kill9() {
    let mut s = Server::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let mut c = s.conn();
    wait_aof_rewrite_idle(&mut c);
    let f = far_future_token();
    assert_eq!(acquire_fence(&mut c, b"k", b"alice", 600_000, f), Some(f));
    let t2 = grant(&mut c, "k2", "bob", 600_000);
    assert_eq!(extend(&mut c, b"k2", b"bob", 800_000), 1);
    let before = [snap(&mut c, "k"), snap(&mut c, "k2")];
    drop(c);
    s.kill9();
    assert!(!s.is_alive());
    s.start_again();
    let mut c = s.conn();
    assert_eq!([snap(&mut c, "k"), snap(&mut c, "k2")], before);
    let next = grant(&mut c, "n", "o", 1000);
    assert!(next > t2, "next token {next} must exceed {t2}");
}

#[test]
fn restart_without_persistence_counter_starts_at_clock() {
    let mut s = Server::start();
    let mut c = s.conn();
    let mut max = 0;
    for i in 0..50 {
        max = max.max(grant(&mut c, &format!("k{i}"), "o", 600_000));
    }
    drop(c);
    s.stop();
    let at_restart = now_unix_us();
    s.start_again();
    let mut c = s.conn();
    assert_eq!(int_of(&ok_cmd(&mut c, &cmd("DBSIZE")), "DBSIZE"), 0, "no persistence: empty");
    let next = grant(&mut c, "k0", "o", 1000);
    assert!(next >= at_restart, "token {next} must be >= Unix µs at restart {at_restart}");
    assert!(next > max, "token {next} must exceed every earlier token ({max})");
}

#[test]
fn dump_restore_to_second_server() {
    let s1 = Server::start();
    let s2 = Server::start();
    let mut c1 = s1.conn();
    let mut c2 = s2.conn();
    let big = far_future_token();
    let owner: &[u8] = b"own\x00er\xff";
    assert_eq!(acquire_fence(&mut c1, b"k", owner, 600_000, big), Some(big));
    let payload = match ok_cmd(&mut c1, cmd("DUMP").arg("k")) {
        Value::BulkString(b) => b,
        other => panic!("DUMP of a lock: {other:?}"),
    };
    ok_cmd(&mut c2, cmd("RESTORE").arg("k").arg(50_000).arg(&payload));
    let i = info(&mut c2, b"k").expect("restored lock");
    assert_eq!(i.owner, owner);
    assert_eq!(i.token, big);
    let p = pttl(&mut c2, b"k");
    assert!(p > 0 && p <= 50_000, "RESTORE ttl 50000 sets the lease, PTTL {p}");
    // Without a TTL.
    ok_cmd(&mut c2, cmd("RESTORE").arg("k0").arg(0).arg(&payload));
    assert_eq!(info(&mut c2, b"k0").expect("restored k0").pttl, -1);
    // The restored token raised the second server's counter.
    let next = grant(&mut c2, "other", "o", 1000);
    assert!(next > big, "second server's next token {next} must exceed restored {big}");
    // Restored lock enforces ownership.
    assert_eq!(acquire(&mut c2, b"k", b"mallory", 1000), None);
    assert_eq!(release(&mut c2, b"k", owner), 1);
    // RESTORE onto an existing key without REPLACE is refused.
    let e = expect_err(&mut c2, cmd("RESTORE").arg("k0").arg(0).arg(&payload));
    assert!(e.starts_with("BUSYKEY"), "{e}");
}

#[test]
fn copy_gives_identical_lock() {
    let s = Server::start();
    let mut c = s.conn();
    let t = grant(&mut c, "k", "alice", 600_000);
    assert_eq!(int_of(&ok_cmd(&mut c, cmd("COPY").arg("k").arg("k2")), "COPY"), 1);
    let a = snap(&mut c, "k");
    let b = snap(&mut c, "k2");
    assert_eq!(b.owner, b"alice");
    assert_eq!(b.token, t);
    assert_eq!(a.pexpiretime, b.pexpiretime, "COPY keeps the TTL");
    // Independent values: releasing the copy leaves the original.
    assert_eq!(release(&mut c, b"k2", b"alice"), 1);
    assert_eq!(snap(&mut c, "k"), a);
    // COPY to another db.
    assert_eq!(int_of(&ok_cmd(&mut c, cmd("COPY").arg("k").arg("k").arg("DB").arg(1)), "COPY DB"), 1);
    let mut c1 = s.conn();
    ok_cmd(&mut c1, cmd("SELECT").arg(1));
    let i = info(&mut c1, b"k").expect("copy in db 1");
    assert_eq!((i.owner.as_slice(), i.token), (&b"alice"[..], t));
}
