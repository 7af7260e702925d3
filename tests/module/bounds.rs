//! Tokens a client brings are bounded by the clock (RESTORE), a master's are
//! not (replication),
//! a restart without data never issues smaller tokens when the quarantine
//! covers the allowed lead, and a converted plain-string lock's lease is
//! capped by max-ttl.

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
