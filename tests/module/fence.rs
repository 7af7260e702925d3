//! The fence enforced where the data lives (issue 58, first step):
//! LOCK.CHECK answers whether a hold is current, LOCK.GUARD runs a command
//! only while it is. Each refusal reason, nothing written when refused, a
//! holder whose lease ended while a new one holds, the guarded write on a
//! replica and in the AOF exactly once, the caller's ACL, the commands the
//! guard will not run, and scripts under the guard.

use crate::common;

use std::time::Duration;

use common::cluster::{key_in_slot, key_slot, Cluster};
use common::*;
use redis::{Connection, Value};

fn check(c: &mut Connection, key: &str, owner: &str, token: i64) -> Result<Value, String> {
    try_cmd(c, cmd("LOCK.CHECK").arg(key).arg(owner).arg(token))
}

fn guard(c: &mut Connection, key: &str, owner: &str, token: i64, command: &[&str]) -> Result<Value, String> {
    let mut g = cmd("LOCK.GUARD");
    g.arg(key).arg(owner).arg(token);
    for a in command {
        g.arg(*a);
    }
    try_cmd(c, &g)
}

/// Every reason LOCK.CHECK gives, for every kind of hold.
#[test]
fn fence_check_answers_current_or_why_not() {
    let s = Server::start();
    let mut c = s.conn();
    let t = grant(&mut c, "k", "a", 60_000);
    assert_eq!(check(&mut c, "k", "a", t), Ok(Value::Int(1)));
    assert_refused(check(&mut c, "k", "b", t), "FENCED held by another owner", "another owner");
    assert_refused(check(&mut c, "free", "a", t), "FENCED not held", "a free key");
    assert_refused(check(&mut c, "k", "a", t + 1), "FENCED other token", "a token the hold never had");
    // Released and granted again: the first token is stale.
    assert_eq!(release(&mut c, b"k", b"a"), 1);
    assert_refused(check(&mut c, "k", "a", t), "FENCED not held", "released");
    let t2 = grant(&mut c, "k", "a", 60_000);
    assert!(t2 > t);
    let e = check(&mut c, "k", "a", t).expect_err("an older token");
    assert_eq!(e, format!("FENCED newer token: the owner holds the lock under token {t2}, not {t}"));

    // Shared holders, a semaphore's permit, a member of a set.
    let s1 = int_of(&ok_cmd(&mut c, cmd("LOCK.ACQUIRE").arg("rw").arg("r1").arg(60_000).arg("SHARED")), "shared");
    let s2 = int_of(&ok_cmd(&mut c, cmd("LOCK.ACQUIRE").arg("rw").arg("r2").arg(60_000).arg("SHARED")), "shared");
    assert_eq!(check(&mut c, "rw", "r1", s1), Ok(Value::Int(1)));
    assert_eq!(check(&mut c, "rw", "r2", s2), Ok(Value::Int(1)));
    assert_refused(check(&mut c, "rw", "r2", s1), "FENCED newer token", "r2 under r1's older token");
    assert_refused(check(&mut c, "rw", "r3", s1), "FENCED held by another owner", "not a shared holder");
    let p = int_of(&ok_cmd(&mut c, cmd("LOCK.ACQUIRE").arg("sem").arg("p").arg(60_000).arg("SHARED").arg("LIMIT").arg(3)), "permit");
    assert_eq!(check(&mut c, "sem", "p", p), Ok(Value::Int(1)));
    let m = int_of(&ok_cmd(&mut c, cmd("LOCK.MACQUIRE").arg(2).arg("m1").arg("m2").arg("o").arg(60_000)), "set");
    assert_eq!(check(&mut c, "m1", "o", m), Ok(Value::Int(1)));
    assert_eq!(check(&mut c, "m2", "o", m), Ok(Value::Int(1)));
    // A `SET key owner NX PX` lock: held under token 0.
    ok_cmd(&mut c, cmd("SET").arg("plain").arg("a").arg("NX").arg("PX").arg(60_000));
    assert_eq!(check(&mut c, "plain", "a", 0), Ok(Value::Int(1)));
    assert_refused(check(&mut c, "plain", "b", 0), "FENCED held by another owner", "plain string, another owner");
    ok_cmd(&mut c, cmd("RPUSH").arg("list").arg("x"));
    assert_refused(check(&mut c, "list", "a", 1), "WRONGTYPE", "a list");
    assert_refused(check(&mut c, "k", "a", -1), "ERR token must be a non-negative integer", "a bad token");
    assert_refused(try_cmd(&mut c, cmd("LOCK.CHECK").arg("k").arg("a")), "ERR wrong number of arguments", "arity");
}

