//! The work a lock protects stops before anyone else may start: `redlock
//! run` and `redlock elect` stop their command, and every process of its
//! group, inside the hold, however the hold is lost (links cut, links
//! stalled, with and without a session, short and long ttls), beside two
//! busy loops; and a guard's loss signal, on its holder's own clock, comes
//! before another client's grant when the links are cut right after an
//! extension.
//!
//! The old holder's command has a 4 s SIGTERM handler that keeps writing
//! the time: its last write is when it last ran. The next holder's command
//! writes the time it started. Each trial asserts the second after the
//! first.

// `serial()` is held through each test on purpose (see `common::serial`).
#![allow(clippy::await_holding_lock)]

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::cli::{finish, redlock_with};
use common::forwarder::Forwarder;
use common::{eventually, relaxed, serial, Cluster};
use redlock::{Settings, SESSION_MARGIN};

/// Trials of each case, run at once (each on its own lock and links).
const TRIALS: usize = 5;

/// Exit status of `redlock run` and `elect` when the hold was lost while
/// the command ran.
const LOST: i32 = 76;

/// A command that writes the time (ns since the epoch) to `log` every
/// 10 ms, for a minute at most, and on SIGTERM goes on doing it for 4 s
/// before it exits: a slow graceful shutdown. `ready` is written once it
/// runs.
fn slow_to_stop(log: &Path, ready: &Path) -> String {
    let log = log.display();
    format!(
        "trap 'i=0; while [ $i -lt 400 ]; do date +%s%N >> {log}; sleep 0.01; i=$((i+1)); done; exit 0' TERM; \
         touch {ready}; i=0; while [ $i -lt 6000 ]; do date +%s%N >> {log}; sleep 0.01; i=$((i+1)); done",
        ready = ready.display()
    )
}

/// Two processes spinning on the machine's two cores while they live.
struct Busy(Vec<std::process::Child>);

