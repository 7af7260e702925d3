//! The quorum's guarantees when connections change under the client
//! (issue 38): what production networks do (idle-timeout resets, CLIENT
//! KILL, addresses that move, slow links, waiters that die) must never let
//! one server count twice or two holders in, and must cost the line
//! milliseconds, not a ttl.

mod common;

use std::time::{Duration, Instant};

use common::forwarder::Forwarder;
use common::{eventually, relaxed, Cluster};
use redlock::{Error, Redlock, Settings};

/// `LOCK.ACQUIRE key owner ttl` straight on one server: a holder the
/// client under test cannot see.
async fn hold_directly(c: &Cluster, servers: &[usize], key: &str, owner: &str) {
    for &i in servers {
        let granted = c.servers[i].ok(redis::cmd("LOCK.ACQUIRE").arg(key).arg(owner).arg(60_000)).await;
        assert!(matches!(granted, redis::Value::Int(_)), "server {i} granted {owner}: {granted:?}");
    }
}

/// An entry of the list reaches server 4 through a forwarder; another
/// client holds the lock on servers 2, 3 and 4. The forwarder is then
/// retargeted to server 0 (a VIP or DNS name that moved) and its
/// connections reset: the entry now leads to a server the list already
/// has. Counted twice, servers 0 and 1 would pose as three and grant a
/// second holder; identified on the new connection, the entry is refused
/// (named with the entry it repeats) and nothing is granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_address_that_moves_to_another_listed_server_never_counts_twice() {
    let c = Cluster::start(5);
    let vip = Forwarder::start(c.servers[4].port).await;
    let mut urls: Vec<String> = c.urls().into_iter().take(4).collect();
    urls.push(vip.url());
    let rl = Redlock::new(&urls, relaxed()).expect("client");
    // First contact: every entry identified, the fifth as server 4.
    let lock = rl.try_lock("moved", Duration::from_secs(10)).await.expect("uncontended");
    rl.release(&lock).await.expect("release");

    hold_directly(&c, &[2, 3, 4], "moved", "the-other-holder").await;
    vip.retarget(c.servers[0].port);
    vip.reset();
    for attempt in 0..3 {
        match rl.try_lock("moved", Duration::from_secs(10)).await {
            Ok(lock) => panic!("attempt {attempt}: granted while another holds 3 of 5 real servers: {:?}", lock.instances),
            Err(Error::Config(message)) => {
                assert!(message.contains("are the same server (run_id "), "{message}");
                assert!(message.contains(&c.servers[0].addr()), "the entry it repeats named: {message}");
            }
            Err(other) => panic!("attempt {attempt}: expected the repeated server named, got {other}"),
        }
    }
    // Waiting changes nothing: the line's and the waits' connections are
    // identified too.
    let waited = rl.lock_until("moved", Duration::from_secs(10), Some(Instant::now() + Duration::from_millis(800))).await;
    assert!(waited.is_err(), "granted through the line while another holds 3 of 5: {waited:?}");
    let on_server0 = c.servers[0].info("moved").await;
    assert!(on_server0.is_none(), "nothing left held on server 0: {on_server0:?}");

    // Moved back, the entry is server 4 again and counts once more.
    vip.retarget(c.servers[4].port);
    vip.reset();
    for i in [2, 3, 4] {
        c.servers[i].ok(redis::cmd("LOCK.RELEASE").arg("moved").arg("the-other-holder")).await;
    }
    let lock = rl.lock_until("moved", Duration::from_secs(10), Some(Instant::now() + Duration::from_secs(5))).await.expect("moved back");
    assert_eq!(lock.instances.iter().filter(|o| matches!(o.outcome, redlock::Outcome::Granted { .. })).count(), 5, "{:?}", lock.instances);
    rl.release(&lock).await.expect("release");
}

