//! Handoffs the module makes on its own (a waited lock's lease runs out, a
//! key is deleted) obey the server as a client's LOCK.ACQUIRE would: not
//! while writes are paused (CLIENT PAUSE, FAILOVER, SHUTDOWN waiting for a
//! replica), not under NOREPLICAS, not under OOM. Each case lets a lock
//! with a waiter expire in that state; the server must stay up and the
//! waiter must be served only once the state has passed.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use redis::{Connection, Value};

/// A lock on `key` held by `a` for `ttl` ms, and a second connection
/// waiting for it (`LOCK.ACQUIRE key b 60000 WAIT 20000`).
fn held_with_waiter(srv: &Server, key: &str, ttl: i64) -> (Connection, Connection, i64) {
    let mut c = srv.conn();
    let token = grant(&mut c, key, "a", ttl);
    let mut waiter = srv.conn();
    send_cmd(&mut waiter, cmd("LOCK.ACQUIRE").arg(key).arg("b").arg(60_000).arg("WAIT").arg(20_000));
    wait_waiters(&mut c, key.as_bytes(), 1);
    (c, waiter, token)
}

/// Nobody holds `key` and `n` clients are still blocked: the lease ran
/// out and no handoff happened. (A read that times out would close the
/// waiter's connection, so this asks the server.)
fn free_with_blocked(c: &mut Connection, key: &str, n: i64) {
    assert!(info(c, key.as_bytes()).is_none(), "{key}: nobody may hold the lock");
    assert_eq!(blocked_clients(c), n, "{key}: the waiters must still be blocked");
}

/// The waiter's reply within `within`; `None` if it is still blocked.
fn waiter_reply(waiter: &mut Connection, within: Duration) -> Option<Result<Value, String>> {
    waiter.set_read_timeout(Some(within)).expect("read timeout");
    try_recv_reply(waiter)
}

fn assert_no_assertion(srv: &Server) {
    let log = srv.log_text();
    assert!(!log.contains("ASSERTION FAILED") && !log.contains("crashed by signal"), "server log:\n{}", srv.log_tail(60));
}

/// How much earlier than asked a pause may end, as the server rounds it.
const PAUSE_GRAIN_MS: u64 = 2;

#[test]
fn client_pause_write_and_all_hold_the_handoff_until_they_end() {
    for mode in ["WRITE", "ALL"] {
        let mut srv = Server::start();
        let (mut c, mut waiter, first) = held_with_waiter(&srv, "k", 300);
        let pause_ms = 1500u64;
        let paused_at = Instant::now();
        ok_cmd(&mut c, cmd("CLIENT").arg("PAUSE").arg(pause_ms).arg(mode));
        // The lease ends 300 ms in, well inside the pause: the lease timer
        // fires while paused (Redis keeps the expired key in place then).
        let reply = waiter_reply(&mut waiter, Duration::from_secs(10)).expect("the waiter is answered");
        let waited = paused_at.elapsed();
        let token = match reply {
            Ok(Value::Int(t)) => t,
            other => panic!("{mode}: the waiter must get the lock after the pause, got {other:?}"),
        };
        // The server keeps the pause's end in whole milliseconds of its
        // cached clock, so the pause may end up to a millisecond short of
        // `pause_ms` after our send (seen: 1.4997 s on Valkey 8.1). A
        // handoff during the pause would come at the lease's end, 300 ms in.
        assert!(
            waited >= Duration::from_millis(pause_ms - PAUSE_GRAIN_MS),
            "{mode}: granted {waited:?} after CLIENT PAUSE {pause_ms}: a handoff was written during the pause"
        );
        assert!(token > first, "{mode}: tokens increase ({first} then {token})");
        assert!(srv.is_alive(), "{mode}: the server died");
        let held = info(&mut c, b"k").expect("held by the waiter");
        assert_eq!((held.owner.as_slice(), held.token), (&b"b"[..], token), "{mode}");
        assert_no_assertion(&srv);
    }
}

#[test]
fn noreplicas_holds_the_handoff_until_enough_replicas() {
    let srv = Server::start();
    let (mut c, mut waiter, first) = held_with_waiter(&srv, "k", 300);
    ok_cmd(&mut c, cmd("CONFIG").arg("SET").arg("min-replicas-max-lag").arg(10));
    ok_cmd(&mut c, cmd("CONFIG").arg("SET").arg("min-replicas-to-write").arg(1));
    // A client's ACQUIRE is refused now; so must the module's own handoff.
    let e = expect_err(&mut c, cmd("LOCK.ACQUIRE").arg("other").arg("x").arg(1000));
    assert!(e.starts_with("NOREPLICAS"), "{e}");
    std::thread::sleep(Duration::from_millis(1200)); // the lease (300 ms) runs out
    free_with_blocked(&mut c, "k", 1);
    ok_cmd(&mut c, cmd("CONFIG").arg("SET").arg("min-replicas-to-write").arg(0));
    match waiter_reply(&mut waiter, Duration::from_secs(5)) {
        Some(Ok(Value::Int(t))) => assert!(t > first),
        other => panic!("once writes are allowed the waiter is served, got {other:?}"),
    }
    assert_eq!(info(&mut c, b"k").expect("held").owner, b"b");
}

