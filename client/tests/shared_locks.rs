//! Shared holds across the quorum (`try_lock_shared`, `lock_shared_until`,
//! `guard_shared`): readers together, never beside a writer, with tokens
//! that order every writer after the readers before it.

// The serial guard is held through a test on purpose (see semaphore.rs).
#![allow(clippy::await_holding_lock)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use redlock::{Error, Settings};

const MS: fn(u64) -> Duration = Duration::from_millis;

fn settings() -> Settings {
    Settings { request_timeout: MS(200), connect_timeout: MS(500), retry_delay: (MS(2), MS(10)), ..Settings::default() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_hold_together_and_a_writer_waits_for_all_of_them() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let c = Cluster::start(5);
    let rl = c.redlock(settings());
    let ttl = Duration::from_secs(30);
    let r1 = rl.try_lock_shared("schema", ttl).await.expect("first reader");
    let r2 = rl.try_lock_shared("schema", ttl).await.expect("second reader beside the first");
    assert!(r1.shared && r2.shared);
    let (t1, t2) = (r1.token.expect("token"), r2.token.expect("token"));
    assert_ne!(t1, t2, "two holders, one token");
    match rl.try_lock("schema", ttl).await {
        Err(Error::NotAcquired { .. }) => {}
        other => panic!("a writer beside two readers: {other:?}"),
    }
    rl.release(&r1).await.expect("r1 releases");
    assert!(matches!(rl.try_lock("schema", ttl).await, Err(Error::NotAcquired { .. })), "a writer beside one reader");
    rl.release(&r2).await.expect("r2 releases");
    let w = rl.try_lock("schema", ttl).await.expect("the writer once the readers left");
    assert!(!w.shared);
    assert!(w.token.expect("token") > t1.max(t2), "the writer's token orders it after the readers");
    assert!(matches!(rl.try_lock_shared("schema", ttl).await, Err(Error::NotAcquired { .. })), "a reader beside the writer");
    rl.release(&w).await.expect("w releases");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_guard_outlives_its_ttl_and_keeps_the_writer_out() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let c = Cluster::start(5);
    let rl = c.redlock(settings());
    let guard = rl.guard_shared("report", MS(600), Some(Instant::now() + MS(2_000))).await.expect("shared guard");
    tokio::time::sleep(MS(1_500)).await;
    assert!(!guard.is_lost(), "the guard extended its shared hold");
    assert!(matches!(rl.try_lock("report", MS(600)).await, Err(Error::NotAcquired { .. })), "a writer 2.5 ttls later");
    guard.release().await.expect("release");
    rl.try_lock("report", MS(600)).await.expect("the writer after the guard's release");
}

/// A shared hold re-entered twice is released on the servers only with
/// its last release; until then a writer stays out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reentered_shared_hold_ends_with_its_last_release() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let c = Cluster::start(5);
    let rl = c.redlock(settings());
    let ttl = Duration::from_secs(30);
    let outer = rl.try_lock_shared("cache", ttl).await.expect("reader");
    let inner = outer.reenter().expect("re-entered");
    assert!(inner.shared && inner.token == outer.token, "the same hold, re-entered");
    let first = rl.release(&inner).await.expect("inner release");
    assert_eq!(first.remaining_holds, 1, "one hold left after the inner release");
    assert!(matches!(rl.try_lock("cache", ttl).await, Err(Error::NotAcquired { .. })), "a writer while the outer hold remains");
    let last = rl.release(&outer).await.expect("outer release");
    assert_eq!(last.remaining_holds, 0);
    rl.try_lock("cache", ttl).await.expect("the writer after the last release");
}

#[derive(Clone, Copy, Debug)]
struct Hold {
    shared: bool,
    token: i64,
    granted: Instant,
    released: Instant,
}

/// One contention run at a time: each starts five servers.
static SERIAL: Mutex<()> = Mutex::new(());

/// 12 tasks on three handles mix shared (3 in 4) and exclusive requests
/// on one resource for 3 s; with `faults`, one instance is killed (-9)
/// a second in and restarted a second later. No exclusive hold overlaps
/// any other hold (each recorded from the grant's reply to the release's
/// request, inside the real hold), writers' tokens rise in grant order and
/// exceed every reader's before them, and readers do overlap.
async fn mixed_history(faults: bool) {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let mut c = Cluster::start(5);
    let handles = [c.redlock(settings()), c.redlock(settings()), c.redlock(settings())];
    let holds: Arc<Mutex<Vec<Hold>>> = Arc::default();
    let end = Instant::now() + Duration::from_secs(3);
    let mut tasks = Vec::new();
    for task in 0..12usize {
        let rl = handles[task % 3].clone();
        let holds = holds.clone();
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            while Instant::now() < end {
                n += 1;
                let shared = !(n + task as u64).is_multiple_of(4);
                let deadline = Some(Instant::now() + MS(300));
                let got = if shared {
                    rl.lock_shared_until("rw", Duration::from_secs(2), deadline).await
                } else {
                    rl.lock_until("rw", Duration::from_secs(2), deadline).await
                };
                let lock = match got {
                    Ok(lock) => lock,
                    Err(Error::NotAcquired { .. }) => continue,
                    Err(e) => panic!("task {task}: {e}"),
                };
                let granted = Instant::now();
                tokio::time::sleep(MS(2 + (n % 4))).await;
                let released = Instant::now();
                let token = lock.token.expect("module mode has tokens");
                holds.lock().unwrap_or_else(|p| p.into_inner()).push(Hold { shared, token, granted, released });
                let _ = rl.release(&lock).await;
            }
        }));
    }
    if faults {
        tokio::time::sleep(Duration::from_secs(1)).await;
        c.servers[4].kill9();
        tokio::time::sleep(Duration::from_secs(1)).await;
        c.servers[4].restart();
    }
    for t in tasks {
        t.await.expect("task");
    }
    let holds = holds.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let (shared, exclusive) = (holds.iter().filter(|h| h.shared).count(), holds.iter().filter(|h| !h.shared).count());
    let mut violations = Vec::new();
    for (i, a) in holds.iter().enumerate() {
        for b in &holds[i + 1..] {
            let overlap = a.granted < b.released && b.granted < a.released;
            if overlap && !(a.shared && b.shared) {
                violations.push(format!("{a:?} overlaps {b:?}"));
            }
        }
    }
    // A writer's token exceeds the token of every hold that ended before
    // it was granted, and every later hold's token exceeds it.
    for w in holds.iter().filter(|h| !h.shared) {
        for h in &holds {
            if h.released < w.granted && h.token >= w.token {
                violations.push(format!("{h:?} ended before writer {w:?} with a token not below it"));
            }
            if w.released < h.granted && h.token <= w.token {
                violations.push(format!("{h:?} began after writer {w:?} with a token not above it"));
            }
        }
    }
    let readers_overlapped = holds.iter().enumerate().any(|(i, a)| {
        holds[i + 1..].iter().any(|b| a.shared && b.shared && a.granted < b.released && b.granted < a.released)
    });
    eprintln!(
        "shared-lock history (faults: {faults}): {} holds ({shared} shared, {exclusive} exclusive), {} violations",
        holds.len(),
        violations.len()
    );
    assert!(violations.is_empty(), "{} violations, first: {:?}", violations.len(), violations.first());
    assert!(shared >= 20 && exclusive >= 5, "too few holds to mean anything: {shared} shared, {exclusive} exclusive");
    assert!(readers_overlapped, "no two readers ever held together: SHARED is not shared");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_and_writers_never_overlap() {
    mixed_history(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_and_writers_never_overlap_with_an_instance_killed_and_restarted() {
    mixed_history(true).await;
}
