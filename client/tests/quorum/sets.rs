//! Several resources at once through the quorum (`try_lock_all`,
//! `lock_all_until`): all or nothing with one token, extended, released
//! and lost as one lock, a waiting set not overtaken on a member it waits
//! for, and the dining philosophers across five servers with slow links
//! and a server killed midway: no fork held twice. Sets held with holds
//! bound to their connections while those connections are reset and
//! re-pointed, and many tasks taking sets through one shared handle: no
//! member held twice.

// The serial guard is held through a test on purpose: each test has its
// own runtime on its own thread, and the guard only keeps them one at a time.
#![allow(clippy::await_holding_lock)]

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::forwarder::Forwarder;
use common::history::History;
use common::{relaxed, Cluster};
use redlock::{Error, Redlock, Resources, Settings};

fn set(names: &[&str]) -> Resources {
    Resources::of(names).expect("a valid set")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_is_taken_whole_or_not_at_all_with_one_token() {
    let c = Cluster::start(5);
    let rl = c.redlock(relaxed());
    let ttl = Duration::from_secs(10);
    // Earlier tokens of each member, so the set's token must exceed both.
    let a = rl.try_lock("a", ttl).await.expect("a free");
    rl.release(&a).await.expect("release a");
    let b = rl.try_lock("b", ttl).await.expect("b free");

    match rl.try_lock_all(&set(&["a", "b"]), ttl).await {
        Err(Error::NotAcquired { .. }) => {}
        other => panic!("a set with a held member must not be granted: {other:?}"),
    }
    assert!(c.infos("a").await.iter().all(Option::is_none), "a refused set takes nothing: a stays free everywhere");

    rl.release(&b).await.expect("release b");
    let lock = rl.try_lock_all(&set(&["a", "b"]), ttl).await.expect("both free");
    let token = lock.token.expect("module mode: a token");
    assert!(token > a.token.unwrap_or(0) && token > b.token.unwrap_or(0), "the set's token exceeds every earlier token of each member");
    assert_eq!(lock.resource, "a, b");
    assert_eq!(lock.resources.names(), &["a".to_string(), "b".to_string()]);
    for key in ["a", "b"] {
        let infos = c.infos(key).await;
        let held = infos.iter().flatten().filter(|i| i.owner == lock.owner && i.token == Some(token)).count();
        assert!(held >= rl.quorum(), "{key}: held by the set's owner with its token on a quorum, {infos:?}");
    }
    // A single-key acquisition of a member is refused while the set holds.
    assert!(rl.try_lock("b", ttl).await.is_err(), "a member of a held set is held");

    let extended = rl.extend(&lock, Duration::from_secs(20)).await.expect("extend the whole set");
    for key in ["a", "b"] {
        assert!(c.infos(key).await.iter().flatten().all(|i| i.pttl > 10_000), "{key}: extended with the set");
    }
    let released = rl.release(&extended).await.expect("release");
    assert_eq!(released.released, 5, "released whole on every server");
    for key in ["a", "b"] {
        assert!(c.infos(key).await.iter().all(Option::is_none), "{key}: free after the set's release");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_partly_lost_is_lost() {
    let c = Cluster::start(5);
    let rl = c.redlock(relaxed());
    let lock = rl.try_lock_all(&set(&["x", "y", "z"]), Duration::from_secs(10)).await.expect("free");
    // Member y ends on every server (as a lease that ran out there would):
    // the set is no longer held whole anywhere.
    for s in &c.servers {
        s.ok(redis::cmd("LOCK.RELEASE").arg("y").arg(&lock.owner)).await;
    }
    match rl.extend(&lock, Duration::from_secs(10)).await {
        Err(Error::QuorumLost { .. }) => {}
        other => panic!("an extension of a set missing a member must fail: {other:?}"),
    }
    // A guard's lost signal fires the same way.
    let guard = rl.keep(rl.try_lock_all(&set(&["p", "q"]), Duration::from_millis(900)).await.expect("free"));
    let owner = guard.lock().owner.clone();
    for s in &c.servers {
        s.ok(redis::cmd("LOCK.RELEASE").arg("q").arg(&owner)).await;
    }
    tokio::time::timeout(Duration::from_secs(5), guard.lost()).await.expect("the lost signal fires when a member is lost");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_and_a_permit_are_refused_as_requests() {
    let c = Cluster::start(3);
    let rl = c.redlock(relaxed());
    assert!(Resources::of(&["a", "a"]).is_err(), "a resource named twice");
    let req = redlock::hold::Request {
        resources: set(&["a", "b"]),
        ttl: Duration::from_secs(1),
        kind: redlock::Kind::Permit { limit: 3, count: 1 },
        patience: redlock::hold::Patience::Once,
    };
    match redlock::hold::take(&rl, &req, |_| {}).await {
        Err(Error::Config(msg)) => assert!(msg.contains("one semaphore"), "{msg}"),
        other => panic!("permits of several resources: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_later_waiter_does_not_overtake_a_waiting_set() {
    let c = Cluster::start(5);
    let holder = c.redlock(relaxed());
    let ttl = Duration::from_secs(10);
    let deadline = || Some(Instant::now() + Duration::from_secs(8));
    let a = holder.try_lock("a", ttl).await.expect("a free");

    // The set waits for a (held) and b (free); then a single waiter asks
    // for b alone, which is free on the servers.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let set_client = c.redlock(relaxed());
    let tx_set = tx.clone();
    tokio::spawn(async move {
        let got = set_client.lock_all_until(&set(&["a", "b"]), ttl, deadline()).await;
        let _ = tx_set.send(("set", got.as_ref().map(|l| l.token).ok().flatten(), Instant::now()));
        if let Ok(l) = got {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let _ = set_client.release(&l).await;
        }
    });
    // The set stands in both lines before the single waiter arrives.
    common::eventually(Duration::from_secs(5), "the set in the lines of a and b", || async {
        let mut in_line = 0;
        for r in ["a", "b"] {
            in_line += c.infos(&format!("redlock:line:{r}")).await.iter().flatten().count();
        }
        in_line == 2
    })
    .await;
    let single = c.redlock(relaxed());
    tokio::spawn(async move {
        let got = single.lock_until("b", ttl, deadline()).await;
        let _ = tx.send(("b alone", got.as_ref().map(|l| l.token).ok().flatten(), Instant::now()));
        if let Ok(l) = got {
            let _ = single.release(&l).await;
        }
    });
    // b is free, yet the single waiter waits: the set is ahead on b.
    let early = tokio::time::timeout(Duration::from_millis(700), rx.recv()).await;
    assert!(early.is_err(), "nobody is granted while a is held: {early:?}");
    holder.release(&a).await.expect("release a");
    let mut order = Vec::new();
    while order.len() < 2 {
        let (who, token, _) = tokio::time::timeout(Duration::from_secs(8), rx.recv()).await.expect("both served").expect("open");
        assert!(token.is_some(), "{who} granted");
        order.push(who);
    }
    assert_eq!(order, vec!["set", "b alone"], "the set, which came first, is granted first");
}

/// Philosopher `i` of `n` eats with forks `i` and `i + 1` (mod n), the set
/// taken in the quorum's line, until `until`; every meal is recorded in
/// both forks' histories. Returns the meals eaten and the waits that
/// timed out.
async fn dine(rl: Redlock, i: usize, n: usize, forks: Arc<Vec<History>>, until: Instant) -> (u32, u32) {
    let (left, right) = (i, (i + 1) % n);
    let names = [format!("fork:{left}"), format!("fork:{right}")];
    let both = Resources::of(&names).expect("two forks");
    let (mut meals, mut timed_out) = (0, 0);
    while Instant::now() < until {
        match rl.lock_all_until(&both, Duration::from_secs(3), Some(Instant::now() + Duration::from_secs(20))).await {
            Ok(lock) => {
                let granted = Instant::now();
                tokio::time::sleep(Duration::from_millis(3)).await;
                let done = Instant::now();
                let token = lock.token.unwrap_or(0);
                for fork in [left, right] {
                    if let Some(h) = forks.get(fork) {
                        h.record(format!("philosopher {i}"), token, granted, done);
                    }
                }
                let _ = rl.release(&lock).await;
                meals += 1;
            }
            Err(_) => timed_out += 1,
        }
    }
    (meals, timed_out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dining_philosophers_across_five_servers_with_slow_links_and_a_kill() {
    let _one_at_a_time = common::serial();
    let mut c = Cluster::start(5);
    // Two servers answer through slow links (1-8 ms per reply).
    let mut proxies = Vec::new();
    for s in &c.servers[..2] {
        proxies.push(Forwarder::start_delayed(s.port, 1..=8).await);
    }
    let mut urls: Vec<String> = proxies.iter().map(Forwarder::url).collect();
    urls.extend(c.servers[2..].iter().map(|s| s.url()));
    let settings = Settings { connect_timeout: Duration::from_secs(1), ..relaxed() };
    let n = 5;
    let forks: Arc<Vec<History>> = Arc::new((0..n).map(|_| History::new()).collect());
    let until = Instant::now() + Duration::from_secs(6);
    let mut tasks = Vec::new();
    for i in 0..n {
        let rl = Redlock::new(&urls, settings.clone()).expect("handle");
        tasks.push(tokio::spawn(dine(rl, i, n, Arc::clone(&forks), until)));
    }
    // Midway, one of the direct servers dies (SIGKILL): four of five
    // remain, a quorum, and the lines that lived there move on.
    tokio::time::sleep(Duration::from_secs(2)).await;
    c.servers[4].kill9();
    let mut meals = Vec::new();
    for t in tasks {
        let (m, timed_out) = t.await.expect("philosopher");
        assert_eq!(timed_out, 0, "no philosopher's wait timed out");
        meals.push(m);
    }
    for (f, h) in forks.iter().enumerate() {
        h.check().assert_exclusive(&format!("fork {f}"));
    }
    let (least, most) = (meals.iter().copied().min().unwrap_or(0), meals.iter().copied().max().unwrap_or(0));
    assert!(least > 0, "every philosopher ate: {meals:?}");
    assert!(least * 4 >= most, "the least fed ate at least a quarter of the most fed: {meals:?}");
    eprintln!("philosophers' meals through the quorum: {meals:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_permits_are_taken_in_one_hold_and_wait_without_being_passed() {
    let c = Cluster::start(5);
    let rl = c.redlock(relaxed());
    let ttl = Duration::from_secs(10);
    let three = rl.try_permits("pool", 5, 3, ttl).await.expect("3 of 5 free");
    // Three permit slots in one hold, with the semaphore's limit record;
    // named after its slots.
    assert_eq!(three.resources.len(), 4, "three permit slots and the limit record in one hold: {:?}", three.resources);
    assert_eq!(three.resources.names().last().map(String::as_str), Some("pool:permits"));
    assert_eq!(three.resource.split(", ").filter(|k| k.starts_with("pool:permit:")).count(), 3, "{}", three.resource);
    assert!(rl.try_permits("pool", 5, 3, ttl).await.is_err(), "3 + 3 of 5 is refused");
    let two = rl.try_permits("pool", 5, 2, ttl).await.expect("3 + 2 of 5 fits");
    assert!(rl.try_permit("pool", 5, ttl).await.is_err(), "all five taken");
    assert!(rl.try_permits("pool", 5, 6, ttl).await.is_err_and(|e| matches!(e, Error::Config(_))), "more permits than the limit");
    rl.release(&two).await.expect("release 2");
    rl.release(&three).await.expect("release 3");

    // Of two permits, one is held; a request for both waits (at the head of
    // both permits' lines, queued on both in the servers), and a later
    // request for one, which would fit now, waits behind it.
    let one = rl.try_permit("pair", 2, ttl).await.expect("1 of 2 free");
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let deadline = || Some(Instant::now() + Duration::from_secs(8));
    let waiter = c.redlock(relaxed());
    let tx2 = tx.clone();
    tokio::spawn(async move {
        let got = waiter.permits_until("pair", 2, 2, ttl, deadline()).await;
        let _ = tx2.send(("both", got.is_ok()));
        if let Ok(l) = got {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let _ = waiter.release(&l).await;
        }
    });
    let free = (0..2).map(|slot| redlock::semaphore::permit_key("pair", slot)).find(|k| *k != one.resource).expect("the free permit");
    common::eventually(Duration::from_secs(5), "the request for both queued on the free permit on every server", || async {
        let mut queued = 0;
        for s in &c.servers {
            // Nobody holds the free permit (LOCK.INFO is nil): its queue,
            // read with LOCK.WAITERS, holds the request for both.
            queued += usize::from(matches!(s.ok(redis::cmd("LOCK.WAITERS").arg(&free)).await, redis::Value::Array(w) if w.len() == 1));
        }
        queued == c.servers.len()
    })
    .await;
    let later = c.redlock(relaxed());
    tokio::spawn(async move {
        let got = later.permits_until("pair", 2, 1, ttl, deadline()).await;
        let _ = tx.send(("one", got.is_ok()));
        if let Ok(l) = got {
            let _ = later.release(&l).await;
        }
    });
    let early = tokio::time::timeout(Duration::from_millis(800), rx.recv()).await;
    assert!(early.is_err(), "with a permit free, neither the request for both nor the later one for one is granted: {early:?}");
    rl.release(&one).await.expect("release the held permit");
    let mut order = Vec::new();
    while order.len() < 2 {
        let (who, granted) = tokio::time::timeout(Duration::from_secs(8), rx.recv()).await.expect("both served").expect("open");
        assert!(granted, "{who} granted");
        order.push(who);
    }
    assert_eq!(order, vec!["both", "one"], "the request for both, first in line, is served first");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_keeps_its_first_places_while_it_waits_for_the_rest() {
    let c = Cluster::start(5);
    let rl = c.redlock(relaxed());
    let servers = rl.servers();
    let rank = |name: &str| {
        let server = rl.line_server(name);
        let mut sorted = servers.clone();
        sorted.sort();
        sorted.iter().position(|s| *s == server).unwrap_or(usize::MAX)
    };
    // Two resources whose lines live on different servers, "first"'s line
    // before "second"'s in the order every client takes a set's places in.
    let names: Vec<String> = (0..200).map(|i| format!("r{i}")).collect();
    let (first, second) = names
        .iter()
        .flat_map(|a| names.iter().map(move |b| (a, b)))
        .find(|(a, b)| rank(a) < rank(b))
        .expect("two resources with lines on different servers");
    let long = Duration::from_secs(10);
    let deadline = || Some(Instant::now() + Duration::from_secs(15));
    // `second` is held, and someone waits first in its line.
    let holder = rl.try_lock(second, long).await.expect("free");
    let head = c.redlock(relaxed());
    let second_name = second.clone();
    let head_task = tokio::spawn(async move {
        let got = head.lock_until(&second_name, long, deadline()).await;
        if let Ok(l) = &got {
            let _ = head.release(l).await;
        }
        got.is_ok()
    });
    common::eventually(Duration::from_secs(5), "a waiter first in the second line", || async {
        c.infos(&format!("redlock:line:{second}")).await.iter().flatten().count() == 1
    })
    .await;
    // The set, with a ttl far shorter than its wait: it takes its place in
    // the first line, then queues in the second.
    let set_client = c.redlock(relaxed());
    let set_names = set(&[first.as_str(), second.as_str()]);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let tx_set = tx.clone();
    tokio::spawn(async move {
        let got = set_client.lock_all_until(&set_names, Duration::from_millis(600), deadline()).await;
        let _ = tx_set.send("set");
        if let Ok(l) = got {
            let _ = set_client.release(&l).await;
        }
    });
    common::eventually(Duration::from_secs(5), "the set's place in the first line", || async {
        c.infos(&format!("redlock:line:{first}")).await.iter().flatten().count() == 1
    })
    .await;
    // Three of the set's ttls later, its place in the first line stands:
    // a newcomer for `first` alone (free on the servers) waits behind it.
    tokio::time::sleep(Duration::from_millis(1800)).await;
    let newcomer = c.redlock(relaxed());
    let first_name = first.clone();
    tokio::spawn(async move {
        let got = newcomer.lock_until(&first_name, long, deadline()).await;
        let _ = tx.send("newcomer");
        if let Ok(l) = got {
            let _ = newcomer.release(&l).await;
        }
    });
    let early = tokio::time::timeout(Duration::from_millis(700), rx.recv()).await;
    assert!(early.is_err(), "the newcomer does not pass the set in the first line: {early:?}");
    rl.release(&holder).await.expect("release second");
    assert!(head_task.await.expect("head"), "the second line's head is served");
    let mut order = Vec::new();
    while order.len() < 2 {
        order.push(tokio::time::timeout(Duration::from_secs(10), rx.recv()).await.expect("served").expect("open"));
    }
    assert_eq!(order, vec!["set", "newcomer"]);
}

/// What one contender for sets did.
#[derive(Debug, Default)]
struct Tally {
    held: u32,
    /// Holds that ended with their lost signal (an extension refused on a
    /// remade connection, or the validity over).
    lost: u32,
    failed: Vec<String>,
}

/// The ttl of the sets held while their links fail: extended every 300 ms.
const SESSION_TTL: Duration = Duration::from_millis(900);

/// Contender `name` takes `members` as one set (`SESSION_TTL`, waiting up
/// to 5 s) until `until`, keeps it under a guard 10–60 ms or, one hold in
/// three, 600–1200 ms (past extensions and the lock-delay), and records
/// every hold in each member's history: from the grant to the release, or
/// to the moment the lost signal fired when it fired first.
async fn hold_sets_while_links_fail(rl: Redlock, name: String, members: Vec<usize>, histories: Arc<Vec<History>>, until: Instant) -> Tally {
    let names: Vec<String> = members.iter().map(|m| format!("member:{m}")).collect();
    let resources = Resources::of(&names).expect("a set");
    let mut tally = Tally::default();
    while Instant::now() < until {
        let lock = match rl.lock_all_until(&resources, SESSION_TTL, Some(Instant::now() + Duration::from_secs(5))).await {
            Ok(lock) => lock,
            Err(e) => {
                tally.failed.push(e.to_string());
                continue;
            }
        };
        let granted = Instant::now();
        let token = lock.token.unwrap_or(0);
        let guard = rl.keep(lock);
        let hold = {
            let mut rng = rand::rng();
            match rand::Rng::random_ratio(&mut rng, 1, 3) {
                true => rand::Rng::random_range(&mut rng, 600..=1200),
                false => rand::Rng::random_range(&mut rng, 10..=60),
            }
        };
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(hold)) => {}
            () = guard.lost() => {}
        }
        let now = Instant::now();
        let lost_at = guard.lost_at();
        let end = lost_at.map_or(now, |at| at.min(now)).max(granted);
        for m in &members {
            if let Some(h) = histories.get(*m) {
                h.record(name.as_str(), token, granted, end);
            }
        }
        tally.held += 1;
        tally.lost += u32::from(lost_at.is_some());
        let _ = guard.release().await;
    }
    rl.settle().await;
    tally
}

/// Holds bound to their connections (`release_on_disconnect`, the default
/// lock-delay: one extension interval, a request timeout and the drift),
/// taken as sets by four contenders around a ring of four members
/// ({0,1}, {1,2}, {2,3}, {3,0}), each contender on a handle of its own,
/// every server reached through a forwarder. For 6 s, every 150–400 ms,
/// the forwarders of 1–5 servers either reset every connection through
/// them, or are re-pointed (to a second forwarder in front of the same
/// server, or back) and reset, so that every connection is made again
/// by another path. A server frees the holds of a closed connection after
/// the lock-delay; a holder learns of it at its next extension, refused
/// on the remade connection, before then. No two holds of any member
/// overlap (a lost hold ends when its signal fired), and every contender
/// completed holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_bound_sets_stay_apart_while_their_connections_are_reset_and_repointed() {
    let _one_at_a_time = common::serial();
    let c = Cluster::start(5);
    // The address each client knows, and another path to the same server.
    let fronts: Vec<Forwarder> = futures::future::join_all(c.servers.iter().map(|s| Forwarder::start(s.port))).await;
    let others: Vec<Forwarder> = futures::future::join_all(c.servers.iter().map(|s| Forwarder::start(s.port))).await;
    let urls: Vec<String> = fronts.iter().map(Forwarder::url).collect();
    let settings = Settings { release_on_disconnect: true, request_timeout: Duration::from_millis(250), ..relaxed() };
    let ttl = SESSION_TTL;
    assert!(
        settings.lock_delay_for(ttl) > settings.extension_interval(ttl) + settings.request_timeout,
        "a holder learns of a cut before its lock-delay ends: {:?}",
        settings.lock_delay_for(ttl)
    );
    let n = 4;
    let histories: Arc<Vec<History>> = Arc::new((0..n).map(|_| History::new()).collect());
    let until = Instant::now() + Duration::from_secs(6);
    let mut contenders = Vec::new();
    for i in 0..n {
        let rl = Redlock::new(&urls, settings.clone()).expect("handle");
        contenders.push(tokio::spawn(hold_sets_while_links_fail(
            rl,
            format!("contender {i}"),
            vec![i, (i + 1) % n],
            Arc::clone(&histories),
            until,
        )));
    }
    let (mut resets, mut repoints) = (0, 0);
    let mut through_other = [false; 5];
    while Instant::now() < until {
        let (pause, chosen, repoint) = {
            let mut rng = rand::rng();
            let mut servers: Vec<usize> = (0..c.servers.len()).collect();
            rand::seq::SliceRandom::shuffle(servers.as_mut_slice(), &mut rng);
            servers.truncate(rand::Rng::random_range(&mut rng, 1..=c.servers.len()));
            (rand::Rng::random_range(&mut rng, 150..=400), servers, rand::Rng::random_bool(&mut rng, 0.5))
        };
        tokio::time::sleep(Duration::from_millis(pause)).await;
        for &s in &chosen {
            if repoint {
                through_other[s] = !through_other[s];
                fronts[s].retarget(if through_other[s] { others[s].port } else { c.servers[s].port });
            }
            fronts[s].reset();
            others[s].reset();
        }
        if repoint {
            repoints += 1;
        } else {
            resets += 1;
        }
    }
    let mut tallies = Vec::new();
    for t in contenders {
        tallies.push(t.await.expect("contender"));
    }
    for (m, h) in histories.iter().enumerate() {
        h.check().assert_exclusive(&format!("member {m}"));
    }
    let held: Vec<u32> = tallies.iter().map(|t| t.held).collect();
    let lost: u32 = tallies.iter().map(|t| t.lost).sum();
    let failed: Vec<usize> = tallies.iter().map(|t| t.failed.len()).collect();
    let rerouted: u64 = others.iter().map(Forwarder::accepted).sum();
    println!(
        "session-bound sets: {resets} resets, {repoints} re-points ({rerouted} connections by the other path); \
         holds per contender {held:?}, {lost} ended lost; failed acquisitions {failed:?}, first {:?}",
        tallies.iter().find_map(|t| t.failed.first())
    );
    assert!(held.iter().all(|&h| h > 0), "every contender completed holds: {held:?}");
    assert!(resets > 0 && repoints > 0 && rerouted > 0, "the faults happened: {resets} resets, {repoints} re-points, {rerouted} rerouted");
    assert!(lost > 0, "no hold was lost: the resets never cut a hold that outlived an extension");
}

/// 24 tasks of one process share one `Redlock` handle (its connections,
/// its lines' connections) and take overlapping sets of eight members,
/// two or three each, half of them naming their members in reverse
/// order, on five servers, for 4 s: lock_all_until (a 10 s deadline),
/// hold 2 ms, release. No two holds of any member overlap, every task is
/// served, and an acquisition fails only by running out of its deadline
/// while the members are held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_tasks_on_one_handle_take_overlapping_sets_apart() {
    let _one_at_a_time = common::serial();
    let c = Cluster::start(5);
    let rl = c.redlock(relaxed());
    let members = 8;
    let tasks = 24;
    let histories: Arc<Vec<History>> = Arc::new((0..members).map(|_| History::new()).collect());
    let until = Instant::now() + Duration::from_secs(4);
    let mut running = Vec::new();
    for t in 0..tasks {
        let mut mine = vec![t % members, (t + 1) % members];
        if t % 2 == 1 {
            mine.push((t + 3) % members);
        }
        if t % 4 >= 2 {
            mine.reverse();
        }
        let (rl, histories) = (rl.clone(), Arc::clone(&histories));
        running.push(tokio::spawn(async move {
            let names: Vec<String> = mine.iter().map(|m| format!("shared-handle:{m}")).collect();
            let resources = Resources::of(&names).expect("a set");
            let (mut held, mut errors) = (0u32, Vec::new());
            while Instant::now() < until {
                match rl.lock_all_until(&resources, Duration::from_secs(2), Some(Instant::now() + Duration::from_secs(10))).await {
                    Ok(lock) => {
                        let granted = Instant::now();
                        tokio::time::sleep(Duration::from_millis(2)).await;
                        let released = Instant::now();
                        for m in &mine {
                            if let Some(h) = histories.get(*m) {
                                h.record(format!("task {t}"), lock.token.unwrap_or(0), granted, released);
                            }
                        }
                        let _ = rl.release(&lock).await;
                        held += 1;
                    }
                    Err(e) => errors.push(e),
                }
            }
            (held, errors)
        }));
    }
    let (mut held, mut timed_out) = (Vec::new(), 0);
    for (t, task) in running.into_iter().enumerate() {
        let (h, errors) = task.await.expect("task");
        for e in errors {
            match e {
                Error::NotAcquired { why: redlock::NotGranted::Held, .. } => timed_out += 1,
                other => panic!("task {t}: an acquisition failed otherwise than by its deadline: {other}"),
            }
        }
        held.push(h);
    }
    rl.settle().await;
    for (m, h) in histories.iter().enumerate() {
        h.check().assert_exclusive(&format!("member {m}"));
    }
    println!("{tasks} tasks on one handle: holds per task {held:?}, {timed_out} waits ran out of their deadline");
    assert!(held.iter().all(|&h| h > 0), "every task was served: {held:?}");
}
