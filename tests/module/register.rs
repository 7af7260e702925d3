//! Token registers (issue 58): LOCK.FENCED runs a command only under a
//! token at least every token its register accepted, and raises the
//! register; LOCK.FENCEINFO reads it. A holder that paused past its lease
//! writes nothing once a newer one wrote; each refusal; the register's
//! rise and the command's effects on a replica and in the AOF exactly
//! once; persistence (RDB, AOF rewrite, DEBUG RELOAD, RESTORE within and
//! beyond the bound on tokens); and eviction, which does not lower it.

use crate::common;

use std::time::Duration;

use common::*;
use redis::{Connection, Value};

fn fenced(c: &mut Connection, register: &str, token: i64, command: &[&str]) -> Result<Value, String> {
    let mut f = cmd("LOCK.FENCED");
    f.arg(register).arg(token);
    for a in command {
        f.arg(*a);
    }
    try_cmd(c, &f)
}

fn fenceinfo(c: &mut Connection, register: &str) -> Option<i64> {
    match ok_cmd(c, cmd("LOCK.FENCEINFO").arg(register)) {
        Value::Nil => None,
        v => Some(int_of(&v, "LOCK.FENCEINFO")),
    }
}

/// An absent register admits any token; then only that token and higher
/// ones; an older one runs nothing and names both tokens. Without a
/// command the register only rises. Every argument error, the commands a
/// fence will not run, other types and the bound on tokens.
#[test]
fn register_admits_the_highest_token_and_above_only() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(fenceinfo(&mut c, "reg"), None);
    assert_eq!(fenced(&mut c, "reg", 100, &["SET", "data", "a"]), Ok(Value::Okay));
    assert_eq!(fenceinfo(&mut c, "reg"), Some(100));
    let e = fenced(&mut c, "reg", 99, &["SET", "data", "old"]).expect_err("an older token");
    assert_eq!(e, "FENCED older token: register reg has accepted token 100, not 99");
    assert_eq!(get_text(&mut c, "data").as_deref(), Some("a"), "nothing written under the older token");
    assert_eq!(fenced(&mut c, "reg", 100, &["INCR", "n"]), Ok(Value::Int(1)), "the same token writes again");
    // A newer holder announces itself: the older one is shut out before
    // the newer writes anything.
    assert_eq!(fenced(&mut c, "reg", 150, &[]), Ok(Value::Int(150)));
    assert_refused(fenced(&mut c, "reg", 100, &["INCR", "n"]), "FENCED older token", "after the rise");
    assert_eq!(get_text(&mut c, "n").as_deref(), Some("1"));
    // A lower rise changes nothing and is refused like a write.
    assert_refused(fenced(&mut c, "reg", 120, &[]), "FENCED older token", "a lower rise");
    assert_eq!(fenceinfo(&mut c, "reg"), Some(150));
    // The command's own reply and errors pass through; it ran, so the
    // register rose.
    assert_refused(fenced(&mut c, "reg", 160, &["LPUSH", "data", "x"]), "WRONGTYPE", "the command's own error");
    assert_eq!(fenceinfo(&mut c, "reg"), Some(160));

    assert_refused(fenced(&mut c, "reg", 0, &["SET", "data", "z"]), "ERR LOCK.FENCED: the token must be at least 1", "token 0");
    assert_refused(fenced(&mut c, "reg", -1, &[]), "ERR token must be a non-negative integer", "a negative token");
    assert_refused(try_cmd(&mut c, cmd("LOCK.FENCED").arg("reg")), "ERR wrong number of arguments", "arity");
    assert_refused(try_cmd(&mut c, &cmd("LOCK.FENCEINFO")), "ERR wrong number of arguments", "arity");
    assert_refused(fenced(&mut c, "reg", i64::MAX, &[]), "ERR LOCK.FENCED: the token is ahead of this server's clock", "lead");
    for (command, why) in [
        (&["MULTI"][..], "cannot run MULTI"),
        (&["BLPOP", "l", "0"][..], "cannot run a blocking"),
        (&["SUBSCRIBE", "ch"][..], "cannot run a subscription"),
        (&["LOCK.RELEASE", "k", "o"][..], "cannot run LOCK.*"),
    ] {
        assert_refused(fenced(&mut c, "reg", 200, command), &format!("ERR LOCK.FENCED {why}"), why);
    }
    assert_eq!(fenceinfo(&mut c, "reg"), Some(160), "nothing refused raised the register");
    // A register is no lock, and no other key is a register.
    assert_refused(try_cmd(&mut c, cmd("LOCK.ACQUIRE").arg("reg").arg("o").arg(1000)), "WRONGTYPE", "a lock on a register");
    assert_refused(try_cmd(&mut c, cmd("GET").arg("reg")), "WRONGTYPE", "GET of a register");
    ok_cmd(&mut c, cmd("SET").arg("s").arg("x"));
    assert_refused(fenced(&mut c, "s", 5, &["SET", "data", "z"]), "WRONGTYPE", "a string as a register");
    grant(&mut c, "lock", "o", 60_000);
    assert_refused(fenced(&mut c, "lock", 5, &[]), "WRONGTYPE", "a lock as a register");
    assert_refused(try_cmd(&mut c, cmd("LOCK.FENCEINFO").arg("lock")), "WRONGTYPE", "a lock read as a register");
    assert_eq!(ok_cmd(&mut c, cmd("TYPE").arg("reg")), Value::SimpleString("lockfence".into()));
}

