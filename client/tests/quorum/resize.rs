//! Resizing a quorum semaphore while held (`Redlock::resize`): holders
//! keep their permits; after a shrink nobody is let in while a holder sits
//! on a permit at or above the new limit, and never more than the limit
//! hold once they left; a client that has not learned the new limit (it
//! asks under the old one) is refused, not let in; a growth lets clients
//! asking under the old, smaller limit in up to the new one.

// The serial guard is held through the contended test on purpose: each
// test has its own runtime, and the guard only keeps them one at a time.
#![allow(clippy::await_holding_lock)]

use crate::common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::history::History;
use common::*;
use redlock::{Error, Lock, Redlock, Settings};

const MS: fn(u64) -> Duration = Duration::from_millis;
const TTL: Duration = Duration::from_secs(30);

fn settings() -> Settings {
    Settings { request_timeout: MS(200), connect_timeout: MS(500), retry_delay: (MS(5), MS(15)), ..Settings::default() }
}

/// The permit a hold sits on (`pool:permit:i` → i).
fn slot(lock: &Lock) -> u32 {
    let name = lock.resource.rsplit(':').next().unwrap_or_default();
    name.parse().unwrap_or_else(|_| panic!("a permit hold named {:?}", lock.resource))
}

/// Takes permits of `pool` (asking under `limit`) with fresh handles
/// until one is refused: the holds granted.
async fn take_all(c: &Cluster, pool: &str, limit: u32) -> Vec<(Redlock, Lock)> {
    let mut held = Vec::new();
    for _ in 0..12 {
        let rl = c.redlock(settings());
        match rl.try_permit(pool, limit, TTL).await {
            Ok(lock) => held.push((rl, lock)),
            Err(Error::NotAcquired { .. }) => return held,
            Err(e) => panic!("asking a permit of {pool} under {limit}: {e}"),
        }
    }
    panic!("more than 12 permits of {pool} granted under limit {limit}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shrink_lets_nobody_in_until_the_holders_above_it_leave_then_never_more_than_the_limit() {
    let c = Cluster::start(5);
    let mut old = take_all(&c, "pool", 5).await;
    assert_eq!(old.len(), 5, "five permits under limit 5");
    // Four holders stay: one of them on a permit of 2 or more.
    let (rl, gone) = old.pop().expect("a holder");
    rl.release(&gone).await.expect("release");

    let admin = c.redlock(settings());
    let resized = admin.resize("pool", 2).await.expect("resize");
    assert!(resized.held && resized.resized == 5, "every server resized it: {resized:?}");

    // Four hold, on permits 0-4: nobody new, whatever limit it asks under.
    assert!(take_all(&c, "pool", 5).await.is_empty(), "a client asking under the old limit let in after the shrink");
    assert!(take_all(&c, "pool", 2).await.is_empty(), "a client asking under the new limit let in over it");

    // The holders at or above 2 leave but one: still nobody.
    old.sort_by_key(|(_, l)| slot(l));
    let above: Vec<(Redlock, Lock)> = old.iter().filter(|(_, l)| slot(l) >= 2).map(|(r, l)| (r.clone(), l.clone())).collect();
    let below: Vec<(Redlock, Lock)> = old.iter().filter(|(_, l)| slot(l) < 2).map(|(r, l)| (r.clone(), l.clone())).collect();
    assert!(!above.is_empty(), "four holders of five permits: one at least sits at 2 or above");
    for (rl, lock) in &above[1..] {
        rl.release(lock).await.expect("release");
    }
    assert!(take_all(&c, "pool", 5).await.is_empty(), "let in while a holder sits above the new limit");
    assert!(take_all(&c, "pool", 2).await.is_empty(), "let in while a holder sits above the new limit");

    // The last one above leaves: clients are let in, below 2 only, until
    // two hold, whatever limit they asked under.
    let (rl, last) = &above[0];
    rl.release(last).await.expect("release");
    let new = take_all(&c, "pool", 5).await;
    assert_eq!(below.len() + new.len(), 2, "{} held below 2, {} let in: never more than the limit in force", below.len(), new.len());
    for (_, lock) in &new {
        assert!(slot(lock) < 2, "a new holder on permit {} after the shrink to 2", slot(lock));
    }
    assert!(take_all(&c, "pool", 2).await.is_empty(), "a third holder under limit 2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_growth_lets_clients_in_up_to_the_new_limit_whatever_limit_they_ask_under() {
    let c = Cluster::start(5);
    let first = take_all(&c, "grow", 2).await;
    assert_eq!(first.len(), 2);
    let admin = c.redlock(settings());
    assert!(admin.resize("grow", 4).await.expect("resize").held);
    let more = take_all(&c, "grow", 2).await;
    assert_eq!(more.len(), 2, "two more under the new limit 4, asked under 2");
    let mut slots: Vec<u32> = first.iter().chain(&more).map(|(_, l)| slot(l)).collect();
    slots.sort_unstable();
    assert_eq!(slots, vec![0, 1, 2, 3], "one holder per permit below 4");
}

/// With two servers killed after the shrink, the three left (a quorum)
/// still refuse a client asking under the old limit while a holder sits
/// above the new one; a resize reaches a quorum with two down; a
/// semaphore nobody holds is answered as such, and its next holder's limit
/// is the one it asks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_two_servers_down_the_shrink_holds_and_a_free_semaphore_is_not_resized() {
    let mut c = Cluster::start(5);
    let old = take_all(&c, "down", 3).await;
    assert_eq!(old.len(), 3);
    c.servers[3].kill9();
    c.servers[4].kill9();
    let admin = c.redlock(settings());
    let resized = admin.resize("down", 1).await.expect("a quorum resizes it");
    assert_eq!((resized.held, resized.resized), (true, 3));
    assert!(take_all(&c, "down", 3).await.is_empty(), "let in over the new limit with two servers down");
    for (rl, lock) in &old {
        rl.release(lock).await.expect("release");
    }
    let after = admin.resize("down", 2).await.expect("answered");
    assert!(!after.held, "nobody holds it: nothing resized ({after:?})");
    let fresh = take_all(&c, "down", 3).await;
    assert_eq!(fresh.len(), 3, "a semaphore nobody held takes the limit its next request names");
}

/// A client waiting for a permit under the old limit when the semaphore
/// shrinks is let in once the holders above the new limit left, on a
/// permit below it, and not before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_under_the_old_limit_is_let_in_below_the_new_one() {
    let c = Cluster::start(5);
    let held = take_all(&c, "wait", 3).await;
    assert_eq!(held.len(), 3);
    let waiter = c.redlock(settings());
    let waiting = {
        let waiter = waiter.clone();
        tokio::spawn(async move { waiter.permit_until("wait", 3, TTL, Some(Instant::now() + Duration::from_secs(20))).await })
    };
    let admin = c.redlock(settings());
    assert!(admin.resize("wait", 1).await.expect("resize").held);
    let mut by_slot = held;
    by_slot.sort_by_key(|(_, l)| slot(l));
    // Permits 1 and 2 freed: the holder of 0 stays, so nobody is let in.
    for (rl, lock) in &by_slot[1..] {
        rl.release(lock).await.expect("release");
    }
    tokio::time::sleep(MS(600)).await;
    assert!(!waiting.is_finished(), "the waiter let in beside the holder of permit 0 under limit 1");
    let (rl, zero) = &by_slot[0];
    rl.release(zero).await.expect("release");
    let lock = tokio::time::timeout(Duration::from_secs(15), waiting).await.expect("let in").expect("task").expect("granted");
    assert_eq!(slot(&lock), 0, "on the one permit below the new limit");
}

