//! The module half of resizing a quorum semaphore (issue 61): a
//! semaphore keeps the largest limit in force since it was created
//! (`LOCK.RESIZE` raises it, nothing lowers it while the key lives), a
//! strict set request (`LOCK.MACQUIRE ... SEMAPHORE n LARGEST m`) is
//! granted only on a free record or one whose (limit, largest) is (n, m),
//! and is otherwise refused with `LIMIT K M ...`, naming the record's; and
//! `SHARED n` holds a set's last n lock keys shared. The largest survives
//! DEBUG RELOAD, a restart, the AOF (replayed and rewritten), a replica
//! and DUMP/RESTORE.

use crate::common;

use common::dump::Dump;
use common::*;
use redis::{Connection, Value};

const TTL: i64 = 600_000;

/// `LOCK.MACQUIRE numkeys keys... owner TTL options...` → token, nil, or
/// the error text.
fn macquire(c: &mut Connection, keys: &[&str], owner: &str, options: &[&str]) -> Result<Option<i64>, String> {
    let mut r = cmd("LOCK.MACQUIRE");
    r.arg(keys.len()).arg(keys).arg(owner).arg(TTL).arg(options);
    match try_cmd(c, &r)? {
        Value::Nil => Ok(None),
        Value::Int(t) => Ok(Some(t)),
        other => panic!("LOCK.MACQUIRE {keys:?}: {other:?}"),
    }
}

/// A strict permit hold: `slots`, then `record`, `SEMAPHORE limit LARGEST
/// largest`.
fn strict(c: &mut Connection, slots: &[&str], record: &str, owner: &str, limit: u32, largest: u32) -> Result<Option<i64>, String> {
    let mut keys = slots.to_vec();
    keys.push(record);
    macquire(c, &keys, owner, &["SEMAPHORE", &limit.to_string(), "LARGEST", &largest.to_string()])
}

/// A plain permit hold (`SEMAPHORE limit`, no LARGEST).
fn plain(c: &mut Connection, slots: &[&str], record: &str, owner: &str, limit: u32) -> Result<Option<i64>, String> {
    let mut keys = slots.to_vec();
    keys.push(record);
    macquire(c, &keys, owner, &["SEMAPHORE", &limit.to_string()])
}

fn limit_error(limit: u32, largest: u32) -> String {
    format!("LIMIT {limit} {largest} semaphore resized: ask with SEMAPHORE {limit} LARGEST {largest}")
}

fn resize(c: &mut Connection, key: &str, limit: i64) {
    assert!(matches!(ok_cmd(c, cmd("LOCK.RESIZE").arg(key).arg(limit)), Value::Int(_)), "LOCK.RESIZE {key} {limit}");
}

fn dump_shape(c: &mut Connection, key: &str) -> u64 {
    match ok_cmd(c, cmd("DUMP").arg(key)) {
        Value::BulkString(b) => Dump::parse(&b).fields[0].int(),
        other => panic!("DUMP {key}: {other:?}"),
    }
}

/// The limit LOCK.INFO gives for `key` and how many hold it.
fn limit_and_holders(c: &mut Connection, key: &str) -> (i64, usize) {
    let fields = info_fields(ok_cmd(c, cmd("LOCK.INFO").arg(key))).unwrap_or_else(|| panic!("{key} is held"));
    (int_of(&fields[5].1, "limit"), holder_rows_of(&fields).len())
}

/// The mode LOCK.INFO gives for `key` ("exclusive" or "shared"), and its
/// holders' owners, sorted.
fn mode_and_owners(c: &mut Connection, key: &str) -> (String, Vec<String>) {
    let fields = info_fields(ok_cmd(c, cmd("LOCK.INFO").arg(key))).unwrap_or_else(|| panic!("{key} is held"));
    let mode = match &fields[4].1 {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        other => panic!("mode: {other:?}"),
    };
    let mut owners: Vec<String> = holder_rows_of(&fields).into_iter().map(|h| String::from_utf8_lossy(&h.owner).into_owned()).collect();
    owners.sort();
    (mode, owners)
}

