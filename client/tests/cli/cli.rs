//! `redlock run` end to end: the real binary against five real servers.

use crate::common;

use std::time::{Duration, Instant};

use common::cli::Ran;
use common::{eventually, relaxed, Cluster};
use tokio::process::{Child, Command};

/// Exit status of `redlock run` when the lock was not taken (`redlock --help`).
const RUN_NOT_LOCKED: i32 = 75;
/// Exit status of `redlock run` when the lock was lost and the command stopped.
const RUN_LOCK_LOST: i32 = 76;
/// No CLI invocation here may take longer.
const CLI_DEADLINE: Duration = Duration::from_secs(20);

fn redlock(c: &Cluster, args: &[&str]) -> Command {
    // Not the subject here: keep a loaded machine from turning a healthy
    // server into a timeout.
    redlock_with_timeout(c, "500ms", args)
}

fn redlock_with_timeout(c: &Cluster, request_timeout: &str, args: &[&str]) -> Command {
    common::cli::redlock_with(&c.urls().join(","), &["--request-timeout", request_timeout], args)
}

/// Waits for a `redlock` spawned just before (these tests compare `ended`).
async fn finish(child: Child, what: &str) -> Ran {
    common::cli::finish(child, Instant::now(), CLI_DEADLINE, what).await
}

async fn run(c: &Cluster, args: &[&str], what: &str) -> Ran {
    finish(redlock(c, args).spawn().expect("spawn redlock"), what).await
}