/// A shared holder whose lease ended while another holds on: the key
/// stays, and the answer says the lease ended (not "another owner").
#[test]
fn fence_check_tells_an_ended_lease() {
    let s = Server::start();
    let mut c = s.conn();
    let short = int_of(&ok_cmd(&mut c, cmd("LOCK.ACQUIRE").arg("rw").arg("brief").arg(50).arg("SHARED")), "shared");
    ok_cmd(&mut c, cmd("LOCK.ACQUIRE").arg("rw").arg("long").arg(60_000).arg("SHARED"));
    assert_eq!(check(&mut c, "rw", "brief", short), Ok(Value::Int(1)));
    wait_until(Duration::from_secs(5), "the brief lease to end", || check(&mut c, "rw", "brief", short).is_err());
    assert_refused(check(&mut c, "rw", "brief", short), "FENCED lease ended", "an ended shared lease");
    assert_refused(guard(&mut c, "rw", "brief", short, &["SET", "data", "late"]), "FENCED lease ended", "guard");
    assert_eq!(get_text(&mut c, "data"), None, "nothing written under an ended lease");
}

/// A TTL someone else set on a lock's key is its lease, as LOCK.INFO
/// shows it: a shortened one ends the hold when the key goes, a longer
/// one or none keeps the hold past the lease it was granted. (The check
/// reads no TTL while the granted lease runs; this is what it must read
/// once that lease has ended.)
#[test]
fn fence_check_follows_a_ttl_someone_else_set() {
    let s = Server::start();
    let mut c = s.conn();
    // Shortened: held until the key goes, then not held.
    let short = grant(&mut c, "short", "a", 60_000);
    ok_cmd(&mut c, cmd("PEXPIRE").arg("short").arg(200));
    assert_eq!(check(&mut c, "short", "a", short), Ok(Value::Int(1)));
    wait_until(Duration::from_secs(5), "the shortened key to go", || check(&mut c, "short", "a", short).is_err());
    assert_refused(check(&mut c, "short", "a", short), "FENCED not held", "a key its TTL removed");
    // Lengthened and removed: the granted 100 ms lease ends, the TTL decides.
    let longer = grant(&mut c, "longer", "a", 100);
    ok_cmd(&mut c, cmd("PEXPIRE").arg("longer").arg(60_000));
    let kept = grant(&mut c, "kept", "a", 100);
    ok_cmd(&mut c, cmd("PERSIST").arg("kept"));
    // Granted after them and 50 ms longer: once it has ended, theirs have.
    let brief = grant(&mut c, "brief", "a", 150);
    wait_until(Duration::from_secs(5), "a lease granted after them to end", || check(&mut c, "brief", "a", brief).is_err());
    assert_eq!(check(&mut c, "longer", "a", longer), Ok(Value::Int(1)), "a TTL made longer holds on");
    assert_eq!(check(&mut c, "kept", "a", kept), Ok(Value::Int(1)), "a TTL removed holds on");
    assert_eq!(guard(&mut c, "kept", "a", kept, &["SET", "data", "v"]), Ok(Value::Okay));
}
/// The guarded command runs when the hold is current and not otherwise,
/// with nothing written for any reason.
#[test]
fn fence_guard_runs_only_while_the_hold_is_current() {
    let s = Server::start();
    let mut c = s.conn();
    let t = grant(&mut c, "k", "a", 60_000);
    assert_eq!(guard(&mut c, "k", "a", t, &["SET", "data", "v1"]), Ok(Value::Okay));
    assert_eq!(get_text(&mut c, "data").as_deref(), Some("v1"));
    // The inner reply passes as it is: an integer, a bulk, its own error.
    assert_eq!(guard(&mut c, "k", "a", t, &["INCR", "n"]), Ok(Value::Int(1)));
    assert_eq!(guard(&mut c, "k", "a", t, &["GET", "data"]), Ok(Value::BulkString(b"v1".to_vec())));
    assert_refused(guard(&mut c, "k", "a", t, &["INCR", "data"]), "ERR value is not an integer", "the command's own error");
    assert_refused(guard(&mut c, "k", "a", t, &["NOSUCHCOMMAND"]), "ERR unknown command", "unknown");
    assert_refused(guard(&mut c, "k", "a", t, &["SET", "only-key"]), "ERR wrong number of arguments", "inner arity");

    let refusals =
        [("k", "b", t, "FENCED held by another owner"), ("free", "a", t, "FENCED not held"), ("k", "a", t + 1, "FENCED other token")];
    for (i, (key, owner, token, prefix)) in refusals.into_iter().enumerate() {
        let target = format!("refused-{i}");
        assert_refused(guard(&mut c, key, owner, token, &["SET", &target, "x"]), prefix, prefix);
        assert!(!exists(&mut c, target.as_bytes()), "{prefix}: nothing written");
    }
    assert_eq!(release(&mut c, b"k", b"a"), 1);
    let t2 = grant(&mut c, "k", "a", 60_000);
    assert_refused(guard(&mut c, "k", "a", t, &["SET", "data", "stale"]), "FENCED newer token", "the older token");
    assert_eq!(get_text(&mut c, "data").as_deref(), Some("v1"));
    assert_eq!(guard(&mut c, "k", "a", t2, &["SET", "data", "v2"]), Ok(Value::Okay));
    assert_eq!(get_text(&mut c, "data").as_deref(), Some("v2"));

    // Inside MULTI the guard works as any write command.
    ok_cmd(&mut c, &cmd("MULTI"));
    ok_cmd(&mut c, cmd("LOCK.GUARD").arg("k").arg("a").arg(t2).arg("SET").arg("data").arg("v3"));
    ok_cmd(&mut c, cmd("LOCK.GUARD").arg("k").arg("b").arg(t2).arg("SET").arg("data").arg("intruder"));
    let exec = ok_cmd(&mut c, &cmd("EXEC"));
    match exec {
        Value::Array(replies) => {
            assert_eq!(replies.first(), Some(&Value::Okay));
            assert!(matches!(replies.get(1), Some(Value::ServerError(e)) if e.code() == "FENCED"), "{replies:?}");
        }
        other => panic!("EXEC: {other:?}"),
    }
    assert_eq!(get_text(&mut c, "data").as_deref(), Some("v3"));

    // RESP3: the inner reply keeps its type.
    let mut c3 = s.conn_resp3();
    ok_cmd(&mut c3, cmd("HSET").arg("h").arg("f").arg("v"));
    let map = guard(&mut c3, "k", "a", t2, &["HGETALL", "h"]).expect("HGETALL");
    assert!(matches!(map, Value::Map(ref m) if m.len() == 1), "a RESP3 map, got {map:?}");
}

