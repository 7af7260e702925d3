//! The quorum under steps of the servers' wall clocks: the clock-jump
//! objection to Redlock, measured.
//!
//! Five Valkey 8.1 servers with the module, each under libfaketime with
//! only the wall clock faked through a timestamp file, so a test steps a
//! running server's wall clock (as an NTP step, a resumed VM or `date -s`
//! does) while its monotonic clock runs on. Redis expires keys by the wall
//! clock; before leases ran on the monotonic clock, +60 s on three of five
//! servers handed a held 30 s lock to the next client 0.3 s later.

mod common;

use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use common::history::History;
use common::*;
use redlock::{Error, Settings};

const MS: fn(u64) -> Duration = Duration::from_millis;

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// How many of the five servers have their clocks stepped: a majority.
const STEPPED: usize = 3;

struct SteppedQuorum {
    cluster: Cluster,
    files: Vec<PathBuf>,
    _dir: tempfile::TempDir,
}

impl SteppedQuorum {
    fn start() -> SteppedQuorum {
        let dir = tempfile::tempdir().expect("temp dir");
        let files: Vec<PathBuf> = (0..5).map(|i| dir.path().join(format!("clock-{i}"))).collect();
        for f in &files {
            std::fs::write(f, "+0\n").expect("write the faketime file");
        }
        let cluster = Cluster::start_opts(files.iter().map(|f| Opts::valkey_stepped(f)).collect());
        SteppedQuorum { cluster, files, _dir: dir }
    }

    fn write_offset(&self, offset: &str) {
        for f in &self.files[..STEPPED] {
            std::fs::write(f, format!("{offset}\n")).expect("write the faketime file");
        }
    }

    async fn unix_seconds(&self, i: usize) -> i64 {
        match self.cluster.servers[i].ok(&redis::cmd("TIME")).await {
            redis::Value::Array(parts) => match parts.first() {
                Some(redis::Value::BulkString(s)) => String::from_utf8_lossy(s).parse().expect("seconds"),
                other => panic!("TIME: {other:?}"),
            },
            other => panic!("TIME: {other:?}"),
        }
    }

    /// Steps the wall clocks of the first three servers by `offset` and
    /// returns once each one's TIME shows it (libfaketime rereads the file
    /// on its own schedule).
    async fn step(&self, offset: &str) {
        let expected: i64 = offset.trim_start_matches('+').parse().expect("offset");
        let before: Vec<i64> = futures_seconds(self, STEPPED).await;
        self.write_offset(offset);
        let since = Instant::now();
        for (i, was) in before.iter().enumerate() {
            loop {
                let moved = self.unix_seconds(i).await - was;
                if (expected > 0 && moved >= expected - 5) || (expected < 0 && moved <= expected + 5) {
                    break;
                }
                assert!(since.elapsed() < Duration::from_secs(5), "server {i}'s wall clock did not step by {offset}");
                tokio::time::sleep(MS(10)).await;
            }
        }
    }
}

async fn futures_seconds(q: &SteppedQuorum, n: usize) -> Vec<i64> {
    let mut out = Vec::new();
    for i in 0..n {
        out.push(q.unix_seconds(i).await);
    }
    out
}

fn settings() -> Settings {
    Settings { request_timeout: MS(250), connect_timeout: MS(1000), retry_delay: (MS(5), MS(15)), ..Settings::default() }
}

/// +60 s on three of five while A holds `r` for 30 s: Redis on those three
/// expires the key at once, the module keeps the lock, and B's attempt 0.3 s
/// later is refused everywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forward_step_on_a_majority_does_not_hand_a_held_lock_to_another() {
    let _serial = serial();
    let q = SteppedQuorum::start();
    let (rl_a, rl_b) = (q.cluster.redlock(settings()), q.cluster.redlock(settings()));
    let a = rl_a.try_lock("r", Duration::from_secs(30)).await.expect("A acquires");
    let a_token = a.token.expect("token");
    q.step("+60").await;
    tokio::time::sleep(MS(300)).await;
    match rl_b.try_lock("r", Duration::from_secs(30)).await {
        Err(Error::NotAcquired { .. }) => {}
        other => panic!("B 0.3 s after +60 s on 3 of 5: {other:?}"),
    }
    for i in 0..STEPPED {
        let s = &q.cluster.servers[i];
        let info = s.info("r").await.unwrap_or_else(|| panic!("server {i}: the lock is gone"));
        assert_eq!((info.owner.as_str(), info.token), (a.owner.as_str(), Some(a_token)), "server {i}");
        let expired = s.ok(redis::cmd("INFO").arg("redislock")).await;
        let text = match expired {
            redis::Value::BulkString(b) => String::from_utf8_lossy(&b).into_owned(),
            redis::Value::VerbatimString { text, .. } => text,
            other => panic!("INFO: {other:?}"),
        };
        assert!(
            !text.contains("redislock_locks_expired_by_clock_step:0"),
            "server {i}: Redis never expired the key, the step proved nothing:\n{text}"
        );
    }
    rl_a.release(&a).await.expect("A releases");
    let b = rl_b.try_lock("r", Duration::from_secs(30)).await.expect("B after A's release");
    assert!(b.token.expect("token") > a_token);
}

