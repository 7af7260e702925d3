//! The quorum semaphore (`Redlock::try_permit`, `permit_until`): at most
//! `limit` holders under any interleaving, and permits still granted with
//! a minority of instances down.

// The serial guard is held through a test on purpose: each test has its
// own runtime on its own thread, and the guard only keeps them one at a time.
#![allow(clippy::await_holding_lock)]

use crate::common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::history::History;
use common::*;
use redlock::{Error, Redlock, Settings};

const MS: fn(u64) -> Duration = Duration::from_millis;

fn settings() -> Settings {
    Settings { request_timeout: MS(100), connect_timeout: MS(500), retry_delay: (MS(5), MS(15)), ..Settings::default() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_most_limit_clients_hold_and_a_release_frees_a_permit() {
    let c = Cluster::start(5);
    let clients: Vec<Redlock> = (0..3).map(|_| c.redlock(settings())).collect();
    let ttl = Duration::from_secs(30);
    let a = clients[0].try_permit("pool", 2, ttl).await.expect("A takes a permit");
    let b = clients[1].try_permit("pool", 2, ttl).await.expect("B takes the other");
    assert_ne!(a.resource, b.resource, "two holders of one permit");
    match clients[2].try_permit("pool", 2, ttl).await {
        Err(Error::NotAcquired { resource, attempts, .. }) => assert_eq!((resource.as_str(), attempts), ("pool", 2)),
        other => panic!("C with both permits taken: {other:?}"),
    }
    clients[0].release(&a).await.expect("A releases");
    let c_permit = clients[2].try_permit("pool", 2, ttl).await.expect("C after A's release");
    assert_eq!(c_permit.resource, a.resource, "C takes the permit A gave back");
    assert!(c_permit.token > a.token, "tokens of one permit increase");
    assert!(matches!(clients[2].try_permit("pool", 0, ttl).await, Err(Error::Config(_))));
}

/// A port nothing listens on: an instance that is down for one client.
fn dead_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    drop(listener);
    format!("redis://127.0.0.1:{port}/")
}

/// The interleaving that breaks a semaphore counted per instance: limit
/// 2 on five instances, A reaches {1,2,3}, B {3,4,5}, C {1,2,4}. Counting
/// holders per instance, each instance would see at most two and all
/// three would hold. With a lock per permit, C finds each permit held on
/// part of its majority.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_clients_on_overlapping_majorities_never_hold_a_limit_two_semaphore_together() {
    let c = Cluster::start(5);
    let urls = c.urls();
    let client = |reach: [usize; 3]| {
        let urls: Vec<String> = (0..5).map(|i| if reach.contains(&i) { urls[i].clone() } else { dead_url() }).collect();
        Redlock::new(&urls, settings()).expect("handle")
    };
    let (a, b, cc) = (client([0, 1, 2]), client([2, 3, 4]), client([0, 1, 3]));
    let ttl = Duration::from_secs(30);
    for round in 0..5 {
        let held_a = a.try_permit("sem", 2, ttl).await.expect("A on {1,2,3}");
        let held_b = b.try_permit("sem", 2, ttl).await.expect("B on {3,4,5}");
        match cc.try_permit("sem", 2, ttl).await {
            Err(Error::NotAcquired { .. }) => {}
            other => panic!("round {round}: a third holder of a limit-2 semaphore: {other:?}"),
        }
        a.release(&held_a).await.expect("A releases");
        b.release(&held_b).await.expect("B releases");
    }
}

/// Eight clients, limit 3, short holds, for 3 s; two of five instances
/// are frozen (SIGSTOP) half-way. Never more than three hold at once,
/// each permit has one holder at a time with increasing tokens, and
/// permits keep being granted with the minority down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contention_never_exceeds_the_limit_even_with_a_minority_down() {
    contention_with_a_minority_down(false).await;
}

/// The same with the eight clients as tasks on one shared handle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contention_on_one_shared_handle_never_exceeds_the_limit() {
    contention_with_a_minority_down(true).await;
}

