//! Mutual exclusion and token order under contention: 16 clients, each
//! with its own connections, fight for one resource for about 3 s. It
//! holds `common::serial()`, as every test of its program does, so no
//! other test shares the CPU with it.

// `serial()` is held through each test on purpose (see `common::serial`).
#![allow(clippy::await_holding_lock)]

use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{serial, Cluster};
use redlock::{Error, Settings};

const MS: fn(u64) -> Duration = Duration::from_millis;

#[derive(Debug)]
struct Hold {
    client: usize,
    token: i64,
    granted: Instant,
    released: Instant,
    waited: Duration,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_clients_never_overlap_and_tokens_increase() {
    let _serial = serial();
    let c = Cluster::start(5);
    let settings = Settings { request_timeout: MS(250), connect_timeout: MS(1000), retry_delay: (MS(5), MS(15)), ..Settings::default() };
    let ttl = Duration::from_secs(2);
    let busy = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let end = start + Duration::from_secs(3);

    let mut tasks = Vec::new();
    for client in 0..16 {
        let rl = c.redlock(settings.clone());
        let busy = busy.clone();
        tasks.push(tokio::spawn(async move {
            let mut holds = Vec::new();
            let mut failures = Vec::new();
            while Instant::now() < end {
                let asked = Instant::now();
                match rl.lock_until("contended", ttl, Some(asked + ttl)).await {
                    Ok(lock) => {
                        let granted = Instant::now();
                        assert!(!busy.swap(true, Ordering::SeqCst), "client {client} granted while another holds it");
                        tokio::time::sleep(MS(1)).await;
                        let released = Instant::now();
                        busy.store(false, Ordering::SeqCst);
                        let token = lock.token.expect("token");
                        let r = rl.release(&lock).await.expect("release");
                        assert!(r.released >= 3, "release reached no quorum: {r:?}");
                        holds.push(Hold { client, token, granted, released, waited: granted - asked });
                    }
                    Err(Error::NotAcquired { attempts, .. }) => failures.push((asked.elapsed(), attempts)),
                    Err(e) => panic!("client {client}: {e}"),
                }
            }
            (holds, failures)
        }));
    }
    let mut holds = Vec::new();
    let mut failures = Vec::new();
    for t in tasks {
        let (h, f) = tokio::time::timeout(Duration::from_secs(20), t)
            .await
            .expect("a client did not finish within 20 s")
            .expect("client task panicked");
        holds.extend(h);
        failures.extend(f);
    }
    holds.sort_by_key(|h| h.granted);
    let max_wait = holds.iter().map(|h| h.waited).max().unwrap_or_default();
    let mut per_client = [0usize; 16];
    for h in &holds {
        per_client[h.client] += 1;
    }
    println!(
        "{} grants in {:?}, max wait {max_wait:?}, per client {per_client:?}, {} timed-out acquisitions",
        holds.len(),
        start.elapsed(),
        failures.len()
    );

    for pair in holds.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        assert!(b.granted > a.released, "holds overlap: {a:?} and {b:?}");
        assert!(b.token > a.token, "token order broken: {a:?} then {b:?}");
    }
    assert!(holds.len() >= 50, "only {} grants in 3 s", holds.len());
    assert!(failures.is_empty(), "acquisitions that waited a whole ttl (2 s) without a grant: {failures:?}");
    assert!(max_wait < ttl, "an acquisition waited {max_wait:?}");
}
