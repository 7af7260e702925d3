//! `redlock elect` under faults, the real binary against five real
//! servers: candidates that take turns never lead at once and their terms
//! grow; a leader killed -9 is followed within its lock-delay (plus about
//! a second) and its command dies with it; a leader paused past its lease
//! learns it lost on waking, stops its command, and finds a later term
//! began meanwhile, whose fence refused the old command's late writes.

// `serial()` is held through each test on purpose (see `common::serial`).
#![allow(clippy::await_holding_lock)]

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::cli::{finish, redlock_with};
use common::fence::{Fence, FENCED_WRITE};
use common::{eventually, serial, Cluster};
use tokio::process::{Child, Command};

/// The request timeout these runs use: generous, so a loaded machine does
/// not turn a healthy server into a timeout.
const REQUEST_TIMEOUT: Duration = Duration::from_millis(500);

/// Exit status of `redlock elect` when the leadership was lost while the command ran.
const LEADERSHIP_LOST: i32 = 76;

fn elect(c: &Cluster, name: &str, value: &str, ttl: &str, extra: &[&str], script: &str) -> Command {
    let mut args = vec!["elect", name, "--value", value, "--ttl", ttl];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--", "sh", "-c", script]);
    redlock_with(&c.urls().join(","), &["--request-timeout", "500ms"], &args)
}

/// The default lock-delay of `redlock elect`'s hold of `ttl`
/// (docs/client.md): the extension interval, a request timeout, the clock
/// drift, twice the margin of 100 ms and the --kill-after grace of 5 s, at
/// most the ttl.
fn lock_delay(ttl: Duration) -> Duration {
    let drift = Duration::from_secs_f64(ttl.as_secs_f64() * 0.01) + Duration::from_millis(2);
    (ttl / 3 + REQUEST_TIMEOUT + drift + Duration::from_millis(200) + Duration::from_secs(5)).min(ttl)
}

fn read_number(path: &Path) -> Option<i64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

async fn wait_number(path: &Path, within: Duration, what: &str) -> i64 {
    let mut found = None;
    eventually(within, what, || {
        found = read_number(path);
        async move { found.is_some() }
    })
    .await;
    found.unwrap_or_default()
}

fn running(pid: i64) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
    stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next()).is_some_and(|state| state != "Z")
}

fn signal(child: &Child, signal: libc::c_int) {
    let pid = child.id().and_then(|p| i32::try_from(p).ok()).expect("redlock's pid");
    // SAFETY: a signal to a process this test spawned and has not reaped.
    assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
}

/// The election's lock has `n` waiters on every server.
async fn waiting(c: &Cluster, name: &str, n: i64) {
    eventually(Duration::from_secs(15), "candidates waiting on every server", || async {
        c.infos(&format!("redlock:election:{name}")).await.iter().all(|i| i.as_ref().is_some_and(|i| i.waiters == n))
    })
    .await;
}

/// Three candidates with `--again` take turns, each leader's command
/// writing its term to a fenced resource and logging its term, value and
/// interval: no two intervals overlap, each later term is larger, the
/// fence refused no leader's write, every candidate leads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_candidates_take_turns_without_overlap_in_growing_terms() {
    let _one = serial();
    let c = Cluster::start(5);
    let fence = Fence::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("log");
    // Each leader writes its term to a fenced resource first, and logs its
    // interval: the fence accepts a write only with a term above the last.
    let script = format!(
        "redis-cli -p {port} EVAL \"$FENCED_WRITE\" 1 {key} $REDLOCK_TOKEN $REDLOCK_VALUE >> {log}.writes; \
         echo \"$REDLOCK_TOKEN start $(date +%s%N) $REDLOCK_VALUE\" >> {log}; sleep 0.2; \
         echo \"$REDLOCK_TOKEN end $(date +%s%N) $REDLOCK_VALUE\" >> {log}",
        log = log.display(),
        port = fence.server.port,
        key = fence.key,
    );
    let candidates: Vec<Child> = (0..3)
        .map(|n| {
            let mut cmd = elect(&c, "turns", &format!("node-{n}"), "3s", &["--again"], &script);
            cmd.env("FENCED_WRITE", FENCED_WRITE);
            cmd.spawn().expect("spawn redlock elect")
        })
        .collect();
    let ends = || std::fs::read_to_string(&log).unwrap_or_default().lines().filter(|l| l.contains(" end ")).count();
    eventually(Duration::from_secs(90), "nine terms ended", || {
        let n = ends();
        async move { n >= 9 }
    })
    .await;
    for mut c in candidates {
        let _ = c.start_kill();
        let _ = c.wait().await;
    }
    let text = std::fs::read_to_string(&log).expect("log");
    let mut terms: std::collections::BTreeMap<i64, (Option<u128>, Option<u128>, String)> = Default::default();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let [term, what, at, value] = f[..] else { panic!("log line {line:?}") };
        let (term, at): (i64, u128) = (term.parse().expect("term"), at.parse().expect("time"));
        let entry = terms.entry(term).or_insert((None, None, value.to_string()));
        match what {
            "start" => entry.0 = Some(at),
            _ => entry.1 = Some(at),
        }
    }
    // Terms ended (a last one may have been killed mid-way), in start order.
    let mut whole: Vec<(u128, u128, i64, String)> =
        terms.into_iter().filter_map(|(term, (start, end, value))| Some((start?, end?, term, value))).collect();
    whole.sort();
    assert!(whole.len() >= 9, "{whole:?}");
    for pair in whole.windows(2) {
        let ((_, end1, t1, _), (start2, _, t2, _)) = (&pair[0], &pair[1]);
        assert!(start2 >= end1, "term {t2} began {} µs before term {t1} ended:\n{text}", (end1 - start2) / 1000);
        assert!(t2 > t1, "term {t2} began after term {t1}:\n{text}");
    }
    let leaders: std::collections::BTreeSet<&str> = whole.iter().map(|(_, _, _, v)| v.as_str()).collect();
    assert_eq!(leaders.len(), 3, "every candidate leads in turn: {leaders:?}\n{text}");
    // Every leader's write was accepted: no term came after a larger one.
    let state = fence.state().await;
    assert_eq!(state.refused, 0, "the fence refused a leader's write: {state:?}");
    assert!(state.accepted >= whole.len() as i64, "every whole term wrote: {state:?}, {} terms", whole.len());
}

