//! `redlock members NAME` end to end: the members a quorum lists, as text
//! and JSON, in join order; `--watch --json` then prints joins, new values
//! and leaves in order, and SIGINT ends it with 0; too few servers is exit 6.

use crate::common;

use std::time::Duration;

use common::cli::redlock_with;
use common::{eventually, relaxed, Cluster};
use redlock::{Group, Settings};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};

const OPTIONS: &[&str] = &["--request-timeout", "500ms"];

fn group(c: &Cluster) -> Group {
    let settings = Settings { release_on_disconnect: true, ..relaxed() };
    Group::new(c.redlock(settings), "web").and_then(|g| g.with_ttl(Duration::from_secs(30))).expect("group")
}

async fn next(lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>) -> serde_json::Value {
    let line = tokio::time::timeout(Duration::from_secs(15), lines.next_line())
        .await
        .expect("a line within 15 s")
        .expect("members' output")
        .expect("members still running");
    serde_json::from_str(&line).expect("one JSON value a line")
}

/// A printed event without its time, which must be there.
fn event(mut printed: serde_json::Value) -> serde_json::Value {
    let at = printed.as_object_mut().and_then(|o| o.remove("at")).expect("an `at` field");
    humantime::parse_rfc3339(at.as_str().expect("at is text")).expect("at is RFC 3339");
    printed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_lists_then_watches_joins_values_and_leaves() {
    let mut c = Cluster::start(5);
    for s in &c.servers {
        s.ok(redis::cmd("CONFIG").arg("SET").arg("redislock.notify").arg("redlock:group:*")).await;
    }
    let urls = c.urls().join(",");
    let a = group(&c).join("10.0.0.1:80").await.expect("a joins");
    let b = group(&c).join("10.0.0.2:80").await.expect("b joins");

    let out = redlock_with(&urls, OPTIONS, &["members", "web"]).output().await.expect("members");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text, format!("{} {} 10.0.0.1:80\n{} {} 10.0.0.2:80\n", a.token(), a.owner(), b.token(), b.owner()));
    let out = redlock_with(&urls, OPTIONS, &["members", "web", "--json"]).output().await.expect("members");
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(
        listed,
        serde_json::json!([
            {"token": a.token(), "owner": a.owner(), "value": "10.0.0.1:80"},
            {"token": b.token(), "owner": b.owner(), "value": "10.0.0.2:80"},
        ])
    );

    let mut watch = redlock_with(&urls, OPTIONS, &["members", "web", "--watch", "--json"]).spawn().expect("spawn");
    let mut lines = BufReader::new(watch.stdout.take().expect("stdout")).lines();
    assert_eq!(next(&mut lines).await, listed, "the list first");
    let channel = redlock::transport::changes_channel(0, "redlock:group:web");
    eventually(Duration::from_secs(15), "subscribed on every server", || async {
        let mut all = true;
        for s in &c.servers {
            let reply = s.cmd(redis::cmd("PUBSUB").arg("NUMSUB").arg(&channel)).await;
            all &= matches!(reply, Ok(redis::Value::Array(v)) if matches!(v.get(1), Some(redis::Value::Int(1))));
        }
        all
    })
    .await;
    // One change at a time: changes of different holds a quorum announced
    // together may come in either order.
    let d = group(&c).join("10.0.0.3:80").await.expect("d joins");
    let joined = serde_json::json!({"event": "join", "token": d.token(), "owner": d.owner(), "value": "10.0.0.3:80"});
    assert_eq!(event(next(&mut lines).await), joined);
    b.proclaim("10.0.0.2:81").await.expect("b's new value");
    let proclaimed = serde_json::json!({"event": "value", "token": b.token(), "owner": b.owner(), "value": "10.0.0.2:81"});
    assert_eq!(event(next(&mut lines).await), proclaimed);
    let (a_token, a_owner) = (a.token(), a.owner().to_string());
    a.leave().await.expect("a leaves");
    let left = serde_json::json!({"event": "leave", "token": a_token, "owner": a_owner, "value": null});
    assert_eq!(event(next(&mut lines).await), left);
    let pid = watch.id().and_then(|p| i32::try_from(p).ok()).expect("pid");
    // SAFETY: a signal to a process this test spawned and has not reaped.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
    let status = tokio::time::timeout(Duration::from_secs(10), watch.wait()).await.expect("ends").expect("reap");
    assert_eq!(status.code(), Some(0), "Ctrl-C ends a watch");
    assert!(lines.next_line().await.expect("the rest").is_none(), "nothing more");
    let mut stderr = String::new();
    watch.stderr.take().expect("stderr").read_to_string(&mut stderr).await.expect("stderr");
    assert_eq!(stderr, "");

    // Three of five frozen: too few answer (exit 6).
    for s in &mut c.servers[..3] {
        s.freeze();
    }
    let out = redlock_with(&urls, &["--request-timeout", "200ms"], &["members", "web"]).output().await.expect("members");
    assert_eq!(out.status.code(), Some(6), "{}", String::from_utf8_lossy(&out.stderr));
    for s in &mut c.servers {
        s.thaw();
    }
    drop((b, d));
}