fn token_of(stdout: &str) -> i64 {
    stdout.trim().parse().unwrap_or_else(|e| panic!("REDLOCK_TOKEN {stdout:?} is not a token: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_gives_the_command_a_real_fencing_token_and_releases() {
    let c = Cluster::start(5);
    let lib = c.redlock(relaxed());
    let before = lib.lock("cli-token", Duration::from_secs(5)).await.unwrap();
    lib.release(&before).await.unwrap();

    let ran = run(&c, &["run", "cli-token", "--ttl", "2s", "--", "sh", "-c", "echo $REDLOCK_TOKEN"], "run").await;
    assert_eq!(ran.code, Some(0), "stderr: {}", ran.stderr);
    let token = token_of(&ran.stdout);
    assert_eq!(c.infos("cli-token").await, vec![None; 5], "released when the command exited");

    let after = lib.lock("cli-token", Duration::from_secs(5)).await.unwrap();
    lib.release(&after).await.unwrap();
    assert!(
        before.token.unwrap() < token && token < after.token.unwrap(),
        "the command's token {token} must be a fencing token of the servers, between {:?} and {:?}",
        before.token,
        after.token
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_run_is_refused_without_wait_and_follows_with_wait() {
    let c = Cluster::start(5);
    // The first prints its token and, when its command ends, the time; the
    // waiting one the time its command starts, then its token.
    let mut first =
        redlock(&c, &["run", "cli-shared", "--ttl", "2s", "--", "sh", "-c", "echo $REDLOCK_TOKEN $REDLOCK_OWNER; sleep 2; date +%s%N"])
            .spawn()
            .expect("spawn first");
    // The first holds the lock once every server shows an owner.
    eventually(Duration::from_secs(10), "first run to hold the lock", || async { c.infos("cli-shared").await.iter().all(Option::is_some) })
        .await;
    assert!(first.try_wait().unwrap().is_none(), "first run ended early");

    let refused = run(&c, &["run", "cli-shared", "--ttl", "2s", "--", "sh", "-c", "echo ran"], "no --wait").await;
    assert_eq!(refused.code, Some(RUN_NOT_LOCKED), "stderr: {}", refused.stderr);
    assert!(!refused.stdout.contains("ran"), "the command must not run: {:?}", refused.stdout);
    assert!(first.try_wait().unwrap().is_none(), "the refusal took longer than the first's hold; rerun on a less loaded machine");

    let waiting = redlock(&c, &["run", "cli-shared", "--ttl", "2s", "--wait", "10s", "--", "sh", "-c", "date +%s%N; echo $REDLOCK_TOKEN"])
        .spawn()
        .expect("spawn waiting");
    let (first, waited) = tokio::join!(finish(first, "first"), finish(waiting, "--wait 10s"));
    assert_eq!(first.code, Some(0), "stderr: {}", first.stderr);
    assert_eq!(waited.code, Some(0), "stderr: {}", waited.stderr);
    let first_token = token_of(first.stdout.split_whitespace().next().unwrap_or(""));
    let waited_token = token_of(waited.stdout.lines().last().unwrap_or(""));
    assert!(waited_token > first_token, "{waited_token} after {first_token}");
    // The processes' exits may come in either order (the holder exits after
    // its release, the waiter's command is quick): the commands may not.
    let first_end: u128 = first.stdout.lines().last().and_then(|l| l.trim().parse().ok()).expect("the first's end time");
    let waited_start: u128 = waited.stdout.lines().next().and_then(|l| l.trim().parse().ok()).expect("the waiting one's start time");
    assert!(waited_start >= first_end, "the waiting run's command started {} ns before the holder's ended", first_end - waited_start);
    assert_eq!(c.infos("cli-shared").await, vec![None; 5]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_passes_the_exit_status_through() {
    let c = Cluster::start(5);
    let ran = run(&c, &["run", "cli-exit", "--ttl", "2s", "--", "sh", "-c", "exit 7"], "exit 7").await;
    assert_eq!(ran.code, Some(7), "stderr: {}", ran.stderr);
    assert_eq!(c.infos("cli-exit").await, vec![None; 5], "released after a failing command too");
    let ran = run(&c, &["run", "cli-exit", "--ttl", "2s", "--", "/nonexistent/command"], "not found").await;
    assert_eq!(ran.code, Some(127), "stderr: {}", ran.stderr);
    assert_eq!(c.infos("cli-exit").await, vec![None; 5], "released when the command could not start");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_stops_the_command_when_the_lock_is_lost() {
    let mut c = Cluster::start(5);
    let child = redlock_with_timeout(
        &c,
        "50ms",
        // The 50 ms request timeout is for noticing the loss; on a loaded
        // machine the first acquisition may need a retry under it.
        &["run", "cli-lost", "--ttl", "600ms", "--wait", "10s", "--", "sh", "-c", "echo started; exec sleep 30"],
    )
    .spawn()
    .expect("spawn");
    eventually(Duration::from_secs(10), "run to hold the lock", || async { c.infos("cli-lost").await.iter().all(Option::is_some) }).await;
    for i in 0..3 {
        c.servers[i].freeze();
    }
    let frozen_at = Instant::now();
    let ran = finish(child, "lost").await;
    let took = ran.ended - frozen_at;
    for i in 0..3 {
        c.servers[i].thaw();
    }
    assert_eq!(ran.code, Some(RUN_LOCK_LOST), "stderr: {}", ran.stderr);
    assert!(ran.stdout.contains("started"));
    assert!(took < Duration::from_secs(3), "the command was stopped {took:?} after the majority froze");
}

/// Whether `pid` runs (a zombie, exited but not reaped yet, does not).
fn running(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
    // The state is the first field after the command name's parenthesis.
    stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next()).is_some_and(|state| state != "Z")
}

/// A command never outlives `redlock run`: killed by SIGKILL, which it
/// cannot forward, redlock leaves its command to the kernel, which kills
/// it too. The hold ends with redlock's connections, so a command left
/// running would run without the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_dies_with_a_killed_run() {
    let c = Cluster::start(5);
    let dir = tempfile::tempdir().expect("temp dir");
    let pid_file = dir.path().join("pid");
    // `exec`: the shell's pid becomes sleep's.
    let script = format!("echo $$ > {}; exec sleep 60", pid_file.display());
    let mut run = redlock(&c, &["run", "cli-orphan", "--ttl", "2s", "--", "sh", "-c", &script]).spawn().expect("spawn");
    let mut command = None;
    eventually(Duration::from_secs(10), "the command to start", || {
        let found = std::fs::read_to_string(&pid_file).ok().and_then(|t| t.trim().parse::<i32>().ok());
        command = found;
        async move { found.is_some() }
    })
    .await;
    let command = command.expect("the command's pid");
    assert!(running(command), "the command runs under redlock");
    let supervisor = run.id().and_then(|p| i32::try_from(p).ok()).expect("redlock's pid");
    // SAFETY: a signal to the process this test spawned.
    assert_eq!(unsafe { libc::kill(supervisor, libc::SIGKILL) }, 0);
    run.wait().await.expect("reap redlock");
    let deadline = Instant::now() + Duration::from_secs(10);
    while running(command) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let survived = running(command);
    if survived {
        // SAFETY: the test's own grandchild, left behind by the failure.
        unsafe { libc::kill(command, libc::SIGKILL) };
    }
    assert!(!survived, "the command outlived redlock run by 10 s");
}

/// `redlock status` without a resource: each server's summary from
/// `INFO redislock`, as a table and as JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_without_a_resource_summarises_each_server() {
    let mut opts = vec![common::Opts::default(), common::Opts::default(), common::Opts::quarantine(60_000)];
    opts.push(common::Opts::default());
    let mut c = common::Cluster::start_opts(opts);
    let held = redlock(&c, &["acquire", "report", "--ttl", "60s"]).spawn().expect("spawn");
    let held = finish(held, "acquire").await;
    assert_eq!(held.code, Some(0), "acquired on 3 of 4");
    // One client waiting on the first server.
    let mut waiter = c.servers[0].conn().await;
    let wait = tokio::spawn(async move {
        redis::cmd("LOCK.ACQUIRE").arg("report").arg("w").arg(1000).arg("WAIT").arg(20_000).query_async::<redis::Value>(&mut waiter).await
    });
    eventually(Duration::from_secs(10), "the waiter queued", || async {
        c.servers[0].info("report").await.is_some_and(|i| i.waiters == 1)
    })
    .await;
    c.servers[3].kill9();

    let json = finish(redlock(&c, &["status", "--json"]).spawn().expect("spawn"), "status --json").await;
    assert_eq!(json.code, Some(0), "3 of 4 answered: a quorum");
    let rows: serde_json::Value = serde_json::from_str(&json.stdout).expect("JSON");
    let rows = rows.as_array().expect("one row per server");
    assert_eq!(rows.len(), 4);
    for (i, row) in rows.iter().enumerate().take(3) {
        assert_eq!(row["reachable"], true, "server {i}: {row}");
        let quarantined = i == 2;
        assert_eq!(row["quarantine_ms_left"].as_i64().map(|ms| ms > 0), Some(quarantined), "server {i}: {row}");
        assert_eq!(row["locks"], if quarantined { 0 } else { 1 }, "server {i}: {row}");
        assert_eq!(row["clients_waiting"], if i == 0 { 1 } else { 0 }, "server {i}: {row}");
        assert!(row["highest_token"].as_i64().is_some_and(|t| t > 0), "server {i}: {row}");
    }
    assert_eq!(rows[3]["reachable"], false, "the killed server: {}", rows[3]);

    let text = finish(redlock(&c, &["status"]).spawn().expect("spawn"), "status").await;
    let header = text.stdout.lines().next().unwrap_or_default().to_string();
    for column in ["SERVER", "REACHABLE", "QUARANTINE_MS_LEFT", "LOCKS", "WAITERS", "HIGHEST_TOKEN"] {
        assert!(header.contains(column), "{column} in {header:?}");
    }
    c.servers[0].ok(redis::cmd("DEL").arg("report")).await;
    assert!(matches!(wait.await.expect("waiter task"), Ok(redis::Value::Int(_))));
}

fn field<'a>(stdout: &'a str, name: &str) -> &'a str {
    stdout.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(": ")).unwrap_or_else(|| panic!("no {name} in {stdout:?}"))
}

/// `acquire --limit 2`: two permits, each a lock of its own, a third
/// refused (exit 3, saying none of the 2 is free); a released permit is taken again; `run --limit`
/// tells the command which permit it holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_and_run_with_a_limit_take_permits_of_a_semaphore() {
    let c = Cluster::start(5);
    let take = || run(&c, &["acquire", "pool", "--ttl", "30s", "--limit", "2"], "acquire --limit 2");
    let first = take().await;
    let second = take().await;
    assert_eq!((first.code, second.code), (Some(0), Some(0)), "stderr: {} {}", first.stderr, second.stderr);
    let permits = [field(&first.stdout, "resource"), field(&second.stdout, "resource")];
    assert_ne!(permits[0], permits[1], "two holders of one permit");
    for p in permits {
        assert!(p == "pool:permit:0" || p == "pool:permit:1", "permit {p:?}");
        assert!(c.infos(p).await.iter().all(Option::is_some), "{p} held on every server");
    }
    let third = take().await;
    assert_eq!(third.code, Some(3), "a third permit of two: stderr {}", third.stderr);
    // The refusal says how many permits are free of how many.
    assert!(third.stderr.contains("now 0 of 2 permits free (1 asked)"), "stderr {}", third.stderr);
    // extend and release by the semaphore's name find the owner's permit.
    let first_owner = field(&first.stdout, "owner");
    let extended = run(&c, &["extend", "pool", first_owner, "--ttl", "60s", "--limit", "2"], "extend --limit 2").await;
    assert_eq!(extended.code, Some(0), "stderr: {}", extended.stderr);
    assert_eq!(field(&extended.stdout, "permit"), permits[0], "extend names the owner's permit");
    assert_eq!(field(&extended.stdout, "extended"), "5");
    let pttls: Vec<i64> = c.infos(permits[0]).await.iter().map(|i| i.as_ref().map_or(-2, |i| i.pttl)).collect();
    assert!(pttls.iter().all(|p| *p > 30_000), "permit {} extended to 60 s on every server: {pttls:?}", permits[0]);
    let stranger = run(&c, &["extend", "pool", "not-an-owner", "--ttl", "60s", "--limit", "2"], "extend --limit, no such owner").await;
    assert_eq!(stranger.code, Some(5), "an owner holding no permit is not extended: stderr {}", stranger.stderr);
    assert!(stranger.stderr.contains("\"pool\""), "the error names the semaphore: {}", stranger.stderr);
    let released = run(&c, &["release", "pool", first_owner, "--limit", "2"], "release --limit 2").await;
    assert_eq!(released.code, Some(0), "stderr: {}", released.stderr);
    assert_eq!((field(&released.stdout, "permit"), field(&released.stdout, "released")), (permits[0], "5"));
    assert_eq!(c.infos(permits[0]).await, vec![None; 5], "the owner's permit is free");
    assert!(c.infos(permits[1]).await.iter().all(Option::is_some), "the other permit is still held");
    let twice = run(&c, &["release", "pool", first_owner, "--limit", "2"], "release --limit 2 again").await;
    assert_eq!(twice.code, Some(4), "a second release finds no permit: stdout {} stderr {}", twice.stdout, twice.stderr);
    let again = take().await;
    assert_eq!((again.code, field(&again.stdout, "resource")), (Some(0), permits[0]), "stderr: {}", again.stderr);

    let refused = run(&c, &["run", "pool", "--limit", "2", "--", "sh", "-c", "echo ran"], "run --limit 2, all taken").await;
    assert_eq!(refused.code, Some(RUN_NOT_LOCKED), "stderr: {}", refused.stderr);
    // Another limit beside holds of 2 is refused by the servers, as one
    // server refuses it (issue 55); the command does not run.
    let other = run(&c, &["run", "pool", "--limit", "3", "--", "sh", "-c", "echo ran"], "run --limit 3 beside holds of 2").await;
    assert_eq!(other.code, Some(2), "stdout {} stderr {}", other.stdout, other.stderr);
    assert!(other.stderr.contains("wrong lock kind"), "the servers' refusal: {}", other.stderr);
    assert!(!other.stdout.contains("ran"), "{}", other.stdout);
    assert_eq!(c.infos("pool:permit:2").await, vec![None; 5], "nothing taken");
    let other = run(&c, &["acquire", "pool", "--ttl", "30s", "--limit", "4"], "acquire --limit 4 beside holds of 2").await;
    assert_eq!(other.code, Some(2), "stdout {} stderr {}", other.stdout, other.stderr);
    let ran = run(&c, &["run", "pool1", "--limit", "1", "--", "sh", "-c", "echo $REDLOCK_RESOURCE $REDLOCK_PERMIT"], "run --limit 1").await;
    assert_eq!(ran.code, Some(0), "stderr: {}", ran.stderr);
    assert_eq!(ran.stdout.trim(), "pool1 pool1:permit:0", "the permit is named, not the limit record");
    assert_eq!(c.infos("pool1:permit:0").await, vec![None; 5], "released when the command exited");
    for s in &c.servers {
        assert_eq!(s.ok(redis::cmd("EXISTS").arg("pool1:permits")).await, redis::Value::Int(0), "the limit record released too");
    }
    let bad = run(&c, &["acquire", "pool", "--ttl", "1s", "--limit", "0"], "--limit 0").await;
    assert_eq!(bad.code, Some(2), "stderr: {}", bad.stderr);
    // status --limit: one line per permit; permits 0 and 1 are held (by
    // `second` and `again`), permit 2 was released when `run` exited.
    let status = run(&c, &["status", "pool", "--limit", "3"], "status --limit 3").await;
    assert_eq!(status.code, Some(0), "stderr: {}", status.stderr);
    let lines: Vec<&str> = status.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "one line per permit: {}", status.stdout);
    for (i, line) in lines.iter().enumerate() {
        assert!(line.contains(&format!("pool:permit:{i}")), "line {i}: {line}");
    }
    let holders = [field(&second.stdout, "owner"), field(&again.stdout, "owner")];
    assert!(lines[..2].iter().all(|l| holders.iter().any(|h| l.contains(h))), "permits 0 and 1 name their holders: {}", status.stdout);
    assert!(!holders.iter().any(|h| lines[2].contains(h)), "permit 2 is free: {}", lines[2]);
}

