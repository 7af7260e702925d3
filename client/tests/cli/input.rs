//! Input that must never weaken the quorum, and errors that name their
//! cause (issue 27): a server listed twice (by spelling or as an alias
//! found by its run_id) is refused before anything is taken on it; a ttl
//! over the servers' max-ttl is a configuration error, not an outage; an
//! explicit extension of a guard is its new ttl; `redlock run` reports a
//! lock lost while redlock itself was paused. Real servers, the real
//! `redlock` binary.

use crate::common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::cli::Ran;
use common::history::History;
use common::{relaxed, Cluster, Opts};
use redlock::{Error, Redlock, Rejection, Settings};
use serde_json::Value;
use tokio::process::Command;

const CLI_DEADLINE: Duration = Duration::from_secs(30);
const USAGE: i32 = 2;
const RUN_LOCK_LOST: i32 = 76;

fn redlock_cli(servers: &str, args: &[&str]) -> Command {
    common::cli::redlock(servers, args)
}

async fn cli(servers: &str, args: &[&str]) -> Ran {
    common::cli::run(redlock_cli(servers, args), CLI_DEADLINE, &args.join(" ")).await
}

/// The `--json` error object of a failed run.
fn error_object(ran: &Ran) -> Value {
    let v: Value = serde_json::from_str(ran.stdout.trim()).unwrap_or_else(|e| panic!("no JSON error on stdout ({e}): {ran:?}"));
    v["error"].clone()
}

fn localhost(server: &common::Server) -> String {
    server.bare_url().replace("127.0.0.1", "localhost")
}

