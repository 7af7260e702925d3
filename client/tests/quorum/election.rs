//! Leader election on five servers (`redlock::Election`): one leader at a
//! time in strictly increasing terms, its value read by every observer as
//! a quorum agrees on it, a proclaimed value, a resignation that hands over
//! at once, a campaign given up that leaves nothing behind, and an
//! observer that sees every change in term order.

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{eventually, relaxed, Cluster};
use futures::StreamExt;
use redlock::election::resource_of;
use redlock::{Election, Error, Leader, Settings};

fn bound() -> Settings {
    Settings { release_on_disconnect: true, ..relaxed() }
}

fn candidate(c: &Cluster, name: &str, value: &str, ttl: Duration) -> Election {
    Election::new(c.redlock(bound()), name, value).and_then(|e| e.with_ttl(ttl)).expect("election")
}

fn leader(value: &str, term: i64) -> Leader {
    Leader { value: value.into(), term }
}

/// Forwards an observer's changes to a channel, from a task of its own.
fn watch(e: &Election) -> tokio::sync::mpsc::UnboundedReceiver<Leader> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let mut changes = Box::pin(e.clone().with_observe_interval(Duration::from_millis(20)).observe());
    tokio::spawn(async move {
        while let Some(change) = changes.next().await {
            if tx.send(change).is_err() {
                return;
            }
        }
    });
    rx
}

