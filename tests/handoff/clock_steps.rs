//! Leases and WAIT timeouts under steps of the server's wall clock, and
//! restarts across a step taken while the server was down.
//!
//! Redis expires keys by the wall clock; a lease that was only the key's
//! TTL ended at once when the wall clock stepped 60 s forward (a second
//! holder) and lasted a minute longer when it stepped back. The module
//! measures leases on the monotonic clock (see `src/core/lease.rs`) and keeps a
//! lock Redis expired early (`src/rescue.rs`).
//!
//! Every supported server keys module timers to the wall clock, so an NTP
//! step, a resumed VM or `date -s` used to fire a WAIT's timeout early
//! (forward) or a whole step late (backward). The module measures the wait
//! on the monotonic clock instead. The server here is Valkey 8.1 under
//! libfaketime with only the wall clock faked (Debian's redis-server does
//! not start under libfaketime); the test steps it through the timestamp
//! file while a client waits.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;
use redis::Value;

/// The WAIT timeout under test.
const WAIT_MS: u64 = 2_000;
/// How early or late an answer may come, timed by this test. Early: the
/// server's timers run on its monotonic clock from after the command was
/// sent, so only the whole milliseconds they count in. Late: the target
/// is 50 ms (a step is noticed at the next server cron, every 100 ms, and
/// the wait re-armed then), and this test's own wake-up on a loaded
/// 2-core machine adds to it, so the bound is a second. What it catches
/// is a minute wide: a wait or lease timed on the wall clock moves with
/// the 60 s step (forward: answered at the step, 1.5 s early; back: a
/// minute late, or nil at the 10 s WAIT instead of a grant).
const EARLY_MS: u64 = 20;
const LATE_MS: u64 = 1_000;

struct SteppedServer {
    server: Server,
    clock_file: PathBuf,
}

impl SteppedServer {
    fn start() -> SteppedServer {
        Self::start_with(&[])
    }

    fn start_with(args: &[&str]) -> SteppedServer {
        let binary = valkey_binary().expect("Valkey 8.1 not found: run `make test` (scripts/install-servers.sh valkey-8.1)");
        let lib = libfaketime().expect("libfaketime not found: install Debian's faketime (scripts/install-deps.sh)");
        let clock_dir = tempfile::tempdir().expect("temp dir").keep();
        let clock_file = clock_dir.join("faketime");
        set_offset(&clock_file, "+0");
        let lib = lib.display().to_string();
        let file = clock_file.display().to_string();
        let envs = [
            ("LD_PRELOAD", lib.as_str()),
            ("FAKETIME_TIMESTAMP_FILE", file.as_str()),
            ("FAKETIME_NO_CACHE", "1"),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
        ];
        let server = Server::start_binary_env(&binary, &[], args, &envs);
        SteppedServer { server, clock_file }
    }

    fn step(&self, offset: &str) {
        set_offset(&self.clock_file, offset);
    }
}

fn set_offset(file: &Path, offset: &str) {
    std::fs::write(file, format!("{offset}\n")).expect("write the faketime file");
}

/// A holds `k` and `k2` for an hour; B waits WAIT_MS for `k`, C half as
/// long for `k2` (another wait wakes the server's timer handler first, as
/// on any busy server); the wall clock steps by `offset` half a second in.
/// Returns when B's nil came; C's must come at its own timeout too.
fn wait_across_a_step(offset: &str) -> Duration {
    let s = SteppedServer::start();
    let mut a = s.server.conn();
    let server_time = |c: &mut redis::Connection| -> i64 {
        let t: Vec<String> = cmd("TIME").query(c).expect("TIME");
        t[0].parse().expect("seconds")
    };
    let before = server_time(&mut a);
    grant(&mut a, "k", "A", 3_600_000);
    grant(&mut a, "k2", "A", 3_600_000);
    let mut b = s.server.conn();
    let mut c = s.server.conn();
    b.set_read_timeout(Some(Duration::from_secs(30))).expect("read timeout");
    c.set_read_timeout(Some(Duration::from_secs(30))).expect("read timeout");
    let sent = Instant::now();
    send_cmd(&mut b, cmd("LOCK.ACQUIRE").arg("k").arg("B").arg(10_000).arg("WAIT").arg(WAIT_MS));
    let c_sent = Instant::now();
    send_cmd(&mut c, cmd("LOCK.ACQUIRE").arg("k2").arg("C").arg(10_000).arg("WAIT").arg(WAIT_MS / 2));
    wait_waiters(&mut a, b"k", 1);
    wait_waiters(&mut a, b"k2", 1);
    std::thread::sleep(Duration::from_millis(500));
    s.step(offset);
    let after = server_time(&mut a);
    let moved = after - before;
    assert!(
        (offset.starts_with('+') && moved >= 55) || (offset.starts_with('-') && moved <= -55),
        "the server's wall clock did not step by {offset}: TIME moved {moved} s"
    );
    assert_eq!(recv_reply(&mut c, "C's WAIT"), Ok(Value::Nil), "C's wait ends in nil");
    let c_took = c_sent.elapsed();
    eprintln!("wall clock {offset}: WAIT {} answered after {c_took:?}", WAIT_MS / 2);
    assert!(
        c_took >= Duration::from_millis(WAIT_MS / 2 - EARLY_MS) && c_took <= Duration::from_millis(WAIT_MS / 2 + LATE_MS),
        "{offset}: C's WAIT {} answered after {c_took:?}",
        WAIT_MS / 2
    );
    let reply = recv_reply(&mut b, "B's WAIT");
    let took = sent.elapsed();
    assert_eq!(reply, Ok(Value::Nil), "B's wait ends in nil: A holds k");
    assert_eq!(info(&mut a, b"k").map(|i| i.owner), Some(b"A".to_vec()));
    eprintln!("wall clock {offset}: WAIT {WAIT_MS} answered after {took:?}");
    took
}