/// `acquire --shared` twice: two holders, which `status` lists; an
/// exclusive `acquire` is refused beside them (exit 3); `run --shared`
/// runs beside them with its own token; `--shared --limit` is a usage
/// error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_and_run_shared_hold_a_read_write_lock_together() {
    let c = Cluster::start(5);
    let read = || run(&c, &["acquire", "schema", "--ttl", "30s", "--shared"], "acquire --shared");
    let (r1, r2) = (read().await, read().await);
    assert_eq!((r1.code, r2.code), (Some(0), Some(0)), "stderr: {} {}", r1.stderr, r2.stderr);
    let (o1, o2) = (field(&r1.stdout, "owner"), field(&r2.stdout, "owner"));
    assert_ne!(field(&r1.stdout, "token"), field(&r2.stdout, "token"), "two readers, one token");
    let status = run(&c, &["status", "schema"], "status").await;
    assert_eq!(status.code, Some(0), "stderr: {}", status.stderr);
    assert!(status.stdout.contains("shared(2)") && status.stdout.contains(o1) && status.stdout.contains(o2), "status: {}", status.stdout);
    let writer = run(&c, &["acquire", "schema", "--ttl", "30s"], "exclusive acquire beside readers").await;
    assert_eq!(writer.code, Some(3), "a writer beside two readers: stdout {} stderr {}", writer.stdout, writer.stderr);
    let ran = run(&c, &["run", "schema", "--shared", "--", "sh", "-c", "echo $REDLOCK_TOKEN"], "run --shared").await;
    assert_eq!(ran.code, Some(0), "stderr: {}", ran.stderr);
    assert!(ran.stdout.trim().parse::<i64>().is_ok_and(|t| t > 0), "REDLOCK_TOKEN {:?}", ran.stdout);
    // extend and release --shared act on the named reader alone.
    let extended = run(&c, &["extend", "schema", o1, "--ttl", "60s", "--shared"], "extend --shared").await;
    assert_eq!(extended.code, Some(0), "stderr: {}", extended.stderr);
    let released = run(&c, &["release", "schema", o1, "--shared"], "release --shared").await;
    assert_eq!(released.code, Some(0), "stderr: {}", released.stderr);
    let status = run(&c, &["status", "schema"], "status after one reader left").await;
    assert!(status.stdout.contains("shared(1)") && status.stdout.contains(o2) && !status.stdout.contains(o1), "status: {}", status.stdout);
    let released = run(&c, &["release", "schema", o2], "release the other reader").await;
    assert_eq!(released.code, Some(0), "stderr: {}", released.stderr);
    let writer = run(&c, &["acquire", "schema", "--ttl", "30s"], "exclusive acquire after the readers").await;
    assert_eq!(writer.code, Some(0), "stderr: {}", writer.stderr);
    let bad = run(&c, &["acquire", "x", "--ttl", "1s", "--shared", "--limit", "2"], "--shared --limit").await;
    assert_eq!(bad.code, Some(2), "stderr: {}", bad.stderr);
}