#[test]
fn a_list_that_spells_one_server_twice_is_refused_at_construction() {
    let a = "redis://127.0.0.1:7001";
    for list in [
        vec![a, a, a],
        vec![a, "redis://127.0.0.1:7001/0", "redis://127.0.0.1:7002"],
        vec!["redis://127.0.0.1:7001/0", "redis://127.0.0.1:7001/1", "redis://127.0.0.1:7002"],
        vec!["redis://LOCALHOST:7001", "redis://localhost:7001", "redis://127.0.0.1:7002"],
        vec!["redis+cluster://127.0.0.1:7001,127.0.0.1:7003", "redis://127.0.0.1:7002", a],
    ] {
        match Redlock::new(&list, Settings::default()) {
            Err(Error::Config(message)) => {
                assert!(message.contains("are the same server") && message.contains("list each server once"), "{message}");
            }
            Ok(_) => panic!("{list:?} accepted: one server would count twice"),
            Err(e) => panic!("{list:?}: expected a configuration error, got {e}"),
        }
    }
    assert!(Redlock::new(&[a, "redis://127.0.0.1:7002", "redis://127.0.0.1:7003"], Settings::default()).is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_refuses_a_repeated_server_with_exit_2_and_takes_nothing() {
    let c = Cluster::start(3);
    let (a, b) = (&c.servers[0], &c.servers[1]);
    // Spelled twice: the same URL, host:port beside redis://host:port, a db number.
    for servers in [
        format!("{},{},{}", a.url(), a.url(), a.url()),
        format!("{},{},{}", a.addr(), a.url(), b.url()),
        format!("{}/0,{}/1,{}", a.url(), a.url(), b.url()),
    ] {
        let ran = cli(&servers, &["acquire", "dup", "--ttl", "10s", "--json"]).await;
        assert_eq!(ran.code, Some(USAGE), "{servers}: {}", ran.stderr);
        let error = error_object(&ran);
        assert_eq!(error["kind"], "usage", "{error}");
        assert!(ran.stderr.contains("are the same server") && ran.stderr.contains(&a.addr()), "{}", ran.stderr);
    }
    // An alias only the server itself can reveal: localhost and 127.0.0.1.
    let servers = format!("{},{},{}", a.url(), localhost(a), b.url());
    for args in [
        vec!["acquire", "dup", "--ttl", "10s"],
        vec!["run", "dup", "--ttl", "10s", "--", "sh", "-c", "echo ran"],
        vec!["release", "dup", "someone"],
        vec!["extend", "dup", "someone", "--ttl", "10s"],
        vec!["status", "dup"],
    ] {
        let ran = cli(&servers, &args).await;
        assert_eq!(ran.code, Some(USAGE), "{args:?}: {}", ran.stderr);
        assert!(ran.stderr.contains("are the same server (run_id "), "{args:?}: {}", ran.stderr);
        assert!(!ran.stdout.contains("ran"), "the command must not run: {}", ran.stdout);
    }
    for s in &c.servers {
        assert_eq!(s.info("dup").await, None, "{}: nothing is taken on a list that repeats a server", s.addr());
    }
    // Three distinct servers still work.
    let ran = cli(&c.urls().join(","), &["acquire", "dup", "--ttl", "10s"]).await;
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alias_found_at_first_contact_is_refused_by_the_library() {
    let c = Cluster::start(3);
    let a = &c.servers[0];
    let rl = Redlock::new(&[a.url(), localhost(a), c.servers[1].url()], relaxed()).expect("spelled apart");
    for attempt in 0..2 {
        match rl.try_lock("alias", Duration::from_secs(10)).await {
            Err(Error::Config(message)) => {
                assert!(message.contains("are the same server (run_id "), "{message}");
                assert!(message.contains(&a.addr()) && message.contains("localhost"), "both entries named: {message}");
            }
            other => panic!("attempt {attempt}: expected a configuration error, got {other:?}"),
        }
    }
    assert!(matches!(
        rl.lock_until("alias", Duration::from_secs(10), Some(Instant::now() + Duration::from_secs(2))).await,
        Err(Error::Config(_))
    ));
    assert!(matches!(rl.verify_servers().await, Err(Error::Config(_))));
    for s in &c.servers {
        assert_eq!(s.info("alias").await, None, "{}: nothing taken", s.addr());
    }
}

/// Two clients at once on one resource, one of them with a list that
/// names one server three times (quorum 2 of "3", all one process): it
/// must never be granted, and the holds of the two never overlap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clients_one_with_a_duplicated_list_never_overlap() {
    let c = Cluster::start(5);
    let a = &c.servers[0];
    let honest = c.redlock(relaxed());
    // Quorum 2 of "3": without the check, the alias alone would be a quorum,
    // and the honest client's own quorum need not include that server.
    let duplicated = Redlock::new(&[a.url(), localhost(a), c.servers[1].url()], relaxed()).expect("spelled apart");
    let history = History::new();
    let until = Instant::now() + Duration::from_secs(3);
    let honest_loop = {
        let (rl, history) = (honest.clone(), history.clone());
        tokio::spawn(async move {
            let mut granted = 0;
            while Instant::now() < until {
                if let Ok(lock) = rl.lock_until("shared-res", Duration::from_secs(5), Some(until)).await {
                    let at = Instant::now();
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    history.record("honest", lock.token.unwrap_or(0), at, Instant::now());
                    let _ = rl.release(&lock).await;
                    granted += 1;
                }
            }
            granted
        })
    };
    let mut refused = 0;
    while Instant::now() < until {
        match duplicated.try_lock("shared-res", Duration::from_secs(5)).await {
            Ok(lock) => {
                let at = Instant::now();
                tokio::time::sleep(Duration::from_millis(20)).await;
                history.record("duplicated", lock.token.unwrap_or(0), at, Instant::now());
                let _ = duplicated.release(&lock).await;
            }
            Err(Error::Config(_)) => refused += 1,
            Err(e) => panic!("expected a configuration error, got {e}"),
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let granted = honest_loop.await.expect("honest loop");
    assert!(granted > 0, "the honest client was granted nothing");
    history.check().assert_exclusive("an honest client beside one with a duplicated list");
    let by_duplicated = history.holds().iter().filter(|h| h.client == "duplicated").count();
    assert_eq!(by_duplicated, 0, "a list naming one server twice was granted");
    assert!(refused > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ttl_over_max_ttl_names_the_setting_and_is_not_an_outage() {
    let c = Cluster::start_opts(vec![Opts { module_args: vec!["max-ttl".into(), "60000".into()], ..Opts::default() }; 3]);
    let servers = c.urls().join(",");
    let ran = cli(&servers, &["acquire", "long", "--ttl", "2m", "--json"]).await;
    assert_eq!(ran.code, Some(USAGE), "{}", ran.stderr);
    let error = error_object(&ran);
    assert_eq!(error["kind"], "max_ttl", "{error}");
    assert!(ran.stderr.contains("redislock.max-ttl (60000 ms)"), "the setting and its value: {}", ran.stderr);
    assert!(!ran.stderr.contains("no quorum reachable"), "{}", ran.stderr);
    assert_eq!(error["instances"][0]["kind"], "max_ttl", "{error}");
    // Refused at once, not retried until the wait runs out.
    let ran = cli(&servers, &["run", "long", "--ttl", "2m", "--wait", "20s", "--", "sh", "-c", "echo ran"]).await;
    assert_eq!(ran.code, Some(USAGE), "{}", ran.stderr);
    assert!(ran.took < Duration::from_secs(10), "retried for {:?}", ran.took);
    assert!(!ran.stdout.contains("ran"));

    let rl = c.redlock(relaxed());
    match rl.lock("long", Duration::from_secs(120)).await {
        Err(Error::Rejected { rejection: Rejection::MaxTtl, .. }) => {}
        other => panic!("expected Rejected(MaxTtl), got {other:?}"),
    }
    // An extension over max-ttl is refused as asked: the lock is not lost.
    let guard = rl.guard("long", Duration::from_secs(5), None).await.expect("guard");
    match guard.extend(Duration::from_secs(120)).await {
        Err(Error::Rejected { rejection: Rejection::MaxTtl, .. }) => {}
        other => panic!("expected Rejected(MaxTtl), got {other:?}"),
    }
    assert!(!guard.is_lost(), "a refused extension loses nothing");
    assert_eq!(guard.lock().ttl, Duration::from_secs(5));
    for s in &c.servers {
        assert!(s.pttl("long").await > 3_000, "{}: the lease is as it was", s.addr());
    }
    guard.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_explicit_extend_is_the_guards_new_ttl_longer_or_shorter() {
    let c = Cluster::start(3);
    let rl = c.redlock(relaxed());
    let guard = rl.guard("kept", Duration::from_millis(1500), None).await.expect("guard");
    let extended = guard.extend(Duration::from_secs(8)).await.expect("extend");
    assert_eq!(extended.ttl, Duration::from_secs(8));
    // Three of the old ttl: the guard's own extensions, at the old ttl,
    // would have cut the lease back to 1.5 s.
    tokio::time::sleep(Duration::from_millis(4500)).await;
    assert!(!guard.is_lost());
    assert_eq!(guard.lock().ttl, Duration::from_secs(8));
    assert!(guard.lock().remaining() > Duration::from_secs(3), "validity follows: {:?}", guard.lock().remaining());
    for s in &c.servers {
        assert!(s.pttl("kept").await > 4_000, "{}: {} ms", s.addr(), s.pttl("kept").await);
    }
    // Shorter: allowed; the guard keeps the lock at the new ttl.
    guard.extend(Duration::from_millis(1200)).await.expect("shorten");
    for s in &c.servers {
        assert!(s.pttl("kept").await <= 1_200, "{}: shortened", s.addr());
    }
    tokio::time::sleep(Duration::from_millis(3000)).await;
    assert!(!guard.is_lost(), "kept at the shorter ttl");
    assert_eq!(guard.lock().ttl, Duration::from_millis(1200));
    for s in &c.servers {
        let pttl = s.pttl("kept").await;
        assert!(pttl > 0 && pttl <= 1_200, "{}: {pttl} ms", s.addr());
    }
    guard.release().await.expect("release");
}

/// Only the `redlock run` process is paused (SIGSTOP, as a VM pause or a
/// long GC would), past its lease; the command exits 0 meanwhile. The
/// run must not report success: exit 76, saying when the lock was lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_reports_a_lock_lost_while_redlock_itself_was_paused() {
    let c = Cluster::start(3);
    let dir = tempfile::tempdir().expect("tempdir");
    let started = dir.path().join("started");
    let script = format!("touch {}; sleep 1; exit 0", started.display());
    let child = redlock_cli(&c.urls().join(","), &["run", "paused", "--ttl", "1s", "--wait", "10s", "--", "sh", "-c", &script])
        .spawn()
        .expect("spawn redlock run");
    let pid = child.id().and_then(|p| libc::pid_t::try_from(p).ok()).expect("pid");
    let since = Instant::now();
    common::eventually(Duration::from_secs(10), "the command to start", || async { started.exists() }).await;
    // SAFETY: kill(2) on the redlock process this test spawned and has not reaped.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    // The command exits after 1 s; the lease (1 s) runs out while paused.
    tokio::time::sleep(Duration::from_millis(3000)).await;
    for s in &c.servers {
        assert_eq!(s.info("paused").await, None, "{}: the lease ran out during the pause", s.addr());
    }
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    let ran = common::cli::finish(child, since, CLI_DEADLINE, "paused run").await;
    assert_eq!(ran.code, Some(RUN_LOCK_LOST), "{}", ran.stderr);
    assert!(ran.stderr.contains("was lost (expired) at") && ran.stderr.contains("ran without it"), "{}", ran.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_smaller_items_each_say_what_is_wrong() {
    let c = Cluster::start(3);
    let servers = c.urls().join(",");
    // REDLOCK_SERVERS set but empty names the variable.
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_redlock"));
    cmd.env("REDLOCK_SERVERS", "").args(["status"]).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
    let ran = common::cli::run(cmd, CLI_DEADLINE, "empty REDLOCK_SERVERS").await;
    assert_eq!(ran.code, Some(USAGE));
    assert!(ran.stderr.contains("REDLOCK_SERVERS is set but empty"), "{}", ran.stderr);

    // A huge owner is not echoed back whole.
    let owner = "o".repeat(100_000);
    let ran = cli(&servers, &["release", "r", &owner]).await;
    assert_eq!(ran.code, Some(4), "no server holds it for that owner: {}", ran.stderr);
    assert!(ran.stderr.contains("... (100000 bytes)"), "{}", ran.stderr);
    assert!(ran.stderr.len() < 4_000, "{} bytes of stderr", ran.stderr.len());

    // REDLOCK_PERMIT only with --limit, never inherited from outside.
    let mut cmd = redlock_cli(&servers, &["run", "r", "--ttl", "5s", "--", "sh", "-c", "echo permit=${REDLOCK_PERMIT-unset}"]);
    cmd.env("REDLOCK_PERMIT", "outer");
    let ran = common::cli::run(cmd, CLI_DEADLINE, "run without --limit").await;
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    assert!(ran.stdout.contains("permit=unset"), "{}", ran.stdout);
    let ran = cli(&servers, &["run", "r", "--ttl", "5s", "--limit", "2", "--", "sh", "-c", "echo permit=$REDLOCK_PERMIT"]).await;
    assert!(ran.stdout.contains("permit=r:permit:"), "{}", ran.stdout);

    // Script mode has no tokens: no empty token line.
    let ran = cli(&servers, &["--mode", "script", "acquire", "plain", "--ttl", "5s"]).await;
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    assert!(!ran.stdout.contains("token"), "{}", ran.stdout);
    assert!(ran.stdout.contains("owner"), "{}", ran.stdout);
}
