//! Tokens a client brings are bounded by the clock (RESTORE), a master's are
//! not (replication),
//! a restart without data never issues smaller tokens when the quarantine
//! covers the allowed lead, a converted plain-string lock's lease is
//! capped by max-ttl, and a set's keys by max-set-keys.

use crate::common;

use std::time::Duration;

use common::*;
use redis::Value;

const YEAR_MS: &str = "31536000000";

/// A lock holding `token`, dumped from a server that allows a year's lead.
fn dump_of_lock_with_token(token: i64) -> Vec<u8> {
    let s = Server::start_full(&["max-token-lead", YEAR_MS], &[]);
    let mut c = s.conn();
    assert_eq!(acquire_fence(&mut c, b"k", b"o", 600_000, token), Some(token));
    match ok_cmd(&mut c, cmd("DUMP").arg("k")) {
        Value::BulkString(b) => b,
        other => panic!("DUMP of a lock: {other:?}"),
    }
}

#[test]
fn restore_of_a_token_beyond_the_lead_is_refused() {
    let far = now_unix_us() + 10 * 24 * 3600 * 1_000_000;
    let payload = dump_of_lock_with_token(far);
    let s = Server::start();
    let mut c = s.conn();
    let e = expect_err(&mut c, cmd("RESTORE").arg("k").arg(0).arg(payload.as_slice()));
    assert!(e.contains("Bad data format"), "{e}");
    assert!(s.log_text().contains("RESTORE refused: the lock's token is ahead of this server's clock"), "the log says why");
    assert!(!exists(&mut c, b"k"));
    let t = grant(&mut c, "next", "o", 1000);
    assert!(t < far && t < now_unix_us() + 1_000_000, "the counter was not raised: {t}");

    // Within the lead, RESTORE works and raises the counter (as before).
    let near = far_future_token();
    let payload = dump_of_lock_with_token(near);
    ok_cmd(&mut c, cmd("RESTORE").arg("k2").arg(0).arg(payload.as_slice()));
    assert_eq!(info(&mut c, b"k2").expect("restored").token, near);
    assert!(grant(&mut c, "after", "o", 1000) > near);
}

/// The bound is for clients: a replica applies what its master granted,
/// as a LOCK.APPLY or a RESTORE the master accepted, whatever its own
/// clock says. Refusing it left the replica without a lock its master
/// holds, free to grant it again once promoted.
#[test]
fn a_replica_keeps_its_masters_tokens_however_far_ahead_of_its_clock() {
    let master = Server::start_full(&["max-token-lead", YEAR_MS], &[]);
    let replica = Server::start();
    attach_replica(&master, &replica);
    let mut m = master.conn();
    let far = now_unix_us() + 10 * 24 * 3600 * 1_000_000;
    assert_eq!(acquire_fence(&mut m, b"k", b"o", 600_000, far), Some(far));
    let restored = far + 1_000_000;
    let payload = dump_of_lock_with_token(restored);
    ok_cmd(&mut m, cmd("RESTORE").arg("r").arg(0).arg(payload.as_slice()));
    wait1(&mut m);
    let mut r = replica.conn();
    let i = info(&mut r, b"k").expect("the replica applied its master's grant");
    assert_eq!((i.owner.as_slice(), i.token), (&b"o"[..], far));
    assert_eq!(info(&mut r, b"r").expect("the replica applied its master's RESTORE").token, restored);
    assert_eq!(pexpiretime(&mut r, b"k"), pexpiretime(&mut m, b"k"));
    assert!(!replica.log_text().contains("max-token-lead"), "nothing refused:\n{}", replica.log_tail(20));
    ok_cmd(&mut r, cmd("REPLICAOF").arg("NO").arg("ONE"));
    assert!(grant(&mut r, "next", "o", 1000) > restored, "the promoted replica's counter follows its master's tokens");
    // A replica attached later gets them by full sync, as they are.
    let late = Server::start();
    attach_replica(&master, &late);
    let mut l = late.conn();
    assert_eq!(info(&mut l, b"k").expect("full sync: k").token, far);
    assert_eq!(info(&mut l, b"r").expect("full sync: r").token, restored);
}