/// A holder pauses past its lease, the next holder takes the lock and
/// writes through the register, the first one resumes: every one of its
/// writes is refused (0 of 50 land), the next holder's land. The lock and
/// the data are on different servers, as with the quorum.
#[test]
fn register_refuses_every_write_of_a_holder_that_paused_past_its_lease() {
    let locks = Server::start();
    let data = Server::start();
    let (mut late_locks, mut next_locks) = (locks.conn(), locks.conn());
    let (mut late_data, mut next_data) = (data.conn(), data.conn());
    let old = grant(&mut late_locks, "k", "late", 200);
    assert_eq!(fenced(&mut late_data, "reg", old, &["INCR", "late-writes"]), Ok(Value::Int(1)));
    // The pause: the late holder sends nothing while its lease runs out
    // and the next holder is granted.
    let mut new = None;
    wait_until(Duration::from_secs(5), "the next holder to take the lock", || {
        new = acquire(&mut next_locks, b"k", b"next", 60_000);
        new.is_some()
    });
    let new = new.expect("granted");
    assert!(new > old, "tokens grow: {new} after {old}");
    assert_eq!(fenced(&mut next_data, "reg", new, &["INCR", "next-writes"]), Ok(Value::Int(1)));
    for i in 0..50 {
        assert_refused(fenced(&mut late_data, "reg", old, &["INCR", "late-writes"]), "FENCED older token", "the late holder");
        assert_eq!(fenced(&mut next_data, "reg", new, &["INCR", "next-writes"]), Ok(Value::Int(i + 2)));
    }
    assert_eq!(get_text(&mut next_data, "late-writes").as_deref(), Some("1"), "no late write landed");
    assert_eq!(get_text(&mut next_data, "next-writes").as_deref(), Some("51"));
}