/// A port nothing listens on: a server that is down for one client.
fn dead_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    drop(listener);
    format!("redis://127.0.0.1:{port}/")
}

/// A hold of `pool`'s permit `want` (asked under `limit`) by `rl`: permits
/// are taken until that one is, and the others given back.
async fn hold_permit(rl: &Redlock, pool: &str, limit: u32, want: u32) -> Lock {
    let mut taken = Vec::new();
    let mut found = None;
    for _ in 0..limit {
        let lock = rl.try_permit(pool, limit, TTL).await.unwrap_or_else(|e| panic!("a permit of {pool}: {e}"));
        if slot(&lock) == want {
            found = Some(lock);
            break;
        }
        taken.push(lock);
    }
    for lock in &taken {
        rl.release(lock).await.expect("release");
    }
    found.unwrap_or_else(|| panic!("permit {want} of {pool} never granted"))
}

/// What the limit records alone cannot keep: holders on different
/// majorities. Under limit 6, A holds permit 3 on servers {0,1,2}, B
/// permit 4 on {2,3,4}, C permit 5 on {0,1,3}; the semaphore shrinks to 3.
/// No server counts more than two holders, so every record has room: a
/// fourth holder would be let in if the permits from the new limit up were
/// not asked (shared) with every request. It is refused while any of them
/// holds (each sits above 3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holders_on_other_majorities_above_the_new_limit_keep_everyone_out() {
    let c = Cluster::start(5);
    let urls = c.urls();
    let reaching = |reach: [usize; 3]| {
        let urls: Vec<String> = (0..5).map(|i| if reach.contains(&i) { urls[i].clone() } else { dead_url() }).collect();
        Redlock::new(&urls, settings()).expect("handle")
    };
    let holders = [(reaching([0, 1, 2]), 3), (reaching([2, 3, 4]), 4), (reaching([0, 1, 3]), 5)];
    let mut held = Vec::new();
    for (rl, want) in &holders {
        held.push(hold_permit(rl, "spread", 6, *want).await);
    }
    let admin = c.redlock(settings());
    assert!(admin.resize("spread", 3).await.expect("resize").held);

    for (i, ((rl, _), lock)) in holders.iter().zip(&held).enumerate() {
        assert!(take_all(&c, "spread", 6).await.is_empty(), "a holder let in beside {} above the new limit", 3 - i);
        assert!(take_all(&c, "spread", 3).await.is_empty(), "a holder let in beside {} above the new limit", 3 - i);
        rl.release(lock).await.expect("release");
    }
}