/// `record` is a semaphore whose (limit, largest) is exactly (limit,
/// largest): a strict request naming anything else is refused with them,
/// taking nothing (its slot stays free), and the value is saved as the
/// shape the largest asks for. Only the refusal is asked for, so a
/// replica can be checked too (it refuses a write first: READONLY).
fn assert_largest(c: &mut Connection, record: &str, limit: u32, largest: u32, what: &str) {
    let free_slot = format!("{record}:probe");
    for (l, m) in [(largest, largest), (limit, limit + 1), (limit.saturating_sub(1).max(1), largest + 1)] {
        if (l, m) == (limit, largest) {
            continue;
        }
        let asked = strict(c, &[&free_slot], record, "probe", l, m);
        if largest == limit && l != limit {
            // Never resized (every caller's record with largest == limit
            // is): another limit is the wrong kind, not terms to learn.
            assert!(asked.as_ref().is_err_and(|e| e.starts_with("ERR wrong lock kind")), "{what}: asked ({l}, {m}): {asked:?}");
            continue;
        }
        assert_eq!(asked, Err(limit_error(limit, largest)), "{what}: asked ({l}, {m})");
    }
    assert!(!exists(c, free_slot.as_bytes()), "{what}: a refused set takes nothing");
    assert_eq!(limit_and_holders(c, record).0, i64::from(limit), "{what}");
    if largest > limit {
        assert_eq!(dump_head(c, record), [6, u64::from(limit), u64::from(largest)], "{what}: saved with its largest");
    }
}

/// Shape, limit and resized mark of a semaphore's DUMP.
fn dump_head(c: &mut Connection, key: &str) -> Vec<u64> {
    match ok_cmd(c, cmd("DUMP").arg(key)) {
        Value::BulkString(b) => Dump::parse(&b).fields[..3].iter().map(|f| f.int()).collect(),
        other => panic!("DUMP {key}: {other:?}"),
    }
}

/// Holders under limit 5 on slots 0, 3 and 4, then the record shrunk to 2.
fn shrunk_from_five(c: &mut Connection) {
    for (owner, slot) in [("a", "p0"), ("b", "p3"), ("c", "p4")] {
        plain(c, &[slot], "rec", owner, 5).expect("no error").expect("a permit of 5");
    }
    resize(c, "rec", 2);
}

#[test]
fn largest_is_refused_with_the_limit_in_force_after_a_shrink_and_a_growth() {
    let s = Server::start();
    let mut c = s.conn();
    shrunk_from_five(&mut c);
    assert_eq!(strict(&mut c, &["p1"], "rec", "n", 5, 5), Err(limit_error(2, 5)), "the old limit");
    assert_eq!(strict(&mut c, &["p1"], "rec", "n", 2, 2), Err(limit_error(2, 5)), "the new limit without its largest");
    assert!(!exists(&mut c, b"p1"), "nothing taken");
    assert_eq!(limit_and_holders(&mut c, "rec"), (2, 3));
    // Growth past the largest: the largest follows.
    resize(&mut c, "rec", 7);
    assert_eq!(strict(&mut c, &["p1"], "rec", "n", 2, 5), Err(limit_error(7, 7)));
    let t = strict(&mut c, &["p1"], "rec", "n", 7, 7).expect("no error").expect("granted: it names the record's");
    assert_eq!(info(&mut c, b"p1").map(|i| i.token), Some(t));
    // A shrink below keeps 7 as the largest (4 of 5 taken: one free).
    resize(&mut c, "rec", 5);
    assert_eq!(strict(&mut c, &["p2"], "rec", "m", 5, 5), Err(limit_error(5, 7)));
    assert!(strict(&mut c, &["p2"], "rec", "m", 5, 7).expect("no error").is_some());
    // An unresized record of another limit is the wrong kind (two limits
    // side by side are a mistake to report); of its own limit with another
    // largest, it names itself; its own terms are granted.
    plain(&mut c, &["q0"], "other", "a", 3).expect("no error").expect("a permit of 3");
    let e = strict(&mut c, &["q1"], "other", "b", 4, 4).expect_err("wrong kind");
    assert!(e.starts_with("ERR wrong lock kind"), "{e}");
    assert_eq!(strict(&mut c, &["q1"], "other", "b", 3, 4), Err(limit_error(3, 3)));
    assert!(strict(&mut c, &["q1"], "other", "b", 3, 3).expect("no error").is_some());
    // Without LARGEST, nothing changed: another limit is the wrong kind.
    let e = plain(&mut c, &["q2"], "other", "c", 4).expect_err("wrong kind");
    assert!(e.starts_with("ERR wrong lock kind"), "{e}");
    // Malformed: LARGEST below the limit, above 100000, without SEMAPHORE.
    let bad = "ERR LARGEST must be an integer from the SEMAPHORE limit to 100000";
    assert_eq!(strict(&mut c, &["z0"], "zrec", "x", 3, 2), Err(bad.to_string()));
    assert_eq!(strict(&mut c, &["z0"], "zrec", "x", 3, 100_001), Err(bad.to_string()));
    let e = macquire(&mut c, &["z0", "z1"], "x", &["LARGEST", "3"]).expect_err("LARGEST needs SEMAPHORE");
    assert_eq!(e, "ERR syntax error: LARGEST needs SEMAPHORE (LOCK.MACQUIRE)");
    assert!(!exists(&mut c, b"zrec") && !exists(&mut c, b"z0"));
}