/// A holder whose lease ended (it paused past it) while another took the
/// lock: every one of its guarded writes is refused, the new holder's land.
#[test]
fn fence_guard_refuses_a_holder_whose_lease_ended_and_another_took_it() {
    let s = Server::start();
    let mut c = s.conn();
    let mut late = s.conn();
    let old = grant(&mut late, "k", "late", 100);
    let mut new = None;
    wait_until(Duration::from_secs(5), "the next holder to take the lock", || {
        new = acquire(&mut c, b"k", b"next", 60_000);
        new.is_some()
    });
    let new = new.expect("granted");
    assert!(new > old);
    for i in 0..20 {
        let r = guard(&mut late, "k", "late", old, &["SET", "data", &format!("late-{i}")]);
        assert_refused(r, "FENCED held by another owner", "the late holder");
        assert_eq!(guard(&mut c, "k", "next", new, &["SET", "data", &format!("next-{i}")]), Ok(Value::Okay));
    }
    assert_eq!(get_text(&mut c, "data").as_deref(), Some("next-19"));
    assert_refused(check(&mut late, "k", "late", old), "FENCED held by another owner", "check");
}

/// The guarded command's effect reaches a replica and the AOF once; the
/// guard itself never does (a replay would run the command again).
#[test]
fn fence_guarded_effects_reach_the_replica_and_the_aof_once() {
    let mut master = Server::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let replica = Server::start();
    attach_replica(&master, &replica);
    let mut m = master.conn();
    let t = grant(&mut m, "k", "a", 600_000);
    assert_eq!(guard(&mut m, "k", "a", t, &["INCR", "n"]), Ok(Value::Int(1)));
    assert_eq!(guard(&mut m, "k", "a", t, &["SET", "data", "v"]), Ok(Value::Okay));
    assert_refused(guard(&mut m, "k", "b", t, &["INCR", "n"]), "FENCED", "another owner");
    // A script under the guard, the guard inside a script and in MULTI.
    assert_eq!(guard(&mut m, "k", "a", t, &["EVAL", "return redis.call('INCR', KEYS[1])", "1", "n"]), Ok(Value::Int(2)));
    let inside = "return redis.call('LOCK.GUARD', KEYS[1], ARGV[1], ARGV[2], 'INCR', KEYS[2])";
    assert_eq!(ok_cmd(&mut m, cmd("EVAL").arg(inside).arg(2).arg("k").arg("n").arg("a").arg(t)), Value::Int(3));
    ok_cmd(&mut m, &cmd("MULTI"));
    ok_cmd(&mut m, cmd("LOCK.GUARD").arg("k").arg("a").arg(t).arg("INCR").arg("n"));
    ok_cmd(&mut m, cmd("LOCK.GUARD").arg("k").arg("a").arg(t).arg("EVAL").arg("return redis.call('INCR', KEYS[1])").arg(1).arg("n"));
    ok_cmd(&mut m, &cmd("EXEC"));
    wait_replica_synced(&master, &replica);
    let mut r = replica.conn();
    assert_eq!(get_text(&mut r, "n").as_deref(), Some("5"), "each guarded INCR applied once on the replica");
    assert_eq!(get_text(&mut r, "data").as_deref(), Some("v"));
    // A replica takes no guarded write from a client.
    assert_refused(guard(&mut r, "k", "a", t, &["SET", "data", "x"]), "READONLY", "on the replica");

    let files = std::fs::read_dir(master.dir.join("appendonlydir")).expect("appendonlydir");
    let aof: Vec<u8> = files.flat_map(|f| std::fs::read(f.expect("entry").path()).expect("read")).collect();
    let text = String::from_utf8_lossy(&aof).to_lowercase();
    assert!(!text.contains("lock.guard"), "the guard is not in the AOF");
    assert!(text.contains("incr"), "the guarded INCR is in the AOF");
    drop(r);
    master.restart();
    let mut m = master.conn();
    assert_eq!(get_text(&mut m, "n").as_deref(), Some("5"), "each guarded INCR replayed once from the AOF");
    assert_eq!(get_text(&mut m, "data").as_deref(), Some("v"));
}