/// With the quarantine at least the lead, tokens after a restart without
/// data exceed every token before it; with no quarantine they may not.
#[test]
fn a_restart_without_data_issues_larger_tokens_when_the_quarantine_covers_the_lead() {
    for (quarantine, must_exceed) in [("3000", true), ("0", false)] {
        let mut s = Server::start_full(&["max-token-lead", "3000", "quarantine", quarantine], &[]);
        let mut c = s.conn();
        wait_until(Duration::from_secs(10), "the first quarantine to pass", || {
            matches!(try_cmd(&mut c, cmd("LOCK.ACQUIRE").arg("probe").arg("o").arg(100)), Ok(Value::Int(_)))
        });
        let fenced = now_unix_us() + 2_900_000;
        assert_eq!(acquire_fence(&mut c, b"k", b"a", 60_000, fenced), Some(fenced));
        drop(c);
        s.kill9();
        s.start_again();
        let mut c = s.conn();
        let mut after = 0;
        wait_until(Duration::from_secs(10), "a grant after the restart", || {
            match try_cmd(&mut c, cmd("LOCK.ACQUIRE").arg("k").arg("b").arg(1000)) {
                Ok(Value::Int(t)) => {
                    after = t;
                    true
                }
                _ => false,
            }
        });
        if must_exceed {
            assert!(after > fenced, "quarantine {quarantine}: token went backwards ({after} after {fenced})");
        } else {
            assert!(after < fenced, "quarantine 0 cannot cover a FENCE lead: expected a smaller token, got {after} after {fenced}");
        }
    }
}

#[test]
fn converting_a_plain_string_lock_caps_its_lease_at_max_ttl() {
    let s = Server::start_full(&["max-ttl", "60000"], &[]);
    let mut c = s.conn();
    ok_cmd(&mut c, cmd("SET").arg("k").arg("owner").arg("EX").arg(315_360_000));
    let t = grant(&mut c, "k", "owner", 1000);
    assert!(t > 0);
    let left = pttl(&mut c, b"k");
    assert!(left > 55_000 && left <= 60_000, "a 10-year string lease kept {left} ms");
    // A shorter string lease is kept as it is.
    ok_cmd(&mut c, cmd("SET").arg("j").arg("owner").arg("PX").arg(5000));
    grant(&mut c, "j", "owner", 30_000);
    let left = pttl(&mut c, b"j");
    assert!(left > 3000 && left <= 5000, "{left}");
}

fn config_get(c: &mut redis::Connection, name: &str) -> String {
    let v: Vec<String> = cmd("CONFIG").arg("GET").arg(name).query(c).expect("CONFIG GET");
    assert_eq!(v.len(), 2, "CONFIG GET {name} returned {v:?}");
    v[1].clone()
}

fn set_command(name: &str, keys: &[String], tail: &[&str]) -> redis::Cmd {
    let mut c = cmd(name);
    c.arg(keys.len()).arg(keys).arg(tail);
    c
}

fn keys(n: usize, prefix: &str) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}{i}")).collect()
}

