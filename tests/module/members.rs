//! Group membership (issue 61): members join a group with a shared,
//! session-bound hold that carries their value (an address), LOCK.INFO
//! lists every member with its token and value in one call, and joins and
//! leaves are lifecycle events. Each holder's value is its own: kept by a
//! re-grant without VALUE, replaced by one with, set by LOCK.PROCLAIM, gone
//! with the hold, and kept by the RDB, the AOF and replicas.

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::dump::{Dump, Field};
use common::*;
use redis::{Connection, PubSub, Value};

/// (owner, token, permits, session, value) of each holder LOCK.INFO
/// lists, sorted by owner.
type Row = (String, i64, i64, bool, Option<Vec<u8>>);

fn members(c: &mut Connection, key: &str) -> Vec<Row> {
    let mut rows: Vec<Row> = holder_rows(c, key)
        .into_iter()
        .map(|h| (String::from_utf8_lossy(&h.owner).into_owned(), h.token.expect("a token"), h.permits, h.session, h.value))
        .collect();
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    rows
}

/// What persistence and replication must keep of a group: its rows without
/// the session flag (a binding belongs to a connection of this server).
fn kept(c: &mut Connection, key: &str) -> Vec<(String, i64, i64, Option<Vec<u8>>)> {
    members(c, key).into_iter().map(|(o, t, k, _, v)| (o, t, k, v)).collect()
}

fn join(c: &mut Connection, key: &str, owner: &str, extra: &[&str]) -> i64 {
    let mut acq = cmd("LOCK.ACQUIRE");
    acq.arg(key).arg(owner).arg(600_000).arg("SHARED");
    for a in extra {
        acq.arg(*a);
    }
    int_of(&ok_cmd(c, &acq), "a member's grant")
}

fn proclaim(c: &mut Connection, key: &str, owner: &str, value: &[u8]) -> i64 {
    int_of(&ok_cmd(c, cmd("LOCK.PROCLAIM").arg(key).arg(owner).arg(value)), "LOCK.PROCLAIM")
}

fn v(text: &str) -> Option<Vec<u8>> {
    Some(text.as_bytes().to_vec())
}

fn dump_fields(c: &mut Connection, key: &str) -> Vec<Field> {
    match ok_cmd(c, cmd("DUMP").arg(key)) {
        Value::BulkString(b) => Dump::parse(&b).fields,
        other => panic!("DUMP {key}: {other:?}"),
    }
}

/// Every lock channel of database 0, read in order.
fn events(con: &mut Connection) -> PubSub<'_> {
    con.set_read_timeout(Some(Duration::from_secs(10))).expect("read timeout");
    let mut sub = con.as_pubsub();
    sub.psubscribe("__redislock@0__:*").expect("psubscribe");
    sub
}

/// The next announcement: (key, message).
fn next(sub: &mut PubSub<'_>) -> (String, String) {
    let m = sub.get_message().expect("an announcement within 10 s");
    let channel = m.get_channel_name().to_string();
    let key = channel.strip_prefix("__redislock@0__:").unwrap_or(&channel).to_string();
    (key, String::from_utf8_lossy(m.get_payload_bytes()).into_owned())
}

/// `KIND TOKEN OWNER-LENGTH OWNER VALUE`.
fn msg(kind: &str, token: i64, owner: &str, value: &str) -> String {
    format!("{kind} {token} {} {owner} {value}", owner.len())
}