#[test]
fn a_free_record_taken_with_a_largest_above_its_limit_is_resized() {
    let s = Server::start();
    let mut c = s.conn();
    strict(&mut c, &["s0"], "rec", "a", 2, 5).expect("no error").expect("free");
    assert_largest(&mut c, "rec", 2, 5, "created");
    // Resized: a plain request with any LIMIT is served under 2.
    assert!(plain(&mut c, &["s1"], "rec", "b", 3).expect("served under 2, not the wrong kind").is_some());
    assert_eq!(plain(&mut c, &["s2"], "rec", "c", 9).expect("no error"), None, "2 of 2 taken");
    assert_eq!(limit_and_holders(&mut c, "rec"), (2, 2));
    // The mark goes with the last holder: the next request makes a new one.
    assert_eq!(mrelease(&mut c, &["s0", "rec"], "a"), 2);
    assert_eq!(mrelease(&mut c, &["s1", "rec"], "b"), 2);
    assert!(!exists(&mut c, b"rec"));
    strict(&mut c, &["s0"], "rec", "d", 3, 3).expect("no error").expect("free again");
    assert_largest(&mut c, "rec", 3, 3, "made again, unresized");
    assert_eq!(dump_shape(&mut c, "rec"), 1, "an unresized semaphore keeps its old shape");
}

/// The record of `shrunk_from_five` (limit 2, largest 5), and one a strict
/// request created (limit 2, largest 4).
fn two_records(c: &mut Connection) {
    shrunk_from_five(c);
    strict(c, &["t0"], "made", "m", 2, 4).expect("no error").expect("free");
}

fn assert_two_records(c: &mut Connection, what: &str) {
    assert_largest(c, "rec", 2, 5, what);
    assert_eq!(limit_and_holders(c, "rec"), (2, 3), "{what}: the holders stay");
    assert_largest(c, "made", 2, 4, what);
}

#[test]
fn the_largest_survives_reload_restart_and_restore() {
    let mut s = Server::start();
    let mut c = s.conn();
    two_records(&mut c);
    assert_two_records(&mut c, "before");
    ok_cmd(&mut c, cmd("DEBUG").arg("RELOAD"));
    assert_two_records(&mut c, "DEBUG RELOAD");
    ok_cmd(&mut c, &cmd("SAVE"));
    drop(c);
    s.restart();
    let mut c = s.conn();
    assert_two_records(&mut c, "RDB restart");
    // DUMP/RESTORE carries it; a mark naming no largest above the limit is
    // refused.
    let payload = match ok_cmd(&mut c, cmd("DUMP").arg("rec")) {
        Value::BulkString(b) => b,
        other => panic!("DUMP: {other:?}"),
    };
    ok_cmd(&mut c, cmd("RESTORE").arg("copy").arg(0).arg(&payload));
    assert_largest(&mut c, "copy", 2, 5, "RESTORE");
    let d = Dump::parse(&payload);
    assert_eq!(d.fields[..3].iter().map(|f| f.int()).collect::<Vec<_>>(), [6, 2, 5], "shape 6: limit, then the mark");
    let mut unsound = d.clone();
    unsound.fields[2] = common::dump::Field::Int(2);
    let e = expect_err(&mut c, cmd("RESTORE").arg("x").arg(0).arg(unsound.payload()));
    assert!(e.contains("Bad data format"), "{e}");
    assert!(s.log_text().contains("largest limit 2 of LIMIT 2"), "{}", s.log_tail(10));
    assert!(!exists(&mut c, b"x"));
}