/// The guarded command runs as the caller's ACL user: keys and commands
/// it may not use are refused as when it calls them itself.
#[test]
fn fence_guard_runs_as_the_callers_acl_user() {
    let s = Server::start();
    let mut admin = s.conn();
    let t = grant(&mut admin, "k", "a", 60_000);
    for (name, rules) in [("keys", &["~k", "~mine", "+@all"][..]), ("nocmd", &["~*", "+@all", "-set"][..])] {
        let mut setuser = cmd("ACL");
        setuser.arg("SETUSER").arg(name).arg("reset").arg("on").arg(">pw");
        for rule in rules {
            setuser.arg(*rule);
        }
        ok_cmd(&mut admin, &setuser);
    }
    let login = |name: &str| {
        let mut c = s.conn();
        ok_cmd(&mut c, cmd("AUTH").arg(name).arg("pw"));
        c
    };
    let mut keys = login("keys");
    assert_refused(try_cmd(&mut keys, cmd("SET").arg("data").arg("x")), "NOPERM", "itself");
    assert_refused(guard(&mut keys, "k", "a", t, &["SET", "data", "x"]), "NOPERM", "a key outside its patterns");
    assert_refused(guard(&mut keys, "k", "a", t, &["MSET", "mine", "1", "data", "x"]), "NOPERM", "one key outside");
    assert_eq!(guard(&mut keys, "k", "a", t, &["SET", "mine", "ok"]), Ok(Value::Okay));
    let mut nocmd = login("nocmd");
    assert_refused(try_cmd(&mut nocmd, cmd("SET").arg("data").arg("x")), "NOPERM", "itself");
    assert_refused(guard(&mut nocmd, "k", "a", t, &["SET", "data", "x"]), "NOPERM", "a command it may not run");
    assert_eq!(get_text(&mut admin, "data"), None, "nothing written");
    assert!(!exists(&mut admin, b"mine") || get_text(&mut admin, "mine").as_deref() == Some("ok"));
}

