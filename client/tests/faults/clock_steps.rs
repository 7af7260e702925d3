//! The quorum under steps of the servers' wall clocks: the clock-jump
//! objection to Redlock, measured.
//!
//! Five Valkey 8.1 servers with the module, each under libfaketime with
//! only the wall clock faked through a timestamp file, so a test steps a
//! running server's wall clock (as an NTP step, a resumed VM or `date -s`
//! does) while its monotonic clock runs on. Three of the five, a majority,
//! are stepped. Redis expires keys by the wall clock; while a lease was
//! only its key's TTL, +60 s on three of five handed a held 30 s lock to
//! the next client 0.3 s later, and -60 s kept a waiter out for a minute.
//! Leases on the monotonic clock must make the steps invisible: no grant
//! before a lease's real end (checked on each server, from its own answers,
//! not only by the client), a waiter served soon after it, one holder at a
//! time with tokens in order.
//!
//! Each scenario prints its measured handoff delays (run with
//! `--nocapture`).

// `serial()` is held through each test on purpose: every test has its own
// runtime on its own thread, and the guard only keeps them one at a time.
#![allow(clippy::await_holding_lock)]

use crate::common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::history::History;
use common::*;
use rand::Rng;
use redis::aio::MultiplexedConnection;
use redis::Value;
use redlock::{Error, Settings};

const MS: fn(u64) -> Duration = Duration::from_millis;

/// How many of the five servers have their clocks stepped: a majority.
const STEPPED: usize = 3;
/// A waiter is served at a lease's end by polling the quorum (at most
/// `retry_delay`'s 15 ms apart at the head of the line); the rest is
/// margin for a loaded 2-core machine.
const HANDOFF_LATE: Duration = Duration::from_millis(250);
/// LOCK.INFO's pttl is in whole milliseconds: a lease end derived from it
/// is known to 1 ms, and so is a grant time.
const RESOLUTION: Duration = Duration::from_millis(1);

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
            Value::Array(parts) => match parts.first() {
                Some(Value::BulkString(s)) => String::from_utf8_lossy(s).parse().expect("seconds"),
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
        let mut before = Vec::new();
        for i in 0..STEPPED {
            before.push(self.unix_seconds(i).await);
        }
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

    /// One open connection per server, so that timed reads measure the
    /// command and not a connect.
    async fn connections(&self) -> Vec<MultiplexedConnection> {
        let mut out = Vec::new();
        for s in &self.cluster.servers {
            out.push(s.conn().await);
        }
        out
    }
}

/// A command on an open connection, with when it was sent and when its
/// reply came: the server ran it in between.
async fn timed(con: &mut MultiplexedConnection, cmd: &redis::Cmd) -> (Instant, Value, Instant) {
    let sent = Instant::now();
    let v = tokio::time::timeout(DIRECT_TIMEOUT, cmd.query_async::<Value>(con))
        .await
        .expect("no reply within DIRECT_TIMEOUT")
        .expect("command failed");
    (sent, v, Instant::now())
}

/// A field of `INFO redislock`; `None` when the module has no such field.
fn module_field(info: &Value, field: &str) -> Option<i64> {
    let text = match info {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::VerbatimString { text, .. } => text.clone(),
        other => panic!("INFO: {other:?}"),
    };
    text.lines().find_map(|l| l.strip_prefix(field)?.strip_prefix(':')?.trim().parse().ok())
}

/// Where `owner` holds `key`, when its lease there ends, on this process's
/// clock: `(earliest, latest)`, from the server's own pttl (the servers'
/// monotonic clocks are not faked and run with ours).
async fn lease_ends(cons: &mut [MultiplexedConnection], key: &str, owner: &str) -> Vec<Option<(Instant, Instant)>> {
    let mut out = Vec::new();
    for con in cons.iter_mut() {
        let (sent, v, recv) = timed(con, redis::cmd("LOCK.INFO").arg(key)).await;
        out.push(parse_info(v).filter(|i| i.owner == owner).map(|i| {
            let left = MS(u64::try_from(i.pttl).expect("pttl of a held lock"));
            (sent + left - RESOLUTION, recv + left + RESOLUTION)
        }));
    }
    out
}