fn aof_keeps_the_largest(preamble: &str) {
    let mut s = Server::start_with(&["--appendonly", "yes", "--aof-use-rdb-preamble", preamble]);
    let mut c = s.conn();
    two_records(&mut c);
    wait_aof_flushed(&mut c);
    drop(c);
    s.restart();
    let mut c = s.conn();
    assert_two_records(&mut c, &format!("AOF replayed (preamble {preamble})"));
    bgrewriteaof(&mut c);
    drop(c);
    s.restart();
    let mut c = s.conn();
    assert_two_records(&mut c, &format!("AOF rewritten (preamble {preamble})"));
    assert!(!s.log_text().contains("refused a"), "nothing refused:\n{}", s.log_tail(20));
}

#[test]
fn the_aof_replays_and_rewrites_the_largest() {
    aof_keeps_the_largest("no");
    aof_keeps_the_largest("yes");
}

#[test]
fn a_replica_keeps_the_largest() {
    let master = Server::start();
    let replica = Server::start();
    let mut m = master.conn();
    shrunk_from_five(&mut m);
    attach_replica(&master, &replica);
    let mut r = replica.conn();
    // A replica refuses the write before it looks at the record: compare
    // what it stores with the master's instead (the digest: limit, mark,
    // largest, holders; the DUMP's head: shape, limit, mark).
    let digest = |c: &mut Connection, key: &str| ok_cmd(c, cmd("DEBUG").arg("DIGEST-VALUE").arg(key));
    assert_eq!(digest(&mut r, "rec"), digest(&mut m, "rec"), "full sync");
    assert_eq!(dump_head(&mut r, "rec"), [6, 2, 5], "full sync");
    // Streamed: a strict request creating a record, and resizes.
    strict(&mut m, &["t0"], "made", "m", 2, 4).expect("no error").expect("free");
    resize(&mut m, "rec", 3);
    wait1(&mut m);
    assert_largest(&mut m, "rec", 3, 5, "master");
    assert_largest(&mut m, "made", 2, 4, "master");
    for (key, head) in [("rec", [6, 3, 5]), ("made", [6, 2, 4])] {
        assert_eq!(digest(&mut r, key), digest(&mut m, key), "{key} streamed");
        assert_eq!(dump_head(&mut r, key), head, "{key} streamed");
    }
}

/// Issue 61's shrink through the quorum, on one server: holders under
/// limit 5 on slots 0, 3 and 4; the record resized to 2; a new holder asks
/// slot 1 exclusively, slots 2 to 4 shared and the record `SEMAPHORE 2
/// LARGEST 5`: refused while slots 3 and 4 are held, granted once they are
/// released; a client still asking under 5 learns the limit from the
/// refusal, and an old-limit request for a slot the new holder shares is
/// held back.
#[test]
fn the_quorum_shrink_in_miniature() {
    let s = Server::start();
    let mut c = s.conn();
    shrunk_from_five(&mut c);
    let new_holder =
        |c: &mut Connection| macquire(c, &["p1", "p2", "p3", "p4", "rec"], "n", &["SHARED", "3", "SEMAPHORE", "2", "LARGEST", "5"]);
    assert_eq!(new_holder(&mut c), Ok(None), "slots 3 and 4 are held");
    for key in ["p1", "p2"] {
        assert!(!exists(&mut c, key.as_bytes()), "nothing taken: {key}");
    }
    assert_eq!(mrelease(&mut c, &["p3", "rec"], "b"), 2);
    assert_eq!(new_holder(&mut c), Ok(None), "slot 4 is still held");
    assert_eq!(mrelease(&mut c, &["p4", "rec"], "c"), 2);
    let t = new_holder(&mut c).expect("no error").expect("granted once slots 3 and 4 are free");
    assert_eq!(mode_and_owners(&mut c, "p1"), ("exclusive".to_string(), vec!["n".to_string()]));
    for key in ["p2", "p3", "p4"] {
        assert_eq!(mode_and_owners(&mut c, key), ("shared".to_string(), vec!["n".to_string()]), "{key}");
        assert_eq!(holder_rows(&mut c, key).first().and_then(|h| h.token), Some(t), "one token for the set");
    }
    assert_eq!(limit_and_holders(&mut c, "rec"), (2, 2));
    // A client that has not learnt the shrink.
    assert_eq!(strict(&mut c, &["p3"], "rec", "old", 5, 5), Err(limit_error(2, 5)));
    // An old-limit exclusive request for a slot the new holder shares.
    mrelease(&mut c, &["p0", "rec"], "a");
    assert_eq!(plain(&mut c, &["p3"], "rec", "old", 5), Ok(None), "p3 is held shared by n");
    assert_eq!(mode_and_owners(&mut c, "p3").1, ["n"]);
}