async fn contention_with_a_minority_down(shared_handle: bool) {
    const LIMIT: u32 = 3;
    let _serial = serial();
    let mut c = Cluster::start(5);
    let per_permit: Arc<Mutex<HashMap<String, History>>> = Arc::default();
    let all = History::new();
    let start = Instant::now();
    let end = start + Duration::from_secs(3);
    let mut tasks = Vec::new();
    let shared = c.redlock(settings());
    for client in 0..8 {
        let rl = if shared_handle { shared.clone() } else { c.redlock(settings()) };
        let (per_permit, all) = (per_permit.clone(), all.clone());
        tasks.push(tokio::spawn(async move {
            while Instant::now() < end {
                let permit = match rl.permit_until("workers", LIMIT, Duration::from_secs(2), Some(Instant::now() + MS(500))).await {
                    Ok(p) => p,
                    Err(Error::NotAcquired { .. }) => continue,
                    Err(e) => panic!("client {client}: {e}"),
                };
                let granted = Instant::now();
                tokio::time::sleep(MS(10 + 5 * client as u64)).await;
                let released = Instant::now();
                let token = permit.token.expect("token");
                all.record(format!("client {client}"), token, granted, released);
                let history = per_permit.lock().unwrap_or_else(|p| p.into_inner()).entry(permit.resource.clone()).or_default().clone();
                history.record(format!("client {client}"), token, granted, released);
                let _ = rl.release(&permit).await;
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let frozen_at = Instant::now();
    c.servers[3].freeze();
    c.servers[4].freeze();
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(30), t).await.expect("client stuck").expect("client panicked");
    }
    c.servers[3].thaw();
    c.servers[4].thaw();
    let holds = all.holds();
    // The most holds at any one moment: a sweep over grants and releases.
    let mut events: Vec<(Instant, i32)> = holds.iter().flat_map(|h| [(h.granted, 1), (h.released, -1)]).collect();
    events.sort_by_key(|&(t, delta)| (t, delta));
    let (mut now_held, mut most) = (0, 0);
    for (_, delta) in events {
        now_held += delta;
        most = most.max(now_held);
    }
    let after_freeze = holds.iter().filter(|h| h.granted > frozen_at).count();
    println!(
        "SEMAPHORE | 8 clients (one shared handle: {shared_handle}), limit {LIMIT}, 3 s, 2 of 5 frozen after 1.5 s | grants {} ({after_freeze} with the minority down) | most holders at once {most}",
        holds.len()
    );
    assert!(most <= LIMIT as i32, "{most} holders at once with limit {LIMIT}");
    assert!(most >= 2, "the permits were never used side by side: the test proved nothing");
    for (permit, history) in per_permit.lock().unwrap_or_else(|p| p.into_inner()).iter() {
        let verdict = history.check();
        verdict.assert_exclusive(permit);
        assert!(verdict.inversions.is_empty(), "{permit}: tokens out of order");
    }
    // Each round now waits a request timeout for the frozen instances.
    assert!(after_freeze >= 5, "only {after_freeze} permits granted with a minority down");
}

/// A permit nobody else wants, waited for (`permit_until` with a
/// deadline), costs what a plain round does: one LOCK.ACQUIRE per server
/// to take it and one LOCK.RELEASE to give it back. No place in the
/// semaphore's line is taken and given up (two more commands on the line
/// instance), and no write-back round follows, which a place's token on
/// the line instance alone would make necessary at every grant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncontended_permit_wait_is_one_round_to_take_and_one_to_give_back() {
    let c = Cluster::start(5);
    let rl = c.redlock(settings());
    let ttl = Duration::from_secs(10);
    let deadline = || Some(Instant::now() + Duration::from_secs(5));
    // The servers' token counters start from their own clocks: the first
    // grant writes its token back and levels them; connections open.
    let first = rl.permit_until("pool", 2, ttl, deadline()).await.expect("first permit");
    rl.release(&first).await.expect("release");
    rl.settle().await;
    for cycle in 0..3 {
        let before = crate::quorum::lock_commands(&c).await;
        let permit = rl.permit_until("pool", 2, ttl, deadline()).await.expect("an uncontended permit");
        rl.settle().await;
        let taken = crate::quorum::lock_commands(&c).await;
        let asked: Vec<i64> = taken.iter().zip(&before).map(|(a, b)| a - b).collect();
        assert_eq!(asked, vec![1; 5], "cycle {cycle}: LOCK.* commands per server to take the permit");
        assert_eq!(permit.fenced, 0, "cycle {cycle}: no write-back");
        rl.release(&permit).await.expect("release");
        rl.settle().await;
        let given_back = crate::quorum::lock_commands(&c).await;
        let asked: Vec<i64> = given_back.iter().zip(&taken).map(|(a, b)| a - b).collect();
        assert_eq!(asked, vec![1; 5], "cycle {cycle}: LOCK.* commands per server to give it back");
    }
}

/// A newcomer that finds a permit free but someone in that permit's line
/// does not take it past them: it waits behind. Here an outsider holds
/// the place in both permits' lines (as waiters at their heads do), so the
/// newcomer gets no permit before its deadline, though both are free; once
/// the places are given up, it gets one at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_free_permit_is_not_taken_past_its_line() {
    let c = Cluster::start(5);
    let rl = c.redlock(settings());
    let ttl = Duration::from_secs(10);
    let lines: Vec<(String, &common::Server)> = (0..2)
        .map(|slot| {
            let permit = redlock::semaphore::permit_key("pool", slot);
            let server = rl.line_server(&permit);
            let line = c.servers.iter().find(|s| s.addr() == server).expect("the line instance is one of the servers");
            (format!("redlock:line:{permit}"), line)
        })
        .collect();
    for (key, line) in &lines {
        let place = redis::cmd("LOCK.ACQUIRE").arg(key).arg("someone-in-line").arg(10_000).clone();
        assert!(matches!(line.ok(&place).await, redis::Value::Int(_)), "the outsider's place in {key}");
    }

    // The wait in line ends at the deadline (a last plain round may then
    // take a permit, as a line instance that does not answer would have
    // it): nothing before.
    let started = Instant::now();
    let got = rl.permit_until("pool", 2, ttl, Some(started + MS(300))).await;
    assert!(started.elapsed() >= MS(300), "a permit taken past the line after {:?}: {got:?}", started.elapsed());
    if let Ok(permit) = got {
        rl.release(&permit).await.expect("release");
    }

    for (key, line) in &lines {
        line.ok(redis::cmd("LOCK.RELEASE").arg(key).arg("someone-in-line")).await;
    }
    let permit =
        rl.permit_until("pool", 2, ttl, Some(Instant::now() + Duration::from_secs(5))).await.expect("a permit once the lines are empty");
    rl.release(&permit).await.expect("release");
}

/// A waiter for a permit waits on one permit in the servers' own queues,
/// as a lock's waiter does on the lock: the release of that permit hands
/// it over on every server (one handoff each), with no client round trip
/// in between and no polling. (Permit waiters used to poll the permits
/// from a line of their own: no server ever handed a permit over.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_permit_is_handed_over_on_the_servers() {
    let c = Cluster::start(5);
    let ttl = Duration::from_secs(10);
    let holders: Vec<Redlock> = (0..2).map(|_| c.redlock(settings())).collect();
    let mut held = Vec::new();
    for h in &holders {
        held.push(h.try_permit("pool", 2, ttl).await.expect("a free permit"));
    }
    let waiter = c.redlock(settings());
    let waiting = {
        let waiter = waiter.clone();
        tokio::spawn(async move { waiter.permit_until("pool", 2, ttl, Some(Instant::now() + Duration::from_secs(60))).await })
    };
    // It waits on one of the two permits on every server.
    let waited_on = || async {
        let mut on = Vec::new();
        for lock in &held {
            let waiting: Vec<i64> = c.infos(&lock.resource).await.iter().map(|i| i.as_ref().map_or(0, |i| i.waiters)).collect();
            on.push(waiting);
        }
        on
    };
    common::eventually(Duration::from_secs(5), "the waiter queued on one permit on every server", || async {
        waited_on().await.iter().any(|w| *w == vec![1; 5])
    })
    .await;
    let on = waited_on().await;
    let slot = on.iter().position(|w| *w == vec![1; 5]).expect("a permit waited on");
    let before = c.handoffs().await;
    holders[slot].release(&held[slot]).await.expect("release");
    let permit =
        tokio::time::timeout(Duration::from_secs(5), waiting).await.expect("granted at the release").expect("task").expect("permit");
    assert_eq!(permit.resource, held[slot].resource, "the permit given back");
    assert!(permit.token > held[slot].token, "a later token for that permit");
    let after = c.handoffs().await;
    let handed: Vec<i64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    assert_eq!(handed, vec![1; 5], "handoffs at the release: {before:?} -> {after:?}");
    waiter.release(&permit).await.expect("release");
    let other = 1 - slot;
    holders[other].release(&held[other]).await.expect("release");
}