fn assert_on_time(offset: &str, took: Duration) {
    assert!(took >= Duration::from_millis(WAIT_MS - EARLY_MS), "{offset}: answered early, after {took:?}");
    assert!(took <= Duration::from_millis(WAIT_MS + LATE_MS), "{offset}: answered late, after {took:?}");
}

#[test]
fn a_wait_ends_at_its_timeout_when_the_wall_clock_steps_forward() {
    assert_on_time("+60", wait_across_a_step("+60"));
}

#[test]
fn a_wait_ends_at_its_timeout_when_the_wall_clock_steps_back() {
    assert_on_time("-60", wait_across_a_step("-60"));
}

/// Grants a lock, stops the server as `stop` does, steps its wall clock by
/// `offset` while it is down, and starts it again with a 60 s quarantine.
/// Returns whether a grant is refused by the quarantine, and the server.
fn restart_across_a_step(args: &[&str], offset: &str, stop: impl FnOnce(&mut Server)) -> (bool, SteppedServer) {
    let mut s = SteppedServer::start_with(args);
    let mut c = s.server.conn();
    grant(&mut c, "held", "A", 600_000);
    if args.contains(&"always") {
        wait_aof_flushed(&mut c);
    }
    drop(c);
    stop(&mut s.server);
    s.step(offset);
    s.server.set_module_args(&["quarantine", "60000"]);
    s.server.start_again();
    let quarantined = match try_cmd(&mut s.server.conn(), cmd("LOCK.ACQUIRE").arg("probe").arg("p").arg(1000)) {
        Ok(Value::Int(_)) => false,
        Err(e) if e.starts_with("TRYAGAIN restart quarantine") => true,
        other => panic!("LOCK.ACQUIRE after the restart: {other:?}"),
    };
    (quarantined, s)
}

const RDB: [&str; 4] = ["--appendonly", "no", "--save", "3600 1"];

/// A lease restored from the data ends at a wall-clock deadline: after a
/// forward step while the server was down it ends early, by the step, so
/// the clean-shutdown record no longer vouches and the quarantine runs.
#[test]
fn a_forward_step_while_down_quarantines_despite_a_clean_shutdown() {
    let (quarantined, s) = restart_across_a_step(&RDB, "+60", |srv| srv.stop());
    assert!(quarantined, "restored leases end 60 s early: the record cannot vouch for them");
    assert!(info(&mut s.server.conn(), b"held").is_some(), "the data itself is still loaded");
}

/// A backward step only makes restored leases last longer: safe.
#[test]
fn a_backward_step_while_down_keeps_the_clean_restart() {
    let (quarantined, s) = restart_across_a_step(&RDB, "-60", |srv| srv.stop());
    assert!(!quarantined, "a clean restart whose leases can only last longer");
    assert_eq!(info(&mut s.server.conn(), b"held").map(|i| i.owner), Some(b"A".to_vec()));
}

/// The same for an AOF written under `appendfsync always` after a crash.
#[test]
fn a_forward_step_while_down_quarantines_an_always_aof_after_a_crash() {
    let always = ["--appendonly", "yes", "--appendfsync", "always", "--save", ""];
    let (quarantined, _s) = restart_across_a_step(&always, "+60", |srv| srv.kill9());
    assert!(quarantined, "restored leases end 60 s early");
    let (quarantined, _s) = restart_across_a_step(&always, "+0", |srv| srv.kill9());
    assert!(!quarantined, "without a step, an always AOF after a crash still skips the quarantine");
}