#[test]
fn members_join_with_values_and_info_lists_each_with_its_token() {
    let s = Server::start();
    let mut c = s.conn();
    let ta = join(&mut c, "group", "a", &["SESSION", "VALUE", "10.0.0.1:80"]);
    let tb = join(&mut c, "group", "b", &["VALUE", "bin\x00\r\n"]);
    let tc = join(&mut c, "group", "c", &[]);
    assert_eq!(
        members(&mut c, "group"),
        vec![("a".into(), ta, 1, true, v("10.0.0.1:80")), ("b".into(), tb, 1, false, v("bin\x00\r\n")), ("c".into(), tc, 1, false, None),],
        "every member with its token and value, in one call"
    );
    // A member without a value has the six items it always had; the
    // group's own value stays nil.
    let fields = info_fields(ok_cmd(&mut c, cmd("LOCK.INFO").arg("group"))).expect("held");
    let Value::Array(rows) = &fields[6].1 else { panic!("holders: {fields:?}") };
    let lens: Vec<usize> = rows.iter().map(|r| if let Value::Array(items) = r { items.len() } else { 0 }).collect();
    assert_eq!(lens, [7, 7, 6]);
    assert_eq!(fields[8].1, Value::Nil, "a group has no single value");

    // A re-grant without VALUE keeps the value, one with replaces it: the
    // token stays either way, and no other member's value moves.
    assert_eq!(join(&mut c, "group", "b", &[]), tb);
    assert_eq!(members(&mut c, "group")[1].4, v("bin\x00\r\n"), "kept");
    assert_eq!(join(&mut c, "group", "b", &["VALUE", "10.0.0.2:80"]), tb);
    let rows = members(&mut c, "group");
    assert_eq!((rows[0].4.clone(), rows[1].4.clone(), rows[2].4.clone()), (v("10.0.0.1:80"), v("10.0.0.2:80"), None));

    // PROCLAIM sets a member's value (c had none), keeping token and lease;
    // an empty one clears it; a non-member has none to set.
    let before = members(&mut c, "group");
    assert_eq!(proclaim(&mut c, "group", "c", b"10.0.0.3:80"), 1);
    assert_eq!(members(&mut c, "group")[2], ("c".into(), tc, 1, false, v("10.0.0.3:80")));
    assert_eq!(members(&mut c, "group")[..2], before[..2], "the others unchanged");
    assert_eq!(proclaim(&mut c, "group", "b", b""), 1);
    assert_eq!(members(&mut c, "group")[1].4, None);
    assert_eq!(proclaim(&mut c, "group", "zed", b"x"), 0);
    // A session-bound member is proclaimed for from its own connection only.
    let mut other = s.conn();
    assert_eq!(proclaim(&mut other, "group", "a", b"forged"), 0);
    assert_eq!(members(&mut c, "group")[0].4, v("10.0.0.1:80"));

    // Too long a value is refused and loses nothing: not the member's old
    // value, not a new member.
    let long = vec![b'v'; 257];
    let e = expect_err(&mut c, cmd("LOCK.ACQUIRE").arg("group").arg("a").arg(1000).arg("SHARED").arg("VALUE").arg(&long[..]));
    assert_eq!(e, "ERR value is longer than redislock.max-owner-len (256 bytes)");
    let e = expect_err(&mut c, cmd("LOCK.ACQUIRE").arg("group").arg("d").arg(1000).arg("SHARED").arg("VALUE").arg(&long[..]));
    assert!(e.starts_with("ERR value is longer"), "{e}");
    let e = expect_err(&mut c, cmd("LOCK.PROCLAIM").arg("group").arg("a").arg(&long[..]));
    assert!(e.starts_with("ERR value is longer"), "{e}");
    assert_eq!(members(&mut c, "group")[0], ("a".into(), ta, 1, true, v("10.0.0.1:80")));
    assert_eq!(members(&mut c, "group").len(), 3);

    // A member leaves with LOCK.RELEASE, its value with it; joining again
    // starts without one.
    assert_eq!(release(&mut c, b"group", b"c"), 1);
    assert_eq!(members(&mut c, "group").iter().map(|r| r.0.clone()).collect::<Vec<_>>(), ["a", "b"]);
    let tc2 = join(&mut c, "group", "c", &[]);
    assert_eq!(members(&mut c, "group")[2], ("c".into(), tc2, 1, false, None), "the value left with the hold");

    // A semaphore's members too, each with its permits.
    let t1 = join(&mut c, "sem", "x", &["LIMIT", "3", "PERMITS", "2", "VALUE", "vx"]);
    let t2 = join(&mut c, "sem", "y", &["LIMIT", "3", "VALUE", "vy"]);
    assert_eq!(members(&mut c, "sem"), vec![("x".into(), t1, 2, false, v("vx")), ("y".into(), t2, 1, false, v("vy"))]);
}

/// An exclusive holder's value follows it into the group when it
/// downgrades without VALUE, and out of it when it upgrades: one hold,
/// one value.
#[test]
fn a_value_follows_a_downgrade_and_an_upgrade() {
    let s = Server::start();
    let mut c = s.conn();
    int_of(&ok_cmd(&mut c, cmd("LOCK.ACQUIRE").arg("k").arg("a").arg(600_000).arg("VALUE").arg("va")), "grant");
    let t = join(&mut c, "k", "a", &[]);
    assert_eq!(members(&mut c, "k"), vec![("a".into(), t, 1, false, v("va"))]);
    int_of(&ok_cmd(&mut c, cmd("LOCK.ACQUIRE").arg("k").arg("a").arg(600_000)), "upgrade");
    assert_eq!(value_of(&mut c, "k"), v("va"));
    join(&mut c, "k", "a", &["VALUE", "vb"]);
    assert_eq!(members(&mut c, "k")[0].4, v("vb"), "a downgrade with VALUE replaces it");
}

