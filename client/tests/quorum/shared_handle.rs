//! One `Redlock` handle per process, cloned into its tasks, is the common
//! way to use the library: those tasks must exclude each other. 16 tasks
//! on one shared handle, four through each way to lock (`try_lock`,
//! `lock`, `lock_until`, `guard`), loop lock → hold → release on one
//! resource; the history checker finds no overlapping holds and tokens
//! strictly increasing in grant order, and every task that waits in line
//! is served. The same again with every hold bound to the handle's
//! connections (`release_on_disconnect`), where a grant won in line is
//! granted again on the shared connection. Its own test binary, so no other
//! test shares the CPU with it (the two runs go one after the other).

use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::fence::Fence;
use common::history::History;
use common::Cluster;
use redlock::{Error, Settings};

const MS: fn(u64) -> Duration = Duration::from_millis;

#[derive(Clone, Copy, Debug)]
enum Way {
    TryLock,
    Lock,
    LockUntil,
    Guard,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_tasks_on_one_shared_handle_exclude_each_other() {
    sixteen_tasks(false).await;
    sixteen_tasks(true).await;
}

async fn sixteen_tasks(session: bool) {
    let label = if session { "16 tasks on one handle, session-bound" } else { "16 tasks on one handle" };
    let c = Cluster::start(5);
    let fence = Fence::start();
    let fence = Arc::new(fence);
    let rl = c.redlock(Settings {
        request_timeout: MS(250),
        connect_timeout: MS(1000),
        retry_count: 2,
        retry_delay: (MS(5), MS(15)),
        release_on_disconnect: session,
        ..Settings::default()
    });
    let ttl = Duration::from_secs(2);
    let history = History::new();
    let busy = Arc::new(AtomicBool::new(false));
    let end = Instant::now() + Duration::from_secs(3);
    let ways = [Way::TryLock, Way::Lock, Way::LockUntil, Way::Guard];

    let mut tasks = Vec::new();
    for task in 0..16 {
        let (rl, history, busy, fence) = (rl.clone(), history.clone(), busy.clone(), fence.clone());
        let way = ways[task % 4];
        tasks.push(tokio::spawn(async move {
            let name = format!("task{task}:{way:?}");
            let mut grants = 0;
            while Instant::now() < end {
                // The lock or guard, kept until released below.
                let (lock, guard) = match way {
                    Way::TryLock => (rl.try_lock("shared", ttl).await, None),
                    Way::Lock => (rl.lock("shared", ttl).await, None),
                    Way::LockUntil => (rl.lock_until("shared", ttl, Some(Instant::now() + ttl)).await, None),
                    Way::Guard => match rl.guard("shared", ttl, Some(Instant::now() + ttl)).await {
                        Ok(g) => (Ok(g.lock()), Some(g)),
                        Err(e) => (Err(e), None),
                    },
                };
                let lock = match lock {
                    Ok(lock) => lock,
                    Err(Error::NotAcquired { .. }) => {
                        if matches!(way, Way::TryLock) {
                            tokio::time::sleep(MS(2)).await;
                        }
                        continue;
                    }
                    Err(e) => panic!("{name}: {e}"),
                };
                let granted = Instant::now();
                assert!(!busy.swap(true, Ordering::SeqCst), "{name} granted while another task of the handle holds it");
                let token = lock.token.expect("module mode has tokens");
                let bound = lock.instances.iter().filter(|o| o.connection.is_some()).count();
                assert!(!session || bound >= 3, "{name}: a session-bound grant on {bound} connections only: {:?}", lock.instances);
                assert!(fence.write(token, &name).await, "{name}: the fence refused token {token}");
                tokio::time::sleep(MS(2)).await;
                busy.store(false, Ordering::SeqCst);
                let released = Instant::now();
                history.record(name.clone(), token, granted, released);
                let r = match guard {
                    Some(g) => g.release().await,
                    None => rl.release(&lock).await,
                }
                .expect("release");
                assert!(r.released >= 3 && r.remaining_holds == 0, "{name}: {r:?}");
                grants += 1;
            }
            (way, grants)
        }));
    }
    let mut per_way = std::collections::BTreeMap::new();
    for t in tasks {
        let (way, grants) =
            tokio::time::timeout(Duration::from_secs(30), t).await.expect("a task did not finish within 30 s").expect("task panicked");
        *per_way.entry(format!("{way:?}")).or_insert(0) += grants;
    }
    let verdict = history.check();
    let fenced = fence.state().await;
    println!(
        "{label}: {} grants ({per_way:?}), {} overlaps, {} token inversions, fence accepted {} refused {}",
        verdict.grants,
        verdict.overlaps.len(),
        verdict.inversions.len(),
        fenced.accepted,
        fenced.refused
    );
    verdict.assert_exclusive(label);
    // The waiting ways are served in turn. The polling ones (`try_lock`,
    // `lock`) pass nobody in line: while the line is never empty they may
    // get nothing, as on a single server whose queue is never empty.
    for way in ["LockUntil", "Guard"] {
        assert!(per_way.get(way).is_some_and(|g| *g > 0), "{label}: no grant through {way}: {per_way:?}");
    }
    assert_eq!((fenced.accepted as usize, fenced.refused), (verdict.grants, 0));
    assert_eq!(c.infos("shared").await, vec![None; 5], "{label}: everything released");
}