/// The `n`th (1-based) earliest of `times`: a quorum of `n` servers has
/// passed it.
fn nth_earliest(times: impl Iterator<Item = Instant>, n: usize) -> Instant {
    let mut v: Vec<Instant> = times.collect();
    v.sort();
    v[n - 1]
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
        assert!(info.pttl > 25_000 && info.pttl <= 30_000, "server {i}: lease left after the step {}", info.pttl);
        // Without the key's expiry the step would have proved nothing.
        let expired = module_field(&s.ok(redis::cmd("INFO").arg("redislock")).await, "redislock_locks_expired_by_clock_step");
        assert!(expired.is_some_and(|n| n >= 1), "server {i}: Redis never expired the key after the step ({expired:?})");
    }
    rl_a.release(&a).await.expect("A releases");
    let b = rl_b.try_lock("r", Duration::from_secs(30)).await.expect("B after A's release");
    assert!(b.token.expect("token") > a_token);
}

/// Handoffs (and waits) timed per test across steps, each on a quorum of
/// its own: their median is what is asserted, so one held up by a busy
/// machine does not decide.
const TRIALS: usize = 5;

/// `TRIALS` handoffs across a step of `offset` (`handoff_across_a_step`):
/// B is served soon after a quorum of A's leases ended, as a median.
async fn handoffs_across_a_step(offset: &str) {
    let mut lates = Vec::new();
    for _ in 0..TRIALS {
        lates.push(handoff_across_a_step(offset).await);
    }
    let late = median(&lates);
    eprintln!("wall clocks {offset} on 3 of 5: B granted {lates:?} after the latest end of A's lease on a quorum");
    assert!(late <= HANDOFF_LATE, "{offset}: B granted late, {late:?} (median) after A's lease ended on a quorum: {lates:?}");
}