/// What cannot run under the guard is refused with its own error, and
/// runs nothing.
#[test]
fn fence_guard_refuses_transactions_blocking_subscriptions_and_lock_commands() {
    let s = Server::start();
    let mut c = s.conn();
    let t = grant(&mut c, "k", "a", 60_000);
    ok_cmd(&mut c, cmd("RPUSH").arg("list").arg("x"));
    let refused: [(&[&str], &str); 9] = [
        (&["MULTI"], "ERR LOCK.GUARD cannot run MULTI"),
        (&["exec"], "ERR LOCK.GUARD cannot run MULTI"),
        (&["WATCH", "data"], "ERR LOCK.GUARD cannot run MULTI"),
        (&["BLPOP", "list", "0"], "ERR LOCK.GUARD cannot run a blocking command"),
        (&["XREAD", "BLOCK", "0", "STREAMS", "s", "$"], "ERR LOCK.GUARD cannot run a blocking command"),
        (&["SUBSCRIBE", "ch"], "ERR LOCK.GUARD cannot run a subscription command"),
        (&["LOCK.ACQUIRE", "other", "a", "1000"], "ERR LOCK.GUARD cannot run LOCK.* commands"),
        (&["lock.release", "k", "a"], "ERR LOCK.GUARD cannot run LOCK.* commands"),
        (&["SHUTDOWN"], "ERR command 'shutdown' is not allowed"),
    ];
    for (command, prefix) in refused {
        assert_refused(guard(&mut c, "k", "a", t, command), prefix, &command.join(" "));
    }
    assert_eq!(ok_cmd(&mut c, cmd("LLEN").arg("list")), Value::Int(1), "BLPOP popped nothing");
    assert!(!exists(&mut c, b"other"), "no lock taken");
    assert_eq!(check(&mut c, "k", "a", t), Ok(Value::Int(1)), "the lock was not released");
    assert_eq!(ok_cmd(&mut c, &cmd("PING")), Value::SimpleString("PONG".into()), "the connection is not subscribed");
}