#[test]
fn shared_n_holds_the_last_keys_shared() {
    let s = Server::start();
    let mut c = s.conn();
    let x = macquire(&mut c, &["a1", "s1", "s2"], "x", &["SHARED", "2"]).expect("no error").expect("free");
    let y = macquire(&mut c, &["b1", "s1", "s2"], "y", &["SHARED", "2"]).expect("no error").expect("the shared keys shared");
    assert!(y > x);
    assert_eq!(mode_and_owners(&mut c, "a1"), ("exclusive".to_string(), vec!["x".to_string()]));
    for key in ["s1", "s2"] {
        assert_eq!(mode_and_owners(&mut c, key), ("shared".to_string(), vec!["x".to_string(), "y".to_string()]), "{key}");
    }
    // An exclusive request on a shared key is held back, nothing taken.
    assert_eq!(acquire(&mut c, b"s1", b"e", TTL), None);
    assert_eq!(macquire(&mut c, &["e1", "s2"], "e", &[]), Ok(None));
    assert!(!exists(&mut c, b"e1"));
    // An exclusive key of the set refuses another set sharing it.
    assert_eq!(macquire(&mut c, &["c1", "a1"], "z", &["SHARED", "1"]), Ok(None), "a1 is x's exclusively");
    // An exclusive holder of a would-be shared key refuses the set.
    acquire(&mut c, b"h1", b"holder", TTL).expect("free");
    assert_eq!(macquire(&mut c, &["d1", "h1"], "w", &["SHARED", "1"]), Ok(None));
    assert!(!exists(&mut c, b"d1"));
    // An exclusive waiter on a shared key holds back later shared sets.
    let mut waiter = waiter(&s, std::time::Duration::from_secs(20));
    send_cmd(&mut waiter, cmd("LOCK.ACQUIRE").arg("s2").arg("w").arg(TTL).arg("WAIT").arg(20_000));
    wait_waiters(&mut c, b"s2", 1);
    assert_eq!(macquire(&mut c, &["f1", "s2"], "v", &["SHARED", "1"]), Ok(None), "w waits first in s2's line");
    // Extend and release by the same keys; the waiter gets s2 then.
    assert_eq!(int_of(&ok_cmd(&mut c, cmd("LOCK.MEXTEND").arg(3).arg(&["a1", "s1", "s2"]).arg("x").arg(TTL)), "MEXTEND"), 3);
    assert_eq!(mrelease(&mut c, &["a1", "s1", "s2"], "x"), 3);
    assert_eq!(mrelease(&mut c, &["b1", "s1", "s2"], "y"), 3);
    recv_token(&mut waiter, "w").expect("s2 to the exclusive waiter");
    assert_eq!(mode_and_owners(&mut c, "s2"), ("exclusive".to_string(), vec!["w".to_string()]));
    // At least one key exclusive, the semaphore not counted.
    let count = "ERR SHARED n must be from 1 to the number of lock keys less one: at least one key is held exclusively";
    assert_eq!(macquire(&mut c, &["g1", "g2"], "x", &["SHARED", "2"]), Err(count.to_string()));
    assert_eq!(macquire(&mut c, &["g1", "grec"], "x", &["SHARED", "1", "SEMAPHORE", "2"]), Err(count.to_string()));
    let e = expect_err(&mut c, cmd("LOCK.ACQUIRE").arg("g1").arg("x").arg(TTL).arg("SHARED").arg(1));
    assert_eq!(e, "ERR SHARED n belongs to LOCK.MACQUIRE (one key: SHARED)");
    assert!(!exists(&mut c, b"g1"));
}