/// `acquire --wait` takes the lock from the resource's line and exits at
/// once: the place in line, given up in the background after the grant,
/// must be given up before the process exits, or the next in line would
/// wait for its ttl. Run a few times: the exit races the give-up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_with_wait_leaves_no_place_in_line_behind() {
    let c = Cluster::start(5);
    for n in 0..5 {
        let resource = format!("cli-line-{n}");
        let ran = run(&c, &["acquire", &resource, "--ttl", "30s", "--wait", "5s"], "acquire --wait").await;
        assert_eq!(ran.code, Some(0), "{}", ran.stderr);
        let line = c.infos(&format!("redlock:line:{resource}")).await;
        assert!(line.iter().all(Option::is_none), "run {n}: the place in line outlived the process: {line:?}");
        assert!(c.infos(&resource).await.iter().all(Option::is_some), "run {n}: the lock is kept");
    }
}

/// `acquire --ttl 10s --wait ...` granted after a 2.5 s wait prints the
/// ttl it asked for, less the drift and a round trip, not what was left
/// of the round that waited (it printed 1.4–4.0 s: the waiting round was
/// counted twice, and a grant late in it kept its lease from before).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_after_a_wait_prints_the_validity_of_its_ttl() {
    let c = Cluster::start(5);
    let lib = c.redlock(relaxed());
    let held = lib.lock("waited-for", Duration::from_secs(30)).await.expect("lock");
    let waiting = redlock(&c, &["--json", "acquire", "waited-for", "--ttl", "10s", "--wait", "30s"]).spawn().expect("spawn");
    eventually(Duration::from_secs(10), "the acquisition in line", || async {
        c.infos("redlock:line:waited-for").await.iter().any(Option::is_some)
    })
    .await;
    // Inside the head of the line's first wait (a third of the ttl): the
    // grant comes 2.5 s into the round that waited for it.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    lib.release(&held).await.expect("release");
    let ran = finish(waiting, "acquire --wait").await;
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let out: serde_json::Value = serde_json::from_str(&ran.stdout).expect("json");
    let validity = out["validity_ms"].as_u64().expect("validity_ms");
    assert!((9_000..=10_000).contains(&validity), "validity_ms {validity} after the wait: {}", ran.stdout);
}