/// EVAL, EVALSHA and FCALL under the guard: several keys change together,
/// and a stale hold runs none of it.
#[test]
fn fence_guard_runs_scripts_and_functions() {
    let s = Server::start();
    let mut c = s.conn();
    let t = grant(&mut c, "k", "a", 60_000);
    let body = "redis.call('SET', KEYS[1], ARGV[1]); return redis.call('INCR', KEYS[2])";
    assert_eq!(guard(&mut c, "k", "a", t, &["EVAL", body, "2", "x", "n", "1"]), Ok(Value::Int(1)));
    let sha: String = redis::cmd("SCRIPT").arg("LOAD").arg(body).query(&mut c).expect("SCRIPT LOAD");
    assert_eq!(guard(&mut c, "k", "a", t, &["EVALSHA", &sha, "2", "x", "n", "2"]), Ok(Value::Int(2)));
    assert_refused(guard(&mut c, "k", "b", t, &["EVALSHA", &sha, "2", "x", "n", "3"]), "FENCED", "another owner's script");
    assert_eq!(get_text(&mut c, "x").as_deref(), Some("2"));
    assert_eq!(get_text(&mut c, "n").as_deref(), Some("2"));
    let lib = "#!lua name=fencelib\nredis.register_function('setboth', function(keys, args) redis.call('SET', keys[1], args[1]); return redis.call('SET', keys[2], args[1]) end)";
    ok_cmd(&mut c, cmd("FUNCTION").arg("LOAD").arg(lib));
    assert_eq!(guard(&mut c, "k", "a", t, &["FCALL", "setboth", "2", "f1", "f2", "v"]), Ok(Value::Okay));
    assert_eq!((get_text(&mut c, "f1").as_deref(), get_text(&mut c, "f2").as_deref()), (Some("v"), Some("v")));
    // The guard inside a script works as any write; a script under a
    // guard inside a script is refused (the server runs one script at a
    // time: it would abort).
    let inside = "return redis.call('LOCK.GUARD', KEYS[1], ARGV[1], ARGV[2], 'INCR', KEYS[2])";
    assert_eq!(ok_cmd(&mut c, cmd("EVAL").arg(inside).arg(2).arg("k").arg("n").arg("a").arg(t)), Value::Int(3));
    let nested = "return redis.call('LOCK.GUARD', KEYS[1], ARGV[1], ARGV[2], 'EVAL', 'return 1', 0)";
    let e = expect_err(&mut c, cmd("EVAL").arg(nested).arg(1).arg("k").arg("a").arg(t));
    assert!(e.contains("LOCK.GUARD cannot run a script or function from inside a script"), "{e}");
    let nested_fcall = "return redis.call('LOCK.GUARD', KEYS[1], ARGV[1], ARGV[2], 'FCALL', 'setboth', 2, 'f1', 'f2', 'w')";
    let e = expect_err(&mut c, cmd("EVAL").arg(nested_fcall).arg(1).arg("k").arg("a").arg(t));
    assert!(e.contains("LOCK.GUARD cannot run a script or function from inside a script"), "{e}");
    assert_eq!(get_text(&mut c, "f1").as_deref(), Some("v"));
    // A script's own calls keep the script rules.
    let shut = guard(&mut c, "k", "a", t, &["EVAL", "return redis.call('SHUTDOWN')", "0"]);
    assert!(shut.is_err(), "SHUTDOWN from a guarded script: {shut:?}");
    assert_eq!(ok_cmd(&mut c, &cmd("PING")), Value::SimpleString("PONG".into()));
}