/// Two entries of the list are down, and one is an alias of server 0
/// behind a link so slow that identifying it never finishes within the
/// request timeout. Another client holds servers 2, 3 and 4. Through the
/// line, a wait on the alias would be granted by server 0 a second time:
/// three "grants" from two real servers. Every wait's connection is
/// identified first, so the alias never counts and nothing is granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_alias_never_counts_through_the_line() {
    let c = Cluster::start(5);
    let slow = Forwarder::start_delayed(c.servers[0].port, 150..=150).await;
    let down = |port: u16| format!("redis://127.0.0.1:{port}");
    let closed = [common::free_port(), common::free_port()];
    let urls = vec![c.servers[0].url(), c.servers[1].url(), down(closed[0]), down(closed[1]), slow.url()];
    let settings = Settings { request_timeout: Duration::from_millis(100), ..relaxed() };
    let rl = Redlock::new(&urls, settings).expect("client");
    // The line of a resource lives on one entry chosen by its name (and
    // the servers' ports): over several names, some lines are on servers 0
    // and 1, whose waiters wait on the lock through every entry.
    for i in 0..8 {
        let resource = format!("slow-alias-{i}");
        hold_directly(&c, &[2, 3, 4], &resource, "the-other-holder").await;
        let waited = rl.lock_until(&resource, Duration::from_secs(3), Some(Instant::now() + Duration::from_millis(800))).await;
        assert!(waited.is_err(), "{resource}: granted by two real servers counted as three: {waited:?}");
    }
    assert!(slow.accepted() > 0, "the alias was asked");
}

/// The CLIENT ids of `lock`'s bound connections, per server.
fn bound_ids(lock: &redlock::Lock) -> Vec<u64> {
    lock.instances.iter().filter_map(|o| o.connection).collect()
}

/// A live holder keeps a session-bound lock (the default lock-delay) under
/// a guard; its connections are reset on every server (CLIENT KILL, as an
/// idle timeout or a proxy restart would) at the worst moment, right after
/// an extension, and a waiter waits at the head of the line. The holder's
/// lost signal must come before the waiter's grant, every trial; and the
/// grant must still come well before the lease would have ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_holder_learns_of_the_loss_before_the_next_grant() {
    let c = Cluster::start(5);
    let settings = Settings { release_on_disconnect: true, request_timeout: Duration::from_millis(100), ..relaxed() };
    let ttl = Duration::from_millis(1_500);
    let delay = settings.lock_delay_for(ttl);
    assert!(delay >= settings.extension_interval(ttl) + settings.request_timeout, "the default lock-delay {delay:?}");
    for trial in 0..4 {
        let resource = format!("reset-{trial}");
        let holder = c.redlock(settings.clone());
        let guard = holder.guard(&resource, ttl, None).await.expect("guard");
        let waiter = c.redlock(relaxed());
        let waiting = {
            let (waiter, resource) = (waiter.clone(), resource.clone());
            tokio::spawn(async move {
                let lock = waiter.lock_until(&resource, Duration::from_secs(5), Some(Instant::now() + Duration::from_secs(15))).await;
                (lock, Instant::now())
            })
        };
        eventually(Duration::from_secs(10), "the waiter at the head", || async {
            c.infos(&resource).await.iter().all(|i| i.as_ref().is_some_and(|i| i.waiters == 1))
        })
        .await;
        // Right after an extension: the longest the holder can go unaware.
        let extended = guard.lock().acquired_at;
        eventually(Duration::from_secs(3), "an extension", || async { guard.lock().acquired_at > extended }).await;
        let ids = bound_ids(&guard.lock());
        assert_eq!(ids.len(), 5, "bound on every server: {:?}", guard.lock().instances);
        let reset = Instant::now();
        for (server, id) in c.servers.iter().zip(&ids) {
            server.ok(redis::cmd("CLIENT").arg("KILL").arg("ID").arg(*id)).await;
        }
        tokio::time::timeout(Duration::from_secs(5), guard.lost()).await.expect("the lost signal");
        let lost = guard.lost_at().expect("lost at");
        let (granted, granted_at) = waiting.await.expect("waiter task");
        let granted = granted.expect("the waiter is granted after the lock-delay");
        println!("trial {trial}: lost {:?}, granted {:?} after the reset", lost - reset, granted_at - reset);
        assert!(
            lost < granted_at,
            "trial {trial}: granted {:?} before the holder learned of the loss {:?}",
            granted_at - reset,
            lost - reset
        );
        assert!(
            granted_at - reset < ttl,
            "trial {trial}: granted {:?} after the reset, not before the lease would end",
            granted_at - reset
        );
        waiter.release(&granted).await.expect("release");
        drop(guard);
    }
}