/// `--watch` subscribes, then lists: a member that joins as the watch
/// starts is listed or printed as a join, one listed that leaves the
/// moment the list is out is printed as a leave (listing first, then
/// subscribing, missed such a leave: it fell between the two), and none
/// is printed twice. Several rounds, to land in the race.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_watch_misses_no_change_between_the_list_and_the_watch() {
    let c = Cluster::start(5);
    for s in &c.servers {
        s.ok(redis::cmd("CONFIG").arg("SET").arg("redislock.notify").arg("redlock:group:*")).await;
    }
    let urls = c.urls().join(",");
    let settings = Settings { release_on_disconnect: true, ..relaxed() };
    for round in 0..6 {
        let name = format!("race{round}");
        let group = Group::new(c.redlock(settings.clone()), &name).and_then(|g| g.with_ttl(Duration::from_secs(30))).expect("group");
        let a = group.join("a").await.expect("a joins");
        let (a_token, a_owner) = (a.token(), a.owner().to_string());
        let mut watch = redlock_with(&urls, OPTIONS, &["members", &name, "--watch", "--json"]).spawn().expect("spawn");
        let mut lines = BufReader::new(watch.stdout.take().expect("stdout")).lines();
        // B joins as the watch starts, A leaves once the list is out.
        let b = group.join("b").await.expect("b joins");
        let listed = next(&mut lines).await;
        a.leave().await.expect("a leaves");
        let tokens: Vec<i64> = listed.as_array().expect("a list").iter().filter_map(|m| m["token"].as_i64()).collect();
        let mut expected = Vec::new();
        if !tokens.contains(&b.token()) {
            expected.push(serde_json::json!({"event": "join", "token": b.token(), "owner": b.owner(), "value": "b"}));
        }
        if tokens.contains(&a_token) {
            expected.push(serde_json::json!({"event": "leave", "token": a_token, "owner": a_owner, "value": null}));
        }
        // What is printed until a last member's join: exactly the missing
        // changes, in either order (announced close together).
        let mut printed = Vec::new();
        while printed.len() < expected.len() {
            printed.push(event(next(&mut lines).await));
        }
        let last = group.join("last").await.expect("the last joins");
        let marker = serde_json::json!({"event": "join", "token": last.token(), "owner": last.owner(), "value": "last"});
        assert_eq!(event(next(&mut lines).await), marker, "round {round}: nothing printed twice, then the last join ({listed})");
        printed.sort_by_key(|e| e["event"].as_str().map(str::to_string));
        expected.sort_by_key(|e| e["event"].as_str().map(str::to_string));
        assert_eq!(printed, expected, "round {round}: listed {listed}");
        let pid = watch.id().and_then(|p| i32::try_from(p).ok()).expect("pid");
        // SAFETY: a signal to a process this test spawned and has not reaped.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
        let status = tokio::time::timeout(Duration::from_secs(10), watch.wait()).await.expect("ends").expect("reap");
        assert_eq!(status.code(), Some(0));
        b.leave().await.expect("b leaves");
        last.leave().await.expect("the last leaves");
    }
}
