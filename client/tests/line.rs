//! The waiting line of `lock_until`: contenders are served in arrival
//! order, the place is given up with the lock, and a line instance that is
//! down costs fairness, not the lock.

mod common;

use std::time::{Duration, Instant};

use common::{relaxed, Cluster};

const LINE: &str = "redlock:line:";

/// The servers that hold the line key of `resource`.
async fn line_holders(c: &Cluster, resource: &str) -> usize {
    c.infos(&format!("{LINE}{resource}")).await.iter().filter(|i| i.is_some()).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_served_in_arrival_order_and_the_place_goes_with_the_lock() {
    let c = Cluster::start(5);
    let holder = c.redlock(relaxed());
    let deadline = || Some(Instant::now() + Duration::from_secs(5));
    let lock = holder.lock_until("fifo", Duration::from_secs(5), deadline()).await.expect("free resource");
    assert!(lock.ticket.is_some(), "a waiting acquisition takes a place in line");
    assert_eq!(line_holders(&c, "fifo").await, 1, "the line lives on exactly one instance");

    // Three contenders queue one after the other.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for n in 0..3 {
        let rl = c.redlock(relaxed());
        let tx = tx.clone();
        tokio::spawn(async move {
            let got = rl.lock_until("fifo", Duration::from_secs(5), deadline()).await;
            let _ = tx.send((n, got.as_ref().map(|l| l.token).ok().flatten()));
            if let Ok(l) = got {
                let _ = rl.release(&l).await;
            }
        });
        // Queued before the next one starts.
        common::eventually(Duration::from_secs(3), "contender queued", || async {
            let line = c.infos(&format!("{LINE}fifo")).await;
            line.iter().flatten().any(|i| i.waiters == n + 1)
        })
        .await;
    }
    holder.release(&lock).await.expect("release");
    let mut order = Vec::new();
    let mut last = lock.token.unwrap_or(0);
    while order.len() < 3 {
        let (n, token) = tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .expect("every contender is served")
            .expect("channel open");
        let token = token.expect("granted");
        assert!(token > last, "tokens increase along the line");
        last = token;
        order.push(n);
    }
    assert_eq!(order, vec![0, 1, 2], "served in arrival order");
    common::eventually(Duration::from_secs(3), "line key gone", || async { line_holders(&c, "fifo").await == 0 }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_taken_without_a_deadline_has_no_place_in_line() {
    let c = Cluster::start(5);
    let rl = c.redlock(relaxed());
    let lock = rl.lock("plain", Duration::from_secs(5)).await.expect("lock");
    assert!(lock.ticket.is_none());
    assert_eq!(line_holders(&c, "plain").await, 0);
    rl.release(&lock).await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaving_the_line_early_keeps_the_lock() {
    let c = Cluster::start(5);
    let rl = c.redlock(relaxed());
    let mut lock =
        rl.lock_until("early", Duration::from_secs(5), Some(Instant::now() + Duration::from_secs(2))).await.expect("lock");
    rl.leave_line_of(&mut lock).await;
    assert!(lock.ticket.is_none());
    assert_eq!(line_holders(&c, "early").await, 0, "place given up");
    assert!(c.infos("early").await.iter().all(|i| i.as_ref().is_some_and(|i| i.owner == lock.owner)), "lock kept");
    rl.release(&lock).await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_line_instance_that_is_down_costs_fairness_not_the_lock() {
    let mut c = Cluster::start(5);
    // Find the line's instance for this resource, then kill it.
    let rl = c.redlock(relaxed());
    let probe = rl.lock_until("down", Duration::from_secs(5), Some(Instant::now() + Duration::from_secs(2))).await.expect("lock");
    let infos = c.infos(&format!("{LINE}down")).await;
    let line = infos.iter().position(|i| i.is_some()).expect("line key somewhere");
    rl.release(&probe).await.expect("release");
    c.servers[line].kill9();

    let holder = c.redlock(relaxed());
    let held = holder.lock("down", Duration::from_millis(800)).await.expect("4 of 5 still grant");
    let waiter = c.redlock(relaxed());
    let started = Instant::now();
    let got = waiter
        .lock_until("down", Duration::from_secs(5), Some(Instant::now() + Duration::from_secs(4)))
        .await
        .expect("granted once the holder's lease ends, without a line");
    assert!(got.ticket.is_none(), "no line without its instance");
    assert!(got.token > held.token);
    assert!(started.elapsed() < Duration::from_secs(3), "waited {:?}", started.elapsed());
    waiter.release(&got).await.expect("release");
}