#[test]
fn oom_holds_the_handoff_after_release_and_expiry() {
    let srv = Server::start();
    let (mut c, mut released_waiter, _) = held_with_waiter(&srv, "r", 60_000);
    let (_c2, mut expired_waiter, _) = held_with_waiter(&srv, "e", 400);
    ok_cmd(&mut c, cmd("CONFIG").arg("SET").arg("maxmemory-policy").arg("noeviction"));
    ok_cmd(&mut c, cmd("CONFIG").arg("SET").arg("maxmemory").arg(1));
    let e = expect_err(&mut c, cmd("LOCK.ACQUIRE").arg("other").arg("x").arg(1000));
    assert!(e.starts_with("OOM"), "{e}");
    // RELEASE frees memory and is allowed; its handoff is a grant, which is not.
    assert_eq!(release(&mut c, b"r", b"a"), 1);
    std::thread::sleep(Duration::from_millis(1000)); // the lease of "e" (400 ms) runs out
    free_with_blocked(&mut c, "r", 2);
    free_with_blocked(&mut c, "e", 2);
    ok_cmd(&mut c, cmd("CONFIG").arg("SET").arg("maxmemory").arg(0));
    for (key, waiter) in [("r", &mut released_waiter), ("e", &mut expired_waiter)] {
        match waiter_reply(waiter, Duration::from_secs(5)) {
            Some(Ok(Value::Int(_))) => {}
            other => panic!("{key}: served once memory allows, got {other:?}"),
        }
        assert_eq!(info(&mut c, key.as_bytes()).expect("held").owner, b"b");
    }
}

#[test]
fn failover_with_a_lagging_replica_neither_crashes_nor_grants_during_it() {
    let master = Server::start();
    let replica = Server::start();
    attach_replica(&master, &replica);
    let (mut c, mut waiter, first) = held_with_waiter(&master, "k", 1000);
    replica.sigstop();
    // The replica must be behind, or the failover would not wait for it.
    ok_cmd(&mut c, cmd("SET").arg("behind").arg(1));
    let started = Instant::now();
    ok_cmd(&mut c, cmd("FAILOVER").arg("TIMEOUT").arg(2000));
    // Writes stay paused while the master waits for its replica; the lease
    // ends inside that wait. The failover then times out and is aborted.
    let reply = waiter_reply(&mut waiter, Duration::from_secs(15));
    replica.sigcont();
    let token = match reply {
        Some(Ok(Value::Int(t))) => t,
        other => panic!("after the aborted failover the waiter is served, got {other:?}"),
    };
    assert!(started.elapsed() >= Duration::from_millis(1900), "granted during the failover pause ({:?})", started.elapsed());
    assert!(token > first);
    assert_eq!(info_field(&mut c, "replication", "role"), "master");
    assert_no_assertion(&master);
    wait_replica_synced(&master, &replica);
    let on_replica = info(&mut replica.conn(), b"k").expect("the handoff reached the replica");
    assert_eq!((on_replica.owner.as_slice(), on_replica.token), (&b"b"[..], token));
}

#[test]
fn shutdown_waiting_for_a_lagging_replica_exits_cleanly_with_its_rdb() {
    let mut master = Server::start_with(&["--save", "3600 1", "--shutdown-timeout", "3"]);
    let replica = Server::start();
    attach_replica(&master, &replica);
    let (mut c, mut waiter, _) = held_with_waiter(&master, "k", 1500);
    replica.sigstop();
    // The replica must be behind, or SHUTDOWN would not wait for it.
    ok_cmd(&mut c, cmd("SET").arg("behind").arg(1));
    // SHUTDOWN pauses writes and waits up to 3 s for the stopped replica;
    // the lease runs out in that wait.
    send_cmd(&mut c, &cmd("SHUTDOWN"));
    let status = master.wait_exit(Duration::from_secs(15));
    replica.sigcont();
    let status = status.expect("the master exits after its shutdown timeout");
    assert!(status.success(), "clean exit expected, got {status:?}\n{}", master.log_tail(40));
    assert_no_assertion(&master);
    let log = master.log_text();
    assert!(log.contains("DB saved on disk"), "the final RDB was written:\n{}", master.log_tail(30));
    if let Some(Ok(Value::Int(t))) = waiter_reply(&mut waiter, Duration::from_secs(2)) {
        panic!("the waiter was granted token {t} during the shutdown pause");
    }
    assert!(master.dir.join("dump.rdb").is_file());
}