/// Each key of a `SHARED n` set travels as the lock it is: a replica and a
/// reload show the same modes and holders.
#[test]
fn shared_n_reaches_a_replica_and_survives_a_reload() {
    let master = Server::start();
    let replica = Server::start();
    attach_replica(&master, &replica);
    let mut m = master.conn();
    macquire(&mut m, &["a1", "s1", "s2"], "x", &["SHARED", "2"]).expect("no error").expect("free");
    macquire(&mut m, &["b1", "s1", "s2"], "y", &["SHARED", "2"]).expect("no error").expect("shared");
    macquire(&mut m, &["k0", "k1", "krec"], "z", &["SHARED", "1", "SEMAPHORE", "3", "LARGEST", "3"]).expect("no error").expect("free");
    wait1(&mut m);
    let mut r = replica.conn();
    let keys = ["a1", "b1", "s1", "s2", "k0", "k1", "krec"];
    let expected: Vec<_> = keys.iter().map(|k| mode_and_owners(&mut m, k)).collect();
    assert_eq!(expected[2], ("shared".to_string(), vec!["x".to_string(), "y".to_string()]));
    assert_eq!(expected[4].0, "exclusive");
    assert_eq!(expected[5].0, "shared");
    let seen: Vec<_> = keys.iter().map(|k| mode_and_owners(&mut r, k)).collect();
    assert_eq!(seen, expected, "the replica");
    ok_cmd(&mut m, cmd("DEBUG").arg("RELOAD"));
    let reloaded: Vec<_> = keys.iter().map(|k| mode_and_owners(&mut m, k)).collect();
    assert_eq!(reloaded, expected, "DEBUG RELOAD");
}

/// A waiting `SHARED n` set is granted with its keys' modes. (A waiting
/// strict set a resize concerns: the next test.)
#[test]
fn a_waiting_shared_n_set_is_granted_with_its_keys_modes() {
    let s = Server::start();
    let mut c = s.conn();
    acquire(&mut c, b"q1", b"e", TTL).expect("free");
    let mut v = waiter(&s, std::time::Duration::from_secs(20));
    send_cmd(&mut v, cmd("LOCK.MACQUIRE").arg(2).arg("q0").arg("q1").arg("v").arg(TTL).arg(&["SHARED", "1", "WAIT", "20000"][..]));
    wait_waiters(&mut c, b"q1", 1);
    assert_eq!(release(&mut c, b"q1", b"e"), 1);
    let t = recv_token(&mut v, "the waiting SHARED 1 set").expect("granted");
    assert_eq!(mode_and_owners(&mut c, "q0"), ("exclusive".to_string(), vec!["v".to_string()]));
    assert_eq!(mode_and_owners(&mut c, "q1"), ("shared".to_string(), vec!["v".to_string()]));
    assert_eq!(holder_rows(&mut c, "q1").first().and_then(|h| h.token), Some(t));
    // Shared: another shared holder joins it.
    assert!(macquire(&mut c, &["q2", "q1"], "x", &["SHARED", "1"]).expect("no error").is_some());
}

/// A resize answers at once every set waiting strictly under the terms it
/// changed, with the new ones (`LIMIT K M`), and takes it out of its
/// lines: left there, it would hold back whoever waits behind it until its
/// locks moved or its WAIT ended. A set waiting without `LARGEST` is
/// served under any limit of a resized semaphore and keeps its place.
#[test]
fn a_resize_refuses_the_sets_waiting_under_the_old_terms_at_once() {
    let s = Server::start();
    let mut c = s.conn();
    strict(&mut c, &["p0"], "rec", "a", 3, 3).expect("no error").expect("free");
    strict(&mut c, &["p1"], "rec", "b", 3, 3).expect("no error").expect("a second permit");
    let mut w = waiter(&s, std::time::Duration::from_secs(20));
    send_cmd(
        &mut w,
        cmd("LOCK.MACQUIRE").arg(2).arg("p0").arg("rec").arg("w").arg(TTL).arg(&["SEMAPHORE", "3", "LARGEST", "3", "WAIT", "60000"][..]),
    );
    wait_waiters(&mut c, b"p0", 1);
    let mut z = waiter(&s, std::time::Duration::from_secs(20));
    send_cmd(&mut z, cmd("LOCK.MACQUIRE").arg(2).arg("p0").arg("rec").arg("z").arg(TTL).arg(&["SEMAPHORE", "3", "WAIT", "60000"][..]));
    wait_waiters(&mut c, b"p0", 2);

    resize(&mut c, "rec", 2);
    // Before anything moves: p0 is still held by a.
    let refused = recv_reply(&mut w, "the strict set waiting under (3, 3)").expect_err("refused at the resize");
    assert_eq!(refused, limit_error(2, 3));
    assert_eq!(waiters(&mut c, b"p0"), 1, "the plain set keeps its place");
    assert_eq!(mode_and_owners(&mut c, "p0"), ("exclusive".to_string(), vec!["a".to_string()]), "nothing granted by the refusal");

    assert_eq!(mrelease(&mut c, &["p0", "rec"], "a"), 2);
    let t = recv_token(&mut z, "the plain set").expect("granted at the release");
    assert_eq!(holder_rows(&mut c, "p0").first().and_then(|h| h.token), Some(t));
    assert_eq!(limit_and_holders(&mut c, "rec"), (2, 2));
}

