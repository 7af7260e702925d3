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

/// A module master with a module replica (both with a 2 s restart
/// quarantine), three sentinels; what the sentinels say of it.
struct SentinelGroup {
    nodes: Vec<common::Server>,
    sentinels: Vec<common::Server>,
}

impl SentinelGroup {
    async fn start() -> SentinelGroup {
        let quarantine = ["quarantine", "2000"];
        let master =
            common::Server::start_opts(common::Opts { module_args: vec!["quarantine".into(), "2000".into()], ..Default::default() });
        let replica = common::Server::start_opts(common::Opts::replica_of(master.port, &quarantine));
        eventually(Duration::from_secs(15), "the replica in sync", || async {
            info_field(&replica, "replication", "master_link_status").await.as_deref() == Some("up")
        })
        .await;
        let sentinels: Vec<common::Server> = (0..3).map(|_| common::Server::start_opts(common::Opts::sentinel_of(master.port))).collect();
        let group = SentinelGroup { nodes: vec![master, replica], sentinels };
        // Each sentinel knows the replica and the two other sentinels: a
        // failover can be agreed on.
        for s in &group.sentinels {
            eventually(Duration::from_secs(20), "the sentinels to know each other and the replica", || async {
                let replicas = s.cmd(redis::cmd("SENTINEL").arg("REPLICAS").arg("mymaster")).await;
                let others = s.cmd(redis::cmd("SENTINEL").arg("SENTINELS").arg("mymaster")).await;
                matches!((replicas, others), (Ok(redis::Value::Array(r)), Ok(redis::Value::Array(o))) if r.len() == 1 && o.len() == 2)
            })
            .await;
        }
        group
    }

    fn url(&self) -> String {
        let hosts: Vec<String> = self.sentinels.iter().map(|s| format!("127.0.0.1:{}", s.port)).collect();
        format!("redis+sentinel://{}/mymaster", hosts.join(","))
    }

    /// The node the sentinels name as master now, once all agree on it.
    async fn master(&self) -> usize {
        let mut named = Vec::new();
        for s in &self.sentinels {
            let reply = s.ok(redis::cmd("SENTINEL").arg("GET-MASTER-ADDR-BY-NAME").arg("mymaster")).await;
            let port = match reply {
                redis::Value::Array(parts) => parts.get(1).and_then(|p| redis::from_redis_value::<u16>(p.clone()).ok()),
                _ => None,
            };
            named.push(port);
        }
        match named.first().copied().flatten() {
            Some(port) if named.iter().all(|p| *p == Some(port)) => self.nodes.iter().position(|n| n.port == port).unwrap_or(usize::MAX),
            _ => usize::MAX,
        }
    }
}

/// `INFO section`'s `field`; `None` also when the server cannot be asked
/// now (a sentinel reconfiguring a node kills its clients, ours too).
async fn info_field(s: &common::Server, section: &str, field: &str) -> Option<String> {
    let client = redis::Client::open(s.url()).ok()?;
    let asking = async {
        let mut conn = client.get_multiplexed_async_connection().await.ok()?;
        redis::cmd("INFO").arg(section).query_async::<String>(&mut conn).await.ok()
    };
    let text = tokio::time::timeout(common::DIRECT_TIMEOUT, asking).await.ok()??;
    text.lines().find_map(|l| l.strip_prefix(&format!("{field}:")).map(|v| v.trim().to_string()))
}