/// The leader's `redlock elect` killed -9: its command dies with it, and
/// the next candidate leads within the lock-delay and about a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_leader_is_followed_within_its_lock_delay_and_its_command_dies() {
    let _one = serial();
    let c = Cluster::start(5);
    let dir = tempfile::tempdir().expect("temp dir");
    let ttl = Duration::from_secs(3);
    let script = |who: &str| format!("echo $$ > {}; exec sleep 60", dir.path().join(who).display());
    let mut a = elect(&c, "kill", "a", "3s", &[], &script("a")).spawn().expect("spawn a");
    let a_command = wait_number(&dir.path().join("a"), Duration::from_secs(15), "a leads").await;
    let b = elect(&c, "kill", "b", "3s", &[], &script("b")).spawn().expect("spawn b");
    waiting(&c, "kill", 1).await;
    let killed = Instant::now();
    signal(&a, libc::SIGKILL);
    a.wait().await.expect("reap a");
    wait_number(&dir.path().join("b"), Duration::from_secs(15), "b leads").await;
    let took = killed.elapsed();
    let bound = lock_delay(ttl) + Duration::from_secs(1);
    println!("kill -9 to the next leader's command: {took:?} (lock-delay {:?})", lock_delay(ttl));
    assert!(took < bound, "b led {took:?} after a was killed, more than the lock-delay and a second ({bound:?})");
    eventually(Duration::from_secs(10), "a's command gone", || async move { !running(a_command) }).await;
    drop(b);
}

/// A leader paused (SIGSTOP) past its lease: the next candidate leads in a
/// later term meanwhile; woken (SIGCONT), the paused one learns it lost,
/// stops its command and exits 76. Its command, a process of its own,
/// ran on while its supervisor was paused, beside the next leader's: that
/// is what the term is for. Both commands write to a fenced resource with
/// their term in a loop, and the fence refuses the old leader's writes
/// once the new term wrote.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_leader_learns_it_lost_on_waking_and_a_later_term_began() {
    let _one = serial();
    let c = Cluster::start(5);
    let fence = Fence::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let script = |who: &str| {
        format!(
            "echo $REDLOCK_TOKEN > {file}; while true; do redis-cli -p {port} EVAL \"$FENCED_WRITE\" 1 {key} $REDLOCK_TOKEN {who} \
             >> {file}.writes; sleep 0.05; done",
            file = dir.path().join(who).display(),
            port = fence.server.port,
            key = fence.key,
        )
    };
    let spawn = |who: &str| {
        let mut cmd = elect(&c, "pause", who, "2s", &[], &script(who));
        cmd.env("FENCED_WRITE", FENCED_WRITE);
        cmd.spawn().expect("spawn redlock elect")
    };
    let a = spawn("a");
    let a_term = wait_number(&dir.path().join("a"), Duration::from_secs(15), "a leads").await;
    eventually(Duration::from_secs(10), "a's command writes", || async { fence.state().await.accepted > 0 }).await;
    let b = spawn("b");
    waiting(&c, "pause", 1).await;
    let paused = Instant::now();
    signal(&a, libc::SIGSTOP);
    // Its connections stay open: its lease runs out unextended.
    let b_term = wait_number(&dir.path().join("b"), Duration::from_secs(20), "b leads").await;
    println!("SIGSTOP to the next leader: {:?}", paused.elapsed());
    assert!(b_term > a_term, "b's term {b_term} after a's {a_term}");
    // a's command still runs (its supervisor is paused): its writes with
    // the old term are refused once b's term wrote.
    eventually(Duration::from_secs(10), "b's term written and a's late writes refused", || async {
        let s = fence.state().await;
        s.token == Some(b_term) && s.refused > 0
    })
    .await;
    signal(&a, libc::SIGCONT);
    let ran = finish(a, paused, Duration::from_secs(30), "the paused leader").await;
    assert_eq!(ran.code, Some(LEADERSHIP_LOST), "{ran:?}");
    assert!(ran.stderr.contains("LEADERSHIP LOST"), "{}", ran.stderr);
    let state = fence.state().await;
    assert_eq!((state.token, state.value.as_deref()), (Some(b_term), Some("b")), "the resource holds the new term's writes: {state:?}");
    drop(b);
}