/// A strict request's `SHARED` members are the semaphore's guards (its
/// permits from the limit in force up to the largest) and a waiting set
/// stands in no guard's line: a set waiting for a permit still held does
/// not hold back the requests for the other permits, which ask the same
/// guards. A set a guard keeps out (held exclusively, by a holder granted
/// above the limit) is granted once that holder leaves.
#[test]
fn a_set_waiting_for_a_held_permit_holds_no_other_permit_back_on_the_guards() {
    let s = Server::start();
    let mut c = s.conn();
    let strict_shared = |c: &mut Connection, slots: &[&str], owner: &str, wait: Option<&mut Connection>| {
        let mut keys = slots.to_vec();
        keys.extend(["s3", "rec"]);
        let mut r = cmd("LOCK.MACQUIRE");
        r.arg(keys.len()).arg(&keys).arg(owner).arg(TTL).arg(&["SHARED", "1", "SEMAPHORE", "3", "LARGEST", "4"][..]);
        match wait {
            Some(w) => {
                r.arg("WAIT").arg(10_000);
                send_cmd(w, &r);
                None
            }
            None => Some(try_cmd(c, &r)),
        }
    };
    assert!(matches!(strict_shared(&mut c, &["s0"], "keeper", None), Some(Ok(Value::Int(_)))), "the keeper takes permit 0");
    assert_largest(&mut c, "rec", 3, 4, "created under (3, 4)");
    let mut a = waiter(&s, std::time::Duration::from_secs(20));
    strict_shared(&mut c, &["s0"], "a", Some(&mut a));
    wait_waiters(&mut c, b"s0", 1);
    assert_eq!(waiters(&mut c, b"s3"), 0, "the waiting set stands in no guard's line");
    assert!(matches!(strict_shared(&mut c, &["s1"], "b", None), Some(Ok(Value::Int(_)))), "permit 1 granted beside a waiter for 0");
    let mut w = waiter(&s, std::time::Duration::from_secs(20));
    strict_shared(&mut c, &["s2"], "c", Some(&mut w));
    recv_token(&mut w, "a waiting request for permit 2").expect("granted at once");
    assert_eq!(waiters(&mut c, b"s0"), 1, "the waiter for permit 0 still waits");
    assert_eq!(mrelease(&mut c, &["s0", "s3", "rec"], "keeper"), 3);
    recv_token(&mut a, "the waiter for permit 0").expect("granted at the keeper's release");

    // A guard held exclusively, by a holder granted under the larger limit.
    strict(&mut c, &["g3"], "grec", "x", 4, 4).expect("no error").expect("free");
    resize(&mut c, "grec", 3);
    let mut d = waiter(&s, std::time::Duration::from_secs(20));
    send_cmd(
        &mut d,
        cmd("LOCK.MACQUIRE")
            .arg(3)
            .arg(&["g1", "g3", "grec"][..])
            .arg("d")
            .arg(TTL)
            .arg(&["SHARED", "1", "SEMAPHORE", "3", "LARGEST", "4", "WAIT", "10000"][..]),
    );
    wait_until(std::time::Duration::from_secs(10), "the set blocked", || blocked_clients(&mut c) == 1);
    assert_eq!(mrelease(&mut c, &["g3", "grec"], "x"), 2);
    let t = recv_token(&mut d, "the set the guard kept out").expect("granted once the holder above the limit left");
    assert_eq!(holder_rows(&mut c, "g3").first().and_then(|h| h.token), Some(t));
}