/// The refusal a request of another limit than the semaphore's gets: the
/// servers' own, as on one server.
fn assert_other_limit_refused<T: std::fmt::Debug>(result: Result<T, Error>, what: &str) {
    match result {
        Err(Error::Rejected { rejection, outcomes, .. }) => {
            assert_eq!(rejection, redlock::Rejection::WrongType, "{what}");
            let refusal = outcomes.iter().find_map(|o| match &o.outcome {
                redlock::Outcome::Failed(msg) => Some(msg.clone()),
                _ => None,
            });
            assert!(refusal.as_deref().is_some_and(|m| m.contains("wrong lock kind")), "{what}: {outcomes:?}");
        }
        other => panic!("{what}: {other:?}"),
    }
}

/// Mixed limits through the quorum (issue 55): two handles ask for limit 2
/// and two for limit 4 of one semaphore. The quorum enforces one limit:
/// while holds of one limit run, the other is refused with the one-server
/// error (wrong lock kind), by trying and by waiting; and under contention
/// the holders of the two limits never overlap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_limits_through_the_quorum() {
    let _serial = serial();
    let c = Cluster::start(5);
    let handles: Vec<(Redlock, u32)> = [2, 2, 4, 4].into_iter().map(|limit| (c.redlock(settings()), limit)).collect();
    let ttl = Duration::from_secs(30);
    let a = handles[0].0.try_permit("mixed", 2, ttl).await.expect("the first holder sets the limit, 2");
    let b = handles[1].0.try_permit("mixed", 2, ttl).await.expect("a second permit of 2");
    assert_other_limit_refused(handles[2].0.try_permit("mixed", 4, ttl).await, "limit 4 beside holds of 2");
    assert_other_limit_refused(
        handles[3].0.permit_until("mixed", 4, ttl, Some(Instant::now() + Duration::from_secs(5))).await,
        "limit 4 waiting beside holds of 2",
    );
    handles[0].0.release(&a).await.expect("A releases");
    assert_other_limit_refused(handles[2].0.try_permit("mixed", 4, ttl).await, "limit 4 beside one hold of 2");
    handles[1].0.release(&b).await.expect("B releases");
    // Free again, the next holder's limit is the semaphore's.
    let d = handles[3].0.try_permit("mixed", 4, ttl).await.expect("limit 4 once the holds of 2 are gone");
    assert_other_limit_refused(handles[0].0.try_permit("mixed", 2, ttl).await, "limit 2 beside a hold of 4");
    handles[3].0.release(&d).await.expect("D releases");

    // Contention: each handle takes its limit's permits for 3 s; the
    // holders of 2 and of 4 are never both running.
    let holding: Arc<Mutex<[u32; 2]>> = Arc::default();
    let overlaps: Arc<Mutex<Vec<String>>> = Arc::default();
    let end = Instant::now() + Duration::from_secs(3);
    let mut tasks = Vec::new();
    for (i, (rl, limit)) in handles.into_iter().enumerate() {
        let (holding, overlaps) = (holding.clone(), overlaps.clone());
        tasks.push(tokio::spawn(async move {
            let (mine, other) = if limit == 2 { (0, 1) } else { (1, 0) };
            let (mut grants, mut refusals) = (0u32, 0u32);
            while Instant::now() < end {
                let permit = match rl.permit_until("contended", limit, Duration::from_secs(2), Some(Instant::now() + MS(300))).await {
                    Ok(p) => p,
                    Err(Error::NotAcquired { .. }) => continue,
                    Err(e @ Error::Rejected { .. }) => {
                        assert_other_limit_refused::<()>(Err(e), &format!("handle {i}, limit {limit}"));
                        refusals += 1;
                        tokio::time::sleep(MS(5)).await;
                        continue;
                    }
                    Err(e) => panic!("handle {i}: {e}"),
                };
                {
                    let mut now = holding.lock().unwrap_or_else(|p| p.into_inner());
                    if now[other] > 0 {
                        overlaps.lock().unwrap_or_else(|p| p.into_inner()).push(format!("limit {limit} granted beside {now:?}"));
                    }
                    now[mine] += 1;
                }
                grants += 1;
                tokio::time::sleep(MS(15)).await;
                holding.lock().unwrap_or_else(|p| p.into_inner())[mine] -= 1;
                let _ = rl.release(&permit).await;
                // A pause between holds, so that the holds of one limit
                // now and then all end and the other limit gets its turn.
                tokio::time::sleep(MS(5)).await;
            }
            (limit, grants, refusals)
        }));
    }
    let mut by_limit = HashMap::new();
    for t in tasks {
        let (limit, grants, refusals) =
            tokio::time::timeout(Duration::from_secs(30), t).await.expect("client stuck").expect("client panicked");
        let entry = by_limit.entry(limit).or_insert((0, 0));
        entry.0 += grants;
        entry.1 += refusals;
    }
    println!("MIXED LIMITS | 2 handles of limit 2, 2 of limit 4, 3 s | (grants, refusals) by limit: {by_limit:?}");
    let overlaps = overlaps.lock().unwrap_or_else(|p| p.into_inner());
    assert!(overlaps.is_empty(), "holders of both limits at once: {overlaps:?}");
    let refused: u32 = by_limit.values().map(|&(_, r)| r).sum();
    assert!(refused > 0, "no request met a hold of the other limit: the test proved nothing");
    assert!(by_limit.values().all(|&(g, _)| g > 0), "a limit was never granted: {by_limit:?}");
}
