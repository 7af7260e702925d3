//! `redlock watch NAME --json` end to end: a scripted sequence of changes
//! printed one JSON object a line, each once and in order, nothing on
//! stderr; SIGINT ends it with 0.

use crate::common;

use std::time::Duration;

use common::cli::redlock_with;
use common::{eventually, relaxed, Cluster};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};

async fn next(lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>) -> serde_json::Value {
    let line = tokio::time::timeout(Duration::from_secs(15), lines.next_line())
        .await
        .expect("a change within 15 s")
        .expect("watch's output")
        .expect("watch still running");
    serde_json::from_str(&line).expect("one JSON object a line")
}

/// A printed change without its time, which is checked apart.
fn change(mut printed: serde_json::Value) -> serde_json::Value {
    let at = printed.as_object_mut().and_then(|o| o.remove("at")).expect("an `at` field");
    let at = at.as_str().expect("at is text");
    humantime::parse_rfc3339(at).unwrap_or_else(|e| panic!("at {at:?} is RFC 3339: {e}"));
    printed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_prints_each_change_once_as_json() {
    let c = Cluster::start(5);
    for s in &c.servers {
        s.ok(redis::cmd("CONFIG").arg("SET").arg("redislock.notify").arg("other:* cli:*")).await;
    }
    let r = "cli:watched";
    let mut watch =
        redlock_with(&c.urls().join(","), &["--request-timeout", "500ms"], &["watch", r, "--json"]).spawn().expect("spawn watch");
    let mut lines = BufReader::new(watch.stdout.take().expect("watch's stdout")).lines();
    let channel = redlock::transport::changes_channel(0, r);
    eventually(Duration::from_secs(15), "watch subscribed on every server", || async {
        let mut all = true;
        for s in &c.servers {
            let reply = s.cmd(redis::cmd("PUBSUB").arg("NUMSUB").arg(&channel)).await;
            all &= matches!(reply, Ok(redis::Value::Array(v)) if matches!(v.get(1), Some(redis::Value::Int(1))));
        }
        all
    })
    .await;

    let rl = c.redlock(relaxed());
    let a = rl.lock(r, Duration::from_secs(10)).await.expect("a");
    rl.release(&a).await.expect("release a");
    let b = rl.lock(r, Duration::from_millis(300)).await.expect("b");
    let (ta, tb) = (a.token.expect("token"), b.token.expect("token"));
    let expected = [
        serde_json::json!({"kind": "grant", "token": ta, "owner": a.owner, "value": null}),
        serde_json::json!({"kind": "release", "token": ta, "owner": a.owner, "value": null}),
        serde_json::json!({"kind": "grant", "token": tb, "owner": b.owner, "value": null}),
        serde_json::json!({"kind": "expire", "token": tb, "owner": b.owner, "value": null}),
    ];
    for want in expected {
        assert_eq!(change(next(&mut lines).await), want);
    }

    let pid = watch.id().and_then(|p| i32::try_from(p).ok()).expect("watch's pid");
    // SAFETY: a signal to a process this test spawned and has not reaped.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
    let status = tokio::time::timeout(Duration::from_secs(10), watch.wait()).await.expect("watch ends").expect("reap");
    assert_eq!(status.code(), Some(0), "Ctrl-C ends a watch");
    assert!(lines.next_line().await.expect("the rest of stdout").is_none(), "nothing more, nothing twice");
    let mut stderr = String::new();
    watch.stderr.take().expect("stderr").read_to_string(&mut stderr).await.expect("stderr");
    assert_eq!(stderr, "", "every server names the key");
}