/// The register's rise and the command's effects reach a replica and the
/// AOF once; the replica replays the rise without checking it, and takes
/// no fenced write from a client. The AOF without an RDB preamble writes
/// the register as the LOCK.FENCED that raises it; restarts from it and
/// from an RDB, and DEBUG RELOAD, keep the register.
#[test]
fn register_reaches_the_replica_and_the_aof_once_and_persists() {
    let mut master = Server::start_with(&["--appendonly", "yes", "--appendfsync", "always", "--aof-use-rdb-preamble", "no"]);
    let replica = Server::start();
    attach_replica(&master, &replica);
    let mut m = master.conn();
    assert_eq!(fenced(&mut m, "reg", 10, &["INCR", "n"]), Ok(Value::Int(1)));
    assert_eq!(fenced(&mut m, "reg", 20, &["INCR", "n"]), Ok(Value::Int(2)));
    assert_refused(fenced(&mut m, "reg", 15, &["INCR", "n"]), "FENCED older token", "older");
    assert_eq!(fenced(&mut m, "reg", 20, &["EVAL", "return redis.call('INCR', KEYS[1])", "1", "n"]), Ok(Value::Int(3)));
    ok_cmd(&mut m, &cmd("MULTI"));
    ok_cmd(&mut m, cmd("LOCK.FENCED").arg("reg").arg(25).arg("INCR").arg("n"));
    ok_cmd(&mut m, cmd("LOCK.FENCED").arg("reg2").arg(7));
    ok_cmd(&mut m, &cmd("EXEC"));
    wait_replica_synced(&master, &replica);
    let mut r = replica.conn();
    assert_eq!(get_text(&mut r, "n").as_deref(), Some("4"), "each fenced INCR applied once on the replica");
    assert_eq!((fenceinfo(&mut r, "reg"), fenceinfo(&mut r, "reg2")), (Some(25), Some(7)));
    assert_refused(fenced(&mut r, "reg", 30, &["SET", "data", "x"]), "READONLY", "on the replica");

    let check_kept = |m: &mut Connection, how: &str| {
        assert_eq!((fenceinfo(m, "reg"), fenceinfo(m, "reg2")), (Some(25), Some(7)), "{how}");
        assert_eq!(get_text(m, "n").as_deref(), Some("4"), "{how}: each INCR replayed once");
        assert_refused(fenced(m, "reg", 24, &["INCR", "n"]), "FENCED older token", how);
    };
    drop(m);
    master.restart();
    check_kept(&mut master.conn(), "restarted from the AOF");
    let mut m = master.conn();
    ok_cmd(&mut m, &cmd("BGREWRITEAOF"));
    wait_until(Duration::from_secs(10), "the AOF rewrite", || info_field_i64(&mut m, "persistence", "aof_rewrite_in_progress") == 0);
    let files = std::fs::read_dir(master.dir.join("appendonlydir")).expect("appendonlydir");
    let aof: Vec<u8> = files.flat_map(|f| std::fs::read(f.expect("entry").path()).expect("read")).collect();
    let text = String::from_utf8_lossy(&aof).to_lowercase();
    assert!(text.contains("lock.fenced"), "the rewritten AOF raises the register");
    drop(m);
    master.restart();
    check_kept(&mut master.conn(), "restarted from the rewritten AOF");
    let mut m = master.conn();
    ok_cmd(&mut m, cmd("DEBUG").arg("RELOAD"));
    check_kept(&mut m, "DEBUG RELOAD");
    ok_cmd(&mut m, cmd("CONFIG").arg("SET").arg("appendonly").arg("no"));
    ok_cmd(&mut m, &cmd("SAVE"));
    drop(m);
    master.set_extra_args(&["--appendonly", "no"]);
    master.restart();
    check_kept(&mut master.conn(), "restarted from the RDB");
}

/// DUMP and RESTORE carry a register; a RESTORE whose token is beyond the
/// bound on tokens (`redislock.max-token-lead`) is refused, as a lock's
/// is, so one payload cannot raise a register past every token to come.
#[test]
fn register_restores_within_the_bound_on_tokens_only() {
    let s = Server::start();
    let mut c = s.conn();
    fenced(&mut c, "reg", 1234, &[]).expect("raise");
    let dump: Vec<u8> = cmd("DUMP").arg("reg").query(&mut c).expect("DUMP");
    ok_cmd(&mut c, cmd("RESTORE").arg("copy").arg(0).arg(&dump[..]));
    assert_eq!(fenceinfo(&mut c, "copy"), Some(1234));
    // A register raised far ahead where the bound was lifted ...
    let far = Server::start();
    let mut f = far.conn();
    let year_ms: i64 = 365 * 86_400_000;
    ok_cmd(&mut f, cmd("CONFIG").arg("SET").arg("redislock.max-token-lead").arg(year_ms));
    let now_us = i64::try_from(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_micros()).expect("µs");
    // 300 days ahead of the clock: within a year's lead, far beyond 60 s.
    let ahead = now_us + 300 * 86_400_000_000;
    fenced(&mut f, "reg", ahead, &[]).expect("raise far ahead where allowed");
    let dump: Vec<u8> = cmd("DUMP").arg("reg").query(&mut f).expect("DUMP");
    // ... is refused where it holds.
    assert_refused(try_cmd(&mut c, cmd("RESTORE").arg("ahead").arg(0).arg(&dump[..])), "ERR Bad data format", "beyond the bound");
    assert_eq!(fenceinfo(&mut c, "ahead"), None);
}

