//! `redlock revoke RESOURCE [OWNER]`: the lock taken away on every server
//! with a token above its holder's, the data store's register raised to
//! that token (`--store`, `--register`) so the removed holder's fenced
//! write is refused there, its extension answered as revoked; and without
//! a quorum, exit 6 (no quorum).

use crate::common;

use std::time::{Duration, Instant};

use common::cli::{redlock, run};
use common::{Cluster, Server};
use redis::Value;

const CLI_DEADLINE: Duration = Duration::from_secs(30);

fn json(stdout: &str) -> serde_json::Value {
    serde_json::from_str(stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoke_raises_the_stores_fence_and_the_holders_extension_hears_it() {
    let c = Cluster::start(5);
    let store = Server::start();
    let servers = c.urls().join(",");
    let acquired = run(redlock(&servers, &["--json", "acquire", "stuck", "--ttl", "30s"]), CLI_DEADLINE, "acquire").await;
    assert_eq!(acquired.code, Some(0), "{}", acquired.stderr);
    let held = json(&acquired.stdout);
    let (owner, token) = (held["owner"].as_str().expect("owner").to_string(), held["token"].as_i64().expect("token"));
    let write = |token: i64, value: &str| {
        let mut cmd = redis::cmd("LOCK.FENCED");
        cmd.arg("fence:stuck").arg(token).arg("RPUSH").arg("log").arg(value);
        cmd
    };
    assert_eq!(store.cmd(&write(token, "before")).await, Ok(Value::Int(1)));

    let since = Instant::now();
    let revoked = run(
        redlock(&servers, &["--json", "revoke", "stuck", "--store", &store.url(), "--register", "fence:stuck"]),
        CLI_DEADLINE,
        "revoke",
    )
    .await;
    assert_eq!(revoked.code, Some(0), "{}", revoked.stderr);
    let out = json(&revoked.stdout);
    let revoked_token = out["token"].as_i64().expect("token");
    assert!(revoked_token > token, "{out}");
    assert_eq!(out["fence"].as_i64(), Some(token + 1), "one above the revoked hold's token: {out}");
    assert_eq!((out["ended"].as_i64(), out["revoked"].as_u64()), (Some(5), Some(5)), "{out}");
    assert_eq!(out["registers"], serde_json::json!(["fence:stuck"]));
    assert!(since.elapsed() < CLI_DEADLINE);

    // The removed holder's fenced write is refused; the register holds the
    // fence.
    let late = store.cmd(&write(token, "late")).await;
    assert!(late.as_ref().is_err_and(|e| e.contains("FENCED") && e.contains("older token")), "{late:?}");
    assert_eq!(store.cmd(redis::cmd("LOCK.FENCEINFO").arg("fence:stuck")).await, Ok(Value::Int(token + 1)));
    assert_eq!(store.list("log").await, ["before"]);

    // Its extension is answered revoked on every server.
    let extended = run(redlock(&servers, &["--json", "extend", "stuck", &owner, "--ttl", "30s"]), CLI_DEADLINE, "extend").await;
    assert_ne!(extended.code, Some(0), "{}", extended.stdout);
    assert!(extended.stdout.contains("\"revoked\"") || extended.stderr.contains("revoked"), "{}\n{}", extended.stdout, extended.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoke_without_a_quorum_exits_6() {
    let mut c = Cluster::start(5);
    let servers = c.urls().join(",");
    for server in &mut c.servers[..3] {
        server.kill9();
    }
    let revoked = run(redlock(&servers, &["--json", "revoke", "gone"]), CLI_DEADLINE, "revoke").await;
    assert_eq!(revoked.code, Some(6), "{}\n{}", revoked.stdout, revoked.stderr);
    assert!(revoked.stdout.contains("no_quorum") || revoked.stderr.contains("no quorum"), "{}\n{}", revoked.stdout, revoked.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_lock_is_revoked_stops_its_command_and_says_why() {
    let c = Cluster::start(5);
    let servers = c.urls().join(",");
    let child =
        redlock(&servers, &["--json", "run", "revoked-run", "--ttl", "3s", "--", "sh", "-c", "exec sleep 60"]).spawn().expect("spawn run");
    let since = Instant::now();
    common::eventually(Duration::from_secs(10), "run to hold the lock", || async {
        c.infos("revoked-run").await.iter().all(Option::is_some)
    })
    .await;
    let revoked = run(redlock(&servers, &["revoke", "revoked-run"]), CLI_DEADLINE, "revoke").await;
    assert_eq!(revoked.code, Some(0), "{}", revoked.stderr);
    let ran = common::cli::finish(child, since, CLI_DEADLINE, "revoked run").await;
    assert_eq!(ran.code, Some(76), "{}", ran.stderr);
    let said = format!("{}{}", ran.stdout, ran.stderr);
    assert!(said.contains("lost (revoked)") && said.contains("\"cause\":\"revoked\""), "{said}");
}
