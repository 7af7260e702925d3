//! Where time is the subject: a frozen server costs one request timeout,
//! a guard keeps its lock alive and signals its loss promptly.

// `serial()` is held through each test on purpose (see `common::serial`).
#![allow(clippy::await_holding_lock)]

use crate::common;

use std::time::{Duration, Instant};

use common::{eventually, median, serial, Cluster};
use redlock::{Outcome, Settings};

const MS: fn(u64) -> Duration = Duration::from_millis;

/// Locks and releases timed with a frozen server: their medians are what
/// is asserted, so one held up by a busy machine does not decide.
const FROZEN_ROUNDS: usize = 5;

/// Longer than any bound below: a call still running after it waits for
/// a server that does not answer.
const STUCK: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_server_costs_one_request_timeout() {
    let _serial = serial();
    let mut c = Cluster::start(5);
    // 200 ms: the four healthy servers answer well within it even on a
    // loaded machine (50 ms, the default, can make a healthy server a
    // "timeout" there).
    let timeout = MS(200);
    let settings = Settings { request_timeout: timeout, ..Settings::default() };
    let rl = c.redlock(settings);
    // Connections up first: a frozen server then swallows requests on a
    // live connection (the kernel still accepts the bytes).
    let warm = rl.lock("frozen", Duration::from_secs(10)).await.expect("warm-up");
    rl.release(&warm).await.unwrap();

    c.servers[2].freeze();
    let (mut lock_times, mut release_times) = (Vec::new(), Vec::new());
    for round in 0..FROZEN_ROUNDS {
        let key = format!("frozen-{round}");
        let t = Instant::now();
        let lock = tokio::time::timeout(STUCK, rl.lock(&key, Duration::from_secs(10)))
            .await
            .unwrap_or_else(|_| panic!("round {round}: no lock after {STUCK:?}: the client waits for the frozen server"));
        lock_times.push(t.elapsed());
        let lock = lock.expect("4 of 5 is a quorum");
        assert!(!matches!(lock.instances[2].outcome, Outcome::Granted { .. }), "round {round}: {}", lock.instances[2]);
        let token = lock.token.unwrap();
        if round == 0 {
            assert_eq!(lock.instances[2].outcome, Outcome::Timeout, "{}", lock.instances[2]);
            for i in [0, 1, 3, 4] {
                assert_eq!(lock.instances[i].outcome, Outcome::Granted { token: Some(token) });
            }
            assert!(lock.validity > Duration::from_secs(9), "validity {:?}", lock.validity);
        }
        let t = Instant::now();
        let released = tokio::time::timeout(STUCK, rl.release(&lock))
            .await
            .unwrap_or_else(|_| panic!("round {round}: no release after {STUCK:?}: the client waits for the frozen server"))
            .unwrap();
        release_times.push(t.elapsed());
        if round == 0 {
            assert_eq!(released.released, 4, "{released:?}");
            assert_eq!(released.instances[2].outcome, Outcome::Timeout);
        }
    }
    println!("with one frozen server, locks took {lock_times:?}, releases {release_times:?}");
    // The frozen server costs a request timeout in each of a lock's rounds
    // (the grant and the fencing write-back): about 2 × 200 ms, and one in
    // a release. Five timeouts for the median leave room for a busy
    // machine; a client that waited for the frozen server (it answers only
    // when thawed, below) never returns (`STUCK`), and one using a timeout
    // of its own (a second or more) fails the bound.
    let (lock_took, release_took) = (median(&lock_times), median(&release_times));
    assert!(lock_took < timeout * 5, "a lock took {lock_took:?} (median) with a {timeout:?} request timeout");
    assert!(release_took < timeout * 5, "a release took {release_took:?} (median) with a {timeout:?} request timeout");

    // Thawed, the server executes what was queued on the connection in
    // order: each late LOCK.ACQUIRE, then the LOCK.RELEASE sent after it.
    // So nothing of ours stays behind (the leases alone would last 10 s).
    c.servers[2].thaw();
    let s = &c.servers[2];
    eventually(Duration::from_secs(3), "thawed server to drop the late grants", || async {
        for round in 0..FROZEN_ROUNDS {
            if s.info(&format!("frozen-{round}")).await.is_some() {
                return false;
            }
        }
        true
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guard_keeps_the_lock_signals_its_loss_and_releases_on_drop() {
    let _serial = serial();
    let mut c = Cluster::start(5);
    // 100 ms rather than the default 50: under load one slow round of
    // extensions loses the lock (the guard does not retry within the
    // validity), and loss on healthy servers is not what is tested here.
    let settings = Settings { request_timeout: MS(100), ..Settings::default() };
    let rl = c.redlock(settings);
    let ttl = MS(600);

    let guard = rl.guard("kept", ttl, None).await.expect("guard");
    let first = guard.lock();
    let token = first.token.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await; // time is the subject: > 3 × ttl
    assert!(!guard.is_lost(), "lost while all servers are up");
    let now = guard.lock();
    assert!(now.acquired_at > first.acquired_at, "the guard extended the lock");
    assert_eq!((&now.owner, now.token), (&first.owner, Some(token)));
    for (info, s) in c.infos("kept").await.into_iter().zip(&c.servers) {
        let info = info.unwrap_or_else(|| panic!("{}: lock gone after 2 s with ttl 600 ms", s.addr()));
        assert_eq!((info.owner, info.token), (first.owner.clone(), Some(token)), "{}", s.addr());
        assert!(info.pttl > 0 && info.pttl <= 600);
    }

    // A majority freezes: the next extension fails and `lost` fires.
    for i in 0..3 {
        c.servers[i].freeze();
    }
    let t = Instant::now();
    let fired = tokio::time::timeout(Duration::from_secs(3), guard.lost()).await;
    let elapsed = t.elapsed();
    println!("lost() fired {elapsed:?} after three servers froze (ttl {ttl:?}, extension every ~200 ms)");
    assert!(fired.is_ok(), "lost() did not fire within 3 s");
    assert!(guard.is_lost());
    assert!(guard.lost_token().is_cancelled());
    // One extension interval (200 ms) + one request timeout (100 ms) + margin.
    assert!(elapsed < ttl, "lost() fired after {elapsed:?}, later than the ttl {ttl:?}");
    for i in 0..3 {
        c.servers[i].thaw();
    }
    drop(guard);

    // Dropping a guard releases its lock (ttl 10 s: expiry cannot be what
    // removes the keys).
    let guard = rl.guard("dropped", Duration::from_secs(10), None).await.expect("guard");
    let owner = guard.lock().owner;
    for info in c.infos("dropped").await {
        assert_eq!(info.map(|i| i.owner), Some(owner.clone()));
    }
    drop(guard);
    let c = &c;
    eventually(Duration::from_secs(3), "keys of a dropped guard to disappear", || async move {
        c.infos("dropped").await.iter().all(Option::is_none)
    })
    .await;

    // An explicit release reports the servers.
    let guard = rl.guard("released", Duration::from_secs(10), None).await.expect("guard");
    let released = guard.release().await.expect("release");
    assert_eq!(released.released, 5);
    assert_eq!(c.infos("released").await, vec![None; 5]);
}