/// `redlock status RESOURCE` shows each server's holders (how long each has
/// held the lock, whether it is bound to its connection) and its line in
/// order, as text and as JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_the_holders_and_the_line_on_every_server() {
    let c = Cluster::start(3);
    let held =
        finish(redlock(&c, &["--session", "--lock-delay", "0ms", "acquire", "report", "--ttl", "60s"]).spawn().expect("spawn"), "acquire")
            .await;
    assert_eq!(held.code, Some(0), "stderr: {}", held.stderr);
    // The holder's connections closed with the program: its session-bound
    // lock is gone again. Hold it from here instead, bound to nothing.
    eventually(Duration::from_secs(5), "the session-bound lock released", || async { c.infos("report").await.iter().all(Option::is_none) })
        .await;
    let lib = c.redlock(relaxed());
    let lock = lib.lock("report", Duration::from_secs(60)).await.expect("lock");
    // Two waiters in line on the first server: an exclusive one, then a reader.
    let mut waiters = Vec::new();
    for (owner, shared) in [("w1", false), ("r1", true)] {
        let mut conn = c.servers[0].conn().await;
        waiters.push(tokio::spawn(async move {
            let mut cmd = redis::cmd("LOCK.ACQUIRE");
            cmd.arg("report").arg(owner).arg(1000);
            if shared {
                cmd.arg("SHARED");
            }
            cmd.arg("WAIT").arg(20_000).query_async::<redis::Value>(&mut conn).await
        }));
        let n = waiters.len() as i64;
        eventually(Duration::from_secs(10), "the waiter queued", || async {
            c.servers[0].info("report").await.is_some_and(|i| i.waiters == n)
        })
        .await;
    }
    let json = finish(redlock(&c, &["status", "report", "--json"]).spawn().expect("spawn"), "status --json").await;
    assert_eq!(json.code, Some(0), "stderr: {}", json.stderr);
    let v: serde_json::Value = serde_json::from_str(&json.stdout).expect("JSON");
    let first = &v["instances"][0];
    assert_eq!(first["holders"][0]["owner"], lock.owner.as_str(), "{first}");
    assert_eq!(first["holders"][0]["session"], false, "{first}");
    assert!(first["holders"][0]["held_ms"].as_i64().is_some_and(|ms| ms >= 0), "{first}");
    let line: Vec<(&str, &str)> = first["line"]
        .as_array()
        .expect("line")
        .iter()
        .map(|w| (w["owner"].as_str().unwrap_or(""), w["mode"].as_str().unwrap_or("")))
        .collect();
    assert_eq!(line, [("w1", "exclusive"), ("r1", "shared")], "{first}");
    assert_eq!(v["instances"][1]["line"].as_array().map(Vec::len), Some(0), "nobody waits on the second server");
    let text = finish(redlock(&c, &["status", "report"]).spawn().expect("spawn"), "status").await;
    assert!(text.stdout.contains("line: 1. w1 (exclusive, waited"), "{}", text.stdout);
    assert!(text.stdout.contains("2. r1 (shared, waited"), "{}", text.stdout);
    assert!(text.stdout.contains(&format!("holders: {}, held", lock.owner)), "{}", text.stdout);
    lib.release(&lock).await.expect("release");
    for w in waiters {
        let _ = w.await;
    }
}