async fn next(rx: &mut tokio::sync::mpsc::UnboundedReceiver<Leader>, what: &str) -> Leader {
    tokio::time::timeout(Duration::from_secs(10), rx.recv()).await.unwrap_or_else(|_| panic!("no change seen: {what}")).expect("observer")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_is_read_proclaims_and_resigns_to_the_next_at_once() {
    let c = Cluster::start(5);
    // A long ttl: a handover that waited for it would show.
    let ttl = Duration::from_secs(30);
    let a = candidate(&c, "jobs", "host-a:80", ttl);
    let b = candidate(&c, "jobs", "host-b:80", ttl);
    let observer = candidate(&c, "jobs", "", ttl);
    assert_eq!(observer.leader().await.expect("read"), None, "nobody leads yet");
    let mut seen = watch(&observer);

    let first = a.campaign().await.expect("a leads");
    assert!(first.term() > 0);
    assert_eq!(observer.leader().await.expect("read"), Some(leader("host-a:80", first.term())));
    // Every server holds it, bound to a's connections, with its value.
    let infos = c.infos(&resource_of("jobs")).await;
    assert!(infos.iter().all(|i| i.as_ref().is_some_and(|i| i.session && i.token == Some(first.term()))), "{infos:?}");
    assert_eq!(next(&mut seen, "a's term").await, leader("host-a:80", first.term()));

    first.proclaim("host-a:81").await.expect("proclaimed");
    assert_eq!(first.value(), "host-a:81");
    assert_eq!(b.leader().await.expect("read"), Some(leader("host-a:81", first.term())), "the term stays");
    assert_eq!(next(&mut seen, "a's new value").await, leader("host-a:81", first.term()));
    // A value the servers refuse is a rejection, and nothing changes.
    let long = "v".repeat(300);
    assert!(matches!(first.proclaim(&long).await, Err(Error::Rejected { .. })));
    assert_eq!(b.leader().await.expect("read"), Some(leader("host-a:81", first.term())));

    // b waits in line; a resigns and b leads at once, far inside a's ttl.
    let waiting = {
        let b = b.clone();
        tokio::spawn(async move { b.campaign().await })
    };
    eventually(Duration::from_secs(10), "b waiting at the head", || async {
        c.infos(&resource_of("jobs")).await.iter().all(|i| i.as_ref().is_some_and(|i| i.waiters == 1))
    })
    .await;
    let first_term = first.term();
    let resigned = Instant::now();
    first.resign().await.expect("resigned");
    let second = tokio::time::timeout(Duration::from_secs(10), waiting).await.expect("b leads").expect("task").expect("campaign");
    let handover = resigned.elapsed();
    assert!(handover < ttl / 3, "the handover took {handover:?}: it waited for the lease");
    assert!(second.term() > first_term, "terms grow: {first_term} then {}", second.term());
    assert_eq!(observer.leader().await.expect("read"), Some(leader("host-b:80", second.term())));
    assert_eq!(next(&mut seen, "b's term").await, leader("host-b:80", second.term()));
    second.resign().await.expect("resigned");
    eventually(Duration::from_secs(5), "nobody leads", || async { observer.leader().await.ok() == Some(None) }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_campaign_given_up_leaves_nothing_behind() {
    let c = Cluster::start(5);
    let ttl = Duration::from_secs(30);
    let a = candidate(&c, "cron", "a", ttl);
    let b = candidate(&c, "cron", "b", ttl);
    let leading = a.campaign().await.expect("a leads");
    let waiting = {
        let b = b.clone();
        tokio::spawn(async move { b.campaign().await })
    };
    eventually(Duration::from_secs(10), "b waiting", || async {
        c.infos(&resource_of("cron")).await.iter().all(|i| i.as_ref().is_some_and(|i| i.waiters == 1))
    })
    .await;
    // Dropping the campaign (its task aborted) takes b out of every line.
    waiting.abort();
    let _ = waiting.await;
    eventually(Duration::from_secs(10), "b's waits gone", || async {
        c.infos(&resource_of("cron")).await.iter().all(|i| i.as_ref().is_some_and(|i| i.waiters == 0))
    })
    .await;
    eventually(Duration::from_secs(10), "b's place in line gone", || async {
        c.infos(&format!("redlock:line:{}", resource_of("cron"))).await.iter().all(Option::is_none)
    })
    .await;
    leading.resign().await.expect("resigned");
    // Nobody is granted it after a's release: b gave up.
    eventually(Duration::from_secs(5), "the election lock free everywhere", || async {
        c.infos(&resource_of("cron")).await.iter().all(Option::is_none)
    })
    .await;
    assert_eq!(a.leader().await.expect("read"), None);
}

/// A campaign cancelled at the head of the line (its waits queued on every
/// server, bound to their connections) is never leader: its waits are gone
/// once its handle settles, so the leader's resignation hands the lock to
/// nobody, on no server, and `leader()` says nobody leads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_campaign_cancelled_at_the_head_never_leads() {
    let c = Cluster::start(5);
    let ttl = Duration::from_secs(30);
    let a = candidate(&c, "shift", "a", ttl);
    let b_handle = c.redlock(bound());
    let b = Election::new(b_handle.clone(), "shift", "b").and_then(|e| e.with_ttl(ttl)).expect("election");
    let leading = a.campaign().await.expect("a leads");
    let waiting = {
        let b = b.clone();
        tokio::spawn(async move { b.campaign().await })
    };
    eventually(Duration::from_secs(10), "b waiting at the head", || async {
        c.infos(&resource_of("shift")).await.iter().all(|i| i.as_ref().is_some_and(|i| i.waiters == 1))
    })
    .await;
    waiting.abort();
    assert!(waiting.await.is_err_and(|e| e.is_cancelled()), "b still campaigning when cancelled");
    b_handle.settle().await;
    let infos = c.infos(&resource_of("shift")).await;
    assert!(infos.iter().all(|i| i.as_ref().is_some_and(|i| i.waiters == 0)), "b's waits gone: {infos:?}");
    let before = c.handoffs().await;
    leading.resign().await.expect("resigned");
    assert_eq!(a.leader().await.expect("read"), None, "b never leads");
    let infos = c.infos(&resource_of("shift")).await;
    assert!(infos.iter().all(Option::is_none), "nobody holds the election lock: {infos:?}");
    assert_eq!(c.handoffs().await, before, "no server handed the lock to b");
}

/// Three candidates, each leading in turn for a while and then resigning,
/// over and over: every term's interval (from its campaign's return to its
/// resignation) is disjoint from every other's, and terms strictly grow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_candidates_lead_one_at_a_time_in_growing_terms() {
    let c = Cluster::start(5);
    let ttl = Duration::from_secs(5);
    let log: Arc<Mutex<Vec<(i64, Instant, Instant)>>> = Arc::default();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for n in 0..3 {
        let e = candidate(&c, "primary", &format!("node-{n}"), ttl);
        let log = Arc::clone(&log);
        tasks.push(tokio::spawn(async move {
            for _ in 0..4 {
                let leading = e.campaign().await.expect("campaign");
                let from = Instant::now();
                // Another observer agrees on who leads now.
                assert_eq!(e.leader().await.expect("read").map(|l| l.term), Some(leading.term()));
                tokio::time::sleep(Duration::from_millis(30)).await;
                assert!(!leading.is_lost(), "lost while leading");
                let to = Instant::now();
                log.lock().expect("log").push((leading.term(), from, to));
                leading.resign().await.expect("resign");
            }
        }));
    }
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(60), t).await.expect("candidates done").expect("candidate");
    }
    let mut terms = log.lock().expect("log").clone();
    assert_eq!(terms.len(), 12);
    terms.sort_by_key(|&(_, from, _)| from);
    for pair in terms.windows(2) {
        let ((t1, _, end1), (t2, start2, _)) = (pair[0], pair[1]);
        assert!(start2 >= end1, "terms {t1} and {t2} overlap by {:?}", end1 - start2);
        assert!(t2 > t1, "term {t2} began after term {t1}");
    }
    println!("12 terms in {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_needs_a_quorum_to_agree() {
    let mut c = Cluster::start(5);
    let e = candidate(&c, "q", "v", Duration::from_secs(30));
    let leading = e.campaign().await.expect("leads");
    // Two servers down: three still agree.
    c.servers[0].stop();
    c.servers[1].stop();
    assert_eq!(e.leader().await.expect("read"), Some(leader("v", leading.term())));
    // A third down: too few answer to tell.
    c.servers[2].stop();
    assert!(matches!(e.leader().await, Err(Error::NoQuorum { .. })));
}