/// Registered like the other LOCK.* commands, on Redis 7.0 and Valkey
/// 8.1: flags, the lock key (COMMAND GETKEYS), ACL categories where the
/// server has them; and on Valkey too the guard runs as the caller.
#[test]
fn fence_commands_are_declared_and_categorised() {
    let valkey = valkey_binary().expect("Valkey 8.1 not found: run `make deps` or set REDISLOCK_VALKEY");
    for (name, bin) in [("default", server_binary()), ("valkey-8.1", valkey)] {
        let srv = Server::start_binary(&bin, &[], &[]);
        let mut admin = srv.conn();
        let info = format!("{:?}", ok_cmd(&mut admin, cmd("COMMAND").arg("INFO").arg("lock.check").arg("lock.guard")));
        let (check_info, guard_info) = info.split_at(info.find("lock.guard").expect("lock.guard in COMMAND INFO"));
        for f in ["readonly", "fast"] {
            assert!(check_info.contains(f), "{name}: lock.check lacks {f}: {check_info}");
        }
        assert!(!check_info.contains("\"write\""), "{name}: lock.check must not write: {check_info}");
        assert!(guard_info.contains("write"), "{name}: lock.guard is a write: {guard_info}");
        assert!(!guard_info.contains("denyoom") && !guard_info.contains("readonly"), "{name}: {guard_info}");
        let keys: Vec<String> = redis::cmd("COMMAND")
            .arg("GETKEYS")
            .arg("LOCK.GUARD")
            .arg("k")
            .arg("o")
            .arg(1)
            .arg("SET")
            .arg("data")
            .arg("v")
            .query(&mut admin)
            .expect("GETKEYS");
        assert_eq!(keys, vec!["k"], "{name}: the lock's key");
        let info = format!("{:?}", ok_cmd(&mut admin, cmd("COMMAND").arg("INFO").arg("lock.fenceinfo").arg("lock.fenced")));
        let (fenceinfo_info, fenced_info) = info.split_at(info.find("lock.fenced\"").expect("lock.fenced in COMMAND INFO"));
        assert!(fenceinfo_info.contains("readonly") && !fenceinfo_info.contains("\"write\""), "{name}: {fenceinfo_info}");
        assert!(fenced_info.contains("write") && !fenced_info.contains("denyoom"), "{name}: {fenced_info}");
        let t = grant(&mut admin, "k", "a", 60_000);
        let login = |user: &str, rules: &[&str]| {
            let mut setuser = cmd("ACL");
            setuser.arg("SETUSER").arg(user).arg("reset").arg("on").arg(">pw");
            for rule in rules {
                setuser.arg(*rule);
            }
            ok_cmd(&mut srv.conn(), &setuser);
            let mut c = srv.conn();
            ok_cmd(&mut c, cmd("AUTH").arg(user).arg("pw"));
            c
        };
        let mut keys_only = login("keysonly", &["~k", "+@all"]);
        assert_refused(guard(&mut keys_only, "k", "a", t, &["SET", "data", "x"]), "NOPERM", name);
        assert_eq!(get_text(&mut admin, "data"), None, "{name}: nothing written");
        assert_eq!(guard(&mut admin, "k", "a", t, &["EVAL", "return redis.call('SET', KEYS[1], 'v')", "1", "data"]), Ok(Value::Okay));
        if format!("{:?}", ok_cmd(&mut admin, cmd("COMMAND").arg("INFO").arg("lock.info"))).contains("@read") {
            let mut read_only = login("readonly", &["~*", "+@read"]);
            assert_eq!(check(&mut read_only, "k", "a", t), Ok(Value::Int(1)), "{name}: +@read runs LOCK.CHECK");
            assert_refused(guard(&mut read_only, "k", "a", t, &["GET", "data"]), "NOPERM", "+@read runs no LOCK.GUARD");
            let mut no_write = login("nowrite", &["~*", "+@all", "-@write"]);
            assert_eq!(check(&mut no_write, "k", "a", t), Ok(Value::Int(1)), "{name}: -@write runs LOCK.CHECK");
            assert_refused(guard(&mut no_write, "k", "a", t, &["GET", "data"]), "NOPERM", "-@write runs no LOCK.GUARD");
        } else {
            assert_eq!(name, "default", "Valkey 8.1 categorises module commands");
        }
    }
}