/// Redis evicts the register under `allkeys-random`: the register is kept
/// (in memory) and an older token is still refused; the next fenced write
/// puts it back as it was.
#[test]
fn register_evicted_under_memory_pressure_still_refuses_older_tokens() {
    let _heavy = common::one_heavy_at_a_time();
    let s = Server::start_with(&["--maxmemory-policy", "allkeys-random"]);
    let mut c = s.conn();
    fenced(&mut c, "reg", 500, &["SET", "data", "v"]).expect("raise");
    let used = info_field_i64(&mut c, "memory", "used_memory");
    ok_cmd(&mut c, cmd("CONFIG").arg("SET").arg("maxmemory").arg(used + 2_000_000));
    let value = vec![b'x'; 1_000];
    let mut i = 0;
    while fenceinfo_raw_exists(&mut c) && i < 200_000 {
        let mut pipe = redis::pipe();
        for j in i..i + 200 {
            pipe.cmd("SET").arg(format!("fill:{j}")).arg(&value[..]).ignore();
        }
        let _: () = pipe.query(&mut c).expect("fill");
        i += 200;
    }
    assert!(!fenceinfo_raw_exists(&mut c), "the register was evicted after {i} keys");
    ok_cmd(&mut c, cmd("CONFIG").arg("SET").arg("maxmemory").arg(0));
    assert_eq!(info_field_i64(&mut c, "redislock", "redislock_evicted_registers_kept"), 1);
    assert_eq!(fenceinfo(&mut c, "reg"), Some(500), "read from what was kept");
    assert_refused(fenced(&mut c, "reg", 499, &["SET", "late", "x"]), "FENCED older token", "after the eviction");
    assert_eq!(get_text(&mut c, "late"), None);
    assert_eq!(fenced(&mut c, "reg", 500, &["SET", "again", "y"]), Ok(Value::Okay));
    assert!(fenceinfo_raw_exists(&mut c), "put back by the write");
    assert_eq!(info_field_i64(&mut c, "redislock", "redislock_evicted_registers_kept"), 0);
    assert_eq!(fenceinfo(&mut c, "reg"), Some(500));
    // DEL removes it by intent.
    ok_cmd(&mut c, cmd("DEL").arg("reg"));
    assert_eq!(fenceinfo(&mut c, "reg"), None);
}

fn fenceinfo_raw_exists(c: &mut Connection) -> bool {
    exists(c, b"reg")
}

/// LOCK.FENCED runs its command as the caller's ACL user: a key outside
/// the user's patterns is refused as when it calls the command itself, and
/// so is a register outside them (the register is the command's own key).
#[test]
fn register_runs_its_command_as_the_callers_acl_user() {
    let s = Server::start();
    let mut admin = s.conn();
    ok_cmd(&mut admin, cmd("ACL").arg("SETUSER").arg("fencer").arg("reset").arg("on").arg(">pw").arg("~reg").arg("~mine").arg("+@all"));
    let mut user = s.conn();
    ok_cmd(&mut user, cmd("AUTH").arg("fencer").arg("pw"));
    assert_refused(fenced(&mut user, "reg", 5, &["SET", "data", "x"]), "NOPERM", "a key outside its patterns");
    assert_refused(fenced(&mut user, "other-reg", 5, &["SET", "mine", "x"]), "NOPERM", "a register outside its patterns");
    assert_eq!(fenced(&mut user, "reg", 5, &["SET", "mine", "ok"]), Ok(Value::Okay));
    assert_eq!(get_text(&mut admin, "data"), None, "nothing written outside its patterns");
    assert_eq!(fenceinfo(&mut admin, "other-reg"), None, "no register made outside its patterns");
}