/// One 100,000-key set blocked the server 0.5 to 2 s on acquire, handoff
/// and release. `redislock.max-set-keys` (1024 unless set) bounds every
/// set command, refused before any key is touched; at the bound a set is
/// taken and released whole, and CONFIG SET moves the bound at once.
#[test]
fn a_set_beyond_max_set_keys_is_refused_before_any_work() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(config_get(&mut c, "redislock.max-set-keys"), "1024");
    assert_eq!(info_field_i64(&mut c, "redislock", "redislock_max_set_keys"), 1024);
    let over = "ERR numkeys exceeds redislock.max-set-keys (1024 keys)";
    let many = keys(1025, "k");
    assert_eq!(expect_err(&mut c, &set_command("LOCK.MACQUIRE", &many, &["me", "60000"])), over);
    assert_eq!(expect_err(&mut c, &set_command("LOCK.MACQUIRE", &many, &["me", "60000", "SHARED", "WAIT", "0"])), over);
    assert_eq!(int_of(&ok_cmd(&mut c, &cmd("DBSIZE")), "DBSIZE"), 0, "a refused set holds nothing");
    // Held one by one, such keys are still refused as a set, and kept.
    for key in &many[..3] {
        grant(&mut c, key, "me", 60_000);
    }
    assert_eq!(expect_err(&mut c, &set_command("LOCK.MRELEASE", &many, &["me"])), over);
    assert_eq!(expect_err(&mut c, &set_command("LOCK.MEXTEND", &many, &["me", "60000"])), over);
    assert_eq!(int_of(&ok_cmd(&mut c, &cmd("DBSIZE")), "DBSIZE"), 3, "a refused release frees nothing");
    assert_eq!(int_of(&ok_cmd(&mut c, &set_command("LOCK.MRELEASE", &many[..3], &["me"])), "MRELEASE"), 3);

    let at_bound = keys(1024, "b");
    assert!(matches!(ok_cmd(&mut c, &set_command("LOCK.MACQUIRE", &at_bound, &["me", "60000"])), Value::Int(_)));
    assert_eq!(int_of(&ok_cmd(&mut c, &cmd("DBSIZE")), "DBSIZE"), 1024);
    assert_eq!(int_of(&ok_cmd(&mut c, &set_command("LOCK.MEXTEND", &at_bound, &["me", "60000"])), "MEXTEND"), 1024);
    assert_eq!(int_of(&ok_cmd(&mut c, &set_command("LOCK.MRELEASE", &at_bound, &["me"])), "MRELEASE"), 1024);

    // At run time the bound moves at once; a set taken under a higher
    // bound is released in parts.
    let twenty = keys(20, "t");
    assert!(matches!(ok_cmd(&mut c, &set_command("LOCK.MACQUIRE", &twenty, &["me", "60000"])), Value::Int(_)));
    ok_cmd(&mut c, cmd("CONFIG").arg("SET").arg("redislock.max-set-keys").arg(10));
    assert_eq!(info_field_i64(&mut c, "redislock", "redislock_max_set_keys"), 10);
    let over = "ERR numkeys exceeds redislock.max-set-keys (10 keys)";
    assert_eq!(expect_err(&mut c, &set_command("LOCK.MRELEASE", &twenty, &["me"])), over);
    assert_eq!(expect_err(&mut c, &set_command("LOCK.MACQUIRE", &keys(11, "n"), &["me", "60000"])), over);
    for half in twenty.chunks(10) {
        assert_eq!(int_of(&ok_cmd(&mut c, &set_command("LOCK.MRELEASE", half, &["me"])), "MRELEASE"), 10);
    }
    assert!(matches!(ok_cmd(&mut c, &set_command("LOCK.MACQUIRE", &keys(10, "n"), &["me", "60000"])), Value::Int(_)));

    for bad in ["0", "-1", "1000001", "many", ""] {
        assert!(try_cmd(&mut c, cmd("CONFIG").arg("SET").arg("redislock.max-set-keys").arg(bad)).is_err(), "{bad:?} must be refused");
        assert_eq!(config_get(&mut c, "redislock.max-set-keys"), "10", "after refused {bad:?}");
    }
    ok_cmd(&mut c, cmd("CONFIG").arg("SET").arg("redislock.max-set-keys").arg(1_000_000));
    assert_eq!(config_get(&mut c, "redislock.max-set-keys"), "1000000");
}

/// The bound is set on the `loadmodule` line like the other settings; a
/// bad value there keeps the module from loading.
#[test]
fn max_set_keys_from_the_module_line() {
    let s = Server::start_full(&["max-set-keys", "3"], &[]);
    let mut c = s.conn();
    assert_eq!(config_get(&mut c, "redislock.max-set-keys"), "3");
    let e = expect_err(&mut c, &set_command("LOCK.MACQUIRE", &keys(4, "k"), &["me", "1000"]));
    assert_eq!(e, "ERR numkeys exceeds redislock.max-set-keys (3 keys)");
    assert!(matches!(ok_cmd(&mut c, &set_command("LOCK.MACQUIRE", &keys(3, "k"), &["me", "1000"])), Value::Int(_)));
    for bad in ["0", "1000001"] {
        match Server::try_start_full(&["max-set-keys", bad], &[]) {
            Err(e) => assert!(e.exited.is_some(), "{e}"),
            Ok(s) => {
                let text = format!("{:?}", ok_cmd(&mut s.conn(), cmd("MODULE").arg("LIST")));
                assert!(!text.contains("redislock"), "module loaded with max-set-keys {bad}: {text}");
            }
        }
    }
}
