//! `redlock ask RESOURCE [--message TEXT]`: the holder's guard hears the
//! message once, the output says how many holders were asked (0 for a free
//! lock); without a quorum, exit 6 (no quorum).

use crate::common;

use std::time::Duration;

use common::cli::{redlock, run};
use common::{relaxed, Cluster};
use futures::StreamExt;

const CLI_DEADLINE: Duration = Duration::from_secs(30);
const WAIT: Duration = Duration::from_secs(10);

fn json(stdout: &str) -> serde_json::Value {
    serde_json::from_str(stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_reaches_the_holder_once_and_says_how_many_were_asked() {
    let mut c = Cluster::start(5);
    let servers = c.urls().join(",");
    let free = run(redlock(&servers, &["ask", "nobody"]), CLI_DEADLINE, "ask a free lock").await;
    assert_eq!(free.code, Some(0), "{}", free.stderr);
    assert!(free.stdout.lines().any(|l| l == "asked: 0"), "{}", free.stdout);

    let rl = c.redlock(relaxed());
    let guard = rl.guard("asked", Duration::from_secs(30), None).await.expect("guard");
    let mut asks = Box::pin(guard.asks());
    let first = tokio::spawn(async move {
        let first = asks.next().await;
        (first, asks)
    });
    common::subscribed_everywhere(&c, "asked", 1, WAIT, "the holder subscribed").await;
    let asked = run(redlock(&servers, &["--json", "ask", "asked", "--message", "deploy at 10:00"]), CLI_DEADLINE, "ask").await;
    assert_eq!(asked.code, Some(0), "{}", asked.stderr);
    let out = json(&asked.stdout);
    assert_eq!((out["asked"].as_i64(), out["answered"].as_u64()), (Some(1), Some(5)), "{out}");
    let (first, mut asks) = tokio::time::timeout(WAIT, first).await.expect("heard in time").expect("task");
    assert_eq!(first.and_then(|a| a.message).as_deref(), Some("deploy at 10:00"));
    // Heard once: the next one heard is the next ask.
    let again = run(redlock(&servers, &["ask", "asked"]), CLI_DEADLINE, "ask again").await;
    assert!(again.stdout.lines().any(|l| l == "asked: 1"), "{}", again.stdout);
    let second = tokio::time::timeout(WAIT, asks.next()).await.expect("heard in time").expect("an ask");
    assert_eq!(second.message, None);
    assert!(!guard.is_lost(), "an ask releases nothing");
    guard.release().await.expect("release");

    for server in &mut c.servers[..3] {
        server.kill9();
    }
    let unasked = run(redlock(&servers, &["ask", "asked"]), CLI_DEADLINE, "ask without a quorum").await;
    assert_eq!(unasked.code, Some(6), "{}\n{}", unasked.stdout, unasked.stderr);
}