fn server_seconds(c: &mut redis::Connection) -> i64 {
    let t: Vec<String> = cmd("TIME").query(c).expect("TIME");
    t[0].parse().expect("seconds")
}

/// Steps the wall clock and waits until the server's TIME shows it.
fn step_and_see(s: &SteppedServer, c: &mut redis::Connection, offset: &str) {
    let before = server_seconds(c);
    s.step(offset);
    let moved = server_seconds(c) - before;
    assert!(
        (offset.starts_with('+') && moved >= 55) || (offset.starts_with('-') && moved <= -55),
        "the server's wall clock did not step by {offset}: TIME moved {moved} s"
    );
}

/// +60 s while A holds `k` for 30 s: Redis expires the key by its wall
/// clock at once; the lease has 29 s left on the monotonic clock, so the
/// lock is kept and put back, and neither a newcomer nor a waiter gets it.
#[test]
fn a_held_lease_survives_a_forward_step() {
    let s = SteppedServer::start();
    let mut a = s.server.conn();
    let token = grant(&mut a, "k", "A", 30_000);
    let mut b = s.server.conn();
    b.set_read_timeout(Some(Duration::from_secs(30))).expect("read timeout");
    send_cmd(&mut b, cmd("LOCK.ACQUIRE").arg("k").arg("B").arg(10_000).arg("WAIT").arg(3_000));
    wait_waiters(&mut a, b"k", 1);
    step_and_see(&s, &mut a, "+60");
    // The case as an operator meets it: someone asks 0.3 s after the step.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(acquire(&mut a, b"k", b"C", 1_000), None, "a newcomer 0.3 s after the step");
    let i = info(&mut a, b"k").expect("the lock is still there");
    assert_eq!((i.owner.as_slice(), i.token), (&b"A"[..], token));
    assert!(i.pttl > 25_000 && i.pttl <= 30_000, "lease left after the step: {}", i.pttl);
    // Redis did expire the key by its wall clock (cron and before each
    // sleep), and the module kept the lock.
    let seen = Instant::now();
    while info_field_i64(&mut a, "redislock", "redislock_locks_expired_by_clock_step") == 0 {
        assert!(seen.elapsed() < Duration::from_secs(5), "Redis never expired the key after the step");
        std::thread::sleep(Duration::from_millis(10));
    }
    let pttl: i64 = cmd("PTTL").arg("k").query(&mut a).expect("PTTL");
    assert!(pttl > 25_000 && pttl <= 30_000, "the key is back with its TTL at the new wall clock: {pttl}");
    assert_eq!(recv_reply(&mut b, "B's WAIT"), Ok(Value::Nil), "the waiter is not served while A's lease runs");
    assert_eq!(extend(&mut a, b"k", b"A", 30_000), 1, "A still holds it");
    assert_eq!(release(&mut a, b"k", b"A"), 1);
    assert!(acquire(&mut a, b"k", b"C", 1_000).is_some_and(|t| t > token));
}

/// A holds `k` for 2 s, B waits; the wall clock steps by `offset` half a
/// second in. Returns how long after A's grant B was granted.
fn handoff_across_a_step(offset: &str) -> Duration {
    const LEASE_MS: u64 = 2_000;
    let s = SteppedServer::start();
    let mut a = s.server.conn();
    let mut b = s.server.conn();
    b.set_read_timeout(Some(Duration::from_secs(30))).expect("read timeout");
    let granted = Instant::now();
    let token = grant(&mut a, "k", "A", LEASE_MS as i64);
    send_cmd(&mut b, cmd("LOCK.ACQUIRE").arg("k").arg("B").arg(10_000).arg("WAIT").arg(10_000));
    wait_waiters(&mut a, b"k", 1);
    std::thread::sleep(Duration::from_millis(500));
    step_and_see(&s, &mut a, offset);
    let reply = recv_reply(&mut b, "B's WAIT");
    let took = granted.elapsed();
    assert!(matches!(reply, Ok(Value::Int(t)) if t > token), "B's wait: {reply:?}");
    eprintln!("wall clock {offset}: handoff {:?} after the lease's end", took.saturating_sub(Duration::from_millis(LEASE_MS)));
    // Leases are counted in whole milliseconds of the server's monotonic
    // clock: its end may fall up to 1 ms before `granted` + the lease.
    assert!(
        took + Duration::from_millis(2) >= Duration::from_millis(LEASE_MS),
        "{offset}: B granted {took:?} after A's grant of {LEASE_MS} ms"
    );
    assert!(took <= Duration::from_millis(LEASE_MS + LATE_MS), "{offset}: B granted late, {took:?} after A's grant");
    took
}