/// Forwards an observer's changes, as `watch`, with a 1 s interval: far
/// longer than the terms it must see.
fn watch_announcements(e: &Election) -> tokio::sync::mpsc::UnboundedReceiver<Leader> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let mut changes = Box::pin(e.clone().with_observe_interval(Duration::from_secs(1)).observe());
    tokio::spawn(async move {
        while let Some(change) = changes.next().await {
            if tx.send(change).is_err() {
                return;
            }
        }
    });
    rx
}

/// Whether every server has `n` subscribers to the election's channel.
async fn subscribed_everywhere(c: &Cluster, name: &str, n: i64) -> bool {
    let channel = redlock::transport::changes_channel(0, &resource_of(name));
    for s in &c.servers {
        let reply = s.cmd(redis::cmd("PUBSUB").arg("NUMSUB").arg(&channel)).await;
        let count = match reply {
            Ok(redis::Value::Array(v)) => v.get(1).and_then(|n| if let redis::Value::Int(n) = n { Some(*n) } else { None }),
            _ => None,
        };
        if count != Some(n) {
            return false;
        }
    }
    true
}

/// Terms far shorter than any polling interval, one after another (each
/// leader resigns the moment it leads, to a candidate already in line):
/// an observer sees every one of them, with its value, in order, none
/// twice, and goes on seeing them after its subscriptions were cut on
/// every server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_sees_every_term_however_short() {
    let c = Cluster::start(5);
    let ttl = Duration::from_secs(30);
    let observer = candidate(&c, "short", "observer", ttl);
    let mut seen = watch_announcements(&observer);
    eventually(Duration::from_secs(10), "the observer subscribed", || subscribed_everywhere(&c, "short", 1)).await;

    let candidates: Vec<Election> = ["a", "b", "c"].iter().map(|v| candidate(&c, "short", v, ttl)).collect();
    let turns = |rounds: usize| {
        let candidates = candidates.clone();
        async move {
            let led: Arc<Mutex<Vec<Leader>>> = Arc::default();
            let tasks: Vec<_> = candidates
                .into_iter()
                .map(|e| {
                    let led = Arc::clone(&led);
                    tokio::spawn(async move {
                        for _ in 0..rounds {
                            let l = e.campaign().await.expect("campaign");
                            led.lock().expect("log").push(leader(e.value(), l.term()));
                            l.resign().await.expect("resign");
                        }
                    })
                })
                .collect();
            for t in tasks {
                tokio::time::timeout(Duration::from_secs(60), t).await.expect("turns end").expect("task");
            }
            let mut led = led.lock().expect("log").clone();
            led.sort_by_key(|l| l.term);
            led
        }
    };
    let check = |led: Vec<Leader>, seen: Vec<Leader>, what: &str| {
        assert!(led.windows(2).all(|w| w[0].term < w[1].term), "{what}: terms grow: {led:?}");
        assert_eq!(seen, led, "{what}: the observer saw every term in order, none twice");
    };

    let led = turns(10).await;
    let mut got = Vec::new();
    for _ in 0..led.len() {
        got.push(next(&mut seen, "a short term").await);
    }
    check(led, got, "first turns");

    // Cut the observer's subscriptions on every server: it subscribes
    // again an interval later, and then hears every term again.
    for s in &c.servers {
        s.ok(redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("pubsub")).await;
    }
    assert!(subscribed_everywhere(&c, "short", 0).await, "the subscriptions were cut");
    eventually(Duration::from_secs(10), "the observer subscribed again", || subscribed_everywhere(&c, "short", 1)).await;
    let led = turns(5).await;
    let mut got = Vec::new();
    for _ in 0..led.len() {
        got.push(next(&mut seen, "a short term, after the cut").await);
    }
    check(led, got, "after the subscriptions were cut");
    assert!(tokio::time::timeout(Duration::from_millis(300), seen.recv()).await.is_err(), "nothing seen twice or invented");
}
