//! `redlock leader` end to end: who leads as JSON and as text, no leader
//! (exit 3), and `--watch` printing each change in term order.

use crate::common;

use std::time::{Duration, Instant};

use common::cli::{finish, redlock_with, Ran};
use common::{eventually, Cluster};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

fn redlock(c: &Cluster, args: &[&str]) -> Command {
    redlock_with(&c.urls().join(","), &["--request-timeout", "500ms"], args)
}

async fn run(c: &Cluster, args: &[&str], what: &str) -> Ran {
    finish(redlock(c, args).spawn().expect("spawn redlock"), Instant::now(), Duration::from_secs(20), what).await
}

/// The term a leader's command wrote to `path`.
async fn term_in(path: &std::path::Path) -> i64 {
    let mut term = None;
    eventually(Duration::from_secs(15), "the leader's command to start", || {
        term = std::fs::read_to_string(path).ok().and_then(|t| t.trim().parse::<i64>().ok());
        async move { term.is_some() }
    })
    .await;
    term.unwrap_or_default()
}

/// The next line `redlock leader --watch --json` prints, as JSON.
async fn next(lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>) -> serde_json::Value {
    let line = tokio::time::timeout(Duration::from_secs(15), lines.next_line())
        .await
        .expect("a change within 15 s")
        .expect("watch's output")
        .expect("watch still running");
    serde_json::from_str(&line).expect("one JSON object a line")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_prints_value_and_term_and_watch_prints_each_change() {
    let c = Cluster::start(5);
    let dir = tempfile::tempdir().expect("temp dir");
    let none = run(&c, &["leader", "svc", "--json"], "leader before any").await;
    assert_eq!(none.code, Some(3), "nobody leads yet");
    let error: serde_json::Value = serde_json::from_str(&none.stdout).expect("JSON error");
    assert_eq!(error["error"]["kind"], "no_leader", "{error}");

    let mut watch = redlock(&c, &["leader", "svc", "--watch", "--json", "--interval", "20ms"]).spawn().expect("spawn watch");
    let mut lines = BufReader::new(watch.stdout.take().expect("watch's stdout")).lines();

    let script = |who: &str| format!("echo $REDLOCK_TOKEN > {}; exec sleep 60", dir.path().join(who).display());
    let a = redlock(&c, &["elect", "svc", "--value", "10.0.0.1:80", "--ttl", "30s", "--", "sh", "-c", &script("a")]).spawn().expect("a");
    let a_term = term_in(&dir.path().join("a")).await;
    let json = run(&c, &["leader", "svc", "--json"], "leader --json").await;
    assert_eq!(json.code, Some(0));
    let leader: serde_json::Value = serde_json::from_str(&json.stdout).expect("JSON");
    assert_eq!(leader, serde_json::json!({"value": "10.0.0.1:80", "term": a_term}));
    let text = run(&c, &["leader", "svc"], "leader").await;
    assert_eq!(text.stdout, format!("value: 10.0.0.1:80\nterm: {a_term}\n"));
    // The watch sees a's term before anything else happens.
    assert_eq!(next(&mut lines).await, serde_json::json!({"value": "10.0.0.1:80", "term": a_term}));

    // b waits; a's redlock ends (SIGTERM: passed on, a resigns), b leads.
    let b = redlock(&c, &["elect", "svc", "--value", "10.0.0.2:80", "--ttl", "30s", "--", "sh", "-c", &script("b")]).spawn().expect("b");
    eventually(Duration::from_secs(15), "b waiting", || async {
        c.infos("redlock:election:svc").await.iter().all(|i| i.as_ref().is_some_and(|i| i.waiters == 1))
    })
    .await;
    let pid = a.id().and_then(|p| i32::try_from(p).ok()).expect("a's pid");
    // SAFETY: a signal to a process this test spawned and has not reaped.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let a_ran = finish(a, Instant::now(), Duration::from_secs(20), "a").await;
    assert_eq!(a_ran.code, Some(128 + libc::SIGTERM), "the command's status: {a_ran:?}");
    let b_term = term_in(&dir.path().join("b")).await;
    assert!(b_term > a_term);

    // The next change it prints is b's: each change once, in term order.
    assert_eq!(next(&mut lines).await, serde_json::json!({"value": "10.0.0.2:80", "term": b_term}));
    let pid = watch.id().and_then(|p| i32::try_from(p).ok()).expect("watch's pid");
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
    let status = tokio::time::timeout(Duration::from_secs(10), watch.wait()).await.expect("watch ends").expect("reap");
    assert_eq!(status.code(), Some(0), "Ctrl-C ends a watch");
    drop(b);
}