/// A holds `r` for 3 s, B waits (the client's line and its polling of the
/// quorum); three of five wall clocks step by `offset` half a second in.
/// On each server, nothing is granted before A's lease there ends (read
/// from the servers' token counters shortly before, and from the start
/// of B's lease after). Returns how long after the latest estimate of the
/// end of A's lease on a quorum B was served.
async fn handoff_across_a_step(offset: &str) -> Duration {
    let q = SteppedQuorum::start();
    let mut cons = q.connections().await;
    let (rl_a, rl_b) = (q.cluster.redlock(settings()), q.cluster.redlock(settings()));
    let ttl = Duration::from_secs(3);
    let a = rl_a.try_lock("r", ttl).await.expect("A acquires");
    let a_token = a.token.expect("token");
    let a_ends = lease_ends(&mut cons, "r", &a.owner).await;
    assert!(a_ends.iter().filter(|e| e.is_some()).count() >= 3, "A holds `r` on a quorum: {a_ends:?}");
    let waiter = tokio::spawn(async move {
        let b = rl_b.lock_until("r", ttl, Some(Instant::now() + Duration::from_secs(10))).await;
        (b, Instant::now())
    });
    // B's place in line is a grant on one server: count tokens after it.
    eventually(Duration::from_secs(5), "B in line", || {
        let servers = &q.cluster.servers;
        async move {
            for s in servers {
                if s.ok(redis::cmd("EXISTS").arg("redlock:line:r")).await == Value::Int(1) {
                    return true;
                }
            }
            false
        }
    })
    .await;
    let mut tokens_before = Vec::new();
    for con in cons.iter_mut() {
        let (_, v, _) = timed(con, redis::cmd("INFO").arg("redislock")).await;
        tokens_before.push(module_field(&v, "redislock_highest_token").expect("highest_token"));
    }
    tokio::time::sleep(MS(500)).await;
    q.step(offset).await;
    // Shortly before A's leases end, no server has issued a token since:
    // not to B's attempts, not to anyone. An attempt granted and released
    // again in a round without a quorum leaves no lock, only this trace.
    let first_end = a_ends.iter().flatten().map(|e| e.0).min().expect("an end");
    tokio::time::sleep_until((first_end - MS(100)).into()).await;
    let mut checked = 0;
    for (i, con) in cons.iter_mut().enumerate() {
        let Some((end, _)) = a_ends[i] else { continue };
        let (_, v, recv) = timed(con, redis::cmd("INFO").arg("redislock")).await;
        if recv >= end {
            continue; // read too late to tell (a loaded machine)
        }
        let now = module_field(&v, "redislock_highest_token").expect("highest_token");
        let stepped = if i < STEPPED { "stepped" } else { "not stepped" };
        assert_eq!(
            now,
            tokens_before[i],
            "{offset}: server {i} ({stepped}) issued {} token(s) during A's lease (counter read {:?} before the lease's end)",
            now - tokens_before[i],
            end - recv
        );
        checked += 1;
    }
    let (b, granted) = tokio::time::timeout(Duration::from_secs(15), waiter).await.expect("B stuck").expect("B panicked");
    let b = b.unwrap_or_else(|e| panic!("{offset}: B not granted within 10 s: {e}"));
    assert!(b.token.expect("token") > a_token);
    // Each server that granted B: B's lease there started at or after A's
    // ended (B's lease is counted from its grant, or later from a FENCE
    // write-back, so its start is an upper bound of the grant).
    let b_ends = lease_ends(&mut cons, "r", &b.owner).await;
    let mut stepped_granters = 0;
    for (i, (a_end, b_end)) in a_ends.iter().zip(&b_ends).enumerate() {
        let (Some((a_end, _)), Some((_, b_end))) = (a_end, b_end) else { continue };
        let b_start = *b_end - ttl;
        assert!(
            b_start >= *a_end,
            "{offset}: server {i} ({}) granted B {:?} before A's lease there ended",
            if i < STEPPED { "stepped" } else { "not stepped" },
            *a_end - b_start
        );
        stepped_granters += usize::from(i < STEPPED);
    }
    assert!(stepped_granters >= 1, "{offset}: B's quorum must include a stepped server: {b_ends:?}");
    // The client's view: A's lease started on each server after
    // `acquired_at`, so no quorum for B can come before that plus the ttl.
    let after = granted.duration_since(a.acquired_at);
    assert!(after >= ttl, "{offset}: B granted {after:?} after A's acquisition, lease {ttl:?}");
    let quorum_end = nth_earliest(a_ends.iter().flatten().map(|e| e.0), 3);
    let quorum_end_latest = nth_earliest(a_ends.iter().flatten().map(|e| e.1), 3);
    let delay = granted.saturating_duration_since(quorum_end);
    eprintln!(
        "wall clocks {offset} on 3 of 5: B granted {delay:?} after A's lease ended on a quorum ({checked} servers' token counters read {:?} before the end)",
        MS(100)
    );
    granted.saturating_duration_since(quorum_end_latest)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waited_lock_hands_over_at_the_lease_end_across_a_forward_step() {
    let _serial = serial();
    handoffs_across_a_step("+60").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waited_lock_hands_over_at_the_lease_end_across_a_backward_step() {
    let _serial = serial();
    handoffs_across_a_step("-60").await;
}

/// How the clients of `contend` use the lock.
struct Contention {
    ttl: Duration,
    hold: (u64, u64),
    /// When the offsets +60, -60, +60 are written, from the start.
    steps: [Duration; 3],
    run: Duration,
    /// All clients are tasks on one `Redlock` handle (else one each).
    shared_handle: bool,
}

/// Four clients contend on `c` while three of five wall clocks step +60 s,
/// -60 s, +60 s. Single attempts, as a polling Redlock client makes: the
/// servers alone decide (the client's line would keep a waiter off a lock
/// whose line instance is not stepped). Returns every hold.
async fn contend(how: Contention) -> History {
    let q = std::sync::Arc::new(SteppedQuorum::start());
    let history = History::new();
    let start = Instant::now();
    let end = start + how.run;
    let mut tasks = Vec::new();
    let shared = q.cluster.redlock(settings());
    for client in 0..4 {
        let rl = if how.shared_handle { shared.clone() } else { q.cluster.redlock(settings()) };
        let history = history.clone();
        let (ttl, (lo, hi)) = (how.ttl, how.hold);
        tasks.push(tokio::spawn(async move {
            while Instant::now() < end {
                let lock = match rl.try_lock("c", ttl).await {
                    Ok(lock) => lock,
                    Err(Error::NotAcquired { .. }) => {
                        tokio::time::sleep(MS(5)).await;
                        continue;
                    }
                    Err(e) => panic!("client {client}: {e}"),
                };
                let granted = Instant::now();
                let hold = rand::rng().random_range(lo..=hi);
                tokio::time::sleep(MS(hold)).await;
                history.record(format!("client {client}"), lock.token.expect("token"), granted, Instant::now());
                let _ = rl.release(&lock).await;
            }
        }));
    }
    for (at, offset) in how.steps.iter().zip(["+60", "-60", "+60"]) {
        tokio::time::sleep_until((start + *at).into()).await;
        q.write_offset(offset);
    }
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(30), t).await.expect("client stuck").expect("client panicked");
    }
    history
}