/// `redlock top` lists the most contended locks across the servers: a
/// quorum client's line counts for its resource, the servers' counts are
/// merged by their largest, a lock nobody waits for is left out; as JSON
/// (one document per refresh) and as text, refreshed `--iterations` times.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_lists_the_most_contended_locks_across_the_servers() {
    let c = Cluster::start(3);
    let lib = c.redlock(relaxed());
    let report = lib.lock("report", Duration::from_secs(60)).await.expect("lock");
    let _quiet = lib.lock("quiet", Duration::from_secs(60)).await.expect("lock");
    let queue = |at: usize, key: &'static str, n: i64| queue_waiter(&c.servers[at], key, n);
    let mut waiters = Vec::new();
    // Two wait for `report` on the first server, one on the second.
    waiters.push(queue(0, "report", 1).await);
    waiters.push(queue(0, "report", 2).await);
    waiters.push(queue(1, "report", 1).await);
    // Three in a quorum client's line for `jobs` on the third (its place
    // in line is a lock of its own, held by the head).
    c.servers[2].ok(redis::cmd("LOCK.ACQUIRE").arg("redlock:line:jobs").arg("head").arg(60_000)).await;
    for n in 1..=3 {
        waiters.push(queue(2, "redlock:line:jobs", n).await);
    }
    let json =
        finish(redlock(&c, &["top", "--json", "--iterations", "2", "--interval", "50ms"]).spawn().expect("spawn"), "top --json").await;
    assert_eq!(json.code, Some(0), "stderr: {}", json.stderr);
    let docs: Vec<serde_json::Value> = json.stdout.lines().map(|l| serde_json::from_str(l).expect("one JSON document a line")).collect();
    assert_eq!(docs.len(), 2, "one document per refresh: {}", json.stdout);
    let rows = docs[1]["resources"].as_array().expect("resources");
    let names: Vec<&str> = rows.iter().map(|r| r["resource"].as_str().unwrap_or("")).collect();
    assert_eq!(names, ["jobs", "report"], "busiest first, the lock nobody waits for left out: {}", docs[1]);
    assert_eq!((rows[0]["waiters"].as_i64(), rows[0]["servers"].as_i64()), (Some(3), Some(1)), "{}", rows[0]);
    let r = &rows[1];
    assert_eq!((r["waiters"].as_i64(), r["servers"].as_i64(), r["holders"].as_i64()), (Some(2), Some(2), Some(1)), "{r}");
    assert_eq!(r["mode"], "exclusive", "{r}");
    assert!(r["longest_hold_ms"].as_i64().is_some_and(|ms| ms >= 0) && r["oldest_wait_ms"].as_i64().is_some_and(|ms| ms >= 0), "{r}");
    assert_eq!(docs[1]["instances"].as_array().map(Vec::len), Some(3), "{}", docs[1]);
    let text = finish(redlock(&c, &["top", "--iterations", "1", "--count", "1"]).spawn().expect("spawn"), "top").await;
    assert_eq!(text.code, Some(0), "stderr: {}", text.stderr);
    let lines: Vec<&str> = text.stdout.lines().collect();
    assert!(lines[0].starts_with("RESOURCE") && lines[0].contains("LONGEST_HOLD_MS"), "{}", text.stdout);
    assert!(lines[1].starts_with("jobs ") && lines[1].ends_with("1/3"), "--count 1: jobs alone: {}", text.stdout);
    assert_eq!(lines[2], "3 of 3 servers answered (quorum 2)", "{}", text.stdout);
    let bad = finish(redlock(&c, &["top", "--count", "0"]).spawn().expect("spawn"), "top --count 0").await;
    assert_eq!(bad.code, Some(2), "a usage error: {}", bad.stderr);
    lib.release(&report).await.expect("release");
    for w in waiters {
        w.abort();
    }
}