/// A holds `r` for 3 s, B waits (the client's line and the servers' WAIT);
/// three of five wall clocks step by `offset` half a second in. B must be
/// granted no earlier than A's lease ends, and soon after.
async fn handoff_across_a_step(offset: &str) -> Duration {
    let q = SteppedQuorum::start();
    let (rl_a, rl_b) = (q.cluster.redlock(settings()), q.cluster.redlock(settings()));
    let ttl = Duration::from_secs(3);
    let a = rl_a.try_lock("r", ttl).await.expect("A acquires");
    let a_token = a.token.expect("token");
    let waiter = tokio::spawn(async move {
        let b = rl_b.lock_until("r", ttl, Some(Instant::now() + Duration::from_secs(10))).await;
        (b, Instant::now())
    });
    tokio::time::sleep(MS(500)).await;
    q.step(offset).await;
    let (b, granted) = tokio::time::timeout(Duration::from_secs(15), waiter).await.expect("B stuck").expect("B panicked");
    let b = b.unwrap_or_else(|e| panic!("{offset}: B: {e}"));
    assert!(b.token.expect("token") > a_token);
    // A's lease on each server started after `acquired_at`; B needs a
    // majority, each granting only once A's lease there has ended.
    let after = granted.duration_since(a.acquired_at);
    eprintln!("wall clocks {offset} on 3 of 5: B granted {:?} after A's lease end", after.saturating_sub(ttl));
    assert!(after >= ttl, "{offset}: B granted {after:?} after A's acquisition, lease {ttl:?}");
    assert!(after <= ttl + MS(400), "{offset}: B granted late, {after:?} after A's acquisition");
    after - ttl
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waited_lock_hands_over_at_the_lease_end_across_a_forward_step() {
    let _serial = serial();
    handoff_across_a_step("+60").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waited_lock_hands_over_at_the_lease_end_across_a_backward_step() {
    let _serial = serial();
    handoff_across_a_step("-60").await;
}

/// Four clients contend while three of five wall clocks step +60 s, -60 s,
/// +60 s. Holds are long (0.5-0.8 s of a 3 s lease) so that every step
/// lands while a lock is held, which is when a wall-clock lease broke:
/// one holder at a time, tokens in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contention_across_steps_of_a_majority_of_clocks() {
    let _serial = serial();
    let q = std::sync::Arc::new(SteppedQuorum::start());
    let history = History::new();
    let end = Instant::now() + Duration::from_secs(7);
    let mut tasks = Vec::new();
    for client in 0..4 {
        let rl = q.cluster.redlock(settings());
        let history = history.clone();
        tasks.push(tokio::spawn(async move {
            while Instant::now() < end {
                // Single attempts, as a polling Redlock client makes: the
                // servers alone decide (the client's line would keep a
                // waiter off a lock whose line instance is not stepped).
                let lock = match rl.try_lock("c", Duration::from_secs(3)).await {
                    Ok(lock) => lock,
                    Err(Error::NotAcquired { .. }) => {
                        tokio::time::sleep(MS(5)).await;
                        continue;
                    }
                    Err(e) => panic!("client {client}: {e}"),
                };
                let granted = Instant::now();
                tokio::time::sleep(MS(500 + 100 * client as u64)).await;
                history.record(format!("client {client}"), lock.token.expect("token"), granted, Instant::now());
                let _ = rl.release(&lock).await;
            }
        }));
    }
    for offset in ["+60", "-60", "+60"] {
        tokio::time::sleep(MS(1500)).await;
        q.write_offset(offset);
    }
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(30), t).await.expect("client stuck").expect("client panicked");
    }
    let verdict = history.check();
    println!(
        "STEPS | 4 clients holding 0.5-0.8 s, 3 of 5 wall clocks stepped +60 s, -60 s, +60 s | grants {} | overlaps {} | token inversions {}",
        verdict.grants,
        verdict.overlaps.len(),
        verdict.inversions.len()
    );
    verdict.assert_exclusive("contention across clock steps");
    assert!(verdict.inversions.is_empty(), "tokens out of order: {:?}", verdict.inversions);
    assert!(verdict.grants >= 6, "only {} grants in 7 s", verdict.grants);
}

/// A wait with a deadline ends at its deadline across a step of `offset`
/// on three of five servers (the servers' WAIT timeouts run on their
/// monotonic clocks, the client's deadline on its own): neither early
/// nor late by more than 50 ms (plus scheduling on a loaded machine).
async fn wait_deadline_across_a_step(offset: &str) {
    let q = SteppedQuorum::start();
    let (rl_a, rl_b) = (q.cluster.redlock(settings()), q.cluster.redlock(settings()));
    let _a = rl_a.try_lock("r", Duration::from_secs(30)).await.expect("A acquires");
    let wait = Duration::from_secs(2);
    let started = Instant::now();
    let waiter = tokio::spawn(async move { rl_b.lock_until("r", Duration::from_secs(30), Some(Instant::now() + wait)).await });
    tokio::time::sleep(MS(500)).await;
    q.step(offset).await;
    let b = tokio::time::timeout(Duration::from_secs(15), waiter).await.expect("B stuck").expect("B panicked");
    let took = started.elapsed();
    assert!(matches!(b, Err(Error::NotAcquired { .. })), "{offset}: B's wait: {b:?}");
    eprintln!("wall clocks {offset} on 3 of 5: a {wait:?} wait ended after {took:?}");
    // The client may give up an attempt that could not end by its deadline.
    assert!(took >= wait - MS(50), "{offset}: the wait ended early, after {took:?}");
    assert!(took <= wait + MS(150), "{offset}: the wait ended late, after {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_ends_at_its_deadline_across_a_forward_step() {
    let _serial = serial();
    wait_deadline_across_a_step("+60").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_ends_at_its_deadline_across_a_backward_step() {
    let _serial = serial();
    wait_deadline_across_a_step("-60").await;
}
