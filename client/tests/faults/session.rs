//! Locks bound to the client's connections (`Settings::release_on_disconnect`,
//! `redlock --session`): a holder that dies frees its lock on every server
//! at once (or after its lock-delay), and a holder whose connection to a
//! server closed counts that server's hold as lost, never silently takes
//! it again.

// `serial()` is held through each test on purpose (see `common::serial`).
#![allow(clippy::await_holding_lock)]

use crate::common;

use std::time::{Duration, Instant};

use common::{eventually, relaxed, serial, Cluster};
use redlock::Settings;

fn session(delay: Duration) -> Settings {
    Settings { release_on_disconnect: true, lock_delay: Some(delay), ..relaxed() }
}

/// Trials per timing: their median is what is asserted, so a few trials
/// slowed by a busy machine do not decide.
const TRIALS: usize = 5;

/// The waiter's ttl: its lease on each server starts at that server's
/// grant, so PEXPIRETIME less this is when it was granted there.
const WAITER_TTL: Duration = Duration::from_secs(5);

/// `redlock run` holds `resource` for 30 s (with `options`), a waiter
/// waits at the head of the line, the `redlock run` is killed -9: how many
/// ms from the kill (the wall clock, just before it) to the waiter's grant
/// by a majority (the third of the five servers' grants, each read from
/// the waiter's lease on that server: the servers' clock, this machine's
/// wall clock too), or `None` when the waiter was not granted within
/// `patience` of the kill. The test's and the client's own wake-ups are
/// not in it.
async fn kill_run_to_grant(c: &Cluster, resource: &str, options: &[&str], patience: Duration) -> Option<i64> {
    let servers = c.urls().join(",");
    let session = options.contains(&"--session");
    // The command outlives its killed parent: a short one.
    let mut run = common::cli::redlock_with(&servers, options, &["run", resource, "--ttl", "30s", "--", "sleep", "8"])
        .spawn()
        .expect("spawn redlock run");
    eventually(Duration::from_secs(15), "run to hold the lock", || async { c.infos(resource).await.iter().all(Option::is_some) }).await;
    let held = c.infos(resource).await;
    assert!(held.iter().all(|i| i.as_ref().is_some_and(|i| i.session == session)), "session-bound: {session}: {held:?}");
    let lib = c.redlock(relaxed());
    let mut waiter = {
        let (lib, resource) = (lib.clone(), resource.to_string());
        tokio::spawn(async move { lib.lock_until(&resource, WAITER_TTL, Some(Instant::now() + Duration::from_secs(20))).await })
    };
    // At the head of the line: waiting on the lock itself on every server.
    eventually(Duration::from_secs(10), "the waiter at the head", || async {
        c.infos(resource).await.iter().all(|i| i.as_ref().is_some_and(|i| i.waiters == 1))
    })
    .await;
    let killed = now_unix_ms();
    run.start_kill().expect("kill -9 redlock run");
    let _ = run.wait().await;
    let outcome = tokio::time::timeout(patience, &mut waiter).await;
    if outcome.is_err() {
        waiter.abort();
    }
    let granted = match outcome {
        Ok(Ok(Ok(lock))) => {
            // Every server the waiter holds now: when it was granted there.
            let mut grants = Vec::new();
            for s in &c.servers {
                if s.info(resource).await.is_some_and(|i| i.owner == lock.owner) {
                    let end = match s.ok(redis::cmd("PEXPIRETIME").arg(resource)).await {
                        redis::Value::Int(ms) => ms,
                        other => panic!("PEXPIRETIME replied {other:?}"),
                    };
                    grants.push(end - WAITER_TTL.as_millis() as i64);
                }
            }
            grants.sort_unstable();
            assert!(grants.len() >= 3, "the waiter holds {} of 5 servers", grants.len());
            lib.release(&lock).await.expect("release");
            Some(grants[2] - killed)
        }
        Ok(Ok(Err(e))) => panic!("the waiter failed: {e}"),
        Ok(Err(e)) => panic!("the waiter's task: {e}"),
        Err(_) => None,
    };
    lib.settle().await;
    granted
}

fn now_unix_ms() -> i64 {
    common::now_unix_us() / 1000
}