/// Six clients wait for permits of a semaphore of 4 (each asking under 4,
/// short holds) for about 4 s, while it shrinks to 2 and 1.5 s later grows to
/// 3, and one server of five is paused (SIGSTOP) in between; a seventh
/// holds permit 0 throughout, so the semaphore is never free (a free one
/// forgets its resize, as on one server). Each permit has one holder at a
/// time with increasing tokens; every hold asked for after the shrink and
/// granted before the growth sits on permit 1 (below 2, and 0 is held),
/// every hold asked for after the growth below 3 (a client learns the
/// limit in force from the refusals), and permits keep being granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contended_permits_follow_the_limit_in_force_through_resizes_and_a_pause() {
    let _serial = serial();
    let mut c = Cluster::start(5);
    let keeper = c.redlock(settings());
    let kept = hold_permit(&keeper, "busy", 4, 0).await;
    let per_permit: Arc<Mutex<HashMap<String, History>>> = Arc::default();
    // Each hold's permit, when it was asked for and when it was granted.
    let grants: Arc<Mutex<Vec<(u32, Instant, Instant)>>> = Arc::default();
    let end = Instant::now() + Duration::from_secs(4);
    let mut tasks = Vec::new();
    for client in 0..6u64 {
        let rl = c.redlock(settings());
        let (per_permit, grants) = (per_permit.clone(), grants.clone());
        tasks.push(tokio::spawn(async move {
            while Instant::now() < end {
                let asked = Instant::now();
                let permit = match rl.permit_until("busy", 4, Duration::from_secs(2), Some(Instant::now() + MS(500))).await {
                    Ok(p) => p,
                    Err(Error::NotAcquired { .. }) => continue,
                    Err(e) => panic!("client {client}: {e}"),
                };
                let granted = Instant::now();
                grants.lock().unwrap_or_else(|p| p.into_inner()).push((slot(&permit), asked, granted));
                tokio::time::sleep(MS(5 + 4 * client)).await;
                let released = Instant::now();
                let history = per_permit.lock().unwrap_or_else(|p| p.into_inner()).entry(permit.resource.clone()).or_default().clone();
                history.record(format!("client {client}"), permit.token.expect("token"), granted, released);
                let _ = rl.release(&permit).await;
            }
        }));
    }
    let admin = c.redlock(settings());
    tokio::time::sleep(MS(700)).await;
    let shrunk = admin.resize("busy", 2).await.expect("shrink");
    let shrunk_at = Instant::now();
    c.servers[4].freeze();
    tokio::time::sleep(MS(1500)).await;
    let growing_at = Instant::now();
    let grown = admin.resize("busy", 3).await.expect("growth");
    let grown_at = Instant::now();
    c.servers[4].thaw();
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(30), t).await.expect("client stuck").expect("client panicked");
    }
    keeper.release(&kept).await.expect("the keeper releases");
    let grants = grants.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let between: Vec<u32> = grants.iter().filter(|&&(_, a, g)| a > shrunk_at && g < growing_at).map(|&(s, ..)| s).collect();
    let after: Vec<u32> = grants.iter().filter(|&&(_, a, _)| a > grown_at).map(|&(s, ..)| s).collect();
    println!(
        "RESIZE | 6 clients asking under 4 and a keeper of permit 0, shrunk to 2 (held: {}), grown to 3 (held: {}), 1 of 5 paused between | grants {} ({} asked and granted between, {} asked after the growth)",
        shrunk.held,
        grown.held,
        grants.len(),
        between.len(),
        after.len()
    );
    assert!(between.iter().all(|&s| s == 1), "a hold asked under limit 2 granted on a permit other than 1: {between:?}");
    assert!(after.iter().all(|&s| s == 1 || s == 2), "a hold asked under limit 3 granted on a permit other than 1 or 2: {after:?}");
    // Grants between the shrink and the growth are few, resized or not:
    // one permit is free then and a server is paused (0 to 4 in 1.5 s in
    // both, measured with the resizes taken out); the growth's must show.
    assert!(after.contains(&2), "no permit granted under the new limit 3: the test proved nothing");
    for (permit, history) in per_permit.lock().unwrap_or_else(|p| p.into_inner()).iter() {
        let verdict = history.check();
        verdict.assert_exclusive(permit);
        assert!(verdict.inversions.is_empty(), "{permit}: tokens out of order");
    }
}