/// A lock-delay stands: the holder's connection to one server is reset, so
/// that server cuts the lease to the lock-delay; the holder's next
/// extension on its new connection must not set it back to a full ttl.
/// The holder then dies: that server frees the lock after the lock-delay,
/// not a whole lease later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extension_on_a_new_connection_never_revives_a_cut_lease() {
    let c = Cluster::start(5);
    let settings = Settings { release_on_disconnect: true, lock_delay: Some(Duration::from_millis(1_500)), ..relaxed() };
    let holder = c.redlock(settings);
    let ttl = Duration::from_secs(6);
    let lock = holder.lock("cut", ttl).await.expect("lock");
    let id = lock.instances.first().and_then(|o| o.connection).expect("bound on server 0");
    c.servers[0].ok(redis::cmd("CLIENT").arg("KILL").arg("ID").arg(id)).await;
    eventually(Duration::from_secs(3), "the lease cut to the lock-delay", || async { c.servers[0].pttl("cut").await <= 1_500 }).await;
    // The extension reaches a quorum (the other four), but not server 0.
    let extended = holder.extend(&lock, ttl).await.expect("four of five extend");
    assert!(!extended.instances.first().is_some_and(|o| o.outcome == redlock::Outcome::Done), "{:?}", extended.instances);
    let pttl = c.servers[0].pttl("cut").await;
    assert!(pttl <= 1_500, "the cut lease was revived to {pttl} ms");
    drop(holder);
    drop(extended);
    drop(lock);
    eventually(Duration::from_secs(3), "server 0 frees it after the lock-delay", || async { c.servers[0].info("cut").await.is_none() })
        .await;
}

/// `redlock run --wait` waits second in line and is killed -9; a waiter
/// behind it must be granted milliseconds after the holder releases, not
/// when the killed waiter's place in line would have run out (its ttl).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_killed_in_line_costs_the_next_milliseconds() {
    let c = Cluster::start(5);
    let rl = c.redlock(relaxed());
    let ttl = Duration::from_secs(20);
    let holder = rl.lock("killed-waiter", ttl).await.expect("holder");
    let servers = c.urls().join(",");
    let mut dying = common::cli::redlock(&servers, &["run", "killed-waiter", "--ttl", "20s", "--wait", "30s", "--", "true"])
        .spawn()
        .expect("spawn redlock run");
    // It is at the head: waiting on the lock itself on every server.
    eventually(Duration::from_secs(10), "the dying waiter at the head", || async {
        c.infos("killed-waiter").await.iter().all(|i| i.as_ref().is_some_and(|i| i.waiters == 1))
    })
    .await;
    let next = {
        let rl = rl.clone();
        tokio::spawn(async move {
            let lock = rl.lock_until("killed-waiter", ttl, Some(Instant::now() + Duration::from_secs(30))).await;
            (lock, Instant::now())
        })
    };
    // The next waiter queued behind it for the place in line.
    eventually(Duration::from_secs(10), "the next waiter in line", || async {
        c.infos("redlock:line:killed-waiter").await.iter().any(|i| i.as_ref().is_some_and(|i| i.waiters == 1))
    })
    .await;
    dying.start_kill().expect("kill -9");
    let _ = dying.wait().await;
    let released = Instant::now();
    rl.release(&holder).await.expect("release");
    let (lock, at) = tokio::time::timeout(Duration::from_secs(15), next).await.expect("granted").expect("task");
    let lock = lock.expect("the next waiter");
    let took = at - released;
    println!("granted {took:?} after the release");
    assert!(took < Duration::from_secs(2), "the killed waiter held the line {took:?} (its place's ttl is 20 s)");
    rl.release(&lock).await.expect("release");
}