impl Busy {
    fn start() -> Busy {
        Busy((0..2).map(|_| std::process::Command::new("sh").args(["-c", "while :; do :; done"]).spawn().expect("busy loop")).collect())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Fault {
    /// Every link of the holder closed, and no new one let through.
    Cut,
    /// Every link of the holder holds its bytes both ways.
    Stall,
}

fn apply(fault: Fault, links: &[Forwarder]) {
    for f in links {
        match fault {
            Fault::Cut => {
                f.refuse(true);
                f.reset();
            }
            Fault::Stall => f.stall(true),
        }
    }
}

fn last_number(path: &Path) -> Option<u128> {
    std::fs::read_to_string(path).ok()?.lines().filter_map(|l| l.trim().parse().ok()).max()
}

/// One trial: `redlock run` (or `elect`) holds through links of its own,
/// another waits for the same lock directly; the holder's links fail;
/// the waiter's command must start after the holder's command last ran.
/// Returns by how much (ms) it did, negative for an overlap.
async fn trial(c: &Cluster, n: usize, fault: Fault, session: bool, ttl: &str, elect: bool) -> i64 {
    let dir = tempfile::tempdir().expect("temp dir");
    let (log, ready, started) = (dir.path().join("old"), dir.path().join("ready"), dir.path().join("new"));
    let mut links = Vec::new();
    for s in &c.servers {
        links.push(Forwarder::start(s.port).await);
    }
    let through: Vec<String> = links.iter().map(Forwarder::url).collect();
    let name = format!("supervised-{n}");
    let script = slow_to_stop(&log, &ready);
    let mut options = vec!["--request-timeout", "500ms"];
    if session {
        options.push("--session");
    }
    let holder_args: Vec<&str> = match elect {
        true => vec!["elect", &name, "--value", "old", "--ttl", ttl, "--", "sh", "-c", &script],
        false => vec!["run", &name, "--ttl", ttl, "--", "sh", "-c", &script],
    };
    let holder = redlock_with(&through.join(","), &options, &holder_args).spawn().expect("spawn the holder");
    let holder_started = Instant::now();
    eventually(Duration::from_secs(30), "the holder's command running", || {
        let running = ready.exists();
        async move { running }
    })
    .await;
    let next_script = format!("date +%s%N > {}", started.display());
    let next_args: Vec<&str> = match elect {
        true => vec!["elect", &name, "--value", "new", "--ttl", ttl, "--", "sh", "-c", &next_script],
        false => vec!["run", &name, "--ttl", ttl, "--wait", "60s", "--", "sh", "-c", &next_script],
    };
    let next = redlock_with(&c.urls().join(","), &options, &next_args).spawn().expect("spawn the next holder");
    let next_started = Instant::now();
    // Some time into the hold, past an extension or not.
    tokio::time::sleep(Duration::from_millis(300 + 150 * n as u64)).await;
    apply(fault, &links);
    let old = finish(holder, holder_started, Duration::from_secs(60), &format!("trial {n}: the holder")).await;
    let new = finish(next, next_started, Duration::from_secs(60), &format!("trial {n}: the next holder")).await;
    assert_eq!(old.code, Some(LOST), "trial {n}: the holder lost its hold while its command ran: {}", old.stderr);
    assert_eq!(new.code, Some(0), "trial {n}: the next holder ran its command: {}", new.stderr);
    let last = last_number(&log).expect("the holder's command wrote");
    let first = last_number(&started).expect("the next holder's command wrote");
    let gap_ms = (first as i128 - last as i128) / 1_000_000;
    println!("trial {n} ({fault:?}, session {session}, ttl {ttl}, elect {elect}): the next command started {gap_ms} ms after the old one last ran");
    drop(links);
    i64::try_from(gap_ms).unwrap_or(i64::MIN)
}

/// `TRIALS` trials at once, beside two busy loops: none overlaps.
async fn case(fault: Fault, session: bool, ttl: &str, elect: bool) {
    let _one = serial();
    let c = Cluster::start(5);
    let _busy = Busy::start();
    let gaps = futures::future::join_all((0..TRIALS).map(|n| trial(&c, n, fault, session, ttl, elect))).await;
    assert!(gaps.iter().all(|g| *g > 0), "a next holder's command started before the old one stopped (ms after it last ran): {gaps:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_with_a_short_ttl_stops_before_the_next_holder_when_cut() {
    case(Fault::Cut, false, "2s", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_with_a_short_ttl_stops_before_the_next_holder_when_stalled() {
    case(Fault::Stall, false, "2s", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_run_with_a_short_ttl_stops_before_the_next_holder_when_cut() {
    case(Fault::Cut, true, "2s", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_run_with_a_short_ttl_stops_before_the_next_holder_when_stalled() {
    case(Fault::Stall, true, "2s", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_with_a_long_ttl_stops_before_the_next_holder_when_cut() {
    case(Fault::Cut, false, "10s", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_run_with_a_long_ttl_stops_before_the_next_holder_when_cut() {
    case(Fault::Cut, true, "10s", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_run_with_a_long_ttl_stops_before_the_next_holder_when_stalled() {
    case(Fault::Stall, true, "10s", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_with_a_short_ttl_stops_before_the_next_leader_when_cut() {
    case(Fault::Cut, true, "2s", true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_with_a_long_ttl_stops_before_the_next_leader_when_cut() {
    case(Fault::Cut, true, "10s", true).await;
}

/// A session guard whose links are severed right after an extension (the
/// servers see them close, the holder does not): its lost signal fires
/// well before a waiter is granted the lock (half of `SESSION_MARGIN`, the
/// time kept for stopping the work), in every trial, beside two busy
/// loops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_loss_signal_comes_before_the_next_grant_when_links_are_cut_after_an_extension() {
    let _one = serial();
    let c = Cluster::start(5);
    let _busy = Busy::start();
    let settings = Settings { release_on_disconnect: true, request_timeout: Duration::from_millis(200), ..relaxed() };
    let ttl = Duration::from_millis(1500);
    let mut early = Vec::new();
    for round in 0..3 {
        let trials = (0..10).map(|n| {
            let (c, settings) = (&c, settings.clone());
            async move {
                let resource = format!("cut-after-extension-{round}-{n}");
                let mut links = Vec::new();
                for s in &c.servers {
                    links.push(Forwarder::start(s.port).await);
                }
                let through: Vec<String> = links.iter().map(Forwarder::url).collect();
                let holder = redlock::Redlock::new(&through, settings.clone()).expect("holder");
                let guard = holder.guard(&resource, ttl, None).await.expect("the holder's grant");
                // Right after the guard's first extension.
                let granted_at = guard.lock().acquired_at;
                eventually(Duration::from_secs(10), "an extension", || {
                    let extended = guard.lock().acquired_at > granted_at;
                    async move { extended }
                })
                .await;
                // The servers see the links end and count the lock-delay
                // from then; the holder learns nothing until its next
                // extension times out.
                for f in &links {
                    f.sever();
                }
                let waiter = c.redlock(settings);
                let next = waiter.lock_until(&resource, ttl, Some(Instant::now() + Duration::from_secs(20)));
                let (lost, next) = tokio::join!(
                    async {
                        guard.lost().await;
                        Instant::now()
                    },
                    async {
                        let lock = next.await.expect("the waiter's grant");
                        (Instant::now(), lock)
                    }
                );
                let (granted, lock) = next;
                waiter.release(&lock).await.expect("release");
                drop(links);
                // Told in time to stop its work: half the margin the
                // client keeps for that is asserted (the old default
                // lock-delay left a clock drift, ~17 ms).
                (resource, granted.checked_duration_since(lost))
            }
        });
        early.extend(futures::future::join_all(trials).await);
    }
    let mut ahead: Vec<Duration> = early.iter().filter_map(|(_, a)| *a).collect();
    ahead.sort();
    println!("the loss signal ahead of the next grant: {ahead:?}");
    early.retain(|(_, a)| a.is_none_or(|d| d < SESSION_MARGIN / 2));
    assert!(
        early.is_empty(),
        "a waiter was granted before, or less than {:?} after, the holder was told it lost: {early:?}",
        SESSION_MARGIN / 2
    );
}

/// A hold granted with too little of its validity left to start the
/// command inside it (every reply delayed so that the round that wins the
/// lock ends ~150 ms before its validity does): `redlock run` never starts
/// the command, gives the lock back and exits 75 (the command did not
/// run), where it used to start the command past the instant it had to
/// have stopped, and exit 76.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_does_not_start_its_command_with_the_hold_about_to_end() {
    let _one = serial();
    let c = Cluster::start(5);
    // The servers' token counters brought in step by one grant, so that a
    // grant through the delayed links takes one round, not a second to
    // raise the tokens.
    let primed = c.redlock(relaxed());
    let lock = primed.lock("too-late", Duration::from_secs(5)).await.expect("a grant to prime the counters");
    primed.release(&lock).await.expect("release");
    let mut links = Vec::new();
    for s in &c.servers {
        links.push(Forwarder::start(s.port).await);
    }
    // ttl 2 s, drift 22 ms: a round of one delayed reply leaves at most
    // 188 ms of validity, 88 ms before the command must have stopped (under
    // the 100 ms a start needs), and a busy machine up to 188 ms more
    // before the round would have no validity at all.
    for f in &links {
        f.delay_replies(1790..=1790);
    }
    let through: Vec<String> = links.iter().map(Forwarder::url).collect();
    let dir = tempfile::tempdir().expect("temp dir");
    let marker = dir.path().join("ran");
    let script = format!("touch {}", marker.display());
    let options = ["--connect-timeout", "10s", "--request-timeout", "3s"];
    // Without --wait: one command per server in the round (a waiting
    // acquisition's first round also looks at the line, a second reply).
    let args = ["run", "too-late", "--ttl", "2s", "--", "sh", "-c", &script];
    let started = Instant::now();
    let run = redlock_with(&through.join(","), &options, &args).spawn().expect("spawn redlock run");
    let ran = finish(run, started, Duration::from_secs(60), "redlock run").await;
    println!("redlock run: exit {:?} in {:?}: {}", ran.code, ran.took, ran.stderr);
    assert!(!marker.exists(), "the command ran with its hold about to end: {}", ran.stderr);
    assert_eq!(ran.code, Some(75), "not run, so exit 75: {}", ran.stderr);
    assert!(ran.stderr.contains("too little of its validity left"), "granted, then given back: {}", ran.stderr);
}
