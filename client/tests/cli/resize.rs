//! `redlock resize RESOURCE LIMIT`: a held semaphore shrunk on every
//! server, a client asking under the old limit then refused while the
//! holders above the new one stay; a free semaphore answered as not held;
//! a limit out of range is a usage error.

use crate::common;

use std::time::Duration;

use common::cli::{redlock, run};
use common::{relaxed, Cluster};

const CLI_DEADLINE: Duration = Duration::from_secs(30);
const TTL: Duration = Duration::from_secs(30);

fn json(stdout: &str) -> serde_json::Value {
    serde_json::from_str(stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resize_shrinks_a_held_semaphore_and_says_when_nobody_holds_it() {
    let c = Cluster::start(5);
    let servers = c.urls().join(",");
    let free = run(redlock(&servers, &["resize", "pool", "2"]), CLI_DEADLINE, "resize a free semaphore").await;
    assert_eq!(free.code, Some(0), "{}", free.stderr);
    assert!(free.stdout.lines().any(|l| l.starts_with("held: no")), "{}", free.stdout);

    let mut held = Vec::new();
    for _ in 0..3 {
        let rl = c.redlock(relaxed());
        let lock = rl.try_permit("pool", 3, TTL).await.expect("a permit of 3");
        held.push((rl, lock));
    }
    let resized = run(redlock(&servers, &["--json", "resize", "pool", "1"]), CLI_DEADLINE, "resize").await;
    assert_eq!(resized.code, Some(0), "{}", resized.stderr);
    let out = json(&resized.stdout);
    assert_eq!((out["held"].as_bool(), out["resized"].as_u64(), out["limit"].as_u64()), (Some(true), Some(5), Some(1)), "{out}");
    // Three hold, two of them above the new limit: a client asking under
    // the old limit is refused.
    let refused = run(redlock(&servers, &["acquire", "pool", "--limit", "3", "--ttl", "10s"]), CLI_DEADLINE, "acquire").await;
    assert_eq!(refused.code, Some(3), "let in over the new limit: {} {}", refused.stdout, refused.stderr);
    for (rl, lock) in &held {
        rl.release(lock).await.expect("release");
    }

    let bad = run(redlock(&servers, &["resize", "pool", "0"]), CLI_DEADLINE, "resize to 0").await;
    assert_eq!(bad.code, Some(2), "{}", bad.stderr);
}