/// A waiter on `key` at `server`, on a connection of its own, once it is
/// the `n`th in line there.
async fn queue_waiter(server: &common::Server, key: &'static str, n: i64) -> tokio::task::JoinHandle<redis::RedisResult<redis::Value>> {
    let mut conn = server.conn().await;
    let owner = format!("w{n}");
    let waiter = tokio::spawn(async move {
        redis::cmd("LOCK.ACQUIRE").arg(key).arg(owner).arg(1000).arg("WAIT").arg(20_000).query_async::<redis::Value>(&mut conn).await
    });
    eventually(Duration::from_secs(10), "the waiter queued", || async { server.info(key).await.is_some_and(|i| i.waiters == n) }).await;
    waiter
}

/// `redlock --cacert --cert --key` over five TLS-only servers with a
/// private CA that check client certificates: acquire, then `run` with
/// the files from REDLOCK_CACERT / REDLOCK_CERT / REDLOCK_KEY; without a
/// client certificate, the cause is named (exit 2, kind tls_failed); TLS
/// options with no rediss:// server are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_and_run_over_tls_with_a_private_ca_and_a_client_certificate() {
    let certs = common::tls::Certs::make();
    let c = common::Cluster::start_opts(vec![certs.server("server"); 5]);
    let file = |name: &str| certs.path(name).display().to_string();
    let (ca, cert, key) = (file("ca.crt"), file("client.crt"), file("client.key"));

    let tls = ["--cacert", ca.as_str(), "--cert", cert.as_str(), "--key", key.as_str()];
    let acquired = run(&c, &[&tls[..], &["acquire", "cli-tls", "--ttl", "30s"]].concat(), "acquire over TLS").await;
    assert_eq!(acquired.code, Some(0), "stderr: {}", acquired.stderr);
    let owner = field(&acquired.stdout, "owner");
    let infos = c.infos("cli-tls").await;
    assert!(infos.iter().all(|i| i.as_ref().is_some_and(|i| i.owner == owner)), "held on every server: {infos:?}");
    let released = run(&c, &[&tls[..], &["release", "cli-tls", owner]].concat(), "release over TLS").await;
    assert_eq!(released.code, Some(0), "stderr: {}", released.stderr);
    assert_eq!(c.infos("cli-tls").await, vec![None; 5]);

    let mut from_env = redlock(&c, &["run", "cli-tls", "--ttl", "5s", "--", "sh", "-c", "echo $REDLOCK_TOKEN"]);
    from_env.env("REDLOCK_CACERT", &ca).env("REDLOCK_CERT", &cert).env("REDLOCK_KEY", &key);
    let ran = finish(from_env.spawn().expect("spawn"), "run over TLS, files from the environment").await;
    assert_eq!(ran.code, Some(0), "stderr: {}", ran.stderr);
    assert!(token_of(&ran.stdout) > 0);
    assert_eq!(c.infos("cli-tls").await, vec![None; 5], "released when the command exited");

    let refused = run(&c, &["--cacert", ca.as_str(), "--json", "acquire", "cli-tls", "--ttl", "5s"], "no client certificate").await;
    assert_eq!(refused.code, Some(2), "a configuration error: {}", refused.stderr);
    let error: serde_json::Value = serde_json::from_str(&refused.stdout).expect("JSON error");
    assert_eq!(error["error"]["kind"], "tls_failed", "{error}");
    assert!(refused.stderr.contains("requires a client certificate") && refused.stderr.contains("--cert"), "{}", refused.stderr);

    let plain = common::cli::redlock_with("redis://127.0.0.1:6390", &["--cacert", ca.as_str()], &["status", "r"]);
    let plain = common::cli::run(plain, CLI_DEADLINE, "--cacert without a rediss:// server").await;
    assert_eq!(plain.code, Some(2), "{}", plain.stderr);
    assert!(plain.stderr.contains("no server is rediss://"), "{}", plain.stderr);
}
