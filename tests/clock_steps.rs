//! WAIT timeouts under steps of the server's wall clock, and restarts
//! across a step taken while the server was down.
//!
//! Every supported server keys module timers to the wall clock, so an NTP
//! step, a resumed VM or `date -s` used to fire a WAIT's timeout early
//! (forward) or a whole step late (backward). The module measures the wait
//! on the monotonic clock instead. The server here is Valkey 8.1 under
//! libfaketime with only the wall clock faked (Debian's redis-server does
//! not start under libfaketime); the test steps it through the timestamp
//! file while a client waits.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;
use redis::Value;

/// The WAIT timeout under test.
const WAIT_MS: u64 = 2_000;
/// How early or late an answer may come: the target is 50 ms; the margin
/// is for a loaded 2-core machine (a step is noticed at the next server
/// cron, every 100 ms, and the wait re-armed then).
const EARLY_MS: u64 = 20;
const LATE_MS: u64 = 150;

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