/// `redlock run --session` killed -9 while it holds a 30 s lock: the waiter
/// at the head of the line has it after the lock-delay, promptly, on
/// Redis 7.0 and Valkey 8.1; without `--session` it waits for the lease.
///
/// Order: no majority grant before the kill plus the delay (1 ms for the
/// clocks' rounding).
///
/// Promptness, as the median of five trials: the kernel closing the
/// killed process's connections, each server reading the EOF and handing
/// over (a few ms idle), plus the servers waiting for a CPU on a loaded
/// machine (tens of ms). The bound, the delay plus 250 ms, needs three of
/// five trials that late. A hold not bound to its connection waits for its
/// 30 s lease (no grant within the patience: the test fails at once); a
/// lock-delay ended by a poll once a second is late by 500 ms on average.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_run_with_session_hands_its_lock_to_the_waiter_within_the_delay() {
    let _serial = serial();
    for (server, opts) in [("redis", common::Opts::default()), ("valkey", common::Opts::valkey())] {
        let c = Cluster::start_opts(vec![opts; 5]);
        for delay_ms in [0i64, 300] {
            let delay = format!("{delay_ms}ms");
            let options = vec!["--request-timeout", "1s", "--session", "--lock-delay", delay.as_str()];
            let mut times = Vec::new();
            for i in 0..TRIALS {
                let took = kill_run_to_grant(&c, &format!("nightly-{delay_ms}-{i}"), &options, Duration::from_secs(5)).await;
                times.push(took.unwrap_or_else(|| panic!("{server}: the killed holder's lock was not freed (delay {delay_ms} ms)")));
            }
            times.sort_unstable();
            println!("{server}: --session --lock-delay {delay_ms}ms: kill to majority grant {times:?} ms (servers' clock)");
            let bound = delay_ms + 250;
            assert!(times[TRIALS / 2] <= bound, "{server}: granted {times:?} ms after the kill; the median beyond the delay plus 250 ms");
            assert!(times[0] >= delay_ms - 1, "{server}: granted inside the lock-delay: {times:?} ms");
        }
    }
    // Without --session the lease decides (30 s): nothing within 3 s.
    let c = Cluster::start(5);
    let took = kill_run_to_grant(&c, "nightly-plain", &["--request-timeout", "1s"], Duration::from_secs(3)).await;
    assert_eq!(took, None, "without --session the lock is held until its lease ends");
}

/// A lock held with a lock-delay: its holder's connections close (the
/// client dropped), and another client has it once the delay has passed,
/// not before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lock_delay_holds_the_lock_after_the_holder_is_gone() {
    let _serial = serial();
    let c = Cluster::start(5);
    let holder = c.redlock(session(Duration::from_millis(800)));
    let lock = holder.lock("delayed", Duration::from_secs(30)).await.expect("lock");
    assert!(lock.instances.iter().all(|o| o.connection.is_some()), "every grant bound to a connection: {:?}", lock.instances);
    let dropped = Instant::now();
    drop(holder);
    drop(lock);
    let other = c.redlock(relaxed());
    let next =
        other.lock_until("delayed", Duration::from_secs(5), Some(Instant::now() + Duration::from_secs(10))).await.expect("after the delay");
    let after = dropped.elapsed();
    assert!(after >= Duration::from_millis(780), "granted {after:?} after the holder went, inside its 800 ms lock-delay");
    assert!(after < Duration::from_secs(5), "granted {after:?} after the holder went");
    other.release(&next).await.expect("release");
}

/// The client's connections to three of five servers are killed while it
/// holds a session-bound lock under a guard, with a lock-delay longer than
/// its 1.5 s lease: those servers unbind the hold and leave it to its
/// lease. The guard's next extension finds its connections remade and
/// counts those holds lost (the lost signal fires) instead of extending
/// them as if nothing happened, so their leases run out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_connection_is_a_lost_hold_never_extended_again() {
    let _serial = serial();
    let c = Cluster::start(5);
    let lib = c.redlock(session(Duration::from_secs(5)));
    let guard = lib.guard("watched", Duration::from_millis(1_500), None).await.expect("guard");
    for server in c.servers.iter().take(3) {
        // Every client but the one asking: the guard's connection among them.
        server.ok(redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("normal").arg("SKIPME").arg("yes")).await;
    }
    let killed = Instant::now();
    tokio::time::timeout(Duration::from_secs(5), guard.lost()).await.expect("the lost signal");
    assert!(killed.elapsed() < Duration::from_secs(3), "lost signalled {:?} after the connections closed", killed.elapsed());
    // Extended as if nothing happened, the three would stay held.
    eventually(Duration::from_secs(4), "the three holds ran out", || async {
        c.infos("watched").await.iter().take(3).all(Option::is_none)
    })
    .await;
    drop(guard);
}

/// Bad settings are refused when the client is made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_settings_are_checked() {
    let _serial = serial();
    let urls = ["redis://127.0.0.1:1"];
    let script = Settings { release_on_disconnect: true, mode: redlock::Mode::Script, ..Settings::default() };
    let e = redlock::Redlock::new(&urls, script).err().expect("script mode refused");
    assert!(e.to_string().contains("release_on_disconnect needs the redislock module"), "{e}");
    let delay = Settings { lock_delay: Some(Duration::from_millis(5)), ..Settings::default() };
    let e = redlock::Redlock::new(&urls, delay).err().expect("a delay alone refused");
    assert!(e.to_string().contains("lock_delay needs release_on_disconnect"), "{e}");
}