/// A member waiting for a full semaphore keeps its value in the line and
/// stores it at its grant, which the handoff announces with the value.
#[test]
fn a_waiting_member_joins_with_its_value() {
    let s = Server::start();
    let mut c = s.conn();
    ok_cmd(&mut c, cmd("CONFIG").arg("SET").arg("redislock.notify").arg("sem"));
    let mut sc = s.conn();
    let mut sub = events(&mut sc);
    let t1 = join(&mut c, "sem", "x", &["LIMIT", "1", "VALUE", "vx"]);
    assert_eq!(next(&mut sub), ("sem".into(), msg("grant", t1, "x", "vx")));
    let mut w = s.conn();
    send_cmd(
        &mut w,
        cmd("LOCK.ACQUIRE").arg("sem").arg("y").arg(600_000).arg("SHARED").arg("LIMIT").arg(1).arg("WAIT").arg(0).arg("VALUE").arg("vy"),
    );
    wait_waiters(&mut c, b"sem", 1);
    assert_eq!(release(&mut c, b"sem", b"x"), 1);
    let t2 = int_of(&recv_reply(&mut w, "y's grant").expect("granted"), "token");
    assert_eq!(members(&mut c, "sem"), vec![("y".into(), t2, 1, false, v("vy"))]);
    assert_eq!(next(&mut sub), ("sem".into(), msg("release", t1, "x", "")));
    assert_eq!(next(&mut sub), ("sem".into(), msg("handoff", t2, "y", "vy")));
}

/// The token `redis-cli -r -1 -i 600 LOCK.ACQUIRE ...` printed: the child
/// holds its connection (it repeats the command every 10 minutes) until
/// it is killed.
fn read_token(line: &str) -> i64 {
    line.trim().trim_start_matches("(integer) ").parse().unwrap_or_else(|_| panic!("redis-cli printed {line:?}"))
}