/// A quorum member given as a Sentinel-managed master follows failovers:
/// a coordinated `SENTINEL FAILOVER`, then a kill -9 of the new master.
/// Each next lock lands on the master the sentinels name, with a larger
/// token, and never before the lease of the lock taken before the
/// failover ran out (the promoted replica's quarantine, or the lock it
/// replicated): no two holders, and a fenced resource refuses nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_member_follows_failovers_without_two_holders() {
    let mut group = SentinelGroup::start().await;
    let fence = common::fence::Fence::start();
    let rl = Redlock::new(&[group.url()], relaxed()).expect("a Sentinel member");
    let ttl = Duration::from_secs(2);
    let a = rl.lock_until("sentineled", ttl, Some(Instant::now() + Duration::from_secs(10))).await.expect("A");
    let token_a = a.token.expect("token");
    assert!(group.nodes[0].info("sentineled").await.is_some(), "granted on the master the sentinels name");
    assert!(fence.write(token_a, "A").await, "A's write");

    // 1. A coordinated failover: the replica has A's lock (replicated).
    group.sentinels[0].ok(redis::cmd("SENTINEL").arg("FAILOVER").arg("mymaster")).await;
    eventually(Duration::from_secs(30), "the sentinels to name the replica", || async { group.master().await == 1 }).await;
    let b = rl.lock_until("sentineled", ttl, Some(Instant::now() + Duration::from_secs(20))).await.expect("B after the failover");
    let a_ends = a.acquired_at + a.validity;
    assert!(b.acquired_at >= a_ends || Instant::now() >= a_ends, "B granted while A's lease ran");
    assert!(group.nodes[1].info("sentineled").await.is_some(), "B granted on the promoted replica");
    let token_b = b.token.expect("token");
    assert!(token_b > token_a, "B's token {token_b} after A's {token_a}");
    assert!(fence.write(token_b, "B").await, "B's write");
    assert_eq!(b.instances.len(), 1, "one member, counted once: {:?}", b.instances);

    // 2. The new master killed -9: the sentinels promote the old one.
    eventually(Duration::from_secs(30), "the old master to follow the new one", || async {
        info_field(&group.nodes[0], "replication", "master_link_status").await.as_deref() == Some("up")
    })
    .await;
    group.nodes[1].kill9();
    let c = rl.lock_until("sentineled", ttl, Some(Instant::now() + Duration::from_secs(40))).await.expect("C after the kill");
    assert_eq!(group.master().await, 0, "the sentinels name the old master again");
    let token_c = c.token.expect("token");
    assert!(token_c > token_b, "C's token {token_c} after B's {token_b}");
    assert!(fence.write(token_c, "C").await, "C's write");
    assert_eq!(fence.state().await.refused, 0, "no write refused: the holders never overlapped");
    rl.release(&c).await.expect("release");
}

/// Members on Unix sockets count as servers like TCP ones: a quorum of
/// three socket members takes, extends and releases a lock, waits in line
/// through them, and a socket and the TCP address of one server in the
/// same list are one server (identified by run_id), refused as listed
/// twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unix_socket_members_count_once_like_tcp_ones() {
    let c = Cluster::start_opts(vec![common::Opts { unix_socket: true, ..Default::default() }; 3]);
    let urls: Vec<String> = c.servers.iter().map(common::Server::socket_url).collect();
    let rl = Redlock::new(&urls, relaxed()).expect("socket members");
    let lock = rl.lock_until("socketed", Duration::from_secs(5), Some(Instant::now() + Duration::from_secs(5))).await.expect("lock");
    assert_eq!(lock.instances.iter().filter(|o| matches!(o.outcome, redlock::Outcome::Granted { .. })).count(), 3, "{:?}", lock.instances);
    let lock = rl.extend(&lock, Duration::from_secs(5)).await.expect("extend");
    for s in &c.servers {
        assert!(s.info("socketed").await.is_some(), "held on {}", s.addr());
    }
    // A second waiter through the sockets waits in line and gets it at the release.
    let next = {
        let rl = rl.clone();
        tokio::spawn(async move { rl.lock_until("socketed", Duration::from_secs(5), Some(Instant::now() + Duration::from_secs(10))).await })
    };
    eventually(Duration::from_secs(10), "the waiter at the head", || async {
        c.infos("socketed").await.iter().all(|i| i.as_ref().is_some_and(|i| i.waiters == 1))
    })
    .await;
    rl.release(&lock).await.expect("release");
    let next = next.await.expect("task").expect("the waiter after the release");
    rl.release(&next).await.expect("release");

    let mixed = Redlock::new(&[urls[0].clone(), c.servers[0].url(), c.servers[1].url()], relaxed()).expect("spelled apart");
    match mixed.try_lock("socketed", Duration::from_secs(5)).await {
        Err(Error::Config(message)) => assert!(message.contains("are the same server (run_id "), "{message}"),
        other => panic!("a socket and the TCP address of one server: expected them refused as one, got {other:?}"),
    }
}
