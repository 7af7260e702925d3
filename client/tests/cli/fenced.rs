//! `redlock run`'s command fencing its writes with `REDLOCK_TOKEN`, as the
//! help text shows it: `redis-cli LOCK.FENCED reg "$REDLOCK_TOKEN" ...` on
//! a data server of its own (with the module). redlock itself is paused
//! (SIGSTOP: nothing then stops its command) past its lease; another
//! holder takes the lock and writes; the command's late write is refused
//! by the register, and only the writes made under a current hold landed.

use crate::common;

use std::time::{Duration, Instant};

use common::{eventually, relaxed, Cluster, Server};
use redis::Value;

/// Exit status of `redlock run` when the lock was lost while the command ran.
const RUN_LOCK_LOST: i32 = 76;
const CLI_DEADLINE: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_runs_command_has_its_late_fenced_write_refused_by_the_data_server() {
    let c = Cluster::start(5);
    let data = Server::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let file = |name: &str| dir.path().join(name).display().to_string();
    let (started, go, done, late) = (file("started"), file("go"), file("done"), file("late"));
    let fenced = |value: &str| format!("redis-cli -p {} LOCK.FENCED reg \"$REDLOCK_TOKEN\" RPUSH log {value}", data.port);
    // The first write while it holds; the second once the test says so,
    // after redlock was paused past its lease and another holder wrote.
    let script = format!(
        "{first} || exit 9; touch {started}; while [ ! -e {go} ]; do sleep 0.02; done; {second} >{late} 2>&1; touch {done}",
        first = fenced("run-first"),
        second = fenced("run-late"),
    );
    let args = ["run", "fenced", "--ttl", "1s", "--wait", "10s", "--", "sh", "-c", &script];
    let child = common::cli::redlock_with(&c.urls().join(","), &["--request-timeout", "500ms"], &args).spawn().expect("spawn redlock run");
    let pid = child.id().and_then(|p| libc::pid_t::try_from(p).ok()).expect("pid");
    let since = Instant::now();
    eventually(Duration::from_secs(10), "the command's first write", || async { std::path::Path::new(&started).exists() }).await;
    // SAFETY: kill(2) on the redlock process this test spawned and has not reaped.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    assert_eq!(data.list("log").await, ["run-first"], "the command's write under its hold landed");

    // Another holder waits in line until the paused one's lease ended, and writes.
    let rl = c.redlock(relaxed());
    let b = rl.lock_until("fenced", Duration::from_secs(30), Some(Instant::now() + Duration::from_secs(10))).await.expect("B");
    let b_token = b.token.expect("B's token");
    assert_eq!(data.cmd(&b.fenced("reg", ("RPUSH", "log", "b1")).expect("B's command")).await, Ok(Value::Int(2)));

    std::fs::write(&go, "").expect("go");
    eventually(Duration::from_secs(10), "the command's late write", || async { std::path::Path::new(&done).exists() }).await;
    let reply = std::fs::read_to_string(&late).expect("redis-cli's reply");
    assert!(reply.contains("FENCED older token") && reply.contains(&format!("has accepted token {b_token}")), "{reply:?}");
    assert_eq!(data.list("log").await, ["run-first", "b1"], "the late write did not land");

    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    let ran = common::cli::finish(child, since, CLI_DEADLINE, "paused run").await;
    assert_eq!(ran.code, Some(RUN_LOCK_LOST), "{}", ran.stderr);
    rl.release(&b).await.expect("release");
}