/// A member whose connection closes, and one whose process is killed with
/// SIGKILL, leave the group: LOCK.INFO stops listing them and a `session`
/// event announces each, in the order they left; joins are `grant`
/// events carrying the value.
#[test]
fn a_member_whose_connection_closes_or_process_dies_leaves_and_the_events_agree() {
    let s = Server::start();
    let mut c = s.conn();
    ok_cmd(&mut c, cmd("CONFIG").arg("SET").arg("redislock.notify").arg("grp:*"));
    let mut sc = s.conn();
    let mut sub = events(&mut sc);

    let mut ca = s.conn();
    let ta = join(&mut ca, "grp:g", "a", &["SESSION", "VALUE", "addr-a"]);
    assert_eq!(next(&mut sub), ("grp:g".into(), msg("grant", ta, "a", "addr-a")));

    let port = s.port.to_string();
    let mut child = Command::new("redis-cli")
        .args(["-p", &port, "-r", "-1", "-i", "600", "LOCK.ACQUIRE", "grp:g", "b", "600000", "SHARED", "SESSION", "VALUE", "addr-b"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start redis-cli");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("redis-cli's reply");
    let tb = read_token(&line);
    assert_eq!(next(&mut sub), ("grp:g".into(), msg("grant", tb, "b", "addr-b")));

    let tc = join(&mut c, "grp:g", "c", &[]);
    assert_eq!(next(&mut sub), ("grp:g".into(), msg("grant", tc, "c", "")), "a join without a value, announced as watched");
    assert_eq!(
        members(&mut c, "grp:g"),
        vec![("a".into(), ta, 1, true, v("addr-a")), ("b".into(), tb, 1, true, v("addr-b")), ("c".into(), tc, 1, false, None)]
    );

    // a's connection closes.
    drop(ca);
    assert_eq!(next(&mut sub), ("grp:g".into(), msg("session", ta, "a", "")));
    assert_eq!(members(&mut c, "grp:g").iter().map(|r| r.0.clone()).collect::<Vec<_>>(), ["b", "c"]);

    // b's process dies without a word.
    child.kill().expect("SIGKILL redis-cli");
    child.wait().expect("reaped");
    assert_eq!(next(&mut sub), ("grp:g".into(), msg("session", tb, "b", "")));
    assert_eq!(members(&mut c, "grp:g"), vec![("c".into(), tc, 1, false, None)]);

    // c leaves with LOCK.RELEASE: the last member, the key goes.
    assert_eq!(release(&mut c, b"grp:g", b"c"), 1);
    assert_eq!(next(&mut sub), ("grp:g".into(), msg("release", tc, "c", "")));
    assert!(!exists(&mut c, b"grp:g"));

    // A key no pattern matches announces a valued join and a
    // proclamation, as an exclusive lock's, and nothing of a join
    // without a value: the next message is the proclamation.
    let tx = join(&mut c, "plain", "x", &["VALUE", "vx"]);
    assert_eq!(next(&mut sub), ("plain".into(), msg("grant", tx, "x", "vx")));
    join(&mut c, "plain", "y", &[]);
    assert_eq!(proclaim(&mut c, "plain", "x", b"vx2"), 1);
    assert_eq!(next(&mut sub), ("plain".into(), msg("proclaim", tx, "x", "vx2")));
}

#[test]
fn member_values_survive_debug_reload_an_aof_rewrite_and_restarts() {
    let mut s = Server::start_with(&["--appendonly", "yes", "--aof-use-rdb-preamble", "no"]);
    let mut c = s.conn();
    wait_aof_rewrite_idle(&mut c);
    join(&mut c, "rw", "a", &["VALUE", "va\x00\u{ff}"]);
    join(&mut c, "rw", "b", &[]);
    join(&mut c, "sem", "x", &["LIMIT", "4", "PERMITS", "3", "VALUE", "vx"]);
    join(&mut c, "sem", "y", &["LIMIT", "4"]);
    join(&mut c, "bare", "z", &["LIMIT", "2"]);
    // Shapes: a group with a value is saved in the new shape (5), one
    // without keeps the shape an older module reads (1).
    assert_eq!(dump_fields(&mut c, "rw")[0].int(), 5);
    assert_eq!(dump_fields(&mut c, "sem")[0].int(), 5);
    assert_eq!(dump_fields(&mut c, "bare")[0].int(), 1);
    // A resized semaphore with a value carries its mark in the new shape.
    join(&mut c, "rs", "r", &["LIMIT", "4", "VALUE", "vr"]);
    ok_cmd(&mut c, cmd("LOCK.RESIZE").arg("rs").arg(2));
    assert_eq!(
        dump_fields(&mut c, "rs")[..3],
        [Field::Int(5), Field::Int(2), Field::Int(4)],
        "shape, limit, resized mark (its largest limit, 4)"
    );
    let keys = ["rw", "sem", "bare", "rs"];
    let before: Vec<_> = keys.iter().map(|k| kept(&mut c, k)).collect();
    assert_eq!(before[0][0].3, v("va\x00\u{ff}"));

    ok_cmd(&mut c, cmd("DEBUG").arg("RELOAD"));
    let reloaded: Vec<_> = keys.iter().map(|k| kept(&mut c, k)).collect();
    assert_eq!(reloaded, before, "after DEBUG RELOAD");
    assert_eq!(dump_fields(&mut c, "rs")[..3], [Field::Int(5), Field::Int(2), Field::Int(4)], "still resized");

    // The rewrite emits LOCK.APPLY ... SHARED ... VALUE per member; what
    // follows (a proclamation, an extension, a join) lands in the
    // incremental file.
    bgrewriteaof(&mut c);
    assert_eq!(proclaim(&mut c, "rw", "b", b"vb"), 1);
    assert_eq!(extend(&mut c, b"sem", b"x", 900_000), 1);
    join(&mut c, "rw", "n", &["VALUE", "vn"]);
    wait_aof_flushed(&mut c);
    let before: Vec<_> = keys.iter().map(|k| kept(&mut c, k)).collect();
    assert_eq!(before[0][1].3, v("vb"));
    assert_eq!(before[1][0].3, v("vx"), "an extension keeps the value");
    drop(c);
    s.restart();
    let mut c = s.conn();
    let after: Vec<_> = keys.iter().map(|k| kept(&mut c, k)).collect();
    assert_eq!(after, before, "after a restart from the AOF");

    // A rewrite of what was loaded, with an RDB preamble this time.
    ok_cmd(&mut c, cmd("CONFIG").arg("SET").arg("aof-use-rdb-preamble").arg("yes"));
    bgrewriteaof(&mut c);
    drop(c);
    s.restart();
    let mut c = s.conn();
    let again: Vec<_> = keys.iter().map(|k| kept(&mut c, k)).collect();
    assert_eq!(again, before, "after a restart from a preamble AOF");
}

/// RESTORE takes a dumped group with values as it was, and refuses one
/// whose shape or resized mark no module writes.
#[test]
fn restore_takes_member_values_and_refuses_unknown_marks() {
    let s = Server::start();
    let mut c = s.conn();
    join(&mut c, "g", "a", &["VALUE", "va"]);
    join(&mut c, "g", "b", &[]);
    let payload = match ok_cmd(&mut c, cmd("DUMP").arg("g")) {
        Value::BulkString(b) => b,
        other => panic!("DUMP: {other:?}"),
    };
    let d = Dump::parse(&payload);
    assert_eq!(d.payload(), payload, "the codec is the server's");
    ok_cmd(&mut c, cmd("RESTORE").arg("copy").arg(0).arg(&payload));
    assert_eq!(kept(&mut c, "copy"), kept(&mut c, "g"));
    for (field, changed, reason) in
        [(0, Field::Int(7), "shape 7, which this module does not know"), (2, Field::Int(2), "a lock without LIMIT marked resized")]
    {
        let mut bad = d.clone();
        bad.fields[field] = changed;
        let e = expect_err(&mut c, cmd("RESTORE").arg("x").arg(0).arg(bad.payload()));
        assert!(e.contains("Bad data format"), "{reason}: {e}");
        assert!(!exists(&mut c, b"x"));
        assert!(s.log_text().contains(reason), "the log says {reason:?}:\n{}", s.log_tail(10));
    }
}

/// A replica sees each member's value (LOCK.APPLY SHARED ... VALUE): after
/// a join, a re-grant without VALUE, an extension, a proclamation and a
/// leave; a replica attached later gets them by full sync.
#[test]
fn a_replica_sees_each_members_value() {
    let master = Server::start();
    let replica = Server::start();
    attach_replica(&master, &replica);
    let mut m = master.conn();
    let mut r = replica.conn();
    join(&mut m, "g", "a", &["VALUE", "va"]);
    join(&mut m, "g", "b", &["VALUE", "vb"]);
    join(&mut m, "sem", "x", &["LIMIT", "3", "PERMITS", "2", "VALUE", "vx"]);
    wait1(&mut m);
    assert_eq!(kept(&mut r, "g"), kept(&mut m, "g"));
    assert_eq!(kept(&mut r, "g")[0].3, v("va"));
    assert_eq!(kept(&mut r, "sem"), kept(&mut m, "sem"));
    join(&mut m, "g", "a", &[]);
    assert_eq!(extend(&mut m, b"sem", b"x", 900_000), 1);
    assert_eq!(proclaim(&mut m, "g", "b", b"vb2"), 1);
    wait1(&mut m);
    let on_master = kept(&mut m, "g");
    assert_eq!((on_master[0].3.clone(), on_master[1].3.clone()), (v("va"), v("vb2")));
    assert_eq!(kept(&mut r, "g"), on_master, "after a re-grant without VALUE and a proclamation");
    assert_eq!(kept(&mut r, "sem")[0].3, v("vx"), "after an extension");
    assert_eq!(release(&mut m, b"g", b"a"), 1);
    wait1(&mut m);
    assert_eq!(kept(&mut r, "g"), kept(&mut m, "g"), "after a member left");

    let late = Server::start();
    let mut l = late.conn();
    ok_cmd(&mut l, cmd("REPLICAOF").arg("127.0.0.1").arg(master.port));
    wait_until(Duration::from_secs(20), "the late replica's link up", || info_field(&mut l, "replication", "master_link_status") == "up");
    assert_eq!(int_of(&ok_cmd(&mut m, cmd("WAIT").arg(2).arg(5000)), "WAIT"), 2, "both replicas acknowledge");
    assert_eq!(kept(&mut l, "g"), kept(&mut m, "g"), "a full sync carries the values");
    assert_eq!(kept(&mut l, "sem"), kept(&mut m, "sem"));
}