/// In a Cluster the guard is routed by the lock's key and the guarded
/// command's together: keys of another slot, on this node or another, get
/// CROSSSLOT and nothing runs; a node that serves none of them redirects.
#[test]
fn fence_guard_in_a_cluster_keeps_the_lock_and_its_data_in_one_slot() {
    let _serial = crate::cluster::one_cluster_at_a_time();
    let cluster = Cluster::start(3, 0);
    let lock = "{order:42}:lock";
    let slot = key_slot(lock.as_bytes());
    let node = cluster.owner_of(0, slot);
    let mut c = cluster.nodes[node].conn();
    let t = grant(&mut c, lock, "a", 60_000);
    assert_eq!(guard(&mut c, lock, "a", t, &["SET", "{order:42}:data", "v"]), Ok(Value::Okay));
    let body = "return redis.call('INCR', KEYS[1])";
    assert_eq!(guard(&mut c, lock, "a", t, &["EVAL", body, "1", "{order:42}:n"]), Ok(Value::Int(1)));

    let first = cluster.first_slot(node);
    let here = key_in_slot("here", if first == slot { first + 1 } else { first });
    assert_eq!(cluster.owner_of(0, key_slot(here.as_bytes())), node, "{here} is served by the lock's node");
    let there = key_in_slot("there", cluster.first_slot(cluster.other_master(node)));
    for (what, command) in [
        ("another slot on this node", vec!["SET", here.as_str(), "x"]),
        ("another node's slot", vec!["SET", there.as_str(), "x"]),
        ("one key of several", vec!["MSET", "{order:42}:data", "x", here.as_str(), "x"]),
        ("a script's key", vec!["EVAL", body, "1", here.as_str()]),
    ] {
        assert_refused(guard(&mut c, lock, "a", t, &command), "CROSSSLOT", what);
    }
    assert!(!exists(&mut c, here.as_bytes()), "nothing written here");
    assert_eq!(get_text(&mut c, "{order:42}:data").as_deref(), Some("v"), "nothing written by the refused MSET");
    let mut elsewhere = cluster.nodes[cluster.other_master(node)].conn();
    let e = guard(&mut elsewhere, lock, "a", t, &["SET", "{order:42}:data", "w"]).expect_err("redirected");
    assert_eq!(e, format!("MOVED {slot} 127.0.0.1:{}", cluster.nodes[node].port));
    // A cluster client routes it like any command.
    let client = redis::cluster::ClusterClient::new(cluster.urls()).expect("cluster client");
    let mut routed = client.get_connection().expect("cluster connection");
    let v: String =
        cmd("LOCK.GUARD").arg(lock).arg("a").arg(t).arg("SET").arg("{order:42}:data").arg("routed").query(&mut routed).expect("routed");
    assert_eq!(v, "OK");
    assert_eq!(get_text(&mut c, "{order:42}:data").as_deref(), Some("routed"));

    // A token register is routed the same way, with the data it fences.
    let register = "{order:42}:fence";
    let fenced = |c: &mut Connection, command: &[&str]| {
        let mut f = cmd("LOCK.FENCED");
        f.arg(register).arg(t);
        for a in command {
            f.arg(*a);
        }
        try_cmd(c, &f)
    };
    assert_eq!(fenced(&mut c, &["SET", "{order:42}:data", "fenced"]), Ok(Value::Okay));
    assert_refused(fenced(&mut c, &["SET", here.as_str(), "x"]), "CROSSSLOT", "a fenced write to another slot");
    assert!(!exists(&mut c, here.as_bytes()), "nothing written here");
    let e = fenced(&mut elsewhere, &["SET", "{order:42}:data", "w"]).expect_err("redirected");
    assert_eq!(e, format!("MOVED {slot} 127.0.0.1:{}", cluster.nodes[node].port));
}