/// One holder at a time, tokens in order, and enough grants that the
/// steps fell on held locks.
fn assert_contention(what: &str, history: &History, min_grants: usize) {
    let verdict = history.check();
    // From one release's start to the next grant's reply, when the next
    // came within a ttl (it had been polling meanwhile).
    let holds = history.holds();
    let mut gaps: Vec<Duration> = holds.windows(2).map(|w| w[1].granted.saturating_duration_since(w[0].released)).collect();
    gaps.sort();
    let (median, max) = (gaps.get(gaps.len() / 2).copied().unwrap_or_default(), gaps.last().copied().unwrap_or_default());
    eprintln!(
        "STEPS | {what} | grants {} | overlaps {} | token inversions {} | release to next grant: median {median:?}, max {max:?}",
        verdict.grants,
        verdict.overlaps.len(),
        verdict.inversions.len()
    );
    verdict.assert_exclusive(what);
    assert!(verdict.inversions.is_empty(), "{what}: tokens out of order: {:?}", verdict.inversions);
    assert!(verdict.grants >= min_grants, "{what}: only {} grants", verdict.grants);
}

/// Long holds (0.5-0.8 s of a 3 s lease) so that each step lands while a
/// lock is held for long after it, which is when a wall-clock lease broke.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contention_across_steps_of_a_majority_of_clocks() {
    let _serial = serial();
    let how = Contention {
        ttl: Duration::from_secs(3),
        hold: (500, 800),
        steps: [MS(1500), MS(3000), MS(4500)],
        run: Duration::from_secs(7),
        shared_handle: false,
    };
    let history = contend(how).await;
    assert_contention("4 clients holding 0.5-0.8 s of 3 s, 3 of 5 wall clocks stepped +60/-60/+60 s 1.5 s apart", &history, 6);
}

/// Short holds (20-50 ms of a 2 s lease) and steps 400 ms apart: many
/// handoffs around each step, where a holder's lease, a waiter's attempt
/// and Redis's expiry of the stepped key race.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contention_with_short_holds_across_steps_of_a_majority_of_clocks() {
    let _serial = serial();
    let how = Contention {
        ttl: Duration::from_secs(2),
        hold: (20, 50),
        steps: [MS(1500), MS(1900), MS(2300)],
        run: Duration::from_secs(6),
        shared_handle: false,
    };
    let history = contend(how).await;
    // About 6 s / (35 ms held + a few ms to the next grant): ~140 when idle.
    assert_contention("4 clients holding 20-50 ms of 2 s, 3 of 5 wall clocks stepped +60/-60/+60 s 0.4 s apart", &history, 40);
}

/// The same with the four clients as tasks on one shared handle: every
/// acquisition is its own owner, so they exclude each other as separate
/// processes do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contention_on_one_shared_handle_across_steps_of_a_majority_of_clocks() {
    let _serial = serial();
    let how = Contention {
        ttl: Duration::from_secs(2),
        hold: (20, 50),
        steps: [MS(1500), MS(1900), MS(2300)],
        run: Duration::from_secs(6),
        shared_handle: true,
    };
    let history = contend(how).await;
    assert_contention("4 tasks on one handle holding 20-50 ms of 2 s, 3 of 5 wall clocks stepped +60/-60/+60 s 0.4 s apart", &history, 40);
}

/// `TRIALS` waits with a deadline across a step of `offset`
/// (`wait_deadline_across_a_step`): late by no more than 150 ms as a
/// median (a busy machine can hold up any one wait).
async fn wait_deadlines_across_a_step(offset: &str) {
    let wait = Duration::from_secs(2);
    let mut took = Vec::new();
    for _ in 0..TRIALS {
        took.push(wait_deadline_across_a_step(offset, wait).await);
    }
    eprintln!("wall clocks {offset} on 3 of 5: {wait:?} waits ended after {took:?}");
    let late = median(&took);
    assert!(late <= wait + MS(150), "{offset}: the waits ended late, after {late:?} (median): {took:?}");
}

/// A wait with a deadline ends at its deadline across a step of `offset`
/// on three of five servers (the servers' WAIT timeouts run on their
/// monotonic clocks, the client's deadline on its own): never early (a
/// busy machine only makes a wait later). Returns how long it took.
async fn wait_deadline_across_a_step(offset: &str, wait: Duration) -> Duration {
    let q = SteppedQuorum::start();
    let (rl_a, rl_b) = (q.cluster.redlock(settings()), q.cluster.redlock(settings()));
    let _a = rl_a.try_lock("r", Duration::from_secs(30)).await.expect("A acquires");
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
    took
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_ends_at_its_deadline_across_a_forward_step() {
    let _serial = serial();
    wait_deadlines_across_a_step("+60").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_ends_at_its_deadline_across_a_backward_step() {
    let _serial = serial();
    wait_deadlines_across_a_step("-60").await;
}