#[test]
fn a_waited_lease_hands_over_at_its_end_when_the_wall_clock_steps_forward() {
    handoff_across_a_step("+60");
}

#[test]
fn a_waited_lease_hands_over_at_its_end_when_the_wall_clock_steps_back() {
    handoff_across_a_step("-60");
}

/// -60 s: the key's TTL now runs a minute longer than the lease; the lock
/// is free for anyone at the lease's end all the same.
#[test]
fn a_backward_step_does_not_lengthen_a_lease() {
    let s = SteppedServer::start();
    let mut a = s.server.conn();
    let granted = Instant::now();
    let token = grant(&mut a, "k", "A", 1_500);
    step_and_see(&s, &mut a, "-60");
    assert_eq!(acquire(&mut a, b"k", b"C", 1_000), None, "still A's, 1.5 s lease");
    std::thread::sleep(Duration::from_millis(1_500).saturating_sub(granted.elapsed()) + Duration::from_millis(20));
    assert!(info(&mut a, b"k").is_none(), "LOCK.INFO after the lease's end");
    assert!(acquire(&mut a, b"k", b"C", 1_000).is_some_and(|t| t > token), "C after A's lease");
}

/// A lock loaded from the RDB knows its lease only as the key's TTL until
/// the load ends; a step right after a restart must find it running too.
#[test]
fn a_lease_loaded_at_restart_survives_a_forward_step_before_anyone_touches_it() {
    let mut s = SteppedServer::start_with(&RDB);
    let token = grant(&mut s.server.conn(), "k", "A", 30_000);
    s.server.stop();
    s.server.start_again();
    let mut c = s.server.conn();
    step_and_see(&s, &mut c, "+60");
    let seen = Instant::now();
    while info_field_i64(&mut c, "redislock", "redislock_locks_expired_by_clock_step") == 0 {
        assert!(seen.elapsed() < Duration::from_secs(5), "Redis never expired the loaded key after the step");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(acquire(&mut c, b"k", b"C", 1_000), None, "a newcomer after restart and step");
    assert_eq!(info(&mut c, b"k").map(|i| (i.owner, i.token)), Some((b"A".to_vec(), token)));
}

/// After a step the keys' TTLs are a step off; the module sets them again
/// at the new wall clock: a lease that ends is reclaimed at its end (not a
/// minute later), and PTTL shows the lease again.
#[test]
fn after_a_step_lock_keys_are_reclaimed_at_the_lease_end_and_show_it_in_pttl() {
    let s = SteppedServer::start();
    let mut a = s.server.conn();
    let granted = Instant::now();
    grant(&mut a, "short", "A", 1_500);
    grant(&mut a, "long", "A", 600_000);
    step_and_see(&s, &mut a, "-60");
    // The realignment runs within a cron tick (100 ms) of the step.
    let seen = Instant::now();
    loop {
        let pttl: i64 = cmd("PTTL").arg("long").query(&mut a).expect("PTTL");
        if pttl <= 600_000 {
            assert!(pttl > 590_000, "PTTL of `long` after the step: {pttl}");
            break;
        }
        assert!(seen.elapsed() < Duration::from_secs(5), "PTTL of `long` still a minute long: {pttl}");
        std::thread::sleep(Duration::from_millis(10));
    }
    let pttl: i64 = cmd("PTTL").arg("short").query(&mut a).expect("PTTL");
    assert!(pttl <= 1_500, "PTTL of `short` after the step: {pttl}");
    // Nobody touches `short`: Redis's own expiry reclaims it at the lease's end.
    std::thread::sleep(Duration::from_millis(1_500).saturating_sub(granted.elapsed()));
    let seen = Instant::now();
    loop {
        let dbsize: i64 = cmd("DBSIZE").query(&mut a).expect("DBSIZE");
        if dbsize == 1 {
            break;
        }
        assert!(seen.elapsed() < Duration::from_secs(2), "`short` still in memory after its lease: DBSIZE {dbsize}");
        std::thread::sleep(Duration::from_millis(10));
    }
    eprintln!(
        "wall clock -60: `short` reclaimed {:?} after its lease's end",
        granted.elapsed().saturating_sub(Duration::from_millis(1_500))
    );
}