/// A quorum semaphore's changes are its limit record's (`NAME:permits`):
/// every hold of its permits takes one of the record's, so a watch of the
/// record hears each permit's grant and end, and a resize is announced
/// there, once a quorum announced it, with the new limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_of_the_limit_record_hears_the_holds_and_the_resize() {
    use redlock::ChangeKind;

    let _serial = serial();
    let c = Cluster::start(5);
    let record = redlock::semaphore::limit_key("watched");
    for s in &c.servers {
        s.ok(redis::cmd("CONFIG").arg("SET").arg("redislock.notify").arg("watched:*")).await;
    }
    let watcher = c.redlock(settings());
    let mut changes = Box::pin(watcher.watch_subscribed(&record, MS(100)).await);
    let rl = c.redlock(settings());
    let permit = rl.try_permit("watched", 3, TTL).await.expect("a permit of 3");
    let granted = next_change(&mut changes).await;
    assert_eq!((granted.kind, granted.token), (ChangeKind::Grant, permit.token.expect("a token")), "{granted:?}");
    assert!(admin_resize(&c, "watched", 2).await, "resized while held");
    let resized = next_change(&mut changes).await;
    assert_eq!((resized.kind, resized.value.as_deref()), (ChangeKind::Resize, Some("2")), "{resized:?}");
    rl.release(&permit).await.expect("release");
    let released = next_change(&mut changes).await;
    assert_eq!((released.kind, released.token), (ChangeKind::Release, granted.token), "{released:?}");
}

async fn next_change(changes: &mut (impl futures::Stream<Item = Result<redlock::Change, Error>> + Unpin)) -> redlock::Change {
    use futures::StreamExt;
    let item = tokio::time::timeout(Duration::from_secs(10), changes.next()).await.expect("a change in time");
    item.expect("the watch goes on").expect("a change, not an error")
}

async fn admin_resize(c: &Cluster, pool: &str, limit: u32) -> bool {
    c.redlock(settings()).resize(pool, limit).await.expect("resize").held
}
