//! The whole supervised command, not just its first process: `redlock run`
//! and `redlock elect` put the command in a process group of its own and
//! stop all of it: killed -9 themselves, when the hold is lost, and when
//! the command exits leaving processes behind (before the release);
//! `--foreground` keeps it in redlock's own group.

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::cli::{finish, redlock_with};
use common::{eventually, Cluster};
use tokio::process::Command;

fn redlock(c: &Cluster, args: &[&str]) -> Command {
    redlock_with(&c.urls().join(","), &["--request-timeout", "500ms"], args)
}

/// `sh -c 'a; b'` as the docs write it: Debian's `sh` forks `b` and waits
/// (no `exec`), so `b` is a child of the command, not the command. It
/// writes the shell's pid and the child's to `pids`.
fn shell_and_child(pids: &Path) -> String {
    format!("echo $$ > {p}; sleep 60 & echo $! >> {p}; wait", p = pids.display())
}

fn pids_in(path: &Path) -> Vec<i32> {
    std::fs::read_to_string(path).unwrap_or_default().lines().filter_map(|l| l.trim().parse().ok()).collect()
}

async fn wait_pids(path: &Path, n: usize) -> Vec<i32> {
    eventually(Duration::from_secs(20), "the command's pids", || {
        let found = pids_in(path).len();
        async move { found >= n }
    })
    .await;
    pids_in(path)
}

/// Running, not a zombie waiting to be reaped.
fn running(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
    stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next()).is_some_and(|state| state != "Z")
}

/// The process group of `pid`, from /proc.
fn group_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.split_whitespace().nth(2)?.parse().ok()
}

async fn all_gone(pids: &[i32], within: Duration, what: &str) {
    let pids = pids.to_vec();
    eventually(within, what, || {
        let left: Vec<i32> = pids.iter().copied().filter(|p| running(*p)).collect();
        async move { left.is_empty() }
    })
    .await;
}

/// What is left of a test's processes if an assertion failed midway.
struct Reap(Vec<i32>);

impl Drop for Reap {
    fn drop(&mut self) {
        for pid in &self.0 {
            // SAFETY: a signal to a process this test's command started.
            unsafe {
                libc::kill(*pid, libc::SIGKILL);
            }
        }
    }
}

async fn killed_with_redlock(c: &Cluster, args: &[&str], pids: &Path) {
    let mut redlock = redlock(c, args).spawn().expect("spawn redlock");
    let found = wait_pids(pids, 2).await;
    let _reap = Reap(found.clone());
    assert!(found.iter().all(|p| running(*p)), "the command and its child run: {found:?}");
    redlock.start_kill().expect("kill -9 redlock");
    let _ = redlock.wait().await;
    all_gone(&found, Duration::from_secs(5), "the command and its child gone with redlock").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_killed_takes_the_commands_children_with_it() {
    let c = Cluster::start(5);
    let dir = tempfile::tempdir().expect("temp dir");
    let pids = dir.path().join("pids");
    let script = shell_and_child(&pids);
    killed_with_redlock(&c, &["run", "group-run", "--ttl", "10s", "--", "sh", "-c", &script], &pids).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elect_killed_takes_the_commands_children_with_it() {
    let c = Cluster::start(5);
    let dir = tempfile::tempdir().expect("temp dir");
    let pids = dir.path().join("pids");
    let script = shell_and_child(&pids);
    killed_with_redlock(&c, &["elect", "group-elect", "--value", "a", "--ttl", "10s", "--", "sh", "-c", &script], &pids).await;
}

/// The lock deleted on every server: the next extension fails, the group
/// gets SIGTERM; the shell dies of it, its child too, before redlock exits 76.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lock_stops_the_commands_children_too() {
    let c = Cluster::start(5);
    let dir = tempfile::tempdir().expect("temp dir");
    let pids = dir.path().join("pids");
    let script = shell_and_child(&pids);
    let redlock = redlock(&c, &["run", "group-lost", "--ttl", "1500ms", "--", "sh", "-c", &script]).spawn().expect("spawn");
    let started = Instant::now();
    let found = wait_pids(&pids, 2).await;
    let _reap = Reap(found.clone());
    for s in &c.servers {
        s.ok(redis::cmd("DEL").arg("group-lost")).await;
    }
    let ran = finish(redlock, started, Duration::from_secs(20), "run losing its lock").await;
    assert_eq!(ran.code, Some(76), "{}", ran.stderr);
    let left: Vec<i32> = found.iter().copied().filter(|p| running(*p)).collect();
    assert!(left.is_empty(), "processes of the command still running after redlock exited: {left:?}");
}

/// The command exits leaving a child behind (a `&` job): the child is
/// stopped before the lock is released, and redlock says so; the
/// command's status is redlock's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_command_leaves_running_is_stopped_before_the_release() {
    let c = Cluster::start(5);
    let dir = tempfile::tempdir().expect("temp dir");
    let pids = dir.path().join("pids");
    // The child ignores SIGTERM: only the SIGKILL after the grace stops it.
    let script = format!("echo $$ > {p}; sh -c 'trap \"\" TERM; sleep 60' & echo $! >> {p}; sleep 0.5; exit 3", p = pids.display());
    let redlock =
        redlock(&c, &["run", "group-left", "--ttl", "10s", "--kill-after", "1s", "--", "sh", "-c", &script]).spawn().expect("spawn");
    let started = Instant::now();
    let found = wait_pids(&pids, 2).await;
    let _reap = Reap(found.clone());
    let ran = finish(redlock, started, Duration::from_secs(20), "run leaving a child").await;
    assert_eq!(ran.code, Some(3), "the command's status: {}", ran.stderr);
    assert!(ran.stderr.contains("leaving processes of its group running"), "{}", ran.stderr);
    let left: Vec<i32> = found.iter().copied().filter(|p| running(*p)).collect();
    assert!(left.is_empty(), "processes of the command still running after the release: {left:?}");
    // Released only then: it was held through the grace (1 s of SIGTERM ignored).
    assert!(ran.took >= Duration::from_secs(1), "released {:?} after the start, before the child's grace", ran.took);
    for s in &c.servers {
        assert!(s.info("group-left").await.is_none(), "released on {}", s.port);
    }
}

/// By default the command leads a group of its own; `--foreground` keeps it
/// in redlock's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_has_a_group_of_its_own_unless_foreground() {
    let c = Cluster::start(5);
    let dir = tempfile::tempdir().expect("temp dir");
    for (foreground, name) in [(false, "group-own"), (true, "group-fg")] {
        let pids = dir.path().join(name);
        // `exec`: nothing of the command outlives it, even in redlock's group.
        let script = format!("echo $$ > {p}; echo $$ >> {p}; exec sleep 60", p = pids.display());
        let mut args = vec!["run", name, "--ttl", "10s"];
        if foreground {
            args.push("--foreground");
        }
        args.extend(["--", "sh", "-c", &script]);
        let mut redlock = redlock(&c, &args).spawn().expect("spawn");
        let found = wait_pids(&pids, 2).await;
        let _reap = Reap(found.clone());
        let redlock_pid = redlock.id().and_then(|p| i32::try_from(p).ok()).expect("redlock's pid");
        let (command, redlocks) = (group_of(found[0]), group_of(redlock_pid));
        match foreground {
            false => assert_eq!(command, Some(found[0]), "the command leads its own group"),
            true => assert_eq!(command, redlocks, "--foreground: the command in redlock's group"),
        }
        redlock.start_kill().expect("kill redlock");
        let _ = redlock.wait().await;
    }
}
